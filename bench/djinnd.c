// SPDX-License-Identifier: MIT
/*
 * A djinnd for a benchmark: see djinnd.h.
 */
#include <errno.h>
#include <fcntl.h>
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

#include "bench.h"
#include "djinnd.h"

struct bench_djinnd bench_djinnd = { .pid = -1 };
#define D bench_djinnd

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

/* BUILD/bench/NAME -> BUILD/@rel, unless @given or $@env. */
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

void bdj_find(const char *djinnd, const char *djinnctl)
{
	static char dbuf[PATH_MAX + 32], cbuf[PATH_MAX + 32];

	D.bin = beside(djinnd, "DJINND", "djinnd/djinnd", dbuf, sizeof(dbuf));
	D.ctl = beside(djinnctl, "DJINNCTL", "tools/djinnctl", cbuf,
		       sizeof(cbuf));
	if (access(D.bin, X_OK))
		fail("djinnd binary %s: %s (use --djinnd or $DJINND)", D.bin,
		     strerror(errno));
	if (access(D.ctl, X_OK))
		fail("djinnctl binary %s: %s (use --djinnctl or $DJINNCTL)",
		     D.ctl, strerror(errno));
}

bool bdj_has_flag(const char *flag)
{
	char *argv[] = { (char *)D.bin, "--help", NULL };
	static char buf[16384];

	run_capture(argv, 10000, buf, sizeof(buf));
	return strstr(buf, flag);
}

static bool answers(void)
{
	struct djinn_conn *conn;

	if (djinn_connect(D.addr, &conn))
		return false;
	djinn_disconnect(conn);
	return true;
}

void bdj_start(const char *const *args, bool cuda)
{
	const char *argv[64];
	uint64_t deadline = mono_ns() + 60 * NSEC_PER_SEC;
	unsigned int a = 0;
	int status;

	argv[a++] = D.bin;
	argv[a++] = "--foreground";
	argv[a++] = "--listen";
	argv[a++] = D.addr;
	argv[a++] = "--admin-socket";
	argv[a++] = D.admin;
	for (; *args && a < 63; args++)
		argv[a++] = *args;
	argv[a] = NULL;
	unlink(D.log);
	D.pid = spawn((char *const *)argv, D.log, NULL);
	while (mono_ns() < deadline) {
		if (waitpid(D.pid, &status, WNOHANG) == D.pid) {
			D.pid = -1;
			if (cuda) {
				printf("SKIP: djinnd --backend cuda did not "
				       "start (no GPU, or no CUDA backend):\n");
				fflush(stdout);
				show_tail(D.log);
				exit(77);
			}
			show_tail(D.log);
			fail("djinnd exited at start (status %#x)", status);
		}
		if (answers())
			return;
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	show_tail(D.log);
	fail("djinnd does not answer after 60 s");
}

bool bdj_stop(void)
{
	uint64_t deadline = mono_ns() + 20 * NSEC_PER_SEC;
	pid_t pid = D.pid;
	int status;

	if (pid <= 0)
		return true;
	kill(pid, SIGTERM);
	while (mono_ns() < deadline) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			D.pid = -1;
			unlink(D.log);
			return WIFEXITED(status) && !WEXITSTATUS(status);
		}
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	D.pid = -1;
	show_tail(D.log);
	fprintf(stderr, "djinnd did not stop within 20 s of SIGTERM\n");
	return false;
}

/* Async-signal-safe. A killed djinnd leaves its sockets. */
static void remove_tmpdir(void)
{
	if (!D.dir[0])
		return;
	unlink(D.log);
	unlink(D.admin);
	unlink(D.addr + strlen("unix:"));
	rmdir(D.dir);
	D.dir[0] = 0;
}

static void cleanup(void)
{
	if (D.pid > 0) {
		kill(D.pid, SIGKILL);
		waitpid(D.pid, NULL, 0);
		D.pid = -1;
	}
	remove_tmpdir();
}

static void on_signal(int sig)
{
	if (D.pid > 0)
		kill(D.pid, SIGKILL);
	remove_tmpdir();
	signal(sig, SIG_DFL);
	raise(sig);
}

void bdj_tmpdir(const char *prefix)
{
	snprintf(D.dir, sizeof(D.dir), "/tmp/%s.XXXXXX", prefix);
	if (!mkdtemp(D.dir))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(D.addr, sizeof(D.addr), "unix:%s/sock", D.dir);
	snprintf(D.admin, sizeof(D.admin), "%s/admin", D.dir);
	snprintf(D.log, sizeof(D.log), "%s/djinnd.log", D.dir);
	atexit(cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
}

json_t *bdj_ctl_json(const char *object)
{
	char *argv[] = { (char *)D.ctl, "-j",		"--socket",
			 D.admin,	(char *)object, NULL };
	static char buf[1 << 20];
	json_error_t je;
	json_t *j;
	int st;

	st = run_capture(argv, 10000, buf, sizeof(buf));
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
		return NULL;
	j = json_loads(buf, 0, &je);
	if (!j)
		fprintf(stderr, "djinnctl %s: not JSON: %s\n", object, je.text);
	return j;
}

double bdj_num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}
