// SPDX-License-Identifier: MIT
/*
 * The graph builder, and the GRAPH_SUBMIT payload it lays out.
 *
 * The builder numbers values in the order they are added, inputs and
 * nodes mixed; the wire numbers graph inputs first, then nodes
 * (proto.h, struct djinn_node). g->values[] maps one to the other: bit 31
 * set for node k, clear for input i. Nodes keep builder values in their
 * inputs[] until __djinn_graph_encode() translates them, and the payload
 * is then checked with the daemon's own code (lib/graph.c): what the
 * daemon would refuse is refused here with the same message.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static __printf(3, 4) int gfail(struct djinn_graph_builder *g, int err,
				const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->msg, sizeof(g->msg), fmt, ap);
	va_end(ap);
	return err;
}

/* Make room for @need entries of @size bytes in *@arr. */
static int grow(void **arr, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t n = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	p = realloc(*arr, (size_t)n * size);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

static int add_value(struct djinn_graph_builder *g, uint32_t v)
{
	if (grow((void **)&g->values, &g->cap_values, g->nr_values + 1,
		 sizeof(*g->values)))
		return -ENOMEM;
	g->values[g->nr_values] = v;
	return (int)g->nr_values++;
}

int djinn_graph_new(struct djinn_session *s, struct djinn_graph_builder **out)
{
	struct djinn_graph_builder *g;

	if (!s || !out)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->s = s;
	pthread_mutex_lock(&s->conn->lock);
	list_add_tail(&g->node, &s->graphs);
	pthread_mutex_unlock(&s->conn->lock);
	*out = g;
	return 0;
}

void __djinn_graph_destroy(struct djinn_graph_builder *g)
{
	for (uint32_t i = 0; i < g->nr_inputs; i++)
		if (g->inputs[i].r)
			__djinn_request_put(g->inputs[i].r->req);
	free(g->inputs);
	free(g->nodes);
	free(g->values);
	free(g);
}

void djinn_graph_free(struct djinn_graph_builder *g)
{
	struct djinn_conn *conn;

	if (!g)
		return;
	conn = g->s->conn;
	pthread_mutex_lock(&conn->lock);
	list_del_init(&g->node);
	__djinn_graph_destroy(g);
	pthread_mutex_unlock(&conn->lock);
}

/* A new input slot; the caller fills it in and counts it. */
static struct dj_input *new_input(struct djinn_graph_builder *g, int *value)
{
	if (g->nr_inputs == DJINN_MAX_GRAPH_INPUTS) {
		*value = gfail(g, -E2BIG, "graph: nr_inputs over %u",
			       DJINN_MAX_GRAPH_INPUTS);
		return NULL;
	}
	if (grow((void **)&g->inputs, &g->cap_inputs, g->nr_inputs + 1,
		 sizeof(*g->inputs))) {
		*value = -ENOMEM;
		return NULL;
	}
	*value = add_value(g, g->nr_inputs);
	if (*value < 0)
		return NULL;
	memset(&g->inputs[g->nr_inputs], 0, sizeof(g->inputs[0]));
	g->inputs[g->nr_inputs].value = (uint32_t)*value;
	return &g->inputs[g->nr_inputs];
}

int djinn_graph_input(struct djinn_graph_builder *g, struct djinn_tensor *t)
{
	struct dj_input *in;
	int value;

	if (!g || !t)
		return -EINVAL;
	if (t->s != g->s)
		return gfail(g, -EINVAL,
			     "input: a tensor of session %llu in "
			     "a graph of session %llu",
			     (unsigned long long)t->s->id,
			     (unsigned long long)g->s->id);
	for (uint32_t i = 0; i < g->nr_inputs; i++)
		if (!g->inputs[i].r && g->inputs[i].ref.id == t->info.handle)
			return (int)g->inputs[i].value;
	in = new_input(g, &value);
	if (!in)
		return value;
	in->ref.id = t->info.handle;
	in->ref.kind = DJINN_REF_HANDLE;
	in->desc = t->desc;
	in->module = t->module;
	g->nr_inputs++;
	return value;
}

int djinn_graph_input_result(struct djinn_graph_builder *g,
			     struct djinn_result *r)
{
	struct djinn_conn *conn;
	struct djinn_request *req;
	struct dj_input *in;
	int value, ret = 0;

	if (!g || !r)
		return -EINVAL;
	req = r->req;
	conn = g->s->conn;
	for (uint32_t i = 0; i < g->nr_inputs; i++)
		if (g->inputs[i].r == r)
			return (int)g->inputs[i].value;

	pthread_mutex_lock(&conn->lock);
	if (req->s != g->s)
		ret = gfail(g, -EINVAL,
			    "input: a result of another session (or of a "
			    "closed one)");
	else if (r->released)
		ret = gfail(g, -ENOENT,
			    "input: result %u of request %llu was released",
			    r->index, (unsigned long long)req->call.id);
	else if (req->call.done && req->call.err)
		ret = gfail(g, req->call.err, "input: request %llu failed: %s",
			    (unsigned long long)req->call.id, req->call.msg);
	if (!ret) {
		in = new_input(g, &value);
		if (in) {
			in->r = r;
			in->desc = r->desc;
			req->refs++;
			g->nr_inputs++;
		}
		ret = value;
	}
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

int djinn_graph_annotate(struct djinn_graph_builder *g,
			 const struct djinn_node_opts *opts)
{
	if (!g || !opts)
		return -EINVAL;
	if (opts->phase > DJINN_PHASE_TRAINING ||
	    opts->residency > DJINN_RES_OUTPUT)
		return gfail(g, -EINVAL, "annotations: phase %u, residency %u",
			     opts->phase, opts->residency);
	g->annotations = *opts;
	return 0;
}

int djinn_graph_node(struct djinn_graph_builder *g, enum djinn_opcode op,
		     const uint32_t *inputs, unsigned int nr,
		     const void *params, size_t params_len,
		     const struct djinn_node_opts *annotations)
{
	const struct djinn_node_opts *a;
	struct djinn_node *n;
	uint32_t k;
	int value;

	if (!g)
		return -EINVAL;
	k = g->nr_nodes;
	a = annotations ? annotations : &g->annotations;
	if ((unsigned int)op > UINT16_MAX)
		return gfail(g, -EINVAL, "node %u (op %u): unknown op", k, op);
	if (nr > DJINN_MAX_NODE_INPUTS || (nr && !inputs))
		return gfail(g, -EINVAL, "node %u (%s): %u inputs", k,
			     djinn_op_name(op), nr);
	if (params_len > sizeof(n->params) || (params_len && !params))
		return gfail(g, -EINVAL, "node %u (%s): %zu bytes of params", k,
			     djinn_op_name(op), params_len);
	if (a->phase > DJINN_PHASE_TRAINING || a->residency > DJINN_RES_OUTPUT)
		return gfail(g, -EINVAL, "node %u (%s): phase %u, residency %u",
			     k, djinn_op_name(op), a->phase, a->residency);
	for (unsigned int j = 0; j < nr; j++)
		if (inputs[j] >= g->nr_values)
			return gfail(g, -EINVAL,
				     "node %u (%s): input %u is value %u, "
				     "not an earlier one",
				     k, djinn_op_name(op), j, inputs[j]);
	if (k == DJINN_MAX_NODES)
		return gfail(g, -E2BIG, "graph: nr_nodes over %u",
			     DJINN_MAX_NODES);
	if (grow((void **)&g->nodes, &g->cap_nodes, k + 1, sizeof(*g->nodes)))
		return -ENOMEM;
	value = add_value(g, DJ_VALUE_NODE | k);
	if (value < 0)
		return value;

	n = &g->nodes[k];
	memset(n, 0, sizeof(*n));
	n->op = (uint16_t)op;
	n->phase = (uint8_t)a->phase;
	n->residency = (uint8_t)a->residency;
	n->nr_inputs = (uint8_t)nr;
	memcpy(n->inputs, inputs, nr * sizeof(inputs[0]));
	if (params_len)
		memcpy(&n->params, params, params_len);
	g->nr_nodes++;
	return value;
}

int djinn_graph_output(struct djinn_graph_builder *g, int value)
{
	if (!g)
		return -EINVAL;
	if (value < 0)
		return value;
	if ((uint32_t)value >= g->nr_values)
		return gfail(g, -EINVAL, "output: no value %d", value);
	if (!(g->values[value] & DJ_VALUE_NODE))
		return gfail(g, -EINVAL,
			     "output: value %d is a graph input, not a node",
			     value);
	for (uint32_t k = 0; k < g->nr_outputs; k++)
		if (g->outputs[k] == (uint32_t)value)
			return (int)k;
	if (g->nr_outputs == DJINN_MAX_GRAPH_OUTPUTS)
		return gfail(g, -E2BIG, "graph: nr_outputs over %u",
			     DJINN_MAX_GRAPH_OUTPUTS);
	g->outputs[g->nr_outputs] = (uint32_t)value;
	return (int)g->nr_outputs++;
}

const char *djinn_graph_error(const struct djinn_graph_builder *g)
{
	return g ? g->msg : "";
}

/* ---------------------------------------------------------------------- */
/* The payload */

/* The wire index of builder value @v. */
static uint32_t wire_index(const struct djinn_graph_builder *g, uint32_t v)
{
	uint32_t x = g->values[v];

	return x & DJ_VALUE_NODE ? g->nr_inputs + (x & ~DJ_VALUE_NODE) : x;
}

/* The ref of result input @i as things stand; under conn->lock. */
static int resolve(struct djinn_graph_builder *g, uint32_t i,
		   struct djinn_ref *ref)
{
	const struct djinn_result *r = g->inputs[i].r;
	const struct djinn_request *req = r->req;

	if (r->released || !req->s)
		return gfail(g, -ENOENT,
			     "input %u: result %u of request %llu was released",
			     i, r->index, (unsigned long long)req->call.id);
	if (req->sent && req->call.done) {
		if (req->call.err)
			return gfail(g, req->call.err,
				     "input %u: request %llu failed: %s", i,
				     (unsigned long long)req->call.id,
				     req->call.msg);
		*ref = (struct djinn_ref){ .id = r->handle,
					   .kind = DJINN_REF_HANDLE };
	} else {
		*ref = (struct djinn_ref){ .id = req->call.id,
					   .index = r->index,
					   .kind = DJINN_REF_RESULT };
	}
	return 0;
}

int __djinn_graph_encode(struct djinn_graph_builder *g, void **payload,
			 uint64_t *len, struct djinn_tensor_desc *out_descs)
{
	uint32_t ni = g->nr_inputs, nn = g->nr_nodes, no = g->nr_outputs;
	struct djinn_tensor_desc *in = NULL, *res = NULL;
	bool *in_module = NULL;
	struct djinn_graph_view view;
	struct djinn_graph *gr;
	struct djinn_ref *refs;
	struct djinn_node *nodes;
	uint32_t *outs;
	uint64_t size;
	int ret = -ENOMEM;

	size = sizeof(*gr) + (uint64_t)ni * sizeof(*refs) +
	       (uint64_t)nn * sizeof(*nodes) +
	       (((uint64_t)no * sizeof(*outs) + 7) & ~7ull);
	gr = calloc(1, size); /* malloc aligns to 16: parse wants 8 */
	in = malloc((ni ? ni : 1) * sizeof(*in));
	res = malloc((nn ? nn : 1) * sizeof(*res));
	in_module = calloc(ni ? ni : 1, sizeof(*in_module));
	if (!gr || !in || !res || !in_module)
		goto out_free;
	gr->nr_inputs = ni;
	gr->nr_nodes = nn;
	gr->nr_outputs = no;
	refs = (struct djinn_ref *)(gr + 1);
	nodes = (struct djinn_node *)(refs + ni);
	outs = (uint32_t *)(nodes + nn);

	ret = 0;
	pthread_mutex_lock(&g->s->conn->lock);
	for (uint32_t i = 0; i < ni && !ret; i++) {
		in[i] = g->inputs[i].desc;
		in_module[i] = g->inputs[i].module;
		if (g->inputs[i].r)
			ret = resolve(g, i, &refs[i]);
		else
			refs[i] = g->inputs[i].ref;
	}
	pthread_mutex_unlock(&g->s->conn->lock);
	if (ret)
		goto out_free;
	for (uint32_t k = 0; k < nn; k++) {
		nodes[k] = g->nodes[k];
		for (unsigned int j = 0; j < nodes[k].nr_inputs; j++)
			nodes[k].inputs[j] =
				wire_index(g, g->nodes[k].inputs[j]);
	}
	for (uint32_t k = 0; k < no; k++)
		outs[k] = g->values[g->outputs[k]] & ~DJ_VALUE_NODE;

	ret = djinn_graph_parse(gr, size, &view, g->msg, sizeof(g->msg));
	if (!ret)
		ret = djinn_graph_infer_modules(&view, in, in_module, res,
						g->msg, sizeof(g->msg));
	if (ret)
		goto out_free;
	for (uint32_t k = 0; k < no; k++)
		out_descs[k] = res[outs[k]];
	free(in_module);
	free(in);
	free(res);
	*payload = gr;
	*len = size;
	return 0;

out_free:
	free(in_module);
	free(res);
	free(in);
	free(gr);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* One wrapper per op */

static int node1(struct djinn_graph_builder *g, enum djinn_opcode op, int x,
		 const void *params, size_t len)
{
	uint32_t in[1] = { (uint32_t)x };

	if (x < 0)
		return x;
	return djinn_graph_node(g, op, in, 1, params, len, NULL);
}

static int node2(struct djinn_graph_builder *g, enum djinn_opcode op, int a,
		 int b, const void *params, size_t len)
{
	uint32_t in[2] = { (uint32_t)a, (uint32_t)b };

	if (a < 0)
		return a;
	if (b < 0)
		return b;
	return djinn_graph_node(g, op, in, 2, params, len, NULL);
}

int djinn_op_matmul(struct djinn_graph_builder *g, int a, int b, bool trans_a,
		    bool trans_b)
{
	struct djinn_p_matmul p = { .trans_a = trans_a, .trans_b = trans_b };

	return node2(g, DJINN_GOP_MATMUL, a, b, &p, sizeof(p));
}

int djinn_op_add(struct djinn_graph_builder *g, int a, int b)
{
	return node2(g, DJINN_GOP_ADD, a, b, NULL, 0);
}

int djinn_op_sub(struct djinn_graph_builder *g, int a, int b)
{
	return node2(g, DJINN_GOP_SUB, a, b, NULL, 0);
}

int djinn_op_mul(struct djinn_graph_builder *g, int a, int b)
{
	return node2(g, DJINN_GOP_MUL, a, b, NULL, 0);
}

int djinn_op_div(struct djinn_graph_builder *g, int a, int b)
{
	return node2(g, DJINN_GOP_DIV, a, b, NULL, 0);
}

int djinn_op_scale(struct djinn_graph_builder *g, int x, float alpha)
{
	struct djinn_p_scalar p = { .alpha = alpha };

	return node1(g, DJINN_GOP_SCALE, x, &p, sizeof(p));
}

int djinn_op_gelu(struct djinn_graph_builder *g, int x)
{
	return node1(g, DJINN_GOP_GELU, x, NULL, 0);
}

int djinn_op_relu(struct djinn_graph_builder *g, int x)
{
	return node1(g, DJINN_GOP_RELU, x, NULL, 0);
}

int djinn_op_silu(struct djinn_graph_builder *g, int x)
{
	return node1(g, DJINN_GOP_SILU, x, NULL, 0);
}

int djinn_op_softmax(struct djinn_graph_builder *g, int x)
{
	return node1(g, DJINN_GOP_SOFTMAX, x, NULL, 0);
}

int djinn_op_layernorm(struct djinn_graph_builder *g, int x, int gamma,
		       int beta, float eps)
{
	struct djinn_p_scalar p = { .eps = eps };
	uint32_t in[3] = { (uint32_t)x, (uint32_t)gamma, (uint32_t)beta };

	if (x < 0 || gamma < 0 || beta < 0)
		return x < 0 ? x : gamma < 0 ? gamma : beta;
	return djinn_graph_node(g, DJINN_GOP_LAYERNORM, in, 3, &p, sizeof(p),
				NULL);
}

int djinn_op_rmsnorm(struct djinn_graph_builder *g, int x, int gamma, float eps)
{
	struct djinn_p_scalar p = { .eps = eps };

	return node2(g, DJINN_GOP_RMSNORM, x, gamma, &p, sizeof(p));
}

int djinn_op_embedding(struct djinn_graph_builder *g, int table, int ids)
{
	return node2(g, DJINN_GOP_EMBEDDING, table, ids, NULL, 0);
}

static int shape_op(struct djinn_graph_builder *g, enum djinn_opcode op, int x,
		    unsigned int ndim, const int32_t *dims)
{
	struct djinn_p_shape p = { .ndim = ndim };

	if (!g)
		return -EINVAL;
	if (x < 0)
		return x;
	if (ndim > DJINN_MAX_DIMS || (ndim && !dims))
		return gfail(g, -EINVAL, "node %u (%s): ndim %u", g->nr_nodes,
			     djinn_op_name(op), ndim);
	memcpy(p.dims, dims, ndim * sizeof(dims[0]));
	return node1(g, op, x, &p, sizeof(p));
}

int djinn_op_reshape(struct djinn_graph_builder *g, int x, unsigned int ndim,
		     const int32_t *dims)
{
	return shape_op(g, DJINN_GOP_RESHAPE, x, ndim, dims);
}

int djinn_op_permute(struct djinn_graph_builder *g, int x, unsigned int ndim,
		     const int32_t *perm)
{
	return shape_op(g, DJINN_GOP_PERMUTE, x, ndim, perm);
}

int djinn_op_slice(struct djinn_graph_builder *g, int x, int axis,
		   int64_t start, int64_t end)
{
	struct djinn_p_axis p = { .axis = axis, .start = start, .end = end };

	return node1(g, DJINN_GOP_SLICE, x, &p, sizeof(p));
}

int djinn_op_concat(struct djinn_graph_builder *g, const int *xs,
		    unsigned int nr, int axis)
{
	struct djinn_p_axis p = { .axis = axis };
	uint32_t in[DJINN_MAX_NODE_INPUTS];

	if (!g || !xs)
		return -EINVAL;
	if (nr > DJINN_MAX_NODE_INPUTS)
		return gfail(g, -EINVAL, "node %u (concat): %u inputs",
			     g->nr_nodes, nr);
	for (unsigned int j = 0; j < nr; j++) {
		if (xs[j] < 0)
			return xs[j];
		in[j] = (uint32_t)xs[j];
	}
	/* only the axis: start and end are for SLICE */
	return djinn_graph_node(g, DJINN_GOP_CONCAT, in, nr, &p, sizeof(p.axis),
				NULL);
}

int djinn_op_attention(struct djinn_graph_builder *g, int q, int k, int v,
		       float scale, bool causal)
{
	struct djinn_p_attention p = { .scale = scale, .causal = causal };
	uint32_t in[3] = { (uint32_t)q, (uint32_t)k, (uint32_t)v };

	if (q < 0 || k < 0 || v < 0)
		return q < 0 ? q : k < 0 ? k : v;
	return djinn_graph_node(g, DJINN_GOP_ATTENTION, in, 3, &p, sizeof(p),
				NULL);
}

int djinn_op_attention_cache(struct djinn_graph_builder *g, int q, int k, int v,
			     int cache, unsigned int slot_k,
			     unsigned int slot_v, float scale, bool causal)
{
	struct djinn_p_attention p = { .scale = scale,
				       .causal = causal,
				       .layout = DJINN_ATTN_TOKENS,
				       .cache_k = slot_k,
				       .cache_v = slot_v };
	uint32_t in[4] = { (uint32_t)q, (uint32_t)k, (uint32_t)v,
			   (uint32_t)cache };

	for (unsigned int i = 0; i < 4; i++)
		if ((int)in[i] < 0)
			return (int)in[i];
	return djinn_graph_node(g, DJINN_GOP_ATTENTION, in, 4, &p, sizeof(p),
				NULL);
}

int djinn_op_argmax(struct djinn_graph_builder *g, int x)
{
	return node1(g, DJINN_GOP_ARGMAX, x, NULL, 0);
}

int djinn_op_sample(struct djinn_graph_builder *g, int logits, int params)
{
	return node2(g, DJINN_GOP_SAMPLE, logits, params, NULL, 0);
}

int djinn_op_kernel(struct djinn_graph_builder *g, int module, const char *name,
		    const int *args, unsigned int nargs,
		    const struct djinn_kernel_launch *launch)
{
	struct djinn_p_kernel p = { 0 };
	uint32_t in[DJINN_MAX_NODE_INPUTS];
	uint8_t fp[DJINN_FP_LEN];

	if (!g || !name || !launch || (nargs && !args))
		return -EINVAL;
	if (module < 0)
		return module;
	if (nargs < 1 || nargs > DJINN_MAX_NODE_INPUTS - 1)
		return gfail(g, -EINVAL,
			     "node %u (kernel): %u arguments, not 1 to %u",
			     g->nr_nodes, nargs, DJINN_MAX_NODE_INPUTS - 1);
	if (!*name)
		return gfail(g, -EINVAL, "node %u (kernel): no kernel name",
			     g->nr_nodes);
	if (launch->out_like >= nargs || launch->out_init > 1)
		return gfail(g, -EINVAL,
			     "node %u (kernel): out_like %u of %u arguments, "
			     "out_init %u",
			     g->nr_nodes, launch->out_like, nargs,
			     launch->out_init);
	in[0] = (uint32_t)module;
	for (unsigned int j = 0; j < nargs; j++) {
		if (args[j] < 0)
			return args[j];
		in[j + 1] = (uint32_t)args[j];
	}
	if (__djinn_sha256(name, strlen(name), fp))
		return -EIO;
	for (int k = 7; k >= 0; k--)
		p.name_hash = p.name_hash << 8 | fp[k];
	memcpy(p.grid, launch->grid, sizeof(p.grid));
	memcpy(p.block, launch->block, sizeof(p.block));
	p.shmem = launch->shmem;
	p.out_like = (uint8_t)(launch->out_like + 1);
	p.out_init = (uint8_t)launch->out_init;
	return djinn_graph_node(g, DJINN_GOP_KERNEL, in, nargs + 1, &p,
				sizeof(p), NULL);
}
