// SPDX-License-Identifier: MIT
/*
 * A real djinnd and a libdjinn connection to it; see libdjinn_fx.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "libdjinn_fx.h"

/* A connection to @d's socket that does not reconnect (libdjinn_fx.h). */
static int connect_once(const struct djd *d, struct djinn_conn **conn)
{
	const struct djinn_connect_opts o = { .size = sizeof(o),
					      .reconnect_ms = -1 };
	char addr[sizeof(d->sock) + 8];

	snprintf(addr, sizeof(addr), "unix:%s", d->sock);
	return djinn_connect_opts(addr, &o, conn);
}

int djd_start_conn(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		   const char *const *extra, const char *name,
		   const char *model, struct djinn_conn **conn)
{
	if (djd_start_args(d, cpu_mem, lease_ms, extra)) {
		fprintf(stderr, "djinnd did not start: %s\n",
			djd_start_error());
		return -ECHILD;
	}
	if (name && djd_make_model(d, name, model))
		goto out_kill;
	if (connect_once(d, conn))
		goto out_kill;
	return 0;

out_kill:
	djd_kill(d);
	return -EIO;
}

int djd_stop_conn(struct djd *d, struct djinn_conn *conn, int timeout_ms)
{
	djinn_disconnect(conn);
	return djd_stop(d, timeout_ms);
}

void djd_kill_conn(struct djd *d, struct djinn_conn *conn)
{
	djinn_disconnect(conn);
	djd_kill(d);
}

void djd_admin(const struct djd *d, uint16_t op, const void *payload,
	       size_t len, struct dj_resp *r)
{
	int fd = dj_connect(d->admin);

	assert_true(fd >= 0);
	assert_int_equal(dj_call(fd, op, 0, payload, len, r), 1);
	close(fd);
}

void greedy_tokens(struct djinn_model *m, const int32_t *prompt, uint32_t np,
		   uint32_t n, int32_t *out)
{
	struct djinn_ctx *c;

	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, np, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, n, NULL, out, NULL, NULL), n);
	assert_int_equal(djinn_ctx_free(c), 0);
}

struct djinn_conn *djd_connect_lib(const struct djd *d)
{
	struct djinn_conn *c;

	assert_int_equal(connect_once(d, &c), 0);
	return c;
}

struct dj_resp djd_raw_ok(int fd, uint16_t op, uint64_t sid, const void *p,
			  size_t len)
{
	struct dj_resp r;

	assert_int_equal(dj_call(fd, op, sid, p, len, &r), 1);
	if (r.error)
		fail_msg("%u: %s (%d)", op, r.msg, r.error);
	return r;
}

uint64_t djd_raw_ctx(int fd, const char *label, uint32_t priority,
		     const char *model, uint64_t *sid)
{
	struct djinn_session_open so = { .priority = priority };
	struct djinn_model_open mo = { { 0 } };
	struct djinn_session_resp sr;
	struct djinn_model_resp mr;
	struct djinn_ctx_new cn = { 0 };
	struct djinn_ctx_resp cr;
	struct dj_resp r;

	assert_true(fd >= 0);
	snprintf(so.tenant, sizeof(so.tenant), "%s", label);
	snprintf(mo.name, sizeof(mo.name), "%s", model);
	r = djd_raw_ok(fd, DJINN_MSG_HELLO, 0, NULL, 0);
	dj_resp_free(&r);
	r = djd_raw_ok(fd, DJINN_MSG_SESSION_OPEN, 0, &so, sizeof(so));
	memcpy(&sr, r.data, sizeof(sr));
	dj_resp_free(&r);
	r = djd_raw_ok(fd, DJINN_MSG_MODEL_OPEN, sr.session_id, &mo,
		       sizeof(mo));
	memcpy(&mr, r.data, sizeof(mr));
	dj_resp_free(&r);
	cn.model = mr.model;
	r = djd_raw_ok(fd, DJINN_MSG_CTX_NEW, sr.session_id, &cn, sizeof(cn));
	memcpy(&cr, r.data, sizeof(cr));
	dj_resp_free(&r);
	*sid = sr.session_id;
	return cr.ctx;
}
