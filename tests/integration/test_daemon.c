// SPDX-License-Identifier: MIT
/*
 * Integration tests for djinnd: a real daemon per test, on temporary unix
 * sockets (tests/integration/daemon.h), spoken to in raw frames, the
 * malformed ones that libdjinn never sends included.
 *
 * Every test starts its own djinnd (a 64 MiB CPU device unless it says
 * otherwise) and records the VMU's state; its teardown checks that the
 * daemon still serves a fresh HELLO, that no session is left and that
 * the VMU is back where it started, then stops it with SIGTERM and
 * checks that it exits 0 with no sanitizer report in its log.
 *
 * The daemon binary is $DJINND, else BUILD/djinnd/djinnd beside this
 * binary's build tree. DJINN_TEST_FILTER=test_text runs the tests
 * matching a pattern;
 * DJINN_TEST_VERBOSE=1 prints each daemon's log when it stops.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "daemon.h"
#include "../unit/testutil.h"

#define DEV_MEM "64M"
#define DEV_BYTES (64 * MiB)
#define MS (UINT64_C(1000000))

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------------- */
/* Calls that assert */

static int xconnect_at(int line, const char *path)
{
	int fd = dj_connect(path);

	if (fd < 0)
		fail_msg("line %d: connect %s: %s", line, path, strerror(-fd));
	return fd;
}
#define xconnect(path) xconnect_at(__LINE__, path)

static const char *ret_str(int ret)
{
	return ret == 0 ? "EOF" : ret < 0 ? strerror(-ret) : "ok";
}

/* @op must succeed; @want_len >= 0: its payload's length. */
static void call_ok_at(int line, int fd, uint16_t op, uint64_t sid,
		       const void *p, size_t len, struct dj_resp *r,
		       long want_len)
{
	int ret = dj_call(fd, op, sid, p, len, r);

	if (ret != 1)
		fail_msg("line %d: op %u: no response (%d, %s)", line, op, ret,
			 ret_str(ret));
	if (r->error)
		fail_msg("line %d: op %u: error %d (%s): \"%s\"", line, op,
			 r->error, strerror(-r->error), r->msg);
	if (r->hdr.flags != DJINN_F_RESPONSE || r->hdr.session_id != sid)
		fail_msg("line %d: op %u: response flags %#x session %llu",
			 line, op, r->hdr.flags,
			 (unsigned long long)r->hdr.session_id);
	if (want_len >= 0 && r->len != (uint64_t)want_len)
		fail_msg("line %d: op %u: %llu bytes of response, want %ld",
			 line, op, (unsigned long long)r->len, want_len);
}
#define call_ok(...) call_ok_at(__LINE__, __VA_ARGS__)

/* A call that must succeed with an empty response. */
#define call_void(...)                                     \
	do {                                               \
		struct dj_resp r_;                         \
		call_ok_at(__LINE__, __VA_ARGS__, &r_, 0); \
		dj_resp_free(&r_);                         \
	} while (0)

/* @r must be the error @err, its message holding @phrase (if any). */
static void expect_error_at(int line, const struct dj_resp *r, int err,
			    const char *phrase)
{
	if (!(r->hdr.flags & DJINN_F_ERROR))
		fail_msg("line %d: op %u succeeded, want error %d (%s)", line,
			 r->hdr.opcode, err, strerror(-err));
	if (r->error != err)
		fail_msg("line %d: op %u: error %d (%s) \"%s\", want %d (%s)",
			 line, r->hdr.opcode, r->error, strerror(-r->error),
			 r->msg, err, strerror(-err));
	if (phrase && !strstr(r->msg, phrase))
		fail_msg("line %d: op %u: error %d message \"%s\" lacks \"%s\"",
			 line, r->hdr.opcode, err, r->msg, phrase);
	if (!r->msg[0])
		fail_msg("line %d: op %u: error %d without a message", line,
			 r->hdr.opcode, err);
}
#define expect_error(r, err, phrase) expect_error_at(__LINE__, r, err, phrase)

/* @op must fail with @err, its message holding @phrase. */
static void call_err_at(int line, int fd, uint16_t op, uint64_t sid,
			const void *p, size_t len, int err, const char *phrase)
{
	struct dj_resp r;
	int ret = dj_call(fd, op, sid, p, len, &r);

	if (ret != 1)
		fail_msg("line %d: op %u: no response (%d, %s)", line, op, ret,
			 ret_str(ret));
	if (r.hdr.session_id != sid)
		fail_msg("line %d: op %u: error for session %llu, asked %llu",
			 line, op, (unsigned long long)r.hdr.session_id,
			 (unsigned long long)sid);
	expect_error_at(line, &r, err, phrase);
	dj_resp_free(&r);
}
#define call_err(...) call_err_at(__LINE__, __VA_ARGS__)

/* Send a hand-made header and @len bytes; the response must be the error
 * @err for the same request id and opcode. */
static void raw_err_at(int line, int fd, const struct djinn_hdr *h,
		       const void *p, size_t len, int err, const char *phrase)
{
	struct dj_resp r;
	int ret = dj_send_raw(fd, h, p, len);

	if (ret)
		fail_msg("line %d: send: %s", line, strerror(-ret));
	ret = dj_recv(fd, &r, DJ_TIMEOUT_MS);
	if (ret != 1)
		fail_msg("line %d: op %u: no response (%d, %s)", line,
			 h->opcode, ret, ret_str(ret));
	if (r.hdr.request_id != h->request_id || r.hdr.opcode != h->opcode ||
	    r.hdr.session_id != h->session_id)
		fail_msg("line %d: response is request %llu op %u session "
			 "%llu, want %llu op %u session %llu",
			 line, (unsigned long long)r.hdr.request_id,
			 r.hdr.opcode, (unsigned long long)r.hdr.session_id,
			 (unsigned long long)h->request_id, h->opcode,
			 (unsigned long long)h->session_id);
	expect_error_at(line, &r, err, phrase);
	dj_resp_free(&r);
}
#define raw_err(fd, h, p, len, err, phrase) \
	raw_err_at(__LINE__, fd, h, p, len, err, phrase)

/* The peer must close @fd within 5 s. */
static void expect_eof_at(int line, int fd)
{
	int ret = dj_wait_eof(fd, 5000);

	if (ret != 1)
		fail_msg("line %d: connection not closed by the daemon (%d)",
			 line, ret);
}
#define expect_eof(fd) expect_eof_at(__LINE__, fd)

/* A HELLO on @fd must work: the connection is usable. */
static void hello_at(int line, int fd)
{
	struct djinn_hello_resp h;
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_OP_HELLO, 0, NULL, 0, &r, sizeof(h));
	memcpy(&h, r.data, sizeof(h));
	dj_resp_free(&r);
	if (h.version != DJINN_PROTO_VERSION)
		fail_msg("line %d: HELLO version %u", line, h.version);
}
#define hello(fd) hello_at(__LINE__, fd)

/* ---------------------------------------------------------------------- */
/* The fixture: one daemon per test */

/*
 * struct fx - a test's daemon
 * @d:        the daemon
 * @hello:    its HELLO
 * @base:     ADMIN_VMU at the start
 * @adm:      an admin connection
 * @stopped:  the test stopped the daemon itself
 */
struct fx {
	struct djd d;
	struct djinn_hello_resp hello;
	struct djinn_admin_vmu base;
	int adm;
	bool stopped;
};

/* One call with a fixed-size response, not asserting: 0 or -1 with @why. */
static int quiet_call(int fd, uint16_t op, void *out, size_t len, char *why,
		      size_t whylen)
{
	struct dj_resp r;
	int ret = dj_call(fd, op, 0, NULL, 0, &r);

	if (ret != 1) {
		snprintf(why, whylen, "op %u: no response (%s)", op,
			 ret_str(ret));
		return -1;
	}
	if (r.error || r.len < len) {
		snprintf(why, whylen, "op %u: error %d \"%.160s\", %llu bytes",
			 op, r.error, r.msg, (unsigned long long)r.len);
		dj_resp_free(&r);
		return -1;
	}
	memcpy(out, r.data, len);
	dj_resp_free(&r);
	return 0;
}

/* What differs between two VMU states that should be the same when
 * nothing leaked: a reason, or NULL. The stack's backing may stay
 * committed between graphs (seg[2]); nothing else may. */
static const char *vmu_diff(const struct djinn_admin_vmu *a,
			    const struct djinn_admin_vmu *b, char *why,
			    size_t len)
{
	uint64_t ca = a->committed - a->seg[2].used,
		 cb = b->committed - b->seg[2].used;

	if (a->seg[1].used != b->seg[1].used ||
	    a->seg[1].entries != b->seg[1].entries)
		snprintf(why, len,
			 "data segment %llu bytes in %llu, was %llu "
			 "in %llu",
			 (unsigned long long)b->seg[1].used,
			 (unsigned long long)b->seg[1].entries,
			 (unsigned long long)a->seg[1].used,
			 (unsigned long long)a->seg[1].entries);
	else if (a->seg[0].used != b->seg[0].used)
		snprintf(why, len, "text segment %llu bytes, was %llu",
			 (unsigned long long)b->seg[0].used,
			 (unsigned long long)a->seg[0].used);
	else if (ca != cb || a->reserved != b->reserved)
		snprintf(why, len,
			 "committed %llu (reserved %llu), was %llu (%llu)",
			 (unsigned long long)b->committed,
			 (unsigned long long)b->reserved,
			 (unsigned long long)a->committed,
			 (unsigned long long)a->reserved);
	else
		return NULL;
	return why;
}

/*
 * The daemon still serves (a fresh HELLO on a new connection), holds
 * @nr_sessions sessions (unless negative), and its VMU matches @want
 * (unless NULL). 0, or -1 with the reason in @why. Asserts nothing: the
 * teardown uses it too.
 */
static int health(struct fx *fx, long nr_sessions,
		  const struct djinn_admin_vmu *want, char *why, size_t len)
{
	struct djinn_hello_resp h;
	struct djinn_admin_vmu v;
	uint32_t n[2];
	int fd = dj_connect(fx->d.sock), afd, ret = -1;

	if (fd < 0) {
		snprintf(why, len, "connect: %s", strerror(-fd));
		return -1;
	}
	if (quiet_call(fd, DJINN_OP_HELLO, &h, sizeof(h), why, len)) {
		close(fd);
		return -1;
	}
	close(fd);
	if (h.version != DJINN_PROTO_VERSION) {
		snprintf(why, len, "HELLO version %u", h.version);
		return -1;
	}
	afd = dj_connect(fx->d.admin);
	if (afd < 0) {
		snprintf(why, len, "connect admin: %s", strerror(-afd));
		return -1;
	}
	if (quiet_call(afd, DJINN_OP_ADMIN_SESSIONS, n, sizeof(n), why, len) ||
	    quiet_call(afd, DJINN_OP_ADMIN_VMU, &v, sizeof(v), why, len))
		goto out;
	if (nr_sessions >= 0 && n[0] != nr_sessions) {
		snprintf(why, len, "%u sessions, want %ld", n[0], nr_sessions);
		goto out;
	}
	if (want && vmu_diff(want, &v, why, len))
		goto out;
	ret = 0;
out:
	close(afd);
	return ret;
}

static void check_health_at(int line, struct fx *fx, long nr_sessions,
			    const struct djinn_admin_vmu *want)
{
	char why[256];

	if (health(fx, nr_sessions, want, why, sizeof(why)))
		fail_msg("line %d: after the test step: %s", line, why);
}
/* The daemon serves, holds @n sessions and the VMU is at its baseline. */
#define check_health(fx, n) check_health_at(__LINE__, fx, n, &(fx)->base)

static int fx_start_set(void **state, const char *mem, unsigned int lease_ms,
			const char *set)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char why[256];
	int fd;

	if (!fx)
		return -1;
	fx->adm = -1;
	if (djd_start_set(&fx->d, mem, lease_ms, set)) {
		free(fx);
		return -1;
	}
	fd = dj_connect(fx->d.sock);
	fx->adm = dj_connect(fx->d.admin);
	if (fd < 0 || fx->adm < 0 ||
	    quiet_call(fd, DJINN_OP_HELLO, &fx->hello, sizeof(fx->hello), why,
		       sizeof(why)) ||
	    quiet_call(fx->adm, DJINN_OP_ADMIN_VMU, &fx->base, sizeof(fx->base),
		       why, sizeof(why))) {
		fprintf(stderr, "setup: %s\n", why);
		if (fd >= 0)
			close(fd);
		if (fx->adm >= 0)
			close(fx->adm);
		djd_kill(&fx->d);
		free(fx);
		return -1;
	}
	close(fd);
	*state = fx;
	return 0;
}

static int fx_start(void **state, const char *mem, unsigned int lease_ms)
{
	return fx_start_set(state, mem, lease_ms, NULL);
}

static int fx_setup(void **state)
{
	return fx_start(state, DEV_MEM, 10000);
}

static int fx_setup_uid_cap(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000,
			    "server.max_sessions_per_uid=3");
}

static int fx_setup_short_lease(void **state)
{
	return fx_start(state, DEV_MEM, 300);
}

static int fx_setup_1g(void **state)
{
	return fx_start(state, "1G", 10000);
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	char why[256] = "";
	int bad = 0, ret = 0;

	if (!fx->stopped) {
		bad = health(fx, 0, &fx->base, why, sizeof(why));
		ret = djd_stop(&fx->d, 10000);
	}
	if (fx->adm >= 0)
		close(fx->adm);
	free(fx);
	if (bad)
		fail_msg("teardown: %s", why);
	if (ret)
		fail_msg("teardown: djinnd did not stop cleanly (%d: %s)", ret,
			 strerror(-ret));
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Admin queries */

static struct djinn_admin_vmu vmu_now(struct fx *fx)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	call_ok(fx->adm, DJINN_OP_ADMIN_VMU, 0, NULL, 0, &r, sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

static struct djinn_admin_stats stats_now(struct fx *fx)
{
	struct djinn_admin_stats st;
	struct dj_resp r;

	call_ok(fx->adm, DJINN_OP_ADMIN_STATS, 0, NULL, 0, &r, sizeof(st));
	memcpy(&st, r.data, sizeof(st));
	dj_resp_free(&r);
	return st;
}

/* The sessions, malloc'd in *@list (may be NULL); returns the count. */
static uint32_t sessions_now(struct fx *fx, struct djinn_admin_session **list)
{
	struct dj_resp r;
	uint32_t n[2];

	call_ok(fx->adm, DJINN_OP_ADMIN_SESSIONS, 0, NULL, 0, &r, -1);
	assert_true(r.len >= 8);
	memcpy(n, r.data, sizeof(n));
	assert_int_equal(n[1], 0);
	assert_int_equal(
		r.len, 8 + (uint64_t)n[0] * sizeof(struct djinn_admin_session));
	if (list) {
		*list = xmalloc(n[0] * sizeof(**list));
		memcpy(*list, r.data + 8, n[0] * sizeof(**list));
	}
	dj_resp_free(&r);
	return n[0];
}

/* The entry of session @id, or fail. */
static struct djinn_admin_session session_entry(struct fx *fx, uint64_t id)
{
	struct djinn_admin_session *l, e = { 0 };
	uint32_t n = sessions_now(fx, &l), i;

	for (i = 0; i < n && l[i].id != id; i++)
		;
	if (i < n)
		e = l[i];
	free(l);
	if (i == n)
		fail_msg("session %llu not in ADMIN_SESSIONS",
			 (unsigned long long)id);
	return e;
}

/* Wait (at most @ms) until the daemon holds @n sessions and the data
 * segment @data bytes; asserts it got there. Returns the ms it took. */
static int64_t wait_for_at(int line, struct fx *fx, uint32_t n, uint64_t data,
			   int ms)
{
	int64_t start = dj_now_ms(), deadline = start + ms;
	struct djinn_admin_vmu v;
	uint32_t got;

	for (;;) {
		got = sessions_now(fx, NULL);
		v = vmu_now(fx);
		if (got == n && v.seg[1].used == data)
			return dj_now_ms() - start;
		if (dj_now_ms() > deadline)
			break;
		usleep(5000);
	}
	fail_msg("line %d: after %d ms: %u sessions and %llu data bytes, want "
		 "%u and %llu",
		 line, ms, got, (unsigned long long)v.seg[1].used, n,
		 (unsigned long long)data);
	return -1;
}
#define wait_for(fx, n, data, ms) wait_for_at(__LINE__, fx, n, data, ms)

/* Wait (at most @ms) until session @sid is charged @bytes of data (its
 * destroyed regions may stay cached, uncharged, until it ends). */
static void wait_charged_at(int line, struct fx *fx, uint64_t sid,
			    uint64_t bytes, int ms)
{
	int64_t deadline = dj_now_ms() + ms;
	struct djinn_admin_session e;

	for (;;) {
		e = session_entry(fx, sid);
		if (e.data_bytes == bytes)
			return;
		if (dj_now_ms() > deadline)
			break;
		usleep(2000);
	}
	fail_msg("line %d: after %d ms session %llu is charged %llu bytes, "
		 "want %llu",
		 line, ms, (unsigned long long)sid,
		 (unsigned long long)e.data_bytes, (unsigned long long)bytes);
}
#define wait_charged(fx, sid, bytes, ms) \
	wait_charged_at(__LINE__, fx, sid, bytes, ms)

/* @bytes rounded up to the device's granule. */
static uint64_t granules(const struct fx *fx, uint64_t bytes)
{
	uint64_t g = fx->hello.granularity;

	return (bytes + g - 1) / g * g;
}

/* ---------------------------------------------------------------------- */
/* Sessions and tensors */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t open_at(int line, int fd, const char *tenant, uint32_t prio,
			uint64_t lease_ns, struct djinn_session_resp *out)
{
	struct djinn_session_open o = { .priority = prio,
					.lease_ns = lease_ns };
	struct djinn_session_resp s;
	struct dj_resp r;

	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	call_ok_at(line, fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), &r,
		   sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	if (!s.session_id)
		fail_msg("line %d: session id 0", line);
	if (out)
		*out = s;
	return s.session_id;
}
#define open_session(fd, tenant) open_at(__LINE__, fd, tenant, 4, 0, NULL)

#define attach(fd, sid, token)                                            \
	do {                                                              \
		struct dj_resp r_;                                        \
		call_ok(fd, DJINN_OP_SESSION_ATTACH, sid, token, 16, &r_, \
			sizeof(struct djinn_session_resp));               \
		dj_resp_free(&r_);                                        \
	} while (0)

#define close_session(fd, sid) \
	call_void(fd, DJINN_OP_SESSION_CLOSE, sid, NULL, 0)

static struct djinn_tensor_desc desc_make(uint8_t dtype, unsigned int ndim,
					  const uint64_t *dims)
{
	struct djinn_tensor_desc d = { .dtype = dtype, .ndim = (uint8_t)ndim };

	for (unsigned int i = 0; i < ndim && i < DJINN_MAX_DIMS; i++)
		d.dims[i] = dims[i];
	return d;
}
#define NARGS(...) (sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t))
#define DESC(dtype, ...) \
	desc_make(dtype, NARGS(__VA_ARGS__), (uint64_t[]){ __VA_ARGS__ })
#define F32(...) DESC(DJINN_DTYPE_F32, __VA_ARGS__)

static uint64_t desc_bytes(const struct djinn_tensor_desc *d)
{
	static const uint64_t size[] = { 0, 4, 2, 2, 4, 8, 1 };
	uint64_t n = d->dtype < ARRAY_LEN(size) ? size[d->dtype] : 0;

	for (unsigned int i = 0; i < d->ndim; i++)
		n *= d->dims[i];
	return n;
}

/* A TENSOR_CREATE payload: the struct, then @len bytes of @data. */
static uint8_t *create_payload(const struct djinn_tensor_desc *d, uint32_t seg,
			       const uint8_t *fp, const void *data, size_t len,
			       size_t *plen)
{
	struct djinn_tensor_create c = { .desc = *d, .segment = seg };
	uint8_t *p = xmalloc(sizeof(c) + len);

	if (fp)
		memcpy(c.fp, fp, sizeof(c.fp));
	memcpy(p, &c, sizeof(c));
	if (len)
		memcpy(p + sizeof(c), data, len);
	*plen = sizeof(c) + len;
	return p;
}

/* TENSOR_CREATE; the response in @r, not checked. */
static void create_try_at(int line, int fd, uint64_t sid,
			  const struct djinn_tensor_desc *d, uint32_t seg,
			  const uint8_t *fp, const void *data, size_t len,
			  struct dj_resp *r)
{
	size_t plen;
	uint8_t *p = create_payload(d, seg, fp, data, len, &plen);
	int ret = dj_call(fd, DJINN_OP_TENSOR_CREATE, sid, p, plen, r);

	free(p);
	if (ret != 1)
		fail_msg("line %d: TENSOR_CREATE: no response (%d, %s)", line,
			 ret, ret_str(ret));
}

static uint64_t create_at(int line, int fd, uint64_t sid,
			  const struct djinn_tensor_desc *d, uint32_t seg,
			  const uint8_t *fp, const void *data, size_t len,
			  uint32_t *flags)
{
	struct djinn_tensor_resp t;
	struct dj_resp r;

	create_try_at(line, fd, sid, d, seg, fp, data, len, &r);
	if (r.error)
		fail_msg("line %d: TENSOR_CREATE: error %d (%s): \"%s\"", line,
			 r.error, strerror(-r.error), r.msg);
	if (r.len != sizeof(t))
		fail_msg("line %d: TENSOR_CREATE: %llu bytes of response", line,
			 (unsigned long long)r.len);
	memcpy(&t, r.data, sizeof(t));
	dj_resp_free(&r);
	if (memcmp(&t.desc, d, sizeof(*d)) || t.__reserved)
		fail_msg("line %d: TENSOR_CREATE: desc not echoed", line);
	if (flags)
		*flags = t.flags;
	else if (t.flags)
		fail_msg("line %d: TENSOR_CREATE: flags %#x", line, t.flags);
	return t.handle;
}
/* A data tensor with its first @len bytes from @data. */
#define create_data(fd, sid, d, data, len) \
	create_at(__LINE__, fd, sid, d, DJINN_SEG_DATA, NULL, data, len, NULL)

static void read_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
		    uint64_t len, void *buf)
{
	struct djinn_tensor_io io = { .handle = h, .offset = off, .len = len };
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io), &r,
		   (long)len);
	if (len)
		memcpy(buf, r.data, len);
	dj_resp_free(&r);
}
#define tensor_read(fd, sid, h, off, len, buf) \
	read_at(__LINE__, fd, sid, h, off, len, buf)

static uint8_t *write_payload(uint64_t h, uint64_t off, const void *data,
			      uint64_t len, size_t *plen)
{
	struct djinn_tensor_io io = { .handle = h, .offset = off, .len = len };
	uint8_t *p = xmalloc(sizeof(io) + len);

	memcpy(p, &io, sizeof(io));
	if (len)
		memcpy(p + sizeof(io), data, len);
	*plen = sizeof(io) + len;
	return p;
}

static void write_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
		     const void *data, uint64_t len, int err,
		     const char *phrase)
{
	size_t plen;
	uint8_t *p = write_payload(h, off, data, len, &plen);
	struct dj_resp r;

	if (err) {
		call_err_at(line, fd, DJINN_OP_TENSOR_WRITE, sid, p, plen, err,
			    phrase);
	} else {
		call_ok_at(line, fd, DJINN_OP_TENSOR_WRITE, sid, p, plen, &r,
			   0);
		dj_resp_free(&r);
	}
	free(p);
}
#define tensor_write(fd, sid, h, off, data, len) \
	write_at(__LINE__, fd, sid, h, off, data, len, 0, NULL)

#define tensor_release(fd, sid, h) \
	call_void(fd, DJINN_OP_TENSOR_RELEASE, sid, &(uint64_t){ h }, 8)

static void sha256(const void *data, size_t len, uint8_t fp[DJINN_FP_LEN])
{
	unsigned int n = 0;

	assert_int_equal(EVP_Digest(data, len, fp, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, DJINN_FP_LEN);
}

/* ---------------------------------------------------------------------- */
/* Graphs */

#define GB_MAX_IN 16
#define GB_MAX_NODES 32
#define GB_MAX_OUT 8

struct gb {
	uint32_t nin, nnodes, nout;
	struct djinn_ref in[GB_MAX_IN];
	struct djinn_node node[GB_MAX_NODES];
	uint32_t out[GB_MAX_OUT];
};

/* Inputs come first; each returns its value index. */
static uint32_t gb_input(struct gb *g, uint64_t handle)
{
	assert_true(g->nin < GB_MAX_IN && !g->nnodes);
	g->in[g->nin] =
		(struct djinn_ref){ .id = handle, .kind = DJINN_REF_HANDLE };
	return g->nin++;
}

static uint32_t gb_result(struct gb *g, uint64_t request_id, uint32_t index)
{
	assert_true(g->nin < GB_MAX_IN && !g->nnodes);
	g->in[g->nin] = (struct djinn_ref){ .id = request_id,
					    .index = index,
					    .kind = DJINN_REF_RESULT };
	return g->nin++;
}

/* A node of @op on @n values; returns its value index. */
static uint32_t gb_op(struct gb *g, uint16_t op, unsigned int n, ...)
{
	struct djinn_node *nd = &g->node[g->nnodes];
	va_list ap;

	assert_true(g->nnodes < GB_MAX_NODES && n <= DJINN_MAX_NODE_INPUTS);
	memset(nd, 0, sizeof(*nd));
	nd->op = op;
	nd->nr_inputs = (uint8_t)n;
	va_start(ap, n);
	for (unsigned int i = 0; i < n; i++)
		nd->inputs[i] = va_arg(ap, uint32_t);
	va_end(ap);
	return g->nin + g->nnodes++;
}

/* The node that made value @v. */
static struct djinn_node *gb_node(struct gb *g, uint32_t v)
{
	assert_true(v >= g->nin && v - g->nin < g->nnodes);
	return &g->node[v - g->nin];
}

static void gb_output(struct gb *g, uint32_t v)
{
	assert_true(g->nout < GB_MAX_OUT && v >= g->nin);
	g->out[g->nout++] = v - g->nin;
}

static uint8_t *gb_payload(const struct gb *g, size_t *len)
{
	struct djinn_graph h = { .nr_inputs = g->nin,
				 .nr_nodes = g->nnodes,
				 .nr_outputs = g->nout };
	size_t outs = ((size_t)g->nout * 4 + 7) & ~(size_t)7;
	size_t n = sizeof(h) + g->nin * sizeof(g->in[0]) +
		   g->nnodes * sizeof(g->node[0]) + outs;
	uint8_t *p = xmalloc(n), *q = p;

	memset(p, 0, n);
	memcpy(q, &h, sizeof(h));
	q += sizeof(h);
	memcpy(q, g->in, g->nin * sizeof(g->in[0]));
	q += g->nin * sizeof(g->in[0]);
	memcpy(q, g->node, g->nnodes * sizeof(g->node[0]));
	q += g->nnodes * sizeof(g->node[0]);
	memcpy(q, g->out, g->nout * 4);
	*len = n;
	return p;
}

static void graph_send_at(int line, int fd, uint64_t sid, uint64_t id,
			  const struct gb *g)
{
	size_t len;
	uint8_t *p = gb_payload(g, &len);
	int ret = dj_send(fd, DJINN_OP_GRAPH_SUBMIT, id, sid, p, len);

	free(p);
	if (ret)
		fail_msg("line %d: send graph: %s", line, strerror(-ret));
}

/* Check a successful GRAPH_SUBMIT response; the outputs into @out. */
static void graph_resp_at(int line, const struct dj_resp *r, uint32_t nout,
			  struct djinn_tensor_resp *out)
{
	struct djinn_graph_resp gr;

	if (r->error)
		fail_msg("line %d: GRAPH_SUBMIT: error %d (%s): \"%s\"", line,
			 r->error, strerror(-r->error), r->msg);
	if (r->len != sizeof(gr) + nout * sizeof(*out))
		fail_msg("line %d: GRAPH_SUBMIT: %llu bytes of response", line,
			 (unsigned long long)r->len);
	memcpy(&gr, r->data, sizeof(gr));
	if (gr.nr_outputs != nout || gr.__reserved || !gr.peak_bytes)
		fail_msg("line %d: GRAPH_SUBMIT: %u outputs, peak %llu", line,
			 gr.nr_outputs, (unsigned long long)gr.peak_bytes);
	memcpy(out, r->data + sizeof(gr), nout * sizeof(*out));
}

/* Run @g; its outputs' tensors into @out. */
static void graph_run_at(int line, int fd, uint64_t sid, const struct gb *g,
			 struct djinn_tensor_resp *out)
{
	size_t len;
	uint8_t *p = gb_payload(g, &len);
	struct dj_resp r;
	int ret = dj_call(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, &r);

	free(p);
	if (ret != 1)
		fail_msg("line %d: GRAPH_SUBMIT: no response (%d, %s)", line,
			 ret, ret_str(ret));
	graph_resp_at(line, &r, g->nout, out);
	dj_resp_free(&r);
}
#define graph_run(fd, sid, g, out) graph_run_at(__LINE__, fd, sid, g, out)

static void graph_err_at(int line, int fd, uint64_t sid, const struct gb *g,
			 int err, const char *phrase)
{
	size_t len;
	uint8_t *p = gb_payload(g, &len);

	call_err_at(line, fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, err, phrase);
	free(p);
}
#define graph_err(fd, sid, g, err, phrase) \
	graph_err_at(__LINE__, fd, sid, g, err, phrase)

/* ---------------------------------------------------------------------- */
/* Reference math, in double */

/* Floats in [-scale, scale), reproducible from @seed. */
static float *rand_floats(uint64_t seed, size_t n, float scale)
{
	float *f = xmalloc(n * sizeof(*f));
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		f[i] = scale *
		       (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 -
			       1.0);
	}
	return f;
}

/* c (m, n) = a (m, k) x b (k, n) */
static void ref_matmul(const double *a, const double *b, double *c, size_t m,
		       size_t k, size_t n)
{
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < n; j++) {
			double s = 0;

			for (size_t l = 0; l < k; l++)
				s += a[i * k + l] * b[l * n + j];
			c[i * n + j] = s;
		}
}

/* x (m, n) += b (n) */
static void ref_add_row(double *x, const double *b, size_t m, size_t n)
{
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < n; j++)
			x[i * n + j] += b[j];
}

static double ref_gelu(double v)
{
	return 0.5 * v *
	       (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

static void ref_layernorm(const double *x, const double *g, const double *b,
			  double *y, size_t m, size_t n, double eps)
{
	for (size_t i = 0; i < m; i++) {
		double mean = 0, var = 0;

		for (size_t j = 0; j < n; j++)
			mean += x[i * n + j];
		mean /= (double)n;
		for (size_t j = 0; j < n; j++)
			var += (x[i * n + j] - mean) * (x[i * n + j] - mean);
		var /= (double)n;
		for (size_t j = 0; j < n; j++)
			y[i * n + j] =
				(x[i * n + j] - mean) / sqrt(var + eps) * g[j] +
				b[j];
	}
}

static double *to_double(const float *f, size_t n)
{
	double *d = xmalloc(n * sizeof(*d));

	for (size_t i = 0; i < n; i++)
		d[i] = f[i];
	return d;
}

/* @got must match @want within a relative and absolute tolerance. */
static void expect_close_at(int line, const float *got, const double *want,
			    size_t n, double tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
			fail_msg("line %d: element %zu is %.7g, want %.7g",
				 line, i, (double)got[i], want[i]);
}
#define expect_close(got, want, n, tol) \
	expect_close_at(__LINE__, got, want, n, tol)

/* ---------------------------------------------------------------------- */
/* Framing */

/* 1. HELLO says what the daemon is. */
static void test_hello(void **state)
{
	struct fx *fx = *state;
	struct djinn_hello_resp h;
	int fd = xconnect(fx->d.sock);
	struct dj_resp r;

	call_ok(fd, DJINN_OP_HELLO, 0, NULL, 0, &r, sizeof(h));
	memcpy(&h, r.data, sizeof(h));
	dj_resp_free(&r);
	assert_int_equal(h.version, DJINN_PROTO_VERSION);
	assert_string_equal(h.backend, "cpu");
	for (size_t i = strlen("cpu"); i < sizeof(h.backend); i++)
		assert_int_equal(h.backend[i], 0);
	assert_int_equal(h.capacity, DEV_BYTES);
	assert_int_equal(h.max_payload, DJINN_MAX_PAYLOAD);
	assert_true(h.granularity && !(h.granularity & (h.granularity - 1)));
	assert_int_equal(h.capacity % h.granularity, 0);

	/* Many HELLOs on one connection, each answered with its own id. */
	for (uint64_t id = 1; id <= 8; id++)
		assert_int_equal(
			dj_send(fd, DJINN_OP_HELLO, id << 40, 0, NULL, 0), 0);
	for (uint64_t id = 1; id <= 8; id++) {
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id << 40);
		assert_int_equal(r.hdr.opcode, DJINN_OP_HELLO);
		assert_int_equal(r.hdr.flags, DJINN_F_RESPONSE);
		assert_int_equal(r.len, sizeof(h));
		dj_resp_free(&r);
	}
	close(fd);
}

/* 2. Another protocol version: -EPROTONOSUPPORT naming both versions;
 * the connection stays usable (a payload is skipped). */
static void test_version_mismatch(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "v", .priority = 4 };
	int fd = xconnect(fx->d.sock);
	struct djinn_hdr h;
	char want[32];

	h = dj_hdr(DJINN_OP_HELLO, 7, 0, 0);
	h.version = 4660;
	raw_err(fd, &h, NULL, 0, -EPROTONOSUPPORT, "4660");
	/* ... and the server's own version, as a number in the message */
	h.version = 0;
	raw_err(fd, &h, NULL, 0, -EPROTONOSUPPORT, NULL);
	hello(fd);

	/* With a payload, which must be skipped, not parsed as a frame. */
	h = dj_hdr(DJINN_OP_SESSION_OPEN, 8, 0, sizeof(o));
	h.version = DJINN_PROTO_VERSION + 1;
	snprintf(want, sizeof(want), "%u", DJINN_PROTO_VERSION + 1);
	raw_err(fd, &h, &o, sizeof(o), -EPROTONOSUPPORT, want);
	hello(fd);
	close_session(fd, open_session(fd, "after-mismatch"));

	/* Both numbers are named: "... 4660 ..., ... 1 ..." */
	{
		struct dj_resp r;

		h = dj_hdr(DJINN_OP_HELLO, 9, 0, 0);
		h.version = 4660;
		assert_int_equal(dj_send_raw(fd, &h, NULL, 0), 0);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		expect_error(&r, -EPROTONOSUPPORT, "4660");
		snprintf(want, sizeof(want), "%u", DJINN_PROTO_VERSION);
		assert_non_null(strstr(strstr(r.msg, "4660") + 4, want));
		dj_resp_free(&r);
	}
	close(fd);
	check_health(fx, 0);
}

/* 3. Bad magic: -EPROTO, then the connection is closed. */
static void test_bad_magic(void **state)
{
	struct fx *fx = *state;
	int other = xconnect(fx->d.sock), fd = xconnect(fx->d.sock);
	struct djinn_hdr h = dj_hdr(DJINN_OP_HELLO, 42, 0, 0);

	hello(other);
	hello(fd);
	h.magic = 0x4e4a4431; /* "1DJN": byte-swapped */
	raw_err(fd, &h, NULL, 0, -EPROTO, NULL);
	expect_eof(fd);
	close(fd);

	/* Garbage that happens to be 40 bytes, with more behind it. */
	fd = xconnect(fx->d.sock);
	{
		uint8_t junk[200];
		struct dj_resp r;

		memset(junk, 0xa5, sizeof(junk));
		assert_int_equal(dj_write(fd, junk, sizeof(junk), 5000), 0);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		expect_error(&r, -EPROTO, NULL);
		dj_resp_free(&r);
	}
	expect_eof(fd);
	close(fd);

	hello(other); /* others are still served */
	close(other);
	check_health(fx, 0);
}

/* 4. payload_len over DJINN_MAX_PAYLOAD: -EMSGSIZE, then closed; over an
 * opcode's limit: -EMSGSIZE. */
static void test_oversize(void **state)
{
	struct fx *fx = *state;
	const uint64_t lens[] = { DJINN_MAX_PAYLOAD + 1, UINT64_MAX };
	uint8_t pad[96] = { 0 };
	struct djinn_hdr h;
	int fd;

	for (size_t i = 0; i < ARRAY_LEN(lens); i++) {
		fd = xconnect(fx->d.sock);
		h = dj_hdr(DJINN_OP_TENSOR_CREATE, 100 + i, 0, lens[i]);
		raw_err(fd, &h, NULL, 0, -EMSGSIZE, NULL);
		expect_eof(fd);
		close(fd);
	}

	/* Over what the opcode allows, with the bytes sent: refused, and
	 * the connection stays usable. */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_OP_HELLO, 200, 0, 8);
	raw_err(fd, &h, pad, 8, -EMSGSIZE, NULL);
	hello(fd);
	h = dj_hdr(DJINN_OP_SESSION_OPEN, 201, 0,
		   sizeof(struct djinn_session_open) + 1);
	raw_err(fd, &h, pad, sizeof(struct djinn_session_open) + 1, -EMSGSIZE,
		NULL);
	hello(fd);
	h = dj_hdr(DJINN_OP_TENSOR_READ, 202, 0, sizeof(pad));
	raw_err(fd, &h, pad, sizeof(pad), -EMSGSIZE, NULL);
	hello(fd);
	close(fd);

	/* A huge payload for a small opcode: refused (the bytes need not
	 * be read). */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_OP_HEARTBEAT, 203, 0, 1ull << 33);
	raw_err(fd, &h, NULL, 0, -EMSGSIZE, NULL);
	close(fd);
	check_health(fx, 0);
}

/* 5. An unknown opcode: -EOPNOTSUPP, the connection stays usable. */
static void test_unknown_opcode(void **state)
{
	struct fx *fx = *state;
	const uint16_t ops[] = { 0, 22, 63, 72, 1000, 0xffff };
	int fd = xconnect(fx->d.sock);
	uint8_t pad[32] = { 1, 2, 3 };

	for (size_t i = 0; i < ARRAY_LEN(ops); i++) {
		struct djinn_hdr h = dj_hdr(ops[i], 300 + i, 0, 0);
		char num[8];

		snprintf(num, sizeof(num), "%u", ops[i]);
		raw_err(fd, &h, NULL, 0, -EOPNOTSUPP, num);
		/* with a payload, skipped */
		h.payload_len = sizeof(pad);
		raw_err(fd, &h, pad, sizeof(pad), -EOPNOTSUPP, num);
		hello(fd);
	}
	close(fd);
	check_health(fx, 0);
}

/* 6. A reserved header field or flags set: -EINVAL. */
static void test_reserved_header(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "r", .priority = 4 };
	int fd = xconnect(fx->d.sock);
	struct djinn_hdr h;

	h = dj_hdr(DJINN_OP_HELLO, 1, 0, 0);
	h.flags = DJINN_F_RESPONSE;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = DJINN_F_ERROR;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = 1u << 31;
	raw_err(fd, &h, NULL, 0, -EINVAL, "flags");
	h.flags = 0;
	h.__reserved = 1;
	raw_err(fd, &h, NULL, 0, -EINVAL, "reserved");
	hello(fd);

	/* With a payload: skipped, and nothing was opened. */
	h = dj_hdr(DJINN_OP_SESSION_OPEN, 2, 0, sizeof(o));
	h.__reserved = 0x80000000u;
	raw_err(fd, &h, &o, sizeof(o), -EINVAL, "reserved");
	h = dj_hdr(DJINN_OP_SESSION_OPEN, 3, 0, sizeof(o));
	h.flags = 4;
	raw_err(fd, &h, &o, sizeof(o), -EINVAL, "flags");
	hello(fd);
	assert_int_equal(sessions_now(fx, NULL), 0);

	/* A device this djinnd does not have (it has one) */
	o.device = 2;
	call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -ENODEV,
		 "no device 1: this djinnd has 1 device (0 to 0)");
	close(fd);
	check_health(fx, 0);
}

/* 7. Truncated frames: the daemon survives, serves others and frees what
 * a half-received request had taken. */
static void test_truncated(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "t", .priority = 4 };
	struct djinn_tensor_desc d = F32(256, 1024); /* 1 MiB */
	int other = xconnect(fx->d.sock), fd;
	struct djinn_session_resp s;
	struct djinn_hdr h;
	size_t plen;
	uint8_t *p;

	hello(other);

	/* Half a header, then close. */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_OP_HELLO, 1, 0, 0);
	assert_int_equal(dj_write(fd, &h, sizeof(h) / 2, 5000), 0);
	close(fd);

	/* A header promising more than is sent, then close. */
	fd = xconnect(fx->d.sock);
	h = dj_hdr(DJINN_OP_SESSION_OPEN, 2, 0, sizeof(o));
	assert_int_equal(dj_send_raw(fd, &h, &o, sizeof(o) / 2), 0);
	close(fd);

	/* Half a TENSOR_CREATE of 1 MiB, then close: its region goes. */
	fd = xconnect(fx->d.sock);
	open_at(__LINE__, fd, "trunc", 4, 0, &s);
	p = create_payload(&d, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_OP_TENSOR_CREATE, 3, s.session_id,
		   plen + desc_bytes(&d));
	assert_int_equal(dj_send_raw(fd, &h, p, plen), 0);
	free(p);
	p = pattern_buf(3, 300000);
	assert_int_equal(dj_write(fd, p, 300000, 5000), 0);
	free(p);
	/* the region exists while the bytes stream in */
	wait_charged(fx, s.session_id, granules(fx, desc_bytes(&d)), 5000);
	close(fd);
	wait_charged(fx, s.session_id, 0, 5000);

	/* Half a TENSOR_WRITE, then close: the tensor is intact. */
	fd = xconnect(fx->d.sock);
	attach(fd, s.session_id, s.token);
	{
		uint8_t *data = pattern_buf(4, desc_bytes(&d)), *got;
		uint64_t t =
			create_data(fd, s.session_id, &d, data, desc_bytes(&d));
		int fd2 = xconnect(fx->d.sock);

		attach(fd2, s.session_id, s.token);
		p = write_payload(t, 0, data, 4096, &plen);
		h = dj_hdr(DJINN_OP_TENSOR_WRITE, 4, s.session_id,
			   sizeof(struct djinn_tensor_io) + 8192);
		assert_int_equal(dj_send_raw(fd2, &h, p, plen), 0);
		free(p);
		close(fd2);
		hello(other);
		got = xmalloc(desc_bytes(&d));
		tensor_read(fd, s.session_id, t, 0, desc_bytes(&d), got);
		expect_pattern(got, 4, 0, desc_bytes(&d), "tensor");
		free(got);
		free(data);
		tensor_release(fd, s.session_id, t);
	}
	close_session(fd, s.session_id);
	close(fd);

	hello(other);
	close(other);
	check_health(fx, 0);
}

/* 8. A payload of the wrong size for a fixed-size opcode: -EINVAL; the
 * connection stays usable. */
static void test_wrong_size(void **state)
{
	struct fx *fx = *state;
	static const struct {
		uint16_t op;
		size_t len;
	} cases[] = {
		{ DJINN_OP_SESSION_OPEN,
		  sizeof(struct djinn_session_open) - 1 },
		{ DJINN_OP_SESSION_OPEN, 0 },
		{ DJINN_OP_SESSION_ATTACH, 8 },
		{ DJINN_OP_SIGNAL, 8 },
		{ DJINN_OP_TENSOR_READ, 16 },
		{ DJINN_OP_TENSOR_RELEASE, 4 },
		{ DJINN_OP_TEXT_LOOKUP, 100 },
		{ DJINN_OP_TENSOR_CREATE,
		  sizeof(struct djinn_tensor_create) - 1 },
		{ DJINN_OP_TENSOR_WRITE, sizeof(struct djinn_tensor_io) - 1 },
		{ DJINN_OP_GRAPH_SUBMIT, 20 },
	};
	uint8_t pad[128] = { 0 };
	int fd = xconnect(fx->d.sock), afd = xconnect(fx->d.admin);
	uint64_t sid = open_session(fd, "sizes");

	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		call_err(fd, cases[i].op, sid, pad, cases[i].len, -EINVAL,
			 NULL);
		hello(fd);
	}
	call_err(afd, DJINN_OP_ADMIN_KILL, 0, pad, 4, -EINVAL, NULL);
	hello(afd);
	assert_int_equal(session_entry(fx, sid).id, sid);
	close_session(fd, sid);
	close(afd);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Sessions */

/* 9. Open, heartbeat, attach, close; unknown sessions, foreign
 * connections, wrong tokens and bad open requests. */
static void test_sessions(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	struct djinn_session_resp s, s2, hb;
	struct djinn_session_open o;
	uint8_t zero[16] = { 0 }, bad[16];
	struct dj_resp r;
	uint64_t sid;

	/* Open: a non-zero token, the default lease (--lease-ms 10000). */
	sid = open_at(__LINE__, fd, "alice", 4, 0, &s);
	assert_memory_not_equal(s.token, zero, sizeof(zero));
	assert_int_equal(s.lease_ns, 10000 * MS);
	assert_true(s.deadline_ns > 0);

	/* A second session has its own id and token. */
	open_at(__LINE__, fd, "alice", 0, 0, &s2);
	assert_int_not_equal(s2.session_id, sid);
	assert_memory_not_equal(s2.token, s.token, sizeof(s.token));

	/* Heartbeat: the lease is renewed, no token; the deadline is on
	 * the server's CLOCK_MONOTONIC, which is ours. */
	usleep(2000);
	{
		uint64_t before = mono_ns(), after;

		call_ok(fd, DJINN_OP_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
		after = mono_ns();
		memcpy(&hb, r.data, sizeof(hb));
		dj_resp_free(&r);
		assert_in_range(hb.deadline_ns, before + hb.lease_ns,
				after + hb.lease_ns);
	}
	assert_int_equal(hb.session_id, sid);
	assert_memory_equal(hb.token, zero, sizeof(zero));
	assert_int_equal(hb.lease_ns, s.lease_ns);
	assert_true(hb.deadline_ns > s.deadline_ns);

	/* An unknown session */
	call_err(fd, DJINN_OP_HEARTBEAT, sid + 1000, NULL, 0, -ENOENT, NULL);
	call_err(fd, DJINN_OP_SESSION_CLOSE, UINT64_MAX, NULL, 0, -ENOENT,
		 NULL);
	call_err(fd, DJINN_OP_TENSOR_READ, 77777,
		 &(struct djinn_tensor_io){ .handle = 1, .len = 1 },
		 sizeof(struct djinn_tensor_io), -ENOENT, NULL);

	/* Another connection, not attached: -EPERM */
	call_err(fd2, DJINN_OP_HEARTBEAT, sid, NULL, 0, -EPERM, NULL);
	call_err(fd2, DJINN_OP_SESSION_CLOSE, sid, NULL, 0, -EPERM, NULL);
	call_err(fd2, DJINN_OP_TENSOR_RELEASE, sid, &(uint64_t){ 1 }, 8, -EPERM,
		 NULL);
	/* a wrong token, zero or one bit off */
	call_err(fd2, DJINN_OP_SESSION_ATTACH, sid, zero, 16, -EPERM, NULL);
	memcpy(bad, s.token, 16);
	bad[15] ^= 1;
	call_err(fd2, DJINN_OP_SESSION_ATTACH, sid, bad, 16, -EPERM, NULL);
	/* the other session's token */
	call_err(fd2, DJINN_OP_SESSION_ATTACH, sid, s2.token, 16, -EPERM, NULL);
	call_err(fd2, DJINN_OP_HEARTBEAT, sid, NULL, 0, -EPERM, NULL);
	/* attaching to an unknown session */
	call_err(fd2, DJINN_OP_SESSION_ATTACH, sid + 1000, s.token, 16, -ENOENT,
		 NULL);
	/* the right token: attached */
	call_ok(fd2, DJINN_OP_SESSION_ATTACH, sid, s.token, 16, &r, sizeof(hb));
	memcpy(&hb, r.data, sizeof(hb));
	dj_resp_free(&r);
	assert_int_equal(hb.session_id, sid);
	assert_memory_equal(hb.token, zero, sizeof(zero));
	call_ok(fd2, DJINN_OP_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
	dj_resp_free(&r);
	/* and still from the first connection */
	call_ok(fd, DJINN_OP_HEARTBEAT, sid, NULL, 0, &r, sizeof(hb));
	dj_resp_free(&r);

	/* A closed connection does not end its sessions: s2 survives its
	 * connection and is attached from a new one. */
	close(fd);
	fd = xconnect(fx->d.sock);
	call_ok(fd, DJINN_OP_SESSION_ATTACH, s2.session_id, s2.token, 16, &r,
		sizeof(hb));
	dj_resp_free(&r);
	assert_int_equal(sessions_now(fx, NULL), 2);
	close_session(fd, s2.session_id);
	call_err(fd, DJINN_OP_HEARTBEAT, s2.session_id, NULL, 0, -ENOENT, NULL);

	/* Close from the attached connection: gone for everyone. */
	close_session(fd2, sid);
	call_err(fd2, DJINN_OP_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
	call_err(fd2, DJINN_OP_SESSION_ATTACH, sid, s.token, 16, -ENOENT, NULL);
	call_err(fd2, DJINN_OP_SESSION_CLOSE, sid, NULL, 0, -ENOENT, NULL);

	/* Bad opens: -EINVAL, nothing opened. */
	memset(&o, 0, sizeof(o));
	memset(o.tenant, 'a', sizeof(o.tenant)); /* no NUL */
	o.priority = 4;
	call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL,
		 "tenant");
	memset(o.tenant, 0, sizeof(o.tenant)); /* empty */
	call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	strcpy(o.tenant, "bob");
	o.priority = 8;
	call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	o.priority = UINT32_MAX;
	call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL, NULL);
	/* 63 bytes and a NUL, priority 7: fine */
	memset(o.tenant, 'b', sizeof(o.tenant) - 1);
	o.tenant[sizeof(o.tenant) - 1] = 0;
	o.priority = 7;
	call_ok(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	assert_int_equal(session_entry(fx, s.session_id).priority, 7);
	assert_string_equal(session_entry(fx, s.session_id).tenant, o.tenant);
	close_session(fd, s.session_id);

	/* The lease is clamped to the server's limits, and said. */
	open_at(__LINE__, fd, "short", 4, 1, &s);
	assert_true(s.lease_ns > 1);
	close_session(fd, s.session_id);
	open_at(__LINE__, fd, "long", 4, UINT64_MAX, &s);
	assert_true(s.lease_ns < UINT64_MAX);
	assert_true(s.deadline_ns > hb.deadline_ns);
	close_session(fd, s.session_id);

	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* SIGNAL: recorded for the scheduler and shown by ADMIN_SESSIONS. */
static void test_signal(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "sig");
	struct djinn_signal sg = { .phase = DJINN_PHASE_IO_WAIT,
				   .expected_ns = 2000 * MS };

	call_void(fd, DJINN_OP_SIGNAL, sid, &sg, sizeof(sg));
	assert_int_equal(session_entry(fx, sid).phase, DJINN_PHASE_IO_WAIT);
	sg.phase = DJINN_PHASE_IDLE + 1;
	call_err(fd, DJINN_OP_SIGNAL, sid, &sg, sizeof(sg), -EINVAL, "phase");
	sg.phase = DJINN_PHASE_DECODE;
	sg.__reserved = 1;
	call_err(fd, DJINN_OP_SIGNAL, sid, &sg, sizeof(sg), -EINVAL,
		 "reserved");
	sg.__reserved = 0;
	call_err(fd, DJINN_OP_SIGNAL, 0, &sg, sizeof(sg), -ENOENT, NULL);
	assert_int_equal(session_entry(fx, sid).phase, DJINN_PHASE_IO_WAIT);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Tensors */

/* 10a. Create with bytes, read ranges back, write, release; stale,
 * foreign and forged handles; ranges outside the tensor. */
static void test_tensors(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(64, 32), small = F32(10);
	const uint64_t bytes = desc_bytes(&d);
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "tensors"),
		 sid2 = open_session(fd2, "other");
	uint8_t *data = pattern_buf(1, bytes), *got = xmalloc(bytes);
	uint8_t *upd = pattern_buf(2, 1000), zero[600] = { 0 };
	uint64_t t, t2, part, other;
	struct djinn_admin_vmu v;

	t = create_data(fd, sid, &d, data, bytes);
	v = vmu_now(fx);
	assert_true(v.seg[1].used >= bytes);
	assert_int_equal(v.seg[1].entries, fx->base.seg[1].entries + 1);
	assert_int_equal(session_entry(fx, sid).tensors, 1);

	/* read back: all, a range, one byte, nothing at the end */
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 1, 0, bytes, "whole tensor");
	tensor_read(fd, sid, t, 1234, 3000, got);
	expect_pattern(got, 1, 1234, 3000, "range");
	tensor_read(fd, sid, t, bytes - 1, 1, got);
	expect_pattern(got, 1, bytes - 1, 1, "last byte");
	tensor_read(fd, sid, t, bytes, 0, got);

	/* write a range, read around it */
	tensor_write(fd, sid, t, 4000, upd, 1000);
	tensor_read(fd, sid, t, 3900, 1200, got);
	expect_pattern(got, 1, 3900, 100, "before the write");
	expect_pattern(got + 100, 2, 0, 1000, "the write");
	expect_pattern(got + 1100, 1, 5000, 100, "after the write");

	/* data shorter than the tensor: the rest reads as zero */
	part = create_data(fd, sid, &d, data, 1000);
	tensor_read(fd, sid, part, 0, 1600, got);
	expect_pattern(got, 1, 0, 1000, "given bytes");
	assert_memory_equal(got + 1000, zero, 600);
	tensor_read(fd, sid, part, bytes - 600, 600, got);
	assert_memory_equal(got, zero, 600);

	/* ranges outside the tensor: -EINVAL */
	{
		const uint64_t bad[][2] = {
			{ 0, bytes + 1 },  { bytes, 1 },      { bytes + 1, 0 },
			{ 8, UINT64_MAX }, { UINT64_MAX, 2 }, { bytes - 4, 8 },
		};

		for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
			struct djinn_tensor_io io = { .handle = t,
						      .offset = bad[i][0],
						      .len = bad[i][1] };

			call_err(fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io),
				 -EINVAL, "range");
		}
		write_at(__LINE__, fd, sid, t, bytes - 10, upd, 20, -EINVAL,
			 "range");
		write_at(__LINE__, fd, sid, t, UINT64_MAX - 5, upd, 20, -EINVAL,
			 "range");
	}
	/* a write whose len is not what follows */
	{
		size_t plen;
		uint8_t *p = write_payload(t, 0, upd, 100, &plen);
		struct djinn_tensor_io io = { .handle = t, .len = 99 };

		memcpy(p, &io, sizeof(io));
		call_err(fd, DJINN_OP_TENSOR_WRITE, sid, p, plen, -EINVAL,
			 NULL);
		free(p);
	}
	/* the tensor is unchanged by all that */
	tensor_read(fd, sid, t, 0, 4000, got);
	expect_pattern(got, 1, 0, 4000, "after bad requests");

	/* another session's handle: -ENOENT from that session */
	other = create_data(fd2, sid2, &small, data, 40);
	{
		struct djinn_tensor_io io = { .handle = other, .len = 4 };

		call_err(fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
		io.handle = t;
		call_err(fd2, DJINN_OP_TENSOR_READ, sid2, &io, sizeof(io),
			 -ENOENT, NULL);
		write_at(__LINE__, fd2, sid2, t, 0, upd, 4, -ENOENT, NULL);
		call_err(fd2, DJINN_OP_TENSOR_RELEASE, sid2, &t, 8, -ENOENT,
			 NULL);
	}
	/* forged handles */
	{
		uint64_t x = 0x123456789abcdefull;

		for (int i = 0; i < 64; i++) {
			struct djinn_tensor_io io = { .len = 4 };

			x = x * 6364136223846793005ull + 1442695040888963407ull;
			io.handle = i < 4 ? (uint64_t[]){ 0, 1, UINT64_MAX,
							  t ^ 1 }[i] :
					    x;
			if (io.handle == t || io.handle == part)
				continue;
			call_err(fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io),
				 -ENOENT, NULL);
		}
		call_err(fd, DJINN_OP_TENSOR_RELEASE, sid, &x, 8, -ENOENT,
			 NULL);
	}

	/* release; then the handle is stale */
	tensor_release(fd, sid, t);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
		write_at(__LINE__, fd, sid, t, 0, upd, 4, -ENOENT, NULL);
		call_err(fd, DJINN_OP_TENSOR_RELEASE, sid, &t, 8, -ENOENT,
			 NULL);
	}
	/* a new tensor (maybe in the same slot) does not answer to it */
	t2 = create_data(fd, sid, &small, data, 40);
	assert_int_not_equal(t2, t);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd, DJINN_OP_TENSOR_READ, sid, &io, sizeof(io),
			 -ENOENT, NULL);
	}
	tensor_read(fd, sid, t2, 0, 40, got);
	expect_pattern(got, 1, 0, 40, "new tensor");

	tensor_release(fd, sid, t2);
	tensor_release(fd, sid, part);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	/* closing a session frees what it still holds */
	close_session(fd2, sid2);
	close_session(fd, sid);
	free(data);
	free(got);
	free(upd);
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* 10b. Reads of 64 KiB and more (where TCP connections get zero-copy
 * sends, which AF_UNIX refuses) arrive whole, and the connection stays. */
static void test_large_read(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4 * MiB);
	const uint64_t lens[] = { 64 * KiB - 1, 64 * KiB, MiB, 4 * MiB };
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "large");
	uint8_t *data = pattern_buf(9, 4 * MiB);
	uint64_t t = create_data(fd, sid, &d, data, 4 * MiB);

	for (size_t i = 0; i < ARRAY_LEN(lens); i++) {
		struct djinn_tensor_io io = { .handle = t, .len = lens[i] };
		struct dj_resp r;
		int ret = dj_call(fd, DJINN_OP_TENSOR_READ, sid, &io,
				  sizeof(io), &r);

		assert_int_equal(ret, 1);
		if (r.error)
			fail_msg("read of %llu: error %d \"%s\"",
				 (unsigned long long)io.len, r.error, r.msg);
		assert_int_equal(r.len, io.len);
		expect_pattern(r.data, 9, 0, io.len, "large read");
		dj_resp_free(&r);
		hello(fd);
	}
	free(data);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* Append a frame to @buf at *@n. */
static void h_put(uint8_t *buf, size_t *n, uint16_t op, uint64_t id,
		  uint64_t sid, const void *payload, size_t len)
{
	struct djinn_hdr h = dj_hdr(op, id, sid, len);

	memcpy(buf + *n, &h, sizeof(h));
	*n += sizeof(h);
	if (len)
		memcpy(buf + *n, payload, len);
	*n += len;
}

/*
 * 10f. Many reads at once: several connections each send a run of
 * TENSOR_READs of many sizes (a byte to past the largest staging buffer)
 * in one write and read the answers only after a pause, so replies wait
 * unsent while later reads are prepared. Under --cpu-device-only each
 * is staged in a buffer of the memory executor's pool: one still being
 * sent must not be handed to another read. Every answer has its own
 * range's bytes.
 */
static void test_many_reads(void **state)
{
	struct fx *fx = *state;
	enum { CONNS = 4, READS = 21 };
	const uint64_t bytes = 8 * MiB;
	/* the last is over the largest pooled buffer */
	const uint64_t lens[] = { 1,	  4 * KiB, 64 * KiB - 1,  64 * KiB + 1,
				  300000, MiB,	   4 * MiB + 4097 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 8 * MiB);
	int fd[CONNS];
	uint64_t sid[CONNS], t[CONNS];
	uint64_t off[CONNS][READS], len[CONNS][READS];

	for (int c = 0; c < CONNS; c++) {
		uint8_t *data = pattern_buf(20 + (uint64_t)c, bytes);
		uint8_t frames[READS * (sizeof(struct djinn_hdr) +
					sizeof(struct djinn_tensor_io))];
		size_t n = 0;

		fd[c] = xconnect(fx->d.sock);
		sid[c] = open_session(fd[c], "reads");
		t[c] = create_data(fd[c], sid[c], &d, data, bytes);
		free(data);
		for (int i = 0; i < READS; i++) {
			struct djinn_tensor_io io = { .handle = t[c] };

			len[c][i] = lens[(i + c) % ARRAY_LEN(lens)];
			off[c][i] = ((uint64_t)i * 1234577 + (uint64_t)c * 77) %
				    (bytes - len[c][i] + 1);
			io.offset = off[c][i];
			io.len = len[c][i];
			h_put(frames, &n, DJINN_OP_TENSOR_READ,
			      1000 + (uint64_t)i, sid[c], &io, sizeof(io));
		}
		assert_int_equal(dj_write(fd[c], frames, n, 5000), 0);
	}
	/* the answers pile up unread meanwhile */
	usleep(200 * 1000);
	for (int c = 0; c < CONNS; c++) {
		bool seen[READS] = { false };

		/* answers may come in any order (protocol.rst) */
		for (int k = 0; k < READS; k++) {
			struct dj_resp r;
			char what[64];
			int i;

			assert_int_equal(dj_recv(fd[c], &r, DJ_TIMEOUT_MS), 1);
			i = (int)(r.hdr.request_id - 1000);
			if (r.hdr.request_id < 1000 || i >= READS || seen[i])
				fail_msg("conn %d: an answer to request %llu",
					 c,
					 (unsigned long long)r.hdr.request_id);
			seen[i] = true;
			if (r.error)
				fail_msg("conn %d read %d: error %d \"%s\"", c,
					 i, r.error, r.msg);
			assert_int_equal(r.len, len[c][i]);
			snprintf(what, sizeof(what),
				 "conn %d read %d (%llu bytes at %llu)", c, i,
				 (unsigned long long)len[c][i],
				 (unsigned long long)off[c][i]);
			expect_pattern(r.data, 20 + (uint64_t)c, off[c][i],
				       len[c][i], what);
			dj_resp_free(&r);
		}
	}
	for (int c = 0; c < CONNS; c++) {
		close_session(fd[c], sid[c]);
		close(fd[c]);
	}
	check_health(fx, 0);
}

/* 10d. Memory for transfers is prepared off the I/O thread: requests
 * pipelined behind a TENSOR_CREATE wait their turn and are answered in
 * order; a tensor swapped out under pressure is read and written through
 * the same path, with its bytes intact. */
static void test_mem_prepared(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc big = DESC(DJINN_DTYPE_U8, 24 * MiB);
	struct djinn_tensor_desc small = F32(256);
	int a = xconnect(fx->d.sock), b = xconnect(fx->d.sock);
	uint64_t sa = open_session(a, "swapped"), sb = open_session(b, "hog");
	uint8_t *data = pattern_buf(11, 24 * MiB), *back = xmalloc(4 * MiB);
	struct djinn_tensor_io io = { .len = 16 };
	struct djinn_admin_vmu v;
	struct dj_resp r;
	uint64_t ta = 0, tb, tb2, w;
	size_t plen, n = 0;
	uint8_t *p, *frames;

	/* CREATE (all its data), HELLO, CREATE, READ of the first, in one
	 * write. */
	p = create_payload(&big, DJINN_SEG_DATA, NULL, data, 24 * MiB, &plen);
	frames = xmalloc(plen + 4096);
	h_put(frames, &n, DJINN_OP_TENSOR_CREATE, 1, sa, p, plen);
	free(p);
	h_put(frames, &n, DJINN_OP_HELLO, 2, 0, NULL, 0);
	p = create_payload(&small, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h_put(frames, &n, DJINN_OP_TENSOR_CREATE, 3, sa, p, plen);
	free(p);
	assert_int_equal(dj_write(a, frames, n, 5000), 0);
	free(frames);
	for (uint64_t id = 1; id <= 3; id++) {
		assert_int_equal(dj_recv(a, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id);
		if (r.error)
			fail_msg("request %llu: error %d \"%s\"",
				 (unsigned long long)id, r.error, r.msg);
		if (id == 1)
			memcpy(&ta, r.data, sizeof(ta));
		dj_resp_free(&r);
	}
	tensor_read(a, sa, ta, 20 * MiB, 4 * MiB, back);
	expect_pattern(back, 11, 20 * MiB, 4 * MiB, "pipelined create");

	/* Another session's two 24 MiB tensors do not fit beside it in 64
	 * MiB: the first session's is swapped out to make room. */
	tb = create_data(b, sb, &big, NULL, 0);
	tb2 = create_data(b, sb, &big, NULL, 0);
	v = vmu_now(fx);
	if (!v.swapped_now)
		fail_msg("nothing was swapped out (free %llu)",
			 (unsigned long long)v.free);
	tensor_release(b, sb, tb);
	/* Back through the memory executor: the bytes are the same. */
	io.handle = ta;
	io.offset = 24 * MiB - 16;
	call_ok(a, DJINN_OP_TENSOR_READ, sa, &io, sizeof(io), &r, 16);
	expect_pattern(r.data, 11, 24 * MiB - 16, 16, "read after swap");
	dj_resp_free(&r);
	assert_true(vmu_now(fx).swap_ins > v.swap_ins);
	/* And a write to it while swapped out again. */
	tensor_release(b, sb, tb2);
	tb = create_data(b, sb, &big, NULL, 0);
	tb2 = create_data(b, sb, &big, NULL, 0);
	v = vmu_now(fx);
	assert_true(v.swapped_now > 0);
	tensor_write(a, sa, ta, 0, data + MiB, MiB);
	assert_true(vmu_now(fx).swap_ins > v.swap_ins);
	tensor_read(a, sa, ta, 0, MiB, back);
	expect_pattern(back, 11, MiB, MiB, "write after swap");
	w = 0;
	tensor_read(a, sa, ta, MiB, 8, &w);
	expect_pattern((uint8_t *)&w, 11, MiB, 8, "untouched after swap");

	free(data);
	free(back);
	close_session(a, sa);
	close_session(b, sb);
	close(a);
	close(b);
	check_health(fx, 0);
}

/* 10e. A peer that shuts down its side behind a paused upload: what it
 * sent before is answered, then the connection closes. */
static void test_half_close(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4 * MiB);
	int fd = xconnect(fx->d.sock);
	struct djinn_session_resp sr;
	uint64_t sid = open_at(__LINE__, fd, "half-close", 4, 0, &sr);
	uint8_t *data = pattern_buf(12, 4 * MiB), *frames, *p;
	size_t plen, n = 0;
	struct dj_resp r;

	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, 4 * MiB, &plen);
	frames = xmalloc(plen + 256);
	h_put(frames, &n, DJINN_OP_TENSOR_CREATE, 10, sid, p, plen);
	h_put(frames, &n, DJINN_OP_HELLO, 11, 0, NULL, 0);
	free(p);
	assert_int_equal(dj_write(fd, frames, n, 5000), 0);
	shutdown(fd, SHUT_WR);
	for (uint64_t id = 10; id <= 11; id++) {
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, id);
		if (r.error)
			fail_msg("request %llu: error %d \"%s\"",
				 (unsigned long long)id, r.error, r.msg);
		dj_resp_free(&r);
	}
	expect_eof(fd);
	close(fd);
	free(frames);
	free(data);
	/* The session outlives its connection; close it from another. */
	fd = xconnect(fx->d.sock);
	attach(fd, sid, sr.token);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 10c. Bad descs and create requests: -EINVAL (-E2BIG past the limits);
 * a tensor bigger than the device: -ENOMEM with the need. */
static void test_tensor_bad(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "bad");
	struct djinn_tensor_desc d;
	uint8_t data[64] = { 0 }, fp[DJINN_FP_LEN] = { 1 };
	struct dj_resp r;

	d = F32(4);
	d.dtype = 0;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d.dtype = DJINN_DTYPE_U8 + 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4);
	d.ndim = DJINN_MAX_DIMS + 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4, 4);
	d.dims[2] = 1; /* past ndim */
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4);
	d.__reserved[5] = 1;
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* an empty tensor: at least one element */
	d = F32(0);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	d = F32(4, 0, 4);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* unknown segment, unknown flags */
	d = F32(4);
	create_try_at(__LINE__, fd, sid, &d, 2, NULL, NULL, 0, &r);
	expect_error(&r, -EINVAL, "segment");
	dj_resp_free(&r);
	{
		struct djinn_tensor_create c = { .desc = d, .flags = 1 };

		call_err(fd, DJINN_OP_TENSOR_CREATE, sid, &c, sizeof(c),
			 -EINVAL, "flags");
	}
	/* more data than the tensor holds */
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, data, 17, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* a fingerprint on data */
	create_try_at(__LINE__, fd, sid, &d, 0, fp, data, 16, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);
	/* bytes past 2^63: a limit */
	d = F32(1ull << 40, 1ull << 40);
	create_try_at(__LINE__, fd, sid, &d, 0, NULL, NULL, 0, &r);
	expect_error(&r, -E2BIG, NULL);
	dj_resp_free(&r);
	/* the same requests on a session that does not exist: no crash */
	create_try_at(__LINE__, fd, sid + 99, &d, 0, NULL, NULL, 0, &r);
	assert_true(r.error == -ENOENT || r.error == -E2BIG);
	dj_resp_free(&r);

	assert_int_equal(session_entry(fx, sid).tensors, 0);
	check_health_at(__LINE__, fx, 1, &fx->base);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 10d. A tensor bigger than the device: -ENOMEM, the message giving the
 * need; nothing committed. Also with its bytes following (skipped). */
static void test_tensor_too_big(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "huge"), fd2_sid;
	struct djinn_tensor_desc d = F32(256 * MiB); /* 1 GiB */
	uint8_t fd2_token[16];
	struct dj_resp r;

	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_DATA, NULL, NULL, 0, &r);
	expect_error(&r, -ENOMEM, "need");
	dj_resp_free(&r);
	check_health_at(__LINE__, fx, 1, &fx->base);

	/* Admission refused: 48 MiB pinned by an upload in progress on
	 * another connection, 32 MiB asked. */
	{
		struct djinn_tensor_desc a = F32(12 * MiB), b = F32(8 * MiB);
		int up = xconnect(fx->d.sock);
		struct djinn_session_resp s2;
		uint64_t sid2 = open_at(__LINE__, up, "uploader", 4, 0, &s2);
		struct djinn_hdr h;
		size_t plen;
		uint8_t *p = create_payload(&a, DJINN_SEG_DATA, NULL, NULL, 0,
					    &plen);

		h = dj_hdr(DJINN_OP_TENSOR_CREATE, 1, sid2,
			   plen + desc_bytes(&a));
		assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
		free(p);
		wait_charged(fx, sid2, desc_bytes(&a), 5000);
		create_try_at(__LINE__, fd, sid, &b, DJINN_SEG_DATA, NULL, NULL,
			      0, &r);
		expect_error(&r, -ENOMEM, "need");
		dj_resp_free(&r);
		/* the upload is abandoned: the memory comes back */
		close(up);
		wait_charged(fx, sid2, 0, 5000);
		fd2_sid = sid2;
		memcpy(fd2_token, s2.token, 16);
		/* and now it fits */
		tensor_release(fd, sid, create_data(fd, sid, &b, NULL, 0));
	}
	/* A text upload bigger than the device, its bytes following. */
	{
		struct djinn_tensor_desc t = DESC(DJINN_DTYPE_U8, 65 * MiB);
		uint8_t fp[DJINN_FP_LEN] = { 7 };
		size_t plen;
		uint8_t *p =
			create_payload(&t, DJINN_SEG_TEXT, fp, NULL, 0, &plen);
		struct djinn_hdr h =
			dj_hdr(DJINN_OP_TENSOR_CREATE, 5, sid, plen + 65 * MiB);

		assert_int_equal(dj_send_raw(fd, &h, p, plen), 0);
		free(p);
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, 5);
		expect_error(&r, -ENOMEM, "need");
		dj_resp_free(&r);
		/* the daemon closes rather than read 65 MiB: fine */
	}
	close(fd);
	fd = xconnect(fx->d.sock);
	wait_charged(fx, sid, 0, 5000);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	attach(fd, fd2_sid, fd2_token);
	close_session(fd, fd2_sid);
	assert_int_equal(dj_call(fd, DJINN_OP_HEARTBEAT, sid, NULL, 0, &r), 1);
	expect_error(&r, -EPERM, NULL);
	dj_resp_free(&r);
	{
		struct djinn_admin_kill k = { sid };

		call_void(fx->adm, DJINN_OP_ADMIN_KILL, 0, &k, sizeof(k));
	}
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Text */

/* 11. Lookup, upload with the right fingerprint, dedup across sessions,
 * wrong fingerprints, read-only. */
static void test_text(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(128, 64);
	const uint64_t bytes = desc_bytes(&d);
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "text-a"),
		 sid2 = open_session(fd2, "text-b");
	uint8_t *data = pattern_buf(11, bytes), *got = xmalloc(bytes);
	uint8_t fp[DJINN_FP_LEN], wrong[DJINN_FP_LEN];
	struct djinn_text_lookup l = { .desc = d };
	struct djinn_tensor_resp tr;
	uint64_t t, t2, t3;
	uint32_t flags;
	struct dj_resp r;

	sha256(data, bytes, fp);
	memcpy(l.fp, fp, sizeof(fp));

	/* Not there yet */
	call_err(fd, DJINN_OP_TEXT_LOOKUP, sid, &l, sizeof(l), -ENOENT, NULL);

	/* Wrong fingerprint: -EBADMSG, nothing kept */
	memcpy(wrong, fp, sizeof(fp));
	wrong[0] ^= 0x80;
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, wrong, data, bytes,
		      &r);
	expect_error(&r, -EBADMSG, NULL);
	dj_resp_free(&r);
	/* bytes one off, the right fingerprint */
	data[bytes / 2] ^= 1;
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data, bytes,
		      &r);
	expect_error(&r, -EBADMSG, NULL);
	dj_resp_free(&r);
	data[bytes / 2] ^= 1;
	call_err(fd, DJINN_OP_TEXT_LOOKUP, sid, &l, sizeof(l), -ENOENT, NULL);
	call_err(fd, DJINN_OP_TEXT_LOOKUP, sid,
		 &(struct djinn_text_lookup){ .desc = d, .fp = { 0xba } },
		 sizeof(l), -ENOENT, NULL);
	assert_int_equal(vmu_now(fx).seg[0].used, fx->base.seg[0].used);
	/* text comes whole */
	create_try_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data,
		      bytes - 4, &r);
	expect_error(&r, -EINVAL, NULL);
	dj_resp_free(&r);

	/* The right one: stored, not a dedup */
	t = create_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, fp, data, bytes,
		      &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	assert_true(vmu_now(fx).seg[0].used >= bytes);
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text");

	/* A second session finds it, viewed as another shape of the same
	 * size, and reads the same bytes. */
	l.desc = DESC(DJINN_DTYPE_U8, bytes);
	call_ok(fd2, DJINN_OP_TEXT_LOOKUP, sid2, &l, sizeof(l), &r, sizeof(tr));
	memcpy(&tr, r.data, sizeof(tr));
	dj_resp_free(&r);
	assert_true(tr.flags & DJINN_TENSOR_DEDUP);
	assert_memory_equal(&tr.desc, &l.desc, sizeof(l.desc));
	t2 = tr.handle;
	memset(got, 0, bytes);
	tensor_read(fd2, sid2, t2, 100, bytes - 100, got);
	expect_pattern(got, 11, 100, bytes - 100, "text from session 2");
	/* viewed as a different size: refused */
	l.desc = F32(bytes);
	call_err(fd2, DJINN_OP_TEXT_LOOKUP, sid2, &l, sizeof(l), -EINVAL, NULL);
	/* uploading it again: a dedup, no new bytes committed */
	{
		uint64_t used = vmu_now(fx).seg[0].used;

		t3 = create_at(__LINE__, fd2, sid2, &d, DJINN_SEG_TEXT, fp,
			       data, bytes, &flags);
		assert_true(flags & DJINN_TENSOR_DEDUP);
		assert_int_equal(vmu_now(fx).seg[0].used, used);
	}
	assert_int_equal(session_entry(fx, sid2).text_refs, 2);

	/* Text is read-only: -EPERM; and not another session's. */
	write_at(__LINE__, fd, sid, t, 0, data, 16, -EPERM, NULL);
	write_at(__LINE__, fd2, sid2, t2, 0, data, 16, -EPERM, NULL);
	{
		struct djinn_tensor_io io = { .handle = t, .len = 4 };

		call_err(fd2, DJINN_OP_TENSOR_READ, sid2, &io, sizeof(io),
			 -ENOENT, NULL);
	}
	tensor_read(fd, sid, t, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text after writes");

	/* Two sessions upload the same new text at once, interleaved:
	 * both get it, stored once. */
	{
		struct djinn_tensor_desc d2 = DESC(DJINN_DTYPE_U8, 3 * 65536);
		uint8_t *b = pattern_buf(12, desc_bytes(&d2)),
			fp2[DJINN_FP_LEN];
		uint64_t used = vmu_now(fx).seg[0].used, h[2];
		const int fds[2] = { fd, fd2 };
		const uint64_t sids[2] = { sid, sid2 };
		uint32_t fl[2];
		size_t plen;
		uint8_t *p;

		sha256(b, desc_bytes(&d2), fp2);
		p = create_payload(&d2, DJINN_SEG_TEXT, fp2, NULL, 0, &plen);
		for (int i = 0; i < 2; i++) {
			struct djinn_hdr hh = dj_hdr(DJINN_OP_TENSOR_CREATE,
						     50 + i, sids[i],
						     plen + desc_bytes(&d2));

			assert_int_equal(dj_send_raw(fds[i], &hh, p, plen), 0);
		}
		for (uint64_t off = 0; off < desc_bytes(&d2); off += 65536)
			for (int i = 0; i < 2; i++)
				assert_int_equal(dj_write(fds[i], b + off,
							  65536, 5000),
						 0);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(dj_recv(fds[i], &r, DJ_TIMEOUT_MS), 1);
			assert_int_equal(r.hdr.request_id, 50 + i);
			if (r.error)
				fail_msg("concurrent text upload %d: %d \"%s\"",
					 i, r.error, r.msg);
			memcpy(&tr, r.data, sizeof(tr));
			dj_resp_free(&r);
			h[i] = tr.handle;
			fl[i] = tr.flags;
		}
		assert_int_equal(vmu_now(fx).seg[0].used,
				 used + granules(fx, desc_bytes(&d2)));
		assert_true(!(fl[0] & DJINN_TENSOR_DEDUP) ||
			    !(fl[1] & DJINN_TENSOR_DEDUP));
		for (int i = 0; i < 2; i++) {
			uint8_t part[4096];

			tensor_read(fds[i], sids[i], h[i], 65536 + 100,
				    sizeof(part), part);
			expect_pattern(part, 12, 65536 + 100, sizeof(part),
				       "text uploaded twice");
			tensor_release(fds[i], sids[i], h[i]);
		}
		free(p);
		free(b);
	}
	/* a lookup with a bad desc */
	l.desc = F32(4);
	l.desc.ndim = 9;
	call_err(fd, DJINN_OP_TEXT_LOOKUP, sid, &l, sizeof(l), -EINVAL, NULL);

	/* The first session lets go: the second still reads it. */
	tensor_release(fd, sid, t);
	close_session(fd, sid);
	tensor_read(fd2, sid2, t3, 0, bytes, got);
	expect_pattern(got, 11, 0, bytes, "text after the owner left");
	tensor_release(fd2, sid2, t2);
	tensor_release(fd2, sid2, t3);
	assert_int_equal(session_entry(fx, sid2).text_refs, 0);
	close_session(fd2, sid2);
	free(data);
	free(got);
	close(fd);
	close(fd2);
	/* Unreferenced text may stay cached, reclaimable: not a leak. */
	{
		struct djinn_admin_vmu v = vmu_now(fx);
		char why[256];

		assert_int_equal(v.seg[1].used, fx->base.seg[1].used);
		v.committed -= v.seg[0].used;
		v.seg[0].used = fx->base.seg[0].used;
		if (vmu_diff(&fx->base, &v, why, sizeof(why)))
			fail_msg("after text: %s", why);
		fx->base = vmu_now(fx);
	}
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Graphs */

/* An f32 tensor of shape @d with random values; the values in *@vals. */
static uint64_t upload_rand(int fd, uint64_t sid,
			    const struct djinn_tensor_desc *d, uint64_t seed,
			    float scale, float **vals)
{
	size_t n = desc_bytes(d) / 4;
	float *f = rand_floats(seed, n, scale);
	uint64_t h = create_data(fd, sid, d, f, n * 4);

	if (vals)
		*vals = f;
	else
		free(f);
	return h;
}

static float *read_f32(int fd, uint64_t sid, const struct djinn_tensor_resp *t)
{
	uint64_t bytes = desc_bytes(&t->desc);
	float *f = xmalloc(bytes);

	assert_int_equal(t->desc.dtype, DJINN_DTYPE_F32);
	tensor_read(fd, sid, t->handle, 0, bytes, f);
	return f;
}

/* 12a. A small MLP, matmul + add + gelu, against a reference. */
static void test_graph_mlp(void **state)
{
	struct fx *fx = *state;
	enum { M = 4, K = 16, H = 32, N = 8 };
	struct djinn_tensor_desc dx = F32(M, K), dw1 = F32(K, H), db1 = F32(H),
				 dw2 = F32(H, N), db2 = F32(N);
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "mlp");
	float *x, *w1, *b1, *w2, *b2, *got;
	double *rx, *rw1, *rb1, *rw2, *rb2, hid[M * H], act[M * H], out[M * N];
	struct djinn_tensor_resp res[2];
	struct gb g = { 0 };
	uint32_t vx, vw1, vb1, vw2, vb2, v;

	vx = gb_input(&g, upload_rand(fd, sid, &dx, 1, 1.0f, &x));
	vw1 = gb_input(&g, upload_rand(fd, sid, &dw1, 2, 0.5f, &w1));
	vb1 = gb_input(&g, upload_rand(fd, sid, &db1, 3, 0.5f, &b1));
	vw2 = gb_input(&g, upload_rand(fd, sid, &dw2, 4, 0.5f, &w2));
	vb2 = gb_input(&g, upload_rand(fd, sid, &db2, 5, 0.5f, &b2));
	v = gb_op(&g, DJINN_GOP_MATMUL, 2, vx, vw1);
	v = gb_op(&g, DJINN_GOP_ADD, 2, v, vb1);
	v = gb_op(&g, DJINN_GOP_GELU, 1, v);
	gb_output(&g, v);
	gb_node(&g, v)->residency = DJINN_RES_OUTPUT;
	v = gb_op(&g, DJINN_GOP_MATMUL, 2, v, vw2);
	gb_node(&g, v)->phase = DJINN_PHASE_PREFILL;
	v = gb_op(&g, DJINN_GOP_ADD, 2, v, vb2);
	gb_output(&g, v);
	graph_run(fd, sid, &g, res);

	/* the reference */
	rx = to_double(x, M * K);
	rw1 = to_double(w1, K * H);
	rb1 = to_double(b1, H);
	rw2 = to_double(w2, H * N);
	rb2 = to_double(b2, N);
	ref_matmul(rx, rw1, hid, M, K, H);
	ref_add_row(hid, rb1, M, H);
	for (int i = 0; i < M * H; i++)
		act[i] = ref_gelu(hid[i]);
	ref_matmul(act, rw2, out, M, H, N);
	ref_add_row(out, rb2, M, N);

	{
		struct djinn_tensor_desc d0 = F32(M, H), d1 = F32(M, N);

		assert_memory_equal(&res[0].desc, &d0, sizeof(d0));
		assert_memory_equal(&res[1].desc, &d1, sizeof(d1));
	}
	got = read_f32(fd, sid, &res[0]);
	expect_close(got, act, M * H, 1e-4);
	free(got);
	got = read_f32(fd, sid, &res[1]);
	expect_close(got, out, M * N, 1e-4);
	free(got);
	/* part of a result: one row */
	{
		float row[N];

		tensor_read(fd, sid, res[1].handle, 2 * N * 4, sizeof(row),
			    row);
		expect_close(row, out + 2 * N, N, 1e-4);
	}
	/* the outputs are the session's: released like any tensor */
	assert_int_equal(session_entry(fx, sid).tensors, 7);
	tensor_release(fd, sid, res[0].handle);
	call_err(fd, DJINN_OP_TENSOR_RELEASE, sid, &res[0].handle, 8, -ENOENT,
		 NULL);
	assert_true(stats_now(fx).graphs_run >= 1);
	assert_true(vmu_now(fx).admits > fx->base.admits);
	close_session(fd, sid);
	free(x), free(w1), free(b1), free(w2), free(b2);
	free(rx), free(rw1), free(rb1), free(rw2), free(rb2);
	close(fd);
	check_health(fx, 0);
}

/* One GPT-2 block (pre-LN attention and MLP) as one graph. */
static void test_graph_gpt2_block(void **state)
{
	struct fx *fx = *state;
	enum { T = 8, C = 32, NH = 4, D = C / NH, F = 4 * C };
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "gpt2");
	struct djinn_tensor_desc dx = F32(T, C), dc = F32(C),
				 dqkv = F32(C, 3 * C), dbqkv = F32(3 * C),
				 dwo = F32(C, C), dfc = F32(C, F),
				 dbfc = F32(F), dpr = F32(F, C);
	float *f[13];
	double *r[13];
	struct djinn_tensor_resp res;
	struct gb g = { 0 };
	uint32_t in[13], h, qkv, q, k, v, att, a, x1, m;
	const struct djinn_tensor_desc *descs[13] = {
		&dx, &dc, &dc,	&dqkv, &dbqkv, &dwo, &dc,
		&dc, &dc, &dfc, &dbfc, &dpr,   &dc,
	};
	/* x, ln1 g b, w_qkv b_qkv, w_o b_o, ln2 g b, w_fc b_fc, w_pr b_pr */
	const float scale[13] = { 1,	0.2f, 0.2f, 0.3f, 0.1f, 0.3f, 0.1f,
				  0.2f, 0.2f, 0.3f, 0.1f, 0.2f, 0.1f };
	uint32_t *slices[3] = { &q, &k, &v };
	float *got;

	for (int i = 0; i < 13; i++) {
		in[i] = gb_input(&g, upload_rand(fd, sid, descs[i], 100 + i,
						 scale[i], &f[i]));
		r[i] = to_double(f[i], desc_bytes(descs[i]) / 4);
	}
	/* gammas around 1 */
	for (int i = 0; i < C; i++)
		r[1][i] += 1, r[7][i] += 1;
	for (int i = 0; i < C; i++)
		f[1][i] += 1, f[7][i] += 1;
	tensor_write(fd, sid, g.in[1].id, 0, f[1], C * 4);
	tensor_write(fd, sid, g.in[7].id, 0, f[7], C * 4);

	h = gb_op(&g, DJINN_GOP_LAYERNORM, 3, in[0], in[1], in[2]);
	gb_node(&g, h)->params.scalar.eps = 1e-5f;
	qkv = gb_op(&g, DJINN_GOP_MATMUL, 2, h, in[3]);
	qkv = gb_op(&g, DJINN_GOP_ADD, 2, qkv, in[4]);
	for (int i = 0; i < 3; i++) {
		uint32_t s = gb_op(&g, DJINN_GOP_SLICE, 1, qkv);
		struct djinn_node *n = gb_node(&g, s);

		n->params.axis.axis = -1;
		n->params.axis.start = i * C;
		n->params.axis.end = (i + 1) * C;
		s = gb_op(&g, DJINN_GOP_RESHAPE, 1, s);
		n = gb_node(&g, s);
		n->params.shape.ndim = 4;
		memcpy(n->params.shape.dims, (int32_t[]){ 1, T, NH, D }, 16);
		s = gb_op(&g, DJINN_GOP_PERMUTE, 1, s);
		n = gb_node(&g, s);
		n->params.shape.ndim = 4;
		memcpy(n->params.shape.dims, (int32_t[]){ 0, 2, 1, 3 }, 16);
		*slices[i] = s;
	}
	att = gb_op(&g, DJINN_GOP_ATTENTION, 3, q, k, v);
	gb_node(&g, att)->params.attention.causal = 1;
	a = gb_op(&g, DJINN_GOP_PERMUTE, 1, att);
	gb_node(&g, a)->params.shape.ndim = 4;
	memcpy(gb_node(&g, a)->params.shape.dims, (int32_t[]){ 0, 2, 1, 3 },
	       16);
	a = gb_op(&g, DJINN_GOP_RESHAPE, 1, a);
	gb_node(&g, a)->params.shape.ndim = 2;
	memcpy(gb_node(&g, a)->params.shape.dims, (int32_t[]){ T, -1 }, 8);
	a = gb_op(&g, DJINN_GOP_MATMUL, 2, a, in[5]);
	a = gb_op(&g, DJINN_GOP_ADD, 2, a, in[6]);
	x1 = gb_op(&g, DJINN_GOP_ADD, 2, in[0], a);
	m = gb_op(&g, DJINN_GOP_LAYERNORM, 3, x1, in[7], in[8]);
	gb_node(&g, m)->params.scalar.eps = 1e-5f;
	m = gb_op(&g, DJINN_GOP_MATMUL, 2, m, in[9]);
	m = gb_op(&g, DJINN_GOP_ADD, 2, m, in[10]);
	m = gb_op(&g, DJINN_GOP_GELU, 1, m);
	m = gb_op(&g, DJINN_GOP_MATMUL, 2, m, in[11]);
	m = gb_op(&g, DJINN_GOP_ADD, 2, m, in[12]);
	m = gb_op(&g, DJINN_GOP_ADD, 2, x1, m);
	gb_output(&g, m);
	graph_run(fd, sid, &g, &res);
	assert_memory_equal(&res.desc, &dx, sizeof(dx));

	/* the reference */
	{
		double hh[T * C], qk[T * 3 * C], y[T * C], xx1[T * C],
			h2[T * C], fc[T * F], out[T * C];

		ref_layernorm(r[0], r[1], r[2], hh, T, C, 1e-5);
		ref_matmul(hh, r[3], qk, T, C, 3 * C);
		ref_add_row(qk, r[4], T, 3 * C);
		for (int hd = 0; hd < NH; hd++) {
			for (int t = 0; t < T; t++) {
				double w[T], mx = -INFINITY, sum = 0;

				for (int s = 0; s <= t; s++) {
					double dot = 0;

					for (int e = 0; e < D; e++)
						dot += qk[t * 3 * C + hd * D +
							  e] *
						       qk[s * 3 * C + C +
							  hd * D + e];
					w[s] = dot / sqrt(D);
					mx = w[s] > mx ? w[s] : mx;
				}
				for (int s = 0; s <= t; s++)
					sum += w[s] = exp(w[s] - mx);
				for (int e = 0; e < D; e++) {
					double acc = 0;

					for (int s = 0; s <= t; s++)
						acc += w[s] / sum *
						       qk[s * 3 * C + 2 * C +
							  hd * D + e];
					hh[t * C + hd * D + e] = acc;
				}
			}
		}
		ref_matmul(hh, r[5], y, T, C, C);
		ref_add_row(y, r[6], T, C);
		for (int i = 0; i < T * C; i++)
			xx1[i] = r[0][i] + y[i];
		ref_layernorm(xx1, r[7], r[8], h2, T, C, 1e-5);
		ref_matmul(h2, r[9], fc, T, C, F);
		ref_add_row(fc, r[10], T, F);
		for (int i = 0; i < T * F; i++)
			fc[i] = ref_gelu(fc[i]);
		ref_matmul(fc, r[11], out, T, F, C);
		ref_add_row(out, r[12], T, C);
		for (int i = 0; i < T * C; i++)
			out[i] += xx1[i];
		got = read_f32(fd, sid, &res);
		expect_close(got, out, T * C, 1e-3);
		free(got);
	}
	for (int i = 0; i < 13; i++)
		free(f[i]), free(r[i]);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 12b. A graph using an earlier graph's output by DJINN_REF_RESULT,
 * sent before the earlier one's response was read. */
static void test_graph_pipelined(void **state)
{
	struct fx *fx = *state;
	enum { M = 8, K = 8, N = 16 };
	struct djinn_tensor_desc dx = F32(M, K), dw = F32(K, N);
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "pipe");
	const uint64_t ids[3] = { 0xa0000001, 0x5000000b, 0x7 };
	struct djinn_tensor_resp res[3];
	bool seen[3] = { false };
	struct gb ga = { 0 }, gbb = { 0 }, gc = { 0 };
	float *x, *w, *got;
	double *rx, *rw, y[M * N], want[M * N];
	uint32_t v, a, b;

	v = gb_op(&ga, DJINN_GOP_MATMUL, 2,
		  gb_input(&ga, upload_rand(fd, sid, &dx, 21, 1, &x)),
		  gb_input(&ga, upload_rand(fd, sid, &dw, 22, 1, &w)));
	gb_output(&ga, v);
	/* b = 0.5 relu(a) */
	v = gb_op(&gbb, DJINN_GOP_RELU, 1, gb_result(&gbb, ids[0], 0));
	v = gb_op(&gbb, DJINN_GOP_SCALE, 1, v);
	gb_node(&gbb, v)->params.scalar.alpha = 0.5f;
	gb_output(&gbb, v);
	/* c = a + b */
	a = gb_result(&gc, ids[0], 0);
	b = gb_result(&gc, ids[1], 0);
	gb_output(&gc, gb_op(&gc, DJINN_GOP_ADD, 2, a, b));

	graph_send_at(__LINE__, fd, sid, ids[0], &ga);
	graph_send_at(__LINE__, fd, sid, ids[1], &gbb);
	graph_send_at(__LINE__, fd, sid, ids[2], &gc);
	for (int n = 0; n < 3; n++) {
		struct dj_resp r;
		int i;

		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.opcode, DJINN_OP_GRAPH_SUBMIT);
		for (i = 0; i < 3 && r.hdr.request_id != ids[i]; i++)
			;
		assert_true(i < 3 && !seen[i]);
		seen[i] = true;
		graph_resp_at(__LINE__, &r, 1, &res[i]);
		dj_resp_free(&r);
	}
	rx = to_double(x, M * K);
	rw = to_double(w, K * N);
	ref_matmul(rx, rw, y, M, K, N);
	for (int i = 0; i < M * N; i++)
		want[i] = y[i] + 0.5 * (y[i] > 0 ? y[i] : 0);
	got = read_f32(fd, sid, &res[2]);
	expect_close(got, want, M * N, 1e-4);
	free(got);
	got = read_f32(fd, sid, &res[0]);
	expect_close(got, y, M * N, 1e-4);
	free(got);

	/* A result referenced after its graph is done works too. */
	{
		struct gb gd = { 0 };
		struct djinn_tensor_resp rd;

		v = gb_op(&gd, DJINN_GOP_SUB, 2, gb_result(&gd, ids[2], 0),
			  gb_result(&gd, ids[1], 0));
		gb_output(&gd, v);
		graph_run(fd, sid, &gd, &rd);
		got = read_f32(fd, sid, &rd);
		expect_close(got, y, M * N, 1e-4);
		free(got);
	}
	/* The last 64 graphs of a session are remembered: the 65th back
	 * is -ENOENT. */
	{
		struct gb gs = { 0 }, gr = { 0 };
		struct djinn_tensor_resp o;

		gb_output(&gs, gb_op(&gs, DJINN_GOP_RELU, 1,
				     gb_input(&gs, res[0].handle)));
		for (uint64_t id = 1; id <= 64; id++) {
			struct dj_resp r;
			size_t len;
			uint8_t *p = gb_payload(&gs, &len);

			assert_int_equal(dj_send(fd, DJINN_OP_GRAPH_SUBMIT,
						 0x6400 + id, sid, p, len),
					 0);
			free(p);
			assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
			assert_int_equal(r.hdr.request_id, 0x6400 + id);
			graph_resp_at(__LINE__, &r, 1, &o);
			dj_resp_free(&r);
			if (id > 2) /* 0x6401 and 0x6402 keep theirs */
				tensor_release(fd, sid, o.handle);
		}
		/* 0x6402 is among the last 64 (with the new one) */
		gb_output(&gr, gb_op(&gr, DJINN_GOP_RELU, 1,
				     gb_result(&gr, 0x6402, 0)));
		graph_run(fd, sid, &gr, &o);
		tensor_release(fd, sid, o.handle);
		/* ... 0x6401 and ids[] are not */
		gr.in[0].id = 0x6401;
		graph_err(fd, sid, &gr, -ENOENT, "input 0");
		gr.in[0].id = ids[2];
		graph_err(fd, sid, &gr, -ENOENT, "input 0");
	}
	/* Unknown results: -ENOENT naming the input. */
	{
		struct gb ge = { 0 };

		gb_output(&ge, gb_op(&ge, DJINN_GOP_RELU, 1,
				     gb_result(&ge, 0xdead, 0)));
		graph_err(fd, sid, &ge, -ENOENT, "input 0");
		ge.in[0].id = ids[0];
		ge.in[0].index = 1; /* ga has one output */
		graph_err(fd, sid, &ge, -ENOENT, "input 0");
	}
	free(x), free(w), free(rx), free(rw);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 12c. Bad graphs: -EINVAL naming the node (cycles, forward and
 * dangling references, shape and dtype mismatches), -ENOENT for
 * missing inputs; nothing runs and nothing leaks. */
static void test_graph_bad(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc da = F32(4, 16), db = F32(32, 8),
				 di = DESC(DJINN_DTYPE_I32, 4, 16);
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "badgraph"),
		 sid2 = open_session(fd2, "other");
	uint64_t ta = create_data(fd, sid, &da, NULL, 0),
		 tb = create_data(fd, sid, &db, NULL, 0),
		 ti = create_data(fd, sid, &di, NULL, 0),
		 foreign = create_data(fd2, sid2, &da, NULL, 0);
	struct djinn_admin_vmu before = vmu_now(fx);
	struct djinn_admin_stats st0 = stats_now(fx);
	struct gb g;
	uint32_t a, b, v;

	/* a cycle: node 0 is its own input */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	v = gb_op(&g, DJINN_GOP_ADD, 2, a, g.nin + 0);
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");

	/* a forward reference: node 0 uses node 1 */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	v = gb_op(&g, DJINN_GOP_GELU, 1, g.nin + 1);
	gb_op(&g, DJINN_GOP_RELU, 1, a);
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "node 0 (gelu)");

	/* two nodes using each other */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	gb_op(&g, DJINN_GOP_ADD, 2, a, g.nin + 1);
	v = gb_op(&g, DJINN_GOP_ADD, 2, a, g.nin + 0);
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");

	/* a dangling input */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	v = gb_op(&g, DJINN_GOP_RELU, 1, a);
	v = gb_op(&g, DJINN_GOP_MUL, 2, v, 4000u);
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "node 1 (mul)");

	/* a shape mismatch: (4, 16) x (32, 8) */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	b = gb_input(&g, tb);
	v = gb_op(&g, DJINN_GOP_RELU, 1, a);
	v = gb_op(&g, DJINN_GOP_MATMUL, 2, v, b);
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "node 1 (matmul)");
	graph_err(fd, sid, &g, -EINVAL, "16");
	/* ... broadcasting that cannot be: (4, 16) + (32, 8) */
	g.node[1].op = DJINN_GOP_ADD;
	graph_err(fd, sid, &g, -EINVAL, "node 1 (add)");
	/* ... a dtype mismatch: f32 + i32 */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	b = gb_input(&g, ti);
	gb_output(&g, gb_op(&g, DJINN_GOP_ADD, 2, a, b));
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");
	/* an unknown op */
	g.node[0].op = 99;
	graph_err(fd, sid, &g, -EINVAL, "node 0");
	/* a wrong number of inputs */
	g.node[0].op = DJINN_GOP_GELU;
	graph_err(fd, sid, &g, -EINVAL, "node 0 (gelu)");
	/* a reserved byte, a phase for signals only, unused params */
	g.node[0].op = DJINN_GOP_ADD;
	g.node[0].__reserved[1] = 1;
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");
	g.node[0].__reserved[1] = 0;
	g.node[0].phase = DJINN_PHASE_IO_WAIT;
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");
	g.node[0].phase = 0;
	g.node[0].params.raw[39] = 1;
	graph_err(fd, sid, &g, -EINVAL, "node 0 (add)");
	g.node[0].params.raw[39] = 0;
	/* an output naming no node, or one twice */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, ta);
	v = gb_op(&g, DJINN_GOP_RELU, 1, a);
	gb_output(&g, v);
	g.out[0] = 5;
	graph_err(fd, sid, &g, -EINVAL, "output 0");
	g.out[0] = 0;
	gb_output(&g, v);
	graph_err(fd, sid, &g, -EINVAL, "output 1");

	/* inputs that are not this session's tensors: -ENOENT */
	memset(&g, 0, sizeof(g));
	a = gb_input(&g, foreign);
	gb_output(&g, gb_op(&g, DJINN_GOP_RELU, 1, a));
	graph_err(fd, sid, &g, -ENOENT, "input 0");
	g.in[0].id = 0x1234567;
	graph_err(fd, sid, &g, -ENOENT, "input 0");
	g.in[0].id = ta;
	g.in[0].kind = 9;
	graph_err(fd, sid, &g, -EINVAL, "input 0");
	g.in[0].kind = DJINN_REF_HANDLE;
	g.in[0].__reserved = 1;
	graph_err(fd, sid, &g, -EINVAL, "input 0");
	g.in[0].__reserved = 0;
	/* the same graph on a session not attached here, or no session */
	graph_err(fd2, sid, &g, -EPERM, NULL);
	graph_err(fd, sid + 77, &g, -ENOENT, NULL);

	/* framing of the payload: lengths, counts, reserved, padding */
	{
		size_t len;
		uint8_t *p = gb_payload(&g, &len);
		struct djinn_graph *gh = (struct djinn_graph *)p;

		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len - 8, -EINVAL,
			 NULL);
		gh->__reserved = 1;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -EINVAL, NULL);
		gh->__reserved = 0;
		gh->flags = 1;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -EINVAL, NULL);
		gh->flags = 0;
		p[len - 1] = 1; /* the outputs' padding */
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -EINVAL, NULL);
		p[len - 1] = 0;
		gh->nr_nodes = 0;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -EINVAL, NULL);
		gh->nr_nodes = 1;
		gh->nr_outputs = 0;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -EINVAL, NULL);
		gh->nr_outputs = 1;
		gh->nr_nodes = DJINN_MAX_NODES + 1;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -E2BIG, NULL);
		gh->nr_nodes = 1;
		gh->nr_outputs = DJINN_MAX_GRAPH_OUTPUTS + 1;
		call_err(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, -E2BIG, NULL);
		gh->nr_outputs = 1;
		/* and the good one still runs */
		{
			struct dj_resp r;

			call_ok(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, &r,
				sizeof(struct djinn_graph_resp) +
					sizeof(struct djinn_tensor_resp));
			memcpy(&v, r.data, 4);
			assert_int_equal(v, 1);
			dj_resp_free(&r);
		}
		free(p);
	}
	/* no refused graph ran or left anything behind */
	assert_int_equal(stats_now(fx).graphs_run, st0.graphs_run + 1);
	assert_int_equal(session_entry(fx, sid).tensors, 4);
	{
		struct djinn_admin_vmu v2 = vmu_now(fx);

		assert_int_equal(v2.seg[1].entries, before.seg[1].entries + 1);
	}
	close_session(fd, sid);
	close_session(fd2, sid2);
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* 12d. A session ending with graphs queued: those not yet run are
 * answered -ECANCELED; a connection closed with graphs in flight; nothing
 * leaks either way. */
static void test_graph_cancel(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1024, 1024);
	int fd = xconnect(fx->d.sock);
	struct djinn_session_resp s;
	uint64_t sid = open_at(__LINE__, fd, "cancel", 4, 0, &s);
	uint64_t t = create_data(fd, sid, &d, NULL, 0);
	bool answered[4] = { false };
	struct gb g = { 0 };
	int got;

	/* 4 GFLOP per graph: the first still runs when the close comes */
	gb_output(&g, gb_op(&g, DJINN_GOP_MATMUL, 2, gb_input(&g, t),
			    gb_input(&g, t)));
	graph_send_at(__LINE__, fd, sid, 1, &g);
	graph_send_at(__LINE__, fd, sid, 2, &g);
	graph_send_at(__LINE__, fd, sid, 3, &g);
	assert_int_equal(dj_send(fd, DJINN_OP_SESSION_CLOSE, 4, sid, NULL, 0),
			 0);
	for (got = 0; got < 4; got++) {
		struct dj_resp r;

		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_true(r.hdr.request_id >= 1 && r.hdr.request_id <= 4);
		assert_false(answered[r.hdr.request_id - 1]);
		answered[r.hdr.request_id - 1] = true;
		if (r.hdr.request_id == 4) {
			assert_int_equal(r.hdr.opcode, DJINN_OP_SESSION_CLOSE);
			assert_int_equal(r.error, 0);
		} else if (r.hdr.request_id == 3) {
			/* certainly still queued at the close */
			expect_error(&r, -ECANCELED, NULL);
		} else if (r.error) {
			expect_error(&r, -ECANCELED, NULL);
		}
		dj_resp_free(&r);
	}
	call_err(fd, DJINN_OP_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
	check_health_at(__LINE__, fx, 0, &fx->base);

	/* A connection closed with graphs in flight: they run, their
	 * outputs are the session's, freed with it. */
	sid = open_at(__LINE__, fd, "orphan", 4, 0, &s);
	t = create_data(fd, sid, &d, NULL, 0);
	g.in[0].id = g.in[1].id = t;
	for (uint64_t id = 1; id <= 3; id++)
		graph_send_at(__LINE__, fd, sid, id, &g);
	close(fd);
	fd = xconnect(fx->d.sock);
	attach(fd, sid, s.token);
	{
		int64_t deadline = dj_now_ms() + 10000;

		while (session_entry(fx, sid).tensors < 4 &&
		       dj_now_ms() < deadline)
			usleep(5000);
		assert_int_equal(session_entry(fx, sid).tensors, 4);
		assert_int_equal(stats_now(fx).queue_depth, 0);
	}
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 12e. Graphs that cannot fit: -ENOMEM with the need; nothing kept. */
static void test_graph_too_big(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc dc = F32(4096, 1), dr = F32(1, 8192),
				 dr2 = F32(1, 2048);
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "toobig");
	uint64_t tc = create_data(fd, sid, &dc, NULL, 0),
		 tr = create_data(fd, sid, &dr, NULL, 0),
		 tr2 = create_data(fd, sid, &dr2, NULL, 0);
	struct djinn_admin_vmu before = vmu_now(fx);
	struct gb g = { 0 };
	struct dj_resp r;
	size_t len;
	uint8_t *p;
	uint32_t c, v;

	/* One output bigger than the device: (4096, 1) x (1, 8192), 128
	 * MiB. */
	c = gb_input(&g, tc);
	v = gb_op(&g, DJINN_GOP_MATMUL, 2, c, gb_input(&g, tr));
	gb_output(&g, v);
	p = gb_payload(&g, &len);
	assert_int_equal(dj_call(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, &r),
			 1);
	free(p);
	expect_error(&r, -ENOMEM, "need");
	dj_resp_free(&r);

	/* Outputs that fit one by one but not together: 3 x 32 MiB. */
	memset(&g, 0, sizeof(g));
	c = gb_input(&g, tc);
	v = gb_input(&g, tr2);
	for (int i = 0; i < 3; i++) {
		uint32_t o = gb_op(&g, DJINN_GOP_MATMUL, 2, c, v);

		gb_output(&g, o);
	}
	graph_err(fd, sid, &g, -ENOMEM, "need");
	assert_true(vmu_now(fx).admit_refusals >= before.admit_refusals + 2);

	/* An intermediate too big for the stack, with a small output. */
	memset(&g, 0, sizeof(g));
	c = gb_input(&g, tc);
	v = gb_op(&g, DJINN_GOP_MATMUL, 2, c, gb_input(&g, tr));
	v = gb_op(&g, DJINN_GOP_SLICE, 1, v);
	gb_node(&g, v)->params.axis.axis = 0;
	gb_node(&g, v)->params.axis.end = 1;
	gb_output(&g, v);
	p = gb_payload(&g, &len);
	assert_int_equal(dj_call(fd, DJINN_OP_GRAPH_SUBMIT, sid, p, len, &r),
			 1);
	free(p);
	expect_error(&r, -ENOMEM, "need");
	dj_resp_free(&r);

	{
		struct djinn_admin_vmu now = vmu_now(fx);
		char why[256];

		if (vmu_diff(&before, &now, why, sizeof(why)))
			fail_msg("after refused graphs: %s", why);
	}
	assert_int_equal(session_entry(fx, sid).tensors, 3);
	/* and one that fits runs */
	memset(&g, 0, sizeof(g));
	c = gb_input(&g, tc);
	gb_output(&g, gb_op(&g, DJINN_GOP_MATMUL, 2, c, gb_input(&g, tr2)));
	{
		struct djinn_tensor_resp out;

		graph_run(fd, sid, &g, &out);
		tensor_release(fd, sid, out.handle);
	}
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* 12f. Many requests in flight on one connection, answered by request
 * id, whatever the order. */
static void test_in_flight(void **state)
{
	struct fx *fx = *state;
	enum { NG = 20, NR = 24, NH = 16, NTOT = NG + NR + NH };
	struct djinn_tensor_desc dx = F32(64);
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "inflight");
	float *x, val;
	uint64_t tx = upload_rand(fd, sid, &dx, 31, 4, &x);
	struct {
		uint64_t id;
		uint16_t op;
		int k;
		bool seen;
		struct djinn_tensor_resp out;
	} req[NTOT];
	int n = 0;

	/* Interleaved: graphs (x * (k + 1)), reads of x[k], heartbeats,
	 * with scattered request ids, all sent before any answer is read. */
	for (int i = 0, g = 0, rd = 0, hb = 0; n < NTOT; i++) {
		int kind = i % 3;

		if (kind == 0 && g < NG) {
			struct gb gr = { 0 };
			uint32_t v = gb_op(&gr, DJINN_GOP_SCALE, 1,
					   gb_input(&gr, tx));

			gb_node(&gr, v)->params.scalar.alpha = (float)(g + 1);
			gb_output(&gr, v);
			req[n] = (typeof(req[0])){ .id = 0x9e3779b97f4a7c15ull *
							 (uint64_t)(n + 1),
						   .op = DJINN_OP_GRAPH_SUBMIT,
						   .k = g++ };
			graph_send_at(__LINE__, fd, sid, req[n].id, &gr);
			n++;
		} else if (kind == 1 && rd < NR) {
			struct djinn_tensor_io io = { .handle = tx,
						      .offset = 4u * rd,
						      .len = 4 };

			req[n] = (typeof(req[0])){ .id = 0x9e3779b97f4a7c15ull *
							 (uint64_t)(n + 1),
						   .op = DJINN_OP_TENSOR_READ,
						   .k = rd++ };
			assert_int_equal(dj_send(fd, req[n].op, req[n].id, sid,
						 &io, sizeof(io)),
					 0);
			n++;
		} else if (kind == 2 && hb < NH) {
			req[n] = (typeof(req[0])){ .id = 0x9e3779b97f4a7c15ull *
							 (uint64_t)(n + 1),
						   .op = DJINN_OP_HEARTBEAT,
						   .k = hb++ };
			assert_int_equal(dj_send(fd, req[n].op, req[n].id, sid,
						 NULL, 0),
					 0);
			n++;
		}
	}
	for (int got = 0; got < NTOT; got++) {
		struct dj_resp r;
		int i;

		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		for (i = 0; i < NTOT && req[i].id != r.hdr.request_id; i++)
			;
		if (i == NTOT || req[i].seen)
			fail_msg("response %d: request id %#llx unknown or "
				 "answered twice",
				 got, (unsigned long long)r.hdr.request_id);
		req[i].seen = true;
		assert_int_equal(r.hdr.opcode, req[i].op);
		assert_int_equal(r.hdr.session_id, sid);
		if (r.error)
			fail_msg("request %d (op %u): error %d \"%s\"", i,
				 req[i].op, r.error, r.msg);
		switch (req[i].op) {
		case DJINN_OP_GRAPH_SUBMIT:
			graph_resp_at(__LINE__, &r, 1, &req[i].out);
			break;
		case DJINN_OP_TENSOR_READ:
			assert_int_equal(r.len, 4);
			memcpy(&val, r.data, 4);
			assert_true(val == x[req[i].k]);
			break;
		default:
			assert_int_equal(r.len,
					 sizeof(struct djinn_session_resp));
		}
		dj_resp_free(&r);
	}
	for (int i = 0; i < NTOT; i++) {
		float *got;
		double want[64];

		if (req[i].op != DJINN_OP_GRAPH_SUBMIT)
			continue;
		for (int e = 0; e < 64; e++)
			want[e] = (double)x[e] * (req[i].k + 1);
		got = read_f32(fd, sid, &req[i].out);
		expect_close(got, want, 64, 1e-6);
		free(got);
		tensor_release(fd, sid, req[i].out.handle);
	}
	free(x);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Leases */

/* 13a. A session nobody renews is gone after its lease, with its
 * memory; one that is renewed stays. */
static void test_lease_expiry(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1024);
	int fd = xconnect(fx->d.sock);
	struct djinn_admin_stats st0 = stats_now(fx);
	struct djinn_session_resp s, k;
	uint8_t *data = pattern_buf(5, 4096);
	int64_t touched, gone = -1;
	uint64_t sid, keep;

	keep = open_at(__LINE__, fd, "keep", 4, 150 * MS, &k);
	assert_int_equal(k.lease_ns, 150 * MS);
	sid = open_at(__LINE__, fd, "short", 4, 100 * MS, &s);
	assert_int_equal(s.lease_ns, 100 * MS);
	touched = dj_now_ms();
	create_data(fd, sid, &d, data, 4096);
	/* not expired early: still there well within its lease */
	if (dj_now_ms() - touched < 60)
		assert_int_equal(session_entry(fx, sid).id, sid);
	assert_true(vmu_now(fx).seg[1].used > fx->base.seg[1].used);

	/* Renew "keep" every 20 ms; watch "short" go. */
	while (dj_now_ms() - touched < 3000) {
		struct djinn_admin_session *l;
		uint32_t n;
		bool there = false;

		call_void(fd, DJINN_OP_SIGNAL, keep,
			  &(struct djinn_signal){ .phase = DJINN_PHASE_DECODE },
			  sizeof(struct djinn_signal));
		n = sessions_now(fx, &l);
		for (uint32_t i = 0; i < n; i++)
			there |= l[i].id == sid;
		free(l);
		if (!there) {
			gone = dj_now_ms() - touched;
			break;
		}
		usleep(20000);
	}
	if (gone < 0)
		fail_msg("a session with a 100 ms lease still there after 3 s");
	if (gone < 100)
		fail_msg("a session with a 100 ms lease gone after %lld ms",
			 (long long)gone);
	/* its handles and memory with it */
	call_err(fd, DJINN_OP_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
	call_err(fd, DJINN_OP_TENSOR_READ, sid,
		 &(struct djinn_tensor_io){ .len = 4 },
		 sizeof(struct djinn_tensor_io), -ENOENT, NULL);
	check_health_at(__LINE__, fx, 1, &fx->base);
	assert_int_equal(stats_now(fx).sessions_expired,
			 st0.sessions_expired + 1);

	/* "keep" was renewed all along, by SIGNAL */
	call_void(fd, DJINN_OP_SIGNAL, keep,
		  &(struct djinn_signal){ .phase = DJINN_PHASE_IDLE },
		  sizeof(struct djinn_signal));
	close_session(fd, keep);
	free(data);
	close(fd);
	check_health(fx, 0);
}

/* The client of test_client_killed: opens a session, uploads a tensor,
 * tells the parent its session id, starts a 16 MiB TENSOR_CREATE,
 * sends a quarter of it, says 'M' and waits to be killed. */
static int killed_client(const char *sock, int out)
{
	struct djinn_session_open o = { .tenant = "doomed",
					.priority = 4,
					.lease_ns = 1500 * MS };
	struct djinn_tensor_desc d = F32(256 * 1024), big = F32(4 * MiB);
	struct djinn_session_resp s;
	struct dj_resp r;
	size_t plen;
	uint8_t *p, *data = malloc(16 * MiB);
	int fd = dj_connect(sock);
	struct djinn_hdr h;

	if (fd < 0 || !data)
		return 10;
	memset(data, 0x5a, 16 * MiB);
	if (dj_call(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), &r) != 1 ||
	    r.error || r.len != sizeof(s))
		return 11;
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, MiB, &plen);
	if (dj_call(fd, DJINN_OP_TENSOR_CREATE, s.session_id, p, plen, &r) !=
		    1 ||
	    r.error)
		return 12;
	dj_resp_free(&r);
	free(p);
	if (write(out, &s.session_id, 8) != 8)
		return 13;
	p = create_payload(&big, DJINN_SEG_DATA, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_OP_TENSOR_CREATE, 99, s.session_id,
		   plen + desc_bytes(&big));
	if (dj_send_raw(fd, &h, p, plen) ||
	    dj_write(fd, data, 4 * MiB, DJ_TIMEOUT_MS))
		return 14;
	if (write(out, "M", 1) != 1)
		return 15;
	for (int i = 0; i < 300; i++)
		usleep(100000);
	return 16;
}

/* 13b. A client SIGKILLed in the middle of a request: after the lease
 * its session is gone and the VMU is back where it started. */
static void test_client_killed(void **state)
{
	struct fx *fx = *state;
	struct pollfd pfd;
	uint64_t sid = 0;
	int pipefd[2], status;
	int64_t marked, killed;
	char mark = 0;
	pid_t pid;

	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		close(pipefd[0]);
		close(fx->adm);
		_exit(killed_client(fx->d.sock, pipefd[1]));
	}
	close(pipefd[1]);
	pfd = (struct pollfd){ .fd = pipefd[0], .events = POLLIN };
	if (poll(&pfd, 1, DJ_TIMEOUT_MS) != 1 ||
	    read(pipefd[0], &sid, 8) != 8 ||
	    poll(&pfd, 1, DJ_TIMEOUT_MS) != 1 ||
	    read(pipefd[0], &mark, 1) != 1 || mark != 'M') {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		fail_msg("client did not get going (exit status %d)",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	marked = dj_now_ms();
	/* Mid-request: the 16 MiB region is being filled. */
	{
		int64_t deadline = marked + 5000;

		while (vmu_now(fx).seg[1].used <
			       fx->base.seg[1].used + 16 * MiB &&
		       dj_now_ms() < deadline)
			usleep(2000);
	}
	assert_true(vmu_now(fx).seg[1].used >= fx->base.seg[1].used + 17 * MiB);
	assert_int_equal(session_entry(fx, sid).tensors, 1);

	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	killed = dj_now_ms();
	close(pipefd[0]);

	/* The connection's end does not end the session (its lease
	 * does), but the half-made tensor goes at once. */
	if (dj_now_ms() - marked < 500) {
		assert_int_equal(session_entry(fx, sid).id, sid);
		wait_charged(fx, sid, granules(fx, MiB), 1000);
	}

	/* After the lease (1.5 s): gone, memory back. */
	wait_for(fx, 0, fx->base.seg[1].used, 5000);
	if (dj_now_ms() - killed > 1500 + 2000)
		fail_msg("session gone %lld ms after the kill, lease 1500 ms",
			 (long long)(dj_now_ms() - killed));
	assert_true(stats_now(fx).sessions_expired >= 1);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Concurrency */

#define NR_CLIENTS 100

struct client {
	pthread_t th;
	struct thread_err err;
	const char *sock;
	pthread_barrier_t *bar;
};

#define CHECK(c, what, rc)                                         \
	do {                                                       \
		if (!(c)) {                                        \
			thread_fail(&cl->err, __LINE__, what, rc); \
			goto out;                                  \
		}                                                  \
	} while (0)

/* One client: its own connection and session, a few requests. */
static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct djinn_session_open o = { .priority = cl->err.id % 8 };
	struct djinn_tensor_desc d = F32(256);
	struct djinn_tensor_io io = { .len = 1024 };
	struct djinn_tensor_resp t, out;
	struct djinn_session_resp s;
	struct dj_resp r = { 0 };
	uint8_t *p = NULL, *data = pattern_buf(cl->err.id, 1024);
	float f[256], want[256];
	struct gb g = { 0 };
	size_t plen;
	int fd = dj_connect(cl->sock), ret;
	uint32_t v;

	/* Everyone connected before anyone starts. */
	pthread_barrier_wait(cl->bar);
	CHECK(fd >= 0, "connect", fd);
	ret = dj_call(fd, DJINN_OP_HELLO, 0, NULL, 0, &r);
	CHECK(ret == 1 && !r.error, "hello", ret);
	dj_resp_free(&r);

	snprintf(o.tenant, sizeof(o.tenant), "client-%u", cl->err.id);
	ret = dj_call(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), &r);
	CHECK(ret == 1 && !r.error && r.len == sizeof(s), "open", r.error);
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);

	p = create_payload(&d, DJINN_SEG_DATA, NULL, data, 1024, &plen);
	ret = dj_call(fd, DJINN_OP_TENSOR_CREATE, s.session_id, p, plen, &r);
	CHECK(ret == 1 && !r.error && r.len == sizeof(t), "create", r.error);
	memcpy(&t, r.data, sizeof(t));
	dj_resp_free(&r);

	io.handle = t.handle;
	ret = dj_call(fd, DJINN_OP_TENSOR_READ, s.session_id, &io, sizeof(io),
		      &r);
	CHECK(ret == 1 && !r.error && r.len == 1024, "read", r.error);
	CHECK(!memcmp(r.data, data, 1024), "read back", 0);
	dj_resp_free(&r);

	/* the graph: 2 x */
	v = gb_op(&g, DJINN_GOP_SCALE, 1, gb_input(&g, t.handle));
	g.node[0].params.scalar.alpha = 2;
	gb_output(&g, v);
	free(p);
	p = gb_payload(&g, &plen);
	ret = dj_call(fd, DJINN_OP_GRAPH_SUBMIT, s.session_id, p, plen, &r);
	CHECK(ret == 1 && !r.error &&
		      r.len == sizeof(struct djinn_graph_resp) + sizeof(out),
	      "graph", r.error);
	memcpy(&out, r.data + sizeof(struct djinn_graph_resp), sizeof(out));
	dj_resp_free(&r);
	io.handle = out.handle;
	ret = dj_call(fd, DJINN_OP_TENSOR_READ, s.session_id, &io, sizeof(io),
		      &r);
	CHECK(ret == 1 && !r.error && r.len == 1024, "read result", r.error);
	memcpy(f, r.data, 1024);
	dj_resp_free(&r);
	memcpy(want, data, 1024);
	for (int i = 0; i < 256; i++)
		CHECK(f[i] == want[i] * 2 || (isnan(f[i]) && isnan(want[i])),
		      "result", i);

	ret = dj_call(fd, DJINN_OP_TENSOR_RELEASE, s.session_id, &t.handle, 8,
		      &r);
	CHECK(ret == 1 && !r.error, "release", r.error);
	dj_resp_free(&r);
	ret = dj_call(fd, DJINN_OP_SESSION_CLOSE, s.session_id, NULL, 0, &r);
	CHECK(ret == 1 && !r.error, "close", r.error);
out:
	dj_resp_free(&r);
	free(p);
	free(data);
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* 14. 100 clients at once, each its own connection and session. */
static void test_concurrent_clients(void **state)
{
	struct fx *fx = *state;
	struct client *cl = calloc(NR_CLIENTS, sizeof(*cl));
	struct djinn_admin_stats st0 = stats_now(fx), st;
	pthread_barrier_t bar;

	assert_non_null(cl);
	assert_int_equal(pthread_barrier_init(&bar, NULL, NR_CLIENTS), 0);
	for (unsigned int i = 0; i < NR_CLIENTS; i++) {
		cl[i].err.id = i;
		cl[i].sock = fx->d.sock;
		cl[i].bar = &bar;
		assert_int_equal(pthread_create(&cl[i].th, NULL, client_main,
						&cl[i]),
				 0);
	}
	for (unsigned int i = 0; i < NR_CLIENTS; i++)
		assert_int_equal(pthread_join(cl[i].th, NULL), 0);
	pthread_barrier_destroy(&bar);
	for (unsigned int i = 0; i < NR_CLIENTS; i++)
		if (cl[i].err.errors)
			fail_msg("%s", cl[i].err.msg);
	free(cl);

	st = stats_now(fx);
	assert_int_equal(st.sessions_opened - st0.sessions_opened, NR_CLIENTS);
	assert_int_equal(st.sessions_closed - st0.sessions_closed, NR_CLIENTS);
	assert_true(st.conns_accepted - st0.conns_accepted >= NR_CLIENTS);
	assert_int_equal(st.sessions, 0);
	assert_true(st.graphs_run - st0.graphs_run == NR_CLIENTS);
	wait_for(fx, 0, fx->base.seg[1].used, 2000);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Admin */

/* 15a. ADMIN_SESSIONS, ADMIN_KILL, ADMIN_VMU, ADMIN_STATS. */
static void test_admin(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1024);
	int fd = xconnect(fx->d.sock);
	struct djinn_admin_stats st0 = stats_now(fx), st;
	struct djinn_session_resp sa, sb;
	struct djinn_admin_session ea, eb;
	struct djinn_admin_vmu v;
	uint64_t alice, bob, t;

	close(fd);
	fd = xconnect(fx->d.sock);
	alice = open_at(__LINE__, fd, "alice", 6, 5000 * MS, &sa);
	bob = open_at(__LINE__, fd, "bob", 1, 0, &sb);
	t = create_data(fd, alice, &d, NULL, 0);
	(void)t;

	assert_int_equal(sessions_now(fx, NULL), 2);
	ea = session_entry(fx, alice);
	eb = session_entry(fx, bob);
	assert_string_equal(ea.tenant, "alice");
	assert_string_equal(eb.tenant, "bob");
	assert_int_equal(ea.priority, 6);
	assert_int_equal(eb.priority, 1);
	assert_int_equal(ea.lease_ns, 5000 * MS);
	assert_int_equal(eb.lease_ns, 10000 * MS);
	assert_true(ea.deadline_ns >= sa.deadline_ns);
	assert_int_equal(ea.tensors, 1);
	assert_int_equal(eb.tensors, 0);
	assert_true(ea.data_bytes >= desc_bytes(&d));
	assert_int_equal(eb.data_bytes, 0);
	assert_true(ea.requests >= 1);
	assert_int_equal(ea.uid, getuid());
	assert_int_equal(ea.pid, getpid());

	v = vmu_now(fx);
	assert_string_equal(v.device, "cpu");
	assert_int_equal(v.capacity, DEV_BYTES);
	assert_int_equal(v.granularity, fx->hello.granularity);
	assert_true(v.committed >= fx->base.committed + desc_bytes(&d));
	assert_true(v.seg[1].used >= fx->base.seg[1].used + desc_bytes(&d));
	assert_int_equal(v.seg[1].entries, fx->base.seg[1].entries + 1);
	assert_true(v.free <= v.capacity - v.committed);
	assert_true(v.pressure <= 2);
	assert_int_equal(v.__reserved, 0);

	/* kill bob: his next request finds no session */
	call_void(fx->adm, DJINN_OP_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ bob },
		  sizeof(struct djinn_admin_kill));
	call_err(fd, DJINN_OP_HEARTBEAT, bob, NULL, 0, -ENOENT, NULL);
	assert_int_equal(sessions_now(fx, NULL), 1);
	call_err(fx->adm, DJINN_OP_ADMIN_KILL, 0,
		 &(struct djinn_admin_kill){ bob },
		 sizeof(struct djinn_admin_kill), -ENOENT, NULL);
	call_err(fx->adm, DJINN_OP_ADMIN_KILL, 0,
		 &(struct djinn_admin_kill){ 0 },
		 sizeof(struct djinn_admin_kill), -ENOENT, NULL);

	st = stats_now(fx);
	assert_true(st.uptime_ns > st0.uptime_ns);
	assert_true(st.conns >= 2);
	assert_true(st.conns_accepted > st0.conns_accepted);
	assert_int_equal(st.sessions, 1);
	assert_int_equal(st.sessions_opened - st0.sessions_opened, 2);
	assert_int_equal(st.sessions_killed - st0.sessions_killed, 1);
	assert_true(st.requests >= st0.requests + 8);
	assert_true(st.errors >= st0.errors + 3);
	assert_true(st.bytes_in > st0.bytes_in);
	assert_true(st.bytes_out > st0.bytes_out);
	assert_int_equal(st.queue_depth, 0);

	/* kill alice with her tensor: the memory comes back */
	call_void(fx->adm, DJINN_OP_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ alice },
		  sizeof(struct djinn_admin_kill));
	call_err(fd, DJINN_OP_TENSOR_RELEASE, alice, &t, 8, -ENOENT, NULL);
	assert_int_equal(stats_now(fx).sessions_killed - st0.sessions_killed,
			 2);
	close(fd);
	check_health(fx, 0);
}

/* 15b. A session killed (or expiring) in the middle of an upload: the
 * upload is answered -ECANCELED at once, the memory comes back, the rest
 * of the bytes are skipped. */
static void test_kill_mid_upload(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(2 * MiB); /* 8 MiB */
	int up = xconnect(fx->d.sock);
	uint64_t sid = open_session(up, "killed-uploader");
	uint8_t *data = pattern_buf(8, 8 * MiB);
	struct djinn_hdr h;
	struct dj_resp r;
	size_t plen;
	uint8_t *p = create_payload(&d, DJINN_SEG_DATA, NULL, NULL, 0, &plen);

	h = dj_hdr(DJINN_OP_TENSOR_CREATE, 1, sid, plen + desc_bytes(&d));
	assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
	assert_int_equal(dj_write(up, data, MiB, 5000), 0);
	free(p);
	wait_charged(fx, sid, 8 * MiB, 5000);

	call_void(fx->adm, DJINN_OP_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ sid },
		  sizeof(struct djinn_admin_kill));
	assert_int_equal(sessions_now(fx, NULL), 0);
	/* "after which the session's VMU bytes and handles are zero and
	 * its in-flight work is cancelled": the upload is answered
	 * -ECANCELED at once, its memory is back. */
	assert_int_equal(dj_recv(up, &r, DJ_TIMEOUT_MS), 1);
	assert_int_equal(r.hdr.request_id, 1);
	expect_error(&r, -ECANCELED, NULL);
	dj_resp_free(&r);
	wait_for(fx, 0, fx->base.seg[1].used, 2000);
	/* the rest of its bytes are skipped: the connection serves on */
	assert_int_equal(dj_write(up, data + MiB, 7 * MiB, 5000), 0);
	hello(up);
	call_err(up, DJINN_OP_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);

	/* The same for a TENSOR_WRITE in progress, and a lease that runs
	 * out under it (the write renewed it once, at its start). */
	{
		struct djinn_session_resp s;
		uint64_t t;

		sid = open_at(__LINE__, up, "slow-writer", 4, 300 * MS, &s);
		t = create_data(up, sid, &d, NULL, 0);
		p = write_payload(t, 0, NULL, 0, &plen);
		memcpy(p + offsetof(struct djinn_tensor_io, len),
		       &(uint64_t){ 8 * MiB }, 8);
		h = dj_hdr(DJINN_OP_TENSOR_WRITE, 2, sid, plen + 8 * MiB);
		assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
		assert_int_equal(dj_write(up, data, MiB, 5000), 0);
		free(p);
		assert_int_equal(dj_recv(up, &r, DJ_TIMEOUT_MS), 1);
		assert_int_equal(r.hdr.request_id, 2);
		expect_error(&r, -ECANCELED, NULL);
		dj_resp_free(&r);
		wait_for(fx, 0, fx->base.seg[1].used, 2000);
		assert_int_equal(dj_write(up, data + MiB, 7 * MiB, 5000), 0);
		hello(up);
	}
	close(up);
	free(data);
	check_health(fx, 0);
}

/* 13b. A client that stops reading its replies: once its session's lease
 * has run out and the peer has taken no reply bytes for a lease period,
 * the connection is closed and the tensor its read held is freed. */
static void test_unread_replies(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 32 * MiB);
	int fd = xconnect(fx->d.sock), small = 4096, other;
	uint64_t sid = open_session(fd, "never-reads"), t;
	struct djinn_tensor_io io = { .len = 32 * MiB };
	struct djinn_hdr h;
	int64_t ms;

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	t = create_data(fd, sid, &d, NULL, 0);
	io.handle = t;
	h = dj_hdr(DJINN_OP_TENSOR_READ, 7, sid, sizeof(io));
	assert_int_equal(dj_send_raw(fd, &h, &io, sizeof(io)), 0);
	/* The session expires (300 ms); the read's reply still holds the
	 * tensor until the connection is given up (300 ms more without
	 * progress, checked every 75 ms). */
	ms = wait_for(fx, 0, fx->base.seg[1].used, 3000);
	assert_true(ms >= 250);
	/* Everyone else is served meanwhile and after. */
	other = xconnect(fx->d.sock);
	hello(other);
	close(other);
	close(fd);
	check_health(fx, 0);
}

/* 16b. One peer uid may hold server.max_sessions_per_uid sessions (3
 * here); the next is -EDQUOT naming the limit, and a session closed
 * makes room. */
static void test_sessions_per_uid(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	uint64_t sid[3];

	for (int i = 0; i < 3; i++)
		sid[i] = open_session(fd, "capped");
	{
		struct djinn_session_open o = { .tenant = "capped",
						.priority = 4 };

		call_err(fd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EDQUOT,
			 "server.max_sessions_per_uid");
	}
	close_session(fd, sid[0]);
	sid[0] = open_session(fd, "capped");
	for (int i = 0; i < 3; i++)
		close_session(fd, sid[i]);
	close(fd);
	check_health(fx, 0);
}

/* 15c. Admin opcodes on the client socket, client opcodes on the admin
 * socket: -EPERM, and the connection stays usable. */
static void test_admin_perm(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "x", .priority = 4 };
	int fd = xconnect(fx->d.sock), afd = xconnect(fx->d.admin);
	uint64_t sid = open_session(fd, "victim");
	const uint16_t admin_ops[] = { DJINN_OP_ADMIN_SESSIONS,
				       DJINN_OP_ADMIN_VMU,
				       DJINN_OP_ADMIN_STATS };

	for (size_t i = 0; i < ARRAY_LEN(admin_ops); i++) {
		call_err(fd, admin_ops[i], 0, NULL, 0, -EPERM, NULL);
		hello(fd);
	}
	call_err(fd, DJINN_OP_ADMIN_KILL, 0, &(struct djinn_admin_kill){ sid },
		 sizeof(struct djinn_admin_kill), -EPERM, NULL);
	hello(fd);
	assert_int_equal(session_entry(fx, sid).id, sid); /* not killed */

	call_err(afd, DJINN_OP_SESSION_OPEN, 0, &o, sizeof(o), -EPERM, NULL);
	call_err(afd, DJINN_OP_HEARTBEAT, 0, NULL, 0, -EPERM, NULL);
	call_err(afd, DJINN_OP_SESSION_ATTACH, sid, o.tenant, 16, -EPERM, NULL);
	{
		struct djinn_tensor_desc d = F32(16);
		size_t plen;
		uint8_t *p = create_payload(&d, 0, NULL, o.tenant, 64, &plen);

		call_err(afd, DJINN_OP_TENSOR_CREATE, sid, p, plen, -EPERM,
			 NULL);
		free(p);
	}
	hello(afd);
	assert_int_equal(sessions_now(fx, NULL), 1);
	assert_int_equal(session_entry(fx, sid).tensors, 0);
	close_session(fd, sid);
	close(afd);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Shutdown */

/* 16. SIGTERM under clients: each sees its answers, then EOF, promptly;
 * the daemon exits 0. */
static void test_daemon_stop(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(64, 64), big = F32(2 * MiB);
	int fd = xconnect(fx->d.sock), idle = xconnect(fx->d.sock),
	    up = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "stopping"), sid2;
	uint64_t t = upload_rand(fd, sid, &d, 41, 1, NULL);
	struct djinn_hdr h;
	struct gb g = { 0 };
	int64_t t0;
	size_t plen;
	uint8_t *p;
	int ret;

	hello(idle);
	/* a client in the middle of an 8 MiB upload */
	sid2 = open_session(up, "uploader");
	p = create_payload(&big, 0, NULL, NULL, 0, &plen);
	h = dj_hdr(DJINN_OP_TENSOR_CREATE, 1, sid2, plen + desc_bytes(&big));
	assert_int_equal(dj_send_raw(up, &h, p, plen), 0);
	free(p);
	p = pattern_buf(6, MiB);
	assert_int_equal(dj_write(up, p, MiB, 5000), 0);
	free(p);
	/* a client with requests in flight */
	gb_output(&g, gb_op(&g, DJINN_GOP_MATMUL, 2, gb_input(&g, t),
			    gb_input(&g, t)));
	for (uint64_t id = 1; id <= 4; id++)
		graph_send_at(__LINE__, fd, sid, id, &g);

	t0 = dj_now_ms();
	assert_int_equal(kill(fx->d.pid, SIGTERM), 0);
	/* Answers (or not), then EOF: never a hang. */
	for (int n = 0;; n++) {
		struct dj_resp r;

		ret = dj_recv(fd, &r, 5000);
		if (ret != 1)
			break;
		assert_true(n < 4);
		assert_true(r.hdr.request_id >= 1 && r.hdr.request_id <= 4);
		dj_resp_free(&r);
	}
	if (ret != 0)
		fail_msg("after SIGTERM: %d (%s), want EOF", ret,
			 strerror(-ret));
	expect_eof(idle);
	expect_eof(up);
	if (dj_now_ms() - t0 > 3000)
		fail_msg("EOF %lld ms after SIGTERM",
			 (long long)(dj_now_ms() - t0));
	close(fd);
	close(idle);
	close(up);
	close(fx->adm);
	fx->adm = -1;
	fx->stopped = true;
	ret = djd_stop(&fx->d, 5000);
	/* Graphs finishing as the drain ends once crashed server_exit()
	 * (the executor freed with its eventfd read still on the ring). */
	if (ret)
		fail_msg("djinnd did not exit 0 after SIGTERM: %s", fx->d.end);
	fd = dj_connect(fx->d.sock);
	assert_true(fd < 0);
}

/* ---------------------------------------------------------------------- */
/* The metrics endpoint */

/* Send @req to the metrics endpoint, read to EOF: the status code, and
 * the body (malloc()ed) in *@body. */
static int http_at(int line, struct fx *fx, const char *req, size_t len,
		   char **body)
{
	int fd = dj_connect_tcp(fx->d.metrics_port), code = 0;
	size_t cap = 1 << 16, got = 0;
	char *buf = xmalloc(cap + 1), *end;
	long n;

	if (fd < 0)
		fail_msg("line %d: connect to metrics: %s", line,
			 strerror(-fd));
	if (len && dj_write(fd, req, len, 5000))
		fail_msg("line %d: metrics: cannot send", line);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO,
		   &(struct timeval){ .tv_sec = 5 }, sizeof(struct timeval));
	while ((n = recv(fd, buf + got, cap - got, 0)) > 0) {
		got += (size_t)n;
		if (got == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
			assert_non_null(buf);
		}
	}
	close(fd);
	buf[got] = 0;
	if (sscanf(buf, "HTTP/1.1 %d ", &code) != 1)
		fail_msg("line %d: metrics: no status line in \"%.80s\"", line,
			 buf);
	end = strstr(buf, "\r\n\r\n");
	if (!end)
		fail_msg("line %d: metrics: no end of head", line);
	if (body)
		*body = strdup(end + 4);
	free(buf);
	return code;
}
#define http(fx, req, body) http_at(__LINE__, fx, req, strlen(req), body)

static bool metric_name_ok(const char *p, size_t n)
{
	if (!n || !(isalpha((unsigned char)p[0]) || p[0] == '_' || p[0] == ':'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)p[i]) || p[i] == '_' ||
		      p[i] == ':'))
			return false;
	return true;
}

/* One family seen in an exposition. */
struct mfam {
	char name[96], type[16];
	bool help;
	/* histogram: the series being read, its last le and count */
	char series[256];
	double last_le, last_count;
};

/* The family a sample name belongs to. */
static struct mfam *fam_of(struct mfam *f, unsigned int n, const char *name,
			   size_t len)
{
	for (unsigned int i = 0; i < n; i++) {
		size_t fl = strlen(f[i].name);

		if (len == fl && !strncmp(name, f[i].name, len))
			return &f[i];
		if (!strcmp(f[i].type, "histogram") && len > fl &&
		    !strncmp(name, f[i].name, fl) &&
		    (!strncmp(name + fl, "_bucket", len - fl) ||
		     !strncmp(name + fl, "_sum", len - fl) ||
		     !strncmp(name + fl, "_count", len - fl)))
			return &f[i];
	}
	return NULL;
}

/*
 * Check a text exposition (format 0.0.4): every sample's family has one
 * HELP and one TYPE line before it; names and labels are well formed;
 * values parse; counters end in _total; a histogram's buckets come in
 * increasing le with non-decreasing counts, end with +Inf, and +Inf
 * equals its _count. Fails naming the line.
 */
static void check_exposition(const char *text)
{
	struct mfam *fam = calloc(256, sizeof(*fam));
	unsigned int nfam = 0, lineno = 0, nseen = 0;
	const char **seen = calloc(4096, sizeof(*seen)); /* sample lines */
	const char *p = text;

	assert_non_null(fam);
	assert_non_null(seen);
	while (*p) {
		const char *eol = strchr(p, '\n'), *q;
		char line[512];
		size_t len;

		lineno++;
		if (!eol)
			fail_msg("exposition line %u: no newline", lineno);
		len = (size_t)(eol - p);
		if (len >= sizeof(line))
			fail_msg("exposition line %u: too long", lineno);
		memcpy(line, p, len);
		line[len] = 0;
		p = eol + 1;
		if (!strncmp(line, "# HELP ", 7) ||
		    !strncmp(line, "# TYPE ", 7)) {
			bool help = line[2] == 'H';
			char *name = line + 7, *sp = strchr(name, ' ');
			struct mfam *f;

			if (!sp || !metric_name_ok(name, (size_t)(sp - name)))
				fail_msg("exposition line %u: bad %s line",
					 lineno, help ? "HELP" : "TYPE");
			*sp = 0;
			f = NULL;
			for (unsigned int i = 0; i < nfam; i++)
				if (!strcmp(fam[i].name, name))
					f = &fam[i];
			if (!f) {
				assert_true(nfam < 256);
				f = &fam[nfam++];
				if (strlen(name) >= sizeof(f->name))
					fail_msg("exposition line %u: name too "
						 "long",
						 lineno);
				memcpy(f->name, name, strlen(name) + 1);
			}
			if (help) {
				if (f->help || !sp[1])
					fail_msg("exposition line %u: HELP of "
						 "%s again or empty",
						 lineno, name);
				f->help = true;
			} else {
				if (f->type[0] || !f->help)
					fail_msg("exposition line %u: TYPE of "
						 "%s again or before HELP",
						 lineno, name);
				if (strcmp(sp + 1, "counter") &&
				    strcmp(sp + 1, "gauge") &&
				    strcmp(sp + 1, "histogram"))
					fail_msg("exposition line %u: type "
						 "\"%s\"",
						 lineno, sp + 1);
				snprintf(f->type, sizeof(f->type), "%s",
					 sp + 1);
				if (!strcmp(f->type, "counter") &&
				    (strlen(name) < 6 ||
				     strcmp(name + strlen(name) - 6, "_total")))
					fail_msg("exposition line %u: counter "
						 "%s does not end in _total",
						 lineno, name);
			}
			continue;
		}
		if (line[0] == '#' || !line[0])
			fail_msg("exposition line %u: unexpected \"%s\"",
				 lineno, line);
		/* A series (name and labels) appears once. */
		for (unsigned int i = 0; i < nseen; i++)
			if (!strncmp(seen[i], p - len - 1,
				     strcspn(line, " ")) &&
			    seen[i][strcspn(line, " ")] == ' ')
				fail_msg("exposition line %u: series \"%.*s\" "
					 "again",
					 lineno, (int)strcspn(line, " "), line);
		assert_true(nseen < 4096);
		seen[nseen++] = p - len - 1;
		{
			size_t nl = strcspn(line, "{ ");
			struct mfam *f = fam_of(fam, nfam, line, nl);
			char series[256] = "", *val, *endp;
			double v, le = NAN;

			if (!metric_name_ok(line, nl) || !f || !f->type[0])
				fail_msg("exposition line %u: sample \"%s\" "
					 "without its HELP and TYPE",
					 lineno, line);
			q = line + nl;
			if (*q == '{') {
				/* name="value" pairs; le set aside */
				q++;
				while (*q != '}') {
					const char *name = q, *v0;
					size_t ln = strcspn(q, "=");

					if (!metric_name_ok(name, ln) ||
					    q[ln] != '=' || q[ln + 1] != '"')
						fail_msg("exposition line %u: "
							 "bad label",
							 lineno);
					v0 = q = q + ln + 2;
					while (*q && *q != '"')
						q += *q == '\\' && q[1] ? 2 : 1;
					if (*q != '"')
						fail_msg("exposition line %u: "
							 "open label value",
							 lineno);
					if (ln == 2 && !strncmp(name, "le", 2))
						le = !strncmp(v0, "+Inf", 4) ?
							     INFINITY :
							     strtod(v0, NULL);
					else
						snprintf(series +
								 strlen(series),
							 sizeof(series) -
								 strlen(series),
							 "%.*s,",
							 (int)(q + 1 - name),
							 name);
					q++;
					if (*q == ',')
						q++;
					else if (*q != '}')
						fail_msg("exposition line %u: "
							 "bad label list",
							 lineno);
				}
				q++;
			}
			if (*q != ' ')
				fail_msg("exposition line %u: no value",
					 lineno);
			val = (char *)q + 1;
			v = strtod(val, &endp);
			if (endp == val || *endp)
				fail_msg("exposition line %u: value \"%s\"",
					 lineno, val);
			if (strcmp(f->type, "histogram"))
				continue;
			if (!strncmp(line + strlen(f->name), "_bucket", 7)) {
				if (isnan(le))
					fail_msg("exposition line %u: bucket "
						 "without le",
						 lineno);
				if (strcmp(series, f->series)) {
					snprintf(f->series, sizeof(f->series),
						 "%s", series);
					f->last_le = -INFINITY;
					f->last_count = 0;
				}
				if (!(le > f->last_le) || v < f->last_count)
					fail_msg("exposition line %u: buckets "
						 "not monotonic",
						 lineno);
				f->last_le = le;
				f->last_count = v;
			} else if (!strncmp(line + strlen(f->name), "_count",
					    6)) {
				if (strcmp(series, f->series) ||
				    f->last_le != INFINITY ||
				    v != f->last_count)
					fail_msg("exposition line %u: _count "
						 "is not the +Inf bucket",
						 lineno);
			}
		}
	}
	for (unsigned int i = 0; i < nfam; i++)
		if (!fam[i].type[0])
			fail_msg("exposition: %s has HELP but no TYPE",
				 fam[i].name);
	free(fam);
	free(seen);
}

/* The value of the sample named exactly @series ("name{labels}"), or
 * fail. */
static double metric_at(int line, const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	fail_msg("line %d: no sample %s", line, series);
	return NAN;
}
#define metric(text, series) metric_at(__LINE__, text, series)

/* 17. The metrics endpoint: the exposition parses, counters move with
 * work done, bad requests get 400/404/405 and no one else notices. */
static void test_metrics(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4 * MiB);
	char *a, *b, big[10000];
	int fd = xconnect(fx->d.sock), idle;
	uint64_t sid, t;

	assert_int_equal(
		http(fx, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", &a), 200);
	assert_string_equal(a, "ok\n");
	free(a);
	assert_int_equal(http(fx, "GET /metrics HTTP/1.1\r\n\r\n", &a), 200);
	check_exposition(a);

	/* Work: 3 HELLOs, a session, a 4 MiB tensor, a refused request. */
	for (int i = 0; i < 3; i++)
		hello(fd);
	sid = open_session(fd, "metered");
	t = create_data(fd, sid, &d, NULL, 0);
	call_err(fd, DJINN_OP_TENSOR_RELEASE, sid, &(uint64_t){ t ^ 1 }, 8,
		 -ENOENT, NULL);
	/* Opcodes without names count once, as op="unknown". */
	for (int i = 0; i < 3; i++) {
		struct djinn_hdr h =
			dj_hdr((uint16_t[]){ 22, 30, 200 }[i], 900 + i, 0, 0);

		raw_err(fd, &h, NULL, 0, -EOPNOTSUPP, NULL);
	}
	assert_int_equal(http(fx, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", &b),
			 200);
	check_exposition(b);
	assert_true(metric(b, "djinn_requests_total{op=\"hello\"}") ==
		    metric(a, "djinn_requests_total{op=\"hello\"}") + 3);
	assert_true(metric(b, "djinn_request_duration_seconds_count{op="
			      "\"hello\"}") ==
		    metric(a, "djinn_request_duration_seconds_count{op="
			      "\"hello\"}") +
			    3);
	assert_true(metric(b, "djinn_sessions_opened_total") ==
		    metric(a, "djinn_sessions_opened_total") + 1);
	assert_true(metric(b, "djinn_sessions{phase=\"unknown\"}") ==
		    metric(a, "djinn_sessions{phase=\"unknown\"}") + 1);
	assert_true(metric(b, "djinn_request_errors_total{op="
			      "\"tensor_release\"}") == 1);
	assert_true(metric(b, "djinn_vmu_bytes{device=\"cpu\",segment="
			      "\"data\"}") ==
		    metric(a, "djinn_vmu_bytes{device=\"cpu\",segment="
			      "\"data\"}") +
			    granules(fx, 4 * MiB));
	assert_true(metric(b, "djinn_received_bytes_total") >
		    metric(a, "djinn_received_bytes_total"));
	free(a);
	free(b);

	/* Bad requests, each on its own connection; an idle one stays
	 * open meanwhile. */
	idle = dj_connect_tcp(fx->d.metrics_port);
	assert_true(idle >= 0);
	assert_int_equal(http(fx, "GARBAGE\r\n\r\n", NULL), 400);
	assert_int_equal(http(fx, "GET /metrics HTTP/9.9\r\n\r\n", NULL), 400);
	assert_int_equal(http(fx, "GET /nope HTTP/1.1\r\n\r\n", NULL), 404);
	assert_int_equal(http(fx, "POST /metrics HTTP/1.1\r\n\r\n", NULL), 405);
	assert_int_equal(http_at(__LINE__, fx, "GET /\0x HTTP/1.1\r\n\r\n", 21,
				 NULL),
			 400);
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	assert_int_equal(http_at(__LINE__, fx, big, sizeof(big), NULL), 400);
	hello(fd);
	assert_int_equal(http(fx, "HEAD /metrics HTTP/1.1\r\n\r\n", &a), 200);
	assert_string_equal(a, "");
	free(a);
	close(idle);

	tensor_release(fd, sid, t);
	close_session(fd, sid);
	close(fd);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Models */

#define TINY_GPT2                                                 \
	"--arch gpt2 --layers 2 --embd 64 --heads 4 --vocab 256 " \
	"--ctx 64 --seed 3"

static struct djinn_model_resp model_open_at(int line, int fd, uint64_t sid,
					     const char *name)
{
	struct djinn_model_open o = { { 0 } };
	struct djinn_model_resp m;
	struct dj_resp r;

	strncpy(o.name, name, sizeof(o.name) - 1);
	call_ok_at(line, fd, DJINN_OP_MODEL_OPEN, sid, &o, sizeof(o), &r,
		   sizeof(m));
	memcpy(&m, r.data, sizeof(m));
	dj_resp_free(&r);
	return m;
}
#define model_open(fd, sid, name) model_open_at(__LINE__, fd, sid, name)

static uint64_t ctx_new_at(int line, int fd, uint64_t sid, uint64_t model,
			   uint32_t max)
{
	struct djinn_ctx_new n = { .model = model, .max_tokens = max };
	struct djinn_ctx_resp c;
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_OP_CTX_NEW, sid, &n, sizeof(n), &r,
		   sizeof(c));
	memcpy(&c, r.data, sizeof(c));
	dj_resp_free(&r);
	if (c.len)
		fail_msg("line %d: a new context of %u tokens", line, c.len);
	return c.ctx;
}
#define ctx_new(fd, sid, model, max) ctx_new_at(__LINE__, fd, sid, model, max)

/* PREFILL @n tokens or DECODE @n (tokens into @out); the response. */
static struct djinn_ctx_step_resp step_at(int line, int fd, uint64_t sid,
					  uint16_t op, uint64_t ctx,
					  const int32_t *in, uint32_t n,
					  const struct djinn_sampling *sp,
					  uint32_t flags, int32_t *out)
{
	size_t len = sizeof(struct djinn_ctx_step) +
		     (op == DJINN_OP_CTX_PREFILL ? n * 4 : 0);
	struct djinn_ctx_step *st = xmalloc(len);
	struct djinn_ctx_step_resp resp;
	struct dj_resp r;

	memset(st, 0, sizeof(*st));
	st->ctx = ctx;
	st->nr_tokens = n;
	st->flags = flags;
	if (sp)
		st->sampling = *sp;
	if (op == DJINN_OP_CTX_PREFILL)
		memcpy(st + 1, in, n * 4);
	call_ok_at(line, fd, op, sid, st, len, &r, -1);
	free(st);
	if (r.len < sizeof(resp))
		fail_msg("line %d: step answer of %llu bytes", line,
			 (unsigned long long)r.len);
	memcpy(&resp, r.data, sizeof(resp));
	if (resp.state != DJINN_CTX_DONE || resp.hidden ||
	    r.len != sizeof(resp) + ((resp.nr_tokens * 4 + 7) & ~7u))
		fail_msg("line %d: step answer: state %u, %u tokens in %llu "
			 "bytes",
			 line, resp.state, resp.nr_tokens,
			 (unsigned long long)r.len);
	if (out)
		memcpy(out, r.data + sizeof(resp), resp.nr_tokens * 4);
	dj_resp_free(&r);
	return resp;
}
#define prefill(fd, sid, ctx, in, n, flags)                                \
	step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, ctx, in, n, NULL, \
		flags, NULL)
#define decode(fd, sid, ctx, n, sp, out)                                     \
	step_at(__LINE__, fd, sid, DJINN_OP_CTX_DECODE, ctx, NULL, n, sp, 0, \
		out)

static uint32_t models_listed(struct fx *fx, const char *name,
			      uint32_t *holders)
{
	struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t n, found = 0;

	call_ok(fx->adm, DJINN_OP_ADMIN_MODELS, 0, NULL, 0, &r, -1);
	memcpy(&n, r.data, 4);
	assert_int_equal(r.len, 8 + n * sizeof(*e));
	e = (void *)(r.data + 8);
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(e[i].name, name))
			continue;
		found++;
		*holders = e[i].holders;
	}
	dj_resp_free(&r);
	return found;
}

/* 18. Models: open by name (weights once in the text segment, however
 * many sessions), contexts whose KV cache survives between requests,
 * greedy and seeded sampling that repeat, forks, the logits as a tensor;
 * bad names, tokens and handles refused; everything back at the end. */
static void test_models(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid, sid2, c1, c2, c3;
	struct djinn_model_resp m, m2;
	struct djinn_ctx_step_resp st;
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	int32_t t[6], u[1], a[3], b[3], all[10];
	const struct djinn_sampling sp = {
		.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7
	};
	struct djinn_admin_vmu v0, v1;
	float logits[256];
	uint32_t holders = 0;
	int best = 0;

	assert_int_equal(djd_make_model(&fx->d, "tiny-gpt2", TINY_GPT2), 0);
	sid = open_session(fd, "model-a");
	sid2 = open_session(fd2, "model-b");
	v0 = vmu_now(fx);
	m = model_open(fd, sid, "tiny-gpt2");
	assert_int_equal(m.arch, DJINN_ARCH_GPT2);
	assert_int_equal(m.vocab, 256);
	assert_int_equal(m.n_layer, 2);
	assert_int_equal(m.hidden, 64);
	assert_int_equal(m.max_tokens, 64);
	assert_int_equal(m.dtype, DJINN_DTYPE_F32);
	v1 = vmu_now(fx);
	assert_true(v1.seg[0].used >= v0.seg[0].used + m.bytes);
	/* A second session shares the weights: nothing more is loaded. */
	m2 = model_open(fd2, sid2, "tiny-gpt2");
	assert_memory_equal(m2.fp, m.fp, sizeof(m.fp));
	assert_int_equal(vmu_now(fx).seg[0].used, v1.seg[0].used);
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 1);
	assert_int_equal(holders, 2);

	/* Prefill with the logits; greedy decoding starts at their argmax
	 * and the cache holds every token. */
	c1 = ctx_new(fd, sid, m.model, 0);
	st = prefill(fd, sid, c1, prompt, 4, DJINN_STEP_LOGITS);
	assert_int_equal(st.len, 4);
	assert_true(st.logits != 0);
	tensor_read(fd, sid, st.logits, 0, sizeof(logits), logits);
	for (int i = 1; i < 256; i++)
		if (logits[i] > logits[best])
			best = i;
	tensor_release(fd, sid, st.logits);
	st = decode(fd, sid, c1, 6, NULL, t);
	assert_int_equal(st.nr_tokens, 6);
	assert_int_equal(st.len, 10);
	assert_int_equal(t[0], best);

	/* The cache is what a full prefill computes: prompt + 5 tokens in
	 * another session's context, then one more. */
	memcpy(all, prompt, sizeof(prompt));
	memcpy(all + 4, t, 5 * 4);
	c2 = ctx_new(fd2, sid2, m2.model, 16);
	prefill(fd2, sid2, c2, all, 9, 0);
	decode(fd2, sid2, c2, 1, NULL, u);
	assert_int_equal(u[0], t[5]);
	/* Past max_tokens (10 + 7 > 16): refused, and the context is as
	 * it was. */
	{
		struct djinn_ctx_step st2 = { .ctx = c2, .nr_tokens = 7 };

		call_err(fd2, DJINN_OP_CTX_DECODE, sid2, &st2, sizeof(st2),
			 -ENOSPC, NULL);
		assert_int_equal(decode(fd2, sid2, c2, 1, NULL, u).len, 11);
	}

	/* A fork carries on as its parent does, sampled with the same
	 * seed. */
	{
		struct djinn_ctx_resp fr;
		struct dj_resp r;

		call_ok(fd, DJINN_OP_CTX_FORK, sid, &c1, 8, &r, sizeof(fr));
		memcpy(&fr, r.data, sizeof(fr));
		dj_resp_free(&r);
		assert_int_equal(fr.len, 10);
		c3 = fr.ctx;
	}
	decode(fd, sid, c1, 3, &sp, a);
	decode(fd, sid, c3, 3, &sp, b);
	assert_memory_equal(a, b, sizeof(a));
	/* Reset: empty again, and the same prompt gives the same token. */
	call_void(fd, DJINN_OP_CTX_RESET, sid, &c3, 8);
	prefill(fd, sid, c3, prompt, 4, 0);
	decode(fd, sid, c3, 1, NULL, u);
	assert_int_equal(u[0], t[0]);

	/* Refused, and nothing else changes. */
	{
		struct djinn_model_open o = { "../etc" };
		int32_t bad[2] = { 5, 256 };
		size_t len = sizeof(struct djinn_ctx_step) + sizeof(bad);
		struct djinn_ctx_step *s = calloc(1, len);

		call_err(fd, DJINN_OP_MODEL_OPEN, sid, &o, sizeof(o), -EINVAL,
			 NULL);
		strcpy(o.name, "no-such-model");
		call_err(fd, DJINN_OP_MODEL_OPEN, sid, &o, sizeof(o), -ENOENT,
			 NULL);
		s->ctx = c1;
		s->nr_tokens = 2;
		memcpy(s + 1, bad, sizeof(bad));
		call_err(fd, DJINN_OP_CTX_PREFILL, sid, s, len, -EINVAL, NULL);
		s->ctx = m.model; /* a model handle is not a context */
		call_err(fd, DJINN_OP_CTX_PREFILL, sid, s, len, -ENOENT, NULL);
		s->ctx = c2; /* another session's */
		call_err(fd, DJINN_OP_CTX_PREFILL, sid, s, len, -ENOENT, NULL);
		s->ctx = c1;
		s->nr_tokens = 3; /* the payload holds 2 */
		call_err(fd, DJINN_OP_CTX_PREFILL, sid, s, len, -EINVAL, NULL);
		free(s);
		call_err(fd, DJINN_OP_MODEL_CLOSE, sid, &m.model, 8, -EBUSY,
			 NULL);
		st = decode(fd, sid, c1, 1, NULL, u);
		assert_int_equal(st.len, 14);
	}

	call_void(fd, DJINN_OP_CTX_FREE, sid, &c1, 8);
	call_void(fd, DJINN_OP_CTX_FREE, sid, &c3, 8);
	call_err(fd, DJINN_OP_CTX_FREE, sid, &c1, 8, -ENOENT, NULL);
	call_void(fd, DJINN_OP_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	/* Held by the other session: not evicted. */
	call_err(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0,
		 &(struct djinn_admin_model_evict){ "tiny-gpt2" },
		 sizeof(struct djinn_admin_model_evict), -EBUSY, NULL);
	close_session(fd2, sid2); /* its context and model go with it */
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 1);
	assert_int_equal(holders, 0);
	call_void(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "tiny-gpt2" },
		  sizeof(struct djinn_admin_model_evict));
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 0);
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Models: breakpoints, steering, corrupt files */

/* A PREFILL (@in, @n) or DECODE (@n) with @brk; the answer, whatever its
 * state, its tokens into @out. */
static struct djinn_ctx_step_resp
brk_step_at(int line, int fd, uint64_t sid, uint16_t op, uint64_t ctx,
	    const int32_t *in, uint32_t n, uint32_t brk, uint32_t flags,
	    const struct djinn_sampling *sp, int32_t *out)
{
	size_t len = sizeof(struct djinn_ctx_step) +
		     (op == DJINN_OP_CTX_PREFILL ? n * 4 : 0);
	struct djinn_ctx_step *st = xmalloc(len);
	struct djinn_ctx_step_resp resp;
	struct dj_resp r;

	memset(st, 0, sizeof(*st));
	st->ctx = ctx;
	st->nr_tokens = n;
	st->flags = flags;
	st->break_layer = brk;
	if (sp)
		st->sampling = *sp;
	if (op == DJINN_OP_CTX_PREFILL)
		memcpy(st + 1, in, n * 4);
	call_ok_at(line, fd, op, sid, st, len, &r, -1);
	free(st);
	memcpy(&resp, r.data, sizeof(resp));
	if (r.len != sizeof(resp) + ((resp.nr_tokens * 4 + 7) & ~7u))
		fail_msg("line %d: %u tokens in %llu bytes", line,
			 resp.nr_tokens, (unsigned long long)r.len);
	if (out)
		memcpy(out, r.data + sizeof(resp), resp.nr_tokens * 4);
	dj_resp_free(&r);
	return resp;
}

static struct djinn_ctx_step_resp resume_at(int line, int fd, uint64_t sid,
					    uint64_t ctx, uint64_t hidden,
					    int32_t *out)
{
	struct djinn_ctx_resume rq = { .ctx = ctx, .hidden = hidden };
	struct djinn_ctx_step_resp resp;
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_OP_CTX_RESUME, sid, &rq, sizeof(rq), &r, -1);
	memcpy(&resp, r.data, sizeof(resp));
	if (r.len != sizeof(resp) + ((resp.nr_tokens * 4 + 7) & ~7u))
		fail_msg("line %d: %u tokens in %llu bytes", line,
			 resp.nr_tokens, (unsigned long long)r.len);
	if (out)
		memcpy(out, r.data + sizeof(resp), resp.nr_tokens * 4);
	dj_resp_free(&r);
	return resp;
}
#define resume(fd, sid, ctx, hidden, out) \
	resume_at(__LINE__, fd, sid, ctx, hidden, out)

/* A paused answer: after @layer, @T rows of hidden state (f32, C 64). */
static void paused_at(int line, const struct djinn_ctx_step_resp *st,
		      uint32_t layer, uint32_t len)
{
	if (st->state != DJINN_CTX_PAUSED || st->layer != layer ||
	    !st->hidden || st->logits || st->len != len)
		fail_msg("line %d: state %u layer %u hidden %#llx logits "
			 "%#llx len %u; want paused after %u with %u",
			 line, st->state, st->layer,
			 (unsigned long long)st->hidden,
			 (unsigned long long)st->logits, st->len, layer, len);
}
#define paused(st, layer, len) paused_at(__LINE__, st, layer, len)

/* 18b. Breakpoints: a prefill and a decode that pause after a layer give
 * the hidden state as a tensor, refuse other steps meanwhile while other
 * sessions run, and resumed unchanged give the same logits and tokens;
 * a steering tensor replaces the state (the same bits: the same logits;
 * others: others); reset and free abandon; bad requests refused. */
static void test_model_breakpoints(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	const struct djinn_sampling sp = {
		.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7
	};
	struct djinn_tensor_desc d = F32(4, 64), hd;
	float want[256], got[256], hid[4 * 64], x[4 * 64];
	int32_t t[6], u[6], ts[6], us[6], v[2];
	struct djinn_ctx_step_resp st;
	struct djinn_model_resp m, m2;
	uint64_t sid, sid2, c1, c2, c3, cb, xt, bad;
	int pauses = 0;

	assert_int_equal(djd_make_model(&fx->d, "brk", TINY_GPT2), 0);
	sid = open_session(fd, "brk-a");
	sid2 = open_session(fd2, "brk-b");
	m = model_open(fd, sid, "brk");
	m2 = model_open(fd2, sid2, "brk");

	/* without breaks: the logits after the prompt, 6 greedy tokens,
	 * 6 seeded ones */
	c1 = ctx_new(fd, sid, m.model, 32);
	st = prefill(fd, sid, c1, prompt, 4, DJINN_STEP_LOGITS);
	tensor_read(fd, sid, st.logits, 0, sizeof(want), want);
	tensor_release(fd, sid, st.logits);
	decode(fd, sid, c1, 6, NULL, t);
	call_void(fd, DJINN_OP_CTX_RESET, sid, &c1, 8);
	prefill(fd, sid, c1, prompt, 4, 0);
	decode(fd, sid, c1, 6, &sp, ts);

	/* a prefill that pauses after layer 0 */
	c2 = ctx_new(fd, sid, m.model, 32);
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, c2, prompt, 4,
			 1, DJINN_STEP_LOGITS, NULL, NULL);
	paused(&st, 0, 0);
	assert_int_equal(st.nr_tokens, 0);
	tensor_read(fd, sid, st.hidden, 0, sizeof(hid), hid);
	tensor_release(fd, sid, st.hidden);
	/* meanwhile: the context refuses steps, forks and breaks past the
	 * last layer; other contexts and sessions run */
	brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, c1, prompt, 1, 0,
		    0, NULL, NULL);
	{
		struct djinn_ctx_step s = { .ctx = c2, .nr_tokens = 1 };
		uint8_t buf[sizeof(s) + 8];

		memcpy(buf, &s, sizeof(s));
		memcpy(buf + sizeof(s), prompt, 4);
		call_err(fd, DJINN_OP_CTX_PREFILL, sid, buf, sizeof(s) + 4,
			 -EBUSY, "paused after layer 0");
		call_err(fd, DJINN_OP_CTX_DECODE, sid, &s, sizeof(s), -EBUSY,
			 "paused after layer 0");
		s.ctx = c1;
		s.break_layer = 3;
		call_err(fd, DJINN_OP_CTX_DECODE, sid, &s, sizeof(s), -EINVAL,
			 "has layers 0 to 1");
	}
	call_err(fd, DJINN_OP_CTX_FORK, sid, &c2, 8, -EBUSY, "paused");
	cb = ctx_new(fd2, sid2, m2.model, 32);
	prefill(fd2, sid2, cb, prompt, 4, 0);
	decode(fd2, sid2, cb, 6, NULL, u);
	assert_memory_equal(u, t, sizeof(t));
	/* resumed unchanged: the same logits, bit for bit */
	st = resume(fd, sid, c2, 0, NULL);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_int_equal(st.len, 4);
	assert_int_equal(st.hidden, 0);
	assert_true(st.logits != 0);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_equal(got, want, sizeof(want));
	call_err(fd, DJINN_OP_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c2 }),
		 sizeof(struct djinn_ctx_resume), -EBUSY, "not paused");

	/* a greedy decode pausing after layer 1 at every token: the
	 * tokens so far at each pause, the same six at the end */
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_DECODE, c2, NULL, 6, 2,
			 0, NULL, u);
	while (st.state == DJINN_CTX_PAUSED) {
		paused(&st, 1, 4 + pauses);
		assert_int_equal(st.nr_tokens, ++pauses);
		assert_memory_equal(u, t, pauses * 4);
		tensor_release(fd, sid, st.hidden);
		st = resume(fd, sid, c2, 0, u);
	}
	assert_int_equal(pauses, 6);
	assert_int_equal(st.nr_tokens, 6);
	assert_int_equal(st.len, 10);
	assert_memory_equal(u, t, sizeof(t));
	/* seeded, pausing after layer 0: the same tokens too */
	call_void(fd, DJINN_OP_CTX_RESET, sid, &c2, 8);
	prefill(fd, sid, c2, prompt, 4, 0);
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_DECODE, c2, NULL, 6, 1,
			 0, &sp, us);
	for (pauses = 0; st.state == DJINN_CTX_PAUSED; pauses++) {
		tensor_release(fd, sid, st.hidden);
		st = resume(fd, sid, c2, 0, us);
	}
	assert_int_equal(pauses, 6);
	assert_memory_equal(us, ts, sizeof(ts));

	/* steering: a tensor of the paused state's own bytes gives the
	 * same logits; a wrong shape is refused and it stays paused;
	 * other values give other logits */
	c3 = ctx_new(fd, sid, m.model, 32);
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, c3, prompt, 4,
			 1, DJINN_STEP_LOGITS, NULL, NULL);
	paused(&st, 0, 0);
	tensor_read(fd, sid, st.hidden, 0, sizeof(x), x);
	assert_memory_equal(x, hid, sizeof(x)); /* as the first time */
	tensor_release(fd, sid, st.hidden);
	xt = create_data(fd, sid, &d, hid, sizeof(hid));
	hd = F32(4, 32);
	bad = create_data(fd, sid, &hd, hid, 4 * 32 * 4);
	call_err(fd, DJINN_OP_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c3, .hidden = bad }),
		 sizeof(struct djinn_ctx_resume), -EINVAL,
		 "the hidden state is (4, 64)");
	call_err(fd, DJINN_OP_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c3, .hidden = 12345 }),
		 sizeof(struct djinn_ctx_resume), -ENOENT, "no tensor");
	st = resume(fd, sid, c3, xt, NULL);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_equal(got, want, sizeof(want));
	for (int i = 0; i < 4 * 64; i++)
		x[i] = hid[i] + (float)sin(i);
	tensor_write(fd, sid, xt, 0, x, sizeof(x));
	call_void(fd, DJINN_OP_CTX_RESET, sid, &c3, 8);
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, c3, prompt, 4,
			 1, DJINN_STEP_LOGITS, NULL, NULL);
	tensor_release(fd, sid, st.hidden);
	st = resume(fd, sid, c3, xt, NULL);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_not_equal(got, want, sizeof(want));
	tensor_release(fd, sid, xt);
	tensor_release(fd, sid, bad);

	/* pipelined: a prefill sent right behind one that pauses sees the
	 * pause, and a resume sent behind both finishes the first */
	{
		struct {
			struct djinn_ctx_step s;
			int32_t tok[4];
		} a = { .s = { .ctx = c3, .nr_tokens = 4, .break_layer = 1 } },
		  b = { .s = { .ctx = c3, .nr_tokens = 4 } };
		struct djinn_ctx_resume rs = { .ctx = c3 };
		uint64_t id[3] = { dj_next_id(), dj_next_id(), dj_next_id() };
		struct djinn_ctx_step_resp ra, rc;
		bool seen[3] = { false };

		memcpy(a.tok, prompt, sizeof(prompt));
		memcpy(b.tok, prompt, sizeof(prompt));
		assert_int_equal(dj_send(fd, DJINN_OP_CTX_PREFILL, id[0], sid,
					 &a, sizeof(a)),
				 0);
		assert_int_equal(dj_send(fd, DJINN_OP_CTX_PREFILL, id[1], sid,
					 &b, sizeof(b)),
				 0);
		assert_int_equal(dj_send(fd, DJINN_OP_CTX_RESUME, id[2], sid,
					 &rs, sizeof(rs)),
				 0);
		for (int k = 0; k < 3; k++) {
			struct dj_resp r;
			int i;

			assert_int_equal(dj_recv(fd, &r, 10000), 1);
			for (i = 0; i < 2 && r.hdr.request_id != id[i]; i++)
				;
			assert_int_equal(r.hdr.request_id, id[i]);
			assert_false(seen[i]);
			seen[i] = true;
			if (i == 1) {
				expect_error(&r, -EBUSY,
					     "paused after layer 0");
			} else {
				assert_int_equal(r.error, 0);
				memcpy(i ? &rc : &ra, r.data, sizeof(ra));
			}
			dj_resp_free(&r);
		}
		paused(&ra, 0, 4);
		tensor_release(fd, sid, ra.hidden);
		assert_int_equal(rc.state, DJINN_CTX_DONE);
		assert_int_equal(rc.len, 8);
		call_void(fd, DJINN_OP_CTX_RESET, sid, &c3, 8);
		prefill(fd, sid, c3, prompt, 4, 0);
	}

	/* reset abandons a paused step; free a paused context */
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_PREFILL, c3, prompt, 4,
			 2, 0, NULL, NULL);
	paused(&st, 1, 4);
	tensor_release(fd, sid, st.hidden);
	call_void(fd, DJINN_OP_CTX_RESET, sid, &c3, 8);
	st = prefill(fd, sid, c3, prompt, 4, 0);
	assert_int_equal(st.len, 4);
	decode(fd, sid, c3, 2, NULL, v);
	assert_memory_equal(v, t, sizeof(v));
	st = brk_step_at(__LINE__, fd, sid, DJINN_OP_CTX_DECODE, c3, NULL, 2, 1,
			 0, NULL, v);
	paused(&st, 0, 6);
	tensor_release(fd, sid, st.hidden);
	call_void(fd, DJINN_OP_CTX_FREE, sid, &c3, 8);

	call_void(fd, DJINN_OP_CTX_FREE, sid, &c1, 8);
	call_void(fd, DJINN_OP_CTX_FREE, sid, &c2, 8);
	call_void(fd, DJINN_OP_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	call_void(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "brk" },
		  sizeof(struct djinn_admin_model_evict));
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* Run @script (Python) on @fx's model @name's model.safetensors. */
static void corrupt_model(struct fx *fx, const char *name, const char *script)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "python3 - '%s/models/%s/model.safetensors' <<'EOF'\n"
		 "import json, struct, sys\n"
		 "p = sys.argv[1]\n"
		 "b = bytearray(open(p, 'rb').read())\n"
		 "n = struct.unpack('<Q', b[:8])[0]\n"
		 "h = json.loads(b[8:8 + n])\n"
		 "%s\n"
		 "EOF",
		 fx->d.dir, name, script);
	assert_int_equal(system(cmd), 0);
}

/* 18c. Corrupt models in the model directory are refused at MODEL_OPEN
 * with a message naming the file and the fault, and the daemon keeps
 * serving another session's model meanwhile. */
static void test_model_corrupt(void **state)
{
	static const struct {
		const char *name, *script, *words;
		int err;
	} bad[] = {
		{ "truncated", "open(p, 'wb').write(b[:-5])",
		  "truncated/model.safetensors: tensor 'ln_f.bias': "
		  "data_offsets [298496, 298752) past the data's 298747 bytes",
		  -EINVAL },
		{ "overlap",
		  /* the second tensor's bytes start inside the first's */
		  "ks = sorted((k for k in h if k != '__metadata__'),\n"
		  "            key=lambda k: h[k]['data_offsets'][0])\n"
		  "a, z = h[ks[0]]['data_offsets'], h[ks[1]]['data_offsets']\n"
		  "h[ks[1]]['data_offsets'] = [z[0] - 4, z[1] - 4]\n"
		  "j = json.dumps(h).encode()\n"
		  "j += b' ' * (-len(j) % 8)\n"
		  "open(p, 'wb').write(struct.pack('<Q', len(j)) + j +\n"
		  "                    b[8 + n:])",
		  "overlap tensor", -EINVAL },
		{ "huge",
		  "b[:8] = struct.pack('<Q', 1 << 40)\n"
		  "open(p, 'wb').write(b)",
		  "huge/model.safetensors: header length 1099511627776 over "
		  "the limit",
		  -E2BIG },
	};
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[3] = { 7, 8, 9 };
	struct djinn_model_resp m;
	int32_t t[2], u[2];
	uint64_t sid, sid2, c;

	assert_int_equal(djd_make_model(&fx->d, "good", TINY_GPT2), 0);
	sid = open_session(fd, "corrupt-a");
	sid2 = open_session(fd2, "corrupt-b");
	m = model_open(fd2, sid2, "good");
	c = ctx_new(fd2, sid2, m.model, 16);
	prefill(fd2, sid2, c, prompt, 3, 0);
	decode(fd2, sid2, c, 2, NULL, t);
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		struct djinn_model_open o = { { 0 } };
		uint32_t holders;

		assert_int_equal(djd_make_model(&fx->d, bad[i].name,
						"--layers 1 --seed 4"),
				 0);
		corrupt_model(fx, bad[i].name, bad[i].script);
		strcpy(o.name, bad[i].name);
		call_err(fd, DJINN_OP_MODEL_OPEN, sid, &o, sizeof(o),
			 bad[i].err, bad[i].words);
		/* twice: nothing was left behind by the first */
		call_err(fd, DJINN_OP_MODEL_OPEN, sid, &o, sizeof(o),
			 bad[i].err, bad[i].words);
		assert_int_equal(models_listed(fx, bad[i].name, &holders), 0);
		/* the other session still runs, the same as before */
		call_void(fd2, DJINN_OP_CTX_RESET, sid2, &c, 8);
		prefill(fd2, sid2, c, prompt, 3, 0);
		decode(fd2, sid2, c, 2, NULL, u);
		assert_memory_equal(u, t, sizeof(t));
	}
	call_void(fd2, DJINN_OP_CTX_FREE, sid2, &c, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	call_void(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "good" },
		  sizeof(struct djinn_admin_model_evict));
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* The bytes of @fx's model @name's @file. */
static uint8_t *model_file_read(struct fx *fx, const char *name,
				const char *file, size_t *len)
{
	char path[PATH_MAX];
	uint8_t *buf;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/models/%s/%s", fx->d.dir, name, file);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = xmalloc((size_t)n);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* A text tensor (U8, one dim) of @len bytes at @data, by SHA-256: looked
 * up first (-ENOENT the first time), then created. */
static uint64_t text_file_at(int line, int fd, uint64_t sid,
			     const uint8_t *data, size_t len, uint8_t *fp)
{
	struct djinn_text_lookup lk = { .desc = DESC(DJINN_DTYPE_U8, len) };
	uint32_t flags;

	sha256(data, len, fp);
	memcpy(lk.fp, fp, DJINN_FP_LEN);
	call_err_at(line, fd, DJINN_OP_TEXT_LOOKUP, sid, &lk, sizeof(lk),
		    -ENOENT, NULL);
	return create_at(line, fd, sid, &lk.desc, DJINN_SEG_TEXT, fp, data, len,
			 &flags);
}
#define text_file(fd, sid, data, len, fp) \
	text_file_at(__LINE__, fd, sid, data, len, fp)

/* MODEL_OPEN_UPLOADED of config @cfg and one file @w (handles 0: by
 * fingerprint); 0 and the answer in @m, or the error (@phrase in its
 * message). */
static int upload_open_at(int line, int fd, uint64_t sid,
			  const struct djinn_model_file *cfg,
			  const struct djinn_model_file *w,
			  struct djinn_model_resp *m, int err,
			  const char *phrase)
{
	struct djinn_model_upload u = { .nr_files = 1, .config = *cfg };
	uint8_t rq[sizeof(u) + sizeof(*w)];
	struct dj_resp r;

	memcpy(rq, &u, sizeof(u));
	memcpy(rq + sizeof(u), w, sizeof(*w));

	if (err) {
		call_err_at(line, fd, DJINN_OP_MODEL_OPEN_UPLOADED, sid, &rq,
			    sizeof(rq), err, phrase);
		return err;
	}
	call_ok_at(line, fd, DJINN_OP_MODEL_OPEN_UPLOADED, sid, &rq, sizeof(rq),
		   &r, sizeof(*m));
	memcpy(m, r.data, sizeof(*m));
	dj_resp_free(&r);
	return 0;
}
#define upload_open(fd, sid, cfg, w, m, err, phrase) \
	upload_open_at(__LINE__, fd, sid, cfg, w, m, err, phrase)

/* 18d. Uploaded models: a client sends config.json and the safetensors
 * as text tensors, found by fingerprint first; the model is listed as
 * upload-HEX, its weights the same text entry as the directory model
 * with those files, and it generates the same tokens; a second session
 * opens it by fingerprints alone; bad uploads are refused precisely. */
static void test_model_upload(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	struct djinn_model_file cfg = { 0 }, w = { 0 }, fpcfg, fpw, x;
	struct djinn_model_resp m, md, m2;
	size_t clen, wlen;
	uint8_t *cb, *wb, src[DJINN_FP_LEN], both[2 * DJINN_FP_LEN];
	uint64_t sid, sid2, ctx, t1, t2, data;
	int32_t tu[6], td[6];
	char name[64];
	uint32_t holders, flags;
	uint64_t used;

	assert_int_equal(djd_make_model(&fx->d, "src", TINY_GPT2), 0);
	cb = model_file_read(fx, "src", "config.json", &clen);
	wb = model_file_read(fx, "src", "model.safetensors", &wlen);
	sid = open_session(fd, "upload-a");
	sid2 = open_session(fd2, "upload-b");

	/* by fingerprint: not loaded yet */
	sha256(cb, clen, fpcfg.fp);
	sha256(wb, wlen, fpw.fp);
	fpcfg.handle = fpw.handle = 0;
	upload_open(fd, sid, &fpcfg, &fpw, &m, -ENOENT,
		    "not uploaded: send its files");
	/* send the files, open with their handles */
	t1 = text_file(fd, sid, cb, clen, cfg.fp);
	t2 = text_file(fd, sid, wb, wlen, w.fp);
	cfg.handle = t1;
	w.handle = t2;
	upload_open(fd, sid, &cfg, &w, &m, 0, NULL);
	assert_int_equal(m.arch, DJINN_ARCH_GPT2);
	assert_int_equal(m.n_layer, 2);
	assert_int_equal(m.hidden, 64);
	memcpy(both, cfg.fp, DJINN_FP_LEN);
	memcpy(both + DJINN_FP_LEN, w.fp, DJINN_FP_LEN);
	sha256(both, sizeof(both), src);
	snprintf(name, sizeof(name), "upload-");
	for (int i = 0; i < 8; i++)
		snprintf(name + 7 + 2 * i, 3, "%02x", src[i]);
	assert_int_equal(models_listed(fx, name, &holders), 1);
	assert_int_equal(holders, 1);
	/* the file tensors may go; the directory's model with the same
	 * files is the same text entry: nothing more is loaded */
	tensor_release(fd, sid, t1);
	tensor_release(fd, sid, t2);
	used = vmu_now(fx).seg[0].used;
	md = model_open(fd2, sid2, "src");
	assert_memory_equal(md.fp, m.fp, sizeof(m.fp));
	assert_int_equal(vmu_now(fx).seg[0].used, used);
	/* and they generate the same tokens */
	ctx = ctx_new(fd, sid, m.model, 16);
	prefill(fd, sid, ctx, prompt, 4, 0);
	decode(fd, sid, ctx, 6, NULL, tu);
	call_void(fd, DJINN_OP_CTX_FREE, sid, &ctx, 8);
	ctx = ctx_new(fd2, sid2, md.model, 16);
	prefill(fd2, sid2, ctx, prompt, 4, 0);
	decode(fd2, sid2, ctx, 6, NULL, td);
	call_void(fd2, DJINN_OP_CTX_FREE, sid2, &ctx, 8);
	assert_memory_equal(tu, td, sizeof(tu));
	/* another session: fingerprints only */
	upload_open(fd2, sid2, &fpcfg, &fpw, &m2, 0, NULL);
	assert_memory_equal(m2.fp, m.fp, sizeof(m.fp));
	assert_int_equal(models_listed(fx, name, &holders), 1);
	assert_int_equal(holders, 2);

	/* refused */
	{
		struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, clen);
		struct djinn_model_upload u = { .nr_files = 0 };

		call_err(fd, DJINN_OP_MODEL_OPEN_UPLOADED, sid, &u, sizeof(u),
			 -EINVAL, "1 to 64 files");
		data = create_data(fd, sid, &d, cb, clen);
		x = (struct djinn_model_file){ .handle = data };
		memcpy(x.fp, cfg.fp, DJINN_FP_LEN);
		t2 = text_file_at(__LINE__, fd, sid, wb, wlen - 1, w.fp);
		w.handle = t2;
		upload_open(fd, sid, &x, &w, &m2, -EINVAL,
			    "config.json: tensor");
		/* another file's fingerprint than the tensor's */
		t1 = create_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, cfg.fp,
			       cb, clen, &flags);
		x = (struct djinn_model_file){ .handle = t1 };
		memcpy(x.fp, fpw.fp, DJINN_FP_LEN);
		upload_open(fd, sid, &x, &w, &m2, -EINVAL,
			    "has another fingerprint");
		/* a handle and a fingerprint alone */
		upload_open(fd, sid, &cfg, &fpw, &m2, -EINVAL,
			    "every handle 0");
		/* a truncated file: the parser's message, naming it */
		cfg.handle = t1;
		upload_open(fd, sid, &cfg, &w, &m2, -EINVAL,
			    ": file 0: tensor 'ln_f.bias': data_offsets");
		tensor_release(fd, sid, data);
		tensor_release(fd, sid, t1);
		tensor_release(fd, sid, t2);
	}

	call_void(fd, DJINN_OP_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	{
		struct djinn_admin_model_evict e = { { 0 } };

		strcpy(e.name, name);
		call_void(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0, &e,
			  sizeof(e));
		memset(&e, 0, sizeof(e));
		strcpy(e.name, "src");
		call_void(fx->adm, DJINN_OP_ADMIN_MODEL_EVICT, 0, &e,
			  sizeof(e));
	}
	free(cb);
	free(wb);
	close(fd);
	close(fd2);
	/* The file tensors' text may stay cached, unreferenced and
	 * reclaimable (as in test_text): not a leak. */
	{
		struct djinn_admin_vmu v = vmu_now(fx);
		char why[256];

		assert_int_equal(v.seg[1].used, fx->base.seg[1].used);
		v.committed -= v.seg[0].used;
		v.seg[0].used = fx->base.seg[0].used;
		if (vmu_diff(&fx->base, &v, why, sizeof(why)))
			fail_msg("after the upload: %s", why);
		fx->base = vmu_now(fx);
	}
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
		T(test_hello),
		T(test_version_mismatch),
		T(test_bad_magic),
		T(test_oversize),
		T(test_unknown_opcode),
		T(test_reserved_header),
		T(test_truncated),
		T(test_wrong_size),
		T(test_sessions),
		T(test_signal),
		T(test_tensors),
		T(test_large_read),
		T(test_many_reads),
		T(test_mem_prepared),
		T(test_half_close),
		T(test_tensor_bad),
		T(test_tensor_too_big),
		T(test_text),
		T(test_graph_mlp),
		T(test_graph_gpt2_block),
		T(test_graph_pipelined),
		T(test_graph_bad),
		T(test_graph_cancel),
		T(test_graph_too_big),
		T(test_in_flight),
		T(test_lease_expiry),
		T(test_client_killed),
		cmocka_unit_test_setup_teardown(test_concurrent_clients,
						fx_setup_1g, fx_teardown),
		T(test_admin),
		T(test_kill_mid_upload),
		T(test_admin_perm),
		cmocka_unit_test_setup_teardown(
			test_unread_replies, fx_setup_short_lease, fx_teardown),
		cmocka_unit_test_setup_teardown(test_sessions_per_uid,
						fx_setup_uid_cap, fx_teardown),
		T(test_metrics),
		T(test_models),
		T(test_model_breakpoints),
		T(test_model_corrupt),
		T(test_model_upload),
		T(test_daemon_stop),
#undef T
	};
	int ret;

	signal(SIGPIPE, SIG_IGN);
	if (getenv("DJINN_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DJINN_TEST_FILTER"));
	/* A daemon that cannot run here (no io_uring: an old kernel, a
	 * seccomp filter) is a skip, said so; any other failure fails. */
	ret = djd_can_run(DEV_MEM);
	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd", tests, NULL, NULL);
}
