// SPDX-License-Identifier: MIT
/*
 * Unit tests for the generation-checked handle table (lib/slots.c): the
 * handles' values, stale, foreign and forged handles, retiring a handle
 * before its slot, growth, the limit, generation wrap and iteration.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <setjmp.h>
#include <cmocka.h>

#include "slots.h"

struct item {
	struct slot slot;
	int value;
};

#define H(gen, i) ((uint64_t)(gen) << 32 | (i))

static struct item *alloc_item(struct slots *t, int value, uint64_t *handle)
{
	struct item *it;
	int err = 0;

	it = slots_alloc(t, &err);
	assert_non_null(it);
	assert_int_equal(err, 0);
	assert_true(it->slot.live);
	it->value = value;
	*handle = slots_handle(t, it);
	return it;
}

/* Generation 1 first, indexes in order; each handle finds its slot. */
static void test_handles(void **state)
{
	struct slots t;
	uint64_t h[3];

	slots_init(&t, sizeof(struct item), 4, 0, 0);
	assert_int_equal(t.nr, 0); /* nothing until the first alloc */
	for (int i = 0; i < 3; i++) {
		struct item *it = alloc_item(&t, 10 + i, &h[i]);

		assert_int_equal(h[i], H(1, i));
		assert_int_equal(slots_index(&t, it), i);
	}
	assert_int_equal(t.nr, 4);
	for (int i = 0; i < 3; i++) {
		struct item *it = slots_lookup(&t, h[i]);

		assert_non_null(it);
		assert_int_equal(it->value, 10 + i);
		assert_ptr_equal(slots_at(&t, i), it);
	}
	slots_fini(&t);
}

/* A freed slot's handle finds nothing; the slot comes back (most recent
 * first) under the next generation. */
static void test_stale(void **state)
{
	struct slots t;
	uint64_t a, b, c;

	slots_init(&t, sizeof(struct item), 4, 0, 0);
	alloc_item(&t, 1, &a);
	alloc_item(&t, 2, &b);
	slots_free(&t, slots_lookup(&t, a));
	slots_free(&t, slots_lookup(&t, b));
	assert_null(slots_lookup(&t, a));
	assert_null(slots_lookup(&t, b));
	alloc_item(&t, 3, &c);
	assert_int_equal(c, H(2, 1));
	alloc_item(&t, 4, &c);
	assert_int_equal(c, H(2, 0));
	assert_null(slots_lookup(&t, a));
	assert_int_equal(((struct item *)slots_lookup(&t, c))->value, 4);
	slots_fini(&t);
}

/* Another table's handles (another key) and forged ones find nothing. */
static void test_foreign(void **state)
{
	const uint64_t key = 0x0123456789abcdefull;
	struct slots t, u;
	uint64_t h, g;

	slots_init(&t, sizeof(struct item), 4, 0, key);
	slots_init(&u, sizeof(struct item), 4, 0, key ^ 1ull << 40);
	alloc_item(&t, 1, &h);
	alloc_item(&u, 2, &g);
	assert_int_equal(h, H(1, 0) ^ key);
	assert_non_null(slots_lookup(&t, h));
	assert_null(slots_lookup(&t, g));
	assert_null(slots_lookup(&u, h));
	assert_null(slots_lookup(&t, H(1, 0))); /* unkeyed */
	assert_null(slots_lookup(&t, H(1, 1) ^ key)); /* never allocated */
	assert_null(slots_lookup(&t, H(1, 4) ^ key)); /* past the array */
	assert_null(slots_lookup(&t, H(1, UINT32_MAX) ^ key));
	assert_null(slots_lookup(&t, H(0, 0) ^ key)); /* no generation 0 */
	assert_null(slots_lookup(&t, H(2, 0) ^ key)); /* a later one */
	slots_fini(&t);
	slots_fini(&u);
}

/* A retired slot's handle is gone at once; the slot stays out of the
 * free list until it is put back. */
static void test_retire(void **state)
{
	struct slots t;
	struct item *it;
	uint64_t a, b;

	slots_init(&t, sizeof(struct item), 1, 0, 0);
	it = alloc_item(&t, 7, &a);
	slots_retire(&t, it);
	assert_false(it->slot.live);
	assert_null(slots_lookup(&t, a));
	assert_int_equal(it->value, 7); /* the caller's bytes are kept */
	alloc_item(&t, 8, &b); /* not the retired slot: the table grows */
	assert_int_equal(b, H(1, 1));
	assert_int_equal(t.nr, 2);
	slots_put(&t, slots_at(&t, 0));
	alloc_item(&t, 9, &b);
	assert_int_equal(b, H(2, 0));
	assert_int_equal(t.nr, 2);
	slots_fini(&t);
}

/* The array doubles from @first, moving; indexes and contents hold, new
 * slots are zero. */
static void test_grow(void **state)
{
	struct slots t;
	uint64_t h[9];

	slots_init(&t, sizeof(struct item), 2, 0, 0);
	for (int i = 0; i < 9; i++) {
		alloc_item(&t, 100 + i, &h[i]);
		assert_int_equal(h[i], H(1, i));
	}
	assert_int_equal(t.nr, 16);
	for (int i = 0; i < 9; i++)
		assert_int_equal(((struct item *)slots_lookup(&t, h[i]))->value,
				 100 + i);
	for (uint32_t i = 9; i < t.nr; i++) {
		struct item *it = slots_at(&t, i);

		assert_false(it->slot.live);
		assert_int_equal(it->slot.gen, 1);
		assert_int_equal(it->value, 0);
	}
	slots_fini(&t);
	assert_null(t.base);
	assert_int_equal(t.nr, 0);
}

/* @max slots at the most: -ENOSPC, until one is freed. The last growth
 * stops at @max, not at a power of two. */
static void test_max(void **state)
{
	struct slots t;
	uint64_t h;
	int err = 0;

	slots_init(&t, sizeof(struct item), 4, 6, 0);
	for (int i = 0; i < 6; i++)
		alloc_item(&t, i, &h);
	assert_int_equal(t.nr, 6);
	assert_null(slots_alloc(&t, &err));
	assert_int_equal(err, -ENOSPC);
	slots_free(&t, slots_lookup(&t, H(1, 2)));
	alloc_item(&t, 42, &h);
	assert_int_equal(h, H(2, 2));
	slots_fini(&t);
}

/* Past UINT32_MAX the generation goes to 1, never 0: a key-0 table's
 * handles are never 0. */
static void test_wrap(void **state)
{
	struct slots t;
	struct item *it;
	uint64_t h;

	slots_init(&t, sizeof(struct item), 1, 0, 0);
	it = alloc_item(&t, 1, &h);
	it->slot.gen = UINT32_MAX;
	h = slots_handle(&t, it);
	assert_int_equal(h, H(UINT32_MAX, 0));
	assert_ptr_equal(slots_lookup(&t, h), it);
	slots_free(&t, it);
	it = alloc_item(&t, 2, &h);
	assert_int_equal(h, H(1, 0));
	slots_fini(&t);
}

/* slots_for_each() visits the live slots in index order, and the body
 * may free the one it is on. */
static void test_each(void **state)
{
	struct slots t;
	struct item *it;
	uint64_t h[6];
	int seen = 0, sum = 0;

	slots_init(&t, sizeof(struct item), 2, 0, 0);
	for (int i = 0; i < 6; i++)
		alloc_item(&t, 1 << i, &h[i]);
	slots_free(&t, slots_lookup(&t, h[1]));
	slots_retire(&t, slots_lookup(&t, h[4])); /* retired: not live */
	slots_for_each(&t, it) {
		assert_true(it->slot.live);
		assert_true((int)slots_index(&t, it) > seen - 1);
		seen = (int)slots_index(&t, it) + 1;
		sum += it->value;
		slots_free(&t, it);
	}
	assert_int_equal(sum, 1 | 4 | 8 | 32);
	slots_for_each(&t, it)
		fail_msg("slot %u still live", slots_index(&t, it));
	slots_fini(&t);

	slots_init(&t, sizeof(struct item), 2, 0, 0); /* empty: no array */
	slots_for_each(&t, it)
		fail();
	slots_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handles), cmocka_unit_test(test_stale),
		cmocka_unit_test(test_foreign), cmocka_unit_test(test_retire),
		cmocka_unit_test(test_grow),	cmocka_unit_test(test_max),
		cmocka_unit_test(test_wrap),	cmocka_unit_test(test_each),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
