// SPDX-License-Identifier: MIT
/*
 * djinnd's configuration (djinnd/config.c): files written to a temporary
 * directory, read by the real parser (inih underneath), then the command
 * line's overrides, the checks across keys, printing and reloading.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "array_size.h"
#include "clock.h"
#include "config.h"
#include "log.h"
#include "names.h"

static char dir[] = "/tmp/test_config.XXXXXX";
static char path[256];

/* Write @text to the test's file; its path. */
static const char *file(const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	return path;
}

/* Load @text into a fresh config: the return value. */
static int load(struct djinnd_config *c, const char *text)
{
	config_init(c);
	return config_load(c, file(text));
}

/* @c->err is "PATH:LINE: @msg..." */
static void assert_err(const struct djinnd_config *c, unsigned int line,
		       const char *msg)
{
	char want[512];

	snprintf(want, sizeof(want), "%s:%u: %s", path, line, msg);
	if (strncmp(c->err, want, strlen(want))) {
		print_error("error '%s'\n want '%s...'\n", c->err, want);
		fail();
	}
}

static void test_defaults(void **state)
{
	struct djinnd_config c;

	config_init(&c);
	assert_string_equal(c.srv.backend, "cpu");
	assert_int_equal(c.srv.cpu_mem, 2ull << 30);
	assert_int_equal(c.srv.gpu_mem, 0);
	assert_int_equal(c.srv.lease_default_ns, 10 * NSEC_PER_SEC);
	assert_int_equal(c.srv.warn_pct, 80);
	assert_int_equal(c.srv.crit_pct, 95);
	assert_int_equal(c.srv.nr_listen, 1);
	assert_non_null(strstr(c.srv.listen[0], "djinnd.sock"));
	assert_null(c.srv.admin_group);
	assert_null(c.srv.metrics);
	assert_null(c.path);
	assert_int_equal(c.log_level, LOG_INFO);
	assert_int_equal(config_validate(&c), 0);
	config_free(&c);
}

static void test_good_file(void **state)
{
	struct djinnd_config c;

	assert_int_equal(load(&c, "; a comment\n"
				  "[server]\n"
				  "listen = unix:/tmp/a.sock\n"
				  "listen = tcp:0.0.0.0:7411 ; inline comment\n"
				  "plain_tcp = any\n"
				  "listen = tcp:[::1]:7412\n"
				  "admin_socket = /tmp/admin.sock\n"
				  "admin_group = root\n"
				  "max_sessions = 100\n"
				  "model_dir = /srv/models\n"
				  "[device]\n"
				  "backend = cpu\n"
				  "devices = 0\n"
				  "threads = 3\n"
				  "compute_threads = 1\n"
				  "[memory]\n"
				  "budget = 512M\n"
				  "gpu_budget = 40G\n"
				  "pressure_warning = 60\n"
				  "pressure_critical = 90\n"
				  "[lease]\n"
				  "default = 30s\n"
				  "min = 500ms\n"
				  "max = 2h\n"
				  "[log]\n"
				  "level = debug\n"
				  "file = /var/log/djinnd.log\n"
				  "[metrics]\n"
				  "listen = tcp:127.0.0.1:9464\n"),
			 0);
	assert_int_equal(c.srv.nr_listen, 3);
	assert_string_equal(c.srv.listen[0], "unix:/tmp/a.sock");
	assert_string_equal(c.srv.listen[1], "tcp:0.0.0.0:7411");
	assert_string_equal(c.srv.listen[2], "tcp:[::1]:7412");
	assert_string_equal(c.srv.admin_socket, "/tmp/admin.sock");
	assert_string_equal(c.srv.admin_group, "root");
	assert_int_equal(c.srv.max_sessions, 100);
	assert_string_equal(c.srv.model_dir, "/srv/models");
	assert_int_equal(c.srv.devices, 1);
	assert_int_equal(c.srv.threads, 3);
	assert_int_equal(c.srv.compute_threads, 1);
	assert_int_equal(c.srv.cpu_mem, 512ull << 20);
	assert_int_equal(c.srv.gpu_mem, 40ull << 30);
	assert_int_equal(c.srv.warn_pct, 60);
	assert_int_equal(c.srv.crit_pct, 90);
	assert_int_equal(c.srv.lease_default_ns, 30 * NSEC_PER_SEC);
	assert_int_equal(c.srv.lease_min_ns, 500 * NSEC_PER_MSEC);
	assert_int_equal(c.srv.lease_max_ns, 7200 * NSEC_PER_SEC);
	assert_int_equal(c.log_level, LOG_DEBUG);
	assert_string_equal(c.log_file, "/var/log/djinnd.log");
	assert_string_equal(c.srv.metrics, "tcp:127.0.0.1:9464");
	assert_string_equal(c.path, path);
	assert_int_equal(config_validate(&c), 0);
	config_free(&c);
}

/* Each bad file: the error, naming its line. */
static void test_bad_files(void **state)
{
	static const struct {
		const char *text;
		unsigned int line;
		const char *msg;
	} bad[] = {
		{ "[server]\nbogus = 1\n", 2,
		  "unknown key 'bogus' in [server]" },
		{ "[server]\n[nope]\nx = 1\n", 3, "unknown section [nope]" },
		{ "listen = unix:/a\n", 1, "'listen' before any [section]" },
		{ "[server]\nlisten\n", 2, "syntax error" },
		{ "[server\n", 1, "syntax error" },
		{ "[server]\nlisten = ftp:x\n", 2,
		  "server.listen: 'ftp:x': want unix:PATH, tcp:HOST:PORT or tls:HOST:PORT" },
		{ "[server]\nlisten = tcp:h:0\n", 2,
		  "server.listen: 'tcp:h:0'" },
		{ "[server]\nlisten = tcp:h:65536\n", 2, "server.listen" },
		{ "[server]\nlisten = tcp:::1:80\n", 2,
		  "server.listen: 'tcp:::1:80': write an IPv6 host as [ADDR]" },
		{ "[server]\nlisten = tcp:[::1:80\n", 2, "server.listen" },
		{ "[server]\nlisten = unix:\n", 2,
		  "server.listen: empty socket path" },
		{ "[server]\nlisten = unix:/a\nlisten = unix:/a\n", 3,
		  "server.listen: unix:/a twice" },
		{ "[server]\nadmin_socket = /"
		  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		  "\n",
		  2, "server.admin_socket: socket path longer than 107" },
		{ "[server]\nadmin_group = no-such-group-here\n", 2,
		  "server.admin_group: no group 'no-such-group-here'" },
		{ "[server]\nadmin_group = a b\n", 2,
		  "server.admin_group: 'a b' is not a group name" },
		{ "[server]\nmax_sessions = 0\n", 2,
		  "server.max_sessions: '0': want a number from 1 to" },
		{ "[server]\nmax_sessions = 12x\n", 2, "server.max_sessions" },
		{ "[server]\nmax_sessions = -1\n", 2, "server.max_sessions" },
		{ "[server]\nmodel_dir = models\n", 2,
		  "server.model_dir: 'models' is not an absolute path" },
		{ "[device]\nbackend = tpu\n", 2,
		  "device.backend: 'tpu': want cpu or cuda" },
		{ "[device]\nbackend = cuda\n", 2,
		  "device.backend: cuda is not built into this djinnd" },
		{ "[device]\ndevices = 0,0\n", 2, "device.devices: '0,0'" },
		{ "[device]\ndevices = 64\n", 2, "device.devices: '64'" },
		{ "[device]\ndevices = 1,\n", 2, "device.devices: '1,'" },
		{ "[device]\ncompute_threads = 17\n", 2,
		  "device.compute_threads: '17'" },
		{ "[memory]\nbudget = 2X\n", 2,
		  "memory.budget: '2X': want a size" },
		{ "[memory]\nbudget = 1K\n", 2, "memory.budget: '1K'" },
		{ "[memory]\nbudget = 99999999999999999999\n", 2,
		  "memory.budget" },
		{ "[memory]\nbudget = 20000000T\n", 2, "memory.budget" },
		{ "[memory]\ngpu_budget = 4Q\n", 2,
		  "memory.gpu_budget: '4Q': want a size" },
		{ "[memory]\npressure_warning = 101\n", 2,
		  "memory.pressure_warning: '101': want a number from 1 to 100 "
		  "(percent)" },
		{ "[lease]\ndefault = 10\n", 2,
		  "lease.default: '10': want a time from 1ms to 24h with its "
		  "unit" },
		{ "[lease]\ndefault = 10 s\n", 2, "lease.default: '10 s'" },
		{ "[lease]\nmax = 25h\n", 2, "lease.max: '25h'" },
		{ "[log]\nlevel = loud\n", 2, "log.level: 'loud': want err," },
		{ "[metrics]\nlisten = unix:/m.sock\n", 2,
		  "metrics.listen: 'unix:/m.sock': want tcp:HOST:PORT" },
		{ "[metrics]\nlisten = tcp:127.0.0.1\n", 2, "metrics.listen" },
		{ "[log]\nlevel = info\n\nlevel = debug\n", 4,
		  "log.level: already set on line 2" },
		{ "[sched]\npolicy = fifo\n", 2,
		  "sched.policy: 'fifo': want semantic, lru or static" },
		{ "[sched]\nquantum = 0ms\n", 2,
		  "sched.quantum: '0ms': want a time from 1ms to 1s" },
		{ "[sched]\nadmit_wait = 2m\n", 2,
		  "sched.admit_wait: '2m': want a time from 0s to 1m" },
		{ "[sched]\nswap_margin = 99\n", 2,
		  "sched.swap_margin: '99': want a number from 100 to 10000" },
		{ "[sched]\nbogus = 1\n", 2, "unknown key 'bogus' in [sched]" },
		{ "[tenant.alice]\nshare = 0\n", 2,
		  "tenant.alice.share: '0': want a number from 1 to 1000" },
		{ "[tenant.alice]\nshare = 1001\n", 2,
		  "tenant.alice.share: '1001'" },
		{ "[tenant.alice]\nshare = -3\n", 2, "tenant.alice.share" },
		{ "[tenant.alice]\nweight = 2\n", 2,
		  "unknown key 'weight' in [tenant.alice] (want share, uids, gids, client_kernels, memory, swap, guaranteed, sessions, connections, inflight or lease_max)" },
		{ "[tenant.]\nshare = 2\n", 2,
		  "[tenant.]: a tenant name has 1 to 63 bytes" },
		{ "[tenant.alice]\nshare = 2\nshare = 3\n", 3,
		  "tenant.alice.share: already set on line 2" },
		{ "[model.m]\nbudget = lots\n", 2,
		  "model.m.budget: 'lots': want 0 (none) or a size from 1M to "
		  "1024T, such as 6G" },
		{ "[model.m]\nbudget = 6X\n", 2, "model.m.budget: '6X'" },
		{ "[model.m]\nbudget = -6M\n", 2, "model.m.budget: '-6M'" },
		{ "[model.m]\nbudget = 512K\n", 2, "model.m.budget: '512K'" },
		{ "[model.m]\nbudget = 2048T\n", 2, "model.m.budget: '2048T'" },
		{ "[model.m]\nbudget = 6M\nbudget = 8M\n", 3,
		  "model.m.budget: already set on line 2" },
		{ "[model.m]\nring_slots = 0\n", 2,
		  "model.m.ring_slots: '0': want a number from 1 to 8 (the "
		  "layers its ring holds, 2 unless set)" },
		{ "[model.m]\nring_slots = 9\n", 2, "model.m.ring_slots: '9'" },
		{ "[model.m]\nring_slots = two\n", 2,
		  "model.m.ring_slots: 'two'" },
		{ "[model.m]\nbudget = 6M\nring_slots = 1\nring_slots = 2\n", 4,
		  "model.m.ring_slots: already set on line 3" },
		{ "[model.m]\nslots = 2\n", 2,
		  "unknown key 'slots' in [model.m] (want readable, budget, "
		  "ring_slots or max_batch)" },
		{ "[model.m]\nmax_batch = 0\n", 2,
		  "model.m.max_batch: '0': want a number from 1 to 64" },
		{ "[device]\nmax_batch = 65\n", 2, "device.max_batch" },
		{ "[model..m]\nbudget = 6M\n", 2, "[model..m]: a model name" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct djinnd_config c;

		assert_int_equal(load(&c, bad[i].text), -EINVAL);
		assert_err(&c, bad[i].line, bad[i].msg);
		config_free(&c);
	}
}

/* A bad line changes nothing after it is refused: the keys before it
 * are set, the failed key keeps its value. */
static void test_bad_value_keeps_old(void **state)
{
	struct djinnd_config c;

	assert_int_equal(load(&c, "[memory]\npressure_warning = 70\n"
				  "pressure_critical = 200\n"),
			 -EINVAL);
	assert_int_equal(c.srv.warn_pct, 70);
	assert_int_equal(c.srv.crit_pct, 95);
	config_free(&c);
}

static void test_long_line(void **state)
{
	char text[400];
	struct djinnd_config c;

	snprintf(text, sizeof(text), "[server]\nmodel_dir = /%0300d\n", 0);
	assert_int_equal(load(&c, text), -EINVAL);
	assert_err(&c, 2, "line longer than");
	config_free(&c);
}

static void test_missing_and_dir(void **state)
{
	struct djinnd_config c;
	char missing[300];

	config_init(&c);
	snprintf(missing, sizeof(missing), "%s/none.conf", dir);
	assert_int_equal(config_load(&c, missing), -ENOENT);
	assert_non_null(strstr(c.err, "none.conf: No such file"));
	assert_int_equal(config_load(&c, dir), -EISDIR);
	config_free(&c);
	/* An empty file: the defaults. */
	assert_int_equal(load(&c, ""), 0);
	assert_int_equal(c.srv.cpu_mem, 2ull << 30);
	config_free(&c);
}

/* The command line over the file: one key replaces, a flag's listen
 * replaces the file's whole list. */
static void test_overrides(void **state)
{
	struct djinnd_config c;

	assert_int_equal(load(&c, "[server]\nlisten = unix:/tmp/a\n"
				  "listen = unix:/tmp/b\n"
				  "[memory]\nbudget = 1G\n"),
			 0);
	assert_int_equal(c.srv.nr_listen, 2);
	assert_int_equal(config_set(&c, "memory.budget", "64M"), 0);
	assert_int_equal(c.srv.cpu_mem, 64ull << 20);
	/* Twice on the command line: the last wins. */
	assert_int_equal(config_set(&c, "memory.budget", "128M"), 0);
	assert_int_equal(c.srv.cpu_mem, 128ull << 20);
	assert_int_equal(config_set(&c, "server.listen", "unix:/tmp/c"), 0);
	assert_int_equal(config_set(&c, "server.listen", "tcp::1"), 0);
	assert_int_equal(c.srv.nr_listen, 2);
	assert_string_equal(c.srv.listen[0], "unix:/tmp/c");
	assert_string_equal(c.srv.listen[1], "tcp::1");

	assert_int_equal(config_set(&c, "memory.budget", "lots"), -EINVAL);
	assert_string_equal(c.err, "command line: memory.budget: 'lots': want "
				   "a size from 1M to 1024T, such as 512M or "
				   "16G");
	assert_int_equal(c.srv.cpu_mem, 128ull << 20);
	assert_int_equal(config_set(&c, "memory.nope", "1"), -EINVAL);
	assert_non_null(strstr(c.err, "unknown key 'memory.nope'"));
	assert_int_equal(config_set(&c, "budget", "1G"), -EINVAL);
	/* Empty strings unset the optional ones. */
	assert_int_equal(config_set(&c, "metrics.listen", "tcp::9464"), 0);
	assert_string_equal(c.srv.metrics, "tcp::9464");
	assert_int_equal(config_set(&c, "metrics.listen", ""), 0);
	assert_null(c.srv.metrics);
	config_free(&c);
}

static void test_validate(void **state)
{
	struct djinnd_config c;

	/* Blamed on the later of the two keys. */
	assert_int_equal(load(&c, "[memory]\npressure_critical = 50\n"
				  "pressure_warning = 60\n"),
			 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 3,
		   "memory.pressure_warning: pressure_warning (60%) "
		   "must be below pressure_critical (50%)");
	config_free(&c);

	assert_int_equal(load(&c, "[memory]\npressure_warning = 96\n"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2, "memory.pressure_warning");
	config_free(&c);

	assert_int_equal(load(&c, "[lease]\nmax = 1s\n"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2,
		   "lease.max: want min <= default <= max "
		   "(10 ms, 10000 ms, 1000 ms)");
	config_free(&c);

	/* The command line is later than any file line. */
	assert_int_equal(load(&c, "[lease]\nmin = 1s\n"), 0);
	assert_int_equal(config_set(&c, "lease.default", "500ms"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_string_equal(c.err, "command line: lease.default: want min <= "
				   "default <= max (1000 ms, 500 ms, "
				   "3600000 ms)");
	config_free(&c);

	/* Two CPU devices (Documentation/djinnd.rst, "Devices"). */
	assert_int_equal(load(&c, "[device]\ndevices = 0,1\n"), 0);
	assert_int_equal(config_validate(&c), 0);
	assert_int_equal(c.srv.devices, 3);
	config_free(&c);

	assert_int_equal(load(&c, "[server]\nlisten = unix:/tmp/s\n"
				  "admin_socket = /tmp/s\n"),
			 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 3, "server.admin_socket: /tmp/s is also a listen");
	config_free(&c);

	/* Plain TCP beyond loopback only when plain_tcp says any. */
	assert_int_equal(load(&c, "[server]\nlisten = tcp:0.0.0.0:7411\n"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2,
		   "server.listen: tcp:0.0.0.0:7411 is not loopback, and plain "
		   "TCP authenticates no one");
	config_free(&c);
	assert_int_equal(load(&c, "[server]\nlisten = tcp:[::1]:7411\n"
				  "listen = tcp::7412\n"
				  "listen = tcp:127.0.0.2:7413\n"
				  "listen = tcp:localhost:7414\n"),
			 0);
	assert_int_equal(config_validate(&c), 0);
	config_free(&c);
	assert_int_equal(load(&c, "[server]\nplain_tcp = everyone\n"), -EINVAL);
	assert_err(&c, 2, "server.plain_tcp: 'everyone': want loopback or any");
	config_free(&c);

	/* A TLS listener may bind any address, with a certificate, its key
	 * and a way to know clients. */
	assert_int_equal(load(&c, "[server]\nlisten = tls:0.0.0.0:7443\n"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2,
		   "server.listen: tls:0.0.0.0:7443 needs tls.certificate");
	config_free(&c);
	assert_int_equal(load(&c, "[server]\nlisten = tls:0.0.0.0:7443\n"
				  "[tls]\ncertificate = /c.pem\n"),
			 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2, "server.listen: tls:0.0.0.0:7443 needs tls.key");
	config_free(&c);
	assert_int_equal(load(&c,
			      "[server]\nlisten = tls:0.0.0.0:7443\n"
			      "[tls]\ncertificate = /c.pem\nkey = /k.pem\n"),
			 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2,
		   "server.listen: tls:0.0.0.0:7443 needs tls.client_ca (the "
		   "CA of client certificates) or tls.tokens");
	config_free(&c);
	assert_int_equal(load(&c, "[server]\nlisten = tls:0.0.0.0:7443\n"
				  "[tls]\ncertificate = /c.pem\nkey = /k.pem\n"
				  "tokens = /t\n"),
			 0);
	assert_int_equal(config_validate(&c), 0);
	config_free(&c);
	assert_int_equal(load(&c, "[server]\nlisten = tls:host\n"), -EINVAL);
	assert_err(
		&c, 2,
		"server.listen: 'tls:host': want tls:HOST:PORT, PORT 1-65535");
	config_free(&c);
	assert_int_equal(load(&c, "[tls]\ntenant_from = ou\n"), -EINVAL);
	assert_err(&c, 2,
		   "tls.tenant_from: 'ou': want cn, san-dns, san-email or "
		   "san-uri");
	config_free(&c);
	assert_int_equal(load(&c, "[tls]\nktls = on\n"), -EINVAL);
	assert_err(&c, 2, "tls.ktls: 'on': want auto or off");
	config_free(&c);

	/* The cpu runs one graph at a time; a GPU (or auto) may run more. */
	assert_int_equal(load(&c, "[device]\ncompute_threads = 2\n"), 0);
	assert_int_equal(config_validate(&c), -EINVAL);
	assert_err(&c, 2,
		   "device.compute_threads: '2': the cpu backend runs one "
		   "graph at a time");
	config_free(&c);
	assert_int_equal(load(&c, "[device]\nbackend = auto\n"
				  "compute_threads = 16\n"),
			 0);
	assert_int_equal(config_validate(&c), 0);
	assert_int_equal(c.srv.compute_threads, 16);
	config_free(&c);
}

static void test_sizes_durations(void **state)
{
	uint64_t v;

	assert_int_equal(parse_size("65536", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(parse_size("2G", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(parse_size("3MiB", &v), 0);
	assert_int_equal(v, 3ull << 20);
	assert_int_equal(parse_size("1X", &v), -EINVAL);
	assert_int_equal(parse_size("1TB", &v), 0);
	assert_int_equal(v, 1ull << 40);
	assert_int_equal(parse_size("", &v), -EINVAL);
	assert_int_equal(parse_size("-1", &v), -EINVAL);
	assert_int_equal(parse_size("16777216T", &v), -EINVAL);
	assert_int_equal(config_parse_duration("250ms", &v), 0);
	assert_int_equal(v, 250 * NSEC_PER_MSEC);
	assert_int_equal(config_parse_duration("5m", &v), 0);
	assert_int_equal(v, 300 * NSEC_PER_SEC);
	assert_int_equal(config_parse_duration("5", &v), -EINVAL);
	assert_int_equal(config_parse_duration("5sec", &v), -EINVAL);
	assert_int_equal(config_parse_duration("99999999999999999h", &v),
			 -EINVAL);
}

/* What --check-config prints reads back to the same settings. */
static void test_print_reads_back(void **state)
{
	struct djinnd_config a, b;
	char *out = NULL, *again = NULL;
	size_t len = 0, len2 = 0;
	FILE *f;

	assert_int_equal(load(&a, "[server]\nlisten = unix:/tmp/p1\n"
				  "listen = tcp:[::1]:7411\n"
				  "[device]\ndevices = 0\n"
				  "[memory]\nbudget = 1536M\n"
				  "[lease]\ndefault = 1500ms\n"
				  "[metrics]\nlisten = tcp::9464\n"),
			 0);
	f = open_memstream(&out, &len);
	config_print(&a, f);
	fclose(f);
	assert_non_null(strstr(out, "budget = 1536M\t; "));
	assert_non_null(strstr(out, "default = 1500ms\t; "));
	assert_non_null(strstr(out, "listen = tcp:[::1]:7411\t; "));
	assert_int_equal(load(&b, out), 0);
	f = open_memstream(&again, &len2);
	config_print(&b, f);
	fclose(f);
	/* The same, but for where each came from. */
	for (char *p = out, *q = again; *p || *q;) {
		size_t n = strcspn(p, ";"), m = strcspn(q, ";");

		assert_int_equal(n, m);
		assert_memory_equal(p, q, n);
		p += n;
		q += m;
		p += strcspn(p, "\n");
		q += strcspn(q, "\n");
	}
	free(out);
	free(again);
	config_free(&a);
	config_free(&b);
}

/* [sched] and [tenant.NAME]: read, overridden, printed, reloaded. */
static void test_sched(void **state)
{
	struct djinnd_config c, next;
	unsigned int mask, restart;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	config_init(&c);
	assert_int_equal(c.srv.sched.policy, DJINN_SCHED_SEMANTIC);
	assert_int_equal(c.srv.sched.quantum_ns, SCHED_QUANTUM_DEFAULT);
	assert_int_equal(c.srv.sched.admit_wait_ns, SCHED_ADMIT_WAIT_DEFAULT);
	assert_int_equal(c.srv.nr_shares, 0);
	config_free(&c);
	assert_int_equal(load(&c, "[sched]\npolicy = static\nquantum = 5ms\n"
				  "admit_wait = 0s\nmax_io_wait = 10m\n"
				  "swap_margin = 150\n"
				  "[tenant.alice]\nshare = 4\n"
				  "[tenant.bob]\nshare = 1\n"),
			 0);
	assert_int_equal(c.srv.sched.policy, DJINN_SCHED_STATIC);
	assert_int_equal(c.srv.sched.quantum_ns, 5 * NSEC_PER_MSEC);
	assert_int_equal(c.srv.sched.admit_wait_ns, 0);
	assert_int_equal(c.srv.sched.max_io_wait_ns, 600 * NSEC_PER_SEC);
	assert_int_equal(c.srv.sched.swap_margin_pct, 150);
	assert_int_equal(c.srv.nr_shares, 2);
	assert_string_equal(c.srv.shares[0].tenant, "alice");
	assert_int_equal(c.srv.shares[0].share, 4);
	/* the flags: --sched-policy and -o tenant.NAME.share */
	assert_int_equal(config_set(&c, "sched.policy", "lru"), 0);
	assert_int_equal(c.srv.sched.policy, DJINN_SCHED_LRU);
	assert_int_equal(config_set(&c, "tenant.bob.share", "7"), 0);
	assert_int_equal(c.srv.shares[1].share, 7);
	assert_int_equal(config_set(&c, "tenant.carol.share", "0"), -EINVAL);
	assert_non_null(strstr(c.err, "tenant.carol.share: '0'"));
	assert_int_equal(c.srv.nr_shares, 2);
	/* printed as a file that reads back */
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	config_print(&c, f);
	fclose(f);
	assert_non_null(strstr(buf, "policy = lru"));
	assert_non_null(strstr(buf, "[tenant.alice]\nshare = 4"));
	assert_non_null(strstr(buf, "[tenant.bob]\nshare = 7"));
	free(buf);
	/* a reload: shares and quantum apply, the policy needs a restart */
	assert_int_equal(load(&next, "[sched]\npolicy = semantic\n"
				     "quantum = 2ms\n"
				     "[tenant.alice]\nshare = 9\n"),
			 0);
	mask = config_diff(&c, &next, &restart);
	assert_int_equal(mask, CONFIG_RELOAD_SCHED);
	assert_int_equal(restart, 1);
	config_apply(&c, &next, mask);
	config_free(&next);
	assert_int_equal(c.srv.sched.quantum_ns, 2 * NSEC_PER_MSEC);
	assert_int_equal(c.srv.sched.policy, DJINN_SCHED_LRU);
	assert_int_equal(c.srv.nr_shares, 1);
	assert_int_equal(c.srv.shares[0].share, 9);
	config_free(&c);
}

/* SIGHUP: what changed, which of it applies now. */
static void test_diff_apply(void **state)
{
	struct djinnd_config now, next;
	unsigned int mask, restart;

	assert_int_equal(load(&now, "[server]\nlisten = unix:/tmp/d1\n"), 0);
	assert_int_equal(load(&next, "[server]\nlisten = unix:/tmp/d2\n"), 0);
	mask = config_diff(&now, &next, &restart);
	assert_int_equal(mask, 0);
	assert_int_equal(restart, 1);
	config_free(&next);

	assert_int_equal(load(&next, "[server]\nlisten = unix:/tmp/d1\n"
				     "[log]\nlevel = debug\n"
				     "[memory]\npressure_warning = 50\n"
				     "budget = 1G\n"
				     "[lease]\ndefault = 3s\n"),
			 0);
	mask = config_diff(&now, &next, &restart);
	assert_int_equal(mask, CONFIG_RELOAD_LOG | CONFIG_RELOAD_PRESSURE |
				       CONFIG_RELOAD_LEASE);
	assert_int_equal(restart, 1); /* budget */
	config_apply(&now, &next, mask);
	config_free(&next);
	assert_int_equal(now.log_level, LOG_DEBUG);
	assert_int_equal(now.srv.warn_pct, 50);
	assert_int_equal(now.srv.crit_pct, 95);
	assert_int_equal(now.srv.lease_default_ns, 3 * NSEC_PER_SEC);
	assert_int_equal(now.srv.cpu_mem, 2ull << 30); /* needs a restart */
	/* Applied: the same file again changes nothing. */
	assert_int_equal(load(&next, "[server]\nlisten = unix:/tmp/d1\n"
				     "[log]\nlevel = debug\n"
				     "[memory]\npressure_warning = 50\n"
				     "[lease]\ndefault = 3s\n"),
			 0);
	assert_int_equal(config_diff(&now, &next, &restart), 0);
	assert_int_equal(restart, 0);
	config_free(&next);
	config_free(&now);
}

/* [tenant.NAME] uids and gids: read (numbers and names), printed so that
 * they read back, set twice in one file refused, diffed and applied. */
static void test_tenant_ids(void **state)
{
	struct djinnd_config a, b;
	unsigned int mask, restart;
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	assert_int_equal(load(&a, "[tenant.t]\nuids = 7, root,9\n"
				  "gids = 0\nshare = 2\nclient_kernels = yes\n"
				  "[tenant.u]\ngids = 12\n"),
			 0);
	assert_int_equal(config_validate(&a), 0);
	assert_int_equal(a.srv.nr_tmaps, 2);
	assert_string_equal(a.srv.tmaps[0].tenant, "t");
	assert_int_equal(a.srv.tmaps[0].nr_uids, 3);
	assert_int_equal(a.srv.tmaps[0].uids[1], 0); /* root */
	assert_int_equal(a.srv.tmaps[0].uids[2], 9);
	assert_int_equal(a.srv.tmaps[0].nr_gids, 1);
	assert_int_equal(a.srv.tmaps[1].nr_uids, 0);
	assert_int_equal(a.srv.tmaps[1].gids[0], 12);
	f = open_memstream(&out, &len);
	config_print(&a, f);
	fclose(f);
	assert_non_null(strstr(out, "[tenant.t]\nuids = 7,0,9\t; "));
	assert_non_null(strstr(out, "gids = 0\t; "));
	assert_non_null(strstr(out, "client_kernels = yes\t; "));
	assert_true(a.srv.tmaps[0].client_kernels);
	assert_false(a.srv.tmaps[1].client_kernels);
	assert_int_equal(load(&b, out), 0);
	assert_int_equal(config_diff(&a, &b, &restart), 0);
	free(out);
	config_free(&b);

	/* another mapping reloads, for connections from then on */
	assert_int_equal(load(&b, "[tenant.t]\nuids = 7\n"), 0);
	mask = config_diff(&a, &b, &restart);
	assert_true(mask & CONFIG_RELOAD_TENANTS);
	config_apply(&a, &b, mask);
	config_free(&b);
	assert_int_equal(a.srv.nr_tmaps, 1);
	assert_int_equal(a.srv.tmaps[0].nr_uids, 1);
	assert_null(a.srv.tmaps[0].uids_file);
	config_free(&a);

	assert_int_equal(load(&a, "[tenant.t]\nuids = 1\nuids = 2\n"), -EINVAL);
	assert_err(&a, 3, "tenant.t.uids: already set on line 2");
	config_free(&a);
	assert_int_equal(load(&a, "[tenant.t]\nuids = 1\n"
				  "[tenant.v]\nuids = 3,1\n"),
			 0);
	assert_int_equal(config_validate(&a), -EINVAL);
	assert_err(&a, 4, "tenant.v.uids: uid 1 is tenant t's already");
	config_free(&a);
}

/* The budget of model @name in @c: its bytes, its slots in *@slots;
 * -1 when it has none. */
static long long budget_of(const struct djinnd_config *c, const char *name,
			   unsigned int *slots)
{
	for (unsigned int i = 0; i < c->srv.nr_budgets; i++)
		if (!strcmp(c->srv.budgets[i].model, name)) {
			*slots = c->srv.budgets[i].slots;
			return (long long)c->srv.budgets[i].bytes;
		}
	return -1;
}

/* [model.NAME] budget and ring_slots: read beside readable, overridden
 * (0: none), a ring without a budget refused where it was set, printed
 * so that they read back, diffed and applied. */
static void test_model_budgets(void **state)
{
	struct djinnd_config a, b;
	unsigned int mask, restart, slots = 0;
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	assert_int_equal(load(&a, "[model.llama-7b]\nbudget = 6G\n"
				  "ring_slots = 1\n"
				  "[model.open]\nreadable = yes\n"
				  "budget = 14MiB\n"
				  "[model.tiny]\nbudget = 0\n"),
			 0);
	assert_int_equal(config_validate(&a), 0);
	assert_int_equal(a.srv.nr_budgets, 2);
	assert_int_equal(budget_of(&a, "llama-7b", &slots), 6ll << 30);
	assert_int_equal(slots, 1);
	assert_int_equal(budget_of(&a, "open", &slots), 14ll << 20);
	assert_int_equal(slots, 0);
	assert_int_equal(budget_of(&a, "tiny", &slots), -1);
	assert_int_equal(a.srv.nr_readable, 1);
	assert_string_equal(a.srv.readable[0], "open");

	/* the command line over the file: 0 takes a budget away */
	assert_int_equal(config_set(&a, "model.llama-7b.ring_slots", "8"), 0);
	assert_int_equal(config_set(&a, "model.x.y.budget", "1M"), 0);
	assert_int_equal(budget_of(&a, "x.y", &slots), 1ll << 20);
	assert_int_equal(config_set(&a, "model.x.y.budget", "0"), 0);
	assert_int_equal(budget_of(&a, "x.y", &slots), -1);
	assert_int_equal(config_set(&a, "model.x.budget", "1"), -EINVAL);
	assert_string_equal(a.err, "command line: model.x.budget: '1': want 0 "
				   "(none) or a size from 1M to 1024T, such "
				   "as 6G");
	assert_int_equal(config_set(&a, "model.x.ring_slots", "99"), -EINVAL);
	assert_non_null(strstr(a.err, "model.x.ring_slots: '99': want a "
				      "number from 1 to 8"));
	assert_int_equal(budget_of(&a, "x", &slots), -1);
	assert_int_equal(config_validate(&a), 0);
	assert_int_equal(budget_of(&a, "llama-7b", &slots), 6ll << 30);
	assert_int_equal(slots, 8);

	/* printed as a file that reads back */
	f = open_memstream(&out, &len);
	config_print(&a, f);
	fclose(f);
	assert_non_null(strstr(out, "[model.open]\nreadable = yes\t; SIGHUP "
				    "reloads it\nbudget = 14M\t; SIGHUP "
				    "reloads it, for the model's next load\n"));
	assert_non_null(strstr(out, "[model.llama-7b]\nbudget = 6G\t; "));
	assert_non_null(strstr(out, "\nring_slots = 8\t; SIGHUP reloads it"));
	assert_null(strstr(out, "[model.tiny]"));
	assert_int_equal(load(&b, out), 0);
	assert_int_equal(config_validate(&b), 0);
	assert_int_equal(config_diff(&a, &b, &restart), 0);
	assert_int_equal(restart, 0);
	free(out);
	config_free(&b);

	/* a reload: another budget, one taken away, one new */
	assert_int_equal(load(&b, "[model.llama-7b]\nbudget = 4G\n"
				  "[model.open]\nreadable = yes\n"
				  "[model.new]\nbudget = 1G\nring_slots = 3\n"),
			 0);
	assert_int_equal(config_validate(&b), 0);
	mask = config_diff(&a, &b, &restart);
	assert_int_equal(mask, CONFIG_RELOAD_MODELS);
	assert_int_equal(restart, 0);
	config_apply(&a, &b, mask);
	config_free(&b);
	assert_int_equal(a.srv.nr_budgets, 2);
	assert_int_equal(budget_of(&a, "llama-7b", &slots), 4ll << 30);
	assert_int_equal(slots, 0);
	assert_int_equal(budget_of(&a, "open", &slots), -1);
	assert_int_equal(budget_of(&a, "new", &slots), 1ll << 30);
	assert_int_equal(slots, 3);
	assert_null(a.srv.budgets[0].bytes_file);
	assert_int_equal(a.srv.nr_readable, 1);
	/* only the readable ones: nothing else changes */
	assert_int_equal(load(&b, "[model.llama-7b]\nbudget = 4G\n"
				  "[model.new]\nring_slots = 3\nbudget = 1G\n"),
			 0);
	assert_int_equal(config_diff(&a, &b, &restart), CONFIG_RELOAD_MODELS);
	config_apply(&a, &b, CONFIG_RELOAD_MODELS);
	config_free(&b);
	assert_int_equal(a.srv.nr_readable, 0);
	assert_int_equal(a.srv.nr_budgets, 2);
	config_free(&a);

	/* a ring without a budget says nothing: refused on its line */
	assert_int_equal(load(&a, "[model.m]\nreadable = yes\n"
				  "ring_slots = 2\n"),
			 0);
	assert_int_equal(config_validate(&a), -EINVAL);
	assert_err(&a, 3,
		   "model.m.ring_slots: 2 without a budget: set "
		   "model.m.budget too");
	config_free(&a);
	assert_int_equal(load(&a, "[model.m]\nbudget = 6M\nring_slots = 2\n"),
			 0);
	assert_int_equal(config_set(&a, "model.m.budget", "0"), 0);
	assert_int_equal(config_validate(&a), -EINVAL);
	assert_err(&a, 3, "model.m.ring_slots: 2 without a budget");
	config_free(&a);

	/* at most SERVER_TENANT_MAPS_MAX models with one */
	config_init(&a);
	for (int i = 0; i <= SERVER_TENANT_MAPS_MAX; i++) {
		char key[64];

		snprintf(key, sizeof(key), "model.m%d.budget", i);
		assert_int_equal(config_set(&a, key, "6M"),
				 i < SERVER_TENANT_MAPS_MAX ? 0 : -EINVAL);
	}
	assert_string_equal(a.err, "command line: model.m64.budget: at most 64 "
				   "models with a budget or ring_slots");
	/* another budget for one of them is no new model */
	assert_int_equal(config_set(&a, "model.m3.budget", "8M"), 0);
	config_free(&a);
}

static int setup(void **state)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/djinnd.conf", dir);
	log_init(LOG_ERR, NULL); /* reload lines are notices: quiet */
	return 0;
}

static int teardown(void **state)
{
	unlink(path);
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_good_file),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_bad_value_keeps_old),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_missing_and_dir),
		cmocka_unit_test(test_overrides),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_sizes_durations),
		cmocka_unit_test(test_print_reads_back),
		cmocka_unit_test(test_diff_apply),
		cmocka_unit_test(test_sched),
		cmocka_unit_test(test_tenant_ids),
		cmocka_unit_test(test_model_budgets),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
