// SPDX-License-Identifier: MIT
/*
 * Lifetimes: leases expire without heartbeats and last with them; a
 * process that dies ends its session at once; KILL; proxies expire; the
 * daemon is told of each through the "events" group.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

#define MS 1000000ull

static struct kt_nl *events(void)
{
	int err;
	struct kt_nl *nl = kt_nl_open(true, &err);

	if (!nl)
		fail_msg("netlink events: %s", strerror(-err));
	return nl;
}

static void test_lease_expires(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	struct kt_nl *nl = events();
	struct kt_nl_msg m;
	struct kt_ring r;
	struct pollfd p;
	int fd = kt_session("short", 100 * MS, 4, &o);
	int root = kt_open_dev();
	uint64_t t0 = kt_now_ns();

	assert_int_equal(kt_ring_map(fd, &o, &r), 0);
	assert_int_equal(*r.flags, 0);
	p.fd = fd;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_true(p.revents & POLLHUP);
	/* not before the deadline SESSION_OPEN reported (which is at most
	 * as late as the one the kernel keeps) */
	assert_true(kt_now_ns() >= o.deadline_ns);
	assert_true(o.deadline_ns <= t0 + 100 * MS);

	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_EXPIRED_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_int_equal(m.state, DJINN_STATE_EXPIRED);
	assert_string_equal(m.tenant, "short");
	assert_int_equal(*r.flags & DJINN_RING_F_EXPIRED, DJINN_RING_F_EXPIRED);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_EXPIRED);
	assert_int_equal(kt_heartbeat(fd, 0, false, 0), -ETIMEDOUT);
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IDLE, 0), -ETIMEDOUT);
	assert_int_equal(kt_info(root, o.session_id, &i), -ENOENT);
	assert_int_equal(kt_kill(root, o.session_id), -ENOENT);
	kt_ring_unmap(&r);
	close(fd);
	/* closing an expired session sends nothing more */
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_CLOSED_NTF, o.session_id, 200,
				    &m),
			 -ETIMEDOUT);
	close(root);
	kt_nl_close(nl);
}

static void test_heartbeats_keep_it(void **state)
{
	struct djinn_ioc_session_info i;
	/* three lease periods of heartbeats, ten to a period (a lease
	 * long enough for an emulated guest's stalls) */
	int fd = kt_session("kept", 500 * MS, 0, NULL);
	uint64_t end = kt_now_ns() + 1500 * MS;

	while (kt_now_ns() < end) {
		assert_int_equal(kt_heartbeat(fd, 0, false, 0), 0);
		usleep(50000);
	}
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	/* then they stop */
	usleep(1000000);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_EXPIRED);
	close(fd);
}

static void test_process_death(void **state)
{
	struct kt_nl *nl = events();
	struct djinn_ioc_session_info i;
	struct kt_nl_msg m;
	int pipefd[2], status, root = kt_open_dev();
	uint64_t id, t_kill;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct djinn_ioc_session_open o;
		int fd = kt_session("doomed", 3600000 * MS, 0, &o);

		(void)fd;
		if (write(pipefd[1], &o.session_id, 8) != 8)
			_exit(1);
		for (;;)
			pause();
	}
	assert_int_equal(read(pipefd[0], &id, 8), 8);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_OPENED_NTF, id, 5000, &m), 0);
	assert_int_equal(m.pid, pid);
	assert_int_equal(kt_info(root, id, &i), 0);
	assert_int_equal(i.pid, pid);

	t_kill = kt_now_ns();
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* ended by the time the parent has reaped it */
	assert_int_equal(kt_info(root, id, &i), -ENOENT);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_CLOSED_NTF, id, 5000, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_CLOSED);
	print_message("death to closed event: %.0f us\n",
		      (double)(m.time_ns - t_kill) / 1e3);
	close(pipefd[0]);
	close(pipefd[1]);
	close(root);
	kt_nl_close(nl);
}

static void test_kill_tells(void **state)
{
	struct kt_nl *nl = events();
	struct djinn_ioc_session_open o;
	struct kt_nl_msg m;
	struct kt_ring r;
	struct pollfd p;
	int fd = kt_session("killme", 0, 4, &o);
	int root = kt_open_dev();

	assert_int_equal(kt_ring_map(fd, &o, &r), 0);
	assert_int_equal(kt_kill(root, o.session_id), 0);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_KILLED_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_int_equal(m.state, DJINN_STATE_KILLED);
	assert_int_equal(*r.flags & DJINN_RING_F_KILLED, DJINN_RING_F_KILLED);
	p.fd = fd;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, 0), 1);
	assert_true(p.revents & POLLHUP);
	kt_ring_unmap(&r);
	close(fd);
	close(root);
	kt_nl_close(nl);
}

static void test_proxy_expires(void **state)
{
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	struct djinn_ioc_proxy_close pc = { .size = sizeof(pc) };
	struct djinn_ioc_session_info i;
	struct kt_nl *nl = events();
	struct kt_nl_msg m;
	int d = kt_daemon();
	uint64_t keep, lapse;

	strcpy(po.tenant, "remote");
	po.lease_ns = 1000 * MS;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	keep = po.session_id;
	po.lease_ns = 100 * MS;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	lapse = po.session_id;
	for (int k = 0; k < 10; k++) {
		assert_int_equal(kt_heartbeat(d, keep, false, 0), 0);
		usleep(30000);
	}
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_EXPIRED_NTF, lapse, 5000, &m),
			 0);
	assert_int_equal(m.kind, DJINN_SESSION_PROXY);
	assert_int_equal(kt_info(d, lapse, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_EXPIRED);
	assert_int_equal(kt_info(d, keep, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	pc.session_id = lapse;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_CLOSE, &pc), 0);
	/* the daemon goes: its live proxy closes */
	close(d);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_CLOSED_NTF, keep, 5000, &m),
			 0);
	kt_nl_close(nl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lease_expires),
		cmocka_unit_test(test_heartbeats_keep_it),
		cmocka_unit_test(test_process_death),
		cmocka_unit_test(test_kill_tells),
		cmocka_unit_test(test_proxy_expires),
	};

	return cmocka_run_group_tests_name("djinn.ko lifetimes", tests, NULL,
					   NULL);
}
