// SPDX-License-Identifier: MIT
/*
 * Unit tests for graph parsing and shape inference (lib/graph.c).
 *
 * A small builder (struct gb) lays a graph out as a GRAPH_SUBMIT payload
 * in an 8-byte aligned buffer, parses it and infers it. Every refusal is
 * checked for its errno and for a message that names the node and op
 * ("node 3 (matmul): ...").
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "array_size.h"
#include "testutil.h"
#include "graph.h"
#include "dtypes.h"

/* ---------------------------------------------------------------------- */
/* Descs */

static struct djinn_tensor_desc desc(unsigned int dtype, unsigned int ndim,
				     const uint64_t *dims)
{
	struct djinn_tensor_desc d = { .dtype = dtype, .ndim = ndim };

	memcpy(d.dims, dims, ndim * sizeof(dims[0]));
	return d;
}

/* D(F32, 2, 8, 64) is a (2, 8, 64) f32 desc; D(F32) a scalar. The
 * dims are counted by sizeof alone: ARRAY_SIZE()'s array check needs a
 * constant, and clang refuses a compound literal of variables there. */
#define D(dt, ...)                                                            \
	desc(dt,                                                              \
	     sizeof((uint64_t[]){ 0, ##__VA_ARGS__ }) / sizeof(uint64_t) - 1, \
	     ((uint64_t[]){ 0, ##__VA_ARGS__ }) + 1)

static void check_desc(const struct djinn_tensor_desc *got,
		       struct djinn_tensor_desc want_d, const char *where)
{
	const struct djinn_tensor_desc *want = &want_d;
	char g[160], w[160];
	int n;

	if (!memcmp(got, want, sizeof(*got)))
		return;
	n = snprintf(g, sizeof(g), "%s[", djinn_dtype_name(got->dtype));
	for (unsigned int i = 0; i < DJINN_MAX_DIMS; i++)
		n += snprintf(g + n, sizeof(g) - n, "%llu ", got->dims[i]);
	n = snprintf(w, sizeof(w), "%s[", djinn_dtype_name(want->dtype));
	for (unsigned int i = 0; i < DJINN_MAX_DIMS; i++)
		n += snprintf(w + n, sizeof(w) - n, "%llu ", want->dims[i]);
	fail_msg("%s: got %s] (ndim %u), want %s] (ndim %u)", where, g,
		 got->ndim, w, want->ndim);
}

/* ---------------------------------------------------------------------- */
/* The graph builder */

#define GB_INPUTS 32
#define GB_NODES 64
#define GB_OUTPUTS 8

struct gb {
	uint32_t nr_in, nr_nodes, nr_out;
	struct djinn_ref in[GB_INPUTS];
	struct djinn_tensor_desc descs[GB_INPUTS];
	bool module[GB_INPUTS]; /* client modules (DJINN_TENSOR_MODULE) */
	bool own; /* djinnd's own graph: djinn_graph_infer_own() */
	struct djinn_node nodes[GB_NODES];
	uint32_t out[GB_OUTPUTS];

	/* filled by gb_payload() and gb_run() */
	uint64_t buf[2048];
	uint64_t len;
	struct djinn_graph_view view;
	struct djinn_tensor_desc res[GB_NODES];
	char msg[DJINN_MAX_ERROR_MSG];
};

static struct gb *gb_new(void)
{
	struct gb *b = xmalloc(sizeof(*b));

	memset(b, 0, sizeof(*b));
	return b;
}

/* A graph input with shape @d; returns its value index. */
static uint32_t gb_input(struct gb *b, struct djinn_tensor_desc d)
{
	assert_int_equal(b->nr_nodes, 0); /* inputs come first */
	assert_true(b->nr_in < GB_INPUTS);
	b->in[b->nr_in].id = 0x100 + b->nr_in;
	b->descs[b->nr_in] = d;
	return b->nr_in++;
}

/* A client module of @bytes as a graph input; returns its value index. */
static uint32_t gb_module(struct gb *b, uint64_t bytes)
{
	uint32_t v = gb_input(b, D(U8, bytes));

	b->module[v] = true;
	return v;
}

/* A node; returns its value index. @params: @plen bytes, or NULL. */
static uint32_t gb_node(struct gb *b, unsigned int op, const void *params,
			size_t plen, unsigned int nr, const uint32_t *ins)
{
	struct djinn_node *n;

	assert_true(b->nr_nodes < GB_NODES);
	assert_true(nr <= DJINN_MAX_NODE_INPUTS);
	assert_true(plen <= sizeof(n->params));
	n = &b->nodes[b->nr_nodes];
	n->op = op;
	n->nr_inputs = nr;
	memcpy(n->inputs, ins, nr * sizeof(ins[0]));
	if (params)
		memcpy(&n->params, params, plen);
	return b->nr_in + b->nr_nodes++;
}

#define INS(...) ((const uint32_t[]){ __VA_ARGS__ })
#define NR(...) (sizeof(INS(__VA_ARGS__)) / sizeof(uint32_t))
#define NODE(b, op, ...) \
	gb_node(b, op, NULL, 0, NR(__VA_ARGS__), INS(__VA_ARGS__))
#define NODEP(b, op, p, ...) \
	gb_node(b, op, &(p), sizeof(p), NR(__VA_ARGS__), INS(__VA_ARGS__))

#define P_MM(ta, tb) ((struct djinn_p_matmul){ .trans_a = ta, .trans_b = tb })
#define P_ALPHA(a) ((struct djinn_p_scalar){ .alpha = a })
#define P_EPS(e) ((struct djinn_p_scalar){ .eps = e })
#define P_SHAPE(nd, ...) \
	((struct djinn_p_shape){ .ndim = nd, .dims = { __VA_ARGS__ } })
#define P_AXIS(a) ((struct djinn_p_axis){ .axis = a })
#define P_SLICE(a, s, e) \
	((struct djinn_p_axis){ .axis = a, .start = s, .end = e })
#define P_ATT(s, c) ((struct djinn_p_attention){ .scale = s, .causal = c })
#define P_ATT_TOK(c, k, v)                                        \
	((struct djinn_p_attention){ .causal = c,                 \
				     .layout = DJINN_ATTN_TOKENS, \
				     .cache_k = k,                \
				     .cache_v = v })
/* a kernel of 4 blocks of 32 threads, the result like input @like */
#define P_KERNEL(like)                                   \
	((struct djinn_p_kernel){ .grid = { 4, 1, 1 },   \
				  .block = { 32, 1, 1 }, \
				  .out_like = like,      \
				  .name_hash = 0x0123456789abcdefull })

static struct djinn_node *last(struct gb *b)
{
	assert_true(b->nr_nodes > 0);
	return &b->nodes[b->nr_nodes - 1];
}

static void gb_output(struct gb *b, uint32_t node)
{
	assert_true(b->nr_out < GB_OUTPUTS);
	b->out[b->nr_out++] = node;
}

/* Lay the graph out in b->buf; outputs default to the last node. */
static void gb_payload(struct gb *b)
{
	struct djinn_graph g = {
		.nr_inputs = b->nr_in,
		.nr_nodes = b->nr_nodes,
		.nr_outputs = b->nr_out,
	};
	uint8_t *p = (uint8_t *)b->buf;

	if (!b->nr_out && b->nr_nodes) {
		g.nr_outputs = 1;
		b->out[0] = b->nr_nodes - 1;
	}
	memset(b->buf, 0, sizeof(b->buf));
	memcpy(p, &g, sizeof(g));
	p += sizeof(g);
	memcpy(p, b->in, b->nr_in * sizeof(b->in[0]));
	p += b->nr_in * sizeof(b->in[0]);
	memcpy(p, b->nodes, b->nr_nodes * sizeof(b->nodes[0]));
	p += b->nr_nodes * sizeof(b->nodes[0]);
	memcpy(p, b->out, g.nr_outputs * sizeof(b->out[0]));
	p += (g.nr_outputs * sizeof(b->out[0]) + 7) & ~(size_t)7;
	b->len = p - (uint8_t *)b->buf;
	assert_true(b->len <= sizeof(b->buf));
}

/* Parse (which must succeed) and infer; returns what infer returns. */
static int gb_run(struct gb *b)
{
	int ret;

	gb_payload(b);
	b->msg[0] = 0;
	ret = djinn_graph_parse(b->buf, b->len, &b->view, b->msg,
				sizeof(b->msg));
	if (ret)
		fail_msg("parse: %d %s", ret, b->msg);
	memset(b->res, 0xa5, sizeof(b->res));
	if (b->own)
		return djinn_graph_infer_own(&b->view, b->descs, b->res, b->msg,
					     sizeof(b->msg));
	return djinn_graph_infer_modules(&b->view, b->descs, b->module, b->res,
					 b->msg, sizeof(b->msg));
}

/* The graph infers and its last node has the shape @want. */
static void expect_ok(struct gb *b, struct djinn_tensor_desc want)
{
	int ret = gb_run(b);

	if (ret)
		fail_msg("infer: %d %s", ret, b->msg);
	check_desc(&b->res[b->nr_nodes - 1], want, "last node");
}

#define expect_refused(b, err, node, what) \
	__expect_refused(b, err, node, what, __LINE__)

/*
 * Inference refuses with -@err and a message that starts with node
 * @node's index and op name and contains @what.
 */
static void __expect_refused(struct gb *b, int err, unsigned int node,
			     const char *what, int line)
{
	char prefix[64];
	int ret = gb_run(b);

	if (ret != -err)
		fail_msg("line %d: infer returned %d (%s), want %d", line, ret,
			 b->msg, -err);
	snprintf(prefix, sizeof(prefix), "node %u (%s): ", node,
		 djinn_op_name(b->nodes[node].op));
	if (strncmp(b->msg, prefix, strlen(prefix)))
		fail_msg("line %d: message \"%s\" does not start \"%s\"", line,
			 b->msg, prefix);
	if (!strstr(b->msg, what))
		fail_msg("line %d: message \"%s\" does not say \"%s\"", line,
			 b->msg, what);
}

/* A builder with graph inputs of these shapes, values 0, 1, 2. */
static struct gb *one(struct djinn_tensor_desc a)
{
	struct gb *b = gb_new();

	gb_input(b, a);
	return b;
}

static struct gb *two(struct djinn_tensor_desc a, struct djinn_tensor_desc c)
{
	struct gb *b = one(a);

	gb_input(b, c);
	return b;
}

static struct gb *three(struct djinn_tensor_desc a, struct djinn_tensor_desc c,
			struct djinn_tensor_desc d)
{
	struct gb *b = two(a, c);

	gb_input(b, d);
	return b;
}

/*
 * A graph of input @a (and @c for op2_*) and one node of @op over them:
 * it infers @want, or it is refused with -@err naming node 0 and saying
 * @what.
 */
static void op_ok(unsigned int op, unsigned int nr, struct djinn_tensor_desc a,
		  struct djinn_tensor_desc c, struct djinn_tensor_desc want)
{
	struct gb *b = nr == 1 ? one(a) : two(a, c);

	if (nr == 1)
		NODE(b, op, 0);
	else
		NODE(b, op, 0, 1);
	expect_ok(b, want);
	free(b);
}

static void __op_refused(unsigned int op, unsigned int nr,
			 struct djinn_tensor_desc a, struct djinn_tensor_desc c,
			 int err, const char *what, int line)
{
	struct gb *b = nr == 1 ? one(a) : two(a, c);

	if (nr == 1)
		NODE(b, op, 0);
	else
		NODE(b, op, 0, 1);
	__expect_refused(b, err, 0, what, line);
	free(b);
}

#define op1_ok(op, a, want) op_ok(op, 1, a, a, want)
#define op2_ok(op, a, c, want) op_ok(op, 2, a, c, want)
#define op1_refused(op, a, err, what) \
	__op_refused(op, 1, a, a, err, what, __LINE__)
#define op2_refused(op, a, c, err, what) \
	__op_refused(op, 2, a, c, err, what, __LINE__)

/* ---------------------------------------------------------------------- */
/* Names and descs */

static void test_names(void **state)
{
	static const char *const want[] = {
		[DJINN_GOP_MATMUL] = "matmul",
		[DJINN_GOP_ADD] = "add",
		[DJINN_GOP_SUB] = "sub",
		[DJINN_GOP_MUL] = "mul",
		[DJINN_GOP_DIV] = "div",
		[DJINN_GOP_SCALE] = "scale",
		[DJINN_GOP_GELU] = "gelu",
		[DJINN_GOP_RELU] = "relu",
		[DJINN_GOP_SILU] = "silu",
		[DJINN_GOP_SOFTMAX] = "softmax",
		[DJINN_GOP_LAYERNORM] = "layernorm",
		[DJINN_GOP_RMSNORM] = "rmsnorm",
		[DJINN_GOP_EMBEDDING] = "embedding",
		[DJINN_GOP_RESHAPE] = "reshape",
		[DJINN_GOP_PERMUTE] = "permute",
		[DJINN_GOP_SLICE] = "slice",
		[DJINN_GOP_CONCAT] = "concat",
		[DJINN_GOP_ATTENTION] = "attention",
		[DJINN_GOP_ARGMAX] = "argmax",
		[DJINN_GOP_KERNEL] = "kernel",
		[DJINN_GOP_SAMPLE] = "sample",
	};

	for (unsigned int op = 1; op <= DJINN_GOP_MAX; op++)
		assert_string_equal(djinn_op_name(op), want[op]);
	assert_string_equal(djinn_op_name(0), "unknown");
	assert_string_equal(djinn_op_name(DJINN_GOP_MAX + 1), "unknown");
	assert_string_equal(djinn_op_name(~0u), "unknown");

	assert_string_equal(djinn_dtype_name(F32), "f32");
	assert_string_equal(djinn_dtype_name(F16), "f16");
	assert_string_equal(djinn_dtype_name(BF16), "bf16");
	assert_string_equal(djinn_dtype_name(I32), "i32");
	assert_string_equal(djinn_dtype_name(I64), "i64");
	assert_string_equal(djinn_dtype_name(U8), "u8");
	assert_string_equal(djinn_dtype_name(0), "unknown");
	assert_string_equal(djinn_dtype_name(7), "unknown");

	assert_int_equal(djinn_dtype_size(F32), 4);
	assert_int_equal(djinn_dtype_size(F16), 2);
	assert_int_equal(djinn_dtype_size(BF16), 2);
	assert_int_equal(djinn_dtype_size(I32), 4);
	assert_int_equal(djinn_dtype_size(I64), 8);
	assert_int_equal(djinn_dtype_size(U8), 1);
	assert_int_equal(djinn_dtype_size(0), 0);
	assert_int_equal(djinn_dtype_size(7), 0);
	assert_int_equal(djinn_dtype_size(~0u), 0);
}

static void test_desc_check(void **state)
{
	struct djinn_tensor_desc d;
	uint64_t elems = 7, bytes = 7;

	d = D(F32, 2, 8, 64);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(elems, 1024);
	assert_int_equal(bytes, 4096);
	assert_int_equal(djinn_desc_check(&d, NULL, NULL), 0);

	d = D(I64); /* a scalar */
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(elems, 1);
	assert_int_equal(bytes, 8);

	d = D(BF16, 1, 1, 1, 1, 1, 1, 1, 3);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(elems, 3);
	assert_int_equal(bytes, 6);

	/* empty tensors are valid descs */
	d = D(F32, 3, 0, 5);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(elems, 0);
	assert_int_equal(bytes, 0);

	d = D(F32, 2);
	d.dtype = 0;
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);
	d.dtype = 7;
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);

	d = D(F32, 2);
	d.ndim = 9;
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);

	d = D(F32, 2, 3);
	d.dims[2] = 1; /* past ndim */
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);
	d = D(F32, 2, 3);
	d.dims[7] = 1;
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);

	for (unsigned int i = 0; i < sizeof(d.__reserved); i++) {
		d = D(F32, 2, 3);
		d.__reserved[i] = 1;
		assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -EINVAL);
	}

	/* the byte count: just under 2^63, at it, and overflowing */
	d = D(U8, 1ull << 31, (1ull << 32) - 1);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(bytes, (1ull << 63) - (1ull << 31));
	assert_int_equal(elems, bytes);
	d = D(I64, (1ull << 60) - 1);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(bytes, (1ull << 63) - 8);
	d = D(U8, 1ull << 31, 1ull << 32);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -E2BIG);
	d = D(F32, 1ull << 61);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -E2BIG);
	d = D(I64, ~0ull, ~0ull);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -E2BIG);
	d = D(F32, 1ull << 32, 1ull << 32, 1ull << 32);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -E2BIG);
	/* a zero dim does not excuse the others */
	d = D(F32, 0, ~0ull);
	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), -E2BIG);
}

/* ---------------------------------------------------------------------- */
/* Parsing */

/* A valid payload: 3 inputs, 2 nodes, @nr_out outputs. */
static struct gb *parse_graph(unsigned int nr_out)
{
	struct gb *b = three(D(F32, 4, 8), D(F32, 8, 2), D(F32, 4, 2));
	uint32_t mm = NODE(b, DJINN_GOP_MATMUL, 0, 1);

	NODE(b, DJINN_GOP_ADD, mm, 2);
	for (unsigned int i = 0; i < nr_out; i++)
		gb_output(b, i % 2);
	gb_payload(b);
	return b;
}

static int parse(struct gb *b, uint64_t len)
{
	memset(&b->view, 0, sizeof(b->view));
	b->msg[0] = 0;
	return djinn_graph_parse(b->buf, len, &b->view, b->msg, sizeof(b->msg));
}

static struct djinn_graph *hdr(struct gb *b)
{
	return (struct djinn_graph *)b->buf;
}

static void test_parse_ok(void **state)
{
	struct gb *b = parse_graph(1);
	const uint8_t *p = (const uint8_t *)b->buf;

	assert_int_equal(b->len, 24 + 3 * 16 + 2 * 64 + 8);
	assert_int_equal(parse(b, b->len), 0);
	assert_ptr_equal(b->view.g, p);
	assert_ptr_equal(b->view.inputs, p + 24);
	assert_ptr_equal(b->view.nodes, p + 24 + 48);
	assert_ptr_equal(b->view.outputs, p + 24 + 48 + 128);
	assert_int_equal(b->view.g->nr_nodes, 2);
	assert_int_equal(b->view.inputs[2].id, 0x102);
	assert_int_equal(b->view.nodes[1].op, DJINN_GOP_ADD);
	assert_int_equal(b->view.outputs[0], 0);
	/* a NULL message buffer is fine */
	assert_int_equal(djinn_graph_parse(b->buf, b->len, &b->view, NULL, 0),
			 0);
	free(b);

	/* two outputs: no padding */
	b = parse_graph(2);
	assert_int_equal(b->len, 24 + 3 * 16 + 2 * 64 + 8);
	assert_int_equal(parse(b, b->len), 0);
	assert_int_equal(b->view.outputs[1], 1);
	free(b);

	/* three outputs: 12 bytes and 4 of padding */
	b = parse_graph(3);
	assert_int_equal(b->len, 24 + 3 * 16 + 2 * 64 + 16);
	assert_int_equal(parse(b, b->len), 0);
	free(b);

	/* no graph inputs at all */
	b = gb_new();
	NODE(b, DJINN_GOP_MATMUL, 0, 0); /* not a valid node, but parses */
	gb_payload(b);
	assert_int_equal(b->len, 24 + 64 + 8);
	assert_int_equal(parse(b, b->len), 0);
	assert_int_equal(b->view.g->nr_inputs, 0);
	free(b);
}

static void test_parse_length(void **state)
{
	struct gb *b = parse_graph(3);
	struct djinn_graph_view view;
	uint64_t len = b->len;

	assert_int_equal(parse(b, len), 0);
	memcpy(&view, &b->view, sizeof(view));
	/* each length but the exact one */
	for (uint64_t l = 0; l < sizeof(b->buf); l++) {
		int ret;

		if (l == len)
			continue;
		ret = parse(b, l);
		if (ret != -EINVAL)
			fail_msg("length %llu of %llu: %d",
				 (unsigned long long)l, (unsigned long long)len,
				 ret);
		/* a failed parse leaves the view alone */
		assert_null(b->view.g);
	}
	assert_int_equal(parse(b, len - 1), -EINVAL);
	assert_non_null(strstr(b->msg, "graph: payload of"));
	assert_int_equal(parse(b, ~0ull), -EINVAL);
	assert_int_equal(parse(b, 23), -EINVAL);
	assert_int_equal(djinn_graph_parse(NULL, 0, &view, b->msg,
					   sizeof(b->msg)),
			 -EINVAL);
	assert_int_equal(djinn_graph_parse(NULL, len, &view, NULL, 0), -EINVAL);
	free(b);
}

static void test_parse_limits(void **state)
{
	struct gb *b = parse_graph(1);
	struct {
		uint32_t in, nodes, out;
		int err;
	} cases[] = {
		{ DJINN_MAX_GRAPH_INPUTS + 1, 2, 1, -E2BIG },
		{ ~0u, 2, 1, -E2BIG },
		{ 3, 0, 1, -EINVAL },
		{ 3, DJINN_MAX_NODES + 1, 1, -E2BIG },
		{ 3, ~0u, 1, -E2BIG },
		{ 3, 2, 0, -EINVAL },
		{ 3, 2, DJINN_MAX_GRAPH_OUTPUTS + 1, -E2BIG },
		{ 3, 2, ~0u, -E2BIG },
	};

	for (unsigned int i = 0; i < ARRAY_SIZE(cases); i++) {
		gb_payload(b);
		hdr(b)->nr_inputs = cases[i].in;
		hdr(b)->nr_nodes = cases[i].nodes;
		hdr(b)->nr_outputs = cases[i].out;
		/* whatever the length: the counts are refused first */
		assert_int_equal(parse(b, b->len), cases[i].err);
		assert_int_equal(parse(b, sizeof(b->buf)), cases[i].err);
		assert_non_null(strstr(b->msg, "graph: nr_"));
	}
	free(b);

	/* at every limit: the largest graph parses */
	size_t len = 24 + 16 * DJINN_MAX_GRAPH_INPUTS + 64 * DJINN_MAX_NODES +
		     4 * DJINN_MAX_GRAPH_OUTPUTS;
	uint64_t *buf = calloc(1, len);
	struct djinn_graph *g = (struct djinn_graph *)buf;
	struct djinn_graph_view view;
	char msg[256];

	assert_non_null(buf);
	g->nr_inputs = DJINN_MAX_GRAPH_INPUTS;
	g->nr_nodes = DJINN_MAX_NODES;
	g->nr_outputs = DJINN_MAX_GRAPH_OUTPUTS;
	assert_int_equal(djinn_graph_parse(buf, len, &view, msg, sizeof(msg)),
			 0);
	assert_ptr_equal(view.outputs, (uint8_t *)buf + len - 1024);
	free(buf);
}

static void test_parse_reserved(void **state)
{
	struct gb *b = parse_graph(3);
	struct djinn_ref *refs = (struct djinn_ref *)(hdr(b) + 1);
	uint32_t *outputs = (uint32_t *)((uint8_t *)b->buf + b->len - 16);

	assert_int_equal(parse(b, b->len), 0);

	hdr(b)->flags = 1;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_non_null(strstr(b->msg, "flags"));
	hdr(b)->flags = 1u << 31;
	assert_int_equal(parse(b, b->len), -EINVAL);
	hdr(b)->flags = 0;

	hdr(b)->__reserved = 1ull << 63;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_non_null(strstr(b->msg, "reserved"));
	hdr(b)->__reserved = 0;

	refs[1].kind = 2;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_string_equal(b->msg, "input 1: kind 2 unknown");
	refs[1].kind = DJINN_REF_RESULT;
	refs[1].index = 5; /* fine for a result */
	assert_int_equal(parse(b, b->len), 0);
	refs[1].kind = DJINN_REF_HANDLE;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_non_null(strstr(b->msg, "input 1: index 5"));
	refs[1].index = 0;

	refs[2].__reserved = 1;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_non_null(strstr(b->msg, "input 2: reserved"));
	refs[2].__reserved = 0;

	/* the 4 bytes after three outputs */
	assert_int_equal(outputs[0], 0);
	assert_int_equal(outputs[1], 1);
	assert_int_equal(outputs[2], 0);
	outputs[3] = 1;
	assert_int_equal(parse(b, b->len), -EINVAL);
	assert_non_null(strstr(b->msg, "padding"));
	outputs[3] = 0;
	assert_int_equal(parse(b, b->len), 0);

	/* parse does not look inside nodes */
	((struct djinn_node *)(refs + 3))->__reserved[0] = 1;
	assert_int_equal(parse(b, b->len), 0);
	free(b);
}

static void test_parse_alignment(void **state)
{
	struct gb *b = parse_graph(1);
	uint8_t *raw = xmalloc(b->len + 8);

	for (unsigned int off = 0; off < 8; off++) {
		int ret;

		memcpy(raw + off, b->buf, b->len);
		/* raw is 16-byte aligned from malloc */
		ret = djinn_graph_parse(raw + off, b->len, &b->view, b->msg,
					sizeof(b->msg));
		if (off)
			assert_int_equal(ret, -EINVAL);
		else
			assert_int_equal(ret, 0);
	}
	assert_non_null(strstr(b->msg, "aligned"));
	free(raw);
	free(b);
}

/* ---------------------------------------------------------------------- */
/* Checks common to every node */

/* Valid inputs for every op; graph input i is @ins[i]. */
static struct gb *op_graph(unsigned int op)
{
	struct gb *b = gb_new();

	switch (op) {
	case DJINN_GOP_MATMUL:
		gb_input(b, D(F32, 4, 8));
		gb_input(b, D(F32, 8, 2));
		NODE(b, op, 0, 1);
		break;
	case DJINN_GOP_ADD:
	case DJINN_GOP_SUB:
	case DJINN_GOP_MUL:
	case DJINN_GOP_DIV:
		gb_input(b, D(F32, 4, 8));
		gb_input(b, D(F32, 8));
		NODE(b, op, 0, 1);
		break;
	case DJINN_GOP_SCALE:
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_ALPHA(0.5f), 0);
		break;
	case DJINN_GOP_LAYERNORM:
		gb_input(b, D(F32, 4, 8));
		gb_input(b, D(F32, 8));
		NODEP(b, op, P_EPS(1e-5f), 0, 1, 1);
		break;
	case DJINN_GOP_RMSNORM:
		gb_input(b, D(F32, 4, 8));
		gb_input(b, D(F32, 8));
		NODEP(b, op, P_EPS(1e-5f), 0, 1);
		break;
	case DJINN_GOP_EMBEDDING:
		gb_input(b, D(F32, 10, 8));
		gb_input(b, D(I32, 4));
		NODE(b, op, 0, 1);
		break;
	case DJINN_GOP_RESHAPE:
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_SHAPE(3, 2, 2, 8), 0);
		break;
	case DJINN_GOP_PERMUTE:
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_SHAPE(2, 1, 0), 0);
		break;
	case DJINN_GOP_SLICE:
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_SLICE(1, 2, 4), 0);
		break;
	case DJINN_GOP_CONCAT:
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_AXIS(1), 0, 0);
		break;
	case DJINN_GOP_ATTENTION:
		gb_input(b, D(F32, 1, 2, 4, 8));
		NODEP(b, op, P_ATT(0, 1), 0, 0, 0);
		break;
	case DJINN_GOP_KERNEL:
		gb_module(b, 100);
		gb_input(b, D(F32, 4, 8));
		NODEP(b, op, P_KERNEL(1), 0, 1);
		break;
	case DJINN_GOP_SAMPLE:
		gb_input(b, D(F32, 4, 8));
		gb_input(b, D(U8, 4, 24));
		NODE(b, op, 0, 1);
		break;
	default: /* unary: gelu, relu, silu, softmax, argmax */
		gb_input(b, D(F32, 4, 8));
		NODE(b, op, 0);
		break;
	}
	return b;
}

static void test_every_op_valid(void **state)
{
	for (unsigned int op = 1; op <= DJINN_GOP_MAX; op++) {
		struct gb *b = op_graph(op);
		int ret = gb_run(b);

		if (ret)
			fail_msg("op %s: %d %s", djinn_op_name(op), ret,
				 b->msg);
		free(b);
	}
}

static void test_unknown_op(void **state)
{
	static const unsigned int bad[] = { 0, DJINN_GOP_MAX + 1, 99, 0xffff };

	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		struct gb *b = one(D(F32, 4));

		NODE(b, DJINN_GOP_RELU, 0);
		NODE(b, bad[i], 0);
		assert_int_equal(gb_run(b), -EINVAL);
		assert_non_null(strstr(b->msg, "node 1 ("));
		assert_non_null(strstr(b->msg, "unknown op"));
		free(b);
	}
}

static void test_nr_inputs(void **state)
{
	for (unsigned int op = 1; op <= DJINN_GOP_MAX; op++) {
		struct gb *b = op_graph(op);
		unsigned int want = b->nodes[0].nr_inputs, lo, hi;

		free(b);
		lo = op == DJINN_GOP_CONCAT || op == DJINN_GOP_KERNEL ? 2 :
									want;
		hi = op == DJINN_GOP_CONCAT || op == DJINN_GOP_KERNEL ? 4 :
									want;
		for (unsigned int nr = 0; nr <= DJINN_MAX_NODE_INPUTS; nr++) {
			int ret;

			b = op_graph(op);
			b->nodes[0].nr_inputs = nr;
			/* all of them input 0, unused ones zero as they must */
			if (nr != want)
				memset(b->nodes[0].inputs, 0,
				       sizeof(b->nodes[0].inputs));
			if (nr >= lo && nr <= hi) {
				/* concat of 3 or 4 copies of the same input */
				ret = gb_run(b);
				if (ret)
					fail_msg("%s with %u inputs: %s",
						 djinn_op_name(op), nr, b->msg);
			} else if (op == DJINN_GOP_ATTENTION && nr == 4) {
				/* a fourth input is a cache: test_attn_tokens */
				expect_refused(
					b, EINVAL, 0,
					"a cache needs the tokens layout");
			} else {
				expect_refused(b, EINVAL, 0, "inputs, not");
			}
			free(b);
		}
	}
}

static void test_inputs_earlier(void **state)
{
	struct gb *b;

	/* a self-reference: node 1 (value 3) names value 3 */
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_ADD, 0, 1);
	NODE(b, DJINN_GOP_ADD, 2, 3);
	expect_refused(b, EINVAL, 1, "input 1 is value 3, not an earlier");
	free(b);

	/* a cycle: node 0 names node 1, which names node 0 */
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_ADD, 0, 3);
	NODE(b, DJINN_GOP_ADD, 2, 1);
	expect_refused(b, EINVAL, 0, "input 1 is value 3");
	free(b);

	/* dangling: no such value at all */
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_ADD, 0, 77);
	expect_refused(b, EINVAL, 1, "value 77");
	free(b);
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_RELU, ~0u);
	expect_refused(b, EINVAL, 0, "input 0 is value 4294967295");
	free(b);

	/* the latest earlier value is fine */
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_ADD, 0, 1);
	NODE(b, DJINN_GOP_ADD, 2, 1);
	NODE(b, DJINN_GOP_ADD, 3, 2);
	expect_ok(b, D(F32, 4));
	free(b);
}

static void test_node_reserved(void **state)
{
	struct gb *b;

	for (unsigned int i = 0; i < 3; i++) {
		b = one(D(F32, 4));
		NODE(b, DJINN_GOP_RELU, 0);
		NODE(b, DJINN_GOP_RELU, 1);
		last(b)->__reserved[i] = 0x80;
		expect_refused(b, EINVAL, 1, "reserved byte");
		free(b);
	}

	/* phases a node may carry, and those it may not */
	for (unsigned int ph = 0; ph < 256; ph++) {
		b = one(D(F32, 4));
		NODE(b, DJINN_GOP_GELU, 0);
		last(b)->phase = ph;
		if (ph <= DJINN_PHASE_TRAINING)
			expect_ok(b, D(F32, 4));
		else
			expect_refused(b, EINVAL, 0, "phase");
		free(b);
	}
	for (unsigned int res = 0; res < 256; res++) {
		b = one(D(F32, 4));
		NODE(b, DJINN_GOP_GELU, 0);
		last(b)->residency = res;
		if (res <= DJINN_RES_OUTPUT)
			expect_ok(b, D(F32, 4));
		else
			expect_refused(b, EINVAL, 0, "residency");
		free(b);
	}

	/* an unused input slot */
	b = two(D(F32, 4), D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	last(b)->inputs[3] = 1;
	expect_refused(b, EINVAL, 0, "unused inputs[3]");
	free(b);
}

/* Which params bytes each op reads; every other one must be zero. */
static bool param_used(unsigned int op, unsigned int byte, unsigned int nd)
{
	switch (op) {
	case DJINN_GOP_MATMUL:
		return byte < 8;
	case DJINN_GOP_ATTENTION:
		return byte < 20;
	case DJINN_GOP_SCALE:
	case DJINN_GOP_CONCAT:
		return byte < 4;
	case DJINN_GOP_LAYERNORM:
	case DJINN_GOP_RMSNORM:
		return byte >= 4 && byte < 8;
	case DJINN_GOP_RESHAPE:
	case DJINN_GOP_PERMUTE:
		return byte < 4 + 4 * nd;
	case DJINN_GOP_SLICE:
		return byte < 4 || (byte >= 8 && byte < 24);
	case DJINN_GOP_KERNEL: /* its reserved bytes: test_kernel */
		return true;
	default:
		return false;
	}
}

static void test_params_unused(void **state)
{
	for (unsigned int op = 1; op <= DJINN_GOP_MAX; op++) {
		for (unsigned int byte = 0; byte < 40; byte++) {
			struct gb *b = op_graph(op);
			unsigned int nd = b->nodes[0].params.shape.ndim;

			if (param_used(op, byte, nd)) {
				free(b);
				continue;
			}
			b->nodes[0].params.raw[byte] = 0x01;
			expect_refused(b, EINVAL, 0, "params byte");
			free(b);
		}
	}
	/* -0.0 is not all-zero bytes: layernorm does not read alpha */
	struct gb *b = op_graph(DJINN_GOP_LAYERNORM);

	b->nodes[0].params.scalar.alpha = -0.0f;
	expect_refused(b, EINVAL, 0, "params byte 3 not zero");
	free(b);
}

static void test_empty_inputs(void **state)
{
	struct gb *b;

	/* an empty graph input is a valid desc, but no node takes it */
	b = two(D(F32, 4), D(F32, 0, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	expect_ok(b, D(F32, 4));
	free(b);

	b = two(D(F32, 4), D(F32, 0, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_ADD, 2, 1);
	expect_refused(b, EINVAL, 1, "input 1 is empty");
	free(b);

	op1_refused(DJINN_GOP_RESHAPE, D(F32, 4, 3, 0), EINVAL,
		    "input 0 is empty");
}

static void test_bad_input_desc(void **state)
{
	struct gb *b = two(D(F32, 4), D(F32, 4));

	b->descs[1].dtype = 9;
	NODE(b, DJINN_GOP_RELU, 0);
	assert_int_equal(gb_run(b), -EINVAL);
	assert_string_equal(b->msg, "input 1: dtype 9 unknown");
	free(b);

	b = two(D(F32, 4), D(F32, 1ull << 62));
	NODE(b, DJINN_GOP_RELU, 0);
	assert_int_equal(gb_run(b), -E2BIG);
	assert_non_null(strstr(b->msg, "input 1: "));
	free(b);
}

/* ---------------------------------------------------------------------- */
/* Ops */

static void test_matmul(void **state)
{
	struct gb *b;

	op2_ok(DJINN_GOP_MATMUL, D(F32, 4, 8), D(F32, 8, 2), D(F32, 4, 2));

	/* batched against a plain (K, N): GPT-2's x @ W */
	op2_ok(DJINN_GOP_MATMUL, D(BF16, 2, 16, 64), D(BF16, 64, 192),
	       D(BF16, 2, 16, 192));

	/* a plain a against a batched b */
	op2_ok(DJINN_GOP_MATMUL, D(F16, 4, 8), D(F16, 3, 8, 5),
	       D(F16, 3, 4, 5));

	/* batch dims broadcast numpy-style */
	op2_ok(DJINN_GOP_MATMUL, D(F32, 2, 1, 4, 8), D(F32, 3, 8, 5),
	       D(F32, 2, 3, 4, 5));
	op2_ok(DJINN_GOP_MATMUL, D(F32, 7, 1, 6, 4, 8), D(F32, 1, 5, 1, 8, 5),
	       D(F32, 7, 5, 6, 4, 5));

	/* transposes: a stored (K, M), b stored (N, K) */
	b = two(D(F32, 8, 4), D(F32, 8, 2));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(1, 0), 0, 1);
	expect_ok(b, D(F32, 4, 2));
	free(b);
	b = two(D(F32, 4, 8), D(F32, 2, 8));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(0, 1), 0, 1);
	expect_ok(b, D(F32, 4, 2));
	free(b);
	b = two(D(F32, 3, 8, 4), D(F32, 3, 2, 8));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(1, 1), 0, 1);
	expect_ok(b, D(F32, 3, 4, 2));
	free(b);
	/* logits: x (B, T, C) @ wte (V, C)^T */
	b = two(D(F32, 2, 8, 64), D(F32, 100, 64));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(0, 1), 0, 1);
	expect_ok(b, D(F32, 2, 8, 100));
	free(b);

	/* refusals; a relu first so the bad node is node 1 */
	b = two(D(F32, 4, 64), D(F32, 32, 2));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_MATMUL, 2, 1);
	expect_refused(b, EINVAL, 1, "inner dims 64 and 32 differ");
	assert_string_equal(b->msg,
			    "node 1 (matmul): inner dims 64 and 32 differ");
	free(b);

	b = two(D(F32, 4, 8), D(F32, 2, 8));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(0, 0), 0, 1);
	expect_refused(b, EINVAL, 0, "inner dims 8 and 2 differ");
	free(b);

	op2_refused(DJINN_GOP_MATMUL, D(F32, 4, 8), D(F16, 8, 2), EINVAL,
		    "input 0 is f32, input 1 is f16");

	op2_refused(DJINN_GOP_MATMUL, D(I32, 4, 8), D(I32, 8, 2), EINVAL,
		    "input 0 is i32, not a float");

	op2_refused(DJINN_GOP_MATMUL, D(F32, 8), D(F32, 8, 2), EINVAL,
		    "input 0 has 1 dims, fewer than 2");
	op2_refused(DJINN_GOP_MATMUL, D(F32, 4, 8), D(F32, 8), EINVAL,
		    "input 1 has 1 dims");

	b = two(D(F32, 4, 8), D(F32, 8, 2));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(2, 0), 0, 1);
	expect_refused(b, EINVAL, 0, "trans_a 2");
	free(b);
	b = two(D(F32, 4, 8), D(F32, 8, 2));
	NODEP(b, DJINN_GOP_MATMUL, P_MM(0, ~0u), 0, 1);
	expect_refused(b, EINVAL, 0, "not 0/1");
	free(b);

	op2_refused(DJINN_GOP_MATMUL, D(F32, 2, 4, 8), D(F32, 3, 8, 2), EINVAL,
		    "batch dims 2 and 3 do not broadcast");
}

static void test_binary(void **state)
{
	static const unsigned int bin[] = { DJINN_GOP_ADD, DJINN_GOP_SUB,
					    DJINN_GOP_MUL, DJINN_GOP_DIV };
	static const unsigned int all[] = { F32, F16, BF16, I32, I64, U8 };
	struct gb *b;

	for (unsigned int i = 0; i < ARRAY_SIZE(bin); i++) {
		unsigned int op = bin[i];

		/* every dtype, u8 division included */
		for (unsigned int t = 0; t < ARRAY_SIZE(all); t++)
			op2_ok(op, D(all[t], 2, 3), D(all[t], 2, 3),
			       D(all[t], 2, 3));

		op2_ok(op, D(F32, 2, 3, 4), D(F32, 4), D(F32, 2, 3, 4));
		op2_ok(op, D(F32, 2, 1, 4), D(F32, 3, 1), D(F32, 2, 3, 4));
		op2_ok(op, D(F32), D(F32, 5, 6), D(F32, 5, 6));
		op2_ok(op, D(I64, 1, 1, 1, 1, 1, 1, 1, 9), D(I64, 7, 1),
		       D(I64, 1, 1, 1, 1, 1, 1, 7, 9));

		op2_refused(op, D(F32, 2, 3), D(F16, 2, 3), EINVAL,
			    "input 0 is f32, input 1 is f16");
		op2_refused(op, D(I32, 2, 3), D(I64, 2, 3), EINVAL,
			    "input 0 is i32, input 1 is i64");

		b = two(D(F32, 2, 3), D(F32, 2, 4));
		NODE(b, DJINN_GOP_GELU, 0);
		NODE(b, op, 2, 1);
		expect_refused(b, EINVAL, 1, "dims 3 and 4 do not broadcast");
		free(b);
		op2_refused(op, D(F32, 5, 3), D(F32, 2, 4, 3), EINVAL,
			    "dims 5 and 4 do not broadcast");
	}
}

static void test_scale(void **state)
{
	struct gb *b;

	b = one(D(F16, 2, 3));
	NODEP(b, DJINN_GOP_SCALE, P_ALPHA(0.125f), 0);
	expect_ok(b, D(F16, 2, 3));
	free(b);
	b = one(D(F32));
	NODEP(b, DJINN_GOP_SCALE, P_ALPHA(-3.0f), 0);
	expect_ok(b, D(F32));
	free(b);
	b = one(D(F32, 3));
	NODEP(b, DJINN_GOP_SCALE, P_ALPHA(0.0f), 0);
	expect_ok(b, D(F32, 3));
	free(b);

	b = one(D(I32, 2, 3));
	NODEP(b, DJINN_GOP_SCALE, P_ALPHA(2.0f), 0);
	expect_refused(b, EINVAL, 0, "input 0 is i32, not a float");
	free(b);

	static const float bad[] = { INFINITY, -INFINITY, NAN };

	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		b = one(D(F32, 2, 3));
		NODEP(b, DJINN_GOP_SCALE, P_ALPHA(bad[i]), 0);
		expect_refused(b, EINVAL, 0, "not finite");
		free(b);
	}
}

static void test_unary(void **state)
{
	static const unsigned int un[] = { DJINN_GOP_GELU, DJINN_GOP_RELU,
					   DJINN_GOP_SILU };

	for (unsigned int i = 0; i < ARRAY_SIZE(un); i++) {
		op1_ok(un[i], D(BF16, 2, 8, 64), D(BF16, 2, 8, 64));
		op1_ok(un[i], D(F32), D(F32));

		op1_refused(un[i], D(U8, 4), EINVAL,
			    "input 0 is u8, not a float");
		op1_refused(un[i], D(I64, 4), EINVAL, "not a float");
	}
}

static void test_softmax(void **state)
{
	op1_ok(DJINN_GOP_SOFTMAX, D(F32, 2, 4, 8, 8), D(F32, 2, 4, 8, 8));
	op1_ok(DJINN_GOP_SOFTMAX, D(F16, 5), D(F16, 5));

	op1_refused(DJINN_GOP_SOFTMAX, D(F32), EINVAL,
		    "input 0 has 0 dims, fewer than 1");
	op1_refused(DJINN_GOP_SOFTMAX, D(I32, 5), EINVAL, "not a float");
}

static void test_layernorm(void **state)
{
	struct gb *b;

	b = three(D(F32, 2, 8, 64), D(F32, 64), D(F32, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_ok(b, D(F32, 2, 8, 64));
	free(b);
	b = three(D(BF16, 64), D(BF16, 64), D(BF16, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_ok(b, D(BF16, 64));
	free(b);

	b = three(D(F32, 2, 8, 64), D(F32, 32), D(F32, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 1 has 32 channels");
	free(b);
	b = three(D(F32, 2, 8, 64), D(F32, 64), D(F32, 63));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 2 has 63 channels");
	free(b);
	b = three(D(F32, 2, 8, 64), D(F32, 1, 64), D(F32, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 1 has 2 dims, not 1");
	free(b);
	b = three(D(F32, 2, 8, 64), D(F32, 64), D(F16, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 0 is f32, input 2 is f16");
	free(b);
	b = three(D(I32, 2, 64), D(I32, 64), D(I32, 64));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "not a float");
	free(b);
	b = three(D(F32), D(F32, 1), D(F32, 1));
	NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 0 has 0 dims");
	free(b);

	static const float bad[] = { 0.0f, -0.0f, -1e-5f, INFINITY, NAN };

	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		b = three(D(F32, 2, 64), D(F32, 64), D(F32, 64));
		NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(bad[i]), 0, 1, 2);
		expect_refused(b, EINVAL, 0, "eps");
		free(b);
	}
}

static void test_rmsnorm(void **state)
{
	struct gb *b;

	b = two(D(F16, 2, 8, 64), D(F16, 64));
	NODEP(b, DJINN_GOP_RMSNORM, P_EPS(1e-6f), 0, 1);
	expect_ok(b, D(F16, 2, 8, 64));
	free(b);

	b = two(D(F16, 2, 8, 64), D(F16, 8));
	NODEP(b, DJINN_GOP_RMSNORM, P_EPS(1e-6f), 0, 1);
	expect_refused(b, EINVAL, 0, "input 1 has 8 channels");
	free(b);
	b = two(D(F16, 2, 8, 64), D(F32, 64));
	NODEP(b, DJINN_GOP_RMSNORM, P_EPS(1e-6f), 0, 1);
	expect_refused(b, EINVAL, 0, "input 0 is f16, input 1 is f32");
	free(b);
	b = two(D(F16, 2, 8, 64), D(F16, 64));
	NODEP(b, DJINN_GOP_RMSNORM, P_EPS(0.0f), 0, 1);
	expect_refused(b, EINVAL, 0, "eps 0 not finite and positive");
	free(b);
	b = two(D(F16, 2, 8, 64), D(F16, 64));
	NODEP(b, DJINN_GOP_RMSNORM, P_EPS(-INFINITY), 0, 1);
	expect_refused(b, EINVAL, 0, "eps");
	free(b);
}

static void test_embedding(void **state)
{
	op2_ok(DJINN_GOP_EMBEDDING, D(F32, 50257, 768), D(I32, 2, 8),
	       D(F32, 2, 8, 768));
	op2_ok(DJINN_GOP_EMBEDDING, D(BF16, 100, 64), D(I64), D(BF16, 64));
	op2_ok(DJINN_GOP_EMBEDDING, D(F32, 10, 4), D(I64, 1, 2, 3, 4, 5, 6, 7),
	       D(F32, 1, 2, 3, 4, 5, 6, 7, 4));

	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 10, 4),
		    D(I64, 1, 2, 3, 4, 5, 6, 7, 8), EINVAL,
		    "input 1 has 8 dims, more than 7");
	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 10, 4), D(F32, 2, 8), EINVAL,
		    "ids are f32, not i32 or i64");
	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 10, 4), D(U8, 2, 8), EINVAL,
		    "ids are u8");
	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 10, 4, 2), D(I32, 2, 8), EINVAL,
		    "input 0 has 3 dims, not 2");
	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 10), D(I32, 2, 8), EINVAL,
		    "input 0 has 1 dims, not 2");
	op2_refused(DJINN_GOP_EMBEDDING, D(I32, 10, 4), D(I32, 2, 8), EINVAL,
		    "input 0 is i32, not a float");
}

static void test_reshape(void **state)
{
	struct gb *b;

	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(4, 2, 8, 12, 16), 0);
	expect_ok(b, D(F32, 2, 8, 12, 16));
	free(b);
	b = one(D(I32, 2, 8, 12, 16));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(2, -1, 192), 0);
	expect_ok(b, D(I32, 16, 192));
	free(b);
	b = one(D(F32, 2, 8, 12, 16));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, 2, -1, 16), 0);
	expect_ok(b, D(F32, 2, 96, 16));
	free(b);
	b = one(D(F32, 1, 1));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(0), 0);
	expect_ok(b, D(F32));
	free(b);
	b = one(D(F32));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(8, 1, 1, 1, 1, 1, 1, 1, -1), 0);
	expect_ok(b, D(F32, 1, 1, 1, 1, 1, 1, 1, 1));
	free(b);
	b = one(D(F32, 6));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(1, -1), 0);
	expect_ok(b, D(F32, 6));
	free(b);

	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, 2, 8, 191), 0);
	expect_refused(b, EINVAL, 0, "shape has 3056 elements, its input 3072");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, -1, 8, -1), 0);
	expect_refused(b, EINVAL, 0, "dims 0 and 2 both -1");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, 2, -2, 192), 0);
	expect_refused(b, EINVAL, 0, "dim 1 is -2");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, 2, 0, 192), 0);
	expect_refused(b, EINVAL, 0, "dim 1 is 0");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(2, -1, 7), 0);
	expect_refused(b, EINVAL, 0, "3072 elements do not divide");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE,
	      P_SHAPE(8, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff,
		      0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff),
	      0);
	expect_refused(b, EINVAL, 0, "more than the 3072 elements");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(9, 1), 0);
	expect_refused(b, EINVAL, 0, "ndim 9 over 8");
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(2, 3072, 1, 5), 0);
	expect_refused(b, EINVAL, 0, "params byte 12 not zero");
	free(b);
}

static void test_permute(void **state)
{
	struct gb *b;

	b = one(D(F32, 2, 8, 12, 16));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(4, 0, 2, 1, 3), 0);
	expect_ok(b, D(F32, 2, 12, 8, 16));
	free(b);
	b = one(D(I64, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(3, 2, 0, 1), 0);
	expect_ok(b, D(I64, 5, 2, 3));
	free(b);
	b = one(D(F32));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(0), 0);
	expect_ok(b, D(F32));
	free(b);

	b = one(D(F32, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(2, 1, 0), 0);
	expect_refused(b, EINVAL, 0, "permutation of 2 dims for an input of 3");
	free(b);
	b = one(D(F32, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(3, 0, 1, 1), 0);
	expect_refused(b, EINVAL, 0, "not a permutation of 0..2");
	free(b);
	b = one(D(F32, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(3, 0, 1, 3), 0);
	expect_refused(b, EINVAL, 0, "not a permutation");
	free(b);
	b = one(D(F32, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(3, 0, -1, 2), 0);
	expect_refused(b, EINVAL, 0, "not a permutation");
	free(b);
	b = one(D(F32, 2, 3, 5));
	NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(42, 0, 1, 2), 0);
	expect_refused(b, EINVAL, 0, "permutation of 42 dims");
	free(b);
}

static void test_slice(void **state)
{
	struct gb *b;

	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(2, 64, 128), 0);
	expect_ok(b, D(F32, 2, 8, 64));
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(-1, -64, 192), 0);
	expect_ok(b, D(F32, 2, 8, 64));
	free(b);
	b = one(D(I32, 2, 8, 192));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(-3, 0, -1), 0);
	expect_ok(b, D(I32, 1, 8, 192));
	free(b);
	b = one(D(F32, 2, 8, 192));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(1, -8, 8), 0);
	expect_ok(b, D(F32, 2, 8, 192));
	free(b);
	b = one(D(F32, 7));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(0, 6, 7), 0);
	expect_ok(b, D(F32, 1));
	free(b);

	static const struct {
		int32_t axis;
		int64_t start, end;
		const char *what;
	} bad[] = {
		{ 3, 0, 1, "axis 3 out of range for 3 dims" },
		{ -4, 0, 1, "axis -4 out of range" },
		{ INT32_MIN, 0, 1, "out of range" },
		{ 1, 4, 4, "[4, 4) is not a range within dim 1 of 8" },
		{ 1, 5, 4, "[5, 4)" },
		{ 1, 0, 9, "[0, 9)" },
		{ 1, 8, 9, "[8, 9)" },
		{ 1, -9, 2, "[-9, 2)" },
		{ 1, 2, -8, "[2, -8)" },
		{ 1, INT64_MIN, INT64_MAX, "not a range" },
		{ 1, INT64_MAX, INT64_MIN, "not a range" },
		{ 1, 0, INT64_MIN, "not a range" },
	};

	for (unsigned int i = 0; i < ARRAY_SIZE(bad); i++) {
		b = one(D(F32, 2, 8, 192));
		NODE(b, DJINN_GOP_RELU, 0);
		NODEP(b, DJINN_GOP_SLICE,
		      P_SLICE(bad[i].axis, bad[i].start, bad[i].end), 1);
		expect_refused(b, EINVAL, 1, bad[i].what);
		free(b);
	}

	b = one(D(F32));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(0, 0, 1), 0);
	expect_refused(b, EINVAL, 0, "axis 0 out of range for 0 dims");
	free(b);
}

static void test_concat(void **state)
{
	struct gb *b;

	b = two(D(F32, 2, 8, 64), D(F32, 2, 3, 64));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(1), 0, 1);
	expect_ok(b, D(F32, 2, 11, 64));
	free(b);
	b = three(D(F16, 2, 4), D(F16, 2, 5), D(F16, 2, 1));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(-1), 0, 1, 2);
	expect_ok(b, D(F16, 2, 10));
	free(b);
	b = three(D(I64, 1, 4), D(I64, 2, 4), D(I64, 3, 4));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(0), 0, 1, 2, 1);
	expect_ok(b, D(I64, 8, 4));
	free(b);

	b = two(D(F32, 2, 8, 64), D(F16, 2, 3, 64));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(1), 0, 1);
	expect_refused(b, EINVAL, 0, "input 0 is f32, input 1 is f16");
	free(b);
	b = two(D(F32, 2, 8, 64), D(F32, 3, 64));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(1), 0, 1);
	expect_refused(b, EINVAL, 0, "input 1 has 2 dims, not 3");
	free(b);
	b = three(D(F32, 2, 8, 64), D(F32, 2, 3, 64), D(F32, 2, 3, 32));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "dim 2 of input 2 is 32, of input 0 64");
	free(b);
	b = two(D(F32, 2, 8, 64), D(F32, 2, 3, 64));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(3), 0, 1);
	expect_refused(b, EINVAL, 0, "axis 3 out of range for 3 dims");
	free(b);
	b = two(D(F32), D(F32));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(0), 0, 1);
	expect_refused(b, EINVAL, 0, "axis 0 out of range for 0 dims");
	free(b);

	/* params: start and end are SLICE's */
	b = two(D(F32, 2, 8, 64), D(F32, 2, 3, 64));
	NODEP(b, DJINN_GOP_CONCAT, P_SLICE(1, 0, 1), 0, 1);
	expect_refused(b, EINVAL, 0, "params byte 16 not zero");
	free(b);
}

/* Token-major attention, reading a KV cache (P, R, Hk D) in place. */
static void test_attn_tokens(void **state)
{
	struct gb *b;

	/* prefill: q (T, H, D), k, v (T, Hk, D); GQA */
	b = three(D(F32, 8, 12, 64), D(F32, 8, 4, 64), D(F32, 8, 4, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 0), 0, 1, 2);
	expect_ok(b, D(F32, 8, 12, 64));
	free(b);
	/* decode over a cache of 9 tokens, 24 slots of Hk D */
	b = three(D(BF16, 1, 12, 64), D(BF16, 1, 4, 64), D(BF16, 1, 4, 64));
	gb_input(b, D(BF16, 9, 24, 256));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 6, 7), 0, 1, 2, 3);
	expect_ok(b, D(BF16, 1, 12, 64));
	free(b);
	/* causal: queries may not outnumber the cache's and the new keys */
	b = three(D(F32, 11, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	gb_input(b, D(F32, 9, 2, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 1), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "causal with 11 queries and only 10 keys");
	free(b);

	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "cache slots 0, 1 without a cache");
	free(b);
	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	gb_input(b, D(F32, 9, 2, 32));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 1), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "cache rows of 32, not Hk D = 64");
	free(b);
	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	gb_input(b, D(F32, 9, 2, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 1, 2), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "cache slots 1, 2: the cache has 2");
	free(b);
	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 8));
	gb_input(b, D(F32, 9, 2, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 1), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "head dims 16 and 8 differ");
	free(b);
	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	gb_input(b, D(F16, 9, 2, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(1, 0, 1), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "input 0 is f32, input 3 is f16");
	free(b);
	b = three(D(F32, 1, 4, 16), D(F32, 1, 4, 16), D(F32, 1, 4, 16));
	NODEP(b, DJINN_GOP_ATTENTION,
	      ((struct djinn_p_attention){ .layout = 2 }), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "layout 2");
	free(b);
	b = three(D(F32, 1, 1, 4, 16), D(F32, 1, 1, 4, 16),
		  D(F32, 1, 1, 4, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_TOK(0, 0, 0), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 0 has 4 dims, not 3");
	free(b);
}

/*
 * Varlen attention (DJINN_ATTN_VARLEN, lib/graph.h): djinnd's own graphs
 * only, since its table names device addresses. A client's graph with it
 * is refused, by either client entry point; djinnd's own checks q, k, v
 * and the table's shape.
 */
#define P_ATT_VARLEN(c)                                           \
	((struct djinn_p_attention){ .causal = c,                 \
				     .layout = DJINN_ATTN_VARLEN, \
				     .cache_k = 4,                \
				     .cache_v = 5 })

static struct gb *varlen(struct djinn_tensor_desc q, struct djinn_tensor_desc k,
			 struct djinn_tensor_desc t, bool own)
{
	struct gb *b = three(q, k, k);

	gb_input(b, t);
	b->own = own;
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_VARLEN(1), 0, 1, 2, 3);
	return b;
}

static void test_attn_varlen(void **state)
{
	struct gb *b;

	/* 3 contexts, 10 rows in all; GQA */
	b = varlen(D(BF16, 10, 12, 64), D(BF16, 10, 4, 64), D(I64, 3, 4), true);
	expect_ok(b, D(BF16, 10, 12, 64));
	/* a client's graph: refused, with or without modules */
	b->own = false;
	expect_refused(b, EINVAL, 0, "layout 2 is djinnd's own");
	assert_int_equal(djinn_graph_infer(&b->view, b->descs, b->res, b->msg,
					   sizeof(b->msg)),
			 -EINVAL);
	assert_non_null(strstr(b->msg, "not for a client's graph"));
	free(b);

	b = varlen(D(F32, 10, 12, 64), D(F32, 10, 4, 64), D(I32, 3, 4), true);
	expect_refused(b, EINVAL, 0, "the table is not (N <= 64, 4) i64");
	free(b);
	b = varlen(D(F32, 10, 12, 64), D(F32, 10, 4, 64), D(I64, 3, 3), true);
	expect_refused(b, EINVAL, 0, "the table is not");
	free(b);
	b = varlen(D(F32, 2, 12, 64), D(F32, 2, 4, 64), D(I64, 3, 4), true);
	expect_refused(b, EINVAL, 0, "the table is not"); /* N > rows */
	free(b);
	b = varlen(D(F32, 70, 12, 64), D(F32, 70, 4, 64), D(I64, 65, 4), true);
	expect_refused(b, EINVAL, 0, "the table is not");
	free(b);
	b = varlen(D(F32, 10, 12, 64), D(F32, 9, 4, 64), D(I64, 3, 4), true);
	expect_refused(b, EINVAL, 0, "do not agree");
	free(b);
	b = varlen(D(F32, 10, 12, 64), D(F32, 10, 5, 64), D(I64, 3, 4), true);
	expect_refused(b, EINVAL, 0, "do not agree"); /* 12 % 5 */
	free(b);
	b = varlen(D(F32, 10, 12), D(F32, 10, 4), D(I64, 3, 4), true);
	expect_refused(b, EINVAL, 0, "input 0 has 2 dims, not 3");
	free(b);
	/* not causal */
	b = three(D(F32, 10, 12, 64), D(F32, 10, 4, 64), D(F32, 10, 4, 64));
	gb_input(b, D(I64, 3, 4));
	b->own = true;
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_VARLEN(0), 0, 1, 2, 3);
	expect_refused(b, EINVAL, 0, "varlen attention is causal");
	free(b);
	/* no table */
	b = three(D(F32, 10, 12, 64), D(F32, 10, 4, 64), D(F32, 10, 4, 64));
	b->own = true;
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT_VARLEN(1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "varlen attention without its table");
	free(b);
}

static void test_attention(void **state)
{
	struct gb *b;

	b = three(D(F32, 2, 12, 8, 64), D(F32, 2, 12, 8, 64),
		  D(F32, 2, 12, 8, 64));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_ok(b, D(F32, 2, 12, 8, 64));
	free(b);
	/* decode: one query against a longer cache; Dv differs from D */
	b = three(D(BF16, 1, 4, 1, 16), D(BF16, 1, 4, 9, 16),
		  D(BF16, 1, 4, 9, 32));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0.25f, 1), 0, 1, 2);
	expect_ok(b, D(BF16, 1, 4, 1, 32));
	free(b);
	/* not causal: more queries than keys is fine */
	b = three(D(F16, 1, 4, 9, 16), D(F16, 1, 4, 3, 16),
		  D(F16, 1, 4, 3, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(-1.0f, 0), 0, 1, 2);
	expect_ok(b, D(F16, 1, 4, 9, 16));
	free(b);

	b = three(D(F16, 1, 4, 9, 16), D(F16, 1, 4, 3, 16),
		  D(F16, 1, 4, 3, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "causal with 9 queries and only 3 keys");
	free(b);
	b = three(D(F16, 1, 4, 4, 16), D(F16, 1, 4, 3, 16),
		  D(F16, 1, 4, 3, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "causal with 4 queries and only 3 keys");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 8), D(F32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "head dims differ: q 16, k 8");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 2, 4, 8, 16),
		  D(F32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "B differs: q 1, k 2, v 1");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F32, 1, 2, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "H differs: q 4, k 4, v 2");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F32, 1, 4, 7, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "key lengths differ: k 8, v 7");
	free(b);
	b = three(D(F32, 4, 8, 16), D(F32, 4, 8, 16), D(F32, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 0 has 3 dims, not 4");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F16, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "input 0 is f32, input 2 is f16");
	free(b);
	b = three(D(I32, 1, 4, 8, 16), D(I32, 1, 4, 8, 16),
		  D(I32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "not a float");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 2), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "causal 2: not 0/1");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(NAN, 1), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "scale nan not finite");
	free(b);
	b = three(D(F32, 1, 4, 8, 16), D(F32, 1, 4, 8, 16),
		  D(F32, 1, 4, 8, 16));
	NODEP(b, DJINN_GOP_ATTENTION, P_ATT(INFINITY, 0), 0, 1, 2);
	expect_refused(b, EINVAL, 0, "scale inf not finite");
	free(b);
}

static void test_argmax(void **state)
{
	op1_ok(DJINN_GOP_ARGMAX, D(F32, 2, 8, 100), D(I64, 2, 8));
	op1_ok(DJINN_GOP_ARGMAX, D(U8, 100), D(I64));
	op1_ok(DJINN_GOP_ARGMAX, D(I32, 1, 2, 3, 4, 5, 6, 7, 8),
	       D(I64, 1, 2, 3, 4, 5, 6, 7));

	op1_refused(DJINN_GOP_ARGMAX, D(F32), EINVAL,
		    "input 0 has 0 dims, fewer than 1");
}

static void test_sample(void **state)
{
	op2_ok(DJINN_GOP_SAMPLE, D(F32, 2, 50257), D(U8, 2, 24), D(I64, 2));
	op2_ok(DJINN_GOP_SAMPLE, D(BF16, 100), D(U8, 24), D(I64));
	op2_ok(DJINN_GOP_SAMPLE, D(F16, 3, 1, 7), D(U8, 3, 1, 24),
	       D(I64, 3, 1));

	op2_refused(DJINN_GOP_SAMPLE, D(I32, 2, 10), D(U8, 2, 24), EINVAL,
		    "input 0 is i32, not a float");
	op2_refused(DJINN_GOP_SAMPLE, D(F32), D(U8, 24), EINVAL,
		    "input 0 has 0 dims, fewer than 1");
	op2_refused(DJINN_GOP_SAMPLE, D(F32, 2, 10), D(I64, 2, 3), EINVAL,
		    "params are not u8 rows of 24 bytes");
	op2_refused(DJINN_GOP_SAMPLE, D(F32, 2, 10), D(U8, 2, 16), EINVAL,
		    "params are not u8 rows of 24 bytes");
	op2_refused(DJINN_GOP_SAMPLE, D(F32, 2, 10), D(U8, 3, 24), EINVAL,
		    "params' leading dims are not the logits'");
	op2_refused(DJINN_GOP_SAMPLE, D(F32, 2, 10), D(U8, 2, 1, 24), EINVAL,
		    "params' leading dims are not the logits'");
	op2_refused(DJINN_GOP_SAMPLE, D(F32, 1ull << 31), D(U8, 24), EINVAL,
		    "2147483648 logits a row, over 2^31 - 1");
}

/* A kernel (module, x) -> like x, with params @p; value of the node. */
static struct gb *kernel_graph(struct djinn_p_kernel p)
{
	struct gb *b = gb_new();

	gb_module(b, 4096);
	gb_input(b, D(F32, 2, 3));
	gb_input(b, D(I32, 7));
	NODEP(b, DJINN_GOP_KERNEL, p, 0, 1, 2);
	return b;
}

static void test_kernel(void **state)
{
	struct djinn_p_kernel p;
	struct gb *b;

	/* the result is shaped like the argument out_like names */
	b = kernel_graph(P_KERNEL(1));
	expect_ok(b, D(F32, 2, 3));
	free(b);
	b = kernel_graph(P_KERNEL(2));
	expect_ok(b, D(I32, 7));
	free(b);
	p = P_KERNEL(1);
	p.out_init = 1;
	p.shmem = 48 * 1024;
	p.grid[0] = 0x7fffffff;
	p.grid[1] = p.grid[2] = 65535;
	p.block[0] = 16;
	p.block[1] = 1;
	p.block[2] = 64;
	b = kernel_graph(p);
	expect_ok(b, D(F32, 2, 3));
	free(b);
	/* three arguments, one of them an earlier node, the module too */
	b = gb_new();
	gb_module(b, 4096);
	gb_input(b, D(F32, 2, 3));
	gb_input(b, D(I32, 7));
	NODE(b, DJINN_GOP_RELU, 1);
	NODEP(b, DJINN_GOP_KERNEL, P_KERNEL(3), 0, 2, 0, 3);
	expect_ok(b, D(F32, 2, 3));
	free(b);

	/* the module: a graph input flagged as one, nothing else */
	b = kernel_graph(P_KERNEL(1));
	b->module[0] = false;
	expect_refused(b, EINVAL, 0, "input 0 is not a module");
	free(b);
	b = kernel_graph(P_KERNEL(1));
	last(b)->inputs[0] = 1;
	expect_refused(b, EINVAL, 0, "input 0 is not a module");
	free(b);
	b = gb_new();
	gb_module(b, 4096);
	gb_input(b, D(F32, 2, 3));
	NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(1, 4096), 0);
	/* value 2 is the reshaped module */
	NODEP(b, DJINN_GOP_KERNEL, P_KERNEL(1), 2, 1);
	expect_refused(b, EINVAL, 1, "input 0 is not a module");
	free(b);
	/* djinn_graph_infer() knows no modules */
	b = kernel_graph(P_KERNEL(1));
	gb_payload(b);
	assert_int_equal(djinn_graph_parse(b->buf, b->len, &b->view, b->msg,
					   sizeof(b->msg)),
			 0);
	assert_int_equal(djinn_graph_infer(&b->view, b->descs, b->res, b->msg,
					   sizeof(b->msg)),
			 -EINVAL);
	assert_string_equal(b->msg,
			    "node 0 (kernel): input 0 is not a module (a graph "
			    "input uploaded with DJINN_TENSOR_MODULE)");
	free(b);

	/* out_like, out_init */
	b = kernel_graph(P_KERNEL(0));
	expect_refused(b, EINVAL, 0, "out_like 0: not an argument (1 to 2)");
	free(b);
	b = kernel_graph(P_KERNEL(3));
	expect_refused(b, EINVAL, 0, "out_like 3: not an argument (1 to 2)");
	free(b);
	p = P_KERNEL(1);
	p.out_init = 2;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "out_init 2: not 0 or 1");
	free(b);

	/* the launch's limits */
	for (unsigned int k = 0; k < 3; k++) {
		p = P_KERNEL(1);
		p.grid[k] = 0;
		b = kernel_graph(p);
		expect_refused(b, EINVAL, 0, "a dim is 0");
		free(b);
		p = P_KERNEL(1);
		p.block[k] = 0;
		b = kernel_graph(p);
		expect_refused(b, EINVAL, 0, "a dim is 0");
		free(b);
		p = P_KERNEL(1);
		p.grid[k] = k ? 65536 : 0x80000000u;
		b = kernel_graph(p);
		expect_refused(b, EINVAL, 0, "over (2^31 - 1, 65535, 65535)");
		free(b);
	}
	p = P_KERNEL(1);
	p.block[0] = 1025;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0,
		       "block (1025, 1, 1): 1025 threads, at most 1024");
	free(b);
	/* a product that overflows 32 bits */
	p = P_KERNEL(1);
	p.block[0] = p.block[1] = 65536;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "4294967296 threads");
	free(b);
	p = P_KERNEL(1);
	p.block[0] = 1;
	p.block[2] = 65;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "z at most 64");
	free(b);
	p = P_KERNEL(1);
	p.shmem = 48 * 1024 + 1;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "49153 bytes of shared memory");
	free(b);

	/* reserved, and a kernel that must be named */
	p = P_KERNEL(1);
	p.__reserved = 0x100;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "reserved field not zero");
	free(b);
	p = P_KERNEL(1);
	p.name_hash = 0;
	b = kernel_graph(p);
	expect_refused(b, EINVAL, 0, "name_hash is 0");
	free(b);

	/* an empty argument never reaches a kernel */
	b = kernel_graph(P_KERNEL(1));
	b->descs[2] = D(I32, 0);
	expect_refused(b, EINVAL, 0, "input 2 is empty");
	free(b);
}

static void test_result_limit(void **state)
{
	struct gb *b;

	/* exactly 2^40 bytes is allowed */
	op2_ok(DJINN_GOP_ADD, D(F32, 1ull << 19, 1), D(F32, 1, 1ull << 19),
	       D(F32, 1ull << 19, 1ull << 19));

	/* (2^20, 1) + (1, 2^19): 2^41 bytes of f32 */
	op2_refused(DJINN_GOP_ADD, D(F32, 1ull << 20, 1), D(F32, 1, 1ull << 19),
		    E2BIG, "result over 2^40 bytes");

	/* a product that overflows 64 bits */
	op2_refused(DJINN_GOP_MUL, D(U8, 1ull << 62, 1), D(U8, 1, 1ull << 62),
		    E2BIG, "result over 2^40");

	/* matmul: M x N from two modest inputs */
	op2_refused(DJINN_GOP_MATMUL, D(F32, 1ull << 20, 1),
		    D(F32, 1, 1ull << 20), E2BIG, "result over 2^40");

	/* concat of big inputs: the sum overflows nothing, the bytes do */
	b = one(D(U8, 1ull << 39));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(0), 0, 0, 0);
	expect_refused(b, E2BIG, 0, "result over 2^40");
	free(b);

	/* concat: four dims of 2^62 overflow 64 bits, three do not */
	b = one(D(U8, 1ull << 62));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(0), 0, 0, 0, 0);
	expect_refused(b, E2BIG, 0, "dim 0 overflows");
	free(b);
	b = one(D(U8, 1ull << 62));
	NODEP(b, DJINN_GOP_CONCAT, P_AXIS(-1), 0, 0, 0);
	expect_refused(b, E2BIG, 0, "result over 2^40");
	free(b);

	/* embedding: ids x C */
	op2_refused(DJINN_GOP_EMBEDDING, D(F32, 4, 1ull << 20),
		    D(I32, 1ull << 20), E2BIG, "result over 2^40");

	/* a big graph input alone is fine: only results are limited */
	b = one(D(U8, 1ull << 50));
	NODEP(b, DJINN_GOP_SLICE, P_SLICE(0, 0, 16), 0);
	expect_ok(b, D(U8, 16));
	free(b);
}

static void test_outputs(void **state)
{
	struct gb *b;

	b = one(D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_GELU, 1);
	gb_output(b, 1);
	gb_output(b, 0);
	assert_int_equal(gb_run(b), 0);
	free(b);

	b = one(D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_GELU, 1);
	gb_output(b, 0);
	gb_output(b, 2);
	assert_int_equal(gb_run(b), -EINVAL);
	assert_string_equal(b->msg, "output 1: node 2 out of range (2 nodes)");
	free(b);

	b = one(D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	NODE(b, DJINN_GOP_GELU, 1);
	gb_output(b, 1);
	gb_output(b, 0);
	gb_output(b, 1);
	assert_int_equal(gb_run(b), -EINVAL);
	assert_string_equal(b->msg, "output 2: node 1 (gelu) listed twice");
	free(b);

	b = one(D(F32, 4));
	NODE(b, DJINN_GOP_RELU, 0);
	gb_output(b, ~0u);
	assert_int_equal(gb_run(b), -EINVAL);
	assert_non_null(strstr(b->msg, "output 0: node 4294967295"));
	free(b);
}

/* ---------------------------------------------------------------------- */
/* A GPT-2 block */

/*
 * One transformer block of GPT-2 with B = 2, T = 16, C = 768, 12 heads:
 *
 *   h = x + proj(attention(split_heads(ln1(x) @ w_qkv + b_qkv)))
 *   y = h + fcproj(gelu(ln2(h) @ w_fc + b_fc))
 */
static void test_gpt2_block(void **state)
{
	enum { B = 2, T = 16, C = 768, NH = 12, HS = C / NH };
	struct gb *b = gb_new();
	uint32_t x = gb_input(b, D(F32, B, T, C));
	uint32_t ln1_g = gb_input(b, D(F32, C)), ln1_b = gb_input(b, D(F32, C));
	uint32_t w_qkv = gb_input(b, D(F32, C, 3 * C));
	uint32_t b_qkv = gb_input(b, D(F32, 3 * C));
	uint32_t w_proj = gb_input(b, D(F32, C, C));
	uint32_t b_proj = gb_input(b, D(F32, C));
	uint32_t ln2_g = gb_input(b, D(F32, C)), ln2_b = gb_input(b, D(F32, C));
	uint32_t w_fc = gb_input(b, D(F32, C, 4 * C));
	uint32_t b_fc = gb_input(b, D(F32, 4 * C));
	uint32_t w_fcp = gb_input(b, D(F32, 4 * C, C));
	uint32_t b_fcp = gb_input(b, D(F32, C));
	uint32_t ln1, qkv, heads[3], att, h, ln2, fc, y;

	ln1 = NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), x, ln1_g, ln1_b);
	qkv = NODE(b, DJINN_GOP_MATMUL, ln1, w_qkv); /* (B, T, 3C) */
	qkv = NODE(b, DJINN_GOP_ADD, qkv, b_qkv);
	for (int i = 0; i < 3; i++) {
		uint32_t s = NODEP(b, DJINN_GOP_SLICE,
				   P_SLICE(-1, i * C, (i + 1) * C), qkv);

		s = NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(4, B, T, NH, HS), s);
		/* (B, NH, T, HS) */
		heads[i] =
			NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(4, 0, 2, 1, 3), s);
	}
	att = NODEP(b, DJINN_GOP_ATTENTION, P_ATT(0, 1), heads[0], heads[1],
		    heads[2]);
	att = NODEP(b, DJINN_GOP_PERMUTE, P_SHAPE(4, 0, 2, 1, 3), att);
	att = NODEP(b, DJINN_GOP_RESHAPE, P_SHAPE(3, B, T, -1), att);
	att = NODE(b, DJINN_GOP_MATMUL, att, w_proj);
	att = NODE(b, DJINN_GOP_ADD, att, b_proj);
	h = NODE(b, DJINN_GOP_ADD, x, att);
	ln2 = NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), h, ln2_g, ln2_b);
	fc = NODE(b, DJINN_GOP_MATMUL, ln2, w_fc); /* (B, T, 4C) */
	fc = NODE(b, DJINN_GOP_ADD, fc, b_fc);
	fc = NODE(b, DJINN_GOP_GELU, fc);
	fc = NODE(b, DJINN_GOP_MATMUL, fc, w_fcp);
	fc = NODE(b, DJINN_GOP_ADD, fc, b_fcp);
	y = NODE(b, DJINN_GOP_ADD, h, fc);
	last(b)->residency = DJINN_RES_OUTPUT;
	gb_output(b, y - b->nr_in);
	gb_output(b, heads[1] - b->nr_in); /* the keys, for a KV cache */

	expect_ok(b, D(F32, B, T, C));
	check_desc(&b->res[qkv - b->nr_in], D(F32, B, T, 3 * C), "qkv");
	check_desc(&b->res[heads[2] - b->nr_in], D(F32, B, NH, T, HS), "v");
	check_desc(&b->res[att - b->nr_in], D(F32, B, T, C), "att");
	check_desc(&b->res[h - b->nr_in], D(F32, B, T, C), "h");
	check_desc(&b->res[fc - b->nr_in - 2], D(F32, B, T, 4 * C), "gelu");
	assert_int_equal(b->nr_nodes, 25);
	free(b);
}

/* Decode: embedding, the last token's logits, argmax. */
static void test_gpt2_head(void **state)
{
	struct gb *b = gb_new();
	uint32_t wte = gb_input(b, D(BF16, 50257, 768));
	uint32_t ids = gb_input(b, D(I64, 4, 32));
	uint32_t g = gb_input(b, D(BF16, 768)), be = gb_input(b, D(BF16, 768));
	uint32_t v;

	v = NODE(b, DJINN_GOP_EMBEDDING, wte, ids); /* (4, 32, 768) */
	v = NODEP(b, DJINN_GOP_SLICE, P_SLICE(1, -1, 32), v);
	v = NODEP(b, DJINN_GOP_LAYERNORM, P_EPS(1e-5f), v, g, be);
	v = NODEP(b, DJINN_GOP_MATMUL, P_MM(0, 1), v, wte); /* (4, 1, V) */
	v = NODEP(b, DJINN_GOP_SCALE, P_ALPHA(1.0f / 0.7f), v);
	v = NODE(b, DJINN_GOP_SOFTMAX, v);
	NODE(b, DJINN_GOP_ARGMAX, v);
	expect_ok(b, D(I64, 4, 1));
	check_desc(&b->res[v - b->nr_in], D(BF16, 4, 1, 50257), "probs");
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_desc_check),
		cmocka_unit_test(test_parse_ok),
		cmocka_unit_test(test_parse_length),
		cmocka_unit_test(test_parse_limits),
		cmocka_unit_test(test_parse_reserved),
		cmocka_unit_test(test_parse_alignment),
		cmocka_unit_test(test_every_op_valid),
		cmocka_unit_test(test_unknown_op),
		cmocka_unit_test(test_nr_inputs),
		cmocka_unit_test(test_inputs_earlier),
		cmocka_unit_test(test_node_reserved),
		cmocka_unit_test(test_params_unused),
		cmocka_unit_test(test_empty_inputs),
		cmocka_unit_test(test_bad_input_desc),
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_binary),
		cmocka_unit_test(test_scale),
		cmocka_unit_test(test_unary),
		cmocka_unit_test(test_softmax),
		cmocka_unit_test(test_layernorm),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_reshape),
		cmocka_unit_test(test_permute),
		cmocka_unit_test(test_slice),
		cmocka_unit_test(test_concat),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_attn_tokens),
		cmocka_unit_test(test_attn_varlen),
		cmocka_unit_test(test_argmax),
		cmocka_unit_test(test_sample),
		cmocka_unit_test(test_kernel),
		cmocka_unit_test(test_result_limit),
		cmocka_unit_test(test_outputs),
		cmocka_unit_test(test_gpt2_block),
		cmocka_unit_test(test_gpt2_head),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
