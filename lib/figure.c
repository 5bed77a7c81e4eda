// SPDX-License-Identifier: MIT
/* The benchmarks' JSON lines (figure.h). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "figure.h"

static FILE *copy;

void fig_copy(FILE *f)
{
	copy = f;
}

/* To stdout and to the copy. */
static void vout(const char *fmt, va_list ap)
{
	va_list aq;

	va_copy(aq, ap);
	vprintf(fmt, ap);
	if (copy)
		vfprintf(copy, fmt, aq);
	va_end(aq);
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vout(fmt, ap);
	va_end(ap);
}

/* @s as the body of a JSON string. */
static void out_escaped(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			out("\\%c", c);
		else if (c < 0x20)
			out("\\u%04x", c);
		else
			out("%c", c);
	}
}

void fig_fmt_num(char *buf, size_t len, double x)
{
	if (!isfinite(x))
		snprintf(buf, len, "null");
	else if (x == floor(x) && fabs(x) < 1e15)
		snprintf(buf, len, "%.0f", x);
	else
		snprintf(buf, len, "%.6g", x);
}

double fig_ratio(double value, double ref)
{
	if (!isfinite(ref) || ref == 0 || !isfinite(value))
		return NAN;
	return value / ref;
}

void fig_begin(const char *bench, const char *metric)
{
	out("{\"bench\": \"");
	out_escaped(bench);
	out("\", \"metric\": \"");
	out_escaped(metric);
	out("\"");
}

void fig_num(const char *key, double x)
{
	char buf[32];

	fig_fmt_num(buf, sizeof(buf), x);
	out(", \"%s\": %s", key, buf);
}

void fig_u64(const char *key, uint64_t x)
{
	out(", \"%s\": %llu", key, (unsigned long long)x);
}

void fig_str(const char *key, const char *s)
{
	out(", \"%s\": \"", key);
	out_escaped(s);
	out("\"");
}

void fig_printf(const char *key, const char *fmt, ...)
{
	va_list ap;

	out(", \"%s\": ", key);
	va_start(ap, fmt);
	vout(fmt, ap);
	va_end(ap);
}

void fig_target(const char *on, const char *op, double want, double x)
{
	bool ge = !strcmp(op, ">=");

	out(", \"target\": \"%s %s %g\"", on, op, want);
	if (isfinite(x))
		out(", \"met\": %s",
		    (ge ? x >= want : x <= want) ? "true" : "false");
	else
		out(", \"met\": null");
}

void fig_end(void)
{
	out("}\n");
	fflush(stdout);
	if (copy)
		fflush(copy);
}

void fig_put(const struct fig *f)
{
	/* a constant is no baseline: the line names it a limit */
	bool is_limit = f->limit_name;
	double ref = is_limit ? f->limit : f->baseline;
	const char *ref_key = is_limit ? "limit" : "baseline";
	const char *ref_name = is_limit ? f->limit_name : f->baseline_name;
	double r = fig_ratio(f->value, ref);

	fig_begin(f->bench, f->metric);
	fig_num("value", f->value);
	fig_str("unit", f->unit);
	fig_num(ref_key, ref);
	fig_num("ratio", r);
	if (ref_name)
		fig_str(is_limit ? "limit_name" : "baseline_name", ref_name);
	if (f->policy)
		fig_str("policy", f->policy);
	if (f->agents)
		fig_u64("agents", f->agents);
	if (f->target)
		fig_target(f->on_value ? "value" : "ratio", f->target, f->want,
			   f->on_value ? f->value : r);
	else if (f->target_text)
		fig_str("target", f->target_text);
	if (f->samples)
		fig_u64("samples", f->samples);
	if (f->note)
		fig_str("note", f->note);
}

void fig_emit(const struct fig *f)
{
	fig_put(f);
	fig_end();
}
