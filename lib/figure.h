/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' figures, one JSON object a line on stdout, for every
 * benchmark program (bench/, tools/bench/):
 *
 *   {"bench": "djinn_bulk", "metric": "upload_unix_gbps", "value": 3.91,
 *    "unit": "GB/s", "baseline": 4.6, "ratio": 0.85,
 *    "baseline_name": "raw_blast", "target": "ratio >= 0.9", "met": false,
 *    "samples": 5}
 *
 * A program fills a struct fig and hands it to fig_emit(), which writes
 * its keys in the order of struct fig, "ratio" after the baseline (or
 * the limit) and the reference's name after the ratio; what a figure
 * leaves out, its line does. A line with keys of its own after those is
 * fig_put(), its keys, then fig_end(); a line in an order of its own is
 * written key by key with fig_begin(), fig_num(), fig_str() and the
 * others, and fig_end().
 *
 * Numbers are fig_fmt_num()'s: null when not finite, whole numbers
 * without a fraction, else six significant digits. Strings are escaped
 * as JSON wants. Each line is flushed at its end, to stdout and to the
 * file of fig_copy(). Not thread-safe: one line at a time, from one
 * thread.
 */
#ifndef DJINN_FIGURE_H
#define DJINN_FIGURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * struct fig - one figure, one line
 * @bench:    the benchmark's name ("vmu_alloc", "agent_cpu")
 * @metric:   what was measured
 * @value:    the figure
 * @unit:     its unit
 * @baseline: the reference measured beside it; NAN for none (null: an
 *            initializer that leaves it out makes it 0)
 * @baseline_name: what the reference is, or NULL
 * @limit:    a constant the value is held to instead (a tolerance, the
 *            SLO, a count the input fixes): the line has "limit" and
 *            "limit_name" in place of "baseline" and "baseline_name"
 *            when @limit_name is set
 * @policy, @agents: the run it is of (agent-bench), or NULL and 0
 * @target:   ">=" or "<=": the ratio (the value, with @on_value) held to
 *            @want, and whether it met that; or NULL
 * @target_text: a target said but not checked ("ratio >= 20": no
 *            "met"), in place of @target
 * @samples:  how many measurements it is over (0: left out)
 * @note:     what else a reader needs to know, or NULL
 *
 * "ratio" is value / baseline (or limit): null when either is not finite
 * or the reference is 0.
 */
struct fig {
	const char *bench;
	const char *metric;
	double value;
	const char *unit;
	double baseline;
	const char *baseline_name;
	double limit;
	const char *limit_name;
	const char *policy;
	unsigned int agents;
	const char *target;
	double want;
	bool on_value;
	const char *target_text;
	uint64_t samples;
	const char *note;
};

/* Each line also to @f (NULL: stdout only); fig_end() flushes it. */
void fig_copy(FILE *f);

/* @f's line: fig_put(f) and fig_end(). */
void fig_emit(const struct fig *f);
/* @f's line, left open for keys of the caller's own. */
void fig_put(const struct fig *f);

/* A line key by key: {"bench": @bench, "metric": @metric ... */
void fig_begin(const char *bench, const char *metric);
/* ..., "@key": @x (fig_fmt_num()) */
void fig_num(const char *key, double x);
void fig_u64(const char *key, uint64_t x);
/* ..., "@key": "@s" (escaped) */
void fig_str(const char *key, const char *s);
/* ..., "@key": @fmt of the arguments, as it stands (a number in a format
 * of the line's own, "%.4g") */
void fig_printf(const char *key, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* ..., "target": "@on @op @want", "met": true|false, or null when @x
 * (the ratio or the value that @on names) is not finite */
void fig_target(const char *on, const char *op, double want, double x);
/* ...}, a newline, and both outputs flushed. */
void fig_end(void);

/* @x as a JSON number into @buf: null when not finite, a whole number
 * without a fraction, else %.6g. */
void fig_fmt_num(char *buf, size_t len, double x);
/* value / @ref: NAN unless both are finite and @ref is not 0. */
double fig_ratio(double value, double ref);

#endif /* DJINN_FIGURE_H */
