// SPDX-License-Identifier: MIT
/*
 * RoPE's inverse frequencies, as transformers 5 computes them
 * (modeling_rope_utils.py): in float32, the way torch does, so that the
 * angles match to the last bit or two. See struct model_rope.
 *
 * D is head_dim; there are D / 2 frequencies, each used for the pair
 * (i, i + D / 2) of a head (rotate_half). The angle of position p is
 * p * inv_freq[i], multiplied in float32; cos and sin of it are scaled by
 * attn_factor and rounded to the weights' dtype (ctx.c).
 */
#include <math.h>

#include "model/model_config.h"

/* inv[i] = 1 / base^(2i / D), i < D / 2: torch's
 * 1.0 / (base ** (arange(0, D, 2).float() / D)) */
static void plain(float base, unsigned int D, float *inv)
{
	for (unsigned int i = 0; i < D / 2; i++)
		inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)D);
}

static void llama3(const struct model_rope *r, unsigned int D, float *inv)
{
	float old = (float)r->orig_ctx;
	float low_wl = old / r->low_freq_factor;
	float high_wl = old / r->high_freq_factor;

	plain(r->theta, D, inv);
	for (unsigned int i = 0; i < D / 2; i++) {
		float wl = 2.0f * (float)M_PI / inv[i];
		float f = wl > low_wl ? inv[i] / r->factor : inv[i];

		if (!(wl < high_wl) && !(wl > low_wl)) {
			/* between the two: interpolate smoothly */
			float s = (old / wl - r->low_freq_factor) /
				  (r->high_freq_factor - r->low_freq_factor);

			f = (1.0f - s) * f / r->factor + s * f;
		}
		inv[i] = f;
	}
}

/* yarn: interpolated where wavelengths exceed the original context,
 * extrapolated where they are short, a linear ramp between */
static void yarn(const struct model_rope *r, unsigned int D, float *inv)
{
	double base = r->theta, ctx = r->orig_ctx;
	double lo = D * log(ctx / (r->beta_fast * 2 * M_PI)) / (2 * log(base));
	double hi = D * log(ctx / (r->beta_slow * 2 * M_PI)) / (2 * log(base));
	float flo, fhi;

	if (r->truncate) {
		lo = floor(lo);
		hi = ceil(hi);
	}
	lo = lo < 0 ? 0 : lo;
	hi = hi > D - 1 ? D - 1 : hi;
	if (lo == hi)
		hi += 0.001; /* transformers: no singularity */
	flo = (float)lo;
	fhi = (float)hi;
	for (unsigned int i = 0; i < D / 2; i++) {
		float pf = powf(r->theta, (float)(2 * i) / (float)D);
		float extra = 1.0f / pf, inter = 1.0f / (r->factor * pf);
		float ramp = ((float)i - flo) / (fhi - flo);
		float e;

		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		e = 1.0f - ramp; /* extrapolation's share */
		inv[i] = inter * (1.0f - e) + extra * e;
	}
}

void model_rope_freqs(const struct model_config *c, uint32_t seq_len,
		      float *inv)
{
	const struct model_rope *r = &c->rope;
	unsigned int D = c->head_dim;

	switch (r->type) {
	case ROPE_LINEAR:
		plain(r->theta, D, inv);
		for (unsigned int i = 0; i < D / 2; i++)
			inv[i] /= r->factor;
		return;
	case ROPE_DYNAMIC: {
		/* the NTK base grows with the sequence past the original */
		double n = seq_len > c->n_pos ? seq_len : c->n_pos;
		double base = r->theta *
			      pow(r->factor * n / c->n_pos - (r->factor - 1),
				  (double)D / (D - 2));

		plain((float)base, D, inv);
		return;
	}
	case ROPE_LLAMA3:
		llama3(r, D, inv);
		return;
	case ROPE_YARN:
		yarn(r, D, inv);
		return;
	default:
		plain(r->theta, D, inv);
		return;
	}
}
