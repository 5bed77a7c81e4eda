// SPDX-License-Identifier: MIT
/*
 * MATMUL through OpenBLAS's cblas_sgemm and cblas_sgemv, single-threaded,
 * on the pool's threads.
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
 * idle threads poll for 50 us, then sleep (pool.c).
 *
 * One row (decoding a token) is a matrix-vector product, which reads
 * every weight once and is bound by memory bandwidth: sgemv over a
 * contiguous range of the weight's rows a thread, so that each streams
 * its own memory (for b (K, N) the threads' partial sums are added up
 * after).
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
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
		return errmsg(msg, msglen, -EINVAL,
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
		return errmsg(msg, msglen, -EINVAL,
			      "inner dims %zu and %llu differ", mm->K,
			      (unsigned long long)kb);
	if (out->ndim != no + 2 || out->dims[no] != mm->M ||
	    out->dims[no + 1] != mm->N)
		return errmsg(msg, msglen, -EINVAL,
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
 * struct gemv_job - one matrix-vector product on the pool
 * @parts: with b (K, N), the row ranges of b, one a thread: each streams
 *         its rows contiguously into a sum of its own (part 0 into y,
 *         the others into @part), added up after
 */
struct gemv_job {
	const float *x, *w;
	float *y, *part;
	size_t K, N, parts;
	bool tb;
};

/* Rows of w [lo, hi) (w (N, K)), or parts [lo, hi) of its rows (w (K, N)) */
static int gemv_range(void *arg, size_t lo, size_t hi)
{
	const struct gemv_job *j = arg;

	if (j->tb) {
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(hi - lo),
			    (int)j->K, 1.0f, j->w + lo * j->K, (int)j->K, j->x,
			    1, 0.0f, j->y + lo, 1);
		return 0;
	}
	for (size_t i = lo; i < hi; i++) {
		size_t k0 = i * j->K / j->parts, k1 = (i + 1) * j->K / j->parts;

		cblas_sgemv(CblasRowMajor, CblasTrans, (int)(k1 - k0),
			    (int)j->N, 1.0f, j->w + k0 * j->N, (int)j->N,
			    j->x + k0, 1, 0.0f,
			    i ? j->part + (i - 1) * j->N : j->y, 1);
	}
	return 0;
}

/* Weights below which a product runs on the calling thread alone */
#define GEMV_SMALL 65536

/* out (N) = a (K) x b: b (K, N), or (N, K) with @tb; on the pool. */
static int gemv(struct cpu_pool *p, const struct cpu_mm *mm, float *out,
		const float *a, const float *b)
{
	struct gemv_job j = { a, b, out, NULL, mm->K, mm->N, 1, mm->tb };
	size_t threads = cpu_pool_threads(p);
	int ret;

	if (mm->tb) /* a multiply-add of a weight read from memory: about
		     * one element of an elementwise op's work */
		return cpu_parallel_for(
			p, mm->N, mm->K >= CPU_GRAIN ? 1 : CPU_GRAIN / mm->K,
			gemv_range, &j);
	if (mm->K * mm->N >= GEMV_SMALL && threads > 1)
		j.parts = threads < mm->K ? threads : mm->K;
	if (j.parts > 1) {
		j.part = malloc((j.parts - 1) * mm->N * sizeof(float));
		if (!j.part)
			j.parts = 1;
	}
	ret = cpu_parallel_for(p, j.parts, 1, gemv_range, &j);
	for (size_t i = 1; i < j.parts; i++)
		for (size_t n = 0; n < mm->N; n++)
			out[n] += j.part[(i - 1) * mm->N + n];
	free(j.part);
	return ret;
}

/* ---------------------------------------------------------------------- */

/*
 * out (M, N) = op(a) (M, K) x op(b) (K, N), all row-major. One row is a
 * matrix-vector product (decoding a token), where OpenBLAS's sgemv is up
 * to twice as fast as its sgemm: gemv() above, on the calling thread
 * when called from the pool; a (1, K) is K contiguous floats whether
 * transposed or not.
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
		return errmsg(msg, msglen, -E2BIG,
			      "(%zu, %zu) x (%zu, %zu) is over BLAS's int",
			      mm->M, mm->K, mm->K, mm->N);

	/* b the same for every matrix and a's batch contiguous (a merged
	 * batch dim of stride 1): the batch folds into M. */
	mnk = mm->M * mm->N * mm->K;
	if (!mm->ta &&
	    (!mm->batch.nd ||
	     (mm->batch.nd == 1 && !mm->batch.sb[0] && mm->batch.sa[0] == 1)) &&
	    nr * mm->M <= INT_MAX) {
		/* a few rows against a weight: read it once */
		if (nr * mm->M >= 2 && nr * mm->M <= CPU_SKINNY_MAX &&
		    cpu_skinny_ok())
			return cpu_skinny(p, out, a, b, nr * mm->M, mm->K,
					  mm->N, mm->tb);
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
