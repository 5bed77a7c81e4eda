/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the unit tests. Include after <cmocka.h>.
 */
#ifndef DJINN_TESTUTIL_H
#define DJINN_TESTUTIL_H

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

/* For host-provider memory a device address is a host pointer. */
static inline uint8_t *dev_ptr(uint64_t addr)
{
	return (uint8_t *)(uintptr_t)addr;
}

/* Run a shell command (printf-style); the test fails if it does. */
static inline void run_cmd(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline void run_cmd(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd))
		fail_msg("failed: %s", cmd);
}

/* Whether python3 and scripts/mkmodel.py are here: the tests that write
 * models run from the repository root. */
static inline bool can_mkmodel(void)
{
	return !system("python3 -c 'pass'") &&
	       !access("scripts/mkmodel.py", R_OK);
}

/* For a set-up that writes models: exit 77 (a skip, said why) unless
 * can_mkmodel(), then make the temporary directory @tmpl ("...XXXXXX",
 * filled in). 0, or -1. */
static inline int model_tmpdir(char *tmpl)
{
	if (!can_mkmodel()) {
		printf("%s: skipped: needs python3 and scripts/mkmodel.py (run "
		       "from the repository root)\n",
		       program_invocation_short_name);
		exit(77);
	}
	return mkdtemp(tmpl) ? 0 : -1;
}

/* Remove the directory tree @dir: what system() returned (0: done). */
static inline int rm_tree(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

/* Write @text into the file @dir/@name, or fail. */
static inline void write_text_file(const char *dir, const char *name,
				   const char *text)
{
	char path[256];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

/* The largest error of @got, relative to the largest |value| of @want. */
static inline double rel_err(const float *got, const double *want, size_t n)
{
	double err = 0, scale = 1e-30;

	for (size_t i = 0; i < n; i++) {
		err = fmax(err, fabs(got[i] - want[i]));
		scale = fmax(scale, fabs(want[i]));
	}
	return err / scale;
}

static inline void *xmalloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	assert_non_null(p);
	return p;
}

/* Whether a line of the file @path (a daemon's log) holds @s. */
static inline bool file_has(const char *path, const char *s)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(path, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, s) != NULL;
	fclose(f);
	return found;
}

/* Milliseconds on CLOCK_MONOTONIC. */
static inline int64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long a test waits for what a daemon does after the answer the test
 * has seen; a wait ends as soon as the effect is there. */
#define WAIT_MS 10000

/*
 * wait_until(cond, ms): whether @cond holds within @ms milliseconds,
 * evaluated at once and then every 2 ms. For an effect a daemon makes
 * after its answer, or on another thread, or when it reads a closed
 * connection's end: a log line, a counter, a freed session's memory. A
 * test that checks such an effect once races the daemon, and loses now
 * and then on a loaded machine.
 */
#define wait_until(cond, ms)                                        \
	({                                                          \
		int64_t wu_end_ = tu_now_ms() + (ms);               \
		bool wu_ok_;                                        \
                                                                    \
		while (!(wu_ok_ = (cond)) && tu_now_ms() < wu_end_) \
			usleep(2000);                               \
		wu_ok_;                                             \
	})

/* A line of the file @path, a daemon's log, must hold @s within @ms;
 * else fail, naming @line. */
static inline void wait_file_has_at(int line, const char *path, const char *s,
				    int ms)
{
	if (!wait_until(file_has(path, s), ms))
		fail_msg("line %d: no line of %s holds \"%s\" after %d ms",
			 line, path, s, ms);
}
#define wait_log(path, s) wait_file_has_at(__LINE__, path, s, WAIT_MS)

/* The bytes of the file @path (xmalloc'd; it must not be empty), their
 * number in *@len; or fail. */
static inline void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = xmalloc((size_t)n);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* A byte pattern that differs per seed and per offset. */
static inline void pattern(uint8_t *buf, uint64_t seed, uint64_t off,
			   uint64_t len)
{
	for (uint64_t i = 0; i < len; i++) {
		uint64_t x = (seed + 1) * UINT64_C(0x9e3779b97f4a7c15) +
			     (off + i) * UINT64_C(0xbf58476d1ce4e5b9);

		buf[i] = (uint8_t)((x ^ (x >> 31)) >> 24);
	}
}

static inline uint8_t *pattern_buf(uint64_t seed, uint64_t len)
{
	uint8_t *buf = xmalloc(len);

	pattern(buf, seed, 0, len);
	return buf;
}

/* Index of the first byte of @got that differs from the pattern, or -1. */
static inline int64_t pattern_diff(const uint8_t *got, uint64_t seed,
				   uint64_t off, uint64_t len)
{
	uint8_t *want = xmalloc(len);
	int64_t bad = -1;

	pattern(want, seed, off, len);
	for (uint64_t i = 0; i < len; i++) {
		if (got[i] != want[i]) {
			bad = (int64_t)i;
			break;
		}
	}
	free(want);
	return bad;
}

/* Fails naming the first byte of @got that differs from the pattern. */
static inline void expect_pattern(const uint8_t *got, uint64_t seed,
				  uint64_t off, uint64_t len, const char *what)
{
	int64_t bad = pattern_diff(got, seed, off, len);

	if (bad >= 0)
		fail_msg("%s: byte %" PRIu64 " differs from pattern %" PRIu64,
			 what, off + (uint64_t)bad, seed);
}

/*
 * A worker thread cannot fail a cmocka test itself: it records the first
 * failure here and the test asserts, after joining, that there was none.
 */
struct thread_err {
	unsigned int id;
	int errors;
	char msg[200];
};

static inline void thread_fail(struct thread_err *e, int line, const char *what,
			       int rc)
{
	if (!e->errors++)
		snprintf(e->msg, sizeof(e->msg), "thread %u line %d: %s (%d)",
			 e->id, line, what, rc);
}

#endif /* DJINN_TESTUTIL_H */
