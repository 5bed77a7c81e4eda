// SPDX-License-Identifier: MIT
/*
 * Connections: references and closing, attached sessions, deadlines,
 * receiving and parsing frames, and back-pressure (listen.c accepts
 * them, send.c sends their replies). See conn.h for the shape of it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "array_size.h"
#include "log.h"
#include "server.h"
#include "net/conn.h"
#include "net/tls.h"
#include "session/lease.h"
#include "session/session.h"
#include "session/tenant.h"

#define BR_BGID 1
#define BR_ENTRIES 256 /* x 64 KiB: 16 MiB of receive buffers */
#define DISCARD_MAX (1u << 20) /* refused payloads up to this are skipped */

struct bufring {
	struct io_uring_buf_ring *ring;
	uint8_t *bufs;
};

static void conn_pause(struct conn *c);
static void conn_throttle(struct conn *c);

/* ---------------------------------------------------------------------- */
/* Provided buffers */

static struct bufring *bufring_create(struct loop *l)
{
	struct io_uring_buf_reg reg = { 0 };
	struct bufring *br = calloc(1, sizeof(*br));
	size_t ring_bytes = BR_ENTRIES * sizeof(struct io_uring_buf);

	if (!br)
		return NULL;
	br->ring = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	br->bufs = malloc((size_t)BR_ENTRIES * RBUF_SIZE);
	if (br->ring == MAP_FAILED || !br->bufs)
		goto fail;
	io_uring_buf_ring_init(br->ring);
	reg.ring_addr = (uintptr_t)br->ring;
	reg.ring_entries = BR_ENTRIES;
	reg.bgid = BR_BGID;
	if (io_uring_register_buf_ring(&l->ring, &reg, 0))
		goto fail;
	for (unsigned int i = 0; i < BR_ENTRIES; i++)
		io_uring_buf_ring_add(br->ring,
				      br->bufs + (size_t)i * RBUF_SIZE,
				      RBUF_SIZE, i,
				      io_uring_buf_ring_mask(BR_ENTRIES), i);
	io_uring_buf_ring_advance(br->ring, BR_ENTRIES);
	return br;
fail:
	if (br->ring != MAP_FAILED)
		munmap(br->ring, ring_bytes);
	free(br->bufs);
	free(br);
	return NULL;
}

static void bufring_recycle(struct bufring *br, unsigned int bid)
{
	io_uring_buf_ring_add(br->ring, br->bufs + (size_t)bid * RBUF_SIZE,
			      RBUF_SIZE, bid,
			      io_uring_buf_ring_mask(BR_ENTRIES), 0);
	io_uring_buf_ring_advance(br->ring, 1);
}

/* ---------------------------------------------------------------------- */
/* References and closing */

void conn_get(struct conn *c)
{
	c->refs++;
}

void conn_put(struct conn *c)
{
	struct server *srv = c->srv;

	if (--c->refs)
		return;
	/* Nothing owed and nothing cut: the end of what djinnd sends */
	if (c->tls && !c->tx_dead && list_empty(&c->outq) &&
	    list_empty(&c->zcwait))
		tls_close_notify(c->tls);
	list_del_init(&c->node); /* off srv->closing */
	list_splice_tail(&c->zcwait, &c->outq);
	while (!list_empty(&c->outq)) {
		struct out_msg *m =
			list_first_entry(&c->outq, struct out_msg, node);

		list_del_init(&m->node);
		msg_free(m);
	}
	tls_conn_free(c->tls);
	if (c->fd >= 0)
		close(c->fd);
	if (c->ts) {
		c->ts->conns--;
		tenant_state_drop(c->ts);
	}
	free(c->rbuf);
	free(c->backlog);
	free(c->body);
	free(c->sessions);
	srv->nr_conns--;
	srv->nr_admin -= c->admin;
	srv->st.conns_closed++;
	free(c);
}

/* Stop receiving and let go: queued replies still go out (unless
 * @force), jobs in flight drop their references when they come back, and
 * the socket closes with the last reference. Sessions stay: their leases
 * decide. */
void conn_close(struct conn *c, bool force)
{
	conn_get(c); /* through the reads it ends */
	if (force) {
		shutdown(c->fd, SHUT_RDWR); /* wakes sends too */
		c->tx_dead = true;
	}
	if (!c->closing) {
		c->closing = true;
		if (c->stream)
			msg_stream_abort(c);
		/* Kept on a list until its last completion: shutdown can
		 * still reach it. */
		list_move_tail(&c->node, &c->srv->closing);
		/* Wakes the pending receive, which then drops its
		 * reference. */
		shutdown(c->fd, SHUT_RD);
		conn_put(c); /* the list's reference */
	}
	/* Closing first: the reads it ends do not resume it. */
	if (force)
		msg_reads_abort(c);
	conn_put(c);
}

/*
 * loop_sqe() gave this connection no SQE (it logged why): what it was
 * doing, a send, a receive or pausing one, cannot happen, and its
 * requests cannot be answered. It is closed, as a peer that went away
 * is, but not here: a reply is queued from anywhere, and closing may
 * free the connection under its caller (a use-after-free once). The
 * I/O loop closes it before it next sleeps (conns_close_failed()).
 */
void conn_fail(struct conn *c, const char *what)
{
	if (c->failed)
		return;
	log_err("conn %d: no submission queue entry to %s: closing", c->fd,
		what);
	c->failed = true;
	c->close_after = true; /* the parser stops */
	c->srv->conns_failed = true;
}

void conns_close_failed(struct server *srv)
{
	struct list_head *lists[] = { &srv->conns, &srv->closing };

	if (!srv->conns_failed)
		return;
	srv->conns_failed = false;
	/* A closing one may still owe replies: they are dropped too. */
	for (unsigned int i = 0; i < 2; i++) {
		struct conn *c, *n;

		list_for_each_entry_safe(c, n, lists[i], node)
			if (c->failed)
				conn_close(c, true);
	}
}

void conns_close_all(struct server *srv, bool force)
{
	struct conn *c, *n;

	list_for_each_entry_safe(c, n, &srv->conns, node)
		conn_close(c, force);
	metrics_close_all(srv);
	if (force)
		list_for_each_entry_safe(c, n, &srv->closing, node)
			conn_close(c, true);
}

/* ---------------------------------------------------------------------- */
/* Sessions attached to a connection */

bool conn_attached(struct conn *c, uint64_t id)
{
	for (unsigned int i = 0; i < c->nr_sessions; i++)
		if (c->sessions[i] == id)
			return true;
	return false;
}

int conn_attach(struct conn *c, uint64_t id)
{
	if (conn_attached(c, id))
		return 0;
	if (c->nr_sessions == c->cap_sessions) {
		unsigned int n = c->cap_sessions ? c->cap_sessions * 2 : 4;
		uint64_t *s = realloc(c->sessions, n * sizeof(*s));

		if (!s)
			return -ENOMEM;
		c->sessions = s;
		c->cap_sessions = n;
	}
	c->sessions[c->nr_sessions++] = id;
	return 0;
}

void conn_detach(struct conn *c, uint64_t id)
{
	for (unsigned int i = 0; i < c->nr_sessions; i++) {
		if (c->sessions[i] == id) {
			c->sessions[i] = c->sessions[--c->nr_sessions];
			return;
		}
	}
}

/* ---------------------------------------------------------------------- */
/* Deadlines */

static unsigned long long ms(uint64_t ns)
{
	return (unsigned long long)(ns / NSEC_PER_MSEC);
}

/*
 * The deadlines of server.frame_timeout and server.idle_timeout. A frame
 * whose header has started must have its header and fixed body in within
 * frame_timeout; its streamed data (or a refused payload being skipped)
 * may not stall longer than that, and its data may not take longer in
 * all than data_begin() allows. A client connection with no session
 * attached, no frame started, no request unanswered and no reply queued
 * is closed after idle_timeout. Paused connections (djinnd is the one
 * waiting) are not timed.
 */
static uint64_t conns_deadlines(struct loop_timer *t, uint64_t now)
{
	struct server *srv = container_of(t, struct server, conn_timer);
	uint64_t frame = srv->cfg.frame_timeout_ns,
		 idle = srv->cfg.idle_timeout_ns;
	uint64_t period = (frame < idle ? frame : idle) / 4;
	struct conn *c, *n;

	list_for_each_entry_safe(c, n, &srv->conns, node) {
		if (c->closing || c->paused || c->close_after)
			continue;
		if (c->handshaking) {
			continue; /* the handshake thread times it */
		} else if (c->token && !c->tenant[0] && now - c->born > frame &&
			   c->ps == P_HDR && !c->req_open) {
			log_notice("conn %d: no AUTH in %llu ms on the token "
				   "socket: closing",
				   c->fd, ms(now - c->born));
			srv->st.conns_timed_out++;
			conn_refuse(
				c, NULL, -ETIMEDOUT,
				"no AUTH within %llu ms: this socket's "
				"clients name their tenant by a token first",
				ms(frame));
		} else if ((c->ps == P_HDR && c->hdr_got) || c->ps == P_BODY) {
			if (now - c->frame_t0 <= frame)
				continue;
			log_notice("conn %d: frame not finished in %llu ms: "
				   "closing",
				   c->fd, ms(now - c->frame_t0));
			srv->st.conns_timed_out++;
			conn_refuse(c, c->ps == P_BODY ? &c->hdr : NULL,
				    -ETIMEDOUT,
				    "frame %s not finished within %llu ms",
				    c->ps == P_BODY ? "body" : "header",
				    ms(frame));
		} else if (c->ps == P_DATA && now - c->data_t0 > c->data_ns) {
			log_notice(
				"conn %d: frame data not finished in %llu ms: "
				"closing",
				c->fd, ms(now - c->data_t0));
			srv->st.conns_timed_out++;
			conn_refuse(c, &c->hdr, -ETIMEDOUT,
				    "the frame's data not finished within %llu "
				    "ms (1 MiB/s at least), %llu bytes still "
				    "to come",
				    ms(c->data_ns),
				    (unsigned long long)c->left);
		} else if (c->ps == P_DATA || c->ps == P_DISCARD) {
			if (now - c->active <= frame)
				continue;
			log_notice(
				"conn %d: no frame data for %llu ms: closing",
				c->fd, ms(now - c->active));
			srv->st.conns_timed_out++;
			conn_refuse(c, &c->hdr, -ETIMEDOUT,
				    "no data of the frame for %llu ms, %llu "
				    "bytes still to come",
				    ms(frame), (unsigned long long)c->left);
		} else if (c->ps == P_HDR && !c->admin && !c->nr_sessions &&
			   !c->req_open && !c->sending &&
			   list_empty(&c->outq) && now - c->active > idle) {
			log_info("conn %d: idle for %llu ms without a session: "
				 "closing",
				 c->fd, ms(now - c->active));
			srv->st.conns_idle++;
			conn_refuse(c, NULL, -ETIMEDOUT,
				    "idle for %llu ms without a session",
				    ms(idle));
		}
	}
	return period ? period : 1;
}

/* ---------------------------------------------------------------------- */
/* Receiving and parsing */

/*
 * A streaming request's data begins: its bytes may stall no longer than
 * frame_timeout at a time, and may take no longer in all than
 * frame_timeout plus their length at CONN_DATA_MIN_BPS (1 MiB/s): a
 * client that trickles a byte a timeout holds what its request reserved
 * (device memory, a tenant's quota) for a bounded time only.
 */
#define CONN_DATA_MIN_BPS (UINT64_C(1) << 20)

static void data_begin(struct conn *c)
{
	c->ps = P_DATA;
	c->data_t0 = loop_now();
	c->data_ns = c->srv->cfg.frame_timeout_ns +
		     c->left / CONN_DATA_MIN_BPS * NSEC_PER_SEC +
		     (c->left % CONN_DATA_MIN_BPS) * NSEC_PER_SEC /
			     CONN_DATA_MIN_BPS;
}

static void parse_reset(struct conn *c)
{
	c->ps = P_HDR;
	c->hdr_got = 0;
	free(c->body);
	c->body = NULL;
	c->body_len = c->body_got = 0;
}

/* After the reply to a refused frame: skip its payload, or close. */
static void refuse_payload(struct conn *c, uint64_t left)
{
	if (!left) {
		parse_reset(c);
	} else if (left <= DISCARD_MAX) {
		c->ps = P_DISCARD;
		c->left = left;
	} else {
		c->close_after = true;
	}
}

/* A whole header has arrived: check it and pick the next state. */
static void header_done(struct conn *c)
{
	const struct djinn_hdr *h = &c->hdr;
	uint64_t fixed, max;
	int ret;

	c->srv->st.requests++;
	metrics_msg(&c->srv->st, h->type)->requests++;
	c->req_t0 = loop_now();
	c->req_open = true;
	if (h->magic != DJINN_MAGIC) {
		conn_error(c, h, -EPROTO, "bad magic %#x", h->magic);
		c->close_after = true;
		return;
	}
	if (h->payload_len > DJINN_MAX_PAYLOAD) {
		conn_error(c, h, -EMSGSIZE, "payload of %llu bytes, limit %llu",
			   (unsigned long long)h->payload_len,
			   (unsigned long long)DJINN_MAX_PAYLOAD);
		c->close_after = true;
		return;
	}
	if (h->version != DJINN_PROTO_VERSION) {
		conn_error(c, h, -EPROTONOSUPPORT,
			   "protocol version %u, server speaks %u", h->version,
			   DJINN_PROTO_VERSION);
		refuse_payload(c, h->payload_len);
		return;
	}
	if (h->flags || h->__reserved) {
		conn_error(c, h, -EINVAL, "%s set in a request",
			   h->flags ? "flags" : "reserved header field");
		refuse_payload(c, h->payload_len);
		return;
	}
	ret = msg_body_len(c, h, &fixed, &max);
	if (ret) {
		conn_error(c, h, ret,
			   h->type == DJINN_MSG_GOAWAY ?
				   "opcode %u (GOAWAY) is djinnd's own: no "
				   "client sends it" :
			   ret == -EPERM ?
				   "opcode %u is not served here" :
			   ret == -EACCES && c->token ?
				   "opcode %u before AUTH: a connection of "
				   "this socket has no tenant until a bearer "
				   "token names it (server.token_auth)" :
			   ret == -EACCES ? "opcode %u before AUTH: this TLS "
					    "connection has no tenant yet (a "
					    "client certificate or a bearer "
					    "token names it)" :
					    "unknown opcode %u",
			   h->type);
		refuse_payload(c, h->payload_len);
		return;
	}
	if (h->payload_len > max) {
		conn_error(c, h, -EMSGSIZE,
			   "payload of %llu bytes for opcode %u, limit %llu",
			   (unsigned long long)h->payload_len, h->type,
			   (unsigned long long)max);
		refuse_payload(c, h->payload_len);
		return;
	}
	c->body_len = fixed ? fixed : h->payload_len;
	if (c->body_len > h->payload_len) {
		conn_error(c, h, -EINVAL,
			   "payload of %llu bytes, opcode %u needs %llu",
			   (unsigned long long)h->payload_len, h->type,
			   (unsigned long long)c->body_len);
		refuse_payload(c, h->payload_len);
		return;
	}
	c->body = malloc(c->body_len ? c->body_len : 1); /* 16-aligned */
	if (!c->body) {
		conn_error(c, h, -ENOMEM, "out of memory");
		refuse_payload(c, h->payload_len);
		return;
	}
	c->ps = P_BODY;
}

static void body_done(struct conn *c)
{
	struct djinn_hdr h = c->hdr;
	uint64_t fixed, max;
	int ret;

	msg_body_len(c, &h, &fixed, &max);
	if (!fixed) {
		uint8_t *body = c->body;

		c->body = NULL; /* msg_handle owns it now */
		parse_reset(c);
		msg_handle(c, &h, body, h.payload_len);
		return;
	}
	c->left = h.payload_len - fixed;
	memset(&c->sink, 0, sizeof(c->sink));
	ret = msg_stream_begin(c, &h, c->body);
	if (ret > 0) {
		c->ps = P_WAIT;
		conn_pause(c);
		return;
	}
	if (ret) {
		refuse_payload(c, c->left);
		if (c->close_after)
			return;
		if (c->ps == P_DISCARD)
			return;
	} else {
		data_begin(c);
	}
	if (c->ps == P_DATA && !c->left) {
		msg_stream_end(c, &h);
		parse_reset(c);
	}
}

void conn_backlog_add(struct conn *c, const uint8_t *p, uint64_t len)
{
	if (c->backlog_len + len > c->backlog_cap) {
		uint64_t cap = c->backlog_len + len + RBUF_SIZE;
		uint8_t *b = realloc(c->backlog, cap);

		if (!b) {
			log_err("conn %d: out of memory for %llu bytes received",
				c->fd, (unsigned long long)len);
			c->overflow = true; /* closes it */
			return;
		}
		c->backlog = b;
		c->backlog_cap = cap;
	}
	memcpy(c->backlog + c->backlog_len, p, len);
	c->backlog_len += len;
}

static void parse(struct conn *c, const uint8_t *p, uint64_t len)
{
	while (len && !c->close_after) {
		uint64_t n = 0;

		if (!c->paused && c->ps == P_HDR && !c->hdr_got) {
			if (c->srv->restart)
				conn_hold(c); /* a restart: not another frame */
			else
				conn_throttle(c);
		}
		if (c->paused) {
			/* What is already in waits; no more is received. */
			conn_backlog_add(c, p, len);
			return;
		}
		switch (c->ps) {
		case P_HDR:
			if (!c->hdr_got)
				c->frame_t0 = loop_now();
			n = sizeof(c->hdr) - c->hdr_got;
			n = n < len ? n : len;
			memcpy((uint8_t *)&c->hdr + c->hdr_got, p, n);
			c->hdr_got += (uint32_t)n;
			if (c->hdr_got == sizeof(c->hdr))
				header_done(c);
			if (c->ps == P_BODY && !c->body_len)
				body_done(c);
			break;
		case P_BODY:
			n = c->body_len - c->body_got;
			n = n < len ? n : len;
			memcpy(c->body + c->body_got, p, n);
			c->body_got += n;
			if (c->body_got == c->body_len)
				body_done(c);
			break;
		case P_DATA:
			n = c->left < len ? c->left : len;
			if (!c->sink.error && c->sink.upload)
				c->sink.error =
					vmu_text_write(c->sink.upload, p, n);
			else if (!c->sink.error)
				c->sink.error = c->sink.prov->ops->copy_htod(
					c->sink.prov, c->sink.addr, p, n);
			c->sink.addr += n;
			c->left -= n;
			msg_stream_progress(c);
			if (!c->left) {
				struct djinn_hdr h = c->hdr;

				msg_stream_end(c, &h);
				parse_reset(c);
			}
			break;
		case P_DISCARD:
			n = c->left < len ? c->left : len;
			c->left -= n;
			if (!c->left)
				parse_reset(c);
			break;
		case P_WAIT: /* paused */
			break;
		}
		p += n;
		len -= n;
	}
}

/* Feed @len received bytes through the parser. */
void conn_feed(struct conn *c, const uint8_t *p, uint64_t len)
{
	c->srv->st.bytes_in += len;
	c->active = loop_now();
	parse(c, p, len);
}

/* Stop receiving until conn_resume(): a multishot receive is cancelled
 * (its last completions still bring bytes, which wait in the backlog),
 * a single-shot one is not armed again. The socket's buffer then fills
 * and the peer waits. */
/* Cancel @c's receive (its completion says how it ended): whether the
 * cancel was submitted (else @c failed, @what in the log). */
static bool recv_cancel(struct conn *c, const char *what)
{
	struct io_uring_sqe *sqe = loop_sqe(&c->srv->loop, &c->src, TAG_CANCEL);

	if (!sqe) {
		conn_fail(c, what);
		return false;
	}
	io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)&c->src | TAG_RECV, 0);
	conn_get(c);
	return true;
}

static void conn_pause(struct conn *c)
{
	c->paused = true;
	if (c->recv_armed && c->srv->br)
		recv_cancel(c, "pause receiving");
}

void conn_hold(struct conn *c)
{
	c->paused = true;
	/* a single-shot receive too: none may be armed when its socket
	 * changes hands */
	if (c->recv_armed && !c->holding && recv_cancel(c, "hold receiving"))
		c->holding = true;
}

bool conn_between_frames(const struct conn *c)
{
	return c->ps == P_HDR && !c->hdr_got && !c->stream;
}

bool conn_quiet(const struct conn *c)
{
	return c->paused && !c->recv_armed && conn_between_frames(c) &&
	       c->refs == 1 && list_empty(&c->outq) && list_empty(&c->zcwait) &&
	       !c->sending && !c->handshaking && !c->identifying && !c->reads &&
	       !c->closing;
}

void conn_resume(struct conn *c)
{
	uint8_t *b = c->backlog;
	uint64_t n = c->backlog_len;

	if (!c->paused || c->throttled)
		return;
	c->paused = false;
	/* djinnd was the one waiting: the frame's time starts again */
	c->frame_t0 = c->active = loop_now();
	c->backlog = NULL;
	c->backlog_len = c->backlog_cap = 0;
	if (!c->closing)
		parse(c, b, n);
	free(b);
	if (c->overflow)
		conn_close(c, true);
	else if (c->close_after || (c->peer_eof && !c->paused))
		conn_close(c, false);
	else if (!c->paused)
		conn_recv_arm(c);
}

void conn_read_begin(struct conn *c, uint64_t len)
{
	c->reads++;
	c->read_bytes += len;
}

/* Between frames (a handler's reads all counted, so none of them ends
 * inside the parser): at the limit on reads in flight, stop taking
 * requests until conn_read_end() resumes. */
static void conn_throttle(struct conn *c)
{
	if (c->reads < CONN_READS_MAX && c->read_bytes < CONN_READ_BYTES_MAX)
		return;
	log_debug("conn %d: %u reads (%llu bytes) in flight: not receiving",
		  c->fd, c->reads, (unsigned long long)c->read_bytes);
	c->srv->st.conns_throttled++;
	conn_pause(c);
	c->throttled = true;
}

void conn_read_end(struct conn *c, uint64_t len)
{
	c->reads--;
	c->read_bytes -= len;
	if (!c->throttled || c->reads >= CONN_READS_MAX ||
	    c->read_bytes >= CONN_READ_BYTES_MAX)
		return;
	c->throttled = false;
	/* Not while the connection is being freed (its queue's callbacks
	 * end the reads) or closed. */
	if (c->refs && !c->closing)
		conn_resume(c);
}

void conn_stream_ready(struct conn *c, int err)
{
	if (err) {
		refuse_payload(c, c->left);
	} else {
		data_begin(c);
		if (!c->left) {
			struct djinn_hdr h = c->hdr;

			msg_stream_end(c, &h);
			parse_reset(c);
		}
	}
	conn_resume(c);
}

void conn_recv_arm(struct conn *c)
{
	struct io_uring_sqe *sqe;

	if (c->closing || c->recv_armed || c->failed)
		return;
	sqe = loop_sqe(&c->srv->loop, &c->src, TAG_RECV);
	if (!sqe) {
		conn_fail(c, "receive");
		return;
	}
	if (c->srv->br) {
		io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = BR_BGID;
	} else {
		io_uring_prep_recv(sqe, c->fd, c->rbuf, RBUF_SIZE, 0);
	}
	c->recv_armed = true;
	conn_get(c);
}

static void tls_feed(void *arg, const uint8_t *p, size_t len)
{
	conn_feed(arg, p, len);
}

static bool tls_stop(void *arg)
{
	struct conn *c = arg;

	return c->closing || c->close_after || c->overflow;
}

/* TLS_USER: records in, plaintext through the parser. */
static void conn_open_records(struct conn *c, const uint8_t *p, uint64_t len)
{
	char why[256];
	int ret;

	ret = tls_open(c->tls, p, len, tls_feed, tls_stop, c, why, sizeof(why));
	if (ret == 1) {
		c->peer_eof = true; /* close_notify: as a shutdown */
		if (!c->paused)
			c->close_after = true;
	} else if (ret) {
		log_notice("conn %d: %s: closing", c->fd, why);
		c->overflow = true; /* nothing more can be read or sent */
	}
}

static void conn_received(struct conn *c, struct io_uring_cqe *cqe)
{
	bool more = cqe->flags & IORING_CQE_F_MORE;
	struct bufring *br = c->srv->br;
	int res = cqe->res;

	if (cqe->res > 0) {
		const uint8_t *p = c->rbuf;
		unsigned int bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;

		if (br && (cqe->flags & IORING_CQE_F_BUFFER))
			p = br->bufs + (size_t)bid * RBUF_SIZE;
		if (c->closing)
			;
		else if (c->tls && tls_conn_mode(c->tls) == TLS_USER)
			conn_open_records(c, p, (uint64_t)cqe->res);
		else
			conn_feed(c, p, (uint64_t)cqe->res);
		if (br && (cqe->flags & IORING_CQE_F_BUFFER))
			bufring_recycle(br, bid);
		if (c->overflow)
			conn_close(c, true);
		else if (c->close_after)
			conn_close(c, false); /* the error reply still goes */
	}
	if (more)
		return;
	c->recv_armed = false;
	c->holding = false;
	if (res == -EIO && c->tls && tls_conn_mode(c->tls) == TLS_KERNEL &&
	    !c->closing) {
		/* a record the kernel does not pass as data: the peer's
		 * close_notify ends its input as a FIN does; anything else
		 * (a KeyUpdate: refused) ends the connection */
		char why[256];

		if (tls_kernel_record(c->tls, why, sizeof(why)) == 1) {
			res = 0;
		} else {
			log_notice("conn %d: %s: closing", c->fd, why);
			conn_close(c, true);
			conn_put(c);
			return;
		}
	}
	if (res == 0 && c->paused && !c->closing) {
		/* EOF behind a paused request: what came before it is
		 * parsed and answered first (conn_resume closes). */
		c->peer_eof = true;
	} else if (res == 0 ||
		   (res < 0 && res != -ENOBUFS && res != -ECANCELED)) {
		if (res < 0 && res != -ECONNRESET)
			log_info("conn %d: receive: %s", c->fd, strerror(-res));
		conn_close(c, false);
	} else if (!c->paused) {
		conn_recv_arm(c); /* single-shot, or the ring ran dry */
	}
	conn_put(c);
}

/* The handshake thread is done with @c (net/tls.h): it receives as any
 * other connection, or it closes (OpenSSL has sent the peer its alert).
 * Drops the reference tls_handshake_start() was given. */
void conn_handshake_done(struct conn *c, int ret, const char *tenant,
			 const char *why)
{
	struct server *srv = c->srv;
	char desc[128];

	c->handshaking = false;
	if (c->closing) {
		conn_put(c);
		return;
	}
	if (ret) {
		log_notice("conn %d: TLS: %s: closing", c->fd, why);
		srv->st.tls_failed++;
		if (ret == -ETIMEDOUT)
			srv->st.conns_timed_out++;
		conn_close(c, true);
		conn_put(c);
		return;
	}
	memcpy(c->tenant, tenant, sizeof(c->tenant));
	srv->st.tls_handshakes++;
	if (tls_conn_mode(c->tls) == TLS_KERNEL)
		srv->st.tls_kernel++;
	c->no_zc = true; /* records are built by the kernel or OpenSSL */
	c->active = loop_now();
	log_info("conn %d: %s, tenant %s", c->fd,
		 tls_conn_desc(c->tls, desc, sizeof(desc)),
		 c->tenant[0] ? c->tenant : "none yet (AUTH)");
	if (!c->tenant[0] || conn_identified(c))
		conn_recv_arm(c);
	conn_put(c);
}

bool conn_identified(struct conn *c)
{
	return !conn_over_tenant_quota(c);
}

void conn_complete(struct io_src *src, struct io_uring_cqe *cqe,
		   unsigned int tag)
{
	struct conn *c = container_of(src, struct conn, src);

	if (tag == TAG_RECV)
		conn_received(c, cqe);
	else if (tag == TAG_SEND)
		conn_sent(c, cqe);
	else
		conn_put(c); /* TAG_CANCEL: the receive says how it ended */
}

int conns_start(struct server *srv)
{
	srv->send_timer.fn = conns_tick;
	loop_timer_add(&srv->loop, &srv->send_timer,
		       loop_now() + srv->cfg.lease_default_ns / 4);
	srv->conn_timer.fn = conns_deadlines;
	loop_timer_add(&srv->loop, &srv->conn_timer, loop_now());
	if (srv->loop.feat.buf_ring && srv->loop.feat.multishot_recv) {
		srv->br = bufring_create(&srv->loop);
		if (!srv->br)
			log_info("provided buffer ring unavailable: "
				 "single-shot receives");
	}
	return 0;
}

void conns_stop(struct server *srv)
{
	if (srv->br) {
		munmap(srv->br->ring, BR_ENTRIES * sizeof(struct io_uring_buf));
		free(srv->br->bufs);
		free(srv->br);
		srv->br = NULL;
	}
}
