/* SPDX-License-Identifier: MIT */
/*
 * Connections: framing in, responses out. Everything here runs on the I/O
 * thread.
 *
 * Receiving: a multishot receive into the server's provided buffer ring
 * where the kernel has one (6.0), else a single-shot receive into the
 * connection's buffer, re-armed. Bytes go through a parser:
 *
 *   HDR      the 40-byte header, checked (magic, version, flags, length)
 *   BODY     the payload, or for the streaming messages (TENSOR_CREATE,
 *            TENSOR_WRITE) just their fixed struct, into a buffer
 *   DATA     a streaming message's bytes, straight into device memory
 *   DISCARD  the rest of a payload that was refused
 *
 * Sending: a queue per connection, one send in flight; a response is a
 * header, a body and optionally data that stays in device memory until
 * sent (zero-copy for large data where the kernel can), or that comes in
 * parts (conn_reply_parts()): the sender sends what it has and waits for
 * the next part.
 *
 * What a request does, and what payload it takes, is net/msg.h's
 * (msg_body_len(), msg_handle(), msg_stream_*()).
 */
#ifndef DJINN_CONN_H
#define DJINN_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <djinn/proto.h>

#include "list.h"
#include "loop.h"

struct server;

/* P_WAIT: a streaming request waits for its memory (conn_stream_ready) */
enum parse_state { P_HDR, P_BODY, P_WAIT, P_DATA, P_DISCARD };

/* Where a streaming request's data goes: device memory, or a text
 * upload (which hashes as it goes). */
struct sink {
	uint64_t addr; /* device address for the next byte, or 0 */
	struct vmu_provider *prov; /* whose address: the session's device */
	struct vmu_text_upload *upload;
	int error; /* set when a write failed: the rest is dropped */
};

/* Parts of a reply's data handed over and not yet all sent, at most */
#define OUT_PARTS 2

struct out_part {
	const uint8_t *p;
	uint64_t len;
};

struct out_msg {
	struct list_head node;
	struct djinn_hdr hdr;
	uint8_t *body;
	uint64_t body_len;
	const uint8_t *data; /* NULL for data in parts */
	uint64_t data_len;
	uint64_t sent; /* of hdr + body + data */
	unsigned int notifs; /* zero-copy notifications still to come */
	bool zc;
	/* data in parts (conn_reply_parts(), which sets @part_done): those
	 * handed over and not all sent, oldest first, the first at data
	 * offset @part_off */
	unsigned int nr_parts;
	struct out_part part[OUT_PARTS];
	uint64_t part_off;
	void (*part_done)(void *arg, const void *p, bool sent);
	void (*done)(void *arg);
	void *arg;
	/* the crash journal's record it waits for (srv->jdone: 0, none) */
	uint64_t need;
};

struct conn {
	struct io_src src;
	struct server *srv;
	struct list_head node;
	int fd;
	bool admin, tcp;
	bool no_zc; /* the socket cannot send zero-copy (AF_UNIX) */
	bool identifying; /* its owner is being looked up (net/ident.h) */
	bool tcp_uid; /* a loopback TCP peer: cred.uid is its socket's owner */
	/* of server.token_auth's socket: its tenant comes from AUTH's
	 * token alone, never from cred.uid (empty until then) */
	bool token;
	uint64_t born; /* loop_now() at accept: AUTH's deadline counts from it */
	struct tls_conn *tls; /* a tls: listener's (net/tls.h), or NULL */
	bool handshaking; /* the handshake thread has it */
	struct ucred cred;
	struct sockaddr_storage peer; /* TCP: the peer's address */
	char tenant[DJINN_TENANT_LEN]; /* who it is (session/tenant.h) */
	struct tenant_state *ts; /* its tenant's counts, once accepted */
	int refs;
	bool closing, recv_armed;
	bool tx_dead; /* the socket cannot send any more */
	bool overflow; /* the client does not read its replies */
	bool failed; /* no SQE for it: closed before the loop sleeps */
	unsigned int outq_msgs;
	uint64_t outq_bytes; /* of bodies queued */

	uint8_t *rbuf; /* single-shot receive buffer */

	enum parse_state ps;
	struct djinn_hdr hdr;
	uint64_t req_t0; /* when hdr arrived */
	bool req_open; /* hdr's answer is to be timed when queued */
	uint32_t hdr_got;
	uint64_t frame_t0; /* the frame's first byte (P_HDR, P_BODY) */
	uint64_t active; /* the last byte received or reply sent */
	uint8_t *body;
	uint64_t body_len, body_got;
	uint64_t left; /* DATA / DISCARD bytes still to come */
	/* DATA: when its bytes began to come, and the time they may take in
	 * all (conn_data_begin()) */
	uint64_t data_t0, data_ns;
	bool close_after; /* close once the reply is sent */
	bool paused; /* not receiving: bytes already in go to the backlog */
	bool throttled; /* paused for reads in flight (conn_read_begin) */
	bool holding; /* its receive is being cancelled (conn_hold) */
	unsigned int reads; /* TENSOR_READs admitted, reply not yet sent */
	uint64_t read_bytes; /* their data bytes */
	/* of those, on device-only memory (net/msg_tensor.c): the staging
	 * they hold, those waiting for it (oldest first), and the tenant
	 * whose read_conns it is on while the first waits for its tenant
	 * alone */
	uint64_t read_staged;
	struct list_head read_wait;
	struct list_head read_node;
	struct tenant_state *read_ts;
	bool peer_eof; /* the peer shut down its side while paused */
	uint8_t *backlog;
	uint64_t backlog_len, backlog_cap;
	struct sink sink;
	void *stream; /* the streaming request's state (msg.c) */

	uint64_t *sessions; /* attached here */
	unsigned int nr_sessions, cap_sessions;

	struct list_head outq;
	struct list_head zcwait; /* sent, waiting for zero-copy notifs */
	bool sending;
	uint64_t tx_since; /* when the send in flight was submitted */
	struct msghdr mh;
	struct iovec iov[3];
};

/* A connection on @fd (accepted, or one end of a socketpair in the frame
 * fuzzer), in the server's list; the caller arms receiving, or feeds it
 * bytes itself. NULL when out of memory (@fd stays the caller's). */
struct conn *conn_create(struct server *srv, int fd, bool admin, bool tcp);
/* A TLS connection's tenant is known now (net/tls.h: its certificate,
 * or AUTH's token): it counts against the tenant's connections quota.
 * False when that refused it (the error is queued, the connection
 * closes). */
bool conn_identified(struct conn *c);
/* The handshake thread finished @c's TLS handshake: @ret 0 with @tenant
 * (empty: AUTH must name it), or a negative errno and @why. I/O thread. */
void conn_handshake_done(struct conn *c, int ret, const char *tenant,
			 const char *why);
/* The lookup of loopback TCP peer @c's owner (net/ident.h) ended: @ret
 * 0 with @uid, or a negative errno (the connection is closed). Drops
 * the reference ident_lookup() took. I/O thread. */
void conn_ident_done(struct conn *c, int ret, uid_t uid);
/* Run @len bytes through the frame parser, as if received. */
void conn_feed(struct conn *c, const uint8_t *p, uint64_t len);
/* A P_WAIT stream's memory is ready (@err 0: take the data) or not (the
 * error is answered: skip the data); parsing and receiving go on. */
void conn_stream_ready(struct conn *c, int err);
/* Parse what came in while paused and receive again (not while
 * throttled: conn_read_end() resumes that). */
void conn_resume(struct conn *c);

/* A restart (net/restart.h) stops @c between frames: it receives no
 * more, and what is in already waits in the backlog, until
 * conn_resume(). */
void conn_hold(struct conn *c);
/* Keep @len bytes received for when @c is resumed (a paused
 * connection's, a restored one's); out of memory, @c is closed when it
 * resumes (conn->overflow). */
void conn_backlog_add(struct conn *c, const uint8_t *p, uint64_t len);
/* Whether @c is between two frames (no frame begun, no stream open). */
bool conn_between_frames(const struct conn *c);
/* Whether @c is held and owes nothing: no receive armed, no request
 * unanswered, no reply unsent. Its socket may change hands. */
bool conn_quiet(const struct conn *c);

/* Reads in flight on one connection, admitted and not yet sent, at most
 * before djinnd stops taking its requests (backpressure, nothing lost):
 * their number, and their data bytes (staged host memory on a GPU). */
#define CONN_READS_MAX 64
#define CONN_READ_BYTES_MAX (64u << 20)
/* The staging buffers one connection's reads of device-only memory hold
 * at once, at most (two reads in parts): one that leaves its replies
 * unread cannot take all of its tenant's memory.read_staging. */
#define CONN_STAGE_MAX (16u << 20)

/* A TENSOR_READ of @len bytes is admitted: at CONN_READS_MAX reads or
 * CONN_READ_BYTES_MAX bytes in flight, the connection stops receiving
 * until conn_read_end() brings it under both again. */
void conn_read_begin(struct conn *c, uint64_t len);
/* Its reply is sent, or it failed; resumes a throttled connection. */
void conn_read_end(struct conn *c, uint64_t len);
void conn_get(struct conn *c);
void conn_put(struct conn *c);
/* Stop receiving; replies already queued still go unless @force. */
void conn_close(struct conn *c, bool force);

/* Queue a response to @req (type and request id echoed). @body is
 * copied; @data is sent from where it is and @done(@arg) is called once
 * the kernel is finished with it. */
int conn_reply(struct conn *c, const struct djinn_hdr *req, const void *body,
	       uint64_t body_len, const void *data, uint64_t data_len,
	       void (*done)(void *arg), void *arg);
/*
 * Queue a response to @req whose @data_len bytes of data come in parts,
 * the first (@p, @len) now and each next one by conn_part(), in order:
 * the sender sends what it has been handed and waits for more. Parts are
 * sent by plain copies (never zero-copy), so @part_done(@arg, p, true)
 * is called as soon as the kernel has a part's last byte: the buffer is
 * the caller's again, to copy a later part into. A reply dropped unsent
 * (its connection gone) gives each part it holds back with @sent false:
 * no more are wanted. @done(@arg) is called once, when the whole reply
 * is sent or dropped, after the parts. The reply, or NULL when it was
 * dropped at once (the callbacks have run); it is valid until @done.
 */
struct out_msg *conn_reply_parts(struct conn *c, const struct djinn_hdr *req,
				 uint64_t data_len, const void *p, uint64_t len,
				 void (*part_done)(void *arg, const void *p,
						   bool sent),
				 void (*done)(void *arg), void *arg);
/* Hand over the next part of @m (at most OUT_PARTS held at once). */
void conn_part(struct conn *c, struct out_msg *m, const void *p, uint64_t len);
/* Let go of a reply not sent (the connection is being freed). */
void msg_free(struct out_msg *m);
/* Queue an error response: a negative errno and a message. */
void conn_error(struct conn *c, const struct djinn_hdr *req, int err,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same answer for an expected negative outcome (a TEXT_LOOKUP that
 * finds nothing): not counted as an error in the statistics. */
void conn_miss(struct conn *c, const struct djinn_hdr *req, int err,
	       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

bool conn_attached(struct conn *c, uint64_t session_id);
int conn_attach(struct conn *c, uint64_t session_id);
void conn_detach(struct conn *c, uint64_t session_id);

/* ---------------------------------------------------------------------- */
/* Between conn.c, listen.c and send.c */

/* What completed (the tag of a user_data, loop.h): a connection's
 * receive, send or cancel, a listener's accept. */
enum {
	TAG_RECV = 1,
	TAG_SEND = 2,
	TAG_ACCEPT = 3,
	TAG_CANCEL = 4,
};

/* A connection's receive buffer (without provided buffers). */
#define RBUF_SIZE (64u << 10)

/* The connections' timers and provided buffers, when the listeners open;
 * stop: the buffers go, once the loop has ended (listeners_free()). */
int conns_start(struct server *srv);
void conns_stop(struct server *srv);
/* A connection's io_uring completions (its struct io_src). */
void conn_complete(struct io_src *src, struct io_uring_cqe *cqe,
		   unsigned int tag);
/* Start receiving. */
void conn_recv_arm(struct conn *c);
/* A submission for @c could not be had (loop_sqe()): it is closed before
 * the loop sleeps (conns_close_failed()), @what in the log. */
void conn_fail(struct conn *c, const char *what);
/* Send the next queued reply, if none is in flight; conn_sent(): a send
 * completed. conns_tick(): the server's send_timer, closing connections
 * that take no reply bytes for a default lease period. */
void conn_send_next(struct conn *c);
void conn_sent(struct conn *c, struct io_uring_cqe *cqe);
uint64_t conns_tick(struct loop_timer *t, uint64_t now);
/* Answer @err with a message, then close: a connection that may not stay. */
void conn_refuse(struct conn *c, const struct djinn_hdr *req, int err,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A new client connection of a tenant at its tenant.NAME.connections
 * quota is refused with -EDQUOT and closed; else it counts against the
 * quota until it is freed. True if refused. */
bool conn_over_tenant_quota(struct conn *c);
/* A restored connection (net/restart.h) counts against its tenant's
 * quota without being refused: it was let in before the restart. */
void conn_tenant_count(struct conn *c);

#endif /* DJINN_CONN_H */
