// SPDX-License-Identifier: MIT
/*
 * djinn-bench lazy: bytes received to read 1% of a 196 MiB result: a
 * range with djinn_result_read(), and 1% of its pages, spread over it,
 * touched through djinn_result_map(); beside the result's size. The
 * result is an embedding gather (a 4 MiB table, 50176 ids), so that
 * little has to be uploaded to make it.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <djinn/djinn.h>

#include "common.h"

#define LAZY_V 1024 /* the table: V rows of C f32 */
#define LAZY_C 1024
#define LAZY_N 50176 /* ids: N x C x 4 bytes = 196 MiB of result */
#define PAGE 4096

/* The id of row @n of the result: rows cover the table many times over. */
static int32_t lazy_id(uint64_t n)
{
	return (int32_t)((n * 7919) % LAZY_V);
}

/* Whether @len bytes at @p are the result's bytes from @off on. */
static bool lazy_check(const uint8_t *p, uint64_t off, uint64_t len)
{
	for (uint64_t o = off; o < off + len; o += sizeof(float)) {
		uint64_t e = o / sizeof(float);
		float want = (float)((uint64_t)lazy_id(e / LAZY_C) * LAZY_C +
				     e % LAZY_C);
		float got;

		memcpy(&got, p + (o - off), sizeof(got));
		if (got != want)
			return false;
	}
	return true;
}

/*
 * Bytes received on @conn once every request sent has had its answer
 * counted. libdjinn counts an answer just after it wakes the caller, so
 * the counters read right after a call returns may not have it yet.
 */
static uint64_t rx_bytes(struct djinn_conn *conn)
{
	uint64_t deadline = mono_ns() + NSEC_PER_SEC;
	struct djinn_conn_stats st;

	for (;;) {
		check(djinn_conn_stats(conn, &st), "djinn_conn_stats");
		if (st.responses >= st.requests)
			return st.bytes_received;
		if (mono_ns() > deadline)
			fail("lazy: %" PRIu64 " requests, %" PRIu64
			     " answers counted after 1 s",
			     st.requests, st.responses);
		sleep_ns(20000);
	}
}

void bench_lazy(void)
{
	const struct djinn_tensor_desc tdesc = { .dtype = DJINN_DTYPE_F32,
						 .ndim = 2,
						 .dims = { LAZY_V, LAZY_C } };
	const struct djinn_tensor_desc idesc = { .dtype = DJINN_DTYPE_I32,
						 .ndim = 1,
						 .dims = { LAZY_N } };
	const struct xport *xp = &xports[0];
	float *table = xmalloc(LAZY_V * LAZY_C * sizeof(float));
	int32_t *ids = xmalloc(LAZY_N * sizeof(int32_t));
	uint64_t bytes, off, len, before, rd, mp, touched = 0;
	struct djinn_graph_builder *g;
	struct djinn_tensor *tt, *ti;
	struct djinn_request *req;
	struct djinn_session *s;
	struct djinn_conn *conn;
	struct djinn_result *r;
	uint8_t *buf;
	void *addr;
	int out;

	for (uint64_t i = 0; i < LAZY_V * LAZY_C; i++)
		table[i] = (float)i;
	for (uint64_t n = 0; n < LAZY_N; n++)
		ids[n] = lazy_id(n);

	check(djinn_connect(xp->addr, &conn), "djinn_connect");
	check(djinn_session_open(conn, NULL, &s), "djinn_session_open");
	check(djinn_tensor_upload(s, &tdesc, table, DJINN_SEG_DATA, &tt),
	      "djinn_tensor_upload (table)");
	check(djinn_tensor_upload(s, &idesc, ids, DJINN_SEG_DATA, &ti),
	      "djinn_tensor_upload (ids)");
	check(djinn_graph_new(s, &g), "djinn_graph_new");
	out = djinn_graph_output(g,
				 djinn_op_embedding(g, djinn_graph_input(g, tt),
						    djinn_graph_input(g, ti)));
	if (out < 0)
		fail("embedding graph: %s: %s", strerror(-out),
		     djinn_graph_error(g));
	check(djinn_submit(g, &req), "djinn_submit");
	check(djinn_wait(req, DJINN_WAIT_FOREVER), "djinn_wait");
	r = djinn_request_results(req, 0);
	bytes = (uint64_t)LAZY_N * LAZY_C * sizeof(float);
	if (!r)
		fail("embedding graph: no result");

	/* (a) one range of 1% in the middle, whole elements */
	len = bytes / 100 / sizeof(float) * sizeof(float);
	off = bytes / 2 / sizeof(float) * sizeof(float);
	buf = xmalloc(len);
	memset(buf, 0, len);
	before = rx_bytes(conn);
	check(djinn_result_read(r, off, len, buf), "djinn_result_read");
	rd = rx_bytes(conn) - before;
	if (!lazy_check(buf, off, len))
		fail("lazy: djinn_result_read() bytes came back wrong");
	free(buf);

	/* (b) 1% of the pages, one in a hundred, over the whole result */
	before = rx_bytes(conn);
	check(djinn_result_map(r, &addr), "djinn_result_map");
	for (uint64_t p = 0; p < bytes / PAGE; p += 100) {
		if (!lazy_check((const uint8_t *)addr + p * PAGE, p * PAGE,
				PAGE))
			fail("lazy: mapped page %" PRIu64 " is wrong", p);
		touched++;
	}
	mp = rx_bytes(conn) - before;
	check(djinn_result_unmap(r), "djinn_result_unmap");
	info("lazy: read %" PRIu64 " of %" PRIu64 " bytes: %" PRIu64
	     " received; %" PRIu64 " pages touched: %" PRIu64 " received",
	     len, bytes, rd, touched, mp);

	djinn_request_free(req);
	djinn_graph_free(g);
	check(djinn_tensor_release(tt), "djinn_tensor_release");
	check(djinn_tensor_release(ti), "djinn_tensor_release");
	check(djinn_session_close(s), "djinn_session_close");
	djinn_disconnect(conn);
	free(table);
	free(ids);

	fig_emit(&(struct fig){ .bench = "djinn_lazy",
				.metric = "read_1pct_rx_bytes",
				.value = (double)rd,
				.unit = "bytes",
				.baseline = (double)bytes,
				.baseline_name = "result_bytes",
				.target = "<=",
				.want = 0.011 });
	fig_emit(&(struct fig){ .bench = "djinn_lazy",
				.metric = "map_1pct_rx_bytes",
				.value = (double)mp,
				.unit = "bytes",
				.baseline = (double)bytes,
				.baseline_name = "result_bytes",
				.target = "<=",
				.want = 0.011,
				.samples = touched });
}
