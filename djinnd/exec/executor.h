/* SPDX-License-Identifier: MIT */
/*
 * Executor threads: device work off the I/O thread.
 *
 * The I/O thread queues jobs; an executor thread runs them in order (so
 * a session's graphs run in submission order, and a later graph may name
 * an earlier one's outputs) and hands each finished job back through a
 * completion list and an eventfd the I/O loop reads. One executor per
 * device; its kernels use the device's own parallelism.
 */
#ifndef DJINN_EXECUTOR_H
#define DJINN_EXECUTOR_H

#include <stdint.h>

#include "list.h"
#include "exec/exec.h"
#include "session/session.h"

struct server;
struct executor;

/*
 * struct exec_job - one GRAPH_SUBMIT
 * @conn, @conn_id: who asked (the I/O thread's business only)
 * @payload, @view: the graph, parsed (the payload is the job's)
 * @in_descs: the inputs' shapes inference used (checked again at run)
 * @descs:   every node's inferred shape
 * @error, @msg: how it went
 * @handles: the outputs' handles in the session, on success
 */
struct exec_job {
	struct list_head node;
	struct session *s; /* a reference */
	void *conn;
	uint64_t request_id;
	void *payload;
	struct djinn_graph_view view;
	struct djinn_tensor_desc *in_descs;
	struct djinn_tensor_desc *descs;
	int error;
	char msg[DJINN_MAX_ERROR_MSG];
	uint64_t handles[DJINN_MAX_GRAPH_OUTPUTS];
	struct exec_result res;
};

int executor_start(struct server *srv, struct executor **out);
/* Stop after the queued jobs have run; finished jobs still go back. */
void executor_stop(struct executor *e);
/* Free it once the I/O loop's ring is gone. */
void executor_free(struct executor *e);
void executor_submit(struct executor *e, struct exec_job *job);
/* Fail the session's queued jobs with -ECANCELED (the running one, if
 * any, finishes and is then discarded by its completion). */
void executor_cancel(struct executor *e, struct session *s);
/* Jobs queued or running. */
unsigned int executor_depth(struct executor *e);
void exec_job_free(struct exec_job *job);

#endif /* DJINN_EXECUTOR_H */
