// SPDX-License-Identifier: MIT
/*
 * libdjinn rides a restart (libdjinn/wire.c, "Reconnecting"): a
 * connection djinnd drops is dialled again, HELLO and AUTH are sent
 * again and its sessions attached by their tokens, so a program goes on
 * with the same session and tensor handles; reads that were waiting are
 * sent again, other calls fail -ECONNABORTED, a session djinnd came
 * back without answers -ENOENT, and when
 * djinnd does not come back in the time allowed every call fails with
 * -ENOTCONN, saying what the last try met.
 *
 * A TLS connection in user mode cannot change hands at a planned
 * restart (its OpenSSL state stays in the old process), so it is the
 * one dropped: each restart test runs a djinnd with a tls: listener and
 * --handover, and restarts it with djd_restart() while a thread reads a
 * tensor over TLS. A connection over the unix socket, kept by the
 * restart, sees nothing at all.
 *
 * The certificates are made with libcrypto in a temporary directory: a
 * CA, djinnd's (SAN IP:127.0.0.1) and the client alice's.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <djinn/djinn.h>

#include "fixture.h"
#include "pki.h"
#include "../unit/testutil.h"

#define DAY (24 * 3600L)
#define LEASE_MS 60000
#define BYTES (256 * KiB)

static char pki[] = "/tmp/djinn-reconnect.XXXXXX";
static char conf[sizeof(pki) + 16], ca[sizeof(pki) + 16];
static char cert[sizeof(pki) + 16], key[sizeof(pki) + 16];
static char hpath[96], listen_at[48], tls_addr[48];
static const char *extra[] = { "--config",   conf,  "--listen", listen_at,
			       "--handover", hpath, NULL };

static int group_setup(void **state)
{
	const struct pki_cert server = { .cn = "localhost",
					 .san = "IP:127.0.0.1",
					 .not_before = -DAY,
					 .not_after = 30 * DAY,
					 .eku = "serverAuth" };
	const struct pki_cert alice = { .cn = "alice",
					.not_before = -DAY,
					.not_after = 30 * DAY,
					.eku = "clientAuth" };
	char scert[sizeof(pki) + 16], skey[sizeof(pki) + 16];
	struct pki_ca *c;
	FILE *f;

	if (!mkdtemp(pki))
		return -1;
	snprintf(ca, sizeof(ca), "%s/ca.pem", pki);
	snprintf(scert, sizeof(scert), "%s/server.pem", pki);
	snprintf(skey, sizeof(skey), "%s/server.key", pki);
	snprintf(cert, sizeof(cert), "%s/alice.pem", pki);
	snprintf(key, sizeof(key), "%s/alice.key", pki);
	snprintf(conf, sizeof(conf), "%s/djinnd.conf", pki);
	c = pki_ca_new("djinn test CA");
	assert_non_null(c);
	assert_int_equal(pki_ca_write(c, ca), 0);
	assert_int_equal(pki_issue(c, &server, scert, skey), 0);
	assert_int_equal(pki_issue(c, &alice, cert, key), 0);
	pki_ca_free(c);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "[tls]\ncertificate = %s\nkey = %s\nclient_ca = %s\n", scert,
		skey, ca);
	assert_int_equal(fclose(f), 0);
	return 0;
}

static int group_teardown(void **state)
{
	return rm_tree(pki) ? -1 : 0;
}

static int setup(void **state)
{
	unsigned int port = dj_free_port();

	if (!port)
		return -1;
	snprintf(listen_at, sizeof(listen_at), "tls:127.0.0.1:%u", port);
	snprintf(tls_addr, sizeof(tls_addr), "tls:127.0.0.1:%u", port);
	snprintf(hpath, sizeof(hpath), "/tmp/djinn-reconnect.%d",
		 (int)getpid());
	unlink(hpath);
	return fx_start_args(state, DEV_MEM, LEASE_MS, extra);
}

static int teardown(void **state)
{
	int ret = fx_teardown(state);

	unlink(hpath);
	return ret;
}

/* ---------------------------------------------------------------------- */

/* Alice's connection over TLS, trying to reconnect for @reconnect_ms. */
static struct djinn_conn *tls_conn(long reconnect_ms)
{
	struct djinn_connect_opts o = { .size = sizeof(o),
					.tls_ca = ca,
					.tls_cert = cert,
					.tls_key = key,
					.reconnect_ms = reconnect_ms };
	struct djinn_conn *c = NULL;
	int ret = djinn_connect_opts(tls_addr, &o, &c);

	if (ret)
		fail_msg("connect as alice: %s: %s", strerror(-ret),
			 djinn_last_error());
	return c;
}

static struct djinn_conn *unix_conn(struct fx *fx, long reconnect_ms)
{
	struct djinn_connect_opts o = { .size = sizeof(o),
					.reconnect_ms = reconnect_ms };
	struct djinn_conn *c = NULL;
	char addr[PATH_MAX];
	int ret;

	snprintf(addr, sizeof(addr), "unix:%s", fx->d.sock);
	ret = djinn_connect_opts(addr, &o, &c);
	if (ret)
		fail_msg("connect to %s: %s: %s", addr, strerror(-ret),
			 djinn_last_error());
	return c;
}

static struct djinn_session *xopen(struct djinn_conn *c)
{
	struct djinn_session *s = NULL;
	int ret = djinn_session_open(c, NULL, &s);

	if (ret)
		fail_msg("session open: %s: %s", strerror(-ret),
			 djinn_last_error());
	return s;
}

static uint64_t sid_of(struct djinn_session *s)
{
	struct djinn_session_info i;

	assert_int_equal(djinn_session_info(s, &i), 0);
	return i.id;
}

static void fill(uint8_t *p, size_t len, unsigned int seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* A tensor of BYTES bytes made from @seed, in *@want too. */
static struct djinn_tensor *upload(struct djinn_session *s, unsigned int seed,
				   uint8_t *want)
{
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, BYTES);
	struct djinn_tensor *t = NULL;
	int ret;

	fill(want, BYTES, seed);
	ret = djinn_tensor_upload(s, &d, want, DJINN_SEG_DATA, &t);
	if (ret)
		fail_msg("upload: %s: %s", strerror(-ret), djinn_last_error());
	return t;
}

static void expect_bytes(struct djinn_tensor *t, const uint8_t *want)
{
	static uint8_t got[BYTES];
	int ret = djinn_tensor_download(t, 0, BYTES, got);

	if (ret)
		fail_msg("download: %s: %s", strerror(-ret),
			 djinn_last_error());
	assert_memory_equal(got, want, BYTES);
}

/* Wait (10 s at most) until @c has reconnected @n times. */
static void wait_reconnects(struct djinn_conn *c, uint64_t n)
{
	for (int i = 0; i < 10000 && djinn_conn_reconnects(c) < n; i++)
		usleep(1000);
	assert_int_equal(djinn_conn_reconnects(c), n);
}

/*
 * A thread that does one step over and over until stopped or a step
 * fails: what it saw. No step may fail: across a restart libdjinn sends
 * a read that was waiting again (it may run twice), and any call after
 * djinnd's GOAWAY (it did not run).
 */
struct looper {
	pthread_t th;
	/* 0, or -errno with why in @why */
	int (*step)(struct looper *lp, char *why, size_t len);
	struct djinn_tensor *t; /* read_step's, with its bytes @want */
	const uint8_t *want;
	struct djinn_session *s; /* make_step's */
	atomic_int stop;
	atomic_long n;
	int bad;
	char why[300];
};

/* Download @lp's tensor and check its bytes. */
static int read_step(struct looper *lp, char *why, size_t len)
{
	static uint8_t got[BYTES];
	int ret = djinn_tensor_download(lp->t, 0, BYTES, got);

	snprintf(why, len, "%s", ret ? djinn_last_error() : "bytes differ");
	return ret ? ret : memcmp(got, lp->want, BYTES) ? -EIO : 0;
}

/* Make a small tensor in @lp's session, read it back and release it: a
 * TENSOR_CREATE must not run twice. */
static int make_step(struct looper *lp, char *why, size_t len)
{
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 64);
	uint8_t bytes[64], got[64];
	struct djinn_tensor *t;
	int ret;

	fill(bytes, sizeof(bytes), (unsigned int)atomic_load(&lp->n));
	ret = djinn_tensor_upload(lp->s, &d, bytes, DJINN_SEG_DATA, &t);
	if (!ret)
		ret = djinn_tensor_download(t, 0, sizeof(got), got);
	if (!ret && memcmp(got, bytes, sizeof(got))) {
		snprintf(why, len, "bytes differ");
		return -EIO;
	}
	if (!ret)
		ret = djinn_tensor_release(t);
	snprintf(why, len, "%s", djinn_last_error());
	return ret;
}

static void *loop_run(void *arg)
{
	struct looper *lp = arg;
	char why[256];

	while (!atomic_load(&lp->stop)) {
		int ret = lp->step(lp, why, sizeof(why));

		if (ret) {
			lp->bad = ret;
			snprintf(lp->why, sizeof(lp->why), "step %ld: %s: %s",
				 atomic_load(&lp->n), strerror(-ret), why);
			break;
		}
		atomic_fetch_add(&lp->n, 1);
	}
	return NULL;
}

/* Wait (10 s at most) until @lp has done @n steps, or failed. */
static void loop_wait(struct looper *lp, long n)
{
	for (int i = 0; i < 10000 && atomic_load(&lp->n) < n && !lp->bad; i++)
		usleep(1000);
	if (lp->bad)
		fail_msg("%s", lp->why);
	assert_true(atomic_load(&lp->n) >= n);
}

/* Start @lp and wait for its first 5 steps. */
static void loop_start(struct looper *lp)
{
	assert_int_equal(pthread_create(&lp->th, NULL, loop_run, lp), 0);
	loop_wait(lp, 5);
}

/* Wait for @n more steps of @lp, then stop it. */
static void loop_stop(struct looper *lp, long n)
{
	long want = atomic_load(&lp->n) + n;

	for (int i = 0; i < 10000 && atomic_load(&lp->n) < want && !lp->bad;
	     i++)
		usleep(1000);
	atomic_store(&lp->stop, 1);
	pthread_join(lp->th, NULL);
	loop_wait(lp, want);
}

/* ---------------------------------------------------------------------- */

/*
 * A planned restart: the TLS connection is dropped and comes back by
 * itself, attached to the same two sessions, whose tensors read as they
 * were, while a thread reads on through it and another makes tensors,
 * without one error; the connection over the unix socket is kept and
 * never reconnects.
 */
static void test_tls_restart(void **state)
{
	struct fx *fx = *state;
	static uint8_t want[3][BYTES];
	struct djinn_conn *c = tls_conn(0), *u = unix_conn(fx, 0);
	struct djinn_session *s1 = xopen(c), *s2 = xopen(c), *su = xopen(u);
	uint64_t id1 = sid_of(s1), id2 = sid_of(s2);
	struct djinn_tensor *t1 = upload(s1, 1, want[0]);
	struct djinn_tensor *t2 = upload(s2, 2, want[1]);
	struct djinn_tensor *tu = upload(su, 3, want[2]);
	struct looper rd = { .step = read_step, .t = t1, .want = want[0] };
	struct looper mk = { .step = make_step, .s = s2 };

	assert_string_equal(djinn_conn_transport(u), "unix");
	loop_start(&rd);
	loop_start(&mk);
	assert_int_equal(djd_restart(&fx->d, 60000), 0);
	wait_reconnects(c, 1);
	loop_stop(&rd, 20);
	loop_stop(&mk, 20);
	assert_true(djd_log_has(&fx->d, "1 of 1 TLS connections told GOAWAY"));

	/* the same sessions, their bytes, renewed by the keeper again */
	assert_int_equal(sid_of(s1), id1);
	assert_int_equal(sid_of(s2), id2);
	expect_bytes(t2, want[1]);
	assert_int_equal(djinn_session_heartbeat(s2), 0);
	assert_int_equal(djinn_conn_ping(c), 0);
	assert_true(!strncmp(djinn_conn_transport(c), "tls, ", 5));
	/* the unix connection was handed over, not dropped */
	expect_bytes(tu, want[2]);
	assert_int_equal(djinn_conn_reconnects(u), 0);

	assert_int_equal(djinn_session_close(s1), 0);
	assert_int_equal(djinn_session_close(s2), 0);
	assert_int_equal(djinn_session_close(su), 0);
	djinn_disconnect(c);
	djinn_disconnect(u);
	fx->base = vmu_now(fx);
}

/*
 * A session djinnd no longer has when the connection comes back (closed
 * from another connection of its tenant, by its token) is lost: its calls
 * fail with -ENOENT, named, and its neighbour on the same connection
 * goes on.
 */
static void test_lost_session(void **state)
{
	struct fx *fx = *state;
	static uint8_t want[2][BYTES];
	struct djinn_conn *c = tls_conn(0), *u = tls_conn(0);
	struct djinn_session *s1 = xopen(c), *s2 = xopen(c), *other;
	struct djinn_tensor *t1 = upload(s1, 4, want[0]);
	struct djinn_tensor *t2 = upload(s2, 5, want[1]);
	struct djinn_session_info i2;
	char phrase[64];

	/* closed behind @c's back, from another connection */
	assert_int_equal(djinn_session_info(s2, &i2), 0);
	assert_int_equal(djinn_session_attach(u, i2.id, i2.token, &other), 0);
	assert_int_equal(djinn_session_close(other), 0);
	djinn_disconnect(u);
	assert_int_equal(djd_restart(&fx->d, 60000), 0);
	wait_reconnects(c, 1);

	expect_bytes(t1, want[0]);
	assert_int_equal(djinn_tensor_download(t2, 0, 16, want[1]), -ENOENT);
	snprintf(phrase, sizeof(phrase), "session %llu was lost",
		 (unsigned long long)i2.id);
	assert_non_null(strstr(djinn_last_error(), phrase));
	assert_int_equal(djinn_session_heartbeat(s2), -ENOENT);
	assert_int_equal(djinn_session_close(s2), -ENOENT);
	expect_bytes(t1, want[0]);

	assert_int_equal(djinn_session_close(s1), 0);
	djinn_disconnect(c);
	fx->base = vmu_now(fx);
}

/*
 * djinnd gone for good: after the time allowed every call fails with
 * the dial's error and says so; with reconnecting off, at once with
 * the connection's.
 */
static void test_not_back(void **state)
{
	struct fx *fx = *state;
	static uint8_t want[BYTES];
	struct djinn_conn *c = unix_conn(fx, 300), *off = unix_conn(fx, -1);
	struct djinn_session *s = xopen(c), *so = xopen(off);
	struct djinn_tensor *t = upload(s, 6, want);
	int ret;

	djd_kill(&fx->d);
	fx->stopped = true;
	ret = djinn_tensor_download(t, 0, 16, want);
	if (ret != -ENOTCONN)
		fail_msg("download: %d (%s): %s", ret, strerror(-ret),
			 djinn_last_error());
	assert_non_null(strstr(djinn_last_error(), "did not come back in"));
	/* and what the last try met: the socket file went with djinnd */
	assert_non_null(strstr(djinn_last_error(), "No such file"));
	assert_int_equal(djinn_conn_ping(c), ret);
	assert_int_equal(djinn_conn_reconnects(c), 0);

	assert_int_equal(djinn_conn_ping(off), -ECONNRESET);
	assert_int_equal(djinn_conn_reconnects(off), 0);
	assert_int_equal(djinn_session_close(so), -ECONNRESET);
	assert_int_equal(djinn_session_close(s), ret);
	djinn_disconnect(c);
	djinn_disconnect(off);
}

/* A call made in a thread of its own: what it returned and said. */
struct caller {
	pthread_t th;
	struct djinn_conn *c;
	struct djinn_tensor *t;
	int ret;
	char why[DJINN_MAX_ERROR_MSG + 1];
};

static void *open_run(void *arg)
{
	struct caller *k = arg;
	struct djinn_session *s = NULL;

	k->ret = djinn_session_open(k->c, NULL, &s);
	snprintf(k->why, sizeof(k->why), "%s", djinn_last_error());
	return NULL;
}

static void *read_run(void *arg)
{
	struct caller *k = arg;
	uint8_t buf[16];

	k->ret = djinn_tensor_download(k->t, 0, sizeof(buf), buf);
	snprintf(k->why, sizeof(k->why), "%s", djinn_last_error());
	return NULL;
}

/* Wait (10 s at most) until @c has sent @n requests. */
static void wait_requests(struct djinn_conn *c, uint64_t n)
{
	struct djinn_conn_stats st = { 0 };

	for (int i = 0; i < 10000; i++) {
		assert_int_equal(djinn_conn_stats(c, &st), 0);
		if (st.requests >= n)
			return;
		usleep(1000);
	}
	fail_msg("%llu requests sent, not %llu",
		 (unsigned long long)st.requests, (unsigned long long)n);
}

/*
 * Calls in flight when djinnd dies (stopped with SIGSTOP, so that they
 * are surely sent and unanswered, then killed) and a fresh djinnd takes
 * its sockets: the session open, which may not run twice, fails with
 * -ECONNABORTED for the caller to judge; the read is sent again by
 * libdjinn and finds its session lost with the old djinnd (-ENOENT);
 * the connection itself goes on with a new session.
 */
static void test_in_flight(void **state)
{
	struct fx *fx = *state;
	static uint8_t want[BYTES];
	struct djinn_conn *c = unix_conn(fx, 20000);
	struct djinn_session *s = xopen(c), *s2;
	struct caller op = { .c = c }, rd = { .c = c };
	struct djinn_conn_stats st;
	int status;

	rd.t = upload(s, 7, want);
	assert_int_equal(djinn_conn_stats(c, &st), 0);
	assert_int_equal(kill(fx->d.pid, SIGSTOP), 0);
	assert_int_equal(pthread_create(&op.th, NULL, open_run, &op), 0);
	wait_requests(c, st.requests + 1);
	assert_int_equal(pthread_create(&rd.th, NULL, read_run, &rd), 0);
	wait_requests(c, st.requests + 2);
	assert_int_equal(kill(fx->d.pid, SIGKILL), 0);
	assert_int_equal(waitpid(fx->d.pid, &status, 0), fx->d.pid);
	fx->stopped = true; /* its admin connection died with it */
	/* a fresh one on the same sockets (nobody serves --handover) */
	fx->d.pid = djd_spawn_next(&fx->d);
	assert_true(fx->d.pid > 0);

	pthread_join(op.th, NULL);
	pthread_join(rd.th, NULL);
	if (op.ret != -ECONNABORTED || rd.ret != -ENOENT)
		djd_log_tail(&fx->d, 4096);
	if (op.ret != -ECONNABORTED || !strstr(op.why, "send it again"))
		fail_msg("SESSION_OPEN in flight: %d: %s", op.ret, op.why);
	if (rd.ret != -ENOENT || !strstr(rd.why, "was lost"))
		fail_msg("TENSOR_READ in flight: %d: %s", rd.ret, rd.why);
	wait_reconnects(c, 1);
	s2 = xopen(c);
	assert_int_equal(djinn_session_heartbeat(s2), 0);
	assert_int_equal(djinn_session_close(s2), 0);
	assert_int_equal(djinn_session_close(s), -ENOENT);
	djinn_disconnect(c);
	assert_int_equal(djd_stop(&fx->d, 10000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tls_restart, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lost_session, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_not_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_in_flight, setup,
						teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
