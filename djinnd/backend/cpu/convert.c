// SPDX-License-Identifier: MIT
/*
 * f16 and bf16 to f32 and back, over the pool. Kernels compute in f32: a
 * node with f16 or bf16 tensors has its inputs widened into scratch and
 * its result rounded back (lib/half.h: to nearest, ties to even).
 */
#include <string.h>

#include "cpu.h"
#include "half.h"

/* ---------------------------------------------------------------------- */
/* Bulk, over the pool */

struct conv_job {
	unsigned int dtype;
	const void *src;
	void *dst;
};

CPU_SIMD static int widen(void *arg, size_t lo, size_t hi)
{
	const struct conv_job *j = arg;
	const uint16_t *src = j->src;
	float *dst = j->dst;

	if (j->dtype == DJINN_DTYPE_BF16) {
		for (size_t i = lo; i < hi; i++)
			dst[i] = djinn_bf16_to_f32(src[i]);
	} else {
		for (size_t i = lo; i < hi; i++)
			dst[i] = djinn_f16_to_f32(src[i]);
	}
	return 0;
}

CPU_SIMD static int narrow(void *arg, size_t lo, size_t hi)
{
	const struct conv_job *j = arg;
	const float *src = j->src;
	uint16_t *dst = j->dst;

	if (j->dtype == DJINN_DTYPE_BF16) {
		for (size_t i = lo; i < hi; i++)
			dst[i] = djinn_f32_to_bf16(src[i]);
	} else {
		for (size_t i = lo; i < hi; i++)
			dst[i] = djinn_f32_to_f16(src[i]);
	}
	return 0;
}

int cpu_to_f32(struct cpu_pool *p, unsigned int dtype, const void *src,
	       float *dst, size_t n)
{
	struct conv_job j = { dtype, src, dst };

	if (dtype == DJINN_DTYPE_F32)
		return cpu_copy(p, dst, src, n * sizeof(float));
	return cpu_parallel_for(p, n, CPU_GRAIN, widen, &j);
}

int cpu_from_f32(struct cpu_pool *p, unsigned int dtype, const float *src,
		 void *dst, size_t n)
{
	struct conv_job j = { dtype, src, dst };

	if (dtype == DJINN_DTYPE_F32)
		return cpu_copy(p, dst, src, n * sizeof(float));
	return cpu_parallel_for(p, n, CPU_GRAIN, narrow, &j);
}

struct conv_rows_job {
	unsigned int dtype;
	const uint8_t *src;
	float *dst;
	size_t stride, cols; /* src's row stride in elements */
};

static int widen_rows(void *arg, size_t lo, size_t hi)
{
	const struct conv_rows_job *j = arg;
	size_t es = djinn_dtype_size(j->dtype);

	for (size_t r = lo; r < hi; r++) {
		struct conv_job row = { j->dtype, j->src + r * j->stride * es,
					j->dst + r * j->cols };

		if (j->dtype == DJINN_DTYPE_F32)
			memcpy(row.dst, row.src, j->cols * sizeof(float));
		else
			widen(&row, 0, j->cols);
	}
	return 0;
}

int cpu_rows_to_f32(struct cpu_pool *p, unsigned int dtype, const void *src,
		    size_t stride, float *dst, size_t rows, size_t cols)
{
	struct conv_rows_job j = { dtype, src, dst, stride, cols };

	return cpu_parallel_for(p, rows,
				cols >= CPU_GRAIN ? 1 : CPU_GRAIN / (cols + 1),
				widen_rows, &j);
}
