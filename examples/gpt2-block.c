// SPDX-License-Identifier: MIT
/*
 * gpt2-block: two GPT-2 transformer blocks on djinnd, read lazily.
 *
 * Uploads the weights of one block (GPT-2 124M shapes: C = 768, 12
 * heads) to the shared text segment, so that a second run, or a second
 * program, sends only their fingerprints. Builds the block as a graph:
 *
 *   x2  = x + proj(attention(split_heads(ln1(x) @ w_qkv + b_qkv)))
 *   out = x2 + mlp(ln2(x2))       mlp(h) = gelu(h @ w_fc + b_fc) @ w_mp + b_mp
 *
 * submits it, then submits the block again over the first one's result
 * before that has even run: the intermediate never leaves the daemon.
 * Finally it reads 1% of the output through a mapping whose pages come
 * when touched, and prints what moved over the wire.
 *
 *   gpt2-block [ADDR] [T]      T: tokens (default 64)
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/djinn.h>

#define C 768
#define H 12
#define D (C / H)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The weights of one block: name and shape. */
static const struct weight {
	const char *name;
	unsigned int ndim;
	uint64_t dims[2];
} weights[] = {
	{ "ln1.g", 1, { C } },	       { "ln1.b", 1, { C } },
	{ "attn.w", 2, { C, 3 * C } }, { "attn.b", 1, { 3 * C } },
	{ "proj.w", 2, { C, C } },     { "proj.b", 1, { C } },
	{ "ln2.g", 1, { C } },	       { "ln2.b", 1, { C } },
	{ "fc.w", 2, { C, 4 * C } },   { "fc.b", 1, { 4 * C } },
	{ "mp.w", 2, { 4 * C, C } },   { "mp.b", 1, { C } },
};
enum {
	LN1_G,
	LN1_B,
	ATTN_W,
	ATTN_B,
	PROJ_W,
	PROJ_B,
	LN2_G,
	LN2_B,
	FC_W,
	FC_B,
	MP_W,
	MP_B,
	NR_WEIGHTS
};

static struct djinn_tensor_desc f32(unsigned int ndim, const uint64_t *dims)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = (uint8_t)ndim };

	memcpy(d.dims, dims, ndim * sizeof(dims[0]));
	return d;
}

/* Deterministic values, small like trained weights; gains near 1. */
static float *fill(uint64_t n, uint32_t seed, float scale, float base)
{
	float *p = malloc(n * sizeof(*p));

	for (uint64_t i = 0; p && i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = base + scale * ((float)(seed >> 8) / (1 << 24) - 0.5f);
	}
	return p;
}

/* One block over value @x of shape (1, T, C); returns its output value. */
static int block(struct djinn_graph_builder *g, int x, const int *w,
		 unsigned int t)
{
	const int32_t heads[] = { 1, (int32_t)t, H, D };
	const int32_t flat[] = { 1, (int32_t)t, C };
	const int32_t swap[] = { 0, 2, 1, 3 };
	int h, q, k, v, a, x2;

	h = djinn_op_layernorm(g, x, w[LN1_G], w[LN1_B], 1e-5f);
	h = djinn_op_add(g, djinn_op_matmul(g, h, w[ATTN_W], false, false),
			 w[ATTN_B]); /* (1, T, 3C) */
	/* (1, T, C) -> (1, T, H, D) -> (1, H, T, D) */
	q = djinn_op_permute(g,
			     djinn_op_reshape(g, djinn_op_slice(g, h, -1, 0, C),
					      4, heads),
			     4, swap);
	k = djinn_op_permute(
		g,
		djinn_op_reshape(g, djinn_op_slice(g, h, -1, C, 2 * C), 4,
				 heads),
		4, swap);
	v = djinn_op_permute(
		g,
		djinn_op_reshape(g, djinn_op_slice(g, h, -1, 2 * C, 3 * C), 4,
				 heads),
		4, swap);
	a = djinn_op_attention(g, q, k, v, 0.0f, true); /* (1, H, T, D) */
	a = djinn_op_reshape(g, djinn_op_permute(g, a, 4, swap), 3, flat);
	a = djinn_op_add(g, djinn_op_matmul(g, a, w[PROJ_W], false, false),
			 w[PROJ_B]);
	x2 = djinn_op_add(g, x, a);

	h = djinn_op_layernorm(g, x2, w[LN2_G], w[LN2_B], 1e-5f);
	h = djinn_op_gelu(
		g, djinn_op_add(g, djinn_op_matmul(g, h, w[FC_W], false, false),
				w[FC_B])); /* (1, T, 4C) */
	h = djinn_op_add(g, djinn_op_matmul(g, h, w[MP_W], false, false),
			 w[MP_B]);
	return djinn_op_add(g, x2, h);
}

/* Build and submit a block over @x (a tensor) or @prev (a result). */
static int submit_block(struct djinn_session *s, struct djinn_tensor **wt,
			struct djinn_tensor *x, struct djinn_result *prev,
			unsigned int t, struct djinn_request **req)
{
	struct djinn_node_opts prefill = { .phase = DJINN_PHASE_PREFILL };
	struct djinn_graph_builder *g;
	int w[NR_WEIGHTS], in, ret;

	ret = djinn_graph_new(s, &g);
	if (ret)
		return ret;
	djinn_graph_annotate(g, &prefill);
	in = x ? djinn_graph_input(g, x) : djinn_graph_input_result(g, prev);
	for (unsigned int i = 0; i < NR_WEIGHTS; i++)
		w[i] = djinn_graph_input(g, wt[i]);
	ret = djinn_graph_output(g, block(g, in, w, t));
	if (ret >= 0)
		ret = djinn_submit(g, req);
	if (ret < 0)
		fprintf(stderr, "gpt2-block: graph: %s\n",
			djinn_graph_error(g));
	djinn_graph_free(g);
	return ret < 0 ? ret : 0;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "gpt2-block: %s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	unsigned int t = argc > 2 ? (unsigned int)atoi(argv[2]) : 64;
	struct djinn_tensor *wt[NR_WEIGHTS], *x;
	uint64_t wbytes = 0, dedup = 0, out_bytes, off, len;
	struct djinn_request *req1, *req2;
	struct djinn_conn_stats st0, st;
	struct djinn_request_info info;
	struct djinn_tensor_desc dx;
	struct djinn_session *s;
	struct djinn_conn *conn;
	struct djinn_result *out;
	const float *y;
	double sum = 0;
	float *host;
	void *addr;
	int ret;

	if (!t || t > 1024) {
		fprintf(stderr, "usage: gpt2-block [ADDR] [T (1..1024)]\n");
		return 2;
	}
	ret = djinn_connect(argc > 1 ? argv[1] : NULL, &conn);
	if (ret)
		return fail("connect", ret);
	ret = djinn_session_open(conn, NULL, &s);
	if (ret)
		return fail("session open", ret);

	for (unsigned int i = 0; i < NR_WEIGHTS; i++) {
		const struct weight *wd = &weights[i];
		struct djinn_tensor_desc d = f32(wd->ndim, wd->dims);
		uint64_t n = wd->dims[0] * (wd->ndim > 1 ? wd->dims[1] : 1);
		bool gain = strstr(wd->name, ".g") != NULL;
		struct djinn_tensor_info ti;

		host = fill(n, 1000 + i, gain ? 0.2f : 0.05f, gain ? 1 : 0);
		if (!host)
			return fail("malloc", -12);
		ret = djinn_tensor_upload(s, &d, host, DJINN_SEG_TEXT, &wt[i]);
		free(host);
		if (ret)
			return fail(wd->name, ret);
		djinn_tensor_info(wt[i], &ti);
		wbytes += ti.bytes;
		dedup += ti.flags & DJINN_TENSOR_DEDUP ? ti.bytes : 0;
	}
	dx = f32(3, (const uint64_t[]){ 1, t, C });
	host = fill((uint64_t)t * C, 7, 2.0f, 0);
	if (!host)
		return fail("malloc", -12);
	ret = djinn_tensor_upload(s, &dx, host, DJINN_SEG_DATA, &x);
	free(host);
	if (ret)
		return fail("upload x", ret);
	djinn_conn_stats(conn, &st0);
	printf("weights: %u tensors, %.1f MiB, %.1f MiB of them already on "
	       "djinnd (sent as fingerprints)\n",
	       NR_WEIGHTS, wbytes / 1048576.0, dedup / 1048576.0);

	/* block 2 takes block 1's output before block 1 has run */
	ret = submit_block(s, wt, x, NULL, t, &req1);
	if (!ret)
		ret = submit_block(s, wt, NULL, djinn_request_results(req1, 0),
				   t, &req2);
	if (ret)
		return fail("submit", ret);
	out = djinn_request_results(req2, 0);
	out_bytes = sizeof(float) * t * C;
	printf("submitted 2 blocks: output (1, %u, %u) f32, known before "
	       "either ran\n",
	       t, C);
	ret = djinn_wait(req2, DJINN_WAIT_FOREVER);
	if (ret) {
		fprintf(stderr, "gpt2-block: %s\n", djinn_request_error(req2));
		return 1;
	}
	djinn_request_info(req2, &info);

	/* 1% of the output, from the middle, through the mapping */
	ret = djinn_result_map(out, &addr);
	if (ret)
		return fail("map", ret);
	y = addr;
	len = out_bytes / 100 / sizeof(float);
	off = out_bytes / 2 / sizeof(float);
	for (uint64_t i = off; i < off + len; i++)
		sum += y[i];
	djinn_conn_stats(conn, &st);
	printf("block 2 ran in %.3f ms, peak %.1f MiB; read %" PRIu64
	       " of %" PRIu64 " output bytes (sum %.6f)\n",
	       info.run_ns / 1e6, info.peak_bytes / 1048576.0,
	       len * sizeof(float), out_bytes, sum);
	printf("wire after the uploads: %" PRIu64 " bytes sent, %" PRIu64
	       " received, %" PRIu64 " of them result bytes (%.2f%% of the "
	       "output, %" PRIu64 " page faults)\n",
	       st.bytes_sent - st0.bytes_sent,
	       st.bytes_received - st0.bytes_received, st.map_bytes,
	       100.0 * st.map_bytes / out_bytes, st.map_faults);
	printf("wire in all: %" PRIu64 " requests, %" PRIu64
	       " bytes sent, %" PRIu64 " received\n",
	       st.requests, st.bytes_sent, st.bytes_received);

	djinn_request_free(req1);
	djinn_request_free(req2);
	for (unsigned int i = 0; i < NR_WEIGHTS; i++)
		djinn_tensor_release(wt[i]);
	djinn_tensor_release(x);
	ret = djinn_session_close(s);
	djinn_disconnect(conn);
	return ret ? fail("close", ret) : 0;
}
