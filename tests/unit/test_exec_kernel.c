// SPDX-License-Identifier: MIT
/*
 * The executor's dispatch of KERNEL nodes (djinnd/exec/exec.c) on the
 * CPU backend, which has no client kernels: a graph whose KERNEL node
 * passed inference (its module flagged as one) fails when it reaches the
 * node with -EOPNOTSUPP naming the backend, after the nodes before it
 * ran, and leaves nothing behind: the outputs made for it and the stack
 * are gone. The GPU side is tests/gpu/test_cuda_wire.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "graph/run.h"
#include "exec_fix.h"

#define NO_KERNELS "client kernels need a CUDA device; this djinnd runs on cpu"

static int setup(void **state)
{
	return exec_fix_setup(state, 64 * MiB);
}

/* A pinned region of @bytes holding @data. */
static struct dj_tensor put(struct exec_fix *f, struct djinn_tensor_desc d,
			    const void *data, uint64_t *region)
{
	struct vmu_region_info info;
	struct dj_tensor t = { .desc = d };
	uint64_t bytes;

	assert_int_equal(djinn_desc_check(&d, NULL, &bytes), 0);
	assert_int_equal(vmu_region_create(f->s, bytes, region), 0);
	assert_int_equal(vmu_region_resize(f->s, *region, bytes, NULL), 0);
	assert_int_equal(vmu_region_write(f->s, *region, 0, data, bytes), 0);
	assert_int_equal(vmu_region_pin(f->s, *region, NULL, &info), 0);
	t.addr = info.addr;
	return t;
}

static void test_kernel_on_cpu(void **state)
{
	struct exec_fix *f = *state;
	struct {
		struct djinn_graph g;
		struct djinn_ref in[2];
		struct djinn_node n[2];
		uint32_t out[2];
	} p = {
		.g = { .nr_inputs = 2, .nr_nodes = 2, .nr_outputs = 2 },
		/* relu(x), then a kernel on it: both kept */
		.n = { { .op = DJINN_GOP_RELU, .nr_inputs = 1, .inputs = { 1 } },
		       { .op = DJINN_GOP_KERNEL,
			 .nr_inputs = 2,
			 .inputs = { 0, 2 } } },
		.out = { 1, 0 },
	};
	struct djinn_tensor_desc in[2] = {
		{ .dtype = DJINN_DTYPE_U8, .ndim = 1, .dims = { 64 } },
		{ .dtype = DJINN_DTYPE_F32, .ndim = 1, .dims = { 16 } },
	}, out[2];
	static const bool module[2] = { true, false };
	uint8_t fp[DJINN_FP_LEN] = { 0x5a }, image[64] = { 0 };
	const uint8_t *fps[2] = { fp, NULL };
	float x[16] = { -1, 2, -3, 4 };
	struct djinn_graph_view view;
	struct dj_tensor t[2];
	struct vmu_usage u0, u1;
	struct graph_result res;
	uint64_t region[2];
	char msg[256] = "";

	p.n[1].params.kernel = (struct djinn_p_kernel){
		.grid = { 1, 1, 1 },
		.block = { 16, 1, 1 },
		.out_like = 1,
		.name_hash = 0x42,
	};
	assert_int_equal(
		djinn_graph_parse(&p, sizeof(p), &view, msg, sizeof(msg)), 0);
	if (djinn_graph_infer_modules(&view, in, module, out, msg, sizeof(msg)))
		fail_msg("infer: %s", msg);
	t[0] = put(f, in[0], image, &region[0]);
	t[1] = put(f, in[1], x, &region[1]);
	vmu_session_usage(f->s, &u0);

	/* with the module's fingerprint, and without: the backend decides */
	assert_int_equal(graph_run_kernels(f->v, f->st, f->b, f->s, &view, t,
					   fps, out, &res, msg, sizeof(msg)),
			 -EOPNOTSUPP);
	assert_string_equal(msg, "node 1 (kernel): " NO_KERNELS);
	vmu_session_usage(f->s, &u1);
	assert_int_equal(u1.regions, u0.regions);
	assert_int_equal(u1.data_bytes, u0.data_bytes);
	assert_int_equal(vmu_stack_used(f->st), 0);

	msg[0] = 0;
	assert_int_equal(graph_run(f->v, f->st, f->b, f->s, &view, t, out, &res,
				   msg, sizeof(msg)),
			 -EOPNOTSUPP);
	assert_string_equal(msg, "node 1 (kernel): " NO_KERNELS);
	vmu_session_usage(f->s, &u1);
	assert_int_equal(u1.regions, u0.regions);

	/* the same graph without the kernel runs */
	p.g.nr_nodes = 1;
	p.g.nr_outputs = 1;
	{
		struct {
			struct djinn_graph g;
			struct djinn_ref in[2];
			struct djinn_node n[1];
			uint32_t out[2];
		} q = { .g = p.g, .n = { p.n[0] } };
		float y[16];

		assert_int_equal(djinn_graph_parse(&q, sizeof(q), &view, msg,
						   sizeof(msg)),
				 0);
		assert_int_equal(
			djinn_graph_infer(&view, in, out, msg, sizeof(msg)), 0);
		if (graph_run(f->v, f->st, f->b, f->s, &view, t, out, &res, msg,
			      sizeof(msg)))
			fail_msg("relu: %s", msg);
		assert_int_equal(vmu_region_read(f->s, res.regions[0], 0, y,
						 sizeof(y)),
				 0);
		assert_true(y[0] == 0 && y[1] == 2 && y[2] == 0 && y[3] == 4);
		assert_int_equal(vmu_region_destroy(f->s, res.regions[0]), 0);
	}
	for (int k = 0; k < 2; k++) {
		assert_int_equal(vmu_region_unpin(f->s, region[k]), 0);
		assert_int_equal(vmu_region_destroy(f->s, region[k]), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kernel_on_cpu, setup,
						exec_fix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
