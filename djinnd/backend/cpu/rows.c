// SPDX-License-Identifier: MIT
/*
 * Row kernels: SOFTMAX, LAYERNORM, RMSNORM, ARGMAX over the last dim, and
 * ATTENTION over the rows of its queries (or, with many queries a head,
 * head by head through sgemm). Each row is independent, so the pool
 * takes rows in chunks of about CPU_GRAIN elements' work.
 *
 * Sums over a row run in double (four partial sums, so the adds
 * overlap): a row of 50257 logits or 4096 channels keeps f32 accuracy.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Sum of @x[n] in double: four partial sums, so that the adds overlap. */
static double sum_f64(const float *x, size_t n)
{
	double s[4] = { 0 };
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		for (size_t k = 0; k < 4; k++)
			s[k] += x[i + k];
	for (; i < n; i++)
		s[0] += x[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Rows per chunk so that a chunk does at least CPU_GRAIN units of work. */
static size_t row_grain(size_t per_row)
{
	return per_row >= CPU_GRAIN ? 1 : CPU_GRAIN / (per_row ? per_row : 1);
}

/* ---------------------------------------------------------------------- */
/* Softmax */

struct row_job {
	float *out;
	const float *x, *gamma, *beta;
	size_t C;
	float eps;
};

/* out = exp(x - max) / sum(exp(x - max)), row by row; x, out (rows, C) */
CPU_SIMD static int softmax_rows(void *arg, size_t lo, size_t hi)
{
	const struct row_job *j = arg;
	size_t C = j->C;

	for (size_t r = lo; r < hi; r++) {
		const float *x = j->x + r * C;
		float *o = j->out + r * C;
		float max = x[0], inv;

		for (size_t i = 1; i < C; i++)
			max = x[i] > max ? x[i] : max;
		for (size_t i = 0; i < C; i++)
			o[i] = djinn_expf(x[i] - max);
		inv = (float)(1.0 / sum_f64(o, C));
		for (size_t i = 0; i < C; i++)
			o[i] *= inv;
	}
	return 0;
}

int cpu_softmax(struct cpu_pool *p, float *out, const float *x, size_t rows,
		size_t C)
{
	struct row_job j = { .out = out, .x = x, .C = C };

	if (!C)
		return 0;
	/* an exp costs about as much as four elementwise ops */
	return cpu_parallel_for(p, rows, row_grain(4 * C), softmax_rows, &j);
}

/* ---------------------------------------------------------------------- */
/* LayerNorm, RMSNorm */

/* Sum of (x[i] - m)^2, in double */
static double sq_dev_f64(const float *x, size_t C, double m)
{
	double s[4] = { 0 };
	size_t i = 0;

	for (; i + 4 <= C; i += 4)
		for (size_t k = 0; k < 4; k++)
			s[k] += (x[i + k] - m) * (x[i + k] - m);
	for (; i < C; i++)
		s[0] += (x[i] - m) * (x[i] - m);
	return (s[0] + s[1]) + (s[2] + s[3]);
}

/*
 * LayerNorm: out = (x - mean) / sqrt(var + eps) * gamma + beta, var biased;
 * RMSNorm (no beta): out = x / sqrt(mean(x^2) + eps) * gamma.
 * x, out (rows, C); gamma, beta (C)
 */
CPU_SIMD static int norm_rows(void *arg, size_t lo, size_t hi)
{
	const struct row_job *j = arg;
	const float *g = j->gamma, *b = j->beta;
	size_t C = j->C;

	for (size_t r = lo; r < hi; r++) {
		const float *x = j->x + r * C;
		float *o = j->out + r * C;
		double mean = b ? sum_f64(x, C) / (double)C : 0;
		double var = sq_dev_f64(x, C, mean) / (double)C;
		float rstd = (float)(1.0 / sqrt(var + j->eps));
		/* the mean in two floats: x - m_hi is exact for x near the
		 * mean, so a row with a small spread around a large mean
		 * keeps its accuracy */
		float m_hi = (float)mean, m_lo = (float)(mean - m_hi);

		if (b) {
			for (size_t i = 0; i < C; i++)
				o[i] = ((x[i] - m_hi) - m_lo) * rstd * g[i] +
				       b[i];
		} else {
			for (size_t i = 0; i < C; i++)
				o[i] = x[i] * rstd * g[i];
		}
	}
	return 0;
}

int cpu_norm(struct cpu_pool *p, float *out, const float *x, const float *gamma,
	     const float *beta, size_t rows, size_t C, float eps)
{
	struct row_job j = {
		.out = out,
		.x = x,
		.gamma = gamma,
		.beta = beta,
		.C = C,
		.eps = eps,
	};

	if (!C)
		return 0;
	return cpu_parallel_for(p, rows, row_grain(3 * C), norm_rows, &j);
}

/* ---------------------------------------------------------------------- */
/* Argmax */

struct argmax_job {
	unsigned int dtype;
	int64_t *out;
	const void *x;
	size_t C;
};

/* The first maximum; for floats a NaN counts as the maximum (PyTorch):
 * the first NaN wins. */
#define ARGMAX_ROW(T, x, C, best, ISNAN)                        \
	do {                                                    \
		T m = (x)[0];                                   \
		for (size_t i = 1; i < (C) && !ISNAN(m); i++) { \
			if ((x)[i] > m || ISNAN((x)[i])) {      \
				m = (x)[i];                     \
				best = (int64_t)i;              \
			}                                       \
		}                                               \
	} while (0)

#define NO_NAN(x) 0

/* out (rows) = the index of a maximum of each row of x (rows, C) */
static int argmax_rows(void *arg, size_t lo, size_t hi)
{
	const struct argmax_job *j = arg;
	size_t C = j->C;

	for (size_t r = lo; r < hi; r++) {
		int64_t best = 0;

		switch (j->dtype) {
		case DJINN_DTYPE_F32:
			ARGMAX_ROW(float, (const float *)j->x + r * C, C, best,
				   isnan);
			break;
		case DJINN_DTYPE_I32:
			ARGMAX_ROW(int32_t, (const int32_t *)j->x + r * C, C,
				   best, NO_NAN);
			break;
		case DJINN_DTYPE_I64:
			ARGMAX_ROW(int64_t, (const int64_t *)j->x + r * C, C,
				   best, NO_NAN);
			break;
		default:
			ARGMAX_ROW(uint8_t, (const uint8_t *)j->x + r * C, C,
				   best, NO_NAN);
			break;
		}
		j->out[r] = best;
	}
	return 0;
}

int cpu_argmax(struct cpu_pool *p, unsigned int dtype, int64_t *out,
	       const void *x, size_t rows, size_t C)
{
	struct argmax_job j = { dtype, out, x, C };

	if (!C)
		return 0;
	return cpu_parallel_for(p, rows, row_grain(C), argmax_rows, &j);
}

/* ---------------------------------------------------------------------- */
/* Attention */

/*
 * scale * q . k, with eight partial sums: the loop vectorizes without
 * reassociating anything. (Four keys to a pass, to read q once, came out
 * slower: the partial sums no longer fit in registers.)
 */
static float dot(const float *q, const float *k, size_t D, float scale)
{
	float acc[8] = { 0 }, s;
	size_t i = 0;

	for (; i + 8 <= D; i += 8)
		for (size_t l = 0; l < 8; l++)
			acc[l] += q[i + l] * k[i + l];
	s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
	    ((acc[2] + acc[6]) + (acc[3] + acc[7]));
	for (; i < D; i++)
		s += q[i] * k[i];
	return scale * s;
}

struct attn_job {
	const struct cpu_attn *a;
	float *out;
	const float *q, *k, *v;
};

/* The key/value head query head @h of batch @b reads */
static size_t attn_kvh(const struct cpu_attn *a, size_t h)
{
	size_t Hk = a->Hk ? a->Hk : a->H;

	return h / (a->H / Hk);
}

/* Key @s of key/value head @g of batch @b, and its value in *@val */
static const float *attn_key(const struct attn_job *j, size_t b, size_t g,
			     size_t s, const float **val)
{
	const struct cpu_attn *a = j->a;

	if (s < a->P) {
		*val = a->vc + s * a->cs + g * a->Dv;
		return a->kc + s * a->cs + g * a->D;
	}
	s -= a->P;
	*val = j->v + b * a->vs[0] + g * a->vs[1] + s * a->vs[2];
	return j->k + b * a->ks[0] + g * a->ks[1] + s * a->ks[2];
}

/*
 * Rows [lo, hi) of the B*H*T queries. For row (b, h, t):
 *   att[s] = scale * q[b, h, t] . key s   for s < n  (n = S, or
 *                                          t + S - T + 1 when causal)
 *   p = softmax(att)
 *   out[b, h, t] = sum_s p[s] value s
 */
CPU_SIMD static int attn_rows(void *arg, size_t lo, size_t hi)
{
	const struct attn_job *j = arg;
	const struct cpu_attn *a = j->a;
	size_t T = a->T, S = a->S, D = a->D, Dv = a->Dv;
	float *att = malloc(S * sizeof(float));

	if (!att)
		return -ENOMEM;
	for (size_t r = lo; r < hi; r++) {
		size_t b = r / T / a->H, h = r / T % a->H, t = r % T;
		size_t n = a->causal ? t + S - T + 1 : S;
		size_t g = attn_kvh(a, h);
		const float *q =
			j->q + b * a->qs[0] + h * a->qs[1] + t * a->qs[2];
		const float *vs[4];
		float *o = j->out + b * a->os[0] + h * a->os[1] + t * a->os[2];
		float max = -INFINITY, inv;
		size_t s;

		for (s = 0; s < n; s++)
			att[s] = dot(q, attn_key(j, b, g, s, &vs[0]), D,
				     a->scale);
		for (s = 0; s < n; s++)
			max = att[s] > max ? att[s] : max;
		for (s = 0; s < n; s++)
			att[s] = djinn_expf(att[s] - max);
		inv = (float)(1.0 / sum_f64(att, n));

		/* out = sum_s p[s] v[s], four rows of v to a pass over out */
		memset(o, 0, Dv * sizeof(float));
		for (s = 0; s + 4 <= n; s += 4) {
			float w0 = att[s] * inv, w1 = att[s + 1] * inv;
			float w2 = att[s + 2] * inv, w3 = att[s + 3] * inv;

			for (size_t i = 0; i < 4; i++)
				attn_key(j, b, g, s + i, &vs[i]);
			for (size_t i = 0; i < Dv; i++)
				o[i] += (w0 * vs[0][i] + w1 * vs[1][i]) +
					(w2 * vs[2][i] + w3 * vs[3][i]);
		}
		for (; s < n; s++) {
			float w = att[s] * inv;

			attn_key(j, b, g, s, &vs[0]);
			for (size_t i = 0; i < Dv; i++)
				o[i] += w * vs[0][i];
		}
	}
	free(att);
	return 0;
}

/*
 * Many queries a head (a prefill): the head's scores and its weighted sum
 * of values as single-threaded sgemms over the strided rows, heads
 * [lo, hi) of the B*H, the cache's keys (P) and the new ones (Sn) each
 * an sgemm:
 *   att (T, S) = scale * q (T, D) k^T,  softmax of each row's first n,
 *   the rest 0,  out (T, Dv) = att v (S, Dv).
 * The masked scores are computed and dropped: an sgemm does them faster
 * than a row at a time does only the rest.
 */
CPU_SIMD static int attn_heads(void *arg, size_t lo, size_t hi)
{
	const struct attn_job *j = arg;
	const struct cpu_attn *a = j->a;
	size_t T = a->T, S = a->S, D = a->D, Dv = a->Dv, P = a->P;
	size_t Sn = S - P;
	float *att = malloc(T * S * sizeof(float));

	if (!att)
		return -ENOMEM;
	for (size_t bh = lo; bh < hi; bh++) {
		size_t b = bh / a->H, h = bh % a->H, g = attn_kvh(a, h);
		const float *q = j->q + b * a->qs[0] + h * a->qs[1];
		float *o = j->out + b * a->os[0] + h * a->os[1];
		const float *k = j->k + b * a->ks[0] + g * a->ks[1];
		const float *v = j->v + b * a->vs[0] + g * a->vs[1];

		if (P)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    (int)T, (int)P, (int)D, a->scale, q,
				    (int)a->qs[2], a->kc + g * D, (int)a->cs,
				    0.0f, att, (int)S);
		if (Sn)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    (int)T, (int)Sn, (int)D, a->scale, q,
				    (int)a->qs[2], k, (int)a->ks[2], 0.0f,
				    att + P, (int)S);
		for (size_t t = 0; t < T; t++) {
			size_t n = a->causal ? t + S - T + 1 : S;
			float *r = att + t * S, max = -INFINITY, inv;

			for (size_t s = 0; s < n; s++)
				max = r[s] > max ? r[s] : max;
			for (size_t s = 0; s < n; s++)
				r[s] = djinn_expf(r[s] - max);
			inv = (float)(1.0 / sum_f64(r, n));
			for (size_t s = 0; s < n; s++)
				r[s] *= inv;
			for (size_t s = n; s < S; s++)
				r[s] = 0.0f;
		}
		if (P)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    (int)T, (int)Dv, (int)P, 1.0f, att, (int)S,
				    a->vc + g * Dv, (int)a->cs, 0.0f, o,
				    (int)a->os[2]);
		if (Sn)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    (int)T, (int)Dv, (int)Sn, 1.0f, att + P,
				    (int)S, v, (int)a->vs[2], P ? 1.0f : 0.0f,
				    o, (int)a->os[2]);
	}
	free(att);
	return 0;
}

/* Queries a head from which attn_heads() beats attn_rows() */
#define ATTN_GEMM_T 16

int cpu_attn_init(struct cpu_attn *a, const struct djinn_node *node,
		  const struct dj_tensor *in, const struct djinn_tensor_desc *o,
		  char *msg, size_t msglen)
{
	const struct djinn_p_attention *p = &node->params.attention;
	const struct djinn_tensor_desc *q = &in[0].desc, *k = &in[1].desc;
	const struct djinn_tensor_desc *v = &in[2].desc;
	bool tok = p->layout == DJINN_ATTN_TOKENS;
	unsigned int nd = tok ? 3 : 4, ti = tok ? 0 : 2; /* T's dim; H's 1 */
	size_t P = 0, cs = 0;

	if (p->layout > DJINN_ATTN_TOKENS || (node->nr_inputs > 3 && !tok))
		return errmsg(msg, msglen, -EINVAL, "layout %u with %u inputs",
			      p->layout, node->nr_inputs);
	if (q->ndim != nd || k->ndim != nd || v->ndim != nd || o->ndim != nd)
		return errmsg(msg, msglen, -EINVAL, "q, k, v are not %u-d", nd);
	if (node->nr_inputs > 3) {
		const struct djinn_tensor_desc *c = &in[3].desc;

		if (c->dtype != q->dtype || c->ndim != 3 ||
		    c->dims[2] != k->dims[1] * k->dims[2] ||
		    v->dims[2] != k->dims[2] || p->cache_k >= c->dims[1] ||
		    p->cache_v >= c->dims[1])
			return errmsg(msg, msglen, -EINVAL,
				      "the cache does not fit k and v");
		P = c->dims[0];
		cs = c->dims[1] * c->dims[2];
	} else if (p->cache_k || p->cache_v) {
		return errmsg(msg, msglen, -EINVAL, "cache slots, no cache");
	}
	*a = (struct cpu_attn){
		.B = tok ? 1 : q->dims[0],
		.H = q->dims[1],
		.T = q->dims[ti],
		.S = P + k->dims[ti],
		.D = q->dims[nd - 1],
		.Dv = v->dims[nd - 1],
		.Hk = k->dims[1],
		.P = P,
		.cs = cs,
		.scale = p->scale,
		.causal = p->causal,
	};
	if ((!tok && (k->dims[0] != a->B || v->dims[0] != a->B ||
		      o->dims[0] != a->B || v->dims[2] != a->S)) ||
	    (tok && (v->dims[0] != a->S - P || o->dims[0] != a->T)) || !a->Hk ||
	    a->H % a->Hk || v->dims[1] != a->Hk || k->dims[nd - 1] != a->D ||
	    o->dims[1] != a->H || o->dims[ti] != a->T ||
	    o->dims[nd - 1] != a->Dv)
		return errmsg(msg, msglen, -EINVAL,
			      "q, k, v, result shapes do not agree");
	if (p->causal > 1 || (a->causal && a->T > a->S))
		return errmsg(msg, msglen, -EINVAL,
			      "causal %u with %zu queries, %zu keys", p->causal,
			      a->T, a->S);
	if (!isfinite(a->scale))
		return errmsg(msg, msglen, -EINVAL, "scale %g",
			      (double)a->scale);
	if (a->scale == 0.0f)
		a->scale = a->D ? 1.0f / sqrtf((float)a->D) : 1.0f;
	/* strides in elements: (b, h, t) for q and out, (b, g, s) for k, v */
	if (tok) {
		size_t qs[3] = { 0, a->D, a->H * a->D };
		size_t ks[3] = { 0, a->D, a->Hk * a->D };
		size_t vs[3] = { 0, a->Dv, a->Hk * a->Dv };
		size_t os[3] = { 0, a->Dv, a->H * a->Dv };

		memcpy(a->qs, qs, sizeof(qs));
		memcpy(a->ks, ks, sizeof(ks));
		memcpy(a->vs, vs, sizeof(vs));
		memcpy(a->os, os, sizeof(os));
	} else {
		size_t qs[3] = { a->H * a->T * a->D, a->T * a->D, a->D };
		size_t ks[3] = { a->Hk * a->S * a->D, a->S * a->D, a->D };
		size_t vs[3] = { a->Hk * a->S * a->Dv, a->S * a->Dv, a->Dv };
		size_t os[3] = { a->H * a->T * a->Dv, a->T * a->Dv, a->Dv };

		memcpy(a->qs, qs, sizeof(qs));
		memcpy(a->ks, ks, sizeof(ks));
		memcpy(a->vs, vs, sizeof(vs));
		memcpy(a->os, os, sizeof(os));
	}
	return 0;
}

int cpu_attention(struct cpu_pool *p, float *out, const float *q,
		  const float *k, const float *v, const struct cpu_attn *a)
{
	struct attn_job j = { a, out, q, k, v };

	if (a->causal && a->T > a->S)
		return -EINVAL;
	if (!a->S) { /* no keys: nothing to attend to */
		for (size_t r = 0; r < a->B * a->H * a->T; r++)
			memset(out + r / a->T / a->H * a->os[0] +
				       r / a->T % a->H * a->os[1] +
				       r % a->T * a->os[2],
			       0, a->Dv * sizeof(float));
		return 0;
	}
	/* BLAS takes int dims and leading dims */
	if (a->T >= ATTN_GEMM_T && a->T <= INT_MAX && a->S <= INT_MAX &&
	    a->D <= INT_MAX && a->Dv <= INT_MAX && a->qs[2] <= INT_MAX &&
	    a->ks[2] <= INT_MAX && a->vs[2] <= INT_MAX && a->os[2] <= INT_MAX &&
	    a->cs <= INT_MAX && a->T * a->S <= ((size_t)1 << 28))
		return cpu_parallel_for(p, a->B * a->H, 1, attn_heads, &j);
	return cpu_parallel_for(p, a->B * a->H * a->T,
				row_grain(a->S * (a->D + a->Dv)), attn_rows,
				&j);
}

/* ---------------------------------------------------------------------- */
/* Attention of many contexts (DJINN_ATTN_VARLEN, lib/graph.h) */

int cpu_varlen_init(struct cpu_attn *a, size_t *row0,
		    const struct djinn_node *node, const struct dj_tensor *in,
		    const struct djinn_tensor_desc *o, char *msg, size_t msglen)
{
	const struct djinn_p_attention *p = &node->params.attention;
	const struct djinn_tensor_desc *q = &in[0].desc, *k = &in[1].desc;
	const struct djinn_tensor_desc *t = &in[3].desc;
	size_t es = djinn_dtype_size(q->dtype), R = 0, n;
	const int64_t *tab = in[3].host;
	uint64_t slots;

	if (node->nr_inputs != 4 || !tab || t->dtype != DJINN_DTYPE_I64 ||
	    t->ndim != 2 || t->dims[1] != DJINN_VARLEN_COLS || !t->dims[0] ||
	    t->dims[0] > DJINN_VARLEN_MAX)
		return errmsg(msg, msglen, -EINVAL,
			      "varlen attention: no table of contexts in host "
			      "memory");
	if (q->ndim != 3 || k->ndim != 3 || o->ndim != 3 ||
	    !djinn_desc_same_shape(k, &in[2].desc) ||
	    !djinn_desc_same_shape(q, o) || k->dims[0] != q->dims[0] ||
	    k->dims[2] != q->dims[2] || !k->dims[1] || q->dims[1] % k->dims[1])
		return errmsg(msg, msglen, -EINVAL,
			      "q, k, v, result shapes do not agree");
	if (p->causal != 1 || !isfinite(p->scale))
		return errmsg(msg, msglen, -EINVAL, "causal %u, scale %g",
			      p->causal, (double)p->scale);
	n = t->dims[0];
	slots = (uint64_t)(p->cache_k > p->cache_v ? p->cache_k : p->cache_v) +
		1;
	for (size_t i = 0; i < n; i++) {
		const int64_t *r = tab + i * DJINN_VARLEN_COLS;
		int64_t T = r[DJINN_VARLEN_T], P = r[DJINN_VARLEN_P];
		int64_t cs = r[DJINN_VARLEN_STRIDE];
		uint64_t c = (uint64_t)r[DJINN_VARLEN_CACHE];

		if (T < 1 || (uint64_t)T > q->dims[0] - R || P < 0 ||
		    P > ((int64_t)1 << 40) || (P && (!c || c % es)) ||
		    (P && (cs < 0 ||
			   (uint64_t)cs < slots * k->dims[1] * k->dims[2])))
			return errmsg(msg, msglen, -EINVAL,
				      "varlen attention: context %zu of %zu: "
				      "T %lld, P %lld, stride %lld",
				      i, n, (long long)T, (long long)P,
				      (long long)cs);
		row0[i] = R;
		R += (size_t)T;
		a[i] = (struct cpu_attn){
			.B = 1,
			.H = q->dims[1],
			.T = (size_t)T,
			.S = (size_t)(P + T),
			.D = q->dims[2],
			.Dv = q->dims[2],
			.Hk = k->dims[1],
			.P = (size_t)P,
			.cs = (size_t)cs,
			.qs = { 0, q->dims[2], q->dims[1] * q->dims[2] },
			.ks = { 0, k->dims[2], k->dims[1] * k->dims[2] },
			.vs = { 0, k->dims[2], k->dims[1] * k->dims[2] },
			.os = { 0, q->dims[2], q->dims[1] * q->dims[2] },
			.scale = p->scale != 0.0f ?
					 p->scale :
					 1.0f / sqrtf((float)q->dims[2]),
			.causal = true,
		};
	}
	if (R != q->dims[0])
		return errmsg(msg, msglen, -EINVAL,
			      "varlen attention: the contexts have %zu rows, "
			      "q %llu",
			      R, q->dims[0]);
	return 0;
}

/* The row loop over every context that runs row by row: rows [lo, hi)
 * of their H T each, in order. */
struct varlen_job {
	const struct attn_job *j;
	const size_t *end; /* context i's rows end at end[i] */
	size_t n;
};

static int varlen_rows(void *arg, size_t lo, size_t hi)
{
	const struct varlen_job *v = arg;
	size_t i = 0, at = 0;
	int ret = 0;

	while (i < v->n && v->end[i] <= lo)
		at = v->end[i++];
	for (; i < v->n && lo < hi && !ret; at = v->end[i++]) {
		size_t e = v->end[i] < hi ? v->end[i] : hi;

		ret = attn_rows((void *)&v->j[i], lo - at, e - at);
		lo = e;
	}
	return ret;
}

int cpu_attention_varlen(struct cpu_pool *p, float *out, const float *q,
			 const float *k, const float *v,
			 const struct cpu_attn *a, const size_t *row0, size_t n)
{
	struct attn_job j[DJINN_VARLEN_MAX];
	size_t end[DJINN_VARLEN_MAX], nr = 0, rows = 0, work = 0;
	struct varlen_job vj = { j, end, 0 };
	int ret = 0;

	for (size_t i = 0; i < n && i < DJINN_VARLEN_MAX && !ret; i++) {
		size_t qo = row0[i] * a[i].qs[2], ko = row0[i] * a[i].ks[2];

		if (a[i].T >= ATTN_GEMM_T) {
			/* a prefill: head by head, as alone */
			ret = cpu_attention(p, out + qo, q + qo, k + ko, v + ko,
					    &a[i]);
			continue;
		}
		j[nr] = (struct attn_job){ &a[i], out + qo, q + qo, k + ko,
					   v + ko };
		rows += a[i].H * a[i].T;
		work += a[i].H * a[i].T * a[i].S * (a[i].D + a[i].Dv);
		end[nr++] = rows;
	}
	vj.n = nr;
	if (ret || !rows)
		return ret;
	return cpu_parallel_for(p, rows, row_grain(work / rows), varlen_rows,
				&vj);
}
