// SPDX-License-Identifier: MIT
/*
 * djinnd's framing, in raw frames: HELLO, another protocol version, bad
 * magic, oversize and truncated frames, unknown opcodes, reserved header
 * fields, payloads of the wrong size.
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

/* 1. HELLO says what the daemon is. */
static void test_hello(void **state)
{
	struct fx *fx = *state;
	struct djinn_hello_resp h;
	int fd = xconnect(fx->d.sock);
	struct dj_resp r;

	call_ok(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r, sizeof(h));
	memcpy(&h, r.data, sizeof(h));
	dj_resp_free(&r);
	assert_int_equal(h.version, DJINN_PROTO_VERSION);
	assert_string_equal(h.backend, "cpu");
	for (size_t i = strlen("cpu"); i < sizeof(h.backend); i++)
		assert_int_equal(h.backend[i], 0);
	assert_int_equal(h.capacity, DEV_BYTES);
	assert_int_equal(h.max_payload, DJINN_MAX_PAYLOAD);
	assert_true(h.granularity && !(h.granularity & (h.granularity - 1)));
	assert_int_equal(h.capacity % h.granularity, 0);

	/* Many HELLOs on one connection, each answered with its own id. */
	for (uint64_t id = 1; id <= 8; id++)
		assert_int_equal(
			dj_send(fd, DJINN_MSG_HELLO, id << 40, 0, NULL, 0), 0);
	for (uint64_t id = 1; id <= 8; id++) {
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id << 40);
		assert_int_equal(r.hdr.type, DJINN_MSG_HELLO);
		assert_int_equal(r.hdr.flags, DJINN_F_RESPONSE);
		assert_int_equal(r.len, sizeof(h));
		dj_resp_free(&r);
	}
	close(fd);
}

/* 2. Another protocol version: -EPROTONOSUPPORT naming both versions;
 * the connection stays usable (a payload is skipped). */
static void test_version_mismatch(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "v", .priority = 4 };
	int fd = xconnect(fx->d.sock);
	struct djinn_hdr h;
	char want[32];

	h = dj_hdr(DJINN_MSG_HELLO, 7, 0, 0);
	h.version = 4660;
	raw_err(fd, &h, NULL, 0, -EPROTONOSUPPORT, "4660");
	/* ... and the server's own version, as a number in the message */
	h.version = 0;
	raw_err(fd, &h, NULL, 0, -EPROTONOSUPPORT, NULL);
	hello(fd);

	/* With a payload, which must be skipped, not parsed as a frame. */
	h = dj_hdr(DJINN_MSG_SESSION_OPEN, 8, 0, sizeof(o));
	h.version = DJINN_PROTO_VERSION + 1;
	snprintf(want, sizeof(want), "%u", DJINN_PROTO_VERSION + 1);
	raw_err(fd, &h, &o, sizeof(o), -EPROTONOSUPPORT, want);
	hello(fd);
	close_session(fd, open_session(fd, "after-mismatch"));

	/* Both numbers are named: "... 4660 ..., ... 1 ..." */
	{
		struct dj_resp r;

		h = dj_hdr(DJINN_MSG_HELLO, 9, 0, 0);
		h.version = 4660;
		assert_int_equal(dj_send_raw(fd, &h, NULL, 0), 0);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		expect_error(&r, -EPROTONOSUPPORT, "4660");
		snprintf(want, sizeof(want), "%u", DJINN_PROTO_VERSION);
		assert_non_null(strstr(strstr(r.msg, "4660") + 4, want));
		dj_resp_free(&r);
	}
	close(fd);
	check_health(fx, 0);
}

/* 3. Bad magic: -EPROTO, then the connection is closed. */
static void test_bad_magic(void **state)
{
	struct fx *fx = *state;
	int other = xconnect(fx->d.sock), fd = xconnect(fx->d.sock);
	struct djinn_hdr h = dj_hdr(DJINN_MSG_HELLO, 42, 0, 0);

	hello(other);
	hello(fd);
	h.magic = 0x4e4a4431; /* "1DJN": byte-swapped */
	raw_err(fd, &h, NULL, 0, -EPROTO, NULL);
	expect_eof(fd);
	close(fd);

	/* Garbage that happens to be 40 bytes, with more behind it. */
	fd = xconnect(fx->d.sock);
	{
		uint8_t junk[200];
		struct dj_resp r;

		memset(junk, 0xa5, sizeof(junk));
		assert_int_equal(dj_write(fd, junk, sizeof(junk), 5000), 0);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		expect_error(&r, -EPROTO, NULL);
		dj_resp_free(&r);
	}
	expect_eof(fd);
	close(fd);

	hello(other); /* others are still served */
	close(other);
	check_health(fx, 0);
}

/* 4. payload_len over DJINN_MAX_PAYLOAD: -EMSGSIZE, then closed; over an
 * opcode's limit: -EMSGSIZE. */
static void test_oversize(void **state)
{
	struct fx *fx = *state;
	const uint64_t lens[] = { DJINN_MAX_PAYLOAD + 1, UINT64_MAX };
	uint8_t pad[4097] = { 0 }; /* past the 4096 of any struct */
	struct djinn_hdr h;
	int fd;

	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		fd = xconnect(fx->d.sock);
		h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 100 + i, 0, lens[i]);
		raw_err(fd, &h, NULL, 0, -EMSGSIZE, NULL);
		expect_eof(fd);
		close(fd);
	}

	/* Over what the opcode allows, with the bytes sent: refused, and
	 * the connection stays usable. (A struct's own size plus trailing
	 * zeros is a grown request, accepted: test_wire_sizes.) */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_MSG_HELLO, 200, 0, sizeof(pad));
	raw_err(fd, &h, pad, sizeof(pad), -EMSGSIZE, NULL);
	hello(fd);
	h = dj_hdr(DJINN_MSG_SESSION_OPEN, 201, 0, sizeof(pad));
	raw_err(fd, &h, pad, sizeof(pad), -EMSGSIZE, NULL);
	hello(fd);
	h = dj_hdr(DJINN_MSG_TENSOR_READ, 202, 0, sizeof(pad));
	raw_err(fd, &h, pad, sizeof(pad), -EMSGSIZE, NULL);
	hello(fd);
	close(fd);

	/* A huge payload for a small opcode: refused (the bytes need not
	 * be read). */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_MSG_HEARTBEAT, 203, 0, 1ull << 33);
	raw_err(fd, &h, NULL, 0, -EMSGSIZE, NULL);
	close(fd);
	check_health(fx, 0);
}

/* 5. An unknown opcode: -EOPNOTSUPP, the connection stays usable; so is
 * GOAWAY, djinnd's own, which no client sends. */
static void test_unknown_opcode(void **state)
{
	struct fx *fx = *state;
	/* gaps, the first past the last assigned, far past */
	const uint16_t ops[] = {
		0,    22,    DJINN_MSG_GOAWAY, 63, DJINN_MSG_ADMIN_HEALTH + 1,
		1000, 0xffff
	};
	int fd = xconnect(fx->d.sock);
	uint8_t pad[32] = { 1, 2, 3 };

	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		struct djinn_hdr h = dj_hdr(ops[i], 300 + i, 0, 0);
		char num[8];

		snprintf(num, sizeof(num), "%u", ops[i]);
		raw_err(fd, &h, NULL, 0, -EOPNOTSUPP, num);
		/* with a payload, skipped */
		h.payload_len = sizeof(pad);
		raw_err(fd, &h, pad, sizeof(pad), -EOPNOTSUPP, num);
		hello(fd);
	}
	close(fd);
	check_health(fx, 0);
}

/* 6. A reserved header field or flags set: -EINVAL. */
static void test_reserved_header(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "r", .priority = 4 };
	int fd = xconnect(fx->d.sock);
	struct djinn_hdr h;

	h = dj_hdr(DJINN_MSG_HELLO, 1, 0, 0);
	h.flags = DJINN_F_RESPONSE;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = DJINN_F_ERROR;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = 1u << 31;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = 0;
	h.__reserved = 1;
	raw_err(fd, &h, NULL, 0, -EINVAL, "reserved");
	hello(fd);

	/* With a payload: skipped, and nothing was opened. */
	h = dj_hdr(DJINN_MSG_SESSION_OPEN, 2, 0, sizeof(o));
	h.__reserved = 0x80000000u;
	raw_err(fd, &h, &o, sizeof(o), -EINVAL, "reserved");
	h = dj_hdr(DJINN_MSG_SESSION_OPEN, 3, 0, sizeof(o));
	h.flags = 4;
	raw_err(fd, &h, &o, sizeof(o), -EINVAL, "flags");
	hello(fd);
	assert_int_equal(sessions_now(fx, NULL), 0);

	/* A device this djinnd does not have (it has one) */
	o.device = 2;
	call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -ENODEV,
		 "no device 1: this djinnd has 1 device (0 to 0)");
	close(fd);
	check_health(fx, 0);
}

/* 7. Truncated frames: the daemon survives, serves others and frees what
 * a half-received request had taken. */
static void test_truncated(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "t", .priority = 4 };
	struct djinn_tensor_desc d = F32(256, 1024); /* 1 MiB */
	int other = xconnect(fx->d.sock), fd;
	struct djinn_session_resp s;
	struct djinn_hdr h;
	size_t plen;
	uint8_t *p;

	hello(other);

	/* Half a header, then close. */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_MSG_HELLO, 1, 0, 0);
	assert_int_equal(dj_write(fd, &h, sizeof(h) / 2, 5000), 0);
	close(fd);

	/* A header promising more than is sent, then close. */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_MSG_SESSION_OPEN, 2, 0, sizeof(o));
	assert_int_equal(dj_send_raw(fd, &h, &o, sizeof(o) / 2), 0);
	close(fd);

	/* Half a TENSOR_CREATE of 1 MiB, then close: its region goes. */
	fd = xconnect(fx->d.sock);
	open_at(__LINE__, fd, "trunc", 4, 0, &s);
	p = create_payload(&d, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 3, s.session_id,
		   plen + desc_bytes(&d));
	assert_int_equal(dj_send_raw(fd, &h, p, plen), 0);
	free(p);
	p = pattern_buf(3, 300000);
	assert_int_equal(dj_write(fd, p, 300000, 5000), 0);
	free(p);
	/* the region exists while the bytes stream in */
	wait_charged(fx, s.session_id, granules(fx, desc_bytes(&d)), 5000);
	close(fd);
	wait_charged(fx, s.session_id, 0, 5000);

	/* Half a TENSOR_WRITE, then close: the tensor is intact. */
	fd = xconnect(fx->d.sock);
	attach(fd, s.session_id, s.token);
	{
		uint8_t *data = pattern_buf(4, desc_bytes(&d)), *got;
		uint64_t t =
			create_data(fd, s.session_id, &d, data, desc_bytes(&d));
		int fd2 = xconnect(fx->d.sock);

		attach(fd2, s.session_id, s.token);
		p = write_payload(t, 0, data, 4096, &plen);
		h = dj_hdr(DJINN_MSG_TENSOR_WRITE, 4, s.session_id,
			   sizeof(struct djinn_tensor_io) + 8192);
		assert_int_equal(dj_send_raw(fd2, &h, p, plen), 0);
		free(p);
		close(fd2);
		hello(other);
		got = xmalloc(desc_bytes(&d));
		tensor_read(fd, s.session_id, t, 0, desc_bytes(&d), got);
		expect_pattern(got, 4, 0, desc_bytes(&d), "tensor");
		free(got);
		free(data);
		tensor_release(fd, s.session_id, t);
	}
	close_session(fd, s.session_id);
	close(fd);

	hello(other);
	close(other);
	check_health(fx, 0);
}

/* 8. A payload of the wrong size for a fixed-size opcode: -EINVAL; the
 * connection stays usable. */
static void test_wrong_size(void **state)
{
	struct fx *fx = *state;
	static const struct {
		uint16_t op;
		size_t len;
	} cases[] = {
		{ DJINN_MSG_SESSION_OPEN,
		  sizeof(struct djinn_session_open) - 1 },
		{ DJINN_MSG_SESSION_OPEN, 0 },
		{ DJINN_MSG_SESSION_ATTACH, 8 },
		{ DJINN_MSG_SIGNAL, 8 },
		{ DJINN_MSG_TENSOR_READ, 16 },
		{ DJINN_MSG_TENSOR_RELEASE, 4 },
		{ DJINN_MSG_TEXT_LOOKUP, 100 },
		{ DJINN_MSG_TENSOR_CREATE,
		  sizeof(struct djinn_tensor_create) - 1 },
		{ DJINN_MSG_TENSOR_WRITE, sizeof(struct djinn_tensor_io) - 1 },
		{ DJINN_MSG_GRAPH_SUBMIT, 20 },
	};
	uint8_t pad[128] = { 0 };
	int fd = xconnect(fx->d.sock), afd = xconnect(fx->d.admin);
	uint64_t sid = open_session(fd, "sizes");

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		call_err(fd, cases[i].op, sid, pad, cases[i].len, -EINVAL,
			 NULL);
		hello(fd);
	}
	call_err(afd, DJINN_MSG_ADMIN_KILL, 0, pad, 4, -EINVAL, NULL);
	hello(afd);
	assert_int_equal(session_entry(fx, sid).id, sid);
	close_session(fd, sid);
	close(afd);
	close(fd);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_version_mismatch, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_bad_magic, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_oversize, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_unknown_opcode, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_reserved_header, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_truncated, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_wrong_size, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd framing", tests, NULL, NULL);
}
