// SPDX-License-Identifier: MIT
/*
 * The host provider: device memory for the CPU backend.
 *
 * The "physical memory" is one memfd of @capacity bytes, the pool. A
 * bitmap over its granules says which are in use; a chunk is a list of
 * extents of free granules (contiguous when possible, so it maps with one
 * mmap). The pool's pages, once touched, stay resident when chunks are
 * destroyed: on this kind of machine a first touch costs ten to thirty
 * times a copy, and a GPU's memory does not go away either.
 *
 * Virtual ranges are mmap(PROT_NONE, MAP_NORESERVE) reservations; map()
 * replaces part of one with MAP_SHARED | MAP_FIXED views of the pool, and
 * unmap() puts PROT_NONE back in a single mmap call, so the range stays
 * reserved and no other mapping can land in it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmu/provider.h"

#define HOST_DEFAULT_GRANULE (2ull << 20)

struct host_extent {
	uint64_t off; /* byte offset in the pool */
	uint64_t len;
};

struct host_chunk {
	uint64_t size;
	unsigned int nr_ext;
	struct host_extent ext[];
};

struct host_provider {
	struct vmu_provider base;
	int fd; /* the pool */
	uint64_t nr_gran;
	uint64_t free_gran;
	uint64_t *bitmap; /* bit set: granule in use */
	pthread_mutex_t lock; /* bitmap, free_gran */
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

static bool gran_used(const struct host_provider *h, uint64_t i)
{
	return h->bitmap[i / 64] >> (i % 64) & 1;
}

static void gran_set(struct host_provider *h, uint64_t first, uint64_t n,
		     bool used)
{
	for (uint64_t i = first; i < first + n; i++) {
		if (used)
			h->bitmap[i / 64] |= 1ull << (i % 64);
		else
			h->bitmap[i / 64] &= ~(1ull << (i % 64));
	}
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
static uint64_t run_len(const struct host_provider *h, uint64_t i,
			uint64_t max)
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
/* Operations */

static int host_reserve(struct vmu_provider *p, uint64_t size, uint64_t align,
			uint64_t *va)
{
	uint64_t start, head, tail;
	void *m;

	if (!size || (align & (align - 1)) || size + align < size)
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
	*va = start;
	return 0;
}

static void host_release(struct vmu_provider *p, uint64_t va, uint64_t size)
{
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

	c = malloc(sizeof(*c) + n * sizeof(c->ext[0]));
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

static void host_destroy(struct vmu_provider *p, uint64_t chunk)
{
	struct host_provider *h = to_host(p);
	struct host_chunk *c = ptr(chunk);

	pthread_mutex_lock(&h->lock);
	for (unsigned int i = 0; i < c->nr_ext; i++)
		gran_set(h, c->ext[i].off / p->granularity,
			 c->ext[i].len / p->granularity, false);
	h->free_gran += c->size / p->granularity;
	pthread_mutex_unlock(&h->lock);
	free(c);
}

static int host_unmap(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	void *m = mmap(ptr(va), size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		       -1, 0);

	return m == MAP_FAILED ? -errno : 0;
}

static int host_map(struct vmu_provider *p, uint64_t va, uint64_t size,
		    uint64_t chunk)
{
	struct host_provider *h = to_host(p);
	struct host_chunk *c = ptr(chunk);
	uint64_t done = 0;

	if (size > c->size || size % p->granularity)
		return -EINVAL;
	for (unsigned int i = 0; i < c->nr_ext && done < size; i++) {
		uint64_t len = c->ext[i].len;
		void *m;

		if (len > size - done)
			len = size - done;
		m = mmap(ptr(va + done), len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED | MAP_POPULATE, h->fd,
			 c->ext[i].off);
		if (m == MAP_FAILED) {
			int ret = -errno;

			if (done)
				host_unmap(p, va, done);
			return ret;
		}
		done += len;
	}
	return 0;
}

static int host_set_access(struct vmu_provider *p, uint64_t va, uint64_t size,
			   enum vmu_access access)
{
	int prot = access == VMU_ACCESS_READWRITE ? PROT_READ | PROT_WRITE :
		   access == VMU_ACCESS_READ	  ? PROT_READ :
						    PROT_NONE;

	return mprotect(ptr(va), size, prot) ? -errno : 0;
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

static int host_host_alloc(struct vmu_provider *p, uint64_t size, void **buf)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
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
	munmap(buf, size);
}

static void host_free(struct vmu_provider *p)
{
	struct host_provider *h = to_host(p);

	close(h->fd);
	pthread_mutex_destroy(&h->lock);
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
};

int vmu_host_provider_create(uint64_t capacity, uint64_t granularity,
			     struct vmu_provider **out)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct host_provider *h;
	int ret;

	if (!granularity)
		granularity = HOST_DEFAULT_GRANULE;
	if ((granularity & (granularity - 1)) || granularity % page)
		return -EINVAL;
	capacity -= capacity % granularity;
	if (!capacity)
		return -EINVAL;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->base = (struct vmu_provider){
		.ops = &host_ops,
		.name = "host",
		.granularity = granularity,
		.capacity = capacity,
	};
	h->nr_gran = h->free_gran = capacity / granularity;
	h->bitmap = calloc((h->nr_gran + 63) / 64, sizeof(uint64_t));
	if (!h->bitmap) {
		ret = -ENOMEM;
		goto out_free;
	}
	h->fd = memfd_create("djinn-vmu", MFD_CLOEXEC);
	if (h->fd < 0) {
		ret = -errno;
		goto out_free_bitmap;
	}
	if (ftruncate(h->fd, (off_t)capacity)) {
		ret = -errno;
		goto out_close;
	}
	pthread_mutex_init(&h->lock, NULL);
	*out = &h->base;
	return 0;

out_close:
	close(h->fd);
out_free_bitmap:
	free(h->bitmap);
out_free:
	free(h);
	return ret;
}
