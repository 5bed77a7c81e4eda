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
 * it in place, after them the step's own keys and values, one varlen
 * node over every context of the graph (DJINN_ATTN_VARLEN, token-major
 * per context); its causal mask with S > T is the query offset a decode
 * step needs. Reshapes, and slices of one row, are views in the
 * executor: they copy nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
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

struct gbuild *gb_new(void)
{
	struct gbuild *g = malloc(sizeof(*g));

	if (g) {
		g->nr_in = g->nr_nodes = g->nr_out = 0;
		g->phase = 0;
		g->err = 0;
		g->owner = NULL;
		g->host_mem = NULL;
		g->plans = NULL;
	}
	return g;
}

void gb_free(struct gbuild *g)
{
	if (g)
		free(g->host_mem);
	free(g);
}

uint32_t gb_host_input(struct gbuild *g, const void *host, unsigned int dtype,
		       unsigned int ndim, const uint64_t *dims)
{
	uint32_t t = gb_input(g, 0, dtype, ndim, dims);

	if (t != GB_BAD)
		g->in[t].host = host;
	return t;
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

void gb_output_place(struct gbuild *g, uint32_t v, unsigned int residency,
		     uint64_t into, void *host)
{
	if (g->err)
		return;
	if (!(v & GB_NODE) || v == GB_BAD ||
	    g->nr_out == DJINN_MAX_GRAPH_OUTPUTS) {
		g->err = -EINVAL;
		return;
	}
	g->nodes[v & ~GB_NODE].residency = (uint8_t)residency;
	g->out_s[g->nr_out] = g->owner;
	g->place[g->nr_out].into = into;
	g->place[g->nr_out].host = into ? NULL : host;
	g->out[g->nr_out++] = v & ~GB_NODE;
}

void gb_output(struct gbuild *g, uint32_t v, unsigned int residency)
{
	gb_output_place(g, v, residency, 0, NULL);
}

/* ---------------------------------------------------------------------- */
/* Plans kept (struct fwd_plans) */

/*
 * struct plan - one graph as gb_run() checked and planned it
 * @hash:   graph_hash() of what follows, compared first
 * @nr_in, @nr_nodes, @nr_out, @v: what it is, with
 * @in:     its inputs' descs, @host: which are in host memory
 * @nodes:  as built (gbuild's, GB_NODE-tagged), @out: its outputs,
 *          @kind: per output, its place's kind (PLACE_*)
 * @buf, @view: the graph serialized and parsed; @nd: the nodes' shapes;
 *          @plan: graph_plan()'s
 * @users:  steps running it now; @used: when it was last found
 */
enum { PLACE_REGION, PLACE_INTO, PLACE_HOST };

struct plan {
	uint64_t hash;
	uint32_t nr_in, nr_nodes, nr_out;
	const struct vmu *v;
	struct djinn_tensor_desc *in;
	uint8_t *host;
	struct djinn_node *nodes;
	uint32_t out[DJINN_MAX_GRAPH_OUTPUTS];
	uint8_t kind[DJINN_MAX_GRAPH_OUTPUTS];
	uint64_t *buf;
	struct djinn_graph_view view;
	struct djinn_tensor_desc *nd;
	struct graph_plan plan;
	unsigned int users;
	uint64_t used;
};

struct fwd_plans {
	pthread_mutex_t lock;
	struct plan *p[FWD_PLANS_MAX];
	uint64_t clock, kept, planned;
};

static void plan_free(struct plan *p)
{
	if (!p)
		return;
	free(p->in);
	free(p->host);
	free(p->nodes);
	free(p->buf);
	free(p->nd);
	graph_plan_free(&p->plan);
	free(p);
}

struct fwd_plans *fwd_plans_new(void)
{
	struct fwd_plans *ps = calloc(1, sizeof(*ps));

	if (ps)
		pthread_mutex_init(&ps->lock, NULL);
	return ps;
}

void fwd_plans_free(struct fwd_plans *ps)
{
	if (!ps)
		return;
	for (unsigned int i = 0; i < FWD_PLANS_MAX; i++)
		plan_free(ps->p[i]);
	pthread_mutex_destroy(&ps->lock);
	free(ps);
}

void fwd_plans_stats(struct fwd_plans *ps, uint64_t *kept, uint64_t *planned)
{
	pthread_mutex_lock(&ps->lock);
	*kept = ps->kept;
	*planned = ps->planned;
	pthread_mutex_unlock(&ps->lock);
}

static uint8_t place_kind(const struct graph_place *pl)
{
	return pl->into ? PLACE_INTO : pl->host ? PLACE_HOST : PLACE_REGION;
}

static uint64_t mix(uint64_t h, const void *bytes, size_t len)
{
	const uint8_t *b = bytes;
	uint64_t w;

	for (; len >= 8; b += 8, len -= 8) {
		memcpy(&w, b, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 29;
	}
	for (; len; b++, len--)
		h = (h ^ *b) * 0x100000001b3ull;
	return h;
}

/* What plan_is() compares, hashed: the graphs a model runs look alike
 * for most of their bytes (a streamed model's layers differ in one
 * node's parameters), so a lookup compares hashes, not bytes, until
 * one matches. */
static uint64_t graph_hash(const struct gbuild *g, const struct vmu *v)
{
	uint64_t h = mix(0, &v, sizeof(v));

	h = mix(h, g->nodes, g->nr_nodes * sizeof(g->nodes[0]));
	h = mix(h, g->out, g->nr_out * sizeof(g->out[0]));
	for (uint32_t k = 0; k < g->nr_out; k++) {
		uint8_t kind = place_kind(&g->place[k]);

		h = mix(h, &kind, 1);
	}
	for (uint32_t i = 0; i < g->nr_in; i++) {
		uint8_t host = !!g->in[i].host;

		h = mix(h, &g->in[i].desc, sizeof(g->in[i].desc));
		h = mix(h, &host, 1);
	}
	return h;
}

/* Whether @p is @g's graph (hashed @hash) on @v. */
static bool plan_is(const struct plan *p, const struct gbuild *g, uint64_t hash,
		    const struct vmu *v)
{
	if (p->hash != hash || p->nr_in != g->nr_in ||
	    p->nr_nodes != g->nr_nodes || p->nr_out != g->nr_out || p->v != v)
		return false;
	if (memcmp(p->out, g->out, g->nr_out * sizeof(g->out[0])))
		return false;
	for (uint32_t k = 0; k < g->nr_out; k++)
		if (p->kind[k] != place_kind(&g->place[k]))
			return false;
	for (uint32_t i = 0; i < g->nr_in; i++)
		if (p->host[i] != !!g->in[i].host ||
		    memcmp(&p->in[i], &g->in[i].desc, sizeof(p->in[i])))
			return false;
	return !memcmp(p->nodes, g->nodes, g->nr_nodes * sizeof(g->nodes[0]));
}

/* The plan kept for @g's graph (hashed @hash), now in use by the
 * caller; or NULL. */
static struct plan *plans_find(struct fwd_plans *ps, const struct gbuild *g,
			       uint64_t hash, const struct vmu *v)
{
	struct plan *found = NULL;

	pthread_mutex_lock(&ps->lock);
	for (unsigned int i = 0; i < FWD_PLANS_MAX && !found; i++)
		if (ps->p[i] && plan_is(ps->p[i], g, hash, v))
			found = ps->p[i];
	if (found) {
		found->users++;
		found->used = ++ps->clock;
		ps->kept++;
	} else {
		ps->planned++;
	}
	pthread_mutex_unlock(&ps->lock);
	return found;
}

/* Keep @p (in use by the caller) in a free slot or in place of the
 * least recently used plan nobody runs: true if kept. */
static bool plans_keep(struct fwd_plans *ps, struct plan *p)
{
	struct plan **slot = NULL;

	pthread_mutex_lock(&ps->lock);
	for (unsigned int i = 0; i < FWD_PLANS_MAX; i++) {
		struct plan **q = &ps->p[i];

		if (!*q) {
			slot = q;
			break;
		}
		if (!(*q)->users && (!slot || (*q)->used < (*slot)->used))
			slot = q;
	}
	if (slot) {
		plan_free(*slot);
		*slot = p;
		p->users = 1;
		p->used = ++ps->clock;
	}
	pthread_mutex_unlock(&ps->lock);
	return slot != NULL;
}

static void plans_done(struct fwd_plans *ps, struct plan *p)
{
	pthread_mutex_lock(&ps->lock);
	p->users--;
	pthread_mutex_unlock(&ps->lock);
}

/*
 * @g's graph serialized, parsed, inferred and planned into a new plan
 * (@v: graph_plan()'s), its key copied from @g; NULL with @msg on
 * failure (*@err).
 */
static struct plan *plan_make(const struct gbuild *g, struct vmu *v, int *err,
			      char *msg, size_t msglen)
{
	size_t out_len = ((size_t)g->nr_out * 4 + 7) & ~(size_t)7;
	size_t len = sizeof(struct djinn_graph) +
		     g->nr_in * sizeof(struct djinn_ref) +
		     g->nr_nodes * sizeof(struct djinn_node) + out_len;
	struct plan *p = calloc(1, sizeof(*p));
	struct djinn_graph *gr;
	struct djinn_ref *refs;
	struct djinn_node *nodes;
	uint32_t *outs;
	int ret = -ENOMEM;

	if (!p)
		goto fail;
	p->nr_in = g->nr_in;
	p->nr_nodes = g->nr_nodes;
	p->nr_out = g->nr_out;
	p->v = v;
	p->buf = calloc(1, (len + 7) & ~(size_t)7);
	p->in = calloc(g->nr_in ? g->nr_in : 1, sizeof(*p->in));
	p->host = calloc(g->nr_in ? g->nr_in : 1, 1);
	p->nodes = malloc(g->nr_nodes * sizeof(*p->nodes));
	p->nd = calloc(g->nr_nodes, sizeof(*p->nd));
	if (!p->buf || !p->in || !p->host || !p->nodes || !p->nd)
		goto fail;
	memcpy(p->nodes, g->nodes, g->nr_nodes * sizeof(*p->nodes));
	memcpy(p->out, g->out, g->nr_out * sizeof(g->out[0]));
	for (uint32_t k = 0; k < g->nr_out; k++)
		p->kind[k] = place_kind(&g->place[k]);

	gr = (struct djinn_graph *)p->buf;
	gr->nr_inputs = g->nr_in;
	gr->nr_nodes = g->nr_nodes;
	gr->nr_outputs = g->nr_out;
	refs = (struct djinn_ref *)(gr + 1);
	nodes = (struct djinn_node *)(refs + g->nr_in);
	outs = (uint32_t *)(nodes + g->nr_nodes);
	for (uint32_t i = 0; i < g->nr_in; i++) {
		refs[i].id = i;
		refs[i].kind = DJINN_REF_HANDLE;
		p->in[i] = g->in[i].desc;
		p->host[i] = !!g->in[i].host;
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

	ret = djinn_graph_parse(p->buf, len, &p->view, msg, msglen);
	if (!ret)
		ret = djinn_graph_infer_own(&p->view, p->in, p->nd, msg,
					    msglen);
	if (!ret)
		ret = graph_plan(&p->view, p->nd, g->place, v, &p->plan);
	if (!ret)
		return p;
fail:
	plan_free(p);
	*err = ret;
	return NULL;
}

int gb_run(struct gbuild *g, const struct model_env *env, struct vmu_session *s,
	   struct graph_result *res, struct djinn_tensor_desc *descs, char *msg,
	   size_t msglen)
{
	/* decode steps only: a prefill's arithmetic dwarfs its planning,
	 * and its graph changes with its number of tokens */
	bool keep = g->plans && g->phase == DJINN_PHASE_DECODE, kept = false;
	struct plan *p = NULL;
	uint64_t hash = 0;
	int ret = 0;

	if (g->err) {
		snprintf(msg, msglen, "building the graph: %s",
			 strerror(-g->err));
		return g->err;
	}
	if (keep) {
		hash = graph_hash(g, env->v);
		p = plans_find(g->plans, g, hash, env->v);
	}
	kept = p != NULL;
	if (!p) {
		p = plan_make(g, env->v, &ret, msg, msglen);
		if (!p)
			return ret;
		p->hash = hash;
		kept = keep && plans_keep(g->plans, p);
	}
	for (uint32_t k = 0; k < g->nr_out; k++)
		if (!g->out_s[k])
			g->out_s[k] = s;
	ret = graph_run_owned(env->v, env->st, env->b, g->out_s, &p->view,
			      g->in, g->place, p->nd, &p->plan, res, msg,
			      msglen);
	if (!ret)
		for (uint32_t k = 0; k < g->nr_out; k++)
			descs[k] = p->nd[g->out[k]];
	if (kept)
		plans_done(g->plans, p);
	else
		plan_free(p);
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

/*
 * The builder's state: the step's contexts, their rows stacked in one
 * value (context i's are rows row0[i] .. row0[i] + T - 1), and per
 * context the keys and values to concatenate into its output.
 */
struct fb {
	struct gbuild *g;
	const struct model_hold *h;
	const struct model_config *c;
	const struct fwd_args *a;
	uint32_t rows;
	uint32_t row0[FWD_MAX_SEQ];
	uint32_t table; /* the contexts' varlen attention's table */
	/* the new keys and values, every context's rows stacked: values
	 * (rows, k, Hk D) to concatenate along axis 1 */
	uint32_t kv[2 * MODEL_MAX_LAYERS + 1];
	unsigned int nr_kv;
	uint8_t *host; /* g->host_mem: the stacked host inputs */
};

/* Weight slot @k of layer @l (-1: global) as a graph input: in the text
 * entry, or in the ring slot of a streamed layer. */
/* Where layer @l's slot @k is: in the ring slot of a streamed layer,
 * or in the text entry. */
static uint64_t slot_addr(struct fb *f, int l, unsigned int k)
{
	const struct model_layout *L = &f->h->m->layout;

	if (f->a->lbase && l == (int)f->a->l0)
		return f->a->lbase + model_slot(L, l, k)->off -
		       model_layer_start(L, f->c->n_layer, (uint32_t)l);
	return model_weight_addr(f->h, l, k);
}

static uint32_t weight(struct fb *f, int l, unsigned int k)
{
	const struct model_layout *L = &f->h->m->layout;
	const struct model_weight *w = model_slot(L, l, k);

	return gb_input(f->g, slot_addr(f, l, k), L->dtype, w->ndim, w->shape);
}

/* Context @i's rows of @x: all of them when it is alone (a view). */
static uint32_t rows_of(struct fb *f, uint32_t x, uint32_t i)
{
	if (f->a->nr_seq == 1)
		return x;
	return slice(f->g, x, 0, f->row0[i], f->row0[i] + f->a->seq[i].T);
}

/* Queue @x (rows, k, Hk D) for the keys and values. */
static void kv_add(struct fb *f, uint32_t x)
{
	f->kv[f->nr_kv++] = x;
}

/*
 * One of the contexts' host inputs (@off: the struct fwd_seq field, its
 * rows @row bytes each) as one graph input (@ndim, @dims: the shape of
 * one row, dims[0] set here): every context's rows stacked in g's host
 * memory, or a context alone's own.
 */
static uint32_t host_rows(struct fb *f, size_t off, size_t row,
			  unsigned int dtype, unsigned int ndim, uint64_t *dims)
{
	const struct fwd_args *a = f->a;
	const void *src =
		*(const void *const *)((const uint8_t *)&a->seq[0] + off);
	uint8_t *at = f->host;

	dims[0] = f->rows;
	if (a->nr_seq > 1) {
		for (uint32_t i = 0; i < a->nr_seq; i++) {
			const void *p =
				*(const void *const
					  *)((const uint8_t *)&a->seq[i] + off);

			memcpy(at, p, a->seq[i].T * row);
			at += a->seq[i].T * row;
		}
		src = f->host;
		f->host = at;
	}
	return gb_host_input(f->g, src, dtype, ndim, dims);
}

/*
 * The new keys and values of layer @l, k and v (rows, Hk D), go to each
 * context's list, and every context attends with its own rows of q, k
 * and v: (rows, H D), in one varlen node over the contexts' table (one
 * context too), each context's rows as token-major attention over its
 * own cache would give them alone. Its cache's length is in the table,
 * not in a shape: a context's decode step is the same graph at every
 * length, which is what lets its plan be kept (struct fwd_plans).
 */
static uint32_t attend_all(struct fb *f, int l, uint32_t q, uint32_t k,
			   uint32_t v)
{
	int32_t H = (int32_t)f->c->n_head, Hk = (int32_t)f->c->n_kv_head;
	int32_t D = (int32_t)f->c->head_dim, R = (int32_t)f->rows;
	struct djinn_p_attention pa = { .causal = 1,
					.layout = DJINN_ATTN_VARLEN,
					.cache_k = 2 * (uint32_t)l,
					.cache_v = 2 * (uint32_t)l + 1 };
	uint32_t ins[4];

	kv_add(f, reshape(f->g, k, 3, R, 1, Hk * D));
	kv_add(f, reshape(f->g, v, 3, R, 1, Hk * D));
	ins[0] = reshape(f->g, q, 3, R, H, D);
	ins[1] = reshape(f->g, k, 3, R, Hk, D);
	ins[2] = reshape(f->g, v, 3, R, Hk, D);
	ins[3] = f->table;
	q = gb_op(f->g, DJINN_GOP_ATTENTION, 4, ins, &pa, sizeof(pa));
	return reshape(f->g, q, 2, R, H * D);
}

/*
 * The outputs, two per context. Contexts whose step ends here get the
 * logits of their last (or every) row of @x (rows, C) after the final
 * norm @nw (@nb: its bias, or GB_BAD for RMSNorm), all of them through
 * one product with @head, or the token sampled from them (one SAMPLE
 * node for all that sample); the others the hidden state @x. Then each
 * one's rows of the keys and values, all of them concatenated along
 * axis 1.
 */
static void finish(struct fb *f, uint32_t x, unsigned int kw, int kb,
		   unsigned int khead)
{
	const struct model_config *c = f->c;
	const struct fwd_args *a = f->a;
	struct gbuild *g = f->g;
	uint32_t sel[FWD_MAX_SEQ], xn = GB_BAD, logits = GB_BAD, at = 0;
	uint32_t all_kv, tokens = GB_BAD;
	unsigned int nh = 0, ns = 0, k = 0;

	for (uint32_t i = 0; i < a->nr_seq; i++) {
		const struct fwd_seq *sq = &a->seq[i];
		uint32_t r;

		if (!sq->head)
			continue;
		if (xn == GB_BAD)
			xn = norm(g, x, weight(f, -1, kw),
				  kb < 0 ? GB_BAD : weight(f, -1, (unsigned)kb),
				  c->eps);
		r = rows_of(f, xn, i);
		if (!sq->all && sq->T > 1)
			r = slice(g, r, 0, sq->T - 1, sq->T);
		sel[nh++] = r;
	}
	if (nh)
		logits = matmul(g, concat_all(g, sel, nh, 0),
				weight(f, -1, khead), true);
	/* the rows that sample: the logits' first rows (struct fwd_seq:
	 * those contexts come first), all of them when every one samples */
	for (uint32_t i = 0; i < a->nr_seq; i++) {
		const struct fwd_seq *sq = &a->seq[i];

		if (!sq->head)
			continue;
		if (sq->sample && !sq->all) {
			if (at != ns && !g->err)
				g->err = -EINVAL; /* after a logits row */
			g->sample[ns++] = *sq->sample;
		}
		at += sq->all ? sq->T : 1;
	}
	if (ns) {
		uint64_t pdims[2] = { ns, sizeof(g->sample[0]) };
		uint32_t ins[2];

		ins[0] = ns == at ? logits : slice(g, logits, 0, 0, ns);
		ins[1] = gb_host_input(g, g->sample, DJINN_DTYPE_U8, 2, pdims);
		tokens = gb_op(g, DJINN_GOP_SAMPLE, 2, ins, NULL, 0);
	}
	/* (rows, k, Hk D) each -> (rows, 2 l1, Hk D) */
	all_kv = concat_all(g, f->kv, f->nr_kv, 1);
	if (!(all_kv & GB_NODE)) /* just the parts' before: a copy */
		all_kv = reshape(g, all_kv, 3, (int32_t)f->rows,
				 (int32_t)(2 * a->l1),
				 (int32_t)(c->n_kv_head * c->head_dim));
	at = 0;
	for (uint32_t i = 0; i < a->nr_seq; i++) {
		const struct fwd_seq *sq = &a->seq[i];

		g->owner = sq->s;
		if (sq->head && sq->sample && !sq->all) {
			gb_output_place(g,
					ns == 1 ? tokens :
						  slice(g, tokens, 0, k, k + 1),
					DJINN_RES_OUTPUT, 0, sq->token_host);
			k++;
			at++;
		} else if (sq->head) {
			uint32_t n = sq->all ? sq->T : 1;

			gb_output_place(g,
					nh == 1 ?
						logits :
						slice(g, logits, 0, at, at + n),
					DJINN_RES_OUTPUT, 0, sq->logits_host);
			at += n;
		} else {
			gb_output(g, rows_of(f, x, i), DJINN_RES_ACTIVATION);
		}
		gb_output_place(g, rows_of(f, all_kv, i), DJINN_RES_KV_CACHE,
				sq->head ? sq->kv_into : 0, NULL);
	}
	g->owner = NULL;
}

/*
 * Every context's inputs: its row of the varlen table (its cache), and
 * from layer l0 > 0 the hidden state entering it and the parts' keys
 * and values before it. Returns the hidden states stacked: from layer 0,
 * what @embed makes of the stacked ids.
 */
static uint32_t inputs(struct fb *f, uint32_t (*embed)(struct fb *f))
{
	const struct model_config *c = f->c;
	const struct fwd_args *a = f->a;
	struct gbuild *g = f->g;
	unsigned int dt = f->h->m->layout.dtype;
	uint64_t HkD = (uint64_t)c->n_kv_head * c->head_dim;
	uint64_t tdims[2] = { a->nr_seq, DJINN_VARLEN_COLS };
	uint32_t x[FWD_MAX_SEQ], kv[FWD_MAX_SEQ];
	size_t host = 0;

	f->rows = 0;
	f->nr_kv = 0;
	for (uint32_t i = 0; i < a->nr_seq; i++) {
		const struct fwd_seq *sq = &a->seq[i];

		f->row0[i] = f->rows;
		f->rows += sq->T;
		g->varlen[i][DJINN_VARLEN_T] = sq->T;
		g->varlen[i][DJINN_VARLEN_P] = sq->P;
		g->varlen[i][DJINN_VARLEN_CACHE] = sq->P ? (int64_t)sq->cache :
							   0;
		g->varlen[i][DJINN_VARLEN_STRIDE] =
			(int64_t)(2 * c->n_layer * HkD);
	}
	f->table = gb_host_input(g, g->varlen, DJINN_DTYPE_I64, 2, tdims);
	if (a->nr_seq > 1) {
		/* room for the stacked ids and positions, or cos and sin */
		host = 2 * (size_t)f->rows *
		       ((size_t)c->head_dim * djinn_dtype_size(dt) +
			sizeof(int32_t));
		free(g->host_mem);
		f->host = g->host_mem = malloc(host);
		if (!f->host && !g->err)
			g->err = -ENOMEM;
	}
	if (!a->l0)
		return embed(f);
	for (uint32_t i = 0; i < a->nr_seq; i++) {
		const struct fwd_seq *sq = &a->seq[i];
		uint64_t dims[3] = { sq->T, c->n_embd, 0 };

		x[i] = gb_input(g, sq->hidden, dt, 2, dims);
		dims[1] = 2 * a->l0;
		dims[2] = HkD;
		kv[i] = gb_input(g, sq->kv_in, dt, 3, dims);
	}
	kv_add(f, concat_all(g, kv, a->nr_seq, 0));
	return concat_all(g, x, a->nr_seq, 0);
}

/* ---------------------------------------------------------------------- */
/* GPT-2 */

/* x (rows, C) = wte[ids] + wpe[pos] */
static uint32_t embed_gpt2(struct fb *f)
{
	uint64_t dims[1];
	uint32_t ids, pos;

	ids = host_rows(f, offsetof(struct fwd_seq, ids), sizeof(int32_t),
			DJINN_DTYPE_I32, 1, dims);
	pos = host_rows(f, offsetof(struct fwd_seq, pos), sizeof(int32_t),
			DJINN_DTYPE_I32, 1, dims);
	return op2(f->g, DJINN_GOP_ADD,
		   op2(f->g, DJINN_GOP_EMBEDDING, weight(f, -1, GPT2_WTE), ids),
		   op2(f->g, DJINN_GOP_EMBEDDING, weight(f, -1, GPT2_WPE),
		       pos));
}

static void build_gpt2(struct fb *f)
{
	const struct model_config *c = f->c;
	int32_t C = (int32_t)c->n_embd;
	struct gbuild *g = f->g;
	uint32_t x;

	x = inputs(f, embed_gpt2);
	for (int l = (int)f->a->l0; l < (int)f->a->l1; l++) {
		uint32_t y, qkv, q, k, v;

		/* qkv (T, 3C) = ln_1(x) @ c_attn (C, 3C) + b */
		y = norm(g, x, weight(f, l, GPT2_LN1_W),
			 weight(f, l, GPT2_LN1_B), c->eps);
		qkv = op2(g, DJINN_GOP_ADD,
			  matmul(g, y, weight(f, l, GPT2_ATTN_W), false),
			  weight(f, l, GPT2_ATTN_B));
		q = slice(g, qkv, 1, 0, C);
		k = slice(g, qkv, 1, C, 2 * C);
		v = slice(g, qkv, 1, 2 * C, 3 * C);
		y = attend_all(f, l, q, k, v);
		/* x += y @ c_proj (C, C) + b */
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(f, l, GPT2_APROJ_W), false),
			weight(f, l, GPT2_APROJ_B));
		x = op2(g, DJINN_GOP_ADD, x, y);
		/* x += gelu(ln_2(x) @ c_fc (C, F) + b) @ c_proj (F, C) + b */
		y = norm(g, x, weight(f, l, GPT2_LN2_W),
			 weight(f, l, GPT2_LN2_B), c->eps);
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(f, l, GPT2_FC_W), false),
			weight(f, l, GPT2_FC_B));
		y = unary(g, DJINN_GOP_GELU, y);
		y = op2(g, DJINN_GOP_ADD,
			matmul(g, y, weight(f, l, GPT2_MPROJ_W), false),
			weight(f, l, GPT2_MPROJ_B));
		x = op2(g, DJINN_GOP_ADD, x, y);
	}
	/* logits = ln_f(x) @ wte^T (tied) or lm_head^T */
	finish(f, x, GPT2_LNF_W, GPT2_LNF_B, GPT2_LM_HEAD);
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
static uint32_t linear(struct fb *f, int l, uint32_t x, unsigned int kw,
		       unsigned int kb)
{
	uint32_t y = matmul(f->g, x, weight(f, l, kw), true);

	if (model_slot(&f->h->m->layout, l, kb)->unused)
		return y;
	return op2(f->g, DJINN_GOP_ADD, y, weight(f, l, kb));
}

/*
 * Whether layer @l's slots @k0 .. @k0 + @n - 1 are one weight, their
 * rows stacked (*@rows of them): they lie back to back in the text
 * entry (every weight starts MODEL_ALIGN-aligned: when their bytes are
 * multiples of it) and all are there.
 */
static bool joinable(struct fb *f, int l, unsigned int k0, unsigned int n,
		     uint64_t *rows)
{
	const struct model_layout *L = &f->h->m->layout;
	const struct model_weight *w0 = model_slot(L, l, k0);
	size_t es = djinn_dtype_size(L->dtype);
	uint64_t end = w0->off;

	*rows = 0;
	for (unsigned int j = 0; j < n; j++) {
		const struct model_weight *w = model_slot(L, l, k0 + j);
		uint64_t elems = w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1);

		if (w->unused || w->ndim != w0->ndim ||
		    (w->ndim == 2 && w->shape[1] != w0->shape[1]) ||
		    w->off != end)
			return false;
		*rows += w->shape[0];
		end += elems * es;
	}
	return true;
}

/* Those slots as one graph input (joinable() said they are). */
static uint32_t joined(struct fb *f, int l, unsigned int k0, uint64_t rows)
{
	const struct model_layout *L = &f->h->m->layout;
	const struct model_weight *w0 = model_slot(L, l, k0);
	uint64_t dims[2] = { rows, w0->shape[1] };

	return gb_input(f->g, slot_addr(f, l, k0), L->dtype, w0->ndim, dims);
}

/*
 * @n Linear layers of the same input: @x (rows, C) times each of the
 * weights @k0 .. (rows of theirs), plus each bias @b0 .. when the model
 * has them, into @out[n]. One matrix product for all of them when their
 * weights (and biases) lie back to back (joined()), the result split
 * along its last axis (views when rows is 1: a decode step's); else one
 * each.
 */
static void linears(struct fb *f, int l, uint32_t x, unsigned int k0,
		    unsigned int b0, unsigned int n, uint32_t *out)
{
	const struct model_layout *L = &f->h->m->layout;
	unsigned int biases = 0;
	uint64_t wrows, brows = 0;
	int64_t at = 0;

	for (unsigned int j = 0; j < n; j++)
		biases += !model_slot(L, l, b0 + j)->unused;
	/* one product only when all the biases or none are there */
	if (!joinable(f, l, k0, n, &wrows) || (biases && biases != n) ||
	    (biases && !joinable(f, l, b0, n, &brows))) {
		for (unsigned int j = 0; j < n; j++)
			out[j] = linear(f, l, x, k0 + j, b0 + j);
		return;
	}
	x = matmul(f->g, x, joined(f, l, k0, wrows), true);
	if (biases)
		x = op2(f->g, DJINN_GOP_ADD, x, joined(f, l, b0, brows));
	for (unsigned int j = 0; j < n; j++) {
		int64_t rows = (int64_t)model_slot(L, l, k0 + j)->shape[0];

		out[j] = slice(f->g, x, 1, at, at + rows);
		at += rows;
	}
}

/*
 * q or k (rows, n D) of layer @l: (qwen3) a per-head RMSNorm with slot
 * @kn, then RoPE; back to (rows, n D).
 */
static uint32_t position(struct fb *f, int l, uint32_t x, int32_t n,
			 unsigned int kn, uint32_t cos, uint32_t sin)
{
	int32_t D = (int32_t)f->c->head_dim, R = (int32_t)f->rows;

	x = reshape(f->g, x, 3, R, n, D);
	if (f->c->qk_norm)
		x = norm(f->g, x, weight(f, l, kn), GB_BAD, f->c->eps);
	return reshape(f->g, rope(f->g, x, cos, sin, D), 2, R, n * D);
}

/* x (rows, C) = embed[ids] */
static uint32_t embed_llama(struct fb *f)
{
	uint64_t dims[1];
	uint32_t ids = host_rows(f, offsetof(struct fwd_seq, ids),
				 sizeof(int32_t), DJINN_DTYPE_I32, 1, dims);

	return op2(f->g, DJINN_GOP_EMBEDDING, weight(f, -1, LLAMA_EMBED), ids);
}

/*
 * The llama family: llama, qwen2 (q/k/v biases), qwen3 (q/k norms),
 * mistral (a sliding window no context is longer than).
 */
static void build_llama(struct fb *f)
{
	const struct model_config *c = f->c;
	int32_t H = (int32_t)c->n_head, Hk = (int32_t)c->n_kv_head;
	uint32_t x, cos = GB_BAD, sin = GB_BAD;
	unsigned int dt = f->h->m->layout.dtype;
	size_t row = c->head_dim * djinn_dtype_size(dt);
	const struct fwd_args *a = f->a;
	struct gbuild *g = f->g;

	x = inputs(f, embed_llama);
	if (a->l0 < a->l1) {
		uint64_t dims[3] = { 0, 1, c->head_dim };

		/* (rows, 1, D) */
		cos = host_rows(f, offsetof(struct fwd_seq, cos), row, dt, 3,
				dims);
		sin = host_rows(f, offsetof(struct fwd_seq, sin), row, dt, 3,
				dims);
	}
	for (int l = (int)a->l0; l < (int)a->l1; l++) {
		uint32_t y, qkv[3], gu[2];

		/* q (T, H D), k, v (T, Hk D) from rmsnorm(x); Linear: W^T */
		y = norm(g, x, weight(f, l, LLAMA_IN_NORM), GB_BAD, c->eps);
		linears(f, l, y, LLAMA_Q, LLAMA_Q_B, 3, qkv);
		qkv[0] = position(f, l, qkv[0], H, LLAMA_Q_NORM, cos, sin);
		qkv[1] = position(f, l, qkv[1], Hk, LLAMA_K_NORM, cos, sin);
		y = attend_all(f, l, qkv[0], qkv[1], qkv[2]);
		x = op2(g, DJINN_GOP_ADD, x,
			linear(f, l, y, LLAMA_O, LLAMA_O_B));
		/* x += down(silu(gate(y)) * up(y)), y = rmsnorm(x) */
		y = norm(g, x, weight(f, l, LLAMA_POST_NORM), GB_BAD, c->eps);
		linears(f, l, y, LLAMA_GATE, LLAMA_GATE_B, 2, gu);
		y = op2(g, DJINN_GOP_MUL, unary(g, DJINN_GOP_SILU, gu[0]),
			gu[1]);
		x = op2(g, DJINN_GOP_ADD, x,
			linear(f, l, y, LLAMA_DOWN, LLAMA_DOWN_B));
	}
	finish(f, x, LLAMA_NORM, -1, LLAMA_LM_HEAD);
}

int model_build_forward(struct gbuild *g, const struct model_hold *h,
			const struct fwd_args *a)
{
	const struct model_config *c = &h->m->cfg;
	struct fwd_args b = *a;
	struct fb f = { .g = g, .h = h, .c = c, .a = &b };
	bool decode = true;

	if (!b.l1)
		b.l1 = c->n_layer;
	if (b.l0 > b.l1 || b.l1 > c->n_layer || !b.nr_seq ||
	    b.nr_seq > FWD_MAX_SEQ || (b.lbase && b.l1 != b.l0 + 1))
		return -EINVAL;
	for (uint32_t i = 0; i < b.nr_seq; i++) {
		const struct fwd_seq *sq = &b.seq[i];

		if (!sq->T || (sq->head ? b.l1 < c->n_layer : b.l0 == b.l1))
			return -EINVAL;
		decode &= sq->P && sq->T == 1;
	}
	g->phase = decode ? DJINN_PHASE_DECODE : DJINN_PHASE_PREFILL;
	g->owner = NULL;
	if (c->arch == MODEL_GPT2)
		build_gpt2(&f);
	else
		build_llama(&f);
	return g->err;
}
