// SPDX-License-Identifier: MIT
/*
 * djinnctl: the administrator's tool for djinnd.
 *
 *   djinnctl [-j|--json] [-p|--pretty] [-s PATH] OBJECT [COMMAND [ARGS]]
 *
 * OBJECT and COMMAND come from a static table and may be abbreviated to
 * any unique prefix; an object's first command is its default. Each
 * command is one admin request (include/djinn/proto.h, "Admin socket")
 * on its own connection to the admin socket; the answer is checked
 * field by field before anything is printed, and printed once through
 * json_print.h, as text or as JSON.
 *
 * Exit status: 0 success; 1 failure, after one line on stderr
 * "djinnctl: OBJECT COMMAND: MESSAGE (ERRNO)"; 2 usage.
 */
#include <errno.h>
#include <getopt.h>
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
#include <time.h>
#include <unistd.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "cli.h"
#include "clock.h"
#include "djinnctl_nl.h"
#include "json_print.h"
#include "names.h"
#include "rundir.h"

#define DJINNCTL_VERSION "0.1"
#define IO_TIMEOUT_MS 5000 /* for the whole exchange */
#define LOAD_TIMEOUT_MS 600000 /* model load: reading the weights */
#define MAX_ANSWER (64ull << 20) /* over 400000 sessions */
#define MAX_DEVICES 64 /* in an ADMIN_VMU answer */

struct ctl {
	const char *socket;
	const char *object; /* full names, for messages */
	const char *command;
	int fd;
	uint64_t deadline; /* CLOCK_MONOTONIC ns */
	uint64_t timeout_ms; /* for the whole exchange */
	bool admin; /* -A: the admin socket even when djinn.ko is loaded */
	/* model load --budget SIZE --ring-slots N */
	bool budget_set;
	uint64_t budget;
	unsigned int slots;
};

/* With djinn.ko loaded, sessions are listed and killed through its
 * netlink family (kernel session ids); without it, or without
 * CAP_NET_ADMIN, through djinnd's admin socket. 1: fall back. */
static int knl_result(const struct ctl *ctl, int ret, const char *msg);

/* ---------------------------------------------------------------------- */
/* Messages */

/* One line naming what failed; returns the exit status 1. */
static int __attribute__((format(printf, 3, 4)))
fail(const struct ctl *ctl, int err, const char *fmt, ...)
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
static char *wire_str(char *dst, size_t size, const char *src, size_t len)
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
static const char *default_socket(void)
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
static int admin_call(struct ctl *ctl, uint16_t op, const void *req,
		      uint32_t req_len, uint64_t min, uint64_t max, void **ans,
		      uint64_t *len)
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

/* ---------------------------------------------------------------------- */
/* Names */

static const char *const phase_names[] = {
	[DJINN_PHASE_UNKNOWN] = "unknown",   [DJINN_PHASE_PREFILL] = "prefill",
	[DJINN_PHASE_DECODE] = "decode",     [DJINN_PHASE_VISION] = "vision",
	[DJINN_PHASE_TRAINING] = "training", [DJINN_PHASE_IO_WAIT] = "io_wait",
	[DJINN_PHASE_COMPUTE] = "compute",   [DJINN_PHASE_IDLE] = "idle",
};

static const char *const pressure_names[] = { "normal", "warning", "critical" };

static const char *const seg_names[] = { "text", "data", "stack" };

/* @names[v], or the number for a value the table lacks. */
static const char *enum_name(char *buf, size_t size, const char *const *names,
			     size_t n, uint32_t v)
{
	if (v < n && names[v])
		return names[v];
	snprintf(buf, size, "%u", v);
	return buf;
}

/* ---------------------------------------------------------------------- */
/* session */

/*
 * The fields of a session, in table order. JSON has them all; the table
 * the ones with a @title, `session show` the ones with a @label.
 */
enum field_kind {
	FK_U64, /* __u64 at @off */
	FK_U32, /* __u32 at @off */
	FK_SIZE, /* __u64 of bytes at @off */
	FK_NS, /* __u64 of nanoseconds at @off */
	FK_TENANT,
	FK_PHASE,
	FK_LEASE_LEFT, /* deadline_ns less now, in ms */
	FK_UID, /* null over TCP */
	FK_PID, /* null over TCP */
};

struct field {
	const char *key;
	const char *title;
	const char *label;
	int width; /* in the table; negative aligns left */
	enum field_kind kind;
	size_t off;
};

#define SF(m) offsetof(struct djinn_admin_session, m)
static const struct field session_fields[] = {
	{ "id", "ID", "id", -2, FK_U64, SF(id) },
	{ "tenant", "TENANT", "tenant", -6, FK_TENANT, SF(tenant) },
	{ "label", "LABEL", "label", -6, FK_TENANT, SF(label) },
	{ "priority", "PRIO", "priority", 4, FK_U32, SF(priority) },
	{ "phase", "PHASE", "phase", -8, FK_PHASE, 0 },
	{ "lease_ns", NULL, "lease", 0, FK_NS, SF(lease_ns) },
	{ "deadline_ns", NULL, NULL, 0, FK_U64, SF(deadline_ns) },
	{ "lease_left_ms", "LEASE", "lease left", 8, FK_LEASE_LEFT, 0 },
	{ "data_bytes", "DATA", "data", 8, FK_SIZE, SF(data_bytes) },
	{ "resident", "RESIDENT", "resident", 8, FK_SIZE, SF(resident) },
	{ "swapped", "SWAPPED", "swapped", 8, FK_SIZE, SF(swapped) },
	{ "text_refs", "TEXT", "text refs", 5, FK_U64, SF(text_refs) },
	{ "tensors", "TENSORS", "tensors", 7, FK_U64, SF(tensors) },
	{ "requests", "REQS", "requests", 8, FK_U64, SF(requests) },
	{ "uid", "UID", "uid", 6, FK_UID, 0 },
	{ "pid", "PID", "pid", 7, FK_PID, 0 },
	{ "device", "DEV", "device", 3, FK_U32, SF(device) },
};
#undef SF
#define NR_FIELDS (ARRAY_SIZE(session_fields))

/*
 * The text format of a field: "%-6s" in a table (after a space but for
 * the first column), "label:     %s\n" for `session show`, NULL when the
 * field is not shown. @conv is the conversion (PRIu64 or "s"); @unit
 * follows the value.
 */
static const char *field_fmt(char *buf, size_t size, const struct field *f,
			     int width, bool table, const char *conv,
			     const char *unit)
{
	int w = abs(width) - (int)strlen(unit);

	if (table && f->title)
		snprintf(buf, size, "%s%%%s%d%s%s",
			 f == session_fields ? "" : " ", width < 0 ? "-" : "",
			 w > 0 ? w : 1, conv, unit);
	else if (!table && f->label)
		snprintf(buf, size, "%s:%*s%%%s%s\n", f->label,
			 (int)(12 - strlen(f->label)), "", conv, unit);
	else
		return NULL;
	return buf;
}

static void print_session(const struct djinn_admin_session *e, uint64_t now,
			  const int *widths, bool table)
{
	char fmt[64], str[DJINN_TENANT_LEN];

	open_json_object(NULL);
	for (size_t i = 0; i < NR_FIELDS; i++) {
		const struct field *f = &session_fields[i];
		const uint8_t *p = (const uint8_t *)e + f->off;
		const char *s = NULL; /* a string, else the number @v */
		bool null = false;
		uint32_t v32;
		uint64_t v = 0;

		switch (f->kind) {
		case FK_U64:
		case FK_SIZE:
		case FK_NS:
			memcpy(&v, p, sizeof(v));
			break;
		case FK_U32:
			memcpy(&v32, p, sizeof(v32));
			v = v32;
			break;
		case FK_TENANT:
			s = wire_str(str, sizeof(str), (const char *)p,
				     DJINN_TENANT_LEN);
			break;
		case FK_PHASE:
			s = enum_name(str, sizeof(str), phase_names,
				      ARRAY_SIZE(phase_names), e->phase);
			break;
		case FK_LEASE_LEFT:
			if (e->deadline_ns > now)
				v = (e->deadline_ns - now) / NSEC_PER_MSEC;
			break;
		case FK_UID:
			null = e->uid == UINT32_MAX;
			v = e->uid;
			break;
		case FK_PID:
			null = e->pid <= 0;
			v = null ? 0 : (uint64_t)e->pid;
			break;
		}

		if (null)
			print_null(PRINT_ANY, f->key,
				   field_fmt(fmt, sizeof(fmt), f, widths[i],
					     table, "s", ""),
				   "-");
		else if (s)
			print_string(PRINT_ANY, f->key,
				     field_fmt(fmt, sizeof(fmt), f, widths[i],
					       table, "s", ""),
				     s);
		else if (f->kind == FK_SIZE)
			print_size(PRINT_ANY, f->key,
				   field_fmt(fmt, sizeof(fmt), f, widths[i],
					     table, "s", ""),
				   v);
		else if (f->kind == FK_NS)
			print_duration(PRINT_ANY, f->key,
				       field_fmt(fmt, sizeof(fmt), f, widths[i],
						 table, "s", ""),
				       v);
		else
			print_u64(PRINT_ANY, f->key,
				  field_fmt(fmt, sizeof(fmt), f, widths[i],
					    table, PRIu64,
					    f->kind == FK_LEASE_LEFT ? "ms" :
								       ""),
				  v);
	}
	if (table)
		print_nl();
	close_json_object();
}

/* ADMIN_SESSIONS: the entries, moved to the start of the malloc'ed
 * buffer *es (the caller frees it), and their count; or exit status 1. */
/*
 * An answer that lists entries (ADMIN_SESSIONS, ADMIN_MODELS): a __u32
 * count, a zero __u32, then the entries of @esz bytes. *@es gets the
 * entries (malloc()ed, the caller frees), *@nr their number.
 */
static int admin_list_req(struct ctl *ctl, uint16_t op, const void *req,
			  uint32_t req_len, size_t esz, const char *what,
			  void **es, uint32_t *nr)
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

static int admin_list(struct ctl *ctl, uint16_t op, size_t esz,
		      const char *what, void **es, uint32_t *nr)
{
	return admin_list_req(ctl, op, NULL, 0, esz, what, es, nr);
}

static int get_sessions(struct ctl *ctl, struct djinn_admin_session **es,
			uint32_t *nr)
{
	return admin_list(ctl, DJINN_MSG_ADMIN_SESSIONS, sizeof(**es),
			  "session", (void **)es, nr);
}

static int do_session_list(struct ctl *ctl, char **args)
{
	int widths[NR_FIELDS];
	struct djinn_admin_session *es;
	uint64_t now;
	uint32_t nr;
	char fmt[64], msg[256];
	int ret;

	if (!ctl->admin) {
		ret = knl_result(ctl, knl_session_list(msg, sizeof(msg)), msg);
		if (ret != -1)
			return ret;
	}
	ret = get_sessions(ctl, &es, &nr);
	if (ret)
		return ret;
	now = mono_ns();
	/* ID, TENANT and LABEL are as wide as their widest value. */
	for (size_t i = 0; i < NR_FIELDS; i++)
		widths[i] = session_fields[i].width;
	for (uint32_t i = 0; i < nr; i++) {
		char id[24], str[DJINN_TENANT_LEN];
		int n = snprintf(id, sizeof(id), "%" PRIu64,
				 (uint64_t)es[i].id);

		if (n > -widths[0])
			widths[0] = -n;
		n = (int)strlen(wire_str(str, sizeof(str), es[i].tenant,
					 sizeof(es[i].tenant)));
		if (n > -widths[1])
			widths[1] = -n;
		n = (int)strlen(wire_str(str, sizeof(str), es[i].label,
					 sizeof(es[i].label)));
		if (n > -widths[2])
			widths[2] = -n;
	}
	for (size_t i = 0; i < NR_FIELDS; i++)
		if (field_fmt(fmt, sizeof(fmt), &session_fields[i], widths[i],
			      true, "s", ""))
			print_string(PRINT_FP, NULL, fmt,
				     session_fields[i].title);
	print_nl();
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++)
		print_session(&es[i], now, widths, true);
	close_json_array();
	free(es);
	return 0;
}

static int do_session_show(struct ctl *ctl, char **args)
{
	int widths[NR_FIELDS] = { 0 };
	struct djinn_admin_session *es;
	uint64_t id;
	uint32_t nr;
	int ret;

	parse_u64(args[0], UINT64_MAX, &id); /* checked by main() */
	ret = get_sessions(ctl, &es, &nr);
	if (ret)
		return ret;
	ret = -1;
	for (uint32_t i = 0; i < nr && ret; i++) {
		if (es[i].id == id) {
			print_session(&es[i], mono_ns(), widths, false);
			ret = 0;
		}
	}
	free(es);
	if (ret)
		return fail(ctl, ENOENT, "no session %" PRIu64, id);
	return 0;
}

static int do_session_kill(struct ctl *ctl, char **args)
{
	struct djinn_admin_kill k;
	uint64_t id, len;
	void *buf;

	char msg[256];
	int ret;

	parse_u64(args[0], UINT64_MAX, &id); /* checked by main() */
	if (!ctl->admin) {
		ret = knl_result(ctl, knl_session_kill(id, msg, sizeof(msg)),
				 msg);
		if (ret != -1)
			return ret;
	}
	k.session_id = id;
	return admin_call(ctl, DJINN_MSG_ADMIN_KILL, &k, sizeof(k), 0, 0, &buf,
			  &len);
}

/* ---------------------------------------------------------------------- */
/* vmu */

/* ADMIN_VMU: one struct per device, in index order. *@vs (malloc()ed,
 * the caller frees) and *@nr; or exit status 1. */
static int get_vmu(struct ctl *ctl, struct djinn_admin_vmu **vs, uint32_t *nr)
{
	const size_t sz = sizeof(**vs);
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_VMU, NULL, 0, sz,
			 sz * MAX_DEVICES, &buf, &len);
	if (ret)
		return ret;
	if (len % sz) {
		free(buf);
		return fail(ctl, EPROTO,
			    "a vmu answer of %" PRIu64 " bytes, not a multiple "
			    "of %zu",
			    len, sz);
	}
	*vs = buf;
	*nr = (uint32_t)(len / sz);
	for (uint32_t i = 0; i < *nr; i++) {
		if ((*vs)[i].__reserved) {
			free(buf);
			return fail(ctl, EPROTO,
				    "reserved field set in the answer");
		}
	}
	return 0;
}

static void print_vmu(const struct djinn_admin_vmu *v, uint32_t index,
		      bool several)
{
	char str[24];

	open_json_object(NULL);
	if (several) {
		print_u64(PRINT_ANY, "index", "index:       %" PRIu64 "\n",
			  index);
	}
	print_string(PRINT_ANY, "device", "device:      %s\n",
		     wire_str(str, sizeof(str), v->device, sizeof(v->device)));
	print_size(PRINT_ANY, "capacity", "capacity:    %s", v->capacity);
	print_size(PRINT_ANY, "granularity", " (granule %s)\n", v->granularity);
	print_size(PRINT_ANY, "committed", "committed:   %s\n", v->committed);
	print_size(PRINT_ANY, "reserved", "reserved:    %s\n", v->reserved);
	print_size(PRINT_ANY, "free", "free:        %s\n", v->free);
	print_string(PRINT_ANY, "pressure", "pressure:    %s\n",
		     enum_name(str, sizeof(str), pressure_names,
			       ARRAY_SIZE(pressure_names), v->pressure));

	print_text("%-12s %8s %8s %8s\n", "segment", "used", "peak", "entries");
	open_json_object("segments");
	for (int i = 0; i < 3; i++) {
		open_json_object(seg_names[i]);
		print_string(PRINT_FP, NULL, "%-12s", seg_names[i]);
		print_size(PRINT_ANY, "used", " %8s", v->seg[i].used);
		print_size(PRINT_ANY, "peak", " %8s", v->seg[i].peak);
		print_u64(PRINT_ANY, "entries", " %8" PRIu64 "\n",
			  v->seg[i].entries);
		close_json_object();
	}
	close_json_object();

	print_size(PRINT_ANY, "text_cached", "text cache:  %s cached",
		   v->text_cached);
	print_u64(PRINT_ANY, "text_evictions", ", %" PRIu64 " evictions\n",
		  v->text_evictions);
	print_u64(PRINT_ANY, "swap_outs", "swap:        %" PRIu64 " out",
		  v->swap_outs);
	print_size(PRINT_ANY, "swapped_out_bytes", " (%s)",
		   v->swapped_out_bytes);
	print_u64(PRINT_ANY, "swap_ins", ", %" PRIu64 " in", v->swap_ins);
	print_size(PRINT_ANY, "swapped_in_bytes", " (%s)", v->swapped_in_bytes);
	print_size(PRINT_ANY, "swapped_now", ", %s swapped now\n",
		   v->swapped_now);
	print_u64(PRINT_ANY, "admits", "admission:   %" PRIu64 " admitted",
		  v->admits);
	print_u64(PRINT_ANY, "admit_refusals", ", %" PRIu64 " refused",
		  v->admit_refusals);
	print_u64(PRINT_ANY, "quota_refusals", ", %" PRIu64 " over quota\n",
		  v->quota_refusals);
	close_json_object();
}

/* One device: its block (a JSON object), as always; several: a block
 * each, with its index, a blank line between (a JSON array). */
static int do_vmu(struct ctl *ctl, char **args)
{
	struct djinn_admin_vmu *vs;
	uint32_t nr;
	int ret;

	ret = get_vmu(ctl, &vs, &nr);
	if (ret)
		return ret;
	if (nr == 1) {
		print_vmu(&vs[0], 0, false);
	} else {
		open_json_array(NULL);
		for (uint32_t i = 0; i < nr; i++) {
			if (i)
				print_text("\n");
			print_vmu(&vs[i], i, true);
		}
		close_json_array();
	}
	free(vs);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* stats */

static int do_stats(struct ctl *ctl, char **args)
{
	struct djinn_admin_stats s;
	uint64_t len;
	void *buf;
	int ret;

	struct djinn_admin_vmu *vs;
	uint32_t nr;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_STATS, NULL, 0, sizeof(s),
			 sizeof(s), &buf, &len);
	if (ret)
		return ret;
	memcpy(&s, buf, sizeof(s));
	free(buf);
	ret = get_vmu(ctl, &vs, &nr);
	if (ret)
		return ret;

	open_json_object(NULL);
	print_duration(PRINT_ANY, "uptime_ns", "uptime:      %s\n",
		       s.uptime_ns);
	print_u64(PRINT_ANY, "conns", "connections: %" PRIu64 " open", s.conns);
	print_u64(PRINT_ANY, "conns_accepted", ", %" PRIu64 " accepted\n",
		  s.conns_accepted);
	print_u64(PRINT_ANY, "sessions", "sessions:    %" PRIu64 " live",
		  s.sessions);
	print_u64(PRINT_ANY, "sessions_opened", ", %" PRIu64 " opened",
		  s.sessions_opened);
	print_u64(PRINT_ANY, "sessions_closed", ", %" PRIu64 " closed",
		  s.sessions_closed);
	print_u64(PRINT_ANY, "sessions_expired", ", %" PRIu64 " expired",
		  s.sessions_expired);
	print_u64(PRINT_ANY, "sessions_killed", ", %" PRIu64 " killed\n",
		  s.sessions_killed);
	print_u64(PRINT_ANY, "requests", "requests:    %" PRIu64, s.requests);
	print_u64(PRINT_ANY, "errors", ", %" PRIu64 " errors\n", s.errors);
	print_u64(PRINT_ANY, "text_lookups", "text:        %" PRIu64 " lookups",
		  s.text_lookups);
	print_u64(PRINT_ANY, "text_misses", ", %" PRIu64 " misses\n",
		  s.text_misses);
	print_size(PRINT_ANY, "bytes_in", "bytes:       %s in", s.bytes_in);
	print_size(PRINT_ANY, "bytes_out", ", %s out\n", s.bytes_out);
	print_u64(PRINT_ANY, "graphs_run", "graphs:      %" PRIu64 " run",
		  s.graphs_run);
	print_u64(PRINT_ANY, "graphs_failed", ", %" PRIu64 " failed\n",
		  s.graphs_failed);
	print_u64(PRINT_ANY, "queue_depth", "queue depth: %" PRIu64 "\n",
		  s.queue_depth);
	/* Each device's memory: total, free, and each segment's use. */
	open_json_array("devices");
	for (uint32_t i = 0; i < nr; i++) {
		char str[24], label[24];

		open_json_object(NULL);
		snprintf(label, sizeof(label), "device %u:", i);
		print_text("%-12s ", label);
		print_u64(PRINT_JSON, "index", NULL, i);
		print_string(PRINT_ANY, "device", "%s",
			     wire_str(str, sizeof(str), vs[i].device,
				      sizeof(vs[i].device)));
		print_size(PRINT_ANY, "capacity", ", %s", vs[i].capacity);
		print_size(PRINT_ANY, "free", ", %s free", vs[i].free);
		open_json_object("segments");
		for (int k = 0; k < 3; k++) {
			char fmt[32];

			open_json_object(seg_names[k]);
			snprintf(fmt, sizeof(fmt), "%s %s %%s", k ? "," : ";",
				 seg_names[k]);
			print_size(PRINT_ANY, "used", fmt, vs[i].seg[k].used);
			close_json_object();
		}
		close_json_object();
		print_text("\n");
		close_json_object();
	}
	close_json_array();
	close_json_object();
	free(vs);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* sched */

static const char *const policy_names[] = {
	[DJINN_SCHED_SEMANTIC] = "semantic",
	[DJINN_SCHED_LRU] = "lru",
	[DJINN_SCHED_STATIC] = "static",
};

/* struct djinn_admin_sched_session.flags, bit by bit */
static const char *const sched_flag_names[] = {
	"swapped_by_signal", /* DJINN_SCHED_SWAPPED_BY_SIGNAL */
	"overran", /* DJINN_SCHED_OVERRAN */
	"prefetching", /* DJINN_SCHED_PREFETCHING */
};
#define NR_SCHED_FLAGS (ARRAY_SIZE(sched_flag_names))
static_assert(DJINN_SCHED_SWAPPED_BY_SIGNAL == 1u << 0 &&
		      DJINN_SCHED_OVERRAN == 1u << 1 &&
		      DJINN_SCHED_PREFETCHING == 1u << 2,
	      "sched_flag_names follows the bits");

/* An ADMIN_SCHED answer: @buf (malloc()ed) holds both counts, then the
 * devices and the sessions that @devs and @sess point to. */
struct sched_answer {
	void *buf;
	const struct djinn_admin_sched_dev *devs;
	const struct djinn_admin_sched_session *sess;
	uint32_t nr_devs;
	uint32_t nr_sess;
};

/* ADMIN_SCHED, its length checked exactly against its counts, its
 * fields as far as djinnctl relies on them; or exit status 1. */
static int get_sched(struct ctl *ctl, struct sched_answer *a)
{
	const size_t dsz = sizeof(*a->devs), ssz = sizeof(*a->sess);
	uint32_t head[2];
	uint64_t len, want;
	uint8_t *p;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_SCHED, NULL, 0, sizeof(head),
			 MAX_ANSWER, &buf, &len);
	if (ret)
		return ret;
	memcpy(head, buf, sizeof(head));
	/* Two __u32 counts of structs under 256 bytes: no overflow. */
	want = sizeof(head) + (uint64_t)head[0] * dsz + (uint64_t)head[1] * ssz;
	if (!head[0] || head[0] > MAX_DEVICES) {
		ret = fail(ctl, EPROTO, "a sched answer for %u devices",
			   head[0]);
		goto out_free;
	}
	if (len != want) {
		ret = fail(ctl, EPROTO,
			   "a sched answer of %" PRIu64 " bytes for %u devices "
			   "and %u sessions, expected %" PRIu64,
			   len, head[0], head[1], want);
		goto out_free;
	}
	p = (uint8_t *)buf + sizeof(head);
	a->buf = buf;
	a->devs = (const void *)p;
	a->sess = (const void *)(p + head[0] * dsz);
	a->nr_devs = head[0];
	a->nr_sess = head[1];
	for (uint32_t i = 0; i < a->nr_devs; i++) {
		if (a->devs[i].__reserved) {
			ret = fail(ctl, EPROTO,
				   "reserved field set in the answer");
			goto out_free;
		}
	}
	for (uint32_t i = 0; i < a->nr_sess; i++) {
		if (a->sess[i].device >= a->nr_devs) {
			ret = fail(ctl, EPROTO,
				   "session %" PRIu64 " on device %u of %u",
				   (uint64_t)a->sess[i].id, a->sess[i].device,
				   a->nr_devs);
			goto out_free;
		}
	}
	return 0;

out_free:
	free(buf);
	return ret;
}

/* A short duration for a table column: "850ns", "12.5us", "350ms",
 * "1.20s"; a minute or more as human_duration(); 0 as "-". */
static const char *short_ns(char *buf, uint64_t ns)
{
	static const char *const units[] = { "ns", "us", "ms", "s" };
	double v = (double)ns;
	int u = 0, prec;

	if (!ns)
		return "-";
	if (ns >= 60 * NSEC_PER_SEC)
		return human_duration(buf, ns);
	while (v >= 999.5 && u < 3) { /* 999.7us is 1.00ms */
		v /= 1000;
		u++;
	}
	/* three significant digits, but whole nanoseconds */
	prec = !u ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0;
	snprintf(buf, HUMAN_LEN, "%.*f%s", prec, v, units[u]);
	return buf;
}

/* Bytes per second as "812.4 MB/s" (decimal megabytes); 0 as "-". */
static const char *mb_per_s(char *buf, uint64_t bps)
{
	if (!bps)
		return "-";
	snprintf(buf, HUMAN_LEN, "%.1f MB/s", (double)bps / 1e6);
	return buf;
}

static void print_sched_dev(const struct djinn_admin_sched_dev *d,
			    uint32_t index)
{
	char str[HUMAN_LEN], label[24];
	uint64_t tries = d->prefetch_hits + d->prefetch_misses;

	open_json_object(NULL);
	snprintf(label, sizeof(label), "device %u:", index);
	print_text("%-14s ", label);
	print_string(PRINT_ANY, "device", "%s\n",
		     wire_str(str, sizeof(str), d->device, sizeof(d->device)));
	print_string(PRINT_ANY, "policy", "policy:        %s\n",
		     enum_name(str, sizeof(str), policy_names,
			       ARRAY_SIZE(policy_names), d->policy));
	print_u64(PRINT_ANY, "busy", "busy:          %" PRIu64 " sessions\n",
		  d->busy);
	open_json_object("queued");
	print_u64(PRINT_ANY, "compute", "queued:        %" PRIu64 " compute",
		  d->queued[0]);
	print_u64(PRINT_ANY, "mem", ", %" PRIu64 " mem\n", d->queued[1]);
	close_json_object();
	open_json_object("running");
	print_u64(PRINT_ANY, "compute", "running:       %" PRIu64 " compute",
		  d->running[0]);
	print_u64(PRINT_ANY, "mem", ", %" PRIu64 " mem\n", d->running[1]);
	close_json_object();
	print_u64(PRINT_ANY, "admit_waiting", "admit waiting: %" PRIu64 "\n",
		  d->admit_waiting);
	/* Bytes per second in JSON, MB/s in text. */
	print_u64(PRINT_JSON, "swap_out_bps", NULL, d->swap_out_bps);
	print_string(PRINT_FP, NULL, "swap rate:     %s out",
		     mb_per_s(str, d->swap_out_bps));
	print_u64(PRINT_JSON, "swap_in_bps", NULL, d->swap_in_bps);
	print_string(PRINT_FP, NULL, ", %s in\n",
		     mb_per_s(str, d->swap_in_bps));
	print_u64(PRINT_ANY, "swaps_signal",
		  "swaps:         %" PRIu64 " by signal", d->swaps_signal);
	print_u64(PRINT_ANY, "swaps_pressure", ", %" PRIu64 " by pressure\n",
		  d->swaps_pressure);
	print_size(PRINT_ANY, "swap_bytes_out", "swapped:       %s out",
		   d->swap_bytes_out);
	print_size(PRINT_ANY, "swap_bytes_in", ", %s in\n", d->swap_bytes_in);
	print_u64(PRINT_ANY, "prefetches", "prefetches:    %" PRIu64 " started",
		  d->prefetches);
	print_u64(PRINT_ANY, "prefetch_hits", ", %" PRIu64 " hit",
		  d->prefetch_hits);
	print_u64(PRINT_ANY, "prefetch_misses", ", %" PRIu64 " missed",
		  d->prefetch_misses);
	if (tries)
		print_text(", %.1f%% hit rate\n",
			   100.0 * (double)d->prefetch_hits / (double)tries);
	else
		print_text(", hit rate -\n");
	print_u64(PRINT_ANY, "admit_waits", "admission:     %" PRIu64 " waited",
		  d->admit_waits);
	print_u64(PRINT_ANY, "admit_timeouts", ", %" PRIu64 " timed out\n",
		  d->admit_timeouts);
	close_json_object();
}

/* "swapped_by_signal,overran"; bits djinnctl does not know as "0x8";
 * "-" for none. */
static const char *sched_flags(char *buf, size_t size, uint32_t flags)
{
	const size_t nr = NR_SCHED_FLAGS;
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; i < nr; i++)
		if (flags & 1u << i)
			n += (size_t)snprintf(buf + n, size - n, "%s%s",
					      n ? "," : "",
					      sched_flag_names[i]);
	flags &= ~((1u << nr) - 1);
	if (flags)
		snprintf(buf + n, size - n, "%s%#x", n ? "," : "", flags);
	return buf[0] ? buf : "-";
}

static void print_sched_session(const struct djinn_admin_sched_session *e,
				int id_width, int tenant_width)
{
	const size_t nr = NR_SCHED_FLAGS;
	char fmt[32], str[DJINN_TENANT_LEN], buf[HUMAN_LEN];
	char flags[128];

	open_json_object(NULL);
	snprintf(fmt, sizeof(fmt), "%%-%d" PRIu64, id_width);
	print_u64(PRINT_ANY, "id", fmt, e->id);
	snprintf(fmt, sizeof(fmt), " %%-%ds", tenant_width);
	print_string(PRINT_ANY, "tenant", fmt,
		     wire_str(str, sizeof(str), e->tenant, sizeof(e->tenant)));
	print_u64(PRINT_ANY, "device", " %3" PRIu64, e->device);
	print_u64(PRINT_ANY, "priority", " %4" PRIu64, e->priority);
	print_string(PRINT_ANY, "phase", " %-8s",
		     enum_name(str, sizeof(str), phase_names,
			       ARRAY_SIZE(phase_names), e->phase));
	/* The flags are the table's last column, a list in JSON. */
	open_json_array("flags");
	for (size_t i = 0; i < nr; i++)
		if (e->flags & 1u << i)
			print_string(PRINT_JSON, NULL, NULL,
				     sched_flag_names[i]);
	if (e->flags >> nr) {
		snprintf(buf, sizeof(buf), "%#x", e->flags >> nr << nr);
		print_string(PRINT_JSON, NULL, NULL, buf);
	}
	close_json_array();
	print_u64(PRINT_JSON, "phase_left_ns", NULL, e->phase_left_ns);
	print_string(PRINT_FP, NULL, " %6s", short_ns(buf, e->phase_left_ns));
	print_size(PRINT_ANY, "resident", " %8s", e->resident);
	print_size(PRINT_ANY, "swapped", " %8s", e->swapped);
	print_u64(PRINT_ANY, "queued", " %6" PRIu64, e->queued);
	print_u64(PRINT_ANY, "inflight", " %8" PRIu64, e->inflight);
	print_u64(PRINT_ANY, "weight", " %6" PRIu64, e->weight);
	print_u64(PRINT_ANY, "ahead_max", " %5" PRIu64, e->ahead_max);
	print_s64(PRINT_JSON, "deficit_ns", NULL, e->deficit_ns);
	print_u64(PRINT_JSON, "cost_ns", NULL, e->cost_ns);
	print_u64(PRINT_JSON, "jobs", NULL, e->jobs);
	print_u64(PRINT_JSON, "wait_p99_ns", NULL, e->wait_p99_ns);
	print_string(PRINT_FP, NULL, " %8s", short_ns(buf, e->wait_p99_ns));
	print_string(PRINT_FP, NULL, " %s\n",
		     sched_flags(flags, sizeof(flags), e->flags));
	close_json_object();
}

/* A block per device, a blank line, a table of the sessions; in JSON
 * {"devices": [...], "sessions": [...]}. */
static int do_sched(struct ctl *ctl, char **args)
{
	int id_width = 2, tenant_width = 6;
	struct sched_answer a = { 0 };
	int ret;

	ret = get_sched(ctl, &a);
	if (ret)
		return ret;
	/* ID, TENANT and LABEL are as wide as their widest value. */
	for (uint32_t i = 0; i < a.nr_sess; i++) {
		char str[DJINN_TENANT_LEN];
		int n = snprintf(str, sizeof(str), "%" PRIu64,
				 (uint64_t)a.sess[i].id);

		if (n > id_width)
			id_width = n;
		n = (int)strlen(wire_str(str, sizeof(str), a.sess[i].tenant,
					 sizeof(a.sess[i].tenant)));
		if (n > tenant_width)
			tenant_width = n;
	}

	open_json_object(NULL);
	open_json_array("devices");
	for (uint32_t i = 0; i < a.nr_devs; i++) {
		print_sched_dev(&a.devs[i], i);
		print_text("\n");
	}
	close_json_array();
	print_text(
		"%-*s %-*s %3s %4s %-8s %6s %8s %8s %6s %8s %6s %5s %8s %s\n",
		id_width, "ID", tenant_width, "TENANT", "DEV", "PRIO", "PHASE",
		"LEFT", "RESIDENT", "SWAPPED", "QUEUED", "INFLIGHT", "WEIGHT",
		"AHEAD", "P99 WAIT", "FLAGS");
	open_json_array("sessions");
	for (uint32_t i = 0; i < a.nr_sess; i++)
		print_sched_session(&a.sess[i], id_width, tenant_width);
	close_json_array();
	close_json_object();
	free(a.buf);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* model */

static const char *const arch_names[] = {
	[DJINN_ARCH_GPT2] = "gpt2",	  [DJINN_ARCH_LLAMA] = "llama",
	[DJINN_ARCH_QWEN2] = "qwen2",	  [DJINN_ARCH_QWEN3] = "qwen3",
	[DJINN_ARCH_MISTRAL] = "mistral",
};

static const char *const dtype_names[] = {
	[DJINN_DTYPE_F32] = "f32",   [DJINN_DTYPE_F16] = "f16",
	[DJINN_DTYPE_BF16] = "bf16", [DJINN_DTYPE_I32] = "i32",
	[DJINN_DTYPE_I64] = "i64",   [DJINN_DTYPE_U8] = "u8",
};

/* [A-Za-z0-9._-], 1 to 63 bytes, as djinnd names models. */

/* ADMIN_MODELS' entries, as a table or JSON; frees @es. */
static void print_models(struct djinn_admin_model *es, uint32_t nr)
{
	int wname = 4; /* "NAME" */

	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_MODEL_NAME_MAX];
		int n = (int)strlen(wire_str(name, sizeof(name), es[i].name,
					     sizeof(es[i].name)));

		if (n > wname)
			wname = n;
	}
	print_text("%-*s %-5s %-5s %8s %7s %8s %7s %3s  %s\n", wname, "NAME",
		   "ARCH", "DTYPE", "SIZE", "LAYERS", "RING", "HOLDERS", "DEV",
		   "FINGERPRINT");
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_MODEL_NAME_MAX], fmt[32], str[24];
		char fp[2 * DJINN_FP_LEN + 1];

		for (int k = 0; k < DJINN_FP_LEN; k++)
			snprintf(fp + 2 * k, 3, "%02x", es[i].fp[k]);
		open_json_object(NULL);
		snprintf(fmt, sizeof(fmt), "%%-%ds", wname);
		print_string(PRINT_ANY, "name", fmt,
			     wire_str(name, sizeof(name), es[i].name,
				      sizeof(es[i].name)));
		print_string(PRINT_ANY, "arch", " %-5s",
			     enum_name(str, sizeof(str), arch_names,
				       ARRAY_SIZE(arch_names), es[i].arch));
		print_string(PRINT_ANY, "dtype", " %-5s",
			     enum_name(str, sizeof(str), dtype_names,
				       ARRAY_SIZE(dtype_names), es[i].dtype));
		print_size(PRINT_ANY, "bytes", " %8s", es[i].bytes);
		/* resident layers of all, and a streamed model's ring
		 * ("-": none, every layer is on the device) */
		snprintf(str, sizeof(str), "%u/%u", es[i].resident,
			 es[i].layers);
		print_string(PRINT_FP, NULL, " %7s", str);
		if (es[i].ring)
			print_size(PRINT_FP, NULL, " %8s", es[i].ring);
		else
			print_string(PRINT_FP, NULL, " %8s", "-");
		print_u64(PRINT_ANY, "holders", " %7" PRIu64, es[i].holders);
		print_u64(PRINT_ANY, "device", " %3" PRIu64, es[i].device);
		/* the table shows the first 12 digits, as git does */
		print_string(PRINT_JSON, "fingerprint", NULL, fp);
		fp[12] = 0;
		print_string(PRINT_FP, NULL, "  %s\n", fp);
		print_u64(PRINT_JSON, "weights", NULL, es[i].weights);
		print_u64(PRINT_JSON, "layers", NULL, es[i].layers);
		print_u64(PRINT_JSON, "resident", NULL, es[i].resident);
		print_u64(PRINT_JSON, "ring", NULL, es[i].ring);
		if (es[i].budget) /* null: placed under none */
			print_u64(PRINT_JSON, "budget", NULL, es[i].budget);
		else
			print_null(PRINT_JSON, "budget", NULL, NULL);
		print_u64(PRINT_JSON, "passes", NULL, es[i].passes);
		print_u64(PRINT_JSON, "jobs", NULL, es[i].jobs);
		close_json_object();
	}
	close_json_array();
	free(es);
}

static int do_model_list(struct ctl *ctl, char **args)
{
	struct djinn_admin_model *es;
	uint32_t nr;
	int ret;

	ret = admin_list(ctl, DJINN_MSG_ADMIN_MODELS, sizeof(*es), "model",
			 (void **)&es, &nr);
	if (!ret)
		print_models(es, nr);
	return ret;
}

/* load: on every device, under --budget if given; then its lines of
 * model list */
static int do_model_load(struct ctl *ctl, char **args)
{
	struct djinn_admin_model_load r = { .budget = ctl->budget,
					    .slots = ctl->slots };
	struct djinn_admin_model *es;
	uint32_t nr;
	int ret;

	memcpy(r.name, args[0], strlen(args[0])); /* checked by main() */
	if (ctl->budget_set)
		r.flags = DJINN_LOAD_BUDGET;
	ctl->timeout_ms = LOAD_TIMEOUT_MS;
	ret = admin_list_req(ctl, DJINN_MSG_ADMIN_MODEL_LOAD, &r, sizeof(r),
			     sizeof(*es), "model", (void **)&es, &nr);
	if (!ret)
		print_models(es, nr);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Tenants */

/* "n" or "n/quota" in a table cell (@size: bytes, as print_size does). */
static const char *used_of(char *buf, size_t len, uint64_t used, uint64_t quota,
			   bool size)
{
	char u[32], q[32];

	if (size) {
		human_size(u, used);
		human_size(q, quota);
	} else {
		snprintf(u, sizeof(u), "%" PRIu64, used);
		snprintf(q, sizeof(q), "%" PRIu64, quota);
	}
	snprintf(buf, len, quota ? "%s/%s" : "%s", u, q);
	return buf;
}

/* A quota in JSON: its value, or null when there is none. */
static void print_quota(const char *key, uint64_t q)
{
	if (q)
		print_u64(PRINT_JSON, key, NULL, q);
	else
		print_null(PRINT_JSON, key, NULL, NULL);
}

static void print_tenant(const struct djinn_admin_tenant *e, int wname,
			 bool table)
{
	char name[DJINN_TENANT_LEN], cell[80], fmt[48];
	const char *kernels = e->flags & DJINN_TENANT_CLIENT_KERNELS ? "yes" :
								       "no";

	wire_str(name, sizeof(name), e->name, sizeof(e->name));
	open_json_object(NULL);
	if (table) {
		snprintf(fmt, sizeof(fmt), "%%-%ds", wname);
		print_string(PRINT_ANY, "name", fmt, name);
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->conns, e->q_conns,
				     false));
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->sessions,
				     e->q_sessions, false));
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->inflight,
				     e->q_inflight, false));
		print_string(PRINT_FP, NULL, " %15s",
			     used_of(cell, sizeof(cell),
				     e->data_bytes + e->text_bytes, e->q_memory,
				     true));
		print_string(PRINT_FP, NULL, " %15s",
			     used_of(cell, sizeof(cell), e->swapped, e->q_swap,
				     true));
		print_string(PRINT_FP, NULL, " %7s\n", kernels);
	} else {
		print_string(PRINT_ANY, "name", "name:           %s\n", name);
		print_string(PRINT_FP, NULL, "connections:    %s\n",
			     used_of(cell, sizeof(cell), e->conns, e->q_conns,
				     false));
		print_string(PRINT_FP, NULL, "sessions:       %s\n",
			     used_of(cell, sizeof(cell), e->sessions,
				     e->q_sessions, false));
		print_string(PRINT_FP, NULL, "inflight:       %s\n",
			     used_of(cell, sizeof(cell), e->inflight,
				     e->q_inflight, false));
		print_string(PRINT_FP, NULL, "memory:         %s",
			     used_of(cell, sizeof(cell),
				     e->data_bytes + e->text_bytes, e->q_memory,
				     true));
		print_text(" (data %s", human_size(cell, e->data_bytes));
		print_text(", text %s)", human_size(cell, e->text_bytes));
		print_text("%s\n", e->q_memory ? " (quota a device)" : "");
		print_string(PRINT_FP, NULL, "swapped:        %s",
			     used_of(cell, sizeof(cell), e->swapped, e->q_swap,
				     true));
		print_text("%s\n", e->q_swap ? " (quota a device)" : "");
		print_u64(PRINT_FP, NULL, "text refs:      %" PRIu64 "\n",
			  e->text_refs);
		if (e->q_guaranteed)
			print_size(PRINT_FP, NULL,
				   "guaranteed:     %s a device\n",
				   e->q_guaranteed);
		if (e->q_lease_max_ns)
			print_duration(PRINT_FP, NULL, "lease max:      %s\n",
				       e->q_lease_max_ns);
		print_string(PRINT_FP, NULL, "client kernels: %s\n", kernels);
		print_string(PRINT_FP, NULL, "configured:     %s\n",
			     e->flags & DJINN_TENANT_CONFIGURED ? "yes" : "no");
	}
	print_u64(PRINT_JSON, "connections", NULL, e->conns);
	print_u64(PRINT_JSON, "sessions", NULL, e->sessions);
	print_u64(PRINT_JSON, "inflight", NULL, e->inflight);
	print_u64(PRINT_JSON, "data_bytes", NULL, e->data_bytes);
	print_u64(PRINT_JSON, "swapped", NULL, e->swapped);
	print_u64(PRINT_JSON, "text_refs", NULL, e->text_refs);
	print_u64(PRINT_JSON, "text_bytes", NULL, e->text_bytes);
	print_string(PRINT_JSON, "client_kernels", NULL, kernels);
	print_string(PRINT_JSON, "configured", NULL,
		     e->flags & DJINN_TENANT_CONFIGURED ? "yes" : "no");
	open_json_object("quota");
	print_quota("memory", e->q_memory);
	print_quota("swap", e->q_swap);
	print_quota("guaranteed", e->q_guaranteed);
	print_quota("connections", e->q_conns);
	print_quota("sessions", e->q_sessions);
	print_quota("inflight", e->q_inflight);
	print_quota("lease_max_ns", e->q_lease_max_ns);
	close_json_object();
	close_json_object();
}

static int get_tenants(struct ctl *ctl, struct djinn_admin_tenant **es,
		       uint32_t *nr)
{
	return admin_list(ctl, DJINN_MSG_ADMIN_TENANTS, sizeof(**es), "tenant",
			  (void **)es, nr);
}

static int do_tenant_list(struct ctl *ctl, char **args)
{
	struct djinn_admin_tenant *es;
	int wname = 6; /* "TENANT" */
	uint32_t nr;
	int ret = get_tenants(ctl, &es, &nr);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_TENANT_LEN];
		int n = (int)strlen(wire_str(name, sizeof(name), es[i].name,
					     sizeof(es[i].name)));

		if (n > wname)
			wname = n;
	}
	print_text("%-*s %11s %11s %11s %15s %15s %7s\n", wname, "TENANT",
		   "CONNS", "SESSIONS", "INFLIGHT", "MEMORY", "SWAPPED",
		   "KERNELS");
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++)
		print_tenant(&es[i], wname, true);
	close_json_array();
	free(es);
	return 0;
}

static int do_tenant_show(struct ctl *ctl, char **args)
{
	struct djinn_admin_tenant *es;
	uint32_t nr;
	int ret = get_tenants(ctl, &es, &nr);

	if (ret)
		return ret;
	ret = -1;
	for (uint32_t i = 0; i < nr && ret; i++) {
		char name[DJINN_TENANT_LEN];

		if (strcmp(wire_str(name, sizeof(name), es[i].name,
				    sizeof(es[i].name)),
			   args[0]))
			continue;
		print_tenant(&es[i], 0, false);
		ret = 0;
	}
	free(es);
	if (ret)
		return fail(ctl, ENOENT,
			    "no tenant %s (none holds anything, and "
			    "djinnd.conf names none)",
			    args[0]);
	return 0;
}

static int do_model_evict(struct ctl *ctl, char **args)
{
	struct djinn_admin_model_evict e = { { 0 } };
	uint64_t len;
	void *buf;

	/* checked by main() */
	memcpy(e.name, args[0], strlen(args[0]));
	return admin_call(ctl, DJINN_MSG_ADMIN_MODEL_EVICT, &e, sizeof(e), 0, 0,
			  &buf, &len);
}

/* ---------------------------------------------------------------------- */
/* debug */

/* fault: make the device fault (djinnd --fault-injection only) */
static int do_debug_fault(struct ctl *ctl, char **args)
{
	struct djinn_admin_fault f;
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_FAULT_INJECT, NULL, 0, sizeof(f),
			 sizeof(f), &buf, &len);
	if (ret)
		return ret;
	memcpy(&f, buf, sizeof(f));
	free(buf);
	f.device[sizeof(f.device) - 1] = 0;
	f.what[sizeof(f.what) - 1] = 0;

	open_json_object(NULL);
	print_string(PRINT_ANY, "device", "%s: ", f.device);
	print_u64(PRINT_ANY, "faults",
		  "fault %" PRIu64 " injected: ", f.faults);
	print_string(PRINT_ANY, "fault", "%s\n", f.what);
	close_json_object();
	return 0;
}

static int knl_result(const struct ctl *ctl, int ret, const char *msg)
{
	if (ret == -ENOENT || ret == -EPERM)
		return -1;
	return ret ? fail(ctl, -ret, "%s", msg) : 0;
}

/* monitor: djinn.ko's events, one JSON object a line */
static int do_monitor(struct ctl *ctl, char **args)
{
	char msg[256];
	int ret = knl_monitor(0, msg, sizeof(msg));

	return ret ? fail(ctl, -ret, "%s", msg) : 0;
}

/* ---------------------------------------------------------------------- */
/* Dispatch */

struct cmd {
	const char *name;
	const char *args; /* for usage */
	int nr_args; /* exactly */
	int (*fn)(struct ctl *ctl, char **args);
	const char *help;
};

struct object {
	const char *name;
	const struct cmd *cmds; /* the first is the default */
	int nr_cmds;
};

static const struct cmd session_cmds[] = {
	{ "list", "", 0, do_session_list, "the live sessions, one a line" },
	{ "show", "ID", 1, do_session_show, "one session, field by field" },
	{ "kill", "ID", 1, do_session_kill,
	  "end a session as if its lease had run out" },
};

static const struct cmd vmu_cmds[] = {
	{ "show", "", 0, do_vmu, "device memory, segments, swap, admission" },
};

static const struct cmd stats_cmds[] = {
	{ "show", "", 0, do_stats, "the daemon's counters" },
};

static const struct cmd sched_cmds[] = {
	{ "show", "", 0, do_sched,
	  "the scheduler: queues, swaps, each session's share" },
};

static const struct cmd model_cmds[] = {
	{ "list", "", 0, do_model_list,
	  "the loaded models, their size and holders" },
	{ "load", "NAME", 1, do_model_load,
	  "load a model now (--budget SIZE [--ring-slots N]: under that "
	  "budget)" },
	{ "evict", "NAME", 1, do_model_evict, "drop a model no session holds" },
};

static const struct cmd tenant_cmds[] = {
	{ "list", "", 0, do_tenant_list,
	  "each tenant's connections, sessions, jobs and data, of its quotas" },
	{ "show", "TENANT", 1, do_tenant_show, "one tenant, field by field" },
};

static const struct cmd debug_cmds[] = {
	{ "fault", "", 0, do_debug_fault,
	  "fault the device (djinnd --fault-injection; for tests)" },
};

static const struct cmd monitor_cmds[] = {
	{ "events", "", 0, do_monitor,
	  "djinn.ko's session events, one JSON object a line" },
};

#define CMDS(c) c, (int)(ARRAY_SIZE(c))
static const struct object objects[] = {
	{ "session", CMDS(session_cmds) }, { "vmu", CMDS(vmu_cmds) },
	{ "stats", CMDS(stats_cmds) },	   { "sched", CMDS(sched_cmds) },
	{ "model", CMDS(model_cmds) },	   { "monitor", CMDS(monitor_cmds) },
	{ "tenant", CMDS(tenant_cmds) },   { "debug", CMDS(debug_cmds) },
};
#undef CMDS
#define NR_OBJECTS ((int)(ARRAY_SIZE(objects)))

const char tool_name[] = "djinnctl";

void usage(FILE *f)
{
	fprintf(f, "usage: djinnctl [OPTIONS] OBJECT [COMMAND [ARGS]]\n\n");
	for (int i = 0; i < NR_OBJECTS; i++) {
		const struct object *o = &objects[i];

		for (int j = 0; j < o->nr_cmds; j++) {
			char words[64];

			snprintf(words, sizeof(words),
				 o->nr_cmds == 1 ? "%s [%s]%s%s" : "%s %s%s%s",
				 o->name, o->cmds[j].name,
				 *o->cmds[j].args ? " " : "", o->cmds[j].args);
			fprintf(f, "  %-20s %s\n", words, o->cmds[j].help);
		}
	}
	fprintf(f,
		"\nAny unique prefix names an object or a command; without a\n"
		"command, an object's first one runs.\n\n"
		"  -s, --socket PATH  djinnd's admin socket (default:\n"
		"                     $DJINN_ADMIN_SOCKET, else /run/djinn/admin.sock\n"
		"                     for root, $XDG_RUNTIME_DIR/djinn/admin.sock,\n"
		"                     else ./run/admin.sock; when that one is\n"
		"                     missing, /run/djinn/admin.sock)\n"
		"  -A, --admin        session list|kill through the admin socket\n"
		"                     even when djinn.ko is loaded (its netlink\n"
		"                     family names kernel session ids)\n"
		"  -j, --json         print JSON\n"
		"  -p, --pretty       print indented JSON (implies -j)\n"
		"  --budget SIZE      model load: the device bytes its weights\n"
		"                     may take (\"40G\"; 0: none)\n"
		"  --ring-slots N     model load: layers its ring holds, 1 to %d\n"
		"                     (default 2), with --budget\n"
		"  -h, --help         print this and exit\n"
		"  -V, --version      print the version and exit\n\n"
		"Exit status: 0 success, 1 failure, 2 usage.\n",
		DJINN_RING_SLOTS_MAX);
}

/* 2 when @word is @name, 1 when a prefix of it, else 0. */
static int match(const char *word, const char *name)
{
	size_t n = strlen(word);

	if (!n || strncmp(word, name, n))
		return 0;
	return name[n] ? 1 : 2;
}

/*
 * Index of the entry of @table (@nr entries of @size bytes, each starting
 * with its name: a struct object or a struct cmd) that @word names, in
 * full or by a unique prefix; -1 none, -2 ambiguous.
 */
static int find_name(const char *word, const void *table, size_t size, int nr)
{
	int found = -1, nr_found = 0;

	for (int i = 0; i < nr; i++) {
		const void *e = (const char *)table + (size_t)i * size;
		int m = match(word, *(const char *const *)e);

		if (m == 2)
			return i;
		if (m == 1) {
			found = i;
			nr_found++;
		}
	}
	return nr_found > 1 ? -2 : found;
}

static_assert(offsetof(struct object, name) == 0 &&
		      offsetof(struct cmd, name) == 0,
	      "find_name() reads an entry's name at its start");

/* "session, stats": the objects @word is a prefix of. */
static const char *candidates(const char *word)
{
	static char buf[256];
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < NR_OBJECTS; i++)
		if (match(word, objects[i].name) && n < sizeof(buf))
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s",
					      n ? ", " : "", objects[i].name);
	return buf;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "admin", no_argument, NULL, 'A' },
		{ "json", no_argument, NULL, 'j' },
		{ "pretty", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "budget", required_argument, NULL, 'B' },
		{ "ring-slots", required_argument, NULL, 'R' },
		{ 0 },
	};
	struct ctl ctl = { .fd = -1 };
	bool json = false, pretty = false;
	const struct object *o;
	const struct cmd *cmd;
	int c, i, nr_args, ret;
	char **args;

	while ((c = getopt_long(argc, argv, "s:AjphV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			ctl.socket = optarg;
			break;
		case 'A':
			ctl.admin = true;
			break;
		case 'B':
			if (parse_size(optarg, &ctl.budget))
				return usage_error("--budget: bad size '%s' "
						   "(\"512M\", \"40G\")",
						   optarg);
			ctl.budget_set = true;
			break;
		case 'R': {
			uint64_t v;

			if (parse_u64(optarg, DJINN_RING_SLOTS_MAX, &v) || !v)
				return usage_error("--ring-slots: '%s': want 1 "
						   "to %d",
						   optarg,
						   DJINN_RING_SLOTS_MAX);
			ctl.slots = (unsigned int)v;
			break;
		}
		case 'p':
			pretty = true;
			/* fall through */
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("djinnctl %s (protocol %d)\n", DJINNCTL_VERSION,
			       DJINN_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc)
		return usage_error("no object given");
	if (!strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	i = find_name(argv[optind], objects, sizeof(objects[0]), NR_OBJECTS);
	if (i == -2)
		return usage_error("ambiguous object '%s': %s", argv[optind],
				   candidates(argv[optind]));
	if (i < 0)
		return usage_error("unknown object '%s'", argv[optind]);
	o = &objects[i];
	optind++;
	if (optind < argc && !strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	if (optind == argc) {
		cmd = &o->cmds[0];
	} else {
		i = find_name(argv[optind], o->cmds, sizeof(o->cmds[0]),
			      o->nr_cmds);
		if (i < 0)
			return usage_error("%s command '%s' for %s",
					   i == -2 ? "ambiguous" : "unknown",
					   argv[optind], o->name);
		cmd = &o->cmds[i];
		optind++;
	}
	args = argv + optind;
	nr_args = argc - optind;
	if (nr_args > cmd->nr_args)
		return usage_error("%s %s: unexpected argument '%s'", o->name,
				   cmd->name, args[cmd->nr_args]);
	if (nr_args < cmd->nr_args)
		return usage_error("%s %s: missing %s", o->name, cmd->name,
				   cmd->args);
	for (i = 0; i < nr_args; i++) {
		uint64_t id;

		if (!strcmp(cmd->args, "ID") &&
		    parse_u64(args[i], UINT64_MAX, &id))
			return usage_error("%s %s: bad session id '%s'",
					   o->name, cmd->name, args[i]);
		if (!strcmp(cmd->args, "TENANT") && !tenant_name_ok(args[i]))
			return usage_error("%s %s: bad tenant name '%s' (1 to "
					   "63 printable bytes, no spaces)",
					   o->name, cmd->name, args[i]);
		if (!strcmp(cmd->args, "NAME") && !model_name_ok(args[i]))
			return usage_error("%s %s: bad model name '%s' (1 to "
					   "%d of [A-Za-z0-9._-])",
					   o->name, cmd->name, args[i],
					   DJINN_MODEL_NAME_MAX - 1);
	}

	if ((ctl.budget_set || ctl.slots) && cmd->fn != do_model_load)
		return usage_error(
			"--budget and --ring-slots are model load's");
	if (ctl.slots && !ctl.budget)
		return usage_error("--ring-slots without a --budget: the ring "
				   "is a model's over its budget");
	ctl.object = o->name;
	ctl.command = cmd->name;
	if (!ctl.socket)
		ctl.socket = default_socket();
	new_json_obj(json, pretty);
	ret = cmd->fn(&ctl, args);
	c = delete_json_obj();
	if (c && !ret)
		ret = fail(&ctl, -c, "cannot write the output: %s",
			   strerror(-c));
	return ret;
}
