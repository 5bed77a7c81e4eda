// SPDX-License-Identifier: MIT
/*
 * Unit tests for the VMU's core (djinnd/vmu/vmu.c) over the host provider:
 * granularity, growth in place, admission, quotas, exhaustion and the
 * session region cache, session teardown, invalid arguments and handles,
 * pressure. Swap, text, the stack and many threads at once have programs
 * of their own (test_vmu_swap.c, test_vmu_text.c, test_vmu_stack.c,
 * test_vmu_threads.c); the fixture and helpers they share are in
 * test_vmu.h.
 */
#include <errno.h>
#include <inttypes.h>
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

#include "array_size.h"
#include "test_vmu.h"

/* ---------------------------------------------------------------------- */
/* Helpers of these tests only */

static int setup_2m_granule(void **state)
{
	if (setup_bare(state))
		return -1;
	fix_open(*state, 64 * MiB, 0, NULL);
	return 0;
}

static struct vmu_usage get_tenant_usage(struct vmu *v, const char *tenant)
{
	struct vmu_usage u;

	memset(&u, 0, sizeof(u));
	assert_int_equal(vmu_tenant_usage(v, tenant, &u), 0);
	return u;
}

/* The counters that must not move when nothing is allowed to change. */
static void expect_same_memory(const struct vmu_stats *a,
			       const struct vmu_stats *b)
{
	assert_int_equal(a->committed, b->committed);
	assert_int_equal(a->reserved, b->reserved);
	assert_int_equal(a->free, b->free);
	assert_int_equal(a->pressure, b->pressure);
	for (int i = 0; i < VMU_NR_SEGS; i++) {
		assert_int_equal(a->seg[i].used, b->seg[i].used);
		assert_int_equal(a->seg[i].entries, b->seg[i].entries);
	}
	assert_int_equal(a->text_evictions, b->text_evictions);
	assert_int_equal(a->text_cached, b->text_cached);
	assert_int_equal(a->data_cached, b->data_cached);
	assert_int_equal(a->swap_outs, b->swap_outs);
	assert_int_equal(a->swap_ins, b->swap_ins);
	assert_int_equal(a->swapped_now, b->swapped_now);
	assert_int_equal(a->admit_reclaims, b->admit_reclaims);
}

/* Each byte is zero or what pattern @seed wrote there earlier. */
static void region_expect_zero_or(struct vmu_session *s, uint64_t h,
				  uint64_t seed, uint64_t off, uint64_t len)
{
	uint8_t *buf, *old;
	int64_t bad = -1;

	if (!len)
		return;
	buf = xmalloc(len);
	old = pattern_buf(0, len);
	pattern(old, seed, off, len);
	memset(buf, 0xee, len);
	assert_int_equal(vmu_region_read(s, h, off, buf, len), 0);
	for (uint64_t i = 0; i < len; i++) {
		if (buf[i] && buf[i] != old[i]) {
			bad = (int64_t)i;
			break;
		}
	}
	free(buf);
	free(old);
	if (bad >= 0)
		fail_msg("region byte %" PRIu64
			 " is neither 0 nor pattern %" PRIu64,
			 off + (uint64_t)bad, seed);
}

/* Whether the decimal form of @n appears in @msg. */
static bool msg_has(const char *msg, uint64_t n)
{
	char num[32];

	snprintf(num, sizeof(num), "%" PRIu64, n);
	return strstr(msg, num) != NULL;
}

/* ---------------------------------------------------------------------- */
/* 2. Granularity and alignment */

static void test_granularity_and_round(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	const uint64_t maxes[] = { 1, g - 1, g, 3 * g + 5, 8 * g };
	struct vmu_region_info info[5];
	struct vmu_stats st = get_stats(f->v);

	assert_int_equal(g, GRAN);
	assert_int_equal(g, f->prov->granularity);
	assert_int_equal(st.granularity, GRAN);
	assert_int_equal(st.capacity, 64 * MiB);
	assert_int_equal(st.committed, 0);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.free, 64 * MiB);
	assert_int_equal(st.pressure, VMU_PRESSURE_NORMAL);

	assert_int_equal(vmu_round(f->v, 0), 0);
	assert_int_equal(vmu_round(f->v, 1), g);
	assert_int_equal(vmu_round(f->v, g - 1), g);
	assert_int_equal(vmu_round(f->v, g), g);
	assert_int_equal(vmu_round(f->v, g + 1), 2 * g);
	assert_int_equal(vmu_round(f->v, 5 * g + 7), 6 * g);

	for (int i = 0; i < 5; i++) {
		uint64_t h = region_new(f->s[i % 2], maxes[i], 0);

		info[i] = region_info(f->s[i % 2], h);
		assert_true(info[i].addr != 0);
		assert_int_equal(info[i].addr % g, 0);
		assert_int_equal(info[i].size, 0);
		assert_int_equal(info[i].mapped, 0);
		assert_true(info[i].max_size >= maxes[i]);
		assert_int_equal(info[i].state, VMU_REGION_RESIDENT);
		assert_int_equal(info[i].pins, 0);
	}
	/* reserved ranges do not overlap */
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++)
			assert_true(info[i].addr + info[i].max_size <=
					    info[j].addr ||
				    info[j].addr + info[j].max_size <=
					    info[i].addr);
	/* creating regions maps nothing */
	st = get_stats(f->v);
	assert_int_equal(st.committed, 0);
	assert_int_equal(st.seg[VMU_SEG_DATA].used, 0);
}

/* The default 2 MiB granule. */
static void test_default_granule(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	struct vmu_region_info info;
	struct vmu_stats st;
	struct vmu_text *t;
	uint64_t h, text_used;

	assert_int_equal(f->g, 2 * MiB);
	assert_int_equal(vmu_round(f->v, 1), 2 * MiB);
	assert_int_equal(vmu_round(f->v, 3 * MiB), 4 * MiB);

	h = region_new(s, 10 * MiB, 3 * MiB);
	info = region_info(s, h);
	assert_int_equal(info.addr % (2 * MiB), 0);
	assert_int_equal(info.size, 3 * MiB);
	assert_int_equal(info.mapped, 4 * MiB);
	region_fill(s, h, 1, 0, 3 * MiB);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_DATA].used, 4 * MiB);

	assert_int_equal(vmu_region_swap_out(s, h), 0);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_DATA].used, 0);
	assert_int_equal(vmu_region_swap_in(s, h, NULL), 0);
	assert_int_equal(region_info(s, h).addr, info.addr);
	assert_int_equal(region_info(s, h).mapped, 4 * MiB);
	region_expect(s, h, 1, 0, 3 * MiB);

	/* grown in two steps, it shrinks back to the first step's chunk */
	h = region_new(s, 10 * MiB, 2 * MiB);
	assert_int_equal(vmu_region_resize(s, h, 5 * MiB, NULL), 0);
	assert_int_equal(region_info(s, h).mapped, 6 * MiB);
	region_fill(s, h, 3, 0, 5 * MiB);
	assert_int_equal(vmu_region_resize(s, h, 1, NULL), 0);
	assert_int_equal(region_info(s, h).mapped, 2 * MiB);
	region_expect(s, h, 3, 0, 1);

	t = text_new(s, 2, 1, true);
	text_used = get_stats(f->v).seg[VMU_SEG_TEXT].used;
	assert_in_range(text_used, 1, 2 * MiB);
	assert_int_equal(vmu_text_put(s, t), 0);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */
/* 3. Growth in place */

static void test_region_grows_in_place(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	const uint64_t g = f->g;
	const uint64_t steps[] = {
		1, 100, g - 1, g, g + 1, 2 * g + 12345, 3 * g, 5 * g - 7, 8 * g,
	};
	struct vmu_region_info info;
	struct vmu_usage u;
	struct vmu_stats st;
	uint64_t h, addr, prev = 0;

	assert_int_equal(vmu_region_create(s, 8 * g, &h), 0);
	info = region_info(s, h);
	addr = info.addr;
	assert_int_equal(info.size, 0);
	assert_int_equal(info.mapped, 0);
	assert_int_equal(info.max_size, 8 * g);

	for (size_t i = 0; i < ARRAY_SIZE(steps); i++) {
		uint64_t size = steps[i];

		assert_int_equal(vmu_region_resize(s, h, size, NULL), 0);
		info = region_info(s, h);
		assert_int_equal(info.addr, addr);
		assert_int_equal(info.size, size);
		/* data waste below one granule */
		assert_int_equal(info.mapped, vmu_round(f->v, size));
		assert_int_equal(info.state, VMU_REGION_RESIDENT);

		st = get_stats(f->v);
		assert_int_equal(st.seg[VMU_SEG_DATA].used, info.mapped);
		assert_int_equal(st.committed, info.mapped);
		u = get_usage(s);
		assert_int_equal(u.data_bytes, info.mapped);
		assert_int_equal(u.resident, info.mapped);
		assert_int_equal(u.swapped, 0);
		assert_int_equal(u.regions, 1);

		/* new bytes are zero, old bytes are where they were */
		region_expect_zero(s, h, prev, size - prev);
		region_expect(s, h, 1, 0, prev);
		region_fill(s, h, 1, prev, size - prev);
		expect_pattern(dev_ptr(addr), 1, 0, size,
			       "at the device address");
		prev = size;
	}

	assert_int_equal(vmu_region_resize(s, h, 8 * g + 1, NULL), -E2BIG);
	assert_int_equal(vmu_region_resize(s, h, UINT64_MAX, NULL), -E2BIG);
	info = region_info(s, h);
	assert_int_equal(info.size, 8 * g);
	assert_int_equal(info.mapped, 8 * g);

	/* shrinking releases the chunks past the new size */
	assert_int_equal(vmu_region_resize(s, h, 3 * g, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.addr, addr);
	assert_int_equal(info.size, 3 * g);
	assert_int_equal(info.mapped, 3 * g);
	assert_int_equal(get_stats(f->v).committed, 3 * g);
	assert_int_equal(get_usage(s).data_bytes, 3 * g);
	region_expect(s, h, 1, 0, 3 * g);

	/* ...but not the one that still holds live bytes */
	assert_int_equal(vmu_region_resize(s, h, 3 * g - 100, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.size, 3 * g - 100);
	assert_int_equal(info.mapped, 3 * g);
	region_expect(s, h, 1, 0, 3 * g - 100);

	assert_int_equal(vmu_region_resize(s, h, 0, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.size, 0);
	assert_int_equal(info.mapped, 0);
	assert_int_equal(get_stats(f->v).committed, 0);

	/* growing again: at the same address, zero or this session's own
	 * earlier bytes */
	assert_int_equal(vmu_region_resize(s, h, 4 * g, NULL), 0);
	info = region_info(s, h);
	assert_int_equal(info.addr, addr);
	assert_int_equal(info.mapped, 4 * g);
	region_expect_zero_or(s, h, 1, 0, 4 * g);
	check_invariants(f->v);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	assert_int_equal(get_usage(s).regions, 0);
	assert_int_equal(get_usage(s).data_bytes, 0);
}

/* Chunks another session gave back reach a growing region zeroed. */
static void test_growth_zeroes_recycled_chunks(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	uint64_t a, b;

	/* fill the whole device once, then give it all back */
	a = region_new(f->s[1], 64 * g, 64 * g);
	region_fill(f->s[1], a, 2, 0, 64 * g);
	assert_int_equal(vmu_region_resize(f->s[1], a, 0, NULL), 0);
	assert_int_equal(get_stats(f->v).committed, 0);

	b = region_new(f->s[0], 64 * g, 0);
	for (uint64_t n = 1; n <= 64; n *= 2) {
		assert_int_equal(vmu_region_resize(f->s[0], b, n * g, NULL), 0);
		region_expect_zero(f->s[0], b, n / 2 * g, n * g - n / 2 * g);
	}
}

/* ---------------------------------------------------------------------- */
/* 7. Admission */

static void test_admit_check_text(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	char msg[VMU_MSG_LEN];
	struct vmu_stats st0, st;
	struct vmu_text *t, *t2 = NULL;

	memset(msg, 0, sizeof(msg));
	assert_int_equal(vmu_admit_check(f->v, g, msg, sizeof(msg)),
			 VMU_FIT_NOW);
	assert_true(msg_has(msg, g));
	assert_int_equal(vmu_admit_check(f->v, 64 * g, NULL, 0), VMU_FIT_NOW);
	assert_int_equal(vmu_admit_check(f->v, 65 * g, NULL, 0), VMU_FIT_NEVER);

	t = text_new(f->s[0], 90, 40 * g, true);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	st0 = get_stats(f->v);
	assert_int_equal(vmu_admit_check(f->v, 24 * g, NULL, 0), VMU_FIT_NOW);
	assert_int_equal(vmu_admit_check(f->v, 25 * g, NULL, 0),
			 VMU_FIT_AFTER_RECLAIM);
	assert_int_equal(vmu_admit_check(f->v, 64 * g, msg, sizeof(msg)),
			 VMU_FIT_AFTER_RECLAIM);
	assert_int_equal(vmu_admit_check(f->v, 65 * g, NULL, 0), VMU_FIT_NEVER);
	/* checking changed nothing */
	st = get_stats(f->v);
	expect_same_memory(&st0, &st);
	assert_int_equal(st.admits, st0.admits);
	assert_int_equal(st.admit_refusals, st0.admit_refusals);

	/* held text is not reclaimable */
	assert_int_equal(vmu_text_lookup(f->s[1], vmu_text_fp(t), &t2), 0);
	assert_int_equal(vmu_admit_check(f->v, 25 * g, NULL, 0), VMU_FIT_NEVER);
	assert_int_equal(vmu_text_put(f->s[1], t2), 0);
	assert_int_equal(vmu_admit_check(f->v, 25 * g, NULL, 0),
			 VMU_FIT_AFTER_RECLAIM);
}

static void test_admit_check_data(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	uint64_t h = region_new(s, 40 * g, 40 * g);

	assert_int_equal(vmu_admit_check(f->v, 24 * g, NULL, 0), VMU_FIT_NOW);
	assert_int_equal(vmu_admit_check(f->v, 25 * g, NULL, 0),
			 VMU_FIT_AFTER_RECLAIM);
	assert_int_equal(region_info(s, h).state, VMU_REGION_RESIDENT);

	/* pinned data is not reclaimable */
	assert_int_equal(vmu_region_pin(s, h, NULL, NULL), 0);
	assert_int_equal(vmu_admit_check(f->v, 25 * g, NULL, 0), VMU_FIT_NEVER);
	assert_int_equal(vmu_region_unpin(s, h), 0);

	/* a swapped region holds no device memory */
	assert_int_equal(vmu_region_swap_out(s, h), 0);
	assert_int_equal(vmu_admit_check(f->v, 64 * g, NULL, 0), VMU_FIT_NOW);
}

static void test_admit_refusal(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_text *unheld, *held;
	struct vmu_resv r = { 0 };
	struct vmu_stats st0, st;
	char msg[VMU_MSG_LEN];
	uint64_t pinned_h;

	/* 10 unheld, 30 held, 4 pinned data, 20 free */
	unheld = text_new(f->s[0], 91, 10 * g, true);
	assert_int_equal(vmu_text_put(f->s[0], unheld), 0);
	held = text_new(f->s[1], 92, 30 * g, true);
	pinned_h = region_new(f->s[2], 4 * g, 4 * g);
	assert_int_equal(vmu_region_pin(f->s[2], pinned_h, NULL, NULL), 0);

	st0 = get_stats(f->v);
	assert_int_equal(st0.free, 20 * g);
	assert_int_equal(vmu_admit_check(f->v, 31 * g, NULL, 0), VMU_FIT_NEVER);
	memset(msg, 0, sizeof(msg));
	assert_int_equal(vmu_admit(f->v, 31 * g, &r, msg, sizeof(msg)),
			 -ENOMEM);
	assert_true(strlen(msg) > 0);
	if (!msg_has(msg, 31 * g))
		fail_msg("need %" PRIu64 " not in \"%s\"", 31 * g, msg);
	/* availability: free now, or free after reclaim */
	if (!msg_has(msg, 20 * g) && !msg_has(msg, 30 * g))
		fail_msg("neither %" PRIu64 " nor %" PRIu64 " in \"%s\"",
			 20 * g, 30 * g, msg);
	st = get_stats(f->v);
	expect_same_memory(&st0, &st);
	assert_int_equal(st.admit_refusals, st0.admit_refusals + 1);
	assert_true(text_present(f->s[0], vmu_text_fp(unheld)));
	assert_int_equal(region_info(f->s[2], pinned_h).state,
			 VMU_REGION_RESIDENT);

	/* exactly what reclaim can reach is admitted */
	assert_int_equal(vmu_admit_check(f->v, 30 * g, NULL, 0),
			 VMU_FIT_AFTER_RECLAIM);
	assert_int_equal(vmu_admit(f->v, 30 * g, &r, msg, sizeof(msg)), 0);
	assert_int_equal(r.bytes, 30 * g);
	assert_int_equal(get_stats(f->v).free, 0);
	vmu_resv_release(&r);
	assert_int_equal(get_stats(f->v).reserved, 0);
	assert_int_equal(vmu_text_put(f->s[1], held), 0);
}

static void test_admit_reclaims_text(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_text *t = text_new(f->s[0], 93, 40 * g, true);
	struct vmu_resv r = { 0 };
	struct vmu_stats st0, st;
	uint8_t fp[VMU_FP_LEN];

	memcpy(fp, vmu_text_fp(t), VMU_FP_LEN);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	st0 = get_stats(f->v);
	assert_int_equal(vmu_admit(f->v, 30 * g, &r, NULL, 0), 0);
	assert_ptr_equal(r.vmu, f->v);
	assert_int_equal(r.bytes, 30 * g);
	st = get_stats(f->v);
	assert_int_equal(st.reserved, 30 * g);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, 0);
	assert_int_equal(st.free, 34 * g);
	assert_int_equal(st.text_evictions, st0.text_evictions + 1);
	assert_int_equal(st.admits, st0.admits + 1);
	assert_int_equal(st.admit_reclaims, st0.admit_reclaims + 1);
	assert_false(text_present(f->s[0], fp));
	check_invariants(f->v);

	vmu_resv_release(&r);
	st = get_stats(f->v);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.free, 64 * g);
}

static void test_admit_swaps_data(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	uint64_t h = region_new(s, 40 * g, 40 * g);
	struct vmu_resv r = { 0 };
	struct vmu_stats st0, st;

	region_fill(s, h, 94, 0, 40 * g);
	st0 = get_stats(f->v);
	assert_int_equal(vmu_admit(f->v, 30 * g, &r, NULL, 0), 0);
	assert_int_equal(region_info(s, h).state, VMU_REGION_SWAPPED);
	st = get_stats(f->v);
	assert_int_equal(st.swap_outs, st0.swap_outs + 1);
	assert_int_equal(st.reserved, 30 * g);
	assert_int_equal(st.committed, 0);
	assert_int_equal(st.admit_reclaims, st0.admit_reclaims + 1);
	check_invariants(f->v);
	vmu_resv_release(&r);
	assert_int_equal(vmu_region_swap_in(s, h, NULL), 0);
	region_expect(s, h, 94, 0, 40 * g);
}

/* Documentation/vmu.rst: idle data regions are swapped out least
 * recently used first; reading a region is a use. */
static void test_admit_swaps_lru_data(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	uint64_t a = region_new(f->s[0], 20 * g, 20 * g);
	uint64_t b = region_new(f->s[0], 20 * g, 20 * g);
	uint64_t p = region_new(f->s[1], 24 * g, 24 * g);
	struct vmu_resv r = { 0 };
	uint8_t byte;

	region_fill(f->s[0], a, 95, 0, 20 * g);
	region_fill(f->s[0], b, 96, 0, 20 * g);
	assert_int_equal(vmu_region_pin(f->s[1], p, NULL, NULL), 0);
	assert_int_equal(get_stats(f->v).free, 0);
	/* b was written last; reading a makes a the most recent */
	assert_int_equal(vmu_region_read(f->s[0], a, 0, &byte, 1), 0);

	assert_int_equal(vmu_admit(f->v, 10 * g, &r, NULL, 0), 0);
	assert_int_equal(region_info(f->s[0], b).state, VMU_REGION_SWAPPED);
	assert_int_equal(region_info(f->s[0], a).state, VMU_REGION_RESIDENT);
	vmu_resv_release(&r);
	assert_int_equal(vmu_region_swap_in(f->s[0], b, NULL), 0);
	region_expect(f->s[0], a, 95, 0, 20 * g);
	region_expect(f->s[0], b, 96, 0, 20 * g);
}

/* Two idle regions of 2 granules under a swap_limit of 3 granules: only
 * one of them can be swapped, so at most 2 granules can be reclaimed. */
static void swap_limit_setup(struct fix *f, uint64_t *a, uint64_t *b)
{
	struct vmu_config cfg = { .swap_limit = 3 * GRAN };
	const uint64_t g = GRAN;
	uint64_t p;

	fix_open(f, 4 * MiB, GRAN, &cfg);
	*a = region_new(f->s[0], 2 * g, 2 * g);
	*b = region_new(f->s[0], 2 * g, 2 * g);
	region_fill(f->s[0], *a, 97, 0, 2 * g);
	region_fill(f->s[0], *b, 98, 0, 2 * g);
	p = region_new(f->s[1], 60 * g, 60 * g);
	assert_int_equal(vmu_region_pin(f->s[1], p, NULL, NULL), 0);
	assert_int_equal(get_stats(f->v).free, 0);
}

/* vmu.h: vmu_admit() returns -ENOMEM when the need cannot fit, and
 * "nothing is evicted or swapped in that case". */
static void test_admit_refusal_swap_limit(void **state)
{
	struct fix *f = *state;
	struct vmu_resv r = { 0 };
	struct vmu_stats st0, st;
	char msg[VMU_MSG_LEN];
	uint64_t a, b;
	int rc;

	swap_limit_setup(f, &a, &b);
	st0 = get_stats(f->v);
	rc = vmu_admit(f->v, 3 * f->g, &r, msg, sizeof(msg));
	if (rc == 0)
		vmu_resv_release(&r);
	assert_int_equal(rc, -ENOMEM);
	st = get_stats(f->v);
	assert_int_equal(st.swap_outs, st0.swap_outs);
	assert_int_equal(region_info(f->s[0], a).state, VMU_REGION_RESIDENT);
	assert_int_equal(region_info(f->s[0], b).state, VMU_REGION_RESIDENT);
	expect_same_memory(&st0, &st);

	/* what does fit is admitted, by swapping one region */
	assert_int_equal(vmu_admit(f->v, 2 * f->g, &r, NULL, 0), 0);
	vmu_resv_release(&r);
}

/* vmu.h: VMU_FIT_AFTER_RECLAIM only when reclaim can make the room. */
static void test_admit_check_swap_limit(void **state)
{
	struct fix *f = *state;
	uint64_t a, b;

	swap_limit_setup(f, &a, &b);
	assert_int_equal(vmu_admit_check(f->v, 2 * f->g, NULL, 0),
			 VMU_FIT_AFTER_RECLAIM);
	assert_int_equal(vmu_admit_check(f->v, 3 * f->g, NULL, 0),
			 VMU_FIT_NEVER);
}

/* Reserved bytes are not free for anyone else. */
static void test_admit_reservations_add_up(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_resv r1 = { 0 }, r2 = { 0 };
	char msg[VMU_MSG_LEN];

	assert_int_equal(vmu_admit(f->v, 40 * g, &r1, NULL, 0), 0);
	assert_int_equal(get_stats(f->v).free, 24 * g);
	assert_int_equal(vmu_admit_check(f->v, 30 * g, NULL, 0), VMU_FIT_NEVER);
	assert_int_equal(vmu_admit(f->v, 30 * g, &r2, msg, sizeof(msg)),
			 -ENOMEM);
	assert_int_equal(vmu_admit(f->v, 24 * g, &r2, NULL, 0), 0);
	assert_int_equal(get_stats(f->v).free, 0);
	assert_int_equal(get_stats(f->v).reserved, 64 * g);
	vmu_resv_release(&r1);
	vmu_resv_release(&r2);
	assert_int_equal(get_stats(f->v).free, 64 * g);
	assert_int_equal(get_stats(f->v).reserved, 0);
}

/* The interlock: allocations drawing on a reservation succeed when memory
 * is otherwise gone, and others cannot take the reserved bytes. */
static void test_resv_interlock(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	uint64_t a = region_new(f->s[0], 20 * g, 20 * g);
	uint64_t b = region_new(f->s[1], 8 * g, 0);
	uint64_t c = region_new(f->s[2], 8 * g, 0);
	struct vmu_resv r = { 0 };
	struct vmu_stats st;
	struct vmu_text *t = NULL;
	bool created;
	uint64_t addr;

	assert_int_equal(vmu_region_pin(f->s[0], a, NULL, NULL), 0);
	assert_int_equal(vmu_admit(f->v, 44 * g, &r, NULL, 0), 0);
	st = get_stats(f->v);
	assert_int_equal(st.free, 0);
	assert_int_equal(st.reserved, 44 * g);

	assert_int_equal(vmu_region_resize(f->s[1], b, g, NULL), -ENOMEM);
	assert_int_equal(vmu_region_resize(f->s[1], b, 3 * g, &r), 0);
	assert_int_equal(r.bytes, 41 * g);
	st = get_stats(f->v);
	assert_int_equal(st.reserved, 41 * g);
	assert_int_equal(st.committed, 23 * g);
	assert_int_equal(st.free, 0);
	assert_int_equal(vmu_region_pin(f->s[1], b, &r, NULL), 0);

	assert_int_equal(vmu_stack_create(f->v, 8 * g, &f->stack), 0);
	assert_int_equal(vmu_stack_begin(f->stack, 2 * g, &r), 0);
	assert_int_equal(r.bytes, 39 * g);
	assert_int_equal(vmu_stack_alloc(f->stack, 2 * g, 0, &addr), 0);

	/* errno not documented for a text insert without room */
	assert_true(vmu_text_insert(f->s[2], "x", 1, &t, &created) < 0);
	assert_int_equal(vmu_region_resize(f->s[2], c, 1, NULL), -ENOMEM);

	vmu_resv_release(&r);
	st = get_stats(f->v);
	assert_int_equal(st.reserved, 0);
	assert_int_equal(st.free, 39 * g);
	assert_int_equal(vmu_region_resize(f->s[2], c, 1, NULL), 0);
	vmu_stack_end(f->stack);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */
/* 8. Quotas */

static void test_session_quota(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	struct vmu_stats st0;
	struct vmu_text *t;
	uint64_t r1, r2, r3;

	assert_int_equal(vmu_session_set_quota(s, 2 * g), 0);
	assert_int_equal(get_usage(s).quota, 2 * g);
	r1 = region_new(s, 8 * g, 1); /* charged a granule */
	assert_int_equal(get_usage(s).data_bytes, g);
	r2 = region_new(s, 8 * g, 0);
	st0 = get_stats(f->v);

	/* a second chunk, so that shrinking to one granule frees it */
	assert_int_equal(vmu_region_resize(s, r1, g + 1, NULL), 0);
	assert_int_equal(get_usage(s).data_bytes, 2 * g);
	assert_int_equal(vmu_region_resize(s, r1, 2 * g, NULL), 0);
	assert_int_equal(vmu_region_resize(s, r1, 2 * g + 1, NULL), -EDQUOT);
	assert_int_equal(get_stats(f->v).quota_refusals,
			 st0.quota_refusals + 1);
	assert_int_equal(region_info(s, r1).size, 2 * g);
	assert_int_equal(vmu_region_resize(s, r2, 1, NULL), -EDQUOT);
	assert_int_equal(get_stats(f->v).quota_refusals,
			 st0.quota_refusals + 2);
	assert_int_equal(region_info(s, r2).mapped, 0);
	assert_int_equal(get_usage(s).data_bytes, 2 * g);

	assert_int_equal(vmu_region_resize(s, r1, g, NULL), 0);
	assert_int_equal(get_usage(s).data_bytes, g);
	assert_int_equal(vmu_region_resize(s, r2, g, NULL), 0);
	/* a swapped region still counts */
	assert_int_equal(vmu_region_swap_out(s, r2), 0);
	assert_int_equal(get_usage(s).data_bytes, 2 * g);
	assert_int_equal(vmu_region_resize(s, r1, g + 1, NULL), -EDQUOT);

	/* text is not data: not charged to the quota */
	t = text_new(s, 100, 4 * g, true);
	assert_int_equal(vmu_text_put(s, t), 0);

	/* another session of the same tenant is not limited by it */
	r3 = region_new(f->s[1], 8 * g, 8 * g);
	assert_int_equal(region_info(f->s[1], r3).mapped, 8 * g);

	/* 0 lifts the quota */
	assert_int_equal(vmu_session_set_quota(s, 0), 0);
	assert_int_equal(get_usage(s).quota, 0);
	assert_int_equal(vmu_region_resize(s, r1, 8 * g, NULL), 0);
	assert_int_equal(get_usage(s).data_bytes, 9 * g);
}

static void test_tenant_quota(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *a = NULL, *b = NULL;
	struct vmu_stats st0;
	struct vmu_usage u;
	uint64_t ra, rb, rc, rd;

	/* set before the tenant's first session: kept for it */
	assert_int_equal(vmu_tenant_set_quota(f->v, "gamma", 3 * g), 0);
	assert_int_equal(vmu_session_create(f->v, "gamma", &a), 0);
	assert_int_equal(vmu_session_create(f->v, "gamma", &b), 0);
	ra = region_new(a, 8 * g, g);
	assert_int_equal(vmu_region_resize(a, ra, 2 * g, NULL), 0);
	rb = region_new(b, 8 * g, g);
	st0 = get_stats(f->v);
	assert_int_equal(vmu_region_resize(b, rb, g + 1, NULL), -EDQUOT);
	assert_int_equal(get_stats(f->v).quota_refusals,
			 st0.quota_refusals + 1);
	u = get_tenant_usage(f->v, "gamma");
	assert_int_equal(u.data_bytes, 3 * g);
	assert_int_equal(u.regions, 2);
	assert_int_equal(u.quota, 3 * g);

	/* room freed by one session is usable by the other */
	assert_int_equal(vmu_region_resize(a, ra, g, NULL), 0);
	assert_int_equal(vmu_region_resize(b, rb, 2 * g, NULL), 0);
	assert_int_equal(vmu_region_resize(b, rb, 2 * g + 1, NULL), -EDQUOT);

	/* other tenants are not limited by it */
	rc = region_new(f->s[2], 8 * g, 8 * g);
	assert_int_equal(region_info(f->s[2], rc).mapped, 8 * g);

	/* a quota on a tenant that is in use */
	assert_int_equal(vmu_tenant_set_quota(f->v, "beta", 9 * g), 0);
	assert_int_equal(get_tenant_usage(f->v, "beta").quota, 9 * g);
	rd = region_new(f->s[2], 8 * g, g); /* 9 granules: at the quota */
	assert_int_equal(vmu_region_resize(f->s[2], rd, g + 1, NULL), -EDQUOT);
	assert_int_equal(region_info(f->s[2], rd).size, g);

	assert_int_equal(vmu_tenant_set_quota(f->v, "gamma", 0), 0);
	assert_int_equal(vmu_region_resize(b, rb, 8 * g, NULL), 0);
	u = get_tenant_usage(f->v, "gamma");
	assert_int_equal(u.data_bytes, 9 * g);
	assert_int_equal(u.quota, 0);

	vmu_session_destroy(a);
	vmu_session_destroy(b);
}

/* Host memory a tenant's model uploads hold while they are read: one
 * limit for all of a tenant's sessions together, none shared with
 * another tenant; what is given back is usable again. */
static void test_tenant_stage(void **state)
{
	struct fix *f = *state;
	uint64_t held = 1;

	/* alpha: sessions 0 and 1; beta: session 2 */
	assert_int_equal(vmu_tenant_stage(f->s[0], 600, 1000, &held), 0);
	assert_int_equal(held, 0);
	assert_int_equal(vmu_tenant_stage(f->s[1], 500, 1000, &held), -EDQUOT);
	assert_int_equal(held, 600);
	assert_int_equal(vmu_tenant_stage(f->s[1], 400, 1000, &held), 0);
	assert_int_equal(vmu_tenant_stage(f->s[2], 900, 1000, &held), 0);
	assert_int_equal(held, 0);
	assert_int_equal(vmu_tenant_stage(f->s[2], 1001, 1500, &held), -EDQUOT);
	assert_int_equal(held, 900);
	assert_int_equal(vmu_tenant_stage(f->s[0], UINT64_MAX, UINT64_MAX,
					  &held),
			 -EDQUOT); /* no overflow */
	vmu_tenant_unstage(f->s[0], 600);
	assert_int_equal(vmu_tenant_stage(f->s[0], 600, 1000, &held), 0);
	assert_int_equal(held, 400);
	vmu_tenant_unstage(f->s[0], 600);
	vmu_tenant_unstage(f->s[1], 400);
	vmu_tenant_unstage(f->s[2], 900);
	assert_int_equal(vmu_tenant_stage(f->s[1], 1000, 1000, &held), 0);
	assert_int_equal(held, 0);
	vmu_tenant_unstage(f->s[1], 1000);
}

static void test_tenant_usage_sums_sessions(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_text *t;
	struct vmu_usage u;
	uint64_t h;

	region_new(f->s[0], 8 * g, 2 * g);
	h = region_new(f->s[1], 8 * g, 3 * g - 1);
	t = text_new(f->s[1], 101, g, true);
	assert_int_equal(vmu_region_swap_out(f->s[1], h), 0);

	u = get_tenant_usage(f->v, "alpha");
	assert_int_equal(u.data_bytes, 5 * g);
	assert_int_equal(u.resident, 2 * g);
	assert_int_equal(u.swapped, 3 * g);
	assert_int_equal(u.regions, 2);
	assert_int_equal(u.text_refs, 1);
	u = get_tenant_usage(f->v, "beta");
	assert_int_equal(u.data_bytes, 0);
	assert_int_equal(u.regions, 0);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);
}

/* ---------------------------------------------------------------------- */
/* 9. Exhaustion */

static void test_exhaustion_exact(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	const uint64_t granules[] = { 1, 1, 2, 4, 8, 16, 32 }; /* 64 */
	uint64_t h[7], extra, again;
	struct vmu_stats st;
	struct vmu_text *t = NULL;
	bool created;

	for (int i = 0; i < 7; i++) {
		struct vmu_session *s = f->s[i % 2];

		h[i] = region_new(s, granules[i] * g, granules[i] * g);
		assert_int_equal(vmu_region_pin(s, h[i], NULL, NULL), 0);
	}
	st = get_stats(f->v);
	assert_int_equal(st.committed, st.capacity);
	assert_int_equal(st.free, 0);
	check_invariants(f->v);

	extra = region_new(f->s[2], 4 * g, 0);
	assert_int_equal(vmu_region_resize(f->s[2], extra, g, NULL), -ENOMEM);
	assert_int_equal(vmu_region_resize(f->s[2], extra, 1, NULL), -ENOMEM);
	assert_int_equal(region_info(f->s[2], extra).mapped, 0);
	assert_int_equal(region_info(f->s[2], extra).size, 0);
	assert_int_equal(vmu_admit_check(f->v, 1, NULL, 0), VMU_FIT_NEVER);
	/* errno not documented */
	assert_true(vmu_text_insert(f->s[2], "y", 1, &t, &created) < 0);
	assert_int_equal(get_stats(f->v).committed, st.capacity);

	/* give one granule back by shrinking: the next one fits */
	assert_int_equal(vmu_region_unpin(f->s[1], h[1]), 0);
	assert_int_equal(vmu_region_resize(f->s[1], h[1], 0, NULL), 0);
	assert_int_equal(vmu_region_pin(f->s[1], h[1], NULL, NULL), 0);
	assert_int_equal(vmu_region_resize(f->s[2], extra, g, NULL), 0);
	assert_int_equal(vmu_region_resize(f->s[2], extra, g + 1, NULL),
			 -ENOMEM);

	/* give one back by destroying a region: a same-sized one fits */
	assert_int_equal(vmu_region_unpin(f->s[0], h[0]), 0);
	assert_int_equal(vmu_region_destroy(f->s[0], h[0]), 0);
	again = region_new(f->s[0], g, g);
	assert_int_equal(region_info(f->s[0], again).mapped, g);
	region_expect_zero(f->s[0], again, 0, g);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st.capacity);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */
/* Session region cache */

static void test_session_cache(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	struct vmu_stats st;
	struct vmu_usage u;
	uint64_t h, big;

	h = region_new(s, 4 * g, 4 * g);
	region_fill(s, h, 110, 0, 4 * g);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	u = get_usage(s);
	assert_int_equal(u.data_bytes, 0);
	assert_int_equal(u.regions, 0);
	assert_int_equal(u.cached, 4 * g);
	st = get_stats(f->v);
	assert_int_equal(st.data_cached, 4 * g);
	assert_int_equal(st.committed, 4 * g); /* still mapped */
	check_invariants(f->v);

	/* the next region of that size reuses it */
	h = region_new(s, 4 * g, 4 * g);
	st = get_stats(f->v);
	assert_int_equal(st.data_cached, 0);
	assert_int_equal(st.committed, 4 * g);
	region_fill(s, h, 111, 0, 4 * g);
	assert_int_equal(vmu_region_destroy(s, h), 0);

	/* cached bytes give way to another session's growth, zeroed */
	big = region_new(f->s[2], 64 * g, 62 * g);
	region_expect_zero(f->s[2], big, 0, 62 * g);
	st = get_stats(f->v);
	assert_true(st.data_cached <= 2 * g);
	assert_int_equal(st.committed, 62 * g + st.data_cached);
	assert_int_equal(vmu_region_resize(f->s[2], big, 0, NULL), 0);

	/* reclaim takes it; so does the owner's teardown */
	h = region_new(s, 4 * g, 4 * g);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	assert_true(get_stats(f->v).data_cached >= 4 * g);
	assert_int_equal(vmu_reclaim(f->v, 64 * g), 64 * g);
	assert_int_equal(get_stats(f->v).data_cached, 0);
	assert_int_equal(get_usage(s).cached, 0);

	h = region_new(s, 4 * g, 4 * g);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	assert_int_equal(get_stats(f->v).data_cached, 4 * g);
	vmu_session_destroy(s);
	f->s[0] = NULL;
	st = get_stats(f->v);
	assert_int_equal(st.data_cached, 0);
	assert_int_equal(st.seg[VMU_SEG_DATA].used, 0);
	check_invariants(f->v);
}

/* vmu.h, vmu_region_resize(): bytes a session has not written are zero or
 * bytes that same session wrote earlier (its own cache); never another
 * session's. */
static void test_session_cache_reuse_contents(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	uint64_t h, other;

	h = region_new(s, 4 * g, 4 * g);
	region_fill(s, h, 112, 0, 4 * g);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	assert_int_equal(get_usage(s).cached, 4 * g);

	/* another session's region of the same shape starts zeroed */
	other = region_new(f->s[1], 4 * g, 4 * g);
	region_expect_zero(f->s[1], other, 0, 4 * g);
	assert_int_equal(get_usage(s).cached, 4 * g);

	/* the owner takes its cached region back: its own bytes or zero */
	h = region_new(s, 4 * g, 4 * g);
	assert_int_equal(get_usage(s).cached, 0); /* it was reused */
	region_expect_zero_or(s, h, 112, 0, 4 * g);
}

/* ---------------------------------------------------------------------- */
/* 12. Session teardown */

static void test_session_teardown(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *s = f->s[0];
	struct vmu_text *t1, *t2, *t2b, *tmp = NULL;
	struct vmu_text_upload *u = NULL;
	uint8_t fp1[VMU_FP_LEN], fp2[VMU_FP_LEN];
	uint64_t h[4], text_bytes;
	struct vmu_stats st;
	struct vmu_usage usage;
	uint8_t *buf = pattern_buf(120, g);

	h[0] = region_new(s, 4 * g, 3 * g);
	h[1] = region_new(s, 4 * g, 2 * g);
	h[2] = region_new(s, 4 * g, 4 * g);
	h[3] = region_new(s, 4 * g, 0);
	region_fill(s, h[1], 121, 0, 2 * g);
	assert_int_equal(vmu_region_swap_out(s, h[1]), 0);
	assert_int_equal(vmu_region_pin(s, h[2], NULL, NULL), 0);

	t1 = text_new(s, 122, g, true);
	memcpy(fp1, vmu_text_fp(t1), VMU_FP_LEN);
	assert_int_equal(vmu_text_lookup(s, fp1, &tmp), 0);
	t2b = text_new(f->s[1], 123, 2 * g, true);
	t2 = text_new(s, 123, 2 * g, false);
	assert_ptr_equal(t2, t2b);
	memcpy(fp2, vmu_text_fp(t2), VMU_FP_LEN);
	text_bytes = get_stats(f->v).seg[VMU_SEG_TEXT].used;

	assert_int_equal(vmu_text_begin(s, 5 * g, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, g), 0);

	vmu_session_destroy(s);
	f->s[0] = NULL;

	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_DATA].used, 0);
	assert_int_equal(st.data_cached, 0);
	assert_int_equal(st.swapped_now, 0);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, text_bytes);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries, 2);
	assert_int_equal(st.committed, text_bytes);
	check_invariants(f->v);

	usage = get_tenant_usage(f->v, "alpha");
	assert_int_equal(usage.data_bytes, 0);
	assert_int_equal(usage.regions, 0);
	assert_int_equal(usage.swapped, 0);
	assert_int_equal(usage.text_refs, 1); /* s[1] on t2 */

	/* its handles are gone for everyone */
	for (int i = 0; i < 4; i++) {
		struct vmu_region_info info;

		assert_int_equal(vmu_region_info(f->s[1], h[i], &info),
				 -ENOENT);
	}
	/* its text references are gone: t1 is unheld, t2 held by s[1] only */
	assert_int_equal(vmu_text_evict(f->v, fp2, "alpha"), -EBUSY);
	assert_int_equal(vmu_text_evict(f->v, fp1, "alpha"), 0);
	assert_int_equal(vmu_text_put(f->s[1], t2b), 0);
	assert_int_equal(vmu_text_evict(f->v, fp2, "alpha"), 0);
	assert_int_equal(get_stats(f->v).committed, 0);
	free(buf);
}

/* ---------------------------------------------------------------------- */
/* 13. Invalid arguments and handles */

static void test_invalid_args(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	struct vmu_text *t = NULL;
	struct vmu_text_upload *u = NULL;
	uint8_t buf[128];
	bool created;
	uint64_t h = 0;

	memset(buf, 0x5a, sizeof(buf));
	/* zero sizes: errno not documented */
	assert_true(vmu_region_create(s, 0, &h) < 0);
	assert_true(vmu_text_insert(s, buf, 0, &t, &created) < 0);
	assert_true(vmu_text_begin(s, 0, &u) < 0);
	assert_int_equal(get_usage(s).regions, 0);
	assert_int_equal(get_usage(s).text_refs, 0);

	/* bounds-checked copies: errno not documented */
	h = region_new(s, 4 * f->g, 100);
	assert_int_equal(vmu_region_write(s, h, 0, buf, 100), 0);
	assert_true(vmu_region_write(s, h, 50, buf, 51) < 0);
	assert_true(vmu_region_write(s, h, 100, buf, 1) < 0);
	assert_true(vmu_region_read(s, h, 100, buf, 1) < 0);
	assert_true(vmu_region_read(s, h, 99, buf, 2) < 0);
	assert_true(vmu_region_read(s, h, UINT64_MAX, buf, 2) < 0);
	assert_true(vmu_region_write(s, h, 2, buf, UINT64_MAX) < 0);
	assert_int_equal(vmu_region_read(s, h, 0, buf, 100), 0);

	assert_int_equal(vmu_region_resize(s, h, 4 * f->g + 1, NULL), -E2BIG);
	assert_int_equal(vmu_region_destroy(s, h), 0);
	assert_int_equal(vmu_region_destroy(s, h), -ENOENT);
}

/* Every handle-taking call on @h from @s answers -ENOENT. */
static void expect_no_region(struct vmu_session *s, uint64_t h)
{
	struct vmu_region_info info;
	uint8_t buf[16];

	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(vmu_region_info(s, h, &info), -ENOENT);
	assert_int_equal(vmu_region_resize(s, h, 1, NULL), -ENOENT);
	assert_int_equal(vmu_region_swap_out(s, h), -ENOENT);
	assert_int_equal(vmu_region_swap_in(s, h, NULL), -ENOENT);
	assert_int_equal(vmu_region_pin(s, h, NULL, NULL), -ENOENT);
	assert_int_equal(vmu_region_unpin(s, h), -ENOENT);
	assert_int_equal(vmu_region_write(s, h, 0, buf, 1), -ENOENT);
	assert_int_equal(vmu_region_read(s, h, 0, buf, sizeof(buf)), -ENOENT);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xee);
	assert_int_equal(vmu_region_destroy(s, h), -ENOENT);
}

static void test_foreign_handle(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	uint64_t h = region_new(f->s[0], 4 * g, 2 * g);
	struct vmu_region_info info0 = region_info(f->s[0], h), info;
	struct vmu_stats st0 = get_stats(f->v), st;

	region_fill(f->s[0], h, 130, 0, 2 * g);
	expect_no_region(f->s[1], h); /* same tenant */
	expect_no_region(f->s[2], h);

	info = region_info(f->s[0], h);
	assert_int_equal(info.addr, info0.addr);
	assert_int_equal(info.size, 2 * g);
	assert_int_equal(info.mapped, 2 * g);
	assert_int_equal(info.state, VMU_REGION_RESIDENT);
	assert_int_equal(info.pins, 0);
	region_expect(f->s[0], h, 130, 0, 2 * g);
	st = get_stats(f->v);
	expect_same_memory(&st0, &st);
	assert_int_equal(get_usage(f->s[1]).regions, 0);
}

static void test_forged_handles(void **state)
{
	struct fix *f = *state;
	uint64_t live[3];
	uint64_t forged[12];
	int n = 0;

	for (int i = 0; i < 3; i++)
		live[i] = region_new(f->s[0], 4 * f->g, f->g);
	forged[n++] = 0;
	forged[n++] = 1;
	forged[n++] = 2;
	forged[n++] = 0xdeadbeef;
	forged[n++] = UINT64_MAX;
	forged[n++] = UINT64_MAX / 2;
	forged[n++] = live[2] + 1;
	forged[n++] = live[2] ^ 1;
	forged[n++] = live[2] ^ (UINT64_C(1) << 32);
	forged[n++] = live[2] ^ (UINT64_C(1) << 63);
	forged[n++] = live[2] ^ (UINT64_C(1) << 48);
	forged[n++] = live[0] + 0x10000;
	for (int i = 0; i < n; i++) {
		if (forged[i] == live[0] || forged[i] == live[1] ||
		    forged[i] == live[2])
			continue;
		expect_no_region(f->s[0], forged[i]);
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(region_info(f->s[0], live[i]).size, f->g);
}

/* A destroyed region's handle stays dead when its slot is reused. */
static void test_stale_handles(void **state)
{
	struct fix *f = *state;
	struct vmu_session *s = f->s[0];
	uint64_t old[50], h;

	for (int i = 0; i < 50; i++) {
		old[i] = region_new(s, f->g, f->g);
		assert_int_equal(vmu_region_destroy(s, old[i]), 0);
	}
	h = region_new(s, f->g, f->g);
	for (int i = 0; i < 50; i++) {
		assert_true(old[i] != h);
		expect_no_region(s, old[i]);
	}
	assert_int_equal(region_info(s, h).size, f->g);

	/* and a destroyed session's handles are dead too */
	h = region_new(f->s[1], f->g, f->g);
	vmu_session_destroy(f->s[1]);
	f->s[1] = NULL;
	expect_no_region(s, h);
}

static void test_tenant_names(void **state)
{
	struct fix *f = *state;
	char name[65];
	struct vmu_session *s = NULL;
	struct vmu_usage u;

	memset(name, 'n', 63);
	name[63] = '\0';
	assert_int_equal(vmu_session_create(f->v, name, &s), 0);
	assert_int_equal(vmu_tenant_set_quota(f->v, name, f->g), 0);
	assert_int_equal(vmu_tenant_usage(f->v, name, &u), 0);
	vmu_session_destroy(s);

	/* one byte too long: errno not documented */
	memset(name, 'n', 64);
	name[64] = '\0';
	s = NULL;
	assert_true(vmu_session_create(f->v, name, &s) < 0);
	assert_true(vmu_tenant_set_quota(f->v, name, f->g) < 0);
	assert_true(vmu_tenant_usage(f->v, name, &u) < 0);
}

static void test_bad_thresholds(void **state)
{
	struct fix *f = *state;
	const struct vmu_config bad[] = {
		{ .warn_pct = 95, .crit_pct = 80 },
		{ .warn_pct = 80, .crit_pct = 80 },
		{ .warn_pct = 80, .crit_pct = 101 },
		{ .warn_pct = 96 }, /* above the default crit of 95 */
	};
	struct vmu *v = NULL;

	assert_int_equal(vmu_host_provider_create(4 * MiB, GRAN, &f->prov), 0);
	/* errno not documented */
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_true(vmu_create(f->prov, &bad[i], &v) < 0);

	assert_int_equal(vmu_create(f->prov, NULL, &f->v), 0);
	assert_true(vmu_set_thresholds(f->v, 90, 90) < 0);
	assert_true(vmu_set_thresholds(f->v, 60, 50) < 0);
	assert_true(vmu_set_thresholds(f->v, 0, 101) < 0);
	assert_true(vmu_set_thresholds(f->v, 96, 0) < 0); /* crit stays 95 */
	assert_true(vmu_set_thresholds(f->v, 0, 79) < 0); /* warn stays 80 */
	assert_int_equal(vmu_set_thresholds(f->v, 0, 0), 0);
	assert_int_equal(vmu_set_thresholds(f->v, 50, 100), 0);
}

/* ---------------------------------------------------------------------- */
/* 14. Pressure */

#define MAX_EVENTS 32

struct pressure_log {
	struct vmu *v;
	int n;
	enum vmu_pressure old[MAX_EVENTS], now[MAX_EVENTS], seen[MAX_EVENTS];
};

static void record_pressure(void *arg, enum vmu_pressure old,
			    enum vmu_pressure now)
{
	struct pressure_log *log = arg;

	if (log->n >= MAX_EVENTS) {
		log->n++;
		return;
	}
	log->old[log->n] = old;
	log->now[log->n] = now;
	/* the callback may call back into the VMU */
	log->seen[log->n] = log->v ? get_stats(log->v).pressure : now;
	log->n++;
}

/* Resize @h to @granules and expect exactly one transition @old -> @now,
 * or none when they are equal. */
static void step(struct fix *f, struct pressure_log *log, uint64_t h,
		 uint64_t granules, enum vmu_pressure old,
		 enum vmu_pressure now)
{
	int n = log->n;

	assert_int_equal(vmu_region_resize(f->s[0], h, granules * f->g, NULL),
			 0);
	assert_int_equal(get_stats(f->v).pressure, now);
	if (old == now) {
		assert_int_equal(log->n, n);
		return;
	}
	assert_int_equal(log->n, n + 1);
	assert_int_equal(log->old[n], old);
	assert_int_equal(log->now[n], now);
	assert_int_equal(log->seen[n], now);
}

static void test_pressure_levels(void **state)
{
	struct fix *f = *state;
	static struct pressure_log log;
	struct vmu_config cfg = {
		.pressure_cb = record_pressure,
		.pressure_arg = &log,
	};
	struct vmu_text *t;
	uint8_t fp[VMU_FP_LEN];
	uint64_t h;
	int n;

	memset(&log, 0, sizeof(log));
	fix_open(f, 64 * MiB, GRAN, &cfg); /* 1024 granules */
	log.v = f->v;
	h = region_new(f->s[0], 1024 * f->g, 0);

	step(f, &log, h, 819, VMU_PRESSURE_NORMAL, VMU_PRESSURE_NORMAL);
	step(f, &log, h, 820, VMU_PRESSURE_NORMAL, VMU_PRESSURE_WARNING);
	step(f, &log, h, 972, VMU_PRESSURE_WARNING, VMU_PRESSURE_WARNING);
	step(f, &log, h, 973, VMU_PRESSURE_WARNING, VMU_PRESSURE_CRITICAL);
	step(f, &log, h, 1024, VMU_PRESSURE_CRITICAL, VMU_PRESSURE_CRITICAL);
	/* shrink to a size the region grew through, so whole chunks go */
	step(f, &log, h, 820, VMU_PRESSURE_CRITICAL, VMU_PRESSURE_WARNING);
	step(f, &log, h, 0, VMU_PRESSURE_WARNING, VMU_PRESSURE_NORMAL);

	/* a jump: one change or two, but a consistent chain to CRITICAL */
	n = log.n;
	assert_int_equal(vmu_region_resize(f->s[0], h, 1000 * f->g, NULL), 0);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_CRITICAL);
	assert_in_range(log.n, n + 1, n + 2);
	assert_int_equal(log.old[n], VMU_PRESSURE_NORMAL);
	assert_int_equal(log.now[log.n - 1], VMU_PRESSURE_CRITICAL);
	if (log.n == n + 2)
		assert_int_equal(log.old[n + 1], log.now[n]);
	step(f, &log, h, 0, VMU_PRESSURE_CRITICAL, VMU_PRESSURE_NORMAL);

	/* text counts too */
	n = log.n;
	t = text_new(f->s[1], 140, 830 * f->g, true);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_WARNING);
	assert_int_equal(log.n, n + 1);
	assert_int_equal(log.now[n], VMU_PRESSURE_WARNING);
	memcpy(fp, vmu_text_fp(t), VMU_FP_LEN);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), 0);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_NORMAL);
	assert_int_equal(log.n, n + 2);
	assert_int_equal(log.old[n + 1], VMU_PRESSURE_WARNING);
	assert_int_equal(log.now[n + 1], VMU_PRESSURE_NORMAL);
	log.v = NULL;
}

static void test_pressure_thresholds(void **state)
{
	struct fix *f = *state;
	static struct pressure_log log;
	struct vmu_config cfg = {
		.pressure_cb = record_pressure,
		.pressure_arg = &log,
	};
	uint64_t h;

	memset(&log, 0, sizeof(log));
	fix_open(f, 64 * MiB, GRAN, &cfg);
	log.v = f->v;
	h = region_new(f->s[0], 1024 * f->g, 0);
	assert_int_equal(vmu_set_thresholds(f->v, 50, 60), 0);

	step(f, &log, h, 500, VMU_PRESSURE_NORMAL, VMU_PRESSURE_NORMAL);
	step(f, &log, h, 520, VMU_PRESSURE_NORMAL, VMU_PRESSURE_WARNING);
	step(f, &log, h, 620, VMU_PRESSURE_WARNING, VMU_PRESSURE_CRITICAL);
	step(f, &log, h, 520, VMU_PRESSURE_CRITICAL, VMU_PRESSURE_WARNING);

	/* 0 keeps a value: only crit moves */
	assert_int_equal(vmu_set_thresholds(f->v, 0, 90), 0);
	step(f, &log, h, 800, VMU_PRESSURE_WARNING, VMU_PRESSURE_WARNING);
	step(f, &log, h, 930, VMU_PRESSURE_WARNING, VMU_PRESSURE_CRITICAL);
	step(f, &log, h, 800, VMU_PRESSURE_CRITICAL, VMU_PRESSURE_WARNING);
	step(f, &log, h, 500, VMU_PRESSURE_WARNING, VMU_PRESSURE_NORMAL);
	log.v = NULL;
}

static void test_names(void **state)
{
	const char *p[3], *s[3];

	p[0] = vmu_pressure_name(VMU_PRESSURE_NORMAL);
	p[1] = vmu_pressure_name(VMU_PRESSURE_WARNING);
	p[2] = vmu_pressure_name(VMU_PRESSURE_CRITICAL);
	s[0] = vmu_seg_name(VMU_SEG_TEXT);
	s[1] = vmu_seg_name(VMU_SEG_DATA);
	s[2] = vmu_seg_name(VMU_SEG_STACK);
	for (int i = 0; i < 3; i++) {
		assert_non_null(p[i]);
		assert_non_null(s[i]);
		assert_true(p[i][0] && s[i][0]);
		for (int j = 0; j < i; j++) {
			assert_string_not_equal(p[i], p[j]);
			assert_string_not_equal(s[i], s[j]);
		}
	}
}

/* ---------------------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* 2 */
		T(test_granularity_and_round, setup_64m),
		T(test_default_granule, setup_2m_granule),
		/* 3 */
		T(test_region_grows_in_place, setup_64m),
		T(test_growth_zeroes_recycled_chunks, setup_4m),
		/* 7 */
		T(test_admit_check_text, setup_4m),
		T(test_admit_check_data, setup_4m),
		T(test_admit_refusal, setup_4m),
		T(test_admit_reclaims_text, setup_4m),
		T(test_admit_swaps_data, setup_4m),
		T(test_admit_swaps_lru_data, setup_4m),
		T(test_admit_refusal_swap_limit, setup_bare),
		T(test_admit_check_swap_limit, setup_bare),
		T(test_admit_reservations_add_up, setup_4m),
		T(test_resv_interlock, setup_4m),
		/* 8 */
		T(test_session_quota, setup_64m),
		T(test_tenant_quota, setup_64m),
		T(test_tenant_usage_sums_sessions, setup_64m),
		T(test_tenant_stage, setup_64m),
		/* 9 */
		T(test_exhaustion_exact, setup_4m),
		T(test_session_cache, setup_4m),
		T(test_session_cache_reuse_contents, setup_4m),
		/* 12 */
		T(test_session_teardown, setup_64m),
		/* 13 */
		T(test_invalid_args, setup_64m),
		T(test_foreign_handle, setup_64m),
		T(test_forged_handles, setup_64m),
		T(test_stale_handles, setup_64m),
		T(test_tenant_names, setup_64m),
		T(test_bad_thresholds, setup_bare),
		/* 14 */
		T(test_pressure_levels, setup_bare),
		T(test_pressure_thresholds, setup_bare),
		cmocka_unit_test(test_names),
	};

	/* a deadlock fails the run instead of hanging it */
	alarm(600);
	return cmocka_run_group_tests_name("vmu", tests, NULL, NULL);
}
