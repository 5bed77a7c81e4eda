// SPDX-License-Identifier: MIT
/*
 * The I/O loop's SQEs (djinnd/net/loop.c): a full SQ is submitted to make
 * room; a ring that takes nothing (io_uring_submit() failing, wrapped
 * here with -Wl,--wrap) makes loop_sqe() wait its 5 s, log and return
 * NULL rather than end the daemon, then fail at once until the loop has
 * reaped its completions, after which it gives SQEs again. A
 * connection whose reply finds no SQE fails: it is closed before the loop
 * next sleeps, its request unanswered, and nothing is freed under the
 * code that queued the reply (ASan would see it under make asan). usleep()
 * is wrapped too: the 5 s are counted, not slept.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "daemon.h"
#include "server.h"
#include "net/conn.h"
#include "loop.h"

#define ENTRIES 4

static int submit_error; /* 0, or what io_uring_submit() returns */
static unsigned int sleeps;

int __real_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit(struct io_uring *ring)
{
	if (submit_error)
		return submit_error;
	return __real_io_uring_submit(ring);
}

int __wrap_usleep(useconds_t us);
int __wrap_usleep(useconds_t us)
{
	sleeps++;
	return 0;
}

struct counter {
	struct io_src src;
	unsigned int completions, last_tag;
};

static void count(struct io_src *src, struct io_uring_cqe *cqe,
		  unsigned int tag)
{
	struct counter *c = (struct counter *)src;

	c->completions++;
	c->last_tag = tag;
}

/* Fill the SQ with no-ops that belong to nobody. */
static void fill_sq(struct loop *l)
{
	for (int i = 0; i < ENTRIES; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

		assert_non_null(sqe);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 0);
	}
	assert_null(io_uring_get_sqe(&l->ring));
}

static void test_full_sq_is_submitted(void **state)
{
	struct counter c = { .src.complete = count };
	struct io_uring_sqe *sqe;
	struct loop l;

	assert_int_equal(loop_init(&l, ENTRIES), 0);
	submit_error = 0;
	sleeps = 0;
	fill_sq(&l);
	sqe = loop_sqe(&l, &c.src, 3);
	assert_non_null(sqe);
	assert_int_equal(sleeps, 0);
	io_uring_prep_nop(sqe);
	assert_int_equal(loop_once(&l, 0), 0);
	assert_int_equal(c.completions, 1);
	assert_int_equal(c.last_tag, 3);
	loop_exit(&l);
}

static void test_stuck_ring_fails(void **state)
{
	struct counter c = { .src.complete = count };
	struct io_uring_sqe *sqe;
	unsigned int waited;
	struct loop l;

	assert_int_equal(loop_init(&l, ENTRIES), 0);
	fill_sq(&l);
	submit_error = -EBUSY;
	sleeps = 0;
	/* 5 s of 1 ms retries, then NULL: not abort() */
	assert_null(loop_sqe(&l, &c.src, 1));
	waited = sleeps;
	assert_true(waited >= 5000);
	assert_true(l.sq_stuck);
	/* The next caller fails at once, without another 5 s. */
	assert_null(loop_sqe(&l, &c.src, 2));
	assert_int_equal(sleeps, waited);

	/* The ring takes work again: once the loop has reaped (its own
	 * submission sends the four no-ops), SQEs come again. */
	submit_error = 0;
	assert_int_equal(loop_once(&l, 0), 0);
	assert_false(l.sq_stuck);
	sqe = loop_sqe(&l, &c.src, 5);
	assert_non_null(sqe);
	io_uring_prep_nop(sqe);
	assert_int_equal(loop_once(&l, 0), 0);
	assert_int_equal(c.completions, 1);
	assert_int_equal(c.last_tag, 5);
	assert_int_equal(sleeps, waited);
	loop_exit(&l);
}

static void test_conn_without_sqe_fails(void **state)
{
	struct server_config cfg = {
		.backend = "cpu",
		.cpu_mem = 16ull << 20,
		.threads = 1,
		.lease_default_ns = 10 * NSEC_PER_SEC,
		.lease_min_ns = 10 * NSEC_PER_MSEC,
		.lease_max_ns = 60 * NSEC_PER_SEC,
		.max_sessions = 16,
		.max_conns = 16,
	};
	/* An opcode nobody serves: the answer is an error reply. */
	struct djinn_hdr req = {
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = 22,
		.request_id = 7,
	};
	struct io_uring_sqe *sqe;
	struct server srv;
	struct conn *c;
	char buf[64];
	int sv[2];

	assert_int_equal(server_init(&srv, &cfg), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	c = conn_create(&srv, sv[0], false, false);
	assert_non_null(c);
	while ((sqe = io_uring_get_sqe(&srv.loop.ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 0);
	}
	submit_error = -EBUSY;
	sleeps = 0;
	conn_feed(c, (const uint8_t *)&req, sizeof(req));
	assert_true(sleeps >= 5000);
	assert_true(c->failed);
	assert_int_equal(srv.nr_conns, 1); /* not closed under conn_feed() */

	submit_error = 0;
	assert_int_equal(loop_once(&srv.loop, 0), 0);
	assert_int_equal(srv.nr_conns, 0); /* closed, and freed */
	assert_int_equal(read(sv[1], buf, sizeof(buf)), 0); /* unanswered */
	close(sv[1]);
	server_exit(&srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_sq_is_submitted),
		cmocka_unit_test(test_stuck_ring_fails),
		cmocka_unit_test(test_conn_without_sqe_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
