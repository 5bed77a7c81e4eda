/* SPDX-License-Identifier: MIT */
/*
 * Inside sched/: the scheduler's state, shared by its queues (sched.c)
 * and its memory policy (policy.c). Nothing outside sched/ includes it.
 */
#ifndef DJINN_SCHED_POLICY_H
#define DJINN_SCHED_POLICY_H

#include "sched/sched.h"

struct sched_lane_q {
	struct sched *sc; /* whose */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct list_head round; /* sessions with queued jobs */
	unsigned int nr_round; /* of them */
	unsigned int queued, running;
	uint64_t dispatched; /* jobs started, ever */
	bool stop;
};

struct sched {
	struct loop *loop; /* NULL in the unit tests: no memory policy */
	struct device *dev;
	struct sched_ops ops;
	struct list_head entities; /* sched_entity.all (I/O thread) */
	struct sched_config cfg;
	unsigned int policy;
	struct sched_share shares[SCHED_TENANTS_MAX];
	unsigned int nr_shares;
	struct sched_batch batches[SCHED_BATCHES_MAX];
	unsigned int nr_batches;
	struct sched_lane_q lane[SCHED_LANES];

	pthread_mutex_t stat_lock; /* @st */
	struct sched_stats st;

	/* the memory policy's, on the I/O thread */
	struct list_head waiting; /* waits (struct sched_wait) in IO_WAIT */
	struct loop_timer tick;
	bool tick_armed;
	unsigned int swap_jobs; /* the policy's swap-outs in flight */
	/* The policy's copies take a device's copy engine, one copy an
	 * engine at a time: a GPU's copy engines move each direction
	 * beside the other, a CPU device's copies share the one core its
	 * kernels leave (policy.c, run_swap()). */
	pthread_mutex_t copy_engine[2];
	unsigned int nr_copy_engines; /* 1 or 2 */
};

void policy_init(struct sched *sc);
void policy_fini(struct sched *sc);
void policy_configure(struct sched *sc);
/* A client's request on what @w covers is being queued. */
void policy_request(struct sched *sc, struct sched_wait *w);
void policy_entity_end(struct sched *sc, struct sched_entity *se);
void policy_entity_info(struct sched *sc, struct sched_entity *se,
			struct djinn_admin_sched_session *e);

#endif /* DJINN_SCHED_POLICY_H */
