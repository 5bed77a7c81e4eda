// SPDX-License-Identifier: MIT
/*
 * The staging buffers of device-only reads (djinnd/exec/stage.c), over
 * the host provider's host memory, counted: buffers are reused rather
 * than allocated per read, of exactly a read's size class, a lent
 * buffer is never handed to another read, the idle ones stay within
 * their count and bytes, a read over the largest size gets none (it goes
 * in parts), and nothing is left when the pool goes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "array_size.h"
#include "testutil.h"
#include "exec/stage.h"

/* ---------------------------------------------------------------------- */
/* A provider that counts its host memory */

struct cprov {
	struct vmu_provider base;
	struct vmu_provider_ops ops;
	struct vmu_provider *host;
	pthread_mutex_t lock;
	uint64_t allocs, frees, live, live_bytes;
	bool fail_next;
};

static struct cprov *to_cprov(struct vmu_provider *p)
{
	return (struct cprov *)p;
}

static int c_host_alloc(struct vmu_provider *p, uint64_t size, void **buf)
{
	struct cprov *c = to_cprov(p);
	int ret;

	pthread_mutex_lock(&c->lock);
	if (c->fail_next) {
		c->fail_next = false;
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	pthread_mutex_unlock(&c->lock);
	ret = c->host->ops->host_alloc(c->host, size, buf);
	if (ret)
		return ret;
	pthread_mutex_lock(&c->lock);
	c->allocs++;
	c->live++;
	c->live_bytes += size;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void c_host_free(struct vmu_provider *p, void *buf, uint64_t size)
{
	struct cprov *c = to_cprov(p);

	pthread_mutex_lock(&c->lock);
	assert_true(c->live > 0 && c->live_bytes >= size);
	c->frees++;
	c->live--;
	c->live_bytes -= size;
	pthread_mutex_unlock(&c->lock);
	c->host->ops->host_free(c->host, buf, size);
}

static int setup(void **state)
{
	struct cprov *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	assert_int_equal(vmu_host_provider_create(16 * MiB, 0, &c->host), 0);
	c->ops = *c->host->ops;
	c->ops.host_alloc = c_host_alloc;
	c->ops.host_free = c_host_free;
	c->base = *c->host;
	c->base.ops = &c->ops;
	c->base.device_only = true;
	pthread_mutex_init(&c->lock, NULL);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cprov *c = *state;

	/* every test gives back all it took */
	assert_int_equal(c->live, 0);
	assert_int_equal(c->live_bytes, 0);
	c->host->ops->free(c->host);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

static struct stage_stats stats(struct stage_pool *sp)
{
	struct stage_stats st;

	stage_pool_stats(sp, &st);
	return st;
}

/* ---------------------------------------------------------------------- */
/* Tests */

static void test_sizes(void **state)
{
	static const uint64_t cases[][2] = {
		{ 0, STAGE_MIN },	  { 1, STAGE_MIN },
		{ 64 * KiB, 64 * KiB },	  { 64 * KiB + 1, 128 * KiB },
		{ 1000 * KiB, MiB },	  { STAGE_MAX - 1, STAGE_MAX },
		{ STAGE_MAX, STAGE_MAX },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		if (stage_size(cases[i][0]) != cases[i][1])
			fail_msg("stage_size(%llu) = %llu, want %llu",
				 (unsigned long long)cases[i][0],
				 (unsigned long long)stage_size(cases[i][0]),
				 (unsigned long long)cases[i][1]);
}

/* Reads one after another take one buffer, allocated once. */
static void test_reuse(void **state)
{
	struct cprov *c = *state;
	struct stage_pool sp;
	void *first = NULL;

	stage_pool_init(&sp, &c->base);
	for (int i = 0; i < 100; i++) {
		uint64_t len = 1 + (uint64_t)i * 600, size;
		void *buf;

		assert_int_equal(stage_get(&sp, len, &buf, &size), 0);
		assert_int_equal(size, STAGE_MIN);
		memset(buf, i, len);
		if (!first)
			first = buf;
		assert_ptr_equal(buf, first);
		stage_put(&sp, buf, size);
	}
	assert_int_equal(c->allocs, 1);
	assert_int_equal(stats(&sp).gets, 100);
	assert_int_equal(stats(&sp).hits, 99);
	assert_int_equal(stats(&sp).lent, 0);
	assert_int_equal(stats(&sp).idle, 1);
	stage_pool_fini(&sp);
	assert_int_equal(c->live, 0);
}

/* A read takes an idle buffer of exactly its size, never a larger one:
 * its tenant is charged for that size (net/msg_tensor.c). */
static void test_exact_fit(void **state)
{
	struct cprov *c = *state;
	const uint64_t lens[] = { 64 * KiB, MiB, 256 * KiB };
	struct stage_pool sp;
	void *buf[3], *b;
	uint64_t size[3], sz;

	stage_pool_init(&sp, &c->base);
	for (int i = 0; i < 3; i++)
		assert_int_equal(stage_get(&sp, lens[i], &buf[i], &size[i]), 0);
	for (int i = 0; i < 3; i++)
		stage_put(&sp, buf[i], size[i]);
	assert_int_equal(stats(&sp).idle_bytes, 64 * KiB + MiB + 256 * KiB);

	assert_int_equal(stage_get(&sp, 200 * KiB, &b, &sz), 0);
	assert_ptr_equal(b, buf[2]);
	assert_int_equal(sz, 256 * KiB);
	stage_put(&sp, b, sz);
	assert_int_equal(stage_get(&sp, 10, &b, &sz), 0);
	assert_ptr_equal(b, buf[0]);
	stage_put(&sp, b, sz);
	/* 100 KiB is a 128 KiB buffer: a new one, though 256 KiB and 1 MiB
	 * ones are idle */
	assert_int_equal(stage_get(&sp, 100 * KiB, &b, &sz), 0);
	assert_int_equal(sz, 128 * KiB);
	assert_true(b != buf[0] && b != buf[1] && b != buf[2]);
	assert_int_equal(c->allocs, 4);
	assert_int_equal(stats(&sp).idle, 3);
	stage_put(&sp, b, sz);
	stage_pool_fini(&sp);
}

/*
 * Buffers lent at once are distinct: each read's bytes stay its own
 * until it gives its buffer back, however many reads are in flight.
 */
static void test_lent_distinct(void **state)
{
	struct cprov *c = *state;
	enum { N = 3 * STAGE_POOL_BUFS };
	struct stage_pool sp;
	void *buf[N];
	uint64_t size[N], len[N];

	stage_pool_init(&sp, &c->base);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			len[i] = (uint64_t)(i * 7919 % 300) * KiB + 1;
			assert_int_equal(
				stage_get(&sp, len[i], &buf[i], &size[i]), 0);
			assert_true(size[i] >= len[i]);
			pattern(buf[i], (uint64_t)(round * N + i), 0, len[i]);
		}
		assert_int_equal(stats(&sp).lent, N);
		for (int i = 0; i < N; i++) {
			uint8_t *want = xmalloc(len[i]);

			pattern(want, (uint64_t)(round * N + i), 0, len[i]);
			if (memcmp(buf[i], want, len[i]))
				fail_msg("round %d: buffer %d was overwritten",
					 round, i);
			free(want);
		}
		/* give them back in another order than taken */
		for (int i = 0; i < N; i++) {
			int k = (i * 5) % N;

			stage_put(&sp, buf[k], size[k]);
		}
		assert_int_equal(stats(&sp).lent, 0);
	}
	stage_pool_fini(&sp);
}

/* Idle buffers stay within STAGE_POOL_BUFS and STAGE_POOL_BYTES; what the
 * pool lets go is freed, and nothing else is. */
static void test_bounds(void **state)
{
	struct cprov *c = *state;
	enum { N = 2 * STAGE_POOL_BUFS };
	struct stage_pool sp;
	struct stage_stats st;
	void *buf[N];
	uint64_t size[N];

	stage_pool_init(&sp, &c->base);
	/* many small ones: the count bounds them */
	for (int i = 0; i < N; i++)
		assert_int_equal(stage_get(&sp, KiB, &buf[i], &size[i]), 0);
	for (int i = 0; i < N; i++)
		stage_put(&sp, buf[i], size[i]);
	st = stats(&sp);
	assert_int_equal(st.idle, STAGE_POOL_BUFS);
	assert_int_equal(st.frees, N - STAGE_POOL_BUFS);
	assert_int_equal(c->live, STAGE_POOL_BUFS);
	assert_int_equal(c->live_bytes, st.idle_bytes);

	/* large ones: the bytes bound them, the oldest idle go first */
	for (int i = 0; i < N; i++)
		assert_int_equal(stage_get(&sp, STAGE_MAX, &buf[i], &size[i]),
				 0);
	for (int i = 0; i < N; i++)
		stage_put(&sp, buf[i], size[i]);
	st = stats(&sp);
	assert_true(st.idle_bytes <= STAGE_POOL_BYTES);
	assert_int_equal(st.idle, STAGE_POOL_BYTES / STAGE_MAX);
	assert_int_equal(c->live, st.idle);
	assert_int_equal(c->live_bytes, st.idle_bytes);
	/* the newest are kept */
	{
		uint64_t sz;
		void *b;

		assert_int_equal(stage_get(&sp, STAGE_MAX, &b, &sz), 0);
		assert_true(b == buf[N - 1] || b == buf[N - 2] ||
			    b == buf[N - 3] || b == buf[N - 4]);
		stage_put(&sp, b, sz);
	}
	stage_pool_fini(&sp);
	assert_int_equal(c->live, 0);
}

/* A read over STAGE_MAX gets no buffer: it is sent in parts, through
 * buffers of STAGE_MAX. Nothing is allocated. */
static void test_oversize(void **state)
{
	struct cprov *c = *state;
	struct stage_pool sp;
	uint64_t size = 0;
	void *buf = NULL;

	stage_pool_init(&sp, &c->base);
	assert_int_equal(stage_get(&sp, STAGE_MAX + 1, &buf, &size), -E2BIG);
	assert_null(buf);
	assert_int_equal(c->allocs, 0);
	assert_int_equal(stats(&sp).gets, 0);
	assert_int_equal(stats(&sp).lent, 0);
	assert_int_equal(stage_get(&sp, STAGE_MAX, &buf, &size), 0);
	assert_int_equal(size, STAGE_MAX);
	stage_put(&sp, buf, size);
	stage_pool_fini(&sp);
}

/* host_alloc() failing is the read's error, and changes nothing. */
static void test_alloc_fails(void **state)
{
	struct cprov *c = *state;
	struct stage_pool sp;
	uint64_t size = 0;
	void *buf = NULL;

	stage_pool_init(&sp, &c->base);
	c->fail_next = true;
	assert_int_equal(stage_get(&sp, KiB, &buf, &size), -ENOMEM);
	assert_int_equal(stats(&sp).gets, 0);
	assert_int_equal(stats(&sp).lent, 0);
	assert_int_equal(stage_get(&sp, KiB, &buf, &size), 0);
	stage_put(&sp, buf, size);
	stage_pool_fini(&sp);
}

/* The memory executor's threads take buffers while the I/O thread gives
 * them back: under the pool's lock no buffer is lent twice. */
struct worker {
	struct stage_pool *sp;
	unsigned int seed;
	int bad;
};

static void *work(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < 2000; i++) {
		uint64_t len = (uint64_t)(rand_r(&w->seed) % (512 * 1024)) + 1;
		uint64_t tag = (uint64_t)w->seed * 100000 + (uint64_t)i, size;
		uint8_t head[64], want[64];
		void *buf;

		if (stage_get(w->sp, len, &buf, &size)) {
			w->bad++;
			continue;
		}
		/* the first and last bytes: enough to see a shared buffer */
		pattern(buf, tag, 0, len < 64 ? len : 64);
		pattern((uint8_t *)buf + len - 1, tag, len - 1, 1);
		memcpy(head, buf, len < 64 ? len : 64);
		pattern(want, tag, 0, len < 64 ? len : 64);
		if (memcmp(head, want, len < 64 ? len : 64))
			w->bad++;
		pattern(want, tag, len - 1, 1);
		if (((uint8_t *)buf)[len - 1] != want[0])
			w->bad++;
		stage_put(w->sp, buf, size);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct cprov *c = *state;
	struct worker w[4];
	pthread_t t[4];
	struct stage_pool sp;

	stage_pool_init(&sp, &c->base);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .sp = &sp,
					.seed = (unsigned int)i + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].bad, 0);
	}
	assert_int_equal(stats(&sp).lent, 0);
	assert_int_equal(stats(&sp).gets, 4 * 2000);
	assert_true(stats(&sp).idle <= STAGE_POOL_BUFS);
	/* most reads found a buffer waiting */
	assert_true(c->allocs < 4 * 2000 / 10);
	stage_pool_fini(&sp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test_setup_teardown(test_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exact_fit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lent_distinct, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alloc_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
