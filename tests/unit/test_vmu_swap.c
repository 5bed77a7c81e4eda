// SPDX-License-Identifier: MIT
/*
 * Unit tests for the VMU's swap (djinnd/vmu/swap.c) over the host provider:
 * regions out to host memory and back with their bytes, pinned regions,
 * whole sessions, the swap limit. The fixture is in test_vmu.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_vmu.h"

/* ---------------------------------------------------------------------- */
/* 4. Swap */

static void test_swap_roundtrip(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g, size = 5 * g + 123;
	struct vmu_region_info info0, info;
	struct vmu_stats st0, st;
	struct vmu_usage u;
	uint64_t h;

	h = region_new(s, 8 * g, size);
	region_fill(s, h, 7, 0, size);
	info0 = region_info(s, h);
	assert_int_equal(info0.mapped, 6 * g);
	st0 = get_stats(f->v);

	assert_int_equal(vmu_region_swap_out(s, h), 0);
	info = region_info(s, h);
	assert_int_equal(info.state, VMU_REGION_SWAPPED);
	assert_int_equal(info.addr, info0.addr);
	assert_int_equal(info.size, size);
	assert_int_equal(info.mapped, 0);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed - info0.mapped);
	assert_int_equal(st.seg[VMU_SEG_DATA].used,
			 st0.seg[VMU_SEG_DATA].used - info0.mapped);
	assert_in_range(st.swapped_now - st0.swapped_now, size, info0.mapped);
	assert_int_equal(st.swap_outs, st0.swap_outs + 1);
	assert_in_range(st.swapped_out_bytes - st0.swapped_out_bytes, size,
			info0.mapped);
	u = get_usage(s);
	assert_int_equal(u.data_bytes, info0.mapped);
	assert_int_equal(u.resident, 0);
	assert_int_equal(u.swapped, info0.mapped);
	assert_int_equal(u.regions, 1);
	check_invariants(f->v);

	/* twice is fine and changes nothing */
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	st0 = st;
	st = get_stats(f->v);
	assert_int_equal(st.swap_outs, st0.swap_outs);
	assert_int_equal(st.swapped_now, st0.swapped_now);
	assert_int_equal(st.committed, st0.committed);

	assert_int_equal(vmu_region_swap_in(s, h, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.addr, info0.addr);
	assert_int_equal(info.size, size);
	assert_int_equal(info.mapped, info0.mapped);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed + info0.mapped);
	assert_int_equal(st.swapped_now, 0);
	assert_int_equal(st.swap_ins, 1);
	assert_in_range(st.swapped_in_bytes, size, info0.mapped);
	u = get_usage(s);
	assert_int_equal(u.resident, info0.mapped);
	assert_int_equal(u.swapped, 0);
	region_expect(s, h, 7, 0, size);
	expect_pattern(dev_ptr(info.addr), 7, 0, size, "restored device bytes");
	check_invariants(f->v);
}

/* Reading or writing a swapped region either works on the right bytes or
 * fails; after swap_in the bytes are exactly what was last written. */
static void test_swap_read_write_while_swapped(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g, size = 3 * g;
	uint8_t *buf = xmalloc(size);
	uint8_t *news = pattern_buf(9, 1000);
	uint64_t h = region_new(s, 4 * g, size);
	int rc;

	region_fill(s, h, 8, 0, size);
	assert_int_equal(vmu_region_swap_out(s, h), 0);

	memset(buf, 0, size);
	rc = vmu_region_read(s, h, 0, buf, size);
	assert_true(rc <= 0);
	if (rc == 0)
		expect_pattern(buf, 8, 0, size, "read while swapped");

	assert_int_equal(vmu_region_swap_out(s, h), 0);
	rc = vmu_region_write(s, h, 10, news, 1000);
	assert_true(rc <= 0);

	assert_int_equal(vmu_region_swap_in(s, h, NULL), 0);
	if (rc == 0) {
		region_expect(s, h, 8, 0, 10);
		memset(buf, 0, 1000);
		assert_int_equal(vmu_region_read(s, h, 10, buf, 1000), 0);
		assert_memory_equal(buf, news, 1000);
		region_expect(s, h, 8, 1010, size - 1010);
	} else {
		region_expect(s, h, 8, 0, size);
	}
	free(buf);
	free(news);
}

static void test_swap_pinned(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g, size = 2 * g + 5;
	struct vmu_region_info info, info0;
	uint64_t h = region_new(s, 4 * g, size);

	region_fill(s, h, 10, 0, size);
	memset(&info, 0, sizeof(info));
	assert_int_equal(vmu_region_pin(s, h, NULL, &info), 0);
	assert_int_equal(info.pins, 1);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.size, size);
	info0 = info;

	assert_int_equal(vmu_region_swap_out(s, h), -EBUSY);
	assert_int_equal(vmu_region_destroy(s, h), -EBUSY);
	assert_int_equal(vmu_session_swap_out(s), 0);
	info = region_info(s, h);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.mapped, 3 * g);

	assert_int_equal(vmu_region_pin(s, h, NULL, NULL), 0);
	assert_int_equal(region_info(s, h).pins, 2);
	assert_int_equal(vmu_region_unpin(s, h), 0);
	assert_int_equal(vmu_region_swap_out(s, h), -EBUSY);
	assert_int_equal(vmu_region_unpin(s, h), 0);
	assert_int_equal(region_info(s, h).pins, 0);
	/* errno not documented */
	assert_true(vmu_region_unpin(s, h) < 0);

	/* pin brings a swapped region back */
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	assert_int_equal(region_info(s, h).state, VMU_REGION_SWAPPED);
	memset(&info, 0, sizeof(info));
	assert_int_equal(vmu_region_pin(s, h, NULL, &info), 0);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.pins, 1);
	assert_int_equal(info.addr, info0.addr);
	assert_int_equal(info.mapped, 3 * g);
	assert_int_equal(get_stats(f->v).swap_ins, 1);
	region_expect(s, h, 10, 0, size);
	assert_int_equal(vmu_region_unpin(s, h), 0);
	assert_int_equal(vmu_region_destroy(s, h), 0);
}

/* Resizing a swapped region brings it back first. */
static void test_resize_swapped(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g;
	uint64_t h = region_new(s, 8 * g, 3 * g);
	struct vmu_region_info info;
	uint64_t addr = region_info(s, h).addr;

	region_fill(s, h, 11, 0, 3 * g);
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	assert_int_equal(vmu_region_resize(s, h, 5 * g, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.addr, addr);
	assert_int_equal(info.mapped, 5 * g);
	region_expect(s, h, 11, 0, 3 * g);
	region_expect_zero(s, h, 3 * g, 2 * g);

	/* shrinking a swapped region: back first, then whole chunks past
	 * the new size go, so how much is released depends on the chunks
	 * the restore mapped */
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	assert_int_equal(vmu_region_resize(s, h, g, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.addr, addr);
	assert_int_equal(info.size, g);
	assert_in_range(info.mapped, g, 5 * g);
	assert_int_equal(get_usage(s).data_bytes, info.mapped);
	region_expect(s, h, 11, 0, g);
	assert_int_equal(get_stats(f->v).swapped_now, 0);
	check_invariants(f->v);
}

/* Many regions out at once come back each with its own bytes. */
static void test_swap_many(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	uint64_t h[6], addr[6], size[6], total = 0;

	for (int i = 0; i < 6; i++) {
		struct vmu_session *s = f->s[i % 2];

		size[i] = (uint64_t)(i + 1) * g - 17 * (uint64_t)i;
		h[i] = region_new(s, 8 * g, size[i]);
		region_fill(s, h[i], 20 + i, 0, size[i]);
		addr[i] = region_info(s, h[i]).addr;
		total += vmu_round(f->v, size[i]);
	}
	assert_int_equal(get_stats(f->v).committed, total);
	for (int i = 0; i < 6; i++)
		assert_int_equal(vmu_region_swap_out(f->s[i % 2], h[i]), 0);
	assert_int_equal(get_stats(f->v).committed, 0);
	assert_true(get_stats(f->v).swapped_now >= total - 17 * 15);
	for (int i = 5; i >= 0; i--) {
		struct vmu_session *s = f->s[i % 2];

		assert_int_equal(vmu_region_swap_in(s, h[i], NULL), 0);
		assert_int_equal(region_info(s, h[i]).addr, addr[i]);
	}
	for (int i = 0; i < 6; i++)
		region_expect(f->s[i % 2], h[i], 20 + i, 0, size[i]);
	assert_int_equal(get_stats(f->v).swapped_now, 0);
	assert_int_equal(get_stats(f->v).committed, total);
	check_invariants(f->v);
}

static void test_session_swap_out(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g;
	uint64_t h[4], other;
	struct vmu_usage u;

	for (int i = 0; i < 4; i++) {
		h[i] = region_new(s, 4 * g, (uint64_t)(i + 1) * g);
		region_fill(s, h[i], 30 + i, 0, (uint64_t)(i + 1) * g);
	}
	other = region_new(f->s[1], 4 * g, g);
	assert_int_equal(vmu_region_pin(s, h[3], NULL, NULL), 0);

	assert_int_equal(vmu_session_swap_out(s), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(region_info(s, h[i]).state,
				 VMU_REGION_SWAPPED);
	assert_int_equal(region_info(s, h[3]).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(f->s[1], other).state,
			 VMU_REGION_RESIDENT);
	u = get_usage(s);
	assert_int_equal(u.swapped, 6 * g);
	assert_int_equal(u.resident, 4 * g);
	assert_int_equal(u.data_bytes, 10 * g);

	for (int i = 0; i < 3; i++)
		assert_int_equal(vmu_region_swap_in(s, h[i], NULL), 0);
	for (int i = 0; i < 4; i++)
		region_expect(s, h[i], 30 + i, 0, (uint64_t)(i + 1) * g);
	assert_int_equal(vmu_region_unpin(s, h[3]), 0);
}

/* @swap_limit caps host bytes held by swapped regions. */
static void test_swap_limit(void **state)
{
	struct fix *f = *state;
	struct vmu_config cfg = { .swap_limit = 3 * GRAN };
	struct vmu_session *s;
	uint64_t h1, h2;

	fix_open(f, 64 * MiB, GRAN, &cfg);
	s = f->s[0];
	h1 = region_new(s, 2 * f->g, 2 * f->g);
	h2 = region_new(s, 2 * f->g, 2 * f->g);
	region_fill(s, h1, 40, 0, 2 * f->g);
	region_fill(s, h2, 41, 0, 2 * f->g);

	assert_int_equal(vmu_region_swap_out(s, h1), 0);
	/* errno not documented */
	assert_true(vmu_region_swap_out(s, h2) < 0);
	assert_int_equal(region_info(s, h2).state, VMU_REGION_RESIDENT);
	region_expect(s, h2, 41, 0, 2 * f->g);
	assert_int_equal(get_stats(f->v).swapped_now, 2 * f->g);

	/* a restored region's buffer no longer counts against the limit */
	assert_int_equal(vmu_region_swap_in(s, h1, NULL), 0);
	assert_int_equal(vmu_region_swap_out(s, h2), 0);
	assert_int_equal(vmu_region_swap_in(s, h2, NULL), 0);
	region_expect(s, h1, 40, 0, 2 * f->g);
	region_expect(s, h2, 41, 0, 2 * f->g);
}

/* swap_in without room fails and leaves the region swapped and intact. */
static void test_swap_in_without_room(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	uint64_t h = region_new(s, 10 * g, 10 * g), big;

	region_fill(s, h, 42, 0, 10 * g);
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	big = region_new(f->s[1], 64 * g, 60 * g);
	assert_int_equal(vmu_region_pin(f->s[1], big, NULL, NULL), 0);

	/* errno not documented (-ENOMEM expected) */
	assert_true(vmu_region_swap_in(s, h, NULL) < 0);
	assert_int_equal(region_info(s, h).state, VMU_REGION_SWAPPED);
	assert_true(vmu_region_pin(s, h, NULL, NULL) < 0);
	assert_int_equal(region_info(s, h).pins, 0);

	assert_int_equal(vmu_region_unpin(f->s[1], big), 0);
	assert_int_equal(vmu_region_resize(f->s[1], big, 0, NULL), 0);
	assert_int_equal(vmu_region_swap_in(s, h, NULL), 0);
	region_expect(s, h, 42, 0, 10 * g);
	check_invariants(f->v);
}

/*
 * A tenant's swap quota (vmu_tenant_set_swap_quota()): its regions swap
 * out up to it (-EDQUOT past it, the region resident and intact), and
 * reclaim passes over them for another tenant's region, which it swaps
 * instead, though alpha's are older in the LRU. Lifted, they swap again.
 * The fixture's tenants: s[0] and s[1] alpha's, s[2] beta's.
 */
static void test_swap_tenant_quota(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *a = f->s[0], *b = f->s[2];
	uint64_t a1, a2, b1, big;
	struct vmu_usage u;

	assert_int_equal(vmu_tenant_set_swap_quota(f->v, "alpha", 12 * g), 0);
	a1 = region_new(a, 10 * g, 10 * g);
	a2 = region_new(a, 10 * g, 10 * g);
	b1 = region_new(b, 10 * g, 10 * g);
	region_fill(a, a1, 50, 0, 10 * g);
	region_fill(a, a2, 51, 0, 10 * g);
	region_fill(b, b1, 52, 0, 10 * g);
	/* both of alpha's are idle and older than beta's */
	assert_int_equal(vmu_region_swap_out(a, a1), 0);
	assert_int_equal(vmu_region_swap_out(a, a2), -EDQUOT);
	assert_int_equal(region_info(a, a2).state, VMU_REGION_RESIDENT);
	region_expect(a, a2, 51, 0, 10 * g);
	assert_int_equal(vmu_tenant_usage(f->v, "alpha", &u), 0);
	assert_int_equal(u.swapped, 10 * g);
	assert_int_equal(u.swap_quota, 12 * g);

	/* 64 granules: a2 and b1 hold 20; 50 more need 6 freed: reclaim
	 * swaps beta's b1, not alpha's a2 */
	big = region_new(f->s[1], 50 * g, 0);
	assert_int_equal(vmu_region_resize(f->s[1], big, 50 * g, NULL), 0);
	assert_int_equal(region_info(a, a2).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(b, b1).state, VMU_REGION_SWAPPED);
	assert_int_equal(vmu_region_destroy(f->s[1], big), 0);

	/* lifted: alpha's swap again */
	assert_int_equal(vmu_tenant_set_swap_quota(f->v, "alpha", 0), 0);
	assert_int_equal(vmu_region_swap_out(a, a2), 0);
	assert_int_equal(vmu_region_swap_in(a, a1, NULL), 0);
	assert_int_equal(vmu_region_swap_in(a, a2, NULL), 0);
	assert_int_equal(vmu_region_swap_in(b, b1, NULL), 0);
	region_expect(a, a1, 50, 0, 10 * g);
	region_expect(a, a2, 51, 0, 10 * g);
	region_expect(b, b1, 52, 0, 10 * g);
	check_invariants(f->v);
}

/*
 * A tenant's guaranteed share (vmu_tenant_set_guarantee()): reclaim
 * passes over its idle regions while swapping one would take its
 * resident data below the share, and takes another tenant's borrowed
 * memory instead, though alpha's are older in the LRU; the scheduler's
 * session swap-out leaves them too. Above the share, the excess goes.
 * The fixture's tenants: s[0] and s[1] alpha's, s[2] beta's.
 */
static void test_swap_guarantee(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *a = f->s[0], *b = f->s[2], *c;
	uint64_t a1, a2, b1, big;

	assert_int_equal(vmu_session_create(f->v, "gamma", &c), 0);
	assert_int_equal(vmu_tenant_set_guarantee(f->v, "alpha", 15 * g), 0);
	a1 = region_new(a, 10 * g, 10 * g);
	a2 = region_new(a, 10 * g, 10 * g);
	b1 = region_new(b, 10 * g, 10 * g);
	region_fill(a, a1, 60, 0, 10 * g);
	region_fill(a, a2, 61, 0, 10 * g);
	region_fill(b, b1, 62, 0, 10 * g);

	/* 64 granules, 30 held: gamma's 40 more need 6 freed. alpha holds
	 * 20 of its 15 guaranteed: swapping a 10 would leave 10, so beta's
	 * goes (a tenant's own growth may swap its own: not tested here) */
	big = region_new(c, 40 * g, 0);
	assert_int_equal(vmu_region_resize(c, big, 40 * g, NULL), 0);
	assert_int_equal(region_info(a, a1).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(a, a2).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(b, b1).state, VMU_REGION_SWAPPED);
	/* another 10 would need alpha's: refused, alpha stays */
	assert_true(vmu_region_resize(c, big, 50 * g, NULL) < 0);
	assert_int_equal(region_info(a, a1).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(a, a2).state, VMU_REGION_RESIDENT);
	/* the scheduler's swap-out of a waiting session leaves them too */
	assert_int_equal(vmu_session_swap_out(a), 0);
	assert_int_equal(region_info(a, a1).state, VMU_REGION_RESIDENT);
	/* a smaller share: the excess may go */
	assert_int_equal(vmu_tenant_set_guarantee(f->v, "alpha", 10 * g), 0);
	assert_int_equal(vmu_session_swap_out(a), 1);
	assert_int_equal(vmu_tenant_set_guarantee(f->v, "alpha", 0), 0);

	assert_int_equal(vmu_region_destroy(c, big), 0);
	vmu_session_destroy(c);
	assert_int_equal(vmu_session_swap_in(a), 1);
	assert_int_equal(vmu_region_swap_in(b, b1, NULL), 0);
	region_expect(a, a1, 60, 0, 10 * g);
	region_expect(a, a2, 61, 0, 10 * g);
	region_expect(b, b1, 62, 0, 10 * g);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */

/* ---------------------------------------------------------------------- */
/* The crash journal's wait for frees */

static void count_wake(void *arg)
{
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

struct grower {
	struct vmu_session *s;
	uint64_t size, h;
	uint8_t *buf;
	int ret;
	bool done;
};

static void *grow_run(void *arg)
{
	struct grower *g = arg;

	g->ret = vmu_region_create(g->s, g->size, &g->h);
	if (!g->ret)
		g->ret = vmu_region_resize(g->s, g->h, g->size, NULL);
	__atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* Region @g->h read back (swapped in) into @g->buf. */
static void *read_run(void *arg)
{
	struct grower *g = arg;

	g->ret = vmu_region_read(g->s, g->h, 0, g->buf, g->size);
	__atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* As the journal's thread does: records written while @g runs (each
 * frees what waited for the one before), then @th joined. */
static void commit_until_done(struct fix *f, struct grower *g, pthread_t th)
{
	for (int i = 0;
	     i < 10000 && !__atomic_load_n(&g->done, __ATOMIC_ACQUIRE); i++) {
		vmu_journal_begin(f->v);
		vmu_journal_done(f->v);
		usleep(1000);
	}
	assert_int_equal(pthread_join(th, NULL), 0);
}

/* Region @h of @s (@size bytes of pattern @seed) read back on another
 * thread while records are written (the memory its swap-in takes is had
 * from records as they come): whole. */
static void read_back(struct fix *f, struct vmu_session *s, uint64_t h,
		      uint64_t size, uint64_t seed)
{
	struct grower w = { .s = s, .h = h, .size = size, .buf = xmalloc(size) };
	pthread_t th;

	assert_int_equal(pthread_create(&th, NULL, read_run, &w), 0);
	commit_until_done(f, &w, th);
	assert_int_equal(w.ret, 0);
	assert_int_equal(pattern_diff(w.buf, seed, 0, size), -1);
	free(w.buf);
}

/*
 * With the journal on, what a swap-out frees is neither available nor
 * reused until a record begun after the free is committed: the swapped
 * region's old memory keeps its bytes, the free wakes the journal, an
 * allocation on another thread that needs that memory waits for the
 * record rather than failing, and gets it once the record is in
 * (vmu_journal_done()). A record begun before the free frees nothing.
 */
static void test_journal_defers_frees(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, big = 40 * g;
	struct grower w = { .s = f->s[2], .size = big };
	struct vmu_stats st0, st;
	pthread_t th;
	int wakes = 0;
	uint64_t h;

	h = region_new(f->s[0], big, big);
	region_fill(f->s[0], h, 11, 0, big);
	st0 = get_stats(f->v);
	vmu_journal_on(f->v, count_wake, &wakes);
	vmu_journal_begin(f->v); /* a record under way names it */
	assert_int_equal(vmu_region_swap_out(f->s[0], h), 0);
	assert_true(__atomic_load_n(&wakes, __ATOMIC_RELAXED) > 0);
	assert_true(vmu_journal_waiting(f->v) >= big);
	st = get_stats(f->v);
	/* uncharged, but not available */
	assert_int_equal(st.committed, st0.committed - big);
	assert_int_equal(st.free, st0.free);
	/* the record begun before the free is done: nothing is freed */
	vmu_journal_done(f->v);
	assert_true(vmu_journal_waiting(f->v) >= big);

	/* another thread needs it: it waits for the next record */
	assert_int_equal(pthread_create(&th, NULL, grow_run, &w), 0);
	usleep(100 * 1000);
	assert_false(__atomic_load_n(&w.done, __ATOMIC_ACQUIRE));
	vmu_journal_begin(f->v);
	vmu_journal_done(f->v);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(w.ret, 0);
	assert_int_equal(vmu_journal_waiting(f->v), 0);
	region_fill(f->s[2], w.h, 12, 0, big);

	/* the swapped-out copy is whole */
	assert_int_equal(vmu_region_destroy(f->s[2], w.h), 0);
	read_back(f, f->s[0], h, big, 11);
	vmu_journal_off(f->v);
	assert_int_equal(vmu_journal_waiting(f->v), 0);
	check_invariants(f->v);
}

/*
 * A swap-in that needs memory its reclaim frees waits for the journal's
 * next record; meanwhile the record (vmu_region_pieces()) must not wait
 * for that swap-in: it names the region by its host copy at once. Were
 * it to wait, neither would move until the allocation's bound ran out
 * and the swap-in failed.
 */
static void test_journal_swap_in_not_waited(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, big = 40 * g;
	struct grower w = { .s = f->s[0], .size = big };
	struct vmu_piece *pcs = NULL;
	const void *host = NULL;
	unsigned int nr = 0;
	uint64_t a, b, max = 0;
	pthread_t th;
	int wakes = 0;

	a = region_new(f->s[0], big, big);
	region_fill(f->s[0], a, 21, 0, big);
	assert_int_equal(vmu_region_swap_out(f->s[0], a), 0);
	b = region_new(f->s[2], big, big);
	region_fill(f->s[2], b, 22, 0, big);
	vmu_journal_on(f->v, count_wake, &wakes);
	/* read back on another thread: its swap-in pushes b out */
	w.h = a;
	w.buf = xmalloc(big);
	assert_int_equal(pthread_create(&th, NULL, read_run, &w), 0);
	for (int i = 0; i < 10000 && vmu_journal_waiting(f->v) < big; i++)
		usleep(1000);
	assert_true(vmu_journal_waiting(f->v) >= big);
	assert_int_equal(vmu_region_pieces(f->s[0], a, big, &pcs, &nr, &host,
					   &max),
			 -ENODATA);
	assert_non_null(host);
	assert_int_equal(max, big);
	commit_until_done(f, &w, th);
	assert_int_equal(w.ret, 0);
	assert_int_equal(pattern_diff(w.buf, 21, 0, big), -1);
	free(w.buf);
	/* and b, pushed out for it, back in its turn */
	read_back(f, f->s[2], b, big, 22);
	vmu_journal_off(f->v);
	check_invariants(f->v);
}

/* A provider's copies out of device memory held at a gate (the test's
 * stand-in for a long swap-out's copy). */
static struct {
	const struct vmu_provider_ops *ops;
	struct vmu_provider_ops gated;
	bool entered, open;
} gate;

/* At the gate: wait (the test opens it, 10 s at most). */
static void gate_wait(void)
{
	__atomic_store_n(&gate.entered, true, __ATOMIC_RELEASE);
	for (int i = 0;
	     i < 10000 && !__atomic_load_n(&gate.open, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
}

static int gated_dtoh(struct vmu_provider *p, void *dst, uint64_t src,
		      uint64_t len)
{
	gate_wait();
	return gate.ops->copy_dtoh(p, dst, src, len);
}

static int gated_memset(struct vmu_provider *p, uint64_t dst, int c,
			uint64_t len)
{
	gate_wait();
	return gate.ops->memset(p, dst, c, len);
}

/* The provider of @f with its copies out (or, @grow, its memsets) held
 * at the gate, closed. */
static void gate_close(struct fix *f, bool grow)
{
	gate.ops = f->prov->ops;
	gate.gated = *f->prov->ops;
	if (grow)
		gate.gated.memset = gated_memset;
	else
		gate.gated.copy_dtoh = gated_dtoh;
	gate.entered = gate.open = false;
	f->prov->ops = &gate.gated;
}

/* Wait for the gate to be reached (10 s at most). */
static void gate_reached(void)
{
	for (int i = 0;
	     i < 10000 && !__atomic_load_n(&gate.entered, __ATOMIC_ACQUIRE);
	     i++)
		usleep(1000);
	assert_true(__atomic_load_n(&gate.entered, __ATOMIC_ACQUIRE));
}

static void *swap_out_run(void *arg)
{
	struct grower *g = arg;

	g->ret = vmu_region_swap_out(g->s, g->h);
	__atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* Where region @n->h lies, as a record asks (vmu_region_pieces()). */
struct namer {
	struct vmu_session *s;
	uint64_t h, len, max;
	struct vmu_piece *pcs;
	unsigned int nr;
	int ret;
	bool done;
};

static void *name_run(void *arg)
{
	struct namer *n = arg;
	const void *host = NULL;

	n->ret = vmu_region_pieces(n->s, n->h, n->len, &n->pcs, &n->nr, &host,
				   &n->max);
	__atomic_store_n(&n->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* @n named on another thread while the gate holds a move whose thread
 * sets *@moved when over: whether it was named within @ms ms, before
 * the move was over. The gate is opened either way, the namer joined. */
static bool name_held(struct namer *n, bool *moved, int ms)
{
	pthread_t nt;
	bool named;

	assert_int_equal(pthread_create(&nt, NULL, name_run, n), 0);
	for (int i = 0; i < ms && !__atomic_load_n(&n->done, __ATOMIC_ACQUIRE);
	     i++)
		usleep(1000);
	named = __atomic_load_n(&n->done, __ATOMIC_ACQUIRE) &&
		!__atomic_load_n(moved, __ATOMIC_ACQUIRE);
	__atomic_store_n(&gate.open, true, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(nt, NULL), 0);
	return named;
}

/* The pieces @n named (freed here) hold @len bytes of pattern @seed,
 * read through the pool's file. */
static void named_bytes(struct fix *f, struct namer *n, uint64_t len,
			uint64_t seed)
{
	int fd = f->prov->ops->file(f->prov);
	uint8_t *buf = xmalloc(len);
	uint64_t got = 0;

	assert_true(fd >= 0);
	for (unsigned int i = 0; i < n->nr; i++) {
		assert_true(got + n->pcs[i].len <= len);
		assert_int_equal(pread(fd, buf + got, n->pcs[i].len,
				       (off_t)n->pcs[i].off),
				 (ssize_t)n->pcs[i].len);
		got += n->pcs[i].len;
	}
	assert_int_equal(got, len);
	assert_int_equal(pattern_diff(buf, seed, 0, len), -1);
	free(buf);
	free(n->pcs);
	n->pcs = NULL;
}

/*
 * A crash journal's record does not wait for a swap-out's copy: while the
 * copy runs, the region is named where it lies in the pool, whose bytes
 * are its own (read through the pool's file), and once the swap-out is
 * over its chunks wait for a record begun after the one that named
 * them.
 */
static void test_journal_swap_out_not_waited(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, big = 40 * g;
	struct grower w = { .s = f->s[0], .size = big };
	struct namer n = { .s = f->s[0], .len = big };
	int wakes = 0;
	pthread_t th;
	bool named;

	w.h = region_new(f->s[0], big, big);
	region_fill(f->s[0], w.h, 41, 0, big);
	vmu_journal_on(f->v, count_wake, &wakes);
	gate_close(f, false);
	assert_int_equal(pthread_create(&th, NULL, swap_out_run, &w), 0);
	gate_reached();
	/* a record, while the copy is held: named in place, at once */
	vmu_journal_begin(f->v);
	n.h = w.h;
	named = name_held(&n, &w.done, 5000);
	assert_int_equal(pthread_join(th, NULL), 0);
	f->prov->ops = gate.ops;
	assert_true(named);
	assert_int_equal(n.ret, 0);
	assert_int_equal(n.max, big);
	named_bytes(f, &n, big, 41);
	assert_int_equal(w.ret, 0);
	/* its chunks outlive the record that named them (still there:
	 * read above once the copy was over) */
	vmu_journal_done(f->v);
	assert_true(vmu_journal_waiting(f->v) >= big);
	vmu_journal_begin(f->v);
	vmu_journal_done(f->v);
	assert_int_equal(vmu_journal_waiting(f->v), 0);
	read_back(f, f->s[0], w.h, big, 41);
	vmu_journal_off(f->v);
	check_invariants(f->v);
}

static void *resize_run(void *arg)
{
	struct grower *g = arg;

	g->ret = vmu_region_resize(g->s, g->h, g->size, NULL);
	__atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Nor for a region's growth (a KV cache taking rows): while the new chunks
 * are zeroed, a record names the bytes the region held before, in the
 * chunks it held (read through the pool's file); bytes past them wait
 * for the growth.
 */
static void test_journal_growth_not_waited(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, half = 20 * g, big = 40 * g;
	struct grower w = { .s = f->s[0], .size = big };
	struct namer n = { .s = f->s[0], .len = half };
	int wakes = 0;
	pthread_t th;
	bool named;

	w.h = region_new(f->s[0], big, half);
	region_fill(f->s[0], w.h, 51, 0, half);
	vmu_journal_on(f->v, count_wake, &wakes);
	gate_close(f, true);
	assert_int_equal(pthread_create(&th, NULL, resize_run, &w), 0);
	gate_reached();
	vmu_journal_begin(f->v);
	n.h = w.h;
	named = name_held(&n, &w.done, 5000);
	assert_int_equal(pthread_join(th, NULL), 0);
	f->prov->ops = gate.ops;
	assert_int_equal(w.ret, 0);
	assert_true(named);
	assert_int_equal(n.ret, 0);
	named_bytes(f, &n, half, 51);

	/* the whole region, past what it held: after the growth */
	w.h = region_new(f->s[1], 8 * g, 4 * g);
	gate_close(f, true);
	w.s = n.s = f->s[1];
	w.size = n.len = 8 * g;
	w.done = n.done = false;
	n.h = w.h;
	n.pcs = NULL;
	assert_int_equal(pthread_create(&th, NULL, resize_run, &w), 0);
	gate_reached();
	assert_false(name_held(&n, &w.done, 300));
	assert_int_equal(pthread_join(th, NULL), 0);
	f->prov->ops = gate.ops;
	assert_int_equal(w.ret, 0);
	assert_int_equal(n.ret, 0);
	free(n.pcs);
	vmu_journal_done(f->v);
	vmu_journal_off(f->v);
	check_invariants(f->v);
}

/*
 * A growth that must reclaim memory first (its charge swaps another
 * region out, whose chunks then wait for the journal's next record) is
 * named at once by a record begun meanwhile: were the record to wait for
 * the growth, which waits for the record, neither would move until the
 * charge's bound ran out and the growth failed.
 */
static void test_journal_growth_reclaims(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct grower w = { .s = f->s[0], .size = 30 * g };
	struct namer n = { .s = f->s[0], .len = 20 * g };
	int wakes = 0;
	uint64_t b;
	pthread_t th;
	bool named;

	w.h = region_new(f->s[0], 30 * g, 20 * g);
	region_fill(f->s[0], w.h, 61, 0, 20 * g);
	b = region_new(f->s[2], 40 * g, 40 * g);
	region_fill(f->s[2], b, 62, 0, 40 * g);
	vmu_journal_on(f->v, count_wake, &wakes);
	assert_int_equal(pthread_create(&th, NULL, resize_run, &w), 0);
	/* b swapped out for it: the growth waits for a record */
	for (int i = 0; i < 10000 && vmu_journal_waiting(f->v) < 40 * g; i++)
		usleep(1000);
	assert_true(vmu_journal_waiting(f->v) >= 40 * g);
	vmu_journal_begin(f->v);
	n.h = w.h;
	named = name_held(&n, &w.done, 5000);
	vmu_journal_done(f->v);
	commit_until_done(f, &w, th);
	assert_true(named);
	assert_int_equal(n.ret, 0);
	free(n.pcs);
	assert_int_equal(w.ret, 0);
	read_back(f, f->s[2], b, 40 * g, 62);
	vmu_journal_off(f->v);
	check_invariants(f->v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* 4 */
		T(test_swap_roundtrip, setup_64m),
		T(test_swap_read_write_while_swapped, setup_64m),
		T(test_swap_pinned, setup_64m),
		T(test_resize_swapped, setup_64m),
		T(test_swap_many, setup_64m),
		T(test_session_swap_out, setup_64m),
		T(test_swap_limit, setup_bare),
		T(test_swap_in_without_room, setup_4m),
		T(test_swap_tenant_quota, setup_4m),
		T(test_swap_guarantee, setup_4m),
		T(test_journal_defers_frees, setup_4m),
		T(test_journal_swap_in_not_waited, setup_4m),
		T(test_journal_swap_out_not_waited, setup_4m),
		T(test_journal_growth_not_waited, setup_4m),
		T(test_journal_growth_reclaims, setup_4m),
	};

	/* a deadlock fails the run instead of hanging it */
	alarm(600);
	return cmocka_run_group_tests_name("vmu_swap", tests, NULL, NULL);
}
