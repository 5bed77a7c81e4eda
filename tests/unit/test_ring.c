// SPDX-License-Identifier: MIT
/*
 * The layer ring (djinnd/model/ring.c) under a deliberately slowed copy
 * lane and a consumer that computes for random times: no layer is handed
 * out before its copy finished, none is overwritten while it is computed
 * on, layers come in order, a failed copy fails its layer and the later
 * ones until a reset, and bad calls are refused without changing
 * anything.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/ring.h"

#define CAP (10u << 10)

/*
 * The device: CAP bytes. The copy function checks that what it writes
 * overlaps no layer being computed on, and copies slowly, in pieces, so
 * that a consumer reading too early would see a torn layer.
 */
struct dev {
	uint8_t mem[CAP];
	pthread_mutex_t lock;
	uint64_t busy_off[64], busy_len[64]; /* acquired, not released */
	unsigned int nr_busy;
	unsigned int overlaps, fail_at, copies;
	int fail_err;
	unsigned int seed;
};

static int dev_copy(void *arg, uint64_t off, const void *src, uint64_t len)
{
	struct dev *d = arg;
	const uint8_t *p = src;

	pthread_mutex_lock(&d->lock);
	for (unsigned int i = 0; i < d->nr_busy; i++)
		if (off < d->busy_off[i] + d->busy_len[i] &&
		    d->busy_off[i] < off + len)
			d->overlaps++;
	if (d->fail_at && ++d->copies == d->fail_at) {
		pthread_mutex_unlock(&d->lock);
		return d->fail_err;
	}
	pthread_mutex_unlock(&d->lock);
	if (off + len > CAP) {
		d->overlaps++; /* past the end: counted as a violation too */
		return 0;
	}
	for (uint64_t k = 0; k < len; k += 256) {
		uint64_t n = len - k < 256 ? len - k : 256;

		memcpy(d->mem + off + k, p + k, n);
		if (!(rand_r(&d->seed) % 8))
			usleep(50);
	}
	return 0;
}

static void busy(struct dev *d, uint64_t off, uint64_t len, bool on)
{
	pthread_mutex_lock(&d->lock);
	if (on) {
		d->busy_off[d->nr_busy] = off;
		d->busy_len[d->nr_busy++] = len;
	} else {
		for (unsigned int i = 0; i < d->nr_busy; i++)
			if (d->busy_off[i] == off) {
				d->busy_off[i] = d->busy_off[--d->nr_busy];
				d->busy_len[i] = d->busy_len[d->nr_busy];
				break;
			}
	}
	pthread_mutex_unlock(&d->lock);
}

/* Layer @id's bytes: its own pattern. */
static void fill(uint8_t *p, uint64_t len, uint32_t id)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = (uint8_t)(id * 37 + i * 11 + (i >> 8));
}

static struct dev *dev_new(void)
{
	struct dev *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	pthread_mutex_init(&d->lock, NULL);
	d->seed = 7;
	return d;
}

/* Sizes of 40 layers: most a third of the ring, some odd, one the whole
 * ring, so that placements skip the end. */
static uint64_t size_of(uint32_t id)
{
	if (id == 17)
		return CAP;
	return CAP / 3 + (id % 5) * 331;
}

static void test_stream(void **state)
{
	enum { N = 40 };
	struct dev *d = dev_new();
	uint8_t *src[N], *want;
	struct ring_stats st;
	struct ring *r;
	unsigned int seed = 3;

	(void)state;
	assert_int_equal(ring_create(CAP, dev_copy, d, &r), 0);
	for (uint32_t id = 0; id < N; id++) {
		src[id] = malloc(size_of(id));
		assert_non_null(src[id]);
		fill(src[id], size_of(id), id);
		assert_int_equal(ring_push(r, id, src[id], size_of(id)), 0);
	}
	want = malloc(CAP);
	assert_non_null(want);
	/* Up to two layers computed on at once, as a pass that reads one
	 * layer while the next is acquired. */
	for (uint32_t id = 0; id < N; id++) {
		uint64_t off, len = size_of(id);

		assert_int_equal(ring_acquire(r, id, &off), 0);
		assert_true(off + len <= CAP);
		busy(d, off, len, true);
		/* all of its copy is there */
		fill(want, len, id);
		assert_memory_equal(d->mem + off, want, len);
		usleep(rand_r(&seed) % 400);
		/* and nothing wrote over it while it was computed on */
		assert_memory_equal(d->mem + off, want, len);
		busy(d, off, len, false);
		assert_int_equal(ring_release(r, id), 0);
	}
	ring_stats(r, &st);
	assert_int_equal(st.copies, N);
	assert_true(st.skips > 0);
	assert_int_equal(d->overlaps, 0);
	ring_destroy(r);
	for (uint32_t id = 0; id < N; id++)
		free(src[id]);
	free(want);
	free(d);
}

/* Two acquired at once: the second's copy may not land on the first. */
static void test_two_in_use(void **state)
{
	struct dev *d = dev_new();
	uint8_t a[CAP / 2], b[CAP / 2], c[CAP / 2], want[CAP / 2];
	uint64_t oa, ob, oc;
	struct ring *r;

	(void)state;
	fill(a, sizeof(a), 1);
	fill(b, sizeof(b), 2);
	fill(c, sizeof(c), 3);
	assert_int_equal(ring_create(CAP, dev_copy, d, &r), 0);
	assert_int_equal(ring_push(r, 1, a, sizeof(a)), 0);
	assert_int_equal(ring_push(r, 2, b, sizeof(b)), 0);
	assert_int_equal(ring_push(r, 3, c, sizeof(c)), 0);
	assert_int_equal(ring_acquire(r, 1, &oa), 0);
	assert_int_equal(ring_acquire(r, 2, &ob), 0);
	busy(d, oa, sizeof(a), true);
	busy(d, ob, sizeof(b), true);
	/* the ring is full: 3 waits for 1 to be released */
	usleep(20000);
	fill(want, sizeof(want), 1);
	assert_memory_equal(d->mem + oa, want, sizeof(want));
	busy(d, oa, sizeof(a), false);
	assert_int_equal(ring_release(r, 1), 0);
	assert_int_equal(ring_acquire(r, 3, &oc), 0);
	assert_int_equal(oc, oa);
	fill(want, sizeof(want), 2);
	assert_memory_equal(d->mem + ob, want, sizeof(want));
	assert_int_equal(d->overlaps, 0);
	ring_destroy(r);
	free(d);
}

static void test_refusals(void **state)
{
	struct dev *d = dev_new();
	uint8_t x[64];
	uint64_t off = 123;
	struct ring *r;

	(void)state;
	assert_int_equal(ring_create(0, dev_copy, d, &r), -EINVAL);
	assert_int_equal(ring_create(CAP, dev_copy, d, &r), 0);
	assert_int_equal(ring_push(r, 1, x, CAP + 1), -E2BIG);
	assert_int_equal(ring_push(r, 1, x, 0), -EINVAL);
	/* nothing queued */
	assert_int_equal(ring_acquire(r, 1, &off), -EINVAL);
	assert_int_equal(ring_release(r, 1), -EINVAL);
	assert_int_equal(off, 123);
	assert_int_equal(ring_push(r, 1, x, sizeof(x)), 0);
	assert_int_equal(ring_push(r, 2, x, sizeof(x)), 0);
	/* out of order */
	assert_int_equal(ring_acquire(r, 2, &off), -EINVAL);
	assert_int_equal(ring_release(r, 1), -EINVAL); /* not acquired */
	assert_int_equal(ring_acquire(r, 1, &off), 0);
	assert_int_equal(ring_release(r, 2), -EINVAL);
	assert_int_equal(ring_release(r, 1), 0);
	assert_int_equal(ring_acquire(r, 2, &off), 0);
	assert_int_equal(ring_release(r, 2), 0);
	ring_destroy(r);
	free(d);
}

/* A copy that fails fails its layer and the ones after it, until a
 * reset; then the ring streams again. */
static void test_copy_error(void **state)
{
	struct dev *d = dev_new();
	uint8_t x[CAP / 4], want[CAP / 4];
	uint64_t off;
	struct ring *r;

	(void)state;
	d->fail_at = 2;
	d->fail_err = -EIO;
	assert_int_equal(ring_create(CAP, dev_copy, d, &r), 0);
	for (uint32_t id = 0; id < 3; id++)
		assert_int_equal(ring_push(r, id, x, sizeof(x)), 0);
	assert_int_equal(ring_acquire(r, 0, &off), 0);
	assert_int_equal(ring_release(r, 0), 0);
	assert_int_equal(ring_acquire(r, 1, &off), -EIO);
	ring_reset(r);
	fill(x, sizeof(x), 9);
	assert_int_equal(ring_push(r, 9, x, sizeof(x)), 0);
	assert_int_equal(ring_acquire(r, 9, &off), 0);
	fill(want, sizeof(want), 9);
	assert_memory_equal(d->mem + off, want, sizeof(want));
	assert_int_equal(ring_release(r, 9), 0);
	ring_destroy(r);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_two_in_use),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_copy_error),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
