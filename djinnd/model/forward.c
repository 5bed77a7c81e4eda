// SPDX-License-Identifier: MIT
/*
 * GPT-2 and the llama family (llama, qwen2, qwen3, mistral) as graphs of
 * the op set. See forward.h.
 *
 * Shapes are written beside the code: T new tokens, P cached ones,
 * S = P + T, C the hidden size, H query heads, Hk key/value heads, D the
 * head dim, L layers, V the vocabulary. Everything runs in the weights'
 * dtype (the CPU kernels compute in f32 and round each result).
 *
 * The KV cache is token-major, (S, 2L, Hk D): a step appends rows, so the
 * cache region grows in place. Attention reads each layer's two slots of
 * it in place, after them the step's own keys and values
 * (DJINN_ATTN_TOKENS); its causal mask with S > T is the query offset a
 * decode step needs. Reshapes, and slices of one row, are views in the
 * executor: they copy nothing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "model/forward.h"

/* ---------------------------------------------------------------------- */
/* The builder */

uint32_t gb_input(struct gbuild *g, uint64_t addr, unsigned int dtype,
		  unsigned int ndim, const uint64_t *dims)
{
	struct dj_tensor *t;

	if (g->err)
		return GB_BAD;
	if (g->nr_in == DJINN_MAX_GRAPH_INPUTS) {
		g->err = -E2BIG;
		return GB_BAD;
	}
	t = &g->in[g->nr_in];
	memset(t, 0, sizeof(*t));
	t->addr = addr;
	t->desc.dtype = (uint8_t)dtype;
	t->desc.ndim = (uint8_t)ndim;
	memcpy(t->desc.dims, dims, ndim * sizeof(dims[0]));
	return g->nr_in++;
}

uint32_t gb_op(struct gbuild *g, unsigned int op, unsigned int nr,
	       const uint32_t *ins, const void *params, size_t plen)
{
	struct djinn_node *n;

	if (g->err)
		return GB_BAD;
	if (g->nr_nodes == DJINN_MAX_NODES) {
		g->err = -E2BIG;
		return GB_BAD;
	}
	n = &g->nodes[g->nr_nodes];
	memset(n, 0, sizeof(*n));
	n->op = (uint16_t)op;
	n->phase = g->phase;
	n->nr_inputs = (uint8_t)nr;
	for (unsigned int i = 0; i < nr; i++) {
		if (ins[i] == GB_BAD) {
			g->err = -EINVAL;
			return GB_BAD;
		}
		n->inputs[i] = ins[i];
	}
	if (plen)
		memcpy(&n->params, params, plen);
	return GB_NODE | g->nr_nodes++;
}

void gb_output(struct gbuild *g, uint32_t v, unsigned int residency)
{
	if (g->err)
		return;
	if (!(v & GB_NODE) || v == GB_BAD ||
	    g->nr_out == DJINN_MAX_GRAPH_OUTPUTS) {
		g->err = -EINVAL;
		return;
	}
	g->nodes[v & ~GB_NODE].residency = (uint8_t)residency;
	g->out[g->nr_out++] = v & ~GB_NODE;
}

int gb_run(struct gbuild *g, const struct model_env *env, struct vmu_session *s,
	   struct exec_result *res, struct djinn_tensor_desc *descs, char *msg,
	   size_t msglen)
{
	size_t out_len = ((size_t)g->nr_out * 4 + 7) & ~(size_t)7;
	size_t len = sizeof(struct djinn_graph) +
		     g->nr_in * sizeof(struct djinn_ref) +
		     g->nr_nodes * sizeof(struct djinn_node) + out_len;
	struct djinn_tensor_desc *in = NULL, *nd = NULL;
	struct djinn_graph_view view;
	struct djinn_graph *gr;
	struct djinn_ref *refs;
	struct djinn_node *nodes;
	uint32_t *outs;
	uint64_t *buf;
	int ret;

	if (g->err) {
		snprintf(msg, msglen, "building the graph: %s",
			 strerror(-g->err));
		return g->err;
	}
	buf = calloc(1, (len + 7) & ~(size_t)7);
	in = calloc(g->nr_in ? g->nr_in : 1, sizeof(*in));
	nd = calloc(g->nr_nodes, sizeof(*nd));
	if (!buf || !in || !nd) {
		ret = -ENOMEM;
		goto out;
	}
	gr = (struct djinn_graph *)buf;
	gr->nr_inputs = g->nr_in;
	gr->nr_nodes = g->nr_nodes;
	gr->nr_outputs = g->nr_out;
	refs = (struct djinn_ref *)(gr + 1);
	nodes = (struct djinn_node *)(refs + g->nr_in);
	outs = (uint32_t *)(nodes + g->nr_nodes);
	for (uint32_t i = 0; i < g->nr_in; i++) {
		refs[i].id = i;
		refs[i].kind = DJINN_REF_HANDLE;
		in[i] = g->in[i].desc;
	}
	for (uint32_t k = 0; k < g->nr_nodes; k++) {
		nodes[k] = g->nodes[k];
		for (unsigned int j = 0; j < nodes[k].nr_inputs; j++)
			if (nodes[k].inputs[j] & GB_NODE)
				nodes[k].inputs[j] =
					g->nr_in +
					(nodes[k].inputs[j] & ~GB_NODE);
	}
	memcpy(outs, g->out, g->nr_out * sizeof(uint32_t));

	ret = djinn_graph_parse(buf, len, &view, msg, msglen);
	if (!ret)
		ret = djinn_graph_infer(&view, in, nd, msg, msglen);
	if (!ret)
		ret = exec_graph(env->v, env->st, env->b, s, &view, g->in, nd,
				 res, msg, msglen);
	if (!ret)
		for (uint32_t k = 0; k < g->nr_out; k++)
			descs[k] = nd[g->out[k]];
out:
	free(buf);
	free(in);
	free(nd);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Op helpers */

static uint32_t op2(struct gbuild *g, unsigned int op, uint32_t a, uint32_t b)
{
	uint32_t ins[2] = { a, b };

	return gb_op(g, op, 2, ins, NULL, 0);
}

static uint32_t matmul(struct gbuild *g, uint32_t a, uint32_t b, bool tb)
{
	struct djinn_p_matmul p = { .trans_b = tb };
	uint32_t ins[2] = { a, b };

	return gb_op(g, DJINN_GOP_MATMUL, 2, ins, &p, sizeof(p));
}

static uint32_t unary(struct gbuild *g, unsigned int op, uint32_t x)
{
	return gb_op(g, op, 1, &x, NULL, 0);
}

static uint32_t scale(struct gbuild *g, uint32_t x, float alpha)
{
	struct djinn_p_scalar p = { .alpha = alpha };

	return gb_op(g, DJINN_GOP_SCALE, 1, &x, &p, sizeof(p));
}

static uint32_t norm(struct gbuild *g, uint32_t x, uint32_t w, uint32_t b,
		     float eps)
{
	struct djinn_p_scalar p = { .eps = eps };
	uint32_t ins[3] = { x, w, b };

	return gb_op(g, b == GB_BAD ? DJINN_GOP_RMSNORM : DJINN_GOP_LAYERNORM,
		     b == GB_BAD ? 2 : 3, ins, &p, sizeof(p));
}

static uint32_t reshape(struct gbuild *g, uint32_t x, unsigned int ndim, ...)
{
	struct djinn_p_shape p = { .ndim = ndim };
	va_list ap;

	va_start(ap, ndim);
	for (unsigned int i = 0; i < ndim; i++)
		p.dims[i] = va_arg(ap, int32_t);
	va_end(ap);
	return gb_op(g, DJINN_GOP_RESHAPE, 1, &x, &p, sizeof(p));
}

static uint32_t slice(struct gbuild *g, uint32_t x, int axis, int64_t start,
		      int64_t end)
{
	struct djinn_p_axis p = { .axis = axis, .start = start, .end = end };

	return gb_op(g, DJINN_GOP_SLICE, 1, &x, &p, sizeof(p));
}

static uint32_t concat(struct gbuild *g, unsigned int n, const uint32_t *x,
		       int axis)
{
	struct djinn_p_axis p = { .axis = axis };

	return gb_op(g, DJINN_GOP_CONCAT, n, x, &p, sizeof(p));
}

/* Concatenate any number of values, four at a time. */
static uint32_t concat_all(struct gbuild *g, uint32_t *x, unsigned int n,
			   int axis)
{
	while (n > 1) {
		unsigned int m = 0;

		for (unsigned int i = 0; i < n; i += 4) {
			unsigned int k = n - i < 4 ? n - i : 4;

			x[m++] = k == 1 ? x[i] : concat(g, k, &x[i], axis);
		}
		n = m;
	}
	return x[0];
}

/* Weight slot @k of layer @l (-1: global) as a graph input. */
static uint32_t weight(struct gbuild *g, const struct model_hold *h, int l,
		       unsigned int k)
{
	const struct model_weight *w = model_slot(&h->m->layout, l, k);

	return gb_input(g, model_weight_addr(h, l, k), h->m->layout.dtype,
			w->ndim, w->shape);
}

/*
 * Attention of one layer. q (T, H D), k and v (T, Hk D), new this step;
 * the cache's keys and values of layer @l are slots 2l and 2l + 1 of
 * @cache (P, 2L, Hk D), which the op reads in place (token-major, as
 * the projections leave q, k and v). Returns (T, H D).
 */
static uint32_t attend(struct gbuild *g, const struct model_config *c,
		       const struct fwd_args *a, uint32_t cache, int l,
		       uint32_t q, uint32_t k, uint32_t v)
{
	int32_t T = (int32_t)a->T, H = (int32_t)c->n_head;
	int32_t Hk = (int32_t)c->n_kv_head, D = (int32_t)c->head_dim;
	struct djinn_p_attention pa = { .causal = 1,
					.layout = DJINN_ATTN_TOKENS };
	uint32_t ins[4];

	/* reshapes are views: nothing is copied */
	ins[0] = reshape(g, q, 3, T, H, D);
	ins[1] = reshape(g, k, 3, T, Hk, D);
	ins[2] = reshape(g, v, 3, T, Hk, D);
	ins[3] = cache;
	if (a->P) {
		pa.cache_k = 2 * (uint32_t)l;
		pa.cache_v = 2 * (uint32_t)l + 1;
	}
	q = gb_op(g, DJINN_GOP_ATTENTION, a->P ? 4 : 3, ins, &pa, sizeof(pa));
	return reshape(g, q, 2, T, H * D);
}

/*
 * The outputs. With every layer run: the logits of the last (or every)
 * row of @x (T, C) after the final norm @nw (@nb: its bias, or GB_BAD
 * for RMSNorm), and the keys and values. Else the hidden state @x and
 * the keys and values of the layers run. @kv holds @nr_kv values (T, k,
 * Hk D) to concatenate along axis 1.
 */
static void finish(struct gbuild *g, const struct model_hold *h,
		   const struct fwd_args *a, uint32_t x, uint32_t nw,
		   uint32_t nb, uint32_t head, uint32_t *kv, unsigned int nr_kv)
{
	const struct model_config *c = &h->m->cfg;
	uint32_t all_kv;

	all_kv = concat_all(g, kv, nr_kv, 1);
	if (!(all_kv & GB_NODE)) /* just the first part's: a copy */
		all_kv = reshape(g, all_kv, 3, (int32_t)a->T,
				 (int32_t)(2 * c->n_layer),
				 (int32_t)(c->n_kv_head * c->head_dim));
	if (a->pause) {
		gb_output(g, x, DJINN_RES_ACTIVATION);
		gb_output(g, all_kv, DJINN_RES_KV_CACHE);
		return;
	}
	x = norm(g, x, nw, nb, c->eps);
	if (!a->all && a->T > 1)
		x = slice(g, x, 0, a->T - 1, a->T);
	gb_output(g, matmul(g, x, head, true), DJINN_RES_OUTPUT);
	/* (T, 1, Hk D) each -> (T, 2L, Hk D) */
	gb_output(g, all_kv, DJINN_RES_KV_CACHE);
}

/* The inputs every part shares: the hidden state entering layer l0, the
 * cache, and the first part's keys and values. @kv gets those. */
static uint32_t part_inputs(struct gbuild *g, const struct model_hold *h,
			    const struct fwd_args *a, uint32_t *cache,
			    uint32_t *kv, unsigned int *nr_kv)
{
	const struct model_config *c = &h->m->cfg;
	unsigned int dt = h->m->layout.dtype;
	uint64_t dims[3] = { a->P, 2 * c->n_layer,
			     (uint64_t)c->n_kv_head * c->head_dim };
	uint32_t x = GB_BAD;

	*cache = GB_BAD;
	*nr_kv = 0;
	if (a->P)
		*cache = gb_input(g, a->cache, dt, 3, dims);
	if (!a->l0)
		return x;
	dims[0] = a->T;
	dims[1] = c->n_embd;
	x = gb_input(g, a->hidden, dt, 2, dims);
	if (!a->pause) {
		dims[1] = 2 * a->l0;
		dims[2] = (uint64_t)c->n_kv_head * c->head_dim;
		kv[(*nr_kv)++] = gb_input(g, a->kv_in, dt, 3, dims);
	}
	return x;
}

/* ---------------------------------------------------------------------- */
/* GPT-2 */

static int build_gpt2(struct gbuild *g, const struct model_hold *h,
		      const struct fwd_args *a)
{
	const struct model_config *c = &h->m->cfg;
	int32_t T = (int32_t)a->T, C = (int32_t)c->n_embd;
	uint64_t dims[1] = { a->T };
	uint32_t x, ids, pos, cache, *kv;
	unsigned int nr_kv;

	kv = calloc(2 * c->n_layer + 1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	x = part_inputs(g, h, a, &cache, kv, &nr_kv);
	if (!a->l0) {
		/* x (T, C) = wte[ids] + wpe[pos] */
		ids = gb_input(g, a->ids, DJINN_DTYPE_I32, 1, dims);
		pos = gb_input(g, a->pos, DJINN_DTYPE_I32, 1, dims);
		x = op2(g, DJINN_GOP_ADD,
			op2(g, DJINN_GOP_EMBEDDING, weight(g, h, -1, GPT2_WTE),
			    ids),
			op2(g, DJINN_GOP_EMBEDDING, weight(g, h, -1, GPT2_WPE),
			    pos));
	}

	for (int l = (int)a->l0; l < (int)a->l1; l++) {
		uint32_t y, qkv, q, k, v;

		/* qkv (T, 3C) = ln_1(x) @ c_attn (C, 3C) + b */
		y = norm(g, x, weight(g, h, l, GPT2_LN1_W),
			 weight(g, h, l, GPT2_LN1_B), c->eps);
		qkv = op2(g, DJINN_GOP_ADD,
			  matmul(g, y, weight(g, h, l, GPT2_ATTN_W), false),
			  weight(g, h, l, GPT2_ATTN_B));
		q = slice(g, qkv, 1, 0, C);
		k = slice(g, qkv, 1, C, 2 * C);
		v = slice(g, qkv, 1, 2 * C, 3 * C);
		kv[nr_kv++] = reshape(g, k, 3, T, 1, C);
		kv[nr_kv++] = reshape(g, v, 3, T, 1, C);
		y = attend(g, c, a, cache, l, q, k, v);
		/* x += y @ c_proj (C, C) + b */
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(g, h, l, GPT2_APROJ_W), false),
			weight(g, h, l, GPT2_APROJ_B));
		x = op2(g, DJINN_GOP_ADD, x, y);
		/* x += gelu(ln_2(x) @ c_fc (C, F) + b) @ c_proj (F, C) + b */
		y = norm(g, x, weight(g, h, l, GPT2_LN2_W),
			 weight(g, h, l, GPT2_LN2_B), c->eps);
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(g, h, l, GPT2_FC_W), false),
			weight(g, h, l, GPT2_FC_B));
		y = unary(g, DJINN_GOP_GELU, y);
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(g, h, l, GPT2_MPROJ_W), false),
			weight(g, h, l, GPT2_MPROJ_B));
		x = op2(g, DJINN_GOP_ADD, x, y);
	}
	/* logits = ln_f(x) @ wte^T (tied) or lm_head^T */
	if (!a->pause)
		finish(g, h, a, x, weight(g, h, -1, GPT2_LNF_W),
		       weight(g, h, -1, GPT2_LNF_B),
		       weight(g, h, -1, GPT2_LM_HEAD), kv, nr_kv);
	else
		finish(g, h, a, x, GB_BAD, GB_BAD, GB_BAD, kv, nr_kv);
	free(kv);
	return g->err;
}

/* ---------------------------------------------------------------------- */
/* Llama */

/* RoPE on x (T, n, D), Hugging Face's rotate_half convention:
 * x cos + cat(-x2, x1) sin, cos and sin (T, 1, D) */
static uint32_t rope(struct gbuild *g, uint32_t x, uint32_t cos, uint32_t sin,
		     int32_t D)
{
	uint32_t half[2];

	half[0] = scale(g, slice(g, x, 2, D / 2, D), -1.0f);
	half[1] = slice(g, x, 2, 0, D / 2);
	return op2(g, DJINN_GOP_ADD, op2(g, DJINN_GOP_MUL, x, cos),
		   op2(g, DJINN_GOP_MUL, concat(g, 2, half, 2), sin));
}

/* y (T, N) = x (T, K) @ W^T, W (N, K) a Linear weight, + its bias slot
 * @kb unless the configuration has none */
static uint32_t linear(struct gbuild *g, const struct model_hold *h, int l,
		       uint32_t x, unsigned int kw, unsigned int kb)
{
	uint32_t y = matmul(g, x, weight(g, h, l, kw), true);

	if (model_slot(&h->m->layout, l, kb)->unused)
		return y;
	return op2(g, DJINN_GOP_ADD, y, weight(g, h, l, kb));
}

/*
 * q or k (T, n D) of layer @l: (qwen3) a per-head RMSNorm with slot
 * @kn, then RoPE; back to (T, n D).
 */
static uint32_t position(struct gbuild *g, const struct model_hold *h, int l,
			 uint32_t x, int32_t T, int32_t n, unsigned int kn,
			 uint32_t cos, uint32_t sin)
{
	const struct model_config *c = &h->m->cfg;
	int32_t D = (int32_t)c->head_dim;

	x = reshape(g, x, 3, T, n, D);
	if (c->qk_norm)
		x = norm(g, x, weight(g, h, l, kn), GB_BAD, c->eps);
	return reshape(g, rope(g, x, cos, sin, D), 2, T, n * D);
}

/*
 * The llama family: llama, qwen2 (q/k/v biases), qwen3 (q/k norms),
 * mistral (a sliding window no context is longer than).
 */
static int build_llama(struct gbuild *g, const struct model_hold *h,
		       const struct fwd_args *a)
{
	const struct model_config *c = &h->m->cfg;
	int32_t H = (int32_t)c->n_head, Hk = (int32_t)c->n_kv_head;
	uint64_t dims[3] = { a->T, 1, c->head_dim };
	uint32_t x, ids, cos = GB_BAD, sin = GB_BAD, cache, *kv;
	unsigned int dt = h->m->layout.dtype, nr_kv;
	int32_t T = (int32_t)a->T;

	kv = calloc(2 * c->n_layer + 1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	if (a->l0 < a->l1) {
		cos = gb_input(g, a->cos, dt, 3, dims);
		sin = gb_input(g, a->sin, dt, 3, dims);
	}
	x = part_inputs(g, h, a, &cache, kv, &nr_kv);
	if (!a->l0) {
		/* x (T, C) = embed[ids] */
		ids = gb_input(g, a->ids, DJINN_DTYPE_I32, 1, dims);
		x = op2(g, DJINN_GOP_EMBEDDING, weight(g, h, -1, LLAMA_EMBED),
			ids);
	}

	for (int l = (int)a->l0; l < (int)a->l1; l++) {
		uint32_t y, q, k, v, gate;

		/* q (T, H D), k, v (T, Hk D) from rmsnorm(x); Linear: W^T */
		y = norm(g, x, weight(g, h, l, LLAMA_IN_NORM), GB_BAD, c->eps);
		q = linear(g, h, l, y, LLAMA_Q, LLAMA_Q_B);
		k = linear(g, h, l, y, LLAMA_K, LLAMA_K_B);
		v = linear(g, h, l, y, LLAMA_V, LLAMA_V_B);
		q = position(g, h, l, q, T, H, LLAMA_Q_NORM, cos, sin);
		k = position(g, h, l, k, T, Hk, LLAMA_K_NORM, cos, sin);
		kv[nr_kv++] = reshape(g, k, 3, T, 1, Hk * (int32_t)c->head_dim);
		kv[nr_kv++] = reshape(g, v, 3, T, 1, Hk * (int32_t)c->head_dim);
		y = attend(g, c, a, cache, l, q, k, v);
		x = op2(g, DJINN_GOP_ADD, x,
			linear(g, h, l, y, LLAMA_O, LLAMA_O_B));
		/* x += down(silu(gate(y)) * up(y)), y = rmsnorm(x) */
		y = norm(g, x, weight(g, h, l, LLAMA_POST_NORM), GB_BAD,
			 c->eps);
		gate = unary(g, DJINN_GOP_SILU,
			     linear(g, h, l, y, LLAMA_GATE, LLAMA_GATE_B));
		y = op2(g, DJINN_GOP_MUL, gate,
			linear(g, h, l, y, LLAMA_UP, LLAMA_UP_B));
		x = op2(g, DJINN_GOP_ADD, x,
			linear(g, h, l, y, LLAMA_DOWN, LLAMA_DOWN_B));
	}
	if (!a->pause)
		finish(g, h, a, x, weight(g, h, -1, LLAMA_NORM), GB_BAD,
		       weight(g, h, -1, LLAMA_LM_HEAD), kv, nr_kv);
	else
		finish(g, h, a, x, GB_BAD, GB_BAD, GB_BAD, kv, nr_kv);
	free(kv);
	return g->err;
}

int model_build_forward(struct gbuild *g, const struct model_hold *h,
			const struct fwd_args *a)
{
	struct fwd_args b = *a;

	if (!b.l1)
		b.l1 = h->m->cfg.n_layer;
	if (b.l0 > b.l1 || b.l1 > h->m->cfg.n_layer ||
	    (b.pause ? b.l0 == b.l1 : b.l1 < h->m->cfg.n_layer))
		return -EINVAL;
	g->phase = b.P && b.T == 1 ? DJINN_PHASE_DECODE : DJINN_PHASE_PREFILL;
	return h->m->cfg.arch == MODEL_GPT2 ? build_gpt2(g, h, &b) :
					      build_llama(g, h, &b);
}
