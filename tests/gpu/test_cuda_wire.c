// SPDX-License-Identifier: MIT
/*
 * Client kernels over the wire: djinnd --backend cuda (device.backend=
 * cuda) and libdjinn.
 *
 * The hand-written PTX module of the GPU tests (gpu_test_ptx) is
 * uploaded with djinn_module_upload() and its add_one_to kernel run as a
 * KERNEL node on a million floats, the result checked element by
 * element; a second upload of the same bytes is deduplicated (the text
 * segment gains nothing) and its handle runs the kernel too. Refused:
 * a module that does not load (-EINVAL with the JIT's words, leaving no
 * text behind; ptxas's line number in the one-line message), a kernel
 * the module lacks (-ENOENT when the graph runs),
 * a kernel called with more parameters than it takes (where the driver
 * lists them), a launch past the device's limits (-EINVAL at submit).
 * The session serves on after every refusal.
 *
 * Reads of the GPU's memory over 4 MiB go in parts of 4 MiB through two
 * pinned staging buffers (Documentation/cuda.rst): ranges starting and
 * ending inside parts, and on their edges, read back the bytes written.
 *
 * Exits 77, saying why, on a host without an NVIDIA driver and GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "backend/backend.h"
#include "../integration/daemon.h"

#define N 1000003 /* not a multiple of a block */

extern const char gpu_test_ptx[], gpu_bad_op_ptx[];

struct fx {
	struct djd d;
	struct djinn_conn *conn;
	struct djinn_session *s;
	int adm;
};

static struct fx F;

static struct djinn_admin_vmu vmu_now(void)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	if (dj_call(F.adm, DJINN_MSG_ADMIN_VMU, 0, NULL, 0, &r) != 1 ||
	    r.error || r.len != sizeof(v))
		fail_msg("ADMIN_VMU failed");
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

static struct djinn_kernel_launch launch_for(uint64_t n)
{
	struct djinn_kernel_launch l = {
		.grid = { (uint32_t)((n + 255) / 256), 1, 1 },
		.block = { 256, 1, 1 },
	};

	return l;
}

/*
 * Run @name of @mod on x (0 .. N-1) with @l: 0 with the result in @out
 * (N floats), or the request's errno with its message in @why.
 */
static int run(struct djinn_tensor *mod, struct djinn_tensor *x,
	       const char *name, const struct djinn_kernel_launch *l,
	       float *out, char *why, size_t whylen)
{
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	int args[1], v, ret;

	assert_int_equal(djinn_graph_new(F.s, &g), 0);
	args[0] = djinn_graph_input(g, x);
	v = djinn_op_kernel(g, djinn_graph_input(g, mod), name, args, 1, l);
	assert_true(djinn_graph_output(g, v) >= 0);
	ret = djinn_submit(g, &req);
	if (ret) {
		snprintf(why, whylen, "%s", djinn_graph_error(g));
		djinn_graph_free(g);
		return ret;
	}
	ret = djinn_wait(req, 30 * NSEC_PER_SEC);
	if (ret)
		snprintf(why, whylen, "%s", djinn_request_error(req));
	else
		ret = djinn_result_read(djinn_request_results(req, 0), 0,
					N * sizeof(float), out);
	djinn_request_free(req);
	djinn_graph_free(g);
	return ret;
}

static struct djinn_tensor *x_tensor(void)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { N } };
	float *x = malloc(N * sizeof(float));
	struct djinn_tensor *t;

	assert_non_null(x);
	for (uint64_t i = 0; i < N; i++)
		x[i] = (float)i;
	assert_int_equal(djinn_tensor_upload(F.s, &d, x, DJINN_SEG_DATA, &t),
			 0);
	free(x);
	return t;
}

static void expect_plus_one(const float *out)
{
	for (uint64_t i = 0; i < N; i++)
		if (out[i] != (float)i + 1.0f)
			fail_msg("element %llu: %g, want %g",
				 (unsigned long long)i, (double)out[i],
				 (double)i + 1.0);
}

static void test_upload_run_dedup(void **state)
{
	struct djinn_kernel_launch l = launch_for(N);
	size_t len = strlen(gpu_test_ptx);
	struct djinn_tensor *m1, *m2, *x = x_tensor();
	struct djinn_tensor_info i1, i2;
	struct djinn_admin_vmu v0, v1, v2;
	float *out = calloc(N, sizeof(float));
	char why[DJINN_MAX_ERROR_MSG + 1] = "";
	int ret;

	assert_non_null(out);
	v0 = vmu_now();
	if (djinn_module_upload(F.s, gpu_test_ptx, len, &m1))
		fail_msg("upload: %s", djinn_last_error());
	assert_int_equal(djinn_tensor_info(m1, &i1), 0);
	assert_int_equal(i1.flags & DJINN_TENSOR_DEDUP, 0);
	assert_int_equal(djinn_tensor_desc(m1)->dims[0], len);
	v1 = vmu_now();
	assert_int_equal(v1.seg[0].entries, v0.seg[0].entries + 1);

	if (run(m1, x, "add_one_to", &l, out, why, sizeof(why)))
		fail_msg("add_one_to: %s", why);
	expect_plus_one(out);

	/* the same bytes again: deduplicated, and a module all the same */
	assert_int_equal(djinn_module_upload(F.s, gpu_test_ptx, len, &m2), 0);
	assert_int_equal(djinn_tensor_info(m2, &i2), 0);
	assert_int_equal(i2.flags & DJINN_TENSOR_DEDUP, DJINN_TENSOR_DEDUP);
	assert_memory_equal(i1.fp, i2.fp, DJINN_FP_LEN);
	v2 = vmu_now();
	assert_int_equal(v2.seg[0].entries, v1.seg[0].entries);
	assert_int_equal(v2.seg[0].used, v1.seg[0].used);
	memset(out, 0, N * sizeof(float));
	if (run(m2, x, "add_one_to", &l, out, why, sizeof(why)))
		fail_msg("add_one_to (deduplicated): %s", why);
	expect_plus_one(out);

	/* the result starts as a copy of x; add_one takes one tensor, the
	 * node passes two: refused where the driver lists a kernel's
	 * parameters (CUDA 12.4), else it adds one to the copy */
	l.out_init = 1;
	memset(out, 0, N * sizeof(float));
	ret = run(m1, x, "add_one", &l, out, why, sizeof(why));
	if (ret) {
		assert_int_equal(ret, -EINVAL);
		assert_non_null(strstr(why, "add_one takes 2 parameters, "
					    "not 4"));
	} else {
		expect_plus_one(out);
	}

	assert_int_equal(djinn_tensor_release(m2), 0);
	assert_int_equal(djinn_tensor_release(m1), 0);
	assert_int_equal(djinn_tensor_release(x), 0);
	free(out);
}

static void test_refusals(void **state)
{
	static const char bad_ptx[] = ".version 7.0\n.target sm_80\n"
				      ".address_size 64\n.visible .entry x(\n";
	struct djinn_kernel_launch l = launch_for(N);
	struct djinn_tensor *m, *bad = NULL, *x = x_tensor();
	struct djinn_admin_vmu v0, v1;
	float *out = calloc(N, sizeof(float));
	char why[DJINN_MAX_ERROR_MSG + 1] = "";
	int ret;

	assert_non_null(out);
	/* a module that does not load leaves no text behind */
	v0 = vmu_now();
	assert_int_equal(djinn_module_upload(F.s, bad_ptx, sizeof(bad_ptx) - 1,
					     &bad),
			 -EINVAL);
	assert_null(bad);
	assert_non_null(strstr(djinn_last_error(), "does not load"));
	printf("# a truncated module: %s\n", djinn_last_error());
	/* the JIT's error log, on one line, in the message */
	assert_int_equal(djinn_module_upload(F.s, gpu_bad_op_ptx,
					     strlen(gpu_bad_op_ptx), &bad),
			 -EINVAL);
	assert_null(bad);
	printf("# an unknown instruction: %s\n", djinn_last_error());
	assert_non_null(strstr(djinn_last_error(), "ptxas"));
	assert_non_null(strstr(djinn_last_error(), "line 9"));
	assert_null(strchr(djinn_last_error(), '\n'));
	v1 = vmu_now();
	assert_int_equal(v1.seg[0].entries, v0.seg[0].entries);
	assert_int_equal(v1.seg[0].used, v0.seg[0].used);

	assert_int_equal(djinn_module_upload(F.s, gpu_test_ptx,
					     strlen(gpu_test_ptx), &m),
			 0);
	/* a kernel the module lacks: the graph fails when it runs */
	ret = run(m, x, "add_two", &l, out, why, sizeof(why));
	assert_int_equal(ret, -ENOENT);
	assert_non_null(strstr(why, "no kernel in the module has name hash"));

	/* past the device's limits: refused at submit, by libdjinn and the
	 * daemon's own rules */
	l.block[0] = 2048;
	ret = run(m, x, "add_one_to", &l, out, why, sizeof(why));
	assert_int_equal(ret, -EINVAL);
	assert_non_null(strstr(why, "2048 threads, at most 1024"));
	l = launch_for(N);
	l.shmem = 64 << 10;
	assert_int_equal(run(m, x, "add_one_to", &l, out, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "bytes of shared memory, at most"));

	/* and the session serves on */
	l = launch_for(N);
	if (run(m, x, "add_one_to", &l, out, why, sizeof(why)))
		fail_msg("add_one_to after the refusals: %s", why);
	expect_plus_one(out);
	assert_int_equal(djinn_tensor_release(m), 0);
	assert_int_equal(djinn_tensor_release(x), 0);
	free(out);
}

/* A read over 4 MiB, in parts: whole, and ranges across parts' edges. */
static void test_big_reads(void **state)
{
	enum { MiB = 1 << 20 };
	const uint64_t len = 21 * MiB + 12345;
	const uint64_t ranges[][2] = {
		{ 0, len },
		{ 1, 9 * MiB + 7 },
		{ 4 * MiB - 3, 4 * MiB + 6 },
		{ 0, 4 * MiB },
		{ 5, 4 * MiB + 1 },
		{ len - 8 * MiB - 1, 8 * MiB + 1 },
	};
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
				       .ndim = 1,
				       .dims = { len } };
	uint8_t *data = malloc(len), *buf = malloc(len);
	struct djinn_tensor *t;

	assert_non_null(data);
	assert_non_null(buf);
	for (uint64_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * 7 + i / 251);
	assert_int_equal(djinn_tensor_upload(F.s, &d, data, DJINN_SEG_DATA, &t),
			 0);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		memset(buf, 0, ranges[i][1]);
		assert_int_equal(djinn_tensor_download(t, ranges[i][0],
						       ranges[i][1], buf),
				 0);
		if (memcmp(buf, data + ranges[i][0], ranges[i][1]))
			fail_msg("range [%llu, +%llu) read back other bytes",
				 (unsigned long long)ranges[i][0],
				 (unsigned long long)ranges[i][1]);
	}
	assert_int_equal(djinn_tensor_release(t), 0);
	free(data);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_upload_run_dedup),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_big_reads),
	};
	char addr[sizeof(F.d.sock) + 8], msg[256] = "", allow[64];
	const char *extra[] = { "--set", "device.backend=cuda", "--set", allow,
				NULL };
	unsigned int n = 0;
	int ret;

	if (!cuda_devices) {
		printf("SKIP: this build has no CUDA backend\n");
		return 77;
	}
	if (cuda_devices(&n, msg, sizeof(msg)) || !n) {
		printf("SKIP: no CUDA device: %s\n", msg[0] ? msg : "none");
		return 77;
	}
	/* client kernels for this process's tenant (they are off unless
	 * allowed: Documentation/security.rst) */
	snprintf(allow, sizeof(allow), "tenant.uid:%u.client_kernels=yes",
		 (unsigned int)getuid());
	if (djd_start_args(&F.d, "64M", 30000, extra)) {
		fprintf(stderr, "djinnd --backend cuda did not start: %s\n",
			djd_start_error());
		return 1;
	}
	snprintf(addr, sizeof(addr), "unix:%s", F.d.sock);
	F.adm = dj_connect(F.d.admin);
	if (F.adm < 0 || djinn_connect(addr, &F.conn) ||
	    djinn_session_open(F.conn, NULL, &F.s)) {
		djd_kill(&F.d);
		fprintf(stderr, "cannot open a session on djinnd\n");
		return 1;
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	djinn_session_close(F.s);
	djinn_disconnect(F.conn);
	close(F.adm);
	if (djd_stop(&F.d, 30000))
		ret = 1;
	return ret ? 1 : 0;
}
