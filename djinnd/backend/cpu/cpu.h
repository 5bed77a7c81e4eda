/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's insides: a thread pool, dtype conversion and the
 * kernels. cpu.c checks a node and turns its tensors into what these
 * take: host pointers to contiguous row-major f32 (or, for the integer
 * and byte-moving kernels, the tensor's own dtype) and plain dims.
 *
 * Every kernel has a plain C reference in tests/unit/test_cpu_backend.c,
 * written separately in double precision, that the tests compare against.
 */
#ifndef DJINN_CPU_H
#define DJINN_CPU_H

/* The vectorizer's settings every kernel's loops need: vecmath.h. */
#include "vecmath.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

#include "errmsg.h"
#include "backend/backend.h"

#ifndef __printf
#define __printf(a, b) __attribute__((format(printf, a, b)))
#endif

/* ---------------------------------------------------------------------- */
/* Thread pool (pool.c) */

/*
 * Work smaller than this many elements (or its equivalent in row work)
 * runs on the calling thread: below it, waking workers costs more than
 * they save.
 */
#define CPU_GRAIN 16384

struct cpu_pool;

/* Does items [lo, hi) of a parallel loop; 0 or a negative errno. */
typedef int (*cpu_range_fn)(void *arg, size_t lo, size_t hi);

/* @nr_threads counts the caller: nr_threads - 1 workers are started. */
int cpu_pool_create(unsigned int nr_threads, struct cpu_pool **out);
void cpu_pool_destroy(struct cpu_pool *p);

/* Threads that run a loop, the caller's included. */
unsigned int cpu_pool_threads(const struct cpu_pool *p);

/*
 * Run @fn over [0, @n) in chunks of at least @grain items on the pool's
 * threads and the caller's, and return when all are done: 0, or the
 * first error a chunk returned. One loop runs at a time; a loop started
 * from inside a chunk runs on its caller alone.
 */
int cpu_parallel_for(struct cpu_pool *p, size_t n, size_t grain,
		     cpu_range_fn fn, void *arg);

/*
 * CPU_SIMD: on a hot loop, build it for AVX-512 and AVX2 beside the
 * baseline, picked at load time for the CPU it runs on (an ifunc). The
 * tree builds for baseline x86-64, so without it a loop gets 4-wide
 * SSE2: GELU's exp ran at a quarter of AVX-512's speed.
 */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_SIMD
#endif

/* ---------------------------------------------------------------------- */
/* dtype conversion (convert.c) */

/* @n elements of @dtype (F32, F16, BF16) to f32 and back; to f16 and
 * bf16 with rounding to nearest even, NaN staying NaN. */
int cpu_to_f32(struct cpu_pool *p, unsigned int dtype, const void *src,
	       float *dst, size_t n);
/* @rows rows of @cols elements, @stride elements apart in @src, into
 * @dst (rows, cols) as f32 */
int cpu_rows_to_f32(struct cpu_pool *p, unsigned int dtype, const void *src,
		    size_t stride, float *dst, size_t rows, size_t cols);
int cpu_from_f32(struct cpu_pool *p, unsigned int dtype, const float *src,
		 void *dst, size_t n);

/* ---------------------------------------------------------------------- */
/* Elementwise kernels (elementwise.c) */

/*
 * struct cpu_bcast - numpy broadcasting of a and b to the result, with
 * size-1 dims dropped and dims that stay contiguous in all three merged.
 * @nd:   dims left (0 for a single element)
 * @dims: their sizes, outermost first
 * @sa:   a's stride along each, in elements; 0 where a is broadcast
 * @sb:   the same for b
 * @n:    elements of the result
 */
struct cpu_bcast {
	unsigned int nd;
	uint64_t dims[DJINN_MAX_DIMS];
	uint64_t sa[DJINN_MAX_DIMS], sb[DJINN_MAX_DIMS];
	uint64_t n;
};

/* Broadcast @a and @b; -EINVAL if they do not or @out is not the result. */
int cpu_bcast_init(struct cpu_bcast *bc, const struct djinn_tensor_desc *a,
		   const struct djinn_tensor_desc *b,
		   const struct djinn_tensor_desc *out, char *msg,
		   size_t msglen);

/*
 * out = a op b (op: DJINN_GOP_ADD, SUB, MUL, DIV), @dtype F32, I32, I64
 * or U8. Integers wrap; their division truncates and the caller has made
 * sure no divisor is zero (cpu_any_zero).
 */
int cpu_binary(struct cpu_pool *p, unsigned int op, unsigned int dtype,
	       void *out, const void *a, const void *b,
	       const struct cpu_bcast *bc);
bool cpu_any_zero(unsigned int dtype, const void *x, size_t n);

/* out = f(x), op: DJINN_GOP_SCALE (by @alpha), GELU, RELU, SILU. */
int cpu_unary(struct cpu_pool *p, unsigned int op, float *out, const float *x,
	      size_t n, float alpha);

/* ---------------------------------------------------------------------- */
/* Row kernels (rows.c): x is (rows, C) */

int cpu_softmax(struct cpu_pool *p, float *out, const float *x, size_t rows,
		size_t C);
/* gamma, beta (C); @beta NULL: RMSNorm, x / sqrt(mean(x^2) + eps) * gamma */
int cpu_norm(struct cpu_pool *p, float *out, const float *x, const float *gamma,
	     const float *beta, size_t rows, size_t C, float eps);
/* out (rows) = index of the first maximum; @dtype F32, I32, I64 or U8 */
int cpu_argmax(struct cpu_pool *p, unsigned int dtype, int64_t *out,
	       const void *x, size_t rows, size_t C);

/*
 * struct cpu_attn - scaled dot-product attention over strided rows
 *
 * Query t of head h of batch b is the D floats at q + b qs[0] + h qs[1]
 * + t qs[2]; its result the Dv floats at out + the same with os. It
 * reads key/value head g = h / (H / Hk) (grouped-query attention; Hk 0
 * means H). Of its S = P + Sn keys, key s < P is the cache's, at kc +
 * s cs + g D (its value at vc + s cs + g Dv), and key s >= P is at k +
 * b ks[0] + g ks[1] + (s - P) ks[2] (its value likewise in v with vs).
 * causal: query t sees keys 0 .. t + S - T (T <= S).
 */
struct cpu_attn {
	size_t B, H, T, S, D, Dv;
	size_t Hk, P;
	size_t qs[3], ks[3], vs[3], os[3], cs;
	const float *kc, *vc;
	float scale;
	bool causal;
};

/*
 * An ATTENTION node's struct cpu_attn from its inputs' and result's descs
 * (enum djinn_attn_layout): q (B,H,T,D), k (B,Hk,S,D), v (B,Hk,S,Dv) ->
 * (B,H,T,Dv); or q (T,H,D), k (Sn,Hk,D), v (Sn,Hk,Dv) -> (T,H,Dv) after a
 * cache (P, R, Hk D), in[3], whose slots the caller points kc and vc at.
 * -EINVAL with the reason in @msg. The CUDA backend's too.
 */
int cpu_attn_init(struct cpu_attn *a, const struct djinn_node *node,
		  const struct dj_tensor *in, const struct djinn_tensor_desc *o,
		  char *msg, size_t msglen);
int cpu_attention(struct cpu_pool *p, float *out, const float *q,
		  const float *k, const float *v, const struct cpu_attn *a);

/*
 * DJINN_ATTN_VARLEN (lib/graph.h): each context's struct cpu_attn @a[N]
 * (a TOKENS attention of its T rows, B 1; kc and vc left for the caller
 * to point at its cache's slots) and its first row @row0[N], from the
 * node's table (in[3].host), N = in[3].desc.dims[0]. -EINVAL with the
 * reason in @msg for a table or shapes that do not agree. The CUDA
 * backend's too.
 */
int cpu_varlen_init(struct cpu_attn *a, size_t *row0,
		    const struct djinn_node *node, const struct dj_tensor *in,
		    const struct djinn_tensor_desc *o, char *msg,
		    size_t msglen);
/* Attention of the @n contexts @a[n] whose rows of q, k, v and out begin
 * at @row0[n]: each context's bits as cpu_attention() of its rows alone. */
int cpu_attention_varlen(struct cpu_pool *p, float *out, const float *q,
			 const float *k, const float *v,
			 const struct cpu_attn *a, const size_t *row0,
			 size_t n);

/* ---------------------------------------------------------------------- */
/* Matrix multiply (matmul.c) */

/*
 * struct cpu_mm - a batched matmul: a (..., M, K) x b (..., K, N), either
 * operand's last two dims transposed, batch dims broadcast
 * @batch:  the batch dims, broadcast as an elementwise op's dims are,
 *          with strides counted in matrices
 */
struct cpu_mm {
	size_t M, N, K;
	bool ta, tb;
	struct cpu_bcast batch;
};

/* Work out @mm from the descs; -EINVAL if @out is not the result. */
int cpu_mm_init(struct cpu_mm *mm, const struct djinn_tensor_desc *a,
		const struct djinn_tensor_desc *b, bool ta, bool tb,
		const struct djinn_tensor_desc *out, char *msg, size_t msglen);
/* Skinny products (skinny.c): out (M, N) = a (M, K) x b (K, N), or b
 * (N, K) with @tb, for 2 <= M <= CPU_SKINNY_MAX rows, each weight read
 * once; -EOPNOTSUPP where the CPU has neither AVX-512 nor AVX2 with FMA
 * (cpu_skinny_ok() says). */
#define CPU_SKINNY_MAX 32
bool cpu_skinny_ok(void);
int cpu_skinny(struct cpu_pool *p, float *out, const float *a, const float *b,
	       size_t M, size_t K, size_t N, bool tb);

int cpu_matmul(struct cpu_pool *p, float *out, const float *a, const float *b,
	       const struct cpu_mm *mm, char *msg, size_t msglen);

/* ---------------------------------------------------------------------- */
/* Byte movers (copy.c): any dtype, by element size */

int cpu_copy(struct cpu_pool *p, void *dst, const void *src, size_t bytes);
/* @rows rows of @len bytes, at @dst + r * @dst_stride from @src + r *
 * @src_stride */
int cpu_copy_rows(struct cpu_pool *p, void *dst, size_t dst_stride,
		  const void *src, size_t src_stride, size_t rows, size_t len);
/* out dim k is in dim perm[k] */
int cpu_permute(struct cpu_pool *p, void *out, const void *in, size_t esize,
		unsigned int ndim, const __u64 *dims, const int32_t *perm);
/*
 * out (n, row) = table[ids] (rows of @row bytes), ids i32 or i64 (@id_dtype),
 * each below @V. Checks every id before it writes a byte: -EINVAL naming
 * the first bad one. cpu_embed_check() is that check alone (the CUDA
 * backend's, for ids it has in host memory).
 */
int cpu_embed_check(const void *ids, unsigned int id_dtype, size_t n,
		    uint64_t V, char *msg, size_t msglen);
int cpu_embedding(struct cpu_pool *p, void *out, const void *table, size_t row,
		  uint64_t V, const void *ids, unsigned int id_dtype, size_t n,
		  char *msg, size_t msglen);

#endif /* DJINN_CPU_H */
