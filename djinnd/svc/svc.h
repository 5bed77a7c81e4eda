/* SPDX-License-Identifier: MIT */
/*
 * The services: the work a message names, between the protocol (net/)
 * and the scheduler (sched/). A handler of net/ decodes and validates a
 * frame, calls one service operation and encodes its answer; the
 * service does the work, queueing device work on the scheduler as jobs
 * whose bodies are here, and is called back on the I/O thread through
 * the job's @done when the job is back. No executor thread runs code of
 * net/ (Documentation/architecture.rst, "Floors").
 */
#ifndef DJINN_SVC_H
#define DJINN_SVC_H

#include <stdbool.h>
#include <stdio.h>

#include "exec/executor.h"
#include "session/session.h"

/*
 * The job bodies, on an executor's thread. Each first asks
 * svc_job_gone(): a job whose session ended while it was queued fails
 * with -ECANCELED ("session ended") and does nothing.
 *
 * svc_graph_run():  a GRAPH_SUBMIT (svc/graph.c): inputs resolved and
 *                   held, the graph run, outputs made the session's
 *                   tensors, its result record finished
 * svc_graph_cancel(): its @cancel: the result record fails -ECANCELED
 * svc_mem_run():    a transfer's memory (svc/mem.c): job->mem
 */
void svc_graph_run(struct exec_job *job, const struct exec_env *env);
void svc_graph_cancel(struct exec_job *job);
void svc_mem_run(struct exec_job *job, const struct exec_env *env);

/* Whether the job's session has ended: then the job is failed with
 * -ECANCELED. Executor threads read the flag the I/O thread sets. */
static inline bool svc_job_gone(struct exec_job *job)
{
	if (!__atomic_load_n(&job->s->dead, __ATOMIC_ACQUIRE))
		return false;
	job->error = -ECANCELED;
	snprintf(job->msg, sizeof(job->msg), "session ended");
	return true;
}

/*
 * The session service (svc/session.c).
 *
 * svc_session_open(): SESSION_OPEN's and SESSION_BIND's session, for
 *              @peer (its tenant, from the kernel or a certificate, never
 *              from the request): placed on a device (svc_place(),
 *              @device 0: djinnd chooses), made with the client's @label,
 *              @priority and @lease_ns, bound to kernel session @kid (0:
 *              none) and published in @t. 0 and the session in *@out
 *              (the table's reference; the caller attaches it); else
 *              -ENODEV or -EDQUOT saying which limit in @msg, or another
 *              errno of session_create() with @msg empty.
 * svc_session_signal(): SIGNAL: @phase (0 to DJINN_PHASE_IDLE) for
 *              @expected_ns, checked and clamped (sched_signal_check())
 *              and told to the scheduler: of the session, or of its
 *              context @ctx alone (-ENOENT for no such context).
 */
struct svc_peer {
	const char *tenant;
	uid_t uid;
	pid_t pid;
	bool tcp; /* uid and pid unknown: one uid for every TCP peer */
};

int svc_session_open(struct session_table *t, struct device *devs,
		     unsigned int nr_dev, const struct svc_peer *peer,
		     uint32_t device, const char *label, uint32_t priority,
		     uint64_t lease_ns, uint64_t kid, struct session **out,
		     char *msg, size_t msglen);
int svc_session_signal(struct session *s, uint32_t phase, uint64_t expected_ns,
		       uint64_t ctx, char *msg, size_t msglen);

/*
 * GRAPH_SUBMIT's service: @payload (@len bytes, taken over) of session
 * @s as request @request_id is parsed, its client kernels and the
 * session's graphs in flight allowed, its inputs' and nodes' shapes
 * inferred and its outputs recorded for later graphs to name
 * (session_result_begin()). 0 and the job in *@out, to queue with
 * svc_submit() once the caller has set its @done; else a negative errno
 * with why in @msg, and nothing of the session changed.
 */
int svc_graph_new(struct session_table *t, struct session *s,
		  uint64_t request_id, void *payload, uint64_t len,
		  struct exec_job **out, char *msg, size_t msglen);

/*
 * The tensor service (svc/tensor.c). Each answers 0 or a negative errno
 * with why in @msg.
 *
 * svc_alloc_error(): the refusal of an allocation of @bytes for @s that
 *              failed with @err: the errno to answer (-ENOMEM for one
 *              bigger than the device), saying what the device has, or
 *              what the tenant holds of its quota
 * svc_mem_job(): a job preparing the memory of a transfer (@m, run by
 *              svc_mem_run() on the memory executor), counted in the
 *              session's mem_waits; NULL when out of memory
 * svc_module_check(): a client module's TENSOR_CREATE @r: text, u8, one
 *              dim, a tenant allowed client kernels, a backend that
 *              runs them
 * svc_module_load(): its bytes arrived as @text (@created: a new text
 *              entry): the backend loads it now, so that one that does
 *              not load is refused now and not at its first run; on
 *              failure the reference to @text is dropped and a new
 *              entry evicted
 */
int svc_alloc_error(struct session *s, int err, uint64_t bytes, char *msg,
		    size_t msglen);
struct exec_job *svc_mem_job(struct session *s, uint64_t request_id,
			     const struct exec_mem *m);
int svc_module_check(struct session_table *t, struct session *s,
		     const struct djinn_tensor_create *r, char *msg,
		     size_t msglen);
int svc_module_load(struct session *s, struct vmu_text *text,
		    const uint8_t fp[DJINN_FP_LEN], bool created, char *msg,
		    size_t msglen);

/* Queue a service's job on its session's scheduler; one of the compute
 * lane counts in flight (session_inflight_add()) until its answer. */
void svc_submit(struct exec_job *job);

/* Free a service's job: its session reference and what it owns. */
void svc_job_free(struct exec_job *job);

#endif /* DJINN_SVC_H */
