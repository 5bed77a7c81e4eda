// SPDX-License-Identifier: MIT
/*
 * The "djinn" generic netlink family through libnl: events and what they
 * carry, get, dump, kill, and who may use them.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

static struct kt_nl *nl_or_fail(bool events)
{
	int err;
	struct kt_nl *nl = kt_nl_open(events, &err);

	if (!nl)
		fail_msg("netlink: %s", strerror(-err));
	return nl;
}

static void test_events(void **state)
{
	struct kt_nl *nl = nl_or_fail(true);
	struct djinn_ioc_session_open o;
	struct kt_nl_msg m;
	uint64_t t0;
	int fd;

	fd = kt_session("evt", 0, 0, &o);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_OPENED_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_string_equal(m.tenant, "evt");
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	assert_int_equal(m.pid, getpid());
	assert_int_equal(m.uid, 0);
	assert_int_equal(m.kind, 0);

	t0 = kt_now_ns();
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IO_WAIT, 123456789), 0);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_SIGNAL_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_int_equal(m.phase, DJINN_SIGNAL_IO_WAIT);
	assert_int_equal(m.expected_ns, 123456789);
	assert_int_equal(m.signals, 1);
	assert_true(m.time_ns >= t0 && m.time_ns <= kt_now_ns());

	/* heartbeats and posts are not events */
	assert_int_equal(kt_heartbeat(fd, 0, false, 0), 0);
	assert_int_equal(kt_nl_event(nl, 100, &m), -ETIMEDOUT);

	close(fd);
	assert_int_equal(kt_nl_wait(nl, DJINN_CMD_CLOSED_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_int_equal(m.state, DJINN_STATE_CLOSED);
	assert_int_equal(m.heartbeats, 1);
	kt_nl_close(nl);
}

static void test_get_and_dump(void **state)
{
	struct kt_nl *nl = nl_or_fail(false);
	struct djinn_ioc_session_open o[3];
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	struct kt_nl_msg m, all[64];
	int fds[3], d = kt_daemon();
	int k, n, found, proxies;

	for (k = 0; k < 3; k++)
		fds[k] = kt_session("dumped", 0, 0, &o[k]);
	strcpy(po.tenant, "far");
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	assert_int_equal(kt_post(d, o[1].session_id, 5, NULL), 0);

	assert_int_equal(kt_nl_get(nl, o[1].session_id, &m), 0);
	assert_int_equal(m.cmd, DJINN_CMD_GET);
	assert_int_equal(m.id, o[1].session_id);
	assert_string_equal(m.tenant, "dumped");
	assert_int_equal(m.posts, 1);
	assert_int_equal(kt_nl_get(nl, 0xfffffffeull, &m), -ENOENT);

	n = kt_nl_dump(nl, all, 64);
	assert_true(n >= 4);
	found = proxies = 0;
	for (k = 0; k < n; k++) {
		for (int j = 0; j < 3; j++)
			found += all[k].id == o[j].session_id;
		if (all[k].id == po.session_id) {
			proxies++;
			assert_int_equal(all[k].kind, DJINN_SESSION_PROXY);
			assert_string_equal(all[k].tenant, "far");
		}
	}
	assert_int_equal(found, 3);
	assert_int_equal(proxies, 1);
	for (k = 0; k < 3; k++)
		close(fds[k]);
	close(d);
	/* all gone from the dump */
	n = kt_nl_dump(nl, all, 64);
	for (k = 0; k < n; k++)
		for (int j = 0; j < 3; j++)
			assert_int_not_equal(all[k].id, o[j].session_id);
	kt_nl_close(nl);
}

/* A dump longer than one message buffer continues where it stopped. */
static void test_long_dump(void **state)
{
	enum { N = 300 };
	static int fds[N];
	static struct kt_nl_msg all[N + 64];
	struct djinn_ioc_session_open o;
	struct kt_nl *nl = nl_or_fail(false);
	uint64_t first = 0;
	int k, n, mine = 0;

	for (k = 0; k < N; k++) {
		fds[k] = kt_session("many", 0, 1, &o);
		if (!first)
			first = o.session_id;
	}
	n = kt_nl_dump(nl, all, N + 64);
	assert_true(n >= N);
	for (k = 0; k < n; k++)
		mine += all[k].id >= first && all[k].id <= o.session_id;
	assert_int_equal(mine, N);
	for (k = 0; k < N; k++)
		close(fds[k]);
	kt_nl_close(nl);
}

static void test_nl_kill(void **state)
{
	struct kt_nl *nl = nl_or_fail(false);
	struct kt_nl *ev = nl_or_fail(true);
	struct djinn_ioc_session_open o;
	struct kt_nl_msg m;
	int fd = kt_session("nlkill", 0, 0, &o);

	assert_int_equal(kt_nl_kill(nl, o.session_id), 0);
	assert_int_equal(kt_nl_wait(ev, DJINN_CMD_KILLED_NTF, o.session_id,
				    5000, &m),
			 0);
	assert_int_equal(kt_heartbeat(fd, 0, false, 0), -ECANCELED);
	assert_int_equal(kt_nl_kill(nl, o.session_id), -ENOENT);
	assert_int_equal(kt_nl_get(nl, o.session_id, &m), -ENOENT);
	close(fd);
	kt_nl_close(nl);
	kt_nl_close(ev);
}

static uint64_t victim;

static int nobody_netlink(void *arg)
{
	struct kt_nl_msg all[8];
	struct kt_nl *nl;
	int err;

	/* joining the events group needs CAP_NET_ADMIN */
	nl = kt_nl_open(true, &err);
	if (nl || err != -EPERM)
		return 1;
	nl = kt_nl_open(false, &err);
	if (!nl)
		return 2;
	if (kt_nl_dump(nl, all, 8) != -EPERM)
		return 3;
	if (kt_nl_get(nl, victim, all) != -EPERM)
		return 4;
	if (kt_nl_kill(nl, victim) != -EPERM)
		return 5;
	kt_nl_close(nl);
	return 0;
}

static void test_nl_permissions(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	int fd = kt_session("guarded", 0, 0, &o);
	int ret;

	victim = o.session_id;
	ret = kt_as_nobody(nobody_netlink, NULL);
	if (ret)
		fail_msg("as nobody: netlink check %d failed", ret);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_events),
		cmocka_unit_test(test_get_and_dump),
		cmocka_unit_test(test_long_dump),
		cmocka_unit_test(test_nl_kill),
		cmocka_unit_test(test_nl_permissions),
	};

	return cmocka_run_group_tests_name("djinn.ko netlink", tests, NULL,
					   NULL);
}
