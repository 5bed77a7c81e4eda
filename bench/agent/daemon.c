// SPDX-License-Identifier: MIT
/*
 * agent-bench's children (bench/agent/agent.h): the model writer, djinnd
 * on sockets in a temporary directory, and djinnctl, whose JSON gives
 * the daemon's counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>
#include <jansson.h>

#include "../bench.h"
#include "agent.h"

static char tmpdir[64];
volatile pid_t daemon_pid = -1;

void ensure_model(void)
{
	char path[PATH_MAX];

	ensure_mkmodel(model_dir, model.name, opt.mkmodel, model.mkmodel);
	if (!realpath(model_dir, path) || strlen(path) >= sizeof(model_dir))
		fail("%s: %s", model_dir, strerror(errno));
	strcpy(model_dir, path);
}

/* Run @argv to its end, its output into @out[@len] (NUL-terminated);
 * killed after @timeout_ms. Returns its wait status, -1 if killed. */
static int run_capture(char *const argv[], int timeout_ms, char *out,
		       size_t len)
{
	uint64_t deadline = mono_ns() + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	size_t have = 0;
	bool killed = false;
	int fd, status;
	pid_t pid;

	pid = spawn(argv, NULL, &fd);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		ssize_t r = read(fd, out + have, len - have - 1);

		if (r > 0) {
			have += (size_t)r;
			if (have + 1 >= len)
				break;
			continue;
		}
		if (!r || (errno != EAGAIN && errno != EINTR))
			break;
		if (mono_ns() >= deadline) {
			kill(pid, SIGKILL);
			killed = true;
			break;
		}
		sleep_ns(2 * NSEC_PER_MSEC);
	}
	out[have] = 0;
	close(fd);
	waitpid(pid, &status, 0);
	return killed ? -1 : status;
}

/* BUILD/bench/agent-bench -> BUILD/@rel, unless @given. */
static const char *beside(const char *given, const char *env, const char *rel,
			  char *buf, size_t len)
{
	char self[PATH_MAX];
	const char *e = getenv(env);
	ssize_t n;

	if (given)
		return given;
	if (e && *e)
		return e;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return rel;
	self[n] = 0;
	snprintf(buf, len, "%s/../%s", dirname(self), rel);
	return buf;
}

static char djinnd_buf[PATH_MAX + 32], djinnctl_buf[PATH_MAX + 32];
static const char *djinnd_bin, *djinnctl_bin;
char sock_addr[128];
static char admin_path[128], log_path[128];

/* Whether `djinnd --help` mentions --sched-policy. */
static bool djinnd_has_policy(void)
{
	char *argv[] = { (char *)djinnd_bin, "--help", NULL };
	static char buf[16384];

	run_capture(argv, 10000, buf, sizeof(buf));
	return strstr(buf, "--sched-policy");
}

static bool djinnd_answers(void)
{
	struct djinn_conn *conn;

	if (djinn_connect(sock_addr, &conn))
		return false;
	djinn_disconnect(conn);
	return true;
}

void daemon_start(const char *policy, uint64_t mem)
{
	char memarg[32], lease[16], threads[16], swap[48], pin[128];
	const char *argv[32];
	uint64_t deadline = mono_ns() + 60 * NSEC_PER_SEC;
	unsigned int a = 0;
	int status;

	snprintf(memarg, sizeof(memarg), "%" PRIu64, mem);
	snprintf(lease, sizeof(lease), "%u", opt.lease_ms);
	snprintf(threads, sizeof(threads), "%u", opt.threads);
	argv[a++] = djinnd_bin;
	argv[a++] = "--foreground";
	argv[a++] = "--backend";
	argv[a++] = opt.backend;
	/* the budget bounds the device: a CPU's whole memory, a GPU's
	 * memory for sessions */
	argv[a++] = strcmp(opt.backend, "cuda") ? "--cpu-mem" : "--gpu-mem";
	argv[a++] = memarg;
	argv[a++] = "--listen";
	argv[a++] = sock_addr;
	argv[a++] = "--admin-socket";
	argv[a++] = admin_path;
	argv[a++] = "--model-dir";
	argv[a++] = model_dir;
	argv[a++] = "--lease-ms";
	argv[a++] = lease;
	argv[a++] = "--log-level";
	argv[a++] = "notice";
	snprintf(swap, sizeof(swap), "memory.swap=%" PRIu64, opt.swap);
	argv[a++] = "--set";
	argv[a++] = swap;
	/* the weights stay where they are: a budget of the whole device
	 * keeps static partitioning from streaming layers to make room
	 * (Documentation/streaming.rst, "Under memory pressure") */
	snprintf(pin, sizeof(pin), "model.%s.budget=%" PRIu64, model.name, mem);
	argv[a++] = "--set";
	argv[a++] = pin;
	if (opt.threads) {
		argv[a++] = "--threads";
		argv[a++] = threads;
	}
	if (policy) {
		argv[a++] = "--sched-policy";
		argv[a++] = policy;
	}
	argv[a] = NULL;
	unlink(log_path);
	daemon_pid = spawn((char *const *)argv, log_path, NULL);
	while (mono_ns() < deadline) {
		if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			if (!strcmp(opt.backend, "cuda")) {
				printf("SKIP: djinnd --backend cuda did not "
				       "start (no GPU, or no CUDA backend):\n");
				fflush(stdout);
				show_tail(log_path);
				exit(77);
			}
			show_tail(log_path);
			fail("djinnd exited at start (status %#x)", status);
		}
		if (djinnd_answers())
			return;
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	show_tail(log_path);
	fail("djinnd does not answer after 60 s");
}

bool daemon_stop(void)
{
	uint64_t deadline = mono_ns() + 20 * NSEC_PER_SEC;
	pid_t pid = daemon_pid;
	int status;

	if (pid <= 0)
		return true;
	kill(pid, SIGTERM);
	while (mono_ns() < deadline) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			daemon_pid = -1;
			unlink(log_path);
			return WIFEXITED(status) && !WEXITSTATUS(status);
		}
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	daemon_pid = -1;
	show_tail(log_path);
	info("djinnd did not stop within 20 s of SIGTERM");
	return false;
}

/* Async-signal-safe. A killed djinnd leaves its sockets. */
static void remove_tmpdir(void)
{
	if (!tmpdir[0])
		return;
	unlink(log_path);
	unlink(admin_path);
	unlink(sock_addr + strlen("unix:"));
	rmdir(tmpdir);
	tmpdir[0] = 0;
}

static void cleanup(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = -1;
	}
	remove_tmpdir();
}

static void on_signal(int sig)
{
	if (daemon_pid > 0)
		kill(daemon_pid, SIGKILL);
	remove_tmpdir();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* `djinnctl -j --socket ADMIN @object` parsed; NULL if it failed. */
static json_t *djinnctl_json(const char *object)
{
	char *argv[] = { (char *)djinnctl_bin, "-j",	       "--socket",
			 admin_path,	       (char *)object, NULL };
	static char buf[1 << 20];
	json_error_t je;
	json_t *j;
	int st;

	st = run_capture(argv, 10000, buf, sizeof(buf));
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
		return NULL;
	j = json_loads(buf, 0, &je);
	if (!j)
		info("djinnctl %s: not JSON: %s", object, je.text);
	return j;
}

static double jnum(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

void daemon_counters(struct result *r)
{
	json_t *v = djinnctl_json("vmu"), *s = djinnctl_json("sched"), *d;

	r->swap_outs = r->swap_ins = r->swap_bytes_out = NAN;
	r->swap_bytes_in = r->admit_refusals = NAN;
	if (json_is_array(v)) /* several devices: the first */
		d = json_array_get(v, 0);
	else
		d = v;
	if (d) {
		r->swap_outs = jnum(d, "swap_outs");
		r->swap_ins = jnum(d, "swap_ins");
		r->swap_bytes_out = jnum(d, "swapped_out_bytes");
		r->swap_bytes_in = jnum(d, "swapped_in_bytes");
		r->admit_refusals = jnum(d, "admit_refusals");
	}
	r->swaps_signal = r->swaps_pressure = r->prefetches = NAN;
	r->prefetch_hits = r->prefetch_misses = r->admit_waits = NAN;
	r->admit_timeouts = NAN;
	d = json_array_get(json_object_get(s, "devices"), 0);
	if (d) {
		r->sched = true;
		r->swaps_signal = jnum(d, "swaps_signal");
		r->swaps_pressure = jnum(d, "swaps_pressure");
		r->prefetches = jnum(d, "prefetches");
		r->prefetch_hits = jnum(d, "prefetch_hits");
		r->prefetch_misses = jnum(d, "prefetch_misses");
		r->admit_waits = jnum(d, "admit_waits");
		r->admit_timeouts = jnum(d, "admit_timeouts");
		/* the scheduler's own byte counts, both causes */
		if (isfinite(jnum(d, "swap_bytes_out")))
			r->swap_bytes_out = jnum(d, "swap_bytes_out");
		if (isfinite(jnum(d, "swap_bytes_in")))
			r->swap_bytes_in = jnum(d, "swap_bytes_in");
	}
	json_decref(v);
	json_decref(s);
}

void find_binaries(void)
{
	djinnd_bin = beside(opt.djinnd, "DJINND", "djinnd/djinnd", djinnd_buf,
			    sizeof(djinnd_buf));
	djinnctl_bin = beside(opt.djinnctl, "DJINNCTL", "tools/djinnctl",
			      djinnctl_buf, sizeof(djinnctl_buf));
	if (access(djinnd_bin, X_OK))
		fail("djinnd binary %s: %s (use --djinnd or $DJINND)",
		     djinnd_bin, strerror(errno));
	if (access(djinnctl_bin, X_OK))
		fail("djinnctl binary %s: %s (use --djinnctl or $DJINNCTL)",
		     djinnctl_bin, strerror(errno));
}

void need_sched_policy(void)
{
	if (!djinnd_has_policy())
		fail("%s has no --sched-policy", djinnd_bin);
}

void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/agent-bench.XXXXXX");
	if (!mkdtemp(tmpdir))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(sock_addr, sizeof(sock_addr), "unix:%s/sock", tmpdir);
	snprintf(admin_path, sizeof(admin_path), "%s/admin", tmpdir);
	snprintf(log_path, sizeof(log_path), "%s/djinnd.log", tmpdir);
	atexit(cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
}
