// SPDX-License-Identifier: MIT
/*
 * Copies overlap compute: a copy on the thread's copy stream runs while
 * a kernel runs on its compute stream, seen in event timestamps.
 *
 * The kernel (the client module's spin) runs for four times as long as
 * the copy of 256 MiB from pinned memory takes alone, measured first; the
 * copy is queued after the kernel started. The test checks the order of
 * the four timestamps, not a speed: the copy must begin and end inside
 * the kernel's interval. Run serially, it would begin after the kernel
 * ended.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clock.h"
#include "backend/cuda/cuda_test.h"
#include "gpu.h"

#define COPY (256ull << 20)

static struct gpu G;
static struct cuda_module *M;

static float since(struct cuda_stamp *a, struct cuda_stamp *z)
{
	float ms = 0;

	assert_int_equal(cuda_stamp_elapsed(G.b, a, z, &ms), 0);
	return ms;
}

static void test_overlap(void **state)
{
	struct vmu_provider *p = G.b->provider;
	uint32_t one[3] = { 1, 1, 1 };
	struct cuda_stamp *s0, *s1, *k0, *k1, *c0, *c1;
	uint64_t dst, tick, spin_ns;
	struct dj_tensor t;
	float copy_ms, k_end, c_start, c_end;
	char msg[256] = "";
	void *host;

	gpu_reset(&G);
	dst = gpu_alloc(&G, COPY);
	tick = gpu_alloc(&G, 8);
	assert_int_equal(p->ops->host_alloc(p, COPY, &host), 0);
	memset(host, 1, COPY);

	/* the copy alone */
	assert_int_equal(cuda_stamp_record(G.b, true, &s0), 0);
	assert_int_equal(cuda_copy_htod_async(G.b, dst, host, COPY), 0);
	assert_int_equal(cuda_stamp_record(G.b, true, &s1), 0);
	copy_ms = since(s0, s1);
	printf("# 256 MiB from pinned memory alone: %.2f ms\n",
	       (double)copy_ms);

	/* the kernel, then the copy beside it */
	spin_ns = (uint64_t)(copy_ms * 4e6) + 20 * NSEC_PER_MSEC;
	memset(&t, 0, sizeof(t));
	t.addr = tick;
	t.desc.dtype = DJINN_DTYPE_I64;
	t.desc.ndim = 1;
	t.desc.dims[0] = 1;
	gpu_put(&G, tick, &spin_ns, 8);
	assert_int_equal(cuda_stamp_record(G.b, false, &k0), 0);
	if (cuda_kernel_run(G.b, M, "spin", one, one, 0, &t, 1, msg,
			    sizeof(msg)))
		fail_msg("spin: %s", msg);
	assert_int_equal(cuda_stamp_record(G.b, false, &k1), 0);
	assert_int_equal(cuda_stamp_record(G.b, true, &c0), 0);
	assert_int_equal(cuda_copy_htod_async(G.b, dst, host, COPY), 0);
	assert_int_equal(cuda_stamp_record(G.b, true, &c1), 0);
	assert_int_equal(cuda_copy_wait(G.b), 0);
	assert_int_equal(G.b->ops->sync(G.b), 0);

	k_end = since(k0, k1);
	c_start = since(k0, c0);
	c_end = since(k0, c1);
	printf("# kernel 0 .. %.2f ms, copy %.2f .. %.2f ms\n", (double)k_end,
	       (double)c_start, (double)c_end);
	assert_true(c_start < k_end);
	assert_true(c_end < k_end);

	cuda_stamp_free(G.b, s0);
	cuda_stamp_free(G.b, s1);
	cuda_stamp_free(G.b, k0);
	cuda_stamp_free(G.b, k1);
	cuda_stamp_free(G.b, c0);
	cuda_stamp_free(G.b, c1);
	p->ops->host_free(p, host, COPY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_overlap),
	};
	char msg[256] = "";
	int ret;

	gpu_open(&G, COPY + (2ull << 20), false);
	if (cuda_module_load(G.b, gpu_test_ptx, strlen(gpu_test_ptx) + 1, &M,
			     msg, sizeof(msg))) {
		fprintf(stderr, "the test module: %s\n", msg);
		return 1;
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	cuda_module_unload(G.b, M);
	gpu_close(&G);
	return ret;
}
