// SPDX-License-Identifier: MIT
/*
 * The llama family end to end: Llama, Qwen2, Qwen3 and Mistral models
 * written by scripts/mkmodel.py in transformers 4's and 5's config forms,
 * with every RoPE type djinnd implements (default, linear, dynamic,
 * llama3, yarn), biases, q/k norms, an explicit head_dim and sliding
 * windows, loaded through the model store and run on the CPU backend,
 * against a double-precision reference written here from transformers'
 * modeling code (models/{llama,qwen2,qwen3,mistral}, modeling_rope_utils,
 * masking_utils).
 *
 * The reference shares nothing with djinnd but the safetensors reader: it
 * reads config.json itself with jansson (not model_config_parse()) and
 * derives head_dim, the inverse frequencies and attention factor of each
 * rope_type, the biases, the q/k norms and the sliding window of each
 * layer on its own. It runs forward calls over a KV cache of its own, as
 * transformers' generate() does on a fresh model: dynamic RoPE computes
 * its frequencies from the length of the sequence at every call, and
 * cached keys keep the rotation they were given.
 *
 * For each model:
 *   - the prefill's logits at every position, within a tolerance of the
 *     largest logit (f32 1e-4, bf16 4e-2);
 *   - 16 greedy tokens (fewer where a sliding window ends the context)
 *     equal the reference's, unless the reference's best two logits are
 *     within that tolerance of each other at a step where they part
 *     (printed); after each decode step, the logits against the
 *     reference's over the same tokens; the whole sequence again in
 *     three prefills (dynamic RoPE: the last one runs past
 *     max_position_embeddings in one call);
 *   - a model whose RoPE is not the default with theta 10000 gives
 *     logits far from those of that default (so a runtime ignoring the
 *     setting fails the test);
 *   - contexts up to the longest allowed (max_position_embeddings;
 *     floor(factor * it) for dynamic; at most the sliding window) are
 *     made, one token more is refused, naming "sliding_window" when the
 *     window is the limit;
 *   - a prefill and a greedy decode paused after every layer and resumed
 *     unchanged give the same logits bit for bit and the same tokens; the
 *     hidden state at the pause is the reference's after that layer; a
 *     state steered to the reference's plus a vector gives the logits
 *     the reference computes from it.
 *
 * Runs from the repository root (it calls scripts/mkmodel.py).
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
#include <jansson.h>

#include "array_size.h"
#include "model/runtime.h"
#include "testutil.h"
#include "model_test.h"

static char dir[64];

/* ---------------------------------------------------------------------- */
/* The reference's configuration, read from config.json with jansson */

#define RMAX_LAYERS 4
#define RMAX_HALF 64 /* head_dim / 2 */
#define RMAX_POS 160 /* the longest sequence the reference runs */

/*
 * struct rcfg - what transformers makes of a config.json
 * @D:        head_dim, or hidden_size / num_attention_heads
 * @npos:     max_position_embeddings
 * @rope:     rope_type ("default", "linear", ...), from rope_parameters
 *            (5) or rope_scaling (4, "type" its legacy spelling)
 * @theta:    rope_theta, inside rope_parameters or beside it (10000)
 * @orig:     original_max_position_embeddings (llama3, yarn)
 * @window:   per layer, the sliding window (0: none)
 * @dtype:    the config's dtype or torch_dtype ("" if none)
 */
struct rcfg {
	char arch[16];
	int C, F, H, Hk, D, L, V, npos;
	double eps;
	bool tied, qkv_bias, o_bias, mlp_bias, qk_norm;
	char rope[16];
	double theta, factor, lo, hi, beta_fast, beta_slow, attn_factor;
	bool truncate;
	int orig;
	int window[RMAX_LAYERS];
	char dtype[16];
};

/* A member that is there and not null, else NULL. */
static json_t *jget(json_t *o, const char *k)
{
	json_t *v = o ? json_object_get(o, k) : NULL;

	return v && !json_is_null(v) ? v : NULL;
}

static int jint(json_t *o, const char *k, int def)
{
	json_t *v = jget(o, k);

	if (!v)
		return def;
	if (!json_is_integer(v))
		fail_msg("reference: \"%s\" is not an integer", k);
	return (int)json_integer_value(v);
}

static double jnum(json_t *o, const char *k, double def)
{
	json_t *v = jget(o, k);

	if (!v)
		return def;
	if (!json_is_number(v))
		fail_msg("reference: \"%s\" is not a number", k);
	return json_number_value(v);
}

static bool jbool(json_t *o, const char *k, bool def)
{
	json_t *v = jget(o, k);

	if (!v)
		return def;
	if (!json_is_boolean(v))
		fail_msg("reference: \"%s\" is not a boolean", k);
	return json_is_true(v);
}

static const char *jstr(json_t *o, const char *k, const char *def)
{
	json_t *v = jget(o, k);

	if (!v)
		return def;
	if (!json_is_string(v))
		fail_msg("reference: \"%s\" is not a string", k);
	return json_string_value(v);
}

static int jreq(json_t *o, const char *k)
{
	int v = jint(o, k, -1);

	if (v < 1)
		fail_msg("reference: \"%s\" is missing", k);
	return v;
}

static double get_mscale(double scale, double mscale)
{
	return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static void rcfg_read(const char *path, struct rcfg *c)
{
	json_t *j, *rp;
	json_error_t e;
	const char *s;
	bool qwen;

	memset(c, 0, sizeof(*c));
	j = json_load_file(path, 0, &e);
	if (!j)
		fail_msg("reference: %s: %s", path, e.text);
	snprintf(c->arch, sizeof(c->arch), "%s", jstr(j, "model_type", ""));
	qwen = !strcmp(c->arch, "qwen2") || !strcmp(c->arch, "qwen3");
	assert_true(qwen || !strcmp(c->arch, "llama") ||
		    !strcmp(c->arch, "mistral"));
	c->C = jreq(j, "hidden_size");
	c->F = jreq(j, "intermediate_size");
	c->H = jreq(j, "num_attention_heads");
	c->Hk = jint(j, "num_key_value_heads", c->H);
	c->L = jreq(j, "num_hidden_layers");
	c->V = jreq(j, "vocab_size");
	c->npos = jreq(j, "max_position_embeddings");
	c->eps = jnum(j, "rms_norm_eps", -1);
	assert_true(c->eps > 0);
	assert_true(c->L <= RMAX_LAYERS);
	/* LlamaConfig and MistralConfig: head_dim or C / H; Qwen2 has none
	 * of its own, Qwen3's is written */
	c->D = jint(j, "head_dim", c->C / c->H);
	assert_true(c->D % 2 == 0 && c->D / 2 <= RMAX_HALF);
	c->tied = jbool(j, "tie_word_embeddings", false);
	assert_string_equal(jstr(j, "hidden_act", "silu"), "silu");
	if (!strcmp(c->arch, "llama")) {
		c->qkv_bias = c->o_bias = jbool(j, "attention_bias", false);
		c->mlp_bias = jbool(j, "mlp_bias", false);
	} else if (!strcmp(c->arch, "qwen2")) {
		c->qkv_bias = true; /* q, k, v: bias=True; o: bias=False */
	} else if (!strcmp(c->arch, "qwen3")) {
		c->qkv_bias = c->o_bias = jbool(j, "attention_bias", false);
		c->qk_norm = true;
	}
	snprintf(c->dtype, sizeof(c->dtype), "%s",
		 jstr(j, "dtype", jstr(j, "torch_dtype", "")));

	/* sliding windows: Mistral's on every layer; Qwen's only with
	 * use_sliding_window, on the layers layer_types says (or from
	 * max_window_layers on) */
	for (int l = 0; l < c->L; l++) {
		int w = jint(j, "sliding_window", 0);

		if (qwen) {
			json_t *lt = jget(j, "layer_types");
			const char *type;
			bool slides;

			if (lt) {
				type = json_string_value(json_array_get(lt, l));
				assert_non_null(type);
				slides = !strcmp(type, "sliding_attention");
			} else {
				slides = l >= jint(j, "max_window_layers", 28);
			}
			if (!jbool(j, "use_sliding_window", false) || !slides)
				w = 0;
		}
		c->window[l] = w;
	}

	/* RoPE (modeling_rope_utils.py: standardize_rope_params) */
	rp = jget(j, "rope_parameters");
	if (rp) {
		c->theta =
			jnum(rp, "rope_theta", jnum(j, "rope_theta", 10000.0));
	} else {
		rp = jget(j, "rope_scaling");
		c->theta = jnum(j, "rope_theta", 10000.0);
	}
	s = jstr(rp, "rope_type", jstr(rp, "type", "default"));
	snprintf(c->rope, sizeof(c->rope), "%s", s);
	assert_true(jnum(rp, "partial_rotary_factor", 1.0) == 1.0);
	c->factor = jnum(rp, "factor", 1.0);
	c->lo = jnum(rp, "low_freq_factor", 0);
	c->hi = jnum(rp, "high_freq_factor", 0);
	c->orig = jint(j, "original_max_position_embeddings",
		       jint(rp, "original_max_position_embeddings", c->npos));
	c->beta_fast = jnum(rp, "beta_fast", 0);
	c->beta_slow = jnum(rp, "beta_slow", 0);
	if (c->beta_fast == 0) /* "or 32", "or 1" */
		c->beta_fast = 32;
	if (c->beta_slow == 0)
		c->beta_slow = 1;
	c->truncate = jbool(rp, "truncate", true);
	c->attn_factor = 1;
	if (!strcmp(s, "yarn")) {
		double ms = jnum(rp, "mscale", 0),
		       msa = jnum(rp, "mscale_all_dim", 0);

		if (!jget(rp, "factor"))
			c->factor = (double)c->npos / c->orig;
		if (jget(rp, "attention_factor"))
			c->attn_factor = jnum(rp, "attention_factor", 1);
		else if (ms != 0 && msa != 0)
			c->attn_factor = get_mscale(c->factor, ms) /
					 get_mscale(c->factor, msa);
		else
			c->attn_factor = get_mscale(c->factor, 1);
	}
	assert_true(!strcmp(s, "default") || !strcmp(s, "linear") ||
		    !strcmp(s, "dynamic") || !strcmp(s, "llama3") ||
		    !strcmp(s, "yarn"));
	json_decref(j);
}

/* The longest context transformers runs exactly as the runtime promises:
 * max_position_embeddings (dynamic: floor(factor * it)), at most the
 * smallest sliding window. */
static int rcfg_max_ctx(const struct rcfg *c, bool *by_window)
{
	int n = c->npos;

	if (!strcmp(c->rope, "dynamic"))
		n = (int)floor(c->factor * c->npos);
	*by_window = false;
	for (int l = 0; l < c->L; l++)
		if (c->window[l] && c->window[l] < n) {
			n = c->window[l];
			*by_window = true;
		}
	return n;
}

/*
 * The inverse frequencies (D / 2 into @inv) of a forward call over a
 * sequence of @seq_len positions, and the factor cos and sin are
 * multiplied by: ROPE_INIT_FUNCTIONS of transformers 5, in double.
 */
static double rope_inv(const struct rcfg *c, int seq_len, double *inv)
{
	int D = c->D, n = c->D / 2;
	double base = c->theta;

	if (!strcmp(c->rope, "dynamic")) {
		double s = seq_len > c->npos ? seq_len : c->npos;

		base *= pow(c->factor * s / c->npos - (c->factor - 1),
			    (double)D / (D - 2));
	}
	for (int i = 0; i < n; i++)
		inv[i] = 1.0 / pow(base, 2.0 * i / D);
	if (!strcmp(c->rope, "linear")) {
		for (int i = 0; i < n; i++)
			inv[i] /= c->factor;
	} else if (!strcmp(c->rope, "llama3")) {
		double lw = c->orig / c->lo, hw = c->orig / c->hi;

		for (int i = 0; i < n; i++) {
			double wl = 2 * M_PI / inv[i], sm;

			if (wl > lw) {
				inv[i] /= c->factor;
			} else if (!(wl < hw)) {
				sm = (c->orig / wl - c->lo) / (c->hi - c->lo);
				inv[i] = (1 - sm) * inv[i] / c->factor +
					 sm * inv[i];
			}
		}
	} else if (!strcmp(c->rope, "yarn")) {
		double lo = D * log(c->orig / (c->beta_fast * 2 * M_PI)) /
			    (2 * log(base));
		double hi = D * log(c->orig / (c->beta_slow * 2 * M_PI)) /
			    (2 * log(base));

		if (c->truncate) {
			lo = floor(lo);
			hi = ceil(hi);
		}
		lo = fmax(lo, 0);
		hi = fmin(hi, D - 1);
		if (lo == hi)
			hi += 0.001;
		for (int i = 0; i < n; i++) {
			double ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1);
			double extra = 1 - ramp;

			inv[i] = inv[i] / c->factor * (1 - extra) +
				 inv[i] * extra;
		}
		return c->attn_factor;
	}
	return 1.0;
}

/* ---------------------------------------------------------------------- */
/* The reference's weights and forward pass */

struct rlayer {
	double *n1, *wq, *bq, *wk, *bk, *wv, *bv, *qn, *kn, *wo, *bo;
	double *n2, *wg, *bg, *wu, *bu, *wd, *bd;
};

struct rmodel {
	struct rcfg c;
	double *emb, *norm, *head;
	struct rlayer l[RMAX_LAYERS];
	enum st_dtype dtype;
};

/* Per layer, the keys (after RoPE) and values of every position so far. */
struct rkv {
	int n;
	double *k[RMAX_LAYERS], *v[RMAX_LAYERS];
};

/* The tensor @fmt, which must have the shape (@d0) or (@d0, @d1). */
static double *rweight(struct rmodel *m, const struct st_set *set, int d0,
		       int d1, const char *fmt, ...)
{
	const struct st_tensor *t;
	va_list ap;

	va_start(ap, fmt);
	t = ref_tensor_v(set, fmt, ap);
	va_end(ap);
	if (t->ndim != (d1 ? 2u : 1u) || t->shape[0] != (uint64_t)d0 ||
	    (d1 && t->shape[1] != (uint64_t)d1))
		fail_msg("reference: %s has the wrong shape", t->name);
	m->dtype = t->dtype;
	return ref_values(t);
}

static struct rmodel *rmodel_load(const char *name)
{
	struct rmodel *m = calloc(1, sizeof(*m));
	char path[256], msg[ST_MSG_LEN];
	struct rcfg cfg, *c;
	struct st_set *set;
	int C, F, D, H, Hk;

	assert_non_null(m);
	snprintf(path, sizeof(path), "%s/%s/config.json", dir, name);
	rcfg_read(path, &cfg);
	m->c = cfg;
	c = &m->c;
	C = c->C, F = c->F, D = c->D, H = c->H, Hk = c->Hk;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (st_set_open(path, &set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	m->emb = rweight(m, set, c->V, C, "model.embed_tokens.weight");
	m->norm = rweight(m, set, C, 0, "model.norm.weight");
	m->head = c->tied ? NULL : rweight(m, set, c->V, C, "lm_head.weight");
	for (int l = 0; l < c->L; l++) {
		struct rlayer *y = &m->l[l];
		const char *p = "model.layers";

		y->n1 = rweight(m, set, C, 0, "%s.%d.input_layernorm.weight", p,
				l);
		y->wq = rweight(m, set, H * D, C,
				"%s.%d.self_attn.q_proj.weight", p, l);
		y->wk = rweight(m, set, Hk * D, C,
				"%s.%d.self_attn.k_proj.weight", p, l);
		y->wv = rweight(m, set, Hk * D, C,
				"%s.%d.self_attn.v_proj.weight", p, l);
		y->wo = rweight(m, set, C, H * D,
				"%s.%d.self_attn.o_proj.weight", p, l);
		if (c->qkv_bias) {
			y->bq = rweight(m, set, H * D, 0,
					"%s.%d.self_attn.q_proj.bias", p, l);
			y->bk = rweight(m, set, Hk * D, 0,
					"%s.%d.self_attn.k_proj.bias", p, l);
			y->bv = rweight(m, set, Hk * D, 0,
					"%s.%d.self_attn.v_proj.bias", p, l);
		}
		if (c->o_bias)
			y->bo = rweight(m, set, C, 0,
					"%s.%d.self_attn.o_proj.bias", p, l);
		if (c->qk_norm) {
			y->qn = rweight(m, set, D, 0,
					"%s.%d.self_attn.q_norm.weight", p, l);
			y->kn = rweight(m, set, D, 0,
					"%s.%d.self_attn.k_norm.weight", p, l);
		}
		y->n2 = rweight(m, set, C, 0,
				"%s.%d.post_attention_layernorm.weight", p, l);
		y->wg = rweight(m, set, F, C, "%s.%d.mlp.gate_proj.weight", p,
				l);
		y->wu = rweight(m, set, F, C, "%s.%d.mlp.up_proj.weight", p, l);
		y->wd = rweight(m, set, C, F, "%s.%d.mlp.down_proj.weight", p,
				l);
		if (c->mlp_bias) {
			y->bg = rweight(m, set, F, 0,
					"%s.%d.mlp.gate_proj.bias", p, l);
			y->bu = rweight(m, set, F, 0, "%s.%d.mlp.up_proj.bias",
					p, l);
			y->bd = rweight(m, set, C, 0,
					"%s.%d.mlp.down_proj.bias", p, l);
		}
	}
	st_set_close(set);
	/* the config names the weights' dtype */
	assert_string_equal(c->dtype, m->dtype == ST_F32  ? "float32" :
				      m->dtype == ST_BF16 ? "bfloat16" :
							    "float16");
	return m;
}

static void rmodel_free(struct rmodel *m)
{
	free(m->emb), free(m->norm), free(m->head);
	for (int l = 0; l < m->c.L; l++) {
		struct rlayer *y = &m->l[l];

		free(y->n1), free(y->wq), free(y->bq), free(y->wk), free(y->bk);
		free(y->wv), free(y->bv), free(y->qn), free(y->kn), free(y->wo);
		free(y->bo), free(y->n2), free(y->wg), free(y->bg), free(y->wu);
		free(y->bu), free(y->wd), free(y->bd);
	}
	free(m);
}

static void rkv_init(struct rkv *kv, const struct rcfg *c)
{
	kv->n = 0;
	for (int l = 0; l < c->L; l++) {
		kv->k[l] = xmalloc(RMAX_POS * c->Hk * c->D * sizeof(double));
		kv->v[l] = xmalloc(RMAX_POS * c->Hk * c->D * sizeof(double));
	}
}

static void rkv_free(struct rkv *kv, const struct rcfg *c)
{
	for (int l = 0; l < c->L; l++)
		free(kv->k[l]), free(kv->v[l]);
}

/* y (T, N) = x (T, K) @ W^T + b, W (N, K) as nn.Linear stores it */
static void linear(double *y, const double *x, const double *w, const double *b,
		   int T, int K, int N)
{
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = b ? b[n] : 0;

			for (int k = 0; k < K; k++)
				s += x[t * K + k] * w[n * K + k];
			y[t * N + n] = s;
		}
}

/* RMSNorm over rows of @C (in place allowed) */
static void rmsnorm(double *y, const double *x, const double *g, int rows,
		    int C, double eps)
{
	for (int t = 0; t < rows; t++) {
		double ms = 0;

		for (int i = 0; i < C; i++)
			ms += x[t * C + i] * x[t * C + i] / C;
		ms = 1 / sqrt(ms + eps);
		for (int i = 0; i < C; i++)
			y[t * C + i] = x[t * C + i] * ms * g[i];
	}
}

/* x * cos + rotate_half(x) * sin on each of @n heads of T rows at
 * positions P.., cos and sin scaled by @af */
static void rope(double *x, int T, int n, int D, int P, const double *inv,
		 double af)
{
	for (int t = 0; t < T; t++)
		for (int h = 0; h < n; h++) {
			double *p = x + ((size_t)t * n + h) * D;

			for (int i = 0; i < D / 2; i++) {
				double ang = (double)(P + t) * inv[i];
				double co = cos(ang) * af, si = sin(ang) * af;
				double a = p[i], b = p[i + D / 2];

				p[i] = a * co - b * si;
				p[i + D / 2] = b * co + a * si;
			}
		}
}

/*
 * One forward call: @T tokens at positions kv->n .. kv->n + T - 1, their
 * keys and values appended to @kv. With @brk >= 0 the hidden state after
 * layer @brk is copied to @hout (if set), then replaced by @hin (if set).
 * Returns the logits (T, V).
 */
static double *ref_forward(const struct rmodel *m, struct rkv *kv,
			   const int32_t *ids, int T, int brk, double *hout,
			   const double *hin)
{
	const struct rcfg *c = &m->c;
	int C = c->C, F = c->F, D = c->D, H = c->H, Hk = c->Hk, V = c->V;
	int P = kv->n, S = P + T;
	double inv[RMAX_HALF], af = rope_inv(c, S, inv);
	double *x = xmalloc(T * C * sizeof(double));
	double *y = xmalloc(T * C * sizeof(double));
	double *q = xmalloc(T * H * D * sizeof(double));
	double *k = xmalloc(T * Hk * D * sizeof(double));
	double *v = xmalloc(T * Hk * D * sizeof(double));
	double *a = xmalloc(T * H * D * sizeof(double));
	double *g = xmalloc(T * F * sizeof(double));
	double *u = xmalloc(T * F * sizeof(double));
	double *p = xmalloc(S * sizeof(double)), *logits;

	assert_true(S <= RMAX_POS);
	for (int t = 0; t < T; t++)
		memcpy(x + t * C, m->emb + (size_t)ids[t] * C,
		       C * sizeof(double));
	for (int l = 0; l < c->L; l++) {
		const struct rlayer *w = &m->l[l];
		int W = c->window[l];

		rmsnorm(y, x, w->n1, T, C, c->eps);
		linear(q, y, w->wq, w->bq, T, C, H * D);
		linear(k, y, w->wk, w->bk, T, C, Hk * D);
		linear(v, y, w->wv, w->bv, T, C, Hk * D);
		if (c->qk_norm) { /* per head, before RoPE */
			rmsnorm(q, q, w->qn, T * H, D, c->eps);
			rmsnorm(k, k, w->kn, T * Hk, D, c->eps);
		}
		rope(q, T, H, D, P, inv, af);
		rope(k, T, Hk, D, P, inv, af);
		memcpy(kv->k[l] + (size_t)P * Hk * D, k,
		       T * Hk * D * sizeof(double));
		memcpy(kv->v[l] + (size_t)P * Hk * D, v,
		       T * Hk * D * sizeof(double));
		/* causal attention over the cache; a sliding layer sees the
		 * keys kv_idx > q_idx - W (masking_utils) */
		for (int h = 0; h < H; h++) {
			int kh = h / (H / Hk);
			const double *K = kv->k[l], *Vv = kv->v[l];

			for (int t = 0; t < T; t++) {
				int pos = P + t, s0 = W ? pos - W + 1 : 0;
				double mx = -INFINITY, sum = 0;

				if (s0 < 0)
					s0 = 0;
				for (int s = s0; s <= pos; s++) {
					double d = 0;

					for (int i = 0; i < D; i++)
						d += q[(t * H + h) * D + i] *
						     K[(s * Hk + kh) * D + i];
					p[s] = d / sqrt(D);
					mx = fmax(mx, p[s]);
				}
				for (int s = s0; s <= pos; s++)
					sum += p[s] = exp(p[s] - mx);
				for (int i = 0; i < D; i++) {
					double o = 0;

					for (int s = s0; s <= pos; s++)
						o += p[s] *
						     Vv[(s * Hk + kh) * D + i];
					a[(t * H + h) * D + i] = o / sum;
				}
			}
		}
		linear(y, a, w->wo, w->bo, T, H * D, C);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		rmsnorm(y, x, w->n2, T, C, c->eps);
		linear(g, y, w->wg, w->bg, T, C, F);
		linear(u, y, w->wu, w->bu, T, C, F);
		for (int i = 0; i < T * F; i++) /* SwiGLU */
			g[i] = g[i] / (1 + exp(-g[i])) * u[i];
		linear(y, g, w->wd, w->bd, T, F, C);
		for (int i = 0; i < T * C; i++)
			x[i] += y[i];
		if (l == brk && hout)
			memcpy(hout, x, T * C * sizeof(double));
		if (l == brk && hin)
			memcpy(x, hin, T * C * sizeof(double));
	}
	kv->n = S;
	rmsnorm(y, x, m->norm, T, C, c->eps);
	logits = xmalloc((size_t)T * V * sizeof(double));
	linear(logits, y, c->tied ? m->emb : m->head, NULL, T, C, V);
	free(x), free(y), free(q), free(k), free(v), free(a), free(g), free(u);
	free(p);
	return logits;
}

/* A whole sequence from an empty cache, in one call. */
static double *ref_once(const struct rmodel *m, const int32_t *ids, int T,
			int brk, double *hout, const double *hin)
{
	struct rkv kv;
	double *lg;

	rkv_init(&kv, &m->c);
	lg = ref_forward(m, &kv, ids, T, brk, hout, hin);
	rkv_free(&kv, &m->c);
	return lg;
}

/* ---------------------------------------------------------------------- */
/* Fixture (model_test.h), its case in ->arg */

static int setup(void **state)
{
	return model_fix_setup(state, dir);
}

static double rel_diff(const double *a, const double *b, size_t n)
{
	double err = 0, scale = 1e-30;

	for (size_t i = 0; i < n; i++) {
		err = fmax(err, fabs(a[i] - b[i]));
		scale = fmax(scale, fabs(b[i]));
	}
	return err / scale;
}

/* Logits and hidden states: errors relative to the largest value. */
static double tol(unsigned int dtype)
{
	return dtype == DJINN_DTYPE_F32 ? 1e-4 :
	       dtype == DJINN_DTYPE_F16 ? 5e-3 :
					  4e-2;
}

static int argmax(const double *x, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* The hidden state (T, C) of a paused context, read through a copy. */
static void read_hidden(struct model_fix *f, struct model_ctx *c,
			unsigned int dt, double *x, size_t n)
{
	size_t es = dt == DJINN_DTYPE_F32 ? 4 : 2;
	uint8_t *buf = xmalloc(n * es);
	char msg[ST_MSG_LEN];
	uint64_t copy;

	if (model_ctx_hidden_copy(c, &f->env, &copy, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(vmu_region_read(f->s, copy, 0, buf, n * es), 0);
	assert_int_equal(vmu_region_destroy(f->s, copy), 0);
	for (size_t i = 0; i < n; i++) {
		float v;

		if (dt == DJINN_DTYPE_F32) {
			memcpy(&v, buf + 4 * i, 4);
			x[i] = v;
		} else if (dt == DJINN_DTYPE_BF16) {
			x[i] = bf16_val(buf + 2 * i);
		} else {
			x[i] = f16_val(buf + 2 * i);
		}
	}
	free(buf);
}

/* @x rounded to @dt (f32, or bf16 to nearest even), as bytes in @buf;
 * @x gets the rounded values */
static void to_dtype(unsigned int dt, double *x, size_t n, uint8_t *buf)
{
	for (size_t i = 0; i < n; i++) {
		float v = (float)x[i];
		uint32_t u;

		if (dt == DJINN_DTYPE_F32) {
			memcpy(buf + 4 * i, &v, 4);
			x[i] = v;
			continue;
		}
		assert_int_equal(dt, DJINN_DTYPE_BF16);
		memcpy(&u, &v, 4);
		u = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
		buf[2 * i] = (uint8_t)u;
		buf[2 * i + 1] = (uint8_t)(u >> 8);
		x[i] = bf16_val(buf + 2 * i);
	}
}

/* Replace the paused context's hidden state with @x. */
static void steer(struct model_fix *f, struct model_ctx *c, unsigned int dt,
		  double *x, size_t n)
{
	size_t es = dt == DJINN_DTYPE_F32 ? 4 : 2;
	uint8_t *buf = xmalloc(n * es);
	struct vmu_region_info info;
	struct model_pause_info pi;
	char msg[ST_MSG_LEN];
	uint64_t reg;

	to_dtype(dt, x, n, buf);
	assert_true(model_ctx_paused(c, &pi));
	assert_int_equal(pi.desc.dtype, dt);
	assert_int_equal(vmu_region_create(f->s, n * es, &reg), 0);
	assert_int_equal(vmu_region_resize(f->s, reg, n * es, NULL), 0);
	assert_int_equal(vmu_region_write(f->s, reg, 0, buf, n * es), 0);
	assert_int_equal(vmu_region_pin(f->s, reg, NULL, &info), 0);
	if (model_ctx_steer(c, &f->env, info.addr, &pi.desc, msg, sizeof(msg)))
		fail_msg("steer: %s", msg);
	assert_int_equal(vmu_region_unpin(f->s, reg), 0);
	assert_int_equal(vmu_region_destroy(f->s, reg), 0);
	free(buf);
}

/* ---------------------------------------------------------------------- */
/* The cases */

#define NP 9 /* prompt */
#define NDEC 16 /* greedy tokens */
static const int32_t prompt[NP] = { 3, 141, 59, 26, 5, 35, 89, 79, 32 };

/*
 * struct acase - a model and what to expect of it
 * @name: its directory
 * @args: scripts/mkmodel.py's options
 * @arch: enum model_arch the runtime must see
 */
struct acase {
	const char *name;
	const char *args;
	int arch;
};

static const struct acase cases[] = {
	/* the bug this fixes: rope_parameters' theta was ignored */
	{ "llama-v5-theta", "--arch llama --rope-theta 500000 --kv-heads 2",
	  MODEL_LLAMA },
	{ "llama-v4-theta",
	  "--arch llama --config-form 4 --rope-theta 500000 --kv-heads 2",
	  MODEL_LLAMA },
	{ "llama-linear", "--arch llama --rope linear --rope-factor 4",
	  MODEL_LLAMA },
	/* transformers 4's legacy "type" in rope_scaling */
	{ "llama-linear-v4type",
	  "--arch llama --config-form 4 --rope linear --rope-legacy-type "
	  "--rope-factor 3 --rope-theta 20000",
	  MODEL_LLAMA },
	/* 16 positions, so the 9-token prompt and 16 tokens run past them */
	{ "llama-dynamic",
	  "--arch llama --rope dynamic --rope-factor 2.5 --ctx 16 --kv-heads 2",
	  MODEL_LLAMA },
	/* wavelengths of head_dim 16 on both sides of 32 / 1 and 32 / 4 */
	{ "llama-llama3",
	  "--arch llama --rope llama3 --rope-factor 8 --low-freq-factor 1 "
	  "--high-freq-factor 4 --original-max-pos 32 --kv-heads 2",
	  MODEL_LLAMA },
	{ "llama-llama3-v4",
	  "--arch llama --config-form 4 --rope llama3 --rope-factor 8 "
	  "--original-max-pos 32 --rope-theta 500000",
	  MODEL_LLAMA },
	/* original_max_position_embeddings left out: max_position_embeddings */
	{ "llama-llama3-bf16",
	  "--arch llama --dtype bf16 --rope llama3 --rope-factor 8 "
	  "--original-max-pos 0 --kv-heads 2 --seed 7",
	  MODEL_LLAMA },
	{ "llama-yarn",
	  "--arch llama --rope yarn --rope-factor 4 --original-max-pos 32",
	  MODEL_LLAMA },
	{ "llama-bias",
	  "--arch llama --attention-bias --mlp-bias --kv-heads 2 --seed 5",
	  MODEL_LLAMA },
	{ "llama-gqa", "--arch llama --kv-heads 1 --layers 3 --seed 6",
	  MODEL_LLAMA },
	{ "qwen2", "--arch qwen2 --tied --kv-heads 2 --rope-theta 1000000",
	  MODEL_QWEN2 },
	{ "qwen2-shards",
	  "--arch qwen2 --config-form 4 --shards 3 --kv-heads 1 --seed 8",
	  MODEL_QWEN2 },
	/* head_dim 32, not 64 / 4 */
	{ "qwen3",
	  "--arch qwen3 --head-dim 32 --kv-heads 2 --rope-theta 1000000",
	  MODEL_QWEN3 },
	{ "qwen3-yarn",
	  "--arch qwen3 --head-dim 24 --attention-bias --rope yarn "
	  "--rope-factor 3 --original-max-pos 40 --beta-fast 16 --beta-slow 2 "
	  "--attention-factor 1.25 --seed 9",
	  MODEL_QWEN3 },
	{ "qwen3-bf16",
	  "--arch qwen3 --dtype bf16 --head-dim 32 --kv-heads 2 --seed 10",
	  MODEL_QWEN3 },
	/* a window over the context; 4.57's form: "head_dim": null */
	{ "mistral", "--arch mistral --config-form 4 --kv-heads 2",
	  MODEL_MISTRAL },
	{ "mistral-window",
	  "--arch mistral --sliding-window 20 --kv-heads 2 --seed 11",
	  MODEL_MISTRAL },
	/* layer 1 slides (max_window_layers 1) */
	{ "qwen3-window",
	  "--arch qwen3 --sliding-window 20 --max-window-layers 1 --seed 12",
	  MODEL_QWEN3 },
	/* use_sliding_window, but no layer from max_window_layers 2 on */
	{ "qwen2-nowindow",
	  "--arch qwen2 --sliding-window 20 --max-window-layers 2 --seed 13",
	  MODEL_QWEN2 },
};

#define NR_CASES (ARRAY_SIZE(cases))

/*
 * Context limits: the longest context is made, one more token is refused
 * (naming "sliding_window" when the window is the limit).
 */
static void check_limits(struct model_hold *h, const struct rmodel *m,
			 const char *name)
{
	struct model_ctx *c;
	char msg[ST_MSG_LEN] = "";
	bool by_window;
	int n = rcfg_max_ctx(&m->c, &by_window);

	c = ctx(h, (uint32_t)n);
	model_ctx_free(c);
	assert_int_equal(model_ctx_new(h, (uint32_t)n + 1, &c, msg,
				       sizeof(msg)),
			 -EINVAL);
	if (by_window && !strstr(msg, "sliding_window"))
		fail_msg("%s: '%s' does not name sliding_window", name, msg);
	printf("  %s: contexts up to %d tokens; %d refused: %s\n", name, n,
	       n + 1, msg);
}

/* Resume a paused decode until it is done. */
static void resume_all(struct model_fix *f, struct model_ctx *c,
		       struct model_run *r, uint32_t layer)
{
	char msg[ST_MSG_LEN];

	while (r->paused) {
		assert_int_equal(r->layer, layer);
		if (model_ctx_resume(c, &f->env, r, msg, sizeof(msg)))
			fail_msg("resume: %s", msg);
	}
	assert_false(model_ctx_paused(c, NULL));
}

/*
 * Breakpoints after every layer: the hidden state is the reference's; a
 * prefill and a greedy decode resumed unchanged give what @want_lg and
 * @want_tok (an unbroken run) are, bit for bit; the state steered to the
 * reference's plus a vector gives the reference's logits from that state.
 */
static void check_breaks(struct model_fix *f, struct model_hold *h,
			 const struct rmodel *m, const char *name,
			 const float *want_lg, const int32_t *want_tok, int nd)
{
	const struct model_sampling greedy = { .temperature = 0, .top_p = 1 };
	const struct rcfg *rc = &m->c;
	unsigned int dt = h->m->layout.dtype;
	int C = rc->C, V = rc->V, L = rc->L;
	uint32_t cap = (uint32_t)(NP + nd);
	double *xr = xmalloc(NP * C * sizeof(double));
	double *xg = xmalloc(NP * C * sizeof(double));
	float *got = xmalloc(NP * V * sizeof(float));
	double eh = 0, es = 0, moved = INFINITY;
	int32_t tok[NDEC];
	char msg[ST_MSG_LEN];

	for (int l = 0; l < L; l++) {
		struct model_ctx *c = ctx(h, cap);
		struct model_run r = { .brk = (uint32_t)l + 1, .logits = got };
		struct model_pause_info pi;
		double *base, *want, e;

		/* the reference's state after layer l */
		base = ref_once(m, prompt, NP, l, xr, NULL);
		memset(got, 0, NP * V * sizeof(float));
		if (model_ctx_run_prefill(c, &f->env, prompt, NP, &r, msg,
					  sizeof(msg)))
			fail_msg("%s", msg);
		assert_true(r.paused);
		assert_int_equal(r.layer, l);
		assert_true(model_ctx_paused(c, &pi));
		assert_int_equal(pi.desc.dims[0], NP);
		assert_int_equal(pi.desc.dims[1], C);
		read_hidden(f, c, dt, xg, NP * C);
		e = 0;
		for (int i = 0; i < NP * C; i++)
			e = fmax(e, fabs(xg[i] - xr[i]));
		{
			double s = 0;

			for (int i = 0; i < NP * C; i++)
				s = fmax(s, fabs(xr[i]));
			eh = fmax(eh, e / s);
		}
		if (model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)))
			fail_msg("%s", msg);
		assert_false(r.paused);
		assert_memory_equal(got, want_lg, NP * V * sizeof(float));
		/* a decode that pauses at every token */
		r = (struct model_run){ .brk = (uint32_t)l + 1, .out = tok };
		if (model_ctx_run_decode(c, &f->env, (uint32_t)nd, &greedy, &r,
					 msg, sizeof(msg)))
			fail_msg("%s", msg);
		resume_all(f, c, &r, (uint32_t)l);
		assert_int_equal(r.nr_out, nd);
		assert_memory_equal(tok, want_tok, nd * sizeof(int32_t));
		model_ctx_free(c);

		/* steered: the reference's state plus a wave */
		c = ctx(h, cap);
		r = (struct model_run){ .brk = (uint32_t)l + 1, .logits = got };
		if (model_ctx_run_prefill(c, &f->env, prompt, NP, &r, msg,
					  sizeof(msg)))
			fail_msg("%s", msg);
		for (int t = 0; t < NP; t++)
			for (int i = 0; i < C; i++)
				xg[t * C + i] =
					xr[t * C + i] + sin(0.37 * i + 1.3 * t);
		steer(f, c, dt, xg, NP * C); /* xg: as rounded to dt */
		if (model_ctx_resume(c, &f->env, &r, msg, sizeof(msg)))
			fail_msg("%s", msg);
		want = ref_once(m, prompt, NP, l, NULL, xg);
		es = fmax(es, rel_err(got, want, NP * V));
		moved = fmin(moved, rel_err(got, base, NP * V));
		model_ctx_free(c);
		free(base), free(want);
	}
	printf("  %s: breaks after each of %d layers: the same logits and "
	       "tokens; hidden state error %.2e; steered logits error %.2e "
	       "(unsteered ones %.2e away)\n",
	       name, L, eh, es, moved);
	assert_true(eh < tol(dt));
	assert_true(es < tol(dt));
	assert_true(moved > 3 * tol(dt)); /* the steering changed them */
	free(xr), free(xg), free(got);
}

/*
 * The reference with RoPE as if the config said nothing of it (default,
 * theta 10000): what a runtime ignoring the setting would compute. Its
 * logits over @seq must be far from the model's.
 */
static void check_sensitive(const struct rmodel *m, const char *name,
			    const int32_t *seq, int n, unsigned int dt)
{
	struct rmodel plain = *m;
	double *a, *b, d;

	if (!strcmp(m->c.rope, "default") && m->c.theta == 10000.0)
		return;
	snprintf(plain.c.rope, sizeof(plain.c.rope), "default");
	plain.c.theta = 10000.0;
	a = ref_once(m, seq, n, -1, NULL, NULL);
	b = ref_once(&plain, seq, n, -1, NULL, NULL);
	d = rel_diff(b, a, (size_t)n * m->c.V);
	printf("  %s: RoPE %s theta %g: the default RoPE's logits are %.2e "
	       "away\n",
	       name, m->c.rope, m->c.theta, d);
	assert_true(d > 3 * tol(dt));
	free(a), free(b);
}

static void check_case(struct model_fix *f, const struct acase *k)
{
	const struct model_sampling greedy = { .temperature = 0, .top_p = 1 };
	struct rmodel *m = rmodel_load(k->name);
	struct model_hold *h;
	struct model_ctx *c1, *c2, *c3;
	struct rkv kv;
	char msg[ST_MSG_LEN];
	int V = m->c.V, nd, flips = 0;
	int32_t out[NDEC], seq[NP + NDEC], tok;
	float *got = xmalloc((NP + NDEC) * V * sizeof(float));
	double *want, e, edec = 0, echunk = 0, t;
	unsigned int dt;
	bool by_window;

	if (model_open(f->ms, f->s, k->name, &h, msg, sizeof(msg)))
		fail_msg("%s: %s", k->name, msg);
	dt = h->m->layout.dtype;
	t = tol(dt);
	assert_int_equal(h->m->cfg.arch, k->arch);
	assert_int_equal(h->m->cfg.head_dim, m->c.D);
	assert_int_equal(h->m->cfg.n_kv_head, m->c.Hk);
	assert_int_equal(h->m->cfg.n_layer, m->c.L);
	nd = rcfg_max_ctx(&m->c, &by_window) - NP;
	if (nd > NDEC)
		nd = NDEC;
	assert_true(nd >= 8);
	/* dynamic RoPE: the decode runs past max_position_embeddings, where
	 * the frequencies change at every step */
	if (!strcmp(m->c.rope, "dynamic"))
		assert_true(NP + nd > m->c.npos + 4);

	/* the prefill, every position */
	rkv_init(&kv, &m->c);
	c1 = ctx(h, NP + nd);
	prefill(f, c1, prompt, NP, got);
	want = ref_forward(m, &kv, prompt, NP, -1, NULL, NULL);
	e = rel_err(got, want, NP * V);
	printf("  %s: prefill of %d: relative error %.2e (tolerance %.0e)\n",
	       k->name, NP, e, t);
	assert_true(e < t);
	assert_memory_equal(model_ctx_logits(c1), got + (NP - 1) * V,
			    V * sizeof(float));

	/* greedy tokens in one call; then one at a time, each step's
	 * logits against the reference's over the same tokens */
	if (model_ctx_decode(c1, &f->env, (uint32_t)nd, &greedy, out, msg,
			     sizeof(msg)))
		fail_msg("%s: decode: %s", k->name, msg);
	assert_int_equal(model_ctx_len(c1), NP + nd);
	c2 = ctx(h, NP + nd);
	prefill(f, c2, prompt, NP, NULL);
	for (int i = 0; i < nd; i++) {
		const double *last = want + (size_t)(i ? 0 : NP - 1) * V;
		int best = argmax(last, V);
		double scale = 0, *next;

		if (model_ctx_decode(c2, &f->env, 1, &greedy, &tok, msg,
				     sizeof(msg)))
			fail_msg("%s: decode: %s", k->name, msg);
		assert_int_equal(tok, out[i]);
		if (out[i] != best) {
			/* only a near tie of the reference explains it */
			for (int v = 0; v < V; v++)
				scale = fmax(scale, fabs(last[v]));
			printf("  %s: greedy token %d: djinnd %d, the "
			       "reference %d; the reference has %d %.2e of "
			       "its largest logit below its best (a near tie "
			       "if under %.0e)\n",
			       k->name, i, out[i], best, out[i],
			       (last[best] - last[out[i]]) / scale, t);
			assert_true(last[best] - last[out[i]] < t * scale);
			flips++;
		}
		next = ref_forward(m, &kv, &out[i], 1, -1, NULL, NULL);
		edec = fmax(edec, rel_err(model_ctx_logits(c2), next, V));
		free(want);
		want = next;
	}
	free(want);
	printf("  %s: %d greedy tokens (%d near ties parted):", k->name, nd,
	       flips);
	for (int i = 0; i < nd; i++)
		printf(" %d", out[i]);
	printf("\n  %s: decode steps to position %d: relative error %.2e\n",
	       k->name, NP + nd - 1, edec);
	assert_true(edec < t);
	/* not one token over and over: the comparison would prove little */
	for (int i = 1; i < nd && out[i] == out[0]; i++)
		assert_true(i < nd - 1);
	rkv_free(&kv, &m->c);

	/* the same sequence in three prefills: 5, 4, and the rest */
	memcpy(seq, prompt, sizeof(prompt));
	memcpy(seq + NP, out, nd * sizeof(int32_t));
	rkv_init(&kv, &m->c);
	c3 = ctx(h, NP + nd);
	{
		int cut[4] = { 0, 5, NP, NP + nd };

		for (int p = 0; p < 3; p++) {
			int n = cut[p + 1] - cut[p];

			prefill(f, c3, seq + cut[p], (uint32_t)n, got);
			want = ref_forward(m, &kv, seq + cut[p], n, -1, NULL,
					   NULL);
			echunk =
				fmax(echunk, rel_err(got, want, (size_t)n * V));
			free(want);
		}
	}
	printf("  %s: prefills of 5, 4 and %d: relative error %.2e\n", k->name,
	       nd, echunk);
	assert_true(echunk < t);
	rkv_free(&kv, &m->c);
	model_ctx_free(c3);
	model_ctx_free(c2);

	check_sensitive(m, k->name, seq, NP + nd, dt);
	check_limits(h, m, k->name);

	/* breakpoints against an unbroken prefill's logits and tokens */
	model_ctx_free(c1);
	c1 = ctx(h, NP + nd);
	prefill(f, c1, prompt, NP, got);
	check_breaks(f, h, m, k->name, got, out, nd);
	model_ctx_free(c1);

	model_close(h);
	rmodel_free(m);
	free(got);
}

static void test_case(void **state)
{
	struct model_fix *f = *state;

	check_case(f, f->arg);
}

static int group_setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/djinn-ma-XXXXXX");
	if (model_tmpdir(dir))
		return -1;
	for (size_t i = 0; i < NR_CASES; i++)
		run_cmd("python3 scripts/mkmodel.py %s %s/%s", cases[i].args,
			dir, cases[i].name);
	return 0;
}

static int group_teardown(void **state)
{
	return rm_tree(dir);
}

int main(void)
{
	struct CMUnitTest tests[NR_CASES];

	for (size_t i = 0; i < NR_CASES; i++)
		tests[i] = (struct CMUnitTest){
			.name = cases[i].name,
			.test_func = test_case,
			.setup_func = setup,
			.teardown_func = model_fix_teardown,
			.initial_state = (void *)&cases[i],
		};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
