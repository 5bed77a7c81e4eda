/* SPDX-License-Identifier: MIT */
/*
 * Staging buffers: host memory for reads of a device whose memory the
 * I/O thread cannot touch (provider device_only: a GPU).
 *
 * A TENSOR_READ of such a device is copied by the memory executor into
 * host memory from the provider's host_alloc(), pinned on a GPU so that
 * the copy is a DMA at the bus's speed, and the I/O thread sends the
 * reply from there. Pinning and unpinning (cuMemHostRegister and its
 * unregister) take milliseconds, more than a small read's copy and send,
 * so the buffers are kept for the next reads instead of being pinned for
 * each one.
 *
 * Sizes are powers of two from STAGE_MIN to STAGE_MAX. A read of up to
 * STAGE_MAX takes an idle buffer of exactly its size (stage_size()),
 * else a new one, so that what it holds is what its tenant is charged
 * for (net/msg_tensor.c); a larger read is copied and sent in parts of
 * STAGE_MAX through two such buffers (a reply sent in parts, net/conn.h).
 * Given back, a buffer joins the idle ones; past STAGE_POOL_BUFS buffers
 * or STAGE_POOL_BYTES bytes idle the oldest idle ones are freed, so the
 * pool holds at most that much pinned memory between reads. Buffers out
 * on loan are not counted here: their readers' tenants are charged for
 * them.
 *
 * A buffer is its read's from stage_get() until stage_put(). The reply
 * is sent from it, and the I/O thread gives it back (or, for a read in
 * parts, has the next part copied into it) only when the kernel has
 * finished with its bytes (conn_reply()'s done callback, after a
 * zero-copy send's notification too; conn_reply_parts()'s part_done),
 * so no other bytes are copied into it while its bytes are on their
 * way.
 *
 * stage_get() is called from the memory executor's threads and
 * stage_put() from the I/O thread: the pool has its own lock, and calls
 * host_alloc() and host_free() outside it.
 */
#ifndef DJINN_EXEC_STAGE_H
#define DJINN_EXEC_STAGE_H

#include <pthread.h>
#include <stdint.h>

#include "vmu/provider.h"

#define STAGE_MIN (UINT64_C(64) << 10) /* 64 KiB: the smallest buffer */
#define STAGE_MAX (UINT64_C(4) << 20) /* 4 MiB: the largest pooled */
#define STAGE_POOL_BUFS 8 /* idle buffers kept, at most */
#define STAGE_POOL_BYTES (UINT64_C(16) << 20) /* idle bytes kept, at most */

/*
 * struct stage_stats - what a pool has done
 * @gets:       buffers handed out
 * @hits:       of those, idle ones reused
 * @allocs:     new buffers (host_alloc() calls that succeeded)
 * @frees:      host_free() calls
 * @lent:       buffers out now
 * @idle:       idle buffers now
 * @idle_bytes: their bytes
 */
struct stage_stats {
	uint64_t gets, hits, allocs, frees;
	uint64_t lent;
	uint64_t idle, idle_bytes;
};

struct stage_buf {
	void *buf;
	uint64_t size;
};

struct stage_pool {
	struct vmu_provider *prov;
	pthread_mutex_t lock;
	struct stage_buf idle[STAGE_POOL_BUFS]; /* oldest first */
	unsigned int nr_idle;
	struct stage_stats st;
};

/* An empty pool over @prov's host memory. */
void stage_pool_init(struct stage_pool *sp, struct vmu_provider *prov);
/* Free the idle buffers. Buffers still lent are the borrowers' to free
 * (with host_free()); none should be. */
void stage_pool_fini(struct stage_pool *sp);

/* The bytes of a buffer for a read of @len (at most STAGE_MAX): a power
 * of two from STAGE_MIN on. */
uint64_t stage_size(uint64_t len);

/* A buffer of stage_size(@len) bytes in *@buf, its size in *@size (give
 * both back to stage_put()). 0, -E2BIG for @len over STAGE_MAX, or
 * host_alloc()'s error. */
int stage_get(struct stage_pool *sp, uint64_t len, void **buf, uint64_t *size);
/* Give back a buffer from stage_get(), once nothing reads it. */
void stage_put(struct stage_pool *sp, void *buf, uint64_t size);

void stage_pool_stats(struct stage_pool *sp, struct stage_stats *out);

#endif /* DJINN_EXEC_STAGE_H */
