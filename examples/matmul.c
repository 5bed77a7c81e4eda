// SPDX-License-Identifier: MIT
/*
 * matmul: y = gelu(x @ w) on djinnd, then read y lazily: one row by
 * byte range, one through a mapping whose pages come when touched. The
 * weights go to the shared text segment, so a second run sends only their
 * fingerprint. Checks both rows against a plain C reference and prints
 * what moved over the wire.
 *
 *   matmul [ADDR]
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/djinn.h>

#define M 256
#define K 512
#define N 1024

static float gelu(float x)
{
	return 0.5f * x *
	       (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

/* Row @i of gelu(x @ w) against @got; the largest error. */
static float check_row(const float *x, const float *w, unsigned int i,
		       const float *got)
{
	float worst = 0;

	for (unsigned int j = 0; j < N; j++) {
		double acc = 0;

		for (unsigned int k = 0; k < K; k++)
			acc += (double)x[i * K + k] * w[k * N + j];
		worst = fmaxf(worst, fabsf(gelu((float)acc) - got[j]));
	}
	return worst;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "matmul: %s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	struct djinn_tensor_desc dx = { .dtype = DJINN_DTYPE_F32,
					.ndim = 2,
					.dims = { M, K } };
	struct djinn_tensor_desc dw = { .dtype = DJINN_DTYPE_F32,
					.ndim = 2,
					.dims = { K, N } };
	float *x = malloc(sizeof(float) * M * K);
	float *w = malloc(sizeof(float) * K * N);
	float row[N], err1, err2;
	struct djinn_graph_builder *g;
	struct djinn_tensor_info wi;
	struct djinn_conn_stats st;
	struct djinn_request *req;
	struct djinn_tensor *tx, *tw;
	struct djinn_session *s;
	struct djinn_conn *conn;
	struct djinn_result *y;
	const float *ymap;
	void *addr;
	int ret, v;

	if (!x || !w)
		return fail("malloc", -12);
	for (unsigned int i = 0; i < M * K; i++)
		x[i] = (float)((i * 7919u) % 97) / 97.0f - 0.5f;
	for (unsigned int i = 0; i < K * N; i++)
		w[i] = (float)((i * 104729u) % 89) / 890.0f - 0.05f;

	ret = djinn_connect(argc > 1 ? argv[1] : NULL, &conn);
	if (ret)
		return fail("connect", ret);
	ret = djinn_session_open(conn, NULL, &s);
	if (ret)
		return fail("session open", ret);
	ret = djinn_tensor_upload(s, &dw, w, DJINN_SEG_TEXT, &tw);
	if (!ret)
		ret = djinn_tensor_upload(s, &dx, x, DJINN_SEG_DATA, &tx);
	if (ret)
		return fail("upload", ret);
	djinn_tensor_info(tw, &wi);
	printf("weights: %s\n", wi.flags & DJINN_TENSOR_DEDUP ?
					"already on djinnd, sent 32 bytes" :
					"uploaded");

	ret = djinn_graph_new(s, &g);
	if (ret)
		return fail("graph", ret);
	v = djinn_op_gelu(g, djinn_op_matmul(g, djinn_graph_input(g, tx),
					     djinn_graph_input(g, tw), false,
					     false));
	v = djinn_graph_output(g, v);
	if (v < 0) {
		fprintf(stderr, "matmul: graph: %s\n", djinn_graph_error(g));
		return 1;
	}
	ret = djinn_submit(g, &req);
	if (ret) {
		fprintf(stderr, "matmul: submit: %s\n", djinn_graph_error(g));
		return 1;
	}
	y = djinn_request_results(req, 0);
	printf("submitted: y is %s (%" PRIu64 ", %" PRIu64 ") before it ran\n",
	       djinn_result_desc(y)->dtype == DJINN_DTYPE_F32 ? "f32" : "?",
	       (uint64_t)djinn_result_desc(y)->dims[0],
	       (uint64_t)djinn_result_desc(y)->dims[1]);

	ret = djinn_wait(req, DJINN_WAIT_FOREVER);
	if (ret) {
		fprintf(stderr, "matmul: %s\n", djinn_request_error(req));
		return 1;
	}
	ret = djinn_result_read(y, 7 * sizeof(row), sizeof(row), row);
	if (ret)
		return fail("read", ret);
	err1 = check_row(x, w, 7, row);
	ret = djinn_result_map(y, &addr);
	if (ret)
		return fail("map", ret);
	ymap = addr;
	err2 = check_row(x, w, 200, ymap + 200 * N);
	printf("rows 7 and 200 against the reference: max error %g, %g\n",
	       (double)err1, (double)err2);

	djinn_conn_stats(conn, &st);
	printf("wire: %" PRIu64 " requests, %" PRIu64 " bytes sent, %" PRIu64
	       " received (y is %zu bytes; %" PRIu64 " fetched by %" PRIu64
	       " faults)\n",
	       st.requests, st.bytes_sent, st.bytes_received,
	       sizeof(float) * M * N, st.map_bytes, st.map_faults);

	djinn_result_unmap(y);
	djinn_request_free(req);
	djinn_graph_free(g);
	djinn_session_close(s);
	djinn_disconnect(conn);
	free(x);
	free(w);
	return err1 < 1e-3f && err2 < 1e-3f ? 0 : 1;
}
