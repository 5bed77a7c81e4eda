// SPDX-License-Identifier: MIT
/*
 * Sessions and connections: open, heartbeat, attach, close, SIGNAL;
 * 100 clients at once; the cap on sessions per peer uid; SIGTERM under
 * clients.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* For test_sessions_per_uid: 3 sessions per peer uid at most. */
static int fx_setup_uid_cap(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000,
			    "server.max_sessions_per_uid=3");
}

/* For test_concurrent_clients: 1 GiB of device memory. */
static int fx_setup_1g(void **state)
{
	return fx_start(state, "1G", 10000);
}

/* ---------------------------------------------------------------------- */
/* Sessions */

/* 9. Open, heartbeat, attach, close; unknown sessions, foreign
 * connections, wrong tokens and bad open requests. */
static void test_sessions(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	struct djinn_session_resp s, s2, hb;
	struct djinn_session_open o;
	uint8_t zero[16] = { 0 }, bad[16];
	struct dj_resp r;
	uint64_t sid;

	/* Open: a non-zero token, the default lease (--lease-ms 10000). */
	sid = open_at(__LINE__, fd, "alice", 4, 0, &s);
	assert_memory_not_equal(s.token, zero, sizeof(zero));
	assert_int_equal(s.lease_ns, 10000 * NSEC_PER_MSEC);
	assert_true(s.deadline_ns > 0);

	/* A second session has its own id and token. */
	open_at(__LINE__, fd, "alice", 0, 0, &s2);
	assert_int_not_equal(s2.session_id, sid);
	assert_memory_not_equal(s2.token, s.token, sizeof(s.token));

	/* Heartbeat: the lease is renewed, no token; the deadline is on
	 * the server's CLOCK_MONOTONIC, which is ours. */
	usleep(2000);
	{
		uint64_t before = mono_ns(), after;

		call_ok(fd, DJINN_MSG_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
		after = mono_ns();
		memcpy(&hb, r.data, sizeof(hb));
		dj_resp_free(&r);
		assert_in_range(hb.deadline_ns, before + hb.lease_ns,
				after + hb.lease_ns);
	}
	assert_int_equal(hb.session_id, sid);
	assert_memory_equal(hb.token, zero, sizeof(zero));
	assert_int_equal(hb.lease_ns, s.lease_ns);
	assert_true(hb.deadline_ns > s.deadline_ns);

	/* An unknown session */
	call_err(fd, DJINN_MSG_HEARTBEAT, sid + 1000, NULL, 0, -ENOENT, NULL);
	call_err(fd, DJINN_MSG_SESSION_CLOSE, UINT64_MAX, NULL, 0, -ENOENT,
		 NULL);
	call_err(fd, DJINN_MSG_TENSOR_READ, 77777,
		 &(struct djinn_tensor_io){ .handle = 1, .len = 1 },
		 sizeof(struct djinn_tensor_io), -ENOENT, NULL);

	/* Another connection, not attached: -EPERM */
	call_err(fd2, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -EPERM, NULL);
	call_err(fd2, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0, -EPERM, NULL);
	call_err(fd2, DJINN_MSG_TENSOR_RELEASE, sid, &(uint64_t){ 1 }, 8,
		 -EPERM, NULL);
	/* a wrong token, zero or one bit off */
	call_err(fd2, DJINN_MSG_SESSION_ATTACH, sid, zero, 16, -EPERM, NULL);
	memcpy(bad, s.token, 16);
	bad[15] ^= 1;
	call_err(fd2, DJINN_MSG_SESSION_ATTACH, sid, bad, 16, -EPERM, NULL);
	/* the other session's token */
	call_err(fd2, DJINN_MSG_SESSION_ATTACH, sid, s2.token, 16, -EPERM,
		 NULL);
	call_err(fd2, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -EPERM, NULL);
	/* attaching to an unknown session: the same answer as a wrong
	 * token (ids are sequential: no existence oracle) */
	call_err(fd2, DJINN_MSG_SESSION_ATTACH, sid + 1000, s.token, 16, -EPERM,
		 "no session");
	/* the right token: attached */
	call_ok(fd2, DJINN_MSG_SESSION_ATTACH, sid, s.token, 16, &r,
		sizeof(hb));
	memcpy(&hb, r.data, sizeof(hb));
	dj_resp_free(&r);
	assert_int_equal(hb.session_id, sid);
	assert_memory_equal(hb.token, zero, sizeof(zero));
	call_ok(fd2, DJINN_MSG_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
	dj_resp_free(&r);
	/* and still from the first connection */
	call_ok(fd, DJINN_MSG_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
	dj_resp_free(&r);

	/* A closed connection does not end its sessions: s2 survives its
	 * connection and is attached from a new one. */
	close(fd);
	fd = xconnect(fx->d.sock);
	call_ok(fd, DJINN_MSG_SESSION_ATTACH, s2.session_id, s2.token, 16, &r,
		sizeof(hb));
	dj_resp_free(&r);
	assert_int_equal(sessions_now(fx, NULL), 2);
	close_session(fd, s2.session_id);
	call_err(fd, DJINN_MSG_HEARTBEAT, s2.session_id, NULL, 0, -ENOENT,
		 NULL);

	/* Close from the attached connection: gone for everyone. */
	close_session(fd2, sid);
	call_err(fd2, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
	call_err(fd2, DJINN_MSG_SESSION_ATTACH, sid, s.token, 16, -EPERM,
		 "no session");
	call_err(fd2, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0, -ENOENT, NULL);

	/* Bad opens: -EINVAL, nothing opened. */
	memset(&o, 0, sizeof(o));
	memset(o.tenant, 'a', sizeof(o.tenant)); /* no NUL */
	o.priority = 4;
	call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL,
		 "tenant");
	memset(o.tenant, 0, sizeof(o.tenant)); /* empty */
	call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	strcpy(o.tenant, "bob");
	o.priority = 8;
	call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	o.priority = UINT32_MAX;
	call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	/* 63 bytes and a NUL, priority 7: fine */
	memset(o.tenant, 'b', sizeof(o.tenant) - 1);
	o.tenant[sizeof(o.tenant) - 1] = 0;
	o.priority = 7;
	call_ok(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	assert_int_equal(session_entry(fx, s.session_id).priority, 7);
	assert_string_equal(session_entry(fx, s.session_id).label, o.tenant);
	close_session(fd, s.session_id);

	/* The lease is clamped to the server's limits, and said. */
	open_at(__LINE__, fd, "short", 4, 1, &s);
	assert_true(s.lease_ns > 1);
	close_session(fd, s.session_id);
	open_at(__LINE__, fd, "long", 4, UINT64_MAX, &s);
	assert_true(s.lease_ns < UINT64_MAX);
	assert_true(s.deadline_ns > hb.deadline_ns);
	close_session(fd, s.session_id);

	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* SIGNAL: recorded for the scheduler and shown by ADMIN_SESSIONS. */
static void test_signal(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "sig");
	struct djinn_signal sg = { .phase = DJINN_PHASE_IO_WAIT,
				   .expected_ns = 2000 * NSEC_PER_MSEC };

	call_void(fd, DJINN_MSG_SIGNAL, sid, &sg, sizeof(sg));
	assert_int_equal(session_entry(fx, sid).phase, DJINN_PHASE_IO_WAIT);
	sg.phase = DJINN_PHASE_IDLE + 1;
	call_err(fd, DJINN_MSG_SIGNAL, sid, &sg, sizeof(sg), -EINVAL, "phase");
	sg.phase = DJINN_PHASE_DECODE;
	sg.__reserved = 1;
	call_err(fd, DJINN_MSG_SIGNAL, sid, &sg, sizeof(sg), -EINVAL,
		 "reserved");
	sg.__reserved = 0;
	call_err(fd, DJINN_MSG_SIGNAL, 0, &sg, sizeof(sg), -ENOENT, NULL);
	assert_int_equal(session_entry(fx, sid).phase, DJINN_PHASE_IO_WAIT);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Concurrency */

#define NR_CLIENTS 100

struct client {
	pthread_t th;
	struct thread_err err;
	const char *sock;
	pthread_barrier_t *bar;
};

#define CHECK(c, what, rc)                                         \
	do {                                                       \
		if (!(c)) {                                        \
			thread_fail(&cl->err, __LINE__, what, rc); \
			goto out;                                  \
		}                                                  \
	} while (0)

/* One client: its own connection and session, a few requests. */
static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct djinn_session_open o = { .priority = cl->err.id % 8 };
	struct djinn_tensor_desc d = F32(256);
	struct djinn_tensor_io io = { .len = 1024 };
	struct djinn_tensor_resp t, out;
	struct djinn_session_resp s;
	struct dj_resp r = { 0 };
	uint8_t *p = NULL, *data = pattern_buf(cl->err.id, 1024);
	float f[256], want[256];
	struct gb g = { 0 };
	size_t plen;
	int fd = dj_connect(cl->sock), ret;
	uint32_t v;

	/* Everyone connected before anyone starts. */
	pthread_barrier_wait(cl->bar);
	CHECK(fd >= 0, "connect", fd);
	ret = dj_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r);
	CHECK(ret == 1 && !r.error, "hello", ret);
	dj_resp_free(&r);

	snprintf(o.tenant, sizeof(o.tenant), "client-%u", cl->err.id);
	ret = dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r);
	CHECK(ret == 1 && !r.error && r.len == sizeof(s), "open", r.error);
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);

	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, 1024, &plen);
	ret = dj_call(fd, DJINN_MSG_TENSOR_CREATE, s.session_id, p, plen, &r);
	CHECK(ret == 1 && !r.error && r.len == sizeof(t), "create", r.error);
	memcpy(&t, r.data, sizeof(t));
	dj_resp_free(&r);

	io.handle = t.handle;
	ret = dj_call(fd, DJINN_MSG_TENSOR_READ, s.session_id, &io, sizeof(io),
		      &r);
	CHECK(ret == 1 && !r.error && r.len == 1024, "read", r.error);
	CHECK(!memcmp(r.data, data, 1024), "read back", 0);
	dj_resp_free(&r);

	/* the graph: 2 x */
	v = gb_op(&g, DJINN_GOP_SCALE, 1, gb_input(&g, t.handle));
	g.node[0].params.scalar.alpha = 2;
	gb_output(&g, v);
	free(p);
	p = gb_payload(&g, &plen);
	ret = dj_call(fd, DJINN_MSG_GRAPH_SUBMIT, s.session_id, p, plen, &r);
	CHECK(ret == 1 && !r.error &&
		      r.len == sizeof(struct djinn_graph_resp) + sizeof(out),
	      "graph", r.error);
	memcpy(&out, r.data + sizeof(struct djinn_graph_resp), sizeof(out));
	dj_resp_free(&r);
	io.handle = out.handle;
	ret = dj_call(fd, DJINN_MSG_TENSOR_READ, s.session_id, &io, sizeof(io),
		      &r);
	CHECK(ret == 1 && !r.error && r.len == 1024, "read result", r.error);
	memcpy(f, r.data, 1024);
	dj_resp_free(&r);
	memcpy(want, data, 1024);
	for (int i = 0; i < 256; i++)
		CHECK(f[i] == want[i] * 2 || (isnan(f[i]) && isnan(want[i])),
		      "result", i);

	ret = dj_call(fd, DJINN_MSG_TENSOR_RELEASE, s.session_id, &t.handle, 8,
		      &r);
	CHECK(ret == 1 && !r.error, "release", r.error);
	dj_resp_free(&r);
	ret = dj_call(fd, DJINN_MSG_SESSION_CLOSE, s.session_id, NULL, 0, &r);
	CHECK(ret == 1 && !r.error, "close", r.error);
out:
	dj_resp_free(&r);
	free(p);
	free(data);
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* 14. 100 clients at once, each its own connection and session. */
static void test_concurrent_clients(void **state)
{
	struct fx *fx = *state;
	struct client *cl = calloc(NR_CLIENTS, sizeof(*cl));
	struct djinn_admin_stats st0 = stats_now(fx), st;
	pthread_barrier_t bar;

	assert_non_null(cl);
	assert_int_equal(pthread_barrier_init(&bar, NULL, NR_CLIENTS), 0);
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		cl[i].err.id = i;
		cl[i].sock = fx->d.sock;
		cl[i].bar = &bar;
		assert_int_equal(pthread_create(&cl[i].th, NULL, client_main,
						&cl[i]),
				 0);
	}
	for (unsigned int i = 0; i < NR_CLIENTS; i++)
		assert_int_equal(pthread_join(cl[i].th, NULL), 0);
	pthread_barrier_destroy(&bar);
	for (unsigned int i = 0; i < NR_CLIENTS; i++)
		if (cl[i].err.errors)
			fail_msg("%s", cl[i].err.msg);
	free(cl);

	st = stats_now(fx);
	assert_int_equal(st.sessions_opened - st0.sessions_opened, NR_CLIENTS);
	assert_int_equal(st.sessions_closed - st0.sessions_closed, NR_CLIENTS);
	assert_true(st.conns_accepted - st0.conns_accepted >= NR_CLIENTS);
	assert_int_equal(st.sessions, 0);
	assert_true(st.graphs_run - st0.graphs_run == NR_CLIENTS);
	wait_for(fx, 0, fx->base.seg[1].used, 2000);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Sessions per uid */

/* 16b. One peer uid may hold server.max_sessions_per_uid sessions (3
 * here); the next is -EDQUOT naming the limit, and a session closed
 * makes room. */
static void test_sessions_per_uid(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid[3];

	for (int i = 0; i < 3; i++)
		sid[i] = open_session(fd, "capped");
	{
		struct djinn_session_open o = { .tenant = "capped",
						.priority = 4 };

		call_err(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EDQUOT,
			 "server.max_sessions_per_uid");
	}
	close_session(fd, sid[0]);
	sid[0] = open_session(fd, "capped");
	for (int i = 0; i < 3; i++)
		close_session(fd, sid[i]);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Shutdown */

/* 16. SIGTERM under clients: each sees its answers, then EOF, promptly;
 * the daemon exits 0. */
static void test_daemon_stop(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(64, 64), big = F32(2 * MiB);
	int fd = xconnect(fx->d.sock), idle = xconnect(fx->d.sock),
	    up = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "stopping"), sid2;
	uint64_t t = upload_rand(fd, sid, &d, 41, 1, NULL);
	struct djinn_hdr h;
	struct gb g = { 0 };
	int64_t t0;
	size_t plen;
	uint8_t *p;
	int ret;

	hello(idle);
	/* a client in the middle of an 8 MiB upload */
	sid2 = open_session(up, "uploader");
	p = create_payload(&big, 0, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 1, sid2, plen + desc_bytes(&big));
	assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
	free(p);
	p = pattern_buf(6, MiB);
	assert_int_equal(dj_write(up, p, MiB, 5000), 0);
	free(p);
	/* a client with requests in flight */
	gb_output(&g, gb_op(&g, DJINN_GOP_MATMUL, 2, gb_input(&g, t),
			    gb_input(&g, t)));
	for (uint64_t id = 1; id <= 4; id++)
		graph_send_at(__LINE__, fd, sid, id, &g);

	t0 = dj_now_ms();
	assert_int_equal(kill(fx->d.pid, SIGTERM), 0);
	/* Answers (or not), then EOF: never a hang. */
	for (int n = 0;; n++) {
		struct dj_resp r;

		ret = dj_recv(fd, &r, 5000);
		if (ret != 1)
			break;
		assert_true(n < 4);
		assert_true(r.hdr.request_id >= 1 && r.hdr.request_id <= 4);
		dj_resp_free(&r);
	}
	if (ret != 0)
		fail_msg("after SIGTERM: %d (%s), want EOF", ret,
			 strerror(-ret));
	expect_eof(idle);
	expect_eof(up);
	if (dj_now_ms() - t0 > 3000)
		fail_msg("EOF %lld ms after SIGTERM",
			 (long long)(dj_now_ms() - t0));
	close(fd);
	close(idle);
	close(up);
	close(fx->adm);
	fx->adm = -1;
	fx->stopped = true;
	ret = djd_stop(&fx->d, 5000);
	/* Graphs finishing as the drain ends once crashed server_exit()
	 * (the executor freed with its eventfd read still on the ring). */
	if (ret)
		fail_msg("djinnd did not exit 0 after SIGTERM: %s", fx->d.end);
	fd = dj_connect(fx->d.sock);
	assert_true(fd < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sessions, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_signal, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_clients,
						fx_setup_1g, fx_teardown),
		cmocka_unit_test_setup_teardown(test_sessions_per_uid,
						fx_setup_uid_cap, fx_teardown),
		cmocka_unit_test_setup_teardown(test_daemon_stop, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd sessions", tests, NULL,
					   NULL);
}
