// SPDX-License-Identifier: MIT
/*
 * Unit tests for the CPU backend (djinnd/backend/cpu/), driven only
 * through struct backend_ops, the way the executor drives it.
 *
 * Every op is checked against a reference written here: naive loops in
 * double precision over the values the inputs actually hold. The
 * references share nothing with the backend, not even the f16 and bf16
 * conversions: ref_round() below rounds with nearbyint() in double.
 * Inputs are random with fixed seeds; shapes include broadcasting, sizes
 * that are no multiple of the thread count (the shared backend has 3
 * threads) and sizes big enough that the pool splits the work.
 *
 * Tensors come from malloc, so that AddressSanitizer sees a kernel that
 * strays outside one, except in test_provider_memory, which runs a node
 * on memory from the backend's own provider. Every buffer a test takes is
 * registered and freed by the per-test teardown.
 */
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "dtypes.h"
#include "sample.h"

/*
 * |got - want| <= tol * (|want| + floor * max |want| over the tensor):
 * relative per element, with a floor near zero. The floor is the whole
 * scale (FLOOR_SUM) where results are long f32 sums whose rounding grows
 * with their terms, not with the result (matmul, attention); a tenth for
 * norms and softmax, whose outputs near zero come from cancellation; and
 * a hundredth for elementwise ops, which round each result about once
 * (GELU's 1 + tanh(u) cancels for x near -6, in PyTorch's f32 too).
 */
#define TOL_F32 1e-5
#define TOL_F16 1e-2
#define TOL_BF16 2e-2
#define FLOOR_SUM 1.0
#define FLOOR_ROW 0.1
#define FLOOR_ELEM 1e-2

static struct backend *be; /* the shared backend: 3 threads */

/* ---------------------------------------------------------------------- */
/* Buffers, freed after each test */

static void **bufs;
static size_t nr_bufs, max_bufs;

static void *talloc(size_t len)
{
	void *p = xmalloc(len);

	if (nr_bufs == max_bufs) {
		max_bufs = max_bufs ? 2 * max_bufs : 256;
		bufs = realloc(bufs, max_bufs * sizeof(*bufs));
		assert_non_null(bufs);
	}
	bufs[nr_bufs++] = p;
	return p;
}

static int free_bufs(void **state)
{
	for (size_t i = 0; i < nr_bufs; i++)
		free(bufs[i]);
	nr_bufs = 0;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* BLAS calls, counted */

/*
 * The backend's calls to cblas_sgemm() and cblas_sgemv() land here, not
 * in OpenBLAS: a definition in the executable comes first. These count
 * them and pass them on, so that a test can tell which path a matmul
 * took (one big sgemm for the GPT-2 hot path) without timing anything.
 */
static atomic_uint nr_sgemm, nr_sgemv;

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
		 const enum CBLAS_TRANSPOSE tb, const blasint M,
		 const blasint N, const blasint K, const float alpha,
		 const float *A, const blasint lda, const float *B,
		 const blasint ldb, const float beta, float *C,
		 const blasint ldc)
{
	static void (*real)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE,
			    enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
			    float, const float *, blasint, const float *,
			    blasint, float, float *, blasint);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "cblas_sgemm");
	nr_sgemm++;
	real(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cblas_sgemv(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE t,
		 const blasint m, const blasint n, const float alpha,
		 const float *a, const blasint lda, const float *x,
		 const blasint incx, const float beta, float *y,
		 const blasint incy)
{
	static void (*real)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, blasint,
			    blasint, float, const float *, blasint,
			    const float *, blasint, float, float *, blasint);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "cblas_sgemv");
	nr_sgemv++;
	real(order, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

/* ---------------------------------------------------------------------- */
/* Random numbers: splitmix64 */

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
	rng_state = seed * UINT64_C(0x9e3779b97f4a7c15) + 1;
}

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static double rng_uniform(double lo, double hi)
{
	return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53;
}

/* ---------------------------------------------------------------------- */
/* Reference dtype coding: IEEE binary formats with @mant stored mantissa
 * bits and @exp exponent bits (f16: 10, 5; bf16: 7, 8) */

static uint32_t ref_round(double x, int mant, int exp)
{
	int bias = (1 << (exp - 1)) - 1, e;
	uint32_t sign = signbit(x) ? 1u << (mant + exp) : 0;
	uint32_t inf = ((1u << exp) - 1) << mant;
	double a = fabs(x), m;

	if (isnan(x))
		return sign | inf | 1u << (mant - 1);
	if (isinf(x))
		return sign | inf;
	if (a < ldexp(1, 1 - bias)) /* subnormal: steps of 2^(1-bias-mant) */
		return sign | (uint32_t)nearbyint(ldexp(a, mant - 1 + bias));
	frexp(a, &e);
	e--; /* a = 1.f * 2^e */
	m = nearbyint(ldexp(a, mant - e)); /* 2^mant .. 2^(mant+1) */
	if (m == ldexp(1, mant + 1)) {
		m /= 2;
		e++;
	}
	if (e > bias)
		return sign | inf;
	return sign | (uint32_t)(e + bias) << mant |
	       ((uint32_t)m - (1u << mant));
}

static double ref_value(uint32_t bits, int mant, int exp)
{
	int bias = (1 << (exp - 1)) - 1;
	uint32_t e = bits >> mant & ((1u << exp) - 1);
	uint32_t m = bits & ((1u << mant) - 1);
	double s = bits >> (mant + exp) & 1 ? -1 : 1;

	if (e == (1u << exp) - 1)
		return m ? NAN : s * INFINITY;
	if (!e)
		return s * ldexp(m, 1 - bias - mant);
	return s * ldexp(m + (1u << mant), (int)e - bias - mant);
}

static size_t dsize(unsigned int dtype)
{
	switch (dtype) {
	case F32:
	case I32:
		return 4;
	case F16:
	case BF16:
		return 2;
	case I64:
		return 8;
	case U8:
		return 1;
	}
	fail_msg("dtype %u", dtype);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Tensors */

static size_t nelem(const struct djinn_tensor_desc *d)
{
	size_t n = 1;

	for (unsigned int k = 0; k < d->ndim; k++)
		n *= d->dims[k];
	return n;
}

static void *hptr(const struct dj_tensor *t)
{
	return (void *)(uintptr_t)t->addr;
}

static struct dj_tensor tensor(unsigned int dtype, unsigned int ndim,
			       const uint64_t *dims)
{
	struct dj_tensor t;

	memset(&t, 0, sizeof(t));
	t.desc.dtype = (__u8)dtype;
	t.desc.ndim = (__u8)ndim;
	for (unsigned int k = 0; k < ndim; k++)
		t.desc.dims[k] = dims[k];
	t.addr = (uintptr_t)talloc(nelem(&t.desc) * dsize(dtype));
	return t;
}

#define DIMS(...) ((const uint64_t[]){ __VA_ARGS__ })
#define NDIMS(...) ((unsigned int)(sizeof(DIMS(__VA_ARGS__)) / 8))
#define TENSOR(dtype, ...) tensor(dtype, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__))

static struct dj_tensor like(unsigned int dtype,
			     const struct djinn_tensor_desc *d)
{
	uint64_t dims[DJINN_MAX_DIMS] = { 0 };

	for (unsigned int k = 0; k < d->ndim; k++)
		dims[k] = d->dims[k];
	return tensor(dtype, d->ndim, dims);
}

static double get(const struct dj_tensor *t, size_t i)
{
	const void *p = hptr(t);

	switch (t->desc.dtype) {
	case F32:
		return ((const float *)p)[i];
	case F16:
		return ref_value(((const uint16_t *)p)[i], 10, 5);
	case BF16:
		return ref_value(((const uint16_t *)p)[i], 7, 8);
	case I32:
		return ((const int32_t *)p)[i];
	case I64:
		return (double)((const int64_t *)p)[i];
	case U8:
		return ((const uint8_t *)p)[i];
	}
	fail_msg("dtype %u", t->desc.dtype);
	return 0;
}

static int64_t get_int(const struct dj_tensor *t, size_t i)
{
	const void *p = hptr(t);

	switch (t->desc.dtype) {
	case I32:
		return ((const int32_t *)p)[i];
	case I64:
		return ((const int64_t *)p)[i];
	case U8:
		return ((const uint8_t *)p)[i];
	}
	fail_msg("dtype %u is not an integer", t->desc.dtype);
	return 0;
}

/* Store @v (exact for integers: the tests keep them in range). */
static void set(const struct dj_tensor *t, size_t i, double v)
{
	void *p = hptr(t);

	switch (t->desc.dtype) {
	case F32:
		((float *)p)[i] = (float)v;
		return;
	case F16:
		((uint16_t *)p)[i] = (uint16_t)ref_round(v, 10, 5);
		return;
	case BF16:
		((uint16_t *)p)[i] = (uint16_t)ref_round(v, 7, 8);
		return;
	case I32:
		((int32_t *)p)[i] = (int32_t)v;
		return;
	case I64:
		((int64_t *)p)[i] = (int64_t)v;
		return;
	case U8:
		((uint8_t *)p)[i] = (uint8_t)v;
		return;
	}
	fail_msg("dtype %u", t->desc.dtype);
}

/* What @t holds, as doubles. */
static double *values(const struct dj_tensor *t)
{
	size_t n = nelem(&t->desc);
	double *v = talloc(n * sizeof(double));

	for (size_t i = 0; i < n; i++)
		v[i] = get(t, i);
	return v;
}

static bool is_int(unsigned int dtype)
{
	return dtype == I32 || dtype == I64 || dtype == U8;
}

/* Fill @t with uniform values in [lo, hi) (integers: their floor) and
 * return what it holds. */
static double *randomize(const struct dj_tensor *t, double lo, double hi)
{
	size_t n = nelem(&t->desc);

	for (size_t i = 0; i < n; i++) {
		double v = rng_uniform(lo, hi);

		set(t, i, is_int(t->desc.dtype) ? floor(v) : v);
	}
	return values(t);
}

/* The same with whole numbers in [lo, hi), whatever the dtype. */
static double *randomize_whole(const struct dj_tensor *t, double lo, double hi)
{
	size_t n = nelem(&t->desc);

	for (size_t i = 0; i < n; i++)
		set(t, i, floor(rng_uniform(lo, hi)));
	return values(t);
}

static double tol_of(unsigned int dtype)
{
	return dtype == F16 ? TOL_F16 : dtype == BF16 ? TOL_BF16 : TOL_F32;
}

/* ---------------------------------------------------------------------- */
/* Running nodes */

static char last_msg[DJINN_MAX_ERROR_MSG];

static struct djinn_node mknode(unsigned int op)
{
	struct djinn_node n;

	memset(&n, 0, sizeof(n));
	n.op = (__u16)op;
	return n;
}

static int run_on(struct backend *b, struct djinn_node *n,
		  const struct dj_tensor *in, unsigned int nr,
		  const struct dj_tensor *out)
{
	n->nr_inputs = (__u8)nr;
	for (unsigned int i = 0; i < nr; i++)
		n->inputs[i] = i;
	last_msg[0] = '\0';
	return b->ops->run_node(b, n, in, out, last_msg, sizeof(last_msg));
}

static void run_ok(struct djinn_node *n, const struct dj_tensor *in,
		   unsigned int nr, const struct dj_tensor *out)
{
	int ret = run_on(be, n, in, nr, out);

	if (ret)
		fail_msg("op %u: %d (%s)", n->op, ret, last_msg);
}

/* ---------------------------------------------------------------------- */
/* Comparing */

static void expect_close(const char *what, const struct dj_tensor *got,
			 const double *want, double tol, double floor)
{
	size_t n = nelem(&got->desc);
	double scale = 0;

	for (size_t i = 0; i < n; i++)
		if (isfinite(want[i]) && fabs(want[i]) > scale)
			scale = fabs(want[i]);
	scale *= floor;
	for (size_t i = 0; i < n; i++) {
		double g = get(got, i), w = want[i];

		if (isnan(w)) {
			if (!isnan(g))
				fail_msg("%s: element %zu is %.9g, want NaN",
					 what, i, g);
			continue;
		}
		if (!(fabs(g - w) <= tol * (fabs(w) + scale)))
			fail_msg("%s: element %zu of %zu is %.9g, want %.9g "
				 "(tol %g, floor %g)",
				 what, i, n, g, w, tol, scale);
	}
}

static void expect_ints(const char *what, const struct dj_tensor *got,
			const int64_t *want)
{
	size_t n = nelem(&got->desc);

	for (size_t i = 0; i < n; i++)
		if (get_int(got, i) != want[i])
			fail_msg("%s: element %zu of %zu is %" PRId64
				 ", want %" PRId64,
				 what, i, n, get_int(got, i), want[i]);
}

static void expect_bytes(const char *what, const struct dj_tensor *got,
			 const uint8_t *want)
{
	size_t len = nelem(&got->desc) * dsize(got->desc.dtype);
	const uint8_t *g = hptr(got);

	for (size_t i = 0; i < len; i++)
		if (g[i] != want[i])
			fail_msg("%s: byte %zu of %zu is %#x, want %#x", what,
				 i, len, g[i], want[i]);
}

/* ---------------------------------------------------------------------- */
/* Reference helpers */

/* The index of flat element @flat of a tensor of @dims[nd]. */
static void unravel(size_t flat, const __u64 *dims, unsigned int nd,
		    uint64_t *idx)
{
	for (unsigned int k = nd; k-- > 0;) {
		idx[k] = flat % dims[k];
		flat /= dims[k];
	}
}

/*
 * The flat offset in a tensor of @dims[nd] of the element that numpy
 * broadcasting maps the result index @idx[ni] to: aligned at the last
 * dim, size-1 dims at 0.
 */
static size_t bcast_off(const __u64 *dims, unsigned int nd, const uint64_t *idx,
			unsigned int ni)
{
	size_t off = 0;

	for (unsigned int k = 0; k < nd; k++)
		off = off * dims[k] + (dims[k] == 1 ? 0 : idx[ni - nd + k]);
	return off;
}

/* The broadcast shape of a and b, numpy's rule. */
static struct djinn_tensor_desc bshape(const struct djinn_tensor_desc *a,
				       const struct djinn_tensor_desc *b)
{
	struct djinn_tensor_desc o;
	unsigned int no = a->ndim > b->ndim ? a->ndim : b->ndim;

	memset(&o, 0, sizeof(o));
	o.dtype = a->dtype;
	o.ndim = (__u8)no;
	for (unsigned int k = 0; k < no; k++) {
		uint64_t da = k < a->ndim ? a->dims[a->ndim - 1 - k] : 1;
		uint64_t db = k < b->ndim ? b->dims[b->ndim - 1 - k] : 1;

		assert_true(da == db || da == 1 || db == 1);
		o.dims[no - 1 - k] = da > db ? da : db;
	}
	return o;
}

/* ---------------------------------------------------------------------- */
/* The backend itself */

static void test_create_destroy(void **state)
{
	const unsigned int threads[] = { 0, 1, 5 };
	struct backend *b = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(threads); i++) {
		b = NULL;
		assert_int_equal(cpu_backend_create(64 * MiB, threads[i], &b),
				 0);
		assert_non_null(b);
		assert_string_equal(b->name, "cpu");
		assert_non_null(b->ops->run_node);
		assert_non_null(b->ops->sync);
		assert_non_null(b->ops->destroy);
		assert_non_null(b->provider);
		assert_int_equal(b->provider->capacity, 64 * MiB);
		assert_int_equal(b->ops->sync(b), 0);
		b->ops->destroy(b);
	}
	assert_int_equal(cpu_backend_create(64 * MiB, 100000, &b), -EINVAL);
}

/*
 * A DYNAMIC_ARCH OpenBLAS that does not know the CPU's model falls back to
 * SSE3 kernels; the backend must have given it the core the CPU's
 * features call for (unless OPENBLAS_CORETYPE chose one).
 */
static void test_blas_core(void **state)
{
	const char *core = openblas_get_corename();
	bool avx512, avx2;

	__builtin_cpu_init();
	avx512 = __builtin_cpu_supports("avx512f") &&
		 __builtin_cpu_supports("avx512vl") &&
		 __builtin_cpu_supports("avx512bw") &&
		 __builtin_cpu_supports("avx512dq");
	avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	if (getenv("OPENBLAS_CORETYPE") ||
	    !strstr(openblas_get_config(), "DYNAMIC_ARCH") || !avx2)
		skip();
	assert_non_null(core);
	printf("OpenBLAS core: %s\n", core);
	assert_string_not_equal(core, "Prescott");
	assert_string_not_equal(core, "Core2");
	assert_string_not_equal(core, "Nehalem");
	assert_string_not_equal(core, "Unknown");
	if (avx512)
		assert_string_not_equal(core, "Sandybridge");
}

/* Nodes on the backend's own memory: reserve, create, map, copy in, run,
 * copy out, and give it all back. */
static void test_provider_memory(void **state)
{
	struct vmu_provider *p = be->provider;
	uint64_t size = 2 * p->granularity, va = 0, chunk = 0;
	struct dj_tensor in[2], out, host[2];
	struct djinn_node n = mknode(DJINN_GOP_MATMUL);
	double *av, *bv;

	assert_int_equal(p->ops->reserve(p, size, p->granularity, &va), 0);
	assert_int_equal(p->ops->create(p, size, &chunk), 0);
	assert_int_equal(p->ops->map(p, va, size, chunk), 0);

	rng_seed(1);
	host[0] = TENSOR(F32, 3, 40, 48);
	host[1] = TENSOR(F32, 48, 33);
	av = randomize(&host[0], -1, 1);
	bv = randomize(&host[1], -1, 1);
	in[0] = host[0];
	in[1] = host[1];
	out = TENSOR(F32, 3, 40, 33); /* for the result read back */
	in[0].addr = va;
	in[1].addr = va + 64 * KiB;
	assert_int_equal(p->ops->copy_htod(p, in[0].addr, hptr(&host[0]),
					   3 * 40 * 48 * 4),
			 0);
	assert_int_equal(p->ops->copy_htod(p, in[1].addr, hptr(&host[1]),
					   48 * 33 * 4),
			 0);
	{
		struct dj_tensor dev = out;
		double *want = talloc(3 * 40 * 33 * sizeof(double));

		dev.addr = va + 256 * KiB;
		run_ok(&n, in, 2, &dev);
		assert_int_equal(p->ops->copy_dtoh(p, hptr(&out), dev.addr,
						   3 * 40 * 33 * 4),
				 0);
		for (size_t m = 0; m < 120; m++)
			for (size_t j = 0; j < 33; j++) {
				double s = 0;

				for (size_t k = 0; k < 48; k++)
					s += av[m * 48 + k] * bv[k * 33 + j];
				want[m * 33 + j] = s;
			}
		expect_close("matmul on provider memory", &out, want, TOL_F32,
			     FLOOR_SUM);
	}

	assert_int_equal(p->ops->unmap(p, va, size), 0);
	p->ops->destroy(p, chunk);
	p->ops->release(p, va, size);
}

/* ---------------------------------------------------------------------- */
/* MATMUL */

/* a (..., M, K) x b (..., K, N), either transposed, batch broadcast */
static double *ref_matmul(const struct dj_tensor *a, const double *av,
			  const struct dj_tensor *b, const double *bv, bool ta,
			  bool tb, const struct djinn_tensor_desc *od)
{
	unsigned int na = a->desc.ndim, nb = b->desc.ndim, no = od->ndim;
	size_t M = od->dims[no - 2], N = od->dims[no - 1];
	size_t K = a->desc.dims[na - (ta ? 2 : 1)];
	size_t nbatch = nelem(od) / (M * N);
	double *want = talloc(nelem(od) * sizeof(double));

	for (size_t bi = 0; bi < nbatch; bi++) {
		uint64_t idx[DJINN_MAX_DIMS];
		size_t ao, bo;

		unravel(bi, od->dims, no - 2, idx);
		ao = bcast_off(a->desc.dims, na - 2, idx, no - 2) * M * K;
		bo = bcast_off(b->desc.dims, nb - 2, idx, no - 2) * K * N;
		for (size_t m = 0; m < M; m++)
			for (size_t n = 0; n < N; n++) {
				double s = 0;

				for (size_t k = 0; k < K; k++) {
					double x = ta ? av[ao + k * M + m] :
							av[ao + m * K + k];
					double y = tb ? bv[bo + n * K + k] :
							bv[bo + k * N + n];

					s += x * y;
				}
				want[bi * M * N + m * N + n] = s;
			}
	}
	return want;
}

struct mm_case {
	unsigned int na, nb, no;
	uint64_t a[5], b[5], o[5];
	bool ta, tb;
};

static const struct mm_case mm_cases[] = {
	{ 2, 2, 2, { 7, 5 }, { 5, 3 }, { 7, 3 }, 0, 0 },
	/* the GPT-2 hot path: (B, T, C) x (C, N), one sgemm */
	{ 4, 2, 4, { 2, 3, 17, 33 }, { 33, 9 }, { 2, 3, 17, 9 }, 0, 0 },
	{ 3, 2, 3, { 2, 37, 192 }, { 130, 192 }, { 2, 37, 130 }, 0, 1 },
	{ 3, 3, 3, { 4, 5, 6 }, { 4, 5, 7 }, { 4, 6, 7 }, 1, 0 },
	{ 3, 3, 3, { 4, 5, 6 }, { 4, 7, 5 }, { 4, 6, 7 }, 1, 1 },
	/* a batched and transposed: no folding into one sgemm */
	{ 3, 2, 3, { 3, 5, 6 }, { 5, 7 }, { 3, 6, 7 }, 1, 0 },
	{ 4, 2, 4, { 2, 3, 5, 6 }, { 7, 5 }, { 2, 3, 6, 7 }, 1, 1 },
	/* batch broadcasting */
	{ 4, 3, 4, { 3, 1, 4, 5 }, { 2, 5, 6 }, { 3, 2, 4, 6 }, 0, 0 },
	{ 2, 3, 3, { 4, 5 }, { 3, 5, 6 }, { 3, 4, 6 }, 0, 0 },
	{ 3, 3, 3, { 1, 4, 5 }, { 3, 5, 6 }, { 3, 4, 6 }, 0, 0 },
	{ 4, 4, 4, { 2, 1, 3, 4 }, { 1, 3, 4, 2 }, { 2, 3, 3, 2 }, 0, 0 },
	/* q k^T over (B, H): many small ones, on the pool */
	{ 4, 4, 4, { 2, 3, 8, 16 }, { 2, 3, 8, 16 }, { 2, 3, 8, 8 }, 0, 1 },
	/* big ones, one sgemm each on the pool */
	{ 3, 3, 3, { 3, 100, 70 }, { 3, 70, 90 }, { 3, 100, 90 }, 0, 0 },
	{ 2, 2, 2, { 1, 1 }, { 1, 1 }, { 1, 1 }, 0, 0 },
	/* one row: decoding a token, a matrix-vector product */
	{ 3, 2, 3, { 1, 1, 96 }, { 96, 70 }, { 1, 1, 70 }, 0, 0 },
	{ 3, 2, 3, { 1, 1, 96 }, { 70, 96 }, { 1, 1, 70 }, 0, 1 },
	{ 3, 3, 3, { 5, 96, 1 }, { 5, 96, 70 }, { 5, 1, 70 }, 1, 0 },
	{ 3, 3, 3, { 5, 96, 1 }, { 1, 70, 96 }, { 5, 1, 70 }, 1, 1 },
	/* matrix-vector products split over the pool */
	{ 3, 2, 3, { 1, 1, 771 }, { 771, 2309 }, { 1, 1, 2309 }, 0, 0 },
	{ 3, 2, 3, { 1, 1, 771 }, { 2309, 771 }, { 1, 1, 2309 }, 0, 1 },
	/* skinny products (skinny.c): 2 to 32 rows, stripes and groups of
	 * rows with short ends, K past a vector and not a multiple of one,
	 * (K, N) in chunks of its rows */
	{ 3, 2, 3, { 1, 2, 771 }, { 771, 2309 }, { 1, 2, 2309 }, 0, 0 },
	{ 3, 2, 3, { 1, 3, 771 }, { 2309, 771 }, { 1, 3, 2309 }, 0, 1 },
	{ 2, 2, 2, { 5, 19 }, { 19, 45 }, { 5, 45 }, 0, 0 },
	{ 2, 2, 2, { 9, 35 }, { 37, 35 }, { 9, 37 }, 0, 1 },
	{ 3, 2, 3, { 4, 8, 1000 }, { 1000, 100 }, { 4, 8, 100 }, 0, 0 },
	{ 3, 2, 3, { 2, 13, 64 }, { 67, 64 }, { 2, 13, 67 }, 0, 1 },
	/* a GEMM split by columns over the pool, with a short last block */
	{ 2, 2, 2, { 70, 130 }, { 130, 333 }, { 70, 333 }, 0, 0 },
	{ 3, 2, 3, { 2, 35, 130 }, { 333, 130 }, { 2, 35, 333 }, 0, 1 },
};

static void check_matmul(const struct mm_case *c, size_t idx,
			 unsigned int dtype)
{
	struct dj_tensor in[2], out;
	struct djinn_node n = mknode(DJINN_GOP_MATMUL);
	double *av, *bv, *want;
	char what[64];

	in[0] = tensor(dtype, c->na, c->a);
	in[1] = tensor(dtype, c->nb, c->b);
	out = tensor(dtype, c->no, c->o);
	av = randomize(&in[0], -1, 1);
	bv = randomize(&in[1], -1, 1);
	n.params.matmul.trans_a = c->ta;
	n.params.matmul.trans_b = c->tb;
	run_ok(&n, in, 2, &out);
	want = ref_matmul(&in[0], av, &in[1], bv, c->ta, c->tb, &out.desc);
	snprintf(what, sizeof(what), "matmul case %zu dtype %u", idx, dtype);
	expect_close(what, &out, want, tol_of(dtype), FLOOR_SUM);
}

static void test_matmul(void **state)
{
	rng_seed(2);
	for (size_t i = 0; i < ARRAY_SIZE(mm_cases); i++)
		check_matmul(&mm_cases[i], i, F32);
}

/* Which BLAS calls a matmul makes */
static void test_matmul_paths(void **state)
{
	static const struct {
		struct mm_case c;
		unsigned int sgemm, sgemv;
	} cases[] = {
		/* GPT-2: (B, T, C) x (C, 3C) is one sgemm, weights either
		 * way, split by 64 columns over the 3 threads: 3 sgemms */
		{ { 3, 2, 3, { 2, 37, 192 }, { 192, 130 }, { 2, 37, 130 }, 0, 0 },
		  3,
		  0 },
		{ { 3, 2, 3, { 2, 37, 192 }, { 130, 192 }, { 2, 37, 130 }, 0, 1 },
		  3,
		  0 },
		/* 5 blocks of 64 columns, 2 a thread: 3 sgemms */
		{ { 2, 2, 2, { 40, 100 }, { 100, 300 }, { 40, 300 }, 0, 0 },
		  3,
		  0 },
		/* one block: 1 */
		{ { 2, 2, 2, { 40, 100 }, { 100, 60 }, { 40, 60 }, 0, 0 },
		  1,
		  0 },
		/* 15 rows folded: a skinny product (skinny.c), no BLAS;
		 * likewise 2 to 32 rows against either layout */
		{ { 4,
		    4,
		    4,
		    { 1, 3, 5, 7 },
		    { 1, 1, 7, 9 },
		    { 1, 3, 5, 9 },
		    0,
		    0 },
		  0,
		  0 },
		{ { 3, 2, 3, { 1, 2, 771 }, { 771, 2309 }, { 1, 2, 2309 }, 0, 0 },
		  0,
		  0 },
		{ { 3, 2, 3, { 4, 8, 100 }, { 130, 100 }, { 4, 8, 130 }, 0, 1 },
		  0,
		  0 },
		/* 33 rows: sgemm again */
		{ { 2, 2, 2, { 33, 100 }, { 100, 60 }, { 33, 60 }, 0, 0 },
		  1,
		  0 },
		/* decoding one token: one sgemv */
		{ { 3, 2, 3, { 1, 1, 96 }, { 96, 70 }, { 1, 1, 70 }, 0, 0 },
		  0,
		  1 },
		/* a big one: one sgemv a thread over its rows of b */
		{ { 3, 2, 3, { 1, 1, 771 }, { 771, 2309 }, { 1, 1, 2309 }, 0, 0 },
		  0,
		  3 },
		/* b (N, K): its rows in 12 chunks of at least 21 */
		{ { 3, 2, 3, { 1, 1, 771 }, { 2309, 771 }, { 1, 1, 2309 }, 0, 1 },
		  0,
		  12 },
		/* a batch that cannot fold: one call per matrix */
		{ { 3, 3, 3, { 3, 100, 70 }, { 3, 70, 90 }, { 3, 100, 90 }, 0, 0 },
		  3,
		  0 },
		{ { 3, 2, 3, { 3, 5, 6 }, { 5, 7 }, { 3, 6, 7 }, 1, 0 }, 3, 0 },
		{ { 4,
		    4,
		    4,
		    { 2, 3, 8, 16 },
		    { 2, 3, 8, 16 },
		    { 2, 3, 8, 8 },
		    0,
		    1 },
		  6,
		  0 },
		{ { 3, 3, 3, { 5, 96, 1 }, { 5, 96, 70 }, { 5, 1, 70 }, 1, 0 },
		  0,
		  5 },
	};

	rng_seed(31);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		nr_sgemm = nr_sgemv = 0;
		check_matmul(&cases[i].c, 100 + i, F32);
		/* a CPU with neither AVX-512 nor AVX2: sgemm does them */
		if (!cases[i].sgemm && !cases[i].sgemv && !cpu_skinny_ok()) {
			printf("  case %zu: no skinny kernels on this CPU\n",
			       i);
			continue;
		}
		if (nr_sgemm != cases[i].sgemm || nr_sgemv != cases[i].sgemv)
			fail_msg("case %zu: %u sgemm and %u sgemv, want %u and "
				 "%u",
				 i, nr_sgemm, nr_sgemv, cases[i].sgemm,
				 cases[i].sgemv);
	}
}

static void test_matmul_half(void **state)
{
	rng_seed(3);
	for (size_t i = 0; i < ARRAY_SIZE(mm_cases); i += 2) {
		check_matmul(&mm_cases[i], i, F16);
		check_matmul(&mm_cases[i + 1], i + 1, BF16);
	}
}

/* ---------------------------------------------------------------------- */
/* ADD, SUB, MUL, DIV */

struct bin_case {
	unsigned int na, nb;
	uint64_t a[4], b[4];
};

static const struct bin_case bin_cases[] = {
	{ 3, 3, { 2, 3, 4 }, { 2, 3, 4 } },
	{ 3, 1, { 2, 5, 7 }, { 7 } }, /* a bias */
	{ 3, 3, { 2, 5, 7 }, { 2, 5, 1 } }, /* a per-row scale */
	{ 3, 3, { 4, 1, 3 }, { 1, 5, 1 } }, /* an outer product */
	{ 0, 2, { 0 }, { 3, 4 } }, /* a scalar */
	{ 2, 0, { 3, 4 }, { 0 } },
	{ 1, 1, { 1 }, { 1 } },
	{ 4, 4, { 5, 1, 6, 1 }, { 1, 4, 1, 3 } },
	{ 2, 1, { 300, 517 }, { 517 } }, /* split across threads */
	{ 2, 3, { 301, 1 }, { 2, 1, 257 } },
	{ 1, 1, { 100003 }, { 100003 } },
};

static const unsigned int bin_ops[] = { DJINN_GOP_ADD, DJINN_GOP_SUB,
					DJINN_GOP_MUL, DJINN_GOP_DIV };

static double ref_binop(unsigned int op, double x, double y)
{
	switch (op) {
	case DJINN_GOP_ADD:
		return x + y;
	case DJINN_GOP_SUB:
		return x - y;
	case DJINN_GOP_MUL:
		return x * y;
	}
	return x / y;
}

/* Integers: exact in 128 bits, then wrapped to the dtype. */
static int64_t ref_intop(unsigned int op, unsigned int dtype, int64_t x,
			 int64_t y)
{
	__int128 r;

	switch (op) {
	case DJINN_GOP_ADD:
		r = (__int128)x + y;
		break;
	case DJINN_GOP_SUB:
		r = (__int128)x - y;
		break;
	case DJINN_GOP_MUL:
		r = (__int128)x * y;
		break;
	default:
		r = (__int128)x / y; /* C truncates toward zero */
		break;
	}
	if (dtype == I32)
		return (int32_t)(uint32_t)(unsigned __int128)r;
	if (dtype == U8)
		return (uint8_t)(unsigned __int128)r;
	return (int64_t)(uint64_t)(unsigned __int128)r;
}

/* Index of the a and b elements behind result element @i */
static void bin_offs(const struct dj_tensor *a, const struct dj_tensor *b,
		     const struct djinn_tensor_desc *od, size_t i, size_t *ao,
		     size_t *bo)
{
	uint64_t idx[DJINN_MAX_DIMS];

	unravel(i, od->dims, od->ndim, idx);
	*ao = bcast_off(a->desc.dims, a->desc.ndim, idx, od->ndim);
	*bo = bcast_off(b->desc.dims, b->desc.ndim, idx, od->ndim);
}

/* b for a division: |b| in [0.5, 2) with either sign */
static double *randomize_divisor(const struct dj_tensor *t)
{
	size_t n = nelem(&t->desc);

	for (size_t i = 0; i < n; i++)
		set(t, i, (rng_next() & 1 ? 1 : -1) * rng_uniform(0.5, 2));
	return values(t);
}

static void check_binary(unsigned int op, const struct bin_case *c,
			 unsigned int dtype)
{
	struct dj_tensor in[2], out;
	struct djinn_node n = mknode(op);
	struct djinn_tensor_desc od;
	double *av, *bv, *want;
	char what[64];
	size_t nout;

	in[0] = tensor(dtype, c->na, c->a);
	in[1] = tensor(dtype, c->nb, c->b);
	od = bshape(&in[0].desc, &in[1].desc);
	out = like(dtype, &od);
	nout = nelem(&od);
	av = randomize(&in[0], -4, 4);
	bv = op == DJINN_GOP_DIV ? randomize_divisor(&in[1]) :
				   randomize(&in[1], -4, 4);
	run_ok(&n, in, 2, &out);
	want = talloc(nout * sizeof(double));
	for (size_t i = 0; i < nout; i++) {
		size_t ao, bo;

		bin_offs(&in[0], &in[1], &od, i, &ao, &bo);
		want[i] = ref_binop(op, av[ao], bv[bo]);
	}
	snprintf(what, sizeof(what), "op %u case %zu dtype %u", op,
		 (size_t)(c - bin_cases), dtype);
	expect_close(what, &out, want, tol_of(dtype), FLOOR_ELEM);
}

static void test_binary(void **state)
{
	rng_seed(4);
	for (size_t o = 0; o < ARRAY_SIZE(bin_ops); o++)
		for (size_t i = 0; i < ARRAY_SIZE(bin_cases); i++)
			check_binary(bin_ops[o], &bin_cases[i], F32);
}

static void test_binary_half(void **state)
{
	rng_seed(5);
	for (size_t o = 0; o < ARRAY_SIZE(bin_ops); o++)
		for (size_t i = 0; i < ARRAY_SIZE(bin_cases); i++)
			check_binary(bin_ops[o], &bin_cases[i],
				     (i + o) % 2 ? F16 : BF16);
}

static void check_binary_int(unsigned int op, const struct bin_case *c,
			     unsigned int dtype)
{
	double lo = dtype == U8 ? 0 : -1000, hi = dtype == U8 ? 256 : 1000;
	struct dj_tensor in[2], out;
	struct djinn_node n = mknode(op);
	struct djinn_tensor_desc od;
	char what[64];
	int64_t *want;
	size_t nout, nb;

	in[0] = tensor(dtype, c->na, c->a);
	in[1] = tensor(dtype, c->nb, c->b);
	od = bshape(&in[0].desc, &in[1].desc);
	out = like(dtype, &od);
	nout = nelem(&od);
	nb = nelem(&in[1].desc);
	randomize(&in[0], lo, hi);
	randomize(&in[1], lo, hi);
	if (op == DJINN_GOP_DIV) /* no zero divisors; some -1 and 255 */
		for (size_t i = 0; i < nb; i++)
			if (get_int(&in[1], i) == 0)
				set(&in[1], i, i % 2 && dtype != U8 ? -1 : 255);
	run_ok(&n, in, 2, &out);
	want = talloc(nout * sizeof(int64_t));
	for (size_t i = 0; i < nout; i++) {
		size_t ao, bo;

		bin_offs(&in[0], &in[1], &od, i, &ao, &bo);
		want[i] = ref_intop(op, dtype, get_int(&in[0], ao),
				    get_int(&in[1], bo));
	}
	snprintf(what, sizeof(what), "op %u case %zu dtype %u", op,
		 (size_t)(c - bin_cases), dtype);
	expect_ints(what, &out, want);
}

static void test_binary_int(void **state)
{
	const unsigned int dtypes[] = { I32, I64, U8 };

	rng_seed(6);
	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++)
		for (size_t o = 0; o < ARRAY_SIZE(bin_ops); o++)
			for (size_t i = 0; i < ARRAY_SIZE(bin_cases); i++)
				check_binary_int(bin_ops[o], &bin_cases[i],
						 dtypes[d]);
}

/* Integers wrap and truncate; INT_MIN / -1 wraps instead of trapping. */
static void test_binary_int_edges(void **state)
{
	static const struct {
		unsigned int op, dtype;
		int64_t x, y, want;
	} cases[] = {
		{ DJINN_GOP_ADD, I32, INT32_MAX, 1, INT32_MIN },
		{ DJINN_GOP_SUB, I32, INT32_MIN, 1, INT32_MAX },
		{ DJINN_GOP_MUL, I32, 65536, 65536, 0 },
		{ DJINN_GOP_DIV, I32, INT32_MIN, -1, INT32_MIN },
		{ DJINN_GOP_DIV, I32, -7, 2, -3 },
		{ DJINN_GOP_DIV, I32, 7, -2, -3 },
		{ DJINN_GOP_ADD, I64, INT64_MAX, 1, INT64_MIN },
		{ DJINN_GOP_MUL, I64, INT64_MIN, -1, INT64_MIN },
		{ DJINN_GOP_DIV, I64, INT64_MIN, -1, INT64_MIN },
		{ DJINN_GOP_DIV, I64, -9, 4, -2 },
		{ DJINN_GOP_ADD, U8, 250, 10, 4 },
		{ DJINN_GOP_SUB, U8, 3, 5, 254 },
		{ DJINN_GOP_MUL, U8, 200, 2, 144 },
		{ DJINN_GOP_DIV, U8, 255, 255, 1 },
		{ DJINN_GOP_DIV, U8, 254, 255, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct dj_tensor in[2], out;
		struct djinn_node n = mknode(cases[i].op);

		in[0] = TENSOR(cases[i].dtype, 3);
		in[1] = TENSOR(cases[i].dtype, 1);
		out = TENSOR(cases[i].dtype, 3);
		for (size_t k = 0; k < 3; k++) {
			void *p = hptr(&in[0]);

			if (cases[i].dtype == I32)
				((int32_t *)p)[k] = (int32_t)cases[i].x;
			else if (cases[i].dtype == I64)
				((int64_t *)p)[k] = cases[i].x;
			else
				((uint8_t *)p)[k] = (uint8_t)cases[i].x;
		}
		if (cases[i].dtype == I32)
			*(int32_t *)hptr(&in[1]) = (int32_t)cases[i].y;
		else if (cases[i].dtype == I64)
			*(int64_t *)hptr(&in[1]) = cases[i].y;
		else
			*(uint8_t *)hptr(&in[1]) = (uint8_t)cases[i].y;
		run_ok(&n, in, 2, &out);
		for (size_t k = 0; k < 3; k++)
			if (get_int(&out, k) != cases[i].want)
				fail_msg("case %zu: %" PRId64 ", want %" PRId64,
					 i, get_int(&out, k), cases[i].want);
	}
}

/* A zero divisor anywhere: -EDOM, and the result is not touched. */
static void test_div_by_zero(void **state)
{
	const unsigned int dtypes[] = { I32, I64, U8 };

	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		struct dj_tensor in[2], out, scalar[2];
		struct djinn_node n = mknode(DJINN_GOP_DIV);
		size_t len;

		rng_seed(7 + d);
		in[0] = TENSOR(dtypes[d], 40, 1000);
		in[1] = TENSOR(dtypes[d], 1000);
		out = TENSOR(dtypes[d], 40, 1000);
		randomize(&in[0], 1, 100);
		randomize(&in[1], 1, 100);
		set(&in[1], 997, 0);
		len = 40 * 1000 * dsize(dtypes[d]);
		pattern(hptr(&out), 11, 0, len);
		assert_int_equal(run_on(be, &n, in, 2, &out), -EDOM);
		assert_true(strstr(last_msg, "division by zero") != NULL);
		expect_pattern(hptr(&out), 11, 0, len, "result after -EDOM");

		/* a broadcast zero scalar */
		scalar[0] = in[0];
		scalar[1] = TENSOR(dtypes[d], 1, 1);
		set(&scalar[1], 0, 0);
		assert_int_equal(run_on(be, &n, scalar, 2, &out), -EDOM);
		expect_pattern(hptr(&out), 11, 0, len, "result after -EDOM");
	}
}

/* ---------------------------------------------------------------------- */
/* SCALE, GELU, RELU, SILU */

static double ref_unary(unsigned int op, double x, double alpha)
{
	switch (op) {
	case DJINN_GOP_SCALE:
		return x * alpha;
	case DJINN_GOP_GELU:
		return 0.5 * x *
		       (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case DJINN_GOP_RELU:
		return x > 0 ? x : 0;
	}
	return x / (1 + exp(-x)); /* SILU */
}

static void check_unary(unsigned int op, size_t len, unsigned int dtype)
{
	struct dj_tensor x = TENSOR(dtype, len), out = TENSOR(dtype, len);
	struct djinn_node n = mknode(op);
	double alpha = -1.75, *xv, *want;
	char what[64];

	xv = randomize(&x, -6, 6);
	n.params.scalar.alpha = (float)alpha;
	run_ok(&n, &x, 1, &out);
	want = talloc(len * sizeof(double));
	for (size_t i = 0; i < len; i++)
		want[i] = ref_unary(op, xv[i], alpha);
	snprintf(what, sizeof(what), "op %u, %zu of dtype %u", op, len, dtype);
	expect_close(what, &out, want, tol_of(dtype), FLOOR_ELEM);
}

static void test_unary(void **state)
{
	const unsigned int ops[] = { DJINN_GOP_SCALE, DJINN_GOP_GELU,
				     DJINN_GOP_RELU, DJINN_GOP_SILU };
	const size_t lens[] = { 1, 1000, 70001 };
	const unsigned int dtypes[] = { F32, F16, BF16 };

	rng_seed(8);
	for (size_t o = 0; o < ARRAY_SIZE(ops); o++)
		for (size_t l = 0; l < ARRAY_SIZE(lens); l++)
			for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++)
				check_unary(ops[o], lens[l], dtypes[d]);
}

/*
 * Rounding to f16 and bf16, every one of the 65536 inputs: x * 1.5 is
 * exact in f32 (at most 13 significant bits), so the backend rounds once,
 * from the exact product, as ref_round() does. Covers subnormals, ties,
 * overflow to infinity, infinities and NaNs.
 */
static void test_half_rounding(void **state)
{
	const unsigned int dtypes[] = { F16, BF16 };

	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		int mant = dtypes[d] == F16 ? 10 : 7,
		    exp = dtypes[d] == F16 ? 5 : 8;
		struct dj_tensor x = TENSOR(dtypes[d], 65536);
		struct dj_tensor out = TENSOR(dtypes[d], 65536);
		struct djinn_node n = mknode(DJINN_GOP_SCALE);
		uint16_t *xb = hptr(&x), *ob = hptr(&out);

		for (uint32_t i = 0; i < 65536; i++)
			xb[i] = (uint16_t)i;
		n.params.scalar.alpha = 1.5f;
		run_ok(&n, &x, 1, &out);
		for (uint32_t i = 0; i < 65536; i++) {
			double v = ref_value(i, mant, exp) * 1.5;

			if (isnan(v)) {
				if (!isnan(ref_value(ob[i], mant, exp)))
					fail_msg("dtype %u: %#x * 1.5 is %#x, "
						 "want a NaN",
						 dtypes[d], i, ob[i]);
				continue;
			}
			if (ob[i] != ref_round(v, mant, exp))
				fail_msg("dtype %u: %#x * 1.5 is %#x, want %#x",
					 dtypes[d], i, ob[i],
					 ref_round(v, mant, exp));
		}
	}
}

/* ---------------------------------------------------------------------- */
/* SOFTMAX, LAYERNORM, RMSNORM */

static double *ref_softmax(const double *x, size_t rows, size_t C)
{
	double *want = talloc(rows * C * sizeof(double));

	for (size_t r = 0; r < rows; r++) {
		const double *xr = x + r * C;
		double max = xr[0], sum = 0;

		for (size_t i = 0; i < C; i++)
			max = xr[i] > max ? xr[i] : max;
		for (size_t i = 0; i < C; i++)
			sum += exp(xr[i] - max);
		for (size_t i = 0; i < C; i++)
			want[r * C + i] = exp(xr[i] - max) / sum;
	}
	return want;
}

struct row_case {
	unsigned int nd;
	uint64_t dims[3];
};

static const struct row_case row_cases[] = {
	{ 2, { 3, 5 } },
	{ 2, { 4, 1000 } },
	{ 2, { 1, 50257 } }, /* GPT-2's vocabulary: one long row */
	{ 1, { 7 } },
	{ 3, { 64, 33, 17 } }, /* many short rows, split across threads */
	{ 3, { 2, 3, 768 } },
	{ 2, { 1000, 3 } },
	{ 2, { 5, 1 } },
};

static void check_softmax(const struct row_case *c, unsigned int dtype,
			  double lo, double hi)
{
	struct dj_tensor x = tensor(dtype, c->nd, c->dims);
	struct dj_tensor out = tensor(dtype, c->nd, c->dims);
	struct djinn_node n = mknode(DJINN_GOP_SOFTMAX);
	size_t C = c->dims[c->nd - 1], rows = nelem(&x.desc) / C;
	double *xv = randomize(&x, lo, hi);
	char what[64];

	run_ok(&n, &x, 1, &out);
	snprintf(what, sizeof(what), "softmax case %zu dtype %u",
		 (size_t)(c - row_cases), dtype);
	expect_close(what, &out, ref_softmax(xv, rows, C), tol_of(dtype),
		     FLOOR_ROW);
}

static void test_softmax(void **state)
{
	rng_seed(9);
	for (size_t i = 0; i < ARRAY_SIZE(row_cases); i++) {
		check_softmax(&row_cases[i], F32, -20, 20);
		/* logits far from zero: only a max-subtracted exp survives */
		check_softmax(&row_cases[i], F32, 1000, 1010);
		check_softmax(&row_cases[i], i % 2 ? F16 : BF16, -5, 5);
	}
}

/*
 * Rows with -inf in them (masked logits): a row all -inf is NaN
 * (exp(-inf - -inf), as in PyTorch), a row -inf but for some entries the
 * softmax of those. The CUDA backend matches this (tests/gpu/
 * test_cuda_ops, test_softmax_masked).
 */
static void test_softmax_masked(void **state)
{
	static const unsigned int dts[] = { F32, F16, BF16 };

	rng_seed(17);
	for (size_t k = 0; k < ARRAY_SIZE(dts); k++) {
		struct dj_tensor x = TENSOR(dts[k], 3, 10);
		struct dj_tensor out = TENSOR(dts[k], 3, 10);
		struct djinn_node n = mknode(DJINN_GOP_SOFTMAX);
		double *want;

		randomize(&x, -5, 5);
		for (size_t i = 0; i < 10; i++) {
			set(&x, i, -INFINITY);
			if (i % 3)
				set(&x, 10 + i, -INFINITY);
		}
		want = ref_softmax(values(&x), 3, 10);
		for (size_t i = 0; i < 10; i++)
			assert_true(isnan(want[i]));
		run_ok(&n, &x, 1, &out);
		expect_close("softmax, masked", &out, want, tol_of(dts[k]),
			     FLOOR_ROW);
	}
}

static double *ref_norm(const double *x, const double *g, const double *b,
			size_t rows, size_t C, double eps)
{
	double *want = talloc(rows * C * sizeof(double));

	for (size_t r = 0; r < rows; r++) {
		const double *xr = x + r * C;
		double mean = 0, var = 0;

		if (b) {
			for (size_t i = 0; i < C; i++)
				mean += xr[i];
			mean /= (double)C;
		}
		for (size_t i = 0; i < C; i++)
			var += (xr[i] - mean) * (xr[i] - mean);
		var /= (double)C; /* biased; for RMSNorm mean(x^2) */
		for (size_t i = 0; i < C; i++)
			want[r * C + i] =
				(xr[i] - mean) / sqrt(var + eps) * g[i] +
				(b ? b[i] : 0);
	}
	return want;
}

static void check_norm(unsigned int op, const struct row_case *c,
		       unsigned int dtype)
{
	struct dj_tensor in[3], out;
	struct djinn_node n = mknode(op);
	size_t C = c->dims[c->nd - 1], rows;
	unsigned int nr = op == DJINN_GOP_LAYERNORM ? 3 : 2;
	double *xv, *gv, *bv = NULL;
	char what[64];

	in[0] = tensor(dtype, c->nd, c->dims);
	in[1] = TENSOR(dtype, C);
	in[2] = TENSOR(dtype, C);
	out = tensor(dtype, c->nd, c->dims);
	rows = nelem(&in[0].desc) / C;
	xv = randomize(&in[0], 4, 6); /* a mean far from zero */
	gv = randomize(&in[1], 0.5, 1.5);
	if (nr == 3)
		bv = randomize(&in[2], -1, 1);
	n.params.scalar.eps = 1e-5f;
	run_ok(&n, in, nr, &out);
	snprintf(what, sizeof(what), "op %u case %zu dtype %u", op,
		 (size_t)(c - row_cases), dtype);
	expect_close(what, &out, ref_norm(xv, gv, bv, rows, C, 1e-5f),
		     tol_of(dtype), FLOOR_ROW);
}

static void test_norms(void **state)
{
	rng_seed(10);
	for (size_t i = 0; i < ARRAY_SIZE(row_cases); i++) {
		check_norm(DJINN_GOP_LAYERNORM, &row_cases[i], F32);
		check_norm(DJINN_GOP_RMSNORM, &row_cases[i], F32);
		check_norm(DJINN_GOP_LAYERNORM, &row_cases[i],
			   i % 2 ? F16 : BF16);
		check_norm(DJINN_GOP_RMSNORM, &row_cases[i],
			   i % 2 ? BF16 : F16);
	}
}

/* ---------------------------------------------------------------------- */
/* EMBEDDING */

static void check_embedding(unsigned int tdtype, uint64_t V, uint64_t C,
			    unsigned int idtype, unsigned int nd,
			    const uint64_t *idims)
{
	struct dj_tensor in[2], out;
	struct djinn_node n = mknode(DJINN_GOP_EMBEDDING);
	uint64_t odims[DJINN_MAX_DIMS];
	size_t row = C * dsize(tdtype), nids;
	const uint8_t *table;
	uint8_t *want;

	in[0] = TENSOR(tdtype, V, C);
	in[1] = tensor(idtype, nd, idims);
	for (unsigned int k = 0; k < nd; k++)
		odims[k] = idims[k];
	odims[nd] = C;
	out = tensor(tdtype, nd + 1, odims);
	randomize(&in[0], -1, 1);
	randomize(&in[1], 0, (double)V);
	nids = nelem(&in[1].desc);
	set(&in[1], 0, (double)V - 1); /* both ends */
	if (nids > 1)
		set(&in[1], 1, 0);
	run_ok(&n, in, 2, &out);

	table = hptr(&in[0]);
	want = talloc(nids * row);
	for (size_t i = 0; i < nids; i++)
		memcpy(want + i * row, table + (size_t)get_int(&in[1], i) * row,
		       row);
	expect_bytes("embedding", &out, want);
}

static void test_embedding(void **state)
{
	rng_seed(11);
	check_embedding(F32, 50, 16, I32, 2, DIMS(2, 3));
	check_embedding(F32, 50, 16, I64, 1, DIMS(7));
	check_embedding(F32, 50, 16, I64, 0, NULL); /* one id: (C) */
	check_embedding(F16, 1000, 33, I64, 1, DIMS(3000));
	check_embedding(BF16, 7, 5000, I32, 2, DIMS(3, 4));
	check_embedding(F32, 50257, 64, I32, 2, DIMS(2, 512));
}

/* Any id outside [0, V): -EINVAL naming it, before a byte is written. */
static void test_embedding_out_of_range(void **state)
{
	const int64_t bad[] = { 50, -1, INT64_MAX, INT64_MIN, 1000 };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct dj_tensor in[2], out;
		struct djinn_node n = mknode(DJINN_GOP_EMBEDDING);
		unsigned int idtype = bad[i] == -1 ? I32 : I64;
		size_t len = 3 * 100 * 16 * 4;
		char want[64];

		rng_seed(12);
		in[0] = TENSOR(F32, 50, 16);
		in[1] = TENSOR(idtype, 3, 100);
		out = TENSOR(F32, 3, 100, 16);
		randomize(&in[0], -1, 1);
		randomize(&in[1], 0, 50);
		if (idtype == I32)
			((int32_t *)hptr(&in[1]))[250] = (int32_t)bad[i];
		else
			((int64_t *)hptr(&in[1]))[250] = bad[i];
		pattern(hptr(&out), 13, 0, len);
		assert_int_equal(run_on(be, &n, in, 2, &out), -EINVAL);
		snprintf(want, sizeof(want), "id %" PRId64 " out of range 50",
			 bad[i]);
		if (!strstr(last_msg, want))
			fail_msg("message \"%s\" does not say \"%s\"", last_msg,
				 want);
		expect_pattern(hptr(&out), 13, 0, len, "result after -EINVAL");
	}
}

/* ---------------------------------------------------------------------- */
/* RESHAPE, PERMUTE, SLICE, CONCAT: bytes, every element size */

static const unsigned int move_dtypes[] = { U8, F16, F32, I64 };

/* Random bytes in @t (a byte mover does not care what they mean) */
static void scramble(const struct dj_tensor *t, uint64_t seed)
{
	pattern(hptr(t), seed, 0, nelem(&t->desc) * dsize(t->desc.dtype));
}

static void test_reshape(void **state)
{
	for (size_t d = 0; d < ARRAY_SIZE(move_dtypes); d++) {
		unsigned int dt = move_dtypes[d];
		struct dj_tensor x = TENSOR(dt, 2, 3, 4),
				 out = TENSOR(dt, 4, 6);
		struct dj_tensor big = TENSOR(dt, 1000, 1000);
		struct dj_tensor bigout = TENSOR(dt, 250, 4000);
		struct djinn_node n = mknode(DJINN_GOP_RESHAPE);

		n.params.shape.ndim = 2;
		n.params.shape.dims[0] = 4;
		n.params.shape.dims[1] = -1;
		scramble(&x, 20 + d);
		run_ok(&n, &x, 1, &out);
		expect_bytes("reshape", &out, hptr(&x));

		n.params.shape.dims[0] = 250;
		scramble(&big, 30 + d);
		run_ok(&n, &big, 1, &bigout);
		expect_bytes("reshape big", &bigout, hptr(&big));
	}
}

struct perm_case {
	unsigned int nd;
	uint64_t dims[5];
	int32_t perm[5];
};

static const struct perm_case perm_cases[] = {
	{ 2, { 2, 3 }, { 1, 0 } },
	{ 3, { 2, 3, 4 }, { 2, 0, 1 } },
	{ 3, { 2, 3, 4 }, { 0, 1, 2 } }, /* the identity */
	{ 4, { 2, 3, 4, 5 }, { 0, 2, 1, 3 } }, /* (B,T,H,D) -> (B,H,T,D) */
	{ 4, { 2, 3, 4, 5 }, { 0, 1, 3, 2 } },
	{ 5, { 3, 1, 4, 1, 5 }, { 4, 2, 0, 3, 1 } },
	{ 5, { 2, 3, 4, 5, 6 }, { 4, 3, 2, 1, 0 } },
	{ 4, { 8, 64, 12, 64 }, { 0, 2, 1, 3 } }, /* split across threads */
	{ 3, { 300, 7, 211 }, { 2, 1, 0 } },
	{ 1, { 17 }, { 0 } },
};

static void check_permute(const struct perm_case *c, unsigned int dt,
			  uint64_t seed)
{
	struct dj_tensor x = tensor(dt, c->nd, c->dims), out;
	struct djinn_node n = mknode(DJINN_GOP_PERMUTE);
	uint64_t odims[5], idx[5], in_idx[5];
	size_t es = dsize(dt), nr;
	const uint8_t *xb = hptr(&x);
	uint8_t *want;
	char what[64];

	for (unsigned int k = 0; k < c->nd; k++) {
		odims[k] = c->dims[c->perm[k]];
		n.params.shape.dims[k] = c->perm[k];
	}
	n.params.shape.ndim = c->nd;
	out = tensor(dt, c->nd, odims);
	scramble(&x, seed);
	run_ok(&n, &x, 1, &out);

	nr = nelem(&out.desc);
	want = talloc(nr * es);
	for (size_t i = 0; i < nr; i++) {
		size_t off = 0;

		unravel(i, out.desc.dims, c->nd, idx);
		for (unsigned int k = 0; k < c->nd; k++)
			in_idx[c->perm[k]] = idx[k];
		for (unsigned int k = 0; k < c->nd; k++)
			off = off * c->dims[k] + in_idx[k];
		memcpy(want + i * es, xb + off * es, es);
	}
	snprintf(what, sizeof(what), "permute case %zu dtype %u",
		 (size_t)(c - perm_cases), dt);
	expect_bytes(what, &out, want);
}

static void test_permute(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(perm_cases); i++)
		for (size_t d = 0; d < ARRAY_SIZE(move_dtypes); d++)
			check_permute(&perm_cases[i], move_dtypes[d], 40 + i);
}

struct slice_case {
	unsigned int nd;
	uint64_t dims[3];
	int32_t axis;
	int64_t start, end;
	uint64_t s, e; /* what they mean */
};

static const struct slice_case slice_cases[] = {
	{ 3, { 5, 6, 7 }, 1, 2, 5, 2, 5 },
	{ 3, { 5, 6, 7 }, -1, -3, -1, 4, 6 },
	{ 3, { 5, 6, 7 }, 0, 0, 1, 0, 1 },
	{ 3, { 5, 6, 7 }, 2, 0, 7, 0, 7 },
	{ 3, { 5, 6, 7 }, -3, -2, 5, 3, 5 },
	{ 2, { 300, 1000 }, 1, 100, 900, 100, 900 },
	{ 2, { 3000, 100 }, 0, 7, -7, 7, 2993 },
	{ 1, { 10 }, 0, 3, 10, 3, 10 },
};

static void check_slice(const struct slice_case *c, unsigned int dt,
			uint64_t seed)
{
	struct dj_tensor x = tensor(dt, c->nd, c->dims), out;
	struct djinn_node n = mknode(DJINN_GOP_SLICE);
	unsigned int axis = c->axis < 0 ? (unsigned int)(c->axis + (int)c->nd) :
					  (unsigned int)c->axis;
	uint64_t odims[3], idx[3];
	size_t es = dsize(dt), nr;
	const uint8_t *xb = hptr(&x);
	uint8_t *want;
	char what[64];

	memcpy(odims, c->dims, sizeof(odims));
	odims[axis] = c->e - c->s;
	out = tensor(dt, c->nd, odims);
	n.params.axis.axis = c->axis;
	n.params.axis.start = c->start;
	n.params.axis.end = c->end;
	scramble(&x, seed);
	run_ok(&n, &x, 1, &out);

	nr = nelem(&out.desc);
	want = talloc(nr * es);
	for (size_t i = 0; i < nr; i++) {
		size_t off = 0;

		unravel(i, out.desc.dims, c->nd, idx);
		idx[axis] += c->s;
		for (unsigned int k = 0; k < c->nd; k++)
			off = off * c->dims[k] + idx[k];
		memcpy(want + i * es, xb + off * es, es);
	}
	snprintf(what, sizeof(what), "slice case %zu dtype %u",
		 (size_t)(c - slice_cases), dt);
	expect_bytes(what, &out, want);
}

static void test_slice(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(slice_cases); i++)
		for (size_t d = 0; d < ARRAY_SIZE(move_dtypes); d++)
			check_slice(&slice_cases[i], move_dtypes[d], 60 + i);
}

struct concat_case {
	unsigned int nd, nr;
	int32_t axis;
	uint64_t dims[3]; /* of input 0 */
	uint64_t along[4]; /* each input's size along the axis */
};

static const struct concat_case concat_cases[] = {
	{ 3, 2, 1, { 2, 3, 4 }, { 3, 5 } },
	{ 3, 3, -1, { 2, 3, 4 }, { 4, 1, 2 } },
	{ 3, 4, 0, { 2, 3, 4 }, { 2, 1, 3, 1 } },
	{ 2, 2, 1, { 200, 300 }, { 300, 500 } },
	{ 1, 2, 0, { 5 }, { 5, 70000 } },
	{ 2, 4, -2, { 3, 7 }, { 3, 3, 3, 3 } },
};

static void check_concat(const struct concat_case *c, unsigned int dt,
			 uint64_t seed)
{
	struct dj_tensor in[4], out;
	struct djinn_node n = mknode(DJINN_GOP_CONCAT);
	unsigned int axis = c->axis < 0 ? (unsigned int)(c->axis + (int)c->nd) :
					  (unsigned int)c->axis;
	uint64_t dims[3], idx[3];
	size_t es = dsize(dt), nr;
	uint8_t *want;
	char what[64];

	memcpy(dims, c->dims, sizeof(dims));
	dims[axis] = 0;
	for (unsigned int i = 0; i < c->nr; i++) {
		uint64_t d[3];

		memcpy(d, c->dims, sizeof(d));
		d[axis] = c->along[i];
		in[i] = tensor(dt, c->nd, d);
		scramble(&in[i], seed + i);
		dims[axis] += c->along[i];
	}
	out = tensor(dt, c->nd, dims);
	n.params.axis.axis = c->axis;
	run_ok(&n, in, c->nr, &out);

	nr = nelem(&out.desc);
	want = talloc(nr * es);
	for (size_t i = 0; i < nr; i++) {
		unsigned int which = 0;
		size_t off = 0;

		unravel(i, out.desc.dims, c->nd, idx);
		while (idx[axis] >= c->along[which])
			idx[axis] -= c->along[which++];
		for (unsigned int k = 0; k < c->nd; k++)
			off = off * in[which].desc.dims[k] + idx[k];
		memcpy(want + i * es, (uint8_t *)hptr(&in[which]) + off * es,
		       es);
	}
	snprintf(what, sizeof(what), "concat case %zu dtype %u",
		 (size_t)(c - concat_cases), dt);
	expect_bytes(what, &out, want);
}

static void test_concat(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(concat_cases); i++)
		for (size_t d = 0; d < ARRAY_SIZE(move_dtypes); d++)
			check_concat(&concat_cases[i], move_dtypes[d], 80 + i);
}

/* ---------------------------------------------------------------------- */
/* ATTENTION */

static double *ref_attention(const double *q, const double *k, const double *v,
			     size_t B, size_t H, size_t T, size_t S, size_t D,
			     size_t Dv, double scale, bool causal)
{
	double *want = talloc(B * H * T * Dv * sizeof(double));
	double *att = talloc(S * sizeof(double));

	if (scale == 0)
		scale = 1 / sqrt((double)D);
	for (size_t bh = 0; bh < B * H; bh++)
		for (size_t t = 0; t < T; t++) {
			size_t n = causal ? t + (S - T) + 1 : S;
			double max = -INFINITY, sum = 0;

			for (size_t s = 0; s < n; s++) {
				double dot = 0;

				for (size_t d = 0; d < D; d++)
					dot += q[(bh * T + t) * D + d] *
					       k[(bh * S + s) * D + d];
				att[s] = dot * scale;
				max = att[s] > max ? att[s] : max;
			}
			for (size_t s = 0; s < n; s++)
				sum += exp(att[s] - max);
			for (size_t d = 0; d < Dv; d++) {
				double o = 0;

				for (size_t s = 0; s < n; s++)
					o += exp(att[s] - max) / sum *
					     v[(bh * S + s) * Dv + d];
				want[(bh * T + t) * Dv + d] = o;
			}
		}
	return want;
}

struct attn_case {
	size_t B, H, T, S, D, Dv;
	float scale;
	bool causal;
};

static const struct attn_case attn_cases[] = {
	{ 1, 1, 1, 1, 4, 4, 0, 1 },
	{ 2, 3, 5, 5, 8, 8, 0, 0 },
	{ 2, 3, 5, 5, 8, 8, 0, 1 },
	{ 1, 2, 3, 7, 16, 16, 0, 1 }, /* new queries over a KV cache */
	{ 2, 2, 4, 6, 8, 12, 0.3f, 0 }, /* Dv != D, a given scale */
	{ 1, 2, 64, 64, 16, 16, 0, 1 },
	{ 1, 4, 1, 37, 64, 64, 0, 1 }, /* decoding one token */
	{ 2, 12, 40, 40, 64, 64, 0, 1 }, /* split across threads */
	{ 1, 3, 7, 9, 5, 3, 0, 0 }, /* odd head sizes */
	/* 16 queries or more a head: through sgemm, head by head */
	{ 2, 3, 20, 45, 12, 10, 0, 1 }, /* over a cache */
	{ 1, 5, 33, 33, 64, 64, 0, 1 },
	{ 1, 2, 16, 16, 7, 9, 0.25f, 0 },
};

/* q in [qlo, qhi), k in [klo, khi), whole numbers if @whole */
static void check_attention(const struct attn_case *c, unsigned int dtype,
			    double qlo, double qhi, double klo, double khi,
			    bool whole)
{
	struct dj_tensor in[3], out;
	struct djinn_node n = mknode(DJINN_GOP_ATTENTION);
	double *qv, *kv, *vv;
	char what[64];

	in[0] = TENSOR(dtype, c->B, c->H, c->T, c->D);
	in[1] = TENSOR(dtype, c->B, c->H, c->S, c->D);
	in[2] = TENSOR(dtype, c->B, c->H, c->S, c->Dv);
	out = TENSOR(dtype, c->B, c->H, c->T, c->Dv);
	qv = whole ? randomize_whole(&in[0], qlo, qhi) :
		     randomize(&in[0], qlo, qhi);
	kv = whole ? randomize_whole(&in[1], klo, khi) :
		     randomize(&in[1], klo, khi);
	vv = randomize(&in[2], -1, 1);
	n.params.attention.scale = c->scale;
	n.params.attention.causal = c->causal;
	run_ok(&n, in, 3, &out);
	snprintf(what, sizeof(what), "attention case %zu dtype %u",
		 (size_t)(c - attn_cases), dtype);
	expect_close(what, &out,
		     ref_attention(qv, kv, vv, c->B, c->H, c->T, c->S, c->D,
				   c->Dv, c->scale, c->causal),
		     tol_of(dtype), FLOOR_SUM);
}

static void test_attention(void **state)
{
	rng_seed(14);
	for (size_t i = 0; i < ARRAY_SIZE(attn_cases); i++) {
		check_attention(&attn_cases[i], F32, -2, 2, -2, 2, false);
		check_attention(&attn_cases[i], i % 2 ? F16 : BF16, -2, 2, -2,
				2, false);
		/*
		 * Every score below -104, where exp() underflows in f32
		 * unless the row's maximum is subtracted first. Integer q
		 * and k and sqrt(D) a power of two keep the scores exact,
		 * so the scores' own rounding does not count.
		 */
		if (!attn_cases[i].scale &&
		    (attn_cases[i].D == 4 || attn_cases[i].D == 16 ||
		     attn_cases[i].D == 64))
			check_attention(&attn_cases[i], F32, 1, 4, -80, -59,
					true);
	}
}

/*
 * Token-major attention over a KV cache read in place: q (T, H, D), the
 * new k, v (Sn, Hk, D), the cache (P, 3, Hk D) with keys in slot 2 and
 * values in slot 0 (slot 1 is noise), against the reference on the
 * same keys laid out heads-major.
 */
struct attn_tok_case {
	size_t H, Hk, T, P, Sn, D;
	bool causal;
};

static const struct attn_tok_case attn_tok_cases[] = {
	{ 4, 2, 1, 37, 1, 16, 1 }, /* decoding one token, GQA */
	{ 3, 3, 20, 25, 20, 12, 1 }, /* prefill over a cache: sgemm */
	{ 2, 1, 5, 0, 5, 8, 1 }, /* no cache */
	{ 2, 2, 17, 0, 17, 8, 0 }, /* no cache, sgemm */
	{ 2, 2, 3, 4, 3, 8, 0 }, /* not causal, over a cache */
};

static void check_attn_tokens(const struct attn_tok_case *c, unsigned int dtype)
{
	size_t H = c->H, Hk = c->Hk, T = c->T, P = c->P, Sn = c->Sn, D = c->D;
	size_t S = P + Sn, W = Hk * D;
	struct dj_tensor in[4], out;
	struct djinn_node n = mknode(DJINN_GOP_ATTENTION);
	double *qv, *kv, *vv, *cv = NULL, *qh, *kh, *vh, *want, *got;
	char what[64];

	in[0] = TENSOR(dtype, T, H, D);
	in[1] = TENSOR(dtype, Sn, Hk, D);
	in[2] = TENSOR(dtype, Sn, Hk, D);
	out = TENSOR(dtype, T, H, D);
	qv = randomize(&in[0], -2, 2);
	kv = randomize(&in[1], -2, 2);
	vv = randomize(&in[2], -1, 1);
	if (P) {
		in[3] = TENSOR(dtype, P, 3, W);
		cv = randomize(&in[3], -2, 2);
	}
	/* heads-major, keys and values repeated for each query head */
	qh = talloc(H * T * D * sizeof(double));
	kh = talloc(H * S * D * sizeof(double));
	vh = talloc(H * S * D * sizeof(double));
	for (size_t h = 0; h < H; h++) {
		size_t g = h / (H / Hk);

		for (size_t t = 0; t < T; t++)
			for (size_t d = 0; d < D; d++)
				qh[(h * T + t) * D + d] =
					qv[(t * H + h) * D + d];
		for (size_t s = 0; s < S; s++)
			for (size_t d = 0; d < D; d++) {
				size_t at = (h * S + s) * D + d;

				kh[at] =
					s < P ? cv[(s * 3 + 2) * W + g * D + d] :
						kv[((s - P) * Hk + g) * D + d];
				vh[at] =
					s < P ? cv[(s * 3 + 0) * W + g * D + d] :
						vv[((s - P) * Hk + g) * D + d];
			}
	}
	want = ref_attention(qh, kh, vh, 1, H, T, S, D, D, 0, c->causal);
	got = talloc(T * H * D * sizeof(double)); /* want, token-major */
	for (size_t h = 0; h < H; h++)
		for (size_t t = 0; t < T; t++)
			for (size_t d = 0; d < D; d++)
				got[(t * H + h) * D + d] =
					want[(h * T + t) * D + d];
	n.params.attention.causal = c->causal;
	n.params.attention.layout = DJINN_ATTN_TOKENS;
	n.params.attention.cache_k = P ? 2 : 0;
	run_ok(&n, in, P ? 4 : 3, &out);
	snprintf(what, sizeof(what), "tokens attention case %zu dtype %u",
		 (size_t)(c - attn_tok_cases), dtype);
	expect_close(what, &out, got, tol_of(dtype), FLOOR_SUM);
}

static void test_attention_tokens(void **state)
{
	struct dj_tensor in[4], out;
	struct djinn_node n = mknode(DJINN_GOP_ATTENTION);

	rng_seed(15);
	for (size_t i = 0; i < ARRAY_SIZE(attn_tok_cases); i++) {
		check_attn_tokens(&attn_tok_cases[i], F32);
		check_attn_tokens(&attn_tok_cases[i], BF16);
	}
	/* a cache whose rows are not Hk D wide is refused */
	in[0] = TENSOR(F32, 1, 4, 8);
	in[1] = TENSOR(F32, 1, 2, 8);
	in[2] = TENSOR(F32, 1, 2, 8);
	in[3] = TENSOR(F32, 5, 2, 8);
	out = TENSOR(F32, 1, 4, 8);
	n.params.attention.layout = DJINN_ATTN_TOKENS;
	n.params.attention.cache_v = 1;
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "the cache does not fit k and v"));
}

/*
 * Varlen attention (DJINN_ATTN_VARLEN): five contexts' rows stacked, each
 * with its own cache (or none), decodes beside a prefill long enough for
 * the sgemm path: each context's rows are bit for bit its own TOKENS
 * attention run alone. And the table is checked: rows that do not add up,
 * an empty context, a cache too narrow for the slots, no host table.
 */
static void check_attn_varlen(unsigned int dtype)
{
	static const size_t Ts[] = { 1, 1, 20, 3, 1 },
			    Ps[] = { 7, 0, 5, 30, 2 };
	enum { N = 5, H = 4, Hk = 2, D = 16, W = Hk * D };
	size_t R = 0, row0[N], es = dsize(dtype);
	struct dj_tensor in[4], out, cache[N], one[4], got;
	struct djinn_node n = mknode(DJINN_GOP_ATTENTION);
	int64_t tab[N][DJINN_VARLEN_COLS];

	for (size_t i = 0; i < N; i++) {
		row0[i] = R;
		R += Ts[i];
		if (Ps[i]) {
			cache[i] = TENSOR(dtype, Ps[i], 3, W);
			randomize(&cache[i], -2, 2);
		}
		tab[i][DJINN_VARLEN_T] = (int64_t)Ts[i];
		tab[i][DJINN_VARLEN_P] = (int64_t)Ps[i];
		tab[i][DJINN_VARLEN_CACHE] = Ps[i] ? (int64_t)cache[i].addr : 0;
		tab[i][DJINN_VARLEN_STRIDE] = 3 * W;
	}
	in[0] = TENSOR(dtype, R, H, D);
	in[1] = TENSOR(dtype, R, Hk, D);
	in[2] = TENSOR(dtype, R, Hk, D);
	memset(&in[3], 0, sizeof(in[3]));
	in[3].desc.dtype = I64;
	in[3].desc.ndim = 2;
	in[3].desc.dims[0] = N;
	in[3].desc.dims[1] = DJINN_VARLEN_COLS;
	in[3].host = tab;
	in[3].addr = (uintptr_t)tab;
	randomize(&in[0], -2, 2);
	randomize(&in[1], -2, 2);
	randomize(&in[2], -1, 1);
	out = TENSOR(dtype, R, H, D);
	n.params.attention.causal = 1;
	n.params.attention.layout = DJINN_ATTN_VARLEN;
	n.params.attention.cache_k = 2;
	n.params.attention.cache_v = 0;
	run_ok(&n, in, 4, &out);

	for (size_t i = 0; i < N; i++) {
		struct djinn_node a = n;
		size_t q = row0[i] * H * D * es, k = row0[i] * W * es;

		a.params.attention.layout = DJINN_ATTN_TOKENS;
		if (!Ps[i])
			a.params.attention.cache_k =
				a.params.attention.cache_v = 0;
		one[0] = in[0];
		one[0].desc.dims[0] = Ts[i];
		one[0].addr += q;
		one[1] = in[1];
		one[1].desc.dims[0] = Ts[i];
		one[1].addr += k;
		one[2] = in[2];
		one[2].desc.dims[0] = Ts[i];
		one[2].addr += k;
		one[3] = cache[i];
		got = TENSOR(dtype, Ts[i], H, D);
		run_ok(&a, one, Ps[i] ? 4 : 3, &got);
		if (memcmp(hptr(&got), (uint8_t *)hptr(&out) + q,
			   Ts[i] * H * D * es))
			fail_msg("varlen attention, dtype %u: context %zu's "
				 "rows are not its own attention's",
				 dtype, i);
	}

	tab[1][DJINN_VARLEN_T] = 2; /* 27 rows of 26: the last has none */
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "context 4 of 5"));
	tab[1][DJINN_VARLEN_T] = 1;
	tab[3][DJINN_VARLEN_STRIDE] = 2 * W; /* slot 2 past its rows */
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "context 3 of 5"));
	tab[3][DJINN_VARLEN_STRIDE] = 3 * W;
	tab[0][DJINN_VARLEN_T] = 0; /* an empty context */
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "context 0 of 5"));
	tab[0][DJINN_VARLEN_T] = 1;
	in[3].desc.dims[0] = 4; /* 25 rows of 26 */
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "the contexts have 25 rows"));
	in[3].desc.dims[0] = 5;
	in[3].host = NULL;
	assert_int_equal(run_on(be, &n, in, 4, &out), -EINVAL);
	assert_non_null(strstr(last_msg, "no table of contexts"));
}

static void test_attention_varlen(void **state)
{
	rng_seed(16);
	check_attn_varlen(F32);
	check_attn_varlen(BF16);
}

/* Every element of @got is zero (NaN is not). */
static void expect_zeros(const char *what, const struct dj_tensor *got)
{
	size_t n = nelem(&got->desc);

	for (size_t i = 0; i < n; i++)
		if (get(got, i) != 0)
			fail_msg("%s: element %zu of %zu is %.9g, want 0", what,
				 i, n, get(got, i));
}

/* @t's bytes set to 0xff: NaN in every float dtype, so that an element
 * the backend does not write cannot pass for a zero. */
static void poison(const struct dj_tensor *t)
{
	memset(hptr(t), 0xff, nelem(&t->desc) * dsize(t->desc.dtype));
}

/*
 * No keys (S = 0: no cached keys and no new ones): every query's result
 * is zeros, not 0/0, in both layouts and after an empty cache. Causal
 * attention with queries and no keys is refused (T > S). The CUDA
 * backend matches this (tests/gpu/test_cuda_ops, test_attention_no_keys).
 */
static void test_attention_no_keys(void **state)
{
	static const unsigned int dts[] = { F32, F16, BF16 };

	rng_seed(16);
	for (size_t i = 0; i < ARRAY_SIZE(dts); i++) {
		unsigned int dt = dts[i];
		struct djinn_node n = mknode(DJINN_GOP_ATTENTION);
		struct dj_tensor in[4], out;

		/* (B, H, T, D) over (B, Hk, 0, D), Dv != D */
		in[0] = TENSOR(dt, 2, 4, 5, 16);
		in[1] = TENSOR(dt, 2, 2, 0, 16);
		in[2] = TENSOR(dt, 2, 2, 0, 8);
		out = TENSOR(dt, 2, 4, 5, 8);
		randomize(&in[0], -2, 2);
		poison(&out);
		run_ok(&n, in, 3, &out);
		expect_zeros("attention, no keys", &out);
		n.params.attention.causal = 1;
		assert_int_equal(run_on(be, &n, in, 3, &out), -EINVAL);
		assert_non_null(strstr(last_msg, "5 queries, 0 keys"));

		/* (T, H, D) over (0, Hk, D), then after a cache of no rows */
		n = mknode(DJINN_GOP_ATTENTION);
		n.params.attention.layout = DJINN_ATTN_TOKENS;
		in[0] = TENSOR(dt, 3, 4, 16);
		in[1] = TENSOR(dt, 0, 2, 16);
		in[2] = TENSOR(dt, 0, 2, 16);
		in[3] = TENSOR(dt, 0, 3, 32);
		out = TENSOR(dt, 3, 4, 16);
		randomize(&in[0], -2, 2);
		poison(&out);
		run_ok(&n, in, 3, &out);
		expect_zeros("tokens attention, no keys", &out);
		n.params.attention.cache_k = 2;
		poison(&out);
		run_ok(&n, in, 4, &out);
		expect_zeros("tokens attention, an empty cache", &out);
	}
}

/* ---------------------------------------------------------------------- */
/* ARGMAX */

static int64_t *ref_argmax(const struct dj_tensor *x, size_t rows, size_t C)
{
	int64_t *want = talloc(rows * sizeof(int64_t));

	for (size_t r = 0; r < rows; r++) {
		size_t best = 0;

		for (size_t i = 1; i < C; i++)
			if (get(x, r * C + i) > get(x, r * C + best))
				best = i;
		want[r] = (int64_t)best;
	}
	return want;
}

static void check_argmax(unsigned int dt, unsigned int nd, const uint64_t *dims,
			 double lo, double hi)
{
	struct dj_tensor x = tensor(dt, nd, dims);
	struct dj_tensor out = tensor(I64, nd - 1, dims);
	struct djinn_node n = mknode(DJINN_GOP_ARGMAX);
	size_t C = dims[nd - 1], rows = nelem(&x.desc) / C;

	randomize(&x, lo, hi);
	run_ok(&n, &x, 1, &out);
	expect_ints("argmax", &out, ref_argmax(&x, rows, C));
}

static void test_argmax(void **state)
{
	static const float rows[][5] = {
		{ 1, 5, 5, 2, 0 }, /* ties: the first wins */
		{ 3, 3, 3, 3, 3 },
		{ -4, -2, -3, -2, -9 },
		{ 1, NAN, 3, NAN, 2 }, /* a NaN is the maximum, as in PyTorch */
	};
	static const int64_t want[] = { 1, 0, 1, 1 };
	const unsigned int dtypes[] = { F32, F16, BF16, I32, I64, U8 };

	rng_seed(15);
	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		double lo = dtypes[d] == U8 ? 0 : -100;

		/* small ranges for ints: plenty of ties */
		check_argmax(dtypes[d], 2, DIMS(3, 7), lo, lo + 5);
		check_argmax(dtypes[d], 1, DIMS(13), lo, lo + 200);
		check_argmax(dtypes[d], 3, DIMS(20, 50, 50), lo, lo + 200);
		check_argmax(dtypes[d], 2, DIMS(2, 50257), lo, lo + 200);
	}

	for (size_t d = 0; d < 3; d++) {
		struct dj_tensor x = TENSOR(dtypes[d], 4, 5),
				 out = TENSOR(I64, 4);
		struct djinn_node n = mknode(DJINN_GOP_ARGMAX);

		for (size_t i = 0; i < 20; i++)
			set(&x, i, rows[i / 5][i % 5]);
		run_ok(&n, &x, 1, &out);
		expect_ints("argmax rows", &out, want);
	}
}

/* ---------------------------------------------------------------------- */
/* SAMPLE */

static void set_params(const struct dj_tensor *p, size_t row,
		       struct djinn_sample_params sp)
{
	memcpy((uint8_t *)hptr(p) + row * sizeof(sp), &sp, sizeof(sp));
}

/*
 * Each row is djinn_sample()'s token for that row alone with its own
 * parameters (lib/sample.c, checked against a sorted reference in
 * test_model_forward): the rows' draws independent of each other and
 * of the threads that run them, in every float dtype (its logits as the
 * dtype rounds them), the in-band codes for a NaN and bad parameters.
 */
static void test_sample(void **state)
{
	const unsigned int dtypes[] = { F32, F16, BF16 };
	const struct djinn_sample_params rows[] = {
		{ .temperature = 0, .top_p = 1 }, /* greedy */
		{ .temperature = 1, .top_p = 1, .rng = 7 },
		{ .temperature = 0.7f, .top_p = 1, .top_k = 40, .rng = 8 },
		{ .temperature = 1.3f, .top_p = 0.9f, .rng = 9 },
		{ .temperature = 1, .top_p = 0.5f, .top_k = 3, .rng = 10 },
		{ .temperature = 2, .top_p = 1, .top_k = 1, .rng = 11 },
		{ .temperature = 1, .top_p = 1, .rng = 12 }, /* a NaN */
		{ .temperature = -1, .top_p = 1 }, /* bad */
		{ .temperature = 1, .top_p = 0 }, /* bad */
		{ .temperature = 1, .top_p = 1, .__reserved = 1 }, /* bad */
	};
	const size_t R = ARRAY_SIZE(rows), V = 1000;

	rng_seed(21);
	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		struct dj_tensor in[2] = { TENSOR(dtypes[d], R, V),
					   TENSOR(U8, R, 24) };
		struct dj_tensor out = TENSOR(I64, R);
		struct djinn_node n = mknode(DJINN_GOP_SAMPLE);
		float *row = talloc(V * sizeof(float));

		randomize(&in[0], -4, 4);
		set(&in[0], 6 * V + 123, NAN);
		set(&in[0], 6 * V + 456, NAN);
		for (size_t r = 0; r < R; r++)
			set_params(&in[1], r, rows[r]);
		run_ok(&n, in, 2, &out);
		for (size_t r = 0; r < R; r++) {
			int64_t want;
			size_t best = 0;

			for (size_t i = 0; i < V; i++) {
				row[i] = (float)get(&in[0], r * V + i);
				if (row[i] > row[best])
					best = i;
			}
			assert_int_equal(djinn_sample(row, V, &rows[r], &want),
					 0);
			if (get_int(&out, r) != want)
				fail_msg("%s row %zu: token %" PRId64
					 ", want %" PRId64,
					 djinn_dtype_name(dtypes[d]), r,
					 get_int(&out, r), want);
			if (r == 0 || r == 5) /* greedy, top_k 1 */
				assert_int_equal(want, best);
		}
		assert_int_equal(get_int(&out, 6), -1 - 123);
		for (size_t r = 7; r < R; r++)
			assert_int_equal(get_int(&out, r),
					 DJINN_SAMPLE_BAD_PARAMS);
	}
}

/* ---------------------------------------------------------------------- */
/* Thread counts */

/*
 * Every element is computed the same way however the work is cut, so one
 * thread and four must agree to the bit (matmul aside: OpenBLAS may
 * split its sums differently).
 */
static void test_threads_agree(void **state)
{
	struct backend *b[3] = { be };
	struct dj_tensor in[3], out[3];
	struct djinn_node nodes[6];
	unsigned int nr[6];
	size_t len[6];

	assert_int_equal(cpu_backend_create(16 * MiB, 1, &b[1]), 0);
	assert_int_equal(cpu_backend_create(16 * MiB, 4, &b[2]), 0);
	rng_seed(16);
	in[0] = TENSOR(F32, 2, 12, 40, 64);
	in[1] = TENSOR(F32, 2, 12, 40, 64);
	in[2] = TENSOR(F32, 2, 12, 40, 64);
	for (unsigned int i = 0; i < 3; i++)
		randomize(&in[i], -2, 2);

	nodes[0] = mknode(DJINN_GOP_ATTENTION);
	nodes[0].params.attention.causal = 1;
	nr[0] = 3;
	nodes[1] = mknode(DJINN_GOP_GELU);
	nodes[2] = mknode(DJINN_GOP_SOFTMAX);
	nodes[3] = mknode(DJINN_GOP_ADD);
	nodes[4] = mknode(DJINN_GOP_PERMUTE);
	nodes[4].params.shape.ndim = 4;
	nodes[4].params.shape.dims[0] = 0;
	nodes[4].params.shape.dims[1] = 2;
	nodes[4].params.shape.dims[2] = 1;
	nodes[4].params.shape.dims[3] = 3;
	nodes[5] = mknode(DJINN_GOP_LAYERNORM);
	nodes[5].params.scalar.eps = 1e-5f;
	nr[1] = nr[2] = 1;
	nr[3] = 2;
	nr[4] = 1;
	nr[5] = 3;

	for (size_t i = 0; i < ARRAY_SIZE(nodes); i++) {
		struct dj_tensor args[3] = { in[0], in[1], in[2] };

		if (nodes[i].op == DJINN_GOP_ADD) /* broadcast a bias */
			args[1] = TENSOR(F32, 64);
		if (nodes[i].op == DJINN_GOP_LAYERNORM) {
			args[1] = TENSOR(F32, 64);
			args[2] = TENSOR(F32, 64);
		}
		for (unsigned int k = 1; k < nr[i]; k++)
			if (args[k].desc.ndim == 1)
				randomize(&args[k], -1, 1);
		for (unsigned int t = 0; t < 3; t++) {
			out[t] = like(F32, &in[0].desc);
			if (nodes[i].op == DJINN_GOP_PERMUTE) {
				out[t].desc.dims[1] = 40;
				out[t].desc.dims[2] = 12;
			}
			if (run_on(b[t], &nodes[i], args, nr[i], &out[t]))
				fail_msg("op %u on backend %u: %s", nodes[i].op,
					 t, last_msg);
		}
		len[i] = nelem(&out[0].desc) * 4;
		for (unsigned int t = 1; t < 3; t++)
			if (memcmp(hptr(&out[0]), hptr(&out[t]), len[i]))
				fail_msg("op %u: backend %u differs",
					 nodes[i].op, t);
	}
	b[1]->ops->destroy(b[1]);
	b[2]->ops->destroy(b[2]);
}

/* ---------------------------------------------------------------------- */
/* Refusals */

static void test_errors(void **state)
{
	struct dj_tensor f[2], out, i32 = TENSOR(I32, 4, 4);
	struct djinn_node n;

	f[0] = TENSOR(F32, 4, 5);
	f[1] = TENSOR(F32, 5, 6);
	randomize(&f[0], -1, 1);
	randomize(&f[1], -1, 1);
	randomize(&i32, -5, 5);

	/* unknown ops */
	n = mknode(0);
	out = TENSOR(F32, 4, 6);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EOPNOTSUPP);
	n = mknode(DJINN_GOP_MAX + 1);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EOPNOTSUPP);
	assert_true(last_msg[0] != '\0');

	/* a result of the wrong shape, or dtype */
	n = mknode(DJINN_GOP_MATMUL);
	assert_int_equal(run_on(be, &n, f, 2, &out), 0);
	out = TENSOR(F32, 4, 7);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);
	out = TENSOR(F32, 2, 4, 6);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);
	out = TENSOR(F16, 4, 6);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);
	out = TENSOR(F32, 4, 6);
	n.params.matmul.trans_b = 1; /* inner dims 5 and 6 */
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);
	n = mknode(DJINN_GOP_ADD);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);

	/* a float op on integers: no kernel */
	n = mknode(DJINN_GOP_GELU);
	out = TENSOR(I32, 4, 4);
	assert_int_equal(run_on(be, &n, &i32, 1, &out), -EOPNOTSUPP);
	n = mknode(DJINN_GOP_MATMUL);
	{
		struct dj_tensor ii[2] = { i32, i32 };

		assert_int_equal(run_on(be, &n, ii, 2, &out), -EOPNOTSUPP);
	}

	/* the wrong number of inputs */
	n = mknode(DJINN_GOP_GELU);
	out = TENSOR(F32, 4, 5);
	assert_int_equal(run_on(be, &n, f, 2, &out), -EINVAL);

	/* no message buffer: still refused, nothing written */
	n = mknode(DJINN_GOP_MATMUL);
	out = TENSOR(F32, 4, 7);
	n.nr_inputs = 2;
	assert_int_equal(be->ops->run_node(be, &n, f, &out, NULL, 0), -EINVAL);

	/* an f32 that does not start on 4 bytes, an unknown dtype */
	n = mknode(DJINN_GOP_MATMUL);
	out = TENSOR(F32, 4, 6);
	{
		struct dj_tensor bad[2] = { f[0], f[1] };

		bad[1].addr += 2;
		assert_int_equal(run_on(be, &n, bad, 2, &out), -EINVAL);
		bad[1].addr -= 2;
		bad[1].desc.dtype = 99;
		assert_int_equal(run_on(be, &n, bad, 2, &out), -EINVAL);
	}

	/* slices and permutations that are not */
	n = mknode(DJINN_GOP_SLICE);
	n.params.axis.axis = 1;
	n.params.axis.start = 3;
	n.params.axis.end = 3;
	out = TENSOR(F32, 4, 1);
	assert_int_equal(run_on(be, &n, f, 1, &out), -EINVAL);
	n.params.axis.axis = 2;
	n.params.axis.end = 4;
	assert_int_equal(run_on(be, &n, f, 1, &out), -EINVAL);
	n = mknode(DJINN_GOP_PERMUTE);
	n.params.shape.ndim = 2;
	n.params.shape.dims[0] = 1;
	n.params.shape.dims[1] = 1;
	out = TENSOR(F32, 5, 5);
	assert_int_equal(run_on(be, &n, f, 1, &out), -EINVAL);
}

/* ---------------------------------------------------------------------- */
/* A GPT-2 model, one block: every node through run_node */

enum { GB = 2, GT = 8, GC = 64, GH = 4, GD = GC / GH, GV = 50 };

struct gpt2 {
	struct dj_tensor ids, wte, wpe, ln1g, ln1b, wqkv, bqkv, wproj, bproj;
	struct dj_tensor ln2g, ln2b, wfc, bfc, wfc2, bfc2, lnfg, lnfb;
};

/* The reference: the same model written as loops, in double, reading the
 * weights from the tensors. @x gets the block's output, @logits the
 * head's. */
static void ref_gpt2(const struct gpt2 *g, double *x, double *logits)
{
	double *h = talloc(GB * GT * 4 * GC * sizeof(double));
	double *qkv = talloc(GB * GT * 3 * GC * sizeof(double));
	double *y = talloc(GB * GT * GC * sizeof(double));
	double *ln1g = values(&g->ln1g), *ln1b = values(&g->ln1b);
	double *ln2g = values(&g->ln2g), *ln2b = values(&g->ln2b);
	double *lnfg = values(&g->lnfg), *lnfb = values(&g->lnfb);
	double *wte = values(&g->wte), *wpe = values(&g->wpe);
	double *wqkv = values(&g->wqkv), *bqkv = values(&g->bqkv);
	double *wproj = values(&g->wproj), *bproj = values(&g->bproj);
	double *wfc = values(&g->wfc), *bfc = values(&g->bfc);
	double *wfc2 = values(&g->wfc2), *bfc2 = values(&g->bfc2);
	double *t;
	size_t BT = GB * GT;

	/* x = wte[ids] + wpe[t] */
	for (size_t r = 0; r < BT; r++)
		for (size_t c = 0; c < GC; c++)
			x[r * GC + c] = wte[get_int(&g->ids, r) * GC + c] +
					wpe[(r % GT) * GC + c];

	/* qkv = ln1(x) wqkv + bqkv */
	t = ref_norm(x, ln1g, ln1b, BT, GC, 1e-5f);
	for (size_t r = 0; r < BT; r++)
		for (size_t j = 0; j < 3 * GC; j++) {
			double s = bqkv[j];

			for (size_t c = 0; c < GC; c++)
				s += t[r * GC + c] * wqkv[c * 3 * GC + j];
			qkv[r * 3 * GC + j] = s;
		}
	/* causal attention, head h on channels h*D .. h*D+D-1 */
	for (size_t b = 0; b < GB; b++)
		for (size_t hd = 0; hd < GH; hd++)
			for (size_t i = 0; i < GT; i++) {
				const double *q =
					qkv + (b * GT + i) * 3 * GC + hd * GD;
				double att[GT], max = -INFINITY, sum = 0;

				for (size_t j = 0; j <= i; j++) {
					const double *k =
						qkv + (b * GT + j) * 3 * GC +
						GC + hd * GD;
					double s = 0;

					for (size_t d = 0; d < GD; d++)
						s += q[d] * k[d];
					att[j] = s / sqrt(GD);
					max = att[j] > max ? att[j] : max;
				}
				for (size_t j = 0; j <= i; j++) {
					att[j] = exp(att[j] - max);
					sum += att[j];
				}
				for (size_t d = 0; d < GD; d++) {
					double o = 0;

					for (size_t j = 0; j <= i; j++)
						o += att[j] / sum *
						     qkv[(b * GT + j) * 3 * GC +
							 2 * GC + hd * GD + d];
					y[(b * GT + i) * GC + hd * GD + d] = o;
				}
			}
	/* x += y wproj + bproj */
	for (size_t r = 0; r < BT; r++)
		for (size_t j = 0; j < GC; j++) {
			double s = bproj[j];

			for (size_t c = 0; c < GC; c++)
				s += y[r * GC + c] * wproj[c * GC + j];
			x[r * GC + j] += s;
		}
	/* x += gelu(ln2(x) wfc + bfc) wfc2 + bfc2 */
	t = ref_norm(x, ln2g, ln2b, BT, GC, 1e-5f);
	for (size_t r = 0; r < BT; r++)
		for (size_t j = 0; j < 4 * GC; j++) {
			double s = bfc[j];

			for (size_t c = 0; c < GC; c++)
				s += t[r * GC + c] * wfc[c * 4 * GC + j];
			h[r * 4 * GC + j] = ref_unary(DJINN_GOP_GELU, s, 0);
		}
	for (size_t r = 0; r < BT; r++)
		for (size_t j = 0; j < GC; j++) {
			double s = bfc2[j];

			for (size_t c = 0; c < 4 * GC; c++)
				s += h[r * 4 * GC + c] * wfc2[c * GC + j];
			x[r * GC + j] += s;
		}
	/* logits = lnf(x) wte^T */
	t = ref_norm(x, lnfg, lnfb, BT, GC, 1e-5f);
	for (size_t r = 0; r < BT; r++)
		for (size_t v = 0; v < GV; v++) {
			double s = 0;

			for (size_t c = 0; c < GC; c++)
				s += t[r * GC + c] * wte[v * GC + c];
			logits[r * GV + v] = s;
		}
}

/* Run one node, its result a new tensor of @dims */
static struct dj_tensor step(struct djinn_node n, unsigned int nr,
			     const struct dj_tensor *a,
			     const struct dj_tensor *b,
			     const struct dj_tensor *c, unsigned int dtype,
			     unsigned int nd, const uint64_t *dims)
{
	struct dj_tensor in[3], out = tensor(dtype, nd, dims);

	in[0] = *a;
	if (b)
		in[1] = *b;
	if (c)
		in[2] = *c;
	run_ok(&n, in, nr, &out);
	return out;
}

static struct djinn_node norm_node(void)
{
	struct djinn_node n = mknode(DJINN_GOP_LAYERNORM);

	n.params.scalar.eps = 1e-5f;
	return n;
}

static struct djinn_node slice_node(int32_t axis, int64_t start, int64_t end)
{
	struct djinn_node n = mknode(DJINN_GOP_SLICE);

	n.params.axis.axis = axis;
	n.params.axis.start = start;
	n.params.axis.end = end;
	return n;
}

static struct djinn_node shape_node(unsigned int op, unsigned int nd,
				    const int32_t *dims)
{
	struct djinn_node n = mknode(op);

	n.params.shape.ndim = nd;
	memcpy(n.params.shape.dims, dims, nd * sizeof(dims[0]));
	return n;
}

/* (B, T, C) -> (B, H, T, D): reshape, then swap T and H */
static struct dj_tensor heads(const struct dj_tensor *x)
{
	static const int32_t split[] = { GB, GT, GH, GD },
			     swap[] = { 0, 2, 1, 3 };
	struct dj_tensor t;

	t = step(shape_node(DJINN_GOP_RESHAPE, 4, split), 1, x, NULL, NULL, F32,
		 4, DIMS(GB, GT, GH, GD));
	return step(shape_node(DJINN_GOP_PERMUTE, 4, swap), 1, &t, NULL, NULL,
		    F32, 4, DIMS(GB, GH, GT, GD));
}

static void test_gpt2_block(void **state)
{
	static const int32_t swap[] = { 0, 2, 1, 3 }, merge[] = { GB, GT, GC };
	struct djinn_node mm = mknode(DJINN_GOP_MATMUL);
	struct djinn_node add = mknode(DJINN_GOP_ADD);
	struct djinn_node attn = mknode(DJINN_GOP_ATTENTION);
	struct djinn_node lm = mknode(DJINN_GOP_MATMUL);
	struct dj_tensor x, h, qkv, q, k, v, y, a, f, next, logits;
	double *want_x = talloc(GB * GT * GC * sizeof(double));
	double *want_logits = talloc(GB * GT * GV * sizeof(double));
	double *lv;
	int64_t *want_next;
	struct gpt2 g;

	rng_seed(17);
	g.ids = TENSOR(I32, GB, GT);
	g.wte = TENSOR(F32, GV, GC);
	g.wpe = TENSOR(F32, GT, GC);
	g.ln1g = TENSOR(F32, GC);
	g.ln1b = TENSOR(F32, GC);
	g.wqkv = TENSOR(F32, GC, 3 * GC);
	g.bqkv = TENSOR(F32, 3 * GC);
	g.wproj = TENSOR(F32, GC, GC);
	g.bproj = TENSOR(F32, GC);
	g.ln2g = TENSOR(F32, GC);
	g.ln2b = TENSOR(F32, GC);
	g.wfc = TENSOR(F32, GC, 4 * GC);
	g.bfc = TENSOR(F32, 4 * GC);
	g.wfc2 = TENSOR(F32, 4 * GC, GC);
	g.bfc2 = TENSOR(F32, GC);
	g.lnfg = TENSOR(F32, GC);
	g.lnfb = TENSOR(F32, GC);
	randomize(&g.ids, 0, GV);
	randomize(&g.wte, -0.5, 0.5);
	randomize(&g.wpe, -0.1, 0.1);
	randomize(&g.ln1g, 0.8, 1.2);
	randomize(&g.ln1b, -0.1, 0.1);
	randomize(&g.wqkv, -0.25, 0.25);
	randomize(&g.bqkv, -0.1, 0.1);
	randomize(&g.wproj, -0.25, 0.25);
	randomize(&g.bproj, -0.1, 0.1);
	randomize(&g.ln2g, 0.8, 1.2);
	randomize(&g.ln2b, -0.1, 0.1);
	randomize(&g.wfc, -0.25, 0.25);
	randomize(&g.bfc, -0.1, 0.1);
	randomize(&g.wfc2, -0.125, 0.125);
	randomize(&g.bfc2, -0.1, 0.1);
	randomize(&g.lnfg, 0.8, 1.2);
	randomize(&g.lnfb, -0.1, 0.1);
	ref_gpt2(&g, want_x, want_logits);

	/* x = wte[ids] + wpe */
	x = step(mknode(DJINN_GOP_EMBEDDING), 2, &g.wte, &g.ids, NULL, F32, 3,
		 DIMS(GB, GT, GC));
	x = step(add, 2, &x, &g.wpe, NULL, F32, 3, DIMS(GB, GT, GC));

	/* attention */
	h = step(norm_node(), 3, &x, &g.ln1g, &g.ln1b, F32, 3,
		 DIMS(GB, GT, GC));
	qkv = step(mm, 2, &h, &g.wqkv, NULL, F32, 3, DIMS(GB, GT, 3 * GC));
	qkv = step(add, 2, &qkv, &g.bqkv, NULL, F32, 3, DIMS(GB, GT, 3 * GC));
	q = step(slice_node(-1, 0, GC), 1, &qkv, NULL, NULL, F32, 3,
		 DIMS(GB, GT, GC));
	k = step(slice_node(2, GC, 2 * GC), 1, &qkv, NULL, NULL, F32, 3,
		 DIMS(GB, GT, GC));
	v = step(slice_node(-1, -GC, 3 * GC), 1, &qkv, NULL, NULL, F32, 3,
		 DIMS(GB, GT, GC));
	q = heads(&q);
	k = heads(&k);
	v = heads(&v);
	attn.params.attention.causal = 1;
	y = step(attn, 3, &q, &k, &v, F32, 4, DIMS(GB, GH, GT, GD));
	y = step(shape_node(DJINN_GOP_PERMUTE, 4, swap), 1, &y, NULL, NULL, F32,
		 4, DIMS(GB, GT, GH, GD));
	y = step(shape_node(DJINN_GOP_RESHAPE, 3, merge), 1, &y, NULL, NULL,
		 F32, 3, DIMS(GB, GT, GC));
	a = step(mm, 2, &y, &g.wproj, NULL, F32, 3, DIMS(GB, GT, GC));
	a = step(add, 2, &a, &g.bproj, NULL, F32, 3, DIMS(GB, GT, GC));
	x = step(add, 2, &x, &a, NULL, F32, 3, DIMS(GB, GT, GC));

	/* MLP */
	h = step(norm_node(), 3, &x, &g.ln2g, &g.ln2b, F32, 3,
		 DIMS(GB, GT, GC));
	f = step(mm, 2, &h, &g.wfc, NULL, F32, 3, DIMS(GB, GT, 4 * GC));
	f = step(add, 2, &f, &g.bfc, NULL, F32, 3, DIMS(GB, GT, 4 * GC));
	f = step(mknode(DJINN_GOP_GELU), 1, &f, NULL, NULL, F32, 3,
		 DIMS(GB, GT, 4 * GC));
	a = step(mm, 2, &f, &g.wfc2, NULL, F32, 3, DIMS(GB, GT, GC));
	a = step(add, 2, &a, &g.bfc2, NULL, F32, 3, DIMS(GB, GT, GC));
	x = step(add, 2, &x, &a, NULL, F32, 3, DIMS(GB, GT, GC));
	expect_close("block output", &x, want_x, 1e-4, FLOOR_SUM);

	/* the head: tied embedding, then the next token */
	h = step(norm_node(), 3, &x, &g.lnfg, &g.lnfb, F32, 3,
		 DIMS(GB, GT, GC));
	lm.params.matmul.trans_b = 1;
	logits = step(lm, 2, &h, &g.wte, NULL, F32, 3, DIMS(GB, GT, GV));
	expect_close("logits", &logits, want_logits, 1e-4, FLOOR_SUM);
	next = step(mknode(DJINN_GOP_ARGMAX), 1, &logits, NULL, NULL, I64, 2,
		    DIMS(GB, GT));
	lv = values(&logits);
	want_next = ref_argmax(&logits, GB * GT, GV);
	expect_ints("next tokens", &next, want_next);
	/* and the token it picked is the reference's best, within tolerance */
	for (size_t r = 0; r < GB * GT; r++) {
		double best = want_logits[r * GV];

		for (size_t j = 1; j < GV; j++)
			best = fmax(best, want_logits[r * GV + j]);
		assert_true(best - want_logits[r * GV + want_next[r]] < 1e-4);
		assert_true(fabs(lv[r * GV + want_next[r]] - best) < 1e-3);
	}
}

/* ---------------------------------------------------------------------- */

static int setup_backend(void **state)
{
	return cpu_backend_create(256 * MiB, 3, &be);
}

static int teardown_backend(void **state)
{
	be->ops->destroy(be);
	be = NULL;
	free(bufs);
	return 0;
}

#define TEST(f) cmocka_unit_test_teardown(f, free_bufs)

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST(test_create_destroy),
		TEST(test_blas_core),
		TEST(test_provider_memory),
		TEST(test_matmul),
		TEST(test_matmul_paths),
		TEST(test_matmul_half),
		TEST(test_binary),
		TEST(test_binary_half),
		TEST(test_binary_int),
		TEST(test_binary_int_edges),
		TEST(test_div_by_zero),
		TEST(test_unary),
		TEST(test_half_rounding),
		TEST(test_softmax),
		TEST(test_softmax_masked),
		TEST(test_norms),
		TEST(test_embedding),
		TEST(test_embedding_out_of_range),
		TEST(test_reshape),
		TEST(test_permute),
		TEST(test_slice),
		TEST(test_concat),
		TEST(test_attention),
		TEST(test_attention_tokens),
		TEST(test_attention_varlen),
		TEST(test_attention_no_keys),
		TEST(test_argmax),
		TEST(test_sample),
		TEST(test_threads_agree),
		TEST(test_errors),
		TEST(test_gpt2_block),
	};

	return cmocka_run_group_tests(tests, setup_backend, teardown_backend);
}
