// SPDX-License-Identifier: MIT
/*
 * Leases: a session nobody renews, a client killed in the middle of a
 * request, a client that stops reading its replies.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* For test_unread_replies: a default lease of 300 ms. */
static int fx_setup_short_lease(void **state)
{
	return fx_start(state, DEV_MEM, 300);
}

/* 13a. A session nobody renews is gone after its lease, with its
 * memory; one that is renewed stays. */
static void test_lease_expiry(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1024);
	int fd = xconnect(fx->d.sock);
	struct djinn_admin_stats st0 = stats_now(fx);
	struct djinn_session_resp s, k;
	uint8_t *data = pattern_buf(5, 4096);
	int64_t touched, gone = -1;
	uint64_t sid, keep;

	keep = open_at(__LINE__, fd, "keep", 4, 150 * NSEC_PER_MSEC, &k);
	assert_int_equal(k.lease_ns, 150 * NSEC_PER_MSEC);
	sid = open_at(__LINE__, fd, "short", 4, 100 * NSEC_PER_MSEC, &s);
	assert_int_equal(s.lease_ns, 100 * NSEC_PER_MSEC);
	touched = dj_now_ms();
	create_data(fd, sid, &d, data, 4096);
	/* not expired early: still there well within its lease */
	if (dj_now_ms() - touched < 60)
		assert_int_equal(session_entry(fx, sid).id, sid);
	assert_true(vmu_now(fx).seg[1].used > fx->base.seg[1].used);

	/* Renew "keep" every 20 ms; watch "short" go. */
	while (dj_now_ms() - touched < 3000) {
		struct djinn_admin_session *l;
		uint32_t n;
		bool there = false;

		call_void(fd, DJINN_MSG_SIGNAL, keep,
			  &(struct djinn_signal){ .phase = DJINN_PHASE_DECODE },
			  sizeof(struct djinn_signal));
		n = sessions_now(fx, &l);
		for (uint32_t i = 0; i < n; i++)
			there |= l[i].id == sid;
		free(l);
		if (!there) {
			gone = dj_now_ms() - touched;
			break;
		}
		usleep(20000);
	}
	if (gone < 0)
		fail_msg("a session with a 100 ms lease still there after 3 s");
	if (gone < 100)
		fail_msg("a session with a 100 ms lease gone after %lld ms",
			 (long long)gone);
	/* its handles and memory with it */
	call_err(fd, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
	call_err(fd, DJINN_MSG_TENSOR_READ, sid,
		 &(struct djinn_tensor_io){ .len = 4 },
		 sizeof(struct djinn_tensor_io), -ENOENT, NULL);
	check_health_at(__LINE__, fx, 1, &fx->base);
	assert_int_equal(stats_now(fx).sessions_expired,
			 st0.sessions_expired + 1);

	/* "keep" was renewed all along, by SIGNAL */
	call_void(fd, DJINN_MSG_SIGNAL, keep,
		  &(struct djinn_signal){ .phase = DJINN_PHASE_IDLE },
		  sizeof(struct djinn_signal));
	close_session(fd, keep);
	free(data);
	close(fd);
	check_health(fx, 0);
}

/* The client of test_client_killed: opens a session, uploads a tensor,
 * tells the parent its session id, starts a 16 MiB TENSOR_CREATE,
 * sends a quarter of it, says 'M' and waits to be killed. */
static int killed_client(const char *sock, int out)
{
	struct djinn_session_open o = { .tenant = "doomed",
					.priority = 4,
					.lease_ns = 1500 * NSEC_PER_MSEC };
	struct djinn_tensor_desc d = F32(256 * 1024), big = F32(4 * MiB);
	struct djinn_session_resp s;
	struct dj_resp r;
	size_t plen;
	uint8_t *p, *data = malloc(16 * MiB);
	int fd = dj_connect(sock);
	struct djinn_hdr h;

	if (fd < 0 || !data)
		return 10;
	memset(data, 0x5a, 16 * MiB);
	if (dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r) != 1 ||
	    r.error || r.len != sizeof(s))
		return 11;
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, MiB, &plen);
	if (dj_call(fd, DJINN_MSG_TENSOR_CREATE, s.session_id, p, plen, &r) !=
		    1 ||
	    r.error)
		return 12;
	dj_resp_free(&r);
	free(p);
	if (write(out, &s.session_id, 8) != 8)
		return 13;
	p = create_payload(&big, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_MSG_TENSOR_CREATE, 99, s.session_id,
		   plen + desc_bytes(&big));
	if (dj_send_raw(fd, &h, p, plen) ||
	    dj_write(fd, data, 4 * MiB, DJ_TIMEOUT_MS))
		return 14;
	if (write(out, "M", 1) != 1)
		return 15;
	for (int i = 0; i < 300; i++)
		usleep(100000);
	return 16;
}

/* 13b. A client SIGKILLed in the middle of a request: after the lease
 * its session is gone and the VMU is back where it started. */
static void test_client_killed(void **state)
{
	struct fx *fx = *state;
	struct pollfd pfd;
	uint64_t sid = 0;
	int pipefd[2], status;
	int64_t marked, killed;
	char mark = 0;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		close(pipefd[0]);
		close(fx->adm);
		_exit(killed_client(fx->d.sock, pipefd[1]));
	}
	close(pipefd[1]);
	pfd = (struct pollfd){ .fd = pipefd[0], .events = POLLIN };
	if (poll(&pfd, 1, DJ_TIMEOUT_MS) != 1 ||
	    read(pipefd[0], &sid, 8) != 8 ||
	    poll(&pfd, 1, DJ_TIMEOUT_MS) != 1 ||
	    read(pipefd[0], &mark, 1) != 1 || mark != 'M') {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		fail_msg("client did not get going (exit status %d)",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	marked = dj_now_ms();
	/* Mid-request: the 16 MiB region is being filled. */
	{
		int64_t deadline = marked + 5000;

		while (vmu_now(fx).seg[1].used <
			       fx->base.seg[1].used + 16 * MiB &&
		       dj_now_ms() < deadline)
			usleep(2000);
	}
	assert_true(vmu_now(fx).seg[1].used >= fx->base.seg[1].used + 17 * MiB);
	assert_int_equal(session_entry(fx, sid).tensors, 1);

	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	killed = dj_now_ms();
	close(pipefd[0]);

	/* The connection's end does not end the session (its lease
	 * does), but the half-made tensor goes at once. */
	if (dj_now_ms() - marked < 500) {
		assert_int_equal(session_entry(fx, sid).id, sid);
		wait_charged(fx, sid, granules(fx, MiB), 1000);
	}

	/* After the lease (1.5 s): gone, memory back. */
	wait_for(fx, 0, fx->base.seg[1].used, 5000);
	if (dj_now_ms() - killed > 1500 + 2000)
		fail_msg("session gone %lld ms after the kill, lease 1500 ms",
			 (long long)(dj_now_ms() - killed));
	assert_true(stats_now(fx).sessions_expired >= 1);
	check_health(fx, 0);
}

/* 13b. A client that stops reading its replies: once its session's lease
 * has run out and the peer has taken no reply bytes for a lease period,
 * the connection is closed and the tensor its read held is freed. */
static void test_unread_replies(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 32 * MiB);
	int fd = xconnect(fx->d.sock), small = 4096, other;
	uint64_t sid = open_session(fd, "never-reads"), t;
	struct djinn_tensor_io io = { .len = 32 * MiB };
	struct djinn_hdr h;
	int64_t ms;

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	t = create_data(fd, sid, &d, NULL, 0);
	io.handle = t;
	h = dj_hdr(DJINN_MSG_TENSOR_READ, 7, sid, sizeof(io));
	assert_int_equal(dj_send_raw(fd, &h, &io, sizeof(io)), 0);
	/* The session expires (300 ms); the read's reply still holds the
	 * tensor until the connection is given up (300 ms more without
	 * progress, checked every 75 ms). */
	ms = wait_for(fx, 0, fx->base.seg[1].used, 3000);
	assert_true(ms >= 250);
	/* Everyone else is served meanwhile and after. */
	other = xconnect(fx->d.sock);
	hello(other);
	close(other);
	close(fd);
	check_health(fx, 0);
}

/* 13c. A client that reads a large reply slowly, for many lease periods
 * and sending nothing meanwhile (its heartbeats would wait behind the
 * read on a slow link): taking the reply's bytes keeps its session. */
static void test_slow_reader(void **state)
{
	struct fx *fx = *state;
	const size_t len = 8 * MiB, chunk = 64 * KiB;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 8 * MiB);
	struct djinn_session_open o = { .tenant = "slow",
					.priority = 4,
					.lease_ns = 100 * NSEC_PER_MSEC };
	struct djinn_tensor_io io = { .len = len };
	uint8_t *data = pattern_buf(9, len), *got = malloc(len);
	int fd = xconnect(fx->d.sock), small = 64 * 1024;
	struct djinn_session_resp s;
	struct djinn_hdr h;
	int64_t t0;
	size_t n = 0;

	assert_non_null(got);
	open_at(__LINE__, fd, "slow", 4, o.lease_ns, &s);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	io.handle = create_data(fd, s.session_id, &d, data, len);
	h = dj_hdr(DJINN_MSG_TENSOR_READ, 9, s.session_id, sizeof(io));
	assert_int_equal(dj_send_raw(fd, &h, &io, sizeof(io)), 0);
	assert_int_equal(dj_read(fd, &h, sizeof(h), DJ_TIMEOUT_MS),
			 (long)sizeof(h));
	assert_int_equal(h.flags & DJINN_F_ERROR, 0);
	assert_int_equal(h.payload_len, len);
	/* 128 pieces 10 ms apart: more than ten leases */
	t0 = dj_now_ms();
	while (n < len) {
		long r = dj_read(fd, got + n, chunk < len - n ? chunk : len - n,
				 DJ_TIMEOUT_MS);

		assert_true(r > 0);
		n += (size_t)r;
		usleep(10000);
	}
	assert_true(dj_now_ms() - t0 > 10 * 100);
	assert_memory_equal(got, data, len);
	/* still there: the bytes taken renewed it */
	assert_int_equal(session_entry(fx, s.session_id).id, s.session_id);
	close_session(fd, s.session_id);
	free(data);
	free(got);
	close(fd);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lease_expiry, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_client_killed, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(
			test_unread_replies, fx_setup_short_lease, fx_teardown),
		cmocka_unit_test_setup_teardown(test_slow_reader, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd leases", tests, NULL, NULL);
}
