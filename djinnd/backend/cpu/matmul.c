// SPDX-License-Identifier: MIT
/*
 * MATMUL through OpenBLAS's cblas_sgemm (cblas_sgemv for one row).
 *
 * The hot path of a transformer is activations (B, T, C) times a weight
 * (C, N): b has no batch, a's batch is contiguous, so the whole node is
 * one sgemm of (B*T, C) x (C, N) and OpenBLAS spreads it over its own
 * threads. Otherwise there is one sgemm per matrix of the result: big
 * ones in turn, each on OpenBLAS's threads, and small ones (under the
 * size where OpenBLAS itself would go single-threaded) on the pool, one
 * single-threaded sgemm per matrix.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "cpu.h"

/*
 * OpenBLAS runs an sgemm of at most this M*N*K on the calling thread alone
 * (interface/gemm.c: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD, by
 * default), so sgemms this small can run on the pool side by side.
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

/*
 * out (M, N) = op(a) (M, K) x op(b) (K, N), all row-major. One row is a
 * matrix-vector product (decoding a token), where OpenBLAS's sgemv is up
 * to twice as fast as its sgemm; a (1, K) is K contiguous floats whether
 * transposed or not.
 */
static void sgemm(const struct cpu_mm *mm, size_t M, float *out, const float *a,
		  const float *b)
{
	if (M == 1) {
		/* out (N) = b^T a for b (K, N), b a for b (N, K) */
		cblas_sgemv(CblasRowMajor, mm->tb ? CblasNoTrans : CblasTrans,
			    (int)(mm->tb ? mm->N : mm->K),
			    (int)(mm->tb ? mm->K : mm->N), 1.0f, b,
			    (int)(mm->tb ? mm->K : mm->N), a, 1, 0.0f, out, 1);
		return;
	}
	cblas_sgemm(CblasRowMajor, mm->ta ? CblasTrans : CblasNoTrans,
		    mm->tb ? CblasTrans : CblasNoTrans, (int)M, (int)mm->N,
		    (int)mm->K, 1.0f, a, (int)(mm->ta ? mm->M : mm->K), b,
		    (int)(mm->tb ? mm->K : mm->N), 0.0f, out, (int)mm->N);
}

struct mm_job {
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
		sgemm(mm, mm->M, j->out + i * MN, j->a + oa * MK,
		      j->b + ob * KN);
	}
	return 0;
}

int cpu_matmul(struct cpu_pool *p, float *out, const float *a, const float *b,
	       const struct cpu_mm *mm, char *msg, size_t msglen)
{
	struct mm_job j = { mm, out, a, b };
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
	if (!mm->ta &&
	    (!mm->batch.nd ||
	     (mm->batch.nd == 1 && !mm->batch.sb[0] && mm->batch.sa[0] == 1)) &&
	    nr * mm->M <= INT_MAX) {
		sgemm(mm, nr * mm->M, out, a, b);
		return 0;
	}

	mnk = mm->M * mm->N * mm->K;
	if (mnk <= BLAS_SMALL)
		return cpu_parallel_for(p, nr, BLAS_SMALL / mnk, mm_range, &j);
	return mm_range(&j, 0, nr);
}
