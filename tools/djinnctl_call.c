// SPDX-License-Identifier: MIT
/*
 * djinnctl's one admin request (djinnctl.h): the connection to the
 * admin socket, the request, the answer checked field by field, the
 * daemon's errors and djinnctl's own one-line failures; the lists
 * that answers hold, and the names of their enumerations.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <djinn/proto.h>

#include "cli.h"
#include "clock.h"
#include "djinnctl.h"
#include "rundir.h"

/* ---------------------------------------------------------------------- */
/* Messages */

/* One line naming what failed; returns the exit status 1. */
int fail(const struct ctl *ctl, int err, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "djinnctl: %s %s: ", ctl->object, ctl->command);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (%s)\n", errno_name(err));
	return 1;
}

/* Copy a string from the wire, at most @size - 1 bytes, with anything
 * that is not printable ASCII replaced: the daemon checks tenant names,
 * but a terminal should not have to trust it. */
char *wire_str(char *dst, size_t size, const char *src, size_t len)
{
	size_t n = strnlen(src, len < size ? len : size - 1);

	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] > ' ' && src[i] <= '~' ? src[i] : '?';
	dst[n] = 0;
	return dst;
}

/* ---------------------------------------------------------------------- */
/* The admin socket */

/* -s, else $DJINN_ADMIN_SOCKET, else where djinnd puts it by default
 * (lib/rundir.h, as libdjinn finds djinnd.sock). */
const char *default_socket(void)
{
	static char path[4200];
	const char *env = getenv("DJINN_ADMIN_SOCKET");

	if (env && *env)
		return env;
	djinnd_socket_find("admin.sock", path, sizeof(path));
	return path;
}

static int ctl_connect(struct ctl *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = IO_TIMEOUT_MS / 1000 };
	uint64_t timeout = ctl->timeout_ms ? ctl->timeout_ms : IO_TIMEOUT_MS;
	int err;

	if (strlen(ctl->socket) >= sizeof(sa.sun_path))
		return fail(ctl, ENAMETOOLONG,
			    "cannot connect to %s: path longer than %zu bytes",
			    ctl->socket, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, ctl->socket);
	ctl->deadline = mono_ns() + timeout * NSEC_PER_MSEC;
	ctl->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ctl->fd < 0)
		goto out_err;
	/* Bounds connect() when the listen backlog is full. */
	if (setsockopt(ctl->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		goto out_close;
	if (connect(ctl->fd, (struct sockaddr *)&sa, sizeof(sa)))
		goto out_close;
	return 0;

out_close:
	err = errno;
	close(ctl->fd);
	ctl->fd = -1;
	errno = err;
out_err:
	err = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT : errno;
	return fail(ctl, err, "cannot connect to %s: %s", ctl->socket,
		    strerror(err));
}

/* Move @len bytes to or from the socket by the deadline: 0 or -errno. */
static int xfer(struct ctl *ctl, void *buf, size_t len, bool out)
{
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = { ctl->fd, out ? POLLOUT : POLLIN, 0 };
		uint64_t now = mono_ns();
		ssize_t n;

		if (out)
			n = send(ctl->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		else
			n = recv(ctl->fd, p, len, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (now >= ctl->deadline)
			return -ETIMEDOUT;
		n = poll(&pfd, 1,
			 (int)((ctl->deadline - now + NSEC_PER_MSEC - 1) /
			       NSEC_PER_MSEC));
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

/* @what: "sending the request", "reading the answer". */
static int io_fail(struct ctl *ctl, int err, const char *what)
{
	if (err == -ETIMEDOUT)
		return fail(ctl, ETIMEDOUT, "%s on %s: no progress within %d s",
			    what, ctl->socket, IO_TIMEOUT_MS / 1000);
	return fail(ctl, -err, "%s on %s: %s", what, ctl->socket,
		    err == -ECONNRESET ? "djinnd closed the connection" :
					 strerror(-err));
}

/* The header of an answer to @req, checked field by field. */
static int check_hdr(struct ctl *ctl, const struct djinn_hdr *h,
		     const struct djinn_hdr *req)
{
	if (h->magic != DJINN_MAGIC)
		return fail(ctl, EPROTO, "bad magic %#x from %s: not djinnd?",
			    h->magic, ctl->socket);
	if (h->version != DJINN_PROTO_VERSION)
		return fail(ctl, EPROTONOSUPPORT,
			    "djinnd speaks protocol version %u, djinnctl %u",
			    h->version, DJINN_PROTO_VERSION);
	if (!(h->flags & DJINN_F_RESPONSE) || h->flags & ~DJINN_F_ALL ||
	    h->__reserved)
		return fail(ctl, EPROTO, "bad answer header: flags %#x%s",
			    h->flags, h->__reserved ? ", reserved set" : "");
	if (h->type != req->type || h->request_id != req->request_id ||
	    h->session_id != req->session_id)
		return fail(ctl, EPROTO,
			    "answer for opcode %u request %" PRIu64
			    ", asked opcode %u request %" PRIu64,
			    h->type, (uint64_t)h->request_id, req->type,
			    (uint64_t)req->request_id);
	return 0;
}

/* The daemon's error: its message, its errno. */
static int daemon_error(struct ctl *ctl, const uint8_t *buf, uint64_t len)
{
	char msg[DJINN_MAX_ERROR_MSG + 1];
	struct djinn_error e;

	memcpy(&e, buf, sizeof(e));
	if (e.len != len - sizeof(e) || e.error >= 0 || e.error < -4095)
		return fail(ctl, EPROTO,
			    "malformed error answer: error %d, %u of %" PRIu64
			    " bytes",
			    e.error, e.len, len - (uint64_t)sizeof(e));
	/* A message may hold spaces; only control bytes are replaced. */
	for (uint32_t i = 0; i < e.len; i++) {
		char ch = (char)buf[sizeof(e) + i];

		msg[i] = ch >= ' ' && ch <= '~' ? ch : '?';
	}
	msg[e.len] = 0;
	return fail(ctl, -e.error, "%s", e.len ? msg : strerror(-e.error));
}

/*
 * One request: connect, send @op with @req_len bytes of @req, read the
 * answer and check it. An answer that is not an error must be @min to
 * @max bytes. Returns 0 with the payload in *ans (malloc'ed, the caller
 * frees it; NULL when empty) and its length in *len, or the exit status
 * 1 once it has said what failed.
 */
int admin_call(struct ctl *ctl, uint16_t op, const void *req, uint32_t req_len,
	       uint64_t min, uint64_t max, void **ans, uint64_t *len)
{
	/* the largest request: ADMIN_MODEL_LOAD's */
	uint8_t out[sizeof(struct djinn_hdr) +
		    sizeof(struct djinn_admin_model_load)];
	struct djinn_hdr q = {
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = op,
		.request_id = 1,
		.payload_len = req_len,
	};
	const char *what = "sending the request";
	struct djinn_hdr h;
	uint8_t *buf = NULL;
	int ret;

	*ans = NULL;
	*len = 0;
	if (req_len > sizeof(out) - sizeof(q))
		return fail(ctl, EMSGSIZE, "request of %u bytes", req_len);
	ret = ctl_connect(ctl);
	if (ret)
		return ret;
	memcpy(out, &q, sizeof(q));
	if (req_len)
		memcpy(out + sizeof(q), req, req_len);
	ret = xfer(ctl, out, sizeof(q) + req_len, true);
	if (ret)
		goto out_io;
	what = "reading the answer";
	ret = xfer(ctl, &h, sizeof(h), false);
	if (ret)
		goto out_io;
	ret = check_hdr(ctl, &h, &q);
	if (ret)
		goto out_close;

	if (h.flags & DJINN_F_ERROR) {
		min = sizeof(struct djinn_error);
		max = sizeof(struct djinn_error) + DJINN_MAX_ERROR_MSG;
	}
	if (h.payload_len < min || h.payload_len > max) {
		char range[48];

		snprintf(range, sizeof(range),
			 min == max ? "%" PRIu64 : "%" PRIu64 " to %" PRIu64,
			 min, max);
		ret = fail(ctl, EPROTO,
			   "answer of %" PRIu64 " bytes, expected %s%s",
			   (uint64_t)h.payload_len, range,
			   h.flags & DJINN_F_ERROR ? " for an error" : "");
		goto out_close;
	}
	if (h.payload_len) {
		buf = malloc(h.payload_len);
		if (!buf) {
			ret = fail(ctl, ENOMEM,
				   "no memory for %" PRIu64 " bytes of answer",
				   (uint64_t)h.payload_len);
			goto out_close;
		}
		ret = xfer(ctl, buf, h.payload_len, false);
		if (ret)
			goto out_io;
	}
	close(ctl->fd);
	ctl->fd = -1;
	if (h.flags & DJINN_F_ERROR) {
		ret = daemon_error(ctl, buf, h.payload_len);
		free(buf);
		return ret;
	}
	*ans = buf;
	*len = h.payload_len;
	return 0;

out_io:
	ret = io_fail(ctl, ret, what);
out_close:
	free(buf);
	close(ctl->fd);
	ctl->fd = -1;
	return ret;
}

/*
 * An answer that lists entries (ADMIN_SESSIONS, ADMIN_MODELS): a __u32
 * count, a zero __u32, then the entries of @esz bytes. *@es gets the
 * entries (malloc()ed, the caller frees), *@nr their number.
 */
int admin_list_req(struct ctl *ctl, uint16_t op, const void *req,
		   uint32_t req_len, size_t esz, const char *what, void **es,
		   uint32_t *nr)
{
	uint32_t head[2];
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, op, req, req_len, sizeof(head), MAX_ANSWER, &buf,
			 &len);
	if (ret)
		return ret;
	memcpy(head, buf, sizeof(head));
	if (head[1] || (len - sizeof(head)) % esz ||
	    (len - sizeof(head)) / esz != head[0]) {
		ret = fail(ctl, EPROTO,
			   "%s list of %" PRIu64 " bytes for %u entries%s",
			   what, len, head[0], head[1] ? ", reserved set" : "");
		free(buf);
		return ret;
	}
	memmove(buf, (uint8_t *)buf + sizeof(head), len - sizeof(head));
	*es = buf;
	*nr = head[0];
	return 0;
}

int admin_list(struct ctl *ctl, uint16_t op, size_t esz, const char *what,
	       void **es, uint32_t *nr)
{
	return admin_list_req(ctl, op, NULL, 0, esz, what, es, nr);
}

/* ---------------------------------------------------------------------- */
/* Names */

const char *const phase_names[DJINN_PHASE_IDLE + 1] = {
	[DJINN_PHASE_UNKNOWN] = "unknown",   [DJINN_PHASE_PREFILL] = "prefill",
	[DJINN_PHASE_DECODE] = "decode",     [DJINN_PHASE_VISION] = "vision",
	[DJINN_PHASE_TRAINING] = "training", [DJINN_PHASE_IO_WAIT] = "io_wait",
	[DJINN_PHASE_COMPUTE] = "compute",   [DJINN_PHASE_IDLE] = "idle",
};

/* @names[v], or the number for a value the table lacks. */
const char *enum_name(char *buf, size_t size, const char *const *names,
		      size_t n, uint32_t v)
{
	if (v < n && names[v])
		return names[v];
	snprintf(buf, size, "%u", v);
	return buf;
}
