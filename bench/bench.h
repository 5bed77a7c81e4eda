/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmark programs (bench/, and
 * tools/djinn-bench.c): the clock, the statistics their JSON lines
 * report, and how they give up.
 */
#ifndef DJINN_BENCH_H
#define DJINN_BENCH_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* @s as a JSON string body into @buf (truncated, never mid-escape). */
static inline void json_str(char *buf, size_t len, const char *s)
{
	size_t o = 0;

	for (; *s && o + 8 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\%c", c);
		else if (c < 0x20)
			o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = 0;
}

/* A number as a JSON value: null when not finite, integers without a
 * fraction. */
static inline void fmt_num(char *buf, size_t len, double x)
{
	if (!isfinite(x))
		snprintf(buf, len, "null");
	else if (x == floor(x) && fabs(x) < 1e15)
		snprintf(buf, len, "%.0f", x);
	else
		snprintf(buf, len, "%.6g", x);
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

	if (!n || n > sizeof(s) / sizeof(s[0]))
		return NAN;
	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

#endif /* DJINN_BENCH_H */
