/* SPDX-License-Identifier: MIT */
/*
 * The scheduler: the one place djinnd's policy lives (Documentation/
 * sched.rst).
 *
 * The scheduler knows sessions only as their struct sched_entity (as
 * the kernel's CFS knows tasks), which the session layer embeds and
 * gives it with sched_entity_init(): who the session is, its data in
 * the VMU, and its queues. It sits below session/ and above exec/.
 *
 * Every unit of device work (a graph, a model step, a memory job) goes
 * from a service to sched_submit(), which queues it on its session's queue of
 * one of the device's two lanes: SCHED_COMPUTE (graphs and model steps,
 * run by the graph executor's threads, one job of a session at a time)
 * and SCHED_MEM (memory jobs: a
 * transfer's memory, model loads, the policy's own swaps, run by the
 * memory executor's threads). An executor thread asks sched_next() for
 * its lane's next job and tells sched_charge() how long it took; the
 * job goes back to the I/O thread through the executor's completion list
 * and its @done callback (exec/executor.h). The executors ask for jobs
 * through the struct exec_source sched_source() gives.
 *
 * Fairness: deficit round robin over the sessions with queued jobs, one
 * job per turn. A session's turn comes in the order sessions became
 * busy; it runs one job if its deficit is positive, else it is credited
 * its quantum (sched.quantum x weight) and waits for the next round.
 * What a job costs is its measured device time, charged when it ends. So
 * a session that does not owe device time waits behind at most one job of
 * every other busy session, plus those already running, never behind
 * another session's backlog; a session whose job ran past its quantum
 * sits out rounds until its debt is paid, while others are busy. Weight:
 * the tenant's share ([tenant.NAME] share, 1 by default) times the
 * session's priority plus one.
 *
 * Passes: a model step (a job with run_pass) that the round gives a
 * thread takes with it the steps of the same model heading the other
 * sessions' queues (sched_join()), and one call runs them all; a step
 * whose request goes on is queued again first of its session's
 * (sched_charge() with job->again). Documentation/sched.rst, "Passes".
 *
 * Memory policy (sched.policy; the functions below that take a session
 * run on the I/O thread): semantic, lru or static, see sched/policy.c.
 */
#ifndef DJINN_SCHED_H
#define DJINN_SCHED_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <djinn/proto.h>

#include "clock.h"
#include "list.h"
#include "loop.h"
#include "exec/executor.h"

struct device;
struct vmu_session;

enum sched_lane {
	SCHED_COMPUTE, /* graphs and model steps: the graph executor */
	SCHED_MEM, /* memory jobs: the memory executor */
	SCHED_LANES,
};

/* Jobs of the compute lane a session may have queued or running: more
 * are refused with -EAGAIN. */
#define SCHED_INFLIGHT_MAX 64

/* Queue-wait histograms: bucket i counts waits below 2^i us (bucket 0
 * under 1 us), the last one everything longer. */
#define SCHED_HIST 28

#define SCHED_TENANTS_MAX 256
#define SCHED_SHARE_MAX 1000

struct sched_share {
	char tenant[DJINN_TENANT_LEN];
	unsigned int share; /* 1 .. SCHED_SHARE_MAX */
};

/* [model.NAME] max_batch: the most contexts of model @model in a pass */
#define SCHED_BATCHES_MAX 64
struct sched_batch {
	char model[DJINN_MODEL_NAME_MAX];
	unsigned int max; /* 1 .. EXEC_PASS_MAX */
};

/* [device] max_batch's and pass_tokens' defaults */
#define SCHED_MAX_BATCH_DEFAULT EXEC_PASS_MAX
#define SCHED_PASS_TOKENS_DEFAULT 256

/*
 * struct sched_config - djinnd.conf's [sched] and [tenant.NAME] sections
 * @policy:       enum djinn_sched_policy (not changed by a reload)
 * @quantum_ns:   device time a session of weight 1 may use per round
 * @admit_wait_ns: how long an admission waits for memory that is coming
 *                free before it is refused (0: refuse at once)
 * @max_io_wait_ns: IO_WAIT estimates longer than this are clamped to it
 * @swap_margin_pct: semantic swaps a waiting session out only when its
 *                expected wait is over this % of the measured swap-out
 *                plus restore time
 * @shares:       tenant shares (weights); tenants not named have 1
 * @max_batch:    [device] max_batch: contexts of one model in a pass at
 *                most (1: every step runs alone; 0: the default)
 * @pass_tokens:  [device] pass_tokens: the rows (tokens) of a pass at
 *                most, a long prompt split to fit (0: the default)
 * @batches:      [model.NAME] max_batch, below @max_batch for that model
 */
struct sched_config {
	unsigned int policy;
	uint64_t quantum_ns;
	uint64_t admit_wait_ns;
	uint64_t max_io_wait_ns;
	unsigned int swap_margin_pct;
	const struct sched_share *shares;
	unsigned int nr_shares;
	unsigned int max_batch, pass_tokens;
	const struct sched_batch *batches;
	unsigned int nr_batches;
};

#define SCHED_QUANTUM_DEFAULT NSEC_PER_MSEC
#define SCHED_ADMIT_WAIT_DEFAULT (2 * NSEC_PER_SEC)
#define SCHED_MAX_IO_WAIT_DEFAULT (3600 * NSEC_PER_SEC)
#define SCHED_SWAP_MARGIN_DEFAULT 200 /* % */

/*
 * struct sched_wait - an IO_WAIT and what the memory policy does about
 * it: a session's (in its struct sched_entity, @region 0: all its data),
 * or one context's (@region: its KV cache's region, so that one session
 * may hold many conversations, each with its own wait: sched_wait_new()).
 * The I/O thread's, but @ended, which run_swap() reads. A context's wait
 * lives while its context does and while a policy job of it is in
 * flight (@refs).
 */
struct sched_wait {
	struct sched_entity *se; /* whose session */
	uint64_t region;
	uint32_t refs; /* a context's: its owner's and each job's */
	bool own; /* a context's: freed at the last reference */
	bool ended;
	uint32_t phase; /* the last SIGNAL */
	bool waiting; /* in an IO_WAIT */
	bool swapped_in_wait; /* some of its data left during this wait */
	bool overran; /* its last wait ran past the estimate */
	bool prefetched; /* this wait's restore has been started */
	uint32_t swap_jobs, restore_jobs; /* the policy's jobs in flight */
	uint64_t wait_start, wait_until;
	struct loop_timer prefetch; /* armed while waiting */
	bool prefetch_armed;
	struct list_head wnode; /* the scheduler's waits */
};

/*
 * struct sched_entity - a session, to the scheduler (in struct session)
 *
 * Who it is (sched_entity_init()'s, fixed): @id, for the log; @tenant
 * and @priority, its weight's; @vs, the data the memory policy may move.
 * The lane fields are under their lane's lock; the policy's are the I/O
 * thread's.
 */
struct sched_entity {
	uint64_t id;
	const char *tenant;
	uint32_t priority;
	struct vmu_session *vs;
	struct sched *sc; /* whose */
	struct list_head all; /* the scheduler's entities (I/O thread) */
	bool ended; /* sched_entity_end() */

	/* per lane, under its lock */
	struct list_head jobs[SCHED_LANES]; /* queued, in order */
	struct list_head node[SCHED_LANES]; /* in the lane's round */
	int64_t deficit[SCHED_LANES];
	uint64_t dispatched[SCHED_LANES]; /* its jobs started */
	uint32_t queued[SCHED_LANES], running[SCHED_LANES];
	uint32_t weight;
	uint64_t ahead_max; /* most jobs of others started while one waited */
	uint64_t cost_ns, jobs_run;
	uint32_t hist[SCHED_HIST]; /* its jobs' queue waits */

	/* the memory policy's (I/O thread) */
	uint32_t inflight; /* compute jobs queued or running (net/'s count) */
	struct sched_wait w; /* the session's own wait */
	uint32_t ctx_waiting; /* its contexts' waits in an IO_WAIT */
};

/*
 * struct sched_stats - a device's, for ADMIN_SCHED and the metrics
 */
/* Pass-size histogram: bucket i counts passes of 2^(i-1) + 1 .. 2^i
 * jobs (bucket 0: one job), as ADMIN_SCHED's pass_hist. */
#define SCHED_PASS_HIST 8

struct sched_stats {
	uint64_t passes, pass_jobs,
		pass_rows; /* passes run, their jobs, rows */
	uint64_t pass_hist[SCHED_PASS_HIST]; /* jobs per pass */
	uint64_t join_hist[SCHED_HIST]; /* a step's wait to join a pass */
	uint64_t join_sum_ns, joins;
	uint64_t swaps_signal; /* regions the policy swapped out on IO_WAIT */
	uint64_t prefetches, prefetch_hits, prefetch_misses;
	uint64_t swap_out_bps, swap_in_bps; /* measured; 0: not yet */
	uint64_t wait_hist[8][SCHED_HIST]; /* compute waits, by priority */
	uint64_t wait_sum_ns[8], waits[8];
};

struct sched;

/*
 * struct sched_ops - what the session layer lends the scheduler: a
 * reference to the session of @se while one of the policy's own jobs
 * (a swap) is in flight, and its release.
 */
struct sched_ops {
	void (*get)(struct sched_entity *se);
	void (*put)(struct sched_entity *se);
};

/* The scheduler of device @dev; its timers run on @loop (NULL in unit
 * tests: no memory policy then). */
int sched_create(struct loop *loop, struct device *dev,
		 const struct sched_config *cfg, const struct sched_ops *ops,
		 struct sched **out);
void sched_destroy(struct sched *sc);
/* A reload: shares, quantum and waits (the policy stays). */
void sched_configure(struct sched *sc, const struct sched_config *cfg);
unsigned int sched_policy(const struct sched *sc);

/* enum djinn_sched_policy's names ("unknown" for others), and back (a
 * name that is none: -EINVAL). Inline: the configuration links nothing
 * else of the scheduler. */
static inline const char *sched_policy_name(unsigned int policy)
{
	static const char *const names[] = { "semantic", "lru", "static" };

	return policy <= DJINN_SCHED_STATIC ? names[policy] : "unknown";
}

static inline int sched_policy_parse(const char *name)
{
	for (unsigned int p = DJINN_SCHED_SEMANTIC; p <= DJINN_SCHED_STATIC;
	     p++)
		if (!strcmp(name, sched_policy_name(p)))
			return (int)p;
	return -EINVAL;
}

/* Whether a context made (new or forked) reserves its whole KV cache
 * at once, or is refused: static partitioning (model_ctx_reserve()). */
bool sched_reserves(const struct sched *sc);

/*
 * A new session of the device: its weight from @tenant and @priority
 * (@tenant must outlive @se). sched_entity_end(): it ended (its waits
 * and timers are cancelled; its jobs are taken with sched_take()).
 * sched_entity_fini(): it is freed.
 */
void sched_entity_init(struct sched *sc, struct sched_entity *se, uint64_t id,
		       const char *tenant, uint32_t priority,
		       struct vmu_session *vs);
void sched_entity_end(struct sched *sc, struct sched_entity *se);
void sched_entity_fini(struct sched *sc, struct sched_entity *se);

/*
 * Queue @job on the lane in job->lane for its session (job->se). A
 * client's job (job->client) also tells the memory policy the session
 * is back.
 */
void sched_submit(struct sched *sc, struct exec_job *job);

/* For an executor thread of @lane: the next job (blocks), or NULL once
 * the lane is stopped and empty. */
struct exec_job *sched_next(struct sched *sc, enum sched_lane lane);
/*
 * For an executor thread whose job @first from sched_next() joins
 * passes: the pass it leads (exec_source.join): itself, then the jobs of
 * the same pass key that head their sessions' queues, those whose
 * sessions' deficits are positive first, each in the round's order, up
 * to the model's max_batch and the device's pass_tokens rows. Returns
 * how many, in @jobs, their grants set.
 */
unsigned int sched_join(struct sched *sc, struct exec_job *first,
			struct exec_job **jobs);
/* The job that sched_next() or sched_join() gave took @ns of device
 * time; with job->again it is queued again, first of its session's. */
void sched_charge(struct sched *sc, struct exec_job *job, uint64_t ns);
/* The most contexts of model @model in one pass on this device. */
unsigned int sched_max_batch(struct sched *sc, const char *model);
/* The lane's jobs for its executor (executor_start()). */
struct exec_source sched_source(struct sched *sc, enum sched_lane lane);
/* Take @se's queued jobs of @lane off the queue onto @out. */
void sched_take(struct sched *sc, enum sched_lane lane, struct sched_entity *se,
		struct list_head *out);
/* Wake the lane's threads to stop once it is empty. */
void sched_stop(struct sched *sc, enum sched_lane lane);
/* Jobs queued and running. */
void sched_depth(struct sched *sc, enum sched_lane lane, unsigned int *queued,
		 unsigned int *running);
/* Sessions with jobs queued or running. */
unsigned int sched_busy(struct sched *sc);
void sched_get_stats(struct sched *sc, struct sched_stats *st);
/* The scheduler's part of ADMIN_SCHED's entry of @se: its queues,
 * weight, costs and waits (the session layer fills in who it is). */
void sched_entity_info(struct sched *sc, struct sched_entity *se,
		       struct djinn_admin_sched_session *e);

/*
 * Signals (socket SIGNAL and the module's, I/O thread). Checks
 * @phase/@expected_ns first with sched_signal_check(): IO_WAIT needs an
 * estimate in (0, INT64_MAX] ns (else -EINVAL and @msg); longer than
 * sched.max_io_wait is clamped to it (*@expected_ns is the value used).
 */
int sched_signal_check(const struct sched *sc, uint32_t phase,
		       uint64_t *expected_ns, char *msg, size_t msglen);
void sched_signal(struct sched *sc, struct sched_wait *w, uint32_t phase,
		  uint64_t expected_ns);

/*
 * A context's wait, for the context whose KV cache is region @region of
 * @se's session (I/O thread): NULL when out of memory. Its IO_WAIT moves
 * that region alone; a request on the context ends it
 * (exec_job.wait, sched_submit()). sched_wait_end() when the context
 * goes: the wait ends, and is freed once no job of it is in flight.
 */
struct sched_wait *sched_wait_new(struct sched *sc, struct sched_entity *se,
				  uint64_t region);
void sched_wait_end(struct sched *sc, struct sched_wait *w);

/* The 99th percentile of a SCHED_HIST histogram: its bucket's upper
 * bound, in ns (0 when empty). */
uint64_t sched_hist_p99(const uint32_t *hist);
uint64_t sched_hist_p99_64(const uint64_t *hist);

/*
 * The semantic policy's rule for a session that waits, pure (the unit
 * tests drive it with their own clock): with @bytes of its data
 * resident, @left_ns of its estimate to go, and swap bandwidths measured
 * (bytes per second; 0: not yet, SCHED_BPS_GUESS is assumed),
 *   out_ns, in_ns  the time to swap out and to restore: a fixed cost
 *                  (SCHED_SWAP_FIXED_NS) plus the bytes at the bandwidth;
 *   worth          the wait is longer than swap_margin% of out + in;
 *   swap           worth, and memory is @needed now or soon (policy.c's
 *                  memory_needed(): an admission waiting, pressure
 *                  critical, or at warning with steps queued);
 *   prefetch_at    when the restore starts, so that it is done by the
 *                  estimate's end: in_ns and half as much again plus
 *                  SCHED_PREFETCH_SLACK_NS before it (@now at the latest).
 */
#define SCHED_BPS_GUESS 1000000000ull /* 1 GB/s until measured */
#define SCHED_SWAP_FIXED_NS 200000ull /* 0.2 ms per swap */
#define SCHED_PREFETCH_SLACK_NS (2 * NSEC_PER_MSEC)

struct sched_plan {
	uint64_t out_ns, in_ns;
	bool worth, swap;
	uint64_t prefetch_at;
};
void sched_plan_wait(const struct sched_config *cfg, uint64_t now,
		     uint64_t left_ns, uint64_t bytes, uint64_t bw_out,
		     uint64_t bw_in, bool needed, struct sched_plan *p);

/* The VMU victim key of a waiting session (vmu_session_set_victim()):
 * one that overran its last estimate first, then the one whose estimate
 * ends last. */
uint64_t sched_victim_key(bool overran, uint64_t wait_until);

#endif /* DJINN_SCHED_H */
