/* SPDX-License-Identifier: MIT */
/*
 * The layer ring (issue 15: models larger than the device): a region of
 * device memory through which the layers of a model that does not fit
 * are streamed, a copy lane filling it ahead of the compute that reads
 * it.
 *
 * Layers go through in order, first in, first out: ring_push() queues a
 * layer's bytes (host memory: the mapped file, or pinned memory on a
 * GPU), the copy lane (a thread of the ring's) places each one as soon as
 * there is room and copies it in with the caller's copy function,
 * ring_acquire() waits until the oldest one not yet acquired is there and
 * gives its offset, and ring_release() gives the oldest acquired one's
 * room back once the compute on it has finished.
 *
 * Placement is skip-end: a layer never wraps; when it does not fit before
 * the end, it goes to the start, once the start is free. So the copy lane
 * runs ahead of the compute as far as the ring's room allows (the
 * prefetch depth), and never writes bytes a layer being computed on
 * holds, nor hands out a layer before its copy has finished.
 *
 * Threads: any thread may push, acquire and release (one consumer at a
 * time: acquisitions and releases are in push order); the copy function
 * runs on the copy lane only.
 */
#ifndef DJINN_MODEL_RING_H
#define DJINN_MODEL_RING_H

#include <stdint.h>

struct ring;

/*
 * Copy @len bytes at @src into the ring's memory at offset @off: 0, or a
 * negative errno, which fails that layer's acquisition and every later
 * one until ring_reset(). Runs on the copy lane; blocks until the bytes
 * are there (a GPU's: until its copy stream's event).
 */
typedef int (*ring_copy_fn)(void *arg, uint64_t off, const void *src,
			    uint64_t len);

/* A ring of @cap bytes copied into by @copy(@arg, ...), its copy lane
 * started: 0, -EINVAL (@cap 0), -ENOMEM, or pthread_create()'s errno. */
int ring_create(uint64_t cap, ring_copy_fn copy, void *arg, struct ring **out);
/* Stops the copy lane (a copy in progress finishes first). */
void ring_destroy(struct ring *r);

/*
 * Queue layer @id, @len bytes at @src, which must stay until the layer
 * is acquired: 0, or -E2BIG when @len is more than the ring (with @len
 * 0: -EINVAL), -ENOMEM.
 */
int ring_push(struct ring *r, uint32_t id, const void *src, uint64_t len);
/*
 * Wait until the oldest layer pushed and not acquired (which must be
 * @id: -EINVAL otherwise, or when none is queued) is in the ring: 0 and
 * its offset in *@off, or the copy's error.
 */
int ring_acquire(struct ring *r, uint32_t id, uint64_t *off);
/* The compute on the oldest acquired layer (@id) has finished: its room
 * may be reused. -EINVAL if that is not @id. */
int ring_release(struct ring *r, uint32_t id);
/* Forget everything queued (after a failed pass): waits for a copy in
 * progress, then the ring is empty and its error cleared. */
void ring_reset(struct ring *r);

/*
 * struct ring_stats - what the copy lane did
 * @copies, @bytes: layers copied in and their bytes
 * @copy_ns:  time in the copy function
 * @stall_ns: time acquisitions waited for a copy (compute waiting on the
 *            link)
 * @full_ns:  time the copy lane waited for room (the link waiting on
 *            compute)
 * @skips:    placements that skipped the end
 */
struct ring_stats {
	uint64_t copies, bytes;
	uint64_t copy_ns, stall_ns, full_ns;
	uint64_t skips;
};
void ring_stats(struct ring *r, struct ring_stats *out);

#endif /* DJINN_MODEL_RING_H */
