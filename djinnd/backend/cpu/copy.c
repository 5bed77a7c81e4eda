// SPDX-License-Identifier: MIT
/*
 * Byte movers: RESHAPE (a copy), PERMUTE, SLICE and CONCAT (rows of
 * bytes), EMBEDDING (a gather of rows). They look at element sizes only,
 * so they work for every dtype.
 */
#include <errno.h>
#include <string.h>

#include "cpu.h"

/*
 * Bytes a chunk moves at least. A copy is bound by memory bandwidth, which
 * one thread nearly fills, and waking a worker costs tens of
 * microseconds in a virtual machine: a decode step's copies of a layer's
 * cache (half a megabyte at 192 tokens) ran faster on one thread.
 */
#define COPY_GRAIN (1 << 20)

/* ---------------------------------------------------------------------- */
/* Copies */

struct copy_job {
	uint8_t *dst;
	const uint8_t *src;
	size_t dst_stride, src_stride, len;
};

static int copy_bytes(void *arg, size_t lo, size_t hi)
{
	const struct copy_job *j = arg;

	memcpy(j->dst + lo, j->src + lo, hi - lo);
	return 0;
}

int cpu_copy(struct cpu_pool *p, void *dst, const void *src, size_t bytes)
{
	struct copy_job j = { .dst = dst, .src = src };

	if (dst == src)
		return 0;
	return cpu_parallel_for(p, bytes, COPY_GRAIN, copy_bytes, &j);
}

static int copy_rows(void *arg, size_t lo, size_t hi)
{
	const struct copy_job *j = arg;

	for (size_t r = lo; r < hi; r++)
		memcpy(j->dst + r * j->dst_stride, j->src + r * j->src_stride,
		       j->len);
	return 0;
}

int cpu_copy_rows(struct cpu_pool *p, void *dst, size_t dst_stride,
		  const void *src, size_t src_stride, size_t rows, size_t len)
{
	struct copy_job j = { dst, src, dst_stride, src_stride, len };

	if (!len)
		return 0;
	return cpu_parallel_for(p, rows,
				len >= COPY_GRAIN ? 1 : COPY_GRAIN / len,
				copy_rows, &j);
}

/* ---------------------------------------------------------------------- */
/* Permute */

/*
 * struct perm_job - the result walked in order, with the input stride
 * (in elements) of each of its dims; size-1 dims dropped and dims that
 * stay contiguous in the input merged.
 */
struct perm_job {
	uint8_t *out;
	const uint8_t *in;
	size_t esize;
	unsigned int nd;
	uint64_t dims[DJINN_MAX_DIMS], stride[DJINN_MAX_DIMS];
};

/* n elements of @es bytes from src, @st elements apart, to dst */
static void gather(uint8_t *dst, const uint8_t *src, uint64_t st, size_t es,
		   size_t n)
{
	switch (es) {
	case 1:
		for (size_t i = 0; i < n; i++)
			dst[i] = src[i * st];
		break;
	case 2:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * st];
		break;
	case 4:
		for (size_t i = 0; i < n; i++)
			((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * st];
		break;
	case 8:
		for (size_t i = 0; i < n; i++)
			((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * st];
		break;
	default:
		for (size_t i = 0; i < n; i++)
			memcpy(dst + i * es, src + i * st * es, es);
		break;
	}
}

/* Result elements [lo, hi): runs along the innermost dim. */
CPU_SIMD static int perm_range(void *arg, size_t lo, size_t hi)
{
	const struct perm_job *j = arg;
	uint64_t idx[DJINN_MAX_DIMS], off = 0, rem = lo;
	unsigned int in = j->nd - 1;
	size_t es = j->esize, pos = lo;

	for (unsigned int k = j->nd; k-- > 0;) {
		idx[k] = rem % j->dims[k];
		rem /= j->dims[k];
		off += idx[k] * j->stride[k];
	}
	while (pos < hi) {
		size_t run = j->dims[in] - idx[in];

		if (run > hi - pos)
			run = hi - pos;
		if (j->stride[in] == 1)
			memcpy(j->out + pos * es, j->in + off * es, run * es);
		else
			gather(j->out + pos * es, j->in + off * es,
			       j->stride[in], es, run);
		pos += run;
		idx[in] += run;
		off += run * j->stride[in];
		for (unsigned int k = in; k > 0 && idx[k] == j->dims[k]; k--) {
			off -= idx[k] * j->stride[k];
			idx[k] = 0;
			idx[k - 1]++;
			off += j->stride[k - 1];
		}
	}
	return 0;
}

int cpu_permute(struct cpu_pool *p, void *out, const void *in, size_t esize,
		unsigned int ndim, const __u64 *dims, const int32_t *perm)
{
	struct perm_job j = { .out = out, .in = in, .esize = esize };
	uint64_t istride[DJINN_MAX_DIMS], s = 1, n = 1;

	for (unsigned int k = ndim; k-- > 0;) {
		istride[k] = s;
		s *= dims[k];
	}
	for (unsigned int k = 0; k < ndim; k++) {
		uint64_t d = dims[perm[k]], st = istride[perm[k]];
		unsigned int o = j.nd - 1;

		n *= d;
		if (d == 1)
			continue;
		if (j.nd && j.stride[o] == st * d) {
			j.dims[o] *= d;
			j.stride[o] = st;
			continue;
		}
		j.dims[j.nd] = d;
		j.stride[j.nd] = st;
		j.nd++;
	}
	if (!n)
		return 0;
	/* the identity, once merged: one dim, stride 1 (or one element) */
	if (j.nd == 0 || (j.nd == 1 && j.stride[0] == 1))
		return cpu_copy(p, out, in, n * esize);
	return cpu_parallel_for(p, n, CPU_GRAIN, perm_range, &j);
}

/* ---------------------------------------------------------------------- */
/* Embedding */

struct embed_job {
	uint8_t *out;
	const uint8_t *table;
	size_t row;
	const void *ids;
	bool i64;
};

static int embed_rows(void *arg, size_t lo, size_t hi)
{
	const struct embed_job *j = arg;

	for (size_t i = lo; i < hi; i++) {
		uint64_t id = j->i64 ? (uint64_t)((const int64_t *)j->ids)[i] :
				       (uint64_t)((const int32_t *)j->ids)[i];

		memcpy(j->out + i * j->row, j->table + id * j->row, j->row);
	}
	return 0;
}

int cpu_embed_check(const void *ids, unsigned int id_dtype, size_t n,
		    uint64_t V, char *msg, size_t msglen)
{
	bool i64 = id_dtype == DJINN_DTYPE_I64;

	for (size_t i = 0; i < n; i++) {
		int64_t id = i64 ? ((const int64_t *)ids)[i] :
				   ((const int32_t *)ids)[i];

		if (id < 0 || (uint64_t)id >= V)
			return errmsg(msg, msglen, -EINVAL,
				      "id %lld out of range %llu (at %zu)",
				      (long long)id, (unsigned long long)V, i);
	}
	return 0;
}

int cpu_embedding(struct cpu_pool *p, void *out, const void *table, size_t row,
		  uint64_t V, const void *ids, unsigned int id_dtype, size_t n,
		  char *msg, size_t msglen)
{
	struct embed_job j = { out, table, row, ids,
			       id_dtype == DJINN_DTYPE_I64 };
	int ret = cpu_embed_check(ids, id_dtype, n, V, msg, msglen);

	if (ret)
		return ret;
	if (!row)
		return 0;
	return cpu_parallel_for(p, n, row >= COPY_GRAIN ? 1 : COPY_GRAIN / row,
				embed_rows, &j);
}
