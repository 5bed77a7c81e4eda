// SPDX-License-Identifier: MIT
/*
 * The metrics endpoint: its exposition parses, counters move with work
 * done, bad requests get 400/404/405 and no one else notices.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* Send @req to the metrics endpoint, read to EOF: the status code, and
 * the body (malloc()ed) in *@body. */
static int http_at(int line, struct fx *fx, const char *req, size_t len,
		   char **body)
{
	int fd = dj_connect_tcp(fx->d.metrics_port), code = 0;
	char *buf, *end;

	if (fd < 0)
		fail_msg("line %d: connect to metrics: %s", line,
			 strerror(-fd));
	if (len && dj_write(fd, req, len, 5000))
		fail_msg("line %d: metrics: cannot send", line);
	buf = dj_read_all(fd, 5000);
	close(fd);
	assert_non_null(buf);
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
	call_err(fd, DJINN_MSG_TENSOR_RELEASE, sid, &(uint64_t){ t ^ 1 }, 8,
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
	/* per tenant: this process's uid holds the session and its 4 MiB */
	{
		char series[96];

		snprintf(series, sizeof(series),
			 "djinn_tenant_sessions{tenant=\"uid:%u\"}",
			 (unsigned int)getuid());
		assert_true(metric(b, series) == 1);
		snprintf(series, sizeof(series),
			 "djinn_tenant_data_bytes{device=\"cpu\","
			 "tenant=\"uid:%u\"}",
			 (unsigned int)getuid());
		assert_true(metric(b, series) == 4 * MiB);
	}
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_metrics, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd metrics", tests, NULL, NULL);
}
