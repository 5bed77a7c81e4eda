// SPDX-License-Identifier: MIT
/*
 * The raw-protocol tests' fixture and calls that assert; see fixture.h.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "array_size.h"
#include "daemon.h"
#include "fixture.h"
#include "../unit/testutil.h"

/* ---------------------------------------------------------------------- */
/* Calls that assert */

int xconnect_at(int line, const char *path)
{
	int fd = dj_connect(path);

	if (fd < 0)
		fail_msg("line %d: connect %s: %s", line, path, strerror(-fd));
	return fd;
}

const char *ret_str(int ret)
{
	return ret == 0 ? "EOF" : ret < 0 ? strerror(-ret) : "ok";
}

void call_ok_at(int line, int fd, uint16_t op, uint64_t sid, const void *p,
		size_t len, struct dj_resp *r, long want_len)
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

void expect_error_at(int line, const struct dj_resp *r, int err,
		     const char *phrase)
{
	if (!(r->hdr.flags & DJINN_F_ERROR))
		fail_msg("line %d: op %u succeeded, want error %d (%s)", line,
			 r->hdr.type, err, strerror(-err));
	if (r->error != err)
		fail_msg("line %d: op %u: error %d (%s) \"%s\", want %d (%s)",
			 line, r->hdr.type, r->error, strerror(-r->error),
			 r->msg, err, strerror(-err));
	if (phrase && !strstr(r->msg, phrase))
		fail_msg("line %d: op %u: error %d message \"%s\" lacks \"%s\"",
			 line, r->hdr.type, err, r->msg, phrase);
	if (!r->msg[0])
		fail_msg("line %d: op %u: error %d without a message", line,
			 r->hdr.type, err);
}

void call_err_at(int line, int fd, uint16_t op, uint64_t sid, const void *p,
		 size_t len, int err, const char *phrase)
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

void raw_err_at(int line, int fd, const struct djinn_hdr *h, const void *p,
		size_t len, int err, const char *phrase)
{
	struct dj_resp r;
	int ret = dj_send_raw(fd, h, p, len);

	if (ret)
		fail_msg("line %d: send: %s", line, strerror(-ret));
	ret = dj_recv(fd, &r, DJ_TIMEOUT_MS);
	if (ret != 1)
		fail_msg("line %d: op %u: no response (%d, %s)", line, h->type,
			 ret, ret_str(ret));
	if (r.hdr.request_id != h->request_id || r.hdr.type != h->type ||
	    r.hdr.session_id != h->session_id)
		fail_msg("line %d: response is request %llu op %u session "
			 "%llu, want %llu op %u session %llu",
			 line, (unsigned long long)r.hdr.request_id, r.hdr.type,
			 (unsigned long long)r.hdr.session_id,
			 (unsigned long long)h->request_id, h->type,
			 (unsigned long long)h->session_id);
	expect_error_at(line, &r, err, phrase);
	dj_resp_free(&r);
}

void expect_eof_at(int line, int fd)
{
	int ret = dj_wait_eof(fd, 5000);

	if (ret != 1)
		fail_msg("line %d: connection not closed by the daemon (%d)",
			 line, ret);
}

void hello_at(int line, int fd)
{
	struct djinn_hello_resp h;
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_MSG_HELLO, 0, NULL, 0, &r, sizeof(h));
	memcpy(&h, r.data, sizeof(h));
	dj_resp_free(&r);
	if (h.version != DJINN_PROTO_VERSION)
		fail_msg("line %d: HELLO version %u", line, h.version);
}

/* ---------------------------------------------------------------------- */
/* The fixture: one daemon per test */

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

const char *vmu_diff(const struct djinn_admin_vmu *a,
		     const struct djinn_admin_vmu *b, char *why, size_t len)
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
	if (quiet_call(fd, DJINN_MSG_HELLO, &h, sizeof(h), why, len)) {
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
	if (quiet_call(afd, DJINN_MSG_ADMIN_SESSIONS, n, sizeof(n), why, len) ||
	    quiet_call(afd, DJINN_MSG_ADMIN_VMU, &v, sizeof(v), why, len))
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

/*
 * health() until it holds, WAIT_MS at most: what a test let go of may be
 * freed after the answer it saw. The daemon reads a closed connection's
 * end when it comes to it, and a session's memory goes with its last
 * reference, which a job or a reply still being sent may hold. 0, or -1
 * with the last reason in @why.
 */
static int health_wait(struct fx *fx, long nr_sessions,
		       const struct djinn_admin_vmu *want, char *why,
		       size_t len)
{
	return wait_until(!health(fx, nr_sessions, want, why, len), WAIT_MS) ?
		       0 :
		       -1;
}

void check_health_at(int line, struct fx *fx, long nr_sessions,
		     const struct djinn_admin_vmu *want)
{
	char why[256];

	if (health_wait(fx, nr_sessions, want, why, sizeof(why)))
		fail_msg("line %d: after the test step, for %d ms: %s", line,
			 WAIT_MS, why);
}

/* The VMU at the baseline but for the text segment: 0, or -1 with why. */
static int text_cached(struct fx *fx, char *why, size_t len)
{
	struct djinn_admin_vmu v = vmu_now(fx);

	if (v.seg[1].used != fx->base.seg[1].used) {
		snprintf(why, len, "data segment %llu bytes, was %llu",
			 (unsigned long long)v.seg[1].used,
			 (unsigned long long)fx->base.seg[1].used);
		return -1;
	}
	v.committed -= v.seg[0].used;
	v.seg[0].used = fx->base.seg[0].used;
	return vmu_diff(&fx->base, &v, why, len) ? -1 : 0;
}

void check_text_cached_at(int line, struct fx *fx)
{
	char why[256];

	/* (as check_health_at() waits) */
	if (!wait_until(!text_cached(fx, why, sizeof(why)), WAIT_MS))
		fail_msg("line %d: after text, for %d ms: %s", line, WAIT_MS,
			 why);
	fx->base = vmu_now(fx);
}

int fx_start_set(void **state, const char *mem, unsigned int lease_ms,
		 const char *set)
{
	const char *extra[] = { "--set", set, NULL };

	return fx_start_args(state, mem, lease_ms, set ? extra : NULL);
}

int fx_start_args(void **state, const char *mem, unsigned int lease_ms,
		  const char *const *extra)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char why[256];
	int fd;

	if (!fx)
		return -1;
	fx->adm = -1;
	if (djd_start_args(&fx->d, mem, lease_ms, extra)) {
		free(fx);
		return -1;
	}
	fd = dj_connect(fx->d.sock);
	fx->adm = dj_connect(fx->d.admin);
	if (fd < 0 || fx->adm < 0 ||
	    quiet_call(fd, DJINN_MSG_HELLO, &fx->hello, sizeof(fx->hello), why,
		       sizeof(why)) ||
	    quiet_call(fx->adm, DJINN_MSG_ADMIN_VMU, &fx->base,
		       sizeof(fx->base), why, sizeof(why))) {
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

int fx_start(void **state, const char *mem, unsigned int lease_ms)
{
	return fx_start_set(state, mem, lease_ms, NULL);
}

int fx_setup(void **state)
{
	return fx_start(state, DEV_MEM, 10000);
}

int fx_teardown(void **state)
{
	struct fx *fx = *state;
	char why[256] = "";
	int bad = 0, ret = 0;

	if (!fx->stopped) {
		bad = health_wait(fx, 0, &fx->base, why, sizeof(why));
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

int fx_can_run(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (getenv("DJINN_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DJINN_TEST_FILTER"));
	/* A daemon that cannot run here (io_uring off: an old kernel, a
	 * seccomp filter) is a skip, said so; any other failure fails. */
	return djd_can_run(DEV_MEM);
}

/* ---------------------------------------------------------------------- */
/* Admin queries */

struct djinn_admin_vmu vmu_now(struct fx *fx)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	call_ok(fx->adm, DJINN_MSG_ADMIN_VMU, 0, NULL, 0, &r, sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

struct djinn_admin_stats stats_now(struct fx *fx)
{
	struct djinn_admin_stats st;
	struct dj_resp r;

	call_ok(fx->adm, DJINN_MSG_ADMIN_STATS, 0, NULL, 0, &r, sizeof(st));
	memcpy(&st, r.data, sizeof(st));
	dj_resp_free(&r);
	return st;
}

char *metrics_scrape(struct fx *fx)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
	int fd = dj_connect_tcp(fx->d.metrics_port);
	char *buf;

	assert_true(fd >= 0);
	assert_int_equal(dj_write(fd, req, sizeof(req) - 1, DJ_TIMEOUT_MS), 0);
	buf = dj_read_all(fd, DJ_TIMEOUT_MS);
	close(fd);
	assert_non_null(buf);
	return buf;
}

int64_t metrics_value(const char *m, const char *series)
{
	size_t n = strlen(series);
	const char *p = m;

	while ((p = strstr(p, series))) {
		if ((p == m || p[-1] == '\n') && p[n] == ' ')
			return strtoll(p + n + 1, NULL, 10);
		p += n;
	}
	return -1;
}

uint32_t sessions_now(struct fx *fx, struct djinn_admin_session **list)
{
	struct dj_resp r;
	uint32_t n[2];

	call_ok(fx->adm, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, &r, -1);
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

struct djinn_admin_session session_entry(struct fx *fx, uint64_t id)
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

int64_t wait_for_at(int line, struct fx *fx, uint32_t n, uint64_t data, int ms)
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

void wait_charged_at(int line, struct fx *fx, uint64_t sid, uint64_t bytes,
		     int ms)
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

uint64_t granules(const struct fx *fx, uint64_t bytes)
{
	uint64_t g = fx->hello.granularity;

	return (bytes + g - 1) / g * g;
}

/* ---------------------------------------------------------------------- */
/* Sessions and tensors */

uint64_t open_at(int line, int fd, const char *tenant, uint32_t prio,
		 uint64_t lease_ns, struct djinn_session_resp *out)
{
	struct djinn_session_open o = { .priority = prio,
					.lease_ns = lease_ns };
	struct djinn_session_resp s;
	struct dj_resp r;

	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	call_ok_at(line, fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r,
		   sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	if (!s.session_id)
		fail_msg("line %d: session id 0", line);
	if (out)
		*out = s;
	return s.session_id;
}

struct djinn_tensor_desc desc_make(uint8_t dtype, unsigned int ndim,
				   const uint64_t *dims)
{
	struct djinn_tensor_desc d = { .dtype = dtype, .ndim = (uint8_t)ndim };

	for (unsigned int i = 0; i < ndim && i < DJINN_MAX_DIMS; i++)
		d.dims[i] = dims[i];
	return d;
}

uint64_t desc_bytes(const struct djinn_tensor_desc *d)
{
	static const uint64_t size[] = { 0, 4, 2, 2, 4, 8, 1 };
	uint64_t n = d->dtype < ARRAY_SIZE(size) ? size[d->dtype] : 0;

	for (unsigned int i = 0; i < d->ndim; i++)
		n *= d->dims[i];
	return n;
}

uint8_t *create_payload(const struct djinn_tensor_desc *d, uint32_t seg,
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

void create_try_at(int line, int fd, uint64_t sid,
		   const struct djinn_tensor_desc *d, uint32_t seg,
		   const uint8_t *fp, const void *data, size_t len,
		   struct dj_resp *r)
{
	size_t plen;
	uint8_t *p = create_payload(d, seg, fp, data, len, &plen);
	int ret = dj_call(fd, DJINN_MSG_TENSOR_CREATE, sid, p, plen, r);

	free(p);
	if (ret != 1)
		fail_msg("line %d: TENSOR_CREATE: no response (%d, %s)", line,
			 ret, ret_str(ret));
}

uint64_t create_at(int line, int fd, uint64_t sid,
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

void read_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
	     uint64_t len, void *buf)
{
	struct djinn_tensor_io io = { .handle = h, .offset = off, .len = len };
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_MSG_TENSOR_READ, sid, &io, sizeof(io), &r,
		   (long)len);
	if (len)
		memcpy(buf, r.data, len);
	dj_resp_free(&r);
}

uint8_t *write_payload(uint64_t h, uint64_t off, const void *data, uint64_t len,
		       size_t *plen)
{
	struct djinn_tensor_io io = { .handle = h, .offset = off, .len = len };
	uint8_t *p = xmalloc(sizeof(io) + len);

	memcpy(p, &io, sizeof(io));
	if (len)
		memcpy(p + sizeof(io), data, len);
	*plen = sizeof(io) + len;
	return p;
}

void write_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
	      const void *data, uint64_t len, int err, const char *phrase)
{
	size_t plen;
	uint8_t *p = write_payload(h, off, data, len, &plen);
	struct dj_resp r;

	if (err) {
		call_err_at(line, fd, DJINN_MSG_TENSOR_WRITE, sid, p, plen, err,
			    phrase);
	} else {
		call_ok_at(line, fd, DJINN_MSG_TENSOR_WRITE, sid, p, plen, &r,
			   0);
		dj_resp_free(&r);
	}
	free(p);
}

void sha256(const void *data, size_t len, uint8_t fp[DJINN_FP_LEN])
{
	unsigned int n = 0;

	assert_int_equal(EVP_Digest(data, len, fp, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, DJINN_FP_LEN);
}

/* ---------------------------------------------------------------------- */
/* Graphs */

uint32_t gb_input(struct gb *g, uint64_t handle)
{
	assert_true(g->nin < GB_MAX_IN && !g->nnodes);
	g->in[g->nin] =
		(struct djinn_ref){ .id = handle, .kind = DJINN_REF_HANDLE };
	return g->nin++;
}

uint32_t gb_result(struct gb *g, uint64_t request_id, uint32_t index)
{
	assert_true(g->nin < GB_MAX_IN && !g->nnodes);
	g->in[g->nin] = (struct djinn_ref){ .id = request_id,
					    .index = index,
					    .kind = DJINN_REF_RESULT };
	return g->nin++;
}

uint32_t gb_op(struct gb *g, uint16_t op, unsigned int n, ...)
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

struct djinn_node *gb_node(struct gb *g, uint32_t v)
{
	assert_true(v >= g->nin && v - g->nin < g->nnodes);
	return &g->node[v - g->nin];
}

void gb_output(struct gb *g, uint32_t v)
{
	assert_true(g->nout < GB_MAX_OUT && v >= g->nin);
	g->out[g->nout++] = v - g->nin;
}

uint8_t *gb_payload(const struct gb *g, size_t *len)
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

void graph_send_at(int line, int fd, uint64_t sid, uint64_t id,
		   const struct gb *g)
{
	size_t len;
	uint8_t *p = gb_payload(g, &len);
	int ret = dj_send(fd, DJINN_MSG_GRAPH_SUBMIT, id, sid, p, len);

	free(p);
	if (ret)
		fail_msg("line %d: send graph: %s", line, strerror(-ret));
}

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

uint64_t upload_rand(int fd, uint64_t sid, const struct djinn_tensor_desc *d,
		     uint64_t seed, float scale, float **vals)
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

/* ---------------------------------------------------------------------- */
/* Models and contexts */

struct djinn_model_resp model_open_at(int line, int fd, uint64_t sid,
				      const char *name)
{
	struct djinn_model_open o = { { 0 } };
	struct djinn_model_resp m;
	struct dj_resp r;

	strncpy(o.name, name, sizeof(o.name) - 1);
	call_ok_at(line, fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o), &r,
		   sizeof(m));
	memcpy(&m, r.data, sizeof(m));
	dj_resp_free(&r);
	return m;
}

uint64_t ctx_new_at(int line, int fd, uint64_t sid, uint64_t model,
		    uint32_t max)
{
	struct djinn_ctx_new n = { .model = model, .max_tokens = max };
	struct djinn_ctx_resp c;
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_MSG_CTX_NEW, sid, &n, sizeof(n), &r,
		   sizeof(c));
	memcpy(&c, r.data, sizeof(c));
	dj_resp_free(&r);
	if (c.len)
		fail_msg("line %d: a new context of %u tokens", line, c.len);
	return c.ctx;
}

/* A step's answer in @r, checked whole: its tokens into @out. */
static struct djinn_ctx_step_resp step_answer(int line, struct dj_resp *r,
					      int32_t *out)
{
	struct djinn_ctx_step_resp resp;

	if (r->len < sizeof(resp))
		fail_msg("line %d: step answer of %llu bytes", line,
			 (unsigned long long)r->len);
	memcpy(&resp, r->data, sizeof(resp));
	if (r->len != sizeof(resp) + ((resp.nr_tokens * 4 + 7) & ~7u))
		fail_msg("line %d: %u tokens in %llu bytes", line,
			 resp.nr_tokens, (unsigned long long)r->len);
	if (out)
		memcpy(out, r->data + sizeof(resp), resp.nr_tokens * 4);
	dj_resp_free(r);
	return resp;
}

struct djinn_ctx_step_resp
brk_step_at(int line, int fd, uint64_t sid, uint16_t op, uint64_t ctx,
	    const int32_t *in, uint32_t n, uint32_t brk, uint32_t flags,
	    const struct djinn_sampling *sp, int32_t *out)
{
	size_t len = sizeof(struct djinn_ctx_step) +
		     (op == DJINN_MSG_CTX_PREFILL ? n * 4 : 0);
	struct djinn_ctx_step *st = xmalloc(len);
	struct dj_resp r;

	memset(st, 0, sizeof(*st));
	st->ctx = ctx;
	st->nr_tokens = n;
	st->flags = flags;
	st->break_layer = brk;
	if (sp)
		st->sampling = *sp;
	if (op == DJINN_MSG_CTX_PREFILL)
		memcpy(st + 1, in, n * 4);
	call_ok_at(line, fd, op, sid, st, len, &r, -1);
	free(st);
	return step_answer(line, &r, out);
}

struct djinn_ctx_step_resp step_at(int line, int fd, uint64_t sid, uint16_t op,
				   uint64_t ctx, const int32_t *in, uint32_t n,
				   const struct djinn_sampling *sp,
				   uint32_t flags, int32_t *out)
{
	struct djinn_ctx_step_resp resp =
		brk_step_at(line, fd, sid, op, ctx, in, n, 0, flags, sp, out);

	if (resp.state != DJINN_CTX_DONE || resp.hidden)
		fail_msg("line %d: step answer: state %u, hidden %llu", line,
			 resp.state, (unsigned long long)resp.hidden);
	return resp;
}

struct djinn_ctx_step_resp resume_at(int line, int fd, uint64_t sid,
				     uint64_t ctx, uint64_t hidden,
				     int32_t *out)
{
	struct djinn_ctx_resume rq = { .ctx = ctx, .hidden = hidden };
	struct dj_resp r;

	call_ok_at(line, fd, DJINN_MSG_CTX_RESUME, sid, &rq, sizeof(rq), &r,
		   -1);
	return step_answer(line, &r, out);
}

/* ---------------------------------------------------------------------- */
/* Uploaded models */

uint8_t *model_file_read(struct fx *fx, const char *name, const char *file,
			 size_t *len)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/models/%s/%s", fx->d.dir, name, file);
	return read_file(path, len);
}

uint64_t text_file_at(int line, int fd, uint64_t sid, const uint8_t *data,
		      size_t len, uint8_t *fp)
{
	struct djinn_text_lookup lk = { .desc = DESC(DJINN_DTYPE_U8, len) };
	uint32_t flags;

	sha256(data, len, fp);
	memcpy(lk.fp, fp, DJINN_FP_LEN);
	call_err_at(line, fd, DJINN_MSG_TEXT_LOOKUP, sid, &lk, sizeof(lk),
		    -ENOENT, NULL);
	return create_at(line, fd, sid, &lk.desc, DJINN_SEG_TEXT, fp, data, len,
			 &flags);
}

int upload_open_at(int line, int fd, uint64_t sid,
		   const struct djinn_model_file *cfg,
		   const struct djinn_model_file *w, struct djinn_model_resp *m,
		   int err, const char *phrase)
{
	struct djinn_model_upload u = { .nr_files = 1, .config = *cfg };
	uint8_t rq[sizeof(u) + sizeof(*w)];
	struct dj_resp r;

	memcpy(rq, &u, sizeof(u));
	memcpy(rq + sizeof(u), w, sizeof(*w));

	if (err) {
		call_err_at(line, fd, DJINN_MSG_MODEL_OPEN_UPLOADED, sid, &rq,
			    sizeof(rq), err, phrase);
		return err;
	}
	call_ok_at(line, fd, DJINN_MSG_MODEL_OPEN_UPLOADED, sid, &rq,
		   sizeof(rq), &r, sizeof(*m));
	memcpy(m, r.data, sizeof(*m));
	dj_resp_free(&r);
	return 0;
}
