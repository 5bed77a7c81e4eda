// SPDX-License-Identifier: MIT
/*
 * agent-bench: agent density under djinnd's memory policies. N agents
 * live at once, each its own connection, session and context on one
 * shared model (a small GPT-2-shaped model with seeded random f32
 * weights, written once by scripts/mkmodel.py). Each agent runs:
 *
 *	prefill --prompt P tokens
 *	turn 0: decode --decode M greedy tokens
 *	turn k = 1 .. K-1: a tool call, then its output (a prefill of
 *	        --tool-tokens T tokens), then decode M tokens
 *
 * Prefills go in steps of at most --prefill-chunk tokens (chunked
 * prefill): a step's activations take djinnd's stack about 2 MiB plus
 * 128 KiB a token with the default model, and the stack keeps its peak,
 * so that unchunked 256-token prompts would hold 34 MiB of the budget
 * and leave the KV caches little of it.
 *
 * A tool call lasts a duration drawn from a lognormal distribution
 * (--tool-median-ms, --tool-sigma: heavy-tailed) and is announced to the
 * scheduler with djinn_tool_call_begin(session, estimate), the estimate
 * being the true duration times 1 + e or 1 - e for e = --estimate-error,
 * alternating from call to call from a seeded start (1 - e is held at
 * 0.01 or more: never 0 or less); the agent sleeps the duration and calls
 * djinn_tool_call_end(). Every token, duration and arrival comes from
 * --seed and the agent's number, so agent i does the same in every run.
 *
 * --repeat R runs each (policy, N), and the SLO pass, R times, each on a
 * fresh djinnd with the agents' tools drawn anew, and pools their turns
 * (a p99 of R times the samples; the daemon's counters are summed): on
 * a noisy host one run's p99 at the SLO's edge moves by more than the
 * policies differ.
 *
 * N is the number of agents live together, not the number run: a run
 * has N slots, whose first agents arrive as a Poisson process
 * (--arrival-rate); when a slot's agent has run its K turns, the next
 * agent takes its place at once (a closed loop, as load generators hold
 * N users). The turns measured are those ready in the window from the
 * last slot's arrival, when N agents are live, to --measure seconds
 * later; at the window's end no agent starts and those waiting on tools
 * stop. (Counting every turn of N agents that each arrive and leave
 * would measure fewer than N together: at 2 arrivals a second and
 * lifetimes of about ten seconds, about 20 agents live at once whatever
 * N is past 20, and the ramp's first turns would weigh as much as the
 * rest.) A slot's agents share its number, so its prompt and tool
 * outputs (and thus the reference tokens), with tool durations drawn
 * anew for each.
 *
 * Per-turn latency: from the agent being ready (its arrival, for turn 0,
 * which thus includes connecting, opening the session and the model and
 * the prompt's prefill; the tool's end for later turns) to the turn's
 * last decoded token; also given apart for first and later turns. Job
 * completion time (JCT): arrival to the last turn's end, of the agents
 * that completed.
 *
 * For each --policies policy and each N, a fresh djinnd (the built
 * binary) runs with --backend cpu --cpu-mem BUDGET --sched-policy POLICY
 * on sockets in a temporary directory; a warm-up session loads the model
 * and holds it for the run (so that no agent pays the weights' load),
 * the N agents run, `djinnctl -j vmu` and `djinnctl -j sched` give the
 * daemon's swap and prefetch counters, and djinnd is stopped (SIGTERM).
 * The budget is meant to be far below the agents' KV caches together
 * and above those of the few that compute at a time.
 *
 * References, measured in the same run:
 *  - tokens: each agent alone, one after the other, on a djinnd with a
 *    generous budget (--ref-mem) and no tool sleeps. Greedy decoding is
 *    deterministic given the tokens fed, so every agent of every run
 *    must decode exactly these tokens, as many turns as it ran
 *    ("tokens_equal").
 *  - the SLO: 2 x the p99 turn latency of one agent alone: agents 0 ..
 *    --slo-agents - 1, each alone in turn, with real tool sleeps, on a
 *    budgeted djinnd under the semantic policy; their turns are pooled.
 *
 * A (policy, N) passes when its p99 turn latency is within the SLO, no
 * request was refused (-ENOMEM and the like: the static policy refuses
 * contexts that do not fit, and that counts as failing), nothing failed
 * otherwise, and every agent decoded its reference tokens. A policy's
 * agent density is the largest N that passes with every smaller N of
 * the --agents list passing too (a pass past a failure is counted as
 * noise, not density), or
 * by bisection over --bisect LO:HI (which assumes that passing is
 * monotonic in N), or, with --grow START[:MAX], from START doubling while
 * N passes (halving while it fails) and then bisecting between the last
 * pass and the first failure: a density wherever it lies, in a few
 * points (the GPU's time is short: with a short --measure window a sweep
 * to 256 agents takes minutes). The targets (issue: semantic >= 2 x static's density
 * and >= 1.25 x lru's, or at lru's density a p99 <= 0.7 x lru's; with
 * --estimate-error > 0, semantic no worse than lru) are printed met or
 * not met as measured.
 *
 * Output: one JSON object per line on stdout (STYLE.md, Benchmarks), also
 * written to --out FILE; progress on stderr. Lines of one (policy, N)
 * have "policy" and "agents"; the p99 turn latency's line has the SLO as
 * its "limit"; the last lines are each policy's "agent_density" and the
 * ratios. bench/agent_plot.py draws them.
 *
 * --backend cuda runs djinnd with --backend cuda, --gpu-mem BUDGET
 * (default 1536 MiB: the 12x768 model below, its stack and about 8
 * agents' caches) and a bigger model, and exits 77 saying why on a host
 * without an NVIDIA GPU or a djinnd without the CUDA backend. It has not
 * run on a GPU yet.
 *
 * Usage: agent-bench [--agents N,N,...] [--bisect LO:HI]
 *                    [--grow START[:MAX]] [--set KEY=VALUE] [--turns K]
 *                    [--prompt P] [--decode M] [--tool-tokens T]
 *                    [--tool-median-ms MS] [--tool-sigma S]
 *                    [--estimate-error E] [--arrival-rate PER_S]
 *                    [--measure S] [--repeat R]
 *                    [--cpu-mem SIZE] [--ref-mem SIZE] [--swap SIZE]
 *                    [--max-tokens N]
 *                    [--seed N] [--policies semantic,lru,static]
 *                    [--backend cpu|cuda] [--out FILE] [--djinnd PATH]
 *                    [--djinnctl PATH] [--cache DIR] [--model-dir DIR]
 *                    [--model-args ARGS] [--prefill-chunk N]
 *                    [--lease-ms MS] [--threads N] [--slo-agents N]
 *                    [--run-timeout S]
 *
 * --set KEY=VALUE (up to 8) passes djinnd a setting of its own, as its
 * --set does: device.max_batch=1 runs every model step alone, to compare
 * with passes (Documentation/sched.rst, "Passes").
 *
 * --model-args gives scripts/mkmodel.py's arguments for another model
 * (kept beside the default one, named after a hash of them).
 *
 *   make bench-agent [AGENT_BENCH_ARGS='--agents 4,16 --policies lru']
 *   agent-bench --bisect 4:64 --estimate-error 0.5 --out /tmp/a.jsonl
 *
 * Defaults (a full run takes about ten minutes on two CPU cores): a
 * model of 8 layers, 128 wide, 2 heads, a vocabulary of 4096 and contexts
 * of 1024 tokens (8 KiB of KV cache a token, as GPT-2 124M's tenth, for
 * a quarter of the compute of 4 layers of 256; 9 MB of weights); agents
 * of a 512-token prompt and 6 turns of 16 tokens with 64-token tool
 * outputs (contexts reach 928 tokens, 7.3 MiB) in contexts of
 * --max-tokens 1024 (8 MiB, what static reserves), prefill chunks of 64,
 * tools of median 1 s and sigma 1 (an agent waits on tools about 95% of
 * its time), slots arriving 2 a second (faster, the first agents'
 * 512-token prompts queue behind each other), a window of --measure 20
 * seconds (about 12 turns an agent live), a
 * budget of 64 MiB (weights 10, stack 10, about 40 left for KV caches:
 * 5 reserved contexts, or 5 agents' caches at full length) with 1 GiB of
 * host memory for swapped data (--swap: memory.swap; with djinnd's
 * default of the device's size, total KV, not latency, limits every
 * policy alike), djinnd --threads 1 (its kernels on one core, leaving the
 * other to the memory executor, as a GPU's copy engines are beside its
 * SMs; with both cores in the kernels, every copy slows the compute
 * that waits for it), and N from 4 to 32. A policy's sweep stops at
 * its first refusal (refusals only grow with N).
 *
 * Exit status: 0 the run completed (whether or not the targets were
 * met), 1 a failure, 2 usage, 77 --backend cuda without a GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "bench.h"

/* --backend cuda's default budget: the 12x768 model's 0.5 GB of weights,
 * its stack, and about 8 agents' caches at 67 MB */
#define CUDA_BUDGET (1536 * MiB)

static const struct model_spec models[] = {
	/* 8 KiB of f32 KV cache a token for little compute: narrow, deep */
	{ "cpu", "agent-gpt2-8x128",
	  "--layers 8 --embd 128 --heads 2 --vocab 4096 --ctx 1024 "
	  "--seed 1" },
	/* GPT-2 124M's shape with contexts of 2048: 72 KiB a token */
	{ "cuda", "agent-gpt2-12x768",
	  "--layers 12 --embd 768 --heads 12 --vocab 50257 --ctx 2048 "
	  "--seed 1" },
};

struct agent_opt opt = {
	.agents = { 4, 8, 12, 16, 24, 32 },
	.nr_agents = 6,
	.threads = 1,
	.turns = 6,
	.prompt = 512,
	.decode = 16,
	.tool_tokens = 64,
	.chunk = 64,
	.tool_median_ms = 1000,
	.tool_sigma = 1.0,
	.arrival_rate = 2,
	.measure_s = 20,
	.repeat = 1,
	.cpu_mem = 64 * MiB,
	.ref_mem = 1024 * MiB,
	.swap = 1024 * MiB,
	.max_tokens = 1024,
	.seed = 42,
	.policies = { "semantic", "lru", "static" },
	.nr_policies = 3,
	.backend = "cpu",
	.cache = "build/bench-cache",
	.mkmodel = "scripts/mkmodel.py",
	.lease_ms = 10000,
	.slo_agents = 8,
	.run_timeout_s = 300,
};

struct model_spec model;
char model_dir[1024];
static bool cpu_mem_set; /* --cpu-mem given */
static char model_name_buf[32];
static FILE *out_file; /* --out, beside stdout */

void info(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "agent-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int policy_index(const char *name)
{
	for (unsigned int i = 0; i < opt.nr_policies; i++)
		if (!strcmp(opt.policies[i], name))
			return (int)i;
	return -1;
}

/* ------------------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
		"usage: agent-bench [--agents N,N,...] [--bisect LO:HI]\n"
		"         [--grow START[:MAX]] [--set KEY=VALUE]\n"
		"         [--turns K] [--prompt P] [--decode M] "
		"[--tool-tokens T]\n"
		"         [--tool-median-ms MS] [--tool-sigma S] "
		"[--estimate-error E]\n"
		"         [--arrival-rate PER_S] [--measure S] [--repeat R]\n"
		"         [--cpu-mem SIZE]\n"
		"         [--ref-mem SIZE] [--swap SIZE]\n"
		"         [--max-tokens N] [--seed N] "
		"[--policies semantic,lru,static]\n"
		"         [--backend cpu|cuda] [--out FILE] [--djinnd PATH]\n"
		"         [--djinnctl PATH] [--cache DIR] [--model-dir DIR]\n"
		"         [--model-args ARGS] [--prefill-chunk N] "
		"[--lease-ms MS]\n"
		"         [--threads N] [--slo-agents N] [--run-timeout S]\n");
	exit(2);
}

static double real(const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !*s || !(v >= lo && v <= hi)) {
		fprintf(stderr, "agent-bench: %s: not a number in %g..%g\n", s,
			lo, hi);
		exit(2);
	}
	return v;
}

/* 96M, 1G, 4096K or bytes */
static uint64_t size_arg(const char *s)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end == 'K' || *end == 'k')
		mul = 1 << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1 << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1 << 30;
	if (mul > 1)
		end++;
	if (errno || *end || end == s || !v || v > (1ull << 50) / mul) {
		fprintf(stderr, "agent-bench: %s: not a size (96M, 1G)\n", s);
		exit(2);
	}
	return v * mul;
}

static int cmp_uint(const void *a, const void *b)
{
	unsigned int x = *(const unsigned int *)a, y = *(const unsigned int *)b;

	return (x > y) - (x < y);
}

static void parse_agents(char *s)
{
	unsigned int k = 0;

	char *save = NULL;

	opt.nr_agents = 0;
	for (char *t = strtok_r(s, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (opt.nr_agents == MAX_LIST)
			fail("--agents: %u values at most", MAX_LIST);
		opt.agents[opt.nr_agents++] =
			(unsigned int)num(t, 1, MAX_AGENTS);
	}
	if (!opt.nr_agents)
		usage();
	/* ascending, no repeats */
	qsort(opt.agents, opt.nr_agents, sizeof(*opt.agents), cmp_uint);
	for (unsigned int i = 0; i < opt.nr_agents; i++)
		if (!i || opt.agents[i] != opt.agents[k - 1])
			opt.agents[k++] = opt.agents[i];
	opt.nr_agents = k;
}

static void parse_policies(char *s)
{
	static const char *const known[] = { "semantic", "lru", "static" };
	char *save = NULL;

	opt.nr_policies = 0;
	for (char *t = strtok_r(s, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		const char *k = NULL;

		for (unsigned int i = 0; i < ARRAY_SIZE(known); i++)
			if (!strcmp(t, known[i]))
				k = known[i];
		if (!k || policy_index(k) >= 0 ||
		    opt.nr_policies == MAX_POLICIES) {
			fprintf(stderr,
				"agent-bench: --policies: semantic, lru, "
				"static, each once\n");
			exit(2);
		}
		opt.policies[opt.nr_policies++] = k;
	}
	if (!opt.nr_policies)
		usage();
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "agents", required_argument, NULL, 'n' },
		{ "bisect", required_argument, NULL, 'b' },
		{ "grow", required_argument, NULL, 'g' },
		{ "set", required_argument, NULL, 'X' },
		{ "turns", required_argument, NULL, 'K' },
		{ "prompt", required_argument, NULL, 'P' },
		{ "decode", required_argument, NULL, 'M' },
		{ "tool-tokens", required_argument, NULL, 'T' },
		{ "prefill-chunk", required_argument, NULL, 'u' },
		{ "tool-median-ms", required_argument, NULL, 'm' },
		{ "tool-sigma", required_argument, NULL, 'S' },
		{ "estimate-error", required_argument, NULL, 'e' },
		{ "arrival-rate", required_argument, NULL, 'r' },
		{ "measure", required_argument, NULL, 1002 },
		{ "repeat", required_argument, NULL, 1003 },
		{ "cpu-mem", required_argument, NULL, 'B' },
		{ "ref-mem", required_argument, NULL, 'R' },
		{ "swap", required_argument, NULL, 1001 },
		{ "max-tokens", required_argument, NULL, 'x' },
		{ "seed", required_argument, NULL, 's' },
		{ "policies", required_argument, NULL, 'p' },
		{ "backend", required_argument, NULL, 'k' },
		{ "out", required_argument, NULL, 'o' },
		{ "djinnd", required_argument, NULL, 'd' },
		{ "djinnctl", required_argument, NULL, 'c' },
		{ "cache", required_argument, NULL, 'C' },
		{ "model-dir", required_argument, NULL, 'D' },
		{ "model-args", required_argument, NULL, 'a' },
		{ "lease-ms", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "slo-agents", required_argument, NULL, 'A' },
		{ "run-timeout", required_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned int need, max_n;
	uint64_t t0 = mono_ns();
	char *colon;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			parse_agents(optarg);
			break;
		case 'b':
			colon = strchr(optarg, ':');
			if (!colon)
				usage();
			*colon = 0;
			opt.bisect_lo =
				(unsigned int)num(optarg, 1, MAX_AGENTS);
			opt.bisect_hi =
				(unsigned int)num(colon + 1, 1, MAX_AGENTS);
			if (opt.bisect_lo >= opt.bisect_hi)
				usage();
			break;
		case 'X':
			if (opt.nr_sets == ARRAY_SIZE(opt.sets) ||
			    !strchr(optarg, '='))
				usage();
			opt.sets[opt.nr_sets++] = optarg;
			break;
		case 'g':
			colon = strchr(optarg, ':');
			if (colon)
				*colon = 0;
			opt.grow_start =
				(unsigned int)num(optarg, 1, MAX_AGENTS);
			opt.grow_max = colon ? (unsigned int)num(colon + 1, 1,
								 MAX_AGENTS) :
					       MAX_AGENTS;
			if (opt.grow_start > opt.grow_max)
				usage();
			break;
		case 'K':
			opt.turns = (unsigned int)num(optarg, 1, 64);
			break;
		case 'P':
			opt.prompt = (unsigned int)num(optarg, 1, 1 << 20);
			break;
		case 'M':
			opt.decode = (unsigned int)num(optarg, 1, 1 << 20);
			break;
		case 'T':
			opt.tool_tokens = (unsigned int)num(optarg, 1, 1 << 20);
			break;
		case 'u':
			opt.chunk = (unsigned int)num(optarg, 1, 1 << 20);
			break;
		case 'm':
			opt.tool_median_ms = real(optarg, 0.001, 3.6e6);
			break;
		case 'S':
			opt.tool_sigma = real(optarg, 0, 4);
			break;
		case 'e':
			opt.estimate_error = real(optarg, 0, 100);
			break;
		case 'r':
			opt.arrival_rate = real(optarg, 1e-3, 1e6);
			break;
		case 1002:
			opt.measure_s = real(optarg, 1, 3600);
			break;
		case 1003:
			opt.repeat = (unsigned int)num(optarg, 1, 100);
			break;
		case 'B':
			opt.cpu_mem = size_arg(optarg);
			cpu_mem_set = true;
			break;
		case 'R':
			opt.ref_mem = size_arg(optarg);
			break;
		case 1001:
			opt.swap = size_arg(optarg);
			break;
		case 'x':
			opt.max_tokens = (unsigned int)num(optarg, 1, 1 << 20);
			break;
		case 's':
			opt.seed = num(optarg, 0, UINT32_MAX);
			break;
		case 'p':
			parse_policies(optarg);
			break;
		case 'k':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
				usage();
			opt.backend = optarg;
			break;
		case 'o':
			opt.out = optarg;
			break;
		case 'd':
			opt.djinnd = optarg;
			break;
		case 'c':
			opt.djinnctl = optarg;
			break;
		case 'C':
			opt.cache = optarg;
			break;
		case 'D':
			opt.model_dir = optarg;
			break;
		case 'a':
			opt.model_args = optarg;
			break;
		case 'l':
			opt.lease_ms = (unsigned int)num(optarg, 10, 3600000);
			break;
		case 't':
			opt.threads = (unsigned int)num(optarg, 1, 1024);
			break;
		case 'A':
			opt.slo_agents =
				(unsigned int)num(optarg, 1, MAX_AGENTS);
			break;
		case 'W':
			opt.run_timeout_s = (unsigned int)num(optarg, 1, 86400);
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	need = opt.prompt + opt.turns * opt.decode +
	       (opt.turns - 1) * opt.tool_tokens;
	if (need > opt.max_tokens)
		fail("an agent's context reaches %u tokens: over --max-tokens "
		     "%u",
		     need, opt.max_tokens);
	for (unsigned int i = 0; i < ARRAY_SIZE(models); i++)
		if (!strcmp(models[i].backend, opt.backend))
			model = models[i];
	if (opt.model_args) { /* named after the arguments' FNV-1a hash */
		uint64_t h = 0xcbf29ce484222325ull;

		for (const char *q = opt.model_args; *q; q++)
			h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
		snprintf(model_name_buf, sizeof(model_name_buf),
			 "agent-%016" PRIx64, h);
		model.name = model_name_buf;
		model.mkmodel = opt.model_args;
	}
	if (opt.model_dir)
		snprintf(model_dir, sizeof(model_dir), "%s", opt.model_dir);
	else
		snprintf(model_dir, sizeof(model_dir), "%s/models", opt.cache);
	if (!shell_safe(model_dir) || !shell_safe(opt.mkmodel) ||
	    strlen(model_dir) >= 512)
		fail("--cache, --model-dir: [A-Za-z0-9/._-+,=:] (and under 512 "
		     "bytes)");
	if (!shell_safe_words(model.mkmodel, true) ||
	    strlen(model.mkmodel) > 400)
		fail("--model-args: [A-Za-z0-9/._-+,=: ], 400 bytes at most");
	find_binaries();
	if (!strcmp(opt.backend, "cuda") && access("/dev/nvidiactl", F_OK)) {
		printf("SKIP: --backend cuda: no NVIDIA GPU here "
		       "(no /dev/nvidiactl)\n");
		return 77;
	}
	need_sched_policy();
	if (opt.out) {
		out_file = fopen(opt.out, "w");
		if (!out_file)
			fail("%s: %s", opt.out, strerror(errno));
		fig_copy(out_file);
	}

	make_tmpdir();
	signal(SIGPIPE, SIG_IGN);
	run_init();

	ensure_model();
	if (!strcmp(opt.backend, "cuda") && !cpu_mem_set)
		opt.cpu_mem = CUDA_BUDGET;
	max_n = opt.grow_start ? opt.grow_max :
		opt.bisect_hi  ? opt.bisect_hi :
				 opt.agents[opt.nr_agents - 1];
	if (max_n < opt.slo_agents)
		max_n = opt.slo_agents;
	info("%s backend, model %s, budget %" PRIu64 " MiB, agents of %u "
	     "tokens in contexts of %u, %u turns, tools of median %g ms "
	     "(sigma %g, estimates off by %g), %g arrivals/s, %u policies",
	     opt.backend, model.name, opt.cpu_mem / MiB, need, opt.max_tokens,
	     opt.turns, opt.tool_median_ms, opt.tool_sigma, opt.estimate_error,
	     opt.arrival_rate, opt.nr_policies);
	ref_pass(max_n);
	slo_pass();
	densities();
	info("done in %.0f s", (double)(mono_ns() - t0) / 1e9);
	for (unsigned int i = 0; i < MAX_AGENTS; i++) {
		free(agents[i].tokens);
		free(agents[i].turn_ns);
		free(agents[i].ready);
	}
	free(ref_tokens);
	if (out_file && fclose(out_file))
		fail("%s: %s", opt.out, strerror(errno));
	return 0;
}
