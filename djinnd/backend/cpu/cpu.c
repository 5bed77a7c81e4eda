// SPDX-License-Identifier: MIT
/*
 * The CPU backend: host-provider memory, a thread pool for elementwise
 * and row kernels, OpenBLAS for GEMM.
 *
 * run_node() checks what it is given against the op's rules once more
 * (cheaply: dims and dtypes, never the data but for embedding ids and
 * integer divisors), so that an executor bug is an -EINVAL and not a
 * stray write. Then it turns the node's tensors into host pointers and
 * plain sizes and calls a kernel. Float kernels work in f32: f16 and
 * bf16 inputs are widened into scratch first and the result rounded
 * back after, which costs a pass over the data but keeps one kernel per
 * op. Integer kernels (binary ops, argmax) and the byte movers work on
 * the tensors' own dtypes.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "array_size.h"
#include "cpu.h"
#include "graph.h"
#include "sample.h"

/* More kernel threads than this is a configuration mistake. */
#define CPU_MAX_THREADS 1024

struct cpu_backend {
	struct backend base;
	struct cpu_pool *pool;
};

static struct cpu_backend *to_cpu(struct backend *b)
{
	return (struct cpu_backend *)b;
}

/* ---------------------------------------------------------------------- */
/* Tensors */

static void *ptr(const struct dj_tensor *t)
{
	return (void *)(uintptr_t)t->addr;
}

static int no_kernel(const struct djinn_node *node, unsigned int dtype,
		     char *msg, size_t msglen)
{
	return errmsg(msg, msglen, -EOPNOTSUPP, "no cpu %s kernel for %s",
		      djinn_op_name(node->op), djinn_dtype_name(dtype));
}

/* @out has @x's shape and dtype (the elementwise and row ops). */
static int want_like(const struct dj_tensor *out, const struct dj_tensor *x,
		     char *msg, size_t msglen)
{
	if (out->desc.dtype != x->desc.dtype ||
	    !djinn_desc_same_shape(&out->desc, &x->desc))
		return errmsg(msg, msglen, -EINVAL,
			      "result is not the shape and dtype of input 0");
	return 0;
}

/* ---------------------------------------------------------------------- */
/* f32 views of float tensors */

/*
 * struct f32_view - a node's float inputs and its result as f32: the
 * tensors themselves when they are f32, else scratch (@tmp, freed by
 * f32_end()).
 */
struct f32_view {
	const float *in[DJINN_MAX_NODE_INPUTS];
	float *out;
	float *tmp[DJINN_MAX_NODE_INPUTS + 1];
};

/* After the kernel returned @ret: round the result back, free scratch. */
static int f32_end(struct cpu_backend *cb, const struct dj_tensor *out,
		   struct f32_view *f, int ret)
{
	if (!ret && out && out->desc.dtype != DJINN_DTYPE_F32)
		ret = cpu_from_f32(cb->pool, out->desc.dtype, f->out, ptr(out),
				   djinn_desc_elems_from(&out->desc, 0));
	for (unsigned int i = 0; i <= DJINN_MAX_NODE_INPUTS; i++)
		free(f->tmp[i]);
	return ret;
}

/* Inputs @in[nr] and, unless @out is NULL, the result. */
static int f32_begin(struct cpu_backend *cb, const struct dj_tensor *in,
		     unsigned int nr, const struct dj_tensor *out,
		     struct f32_view *f, char *msg, size_t msglen)
{
	int ret = 0;

	memset(f, 0, sizeof(*f));
	for (unsigned int i = 0; i < nr && !ret; i++) {
		size_t n = djinn_desc_elems_from(&in[i].desc, 0);

		if (in[i].desc.dtype == DJINN_DTYPE_F32) {
			f->in[i] = ptr(&in[i]);
			continue;
		}
		f->tmp[i] = malloc(n ? n * sizeof(float) : 1);
		if (!f->tmp[i]) {
			ret = errmsg(msg, msglen, -ENOMEM,
				     "no memory for %zu f32 of scratch", n);
			break;
		}
		ret = cpu_to_f32(cb->pool, in[i].desc.dtype, ptr(&in[i]),
				 f->tmp[i], n);
		f->in[i] = f->tmp[i];
	}
	if (!ret && out) {
		size_t n = djinn_desc_elems_from(&out->desc, 0);

		if (out->desc.dtype == DJINN_DTYPE_F32) {
			f->out = ptr(out);
		} else {
			f->out = f->tmp[DJINN_MAX_NODE_INPUTS] =
				malloc(n ? n * sizeof(float) : 1);
			if (!f->out)
				ret = errmsg(msg, msglen, -ENOMEM,
					     "no memory for %zu f32 of "
					     "scratch",
					     n);
		}
	}
	if (ret)
		return f32_end(cb, NULL, f, ret);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Ops */

/* MATMUL: a (..., M, K) x b (..., K, N) -> (..., M, N) */
static int op_matmul(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen)
{
	const struct djinn_p_matmul *p = &node->params.matmul;
	unsigned int dtype = in[0].desc.dtype;
	struct f32_view f;
	struct cpu_mm mm;
	int ret;

	if (!djinn_dtype_is_float(dtype))
		return no_kernel(node, dtype, msg, msglen);
	if (in[1].desc.dtype != dtype || out->desc.dtype != dtype)
		return errmsg(msg, msglen, -EINVAL, "dtypes differ");
	if (p->trans_a > 1 || p->trans_b > 1)
		return errmsg(msg, msglen, -EINVAL, "trans not 0 or 1");
	ret = cpu_mm_init(&mm, &in[0].desc, &in[1].desc, p->trans_a, p->trans_b,
			  &out->desc, msg, msglen);
	if (ret)
		return ret;
	ret = f32_begin(cb, in, 2, out, &f, msg, msglen);
	if (ret)
		return ret;
	ret = cpu_matmul(cb->pool, f.out, f.in[0], f.in[1], &mm, msg, msglen);
	return f32_end(cb, out, &f, ret);
}

/* ADD, SUB, MUL, DIV: any dtype but u8 division by zero; broadcasting */
static int op_binary(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen)
{
	unsigned int dtype = in[0].desc.dtype;
	struct cpu_bcast bc;
	struct f32_view f;
	int ret;

	if (in[1].desc.dtype != dtype || out->desc.dtype != dtype)
		return errmsg(msg, msglen, -EINVAL, "dtypes differ");
	ret = cpu_bcast_init(&bc, &in[0].desc, &in[1].desc, &out->desc, msg,
			     msglen);
	if (ret)
		return ret;
	if (!djinn_dtype_is_float(dtype)) {
		if (djinn_dtype_size(dtype) == 0)
			return no_kernel(node, dtype, msg, msglen);
		if (node->op == DJINN_GOP_DIV && bc.n &&
		    cpu_any_zero(dtype, ptr(&in[1]),
				 djinn_desc_elems_from(&in[1].desc, 0)))
			return errmsg(msg, msglen, -EDOM,
				      "integer division by zero");
		return cpu_binary(cb->pool, node->op, dtype, ptr(out),
				  ptr(&in[0]), ptr(&in[1]), &bc);
	}
	ret = f32_begin(cb, in, 2, out, &f, msg, msglen);
	if (ret)
		return ret;
	ret = cpu_binary(cb->pool, node->op, DJINN_DTYPE_F32, f.out, f.in[0],
			 f.in[1], &bc);
	return f32_end(cb, out, &f, ret);
}

/* SCALE, GELU, RELU, SILU: float, out like x */
static int op_unary(struct cpu_backend *cb, const struct djinn_node *node,
		    const struct dj_tensor *in, const struct dj_tensor *out,
		    char *msg, size_t msglen)
{
	struct f32_view f;
	int ret;

	if (!djinn_dtype_is_float(in[0].desc.dtype))
		return no_kernel(node, in[0].desc.dtype, msg, msglen);
	ret = want_like(out, &in[0], msg, msglen);
	if (!ret)
		ret = f32_begin(cb, in, 1, out, &f, msg, msglen);
	if (ret)
		return ret;
	ret = cpu_unary(cb->pool, node->op, f.out, f.in[0],
			djinn_desc_elems_from(&out->desc, 0),
			node->params.scalar.alpha);
	return f32_end(cb, out, &f, ret);
}

/* @x is floats in rows (at least one dimension): 0, or why not. */
static int want_float_rows(const struct djinn_node *node,
			   const struct djinn_tensor_desc *x, char *msg,
			   size_t msglen)
{
	if (!djinn_dtype_is_float(x->dtype))
		return no_kernel(node, x->dtype, msg, msglen);
	if (x->ndim < 1)
		return errmsg(msg, msglen, -EINVAL, "a scalar has no rows");
	return 0;
}

/* SOFTMAX: x (..., C) over C */
static int op_softmax(struct cpu_backend *cb, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out,
		      char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	struct f32_view f;
	size_t C;
	int ret;

	ret = want_float_rows(node, x, msg, msglen);
	if (!ret)
		ret = want_like(out, &in[0], msg, msglen);
	if (!ret)
		ret = f32_begin(cb, in, 1, out, &f, msg, msglen);
	if (ret)
		return ret;
	C = x->dims[x->ndim - 1];
	ret = cpu_softmax(cb->pool, f.out, f.in[0],
			  C ? djinn_desc_elems_from(x, 0) / C : 0, C);
	return f32_end(cb, out, &f, ret);
}

/* LAYERNORM: x (..., C), gamma (C), beta (C); RMSNORM: x, gamma */
static int op_norm(struct cpu_backend *cb, const struct djinn_node *node,
		   const struct dj_tensor *in, const struct dj_tensor *out,
		   char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	unsigned int nr = node->op == DJINN_GOP_LAYERNORM ? 3 : 2;
	float eps = node->params.scalar.eps;
	struct f32_view f;
	size_t C;
	int ret;

	ret = want_float_rows(node, x, msg, msglen);
	if (ret)
		return ret;
	C = x->dims[x->ndim - 1];
	for (unsigned int i = 1; i < nr; i++)
		if (!djinn_dtype_is_float(in[i].desc.dtype) ||
		    in[i].desc.ndim != 1 || in[i].desc.dims[0] != C)
			return errmsg(msg, msglen, -EINVAL,
				      "input %u is not (%zu) floats", i, C);
	if (!(eps > 0) || !isfinite(eps))
		return errmsg(msg, msglen, -EINVAL, "eps %g", (double)eps);
	ret = want_like(out, &in[0], msg, msglen);
	if (!ret)
		ret = f32_begin(cb, in, nr, out, &f, msg, msglen);
	if (ret)
		return ret;
	ret = cpu_norm(cb->pool, f.out, f.in[0], f.in[1],
		       nr == 3 ? f.in[2] : NULL,
		       C ? djinn_desc_elems_from(x, 0) / C : 0, C, eps);
	return f32_end(cb, out, &f, ret);
}

/* EMBEDDING: table (V, C), ids (...) i32/i64 -> (..., C); any table dtype */
static int op_embedding(struct cpu_backend *cb, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out,
			char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *t = &in[0].desc, *ids = &in[1].desc;
	const struct djinn_tensor_desc *o = &out->desc;
	size_t es = djinn_dtype_size(t->dtype);

	if (ids->dtype != DJINN_DTYPE_I32 && ids->dtype != DJINN_DTYPE_I64)
		return no_kernel(node, ids->dtype, msg, msglen);
	if (t->ndim != 2 || !es)
		return errmsg(msg, msglen, -EINVAL, "table is not (V, C)");
	if (o->dtype != t->dtype || o->ndim != ids->ndim + 1 ||
	    memcmp(o->dims, ids->dims, ids->ndim * sizeof(o->dims[0])) ||
	    o->dims[ids->ndim] != t->dims[1])
		return errmsg(msg, msglen, -EINVAL,
			      "result is not (ids..., %llu)",
			      (unsigned long long)t->dims[1]);
	return cpu_embedding(cb->pool, ptr(out), ptr(&in[0]), t->dims[1] * es,
			     t->dims[0], ptr(&in[1]), ids->dtype,
			     djinn_desc_elems_from(ids, 0), msg, msglen);
}

/* RESHAPE: the same bytes */
static int op_reshape(struct cpu_backend *cb, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out,
		      char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc;

	if (out->desc.dtype != x->dtype ||
	    djinn_desc_elems_from(&out->desc, 0) != djinn_desc_elems_from(x, 0))
		return errmsg(msg, msglen, -EINVAL,
			      "result has %zu elements, input %zu",
			      djinn_desc_elems_from(&out->desc, 0),
			      djinn_desc_elems_from(x, 0));
	return cpu_copy(cb->pool, ptr(out), ptr(&in[0]),
			djinn_desc_elems_from(x, 0) *
				djinn_dtype_size(x->dtype));
}

/* PERMUTE: result dim k is input dim perm[k] */
static int op_permute(struct cpu_backend *cb, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out,
		      char *msg, size_t msglen)
{
	const struct djinn_p_shape *p = &node->params.shape;
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	unsigned int seen = 0;

	if (p->ndim != x->ndim || o->ndim != x->ndim || o->dtype != x->dtype)
		return errmsg(msg, msglen, -EINVAL,
			      "permutation of %u dims for %u", p->ndim,
			      x->ndim);
	for (unsigned int k = 0; k < p->ndim; k++) {
		int32_t d = p->dims[k];

		if (d < 0 || d >= (int32_t)x->ndim || seen & (1u << d) ||
		    o->dims[k] != x->dims[d])
			return errmsg(msg, msglen, -EINVAL,
				      "not a permutation of the input");
		seen |= 1u << d;
	}
	return cpu_permute(cb->pool, ptr(out), ptr(&in[0]),
			   djinn_dtype_size(x->dtype), x->ndim, x->dims,
			   p->dims);
}

/* An axis in [-ndim, ndim) made non-negative; -1 if out of range. */
static int axis_of(int32_t a, unsigned int ndim)
{
	if (a < -(int32_t)ndim || a >= (int32_t)ndim)
		return -1;
	return a < 0 ? a + (int32_t)ndim : a;
}

/* SLICE: [start, end) of one axis; negative counts from the end */
static int op_slice(struct cpu_backend *cb, const struct djinn_node *node,
		    const struct dj_tensor *in, const struct dj_tensor *out,
		    char *msg, size_t msglen)
{
	const struct djinn_p_axis *p = &node->params.axis;
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	int axis = axis_of(p->axis, x->ndim);
	int64_t start = p->start, end = p->end, dim;
	size_t es = djinn_dtype_size(x->dtype), inner;

	if (axis < 0)
		return errmsg(msg, msglen, -EINVAL, "axis %d", p->axis);
	dim = (int64_t)x->dims[axis];
	start += start < 0 ? dim : 0;
	end += end < 0 ? dim : 0;
	if (start < 0 || start >= end || end > dim)
		return errmsg(msg, msglen, -EINVAL,
			      "[%lld, %lld) is not within %lld",
			      (long long)p->start, (long long)p->end,
			      (long long)dim);
	if (o->dtype != x->dtype || o->ndim != x->ndim)
		return errmsg(msg, msglen, -EINVAL, "result is not the slice");
	for (unsigned int d = 0; d < x->ndim; d++)
		if (o->dims[d] != (d == (unsigned int)axis ?
					   (uint64_t)(end - start) :
					   x->dims[d]))
			return errmsg(msg, msglen, -EINVAL,
				      "result is not the slice");

	/* (outer, dim, inner) -> (outer, end - start, inner) */
	inner = djinn_desc_elems_from(x, axis + 1) * es;
	return cpu_copy_rows(cb->pool, ptr(out), (size_t)(end - start) * inner,
			     (uint8_t *)ptr(&in[0]) + (size_t)start * inner,
			     (size_t)dim * inner,
			     djinn_desc_elems_from(x, 0) /
				     djinn_desc_elems_from(x, axis),
			     (size_t)(end - start) * inner);
}

/* CONCAT: 2 to 4 inputs along one axis */
static int op_concat(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	int axis = axis_of(node->params.axis.axis, x->ndim);
	size_t es = djinn_dtype_size(x->dtype), inner, outer, at = 0;
	uint64_t sum = 0;
	int ret = 0;

	if (axis < 0)
		return errmsg(msg, msglen, -EINVAL, "axis %d",
			      node->params.axis.axis);
	for (unsigned int i = 0; i < node->nr_inputs; i++) {
		const struct djinn_tensor_desc *y = &in[i].desc;

		if (y->dtype != x->dtype || y->ndim != x->ndim)
			return errmsg(msg, msglen, -EINVAL,
				      "input %u differs from input 0", i);
		for (unsigned int d = 0; d < x->ndim; d++)
			if (d != (unsigned int)axis && y->dims[d] != o->dims[d])
				return errmsg(msg, msglen, -EINVAL,
					      "input %u differs in dim %u", i,
					      d);
		sum += y->dims[axis];
	}
	if (o->dtype != x->dtype || o->ndim != x->ndim || o->dims[axis] != sum)
		return errmsg(msg, msglen, -EINVAL,
			      "result is not the concatenation");

	/* each input (outer, d_i, inner) into (outer, sum, inner) at @at */
	inner = djinn_desc_elems_from(x, axis + 1) * es;
	outer = djinn_desc_elems_from(o, 0) / djinn_desc_elems_from(o, axis);
	for (unsigned int i = 0; i < node->nr_inputs && !ret; i++) {
		size_t len = in[i].desc.dims[axis] * inner;

		ret = cpu_copy_rows(cb->pool, (uint8_t *)ptr(out) + at,
				    sum * inner, ptr(&in[i]), len, outer, len);
		at += len;
	}
	return ret;
}

/*
 * Point @a's kc and vc at slots @ck and @cv of the cache at @c (rows of
 * a->cs elements of @dtype): in place for f32, else widened into @buf
 * (2 P Hk D floats), whose rows are then Hk D apart.
 */
static int cache_slots(struct cpu_backend *cb, unsigned int dtype,
		       const uint8_t *c, uint32_t ck, uint32_t cv, float *buf,
		       struct cpu_attn *a)
{
	size_t W = a->Hk * a->D, es = djinn_dtype_size(dtype);
	int ret;

	a->kc = (const float *)(c + ck * W * es);
	a->vc = (const float *)(c + cv * W * es);
	if (dtype == DJINN_DTYPE_F32)
		return 0;
	ret = cpu_rows_to_f32(cb->pool, dtype, a->kc, a->cs, buf, a->P, W);
	if (!ret)
		ret = cpu_rows_to_f32(cb->pool, dtype, a->vc, a->cs,
				      buf + a->P * W, a->P, W);
	a->kc = buf;
	a->vc = buf + a->P * W;
	a->cs = W;
	return ret;
}

/*
 * Attention of @n contexts (@a[n]; @caches[n] each's cache bytes, NULL
 * for none): q, k, v and the result as f32, each cache's two slots in
 * place (f32) or widened, then cpu_attention() of the one (@row0 NULL)
 * or cpu_attention_varlen() of them all.
 */
static int attend(struct cpu_backend *cb, const struct djinn_node *node,
		  const struct dj_tensor *in, const struct dj_tensor *out,
		  struct cpu_attn *a, const size_t *row0,
		  const uint8_t *const *caches, size_t n, char *msg,
		  size_t msglen)
{
	const struct djinn_p_attention *p = &node->params.attention;
	unsigned int dt = in[0].desc.dtype;
	float *cache = NULL, *at;
	struct f32_view f;
	size_t P = 0;
	int ret;

	for (size_t i = 0; i < n && dt != DJINN_DTYPE_F32; i++)
		P += caches[i] ? a[i].P : 0;
	if (P) {
		cache = malloc(2 * P * a[0].Hk * a[0].D * sizeof(float));
		if (!cache)
			return errmsg(msg, msglen, -ENOMEM,
				      "no memory for the caches' f32");
	}
	ret = f32_begin(cb, in, 3, out, &f, msg, msglen);
	if (ret) {
		free(cache);
		return ret;
	}
	at = cache;
	for (size_t i = 0; i < n && !ret; i++) {
		if (!caches[i] || !a[i].P)
			continue;
		ret = cache_slots(cb, dt, caches[i], p->cache_k, p->cache_v, at,
				  &a[i]);
		if (dt != DJINN_DTYPE_F32)
			at += 2 * a[i].P * a[i].Hk * a[i].D;
	}
	if (!ret)
		ret = row0 ? cpu_attention_varlen(cb->pool, f.out, f.in[0],
						  f.in[1], f.in[2], a, row0,
						  n) :
			     cpu_attention(cb->pool, f.out, f.in[0], f.in[1],
					   f.in[2], a);
	if (ret == -ENOMEM)
		errmsg(msg, msglen, ret, "no memory for attention scores");
	free(cache);
	return f32_end(cb, out, &f, ret);
}

/* ATTENTION (enum djinn_attn_layout): see cpu_attn_init(), and
 * cpu_varlen_init() for DJINN_ATTN_VARLEN (lib/graph.h) */
static int op_attention(struct cpu_backend *cb, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out,
			char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *q = &in[0].desc;
	const uint8_t *caches[DJINN_VARLEN_MAX] = { NULL };
	struct cpu_attn a[DJINN_VARLEN_MAX];
	size_t row0[DJINN_VARLEN_MAX], n;
	const int64_t *tab;
	int ret;

	if (!djinn_dtype_is_float(q->dtype))
		return no_kernel(node, q->dtype, msg, msglen);
	if (in[1].desc.dtype != q->dtype || in[2].desc.dtype != q->dtype ||
	    out->desc.dtype != q->dtype)
		return errmsg(msg, msglen, -EINVAL, "dtypes differ");
	if (node->params.attention.layout != DJINN_ATTN_VARLEN) {
		ret = cpu_attn_init(&a[0], node, in, &out->desc, msg, msglen);
		if (!ret && a[0].P)
			caches[0] = ptr(&in[3]);
		return ret ? ret :
			     attend(cb, node, in, out, a, NULL, caches, 1, msg,
				    msglen);
	}
	ret = cpu_varlen_init(a, row0, node, in, &out->desc, msg, msglen);
	if (ret)
		return ret;
	n = in[3].desc.dims[0];
	tab = in[3].host;
	for (size_t i = 0; i < n; i++)
		caches[i] = (const uint8_t *)(uintptr_t)
			tab[i * DJINN_VARLEN_COLS + DJINN_VARLEN_CACHE];
	return attend(cb, node, in, out, a, row0, caches, n, msg, msglen);
}

/* ARGMAX: x (..., C) -> (...) i64, the first maximum */
static int op_argmax(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	unsigned int dtype = x->dtype;
	struct f32_view f;
	size_t C, rows;
	int ret;

	if (x->ndim < 1)
		return errmsg(msg, msglen, -EINVAL, "a scalar has no rows");
	C = x->dims[x->ndim - 1];
	rows = C ? djinn_desc_elems_from(x, 0) / C : 0;
	if (out->desc.dtype != DJINN_DTYPE_I64 ||
	    djinn_desc_elems_from(&out->desc, 0) != rows)
		return errmsg(msg, msglen, -EINVAL,
			      "result is not %zu i64 elements", rows);
	if (!djinn_dtype_is_float(dtype)) {
		if (!djinn_dtype_size(dtype))
			return no_kernel(node, dtype, msg, msglen);
		return cpu_argmax(cb->pool, dtype, ptr(out), ptr(&in[0]), rows,
				  C);
	}
	ret = f32_begin(cb, in, 1, NULL, &f, msg, msglen);
	if (ret)
		return ret;
	ret = cpu_argmax(cb->pool, DJINN_DTYPE_F32, ptr(out), f.in[0], rows, C);
	return f32_end(cb, NULL, &f, ret);
}

/* SAMPLE's rows, each djinn_sample()'s, a row a chunk of the pool */
struct sample_rows {
	const float *x;
	const uint8_t *params;
	int64_t *out;
	size_t V;
};

static int sample_range(void *arg, size_t lo, size_t hi)
{
	const struct sample_rows *a = arg;

	for (size_t r = lo; r < hi; r++) {
		struct djinn_sample_params p;
		int ret;

		memcpy(&p, a->params + r * sizeof(p), sizeof(p));
		ret = djinn_sample(a->x + r * a->V, (uint32_t)a->V, &p,
				   &a->out[r]);
		if (ret)
			return ret;
	}
	return 0;
}

static int op_sample(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen)
{
	struct sample_rows a;
	struct f32_view f;
	uint64_t rows = 0, V = 0;
	int ret;

	ret = dj_sample_check(in, out, &rows, &V, msg, msglen);
	if (ret)
		return ret;
	if (!djinn_dtype_is_float(in[0].desc.dtype))
		return no_kernel(node, in[0].desc.dtype, msg, msglen);
	a.V = V;
	ret = f32_begin(cb, in, 1, NULL, &f, msg, msglen);
	if (ret)
		return ret;
	a.x = f.in[0];
	a.params = ptr(&in[1]);
	a.out = ptr(out);
	ret = cpu_parallel_for(cb->pool, rows, 1, sample_range, &a);
	if (ret)
		errmsg(msg, msglen, ret, "sampling: %s", strerror(-ret));
	return f32_end(cb, NULL, &f, ret);
}

typedef int (*op_fn)(struct cpu_backend *cb, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out,
		     char *msg, size_t msglen);

/* The kernel of each op (backend.h); lib/graph.c says how many inputs
 * it takes. */
static BACKEND_OP_TABLE(op_fn, cpu_ops_table);

/* ---------------------------------------------------------------------- */
/* The backend */

static int cpu_run_node(struct backend *b, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out,
			char *msg, size_t msglen)
{
	int ret;

	ret = dj_node_check(node, in, out, msg, msglen);
	if (ret)
		return ret;
	return cpu_ops_table[node->op](to_cpu(b), node, in, out, msg, msglen);
}

/* Kernels run synchronously on the calling thread and the pool. */
static int cpu_sync(struct backend *b)
{
	return 0;
}

/* Device memory is host memory, and every node has run when it returns. */
static int cpu_copy_in(struct backend *b, uint64_t dst, const void *src,
		       uint64_t len, char *msg, size_t msglen)
{
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

static int cpu_copy_out(struct backend *b, void *dst, uint64_t src,
			uint64_t len, char *msg, size_t msglen)
{
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static void cpu_destroy(struct backend *b)
{
	struct cpu_backend *cb = to_cpu(b);

	if (!b)
		return;
	cpu_pool_destroy(cb->pool);
	cb->base.provider->ops->free(cb->base.provider);
	free(cb);
}

static const struct backend_ops cpu_backend_ops = {
	.run_node = cpu_run_node,
	.copy_in = cpu_copy_in,
	.copy_out = cpu_copy_out,
	.sync = cpu_sync,
	.destroy = cpu_destroy,
};

/*
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels at load
 * time by the CPU's family and model. One it does not know (a newer Xeon
 * than the library, as virtual machines report them: family 6 model 207
 * for 0.3.21) gets the Prescott kernels, SSE3 only: GEMM three times
 * slower than with the AVX-512 kernels the CPU runs. The remedy OpenBLAS
 * offers is OPENBLAS_CORETYPE, read when it initializes; so, unless the
 * administrator set it, pick the core by the CPU's features here and
 * initialize OpenBLAS's kernel table again, once, before the first BLAS
 * call of the process (the thread server and buffers do not depend on
 * the core). The symbols exist only in DYNAMIC_ARCH builds: weak.
 */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static const char *blas_core_for_cpu(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
	return NULL;
}

static void blas_pick_core(void)
{
	static const char *const generic[] = { "Prescott",  "Core2",
					       "Katmai",    "Coppermine",
					       "Northwood", "Nehalem",
					       "Unknown" };
	const char *now = openblas_get_corename(), *want;
	bool old = false;

	if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !now ||
	    getenv("OPENBLAS_CORETYPE"))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(generic); i++)
		old |= !strcasecmp(now, generic[i]);
	want = blas_core_for_cpu();
	if (!old || !want)
		return;
	if (setenv("OPENBLAS_CORETYPE", want, 0))
		return;
	gotoblas_dynamic_quit();
	gotoblas_dynamic_init();
	unsetenv("OPENBLAS_CORETYPE");
}

int cpu_backend_create(uint64_t capacity, unsigned int threads,
		       struct backend **out)
{
	struct vmu_provider *prov;
	int ret = vmu_host_provider_create(capacity, 0, &prov);

	return ret ? ret : cpu_backend_with(prov, threads, out);
}

int cpu_backend_with(struct vmu_provider *prov, unsigned int threads,
		     struct backend **out)
{
	static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
	struct cpu_backend *cb;
	int ret;

	pthread_once(&blas_once, blas_pick_core);
	if (!threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		threads = n < 1		      ? 1 :
			  n > CPU_MAX_THREADS ? CPU_MAX_THREADS :
						(unsigned int)n;
	}
	cb = threads > CPU_MAX_THREADS ? NULL : calloc(1, sizeof(*cb));
	if (!cb) {
		prov->ops->free(prov);
		return threads > CPU_MAX_THREADS ? -EINVAL : -ENOMEM;
	}
	cb->base.provider = prov;
	ret = cpu_pool_create(threads, &cb->pool);
	if (ret)
		goto out_provider;
	/* GEMMs are split over the pool (matmul.c), each one
	 * single-threaded in OpenBLAS: its own threads would spin in
	 * sched_yield() between calls, taking the cores from the pool's
	 * kernels. The setting is process-wide. */
	openblas_set_num_threads(1);

	cb->base.ops = &cpu_backend_ops;
	cb->base.name = "cpu";
	/* one graph at a time: its kernels share one pool of threads */
	cb->base.max_compute = 1;
	cb->base.def_compute = 1;
	*out = &cb->base;
	return 0;

out_provider:
	cb->base.provider->ops->free(cb->base.provider);
	free(cb);
	return ret;
}
