// SPDX-License-Identifier: MIT
/*
 * Unit tests for libdjinn's receiver against a broken peer: one that
 * closes the connection, cuts a frame short or sends frames that break
 * the protocol. Every waiter must get -ECONNRESET or -EPROTO promptly,
 * and every later call the same error at once. The peer is the far end
 * of a socketpair, driven frame by frame; it answers nothing properly.
 *
 * One more: a peer of another protocol version refusing HELLO, which
 * libdjinn must report as -EPROTONOSUPPORT naming both versions.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "test_libdjinn.h"

/* A waiter may take this long to hear of a broken connection. */
#define PROMPT_NS 1000000000ull

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
	w->done_ns = now_ns();
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
	t1 = now_ns();
	assert_int_equal(djinn_conn_ping(conn), err);
	assert_true(now_ns() - t1 < PROMPT_NS);
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
	t0 = now_ns();
	close(peer);
	expect_failed(w, 8, conn, -ECONNRESET, t0);
	djinn_conn_stats(conn, &st);
	assert_int_equal(st.requests, 8);
	assert_int_equal(st.bytes_sent, 8 * sizeof(struct djinn_hdr));
	assert_int_equal(st.responses, 0);
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
	t0 = now_ns();
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
	t0 = now_ns();
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
	t0 = now_ns();
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
	h->opcode = DJINN_OP_SIGNAL;
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
		t0 = now_ns();
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
	s = fake_session(conn, 5, 3600000000000ull);
	t = fake_tensor(s, 0x99, D(DJINN_DTYPE_F32, 4));
	assert_int_equal(djinn_graph_new(s, &g), 0);
	djinn_graph_output(g, djinn_op_gelu(g, djinn_graph_input(g, t)));
	assert_int_equal(djinn_submit(g, &req), 0);
	peer_frame(peer, &h);
	assert_int_equal(h.opcode, DJINN_OP_GRAPH_SUBMIT);
	assert_int_equal(h.session_id, 5);
	assert_int_equal(djinn_poll(req), -EAGAIN);
	assert_int_equal(djinn_wait(req, 1000000), -ETIMEDOUT);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peer_closes),
		cmocka_unit_test(test_peer_truncates),
		cmocka_unit_test(test_peer_truncates_payload),
		cmocka_unit_test(test_peer_garbage),
		cmocka_unit_test(test_bad_frames),
		cmocka_unit_test(test_pending_request),
		cmocka_unit_test(test_hello),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
