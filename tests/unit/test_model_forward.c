// SPDX-License-Identifier: MIT
/*
 * The forward pass end to end: models written by scripts/mkmodel.py,
 * loaded through the model store into the text segment, run as graphs by
 * the executor on the CPU backend, against a plain double-precision
 * reference of GPT-2 and Llama written here from the papers and the
 * Hugging Face code (not from the kernels). Tolerances per dtype.
 *
 * Also: the KV cache grows in place and decoding over it equals running
 * the whole sequence again; greedy tokens from prefill + decode equal
 * those from recomputing; failed steps change nothing; forks; seeded
 * sampling; grouped-query attention as an op. Breakpoints: a step split
 * at any layer gives the same logits and tokens bit for bit; the hidden
 * state at the break is the reference's, and a steered one gives the
 * logits the reference computes from it. Runs from the repository
 * root (it calls scripts/mkmodel.py).
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
#include "model/runtime_test.h"
#include "sample.h"
#include "array_size.h"
#include "testutil.h"
#include "model_test.h"

static char dir[64];

/* ---------------------------------------------------------------------- */
/* The reference, in double */

struct ref {
	struct model_config c;
	struct st_set *set;
	const char *pfx; /* gpt2: "" or "transformer." */
};

/*
 * struct refpart - part of a forward pass, for breakpoints
 * @from:  the first layer to run; when > 0, @x0 (T, C) is the hidden
 *         state entering it
 * @stop:  after this layer, copy the hidden state into @xout (if set)
 */
struct refpart {
	int from;
	const double *x0;
	int stop;
	double *xout;
};

static double *weight(const struct ref *r, const char *fmt, ...)
{
	const struct st_tensor *t;
	va_list ap;

	va_start(ap, fmt);
	t = ref_tensor_v(r->set, fmt, ap);
	va_end(ap);
	return ref_values(t);
}

/* y (T, N) = x (T, K) @ W, W (K, N), or W^T for W (N, K) */
static void mm(double *y, const double *x, const double *w, const double *b,
	       int T, int K, int N, bool wt)
{
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = b ? b[n] : 0;

			for (int k = 0; k < K; k++)
				s += x[t * K + k] *
				     (wt ? w[n * K + k] : w[k * N + n]);
			y[t * N + n] = s;
		}
}

static void layernorm(double *y, const double *x, const double *g,
		      const double *b, int T, int C, double eps)
{
	for (int t = 0; t < T; t++) {
		double mean = 0, var = 0;

		for (int i = 0; i < C; i++)
			mean += x[t * C + i] / C;
		for (int i = 0; i < C; i++)
			var += (x[t * C + i] - mean) * (x[t * C + i] - mean) /
			       C;
		for (int i = 0; i < C; i++)
			y[t * C + i] =
				(x[t * C + i] - mean) / sqrt(var + eps) * g[i] +
				(b ? b[i] : 0);
	}
}

static void rmsnorm(double *y, const double *x, const double *g, int T, int C,
		    double eps)
{
	for (int t = 0; t < T; t++) {
		double ms = 0;

		for (int i = 0; i < C; i++)
			ms += x[t * C + i] * x[t * C + i] / C;
		for (int i = 0; i < C; i++)
			y[t * C + i] = x[t * C + i] / sqrt(ms + eps) * g[i];
	}
}

/* Causal attention: q (T, H*D), k and v (T, Hk*D) -> y (T, H*D). */
static void attention(double *y, const double *q, const double *k,
		      const double *v, int T, int H, int Hk, int D)
{
	double *p = xmalloc(T * sizeof(double));

	for (int h = 0; h < H; h++) {
		int kh = h / (H / Hk);

		for (int t = 0; t < T; t++) {
			double max = -INFINITY, sum = 0;

			for (int s = 0; s <= t; s++) {
				double d = 0;

				for (int i = 0; i < D; i++)
					d += q[t * H * D + h * D + i] *
					     k[s * Hk * D + kh * D + i];
				p[s] = d / sqrt(D);
				max = fmax(max, p[s]);
			}
			for (int s = 0; s <= t; s++)
				sum += p[s] = exp(p[s] - max);
			for (int i = 0; i < D; i++) {
				double o = 0;

				for (int s = 0; s <= t; s++)
					o += p[s] / sum *
					     v[s * Hk * D + kh * D + i];
				y[t * H * D + h * D + i] = o;
			}
		}
	}
	free(p);
}

static double *ref_gpt2(const struct ref *r, const int32_t *ids, int T,
			const struct refpart *rp)
{
	int C = (int)r->c.n_embd, F = (int)r->c.n_inner, V = (int)r->c.vocab;
	double *x = xmalloc(T * C * sizeof(double)), *y, *qkv, *q, *k, *v;
	double *a, *f, *wte, *wpe, *logits;
	const char *p = r->pfx;

	y = xmalloc(T * C * sizeof(double));
	a = xmalloc(T * C * sizeof(double));
	qkv = xmalloc(3 * T * C * sizeof(double));
	q = xmalloc(T * C * sizeof(double));
	k = xmalloc(T * C * sizeof(double));
	v = xmalloc(T * C * sizeof(double));
	f = xmalloc(T * F * sizeof(double));
	wte = weight(r, "%swte.weight", p);
	wpe = weight(r, "%swpe.weight", p);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < C; i++)
			x[t * C + i] =
				rp->from ? rp->x0[t * C + i] :
					   wte[ids[t] * C + i] + wpe[t * C + i];
	for (int l = rp->from; l < (int)r->c.n_layer; l++) {
		double *g1 = weight(r, "%sh.%d.ln_1.weight", p, l);
		double *b1 = weight(r, "%sh.%d.ln_1.bias", p, l);
		double *wa = weight(r, "%sh.%d.attn.c_attn.weight", p, l);
		double *ba = weight(r, "%sh.%d.attn.c_attn.bias", p, l);
		double *wp = weight(r, "%sh.%d.attn.c_proj.weight", p, l);
		double *bp = weight(r, "%sh.%d.attn.c_proj.bias", p, l);
		double *g2 = weight(r, "%sh.%d.ln_2.weight", p, l);
		double *b2 = weight(r, "%sh.%d.ln_2.bias", p, l);
		double *wf = weight(r, "%sh.%d.mlp.c_fc.weight", p, l);
		double *bf = weight(r, "%sh.%d.mlp.c_fc.bias", p, l);
		double *wm = weight(r, "%sh.%d.mlp.c_proj.weight", p, l);
		double *bm = weight(r, "%sh.%d.mlp.c_proj.bias", p, l);

		layernorm(y, x, g1, b1, T, C, r->c.eps);
		mm(qkv, y, wa, ba, T, C, 3 * C, false);
		for (int t = 0; t < T; t++)
			for (int i = 0; i < C; i++) {
				q[t * C + i] = qkv[t * 3 * C + i];
				k[t * C + i] = qkv[t * 3 * C + C + i];
				v[t * C + i] = qkv[t * 3 * C + 2 * C + i];
			}
		attention(a, q, k, v, T, (int)r->c.n_head, (int)r->c.n_head,
			  (int)r->c.head_dim);
		mm(y, a, wp, bp, T, C, C, false);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		layernorm(y, x, g2, b2, T, C, r->c.eps);
		mm(f, y, wf, bf, T, C, F, false);
		for (int i = 0; i < T * F; i++) /* GELU, tanh form */
			f[i] = 0.5 * f[i] *
			       (1 + tanh(sqrt(2 / M_PI) *
					 (f[i] + 0.044715 * pow(f[i], 3))));
		mm(y, f, wm, bm, T, F, C, false);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		if (rp->xout && l == rp->stop)
			memcpy(rp->xout, x, T * C * sizeof(double));
		free(g1), free(b1), free(wa), free(ba), free(wp), free(bp);
		free(g2), free(b2), free(wf), free(bf), free(wm), free(bm);
	}
	{
		double *g = weight(r, "%sln_f.weight", p);
		double *b = weight(r, "%sln_f.bias", p);

		layernorm(y, x, g, b, T, C, r->c.eps);
		free(g), free(b);
	}
	logits = xmalloc(T * V * sizeof(double));
	if (r->c.tied) {
		mm(logits, y, wte, NULL, T, C, V, true);
	} else {
		double *head = weight(r, "lm_head.weight");

		mm(logits, y, head, NULL, T, C, V, true);
		free(head);
	}
	free(x), free(y), free(a), free(qkv), free(q), free(k), free(v);
	free(f), free(wte), free(wpe);
	return logits;
}

/* Hugging Face's RoPE: x cos + rotate_half(x) sin on each head. */
static void ref_rope(double *x, int T, int n, int D, double theta)
{
	for (int t = 0; t < T; t++)
		for (int h = 0; h < n; h++) {
			double *p = x + (t * n + h) * D;

			for (int i = 0; i < D / 2; i++) {
				double ang = t * pow(theta, -2.0 * i / D);
				double a = p[i], b = p[i + D / 2];

				p[i] = a * cos(ang) - b * sin(ang);
				p[i + D / 2] = b * cos(ang) + a * sin(ang);
			}
		}
}

static double *ref_llama(const struct ref *r, const int32_t *ids, int T,
			 const struct refpart *rp)
{
	int C = (int)r->c.n_embd, F = (int)r->c.n_inner, V = (int)r->c.vocab;
	int H = (int)r->c.n_head, Hk = (int)r->c.n_kv_head;
	int D = (int)r->c.head_dim;
	double *x = xmalloc(T * C * sizeof(double)), *y, *q, *k, *v, *a;
	double *g, *u, *emb, *logits;
	const char *m = "model.layers";

	y = xmalloc(T * C * sizeof(double));
	a = xmalloc(T * C * sizeof(double));
	q = xmalloc(T * H * D * sizeof(double));
	k = xmalloc(T * Hk * D * sizeof(double));
	v = xmalloc(T * Hk * D * sizeof(double));
	g = xmalloc(T * F * sizeof(double));
	u = xmalloc(T * F * sizeof(double));
	emb = weight(r, "model.embed_tokens.weight");
	for (int t = 0; t < T; t++)
		memcpy(x + t * C, rp->from ? rp->x0 + t * C : emb + ids[t] * C,
		       C * sizeof(double));
	for (int l = rp->from; l < (int)r->c.n_layer; l++) {
		double *n1 = weight(r, "%s.%d.input_layernorm.weight", m, l);
		double *wq = weight(r, "%s.%d.self_attn.q_proj.weight", m, l);
		double *wk = weight(r, "%s.%d.self_attn.k_proj.weight", m, l);
		double *wv = weight(r, "%s.%d.self_attn.v_proj.weight", m, l);
		double *wo = weight(r, "%s.%d.self_attn.o_proj.weight", m, l);
		double *n2 = weight(r, "%s.%d.post_attention_layernorm.weight",
				    m, l);
		double *wg = weight(r, "%s.%d.mlp.gate_proj.weight", m, l);
		double *wu = weight(r, "%s.%d.mlp.up_proj.weight", m, l);
		double *wd = weight(r, "%s.%d.mlp.down_proj.weight", m, l);

		rmsnorm(y, x, n1, T, C, r->c.eps);
		mm(q, y, wq, NULL, T, C, H * D, true);
		mm(k, y, wk, NULL, T, C, Hk * D, true);
		mm(v, y, wv, NULL, T, C, Hk * D, true);
		ref_rope(q, T, H, D, r->c.rope.theta);
		ref_rope(k, T, Hk, D, r->c.rope.theta);
		attention(a, q, k, v, T, H, Hk, D);
		mm(y, a, wo, NULL, T, H * D, C, true);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		rmsnorm(y, x, n2, T, C, r->c.eps);
		mm(g, y, wg, NULL, T, C, F, true);
		mm(u, y, wu, NULL, T, C, F, true);
		for (int i = 0; i < T * F; i++) /* SwiGLU */
			g[i] = g[i] / (1 + exp(-g[i])) * u[i];
		mm(y, g, wd, NULL, T, F, C, true);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		if (rp->xout && l == rp->stop)
			memcpy(rp->xout, x, T * C * sizeof(double));
		free(n1), free(wq), free(wk), free(wv), free(wo), free(n2);
		free(wg), free(wu), free(wd);
	}
	{
		double *n = weight(r, "model.norm.weight");

		rmsnorm(y, x, n, T, C, r->c.eps);
		free(n);
	}
	logits = xmalloc(T * V * sizeof(double));
	if (r->c.tied) {
		mm(logits, y, emb, NULL, T, C, V, true);
	} else {
		double *head = weight(r, "lm_head.weight");

		mm(logits, y, head, NULL, T, C, V, true);
		free(head);
	}
	free(x), free(y), free(a), free(q), free(k), free(v), free(g);
	free(u), free(emb);
	return logits;
}

static double *ref_logits_part(const char *name, const int32_t *ids, int T,
			       struct model_config *cfg,
			       const struct refpart *rp)
{
	char path[256], msg[ST_MSG_LEN];
	struct ref r = { .pfx = "" };
	double *out;

	snprintf(path, sizeof(path), "%s/%s/config.json", dir, name);
	assert_int_equal(model_config_parse(path, &r.c, msg, sizeof(msg)), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(st_set_open(path, &r.set, msg, sizeof(msg)), 0);
	if (st_set_find(r.set, "transformer.wte.weight"))
		r.pfx = "transformer.";
	out = r.c.arch == MODEL_GPT2 ? ref_gpt2(&r, ids, T, rp) :
				       ref_llama(&r, ids, T, rp);
	st_set_close(r.set);
	if (cfg)
		*cfg = r.c;
	return out;
}

static double *ref_logits(const char *name, const int32_t *ids, int T,
			  struct model_config *cfg)
{
	struct refpart whole = { .stop = -1 };

	return ref_logits_part(name, ids, T, cfg, &whole);
}

/* ---------------------------------------------------------------------- */
/* Fixture: the CPU backend, a VMU, a stack, a session and a store */

static int setup(void **state)
{
	return model_fix_setup(state, dir);
}

static struct model_hold *hold(struct model_fix *f, const char *name)
{
	struct model_hold *h;
	char msg[ST_MSG_LEN];

	if (model_open(f->ms, f->s, name, &h, msg, sizeof(msg)))
		fail_msg("%s", msg);
	return h;
}

static double tol(unsigned int dtype)
{
	return dtype == DJINN_DTYPE_F32 ? 1e-5 :
	       dtype == DJINN_DTYPE_F16 ? 5e-3 :
					  4e-2;
}

#define NT 9
static const int32_t prompt[NT] = { 3, 141, 59, 26, 5, 35, 89, 79, 32 };

/* Prefill all NT tokens at once, and 3 then one at a time over the cache:
 * both against the reference, every position. */
static void check_model(void **state, const char *name)
{
	struct model_fix *f = *state;
	struct model_config cfg;
	struct vmu_region_info i0, i1;
	double *want = ref_logits(name, prompt, NT, &cfg), e;
	float *got = xmalloc(NT * cfg.vocab * sizeof(float));
	struct model_hold *h = hold(f, name);
	struct model_ctx *c = ctx(h, 32);
	unsigned int dt = h->m->layout.dtype;

	prefill(f, c, prompt, NT, got);
	e = rel_err(got, want, NT * cfg.vocab);
	printf("  %s: prefill of %d, relative error %.2e (tolerance %.0e)\n",
	       name, NT, e, tol(dt));
	assert_true(e < tol(dt));
	assert_int_equal(model_ctx_len(c), NT);
	/* the last row is what the context keeps for sampling */
	assert_memory_equal(model_ctx_logits(c), got + (NT - 1) * cfg.vocab,
			    cfg.vocab * sizeof(float));
	model_ctx_free(c);

	c = ctx(h, 32);
	prefill(f, c, prompt, 3, got);
	assert_int_equal(vmu_region_info(f->s, model_ctx_cache(c), &i0), 0);
	assert_int_equal(i0.size, 3 * model_ctx_token_bytes(c));
	for (int t = 3; t < NT; t++) {
		prefill(f, c, &prompt[t], 1, got + t * cfg.vocab);
		/* grown in place */
		assert_int_equal(vmu_region_info(f->s, model_ctx_cache(c), &i1),
				 0);
		assert_int_equal(i1.addr, i0.addr);
		assert_int_equal(i1.size, (t + 1) * model_ctx_token_bytes(c));
	}
	e = rel_err(got, want, NT * cfg.vocab);
	printf("  %s: prefill of 3, decode of %d, relative error %.2e\n", name,
	       NT - 3, e);
	assert_true(e < tol(dt));
	model_ctx_free(c);
	model_close(h);
	free(got);
	free(want);
}

static void test_gpt2_f32(void **state)
{
	check_model(state, "gpt2-f32");
}

static void test_gpt2_f16(void **state)
{
	check_model(state, "gpt2-f16");
}

static void test_gpt2_bf16(void **state)
{
	check_model(state, "gpt2-bf16");
}

static void test_llama_f32(void **state)
{
	check_model(state, "llama-f32");
}

static void test_llama_f16(void **state)
{
	check_model(state, "llama-f16");
}

static void test_llama_bf16(void **state)
{
	check_model(state, "llama-bf16");
}

/* Greedy tokens from prefill + decode over the cache equal those from
 * running the whole sequence again at every step. */
static void check_greedy(void **state, const char *name)
{
	struct model_sampling greedy = { .temperature = 0, .top_p = 1 };
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, name);
	struct model_ctx *c = ctx(h, 64);
	int32_t seq[64], out[16];
	char msg[ST_MSG_LEN];
	int n = 16;

	prefill(f, c, prompt, 4, NULL);
	if (model_ctx_decode(c, &f->env, n, &greedy, out, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(model_ctx_len(c), 4 + n);
	model_ctx_free(c);

	memcpy(seq, prompt, 4 * sizeof(int32_t));
	for (int i = 0; i < n; i++) {
		const float *lg;
		int32_t best = 0;

		c = ctx(h, 64);
		prefill(f, c, seq, 4 + i, NULL);
		lg = model_ctx_logits(c);
		for (uint32_t v = 1; v < h->m->cfg.vocab; v++)
			if (lg[v] > lg[best])
				best = (int32_t)v;
		assert_int_equal(out[i], best);
		seq[4 + i] = best;
		model_ctx_free(c);
	}
	/* not one token over and over: the comparison would prove little */
	for (int i = 1; i < n && out[i] == out[0]; i++)
		assert_true(i < n - 1);
	printf("  %s: %d greedy tokens, cache == recompute:", name, n);
	for (int i = 0; i < n; i++)
		printf(" %d", out[i]);
	printf("\n");
	model_close(h);
}

static void test_greedy_gpt2(void **state)
{
	check_greedy(state, "gpt2-f32");
}

static void test_greedy_llama(void **state)
{
	check_greedy(state, "llama-bf16");
	check_greedy(state, "llama-f32");
}

/*
 * A decode step's plan is kept for the steps whose graph is alike: every
 * decode step of two contexts after the first is found planned, at
 * every length, though each context's cache, tokens and length differ. Decoding in turn, each
 * context gets its own tokens: those of recomputing its whole sequence
 * (prefills of every length, planned, crowding the kept plans out).
 */
static void check_plans(struct model_fix *f, const char *name)
{
	struct model_sampling greedy = { .temperature = 0, .top_p = 1 };
	static const int32_t other[4] = { 9, 2, 30, 7 };
	struct model_hold *h = hold(f, name);
	struct model_ctx *c[2] = { ctx(h, 64), ctx(h, 64) };
	int32_t out[2][12], seq[64];
	uint64_t kept0, planned0, kept, planned;
	char msg[ST_MSG_LEN];
	const int n = 12;

	model_plans_stats(h, &kept0, &planned0);
	prefill(f, c[0], prompt, 4, NULL);
	prefill(f, c[1], other, 4, NULL);
	for (int i = 0; i < n; i++)
		for (int k = 0; k < 2; k++)
			if (model_ctx_decode(c[k], &f->env, 1, &greedy,
					     &out[k][i], msg, sizeof(msg)))
				fail_msg("%s", msg);
	model_plans_stats(h, &kept, &planned);
	/* every decode step counted once, and planned once at most (not
	 * at all if an earlier test's plan is kept); prefills plan always
	 * and are not counted */
	assert_int_equal((kept - kept0) + (planned - planned0), 2 * n);
	assert_true(planned - planned0 <= 1);
	for (int k = 0; k < 2; k++) {
		memcpy(seq, k ? other : prompt, 4 * sizeof(int32_t));
		for (int i = 0; i < n; i++) {
			struct model_ctx *r = ctx(h, 64);
			const float *lg;
			int32_t best = 0;

			prefill(f, r, seq, 4 + i, NULL);
			lg = model_ctx_logits(r);
			for (uint32_t v = 1; v < h->m->cfg.vocab; v++)
				if (lg[v] > lg[best])
					best = (int32_t)v;
			assert_int_equal(out[k][i], best);
			seq[4 + i] = best;
			model_ctx_free(r);
		}
		model_ctx_free(c[k]);
	}
	/* the two sequences differ: a plan that kept one context's inputs
	 * would have given the other its tokens */
	assert_memory_not_equal(out[0], out[1], sizeof(out[0]));
	printf("  %s: %d steps planned, %d found planned\n", name,
	       (int)(planned - planned0), (int)(kept - kept0));
	model_close(h);
}

static void test_plans_kept(void **state)
{
	check_plans(*state, "gpt2-f32");
	check_plans(*state, "llama-bf16");
}

/*
 * A pass's plan is kept for a pass with as many contexts sampling their
 * next token and as many on their last step (logits kept), wherever
 * they are in the pass: three contexts decode 2, 3 and 3 tokens
 * together, then 3, 2 and 3, sampling (temperature 1, each its seed),
 * and the second round plans nothing (its second pass has the context
 * on its last step in the middle where the first had it first). Each
 * context's tokens are those it decodes alone.
 */
static void test_pass_plans_by_kind(void **state)
{
	static const uint32_t lens[2][3] = { { 2, 3, 3 }, { 3, 2, 3 } };
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-f32");
	uint64_t kept0, planned0, kept1, planned1, kept, planned;

	model_plans_stats(h, &kept0, &planned0);
	for (int round = 0; round < 2; round++) {
		struct model_ctx *c[3];
		struct model_req q[3], *qs[3];
		int32_t tok[3][3], solo[3][3];
		char msg[3][ST_MSG_LEN];

		for (int i = 0; i < 3; i++) {
			struct model_sampling sp = { .temperature = 1,
						     .top_p = 1,
						     .seed = 100 +
							     (uint64_t)i };

			c[i] = ctx(h, 32);
			prefill(f, c[i], prompt, 3 + (uint32_t)i, NULL);
			if (model_ctx_decode(c[i], &f->env, lens[round][i], &sp,
					     solo[i], msg[0], sizeof(msg[0])))
				fail_msg("context %d alone: %s", i, msg[0]);
			assert_int_equal(model_ctx_reset(c[i]), 0);
			prefill(f, c[i], prompt, 3 + (uint32_t)i, NULL);
			q[i] = (struct model_req){ .c = c[i],
						   .kind = MODEL_REQ_DECODE,
						   .n = lens[round][i],
						   .sp = sp,
						   .r = { .out = tok[i] },
						   .msg = msg[i],
						   .msglen = sizeof(msg[i]) };
			if (model_req_start(&q[i]))
				fail_msg("request %d: %s", i, msg[i]);
			qs[i] = &q[i];
		}
		if (round)
			model_plans_stats(h, &kept1, &planned1);
		while (!q[0].done || !q[1].done || !q[2].done)
			model_pass(qs, 3, &f->env);
		for (int i = 0; i < 3; i++) {
			if (q[i].ret)
				fail_msg("request %d: %s", i, msg[i]);
			assert_memory_equal(tok[i], solo[i],
					    lens[round][i] * sizeof(int32_t));
			model_req_fini(&q[i]);
			model_ctx_free(c[i]);
		}
	}
	model_plans_stats(h, &kept, &planned);
	/* the second round: three passes, each found planned */
	assert_int_equal(planned - planned1, 0);
	assert_int_equal(kept - kept1, 3);
	printf("  passes: %d planned, %d found planned, the second round "
	       "all found\n",
	       (int)(planned - planned0), (int)(kept - kept0));
	model_close(h);
}

/* ---------------------------------------------------------------------- */
/* Failures, forks, sampling */

static void test_refused_steps(void **state)
{
	struct model_sampling sp = { .top_p = 1 };
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-f32");
	int32_t bad[2] = { 1, 256 }, neg = -1, out[8];
	struct vmu_usage u0, u1;
	struct vmu_stats s0, s1;
	char msg[ST_MSG_LEN];
	struct model_ctx *c;
	float *lg = xmalloc(256 * sizeof(float));

	assert_int_equal(model_ctx_new(h, 129, &c, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "1 to 128"));
	assert_int_equal(model_ctx_new(h, 0, &c, msg, sizeof(msg)), -EINVAL);
	c = ctx(h, 4);
	assert_int_equal(model_ctx_decode(c, &f->env, 1, &sp, out, msg,
					  sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "before a prefill"));
	prefill(f, c, prompt, 2, NULL);
	memcpy(lg, model_ctx_logits(c), 256 * sizeof(float));
	vmu_session_usage(f->s, &u0);
	vmu_get_stats(f->env.v, &s0);

	assert_int_equal(model_ctx_prefill(c, &f->env, bad, 2, NULL, msg,
					   sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "token 1 is 256"));
	assert_int_equal(model_ctx_prefill(c, &f->env, &neg, 1, NULL, msg,
					   sizeof(msg)),
			 -EINVAL);
	assert_int_equal(model_ctx_prefill(c, &f->env, prompt, 3, NULL, msg,
					   sizeof(msg)),
			 -ENOSPC);
	assert_non_null(strstr(msg, "context full"));
	assert_int_equal(model_ctx_prefill(c, &f->env, prompt, 0, NULL, msg,
					   sizeof(msg)),
			 -EINVAL);
	sp.top_p = 0;
	assert_int_equal(model_ctx_decode(c, &f->env, 1, &sp, out, msg,
					  sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "top_p"));
	/* nothing changed */
	vmu_session_usage(f->s, &u1);
	vmu_get_stats(f->env.v, &s1);
	assert_int_equal(model_ctx_len(c), 2);
	assert_memory_equal(model_ctx_logits(c), lg, 256 * sizeof(float));
	assert_int_equal(u1.data_bytes, u0.data_bytes);
	assert_int_equal(u1.regions, u0.regions);
	assert_int_equal(s1.seg[VMU_SEG_DATA].entries,
			 s0.seg[VMU_SEG_DATA].entries);

	/* it still runs, to the last token */
	sp.top_p = 1;
	assert_int_equal(
		model_ctx_decode(c, &f->env, 2, &sp, out, msg, sizeof(msg)), 0);
	assert_int_equal(model_ctx_len(c), 4);
	assert_int_equal(model_ctx_reset(c), 0);
	assert_int_equal(model_ctx_len(c), 0);
	assert_null(model_ctx_logits(c));
	model_ctx_free(c);
	model_close(h);
	free(lg);
}

static void test_fork_and_seed(void **state)
{
	struct model_sampling sp = {
		.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 42
	};
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "llama-f32");
	int32_t a[12], b[12], d[12];
	struct model_ctx *c, *k;
	char msg[ST_MSG_LEN];
	bool differ = false;

	c = ctx(h, 32);
	prefill(f, c, prompt, 5, NULL);
	assert_int_equal(model_ctx_fork(c, &f->env, &k, msg, sizeof(msg)), 0);
	assert_int_equal(model_ctx_len(k), 5);
	assert_int_not_equal(model_ctx_cache(k), model_ctx_cache(c));
	/* the same seed on equal contexts: the same tokens */
	assert_int_equal(
		model_ctx_decode(c, &f->env, 12, &sp, a, msg, sizeof(msg)), 0);
	assert_int_equal(
		model_ctx_decode(k, &f->env, 12, &sp, b, msg, sizeof(msg)), 0);
	assert_memory_equal(a, b, sizeof(a));
	model_ctx_free(k);
	/* other seeds: other tokens (for at least one of these seeds) */
	for (uint64_t seed = 1; seed < 4; seed++) {
		k = ctx(h, 32);
		prefill(f, k, prompt, 5, NULL);
		sp.seed = seed;
		assert_int_equal(model_ctx_decode(k, &f->env, 12, &sp, d, msg,
						  sizeof(msg)),
				 0);
		differ |= memcmp(a, d, sizeof(a)) != 0;
		model_ctx_free(k);
	}
	assert_true(differ);
	model_ctx_free(c);
	model_close(h);
}

/*
 * A decode samples each token but the last in the step's graph (SAMPLE),
 * and only the token comes back: the context takes the logits of its
 * last step alone. Its tokens are those of sampling each step's logits
 * on the host with the same stream (model_ctx_step(), model_sample()),
 * greedy and sampled, in f32 and bf16 (logits sampled in the weights'
 * dtype), and the logits it ends with are the same bits.
 */
static void check_sampled_in_graph(struct model_fix *f, const char *name)
{
	static const struct model_sampling sps[] = {
		{ .temperature = 0, .top_p = 1 },
		{ .temperature = 1, .top_p = 1, .seed = 5 },
		{ .temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 6 },
		{ .temperature = 1.5f, .top_p = 0.8f, .seed = 7 },
		{ .temperature = 2, .top_k = 3, .top_p = 1, .seed = 8 },
	};
	struct model_hold *h = hold(f, name);
	uint32_t V = h->m->cfg.vocab;
	bool sampled = false;

	for (size_t k = 0; k < ARRAY_SIZE(sps); k++) {
		struct model_ctx *c = ctx(h, 32), *r = ctx(h, 32);
		int32_t a[12], b[12];
		char msg[ST_MSG_LEN];
		uint64_t rng, kept;

		prefill(f, c, prompt, 5, NULL);
		prefill(f, r, prompt, 5, NULL);
		kept = model_ctx_logits_kept(c);
		if (model_ctx_decode(c, &f->env, 12, &sps[k], a, msg,
				     sizeof(msg)))
			fail_msg("%s: %s", name, msg);
		assert_int_equal(model_ctx_logits_kept(c), kept + 1);
		/* the stream as a decode seeds it */
		rng = sps[k].seed ^ (5ull * 0xd1b54a32d192ed03ull);
		for (int i = 0; i < 12; i++) {
			struct model_step st = { 0 };

			if (model_sample(model_ctx_logits(r), V, &sps[k], &rng,
					 &b[i], msg, sizeof(msg)) ||
			    model_ctx_step(r, &f->env, &b[i], 1, &st, msg,
					   sizeof(msg)))
				fail_msg("%s: %s", name, msg);
		}
		if (memcmp(a, b, sizeof(a)))
			for (int i = 0; i < 12; i++)
				if (a[i] != b[i])
					fail_msg("%s, setting %zu: token %d is "
						 "%d, on the host %d",
						 name, k, i, a[i], b[i]);
		assert_int_equal(model_ctx_len(c), 17);
		assert_memory_equal(model_ctx_logits(c), model_ctx_logits(r),
				    V * sizeof(float));
		for (int i = 1; i < 12 && k; i++)
			sampled |= a[i] != a[0];
		model_ctx_free(c);
		model_ctx_free(r);
	}
	assert_true(sampled); /* not one token over and over */
	model_close(h);
}

static void test_sampled_in_graph(void **state)
{
	check_sampled_in_graph(*state, "gpt2-f32");
	check_sampled_in_graph(*state, "llama-bf16");
}

/*
 * Passes (model_pass()): 60 contexts of a 20-layer model, prompts of
 * different lengths, decoding together, each with sampling settings of
 * its own (greedy and sampled: one SAMPLE node of the pass, a row of
 * parameters each), each context's tokens those it decodes alone: the
 * first pass as one graph; the others on a stack too small for a whole
 * pass's intermediates, refused for memory and run as two graphs of
 * half as many. And a prompt split over passes (grant: chunked prefill)
 * beside them, every row's logits kept, leaves the logits of the prompt
 * run whole.
 */
#define PASS_CTX 60
#define PASS_TOK 3

static struct model_sampling pass_sampling(int i)
{
	static const struct model_sampling kinds[] = {
		{ .temperature = 0, .top_p = 1 },
		{ .temperature = 1, .top_p = 1 },
		{ .temperature = 0.9f, .top_k = 40, .top_p = 0.95f },
		{ .temperature = 1.5f, .top_p = 0.8f },
	};
	struct model_sampling sp = kinds[i % 4];

	sp.seed = (uint64_t)i * 7919;
	return sp;
}

static void test_pass_many(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-deep");
	struct model_ctx *c[PASS_CTX + 1];
	struct model_req q[PASS_CTX + 1], *qs[PASS_CTX + 1];
	int32_t solo[PASS_CTX][PASS_TOK], tok[PASS_CTX][PASS_TOK];
	int32_t ids[PASS_CTX][8], longp[40];
	char msg[PASS_CTX + 1][ST_MSG_LEN];
	float *whole, *chunked;
	uint32_t V = h->m->cfg.vocab;
	unsigned int passes = 0;
	struct model_env tight = f->env;
	struct model_sampling sp;
	struct vmu_stats vs;
	uint64_t graphs;

	whole = xmalloc(40 * V * sizeof(float));
	chunked = xmalloc(40 * V * sizeof(float));
	for (int i = 0; i < 40; i++)
		longp[i] = (i * 7 + 3) % (int32_t)V;
	for (int i = 0; i < PASS_CTX; i++) {
		for (int t = 0; t < 8; t++)
			ids[i][t] = (i * 13 + t * 5 + 1) % (int32_t)V;
		c[i] = ctx(h, 32);
		prefill(f, c[i], ids[i], 1 + i % 8, NULL);
		sp = pass_sampling(i);
		if (model_ctx_decode(c[i], &f->env, PASS_TOK, &sp, solo[i],
				     msg[0], sizeof(msg[0])))
			fail_msg("context %d alone: %s", i, msg[0]);
		assert_int_equal(model_ctx_reset(c[i]), 0);
		prefill(f, c[i], ids[i], 1 + i % 8, NULL);
	}
	/* the long prompt whole, every row's logits */
	c[PASS_CTX] = ctx(h, 64);
	if (model_ctx_prefill(c[PASS_CTX], &f->env, longp, 40, whole, msg[0],
			      sizeof(msg[0])))
		fail_msg("the prompt whole: %s", msg[0]);
	/* every row's logits were the step's: one row stays */
	assert_int_equal(model_ctx_raw_bytes(c[PASS_CTX]), 0);
	assert_int_equal(model_ctx_raw_bytes(c[0]), V * sizeof(float));
	assert_int_equal(model_ctx_reset(c[PASS_CTX]), 0);

	for (int i = 0; i <= PASS_CTX; i++) {
		q[i] = (struct model_req){
			.c = c[i],
			.kind = i < PASS_CTX ? MODEL_REQ_DECODE :
					       MODEL_REQ_PREFILL,
			.n = i < PASS_CTX ? PASS_TOK : 40,
			.tokens = longp,
			.sp = pass_sampling(i),
			.r = { .out = i < PASS_CTX ? tok[i] : NULL,
			       .logits = i < PASS_CTX ? NULL : chunked },
			.msg = msg[i],
			.msglen = sizeof(msg[i])
		};
		if (model_req_start(&q[i]))
			fail_msg("request %d: %s", i, msg[i]);
		qs[i] = &q[i];
	}
	/* the prompt in chunks of 16, 16 and 8 tokens */
	graphs = model_ctx_graphs();
	while (!q[PASS_CTX].done || !q[0].done) {
		q[PASS_CTX].grant = 16;
		model_pass(qs, PASS_CTX + 1, passes ? &tight : &f->env);
		if (passes++)
			continue;
		/* the others on a stack of three quarters of what the
		 * first took (as many rows but the last chunk's 8) */
		vmu_get_stats(f->env.v, &vs);
		assert_int_equal(vmu_stack_create(f->env.v,
						  vs.stack_last_peak * 3 / 4,
						  &tight.st),
				 0);
	}
	assert_int_equal(passes, PASS_TOK);
	/* the first pass one graph, each other one refused for memory,
	 * then two of half the contexts; none alone */
	graphs = model_ctx_graphs() - graphs;
	assert_int_equal(graphs, 1 + (PASS_TOK - 1) * 3);
	vmu_stack_destroy(tight.st);
	for (int i = 0; i <= PASS_CTX; i++) {
		assert_true(q[i].done);
		if (q[i].ret)
			fail_msg("request %d: %s", i, msg[i]);
		model_req_fini(&q[i]);
		if (i < PASS_CTX)
			assert_memory_equal(tok[i], solo[i], sizeof(solo[i]));
	}
	assert_int_equal(model_ctx_len(c[PASS_CTX]), 40);
	for (size_t k = 0; k < 40 * (size_t)V; k++)
		if (fabsf(whole[k] - chunked[k]) > 1e-4f)
			fail_msg("the prompt in chunks: logit %zu %g, whole %g",
				 k, (double)chunked[k], (double)whole[k]);
	printf("  %d contexts of a 20-layer model in %u passes, the last ones "
	       "as halves on a stack of %llu bytes, their tokens alone; a "
	       "prompt of 40 in chunks of 16: its logits\n",
	       PASS_CTX, passes,
	       (unsigned long long)(vs.stack_last_peak * 3 / 4));
	for (int i = 0; i <= PASS_CTX; i++)
		model_ctx_free(c[i]);
	free(whole);
	free(chunked);
	model_close(h);
}

/*
 * One context of a pass whose step cannot have its memory (its tenant's
 * quota is full: the prefill of a fresh context needs its cache's first
 * granule; a step writes nothing else to the tenant's memory, its keys
 * and values going into the cache and its logits to the host) beside
 * three that decode: the pass fails, each step runs again alone, and
 * only that context's request fails (-EDQUOT), its context as it was;
 * the others get their tokens alone.
 */
static void test_pass_fault(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-f32"), *ht;
	struct vmu_session *st;
	struct model_ctx *c[4];
	struct model_req q[4], *qs[4];
	int32_t solo[3][4], tok[4][4];
	char msg[4][ST_MSG_LEN];
	struct vmu_usage u;

	assert_int_equal(vmu_session_create(f->env.v, "tight", &st), 0);
	if (model_open(f->ms, st, "gpt2-f32", &ht, msg[0], sizeof(msg[0])))
		fail_msg("%s", msg[0]);
	for (int i = 0; i < 4; i++) {
		c[i] = ctx(i < 3 ? h : ht, 32);
		if (i < 3)
			prefill(f, c[i], prompt + i, 3 + i, NULL);
	}
	for (int i = 0; i < 3; i++) {
		if (model_ctx_decode(c[i], &f->env, 4,
				     &(struct model_sampling){ .top_p = 1 },
				     solo[i], msg[0], sizeof(msg[0])))
			fail_msg("alone: %s", msg[0]);
		assert_int_equal(model_ctx_reset(c[i]), 0);
		prefill(f, c[i], prompt + i, 3 + i, NULL);
	}
	/* "tight" may hold what it holds now (nothing), no granule more (a
	 * quota of 0 would be none) */
	assert_int_equal(vmu_tenant_usage(f->env.v, "tight", &u), 0);
	assert_int_equal(vmu_tenant_set_quota(f->env.v, "tight",
					      u.data_bytes + u.text_bytes + 1),
			 0);
	for (int i = 0; i < 4; i++) {
		q[i] = (struct model_req){ .c = c[i],
					   .kind = i < 3 ? MODEL_REQ_DECODE :
							   MODEL_REQ_PREFILL,
					   .n = i < 3 ? 4 : 6,
					   .tokens = prompt + 3,
					   .sp = { .top_p = 1 },
					   .r = { .out = tok[i] },
					   .msg = msg[i],
					   .msglen = sizeof(msg[i]) };
		assert_int_equal(model_req_start(&q[i]), 0);
		qs[i] = &q[i];
	}
	for (int k = 0; k < 4; k++)
		model_pass(qs, 4, &f->env);
	for (int i = 0; i < 4; i++) {
		assert_true(q[i].done);
		model_req_fini(&q[i]);
	}
	for (int i = 0; i < 3; i++) {
		if (q[i].ret)
			fail_msg("context %d beside the faulty one: %s", i,
				 msg[i]);
		assert_memory_equal(tok[i], solo[i], sizeof(solo[i]));
	}
	assert_int_equal(q[3].ret, -EDQUOT);
	assert_non_null(strstr(msg[3], "over the tenant's quota"));
	assert_int_equal(q[3].r.nr_out, 0);
	assert_int_equal(model_ctx_len(c[3]), 0); /* as it was */
	printf("  three contexts beside one over its quota: their tokens "
	       "alone; it: %s\n",
	       msg[3]);
	/* room again: it prefills and decodes */
	assert_int_equal(vmu_tenant_set_quota(f->env.v, "tight", 0), 0);
	prefill(f, c[3], prompt + 3, 6, NULL);
	if (model_ctx_decode(c[3], &f->env, 4,
			     &(struct model_sampling){ .top_p = 1 }, tok[3],
			     msg[3], sizeof(msg[3])))
		fail_msg("after the quota: %s", msg[3]);
	for (int i = 0; i < 4; i++)
		model_ctx_free(c[i]);
	model_close(ht);
	model_close(h);
	vmu_session_destroy(st);
}

/* Logits kept on the device as a region of the session (a lazy result):
 * the same values as the host copy; without keep, no region is left. */
static void test_keep_logits(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-bf16");
	struct model_ctx *c = ctx(h, 32);
	struct model_step st = { .all = true, .keep = true };
	float *got = xmalloc(4 * 256 * sizeof(float));
	uint16_t *dev = xmalloc(4 * 256 * sizeof(uint16_t));
	struct vmu_region_info info;
	struct vmu_usage u0, u1;
	char msg[ST_MSG_LEN];

	st.logits = got;
	if (model_ctx_step(c, &f->env, prompt, 4, &st, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_not_equal(st.region, 0);
	assert_int_equal(st.desc.dtype, DJINN_DTYPE_BF16);
	assert_int_equal(st.desc.ndim, 2);
	assert_int_equal(st.desc.dims[0], 4);
	assert_int_equal(st.desc.dims[1], 256);
	assert_int_equal(vmu_region_info(f->s, st.region, &info), 0);
	assert_int_equal(info.size, 4 * 256 * 2);
	assert_int_equal(vmu_region_read(f->s, st.region, 0, dev, info.size),
			 0);
	for (int i = 0; i < 4 * 256; i++) {
		uint32_t x = (uint32_t)dev[i] << 16;
		float v;

		memcpy(&v, &x, sizeof(v));
		assert_true(v == got[i]);
	}
	assert_int_equal(vmu_region_destroy(f->s, st.region), 0);

	/* the last row only; then no keep: nothing left behind */
	st = (struct model_step){ .keep = true };
	if (model_ctx_step(c, &f->env, &prompt[4], 2, &st, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(st.desc.dims[0], 1);
	assert_int_equal(vmu_region_read(f->s, st.region, 0, dev, 512), 0);
	for (int i = 0; i < 256; i++) {
		uint32_t x = (uint32_t)dev[i] << 16;
		float v;

		memcpy(&v, &x, sizeof(v));
		assert_true(v == model_ctx_logits(c)[i]);
	}
	assert_int_equal(vmu_region_destroy(f->s, st.region), 0);
	vmu_session_usage(f->s, &u0);
	st = (struct model_step){ 0 };
	if (model_ctx_step(c, &f->env, &prompt[6], 1, &st, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(st.region, 0);
	vmu_session_usage(f->s, &u1);
	assert_int_equal(u1.regions, u0.regions); /* just the cache */
	assert_int_equal(model_ctx_len(c), 7);
	model_ctx_free(c);
	model_close(h);
	free(got);
	free(dev);
}

static void test_sample(void **state)
{
	static const float lg[6] = { 1.0f, 3.0f, 2.5f, 3.0f, -1.0f, 0.0f };
	struct model_sampling sp = { .top_p = 1 };
	double p[6], sum = 0;
	int counts[6] = { 0 }, N = 200000;
	char msg[ST_MSG_LEN];
	uint64_t rng = 7;
	int32_t t;

	/* greedy: the first largest */
	assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg, sizeof(msg)),
			 0);
	assert_int_equal(t, 1);
	/* top_k 1 or a tiny top_p: greedy too, at any temperature */
	sp.temperature = 5;
	sp.top_k = 1;
	for (int i = 0; i < 100; i++) {
		assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg,
					      sizeof(msg)),
				 0);
		assert_int_equal(t, 1);
	}
	sp.top_k = 0;
	sp.top_p = 1e-6f;
	assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg, sizeof(msg)),
			 0);
	assert_int_equal(t, 1);
	/* top_k 3: only tokens 1, 3, 2 */
	sp.top_p = 1;
	sp.top_k = 3;
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg,
					      sizeof(msg)),
				 0);
		assert_true(t == 1 || t == 2 || t == 3);
	}
	/* the frequencies follow softmax(lg / 0.7) */
	sp.top_k = 0;
	sp.temperature = 0.7f;
	for (int i = 0; i < 6; i++)
		sum += p[i] = exp(lg[i] / 0.7);
	for (int i = 0; i < N; i++) {
		assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg,
					      sizeof(msg)),
				 0);
		counts[t]++;
	}
	for (int i = 0; i < 6; i++)
		assert_true(fabs((double)counts[i] / N - p[i] / sum) < 0.005);
	/* top_p 0.75: tokens 1 and 3 hold 0.39 each, so just them */
	sp.top_p = 0.75f;
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg,
					      sizeof(msg)),
				 0);
		assert_true(t == 1 || t == 3);
	}
	/* the weights: e^x within 1e-6 of libm's down to -87.3, exactly 1
	 * at the top, 0 below -87.34 (float's normal range) */
	assert_true(djinn_sample_weight(3, 3, 1) == 1.0);
	for (double x = -87.3; x <= 0; x += 0.0123) {
		double w = djinn_sample_weight((float)x, 0, 1);
		double want = exp((double)(float)x);

		assert_true(fabs(w - want) <= 1e-6 * want);
	}
	assert_true(djinn_sample_weight(-87.4f, 0, 1) == 0);
	assert_true(djinn_sample_weight(-88, 0, 1) == 0);
	assert_true(djinn_sample_weight(-INFINITY, 0, 1) == 0);
	/* temperatures at float's ends: the argument does not overflow */
	{
		static const float tie[2] = { 1, 1 },
				   far[2] = { 2e38f, -2e38f };
		struct model_sampling ex = { .temperature = 1e-40f,
					     .top_p = 1 };
		int c2[2] = { 0 }, draws = 20000;

		/* a denormal T: two tied best, each half */
		for (int i = 0; i < draws; i++) {
			assert_int_equal(model_sample(tie, 2, &ex, &rng, &t,
						      msg, sizeof(msg)),
					 0);
			c2[t]++;
		}
		assert_true(c2[0] > draws * 0.45 && c2[1] > draws * 0.45);
		/* logits 4e38 apart at T 1e38: token 1 is e^-4 / (1 + e^-4),
		 * 0.018, of them */
		ex.temperature = 1e38f;
		c2[0] = c2[1] = 0;
		for (int i = 0; i < draws; i++) {
			assert_int_equal(model_sample(far, 2, &ex, &rng, &t,
						      msg, sizeof(msg)),
					 0);
			c2[t]++;
		}
		assert_true(c2[1] > draws * 0.012 && c2[1] < draws * 0.024);
		assert_true(fabs(djinn_sample_weight(-2e38f, 2e38f, 1e-38) -
				 exp(-4.0)) < 1e-6);
	}
	/* bad parameters and logits */
	sp.temperature = -1;
	assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg, sizeof(msg)),
			 -EINVAL);
	sp.temperature = NAN;
	assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg, sizeof(msg)),
			 -EINVAL);
	sp.temperature = 1;
	sp.top_p = 1.5f;
	assert_int_equal(model_sample(lg, 6, &sp, &rng, &t, msg, sizeof(msg)),
			 -EINVAL);
	sp.top_p = 1;
	{
		float nan[2] = { 0, NAN };

		assert_int_equal(model_sample(nan, 2, &sp, &rng, &t, msg,
					      sizeof(msg)),
				 -EINVAL);
		assert_non_null(strstr(msg, "logit 1 is NaN"));
	}
}

/* The sampler's definition, with a sort: the candidates in order
 * (larger logit, then lower id), the first top_k, the fewest first of
 * those whose mass reaches top_p of theirs, the draw walking the kept
 * ones in id order. */
struct ref_cand {
	float logit;
	int32_t id;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref_cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : 1;
}

static int32_t ref_sample(const float *lg, uint32_t V,
			  const struct model_sampling *sp, uint64_t *rng)
{
	struct ref_cand *c = xmalloc(V * sizeof(*c));
	double *w = calloc(V, sizeof(*w)), sum = 0, cum = 0, r;
	uint64_t z;
	uint32_t k = sp->top_k && sp->top_k < V ? sp->top_k : V, m;
	int32_t out;

	assert_non_null(w);
	for (uint32_t i = 0; i < V; i++)
		c[i] = (struct ref_cand){ lg[i], (int32_t)i };
	qsort(c, V, sizeof(*c), ref_cmp);
	/* the weights as the sampler computes them: the selection and the
	 * draw are what this checks */
	for (uint32_t j = 0; j < k; j++)
		sum += djinn_sample_weight(c[j].logit, c[0].logit,
					   1.0 / sp->temperature);
	for (m = 0; m < k;) {
		double x = djinn_sample_weight(c[m].logit, c[0].logit,
					       1.0 / sp->temperature);

		w[c[m++].id] = x;
		cum += x;
		if (sp->top_p < 1 && cum >= sp->top_p * sum)
			break;
	}
	cum = 0;
	for (uint32_t i = 0; i < V; i++)
		cum += w[i];
	z = (*rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	r = (double)(z >> 11) * 0x1p-53 * cum;
	out = c[0].id;
	for (uint32_t i = 0; i < V; i++) {
		if (r < w[i]) {
			out = (int32_t)i;
			break;
		}
		r -= w[i];
	}
	free(c);
	free(w);
	return out;
}

/*
 * model_sample() selects without sorting; it must pick what the sorted
 * definition picks, token for token, on the same stream (the two sum
 * the same weights in other orders: only where a mass lands within
 * rounding of the top_p cut or of the draw could they part, and these
 * logits have no such case): logits spread
 * wide and narrow, and logits of few distinct values, so that ties sit
 * at the top-k and top-p cuts and are broken by id. Then the
 * infinities: +inf is drawn as greedy would, all -inf gives token 0,
 * one draw taken either way.
 */
static void test_sample_reference(void **state)
{
	static const struct model_sampling set[] = {
		{ .temperature = 1, .top_p = 1 },
		{ .temperature = 0.8f, .top_k = 40, .top_p = 1 },
		{ .temperature = 1.3f, .top_p = 0.9f },
		{ .temperature = 0.7f, .top_k = 50, .top_p = 0.95f },
		{ .temperature = 2, .top_k = 1, .top_p = 1 },
		{ .temperature = 0.5f, .top_k = 999, .top_p = 0.5f },
		{ .temperature = 3, .top_k = 4000, .top_p = 0.99f },
		{ .temperature = 1, .top_p = 1e-6f },
		{ .temperature = 1, .top_p = 0.5f },
	};
	const uint32_t V = 5000;
	float *lg = xmalloc(V * sizeof(*lg));
	char msg[ST_MSG_LEN];
	uint64_t x = 3, rng, ref;
	int32_t t;

	(void)state;
	for (int shape = 0; shape < 4; shape++) {
		for (uint32_t i = 0; i < V; i++) {
			double u = (double)((x = x * 6364136223846793005ull +
						 1442695040888963407ull) >>
					    11) *
				   0x1p-53;

			/* wide, narrow, eight values only, and one (half
			 * of them is then exactly top_p 0.5's mass) */
			lg[i] = shape == 0 ? (float)(20 * u - 10) :
				shape == 1 ? (float)(0.05 * u) :
				shape == 2 ? (float)(int)(8 * u) * 0.5f :
					     1.5f;
		}
		/* greedy: the first largest, whichever block of the scan's
		 * lanes it is in */
		{
			struct model_sampling g = { .top_p = 1 };
			uint32_t first = 0;

			for (uint32_t i = 1; i < V; i++)
				if (lg[i] > lg[first])
					first = i;
			assert_int_equal(model_sample(lg, V, &g, &rng, &t, msg,
						      sizeof(msg)),
					 0);
			assert_int_equal(t, (int32_t)first);
		}
		for (size_t k = 0; k < sizeof(set) / sizeof(set[0]); k++) {
			for (uint64_t seed = 0; seed < 64; seed++) {
				rng = ref = seed * 977;
				assert_int_equal(model_sample(lg, V, &set[k],
							      &rng, &t, msg,
							      sizeof(msg)),
						 0);
				assert_int_equal(t, ref_sample(lg, V, &set[k],
							       &ref));
				assert_true(rng == ref);
			}
		}
	}
	/* a NaN anywhere is named, in a lane's block or in the tail */
	for (uint32_t at = 0; at < V; at += 1237) {
		float keep = lg[at];
		char want[32];

		lg[at] = NAN;
		assert_int_equal(model_sample(lg, V, &set[0], &rng, &t, msg,
					      sizeof(msg)),
				 -EINVAL);
		snprintf(want, sizeof(want), "logit %u is NaN", at);
		assert_string_equal(msg, want);
		lg[at] = keep;
	}
	lg[V - 1] = NAN;
	assert_int_equal(model_sample(lg, V, &set[0], &rng, &t, msg,
				      sizeof(msg)),
			 -EINVAL);
	lg[V - 1] = 0;
	/* +inf: greedy's token, at any setting; all -inf: token 0 */
	lg[17] = INFINITY;
	lg[4000] = INFINITY;
	for (size_t k = 0; k < sizeof(set) / sizeof(set[0]); k++) {
		rng = ref = 5;
		assert_int_equal(model_sample(lg, V, &set[k], &rng, &t, msg,
					      sizeof(msg)),
				 0);
		assert_int_equal(t, 17);
		ref += 0x9e3779b97f4a7c15ull;
		assert_true(rng == ref);
	}
	for (uint32_t i = 0; i < V; i++)
		lg[i] = -INFINITY;
	assert_int_equal(
		model_sample(lg, V, &set[0], &rng, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t, 0);
	free(lg);
}

/* ---------------------------------------------------------------------- */
/* Breakpoints and steering */

static void regions_now(struct model_fix *f, uint64_t *regions, uint64_t *bytes)
{
	struct vmu_usage u;

	vmu_session_usage(f->s, &u);
	*regions = u.regions;
	*bytes = u.data_bytes;
}

/* Resume @c until its decode is done; the pauses it made. */
static uint32_t resume_all(struct model_fix *f, struct model_ctx *c,
			   struct model_run *r, uint32_t layer)
{
	char msg[ST_MSG_LEN];
	uint32_t pauses = 0;

	while (r->paused) {
		struct model_pause_info pi;

		pauses++;
		assert_true(model_ctx_paused(c, &pi));
		assert_int_equal(pi.layer, layer);
		assert_int_equal(r->layer, layer);
		assert_int_equal(pi.T, 1);
		assert_true(pi.decode);
		assert_int_equal(pi.done + 1, r->nr_out);
		assert_int_equal(pi.done, pauses - 1);
		if (model_ctx_resume(c, &f->env, r, msg, sizeof(msg)))
			fail_msg("resume: %s", msg);
	}
	assert_false(model_ctx_paused(c, NULL));
	return pauses;
}

/*
 * With a breakpoint at every layer in turn and nothing changed: the
 * prefill's logits bit for bit, then the greedy and the seeded tokens of
 * a decode that pauses at every token, equal a run without breaks.
 */
static void check_break_same(struct model_fix *f, const char *name)
{
	const struct model_sampling sps[2] = {
		{ .temperature = 0, .top_p = 1 },
		{ .temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = 9 },
	};
	struct model_hold *h = hold(f, name);
	uint32_t V = h->m->cfg.vocab, L = h->m->cfg.n_layer;
	float *want = xmalloc(5 * V * sizeof(float));
	float *got = xmalloc(5 * V * sizeof(float));
	int32_t ta[10], tb[10];
	char msg[ST_MSG_LEN];

	for (int k = 0; k < 2; k++) {
		struct model_ctx *a = ctx(h, 32);

		prefill(f, a, prompt, 5, want);
		if (model_ctx_decode(a, &f->env, 10, &sps[k], ta, msg,
				     sizeof(msg)))
			fail_msg("%s", msg);
		model_ctx_free(a);
		for (uint32_t l = 0; l < L; l++) {
			struct model_ctx *b = ctx(h, 32);
			struct model_run r = { .brk = l + 1, .logits = got };
			struct model_pause_info pi;

			memset(got, 0, 5 * V * sizeof(float));
			if (model_ctx_run_prefill(b, &f->env, prompt, 5, &r,
						  msg, sizeof(msg)))
				fail_msg("%s", msg);
			assert_true(r.paused);
			assert_int_equal(r.layer, l);
			assert_true(model_ctx_paused(b, &pi));
			assert_int_equal(pi.T, 5);
			assert_false(pi.decode);
			assert_int_equal(pi.desc.ndim, 2);
			assert_int_equal(pi.desc.dims[0], 5);
			assert_int_equal(pi.desc.dims[1], h->m->cfg.n_embd);
			assert_int_equal(pi.desc.dtype, h->m->layout.dtype);
			assert_int_equal(model_ctx_len(b), 0);
			if (model_ctx_resume(b, &f->env, &r, msg, sizeof(msg)))
				fail_msg("%s", msg);
			assert_false(r.paused);
			assert_int_equal(model_ctx_len(b), 5);
			assert_memory_equal(got, want, 5 * V * sizeof(float));

			r = (struct model_run){ .brk = l + 1, .out = tb };
			if (model_ctx_run_decode(b, &f->env, 10, &sps[k], &r,
						 msg, sizeof(msg)))
				fail_msg("%s", msg);
			assert_int_equal(r.nr_out, 1);
			assert_int_equal(resume_all(f, b, &r, l), 10);
			assert_int_equal(r.nr_out, 10);
			assert_int_equal(model_ctx_len(b), 15);
			assert_memory_equal(ta, tb, sizeof(ta));
			model_ctx_free(b);
		}
	}
	printf("  %s: breaks after each of %u layers: the same logits and "
	       "tokens\n",
	       name, L);
	model_close(h);
	free(want);
	free(got);
}

static void test_break_same(void **state)
{
	check_break_same(*state, "gpt2-f32");
	check_break_same(*state, "gpt2-f16");
	check_break_same(*state, "llama3-bf16");
}

/*
 * Steering: the hidden state after layer 0 is the reference's; replaced
 * by a known tensor, the logits that follow are what the reference
 * computes from that tensor through the remaining layers.
 */
static void check_steer(struct model_fix *f, const char *name, uint32_t layer)
{
	struct model_hold *h = hold(f, name);
	struct model_config cfg = h->m->cfg;
	uint32_t C = cfg.n_embd, V = cfg.vocab;
	unsigned int dt = h->m->layout.dtype;
	struct refpart rp = { .stop = (int)layer };
	double *x = xmalloc(NT * C * sizeof(double)), *want, *base, e;
	float *xf = xmalloc(NT * C * sizeof(float));
	float *got = xmalloc(NT * V * sizeof(float));
	struct model_run r = { .brk = layer + 1, .logits = got };
	struct djinn_tensor_desc d;
	struct vmu_region_info info;
	struct model_pause_info pi;
	struct model_ctx *c = ctx(h, 32);
	char msg[ST_MSG_LEN];
	uint64_t reg, copy;

	assert_int_equal(dt, DJINN_DTYPE_F32);
	rp.xout = x;
	base = ref_logits_part(name, prompt, NT, NULL, &rp);
	if (model_ctx_run_prefill(c, &f->env, prompt, NT, &r, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_true(model_ctx_paused(c, &pi));
	/* the hidden state is the reference's, read through a copy */
	assert_int_equal(
		model_ctx_hidden_copy(c, &f->env, &copy, msg, sizeof(msg)), 0);
	assert_int_equal(
		vmu_region_read(f->s, copy, 0, xf, NT * C * sizeof(float)), 0);
	assert_int_equal(vmu_region_destroy(f->s, copy), 0);
	for (uint32_t i = 0; i < NT * C; i++)
		assert_true(fabs(xf[i] - x[i]) < 1e-4 * (1 + fabs(x[i])));

	/* the known tensor: the state rotated between tokens, scaled, and
	 * a wave added, so that nothing of the original order survives */
	for (uint32_t t = 0; t < NT; t++)
		for (uint32_t i = 0; i < C; i++)
			xf[t * C + i] =
				(float)(1.5 * x[((t + 3) % NT) * C + i] +
					sin(0.3 * i + t));
	for (uint32_t i = 0; i < NT * C; i++)
		x[i] = xf[i];
	rp = (struct refpart){ .from = (int)layer + 1, .x0 = x, .stop = -1 };
	want = ref_logits_part(name, prompt, NT, NULL, &rp);

	/* a wrong shape is refused, the state stays */
	assert_int_equal(vmu_region_create(f->s, NT * C * 4, &reg), 0);
	assert_int_equal(vmu_region_resize(f->s, reg, NT * C * 4, NULL), 0);
	assert_int_equal(vmu_region_write(f->s, reg, 0, xf, NT * C * 4), 0);
	assert_int_equal(vmu_region_pin(f->s, reg, NULL, &info), 0);
	d = pi.desc;
	d.dims[0] = NT - 1;
	assert_int_equal(model_ctx_steer(c, &f->env, info.addr, &d, msg,
					 sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "the hidden state is (9, "));
	d = pi.desc;
	d.dtype = DJINN_DTYPE_F16;
	assert_int_equal(model_ctx_steer(c, &f->env, info.addr, &d, msg,
					 sizeof(msg)),
			 -EINVAL);
	assert_int_equal(model_ctx_steer(c, &f->env, info.addr, &pi.desc, msg,
					 sizeof(msg)),
			 0);
	assert_int_equal(vmu_region_unpin(f->s, reg), 0);
	assert_int_equal(vmu_region_destroy(f->s, reg), 0);
	if (model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)))
		fail_msg("%s", msg);
	e = rel_err(got, want, NT * V);
	printf("  %s: steered after layer %u: relative error %.2e against "
	       "the reference; unsteered logits are %.2e away\n",
	       name, layer, e, rel_err(got, base, NT * V));
	assert_true(e < tol(dt));
	/* it did change them, far beyond the tolerance */
	assert_true(rel_err(got, base, NT * V) > 100 * tol(dt));
	assert_memory_equal(model_ctx_logits(c), got + (NT - 1) * V,
			    V * sizeof(float));
	model_ctx_free(c);
	model_close(h);
	free(x), free(xf), free(got), free(want), free(base);
}

static void test_steer(void **state)
{
	check_steer(*state, "gpt2-f32", 0);
	check_steer(*state, "llama-f32", 0);
	check_steer(*state, "llama-f32", 1); /* the head alone follows */
}

/* Paused: other steps and forks are -EBUSY; reset and free abandon the
 * step, leaving no region; a decode's finished tokens stay. */
static void test_break_refused(void **state)
{
	struct model_sampling sp = { .top_p = 1 };
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "gpt2-f32");
	struct model_run r = { .brk = 2 };
	uint64_t reg0, bytes0, reg1, bytes1;
	struct model_ctx *c = ctx(h, 32), *k;
	int32_t out[4];
	char msg[ST_MSG_LEN];

	regions_now(f, &reg0, &bytes0);
	assert_int_equal(model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)),
			 -EBUSY);
	assert_non_null(strstr(msg, "not paused"));
	r.brk = 3; /* two layers: 0 and 1 */
	assert_int_equal(model_ctx_run_prefill(c, &f->env, prompt, 3, &r, msg,
					       sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "layers 0 to 1"));
	assert_false(model_ctx_paused(c, NULL));
	r.brk = 1;
	assert_int_equal(model_ctx_run_decode(c, &f->env, 2, &sp, &r, msg,
					      sizeof(msg)),
			 -EINVAL); /* no prefill yet */
	assert_int_equal(model_ctx_run_prefill(c, &f->env, prompt, 3, &r, msg,
					       sizeof(msg)),
			 0);
	assert_true(r.paused);
	regions_now(f, &reg1, &bytes1);
	assert_int_equal(reg1, reg0 + 2); /* the hidden state, the keys */
	assert_int_equal(model_ctx_prefill(c, &f->env, prompt, 1, NULL, msg,
					   sizeof(msg)),
			 -EBUSY);
	assert_non_null(strstr(msg, "paused after layer 0"));
	assert_int_equal(model_ctx_decode(c, &f->env, 1, &sp, out, msg,
					  sizeof(msg)),
			 -EBUSY);
	assert_int_equal(model_ctx_fork(c, &f->env, &k, msg, sizeof(msg)),
			 -EBUSY);
	assert_int_equal(model_ctx_run_prefill(c, &f->env, prompt, 1, &r, msg,
					       sizeof(msg)),
			 -EBUSY);
	assert_true(model_ctx_paused(c, NULL)); /* still */
	/* reset abandons it */
	assert_int_equal(model_ctx_reset(c), 0);
	assert_false(model_ctx_paused(c, NULL));
	regions_now(f, &reg1, &bytes1);
	assert_int_equal(reg1, reg0);
	assert_int_equal(bytes1, bytes0);
	/* a decode abandoned at its third token keeps two */
	prefill(f, c, prompt, 3, NULL);
	r = (struct model_run){ .brk = 1, .out = out };
	assert_int_equal(model_ctx_run_decode(c, &f->env, 4, &sp, &r, msg,
					      sizeof(msg)),
			 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(
			model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)), 0);
	assert_true(r.paused);
	assert_int_equal(r.nr_out, 3);
	model_ctx_abandon(c);
	assert_int_equal(model_ctx_len(c), 5);
	/* and it decodes on from there; then free while paused */
	r = (struct model_run){ .brk = 2, .out = out };
	assert_int_equal(model_ctx_run_decode(c, &f->env, 1, &sp, &r, msg,
					      sizeof(msg)),
			 0);
	assert_true(r.paused);
	assert_int_equal(r.layer, 1);
	model_ctx_free(c);
	regions_now(f, &reg1, &bytes1);
	assert_int_equal(reg1, reg0 - 1); /* the cache went too */
	model_close(h);
}

/* ---------------------------------------------------------------------- */
/* Grouped-query attention, as an op */

/*
 * Where djinnd's own graph puts its outputs (struct graph_place): one
 * written at an address in a region the caller owns, one copied to the
 * host, one in a new region as a client's; an input staged from host
 * memory. Only the last makes a region, and its bytes count in the
 * admission; the others' are exact.
 */
static void test_places(void **state)
{
	struct model_fix *f = *state;
	const float x[4] = { 1, -2, 3.5f, 8 };
	float host[4] = { 0 }, into[4] = { 0 }, kept[4] = { 0 };
	uint64_t dims[1] = { 4 }, own, before;
	struct djinn_tensor_desc od[3];
	struct djinn_p_scalar p2 = { .alpha = 2 }, p3 = { .alpha = 3 },
			      p4 = { .alpha = 4 };
	struct vmu_region_info info;
	struct graph_result res;
	struct gbuild *g = gb_new();
	struct vmu_usage u;
	char msg[ST_MSG_LEN];
	uint32_t in;

	assert_non_null(g);
	assert_int_equal(vmu_region_create(f->s, sizeof(into), &own), 0);
	assert_int_equal(vmu_region_resize(f->s, own, sizeof(into), NULL), 0);
	assert_int_equal(vmu_region_pin(f->s, own, NULL, &info), 0);
	vmu_session_usage(f->s, &u);
	before = u.regions;

	in = gb_host_input(g, x, DJINN_DTYPE_F32, 1, dims);
	gb_output_place(g, gb_op(g, DJINN_GOP_SCALE, 1, &in, &p2, sizeof(p2)),
			DJINN_RES_OUTPUT, 0, host);
	gb_output_place(g, gb_op(g, DJINN_GOP_SCALE, 1, &in, &p3, sizeof(p3)),
			DJINN_RES_OUTPUT, info.addr, NULL);
	gb_output(g, gb_op(g, DJINN_GOP_SCALE, 1, &in, &p4, sizeof(p4)),
		  DJINN_RES_OUTPUT);
	if (gb_run(g, &f->env, f->s, &res, od, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(res.regions[0], 0);
	assert_int_equal(res.regions[1], 0);
	assert_true(res.regions[2] != 0);
	/* one granule admitted for outputs (the stack's bytes are few) */
	assert_true(res.peak_bytes >= vmu_round(f->env.v, 1));
	assert_true(res.peak_bytes < 2 * vmu_round(f->env.v, 1));
	vmu_session_usage(f->s, &u);
	assert_int_equal(u.regions, before + 1);
	assert_int_equal(vmu_region_read(f->s, own, 0, into, sizeof(into)), 0);
	assert_int_equal(vmu_region_read(f->s, res.regions[2], 0, kept,
					 sizeof(kept)),
			 0);
	for (int i = 0; i < 4; i++) {
		assert_true(host[i] == 2 * x[i]);
		assert_true(into[i] == 3 * x[i]);
		assert_true(kept[i] == 4 * x[i]);
	}
	assert_int_equal(od[0].dims[0], 4);
	vmu_region_destroy(f->s, res.regions[2]);
	vmu_region_unpin(f->s, own);
	vmu_region_destroy(f->s, own);
	gb_free(g);
}

static void test_gqa_attention(void **state)
{
	enum { H = 4, Hk = 2, T = 3, S = 5, D = 8 };
	struct model_fix *f = *state;
	float q[H * T * D], k[Hk * S * D], v[Hk * S * D], out[H * T * D];
	uint64_t hq, hk, hv, aq, ak, av, dq[4] = { 1, H, T, D };
	uint64_t dk[4] = { 1, Hk, S, D };
	struct djinn_p_attention pa = { .causal = 1 };
	struct djinn_tensor_desc od;
	struct vmu_region_info info;
	struct graph_result res;
	struct gbuild *g = gb_new();
	char msg[ST_MSG_LEN];
	uint32_t ins[3];
	double err = 0;

	assert_non_null(g);
	for (int i = 0; i < H * T * D; i++)
		q[i] = sinf((float)i * 0.37f);
	for (int i = 0; i < Hk * S * D; i++) {
		k[i] = cosf((float)i * 0.21f);
		v[i] = sinf((float)i * 0.11f + 1);
	}
	assert_int_equal(vmu_region_create(f->s, sizeof(q), &hq), 0);
	assert_int_equal(vmu_region_create(f->s, sizeof(k), &hk), 0);
	assert_int_equal(vmu_region_create(f->s, sizeof(v), &hv), 0);
	assert_int_equal(vmu_region_resize(f->s, hq, sizeof(q), NULL), 0);
	assert_int_equal(vmu_region_resize(f->s, hk, sizeof(k), NULL), 0);
	assert_int_equal(vmu_region_resize(f->s, hv, sizeof(v), NULL), 0);
	assert_int_equal(vmu_region_write(f->s, hq, 0, q, sizeof(q)), 0);
	assert_int_equal(vmu_region_write(f->s, hk, 0, k, sizeof(k)), 0);
	assert_int_equal(vmu_region_write(f->s, hv, 0, v, sizeof(v)), 0);
	assert_int_equal(vmu_region_pin(f->s, hq, NULL, &info), 0);
	aq = info.addr;
	assert_int_equal(vmu_region_pin(f->s, hk, NULL, &info), 0);
	ak = info.addr;
	assert_int_equal(vmu_region_pin(f->s, hv, NULL, &info), 0);
	av = info.addr;
	ins[0] = gb_input(g, aq, DJINN_DTYPE_F32, 4, dq);
	ins[1] = gb_input(g, ak, DJINN_DTYPE_F32, 4, dk);
	ins[2] = gb_input(g, av, DJINN_DTYPE_F32, 4, dk);
	gb_output(g, gb_op(g, DJINN_GOP_ATTENTION, 3, ins, &pa, sizeof(pa)),
		  DJINN_RES_OUTPUT);
	if (gb_run(g, &f->env, f->s, &res, &od, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(od.dims[1], H);
	assert_int_equal(
		vmu_region_read(f->s, res.regions[0], 0, out, sizeof(out)), 0);
	/* reference: head h reads kv head h / 2; query t sees s <= t + 2 */
	for (int h = 0; h < H; h++)
		for (int t = 0; t < T; t++) {
			double sc[S], mx = -INFINITY, sum = 0;
			int kh = h / (H / Hk), n = t + S - T + 1;

			for (int s = 0; s < n; s++) {
				sc[s] = 0;
				for (int i = 0; i < D; i++)
					sc[s] +=
						(double)q[(h * T + t) * D + i] *
						k[(kh * S + s) * D + i];
				sc[s] /= sqrt(D);
				mx = fmax(mx, sc[s]);
			}
			for (int s = 0; s < n; s++)
				sum += sc[s] = exp(sc[s] - mx);
			for (int i = 0; i < D; i++) {
				double o = 0;

				for (int s = 0; s < n; s++)
					o += sc[s] / sum *
					     v[(kh * S + s) * D + i];
				err = fmax(err,
					   fabs(o - out[(h * T + t) * D + i]));
			}
		}
	assert_true(err < 1e-5);
	vmu_region_destroy(f->s, res.regions[0]);

	/* 3 key heads for 4 query heads: refused, naming the node */
	dk[1] = 3;
	g->nr_in = g->nr_nodes = g->nr_out = 0;
	ins[0] = gb_input(g, aq, DJINN_DTYPE_F32, 4, dq);
	ins[1] = gb_input(g, ak, DJINN_DTYPE_F32, 4, dk);
	ins[2] = gb_input(g, av, DJINN_DTYPE_F32, 4, dk);
	gb_output(g, gb_op(g, DJINN_GOP_ATTENTION, 3, ins, &pa, sizeof(pa)),
		  DJINN_RES_OUTPUT);
	assert_int_equal(gb_run(g, &f->env, f->s, &res, &od, msg, sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "H differs: q 4, k 3, v 3"));
	for (int i = 0; i < 3; i++) {
		uint64_t hd = i == 0 ? hq : i == 1 ? hk : hv;

		vmu_region_unpin(f->s, hd);
		vmu_region_destroy(f->s, hd);
	}
	gb_free(g);
}

static int group_setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/djinn-mf-XXXXXX");
	if (model_tmpdir(dir))
		return -1;
	run_cmd("python3 scripts/mkmodel.py --seed 11 --layers 2 %s/gpt2-f32",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 12 --dtype f16 --untied "
		"--prefix transformer. %s/gpt2-f16",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 13 --dtype bf16 %s/gpt2-bf16",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 14 --arch llama --kv-heads 2 "
		"%s/llama-f32",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 15 --arch llama --dtype f16 "
		"--tied %s/llama-f16",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 16 --arch llama --dtype bf16 "
		"--kv-heads 1 --shards 2 %s/llama-bf16",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 17 --arch llama --dtype bf16 "
		"--layers 3 --kv-heads 2 %s/llama3-bf16",
		dir);
	run_cmd("python3 scripts/mkmodel.py --seed 18 --layers 20 --embd 32 "
		"--heads 2 --vocab 96 --ctx 64 %s/gpt2-deep",
		dir);
	return 0;
}

/* The vocabulary's logits at @off in the logits arena @fd, into @out. */
static void arena_read(int fd, uint64_t off, float *out, uint32_t V)
{
	assert_int_equal(pread(fd, out, V * sizeof(float), (off_t)off),
			 (ssize_t)(V * sizeof(float)));
}

/* A record @seq naming @c, in force at once: what it names. */
static struct model_ctx_saved record(struct model_ctx *c, uint64_t seq)
{
	struct model_ctx_saved sv;

	model_journal_begin(seq);
	assert_int_equal(model_ctx_journal(c, &sv), 0);
	model_journal_done(seq);
	return sv;
}

/*
 * The crash journal's view of a context (runtime.h, "The crash journal"):
 * with the logits arena on, a record names the context as its last
 * request left it, and what it names stays as it was while the context
 * steps on: its logits in the arena (read through the arena's file) and
 * its length. A truncation below what the record in force names makes
 * the next step wait for a newer record (-EAGAIN after 2 s without one).
 * A freed context's logits go to no other context until a record begun
 * after the free is in force. (Last: the arena stays on for the
 * process.)
 */
static void test_journal_pins(void **state)
{
	struct model_fix *f = *state;
	struct model_hold *h = hold(f, "llama-f32");
	uint32_t V = h->m->cfg.vocab;
	float *want = xmalloc(V * sizeof(float)), *got = xmalloc(V * 4);
	struct model_sampling sp = { .top_p = 1.0f, .seed = 7 };
	struct model_ctx_saved sv, s2, s3;
	struct model_ctx *c, *c2, *c3;
	char msg[ST_MSG_LEN];
	int32_t tok[6];
	int fd = model_journal_arena();

	assert_true(fd >= 0);
	c = ctx(h, 32);
	prefill(f, c, prompt, 5, NULL);
	memcpy(want, model_ctx_logits(c), V * sizeof(float));
	sv = record(c, 1);
	assert_int_equal(sv.len, 5);
	assert_true(sv.have_logits);
	assert_false(sv.paused);
	/* six requests on, what record 1 names is as it was */
	for (int i = 0; i < 6; i++)
		assert_int_equal(model_ctx_decode(c, &f->env, 1, &sp, tok + i,
						  msg, sizeof(msg)),
				 0);
	arena_read(fd, sv.logits_off, got, V);
	assert_memory_equal(got, want, V * sizeof(float));
	assert_memory_not_equal(model_ctx_logits(c), want, V * sizeof(float));
	sv = record(c, 2);
	assert_int_equal(sv.len, 11);
	arena_read(fd, sv.logits_off, got, V);
	assert_memory_equal(got, model_ctx_logits(c), V * sizeof(float));

	/* truncated to 3 under record 2 (11 tokens): no step until a
	 * record of the truncation is in force */
	assert_int_equal(model_ctx_truncate(c, 3, msg, sizeof(msg)), 0);
	assert_int_equal(model_ctx_prefill(c, &f->env, prompt + 3, 1, NULL, msg,
					   sizeof(msg)),
			 -EAGAIN);
	assert_non_null(strstr(msg, "has not recorded the context's "
				    "truncation to 3 tokens"));
	assert_int_equal(model_ctx_len(c), 3);
	sv = record(c, 3);
	assert_int_equal(sv.len, 3);
	assert_false(sv.have_logits);
	prefill(f, c, prompt + 3, 2, NULL);
	assert_int_equal(model_ctx_len(c), 5);

	/* a breakpoint decode: each answer's tokens are named, the paused
	 * part is not */
	{
		struct model_run r = { .brk = 1, .out = tok };

		assert_int_equal(model_ctx_run_decode(c, &f->env, 4, &sp, &r,
						      msg, sizeof(msg)),
				 0);
		assert_true(r.paused);
		sv = record(c, 4);
		assert_int_equal(sv.len, 5);
		assert_true(sv.paused);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(model_ctx_resume(c, &f->env, &r, msg,
							  sizeof(msg)),
					 0);
			assert_true(r.paused);
		}
		sv = record(c, 5);
		assert_int_equal(sv.len, 7);
		assert_true(sv.paused);
		arena_read(fd, sv.logits_off, got, V);
		assert_memory_equal(got, model_ctx_logits(c),
				    V * sizeof(float));
		model_ctx_abandon(c);
	}

	/* a freed context's buffers wait for a record begun after */
	c2 = ctx(h, 32);
	s2 = record(c2, 6);
	model_ctx_free(c2);
	c3 = ctx(h, 32);
	s3 = record(c3, 7); /* begun after the free: in force, it frees */
	assert_true(s3.logits_off != s2.logits_off);
	model_ctx_free(c3);
	c3 = ctx(h, 32);
	model_journal_begin(8);
	assert_int_equal(model_ctx_journal(c3, &s3), 0);
	assert_int_equal(s3.logits_off, s2.logits_off);
	model_journal_off();
	model_ctx_free(c3);
	model_ctx_free(c);
	model_close(h);
	free(want);
	free(got);
}

static int group_teardown(void **state)
{
	return rm_tree(dir);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, model_fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST(test_gpt2_f32),
		TEST(test_gpt2_f16),
		TEST(test_gpt2_bf16),
		TEST(test_llama_f32),
		TEST(test_llama_f16),
		TEST(test_llama_bf16),
		TEST(test_greedy_gpt2),
		TEST(test_greedy_llama),
		TEST(test_refused_steps),
		TEST(test_fork_and_seed),
		TEST(test_pass_many),
		TEST(test_pass_fault),
		TEST(test_keep_logits),
		TEST(test_sample),
		TEST(test_sample_reference),
		TEST(test_plans_kept),
		TEST(test_pass_plans_by_kind),
		TEST(test_sampled_in_graph),
		TEST(test_gqa_attention),
		TEST(test_break_same),
		TEST(test_places),
		TEST(test_steer),
		TEST(test_break_refused),
		TEST(test_journal_pins),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
