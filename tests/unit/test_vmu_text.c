// SPDX-License-Identifier: MIT
/*
 * Unit tests for the VMU's text segment (djinnd/vmu/text.c) over the host
 * provider: fingerprints, deduplication, references and eviction, streamed
 * uploads, LRU order. The fixture is in test_vmu.h.
 */
#include <errno.h>
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
/* 5. Text */

static void unhex(const char *hex, uint8_t *out)
{
	for (int i = 0; i < VMU_FP_LEN; i++) {
		unsigned int b;

		assert_int_equal(sscanf(hex + 2 * i, "%2x", &b), 1);
		out[i] = (uint8_t)b;
	}
}

static void test_fingerprint_vectors(void **state)
{
	static const struct {
		const char *in, *hex;
	} vec[] = {
		{ "abc", "ba7816bf8f01cfea414140de5dae2223"
			 "b00361a396177a9cb410ff61f20015ad" },
		{ "", "e3b0c44298fc1c149afbf4c8996fb924"
		      "27ae41e4649b934ca495991b7852b855" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039"
		  "a33ce45964ff2167f6ecedd419db06c1" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(vec); i++) {
		uint8_t want[VMU_FP_LEN], got[VMU_FP_LEN];

		unhex(vec[i].hex, want);
		memset(got, 0, sizeof(got));
		vmu_fingerprint(vec[i].in, strlen(vec[i].in), got);
		assert_memory_equal(got, want, VMU_FP_LEN);
	}
}

static void test_text_insert_dedup(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, size = 3 * g + 5;
	struct vmu_text *t, *t2, *t3, *other;
	struct vmu_stats st0, st1, st;
	uint8_t *copy = pattern_buf(50, size);
	uint8_t fp[VMU_FP_LEN], nope[VMU_FP_LEN];
	uint64_t bytes;
	bool created = true;

	st0 = get_stats(f->v);
	t = text_new(f->s[0], 50, size, true);
	st1 = get_stats(f->v);
	bytes = st1.seg[VMU_SEG_TEXT].used - st0.seg[VMU_SEG_TEXT].used;
	assert_in_range(bytes, size, vmu_round(f->v, size));
	assert_int_equal(st1.committed - st0.committed, bytes);
	assert_int_equal(st1.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries + 1);
	assert_int_equal(get_usage(f->s[0]).text_refs, 1);
	assert_int_equal(st1.text_cached, 0);
	memcpy(fp, vmu_text_fp(t), VMU_FP_LEN);

	/* the same bytes again, from another buffer and session */
	t2 = NULL;
	assert_int_equal(vmu_text_insert(f->s[1], copy, size, &t2, &created),
			 0);
	assert_ptr_equal(t2, t);
	assert_false(created);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, st1.seg[VMU_SEG_TEXT].used);
	/* not even for a moment */
	assert_int_equal(st.seg[VMU_SEG_TEXT].peak, st1.seg[VMU_SEG_TEXT].peak);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st1.seg[VMU_SEG_TEXT].entries);
	assert_int_equal(st.committed, st1.committed);
	assert_int_equal(get_usage(f->s[1]).text_refs, 1);

	/* different bytes make a different entry */
	other = text_new(f->s[0], 51, size, true);
	assert_ptr_not_equal(other, t);
	assert_true(vmu_text_addr(other) != vmu_text_addr(t));
	assert_memory_not_equal(vmu_text_fp(other), fp, VMU_FP_LEN);

	/* lookup hits and takes a reference */
	st1 = get_stats(f->v);
	t3 = NULL;
	assert_int_equal(vmu_text_lookup(f->s[1], fp, &t3), 0);
	assert_ptr_equal(t3, t);
	assert_int_equal(get_usage(f->s[1]).text_refs, 2);
	assert_int_equal(get_stats(f->v).text_hits, st1.text_hits + 1);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);

	/* another tenant's session (s[2] is beta's) misses it exactly as
	 * bytes nobody uploaded */
	vmu_fingerprint("nope", 4, nope);
	t3 = NULL;
	assert_int_equal(vmu_text_lookup(f->s[2], fp, &t3), -ENOENT);
	assert_null(t3);
	assert_int_equal(vmu_text_lookup(f->s[2], nope, &t3), -ENOENT);
	assert_int_equal(get_usage(f->s[2]).text_refs, 0);

	assert_int_equal(vmu_text_put(f->s[2], t), -ENOENT);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);
	assert_int_equal(vmu_text_put(f->s[1], t), -ENOENT);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	assert_int_equal(get_usage(f->s[0]).text_refs, 1); /* other */
	assert_int_equal(get_usage(f->s[1]).text_refs, 0);
	assert_int_equal(get_usage(f->s[2]).text_refs, 0);
	st = get_stats(f->v);
	assert_int_equal(st.text_cached, bytes);
	check_invariants(f->v);
	assert_int_equal(vmu_text_put(f->s[0], other), 0);
	free(copy);
}

static void test_text_refs_and_evict(void **state)
{
	struct fix *f = *state;
	const uint64_t size = 2 * f->g;
	struct vmu_text *t, *t2 = NULL;
	struct vmu_stats st0, st;
	uint8_t fp[VMU_FP_LEN];

	st0 = get_stats(f->v);
	t = text_new(f->s[0], 60, size, true);
	memcpy(fp, vmu_text_fp(t), VMU_FP_LEN);

	/* a session that holds nothing cannot put */
	assert_int_equal(vmu_text_put(f->s[1], t), -ENOENT);
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), -EBUSY);
	/* another scope's: nothing there */
	assert_int_equal(vmu_text_evict(f->v, fp, "beta"), -ENOENT);
	assert_int_equal(vmu_text_evict(f->v, fp, NULL), -ENOENT);

	/* two references from one session need two puts */
	assert_int_equal(vmu_text_lookup(f->s[0], fp, &t2), 0);
	assert_ptr_equal(t2, t);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), -EBUSY);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	assert_int_equal(vmu_text_put(f->s[0], t), -ENOENT);

	/* unheld: still cached, lookups hit */
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries + 1);
	assert_int_equal(st.text_cached, st.seg[VMU_SEG_TEXT].used);
	assert_true(text_present(f->s[1], fp));
	assert_true(text_present(f->s[0], fp));

	assert_int_equal(vmu_text_lookup(f->s[1], fp, &t2), 0);
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), -EBUSY);
	assert_int_equal(vmu_text_put(f->s[1], t2), 0);

	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), 0);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, st0.seg[VMU_SEG_TEXT].used);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries);
	assert_int_equal(st.committed, st0.committed);
	assert_int_equal(st.text_cached, 0);
	assert_false(text_present(f->s[0], fp));
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), -ENOENT);
	fp[0] ^= 1;
	assert_int_equal(vmu_text_evict(f->v, fp, "alpha"), -ENOENT);
	check_invariants(f->v);
}

/* A tenant's text counts against its quota with its data; at the quota,
 * its own unheld (cached) text is evicted first, so its cache never locks
 * it out, and held text is not; served weights (the shared scope) count
 * against no one. */
static void test_text_quota(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_session *b = f->s[2]; /* beta's */
	uint8_t *buf = pattern_buf(80, 2 * g), *one = pattern_buf(82, g);
	uint8_t fp2[VMU_FP_LEN];
	struct vmu_text_upload *up;
	struct vmu_text *t, *sh, *t2;
	struct vmu_usage u;
	uint64_t h;
	bool created;

	assert_int_equal(vmu_tenant_set_quota(f->v, "beta", 5 * g), 0);
	t = text_new(b, 81, 3 * g, true);
	assert_int_equal(vmu_tenant_usage(f->v, "beta", &u), 0);
	assert_int_equal(u.text_bytes, 3 * g);
	assert_int_equal(u.data_bytes, 0);
	/* 3 of 5 held: 3 more of data do not fit */
	assert_int_equal(vmu_region_create(b, 3 * g, &h), 0);
	assert_int_equal(vmu_region_resize(b, h, 3 * g, NULL), -EDQUOT);
	/* 2 more of text do, and stay cached once put */
	assert_int_equal(vmu_text_insert(b, buf, 2 * g, &t2, &created), 0);
	memcpy(fp2, vmu_text_fp(t2), VMU_FP_LEN);
	assert_int_equal(vmu_text_put(b, t2), 0);
	assert_int_equal(vmu_tenant_usage(f->v, "beta", &u), 0);
	assert_int_equal(u.text_bytes, 5 * g);
	/* full: data evicts the tenant's cached text to fit */
	assert_int_equal(vmu_region_resize(b, h, 2 * g, NULL), 0);
	assert_false(text_present(b, fp2));
	assert_int_equal(vmu_tenant_usage(f->v, "beta", &u), 0);
	assert_int_equal(u.text_bytes, 3 * g);
	assert_int_equal(u.data_bytes, 2 * g);
	/* full of held text and data: nothing more of either */
	assert_int_equal(vmu_text_insert(b, one, g, &t2, &created), -EDQUOT);
	assert_int_equal(vmu_region_resize(b, h, 3 * g, NULL), -EDQUOT);
	/* served weights do not count */
	assert_int_equal(vmu_text_begin_shared(b, 2 * g, &up), 0);
	assert_int_equal(vmu_text_write(up, buf, 2 * g), 0);
	assert_int_equal(vmu_text_commit(up, fp2, &sh, &created), 0);
	assert_int_equal(vmu_tenant_usage(f->v, "beta", &u), 0);
	assert_int_equal(u.text_bytes, 3 * g);
	assert_int_equal(vmu_text_put(b, sh), 0);
	assert_int_equal(vmu_region_destroy(b, h), 0);
	assert_int_equal(vmu_text_put(b, t), 0);
	assert_int_equal(vmu_tenant_set_quota(f->v, "beta", 0), 0);
	check_invariants(f->v);
	free(buf);
	free(one);
}

/* Scopes: the same bytes from two tenants are two entries, each found by
 * its own tenant only; the shared scope (served models) is found only
 * through the shared calls, and its entry is none of the tenants'. */
static void test_text_scopes(void **state)
{
	struct fix *f = *state;
	const uint64_t size = 2 * f->g + 3;
	uint8_t *buf = pattern_buf(70, size);
	struct vmu_text *a, *b, *sh, *t;
	struct vmu_text_upload *up;
	struct vmu_stats st0 = get_stats(f->v);
	bool created;

	a = text_new(f->s[0], 70, size, true); /* alpha's */
	assert_int_equal(vmu_text_insert(f->s[2], buf, size, &b, &created), 0);
	assert_true(created); /* beta's own: not deduplicated */
	assert_ptr_not_equal(a, b);
	assert_memory_equal(vmu_text_fp(a), vmu_text_fp(b), VMU_FP_LEN);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries + 2);
	assert_int_equal(vmu_text_lookup(f->s[1], vmu_text_fp(a), &t), 0);
	assert_ptr_equal(t, a);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);
	assert_int_equal(vmu_text_lookup(f->s[2], vmu_text_fp(a), &t), 0);
	assert_ptr_equal(t, b);
	assert_int_equal(vmu_text_put(f->s[2], t), 0);
	/* the shared scope has none of them */
	assert_int_equal(vmu_text_lookup_shared(f->s[0], vmu_text_fp(a), &t),
			 -ENOENT);

	/* a served model's bytes: shared, found by any tenant's session
	 * through the shared lookup, by none through its own */
	assert_int_equal(vmu_text_begin_shared(f->s[2], size, &up), 0);
	assert_int_equal(vmu_text_write(up, buf, size), 0);
	assert_int_equal(vmu_text_commit(up, vmu_text_fp(a), &sh, &created), 0);
	assert_true(created);
	assert_ptr_not_equal(sh, a);
	assert_ptr_not_equal(sh, b);
	assert_int_equal(vmu_text_lookup_shared(f->s[0], vmu_text_fp(a), &t),
			 0);
	assert_ptr_equal(t, sh);
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	assert_int_equal(vmu_text_put(f->s[2], sh), 0);

	assert_int_equal(vmu_text_put(f->s[0], a), 0);
	assert_int_equal(vmu_text_put(f->s[2], b), 0);
	assert_int_equal(vmu_text_evict(f->v, vmu_text_fp(a), "beta"), 0);
	assert_int_equal(vmu_text_evict(f->v, vmu_text_fp(sh), NULL), 0);
	assert_int_equal(vmu_text_evict(f->v, vmu_text_fp(a), "alpha"), 0);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries);
	check_invariants(f->v);
	free(buf);
}

static void test_text_stream(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, size = 3 * g + 77;
	const uint64_t pieces[] = { 1, 1000, g, size - 1 - 1000 - g };
	uint8_t *buf = pattern_buf(70, size);
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text_upload *u = NULL;
	struct vmu_text *t = NULL;
	struct vmu_stats st0, st1;
	uint64_t off = 0;
	bool created = false;

	vmu_fingerprint(buf, size, fp);
	st0 = get_stats(f->v);
	assert_int_equal(vmu_text_begin(f->s[0], size, &u), 0);
	assert_non_null(u);
	st1 = get_stats(f->v);
	assert_in_range(st1.committed - st0.committed, size,
			vmu_round(f->v, size));
	for (size_t i = 0; i < ARRAY_SIZE(pieces); i++) {
		assert_int_equal(vmu_text_write(u, buf + off, pieces[i]), 0);
		off += pieces[i];
	}
	assert_int_equal(off, size);
	assert_int_equal(vmu_text_commit(u, fp, &t, &created), 0);
	assert_non_null(t);
	assert_true(created);
	assert_int_equal(vmu_text_size(t), size);
	assert_memory_equal(vmu_text_fp(t), fp, VMU_FP_LEN);
	assert_memory_equal(dev_ptr(vmu_text_addr(t)), buf, size);
	assert_int_equal(get_stats(f->v).committed, st1.committed);
	assert_int_equal(get_usage(f->s[0]).text_refs, 1);
	assert_true(text_present(f->s[1], fp));

	/* an upload of bytes that are there already gives the entry back */
	u = NULL;
	assert_int_equal(vmu_text_begin(f->s[1], size, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, size), 0);
	{
		struct vmu_text *t2 = NULL;

		created = true;
		assert_int_equal(vmu_text_commit(u, NULL, &t2, &created), 0);
		assert_ptr_equal(t2, t);
		assert_false(created);
		assert_int_equal(get_stats(f->v).committed, st1.committed);
		assert_int_equal(vmu_text_put(f->s[1], t2), 0);
	}
	assert_int_equal(vmu_text_put(f->s[0], t), 0);
	check_invariants(f->v);
	free(buf);
}

static void test_text_stream_bad_fp(void **state)
{
	struct fix *f = *state;
	const uint64_t size = 2 * f->g + 3;
	uint8_t *buf = pattern_buf(71, size);
	uint8_t fp[VMU_FP_LEN], wrong[VMU_FP_LEN];
	struct vmu_text_upload *u = NULL;
	struct vmu_text *t = NULL;
	struct vmu_stats st0, st;
	bool created = false;

	vmu_fingerprint(buf, size, fp);
	memcpy(wrong, fp, VMU_FP_LEN);
	wrong[VMU_FP_LEN - 1] ^= 0x80;
	st0 = get_stats(f->v);
	assert_int_equal(vmu_text_begin(f->s[0], size, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, size / 2), 0);
	assert_int_equal(vmu_text_write(u, buf + size / 2, size - size / 2), 0);
	assert_int_equal(vmu_text_commit(u, wrong, &t, &created), -EBADMSG);

	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed);
	assert_int_equal(st.seg[VMU_SEG_TEXT].used, st0.seg[VMU_SEG_TEXT].used);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries);
	assert_false(text_present(f->s[1], fp));
	assert_false(text_present(f->s[1], wrong));
	assert_int_equal(get_usage(f->s[0]).text_refs, 0);
	check_invariants(f->v);
	free(buf);
}

static void test_text_stream_overflow_and_abort(void **state)
{
	struct fix *f = *state;
	uint8_t *buf = pattern_buf(72, 2 * f->g);
	struct vmu_text_upload *u = NULL;
	struct vmu_stats st0, st;

	st0 = get_stats(f->v);
	assert_int_equal(vmu_text_begin(f->s[0], 100, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, 60), 0);
	/* errno not documented */
	assert_true(vmu_text_write(u, buf + 60, 41) < 0);
	assert_true(vmu_text_write(u, buf + 60, 2 * f->g) < 0);
	vmu_text_abort(u);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries);

	/* abort of a bigger, half-written upload gives its memory back */
	u = NULL;
	assert_int_equal(vmu_text_begin(f->s[0], 2 * f->g, &u), 0);
	assert_true(get_stats(f->v).committed > st0.committed);
	assert_int_equal(vmu_text_write(u, buf, f->g), 0);
	vmu_text_abort(u);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed);
	check_invariants(f->v);
	free(buf);
}

/* Committing fewer bytes than begin() announced must not publish an entry
 * (vmu.h does not say so in words; errno not documented). */
static void test_text_stream_incomplete(void **state)
{
	struct fix *f = *state;
	uint8_t *buf = pattern_buf(73, 2 * f->g);
	struct vmu_text_upload *u = NULL;
	struct vmu_text *t = NULL;
	struct vmu_stats st0, st;
	bool created = false;
	int rc;

	st0 = get_stats(f->v);
	assert_int_equal(vmu_text_begin(f->s[0], 2 * f->g, &u), 0);
	assert_int_equal(vmu_text_write(u, buf, f->g), 0);
	rc = vmu_text_commit(u, NULL, &t, &created);
	if (rc == 0)
		vmu_text_put(f->s[0], t);
	assert_true(rc < 0);
	st = get_stats(f->v);
	assert_int_equal(st.committed, st0.committed);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries,
			 st0.seg[VMU_SEG_TEXT].entries);
	free(buf);
}

/* ---------------------------------------------------------------------- */
/* 6. LRU order */

static void test_text_lru_order(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_text *a, *b, *c, *filler, *t = NULL;
	uint8_t fa[VMU_FP_LEN], fb[VMU_FP_LEN], fc[VMU_FP_LEN];
	struct vmu_resv r = { 0 };
	struct vmu_stats st0, st;
	char msg[VMU_MSG_LEN];
	uint64_t now_free;

	a = text_new(f->s[0], 80, g, true);
	b = text_new(f->s[0], 81, g, true);
	c = text_new(f->s[0], 82, g, true);
	memcpy(fa, vmu_text_fp(a), VMU_FP_LEN);
	memcpy(fb, vmu_text_fp(b), VMU_FP_LEN);
	memcpy(fc, vmu_text_fp(c), VMU_FP_LEN);
	assert_int_equal(vmu_text_put(f->s[0], a), 0);
	assert_int_equal(vmu_text_put(f->s[0], b), 0);
	assert_int_equal(vmu_text_put(f->s[0], c), 0);
	/* touch A: the order, oldest first, is now B, C, A */
	assert_int_equal(vmu_text_lookup(f->s[1], fa, &t), 0);
	assert_int_equal(vmu_text_put(f->s[1], t), 0);

	/* fill the rest with a held entry: nothing else to reclaim */
	filler = text_new(f->s[2], 83, 61 * g, true);
	st0 = get_stats(f->v);
	assert_int_equal(st0.free, 0);

	now_free = vmu_reclaim(f->v, g);
	st = get_stats(f->v);
	assert_int_equal(now_free, st.free);
	assert_int_equal(st.free, g);
	assert_int_equal(st.text_evictions, st0.text_evictions + 1);
	assert_false(text_present(f->s[0], fb));
	/* look C up before A so that A stays the most recent */
	assert_true(text_present(f->s[0], fc));
	assert_true(text_present(f->s[0], fa));

	/* admission takes the next oldest, C, and leaves A */
	assert_int_equal(vmu_admit(f->v, 2 * g, &r, msg, sizeof(msg)), 0);
	assert_int_equal(r.bytes, 2 * g);
	st = get_stats(f->v);
	assert_int_equal(st.text_evictions, st0.text_evictions + 2);
	assert_int_equal(st.free, 0);
	vmu_resv_release(&r);
	assert_false(text_present(f->s[0], fc));
	assert_true(text_present(f->s[0], fa));
	assert_int_equal(vmu_text_put(f->s[2], filler), 0);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* 5 */
		cmocka_unit_test(test_fingerprint_vectors),
		T(test_text_insert_dedup, setup_64m),
		T(test_text_refs_and_evict, setup_64m),
		T(test_text_scopes, setup_64m),
		T(test_text_quota, setup_64m),
		T(test_text_stream, setup_64m),
		T(test_text_stream_bad_fp, setup_64m),
		T(test_text_stream_overflow_and_abort, setup_64m),
		T(test_text_stream_incomplete, setup_64m),
		/* 6 */
		T(test_text_lru_order, setup_4m),
	};

	/* a deadlock fails the run instead of hanging it */
	alarm(600);
	return cmocka_run_group_tests_name("vmu_text", tests, NULL, NULL);
}
