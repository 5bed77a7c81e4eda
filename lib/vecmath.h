/* SPDX-License-Identifier: MIT */
/*
 * Float math whose loops vectorize, for the CPU backend's kernels and
 * the model runtime's sampler: djinn_expf(), and the compiler settings
 * that let gcc vectorize loops of it (and loops whose trip count is not
 * a multiple of the vector width) in every file that includes this.
 */
#ifndef DJINN_VECMATH_H
#define DJINN_VECMATH_H

/*
 * The Makefile builds with -O2, where gcc 12's "very cheap" vectorizer
 * cost model leaves alone every loop whose trip count is not a known
 * multiple of the vector width, that is every loop of a kernel. The
 * dynamic model (gcc's default at -O3) lets it vectorize them; clang
 * vectorizes at -O2 already. Without trapping math gcc may also turn the
 * float compares of djinn_expf() into selects, as clang does: nothing that
 * includes this reads the floating-point exception flags.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <math.h>
#include <stdint.h>

/*
 * exp(x) within 1.5 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a
 * degree-6 polynomial for exp(r), 2^n made from bits), NaN for NaN,
 * infinity above 88.72, but 0 below -87.34, where the result would be
 * subnormal. No branches and no calls, so that a loop over it vectorizes:
 * libm's expf() and tanhf() keep softmax, attention, GELU and SILU at one
 * element at a time.
 */
static inline float djinn_expf(float x)
{
	union {
		float f;
		uint32_t u;
	} t, s1, s2;
	int under = x<-87.33654f, over = x> 88.72283f;
	float xc = under ? -87.33654f : x, n, r, p, y;
	uint32_t nb, n1b;

	xc = over ? 88.72283f : xc;
	/* n = round(x / ln2), by the 1.5 * 2^23 trick: no float-to-int */
	t.f = xc * 1.44269504f + 12582912.0f;
	n = t.f - 12582912.0f;
	nb = t.u - 0x4b400000u + 128; /* n + 128, in 2 .. 256 */
	/* r = x - n ln2, ln2 in two parts (Cody and Waite) */
	r = xc - n * 0.693359375f + n * 2.12194440e-4f;
	p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	y = p * r * r + r + 1.0f;
	/* 2^n as 2^n1 * 2^(n - n1): both stay normal for n in -126 .. 128 */
	n1b = nb >> 1;
	s1.u = (n1b + 63) << 23;
	s2.u = (nb - n1b + 63) << 23;
	y = y * s1.f * s2.f;
	y = under ? 0.0f : y;
	return over ? (float)INFINITY : y;
}

#endif /* DJINN_VECMATH_H */
