// SPDX-License-Identifier: MIT
/*
 * gpu-bench: the CUDA backend's benchmarks, JSON lines on stdout, one
 * figure each with the baseline it is measured beside in the same run:
 *
 *   copy     upload and download GB/s of 256 MiB through the provider
 *            (from pageable memory, as TENSOR_WRITE does, and from pinned
 *            memory), beside a pinned cuMemcpyHtoD/DtoH of the same size
 *   swap     swap-out and restore GB/s of a 1 GiB data region (the real
 *            VMU over the CUDA provider) beside the pinned copy peak;
 *            target: at least 80% of it
 *   rtt      a remote no-op graph (one SCALE of one element) through
 *            djinnd --backend cuda and libdjinn, median round trip, beside
 *            a local cuLaunchKernel of an empty kernel and a synchronize
 *   gemm     TFLOP/s of MATMUL through the op set beside cuBLAS called
 *            directly with the same shapes, bf16 and f32
 *
 * Exits 77 saying why on a host without an NVIDIA GPU and driver.
 *
 * usage: gpu-bench [--djinnd PATH] [copy|swap|rtt|gemm|all]
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "bench.h"
#include "backend/cuda/cuda_api.h"
#include "graph.h"
#include "../tests/gpu/gpu.h"
#include "vmu/vmu.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define ROUNDS 5

static struct gpu G;
static const struct cu_api *cu;
static CUcontext ctx;

/* One line, its keys in an order of their own and its numbers in four
 * digits (lib/figure.h). */
static void emit(const char *bench, const char *metric, double value,
		 const char *unit, const char *base_name, double base,
		 const char *target)
{
	fig_begin(bench, metric);
	fig_printf("value", "%.4g", value);
	fig_str("unit", unit);
	fig_str("baseline_name", base_name);
	fig_printf("baseline", "%.4g", base);
	fig_printf("ratio", "%.4g", base ? value / base : 0.0);
	if (target)
		fig_str("target", target);
	fig_str("device", G.b->name);
	fig_u64("samples", ROUNDS);
	fig_end();
}

static void ck(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		fail("%s: %s", what, cu_errname(cu, r));
}

/* ---------------------------------------------------------------------- */

/* Median GB/s of @fn moving @bytes, ROUNDS times. */
#define RATE(bytes, stmt)                                                    \
	({                                                                   \
		double _v[ROUNDS];                                           \
		for (int _i = 0; _i < ROUNDS; _i++) {                        \
			uint64_t _t = mono_ns();                             \
			stmt;                                                \
			_v[_i] = (double)(bytes) / (double)(mono_ns() - _t); \
		}                                                            \
		median(_v, ROUNDS);                                          \
	})

static double pinned_peak;

static void bench_copy(void)
{
	struct vmu_provider *p = G.b->provider;
	uint64_t n = 256 * MiB, dst;
	void *pinned, *pageable;
	double raw_up, raw_down, up, down, pup, pdown;
	int ret;

	gpu_reset(&G);
	dst = gpu_alloc(&G, n);
	ck(cu->MemHostAlloc(&pinned, n, 0), "cuMemHostAlloc");
	pageable = malloc(n);
	if (!pageable)
		fail("out of memory");
	memset(pageable, 1, n);
	memset(pinned, 2, n);
	ck(cu->CtxSetCurrent(ctx), "cuCtxSetCurrent");
	raw_up = RATE(n, ck(cu->MemcpyHtoD(dst, pinned, n), "cuMemcpyHtoD"));
	raw_down = RATE(n, ck(cu->MemcpyDtoH(pinned, dst, n), "cuMemcpyDtoH"));
	up = RATE(n, ret = p->ops->copy_htod(p, dst, pageable, n));
	down = RATE(n, ret |= p->ops->copy_dtoh(p, pageable, dst, n));
	if (ret)
		fail("provider copies: %s", strerror(-ret));
	cu->MemFreeHost(pinned);
	free(pageable);
	ret = p->ops->host_alloc(p, n, &pinned);
	if (ret)
		fail("host_alloc: %s", strerror(-ret));
	pup = RATE(n, ret = p->ops->copy_htod(p, dst, pinned, n));
	pdown = RATE(n, ret |= p->ops->copy_dtoh(p, pinned, dst, n));
	if (ret)
		fail("provider copies: %s", strerror(-ret));
	p->ops->host_free(p, pinned, n);
	pinned_peak = fmax(raw_up, raw_down);

	emit("gpu_copy", "upload_pageable_gbs", up, "GB/s",
	     "cuMemcpyHtoD_pinned", raw_up, NULL);
	emit("gpu_copy", "download_pageable_gbs", down, "GB/s",
	     "cuMemcpyDtoH_pinned", raw_down, NULL);
	emit("gpu_copy", "upload_pinned_gbs", pup, "GB/s",
	     "cuMemcpyHtoD_pinned", raw_up, NULL);
	emit("gpu_copy", "download_pinned_gbs", pdown, "GB/s",
	     "cuMemcpyDtoH_pinned", raw_down, NULL);
}

static void bench_swap(void)
{
	struct vmu_config cfg = { .swap_limit = 4 * GiB };
	uint64_t n = 1 * GiB, h;
	double out[ROUNDS], in[ROUNDS];
	struct vmu_session *s;
	struct vmu *v;
	void *buf;
	int ret;

	if (!pinned_peak)
		bench_copy();
	ret = vmu_create(G.b->provider, &cfg, &v);
	if (!ret)
		ret = vmu_session_create(v, "bench", &s);
	if (ret)
		fail("vmu: %s", strerror(-ret));
	buf = malloc(n);
	if (!buf)
		fail("out of memory");
	memset(buf, 7, n);
	ret = vmu_region_create(s, n, &h);
	if (!ret)
		ret = vmu_region_resize(s, h, n, NULL);
	if (!ret)
		ret = vmu_region_write(s, h, 0, buf, n);
	if (ret)
		fail("a 1 GiB region: %s", strerror(-ret));
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t t = mono_ns();

		ret = vmu_region_swap_out(s, h);
		out[i] = (double)n / (double)(mono_ns() - t);
		t = mono_ns();
		ret |= vmu_region_swap_in(s, h, NULL);
		in[i] = (double)n / (double)(mono_ns() - t);
		if (ret)
			fail("swap: %s", strerror(-ret));
	}
	emit("gpu_swap", "swap_out_gbs", median(out, ROUNDS), "GB/s",
	     "pinned_copy_peak", pinned_peak, ">= 0.8 of baseline");
	emit("gpu_swap", "restore_gbs", median(in, ROUNDS), "GB/s",
	     "pinned_copy_peak", pinned_peak, ">= 0.8 of baseline");
	vmu_region_destroy(s, h);
	vmu_session_destroy(s);
	vmu_destroy(v);
	free(buf);
}

/* ---------------------------------------------------------------------- */
/* rtt: djinnd --backend cuda on a socket in a temporary directory */

static const char *djinnd_path = "build/djinnd/djinnd";
static char tmpdir[] = "/tmp/gpu-bench.XXXXXX";
static pid_t daemon_pid = -1;

static void daemon_stop(void)
{
	char path[128];
	int status;

	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, &status, 0);
		daemon_pid = -1;
	}
	snprintf(path, sizeof(path), "%s/djinnd.sock", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/admin.sock", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/djinnd.log", tmpdir);
	unlink(path);
	rmdir(tmpdir);
}

static struct djinn_conn *daemon_start(char *addr, size_t len)
{
	char admin[128], log[128], dev[16];
	char *argv[] = { (char *)djinnd_path,
			 "--foreground",
			 "--listen",
			 addr,
			 "--admin-socket",
			 admin,
			 "--backend",
			 "cuda",
			 "--device",
			 dev,
			 "--log-level",
			 "notice",
			 NULL };
	struct djinn_conn *conn = NULL;
	uint64_t deadline;
	int status;

	if (!mkdtemp(tmpdir))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(addr, len, "unix:%s/djinnd.sock", tmpdir);
	snprintf(admin, sizeof(admin), "%s/admin.sock", tmpdir);
	snprintf(log, sizeof(log), "%s/djinnd.log", tmpdir);
	snprintf(dev, sizeof(dev), "%s",
		 getenv("DJINN_GPU") ? getenv("DJINN_GPU") : "0");
	daemon_pid = fork();
	if (daemon_pid < 0)
		fail("fork: %s", strerror(errno));
	if (!daemon_pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	for (deadline = mono_ns() + 30 * NSEC_PER_SEC; mono_ns() < deadline;) {
		if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			fail("%s exited at start: see %s", djinnd_path, log);
		}
		if (!djinn_connect(addr, &conn))
			return conn;
		usleep(20000);
	}
	fail("djinnd does not answer after 30 s");
}

#define RTT_N 2000

static double p50_us(double *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2] / 1000.0;
}

static void bench_rtt(void)
{
	static double remote[RTT_N], local[RTT_N];
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { 1 } };
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_conn *conn;
	char addr[128];
	float one = 1.0f;
	int ret;

	conn = daemon_start(addr, sizeof(addr));
	ret = djinn_session_open(conn, NULL, &s);
	if (!ret)
		ret = djinn_tensor_upload(s, &d, &one, DJINN_SEG_DATA, &t);
	if (ret)
		fail("session: %s", strerror(-ret));
	for (int i = -100; i < RTT_N; i++) {
		struct djinn_graph_builder *g;
		struct djinn_request *req;
		uint64_t t0 = mono_ns();
		int x;

		ret = djinn_graph_new(s, &g);
		if (ret)
			fail("graph: %s", strerror(-ret));
		x = djinn_graph_input(g, t);
		djinn_graph_output(g, djinn_op_scale(g, x, 1.0f));
		ret = djinn_submit(g, &req);
		if (!ret)
			ret = djinn_wait(req, DJINN_WAIT_FOREVER);
		if (ret)
			fail("graph: %s: %s", strerror(-ret),
			     djinn_graph_error(g));
		if (i >= 0)
			remote[i] = (double)(mono_ns() - t0);
		djinn_request_free(req);
		djinn_graph_free(g);
	}
	djinn_session_close(s);
	djinn_disconnect(conn);
	daemon_stop();

	for (int i = -100; i < RTT_N; i++) {
		uint64_t t0 = mono_ns();

		ret = cuda_noop_sync(G.b);
		if (ret)
			fail("no-op kernel: %s", strerror(-ret));
		if (i >= 0)
			local[i] = (double)(mono_ns() - t0);
	}
	emit("gpu_rtt", "noop_graph_p50_us", p50_us(remote, RTT_N), "us",
	     "cuLaunchKernel_sync_p50", p50_us(local, RTT_N), NULL);
}

/* ---------------------------------------------------------------------- */
/* gemm: MATMUL through run_node beside cublasGemmStridedBatchedEx */

static void bench_gemm_one(unsigned int dtype, uint64_t n)
{
	const struct cublas_api *bl;
	size_t es = djinn_dtype_size(dtype);
	uint64_t bytes = n * n * es, a, b, c;
	struct djinn_node node;
	struct dj_tensor in[2], out;
	double ours[ROUNDS], theirs[ROUNDS], flop = 2.0 * n * n * n;
	int t = dtype == DJINN_DTYPE_F32 ? CUDA_R_32F_ : CUDA_R_16BF_;
	float alpha = 1.0f, beta = 0.0f;
	cublasHandle_t h;
	char msg[256];
	int ret;

	if (cublas_api_load(&bl, msg, sizeof(msg)))
		fail("%s", msg);
	gpu_reset(&G);
	a = gpu_alloc(&G, bytes);
	b = gpu_alloc(&G, bytes);
	c = gpu_alloc(&G, bytes);
	G.b->provider->ops->memset(G.b->provider, a, 0x3c, bytes);
	G.b->provider->ops->memset(G.b->provider, b, 0x3c, bytes);
	memset(&node, 0, sizeof(node));
	node.op = DJINN_GOP_MATMUL;
	node.nr_inputs = 2;
	memset(in, 0, sizeof(in));
	in[0].addr = a;
	in[1].addr = b;
	for (int i = 0; i < 2; i++) {
		in[i].desc.dtype = (uint8_t)dtype;
		in[i].desc.ndim = 2;
		in[i].desc.dims[0] = in[i].desc.dims[1] = n;
	}
	out = in[0];
	out.addr = c;
	ck(cu->CtxSetCurrent(ctx), "cuCtxSetCurrent");
	if (bl->Create(&h))
		fail("cublasCreate failed");
	for (int i = -1; i < ROUNDS; i++) {
		uint64_t t0 = mono_ns();

		for (int k = 0; k < 10; k++) {
			ret = G.b->ops->run_node(G.b, &node, in, &out, msg,
						 sizeof(msg));
			if (ret)
				fail("matmul: %s", msg);
		}
		if (G.b->ops->sync(G.b))
			fail("sync");
		if (i >= 0)
			ours[i] = 10 * flop / (double)(mono_ns() - t0) / 1e3;
		t0 = mono_ns();
		for (int k = 0; k < 10; k++)
			if (bl->GemmStridedBatchedEx(
				    h, CUBLAS_OP_N_, CUBLAS_OP_N_, (int)n,
				    (int)n, (int)n, &alpha,
				    (void *)(uintptr_t)b, t, (int)n, 0,
				    (void *)(uintptr_t)a, t, (int)n, 0, &beta,
				    (void *)(uintptr_t)c, t, (int)n, 0, 1,
				    CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_))
				fail("cublas gemm failed");
		ck(cu->CtxSynchronize(), "cuCtxSynchronize");
		if (i >= 0)
			theirs[i] = 10 * flop / (double)(mono_ns() - t0) / 1e3;
	}
	bl->Destroy(h);
	emit("gpu_gemm",
	     dtype == DJINN_DTYPE_F32 ? "matmul_f32_tflops" :
					"matmul_bf16_tflops",
	     median(ours, ROUNDS), "TFLOP/s", "cublas_direct",
	     median(theirs, ROUNDS), NULL);
}

static void bench_gemm(void)
{
	bench_gemm_one(DJINN_DTYPE_BF16, 8192);
	bench_gemm_one(DJINN_DTYPE_F32, 8192);
}

int main(int argc, char **argv)
{
	const char *what = "all";
	char msg[256];
	CUdevice dev;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--djinnd") && i + 1 < argc)
			djinnd_path = argv[++i];
		else if (argv[i][0] != '-')
			what = argv[i];
		else
			fail("usage: gpu-bench [--djinnd PATH] "
			     "[copy|swap|rtt|gemm|all]");
	}
	gpu_open(&G, 1 * GiB + 8 * MiB, false);
	if (cu_api_load(&cu, msg, sizeof(msg)))
		fail("%s", msg);
	ck(cu->DeviceGet(&dev,
			 getenv("DJINN_GPU") ? atoi(getenv("DJINN_GPU")) : 0),
	   "cuDeviceGet");
	ck(cu->DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	if (!strcmp(what, "copy") || !strcmp(what, "all"))
		bench_copy();
	if (!strcmp(what, "swap") || !strcmp(what, "all"))
		bench_swap();
	if (!strcmp(what, "rtt") || !strcmp(what, "all"))
		bench_rtt();
	if (!strcmp(what, "gemm") || !strcmp(what, "all"))
		bench_gemm();
	cu->DevicePrimaryCtxRelease(dev);
	gpu_close(&G);
	return 0;
}
