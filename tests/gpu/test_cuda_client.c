// SPDX-License-Identifier: MIT
/*
 * Client kernels and faults.
 *
 * A client's PTX module (gpu_test_ptx) is loaded and its add_one kernel
 * run on a tensor; bad modules, unknown kernels and bad arguments are
 * refused before anything is launched; a module ptxas rejects is refused
 * with the JIT's own words, its line number among them, on one line. A
 * download queued on the copy stream right behind a long kernel reads
 * what the kernels before it wrote. Then the module's fault kernel
 * stores to address 0: the context is poisoned, the backend reports the
 * fault (-EIO naming it, backend.faults counts it), recovers on its own
 * and keeps serving: the arena is mapped again at the same address, the
 * built-in kernels and the client's module work again, and a pinned host
 * buffer made before the fault kept its bytes. Where the driver keeps the
 * error after the context reset (CUDA says the process must then be
 * restarted), the device says instead that it is dead, and every call
 * fails -EIO.
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

static struct gpu G;
static struct cuda_module *M;

static const uint32_t one[3] = { 1, 1, 1 };

static struct dj_tensor f32_tensor(uint64_t addr, uint64_t n)
{
	struct dj_tensor t;

	memset(&t, 0, sizeof(t));
	t.addr = addr;
	t.desc.dtype = DJINN_DTYPE_F32;
	t.desc.ndim = 1;
	t.desc.dims[0] = n;
	return t;
}

static struct dj_tensor i64_tensor(uint64_t addr, uint64_t n)
{
	struct dj_tensor t = f32_tensor(addr, n);

	t.desc.dtype = DJINN_DTYPE_I64;
	return t;
}

/* add_one over @n floats at @addr holding 0..n-1; checks i + 1. */
static void add_one(uint64_t addr, uint64_t n)
{
	float *buf = malloc(n * 4);
	uint32_t grid[3] = { (uint32_t)((n + 255) / 256), 1, 1 };
	uint32_t block[3] = { 256, 1, 1 };
	struct dj_tensor t = f32_tensor(addr, n);
	char msg[256] = "";

	assert_non_null(buf);
	for (uint64_t i = 0; i < n; i++)
		buf[i] = (float)i;
	gpu_put(&G, addr, buf, n * 4);
	if (cuda_kernel_run(G.b, M, "add_one", grid, block, 0, &t, 1, msg,
			    sizeof(msg)))
		fail_msg("add_one: %s", msg);
	assert_int_equal(G.b->ops->sync(G.b), 0);
	gpu_get(&G, buf, addr, n * 4);
	for (uint64_t i = 0; i < n; i++)
		if (buf[i] != (float)i + 1.0f)
			fail_msg("element %llu: %g", (unsigned long long)i,
				 (double)buf[i]);
	free(buf);
}

static void test_client_kernel(void **state)
{
	gpu_reset(&G);
	add_one(gpu_alloc(&G, 1000003 * 4), 1000003);
}

static void test_refusals(void **state)
{
	static const char bad_ptx[] = ".version 7.0\n.target sm_80\n"
				      ".address_size 64\n.visible .entry x(\n";
	uint32_t block[3] = { 256, 1, 1 }, big[3] = { 2048, 1, 1 };
	struct dj_tensor t = f32_tensor(gpu_alloc(&G, 4096), 1024);
	struct dj_tensor two[2] = { t, t };
	struct cuda_module *m = NULL;
	char msg[256] = "";

	assert_int_equal(cuda_module_load(G.b, bad_ptx, sizeof(bad_ptx), &m,
					  msg, sizeof(msg)),
			 -EINVAL);
	printf("# bad module: %s\n", msg);
	assert_int_equal(cuda_kernel_run(G.b, M, "no_such", one, block, 0, &t,
					 1, msg, sizeof(msg)),
			 -ENOENT);
	assert_int_equal(cuda_kernel_run(G.b, M, "add_one", one, big, 0, &t, 1,
					 msg, sizeof(msg)),
			 -EINVAL);
	assert_int_equal(cuda_kernel_run(G.b, M, "add_one", one, block,
					 64 * 1024, &t, 1, msg, sizeof(msg)),
			 -EINVAL);
	t.addr += 2; /* not aligned to its f32 elements */
	assert_int_equal(cuda_kernel_run(G.b, M, "add_one", one, block, 0, &t,
					 1, msg, sizeof(msg)),
			 -EINVAL);
	/* two tensors for a kernel that takes one, where the driver can
	 * tell (cuFuncGetParamInfo, CUDA 12.4) */
	if (cuda_kernel_run(G.b, M, "add_one", one, block, 0, two, 2, msg,
			    sizeof(msg)) == -EINVAL)
		printf("# parameters checked: %s\n", msg);
	else
		printf("# this driver cannot list a kernel's parameters\n");
	assert_int_equal(G.b->ops->sync(G.b), 0);
}

/*
 * A module ptxas refuses: -EINVAL, and the message carries the JIT's
 * error log (cuModuleLoadDataEx's CU_JIT_ERROR_LOG_BUFFER), which names
 * the line ("ptxas application ptx input, line 9; error : Not a name of
 * any known instruction: 'frobnicate'"), folded onto one line.
 */
static void test_jit_log(void **state)
{
	struct cuda_module *m = NULL;
	char msg[DJINN_MAX_ERROR_MSG] = "";

	assert_int_equal(cuda_module_load(G.b, gpu_bad_op_ptx,
					  strlen(gpu_bad_op_ptx) + 1, &m, msg,
					  sizeof(msg)),
			 -EINVAL);
	assert_null(m);
	printf("# ptxas refuses: %s\n", msg);
	assert_non_null(strstr(msg, "does not load"));
	assert_non_null(strstr(msg, "ptxas"));
	assert_non_null(strstr(msg, "line 9"));
	assert_null(strchr(msg, '\n'));
	assert_null(strchr(msg, '\r'));
	/* the device serves on */
	gpu_reset(&G);
	add_one(gpu_alloc(&G, 4096 * 4), 4096);
}

/*
 * A download on the copy stream, queued right behind kernels on the
 * compute stream, reads what they wrote: spin holds the compute stream
 * for 200 ms, add_one then turns x = i into i + 1, and the download of
 * x, queued at once, must see i + 1 and end after the spin. Were it not
 * ordered after the compute stream, it would run during the spin and
 * read i.
 */
static void test_download_after_compute(void **state)
{
	struct vmu_provider *p = G.b->provider;
	const uint64_t n = 1 << 20, spin_ns = 200 * NSEC_PER_MSEC;
	uint32_t grid[3] = { (uint32_t)(n / 256), 1, 1 };
	uint32_t block[3] = { 256, 1, 1 };
	struct dj_tensor x, t;
	uint64_t t0, waited, spun = 0;
	char msg[256] = "";
	float *host;

	gpu_reset(&G);
	x = f32_tensor(gpu_alloc(&G, n * 4), n);
	t = i64_tensor(gpu_alloc(&G, 8), 1);
	/* pinned, so that the download is truly asynchronous */
	assert_int_equal(p->ops->host_alloc(p, n * 4, (void **)&host), 0);
	for (uint64_t i = 0; i < n; i++)
		host[i] = (float)i;
	gpu_put(&G, x.addr, host, n * 4);
	gpu_put(&G, t.addr, &spin_ns, 8);
	for (uint64_t i = 0; i < n; i++)
		host[i] = -7.0f;

	t0 = mono_ns();
	if (cuda_kernel_run(G.b, M, "spin", one, one, 0, &t, 1, msg,
			    sizeof(msg)))
		fail_msg("spin: %s", msg);
	if (cuda_kernel_run(G.b, M, "add_one", grid, block, 0, &x, 1, msg,
			    sizeof(msg)))
		fail_msg("add_one: %s", msg);
	assert_int_equal(cuda_copy_dtoh_async(G.b, host, x.addr, n * 4), 0);
	assert_int_equal(cuda_copy_wait(G.b), 0);
	waited = mono_ns() - t0;
	printf("# the download ended %.1f ms after the spin was queued\n",
	       (double)waited / 1e6);
	for (uint64_t i = 0; i < n; i++)
		if (host[i] != (float)i + 1.0f)
			fail_msg("element %llu: %g, want %g (the download "
				 "ran before the kernels)",
				 (unsigned long long)i, (double)host[i],
				 (double)i + 1.0);
	/* (a tenth of slack for two clocks' rates; unordered, it is ~1 ms) */
	assert_true(waited >= spin_ns / 10 * 9);
	assert_int_equal(G.b->ops->sync(G.b), 0);
	gpu_get(&G, &spun, t.addr, 8);
	assert_true(spun >= spin_ns);
	p->ops->host_free(p, host, n * 4);
}

static void test_fault_recovery(void **state)
{
	struct vmu_provider *p = G.b->provider;
	uint64_t n = 1 << 20, addr, faults;
	struct dj_tensor t;
	uint8_t *host;
	char msg[256] = "";
	int ret;

	gpu_reset(&G);
	addr = gpu_alloc(&G, n * 4);
	t = f32_tensor(addr, n);
	assert_int_equal(p->ops->host_alloc(p, 1 << 20, (void **)&host), 0);
	memset(host, 0x5a, 1 << 20);
	faults = __atomic_load_n(&G.b->faults, __ATOMIC_ACQUIRE);

	/* the launch is queued; the fault shows at the sync */
	ret = cuda_kernel_run(G.b, M, "fault", one, one, 0, &t, 1, msg,
			      sizeof(msg));
	if (!ret)
		ret = G.b->ops->sync(G.b);
	assert_int_equal(ret, -EIO);
	assert_int_equal(__atomic_load_n(&G.b->faults, __ATOMIC_ACQUIRE),
			 faults + 1);
	/* the thread that saw it recovered on its way out */
	ret = cuda_backend_recover(G.b, msg, sizeof(msg));
	if (ret && __atomic_load_n(&G.b->dead, __ATOMIC_ACQUIRE)) {
		const char *dead =
			__atomic_load_n(&G.b->dead, __ATOMIC_ACQUIRE);

		/* The driver keeps the error after the reset (CUDA: the
		 * process must be restarted): the device says it is dead,
		 * for good, and every call fails at once. */
		assert_int_equal(ret, -EIO);
		assert_non_null(dead);
		assert_non_null(strstr(dead, "CUDA_ERROR_ILLEGAL_ADDRESS"));
		assert_int_equal(G.b->ops->sync(G.b), -EIO);
		assert_int_equal(cuda_backend_recover(G.b, msg, sizeof(msg)),
				 -EIO);
		p->ops->host_free(p, host, 1 << 20);
		printf("# the device did not survive the fault: %s; the dead "
		       "path is checked, recovery is not\n",
		       dead);
		return;
	}
	if (ret)
		fail_msg("recovery: %s", msg);

	/* device memory is back at the same address (its bytes are not) */
	add_one(addr, n);
	/* the built-in kernels are loaded again */
	{
		struct djinn_node node;
		struct dj_tensor out = f32_tensor(gpu_alloc(&G, n * 4), n);
		float v;

		memset(&node, 0, sizeof(node));
		node.op = DJINN_GOP_SCALE;
		node.nr_inputs = 1;
		node.params.scalar.alpha = 3.0f;
		assert_int_equal(G.b->ops->run_node(G.b, &node, &t, &out, msg,
						    sizeof(msg)),
				 0);
		assert_int_equal(G.b->ops->sync(G.b), 0);
		gpu_get(&G, &v, out.addr + 4 * 1000, 4);
		assert_true(v == 3.0f * 1001.0f);
	}
	/* pinned host memory kept its bytes and still copies */
	for (unsigned int i = 0; i < 1 << 20; i++)
		if (host[i] != 0x5a)
			fail_msg("host byte %u: %#x", i, host[i]);
	assert_int_equal(p->ops->copy_htod(p, addr, host, 1 << 20), 0);
	p->ops->host_free(p, host, 1 << 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_kernel),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_jit_log),
		cmocka_unit_test(test_download_after_compute),
		cmocka_unit_test(test_fault_recovery),
	};
	char msg[256] = "";
	int ret;

	gpu_open(&G, 64ull << 20, false);
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
