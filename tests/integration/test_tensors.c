// SPDX-License-Identifier: MIT
/*
 * Tensors: create, read, write and release; large reads and many at
 * once, memory prepared off the I/O thread, a peer that half-closes, bad
 * and too big tensors.
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
#include <sys/socket.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* 10a. Create with bytes, read ranges back, write, release; stale,
 * foreign and forged handles; ranges outside the tensor. */
static void test_tensors(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(64, 32), small = F32(10);
	const uint64_t bytes = desc_bytes(&d);
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "tensors"),
		 sid2 = open_session(fd2, "other");
	uint8_t *data = pattern_buf(1, bytes), *got = xmalloc(bytes);
	uint8_t *upd = pattern_buf(2, 1000), zero[600] = { 0 };
	uint64_t t, t2, part, other;
	struct djinn_admin_vmu v;

	t = create_data(fd, sid, &d, data, bytes);
	v = vmu_now(fx);
	assert_true(v.seg[1].used >= bytes);
	assert_int_equal(v.seg[1].entries, fx->base.seg[1].entries + 1);
	assert_int_equal(session_entry(fx, sid).tensors, 1);

	/* read back: all, a range, one byte, nothing at the end */
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 1, 0, bytes, "whole tensor");
	tensor_read(fd, sid, t, 1234, 3000, got);
	expect_pattern(got, 1, 1234, 3000, "range");
	tensor_read(fd, sid, t, bytes - 1, 1, got);
	expect_pattern(got, 1, bytes - 1, 1, "last byte");
	tensor_read(fd, sid, t, bytes, 0, got);

	/* write a range, read around it */
	tensor_write(fd, sid, t, 4000, upd, 1000);
	tensor_read(fd, sid, t, 3900, 1200, got);
	expect_pattern(got, 1, 3900, 100, "before the write");
	expect_pattern(got + 100, 2, 0, 1000, "the write");
	expect_pattern(got + 1100, 1, 5000, 100, "after the write");

	/* data shorter than the tensor: the rest reads as zero */
	part = create_data(fd, sid, &d, data, 1000);
	tensor_read(fd, sid, part, 0, 1600, got);
	expect_pattern(got, 1, 0, 1000, "given bytes");
	assert_memory_equal(got + 1000, zero, 600);
	tensor_read(fd, sid, part, bytes - 600, 600, got);
	assert_memory_equal(got, zero, 600);

	/* ranges outside the tensor: -EINVAL */
	{
		const uint64_t bad[][2] = {
			{ 0, bytes + 1 },  { bytes, 1 },      { bytes + 1, 0 },
			{ 8, UINT64_MAX }, { UINT64_MAX, 2 }, { bytes - 4, 8 },
		};

		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			struct djinn_tensor_io io = { .handle = t,
						      .offset = bad[i][0],
						      .len = bad[i][1] };

			call_err(fd, DJINN_MSG_TENSOR_READ, sid, &io,
				 sizeof(io), -EINVAL, "range");
		}
		write_at(__LINE__, fd, sid, t, bytes - 10, upd, 20, -EINVAL,
			 "range");
		write_at(__LINE__, fd, sid, t, UINT64_MAX - 5, upd, 20, -EINVAL,
			 "range");
	}
	/* a write whose len is not what follows */
	{
		size_t plen;
		uint8_t *p = write_payload(t, 0, upd, 100, &plen);
		struct djinn_tensor_io io = { .handle = t, .len = 99 };

		memcpy(p, &io, sizeof(io));
		call_err(fd, DJINN_MSG_TENSOR_WRITE, sid, p, plen, -EINVAL,
			 NULL);
		free(p);
	}
	/* the tensor is unchanged by all that */
	tensor_read(fd, sid, t, 0, 4000, got);
	expect_pattern(got, 1, 0, 4000, "after bad requests");

	/* another session's handle: -ENOENT from that session */
	other = create_data(fd2, sid2, &small, data, 40);
	{
		struct djinn_tensor_io io = { .handle = other, .len = 4 };

		call_err(fd, DJINN_MSG_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
		io.handle = t;
		call_err(fd2, DJINN_MSG_TENSOR_READ, sid2, &io, sizeof(io),
			 -ENOENT, NULL);
		write_at(__LINE__, fd2, sid2, t, 0, upd, 4, -ENOENT, NULL);
		call_err(fd2, DJINN_MSG_TENSOR_RELEASE, sid2, &t, 8, -ENOENT,
			 NULL);
	}
	/* forged handles */
	{
		uint64_t x = 0x123456789abcdefull;

		for (int i = 0; i < 64; i++) {
			struct djinn_tensor_io io = { .len = 4 };

			x = x * 6364136223846793005ull + 1442695040888963407ull;
			io.handle = i < 4 ? (uint64_t[]){ 0, 1, UINT64_MAX,
							  t ^ 1 }[i] :
					    x;
			if (io.handle == t || io.handle == part)
				continue;
			call_err(fd, DJINN_MSG_TENSOR_READ, sid, &io,
				 sizeof(io), -ENOENT, NULL);
		}
		call_err(fd, DJINN_MSG_TENSOR_RELEASE, sid, &x, 8, -ENOENT,
			 NULL);
	}

	/* release; then the handle is stale */
	tensor_release(fd, sid, t);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd, DJINN_MSG_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
		write_at(__LINE__, fd, sid, t, 0, upd, 4, -ENOENT, NULL);
		call_err(fd, DJINN_MSG_TENSOR_RELEASE, sid, &t, 8, -ENOENT,
			 NULL);
	}
	/* a new tensor (maybe in the same slot) does not answer to it */
	t2 = create_data(fd, sid, &small, data, 40);
	assert_int_not_equal(t2, t);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd, DJINN_MSG_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
	}
	tensor_read(fd, sid, t2, 0, 40, got);
	expect_pattern(got, 1, 0, 40, "new tensor");

	tensor_release(fd, sid, t2);
	tensor_release(fd, sid, part);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	/* closing a session frees what it still holds */
	close_session(fd2, sid2);
	close_session(fd, sid);
	free(data);
	free(got);
	free(upd);
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* 10b. Reads of 64 KiB and more (where TCP connections get zero-copy
 * sends, which AF_UNIX refuses) arrive whole, and the connection stays. */
static void test_large_read(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4 * MiB);
	const uint64_t lens[] = { 64 * KiB - 1, 64 * KiB, MiB, 4 * MiB };
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "large");
	uint8_t *data = pattern_buf(9, 4 * MiB);
	uint64_t t = create_data(fd, sid, &d, data, 4 * MiB);

	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		struct djinn_tensor_io io = { .handle = t, .len = lens[i] };
		struct dj_resp r;
		int ret = dj_call(fd, DJINN_MSG_TENSOR_READ, sid, &io,
				  sizeof(io), &r);

		assert_int_equal(ret, 1);
		if (r.error)
			fail_msg("read of %llu: error %d \"%s\"",
				 (unsigned long long)io.len, r.error, r.msg);
		assert_int_equal(r.len, io.len);
		expect_pattern(r.data, 9, 0, io.len, "large read");
		dj_resp_free(&r);
		hello(fd);
	}
	free(data);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* Append a frame to @buf at *@n. */
static void h_put(uint8_t *buf, size_t *n, uint16_t op, uint64_t id,
		  uint64_t sid, const void *payload, size_t len)
{
	struct djinn_hdr h = dj_hdr(op, id, sid, len);

	memcpy(buf + *n, &h, sizeof(h));
	*n += sizeof(h);
	if (len)
		memcpy(buf + *n, payload, len);
	*n += len;
}

/*
 * 10f. Many reads at once: several connections each send a run of
 * TENSOR_READs of many sizes (a byte to past the largest staging buffer)
 * in one write and read the answers only after a pause, so replies wait
 * unsent while later reads are prepared. Under --cpu-device-only each
 * is staged in a buffer of the memory executor's pool: one still being
 * sent must not be handed to another read. Every answer has its own
 * range's bytes.
 */
static void test_many_reads(void **state)
{
	struct fx *fx = *state;
	enum { CONNS = 4, READS = 21 };
	const uint64_t bytes = 8 * MiB;
	/* the last is over the largest pooled buffer */
	const uint64_t lens[] = { 1,	  4 * KiB, 64 * KiB - 1,  64 * KiB + 1,
				  300000, MiB,	   4 * MiB + 4097 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 8 * MiB);
	int fd[CONNS];
	uint64_t sid[CONNS], t[CONNS];
	uint64_t off[CONNS][READS], len[CONNS][READS];

	for (int c = 0; c < CONNS; c++) {
		uint8_t *data = pattern_buf(20 + (uint64_t)c, bytes);
		uint8_t frames[READS * (sizeof(struct djinn_hdr) +
					sizeof(struct djinn_tensor_io))];
		size_t n = 0;

		fd[c] = xconnect(fx->d.sock);
		sid[c] = open_session(fd[c], "reads");
		t[c] = create_data(fd[c], sid[c], &d, data, bytes);
		free(data);
		for (int i = 0; i < READS; i++) {
			struct djinn_tensor_io io = { .handle = t[c] };

			len[c][i] = lens[(i + c) % ARRAY_SIZE(lens)];
			off[c][i] = ((uint64_t)i * 1234577 + (uint64_t)c * 77) %
				    (bytes - len[c][i] + 1);
			io.offset = off[c][i];
			io.len = len[c][i];
			h_put(frames, &n, DJINN_MSG_TENSOR_READ,
			      1000 + (uint64_t)i, sid[c], &io, sizeof(io));
		}
		assert_int_equal(dj_write(fd[c], frames, n, 5000), 0);
	}
	/* the answers pile up unread meanwhile */
	usleep(200 * 1000);
	for (int c = 0; c < CONNS; c++) {
		bool seen[READS] = { false };

		/* answers may come in any order (protocol.rst) */
		for (int k = 0; k < READS; k++) {
			struct dj_resp r;
			char what[64];
			int i;

			assert_int_equal(dj_recv(fd[c], &r, DJ_TIMEOUT_MS), 1);
			i = (int)(r.hdr.request_id - 1000);
			if (r.hdr.request_id < 1000 || i >= READS || seen[i])
				fail_msg("conn %d: an answer to request %llu",
					 c,
					 (unsigned long long)r.hdr.request_id);
			seen[i] = true;
			if (r.error)
				fail_msg("conn %d read %d: error %d \"%s\"", c,
					 i, r.error, r.msg);
			assert_int_equal(r.len, len[c][i]);
			snprintf(what, sizeof(what),
				 "conn %d read %d (%llu bytes at %llu)", c, i,
				 (unsigned long long)len[c][i],
				 (unsigned long long)off[c][i]);
			expect_pattern(r.data, 20 + (uint64_t)c, off[c][i],
				       len[c][i], what);
			dj_resp_free(&r);
		}
	}
	for (int c = 0; c < CONNS; c++) {
		close_session(fd[c], sid[c]);
		close(fd[c]);
	}
	check_health(fx, 0);
}

/* 10d. Memory for transfers is prepared off the I/O thread: requests
 * pipelined behind a TENSOR_CREATE wait their turn and are answered in
 * order; a tensor swapped out under pressure is read and written through
 * the same path, with its bytes intact. */
static void test_mem_prepared(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc big = DESC(DJINN_DTYPE_U8, 24 * MiB);
	struct djinn_tensor_desc small = F32(256);
	int a = xconnect(fx->d.sock), b = xconnect(fx->d.sock);
	uint64_t sa = open_session(a, "swapped"), sb = open_session(b, "hog");
	uint8_t *data = pattern_buf(11, 24 * MiB), *back = xmalloc(4 * MiB);
	struct djinn_tensor_io io = { .len = 16 };
	struct djinn_admin_vmu v;
	struct dj_resp r;
	uint64_t ta = 0, tb, tb2, w;
	size_t plen, n = 0;
	uint8_t *p, *frames;

	/* CREATE (all its data), HELLO, CREATE, READ of the first, in one
	 * write. */
	p = create_payload(&big, DJINN_SEG_DATA, NULL, data, 24 * MiB, &plen);
	frames = xmalloc(plen + 4096);
	h_put(frames, &n, DJINN_MSG_TENSOR_CREATE, 1, sa, p, plen);
	free(p);
	h_put(frames, &n, DJINN_MSG_HELLO, 2, 0, NULL, 0);
	p = create_payload(&small, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h_put(frames, &n, DJINN_MSG_TENSOR_CREATE, 3, sa, p, plen);
	free(p);
	assert_int_equal(dj_write(a, frames, n, 5000), 0);
	free(frames);
	for (uint64_t id = 1; id <= 3; id++) {
		assert_int_equal(dj_recv(a, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id);
		if (r.error)
			fail_msg("request %llu: error %d \"%s\"",
				 (unsigned long long)id, r.error, r.msg);
		if (id == 1)
			memcpy(&ta, r.data, sizeof(ta));
		dj_resp_free(&r);
	}
	tensor_read(a, sa, ta, 20 * MiB, 4 * MiB, back);
	expect_pattern(back, 11, 20 * MiB, 4 * MiB, "pipelined create");

	/* Another session's two 24 MiB tensors do not fit beside it in 64
	 * MiB: the first session's is swapped out to make room. */
	tb = create_data(b, sb, &big, NULL, 0);
	tb2 = create_data(b, sb, &big, NULL, 0);
	v = vmu_now(fx);
	if (!v.swapped_now)
		fail_msg("nothing was swapped out (free %llu)",
			 (unsigned long long)v.free);
	tensor_release(b, sb, tb);
	/* Back through the memory executor: the bytes are the same. */
	io.handle = ta;
	io.offset = 24 * MiB - 16;
	call_ok(a, DJINN_MSG_TENSOR_READ, sa, &io, sizeof(io), &r, 16);
	expect_pattern(r.data, 11, 24 * MiB - 16, 16, "read after swap");
	dj_resp_free(&r);
	assert_true(vmu_now(fx).swap_ins > v.swap_ins);
	/* And a write to it while swapped out again. */
	tensor_release(b, sb, tb2);
	tb = create_data(b, sb, &big, NULL, 0);
	tb2 = create_data(b, sb, &big, NULL, 0);
	v = vmu_now(fx);
	assert_true(v.swapped_now > 0);
	tensor_write(a, sa, ta, 0, data + MiB, MiB);
	assert_true(vmu_now(fx).swap_ins > v.swap_ins);
	tensor_read(a, sa, ta, 0, MiB, back);
	expect_pattern(back, 11, MiB, MiB, "write after swap");
	w = 0;
	tensor_read(a, sa, ta, MiB, 8, &w);
	expect_pattern((uint8_t *)&w, 11, MiB, 8, "untouched after swap");

	free(data);
	free(back);
	close_session(a, sa);
	close_session(b, sb);
	close(a);
	close(b);
	check_health(fx, 0);
}

/* 10e. A peer that shuts down its side behind a paused upload: what it
 * sent before is answered, then the connection closes. */
static void test_half_close(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4 * MiB);
	int fd = xconnect(fx->d.sock);
	struct djinn_session_resp sr;
	uint64_t sid = open_at(__LINE__, fd, "half-close", 4, 0, &sr);
	uint8_t *data = pattern_buf(12, 4 * MiB), *frames, *p;
	size_t plen, n = 0;
	struct dj_resp r;

	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, 4 * MiB, &plen);
	frames = xmalloc(plen + 256);
	h_put(frames, &n, DJINN_MSG_TENSOR_CREATE, 10, sid, p, plen);
	h_put(frames, &n, DJINN_MSG_HELLO, 11, 0, NULL, 0);
	free(p);
	assert_int_equal(dj_write(fd, frames, n, 5000), 0);
	shutdown(fd, SHUT_WR);
	for (uint64_t id = 10; id <= 11; id++) {
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id);
		if (r.error)
			fail_msg("request %llu: error %d \"%s\"",
				 (unsigned long long)id, r.error, r.msg);
		dj_resp_free(&r);
	}
	expect_eof(fd);
	close(fd);
	free(frames);
	free(data);
	/* The session outlives its connection; close it from another. */
	fd = xconnect(fx->d.sock);
	attach(fd, sid, sr.token);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 10c. Bad descs and create requests: -EINVAL (-E2BIG past the limits);
 * a tensor bigger than the device: -ENOMEM with the need. */
static void test_tensor_bad(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "bad");
	struct djinn_tensor_desc d;
	uint8_t data[64] = { 0 }, fp[DJINN_FP_LEN] = { 1 };
	struct dj_resp r;

	d = F32(4);
	d.dtype = 0;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d.dtype = DJINN_DTYPE_U8 + 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4);
	d.ndim = DJINN_MAX_DIMS + 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4, 4);
	d.dims[2] = 1; /* past ndim */
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4);
	d.__reserved[5] = 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* an empty tensor: at least one element */
	d = F32(0);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4, 0, 4);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* unknown segment, unknown flags */
	d = F32(4);
	create_try_at(__LINE__, fd, sid, &d, 2, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, "segment");
	dj_resp_free(&r);
	{
		struct djinn_tensor_create c = { .desc = d, .flags = 1 };

		call_err(fd, DJINN_MSG_TENSOR_CREATE, sid, &c, sizeof(c),
			 -EINVAL, "flags");
	}
	/* more data than the tensor holds */
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, data, 17, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* a fingerprint on data */
	create_try_at(__LINE__, fd, sid, &d, 0, fp, data, 16, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* bytes past 2^63: a limit */
	d = F32(1ull << 40, 1ull << 40);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -E2BIG, NULL);
	dj_resp_free(&r);
	/* the same requests on a session that does not exist: no crash */
	create_try_at(__LINE__, fd, sid + 99, &d, 0, NULL, NULL, 0, &r);
	assert_true(r.error == -ENOENT || r.error == -E2BIG);
	dj_resp_free(&r);

	assert_int_equal(session_entry(fx, sid).tensors, 0);
	check_health_at(__LINE__, fx, 1, &fx->base);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* Session @sid's jobs queued or running, memory jobs included
 * (ADMIN_SCHED), or fail. */
static uint32_t inflight(struct fx *fx, uint64_t sid)
{
	const struct djinn_admin_sched_session *e;
	struct dj_resp r;
	uint32_t n[2], got = UINT32_MAX;

	call_ok(fx->adm, DJINN_MSG_ADMIN_SCHED, 0, NULL, 0, &r, -1);
	assert_true(r.len >= sizeof(n));
	memcpy(n, r.data, sizeof(n));
	assert_int_equal(
		r.len, sizeof(n) + n[0] * sizeof(struct djinn_admin_sched_dev) +
			       n[1] * sizeof(*e));
	e = (const void *)(r.data + sizeof(n) +
			   n[0] * sizeof(struct djinn_admin_sched_dev));
	for (uint32_t i = 0; i < n[1]; i++)
		if (e[i].id == sid)
			got = e[i].inflight;
	dj_resp_free(&r);
	if (got == UINT32_MAX)
		fail_msg("session %llu is not in ADMIN_SCHED",
			 (unsigned long long)sid);
	return got;
}

/* 10d. A tensor bigger than the device: -ENOMEM, the message giving the
 * need; nothing committed. Also with its bytes following (skipped). */
static void test_tensor_too_big(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "huge"), fd2_sid;
	struct djinn_tensor_desc d = F32(256 * MiB); /* 1 GiB */
	uint8_t fd2_token[16];
	struct dj_resp r;

	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_DATA, NULL, NULL, 0, &r);
	expect_error(&r, -ENOMEM, "need");
	dj_resp_free(&r);
	check_health_at(__LINE__, fx, 1, &fx->base);

	/* Admission refused: 48 MiB pinned by an upload in progress on
	 * another connection, 32 MiB asked. */
	{
		struct djinn_tensor_desc a = F32(12 * MiB), b = F32(8 * MiB);
		int up = xconnect(fx->d.sock);
		struct djinn_session_resp s2;
		uint64_t sid2 = open_at(__LINE__, up, "uploader", 4, 0, &s2);
		struct djinn_hdr h;
		size_t plen;
		uint8_t *p = create_payload(&a, DJINN_SEG_DATA, NULL, NULL, 0,
					    &plen);

		h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 1, sid2,
			   plen + desc_bytes(&a));
		assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
		free(p);
		wait_charged(fx, sid2, desc_bytes(&a), 5000);
		/* Charged is not pinned yet: the memory job charges the
		 * region as it maps it, and pins it for the bytes after
		 * that; meanwhile the region is idle, and an admission may
		 * swap it out to make room. Pinned once the job is done. */
		if (!wait_until(!inflight(fx, sid2), WAIT_MS))
			fail_msg("the upload's memory job still runs after "
				 "%d ms",
				 WAIT_MS);
		assert_int_equal(session_entry(fx, sid2).data_bytes,
				 desc_bytes(&a));
		create_try_at(__LINE__, fd, sid, &b, DJINN_SEG_DATA, NULL, NULL,
			      0, &r);
		expect_error(&r, -ENOMEM, "need");
		dj_resp_free(&r);
		/* the upload is abandoned: the memory comes back */
		close(up);
		wait_charged(fx, sid2, 0, 5000);
		fd2_sid = sid2;
		memcpy(fd2_token, s2.token, 16);
		/* and now it fits */
		tensor_release(fd, sid, create_data(fd, sid, &b, NULL, 0));
	}
	/* A text upload bigger than the device, its bytes following. */
	{
		struct djinn_tensor_desc t = DESC(DJINN_DTYPE_U8, 65 * MiB);
		uint8_t fp[DJINN_FP_LEN] = { 7 };
		size_t plen;
		uint8_t *p =
			create_payload(&t, DJINN_SEG_TEXT, fp, NULL, 0, &plen);
		struct djinn_hdr h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 5, sid,
					    plen + 65 * MiB);

		assert_int_equal(dj_send_raw(fd, &h, p, plen), 0);
		free(p);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, 5);
		expect_error(&r, -ENOMEM, "need");
		dj_resp_free(&r);
		/* the daemon closes rather than read 65 MiB: fine */
	}
	close(fd);
	fd = xconnect(fx->d.sock);
	wait_charged(fx, sid, 0, 5000);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	attach(fd, fd2_sid, fd2_token);
	close_session(fd, fd2_sid);
	assert_int_equal(dj_call(fd, DJINN_MSG_HEARTBEAT, sid, NULL, 0, &r), 1);
	expect_error(&r, -EPERM, NULL);
	dj_resp_free(&r);
	{
		struct djinn_admin_kill k = { sid };

		call_void(fx->adm, DJINN_MSG_ADMIN_KILL, 0, &k, sizeof(k));
	}
	close(fd);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tensors, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_large_read, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_many_reads, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_mem_prepared, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_half_close, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tensor_bad, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tensor_too_big, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd tensors", tests, NULL, NULL);
}
