/* SPDX-License-Identifier: MIT */
/*
 * A table of slots named by generation-checked handles: what djinnd hands
 * out as an opaque 64-bit name for something it keeps (a VMU region, a
 * session's tensor, model or context).
 *
 * A handle is (generation << 32 | slot index), XORed with the table's key
 * (0, or random so that handles cannot be guessed). A slot's generation
 * moves on when its handle goes, so a stale handle, one of another table
 * (another key) and a forged one all find nothing: slots_lookup() is NULL
 * and the caller answers its own error (-ENOENT). Generations start at 1
 * and skip 0 when they wrap, so no handle of a key-0 table is 0.
 *
 * The caller's slot type begins with a struct slot, and the table is an
 * array of them (slots_init()'s @size: the caller's sizeof). Slots are
 * taken from a free list, most recently freed first, and the array doubles
 * when the list is empty; that moves it, so a slot pointer is good until
 * the next slots_alloc() only: keep slots_index() across one.
 *
 * A slot's handle and the slot itself may go at different times:
 * slots_retire() ends the handle and keeps the slot (still in use by
 * someone who looked it up), slots_put() then gives the slot back;
 * slots_free() is both at once.
 *
 * No locking: the caller's.
 */
#ifndef DJINN_SLOTS_H
#define DJINN_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The head of every slot; the table's alone. */
struct slot {
	uint32_t gen; /* of the handle that names it, or of its next one */
	uint32_t next_free; /* on the free list: the next, SLOTS_NONE: last */
	bool live; /* a handle names it */
};

#define SLOTS_NONE UINT32_MAX

struct slots {
	void *base; /* nr slots of size bytes */
	size_t size;
	uint32_t nr, free; /* free: the free list's head, or SLOTS_NONE */
	uint32_t first, max; /* slots at the first growth; at the most */
	uint64_t key;
};

/* An empty table of @size-byte slots (a struct slot first): @first at
 * the first slots_alloc(), at most @max (0: no limit but the index's),
 * handles XORed with @key. Allocates nothing. */
void slots_init(struct slots *t, size_t size, uint32_t first, uint32_t max,
		uint64_t key);
/* Free the array; the slots' contents are the caller's to free before. */
void slots_fini(struct slots *t);

/* A free slot, now live (slots_handle() names it); its bytes past the
 * struct slot are as its last user left them, zero when new. NULL, and
 * in @err -ENOMEM, or -ENOSPC when all @max slots are taken. */
void *slots_alloc(struct slots *t, int *err);

/* The live slot @handle names, or NULL: stale, foreign or forged. */
void *slots_lookup(const struct slots *t, uint64_t handle);

/* The handle of live slot @slot. */
uint64_t slots_handle(const struct slots *t, const void *slot);

/* End @slot's handle: from now on it finds nothing. The slot stays out
 * of the free list until slots_put(). */
void slots_retire(struct slots *t, void *slot);
/* Give a retired slot back to the free list. */
void slots_put(struct slots *t, void *slot);
/* slots_retire() and slots_put(). */
void slots_free(struct slots *t, void *slot);

/* A slot's index, and back: what a caller keeps across slots_alloc(). */
uint32_t slots_index(const struct slots *t, const void *slot);
void *slots_at(const struct slots *t, uint32_t index);

/* A table as another process left it (a restart, svc/state.h): @n
 * slots with generations @gen, those with @live[i] set live (their
 * contents zero, the caller's to fill), the rest on the free list. The
 * table must be empty. 0, -ENOMEM, or -EINVAL (@n past its @max, or a
 * generation of 0). */
int slots_restore(struct slots *t, uint32_t n, const uint32_t *gen,
		  const bool *live);

/* The first live slot after @prev (NULL: from the start), or NULL. */
void *slots_next(const struct slots *t, const void *prev);

/* Each live slot, in index order; @p may be retired or freed in the
 * body, and nothing allocated. */
#define slots_for_each(t, p) \
	for ((p) = slots_next((t), NULL); (p); (p) = slots_next((t), (p)))

#endif /* DJINN_SLOTS_H */
