// SPDX-License-Identifier: MIT
/*
 * MATMUL through OpenBLAS's cblas_sgemm, single-threaded, on the pool's
 * threads; one row through gemv() here.
 *
 * The hot path of a transformer is activations (B, T, C) times a weight
 * (C, N): b has no batch, a's batch is contiguous, so the whole node is
 * one sgemm of (B*T, C) x (C, N), split by columns of the result into
 * one sgemm per thread of the pool. Otherwise there is one sgemm per
 * matrix of the result, the matrices spread over the pool.
 *
 * OpenBLAS runs with one thread (cpu.c): its own threads would spin in
 * sched_yield() for a while after every call, and with as many threads
 * as cores they take the cores from the pool's next kernel; the pool's
 * idle threads sleep.
 *
 * One row (decoding a token) is a matrix-vector product, which reads
 * every weight once and is bound by memory bandwidth. gemv() streams the
 * weights with loops compiled for AVX-512, AVX2 and the baseline, split
 * over the pool: as fast as OpenBLAS's sgemv, without its threads.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "cpu.h"

/*
 * An sgemm of at most this M*N*K is not worth splitting (OpenBLAS itself
 * would run it on one thread: interface/gemm.c, SMP_THRESHOLD_MIN *
 * GEMM_MULTITHREAD_THRESHOLD by default); this many of them make a chunk
 * of the pool's work.
 */
#define BLAS_SMALL (65536 * 4)

int cpu_mm_init(struct cpu_mm *mm, const struct djinn_tensor_desc *a,
		const struct djinn_tensor_desc *b, bool ta, bool tb,
		const struct djinn_tensor_desc *out, char *msg, size_t msglen)
{
	struct djinn_tensor_desc va, vb, vo;
	unsigned int na, nb, no;
	uint64_t kb;

	if (a->ndim < 2 || b->ndim < 2)
		return cpu_fail(msg, msglen, -EINVAL,
				"inputs have %u and %u dims, not 2 or more",
				a->ndim, b->ndim);
	na = a->ndim - 2;
	nb = b->ndim - 2;
	no = na > nb ? na : nb;
	mm->ta = ta;
	mm->tb = tb;
	mm->M = a->dims[na + ta];
	mm->K = a->dims[na + 1 - ta];
	kb = b->dims[nb + tb];
	mm->N = b->dims[nb + 1 - tb];
	if (mm->K != kb)
		return cpu_fail(msg, msglen, -EINVAL,
				"inner dims %zu and %llu differ", mm->K,
				(unsigned long long)kb);
	if (out->ndim != no + 2 || out->dims[no] != mm->M ||
	    out->dims[no + 1] != mm->N)
		return cpu_fail(msg, msglen, -EINVAL,
				"result is not (..., %zu, %zu)", mm->M, mm->N);

	/* The batch dims broadcast like an elementwise op's; counted in
	 * matrices, the strides come out in matrices. */
	va = *a;
	vb = *b;
	vo = *out;
	va.ndim = na;
	vb.ndim = nb;
	vo.ndim = no;
	return cpu_bcast_init(&mm->batch, &va, &vb, &vo, msg, msglen);
}

/* ---------------------------------------------------------------------- */
/* Matrix-vector products */

/*
 * The loops are written once (always inlined) and compiled three times:
 * for AVX-512, AVX2 with FMA and the baseline, picked by the CPU's
 * features on first use (not by its model, which may be too new for the
 * compiler's runtime to name).
 */

/*
 * y[n0, n1) = x (K) . w (K, N) over those columns: four rows of w at a
 * time added into y, which stays in L1; the rows are read contiguously,
 * four streams at once.
 */
static inline __attribute__((always_inline)) void
gemv_kn_body(const float *restrict x, const float *restrict w,
	     float *restrict y, size_t K, size_t N, size_t n0, size_t n1)
{
	size_t n = n1 - n0, k = 0;

	y += n0;
	w += n0;
	for (size_t j = 0; j < n; j++)
		y[j] = 0.0f;
	for (; k + 4 <= K; k += 4) {
		const float *w0 = w + k * N, *w1 = w0 + N, *w2 = w1 + N;
		const float *w3 = w2 + N;
		float x0 = x[k], x1 = x[k + 1], x2 = x[k + 2], x3 = x[k + 3];

		for (size_t j = 0; j < n; j++)
			y[j] += (x0 * w0[j] + x1 * w1[j]) +
				(x2 * w2[j] + x3 * w3[j]);
	}
	for (; k < K; k++) {
		const float *wk = w + k * N;
		float xk = x[k];

		for (size_t j = 0; j < n; j++)
			y[j] += xk * wk[j];
	}
}

/*
 * y[n0, n1) = w (N, K) rows n0 .. n1 - 1 dotted with x (K): sixteen
 * partial sums a row, so the loop vectorizes without reassociating.
 */
static inline __attribute__((always_inline)) void
gemv_nk_body(const float *restrict x, const float *restrict w,
	     float *restrict y, size_t K, size_t n0, size_t n1)
{
	for (size_t r = n0; r < n1; r++) {
		const float *wr = w + r * K;
		float acc[16] = { 0 }, s = 0.0f;
		size_t i = 0;

		for (; i + 16 <= K; i += 16)
			for (size_t l = 0; l < 16; l++)
				acc[l] += wr[i + l] * x[i + l];
		for (size_t l = 0; l < 8; l++)
			acc[l] += acc[l + 8];
		for (size_t l = 0; l < 4; l++)
			acc[l] += acc[l + 4];
		s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
		for (; i < K; i++)
			s += wr[i] * x[i];
		y[r] = s;
	}
}

typedef void (*gemv_kn_fn)(const float *x, const float *w, float *y, size_t K,
			   size_t N, size_t n0, size_t n1);
typedef void (*gemv_nk_fn)(const float *x, const float *w, float *y, size_t K,
			   size_t n0, size_t n1);

#define GEMV_VARIANT(name, attr)                                        \
	attr static void gemv_kn_##name(const float *x, const float *w, \
					float *y, size_t K, size_t N,   \
					size_t n0, size_t n1)           \
	{                                                               \
		gemv_kn_body(x, w, y, K, N, n0, n1);                    \
	}                                                               \
	attr static void gemv_nk_##name(const float *x, const float *w, \
					float *y, size_t K, size_t n0,  \
					size_t n1)                      \
	{                                                               \
		gemv_nk_body(x, w, y, K, n0, n1);                       \
	}

GEMV_VARIANT(base, )
#ifdef __x86_64__
GEMV_VARIANT(avx2, __attribute__((target("avx2,fma"))))
GEMV_VARIANT(avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))))
#endif

static gemv_kn_fn gemv_kn = gemv_kn_base;
static gemv_nk_fn gemv_nk = gemv_nk_base;

static void gemv_pick(void)
{
#ifdef __x86_64__
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl")) {
		gemv_kn = gemv_kn_avx512;
		gemv_nk = gemv_nk_avx512;
	} else if (__builtin_cpu_supports("avx2") &&
		   __builtin_cpu_supports("fma")) {
		gemv_kn = gemv_kn_avx2;
		gemv_nk = gemv_nk_avx2;
	}
#endif
}

struct gemv_job {
	const float *x, *w;
	float *y;
	size_t K, N;
	bool tb;
};

/* Output columns [lo, hi) in blocks of GEMV_COLS (gemv_kn), or rows of
 * w [lo, hi) (gemv_nk) */
#define GEMV_COLS 16

static int gemv_range(void *arg, size_t lo, size_t hi)
{
	const struct gemv_job *j = arg;

	if (j->tb) {
		gemv_nk(j->x, j->w, j->y, j->K, lo, hi);
	} else {
		hi *= GEMV_COLS;
		gemv_kn(j->x, j->w, j->y, j->K, j->N, lo * GEMV_COLS,
			hi < j->N ? hi : j->N);
	}
	return 0;
}

/* out (N) = a (K) x b: b (K, N), or (N, K) with @tb; on the pool. */
static int gemv(struct cpu_pool *p, const struct cpu_mm *mm, float *out,
		const float *a, const float *b)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct gemv_job j = { a, b, out, mm->K, mm->N, mm->tb };
	size_t units = mm->tb ? mm->N : (mm->N + GEMV_COLS - 1) / GEMV_COLS;
	size_t per_unit = mm->tb ? mm->K : mm->K * GEMV_COLS;

	pthread_once(&once, gemv_pick);
	/* a multiply-add of a weight read from memory: about one element
	 * of an elementwise op's work */
	return cpu_parallel_for(
		p, units, per_unit >= CPU_GRAIN ? 1 : CPU_GRAIN / per_unit,
		gemv_range, &j);
}

/* ---------------------------------------------------------------------- */

/*
 * out (M, N) = op(a) (M, K) x op(b) (K, N), all row-major. One row is a
 * matrix-vector product (decoding a token): gemv() above, on the calling
 * thread when called from the pool; a (1, K) is K contiguous floats
 * whether transposed or not.
 */
static void sgemm(struct cpu_pool *p, const struct cpu_mm *mm, size_t M,
		  float *out, const float *a, const float *b)
{
	if (M == 1) {
		gemv(p, mm, out, a, b);
		return;
	}
	cblas_sgemm(CblasRowMajor, mm->ta ? CblasTrans : CblasNoTrans,
		    mm->tb ? CblasTrans : CblasNoTrans, (int)M, (int)mm->N,
		    (int)mm->K, 1.0f, a, (int)(mm->ta ? mm->M : mm->K), b,
		    (int)(mm->tb ? mm->K : mm->N), 0.0f, out, (int)mm->N);
}

struct mm_job {
	struct cpu_pool *p;
	const struct cpu_mm *mm;
	float *out;
	const float *a, *b;
};

/* Result matrices [lo, hi) */
static int mm_range(void *arg, size_t lo, size_t hi)
{
	const struct mm_job *j = arg;
	const struct cpu_mm *mm = j->mm;
	size_t MK = mm->M * mm->K, KN = mm->K * mm->N, MN = mm->M * mm->N;

	for (size_t i = lo; i < hi; i++) {
		uint64_t rem = i, oa = 0, ob = 0;

		for (unsigned int k = mm->batch.nd; k-- > 0;) {
			uint64_t x = rem % mm->batch.dims[k];

			rem /= mm->batch.dims[k];
			oa += x * mm->batch.sa[k];
			ob += x * mm->batch.sb[k];
		}
		sgemm(j->p, mm, mm->M, j->out + i * MN, j->a + oa * MK,
		      j->b + ob * KN);
	}
	return 0;
}

/*
 * A big sgemm split over the pool by columns of the result, one block a
 * thread (each an sgemm of its own on OpenBLAS, single-threaded): each
 * thread packs its own columns of b, the weights, and only a, the
 * activations, is packed by every thread.
 */
#define GEMM_COLS 64

struct gemm_job {
	const struct cpu_mm *mm;
	size_t M;
	float *out;
	const float *a, *b;
};

static int gemm_cols(void *arg, size_t lo, size_t hi)
{
	const struct gemm_job *j = arg;
	const struct cpu_mm *mm = j->mm;
	size_t n0 = lo * GEMM_COLS, n1 = hi * GEMM_COLS;

	n1 = n1 < mm->N ? n1 : mm->N;
	cblas_sgemm(CblasRowMajor, CblasNoTrans,
		    mm->tb ? CblasTrans : CblasNoTrans, (int)j->M,
		    (int)(n1 - n0), (int)mm->K, 1.0f, j->a, (int)mm->K,
		    j->b + (mm->tb ? n0 * mm->K : n0),
		    (int)(mm->tb ? mm->K : mm->N), 0.0f, j->out + n0,
		    (int)mm->N);
	return 0;
}

static int gemm_split(struct cpu_pool *p, const struct cpu_mm *mm, size_t M,
		      float *out, const float *a, const float *b)
{
	struct gemm_job j = { mm, M, out, a, b };
	size_t units = (mm->N + GEMM_COLS - 1) / GEMM_COLS;
	size_t threads = cpu_pool_threads(p);

	return cpu_parallel_for(p, units, (units + threads - 1) / threads,
				gemm_cols, &j);
}

int cpu_matmul(struct cpu_pool *p, float *out, const float *a, const float *b,
	       const struct cpu_mm *mm, char *msg, size_t msglen)
{
	struct mm_job j = { p, mm, out, a, b };
	size_t nr = mm->batch.n, mnk; /* matrices in the result */

	if (!nr || !mm->M || !mm->N)
		return 0;
	if (!mm->K) { /* sums of nothing */
		memset(out, 0, nr * mm->M * mm->N * sizeof(float));
		return 0;
	}
	if (mm->M > INT_MAX || mm->N > INT_MAX || mm->K > INT_MAX)
		return cpu_fail(msg, msglen, -E2BIG,
				"(%zu, %zu) x (%zu, %zu) is over BLAS's int",
				mm->M, mm->K, mm->K, mm->N);

	/* b the same for every matrix and a's batch contiguous (a merged
	 * batch dim of stride 1): the batch folds into M. */
	mnk = mm->M * mm->N * mm->K;
	if (!mm->ta &&
	    (!mm->batch.nd ||
	     (mm->batch.nd == 1 && !mm->batch.sb[0] && mm->batch.sa[0] == 1)) &&
	    nr * mm->M <= INT_MAX) {
		if (nr * mm->M == 1 || nr * mnk <= BLAS_SMALL) {
			sgemm(p, mm, nr * mm->M, out, a, b);
			return 0;
		}
		return gemm_split(p, mm, nr * mm->M, out, a, b);
	}

	/* one single-threaded sgemm per matrix, on the pool */
	return cpu_parallel_for(p, nr, mnk >= BLAS_SMALL ? 1 : BLAS_SMALL / mnk,
				mm_range, &j);
}
