// SPDX-License-Identifier: MIT
/*
 * The admin socket: ADMIN_SESSIONS, ADMIN_KILL (in the middle of an
 * upload too), ADMIN_VMU, ADMIN_STATS; admin opcodes on the client socket
 * and client opcodes on the admin socket.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* 15a. ADMIN_SESSIONS, ADMIN_KILL, ADMIN_VMU, ADMIN_STATS. */
static void test_admin(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1024);
	int fd = xconnect(fx->d.sock);
	struct djinn_admin_stats st0 = stats_now(fx), st;
	struct djinn_session_resp sa, sb;
	struct djinn_admin_session ea, eb;
	struct djinn_admin_vmu v;
	uint64_t alice, bob, t;

	close(fd);
	fd = xconnect(fx->d.sock);
	alice = open_at(__LINE__, fd, "alice", 6, 5000 * NSEC_PER_MSEC, &sa);
	bob = open_at(__LINE__, fd, "bob", 1, 0, &sb);
	t = create_data(fd, alice, &d, NULL, 0);
	(void)t;

	assert_int_equal(sessions_now(fx, NULL), 2);
	ea = session_entry(fx, alice);
	eb = session_entry(fx, bob);
	/* the tenant is who connected; what the client sent, a label */
	{
		char me[DJINN_TENANT_LEN];

		snprintf(me, sizeof(me), "uid:%u", (unsigned int)getuid());
		assert_string_equal(ea.tenant, me);
		assert_string_equal(eb.tenant, me);
	}
	assert_string_equal(ea.label, "alice");
	assert_string_equal(eb.label, "bob");
	assert_int_equal(ea.priority, 6);
	assert_int_equal(eb.priority, 1);
	assert_int_equal(ea.lease_ns, 5000 * NSEC_PER_MSEC);
	assert_int_equal(eb.lease_ns, 10000 * NSEC_PER_MSEC);
	assert_true(ea.deadline_ns >= sa.deadline_ns);
	assert_int_equal(ea.tensors, 1);
	assert_int_equal(eb.tensors, 0);
	assert_true(ea.data_bytes >= desc_bytes(&d));
	assert_int_equal(eb.data_bytes, 0);
	assert_true(ea.requests >= 1);
	assert_int_equal(ea.uid, getuid());
	assert_int_equal(ea.pid, getpid());

	v = vmu_now(fx);
	assert_string_equal(v.device, "cpu");
	assert_int_equal(v.capacity, DEV_BYTES);
	assert_int_equal(v.granularity, fx->hello.granularity);
	assert_true(v.committed >= fx->base.committed + desc_bytes(&d));
	assert_true(v.seg[1].used >= fx->base.seg[1].used + desc_bytes(&d));
	assert_int_equal(v.seg[1].entries, fx->base.seg[1].entries + 1);
	assert_true(v.free <= v.capacity - v.committed);
	assert_true(v.pressure <= 2);
	assert_int_equal(v.__reserved, 0);

	/* kill bob: his next request finds no session */
	call_void(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ bob },
		  sizeof(struct djinn_admin_kill));
	call_err(fd, DJINN_MSG_HEARTBEAT, bob, NULL, 0, -ENOENT, NULL);
	assert_int_equal(sessions_now(fx, NULL), 1);
	call_err(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		 &(struct djinn_admin_kill){ bob },
		 sizeof(struct djinn_admin_kill), -ENOENT, NULL);
	call_err(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		 &(struct djinn_admin_kill){ 0 },
		 sizeof(struct djinn_admin_kill), -ENOENT, NULL);

	st = stats_now(fx);
	assert_true(st.uptime_ns > st0.uptime_ns);
	assert_true(st.conns >= 2);
	assert_true(st.conns_accepted > st0.conns_accepted);
	assert_int_equal(st.sessions, 1);
	assert_int_equal(st.sessions_opened - st0.sessions_opened, 2);
	assert_int_equal(st.sessions_killed - st0.sessions_killed, 1);
	assert_true(st.requests >= st0.requests + 8);
	assert_true(st.errors >= st0.errors + 3);
	assert_true(st.bytes_in > st0.bytes_in);
	assert_true(st.bytes_out > st0.bytes_out);
	assert_int_equal(st.queue_depth, 0);

	/* kill alice with her tensor: the memory comes back */
	call_void(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ alice },
		  sizeof(struct djinn_admin_kill));
	call_err(fd, DJINN_MSG_TENSOR_RELEASE, alice, &t, 8, -ENOENT, NULL);
	assert_int_equal(stats_now(fx).sessions_killed - st0.sessions_killed,
			 2);
	close(fd);
	check_health(fx, 0);
}

/* 15b. A session killed (or expiring) in the middle of an upload: the
 * upload is answered -ECANCELED at once, the memory comes back, the rest
 * of the bytes are skipped. */
static void test_kill_mid_upload(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(2 * MiB); /* 8 MiB */
	int up = xconnect(fx->d.sock);
	uint64_t sid = open_session(up, "killed-uploader");
	uint8_t *data = pattern_buf(8, 8 * MiB);
	struct djinn_hdr h;
	struct dj_resp r;
	size_t plen;
	uint8_t *p = create_payload(&d, DJINN_SEG_DATA, NULL, NULL, 0, &plen);

	h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 1, sid, plen + desc_bytes(&d));
	assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
	assert_int_equal(dj_write(up, data, MiB, 5000), 0);
	free(p);
	wait_charged(fx, sid, 8 * MiB, 5000);

	call_void(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ sid },
		  sizeof(struct djinn_admin_kill));
	assert_int_equal(sessions_now(fx, NULL), 0);
	/* "after which the session's VMU bytes and handles are zero and
	 * its in-flight work is cancelled": the upload is answered
	 * -ECANCELED at once, its memory is back. */
	assert_int_equal(dj_recv(up, &r, DJ_TIMEOUT_MS), 1);
	assert_int_equal(r.hdr.request_id, 1);
	expect_error(&r, -ECANCELED, NULL);
	dj_resp_free(&r);
	wait_for(fx, 0, fx->base.seg[1].used, 2000);
	/* the rest of its bytes are skipped: the connection serves on */
	assert_int_equal(dj_write(up, data + MiB, 7 * MiB, 5000), 0);
	hello(up);
	call_err(up, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);

	/* The same for a TENSOR_WRITE in progress, and a lease that runs
	 * out under it (the write renewed it once, at its start). */
	{
		struct djinn_session_resp s;
		uint64_t t;

		sid = open_at(__LINE__, up, "slow-writer", 4,
			      300 * NSEC_PER_MSEC, &s);
		t = create_data(up, sid, &d, NULL, 0);
		p = write_payload(t, 0, NULL, 0, &plen);
		memcpy(p + offsetof(struct djinn_tensor_io, len),
		       &(uint64_t){ 8 * MiB }, 8);
		h = dj_hdr(DJINN_MSG_TENSOR_WRITE, 2, sid, plen + 8 * MiB);
		assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
		assert_int_equal(dj_write(up, data, MiB, 5000), 0);
		free(p);
		assert_int_equal(dj_recv(up, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, 2);
		expect_error(&r, -ECANCELED, NULL);
		dj_resp_free(&r);
		wait_for(fx, 0, fx->base.seg[1].used, 2000);
		assert_int_equal(dj_write(up, data + MiB, 7 * MiB, 5000), 0);
		hello(up);
	}
	close(up);
	free(data);
	check_health(fx, 0);
}

/* 15c. Admin opcodes on the client socket, client opcodes on the admin
 * socket: -EPERM, and the connection stays usable. */
static void test_admin_perm(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "x", .priority = 4 };
	int fd = xconnect(fx->d.sock), afd = xconnect(fx->d.admin);
	uint64_t sid = open_session(fd, "victim");
	const uint16_t admin_msgs[] = { DJINN_MSG_ADMIN_SESSIONS,
					DJINN_MSG_ADMIN_VMU,
					DJINN_MSG_ADMIN_STATS };

	for (size_t i = 0; i < ARRAY_SIZE(admin_msgs); i++) {
		call_err(fd, admin_msgs[i], 0, NULL, 0, -EPERM, NULL);
		hello(fd);
	}
	call_err(fd, DJINN_MSG_ADMIN_KILL, 0, &(struct djinn_admin_kill){ sid },
		 sizeof(struct djinn_admin_kill), -EPERM, NULL);
	hello(fd);
	assert_int_equal(session_entry(fx, sid).id, sid); /* not killed */

	call_err(afd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EPERM, NULL);
	call_err(afd, DJINN_MSG_HEARTBEAT, 0, NULL, 0, -EPERM, NULL);
	call_err(afd, DJINN_MSG_SESSION_ATTACH, sid, o.tenant, 16, -EPERM,
		 NULL);
	{
		struct djinn_tensor_desc d = F32(16);
		size_t plen;
		uint8_t *p = create_payload(&d, 0, NULL, o.tenant, 64, &plen);

		call_err(afd, DJINN_MSG_TENSOR_CREATE, sid, p, plen, -EPERM,
			 NULL);
		free(p);
	}
	hello(afd);
	assert_int_equal(sessions_now(fx, NULL), 1);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	close_session(fd, sid);
	close(afd);
	close(fd);
	check_health(fx, 0);
}

/*
 * 15d. The admin socket is its owner's (and the admin group's) from its
 * creation, and its peer's credentials are checked at accept besides:
 * with the file opened to everyone (a mistaken chmod), uid 65534 is
 * still closed without an answer, and the log says who; djinnd's own
 * uid gets in.
 */
static void test_admin_peer(void **state)
{
	struct fx *fx = *state;
	struct stat st;
	int fd, ret;

	assert_int_equal(stat(fx->d.admin, &st), 0);
	assert_int_equal(st.st_mode & 0007, 0); /* nothing for others */
	if (getuid()) {
		printf("  not root: no other uid to connect as\n");
		return;
	}
	assert_int_equal(chmod(fx->d.admin, 0666), 0);
	fd = dj_connect_as(fx->d.admin, 65534, 65534, NULL, 0);
	assert_true(fd >= 0);
	/* closed at accept: the HELLO may find it closed already */
	ret = dj_send(fd, DJINN_MSG_HELLO, 1, 0, NULL, 0);
	assert_true(ret == 0 || ret == -EPIPE || ret == -ECONNRESET);
	assert_int_equal(dj_wait_eof(fd, 10000), 1);
	close(fd);
	wait_log(fx->d.log, "uid 65534 is neither root nor in the admin group");
	fd = xconnect(fx->d.admin);
	hello(fd);
	close(fd);
	check_health(fx, 0);
}

/* @what's @len bytes: a name, its NUL, then zeros only. */
static void name_clean(const char *what, const char *field, size_t len)
{
	const char *nul = memchr(field, 0, len);

	if (!nul)
		fail_msg("%s: no terminator in its %zu bytes", what, len);
	for (const char *p = nul; p < field + len; p++)
		if (*p)
			fail_msg("%s: byte %zu after the name '%s' is %#x",
				 what, (size_t)(p - field), field,
				 (unsigned int)(uint8_t)*p);
}

/* An answer of @op on the admin socket: a count (and a zero, or the
 * second count of ADMIN_SCHED) then its entries. */
static struct dj_resp admin_answer(struct fx *fx, uint16_t op)
{
	struct dj_resp r;

	call_ok(fx->adm, op, 0, NULL, 0, &r, -1);
	return r;
}

/*
 * 15e. Every answer that carries a fixed-size name carries the name,
 * its NUL and zeros, and its reserved fields are zero, with djinnd's heap
 * filled with non-zero bytes (MALLOC_PERTURB_, set in main()): HELLO's
 * backend, ADMIN_SESSIONS' tenants and labels, ADMIN_TENANTS' names,
 * ADMIN_VMU's and ADMIN_SCHED's devices and ADMIN_SCHED's sessions'
 * tenants. (AUTH's is test_tls's.)
 */
static void test_reply_bytes(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "a");
	struct djinn_hello_resp hr;
	struct dj_resp r;
	uint32_t n[2];

	{
		struct dj_resp h;

		call_ok(fd, DJINN_MSG_HELLO, 0, NULL, 0, &h, sizeof(hr));
		memcpy(&hr, h.data, sizeof(hr));
		dj_resp_free(&h);
		name_clean("HELLO backend", hr.backend, sizeof(hr.backend));
	}
	r = admin_answer(fx, DJINN_MSG_ADMIN_SESSIONS);
	memcpy(n, r.data, sizeof(n));
	assert_int_equal(n[1], 0);
	for (uint32_t i = 0; i < n[0]; i++) {
		const struct djinn_admin_session *e =
			(const void *)(r.data + 8) + i;

		name_clean("ADMIN_SESSIONS tenant", e->tenant,
			   sizeof(e->tenant));
		name_clean("ADMIN_SESSIONS label", e->label, sizeof(e->label));
		assert_int_equal(e->ctx_waiting, 0); /* none signals */
	}
	dj_resp_free(&r);
	r = admin_answer(fx, DJINN_MSG_ADMIN_TENANTS);
	memcpy(n, r.data, sizeof(n));
	assert_true(n[0] >= 1);
	for (uint32_t i = 0; i < n[0]; i++) {
		const struct djinn_admin_tenant *e =
			(const void *)(r.data + 8) + i;

		name_clean("ADMIN_TENANTS name", e->name, sizeof(e->name));
		assert_int_equal(e->__reserved, 0);
	}
	dj_resp_free(&r);
	r = admin_answer(fx, DJINN_MSG_ADMIN_VMU);
	for (size_t off = 0; off + sizeof(struct djinn_admin_vmu) <= r.len;
	     off += sizeof(struct djinn_admin_vmu)) {
		const struct djinn_admin_vmu *v = (const void *)(r.data + off);

		name_clean("ADMIN_VMU device", v->device, sizeof(v->device));
		assert_int_equal(v->__reserved, 0);
	}
	dj_resp_free(&r);
	r = admin_answer(fx, DJINN_MSG_ADMIN_SCHED);
	memcpy(n, r.data, sizeof(n));
	{
		const struct djinn_admin_sched_dev *d =
			(const void *)(r.data + 8);
		const struct djinn_admin_sched_session *e =
			(const void *)(d + n[0]);

		for (uint32_t i = 0; i < n[0]; i++) {
			name_clean("ADMIN_SCHED device", d[i].device,
				   sizeof(d[i].device));
			assert_int_equal(d[i].__reserved, 0);
		}
		for (uint32_t i = 0; i < n[1]; i++)
			name_clean("ADMIN_SCHED tenant", e[i].tenant,
				   sizeof(e[i].tenant));
	}
	dj_resp_free(&r);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_admin, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_kill_mid_upload, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_admin_perm, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_admin_peer, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_reply_bytes, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	/* The daemons this starts fill what malloc() gives with non-zero
	 * bytes (glibc's MALLOC_PERTURB_; ASan fills them itself), so an
	 * answer that carries uninitialised heap shows it. */
	setenv("MALLOC_PERTURB_", "165", 1);
	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd admin", tests, NULL, NULL);
}
