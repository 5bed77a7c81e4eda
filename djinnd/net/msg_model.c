// SPDX-License-Identifier: MIT
/*
 * The model messages (DOC: models in include/djinn/proto.h): a session's
 * models and contexts, and the steps that run them.
 *
 * The objects and the jobs' bodies are the model service's
 * (svc/model.h); here each request is decoded and checked, its job
 * submitted, and the answer made when the job is back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "graph.h"
#include "log.h"
#include "server.h"
#include "exec/executor.h"
#include "svc/admin.h"
#include "svc/model.h"
#include "svc/svc.h"
#include "model/runtime.h"
#include "net/conn.h"
#include "net/msg.h"
#include "session/tenant.h"

/* ---------------------------------------------------------------------- */
/* Jobs */

/* A job for a request, or NULL with -ENOMEM answered. */
static struct mjob *mjob_new(struct conn *c, const struct djinn_hdr *hdr)
{
	struct mjob *mj = calloc(1, sizeof(*mj));

	if (!mj)
		conn_error(c, hdr, -ENOMEM, "out of memory");
	return mj;
}

/* Queue @call for @c's request @hdr with @mj on @lane of @s's device
 * (compute: in order with its graphs, and counted with them against
 * SCHED_INFLIGHT_MAX), @done to answer. The job takes its own reference
 * on @s and owns @mj. False (answered, @mj freed) when it could not go. */
static bool submit_to(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, struct mjob *mj, enum sched_lane lane,
		      void (*call)(struct exec_job *, const struct exec_env *),
		      void (*done)(struct exec_job *, void *))
{
	char msg[DJINN_MAX_ERROR_MSG];
	struct exec_job *job;
	int ret;

	ret = svc_model_job(&c->srv->sessions, s, hdr, mj, lane, call, &job,
			    msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return false;
	}
	msg_queue(c, job, done);
	return true;
}

static void call_done(struct exec_job *job, void *arg);

static void submit(struct conn *c, const struct djinn_hdr *hdr,
		   struct session *s, struct mjob *mj, enum sched_lane lane,
		   void (*call)(struct exec_job *, const struct exec_env *))
{
	submit_to(c, hdr, s, mj, lane, call, call_done);
}

/* A model job is back on the I/O thread: its objects made (the model
 * service's), the answer. */
static void call_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct mjob *mj = job->ctx;
	struct conn *c = job->conn;
	struct session *s = job->s;
	const struct djinn_hdr *hdr = &mj->hdr;
	char msg[DJINN_MAX_ERROR_MSG];
	uint64_t handle = 0;
	int ret;

	metrics_observe(&srv->st, hdr->type, loop_now() - job->t0);
	ret = svc_mjob_finish(job, &handle, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		goto out;
	}
	switch (hdr->type) {
	case DJINN_MSG_MODEL_OPEN:
	case DJINN_MSG_MODEL_OPEN_UPLOADED: {
		const struct mobj *o = session_obj_get(s, handle, SOBJ_MODEL);
		const struct model *m = o->h->m;
		struct djinn_model_resp r = {
			.model = handle,
			.arch = m->cfg.arch, /* enum djinn_arch */
			.dtype = m->layout.dtype,
			.vocab = m->cfg.vocab,
			.n_layer = m->cfg.n_layer,
			.hidden = m->cfg.n_embd,
			.n_head = m->cfg.n_head,
			.n_kv_head = m->cfg.n_kv_head,
			.max_tokens = m->cfg.n_ctx,
			/* not the hold's text: a move under memory
			 * pressure may be changing it (store.h) */
			.bytes = model_layer_start(&m->layout, m->cfg.n_layer,
						   m->resident),
			.weights = m->layout.bytes,
			.ring = m->ring,
			.resident = m->resident,
		};

		memcpy(r.fp, m->fp, sizeof(r.fp));
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		break;
	}
	case DJINN_MSG_CTX_FORK:
	case DJINN_MSG_CTX_NEW: {
		const struct mobj *o = session_obj_get(s, handle, SOBJ_CTX);
		struct djinn_ctx_resp r = { .ctx = handle,
					    .max_tokens = o->max_tokens };

		if (hdr->type == DJINN_MSG_CTX_FORK)
			r.len = model_ctx_len(o->mc);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		break;
	}
	case DJINN_MSG_CTX_RESET:
	case DJINN_MSG_CTX_TRUNCATE:
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		break;
	default: { /* PREFILL, DECODE, RESUME */
		size_t n = mj->resp.nr_tokens * sizeof(int32_t);
		size_t len = sizeof(mj->resp) + ((n + 7) & ~(size_t)7);
		uint8_t *r = calloc(1, len);

		if (!r) {
			mjob_undo(job);
			conn_error(c, hdr, -ENOMEM, "out of memory");
			break;
		}
		memcpy(r, &mj->resp, sizeof(mj->resp));
		if (n)
			memcpy(r + sizeof(mj->resp), mj->tokens, n);
		conn_reply(c, hdr, r, len, NULL, 0, NULL, NULL);
		free(r);
		break;
	}
	}
out:
	if (srv->sessions.leases->ops->complete &&
	    (hdr->type == DJINN_MSG_CTX_PREFILL ||
	     hdr->type == DJINN_MSG_CTX_DECODE ||
	     hdr->type == DJINN_MSG_CTX_RESUME))
		srv->sessions.leases->ops->complete(srv->sessions.leases, s,
						    hdr->request_id, hdr->type,
						    ret);
	conn_put(c);
	svc_mjob_release(job);
}

/* ---------------------------------------------------------------------- */
/* Requests */

/*
 * One handler per message type; msg.c's table has checked the request's
 * size and found the session, on a device that serves models (else
 * -EOPNOTSUPP).
 */

static struct mobj *obj_get(struct conn *c, const struct djinn_hdr *hdr,
			    struct session *s, uint64_t handle,
			    enum sobj_kind kind)
{
	char msg[DJINN_MAX_ERROR_MSG];
	int err;
	struct mobj *o = mobj_get(s, handle, kind, &err, msg, sizeof(msg));

	if (!o)
		conn_error(c, hdr, err, "%s", msg);
	return o;
}

void handle_model_open(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s, void *req, uint64_t len)
{
	const struct djinn_model_open *r = req;
	struct mjob *mj;

	if (!msg_model_name_ok(c, hdr, r->name))
		return;
	mj = mjob_new(c, hdr);
	if (!mj)
		return;
	memcpy(mj->name, r->name, sizeof(mj->name));
	/* Loading reads files: the memory executor's work. */
	submit(c, hdr, s, mj, SCHED_MEM, mjob_open);
}

/* A file named twice (by handle, or by fingerprint when the handles are
 * 0), config.json included, is refused: each would be copied again. */
static int upload_dups(struct conn *c, const struct djinn_hdr *hdr,
		       const struct djinn_model_upload *r, bool by_fp)
{
	for (uint32_t i = 0; i < r->nr_files; i++) {
		for (uint32_t j = 0; j <= i; j++) {
			const struct djinn_model_file *a = &r->files[i],
						      *b = j < i ? &r->files[j] :
								   &r->config;
			char other[16] = "config.json";

			if (by_fp ? memcmp(a->fp, b->fp, DJINN_FP_LEN) :
				    a->handle != b->handle)
				continue;
			if (j < i)
				snprintf(other, sizeof(other), "file %u", j);
			if (by_fp)
				conn_error(c, hdr, -EINVAL,
					   "%s and file %u: the same "
					   "fingerprint",
					   other, i);
			else
				conn_error(c, hdr, -EINVAL,
					   "%s and file %u: the same handle "
					   "%#llx",
					   other, i,
					   (unsigned long long)a->handle);
			return -EINVAL;
		}
	}
	return 0;
}

/* Variable length: the struct (the table's minimum), then its files. */
void handle_model_open_uploaded(struct conn *c, const struct djinn_hdr *hdr,
				struct session *s, void *req, uint64_t len)
{
	const struct djinn_model_upload *r = req;
	struct mjob *mj;
	bool by_fp;

	if (r->flags & ~DJINN_MODEL_UPLOAD_ALL) {
		conn_error(c, hdr, -EINVAL, "unknown flags %#x",
			   r->flags & ~DJINN_MODEL_UPLOAD_ALL);
		return;
	}
	if ((r->flags & DJINN_MODEL_UPLOAD_INDEX) && r->nr_files == 1) {
		conn_error(c, hdr, -EINVAL,
			   "an index and no shard: 2 to %d files with "
			   "DJINN_MODEL_UPLOAD_INDEX",
			   DJINN_MODEL_MAX_FILES);
		return;
	}
	if (!r->nr_files || r->nr_files > DJINN_MODEL_MAX_FILES ||
	    len != sizeof(*r) + r->nr_files * sizeof(r->files[0])) {
		conn_error(c, hdr, -EINVAL,
			   "%u files in %llu bytes: 1 to %d files, %zu bytes "
			   "each after %zu",
			   r->nr_files, (unsigned long long)len,
			   DJINN_MODEL_MAX_FILES, sizeof(r->files[0]),
			   sizeof(*r));
		return;
	}
	by_fp = !r->config.handle;
	for (uint32_t i = 0; i < r->nr_files; i++)
		if (!r->files[i].handle != by_fp) {
			conn_error(c, hdr, -EINVAL,
				   "file %u: every handle 0 (by fingerprint) "
				   "or every handle set",
				   i);
			return;
		}
	if (upload_dups(c, hdr, r, by_fp))
		return;
	mj = calloc(1, sizeof(*mj));
	if (mj)
		mj->upload = malloc(len);
	if (!mj || !mj->upload) {
		free(mj);
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	memcpy(mj->upload, r, len);
	mj->upload_max = c->srv->cfg.upload_max;
	if (!mj->upload_max) {
		struct vmu_stats vs;

		vmu_get_stats(s->dev->vmu, &vs);
		mj->upload_max = vs.capacity;
	}
	/* Parsing and laying out the weights: the memory executor's. */
	submit(c, hdr, s, mj, SCHED_MEM, mjob_open_upload);
}

void handle_model_close(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;
	char msg[DJINN_MAX_ERROR_MSG];

	msg_answer(c, hdr, svc_model_close(s, r->handle, msg, sizeof(msg)),
		   msg);
}

void handle_ctx_new(struct conn *c, const struct djinn_hdr *hdr,
		    struct session *s, void *req, uint64_t len)
{
	const struct djinn_ctx_new *r = req;
	char msg[DJINN_MAX_ERROR_MSG] = "";
	struct djinn_ctx_resp resp = { 0 };
	struct exec_job *wait;
	uint64_t handle;
	uint32_t max;
	int ret;

	if (r->__reserved) {
		conn_error(c, hdr, -EINVAL, "reserved field set");
		return;
	}
	ret = svc_ctx_new(&c->srv->sessions, s, hdr, r->model, r->max_tokens,
			  &handle, &max, &wait, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg[0] ? msg : strerror(-ret));
		return;
	}
	if (wait) {
		msg_queue(c, wait, call_done);
		return;
	}
	resp.ctx = handle;
	resp.max_tokens = max;
	conn_reply(c, hdr, &resp, sizeof(resp), NULL, 0, NULL, NULL);
}

void handle_ctx_free(struct conn *c, const struct djinn_hdr *hdr,
		     struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;
	char msg[DJINN_MAX_ERROR_MSG];

	msg_answer(c, hdr, svc_ctx_free(s, r->handle, msg, sizeof(msg)), msg);
}

/* FORK, RESET, RESUME (with @steer): @call, a job on the graph
 * executor, in order with the steps. */
/* A job on context @handle; @arg is RESUME's hidden state (mj->steer) or
 * TRUNCATE's length (mj->max). */
static void ctx_job(struct conn *c, const struct djinn_hdr *hdr,
		    struct session *s, uint64_t handle, uint64_t arg,
		    void (*call)(struct exec_job *, const struct exec_env *))
{
	struct mobj *o = obj_get(c, hdr, s, handle, SOBJ_CTX);
	struct mjob *mj;

	if (!o)
		return;
	mj = mjob_new(c, hdr);
	if (!mj)
		return;
	mj->steer = arg;
	mj->max = (uint32_t)arg;
	mj->o = o;
	o->refs++;
	submit(c, hdr, s, mj, SCHED_COMPUTE, call);
}

void handle_ctx_fork(struct conn *c, const struct djinn_hdr *hdr,
		     struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;

	ctx_job(c, hdr, s, r->handle, 0, mjob_fork);
}

void handle_ctx_reset(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;

	ctx_job(c, hdr, s, r->handle, 0, mjob_reset);
}

void handle_ctx_truncate(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *s, void *req, uint64_t len)
{
	const struct djinn_ctx_truncate *r = req;

	if (r->__reserved) {
		conn_error(c, hdr, -EINVAL, "reserved field set");
		return;
	}
	ctx_job(c, hdr, s, r->ctx, r->len, mjob_truncate);
}

void handle_ctx_resume(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s, void *req, uint64_t len)
{
	const struct djinn_ctx_resume *r = req;

	ctx_job(c, hdr, s, r->ctx, r->hidden, mjob_step);
}

/* PREFILL and DECODE: @r, and after it a prefill's tokens, @len bytes in
 * all. */
static void ctx_step(struct conn *c, const struct djinn_hdr *hdr,
		     struct session *s, const struct djinn_ctx_step *r,
		     uint64_t len, bool prefill)
{
	uint64_t want;
	struct mobj *o;
	struct mjob *mj;

	want = sizeof(*r) +
	       (prefill ? (uint64_t)r->nr_tokens * sizeof(int32_t) : 0);
	if (r->__reserved || r->sampling.__reserved ||
	    (prefill && !msg_all_zero(&r->sampling, sizeof(r->sampling)))) {
		conn_error(c, hdr, -EINVAL, "%s",
			   prefill && !r->__reserved &&
					   !r->sampling.__reserved ?
				   "sampling set for a prefill" :
				   "reserved field set");
		return;
	}
	if (r->flags & ~DJINN_STEP_ALL) {
		conn_error(c, hdr, -EINVAL, "unknown flags %#x",
			   r->flags & ~DJINN_STEP_ALL);
		return;
	}
	if (!r->nr_tokens || len != want) {
		conn_error(c, hdr, -EINVAL,
			   r->nr_tokens ? "%u tokens need a payload of %llu "
					  "bytes, not %llu" :
					  "no tokens",
			   r->nr_tokens, (unsigned long long)want,
			   (unsigned long long)len);
		return;
	}
	if (r->nr_tokens > DJINN_MAX_STEP_TOKENS) {
		conn_error(c, hdr, -E2BIG, "%u tokens, limit %u", r->nr_tokens,
			   DJINN_MAX_STEP_TOKENS);
		return;
	}
	o = obj_get(c, hdr, s, r->ctx, SOBJ_CTX);
	if (!o)
		return;
	if (r->break_layer > o->model->h->m->cfg.n_layer) {
		conn_error(c, hdr, -EINVAL,
			   "break_layer %u: model %s has layers 0 to %u, so 1 "
			   "to %u",
			   r->break_layer, o->model->h->m->name,
			   o->model->h->m->cfg.n_layer - 1,
			   o->model->h->m->cfg.n_layer);
		return;
	}
	mj = calloc(1, sizeof(*mj));
	if (mj)
		mj->tokens = malloc(r->nr_tokens * sizeof(int32_t));
	if (!mj || !mj->tokens) {
		free(mj);
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	mj->step = *r;
	if (prefill)
		memcpy(mj->tokens, r + 1, r->nr_tokens * sizeof(int32_t));
	mj->o = o;
	o->refs++;
	submit(c, hdr, s, mj, SCHED_COMPUTE, mjob_step);
}

/* Variable length: the struct (the table's minimum), then the tokens. */
void handle_ctx_prefill(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, void *req, uint64_t len)
{
	ctx_step(c, hdr, s, req, len, true);
}

void handle_ctx_decode(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s, void *req, uint64_t len)
{
	ctx_step(c, hdr, s, req, len, false);
}

/* ---------------------------------------------------------------------- */
/* ADMIN_MODEL_LOAD (djinnctl model load): the admin service's loads
 * (svc/admin.h), answered when the last is back */

struct load_req {
	struct conn *c; /* a reference */
	struct djinn_hdr hdr;
	uint64_t t0;
};

static void load_finish(struct svc_load *l)
{
	struct load_req *lr = l->arg;
	struct conn *c = lr->c;

	metrics_observe(&c->srv->st, lr->hdr.type, loop_now() - lr->t0);
	if (l->error)
		conn_error(c, &lr->hdr, l->error, "%s", l->msg);
	else
		msg_admin_models_reply(c, &lr->hdr, l->name);
	conn_put(c);
	free(lr);
}

void handle_admin_model_load(struct conn *c, const struct djinn_hdr *hdr,
			     struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_model_load *r = req;
	struct server *srv = c->srv;
	char msg[DJINN_MAX_ERROR_MSG];
	bool set = r->flags & DJINN_LOAD_BUDGET;
	struct load_req *lr;
	struct svc_load *l;
	int ret;

	if (!msg_model_name_ok(c, hdr, r->name))
		return;
	if (r->flags & ~DJINN_LOAD_BUDGET) {
		conn_error(c, hdr, -EINVAL, "flags %#x: unknown bits %#x",
			   r->flags, r->flags & ~DJINN_LOAD_BUDGET);
		return;
	}
	if (!set && (r->budget || r->slots)) {
		conn_error(c, hdr, -EINVAL,
			   "a budget or ring slots without DJINN_LOAD_BUDGET");
		return;
	}
	if (r->slots > DJINN_RING_SLOTS_MAX || (r->slots && !r->budget)) {
		conn_error(c, hdr, -EINVAL,
			   r->slots > DJINN_RING_SLOTS_MAX ?
				   "a ring of %u slots: at most %u" :
				   "a ring of %u slots without a budget: the "
				   "ring is a model's over its budget%.0u",
			   r->slots, DJINN_RING_SLOTS_MAX);
		return;
	}
	ret = svc_model_load_check(srv->dev, srv->nr_dev, r->name, set,
				   r->budget, r->slots, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return;
	}
	lr = calloc(1, sizeof(*lr));
	l = svc_load_new(srv->nr_dev);
	if (!lr || !l) {
		free(lr);
		free(l);
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	lr->c = c;
	lr->hdr = *hdr;
	conn_get(c);
	lr->t0 = msg_defer(c);
	svc_model_load(l, &srv->sessions, srv->dev, srv->nr_dev, hdr, r->name,
		       set, r->budget, r->slots, load_finish, lr);
}
