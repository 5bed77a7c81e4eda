// SPDX-License-Identifier: MIT
/*
 * The VMU from many threads at once, over the host provider: sessions
 * creating, growing, swapping and destroying regions and sharing text,
 * readers and pinners racing with swaps and reclaim on one region, and
 * a stack per thread. Each worker checks its own bytes. The fixture is in
 * test_vmu.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_vmu.h"

/* ---------------------------------------------------------------------- */
/* 10. Threads */

#define NTHREADS 8
#define ITERS 200
#define NSLOTS 4
#define NCONTENT 4

struct content {
	uint8_t *buf;
	uint64_t size;
	uint8_t fp[VMU_FP_LEN];
};

struct worker {
	struct vmu *v;
	struct vmu_session *s;
	struct vmu_stack *stack;
	pthread_barrier_t *barrier;
	const struct content *content;
	unsigned int id, rnd;
	uint64_t g;
	uint64_t h[NSLOTS], size[NSLOTS], max[NSLOTS], seed[NSLOTS];
	bool live[NSLOTS];
	unsigned int created[NCONTENT];
	uint8_t *buf;
	struct thread_err te;
};

#define W_CHECK(w, cond, rc)                                        \
	do {                                                        \
		if (!(cond)) {                                      \
			thread_fail(&(w)->te, __LINE__, #cond, rc); \
			return -1;                                  \
		}                                                   \
	} while (0)

static int w_verify(struct worker *w, int i)
{
	uint64_t len = w->size[i];
	int rc;

	if (!len)
		return 0;
	rc = vmu_region_read(w->s, w->h[i], 0, w->buf, len);
	W_CHECK(w, rc == 0, rc);
	W_CHECK(w, pattern_diff(w->buf, w->seed[i], 0, len) < 0, 0);
	return 0;
}

static int w_region_op(struct worker *w, unsigned int op, unsigned int iter)
{
	int i = (int)(rand_r(&w->rnd) % NSLOTS), rc;
	struct vmu_region_info info;
	uint64_t size;

	if (!w->live[i]) {
		w->max[i] = (1 + rand_r(&w->rnd) % 4) * w->g;
		rc = vmu_region_create(w->s, w->max[i], &w->h[i]);
		W_CHECK(w, rc == 0, rc);
		w->live[i] = true;
		w->size[i] = 0;
		return 0;
	}
	switch (op) {
	case 0: /* resize and refill */
		size = rand_r(&w->rnd) % (w->max[i] + 1);
		if (w_verify(w, i))
			return -1;
		rc = vmu_region_resize(w->s, w->h[i], size, NULL);
		W_CHECK(w, rc == 0, rc);
		w->size[i] = size;
		w->seed[i] = (uint64_t)w->id << 32 | iter;
		pattern(w->buf, w->seed[i], 0, size);
		rc = vmu_region_write(w->s, w->h[i], 0, w->buf, size);
		W_CHECK(w, rc == 0, rc);
		return w_verify(w, i);
	case 1: /* destroy */
		rc = vmu_region_destroy(w->s, w->h[i]);
		W_CHECK(w, rc == 0, rc);
		w->live[i] = false;
		return 0;
	case 2: /* swap out and back */
		rc = vmu_region_swap_out(w->s, w->h[i]);
		W_CHECK(w, rc == 0, rc);
		rc = vmu_region_swap_in(w->s, w->h[i], NULL);
		W_CHECK(w, rc == 0, rc);
		rc = vmu_region_info(w->s, w->h[i], &info);
		W_CHECK(w, rc == 0, rc);
		W_CHECK(w, info.state == VMU_REGION_RESIDENT, 0);
		W_CHECK(w, info.size == w->size[i], 0);
		W_CHECK(w, info.mapped >= vmu_round(w->v, w->size[i]), 0);
		return w_verify(w, i);
	default: /* the whole session out, then each region back */
		rc = vmu_session_swap_out(w->s);
		W_CHECK(w, rc >= 0, rc);
		for (i = 0; i < NSLOTS; i++) {
			if (!w->live[i])
				continue;
			rc = vmu_region_info(w->s, w->h[i], &info);
			W_CHECK(w, rc == 0, rc);
			W_CHECK(w, info.state != VMU_REGION_MOVING, 0);
			if (info.state == VMU_REGION_SWAPPED) {
				rc = vmu_region_swap_in(w->s, w->h[i], NULL);
				W_CHECK(w, rc == 0, rc);
			}
			if (w_verify(w, i))
				return -1;
		}
		return 0;
	}
}

static int w_text_op(struct worker *w, unsigned int k)
{
	const struct content *c = &w->content[k];
	struct vmu_text *t = NULL, *t2 = NULL;
	bool created = false;
	int rc;

	rc = vmu_text_insert(w->s, c->buf, c->size, &t, &created);
	W_CHECK(w, rc == 0, rc);
	if (created)
		w->created[k]++;
	W_CHECK(w, vmu_text_size(t) == c->size, 0);
	W_CHECK(w, !memcmp(dev_ptr(vmu_text_addr(t)), c->buf, c->size), 0);
	rc = vmu_text_lookup(w->s, c->fp, &t2);
	W_CHECK(w, rc == 0, rc);
	W_CHECK(w, t2 == t, 0);
	rc = vmu_text_put(w->s, t);
	W_CHECK(w, rc == 0, rc);
	rc = vmu_text_put(w->s, t2);
	W_CHECK(w, rc == 0, rc);
	return 0;
}

static void *session_worker(void *arg)
{
	struct worker *w = arg;

	pthread_barrier_wait(w->barrier);
	/* everyone inserts the same bytes at once first */
	if (w_text_op(w, 0))
		return NULL;
	for (unsigned int iter = 0; iter < ITERS; iter++) {
		unsigned int op = rand_r(&w->rnd) % 8;

		if (op == 7) {
			if (w_text_op(w, rand_r(&w->rnd) % NCONTENT))
				return NULL;
		} else if (w_region_op(w, op < 4 ? 0 : op - 3, iter)) {
			return NULL;
		}
	}
	return NULL;
}

static void run_workers(struct worker *w, void *(*fn)(void *))
{
	pthread_t tid[NTHREADS];
	pthread_barrier_t barrier;

	assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
	for (unsigned int i = 0; i < NTHREADS; i++) {
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

static void test_threads_sessions(void **state)
{
	struct fix *f = *state;
	/* a small per-session cache keeps the device far from full */
	struct vmu_config cfg = { .session_cache = 1 * MiB };
	struct worker *w = calloc(NTHREADS, sizeof(*w));
	struct content content[NCONTENT];
	struct vmu_stats st;
	uint64_t live_total = 0;
	unsigned int entries = 0;

	assert_non_null(w);
	fix_open(f, 64 * MiB, GRAN, &cfg);
	for (int k = 0; k < NCONTENT; k++) {
		content[k].size = (uint64_t)(k + 1) * f->g / 2 + 3;
		content[k].buf = pattern_buf(200 + k, content[k].size);
		vmu_fingerprint(content[k].buf, content[k].size, content[k].fp);
	}
	for (unsigned int i = 0; i < NTHREADS; i++) {
		w[i].v = f->v;
		w[i].id = i;
		w[i].te.id = i;
		w[i].rnd = 1234 + i;
		w[i].g = f->g;
		w[i].content = content;
		w[i].buf = xmalloc(4 * f->g);
		assert_int_equal(vmu_session_create(
					 f->v, i % 2 ? "odd" : "even", &w[i].s),
				 0);
	}

	run_workers(w, session_worker);

	/* what each session is charged is what it holds */
	for (unsigned int i = 0; i < NTHREADS; i++) {
		struct vmu_usage u = get_usage(w[i].s);
		uint64_t sum = 0, n = 0;

		for (int j = 0; j < NSLOTS; j++) {
			struct vmu_region_info info;

			if (!w[i].live[j])
				continue;
			info = region_info(w[i].s, w[i].h[j]);
			assert_int_equal(info.size, w[i].size[j]);
			assert_true(info.mapped >= vmu_round(f->v, info.size));
			sum += info.mapped;
			n++;
		}
		assert_int_equal(u.data_bytes, sum);
		assert_int_equal(u.resident, sum);
		assert_int_equal(u.swapped, 0);
		assert_int_equal(u.regions, n);
		assert_int_equal(u.text_refs, 0);
		live_total += sum;
	}
	/* each content became one entry per tenant that inserted it
	 * (text is scoped by tenant: even's and odd's are apart); every
	 * worker inserted content 0 first */
	for (int k = 0; k < NCONTENT; k++) {
		for (unsigned int p = 0; p < 2; p++) {
			unsigned int created = 0;

			for (unsigned int i = p; i < NTHREADS; i += 2)
				created += w[i].created[k];
			assert_true(created <= 1);
			if (!k)
				assert_int_equal(created, 1);
			entries += created;
		}
	}
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_TEXT].entries, entries);
	assert_int_equal(st.text_cached, st.seg[VMU_SEG_TEXT].used);
	assert_int_equal(st.swapped_now, 0);
	assert_true(st.seg[VMU_SEG_DATA].used >= live_total);
	assert_true(st.seg[VMU_SEG_DATA].used <=
		    live_total + NTHREADS * cfg.session_cache);
	check_invariants(f->v);

	for (unsigned int i = 0; i < NTHREADS; i++) {
		vmu_session_destroy(w[i].s);
		free(w[i].buf);
	}
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_DATA].used, 0);
	assert_int_equal(st.data_cached, 0);
	assert_int_equal(st.swapped_now, 0);
	assert_int_equal(st.committed, st.seg[VMU_SEG_TEXT].used);
	for (int i = 0; i < 2; i++) {
		const char *tenant = i ? "odd" : "even";
		struct vmu_usage u;
		int rc;

		/* a tenant with no session left may be gone */
		memset(&u, 0, sizeof(u));
		rc = vmu_tenant_usage(f->v, tenant, &u);
		if (rc == -ENOENT)
			continue;
		assert_int_equal(rc, 0);
		assert_int_equal(u.data_bytes, 0);
		assert_int_equal(u.regions, 0);
		assert_int_equal(u.text_refs, 0);
	}
	/* each tenant has its own entry of what it inserted */
	for (int k = 0; k < NCONTENT; k++) {
		for (int o = 0; o < 2; o++) {
			int rc = vmu_text_evict(f->v, content[k].fp,
						o ? "odd" : "even");

			assert_true(rc == 0 || rc == -ENOENT);
		}
		free(content[k].buf);
	}
	st = get_stats(f->v);
	assert_int_equal(st.committed, 0);
	assert_int_equal(st.free, st.capacity);
	free(w);
}

static void *stack_worker(void *arg)
{
	struct worker *w = arg;
	uint64_t addr[512], size[512];
	static const uint64_t aligns[] = { 0, 64, 256, 4096 };

	pthread_barrier_wait(w->barrier);
	for (unsigned int iter = 0; iter < 100; iter++) {
		uint64_t peak = (1 + rand_r(&w->rnd) % 8) * w->g +
				rand_r(&w->rnd) % w->g;
		unsigned int n = 0;
		uint64_t end;
		int rc;

		rc = vmu_stack_begin(w->stack, peak, NULL);
		if (rc) {
			thread_fail(&w->te, __LINE__, "begin", rc);
			return NULL;
		}
		for (;;) {
			uint64_t al = aligns[rand_r(&w->rnd) % 4];

			size[n] = 1 + rand_r(&w->rnd) % (16 * KiB);
			rc = vmu_stack_alloc(w->stack, size[n], al, &addr[n]);
			if (rc == -ENOSPC || n == 511)
				break;
			if (rc || addr[n] % (al ? al : 256)) {
				thread_fail(&w->te, __LINE__, "alloc", rc);
				return NULL;
			}
			memset((void *)(uintptr_t)addr[n],
			       (int)(w->id * 16 + iter % 16), size[n]);
			n++;
		}
		if (vmu_stack_used(w->stack) > peak) {
			thread_fail(&w->te, __LINE__, "used > peak", 0);
			return NULL;
		}
		for (unsigned int j = 0; j < n; j++) {
			const uint8_t *q = dev_ptr(addr[j]);
			uint8_t want = (uint8_t)(w->id * 16 + iter % 16);

			if (q[0] != want || q[size[j] - 1] != want ||
			    (j && addr[j] < addr[j - 1] + size[j - 1])) {
				thread_fail(&w->te, __LINE__, "stack bytes", 0);
				return NULL;
			}
		}
		end = vmu_stack_used(w->stack);
		if (vmu_stack_end(w->stack) != end ||
		    vmu_stack_used(w->stack) != 0) {
			thread_fail(&w->te, __LINE__, "end", 0);
			return NULL;
		}
	}
	return NULL;
}

/* Several threads on one region: reads and pins race with swaps and
 * reclaim, and every read sees the region's bytes at its one address. */
struct racer {
	struct fix *f;
	pthread_barrier_t *barrier;
	atomic_int *done; /* readers finished */
	const uint8_t *want;
	uint64_t h, size, addr;
	int role, errors, iters;
	char err[160];
};

static void racer_fail(struct racer *r, int line, int rc)
{
	if (!r->errors++)
		snprintf(r->err, sizeof(r->err), "role %d line %d: rc %d",
			 r->role, line, rc);
}

static void racer_step(struct racer *r, uint8_t *buf)
{
	struct vmu_session *s = r->f->s[0];
	struct vmu_region_info info;
	int rc;

	switch (r->role) {
	case 0: /* read it all */
		memset(buf, 0, r->size);
		rc = vmu_region_read(s, r->h, 0, buf, r->size);
		if (rc || memcmp(buf, r->want, r->size))
			racer_fail(r, __LINE__, rc);
		break;
	case 1: /* pin and look at the device bytes */
		rc = vmu_region_pin(s, r->h, NULL, &info);
		if (rc) {
			racer_fail(r, __LINE__, rc);
			break;
		}
		if (info.addr != r->addr || info.state != VMU_REGION_RESIDENT ||
		    memcmp(dev_ptr(r->addr), r->want, 4096) ||
		    memcmp(dev_ptr(r->addr + r->size - 4096),
			   r->want + r->size - 4096, 4096))
			racer_fail(r, __LINE__, 0);
		rc = vmu_region_unpin(s, r->h);
		if (rc)
			racer_fail(r, __LINE__, rc);
		break;
	case 2: /* swap out (busy while someone has it pinned) and in */
		rc = vmu_region_swap_out(s, r->h);
		if (rc && rc != -EBUSY)
			racer_fail(r, __LINE__, rc);
		if (!rc)
			r->iters++;
		rc = vmu_region_swap_in(s, r->h, NULL);
		if (rc)
			racer_fail(r, __LINE__, rc);
		break;
	default: /* the scheduler under pressure */
		vmu_reclaim(r->f->v, r->f->g * 1024);
		rc = vmu_session_swap_out(s);
		if (rc < 0)
			racer_fail(r, __LINE__, rc);
		r->iters += rc > 0;
		break;
	}
}

static void *racer_run(void *arg)
{
	struct racer *r = arg;
	uint8_t *buf = malloc(r->size);

	if (!buf) {
		racer_fail(r, __LINE__, -ENOMEM);
		return NULL;
	}
	pthread_barrier_wait(r->barrier);
	if (r->role < 2) {
		for (int i = 0; i < ITERS && !r->errors; i++)
			racer_step(r, buf);
		atomic_fetch_add(r->done, 1);
	} else {
		while (atomic_load(r->done) < 2 && !r->errors)
			racer_step(r, buf);
	}
	free(buf);
	return NULL;
}

static void test_threads_one_region(void **state)
{
	struct fix *f = *state;
	const uint64_t size = 32 * f->g + 99; /* copies long enough to race */
	uint8_t *want = pattern_buf(160, size);
	struct racer r[4];
	pthread_t tid[4];
	pthread_barrier_t barrier;
	atomic_int done = 0;
	uint64_t h = region_new(f->s[0], 33 * f->g, size);
	struct vmu_region_info info;
	uint64_t swaps0 = get_stats(f->v).swap_outs;

	region_fill(f->s[0], h, 160, 0, size);
	assert_int_equal(pthread_barrier_init(&barrier, NULL, 4), 0);
	for (int i = 0; i < 4; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].f = f;
		r[i].barrier = &barrier;
		r[i].done = &done;
		r[i].want = want;
		r[i].h = h;
		r[i].size = size;
		r[i].addr = region_info(f->s[0], h).addr;
		r[i].role = i;
		assert_int_equal(
			pthread_create(&tid[i], NULL, racer_run, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	pthread_barrier_destroy(&barrier);
	for (int i = 0; i < 4; i++)
		if (r[i].errors)
			fail_msg("%s", r[i].err);
	info = region_info(f->s[0], h);
	assert_int_equal(info.pins, 0);
	assert_int_equal(info.addr, r[0].addr);
	assert_int_equal(vmu_region_swap_in(f->s[0], h, NULL), 0);
	region_expect(f->s[0], h, 160, 0, size);
	assert_int_equal(get_stats(f->v).swapped_now, 0);
	/* the swaps did happen while the others ran */
	assert_true(get_stats(f->v).swap_outs > swaps0);
	check_invariants(f->v);
	free(want);
}

static void test_threads_stacks(void **state)
{
	struct fix *f = *state;
	struct worker *w = calloc(NTHREADS, sizeof(*w));
	struct vmu_stats st;

	assert_non_null(w);
	for (unsigned int i = 0; i < NTHREADS; i++) {
		w[i].v = f->v;
		w[i].id = i;
		w[i].te.id = i;
		w[i].rnd = 99 + i;
		w[i].g = f->g;
		assert_int_equal(vmu_stack_create(f->v, 16 * f->g, &w[i].stack),
				 0);
	}
	run_workers(w, stack_worker);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_STACK].entries, NTHREADS);
	assert_true(st.seg[VMU_SEG_STACK].used <= NTHREADS * 9 * f->g);
	check_invariants(f->v);
	for (unsigned int i = 0; i < NTHREADS; i++)
		vmu_stack_destroy(w[i].stack);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_STACK].entries, 0);
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 0);
	assert_int_equal(st.committed, 0);
	free(w);
}

/* ---------------------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* 10 */
		T(test_threads_sessions, setup_bare),
		T(test_threads_one_region, setup_64m),
		T(test_threads_stacks, setup_64m),
	};

	/* a deadlock fails the run instead of hanging it */
	alarm(600);
	return cmocka_run_group_tests_name("vmu_threads", tests, NULL, NULL);
}
