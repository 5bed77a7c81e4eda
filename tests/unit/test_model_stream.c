// SPDX-License-Identifier: MIT
/*
 * Streamed models (issue 15): a model over its device budget keeps its
 * embeddings, head and first layers in the text segment and streams the
 * rest through the layer ring. Its logits and tokens equal those of the
 * same weights wholly on the device, bit for bit in f32 on the CPU, for
 * prefill, decode, breakpoints (in the resident and the streamed layers)
 * and steering; budgets are placed as documented (store.h) and refused
 * below the least with the numbers; a budget set while the model is held
 * waits for its next load; contexts of four sessions decoding in one pass
 * get their tokens alone. Models are written by scripts/mkmodel.py; runs
 * from the repository root.
 *
 * tests/gpu/test_cuda_stream builds this file with STREAM_BACKEND, a
 * function that opens the CUDA backend (or exits 77 saying why): the
 * same checks, the ring's copies on the GPU's copy engine.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/runtime.h"
#include "model/stream.h"
#include "testutil.h"
#include "model_test.h"

#define NT 7 /* prompt tokens */
#define ND 6 /* decoded tokens */
#define NS 4 /* sessions decoding together */

static char dir[64];
static const int32_t prompt[NT] = { 3, 141, 59, 26, 5, 358, 97 };

/* What a context computes: every prompt token's logits, greedy tokens,
 * the logits after them. */
struct out {
	float *all; /* (NT, V) */
	int32_t tok[ND];
	float *last; /* (V) */
};

static void out_init(struct out *o, uint32_t V)
{
	o->all = xmalloc(NT * V * sizeof(float));
	o->last = xmalloc(V * sizeof(float));
}

static void out_free(struct out *o)
{
	free(o->all);
	free(o->last);
}

static const struct model_sampling greedy = { .top_p = 1 };

static struct model_hold *hold(struct model_fix *f, const char *name)
{
	struct model_hold *h;
	char msg[ST_MSG_LEN];

	if (model_open(f->ms, f->s, name, &h, msg, sizeof(msg)))
		fail_msg("model_open(%s): %s", name, msg);
	return h;
}

/* Prefill and decode greedily. */
static void run(struct model_fix *f, struct model_hold *h, struct out *o)
{
	uint32_t V = h->m->cfg.vocab;
	struct model_ctx *c = ctx(h, 64);
	char msg[ST_MSG_LEN];

	if (model_ctx_prefill(c, &f->env, prompt, NT, o->all, msg, sizeof(msg)))
		fail_msg("prefill: %s", msg);
	if (model_ctx_decode(c, &f->env, ND, &greedy, o->tok, msg, sizeof(msg)))
		fail_msg("decode: %s", msg);
	memcpy(o->last, model_ctx_logits(c), V * sizeof(float));
	model_ctx_free(c);
}

/* The same with a break after layer @brk - 1 at every step, resumed
 * unchanged, or (@steer) the prefill's hidden state replaced by
 * @steer(NT, C). */
static void run_brk(struct model_fix *f, struct model_hold *h, uint32_t brk,
		    const float *steer, struct out *o)
{
	struct model_run r = { .brk = brk, .logits = o->all, .out = o->tok };
	uint32_t V = h->m->cfg.vocab, C = h->m->cfg.n_embd;
	struct model_ctx *c = ctx(h, 64);
	struct model_pause_info pi;
	char msg[ST_MSG_LEN];

	if (model_ctx_run_prefill(c, &f->env, prompt, NT, &r, msg, sizeof(msg)))
		fail_msg("prefill to layer %u: %s", brk - 1, msg);
	assert_true(model_ctx_paused(c, &pi));
	assert_int_equal(pi.layer, brk - 1);
	if (steer) {
		struct vmu_region_info info;
		uint64_t reg;

		assert_int_equal(vmu_region_create(f->s, NT * C * 4, &reg), 0);
		assert_int_equal(vmu_region_resize(f->s, reg, NT * C * 4, NULL),
				 0);
		assert_int_equal(
			vmu_region_write(f->s, reg, 0, steer, NT * C * 4), 0);
		assert_int_equal(vmu_region_pin(f->s, reg, NULL, &info), 0);
		if (model_ctx_steer(c, &f->env, info.addr, &pi.desc, msg,
				    sizeof(msg)))
			fail_msg("steer: %s", msg);
		assert_int_equal(vmu_region_unpin(f->s, reg), 0);
		assert_int_equal(vmu_region_destroy(f->s, reg), 0);
	}
	if (model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)))
		fail_msg("resume: %s", msg);
	assert_false(r.paused);
	if (model_ctx_run_decode(c, &f->env, ND, &greedy, &r, msg, sizeof(msg)))
		fail_msg("decode to layer %u: %s", brk - 1, msg);
	while (r.paused)
		if (model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)))
			fail_msg("decode resume: %s", msg);
	assert_int_equal(r.nr_out, ND);
	memcpy(o->last, model_ctx_logits(c), V * sizeof(float));
	model_ctx_free(c);
}

static void same(const struct out *a, const struct out *b, uint32_t V)
{
	assert_memory_equal(a->all, b->all, NT * V * sizeof(float));
	assert_memory_equal(a->tok, b->tok, sizeof(a->tok));
	assert_memory_equal(a->last, b->last, V * sizeof(float));
}

/* One model's list line, or fail. */
static struct model_info info_of(struct model_fix *f, const char *name)
{
	struct model_info *info, x;
	size_t nr, i;

	assert_int_equal(model_store_list(f->ms, &info, &nr), 0);
	for (i = 0; i < nr && strcmp(info[i].name, name); i++)
		;
	if (i == nr)
		fail_msg("%s is not listed", name);
	x = info[i];
	free(info);
	return x;
}

/*
 * The budgets of the tests, from the model's layout: the least (the
 * embeddings and head, and a ring of one layer: nothing resident) and
 * one that keeps a layer beside a ring of two.
 */
static uint64_t head_bytes(struct model_fix *f, const struct model *m)
{
	return vmu_round(f->env.v,
			 model_layer_start(&m->layout, m->cfg.n_layer, 0));
}

static uint64_t layer_max(const struct model *m)
{
	return model_layer_max(&m->layout, m->cfg.n_layer);
}

/* Load @name under @budget (@slots), check its placement, return it. */
static struct model_hold *hold_budget(struct model_fix *f, const char *name,
				      uint64_t budget, unsigned int slots,
				      uint32_t resident, uint64_t ring)
{
	struct model_hold *h;
	struct model_info x;
	char msg[ST_MSG_LEN];

	model_store_evict(f->ms, name, msg, sizeof(msg));
	assert_int_equal(model_store_set_budget(f->ms, name, budget, slots, msg,
						sizeof(msg)),
			 0);
	h = hold(f, name);
	x = info_of(f, name);
	printf("  %s: budget %llu: %u of %u layers resident, ring %llu, "
	       "text %llu of %llu bytes\n",
	       name, (unsigned long long)budget, x.resident, x.layers,
	       (unsigned long long)x.ring, (unsigned long long)x.bytes,
	       (unsigned long long)x.weights);
	assert_int_equal(x.resident, resident);
	assert_int_equal(h->m->resident, resident);
	assert_int_equal(x.ring, ring);
	assert_int_equal(x.budget, budget);
	assert_true(x.bytes < x.weights);
	assert_non_null(h->m->stream);
	return h;
}

/* Streamed at the least budget and with a layer resident: the same
 * bits as on the device, step by step, broken at every layer, steered. */
static void check_same(struct model_fix *f, const char *name)
{
	char ref[64], str[64];
	struct model_hold *hr, *hs;
	struct out a, b;
	uint32_t V, C, L;
	uint64_t head, big;
	float *steer;

	snprintf(ref, sizeof(ref), "%s", name);
	snprintf(str, sizeof(str), "%s-s", name);
	hr = hold(f, ref);
	assert_null(hr->m->stream);
	assert_int_equal(hr->m->resident, hr->m->cfg.n_layer);
	V = hr->m->cfg.vocab;
	C = hr->m->cfg.n_embd;
	L = hr->m->cfg.n_layer;
	head = head_bytes(f, hr->m);
	big = layer_max(hr->m);
	out_init(&a, V);
	out_init(&b, V);
	steer = xmalloc(NT * C * sizeof(float));
	for (uint32_t i = 0; i < NT * C; i++)
		steer[i] = (float)sin(0.37 * i);

	for (int k = 0; k < 2; k++) {
		/* the least: nothing resident; then a layer and a ring of
		 * two */
		uint64_t ring = vmu_round(f->env.v, (k ? 2 : 1) * big);
		uint64_t budget =
			k ? vmu_round(f->env.v,
				      model_layer_start(&hr->m->layout, L, 1)) +
					ring :
			    head + ring;

		hs = hold_budget(f, str, budget, 0, k ? 1 : 0, ring);
		run(f, hr, &a);
		run(f, hs, &b);
		same(&a, &b, V);
		for (uint32_t brk = 1; brk <= L; brk++) {
			run_brk(f, hr, brk, NULL, &a);
			run_brk(f, hs, brk, NULL, &b);
			same(&a, &b, V);
		}
		run_brk(f, hr, L - 1, steer, &a);
		run_brk(f, hs, L - 1, steer, &b);
		same(&a, &b, V);
		model_close(hs);
	}
	printf("  %s: streamed, the same logits and tokens as on the device "
	       "(prefill, decode, breaks after each of %u layers, "
	       "steering)\n",
	       name, L);
	model_close(hr);
	out_free(&a);
	out_free(&b);
	free(steer);
}

static void test_same_llama(void **state)
{
	check_same(*state, "llama");
}

static void test_same_gpt2(void **state)
{
	check_same(*state, "gpt2");
}

/* Below the least budget: refused with need and budget; nothing is
 * listed, nothing is left in the text segment. A budget set while the
 * model is held waits for its next load. */
static void test_budgets(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *hr, *hs;
	uint64_t head, big, least, text0;
	struct model_info *info;
	struct vmu_stats st;
	char msg[ST_MSG_LEN], want[128];
	size_t nr;

	hr = hold(f, "llama");
	head = head_bytes(f, hr->m);
	big = layer_max(hr->m);
	least = head + vmu_round(f->env.v, big);
	vmu_get_stats(f->env.v, &st);
	text0 = st.seg[VMU_SEG_TEXT].used;

	assert_int_equal(model_store_set_budget(f->ms, "llama-s", least - 1, 0,
						msg, sizeof(msg)),
			 0);
	assert_int_equal(model_open(f->ms, f->s, "llama-s", &hs, msg,
				    sizeof(msg)),
			 -ENOMEM);
	printf("  refused: %s\n", msg);
	snprintf(want, sizeof(want), "it needs %llu at least",
		 (unsigned long long)least);
	assert_non_null(strstr(msg, want));
	snprintf(want, sizeof(want), "its budget is %llu",
		 (unsigned long long)(least - 1));
	assert_non_null(strstr(msg, want));
	assert_int_equal(model_store_list(f->ms, &info, &nr), 0);
	assert_int_equal(nr, 1);
	assert_string_equal(info[0].name, "llama");
	free(info);
	vmu_get_stats(f->env.v, &st);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, text0);
	assert_int_equal(model_store_set_budget(f->ms, "../x", least, 0, msg,
						sizeof(msg)),
			 -EINVAL);

	/* exactly the least: nothing resident, a ring of one layer */
	hs = hold_budget(f, "llama-s", least, 0, 0, vmu_round(f->env.v, big));
	/* the ring is text: the segment holds the entry and the ring */
	vmu_get_stats(f->env.v, &st);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, text0 + least);

	/* a new budget while it is held: deferred to the next load */
	assert_int_equal(model_store_set_budget(f->ms, "llama-s", 0, 0, msg,
						sizeof(msg)),
			 0);
	assert_int_equal(info_of(f, "llama-s").resident, 0);
	assert_int_equal(model_store_evict(f->ms, "llama-s", msg, sizeof(msg)),
			 -EBUSY);
	model_close(hs);
	assert_int_equal(model_store_evict(f->ms, "llama-s", msg, sizeof(msg)),
			 0);
	hs = hold(f, "llama-s");
	assert_null(hs->m->stream);
	assert_int_equal(info_of(f, "llama-s").resident, hs->m->cfg.n_layer);
	model_close(hs);
	model_close(hr);
}

/* ---------------------------------------------------------------------- */
/* Four sessions decoding in one pass */

static void test_batch(void **state)
{
	struct model_fix *f = *state;
	struct vmu_session *s[NS];
	struct model_hold *h[NS];
	struct model_stream_stats s0, s1;
	struct {
		struct model_env env;
		struct model_ctx *c;
		int32_t toks[ND];
		char msg[ST_MSG_LEN];
		struct model_req q;
	} d[NS];
	struct model_req *qs[NS];
	int32_t solo[NS][ND], ids[NS][NT];
	float *solo_logits[NS];
	struct model_hold *hr = hold(f, "llama");
	uint64_t least =
		head_bytes(f, hr->m) + vmu_round(f->env.v, layer_max(hr->m));
	uint32_t V = hr->m->cfg.vocab;
	char msg[ST_MSG_LEN];
	double worst = 0;

	model_close(hr);
	model_store_evict(f->ms, "llama-s", msg, sizeof(msg));
	assert_int_equal(model_store_set_budget(f->ms, "llama-s", least, 0, msg,
						sizeof(msg)),
			 0);
	for (int i = 0; i < NS; i++) {
		assert_int_equal(vmu_session_create(f->env.v, "test", &s[i]),
				 0);
		if (model_open(f->ms, s[i], "llama-s", &h[i], msg, sizeof(msg)))
			fail_msg("%s", msg);
		for (int t = 0; t < NT; t++)
			ids[i][t] = (prompt[t] + 37 * i) % (int32_t)V;
		d[i].env = f->env;
		assert_int_equal(
			vmu_stack_create(f->env.v, 64 * MiB, &d[i].env.st), 0);
		solo_logits[i] = xmalloc(V * sizeof(float));
	}
	assert_non_null(h[0]->m->stream);

	/* alone, one after the other */
	for (int i = 0; i < NS; i++) {
		d[i].c = ctx(h[i], 64);
		prefill(f, d[i].c, ids[i], NT, NULL);
		if (model_ctx_decode(d[i].c, &d[i].env, ND, &greedy, solo[i],
				     msg, sizeof(msg)))
			fail_msg("%s", msg);
		memcpy(solo_logits[i], model_ctx_logits(d[i].c),
		       V * sizeof(float));
		assert_int_equal(model_ctx_reset(d[i].c), 0);
		prefill(f, d[i].c, ids[i], NT, NULL);
	}

	/* together: each token of the four in one pass */
	model_stream_stats(h[0]->m->stream, &s0);
	for (int i = 0; i < NS; i++) {
		d[i].q = (struct model_req){ .c = d[i].c,
					     .kind = MODEL_REQ_DECODE,
					     .n = ND,
					     .sp = greedy,
					     .r = { .out = d[i].toks },
					     .msg = d[i].msg,
					     .msglen = sizeof(d[i].msg) };
		if (model_req_start(&d[i].q))
			fail_msg("session %d: %s", i, d[i].msg);
		qs[i] = &d[i].q;
	}
	for (int k = 0; k < ND; k++) {
		assert_false(d[0].q.done);
		model_pass(qs, NS, &d[0].env);
	}
	for (int i = 0; i < NS; i++) {
		assert_true(d[i].q.done);
		if (d[i].q.ret)
			fail_msg("session %d: %s", i, d[i].msg);
		assert_int_equal(d[i].q.r.nr_out, ND);
		assert_memory_equal(d[i].toks, solo[i], sizeof(solo[i]));
		model_req_fini(&d[i].q);
	}
	model_stream_stats(h[0]->m->stream, &s1);
	assert_int_equal(s1.passes - s0.passes, ND);
	assert_int_equal(s1.jobs - s0.jobs, ND * NS);
	assert_int_equal(s1.max_batch, NS);
	for (int i = 0; i < NS; i++) {
		const float *l = model_ctx_logits(d[i].c);
		double top = 0;

		for (uint32_t v = 0; v < V; v++) {
			double e = fabs(l[v] - solo_logits[i][v]);

			top = fabs(solo_logits[i][v]) > top ?
				      fabs(solo_logits[i][v]) :
				      top;
			worst = e > worst ? e : worst;
		}
		assert_true(worst <= 1e-4 * top);
	}
	printf("  %d sessions decoding %d tokens in %d passes of %d: their "
	       "tokens alone; logits within %.2e\n",
	       NS, ND, ND, NS, worst);
	for (int i = 0; i < NS; i++) {
		model_ctx_free(d[i].c);
		model_close(h[i]);
		vmu_stack_destroy(d[i].env.st);
		vmu_session_destroy(s[i]);
		free(solo_logits[i]);
	}
}

/* ---------------------------------------------------------------------- */
/* Memory pressure */

/*
 * A context whose KV reservation does not fit: the model, held whole,
 * streams layers instead (model_relieve()), while another context of it
 * is mid-decode; both go on to the tokens and logits they give alone. A
 * model with a budget of its own keeps its placement; a need no
 * placement can free is refused and changes nothing.
 */
static void test_relieve(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "llama"), *hs;
	uint32_t V = h->m->cfg.vocab, L = h->m->cfg.n_layer;
	struct vmu_session *s2;
	struct model_ctx *a, *b;
	struct vmu_stats st0, st;
	struct model_info x;
	struct out ref, o;
	char msg[ST_MSG_LEN];

	assert_null(h->m->stream);
	out_init(&ref, V);
	out_init(&o, V);
	run(f, h, &ref);
	a = ctx(h, 64);
	if (model_ctx_reserve(a, false, msg, sizeof(msg)))
		fail_msg("reserve: %s", msg);
	prefill(f, a, prompt, NT, NULL);
	if (model_ctx_decode(a, &f->env, 3, &greedy, o.tok, msg, sizeof(msg)))
		fail_msg("decode: %s", msg);

	/* the device full of another session's reserved data, a granule
	 * at a time until nothing reclaim could free is left */
	vmu_get_stats(f->env.v, &st0);
	assert_int_equal(vmu_session_create(f->env.v, "filler", &s2), 0);
	for (;;) {
		uint64_t r;
		int ret;

		assert_int_equal(vmu_region_create(s2, st0.granularity, &r), 0);
		ret = vmu_region_reserve(s2, r, msg, sizeof(msg));
		if (ret == -ENOMEM)
			break;
		assert_int_equal(ret, 0);
	}
	vmu_get_stats(f->env.v, &st0);
	assert_int_equal(st0.free, 0);
	b = ctx(h, h->m->cfg.n_ctx);
	assert_int_equal(model_ctx_reserve(b, false, msg, sizeof(msg)),
			 -ENOMEM);
	assert_int_equal(info_of(f, "llama").resident, L);
	if (model_ctx_reserve(b, true, msg, sizeof(msg)))
		fail_msg("reserve under pressure: %s", msg);
	x = info_of(f, "llama");
	printf("  under pressure: llama %u of %u layers resident, ring %llu, "
	       "text %llu of %llu bytes\n",
	       x.resident, x.layers, (unsigned long long)x.ring,
	       (unsigned long long)x.bytes, (unsigned long long)x.weights);
	assert_true(x.resident < L);
	assert_int_equal(x.resident, h->m->resident);
	assert_true(x.ring > 0);
	assert_non_null(h->m->stream);
	assert_int_equal(x.holders, 1);
	vmu_get_stats(f->env.v, &st);
	assert_true(st.seg[VMU_SEG_TEXT].used < st0.seg[VMU_SEG_TEXT].used);
	/* the other session lets go: room for the steps' activations */
	vmu_session_destroy(s2);

	/* the context that was decoding goes on as if alone */
	if (model_ctx_decode(a, &f->env, ND - 3, &greedy, o.tok + 3, msg,
			     sizeof(msg)))
		fail_msg("decode after the move: %s", msg);
	assert_memory_equal(o.tok, ref.tok, sizeof(ref.tok));
	assert_memory_equal(model_ctx_logits(a), ref.last, V * sizeof(float));
	/* the new one computes what a context alone does */
	if (model_ctx_prefill(b, &f->env, prompt, NT, o.all, msg, sizeof(msg)))
		fail_msg("prefill after the move: %s", msg);
	assert_memory_equal(o.all, ref.all, NT * V * sizeof(float));

	/* nothing frees 1 TiB: refused, the placement kept */
	assert_int_equal(model_relieve(h, 1ull << 40, msg, sizeof(msg)),
			 -ENOMEM);
	printf("  refused: %s\n", msg);
	assert_int_equal(info_of(f, "llama").resident, x.resident);
	/* a budget of its own: kept */
	hs = hold_budget(f, "llama-s",
			 head_bytes(f, h->m) +
				 vmu_round(f->env.v, layer_max(h->m)),
			 0, 0, vmu_round(f->env.v, layer_max(h->m)));
	assert_int_equal(model_relieve(hs, 1, msg, sizeof(msg)), -EPERM);
	printf("  refused: %s\n", msg);
	model_close(hs);

	model_ctx_free(a);
	model_ctx_free(b);
	model_close(h);
	out_free(&ref);
	out_free(&o);
}

/* Another tenant holding the model keeps it where it is: streaming it
 * would slow their steps for this tenant's cache. The same tenant's
 * other sessions do not. */
static void test_relieve_tenants(void **state)
{
	struct model_fix *f = *state;
	struct vmu_session *mine, *theirs;
	struct model_hold *h, *hm = NULL, *ht = NULL;
	char msg[ST_MSG_LEN];
	uint32_t L;

	assert_int_equal(vmu_session_create(f->env.v, "test", &mine), 0);
	assert_int_equal(vmu_session_create(f->env.v, "zeta", &theirs), 0);
	h = hold(f, "gpt2");
	L = h->m->cfg.n_layer;
	if (model_open(f->ms, mine, "gpt2", &hm, msg, sizeof(msg)) ||
	    model_open(f->ms, theirs, "gpt2", &ht, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(model_relieve(h, 1, msg, sizeof(msg)), -EPERM);
	printf("  refused: %s\n", msg);
	assert_non_null(strstr(msg, "other tenants"));
	assert_null(strstr(msg, "zeta")); /* not named to this tenant */
	assert_int_equal(info_of(f, "gpt2").resident, L);
	model_close(ht);
	if (model_relieve(h, 1, msg, sizeof(msg)))
		fail_msg("relieve, one tenant: %s", msg);
	assert_true(info_of(f, "gpt2").resident < L);
	assert_int_equal(info_of(f, "gpt2").holders, 2);
	model_close(hm);
	model_close(h);
	vmu_session_destroy(theirs);
	vmu_session_destroy(mine);
}

/* A reference to the weights that is not a holder's keeps them: the
 * move frees nothing, is given up, and the holders go on as before. */
static void test_relieve_held_outside(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2");
	uint32_t V = h->m->cfg.vocab, L = h->m->cfg.n_layer;
	struct vmu_session *s2;
	struct vmu_text *t;
	struct out ref, o;
	char msg[ST_MSG_LEN];

	out_init(&ref, V);
	out_init(&o, V);
	run(f, h, &ref);
	assert_int_equal(vmu_session_create(f->env.v, "test", &s2), 0);
	assert_int_equal(vmu_text_lookup_shared(s2, h->m->fp, &t), 0);
	assert_int_equal(model_relieve(h, 1, msg, sizeof(msg)), -EBUSY);
	printf("  given up: %s\n", msg);
	assert_int_equal(info_of(f, "gpt2").resident, L);
	run(f, h, &o);
	same(&ref, &o, V);
	assert_int_equal(vmu_text_put(s2, t), 0);
	if (model_relieve(h, 1, msg, sizeof(msg)))
		fail_msg("relieve: %s", msg);
	assert_true(info_of(f, "gpt2").resident < L);
	run(f, h, &o);
	same(&ref, &o, V);
	model_close(h);
	vmu_session_destroy(s2);
	out_free(&ref);
	out_free(&o);
}

static int group_setup(void **state)
{
	static const char *llama = "--seed 21 --arch llama --embd 256 "
				   "--heads 4 --kv-heads 2 --inner 1024 "
				   "--layers 4 --vocab 512 --untied";
	static const char *gpt2 = "--seed 22 --arch gpt2 --embd 256 --heads 4 "
				  "--inner 1024 --layers 4 --vocab 512";

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/djinn-stream-XXXXXX");
	if (model_tmpdir(dir))
		return -1;
	run_cmd("python3 scripts/mkmodel.py %s %s/llama", llama, dir);
	run_cmd("python3 scripts/mkmodel.py %s %s/llama-s", llama, dir);
	run_cmd("python3 scripts/mkmodel.py %s %s/gpt2", gpt2, dir);
	run_cmd("python3 scripts/mkmodel.py %s %s/gpt2-s", gpt2, dir);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return rm_tree(dir);
}

#ifdef STREAM_BACKEND
static int setup(void **state)
{
	return model_fix_setup_on(state, dir, STREAM_BACKEND());
}
#else
static int setup(void **state)
{
	return model_fix_setup(state, dir);
}
#endif

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, model_fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST(test_same_llama),
		TEST(test_same_gpt2),
		TEST(test_budgets),
		TEST(test_batch),
		TEST(test_relieve),
		TEST(test_relieve_tenants),
		TEST(test_relieve_held_outside),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
