// SPDX-License-Identifier: MIT
/*
 * Graphs: a small MLP and a GPT-2 block against reference math in
 * double, graphs pipelined on earlier results, bad graphs, graphs
 * cancelled and too big, many requests in flight.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
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

/* ---------------------------------------------------------------------- */
/* Running graphs */

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
	int ret = dj_call(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, &r);

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

	call_err_at(line, fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, err, phrase);
	free(p);
}

#define graph_err(fd, sid, g, err, phrase) \
	graph_err_at(__LINE__, fd, sid, g, err, phrase)

/* ---------------------------------------------------------------------- */
/* Reference math, in double */

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
/* Graphs */

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
	call_err(fd, DJINN_MSG_TENSOR_RELEASE, sid, &res[0].handle, 8, -ENOENT,
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
		assert_int_equal(r.hdr.type, DJINN_MSG_GRAPH_SUBMIT);
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

			assert_int_equal(dj_send(fd, DJINN_MSG_GRAPH_SUBMIT,
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

		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len - 8, -EINVAL,
			 NULL);
		gh->__reserved = 1;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -EINVAL,
			 NULL);
		gh->__reserved = 0;
		gh->flags = 1;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -EINVAL,
			 NULL);
		gh->flags = 0;
		p[len - 1] = 1; /* the outputs' padding */
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -EINVAL,
			 NULL);
		p[len - 1] = 0;
		gh->nr_nodes = 0;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -EINVAL,
			 NULL);
		gh->nr_nodes = 1;
		gh->nr_outputs = 0;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -EINVAL,
			 NULL);
		gh->nr_outputs = 1;
		gh->nr_nodes = DJINN_MAX_NODES + 1;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -E2BIG, NULL);
		gh->nr_nodes = 1;
		gh->nr_outputs = DJINN_MAX_GRAPH_OUTPUTS + 1;
		call_err(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, -E2BIG, NULL);
		gh->nr_outputs = 1;
		/* and the good one still runs */
		{
			struct dj_resp r;

			call_ok(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, &r,
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
	assert_int_equal(dj_send(fd, DJINN_MSG_SESSION_CLOSE, 4, sid, NULL, 0),
			 0);
	for (got = 0; got < 4; got++) {
		struct dj_resp r;

		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		assert_true(r.hdr.request_id >= 1 && r.hdr.request_id <= 4);
		assert_false(answered[r.hdr.request_id - 1]);
		answered[r.hdr.request_id - 1] = true;
		if (r.hdr.request_id == 4) {
			assert_int_equal(r.hdr.type, DJINN_MSG_SESSION_CLOSE);
			assert_int_equal(r.error, 0);
		} else if (r.hdr.request_id == 3) {
			/* certainly still queued at the close */
			expect_error(&r, -ECANCELED, NULL);
		} else if (r.error) {
			expect_error(&r, -ECANCELED, NULL);
		}
		dj_resp_free(&r);
	}
	call_err(fd, DJINN_MSG_HEARTBEAT, sid, NULL, 0, -ENOENT, NULL);
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
	assert_int_equal(dj_call(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, &r),
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
	assert_int_equal(dj_call(fd, DJINN_MSG_GRAPH_SUBMIT, sid, p, len, &r),
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
						   .op = DJINN_MSG_GRAPH_SUBMIT,
						   .k = g++ };
			graph_send_at(__LINE__, fd, sid, req[n].id, &gr);
			n++;
		} else if (kind == 1 && rd < NR) {
			struct djinn_tensor_io io = { .handle = tx,
						      .offset = 4u * rd,
						      .len = 4 };

			req[n] = (typeof(req[0])){ .id = 0x9e3779b97f4a7c15ull *
							 (uint64_t)(n + 1),
						   .op = DJINN_MSG_TENSOR_READ,
						   .k = rd++ };
			assert_int_equal(dj_send(fd, req[n].op, req[n].id, sid,
						 &io, sizeof(io)),
					 0);
			n++;
		} else if (kind == 2 && hb < NH) {
			req[n] = (typeof(req[0])){ .id = 0x9e3779b97f4a7c15ull *
							 (uint64_t)(n + 1),
						   .op = DJINN_MSG_HEARTBEAT,
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
		assert_int_equal(r.hdr.type, req[i].op);
		assert_int_equal(r.hdr.session_id, sid);
		if (r.error)
			fail_msg("request %d (op %u): error %d \"%s\"", i,
				 req[i].op, r.error, r.msg);
		switch (req[i].op) {
		case DJINN_MSG_GRAPH_SUBMIT:
			graph_resp_at(__LINE__, &r, 1, &req[i].out);
			break;
		case DJINN_MSG_TENSOR_READ:
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

		if (req[i].op != DJINN_MSG_GRAPH_SUBMIT)
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_graph_mlp, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_graph_gpt2_block, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_graph_pipelined, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_graph_bad, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_graph_cancel, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_graph_too_big, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_in_flight, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd graphs", tests, NULL, NULL);
}
