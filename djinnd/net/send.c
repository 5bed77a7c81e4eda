// SPDX-License-Identifier: MIT
/*
 * Sending: a connection's replies queued in order and sent by sendmsg
 * (zero-copy for large data to a peer off the loopback), errors as
 * frames, and the connections that take no reply bytes closed. See
 * conn.h for the shape of it.
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
#include "net/journal.h"
#include "net/tls.h"
#include "session/lease.h"
#include "session/session.h"
#include "session/tenant.h"

#define ZC_MIN (64u << 10) /* zero-copy sends from this size */
/* A client that lets this many replies pile up unread is disconnected,
 * as Redis does with its output buffer limits. */
#define OUTQ_MAX_MSGS 65536
#define OUTQ_MAX_BYTES (64u << 20)

static struct out_msg *
conn_queue(struct conn *c, const struct djinn_hdr *req, uint32_t flags,
	   const void *body, uint64_t body_len, const void *data,
	   uint64_t data_len, const struct out_part *first,
	   void (*part_done)(void *arg, const void *p, bool sent),
	   void (*done)(void *arg), void *arg)
{
	struct out_msg *m;
	/* A closing connection still sends what it owes (a drain answers
	 * the graphs in flight), unless its socket is dead. */
	if (c->tx_dead)
		goto drop;
	m = calloc(1, sizeof(*m));
	if (!m)
		goto drop;
	if (body_len) {
		m->body = malloc(body_len);
		if (!m->body) {
			free(m);
			goto drop;
		}
		memcpy(m->body, body, body_len);
	}
	m->hdr = (struct djinn_hdr){
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = req->type,
		.flags = DJINN_F_RESPONSE | flags,
		.request_id = req->request_id,
		.session_id = req->session_id,
		.payload_len = body_len + data_len,
	};
	m->body_len = body_len;
	m->data = data;
	m->data_len = data_len;
	if (first) {
		m->part[0] = *first;
		m->nr_parts = 1;
		m->part_done = part_done;
	}
	m->done = done;
	m->arg = arg;
	/* what it says is done is in the journal before it is said */
	if (c->srv->journal && journal_gates(req->type)) {
		m->need = c->srv->jdone + 1;
		c->srv->jdirty = true;
	}
	list_add_tail(&m->node, &c->outq);
	c->outq_msgs++;
	/* The answer to the request being parsed (later answers are timed
	 * where they come from). */
	if (c->req_open && req->request_id == c->hdr.request_id &&
	    req->type == c->hdr.type) {
		c->req_open = false;
		metrics_observe(&c->srv->st, req->type, loop_now() - c->req_t0);
	}
	c->outq_bytes += body_len;
	if (!c->overflow &&
	    (c->outq_msgs > OUTQ_MAX_MSGS || c->outq_bytes > OUTQ_MAX_BYTES)) {
		log_warn("conn %d: %u replies (%llu bytes) unread: closing",
			 c->fd, c->outq_msgs,
			 (unsigned long long)c->outq_bytes);
		c->overflow = true;
		c->close_after = true; /* stops the parser; closed after */
	}
	c->srv->st.bytes_out += sizeof(m->hdr) + body_len + data_len;
	if (!c->sending)
		conn_send_next(c);
	return m;
drop:
	if (first && part_done)
		part_done(arg, first->p, false);
	if (done)
		done(arg);
	return NULL;
}

int conn_reply(struct conn *c, const struct djinn_hdr *req, const void *body,
	       uint64_t body_len, const void *data, uint64_t data_len,
	       void (*done)(void *arg), void *arg)
{
	return conn_queue(c, req, 0, body, body_len, data, data_len, NULL, NULL,
			  done, arg) ?
		       0 :
		       -ENOMEM;
}

struct out_msg *conn_reply_parts(struct conn *c, const struct djinn_hdr *req,
				 uint64_t data_len, const void *p, uint64_t len,
				 void (*part_done)(void *arg, const void *p,
						   bool sent),
				 void (*done)(void *arg), void *arg)
{
	struct out_part first = { p, len };

	return conn_queue(c, req, 0, NULL, 0, NULL, data_len, &first, part_done,
			  done, arg);
}

/* The data bytes of @m handed over so far. */
static uint64_t msg_data_ready(const struct out_msg *m)
{
	uint64_t n = m->part_off;

	if (!m->part_done)
		return m->data_len;
	for (unsigned int i = 0; i < m->nr_parts; i++)
		n += m->part[i].len;
	return n;
}

void conn_part(struct conn *c, struct out_msg *m, const void *p, uint64_t len)
{
	m->part[m->nr_parts++] = (struct out_part){ p, len };
	if (!c->sending)
		conn_send_next(c);
}

/* @m's oldest part back to its owner: @sent, or dropped unsent. */
static void part_pop(struct out_msg *m, bool sent)
{
	const void *p = m->part[0].p;

	m->part_off += m->part[0].len;
	memmove(&m->part[0], &m->part[1], --m->nr_parts * sizeof(m->part[0]));
	m->part_done(m->arg, p, sent);
}

/* The parts of @m whose last byte is sent go back to their owner. */
static void parts_sent(struct out_msg *m)
{
	uint64_t data_sent;

	if (m->sent < sizeof(m->hdr) + m->body_len)
		return;
	data_sent = m->sent - sizeof(m->hdr) - m->body_len;
	while (m->nr_parts && data_sent >= m->part_off + m->part[0].len)
		part_pop(m, true);
}

void msg_free(struct out_msg *m)
{
	while (m->nr_parts)
		part_pop(m, false);
	if (m->done)
		m->done(m->arg);
	free(m->body);
	free(m);
}

/* An error frame for @req; @counted: it counts in the error statistics. */
static void conn_verror(struct conn *c, const struct djinn_hdr *req, int err,
			bool counted, const char *fmt, va_list ap)
{
	uint8_t buf[sizeof(struct djinn_error) + DJINN_MAX_ERROR_MSG + 1];
	struct djinn_error e = { .error = err };
	char *msg = (char *)buf + sizeof(e);
	int n;

	n = vsnprintf(msg, DJINN_MAX_ERROR_MSG + 1, fmt, ap);
	if (n < 0)
		n = 0;
	if (n > DJINN_MAX_ERROR_MSG)
		n = DJINN_MAX_ERROR_MSG;
	e.len = (uint32_t)n;
	memcpy(buf, &e, sizeof(e));
	if (counted) {
		c->srv->st.errors++;
		metrics_msg(&c->srv->st, req->type)->errors++;
	}
	log_debug("conn %d: request %llu type %u: error %d: %s", c->fd,
		  (unsigned long long)req->request_id, req->type, err, msg);
	conn_queue(c, req, DJINN_F_ERROR, buf, sizeof(e) + (uint64_t)n, NULL, 0,
		   NULL, NULL, NULL, NULL);
}

void conn_error(struct conn *c, const struct djinn_hdr *req, int err,
		const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conn_verror(c, req, err, true, fmt, ap);
	va_end(ap);
}

void conn_miss(struct conn *c, const struct djinn_hdr *req, int err,
	       const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conn_verror(c, req, err, false, fmt, ap);
	va_end(ap);
}

/* Point c->iov at what is left of @m, up to the end of the part being
 * sent (of data in parts). */
static unsigned int msg_iov(struct conn *c, struct out_msg *m)
{
	uint64_t off = m->sent,
		 parts[3] = { sizeof(m->hdr), m->body_len, m->data_len };
	const uint8_t *base[3] = { (const uint8_t *)&m->hdr, m->body, m->data };
	unsigned int n = 0;

	for (int i = 0; i < 3; i++) {
		if (off >= parts[i]) {
			off -= parts[i];
			continue;
		}
		if (i == 2 && m->part_done) {
			/* sent up to part 0, which holds what is left */
			if (!m->nr_parts)
				break;
			off -= m->part_off;
			c->iov[n].iov_base = (void *)(m->part[0].p + off);
			c->iov[n].iov_len = m->part[0].len - off;
			n++;
			break;
		}
		c->iov[n].iov_base = (void *)(base[i] + off);
		c->iov[n].iov_len = parts[i] - off;
		off = 0;
		n++;
	}
	return n;
}

static uint64_t msg_len(const struct out_msg *m)
{
	return sizeof(m->hdr) + m->body_len + m->data_len;
}

static void msg_finish(struct conn *c, struct out_msg *m)
{
	c->outq_msgs--;
	c->outq_bytes -= m->body_len;
	list_del_init(&m->node);
	msg_free(m);
}

/* A peer that takes none of its replies' bytes for a default lease
 * period is gone or stuck: close it, so that what its replies hold (a
 * tensor being read keeps its session's memory) comes back. Checked a
 * few times a period, over closing connections too. */
uint64_t conns_tick(struct loop_timer *t, uint64_t now)
{
	struct server *srv = container_of(t, struct server, send_timer);
	uint64_t limit = srv->cfg.lease_default_ns;
	struct list_head *lists[] = { &srv->conns, &srv->closing };

	for (unsigned int i = 0; i < 2; i++) {
		struct conn *c, *n;

		list_for_each_entry_safe(c, n, lists[i], node) {
			if (!c->sending || c->tx_dead ||
			    now - c->tx_since < limit)
				continue;
			log_notice("conn %d: no reply bytes taken for %llu ms "
				   "(%u replies, %llu bytes queued): closing",
				   c->fd,
				   (unsigned long long)((now - c->tx_since) /
							NSEC_PER_MSEC),
				   c->outq_msgs,
				   (unsigned long long)c->outq_bytes);
			srv->st.conns_stalled++;
			conn_close(c, true);
		}
	}
	return limit / 4 ? limit / 4 : 1;
}

/* A connection-level error (no request of the peer's to answer: a frame
 * not finished, a connection over its cap): an error frame for @req, or
 * for request id 0 and opcode 0, then the connection closes once it is
 * sent. */
void conn_refuse(struct conn *c, const struct djinn_hdr *req, int err,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void conn_refuse(struct conn *c, const struct djinn_hdr *req, int err,
		 const char *fmt, ...)
{
	struct djinn_hdr none = { 0 };
	va_list ap;

	va_start(ap, fmt);
	conn_verror(c, req ? req : &none, err, true, fmt, ap);
	va_end(ap);
	c->close_after = true;
	conn_close(c, false);
}

/* TLS_USER: the records to send next, sealing more of @m's bytes when
 * the last ones are all sent. False when out of memory. */
static bool conn_seal(struct conn *c, struct out_msg *m, const uint8_t **p,
		      uint64_t *len)
{
	tls_sealed(c->tls, p, len);
	if (*len)
		return true;
	if (!tls_seal(c->tls, c->iov, msg_iov(c, m)))
		return false;
	tls_sealed(c->tls, p, len);
	return *len != 0;
}

void conn_send_next(struct conn *c)
{
	bool user_tls = c->tls && tls_conn_mode(c->tls) == TLS_USER;
	struct io_uring_sqe *sqe;
	const uint8_t *rec = NULL;
	uint64_t rec_len = 0;
	struct out_msg *m;

	if (list_empty(&c->outq) || c->sending || c->failed)
		return;
	m = list_first_entry(&c->outq, struct out_msg, node);
	if (m->need > c->srv->jdone)
		return; /* journal_commit() sends it */
	/* data in parts: all it has is sent, the next part is on its way
	 * (conn_part() calls again) */
	if (m->part_done &&
	    m->sent == sizeof(m->hdr) + m->body_len + msg_data_ready(m))
		return;
	if (user_tls && !conn_seal(c, m, &rec, &rec_len)) {
		log_err("conn %d: out of memory for TLS records: closing",
			c->fd);
		conn_close(c, true);
		return;
	}
	sqe = loop_sqe(&c->srv->loop, &c->src, TAG_SEND);
	if (!sqe) {
		conn_fail(c, "send");
		return;
	}
	memset(&c->mh, 0, sizeof(c->mh));
	c->mh.msg_iov = c->iov;
	c->mh.msg_iovlen = msg_iov(c, m);
	/* Zero-copy needs a socket that supports it (TCP; not AF_UNIX). */
	m->zc = c->srv->loop.feat.send_zc && !c->no_zc && !m->part_done &&
		m->data_len >= ZC_MIN;
	if (user_tls) {
		io_uring_prep_send(sqe, c->fd, rec, rec_len, MSG_NOSIGNAL);
	} else if (m->zc) {
		io_uring_prep_sendmsg_zc(sqe, c->fd, &c->mh, MSG_NOSIGNAL);
		m->notifs++;
	} else {
		io_uring_prep_sendmsg(sqe, c->fd, &c->mh, MSG_NOSIGNAL);
	}
	c->sending = true;
	c->tx_since = loop_now();
	conn_get(c);
}

static void conn_renew(struct conn *c, uint64_t session_id)
{
	struct session *s = session_get(&c->srv->sessions, session_id);

	if (!s)
		return;
	c->srv->sessions.leases->ops->renew(c->srv->sessions.leases, s,
					    loop_now());
	session_put(s);
}

void conn_sent(struct conn *c, struct io_uring_cqe *cqe)
{
	struct out_msg *m;

	if (cqe->flags & IORING_CQE_F_NOTIF) {
		/* The kernel is done with a zero-copy send's pages.
		 * Notifications come in order: the oldest message that
		 * waits for one is the first on zcwait, else the head of
		 * the queue (a message sent in parts). */
		m = !list_empty(&c->zcwait) ?
			    list_first_entry(&c->zcwait, struct out_msg, node) :
		    !list_empty(&c->outq) ?
			    list_first_entry(&c->outq, struct out_msg, node) :
			    NULL;
		if (m && m->notifs && !--m->notifs && m->sent == msg_len(m))
			msg_finish(c, m);
		conn_put(c);
		return;
	}
	m = list_empty(&c->outq) ?
		    NULL :
		    list_first_entry(&c->outq, struct out_msg, node);
	c->sending = false;
	c->active = loop_now();
	if (m && m->zc) {
		if (cqe->flags & IORING_CQE_F_MORE)
			conn_get(c); /* the notification's */
		else
			m->notifs--; /* none will come */
	}
	if (m && m->zc && cqe->res == -EOPNOTSUPP && !m->sent) {
		/* This socket cannot send zero-copy: plain sends from now. */
		c->no_zc = true;
		m->zc = false;
		conn_send_next(c);
		conn_put(c);
		return;
	}
	if (cqe->res < 0 || !m) {
		if (cqe->res < 0 && cqe->res != -EPIPE &&
		    cqe->res != -ECONNRESET)
			log_info("conn %d: send: %s", c->fd,
				 strerror(-cqe->res));
		conn_close(c, true);
		conn_put(c);
		return;
	}
	if (c->tls && tls_conn_mode(c->tls) == TLS_USER) {
		/* Records carry the plaintext: it is sent once they all are. */
		uint64_t plain = tls_sent(c->tls, (uint64_t)cqe->res);

		m->sent += plain;
	} else {
		m->sent += (uint64_t)cqe->res;
		if (c->tls)
			tls_count(c->tls, (uint64_t)cqe->res);
	}
	if (c->tls && tls_worn(c->tls) && !c->close_after) {
		/* no more requests; what is owed still goes, then
		 * close_notify (Documentation/security.rst, "TLS") */
		log_info("conn %d: tls.max_records sent: closing", c->fd);
		c->close_after = true;
		conn_close(c, false);
	}
	/* A reply with data for a session (a TENSOR_READ) may take longer
	 * than a lease on a slow link, while the client's heartbeats wait
	 * behind it: the peer taking its bytes keeps the session alive. */
	if (m->data_len && m->hdr.session_id)
		conn_renew(c, m->hdr.session_id);
	if (m->part_done)
		parts_sent(m);
	if (m->sent == msg_len(m)) {
		if (m->notifs)
			list_move_tail(&m->node, &c->zcwait);
		else
			msg_finish(c, m);
	}
	conn_send_next(c);
	conn_put(c);
}
