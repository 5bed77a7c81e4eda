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
 * monotonic in N). The targets (issue: semantic >= 2 x static's density
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
 * Usage: agent-bench [--agents N,N,...] [--bisect LO:HI] [--turns K]
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
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>
#include <jansson.h>

#include "bench.h"

#define MiB ((uint64_t)1 << 20)
#define MAX_AGENTS 1024
#define MAX_POLICIES 3
#define MAX_POINTS 64 /* (policy, N) runs kept per policy */
#define MAX_LIST 32
/* a repeat's agents start their rounds here, so that their tools are
 * drawn anew */
#define REPEAT_ROUNDS 1000u
/* --backend cuda's default budget: the 12x768 model's 0.5 GB of weights,
 * its stack, and about 8 agents' caches at 67 MB */
#define CUDA_BUDGET (1536 * MiB)

/*
 * struct model_spec - the model a backend runs
 * @name:    its directory under the model directory
 * @mkmodel: scripts/mkmodel.py's arguments for it
 */
struct model_spec {
	const char *backend, *name, *mkmodel;
};

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

static struct {
	unsigned int agents[MAX_LIST], nr_agents;
	unsigned int bisect_lo, bisect_hi;
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
} opt = {
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

static struct model_spec model; /* of the backend, or --model-args */
static bool cpu_mem_set; /* --cpu-mem given */
static char model_dir[1024], model_name_buf[32];
static FILE *out_file;
static uint32_t vocab;

static void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void info(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "agent-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ------------------------------------------------------------------------ */
/* Seeded streams */

/* The stream @what of agent @id (or of the run, for id ~0). */
static uint64_t stream(uint64_t id, uint64_t what)
{
	uint64_t s = opt.seed ^ (id + 1) * 0xd1b54a32d192ed03ull ^
		     what * 0xabc98388fb8fac03ull;

	return splitmix64(&s);
}

/* Uniform in (0, 1). */
static double uniform(uint64_t *s)
{
	return ((double)(splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
}

static double std_normal(uint64_t *s)
{
	double u1 = uniform(s), u2 = uniform(s);

	return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

enum { S_PROMPT = 1, S_TOOL_TOKENS, S_TOOL_TIME, S_ARRIVAL };

/* ------------------------------------------------------------------------ */
/* Statistics, JSON lines */

/* A growing list of samples, ms. */
struct samples {
	double *v;
	size_t nr, cap;
};

/* Nearest-rank percentile @p (0 < p <= 1) of @s; NAN for none. Sorts
 * them. */
static double percentile(struct samples *s, double p)
{
	size_t k;

	if (!s->nr)
		return NAN;
	qsort(s->v, s->nr, sizeof(*s->v), cmp_double);
	k = (size_t)ceil(p * (double)s->nr);
	return s->v[k ? k - 1 : 0];
}

/*
 * struct fig - one figure, one line
 * @policy, @agents: the run it is of (NULL, 0: none)
 * @baseline: the reference measured in this run; NAN: null
 * @limit:    a constant or a threshold the value is held to instead (the
 *            SLO, zero refusals): the line has it in place of @baseline
 *            when @limit_name is set
 * @target:   "<=" or ">=": ratio against @want (value against @want
 *            when @on_value), or NULL for none
 */
struct fig {
	const char *policy;
	unsigned int agents;
	const char *metric;
	double value;
	const char *unit;
	double baseline;
	const char *baseline_name;
	double limit;
	const char *limit_name;
	const char *target;
	double want;
	bool on_value;
	unsigned int samples;
	const char *note;
};

static void put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void put(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (out_file) {
		va_start(ap, fmt);
		vfprintf(out_file, fmt, ap);
		va_end(ap);
	}
}

static void emit(const struct fig *f)
{
	char val[32], base[32], ratio[32], want[32], note[1024];
	bool is_limit = f->limit_name;
	double ref = is_limit ? f->limit : f->baseline;
	const char *ref_key = is_limit ? "limit" : "baseline";
	const char *ref_name = is_limit ? f->limit_name : f->baseline_name;
	double r = NAN;

	if (isfinite(ref) && ref != 0 && isfinite(f->value))
		r = f->value / ref;
	fmt_num(val, sizeof(val), f->value);
	fmt_num(base, sizeof(base), ref);
	fmt_num(ratio, sizeof(ratio), r);
	put("{\"bench\": \"agent_%s\", \"metric\": \"%s\", \"value\": %s, "
	    "\"unit\": \"%s\", \"%s\": %s, \"ratio\": %s",
	    opt.backend, f->metric, val, f->unit, ref_key, base, ratio);
	if (ref_name) {
		json_str(note, sizeof(note), ref_name);
		put(", \"%s_name\": \"%s\"", ref_key, note);
	}
	if (f->policy)
		put(", \"policy\": \"%s\"", f->policy);
	if (f->agents)
		put(", \"agents\": %u", f->agents);
	if (f->target) {
		bool ge = !strcmp(f->target, ">=");
		double x = f->on_value ? f->value : r;

		fmt_num(want, sizeof(want), f->want);
		put(", \"target\": \"%s %s %s\"",
		    f->on_value ? "value" : "ratio", f->target, want);
		if (isfinite(x))
			put(", \"met\": %s",
			    (ge ? x >= f->want : x <= f->want) ? "true" :
								 "false");
		else
			put(", \"met\": null");
	}
	if (f->samples)
		put(", \"samples\": %u", f->samples);
	if (f->note) {
		json_str(note, sizeof(note), f->note);
		put(", \"note\": \"%s\"", note);
	}
	put("}\n");
	fflush(stdout);
	if (out_file)
		fflush(out_file);
}

/* ------------------------------------------------------------------------ */
/* Children: the model writer, djinnd, djinnctl */

static char tmpdir[64];
static volatile pid_t daemon_pid = -1;

/* MODEL_DIR/<the model> (ensure_mkmodel()); MODEL_DIR becomes absolute,
 * as djinnd wants it. */
static void ensure_model(void)
{
	char path[PATH_MAX];

	ensure_mkmodel(model_dir, model.name, opt.mkmodel, model.mkmodel);
	if (!realpath(model_dir, path) || strlen(path) >= sizeof(model_dir))
		fail("%s: %s", model_dir, strerror(errno));
	strcpy(model_dir, path);
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = ns_to_timespec(t);

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

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

/* BUILD/bench/agent-bench -> BUILD/@rel, unless @given. */
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

static char djinnd_buf[PATH_MAX + 32], djinnctl_buf[PATH_MAX + 32];
static const char *djinnd_bin, *djinnctl_bin;
static char sock_addr[128], admin_path[128], log_path[128];

/* Whether `djinnd --help` mentions --sched-policy. */
static bool djinnd_has_policy(void)
{
	char *argv[] = { (char *)djinnd_bin, "--help", NULL };
	static char buf[16384];

	run_capture(argv, 10000, buf, sizeof(buf));
	return strstr(buf, "--sched-policy");
}

static bool djinnd_answers(void)
{
	struct djinn_conn *conn;

	if (djinn_connect(sock_addr, &conn))
		return false;
	djinn_disconnect(conn);
	return true;
}

/* Start djinnd with @policy (NULL: none) and @mem bytes; exits 77 when
 * --backend cuda finds no GPU there. */
static void daemon_start(const char *policy, uint64_t mem)
{
	char memarg[32], lease[16], threads[16], swap[48], pin[128];
	const char *argv[32];
	uint64_t deadline = mono_ns() + 60 * NSEC_PER_SEC;
	unsigned int a = 0;
	int status;

	snprintf(memarg, sizeof(memarg), "%" PRIu64, mem);
	snprintf(lease, sizeof(lease), "%u", opt.lease_ms);
	snprintf(threads, sizeof(threads), "%u", opt.threads);
	argv[a++] = djinnd_bin;
	argv[a++] = "--foreground";
	argv[a++] = "--backend";
	argv[a++] = opt.backend;
	/* the budget bounds the device: a CPU's whole memory, a GPU's
	 * memory for sessions */
	argv[a++] = strcmp(opt.backend, "cuda") ? "--cpu-mem" : "--gpu-mem";
	argv[a++] = memarg;
	argv[a++] = "--listen";
	argv[a++] = sock_addr;
	argv[a++] = "--admin-socket";
	argv[a++] = admin_path;
	argv[a++] = "--model-dir";
	argv[a++] = model_dir;
	argv[a++] = "--lease-ms";
	argv[a++] = lease;
	argv[a++] = "--log-level";
	argv[a++] = "notice";
	snprintf(swap, sizeof(swap), "memory.swap=%" PRIu64, opt.swap);
	argv[a++] = "--set";
	argv[a++] = swap;
	/* the weights stay where they are: a budget of the whole device
	 * keeps static partitioning from streaming layers to make room
	 * (Documentation/streaming.rst, "Under memory pressure") */
	snprintf(pin, sizeof(pin), "model.%s.budget=%" PRIu64, model.name, mem);
	argv[a++] = "--set";
	argv[a++] = pin;
	if (opt.threads) {
		argv[a++] = "--threads";
		argv[a++] = threads;
	}
	if (policy) {
		argv[a++] = "--sched-policy";
		argv[a++] = policy;
	}
	argv[a] = NULL;
	unlink(log_path);
	daemon_pid = spawn((char *const *)argv, log_path, NULL);
	while (mono_ns() < deadline) {
		if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			if (!strcmp(opt.backend, "cuda")) {
				printf("SKIP: djinnd --backend cuda did not "
				       "start (no GPU, or no CUDA backend):\n");
				fflush(stdout);
				show_tail(log_path);
				exit(77);
			}
			show_tail(log_path);
			fail("djinnd exited at start (status %#x)", status);
		}
		if (djinnd_answers())
			return;
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	show_tail(log_path);
	fail("djinnd does not answer after 60 s");
}

/* Stop djinnd: SIGTERM, 20 s, then SIGKILL. Whether it stopped cleanly. */
static bool daemon_stop(void)
{
	uint64_t deadline = mono_ns() + 20 * NSEC_PER_SEC;
	pid_t pid = daemon_pid;
	int status;

	if (pid <= 0)
		return true;
	kill(pid, SIGTERM);
	while (mono_ns() < deadline) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			daemon_pid = -1;
			unlink(log_path);
			return WIFEXITED(status) && !WEXITSTATUS(status);
		}
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	daemon_pid = -1;
	show_tail(log_path);
	info("djinnd did not stop within 20 s of SIGTERM");
	return false;
}

/* Async-signal-safe. A killed djinnd leaves its sockets. */
static void remove_tmpdir(void)
{
	if (!tmpdir[0])
		return;
	unlink(log_path);
	unlink(admin_path);
	unlink(sock_addr + strlen("unix:"));
	rmdir(tmpdir);
	tmpdir[0] = 0;
}

static void cleanup(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = -1;
	}
	remove_tmpdir();
}

static void on_signal(int sig)
{
	if (daemon_pid > 0)
		kill(daemon_pid, SIGKILL);
	remove_tmpdir();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* `djinnctl -j --socket ADMIN @object` parsed; NULL if it failed. */
static json_t *djinnctl_json(const char *object)
{
	char *argv[] = { (char *)djinnctl_bin, "-j",	       "--socket",
			 admin_path,	       (char *)object, NULL };
	static char buf[1 << 20];
	json_error_t je;
	json_t *j;
	int st;

	st = run_capture(argv, 10000, buf, sizeof(buf));
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
		return NULL;
	j = json_loads(buf, 0, &je);
	if (!j)
		info("djinnctl %s: not JSON: %s", object, je.text);
	return j;
}

static double jnum(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* ------------------------------------------------------------------------ */
/* Agents */

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

static bool is_refusal(int ret)
{
	return ret == -ENOMEM || ret == -ENOSPC || ret == -EDQUOT ||
	       ret == -EAGAIN || ret == -ETIMEDOUT;
}

/* Agent @id's prompt or turn @k's tool output, into @t[@n]. */
static void agent_tokens(unsigned int id, uint64_t what, unsigned int k,
			 int32_t *t, unsigned int n)
{
	uint64_t s = stream(id, what) + k * 0x632be59bd9b4e019ull;

	for (unsigned int i = 0; i < n; i++)
		t[i] = (int32_t)(splitmix64(&s) % vocab);
}

/* Agent @id's tool calls in its slot's round @round: durations and
 * estimates, ns, turns - 1 each. */
static void agent_tools(unsigned int id, unsigned int round, uint64_t *dur,
			uint64_t *est)
{
	uint64_t s = stream(id, S_TOOL_TIME) + round * 0x9e3779b97f4a7c15ull;
	bool up = splitmix64(&s) & 1;

	for (unsigned int k = 0; k + 1 < opt.turns; k++) {
		double d = opt.tool_median_ms * 1e6 *
			   exp(opt.tool_sigma * std_normal(&s));
		double f = up ? 1 + opt.estimate_error : 1 - opt.estimate_error;

		if (f < 0.01)
			f = 0.01;
		dur[k] = (uint64_t)d;
		est[k] = (uint64_t)(d * f);
		if (!dur[k])
			dur[k] = 1;
		if (!est[k])
			est[k] = 1;
		up = !up;
	}
}

static int32_t *ref_tokens; /* [agent][turns x decode] */
static unsigned int nr_ref;

/*
 * run - the run going on
 * @start:  its start (ns, CLOCK_MONOTONIC); agents arrive after it
 * @from:   turns ready from here on are measured (M_LOAD: the last
 *          slot's first arrival, from which N agents are live)
 * @stop:   the window's end: turns ready from here on are not measured,
 *          no agent starts, and agents waiting on tools stop (UINT64_MAX:
 *          no window, the agents run to their end)
 * @done:   slots ended
 * @lat:    the measured turns' latencies, ms;
 *          @first, @resume: the same of turns 0 and of the later ones;
 *          @setup: turns 0's set-up (struct agent)
 * @jct:    completed agents' job completion times, ms
 * the rest: counts of agents
 */
static struct {
	enum mode mode;
	uint64_t start, from, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int done;
	struct samples lat, first, resume, setup, jct;
	unsigned int agents, completed, refusals, errors, checked, equal;
	char first_err[320];
} run;

/* Append @t[@n] to @c in prefills of --prefill-chunk tokens at most. */
static int prefill(struct djinn_ctx *c, const int32_t *t, unsigned int n)
{
	for (unsigned int o = 0; o < n; o += opt.chunk) {
		unsigned int k = n - o < opt.chunk ? n - o : opt.chunk;
		int ret = djinn_ctx_prefill(c, t + o, k, NULL, NULL);

		if (ret)
			return ret;
	}
	return 0;
}

/* Note @a's first failure, @ret at @where, with the daemon's message. */
static void agent_failed(struct agent *a, int ret, const char *where)
{
	a->ret = ret;
	a->where = where;
	a->refused = is_refusal(ret);
	snprintf(a->msg, sizeof(a->msg), "%s", djinn_last_error());
}

static void *agent_main(void *arg)
{
	struct agent *a = arg;
	struct djinn_session_opts so = DJINN_SESSION_OPTS_INIT;
	uint64_t t_arr = run.start + a->arrive, ready;
	unsigned int K = opt.turns, M = opt.decode;
	uint64_t dur[64], est[64];
	struct djinn_session *s = NULL;
	struct djinn_conn *conn = NULL;
	struct djinn_model *m = NULL;
	struct djinn_ctx *c = NULL;
	int32_t *buf;
	char tenant[32];
	int ret;

	buf = calloc(opt.prompt > opt.tool_tokens ? opt.prompt :
						    opt.tool_tokens,
		     sizeof(*buf));
	if (!buf) {
		agent_failed(a, -ENOMEM, "calloc");
		goto out;
	}
	agent_tools(a->id, a->round, dur, est);
	sleep_until(t_arr);
	ready = mono_ns();
	ret = djinn_connect(sock_addr, &conn);
	if (ret) {
		agent_failed(a, ret, "connect");
		goto out;
	}
	snprintf(tenant, sizeof(tenant), "agent-%u", a->id);
	so.tenant = tenant;
	ret = djinn_session_open(conn, &so, &s);
	if (ret) {
		agent_failed(a, ret, "session_open");
		goto out;
	}
	ret = djinn_model_open(s, model.name, &m);
	if (ret) {
		agent_failed(a, ret, "model_open");
		goto out;
	}
	ret = djinn_ctx_new(m, opt.max_tokens, &c);
	if (ret) {
		agent_failed(a, ret, "ctx_new");
		goto out;
	}
	a->setup_ns = mono_ns() - ready;
	agent_tokens(a->id, S_PROMPT, 0, buf, opt.prompt);
	ret = prefill(c, buf, opt.prompt);
	if (ret) {
		agent_failed(a, ret, "prefill");
		goto out;
	}
	for (unsigned int k = 0; k < K; k++) {
		if (k && run.mode != M_REF) {
			ret = djinn_tool_call_begin(s, est[k - 1]);
			if (ret) {
				agent_failed(a, ret, "tool_call_begin");
				goto out;
			}
			if (mono_ns() + dur[k - 1] >= run.stop) {
				/* the window ends before the tool does */
				sleep_until(run.stop);
				a->cut = true;
				goto out;
			}
			sleep_ns(dur[k - 1]);
			ready = mono_ns();
			ret = djinn_tool_call_end(s);
			if (ret) {
				agent_failed(a, ret, "tool_call_end");
				goto out;
			}
		} else if (k) {
			ready = mono_ns();
		}
		if (k) {
			agent_tokens(a->id, S_TOOL_TOKENS, k, buf,
				     opt.tool_tokens);
			ret = prefill(c, buf, opt.tool_tokens);
			if (ret) {
				agent_failed(a, ret, "tool prefill");
				goto out;
			}
		}
		ret = djinn_ctx_decode(c, M, NULL, a->tokens + k * M, NULL,
				       NULL);
		if (ret != (int)M) {
			agent_failed(a, ret < 0 ? ret : -EIO, "decode");
			goto out;
		}
		a->turn_ns[k] = mono_ns() - ready;
		a->ready[k] = ready - run.start;
		a->turns_done = k + 1;
	}
	a->jct_ns = mono_ns() - t_arr;
out:
	djinn_ctx_free(c);
	if (m)
		djinn_model_close(m);
	if (s)
		djinn_session_close(s);
	djinn_disconnect(conn);
	free(buf);
	return NULL;
}

static void agent_init(struct agent *a, unsigned int id, uint64_t arrive)
{
	free(a->tokens);
	free(a->turn_ns);
	free(a->ready);
	memset(a, 0, sizeof(*a));
	a->id = id;
	a->arrive = arrive;
	a->tokens = calloc((size_t)opt.turns * opt.decode, sizeof(int32_t));
	a->turn_ns = calloc(opt.turns, sizeof(uint64_t));
	a->ready = calloc(opt.turns, sizeof(uint64_t));
	if (!a->tokens || !a->turn_ns || !a->ready)
		fail("no memory");
}

/* The warm-up session: loads the model and holds it for the run. */
struct warm {
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
};

static void warm_open(struct warm *w)
{
	struct djinn_session_opts so = DJINN_SESSION_OPTS_INIT;
	struct djinn_model_info mi;
	struct djinn_ctx *c;
	int32_t t[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out;
	int ret;

	so.tenant = "agent-bench-warm";
	ret = djinn_connect(sock_addr, &w->conn);
	if (!ret)
		ret = djinn_session_open(w->conn, &so, &w->s);
	if (!ret)
		ret = djinn_model_open(w->s, model.name, &w->m);
	if (ret)
		fail("warm-up: %s (%s)", djinn_last_error(), strerror(-ret));
	djinn_model_info(w->m, &mi);
	if (vocab && vocab != mi.vocab)
		fail("%s: a vocabulary of %u, then %u", model.name, vocab,
		     mi.vocab);
	vocab = mi.vocab;
	if (opt.max_tokens > mi.max_tokens)
		fail("--max-tokens %u: %s has contexts of %u at most",
		     opt.max_tokens, model.name, mi.max_tokens);
	/* one step, so that the backend's first-call costs are paid */
	ret = djinn_ctx_new(w->m, 16, &c);
	if (!ret) {
		ret = djinn_ctx_prefill(c, t, 8, NULL, NULL);
		if (!ret)
			ret = djinn_ctx_decode(c, 1, NULL, &out, NULL, NULL);
		djinn_ctx_free(c);
	}
	if (ret < 0)
		fail("warm-up step: %s (%s)", djinn_last_error(),
		     strerror(-ret));
}

static void warm_close(struct warm *w)
{
	if (w->m)
		djinn_model_close(w->m);
	if (w->s)
		djinn_session_close(w->s);
	djinn_disconnect(w->conn);
	memset(w, 0, sizeof(*w));
}

static void push(struct samples *s, double x)
{
	if (s->nr == s->cap) {
		size_t c = s->cap ? 2 * s->cap : 256;
		double *n = realloc(s->v, c * sizeof(*n));

		if (!n)
			fail("no memory");
		s->v = n;
		s->cap = c;
	}
	s->v[s->nr++] = x;
}

static void samples_clear(struct samples *s)
{
	free(s->v);
	*s = (struct samples){ 0 };
}

/* Count agent @a, ended, into the run: its measured turns, its failure
 * or its JCT, and whether it decoded its reference tokens. */
static void bank(const struct agent *a)
{
	size_t per = (size_t)opt.turns * opt.decode;

	pthread_mutex_lock(&run.lock);
	run.agents++;
	for (unsigned int k = 0; k < a->turns_done; k++) {
		uint64_t at = run.start + a->ready[k];
		double ms = (double)a->turn_ns[k] / 1e6;

		if (at < run.from || at >= run.stop)
			continue;
		push(&run.lat, ms);
		if (k) {
			push(&run.resume, ms);
		} else {
			push(&run.first, ms);
			push(&run.setup, (double)a->setup_ns / 1e6);
		}
	}
	if (a->ret) {
		if (a->refused)
			run.refusals++;
		else
			run.errors++;
		if (!run.first_err[0])
			snprintf(run.first_err, sizeof(run.first_err),
				 "agent %u: %s: %s%s%s", a->id, a->where,
				 strerror(-a->ret), a->msg[0] ? ": " : "",
				 a->msg);
	} else if (!a->cut) {
		run.completed++;
		push(&run.jct, (double)a->jct_ns / 1e6);
	}
	/* what it decoded, failed or cut or not, is the reference's start */
	if (a->turns_done && a->id < nr_ref) {
		size_t n = (size_t)a->turns_done * opt.decode;

		run.checked++;
		if (!memcmp(a->tokens, ref_tokens + a->id * per,
			    n * sizeof(int32_t)))
			run.equal++;
	}
	pthread_mutex_unlock(&run.lock);
}

/* A slot of a load run: its agent, then another in its place as soon as
 * it ends, until the window closes, so that N agents are live
 * throughout. A slot whose agent failed ends (a refused agent's
 * successor would be refused in a tight loop). */
static void *slot_main(void *arg)
{
	struct agent *a = arg;

	for (;;) {
		unsigned int round = a->round;

		agent_main(a);
		bank(a);
		if (a->ret || mono_ns() >= run.stop)
			break;
		agent_init(a, a->id, mono_ns() - run.start);
		a->round = round + 1;
	}
	pthread_mutex_lock(&run.lock);
	run.done++;
	pthread_cond_signal(&run.cond);
	pthread_mutex_unlock(&run.lock);
	return NULL;
}

/* Forget the samples and counts: a point's repeats pool theirs. */
static void run_clear(void)
{
	samples_clear(&run.lat);
	samples_clear(&run.first);
	samples_clear(&run.resume);
	samples_clear(&run.setup);
	samples_clear(&run.jct);
	run.agents = run.completed = run.refusals = run.errors = 0;
	run.checked = run.equal = 0;
	run.first_err[0] = 0;
}

static void run_reset(enum mode mode)
{
	run.mode = mode;
	run.done = 0;
	run.from = 0;
	run.stop = UINT64_MAX;
}

/*
 * Run agents on the daemon running now. M_LOAD: @n slots together, each
 * starting at its Poisson arrival and keeping an agent live until the
 * window (--measure seconds from the last slot's arrival) ends. Else: @n
 * agents one after the other, each arriving at once, run to their end.
 * Returns false when the run passed --run-timeout (djinnd is then
 * killed, which fails the agents' calls, and the agents are joined).
 */
static bool run_agents(enum mode mode, struct agent *ag, unsigned int n)
{
	uint64_t deadline;
	bool ok = true;

	run_reset(mode);
	if (mode != M_LOAD) { /* one at a time, each arriving at once */
		deadline =
			mono_ns() + (uint64_t)opt.run_timeout_s * NSEC_PER_SEC;
		for (unsigned int i = 0; i < n && ok; i++) {
			ag[i].arrive = 0;
			run.start = mono_ns();
			agent_main(&ag[i]);
			if (mode != M_REF)
				bank(&ag[i]);
			ok = mono_ns() < deadline;
		}
		return ok;
	}
	run.start = mono_ns() + 20 * NSEC_PER_MSEC; /* the threads first */
	run.from = run.start + ag[n - 1].arrive;
	run.stop = run.from + (uint64_t)(opt.measure_s * 1e9);
	deadline = run.stop + (uint64_t)opt.run_timeout_s * NSEC_PER_SEC;
	for (unsigned int i = 0; i < n; i++)
		if (pthread_create(&ag[i].thread, NULL, slot_main, &ag[i]))
			fail("pthread_create: %s", strerror(errno));
	pthread_mutex_lock(&run.lock);
	while (run.done < n) {
		struct timespec ts = ns_to_timespec(deadline);

		if (pthread_cond_timedwait(&run.cond, &run.lock, &ts) ==
		    ETIMEDOUT) {
			ok = false;
			break;
		}
	}
	pthread_mutex_unlock(&run.lock);
	if (!ok) {
		info("the run passed --run-timeout %u s: killing djinnd",
		     opt.run_timeout_s);
		kill(daemon_pid, SIGKILL);
	}
	for (unsigned int i = 0; i < n; i++)
		pthread_join(ag[i].thread, NULL);
	return ok;
}

/* ------------------------------------------------------------------------ */
/* Runs */

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

static struct agent agents[MAX_AGENTS];
static double slo_ms = NAN, alone_p50 = NAN, alone_p99 = NAN;
static double alone_first_p99 = NAN, alone_resume_p99 = NAN;
static double alone_jct_p50 = NAN, alone_jct_p99 = NAN;
static unsigned int alone_samples;

/* Fill @r's figures from the run that ended. */
static void collect(struct result *r)
{
	r->turn_samples = (unsigned int)run.lat.nr;
	r->turn_p50 = percentile(&run.lat, 0.5);
	r->turn_p99 = percentile(&run.lat, 0.99);
	r->first_p50 = percentile(&run.first, 0.5);
	r->first_p99 = percentile(&run.first, 0.99);
	r->resume_p50 = percentile(&run.resume, 0.5);
	r->resume_p99 = percentile(&run.resume, 0.99);
	r->setup_p50 = percentile(&run.setup, 0.5);
	r->setup_p99 = percentile(&run.setup, 0.99);
	r->jct_p50 = percentile(&run.jct, 0.5);
	r->jct_p99 = percentile(&run.jct, 0.99);
	r->agents = run.agents;
	r->completed = run.completed;
	r->refusals = run.refusals;
	r->errors = run.errors;
	r->checked = run.checked;
	r->equal = run.equal;
	memcpy(r->first_err, run.first_err, sizeof(r->first_err));
}

/* The daemon's counters, before it stops. */
static void daemon_counters(struct result *r)
{
	json_t *v = djinnctl_json("vmu"), *s = djinnctl_json("sched"), *d;

	r->swap_outs = r->swap_ins = r->swap_bytes_out = NAN;
	r->swap_bytes_in = r->admit_refusals = NAN;
	if (json_is_array(v)) /* several devices: the first */
		d = json_array_get(v, 0);
	else
		d = v;
	if (d) {
		r->swap_outs = jnum(d, "swap_outs");
		r->swap_ins = jnum(d, "swap_ins");
		r->swap_bytes_out = jnum(d, "swapped_out_bytes");
		r->swap_bytes_in = jnum(d, "swapped_in_bytes");
		r->admit_refusals = jnum(d, "admit_refusals");
	}
	r->swaps_signal = r->swaps_pressure = r->prefetches = NAN;
	r->prefetch_hits = r->prefetch_misses = r->admit_waits = NAN;
	r->admit_timeouts = NAN;
	d = json_array_get(json_object_get(s, "devices"), 0);
	if (d) {
		r->sched = true;
		r->swaps_signal = jnum(d, "swaps_signal");
		r->swaps_pressure = jnum(d, "swaps_pressure");
		r->prefetches = jnum(d, "prefetches");
		r->prefetch_hits = jnum(d, "prefetch_hits");
		r->prefetch_misses = jnum(d, "prefetch_misses");
		r->admit_waits = jnum(d, "admit_waits");
		r->admit_timeouts = jnum(d, "admit_timeouts");
		/* the scheduler's own byte counts, both causes */
		if (isfinite(jnum(d, "swap_bytes_out")))
			r->swap_bytes_out = jnum(d, "swap_bytes_out");
		if (isfinite(jnum(d, "swap_bytes_in")))
			r->swap_bytes_in = jnum(d, "swap_bytes_in");
	}
	json_decref(v);
	json_decref(s);
}

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

/* Poisson arrivals: agent i's, ns after the start, the same in every run
 * (the i-th sum of seeded exponential gaps). */
static uint64_t arrival(unsigned int i)
{
	static uint64_t *at;
	static unsigned int have;

	if (!at) {
		uint64_t s = stream(~0ull, S_ARRIVAL);
		double t = 0;

		at = calloc(MAX_AGENTS, sizeof(*at));
		if (!at)
			fail("no memory");
		for (unsigned int k = 0; k < MAX_AGENTS; k++) {
			at[k] = (uint64_t)(t * 1e9);
			t += -log(uniform(&s)) / opt.arrival_rate;
		}
		have = MAX_AGENTS;
	}
	return i < have ? at[i] : 0;
}

/* The reference tokens of agents 0 .. @n - 1: each alone, generous
 * budget, no tool sleeps. */
static void ref_pass(unsigned int n)
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

/* The SLO: agents 0 .. --slo-agents - 1 alone in turn, real tool sleeps,
 * budgeted, semantic policy; 2 x the p99 of their pooled turns. */
static void slo_pass(void)
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
		o += (size_t)snprintf(d->how + o, sizeof(d->how) - o, "%s%u%s",
				      i ? "," : "", r->n, r->pass ? "" : "x");
		if (o >= sizeof(d->how))
			o = sizeof(d->how) - 1;
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

static int policy_index(const char *name)
{
	for (unsigned int i = 0; i < opt.nr_policies; i++)
		if (!strcmp(opt.policies[i], name))
			return (int)i;
	return -1;
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

/* ------------------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
		"usage: agent-bench [--agents N,N,...] [--bisect LO:HI]\n"
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
	struct density d[MAX_POLICIES] = { 0 };
	unsigned int need, max_n;
	uint64_t t0 = mono_ns();
	pthread_condattr_t ca;
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
	djinnd_bin = beside(opt.djinnd, "DJINND", "djinnd/djinnd", djinnd_buf,
			    sizeof(djinnd_buf));
	djinnctl_bin = beside(opt.djinnctl, "DJINNCTL", "tools/djinnctl",
			      djinnctl_buf, sizeof(djinnctl_buf));
	if (access(djinnd_bin, X_OK))
		fail("djinnd binary %s: %s (use --djinnd or $DJINND)",
		     djinnd_bin, strerror(errno));
	if (access(djinnctl_bin, X_OK))
		fail("djinnctl binary %s: %s (use --djinnctl or $DJINNCTL)",
		     djinnctl_bin, strerror(errno));
	if (!strcmp(opt.backend, "cuda") && access("/dev/nvidiactl", F_OK)) {
		printf("SKIP: --backend cuda: no NVIDIA GPU here "
		       "(no /dev/nvidiactl)\n");
		return 77;
	}
	if (!djinnd_has_policy())
		fail("%s has no --sched-policy", djinnd_bin);
	if (opt.out) {
		out_file = fopen(opt.out, "w");
		if (!out_file)
			fail("%s: %s", opt.out, strerror(errno));
	}

	strcpy(tmpdir, "/tmp/agent-bench.XXXXXX");
	if (!mkdtemp(tmpdir))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(sock_addr, sizeof(sock_addr), "unix:%s/sock", tmpdir);
	snprintf(admin_path, sizeof(admin_path), "%s/admin", tmpdir);
	snprintf(log_path, sizeof(log_path), "%s/djinnd.log", tmpdir);
	atexit(cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&run.lock, NULL);
	/* run_agents()' deadline is on CLOCK_MONOTONIC, as mono_ns() */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&run.cond, &ca);
	pthread_condattr_destroy(&ca);

	ensure_model();
	if (!strcmp(opt.backend, "cuda") && !cpu_mem_set)
		opt.cpu_mem = CUDA_BUDGET;
	max_n = opt.bisect_hi ? opt.bisect_hi : opt.agents[opt.nr_agents - 1];
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

	for (unsigned int p = 0; p < opt.nr_policies; p++) {
		if (opt.bisect_hi)
			bisect(p, &d[p]);
		else
			sweep(p, &d[p]);
	}
	summary(d);
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
