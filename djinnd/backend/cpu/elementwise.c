// SPDX-License-Identifier: MIT
/*
 * Elementwise kernels: ADD, SUB, MUL, DIV with numpy broadcasting, and
 * SCALE, GELU, RELU, SILU. Flat loops over the result, cut into chunks
 * of at least CPU_GRAIN elements across the pool.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu.h"

/* ---------------------------------------------------------------------- */
/* Broadcasting */

int cpu_bcast_init(struct cpu_bcast *bc, const struct djinn_tensor_desc *a,
		   const struct djinn_tensor_desc *b,
		   const struct djinn_tensor_desc *out, char *msg,
		   size_t msglen)
{
	unsigned int no = a->ndim > b->ndim ? a->ndim : b->ndim;
	uint64_t dims[DJINN_MAX_DIMS], sa[DJINN_MAX_DIMS], sb[DJINN_MAX_DIMS];
	uint64_t stra = 1, strb = 1;

	if (no > DJINN_MAX_DIMS || out->ndim != no)
		return errmsg(msg, msglen, -EINVAL,
			      "result has %u dims, inputs %u and %u", out->ndim,
			      a->ndim, b->ndim);
	/* k counts from the last dim; strides of a and b as they are */
	for (unsigned int k = 0; k < no; k++) {
		unsigned int i = no - 1 - k;
		uint64_t da = k < a->ndim ? a->dims[a->ndim - 1 - k] : 1;
		uint64_t db = k < b->ndim ? b->dims[b->ndim - 1 - k] : 1;
		uint64_t d = da == 1 ? db : da;

		if (da != db && da != 1 && db != 1)
			return errmsg(msg, msglen, -EINVAL,
				      "dims %llu and %llu do not broadcast",
				      (unsigned long long)da,
				      (unsigned long long)db);
		if (out->dims[i] != d)
			return errmsg(msg, msglen, -EINVAL,
				      "result dim %u is %llu, not %llu", i,
				      (unsigned long long)out->dims[i],
				      (unsigned long long)d);
		dims[i] = d;
		sa[i] = da == 1 ? 0 : stra;
		sb[i] = db == 1 ? 0 : strb;
		stra *= da;
		strb *= db;
	}

	/* Drop size-1 dims; merge a dim into the one outside it when both
	 * inputs step through the pair as through one dim. */
	bc->nd = 0;
	bc->n = 1;
	for (unsigned int i = 0; i < no; i++) {
		unsigned int j = bc->nd - 1;

		if (dims[i] == 1)
			continue;
		bc->n *= dims[i];
		if (bc->nd && bc->sa[j] == sa[i] * dims[i] &&
		    bc->sb[j] == sb[i] * dims[i]) {
			bc->dims[j] *= dims[i];
			bc->sa[j] = sa[i];
			bc->sb[j] = sb[i];
			continue;
		}
		bc->dims[bc->nd] = dims[i];
		bc->sa[bc->nd] = sa[i];
		bc->sb[bc->nd] = sb[i];
		bc->nd++;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Binary ops */

/*
 * One run of the innermost dim: o[i] = EXPR(x, y) for n elements, where
 * a and b each step by one element (stride 1) or stand still (stride 0).
 * Four loops, so that each one vectorizes.
 */
#define BIN_RUN(T, o, a, sa, b, sb, n, EXPR)                  \
	do {                                                  \
		if ((sa) && (sb)) {                           \
			for (size_t i = 0; i < (n); i++) {    \
				T x = (a)[i], y = (b)[i];     \
				(o)[i] = (EXPR);              \
			}                                     \
		} else if (sa) {                              \
			T y = (b)[0];                         \
			for (size_t i = 0; i < (n); i++) {    \
				T x = (a)[i];                 \
				(o)[i] = (EXPR);              \
			}                                     \
		} else if (sb) {                              \
			T x = (a)[0];                         \
			for (size_t i = 0; i < (n); i++) {    \
				T y = (b)[i];                 \
				(o)[i] = (EXPR);              \
			}                                     \
		} else {                                      \
			T x = (a)[0], y = (b)[0], r = (EXPR); \
			for (size_t i = 0; i < (n); i++)      \
				(o)[i] = r;                   \
		}                                             \
	} while (0)

/* Integers wrap: compute in the unsigned type U. Division truncates;
 * DIV is the expression for it. */
#define BIN_INT(T, U, op, o, a, sa, b, sb, n, DIV)                        \
	do {                                                              \
		switch (op) {                                             \
		case DJINN_GOP_ADD:                                       \
			BIN_RUN(T, o, a, sa, b, sb, n, (T)((U)x + (U)y)); \
			break;                                            \
		case DJINN_GOP_SUB:                                       \
			BIN_RUN(T, o, a, sa, b, sb, n, (T)((U)x - (U)y)); \
			break;                                            \
		case DJINN_GOP_MUL:                                       \
			BIN_RUN(T, o, a, sa, b, sb, n, (T)((U)x * (U)y)); \
			break;                                            \
		default:                                                  \
			BIN_RUN(T, o, a, sa, b, sb, n, DIV);              \
			break;                                            \
		}                                                         \
	} while (0)

/* x / -1 is a negation, so that INT_MIN / -1 wraps instead of trapping. */
#define SIGNED_DIV(T, U) (T)(y == -1 ? (U)0 - (U)x : (U)(x / y))

static void bin_f32(unsigned int op, float *o, const float *a, uint64_t sa,
		    const float *b, uint64_t sb, size_t n)
{
	switch (op) {
	case DJINN_GOP_ADD:
		BIN_RUN(float, o, a, sa, b, sb, n, x + y);
		break;
	case DJINN_GOP_SUB:
		BIN_RUN(float, o, a, sa, b, sb, n, x - y);
		break;
	case DJINN_GOP_MUL:
		BIN_RUN(float, o, a, sa, b, sb, n, (x) * (y));
		break;
	default:
		BIN_RUN(float, o, a, sa, b, sb, n, x / y);
		break;
	}
}

static void bin_i32(unsigned int op, int32_t *o, const int32_t *a, uint64_t sa,
		    const int32_t *b, uint64_t sb, size_t n)
{
	BIN_INT(int32_t, uint32_t, op, o, a, sa, b, sb, n,
		SIGNED_DIV(int32_t, uint32_t));
}

static void bin_i64(unsigned int op, int64_t *o, const int64_t *a, uint64_t sa,
		    const int64_t *b, uint64_t sb, size_t n)
{
	BIN_INT(int64_t, uint64_t, op, o, a, sa, b, sb, n,
		SIGNED_DIV(int64_t, uint64_t));
}

static void bin_u8(unsigned int op, uint8_t *o, const uint8_t *a, uint64_t sa,
		   const uint8_t *b, uint64_t sb, size_t n)
{
	BIN_INT(uint8_t, unsigned int, op, o, a, sa, b, sb, n,
		(uint8_t)(x / y));
}

CPU_SIMD static void bin_run(unsigned int op, unsigned int dtype, void *o,
			     const void *a, uint64_t sa, const void *b,
			     uint64_t sb, size_t n)
{
	switch (dtype) {
	case DJINN_DTYPE_F32:
		bin_f32(op, o, a, sa, b, sb, n);
		break;
	case DJINN_DTYPE_I32:
		bin_i32(op, o, a, sa, b, sb, n);
		break;
	case DJINN_DTYPE_I64:
		bin_i64(op, o, a, sa, b, sb, n);
		break;
	default:
		bin_u8(op, o, a, sa, b, sb, n);
		break;
	}
}

struct bin_job {
	unsigned int op, dtype;
	size_t esize;
	uint8_t *out;
	const uint8_t *a, *b;
	const struct cpu_bcast *bc;
};

/* Result elements [lo, hi): runs along the innermost dim. */
static int bin_range(void *arg, size_t lo, size_t hi)
{
	const struct bin_job *j = arg;
	const struct cpu_bcast *bc = j->bc;
	uint64_t idx[DJINN_MAX_DIMS], oa = 0, ob = 0, rem = lo;
	size_t es = j->esize, pos = lo;
	unsigned int in;

	if (!bc->nd) {
		bin_run(j->op, j->dtype, j->out, j->a, 0, j->b, 0, 1);
		return 0;
	}
	in = bc->nd - 1;
	for (unsigned int k = bc->nd; k-- > 0;) {
		idx[k] = rem % bc->dims[k];
		rem /= bc->dims[k];
		oa += idx[k] * bc->sa[k];
		ob += idx[k] * bc->sb[k];
	}
	while (pos < hi) {
		size_t run = bc->dims[in] - idx[in];

		if (run > hi - pos)
			run = hi - pos;
		bin_run(j->op, j->dtype, j->out + pos * es, j->a + oa * es,
			bc->sa[in], j->b + ob * es, bc->sb[in], run);
		pos += run;
		idx[in] += run;
		oa += run * bc->sa[in];
		ob += run * bc->sb[in];
		/* carry into the outer dims */
		for (unsigned int k = in; k > 0 && idx[k] == bc->dims[k]; k--) {
			oa -= idx[k] * bc->sa[k];
			ob -= idx[k] * bc->sb[k];
			idx[k] = 0;
			idx[k - 1]++;
			oa += bc->sa[k - 1];
			ob += bc->sb[k - 1];
		}
	}
	return 0;
}

int cpu_binary(struct cpu_pool *p, unsigned int op, unsigned int dtype,
	       void *out, const void *a, const void *b,
	       const struct cpu_bcast *bc)
{
	struct bin_job j = {
		.op = op,
		.dtype = dtype,
		.out = out,
		.a = a,
		.b = b,
		.bc = bc,
	};

	switch (dtype) {
	case DJINN_DTYPE_F32:
	case DJINN_DTYPE_I32:
		j.esize = 4;
		break;
	case DJINN_DTYPE_I64:
		j.esize = 8;
		break;
	case DJINN_DTYPE_U8:
		j.esize = 1;
		break;
	default:
		return -EOPNOTSUPP;
	}
	return cpu_parallel_for(p, bc->n, CPU_GRAIN, bin_range, &j);
}

bool cpu_any_zero(unsigned int dtype, const void *x, size_t n)
{
	const int32_t *i32 = x;
	const int64_t *i64 = x;
	const uint8_t *u8 = x;
	size_t zeros = 0;

	/* no early exit: a branch-free count vectorizes */
	switch (dtype) {
	case DJINN_DTYPE_I32:
		for (size_t i = 0; i < n; i++)
			zeros += !i32[i];
		break;
	case DJINN_DTYPE_I64:
		for (size_t i = 0; i < n; i++)
			zeros += !i64[i];
		break;
	case DJINN_DTYPE_U8:
		for (size_t i = 0; i < n; i++)
			zeros += !u8[i];
		break;
	}
	return zeros;
}

/* ---------------------------------------------------------------------- */
/* Unary ops */

struct unary_job {
	unsigned int op;
	float alpha;
	float *out;
	const float *x;
};

/* sqrt(2 / pi), for GELU's tanh approximation */
#define GELU_K 0.7978845608028654f

CPU_SIMD static int unary_range(void *arg, size_t lo, size_t hi)
{
	const struct unary_job *j = arg;
	const float *x = j->x;
	float *o = j->out, alpha = j->alpha;

	switch (j->op) {
	case DJINN_GOP_SCALE:
		for (size_t i = lo; i < hi; i++)
			o[i] = x[i] * alpha;
		break;
	case DJINN_GOP_GELU:
		/*
		 * 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
		 * computed as x sigmoid(2u), which is the same: it needs
		 * only an exp, and 1 + tanh(u) does not cancel for x < 0.
		 */
		for (size_t i = lo; i < hi; i++) {
			float v = x[i];
			float u = GELU_K * (v + 0.044715f * v * v * v);

			o[i] = v / (1.0f + djinn_expf(-2.0f * u));
		}
		break;
	case DJINN_GOP_RELU:
		/* NaN stays NaN, as in PyTorch */
		for (size_t i = lo; i < hi; i++)
			o[i] = x[i] < 0.0f ? 0.0f : x[i];
		break;
	case DJINN_GOP_SILU:
		/* x sigmoid(x) */
		for (size_t i = lo; i < hi; i++)
			o[i] = x[i] / (1.0f + djinn_expf(-x[i]));
		break;
	default:
		return -EOPNOTSUPP;
	}
	return 0;
}

int cpu_unary(struct cpu_pool *p, unsigned int op, float *out, const float *x,
	      size_t n, float alpha)
{
	struct unary_job j = { op, alpha, out, x };

	return cpu_parallel_for(p, n, CPU_GRAIN, unary_range, &j);
}
