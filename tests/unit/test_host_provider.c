// SPDX-License-Identifier: MIT
/*
 * Unit tests for the host provider (djinnd/vmu/host.c), driven only through
 * its struct vmu_provider_ops table, the way the VMU drives it.
 *
 * For this provider a device address is a host pointer, so the tests also
 * look at mapped memory directly through (void *)(uintptr_t)va.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "array_size.h"
#include "testutil.h"
#include "vmu/provider.h"

#define GRAN (64 * KiB)
#define CAP (64 * MiB)

/* ---------------------------------------------------------------------- */
/* Helpers */

static void expect_byte(const uint8_t *got, int byte, uint64_t len,
			const char *what)
{
	for (uint64_t i = 0; i < len; i++)
		if (got[i] != (uint8_t)byte)
			fail_msg("%s: byte %" PRIu64 " is %#x, want %#x", what,
				 i, got[i], (unsigned int)(uint8_t)byte);
}

static uint64_t reserve(struct vmu_provider *p, uint64_t size, uint64_t align)
{
	uint64_t va = 0;

	assert_int_equal(p->ops->reserve(p, size, align, &va), 0);
	assert_true(va != 0);
	assert_int_equal(va % align, 0);
	return va;
}

static uint64_t chunk_create(struct vmu_provider *p, uint64_t size)
{
	uint64_t chunk = 0;

	assert_int_equal(p->ops->create(p, size, &chunk), 0);
	return chunk;
}

static int setup(void **state)
{
	struct vmu_provider *p = NULL;

	assert_int_equal(vmu_host_provider_create(CAP, GRAN, &p), 0);
	assert_non_null(p);
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct vmu_provider *p = *state;

	if (p)
		p->ops->free(p);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Creation */

static void test_params(void **state)
{
	struct vmu_provider *p = *state;
	const struct vmu_provider_ops *ops = p->ops;

	assert_int_equal(p->granularity, GRAN);
	assert_int_equal(p->capacity, CAP);
	assert_non_null(p->name);
	assert_true(p->name[0] != '\0');
	assert_non_null(ops);
	assert_non_null(ops->reserve);
	assert_non_null(ops->release);
	assert_non_null(ops->create);
	assert_non_null(ops->destroy);
	assert_non_null(ops->map);
	assert_non_null(ops->unmap);
	assert_non_null(ops->set_access);
	assert_non_null(ops->copy_htod);
	assert_non_null(ops->copy_dtoh);
	assert_non_null(ops->copy_dtod);
	assert_non_null(ops->memset);
	assert_non_null(ops->host_alloc);
	assert_non_null(ops->host_free);
	assert_non_null(ops->free);
}

static void test_capacity_rounded_down(void **state)
{
	struct vmu_provider *p = NULL;

	assert_int_equal(vmu_host_provider_create(10 * GRAN + 123, GRAN, &p),
			 0);
	assert_int_equal(p->granularity, GRAN);
	assert_int_equal(p->capacity, 10 * GRAN);
	p->ops->free(p);

	/* 0: the default granule, 2 MiB */
	p = NULL;
	assert_int_equal(vmu_host_provider_create(10 * MiB + 4096, 0, &p), 0);
	assert_int_equal(p->granularity, 2 * MiB);
	assert_int_equal(p->capacity, 10 * MiB);
	p->ops->free(p);

	/* the page size itself is a valid granule */
	p = NULL;
	assert_int_equal(vmu_host_provider_create(
				 1 * MiB, (uint64_t)sysconf(_SC_PAGESIZE), &p),
			 0);
	assert_int_equal(p->granularity, (uint64_t)sysconf(_SC_PAGESIZE));
	assert_int_equal(p->capacity, 1 * MiB);
	p->ops->free(p);
}

static void test_bad_granularity(void **state)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t bad[] = {
		3000, /* neither */
		page / 2, /* a power of two below the page size */
		3 * GRAN, /* a page multiple, not a power of two */
		page + 1,
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct vmu_provider *p = NULL;
		int rc = vmu_host_provider_create(CAP, bad[i], &p);

		if (rc != -EINVAL)
			fail_msg("granularity %" PRIu64 ": got %d, want %d",
				 bad[i], rc, -EINVAL);
	}
}

/* ---------------------------------------------------------------------- */
/* Address space */

static void test_reserve_aligned(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t aligns[] = { GRAN, 2 * GRAN, 16 * GRAN, 4 * MiB };
	const size_t n = ARRAY_SIZE(aligns);
	uint64_t va[2 * 4], size[2 * 4];

	for (size_t i = 0; i < 2 * n; i++) {
		size[i] = (i + 1) * GRAN;
		va[i] = reserve(p, size[i], aligns[i % n]);
	}
	/* no two reservations overlap */
	for (size_t i = 0; i < 2 * n; i++)
		for (size_t j = i + 1; j < 2 * n; j++)
			assert_true(va[i] + size[i] <= va[j] ||
				    va[j] + size[j] <= va[i]);
	for (size_t i = 0; i < 2 * n; i++)
		p->ops->release(p, va[i], size[i]);
}

/* ---------------------------------------------------------------------- */
/* Capacity */

static void test_create_capacity(void **state)
{
	struct vmu_provider *p = *state;
	uint64_t c, c1, c2, unused = 0;

	assert_int_equal(p->ops->create(p, CAP + GRAN, &unused), -ENOMEM);

	c = chunk_create(p, CAP); /* exactly the capacity */
	assert_int_equal(p->ops->create(p, GRAN, &unused), -ENOMEM);
	p->ops->destroy(p, c);

	c1 = chunk_create(p, CAP / 2);
	c2 = chunk_create(p, CAP / 2);
	assert_int_equal(p->ops->create(p, GRAN, &unused), -ENOMEM);
	p->ops->destroy(p, c1);
	c1 = chunk_create(p, GRAN);
	assert_int_equal(p->ops->create(p, CAP / 2, &unused), -ENOMEM);
	p->ops->destroy(p, c1);
	p->ops->destroy(p, c2);
}

/* Many granule chunks fill the capacity exactly; destroy gives it back. */
static void test_destroy_returns_capacity(void **state)
{
	struct vmu_provider *p = *state;
	const size_t n = CAP / GRAN;
	uint64_t *chunks = xmalloc(n * sizeof(*chunks));
	uint64_t unused = 0, c;

	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < n; i++)
			assert_int_equal(p->ops->create(p, GRAN, &chunks[i]),
					 0);
		assert_int_equal(p->ops->create(p, GRAN, &unused), -ENOMEM);
		for (size_t i = 0; i < n; i++)
			p->ops->destroy(p, chunks[i]);
	}
	c = chunk_create(p, CAP);
	p->ops->destroy(p, c);
	free(chunks);
}

/* ---------------------------------------------------------------------- */
/* Mapping */

static void test_map_write_read(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t size = 4 * GRAN;
	uint64_t va = reserve(p, size, GRAN);
	uint64_t c = chunk_create(p, size);
	uint8_t *back = xmalloc(size);

	assert_int_equal(p->ops->map(p, va, size, c), 0);
	pattern(dev_ptr(va), 1, 0, size);
	expect_pattern(dev_ptr(va), 1, 0, size, "through the pointer");
	assert_int_equal(p->ops->copy_dtoh(p, back, va, size), 0);
	expect_pattern(back, 1, 0, size, "copy_dtoh");

	assert_int_equal(p->ops->unmap(p, va, size), 0);
	p->ops->release(p, va, size);
	p->ops->destroy(p, c);
	free(back);
}

static void test_unmap_keeps_contents(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t size = 2 * GRAN;
	uint64_t va1 = reserve(p, size, GRAN);
	uint64_t va2 = reserve(p, size, GRAN);
	uint64_t c = chunk_create(p, size);

	assert_int_equal(p->ops->map(p, va1, size, c), 0);
	pattern(dev_ptr(va1), 2, 0, size);
	assert_int_equal(p->ops->unmap(p, va1, size), 0);

	/* the same chunk at another address holds the same bytes */
	assert_int_equal(p->ops->map(p, va2, size, c), 0);
	expect_pattern(dev_ptr(va2), 2, 0, size, "chunk remapped elsewhere");
	pattern(dev_ptr(va2), 3, 0, size);
	assert_int_equal(p->ops->unmap(p, va2, size), 0);

	/* and back at the first address */
	assert_int_equal(p->ops->map(p, va1, size, c), 0);
	expect_pattern(dev_ptr(va1), 3, 0, size, "chunk mapped back");
	assert_int_equal(p->ops->unmap(p, va1, size), 0);

	p->ops->release(p, va1, size);
	p->ops->release(p, va2, size);
	p->ops->destroy(p, c);
}

/* map() places the first @size bytes of a larger chunk. */
static void test_map_prefix_of_chunk(void **state)
{
	struct vmu_provider *p = *state;
	uint64_t va1 = reserve(p, 4 * GRAN, GRAN);
	uint64_t va2 = reserve(p, 2 * GRAN, GRAN);
	uint64_t c = chunk_create(p, 4 * GRAN);

	assert_int_equal(p->ops->map(p, va1, 4 * GRAN, c), 0);
	pattern(dev_ptr(va1), 4, 0, 4 * GRAN);
	assert_int_equal(p->ops->unmap(p, va1, 4 * GRAN), 0);

	assert_int_equal(p->ops->map(p, va2, 2 * GRAN, c), 0);
	expect_pattern(dev_ptr(va2), 4, 0, 2 * GRAN, "first half of the chunk");
	assert_int_equal(p->ops->unmap(p, va2, 2 * GRAN), 0);

	p->ops->release(p, va1, 4 * GRAN);
	p->ops->release(p, va2, 2 * GRAN);
	p->ops->destroy(p, c);
}

/* Several chunks side by side in one reservation, as a growing region has
 * them: copies cross chunk boundaries and each chunk keeps its own bytes. */
static void test_map_chunks_side_by_side(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t n = 4, size = n * GRAN;
	uint64_t va = reserve(p, size, GRAN);
	uint64_t va2 = reserve(p, GRAN, GRAN);
	uint64_t c[4];
	uint8_t *src = xmalloc(size), *back = xmalloc(size);

	for (uint64_t i = 0; i < n; i++) {
		c[i] = chunk_create(p, GRAN);
		assert_int_equal(p->ops->map(p, va + i * GRAN, GRAN, c[i]), 0);
	}
	pattern(src, 5, 0, size);
	assert_int_equal(p->ops->copy_htod(p, va, src, size), 0);
	expect_pattern(dev_ptr(va), 5, 0, size, "four chunks");
	memset(back, 0, size);
	assert_int_equal(p->ops->copy_dtoh(p, back, va, size), 0);
	expect_pattern(back, 5, 0, size, "copy_dtoh across chunks");

	for (uint64_t i = 0; i < n; i++)
		assert_int_equal(p->ops->unmap(p, va + i * GRAN, GRAN), 0);
	/* the third chunk holds the third granule's bytes */
	assert_int_equal(p->ops->map(p, va2, GRAN, c[2]), 0);
	expect_pattern(dev_ptr(va2), 5, 2 * GRAN, GRAN, "chunk 2 alone");
	assert_int_equal(p->ops->unmap(p, va2, GRAN), 0);

	for (uint64_t i = 0; i < n; i++)
		p->ops->destroy(p, c[i]);
	p->ops->release(p, va, size);
	p->ops->release(p, va2, GRAN);
	free(src);
	free(back);
}

/* Two live chunks never share bytes. */
static void test_chunks_distinct(void **state)
{
	struct vmu_provider *p = *state;
	uint64_t va1 = reserve(p, GRAN, GRAN), va2 = reserve(p, GRAN, GRAN);
	uint64_t c1 = chunk_create(p, GRAN), c2 = chunk_create(p, GRAN);

	assert_int_equal(p->ops->map(p, va1, GRAN, c1), 0);
	assert_int_equal(p->ops->map(p, va2, GRAN, c2), 0);
	memset(dev_ptr(va1), 0x11, GRAN);
	memset(dev_ptr(va2), 0x22, GRAN);
	expect_byte(dev_ptr(va1), 0x11, GRAN, "chunk 1");
	expect_byte(dev_ptr(va2), 0x22, GRAN, "chunk 2");
	assert_int_equal(p->ops->unmap(p, va1, GRAN), 0);
	assert_int_equal(p->ops->unmap(p, va2, GRAN), 0);
	p->ops->destroy(p, c1);
	p->ops->destroy(p, c2);
	p->ops->release(p, va1, GRAN);
	p->ops->release(p, va2, GRAN);
}

static void test_set_access(void **state)
{
	struct vmu_provider *p = *state;
	uint64_t va = reserve(p, 2 * GRAN, GRAN);
	uint64_t c = chunk_create(p, 2 * GRAN);

	assert_int_equal(p->ops->map(p, va, 2 * GRAN, c), 0);
	pattern(dev_ptr(va), 6, 0, 2 * GRAN);

	assert_int_equal(p->ops->set_access(p, va, GRAN, VMU_ACCESS_READ), 0);
	expect_pattern(dev_ptr(va), 6, 0, 2 * GRAN, "read-only granule");
	assert_int_equal(p->ops->set_access(p, va, GRAN, VMU_ACCESS_NONE), 0);
	assert_int_equal(
		p->ops->set_access(p, va, 2 * GRAN, VMU_ACCESS_READWRITE), 0);
	/* writable again, and the bytes survived the changes */
	expect_pattern(dev_ptr(va), 6, 0, 2 * GRAN, "after access changes");
	memset(dev_ptr(va), 0x33, 2 * GRAN);
	expect_byte(dev_ptr(va), 0x33, 2 * GRAN, "rewritten");

	assert_int_equal(p->ops->unmap(p, va, 2 * GRAN), 0);
	p->ops->destroy(p, c);
	p->ops->release(p, va, 2 * GRAN);
}

/* ---------------------------------------------------------------------- */
/* Copies */

static void test_copies(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t size = 2 * GRAN;
	uint64_t a = reserve(p, size, GRAN), b = reserve(p, size, GRAN);
	uint64_t ca = chunk_create(p, size), cb = chunk_create(p, size);
	uint8_t *src = xmalloc(size), *dst = xmalloc(size);

	assert_int_equal(p->ops->map(p, a, size, ca), 0);
	assert_int_equal(p->ops->map(p, b, size, cb), 0);

	/* htod: whole, then an odd piece at an odd offset */
	pattern(src, 7, 0, size);
	assert_int_equal(p->ops->copy_htod(p, a, src, size), 0);
	assert_memory_equal(dev_ptr(a), src, size);
	pattern(src, 8, 0, 1000);
	assert_int_equal(p->ops->copy_htod(p, a + 101, src, 1000), 0);
	expect_pattern(dev_ptr(a) + 101, 8, 0, 1000, "htod piece");
	expect_pattern(dev_ptr(a), 7, 0, 101, "htod before the piece");
	expect_pattern(dev_ptr(a) + 1101, 7, 1101, size - 1101,
		       "htod after the piece");

	/* dtoh of an odd piece */
	memset(dst, 0, size);
	assert_int_equal(p->ops->copy_dtoh(p, dst, a + 1101, 3000), 0);
	expect_pattern(dst, 7, 1101, 3000, "dtoh piece");
	expect_byte(dst + 3000, 0, size - 3000, "dtoh wrote past len");

	/* dtod: whole, then a piece that crosses the granule boundary */
	assert_int_equal(p->ops->copy_dtod(p, b, a, size), 0);
	assert_memory_equal(dev_ptr(b), dev_ptr(a), size);
	memset(dev_ptr(b), 0, size);
	assert_int_equal(p->ops->copy_dtod(p, b + 7, a + GRAN - 3, 10), 0);
	assert_memory_equal(dev_ptr(b) + 7, dev_ptr(a) + GRAN - 3, 10);
	expect_byte(dev_ptr(b), 0, 7, "dtod before the piece");
	expect_byte(dev_ptr(b) + 17, 0, size - 17, "dtod after the piece");

	/* memset a range that crosses the granule boundary */
	pattern(dev_ptr(a), 9, 0, size);
	assert_int_equal(p->ops->memset(p, a + 10, 0xab, GRAN), 0);
	expect_pattern(dev_ptr(a), 9, 0, 10, "memset before the range");
	expect_byte(dev_ptr(a) + 10, 0xab, GRAN, "memset range");
	expect_pattern(dev_ptr(a) + 10 + GRAN, 9, 10 + GRAN, size - 10 - GRAN,
		       "memset after the range");
	assert_int_equal(p->ops->memset(p, a, 0, size), 0);
	expect_byte(dev_ptr(a), 0, size, "memset 0");

	assert_int_equal(p->ops->unmap(p, a, size), 0);
	assert_int_equal(p->ops->unmap(p, b, size), 0);
	p->ops->destroy(p, ca);
	p->ops->destroy(p, cb);
	p->ops->release(p, a, size);
	p->ops->release(p, b, size);
	free(src);
	free(dst);
}

/* ---------------------------------------------------------------------- */
/* Host memory */

static void test_host_alloc(void **state)
{
	struct vmu_provider *p = *state;
	const uint64_t sizes[] = { 1, 4097, 3 * GRAN + 5, 8 * MiB };
	uint64_t va = reserve(p, 8 * MiB, GRAN);
	uint64_t c = chunk_create(p, 8 * MiB);

	assert_int_equal(p->ops->map(p, va, 8 * MiB, c), 0);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		void *h1 = NULL, *h2 = NULL;
		uint64_t len = sizes[i];

		assert_int_equal(p->ops->host_alloc(p, len, &h1), 0);
		assert_int_equal(p->ops->host_alloc(p, len, &h2), 0);
		assert_non_null(h1);
		assert_non_null(h2);
		assert_true(h1 != h2);
		pattern(h1, 10 + i, 0, len);
		assert_int_equal(p->ops->copy_htod(p, va, h1, len), 0);
		memset(h2, 0, len);
		assert_int_equal(p->ops->copy_dtoh(p, h2, va, len), 0);
		expect_pattern(h2, 10 + i, 0, len, "through host buffers");
		p->ops->host_free(p, h1, len);
		p->ops->host_free(p, h2, len);
	}
	assert_int_equal(p->ops->unmap(p, va, 8 * MiB), 0);
	p->ops->destroy(p, c);
	p->ops->release(p, va, 8 * MiB);
}

/* Host buffers are not device memory: they are there when the device's
 * capacity is all handed out (swapped regions must go somewhere). */
static void test_host_alloc_not_device_capacity(void **state)
{
	struct vmu_provider *p = *state;
	uint64_t c = chunk_create(p, CAP), unused = 0;
	void *h = NULL;

	assert_int_equal(p->ops->host_alloc(p, 4 * MiB, &h), 0);
	assert_non_null(h);
	memset(h, 0x5a, 4 * MiB);
	assert_int_equal(p->ops->create(p, GRAN, &unused), -ENOMEM);
	p->ops->host_free(p, h, 4 * MiB);
	p->ops->destroy(p, c);
}

/* ---------------------------------------------------------------------- */
/* Threads */

#define NTHREADS 8
#define ITERS 300

struct worker {
	struct vmu_provider *p;
	pthread_barrier_t *barrier;
	unsigned int id;
	uint64_t chunks[CAP / GRAN];
	size_t nchunks;
	struct thread_err te;
};

#define W_CHECK(w, cond, rc)                                        \
	do {                                                        \
		if (!(cond)) {                                      \
			thread_fail(&(w)->te, __LINE__, #cond, rc); \
			goto out;                                   \
		}                                                   \
	} while (0)

/* Map, fill, check, unmap chunks of 1..4 granules; never near capacity, so
 * every call must succeed and no thread may see another's bytes. */
static void *map_worker(void *arg)
{
	struct worker *w = arg;
	struct vmu_provider *p = w->p;
	uint64_t va = 0, chunk = 0;
	int rc;

	rc = p->ops->reserve(p, 4 * GRAN, GRAN, &va);
	W_CHECK(w, rc == 0, rc);
	pthread_barrier_wait(w->barrier);
	for (unsigned int i = 0; i < ITERS; i++) {
		uint64_t size = (1 + (i + w->id) % 4) * GRAN;
		uint8_t byte = (uint8_t)(w->id * 31 + i);
		const uint8_t *q = dev_ptr(va);

		rc = p->ops->create(p, size, &chunk);
		W_CHECK(w, rc == 0, rc);
		rc = p->ops->map(p, va, size, chunk);
		W_CHECK(w, rc == 0, rc);
		rc = p->ops->memset(p, va, byte, size);
		W_CHECK(w, rc == 0, rc);
		for (uint64_t j = 0; j < size; j += 512)
			W_CHECK(w, q[j] == byte && q[j + 511] == byte, 0);
		rc = p->ops->unmap(p, va, size);
		W_CHECK(w, rc == 0, rc);
		p->ops->destroy(p, chunk);
	}
	p->ops->release(p, va, 4 * GRAN);
out:
	return NULL;
}

/* Grab granules until -ENOMEM: together the threads get exactly all. */
static void *grab_worker(void *arg)
{
	struct worker *w = arg;
	struct vmu_provider *p = w->p;
	int rc;

	pthread_barrier_wait(w->barrier);
	for (;;) {
		uint64_t chunk = 0;

		rc = p->ops->create(p, GRAN, &chunk);
		if (rc == -ENOMEM)
			break;
		W_CHECK(w, rc == 0, rc);
		W_CHECK(w, w->nchunks < CAP / GRAN, 0);
		w->chunks[w->nchunks++] = chunk;
	}
out:
	return NULL;
}

static void run_workers(struct vmu_provider *p, struct worker *w,
			void *(*fn)(void *))
{
	pthread_t tid[NTHREADS];
	pthread_barrier_t barrier;

	assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
	for (unsigned int i = 0; i < NTHREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].p = p;
		w[i].id = i;
		w[i].te.id = i;
		w[i].barrier = &barrier;
		assert_int_equal(pthread_create(&tid[i], NULL, fn, &w[i]), 0);
	}
	for (unsigned int i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	pthread_barrier_destroy(&barrier);
	for (unsigned int i = 0; i < NTHREADS; i++)
		if (w[i].te.errors)
			fail_msg("%s", w[i].te.msg);
}

static void test_threads(void **state)
{
	struct vmu_provider *p = *state;
	struct worker *w = xmalloc(NTHREADS * sizeof(*w));
	uint64_t c, total = 0;

	run_workers(p, w, map_worker);
	/* every chunk came back */
	c = chunk_create(p, CAP);
	p->ops->destroy(p, c);

	run_workers(p, w, grab_worker);
	for (unsigned int i = 0; i < NTHREADS; i++)
		total += w[i].nchunks;
	assert_int_equal(total, CAP / GRAN);
	for (unsigned int i = 0; i < NTHREADS; i++)
		for (size_t j = 0; j < w[i].nchunks; j++)
			p->ops->destroy(p, w[i].chunks[j]);
	c = chunk_create(p, CAP);
	p->ops->destroy(p, c);
	free(w);
}

/* ---------------------------------------------------------------------- */
/* Memory that outlives the process: a successor adopts in place */

/* A chunk of @size mapped at a reservation of @p, filled from @seed. */
static uint64_t filled_chunk(struct vmu_provider *p, uint64_t size,
			     uint8_t seed, uint64_t *va)
{
	uint64_t c = chunk_create(p, size);

	*va = reserve(p, size, GRAN);
	assert_int_equal(p->ops->map(p, *va, size, c), 0);
	for (uint64_t i = 0; i < size; i++)
		((uint8_t *)(uintptr_t)*va)[i] = (uint8_t)(seed + i * 7);
	return c;
}

static void expect_filled(uint64_t va, uint64_t size, uint8_t seed)
{
	for (uint64_t i = 0; i < size; i++)
		if (((uint8_t *)(uintptr_t)va)[i] != (uint8_t)(seed + i * 7))
			fail_msg("byte %" PRIu64 " not the predecessor's", i);
}

static void test_adopt_in_place(void **state)
{
	struct vmu_provider *p = *state, *q = NULL;
	struct vmu_piece pcs[8], used[8], twice[2];
	uint64_t va_a, va_b, va_c, hole, a, b, c, got, va;
	uint64_t took[3], at[3], size[3] = { 3 * GRAN, 2 * GRAN, GRAN };
	unsigned int n, nu;

	assert_non_null(p->ops->file);
	/* a, a hole (destroyed: not kept), b of two extents, c unmapped */
	a = filled_chunk(p, 3 * GRAN, 1, &va_a);
	hole = chunk_create(p, GRAN);
	b = filled_chunk(p, 2 * GRAN, 2, &va_b);
	c = filled_chunk(p, GRAN, 3, &va_c);
	assert_int_equal(p->ops->unmap(p, va_c, GRAN), 0);
	p->ops->destroy(p, hole);
	nu = p->ops->used(p, used, ARRAY_SIZE(used));
	assert_true(nu >= 1 && nu <= ARRAY_SIZE(used));
	/* a piece covers what create gave, merged where contiguous */
	n = p->ops->pieces(p, a, pcs, 1);
	assert_int_equal(n, 1);
	assert_int_equal(pcs[0].len, 3 * GRAN);
	/* too small an array: the count, @max written */
	assert_int_equal(p->ops->pieces(p, b, pcs, 0), 1);

	assert_int_equal(vmu_host_provider_open(dup(p->ops->file(p)), CAP / 2,
						GRAN, used, nu, &q),
			 0);
	/* the file's size wins over a smaller capacity */
	assert_int_equal(q->capacity, CAP);
	/* only what was free is free */
	assert_int_equal(q->ops->create(q, CAP - 6 * GRAN + GRAN, &got),
			 -ENOMEM);

	n = p->ops->pieces(p, a, pcs, ARRAY_SIZE(pcs));
	assert_int_equal(q->ops->adopt(q, pcs, n, &got), 0);
	va = reserve(q, 3 * GRAN, GRAN);
	assert_int_equal(q->ops->map(q, va, 3 * GRAN, got), 0);
	took[0] = got;
	at[0] = va;
	expect_filled(va, 3 * GRAN, 1);
	/* adopted once only */
	assert_int_equal(q->ops->adopt(q, pcs, n, &got), -EINVAL);
	/* a piece named twice in one call, and one of b's granules with a
	 * granule never kept: refused, and b still whole to adopt */
	n = p->ops->pieces(p, b, pcs, ARRAY_SIZE(pcs));
	twice[0] = pcs[0];
	twice[1] = pcs[0];
	assert_int_equal(q->ops->adopt(q, twice, 2, &got), -EINVAL);
	twice[0] = (struct vmu_piece){ pcs[0].off, pcs[0].len };
	twice[1] = (struct vmu_piece){ CAP - GRAN, GRAN };
	assert_int_equal(q->ops->adopt(q, twice, 2, &got), -EINVAL);
	twice[0] = (struct vmu_piece){ pcs[0].off + 1, GRAN };
	assert_int_equal(q->ops->adopt(q, twice, 1, &got), -EINVAL);
	assert_int_equal(q->ops->adopt(q, pcs, n, &got), 0);
	va = reserve(q, 2 * GRAN, GRAN);
	assert_int_equal(q->ops->map(q, va, 2 * GRAN, got), 0);
	took[1] = got;
	at[1] = va;
	expect_filled(va, 2 * GRAN, 2);
	/* c unmapped is adopted as well: it keeps its bytes */
	n = p->ops->pieces(p, c, pcs, ARRAY_SIZE(pcs));
	assert_int_equal(q->ops->adopt(q, pcs, n, &got), 0);
	va = reserve(q, GRAN, GRAN);
	assert_int_equal(q->ops->map(q, va, GRAN, got), 0);
	took[2] = got;
	at[2] = va;
	expect_filled(va, GRAN, 3);
	/* nothing more kept: all the rest is q's to create */
	q->ops->unkeep(q);
	assert_int_equal(q->ops->adopt(q, pcs, n, &got), -EINVAL);
	assert_int_equal(q->ops->create(q, CAP - 6 * GRAN, &got), 0);
	q->ops->destroy(q, got);
	for (int i = 0; i < 3; i++) {
		q->ops->destroy(q, took[i]);
		q->ops->release(q, at[i], size[i]);
	}
	q->ops->free(q);
	p->ops->destroy(p, a);
	p->ops->destroy(p, b);
	p->ops->destroy(p, c);
	p->ops->release(p, va_a, 3 * GRAN);
	p->ops->release(p, va_b, 2 * GRAN);
	p->ops->release(p, va_c, GRAN);
}

/*
 * The swap arena: host buffers are runs of its granules (a buffer that
 * finds no run is anonymous memory), a freed one gives its run back, and
 * a provider opened over the arena's file adopts each buffer kept in
 * place, with its bytes, once; unkeep() frees what was not adopted.
 */
static void test_swap_arena(void **state)
{
	struct vmu_provider *p = *state, *q = NULL;
	struct vmu_piece pc[3], used[4], bad;
	void *a, *b, *c, *big, *got;
	uint64_t size;
	unsigned int nu;
	int fd;

	assert_non_null(p->ops->swap_arena);
	assert_int_equal(p->ops->swap_file(p, &size), -1);
	/* 4 granules (a partial one rounded down) */
	assert_int_equal(p->ops->swap_arena(p, 4 * GRAN + 100, -1, NULL, 0), 0);
	assert_int_equal(p->ops->swap_arena(p, GRAN, -1, NULL, 0), -EBUSY);
	fd = p->ops->swap_file(p, &size);
	assert_true(fd >= 0);
	assert_int_equal(size, 4 * GRAN);
	assert_int_equal(p->ops->host_alloc(p, GRAN, &a), 0);
	assert_int_equal(p->ops->host_alloc(p, 2 * GRAN, &b), 0);
	assert_int_equal(p->ops->host_alloc(p, GRAN - 1, &c), 0);
	memset(a, 1, GRAN);
	memset(b, 2, 2 * GRAN);
	memset(c, 3, GRAN - 1);
	assert_int_equal(p->ops->swap_piece(p, a, GRAN, &pc[0]), 0);
	assert_int_equal(p->ops->swap_piece(p, b, 2 * GRAN, &pc[1]), 0);
	assert_int_equal(p->ops->swap_piece(p, c, GRAN - 1, &pc[2]), 0);
	assert_int_equal(pc[1].len, 2 * GRAN);
	assert_int_equal(pc[2].len, GRAN);
	/* full: anonymous memory, not in the arena */
	assert_int_equal(p->ops->host_alloc(p, GRAN, &big), 0);
	assert_int_equal(p->ops->swap_piece(p, big, GRAN, &bad), -ENOENT);
	memset(big, 4, GRAN);
	p->ops->host_free(p, big, GRAN);
	/* a freed run is taken again */
	p->ops->host_free(p, a, GRAN);
	assert_int_equal(p->ops->host_alloc(p, GRAN, &big), 0);
	assert_ptr_equal(big, a);
	p->ops->host_free(p, big, GRAN);
	nu = p->ops->swap_used(p, used, ARRAY_SIZE(used));
	assert_int_equal(nu, 1); /* b and c, contiguous */
	assert_int_equal(used[0].len, 3 * GRAN);

	assert_int_equal(vmu_host_provider_create(CAP, GRAN, &q), 0);
	assert_int_equal(q->ops->swap_arena(q, GRAN, dup(fd), used, nu), 0);
	/* the file's size wins */
	assert_int_equal(q->ops->swap_file(q, &size) >= 0, 1);
	assert_int_equal(size, 4 * GRAN);
	/* only what was free is free: one granule */
	assert_int_equal(q->ops->host_alloc(q, GRAN, &got), 0);
	assert_int_equal(q->ops->swap_piece(q, got, GRAN, &bad), 0);
	assert_int_equal(bad.off, pc[0].off);
	q->ops->host_free(q, got, GRAN);
	assert_int_equal(q->ops->swap_adopt(q, &pc[1], &got), 0);
	expect_byte(got, 2, 2 * GRAN, "b adopted");
	assert_int_equal(q->ops->swap_adopt(q, &pc[1], &got), -EINVAL);
	bad = (struct vmu_piece){ pc[1].off + 1, GRAN };
	assert_int_equal(q->ops->swap_adopt(q, &bad, &got), -EINVAL);
	q->ops->host_free(q, got, 2 * GRAN);
	/* freed before unkeep() (a restore undone): kept again, not free,
	 * its bytes the predecessor's */
	assert_int_equal(q->ops->host_alloc(q, 2 * GRAN, &got), 0);
	assert_int_equal(q->ops->swap_piece(q, got, 2 * GRAN, &bad), -ENOENT);
	q->ops->host_free(q, got, 2 * GRAN);
	expect_byte(b, 2, 2 * GRAN, "b after the undone adoption");
	/* c's is not adopted: unkeep frees it, its bytes there until
	 * swap_trim() gives its pages back (the predecessor gone) */
	q->ops->unkeep(q);
	assert_int_equal(q->ops->swap_adopt(q, &pc[2], &got), -EINVAL);
	expect_byte(c, 3, GRAN - 1, "c after unkeep");
	q->ops->swap_trim(q);
	expect_byte(c, 0, GRAN - 1, "c after swap_trim");
	assert_int_equal(q->ops->host_alloc(q, 4 * GRAN, &got), 0);
	assert_int_equal(q->ops->swap_piece(q, got, 4 * GRAN, &bad), 0);
	q->ops->host_free(q, got, 4 * GRAN);
	q->ops->free(q);
	p->ops->host_free(p, b, 2 * GRAN);
	p->ops->host_free(p, c, GRAN - 1);
}

static void test_open_refuses(void **state)
{
	static const struct {
		struct vmu_piece keep;
		uint64_t granularity;
	} bad[] = {
		{ { CAP, GRAN }, GRAN }, /* past the file */
		{ { GRAN / 2, GRAN }, GRAN }, /* off the granules */
		{ { 0, 0 }, CAP * 2 }, /* a file not on the granules */
	};
	struct vmu_provider *p = *state, *q = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(
			vmu_host_provider_open(dup(p->ops->file(p)), CAP,
					       bad[i].granularity, &bad[i].keep,
					       bad[i].keep.len ? 1 : 0, &q),
			-EINVAL);
	assert_null(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_params, setup, teardown),
		cmocka_unit_test(test_capacity_rounded_down),
		cmocka_unit_test(test_bad_granularity),
		cmocka_unit_test_setup_teardown(test_reserve_aligned, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_create_capacity, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_destroy_returns_capacity,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_write_read, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_unmap_keeps_contents,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_map_prefix_of_chunk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_map_chunks_side_by_side,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunks_distinct, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_set_access, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_copies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_alloc, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_host_alloc_not_device_capacity, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_adopt_in_place, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_swap_arena, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_open_refuses, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("host_provider", tests, NULL, NULL);
}
