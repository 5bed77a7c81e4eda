// SPDX-License-Identifier: MIT
/*
 * The scheduler's queues: deficit round robin per lane (sched.h).
 *
 * A lane has a round: the sessions with queued jobs, in the order they
 * became busy. sched_next() walks it from the head: a session whose
 * deficit is positive gives its oldest job and goes to the tail; one
 * whose deficit is not is credited its quantum and goes to the tail
 * without giving one. A full walk with nobody eligible credits everyone
 * the fewest quanta that make one eligible at once, so a walk is never
 * repeated. The deficit never exceeds one quantum (credit comes only to
 * a session at or below zero), so an idle session saves nothing up.
 *
 * On the compute lane a session runs one job at a time, however many
 * threads the lane has: a session whose job runs leaves the round and
 * comes back at its tail when the job is charged, if more are queued. So
 * its jobs run in order, each seeing what the one before it wrote (a
 * graph naming an earlier one's outputs, a context's decode steps), and
 * one session's backlog cannot take several threads from the others.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sched/policy.h"
#include "sched/sched.h"

static uint64_t now_ns(void)
{
	return loop_now();
}

/* Whether a session runs one job of lane @l at a time. */
static bool serial(enum sched_lane l)
{
	return l == SCHED_COMPUTE;
}

static int64_t quantum(const struct sched *sc, const struct sched_entity *se)
{
	return (int64_t)(sc->cfg.quantum_ns * (se->weight ? se->weight : 1));
}

static unsigned int hist_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned int b = 0;

	while (us && b < SCHED_HIST - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

/* ---------------------------------------------------------------------- */
/* Creation and configuration */

static unsigned int share_of(const struct sched *sc, const char *tenant)
{
	for (unsigned int i = 0; i < sc->nr_shares; i++)
		if (!strcmp(sc->shares[i].tenant, tenant))
			return sc->shares[i].share;
	return 1;
}

static uint32_t weight_of(const struct sched *sc, const struct sched_entity *se)
{
	return share_of(sc, se->tenant) * (se->priority + 1);
}

static void set_config(struct sched *sc, const struct sched_config *cfg)
{
	sc->cfg = *cfg;
	if (!sc->cfg.quantum_ns)
		sc->cfg.quantum_ns = SCHED_QUANTUM_DEFAULT;
	if (!sc->cfg.max_io_wait_ns)
		sc->cfg.max_io_wait_ns = SCHED_MAX_IO_WAIT_DEFAULT;
	if (!sc->cfg.swap_margin_pct)
		sc->cfg.swap_margin_pct = SCHED_SWAP_MARGIN_DEFAULT;
	sc->nr_shares = 0;
	for (unsigned int i = 0; i < cfg->nr_shares && i < SCHED_TENANTS_MAX;
	     i++)
		sc->shares[sc->nr_shares++] = cfg->shares[i];
	sc->cfg.shares = NULL;
	sc->cfg.nr_shares = 0;
	if (!sc->cfg.max_batch || sc->cfg.max_batch > EXEC_PASS_MAX)
		sc->cfg.max_batch = SCHED_MAX_BATCH_DEFAULT;
	if (!sc->cfg.pass_tokens)
		sc->cfg.pass_tokens = SCHED_PASS_TOKENS_DEFAULT;
	sc->nr_batches = 0;
	for (unsigned int i = 0; i < cfg->nr_batches && i < SCHED_BATCHES_MAX;
	     i++)
		sc->batches[sc->nr_batches++] = cfg->batches[i];
	sc->cfg.batches = NULL;
	sc->cfg.nr_batches = 0;
}

int sched_create(struct loop *loop, struct device *dev,
		 const struct sched_config *cfg, const struct sched_ops *ops,
		 struct sched **out)
{
	struct sched *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return -ENOMEM;
	sc->loop = loop;
	sc->dev = dev;
	if (ops)
		sc->ops = *ops;
	INIT_LIST_HEAD(&sc->entities);
	set_config(sc, cfg);
	sc->policy = cfg->policy;
	for (unsigned int l = 0; l < SCHED_LANES; l++) {
		sc->lane[l].sc = sc;
		pthread_mutex_init(&sc->lane[l].lock, NULL);
		pthread_cond_init(&sc->lane[l].cond, NULL);
		INIT_LIST_HEAD(&sc->lane[l].round);
	}
	pthread_mutex_init(&sc->stat_lock, NULL);
	for (unsigned int i = 0; i < 2; i++)
		pthread_mutex_init(&sc->copy_engine[i], NULL);
	INIT_LIST_HEAD(&sc->waiting);
	policy_init(sc);
	*out = sc;
	return 0;
}

void sched_destroy(struct sched *sc)
{
	if (!sc)
		return;
	policy_fini(sc);
	for (unsigned int l = 0; l < SCHED_LANES; l++) {
		pthread_mutex_destroy(&sc->lane[l].lock);
		pthread_cond_destroy(&sc->lane[l].cond);
	}
	pthread_mutex_destroy(&sc->stat_lock);
	for (unsigned int i = 0; i < 2; i++)
		pthread_mutex_destroy(&sc->copy_engine[i]);
	free(sc);
}

void sched_configure(struct sched *sc, const struct sched_config *cfg)
{
	struct sched_entity *se;

	for (unsigned int l = 0; l < SCHED_LANES; l++)
		pthread_mutex_lock(&sc->lane[l].lock);
	set_config(sc, cfg);
	sc->cfg.policy = sc->policy; /* fixed at start */
	list_for_each_entry(se, &sc->entities, all)
		se->weight = weight_of(sc, se);
	for (unsigned int l = SCHED_LANES; l-- > 0;)
		pthread_mutex_unlock(&sc->lane[l].lock);
	policy_configure(sc);
}

unsigned int sched_policy(const struct sched *sc)
{
	return sc->policy;
}

/* ---------------------------------------------------------------------- */
/* Sessions */

void sched_entity_init(struct sched *sc, struct sched_entity *se, uint64_t id,
		       const char *tenant, uint32_t priority,
		       struct vmu_session *vs)
{
	memset(se, 0, sizeof(*se));
	se->id = id;
	se->tenant = tenant;
	se->priority = priority;
	se->vs = vs;
	se->sc = sc;
	for (unsigned int l = 0; l < SCHED_LANES; l++) {
		INIT_LIST_HEAD(&se->jobs[l]);
		INIT_LIST_HEAD(&se->node[l]);
	}
	se->w.se = se;
	INIT_LIST_HEAD(&se->w.wnode);
	se->weight = weight_of(sc, se);
	for (unsigned int l = 0; l < SCHED_LANES; l++)
		se->deficit[l] = quantum(sc, se);
	list_add_tail(&se->all, &sc->entities);
}

void sched_entity_end(struct sched *sc, struct sched_entity *se)
{
	/* run_swap() reads it on a memory thread */
	__atomic_store_n(&se->ended, true, __ATOMIC_RELEASE);
	policy_entity_end(sc, se);
}

void sched_entity_fini(struct sched *sc, struct sched_entity *se)
{
	list_del_init(&se->all);
}

/* ---------------------------------------------------------------------- */
/* Queues */

void sched_submit(struct sched *sc, struct exec_job *job)
{
	enum sched_lane l = job->lane;
	struct sched_lane_q *q = &sc->lane[l];
	struct sched_entity *se = job->se;

	/* A client's request: the session is back from any wait of its
	 * own, and a context it steps from the context's. */
	if (job->client) {
		policy_request(sc, &se->w);
		if (job->wait)
			policy_request(sc, job->wait);
		job->wait = NULL; /* its context's, which may go first */
	}
	job->t_queued = now_ns();
	pthread_mutex_lock(&q->lock);
	job->seq = q->dispatched;
	job->own_seq = se->dispatched[l];
	if (list_empty(&se->node[l]) && !(serial(l) && se->running[l])) {
		list_add_tail(&se->node[l], &q->round);
		q->nr_round++;
	}
	list_add_tail(&job->node, &se->jobs[l]);
	se->queued[l]++;
	q->queued++;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

/* Lock held: the session whose job runs next, by the round. One walk
 * visits each busy session once, from the head: one with a positive
 * deficit is taken (the caller sends it to the tail); one without is
 * credited its quantum and goes to the tail, and is taken if that made
 * it positive. A walk that took nobody credits everyone the rounds the
 * least indebted needs, in one step. */
static struct sched_entity *pick(struct sched *sc, struct sched_lane_q *q,
				 unsigned int l)
{
	struct sched_entity *se;

	for (;;) {
		uint64_t k = UINT64_MAX;

		for (unsigned int i = 0; i < q->nr_round; i++) {
			se = list_first_entry(&q->round, struct sched_entity,
					      node[l]);
			if (se->deficit[l] > 0)
				return se;
			se->deficit[l] += quantum(sc, se);
			list_move_tail(&se->node[l], &q->round);
			if (se->deficit[l] > 0)
				return se;
		}
		list_for_each_entry(se, &q->round, node[l]) {
			int64_t qn = quantum(sc, se);
			uint64_t r = (uint64_t)((-se->deficit[l] + qn) / qn);

			if (r < k)
				k = r;
		}
		list_for_each_entry(se, &q->round, node[l])
			se->deficit[l] += (int64_t)k * quantum(sc, se);
	}
}

/* Lock held: @se's first job @job starts; its turn is used. Returns
 * its wait in the queue. */
static uint64_t dispatch(struct sched_lane_q *q, unsigned int l,
			 struct sched_entity *se, struct exec_job *job)
{
	uint64_t ahead, wait;

	list_del_init(&job->node);
	/* Its turn is used: to the tail, or out of the round (on a serial
	 * lane until the job is charged). */
	if (list_empty(&se->jobs[l]) || serial(l)) {
		list_del_init(&se->node[l]);
		q->nr_round--;
	} else
		list_move_tail(&se->node[l], &q->round);
	se->queued[l]--;
	se->running[l]++;
	q->queued--;
	q->running++;
	/* Others' jobs that started while it waited. */
	ahead = (q->dispatched - job->seq) - (se->dispatched[l] - job->own_seq);
	if (ahead > se->ahead_max)
		se->ahead_max = ahead;
	q->dispatched++;
	se->dispatched[l]++;
	wait = now_ns() - job->t_queued;
	se->hist[hist_bucket(wait)]++;
	return wait;
}

static void wait_stat(struct sched *sc, const struct sched_entity *se,
		      uint64_t wait)
{
	unsigned int p = se->priority < 8 ? se->priority : 7;

	pthread_mutex_lock(&sc->stat_lock);
	sc->st.wait_hist[p][hist_bucket(wait)]++;
	sc->st.wait_sum_ns[p] += wait;
	sc->st.waits[p]++;
	pthread_mutex_unlock(&sc->stat_lock);
}

struct exec_job *sched_next(struct sched *sc, enum sched_lane l)
{
	struct sched_lane_q *q = &sc->lane[l];
	struct sched_entity *se;
	struct exec_job *job;
	uint64_t wait;

	pthread_mutex_lock(&q->lock);
	while (!q->stop && list_empty(&q->round))
		pthread_cond_wait(&q->cond, &q->lock);
	if (list_empty(&q->round)) {
		pthread_mutex_unlock(&q->lock);
		return NULL;
	}
	se = pick(sc, q, l);
	job = list_first_entry(&se->jobs[l], struct exec_job, node);
	wait = dispatch(q, l, se, job);
	pthread_mutex_unlock(&q->lock);

	if (l == SCHED_COMPUTE)
		wait_stat(sc, se, wait);
	return job;
}

/* Rows a pass gives @job when @left of its budget are left: all it
 * wants, or as many as are left if it may take fewer; 0: it does not
 * fit. */
static uint32_t grant_of(const struct exec_job *job, uint32_t left)
{
	uint32_t want = job->rows ? job->rows : 1;

	if (want <= left)
		return want;
	return job->chunk ? left : 0;
}

unsigned int sched_join(struct sched *sc, struct exec_job *first,
			struct exec_job **jobs)
{
	struct sched_lane_q *q = &sc->lane[first->lane];
	unsigned int l = first->lane, n = 1, max, b;
	uint32_t budget = sc->cfg.pass_tokens, used;
	uint64_t waits[EXEC_PASS_MAX], rows;
	struct sched_entity *joined[EXEC_PASS_MAX];

	jobs[0] = first;
	/* the first goes whatever its rows; a prompt past the budget is
	 * split */
	first->grant = grant_of(first, budget);
	if (!first->grant)
		first->grant = first->rows ? first->rows : 1;
	used = first->grant;
	pthread_mutex_lock(&q->lock);
	/* the model's max_batch (the service's, from sched_max_batch()),
	 * and the device's as it is now */
	max = first->pass_max && first->pass_max < sc->cfg.max_batch ?
		      first->pass_max :
		      sc->cfg.max_batch;
	/* those owed device time first, then the others, each in the
	 * round's order */
	for (int owed = 1; owed >= 0; owed--) {
		struct sched_entity *se, *nx;

		list_for_each_entry_safe(se, nx, &q->round, node[l]) {
			struct exec_job *j;
			uint32_t g;

			if (n >= max || used >= budget)
				break;
			if ((se->deficit[l] > 0) != owed)
				continue;
			j = list_first_entry(&se->jobs[l], struct exec_job,
					     node);
			if (!j->run_pass || j->pass != first->pass)
				continue;
			g = grant_of(j, budget - used);
			if (!g)
				continue;
			j->grant = g;
			used += g;
			waits[n] = dispatch(q, l, se, j);
			joined[n] = se;
			jobs[n++] = j;
		}
	}
	pthread_mutex_unlock(&q->lock);

	rows = used;
	for (b = 0; b < SCHED_PASS_HIST - 1 && (1u << b) < n; b++)
		;
	pthread_mutex_lock(&sc->stat_lock);
	sc->st.passes++;
	sc->st.pass_jobs += n;
	sc->st.pass_rows += rows;
	sc->st.pass_hist[b]++;
	for (unsigned int i = 1; i < n; i++) {
		sc->st.join_hist[hist_bucket(waits[i])]++;
		sc->st.join_sum_ns += waits[i];
		sc->st.joins++;
	}
	pthread_mutex_unlock(&sc->stat_lock);
	for (unsigned int i = 1; i < n; i++)
		if (l == SCHED_COMPUTE)
			wait_stat(sc, joined[i], waits[i]);
	return n;
}

unsigned int sched_max_batch(struct sched *sc, const char *model)
{
	unsigned int max;

	pthread_mutex_lock(&sc->lane[SCHED_COMPUTE].lock);
	max = sc->cfg.max_batch;
	for (unsigned int i = 0; i < sc->nr_batches; i++)
		if (!strcmp(sc->batches[i].model, model) &&
		    sc->batches[i].max < max)
			max = sc->batches[i].max;
	pthread_mutex_unlock(&sc->lane[SCHED_COMPUTE].lock);
	return max;
}

void sched_charge(struct sched *sc, struct exec_job *job, uint64_t ns)
{
	struct sched_lane_q *q = &sc->lane[job->lane];
	struct sched_entity *se = job->se;
	int64_t cost = ns > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)ns;

	pthread_mutex_lock(&q->lock);
	se->running[job->lane]--;
	q->running--;
	se->deficit[job->lane] -= cost;
	if (job->again) { /* its next step: first of its session's */
		job->t_queued = now_ns();
		job->seq = q->dispatched;
		job->own_seq = se->dispatched[job->lane];
		list_add(&job->node, &se->jobs[job->lane]);
		se->queued[job->lane]++;
		q->queued++;
		if (!serial(job->lane) && list_empty(&se->node[job->lane])) {
			list_add_tail(&se->node[job->lane], &q->round);
			q->nr_round++;
			pthread_cond_signal(&q->cond);
		}
	}
	/* Its next job may start now, on any of the lane's threads. */
	if (serial(job->lane) && !se->running[job->lane] &&
	    !list_empty(&se->jobs[job->lane]) &&
	    list_empty(&se->node[job->lane])) {
		list_add_tail(&se->node[job->lane], &q->round);
		q->nr_round++;
		pthread_cond_signal(&q->cond);
	}
	/* A debt is bounded, so a weight raised later counts soon. */
	if (se->deficit[job->lane] < -INT64_MAX / 4)
		se->deficit[job->lane] = -INT64_MAX / 4;
	se->cost_ns += ns;
	se->jobs_run++;
	pthread_mutex_unlock(&q->lock);
}

void sched_take(struct sched *sc, enum sched_lane l, struct sched_entity *se,
		struct list_head *out)
{
	struct sched_lane_q *q = &sc->lane[l];

	pthread_mutex_lock(&q->lock);
	if (!list_empty(&se->jobs[l])) {
		q->queued -= se->queued[l];
		se->queued[l] = 0;
		list_splice_tail(&se->jobs[l], out);
		if (!list_empty(&se->node[l])) {
			list_del_init(&se->node[l]);
			q->nr_round--;
		}
	}
	pthread_mutex_unlock(&q->lock);
}

/* The executors' view of a lane (struct exec_source): its queue, which
 * knows its scheduler. */
static struct exec_job *src_next(void *arg)
{
	struct sched_lane_q *q = arg;

	return sched_next(q->sc, (enum sched_lane)(q - q->sc->lane));
}

static unsigned int src_join(void *arg, struct exec_job *first,
			     struct exec_job **jobs)
{
	struct sched_lane_q *q = arg;

	return sched_join(q->sc, first, jobs);
}

static void src_charge(void *arg, struct exec_job *job, uint64_t ns)
{
	struct sched_lane_q *q = arg;

	sched_charge(q->sc, job, ns);
}

static void src_stop(void *arg)
{
	struct sched_lane_q *q = arg;

	sched_stop(q->sc, (enum sched_lane)(q - q->sc->lane));
}

struct exec_source sched_source(struct sched *sc, enum sched_lane l)
{
	return (struct exec_source){ src_next, src_join, src_charge, src_stop,
				     &sc->lane[l] };
}

void sched_stop(struct sched *sc, enum sched_lane l)
{
	struct sched_lane_q *q = &sc->lane[l];

	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

void sched_depth(struct sched *sc, enum sched_lane l, unsigned int *queued,
		 unsigned int *running)
{
	struct sched_lane_q *q = &sc->lane[l];

	pthread_mutex_lock(&q->lock);
	*queued = q->queued;
	*running = q->running;
	pthread_mutex_unlock(&q->lock);
}

unsigned int sched_busy(struct sched *sc)
{
	const struct sched_entity *se;
	unsigned int n = 0;

	for (unsigned int l = 0; l < SCHED_LANES; l++)
		pthread_mutex_lock(&sc->lane[l].lock);
	list_for_each_entry(se, &sc->entities, all) {
		if (se->ended) /* its running job is discarded when back */
			continue;
		for (unsigned int l = 0; l < SCHED_LANES; l++) {
			if (se->queued[l] || se->running[l]) {
				n++;
				break;
			}
		}
	}
	for (unsigned int l = SCHED_LANES; l-- > 0;)
		pthread_mutex_unlock(&sc->lane[l].lock);
	return n;
}

void sched_get_stats(struct sched *sc, struct sched_stats *st)
{
	pthread_mutex_lock(&sc->stat_lock);
	*st = sc->st;
	pthread_mutex_unlock(&sc->stat_lock);
}

uint64_t sched_hist_p99_64(const uint64_t *hist)
{
	uint64_t total = 0, seen = 0;

	for (unsigned int b = 0; b < SCHED_HIST; b++)
		total += hist[b];
	if (!total)
		return 0;
	for (unsigned int b = 0; b < SCHED_HIST; b++) {
		seen += hist[b];
		if (seen * 100 >= total * 99)
			return (1ull << b) * 1000;
	}
	return (1ull << (SCHED_HIST - 1)) * 1000;
}

uint64_t sched_hist_p99(const uint32_t *hist)
{
	uint64_t h[SCHED_HIST];

	for (unsigned int b = 0; b < SCHED_HIST; b++)
		h[b] = hist[b];
	return sched_hist_p99_64(h);
}

void sched_entity_info(struct sched *sc, struct sched_entity *se,
		       struct djinn_admin_sched_session *e)
{
	e->phase = se->w.phase;
	policy_entity_info(sc, se, e);
	for (unsigned int l = 0; l < SCHED_LANES; l++)
		pthread_mutex_lock(&sc->lane[l].lock);
	for (unsigned int l = 0; l < SCHED_LANES; l++) {
		e->queued += se->queued[l];
		e->inflight += se->queued[l] + se->running[l];
	}
	e->weight = se->weight;
	e->ahead_max = (uint32_t)(se->ahead_max > UINT32_MAX ? UINT32_MAX :
							       se->ahead_max);
	e->deficit_ns = se->deficit[SCHED_COMPUTE];
	e->cost_ns = se->cost_ns;
	e->jobs = se->jobs_run;
	e->wait_p99_ns = sched_hist_p99(se->hist);
	for (unsigned int l = SCHED_LANES; l-- > 0;)
		pthread_mutex_unlock(&sc->lane[l].lock);
}
