/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmark programs (bench/, and
 * tools/djinn-bench.c): the clock, the statistics their JSON lines
 * report (written by lib/figure.c), and how they give up.
 */
#ifndef DJINN_BENCH_H
#define DJINN_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "array_size.h"
#include "backend/backend.h"
#include "clock.h"
#include "figure.h"

/* Say why on stderr after the program's name, and exit 1 (atexit()
 * handlers run). */
__attribute__((noreturn, format(printf, 1, 2))) static inline void
fail(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Give up on a runtime call's error @ret (negative errno), saying @what
 * and the runtime's message @msg (may be NULL). */
static inline void check_msg(int ret, const char *what, const char *msg)
{
	if (ret)
		fail("%s: %s%s%s", what, strerror(-ret),
		     msg && *msg ? ": " : "", msg ? msg : "");
}

/* Seconds from @t0 to @t1 (mono_ns()). */
static inline double secs(uint64_t t0, uint64_t t1)
{
	return (double)(t1 - t0) / 1e9;
}

static inline void sleep_ns(uint64_t ns)
{
	struct timespec ts = ns_to_timespec(ns);

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of @n samples (at most 64), NAN for none. */
static inline double median(const double *v, unsigned int n)
{
	double s[64];

	if (!n || n > ARRAY_SIZE(s))
		return NAN;
	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The next of a seeded stream of 64-bit numbers (SplitMix64). */
static inline uint64_t splitmix64(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * Start @argv with stdin from /dev/null and stdout and stderr to @out
 * (a file path), or to the pipe *@pipe_rd (when non-NULL), or to
 * /dev/null. The child dies with this process.
 */
static inline pid_t spawn(char *const argv[], const char *out, int *pipe_rd)
{
	pid_t parent = getpid(), pid;
	int p[2] = { -1, -1 };

	if (pipe_rd && pipe2(p, O_CLOEXEC))
		fail("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (!pid) {
		int nul = open("/dev/null", O_RDWR);
		int fd = nul;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent || nul < 0)
			_exit(127);
		if (pipe_rd)
			fd = p[1];
		else if (out)
			fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0)
			_exit(127);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(pipe_rd ? nul : fd, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (pipe_rd) {
		close(p[1]);
		*pipe_rd = p[0];
	}
	return pid;
}

/* The last lines of @path on stderr, to say why a child failed. */
static inline void show_tail(const char *path)
{
	char buf[2048];
	FILE *f = fopen(path, "r");
	size_t n;
	long size;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f,
	      size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0,
	      SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "%s:\n%s", path, buf);
}

/* @path's bytes, NUL-terminated, their count in *@len; NULL if it
 * cannot be read. */
static inline char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf) {
		buf[n] = 0;
		*len = (size_t)n;
	}
out:
	fclose(f);
	return buf;
}

/* The last non-empty line of @text, for a note. */
static inline void last_line(char *dst, size_t len, char *text)
{
	char *end = text + strlen(text), *p;

	while (end > text && (end[-1] == '\n' || end[-1] == ' '))
		*--end = 0;
	p = strrchr(text, '\n');
	snprintf(dst, len, "%s", p ? p + 1 : text);
}

/* The whole number @s in @lo..@hi; else say so and exit 2 (usage). */
static inline unsigned long num(const char *s, unsigned long lo,
				unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || !*s || v < lo || v > hi) {
		fprintf(stderr, "%s: %s: not a number in %lu..%lu\n",
			program_invocation_short_name, s, lo, hi);
		exit(2);
	}
	return v;
}

/* No character a shell would read specially (but spaces, with @spaces:
 * words). */
static inline bool shell_safe_words(const char *s, bool spaces)
{
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789/._-+,=:",
			    *s) &&
		    !(spaces && *s == ' '))
			return false;
	return true;
}

static inline bool shell_safe(const char *s)
{
	return shell_safe_words(s, false);
}

/* Whether @path holds @text and nothing more (up to 511 bytes). */
static inline bool file_has(const char *path, const char *text)
{
	char buf[512] = { 0 };
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return !strcmp(buf, text);
}

/*
 * @models/@name written by "python3 @mkmodel @args DIR" unless its stamp
 * (DIR/mkmodel.args) says it was written with @args already; the stamp
 * is written last, so a half-written model is never reused. The words
 * must be shell_safe(), @args shell_safe_words(); fail()s when the
 * writer does.
 */
static inline void ensure_mkmodel(const char *models, const char *name,
				  const char *mkmodel, const char *args)
{
	char dir[1200], stamp[1300], want[512], cmd[8192];

	snprintf(dir, sizeof(dir), "%s/%s", models, name);
	snprintf(stamp, sizeof(stamp), "%s/mkmodel.args", dir);
	snprintf(want, sizeof(want), "%s\n", args);
	if (file_has(stamp, want))
		return;
	fprintf(stderr, "%s: writing %s (%s)\n", program_invocation_short_name,
		dir, args);
	snprintf(cmd, sizeof(cmd),
		 "rm -rf %s && mkdir -p %s && python3 %s %s %s && "
		 "echo '%s' > %s",
		 dir, models, mkmodel, args, dir, args, stamp);
	if (system(cmd))
		fail("failed: %s", cmd);
}

/* --backend cuda: exit 77 saying why when there is no GPU to run on. */
static inline void need_gpu(void)
{
	unsigned int n = 0;
	char msg[256] = "";

	if (!cuda_devices || !cuda_backend_create) {
		printf("SKIP: %s was built without the CUDA backend (no "
		       "nvcc)\n",
		       program_invocation_short_name);
		exit(77);
	}
	if (cuda_devices(&n, msg, sizeof(msg))) {
		printf("SKIP: %s\n", msg);
		exit(77);
	}
	if (!n) {
		printf("SKIP: the CUDA driver is here but sees no GPU\n");
		exit(77);
	}
}

#endif /* DJINN_BENCH_H */
