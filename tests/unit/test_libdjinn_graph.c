// SPDX-License-Identifier: MIT
/*
 * Unit tests for libdjinn's graph builder: the GRAPH_SUBMIT payload it
 * lays out, byte for byte against proto.h and parsed back with the
 * daemon's djinn_graph_parse(); value numbering; results as inputs (a
 * handle once known, DJINN_REF_RESULT before); the result stubs' shapes;
 * and bad graphs refused at submit, with the daemon's message, before
 * anything is sent.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "test_libdjinn.h"

#define F32 DJINN_DTYPE_F32
#define I32 DJINN_DTYPE_I32

struct fixture {
	struct peer_fx p;
	struct djinn_graph_builder *g;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	peer_fx_open(&f->p, 9);
	assert_int_equal(djinn_graph_new(f->p.s, &f->g), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	djinn_graph_free(f->g);
	peer_fx_close(&f->p);
	free(f);
	return 0;
}

/* Encode @g, which must succeed; the caller frees the payload. */
static void *encode(struct djinn_graph_builder *g, uint64_t *len,
		    struct djinn_tensor_desc *outs)
{
	void *payload = NULL;
	int ret = __djinn_graph_encode(g, &payload, len, outs);

	if (ret)
		fail_msg("encode: %d: %s", ret, djinn_graph_error(g));
	return payload;
}

static void expect_desc(const struct djinn_tensor_desc *got,
			struct djinn_tensor_desc want)
{
	assert_memory_equal(got, &want, sizeof(want));
}

/* ---------------------------------------------------------------------- */
/* The payload */

/*
 * y = gelu(x @ w^T) with x (2, 64) and w (32, 64): the payload is the
 * header, two refs, two nodes and one output padded to 8 bytes, exactly.
 */
static void test_payload_layout(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *x = fake_tensor(f->p.s, 0x1111, D(F32, 2, 64));
	struct djinn_tensor *w = fake_tensor(f->p.s, 0x2222, D(F32, 32, 64));
	struct djinn_node_opts ann = { .phase = DJINN_PHASE_DECODE,
				       .residency = DJINN_RES_OUTPUT };
	struct {
		struct djinn_graph g;
		struct djinn_ref in[2];
		struct djinn_node n[2];
		uint32_t out[2];
	} want = {
		.g = { .nr_inputs = 2, .nr_nodes = 2, .nr_outputs = 1 },
		.in = { { .id = 0x1111, .kind = DJINN_REF_HANDLE },
			{ .id = 0x2222, .kind = DJINN_REF_HANDLE } },
		.n = { { .op = DJINN_GOP_MATMUL,
			 .nr_inputs = 2,
			 .inputs = { 0, 1 },
			 .params.matmul = { .trans_a = 0, .trans_b = 1 } },
		       { .op = DJINN_GOP_GELU,
			 .phase = DJINN_PHASE_DECODE,
			 .residency = DJINN_RES_OUTPUT,
			 .nr_inputs = 1,
			 .inputs = { 2 } } },
		.out = { 1, 0 },
	};
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_graph_view view;
	uint32_t in2[1];
	uint64_t len;
	void *p;
	int vx, vw, mm, y;

	static_assert(sizeof(want) == 24 + 2 * 16 + 2 * 64 + 8, "layout");
	vx = djinn_graph_input(f->g, x);
	vw = djinn_graph_input(f->g, w);
	assert_int_equal(vx, 0);
	assert_int_equal(vw, 1);
	assert_int_equal(djinn_graph_input(f->g, x), vx); /* once */
	mm = djinn_op_matmul(f->g, vx, vw, false, true);
	assert_int_equal(mm, 2);
	in2[0] = (uint32_t)mm;
	y = djinn_graph_node(f->g, DJINN_GOP_GELU, in2, 1, NULL, 0, &ann);
	assert_int_equal(y, 3);
	assert_int_equal(djinn_graph_output(f->g, y), 0);
	assert_int_equal(djinn_graph_output(f->g, y), 0); /* once */

	p = encode(f->g, &len, outs);
	assert_int_equal(len, sizeof(want));
	assert_memory_equal(p, &want, sizeof(want));
	expect_desc(&outs[0], D(F32, 2, 32));

	/* and the daemon's parser reads it back */
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	assert_int_equal(view.g->nr_nodes, 2);
	assert_int_equal(view.inputs[1].id, 0x2222);
	assert_int_equal(view.nodes[0].params.matmul.trans_b, 1);
	assert_int_equal(view.nodes[1].inputs[0], 2);
	assert_int_equal(view.outputs[0], 1);
	free(p);
	expect_silence(f->p.peer);
}

/* Inputs added after nodes still come first on the wire. */
static void test_payload_interleaved(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 0xa, D(F32, 4, 8));
	struct djinn_tensor *b = fake_tensor(f->p.s, 0xb, D(F32, 8));
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_graph_view view;
	int va, n0, vb, n1, o0, o1;
	uint64_t len;
	void *p;

	va = djinn_graph_input(f->g, a); /* value 0 */
	n0 = djinn_op_relu(f->g, va); /* value 1: node 0 */
	vb = djinn_graph_input(f->g, b); /* value 2: input 1 */
	n1 = djinn_op_add(f->g, n0, vb); /* value 3: node 1 */
	assert_int_equal(n0, 1);
	assert_int_equal(vb, 2);
	assert_int_equal(n1, 3);
	o0 = djinn_graph_output(f->g, n1);
	o1 = djinn_graph_output(f->g, n0);
	assert_int_equal(o0, 0);
	assert_int_equal(o1, 1);

	p = encode(f->g, &len, outs);
	/* two outputs: 8 bytes, no padding */
	assert_int_equal(len, 24 + 2 * 16 + 2 * 64 + 8);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	assert_int_equal(view.inputs[0].id, 0xa);
	assert_int_equal(view.inputs[1].id, 0xb);
	assert_int_equal(view.nodes[0].inputs[0], 0); /* a */
	assert_int_equal(view.nodes[1].inputs[0], 2); /* node 0 */
	assert_int_equal(view.nodes[1].inputs[1], 1); /* b */
	assert_int_equal(view.outputs[0], 1);
	assert_int_equal(view.outputs[1], 0);
	expect_desc(&outs[0], D(F32, 4, 8));
	expect_desc(&outs[1], D(F32, 4, 8));
	free(p);
}

/* What each wrapper puts in the node's params; all else zero. */
static void test_payload_params(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *x = fake_tensor(f->p.s, 1, D(F32, 2, 6, 8));
	struct djinn_tensor *gm = fake_tensor(f->p.s, 2, D(F32, 8));
	struct djinn_tensor *ids = fake_tensor(f->p.s, 3, D(I32, 5));
	struct djinn_tensor *tab = fake_tensor(f->p.s, 4, D(F32, 10, 8));
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	const int32_t shape[] = { 2, 3, -1 }, perm[] = { 2, 0, 1 };
	struct djinn_graph_view view;
	const struct djinn_node *n;
	int vx, vg, v[12], xs[2];
	struct djinn_node zero;
	uint64_t len;
	void *p;

	vx = djinn_graph_input(f->g, x);
	vg = djinn_graph_input(f->g, gm);
	v[0] = djinn_op_scale(f->g, vx, 0.5f);
	v[1] = djinn_op_layernorm(f->g, v[0], vg, vg, 1e-5f);
	v[2] = djinn_op_rmsnorm(f->g, v[1], vg, 1e-6f);
	v[3] = djinn_op_reshape(f->g, v[2], 3, shape);
	v[4] = djinn_op_permute(f->g, v[3], 3, perm);
	v[5] = djinn_op_slice(f->g, v[4], -1, 1, -1);
	xs[0] = v[5];
	xs[1] = v[5];
	v[6] = djinn_op_concat(f->g, xs, 2, 0);
	v[7] = djinn_op_softmax(f->g, v[6]);
	v[8] = djinn_op_argmax(f->g, v[7]);
	v[9] = djinn_op_embedding(f->g, djinn_graph_input(f->g, tab),
				  djinn_graph_input(f->g, ids));
	for (int i = 0; i < 10; i++)
		assert_true(v[i] >= 0);
	assert_int_equal(djinn_graph_output(f->g, v[8]), 0);
	assert_int_equal(djinn_graph_output(f->g, v[9]), 1);

	p = encode(f->g, &len, outs);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	n = view.nodes;
	memset(&zero, 0, sizeof(zero));
	assert_true(n[0].params.scalar.alpha == 0.5f);
	assert_true(n[0].params.scalar.eps == 0.0f);
	assert_true(n[1].params.scalar.eps == 1e-5f);
	assert_int_equal(n[1].nr_inputs, 3);
	assert_true(n[2].params.scalar.eps == 1e-6f);
	assert_int_equal(n[3].params.shape.ndim, 3);
	assert_int_equal(n[3].params.shape.dims[2], -1);
	assert_memory_equal(&n[3].params.shape.dims[3], &zero.params,
			    5 * sizeof(int32_t));
	assert_int_equal(n[4].params.shape.dims[0], 2);
	assert_int_equal(n[5].params.axis.axis, -1);
	assert_int_equal(n[5].params.axis.start, 1);
	assert_int_equal(n[5].params.axis.end, -1);
	assert_int_equal(n[6].params.axis.axis, 0);
	assert_memory_equal(&n[6].params.raw[4], &zero.params.raw[4], 36);
	assert_memory_equal(&n[7].params, &zero.params, sizeof(zero.params));
	/* (2, 6, 8) -> (2, 3, 16) -> (16, 2, 3) -> (16, 2, 1) -> (32, 2, 1),
	 * argmax over the last dim: (32, 2) */
	expect_desc(&outs[0], D(DJINN_DTYPE_I64, 32, 2));
	expect_desc(&outs[1], D(F32, 5, 8));
	free(p);
}

/* Attention over a cache: the tokens layout, four inputs, the slots. */
static void test_payload_attention_cache(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *q = fake_tensor(f->p.s, 1, D(F32, 1, 4, 8));
	struct djinn_tensor *kv = fake_tensor(f->p.s, 2, D(F32, 1, 2, 8));
	struct djinn_tensor *c = fake_tensor(f->p.s, 3, D(F32, 9, 6, 16));
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_graph_view view;
	const struct djinn_node *n;
	int vq, vkv, vc, v;
	uint64_t len;
	void *p;

	vq = djinn_graph_input(f->g, q);
	vkv = djinn_graph_input(f->g, kv);
	vc = djinn_graph_input(f->g, c);
	assert_int_equal(djinn_op_attention_cache(f->g, vq, vkv, vkv, -E2BIG, 4,
						  5, 0, true),
			 -E2BIG);
	v = djinn_op_attention_cache(f->g, vq, vkv, vkv, vc, 4, 5, 0.5f, true);
	assert_true(v >= 0);
	assert_int_equal(djinn_graph_output(f->g, v), 0);
	p = encode(f->g, &len, outs);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	n = view.nodes;
	assert_int_equal(view.g->nr_nodes, 1);
	assert_int_equal(n[0].op, DJINN_GOP_ATTENTION);
	assert_int_equal(n[0].nr_inputs, 4);
	assert_int_equal(n[0].params.attention.layout, DJINN_ATTN_TOKENS);
	assert_int_equal(n[0].params.attention.cache_k, 4);
	assert_int_equal(n[0].params.attention.cache_v, 5);
	assert_int_equal(n[0].params.attention.causal, 1);
	assert_true(n[0].params.attention.scale == 0.5f);
	expect_desc(&outs[0], D(F32, 1, 4, 8));
	free(p);
}

/* ---------------------------------------------------------------------- */
/* Results as inputs */

static void test_result_refs(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *x = fake_tensor(f->p.s, 0x77, D(F32, 3, 4));
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_graph_builder *g2;
	struct djinn_graph_view view;
	struct djinn_request *req;
	struct djinn_result *r;
	uint64_t len;
	void *p;
	int v;

	/* a request made but not sent: its results are named by id */
	djinn_graph_output(f->g,
			   djinn_op_silu(f->g, djinn_graph_input(f->g, x)));
	assert_int_equal(__djinn_request_prepare(f->g, &req, &p, &len), 0);
	free(p);
	assert_int_equal(req->nr_results, 1);
	assert_null(djinn_request_results(req, 1));
	r = djinn_request_results(req, 0);
	expect_desc(djinn_result_desc(r), D(F32, 3, 4));

	assert_int_equal(djinn_graph_new(f->p.s, &g2), 0);
	v = djinn_graph_input_result(g2, r);
	assert_int_equal(v, 0);
	assert_int_equal(djinn_graph_input_result(g2, r), 0); /* once */
	assert_int_equal(req->refs, 2);
	djinn_graph_output(g2, djinn_op_gelu(g2, v));
	p = encode(g2, &len, outs);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	assert_int_equal(view.inputs[0].kind, DJINN_REF_RESULT);
	assert_int_equal(view.inputs[0].id, req->call.id);
	assert_int_equal(view.inputs[0].index, 0);
	expect_desc(&outs[0], D(F32, 3, 4));
	free(p);

	/* once it ran, by handle */
	pthread_mutex_lock(&f->p.conn->lock);
	req->sent = true;
	req->call.done = true;
	r->handle = 0xfeed;
	pthread_mutex_unlock(&f->p.conn->lock);
	p = encode(g2, &len, outs);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	assert_int_equal(view.inputs[0].kind, DJINN_REF_HANDLE);
	assert_int_equal(view.inputs[0].id, 0xfeed);
	assert_int_equal(view.inputs[0].index, 0);
	free(p);

	/* failed: the request's error; released: -ENOENT */
	pthread_mutex_lock(&f->p.conn->lock);
	req->call.err = -ENOMEM;
	snprintf(req->call.msg, sizeof(req->call.msg), "need 9, have 1");
	pthread_mutex_unlock(&f->p.conn->lock);
	assert_int_equal(__djinn_graph_encode(g2, &p, &len, outs), -ENOMEM);
	assert_non_null(strstr(djinn_graph_error(g2), "need 9, have 1"));
	pthread_mutex_lock(&f->p.conn->lock);
	req->call.err = 0;
	r->released = true;
	pthread_mutex_unlock(&f->p.conn->lock);
	assert_int_equal(__djinn_graph_encode(g2, &p, &len, outs), -ENOENT);
	assert_int_equal(djinn_graph_input_result(f->g, r), -ENOENT);

	/* the builder keeps the request alive after the user is done */
	djinn_request_free(req);
	assert_int_equal(req->refs, 1);
	djinn_graph_free(g2); /* the last reference */
	expect_silence(f->p.peer);
}

/* ---------------------------------------------------------------------- */
/* Bad graphs */

/* djinn_submit() refuses @g with @err and a message containing @msg,
 * and sends nothing. */
static void expect_refused(struct fixture *f, int err, const char *msg)
{
	struct djinn_request *req = (void *)0x1;
	int ret = djinn_submit(f->g, &req);

	if (ret != err)
		fail_msg("submit: %d (%s), want %d", ret,
			 djinn_graph_error(f->g), err);
	if (!strstr(djinn_graph_error(f->g), msg))
		fail_msg("message \"%s\" lacks \"%s\"", djinn_graph_error(f->g),
			 msg);
	assert_ptr_equal(req, (void *)0x1);
	expect_silence(f->p.peer);
}

static void test_refused_shapes(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 8, 64));
	struct djinn_tensor *b = fake_tensor(f->p.s, 2, D(F32, 32, 16));
	int va = djinn_graph_input(f->g, a), vb = djinn_graph_input(f->g, b);

	djinn_graph_output(f->g, djinn_op_matmul(f->g, va, vb, false, false));
	expect_refused(f, -EINVAL,
		       "node 0 (matmul): inner dims 64 and 32 "
		       "differ");
}

static void test_refused_dtype(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));
	struct djinn_tensor *b = fake_tensor(f->p.s, 2, D(I32, 4));
	int va = djinn_graph_input(f->g, a), vb = djinn_graph_input(f->g, b);

	djinn_op_relu(f->g, va);
	djinn_graph_output(f->g, djinn_op_add(f->g, va, vb));
	expect_refused(f, -EINVAL,
		       "node 1 (add): input 0 is f32, input 1 is "
		       "i32");
}

static void test_refused_op(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));
	uint32_t in = (uint32_t)djinn_graph_input(f->g, a);
	struct djinn_p_scalar bad = { .alpha = INFINITY };

	djinn_graph_output(f->g,
			   djinn_graph_node(f->g, 99, &in, 1, NULL, 0, NULL));
	expect_refused(f, -EINVAL, "node 0 (op 99): unknown op");

	djinn_graph_free(f->g);
	djinn_graph_new(f->p.s, &f->g);
	in = (uint32_t)djinn_graph_input(f->g, a);
	djinn_graph_output(f->g, djinn_graph_node(f->g, DJINN_GOP_SCALE, &in, 1,
						  &bad, sizeof(bad), NULL));
	expect_refused(f, -EINVAL, "node 0 (scale): alpha inf not finite");

	/* a wrong input count goes as far as the daemon's check too */
	djinn_graph_free(f->g);
	djinn_graph_new(f->p.s, &f->g);
	in = (uint32_t)djinn_graph_input(f->g, a);
	djinn_graph_output(f->g, djinn_graph_node(f->g, DJINN_GOP_ADD, &in, 1,
						  NULL, 0, NULL));
	expect_refused(f, -EINVAL, "node 0 (add): 1 inputs, not 2");
}

static void test_refused_empty(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));

	expect_refused(f, -EINVAL, "graph: nr_nodes is 0");
	djinn_op_gelu(f->g, djinn_graph_input(f->g, a));
	expect_refused(f, -EINVAL, "graph: nr_outputs is 0");
}

/* What the builder itself refuses, at once. */
static void test_builder_refusals(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));
	struct djinn_node_opts bad = { .phase = DJINN_PHASE_IO_WAIT };
	uint8_t params[41] = { 0 };
	uint32_t in[5] = { 0 };
	int va = djinn_graph_input(f->g, a), xs[2] = { va, va };

	/* a later value, too many inputs, too many params bytes */
	in[0] = 1;
	assert_int_equal(djinn_graph_node(f->g, DJINN_GOP_GELU, in, 1, NULL, 0,
					  NULL),
			 -EINVAL);
	assert_non_null(strstr(djinn_graph_error(f->g), "not an earlier one"));
	in[0] = 0;
	assert_int_equal(djinn_graph_node(f->g, DJINN_GOP_CONCAT, in, 5, NULL,
					  0, NULL),
			 -EINVAL);
	assert_int_equal(djinn_graph_node(f->g, DJINN_GOP_GELU, in, 1, params,
					  sizeof(params), NULL),
			 -EINVAL);
	assert_int_equal(djinn_graph_node(f->g, DJINN_GOP_GELU, in, 1, NULL, 4,
					  NULL),
			 -EINVAL);
	/* phases for signals are not annotations */
	assert_int_equal(djinn_graph_node(f->g, DJINN_GOP_GELU, in, 1, NULL, 0,
					  &bad),
			 -EINVAL);
	assert_int_equal(djinn_graph_annotate(f->g, &bad), -EINVAL);
	/* outputs are nodes */
	assert_int_equal(djinn_graph_output(f->g, va), -EINVAL);
	assert_int_equal(djinn_graph_output(f->g, 5), -EINVAL);
	/* errors pass through the wrappers unchanged */
	assert_int_equal(djinn_op_gelu(f->g, -E2BIG), -E2BIG);
	assert_int_equal(djinn_op_add(f->g, va, -ENOENT), -ENOENT);
	assert_int_equal(djinn_op_layernorm(f->g, va, -EIO, va, 1e-5f), -EIO);
	assert_int_equal(djinn_graph_output(f->g, -ENOMEM), -ENOMEM);
	xs[1] = -EPERM;
	assert_int_equal(djinn_op_concat(f->g, xs, 2, 0), -EPERM);
	assert_int_equal(djinn_op_reshape(f->g, va, 9, (int32_t[9]){ 0 }),
			 -EINVAL);
	/* nothing was added */
	assert_int_equal(f->g->nr_nodes, 0);
	assert_int_equal(f->g->nr_values, 1);
}

/* Annotations: the builder's default, then per node. */
static void test_annotations(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));
	struct djinn_node_opts pre = { .phase = DJINN_PHASE_PREFILL,
				       .residency = DJINN_RES_KV_CACHE };
	struct djinn_tensor_desc outs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_graph_view view;
	int v = djinn_graph_input(f->g, a);
	uint64_t len;
	void *p;

	v = djinn_op_relu(f->g, v);
	assert_int_equal(djinn_graph_annotate(f->g, &pre), 0);
	v = djinn_op_relu(f->g, v);
	djinn_graph_output(f->g, v);
	p = encode(f->g, &len, outs);
	assert_int_equal(djinn_graph_parse(p, len, &view, NULL, 0), 0);
	assert_int_equal(view.nodes[0].phase, DJINN_PHASE_UNKNOWN);
	assert_int_equal(view.nodes[0].residency, DJINN_RES_ACTIVATION);
	assert_int_equal(view.nodes[1].phase, DJINN_PHASE_PREFILL);
	assert_int_equal(view.nodes[1].residency, DJINN_RES_KV_CACHE);
	free(p);
}

static void test_limits(void **state)
{
	struct fixture *f = *state;
	struct djinn_tensor *a = fake_tensor(f->p.s, 1, D(F32, 4));
	int v = djinn_graph_input(f->g, a), last = v;

	for (int i = 0; i < DJINN_MAX_NODES; i++) {
		last = djinn_op_relu(f->g, last);
		assert_true(last > 0);
		if (i < DJINN_MAX_GRAPH_OUTPUTS)
			assert_int_equal(djinn_graph_output(f->g, last), i);
	}
	assert_int_equal(djinn_op_relu(f->g, last), -E2BIG);
	assert_int_equal(djinn_graph_output(f->g, last), -E2BIG);
	assert_non_null(strstr(djinn_graph_error(f->g), "nr_outputs over 256"));
}

/* Inputs of another session are refused. */
static void test_foreign(void **state)
{
	struct fixture *f = *state;
	struct djinn_session *s2 =
		fake_session(f->p.conn, 10, 3600 * NSEC_PER_SEC);
	struct djinn_tensor *t = fake_tensor(s2, 1, D(F32, 4));

	assert_int_equal(djinn_graph_input(f->g, t), -EINVAL);
	assert_int_equal(f->g->nr_inputs, 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_payload_layout), T(test_payload_interleaved),
		T(test_payload_params), T(test_payload_attention_cache),
		T(test_result_refs),	T(test_refused_shapes),
		T(test_refused_dtype),	T(test_refused_op),
		T(test_refused_empty),	T(test_builder_refusals),
		T(test_annotations),	T(test_limits),
		T(test_foreign),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
