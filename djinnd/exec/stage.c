// SPDX-License-Identifier: MIT
/*
 * Staging buffers for reads of device-only memory. See stage.h.
 */
#include <errno.h>
#include <string.h>

#include "exec/stage.h"

void stage_pool_init(struct stage_pool *sp, struct vmu_provider *prov)
{
	memset(sp, 0, sizeof(*sp));
	sp->prov = prov;
	pthread_mutex_init(&sp->lock, NULL);
}

void stage_pool_fini(struct stage_pool *sp)
{
	for (unsigned int i = 0; i < sp->nr_idle; i++)
		sp->prov->ops->host_free(sp->prov, sp->idle[i].buf,
					 sp->idle[i].size);
	sp->nr_idle = 0;
	pthread_mutex_destroy(&sp->lock);
}

uint64_t stage_size(uint64_t len)
{
	uint64_t size = STAGE_MIN;

	while (size < len)
		size <<= 1;
	return size;
}

int stage_get(struct stage_pool *sp, uint64_t len, void **buf, uint64_t *size)
{
	uint64_t want = stage_size(len);
	unsigned int best = STAGE_POOL_BUFS;
	int ret;

	if (len > STAGE_MAX)
		return -E2BIG;
	pthread_mutex_lock(&sp->lock);
	/* the newest idle buffer of its size: a larger one would pin more
	 * than its reader is charged for */
	for (unsigned int i = 0; i < sp->nr_idle; i++)
		if (sp->idle[i].size == want)
			best = i;
	if (best < STAGE_POOL_BUFS) {
		*buf = sp->idle[best].buf;
		*size = sp->idle[best].size;
		sp->st.idle_bytes -= *size;
		memmove(&sp->idle[best], &sp->idle[best + 1],
			(sp->nr_idle - best - 1) * sizeof(sp->idle[0]));
		sp->nr_idle--;
		sp->st.gets++;
		sp->st.hits++;
		sp->st.lent++;
		pthread_mutex_unlock(&sp->lock);
		return 0;
	}
	pthread_mutex_unlock(&sp->lock);

	ret = sp->prov->ops->host_alloc(sp->prov, want, buf);
	if (ret)
		return ret;
	*size = want;
	pthread_mutex_lock(&sp->lock);
	sp->st.gets++;
	sp->st.allocs++;
	sp->st.lent++;
	pthread_mutex_unlock(&sp->lock);
	return 0;
}

void stage_put(struct stage_pool *sp, void *buf, uint64_t size)
{
	/* the oldest idle buffers, to free once past the bounds */
	struct stage_buf out[STAGE_POOL_BUFS + 1];
	unsigned int n = 0;

	pthread_mutex_lock(&sp->lock);
	sp->st.lent--;
	if (sp->nr_idle == STAGE_POOL_BUFS) {
		out[n] = sp->idle[0];
		sp->st.idle_bytes -= out[n++].size;
		memmove(&sp->idle[0], &sp->idle[1],
			--sp->nr_idle * sizeof(sp->idle[0]));
	}
	sp->idle[sp->nr_idle].buf = buf;
	sp->idle[sp->nr_idle++].size = size;
	sp->st.idle_bytes += size;
	while (sp->st.idle_bytes > STAGE_POOL_BYTES) {
		out[n] = sp->idle[0];
		sp->st.idle_bytes -= out[n++].size;
		memmove(&sp->idle[0], &sp->idle[1],
			--sp->nr_idle * sizeof(sp->idle[0]));
	}
	sp->st.frees += n;
	pthread_mutex_unlock(&sp->lock);
	for (unsigned int i = 0; i < n; i++)
		sp->prov->ops->host_free(sp->prov, out[i].buf, out[i].size);
}

void stage_pool_stats(struct stage_pool *sp, struct stage_stats *out)
{
	pthread_mutex_lock(&sp->lock);
	*out = sp->st;
	out->idle = sp->nr_idle;
	pthread_mutex_unlock(&sp->lock);
}
