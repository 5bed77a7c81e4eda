// SPDX-License-Identifier: MIT
/*
 * The GPU tests' and benchmark's common part. See gpu.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"

void gpu_open(struct gpu *g, uint64_t arena, bool with_cpu)
{
	const char *env = getenv("DJINN_GPU");
	unsigned int n = 0, dev = env ? (unsigned int)atoi(env) : 0;
	struct vmu_provider *p;
	char msg[512];
	int ret;

	memset(g, 0, sizeof(*g));
	ret = cuda_devices(&n, msg, sizeof(msg));
	if (ret) {
		printf("SKIP: %s\n", msg);
		exit(GPU_SKIP);
	}
	if (!n) {
		printf("SKIP: the CUDA driver is here but sees no GPU\n");
		exit(GPU_SKIP);
	}
	ret = cuda_backend_create(dev, 0, &g->b, msg, sizeof(msg));
	if (ret) {
		fprintf(stderr, "cuda:%u: %s (%s)\n", dev, msg, strerror(-ret));
		exit(1);
	}
	printf("# cuda:%u: %s\n", dev, msg);
	if (with_cpu && cpu_backend_create(64ull << 20, 0, &g->cpu)) {
		fprintf(stderr, "cpu backend: cannot create\n");
		exit(1);
	}
	p = g->b->provider;
	arena = (arena + p->granularity - 1) & ~(p->granularity - 1);
	ret = p->ops->reserve(p, arena, p->granularity, &g->va);
	if (!ret)
		ret = p->ops->create(p, arena, &g->chunk);
	if (!ret)
		ret = p->ops->map(p, g->va, arena, g->chunk);
	if (ret) {
		fprintf(stderr, "arena of %llu bytes: %s\n",
			(unsigned long long)arena, strerror(-ret));
		exit(1);
	}
	g->size = arena;
}

void gpu_close(struct gpu *g)
{
	struct vmu_provider *p = g->b->provider;

	g->b->ops->sync(g->b);
	p->ops->unmap(p, g->va, g->size);
	p->ops->destroy(p, g->chunk);
	p->ops->release(p, g->va, g->size);
	g->b->ops->destroy(g->b);
	if (g->cpu)
		g->cpu->ops->destroy(g->cpu);
}

uint64_t gpu_alloc(struct gpu *g, uint64_t bytes)
{
	uint64_t at = g->used;

	bytes = (bytes + 255) & ~255ull;
	if (bytes > g->size - at) {
		fprintf(stderr, "arena full: %llu + %llu > %llu\n",
			(unsigned long long)at, (unsigned long long)bytes,
			(unsigned long long)g->size);
		exit(1);
	}
	g->used += bytes ? bytes : 256;
	return g->va + at;
}

void gpu_reset(struct gpu *g)
{
	g->used = 0;
}

void gpu_put(struct gpu *g, uint64_t dst, const void *src, uint64_t len)
{
	struct vmu_provider *p = g->b->provider;
	int ret = p->ops->copy_htod(p, dst, src, len);

	if (ret) {
		fprintf(stderr, "copy_htod: %s\n", strerror(-ret));
		exit(1);
	}
}

void gpu_get(struct gpu *g, void *dst, uint64_t src, uint64_t len)
{
	struct vmu_provider *p = g->b->provider;
	int ret = p->ops->copy_dtoh(p, dst, src, len);

	if (ret) {
		fprintf(stderr, "copy_dtoh: %s\n", strerror(-ret));
		exit(1);
	}
}

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

uint16_t gpu_to_bf16(float f)
{
	uint32_t u = bits(f);

	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float gpu_from_bf16(uint16_t h)
{
	return from_bits((uint32_t)h << 16);
}

/* Round in double: f16 has 11 significant bits, subnormals below 2^-14. */
uint16_t gpu_to_f16(float f)
{
	double a = fabs((double)f), m;
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	int e;

	if (isnan(f))
		return 0x7e00 | sign;
	if (a >= 65520.0)
		return 0x7c00 | sign;
	if (a < 6.103515625e-05) /* subnormal: units of 2^-24 */
		return sign | (uint16_t)nearbyint(a * 16777216.0);
	m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
	m = nearbyint(m * 2048.0); /* 11 bits */
	if (m == 2048.0) {
		m = 1024.0;
		e++;
	}
	return sign | (uint16_t)((e + 14) << 10) | ((uint16_t)m & 0x3ff);
}

float gpu_from_f16(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (!e)
		v = ldexp(m, -24);
	else
		v = ldexp(m | 0x400, e - 25);
	return (float)(h & 0x8000 ? -v : v);
}

const char gpu_bad_op_ptx[] =
	".version 7.0\n"
	".target sm_80\n"
	".address_size 64\n"
	"\n"
	".visible .entry bad(.param .u64 p, .param .u64 n)\n"
	"{\n"
	"\t.reg .b64 %rd<2>;\n"
	"\tld.param.u64 %rd1, [p];\n"
	"\tfrobnicate.u64 %rd1, %rd1;\n" /* line 9 */
	"\tret;\n"
	"}\n";

const char gpu_test_ptx[] =
	".version 7.0\n"
	".target sm_80\n"
	".address_size 64\n"
	"\n"
	".visible .entry add_one(.param .u64 p, .param .u64 n)\n"
	"{\n"
	"\t.reg .pred %q;\n"
	"\t.reg .b32 %r<4>;\n"
	"\t.reg .b64 %rd<6>;\n"
	"\t.reg .f32 %f<3>;\n"
	"\n"
	"\tld.param.u64 %rd1, [p];\n"
	"\tld.param.u64 %rd2, [n];\n"
	"\tmov.u32 %r1, %ctaid.x;\n"
	"\tmov.u32 %r2, %ntid.x;\n"
	"\tmov.u32 %r3, %tid.x;\n"
	"\tmul.wide.u32 %rd3, %r1, %r2;\n"
	"\tcvt.u64.u32 %rd4, %r3;\n"
	"\tadd.u64 %rd3, %rd3, %rd4;\n"
	"\tsetp.ge.u64 %q, %rd3, %rd2;\n"
	"\t@%q bra done;\n"
	"\tshl.b64 %rd5, %rd3, 2;\n"
	"\tadd.u64 %rd5, %rd1, %rd5;\n"
	"\tld.global.f32 %f1, [%rd5];\n"
	"\tadd.f32 %f2, %f1, 0f3F800000;\n"
	"\tst.global.f32 [%rd5], %f2;\n"
	"done:\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry add_one_to(.param .u64 o, .param .u64 no,\n"
	"\t.param .u64 x, .param .u64 nx)\n"
	"{\n"
	"\t.reg .pred %q;\n"
	"\t.reg .b32 %r<4>;\n"
	"\t.reg .b64 %rd<9>;\n"
	"\t.reg .f32 %f<3>;\n"
	"\n"
	"\tld.param.u64 %rd1, [o];\n"
	"\tld.param.u64 %rd2, [no];\n"
	"\tld.param.u64 %rd6, [x];\n"
	"\tld.param.u64 %rd7, [nx];\n"
	"\tmov.u32 %r1, %ctaid.x;\n"
	"\tmov.u32 %r2, %ntid.x;\n"
	"\tmov.u32 %r3, %tid.x;\n"
	"\tmul.wide.u32 %rd3, %r1, %r2;\n"
	"\tcvt.u64.u32 %rd4, %r3;\n"
	"\tadd.u64 %rd3, %rd3, %rd4;\n"
	"\tsetp.ge.u64 %q, %rd3, %rd2;\n"
	"\t@%q bra out;\n"
	"\tsetp.ge.u64 %q, %rd3, %rd7;\n"
	"\t@%q bra out;\n"
	"\tshl.b64 %rd5, %rd3, 2;\n"
	"\tadd.u64 %rd8, %rd6, %rd5;\n"
	"\tld.global.f32 %f1, [%rd8];\n"
	"\tadd.f32 %f2, %f1, 0f3F800000;\n"
	"\tadd.u64 %rd5, %rd1, %rd5;\n"
	"\tst.global.f32 [%rd5], %f2;\n"
	"out:\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry fault(.param .u64 p, .param .u64 n)\n"
	"{\n"
	"\t.reg .b64 %rd<3>;\n"
	"\t.reg .f32 %f1;\n"
	"\n"
	"\tmov.u64 %rd1, 0;\n"
	"\tmov.f32 %f1, 0f3F800000;\n"
	"\tst.global.f32 [%rd1], %f1;\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry spin(.param .u64 p, .param .u64 n)\n"
	"{\n"
	"\t.reg .pred %q;\n"
	"\t.reg .b64 %rd<6>;\n"
	"\n"
	"\tld.param.u64 %rd1, [p];\n"
	"\tld.global.u64 %rd2, [%rd1];\n"
	"\tmov.u64 %rd3, %globaltimer;\n"
	"loop:\n"
	"\tmov.u64 %rd4, %globaltimer;\n"
	"\tsub.u64 %rd5, %rd4, %rd3;\n"
	"\tsetp.lt.u64 %q, %rd5, %rd2;\n"
	"\t@%q bra loop;\n"
	"\tst.global.u64 [%rd1], %rd5;\n"
	"\tret;\n"
	"}\n";
