/* SPDX-License-Identifier: MIT */
/*
 * Helpers for libdjinn's unit tests (test_libdjinn*.c), which link
 * libdjinn.a and reach its insides through libdjinn/internal.h. Include
 * after <cmocka.h>.
 *
 * No daemon runs in these tests: a connection is made over one end of a
 * socketpair, without HELLO, and the tests use the far end only to see
 * what the library wrote or to break the connection.
 */
#ifndef DJINN_TEST_LIBDJINN_H
#define DJINN_TEST_LIBDJINN_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../libdjinn/internal.h"
#include "clock.h"

/* A connection whose daemon end is *@peer. */
static inline struct djinn_conn *pair_conn(int *peer)
{
	struct djinn_conn *conn = NULL;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	assert_int_equal(__djinn_conn_start(sv[0], &conn), 0);
	*peer = sv[1];
	return conn;
}

/* A session of @conn as if the daemon had opened it, lease @lease_ns. */
static inline struct djinn_session *fake_session(struct djinn_conn *conn,
						 uint64_t id, uint64_t lease_ns)
{
	struct djinn_session_resp r = { .session_id = id,
					.lease_ns = lease_ns };
	struct djinn_session *s = NULL;

	assert_int_equal(__djinn_session_new(conn, &r, 0, "test", &s), 0);
	return s;
}

/* A tensor of @s the daemon holds as @handle. */
static inline struct djinn_tensor *fake_tensor(struct djinn_session *s,
					       uint64_t handle,
					       struct djinn_tensor_desc d)
{
	struct djinn_tensor *t =
		__djinn_tensor_new(s, &d, DJINN_SEG_DATA, handle);

	assert_non_null(t);
	return t;
}

/* Read exactly @len bytes from @fd; false at EOF or error. */
static inline bool read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* The next frame the library wrote: its header, its payload dropped. */
static inline void peer_frame(int fd, struct djinn_hdr *h)
{
	uint8_t skip[4096];

	assert_true(read_full(fd, h, sizeof(*h)));
	for (uint64_t left = h->payload_len; left;) {
		size_t n = left < sizeof(skip) ? (size_t)left : sizeof(skip);

		assert_true(read_full(fd, skip, n));
		left -= n;
	}
}

static inline void write_full(int fd, const void *buf, size_t len)
{
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

/* Nothing went over the wire: the daemon's end @peer has nothing to read. */
static inline void expect_silence(int peer)
{
	char c;

	assert_int_equal(recv(peer, &c, 1, MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
}

/*
 * struct peer_fx - the fixture of a test that plays the daemon
 * @conn: a connection (pair_conn())
 * @s:    a session of it, as if the daemon had opened it (fake_session())
 * @peer: the daemon's end of @conn
 */
struct peer_fx {
	struct djinn_conn *conn;
	struct djinn_session *s;
	int peer;
};

/* Fill in @f with a session of id @sid and a lease of an hour. */
static inline void peer_fx_open(struct peer_fx *f, uint64_t sid)
{
	f->conn = pair_conn(&f->peer);
	f->s = fake_session(f->conn, sid, 3600 * NSEC_PER_SEC);
}

/* Disconnect @f's connection (its session goes with it), close @peer. */
static inline void peer_fx_close(struct peer_fx *f)
{
	djinn_disconnect(f->conn);
	close(f->peer);
}

/* A desc from a dtype and dims: D(DJINN_DTYPE_F32, 2, 64) */
#define D(dt, ...)                                               \
	((struct djinn_tensor_desc){                             \
		.dtype = (dt),                                   \
		.ndim = sizeof((uint64_t[]){ __VA_ARGS__ }) / 8, \
		.dims = { __VA_ARGS__ },                         \
	})

#endif /* DJINN_TEST_LIBDJINN_H */
