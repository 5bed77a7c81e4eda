// SPDX-License-Identifier: MIT
/*
 * Streamed models: the host copy of the streamed layers, the ring, and
 * passes. See stream.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "errmsg.h"
#include "model/forward.h"
#include "model/ring.h"
#include "model/stream.h"

struct model_stream {
	struct vmu *v;
	struct vmu_provider *prov;
	uint32_t resident;
	uint64_t *start; /* n_layer + 1: layer l is [start[l], start[l + 1]) */
	void *host; /* the streamed layers: blob bytes from start[resident] */
	uint64_t host_bytes;
	struct vmu_text_area *area;
	struct ring *ring;

	pthread_mutex_t pass_lock; /* one pass at a time uses the ring */
	pthread_mutex_t lock; /* @st */
	struct model_stream_stats st;
};

static int emit_host(void *arg, const void *buf, uint64_t len)
{
	uint8_t **at = arg;

	memcpy(*at, buf, len);
	*at += len;
	return 0;
}

static int ring_copy(void *arg, uint64_t off, const void *src, uint64_t len)
{
	struct model_stream *st = arg;

	return st->prov->ops->copy_htod(
		st->prov, vmu_text_area_addr(st->area) + off, src, len);
}

int model_stream_create(struct vmu *v, const struct model_layout *L,
			const struct model_config *c, uint32_t resident,
			uint64_t ring_bytes, const void *host,
			struct model_stream **out, char *msg, size_t msglen)
{
	struct vmu_provider *p = vmu_provider(v);
	struct model_stream *st;
	char why[VMU_MSG_LEN] = "";
	uint8_t *at;
	int ret;

	if (resident >= c->n_layer)
		return errmsg(msg, msglen, -EINVAL,
			      "%u resident layers of %u: nothing to stream",
			      resident, c->n_layer);
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->v = v;
	st->prov = p;
	st->resident = resident;
	pthread_mutex_init(&st->pass_lock, NULL);
	pthread_mutex_init(&st->lock, NULL);
	st->start = calloc(c->n_layer + 1, sizeof(*st->start));
	if (!st->start) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t l = 0; l <= c->n_layer; l++) {
		st->start[l] = model_layer_start(L, c->n_layer, l);
		if (l > resident &&
		    ring_bytes < st->start[l] - st->start[l - 1]) {
			ret = errmsg(msg, msglen, -E2BIG,
				     "layer %u has %llu bytes, the ring %llu",
				     l - 1,
				     (unsigned long long)(st->start[l] -
							  st->start[l - 1]),
				     (unsigned long long)ring_bytes);
			goto out;
		}
	}
	st->host_bytes = L->bytes - st->start[resident];
	ret = p->ops->host_alloc(p, st->host_bytes, &st->host);
	if (ret) {
		st->host = NULL;
		errmsg(msg, msglen, ret,
		       "no host memory for the %llu bytes of the streamed "
		       "layers",
		       (unsigned long long)st->host_bytes);
		goto out;
	}
	at = st->host;
	if (host)
		memcpy(at, host, st->host_bytes);
	else
		ret = model_layout_emit_range(L, st->start[resident], L->bytes,
					      emit_host, &at);
	if (ret) {
		errmsg(msg, msglen, ret, "copying the streamed layers: %s",
		       strerror(-ret));
		goto out;
	}
	ret = vmu_text_area_alloc(v, ring_bytes, &st->area, why, sizeof(why));
	if (ret) {
		errmsg(msg, msglen, ret, "no ring of %llu bytes: %s",
		       (unsigned long long)ring_bytes, why);
		goto out;
	}
	ret = ring_create(ring_bytes, ring_copy, st, &st->ring);
	if (ret) {
		errmsg(msg, msglen, ret, "starting the copy lane: %s",
		       strerror(-ret));
		goto out;
	}
	*out = st;
	return 0;
out:
	model_stream_destroy(st);
	return ret;
}

const void *model_stream_host(const struct model_stream *st)
{
	return st->host;
}

void model_stream_destroy(struct model_stream *st)
{
	if (!st)
		return;
	ring_destroy(st->ring);
	vmu_text_area_free(st->v, st->area);
	if (st->host)
		st->prov->ops->host_free(st->prov, st->host, st->host_bytes);
	free(st->start);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->pass_lock);
	free(st);
}

/* Whether some job of @b runs layer @l. */
static bool covered(struct pass_job **b, unsigned int n, uint32_t l)
{
	for (unsigned int i = 0; i < n; i++)
		if (b[i]->l0 <= l && l < b[i]->l1)
			return true;
	return false;
}

/* Fail every job of @b still running layers at or after @l. */
static void fail_from(struct pass_job **b, unsigned int n, uint32_t l, int err)
{
	for (unsigned int i = 0; i < n; i++)
		if (b[i]->l1 > l && !b[i]->ret)
			b[i]->ret = err;
}

/*
 * One pass over the layers the jobs of @b need: resident layers (those
 * below @R) as one graph per stretch that no job starts or ends in, each
 * streamed layer of @st as a graph of its own, its copy queued ahead so
 * the copy lane fills the ring while the compute runs.
 */
static void pass(struct model_stream *st, uint32_t R, struct pass_job **b,
		 unsigned int n)
{
	struct pass_job *act[FWD_MAX_SEQ];
	uint32_t lo = UINT32_MAX, hi = 0, l;
	int ret = 0;

	for (unsigned int i = 0; i < n; i++) {
		lo = b[i]->l0 < lo ? b[i]->l0 : lo;
		hi = b[i]->l1 > hi ? b[i]->l1 : hi;
	}
	for (l = lo > R ? lo : R; l < hi && !ret; l++)
		if (covered(b, n, l))
			ret = ring_push(st->ring, l,
					(uint8_t *)st->host + st->start[l] -
						st->start[R],
					st->start[l + 1] - st->start[l]);
	if (ret)
		fail_from(b, n, 0, ret);
	for (l = lo; l < hi && !ret;) {
		uint32_t e = l + 1;
		unsigned int na = 0;
		uint64_t off = 0, base = 0;

		for (unsigned int i = 0; i < n; i++)
			if (b[i]->l0 <= l && l < b[i]->l1 && !b[i]->ret)
				act[na++] = b[i];
		if (l < R) {
			/* the longest stretch of resident layers no job
			 * starts or ends inside */
			e = R;
			for (unsigned int i = 0; i < n; i++) {
				if (b[i]->l0 > l && b[i]->l0 < e)
					e = b[i]->l0;
				if (b[i]->l1 > l && b[i]->l1 < e)
					e = b[i]->l1;
			}
			if (na)
				b[0]->fn(act, na, l, e, 0);
			l = e;
			continue;
		}
		if (!covered(b, n, l)) {
			l++;
			continue;
		}
		ret = ring_acquire(st->ring, l, &off);
		if (ret) {
			fail_from(b, n, l, ret);
			break;
		}
		base = vmu_text_area_addr(st->area) + off;
		if (na)
			b[0]->fn(act, na, l, e, base);
		ring_release(st->ring, l);
		l = e;
	}
	if (ret)
		ring_reset(st->ring);
}

void model_pass_layers(struct model_stream *st, struct pass_job **b,
		       unsigned int n)
{
	uint64_t t0;

	for (unsigned int i = 0; i < n; i++)
		b[i]->ret = b[i]->l0 < b[i]->l1 ? 0 : -EINVAL;
	if (!st) {
		pass(NULL, UINT32_MAX, b, n);
		return;
	}
	pthread_mutex_lock(&st->pass_lock);
	t0 = mono_ns();
	pass(st, st->resident, b, n);
	t0 = mono_ns() - t0;
	pthread_mutex_lock(&st->lock);
	st->st.passes++;
	st->st.jobs += n;
	st->st.pass_ns += t0;
	if (n > st->st.max_batch)
		st->st.max_batch = n;
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_unlock(&st->pass_lock);
}

void model_stream_stats(struct model_stream *st, struct model_stream_stats *out)
{
	pthread_mutex_lock(&st->lock);
	*out = st->st;
	pthread_mutex_unlock(&st->lock);
	ring_stats(st->ring, &out->ring);
}
