/* SPDX-License-Identifier: MIT */
/*
 * The model service: a session's models and contexts, and the jobs that
 * load models and run their steps (the protocol's side is
 * net/msg_model.c, which decodes the requests, submits these jobs and
 * answers when they are back).
 *
 * Jobs. Loading a model runs on the memory executor (it reads files and
 * fills the text segment); steps, forks and resets run on the graph
 * executor with its stack, in order with the session's graphs. A job
 * copies what it needs from the request, so the frame's buffer is not
 * kept; results are made into the session's objects and tensors on the
 * executor (the tensor table is locked) or, for objects, back on the
 * I/O thread.
 *
 * Breakpoints. A step with break_layer pauses in the library
 * (model_ctx_run_prefill/decode): its job ends, answering PAUSED with a
 * copy of the hidden state as a new tensor of the session, and the
 * paused state waits in the context's regions while the executor runs
 * other work. CTX_RESUME is a job on the same (graph) executor: it
 * writes a steering tensor over the hidden state if one is named, and
 * runs the rest of the step. Whether a context is paused is only ever
 * looked at on that executor, in order with the session's other steps,
 * so a request pipelined behind a pausing step sees the pause (-EBUSY).
 */
#ifndef DJINN_SVC_MODEL_H
#define DJINN_SVC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <djinn/proto.h>

#include "exec/executor.h"
#include "model/runtime.h"
#include "session/session.h"

/*
 * struct mobj - a model (SOBJ_MODEL) or context (SOBJ_CTX) of a session,
 * named by a handle in its object table and reference-counted on the
 * I/O thread: the table holds one reference, every job in flight
 * another. A context holds its model. Objects go before their session:
 * the table's references when the session ends, a job's when it comes
 * back (and the job holds the session).
 */
struct vmu_fill;
struct mobj {
	enum sobj_kind kind;
	int refs; /* the I/O thread's */
	struct session *s; /* not a reference: objects go first */
	/* SOBJ_MODEL */
	struct model_hold *h;
	unsigned int ctxs;
	/* SOBJ_CTX */
	struct model_ctx *mc;
	struct mobj *model;
	uint32_t max_tokens;
	/* the graph executor's: the paused step's flags, for RESUME; a
	 * paused step lost to a crash (svc_ctx_restore()'s @pause_lost),
	 * which RESUME answers -EAGAIN until the next step */
	uint32_t pause_flags;
	bool pause_lost;
	/* CTX_FREE has taken it from the table (the I/O thread sets it,
	 * the graph executor reads it): a step still running in passes
	 * ends with -ECANCELED at its next one */
	bool freed;
	/* its own IO_WAIT (SIGNAL with the context), made at the first;
	 * ended when it leaves the table */
	struct sched_wait *wait;
	/* enum lost_why: what it held was lost before a restart
	 * (svc/state.c): no hold, no context; every use but closing
	 * answers -EIO */
	uint8_t lost;
};

/* Drop a reference; the last frees the object (a context's its model's). */
void mobj_put(struct mobj *o);
/* A context leaves its session's table: its model may be closed now
 * (steps still in flight keep the model's memory until they end). */
void mobj_ctx_unlist(struct mobj *o);
/* Context object @o holds @mc, of model @m. */
void mobj_ctx_bind(struct mobj *o, struct mobj *m, struct model_ctx *mc,
		   uint32_t max_tokens);
/* Session @s ended: its table's models and contexts go. */
void svc_model_session_ended(struct session *s);
/* SIGNAL for context @ctx of @s alone: its wait, and what the memory
 * policy does about it, are its own (0, or -ENOENT and @msg). */
int svc_ctx_signal(struct session *s, uint64_t ctx, uint32_t phase,
		   uint64_t expected_ns, char *msg, size_t msglen);

/*
 * struct mjob - one model request in flight (an exec_job's ctx)
 * @hdr:    the request's header, for the answer
 * @o:      the model or context it is about (a reference), or NULL
 * @name:   MODEL_OPEN's model
 * @hold:   MODEL_OPEN's result
 * @mc:     CTX_FORK's result, or CTX_NEW's context waiting for room
 * @max:    CTX_NEW's max tokens
 * @step:   PREFILL/DECODE's request; @tokens its tokens (in or out)
 * @steer:  RESUME's tensor handle (0: none)
 * @upload: MODEL_OPEN_UPLOADED's request (a copy)
 * @upload_max: the most bytes its files may hold in all, and all of its
 *          tenant's uploads being read at once (host memory)
 * @resp:   PREFILL/DECODE/RESUME's answer
 * @q:      PREFILL/DECODE/RESUME's request, run in passes
 *          (svc_model_pass()) once @started; @t0 when it started
 */
struct mjob {
	struct djinn_hdr hdr;
	struct mobj *o;
	char name[DJINN_MODEL_NAME_MAX];
	struct model_hold *hold;
	struct model_ctx *mc;
	uint32_t max;
	struct djinn_ctx_step step;
	int32_t *tokens;
	uint64_t steer;
	struct djinn_model_upload *upload;
	uint64_t upload_max;
	struct djinn_ctx_step_resp resp;
	struct model_req q;
	bool started;
	uint64_t t0;
	/* its body, called by mjob_run() */
	void (*call)(struct exec_job *job, const struct exec_env *env);
};

void mjob_free(struct mjob *mj);

/*
 * A context was made (new or forked) for @s: under static partitioning
 * it reserves its whole KV cache now, or is refused (-ENOMEM, why in
 * @msg; the caller frees it). With @relieve (an executor's thread, not
 * the I/O thread's) its model may first stream more of its layers to
 * make room (model_relieve()).
 */
int svc_ctx_made(struct session *s, struct model_ctx *c, bool relieve,
		 char *msg, size_t msglen);

/*
 * The jobs' bodies (an mjob's @call), on an executor's thread; each
 * sets job->error and job->msg:
 *   mjob_open        MODEL_OPEN: the model held (@hold), loaded if need be
 *   mjob_open_upload MODEL_OPEN_UPLOADED: the client's files, read from
 *                    its tensors, checked and loaded
 *   mjob_ctx_room    CTX_NEW's reservation, after streaming more of the
 *                    model's layers if that makes room
 *   mjob_fork        CTX_FORK: a copy of the context (@mc)
 *   mjob_reset       CTX_RESET
 *   mjob_truncate    CTX_TRUNCATE
 *   mjob_step        CTX_PREFILL / CTX_DECODE / CTX_RESUME (the paused
 *                    step, steered, run to its end), alone: its answer
 *                    in @resp and @tokens
 * mjob_run() is an exec_job's @run: the mjob's @call, unless its session
 * has ended meanwhile.
 *
 * Steps in passes. PREFILL, DECODE and RESUME jobs join passes (an
 * exec_job's @run_pass, svc_model_pass()): the scheduler gives one
 * executor thread the ready steps of every session on the same model,
 * and one model_pass() runs the next step of each (a chunk of a prompt,
 * one token of a decode, a resumed step). A job whose request is not
 * done goes back to the scheduler for its next step (@again) instead of
 * holding the thread; its answer comes when its request ends. A job
 * whose session ended, or whose context was freed, ends at its next
 * pass with -ECANCELED; the others of the pass go on.
 */
void mjob_open(struct exec_job *job, const struct exec_env *env);
void mjob_open_upload(struct exec_job *job, const struct exec_env *env);
void mjob_ctx_room(struct exec_job *job, const struct exec_env *env);
void mjob_fork(struct exec_job *job, const struct exec_env *env);
void mjob_reset(struct exec_job *job, const struct exec_env *env);
void mjob_truncate(struct exec_job *job, const struct exec_env *env);
void mjob_step(struct exec_job *job, const struct exec_env *env);
void mjob_run(struct exec_job *job, const struct exec_env *env);
void svc_model_pass(struct exec_job **jobs, unsigned int n,
		    const struct exec_env *env);
void mjob_cancel(struct exec_job *job);

/*
 * The service's operations, on the I/O thread. Each answers 0, or a
 * negative errno with why in @msg and nothing changed.
 *
 * mobj_add():        a new object of @kind in @s's table (-EDQUOT past
 *                    SESSION_MAX_OBJS, -ENOMEM)
 * mobj_get():        the object @handle of @kind, or NULL with -ENOENT
 *                    or -EIO (a lost object: only closing takes it)
 *                    in *@err and why in @msg
 * svc_model_close(): MODEL_CLOSE (-ENOENT; -EBUSY while it has contexts)
 * svc_ctx_free():    CTX_FREE (-ENOENT); steps in flight keep it
 * svc_model_job():   a job of request @hdr running @call with @mj on
 *                    @lane of @s's device, in *@out to queue with
 *                    svc_submit() once its @done is set; on the compute
 *                    lane, and MODEL_OPEN_UPLOADED's load, counted
 *                    against the session's and tenant's requests in
 *                    flight (session_inflight_check()). On failure @mj
 *                    is freed (its object put).
 * svc_ctx_new():     CTX_NEW of @model: the context made (*@handle, and
 *                    *@max its tokens), or, when its cache does not fit
 *                    under static partitioning, a job in *@wait that
 *                    makes room on the memory executor and is answered
 *                    as any model job
 * svc_mjob_finish(): a model job back: 0, with the handle of the object
 *                    MODEL_OPEN, CTX_FORK or CTX_NEW made in *@handle;
 *                    or the job's error, what it made undone
 * mjob_undo():       what a job made goes (a failed answer)
 * svc_mjob_release(): the job and its mjob freed, its object put, its
 *                    in-flight count taken back
 */
int mobj_add(struct session *s, enum sobj_kind kind, struct mobj **out,
	     uint64_t *handle, char *msg, size_t msglen);

/*
 * A restart (svc/state.c), on the I/O thread while nothing runs:
 * svc_model_restore() opens model @name again (loading it from the
 * model directory: the caller blocks; an upload is made again from
 * @kept instead, NULL for a served model) into restored object slot
 * @slot; its weights must have fingerprint @fp still (-ESTALE
 * otherwise: its contexts' caches were made by other weights).
 * svc_ctx_restore() makes context slot @slot of the model in
 * @model_slot, as model_ctx_restore() says; with @pause_lost, a step of
 * it was paused at a breakpoint when djinnd crashed, and the context
 * is as it was before that step (a crash journal's record: RESUME says
 * so). svc_obj_restore_lost()
 * makes slot @slot an object of @kind that was lost (struct mobj's
 * @lost: @why, enum lost_why). 0, or a negative errno with why in @msg.
 */
int svc_obj_restore_lost(struct session *s, uint32_t slot, enum sobj_kind kind,
			 uint8_t why, char *msg, size_t msglen);
/* Whether restored slot @slot holds a lost object of @kind. */
bool svc_obj_is_lost(struct session *s, uint32_t slot, enum sobj_kind kind);
int svc_model_restore(struct session *s, uint32_t slot, const char *name,
		      const uint8_t fp[32], const struct model_kept *kept,
		      char *msg, size_t msglen);
/* Context slot @slot's paused step, as model_ctx_pause_set() says, and
 * its request's @flags (for RESUME). */
int svc_ctx_pause_restore(struct session *s, uint32_t slot,
			  const struct model_ctx_pause *p,
			  const struct vmu_fill *hidden,
			  const struct vmu_fill *kv, uint32_t flags, char *msg,
			  size_t msglen);
int svc_ctx_restore(struct session *s, uint32_t slot, uint32_t model_slot,
		    uint32_t max, uint32_t len, const struct vmu_fill *kv,
		    uint64_t kv_bytes, const float *logits,
		    uint64_t logits_bytes, bool pause_lost, char *msg,
		    size_t msglen);
struct mobj *mobj_get(struct session *s, uint64_t handle, enum sobj_kind kind,
		      int *err, char *msg, size_t msglen);
int svc_model_close(struct session *s, uint64_t handle, char *msg,
		    size_t msglen);
int svc_ctx_free(struct session *s, uint64_t handle, char *msg, size_t msglen);
int svc_model_job(struct session_table *t, struct session *s,
		  const struct djinn_hdr *hdr, struct mjob *mj,
		  enum sched_lane lane,
		  void (*call)(struct exec_job *, const struct exec_env *),
		  struct exec_job **out, char *msg, size_t msglen);
int svc_ctx_new(struct session_table *t, struct session *s,
		const struct djinn_hdr *hdr, uint64_t model,
		uint32_t max_tokens, uint64_t *handle, uint32_t *max,
		struct exec_job **wait, char *msg, size_t msglen);
int svc_mjob_finish(struct exec_job *job, uint64_t *handle, char *msg,
		    size_t msglen);
void mjob_undo(struct exec_job *job);
void svc_mjob_release(struct exec_job *job);

#endif /* DJINN_SVC_MODEL_H */
