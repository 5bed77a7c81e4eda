// SPDX-License-Identifier: MIT
/*
 * Every op of the op set on the CUDA backend against the CPU backend,
 * on random inputs, in every dtype the op takes.
 *
 * Each case builds one node, infers its result with lib/graph.c as the
 * executor does, runs it on both backends (the CPU one on host memory,
 * the CUDA one on device memory from its own provider) and compares:
 * integer and byte results exactly, float results within a tolerance per
 * dtype (f32 1e-4, f16 1e-2, bf16 2e-2, relative, with a floor of a
 * fraction of the result's largest magnitude: the whole of it for long
 * sums, matmul and attention, a tenth for row ops, a hundredth for
 * elementwise ops). Both backends compute in f32 and round once, so
 * these bounds are loose for a correct kernel and tight for a wrong one.
 * Refusals must match too: the same errno, and the same message for
 * everything but a missing kernel.
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
#include <cmocka.h>

#include "array_size.h"
#include "gpu.h"
#include "graph.h"
#include "../unit/dtypes.h"

#define FLOOR_SUM 1.0
#define FLOOR_ROW 0.1
#define FLOOR_ELEM 0.01

static struct gpu G;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* uniform in [-a, a) */
static float rndf(float a)
{
	return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1) * a;
}

static struct djinn_tensor_desc desc(unsigned int dtype, const uint64_t *dims,
				     unsigned int ndim)
{
	struct djinn_tensor_desc d;

	memset(&d, 0, sizeof(d));
	d.dtype = (uint8_t)dtype;
	d.ndim = (uint8_t)ndim;
	for (unsigned int k = 0; k < ndim; k++)
		d.dims[k] = dims[k];
	return d;
}

/* D(dtype, dims...): the dims as uint64_t, whatever their type */
#define D(dt, ...)                                  \
	desc(dt, (const uint64_t[]){ __VA_ARGS__ }, \
	     sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t))

static uint64_t nelems(const struct djinn_tensor_desc *d)
{
	uint64_t n, b;

	assert_int_equal(djinn_desc_check(d, &n, &b), 0);
	return n;
}

static uint64_t nbytes(const struct djinn_tensor_desc *d)
{
	uint64_t n, b;

	assert_int_equal(djinn_desc_check(d, &n, &b), 0);
	return b;
}

static double get(const void *p, unsigned int dtype, uint64_t i)
{
	switch (dtype) {
	case F32:
		return ((const float *)p)[i];
	case F16:
		return gpu_from_f16(((const uint16_t *)p)[i]);
	case BF16:
		return gpu_from_bf16(((const uint16_t *)p)[i]);
	case I32:
		return ((const int32_t *)p)[i];
	case I64:
		return (double)((const int64_t *)p)[i];
	default:
		return ((const uint8_t *)p)[i];
	}
}

static void set(void *p, unsigned int dtype, uint64_t i, double v)
{
	switch (dtype) {
	case F32:
		((float *)p)[i] = (float)v;
		break;
	case F16:
		((uint16_t *)p)[i] = gpu_to_f16((float)v);
		break;
	case BF16:
		((uint16_t *)p)[i] = gpu_to_bf16((float)v);
		break;
	case I32:
		((int32_t *)p)[i] = (int32_t)v;
		break;
	case I64:
		((int64_t *)p)[i] = (int64_t)v;
		break;
	default:
		((uint8_t *)p)[i] = (uint8_t)v;
		break;
	}
}

/* Random values: floats in [-2, 2), integers in [-50, 50) (u8 [0, 200)),
 * none zero when @nonzero. An empty tensor gets 256 bytes all the same. */
static void *fill(const struct djinn_tensor_desc *d, bool nonzero)
{
	uint64_t n = nelems(d);
	void *p = aligned_alloc(256, ((nbytes(d) + 255) & ~255ull) ?: 256);

	assert_non_null(p);
	for (uint64_t i = 0; i < n; i++) {
		double v;

		if (d->dtype <= BF16)
			v = rndf(2.0f);
		else if (d->dtype == U8)
			v = (double)(rnd() % 200);
		else
			v = (double)(rnd() % 100) - 50;
		if (nonzero && v == 0)
			v = 1;
		set(p, d->dtype, i, v);
	}
	return p;
}

static double tol_of(unsigned int dtype)
{
	return dtype == F32 ? 1e-4 : dtype == F16 ? 1e-2 : 2e-2;
}

/* The CUDA result of the last both() that ran, for a test to look at. */
static void *last_out;
static struct djinn_tensor_desc last_desc;

/*
 * Run @node on inputs @in[nr] (host bytes of @d[nr]) on both backends
 * and compare. Both results start as 0xff bytes (NaN, or -1), so that a
 * kernel that leaves an element unwritten cannot match by luck. Returns
 * the errno both gave.
 */
/* both() gives the CUDA backend its inputs in host memory too
 * (dj_tensor's @host), as djinnd's own graphs' staged inputs are */
static bool inputs_on_host;

static int both(const char *what, struct djinn_node node, unsigned int nr,
		const struct djinn_tensor_desc *d, void *const *in,
		double floor)
{
	struct djinn_graph gr = { .nr_inputs = nr,
				  .nr_nodes = 1,
				  .nr_outputs = 1 };
	struct djinn_ref refs[DJINN_MAX_NODE_INPUTS];
	uint32_t outs[2] = { 0, 0 };
	struct djinn_graph_view view = { &gr, refs, &node, outs };
	struct dj_tensor ct[DJINN_MAX_NODE_INPUTS], gt[DJINN_MAX_NODE_INPUTS];
	struct dj_tensor co, go;
	struct vmu_provider *prov = G.b->provider;
	char cmsg[256] = "", gmsg[256] = "", imsg[256] = "";
	void *cout, *gout;
	uint64_t n, bytes;
	int cret, gret;

	memset(refs, 0, sizeof(refs));
	for (unsigned int i = 0; i < nr; i++)
		node.inputs[i] = i;
	node.nr_inputs = (uint8_t)nr;
	memset(&co, 0, sizeof(co));
	if (djinn_graph_infer(&view, d, &co.desc, imsg, sizeof(imsg))) {
		/* the graph layer refuses it: run both anyway on a result
		 * like input 0, to compare the backends' own checks */
		co.desc = d[0];
	}
	go.desc = co.desc;
	n = nelems(&co.desc);
	bytes = nbytes(&co.desc);
	gpu_reset(&G);
	for (unsigned int i = 0; i < nr; i++) {
		ct[i].desc = gt[i].desc = d[i];
		ct[i].addr = (uintptr_t)in[i];
		gt[i].addr = gpu_alloc(&G, nbytes(&d[i]));
		gt[i].host = inputs_on_host ? in[i] : NULL;
		if (nbytes(&d[i])) /* an empty tensor has no bytes to send */
			gpu_put(&G, gt[i].addr, in[i], nbytes(&d[i]));
	}
	if (bytes > G.size) /* nor would it fit on the device */
		fail_msg("%s: a result of %llu bytes", what,
			 (unsigned long long)bytes);
	cout = aligned_alloc(256, bytes / 256 * 256 + 256);
	gout = calloc(1, bytes + 1);
	assert_non_null(cout);
	assert_non_null(gout);
	memset(cout, 0xff, bytes);
	co.addr = (uintptr_t)cout;
	go.addr = gpu_alloc(&G, bytes);
	if (bytes)
		assert_int_equal(prov->ops->memset(prov, go.addr, 0xff, bytes),
				 0);
	free(last_out);
	last_out = NULL;

	cret = G.cpu->ops->run_node(G.cpu, &node, ct, &co, cmsg, sizeof(cmsg));
	gret = G.b->ops->run_node(G.b, &node, gt, &go, gmsg, sizeof(gmsg));
	if (!gret)
		gret = G.b->ops->sync(G.b);
	if (cret != gret)
		fail_msg("%s: cpu %d (%s), cuda %d (%s)", what, cret, cmsg,
			 gret, gmsg);
	if (cret) {
		if (cret != -EOPNOTSUPP && strcmp(cmsg, gmsg))
			fail_msg("%s: cpu says '%s', cuda '%s'", what, cmsg,
				 gmsg);
		free(cout);
		free(gout);
		return cret;
	}
	gpu_get(&G, gout, go.addr, bytes);

	if (co.desc.dtype > BF16) {
		if (memcmp(cout, gout, bytes)) {
			for (uint64_t i = 0; i < n; i++)
				if (get(cout, co.desc.dtype, i) !=
				    get(gout, co.desc.dtype, i))
					fail_msg("%s: element %llu: cpu %g, "
						 "cuda %g",
						 what, (unsigned long long)i,
						 get(cout, co.desc.dtype, i),
						 get(gout, co.desc.dtype, i));
		}
	} else {
		double tol = tol_of(co.desc.dtype), max = 0;

		for (uint64_t i = 0; i < n; i++)
			if (isfinite(get(cout, co.desc.dtype, i)))
				max = fmax(max,
					   fabs(get(cout, co.desc.dtype, i)));
		for (uint64_t i = 0; i < n; i++) {
			double w = get(cout, co.desc.dtype, i);
			double v = get(gout, co.desc.dtype, i);

			/* the same value, infinities included (an f16
			 * quotient past 65504), or both NaN */
			if (w == v || (isnan(w) && isnan(v)))
				continue;
			if (!(fabs(v - w) <= tol * (fabs(w) + floor * max)))
				fail_msg("%s (%s): element %llu: cpu %.9g, "
					 "cuda %.9g",
					 what, djinn_dtype_name(co.desc.dtype),
					 (unsigned long long)i, w, v);
		}
	}
	free(cout);
	last_out = gout;
	last_desc = co.desc;
	return 0;
}

static struct djinn_node op(unsigned int o)
{
	struct djinn_node n;

	memset(&n, 0, sizeof(n));
	n.op = (uint16_t)o;
	return n;
}

static const unsigned int floats[] = { F32, F16, BF16 };
static const unsigned int all_dtypes[] = { F32, F16, BF16, I32, I64, U8 };

static void free_all(void **p, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		free(p[i]);
}

/* ---------------------------------------------------------------------- */

static void test_matmul(void **state)
{
	static const struct {
		uint64_t a[4], b[4];
		unsigned int na, nb, ta, tb;
	} cases[] = {
		{ { 2, 3, 17, 33 }, { 33, 19 }, 4, 2, 0, 0 }, /* one gemm */
		{ { 4, 1, 8, 16 }, { 1, 3, 16, 8 }, 4, 4, 0, 0 },
		{ { 5, 24 }, { 9, 24 }, 2, 2, 0, 1 },
		{ { 2, 24, 5 }, { 24, 9 }, 3, 2, 1, 0 },
		{ { 3, 40, 7 }, { 3, 11, 40 }, 3, 3, 1, 1 },
		{ { 1, 128 }, { 128, 300 }, 2, 2, 0, 0 }, /* a decode row */
		{ { 96, 256 }, { 256, 160 }, 2, 2, 0, 0 },
	};

	for (unsigned int f = 0; f < 3; f++) {
		for (unsigned int c = 0; c < ARRAY_SIZE(cases); c++) {
			struct djinn_tensor_desc d[2];
			struct djinn_node n = op(DJINN_GOP_MATMUL);
			void *in[2];

			d[0] = desc(floats[f], NULL, 0);
			d[1] = desc(floats[f], NULL, 0);
			d[0].ndim = (uint8_t)cases[c].na;
			d[1].ndim = (uint8_t)cases[c].nb;
			memcpy(d[0].dims, cases[c].a, sizeof(cases[c].a));
			memcpy(d[1].dims, cases[c].b, sizeof(cases[c].b));
			n.params.matmul.trans_a = cases[c].ta;
			n.params.matmul.trans_b = cases[c].tb;
			in[0] = fill(&d[0], false);
			in[1] = fill(&d[1], false);
			assert_int_equal(both("matmul", n, 2, d, in, FLOOR_SUM),
					 0);
			free_all(in, 2);
		}
	}
}

static void test_binary(void **state)
{
	static const unsigned int ops[] = { DJINN_GOP_ADD, DJINN_GOP_SUB,
					    DJINN_GOP_MUL, DJINN_GOP_DIV };

	for (unsigned int t = 0; t < 6; t++) {
		for (unsigned int o = 0; o < 4; o++) {
			unsigned int dt = all_dtypes[t];
			struct djinn_tensor_desc d[2] = { D(dt, 4, 1, 5, 7),
							  D(dt, 3, 1, 7) };
			struct djinn_tensor_desc e[2] = { D(dt, 300, 1000),
							  D(dt, 300, 1000) };
			void *in[2];

			in[0] = fill(&d[0], false);
			in[1] = fill(&d[1], true);
			assert_int_equal(both("binary broadcast", op(ops[o]), 2,
					      d, in, FLOOR_ELEM),
					 0);
			free_all(in, 2);
			in[0] = fill(&e[0], false);
			in[1] = fill(&e[1], true);
			assert_int_equal(both("binary", op(ops[o]), 2, e, in,
					      FLOOR_ELEM),
					 0);
			free_all(in, 2);
		}
	}
}

static void test_int_div_zero(void **state)
{
	for (unsigned int t = 3; t < 6; t++) {
		unsigned int dt = all_dtypes[t];
		struct djinn_tensor_desc d[2] = { D(dt, 64, 33), D(dt, 33) };
		void *in[2] = { fill(&d[0], false), fill(&d[1], true) };

		set(in[1], dt, 17, 0);
		assert_int_equal(both("int div by zero", op(DJINN_GOP_DIV), 2,
				      d, in, 0),
				 -EDOM);
		free_all(in, 2);
	}
}

static void test_unary(void **state)
{
	static const unsigned int ops[] = { DJINN_GOP_SCALE, DJINN_GOP_GELU,
					    DJINN_GOP_RELU, DJINN_GOP_SILU };

	for (unsigned int f = 0; f < 3; f++) {
		for (unsigned int o = 0; o < 4; o++) {
			struct djinn_tensor_desc d[1] = { D(floats[f], 1021,
							    1031) };
			struct djinn_node n = op(ops[o]);
			void *in[1] = { fill(&d[0], false) };

			n.params.scalar.alpha =
				ops[o] == DJINN_GOP_SCALE ? 0.37f : 0.0f;
			assert_int_equal(both("unary", n, 1, d, in, FLOOR_ELEM),
					 0);
			free(in[0]);
		}
	}
	/* no integer kernels, on either backend */
	{
		struct djinn_tensor_desc d[1] = { D(I32, 10) };
		void *in[1] = { fill(&d[0], false) };

		assert_int_equal(both("relu i32", op(DJINN_GOP_RELU), 1, d, in,
				      0),
				 -EOPNOTSUPP);
		free(in[0]);
	}
}

static void test_rows(void **state)
{
	for (unsigned int f = 0; f < 3; f++) {
		unsigned int dt = floats[f];
		struct djinn_tensor_desc s[1] = { D(dt, 3, 7, 1001) };
		/* gamma and beta in f32 whatever x is: the CPU allows it */
		struct djinn_tensor_desc l[3] = { D(dt, 9, 300), D(F32, 300),
						  D(dt, 300) };
		struct djinn_node ln = op(DJINN_GOP_LAYERNORM);
		struct djinn_node rn = op(DJINN_GOP_RMSNORM);
		void *in[3];

		in[0] = fill(&s[0], false);
		set(in[0], dt, 5, 40.0); /* a large logit */
		assert_int_equal(both("softmax", op(DJINN_GOP_SOFTMAX), 1, s,
				      in, FLOOR_ROW),
				 0);
		free(in[0]);

		for (unsigned int i = 0; i < 3; i++)
			in[i] = fill(&l[i], false);
		/* a row with a large mean and a small spread */
		for (uint64_t i = 0; i < 300; i++)
			set(in[0], dt, 300 + i, 100.0 + rndf(0.5f));
		ln.params.scalar.eps = 1e-5f;
		rn.params.scalar.eps = 1e-6f;
		assert_int_equal(both("layernorm", ln, 3, l, in, FLOOR_ROW), 0);
		assert_int_equal(both("rmsnorm", rn, 2, l, in, FLOOR_ROW), 0);
		ln.params.scalar.eps = 0.0f;
		assert_int_equal(both("layernorm eps 0", ln, 3, l, in,
				      FLOOR_ROW),
				 -EINVAL);
		free_all(in, 3);
	}
}

static void test_argmax(void **state)
{
	for (unsigned int t = 0; t < 6; t++) {
		unsigned int dt = all_dtypes[t];
		struct djinn_tensor_desc d[1] = { D(dt, 13, 50257) };
		void *in[1] = { fill(&d[0], false) };

		/* ties: the first maximum wins */
		set(in[0], dt, 100, 120);
		set(in[0], dt, 200, 120);
		if (dt <= BF16) /* a NaN is the maximum, the first one */
			for (uint64_t i = 0; i < 3; i++)
				set(in[0], dt, 50257 * 4 + 999 + i * 7, NAN);
		assert_int_equal(
			both("argmax", op(DJINN_GOP_ARGMAX), 1, d, in, 0), 0);
		free(in[0]);
	}
}

/*
 * SAMPLE: the CUDA kernel's choices are lib/sample.c's (the CPU
 * backend's), token for token: greedy, temperature, top-k, top-p and
 * both, on GPT-2's and Qwen's vocabularies, rows with ties (bf16 and f16
 * logits have many), a NaN row and bad parameters (their in-band codes).
 * Two candidates whose running masses tie within rounding could differ;
 * random logits make that a chance of about 1e-12 a row.
 */
static void test_sample(void **state)
{
	static const struct djinn_sample_params rows[] = {
		{ .temperature = 0, .top_p = 1 },
		{ .temperature = 1, .top_p = 1, .rng = 1 },
		{ .temperature = 0.7f, .top_p = 1, .top_k = 40, .rng = 2 },
		{ .temperature = 1.3f, .top_p = 0.9f, .rng = 3 },
		{ .temperature = 0.9f, .top_p = 0.95f, .top_k = 50, .rng = 4 },
		{ .temperature = 2, .top_p = 1, .top_k = 1, .rng = 5 },
		{ .temperature = 1, .top_p = 0.05f, .rng = 6 },
		{ .temperature = 1, .top_p = 1, .top_k = 7, .rng = 7 },
		{ .temperature = 1, .top_p = 1, .rng = 8 }, /* a NaN */
		{ .temperature = -1, .top_p = 1 }, /* bad */
	};
	static const uint64_t vocabs[] = { 1000, 50257, 151936 };
	const uint64_t R = ARRAY_SIZE(rows);

	for (unsigned int t = 0; t < 3; t++) {
		for (unsigned int v = 0; v < ARRAY_SIZE(vocabs); v++) {
			uint64_t V = vocabs[v];
			struct djinn_tensor_desc d[2] = {
				D(all_dtypes[t], R, V), D(U8, R, 24)
			};
			void *in[2] = { fill(&d[0], false),
					fill(&d[1], false) };
			int64_t *tok;

			for (unsigned int round = 0; round < 4; round++) {
				for (uint64_t r = 0; r < R; r++) {
					struct djinn_sample_params p = rows[r];

					p.rng += round * 1000;
					memcpy((uint8_t *)in[1] + r * 24, &p,
					       24);
				}
				/* logits in [-8, 8) */
				for (uint64_t i = 0; i < R * V; i++)
					set(in[0], all_dtypes[t], i,
					    rndf(8.0f));
				set(in[0], all_dtypes[t], 8 * V + V / 2, NAN);
				assert_int_equal(both("sample",
						      op(DJINN_GOP_SAMPLE), 2,
						      d, in, 0),
						 0);
				tok = last_out;
				assert_int_equal(tok[8], -1 - (int64_t)(V / 2));
				assert_int_equal(tok[9],
						 DJINN_SAMPLE_BAD_PARAMS);
			}
			free(in[0]);
			free(in[1]);
		}
	}
}

static void test_attention(void **state)
{
	static const struct {
		uint64_t B, H, Hk, T, S, D, Dv;
		unsigned int causal;
	} cases[] = {
		{ 2, 4, 2, 5, 9, 16, 16, 1 },
		{ 2, 4, 4, 5, 9, 16, 8, 0 },
		{ 1, 8, 1, 1, 300, 64, 64, 1 }, /* decode, MQA, 3 tiles */
		{ 1, 2, 2, 130, 130, 32, 32, 1 },
	};

	for (unsigned int f = 0; f < 3; f++) {
		for (unsigned int c = 0; c < ARRAY_SIZE(cases); c++) {
			unsigned int dt = floats[f];
			struct djinn_tensor_desc d[3] = {
				D(dt, cases[c].B, cases[c].H, cases[c].T,
				  cases[c].D),
				D(dt, cases[c].B, cases[c].Hk, cases[c].S,
				  cases[c].D),
				D(dt, cases[c].B, cases[c].Hk, cases[c].S,
				  cases[c].Dv),
			};
			struct djinn_node n = op(DJINN_GOP_ATTENTION);
			void *in[3];

			n.params.attention.causal = cases[c].causal;
			n.params.attention.scale = c == 1 ? 0.3f : 0.0f;
			for (unsigned int i = 0; i < 3; i++)
				in[i] = fill(&d[i], false);
			assert_int_equal(
				both("attention", n, 3, d, in, FLOOR_SUM), 0);
			free_all(in, 3);
		}
	}
}

/* Token-major attention reading a KV cache (P, 3, Hk D) in place. */
static void test_attention_tokens(void **state)
{
	static const struct {
		uint64_t H, Hk, T, P, D;
	} cases[] = {
		{ 12, 4, 1, 300, 64 }, /* decode, GQA, 3 tiles */
		{ 4, 4, 20, 25, 32 }, /* prefill over a cache */
		{ 4, 2, 9, 0, 16 }, /* no cache */
	};

	for (unsigned int f = 0; f < 3; f++) {
		for (unsigned int c = 0; c < ARRAY_SIZE(cases); c++) {
			unsigned int dt = floats[f], nr = cases[c].P ? 4 : 3;
			uint64_t H = cases[c].H, Hk = cases[c].Hk;
			uint64_t T = cases[c].T, D = cases[c].D;
			struct djinn_tensor_desc d[4] = {
				D(dt, T, H, D),
				D(dt, T, Hk, D),
				D(dt, T, Hk, D),
				D(dt, cases[c].P, 3, Hk * D),
			};
			struct djinn_node n = op(DJINN_GOP_ATTENTION);
			void *in[4];

			n.params.attention.causal = 1;
			n.params.attention.layout = DJINN_ATTN_TOKENS;
			if (cases[c].P) {
				n.params.attention.cache_k = 2;
				n.params.attention.cache_v = 0;
			}
			for (unsigned int i = 0; i < nr; i++)
				in[i] = fill(&d[i], false);
			assert_int_equal(both("attention tokens", n, nr, d, in,
					      FLOOR_SUM),
					 0);
			free_all(in, nr);
		}
	}
}

/*
 * Varlen attention (DJINN_ATTN_VARLEN): four contexts' rows stacked, each
 * with its own cache in device memory (or none): each context's rows bit
 * for bit what its own TOKENS attention gives alone on the device (both
 * kernels share attend_row()), and within the tolerance of the CPU
 * backend's varlen attention over the same inputs in host memory.
 */
static void test_attention_varlen(void **state)
{
	static const uint64_t Ts[] = { 1, 20, 1, 3 }, Ps[] = { 300, 5, 0, 2 };
	enum { N = 4, H = 12, Hk = 4, Dh = 64, W = Hk * Dh };

	for (unsigned int f = 0; f < 3; f++) {
		unsigned int dt = floats[f];
		uint64_t R = 0, es = djinn_dtype_size(dt), tol_max = 0;
		int64_t gtab[N][DJINN_VARLEN_COLS], ctab[N][DJINN_VARLEN_COLS];
		struct djinn_tensor_desc dq, dk, dc[N], dt4;
		struct dj_tensor gi[4], ci[4], go, co;
		struct djinn_node n = op(DJINN_GOP_ATTENTION);
		void *q, *k, *v, *c[N], *gout, *cout, *alone;
		char msg[256] = "";

		gpu_reset(&G);
		for (unsigned int i = 0; i < N; i++)
			R += Ts[i];
		dq = D(dt, R, H, Dh);
		dk = D(dt, R, Hk, Dh);
		dt4 = D(I64, N, DJINN_VARLEN_COLS);
		q = fill(&dq, false);
		k = fill(&dk, false);
		v = fill(&dk, false);
		memset(gi, 0, sizeof(gi));
		memset(ci, 0, sizeof(ci));
		gi[0].desc = ci[0].desc = dq;
		gi[1].desc = gi[2].desc = ci[1].desc = ci[2].desc = dk;
		gi[3].desc = ci[3].desc = dt4;
		ci[0].addr = (uintptr_t)q;
		ci[1].addr = (uintptr_t)k;
		ci[2].addr = (uintptr_t)v;
		gi[0].addr = gpu_alloc(&G, nbytes(&dq));
		gi[1].addr = gpu_alloc(&G, nbytes(&dk));
		gi[2].addr = gpu_alloc(&G, nbytes(&dk));
		gpu_put(&G, gi[0].addr, q, nbytes(&dq));
		gpu_put(&G, gi[1].addr, k, nbytes(&dk));
		gpu_put(&G, gi[2].addr, v, nbytes(&dk));
		for (unsigned int i = 0; i < N; i++) {
			uint64_t ga = 0;

			c[i] = NULL;
			dc[i] = D(dt, Ps[i] ? Ps[i] : 1, 3, W);
			if (Ps[i]) {
				c[i] = fill(&dc[i], false);
				ga = gpu_alloc(&G, nbytes(&dc[i]));
				gpu_put(&G, ga, c[i], nbytes(&dc[i]));
			}
			gtab[i][DJINN_VARLEN_T] = ctab[i][DJINN_VARLEN_T] =
				(int64_t)Ts[i];
			gtab[i][DJINN_VARLEN_P] = ctab[i][DJINN_VARLEN_P] =
				(int64_t)Ps[i];
			gtab[i][DJINN_VARLEN_CACHE] = (int64_t)ga;
			ctab[i][DJINN_VARLEN_CACHE] = (int64_t)(uintptr_t)c[i];
			gtab[i][DJINN_VARLEN_STRIDE] =
				ctab[i][DJINN_VARLEN_STRIDE] = 3 * W;
		}
		gi[3].host = gtab;
		ci[3].host = ctab;
		ci[3].addr = (uintptr_t)ctab;
		go.desc = co.desc = dq;
		go.host = co.host = NULL;
		go.addr = gpu_alloc(&G, nbytes(&dq));
		cout = aligned_alloc(256, (nbytes(&dq) + 255) & ~255ull);
		gout = malloc(nbytes(&dq));
		alone = malloc(nbytes(&dq));
		assert_non_null(cout);
		assert_non_null(gout);
		assert_non_null(alone);
		co.addr = (uintptr_t)cout;
		n.params.attention.causal = 1;
		n.params.attention.layout = DJINN_ATTN_VARLEN;
		n.params.attention.cache_k = 2;
		n.params.attention.cache_v = 0;
		for (unsigned int j = 0; j < 4; j++)
			n.inputs[j] = j;
		n.nr_inputs = 4;
		if (G.cpu->ops->run_node(G.cpu, &n, ci, &co, msg, sizeof(msg)))
			fail_msg("cpu varlen: %s", msg);
		if (G.b->ops->run_node(G.b, &n, gi, &go, msg, sizeof(msg)) ||
		    G.b->ops->sync(G.b))
			fail_msg("cuda varlen: %s", msg);
		gpu_get(&G, gout, go.addr, nbytes(&dq));

		/* each context alone, TOKENS, into its rows of @alone */
		for (unsigned int i = 0, r = 0; i < N; r += Ts[i], i++) {
			struct djinn_node a = n;
			struct dj_tensor t[4], o;

			a.params.attention.layout = DJINN_ATTN_TOKENS;
			a.nr_inputs = Ps[i] ? 4 : 3;
			a.inputs[3] = Ps[i] ? 3 : 0;
			if (!Ps[i])
				a.params.attention.cache_k = 0;
			for (unsigned int j = 0; j < 3; j++) {
				uint64_t row = j ? W : H * Dh;

				t[j] = gi[j];
				t[j].desc.dims[0] = Ts[i];
				t[j].addr += r * row * es;
			}
			t[3].desc = dc[i];
			t[3].addr = (uint64_t)gtab[i][DJINN_VARLEN_CACHE];
			t[3].host = NULL;
			o = go;
			o.desc.dims[0] = Ts[i];
			o.addr = gpu_alloc(&G, nbytes(&o.desc));
			if (G.b->ops->run_node(G.b, &a, t, &o, msg,
					       sizeof(msg)) ||
			    G.b->ops->sync(G.b))
				fail_msg("cuda context %u alone: %s", i, msg);
			gpu_get(&G, (uint8_t *)alone + r * H * Dh * es, o.addr,
				nbytes(&o.desc));
		}
		if (memcmp(gout, alone, nbytes(&dq)))
			fail_msg("varlen attention (%s): a context's rows are "
				 "not its own attention's",
				 djinn_dtype_name(dt));
		for (uint64_t i = 0; i < R * H * Dh; i++) {
			double want = get(cout, dt, i), got = get(gout, dt, i);

			if (fabs(want - got) > tol_of(dt) * (1 + fabs(want)))
				tol_max++;
		}
		if (tol_max)
			fail_msg("varlen attention (%s): %llu elements past "
				 "the tolerance against the cpu",
				 djinn_dtype_name(dt),
				 (unsigned long long)tol_max);
		free(q);
		free(k);
		free(v);
		for (unsigned int i = 0; i < N; i++)
			free(c[i]);
		free(cout);
		free(gout);
		free(alone);
	}
}

/* Every element of the last both()'s CUDA result is zero. */
static void expect_zeros(const char *what)
{
	unsigned int dt = last_desc.dtype;

	assert_non_null(last_out);
	for (uint64_t i = 0; i < nelems(&last_desc); i++)
		if (get(last_out, dt, i) != 0)
			fail_msg("%s (%s): element %llu is %g, not 0", what,
				 djinn_dtype_name(dt), (unsigned long long)i,
				 get(last_out, dt, i));
}

/*
 * Attention with no keys (S = 0: no cache rows and no new keys) writes
 * zeros, as the CPU backend does, not 0/0; causal with no keys and some
 * queries is refused alike. A cache with no new keys after it is keys
 * all the same.
 */
static void test_attention_no_keys(void **state)
{
	for (unsigned int f = 0; f < 3; f++) {
		unsigned int dt = floats[f];
		/* (B, H, T, D) over (B, Hk, 0, D) */
		struct djinn_tensor_desc h[3] = { D(dt, 2, 4, 5, 16),
						  D(dt, 2, 2, 0, 16),
						  D(dt, 2, 2, 0, 16) };
		/* (T, H, D) over (0, Hk, D), and a cache (P, 3, Hk D) */
		struct djinn_tensor_desc t[4] = { D(dt, 3, 4, 16),
						  D(dt, 0, 2, 16),
						  D(dt, 0, 2, 16),
						  D(dt, 0, 3, 32) };
		struct djinn_node n = op(DJINN_GOP_ATTENTION);
		void *in[4];
		uint64_t P;

		for (unsigned int i = 0; i < 3; i++)
			in[i] = fill(&h[i], false);
		assert_int_equal(
			both("attention, no keys", n, 3, h, in, FLOOR_SUM), 0);
		expect_zeros("attention, no keys");
		n.params.attention.causal = 1; /* T > S */
		assert_int_equal(both("attention, causal, no keys", n, 3, h, in,
				      FLOOR_SUM),
				 -EINVAL);
		free_all(in, 3);

		n = op(DJINN_GOP_ATTENTION);
		n.params.attention.layout = DJINN_ATTN_TOKENS;
		for (unsigned int i = 0; i < 3; i++)
			in[i] = fill(&t[i], false);
		assert_int_equal(both("attention tokens, no keys", n, 3, t, in,
				      FLOOR_SUM),
				 0);
		expect_zeros("attention tokens, no keys");
		/* the same after a cache of P rows (keys in slot 2, values
		 * in slot 0): none, then 7 */
		n.params.attention.cache_k = 2;
		n.params.attention.cache_v = 0;
		for (P = 0; P <= 7; P += 7) {
			t[3].dims[0] = P;
			in[3] = fill(&t[3], false);
			n.params.attention.causal = P ? 1 : 0;
			assert_int_equal(both(P ? "attention, cache only" :
						  "attention, empty cache",
					      n, 4, t, in, FLOOR_SUM),
					 0);
			if (!P)
				expect_zeros("attention, empty cache");
			free(in[3]);
		}
		free_all(in, 3);
	}
}

/*
 * Softmax rows with -inf in them: a row all -inf is NaN on both
 * backends (exp(-inf - -inf), as in PyTorch), a row -inf but for some
 * entries is the softmax of those.
 */
static void test_softmax_masked(void **state)
{
	for (unsigned int f = 0; f < 3; f++) {
		unsigned int dt = floats[f];
		struct djinn_tensor_desc d[1] = { D(dt, 3, 300) };
		void *in[1] = { fill(&d[0], false) };

		for (uint64_t i = 0; i < 300; i++) {
			set(in[0], dt, i, -INFINITY);
			if (i % 3)
				set(in[0], dt, 300 + i, -INFINITY);
		}
		assert_int_equal(both("softmax, masked", op(DJINN_GOP_SOFTMAX),
				      1, d, in, FLOOR_ROW),
				 0);
		for (uint64_t i = 0; i < 300; i++)
			if (!isnan(get(last_out, dt, i)))
				fail_msg("softmax of -inf (%s): element %llu "
					 "is %g, not NaN",
					 djinn_dtype_name(dt),
					 (unsigned long long)i,
					 get(last_out, dt, i));
		free(in[0]);
	}
}

static void test_embedding(void **state)
{
	static const unsigned int tables[] = { F32, F16, BF16 };

	/* The graph layer takes float tables only (a u8 or i64 table never
	 * reaches a backend): the backends are compared on what it takes. */
	for (unsigned int t = 0; t < 2; t++) {
		struct djinn_tensor_desc d[2] = { D(t ? I64 : U8, 50, 3),
						  D(I32, 3, 700) },
					 o;
		struct djinn_graph gr = { .nr_inputs = 2,
					  .nr_nodes = 1,
					  .nr_outputs = 1 };
		struct djinn_ref refs[2] = { 0 };
		struct djinn_node node = op(DJINN_GOP_EMBEDDING);
		uint32_t outs[1] = { 0 };
		struct djinn_graph_view view = { &gr, refs, &node, outs };
		char msg[256] = "";

		node.nr_inputs = 2;
		node.inputs[1] = 1;
		assert_int_equal(djinn_graph_infer(&view, d, &o, msg,
						   sizeof(msg)),
				 -EINVAL);
		assert_non_null(strstr(msg, "not a float"));
	}
	/* ids on the device only (a client's graph: checked by a kernel),
	 * and in host memory too (a step's: checked there, no wait); the
	 * same bytes and the same message either way */
	for (unsigned int t = 0; t < 6; t++) {
		for (unsigned int i64 = 0; i64 < 2; i64++) {
			unsigned int it = i64 ? I64 : I32;
			/* rows of 24 elements */
			uint64_t C = 24;
			struct djinn_tensor_desc d[2] = {
				D(tables[t % 3], 50, C), D(it, 3, 700)
			};
			void *in[2] = { fill(&d[0], false), NULL };

			inputs_on_host = t >= 3;

			in[1] = malloc(nbytes(&d[1]));
			for (uint64_t i = 0; i < 2100; i++)
				set(in[1], it, i, (double)(rnd() % 50));
			assert_int_equal(both("embedding",
					      op(DJINN_GOP_EMBEDDING), 2, d, in,
					      0),
					 0);
			set(in[1], it, 1234, 50); /* one past the table */
			set(in[1], it, 1500, -1);
			assert_int_equal(both("embedding, bad id",
					      op(DJINN_GOP_EMBEDDING), 2, d, in,
					      0),
					 -EINVAL);
			free_all(in, 2);
		}
	}
	inputs_on_host = false;
}

static void test_movers(void **state)
{
	for (unsigned int t = 0; t < 6; t++) {
		unsigned int dt = all_dtypes[t];
		struct djinn_tensor_desc x[1] = { D(dt, 2, 3, 40, 5) };
		struct djinn_tensor_desc c[3] = { D(dt, 2, 3, 40, 5),
						  D(dt, 2, 3, 40, 1),
						  D(dt, 2, 3, 40, 3) };
		struct djinn_tensor_desc c0[2] = { D(dt, 2, 3, 40, 5),
						   D(dt, 7, 3, 40, 5) };
		struct djinn_node n;
		void *in[3];

		in[0] = fill(&x[0], false);
		n = op(DJINN_GOP_RESHAPE);
		n.params.shape.ndim = 2;
		n.params.shape.dims[0] = 6;
		n.params.shape.dims[1] = -1;
		assert_int_equal(both("reshape", n, 1, x, in, 0), 0);

		n = op(DJINN_GOP_PERMUTE);
		n.params.shape.ndim = 4;
		n.params.shape.dims[0] = 3;
		n.params.shape.dims[1] = 1;
		n.params.shape.dims[2] = 0;
		n.params.shape.dims[3] = 2;
		assert_int_equal(both("permute", n, 1, x, in, 0), 0);

		n = op(DJINN_GOP_SLICE);
		n.params.axis.axis = 2;
		n.params.axis.start = 3;
		n.params.axis.end = -7;
		assert_int_equal(both("slice", n, 1, x, in, 0), 0);
		n.params.axis.axis = -1;
		n.params.axis.start = 1;
		n.params.axis.end = 4;
		assert_int_equal(both("slice last", n, 1, x, in, 0), 0);
		n.params.axis.end = 9;
		assert_int_equal(both("slice past", n, 1, x, in, 0), -EINVAL);
		free(in[0]);

		for (unsigned int i = 0; i < 3; i++)
			in[i] = fill(&c[i], false);
		n = op(DJINN_GOP_CONCAT);
		n.params.axis.axis = -1;
		assert_int_equal(both("concat", n, 3, c, in, 0), 0);
		free_all(in, 3);
		for (unsigned int i = 0; i < 2; i++)
			in[i] = fill(&c0[i], false);
		n.params.axis.axis = 0;
		assert_int_equal(both("concat 0", n, 2, c0, in, 0), 0);
		free_all(in, 2);
	}
}

static int setup(void **state)
{
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_binary),
		cmocka_unit_test(test_int_div_zero),
		cmocka_unit_test(test_unary),
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_argmax),
		cmocka_unit_test(test_sample),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_attention_tokens),
		cmocka_unit_test(test_attention_varlen),
		cmocka_unit_test(test_attention_no_keys),
		cmocka_unit_test(test_softmax_masked),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_movers),
	};
	int ret;

	gpu_open(&G, 512ull << 20, true);
	ret = cmocka_run_group_tests(tests, setup, NULL);
	free(last_out);
	gpu_close(&G);
	return ret;
}
