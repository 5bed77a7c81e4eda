// SPDX-License-Identifier: MIT
/*
 * The CUDA backend's run_node(): the CPU backend's checks, then kernels.
 *
 * A node is checked as the CPU backend checks it (dims, dtypes and
 * parameters, with the same messages; the shape helpers are the CPU
 * backend's own, cpu_bcast_init(), cpu_mm_init() and cpu_attn_init()),
 * then enqueued on the calling thread's compute stream; sync() waits. The
 * data checks the CPU backend makes, integer divisors and embedding ids,
 * run as kernels too, and the host reads their verdict before the op is
 * enqueued: those two ops wait for the stream. Ids that are in host memory
 * as well (dj_tensor's @host: djinnd's own steps) are checked there
 * instead, with no wait.
 *
 * MATMUL goes to cuBLAS (cublasGemmStridedBatchedEx, f32 accumulation;
 * no TF32 for f32) when it is installed and the dims fit its ints, else
 * to a tiled kernel.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "cuda_internal.h"
#include "graph.h"

/* A node's context: the device, the thread's lane, the message. */
struct nctx {
	struct cuda_dev *d;
	struct cuda_lane *l;
	char *msg;
	size_t msglen;
};

static int no_kernel(struct nctx *c, const struct djinn_node *node,
		     unsigned int dtype)
{
	return errmsg(c->msg, c->msglen, -EOPNOTSUPP,
		      "no cuda %s kernel for %s", djinn_op_name(node->op),
		      djinn_dtype_name(dtype));
}

static int want_like(struct nctx *c, const struct dj_tensor *out,
		     const struct dj_tensor *x)
{
	if (out->desc.dtype != x->desc.dtype ||
	    !djinn_desc_same_shape(&out->desc, &x->desc))
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result is not the shape and dtype of input 0");
	return 0;
}

/* The kernel for @dtype of a family laid out f32, f16, bf16, i32, i64, u8
 * (the dtypes' own order). */
static enum cuda_kernel by_dtype(enum cuda_kernel f32, unsigned int dtype)
{
	return (enum cuda_kernel)(f32 + (dtype - DJINN_DTYPE_F32));
}

static int launch(struct nctx *c, enum cuda_kernel k, uint64_t work,
		  unsigned int threads, unsigned int shmem, void **args)
{
	return cuda_launch(c->l, k, work, threads, shmem, args, c->msg,
			   c->msglen);
}

static int check(struct nctx *c, CUresult r, const char *what)
{
	return cuda_err(c->d, r, what, c->msg, c->msglen);
}

/* Read @len bytes at @src back to the host, after everything enqueued. */
static int read_back(struct nctx *c, void *dst, CUdeviceptr src, size_t len)
{
	const struct cu_api *cu = c->d->cu;
	CUresult r;

	r = cu->MemcpyDtoHAsync(dst, src, len, c->l->compute);
	if (r == CUDA_SUCCESS)
		r = cu->StreamSynchronize(c->l->compute);
	return check(c, r, "reading a check's result");
}

/* The widest unit (16, 8, 4, 2, 1 bytes) dividing every value given. */
static unsigned int unit_of(uint64_t a, uint64_t b, uint64_t e, uint64_t f,
			    uint64_t g)
{
	uint64_t all = a | b | e | f | g;
	unsigned int u = 16;

	while (u > 1 && (all & (u - 1)))
		u >>= 1;
	return u;
}

static unsigned int log2u(unsigned int u)
{
	return u >= 16 ? 4 : u >= 8 ? 3 : u >= 4 ? 2 : u >= 2 ? 1 : 0;
}

/* @rows rows of @len bytes: dst + r * dst_stride <- src + r * src_stride */
static int copy_rows(struct nctx *c, uint64_t dst, uint64_t dst_stride,
		     uint64_t src, uint64_t src_stride, uint64_t rows,
		     uint64_t len)
{
	unsigned int u = unit_of(dst, dst_stride, src, src_stride, len);
	uint64_t ds = dst_stride / u, ss = src_stride / u, ln = len / u;
	void *args[] = { &dst, &ds, &src, &ss, &rows, &ln };

	if (!rows || !len)
		return 0;
	if (rows == 1 || (dst_stride == len && src_stride == len))
		return check(c,
			     c->d->cu->MemcpyDtoDAsync(dst, src, rows * len,
						       c->l->compute),
			     "cuMemcpyDtoDAsync");
	return launch(c, (enum cuda_kernel)(K_copy_rows_1 + log2u(u)),
		      rows * ln, 256, 0, args);
}

static void to_djk(struct djk_bcast *k, const struct cpu_bcast *bc,
		   unsigned int op)
{
	memset(k, 0, sizeof(*k));
	k->n = bc->n;
	k->nd = bc->nd;
	k->op = op;
	for (unsigned int i = 0; i < bc->nd; i++) {
		k->dims[i] = bc->dims[i];
		k->sa[i] = bc->sa[i];
		k->sb[i] = bc->sb[i];
	}
}

/* ---------------------------------------------------------------------- */
/* MATMUL */

static int gemm_type(unsigned int dtype)
{
	return dtype == DJINN_DTYPE_F32 ? CUDA_R_32F_ :
	       dtype == DJINN_DTYPE_F16 ? CUDA_R_16F_ :
					  CUDA_R_16BF_;
}

/*
 * One cuBLAS call: @count matrices from a + i * sa, b + i * sb (strides
 * in elements) to out + i * M * N. Row-major C = op(A) op(B) is
 * column-major C^T = op(B)^T op(A)^T: cuBLAS gets b first.
 */
static int gemm(struct nctx *c, const struct cpu_mm *mm, unsigned int dtype,
		size_t M, uint64_t out, uint64_t a, uint64_t b, uint64_t count,
		uint64_t sa, uint64_t sb)
{
	const struct cublas_api *bl = c->d->blas;
	int t = gemm_type(dtype);
	float one = 1.0f, zero = 0.0f;
	int st;

	st = bl->GemmStridedBatchedEx(
		c->l->blas, mm->tb ? CUBLAS_OP_T_ : CUBLAS_OP_N_,
		mm->ta ? CUBLAS_OP_T_ : CUBLAS_OP_N_, (int)mm->N, (int)M,
		(int)mm->K, &one, (const void *)(uintptr_t)b, t,
		(int)(mm->tb ? mm->K : mm->N), (long long)sb,
		(const void *)(uintptr_t)a, t, (int)(mm->ta ? M : mm->K),
		(long long)sa, &zero, (void *)(uintptr_t)out, t, (int)mm->N,
		(long long)(M * mm->N), (int)count, CUBLAS_COMPUTE_32F_,
		CUBLAS_GEMM_DEFAULT_);
	if (st)
		return errmsg(c->msg, c->msglen, -EIO,
			      "cublasGemmStridedBatchedEx: status %d", st);
	return 0;
}

static bool fits_int(uint64_t v)
{
	return v <= INT_MAX;
}

static int matmul_blas(struct nctx *c, const struct cpu_mm *mm,
		       unsigned int dtype, uint64_t out, uint64_t a, uint64_t b)
{
	const struct cpu_bcast *bt = &mm->batch;
	size_t es = djinn_dtype_size(dtype);
	uint64_t MK = mm->M * mm->K, KN = mm->K * mm->N, MN = mm->M * mm->N;
	uint64_t inner, sa, sb, outer = 1;
	unsigned int nd = bt->nd;
	int ret = 0;

	/* activations (..., M, K) x a weight (K, N): one (B*M, K) x (K, N) */
	if (nd == 1 && bt->sb[0] == 0 && bt->sa[0] == 1 && !mm->ta &&
	    fits_int(bt->n * mm->M))
		return gemm(c, mm, dtype, bt->n * mm->M, out, a, b, 1, 0, 0);
	inner = nd ? bt->dims[nd - 1] : 1;
	sa = nd ? bt->sa[nd - 1] * MK : 0;
	sb = nd ? bt->sb[nd - 1] * KN : 0;
	for (unsigned int i = 0; i + 1 < nd; i++)
		outer *= bt->dims[i];
	for (uint64_t o = 0; o < outer && !ret; o++) {
		uint64_t r = o, oa = 0, ob = 0;

		/* the offsets of outer batch index o, dims 0 .. nd - 2 */
		for (int i = (int)nd - 2; i >= 0; i--) {
			oa += (r % bt->dims[i]) * bt->sa[i];
			ob += (r % bt->dims[i]) * bt->sb[i];
			r /= bt->dims[i];
		}
		for (uint64_t done = 0; done < inner && !ret;) {
			uint64_t n = inner - done > INT_MAX ? INT_MAX :
							      inner - done;

			ret = gemm(c, mm, dtype, mm->M,
				   out + (o * inner + done) * MN * es,
				   a + (oa * MK + done * sa) * es,
				   b + (ob * KN + done * sb) * es, n, sa, sb);
			done += n;
		}
	}
	return ret;
}

static int matmul_kernel(struct nctx *c, const struct cpu_mm *mm,
			 unsigned int dtype, uint64_t out, uint64_t a,
			 uint64_t b)
{
	struct djk_mm k;
	uint64_t gx = (mm->N + 15) / 16, gy = (mm->M + 15) / 16;
	uint64_t gz = mm->batch.n > 65535 ? 65535 : mm->batch.n;
	void *args[] = { &out, &a, &b, &k };
	CUresult r;

	if (gx > INT_MAX || gy > 65535)
		return errmsg(c->msg, c->msglen, -EOPNOTSUPP,
			      "a (%zu, %zu) result is too big for the "
			      "matmul kernel, and cuBLAS is not there",
			      mm->M, mm->N);
	memset(&k, 0, sizeof(k));
	k.M = mm->M;
	k.N = mm->N;
	k.K = mm->K;
	k.ta = mm->ta;
	k.tb = mm->tb;
	to_djk(&k.batch, &mm->batch, 0);
	if (!k.batch.n)
		return 0;
	r = c->d->cu->LaunchKernel(c->d->fn[by_dtype(K_matmul_f32, dtype)],
				   (unsigned int)gx, (unsigned int)gy,
				   (unsigned int)gz, 16, 16, 1, 0,
				   c->l->compute, args, NULL);
	return check(c, r, "cuLaunchKernel (matmul)");
}

static int op_matmul(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_p_matmul *p = &node->params.matmul;
	unsigned int dtype = in[0].desc.dtype;
	struct cpu_mm mm;
	int ret;

	if (!djinn_dtype_is_float(dtype))
		return no_kernel(c, node, dtype);
	if (in[1].desc.dtype != dtype || out->desc.dtype != dtype)
		return errmsg(c->msg, c->msglen, -EINVAL, "dtypes differ");
	if (p->trans_a > 1 || p->trans_b > 1)
		return errmsg(c->msg, c->msglen, -EINVAL, "trans not 0 or 1");
	ret = cpu_mm_init(&mm, &in[0].desc, &in[1].desc, p->trans_a, p->trans_b,
			  &out->desc, c->msg, c->msglen);
	if (ret)
		return ret;
	if (!mm.M || !mm.N || !mm.batch.n)
		return 0;
	if (!mm.K) /* sums of nothing */
		return check(c,
			     c->d->cu->MemsetD8Async(
				     out->addr, 0,
				     djinn_desc_elems_from(&out->desc, 0) *
					     djinn_dtype_size(dtype),
				     c->l->compute),
			     "cuMemsetD8Async");
	if (c->l->blas && fits_int(mm.M) && fits_int(mm.N) && fits_int(mm.K))
		return matmul_blas(c, &mm, dtype, out->addr, in[0].addr,
				   in[1].addr);
	return matmul_kernel(c, &mm, dtype, out->addr, in[0].addr, in[1].addr);
}

/* ---------------------------------------------------------------------- */
/* Elementwise */

static int op_binary(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out)
{
	unsigned int dtype = in[0].desc.dtype;
	struct cpu_bcast bc;
	struct djk_bcast k;
	uint64_t o = out->addr, a = in[0].addr, b = in[1].addr;
	void *args[] = { &o, &a, &b, &k };
	int ret;

	if (in[1].desc.dtype != dtype || out->desc.dtype != dtype)
		return errmsg(c->msg, c->msglen, -EINVAL, "dtypes differ");
	ret = cpu_bcast_init(&bc, &in[0].desc, &in[1].desc, &out->desc, c->msg,
			     c->msglen);
	if (ret)
		return ret;
	if (dtype < DJINN_DTYPE_F32 || dtype > DJINN_DTYPE_U8)
		return no_kernel(c, node, dtype);
	if (!djinn_dtype_is_float(dtype) && node->op == DJINN_GOP_DIV && bc.n) {
		uint64_t n = djinn_desc_elems_from(&in[1].desc, 0);
		CUdeviceptr flag = c->l->flag;
		void *zargs[] = { &b, &n, &flag };
		unsigned int found = 0;

		ret = check(c,
			    c->d->cu->MemsetD8Async(flag, 0, sizeof(found),
						    c->l->compute),
			    "cuMemsetD8Async");
		if (!ret)
			ret = launch(c,
				     (enum cuda_kernel)(K_any_zero_i32 + dtype -
							DJINN_DTYPE_I32),
				     n, 256, 0, zargs);
		if (!ret)
			ret = read_back(c, &found, flag, sizeof(found));
		if (ret)
			return ret;
		if (found)
			return errmsg(c->msg, c->msglen, -EDOM,
				      "integer division by zero");
	}
	if (!bc.n)
		return 0;
	to_djk(&k, &bc, node->op);
	return launch(c, by_dtype(K_binary_f32, dtype), bc.n, 256, 0, args);
}

static int op_unary(struct nctx *c, const struct djinn_node *node,
		    const struct dj_tensor *in, const struct dj_tensor *out)
{
	uint32_t op = node->op;
	uint64_t o = out->addr, x = in[0].addr,
		 n = djinn_desc_elems_from(&out->desc, 0);
	float alpha = node->params.scalar.alpha;
	void *args[] = { &op, &o, &x, &n, &alpha };
	int ret;

	if (!djinn_dtype_is_float(in[0].desc.dtype))
		return no_kernel(c, node, in[0].desc.dtype);
	ret = want_like(c, out, &in[0]);
	if (ret || !n)
		return ret;
	return launch(c, by_dtype(K_unary_f32, in[0].desc.dtype), n, 256, 0,
		      args);
}

/* ---------------------------------------------------------------------- */
/* Rows */

static int op_softmax(struct nctx *c, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	uint64_t o = out->addr, xa = in[0].addr, rows, C;
	void *args[] = { &o, &xa, &rows, &C };
	int ret;

	if (!djinn_dtype_is_float(x->dtype))
		return no_kernel(c, node, x->dtype);
	if (x->ndim < 1)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "a scalar has no rows");
	ret = want_like(c, out, &in[0]);
	if (ret)
		return ret;
	C = x->dims[x->ndim - 1];
	rows = C ? djinn_desc_elems_from(x, 0) / C : 0;
	if (!rows)
		return 0;
	return launch(c, by_dtype(K_softmax_f32, x->dtype),
		      rows * DJK_ROW_THREADS, DJK_ROW_THREADS, 0, args);
}

static int op_norm(struct nctx *c, const struct djinn_node *node,
		   const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	unsigned int nr = node->op == DJINN_GOP_LAYERNORM ? 3 : 2;
	float eps = node->params.scalar.eps;
	uint64_t o = out->addr, xa = in[0].addr, g = in[1].addr, rows, C;
	uint64_t be = nr == 3 ? in[2].addr : 0;
	uint32_t gdt = in[1].desc.dtype, bdt = nr == 3 ? in[2].desc.dtype : 0;
	void *args[] = { &o, &xa, &g, &gdt, &be, &bdt, &rows, &C, &eps };
	int ret;

	if (!djinn_dtype_is_float(x->dtype))
		return no_kernel(c, node, x->dtype);
	if (x->ndim < 1)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "a scalar has no rows");
	C = x->dims[x->ndim - 1];
	for (unsigned int i = 1; i < nr; i++)
		if (!djinn_dtype_is_float(in[i].desc.dtype) ||
		    in[i].desc.ndim != 1 || in[i].desc.dims[0] != C)
			return errmsg(c->msg, c->msglen, -EINVAL,
				      "input %u is not (%llu) floats", i,
				      (unsigned long long)C);
	if (!(eps > 0) || !isfinite(eps))
		return errmsg(c->msg, c->msglen, -EINVAL, "eps %g",
			      (double)eps);
	ret = want_like(c, out, &in[0]);
	if (ret)
		return ret;
	rows = C ? djinn_desc_elems_from(x, 0) / C : 0;
	if (!rows)
		return 0;
	return launch(c, by_dtype(K_norm_f32, x->dtype), rows * DJK_ROW_THREADS,
		      DJK_ROW_THREADS, 0, args);
}

static int op_argmax(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	uint64_t o = out->addr, xa = in[0].addr, rows, C;
	void *args[] = { &o, &xa, &rows, &C };

	if (x->ndim < 1)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "a scalar has no rows");
	C = x->dims[x->ndim - 1];
	rows = C ? djinn_desc_elems_from(x, 0) / C : 0;
	if (out->desc.dtype != DJINN_DTYPE_I64 ||
	    djinn_desc_elems_from(&out->desc, 0) != rows)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result is not %llu i64 elements",
			      (unsigned long long)rows);
	if (x->dtype < DJINN_DTYPE_F32 || x->dtype > DJINN_DTYPE_U8)
		return no_kernel(c, node, x->dtype);
	if (!rows)
		return 0;
	return launch(c, by_dtype(K_argmax_f32, x->dtype),
		      rows * DJK_ROW_THREADS, DJK_ROW_THREADS, 0, args);
}

/* SAMPLE: a block a row; bad rows say so in their result (proto.h) */
static int op_sample(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out)
{
	uint64_t o = out->addr, xa = in[0].addr, pa = in[1].addr, rows = 0,
		 C = 0;
	uint32_t V;
	void *args[] = { &o, &xa, &pa, &rows, &V };
	int ret = dj_sample_check(in, out, &rows, &C, c->msg, c->msglen);

	if (ret)
		return ret;
	if (!djinn_dtype_is_float(in[0].desc.dtype))
		return no_kernel(c, node, in[0].desc.dtype);
	V = (uint32_t)C;
	return launch(c, by_dtype(K_sample_f32, in[0].desc.dtype),
		      rows * DJK_SAMPLE_THREADS, DJK_SAMPLE_THREADS, 0, args);
}

/*
 * ATTENTION (enum djinn_attn_layout): the shapes and strides of the CPU
 * backend's cpu_attn_init(), the cache's slots as device addresses.
 */
static int attn_shape(struct nctx *c, const struct djinn_node *node,
		      const struct dj_tensor *in,
		      const struct djinn_tensor_desc *o, struct djk_attn *a)
{
	const struct djinn_p_attention *p = &node->params.attention;
	uint64_t es = djinn_dtype_size(in[0].desc.dtype);
	struct cpu_attn ca;
	int ret;

	ret = cpu_attn_init(&ca, node, in, o, c->msg, c->msglen);
	if (ret)
		return ret;
	memset(a, 0, sizeof(*a));
	a->B = ca.B;
	a->H = ca.H;
	a->Hk = ca.Hk;
	a->T = ca.T;
	a->S = ca.S;
	a->D = ca.D;
	a->Dv = ca.Dv;
	a->P = ca.P;
	a->cs = ca.cs;
	if (ca.P) {
		a->kc = in[3].addr + p->cache_k * ca.Hk * ca.D * es;
		a->vc = in[3].addr + p->cache_v * ca.Hk * ca.D * es;
	}
	for (unsigned int k = 0; k < 3; k++) {
		a->qs[k] = ca.qs[k];
		a->ks[k] = ca.ks[k];
		a->vs[k] = ca.vs[k];
		a->os[k] = ca.os[k];
	}
	a->scale = ca.scale;
	a->causal = ca.causal;
	return 0;
}

/* The dynamic shared memory of the attention kernels, beside their
 * static few hundred bytes, within the 48 KiB a launch may take without
 * opting in. */
static int attn_shmem(struct nctx *c, uint64_t D, uint64_t Dv,
		      unsigned int *shmem)
{
	uint64_t b = (D + Dv + DJK_ATTN_THREADS) * sizeof(float);

	if (b > 47 * 1024)
		return errmsg(c->msg, c->msglen, -EOPNOTSUPP,
			      "head dims %llu and %llu: the attention "
			      "kernel takes D + Dv <= %u",
			      (unsigned long long)D, (unsigned long long)Dv,
			      47 * 1024 / 4 - DJK_ATTN_THREADS);
	*shmem = (unsigned int)b;
	return 0;
}

static_assert(DJK_VARLEN_MAX == DJINN_VARLEN_MAX, "varlen table sizes");
static_assert(sizeof(struct djk_varlen) <= 4096 - 40,
	      "varlen attention's parameters fit a launch's");

/* DJINN_ATTN_VARLEN (lib/graph.h): the table, read on the host, passed by
 * value; every cache's slots as device addresses. */
static int op_attention_varlen(struct nctx *c, const struct djinn_node *node,
			       const struct dj_tensor *in,
			       const struct dj_tensor *out)
{
	const struct djinn_p_attention *p = &node->params.attention;
	uint64_t es = djinn_dtype_size(in[0].desc.dtype), R;
	uint64_t oa = out->addr, qa = in[0].addr, ka = in[1].addr;
	uint64_t va = in[2].addr;
	struct cpu_attn ca[DJINN_VARLEN_MAX];
	size_t row0[DJINN_VARLEN_MAX];
	const int64_t *tab = in[3].host;
	struct djk_varlen a;
	void *args[] = { &oa, &qa, &ka, &va, &R, &a };
	unsigned int shmem = 0;
	int ret;

	ret = cpu_varlen_init(ca, row0, node, in, &out->desc, c->msg,
			      c->msglen);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.H = ca[0].H;
	a.Hk = ca[0].Hk;
	a.D = ca[0].D;
	a.scale = ca[0].scale;
	a.n = (uint32_t)in[3].desc.dims[0];
	ret = attn_shmem(c, a.D, a.D, &shmem);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < a.n; i++) {
		uint64_t cache = (uint64_t)
			tab[i * DJINN_VARLEN_COLS + DJINN_VARLEN_CACHE];
		uint64_t W = a.Hk * a.D * es;

		a.seq[i] = (struct djk_varlen_seq){
			.kc = ca[i].P ? cache + p->cache_k * W : 0,
			.vc = ca[i].P ? cache + p->cache_v * W : 0,
			.cs = ca[i].cs,
			.P = ca[i].P,
			.row0 = (uint32_t)row0[i],
			.T = (uint32_t)ca[i].T,
		};
	}
	R = in[0].desc.dims[0];
	if (R > UINT32_MAX)
		return errmsg(c->msg, c->msglen, -E2BIG,
			      "varlen attention over %llu rows",
			      (unsigned long long)R);
	return launch(c, by_dtype(K_attention_varlen_f32, in[0].desc.dtype),
		      R * a.H * DJK_ATTN_THREADS, DJK_ATTN_THREADS, shmem,
		      args);
}

static int op_attention(struct nctx *c, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *q = &in[0].desc, *k = &in[1].desc;
	const struct djinn_tensor_desc *v = &in[2].desc, *o = &out->desc;
	uint64_t oa = out->addr, qa = in[0].addr, ka = in[1].addr;
	uint64_t va = in[2].addr, rows;
	struct djk_attn a;
	void *args[] = { &oa, &qa, &ka, &va, &a };
	unsigned int shmem = 0;
	int ret;

	if (!djinn_dtype_is_float(q->dtype))
		return no_kernel(c, node, q->dtype);
	if (k->dtype != q->dtype || v->dtype != q->dtype ||
	    o->dtype != q->dtype)
		return errmsg(c->msg, c->msglen, -EINVAL, "dtypes differ");
	if (node->params.attention.layout == DJINN_ATTN_VARLEN)
		return op_attention_varlen(c, node, in, out);
	ret = attn_shape(c, node, in, o, &a);
	if (!ret)
		ret = attn_shmem(c, a.D, a.Dv, &shmem);
	if (ret)
		return ret;
	rows = a.B * a.H * a.T;
	if (!rows || !a.Dv)
		return 0;
	return launch(c, by_dtype(K_attention_f32, q->dtype),
		      rows * DJK_ATTN_THREADS, DJK_ATTN_THREADS, shmem, args);
}

/* ---------------------------------------------------------------------- */
/* Byte movers */

/* Every id of @n at device address @ia below @V, by a kernel whose
 * verdict the host reads back (a wait for the stream): 0, or -EINVAL
 * naming the first bad one as the CPU backend does. */
static int embed_check_device(struct nctx *c, uint64_t ia, uint32_t i64,
			      uint64_t n, uint64_t V)
{
	uint64_t flag = c->l->flag, first = UINT64_MAX;
	void *cargs[] = { &ia, &n, &V, &flag };
	int64_t id = 0;
	int32_t id32 = 0;
	int ret;

	ret = check(c,
		    c->d->cu->MemsetD8Async(flag, 0xff, sizeof(first),
					    c->l->compute),
		    "cuMemsetD8Async");
	if (!ret)
		ret = launch(c, i64 ? K_embed_check_i64 : K_embed_check_i32, n,
			     256, 0, cargs);
	if (!ret)
		ret = read_back(c, &first, flag, sizeof(first));
	if (ret || first == UINT64_MAX)
		return ret;
	ret = i64 ? read_back(c, &id, ia + first * 8, 8) :
		    read_back(c, &id32, ia + first * 4, 4);
	if (ret)
		return ret;
	if (!i64)
		id = id32;
	return errmsg(c->msg, c->msglen, -EINVAL,
		      "id %lld out of range %llu (at %llu)", (long long)id,
		      (unsigned long long)V, (unsigned long long)first);
}

static int op_embedding(struct nctx *c, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *t = &in[0].desc, *ids = &in[1].desc;
	const struct djinn_tensor_desc *o = &out->desc;
	size_t es = djinn_dtype_size(t->dtype);
	uint64_t n = djinn_desc_elems_from(ids, 0), V, row;
	uint64_t ia = in[1].addr, oa = out->addr, ta = in[0].addr, rowu;
	uint32_t i64 = ids->dtype == DJINN_DTYPE_I64;
	void *eargs[] = { &oa, &ta, &rowu, &ia, &i64, &n };
	unsigned int u;
	int ret;

	if (ids->dtype != DJINN_DTYPE_I32 && ids->dtype != DJINN_DTYPE_I64)
		return no_kernel(c, node, ids->dtype);
	if (t->ndim != 2 || !es)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "table is not (V, C)");
	if (o->dtype != t->dtype || o->ndim != ids->ndim + 1 ||
	    memcmp(o->dims, ids->dims, ids->ndim * sizeof(o->dims[0])) ||
	    o->dims[ids->ndim] != t->dims[1])
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result is not (ids..., %llu)",
			      (unsigned long long)t->dims[1]);
	V = t->dims[0];
	row = t->dims[1] * es;
	if (!n)
		return 0;
	/* every id checked before a byte is written, as on the CPU: on
	 * the host where the ids are in host memory too (djinnd's own
	 * graphs: a step's token ids and positions), so the stream goes on
	 * without a wait; else on the device */
	ret = in[1].host ? cpu_embed_check(in[1].host, ids->dtype, n, V, c->msg,
					   c->msglen) :
			   embed_check_device(c, ia, i64, n, V);
	if (ret || !row)
		return ret;
	u = unit_of(oa, ta, row, 0, 0);
	rowu = row / u;
	return launch(c, (enum cuda_kernel)(K_embed_1 + log2u(u)), n * rowu,
		      256, 0, eargs);
}

static int op_reshape(struct nctx *c, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *x = &in[0].desc;
	size_t bytes = djinn_desc_elems_from(x, 0) * djinn_dtype_size(x->dtype);

	if (out->desc.dtype != x->dtype ||
	    djinn_desc_elems_from(&out->desc, 0) != djinn_desc_elems_from(x, 0))
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result has %zu elements, input %zu",
			      djinn_desc_elems_from(&out->desc, 0),
			      djinn_desc_elems_from(x, 0));
	if (!bytes)
		return 0;
	return check(c,
		     c->d->cu->MemcpyDtoDAsync(out->addr, in[0].addr, bytes,
					       c->l->compute),
		     "cuMemcpyDtoDAsync");
}

static int op_permute(struct nctx *c, const struct djinn_node *node,
		      const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_p_shape *p = &node->params.shape;
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	size_t es = djinn_dtype_size(x->dtype);
	uint64_t stride[DJINN_MAX_DIMS], oa = out->addr, ia = in[0].addr;
	unsigned int seen = 0;
	struct djk_perm k;
	void *args[] = { &oa, &ia, &k };

	if (p->ndim != x->ndim || o->ndim != x->ndim || o->dtype != x->dtype)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "permutation of %u dims for %u", p->ndim,
			      x->ndim);
	for (unsigned int d = 0; d < p->ndim; d++) {
		int32_t s = p->dims[d];

		if (s < 0 || s >= (int32_t)x->ndim || seen & (1u << s) ||
		    o->dims[d] != x->dims[s])
			return errmsg(c->msg, c->msglen, -EINVAL,
				      "not a permutation of the input");
		seen |= 1u << s;
	}
	memset(&k, 0, sizeof(k));
	k.n = djinn_desc_elems_from(x, 0);
	k.nd = x->ndim;
	/* the input's row-major strides, in elements */
	for (int d = (int)x->ndim - 1; d >= 0; d--)
		stride[d] = d == (int)x->ndim - 1 ?
				    1 :
				    stride[d + 1] * x->dims[d + 1];
	for (unsigned int d = 0; d < x->ndim; d++) {
		k.dims[d] = o->dims[d];
		k.istride[d] = stride[p->dims[d]];
	}
	if (!k.n)
		return 0;
	if (es != 1 && es != 2 && es != 4 && es != 8)
		return no_kernel(c, node, x->dtype);
	return launch(c, (enum cuda_kernel)(K_permute_1 + log2u(es)), k.n, 256,
		      0, args);
}

static int axis_of(int32_t a, unsigned int ndim)
{
	if (a < -(int32_t)ndim || a >= (int32_t)ndim)
		return -1;
	return a < 0 ? a + (int32_t)ndim : a;
}

static int op_slice(struct nctx *c, const struct djinn_node *node,
		    const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_p_axis *p = &node->params.axis;
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	int axis = axis_of(p->axis, x->ndim);
	int64_t start = p->start, end = p->end, dim;
	size_t es = djinn_dtype_size(x->dtype), inner;

	if (axis < 0)
		return errmsg(c->msg, c->msglen, -EINVAL, "axis %d", p->axis);
	dim = (int64_t)x->dims[axis];
	start += start < 0 ? dim : 0;
	end += end < 0 ? dim : 0;
	if (start < 0 || start >= end || end > dim)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "[%lld, %lld) is not within %lld",
			      (long long)p->start, (long long)p->end,
			      (long long)dim);
	if (o->dtype != x->dtype || o->ndim != x->ndim)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result is not the slice");
	for (unsigned int d = 0; d < x->ndim; d++)
		if (o->dims[d] != (d == (unsigned int)axis ?
					   (uint64_t)(end - start) :
					   x->dims[d]))
			return errmsg(c->msg, c->msglen, -EINVAL,
				      "result is not the slice");
	inner = djinn_desc_elems_from(x, axis + 1) * es;
	return copy_rows(
		c, out->addr, (uint64_t)(end - start) * inner,
		in[0].addr + (uint64_t)start * inner, (uint64_t)dim * inner,
		djinn_desc_elems_from(x, 0) / djinn_desc_elems_from(x, axis),
		(uint64_t)(end - start) * inner);
}

static int op_concat(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out)
{
	const struct djinn_tensor_desc *x = &in[0].desc, *o = &out->desc;
	int axis = axis_of(node->params.axis.axis, x->ndim);
	size_t es = djinn_dtype_size(x->dtype), inner, outer, at = 0;
	uint64_t sum = 0;
	int ret = 0;

	if (axis < 0)
		return errmsg(c->msg, c->msglen, -EINVAL, "axis %d",
			      node->params.axis.axis);
	for (unsigned int i = 0; i < node->nr_inputs; i++) {
		const struct djinn_tensor_desc *y = &in[i].desc;

		if (y->dtype != x->dtype || y->ndim != x->ndim)
			return errmsg(c->msg, c->msglen, -EINVAL,
				      "input %u differs from input 0", i);
		for (unsigned int d = 0; d < x->ndim; d++)
			if (d != (unsigned int)axis && y->dims[d] != o->dims[d])
				return errmsg(c->msg, c->msglen, -EINVAL,
					      "input %u differs in dim %u", i,
					      d);
		sum += y->dims[axis];
	}
	if (o->dtype != x->dtype || o->ndim != x->ndim || o->dims[axis] != sum)
		return errmsg(c->msg, c->msglen, -EINVAL,
			      "result is not the concatenation");
	inner = djinn_desc_elems_from(x, axis + 1) * es;
	outer = djinn_desc_elems_from(o, 0) / djinn_desc_elems_from(o, axis);
	for (unsigned int i = 0; i < node->nr_inputs && !ret; i++) {
		size_t len = in[i].desc.dims[axis] * inner;

		ret = copy_rows(c, out->addr + at, sum * inner, in[i].addr, len,
				outer, len);
		at += len;
	}
	return ret;
}

/* ---------------------------------------------------------------------- */

typedef int (*op_fn)(struct nctx *c, const struct djinn_node *node,
		     const struct dj_tensor *in, const struct dj_tensor *out);

/* The kernel of each op (backend.h); lib/graph.c says how many inputs
 * it takes. */
static BACKEND_OP_TABLE(op_fn, cuda_ops_table);

int cuda_run_node(struct backend *b, const struct djinn_node *node,
		  const struct dj_tensor *in, const struct dj_tensor *out,
		  char *msg, size_t msglen)
{
	struct nctx c = { .d = (struct cuda_dev *)b,
			  .msg = msg,
			  .msglen = msglen };
	int ret;

	ret = dj_node_check(node, in, out, msg, msglen);
	if (ret)
		return ret;
	ret = cuda_enter(c.d, &c.l, msg, msglen);
	if (ret)
		return ret;
	ret = cuda_ops_table[node->op](&c, node, in, out);
	cuda_leave(c.d);
	return ret;
}
