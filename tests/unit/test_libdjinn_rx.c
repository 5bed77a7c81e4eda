// SPDX-License-Identifier: MIT
/*
 * Unit tests for libdjinn's receiver against a broken peer: one that
 * closes the connection, cuts a frame short or sends frames that break
 * the protocol. Every waiter must get -ECONNRESET or -EPROTO promptly,
 * and every later call the same error at once. The peer is the far end
 * of a socketpair, driven frame by frame; it answers nothing properly.
 *
 * One more: a peer of another protocol version refusing HELLO, which
 * libdjinn must report as -EPROTONOSUPPORT naming both versions; and
 * djinnd's GOAWAY, which answers no request and breaks nothing (but is
 * -EPROTO with a payload or the error flag).
 *
 * Then who reads (leader/follower, wire.c): a caller waiting for its
 * answer reads the socket and wakes other waiters with theirs, hands the
 * reading to the next waiter or back to the receiver when it is done; the
 * receiver reads the answers nobody waits for and notices a hang-up with
 * nothing pending; a page fault is served while a caller reads; and many
 * threads making synchronous and asynchronous calls all fail promptly
 * when the peer hangs up in the middle of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <setjmp.h>
#include <cmocka.h>

#include "array_size.h"
#include "testutil.h"
#include "test_libdjinn.h"

/* A waiter may take this long to hear of a broken connection. */
#define PROMPT_NS NSEC_PER_SEC

struct waiter {
	pthread_t thread;
	struct djinn_conn *conn;
	int ret;
	uint64_t done_ns;
};

static void *ping(void *arg)
{
	struct waiter *w = arg;

	w->ret = djinn_conn_ping(w->conn);
	w->done_ns = mono_ns();
	return NULL;
}

static void start_pings(struct waiter *w, unsigned int n,
			struct djinn_conn *conn)
{
	for (unsigned int i = 0; i < n; i++) {
		w[i].conn = conn;
		assert_int_equal(
			pthread_create(&w[i].thread, NULL, ping, &w[i]), 0);
	}
}

/* Every waiter got @err within PROMPT_NS of @t0, and so does a new call. */
static void expect_failed(struct waiter *w, unsigned int n,
			  struct djinn_conn *conn, int err, uint64_t t0)
{
	uint64_t t1;

	for (unsigned int i = 0; i < n; i++) {
		pthread_join(w[i].thread, NULL);
		if (w[i].ret != err)
			fail_msg("waiter %u: %d, want %d", i, w[i].ret, err);
		assert_true(w[i].done_ns - t0 < PROMPT_NS);
	}
	t1 = mono_ns();
	assert_int_equal(djinn_conn_ping(conn), err);
	assert_true(mono_ns() - t1 < PROMPT_NS);
}

/* ---------------------------------------------------------------------- */

static void test_peer_closes(void **state)
{
	struct waiter w[8];
	struct djinn_conn *conn;
	struct djinn_conn_stats st;
	struct djinn_hdr h;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	start_pings(w, 8, conn);
	for (int i = 0; i < 8; i++) /* all eight are waiting */
		peer_frame(peer, &h);
	t0 = mono_ns();
	close(peer);
	expect_failed(w, 8, conn, -ECONNRESET, t0);
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.requests, 8);
	assert_int_equal(st.bytes_sent, 8 * sizeof(struct djinn_hdr));
	assert_int_equal(st.responses, 0);
	djinn_disconnect(conn);
}

/*
 * djinnd's GOAWAY answers no request and breaks nothing: the answer after
 * it completes its call, and the close after that fails the next call
 * as any close does (this connection was made without an address, so
 * it is not dialled again).
 */
static void test_goaway(void **state)
{
	struct djinn_hdr goaway = { .magic = DJINN_MAGIC,
				    .version = DJINN_PROTO_VERSION,
				    .type = DJINN_MSG_GOAWAY,
				    .flags = DJINN_F_RESPONSE };
	struct djinn_conn *conn;
	struct djinn_hdr h;
	struct waiter w;
	int peer;

	conn = pair_conn(&peer);
	start_pings(&w, 1, conn);
	peer_frame(peer, &h);
	assert_int_equal(send(peer, &goaway, sizeof(goaway), MSG_NOSIGNAL),
			 (ssize_t)sizeof(goaway));
	h.flags = DJINN_F_RESPONSE;
	assert_int_equal(send(peer, &h, sizeof(h), MSG_NOSIGNAL),
			 (ssize_t)sizeof(h));
	pthread_join(w.thread, NULL);
	assert_int_equal(w.ret, 0);
	close(peer);
	assert_int_equal(djinn_conn_ping(conn), -ECONNRESET);
	djinn_disconnect(conn);
}

/* A frame cut short, then EOF. */
static void test_peer_truncates(void **state)
{
	struct djinn_conn *conn;
	struct djinn_hdr h;
	struct waiter w;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	start_pings(&w, 1, conn);
	peer_frame(peer, &h);
	h.flags = DJINN_F_RESPONSE;
	write_full(peer, &h, 20);
	t0 = mono_ns();
	close(peer);
	expect_failed(&w, 1, conn, -ECONNRESET, t0);
	djinn_disconnect(conn);
}

/* An error payload cut short, then EOF. */
static void test_peer_truncates_payload(void **state)
{
	struct djinn_error e = { .error = -ENOENT, .len = 10 };
	struct djinn_conn *conn;
	struct djinn_hdr h;
	struct waiter w;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	start_pings(&w, 1, conn);
	peer_frame(peer, &h);
	h.flags = DJINN_F_RESPONSE | DJINN_F_ERROR;
	h.payload_len = sizeof(e) + 10;
	write_full(peer, &h, sizeof(h));
	write_full(peer, &e, sizeof(e));
	write_full(peer, "no s", 4);
	t0 = mono_ns();
	close(peer);
	expect_failed(&w, 1, conn, -ECONNRESET, t0);
	djinn_disconnect(conn);
}

/* Garbage where a header should be. */
static void test_peer_garbage(void **state)
{
	struct djinn_conn *conn;
	struct waiter w[3];
	uint8_t junk[64];
	struct djinn_hdr h;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	start_pings(w, 3, conn);
	for (int i = 0; i < 3; i++)
		peer_frame(peer, &h);
	memset(junk, 0xa5, sizeof(junk));
	t0 = mono_ns();
	write_full(peer, junk, sizeof(junk));
	expect_failed(w, 3, conn, -EPROTO, t0);
	close(peer);
	djinn_disconnect(conn);
}

/*
 * Frames that parse but break the protocol, each built from the header of
 * the ping it answers: what is changed, and the payload that follows.
 */
struct bad_frame {
	const char *what;
	void (*mangle)(struct djinn_hdr *h, uint8_t *payload, size_t *len);
};

static void bad_magic(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->magic = 0x314e4a45;
}
static void no_response_flag(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->flags = 0;
}
static void unknown_flag(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->flags |= 1u << 2;
}
static void reserved(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->__reserved = 1;
}
static void unknown_id(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->request_id += 1000;
}
static void other_opcode(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->type = DJINN_MSG_SIGNAL;
}
static void other_version(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->version = DJINN_PROTO_VERSION + 1;
}
static void huge_payload(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->payload_len = DJINN_MAX_PAYLOAD + 1;
}
static void unexpected_payload(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	*len = 8; /* a plain HEARTBEAT answers with nothing */
	h->payload_len = 8;
}

static void error_frame(struct djinn_hdr *h, uint8_t *p, size_t *len,
			int32_t err, uint32_t msglen, uint64_t plen)
{
	struct djinn_error e = { .error = err, .len = msglen };

	h->flags |= DJINN_F_ERROR;
	h->payload_len = plen;
	memcpy(p, &e, sizeof(e));
	memset(p + sizeof(e), 'x', plen > sizeof(e) ? plen - sizeof(e) : 0);
	*len = plen;
}
static void error_short(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	error_frame(h, p, len, -ENOENT, 0, 4);
}
static void error_positive(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	error_frame(h, p, len, ENOENT, 3, 11);
}
static void error_zero(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	error_frame(h, p, len, 0, 0, 8);
}
static void error_len_mismatch(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	error_frame(h, p, len, -ENOENT, 10, 8 + 5);
}
static void error_msg_too_long(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	error_frame(h, p, len, -EINVAL, DJINN_MAX_ERROR_MSG + 1,
		    8 + DJINN_MAX_ERROR_MSG + 1);
}

/* djinnd's GOAWAY (answering no request) with what it never carries */
static void goaway_payload(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->type = DJINN_MSG_GOAWAY;
	h->request_id = 0;
	h->payload_len = *len = 8;
}
static void goaway_error(struct djinn_hdr *h, uint8_t *p, size_t *len)
{
	h->type = DJINN_MSG_GOAWAY;
	h->request_id = 0;
	h->flags |= DJINN_F_ERROR;
}

static const struct bad_frame bad_frames[] = {
	{ "bad magic", bad_magic },
	{ "no RESPONSE flag", no_response_flag },
	{ "unknown flag", unknown_flag },
	{ "reserved header field", reserved },
	{ "answer to no request", unknown_id },
	{ "answer with another opcode", other_opcode },
	{ "answer in another version", other_version },
	{ "payload over the limit", huge_payload },
	{ "payload where none is due", unexpected_payload },
	{ "error shorter than its struct", error_short },
	{ "error with a positive errno", error_positive },
	{ "error with errno 0", error_zero },
	{ "error whose len disagrees", error_len_mismatch },
	{ "error message over the limit", error_msg_too_long },
	{ "GOAWAY with a payload", goaway_payload },
	{ "GOAWAY flagged as an error", goaway_error },
};

static void test_bad_frames(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(bad_frames); i++) {
		uint8_t frame[sizeof(struct djinn_hdr) + 8 +
			      DJINN_MAX_ERROR_MSG + 8];
		uint8_t *payload = frame + sizeof(struct djinn_hdr);
		struct djinn_conn *conn;
		struct djinn_hdr h;
		struct waiter w;
		size_t len = 0;
		uint64_t t0;
		int peer;

		conn = pair_conn(&peer);
		start_pings(&w, 1, conn);
		peer_frame(peer, &h);
		h.flags = DJINN_F_RESPONSE;
		bad_frames[i].mangle(&h, payload, &len);
		memcpy(frame, &h, sizeof(h));
		t0 = mono_ns();
		/* one write: the library may hang up after the header */
		assert_int_equal(send(peer, frame, sizeof(h) + len,
				      MSG_NOSIGNAL),
				 (ssize_t)(sizeof(h) + len));
		pthread_join(w.thread, NULL);
		if (w.ret != -EPROTO)
			fail_msg("%s: %d, want -EPROTO", bad_frames[i].what,
				 w.ret);
		assert_true(w.done_ns - t0 < PROMPT_NS);
		assert_int_equal(djinn_conn_ping(conn), -EPROTO);
		close(peer);
		djinn_disconnect(conn);
	}
}

/* A submitted graph whose connection dies: wait, poll and the message. */
static void test_pending_request(void **state)
{
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	struct djinn_tensor *t;
	struct djinn_hdr h;
	uint8_t buf[16];
	void *addr;
	int peer;

	conn = pair_conn(&peer);
	s = fake_session(conn, 5, 3600 * NSEC_PER_SEC);
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	assert_int_equal(djinn_graph_new(s, &g), 0);
	djinn_graph_output(g, djinn_op_gelu(g, djinn_graph_input(g, t)));
	assert_int_equal(djinn_submit(g, &req), 0);
	peer_frame(peer, &h);
	assert_int_equal(h.type, DJINN_MSG_GRAPH_SUBMIT);
	assert_int_equal(h.session_id, 5);
	assert_int_equal(djinn_poll(req), -EAGAIN);
	assert_int_equal(djinn_wait(req, NSEC_PER_MSEC), -ETIMEDOUT);
	assert_string_equal(djinn_request_error(req), "");

	close(peer);
	assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), -ECONNRESET);
	assert_int_equal(djinn_poll(req), -ECONNRESET);
	assert_string_equal(djinn_request_error(req),
			    "djinnd closed the connection");
	assert_int_equal(djinn_result_read(djinn_request_results(req, 0), 0, 16,
					   buf),
			 -ECONNRESET);
	assert_int_equal(djinn_result_map(djinn_request_results(req, 0), &addr),
			 -ECONNRESET);
	assert_int_equal(djinn_submit(g, &req), -ECONNRESET);
	assert_int_equal(djinn_tensor_release(t), -ECONNRESET);
	assert_int_equal(djinn_session_close(s), -ECONNRESET);
	djinn_disconnect(conn); /* frees g and the request */
}

/* ---------------------------------------------------------------------- */
/* HELLO */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[4][512];
static int nr_logged;

/* Called by the test's thread and by the receiver. */
static void log_hook(void *arg, int level, const char *msg)
{
	pthread_mutex_lock(&log_lock);
	if (level == DJINN_LOG_ERROR && nr_logged < 4)
		snprintf(logged[nr_logged++], sizeof(logged[0]), "%s", msg);
	pthread_mutex_unlock(&log_lock);
}

struct hello_peer {
	int fd;
	bool refuse; /* answer as version 2 would; else close */
};

static void *hello_peer(void *arg)
{
	struct hello_peer *p = arg;
	const char msg[] = "protocol version 1 is not 2";
	struct djinn_error e = { .error = -EPROTONOSUPPORT,
				 .len = sizeof(msg) - 1 };
	struct djinn_hdr h;

	peer_frame(p->fd, &h);
	if (p->refuse) {
		h.version = 2;
		h.flags = DJINN_F_RESPONSE | DJINN_F_ERROR;
		h.payload_len = sizeof(e) + e.len;
		write_full(p->fd, &h, sizeof(h));
		write_full(p->fd, &e, sizeof(e));
		write_full(p->fd, msg, e.len);
	}
	close(p->fd);
	return NULL;
}

static void test_hello(void **state)
{
	struct hello_peer p;
	struct djinn_conn *conn;
	pthread_t th;
	int i;

	/* closed during HELLO */
	conn = pair_conn(&p.fd);
	p.refuse = false;
	pthread_create(&th, NULL, hello_peer, &p);
	assert_int_equal(__djinn_hello(conn), -ECONNRESET);
	pthread_join(th, NULL);
	djinn_disconnect(conn);

	/* refused by a version-2 peer: both versions reach the log */
	djinn_set_log(log_hook, NULL);
	conn = pair_conn(&p.fd);
	p.refuse = true;
	pthread_create(&th, NULL, hello_peer, &p);
	assert_int_equal(__djinn_hello(conn), -EPROTONOSUPPORT);
	pthread_join(th, NULL);
	djinn_disconnect(conn); /* the receiver logs no more */
	djinn_set_log(NULL, NULL);
	for (i = 0; i < nr_logged; i++) /* the peer's close is logged too */
		if (!strcmp(logged[i], "djinnd speaks protocol version 2, "
				       "libdjinn version 1: protocol version "
				       "1 is not 2"))
			break;
	if (i == nr_logged)
		fail_msg("versions not logged; first of %d: %s", nr_logged,
			 logged[0]);
}

/* ---------------------------------------------------------------------- */
/* Who reads */

/* Poll @expr, about @conn's state, under conn->lock for up to PROMPT_NS:
 * true once it holds. */
#define WAIT_UNTIL(conn, expr)                                    \
	({                                                        \
		uint64_t __t0 = mono_ns();                        \
		bool __ok;                                        \
                                                                  \
		for (;;) {                                        \
			pthread_mutex_lock(&(conn)->lock);        \
			__ok = (expr);                            \
			pthread_mutex_unlock(&(conn)->lock);      \
			if (__ok || mono_ns() - __t0 > PROMPT_NS) \
				break;                            \
			usleep(1000);                             \
		}                                                 \
		__ok;                                             \
	})

/* A synchronous HEARTBEAT of session @session_id, in a thread of its own. */
struct caller {
	pthread_t thread;
	struct djinn_conn *conn;
	uint64_t session_id;
	struct djinn_session_resp resp;
	atomic_bool done;
	int ret;
};

static void *heartbeat_call(void *arg)
{
	struct caller *c = arg;

	c->ret = __djinn_call_sync(c->conn, DJINN_MSG_HEARTBEAT, c->session_id,
				   NULL, 0, &c->resp, sizeof(c->resp));
	atomic_store(&c->done, true);
	return NULL;
}

static void start_call(struct caller *c, struct djinn_conn *conn,
		       uint64_t session_id)
{
	c->conn = conn;
	c->session_id = session_id;
	atomic_init(&c->done, false);
	assert_int_equal(pthread_create(&c->thread, NULL, heartbeat_call, c),
			 0);
}

/* @c returned within PROMPT_NS, with the answer for its session. */
static void expect_answered(struct caller *c, uint64_t lease_ns)
{
	uint64_t t0 = mono_ns();

	while (!atomic_load(&c->done) && mono_ns() - t0 < PROMPT_NS)
		usleep(1000);
	assert_true(atomic_load(&c->done));
	pthread_join(c->thread, NULL);
	assert_int_equal(c->ret, 0);
	assert_int_equal(c->resp.session_id, c->session_id);
	assert_int_equal(c->resp.lease_ns, lease_ns);
}

/* Answer the request whose header is @req with @payload[@len]. */
static void answer(int peer, const struct djinn_hdr *req, const void *payload,
		   size_t len)
{
	struct djinn_hdr h = *req;

	h.flags = DJINN_F_RESPONSE;
	h.payload_len = len;
	write_full(peer, &h, sizeof(h));
	if (len)
		write_full(peer, payload, len);
}

static void answer_session(int peer, const struct djinn_hdr *req,
			   uint64_t lease_ns)
{
	struct djinn_session_resp r = { .session_id = req->session_id,
					.lease_ns = lease_ns };

	answer(peer, req, &r, sizeof(r));
}

/* CPU time of the whole process so far, in ns. */
static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
		       NSEC_PER_SEC +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) *
		       NSEC_PER_USEC;
}

/*
 * a waits and so reads; b, waiting behind it, gets its answer from a's
 * reading, with its own payload, while a goes on waiting. Nobody spins
 * meanwhile.
 */
static void test_reader_wakes_other(void **state)
{
	struct caller a, b;
	struct djinn_conn_stats st;
	struct djinn_hdr ha, hb;
	struct djinn_conn *conn;
	uint64_t cpu;
	int peer;

	conn = pair_conn(&peer);
	start_call(&a, conn, 1);
	peer_frame(peer, &ha);
	assert_int_equal(ha.session_id, 1);
	/* nothing is pending that the receiver reads for: a reads */
	assert_true(WAIT_UNTIL(conn, conn->rx_busy && !conn->nr_async));
	start_call(&b, conn, 2);
	peer_frame(peer, &hb);
	assert_int_equal(hb.session_id, 2);
	assert_true(WAIT_UNTIL(conn, !list_empty(&conn->rx_followers)));

	/* a sleeps in recv(), b on its cond, the receiver in poll() */
	cpu = cpu_ns();
	usleep(200000);
	if (cpu_ns() - cpu > 50 * NSEC_PER_MSEC)
		fail_msg("%llu ms of CPU in 200 ms of waiting",
			 (unsigned long long)(cpu_ns() - cpu) / NSEC_PER_MSEC);

	answer_session(peer, &hb, 222);
	expect_answered(&b, 222);
	assert_false(atomic_load(&a.done));
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.responses, 1);
	assert_int_equal(st.bytes_received,
			 sizeof(hb) + sizeof(struct djinn_session_resp));
	/* a still holds the token, nobody is queued for it */
	pthread_mutex_lock(&conn->lock);
	assert_true(conn->rx_busy);
	assert_true(list_empty(&conn->rx_followers));
	pthread_mutex_unlock(&conn->lock);

	answer_session(peer, &ha, 111);
	expect_answered(&a, 111);
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.responses, 2);
	assert_true(WAIT_UNTIL(conn, !conn->rx_busy));
	djinn_disconnect(conn);
	close(peer);
}

/* a's answer comes first: a hands the reading to b, which reads its own. */
static void test_reader_hands_over(void **state)
{
	struct caller a, b;
	struct djinn_hdr ha, hb;
	struct djinn_conn *conn;
	int peer;

	conn = pair_conn(&peer);
	start_call(&a, conn, 1);
	peer_frame(peer, &ha);
	assert_true(WAIT_UNTIL(conn, conn->rx_busy));
	start_call(&b, conn, 2);
	peer_frame(peer, &hb);
	assert_true(WAIT_UNTIL(conn, !list_empty(&conn->rx_followers)));

	answer_session(peer, &ha, 111);
	expect_answered(&a, 111);
	/* b has the token now, and is reading */
	assert_true(WAIT_UNTIL(conn, conn->rx_busy &&
					     list_empty(&conn->rx_followers)));
	assert_false(atomic_load(&b.done));
	answer_session(peer, &hb, 222);
	expect_answered(&b, 222);
	assert_true(WAIT_UNTIL(conn, !conn->rx_busy));
	djinn_disconnect(conn);
	close(peer);
}

/* A graph to submit on @s: gelu of @t, f32 [4]. */
static struct djinn_graph_builder *gelu_graph(struct djinn_session *s,
					      struct djinn_tensor *t)
{
	struct djinn_graph_builder *g;
	int y;

	assert_int_equal(djinn_graph_new(s, &g), 0);
	y = djinn_op_gelu(g, djinn_graph_input(g, t));
	assert_true(y >= 0);
	assert_int_equal(djinn_graph_output(g, y), 0);
	return g;
}

/* The answer to a GRAPH_SUBMIT of gelu_graph(): one f32 [4] result. */
struct graph_answer {
	struct djinn_graph_resp g;
	struct djinn_tensor_resp t;
};

static struct graph_answer graph_answer(uint64_t handle)
{
	return (struct graph_answer){
		.g = { .nr_outputs = 1 },
		.t = { .handle = handle, .desc = D(DJINN_DTYPE_F32, 4) },
	};
}

/*
 * A graph submitted while a caller reads: when the caller is done, the
 * receiver reads, and the graph completes with nobody waiting for it.
 */
static void test_receiver_takes_over(void **state)
{
	struct graph_answer ga = graph_answer(0x77);
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_hdr ha, hg;
	struct djinn_conn *conn;
	struct caller a;
	uint64_t t0;
	int peer, ret;

	conn = pair_conn(&peer);
	s = fake_session(conn, 5, 3600 * NSEC_PER_SEC);
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	g = gelu_graph(s, t);
	start_call(&a, conn, 5);
	peer_frame(peer, &ha);
	assert_true(WAIT_UNTIL(conn, conn->rx_busy));

	assert_int_equal(djinn_submit(g, &req), 0);
	peer_frame(peer, &hg);
	assert_int_equal(hg.type, DJINN_MSG_GRAPH_SUBMIT);
	/* a holds the token, the receiver is left alone until a is done */
	pthread_mutex_lock(&conn->lock);
	assert_true(conn->rx_busy);
	assert_int_equal(conn->nr_async, 1);
	pthread_mutex_unlock(&conn->lock);

	answer_session(peer, &ha, 111);
	expect_answered(&a, 111);
	/* a gave the token to the receiver, which waits for the answer */
	assert_true(WAIT_UNTIL(conn, conn->rx_busy && !conn->rx_wants));
	usleep(10000);
	assert_int_equal(djinn_poll(req), -EAGAIN);
	answer(peer, &hg, &ga, sizeof(ga));
	t0 = mono_ns();
	while ((ret = djinn_poll(req)) == -EAGAIN && mono_ns() - t0 < PROMPT_NS)
		usleep(1000);
	assert_int_equal(ret, 0);
	assert_int_equal(djinn_request_results(req, 0)->handle, 0x77);
	/* nothing more to read for anyone: the token is free */
	assert_true(WAIT_UNTIL(conn, !conn->rx_busy && !conn->nr_async));
	djinn_request_free(req);
	djinn_disconnect(conn);
	close(peer);
}

/*
 * The next frame from the library, which must come within PROMPT_NS:
 * a HEARTBEAT or a TENSOR_RELEASE is answered, the first counted in
 * *@heartbeats, and true returned; others are the caller's (false).
 */
static bool serve_next(int peer, struct djinn_hdr *h, unsigned int *heartbeats)
{
	struct pollfd pfd = { .fd = peer, .events = POLLIN };

	assert_int_equal(poll(&pfd, 1, PROMPT_NS / NSEC_PER_MSEC), 1);
	peer_frame(peer, h);
	if (h->type == DJINN_MSG_HEARTBEAT) {
		answer_session(peer, h, 30 * NSEC_PER_MSEC);
		++*heartbeats;
		return true;
	}
	if (h->type == DJINN_MSG_TENSOR_RELEASE) {
		answer(peer, h, NULL, 0);
		return true;
	}
	return false;
}

/*
 * Answers nobody waits in a call to read, so that the receiver must: a
 * graph only polled for, one waited for with a timeout, the keeper's
 * heartbeats (the next goes out only once the last answer was read) and
 * the releases of the graphs' results.
 */
static void test_async_alone(void **state)
{
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct graph_answer ga;
	struct djinn_conn *conn;
	unsigned int heartbeats = 0;
	struct djinn_hdr h;
	uint64_t t0;
	int peer, ret;

	conn = pair_conn(&peer);
	s = fake_session(conn, 5,
			 30 * NSEC_PER_MSEC); /* heartbeats every 10 ms */
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	g = gelu_graph(s, t);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(djinn_submit(g, &req), 0);
		while (serve_next(peer, &h, &heartbeats))
			;
		assert_int_equal(h.type, DJINN_MSG_GRAPH_SUBMIT);
		ga = graph_answer(0x70 + i);
		answer(peer, &h, &ga, sizeof(ga));
		t0 = mono_ns();
		do {
			if (i)
				ret = djinn_wait(req, NSEC_PER_MSEC);
			else if ((ret = djinn_poll(req)) == -EAGAIN)
				usleep(1000);
		} while ((ret == -EAGAIN || ret == -ETIMEDOUT) &&
			 mono_ns() - t0 < PROMPT_NS);
		assert_int_equal(ret, 0);
		assert_int_equal(djinn_request_results(req, 0)->handle,
				 0x70 + i);
		djinn_request_free(req); /* the keeper releases the result */
	}
	while (heartbeats < 5)
		assert_true(serve_next(peer, &h, &heartbeats));
	djinn_disconnect(conn);
	close(peer);
}

/* The peer hangs up while nothing is pending: noticed without a call. */
static void test_idle_hangup(void **state)
{
	struct djinn_conn *conn;
	struct caller a;
	struct djinn_hdr h;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	start_call(&a, conn, 3);
	peer_frame(peer, &h);
	answer_session(peer, &h, 333);
	expect_answered(&a, 333);
	assert_true(WAIT_UNTIL(conn, !conn->rx_busy));

	t0 = mono_ns();
	close(peer);
	assert_true(WAIT_UNTIL(conn, conn->rx_failed));
	assert_true(mono_ns() - t0 < PROMPT_NS);
	assert_int_equal(atomic_load(&conn->dead), -ECONNRESET);
	assert_int_equal(djinn_conn_ping(conn), -ECONNRESET);
	djinn_disconnect(conn);
}

/* Touch the first float of a mapped result, in a thread. */
struct toucher {
	pthread_t thread;
	const float *p;
	float v;
	atomic_bool done;
};

static void *touch(void *arg)
{
	struct toucher *to = arg;

	to->v = to->p[3];
	atomic_store(&to->done, true);
	return NULL;
}

static bool uffd_available(void)
{
	int fd = (int)syscall(SYS_userfaultfd,
			      O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);

	if (fd < 0)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	close(fd);
	return !getenv("DJINN_NO_UFFD");
}

/*
 * A page fault while a caller reads: the fault handler's TENSOR_READ
 * waits behind the caller, whose reading brings the page in.
 */
static void test_fault_while_reading(void **state)
{
	struct graph_answer ga = graph_answer(0x77);
	const float data[4] = { 1, 2, 3, 4.5f };
	struct djinn_graph_builder *g;
	struct djinn_tensor_io io;
	struct djinn_conn_stats st;
	struct djinn_request *req;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_hdr h, ha;
	struct djinn_conn *conn;
	struct toucher to = { 0 };
	struct caller a;
	uint64_t t0;
	void *addr;
	int peer;

	if (!uffd_available()) {
		print_message("no userfaultfd here: nothing to test\n");
		skip();
	}
	conn = pair_conn(&peer);
	s = fake_session(conn, 5, 3600 * NSEC_PER_SEC);
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	g = gelu_graph(s, t);
	assert_int_equal(djinn_submit(g, &req), 0);
	peer_frame(peer, &h);
	answer(peer, &h, &ga, sizeof(ga));
	assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), 0);
	assert_int_equal(djinn_result_map(djinn_request_results(req, 0), &addr),
			 0);
	assert_int_equal(conn->uffd_err, 1);

	start_call(&a, conn, 5);
	peer_frame(peer, &ha);
	assert_true(WAIT_UNTIL(conn, conn->rx_busy && !conn->nr_async));

	to.p = addr;
	assert_int_equal(pthread_create(&to.thread, NULL, touch, &to), 0);
	assert_true(read_full(peer, &h, sizeof(h)));
	assert_int_equal(h.type, DJINN_MSG_TENSOR_READ);
	assert_int_equal(h.payload_len, sizeof(io));
	assert_true(read_full(peer, &io, sizeof(io)));
	assert_int_equal(io.handle, 0x77);
	assert_int_equal(io.offset, 0);
	assert_int_equal(io.len, sizeof(data));
	/* the fault handler waits behind a */
	assert_true(WAIT_UNTIL(conn, !list_empty(&conn->rx_followers)));
	answer(peer, &h, data, sizeof(data));
	t0 = mono_ns();
	while (!atomic_load(&to.done) && mono_ns() - t0 < PROMPT_NS)
		usleep(1000);
	assert_true(atomic_load(&to.done));
	pthread_join(to.thread, NULL);
	assert_true(to.v == 4.5f);
	assert_false(atomic_load(&a.done));
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.map_faults, 1);

	answer_session(peer, &ha, 111);
	expect_answered(&a, 111);
	assert_int_equal(djinn_result_unmap(djinn_request_results(req, 0)), 0);
	djinn_request_free(req);
	djinn_disconnect(conn);
	close(peer);
}

/*
 * A peer that answers every frame properly, @limit of them, then writes
 * half a header and hangs up. Sends with MSG_NOSIGNAL and asserts
 * nothing: it runs beside cmocka's thread.
 */
struct auto_peer {
	pthread_t thread;
	int fd;
	unsigned int limit;
	unsigned int answered;
	uint64_t closed_ns;
};

static bool send_full(int fd, const void *buf, size_t len)
{
	return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len;
}

static void *auto_peer(void *arg)
{
	struct auto_peer *p = arg;
	uint8_t frame[sizeof(struct djinn_hdr) + sizeof(struct graph_answer)];
	struct djinn_hdr h;
	uint8_t skip[4096];
	uint64_t handle = 0x1000;

	for (;;) {
		struct graph_answer ga;
		struct djinn_session_resp sr = { 0 };
		const void *payload = NULL;
		size_t len = 0;
		bool ok = read_full(p->fd, &h, sizeof(h));

		for (uint64_t left = h.payload_len; ok && left;) {
			size_t n = left < sizeof(skip) ? left : sizeof(skip);

			ok = read_full(p->fd, skip, n);
			left -= n;
		}
		if (!ok)
			break;
		if (h.type == DJINN_MSG_HEARTBEAT && h.session_id) {
			sr.session_id = h.session_id;
			sr.lease_ns = 30 * NSEC_PER_MSEC;
			payload = &sr;
			len = sizeof(sr);
		} else if (h.type == DJINN_MSG_GRAPH_SUBMIT) {
			ga = graph_answer(handle++);
			payload = &ga;
			len = sizeof(ga);
		}
		h.flags = DJINN_F_RESPONSE;
		h.payload_len = len;
		memcpy(frame, &h, sizeof(h));
		if (len)
			memcpy(frame + sizeof(h), payload, len);
		if (p->answered == p->limit) {
			send_full(p->fd, frame, sizeof(h) / 2);
			break;
		}
		if (!send_full(p->fd, frame, sizeof(h) + len))
			break;
		p->answered++;
	}
	p->closed_ns = mono_ns();
	close(p->fd);
	return NULL;
}

/*
 * struct worker - a thread making calls until one fails
 * @kind: 0 pings; 1 session heartbeats; 2 graphs waited for, polled and
 *        waited for with a timeout in turn
 */
struct worker {
	pthread_t thread;
	int kind;
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_graph_builder *g;
	unsigned int ok;
	int ret;
	uint64_t done_ns;
};

static int graph_call(struct worker *w)
{
	struct djinn_request *req;
	int ret;

	ret = djinn_submit(w->g, &req);
	if (ret)
		return ret;
	switch (w->ok % 3) {
	case 0:
		ret = djinn_wait(req, DJINN_WAIT_FOREVER);
		break;
	case 1:
		while ((ret = djinn_poll(req)) == -EAGAIN)
			usleep(100);
		break;
	default:
		while ((ret = djinn_wait(req, NSEC_PER_MSEC)) == -ETIMEDOUT)
			;
		break;
	}
	if (!ret && djinn_request_results(req, 0)->handle < 0x1000)
		ret = -EBADMSG; /* a result that is not the peer's */
	djinn_request_free(req);
	return ret;
}

static void *work(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		if (w->kind == 0)
			w->ret = djinn_conn_ping(w->conn);
		else if (w->kind == 1)
			w->ret = djinn_session_heartbeat(w->s);
		else
			w->ret = graph_call(w);
		if (w->ret)
			break;
		w->ok++;
	}
	w->done_ns = mono_ns();
	return NULL;
}

/* Join @th, which must end within 30 s: a hang fails the test. */
static void join_or_fail(pthread_t th, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	if (pthread_timedjoin_np(th, NULL, &ts))
		fail_msg("%s hangs", what);
}

/*
 * Many threads on one connection, synchronous and asynchronous calls,
 * with the keeper's heartbeats and releases beside them; the peer hangs
 * up in the middle. Every answer sent reached its caller, and every
 * thread gets -ECONNRESET promptly.
 */
static void test_many_threads_peer_closes(void **state)
{
	static const int kinds[] = { 0, 0, 0, 0, 1, 1, 2, 2, 2 };
	struct worker w[ARRAY_SIZE(kinds)] = { 0 };
	struct auto_peer p = { .limit = 3000 };
	unsigned int ok[3] = { 0 };
	struct djinn_conn_stats st;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_conn *conn;

	conn = pair_conn(&p.fd);
	s = fake_session(conn, 5,
			 30 * NSEC_PER_MSEC); /* heartbeats every 10 ms */
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	assert_int_equal(pthread_create(&p.thread, NULL, auto_peer, &p), 0);
	for (size_t i = 0; i < ARRAY_SIZE(w); i++) {
		w[i].kind = kinds[i];
		w[i].conn = conn;
		w[i].s = s;
		if (w[i].kind == 2)
			w[i].g = gelu_graph(s, t);
		assert_int_equal(
			pthread_create(&w[i].thread, NULL, work, &w[i]), 0);
	}
	join_or_fail(p.thread, "the peer");
	for (size_t i = 0; i < ARRAY_SIZE(w); i++) {
		join_or_fail(w[i].thread, "a worker");
		if (w[i].ret != -ECONNRESET)
			fail_msg("worker %zu (kind %d): %d after %u calls", i,
				 w[i].kind, w[i].ret, w[i].ok);
		if (w[i].done_ns - p.closed_ns >= PROMPT_NS)
			fail_msg("worker %zu: %llu ms after the hang-up", i,
				 (unsigned long long)(w[i].done_ns -
						      p.closed_ns) /
					 1000000);
		ok[w[i].kind] += w[i].ok;
	}
	for (int k = 0; k < 3; k++)
		if (!ok[k])
			fail_msg("no call of kind %d succeeded", k);
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.responses, p.answered);
	assert_int_equal(p.answered, p.limit);
	assert_int_equal(djinn_conn_ping(conn), -ECONNRESET);
	/* A worker's failed send may have marked the connection dead
	 * first: the receiver sees the hang-up on its own, soon. */
	for (int i = 0; i < 30000; i++) {
		bool failed;

		pthread_mutex_lock(&conn->lock);
		failed = conn->rx_failed;
		pthread_mutex_unlock(&conn->lock);
		if (failed)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&conn->lock);
	assert_true(conn->rx_failed);
	assert_int_equal(conn->nr_async, 0);
	assert_true(list_empty(&conn->rx_followers));
	pthread_mutex_unlock(&conn->lock);
	djinn_disconnect(conn);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peer_closes),
		cmocka_unit_test(test_goaway),
		cmocka_unit_test(test_peer_truncates),
		cmocka_unit_test(test_peer_truncates_payload),
		cmocka_unit_test(test_peer_garbage),
		cmocka_unit_test(test_bad_frames),
		cmocka_unit_test(test_pending_request),
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_reader_wakes_other),
		cmocka_unit_test(test_reader_hands_over),
		cmocka_unit_test(test_receiver_takes_over),
		cmocka_unit_test(test_async_alone),
		cmocka_unit_test(test_idle_hangup),
		cmocka_unit_test(test_fault_while_reading),
		cmocka_unit_test(test_many_threads_peer_closes),
	};

	alarm(300); /* a hang fails, rather than stalling make test */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
