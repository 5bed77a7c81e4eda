// SPDX-License-Identifier: MIT
/*
 * The VMU after a device fault (vmu.h, "Device faults"), over the host
 * provider: text entries made before the fault leave the index and go
 * with their last holder, an upload across a fault is refused, and
 * vmu_fault_simulate() zeroes what a fault zeroes and keeps what it
 * keeps (swapped-out regions).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "vmu/vmu.h"

#define GRAN (64 * KiB)
#define LEN (100 * KiB)

struct fix {
	struct vmu_provider *prov;
	struct vmu *v;
	struct vmu_session *s;
	uint64_t faults; /* the "device's" fault count */
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct vmu_config cfg = { .faults = &f->faults };

	if (!f || vmu_host_provider_create(16 * MiB, GRAN, &f->prov) ||
	    vmu_create(f->prov, &cfg, &f->v) ||
	    vmu_session_create(f->v, "t", &f->s))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	vmu_session_destroy(f->s);
	vmu_destroy(f->v);
	f->prov->ops->free(f->prov);
	free(f);
	return 0;
}

static struct vmu_stats stats(struct fix *f)
{
	struct vmu_stats st;

	vmu_get_stats(f->v, &st);
	return st;
}

static bool all_zero(uint64_t addr, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (dev_ptr(addr)[i])
			return false;
	return true;
}

/* A region of LEN bytes of pattern @seed. */
static uint64_t region(struct fix *f, uint64_t seed)
{
	uint8_t *buf = xmalloc(LEN);
	uint64_t h;

	pattern(buf, seed, 0, LEN);
	assert_int_equal(vmu_region_create(f->s, LEN, &h), 0);
	assert_int_equal(vmu_region_resize(f->s, h, LEN, NULL), 0);
	assert_int_equal(vmu_region_write(f->s, h, 0, buf, LEN), 0);
	free(buf);
	return h;
}

static void test_simulate(void **state)
{
	struct fix *f = *state;
	uint8_t *buf = xmalloc(LEN), *got = xmalloc(LEN);
	struct vmu_text *t, *t2, *t3;
	uint64_t r1, r2, used;
	bool created;

	pattern(buf, 7, 0, LEN);
	assert_int_equal(vmu_text_insert(f->s, buf, LEN, &t, &created), 0);
	assert_true(created);
	assert_int_equal(vmu_text_insert(f->s, buf, LEN, &t2, &created), 0);
	assert_false(created); /* deduplicated */
	assert_ptr_equal(t, t2);
	assert_int_equal(vmu_text_put(f->s, t2), 0);
	r1 = region(f, 1);
	r2 = region(f, 2);
	assert_int_equal(vmu_region_swap_out(f->s, r2), 0);
	assert_int_equal(vmu_faults(f->v), 0);

	assert_int_equal(vmu_fault_simulate(f->v), 0);
	assert_int_equal(f->faults, 1);
	assert_int_equal(vmu_faults(f->v), 1);
	assert_int_equal(stats(f).text_lost, 1);

	/* resident memory is zeros, text too; a swapped region kept its
	 * bytes */
	assert_int_equal(vmu_region_read(f->s, r1, 0, got, LEN), 0);
	assert_true(all_zero((uint64_t)(uintptr_t)got, LEN));
	assert_true(all_zero(vmu_text_addr(t), LEN));
	assert_int_equal(vmu_region_swap_in(f->s, r2, NULL), 0);
	assert_int_equal(vmu_region_read(f->s, r2, 0, got, LEN), 0);
	pattern(buf, 2, 0, LEN);
	assert_memory_equal(got, buf, LEN);

	/* the same bytes again: a new entry, holding them */
	pattern(buf, 7, 0, LEN);
	assert_int_equal(vmu_text_insert(f->s, buf, LEN, &t3, &created), 0);
	assert_true(created);
	assert_ptr_not_equal(t3, t);
	assert_memory_equal(dev_ptr(vmu_text_addr(t3)), buf, LEN);
	assert_int_equal(vmu_text_lookup(f->s, vmu_text_fp(t), &t2), 0);
	assert_ptr_equal(t2, t3); /* found by content: the fresh one */
	assert_int_equal(vmu_text_put(f->s, t2), 0);
	assert_int_equal(stats(f).seg[VMU_SEG_TEXT].entries, 2);

	/* the stale one goes with its last reference */
	used = stats(f).seg[VMU_SEG_TEXT].used;
	assert_int_equal(vmu_text_put(f->s, t), 0);
	assert_int_equal(stats(f).seg[VMU_SEG_TEXT].entries, 1);
	assert_true(stats(f).seg[VMU_SEG_TEXT].used < used);
	assert_int_equal(vmu_text_put(f->s, t3), 0);
	free(buf);
	free(got);
}

/* A real fault moves the count on: unheld stale text is freed at the
 * next lookup, and an upload that began before it does not commit. */
static void test_epoch(void **state)
{
	struct fix *f = *state;
	uint8_t *buf = xmalloc(LEN);
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text_upload *u;
	struct vmu_text *t;
	bool created;

	pattern(buf, 3, 0, LEN);
	vmu_fingerprint(buf, LEN, fp);
	assert_int_equal(vmu_text_insert(f->s, buf, LEN, &t, &created), 0);
	assert_int_equal(vmu_text_put(f->s, t), 0); /* cached, unheld */
	assert_int_equal(stats(f).seg[VMU_SEG_TEXT].entries, 1);
	assert_int_equal(vmu_text_begin(f->s, LEN, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, LEN / 2), 0);

	__atomic_add_fetch(&f->faults, 1, __ATOMIC_ACQ_REL);

	assert_int_equal(vmu_text_write(u, buf + LEN / 2, LEN - LEN / 2), 0);
	assert_int_equal(vmu_text_commit(u, NULL, &t, &created), -EIO);
	assert_int_equal(vmu_text_lookup(f->s, fp, &t), -ENOENT);
	assert_int_equal(stats(f).seg[VMU_SEG_TEXT].entries, 0);
	assert_int_equal(stats(f).seg[VMU_SEG_TEXT].used, 0);
	assert_int_equal(stats(f).committed, 0);
	/* an upload begun after it commits */
	assert_int_equal(vmu_text_insert(f->s, buf, LEN, &t, &created), 0);
	assert_true(created);
	assert_int_equal(vmu_text_put(f->s, t), 0);
	free(buf);
}

/* A VMU told of no fault count has nothing to simulate. */
static void test_no_counter(void **state)
{
	struct vmu_provider *prov;
	struct vmu *v;

	(void)state;
	assert_int_equal(vmu_host_provider_create(4 * MiB, GRAN, &prov), 0);
	assert_int_equal(vmu_create(prov, NULL, &v), 0);
	assert_int_equal(vmu_fault_simulate(v), -EOPNOTSUPP);
	assert_int_equal(vmu_faults(v), 0);
	vmu_destroy(v);
	prov->ops->free(prov);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_simulate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_epoch, setup, teardown),
		cmocka_unit_test(test_no_counter),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
