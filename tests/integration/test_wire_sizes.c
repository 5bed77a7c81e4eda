// SPDX-License-Identifier: MIT
/*
 * Request sizes against a real djinnd (Documentation/protocol.rst,
 * "Request sizes"): a fixed-size request is taken by the rules of the
 * kernel's copy_struct_from_user(), so that its struct can grow without
 * a protocol version:
 *
 * - a longer payload, a newer client's struct, whose bytes past the
 *   struct are zero is taken as the struct, up to 4096 bytes; past that
 *   it is -EMSGSIZE;
 * - a byte set past the struct is -E2BIG, with a message naming it, and
 *   nothing is done (no session opened or killed, no phase changed);
 * - a shorter payload down to the struct's first version is zero-filled
 *   (ADMIN_FAULT_INJECT, which had no payload before its struct);
 * - below that minimum it is -EINVAL, for fixed-size and variable-length
 *   opcodes alike;
 *
 * and the connection stays usable after each refusal. Also: every opcode
 * lib/msgnames.c names is one djinnd serves and no other, and its metric
 * label is its name in lower case.
 */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "array_size.h"
#include "daemon.h"
#include "msgnames.h"

/* What djinnd takes of a fixed-size request (net/msg.c). */
#define STRUCT_MAX 4096

struct fx {
	struct djd d;
	int fd; /* client socket */
	int afd; /* admin socket */
};

static int fx_setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx || djd_start(&fx->d, "64M", 10000)) {
		free(fx);
		return -1;
	}
	fx->fd = dj_connect(fx->d.sock);
	fx->afd = dj_connect(fx->d.admin);
	if (fx->fd < 0 || fx->afd < 0) {
		djd_kill(&fx->d);
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	int ret;

	close(fx->fd);
	close(fx->afd);
	ret = djd_stop(&fx->d, 10000);
	free(fx);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Helpers */

/* One request on @fd; its answer in @r (the caller frees it). */
static void call_at(int line, int fd, uint16_t op, uint64_t sid, const void *p,
		    size_t len, struct dj_resp *r)
{
	int ret = dj_call(fd, op, sid, p, len, r);

	if (ret != 1)
		fail_msg("line %d: op %u: no answer (%d)", line, op, ret);
}

/* A request that must succeed, with an answer of @want bytes (copied to
 * @out unless NULL). */
static void call_ok_at(int line, int fd, uint16_t op, uint64_t sid,
		       const void *p, size_t len, void *out, size_t want)
{
	struct dj_resp r;

	call_at(line, fd, op, sid, p, len, &r);
	if (r.error)
		fail_msg("line %d: op %u: %d (%s)", line, op, r.error, r.msg);
	if (r.len != want)
		fail_msg("line %d: op %u: answer of %llu bytes, want %zu", line,
			 op, (unsigned long long)r.len, want);
	if (out && want)
		memcpy(out, r.data, want);
	dj_resp_free(&r);
}
#define call_ok(...) call_ok_at(__LINE__, __VA_ARGS__)

/* A request that must fail with @err and a message holding @phrase. */
static void call_err_at(int line, int fd, uint16_t op, uint64_t sid,
			const void *p, size_t len, int err, const char *phrase)
{
	struct dj_resp r;

	call_at(line, fd, op, sid, p, len, &r);
	if (r.error != err)
		fail_msg("line %d: op %u: error %d (%s), want %d", line, op,
			 r.error, r.msg, err);
	if (phrase && !strstr(r.msg, phrase))
		fail_msg("line %d: op %u: message \"%s\" lacks \"%s\"", line,
			 op, r.msg, phrase);
	dj_resp_free(&r);
}
#define call_err(...) call_err_at(__LINE__, __VA_ARGS__)

/* A payload of @len bytes: @p (@plen bytes, NULL: none) then zeros; the
 * caller frees it. */
static uint8_t *padded(const void *p, size_t plen, size_t len)
{
	uint8_t *b = calloc(1, len ? len : 1);

	assert_non_null(b);
	if (p)
		memcpy(b, p, plen < len ? plen : len);
	return b;
}

static struct djinn_session_open open_req(const char *tenant)
{
	struct djinn_session_open o = { .priority = 4 };

	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	return o;
}

static struct djinn_admin_stats stats(struct fx *fx)
{
	struct djinn_admin_stats st;

	call_ok(fx->afd, DJINN_MSG_ADMIN_STATS, 0, NULL, 0, &st, sizeof(st));
	return st;
}

/* Session @sid's entry of ADMIN_SESSIONS; id 0 if it has none. */
static struct djinn_admin_session session_entry(struct fx *fx, uint64_t sid)
{
	struct djinn_admin_session e = { 0 };
	struct dj_resp r;
	uint32_t n;

	call_at(__LINE__, fx->afd, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, &r);
	assert_int_equal(r.error, 0);
	assert_true(r.len >= 8);
	memcpy(&n, r.data, sizeof(n));
	assert_int_equal(r.len, 8 + (uint64_t)n * sizeof(e));
	for (uint32_t i = 0; i < n; i++) {
		struct djinn_admin_session x;

		memcpy(&x, r.data + 8 + i * sizeof(x), sizeof(x));
		if (x.id == sid)
			e = x;
	}
	dj_resp_free(&r);
	return e;
}

static void hello(int fd)
{
	struct djinn_hello_resp h;

	call_ok(fd, DJINN_MSG_HELLO, 0, NULL, 0, &h, sizeof(h));
	assert_int_equal(h.version, DJINN_PROTO_VERSION);
}

/* ---------------------------------------------------------------------- */
/* Tests */

/* 1. A newer client's grown struct, its new bytes zero: taken as the
 * struct, up to STRUCT_MAX bytes; past that -EMSGSIZE. */
static void test_grown_zero(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = open_req("grown");
	struct djinn_signal sg = { .phase = DJINN_PHASE_IO_WAIT,
				   .expected_ns = 2 * NSEC_PER_SEC };
	const size_t lens[] = { sizeof(o) + 8, sizeof(o) + 1, STRUCT_MAX };
	struct djinn_admin_stats st;
	struct djinn_session_resp s;
	struct djinn_hello_resp h;
	uint8_t *p;

	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		p = padded(&o, sizeof(o), lens[i]);
		call_ok(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, lens[i], &s,
			sizeof(s));
		free(p);
		assert_true(s.session_id != 0);
		assert_int_equal(s.lease_ns, 10 * NSEC_PER_SEC);
		assert_string_equal(session_entry(fx, s.session_id).label,
				    "grown");
		call_ok(fx->fd, DJINN_MSG_SESSION_CLOSE, s.session_id, NULL, 0,
			NULL, 0);
	}

	/* a request with no payload yet, and one in a session */
	p = padded(NULL, 0, 64);
	call_ok(fx->fd, DJINN_MSG_HELLO, 0, p, 64, &h, sizeof(h));
	call_ok(fx->afd, DJINN_MSG_ADMIN_STATS, 0, p, 16, &st, sizeof(st));
	free(p);
	call_ok(fx->fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &s,
		sizeof(s));
	p = padded(&sg, sizeof(sg), sizeof(sg) + 24);
	call_ok(fx->fd, DJINN_MSG_SIGNAL, s.session_id, p, sizeof(sg) + 24,
		NULL, 0);
	free(p);
	assert_int_equal(session_entry(fx, s.session_id).phase,
			 DJINN_PHASE_IO_WAIT);
	/* the handler ran: it looked for the tensor */
	p = padded(&(uint64_t){ 0x1234 }, 8, 8 + 8);
	call_err(fx->fd, DJINN_MSG_TENSOR_RELEASE, s.session_id, p, 16, -ENOENT,
		 "no tensor with handle 0x1234");
	free(p);

	/* past what djinnd takes of any struct: refused before reading */
	p = padded(&o, sizeof(o), STRUCT_MAX + 1);
	call_err(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, STRUCT_MAX + 1,
		 -EMSGSIZE, "limit 4096");
	free(p);
	call_ok(fx->fd, DJINN_MSG_SESSION_CLOSE, s.session_id, NULL, 0, NULL,
		0);
	assert_int_equal(stats(fx).sessions, 0);
	hello(fx->fd);
}

/* 2. A byte set past the struct: -E2BIG naming it; nothing happens. */
static void test_grown_nonzero(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = open_req("refused");
	struct djinn_signal sg = { .phase = DJINN_PHASE_IO_WAIT,
				   .expected_ns = 2 * NSEC_PER_SEC };
	struct djinn_admin_stats before, after;
	struct djinn_session_resp s;
	uint8_t *p;

	before = stats(fx);
	p = padded(&o, sizeof(o), sizeof(o) + 8);
	p[sizeof(o) + 5] = 0x80;
	call_err(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, sizeof(o) + 8, -E2BIG,
		 "SESSION_OPEN takes 88 bytes; byte 93 of the 96 sent is not "
		 "zero");
	/* the last byte too: every one is looked at */
	p[sizeof(o) + 5] = 0;
	p[sizeof(o) + 7] = 1;
	call_err(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, sizeof(o) + 8, -E2BIG,
		 "byte 95 of the 96");
	free(p);
	after = stats(fx);
	assert_int_equal(after.sessions, before.sessions);
	assert_int_equal(after.sessions_opened, before.sessions_opened);
	hello(fx->fd);

	/* in a session: the signal is not taken */
	call_ok(fx->fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &s,
		sizeof(s));
	p = padded(&sg, sizeof(sg), STRUCT_MAX);
	p[STRUCT_MAX - 1] = 0xff;
	call_err(fx->fd, DJINN_MSG_SIGNAL, s.session_id, p, STRUCT_MAX, -E2BIG,
		 "byte 4095 of the 4096");
	free(p);
	assert_int_equal(session_entry(fx, s.session_id).phase,
			 DJINN_PHASE_UNKNOWN);

	/* on the admin socket: the session is not killed */
	p = padded(&s.session_id, 8, 12);
	p[8] = 1;
	call_err(fx->afd, DJINN_MSG_ADMIN_KILL, 0, p, 12, -E2BIG,
		 "ADMIN_KILL takes 8 bytes; byte 8 of the 12");
	free(p);
	assert_int_equal(session_entry(fx, s.session_id).id, s.session_id);

	/* a request that has no payload yet */
	p = padded(NULL, 0, 8);
	p[3] = 7;
	call_err(fx->fd, DJINN_MSG_HELLO, 0, p, 8, -E2BIG,
		 "HELLO takes 0 bytes; byte 3 of the 8");
	call_err(fx->afd, DJINN_MSG_ADMIN_VMU, 0, p, 8, -E2BIG, "byte 3");
	free(p);
	hello(fx->fd);
	hello(fx->afd);
	call_ok(fx->fd, DJINN_MSG_SESSION_CLOSE, s.session_id, NULL, 0, NULL,
		0);
}

/* 3. Shorter than the struct, not than its first version: the rest is
 * zero. ADMIN_FAULT_INJECT had no payload, then device, then flags; on
 * a djinnd without --fault-injection a request that gets past its
 * checks of device and flags is -EPERM. */
static void test_short_zero_filled(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_fault_req q = { .device = 0, .flags = 1u << 5 };
	uint8_t p[sizeof(q)] = { 0 };

	/* the whole struct: flags read, the unknown bit refused */
	call_err(fx->afd, DJINN_MSG_ADMIN_FAULT_INJECT, 0, &q, sizeof(q),
		 -EINVAL, "unknown flags 0x20");
	/* device alone: flags zero, device 9 looked for */
	q.device = 9;
	call_err(fx->afd, DJINN_MSG_ADMIN_FAULT_INJECT, 0, &q, 4, -ENODEV,
		 "no device 9");
	/* part of a field: its bytes sent, the rest zero */
	p[0] = 3;
	call_err(fx->afd, DJINN_MSG_ADMIN_FAULT_INJECT, 0, p, 1, -ENODEV,
		 "no device 3");
	p[0] = 0;
	p[4] = 0x40;
	call_err(fx->afd, DJINN_MSG_ADMIN_FAULT_INJECT, 0, p, 5, -EINVAL,
		 "unknown flags 0x40");
	/* device 0, flags 0, whatever was sent of them: past the checks */
	p[4] = 0;
	for (size_t len = 0; len <= sizeof(q); len++)
		call_err(fx->afd, DJINN_MSG_ADMIN_FAULT_INJECT, 0, p, len,
			 -EPERM, "fault injection is off");
	hello(fx->afd);
}

/* 4. Below the minimum: -EINVAL, fixed-size and variable-length alike;
 * nothing happens. */
static void test_below_min(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = open_req("short");
	struct djinn_admin_stats before = stats(fx), after;
	struct djinn_session_resp s;
	uint8_t *p = padded(&o, sizeof(o), sizeof(o));

	/* its first version's 80 bytes, before the flags */
	call_err(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, 79, -EINVAL,
		 "SESSION_OPEN takes at least 80 bytes, not 79");
	call_err(fx->fd, DJINN_MSG_SESSION_OPEN, 0, p, 0, -EINVAL,
		 "at least 80 bytes, not 0");
	after = stats(fx);
	assert_int_equal(after.sessions_opened, before.sessions_opened);
	hello(fx->fd);

	call_ok(fx->fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &s,
		sizeof(s));
	/* its first version's 16 bytes, before the context */
	call_err(fx->fd, DJINN_MSG_SIGNAL, s.session_id, p, 15, -EINVAL,
		 "SIGNAL takes at least 16 bytes, not 15");
	call_err(fx->fd, DJINN_MSG_TENSOR_RELEASE, s.session_id, p, 4, -EINVAL,
		 "not 4");
	/* variable length: the struct before what it counts */
	call_err(fx->fd, DJINN_MSG_CTX_PREFILL, s.session_id, p,
		 sizeof(struct djinn_ctx_step) - 1, -EINVAL,
		 "CTX_PREFILL takes at least 48 bytes, not 47");
	call_err(fx->fd, DJINN_MSG_MODEL_OPEN_UPLOADED, s.session_id, p, 8,
		 -EINVAL, "at least 48 bytes, not 8");
	call_err(fx->fd, DJINN_MSG_GRAPH_SUBMIT, s.session_id, p, 20, -EINVAL,
		 "GRAPH_SUBMIT takes at least 24 bytes, not 20");
	/* the sizes are checked before the session */
	call_err(fx->fd, DJINN_MSG_SIGNAL, 0, p, 3, -EINVAL, "not 3");
	free(p);

	call_err(fx->afd, DJINN_MSG_ADMIN_KILL, 0, &s.session_id, 7, -EINVAL,
		 "ADMIN_KILL takes at least 8 bytes, not 7");
	assert_int_equal(session_entry(fx, s.session_id).id, s.session_id);
	hello(fx->fd);
	hello(fx->afd);
	call_ok(fx->fd, DJINN_MSG_SESSION_CLOSE, s.session_id, NULL, 0, NULL,
		0);
}

/* Fetch djinnd's metrics; the caller frees them. */
static char *scrape(struct fx *fx)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
	int fd = dj_connect_tcp(fx->d.metrics_port);
	char *buf;

	assert_true(fd >= 0);
	assert_int_equal(dj_write(fd, req, sizeof(req) - 1, 5000), 0);
	buf = dj_read_all(fd, 5000);
	close(fd);
	assert_non_null(buf);
	return buf;
}

/* 5. One table of names: djinnd serves every opcode it names, on one
 * socket or both, and no other (GOAWAY, which only djinnd sends, it
 * refuses by name); each counts under its name in lower case. */
static void test_names(void **state)
{
	struct fx *fx = *state;
	char *m, series[96], lower[64];
	unsigned int named = 0;

	for (unsigned int op = 0; op < 256; op++) {
		const char *name = djinn_msg_name(op);
		const char *label = djinn_msg_label(op);
		bool served = false;

		assert_true(!name == !label);
		for (int k = 0; k < 2; k++) {
			struct dj_resp r;

			/* an empty payload, session 0: answered, somehow */
			call_at(__LINE__, k ? fx->afd : fx->fd, (uint16_t)op, 0,
				NULL, 0, &r);
			if (r.error != -EOPNOTSUPP ||
			    !strstr(r.msg, "unknown opcode"))
				served = true;
			else if (name)
				fail_msg("%s (%u) is unknown to djinnd", name,
					 op);
			dj_resp_free(&r);
		}
		if (!name) {
			if (served)
				fail_msg("djinnd serves opcode %u, which has "
					 "no name",
					 op);
			continue;
		}
		named++;
		assert_true(strlen(name) < sizeof(lower));
		for (size_t i = 0; i <= strlen(name); i++)
			lower[i] = (char)tolower((unsigned char)name[i]);
		assert_string_equal(label, lower);
	}
	assert_true(named >= 31);

	m = scrape(fx);
	for (unsigned int op = 0; op < 256; op++) {
		const char *label = djinn_msg_label(op);

		if (!label)
			continue;
		snprintf(series, sizeof(series),
			 "\ndjinn_requests_total{op=\"%s\"} ", label);
		if (!strstr(m, series))
			fail_msg("no metric %s", series + 1);
	}
	/* the numbers without a name count together */
	assert_non_null(strstr(m, "\ndjinn_requests_total{op=\"unknown\"} "));
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_grown_zero, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_grown_nonzero, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_short_zero_filled,
						fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_below_min, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_names, fx_setup,
						fx_teardown),
	};
	int ret = djd_can_run("64M");

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("wire sizes", tests, NULL, NULL);
}
