// SPDX-License-Identifier: MIT
/*
 * The VMU on the CUDA provider: regions swapped out to pinned host
 * memory and restored keep their device address and every byte, and a
 * kernel run on a restored region sees those bytes there. The VMU is the
 * real one (djinnd/vmu/vmu.c), over the backend's provider, as djinnd
 * makes it.
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

#include "gpu.h"
#include "vmu/vmu.h"

static struct gpu G;
static struct vmu *V;
static struct vmu_session *S;

static void pattern(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* A region of @size bytes holding pattern(@seed); its address. */
static uint64_t region(uint64_t size, uint64_t seed, uint64_t *handle)
{
	struct vmu_region_info info;
	uint8_t *buf = malloc(size);

	assert_non_null(buf);
	pattern(buf, size, seed);
	assert_int_equal(vmu_region_create(S, size, handle), 0);
	assert_int_equal(vmu_region_resize(S, *handle, size, NULL), 0);
	assert_int_equal(vmu_region_write(S, *handle, 0, buf, size), 0);
	assert_int_equal(vmu_region_info(S, *handle, &info), 0);
	free(buf);
	return info.addr;
}

static void check(uint64_t handle, uint64_t size, uint64_t seed)
{
	uint8_t *want = malloc(size), *got = malloc(size);

	assert_non_null(want);
	assert_non_null(got);
	pattern(want, size, seed);
	assert_int_equal(vmu_region_read(S, handle, 0, got, size), 0);
	assert_memory_equal(got, want, size);
	free(want);
	free(got);
}

static void test_swap_restore(void **state)
{
	static const uint64_t sizes[] = { 4096, (64ull << 20) + 12345,
					  300ull << 20 };

	for (unsigned int i = 0; i < 3; i++) {
		struct vmu_region_info info;
		uint64_t h, addr = region(sizes[i], i + 1, &h);

		assert_int_equal(vmu_region_swap_out(S, h), 0);
		assert_int_equal(vmu_region_info(S, h, &info), 0);
		assert_int_equal(info.state, VMU_REGION_SWAPPED);
		assert_int_equal(info.addr, addr);
		assert_int_equal(vmu_region_swap_in(S, h, NULL), 0);
		assert_int_equal(vmu_region_info(S, h, &info), 0);
		assert_int_equal(info.state, VMU_REGION_RESIDENT);
		assert_int_equal(info.addr, addr);
		check(h, sizes[i], i + 1);
		assert_int_equal(vmu_region_destroy(S, h), 0);
	}
}

/* While A is out, B takes the device memory A had and is written; A comes
 * back with its own bytes at its own address, B keeps its. */
static void test_swap_reuse(void **state)
{
	uint64_t size = 96ull << 20, a, b, addr_a;
	struct vmu_region_info info;

	addr_a = region(size, 11, &a);
	assert_int_equal(vmu_region_swap_out(S, a), 0);
	region(size, 12, &b);
	assert_int_equal(vmu_region_pin(S, a, NULL, &info), 0);
	assert_int_equal(info.addr, addr_a);
	assert_int_equal(vmu_region_unpin(S, a), 0);
	check(a, size, 11);
	check(b, size, 12);
	assert_int_equal(vmu_session_swap_out(S), 2);
	check(b, size, 12); /* read brings it back */
	check(a, size, 11);
	assert_int_equal(vmu_region_destroy(S, a), 0);
	assert_int_equal(vmu_region_destroy(S, b), 0);
}

/* A kernel on a restored region reads the restored bytes at its address:
 * SCALE by 2 of f32 1..n into another region. */
static void test_kernel_after_restore(void **state)
{
	uint64_t n = 3u << 20, bytes = n * 4, x, y;
	struct vmu_region_info ix, iy;
	struct djinn_node node;
	struct dj_tensor in, out;
	float *buf = malloc(bytes);
	char msg[256];

	assert_non_null(buf);
	for (uint64_t i = 0; i < n; i++)
		buf[i] = (float)i;
	assert_int_equal(vmu_region_create(S, bytes, &x), 0);
	assert_int_equal(vmu_region_resize(S, x, bytes, NULL), 0);
	assert_int_equal(vmu_region_write(S, x, 0, buf, bytes), 0);
	assert_int_equal(vmu_region_create(S, bytes, &y), 0);
	assert_int_equal(vmu_region_resize(S, y, bytes, NULL), 0);
	assert_int_equal(vmu_region_swap_out(S, x), 0);
	assert_int_equal(vmu_region_pin(S, x, NULL, &ix), 0);
	assert_int_equal(vmu_region_pin(S, y, NULL, &iy), 0);

	memset(&node, 0, sizeof(node));
	node.op = DJINN_GOP_SCALE;
	node.nr_inputs = 1;
	node.params.scalar.alpha = 2.0f;
	memset(&in, 0, sizeof(in));
	in.addr = ix.addr;
	in.desc.dtype = DJINN_DTYPE_F32;
	in.desc.ndim = 1;
	in.desc.dims[0] = n;
	out = in;
	out.addr = iy.addr;
	assert_int_equal(
		G.b->ops->run_node(G.b, &node, &in, &out, msg, sizeof(msg)), 0);
	assert_int_equal(G.b->ops->sync(G.b), 0);
	assert_int_equal(vmu_region_unpin(S, x), 0);
	assert_int_equal(vmu_region_unpin(S, y), 0);
	assert_int_equal(vmu_region_read(S, y, 0, buf, bytes), 0);
	for (uint64_t i = 0; i < n; i++)
		if (buf[i] != 2.0f * (float)i)
			fail_msg("element %llu: %g, not %g",
				 (unsigned long long)i, (double)buf[i],
				 2.0 * (double)i);
	assert_int_equal(vmu_region_destroy(S, x), 0);
	assert_int_equal(vmu_region_destroy(S, y), 0);
	free(buf);
}

/* Text: read-only on the device once committed, deduplicated. */
static void test_text(void **state)
{
	uint64_t size = 5ull << 20;
	uint8_t *buf = malloc(size), *got = malloc(size);
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text *t, *t2;
	bool created = false;

	assert_non_null(buf);
	assert_non_null(got);
	pattern(buf, size, 99);
	vmu_fingerprint(buf, size, fp);
	assert_int_equal(vmu_text_insert(S, buf, size, &t, &created), 0);
	assert_true(created);
	gpu_get(&G, got, vmu_text_addr(t), size);
	assert_memory_equal(got, buf, size);
	assert_int_equal(vmu_text_lookup(S, fp, &t2), 0);
	assert_ptr_equal(t, t2);
	assert_int_equal(vmu_text_put(S, t2), 0);
	assert_int_equal(vmu_text_put(S, t), 0);
	free(buf);
	free(got);
}

static int setup(void **state)
{
	struct vmu_config cfg = { .swap_limit = 2ull << 30 };

	assert_int_equal(vmu_create(G.b->provider, &cfg, &V), 0);
	assert_int_equal(vmu_session_create(V, "gpu", &S), 0);
	return 0;
}

static int teardown(void **state)
{
	vmu_session_destroy(S);
	vmu_destroy(V);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_swap_restore),
		cmocka_unit_test(test_swap_reuse),
		cmocka_unit_test(test_kernel_after_restore),
		cmocka_unit_test(test_text),
	};
	int ret;

	gpu_open(&G, 2ull << 20, false);
	ret = cmocka_run_group_tests(tests, setup, teardown);
	gpu_close(&G);
	return ret;
}
