// SPDX-License-Identifier: MIT
/*
 * Skinny products: out (M, N) = a (M, K) x b, for 2 <= M <= SKINNY_MAX
 * rows of activations (the steps of a pass: one row per decoding
 * context) against a weight b, (K, N) or (N, K) with @tb.
 *
 * Such a product is bound by reading the weight, as a matrix-vector
 * product is: M rows should cost little more than one. OpenBLAS's sgemm
 * packs its operands first, the weight included, and at these M that
 * made it several times slower than its sgemv, so a pass of two contexts
 * cost more than their two steps alone. These kernels read each weight once
 * and keep the M rows' partial sums in registers:
 *
 * - b (K, N): a stripe of W columns (two vectors) at a time; for each k,
 *   the stripe's row of b is loaded once and multiplied into up to 8
 *   rows' accumulators (a broadcast of a[m][k] each).
 * - b (N, K): two rows of b at a time, against up to 8 rows of a (which
 *   stay in L1: 8 x K floats); each accumulator is reduced at the end.
 *
 * The vectors are GCC's vector extensions, compiled for AVX-512 and for
 * AVX2 with FMA and chosen at run time (cpu_skinny_ok() says whether
 * either runs here); rows past 8 go in further groups, which read the
 * stripe again from cache. Columns are split over the pool as gemv()
 * splits them. The sums are in another order than sgemv's, so a row's
 * result may differ from its product alone in the last bits.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "cpu.h"

typedef void (*skinny_fn)(const float *a, const float *b, float *out, size_t M,
			  size_t K, size_t N, size_t n0, size_t n1);

#if defined(__x86_64__)

#define MR 8 /* rows of a a group, at most */
#define KB_BYTES (128 << 10) /* a chunk of b's rows, (K, N) */

#define ACC2(X) X(0) X(1)
#define ACC4(X) ACC2(X) X(2) X(3)
#define ACC8(X) ACC4(X) X(4) X(5) X(6) X(7)

/* Row r's two accumulators; in a kernel where @zero is a vector 0,
 * @nv the vectors (or rows of b) a group takes, @vw floats a vector. */
#define ACC_DECL(r) __typeof__(zero) c##r##0 = zero, c##r##1 = zero;
#define ROW_PTR(r) const float *a##r = a + (r < mr ? r : mr - 1) * K;

/* (K, N): row r's multiply-add of a[r][k] into the stripe, and the
 * stripe's store (or addition, for a later chunk of k) */
#define KN_FMA(r)                          \
	{                                  \
		float x = a##r[k];         \
                                           \
		c##r##0 += x * b0;         \
		if (nv > 1)                \
			c##r##1 += x * b1; \
	}
#define KN_PUT1(dst, v)                             \
	{                                           \
		__typeof__(zero) o = v;             \
                                                    \
		if (add) {                          \
			__typeof__(zero) t;         \
                                                    \
			memcpy(&t, dst, sizeof(t)); \
			o += t;                     \
		}                                   \
		memcpy(dst, &o, sizeof(o));         \
	}
#define KN_STORE(r)                                            \
	if (r < mr) {                                          \
		KN_PUT1(out + r * N + n, c##r##0)              \
		if (nv > 1)                                    \
			KN_PUT1(out + r * N + n + vw, c##r##1) \
	}

/* (N, K): row r's multiply-add against rows n, n + 1 of b, and the
 * sums */
/* (N, K): row r's four accumulators, against rows n .. n + 3 of b,
 * and their sums */
#define NK_DECL(r)                                                       \
	__typeof__(zero) c##r##0 = zero, c##r##1 = zero, c##r##2 = zero, \
			 c##r##3 = zero;
#define NK_FMA(r)                                \
	{                                        \
		__typeof__(zero) x;              \
                                                 \
		memcpy(&x, a##r + k, sizeof(x)); \
		c##r##0 += x * b0;               \
		c##r##1 += x * b1;               \
		c##r##2 += x * b2;               \
		c##r##3 += x * b3;               \
	}
#define NK_STORE(r)                                                         \
	if (r < mr) {                                                       \
		float s[4] = { VRED(c##r##0), VRED(c##r##1), VRED(c##r##2), \
			       VRED(c##r##3) };                             \
                                                                            \
		for (unsigned int j = 0; j < 4; j++) {                      \
			for (size_t t = k; t < K; t++)                      \
				s[j] += a##r[t] * bp[j * K + t];            \
			out[r * N + n + j] = s[j];                          \
		}                                                           \
	}

/* A group of @R rows (ACC@R): (K, N) over rows [k0, k1) of b */
#define KN_GROUP(SUF, TGT, V, NV, R)                                       \
	__attribute__((target(TGT))) static void kn##R##_##SUF(            \
		const float *a, const float *b, float *out, size_t K,      \
		size_t N, size_t n, unsigned int mr, size_t k0, size_t k1, \
		bool add)                                                  \
	{                                                                  \
		vf_##SUF zero = { 0 };                                     \
		const unsigned int nv = NV, vw = V;                        \
		ACC##R(ROW_PTR) ACC##R(ACC_DECL)                           \
                                                                           \
			for (size_t k = k0; k < k1; k++)                   \
		{                                                          \
			const float *bk = b + k * N + n;                   \
			vf_##SUF b0 = ld_##SUF(bk);                        \
			vf_##SUF b1 = nv > 1 ? ld_##SUF(bk + vw) : zero;   \
                                                                           \
			ACC##R(KN_FMA)                                     \
		}                                                          \
		ACC##R(KN_STORE)                                           \
	}

/* ... (N, K) against rows n .. n + 3 of b */
#define NK_GROUP(SUF, TGT, V, R)                                      \
	__attribute__((target(TGT))) static void nk##R##_##SUF(       \
		const float *a, const float *b, float *out, size_t K, \
		size_t N, size_t n, unsigned int mr)                  \
	{                                                             \
		const float *bp = b + n * K;                          \
		vf_##SUF zero = { 0 };                                \
		size_t k = 0;                                         \
		ACC##R(ROW_PTR) ACC##R(NK_DECL)                       \
                                                                      \
			for (; k + V <= K; k += V)                    \
		{                                                     \
			vf_##SUF b0 = ld_##SUF(bp + k);               \
			vf_##SUF b1 = ld_##SUF(bp + K + k);           \
			vf_##SUF b2 = ld_##SUF(bp + 2 * K + k);       \
			vf_##SUF b3 = ld_##SUF(bp + 3 * K + k);       \
                                                                      \
			/* the next four rows of b, a line each */    \
			__builtin_prefetch(bp + 4 * K + k);           \
			__builtin_prefetch(bp + 5 * K + k);           \
			__builtin_prefetch(bp + 6 * K + k);           \
			__builtin_prefetch(bp + 7 * K + k);           \
			ACC##R(NK_FMA)                                \
		}                                                     \
		ACC##R(NK_STORE)                                      \
	}

/*
 * The kernels of one vector width @V under target @TGT. (K, N): a
 * stripe of @NV vectors of columns; b's rows go in chunks of about
 * KB_BYTES of the thread's columns, the next chunk prefetched in memory
 * order while this one is computed (a stripe alone would walk b a row
 * apart, a page at a time, which the hardware does not prefetch), each
 * chunk's sums added to the last. (N, K): @NV rows of b at a time.
 */
#define SKINNY_KERNELS(SUF, TGT, V, NV)                                        \
	__attribute__((target(TGT))) static inline vf_##SUF ld_##SUF(          \
		const float *p)                                                \
	{                                                                      \
		vf_##SUF v;                                                    \
                                                                               \
		memcpy(&v, p, sizeof(v));                                      \
		return v;                                                      \
	}                                                                      \
                                                                               \
	KN_GROUP(SUF, TGT, V, NV, 2)                                           \
	KN_GROUP(SUF, TGT, V, NV, 4)                                           \
	KN_GROUP(SUF, TGT, V, NV, 8)                                           \
	NK_GROUP(SUF, TGT, V, 2)                                               \
	NK_GROUP(SUF, TGT, V, 4)                                               \
                                                                               \
	__attribute__((target(TGT))) static void kn_##SUF(                     \
		const float *a, const float *b, float *out, size_t M,          \
		size_t K, size_t N, size_t n0, size_t n1)                      \
	{                                                                      \
		size_t w = NV * V, ns = n0 + (n1 - n0) / w * w;                \
		size_t kb = KB_BYTES / ((ns - n0) * 4 + 1);                    \
                                                                               \
		kb = kb < 4 ? 4 : kb;                                          \
		for (size_t k0 = 0; k0 < K && ns > n0; k0 += kb) {             \
			size_t k1 = k0 + kb < K ? k0 + kb : K;                 \
			size_t k2 = k1 + kb < K ? k1 + kb : K;                 \
                                                                               \
			for (size_t k = k1; k < k2; k++)                       \
				for (size_t c = n0; c < ns; c += 16)           \
					__builtin_prefetch(b + k * N + c);     \
			for (size_t n = n0; n < ns; n += w)                    \
				for (size_t m = 0; m < M; m += MR) {           \
					unsigned int mr = M - m < MR ? M - m : \
								       MR;     \
					const float *am = a + m * K;           \
					float *om = out + m * N;               \
                                                                               \
					if (mr <= 2)                           \
						kn2_##SUF(am, b, om, K, N, n,  \
							  mr, k0, k1, k0 > 0); \
					else if (mr <= 4)                      \
						kn4_##SUF(am, b, om, K, N, n,  \
							  mr, k0, k1, k0 > 0); \
					else                                   \
						kn8_##SUF(am, b, om, K, N, n,  \
							  mr, k0, k1, k0 > 0); \
				}                                              \
		}                                                              \
		skinny_rest(a, b, out, M, K, N, ns, n1, false);                \
	}                                                                      \
                                                                               \
	__attribute__((target(TGT))) static void nk_##SUF(                     \
		const float *a, const float *b, float *out, size_t M,          \
		size_t K, size_t N, size_t n0, size_t n1)                      \
	{                                                                      \
		size_t n = n0;                                                 \
                                                                               \
		/* rows of a four at a time on AVX-512's 32 registers (16  \
		 * accumulators), two on AVX2's 16 */   \
		const unsigned int g = V == 16 ? 4 : 2;                        \
                                                                               \
		for (; n + 4 <= n1; n += 4)                                    \
			for (size_t m = 0; m < M; m += g) {                    \
				unsigned int mr = M - m < g ? M - m : g;       \
				const float *am = a + m * K;                   \
				float *om = out + m * N;                       \
                                                                               \
				if (mr <= 2)                                   \
					nk2_##SUF(am, b, om, K, N, n, mr);     \
				else                                           \
					nk4_##SUF(am, b, om, K, N, n, mr);     \
			}                                                      \
		skinny_rest(a, b, out, M, K, N, n, n1, true);                  \
	}

/* Columns [n, n1) of the result that fill no stripe or group, one by
 * one: b (K, N), or (N, K) with @tb */
static void skinny_rest(const float *a, const float *b, float *out, size_t M,
			size_t K, size_t N, size_t n, size_t n1, bool tb)
{
	for (; n < n1; n++)
		for (size_t m = 0; m < M; m++) {
			float s = 0;

			for (size_t k = 0; k < K; k++)
				s += a[m * K + k] *
				     b[tb ? n * K + k : k * N + n];
			out[m * N + n] = s;
		}
}

typedef float vf_512 __attribute__((vector_size(64)));
typedef float vf_256 __attribute__((vector_size(32)));
typedef float vf_128 __attribute__((vector_size(16)));

/* The sum of a vector's lanes, halving it (a scalar loop would cost a
 * lane's extraction each) */
__attribute__((target("avx2,fma"))) static inline float red_256(vf_256 x)
{
	vf_128 h = __builtin_shufflevector(x, x, 0, 1, 2, 3) +
		   __builtin_shufflevector(x, x, 4, 5, 6, 7);

	return (h[0] + h[2]) + (h[1] + h[3]);
}

__attribute__((target("avx512f"))) static inline float red_512(vf_512 x)
{
	vf_256 h = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
		   __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
	vf_128 q = __builtin_shufflevector(h, h, 0, 1, 2, 3) +
		   __builtin_shufflevector(h, h, 4, 5, 6, 7);

	return (q[0] + q[2]) + (q[1] + q[3]);
}

#define VRED(x) _Generic((x), vf_512 : red_512, vf_256 : red_256)(x)

SKINNY_KERNELS(512, "avx512f", 16, 2)
SKINNY_KERNELS(256, "avx2,fma", 8, 1)

static skinny_fn pick(bool tb)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return tb ? nk_512 : kn_512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return tb ? nk_256 : kn_256;
	return NULL;
}
#else
/* elsewhere sgemm does them */
static skinny_fn pick(bool tb)
{
	return NULL;
}
#endif

bool cpu_skinny_ok(void)
{
	return pick(false);
}

struct skinny_job {
	skinny_fn fn;
	const float *a, *b;
	float *out;
	size_t M, K, N;
};

/* Column blocks [lo, hi) of SKINNY_COLS */
#define SKINNY_COLS 64

static int skinny_range(void *arg, size_t lo, size_t hi)
{
	const struct skinny_job *j = arg;
	size_t n0 = lo * SKINNY_COLS, n1 = hi * SKINNY_COLS;

	j->fn(j->a, j->b, j->out, j->M, j->K, j->N, n0, n1 < j->N ? n1 : j->N);
	return 0;
}

int cpu_skinny(struct cpu_pool *p, float *out, const float *a, const float *b,
	       size_t M, size_t K, size_t N, bool tb)
{
	struct skinny_job j = { pick(tb), a, b, out, M, K, N };
	size_t blocks = (N + SKINNY_COLS - 1) / SKINNY_COLS;
	size_t per = SKINNY_COLS * K; /* weights a block reads */

	if (!j.fn)
		return -EOPNOTSUPP;
	return cpu_parallel_for(p, blocks,
				per >= CPU_GRAIN ? 1 : CPU_GRAIN / per,
				skinny_range, &j);
}
