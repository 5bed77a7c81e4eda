/* SPDX-License-Identifier: MIT */
/*
 * Executor threads: device work off the I/O thread.
 *
 * The I/O thread gives jobs to the scheduler (sched/sched.h), which
 * queues them per session; an executor thread asks it for the next job
 * of its lane, runs it, and hands it back through a completion list and
 * an eventfd the I/O loop reads, which calls the job's @done. A
 * session's jobs of a lane start in the order they were queued (so a
 * later graph may name an earlier one's outputs; on the compute lane it
 * also finishes first). Two executors per device: device.compute_threads
 * threads run graphs and model steps (the compute lane: one on the CPU,
 * whose kernels use its cores; several on a GPU, a stream and a stack
 * each, so that sessions' small kernels overlap), and a few threads run
 * memory jobs (the mem lane: mapping and zeroing a large tensor, swapping
 * one back in, loading a model, the scheduler's swaps), so that neither
 * a long graph delays an upload nor a large allocation stalls the I/O
 * thread or another session's upload. Each device has its own pair and
 * scheduler (server.h, struct device): a session's jobs go to its
 * device's. Nothing here knows who asked: the job's callback does.
 */
#ifndef DJINN_EXECUTOR_H
#define DJINN_EXECUTOR_H

#include <stdint.h>

#include "list.h"
#include "graph/run.h"
#include "exec/stage.h"
#include "sched/sched.h"
#include "session/session.h"

struct server;
struct device;
struct executor;

/* Threads of a memory executor (a graph executor has
 * device.compute_threads), and of any executor at most. */
#define EXEC_MEM_THREADS 4
#define EXEC_THREADS_MAX 16

enum exec_kind {
	EXEC_GRAPH, /* run a graph */
	EXEC_MEM, /* make a region resident for a transfer */
	EXEC_CALL, /* call @call (on the graph executor: model steps) */
};

/* Where an EXEC_CALL runs: the device and the executor's stack. */
struct exec_env {
	struct vmu *v;
	struct vmu_stack *st;
	struct backend *b;
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
 *          I/O thread cannot touch. The buffer is the job's owner's
 *          until it gives it back with executor_unstage(), once the
 *          reply sent from it is done.
 */
struct exec_mem {
	bool create;
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

/*
 * struct exec_job - one GRAPH_SUBMIT, or one EXEC_MEM preparation
 * @conn, @ctx: who asked, and why (the I/O thread's business only)
 * @payload, @view: the graph, parsed (the payload is the job's)
 * @in_descs: the inputs' shapes inference used (checked again at run)
 * @descs:   every node's inferred shape
 * @error, @msg: how it went
 * @handles: the outputs' handles in the session, on success
 * @mem:     what an EXEC_MEM job prepares
 * @call:    what an EXEC_CALL job runs; it sets @error and @msg
 * @lane:    an EXEC_CALL's lane (the scheduler sets the others')
 * @swap:    what a scheduler's swap job (an EXEC_CALL) moves
 * @done:    called on the I/O thread when the job is back (run, failed
 *           or cancelled), with @done_arg; it frees the job
 * @t_queued, @seq, @own_seq: the scheduler's
 */
struct exec_job {
	struct list_head node;
	enum exec_kind kind;
	struct session *s; /* a reference */
	void *conn, *ctx;
	uint64_t request_id;
	uint64_t t0; /* when the request arrived */
	void *payload;
	struct djinn_graph_view view;
	struct djinn_tensor_desc *in_descs;
	struct djinn_tensor_desc *descs;
	int error;
	char msg[DJINN_MAX_ERROR_MSG];
	uint64_t handles[DJINN_MAX_GRAPH_OUTPUTS];
	struct graph_result res;
	struct exec_mem mem;
	void (*call)(struct exec_job *job, const struct exec_env *env);
	enum sched_lane lane;
	struct exec_swap swap;
	void (*done)(struct exec_job *job, void *arg);
	void *done_arg;
	uint64_t t_queued, seq, own_seq;
};

/* An executor for jobs of @kind on device @dev (a graph executor has a
 * stack in its VMU). */
int executor_start(struct server *srv, struct device *dev, enum exec_kind kind,
		   struct executor **out);
/* Stop after the queued jobs have run; finished jobs still go back. */
void executor_stop(struct executor *e);
/* Free it once the I/O loop's ring is gone. */
void executor_free(struct executor *e);
/* Give @m's staging buffer back to memory executor @e's pool (from the
 * I/O thread, once nothing reads it); @m->staged is NULL after. */
void executor_unstage(struct executor *e, struct exec_mem *m);
/* Fail the session's queued jobs with -ECANCELED (the running one, if
 * any, finishes and is then discarded by its completion). */
void executor_cancel(struct executor *e, struct session *s);
void exec_job_free(struct exec_job *job);

#endif /* DJINN_EXECUTOR_H */
