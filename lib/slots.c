// SPDX-License-Identifier: MIT
/*
 * Generation-checked handle tables (slots.h): djinnd's VMU regions and a
 * session's tensors, models and contexts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "slots.h"

static struct slot *at(const struct slots *t, uint32_t i)
{
	return (struct slot *)((char *)t->base + (size_t)i * t->size);
}

void slots_init(struct slots *t, size_t size, uint32_t first, uint32_t max,
		uint64_t key)
{
	*t = (struct slots){
		.size = size,
		.free = SLOTS_NONE,
		.first = first ? first : 1,
		/* an index is below SLOTS_NONE */
		.max = max && max < SLOTS_NONE ? max : SLOTS_NONE,
		.key = key,
	};
}

void slots_fini(struct slots *t)
{
	free(t->base);
	t->base = NULL;
	t->nr = 0;
	t->free = SLOTS_NONE;
}

/* Double the array (to t->first the first time, t->max at most); the new
 * slots go on the free list in index order. */
static int grow(struct slots *t)
{
	uint64_t n = t->nr ? (uint64_t)t->nr * 2 : t->first;
	void *base;

	if (n > t->max)
		n = t->max;
	if (n <= t->nr)
		return -ENOSPC;
	base = realloc(t->base, n * t->size);
	if (!base)
		return -ENOMEM;
	t->base = base;
	memset(at(t, t->nr), 0, (n - t->nr) * t->size);
	for (uint32_t i = t->nr; i < n; i++) {
		at(t, i)->gen = 1;
		at(t, i)->next_free = i + 1 < n ? i + 1 : SLOTS_NONE;
	}
	t->free = t->nr;
	t->nr = (uint32_t)n;
	return 0;
}

void *slots_alloc(struct slots *t, int *err)
{
	struct slot *s;
	int ret;

	if (t->free == SLOTS_NONE) {
		ret = grow(t);
		if (ret) {
			*err = ret;
			return NULL;
		}
	}
	s = at(t, t->free);
	t->free = s->next_free;
	s->next_free = SLOTS_NONE;
	s->live = true;
	return s;
}

int slots_restore(struct slots *t, uint32_t n, const uint32_t *gen,
		  const bool *live)
{
	uint32_t prev = SLOTS_NONE;

	if (t->nr || n > t->max)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!gen[i])
			return -EINVAL;
	if (!n)
		return 0;
	t->base = calloc(n, t->size);
	if (!t->base)
		return -ENOMEM;
	t->nr = n;
	t->free = SLOTS_NONE;
	/* the free list in index order, as grow() leaves it */
	for (uint32_t i = n; i-- > 0;) {
		struct slot *s = at(t, i);

		s->gen = gen[i];
		s->live = live[i];
		s->next_free = SLOTS_NONE;
		if (s->live)
			continue;
		s->next_free = prev;
		prev = i;
	}
	t->free = prev;
	return 0;
}

void *slots_lookup(const struct slots *t, uint64_t handle)
{
	uint64_t h = handle ^ t->key;
	uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);
	struct slot *s;

	if (i >= t->nr)
		return NULL;
	s = at(t, i);
	return s->live && s->gen == gen ? s : NULL;
}

uint64_t slots_handle(const struct slots *t, const void *slot)
{
	const struct slot *s = slot;

	return ((uint64_t)s->gen << 32 | slots_index(t, slot)) ^ t->key;
}

void slots_retire(struct slots *t, void *slot)
{
	struct slot *s = slot;

	s->live = false;
	s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
}

void slots_put(struct slots *t, void *slot)
{
	struct slot *s = slot;

	s->next_free = t->free;
	t->free = slots_index(t, slot);
}

void slots_free(struct slots *t, void *slot)
{
	slots_retire(t, slot);
	slots_put(t, slot);
}

uint32_t slots_index(const struct slots *t, const void *slot)
{
	return (uint32_t)(((const char *)slot - (const char *)t->base) /
			  t->size);
}

void *slots_at(const struct slots *t, uint32_t index)
{
	return at(t, index);
}

void *slots_next(const struct slots *t, const void *prev)
{
	for (uint32_t i = prev ? slots_index(t, prev) + 1 : 0; i < t->nr; i++)
		if (at(t, i)->live)
			return at(t, i);
	return NULL;
}
