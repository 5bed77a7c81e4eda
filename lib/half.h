/* SPDX-License-Identifier: MIT */
/*
 * f16 and bf16 to f32 and back, rounding to nearest with ties to even as
 * IEEE 754 and PyTorch do, NaN staying NaN. Inline, so that the CPU
 * backend's conversion loops vectorize; the model runtime uses them for
 * the few values it converts on the host.
 */
#ifndef DJINN_HALF_H
#define DJINN_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <djinn/proto.h>

static inline uint32_t djinn_f32_bits(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	return x;
}

static inline float djinn_bits_f32(uint32_t x)
{
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

/* Round @x right by @shift bits (1 to 31), to nearest, ties to even. */
static inline uint32_t djinn_round_shift(uint32_t x, unsigned int shift)
{
	uint32_t q = x >> shift, rem = x & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);

	return q + (rem > half || (rem == half && (q & 1)));
}

/*
 * f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Normal values
 * from 2^-14, subnormals in steps of 2^-24, largest 65504.
 */
static inline uint16_t djinn_f32_to_f16(float f)
{
	uint32_t x = djinn_f32_bits(f);
	uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	uint32_t ax = x & 0x7fffffff;

	if (ax > 0x7f800000) /* NaN: keep it quiet and its top payload */
		return sign | 0x7e00 | (uint16_t)(ax >> 13 & 0x3ff);
	if (ax >= 0x477ff000) /* 65520 and up round to infinity */
		return sign | 0x7c00;
	if (ax >= 0x38800000) /* 2^-14: normal; rebias 127 -> 15 */
		return sign | (uint16_t)djinn_round_shift(ax - 0x38000000, 13);
	if (ax <= 0x33000000) /* up to 2^-25, a tie, rounds to zero */
		return sign;
	/* subnormal: the value in units of 2^-24 is m * 2^(e - 126) */
	return sign | (uint16_t)djinn_round_shift((ax & 0x7fffff) | 0x800000,
						  126 - (ax >> 23));
}

static inline float djinn_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = h >> 10 & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return djinn_bits_f32(sign | 0x7f800000 | m << 13);
	if (e)
		return djinn_bits_f32(sign | (e + 112) << 23 | m << 13);
	/* zero or subnormal: m * 2^-24, exact in f32 */
	return djinn_bits_f32(sign | djinn_f32_bits((float)m * 0x1p-24f));
}

/* bf16: the top half of an f32. */
static inline uint16_t djinn_f32_to_bf16(float f)
{
	uint32_t x = djinn_f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40);
	return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

static inline float djinn_bf16_to_f32(uint16_t h)
{
	return djinn_bits_f32((uint32_t)h << 16);
}

/* @n values of @dtype (F32, F16 or BF16) at @src to f32, and back. */
static inline void djinn_half_to_f32(unsigned int dtype, const void *src,
				     float *dst, size_t n)
{
	const uint16_t *h = src;

	if (dtype == DJINN_DTYPE_F32)
		memcpy(dst, src, n * sizeof(float));
	else if (dtype == DJINN_DTYPE_BF16)
		for (size_t i = 0; i < n; i++)
			dst[i] = djinn_bf16_to_f32(h[i]);
	else
		for (size_t i = 0; i < n; i++)
			dst[i] = djinn_f16_to_f32(h[i]);
}

static inline void djinn_half_from_f32(unsigned int dtype, const float *src,
				       void *dst, size_t n)
{
	uint16_t *h = dst;

	if (dtype == DJINN_DTYPE_F32)
		memcpy(dst, src, n * sizeof(float));
	else if (dtype == DJINN_DTYPE_BF16)
		for (size_t i = 0; i < n; i++)
			h[i] = djinn_f32_to_bf16(src[i]);
	else
		for (size_t i = 0; i < n; i++)
			h[i] = djinn_f32_to_f16(src[i]);
}

#endif /* DJINN_HALF_H */
