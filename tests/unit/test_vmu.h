/* SPDX-License-Identifier: MIT */
/*
 * The fixture and helpers of the VMU's unit tests: test_vmu.c (the core),
 * test_vmu_swap.c, test_vmu_text.c, test_vmu_stack.c, test_vmu_threads.c.
 * Include after <cmocka.h>.
 *
 * Most tests use a 64 MiB or 4 MiB device with 64 KiB granules so they run
 * fast; one uses the default 2 MiB granule. For the host provider a device
 * address is a host pointer, so tests also look at device memory directly.
 *
 * Where vmu.h names no errno for a failure, the test accepts any negative
 * value and says so in a comment ("errno not documented").
 */
#ifndef DJINN_TEST_VMU_H
#define DJINN_TEST_VMU_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "vmu/vmu.h"
#include "vmu/vmu_test.h"

#define GRAN (64 * KiB)
#define NSESS 3

/* ---------------------------------------------------------------------- */
/* Fixture: a provider, a VMU and three sessions (alpha, alpha, beta) */

struct fix {
	struct vmu_provider *prov;
	struct vmu *v;
	struct vmu_session *s[NSESS];
	struct vmu_stack *stack;
	uint64_t g;
};

static inline void fix_open(struct fix *f, uint64_t cap, uint64_t gran,
			    const struct vmu_config *cfg)
{
	static const char *const tenants[NSESS] = { "alpha", "alpha", "beta" };

	assert_int_equal(vmu_host_provider_create(cap, gran, &f->prov), 0);
	assert_non_null(f->prov);
	assert_int_equal(vmu_create(f->prov, cfg, &f->v), 0);
	assert_non_null(f->v);
	for (int i = 0; i < NSESS; i++) {
		assert_int_equal(vmu_session_create(f->v, tenants[i], &f->s[i]),
				 0);
		assert_non_null(f->s[i]);
	}
	f->g = vmu_granularity(f->v);
}

static inline void fix_close(struct fix *f)
{
	if (f->stack)
		vmu_stack_destroy(f->stack);
	for (int i = 0; i < NSESS; i++)
		if (f->s[i])
			vmu_session_destroy(f->s[i]);
	if (f->v)
		vmu_destroy(f->v);
	if (f->prov)
		f->prov->ops->free(f->prov);
	memset(f, 0, sizeof(*f));
}

static inline int setup_bare(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	*state = f;
	return 0;
}

static inline int setup_64m(void **state)
{
	if (setup_bare(state))
		return -1;
	fix_open(*state, 64 * MiB, GRAN, NULL);
	return 0;
}

/* 64 granules: small enough to fill exactly. */
static inline int setup_4m(void **state)
{
	if (setup_bare(state))
		return -1;
	fix_open(*state, 4 * MiB, GRAN, NULL);
	return 0;
}

static inline int teardown(void **state)
{
	struct fix *f = *state;

	if (f) {
		fix_close(f);
		free(f);
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Helpers */

static inline struct vmu_stats get_stats(struct vmu *v)
{
	struct vmu_stats st;

	memset(&st, 0, sizeof(st));
	vmu_get_stats(v, &st);
	return st;
}

static inline struct vmu_usage get_usage(struct vmu_session *s)
{
	struct vmu_usage u;

	memset(&u, 0, sizeof(u));
	vmu_session_usage(s, &u);
	return u;
}

/* What vmu.h promises of every snapshot. */
static inline void check_invariants(struct vmu *v)
{
	struct vmu_stats st = get_stats(v);
	uint64_t sum = 0;

	for (int i = 0; i < VMU_NR_SEGS; i++) {
		sum += st.seg[i].used;
		assert_true(st.seg[i].peak >= st.seg[i].used);
	}
	assert_int_equal(st.committed, sum);
	assert_true(st.committed + st.reserved <= st.capacity);
	assert_int_equal(st.free, st.capacity - st.committed - st.reserved);
	assert_true(st.text_cached <= st.seg[VMU_SEG_TEXT].used);
}

static inline struct vmu_region_info region_info(struct vmu_session *s,
						 uint64_t h)
{
	struct vmu_region_info info;

	memset(&info, 0, sizeof(info));
	assert_int_equal(vmu_region_info(s, h, &info), 0);
	return info;
}

static inline uint64_t region_new(struct vmu_session *s, uint64_t max,
				  uint64_t size)
{
	uint64_t h = 0;

	assert_int_equal(vmu_region_create(s, max, &h), 0);
	if (size)
		assert_int_equal(vmu_region_resize(s, h, size, NULL), 0);
	return h;
}

static inline void region_fill(struct vmu_session *s, uint64_t h, uint64_t seed,
			       uint64_t off, uint64_t len)
{
	uint8_t *buf;

	if (!len)
		return;
	buf = xmalloc(len);
	pattern(buf, seed, off, len);
	assert_int_equal(vmu_region_write(s, h, off, buf, len), 0);
	free(buf);
}

static inline void region_expect(struct vmu_session *s, uint64_t h,
				 uint64_t seed, uint64_t off, uint64_t len)
{
	uint8_t *buf;
	int64_t bad;

	if (!len)
		return;
	buf = xmalloc(len);
	memset(buf, 0, len);
	assert_int_equal(vmu_region_read(s, h, off, buf, len), 0);
	bad = pattern_diff(buf, seed, off, len);
	free(buf);
	if (bad >= 0)
		fail_msg("region byte %" PRIu64
			 " differs from pattern %" PRIu64,
			 off + (uint64_t)bad, seed);
}

static inline void region_expect_zero(struct vmu_session *s, uint64_t h,
				      uint64_t off, uint64_t len)
{
	uint8_t *buf;
	int64_t bad = -1;

	if (!len)
		return;
	buf = xmalloc(len);
	memset(buf, 0xee, len);
	assert_int_equal(vmu_region_read(s, h, off, buf, len), 0);
	for (uint64_t i = 0; i < len; i++) {
		if (buf[i]) {
			bad = (int64_t)i;
			break;
		}
	}
	free(buf);
	if (bad >= 0)
		fail_msg("region byte %" PRIu64 " is not zero",
			 off + (uint64_t)bad);
}

/* Insert @size bytes of pattern @seed; checks the entry against them. */
static inline struct vmu_text *text_new(struct vmu_session *s, uint64_t seed,
					uint64_t size, bool want_created)
{
	uint8_t *buf = pattern_buf(seed, size);
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text *t = NULL;
	bool created = !want_created;

	assert_int_equal(vmu_text_insert(s, buf, size, &t, &created), 0);
	assert_non_null(t);
	assert_int_equal(created, want_created);
	vmu_fingerprint(buf, size, fp);
	assert_memory_equal(vmu_text_fp(t), fp, VMU_FP_LEN);
	assert_int_equal(vmu_text_size(t), size);
	assert_true(vmu_text_addr(t) != 0);
	assert_memory_equal(dev_ptr(vmu_text_addr(t)), buf, size);
	free(buf);
	return t;
}

/* Whether an entry named @fp is there (takes and drops a reference). */
static inline bool text_present(struct vmu_session *s, const uint8_t *fp)
{
	struct vmu_text *t = NULL;
	int rc = vmu_text_lookup(s, fp, &t);

	if (rc == -ENOENT)
		return false;
	assert_int_equal(rc, 0);
	assert_non_null(t);
	assert_memory_equal(vmu_text_fp(t), fp, VMU_FP_LEN);
	assert_int_equal(vmu_text_put(s, t), 0);
	return true;
}

#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, teardown)

#endif /* DJINN_TEST_VMU_H */
