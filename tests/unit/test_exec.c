// SPDX-License-Identifier: MIT
/*
 * Unit tests for djinnd/exec: planning, admission and running graphs on
 * the CPU backend over a real VMU, against references computed here.
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
#include "list.h"
#include "graph/run.h"
#include "exec_fix.h"

static int setup(void **state)
{
	return exec_fix_setup(state, 256 * MiB);
}

static int setup_small(void **state)
{
	return exec_fix_setup(state, 16 * MiB);
}

/* ---------------------------------------------------------------------- */
/* Building graphs */

struct gb {
	uint64_t buf[8192]; /* 8-byte aligned payload */
	struct djinn_graph g;
	struct djinn_ref refs[8];
	struct djinn_node nodes[16];
	uint32_t outputs[8];
	struct djinn_graph_view view;
	struct djinn_tensor_desc in[8], out[16];
	const bool *module; /* which inputs are client modules, or NULL */
};

static struct djinn_tensor_desc desc(unsigned int dtype, unsigned int ndim, ...)
{
	struct djinn_tensor_desc d = { .dtype = dtype, .ndim = ndim };
	va_list ap;

	va_start(ap, ndim);
	for (unsigned int i = 0; i < ndim; i++)
		d.dims[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return d;
}

static void gb_input(struct gb *gb, struct djinn_tensor_desc d)
{
	gb->in[gb->g.nr_inputs++] = d;
}

/* Add a node; returns its value index. */
static uint32_t gb_node(struct gb *gb, unsigned int op, unsigned int nin,
			uint32_t a, uint32_t b, uint32_t c)
{
	struct djinn_node *n = &gb->nodes[gb->g.nr_nodes];

	memset(n, 0, sizeof(*n));
	n->op = op;
	n->nr_inputs = nin;
	n->inputs[0] = a;
	n->inputs[1] = b;
	n->inputs[2] = c;
	return gb->g.nr_inputs + gb->g.nr_nodes++;
}

static void gb_output(struct gb *gb, uint32_t value)
{
	gb->outputs[gb->g.nr_outputs++] = value - gb->g.nr_inputs;
}

/* Serialize, parse and infer, as djinnd does with a GRAPH_SUBMIT. */
static void gb_finish(struct gb *gb)
{
	uint8_t *p = (uint8_t *)gb->buf;
	uint64_t len = 0;
	char msg[256];

	memcpy(p, &gb->g, sizeof(gb->g));
	len += sizeof(gb->g);
	memset(gb->refs, 0, sizeof(gb->refs));
	memcpy(p + len, gb->refs, gb->g.nr_inputs * sizeof(gb->refs[0]));
	len += gb->g.nr_inputs * sizeof(gb->refs[0]);
	memcpy(p + len, gb->nodes, gb->g.nr_nodes * sizeof(gb->nodes[0]));
	len += gb->g.nr_nodes * sizeof(gb->nodes[0]);
	memset(p + len, 0, (gb->g.nr_outputs * 4 + 7) & ~7u);
	memcpy(p + len, gb->outputs, gb->g.nr_outputs * 4);
	len += (gb->g.nr_outputs * 4 + 7) & ~7u;
	assert_int_equal(djinn_graph_parse(p, len, &gb->view, msg, sizeof(msg)),
			 0);
	if (djinn_graph_infer_modules(&gb->view, gb->in, gb->module, gb->out,
				      msg, sizeof(msg)))
		fail_msg("infer: %s", msg);
}

/* ---------------------------------------------------------------------- */
/* Tensors in the session's memory */

struct tensor {
	uint64_t region;
	struct dj_tensor t;
};

static struct tensor put_f32(struct exec_fix *f, struct djinn_tensor_desc d,
			     const float *data)
{
	uint64_t elems, bytes;
	struct vmu_region_info info;
	struct tensor t = { .t.desc = d };

	assert_int_equal(djinn_desc_check(&d, &elems, &bytes), 0);
	assert_int_equal(vmu_region_create(f->s, bytes, &t.region), 0);
	assert_int_equal(vmu_region_resize(f->s, t.region, bytes, NULL), 0);
	assert_int_equal(vmu_region_write(f->s, t.region, 0, data, bytes), 0);
	assert_int_equal(vmu_region_pin(f->s, t.region, NULL, &info), 0);
	t.t.addr = info.addr;
	return t;
}

static void drop(struct exec_fix *f, struct tensor *t)
{
	assert_int_equal(vmu_region_unpin(f->s, t->region), 0);
	assert_int_equal(vmu_region_destroy(f->s, t->region), 0);
}

static float *rand_f32(unsigned int seed, size_t n)
{
	float *x = xmalloc(n * sizeof(*x));

	srand(seed);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
	return x;
}

static void expect_close(const float *got, const double *want, size_t n,
			 double tol, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (fabs(got[i] - want[i]) > tol * (1.0 + fabs(want[i])))
			fail_msg("%s[%zu] = %g, want %g", what, i, got[i],
				 want[i]);
}

static struct vmu_usage usage(struct exec_fix *f)
{
	struct vmu_usage u;

	vmu_session_usage(f->s, &u);
	return u;
}

/* ---------------------------------------------------------------------- */
/* Tests */

/* y = gelu(x w + b), with the matmul kept as a second output. */
static void test_mlp_two_outputs(void **state)
{
	struct exec_fix *f = *state;
	enum { M = 5, K = 8, N = 16 };
	float *x = rand_f32(1, M * K), *w = rand_f32(2, K * N),
	      *b = rand_f32(3, N);
	double mm[M * N], y[M * N];
	float got[M * N];
	struct graph_result res;
	struct tensor tx, tw, tb;
	struct gb *gb = calloc(1, sizeof(*gb));
	struct dj_tensor in[3];
	char msg[256] = "";
	uint32_t v_mm, v_add, v_y;

	gb_input(gb, desc(DJINN_DTYPE_F32, 2, (uint64_t)M, (uint64_t)K));
	gb_input(gb, desc(DJINN_DTYPE_F32, 2, (uint64_t)K, (uint64_t)N));
	gb_input(gb, desc(DJINN_DTYPE_F32, 1, (uint64_t)N));
	v_mm = gb_node(gb, DJINN_GOP_MATMUL, 2, 0, 1, 0);
	v_add = gb_node(gb, DJINN_GOP_ADD, 2, v_mm, 2, 0);
	v_y = gb_node(gb, DJINN_GOP_GELU, 1, v_add, 0, 0);
	gb_output(gb, v_y);
	gb_output(gb, v_mm);
	gb_finish(gb);

	tx = put_f32(f, gb->in[0], x);
	tw = put_f32(f, gb->in[1], w);
	tb = put_f32(f, gb->in[2], b);
	in[0] = tx.t;
	in[1] = tw.t;
	in[2] = tb.t;
	if (graph_run(f->v, f->st, f->b, f->s, &gb->view, in, gb->out, &res,
		      msg, sizeof(msg)))
		fail_msg("exec: %s", msg);

	for (int i = 0; i < M; i++) {
		for (int j = 0; j < N; j++) {
			double acc = 0, h;

			for (int k = 0; k < K; k++)
				acc += (double)x[i * K + k] * w[k * N + j];
			mm[i * N + j] = acc;
			h = acc + b[j];
			y[i * N + j] = 0.5 * h *
				       (1 + tanh(sqrt(2 / M_PI) *
						 (h + 0.044715 * h * h * h)));
		}
	}
	assert_int_equal(
		vmu_region_read(f->s, res.regions[0], 0, got, sizeof(got)), 0);
	expect_close(got, y, M * N, 1e-5, "gelu");
	assert_int_equal(
		vmu_region_read(f->s, res.regions[1], 0, got, sizeof(got)), 0);
	expect_close(got, mm, M * N, 1e-5, "matmul");

	/* The intermediate (the add) went to the stack, planned exactly. */
	{
		struct vmu_stats st;

		vmu_get_stats(f->v, &st);
		assert_int_equal(st.stack_last_peak,
				 (M * N * 4 + GRAPH_ALIGN - 1) &
					 ~(uint64_t)(GRAPH_ALIGN - 1));
		assert_int_equal(res.peak_bytes,
				 st.stack_last_peak +
					 2 * vmu_round(f->v, M * N * 4));
	}
	/* Outputs are the session's, unpinned; the inputs plus two. */
	assert_int_equal(usage(f).regions, 5);
	assert_int_equal(vmu_region_destroy(f->s, res.regions[0]), 0);
	assert_int_equal(vmu_region_destroy(f->s, res.regions[1]), 0);
	drop(f, &tx);
	drop(f, &tw);
	drop(f, &tb);
	free(x);
	free(w);
	free(b);
	free(gb);
}

/* A graph whose output cannot fit is refused whole, touching nothing. */
static void test_refused_by_admission(void **state)
{
	struct exec_fix *f = *state;
	struct djinn_tensor_desc big =
		desc(DJINN_DTYPE_F32, 2, 1024ull, 8192ull); /* 32 MiB */
	struct vmu_stats before, after;
	struct graph_result res;
	struct gb *gb = calloc(1, sizeof(*gb));
	struct dj_tensor in[1] = { { .desc = big } };
	char msg[256] = "";
	uint32_t v;

	gb_input(gb, big);
	v = gb_node(gb, DJINN_GOP_RELU, 1, 0, 0, 0);
	gb_output(gb, v);
	gb_finish(gb);

	vmu_get_stats(f->v, &before);
	/* The input is never read: admission refuses before any node. */
	assert_int_equal(graph_run(f->v, f->st, f->b, f->s, &gb->view, in,
				   gb->out, &res, msg, sizeof(msg)),
			 -ENOMEM);
	assert_non_null(strstr(msg, "need 33554432 bytes"));
	vmu_get_stats(f->v, &after);
	assert_int_equal(after.committed, before.committed);
	assert_int_equal(after.reserved, 0);
	assert_int_equal(after.admit_refusals, before.admit_refusals + 1);
	assert_int_equal(usage(f).regions, 0);
	free(gb);
}

/* A node that fails (an embedding id out of range) undoes the graph. */
static void test_failed_node_leaves_nothing(void **state)
{
	struct exec_fix *f = *state;
	float table[4 * 3] = { 0 };
	int32_t ids[2] = { 1, 9 };
	struct graph_result res;
	struct tensor tt, ti;
	struct gb *gb = calloc(1, sizeof(*gb));
	struct dj_tensor in[2];
	struct vmu_usage u0;
	char msg[256] = "";
	uint32_t e, r;

	gb_input(gb, desc(DJINN_DTYPE_F32, 2, 4ull, 3ull));
	gb_input(gb, desc(DJINN_DTYPE_I32, 1, 2ull));
	e = gb_node(gb, DJINN_GOP_EMBEDDING, 2, 0, 1, 0);
	r = gb_node(gb, DJINN_GOP_RELU, 1, e, 0, 0);
	gb_output(gb, r);
	gb_output(gb, e);
	gb_finish(gb);

	tt = put_f32(f, gb->in[0], table);
	ti = put_f32(f, gb->in[1], (const float *)ids);
	in[0] = tt.t;
	in[1] = ti.t;
	u0 = usage(f);
	assert_true(graph_run(f->v, f->st, f->b, f->s, &gb->view, in, gb->out,
			      &res, msg, sizeof(msg)) < 0);
	assert_non_null(strstr(msg, "node 0 (embedding)"));
	assert_int_equal(usage(f).regions, u0.regions);
	assert_int_equal(usage(f).data_bytes, u0.data_bytes);
	drop(f, &tt);
	drop(f, &ti);
	free(gb);
}

/* Every node an output: no stack is used at all. */
static void test_no_intermediates(void **state)
{
	struct exec_fix *f = *state;
	float x[6] = { -1, 2, -3, 4, -5, 6 };
	float got[6];
	struct graph_result res;
	struct vmu_stats st;
	struct tensor tx;
	struct gb *gb = calloc(1, sizeof(*gb));
	char msg[256] = "";
	uint32_t v;

	gb_input(gb, desc(DJINN_DTYPE_F32, 2, 2ull, 3ull));
	v = gb_node(gb, DJINN_GOP_RELU, 1, 0, 0, 0);
	gb_output(gb, v);
	gb_finish(gb);
	tx = put_f32(f, gb->in[0], x);
	if (graph_run(f->v, f->st, f->b, f->s, &gb->view, &tx.t, gb->out, &res,
		      msg, sizeof(msg)))
		fail_msg("exec: %s", msg);
	assert_int_equal(
		vmu_region_read(f->s, res.regions[0], 0, got, sizeof(got)), 0);
	for (int i = 0; i < 6; i++)
		assert_true(got[i] == (x[i] > 0 ? x[i] : 0));
	vmu_get_stats(f->v, &st);
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 0);
	assert_int_equal(vmu_region_destroy(f->s, res.regions[0]), 0);
	drop(f, &tx);
	free(gb);
}

/* The node gb_node() added last, for its params. */
static struct djinn_node *last(struct gb *gb)
{
	return &gb->nodes[gb->g.nr_nodes - 1];
}

static uint32_t gb_slice(struct gb *gb, uint32_t x, int axis, int64_t start,
			 int64_t end)
{
	uint32_t v = gb_node(gb, DJINN_GOP_SLICE, 1, x, 0, 0);

	last(gb)->params.axis = (struct djinn_p_axis){ .axis = axis,
						       .start = start,
						       .end = end };
	return v;
}

/*
 * Reshapes and slices of contiguous bytes are views: they take no stack
 * and their results are their inputs' bytes; a slice of strided bytes is
 * copied, and a view that is a graph output gets its own region.
 */
static void test_views(void **state)
{
	struct exec_fix *f = *state;
	float x[24], got[12];
	struct graph_result res;
	struct vmu_stats st;
	struct tensor tx;
	struct gb *gb = calloc(1, sizeof(*gb));
	char msg[256] = "";
	uint32_t r, s1, s2, s3;

	for (int i = 0; i < 24; i++)
		x[i] = (float)(i % 2 ? i : -i);
	gb_input(gb, desc(DJINN_DTYPE_F32, 3, 1ull, 4ull, 6ull));
	r = gb_node(gb, DJINN_GOP_RESHAPE, 1, 0, 0, 0); /* (4, 6): a view */
	last(gb)->params.shape = (struct djinn_p_shape){ 2, { 4, 6 } };
	s1 = gb_slice(gb, r, 0, 1, 3); /* rows 1, 2: a view, and an output */
	s2 = gb_slice(gb, r, 1, 2, 5); /* columns 2..4: strided, a copy */
	s3 = gb_slice(gb, 0, 1, -1, 4); /* (1, 1, 6), row 3: a view */
	gb_output(gb, gb_node(gb, DJINN_GOP_RELU, 1, s1, 0, 0));
	gb_output(gb, gb_node(gb, DJINN_GOP_RELU, 1, s2, 0, 0));
	gb_output(gb, gb_node(gb, DJINN_GOP_RELU, 1, s3, 0, 0));
	gb_output(gb, s1);
	gb_finish(gb);
	tx = put_f32(f, gb->in[0], x);
	if (graph_run(f->v, f->st, f->b, f->s, &gb->view, &tx.t, gb->out, &res,
		      msg, sizeof(msg)))
		fail_msg("exec: %s", msg);

	assert_int_equal(vmu_region_read(f->s, res.regions[0], 0, got,
					 12 * sizeof(float)),
			 0);
	for (int i = 0; i < 12; i++)
		assert_true(got[i] == (x[6 + i] > 0 ? x[6 + i] : 0));
	assert_int_equal(vmu_region_read(f->s, res.regions[1], 0, got,
					 12 * sizeof(float)),
			 0);
	for (int i = 0; i < 12; i++) { /* (4, 3): columns 2..4 */
		float want = x[i / 3 * 6 + 2 + i % 3];

		assert_true(got[i] == (want > 0 ? want : 0));
	}
	assert_int_equal(vmu_region_read(f->s, res.regions[2], 0, got,
					 6 * sizeof(float)),
			 0);
	for (int i = 0; i < 6; i++)
		assert_true(got[i] == (x[18 + i] > 0 ? x[18 + i] : 0));
	assert_int_equal(vmu_region_read(f->s, res.regions[3], 0, got,
					 12 * sizeof(float)),
			 0);
	assert_memory_equal(got, x + 6, 12 * sizeof(float));

	/* Only the strided slice took stack. */
	vmu_get_stats(f->v, &st);
	assert_int_equal(st.stack_last_peak,
			 (12 * 4 + GRAPH_ALIGN - 1) &
				 ~(uint64_t)(GRAPH_ALIGN - 1));
	for (int k = 0; k < 4; k++)
		assert_int_equal(vmu_region_destroy(f->s, res.regions[k]), 0);
	drop(f, &tx);
	free(gb);
}

/* ---------------------------------------------------------------------- */
/* Draining the device before release */

/*
 * struct lazy - the CPU backend behind a queue, as a GPU's stream is:
 * run_node() checks a node and enqueues it, and sync() runs what is
 * queued. At sync() it records the graph's memory as it then is, so a
 * test sees whether exec released anything before it waited; if it
 * had, the queued nodes are dropped instead of run on freed memory.
 * @fail_op: run_node() refuses nodes of that op at enqueue (a cuBLAS or
 * launch error); a KERNEL node is refused at enqueue as the CUDA
 * backend refuses one naming a function its module lacks; @sync_err:
 * what sync() returns (a device fault).
 */
struct lazy {
	struct backend base;
	struct backend *cpu;
	struct exec_fix *f;
	struct {
		struct djinn_node node;
		struct dj_tensor in[DJINN_MAX_NODE_INPUTS], out;
	} q[16];
	unsigned int queued, ran, syncs;
	/* copies out, queued as a GPU's are, done at sync() */
	struct {
		void *dst;
		uint64_t src, len;
		unsigned int after; /* nodes queued before it */
	} out[4];
	unsigned int nr_out, copied_in;
	unsigned int fail_op;
	int sync_err;
	/* what the graph holds while it runs, and what sync() saw */
	uint64_t want_regions, want_stack;
	uint64_t seen_regions, seen_stack;
	bool freed_early;
};

static struct lazy *to_lazy(struct backend *b)
{
	return container_of(b, struct lazy, base);
}

static int lazy_run_node(struct backend *b, const struct djinn_node *node,
			 const struct dj_tensor *in,
			 const struct dj_tensor *out, char *msg, size_t msglen)
{
	struct lazy *lz = to_lazy(b);
	int ret = dj_node_check(node, in, out, msg, msglen);

	if (ret)
		return ret;
	if (node->op == lz->fail_op)
		return errmsg(msg, msglen, -EIO, "launch failed");
	assert_true(lz->queued < ARRAY_SIZE(lz->q));
	lz->q[lz->queued].node = *node;
	memcpy(lz->q[lz->queued].in, in, node->nr_inputs * sizeof(*in));
	lz->q[lz->queued].out = *out;
	lz->queued++;
	return 0;
}

static int lazy_run_kernel(struct backend *b, const struct djinn_node *node,
			   const uint8_t *fp, const struct dj_tensor *in,
			   const struct dj_tensor *out, char *msg,
			   size_t msglen)
{
	return errmsg(msg, msglen, -ENOENT, "no kernel %#llx in the module",
		      (unsigned long long)node->params.kernel.name_hash);
}

static int lazy_sync(struct backend *b)
{
	struct lazy *lz = to_lazy(b);
	struct vmu_usage u;
	char msg[256];
	int ret = 0;

	lz->syncs++;
	if (lz->queued) {
		vmu_session_usage(lz->f->s, &u);
		lz->seen_regions = u.regions;
		lz->seen_stack = vmu_stack_used(lz->f->st);
		lz->freed_early = u.regions < lz->want_regions ||
				  lz->seen_stack < lz->want_stack;
	}
	for (unsigned int i = 0; i < lz->queued && !lz->freed_early; i++) {
		ret = lz->cpu->ops->run_node(lz->cpu, &lz->q[i].node,
					     lz->q[i].in, &lz->q[i].out, msg,
					     sizeof(msg));
		if (ret)
			fail_msg("queued node %u: %s", i, msg);
		lz->ran++;
	}
	for (unsigned int i = 0; i < lz->nr_out && !lz->freed_early; i++)
		memcpy(lz->out[i].dst, (void *)(uintptr_t)lz->out[i].src,
		       lz->out[i].len);
	lz->queued = 0;
	return lz->sync_err;
}

/* Before any node is queued: as a stream orders it, at once here. */
static int lazy_copy_in(struct backend *b, uint64_t dst, const void *src,
			uint64_t len, char *msg, size_t msglen)
{
	struct lazy *lz = to_lazy(b);

	assert_int_equal(lz->queued, 0);
	lz->copied_in++;
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

static int lazy_copy_out(struct backend *b, void *dst, uint64_t src,
			 uint64_t len, char *msg, size_t msglen)
{
	struct lazy *lz = to_lazy(b);

	assert_true(lz->nr_out < ARRAY_SIZE(lz->out));
	lz->out[lz->nr_out].dst = dst;
	lz->out[lz->nr_out].src = src;
	lz->out[lz->nr_out].len = len;
	lz->out[lz->nr_out].after = lz->queued;
	lz->nr_out++;
	return 0;
}

static void lazy_destroy(struct backend *b)
{
}

static const struct backend_ops lazy_ops = {
	.run_node = lazy_run_node,
	.run_kernel = lazy_run_kernel,
	.copy_in = lazy_copy_in,
	.copy_out = lazy_copy_out,
	.sync = lazy_sync,
	.destroy = lazy_destroy,
};

static void lazy_init(struct lazy *lz, struct exec_fix *f)
{
	memset(lz, 0, sizeof(*lz));
	lz->base = *f->b;
	lz->base.ops = &lazy_ops;
	lz->base.name = "lazy";
	lz->cpu = f->b;
	lz->f = f;
	lz->fail_op = UINT32_MAX;
}

/*
 * x -> relu (on the stack) -> add x (an output) -> a last node that
 * fails at enqueue (a KERNEL node naming a function its module lacks,
 * or an op whose launch fails) or succeeds (softmax, an output); the
 * module is input 0, x input 1. Returns the graph, inferred.
 */
static struct gb *lazy_graph(bool kernel)
{
	struct gb *gb = calloc(1, sizeof(*gb));
	static const bool module[2] = { true, false };
	uint32_t r, a, last;

	assert_non_null(gb);
	gb_input(gb, desc(DJINN_DTYPE_U8, 1, 64ull));
	gb_input(gb, desc(DJINN_DTYPE_F32, 2, 2ull, 3ull));
	r = gb_node(gb, DJINN_GOP_RELU, 1, 1, 0, 0);
	a = gb_node(gb, DJINN_GOP_ADD, 2, r, 1, 0);
	if (kernel) {
		last = gb_node(gb, DJINN_GOP_KERNEL, 2, 0, a, 0);
		gb->nodes[gb->g.nr_nodes - 1].params.kernel =
			(struct djinn_p_kernel){
				.grid = { 1, 1, 1 },
				.block = { 32, 1, 1 },
				.out_like = 1,
				.name_hash = 0x42,
			};
	} else {
		last = gb_node(gb, DJINN_GOP_SOFTMAX, 1, a, 0, 0);
	}
	gb_output(gb, a);
	gb_output(gb, last);
	gb->module = module;
	gb_finish(gb);
	return gb;
}

/*
 * A node that fails after others were enqueued: exec waits for the
 * device (sync()) before it destroys the outputs, resets the stack or
 * returns, so the earlier nodes ran on memory still theirs. The same
 * when every node went in and the device then failed, and when nothing
 * failed (the results are right only if exec waited before they were
 * read).
 */
static void test_failed_node_syncs_first(void **state)
{
	struct exec_fix *f = *state;
	const float x[6] = { -1, 2, -3, 4, -5, 6 };
	uint8_t image[64] = { 0 }, fp[DJINN_FP_LEN] = { 0x5a };
	const uint8_t *fps[2] = { fp, NULL };
	static const struct {
		bool kernel;
		unsigned int fail_op;
		int sync_err, want;
		const char *msg;
	} cases[] = {
		{ true, UINT32_MAX, 0, -ENOENT,
		  "node 2 (kernel): no kernel 0x42 in the module" },
		{ false, DJINN_GOP_SOFTMAX, 0, -EIO,
		  "node 2 (softmax): launch failed" },
		{ false, UINT32_MAX, -EIO, -EIO,
		  "waiting for the device: Input/output error" },
		{ false, UINT32_MAX, 0, 0, NULL },
	};

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		struct gb *gb = lazy_graph(cases[c].kernel);
		struct tensor tm = put_f32(f, gb->in[0], (const float *)image);
		struct tensor tx = put_f32(f, gb->in[1], x);
		struct dj_tensor in[2] = { tm.t, tx.t };
		struct graph_result res;
		struct vmu_usage u0;
		struct lazy lz;
		char msg[256] = "";
		int ret;

		lazy_init(&lz, f);
		lz.fail_op = cases[c].fail_op;
		lz.sync_err = cases[c].sync_err;
		u0 = usage(f);
		/* while it runs: the inputs, two outputs, the relu's slot */
		lz.want_regions = u0.regions + 2;
		lz.want_stack = GRAPH_ALIGN;
		ret = graph_run_kernels(f->v, f->st, &lz.base, f->s, &gb->view,
					in, fps, gb->out, &res, msg,
					sizeof(msg));
		assert_int_equal(ret, cases[c].want);
		if (ret)
			assert_string_equal(msg, cases[c].msg);
		/* waited once, with both earlier nodes queued, and nothing of
		 * the graph released before */
		assert_int_equal(lz.syncs, 1);
		assert_int_equal(lz.queued, 0);
		assert_int_equal(lz.ran,
				 cases[c].fail_op == DJINN_GOP_SOFTMAX ||
						 cases[c].kernel ?
					 2 :
					 3);
		assert_false(lz.freed_early);
		assert_int_equal(lz.seen_regions, u0.regions + 2);
		assert_int_equal(lz.seen_stack, GRAPH_ALIGN);
		/* and after: nothing left, or the right results */
		assert_int_equal(vmu_stack_used(f->st), 0);
		if (ret) {
			assert_int_equal(usage(f).regions, u0.regions);
			assert_int_equal(usage(f).data_bytes, u0.data_bytes);
		} else {
			float got[6], y[6];

			assert_int_equal(vmu_region_read(f->s, res.regions[0],
							 0, got, sizeof(got)),
					 0);
			for (int i = 0; i < 6; i++)
				y[i] = (x[i] > 0 ? x[i] : 0) + x[i];
			assert_memory_equal(got, y, sizeof(y));
			assert_int_equal(
				vmu_region_destroy(f->s, res.regions[0]), 0);
			assert_int_equal(
				vmu_region_destroy(f->s, res.regions[1]), 0);
		}
		drop(f, &tm);
		drop(f, &tx);
		free(gb);
	}
}

/*
 * One wait a graph: an input staged from host memory goes in before the
 * first node, and an output placed in host memory is queued after the
 * last and there once the one sync() has returned, not read back after
 * it (the device's copies in the stream's order).
 */
static void test_host_copies_wait_once(void **state)
{
	struct exec_fix *f = *state;
	const float x[6] = { -1, 2, -3, 4, -5, 6 };
	float host[6], got[6];
	struct graph_place place[2] = { { .host = host }, { 0 } };
	struct dj_tensor in = { .host = x };
	struct vmu_session *owners[2] = { f->s, f->s };
	struct graph_result res;
	struct lazy lz;
	char msg[256] = "";
	struct gb *gb = calloc(1, sizeof(*gb));
	uint32_t r, a;

	gb_input(gb, desc(DJINN_DTYPE_F32, 2, 2ull, 3ull));
	r = gb_node(gb, DJINN_GOP_RELU, 1, 0, 0, 0);
	a = gb_node(gb, DJINN_GOP_ADD, 2, r, 0, 0);
	gb_output(gb, a);
	gb_output(gb, r);
	gb_finish(gb);
	in.desc = gb->in[0];
	lazy_init(&lz, f);
	memset(host, 0xff, sizeof(host));
	if (graph_run_owned(f->v, f->st, &lz.base, owners, &gb->view, &in,
			    place, gb->out, NULL, &res, msg, sizeof(msg)))
		fail_msg("exec: %s", msg);
	assert_int_equal(lz.syncs, 1);
	assert_int_equal(lz.copied_in, 1);
	assert_int_equal(lz.nr_out, 1);
	assert_int_equal(lz.out[0].after, 2); /* after both nodes */
	assert_int_equal(res.regions[0], 0); /* no region for it */
	for (int i = 0; i < 6; i++)
		assert_true(host[i] == (x[i] > 0 ? x[i] : 0) + x[i]);
	assert_int_equal(
		vmu_region_read(f->s, res.regions[1], 0, got, sizeof(got)), 0);
	for (int i = 0; i < 6; i++)
		assert_true(got[i] == (x[i] > 0 ? x[i] : 0));
	assert_int_equal(vmu_region_destroy(f->s, res.regions[1]), 0);
	assert_int_equal(vmu_stack_used(f->st), 0);
	free(gb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_mlp_two_outputs, setup,
						exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_refused_by_admission,
						setup_small, exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_failed_node_leaves_nothing,
						setup, exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_failed_node_syncs_first,
						setup, exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_views, setup,
						exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_no_intermediates, setup,
						exec_fix_teardown),
		cmocka_unit_test_setup_teardown(test_host_copies_wait_once,
						setup, exec_fix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
