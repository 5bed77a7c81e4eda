// SPDX-License-Identifier: MIT
/*
 * The contexts' logits arena, for the crash journal (runtime.h, "The
 * crash journal"): one memfd, mapped once at a fixed place, its file
 * grown as contexts come. Each context takes CTX_SLOTS buffers of its
 * model's logits in one extent; an extent freed while the journal is on
 * waits for a record begun after the free to be in force before it is
 * handed out again (as the VMU's chunks do, vmu.h), so no record in
 * force ever names logits another context has written since. A free
 * extent's pages go back to the system (a hole punched in the file).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "list.h"
#include "model/ctx.h"

/* The address space the arena may take; its file grows in steps. */
#define ARENA_RESERVE (64ull << 30)
#define ARENA_GROW (16ull << 20)
#define ARENA_ALIGN 4096u

struct extent {
	struct list_head node;
	uint64_t off, len;
	uint64_t tag; /* quarantined: the record that must be in force */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t moved; /* the record in force changed */
	int fd;
	uint8_t *base;
	uint64_t size; /* the file's */
	uint64_t top; /* bytes handed out from the start, at most */
	struct list_head free; /* by offset, none adjacent */
	struct list_head quarantine; /* in the order freed */
	bool on; /* a journal names contexts: pins hold */
	uint64_t begun; /* the newest record begun */
	uint64_t in_force; /* and in force (atomic) */
} A = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.moved = PTHREAD_COND_INITIALIZER,
	.fd = -1,
	.free = LIST_HEAD_INIT(A.free),
	.quarantine = LIST_HEAD_INIT(A.quarantine),
};

int model_journal_arena(void)
{
	int ret = 0;

	pthread_mutex_lock(&A.lock);
	if (A.fd >= 0)
		goto out;
	A.fd = memfd_create("djinn-logits", MFD_CLOEXEC);
	if (A.fd < 0) {
		ret = -errno;
		goto out;
	}
	{
		/* arena_wait()'s deadlines are CLOCK_MONOTONIC's (no one
		 * waits before the arena is made) */
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_destroy(&A.moved);
		pthread_cond_init(&A.moved, &ca);
		pthread_condattr_destroy(&ca);
	}
	/* past the file's end nothing is touched: the file grows first */
	A.base = mmap(NULL, ARENA_RESERVE, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_NORESERVE, A.fd, 0);
	if (A.base == MAP_FAILED) {
		ret = -errno;
		A.base = NULL;
		close(A.fd);
		A.fd = -1;
	}
out:
	pthread_mutex_unlock(&A.lock);
	return ret ? ret : A.fd;
}

/* Give @len bytes at @off back to the free list, joined with its
 * neighbours. Lock held. */
static void free_extent(uint64_t off, uint64_t len, struct extent *x)
{
	struct extent *e, *prev = NULL;

	list_for_each_entry(e, &A.free, node) {
		if (e->off > off)
			break;
		prev = e;
	}
	if (prev && prev->off + prev->len == off) {
		prev->len += len;
		free(x);
		x = prev;
	} else {
		x->off = off;
		x->len = len;
		if (prev)
			list_add(&x->node, &prev->node);
		else
			list_add(&x->node, &A.free);
	}
	e = list_entry(x->node.next, struct extent, node);
	if (&e->node != &A.free && x->off + x->len == e->off) {
		x->len += e->len;
		list_del_init(&e->node);
		free(e);
	}
}

uint8_t *arena_alloc(uint64_t len, uint64_t *off)
{
	struct extent *e;
	uint8_t *p = NULL;

	len = (len + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	pthread_mutex_lock(&A.lock);
	if (!A.base)
		goto out;
	list_for_each_entry(e, &A.free, node) {
		if (e->len < len)
			continue;
		*off = e->off;
		e->off += len;
		e->len -= len;
		if (!e->len) {
			list_del_init(&e->node);
			free(e);
		}
		p = A.base + *off;
		goto out;
	}
	if (A.top + len > ARENA_RESERVE)
		goto out;
	if (A.top + len > A.size) {
		uint64_t size = A.top + len + ARENA_GROW;

		if (size > ARENA_RESERVE)
			size = ARENA_RESERVE;
		if (ftruncate(A.fd, (off_t)size))
			goto out;
		A.size = size;
	}
	*off = A.top;
	A.top += len;
	p = A.base + *off;
out:
	pthread_mutex_unlock(&A.lock);
	return p;
}

void arena_free(uint64_t off, uint64_t len)
{
	struct extent *x = calloc(1, sizeof(*x));

	len = (len + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	pthread_mutex_lock(&A.lock);
	if (!x) {
		/* out of memory: never handed out again (a crash at once
		 * after a reuse would restore another context's logits) */
		pthread_mutex_unlock(&A.lock);
		return;
	}
	if (A.on) {
		/* a record begun already may name it: the next one not */
		x->off = off;
		x->len = len;
		x->tag = A.begun + 1;
		list_add_tail(&x->node, &A.quarantine);
	} else {
		fallocate(A.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)off, (off_t)len);
		free_extent(off, len, x);
	}
	pthread_mutex_unlock(&A.lock);
}

/* The quarantined extents a record in force no longer names, free
 * (@all: every one), their memory given back. Lock held. */
static void release(bool all)
{
	struct extent *e, *n;

	list_for_each_entry_safe(e, n, &A.quarantine, node) {
		if (!all && e->tag > A.in_force)
			break; /* in the order freed: the rest wait too */
		list_del_init(&e->node);
		fallocate(A.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)e->off, (off_t)e->len);
		free_extent(e->off, e->len, e);
	}
}

void model_journal_begin(uint64_t seq)
{
	pthread_mutex_lock(&A.lock);
	__atomic_store_n(&A.begun, seq, __ATOMIC_RELEASE);
	__atomic_store_n(&A.on, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&A.lock);
}

/* A record is in force (@seq), or (@off) the journal is over: what waited
 * for it is freed, and the steps waiting for it look again. */
static void moved(uint64_t seq, bool off)
{
	pthread_mutex_lock(&A.lock);
	if (off)
		__atomic_store_n(&A.on, false, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&A.in_force, seq, __ATOMIC_RELEASE);
	release(off);
	pthread_cond_broadcast(&A.moved);
	pthread_mutex_unlock(&A.lock);
}

void model_journal_done(uint64_t seq)
{
	moved(seq, false);
}

void model_journal_off(void)
{
	moved(0, true);
}

uint64_t arena_begun(void)
{
	/* the journal's thread sets both, and asks (model_ctx_journal()) */
	return __atomic_load_n(&A.on, __ATOMIC_ACQUIRE) ?
		       __atomic_load_n(&A.begun, __ATOMIC_ACQUIRE) :
		       0;
}

bool arena_live(uint64_t seq)
{
	return seq && __atomic_load_n(&A.on, __ATOMIC_ACQUIRE) &&
	       seq >= __atomic_load_n(&A.in_force, __ATOMIC_ACQUIRE);
}

uint64_t arena_in_force(void)
{
	return __atomic_load_n(&A.in_force, __ATOMIC_ACQUIRE);
}

int arena_wait(uint64_t seen, const struct timespec *until)
{
	int ret = 0;

	pthread_mutex_lock(&A.lock);
	while (A.on && A.in_force == seen && !ret)
		ret = pthread_cond_timedwait(&A.moved, &A.lock, until);
	pthread_mutex_unlock(&A.lock);
	return ret ? -ret : 0;
}
