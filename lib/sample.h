/* SPDX-License-Identifier: MIT */
/*
 * One row's token from its logits, as DJINN_GOP_SAMPLE defines it
 * (proto.h, struct djinn_sample_params): greedy, or temperature then
 * top-k then top-p, one draw from a splitmix64 stream. The CPU backend's
 * SAMPLE op and the model runtime's host sampler are this; the CUDA
 * backend's kernel makes the same choices (Documentation/model.rst,
 * "Sampling").
 */
#ifndef DJINN_SAMPLE_H
#define DJINN_SAMPLE_H

#include <stdint.h>

#include <djinn/proto.h>

/*
 * Sample @logits[V] (0 < V < 2^31) with @p into *@out: the token id, or
 * -1 - i for the first NaN at i, or DJINN_SAMPLE_BAD_PARAMS. @p->rng is
 * not advanced (the caller adds DJINN_SAMPLE_GAMMA when temperature > 0).
 * 0, -EINVAL for V out of range, or -ENOMEM (the calling thread's work
 * space, 16 bytes a token, kept for its next call).
 */
int djinn_sample(const float *logits, uint32_t V,
		 const struct djinn_sample_params *p, int64_t *out);

/* A token's weight as djinn_sample() computes it: exp((@logit - @top) *
 * @inv_t), e^x in float (for a reference to draw with the same). */
double djinn_sample_weight(float logit, float top, double inv_t);

#endif /* DJINN_SAMPLE_H */
