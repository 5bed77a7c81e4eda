// SPDX-License-Identifier: MIT
/*
 * The host provider: device memory for the CPU backend.
 *
 * The "physical memory" is the pool: a memfd of @capacity bytes mapped
 * shared (huge pages where shmem THP allows: shmem_enabled "advise"),
 * reserved at start and touched lazily. A restart hands the memfd to the
 * next djinnd, which adopts the chunks it names in place (the used,
 * adopt and unkeep ops, vmu_host_provider_open()). A bitmap over its granules says which are in use; a chunk is a
 * list of extents of free granules, one extent when a contiguous run
 * exists. The pool's pages, once touched, stay resident when chunks are
 * destroyed: on this kind of machine a first touch costs ten to thirty
 * times a copy, and a GPU's memory does not go away either.
 *
 * Virtual ranges are mmap(PROT_NONE, MAP_NORESERVE) reservations. map()
 * *moves* a chunk's pages from the pool into the range with
 * mremap(MREMAP_FIXED | MREMAP_DONTUNMAP), and unmap() moves them back and
 * puts PROT_NONE in their place, so the range stays reserved and the
 * chunk keeps its bytes. At 2 MiB alignment the kernel moves whole page
 * tables, so mapping and unmapping cost O(1) per granule instead of a
 * page-table entry per 4 KiB page (measured: 0.03 ms against 7.4 ms to
 * map 256 MiB with MAP_POPULATE). The price is that a chunk is mapped in
 * one place at a time (-EBUSY otherwise), which is all the VMU needs, and
 * that unmap() takes whole ranges given to map(), as cuMemUnmap does.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/mman.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmu/provider.h"

#define HOST_DEFAULT_GRANULE (2ull << 20)

struct host_extent {
	uint64_t off; /* byte offset in the pool */
	uint64_t len;
};

struct host_chunk {
	uint64_t size;
	uint64_t va; /* where it is mapped, 0 while in the pool */
	uint64_t mapped; /* bytes mapped there, from its start */
	bool protected; /* set_access() changed it from read-write */
	bool adopted; /* made of kept pieces (adopt()) */
	struct host_chunk *hnext; /* host_provider.table */
	unsigned int nr_ext;
	struct host_extent ext[];
};

/* A reservation, and which of its granules have a chunk mapped. */
struct host_resv {
	uint64_t va, size;
	uint64_t *mapped; /* bitmap, a bit per granule */
};

/*
 * The swap arena (host_swap_arena()): the host buffers of swapped-out
 * regions, windows of one memfd mapped whole (one mapping, however many
 * buffers), so that a restart hands it to the next djinnd as it does the
 * pool and nothing swapped out is copied. A buffer is a run of granules;
 * one that finds no run is anonymous memory, copied at a restart. A
 * buffer freed gives its pages back (a hole punched): swapped data comes
 * and goes, unlike a device's memory.
 */
struct host_swap {
	int fd; /* -1: no arena */
	uint8_t *base;
	uint64_t size, nr_gran;
	uint64_t *bitmap; /* bit set: granule in use */
	uint64_t *kept; /* bit set: in use, kept for swap_adopt() */
	/* bit set: adopted while a restore runs: freed meanwhile (a restore
	 * undone), it is kept again, for its bytes are the predecessor's
	 * still until unkeep() */
	uint64_t *adopting;
	/* bit set: freed by unkeep(), its pages given back by swap_trim() */
	uint64_t *trim;
};

struct host_provider {
	struct vmu_provider base;
	struct host_swap sw; /* under @lock */
	struct host_resv *resv; /* sorted by va */
	uint64_t nr_resv, cap_resv;
	uint8_t *pool;
	uint64_t nr_gran;
	uint64_t free_gran;
	uint64_t *bitmap; /* bit set: granule in use */
	uint64_t *kept; /* bit set: in use, kept for adopt() */
	int fd; /* the pool's memfd */
	struct host_chunk **table; /* mapped chunks, by address */
	uint64_t table_size, nr_mapped;
	pthread_mutex_t lock; /* bitmap, free_gran, table, resv */
};

static struct host_provider *to_host(struct vmu_provider *p)
{
	return (struct host_provider *)p;
}

static void *ptr(uint64_t va)
{
	return (void *)(uintptr_t)va;
}

/* ---------------------------------------------------------------------- */
/* Granule bitmap */

/* Bit @i of bitmap @bm (NULL: none set), and bits [@first, + @n) set
 * or cleared: the pool's and the swap arena's bitmaps alike. */
static bool bit(const uint64_t *bm, uint64_t i)
{
	return bm && bm[i / 64] >> (i % 64) & 1;
}

static void bits(uint64_t *bm, uint64_t first, uint64_t n, bool on)
{
	for (uint64_t i = first; i < first + n; i++) {
		if (on)
			bm[i / 64] |= 1ull << (i % 64);
		else
			bm[i / 64] &= ~(1ull << (i % 64));
	}
}

static bool gran_used(const struct host_provider *h, uint64_t i)
{
	return bit(h->bitmap, i);
}

static void gran_set(struct host_provider *h, uint64_t first, uint64_t n,
		     bool used)
{
	bits(h->bitmap, first, n, used);
}

/* Mark granules [@first, @end) kept or not. */
static void kept_set(struct host_provider *h, uint64_t first, uint64_t end,
		     bool kept)
{
	bits(h->kept, first, end - first, kept);
}

/* First free granule at or after @i, or nr_gran. */
static uint64_t next_free(const struct host_provider *h, uint64_t i)
{
	while (i < h->nr_gran) {
		uint64_t word = ~h->bitmap[i / 64] >> (i % 64);

		if (word)
			return i + __builtin_ctzll(word) < h->nr_gran ?
				       i + __builtin_ctzll(word) :
				       h->nr_gran;
		i = (i / 64 + 1) * 64;
	}
	return h->nr_gran;
}

/* Length of the free run starting at @i, at most @max. */
static uint64_t run_len(const struct host_provider *h, uint64_t i, uint64_t max)
{
	uint64_t n = 0;

	while (n < max && i + n < h->nr_gran && !gran_used(h, i + n))
		n++;
	return n;
}

/*
 * Find @want granules: the first run that holds them all, else the free
 * runs from the lowest address up. Fills @ext (room for @want entries)
 * and marks them used. Caller holds the lock and has checked free_gran.
 */
static unsigned int gran_alloc(struct host_provider *h, uint64_t want,
			       struct host_extent *ext)
{
	uint64_t g = h->base.granularity;
	unsigned int n = 0;
	uint64_t i;

	for (i = next_free(h, 0); i < h->nr_gran;) {
		uint64_t len = run_len(h, i, want);

		if (len == want) {
			ext[0] = (struct host_extent){ i * g, want * g };
			gran_set(h, i, want, true);
			return 1;
		}
		i = next_free(h, i + len);
	}
	for (i = next_free(h, 0); want && i < h->nr_gran;) {
		uint64_t len = run_len(h, i, want);

		ext[n++] = (struct host_extent){ i * g, len * g };
		gran_set(h, i, len, true);
		want -= len;
		i = next_free(h, i + len);
	}
	return n;
}

/* ---------------------------------------------------------------------- */
/* The table of mapped chunks, by address */

static uint64_t table_bucket(const struct host_provider *h, uint64_t va)
{
	return (va / h->base.granularity * 0x9e3779b97f4a7c15ull >> 32) &
	       (h->table_size - 1);
}

static struct host_chunk *table_find(struct host_provider *h, uint64_t va)
{
	struct host_chunk *c = h->table[table_bucket(h, va)];

	while (c && c->va != va)
		c = c->hnext;
	return c;
}

static int table_add(struct host_provider *h, struct host_chunk *c)
{
	struct host_chunk **slot;

	if (h->nr_mapped >= h->table_size) {
		uint64_t old = h->table_size, n = old * 2;
		struct host_chunk **nt = calloc(n, sizeof(*nt)),
				  **ot = h->table;

		if (!nt)
			return -ENOMEM;
		h->table = nt;
		h->table_size = n;
		for (uint64_t i = 0; i < old; i++) {
			while (ot[i]) {
				struct host_chunk *e = ot[i];

				ot[i] = e->hnext;
				slot = &nt[table_bucket(h, e->va)];
				e->hnext = *slot;
				*slot = e;
			}
		}
		free(ot);
	}
	slot = &h->table[table_bucket(h, c->va)];
	c->hnext = *slot;
	*slot = c;
	h->nr_mapped++;
	return 0;
}

static void table_del(struct host_provider *h, struct host_chunk *c)
{
	struct host_chunk **p = &h->table[table_bucket(h, c->va)];

	while (*p != c)
		p = &(*p)->hnext;
	*p = c->hnext;
	h->nr_mapped--;
}

/* ---------------------------------------------------------------------- */
/* Reservations: map() must land inside one, on granules nothing holds */

/* Index of the first reservation starting after @va. */
static uint64_t resv_upper(const struct host_provider *h, uint64_t va)
{
	uint64_t lo = 0, hi = h->nr_resv;

	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;

		if (h->resv[mid].va <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The reservation holding all of [@va, @va + @size), or NULL. */
static struct host_resv *resv_find(struct host_provider *h, uint64_t va,
				   uint64_t size)
{
	uint64_t i = resv_upper(h, va);
	struct host_resv *r;

	if (!i)
		return NULL;
	r = &h->resv[i - 1];
	return va + size <= r->va + r->size && va + size > va ? r : NULL;
}

static int resv_add(struct host_provider *h, uint64_t va, uint64_t size)
{
	uint64_t i, words = (size / h->base.granularity + 63) / 64;
	uint64_t *bits = calloc(words, sizeof(*bits));

	if (!bits)
		return -ENOMEM;
	if (h->nr_resv == h->cap_resv) {
		uint64_t cap = h->cap_resv ? h->cap_resv * 2 : 64;
		struct host_resv *n = realloc(h->resv, cap * sizeof(*n));

		if (!n) {
			free(bits);
			return -ENOMEM;
		}
		h->resv = n;
		h->cap_resv = cap;
	}
	i = resv_upper(h, va);
	memmove(&h->resv[i + 1], &h->resv[i],
		(h->nr_resv - i) * sizeof(h->resv[0]));
	h->resv[i] = (struct host_resv){ va, size, bits };
	h->nr_resv++;
	return 0;
}

static void resv_del(struct host_provider *h, struct host_resv *r)
{
	uint64_t i = (uint64_t)(r - h->resv);

	free(r->mapped);
	memmove(r, r + 1, (h->nr_resv - i - 1) * sizeof(*r));
	h->nr_resv--;
}

/* Are all granules of [@va, @va + @size) in @r free (or all mapped)? */
static bool resv_all(const struct host_provider *h, const struct host_resv *r,
		     uint64_t va, uint64_t size, bool mapped)
{
	uint64_t first = (va - r->va) / h->base.granularity;
	uint64_t n = size / h->base.granularity;

	for (uint64_t i = first; i < first + n; i++)
		if ((bool)(r->mapped[i / 64] >> (i % 64) & 1) != mapped)
			return false;
	return true;
}

static void resv_mark(const struct host_provider *h, struct host_resv *r,
		      uint64_t va, uint64_t size, bool mapped)
{
	uint64_t first = (va - r->va) / h->base.granularity;
	uint64_t n = size / h->base.granularity;

	for (uint64_t i = first; i < first + n; i++) {
		if (mapped)
			r->mapped[i / 64] |= 1ull << (i % 64);
		else
			r->mapped[i / 64] &= ~(1ull << (i % 64));
	}
}

/* ---------------------------------------------------------------------- */
/* Moving pages between the pool and a reservation */

/*
 * Move @len bytes of pages from @src to @dst, leaving @src mapped and
 * empty. mremap() wants its source inside one VMA; granules moved out and
 * back may have split the pool into several, but never inside a granule,
 * so on EFAULT the move goes one granule at a time.
 */
static int move_pages(struct host_provider *h, uint64_t src, uint64_t dst,
		      uint64_t len)
{
	const int flags = MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP;
	uint64_t g = h->base.granularity;

	if (mremap(ptr(src), len, len, flags, ptr(dst)) != MAP_FAILED)
		return 0;
	if (errno != EFAULT)
		return -errno;
	for (uint64_t o = 0; o < len; o += g) {
		if (mremap(ptr(src + o), g, g, flags, ptr(dst + o)) !=
		    MAP_FAILED)
			continue;
		int ret = -errno;

		/* Put back what had moved, so nothing is left half-way. */
		while (o) {
			o -= g;
			mremap(ptr(dst + o), g, g, flags, ptr(src + o));
		}
		return ret;
	}
	return 0;
}

static int host_reserve(struct vmu_provider *p, uint64_t size, uint64_t align,
			uint64_t *va)
{
	uint64_t start, head, tail;
	int ret;
	void *m;

	if (!size || size % p->granularity || (align & (align - 1)) ||
	    size + align < size)
		return -EINVAL;
	if (align < p->granularity)
		align = p->granularity;
	m = mmap(NULL, size + align, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	start = ((uintptr_t)m + align - 1) & ~(align - 1);
	head = start - (uintptr_t)m;
	tail = align - head;
	if (head)
		munmap(m, head);
	if (tail)
		munmap(ptr(start + size), tail);
	pthread_mutex_lock(&to_host(p)->lock);
	ret = resv_add(to_host(p), start, size);
	pthread_mutex_unlock(&to_host(p)->lock);
	if (ret) {
		munmap(ptr(start), size);
		return ret;
	}
	*va = start;
	return 0;
}

static void host_release(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	struct host_provider *h = to_host(p);
	struct host_resv *r;

	pthread_mutex_lock(&h->lock);
	r = resv_find(h, va, size);
	if (r && r->va == va && r->size == size)
		resv_del(h, r);
	pthread_mutex_unlock(&h->lock);
	munmap(ptr(va), size);
}

static int host_create(struct vmu_provider *p, uint64_t size, uint64_t *chunk)
{
	struct host_provider *h = to_host(p);
	uint64_t want = size / p->granularity;
	struct host_extent *ext;
	struct host_chunk *c;
	unsigned int n;

	if (!size || size % p->granularity)
		return -EINVAL;
	ext = malloc(want * sizeof(*ext));
	if (!ext)
		return -ENOMEM;
	pthread_mutex_lock(&h->lock);
	if (want > h->free_gran) {
		pthread_mutex_unlock(&h->lock);
		free(ext);
		return -ENOMEM;
	}
	n = gran_alloc(h, want, ext);
	h->free_gran -= want;
	pthread_mutex_unlock(&h->lock);

	c = calloc(1, sizeof(*c) + n * sizeof(c->ext[0]));
	if (!c) {
		pthread_mutex_lock(&h->lock);
		for (unsigned int i = 0; i < n; i++)
			gran_set(h, ext[i].off / p->granularity,
				 ext[i].len / p->granularity, false);
		h->free_gran += want;
		pthread_mutex_unlock(&h->lock);
		free(ext);
		return -ENOMEM;
	}
	c->size = size;
	c->nr_ext = n;
	memcpy(c->ext, ext, n * sizeof(*ext));
	free(ext);
	*chunk = (uintptr_t)c;
	return 0;
}

static int reprotect_none(uint64_t va, uint64_t size)
{
	void *m = mmap(ptr(va), size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		       -1, 0);

	return m == MAP_FAILED ? -errno : 0;
}

/* Move the first @len bytes of @c between the pool and @va. */
static int chunk_move(struct host_provider *h, struct host_chunk *c,
		      uint64_t va, uint64_t len, bool in)
{
	uint64_t pool = (uintptr_t)h->pool, done = 0;
	int ret = 0;

	for (unsigned int i = 0; i < c->nr_ext && done < len; i++) {
		uint64_t n = c->ext[i].len < len - done ? c->ext[i].len :
							  len - done;

		ret = in ? move_pages(h, pool + c->ext[i].off, va + done, n) :
			   move_pages(h, va + done, pool + c->ext[i].off, n);
		if (ret)
			break;
		done += n;
	}
	if (ret && in && done) { /* put back what had moved */
		chunk_move(h, c, va, done, false);
		reprotect_none(va, done);
	}
	return ret;
}

/* Send a mapped chunk's pages home and leave PROT_NONE where they were.
 * The chunk is off the table. */
static int chunk_unmap(struct host_provider *h, struct host_chunk *c)
{
	int ret = 0;

	/* The pool's pages must come home writable. */
	if (c->protected &&
	    mprotect(ptr(c->va), c->mapped, PROT_READ | PROT_WRITE))
		ret = -errno;
	if (!ret)
		ret = chunk_move(h, c, c->va, c->mapped, false);
	if (!ret)
		ret = reprotect_none(c->va, c->mapped);
	c->va = 0;
	c->mapped = 0;
	c->protected = false;
	return ret;
}

static int unmap_one(struct host_provider *h, struct host_chunk *c)
{
	struct host_resv *r = resv_find(h, c->va, c->mapped);

	if (r)
		resv_mark(h, r, c->va, c->mapped, false);
	table_del(h, c);
	return chunk_unmap(h, c);
}

static void host_destroy(struct vmu_provider *p, uint64_t chunk)
{
	struct host_provider *h = to_host(p);
	struct host_chunk *c = ptr(chunk);

	pthread_mutex_lock(&h->lock);
	if (c->va)
		unmap_one(h, c);
	for (unsigned int i = 0; i < c->nr_ext; i++) {
		uint64_t first = c->ext[i].off / p->granularity,
			 n = c->ext[i].len / p->granularity;

		/* until unkeep(), adopted memory stays the predecessor's:
		 * nothing else may be given it while a restore may fail */
		if (c->adopted && h->kept)
			kept_set(h, first, first + n, true);
		else
			gran_set(h, first, n, false);
	}
	if (!c->adopted || !h->kept)
		h->free_gran += c->size / p->granularity;
	pthread_mutex_unlock(&h->lock);
	free(c);
}

static int host_map(struct vmu_provider *p, uint64_t va, uint64_t size,
		    uint64_t chunk)
{
	struct host_provider *h = to_host(p);
	struct host_chunk *c = ptr(chunk);
	struct host_resv *r;
	int ret;

	if (!size || size > c->size || size % p->granularity ||
	    va % p->granularity)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	r = resv_find(h, va, size);
	if (!r) {
		ret = -EINVAL; /* not inside a reservation */
		goto out;
	}
	if (c->va || !resv_all(h, r, va, size, false)) {
		ret = -EBUSY; /* the chunk, or the range, is mapped */
		goto out;
	}
	ret = chunk_move(h, c, va, size, true);
	if (ret)
		goto out;
	c->va = va;
	c->mapped = size;
	ret = table_add(h, c);
	if (ret)
		chunk_unmap(h, c);
	else
		resv_mark(h, r, va, size, true);
out:
	pthread_mutex_unlock(&h->lock);
	return ret;
}

/*
 * Calls @fn on each mapped chunk covering [@va, @va + @size), which must
 * be whole ranges given to map(): -EINVAL, and nothing done, otherwise.
 * Lock held.
 */
static int for_each_mapped(struct host_provider *h, uint64_t va, uint64_t size,
			   int (*fn)(struct host_provider *,
				     struct host_chunk *))
{
	uint64_t cur;
	int ret = 0;

	for (cur = va; cur < va + size;) {
		struct host_chunk *c = table_find(h, cur);

		if (!c || c->mapped > va + size - cur)
			return -EINVAL;
		cur += c->mapped;
	}
	for (cur = va; cur < va + size;) {
		struct host_chunk *c = table_find(h, cur);
		int err;

		cur += c->mapped;
		err = fn(h, c);
		if (err && !ret)
			ret = err;
	}
	return ret;
}

static int host_unmap(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	struct host_provider *h = to_host(p);
	int ret;

	pthread_mutex_lock(&h->lock);
	ret = for_each_mapped(h, va, size, unmap_one);
	pthread_mutex_unlock(&h->lock);
	return ret;
}

static struct host_chunk *chunk_containing(struct host_provider *h, uint64_t va)
{
	for (uint64_t i = 0; i < h->table_size; i++)
		for (struct host_chunk *c = h->table[i]; c; c = c->hnext)
			if (va >= c->va && va < c->va + c->mapped)
				return c;
	return NULL;
}

static int host_set_access(struct vmu_provider *p, uint64_t va, uint64_t size,
			   enum vmu_access access)
{
	struct host_provider *h = to_host(p);
	int prot = access == VMU_ACCESS_READWRITE ? PROT_READ | PROT_WRITE :
		   access == VMU_ACCESS_READ	  ? PROT_READ :
						    PROT_NONE;
	int ret = 0;

	pthread_mutex_lock(&h->lock);
	/* Rare (text commits): a scan of the table is fine. */
	for (uint64_t cur = va; cur < va + size;) {
		struct host_chunk *c = chunk_containing(h, cur);

		if (!c) {
			ret = -EINVAL;
			goto out;
		}
		cur = c->va + c->mapped;
	}
	for (uint64_t cur = va; cur < va + size;) {
		struct host_chunk *c = chunk_containing(h, cur);

		/* unmap() makes its pages writable before they go home */
		c->protected = true;
		cur = c->va + c->mapped;
	}
	if (mprotect(ptr(va), size, prot))
		ret = -errno;
out:
	pthread_mutex_unlock(&h->lock);
	return ret;
}

static int host_copy_htod(struct vmu_provider *p, uint64_t dst, const void *src,
			  uint64_t len)
{
	memcpy(ptr(dst), src, len);
	return 0;
}

static int host_copy_dtoh(struct vmu_provider *p, void *dst, uint64_t src,
			  uint64_t len)
{
	memcpy(dst, ptr(src), len);
	return 0;
}

static int host_copy_dtod(struct vmu_provider *p, uint64_t dst, uint64_t src,
			  uint64_t len)
{
	memmove(ptr(dst), ptr(src), len);
	return 0;
}

static int host_memset(struct vmu_provider *p, uint64_t dst, int byte,
		       uint64_t len)
{
	memset(ptr(dst), byte, len);
	return 0;
}

/* Pieces written as they are found, contiguous ones merged: @n of them,
 * of which the first @max go to @out. */
struct piece_acc {
	struct vmu_piece *out;
	unsigned int max, n;
	struct vmu_piece last;
};

static void put_piece(struct piece_acc *a, uint64_t off, uint64_t len)
{
	if (a->n && a->last.off + a->last.len == off) {
		a->last.len += len;
		if (a->n <= a->max)
			a->out[a->n - 1] = a->last;
		return;
	}
	a->last = (struct vmu_piece){ off, len };
	if (a->n < a->max)
		a->out[a->n] = a->last;
	a->n++;
}

static uint64_t up(const struct vmu_provider *p, uint64_t size)
{
	return (size + p->granularity - 1) & ~(p->granularity - 1);
}

/* A run of @n free granules of the arena, taken: its first, or -1. */
static int64_t swap_take(struct host_swap *sw, uint64_t n)
{
	for (uint64_t i = 0, run = 0; n && i < sw->nr_gran; i++) {
		run = bit(sw->bitmap, i) ? 0 : run + 1;
		if (run == n) {
			bits(sw->bitmap, i + 1 - n, n, true);
			return (int64_t)(i + 1 - n);
		}
	}
	return -1;
}

/* The arena's granules [@first, + @n) back to it, their pages to the
 * system. */
static void swap_give(struct host_provider *h, uint64_t first, uint64_t n)
{
	const uint64_t g = h->base.granularity;

	fallocate(h->sw.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		  (off_t)(first * g), (off_t)(n * g));
	bits(h->sw.bitmap, first, n, false);
}

static bool in_arena(const struct host_swap *sw, const void *buf)
{
	return sw->base && (const uint8_t *)buf >= sw->base &&
	       (const uint8_t *)buf < sw->base + sw->size;
}

static int host_host_alloc(struct vmu_provider *p, uint64_t size, void **buf)
{
	struct host_provider *h = to_host(p);
	int64_t first = -1;
	void *m;

	pthread_mutex_lock(&h->lock);
	if (h->sw.base)
		first = swap_take(&h->sw, up(p, size) / p->granularity);
	pthread_mutex_unlock(&h->lock);
	if (first >= 0) {
		*buf = h->sw.base + (uint64_t)first * p->granularity;
		return 0;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	/* Swap buffers are large and long-lived: huge pages halve the cost
	 * of faulting them in where THP is in madvise mode. */
	madvise(m, size, MADV_HUGEPAGE);
	*buf = m;
	return 0;
}

static void host_host_free(struct vmu_provider *p, void *buf, uint64_t size)
{
	struct host_provider *h = to_host(p);

	if (!in_arena(&h->sw, buf)) {
		munmap(buf, size);
		return;
	}
	uint64_t first =
		(uint64_t)((uint8_t *)buf - h->sw.base) / p->granularity;
	uint64_t n = up(p, size) / p->granularity;

	pthread_mutex_lock(&h->lock);
	if (bit(h->sw.adopting, first)) {
		/* a restore undone: the predecessor's again */
		bits(h->sw.adopting, first, n, false);
		bits(h->sw.kept, first, n, true);
	} else {
		swap_give(h, first, n);
	}
	pthread_mutex_unlock(&h->lock);
}

static int host_swap_arena(struct vmu_provider *p, uint64_t size, int fd,
			   const struct vmu_piece *keep, unsigned int nr)
{
	struct host_provider *h = to_host(p);
	const uint64_t g = p->granularity;
	struct host_swap sw = { .fd = fd };
	struct stat st;
	int ret = 0;

	if (h->sw.base) {
		if (fd >= 0)
			close(fd);
		return -EBUSY;
	}
	if (sw.fd < 0)
		sw.fd = memfd_create("djinn-swap", MFD_CLOEXEC);
	if (sw.fd < 0)
		return -errno;
	size -= size % g;
	if (fstat(sw.fd, &st) || (uint64_t)st.st_size % g) {
		ret = -EINVAL;
		goto fail;
	}
	/* a predecessor's keeps its size */
	if (size < (uint64_t)st.st_size)
		size = (uint64_t)st.st_size;
	if (!size ||
	    (size > (uint64_t)st.st_size && ftruncate(sw.fd, (off_t)size))) {
		ret = size ? -errno : -EINVAL;
		goto fail;
	}
	sw.size = size;
	sw.nr_gran = size / g;
	sw.bitmap = calloc((sw.nr_gran + 63) / 64, sizeof(uint64_t));
	sw.kept = nr ? calloc((sw.nr_gran + 63) / 64, sizeof(uint64_t)) : NULL;
	sw.adopting = nr ? calloc((sw.nr_gran + 63) / 64, sizeof(uint64_t)) :
			   NULL;
	if (!sw.bitmap || (nr && (!sw.kept || !sw.adopting))) {
		ret = -ENOMEM;
		goto fail;
	}
	for (unsigned int i = 0; i < nr; i++) {
		if (keep[i].off % g || keep[i].len % g || !keep[i].len ||
		    keep[i].off / g >= sw.nr_gran ||
		    keep[i].len / g > sw.nr_gran - keep[i].off / g) {
			ret = -EINVAL;
			goto fail;
		}
		bits(sw.bitmap, keep[i].off / g, keep[i].len / g, true);
		bits(sw.kept, keep[i].off / g, keep[i].len / g, true);
	}
	sw.base = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_NORESERVE, sw.fd, 0);
	if (sw.base == MAP_FAILED) {
		ret = -errno;
		goto fail;
	}
	madvise(sw.base, size, MADV_HUGEPAGE);
	pthread_mutex_lock(&h->lock);
	h->sw = sw;
	pthread_mutex_unlock(&h->lock);
	return 0;

fail:
	free(sw.bitmap);
	free(sw.kept);
	free(sw.adopting);
	close(sw.fd);
	return ret;
}

static void host_swap_trim(struct vmu_provider *p)
{
	struct host_provider *h = to_host(p);
	const uint64_t g = p->granularity;
	uint64_t run = 0;

	pthread_mutex_lock(&h->lock);
	/* each run of granules still free, in one call */
	for (uint64_t i = 0; h->sw.trim && i <= h->sw.nr_gran; i++) {
		if (i < h->sw.nr_gran && bit(h->sw.trim, i) &&
		    !bit(h->sw.bitmap, i)) {
			run++;
			continue;
		}
		if (run)
			fallocate(h->sw.fd,
				  FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  (off_t)((i - run) * g), (off_t)(run * g));
		run = 0;
	}
	free(h->sw.trim);
	h->sw.trim = NULL;
	pthread_mutex_unlock(&h->lock);
}

static int host_swap_piece(struct vmu_provider *p, const void *buf,
			   uint64_t size, struct vmu_piece *out)
{
	struct host_provider *h = to_host(p);

	if (!in_arena(&h->sw, buf))
		return -ENOENT;
	out->off = (uint64_t)((const uint8_t *)buf - h->sw.base);
	out->len = up(p, size);
	return 0;
}

static int host_swap_file(struct vmu_provider *p, uint64_t *size)
{
	struct host_provider *h = to_host(p);

	*size = h->sw.size;
	return h->sw.base ? h->sw.fd : -1;
}

static unsigned int host_swap_used(struct vmu_provider *p,
				   struct vmu_piece *out, unsigned int max)
{
	struct host_provider *h = to_host(p);
	struct piece_acc a = { .out = out, .max = max };

	pthread_mutex_lock(&h->lock);
	for (uint64_t i = 0; i < h->sw.nr_gran; i++)
		if (bit(h->sw.bitmap, i))
			put_piece(&a, i * p->granularity, p->granularity);
	pthread_mutex_unlock(&h->lock);
	return a.n;
}

static int host_swap_adopt(struct vmu_provider *p, const struct vmu_piece *pc,
			   void **buf)
{
	struct host_provider *h = to_host(p);
	const uint64_t g = p->granularity;
	uint64_t first = pc->off / g, n = pc->len / g;
	int ret = 0;

	pthread_mutex_lock(&h->lock);
	if (!h->sw.base || !n || pc->off % g || pc->len % g ||
	    first >= h->sw.nr_gran || n > h->sw.nr_gran - first)
		ret = -EINVAL;
	for (uint64_t i = first; !ret && i < first + n; i++)
		if (!bit(h->sw.kept, i))
			ret = -EINVAL;
	if (!ret) {
		bits(h->sw.kept, first, n, false);
		bits(h->sw.adopting, first, n, true);
		*buf = h->sw.base + pc->off;
	}
	pthread_mutex_unlock(&h->lock);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Memory that outlives the process */

static int host_file(struct vmu_provider *p)
{
	return to_host(p)->fd;
}

static unsigned int host_pieces(struct vmu_provider *p, uint64_t chunk,
				struct vmu_piece *out, unsigned int max)
{
	struct host_chunk *c = ptr(chunk);
	struct piece_acc a = { .out = out, .max = max };

	for (unsigned int i = 0; i < c->nr_ext; i++)
		put_piece(&a, c->ext[i].off, c->ext[i].len);
	return a.n;
}

static unsigned int host_used(struct vmu_provider *p, struct vmu_piece *out,
			      unsigned int max)
{
	struct host_provider *h = to_host(p);
	struct piece_acc a = { .out = out, .max = max };

	pthread_mutex_lock(&h->lock);
	for (uint64_t i = 0; i < h->nr_gran; i++)
		if (gran_used(h, i))
			put_piece(&a, i * p->granularity, p->granularity);
	pthread_mutex_unlock(&h->lock);
	return a.n;
}

static bool gran_kept(const struct host_provider *h, uint64_t i)
{
	return bit(h->kept, i);
}

static int host_adopt(struct vmu_provider *p, const struct vmu_piece *pcs,
		      unsigned int nr, uint64_t *chunk)
{
	struct host_provider *h = to_host(p);
	const uint64_t g = p->granularity;
	uint64_t taken = 0; /* granules taken, in order */
	struct host_chunk *c;

	if (!nr)
		return -EINVAL;
	c = calloc(1, sizeof(*c) + nr * sizeof(c->ext[0]));
	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&h->lock);
	/* each granule taken as it is checked, so that one named twice is
	 * refused */
	for (unsigned int i = 0; i < nr; i++) {
		uint64_t first = pcs[i].off / g;

		if (!pcs[i].len || pcs[i].off % g || pcs[i].len % g ||
		    first >= h->nr_gran || pcs[i].len / g > h->nr_gran - first)
			goto refuse;
		for (uint64_t k = first; k < first + pcs[i].len / g; k++) {
			if (!gran_kept(h, k))
				goto refuse;
			kept_set(h, k, k + 1, false);
			taken++;
		}
		c->ext[i] = (struct host_extent){ pcs[i].off, pcs[i].len };
		c->size += pcs[i].len;
	}
	c->nr_ext = nr;
	c->adopted = true;
	pthread_mutex_unlock(&h->lock);
	*chunk = (uintptr_t)c;
	return 0;

refuse:
	/* those taken are kept again, in the order they were taken */
	for (unsigned int i = 0; taken; i++)
		for (uint64_t k = pcs[i].off / g;
		     taken && k < (pcs[i].off + pcs[i].len) / g; k++, taken--)
			kept_set(h, k, k + 1, true);
	pthread_mutex_unlock(&h->lock);
	free(c);
	return -EINVAL;
}

static void host_unkeep(struct vmu_provider *p)
{
	struct host_provider *h = to_host(p);

	pthread_mutex_lock(&h->lock);
	for (uint64_t i = 0; h->kept && i < h->nr_gran; i++) {
		if (gran_kept(h, i)) {
			gran_set(h, i, 1, false);
			h->free_gran++;
		}
	}
	free(h->kept);
	h->kept = NULL;
	/* free now; their pages go once the predecessor is gone
	 * (swap_trim()): a restart that fails before must find them */
	if (h->sw.kept && !h->sw.trim)
		h->sw.trim =
			calloc((h->sw.nr_gran + 63) / 64, sizeof(uint64_t));
	for (uint64_t i = 0; h->sw.kept && i < h->sw.nr_gran; i++) {
		if (!bit(h->sw.kept, i))
			continue;
		bits(h->sw.bitmap, i, 1, false);
		if (h->sw.trim)
			bits(h->sw.trim, i, 1, true);
	}
	free(h->sw.kept);
	free(h->sw.adopting);
	h->sw.kept = h->sw.adopting = NULL;
	pthread_mutex_unlock(&h->lock);
}

static void host_free(struct vmu_provider *p)
{
	struct host_provider *h = to_host(p);

	munmap(h->pool, p->capacity);
	close(h->fd);
	if (h->sw.base) {
		munmap(h->sw.base, h->sw.size);
		close(h->sw.fd);
	}
	free(h->sw.bitmap);
	free(h->sw.kept);
	free(h->sw.adopting);
	free(h->sw.trim);
	free(h->kept);
	pthread_mutex_destroy(&h->lock);
	for (uint64_t i = 0; i < h->nr_resv; i++)
		free(h->resv[i].mapped);
	free(h->resv);
	free(h->table);
	free(h->bitmap);
	free(h);
}

static const struct vmu_provider_ops host_ops = {
	.reserve = host_reserve,
	.release = host_release,
	.create = host_create,
	.destroy = host_destroy,
	.map = host_map,
	.unmap = host_unmap,
	.set_access = host_set_access,
	.copy_htod = host_copy_htod,
	.copy_dtoh = host_copy_dtoh,
	.copy_dtod = host_copy_dtod,
	.memset = host_memset,
	.host_alloc = host_host_alloc,
	.host_free = host_host_free,
	.free = host_free,
	.file = host_file,
	.pieces = host_pieces,
	.used = host_used,
	.adopt = host_adopt,
	.unkeep = host_unkeep,
	.swap_arena = host_swap_arena,
	.swap_piece = host_swap_piece,
	.swap_file = host_swap_file,
	.swap_used = host_swap_used,
	.swap_adopt = host_swap_adopt,
	.swap_trim = host_swap_trim,
};

static uint64_t max_map_count(void)
{
	unsigned long long n = 65530; /* the kernel's default */
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");

	if (f) {
		if (fscanf(f, "%llu", &n) != 1)
			n = 65530;
		fclose(f);
	}
	return n;
}

/* The pool: @fd's first @capacity bytes (it grows to them), mapped
 * shared at a reservation of @h's. */
static int pool_map(struct host_provider *h, int fd, uint64_t capacity)
{
	uint64_t pool;
	struct stat st;
	int ret;

	if (fstat(fd, &st))
		return -errno;
	if ((uint64_t)st.st_size < capacity && ftruncate(fd, (off_t)capacity))
		return -errno;
	ret = host_reserve(&h->base, capacity, h->base.granularity, &pool);
	if (ret)
		return ret;
	h->pool = ptr(pool);
	if (mmap(h->pool, capacity, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		ret = -errno;
		host_release(&h->base, pool, capacity);
		return ret;
	}
	/* Granules are moved with their page tables: huge pages make that
	 * one entry per 2 MiB, and first touches ten times cheaper (where
	 * shmem_enabled allows them). */
	madvise(h->pool, capacity, MADV_HUGEPAGE);
	return 0;
}

/* Granules @keep in use and kept (for adopt()). */
static int keep_pieces(struct host_provider *h, const struct vmu_piece *keep,
		       unsigned int nr)
{
	const uint64_t g = h->base.granularity;

	h->kept = calloc((h->nr_gran + 63) / 64, sizeof(uint64_t));
	if (!h->kept)
		return -ENOMEM;
	for (unsigned int i = 0; i < nr; i++) {
		uint64_t first = keep[i].off / g, n = keep[i].len / g;

		if (keep[i].off % g || keep[i].len % g || first >= h->nr_gran ||
		    n > h->nr_gran - first)
			return -EINVAL;
		for (uint64_t k = first; k < first + n; k++) {
			if (gran_used(h, k))
				continue; /* named twice */
			gran_set(h, k, 1, true);
			kept_set(h, k, k + 1, true);
			h->free_gran--;
		}
	}
	return 0;
}

static int host_open(int fd, uint64_t capacity, uint64_t granularity,
		     const struct vmu_piece *keep, unsigned int nr,
		     struct vmu_provider **out)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct host_provider *h;
	struct stat st;
	int ret;

	if (!granularity)
		granularity = HOST_DEFAULT_GRANULE;
	if ((granularity & (granularity - 1)) || granularity % page ||
	    fstat(fd, &st) || (uint64_t)st.st_size % granularity) {
		close(fd);
		return -EINVAL;
	}
	capacity -= capacity % granularity;
	if (capacity < (uint64_t)st.st_size)
		capacity = (uint64_t)st.st_size;
	if (!capacity) {
		close(fd);
		return -EINVAL;
	}
	/* Every granule can end up a mapping (VMA) of its own, in the pool
	 * and at its place: refuse a pool the kernel could not map. */
	if (capacity / granularity * 3 + 4096 > max_map_count()) {
		close(fd);
		return -E2BIG;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	h->fd = fd;
	h->sw.fd = -1;
	pthread_mutex_init(&h->lock, NULL);
	h->base = (struct vmu_provider){
		.ops = &host_ops,
		.name = "host",
		.granularity = granularity,
		.capacity = capacity,
	};
	h->nr_gran = h->free_gran = capacity / granularity;
	h->table_size = 64;
	h->bitmap = calloc((h->nr_gran + 63) / 64, sizeof(uint64_t));
	h->table = calloc(h->table_size, sizeof(*h->table));
	ret = !h->bitmap || !h->table ? -ENOMEM :
	      keep		      ? keep_pieces(h, keep, nr) :
					0;
	if (!ret)
		ret = pool_map(h, fd, capacity);
	if (ret) {
		close(fd);
		pthread_mutex_destroy(&h->lock);
		free(h->resv);
		free(h->kept);
		free(h->table);
		free(h->bitmap);
		free(h);
		return ret;
	}
	*out = &h->base;
	return 0;
}

int vmu_host_provider_create(uint64_t capacity, uint64_t granularity,
			     struct vmu_provider **out)
{
	int fd = memfd_create("djinn-pool", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	return host_open(fd, capacity, granularity, NULL, 0, out);
}

int vmu_host_provider_open(int fd, uint64_t capacity, uint64_t granularity,
			   const struct vmu_piece *keep, unsigned int nr,
			   struct vmu_provider **out)
{
	static const struct vmu_piece none;

	return host_open(fd, capacity, granularity, keep ? keep : &none,
			 keep ? nr : 0, out);
}
