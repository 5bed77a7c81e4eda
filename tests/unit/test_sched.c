// SPDX-License-Identifier: MIT
/*
 * The scheduler's decisions, without a daemon: deficit round robin over
 * sessions made here (counting jobs, never timing them), the semantic
 * policy's rule under a clock the test sets, and what the policies ask
 * of the VMU (victim order, no swapping, whole-cache reservations,
 * admission waits) over a VMU on the host provider.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "exec/executor.h"
#include "sched/sched.h"
#include "vmu/vmu.h"

/* A session, to the scheduler: its entity, and who it is. */
struct session {
	struct sched_entity se;
	uint64_t id;
	char tenant[DJINN_TENANT_LEN];
};

/* ---------------------------------------------------------------------- */
/* Queues */

static struct sched *new_sched(const struct sched_share *shares,
			       unsigned int nr)
{
	struct sched_config cfg = {
		.policy = DJINN_SCHED_LRU,
		.quantum_ns = 1 * NSEC_PER_MSEC,
		.shares = shares,
		.nr_shares = nr,
	};
	struct sched *sc;

	assert_int_equal(sched_create(NULL, NULL, &cfg, NULL, &sc), 0);
	return sc;
}

static struct session *new_session(struct sched *sc, const char *tenant,
				   uint32_t prio, uint64_t id)
{
	struct session *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->id = id;
	snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
	sched_entity_init(sc, &s->se, id, s->tenant, prio, NULL);
	return s;
}

static void queue(struct sched *sc, struct session *s, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		struct exec_job *job = calloc(1, sizeof(*job));

		assert_non_null(job);
		job->lane = SCHED_COMPUTE;
		job->se = &s->se; /* freed by run() */
		job->request_id = s->id * 1000 + i;
		sched_submit(sc, job);
	}
}

/* Take @s's queued jobs away, freeing them. */
static void drain(struct sched *sc, struct session *s)
{
	struct exec_job *job, *n;
	struct list_head taken;

	INIT_LIST_HEAD(&taken);
	sched_take(sc, SCHED_COMPUTE, &s->se, &taken);
	list_for_each_entry_safe(job, n, &taken, node)
		free(job);
}

/* Start the next job, charge it @ns, return whose it was. */
static struct session *run(struct sched *sc, uint64_t ns)
{
	struct exec_job *job = sched_next(sc, SCHED_COMPUTE);
	struct session *s;

	assert_non_null(job);
	s = container_of(job->se, struct session, se);
	sched_charge(sc, job, ns);
	free(job);
	return s;
}

/* ---------------------------------------------------------------------- */
/* Passes */

static int model_a, model_b; /* two models' pass keys */

/* A step of @s on model @key wanting @rows (a prompt may be split with
 * @chunk), at most @max in its pass. */
static struct exec_job *step(struct sched *sc, struct session *s,
			     const void *key, uint32_t rows, bool chunk,
			     uint32_t max)
{
	struct exec_job *job = calloc(1, sizeof(*job));

	assert_non_null(job);
	job->lane = SCHED_COMPUTE;
	job->se = &s->se;
	job->run_pass = (void (*)(struct exec_job **, unsigned int,
				  const struct exec_env *))1; /* never called */
	job->pass = key;
	job->rows = rows;
	job->chunk = chunk;
	job->pass_max = max;
	sched_submit(sc, job);
	return job;
}

/*
 * sched_join(): the steps of the same model heading the other sessions'
 * queues join the one sched_next() gave, owed sessions first, up to
 * max_batch and pass_tokens rows (a prompt split to fit, one that may
 * not be split left out); another model's steps and a session's second
 * step wait. A step charged with @again is queued first of its
 * session's again, and its session rejoins the round.
 */
static void test_join(void **state)
{
	struct sched_config cfg = { .policy = DJINN_SCHED_LRU,
				    .quantum_ns = NSEC_PER_MSEC,
				    .max_batch = 4,
				    .pass_tokens = 10 };
	struct session *s[7];
	struct exec_job *j[8], *jobs[EXEC_PASS_MAX], *first;
	struct sched *sc;
	unsigned int n;

	assert_int_equal(sched_create(NULL, NULL, &cfg, NULL, &sc), 0);
	for (unsigned int i = 0; i < 7; i++)
		s[i] = new_session(sc, "t", 4, i + 1);
	j[0] = step(sc, s[0], &model_a, 1, false, 64);
	j[1] = step(sc, s[1], &model_b, 1, false, 64); /* another model */
	j[2] = step(sc, s[2], &model_a, 1, false, 64);
	j[3] = step(sc, s[3], &model_a, 6, false, 64); /* 6 rows, whole */
	j[4] = step(sc, s[4], &model_a, 20, true, 64); /* a prompt of 20 */
	j[5] = step(sc, s[5], &model_a, 1, false, 64);
	j[6] = step(sc, s[6], &model_a, 1, false, 64);
	j[7] = step(sc, s[0], &model_a, 1, false, 64); /* s0's second */

	first = sched_next(sc, SCHED_COMPUTE);
	assert_ptr_equal(first, j[0]);
	n = sched_join(sc, first, jobs);
	/* 1 + 1 (s2) + 6 (s3) = 8 rows; s4's prompt gets the 2 left:
	 * four steps, max_batch */
	assert_int_equal(n, 4);
	assert_ptr_equal(jobs[0], j[0]);
	assert_ptr_equal(jobs[1], j[2]);
	assert_ptr_equal(jobs[2], j[3]);
	assert_ptr_equal(jobs[3], j[4]);
	assert_int_equal(j[3]->grant, 6);
	assert_int_equal(j[4]->grant, 2);

	/* s0's step is not done: again, at the head of its queue */
	j[0]->again = true;
	sched_charge(sc, j[0], 4 * NSEC_PER_MSEC);
	for (unsigned int i = 1; i < 4; i++) {
		jobs[i]->again = false;
		sched_charge(sc, jobs[i], 1000);
		free(jobs[i]);
	}
	/* the round: s1 (model b), s5, s6 waited longer than s0 */
	first = sched_next(sc, SCHED_COMPUTE);
	assert_ptr_equal(first, j[1]);
	assert_int_equal(sched_join(sc, first, jobs), 1);
	sched_charge(sc, first, 1000);
	free(first);
	first = sched_next(sc, SCHED_COMPUTE);
	assert_ptr_equal(first, j[5]);
	/* s0 owes time (4 ms against its 1 ms quantum): s6 joins first */
	n = sched_join(sc, first, jobs);
	assert_int_equal(n, 3);
	assert_ptr_equal(jobs[1], j[6]);
	assert_ptr_equal(jobs[2], j[0]); /* its step again, before j[7] */
	for (unsigned int i = 0; i < n; i++) {
		jobs[i]->again = false;
		sched_charge(sc, jobs[i], 1000);
		free(jobs[i]);
	}
	/* s0's second step, alone */
	first = sched_next(sc, SCHED_COMPUTE);
	assert_ptr_equal(first, j[7]);
	assert_int_equal(sched_join(sc, first, jobs), 1);
	sched_charge(sc, first, 1000);
	free(first);
	{
		struct sched_stats st;

		sched_get_stats(sc, &st);
		assert_int_equal(st.passes, 4);
		assert_int_equal(st.pass_jobs, 9);
		assert_int_equal(st.joins, 5);
		assert_int_equal(st.pass_hist[0], 2); /* of one */
		assert_int_equal(st.pass_hist[2], 2); /* of 3 and 4 */
	}
	for (unsigned int i = 0; i < 7; i++) {
		sched_entity_fini(sc, &s[i]->se);
		free(s[i]);
	}
	sched_destroy(sc);
}

/* [model.NAME] max_batch lowers [device] max_batch for its model. */
static void test_max_batch(void **state)
{
	struct sched_batch b[] = { { "small", 2 }, { "big", 80 } };
	struct sched_config cfg = { .policy = DJINN_SCHED_LRU,
				    .max_batch = 16,
				    .batches = b,
				    .nr_batches = 2 };
	struct sched *sc;

	assert_int_equal(sched_create(NULL, NULL, &cfg, NULL, &sc), 0);
	assert_int_equal(sched_max_batch(sc, "small"), 2);
	assert_int_equal(sched_max_batch(sc, "big"), 16);
	assert_int_equal(sched_max_batch(sc, "other"), 16);
	cfg.max_batch = 0; /* the default */
	sched_configure(sc, &cfg);
	assert_int_equal(sched_max_batch(sc, "other"), EXEC_PASS_MAX);
	sched_destroy(sc);
}

/* The bound of sched.h: a job waits behind at most one job of each
 * other busy session, never behind another session's backlog. */
static void test_jobs_ahead(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *flood = new_session(sc, "a", 4, 1);
	struct session *other = new_session(sc, "b", 4, 2);
	struct session *victim = new_session(sc, "c", 4, 3);
	unsigned int before = 0;

	(void)state;
	queue(sc, flood, 64);
	queue(sc, other, 64);
	/* one of the flood's is running when the victim's arrives */
	assert_ptr_equal(run(sc, 10 * NSEC_PER_MSEC), flood);
	queue(sc, victim, 1);
	for (;;) {
		struct session *s = run(sc, 10 * NSEC_PER_MSEC);

		if (s == victim)
			break;
		before++;
	}
	/* the other session's turn, then the flood's (which owes) or not */
	assert_true(before <= 2);
	assert_true(victim->se.ahead_max <= 2);
	/* each busy session counted once */
	assert_true(victim->se.ahead_max == before);
	while (flood->se.queued[SCHED_COMPUTE] ||
	       other->se.queued[SCHED_COMPUTE])
		run(sc, 10 * NSEC_PER_MSEC);
	assert_int_equal(victim->se.jobs_run, 1);
	assert_int_equal(flood->se.jobs_run, 64);
	sched_destroy(sc);
	free(flood);
	free(other);
	free(victim);
}

/* With one other session flooding, the victim's job starts after at
 * most one of the flood's (plus the one running). */
static void test_flood_one_ahead(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *flood = new_session(sc, "a", 4, 1);
	struct session *victim = new_session(sc, "b", 4, 2);

	(void)state;
	queue(sc, flood, 64);
	assert_ptr_equal(run(sc, 100000), flood); /* running */
	queue(sc, victim, 1);
	if (run(sc, 100000) != victim)
		assert_ptr_equal(run(sc, 100000), victim);
	assert_true(victim->se.ahead_max <= 1);
	while (flood->se.queued[SCHED_COMPUTE])
		run(sc, 100000);
	sched_destroy(sc);
	free(flood);
	free(victim);
}

/* Device time follows the weights: tenant share x (priority + 1). */
static void test_weights(void **state)
{
	const struct sched_share shares[] = { { "heavy", 3 } };
	struct sched *sc = new_sched(shares, 1);
	struct session *a = new_session(sc, "light", 0, 1); /* weight 1 */
	struct session *b = new_session(sc, "light", 1, 2); /* weight 2 */
	struct session *c = new_session(sc, "heavy", 0, 3); /* weight 3 */
	unsigned int n[4] = { 0 };

	(void)state;
	assert_int_equal(a->se.weight, 1);
	assert_int_equal(b->se.weight, 2);
	assert_int_equal(c->se.weight, 3);
	queue(sc, a, 2000);
	queue(sc, b, 2000);
	queue(sc, c, 2000);
	/* every job costs 4 quanta of weight 1 */
	for (unsigned int i = 0; i < 1200; i++)
		n[run(sc, 4 * NSEC_PER_MSEC)->id]++;
	/* jobs of equal cost: counts in the ratio of the weights */
	assert_true(n[2] > 19 * n[1] / 10 && n[2] < 21 * n[1] / 10);
	assert_true(n[3] > 29 * n[1] / 10 && n[3] < 31 * n[1] / 10);
	drain(sc, a);
	drain(sc, b);
	drain(sc, c);
	sched_destroy(sc);
	free(a);
	free(b);
	free(c);
}

/* A job far longer than its quantum is paid for: the session sits out
 * rounds while the other's small jobs run. */
static void test_debt(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *big = new_session(sc, "a", 0, 1); /* quantum 1 ms */
	struct session *small = new_session(sc, "b", 0, 2);
	unsigned int smalls = 0;

	(void)state;
	queue(sc, big, 2);
	queue(sc, small, 100);
	assert_ptr_equal(run(sc, 20 * NSEC_PER_MSEC), big); /* 20 quanta */
	while (run(sc, 10000) == small)
		smalls++;
	/* about 20 rounds of small jobs, not one */
	assert_true(smalls >= 18 && smalls <= 21);
	drain(sc, big);
	drain(sc, small);
	sched_destroy(sc);
	free(big);
	free(small);
}

/* A session's jobs keep their order; taking them empties its queue; a
 * stopped lane answers NULL once empty; the lanes are apart. */
static void test_order_take_stop(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *s = new_session(sc, "a", 4, 1);
	struct list_head taken;
	struct exec_job *job, *n;
	unsigned int q, r, count = 0;

	(void)state;
	queue(sc, s, 5);
	for (unsigned int i = 0; i < 3; i++) {
		job = sched_next(sc, SCHED_COMPUTE);
		assert_int_equal(job->request_id, 1000 + i);
		sched_charge(sc, job, 1);
		free(job);
	}
	sched_depth(sc, SCHED_MEM, &q, &r);
	assert_int_equal(q + r, 0);
	sched_depth(sc, SCHED_COMPUTE, &q, &r);
	assert_int_equal(q, 2);
	INIT_LIST_HEAD(&taken);
	sched_take(sc, SCHED_COMPUTE, &s->se, &taken);
	list_for_each_entry_safe(job, n, &taken, node) {
		count++;
		free(job);
	}
	assert_int_equal(count, 2);
	sched_depth(sc, SCHED_COMPUTE, &q, &r);
	assert_int_equal(q, 0);
	sched_stop(sc, SCHED_COMPUTE);
	assert_null(sched_next(sc, SCHED_COMPUTE));
	sched_destroy(sc);
	free(s);
}

/* On the compute lane a session runs one job at a time, whatever the
 * number of threads: while its job runs its next one goes to no other
 * thread, and it comes back, in order, once the job is charged. Here
 * two threads' calls without charging stand for two busy threads. */
static void test_compute_serial(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *a = new_session(sc, "a", 4, 1);
	struct session *b = new_session(sc, "b", 4, 2);
	struct exec_job *ja, *jb, *job;
	unsigned int q, r;

	(void)state;
	queue(sc, a, 3);
	queue(sc, b, 1);
	ja = sched_next(sc, SCHED_COMPUTE);
	assert_int_equal(ja->request_id, 1000);
	/* the second thread gets b's job, not a's next */
	jb = sched_next(sc, SCHED_COMPUTE);
	assert_int_equal(jb->request_id, 2000);
	sched_depth(sc, SCHED_COMPUTE, &q, &r);
	assert_int_equal(q, 2);
	assert_int_equal(r, 2);
	/* nothing may start while a's job runs: a stopped lane says so at
	 * once instead of waiting */
	sched_stop(sc, SCHED_COMPUTE);
	assert_null(sched_next(sc, SCHED_COMPUTE));
	sched_charge(sc, jb, 1);
	free(jb);
	assert_null(sched_next(sc, SCHED_COMPUTE));
	/* a's job ends: its next one may start, and the one after it */
	sched_charge(sc, ja, 1);
	free(ja);
	for (unsigned int i = 1; i < 3; i++) {
		job = sched_next(sc, SCHED_COMPUTE);
		assert_non_null(job);
		assert_int_equal(job->request_id, 1000 + i);
		sched_charge(sc, job, 1);
		free(job);
	}
	assert_null(sched_next(sc, SCHED_COMPUTE));
	sched_depth(sc, SCHED_COMPUTE, &q, &r);
	assert_int_equal(q + r, 0);
	sched_destroy(sc);
	free(a);
	free(b);
}

/* A session whose job runs may have its queued ones taken (it ended):
 * the running one is charged after, and nothing comes back. */
static void test_take_while_running(void **state)
{
	struct sched *sc = new_sched(NULL, 0);
	struct session *a = new_session(sc, "a", 4, 1);
	struct session *b = new_session(sc, "b", 4, 2);
	struct exec_job *ja;

	(void)state;
	queue(sc, a, 3);
	queue(sc, b, 1);
	ja = sched_next(sc, SCHED_COMPUTE);
	assert_int_equal(ja->request_id, 1000);
	drain(sc, a);
	sched_charge(sc, ja, 1);
	free(ja);
	assert_ptr_equal(run(sc, 1), b);
	sched_stop(sc, SCHED_COMPUTE);
	assert_null(sched_next(sc, SCHED_COMPUTE));
	sched_destroy(sc);
	free(a);
	free(b);
}

static void test_hist_p99(void **state)
{
	uint32_t h[SCHED_HIST] = { 0 };

	(void)state;
	assert_int_equal(sched_hist_p99(h), 0);
	h[3] = 99; /* under 8 us */
	h[10] = 1; /* under 1024 us */
	assert_int_equal(sched_hist_p99(h), 8000);
	h[10] = 2;
	assert_int_equal(sched_hist_p99(h), 1024000);
}

/* ---------------------------------------------------------------------- */
/* The semantic rule, under the test's clock */

static void test_plan(void **state)
{
	const struct sched_config cfg = { .swap_margin_pct = 200 };
	const uint64_t now = 1000 * NSEC_PER_SEC,
		       bw = 1000000000ull; /* 1 GB/s */
	struct sched_plan p;

	(void)state;
	/* 100 MB: 0.1 s each way (plus the fixed cost) */
	sched_plan_wait(&cfg, now, 10 * NSEC_PER_SEC, 100000000, bw, bw, true,
			&p);
	assert_true(p.worth && p.swap);
	assert_int_equal(p.out_ns, SCHED_SWAP_FIXED_NS + 100 * NSEC_PER_MSEC);
	assert_int_equal(p.in_ns, SCHED_SWAP_FIXED_NS + 100 * NSEC_PER_MSEC);
	/* the restore starts 1.5 x its time and the slack before the end */
	assert_int_equal(p.prefetch_at, now + 10 * NSEC_PER_SEC - p.in_ns -
						p.in_ns / 2 -
						SCHED_PREFETCH_SLACK_NS);
	/* worth it, but memory is not needed: no swap now */
	sched_plan_wait(&cfg, now, 10 * NSEC_PER_SEC, 100000000, bw, bw, false,
			&p);
	assert_true(p.worth && !p.swap);
	/* a wait shorter than twice out + in: never */
	sched_plan_wait(&cfg, now, 300 * NSEC_PER_MSEC, 100000000, bw, bw, true,
			&p);
	assert_false(p.worth || p.swap);
	/* a wait shorter than the restore's lead: restore at once */
	sched_plan_wait(&cfg, now, 100 * NSEC_PER_MSEC, 100000000, bw, bw, true,
			&p);
	assert_int_equal(p.prefetch_at, now);
	sched_plan_wait(&cfg, now, 500 * NSEC_PER_MSEC, 100000000, bw, bw, true,
			&p);
	assert_true(p.swap); /* 500 > 2 x 200.4 ms */
	/* a slower device changes the answer */
	sched_plan_wait(&cfg, now, 500 * NSEC_PER_MSEC, 100000000, bw / 4,
			bw / 4, true, &p);
	assert_false(p.swap);
	/* nothing resident: nothing to swap */
	sched_plan_wait(&cfg, now, 10 * NSEC_PER_SEC, 0, bw, bw, true, &p);
	assert_false(p.worth);
	/* unmeasured bandwidth is the guess */
	sched_plan_wait(&cfg, now, 10 * NSEC_PER_SEC, 100000000, 0, 0, true,
			&p);
	assert_int_equal(p.out_ns,
			 SCHED_SWAP_FIXED_NS +
				 100000000 * NSEC_PER_SEC / SCHED_BPS_GUESS);
}

static void test_victim_key(void **state)
{
	(void)state;
	/* an overrunner before anyone; later returns before earlier */
	assert_true(sched_victim_key(true, 5 * NSEC_PER_SEC) >
		    sched_victim_key(false, 100 * NSEC_PER_SEC));
	assert_true(sched_victim_key(false, 100 * NSEC_PER_SEC) >
		    sched_victim_key(false, 5 * NSEC_PER_SEC));
	assert_true(sched_victim_key(false, 0) > 0); /* 0: not waiting */
}

/* ---------------------------------------------------------------------- */
/* What the policies ask of the VMU */

#define GRAN (64 * KiB)

struct vfix {
	struct vmu_provider *prov;
	struct vmu *v;
	struct vmu_session *s[3];
};

static void vfix_open(struct vfix *f, uint64_t cap)
{
	assert_int_equal(vmu_host_provider_create(cap, GRAN, &f->prov), 0);
	assert_int_equal(vmu_create(f->prov, NULL, &f->v), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(vmu_session_create(f->v, "t", &f->s[i]), 0);
}

static void vfix_close(struct vfix *f)
{
	for (int i = 0; i < 3; i++)
		vmu_session_destroy(f->s[i]);
	vmu_destroy(f->v);
	f->prov->ops->free(f->prov);
}

static uint64_t region(struct vmu_session *s, uint64_t bytes, uint8_t fill)
{
	uint8_t *buf = malloc(bytes);
	uint64_t h;

	assert_non_null(buf);
	memset(buf, fill, bytes);
	assert_int_equal(vmu_region_create(s, bytes, &h), 0);
	assert_int_equal(vmu_region_resize(s, h, bytes, NULL), 0);
	assert_int_equal(vmu_region_write(s, h, 0, buf, bytes), 0);
	free(buf);
	return h;
}

static uint64_t swapped(struct vmu_session *s)
{
	struct vmu_usage u;

	vmu_session_usage(s, &u);
	return u.swapped;
}

/* Reclaim takes the session with the highest victim key first, plain
 * LRU among equals (and when nobody has one). */
static void test_victim_order(void **state)
{
	struct vfix f;
	struct vmu_resv r;
	char msg[VMU_MSG_LEN];
	uint64_t h[3];

	(void)state;
	vfix_open(&f, 4 * MiB);
	for (int i = 0; i < 3; i++)
		h[i] = region(f.s[i], 1 * MiB, (uint8_t)(i + 1));
	/* LRU: session 0's region is the oldest */
	assert_int_equal(vmu_admit(f.v, 2 * MiB, &r, msg, sizeof(msg)), 0);
	assert_int_equal(swapped(f.s[0]), 1 * MiB);
	assert_int_equal(swapped(f.s[1]) + swapped(f.s[2]), 0);
	vmu_resv_release(&r);
	/* session 2 waits longest, session 1 less: 2 goes first */
	vmu_session_set_victim(f.s[1],
			       sched_victim_key(false, 10 * NSEC_PER_SEC));
	vmu_session_set_victim(f.s[2],
			       sched_victim_key(false, 20 * NSEC_PER_SEC));
	assert_int_equal(vmu_session_swap_in(f.s[0]), 1);
	assert_int_equal(vmu_admit(f.v, 2 * MiB, &r, msg, sizeof(msg)), 0);
	assert_int_equal(swapped(f.s[2]), 1 * MiB);
	assert_int_equal(swapped(f.s[0]) + swapped(f.s[1]), 0);
	vmu_resv_release(&r);
	/* back with the same bytes */
	assert_int_equal(vmu_session_swap_in(f.s[2]), 1);
	{
		uint8_t b[16];

		assert_int_equal(vmu_region_read(f.s[2], h[2], 4096, b, 16), 0);
		for (int i = 0; i < 16; i++)
			assert_int_equal(b[i], 3);
	}
	vfix_close(&f);
}

/* static: nothing swaps, and a reservation holds the whole region */
static void test_static_reserve(void **state)
{
	struct vfix f;
	struct vmu_resv r;
	struct vmu_stats st;
	char msg[VMU_MSG_LEN] = "";
	uint64_t a, b, c;

	(void)state;
	vfix_open(&f, 4 * MiB);
	vmu_set_swap(f.v, false);
	assert_int_equal(vmu_region_create(f.s[0], 2 * MiB, &a), 0);
	assert_int_equal(vmu_region_reserve(f.s[0], a, msg, sizeof(msg)), 0);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.region_reserved, 2 * MiB);
	assert_int_equal(st.free, 2 * MiB);
	/* growth draws on the reservation: free does not move */
	assert_int_equal(vmu_region_resize(f.s[0], a, 1 * MiB, NULL), 0);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.free, 2 * MiB);
	assert_int_equal(st.region_reserved, 1 * MiB);
	/* and a shrink gives back to it, not to everyone */
	assert_int_equal(vmu_region_resize(f.s[0], a, 0, NULL), 0);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.free, 2 * MiB);
	assert_int_equal(st.region_reserved, 2 * MiB);
	/* a second whole region fits, a third does not: refused, with need
	 * and availability */
	assert_int_equal(vmu_region_create(f.s[1], 2 * MiB, &b), 0);
	assert_int_equal(vmu_region_reserve(f.s[1], b, msg, sizeof(msg)), 0);
	assert_int_equal(vmu_region_create(f.s[2], 1 * MiB, &c), 0);
	assert_int_equal(vmu_region_reserve(f.s[2], c, msg, sizeof(msg)),
			 -ENOMEM);
	assert_non_null(strstr(msg, "need 1048576 bytes"));
	/* nothing swaps to make room */
	assert_int_equal(vmu_region_resize(f.s[1], b, 2 * MiB, NULL), 0);
	assert_int_equal(vmu_admit(f.v, 1 * MiB, &r, msg, sizeof(msg)),
			 -ENOMEM);
	assert_int_equal(swapped(f.s[1]), 0);
	assert_int_equal(vmu_session_swap_out(f.s[1]), -EBUSY);
	/* destroying gives everything back */
	assert_int_equal(vmu_region_destroy(f.s[0], a), 0);
	assert_int_equal(vmu_region_reserve(f.s[2], c, msg, sizeof(msg)), 0);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.region_reserved, 1 * MiB);
	vfix_close(&f);
}

struct releaser {
	struct vmu_resv *r;
	unsigned int after_ms;
};

static void *release_later(void *arg)
{
	struct releaser *rl = arg;

	usleep(rl->after_ms * 1000);
	vmu_resv_release(rl->r);
	return NULL;
}

/* An admission waits for a reservation on its way back, and is refused
 * when the wait runs out. Counts, not times, are asserted. */
static void test_admit_wait(void **state)
{
	struct vfix f;
	struct vmu_resv held, r;
	struct vmu_stats st;
	struct releaser rl = { &held, 50 };
	char msg[VMU_MSG_LEN];
	pthread_t t;

	(void)state;
	vfix_open(&f, 4 * MiB);
	vmu_set_admit_wait(f.v, 30 * NSEC_PER_SEC); /* far more than it takes */
	assert_int_equal(vmu_admit(f.v, 3 * MiB, &held, msg, sizeof(msg)), 0);
	assert_int_equal(pthread_create(&t, NULL, release_later, &rl), 0);
	assert_int_equal(vmu_admit(f.v, 2 * MiB, &r, msg, sizeof(msg)), 0);
	pthread_join(t, NULL);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.admit_waits, 1);
	assert_int_equal(st.admit_timeouts, 0);
	assert_int_equal(st.admit_waiting, 0);
	/* more than the device: refused at once, no wait */
	assert_int_equal(vmu_admit(f.v, 8 * MiB, &held, msg, sizeof(msg)),
			 -ENOMEM);
	vmu_resv_release(&r);
	/* nothing held: what does not fit after reclaim is refused at once
	 * (the region is swapped out for the rest) */
	region(f.s[0], 1 * MiB, 1);
	assert_int_equal(vmu_admit(f.v, 4 * MiB, &r, msg, sizeof(msg)), 0);
	assert_int_equal(swapped(f.s[0]), 1 * MiB);
	vmu_resv_release(&r);
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.admit_waits, 1);
	/* something held that is never given back in time: a timeout */
	vmu_set_admit_wait(f.v, 20 * NSEC_PER_MSEC);
	assert_int_equal(vmu_admit(f.v, 2 * MiB, &held, msg, sizeof(msg)), 0);
	assert_int_equal(vmu_admit(f.v, 3 * MiB, &r, msg, sizeof(msg)),
			 -ENOMEM);
	assert_non_null(strstr(msg, "need"));
	vmu_get_stats(f.v, &st);
	assert_int_equal(st.admit_waits, 2);
	assert_int_equal(st.admit_timeouts, 1);
	vmu_resv_release(&held);
	vfix_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jobs_ahead),
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_max_batch),
		cmocka_unit_test(test_flood_one_ahead),
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_debt),
		cmocka_unit_test(test_order_take_stop),
		cmocka_unit_test(test_compute_serial),
		cmocka_unit_test(test_take_while_running),
		cmocka_unit_test(test_hist_p99),
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_victim_key),
		cmocka_unit_test(test_victim_order),
		cmocka_unit_test(test_static_reserve),
		cmocka_unit_test(test_admit_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
