// SPDX-License-Identifier: MIT
/*
 * agent-bench's agents (bench/agent/agent.h): each one's seeded prompt,
 * tools and arrival; its turns over libdjinn; and the runs they make
 * together or alone, with the samples and counts those leave.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <djinn/djinn.h>

#include "../bench.h"
#include "agent.h"

/* the model's, from the warm-up session */
static uint32_t vocab;

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

uint64_t arrival(unsigned int i)
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

/* ------------------------------------------------------------------------ */
/* Statistics */

double percentile(struct samples *s, double p)
{
	size_t k;

	if (!s->nr)
		return NAN;
	qsort(s->v, s->nr, sizeof(*s->v), cmp_double);
	k = (size_t)ceil(p * (double)s->nr);
	return s->v[k ? k - 1 : 0];
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

/* ------------------------------------------------------------------------ */
/* Agents */

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

int32_t *ref_tokens; /* [agent][turns x decode] */
unsigned int nr_ref;
struct agent agents[MAX_AGENTS];

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

static void sleep_until(uint64_t t)
{
	struct timespec ts = ns_to_timespec(t);

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

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
	ret = djinn_connect(bench_djinnd.addr, &conn);
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

void agent_init(struct agent *a, unsigned int id, uint64_t arrive)
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

void warm_open(struct warm *w)
{
	struct djinn_session_opts so = DJINN_SESSION_OPTS_INIT;
	struct djinn_model_info mi;
	struct djinn_ctx *c;
	int32_t t[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out;
	int ret;

	so.tenant = "agent-bench-warm";
	ret = djinn_connect(bench_djinnd.addr, &w->conn);
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

void warm_close(struct warm *w)
{
	if (w->m)
		djinn_model_close(w->m);
	if (w->s)
		djinn_session_close(w->s);
	djinn_disconnect(w->conn);
	memset(w, 0, sizeof(*w));
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

void run_clear(void)
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

bool run_agents(enum mode mode, struct agent *ag, unsigned int n)
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
		kill(bench_djinnd.pid, SIGKILL);
	}
	for (unsigned int i = 0; i < n; i++)
		pthread_join(ag[i].thread, NULL);
	return ok;
}

void collect(struct result *r)
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

void run_init(void)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&run.lock, NULL);
	/* run_agents()' deadline is on CLOCK_MONOTONIC, as mono_ns() */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&run.cond, &ca);
	pthread_condattr_destroy(&ca);
}
