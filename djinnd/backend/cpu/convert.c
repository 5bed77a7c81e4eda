// SPDX-License-Identifier: MIT
/*
 * f16 and bf16 to f32 and back. Kernels compute in f32: a node with f16
 * or bf16 tensors has its inputs widened into scratch and its result
 * rounded back, to nearest with ties to even, as IEEE 754 and PyTorch do.
 */
#include <string.h>

#include "cpu.h"

static uint32_t f32_bits(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	return x;
}

static float bits_f32(uint32_t x)
{
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

/* Round @x right by @shift bits (1 to 31), to nearest, ties to even. */
static uint32_t round_shift(uint32_t x, unsigned int shift)
{
	uint32_t q = x >> shift, rem = x & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);

	return q + (rem > half || (rem == half && (q & 1)));
}

/*
 * f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Normal values
 * from 2^-14, subnormals in steps of 2^-24, largest 65504.
 */
static uint16_t f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	uint32_t ax = x & 0x7fffffff;

	if (ax > 0x7f800000) /* NaN: keep it quiet and its top payload */
		return sign | 0x7e00 | (uint16_t)(ax >> 13 & 0x3ff);
	if (ax >= 0x477ff000) /* 65520 and up round to infinity */
		return sign | 0x7c00;
	if (ax >= 0x38800000) /* 2^-14: normal; rebias 127 -> 15 */
		return sign | (uint16_t)round_shift(ax - 0x38000000, 13);
	if (ax <= 0x33000000) /* up to 2^-25, a tie, rounds to zero */
		return sign;
	/* subnormal: the value in units of 2^-24 is m * 2^(e - 126) */
	return sign | (uint16_t)round_shift((ax & 0x7fffff) | 0x800000,
					    126 - (ax >> 23));
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = h >> 10 & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return bits_f32(sign | 0x7f800000 | m << 13);
	if (e)
		return bits_f32(sign | (e + 112) << 23 | m << 13);
	/* zero or subnormal: m * 2^-24, exact in f32 */
	return bits_f32(sign | f32_bits((float)m * 0x1p-24f));
}

/* bf16: the top half of an f32. */
static uint16_t f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40);
	return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

static float bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

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
			dst[i] = bf16_to_f32(src[i]);
	} else {
		for (size_t i = lo; i < hi; i++)
			dst[i] = f16_to_f32(src[i]);
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
			dst[i] = f32_to_bf16(src[i]);
	} else {
		for (size_t i = lo; i < hi; i++)
			dst[i] = f32_to_f16(src[i]);
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
