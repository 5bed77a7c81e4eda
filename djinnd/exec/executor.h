/* SPDX-License-Identifier: MIT */
/*
 * Executor threads: device work off the I/O thread.
 *
 * An executor is a pool of threads on one device. Each thread asks its
 * source (the scheduler's lane, sched/sched.h: sched_source()) for the
 * next job, calls the job's @run with the device and its own stack,
 * tells the source how long the job took, and hands the job back through
 * a completion list and an eventfd the I/O loop reads, which calls the
 * job's @done. What a job does, and for whom, the executor does not
 * know: a service (svc/) or the scheduler's memory policy sets @run and
 * @done. Two executors per device (struct device): device.compute_threads
 * threads run graphs and model steps (the compute lane: one on the CPU,
 * whose kernels use its cores; several on a GPU, a stream and a stack
 * each, so that sessions' small kernels overlap), and a few threads run
 * memory jobs (the mem lane: mapping and zeroing a large tensor, swapping
 * one back in, loading a model, the scheduler's swaps), so that neither a
 * long graph delays an upload nor a large allocation stalls the I/O
 * thread or another session's upload.
 */
#ifndef DJINN_EXECUTOR_H
#define DJINN_EXECUTOR_H

#include <stdint.h>

#include "list.h"
#include "loop.h"
#include "graph/run.h"
#include "exec/stage.h"

struct device;
struct executor;
struct session;
struct sched_entity;

/* Threads of a memory executor (a graph executor has
 * device.compute_threads), and of any executor at most. */
#define EXEC_MEM_THREADS 4
#define EXEC_THREADS_MAX 16

/* The kind of executor: its threads have a stack each (graphs and model
 * steps), or none (memory jobs). */
enum exec_kind {
	EXEC_GRAPH,
	EXEC_MEM,
};

/* Where a job runs: the device, the thread's stack (a graph
 * executor's; NULL on a memory executor), and the memory executor's
 * staging buffers (exec/stage.h). */
struct exec_env {
	struct vmu *v;
	struct vmu_stack *st;
	struct backend *b;
	struct stage_pool *stage;
};

/*
 * struct exec_mem - memory for a transfer
 * @create: make a region of @bytes (zeroed from @zero_from on), else
 *          pin @region, swapping it in; or, @region 0, take device
 *          address @addr as it is (a text entry the caller holds)
 * @region, @addr: the region, pinned, and its address, on success
 * @stage_off, @stage_len: with @stage_len, copy that range of it to
 *          @staged, a staging buffer of @staged_size bytes from the
 *          memory executor's pool (exec/stage.h: host_alloc() memory,
 *          pinned on a GPU): for a read of a device whose memory the
 *          I/O thread cannot touch. @staged NULL: the job takes one of
 *          @staged_size bytes (0: stage_size(@stage_len)); else it
 *          copies into the one
 *          given (a read in parts reuses its two), which stays there
 *          on failure. The buffer is the job's owner's until it gives
 *          it back with executor_unstage(), once the reply sent from
 *          it is done.
 * @going:  a later part of a read under way: copied even if its session
 *          has ended since (the read holds the session, its tensor and
 *          the pin), since the reply's header promised its bytes
 */
struct exec_mem {
	bool create, going;
	uint64_t bytes, zero_from;
	uint64_t region, addr;
	uint64_t stage_off, stage_len;
	void *staged;
	uint64_t staged_size;
};

/* A swap job of the scheduler's memory policy (sched/policy.c): a
 * session's data out to host memory (@out) or back, and what moved. */
struct exec_swap {
	bool out;
	uint64_t bytes, regions;
};

/* Jobs in one pass at most (model/forward.h: FWD_MAX_SEQ). */
#define EXEC_PASS_MAX 64

/*
 * struct exec_job - one unit of device work
 * @se, @lane, @client: whose it is, on which of the scheduler's lanes
 *           (enum sched_lane), and whether a client asked for it now
 *           (sched_submit(): the session is back from any wait)
 * @run:     called on an executor thread; it sets @error and @msg, and
 *           finds out itself whether its owner has gone meanwhile
 * @cancel:  called instead of @run for a job taken off its queue before
 *           it ran (executor_cancel()), with @error -ECANCELED; may be
 *           NULL
 * @done:    called on the I/O thread when the job is back (run, failed
 *           or cancelled), with @done_arg; it frees the job
 * @t_queued, @seq, @own_seq: the scheduler's
 *
 * Passes: a job with @run_pass joins passes. The source hands the
 * executor such a job with the others of the same @pass key that are
 * ready (exec_source.join: at most @pass_max, its rows within the pass's
 * token budget), and one call of @run_pass runs them all. @rows: the
 * rows (tokens) its next step wants, set by its owner; @chunk: it may
 * take fewer (a prompt split over passes); @grant: the rows the source
 * gave it for this pass. A job that is not finished after its run sets
 * @again: the source queues it again, at the head of its session's
 * queue, and it is not handed back (a decode of many tokens, a step per
 * pass).
 *
 * The rest is its owner's: @counted, whether it is one of its session's
 * and tenant's requests in flight (svc/: graphs, model steps, uploaded
 * models' loads); @s holds a reference to the session that asked; a GRAPH_SUBMIT's graph (@payload, @view, @in_descs, @descs) and
 * outputs (@handles, @res); a transfer's memory (@mem); a swap (@swap).
 */
struct exec_job {
	struct list_head node;
	struct sched_entity *se;
	/* a client's job on a context with a wait of its own: the wait
	 * ends as the job is queued (sched_submit() forgets it then); a
	 * policy swap's: the wait it serves */
	struct sched_wait *wait;
	unsigned int lane;
	bool client;
	void (*run)(struct exec_job *job, const struct exec_env *env);
	void (*run_pass)(struct exec_job **jobs, unsigned int n,
			 const struct exec_env *env);
	const void *pass;
	uint32_t pass_max, rows, grant;
	bool chunk, again;
	void (*cancel)(struct exec_job *job);
	void (*done)(struct exec_job *job, void *arg);
	void *done_arg;
	int error;
	char msg[DJINN_MAX_ERROR_MSG];
	uint64_t t_queued, seq, own_seq;

	bool counted;
	struct session *s;
	void *conn, *ctx;
	uint64_t request_id;
	uint64_t t0; /* when the request arrived */
	void *payload;
	struct djinn_graph_view view;
	struct djinn_tensor_desc *in_descs;
	struct djinn_tensor_desc *descs;
	uint64_t handles[DJINN_MAX_GRAPH_OUTPUTS];
	struct graph_result res;
	struct exec_mem mem;
	struct exec_swap swap;
};

/*
 * struct exec_source - where an executor's threads get their jobs
 * @next:   the next job (blocks), or NULL once the source is stopped and
 *          empty: the thread ends
 * @join:   for a job of @next with @run_pass: the pass it leads, itself
 *          first, in @jobs (EXEC_PASS_MAX), their @grant set; how many
 * @charge: a job @next or @join gave took @ns of device time (its share
 *          of its pass's); one with @again is queued again
 * @stop:   wake the threads to end once the source is empty
 */
struct exec_source {
	struct exec_job *(*next)(void *arg);
	unsigned int (*join)(void *arg, struct exec_job *first,
			     struct exec_job **jobs);
	void (*charge)(void *arg, struct exec_job *job, uint64_t ns);
	void (*stop)(void *arg);
	void *arg;
};

/* An executor for jobs of @kind on device @dev (a graph executor's
 * threads have a stack each in its VMU, @threads of them; a memory
 * executor has EXEC_MEM_THREADS), fed by @src; finished jobs come back
 * on @loop. */
int executor_start(struct loop *loop, struct device *dev, enum exec_kind kind,
		   unsigned int threads, const struct exec_source *src,
		   struct executor **out);
/* Stop after the queued jobs have run; finished jobs still go back. */
void executor_stop(struct executor *e);
/* Free it once the I/O loop's ring is gone. */
void executor_free(struct executor *e);
/* Give @m's staging buffer back to memory executor @e's pool (from the
 * I/O thread, once nothing reads it); @m->staged is NULL after. */
void executor_unstage(struct executor *e, struct exec_mem *m);
/* Fail the jobs on @jobs, taken off their queue before they ran, with
 * -ECANCELED ("session ended"; each job's @cancel is called), and hand
 * them back through @e's completions as if they had run. */
void executor_cancel(struct executor *e, struct list_head *jobs);

#endif /* DJINN_EXECUTOR_H */
