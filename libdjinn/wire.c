// SPDX-License-Identifier: MIT
/*
 * Connections: addresses, frames, pending calls, reading, the keeper.
 *
 * A request is a struct dj_call registered in conn->calls[] (hashed by
 * request_id) before its frame goes out, so that an answer arriving
 * before sendmsg() returns finds it. Only the holder of the reader token
 * completes calls (internal.h says who holds it): on a response, or, when
 * the connection breaks, all of them at once. Whoever notices a broken
 * connection first (a sender whose sendmsg() fails, a caller that finds
 * an answer malformed, the reader) records why in conn->dead and shuts
 * the socket down; the reader then sees EOF and fails what is pending.
 * Registration checks conn->dead under the same lock, so no call is left
 * behind.
 *
 * A connection that djinnd dropped (link_lost()) is dialled again by
 * relink() ("Reconnecting"), in the first thread that wants it: a sender
 * or the keeper, which does so at once so that leases are renewed. The
 * reader fails the pending calls with -EAGAIN first, and is joined; the
 * new socket takes the old one's place under both locks, with a new
 * receiver, and while its HELLO, AUTH and SESSION_ATTACHes go out only
 * the relinking thread may send: the others wait on conn->relink_cond.
 *
 * The token changes hands only under conn->lock, so that whoever holds it
 * sees rx_buf as the last holder left it. Its rules:
 *
 * - A free token with calls pending that are not sync (conn->nr_async),
 *   or with a hang-up seen or the connection dead, is the receiver's: it
 *   is kicked (rx_kick) whenever that becomes true, and takes it.
 * - The receiver keeps the token while that holds, then gives it up.
 * - A sync waiter takes a free token; a waiter that finds it held queues
 *   its call on conn->rx_followers and sleeps on the call's cond.
 * - Whoever gives the token up hands it to the first queued call
 *   (dj_call.rx_given), else frees it and kicks the receiver if it has
 *   reading to do. A queued call is never done (only the holder completes
 *   calls, and call_done() unqueues them), so a handed token is taken.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"
#include "msgnames.h"
#include "rundir.h"

/* ---------------------------------------------------------------------- */
/* Logging */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static djinn_log_fn log_fn;
static void *log_arg;

void djinn_set_log(djinn_log_fn fn, void *arg)
{
	pthread_mutex_lock(&log_lock);
	log_fn = fn;
	log_arg = arg;
	pthread_mutex_unlock(&log_lock);
}

void __djinn_log(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info",
					     "debug" };
	djinn_log_fn fn;
	char buf[512];
	va_list ap;
	void *arg;

	pthread_mutex_lock(&log_lock);
	fn = log_fn;
	arg = log_arg;
	pthread_mutex_unlock(&log_lock);
	if (!fn && !getenv("DJINN_DEBUG"))
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (fn)
		fn(arg, level, buf);
	else
		fprintf(stderr, "libdjinn: %s: %s\n",
			names[level < 0 || level > 3 ? 0 : level], buf);
}

static __thread char last_error[DJINN_MAX_ERROR_MSG + 1];

void __djinn_set_last_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

const char *djinn_last_error(void)
{
	return last_error;
}

/* The one table of message names (lib/msgnames.c). */
const char *__djinn_msg_str(unsigned int type)
{
	const char *name = djinn_msg_name(type);

	return name ? name : "unknown";
}

uint64_t __djinn_now_ns(void)
{
	return mono_ns();
}

static void cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

/* ---------------------------------------------------------------------- */
/* Addresses */

static int parse_port(const char *p, char *out, size_t outlen)
{
	unsigned long v = 0;
	size_t n = strlen(p);

	if (!n || n >= outlen)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(p[i] - '0');
	}
	if (!v || v > 65535)
		return -EINVAL;
	memcpy(out, p, n + 1);
	return 0;
}

const char *__djinn_addr_name(const char *addr, char *buf, size_t len,
			      const char **from)
{
	*from = NULL;
	if (addr)
		return addr;
	addr = getenv("DJINN_ADDR");
	if (addr && *addr) {
		*from = "$DJINN_ADDR";
		return addr;
	}
	/* where djinnd listens when nothing says otherwise */
	*from = "the default; set DJINN_ADDR to djinnd's address";
	snprintf(buf, len, "unix:");
	djinnd_socket_find("djinnd.sock", buf + 5, len - 5);
	return buf;
}

int __djinn_addr_parse(const char *addr, struct dj_addr *a)
{
	char def[DJINN_ADDR_NAME_MAX];
	const char *rest, *host, *port, *end, *from;
	size_t n;

	addr = __djinn_addr_name(addr, def, sizeof(def), &from);
	memset(a, 0, sizeof(*a));
	if (!strncmp(addr, "unix:", 5)) {
		rest = addr + 5;
		n = strlen(rest);
		/* a path needs its NUL; an abstract name has '@' instead */
		if (!n || n >= sizeof(a->unix_path) || (n == 1 && *rest == '@'))
			return -EINVAL;
		a->is_unix = true;
		memcpy(a->unix_path, rest, n);
		if (*rest == '@')
			a->unix_path[0] = '\0';
		a->path_len = n;
		return 0;
	}
	if (strncmp(addr, "tcp:", 4) && strncmp(addr, "tls:", 4))
		return -EINVAL;
	a->tls = addr[2] == 's';
	rest = addr + 4;
	if (*rest == '[') {
		end = strchr(rest, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		host = rest + 1;
		n = (size_t)(end - host);
		port = end + 2;
	} else {
		end = strrchr(rest, ':');
		if (!end)
			return -EINVAL;
		host = rest;
		n = (size_t)(end - rest);
		port = end + 1;
		if (memchr(host, ':', n)) /* an IPv6 address needs brackets */
			return -EINVAL;
	}
	if (!n || n >= sizeof(a->host))
		return -EINVAL;
	memcpy(a->host, host, n);
	return parse_port(port, a->port, sizeof(a->port));
}

static int dial_unix(const struct dj_addr *a)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd, ret;

	memcpy(sun.sun_path, a->unix_path, a->path_len);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + a->path_len);
	if (a->unix_path[0]) /* a path, with its NUL */
		len++;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, len)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

static void sock_deadline(int fd, uint64_t deadline_ns);

/* Connect to @a's host, each try's connect() bounded by @deadline_ns
 * (UINT64_MAX: the kernel's own timeout). */
static int dial_tcp(const struct dj_addr *a, uint64_t deadline_ns)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV,
	};
	struct addrinfo *res, *ai;
	int fd = -EHOSTUNREACH, one = 1, ret;

	ret = getaddrinfo(a->host, a->port, &hints, &res);
	if (ret) {
		dj_dbg("tcp:%s:%s: %s", a->host, a->port, gai_strerror(ret));
		if (ret == EAI_MEMORY)
			return -ENOMEM;
		if (ret == EAI_SYSTEM)
			return -errno;
		return -EHOSTUNREACH;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			fd = -errno;
			continue;
		}
		/* connect() waits no longer than SO_SNDTIMEO says */
		sock_deadline(fd, deadline_ns);
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) {
			sock_deadline(fd, UINT64_MAX);
			break;
		}
		ret = -errno;
		close(fd);
		fd = ret;
	}
	freeaddrinfo(res);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* ---------------------------------------------------------------------- */
/* Calls */

void __djinn_call_init(struct dj_call *c, uint16_t type, uint64_t session_id,
		       void *resp, uint64_t resp_len)
{
	memset(c, 0, offsetof(struct dj_call, msg));
	c->msg[0] = '\0';
	INIT_LIST_HEAD(&c->node);
	INIT_LIST_HEAD(&c->wnode);
	c->type = type;
	c->session_id = session_id;
	c->resp = resp;
	c->resp_len = resp_len;
	cond_init_monotonic(&c->cond);
}

void __djinn_call_destroy(struct dj_call *c)
{
	pthread_cond_destroy(&c->cond);
}

static struct list_head *bucket(struct djinn_conn *conn, uint64_t id)
{
	return &conn->calls[id & (DJ_CALL_BUCKETS - 1)];
}

void __djinn_set_dead(struct djinn_conn *conn, int err, const char *why)
{
	if (atomic_load(&conn->dead))
		return;
	atomic_store(&conn->dead, err);
	snprintf(conn->dead_msg, sizeof(conn->dead_msg), "%s", why);
	if (err == -ESHUTDOWN)
		dj_dbg("connection closed: %s", why);
	else
		dj_err("connection to djinnd lost: %s", why);
}

void __djinn_conn_fail(struct djinn_conn *conn, int err, const char *why, ...)
{
	char buf[DJINN_MAX_ERROR_MSG];
	va_list ap;

	va_start(ap, why);
	vsnprintf(buf, sizeof(buf), why, ap);
	va_end(ap);
	pthread_mutex_lock(&conn->lock);
	__djinn_set_dead(conn, err, buf);
	shutdown(conn->fd, SHUT_RDWR); /* under the lock: relink() swaps it */
	pthread_mutex_unlock(&conn->lock);
}

/*
 * The errors of a connection that djinnd dropped or the network lost,
 * which a new connection may cure; not a protocol violation, a refusal
 * or djinn_disconnect().
 */
static bool link_lost(int err)
{
	switch (err) {
	case -ECONNRESET:
	case -ECONNABORTED:
	case -ENOTCONN:
	case -EPIPE:
	case -ETIMEDOUT:
	case -ENETDOWN:
	case -ENETUNREACH:
	case -EHOSTUNREACH:
		return true;
	default:
		return false;
	}
}

/* Is @conn, dead, to be dialled again? Under conn->lock. */
static bool may_relink(struct djinn_conn *conn)
{
	return conn->dial && conn->relink_ns && !conn->stopping &&
	       !conn->relink_failed && link_lost(atomic_load(&conn->dead));
}

static int relink(struct djinn_conn *conn);
static struct djinn_session *find_session(struct djinn_conn *conn, uint64_t id);

/* Take @c out of the pending calls; under conn->lock. */
static void call_unlink(struct djinn_conn *conn, struct dj_call *c)
{
	list_del_init(&c->node);
	if (!c->sync)
		conn->nr_async--;
}

/*
 * Complete @c with what it has (@c->err, @c->msg), under conn->lock, by
 * the reader. Waiters are woken first: they need the lock, so they see
 * everything @complete does. @complete may free @c (not a detached one).
 */
static int call_done(struct djinn_conn *conn, struct dj_call *c)
{
	bool detached = c->detached;
	int ret = 0;

	c->done = true;
	list_del_init(&c->wnode);
	pthread_cond_broadcast(&c->cond);
	if (c->complete)
		ret = c->complete(conn, c);
	if (detached) {
		__djinn_call_destroy(c);
		free(c);
	}
	return ret;
}

/* Wake the receiver to look at the token again; under conn->lock. */
static void rx_kick(struct djinn_conn *conn)
{
	uint64_t one = 1;

	if (conn->rx_kicked)
		return;
	conn->rx_kicked = true;
	/* only fails when the count would overflow: then it is readable */
	if (write(conn->rx_kick, &one, sizeof(one)) != sizeof(one))
		dj_dbg("waking the receiver: %s", strerror(errno));
}

/* Has the receiver reading to do? Under conn->lock. */
static bool rx_needed(struct djinn_conn *conn)
{
	return !conn->rx_failed &&
	       (conn->nr_async || conn->rx_hup || atomic_load(&conn->dead));
}

/*
 * Give the reader token up, under conn->lock: to the first waiter queued
 * for it, else back to the receiver if it has reading to do or waits.
 */
static void rx_put(struct djinn_conn *conn)
{
	struct dj_call *c;

	if (!list_empty(&conn->rx_followers)) {
		c = list_first_entry(&conn->rx_followers, struct dj_call,
				     wnode);
		list_del_init(&c->wnode);
		c->rx_given = true; /* conn->rx_busy stays set */
		pthread_cond_broadcast(&c->cond);
		return;
	}
	conn->rx_busy = false;
	if (conn->rx_wants || rx_needed(conn))
		rx_kick(conn);
}

static void rx_lead(struct djinn_conn *conn, struct dj_call *c);

/* Send a frame registered on link @gen: -ECONNABORTED, nothing written,
 * when the link dropped and another took its place meanwhile. */
static int send_frame(struct djinn_conn *conn, const struct djinn_hdr *hdr,
		      const struct iovec *iov, int iovcnt, uint64_t gen)
{
	struct iovec v[8];
	struct msghdr mh = { 0 };
	uint64_t total = sizeof(*hdr) + hdr->payload_len;
	int n = 0, i = 0, ret = 0;
	ssize_t r;

	v[n++] = (struct iovec){ (void *)hdr, sizeof(*hdr) };
	for (int k = 0; k < iovcnt; k++)
		if (iov[k].iov_len)
			v[n++] = iov[k];

	pthread_mutex_lock(&conn->send_lock);
	if (gen != conn->link_gen) {
		pthread_mutex_unlock(&conn->send_lock);
		return -ECONNABORTED; /* failed already, by the old reader */
	}
	if (__djinn_tls_user(conn->tls)) {
		ret = __djinn_tls_sendv(conn->tls, conn->fd, v, n);
		i = n;
	}
	while (i < n) {
		mh.msg_iov = &v[i];
		mh.msg_iovlen = (size_t)(n - i);
		r = sendmsg(conn->fd, &mh, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		while (r > 0) {
			size_t step = min_t(size_t, (size_t)r, v[i].iov_len);

			v[i].iov_base = (uint8_t *)v[i].iov_base + step;
			v[i].iov_len -= step;
			r -= (ssize_t)step;
			if (!v[i].iov_len)
				i++;
		}
	}
	pthread_mutex_unlock(&conn->send_lock);

	if (ret) {
		/* a partial frame: nothing more can go on this stream */
		__djinn_conn_fail(conn, ret == -EPIPE ? -ECONNRESET : ret,
				  "sending %s: %s", __djinn_msg_str(hdr->type),
				  strerror(-ret));
		return atomic_load(&conn->dead);
	}
	atomic_fetch_add(&conn->bytes_sent, total);
	atomic_fetch_add(&conn->requests, 1);
	return 0;
}

int __djinn_call_send(struct djinn_conn *conn, struct dj_call *c,
		      const struct iovec *iov, int iovcnt)
{
	struct djinn_hdr hdr = {
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = c->type,
		.session_id = c->session_id,
	};
	uint64_t len = 0, max, gen = 0;
	/* once registered, a detached call is the reader's to free */
	bool detached = c->detached, waited = c->again;
	int ret;

	if (iovcnt > 7)
		return -EINVAL;
	for (int k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	if (!c->id)
		c->id = atomic_fetch_add(&conn->next_id, 1);
	hdr.request_id = c->id;
	hdr.payload_len = len;

	pthread_mutex_lock(&conn->lock);
	for (;;) {
		/* while a thread dials again, only its own calls go out */
		bool me = conn->relinking &&
			  pthread_equal(conn->relinker, pthread_self());

		if (conn->relinking && !me) {
			pthread_cond_wait(&conn->relink_cond, &conn->lock);
			waited = true;
			continue;
		}
		ret = atomic_load(&conn->dead);
		if (!ret || me || !may_relink(conn))
			break;
		pthread_mutex_unlock(&conn->lock);
		ret = relink(conn);
		waited = true;
		pthread_mutex_lock(&conn->lock);
		if (ret)
			break;
	}
	/* a session lost while the call waited for a new link: the caller
	 * read its id before (a session a fresh djinnd gave the same number
	 * since could only be told apart by its object) */
	if (!ret && waited && c->session_id &&
	    find_session(conn, c->session_id | DJ_SESSION_LOST))
		c->session_id |= DJ_SESSION_LOST;
	max = conn->server.max_payload; /* the new link's */
	if (!ret && (len > DJINN_MAX_PAYLOAD || (max && len > max))) {
		ret = -EMSGSIZE;
	} else if (!ret && (c->session_id & DJ_SESSION_LOST)) {
		ret = -ENOENT;
		snprintf(c->msg, sizeof(c->msg),
			 "session %llu was lost: djinnd came back without it",
			 (unsigned long long)(c->session_id &
					      ~DJ_SESSION_LOST));
	} else if (ret) {
		snprintf(c->msg, sizeof(c->msg), "%s", conn->dead_msg);
	}
	if (!ret) {
		gen = conn->link_gen;
		list_add_tail(&c->node, bucket(conn, c->id));
		if (!c->sync) {
			/* an answer nobody may wait for: the receiver reads */
			conn->nr_async++;
			if (!conn->rx_busy)
				rx_kick(conn);
		}
	}
	pthread_mutex_unlock(&conn->lock);
	if (ret)
		goto out_unsent;

	ret = send_frame(conn, &hdr, iov, iovcnt, gen);
	if (ret && !detached) {
		/* registered: the reader fails it now; wait for that */
		__djinn_call_wait(conn, c, UINT64_MAX);
		ret = c->err ? c->err : ret;
	}
	return ret;

out_unsent:
	if (detached) {
		__djinn_call_destroy(c);
		free(c);
	}
	return ret;
}

/* Callers waiting for an answer, in the whole process (rx_spin()). */
static _Atomic int dj_waiting;

/*
 * A waiter with no deadline reads while nobody else does: it takes a free
 * token (or one handed to it), else queues its call for the token and
 * sleeps until the call is done or the token is handed to it. A waiter
 * with a deadline only sleeps: its call is not sync, so the receiver
 * reads for it. A token handed to a call is never left: only a waiter
 * with no deadline queues a call, and it leaves only once the call is
 * done, which takes a reader.
 */
int __djinn_call_wait(struct djinn_conn *conn, struct dj_call *c,
		      uint64_t deadline_ns)
{
	struct timespec ts = ns_to_timespec(deadline_ns);
	bool forever = deadline_ns == UINT64_MAX;
	int ret = 0;

	atomic_fetch_add(&dj_waiting, 1);
	pthread_mutex_lock(&conn->lock);
	while (!c->done && !ret) {
		if (forever && (c->rx_given || !conn->rx_busy)) {
			rx_lead(conn, c);
		} else if (forever) {
			if (list_empty(&c->wnode))
				list_add_tail(&c->wnode, &conn->rx_followers);
			pthread_cond_wait(&c->cond, &conn->lock);
		} else if (pthread_cond_timedwait(&c->cond, &conn->lock, &ts) ==
				   ETIMEDOUT &&
			   !c->done) {
			ret = -ETIMEDOUT;
		}
	}
	pthread_mutex_unlock(&conn->lock);
	atomic_fetch_sub(&dj_waiting, 1);
	return ret;
}

/*
 * Calls libdjinn sends again itself when the connection dropped while
 * they ran (-ECONNABORTED): running one twice does what running it once
 * does (a TENSOR_RELEASE that ran before answers -ENOENT the second
 * time, and a handle's generation keeps it from any other tensor).
 * Others (a decode, a graph, a new tensor) are the caller's to make
 * again or not.
 */
static bool idempotent(uint16_t type)
{
	return type == DJINN_MSG_TENSOR_READ ||
	       type == DJINN_MSG_TENSOR_WRITE || type == DJINN_MSG_HEARTBEAT ||
	       type == DJINN_MSG_SIGNAL || type == DJINN_MSG_TENSOR_RELEASE ||
	       type == DJINN_MSG_STATUS;
}

int __djinn_call_sync_upto(struct djinn_conn *conn, uint16_t type,
			   uint64_t session_id, const struct iovec *iov,
			   int iovcnt, void *resp, uint64_t resp_len, bool upto,
			   uint64_t *got)
{
	struct dj_call c;
	bool not_run = false;
	int ret;

	/* each try waits for a new link, which is bounded: so are they */
	for (unsigned int tries = 0;; tries++) {
		__djinn_call_init(&c, type, session_id, resp, resp_len);
		c.sync = true;
		c.resp_upto = upto;
		c.again = tries > 0;
		ret = __djinn_call_send(conn, &c, iov, iovcnt);
		if (!ret) {
			__djinn_call_wait(conn, &c, UINT64_MAX);
			ret = c.err;
		}
		/* a release sent again that finds the handle gone ran
		 * before the drop, unless djinnd said it had not
		 * (GOAWAY) or its session was lost meanwhile */
		if (tries && ret == -ENOENT &&
		    type == DJINN_MSG_TENSOR_RELEASE && !not_run &&
		    !(c.session_id & DJ_SESSION_LOST))
			ret = 0;
		not_run = c.not_run;
		if (ret != -ECONNABORTED || tries >= 16 ||
		    !(idempotent(type) || c.not_run))
			break;
		dj_dbg("%s (session %llu): sent again: %s",
		       __djinn_msg_str(type), (unsigned long long)session_id,
		       c.msg);
		__djinn_call_destroy(&c);
	}
	if (ret) {
		dj_dbg("%s (session %llu): %s: %s", __djinn_msg_str(type),
		       (unsigned long long)session_id, strerror(-ret),
		       c.msg[0] ? c.msg : "no message");
		__djinn_set_last_error("%s", c.msg[0] ? c.msg : strerror(-ret));
	}
	if (got)
		*got = c.resp_got;
	__djinn_call_destroy(&c);
	return ret;
}

int __djinn_call_sync(struct djinn_conn *conn, uint16_t type,
		      uint64_t session_id, const struct iovec *iov, int iovcnt,
		      void *resp, uint64_t resp_len)
{
	return __djinn_call_sync_upto(conn, type, session_id, iov, iovcnt, resp,
				      resp_len, false, NULL);
}

/* What a detached call was, and where its answer goes. */
struct dj_detached {
	struct dj_call call;
	uint64_t buf[];
};

int __djinn_call_detached(struct djinn_conn *conn, uint16_t type,
			  uint64_t session_id, const void *payload,
			  uint64_t len, uint64_t resp_len,
			  dj_complete_fn complete)
{
	struct iovec iov = { (void *)payload, len };
	struct dj_detached *d;

	d = malloc(sizeof(*d) + resp_len);
	if (!d)
		return -ENOMEM;
	__djinn_call_init(&d->call, type, session_id, d->buf, resp_len);
	d->call.detached = true;
	d->call.complete = complete;
	return __djinn_call_send(conn, &d->call, &iov, len ? 1 : 0);
}

/* ---------------------------------------------------------------------- */
/* Reading: by the token's holder only */

/*
 * Spinning for an answer. On a virtual machine a round trip mostly waits
 * for an idle CPU to wake (an interrupt to the hypervisor and back): a
 * caller that sleeps in recv() pays that twice, once on each side. A
 * caller that is the process's only one waiting for an answer therefore
 * polls its socket for up to DJINN_SPIN_US microseconds (default 50; 0
 * turns it off) before it sleeps: one core's worth of polling at most,
 * and none when many callers wait, as at 50 connections, where it would
 * take a core from the daemon.
 */
#define DJ_SPIN_US_DEFAULT 50

static uint64_t spin_ns(void)
{
	static _Atomic long ns = -1;
	long v = atomic_load(&ns);

	if (v < 0) {
		const char *e = getenv("DJINN_SPIN_US");

		v = (e && *e ? atol(e) : DJ_SPIN_US_DEFAULT) * 1000;
		atomic_store(&ns, v < 0 ? 0 : v);
	}
	return (uint64_t)atomic_load(&ns);
}

/* recv(2) on the connection, through TLS where it has it. A TLS failure
 * (an alert, a bad record) marks the connection dead with its reason. */
static ssize_t conn_recv(struct djinn_conn *conn, void *buf, size_t len,
			 int flags)
{
	char why[DJINN_MAX_ERROR_MSG];
	ssize_t r;
	int err;

	if (!conn->tls)
		return recv(conn->fd, buf, len, flags);
	r = __djinn_tls_recv(conn->tls, conn->fd, buf, len, flags, &err, why,
			     sizeof(why));
	if (r < 0 && err) {
		pthread_mutex_lock(&conn->lock);
		__djinn_set_dead(conn, err, why);
		pthread_mutex_unlock(&conn->lock);
		errno = -err;
	}
	return r;
}

/* recv() without sleeping, for a while: -1 with EAGAIN when nothing
 * came (or spinning is off), else what recv() gave. */
static ssize_t rx_spin(struct djinn_conn *conn)
{
	uint64_t end = 0;
	ssize_t r;

	if (!spin_ns() || atomic_load(&dj_waiting) > 1) {
		errno = EAGAIN;
		return -1;
	}
	for (;;) {
		r = conn_recv(conn, conn->rx_buf, DJ_RX_BUF, MSG_DONTWAIT);
		if (r >= 0 || errno != EAGAIN)
			return r;
		if (!end)
			end = mono_ns() + spin_ns();
		else if (mono_ns() > end || atomic_load(&dj_waiting) > 1)
			return r;
	}
}

/* Read exactly @len bytes: 0, or -ECONNRESET at EOF, or -errno. */
static int rx_read(struct djinn_conn *conn, void *dst, size_t len)
{
	uint8_t *p = dst;
	ssize_t r;

	while (len) {
		size_t avail = conn->rx_tail - conn->rx_head;

		if (avail) {
			size_t n = min_t(size_t, avail, len);

			memcpy(p, conn->rx_buf + conn->rx_head, n);
			conn->rx_head += n;
			p += n;
			len -= n;
			continue;
		}
		/* Big payloads go straight to their destination, in pieces:
		 * on TCP loopback one huge recv() runs at two thirds of the
		 * speed of 64 KiB ones. */
		if (len >= DJ_RX_BUF) {
			r = conn_recv(conn, p, min_t(size_t, len, 64u << 10),
				      0);
		} else {
			r = rx_spin(conn);
			if (r < 0 && errno == EAGAIN)
				r = conn_recv(conn, conn->rx_buf, DJ_RX_BUF, 0);
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (!r)
			return -ECONNRESET;
		if (len >= DJ_RX_BUF) {
			p += r;
			len -= (size_t)r;
		} else {
			conn->rx_head = 0;
			conn->rx_tail = (size_t)r;
		}
	}
	return 0;
}

static __printf(2, 3) int rx_proto(struct djinn_conn *conn, const char *fmt,
				   ...)
{
	char buf[DJINN_MAX_ERROR_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&conn->lock);
	__djinn_set_dead(conn, -EPROTO, buf);
	pthread_mutex_unlock(&conn->lock);
	return -EPROTO;
}

/* The payload of a response to @c: into @c, or a broken connection. */
static int rx_payload(struct djinn_conn *conn, const struct djinn_hdr *h,
		      struct dj_call *c)
{
	uint64_t len = h->payload_len;
	struct djinn_error e;
	int ret;

	if (h->type != c->type)
		return rx_proto(conn, "request %llu (%s) answered as opcode %u",
				(unsigned long long)c->id,
				__djinn_msg_str(c->type), h->type);
	c->peer_version = h->version;
	/* a HELLO refused for its version comes in the daemon's version */
	if (h->version != DJINN_PROTO_VERSION &&
	    !(c->type == DJINN_MSG_HELLO && (h->flags & DJINN_F_ERROR)))
		return rx_proto(conn,
				"%s answer in protocol version %u, not %u",
				__djinn_msg_str(c->type), h->version,
				DJINN_PROTO_VERSION);
	if (!(h->flags & DJINN_F_ERROR)) {
		if (len != c->resp_len && !(c->resp_upto && len < c->resp_len))
			return rx_proto(conn,
					"%s answer of %llu bytes, not %s%llu",
					__djinn_msg_str(c->type),
					(unsigned long long)len,
					c->resp_upto ? "over " : "",
					(unsigned long long)c->resp_len);
		c->resp_got = len;
		return rx_read(conn, c->resp, len);
	}

	if (len < sizeof(e) || len > sizeof(e) + DJINN_MAX_ERROR_MSG)
		return rx_proto(conn, "%s error of %llu bytes",
				__djinn_msg_str(c->type),
				(unsigned long long)len);
	ret = rx_read(conn, &e, sizeof(e));
	if (ret)
		return ret;
	if (e.len != len - sizeof(e) || e.error >= 0 || e.error < -4095)
		return rx_proto(conn, "%s error %d with %u of %llu bytes",
				__djinn_msg_str(c->type), e.error, e.len,
				(unsigned long long)(len - sizeof(e)));
	ret = rx_read(conn, c->msg, e.len);
	if (ret)
		return ret;
	c->msg[e.len] = '\0';
	for (unsigned int i = 0; i < e.len; i++) /* text for people */
		if ((unsigned char)c->msg[i] < 0x20 || c->msg[i] == 0x7f)
			c->msg[i] = '?';
	c->err = e.error;
	return 0;
}

static const char *rx_why(int err)
{
	return err == -ECONNRESET ? "djinnd closed the connection" :
				    strerror(-err);
}

/*
 * One frame whose header is @h: 0, or why the connection is done. Sets
 * *@done if it completed @mine, the call its reader waits for (NULL for
 * the receiver).
 */
static int rx_frame(struct djinn_conn *conn, const struct djinn_hdr *h,
		    struct dj_call *mine, bool *done)
{
	struct dj_call *c = NULL, *pos;
	int ret;

	if (h->magic != DJINN_MAGIC)
		return rx_proto(conn, "bad magic %#x", h->magic);
	if (h->flags & ~DJINN_F_ALL || !(h->flags & DJINN_F_RESPONSE))
		return rx_proto(conn, "frame flags %#x", h->flags);
	if (h->__reserved)
		return rx_proto(conn, "reserved header field %#x",
				h->__reserved);
	if (h->payload_len > DJINN_MAX_PAYLOAD)
		return rx_proto(conn, "payload of %llu bytes",
				(unsigned long long)h->payload_len);
	/* djinnd closes next, having run none of the calls unanswered */
	if (h->type == DJINN_MSG_GOAWAY && !h->request_id) {
		if (h->payload_len || (h->flags & DJINN_F_ERROR))
			return rx_proto(conn,
					"GOAWAY with flags %#x and %llu "
					"bytes",
					h->flags,
					(unsigned long long)h->payload_len);
		pthread_mutex_lock(&conn->lock);
		conn->goaway = true;
		pthread_mutex_unlock(&conn->lock);
		dj_dbg("djinnd said GOAWAY: it closes the connection");
		return 0;
	}

	pthread_mutex_lock(&conn->lock);
	list_for_each_entry(pos, bucket(conn, h->request_id), node) {
		if (pos->id == h->request_id) {
			c = pos;
			call_unlink(conn, c);
			break;
		}
	}
	pthread_mutex_unlock(&conn->lock);
	if (!c)
		return rx_proto(conn, "answer to request %llu, not pending",
				(unsigned long long)h->request_id);

	ret = rx_payload(conn, h, c);
	/* Counted before the caller wakes, so that its look at the stats
	 * right after its call returns includes this answer. */
	if (!ret) {
		atomic_fetch_add(&conn->responses, 1);
		atomic_fetch_add(&conn->bytes_received,
				 sizeof(*h) + h->payload_len);
	}
	pthread_mutex_lock(&conn->lock);
	if (ret) {
		__djinn_set_dead(conn, ret, rx_why(ret));
		c->err = atomic_load(&conn->dead);
		snprintf(c->msg, sizeof(c->msg), "%s", conn->dead_msg);
	}
	if (c == mine) /* before call_done(), which may free c */
		*done = true;
	if (call_done(conn, c) && !ret)
		ret = -EPROTO; /* the complete function said why */
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

/* Read and dispatch one frame, with the token. */
static int rx_one(struct djinn_conn *conn, struct dj_call *mine, bool *done)
{
	struct djinn_hdr h;
	int ret;

	ret = rx_read(conn, &h, sizeof(h));
	if (!ret)
		ret = rx_frame(conn, &h, mine, done);
	return ret;
}

/*
 * Reading stopped at @err: the connection is dead, with the first reason
 * recorded. Fail every pending call and shut the socket down; under
 * conn->lock, with the token.
 */
static void rx_fail(struct djinn_conn *conn, int err)
{
	char msg[DJINN_MAX_ERROR_MSG];

	__djinn_set_dead(conn, err, rx_why(err));
	err = atomic_load(&conn->dead);
	snprintf(msg, sizeof(msg), "%s", conn->dead_msg);
	if (may_relink(conn)) {
		/* djinnd may not have run them: the caller may again (not
		 * -EAGAIN, which djinn_poll() says of a request pending) */
		err = -ECONNABORTED;
		snprintf(msg, sizeof(msg),
			 "the connection to djinnd dropped while this ran "
			 "(%.100s): libdjinn reconnects; send it again",
			 conn->dead_msg);
	}
	for (unsigned int b = 0; b < DJ_CALL_BUCKETS; b++) {
		while (!list_empty(&conn->calls[b])) {
			struct dj_call *c = list_first_entry(
				&conn->calls[b], struct dj_call, node);

			call_unlink(conn, c);
			c->err = err;
			c->not_run = conn->goaway && err == -ECONNABORTED;
			snprintf(c->msg, sizeof(c->msg), "%s", msg);
			call_done(conn, c);
		}
	}
	conn->rx_failed = true;
	pthread_cond_broadcast(&conn->keeper_cond);
	shutdown(conn->fd, SHUT_RDWR);
	rx_kick(conn); /* the receiver's work is over */
}

/*
 * A waiter's turn with the token, which is free or handed to @c: read
 * until @c is done, then give the token up. Under conn->lock, dropped
 * while reading.
 */
static void rx_lead(struct djinn_conn *conn, struct dj_call *c)
{
	bool done = false;
	int ret;

	c->rx_given = false;
	conn->rx_busy = true;
	pthread_mutex_unlock(&conn->lock);
	do
		ret = rx_one(conn, c, &done);
	while (!ret && !done);
	pthread_mutex_lock(&conn->lock);
	if (ret)
		rx_fail(conn, ret);
	rx_put(conn);
}

/*
 * Sleep until kicked, under conn->lock (dropped meanwhile). With the
 * token free, watch the socket too, for a hang-up only: an answer a
 * waiter reads must not wake the receiver.
 */
static void rx_sleep(struct djinn_conn *conn)
{
	struct pollfd pfd[2] = {
		{ .fd = conn->rx_kick, .events = POLLIN },
		{ .fd = conn->fd, .events = POLLRDHUP },
	};
	bool idle = !conn->rx_busy;
	uint64_t n;

	conn->rx_wants = !idle;
	pthread_mutex_unlock(&conn->lock);
	if (poll(pfd, idle ? 2 : 1, -1) < 0)
		pfd[0].revents = pfd[1].revents = 0; /* EINTR: look again */
	if ((pfd[0].revents & POLLIN) && read(conn->rx_kick, &n, sizeof(n)) < 0)
		pfd[0].revents = 0;
	pthread_mutex_lock(&conn->lock);
	if (pfd[0].revents & POLLIN)
		conn->rx_kicked = false;
	if (idle && pfd[1].revents)
		conn->rx_hup = true;
}

static void *receiver(void *arg)
{
	struct djinn_conn *conn = arg;
	int ret;

	pthread_mutex_lock(&conn->lock);
	while (!conn->rx_failed) {
		if (conn->rx_busy || !rx_needed(conn)) {
			rx_sleep(conn);
			continue;
		}
		conn->rx_busy = true;
		conn->rx_wants = false;
		pthread_mutex_unlock(&conn->lock);
		ret = rx_one(conn, NULL, NULL);
		pthread_mutex_lock(&conn->lock);
		if (ret)
			rx_fail(conn, ret);
		if (rx_needed(conn))
			conn->rx_busy = false; /* taken again, lock held */
		else
			rx_put(conn);
	}
	pthread_mutex_unlock(&conn->lock);
	return NULL;
}

/* ---------------------------------------------------------------------- */
/* The keeper: heartbeats and deferred releases */

void __djinn_release_later(struct djinn_conn *conn, uint64_t session_id,
			   uint64_t handle)
{
	struct dj_release *rel;

	/* kept across a reconnect: the tensor lives on in djinnd */
	if (atomic_load(&conn->dead) && !may_relink(conn))
		return;
	rel = malloc(sizeof(*rel));
	if (!rel) {
		dj_warn("session %llu: no memory to release tensor %#llx: "
			"it lives until the session ends",
			(unsigned long long)session_id,
			(unsigned long long)handle);
		return;
	}
	rel->session_id = session_id;
	rel->handle = handle;
	list_add_tail(&rel->node, &conn->releases);
	pthread_cond_broadcast(&conn->keeper_cond);
}

/* A TENSOR_RELEASE on its way, and what it releases: queued again when
 * the connection drops under it, for djinnd may still hold the tensor. */
struct dj_release_call {
	struct dj_call call; /* first: the reader frees it as a dj_call */
	uint64_t handle;
};

static int release_done(struct djinn_conn *conn, struct dj_call *c)
{
	struct dj_release_call *rc =
		container_of(c, struct dj_release_call, call);

	if (c->err == -ECONNABORTED) {
		__djinn_release_later(conn, c->session_id, rc->handle);
		return 0;
	}
	if (c->err && !atomic_load(&conn->dead))
		dj_dbg("session %llu: TENSOR_RELEASE: %s: %s",
		       (unsigned long long)c->session_id, strerror(-c->err),
		       c->msg);
	return 0;
}

static struct djinn_session *find_session(struct djinn_conn *conn, uint64_t id)
{
	struct djinn_session *s;

	list_for_each_entry(s, &conn->sessions, node)
		if (s->id == id)
			return s;
	return NULL;
}

static int heartbeat_done(struct djinn_conn *conn, struct dj_call *c)
{
	struct djinn_session *s = find_session(conn, c->session_id);
	const struct djinn_session_resp *r = c->resp;

	if (!s) /* closed meanwhile */
		return 0;
	s->hb_inflight = false;
	if (c->err) {
		if (atomic_load(&conn->dead)) /* the connection's failure */
			return 0;
		dj_warn("session %llu: HEARTBEAT: %s: %s",
			(unsigned long long)s->id, strerror(-c->err), c->msg);
		if (c->err == -ENOENT || c->err == -ECANCELED ||
		    c->err == -EPERM)
			s->expired = true;
		return 0;
	}
	if (r->session_id != s->id || !r->lease_ns) {
		c->err = -EPROTO;
		snprintf(c->msg, sizeof(c->msg),
			 "HEARTBEAT answer for session %llu, lease %llu ns",
			 (unsigned long long)r->session_id,
			 (unsigned long long)r->lease_ns);
		__djinn_set_dead(conn, -EPROTO, c->msg);
		return -EPROTO;
	}
	s->lease_ns = r->lease_ns;
	s->deadline_ns = r->deadline_ns;
	pthread_cond_broadcast(&conn->keeper_cond);
	return 0;
}

/* One thing to do, under conn->lock (dropped while sending): false when
 * there is nothing to do before @*next. */
static bool keeper_step(struct djinn_conn *conn, uint64_t *next)
{
	struct djinn_session *s;
	uint64_t now = __djinn_now_ns();

	if (!list_empty(&conn->releases)) {
		struct dj_release *rel = list_first_entry(
			&conn->releases, struct dj_release, node);
		struct djinn_tensor_release p = { .handle = rel->handle };
		struct iovec iov = { &p, sizeof(p) };
		struct dj_release_call *rc = malloc(sizeof(*rc));
		uint64_t sid = rel->session_id;

		list_del_init(&rel->node);
		free(rel);
		pthread_mutex_unlock(&conn->lock);
		if (rc) {
			__djinn_call_init(&rc->call, DJINN_MSG_TENSOR_RELEASE,
					  sid, NULL, 0);
			rc->call.detached = true;
			rc->call.complete = release_done;
			rc->handle = p.handle;
			__djinn_call_send(conn, &rc->call, &iov, 1);
		} else {
			dj_warn("session %llu: no memory to release tensor "
				"%#llx: it lives until the session ends",
				(unsigned long long)sid,
				(unsigned long long)p.handle);
		}
		pthread_mutex_lock(&conn->lock);
		return true;
	}

	*next = UINT64_MAX;
	list_for_each_entry(s, &conn->sessions, node) {
		uint64_t due = s->last_ns + s->lease_ns / 3, sid = s->id;

		if (s->expired || s->hb_inflight)
			continue;
		if (due > now) {
			*next = min_t(uint64_t, *next, due);
			continue;
		}
		if (s->kdev) { /* an ioctl, no round trip (kdev.c) */
			s->last_ns = now;
			if (__djinn_kdev_heartbeat(s->kdev, &s->deadline_ns))
				s->expired = true; /* it ended in the kernel */
			*next = min_t(uint64_t, *next, now + s->lease_ns / 3);
			continue;
		}
		s->hb_inflight = true;
		s->last_ns = now;
		pthread_mutex_unlock(&conn->lock);
		__djinn_call_detached(conn, DJINN_MSG_HEARTBEAT, sid, NULL, 0,
				      sizeof(struct djinn_session_resp),
				      heartbeat_done);
		pthread_mutex_lock(&conn->lock);
		return true; /* the list may have changed */
	}
	return false;
}

static void *keeper(void *arg)
{
	struct djinn_conn *conn = arg;
	uint64_t next;

	pthread_mutex_lock(&conn->lock);
	while (!conn->stopping) {
		struct timespec ts;

		if (atomic_load(&conn->dead)) {
			/* dial again at once, so that the leases are renewed */
			if (may_relink(conn) && !conn->relinking) {
				pthread_mutex_unlock(&conn->lock);
				relink(conn);
				pthread_mutex_lock(&conn->lock);
				continue;
			}
			pthread_cond_wait(&conn->keeper_cond, &conn->lock);
			continue;
		}
		if (keeper_step(conn, &next))
			continue;
		if (next == UINT64_MAX) {
			pthread_cond_wait(&conn->keeper_cond, &conn->lock);
			continue;
		}
		ts = ns_to_timespec(next);
		pthread_cond_timedwait(&conn->keeper_cond, &conn->lock, &ts);
	}
	pthread_mutex_unlock(&conn->lock);
	return NULL;
}

int __djinn_keeper_start(struct djinn_conn *conn)
{
	int ret = 0;

	pthread_mutex_lock(&conn->lock);
	if (!conn->keeper_started) {
		ret = -pthread_create(&conn->keeper, NULL, keeper, conn);
		conn->keeper_started = !ret;
	}
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Connecting */

static void conn_free(struct djinn_conn *conn)
{
	if (conn->rx_kick >= 0)
		close(conn->rx_kick);
	pthread_cond_destroy(&conn->keeper_cond);
	pthread_cond_destroy(&conn->relink_cond);
	pthread_mutex_destroy(&conn->send_lock);
	pthread_mutex_destroy(&conn->lock);
	__djinn_tls_free(conn->tls);
	free(conn->rx_buf);
	free(conn->dial);
	free(conn->tls_name);
	free((char *)conn->opts.tls_ca);
	free((char *)conn->opts.tls_cert);
	free((char *)conn->opts.tls_key);
	free((char *)conn->opts.token);
	free(conn);
}

/*
 * Request ids start at a random point: a session attached on several
 * connections names results (DJINN_REF_RESULT) by request_id, so the
 * connections' ids must not meet.
 */
static uint64_t first_request_id(void)
{
	uint64_t id = 0;

	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = __djinn_now_ns() ^ ((uint64_t)getpid() << 32);
	id &= (1ull << 62) - 1; /* room to count up */
	return id ? id : 1;
}

/* A connection on @fd, with @tls (NULL: none), which it owns from now,
 * failed or not. */
static int conn_start(int fd, struct dj_tls *tls, const char *transport,
		      struct djinn_conn **out)
{
	struct djinn_conn *conn;
	int ret = -ENOMEM;

	conn = calloc(1, sizeof(*conn));
	if (!conn) {
		__djinn_tls_free(tls);
		goto out_close;
	}
	conn->tls = tls;
	conn->transport = transport;
	conn->rx_kick = -1;
	conn->rx_buf = malloc(DJ_RX_BUF);
	if (!conn->rx_buf)
		goto out_free;
	conn->fd = fd;
	conn->uffd = -1;
	conn->uffd_stop = -1;
	atomic_init(&conn->next_id, first_request_id());
	pthread_mutex_init(&conn->lock, NULL);
	pthread_mutex_init(&conn->send_lock, NULL);
	cond_init_monotonic(&conn->keeper_cond);
	pthread_cond_init(&conn->relink_cond, NULL);
	for (unsigned int b = 0; b < DJ_CALL_BUCKETS; b++)
		INIT_LIST_HEAD(&conn->calls[b]);
	INIT_LIST_HEAD(&conn->sessions);
	INIT_LIST_HEAD(&conn->releases);
	INIT_LIST_HEAD(&conn->mappings);
	INIT_LIST_HEAD(&conn->rx_followers);
	conn->rx_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (conn->rx_kick < 0) {
		ret = -errno;
		goto out_free;
	}

	ret = -pthread_create(&conn->rx_thread, NULL, receiver, conn);
	if (ret)
		goto out_free;
	conn->rx_started = true;
	*out = conn;
	return 0;

out_free:
	conn_free(conn);
out_close:
	close(fd);
	return ret;
}

int __djinn_conn_start(int fd, struct djinn_conn **out)
{
	return conn_start(fd, NULL, "unix", out);
}

/*
 * Send @c's frame (@iov[@iovcnt]) and wait for its answer until
 * @deadline_ns (UINT64_MAX: none, and the caller reads for it): @c's
 * error. A deadline that passes kills the connection (-ETIMEDOUT).
 */
int __djinn_call_until(struct djinn_conn *conn, struct dj_call *c,
		       const struct iovec *iov, int iovcnt,
		       uint64_t deadline_ns)
{
	int ret;

	c->sync = deadline_ns == UINT64_MAX;
	ret = __djinn_call_send(conn, c, iov, iovcnt);
	if (ret)
		return ret;
	if (__djinn_call_wait(conn, c, deadline_ns) == -ETIMEDOUT) {
		__djinn_conn_fail(conn, -ETIMEDOUT, "%s: no answer in time",
				  __djinn_msg_str(c->type));
		__djinn_call_wait(conn, c,
				  UINT64_MAX); /* the reader fails it */
	}
	return c->err;
}

/* AUTH with @token: 0, or the daemon's error. */
static int auth(struct djinn_conn *conn, const char *token,
		uint64_t deadline_ns)
{
	struct djinn_auth a = { .len = (uint32_t)strlen(token) };
	struct iovec iov[2] = { { &a, sizeof(a) }, { (void *)token, a.len } };
	struct djinn_auth_resp r;
	struct dj_call c;
	int ret;

	if (!a.len || a.len > DJINN_AUTH_TOKEN_MAX) {
		__djinn_set_last_error("a token of 1 to %d bytes, not %u",
				       DJINN_AUTH_TOKEN_MAX, a.len);
		return -EINVAL;
	}
	__djinn_call_init(&c, DJINN_MSG_AUTH, 0, &r, sizeof(r));
	ret = __djinn_call_until(conn, &c, iov, 2, deadline_ns);
	if (ret) {
		__djinn_set_last_error("AUTH: %s", c.msg);
		dj_err("AUTH: %s: %s", strerror(-ret), c.msg);
	} else {
		r.tenant[sizeof(r.tenant) - 1] = 0;
		dj_dbg("AUTH: tenant %s", r.tenant);
	}
	__djinn_call_destroy(&c);
	return ret;
}

/* HELLO, and its answer checked and kept in conn->server. */
static int hello(struct djinn_conn *conn, uint64_t deadline_ns)
{
	struct djinn_hello_resp h;
	struct dj_call c;
	int ret;

	__djinn_call_init(&c, DJINN_MSG_HELLO, 0, &h, sizeof(h));
	ret = __djinn_call_until(conn, &c, NULL, 0, deadline_ns);
	if (ret == -EPROTONOSUPPORT)
		dj_err("djinnd speaks protocol version %u, libdjinn version "
		       "%u: %s",
		       c.peer_version, DJINN_PROTO_VERSION, c.msg);
	else if (ret)
		dj_err("HELLO: %s: %s", strerror(-ret), c.msg);
	__djinn_call_destroy(&c);
	if (ret)
		return ret;

	if (h.version != DJINN_PROTO_VERSION) {
		dj_err("djinnd speaks protocol version %u, libdjinn version %u",
		       h.version, DJINN_PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h.max_payload <= sizeof(struct djinn_tensor_create) ||
	    h.max_payload > DJINN_MAX_PAYLOAD) {
		__djinn_conn_fail(conn, -EPROTO, "HELLO: max_payload %llu",
				  (unsigned long long)h.max_payload);
		return -EPROTO;
	}
	conn->server.version = h.version;
	conn->server.features = h.features;
	conn->server.max_payload = h.max_payload;
	conn->server.capacity = h.capacity;
	conn->server.granularity = h.granularity;
	memcpy(conn->server.backend, h.backend, sizeof(h.backend));
	conn->server.backend[sizeof(h.backend)] = '\0';
	dj_dbg("connected: djinnd protocol %u, backend %s, capacity %llu",
	       h.version, conn->server.backend, (unsigned long long)h.capacity);
	return 0;
}

int __djinn_hello(struct djinn_conn *conn)
{
	return hello(conn, UINT64_MAX);
}

int djinn_connect(const char *addr, struct djinn_conn **out)
{
	return djinn_connect_opts(addr, NULL, out);
}

const char *djinn_conn_transport(const struct djinn_conn *conn)
{
	return conn ? conn->transport : NULL;
}

/* Bound the socket's blocking reads and writes to @deadline_ns
 * (UINT64_MAX: none), for a handshake that must not wait forever. */
static void sock_deadline(int fd, uint64_t deadline_ns)
{
	struct timeval tv = { 0 };

	if (deadline_ns != UINT64_MAX) {
		uint64_t now = __djinn_now_ns();
		uint64_t left = deadline_ns > now ? deadline_ns - now : 1000;

		tv.tv_sec = (time_t)(left / 1000000000u);
		tv.tv_usec = (suseconds_t)(left % 1000000000u / 1000u);
		if (!tv.tv_sec && !tv.tv_usec)
			tv.tv_usec = 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/*
 * Dial @a (named @dial in messages) and, for tls:, shake hands with @o's
 * files, the handshake bounded by @deadline_ns: 0 with *@fd and *@tls
 * (NULL without TLS), else -errno with why in @why. *@quiet: a dial that
 * failed, which is logged at debug level only.
 */
static int link_open(const struct dj_addr *a, const char *dial,
		     const struct djinn_connect_opts *o, uint64_t deadline_ns,
		     int *fd, struct dj_tls **tls, char *why, size_t len,
		     bool *quiet)
{
	char e[DJINN_MAX_ERROR_MSG - 96];
	int ret;

	*tls = NULL;
	*quiet = false;
	/* TLS: its files are read before anything is dialled */
	if (a->tls) {
		ret = __djinn_tls_new(o, tls, e, sizeof(e));
		if (ret) {
			snprintf(why, len, "tls:%.64s:%s: %s", a->host, a->port,
				 e);
			return ret;
		}
	}
	*fd = a->is_unix ? dial_unix(a) : dial_tcp(a, deadline_ns);
	if (*fd < 0) {
		ret = *fd;
		*quiet = true;
		snprintf(why, len, "connecting to %s: %s", dial,
			 strerror(-ret));
		__djinn_tls_free(*tls);
		*tls = NULL;
		return ret;
	}
	if (*tls) {
		sock_deadline(*fd, deadline_ns);
		ret = __djinn_tls_handshake(
			*tls, *fd, a->tls_name[0] ? a->tls_name : a->host, e,
			sizeof(e));
		sock_deadline(*fd, UINT64_MAX);
		if (ret) {
			snprintf(why, len, "tls:%.64s:%s: %s", a->host, a->port,
				 e);
			__djinn_tls_free(*tls);
			*tls = NULL;
			close(*fd);
			return ret;
		}
	}
	return 0;
}

static const char *link_transport(const struct dj_addr *a,
				  const struct dj_tls *tls)
{
	return tls ? __djinn_tls_mode(tls) : a->is_unix ? "unix" : "tcp";
}

/* How long to try to dial again: @o's, $DJINN_RECONNECT_MS, 60 s. */
static uint64_t relink_ns(const struct djinn_connect_opts *o)
{
	size_t end = offsetof(struct djinn_connect_opts, reconnect_ms) +
		     sizeof(long);
	long ms = o && o->size >= end ? o->reconnect_ms : 0;
	const char *e;

	if (!ms) {
		e = getenv("DJINN_RECONNECT_MS");
		ms = e && *e ? strtol(e, NULL, 10) : 60000;
		if (!ms)
			ms = -1;
	}
	if (ms > 86400000L) /* a day: past it, overflow */
		ms = 86400000L;
	return ms < 0 ? 0 : (uint64_t)ms * NSEC_PER_MSEC;
}

/* Keep what @conn was dialled with (and the name its certificate is
 * checked against, when not the dialled host), for relink(): 0 or
 * -ENOMEM. The
 * receiver may look (may_relink()): under conn->lock. */
static int conn_keep_dial(struct djinn_conn *conn, const char *dial,
			  const char *tls_name,
			  const struct djinn_connect_opts *o)
{
	const char *const src[4] = { DJ_OPT(o, tls_ca), DJ_OPT(o, tls_cert),
				     DJ_OPT(o, tls_key), DJ_OPT(o, token) };
	const char **dst[4] = { &conn->opts.tls_ca, &conn->opts.tls_cert,
				&conn->opts.tls_key, &conn->opts.token };
	int ret = 0;

	pthread_mutex_lock(&conn->lock);
	conn->opts.size = sizeof(conn->opts);
	for (int i = 0; i < 4 && !ret; i++)
		if (src[i] && !(*dst[i] = strdup(src[i])))
			ret = -ENOMEM;
	if (!ret) {
		conn->dial = strdup(dial);
		ret = conn->dial ? 0 : -ENOMEM;
	}
	if (!ret && tls_name && !(conn->tls_name = strdup(tls_name)))
		ret = -ENOMEM;
	if (!ret)
		conn->relink_ns = relink_ns(o);
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

/*
 * The token for AUTH: @o's, else $DJINN_TOKEN, else the first line of
 * the file $DJINN_TOKEN_FILE names (a token a device plugin wrote, read
 * again at each connect: a new one is taken up), into @buf[@len]; else
 * NULL.
 */
static const char *auth_token(const struct djinn_connect_opts *o, char *buf,
			      size_t len)
{
	const char *token = DJ_OPT(o, token), *path;
	FILE *f;
	size_t n;

	if (!token || !*token)
		token = getenv("DJINN_TOKEN");
	if (token && *token)
		return token;
	path = getenv("DJINN_TOKEN_FILE");
	if (!path || !*path)
		return NULL;
	f = fopen(path, "re");
	if (!f) {
		dj_err("$DJINN_TOKEN_FILE %s: %s", path, strerror(errno));
		return NULL;
	}
	if (!fgets(buf, (int)len, f))
		buf[0] = 0;
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = 0;
	return n ? buf : NULL;
}

/*
 * AUTH when there is a token: over TLS (to the server its certificate
 * proved), and on a unix socket that says it takes one
 * (DJINN_FEAT_TOKEN_AUTH: server.token_auth's) and whose server the
 * kernel says is root or this user, never to another's socket (an
 * abstract name, or a path in a shared directory, that someone else
 * bound first). Elsewhere on unix the peer's uid names the tenant, and
 * the token stays here.
 */
static int auth_maybe(struct djinn_conn *conn, const struct dj_addr *a,
		      const struct dj_tls *tls, const char *token,
		      uint64_t deadline_ns)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (!token || (!tls && !a->is_unix))
		return 0;
	if (!tls && !(conn->server.features & DJINN_FEAT_TOKEN_AUTH))
		return 0;
	if (!tls && (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
		     (cr.uid && cr.uid != geteuid()))) {
		__djinn_set_last_error("a unix socket asking for a token, "
				       "served by uid %d, neither root nor "
				       "this user: the token is not sent",
				       (int)cr.uid);
		dj_err("%s", djinn_last_error());
		return -EACCES;
	}
	return auth(conn, token, deadline_ns);
}

int djinn_connect_opts(const char *addr, const struct djinn_connect_opts *o,
		       struct djinn_conn **out)
{
	char name[DJINN_ADDR_NAME_MAX];
	const char *dial, *from;

	if (!out)
		return -EINVAL;
	dial = __djinn_addr_name(addr, name, sizeof(name), &from);
	/* a name that gives several djinnd: the best of them for @o */
	if (!strncmp(dial, "dns:", 4) || !strncmp(dial, "srv:", 4))
		return __djinn_place(dial, o, out);
	return __djinn_connect_at(addr, NULL, o, UINT64_MAX, out);
}

int __djinn_connect_at(const char *addr, const char *tls_name,
		       const struct djinn_connect_opts *o, uint64_t deadline_ns,
		       struct djinn_conn **out)
{
	char why[DJINN_MAX_ERROR_MSG], name[DJINN_ADDR_NAME_MAX], note[64] = "";
	char dial_note[DJINN_ADDR_NAME_MAX + 64];
	char tokbuf[DJINN_AUTH_TOKEN_MAX + 2];
	struct djinn_conn *conn;
	struct dj_tls *tls = NULL;
	const char *token, *dial, *from;
	struct dj_addr a;
	bool quiet;
	int fd, ret, err;

	if (!out)
		return -EINVAL;
	dial = __djinn_addr_name(addr, name, sizeof(name), &from);
	if (from)
		snprintf(note, sizeof(note), " (%s)", from);
	ret = __djinn_addr_parse(dial, &a);
	if (ret) {
		dj_dbg("address \"%s\"%s: not unix:PATH, tcp:HOST:PORT or "
		       "tls:HOST:PORT",
		       dial, note);
		return ret;
	}
	snprintf(dial_note, sizeof(dial_note), "%s%s", dial, note);
	if (tls_name)
		snprintf(a.tls_name, sizeof(a.tls_name), "%s", tls_name);
	ret = link_open(&a, dial_note, o, deadline_ns, &fd, &tls, why,
			sizeof(why), &quiet);
	if (ret) {
		__djinn_set_last_error("%s", why);
		if (quiet)
			dj_dbg("%s", why);
		else
			dj_err("%s", why);
		return ret;
	}
	ret = conn_start(fd, tls, link_transport(&a, tls), &conn);
	if (ret)
		return ret;
	ret = hello(conn, deadline_ns);
	/* Why the connection died, for the caller: in TLS 1.3 a server
	 * refuses the client's certificate after the client's handshake is
	 * done, with an alert that may be behind the failure seen first. */
	if (ret && tls &&
	    (err = __djinn_tls_alert(tls, fd, why, sizeof(why)))) {
		ret = err;
		__djinn_set_last_error("tls:%s:%s: %s", a.host, a.port, why);
		dj_err("tls:%s:%s: %s", a.host, a.port, why);
	} else if (ret) {
		__djinn_set_last_error("%s", atomic_load(&conn->dead) &&
							     conn->dead_msg[0] ?
						     conn->dead_msg :
						     strerror(-ret));
	}
	token = auth_token(o, tokbuf, sizeof(tokbuf));
	if (!ret)
		ret = auth_maybe(conn, &a, tls, token, deadline_ns);
	explicit_bzero(tokbuf, sizeof(tokbuf));
	/* only a connection made is made again */
	if (!ret)
		ret = conn_keep_dial(conn, dial, tls_name, o);
	if (ret) {
		djinn_disconnect(conn);
		return ret;
	}
	*out = conn;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Reconnecting */

/* The receiver is done (it failed every pending call): join it. Takes
 * conn->lock. */
static void rx_join(struct djinn_conn *conn)
{
	pthread_mutex_lock(&conn->lock);
	shutdown(conn->fd, SHUT_RDWR);
	rx_kick(conn);
	while (!conn->rx_failed)
		pthread_cond_wait(&conn->keeper_cond, &conn->lock);
	pthread_mutex_unlock(&conn->lock);
	if (conn->rx_started)
		pthread_join(conn->rx_thread, NULL);
	conn->rx_started = false;
}

/* Put connected @fd and @tls (@conn's from now, in every case: on a
 * failure the link stays dead) in the dead link's place, with a new
 * receiver. */
static int link_install(struct djinn_conn *conn, int fd, struct dj_tls *tls,
			const char *transport)
{
	int ret;

	pthread_mutex_lock(&conn->send_lock);
	pthread_mutex_lock(&conn->lock);
	close(conn->fd);
	__djinn_tls_free(conn->tls);
	conn->fd = fd;
	conn->tls = tls;
	conn->transport = transport;
	conn->rx_head = conn->rx_tail = 0;
	conn->rx_hup = conn->rx_busy = conn->rx_wants = false;
	conn->goaway = false;
	conn->link_gen++;
	ret = -pthread_create(&conn->rx_thread, NULL, receiver, conn);
	conn->rx_started = !ret;
	if (!ret) {
		conn->rx_failed = false;
		atomic_store(&conn->dead, 0);
		conn->dead_msg[0] = '\0';
	}
	pthread_mutex_unlock(&conn->lock);
	pthread_mutex_unlock(&conn->send_lock);
	return ret;
}

/*
 * Mark @s lost, and its requests (which name it by id), and drop the
 * releases queued for it: a fresh djinnd may give its number to another
 * session. Under conn->lock.
 */
static void session_lose(struct djinn_conn *conn, struct djinn_session *s)
{
	uint64_t id = s->id;
	struct djinn_request *req;
	struct dj_release *rel, *tmp;

	s->id |= DJ_SESSION_LOST;
	s->expired = true;
	list_for_each_entry(req, &s->requests, node)
		req->session_id |= DJ_SESSION_LOST;
	list_for_each_entry_safe(rel, tmp, &conn->releases, node) {
		if (rel->session_id == id) {
			list_del_init(&rel->node);
			free(rel);
		}
	}
}

/*
 * ATTACH every session of @conn on its new link. One djinnd no longer
 * has is lost (and one on /dev/djinn, or expired): its calls fail with
 * -ENOENT from now on. 0, or the error that broke the link.
 */
static int relink_sessions(struct djinn_conn *conn, uint64_t deadline_ns,
			   unsigned int *nr, unsigned int *lost)
{
	struct djinn_session *s;
	uint64_t *ids = NULL;
	uint8_t *tokens = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;

	*nr = *lost = 0;
	pthread_mutex_lock(&conn->lock);
	list_for_each_entry(s, &conn->sessions, node) {
		if (s->id & DJ_SESSION_LOST)
			continue;
		/* gone: a kernel lease ends with the old djinnd's
		 * /dev/djinn file; an expired one djinnd said it had not */
		if (s->kdev || s->expired) {
			session_lose(conn, s);
			(*lost)++;
			continue;
		}
		cap++;
	}
	if (cap) {
		ids = malloc(cap * sizeof(*ids));
		tokens = malloc(cap * DJINN_TOKEN_LEN);
	}
	if (cap && (!ids || !tokens))
		ret = -ENOMEM;
	list_for_each_entry(s, &conn->sessions, node) {
		if (ret || (s->id & DJ_SESSION_LOST))
			continue;
		ids[n] = s->id;
		memcpy(tokens + n * DJINN_TOKEN_LEN, s->token, DJINN_TOKEN_LEN);
		n++;
	}
	pthread_mutex_unlock(&conn->lock);

	for (size_t i = 0; !ret && i < n; i++) {
		struct djinn_session_attach req;
		struct iovec iov = { &req, sizeof(req) };
		struct djinn_session_resp r;
		struct dj_call c;
		int err;

		memcpy(req.token, tokens + i * DJINN_TOKEN_LEN,
		       sizeof(req.token));
		__djinn_call_init(&c, DJINN_MSG_SESSION_ATTACH, ids[i], &r,
				  sizeof(r));
		err = __djinn_call_until(conn, &c, &iov, 1, deadline_ns);
		if (err && atomic_load(&conn->dead)) {
			ret = err;
		} else if (err == -ENOENT || err == -EPERM) {
			dj_warn("session %llu: lost when djinnd restarted: %s",
				(unsigned long long)ids[i], c.msg);
			pthread_mutex_lock(&conn->lock);
			s = find_session(conn, ids[i]);
			if (s)
				session_lose(conn, s);
			pthread_mutex_unlock(&conn->lock);
			(*lost)++;
		} else if (err) {
			ret = err;
		} else {
			pthread_mutex_lock(&conn->lock);
			s = find_session(conn, ids[i]);
			if (s) {
				s->lease_ns = r.lease_ns;
				s->deadline_ns = r.deadline_ns;
				s->last_ns = __djinn_now_ns();
			}
			pthread_mutex_unlock(&conn->lock);
			(*nr)++;
		}
		__djinn_call_destroy(&c);
	}
	free(ids);
	free(tokens);
	return ret;
}

/* One try at a new link, attached: 0, or why not in @why (the link, if
 * made, dead again). */
static int relink_once(struct djinn_conn *conn, const struct dj_addr *a,
		       uint64_t deadline_ns, char *why, size_t len,
		       unsigned int *nr, unsigned int *lost)
{
	char tokbuf[DJINN_AUTH_TOKEN_MAX + 2];
	struct dj_tls *tls;
	const char *token;
	bool quiet;
	int fd, ret;

	ret = link_open(a, conn->dial, &conn->opts, deadline_ns, &fd, &tls, why,
			len, &quiet);
	if (ret)
		return ret;
	ret = link_install(conn, fd, tls, link_transport(a, tls));
	if (ret) {
		snprintf(why, len, "starting the receiver: %s", strerror(-ret));
		return ret;
	}
	ret = hello(conn, deadline_ns);
	token = auth_token(&conn->opts, tokbuf, sizeof(tokbuf));
	if (!ret)
		ret = auth_maybe(conn, a, tls, token, deadline_ns);
	explicit_bzero(tokbuf, sizeof(tokbuf));
	if (!ret)
		ret = relink_sessions(conn, deadline_ns, nr, lost);
	if (ret) {
		pthread_mutex_lock(&conn->lock);
		snprintf(why, len, "%s",
			 conn->dead_msg[0] ? conn->dead_msg : strerror(-ret));
		pthread_mutex_unlock(&conn->lock);
		__djinn_conn_fail(conn, ret, "reconnecting: %s",
				  strerror(-ret));
		rx_join(conn);
	}
	return ret;
}

/* A refusal a new try would meet again. */
static bool relink_refused(int err)
{
	return err == -EACCES || err == -EPERM || err == -EPROTONOSUPPORT ||
	       err == -EPROTO || err == -EINVAL || err == -ENOMEM;
}

/*
 * Dial again after djinnd dropped the connection, and attach its
 * sessions on the new one, trying for up to conn->relink_ns: 0 once the
 * connection is up (made by this thread or another), else the error
 * every later call gets. One thread dials; the others wait for it.
 */
static int relink(struct djinn_conn *conn)
{
	uint64_t start, deadline, now = 0, delay = 20 * NSEC_PER_MSEC;
	char why[DJINN_MAX_ERROR_MSG] = "";
	unsigned int tries = 0, nr = 0, lost = 0;
	struct dj_addr a;
	int ret;

	pthread_mutex_lock(&conn->lock);
	while (conn->relinking)
		pthread_cond_wait(&conn->relink_cond, &conn->lock);
	ret = atomic_load(&conn->dead);
	if (!ret || !may_relink(conn)) {
		pthread_mutex_unlock(&conn->lock);
		return ret;
	}
	conn->relinking = true;
	conn->relinker = pthread_self();
	pthread_mutex_unlock(&conn->lock);

	rx_join(conn);
	pthread_mutex_lock(&conn->lock);
	dj_info("connection to djinnd at %s lost (%s): reconnecting",
		conn->dial, conn->dead_msg);
	pthread_mutex_unlock(&conn->lock);
	start = __djinn_now_ns();
	deadline = start + conn->relink_ns;
	ret = __djinn_addr_parse(conn->dial, &a);
	if (!ret && conn->tls_name)
		snprintf(a.tls_name, sizeof(a.tls_name), "%s", conn->tls_name);
	while (!ret || !relink_refused(ret)) {
		struct timespec ts;

		if (conn->stopping) { /* djinn_disconnect() waits */
			ret = -ESHUTDOWN;
			break;
		}
		tries++;
		ret = relink_once(conn, &a, deadline, why, sizeof(why), &nr,
				  &lost);
		now = __djinn_now_ns();
		if (!ret || relink_refused(ret) || now >= deadline)
			break;
		/* djinnd is not back yet: a while, longer each time */
		ts = ns_to_timespec(min_t(uint64_t, now + delay, deadline));
		pthread_mutex_lock(&conn->lock);
		if (!conn->stopping)
			pthread_cond_timedwait(&conn->keeper_cond, &conn->lock,
					       &ts);
		ret = conn->stopping ? -ESHUTDOWN : ret;
		pthread_mutex_unlock(&conn->lock);
		if (ret == -ESHUTDOWN)
			break;
		delay = min_t(uint64_t, delay * 2, 1000 * NSEC_PER_MSEC);
	}

	pthread_mutex_lock(&conn->lock);
	conn->relinking = false;
	now = __djinn_now_ns();
	if (ret == -ESHUTDOWN || conn->stopping) {
		conn->relink_failed = true;
		atomic_store(&conn->dead, -ESHUTDOWN);
		snprintf(conn->dead_msg, sizeof(conn->dead_msg),
			 "djinn_disconnect() while reconnecting");
	} else if (ret && relink_refused(ret)) {
		/* a new try would meet it again: said as it is */
		conn->relink_failed = true;
		atomic_store(&conn->dead, ret);
		snprintf(conn->dead_msg, sizeof(conn->dead_msg),
			 "reconnecting to djinnd at %.64s: refused: %.120s",
			 conn->dial, why);
		dj_err("%s", conn->dead_msg);
	} else if (ret) {
		conn->relink_failed = true;
		atomic_store(&conn->dead, -ENOTCONN);
		snprintf(conn->dead_msg, sizeof(conn->dead_msg),
			 "djinnd at %.64s did not come back in %llu ms (%u "
			 "tries): %.100s",
			 conn->dial,
			 (unsigned long long)((now - start) / NSEC_PER_MSEC),
			 tries, why);
		dj_err("%s", conn->dead_msg);
		ret = -ENOTCONN;
	} else {
		atomic_fetch_add(&conn->reconnects, 1);
		dj_info("reconnected to djinnd at %s in %llu ms: %u sessions "
			"attached, %u lost",
			conn->dial,
			(unsigned long long)((now - start) / NSEC_PER_MSEC), nr,
			lost);
	}
	pthread_cond_broadcast(&conn->relink_cond);
	pthread_cond_broadcast(&conn->keeper_cond);
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

uint64_t djinn_conn_reconnects(const struct djinn_conn *conn)
{
	return conn ? atomic_load(&conn->reconnects) : 0;
}

void djinn_disconnect(struct djinn_conn *conn)
{
	uint64_t one = 1;

	if (!conn)
		return;
	/* no new link from now on; one being made is finished first */
	pthread_mutex_lock(&conn->lock);
	conn->stopping = true;
	pthread_cond_broadcast(&conn->keeper_cond);
	if (conn->relinking) /* cut its HELLO or ATTACH short */
		shutdown(conn->fd, SHUT_RDWR);
	while (conn->relinking)
		pthread_cond_wait(&conn->relink_cond, &conn->lock);
	pthread_mutex_unlock(&conn->lock);
	__djinn_conn_fail(conn, -ESHUTDOWN, "djinn_disconnect()");
	if (conn->rx_started)
		pthread_join(conn->rx_thread, NULL);
	if (conn->keeper_started)
		pthread_join(conn->keeper, NULL);
	if (conn->uffd_started) {
		if (write(conn->uffd_stop, &one, sizeof(one)) != sizeof(one))
			dj_warn("stopping the fault handler: %s",
				strerror(errno));
		pthread_join(conn->uffd_thread, NULL);
	}

	/* every thread is gone: no locking needed, but the helpers take it */
	while (!list_empty(&conn->sessions)) {
		struct djinn_session *s = list_first_entry(
			&conn->sessions, struct djinn_session, node);

		list_del_init(&s->node);
		__djinn_session_teardown(s);
		free(s);
	}
	while (!list_empty(&conn->releases)) {
		struct dj_release *rel = list_first_entry(
			&conn->releases, struct dj_release, node);

		list_del_init(&rel->node);
		free(rel);
	}
	if (conn->uffd >= 0)
		close(conn->uffd);
	if (conn->uffd_stop >= 0)
		close(conn->uffd_stop);
	close(conn->fd);
	conn_free(conn);
}

/* ---------------------------------------------------------------------- */
/* Getters */

int djinn_conn_server_info(struct djinn_conn *conn,
			   struct djinn_server_info *info)
{
	if (!conn || !info)
		return -EINVAL;
	*info = conn->server;
	return 0;
}

int djinn_conn_ping(struct djinn_conn *conn)
{
	if (!conn)
		return -EINVAL;
	return __djinn_call_sync(conn, DJINN_MSG_HEARTBEAT, 0, NULL, 0, NULL,
				 0);
}

int djinn_conn_stats(struct djinn_conn *conn, struct djinn_conn_stats *stats)
{
	if (!conn || !stats)
		return -EINVAL;
	stats->bytes_sent = atomic_load(&conn->bytes_sent);
	stats->bytes_received = atomic_load(&conn->bytes_received);
	stats->requests = atomic_load(&conn->requests);
	stats->responses = atomic_load(&conn->responses);
	stats->map_faults = atomic_load(&conn->map_faults);
	stats->map_bytes = atomic_load(&conn->map_bytes);
	return 0;
}
