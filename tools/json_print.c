// SPDX-License-Identifier: MIT
/*
 * One printing path for text and JSON; see json_print.h. The JSON writer
 * keeps one bit per open container: whether it still waits for its first
 * member (no comma yet).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "clock.h"
#include "json_print.h"

#define JSON_MAX_DEPTH 16

static struct {
	bool json;
	bool pretty;
	int depth;
	bool first[JSON_MAX_DEPTH];
} jw;

void new_json_obj(bool json, bool pretty)
{
	jw.json = json;
	jw.pretty = pretty;
	jw.depth = 0;
}

int delete_json_obj(void)
{
	if (fflush(stdout) || ferror(stdout))
		return errno ? -errno : -EIO;
	return 0;
}

bool is_json_context(void)
{
	return jw.json;
}

static void jw_indent(void)
{
	putchar('\n');
	for (int i = 0; i < jw.depth; i++)
		fputs("    ", stdout);
}

/* A JSON string. The protocol's strings are ASCII; other bytes are
 * escaped one by one so that the output is valid JSON whatever came. */
static void jw_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", stdout);
			break;
		case '\\':
			fputs("\\\\", stdout);
			break;
		case '\n':
			fputs("\\n", stdout);
			break;
		case '\t':
			fputs("\\t", stdout);
			break;
		default:
			if (*p < 0x20 || *p >= 0x7f)
				printf("\\u%04x", *p);
			else
				putchar(*p);
		}
	}
	putchar('"');
}

/* Start a member (with @key) or an element (without): the comma, the
 * indentation, the key. */
static void jw_member(const char *key)
{
	if (jw.depth > 0) {
		if (!jw.first[jw.depth - 1])
			putchar(',');
		jw.first[jw.depth - 1] = false;
		if (jw.pretty)
			jw_indent();
	}
	if (key) {
		jw_string(key);
		fputs(jw.pretty ? ": " : ":", stdout);
	}
}

static void jw_open(const char *key, char c)
{
	if (!jw.json)
		return;
	jw_member(key);
	putchar(c);
	if (jw.depth < JSON_MAX_DEPTH)
		jw.first[jw.depth] = true;
	jw.depth++;
}

static void jw_close(char c)
{
	bool empty;

	if (!jw.json || !jw.depth)
		return;
	jw.depth--;
	empty = jw.depth < JSON_MAX_DEPTH && jw.first[jw.depth];
	if (jw.pretty && !empty)
		jw_indent();
	putchar(c);
	if (!jw.depth)
		putchar('\n');
}

void open_json_object(const char *key)
{
	jw_open(key, '{');
}

void close_json_object(void)
{
	jw_close('}');
}

void open_json_array(const char *key)
{
	jw_open(key, '[');
}

void close_json_array(void)
{
	jw_close(']');
}

/* Whether this call prints JSON; whether it prints text. */
static bool want_json(enum output_type t)
{
	return jw.json && (t & PRINT_JSON);
}

static bool want_text(enum output_type t, const char *fmt)
{
	return !jw.json && (t & PRINT_FP) && fmt;
}

void print_string(enum output_type t, const char *key, const char *fmt,
		  const char *value)
{
	if (want_json(t)) {
		jw_member(key);
		jw_string(value);
	} else if (want_text(t, fmt)) {
		printf(fmt, value);
	}
}

void print_u64(enum output_type t, const char *key, const char *fmt,
	       uint64_t value)
{
	if (want_json(t)) {
		jw_member(key);
		printf("%" PRIu64, value);
	} else if (want_text(t, fmt)) {
		printf(fmt, value);
	}
}

void print_s64(enum output_type t, const char *key, const char *fmt,
	       int64_t value)
{
	if (want_json(t)) {
		jw_member(key);
		printf("%" PRId64, value);
	} else if (want_text(t, fmt)) {
		printf(fmt, value);
	}
}

void print_null(enum output_type t, const char *key, const char *fmt,
		const char *text)
{
	if (want_json(t)) {
		jw_member(key);
		fputs("null", stdout);
	} else if (want_text(t, fmt)) {
		printf(fmt, text);
	}
}

void print_bool(enum output_type t, const char *key, const char *fmt, bool v)
{
	if (want_json(t)) {
		jw_member(key);
		fputs(v ? "true" : "false", stdout);
	} else if (want_text(t, fmt)) {
		printf(fmt, v ? "yes" : "no");
	}
}

void print_size(enum output_type t, const char *key, const char *fmt,
		uint64_t bytes)
{
	char buf[HUMAN_LEN];

	if (want_json(t))
		print_u64(t, key, fmt, bytes);
	else if (want_text(t, fmt))
		printf(fmt, human_size(buf, bytes));
}

void print_duration(enum output_type t, const char *key, const char *fmt,
		    uint64_t ns)
{
	char buf[HUMAN_LEN];

	if (want_json(t))
		print_u64(t, key, fmt, ns);
	else if (want_text(t, fmt))
		printf(fmt, human_duration(buf, ns));
}

void print_nl(void)
{
	if (!jw.json)
		putchar('\n');
}

void print_text(const char *fmt, ...)
{
	va_list ap;

	if (jw.json)
		return;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

/* Binary units as free(1) -h writes them: "512B", "1.5Mi", "64Mi". */
const char *human_size(char *buf, uint64_t bytes)
{
	static const char units[] = "KMGTPE";
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, HUMAN_LEN, "%" PRIu64 "B", bytes);
		return buf;
	}
	while (v >= 1024 && u < (int)sizeof(units) - 2) {
		v /= 1024;
		u++;
	}
	if (v < 10 && bytes & ((1ull << (10 * (u + 1))) - 1))
		snprintf(buf, HUMAN_LEN, "%.1f%ci", v, units[u]);
	else
		snprintf(buf, HUMAN_LEN, "%.0f%ci", v, units[u]);
	return buf;
}

const char *human_duration(char *buf, uint64_t ns)
{
	uint64_t s = ns / NSEC_PER_SEC;

	if (s < 60)
		snprintf(buf, HUMAN_LEN, "%" PRIu64 ".%03" PRIu64 "s", s,
			 ns / NSEC_PER_MSEC % 1000);
	else if (s < 3600)
		snprintf(buf, HUMAN_LEN, "%" PRIu64 "m%02" PRIu64 "s", s / 60,
			 s % 60);
	else if (s < 86400)
		snprintf(buf, HUMAN_LEN,
			 "%" PRIu64 "h%02" PRIu64 "m%02" PRIu64 "s", s / 3600,
			 s / 60 % 60, s % 60);
	else
		snprintf(buf, HUMAN_LEN,
			 "%" PRIu64 "d%02" PRIu64 "h%02" PRIu64 "m", s / 86400,
			 s / 3600 % 24, s / 60 % 60);
	return buf;
}
