// SPDX-License-Identifier: MIT
/*
 * Graph validation and shape inference. graph.h is the contract and
 * include/djinn/proto.h the encoding.
 *
 * Everything here reads a payload that came from outside, so nothing
 * allocates, nothing recurses, every index is checked before it is used
 * and every product or sum of sizes is computed with an overflow check.
 * A node's inputs are earlier values only, so one pass in order both
 * rules out cycles and infers every shape.
 *
 * Each op is a row of ops[]: its name, how many inputs it takes, which
 * bytes of its params it reads (the others must be zero) and the
 * function that checks its inputs and fills in its result.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "array_size.h"
#include "errmsg.h"
#include "graph.h"

/* A node's result may be at most this big. */
#define GRAPH_MAX_RESULT_BYTES (UINT64_C(1) << 40)
/* A desc's byte count, zero dims counted as one, stays below this. */
#define DESC_BYTES_LIMIT (UINT64_C(1) << 63)

#define __printf(a, b) __attribute__((format(printf, a, b)))

/* ---------------------------------------------------------------------- */
/* Messages */

/* ---------------------------------------------------------------------- */
/* Dtypes */

static const struct dtype_info {
	const char *name;
	uint8_t size;
	bool is_float;
} dtypes[] = {
	[DJINN_DTYPE_F32] = { "f32", 4, true },
	[DJINN_DTYPE_F16] = { "f16", 2, true },
	[DJINN_DTYPE_BF16] = { "bf16", 2, true },
	[DJINN_DTYPE_I32] = { "i32", 4, false },
	[DJINN_DTYPE_I64] = { "i64", 8, false },
	[DJINN_DTYPE_U8] = { "u8", 1, false },
};

static const struct dtype_info *dtype_info(unsigned int dtype)
{
	if (dtype >= ARRAY_SIZE(dtypes) || !dtypes[dtype].name)
		return NULL;
	return &dtypes[dtype];
}

size_t djinn_dtype_size(unsigned int dtype)
{
	const struct dtype_info *t = dtype_info(dtype);

	return t ? t->size : 0;
}

const char *djinn_dtype_name(unsigned int dtype)
{
	const struct dtype_info *t = dtype_info(dtype);

	return t ? t->name : "unknown";
}

bool djinn_dtype_is_float(unsigned int dtype)
{
	const struct dtype_info *t = dtype_info(dtype);

	return t && t->is_float;
}

uint64_t djinn_desc_elems_from(const struct djinn_tensor_desc *d,
			       unsigned int from)
{
	uint64_t n = 1;

	for (unsigned int k = from; k < d->ndim; k++)
		n *= d->dims[k];
	return n;
}

bool djinn_desc_same_shape(const struct djinn_tensor_desc *a,
			   const struct djinn_tensor_desc *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (unsigned int k = 0; k < a->ndim; k++)
		if (a->dims[k] != b->dims[k])
			return false;
	return true;
}

/* ---------------------------------------------------------------------- */
/* Descs */

static int desc_check(const struct djinn_tensor_desc *d, uint64_t *elems,
		      uint64_t *bytes, const char *what, char *msg,
		      size_t msglen)
{
	__u64 size = djinn_dtype_size(d->dtype), extent;
	bool empty = false;

	if (!size)
		return errmsg(msg, msglen, -EINVAL, "%s: dtype %u unknown",
			      what, d->dtype);
	if (d->ndim > DJINN_MAX_DIMS)
		return errmsg(msg, msglen, -EINVAL, "%s: ndim %u over %d", what,
			      d->ndim, DJINN_MAX_DIMS);
	for (unsigned int i = 0; i < sizeof(d->__reserved); i++)
		if (d->__reserved[i])
			return errmsg(msg, msglen, -EINVAL,
				      "%s: reserved byte %u not zero", what, i);
	for (unsigned int i = d->ndim; i < DJINN_MAX_DIMS; i++)
		if (d->dims[i])
			return errmsg(msg, msglen, -EINVAL,
				      "%s: dim %u past ndim %u is %llu"
				      ", not zero",
				      what, i, d->ndim, d->dims[i]);
	/*
	 * Zero dims count as one here, so that every stride of an empty
	 * tensor is representable too.
	 */
	extent = size;
	for (unsigned int i = 0; i < d->ndim; i++) {
		if (!d->dims[i]) {
			empty = true;
			continue;
		}
		if (__builtin_mul_overflow(extent, d->dims[i], &extent) ||
		    extent >= DESC_BYTES_LIMIT)
			return errmsg(msg, msglen, -E2BIG,
				      "%s: byte count over 2^63", what);
	}
	if (elems)
		*elems = empty ? 0 : extent / size;
	if (bytes)
		*bytes = empty ? 0 : extent;
	return 0;
}

int djinn_desc_check(const struct djinn_tensor_desc *d, uint64_t *elems,
		     uint64_t *bytes)
{
	return desc_check(d, elems, bytes, "desc", NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* Parsing */

static int ref_check(const struct djinn_ref *r, uint32_t i, char *msg,
		     size_t msglen)
{
	if (r->kind != DJINN_REF_HANDLE && r->kind != DJINN_REF_RESULT)
		return errmsg(msg, msglen, -EINVAL, "input %u: kind %u unknown",
			      i, r->kind);
	if (r->__reserved)
		return errmsg(msg, msglen, -EINVAL,
			      "input %u: reserved field not zero", i);
	if (r->kind == DJINN_REF_HANDLE && r->index)
		return errmsg(msg, msglen, -EINVAL,
			      "input %u: index %u set on a handle", i,
			      r->index);
	return 0;
}

static int count_check(uint32_t n, uint32_t min, uint32_t max, const char *what,
		       char *msg, size_t msglen)
{
	if (n > max)
		return errmsg(msg, msglen, -E2BIG, "graph: %s %u over %u", what,
			      n, max);
	if (n < min)
		return errmsg(msg, msglen, -EINVAL, "graph: %s is %u", what, n);
	return 0;
}

int djinn_graph_parse(const void *payload, uint64_t len,
		      struct djinn_graph_view *view, char *msg, size_t msglen)
{
	const uint8_t *p = payload;
	const struct djinn_graph *g = payload;
	const struct djinn_ref *inputs;
	const struct djinn_node *nodes;
	const uint32_t *outputs;
	__u64 want, out_len;
	int ret;

	if (!payload || len < sizeof(*g))
		return errmsg(msg, msglen, -EINVAL,
			      "graph: payload of %llu"
			      " bytes, shorter than its %zu-byte header",
			      payload ? (unsigned long long)len : 0ull,
			      sizeof(*g));
	if ((uintptr_t)payload % 8)
		return errmsg(msg, msglen, -EINVAL,
			      "graph: payload not 8-byte aligned");
	ret = count_check(g->nr_inputs, 0, DJINN_MAX_GRAPH_INPUTS, "nr_inputs",
			  msg, msglen);
	if (!ret)
		ret = count_check(g->nr_nodes, 1, DJINN_MAX_NODES, "nr_nodes",
				  msg, msglen);
	if (!ret)
		ret = count_check(g->nr_outputs, 1, DJINN_MAX_GRAPH_OUTPUTS,
				  "nr_outputs", msg, msglen);
	if (ret)
		return ret;
	if (g->flags)
		return errmsg(msg, msglen, -EINVAL, "graph: flags %#x unknown",
			      g->flags);
	if (g->__reserved)
		return errmsg(msg, msglen, -EINVAL,
			      "graph: reserved field not zero");

	/* The counts are small enough that none of this can overflow. */
	out_len = ((uint64_t)g->nr_outputs * sizeof(*outputs) + 7) & ~7ull;
	want = sizeof(*g) + (uint64_t)g->nr_inputs * sizeof(*inputs) +
	       (uint64_t)g->nr_nodes * sizeof(*nodes) + out_len;
	if (len != want)
		return errmsg(msg, msglen, -EINVAL,
			      "graph: payload of %llu bytes, its counts "
			      "make %llu",
			      (unsigned long long)len, want);

	inputs = (const struct djinn_ref *)(p + sizeof(*g));
	nodes = (const struct djinn_node *)(inputs + g->nr_inputs);
	outputs = (const uint32_t *)(nodes + g->nr_nodes);
	for (uint32_t i = 0; i < g->nr_inputs; i++) {
		ret = ref_check(&inputs[i], i, msg, msglen);
		if (ret)
			return ret;
	}
	if (g->nr_outputs % 2 && outputs[g->nr_outputs])
		return errmsg(msg, msglen, -EINVAL,
			      "graph: padding after the outputs not zero");

	view->g = g;
	view->inputs = inputs;
	view->nodes = nodes;
	view->outputs = outputs;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Inference: helpers */

/*
 * struct node_ctx - the node being inferred
 * @i:   its index
 * @n:   the node
 * @x:   its inputs' descs (checked, none empty)
 * @r:   its result, zeroed; the op fills in dtype, ndim and dims
 * @nr_graph_inputs, @in_module: the graph's inputs, and which of them
 *       are client modules (NULL: none)
 */
struct node_ctx {
	uint32_t i;
	const struct djinn_node *n;
	uint32_t nr_graph_inputs;
	const bool *in_module;
	bool own; /* djinn_graph_infer_own(): djinnd's own graph */
	const struct djinn_tensor_desc *x[DJINN_MAX_NODE_INPUTS];
	struct djinn_tensor_desc *r;
	char *msg;
	size_t msglen;
};

/* Fail naming the node: "node 3 (matmul): ...". */
static __printf(3, 4) int node_fail(struct node_ctx *c, int err,
				    const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (!c->msg || !c->msglen)
		return err;
	n = snprintf(c->msg, c->msglen, "node %u (%s): ", c->i,
		     djinn_op_name(c->n->op));
	if (n < 0 || (size_t)n >= c->msglen)
		return err;
	va_start(ap, fmt);
	verrmsg(c->msg + n, c->msglen - n, err, fmt, ap);
	va_end(ap);
	return err;
}

static int want_float(struct node_ctx *c, unsigned int k)
{
	if (!djinn_dtype_is_float(c->x[k]->dtype))
		return node_fail(c, -EINVAL, "input %u is %s, not a float", k,
				 djinn_dtype_name(c->x[k]->dtype));
	return 0;
}

static int want_same_dtype(struct node_ctx *c, unsigned int a, unsigned int b)
{
	if (c->x[a]->dtype != c->x[b]->dtype)
		return node_fail(c, -EINVAL, "input %u is %s, input %u is %s",
				 a, djinn_dtype_name(c->x[a]->dtype), b,
				 djinn_dtype_name(c->x[b]->dtype));
	return 0;
}

static int want_ndim(struct node_ctx *c, unsigned int k, unsigned int min,
		     unsigned int max)
{
	unsigned int nd = c->x[k]->ndim;

	if (nd < min || nd > max) {
		if (min == max)
			return node_fail(c, -EINVAL,
					 "input %u has %u dims, not %u", k, nd,
					 min);
		if (nd < min)
			return node_fail(c, -EINVAL,
					 "input %u has %u dims, fewer than %u",
					 k, nd, min);
		return node_fail(c, -EINVAL,
				 "input %u has %u dims, more than %u", k, nd,
				 max);
	}
	return 0;
}

static void copy_shape(struct node_ctx *c, unsigned int k)
{
	c->r->ndim = c->x[k]->ndim;
	memcpy(c->r->dims, c->x[k]->dims, sizeof(c->r->dims));
}

/*
 * Numpy broadcasting of @a[na] and @b[nb], aligned at their last dims,
 * into @out (max(na, nb) dims). @what names the dims in a message.
 */
static int broadcast(struct node_ctx *c, const __u64 *a, unsigned int na,
		     const __u64 *b, unsigned int nb, __u64 *out,
		     const char *what)
{
	unsigned int no = na > nb ? na : nb;

	for (unsigned int k = 0; k < no; k++) {
		/* k counts from the last dim */
		__u64 da = k < na ? a[na - 1 - k] : 1;
		__u64 db = k < nb ? b[nb - 1 - k] : 1;

		if (da != db && da != 1 && db != 1)
			return node_fail(c, -EINVAL,
					 "%s %llu and %llu"
					 " do not broadcast (dim %d from the "
					 "end)",
					 what, da, db, -(int)k - 1);
		out[no - 1 - k] = da == 1 ? db : da;
	}
	return 0;
}

/* An axis in [-ndim, ndim), made non-negative in @axis. */
static int want_axis(struct node_ctx *c, int32_t a, unsigned int ndim,
		     unsigned int *axis)
{
	if (a < -(int32_t)ndim || a >= (int32_t)ndim)
		return node_fail(c, -EINVAL, "axis %d out of range for %u dims",
				 a, ndim);
	*axis = a < 0 ? (unsigned int)(a + (int32_t)ndim) : (unsigned int)a;
	return 0;
}

static bool is_empty(const struct djinn_tensor_desc *d)
{
	for (unsigned int k = 0; k < d->ndim; k++)
		if (!d->dims[k])
			return true;
	return false;
}

/* ---------------------------------------------------------------------- */
/* Inference: ops */

/* MATMUL: a (..., M, K) x b (..., K, N) -> (..., M, N), batch broadcast */
static int infer_matmul(struct node_ctx *c)
{
	const struct djinn_p_matmul *p = &c->n->params.matmul;
	const struct djinn_tensor_desc *a = c->x[0], *b = c->x[1];
	__u64 m, k, kb, n;
	unsigned int bn;
	int ret;

	if ((ret = want_float(c, 0)) || (ret = want_same_dtype(c, 0, 1)) ||
	    (ret = want_ndim(c, 0, 2, DJINN_MAX_DIMS)) ||
	    (ret = want_ndim(c, 1, 2, DJINN_MAX_DIMS)))
		return ret;
	if (p->trans_a > 1 || p->trans_b > 1)
		return node_fail(c, -EINVAL, "trans_a %u, trans_b %u: not 0/1",
				 p->trans_a, p->trans_b);
	m = a->dims[a->ndim - 2 + p->trans_a];
	k = a->dims[a->ndim - 1 - p->trans_a];
	kb = b->dims[b->ndim - 2 + p->trans_b];
	n = b->dims[b->ndim - 1 - p->trans_b];
	if (k != kb)
		return node_fail(c, -EINVAL, "inner dims %llu and %llu differ",
				 k, kb);
	ret = broadcast(c, a->dims, a->ndim - 2, b->dims, b->ndim - 2,
			c->r->dims, "batch dims");
	if (ret)
		return ret;
	bn = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
	c->r->dtype = a->dtype;
	c->r->ndim = bn + 2;
	c->r->dims[bn] = m;
	c->r->dims[bn + 1] = n;
	return 0;
}

/* ADD, SUB, MUL, DIV: any dtype, both the same; numpy broadcasting */
static int infer_binary(struct node_ctx *c)
{
	const struct djinn_tensor_desc *a = c->x[0], *b = c->x[1];
	int ret;

	ret = want_same_dtype(c, 0, 1);
	if (!ret)
		ret = broadcast(c, a->dims, a->ndim, b->dims, b->ndim,
				c->r->dims, "dims");
	if (ret)
		return ret;
	c->r->dtype = a->dtype;
	c->r->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
	return 0;
}

/* SCALE: x * alpha */
static int infer_scale(struct node_ctx *c)
{
	float alpha = c->n->params.scalar.alpha;
	int ret = want_float(c, 0);

	if (ret)
		return ret;
	if (!isfinite(alpha))
		return node_fail(c, -EINVAL, "alpha %g not finite",
				 (double)alpha);
	c->r->dtype = c->x[0]->dtype;
	copy_shape(c, 0);
	return 0;
}

/* GELU, RELU, SILU: float, same shape */
static int infer_unary(struct node_ctx *c)
{
	int ret = want_float(c, 0);

	if (ret)
		return ret;
	c->r->dtype = c->x[0]->dtype;
	copy_shape(c, 0);
	return 0;
}

/* SOFTMAX: float, over the last dim */
static int infer_softmax(struct node_ctx *c)
{
	int ret;

	if ((ret = want_float(c, 0)) ||
	    (ret = want_ndim(c, 0, 1, DJINN_MAX_DIMS)))
		return ret;
	c->r->dtype = c->x[0]->dtype;
	copy_shape(c, 0);
	return 0;
}

/* LAYERNORM: x (..., C), gamma (C), beta (C); RMSNORM: x, gamma */
static int infer_norm(struct node_ctx *c)
{
	float eps = c->n->params.scalar.eps;
	const struct djinn_tensor_desc *x = c->x[0];
	__u64 ch;
	int ret;

	if ((ret = want_float(c, 0)) ||
	    (ret = want_ndim(c, 0, 1, DJINN_MAX_DIMS)))
		return ret;
	ch = x->dims[x->ndim - 1];
	for (unsigned int k = 1; k < c->n->nr_inputs; k++) {
		if ((ret = want_same_dtype(c, 0, k)) ||
		    (ret = want_ndim(c, k, 1, 1)))
			return ret;
		if (c->x[k]->dims[0] != ch)
			return node_fail(c, -EINVAL,
					 "input %u has %llu"
					 " channels, input 0 has %llu",
					 k, c->x[k]->dims[0], ch);
	}
	if (!isfinite(eps) || !(eps > 0))
		return node_fail(c, -EINVAL, "eps %g not finite and positive",
				 (double)eps);
	c->r->dtype = x->dtype;
	copy_shape(c, 0);
	return 0;
}

/* EMBEDDING: table (V, C), ids (...) i32/i64 -> (..., C) */
static int infer_embedding(struct node_ctx *c)
{
	const struct djinn_tensor_desc *t = c->x[0], *ids = c->x[1];
	int ret;

	if ((ret = want_float(c, 0)) || (ret = want_ndim(c, 0, 2, 2)) ||
	    (ret = want_ndim(c, 1, 0, DJINN_MAX_DIMS - 1)))
		return ret;
	if (ids->dtype != DJINN_DTYPE_I32 && ids->dtype != DJINN_DTYPE_I64)
		return node_fail(c, -EINVAL, "ids are %s, not i32 or i64",
				 djinn_dtype_name(ids->dtype));
	c->r->dtype = t->dtype;
	c->r->ndim = ids->ndim + 1;
	memcpy(c->r->dims, ids->dims, ids->ndim * sizeof(ids->dims[0]));
	c->r->dims[ids->ndim] = t->dims[1];
	return 0;
}

/* RESHAPE: to params.shape, one dim may be -1; same element count */
static int infer_reshape(struct node_ctx *c)
{
	const struct djinn_p_shape *p = &c->n->params.shape;
	const struct djinn_tensor_desc *x = c->x[0];
	__u64 elems = 1, known = 1;
	int infer_at = -1;

	for (unsigned int k = 0; k < x->ndim; k++)
		elems *= x->dims[k]; /* checked: a desc of < 2^63 bytes */
	if (p->ndim > DJINN_MAX_DIMS)
		return node_fail(c, -EINVAL, "ndim %u over %d", p->ndim,
				 DJINN_MAX_DIMS);
	for (unsigned int k = 0; k < p->ndim; k++) {
		int32_t d = p->dims[k];

		if (d == -1 && infer_at < 0) {
			infer_at = (int)k;
			continue;
		}
		if (d == -1)
			return node_fail(c, -EINVAL, "dims %d and %u both -1",
					 infer_at, k);
		if (d <= 0)
			return node_fail(c, -EINVAL, "dim %u is %d", k, d);
		/* past elems (or overflowing) it cannot match anyway */
		if (__builtin_mul_overflow(known, (__u64)d, &known) ||
		    known > elems)
			return node_fail(c, -EINVAL,
					 "shape has more than the %llu"
					 " elements of its input",
					 elems);
		c->r->dims[k] = (uint64_t)d;
	}
	if (infer_at >= 0) {
		if (elems % known)
			return node_fail(c, -EINVAL,
					 "%llu elements do not divide "
					 "into dims of %llu",
					 elems, known);
		c->r->dims[infer_at] = elems / known;
	} else if (known != elems) {
		return node_fail(c, -EINVAL,
				 "shape has %llu elements, its input "
				 "%llu",
				 known, elems);
	}
	c->r->dtype = x->dtype;
	c->r->ndim = p->ndim;
	return 0;
}

/* PERMUTE: result dim k is input dim perm[k] */
static int infer_permute(struct node_ctx *c)
{
	const struct djinn_p_shape *p = &c->n->params.shape;
	const struct djinn_tensor_desc *x = c->x[0];
	unsigned int seen = 0;

	if (p->ndim != x->ndim)
		return node_fail(c, -EINVAL,
				 "permutation of %u dims for an input of %u",
				 p->ndim, x->ndim);
	for (unsigned int k = 0; k < p->ndim; k++) {
		int32_t d = p->dims[k];

		if (d < 0 || d >= (int32_t)x->ndim || seen & (1u << d))
			return node_fail(c, -EINVAL,
					 "dims are not a permutation of 0..%u",
					 x->ndim - 1);
		seen |= 1u << d;
		c->r->dims[k] = x->dims[d];
	}
	c->r->dtype = x->dtype;
	c->r->ndim = x->ndim;
	return 0;
}

/* SLICE: [start, end) along axis */
static int infer_slice(struct node_ctx *c)
{
	const struct djinn_p_axis *p = &c->n->params.axis;
	const struct djinn_tensor_desc *x = c->x[0];
	__s64 start = p->start, end = p->end, dim;
	unsigned int axis = 0;
	int ret;

	ret = want_axis(c, p->axis, x->ndim, &axis);
	if (ret)
		return ret;
	dim = (__s64)x->dims[axis]; /* < 2^63: a checked desc */
	if (start < 0)
		start += dim;
	if (end < 0)
		end += dim;
	if (start < 0 || start >= end || end > dim)
		return node_fail(c, -EINVAL,
				 "[%lld, %lld) is not a range "
				 "within dim %u of %lld",
				 p->start, p->end, axis, dim);
	c->r->dtype = x->dtype;
	copy_shape(c, 0);
	c->r->dims[axis] = (uint64_t)(end - start);
	return 0;
}

/* CONCAT: 2 to 4 inputs, same dtype and dims but along axis */
static int infer_concat(struct node_ctx *c)
{
	const struct djinn_tensor_desc *x = c->x[0];
	unsigned int axis = 0;
	__u64 sum;
	int ret;

	ret = want_axis(c, c->n->params.axis.axis, x->ndim, &axis);
	if (ret)
		return ret;
	sum = x->dims[axis];
	for (unsigned int k = 1; k < c->n->nr_inputs; k++) {
		const struct djinn_tensor_desc *y = c->x[k];

		if ((ret = want_same_dtype(c, 0, k)) ||
		    (ret = want_ndim(c, k, x->ndim, x->ndim)))
			return ret;
		for (unsigned int d = 0; d < x->ndim; d++)
			if (d != axis && y->dims[d] != x->dims[d])
				return node_fail(c, -EINVAL,
						 "dim %u of input %u is %llu"
						 ", of input 0 %llu",
						 d, k, y->dims[d], x->dims[d]);
		if (__builtin_add_overflow(sum, y->dims[axis], &sum))
			return node_fail(c, -E2BIG, "dim %u overflows", axis);
	}
	c->r->dtype = x->dtype;
	copy_shape(c, 0);
	c->r->dims[axis] = sum;
	return 0;
}

/* ATTENTION: see enum djinn_attn_layout. Dims named for HEADS; TOKENS
 * reads them at other places: */
static const struct attn_dims {
	unsigned int ndim, B, H, T, D; /* B: -1u for none */
} attn_dims[] = {
	[DJINN_ATTN_HEADS] = { 4, 0, 1, 2, 3 },
	[DJINN_ATTN_TOKENS] = { 3, -1u, 1, 0, 2 },
};

/* A TOKENS attention's cache, input 3: (P, R, Hk D), slots in range. */
static int infer_attn_cache(struct node_ctx *c, uint64_t Hk, uint64_t D,
			    uint64_t Dv)
{
	const struct djinn_p_attention *p = &c->n->params.attention;
	const struct djinn_tensor_desc *kc = c->x[3];
	int ret;

	if (c->n->nr_inputs < 4) {
		if (p->cache_k || p->cache_v)
			return node_fail(c, -EINVAL,
					 "cache slots %u, %u without a cache",
					 p->cache_k, p->cache_v);
		return 0;
	}
	if (p->layout != DJINN_ATTN_TOKENS)
		return node_fail(c, -EINVAL, "a cache needs the tokens layout");
	if ((ret = want_same_dtype(c, 0, 3)) || (ret = want_ndim(c, 3, 3, 3)))
		return ret;
	if (D != Dv)
		return node_fail(c, -EINVAL,
				 "a cache holds keys and values alike: head "
				 "dims %llu and %llu differ",
				 (unsigned long long)D, (unsigned long long)Dv);
	if (kc->dims[2] != Hk * D)
		return node_fail(c, -EINVAL,
				 "cache rows of %llu, not Hk D = %llu",
				 kc->dims[2], (unsigned long long)(Hk * D));
	if (p->cache_k >= kc->dims[1] || p->cache_v >= kc->dims[1])
		return node_fail(c, -EINVAL,
				 "cache slots %u, %u: the cache has %llu",
				 p->cache_k, p->cache_v, kc->dims[1]);
	return 0;
}

/* DJINN_ATTN_VARLEN (lib/graph.h): the table's contents are djinnd's,
 * checked where it runs; here its shape and q, k, v's. */
static int infer_varlen(struct node_ctx *c)
{
	const struct djinn_p_attention *p = &c->n->params.attention;
	const struct djinn_tensor_desc *q = c->x[0], *k = c->x[1], *v = c->x[2];
	const struct djinn_tensor_desc *t = c->x[3];
	int ret;

	if (!c->own)
		return node_fail(c, -EINVAL,
				 "layout %u is djinnd's own (a pass of many "
				 "contexts): not for a client's graph",
				 p->layout);
	if (c->n->nr_inputs != 4)
		return node_fail(c, -EINVAL,
				 "varlen attention without its "
				 "table");
	if ((ret = want_float(c, 0)) || (ret = want_same_dtype(c, 0, 1)) ||
	    (ret = want_same_dtype(c, 0, 2)) || (ret = want_ndim(c, 0, 3, 3)) ||
	    (ret = want_ndim(c, 1, 3, 3)) || (ret = want_ndim(c, 2, 3, 3)) ||
	    (ret = want_ndim(c, 3, 2, 2)))
		return ret;
	if (!djinn_desc_same_shape(k, v) || k->dims[0] != q->dims[0] ||
	    k->dims[2] != q->dims[2] || q->dims[1] % k->dims[1])
		return node_fail(c, -EINVAL,
				 "q (%llu, %llu, %llu) and k, v (%llu, %llu, "
				 "%llu) do not agree",
				 q->dims[0], q->dims[1], q->dims[2], k->dims[0],
				 k->dims[1], k->dims[2]);
	if (t->dtype != DJINN_DTYPE_I64 || t->dims[1] != DJINN_VARLEN_COLS ||
	    t->dims[0] > DJINN_VARLEN_MAX || t->dims[0] > q->dims[0])
		return node_fail(c, -EINVAL,
				 "the table is not (N <= %u, %u) i64 for %llu "
				 "rows",
				 DJINN_VARLEN_MAX, DJINN_VARLEN_COLS,
				 q->dims[0]);
	if (p->causal != 1 || !isfinite(p->scale))
		return node_fail(c, -EINVAL,
				 "varlen attention is causal, "
				 "with a finite scale");
	c->r->dtype = q->dtype;
	copy_shape(c, 0);
	return 0;
}

static int infer_attention(struct node_ctx *c)
{
	const struct djinn_p_attention *p = &c->n->params.attention;
	const struct djinn_tensor_desc *q = c->x[0], *k = c->x[1], *v = c->x[2];
	const struct attn_dims *a;
	uint64_t S;
	int ret;

	if (p->layout == DJINN_ATTN_VARLEN)
		return infer_varlen(c);
	if (p->layout >= ARRAY_SIZE(attn_dims))
		return node_fail(c, -EINVAL, "layout %u", p->layout);
	a = &attn_dims[p->layout];
	if ((ret = want_float(c, 0)) || (ret = want_same_dtype(c, 0, 1)) ||
	    (ret = want_same_dtype(c, 0, 2)))
		return ret;
	for (unsigned int j = 0; j < 3; j++)
		if ((ret = want_ndim(c, j, a->ndim, a->ndim)))
			return ret;
	/* B matches; k and v may have fewer heads than q (grouped-query
	 * attention): query head h reads key/value head h / (H / Hkv) */
	if (a->B != -1u &&
	    (k->dims[a->B] != q->dims[a->B] || v->dims[a->B] != q->dims[a->B]))
		return node_fail(c, -EINVAL,
				 "B differs: q %llu, k %llu, v %llu",
				 q->dims[a->B], k->dims[a->B], v->dims[a->B]);
	if (k->dims[a->H] != v->dims[a->H] || !k->dims[a->H] ||
	    q->dims[a->H] % k->dims[a->H])
		return node_fail(c, -EINVAL,
				 "H differs: q %llu, k %llu, v %llu",
				 q->dims[a->H], k->dims[a->H], v->dims[a->H]);
	if (k->dims[a->D] != q->dims[a->D])
		return node_fail(c, -EINVAL, "head dims differ: q %llu, k %llu",
				 q->dims[a->D], k->dims[a->D]);
	if (v->dims[a->T] != k->dims[a->T])
		return node_fail(c, -EINVAL,
				 "key lengths differ: k %llu, v %llu",
				 k->dims[a->T], v->dims[a->T]);
	if ((ret = infer_attn_cache(c, k->dims[a->H], k->dims[a->D],
				    v->dims[a->D])))
		return ret;
	S = k->dims[a->T] + (c->n->nr_inputs > 3 ? c->x[3]->dims[0] : 0);
	if (!isfinite(p->scale))
		return node_fail(c, -EINVAL, "scale %g not finite",
				 (double)p->scale);
	if (p->causal > 1)
		return node_fail(c, -EINVAL, "causal %u: not 0/1", p->causal);
	if (p->causal && q->dims[a->T] > S)
		return node_fail(c, -EINVAL,
				 "causal with %llu queries and only %llu"
				 " keys",
				 q->dims[a->T], (unsigned long long)S);
	c->r->dtype = q->dtype;
	copy_shape(c, 0);
	c->r->dims[a->D] = v->dims[a->D];
	return 0;
}

/* ARGMAX: over the last dim, to i64 */
static int infer_argmax(struct node_ctx *c)
{
	int ret = want_ndim(c, 0, 1, DJINN_MAX_DIMS);

	if (ret)
		return ret;
	copy_shape(c, 0);
	c->r->dims[--c->r->ndim] = 0;
	c->r->dtype = DJINN_DTYPE_I64;
	return 0;
}

/* SAMPLE: logits (..., V) float, params (..., 24) u8 -> (...) i64 */
static int infer_sample(struct node_ctx *c)
{
	const struct djinn_tensor_desc *x = c->x[0], *p = c->x[1];
	int ret;

	if ((ret = want_float(c, 0)) ||
	    (ret = want_ndim(c, 0, 1, DJINN_MAX_DIMS)) ||
	    (ret = want_ndim(c, 1, 1, DJINN_MAX_DIMS)))
		return ret;
	if (x->dims[x->ndim - 1] > INT32_MAX)
		return node_fail(c, -EINVAL, "%llu logits a row, over 2^31 - 1",
				 (unsigned long long)x->dims[x->ndim - 1]);
	if (p->dtype != DJINN_DTYPE_U8 ||
	    p->dims[p->ndim - 1] != sizeof(struct djinn_sample_params))
		return node_fail(c, -EINVAL,
				 "params are not u8 rows of %zu bytes (struct "
				 "djinn_sample_params)",
				 sizeof(struct djinn_sample_params));
	if (p->ndim != x->ndim ||
	    memcmp(p->dims, x->dims, (x->ndim - 1) * sizeof(x->dims[0])))
		return node_fail(c, -EINVAL,
				 "params' leading dims are not the logits'");
	copy_shape(c, 0);
	c->r->dims[--c->r->ndim] = 0;
	c->r->dtype = DJINN_DTYPE_I64;
	return 0;
}

/* KERNEL: inputs[0] a module, 1 to 3 tensor arguments; the result like
 * inputs[out_like] */
static int infer_kernel(struct node_ctx *c)
{
	const struct djinn_p_kernel *p = &c->n->params.kernel;
	uint32_t v = c->n->inputs[0];
	uint64_t threads = 1;

	if (v >= c->nr_graph_inputs || !c->in_module || !c->in_module[v])
		return node_fail(c, -EINVAL,
				 "input 0 is not a module (a graph input "
				 "uploaded with DJINN_TENSOR_MODULE)");
	if (p->out_like < 1 || p->out_like >= c->n->nr_inputs)
		return node_fail(c, -EINVAL,
				 "out_like %u: not an argument (1 to %u)",
				 p->out_like, c->n->nr_inputs - 1u);
	if (p->out_init > 1)
		return node_fail(c, -EINVAL, "out_init %u: not 0 or 1",
				 p->out_init);
	for (unsigned int k = 0; k < 3; k++) {
		if (!p->grid[k] || !p->block[k])
			return node_fail(c, -EINVAL,
					 "grid (%u, %u, %u) block (%u, %u, %u)"
					 ": a dim is 0",
					 p->grid[0], p->grid[1], p->grid[2],
					 p->block[0], p->block[1], p->block[2]);
		threads *= p->block[k];
	}
	if (p->grid[0] > DJINN_KERNEL_MAX_GRID_X ||
	    p->grid[1] > DJINN_KERNEL_MAX_GRID_YZ ||
	    p->grid[2] > DJINN_KERNEL_MAX_GRID_YZ)
		return node_fail(c, -EINVAL,
				 "grid (%u, %u, %u) over (2^31 - 1, 65535, "
				 "65535)",
				 p->grid[0], p->grid[1], p->grid[2]);
	if (threads > DJINN_KERNEL_MAX_THREADS ||
	    p->block[2] > DJINN_KERNEL_MAX_BLOCK_Z)
		return node_fail(c, -EINVAL,
				 "block (%u, %u, %u): %llu threads, at most "
				 "%u, and z at most %u",
				 p->block[0], p->block[1], p->block[2],
				 (unsigned long long)threads,
				 DJINN_KERNEL_MAX_THREADS,
				 DJINN_KERNEL_MAX_BLOCK_Z);
	if (p->shmem > DJINN_KERNEL_MAX_SHMEM)
		return node_fail(c, -EINVAL,
				 "%u bytes of shared memory, at most %u",
				 p->shmem, DJINN_KERNEL_MAX_SHMEM);
	if (p->__reserved)
		return node_fail(c, -EINVAL, "reserved field not zero");
	if (!p->name_hash)
		return node_fail(c, -EINVAL, "name_hash is 0: no kernel named");
	c->r->dtype = c->x[p->out_like]->dtype;
	copy_shape(c, p->out_like);
	return 0;
}

/* params bytes an op reads, one bit per byte; PARAMS_SHAPE: by ndim */
#define PARAMS_NONE 0
#define PARAMS_8 0xffull /* two 32-bit fields at 0 */
#define PARAMS_LO 0x0full /* alpha; axis */
#define PARAMS_HI 0xf0ull /* eps */
#define PARAMS_SLICE 0xffff0full /* axis, skip __reserved, start, end */
#define PARAMS_SHAPE (~0ull)
#define PARAMS_ATTN 0xfffffull /* scale, causal, layout, cache slots */
/* KERNEL: all 40 (its reserved field gets its own message) */
#define PARAMS_KERNEL 0xffffffffffull

static const struct op_info {
	const char *name;
	uint8_t min_inputs, max_inputs;
	uint64_t params;
	int (*infer)(struct node_ctx *c);
} ops[] = {
	[DJINN_GOP_MATMUL] = { "matmul", 2, 2, PARAMS_8, infer_matmul },
	[DJINN_GOP_ADD] = { "add", 2, 2, PARAMS_NONE, infer_binary },
	[DJINN_GOP_SUB] = { "sub", 2, 2, PARAMS_NONE, infer_binary },
	[DJINN_GOP_MUL] = { "mul", 2, 2, PARAMS_NONE, infer_binary },
	[DJINN_GOP_DIV] = { "div", 2, 2, PARAMS_NONE, infer_binary },
	[DJINN_GOP_SCALE] = { "scale", 1, 1, PARAMS_LO, infer_scale },
	[DJINN_GOP_GELU] = { "gelu", 1, 1, PARAMS_NONE, infer_unary },
	[DJINN_GOP_RELU] = { "relu", 1, 1, PARAMS_NONE, infer_unary },
	[DJINN_GOP_SILU] = { "silu", 1, 1, PARAMS_NONE, infer_unary },
	[DJINN_GOP_SOFTMAX] = { "softmax", 1, 1, PARAMS_NONE, infer_softmax },
	[DJINN_GOP_LAYERNORM] = { "layernorm", 3, 3, PARAMS_HI, infer_norm },
	[DJINN_GOP_RMSNORM] = { "rmsnorm", 2, 2, PARAMS_HI, infer_norm },
	[DJINN_GOP_EMBEDDING] = { "embedding", 2, 2, PARAMS_NONE,
				  infer_embedding },
	[DJINN_GOP_RESHAPE] = { "reshape", 1, 1, PARAMS_SHAPE, infer_reshape },
	[DJINN_GOP_PERMUTE] = { "permute", 1, 1, PARAMS_SHAPE, infer_permute },
	[DJINN_GOP_SLICE] = { "slice", 1, 1, PARAMS_SLICE, infer_slice },
	[DJINN_GOP_CONCAT] = { "concat", 2, 4, PARAMS_LO, infer_concat },
	[DJINN_GOP_ATTENTION] = { "attention", 3, 4, PARAMS_ATTN,
				  infer_attention },
	[DJINN_GOP_ARGMAX] = { "argmax", 1, 1, PARAMS_NONE, infer_argmax },
	[DJINN_GOP_KERNEL] = { "kernel", 2, 4, PARAMS_KERNEL, infer_kernel },
	[DJINN_GOP_SAMPLE] = { "sample", 2, 2, PARAMS_NONE, infer_sample },
};
static_assert(ARRAY_SIZE(ops) == DJINN_GOP_MAX + 1, "ops[] covers every op");

static const struct op_info *op_info(unsigned int op)
{
	if (op >= ARRAY_SIZE(ops) || !ops[op].name)
		return NULL;
	return &ops[op];
}

const char *djinn_op_name(unsigned int op)
{
	const struct op_info *o = op_info(op);

	return o ? o->name : "unknown";
}

bool djinn_op_takes(unsigned int op, unsigned int nr)
{
	const struct op_info *o = op_info(op);

	return o && nr >= o->min_inputs && nr <= o->max_inputs;
}

/* ---------------------------------------------------------------------- */
/* Inference: the graph */

/* Everything about a node but its op's own rules. */
static int node_check(struct node_ctx *c, const struct op_info *o,
		      const struct djinn_graph_view *view,
		      const struct djinn_tensor_desc *in,
		      const struct djinn_tensor_desc *out)
{
	const struct djinn_node *n = c->n;
	uint32_t nr_values = view->g->nr_inputs + c->i;
	uint64_t used = o->params;

	for (unsigned int k = 0; k < sizeof(n->__reserved); k++)
		if (n->__reserved[k])
			return node_fail(c, -EINVAL,
					 "reserved byte %u not zero", k);
	if (n->phase > DJINN_PHASE_TRAINING)
		return node_fail(c, -EINVAL, "phase %u not for nodes",
				 n->phase);
	if (n->residency > DJINN_RES_OUTPUT)
		return node_fail(c, -EINVAL, "residency %u unknown",
				 n->residency);
	if (n->nr_inputs < o->min_inputs || n->nr_inputs > o->max_inputs) {
		if (o->min_inputs == o->max_inputs)
			return node_fail(c, -EINVAL, "%u inputs, not %u",
					 n->nr_inputs, o->min_inputs);
		return node_fail(c, -EINVAL, "%u inputs, not %u to %u",
				 n->nr_inputs, o->min_inputs, o->max_inputs);
	}
	for (unsigned int k = n->nr_inputs; k < DJINN_MAX_NODE_INPUTS; k++)
		if (n->inputs[k])
			return node_fail(c, -EINVAL,
					 "unused inputs[%u] not zero", k);
	for (unsigned int k = 0; k < n->nr_inputs; k++) {
		uint32_t v = n->inputs[k];

		if (v >= nr_values)
			return node_fail(c, -EINVAL,
					 "input %u is value %u, not an earlier "
					 "one (%u graph inputs)",
					 k, v, view->g->nr_inputs);
		c->x[k] = v < view->g->nr_inputs ? &in[v] :
						   &out[v - view->g->nr_inputs];
		if (is_empty(c->x[k]))
			return node_fail(c, -EINVAL, "input %u is empty", k);
	}

	if (used == PARAMS_SHAPE) {
		uint32_t nd = n->params.shape.ndim;

		nd = nd > DJINN_MAX_DIMS ? DJINN_MAX_DIMS : nd;
		used = (1ull << (sizeof(__u32) * (1 + nd))) - 1;
	}
	for (unsigned int k = 0; k < sizeof(n->params.raw); k++)
		if (n->params.raw[k] && !(used & (1ull << k)))
			return node_fail(c, -EINVAL, "params byte %u not zero",
					 k);
	return 0;
}

static int result_check(struct node_ctx *c)
{
	uint64_t bytes = djinn_dtype_size(c->r->dtype);

	for (unsigned int k = 0; k < c->r->ndim; k++)
		if (__builtin_mul_overflow(bytes, c->r->dims[k], &bytes) ||
		    bytes > GRAPH_MAX_RESULT_BYTES)
			return node_fail(c, -E2BIG, "result over 2^40 bytes");
	if (!bytes) /* the inputs were not empty: cannot happen */
		return node_fail(c, -EINVAL, "empty result");
	return 0;
}

static int infer_graph(const struct djinn_graph_view *view,
		       const struct djinn_tensor_desc *in,
		       const bool *in_module, bool own,
		       struct djinn_tensor_desc *out, char *msg, size_t msglen);

int djinn_graph_infer(const struct djinn_graph_view *view,
		      const struct djinn_tensor_desc *in,
		      struct djinn_tensor_desc *out, char *msg, size_t msglen)
{
	return infer_graph(view, in, NULL, false, out, msg, msglen);
}

int djinn_graph_infer_own(const struct djinn_graph_view *view,
			  const struct djinn_tensor_desc *in,
			  struct djinn_tensor_desc *out, char *msg,
			  size_t msglen)
{
	return infer_graph(view, in, NULL, true, out, msg, msglen);
}

int djinn_graph_infer_modules(const struct djinn_graph_view *view,
			      const struct djinn_tensor_desc *in,
			      const bool *in_module,
			      struct djinn_tensor_desc *out, char *msg,
			      size_t msglen)
{
	return infer_graph(view, in, in_module, false, out, msg, msglen);
}

static int infer_graph(const struct djinn_graph_view *view,
		       const struct djinn_tensor_desc *in,
		       const bool *in_module, bool own,
		       struct djinn_tensor_desc *out, char *msg, size_t msglen)
{
	const struct djinn_graph *g = view->g;
	uint64_t seen[DJINN_MAX_NODES / 64] = { 0 };
	char what[32];
	int ret;

	/* A view that did not come from djinn_graph_parse() */
	if (g->nr_inputs > DJINN_MAX_GRAPH_INPUTS || !g->nr_nodes ||
	    g->nr_nodes > DJINN_MAX_NODES || !g->nr_outputs ||
	    g->nr_outputs > DJINN_MAX_GRAPH_OUTPUTS)
		return errmsg(msg, msglen, -EINVAL, "graph: counts not parsed");

	for (uint32_t i = 0; i < g->nr_inputs; i++) {
		/* the input's name is formatted only for a message: a step's
		 * graph has a hundred inputs and more */
		if (!desc_check(&in[i], NULL, NULL, "", NULL, 0))
			continue;
		snprintf(what, sizeof(what), "input %u", i);
		return desc_check(&in[i], NULL, NULL, what, msg, msglen);
	}

	for (uint32_t i = 0; i < g->nr_nodes; i++) {
		struct node_ctx c = {
			.i = i,
			.n = &view->nodes[i],
			.r = &out[i],
			.nr_graph_inputs = g->nr_inputs,
			.in_module = in_module,
			.own = own,
			.msg = msg,
			.msglen = msglen,
		};
		const struct op_info *o = op_info(c.n->op);

		memset(c.r, 0, sizeof(*c.r));
		if (!o)
			return errmsg(msg, msglen, -EINVAL,
				      "node %u (op %u): unknown op", i,
				      c.n->op);
		ret = node_check(&c, o, view, in, out);
		if (!ret)
			ret = o->infer(&c);
		if (!ret)
			ret = result_check(&c);
		if (ret) {
			memset(c.r, 0, sizeof(*c.r));
			return ret;
		}
	}

	for (uint32_t k = 0; k < g->nr_outputs; k++) {
		uint32_t i = view->outputs[k];

		if (i >= g->nr_nodes)
			return errmsg(
				msg, msglen, -EINVAL,
				"output %u: node %u out of range (%u nodes)", k,
				i, g->nr_nodes);
		if (seen[i / 64] & (1ull << (i % 64)))
			return errmsg(msg, msglen, -EINVAL,
				      "output %u: node %u (%s) listed twice", k,
				      i, djinn_op_name(view->nodes[i].op));
		seen[i / 64] |= 1ull << (i % 64);
	}
	return 0;
}
