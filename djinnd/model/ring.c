// SPDX-License-Identifier: MIT
/*
 * The layer ring: a FIFO of layers over a region, filled by a copy lane
 * (ring.h says what it is for).
 *
 * The queue is an array, oldest first: entries [0, acquired) are being
 * computed on, [acquired, placed) have their place (copying or copied),
 * [placed, n) wait for room. Only placed entries hold bytes of the ring,
 * and they hold them in order: the oldest's offset is where the used
 * part starts, the newest's end where it ends, going round at most once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "model/ring.h"

enum ent_state { E_QUEUED, E_COPYING, E_READY, E_FAILED, E_ACQUIRED };

struct ent {
	uint32_t id;
	enum ent_state st;
	const void *src;
	uint64_t len, off;
	int err;
};

struct ring {
	uint64_t cap;
	ring_copy_fn copy;
	void *arg;
	pthread_t lane;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* any change: one broadcast wakes all */
	struct ent *q;
	unsigned int n, cap_q, placed, acquired;
	bool copying, stop;
	uint64_t popped; /* releases ever: the queue moved by one each */
	int err; /* a copy failed: nothing more is copied until reset */
	struct ring_stats st;
};

/* Where a layer of @len bytes goes now, or false when there is no room
 * until older ones are released. Lock held. */
static bool fit(struct ring *r, uint64_t len, uint64_t *off, bool *skip)
{
	const struct ent *old, *new;
	uint64_t next;

	*skip = false;
	if (!r->placed) {
		*off = 0; /* all free: start over at the beginning */
		return len <= r->cap;
	}
	old = &r->q[0];
	new = &r->q[r->placed - 1];
	next = new->off + new->len;
	if (new->off >= old->off) { /* used: [old->off, next) */
		if (len <= r->cap - next) {
			*off = next;
			return true;
		}
		/* skip the end: the layer never wraps */
		*off = 0;
		*skip = true;
		return len <= old->off;
	}
	/* used: [old->off, cap) and [0, next) */
	*off = next;
	return len <= old->off - next;
}

static void *lane_main(void *arg)
{
	struct ring *r = arg;

	pthread_mutex_lock(&r->lock);
	while (!r->stop) {
		uint64_t off, t0, t1, popped;
		unsigned int i = r->placed;
		const void *src;
		uint64_t len;
		bool skip;
		int ret;

		if (i == r->n || r->err) {
			pthread_cond_wait(&r->cond, &r->lock);
			continue;
		}
		if (!fit(r, r->q[i].len, &off, &skip)) {
			t0 = mono_ns();
			pthread_cond_wait(&r->cond, &r->lock);
			r->st.full_ns += mono_ns() - t0;
			continue;
		}
		r->q[i].off = off;
		r->q[i].st = E_COPYING;
		r->placed++;
		r->st.skips += skip;
		r->copying = true;
		src = r->q[i].src;
		len = r->q[i].len;
		popped = r->popped;
		pthread_mutex_unlock(&r->lock);
		t0 = mono_ns();
		ret = r->copy(r->arg, off, src, len);
		t1 = mono_ns();
		pthread_mutex_lock(&r->lock);
		/* Entry i is not released while it copies (it is not
		 * acquired), but releases of older ones move it down. */
		i -= (unsigned int)(r->popped - popped);
		r->copying = false;
		r->st.copy_ns += t1 - t0;
		if (ret) {
			r->q[i].st = E_FAILED;
			r->q[i].err = ret;
			r->err = ret;
		} else {
			r->q[i].st = E_READY;
			r->st.copies++;
			r->st.bytes += r->q[i].len;
		}
		pthread_cond_broadcast(&r->cond);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int ring_create(uint64_t cap, ring_copy_fn copy, void *arg, struct ring **out)
{
	struct ring *r;
	int ret;

	if (!cap || !copy)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap = cap;
	r->copy = copy;
	r->arg = arg;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	ret = -pthread_create(&r->lane, NULL, lane_main, r);
	if (ret) {
		pthread_cond_destroy(&r->cond);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void ring_destroy(struct ring *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->lane, NULL);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r->q);
	free(r);
}

int ring_push(struct ring *r, uint32_t id, const void *src, uint64_t len)
{
	int ret = 0;

	if (!len)
		return -EINVAL;
	if (len > r->cap)
		return -E2BIG;
	pthread_mutex_lock(&r->lock);
	if (r->n == r->cap_q) {
		unsigned int cap = r->cap_q ? r->cap_q * 2 : 16;
		struct ent *q = realloc(r->q, cap * sizeof(*q));

		if (!q) {
			ret = -ENOMEM;
			goto out;
		}
		r->q = q;
		r->cap_q = cap;
	}
	r->q[r->n++] = (struct ent){ .id = id, .src = src, .len = len };
	pthread_cond_broadcast(&r->cond);
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int ring_acquire(struct ring *r, uint32_t id, uint64_t *off)
{
	unsigned int i;
	uint64_t t0 = 0;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	i = r->acquired;
	if (i == r->n || r->q[i].id != id) {
		ret = -EINVAL;
		goto out;
	}
	while (r->q[i].st != E_READY && r->q[i].st != E_FAILED) {
		if (r->err && r->q[i].st == E_QUEUED) {
			ret = r->err; /* an earlier copy failed: never copied */
			goto out;
		}
		if (!t0)
			t0 = mono_ns();
		pthread_cond_wait(&r->cond, &r->lock);
	}
	if (t0)
		r->st.stall_ns += mono_ns() - t0;
	if (r->q[i].st == E_FAILED) {
		ret = r->q[i].err;
		goto out;
	}
	r->q[i].st = E_ACQUIRED;
	r->acquired++;
	*off = r->q[i].off;
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

int ring_release(struct ring *r, uint32_t id)
{
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	if (!r->acquired || r->q[0].id != id) {
		ret = -EINVAL;
		goto out;
	}
	memmove(r->q, r->q + 1, (r->n - 1) * sizeof(*r->q));
	r->popped++;
	r->n--;
	r->placed--;
	r->acquired--;
	pthread_cond_broadcast(&r->cond);
out:
	pthread_mutex_unlock(&r->lock);
	return ret;
}

void ring_reset(struct ring *r)
{
	pthread_mutex_lock(&r->lock);
	while (r->copying)
		pthread_cond_wait(&r->cond, &r->lock);
	r->n = r->placed = r->acquired = 0;
	r->err = 0;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

void ring_stats(struct ring *r, struct ring_stats *out)
{
	pthread_mutex_lock(&r->lock);
	*out = r->st;
	pthread_mutex_unlock(&r->lock);
}
