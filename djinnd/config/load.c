// SPDX-License-Identifier: MIT
/*
 * The defaults, the file and the command line's keys. inih does the
 * parsing; a counting reader gives each handler call its line number
 * and refuses lines inih would otherwise split. See internal.h.
 */
#include <errno.h>
#include <stddef.h>
#include <ini.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "internal.h"
#include "log.h"
#include "rundir.h"

/* ---------------------------------------------------------------------- */
/* Defaults */

void config_init(struct djinnd_config *c)
{
	char sock[4200], path[4210];

	memset(c, 0, sizeof(*c));
	c->srv = (struct server_config){
		.backend = "cpu",
		.cpu_mem = 2ull << 30,
		.read_staging = 64ull << 20,
		.lease_default_ns = 10 * NSEC_PER_SEC,
		.lease_min_ns = 10 * NSEC_PER_MSEC,
		.lease_max_ns = 3600 * NSEC_PER_SEC,
		.max_sessions = 65536,
		.max_sessions_per_uid = 4096,
		.max_conns = 4096,
		.max_conns_per_uid = 1024,
		.max_conns_per_addr = 1024,
		.addr_prefix_v4 = 32,
		.addr_prefix_v6 = 64,
		.frame_timeout_ns = 5 * NSEC_PER_SEC,
		.idle_timeout_ns = 60 * NSEC_PER_SEC,
		.warn_pct = 80,
		.crit_pct = 95,
		.model_dir = "/var/lib/djinn/models",
		.leases = "auto",
		.plain_tcp = "loopback",
		.tls_tenant_from = "cn",
		.tls_ktls = "auto",
		.tls_max_records = 1u << 24,
		.sched = {
			.policy = DJINN_SCHED_SEMANTIC,
			.quantum_ns = SCHED_QUANTUM_DEFAULT,
			.admit_wait_ns = SCHED_ADMIT_WAIT_DEFAULT,
			.max_io_wait_ns = SCHED_MAX_IO_WAIT_DEFAULT,
			.swap_margin_pct = SCHED_SWAP_MARGIN_DEFAULT,
			.max_batch = SCHED_MAX_BATCH_DEFAULT,
			.pass_tokens = SCHED_PASS_TOKENS_DEFAULT,
		},
	};
	c->log_level = LOG_INFO;
	/* Sockets: lib/rundir.h (/run/djinn/ for root, the system service;
	 * else $XDG_RUNTIME_DIR/djinn/, else ./run/, a checkout), where
	 * libdjinn and djinnctl look for them. */
	djinnd_socket_default("djinnd.sock", sock, sizeof(sock));
	snprintf(path, sizeof(path), "unix:%s", sock);
	c->srv.listen[0] = cfg_keep(c, path);
	c->srv.nr_listen = c->srv.listen[0] ? 1 : 0;
	djinnd_socket_default("admin.sock", sock, sizeof(sock));
	c->srv.admin_socket = cfg_keep(c, sock);
}

void config_free(struct djinnd_config *c)
{
	for (unsigned int i = 0; i < c->nr_strs; i++)
		free(c->strs[i]);
	free(c->strs);
	c->strs = NULL;
	c->nr_strs = c->cap_strs = 0;
}

/* ---------------------------------------------------------------------- */
/* The file */

struct reader {
	FILE *f;
	struct djinnd_config *c;
	bool too_long;
};

/* fgets for inih, counting lines. inih would cut a line longer than its
 * buffer in two and read the rest as another line: refuse it instead. */
static char *read_line(char *str, int num, void *stream)
{
	struct reader *r = stream;
	char *s = fgets(str, num, r->f);

	if (!s)
		return NULL;
	r->c->cur_line++;
	if (!strchr(s, '\n') && !feof(r->f)) {
		r->too_long = true;
		return NULL;
	}
	return s;
}

static int on_line(void *user, const char *section, const char *name,
		   const char *value)
{
	struct djinnd_config *c = user;
	const struct key *k;

	if (c->err[0])
		return 1; /* report the first error only */
	if (!*section) {
		cfg_fail(c, "'%s' before any [section]", name);
		return 0;
	}
	if (!strncmp(section, "tenant.", 7))
		return cfg_tenant_set(c, section + 7, name, value) ? 0 : 1;
	if (!strncmp(section, "model.", 6))
		return cfg_model_set(c, section + 6, name, value) ? 0 : 1;
	k = cfg_key_find(section, name);
	if (!k) {
		if (cfg_section_known(section))
			cfg_fail(c, "unknown key '%s' in [%s]", name, section);
		else
			cfg_fail(c, "unknown section [%s]", section);
		return 0;
	}
	return cfg_set_from(c, k, value, FROM_FILE) ? 0 : 1;
}

int config_load(struct djinnd_config *c, const char *path)
{
	struct reader r = { .c = c };
	struct stat sb;
	int ret;

	c->err[0] = 0;
	r.f = fopen(path, "re");
	if (!r.f) {
		ret = -errno;
		snprintf(c->err, sizeof(c->err), "%s: %s", path,
			 strerror(-ret));
		return ret;
	}
	if (fstat(fileno(r.f), &sb) || S_ISDIR(sb.st_mode)) {
		fclose(r.f);
		snprintf(c->err, sizeof(c->err), "%s: %s", path,
			 strerror(EISDIR));
		return -EISDIR;
	}
	c->path = cfg_keep(c, path);
	if (!c->path) {
		fclose(r.f);
		return -ENOMEM;
	}
	c->cur_file = c->path;
	c->cur_line = 0;
	ret = ini_parse_stream(read_line, &r, on_line, c);
	if (r.too_long) {
		c->err[0] = 0;
		cfg_fail(c, "line longer than %d characters", INI_MAX_LINE - 2);
	} else if (ferror(r.f)) {
		snprintf(c->err, sizeof(c->err), "%s: read error", path);
	} else if (ret > 0 && !c->err[0]) {
		/* inih's own refusal: neither "[section]" nor "key = value" */
		c->cur_line = (unsigned int)ret;
		cfg_fail(c, "syntax error: want [section] or key = value");
	} else if (ret < 0 && !c->err[0]) {
		snprintf(c->err, sizeof(c->err), "%s: out of memory", path);
	}
	fclose(r.f);
	c->cur_file = cfg_cmdline;
	c->cur_line = 0;
	return c->err[0] ? -EINVAL : 0;
}

/* "PREFIX.NAME.KEY" (@plen bytes of prefix and its dot): NAME, cut to
 * @size - 1 bytes, into @name; KEY, after the last dot, returned. */
static const char *key_split(const char *key, size_t plen, char *name,
			     size_t size)
{
	const char *last = strrchr(key, '.');
	size_t n = (size_t)(last - key - (ptrdiff_t)plen);

	if (n >= size)
		n = size - 1;
	memcpy(name, key + plen, n);
	name[n] = 0;
	return last + 1;
}

int config_set(struct djinnd_config *c, const char *key, const char *value)
{
	const char *dot = strchr(key, '.');
	char section[64];
	const struct key *k = NULL;

	c->err[0] = 0;
	c->cur_file = cfg_cmdline;
	c->cur_line = 0;
	/* tenant.NAME.share: NAME may not hold a dot, the key none */
	if (!strncmp(key, "tenant.", 7) && strrchr(key, '.') > key + 7) {
		char tenant[DJINN_TENANT_LEN + 1];
		const char *what = key_split(key, 7, tenant, sizeof(tenant));

		return cfg_tenant_set(c, tenant, what, value);
	}
	/* model.NAME.readable: NAME may hold dots, the key none */
	if (!strncmp(key, "model.", 6) && strrchr(key, '.') > key + 6) {
		char model[DJINN_MODEL_NAME_MAX + 1];
		const char *what = key_split(key, 6, model, sizeof(model));

		return cfg_model_set(c, model, what, value);
	}
	if (dot && (size_t)(dot - key) < sizeof(section)) {
		memcpy(section, key, (size_t)(dot - key));
		section[dot - key] = 0;
		k = cfg_key_find(section, dot + 1);
	}
	if (!k)
		return cfg_fail(c,
				"unknown key '%s' (want SECTION.KEY, "
				"see djinnd.conf(5))",
				key);
	return cfg_set_from(c, k, value, FROM_FLAG);
}
