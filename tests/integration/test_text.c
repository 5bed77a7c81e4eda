// SPDX-License-Identifier: MIT
/*
 * The text segment: lookup, upload with the right fingerprint, dedup
 * across sessions, wrong fingerprints, read-only.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* 11. Lookup, upload with the right fingerprint, dedup across sessions,
 * wrong fingerprints, read-only. */
static void test_text(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(128, 64);
	const uint64_t bytes = desc_bytes(&d);
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "text-a"),
		 sid2 = open_session(fd2, "text-b");
	uint8_t *data = pattern_buf(11, bytes), *got = xmalloc(bytes);
	uint8_t fp[DJINN_FP_LEN], wrong[DJINN_FP_LEN];
	struct djinn_text_lookup l = { .desc = d };
	struct djinn_tensor_resp tr;
	uint64_t t, t2, t3;
	uint32_t flags;
	struct dj_resp r;

	sha256(data, bytes, fp);
	memcpy(l.fp, fp, sizeof(fp));

	/* Not there yet */
	call_err(fd, DJINN_MSG_TEXT_LOOKUP, sid, &l, sizeof(l), -ENOENT, NULL);

	/* Wrong fingerprint: -EBADMSG, nothing kept */
	memcpy(wrong, fp, sizeof(fp));
	wrong[0] ^= 0x80;
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, wrong, data, bytes,
		      &r);
	expect_error(&r, -EBADMSG, NULL);
	dj_resp_free(&r);
	/* bytes one off, the right fingerprint */
	data[bytes / 2] ^= 1;
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data, bytes,
		      &r);
	expect_error(&r, -EBADMSG, NULL);
	dj_resp_free(&r);
	data[bytes / 2] ^= 1;
	call_err(fd, DJINN_MSG_TEXT_LOOKUP, sid, &l, sizeof(l), -ENOENT, NULL);
	call_err(fd, DJINN_MSG_TEXT_LOOKUP, sid,
		 &(struct djinn_text_lookup){ .desc = d, .fp = { 0xba } },
		 sizeof(l), -ENOENT, NULL);
	assert_int_equal(vmu_now(fx).seg[0].used, fx->base.seg[0].used);
	/* text comes whole */
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data,
		      bytes - 4, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);

	/* The right one: stored, not a dedup */
	t = create_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data, bytes,
		      &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	assert_true(vmu_now(fx).seg[0].used >= bytes);
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text");

	/* A second session finds it, viewed as another shape of the same
	 * size, and reads the same bytes. */
	l.desc = DESC(DJINN_DTYPE_U8, bytes);
	call_ok(fd2, DJINN_MSG_TEXT_LOOKUP, sid2, &l, sizeof(l), &r,
		sizeof(tr));
	memcpy(&tr, r.data, sizeof(tr));
	dj_resp_free(&r);
	assert_true(tr.flags & DJINN_TENSOR_DEDUP);
	assert_memory_equal(&tr.desc, &l.desc, sizeof(l.desc));
	t2 = tr.handle;
	memset(got, 0, bytes);
	tensor_read(fd2, sid2, t2, 100, bytes - 100, got);
	expect_pattern(got, 11, 100, bytes - 100, "text from session 2");
	/* viewed as a different size: refused */
	l.desc = F32(bytes);
	call_err(fd2, DJINN_MSG_TEXT_LOOKUP, sid2, &l, sizeof(l), -EINVAL,
		 NULL);
	/* uploading it again: a dedup, no new bytes committed */
	{
		uint64_t used = vmu_now(fx).seg[0].used;

		t3 = create_at(__LINE__, fd2, sid2, &d, DJINN_SEG_TEXT, fp,
			       data, bytes, &flags);
		assert_true(flags & DJINN_TENSOR_DEDUP);
		assert_int_equal(vmu_now(fx).seg[0].used, used);
	}
	assert_int_equal(session_entry(fx, sid2).text_refs, 2);

	/* Text is read-only: -EPERM; and not another session's. */
	write_at(__LINE__, fd, sid, t, 0, data, 16, -EPERM, NULL);
	write_at(__LINE__, fd2, sid2, t2, 0, data, 16, -EPERM, NULL);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd2, DJINN_MSG_TENSOR_READ, sid2, &io, sizeof(io),
			 -ENOENT, NULL);
	}
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text after writes");

	/* Two sessions upload the same new text at once, interleaved:
	 * both get it, stored once. */
	{
		struct djinn_tensor_desc d2 = DESC(DJINN_DTYPE_U8, 3 * 65536);
		uint8_t *b = pattern_buf(12, desc_bytes(&d2)),
			fp2[DJINN_FP_LEN];
		uint64_t used = vmu_now(fx).seg[0].used, h[2];
		const int fds[2] = { fd, fd2 };
		const uint64_t sids[2] = { sid, sid2 };
		uint32_t fl[2];
		size_t plen;
		uint8_t *p;

		sha256(b, desc_bytes(&d2), fp2);
		p = create_payload(&d2, DJINN_SEG_TEXT, fp2, NULL, 0, &plen);
		for (int i = 0; i < 2; i++) {
			struct djinn_hdr hh = dj_hdr(DJINN_MSG_TENSOR_CREATE,
						     50 + i, sids[i],
						     plen + desc_bytes(&d2));

			assert_int_equal(dj_send_raw(fds[i], &hh, p, plen), 0);
		}
		for (uint64_t off = 0; off < desc_bytes(&d2); off += 65536)
			for (int i = 0; i < 2; i++)
				assert_int_equal(dj_write(fds[i], b + off,
							  65536, 5000),
						 0);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(dj_recv(fds[i], &r, DJ_TIMEOUT_MS), 1);
			assert_int_equal(r.hdr.request_id, 50 + i);
			if (r.error)
				fail_msg("concurrent text upload %d: %d \"%s\"",
					 i, r.error, r.msg);
			memcpy(&tr, r.data, sizeof(tr));
			dj_resp_free(&r);
			h[i] = tr.handle;
			fl[i] = tr.flags;
		}
		assert_int_equal(vmu_now(fx).seg[0].used,
				 used + granules(fx, desc_bytes(&d2)));
		assert_true(!(fl[0] & DJINN_TENSOR_DEDUP) ||
			    !(fl[1] & DJINN_TENSOR_DEDUP));
		for (int i = 0; i < 2; i++) {
			uint8_t part[4096];

			tensor_read(fds[i], sids[i], h[i], 65536 + 100,
				    sizeof(part), part);
			expect_pattern(part, 12, 65536 + 100, sizeof(part),
				       "text uploaded twice");
			tensor_release(fds[i], sids[i], h[i]);
		}
		free(p);
		free(b);
	}
	/* a lookup with a bad desc */
	l.desc = F32(4);
	l.desc.ndim = 9;
	call_err(fd, DJINN_MSG_TEXT_LOOKUP, sid, &l, sizeof(l), -EINVAL, NULL);

	/* The first session lets go: the second still reads it. */
	tensor_release(fd, sid, t);
	close_session(fd, sid);
	tensor_read(fd2, sid2, t3, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text after the owner left");
	tensor_release(fd2, sid2, t2);
	tensor_release(fd2, sid2, t3);
	assert_int_equal(session_entry(fx, sid2).text_refs, 0);
	close_session(fd2, sid2);
	free(data);
	free(got);
	close(fd);
	close(fd2);
	check_text_cached(fx);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_text, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd text", tests, NULL, NULL);
}
