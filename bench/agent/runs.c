// SPDX-License-Identifier: MIT
/*
 * agent-bench's passes (bench/agent/agent.h): the reference tokens, the
 * SLO, each (policy, N) point and the density of each policy they add
 * up to, each reported in JSON lines.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../bench.h"
#include "agent.h"

/* ------------------------------------------------------------------------ */
/* JSON lines */

/* @f as a line of "agent_" and the backend (lib/figure.h). */
static void emit(const struct fig *f)
{
	static char bench[32];
	struct fig g = *f;

	if (!bench[0])
		snprintf(bench, sizeof(bench), "agent_%s", opt.backend);
	g.bench = bench;
	fig_emit(&g);
}

/* ------------------------------------------------------------------------ */
/* Passes and points */

static double slo_ms = NAN, alone_p50 = NAN, alone_p99 = NAN;
static double alone_first_p99 = NAN, alone_resume_p99 = NAN;
static double alone_jct_p50 = NAN, alone_jct_p99 = NAN;
static unsigned int alone_samples;

/* Add @c's daemon counters to @r's (@first: set them); NAN when a
 * repeat ran out of time. */
static void add_counters(struct result *r, const struct result *c, bool first,
			 bool ok)
{
#define C(f) offsetof(struct result, f)
	static const size_t off[] = {
		C(swap_outs),	    C(swap_ins),       C(swap_bytes_out),
		C(swap_bytes_in),   C(admit_refusals), C(swaps_signal),
		C(swaps_pressure),  C(prefetches),     C(prefetch_hits),
		C(prefetch_misses), C(admit_waits),    C(admit_timeouts),
	};
#undef C

	for (size_t i = 0; i < ARRAY_SIZE(off); i++) {
		double *to = (double *)((char *)r + off[i]);
		double from = *(const double *)((const char *)c + off[i]);

		*to = !ok ? NAN : first ? from : *to + from;
	}
	r->sched = first ? c->sched : r->sched && c->sched;
}

void ref_pass(unsigned int n)
{
	size_t per = (size_t)opt.turns * opt.decode;
	struct warm w = { 0 };
	uint64_t t0 = mono_ns();

	info("reference: %u agents alone, one at a time (--ref-mem %" PRIu64
	     " MiB, no tool sleeps)",
	     n, opt.ref_mem / MiB);
	daemon_start(NULL, opt.ref_mem);
	warm_open(&w);
	ref_tokens = calloc(n * per, sizeof(int32_t));
	if (!ref_tokens)
		fail("no memory");
	for (unsigned int i = 0; i < n; i++)
		agent_init(&agents[i], i, 0);
	if (!run_agents(M_REF, agents, n))
		fail("the reference pass passed --run-timeout");
	for (unsigned int i = 0; i < n; i++) {
		struct agent *a = &agents[i];

		if (a->ret)
			fail("reference agent %u: %s: %s: %s", i, a->where,
			     strerror(-a->ret), a->msg);
		memcpy(ref_tokens + i * per, a->tokens, per * sizeof(int32_t));
	}
	nr_ref = n;
	warm_close(&w);
	if (!daemon_stop())
		fail("djinnd did not stop cleanly on SIGTERM");
	info("reference: done in %.1f s", (double)(mono_ns() - t0) / 1e9);
}

void slo_pass(void)
{
	unsigned int n = opt.slo_agents;
	struct result r = { 0 };
	struct warm w = { 0 };
	const char *pol = "semantic";

	info("SLO: %u agents alone, one at a time, %s policy, --cpu-mem "
	     "%" PRIu64 " MiB",
	     n, pol, opt.cpu_mem / MiB);
	daemon_start(pol, opt.cpu_mem);
	warm_open(&w);
	run_clear();
	for (unsigned int k = 0; k < opt.repeat; k++) {
		for (unsigned int i = 0; i < n; i++) {
			agent_init(&agents[i], i, 0);
			agents[i].round = k * REPEAT_ROUNDS;
		}
		if (!run_agents(M_ALONE, agents, n))
			fail("the SLO pass passed --run-timeout");
	}
	collect(&r);
	warm_close(&w);
	daemon_stop();
	if (r.errors || r.refusals)
		fail("an agent alone failed: %s", r.first_err);
	if (r.equal != r.checked || r.checked != n * opt.repeat)
		fail("%u of %u agents alone decoded other tokens than their "
		     "reference: nondeterministic decoding",
		     r.checked - r.equal, r.checked);
	alone_p50 = r.turn_p50;
	alone_p99 = r.turn_p99;
	alone_first_p99 = r.first_p99;
	alone_resume_p99 = r.resume_p99;
	info("SLO: alone turn 0 p50 %.1f p99 %.1f ms; later turns p50 %.1f "
	     "p99 %.1f ms",
	     r.first_p50, r.first_p99, r.resume_p50, r.resume_p99);
	alone_jct_p50 = r.jct_p50;
	alone_jct_p99 = r.jct_p99;
	alone_samples = r.turn_samples;
	slo_ms = 2 * alone_p99;
	info("SLO: p99 turn alone %.1f ms (%u turns) -> SLO %.1f ms", alone_p99,
	     r.turn_samples, slo_ms);
	emit(&(struct fig){
		.metric = "alone_turn_latency_p99",
		.value = alone_p99,
		.unit = "ms",
		.baseline = alone_p50,
		.baseline_name = "alone_turn_latency_p50",
		.samples = alone_samples,
		.note = "turns of agents run alone one at a time with real "
			"tool sleeps, pooled, on the budgeted djinnd under the "
			"semantic policy; the SLO is twice this" });
	emit(&(struct fig){ .metric = "slo_turn_latency",
			    .value = slo_ms,
			    .unit = "ms",
			    .limit = alone_p99,
			    .limit_name = "alone_turn_latency_p99",
			    .samples = alone_samples,
			    .note = "2 x p99 turn latency alone" });
}

static void emit_result(const struct result *r)
{
	char note[512];
	double hit = NAN;

	if (r->sched && isfinite(r->prefetch_hits) &&
	    r->prefetch_hits + r->prefetch_misses > 0)
		hit = r->prefetch_hits /
		      (r->prefetch_hits + r->prefetch_misses);
	snprintf(note, sizeof(note),
		 "ready (arrival, or the tool's end) to the turn's last token, "
		 "turns ready while %u agents were live; %u agents ran in "
		 "%u slots, %u completed",
		 r->n, r->agents, r->n, r->completed);
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "turn_latency_p50",
			    .value = r->turn_p50,
			    .unit = "ms",
			    .baseline = alone_p50,
			    .baseline_name = "one agent alone",
			    .samples = r->turn_samples,
			    .note = note });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "turn_latency_p99",
			    .value = r->turn_p99,
			    .unit = "ms",
			    .limit = slo_ms,
			    .limit_name = "slo: 2 x p99 turn latency alone",
			    .target = "<=",
			    .want = 1,
			    .samples = r->turn_samples,
			    .note = note });
	/* the two kinds of turn apart: a first turn prefills the prompt
	 * (and admits the context), a later one comes back from a tool */
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "first_turn_latency_p99",
			    .value = r->first_p99,
			    .unit = "ms",
			    .baseline = alone_first_p99,
			    .baseline_name = "one agent alone",
			    .note = "turn 0: arrival to its last token" });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "later_turn_latency_p99",
			    .value = r->resume_p99,
			    .unit = "ms",
			    .baseline = alone_resume_p99,
			    .baseline_name = "one agent alone",
			    .note = "turns 1..K-1: the tool's end to the "
				    "turn's last token" });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "jct_p50",
			    .value = r->jct_p50,
			    .unit = "ms",
			    .baseline = alone_jct_p50,
			    .baseline_name = "one agent alone",
			    .samples = r->completed });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "jct_p99",
			    .value = r->jct_p99,
			    .unit = "ms",
			    .baseline = alone_jct_p99,
			    .baseline_name = "one agent alone",
			    .samples = r->completed });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "swaps_out",
			    .value = r->swap_outs,
			    .unit = "regions",
			    .baseline = NAN,
			    .note = r->sched ?
					    "djinnctl vmu; djinnctl sched: see "
					    "swaps_signal, swaps_pressure" :
					    "djinnctl vmu" });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "swaps_in",
			    .value = r->swap_ins,
			    .unit = "regions",
			    .baseline = NAN,
			    .note = "djinnctl vmu" });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "swap_bytes",
			    .value = r->swap_bytes_out + r->swap_bytes_in,
			    .unit = "bytes",
			    .baseline = NAN,
			    .note = r->sched ? "out + in, djinnctl sched" :
					       "out + in, djinnctl vmu" });
	if (r->sched) {
		emit(&(struct fig){ .policy = r->policy,
				    .agents = r->n,
				    .metric = "swaps_signal",
				    .value = r->swaps_signal,
				    .unit = "regions",
				    .baseline = NAN,
				    .note = "swapped out on IO_WAIT" });
		emit(&(struct fig){ .policy = r->policy,
				    .agents = r->n,
				    .metric = "swaps_pressure",
				    .value = r->swaps_pressure,
				    .unit = "regions",
				    .baseline = NAN,
				    .note = "swapped out by reclaim" });
	}
	snprintf(note, sizeof(note),
		 "djinnctl sched: hits / (hits + misses)%s; %.0f prefetches",
		 r->sched ? "" : " (no djinnctl sched: null)", r->prefetches);
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "prefetch_hit_rate",
			    .value = hit,
			    .unit = "fraction",
			    .baseline = NAN,
			    .note = note });
	snprintf(note, sizeof(note),
		 "agents refused (-ENOMEM, -ENOSPC, ...)%s%s; %u failed "
		 "otherwise; admissions refused %.0f, waited %.0f, timed out "
		 "%.0f",
		 r->first_err[0] ? "; first: " : "", r->first_err, r->errors,
		 r->admit_refusals, r->admit_waits, r->admit_timeouts);
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "refusals",
			    .value = r->refusals,
			    .unit = "agents",
			    .baseline = NAN,
			    .target = "<=",
			    .want = 0,
			    .on_value = true,
			    .note = note });
	emit(&(struct fig){ .policy = r->policy,
			    .agents = r->n,
			    .metric = "tokens_equal",
			    .value = r->equal,
			    .unit = "agents",
			    .limit = r->checked,
			    .limit_name = "agents that decoded",
			    .target = ">=",
			    .want = 1,
			    .note = "agents whose greedy tokens, as many "
				    "turns as they ran, equal those of the "
				    "same agent run alone" });
}

static struct result results[MAX_POLICIES][MAX_POINTS];
static unsigned int nr_results[MAX_POLICIES];

/* Run @n agents under policy @p (index), or return the run made. */
static const struct result *run_point(unsigned int p, unsigned int n)
{
	const char *policy = opt.policies[p];
	struct result *r;
	struct warm w = { 0 };
	uint64_t t0 = mono_ns();
	bool in_time;

	for (unsigned int i = 0; i < nr_results[p]; i++)
		if (results[p][i].n == n)
			return &results[p][i];
	if (nr_results[p] == MAX_POINTS)
		fail("more than %u runs of one policy", MAX_POINTS);
	r = &results[p][nr_results[p]++];
	r->policy = policy;
	r->n = n;
	info("%s, %u agents: starting", policy, n);
	run_clear();
	in_time = true;
	/* each repeat a fresh djinnd, its agents' tools drawn anew; the
	 * turns pooled, the daemon's counters summed */
	for (unsigned int k = 0; k < opt.repeat && in_time; k++) {
		struct result c = { 0 };

		daemon_start(policy, opt.cpu_mem);
		warm_open(&w);
		for (unsigned int i = 0; i < n; i++) {
			agent_init(&agents[i], i, arrival(i));
			agents[i].round = k * REPEAT_ROUNDS;
		}
		in_time = run_agents(M_LOAD, agents, n);
		if (in_time)
			daemon_counters(&c);
		warm_close(&w);
		if (!daemon_stop() && in_time)
			info("djinnd did not stop cleanly on SIGTERM");
		add_counters(r, &c, !k, in_time);
	}
	collect(r);
	r->timed_out = !in_time;
	if (!in_time && !r->first_err[0])
		snprintf(r->first_err, sizeof(r->first_err),
			 "passed --run-timeout");
	r->wall_s = (double)(mono_ns() - t0) / 1e9;
	r->pass = in_time && !r->refusals && !r->errors && r->turn_samples &&
		  r->checked && r->equal == r->checked && r->turn_p99 <= slo_ms;
	info("%s, %u agents: p50 %.1f ms, p99 %.1f ms (SLO %.1f, %u turns), "
	     "%u refused, %u failed, %u/%u tokens equal, swaps %.0f out %.0f "
	     "in: %s (%.1f s)%s%s",
	     policy, n, r->turn_p50, r->turn_p99, slo_ms, r->turn_samples,
	     r->refusals, r->errors, r->equal, r->checked, r->swap_outs,
	     r->swap_ins, r->pass ? "pass" : "FAIL", r->wall_s,
	     r->first_err[0] ? "; " : "", r->first_err);
	info("%s, %u agents: turn 0 p50 %.1f p99 %.1f ms (its set-up p50 %.1f "
	     "p99 %.1f); later turns p50 %.1f p99 %.1f ms",
	     policy, n, r->first_p50, r->first_p99, r->setup_p50, r->setup_p99,
	     r->resume_p50, r->resume_p99);
	emit_result(r);
	return r;
}

/* ------------------------------------------------------------------------ */
/* Density */

/*
 * struct density - a policy's agent density
 * @n:           the largest N that passed (0: none)
 * @lower_bound: the largest N tried passed: the density may be higher
 * @how:         the Ns tried ("1,2,4x": 4 failed), or the bisection's end
 */
struct density {
	unsigned int n;
	bool lower_bound;
	char how[256];
};

/* Append @n (and an x when it failed) to @d->how. */
static void how_add(struct density *d, size_t *o, unsigned int n, bool pass)
{
	*o += (size_t)snprintf(d->how + *o, sizeof(d->how) - *o, "%s%u%s",
			       *o ? "," : "", n, pass ? "" : "x");
	if (*o >= sizeof(d->how))
		*o = sizeof(d->how) - 1;
}

static void sweep(unsigned int p, struct density *d)
{
	size_t o = 0;

	bool failed = false;

	d->how[0] = 0;
	for (unsigned int i = 0; i < opt.nr_agents; i++) {
		const struct result *r = run_point(p, opt.agents[i]);

		/* below the first failure only: a pass past a failure is
		 * the noise of a p99, not density */
		if (!r->pass)
			failed = true;
		if (r->pass && !failed && r->n > d->n)
			d->n = r->n;
		how_add(d, &o, r->n, r->pass);
		if (r->refusals) {
			info("%s refused agents at %u: the sweep stops there",
			     r->policy, r->n);
			break;
		}
	}
	d->lower_bound = d->n == opt.agents[opt.nr_agents - 1];
}

static void bisect(unsigned int p, struct density *d)
{
	unsigned int lo = opt.bisect_lo, hi = opt.bisect_hi;

	if (!run_point(p, lo)->pass) {
		d->n = 0;
		snprintf(d->how, sizeof(d->how), "%u fails", lo);
		return;
	}
	if (run_point(p, hi)->pass) {
		d->n = hi;
		d->lower_bound = true;
		snprintf(d->how, sizeof(d->how), "%u passes", hi);
		return;
	}
	/* lo passes, hi fails */
	while (hi - lo > 1) {
		unsigned int mid = lo + (hi - lo) / 2;

		if (run_point(p, mid)->pass)
			lo = mid;
		else
			hi = mid;
	}
	d->n = lo;
	snprintf(d->how, sizeof(d->how), "bisection: %u passes, %u fails", lo,
		 hi);
}

/*
 * --grow START[:MAX]: from START, double while N passes (up to MAX) or
 * halve while it fails (down to 1), then bisect between the largest N
 * that passed and the smallest that failed: a density, not a lower
 * bound, in a few points whatever it is.
 */
static void grow(unsigned int p, struct density *d)
{
	unsigned int lo = 0, hi = 0, n = opt.grow_start;
	size_t o = 0;

	d->how[0] = 0;
	for (;;) {
		const struct result *r = run_point(p, n);

		how_add(d, &o, n, r->pass);
		if (r->pass) {
			lo = n;
			if (hi || n >= opt.grow_max)
				break;
			n = 2 * n < opt.grow_max ? 2 * n : opt.grow_max;
		} else {
			hi = n;
			if (lo || n == 1)
				break;
			n /= 2;
		}
	}
	while (lo && hi && hi - lo > 1) {
		unsigned int mid = lo + (hi - lo) / 2;
		const struct result *r = run_point(p, mid);

		how_add(d, &o, mid, r->pass);
		if (r->pass)
			lo = mid;
		else
			hi = mid;
	}
	d->n = lo;
	d->lower_bound = lo && !hi;
}

static void summary(const struct density *d)
{
	int sem = policy_index("semantic"), lru = policy_index("lru");
	int sta = policy_index("static");
	bool exact = opt.estimate_error == 0;
	char note[512];

	for (unsigned int p = 0; p < opt.nr_policies; p++) {
		snprintf(note, sizeof(note),
			 "largest N with p99 turn latency <= %.1f ms, no "
			 "refusal, no failure, every agent's tokens equal "
			 "(%s%s)",
			 slo_ms, d[p].how,
			 d[p].lower_bound ? "; every N tried passed: a lower "
					    "bound" :
					    "");
		emit(&(struct fig){ .policy = opt.policies[p],
				    .metric = "agent_density",
				    .value = d[p].n,
				    .unit = "agents",
				    .baseline = NAN,
				    .note = note });
		info("density %-8s %u agents (%s)%s", opt.policies[p], d[p].n,
		     d[p].how, d[p].lower_bound ? ", a lower bound" : "");
	}
	if (sem < 0)
		return;
	if (sta >= 0) {
		/* a policy that met the SLO nowhere has density 0: any
		 * density beside it is infinitely more */
		double r = d[sta].n ? (double)d[sem].n / d[sta].n :
			   d[sem].n ? INFINITY :
				      NAN;

		emit(&(struct fig){ .metric = "density_semantic_over_static",
				    .value = d[sem].n,
				    .unit = "agents",
				    .baseline = d[sta].n,
				    .baseline_name = "static policy's density",
				    .target = ">=",
				    .want = 2 });
		info("semantic/static density: %.2fx (target >= 2x): %s", r,
		     !isnan(r) && r >= 2 ? "met" : "NOT met");
	}
	if (lru >= 0) {
		double want = exact ? 1.25 : 1;
		double r = d[lru].n ? (double)d[sem].n / d[lru].n :
			   d[sem].n ? INFINITY :
				      NAN;
		/* both 0: no worse, but not 1.25x */
		bool met = isnan(r) ? !exact : r >= want;

		snprintf(note, sizeof(note), "--estimate-error %g%s",
			 opt.estimate_error,
			 exact ? "" : ": the target is no worse than lru");
		emit(&(struct fig){ .metric = "density_semantic_over_lru",
				    .value = d[sem].n,
				    .unit = "agents",
				    .baseline = d[lru].n,
				    .baseline_name = "lru policy's density",
				    .target = ">=",
				    .want = want,
				    .note = note });
		info("semantic/lru density: %.2fx (target >= %gx): %s", r, want,
		     met ? "met" : "NOT met");
		if (exact && d[lru].n) {
			const struct result *s = run_point(sem, d[lru].n);
			const struct result *l = run_point(lru, d[lru].n);
			double q = s->turn_p99 / l->turn_p99;

			snprintf(note, sizeof(note),
				 "at lru's density, %u agents: the "
				 "alternative to the 1.25x density target "
				 "(semantic's run %s)",
				 d[lru].n, s->pass ? "passed" : "failed");
			emit(&(struct fig){
				.agents = d[lru].n,
				.metric = "turn_latency_p99_semantic_over_lru",
				.value = s->turn_p99,
				.unit = "ms",
				.baseline = l->turn_p99,
				.baseline_name = "lru's p99 at its density",
				.target = "<=",
				.want = 0.7,
				.note = note });
			info("semantic p99 at lru's density (%u): %.2fx lru's "
			     "(target <= 0.7x): %s; the lru target is %s",
			     d[lru].n, q, q <= 0.7 ? "met" : "NOT met",
			     met || (q <= 0.7 && s->pass) ? "met" : "NOT met");
		}
	}
}

void densities(void)
{
	struct density d[MAX_POLICIES] = { 0 };

	for (unsigned int p = 0; p < opt.nr_policies; p++) {
		if (opt.grow_start)
			grow(p, &d[p]);
		else if (opt.bisect_hi)
			bisect(p, &d[p]);
		else
			sweep(p, &d[p]);
	}
	summary(d);
}
