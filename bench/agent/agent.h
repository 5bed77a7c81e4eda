/* SPDX-License-Identifier: MIT */
/*
 * What agent-bench's files share (bench/agent-bench.c's head says what it
 * measures, and how): the options and the model (bench/agent-bench.c);
 * djinnd and djinnctl, run as children (bench/agent/daemon.c); the agents
 * and the runs they make together (bench/agent/agents.c); and the passes,
 * the (policy, N) points and the density they add up to, with the JSON
 * lines that report them (bench/agent/runs.c, through lib/figure.h).
 */
#ifndef DJINN_AGENT_BENCH_H
#define DJINN_AGENT_BENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../djinnd.h"

#define MiB ((uint64_t)1 << 20)
#define MAX_AGENTS 1024
#define MAX_POLICIES 3
#define MAX_POINTS 64 /* (policy, N) runs kept per policy */
#define MAX_LIST 32
/* a repeat's agents start their rounds here, so that their tools are
 * drawn anew */
#define REPEAT_ROUNDS 1000u

/*
 * struct model_spec - the model a backend runs
 * @name:    its directory under the model directory
 * @mkmodel: scripts/mkmodel.py's arguments for it
 */
struct model_spec {
	const char *backend, *name, *mkmodel;
};

/* The command line's settings (bench/agent-bench.c has the defaults). */
struct agent_opt {
	unsigned int agents[MAX_LIST], nr_agents;
	unsigned int bisect_lo, bisect_hi;
	unsigned int grow_start, grow_max; /* --grow START[:MAX] */
	const char *sets[8]; /* --set KEY=VALUE for djinnd */
	unsigned int nr_sets;
	unsigned int turns, prompt, decode, tool_tokens, chunk;
	double tool_median_ms, tool_sigma, estimate_error, arrival_rate;
	double measure_s;
	unsigned int repeat;
	uint64_t cpu_mem, ref_mem, swap;
	unsigned int max_tokens;
	uint64_t seed;
	const char *policies[MAX_POLICIES];
	unsigned int nr_policies;
	const char *backend, *out, *djinnd, *djinnctl, *cache, *model_dir;
	const char *mkmodel, *model_args;
	unsigned int lease_ms, threads, slo_agents, run_timeout_s;
};

extern struct agent_opt opt;
extern struct model_spec model; /* of the backend, or --model-args */
extern char model_dir[1024];

/* "agent-bench: " and a line on stderr: progress. */
void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* @name's index in --policies, or -1. */
int policy_index(const char *name);

/* ------------------------------------------------------------------------ */
/* Children: the model writer, djinnd, djinnctl (bench/agent/daemon.c) */

struct result;

/* djinnd is bench_djinnd (bench/djinnd.h): its address, for the agents,
 * and its pid. */

/* djinnd and djinnctl: --djinnd, --djinnctl, $DJINND, $DJINNCTL, else
 * those of this build; fail()s when they cannot run. */
void find_binaries(void);
/* fail()s when djinnd has no --sched-policy. */
void need_sched_policy(void);
/* The temporary directory of djinnd's sockets and log, removed at exit
 * and on SIGINT and SIGTERM (which kill djinnd). */
void make_tmpdir(void);
/* MODEL_DIR/<the model> (ensure_mkmodel()); MODEL_DIR becomes absolute,
 * as djinnd wants it. */
void ensure_model(void);
/* Start djinnd with @policy (NULL: none) and @mem bytes; exits 77 when
 * --backend cuda finds no GPU there. */
void daemon_start(const char *policy, uint64_t mem);
/* Stop djinnd: SIGTERM, 20 s, then SIGKILL. Whether it stopped cleanly. */
bool daemon_stop(void);
/* The daemon's counters, before it stops. */
void daemon_counters(struct result *r);

/* ------------------------------------------------------------------------ */
/* Agents and their runs (bench/agent/agents.c) */

/* A growing list of samples, ms. */
struct samples {
	double *v;
	size_t nr, cap;
};

/* Nearest-rank percentile @p (0 < p <= 1) of @s; NAN for none. Sorts
 * them. */
double percentile(struct samples *s, double p);

enum mode {
	M_REF, /* alone, generous budget, no tool sleeps: the tokens */
	M_ALONE, /* alone, budgeted, real tool sleeps: the SLO */
	M_LOAD, /* N together, Poisson arrivals */
};

/*
 * struct agent - one agent of one run
 * @arrive:  ns after the run's start
 * @tokens:  its decoded tokens, turns x decode
 * @round:   the how-manieth agent of its slot (M_LOAD), from 0
 * @turn_ns: per turn, ready to last token (0: not reached)
 * @ready:   per turn, when it was ready, ns after the run's start
 * @setup_ns: turn 0's part before the prompt: connecting, opening the
 *           session and the model, making the context
 * @cut:     stopped by the end of the run's window, not failed
 * @ret:     0, or the first failure's -errno (@where, @msg say more)
 */
struct agent {
	unsigned int id, round;
	uint64_t arrive;
	int32_t *tokens;
	uint64_t *turn_ns, *ready;
	unsigned int turns_done;
	uint64_t jct_ns, setup_ns;
	int ret;
	bool refused, cut;
	const char *where;
	char msg[256];
	pthread_t thread;
};

/* The warm-up session: loads the model and holds it for the run. */
struct warm {
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
};

/*
 * struct result - one (policy, N) run
 * @turn_*, @jct_*:   ms
 * @completed:        agents that ran every turn
 * @refusals:         agents refused (-ENOMEM, ...), @errors: failed else
 * @equal:            completed agents whose tokens equal their reference
 * @swap_*:           djinnctl vmu: swaps out and in, bytes each way
 * @sched:            djinnctl sched answered; then its counters
 */
struct result {
	const char *policy;
	unsigned int n;
	double turn_p50, turn_p99, jct_p50, jct_p99;
	double first_p50, first_p99, resume_p50, resume_p99;
	double setup_p50, setup_p99;
	unsigned int turn_samples, agents, completed, refusals, errors;
	unsigned int checked, equal;
	bool timed_out, pass;
	double swap_outs, swap_ins, swap_bytes_out, swap_bytes_in;
	double admit_refusals;
	bool sched;
	double swaps_signal, swaps_pressure, prefetches, prefetch_hits;
	double prefetch_misses, admit_waits, admit_timeouts;
	double wall_s;
	char first_err[320];
};

extern struct agent agents[MAX_AGENTS];
extern int32_t *ref_tokens; /* [agent][turns x decode] */
extern unsigned int nr_ref;

/* Poisson arrivals: agent i's, ns after the start, the same in every run
 * (the i-th sum of seeded exponential gaps). */
uint64_t arrival(unsigned int i);
void agent_init(struct agent *a, unsigned int id, uint64_t arrive);
void warm_open(struct warm *w);
void warm_close(struct warm *w);
/* Ready the run's lock and condition, before any run. */
void run_init(void);
/* Forget the samples and counts: a point's repeats pool theirs. */
void run_clear(void);
/*
 * Run agents on the daemon running now. M_LOAD: @n slots together, each
 * starting at its Poisson arrival and keeping an agent live until the
 * window (--measure seconds from the last slot's arrival) ends. Else: @n
 * agents one after the other, each arriving at once, run to their end.
 * Returns false when the run passed --run-timeout (djinnd is then
 * killed, which fails the agents' calls, and the agents are joined).
 */
bool run_agents(enum mode mode, struct agent *ag, unsigned int n);
/* Fill @r's figures from the run that ended. */
void collect(struct result *r);

/* ------------------------------------------------------------------------ */
/* Passes, points, density (bench/agent/runs.c) */

/* The reference tokens of agents 0 .. @n - 1: each alone, generous
 * budget, no tool sleeps. */
void ref_pass(unsigned int n);
/* The SLO: agents 0 .. --slo-agents - 1 alone in turn, real tool sleeps,
 * budgeted, semantic policy; 2 x the p99 of their pooled turns. Its
 * lines. */
void slo_pass(void);
/* Each policy's density, by --agents or --bisect; their lines, and the
 * ratios'. */
void densities(void);

#endif /* DJINN_AGENT_BENCH_H */
