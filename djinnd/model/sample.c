// SPDX-License-Identifier: MIT
/*
 * Sampling a token from logits: greedy, or temperature then top-k then
 * top-p, drawn from a seeded splitmix64 stream. See runtime.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/runtime.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct cand {
	float logit;
	int32_t id;
};

/* Larger logits first; equal ones by id, so the order is total. */
static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : 1;
}

int model_sample(const float *logits, uint32_t V,
		 const struct model_sampling *sp, uint64_t *rng, int32_t *out,
		 char *msg, size_t msglen)
{
	uint32_t best = 0, k, m;
	struct cand *c;
	double sum = 0, cum = 0, u;
	double *p;

	if (!V)
		return -EINVAL;
	if (!isfinite(sp->temperature) || sp->temperature < 0) {
		snprintf(msg, msglen, "temperature %g: not 0 or positive",
			 (double)sp->temperature);
		return -EINVAL;
	}
	if (!(sp->top_p > 0 && sp->top_p <= 1)) {
		snprintf(msg, msglen, "top_p %g: not in (0, 1]",
			 (double)sp->top_p);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < V; i++) {
		if (isnan(logits[i])) {
			snprintf(msg, msglen, "logit %u is NaN", i);
			return -EINVAL;
		}
		if (logits[i] > logits[best])
			best = i;
	}
	if (sp->temperature == 0) {
		*out = (int32_t)best;
		return 0;
	}

	c = malloc(V * sizeof(*c));
	p = malloc(V * sizeof(*p));
	if (!c || !p) {
		free(c);
		free(p);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < V; i++)
		c[i] = (struct cand){ logits[i], (int32_t)i };
	qsort(c, V, sizeof(*c), cmp_cand);
	k = sp->top_k && sp->top_k < V ? sp->top_k : V;
	/* softmax(logit / T) over the k best; c[0] is the largest */
	for (uint32_t i = 0; i < k; i++) {
		p[i] = exp(((double)c[i].logit - c[0].logit) / sp->temperature);
		sum += p[i];
	}
	/* the fewest whose mass reaches top_p */
	for (m = 0; m < k;) {
		cum += p[m++];
		if (cum >= sp->top_p * sum)
			break;
	}
	u = (double)(splitmix64(rng) >> 11) * 0x1p-53 * cum;
	*out = c[m - 1].id;
	for (uint32_t i = 0; i < m; i++) {
		if (u < p[i]) {
			*out = c[i].id;
			break;
		}
		u -= p[i];
	}
	free(c);
	free(p);
	return 0;
}
