// SPDX-License-Identifier: MIT
/*
 * Passes (Documentation/sched.rst, "Passes") against a real djinnd:
 * the steps of many sessions' contexts on one model run as one forward.
 *
 * - Four sessions whose contexts hold prompts of different lengths
 *   decode together: each gets the tokens it gets alone, its logits
 *   within 1e-4, on a GPT-2, a llama and a llama streamed through a
 *   layer ring (over its budget); while another session's long
 *   graph holds the device, all four steps queue, and then every token
 *   of the four runs in one pass (ADMIN_SCHED's pass counts).
 * - A prefill that comes while they decode joins their passes, and its
 *   logits are those of the prefill alone; the decodes' tokens stay.
 * - Beside three that decode: a context paused at a breakpoint, one in
 *   IO_WAIT, and one freed while its decode runs in passes, which ends
 *   with -ECANCELED: the three get their tokens alone, the paused one
 *   resumes to its own.
 * - [device] max_batch = 1: every step a pass of its own, the same
 *   tokens.
 *
 * No assertion is on how fast anything is. The pass counts are asserted
 * only for a round in which all four steps were seen queued while the
 * long graph ran; a round that was not (a slow machine) is run again, a
 * few times at most.
 */
#include <errno.h>
#include <pthread.h>
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

#include "clock.h"
#include "libdjinn_fx.h"

#define GPT2                                                      \
	"--arch gpt2 --layers 3 --embd 64 --heads 4 --vocab 256 " \
	"--ctx 256 --seed 41"
#define LLAMA                                                       \
	"--arch llama --layers 3 --embd 64 --heads 4 --kv-heads 2 " \
	"--inner 128 --vocab 256 --ctx 256 --seed 43"
/* 4 layers of about 3.9 MB: under a budget of 14M two of them are
 * streamed through a ring (Documentation/streaming.rst) */
#define BIG                                                         \
	"--seed 21 --arch llama --embd 256 --heads 4 --kv-heads 2 " \
	"--inner 1024 --layers 4 --vocab 256 --untied"
#define VOCAB 256
#define NS 4 /* sessions decoding together */
#define NTOK 12 /* tokens each */
#define N 512 /* the long graph's matrices: N x N */
#define ROUNDS 4 /* tries at a round seen queued */

struct fx {
	struct djd d;
	struct djinn_conn *conn;
};

/* A session with a context of the model, on a connection of its own. */
struct agent {
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	uint32_t np; /* its prompt's tokens */
	int32_t prompt[64];
	int32_t tok[NTOK], solo[NTOK];
	float logits[VOCAB], solo_logits[VOCAB];
	int ret;
	char err[256];
};

static int start(void **state, const char *const *extra)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	if (djd_start_conn(&fx->d, "512M", 60000, extra, "gpt2", GPT2,
			   &fx->conn) ||
	    djd_make_model(&fx->d, "llama", LLAMA) ||
	    djd_make_model(&fx->d, "big", BIG)) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int setup(void **state)
{
	const char *args[] = { "--set", "model.big.budget=14M", NULL };

	return start(state, args);
}

static int setup_off(void **state)
{
	const char *args[] = { "--set", "device.max_batch=1", NULL };

	return start(state, args);
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int ret = djd_stop_conn(&fx->d, fx->conn, 20000);

	free(fx);
	return ret;
}

static struct djinn_admin_sched_dev sched_dev(struct fx *fx)
{
	struct djinn_admin_sched_dev d;
	struct dj_resp r;

	djd_admin(&fx->d, DJINN_MSG_ADMIN_SCHED, NULL, 0, &r);
	if (r.error)
		fail_msg("ADMIN_SCHED: %d: %s", r.error, r.msg);
	assert_true(r.len >= 8 + sizeof(d));
	memcpy(&d, r.data + 8, sizeof(d));
	dj_resp_free(&r);
	return d;
}

static void sleep_ms(int ms)
{
	struct timespec ts = ns_to_timespec((uint64_t)ms * NSEC_PER_MSEC);

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Agent @i of model @model: a prompt of 5 + 9 i tokens, prefilled. */
static void agent_open(struct fx *fx, struct agent *a, const char *model,
		       unsigned int i)
{
	uint32_t x = i * 2654435761u + 7;

	memset(a, 0, sizeof(*a));
	a->conn = djd_connect_lib(&fx->d);
	assert_int_equal(djinn_session_open(a->conn, NULL, &a->s), 0);
	assert_int_equal(djinn_model_open(a->s, model, &a->m), 0);
	assert_int_equal(djinn_ctx_new(a->m, 0, &a->c), 0);
	a->np = 5 + 9 * i;
	for (uint32_t t = 0; t < a->np; t++) {
		x = x * 1664525u + 1013904223u;
		a->prompt[t] = (int32_t)((x >> 8) % VOCAB);
	}
	assert_int_equal(djinn_ctx_prefill(a->c, a->prompt, a->np, NULL, NULL),
			 0);
}

static void agent_close(struct agent *a)
{
	if (a->c)
		assert_int_equal(djinn_ctx_free(a->c), 0);
	assert_int_equal(djinn_model_close(a->m), 0);
	assert_int_equal(djinn_session_close(a->s), 0);
	djinn_disconnect(a->conn);
}

/* Decode NTOK greedy tokens into a->tok and the logits after them. */
static void decode(struct agent *a)
{
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_step st;

	a->ret = djinn_ctx_decode(a->c, NTOK, NULL, a->tok, &lo, &st);
	if (a->ret != NTOK) {
		snprintf(a->err, sizeof(a->err), "%s", djinn_last_error());
		return;
	}
	a->ret = djinn_result_read(st.logits, 0, sizeof(a->logits), a->logits);
	if (a->ret)
		snprintf(a->err, sizeof(a->err), "reading the logits");
	else
		a->ret = NTOK;
}

static void *decode_main(void *arg)
{
	decode(arg);
	return NULL;
}

/* The context back to its prompt alone. */
static void rewind_ctx(struct agent *a)
{
	assert_int_equal(djinn_ctx_reset(a->c), 0);
	assert_int_equal(djinn_ctx_prefill(a->c, a->prompt, a->np, NULL, NULL),
			 0);
}

/* Each agent decodes alone, one after the other: its reference. */
static void solo(struct agent *a, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		decode(&a[i]);
		if (a[i].ret != NTOK)
			fail_msg("agent %u alone: %d: %s", i, a[i].ret,
				 a[i].err);
		memcpy(a[i].solo, a[i].tok, sizeof(a[i].tok));
		memcpy(a[i].solo_logits, a[i].logits, sizeof(a[i].logits));
		rewind_ctx(&a[i]);
	}
}

static void same_as_alone(const struct agent *a, unsigned int i)
{
	if (a->ret != NTOK)
		fail_msg("agent %u together: %d: %s", i, a->ret, a->err);
	assert_memory_equal(a->tok, a->solo, sizeof(a->tok));
	for (unsigned int v = 0; v < VOCAB; v++) {
		float d = a->logits[v] - a->solo_logits[v];

		if (d > 1e-4f || d < -1e-4f)
			fail_msg("agent %u: logit %u %g, alone %g", i, v,
				 (double)a->logits[v],
				 (double)a->solo_logits[v]);
	}
}

/* ---------------------------------------------------------------------- */
/* The long graph: (x I^chain) on a session of its own */

struct blocker {
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_tensor *x, *id;
};

static void blocker_open(struct fx *fx, struct blocker *b)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 2,
				       .dims = { N, N } };
	float *v = calloc(N * N, sizeof(float));

	assert_non_null(v);
	b->conn = djd_connect_lib(&fx->d);
	assert_int_equal(djinn_session_open(b->conn, NULL, &b->s), 0);
	for (unsigned int i = 0; i < N; i++)
		v[i * N + i] = 1.0f;
	assert_int_equal(
		djinn_tensor_upload(b->s, &d, v, DJINN_SEG_DATA, &b->id), 0);
	for (unsigned int i = 0; i < N * N; i++)
		v[i] = (float)(i % 7);
	assert_int_equal(
		djinn_tensor_upload(b->s, &d, v, DJINN_SEG_DATA, &b->x), 0);
	free(v);
}

static struct djinn_request *blocker_submit(struct blocker *b,
					    unsigned int chain)
{
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	int v, w;

	assert_int_equal(djinn_graph_new(b->s, &g), 0);
	v = djinn_graph_input(g, b->x);
	w = djinn_graph_input(g, b->id);
	for (unsigned int i = 0; i < chain; i++)
		v = djinn_op_matmul(g, v, w, false, false);
	assert_true(djinn_graph_output(g, v) >= 0);
	assert_int_equal(djinn_submit(g, &req), 0);
	djinn_graph_free(g);
	return req;
}

static void blocker_close(struct blocker *b)
{
	assert_int_equal(djinn_session_close(b->s), 0);
	djinn_disconnect(b->conn);
}

/*
 * One round: the long graph first, then the agents' decodes, each on a
 * thread of its own. Whether all the decodes were seen queued before
 * any of them started (behind the graph), so that they start together.
 */
static bool round_together(struct fx *fx, struct blocker *b, struct agent *a,
			   unsigned int n)
{
	uint64_t p0 = sched_dev(fx).passes;
	struct djinn_request *req = blocker_submit(b, 64);
	pthread_t th[NS];
	bool seen = false;
	int ret;

	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(
			pthread_create(&th[i], NULL, decode_main, &a[i]), 0);
	/* all of them queued before any started (no pass yet): the next
	 * pass takes them all */
	for (int k = 0; k < 5000; k++) {
		struct djinn_admin_sched_dev d = sched_dev(fx);

		if (d.passes != p0)
			break; /* one started: too late */
		if (d.queued[0] == n) {
			seen = true;
			break;
		}
		sleep_ms(1);
	}
	ret = djinn_wait(req, DJINN_WAIT_FOREVER);
	if (ret)
		fail_msg("the long graph: %d: %s", ret,
			 djinn_request_error(req));
	djinn_request_free(req);
	for (unsigned int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return seen;
}

/* ---------------------------------------------------------------------- */

static void together(struct fx *fx, const char *model, bool batching)
{
	struct agent a[NS];
	struct blocker b;
	struct djinn_admin_sched_dev d0, d1;
	bool seen = false;

	for (unsigned int i = 0; i < NS; i++)
		agent_open(fx, &a[i], model, i);
	blocker_open(fx, &b);
	solo(a, NS);
	for (unsigned int r = 0; r < ROUNDS && !seen; r++) {
		d0 = sched_dev(fx);
		seen = round_together(fx, &b, a, NS);
		d1 = sched_dev(fx);
		for (unsigned int i = 0; i < NS; i++) {
			same_as_alone(&a[i], i);
			rewind_ctx(&a[i]);
		}
		/* every token of every agent was a step of a pass */
		assert_int_equal(d1.pass_jobs - d0.pass_jobs, NS * NTOK);
		printf("# %s, round %u: %llu passes of %llu steps (%s); by "
		       "size:",
		       model, r, (unsigned long long)(d1.passes - d0.passes),
		       (unsigned long long)(d1.pass_jobs - d0.pass_jobs),
		       seen ? "all queued together" : "not seen queued");
		for (unsigned int k = 0; k < 4; k++)
			printf(" %llu", (unsigned long long)(d1.pass_hist[k] -
							     d0.pass_hist[k]));
		printf("\n");
	}
	if (!seen)
		fail_msg("in %d rounds the decodes were never seen queued "
			 "behind the long graph",
			 ROUNDS);
	if (batching) {
		/* one pass of the four for each token */
		assert_int_equal(d1.passes - d0.passes, NTOK);
		assert_int_equal(d1.pass_hist[2] - d0.pass_hist[2], NTOK);
		assert_true(d1.joins - d0.joins >= NS - 1);
	} else {
		assert_int_equal(d1.passes - d0.passes, NS * NTOK);
		assert_int_equal(d1.pass_hist[0] - d0.pass_hist[0], NS * NTOK);
	}
	blocker_close(&b);
	for (unsigned int i = 0; i < NS; i++)
		agent_close(&a[i]);
}

/* Four contexts of different lengths decoding together: their tokens
 * alone, in one pass per token. */
static void test_together_gpt2(void **state)
{
	together(*state, "gpt2", true);
}

static void test_together_llama(void **state)
{
	together(*state, "llama", true);
}

/* A streamed model: each streamed layer copied in once a pass serves
 * all four. */
static void test_together_streamed(void **state)
{
	struct fx *fx = *state;
	struct dj_resp r;
	const struct djinn_admin_model *e;
	uint32_t count;
	bool streamed = false;

	together(fx, "big", true);
	djd_admin(&fx->d, DJINN_MSG_ADMIN_MODELS, NULL, 0, &r);
	memcpy(&count, r.data, sizeof(count));
	e = (const void *)(r.data + 8);
	for (uint32_t i = 0; i < count; i++)
		if (!strcmp(e[i].name, "big"))
			streamed = e[i].resident < e[i].layers;
	dj_resp_free(&r);
	assert_true(streamed);
}

/* [device] max_batch = 1: a pass per step, the same tokens. */
static void test_batching_off(void **state)
{
	together(*state, "gpt2", false);
}

/* ---------------------------------------------------------------------- */
/* A prefill joining decodes */

struct prefill_arg {
	struct agent *a;
	const int32_t *p;
	uint32_t n;
	float *logits;
	int ret;
};

static void *prefill_main(void *arg)
{
	struct prefill_arg *pa = arg;
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_step st;

	pa->ret = djinn_ctx_prefill(pa->a->c, pa->p, pa->n, &lo, &st);
	if (!pa->ret)
		pa->ret = djinn_result_read(st.logits, 0, VOCAB * sizeof(float),
					    pa->logits);
	return NULL;
}

static void test_prefill_joins(void **state)
{
	struct fx *fx = *state;
	struct agent a[NS + 1];
	struct blocker b;
	struct djinn_admin_sched_dev d0, d1;
	int32_t p[48];
	float alone[VOCAB], joined[VOCAB];
	struct prefill_arg pa = { &a[NS], p, 48, joined, 0 };
	pthread_t th[NS], pt;
	struct djinn_request *req;
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_step st;

	for (unsigned int i = 0; i < NS + 1; i++)
		agent_open(fx, &a[i], "gpt2", i);
	for (unsigned int t = 0; t < 48; t++)
		p[t] = (int32_t)((t * 31 + 5) % VOCAB);
	blocker_open(fx, &b);
	solo(a, NS);
	/* the prefill alone */
	assert_int_equal(djinn_ctx_reset(a[NS].c), 0);
	assert_int_equal(djinn_ctx_prefill(a[NS].c, p, 48, &lo, &st), 0);
	assert_int_equal(djinn_result_read(st.logits, 0, sizeof(alone), alone),
			 0);
	assert_int_equal(djinn_ctx_reset(a[NS].c), 0);

	/* the decodes, then the prefill among them */
	d0 = sched_dev(fx);
	req = blocker_submit(&b, 16);
	for (unsigned int i = 0; i < NS; i++)
		assert_int_equal(
			pthread_create(&th[i], NULL, decode_main, &a[i]), 0);
	assert_int_equal(pthread_create(&pt, NULL, prefill_main, &pa), 0);
	assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), 0);
	djinn_request_free(req);
	pthread_join(pt, NULL);
	for (unsigned int i = 0; i < NS; i++)
		pthread_join(th[i], NULL);
	d1 = sched_dev(fx);
	assert_int_equal(pa.ret, 0);
	for (unsigned int v = 0; v < VOCAB; v++)
		if (joined[v] - alone[v] > 1e-4f ||
		    alone[v] - joined[v] > 1e-4f)
			fail_msg("prefill beside decodes: logit %u %g, alone "
				 "%g",
				 v, (double)joined[v], (double)alone[v]);
	for (unsigned int i = 0; i < NS; i++)
		same_as_alone(&a[i], i);
	assert_int_equal(d1.pass_jobs - d0.pass_jobs, NS * NTOK + 1);
	printf("# a prefill of 48 among %d decodes of %d: %llu passes, %llu "
	       "rows\n",
	       NS, NTOK, (unsigned long long)(d1.passes - d0.passes),
	       (unsigned long long)(d1.pass_rows - d0.pass_rows));
	assert_int_equal(d1.pass_rows - d0.pass_rows, NS * NTOK + 48);
	blocker_close(&b);
	for (unsigned int i = 0; i < NS + 1; i++)
		agent_close(&a[i]);
}

/* ---------------------------------------------------------------------- */
/* Beside three that decode: paused, waiting, freed */

/* Steps of session @sid charged so far (ADMIN_SCHED's jobs). */
static uint64_t jobs_of(struct fx *fx, uint64_t sid)
{
	const struct djinn_admin_sched_session *e;
	struct dj_resp r;
	uint32_t nd, ns;
	uint64_t jobs = 0;

	djd_admin(&fx->d, DJINN_MSG_ADMIN_SCHED, NULL, 0, &r);
	memcpy(&nd, r.data, 4);
	memcpy(&ns, r.data + 4, 4);
	e = (const void *)(r.data + 8 +
			   nd * sizeof(struct djinn_admin_sched_dev));
	for (uint32_t i = 0; i < ns; i++)
		if (e[i].id == sid)
			jobs = e[i].jobs;
	dj_resp_free(&r);
	return jobs;
}

/*
 * A context of a session of its own (raw frames) decodes 200 tokens; once
 * a few of its steps have run, CTX_FREE. The decode's answer: -ECANCELED
 * (true), or, when it was done before the free came (a slow test), its
 * 200 tokens (false).
 */
static bool freed_while_running(struct fx *fx)
{
	int fd = dj_connect(fx->d.sock);
	struct djinn_handle_req fr = { 0 };
	struct {
		struct djinn_ctx_step st;
		int32_t tok[4];
	} pf = { .st = { .nr_tokens = 4 }, .tok = { 1, 2, 3, 4 } };
	struct djinn_ctx_step dc = { .nr_tokens = 200 };
	struct dj_resp r, r2;
	uint64_t j0, sid, ctx;
	bool cancelled;

	ctx = djd_raw_ctx(fd, "freed", 0, "gpt2", &sid);
	pf.st.ctx = dc.ctx = fr.handle = ctx;
	r = djd_raw_ok(fd, DJINN_MSG_CTX_PREFILL, sid, &pf, sizeof(pf));
	dj_resp_free(&r);
	j0 = jobs_of(fx, sid);
	assert_int_equal(
		dj_send(fd, DJINN_MSG_CTX_DECODE, 71, sid, &dc, sizeof(dc)), 0);
	for (int k = 0; k < 5000 && jobs_of(fx, sid) < j0 + 2; k++)
		sleep_ms(1);
	assert_int_equal(
		dj_send(fd, DJINN_MSG_CTX_FREE, 72, sid, &fr, sizeof(fr)), 0);
	assert_int_equal(dj_recv(fd, &r, 60000), 1);
	assert_int_equal(dj_recv(fd, &r2, 60000), 1);
	if (r.hdr.request_id == 71) {
		struct dj_resp t = r;

		r = r2;
		r2 = t;
	}
	/* r: the free's, r2: the decode's */
	assert_int_equal(r.hdr.request_id, 72);
	assert_int_equal(r.error, 0);
	cancelled = r2.error == -ECANCELED;
	if (cancelled)
		assert_non_null(strstr(r2.msg, "freed"));
	else if (r2.error)
		fail_msg("a decode whose context was freed: %d: %s", r2.error,
			 r2.msg);
	printf("# a decode of 200 freed after %llu steps: %s%s\n",
	       (unsigned long long)(jobs_of(fx, sid) - j0),
	       cancelled ? "-ECANCELED: " : "done before the free",
	       cancelled ? r2.msg : "");
	dj_resp_free(&r);
	dj_resp_free(&r2);
	r = djd_raw_ok(fd, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0);
	dj_resp_free(&r);
	close(fd);
	return cancelled;
}

static void test_beside(void **state)
{
	struct fx *fx = *state;
	struct agent a[5];
	pthread_t th[3];
	struct djinn_step_opts brk = { .break_layer = DJINN_BREAK_AFTER(1) };
	struct djinn_step st;
	int32_t paused_tok[NTOK];
	bool cancelled = false;
	int ret;

	/* 0 .. 2 decode; 3 pauses; 4 waits on a tool */
	for (unsigned int i = 0; i < 5; i++)
		agent_open(fx, &a[i], "gpt2", i);
	solo(a, 5);

	ret = djinn_ctx_decode(a[3].c, NTOK, NULL, paused_tok, &brk, &st);
	assert_true(ret >= 0);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	assert_int_equal(st.layer, 1);
	assert_int_equal(djinn_signal(a[4].s, DJINN_PHASE_IO_WAIT,
				      (int64_t)10 * NSEC_PER_SEC),
			 0);
	for (unsigned int r = 0; r < ROUNDS && !cancelled; r++) {
		for (unsigned int i = 0; i < 3; i++)
			assert_int_equal(pthread_create(&th[i], NULL,
							decode_main, &a[i]),
					 0);
		/* and a fourth, freed while it decodes */
		cancelled = freed_while_running(fx);
		for (unsigned int i = 0; i < 3; i++)
			pthread_join(th[i], NULL);
		for (unsigned int i = 0; i < 3; i++) {
			same_as_alone(&a[i], i);
			rewind_ctx(&a[i]);
		}
	}
	if (!cancelled)
		fail_msg("in %d rounds no decode was freed while it ran",
			 ROUNDS);

	/* the paused one resumes to its own tokens, a pause a token */
	while (st.state == DJINN_CTX_PAUSED) {
		ret = djinn_ctx_resume(a[3].c, NULL, &st);
		assert_true(ret >= 0);
	}
	assert_int_equal(ret, NTOK);
	assert_memory_equal(paused_tok, a[3].solo, sizeof(paused_tok));
	/* the waiting one comes back to its own */
	decode(&a[4]);
	same_as_alone(&a[4], 4);
	for (unsigned int i = 0; i < 5; i++)
		agent_close(&a[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_together_gpt2, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_together_llama, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_together_streamed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_prefill_joins, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_beside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batching_off, setup_off,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
