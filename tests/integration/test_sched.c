// SPDX-License-Identifier: MIT
/*
 * The scheduler (djinnd/sched/, Documentation/sched.rst) against a real
 * djinnd, through libdjinn and in raw frames, watched through ADMIN_SCHED:
 *
 * - semantic: an agent that waits on a tool (IO_WAIT) with a KV cache on
 *   a full device has it swapped out, so that another agent's prefill is
 *   admitted; the prefetch brings it back before the agent says anything,
 *   and its next tokens are those of a run that was never swapped (a
 *   prefetch hit);
 * - an agent that comes back long before its estimate finds its data
 *   restored on demand, the tokens still right (a prefetch miss);
 * - fair queueing: a session that submits one small graph behind another
 *   session's 64 waits behind at most one of them, and all 64 answer
 *   right; a 65th graph or model step in flight is -EAGAIN;
 * - static: a context reserves its whole KV cache at CTX_NEW, and the
 *   one that does not fit is refused naming sched.policy static;
 * - the policy from --sched-policy, --set and the configuration file;
 *   bad policy names and tenant shares stop djinnd from starting, and a
 *   reload with a bad share keeps the running shares;
 * - a context's own wait (djinn_ctx_signal()): its cache alone leaves and
 *   comes back; a step on another context of the session leaves the wait
 *   as it is, one on it ends it; COMPUTE and the context's end end it;
 * - IO_WAIT with no estimate or a negative one converted is -EINVAL, a
 *   long one is clamped to sched.max_io_wait, and a signal for another
 *   connection's session is refused.
 *
 * No assertion is on how fast anything is: waits are polled with
 * generous deadlines (the ASan build on a loaded machine).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "libdjinn_fx.h"

#define MiB (1ull << 20)

/*
 * An agent's model: 32 layers of 64 wide, so that its KV cache (16 KiB a
 * token) outweighs its weights (8 MiB) and a step of CHUNK tokens needs
 * little more than the cache. In a device of AGENT_MEM, one agent's
 * PROMPT tokens of cache fit beside another agent's prefill, two do not.
 */
#define AGENT_GPT2                                                 \
	"--arch gpt2 --layers 32 --embd 64 --heads 2 --vocab 256 " \
	"--ctx 1024 --seed 11"
#define AGENT_MEM "28M"
/* 4 layers of about 3.9 MB, embeddings and head about 1 MB: 18 MiB of
 * text whole, 14 MiB with one layer left and a ring of two */
#define BIG_LLAMA                                                   \
	"--seed 21 --arch llama --embd 256 --heads 4 --kv-heads 2 " \
	"--inner 1024 --layers 4 --vocab 512 --untied"
#define AGENT_CTX 1024
#define AGENT_TOK_BYTES (2ull * 32 * 64 * 4)
#define PROMPT 512
#define CHUNK 16
#define NTOK 8
#define VOCAB 256

/* A matrix of the fairness test: N x N f32. */
#define N 512
#define NGRAPHS 64 /* SCHED_INFLIGHT_MAX */

struct fx {
	struct djd d;
	struct djinn_conn *conn;
	char conf[64]; /* a configuration file of the test's, or "" */
};

/* ---------------------------------------------------------------------- */
/* Set-up */

/* djinnd with @mem of device memory, a 30 s lease, @extra arguments,
 * model @name written with @model (or none). */
static int fx_start(void **state, const char *mem, const char *const *extra,
		    const char *name, const char *model)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	if (djd_start_conn(&fx->d, mem, 30000, extra, name, model, &fx->conn)) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int setup_agents(void **state)
{
	return fx_start(state, AGENT_MEM, NULL, "agent", AGENT_GPT2);
}

static int setup_static(void **state)
{
	const char *args[] = { "--sched-policy", "static", NULL };

	return fx_start(state, AGENT_MEM, args, "agent", AGENT_GPT2);
}

static int setup_static_big(void **state)
{
	const char *args[] = { "--sched-policy", "static", NULL };

	return fx_start(state, "40M", args, "big", BIG_LLAMA);
}

static int setup_graphs(void **state)
{
	return fx_start(state, "512M", NULL, "tiny", TINY_GPT2);
}

static int setup_plain(void **state)
{
	return fx_start(state, "64M", NULL, NULL, NULL);
}

/* No daemon: the test starts its own. */
static int setup_none(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	fx->d.pid = -1;
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	int ret = 0;

	djinn_disconnect(fx->conn);
	if (fx->d.pid > 0)
		ret = djd_stop(&fx->d, 20000);
	if (fx->conf[0])
		unlink(fx->conf);
	free(fx);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* The admin socket */

static void admin(struct fx *fx, uint16_t op, struct dj_resp *r)
{
	djd_admin(&fx->d, op, NULL, 0, r);
	if (r->error)
		fail_msg("admin opcode %u: %d: %s", op, r->error, r->msg);
}

/*
 * ADMIN_SCHED: the (one) device into *@dev, session @sid's entry into
 * *@e (when @e is not NULL); whether @sid is listed.
 */
static bool sched_info(struct fx *fx, uint64_t sid,
		       struct djinn_admin_sched_dev *dev,
		       struct djinn_admin_sched_session *e)
{
	const struct djinn_admin_sched_session *s;
	struct dj_resp r;
	uint32_t ndev, nsess;
	bool found = false;

	admin(fx, DJINN_MSG_ADMIN_SCHED, &r);
	assert_true(r.len >= 8);
	memcpy(&ndev, r.data, 4);
	memcpy(&nsess, r.data + 4, 4);
	assert_int_equal(ndev, 1);
	assert_int_equal(r.len, 8 + ndev * sizeof(*dev) + nsess * sizeof(*s));
	if (dev)
		memcpy(dev, r.data + 8, sizeof(*dev));
	s = (const void *)(r.data + 8 + ndev * sizeof(*dev));
	for (uint32_t i = 0; i < nsess; i++) {
		if (s[i].id != sid)
			continue;
		if (e)
			memcpy(e, &s[i], sizeof(*e));
		found = true;
	}
	dj_resp_free(&r);
	return found;
}

static struct djinn_admin_sched_dev sched_dev(struct fx *fx)
{
	struct djinn_admin_sched_dev d;

	sched_info(fx, 0, &d, NULL);
	return d;
}

static struct djinn_admin_sched_session sched_of(struct fx *fx, uint64_t sid)
{
	struct djinn_admin_sched_session e;

	if (!sched_info(fx, sid, NULL, &e))
		fail_msg("session %llu is not in ADMIN_SCHED",
			 (unsigned long long)sid);
	return e;
}

static struct djinn_admin_vmu vmu(struct fx *fx)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	admin(fx, DJINN_MSG_ADMIN_VMU, &r);
	assert_int_equal(r.len, sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

static uint64_t sid_of(struct djinn_session *s)
{
	struct djinn_session_info info;

	assert_int_equal(djinn_session_info(s, &info), 0);
	return info.id;
}

static void sleep_ms(int ms)
{
	struct timespec ts = ns_to_timespec((uint64_t)ms * NSEC_PER_MSEC);

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---------------------------------------------------------------------- */
/* Agents */

/*
 * struct agent - a session with the agent model and a context of
 * AGENT_CTX tokens, on a connection of its own
 */
struct agent {
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	uint64_t sid;
};

static void agent_open(struct fx *fx, struct agent *a, const char *tenant)
{
	struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;
	int ret;

	o.tenant = tenant;
	a->conn = djd_connect_lib(&fx->d);
	assert_int_equal(djinn_session_open(a->conn, &o, &a->s), 0);
	a->sid = sid_of(a->s);
	assert_int_equal(djinn_model_open(a->s, "agent", &a->m), 0);
	ret = djinn_ctx_new(a->m, AGENT_CTX, &a->c);
	if (ret)
		fail_msg("%s: CTX_NEW: %d: %s", tenant, ret,
			 djinn_last_error());
}

static void agent_close(struct agent *a)
{
	assert_int_equal(djinn_ctx_free(a->c), 0);
	assert_int_equal(djinn_model_close(a->m), 0);
	assert_int_equal(djinn_session_close(a->s), 0);
	djinn_disconnect(a->conn);
}

/* The prompt of agent @seed: PROMPT tokens. */
static void prompt_of(unsigned int seed, int32_t *p)
{
	uint32_t x = seed * 2654435761u + 1;

	for (unsigned int i = 0; i < PROMPT; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (int32_t)((x >> 8) % VOCAB);
	}
}

/* Prefill @a with prompt @seed, CHUNK tokens a step. */
static void agent_prefill(struct agent *a, unsigned int seed)
{
	int32_t p[PROMPT];

	prompt_of(seed, p);
	for (unsigned int i = 0; i < PROMPT; i += CHUNK) {
		int ret = djinn_ctx_prefill(a->c, p + i, CHUNK, NULL, NULL);

		if (ret)
			fail_msg("session %llu: prefill at %u: %d: %s",
				 (unsigned long long)a->sid, i, ret,
				 djinn_last_error());
	}
	assert_int_equal(djinn_ctx_len(a->c), PROMPT);
}

/* NTOK greedy tokens into @tok, and the logits after them. */
static void agent_decode(struct agent *a, int32_t *tok, float *logits)
{
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_step st;
	int ret = djinn_ctx_decode(a->c, NTOK, NULL, tok, &lo, &st);

	if (ret != NTOK)
		fail_msg("session %llu: decode: %d: %s",
			 (unsigned long long)a->sid, ret, djinn_last_error());
	assert_non_null(st.logits);
	assert_int_equal(djinn_result_read(st.logits, 0, VOCAB * sizeof(float),
					   logits),
			 0);
}

/* What prompt @seed gives in a context never swapped: decoded on a
 * session of its own, which is closed again. */
static void reference(struct fx *fx, unsigned int seed, int32_t *tok,
		      float *logits)
{
	struct agent r;

	agent_open(fx, &r, "reference");
	agent_prefill(&r, seed);
	agent_decode(&r, tok, logits);
	assert_int_equal(sched_of(fx, r.sid).swapped, 0);
	agent_close(&r);
}

static void same_output(const int32_t *tok, const float *logits,
			const int32_t *want_tok, const float *want_logits)
{
	assert_memory_equal(tok, want_tok, NTOK * sizeof(int32_t));
	for (unsigned int i = 0; i < VOCAB; i++) {
		float d = logits[i] - want_logits[i];

		if (d > 1e-4f || d < -1e-4f)
			fail_msg("logit %u: %g, unswapped %g", i,
				 (double)logits[i], (double)want_logits[i]);
	}
}

static void print_state(struct fx *fx, const char *when, uint64_t sid)
{
	struct djinn_admin_sched_dev d;
	struct djinn_admin_sched_session e = { 0 };
	struct djinn_admin_vmu v = vmu(fx);

	sched_info(fx, sid, &d, &e);
	printf("# %s: committed %llu of %llu (pressure %u); swaps signal %llu "
	       "pressure %llu, prefetches %llu hits %llu misses %llu; "
	       "session %llu: resident %llu swapped %llu flags %#x\n",
	       when, (unsigned long long)v.committed,
	       (unsigned long long)v.capacity, v.pressure,
	       (unsigned long long)d.swaps_signal,
	       (unsigned long long)d.swaps_pressure,
	       (unsigned long long)d.prefetches,
	       (unsigned long long)d.prefetch_hits,
	       (unsigned long long)d.prefetch_misses, (unsigned long long)sid,
	       (unsigned long long)e.resident, (unsigned long long)e.swapped,
	       e.flags);
}

/* ---------------------------------------------------------------------- */
/* Semantic: swap on IO_WAIT, prefetch before the estimate ends */

/* The wait agent A announces: long enough that B's prefill is over
 * before the prefetch, even under ASan on a loaded machine. */
#define A_WAIT_NS (3 * NSEC_PER_SEC)

/*
 * Two agents in a device that holds one's KV cache and the other's
 * prefill, not both: A prefills and waits on a tool; B's prefill is
 * admitted because A's cache left (A shows swapped bytes, or that its
 * data left during the wait); before A says anything, the prefetch has
 * brought A's cache back; A's next tokens and logits are those of an
 * unswapped run, and its return counts as a prefetch hit.
 */
static void test_prefetch(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_sched_session e;
	struct djinn_admin_sched_dev d;
	struct agent a, b;
	int32_t want[NTOK], tok[NTOK];
	float want_l[VOCAB], logits[VOCAB];
	int64_t t0, deadline;

	reference(fx, 1, want, want_l);
	assert_int_equal(sched_dev(fx).policy, DJINN_SCHED_SEMANTIC);

	agent_open(fx, &a, "agent-a");
	agent_prefill(&a, 1);
	e = sched_of(fx, a.sid);
	assert_true(e.resident >= PROMPT * AGENT_TOK_BYTES);
	assert_int_equal(e.swapped, 0);
	print_state(fx, "A prefilled", a.sid);

	t0 = dj_now_ms();
	assert_int_equal(djinn_tool_call_begin(a.s, A_WAIT_NS), 0);
	e = sched_of(fx, a.sid);
	assert_int_equal(e.phase, DJINN_PHASE_IO_WAIT);
	assert_true(e.phase_left_ns > 0 && e.phase_left_ns <= A_WAIT_NS);

	/* B's cache and steps fit only where A's cache was. */
	agent_open(fx, &b, "agent-b");
	agent_prefill(&b, 2);
	print_state(fx, "B prefilled", a.sid);
	d = sched_dev(fx);
	e = sched_of(fx, a.sid);
	assert_true(d.swaps_signal + d.swaps_pressure > 0);
	/* still out, or already prefetched (then it left in this wait) */
	if (!e.swapped && !(e.flags & DJINN_SCHED_SWAPPED_BY_SIGNAL))
		fail_msg("A: resident %llu, swapped 0, flags %#x: its cache "
			 "never left",
			 (unsigned long long)e.resident, e.flags);
	if (e.swapped)
		assert_true(d.swap_bytes_out >= e.swapped);

	/* A sends nothing: the prefetch brings it back, by its estimate's
	 * end (polled up to 10 s past it). */
	deadline = t0 + (int64_t)(A_WAIT_NS / NSEC_PER_MSEC) + 10000;
	for (;;) {
		e = sched_of(fx, a.sid);
		if (!e.swapped && !(e.flags & DJINN_SCHED_PREFETCHING))
			break;
		if (dj_now_ms() > deadline) {
			print_state(fx, "A not back", a.sid);
			fail_msg(
				"A still has %llu bytes swapped out 10 s after "
				"its estimate",
				(unsigned long long)e.swapped);
		}
		sleep_ms(50);
	}
	print_state(fx, "A prefetched", a.sid);
	d = sched_dev(fx);
	assert_true(d.prefetches >= 1);
	assert_true(e.resident >= PROMPT * AGENT_TOK_BYTES);
	assert_int_equal(e.flags & DJINN_SCHED_SWAPPED_BY_SIGNAL,
			 DJINN_SCHED_SWAPPED_BY_SIGNAL);
	assert_int_equal(d.prefetch_hits, 0);

	/* Back: the same tokens as the run that never left, and a hit. */
	agent_decode(&a, tok, logits);
	same_output(tok, logits, want, want_l);
	assert_int_equal(djinn_tool_call_end(a.s), 0);
	print_state(fx, "A decoded", a.sid);
	d = sched_dev(fx);
	assert_true(d.prefetch_hits >= 1);
	assert_int_equal(d.prefetch_misses, 0);
	e = sched_of(fx, a.sid);
	assert_int_equal(e.flags & DJINN_SCHED_OVERRAN, 0);
	assert_int_equal(e.phase, DJINN_PHASE_COMPUTE);

	agent_close(&b);
	agent_close(&a);
}

/* Session @sid's entry of ADMIN_SESSIONS. */
static struct djinn_admin_session session_of(struct fx *fx, uint64_t sid)
{
	const struct djinn_admin_session *e;
	struct djinn_admin_session out;
	struct dj_resp r;
	bool found = false;
	uint32_t n;

	admin(fx, DJINN_MSG_ADMIN_SESSIONS, &r);
	memcpy(&n, r.data, sizeof(n));
	e = (const void *)(r.data + 8);
	for (uint32_t i = 0; i < n; i++) {
		if (e[i].id == sid) {
			out = e[i];
			found = true;
		}
	}
	dj_resp_free(&r);
	if (!found)
		fail_msg("session %llu is not in ADMIN_SESSIONS",
			 (unsigned long long)sid);
	return out;
}

/*
 * A context's own wait: A's session holds its conversation's context and
 * a small second one, and the first waits on a tool (djinn_ctx_signal()
 * IO_WAIT) while the session says nothing. B's prefill needs the memory:
 * the waiting cache leaves, and the prefetch brings it back by the
 * estimate's end. A step on the other context leaves the wait as it is;
 * a step on the waiting one ends it, with the tokens of a run never
 * swapped, a prefetch hit. COMPUTE, and the context's end, end a wait.
 */
static void test_ctx_wait(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_sched_session e;
	struct djinn_admin_sched_dev d;
	struct djinn_ctx *other;
	struct agent a, b;
	int32_t want[NTOK], tok[NTOK], one = 7;
	float want_l[VOCAB], logits[VOCAB];
	int64_t t0, deadline;

	reference(fx, 1, want, want_l);
	agent_open(fx, &a, "agent-a");
	agent_prefill(&a, 1);
	assert_int_equal(djinn_ctx_new(a.m, AGENT_CTX, &other), 0);
	assert_int_equal(djinn_ctx_prefill(other, &one, 1, NULL, NULL), 0);

	assert_int_equal(djinn_ctx_signal(a.c, DJINN_PHASE_IO_WAIT, 0),
			 -EINVAL);
	t0 = dj_now_ms();
	assert_int_equal(djinn_ctx_signal(a.c, DJINN_PHASE_IO_WAIT, A_WAIT_NS),
			 0);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 1);
	assert_int_not_equal(session_of(fx, a.sid).phase, DJINN_PHASE_IO_WAIT);

	/* B's cache and steps fit only where A's waiting cache was. */
	agent_open(fx, &b, "agent-b");
	agent_prefill(&b, 2);
	print_state(fx, "B prefilled", a.sid);
	d = sched_dev(fx);
	assert_true(d.swaps_signal + d.swaps_pressure > 0);

	/* A sends nothing: the prefetch (which runs only for a cache that
	 * left) brings it back, by the estimate's end (polled up to 10 s
	 * past it). */
	deadline = t0 + (int64_t)(A_WAIT_NS / NSEC_PER_MSEC) + 10000;
	for (;;) {
		d = sched_dev(fx);
		e = sched_of(fx, a.sid);
		if (d.prefetches >= 1 && !e.swapped)
			break;
		if (dj_now_ms() > deadline) {
			print_state(fx, "A not back", a.sid);
			fail_msg("A's context: %llu prefetches, %llu bytes "
				 "swapped out 10 s after its estimate",
				 (unsigned long long)d.prefetches,
				 (unsigned long long)e.swapped);
		}
		sleep_ms(50);
	}
	print_state(fx, "A prefetched", a.sid);

	/* the other context's step is not the waiting one's */
	assert_int_equal(djinn_ctx_prefill(other, &one, 1, NULL, NULL), 0);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 1);
	agent_decode(&a, tok, logits);
	same_output(tok, logits, want, want_l);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 0);
	d = sched_dev(fx);
	assert_true(d.prefetch_hits >= 1);

	/* COMPUTE ends a wait; so does the context's end */
	assert_int_equal(
		djinn_ctx_signal(other, DJINN_PHASE_IO_WAIT, A_WAIT_NS), 0);
	assert_int_equal(djinn_ctx_signal(a.c, DJINN_PHASE_IO_WAIT, A_WAIT_NS),
			 0);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 2);
	assert_int_equal(djinn_ctx_signal(other, DJINN_PHASE_COMPUTE, 0), 0);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 1);
	assert_int_equal(djinn_ctx_free(other), 0);
	assert_int_equal(djinn_ctx_free(a.c), 0);
	assert_int_equal(session_of(fx, a.sid).ctx_waiting, 0);
	assert_int_equal(djinn_ctx_new(a.m, AGENT_CTX, &a.c), 0);

	agent_close(&b);
	agent_close(&a);
}

/*
 * The liar: A says it waits 10 s, B's prefill needs A's memory, and A is
 * back at once. Its decode is served (its cache restored on demand and
 * by the policy's restore) and gives the unswapped tokens; the return
 * counts as a prefetch miss.
 */
static void test_early_return(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_sched_session e;
	struct djinn_admin_sched_dev d;
	struct agent a, b;
	int32_t want[NTOK], tok[NTOK];
	float want_l[VOCAB], logits[VOCAB];

	reference(fx, 3, want, want_l);
	agent_open(fx, &a, "agent-a");
	agent_prefill(&a, 3);
	assert_int_equal(djinn_tool_call_begin(a.s, 10 * NSEC_PER_SEC), 0);
	agent_open(fx, &b, "agent-b");
	agent_prefill(&b, 4);
	print_state(fx, "B prefilled", a.sid);
	e = sched_of(fx, a.sid);
	d = sched_dev(fx);
	assert_true(d.swaps_signal + d.swaps_pressure > 0);
	if (!e.swapped)
		fail_msg("A: resident %llu, swapped 0, flags %#x: its cache "
			 "did not leave for B",
			 (unsigned long long)e.resident, e.flags);
	assert_int_equal(d.prefetches, 0);

	agent_decode(&a, tok, logits);
	print_state(fx, "A decoded", a.sid);
	same_output(tok, logits, want, want_l);
	d = sched_dev(fx);
	assert_true(d.prefetch_misses >= 1);
	assert_int_equal(d.prefetch_hits, 0);
	e = sched_of(fx, a.sid);
	/* its request ended the wait, early: not an overrun */
	assert_int_equal(e.flags & DJINN_SCHED_OVERRAN, 0);
	assert_int_equal(e.phase_left_ns, 0);

	/* B goes on too, swapped or not */
	agent_decode(&b, tok, logits);
	agent_close(&b);
	agent_close(&a);
}

/* ---------------------------------------------------------------------- */
/* Fair queueing */

static struct djinn_tensor *matrix(struct djinn_session *s, const float *v)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 2,
				       .dims = { N, N } };
	struct djinn_tensor *t;

	assert_int_equal(djinn_tensor_upload(s, &d, v, DJINN_SEG_DATA, &t), 0);
	return t;
}

/* Submit (x I^@chain) * @alpha on @s. */
static struct djinn_request *chain_submit(struct djinn_session *s,
					  struct djinn_tensor *x,
					  struct djinn_tensor *id,
					  unsigned int chain, float alpha)
{
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	int v, w;

	assert_int_equal(djinn_graph_new(s, &g), 0);
	v = djinn_graph_input(g, x);
	w = djinn_graph_input(g, id);
	for (unsigned int i = 0; i < chain; i++)
		v = djinn_op_matmul(g, v, w, false, false);
	assert_true(djinn_graph_output(g, djinn_op_scale(g, v, alpha)) >= 0);
	assert_int_equal(djinn_submit(g, &req), 0);
	djinn_graph_free(g);
	return req;
}

/*
 * Session F has 64 graphs in flight (a long one first, then 63 of a few
 * matrix products each): a 65th graph and a model step of F are -EAGAIN.
 * Session V's one small graph meanwhile waits behind at most one of F's
 * (ahead_max <= 1) and is answered while F still has work in flight.
 * Every one of F's 64 answers is right, and F may submit again after.
 */
static void test_fair(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn *vconn = djd_connect_lib(&fx->d);
	struct djinn_session *f, *v;
	struct djinn_request *req[NGRAPHS], *extra, *small;
	struct djinn_tensor *x, *id, *vt;
	struct djinn_admin_sched_session fe, ve;
	struct djinn_model *m;
	struct djinn_ctx *c;
	int32_t tok[2];
	float *xv = malloc(N * N * sizeof(float));
	float *iv = calloc(N * N, sizeof(float));
	float *out = malloc(N * N * sizeof(float));
	float four[4] = { 1, 2, 3, 4 }, got[4];
	uint64_t fsid, vsid, jobs;
	int ret;

	assert_non_null(xv);
	assert_non_null(iv);
	assert_non_null(out);
	for (unsigned int i = 0; i < N * N; i++)
		xv[i] = (float)((i * 37u) % 1001u) / 16.0f - 30.0f;
	for (unsigned int i = 0; i < N; i++)
		iv[i * N + i] = 1.0f;

	assert_int_equal(djinn_session_open(fx->conn, NULL, &f), 0);
	assert_int_equal(djinn_session_open(vconn, NULL, &v), 0);
	fsid = sid_of(f);
	vsid = sid_of(v);
	x = matrix(f, xv);
	id = matrix(f, iv);
	{
		struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
					       .ndim = 1,
					       .dims = { 4 } };

		assert_int_equal(djinn_tensor_upload(v, &d, four,
						     DJINN_SEG_DATA, &vt),
				 0);
	}
	assert_int_equal(djinn_model_open(f, "tiny", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, (const int32_t[]){ 1, 2, 3 }, 3,
					   NULL, NULL),
			 0);

	/* 64 in flight, none waited for: the first runs while the rest
	 * are queued. */
	req[0] = chain_submit(f, x, id, 64, 1.0f);
	for (unsigned int k = 1; k < NGRAPHS; k++)
		req[k] = chain_submit(f, x, id, 4, (float)(k + 1));

	/* The 65th: a graph, and a model step. */
	extra = chain_submit(f, x, id, 1, 0.5f);
	ret = djinn_wait(extra, DJINN_WAIT_FOREVER);
	if (ret != -EAGAIN)
		fail_msg("65th graph in flight: %d (%s), want -EAGAIN", ret,
			 djinn_request_error(extra));
	assert_non_null(strstr(djinn_request_error(extra), "in flight"));
	djinn_request_free(extra);
	ret = djinn_ctx_decode(c, 1, NULL, tok, NULL, NULL);
	if (ret != -EAGAIN)
		fail_msg("model step with 64 graphs in flight: %d (%s), want "
			 "-EAGAIN",
			 ret, djinn_last_error());
	assert_non_null(
		strstr(djinn_last_error(),
		       "graphs, model steps and model uploads in flight"));
	fe = sched_of(fx, fsid);
	assert_true(fe.queued >= 2);
	ve = sched_of(fx, vsid);

	/* V: one small graph, behind at most one of F's. */
	{
		struct djinn_graph_builder *g;

		assert_int_equal(djinn_graph_new(v, &g), 0);
		assert_true(
			djinn_graph_output(
				g, djinn_op_scale(g, djinn_graph_input(g, vt),
						  3.0f)) >= 0);
		assert_int_equal(djinn_submit(g, &small), 0);
		djinn_graph_free(g);
	}
	ret = djinn_wait(small, DJINN_WAIT_FOREVER);
	if (ret)
		fail_msg("V's graph: %d: %s", ret, djinn_request_error(small));
	jobs = ve.jobs;
	fe = sched_of(fx, fsid);
	ve = sched_of(fx, vsid);
	printf("# V answered: F has %u in flight (%u queued), V waited "
	       "behind %u of F's jobs\n",
	       fe.inflight, fe.queued, ve.ahead_max);
	assert_true(fe.inflight > 0); /* V did not wait for F's backlog */
	assert_true(ve.ahead_max <= 1);
	assert_int_equal(ve.jobs, jobs + 1);
	assert_int_equal(djinn_result_read(djinn_request_results(small, 0), 0,
					   sizeof(got), got),
			 0);
	for (unsigned int i = 0; i < 4; i++)
		assert_true(got[i] == 3.0f * four[i]);
	djinn_request_free(small);

	/* F's 64: every one answered, right (x I^n = x exactly). */
	for (unsigned int k = 0; k < NGRAPHS; k++) {
		float alpha = k ? (float)(k + 1) : 1.0f;

		ret = djinn_wait(req[k], DJINN_WAIT_FOREVER);
		if (ret)
			fail_msg("F's graph %u: %d: %s", k, ret,
				 djinn_request_error(req[k]));
		assert_int_equal(
			djinn_result_read(djinn_request_results(req[k], 0), 0,
					  N * N * sizeof(float), out),
			0);
		for (unsigned int i = 0; i < N * N; i++)
			if (out[i] != xv[i] * alpha)
				fail_msg("F's graph %u: element %u: %g, want "
					 "%g",
					 k, i, (double)out[i],
					 (double)(xv[i] * alpha));
		djinn_request_free(req[k]);
	}
	fe = sched_of(fx, fsid);
	assert_int_equal(fe.inflight, 0);
	assert_true(fe.jobs >= NGRAPHS + 1);
	/* room again */
	assert_int_equal(djinn_ctx_decode(c, 2, NULL, tok, NULL, NULL), 2);

	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(djinn_session_close(v), 0);
	assert_int_equal(djinn_session_close(f), 0);
	djinn_disconnect(vconn);
	free(xv);
	free(iv);
	free(out);
}

/* ---------------------------------------------------------------------- */
/* Static partitioning */

/*
 * A device that holds the weights and one context's whole KV cache: the
 * first CTX_NEW sets the cache aside at once, the second is -ENOMEM
 * naming sched.policy static and what it needs; once the first is freed
 * the second fits. Nothing is ever swapped.
 */
static void test_static(void **state)
{
	struct fx *fx = *state;
	const uint64_t kv = AGENT_CTX * AGENT_TOK_BYTES;
	struct djinn_session *s1, *s2;
	struct djinn_model *m1, *m2;
	struct djinn_ctx *c1, *c2;
	struct djinn_admin_vmu before, after;
	const char *msg;

	assert_int_equal(sched_dev(fx).policy, DJINN_SCHED_STATIC);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s1), 0);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s2), 0);
	assert_int_equal(djinn_model_open(s1, "agent", &m1), 0);
	assert_int_equal(djinn_model_open(s2, "agent", &m2), 0);

	before = vmu(fx);
	assert_true(before.free >= kv && before.free < 2 * kv);
	assert_int_equal(djinn_ctx_new(m1, AGENT_CTX, &c1), 0);
	after = vmu(fx);
	assert_int_equal(before.free - after.free, kv);

	assert_int_equal(djinn_ctx_new(m2, AGENT_CTX, &c2), -ENOMEM);
	msg = djinn_last_error();
	printf("# refused: %s\n", msg);
	assert_non_null(strstr(msg, "sched.policy static"));
	assert_non_null(strstr(msg, "need "));
	assert_non_null(strstr(msg, "available"));
	assert_int_equal(vmu(fx).free, after.free);

	assert_int_equal(djinn_ctx_free(c1), 0);
	assert_int_equal(vmu(fx).free, before.free);
	assert_int_equal(djinn_ctx_new(m2, AGENT_CTX, &c2), 0);
	assert_int_equal(vmu(fx).free, after.free);
	assert_int_equal(djinn_ctx_free(c2), 0);
	assert_int_equal(vmu(fx).swap_outs, 0);

	assert_int_equal(djinn_model_close(m1), 0);
	assert_int_equal(djinn_model_close(m2), 0);
	assert_int_equal(djinn_session_close(s1), 0);
	assert_int_equal(djinn_session_close(s2), 0);
}

/* Model @name's layers on the device (ADMIN_MODELS). */
static uint32_t resident_of(struct fx *fx, const char *name)
{
	const struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t n, res = UINT32_MAX;

	admin(fx, DJINN_MSG_ADMIN_MODELS, &r);
	memcpy(&n, r.data, 4);
	assert_int_equal(r.len, 8 + n * sizeof(*e));
	e = (const void *)(r.data + 8);
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			res = e[i].resident;
	dj_resp_free(&r);
	if (res == UINT32_MAX)
		fail_msg("model %s is not listed", name);
	return res;
}

/*
 * Under static partitioning a context that does not fit is not refused
 * while its model, held whole, can stream layers instead: CTX_NEW moves
 * the weights (on the memory lane) and the context is made; the model
 * lists fewer resident layers, and a context made after the move gives
 * the tokens one made before it gave.
 */
static void test_static_relieve(void **state)
{
	static const int32_t prompt[7] = { 3, 141, 59, 26, 5, 358, 97 };
	struct fx *fx = *state;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c[24];
	int32_t t0[8], t1[8];
	int n = 0;

	assert_int_equal(sched_dev(fx).policy, DJINN_SCHED_STATIC);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), 0);
	assert_int_equal(djinn_model_open(s, "big", &m), 0);
	assert_int_equal(resident_of(fx, "big"), 4);
	assert_int_equal(djinn_ctx_new(m, 128, &c[0]), 0);
	assert_int_equal(djinn_ctx_prefill(c[0], prompt, 7, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c[0], 8, NULL, t0, NULL, NULL), 8);

	/* contexts until the free memory runs out and one more */
	while (resident_of(fx, "big") == 4) {
		int ret;

		assert_true(++n < 24);
		ret = djinn_ctx_new(m, 128, &c[n]);
		if (ret)
			fail_msg("context %d: %s", n, djinn_last_error());
	}
	printf("# context %d made by streaming: %u of 4 layers resident\n", n,
	       resident_of(fx, "big"));
	assert_true(n > 1);
	assert_int_equal(vmu(fx).swap_outs, 0);

	/* the last one computes what the first did; the first goes on */
	for (int i = 1; i < n; i++)
		assert_int_equal(djinn_ctx_free(c[i]), 0);
	if (djinn_ctx_prefill(c[n], prompt, 7, NULL, NULL))
		fail_msg("prefill after the move: %s", djinn_last_error());
	assert_int_equal(djinn_ctx_decode(c[n], 8, NULL, t1, NULL, NULL), 8);
	assert_memory_equal(t0, t1, sizeof(t0));
	assert_int_equal(djinn_ctx_decode(c[0], 4, NULL, t1, NULL, NULL), 4);

	assert_int_equal(djinn_ctx_free(c[n]), 0);
	assert_int_equal(djinn_ctx_free(c[0]), 0);
	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(djinn_session_close(s), 0);
}

/* ---------------------------------------------------------------------- */
/* Configuration */

/* Write @text to the test's configuration file (made once). */
static void conf_write(struct fx *fx, const char *text)
{
	FILE *f;

	if (!fx->conf[0]) {
		int fd;

		strcpy(fx->conf, "/tmp/djinn-sched-conf.XXXXXX");
		fd = mkstemp(fx->conf);
		assert_true(fd >= 0);
		close(fd);
	}
	f = fopen(fx->conf, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Start djinnd with @extra: the policy it reports, or -1 when it does
 * not start (djd_start_error() says why). Stopped again unless @keep. */
static int policy_with(struct fx *fx, const char *const *extra, bool keep)
{
	int policy;

	if (djd_start_args(&fx->d, "64M", 30000, extra))
		return -1;
	policy = (int)sched_dev(fx).policy;
	if (!keep)
		assert_int_equal(djd_stop(&fx->d, 20000), 0);
	return policy;
}

static void start_fails(struct fx *fx, const char *const *extra,
			const char *phrase)
{
	if (!djd_start_args(&fx->d, "64M", 30000, extra)) {
		djd_kill(&fx->d);
		fail_msg("djinnd started; want it refused for '%s'", phrase);
	}
	if (!strstr(djd_start_error(), phrase))
		fail_msg("djinnd's last line: \"%s\"; want \"%s\"",
			 djd_start_error(), phrase);
}

/* Lines of the daemon's log holding @s. */
static int log_count(struct fx *fx, const char *s)
{
	char line[1024];
	FILE *f = fopen(fx->d.log, "r");
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

/* SIGHUP, and wait (20 s at most) for the reload's outcome in the log:
 * whether it was refused. */
static bool reload(struct fx *fx)
{
	static const char *const outcome[] = {
		"reload: applied", "reload: nothing",
		"keeping the running configuration"
	};
	int before[3], now[3];
	int64_t deadline = dj_now_ms() + 20000;

	for (int i = 0; i < 3; i++)
		before[i] = log_count(fx, outcome[i]);
	assert_int_equal(kill(fx->d.pid, SIGHUP), 0);
	for (;;) {
		for (int i = 0; i < 3; i++) {
			now[i] = log_count(fx, outcome[i]);
			if (now[i] > before[i])
				return i == 2;
		}
		if (dj_now_ms() > deadline) {
			djd_log_tail(&fx->d, 4096);
			fail_msg("reload not logged within 20 s");
		}
		sleep_ms(20);
	}
}

/* A session of tenant @tenant, priority 4 (weight: share x 5). */
static struct djinn_session *tenant_session(struct fx *fx, const char *tenant)
{
	struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;
	struct djinn_session *s;

	o.tenant = tenant;
	assert_int_equal(djinn_session_open(fx->conn, &o, &s), 0);
	return s;
}

/*
 * The policy from the flag, --set and the configuration file, the flag
 * over the file; bad names and shares stop djinnd from starting, naming
 * the key; SIGHUP applies new shares to open sessions, and refuses a bad
 * one whole, keeping the running shares; the policy needs a restart.
 */
/* HELLO and SESSION_OPEN with @label in raw frames on @fd: the id. */
static uint64_t raw_open(int fd, const char *label)
{
	struct djinn_session_open o = { .priority = 4 };
	struct djinn_session_resp sr;
	struct dj_resp r;

	snprintf(o.tenant, sizeof(o.tenant), "%s", label);
	assert_int_equal(dj_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r), 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	assert_int_equal(
		dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r), 1);
	assert_int_equal(r.error, 0);
	memcpy(&sr, r.data, sizeof(sr));
	dj_resp_free(&r);
	return sr.session_id;
}

static void test_config(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s;
	char ids[128], text[512];
	uint64_t sid2;
	int nfd;
	char path[128];
	const char *conf[] = { "--config", path, NULL };
	const char *conf_flag[] = { "--config", path, "--sched-policy",
				    "static", NULL };

	{
		const char *lru[] = { "--sched-policy", "lru", NULL };
		const char *set[] = { "--set", "sched.policy=static", NULL };

		assert_int_equal(policy_with(fx, NULL, false),
				 DJINN_SCHED_SEMANTIC);
		assert_int_equal(policy_with(fx, lru, false), DJINN_SCHED_LRU);
		assert_int_equal(policy_with(fx, set, false),
				 DJINN_SCHED_STATIC);
	}
	{
		const char *bad[] = { "--sched-policy", "fifo", NULL };
		const char *bad_set[] = { "--set", "sched.policy=LRU", NULL };

		start_fails(fx, bad, "sched.policy: 'fifo'");
		start_fails(fx, bad_set, "sched.policy: 'LRU'");
	}
	{
		/* the CPU runs one graph at a time; 17 is past the key's
		 * range on any device */
		const char *two[] = { "--compute-threads", "2", NULL };
		const char *one[] = { "--set", "device.compute_threads=1",
				      NULL };
		const char *many[] = { "--compute-threads", "17", NULL };

		start_fails(fx, two,
			    "device.compute_threads: '2': the cpu backend "
			    "runs one graph at a time");
		start_fails(fx, many, "device.compute_threads: '17'");
		assert_int_equal(policy_with(fx, one, false),
				 DJINN_SCHED_SEMANTIC);
	}

	conf_write(fx, "[sched]\npolicy = lru\n");
	snprintf(path, sizeof(path), "%s", fx->conf);
	assert_int_equal(policy_with(fx, conf, false), DJINN_SCHED_LRU);
	assert_int_equal(policy_with(fx, conf_flag, false), DJINN_SCHED_STATIC);
	conf_write(fx, "[sched]\npolicy = random\n");
	start_fails(fx, conf, "sched.policy: 'random'");
	conf_write(fx, "[tenant.x]\nshare = 0\n");
	start_fails(fx, conf, "tenant.x.share: '0'");
	conf_write(fx, "[tenant.x]\nshare = 1001\n");
	start_fails(fx, conf, "tenant.x.share: '1001'");
	conf_write(fx, "[tenant.x]\nshare = 1000\n");
	assert_int_equal(policy_with(fx, conf, false), DJINN_SCHED_SEMANTIC);

	/* Reloads. Tenants are who connects: x is this process's uid, y
	 * nobody's (65534), whatever label each session asks for. */
	snprintf(ids, sizeof(ids),
		 "[tenant.x]\nuids = %u\n\n[tenant.y]\nuids = 65534\n",
		 (unsigned int)getuid());
	snprintf(text, sizeof(text),
		 "[sched]\npolicy = lru\n\n%s\n[tenant.x]\nshare = 3\n", ids);
	conf_write(fx, text);
	assert_int_equal(policy_with(fx, conf, true), DJINN_SCHED_LRU);
	fx->conn = djd_connect_lib(&fx->d);
	s = tenant_session(fx, "y"); /* a label: x all the same */
	assert_int_equal(sched_of(fx, sid_of(s)).weight, 3 * 5);
	assert_string_equal(sched_of(fx, sid_of(s)).tenant, "x");
	nfd = dj_connect_as(fx->d.sock, 65534, 65534, NULL, 0);
	if (nfd == -EPERM)
		skip(); /* not root: no other uid to be */
	assert_true(nfd >= 0);
	sid2 = raw_open(nfd, "x");
	assert_int_equal(sched_of(fx, sid2).weight, 1 * 5);
	assert_string_equal(sched_of(fx, sid2).tenant, "y");

	snprintf(text, sizeof(text),
		 "[sched]\npolicy = lru\n\n%s\n[tenant.x]\nshare = 1001\n",
		 ids);
	conf_write(fx, text);
	assert_true(reload(fx));
	assert_int_equal(log_count(fx, "tenant.x.share: '1001'"), 1);
	assert_int_equal(sched_of(fx, sid_of(s)).weight, 3 * 5);
	assert_int_equal(djinn_session_close(s), 0);
	s = tenant_session(fx, "x");
	assert_int_equal(sched_of(fx, sid_of(s)).weight, 3 * 5);

	/* a good one: open sessions get the new weight; the policy stays */
	snprintf(text, sizeof(text),
		 "[sched]\npolicy = static\n\n%s\n[tenant.x]\nshare = 7\n"
		 "[tenant.y]\nshare = 2\n",
		 ids);
	conf_write(fx, text);
	assert_false(reload(fx));
	assert_int_equal(sched_of(fx, sid_of(s)).weight, 7 * 5);
	assert_int_equal(sched_of(fx, sid2).weight, 2 * 5);
	assert_int_equal(sched_dev(fx).policy, DJINN_SCHED_LRU);

	assert_int_equal(djinn_session_close(s), 0);
	close(nfd);
}

/* ---------------------------------------------------------------------- */
/* Signals */

/* SIGNAL IO_WAIT of @ns for @sid in raw frames: the response. */
static void raw_wait(int fd, uint64_t sid, uint64_t ns, struct dj_resp *r)
{
	struct djinn_signal sg = { .phase = DJINN_PHASE_IO_WAIT,
				   .expected_ns = ns };

	assert_int_equal(dj_call(fd, DJINN_MSG_SIGNAL, sid, &sg, sizeof(sg), r),
			 1);
}

/*
 * IO_WAIT needs 0 < expected_ns <= INT64_MAX: 0 and (uint64_t)-1 are
 * -EINVAL with a message, in raw frames and through djinn_signal() (and
 * djinn_tool_call_begin() refuses them itself); a refused signal changes
 * nothing. 48 h is clamped to sched.max_io_wait (1 h). Another
 * connection's session is refused.
 */
static void test_signals(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s;
	struct djinn_admin_sched_session e;
	const uint64_t hour = 3600 * NSEC_PER_SEC;
	struct dj_resp r;
	uint64_t sid;
	int fd, fd2;

	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), 0);
	sid = sid_of(s);

	/* libdjinn: the daemon's refusals, with its messages */
	assert_int_equal(djinn_signal(s, DJINN_PHASE_IO_WAIT, 0), -EINVAL);
	assert_non_null(strstr(djinn_last_error(), "expected"));
	assert_int_equal(djinn_signal(s, DJINN_PHASE_IO_WAIT, UINT64_MAX),
			 -EINVAL);
	assert_non_null(strstr(djinn_last_error(), "INT64_MAX"));
	assert_int_equal(djinn_tool_call_begin(s, 0), -EINVAL);
	assert_int_equal(djinn_tool_call_begin(s, UINT64_MAX), -EINVAL);
	e = sched_of(fx, sid);
	assert_int_not_equal(e.phase, DJINN_PHASE_IO_WAIT);
	assert_int_equal(e.phase_left_ns, 0);

	/* raw frames */
	fd = dj_connect(fx->d.sock);
	assert_true(fd >= 0);
	assert_int_equal(dj_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r), 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	{
		struct djinn_session_open o = { .tenant = "raw",
						.priority = 4 };
		struct djinn_session_resp sr;

		assert_int_equal(dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o,
					 sizeof(o), &r),
				 1);
		assert_int_equal(r.error, 0);
		memcpy(&sr, r.data, sizeof(sr));
		dj_resp_free(&r);
		sid = sr.session_id;
	}
	raw_wait(fd, sid, 0, &r);
	assert_int_equal(r.error, -EINVAL);
	assert_non_null(strstr(r.msg, "expected_ns > 0"));
	dj_resp_free(&r);
	raw_wait(fd, sid, UINT64_MAX, &r);
	assert_int_equal(r.error, -EINVAL);
	assert_non_null(strstr(r.msg, "INT64_MAX"));
	dj_resp_free(&r);
	raw_wait(fd, sid, (uint64_t)INT64_MAX + 1, &r);
	assert_int_equal(r.error, -EINVAL);
	dj_resp_free(&r);
	assert_int_equal(sched_of(fx, sid).phase_left_ns, 0);

	/* 48 h: accepted, as 1 h */
	raw_wait(fd, sid, 48 * hour, &r);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	e = sched_of(fx, sid);
	assert_int_equal(e.phase, DJINN_PHASE_IO_WAIT);
	assert_true(e.phase_left_ns <= hour);
	assert_true(e.phase_left_ns > hour - 600 * NSEC_PER_SEC);
	/* INT64_MAX itself is a duration: clamped too */
	raw_wait(fd, sid, INT64_MAX, &r);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	e = sched_of(fx, sid);
	assert_true(e.phase_left_ns <= hour && e.phase_left_ns > 0);
	/* a refused one leaves the wait as it was */
	raw_wait(fd, sid, 0, &r);
	assert_int_equal(r.error, -EINVAL);
	dj_resp_free(&r);
	e = sched_of(fx, sid);
	assert_int_equal(e.phase, DJINN_PHASE_IO_WAIT);
	assert_true(e.phase_left_ns > hour - 600 * NSEC_PER_SEC);

	/* Another connection: not its session */
	fd2 = dj_connect(fx->d.sock);
	assert_true(fd2 >= 0);
	assert_int_equal(dj_call(fd2, DJINN_MSG_HELLO, 0, NULL, 0, &r), 1);
	dj_resp_free(&r);
	raw_wait(fd2, sid, 2 * NSEC_PER_SEC, &r);
	assert_int_equal(r.error, -EPERM);
	dj_resp_free(&r);
	raw_wait(fd2, sid_of(s), 2 * NSEC_PER_SEC, &r);
	assert_int_equal(r.error, -EPERM);
	dj_resp_free(&r);
	assert_int_not_equal(sched_of(fx, sid_of(s)).phase,
			     DJINN_PHASE_IO_WAIT);
	assert_true(sched_of(fx, sid).phase_left_ns >
		    hour - 600 * NSEC_PER_SEC);
	close(fd2);

	/* COMPUTE ends the wait */
	{
		struct djinn_signal sg = { .phase = DJINN_PHASE_COMPUTE };

		assert_int_equal(dj_call(fd, DJINN_MSG_SIGNAL, sid, &sg,
					 sizeof(sg), &r),
				 1);
		assert_int_equal(r.error, 0);
		dj_resp_free(&r);
	}
	e = sched_of(fx, sid);
	assert_int_equal(e.phase, DJINN_PHASE_COMPUTE);
	assert_int_equal(e.phase_left_ns, 0);
	assert_int_equal(dj_call(fd, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0, &r),
			 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	close(fd);

	/* and through libdjinn's tool calls */
	assert_int_equal(djinn_tool_call_begin(s, 48 * hour), 0);
	e = sched_of(fx, sid_of(s));
	assert_int_equal(e.phase, DJINN_PHASE_IO_WAIT);
	assert_true(e.phase_left_ns <= hour);
	assert_int_equal(djinn_tool_call_end(s), 0);
	assert_int_equal(sched_of(fx, sid_of(s)).phase_left_ns, 0);
	assert_int_equal(djinn_session_close(s), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_prefetch, setup_agents,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_early_return, setup_agents,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_ctx_wait, setup_agents,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fair, setup_graphs,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_static_relieve,
						setup_static_big, fx_teardown),
		cmocka_unit_test_setup_teardown(test_static, setup_static,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_config, setup_none,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_signals, setup_plain,
						fx_teardown),
	};
	int ret = djd_can_run("64M");

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("scheduler", tests, NULL, NULL);
}
