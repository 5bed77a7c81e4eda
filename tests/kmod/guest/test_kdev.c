// SPDX-License-Identifier: MIT
/*
 * libdjinn on djinn.ko, in the guest: djinn_session_open() opens the
 * session on /dev/djinn and binds it, heartbeats are ioctls, a graph's
 * completion comes through the ring, and a SIGKILLed client is freed at
 * once; DJINN_KDEV=0 keeps the session on the socket (a proxy).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <djinn/djinn.h>

#include "djd.h"
#include "kt.h"

static pid_t djinnd;
static int ring_said; /* libdjinn logged a completion found in the ring */

static void on_log(void *arg, int level, const char *msg)
{
	if (strstr(msg, "its completion is in the ring"))
		__atomic_add_fetch(&ring_said, 1, __ATOMIC_RELAXED);
}

static int setup(void **state)
{
	djinnd = djd_start("kmod", 60000, "info");
	return djinnd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	return djd_stop(djinnd);
}

/* The kernel session of tenant @tenant: 0 and it in *m, or -ENOENT. */
static int ksession(const char *tenant, struct kt_nl_msg *m)
{
	static struct kt_nl_msg all[256];
	int err, n;
	struct kt_nl *nl = kt_nl_open(false, &err);

	assert_non_null(nl);
	n = kt_nl_dump(nl, all, 256);
	kt_nl_close(nl);
	for (int i = 0; i < n; i++)
		if (!strcmp(all[i].tenant, tenant)) {
			*m = all[i];
			return 0;
		}
	return -ENOENT;
}

static struct djinn_session *open_session(struct djinn_conn **conn,
					  const char *tenant)
{
	struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;
	struct djinn_session *s;

	assert_int_equal(djinn_connect("unix:" DJD_SOCK, conn), 0);
	o.tenant = tenant;
	assert_int_equal(djinn_session_open(*conn, &o, &s), 0);
	return s;
}

static void test_open_binds(void **state)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { 4 } };
	struct djinn_tensor_desc bd = { .dtype = DJINN_DTYPE_F32,
					.ndim = 2,
					.dims = { 1024, 1024 } };
	float x[4] = { -1, 2, -3, 4 }, y[4], *big;
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	struct djinn_session_info si;
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_tensor *t, *bt;
	struct djinn_result *r;
	struct kt_nl_msg m;
	unsigned int tries;
	uint64_t hb;
	int in;

	s = open_session(&conn, "libdjinn-k");
	assert_int_equal(ksession("libdjinn-k", &m), 0);
	assert_int_equal(m.kind, 0); /* local: the client's own file */
	assert_int_equal(m.pid, getpid());
	assert_int_equal(djinn_session_info(s, &si), 0);
	assert_int_equal(djd_session(si.id, NULL), 0);

	/* heartbeats are ioctls on the session's file */
	hb = m.heartbeats;
	assert_int_equal(djinn_session_heartbeat(s), 0);
	assert_int_equal(ksession("libdjinn-k", &m), 0);
	assert_int_equal(m.heartbeats, hb + 1);

	/*
	 * A graph: its completion is posted to the ring before the answer
	 * is sent. djinn_wait() finds it there when it waits before the
	 * answer arrives; an answer that comes first is taken off the
	 * socket by libdjinn's receiver and the wait has nothing to wait
	 * for. So the graph also runs a chain of adds over 4 MiB that takes
	 * the daemon milliseconds (not matmuls: the guest's OpenBLAS picks
	 * kernels its virtual CPU traps on), and the whole is tried up to 8
	 * times: once must go through the ring.
	 */
	assert_int_equal(djinn_tensor_upload(s, &d, x, DJINN_SEG_DATA, &t), 0);
	big = calloc(1024 * 1024, sizeof(float));
	assert_non_null(big);
	assert_int_equal(djinn_tensor_upload(s, &bd, big, DJINN_SEG_DATA, &bt),
			 0);
	for (tries = 0;
	     tries < 8 && !__atomic_load_n(&ring_said, __ATOMIC_RELAXED);
	     tries++) {
		int bi, v;

		assert_int_equal(djinn_graph_new(s, &g), 0);
		in = djinn_graph_input(g, t);
		bi = djinn_graph_input(g, bt);
		assert_true(in >= 0 && bi >= 0);
		assert_true(djinn_graph_output(g, djinn_op_relu(g, in)) >= 0);
		v = bi;
		for (int k = 0; k < 16; k++)
			v = djinn_op_add(g, v, bi);
		assert_true(djinn_graph_output(g, v) >= 0);
		assert_int_equal(djinn_submit(g, &req), 0);
		djinn_set_log(on_log, NULL);
		assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), 0);
		djinn_set_log(NULL, NULL);
		r = djinn_request_results(req, 0);
		assert_non_null(r);
		assert_int_equal(djinn_result_read(r, 0, sizeof(y), y), 0);
		assert_true(y[0] == 0 && y[1] == 2 && y[2] == 0 && y[3] == 4);
		djinn_request_free(req);
		djinn_graph_free(g);
	}
	free(big);
	assert_int_equal(ksession("libdjinn-k", &m), 0);
	assert_int_equal(m.posts, tries);
	/* djinn_wait() found the record in the ring at least once */
	assert_true(__atomic_load_n(&ring_said, __ATOMIC_RELAXED) > 0);
	/* the next heartbeat gave the slot back: the ring is empty */
	assert_int_equal(djinn_session_heartbeat(s), 0);

	assert_int_equal(djinn_session_close(s), 0);
	assert_int_equal(ksession("libdjinn-k", &m), -ENOENT);
	djinn_disconnect(conn);
}

/* The kernel sessions of tenant @tenant: how many, of kind @kind. */
static int ksessions(const char *tenant, uint32_t kind)
{
	static struct kt_nl_msg all[256];
	int err, n, k = 0;
	struct kt_nl *nl = kt_nl_open(false, &err);

	assert_non_null(nl);
	n = kt_nl_dump(nl, all, 256);
	kt_nl_close(nl);
	for (int i = 0; i < n; i++)
		k += !strcmp(all[i].tenant, tenant) && all[i].kind == kind;
	return k;
}

static void test_opt_out(void **state)
{
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct kt_nl_msg m;
	int before = ksessions("uid:0", DJINN_SESSION_PROXY);

	setenv("DJINN_KDEV", "0", 1);
	s = open_session(&conn, "libdjinn-p");
	unsetenv("DJINN_KDEV");
	/* no kernel session of its own: a proxy djinnd made, whose tenant
	 * is djinnd's (who connected: root), not the label */
	assert_int_equal(ksession("libdjinn-p", &m), -ENOENT);
	assert_int_equal(ksessions("uid:0", DJINN_SESSION_PROXY), before + 1);
	assert_int_equal(djinn_session_close(s), 0);
	djinn_disconnect(conn);
}

/* A libdjinn client holding 16 MiB dies by SIGKILL: freed at once. */
static void test_killed_client(void **state)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
				       .ndim = 1,
				       .dims = { 16 << 20 } };
	int pfd[2], status;
	uint64_t id, t0;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct djinn_session_info si;
		struct djinn_conn *conn;
		struct djinn_session *s;
		struct djinn_tensor *t;
		struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;

		o.tenant = "libdjinn-dies";
		if (djinn_connect("unix:" DJD_SOCK, &conn) ||
		    djinn_session_open(conn, &o, &s) ||
		    djinn_tensor_upload(s, &d, NULL, DJINN_SEG_DATA, &t) ||
		    djinn_session_info(s, &si))
			_exit(1);
		if (write(pfd[1], &si.id, sizeof(si.id)) != sizeof(si.id))
			_exit(1);
		for (;;)
			pause();
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &id, sizeof(id)), sizeof(id));
	close(pfd[0]);
	assert_int_equal(djd_session(id, NULL), 0);
	t0 = djd_now_ns();
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	while (djd_session(id, NULL) == 0) {
		if (djd_now_ns() - t0 > 10000000000ull)
			fail_msg("still there 10 s after SIGKILL (lease 60 s)");
		usleep(2000);
	}
	print_message("freed %llu ms after SIGKILL\n",
		      (unsigned long long)((djd_now_ns() - t0) / 1000000));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_binds),
		cmocka_unit_test(test_opt_out),
		cmocka_unit_test(test_killed_client),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
