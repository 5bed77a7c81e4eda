// SPDX-License-Identifier: MIT
/*
 * Sampling a token from logits: greedy, or temperature then top-k then
 * top-p, drawn from a splitmix64 stream (sample.h): the CPU backend's
 * SAMPLE op, and the model runtime's sampler on the host.
 *
 * Without sorting the vocabulary. The candidates are in one total order,
 * larger logits first and equal ones by lower id. top_k keeps the first
 * k of that order, chosen by a bounded heap of k as the logits stream
 * past (O(V log k) at worst); top_p then keeps the fewest first ones
 * whose mass reaches top_p of the kept mass, popped from a heap of the
 * kept ones until it does (O(k + m log k) for m kept). Every path is
 * O(V log V) at worst, whatever the logits: a client that shapes them
 * (its own weights, steering) cannot make a step slow for the others in
 * its pass.
 *
 * The draw walks the kept tokens in id order: u, uniform in [0, mass),
 * picks the first token whose running mass passes it. That needs no
 * order among the kept tokens, so a device can make the same draw as a
 * masked prefix sum over the vocabulary. Temperature 1 over every token
 * (the OpenAI API's default) selects nothing at all: four passes over
 * the vocabulary (the largest, the weights, their sum, the walk).
 *
 * The work space, 16 bytes a token, is the calling thread's and kept
 * for its next call: executor threads sample every step, and a fresh
 * megabyte each time would fault its pages in each time.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "vecmath.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += DJINN_SAMPLE_GAMMA);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct cand {
	float logit;
	int32_t id;
};

/* @a comes before @b in the candidates' order. */
static inline bool before(const struct cand *a, const struct cand *b)
{
	return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/*
 * Sift h[i] down a heap of @n: with @first, the first in the order at
 * the top (popping gives the order); without, the last (a heap of the
 * best k seen, its weakest on top to be replaced).
 */
static void sift(struct cand *h, uint32_t n, uint32_t i, bool first)
{
	struct cand x = h[i];

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && (first ? before(&h[c + 1], &h[c]) :
					  before(&h[c], &h[c + 1])))
			c++;
		if (first ? !before(&h[c], &x) : !before(&x, &h[c]))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

static void heapify(struct cand *h, uint32_t n, bool first)
{
	for (uint32_t i = n / 2; i-- > 0;)
		sift(h, n, i, first);
}

/* The top @k of @logits[V] into @h[k], in no order (k < V). */
static void top_k(const float *logits, uint32_t V, uint32_t k, struct cand *h)
{
	for (uint32_t i = 0; i < k; i++)
		h[i] = (struct cand){ logits[i], (int32_t)i };
	heapify(h, k, false);
	for (uint32_t i = k; i < V; i++) {
		/* a later id ties no better: only a larger logit enters */
		if (!(logits[i] > h[0].logit))
			continue;
		h[0] = (struct cand){ logits[i], (int32_t)i };
		sift(h, k, 0, false);
	}
}

/* A token's weight: its argument in double, where neither the
 * difference of two floats nor the product with 1/T (a denormal T's is
 * past float's range) can overflow, rounded to float only for e^x in
 * float (vecmath.h: a loop of it vectorizes; 0 below -87.34, and for a
 * huge negative argument rounded to -inf). */
static inline float weight(float logit, double top, double inv_t)
{
	return djinn_expf((float)(((double)logit - top) * inv_t));
}

double djinn_sample_weight(float logit, float top, double inv_t)
{
	return weight(logit, top, inv_t);
}

/* ---------------------------------------------------------------------- */
/* The thread's work space */

static pthread_key_t space_key;
static bool space_keyed;
static pthread_once_t space_once = PTHREAD_ONCE_INIT;
static __thread struct {
	void *p;
	size_t bytes;
} space;

static void space_key_make(void)
{
	/* without the key the space is simply not freed at thread exit */
	space_keyed = !pthread_key_create(&space_key, free);
}

static void *space_get(size_t bytes)
{
	if (space.bytes >= bytes)
		return space.p;
	pthread_once(&space_once, space_key_make);
	free(space.p);
	space.p = malloc(bytes);
	space.bytes = space.p ? bytes : 0;
	if (space_keyed)
		(void)pthread_setspecific(space_key, space.p);
	return space.p;
}

/* ---------------------------------------------------------------------- */

/*
 * The first NaN's index, or V; the first largest logit's in *@best.
 * SCAN_LANES running maxima, one per lane, which the compiler keeps in
 * vector registers (a single running maximum is a chain it cannot), and
 * the first index holding the largest found a block of lanes at a time:
 * a greedy token costs 15 us on GPT-2's vocabulary, not 50.
 */
#define SCAN_LANES 16

/* The first index of @top in @logits[V], which holds it. */
static uint32_t first_of(const float *logits, uint32_t V, float top)
{
	uint32_t blocks = V / SCAN_LANES, b, k;

	for (b = 0; b < blocks; b++) {
		const float *x = logits + (size_t)b * SCAN_LANES;
		int hit = 0;

		for (int j = 0; j < SCAN_LANES; j++)
			hit |= x[j] == top;
		if (hit)
			break;
	}
	for (k = b * SCAN_LANES; logits[k] != top;)
		k++;
	return k;
}

static uint32_t scan(const float *logits, uint32_t V, uint32_t *best)
{
	uint32_t blocks = V / SCAN_LANES, i = blocks * SCAN_LANES;
	float m[SCAN_LANES], top;
	int nan[SCAN_LANES], any = 0;

	for (int j = 0; j < SCAN_LANES; j++) {
		m[j] = logits[0];
		nan[j] = 0;
	}
	/* a count the compiler can compute, for it to vectorize */
	for (uint32_t b = 0; b < blocks; b++) {
		const float *x = logits + (size_t)b * SCAN_LANES;

		for (int j = 0; j < SCAN_LANES; j++) {
			nan[j] |= x[j] != x[j];
			m[j] = x[j] > m[j] ? x[j] : m[j];
		}
	}
	top = m[0];
	for (int j = 0; j < SCAN_LANES; j++) {
		any |= nan[j];
		top = m[j] > top ? m[j] : top;
	}
	for (; i < V; i++) {
		any |= logits[i] != logits[i];
		top = logits[i] > top ? logits[i] : top;
	}
	if (any)
		for (uint32_t k = 0; k < V; k++)
			if (isnan(logits[k]))
				return k;
	*best = first_of(logits, V, top);
	return V;
}

/* @w[V]: every token's weight (a loop gcc vectorizes: vecmath.h). */
static void weigh_all(double *restrict w, const float *restrict logits,
		      uint32_t V, double top, double inv_t)
{
	for (uint32_t i = 0; i < V; i++)
		w[i] = weight(logits[i], top, inv_t);
}

int djinn_sample(const float *logits, uint32_t V,
		 const struct djinn_sample_params *sp, int64_t *out)
{
	double sum = 0, cum = 0, r;
	uint32_t best = 0, k, n, bad;
	uint64_t rng = sp->rng;
	double inv_t, top;
	struct cand *c;
	double *w;

	if (!V || V > INT32_MAX)
		return -EINVAL;
	if (!isfinite(sp->temperature) || sp->temperature < 0 ||
	    !(sp->top_p > 0 && sp->top_p <= 1) || sp->__reserved) {
		*out = DJINN_SAMPLE_BAD_PARAMS;
		return 0;
	}
	bad = scan(logits, V, &best);
	if (bad < V) {
		*out = -1 - (int64_t)bad;
		return 0;
	}
	if (sp->temperature == 0) {
		*out = best;
		return 0;
	}
	if (isinf(logits[best])) {
		/* a logit of +inf outweighs the others without measure, and
		 * all -inf have no mass: the first largest, as greedy (the
		 * caller's stream advances as for any sampled row) */
		*out = best;
		return 0;
	}

	w = space_get((size_t)V * (sizeof(*w) + sizeof(*c)));
	if (!w)
		return -ENOMEM;
	c = (struct cand *)(w + V);
	/* w[i]: token i's weight exp((logit - max) / T) if it is kept, else
	 * 0 (a kept token's weight may underflow to 0 too: it is never
	 * drawn, as it would not be with the sort) */
	inv_t = 1.0 / sp->temperature;
	top = logits[best];
	k = sp->top_k && sp->top_k < V ? sp->top_k : V;
	if (k < V) {
		top_k(logits, V, k, c);
		memset(w, 0, (size_t)V * sizeof(*w));
		for (uint32_t j = 0; j < k; j++)
			w[c[j].id] = weight(c[j].logit, top, inv_t);
	} else {
		weigh_all(w, logits, V, top, inv_t);
		if (sp->top_p >= 1)
			goto draw;
		for (uint32_t i = 0; i < V; i++)
			c[i] = (struct cand){ logits[i], (int32_t)i };
	}
	if (sp->top_p >= 1)
		goto draw;
	/* the candidates c[k] are weighed: pop the fewest first whose mass
	 * reaches top_p of theirs, and weigh the rest 0 */
	n = k;
	for (uint32_t j = 0; j < n; j++)
		sum += w[c[j].id];
	heapify(c, n, true);
	while (n) {
		cum += w[c[0].id];
		if (cum >= sp->top_p * sum)
			break;
		c[0] = c[--n];
		sift(c, n, 0, true);
	}
	for (uint32_t j = 1; j < n; j++) /* c[0] is the last kept */
		w[c[j].id] = 0;
draw:
	cum = 0;
	for (uint32_t i = 0; i < V; i++)
		cum += w[i];
	r = (double)(splitmix64(&rng) >> 11) * 0x1p-53 * cum;
	*out = best; /* the first largest is kept, and drawn if rounding
		      * leaves r past the running sum */
	for (uint32_t i = 0; i < V; i++) {
		if (r < w[i]) {
			*out = i;
			break;
		}
		r -= w[i];
	}
	return 0;
}
