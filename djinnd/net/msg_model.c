// SPDX-License-Identifier: MIT
/*
 * The model messages (DOC: models in include/djinn/proto.h): a session's
 * models and contexts, and the steps that run them.
 *
 * Objects. A model or context is a struct mobj, named by a handle in the
 * session's object table and reference-counted on the I/O thread: the
 * table holds one reference, every job in flight another. A context
 * holds its model. Objects go before their session: the table's
 * references when the session ends, a job's when it comes back (and the
 * job holds the session).
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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "graph.h"
#include "log.h"
#include "server.h"
#include "exec/executor.h"
#include "svc/svc.h"
#include "model/runtime.h"
#include "net/conn.h"
#include "net/msg.h"
#include "session/tenant.h"

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
	/* the graph executor's: the paused step's flags, for RESUME */
	uint32_t pause_flags;
};

static void mobj_put(struct mobj *o)
{
	if (--o->refs)
		return;
	if (o->kind == SOBJ_CTX) {
		model_ctx_free(o->mc);
		mobj_put(o->model);
	} else {
		model_close(o->h);
	}
	free(o);
}

/* A context leaves its session's table: its model may be closed now
 * (steps still in flight keep the model's memory until they end). */
static void ctx_unlist(struct mobj *o)
{
	if (o->kind == SOBJ_CTX)
		o->model->ctxs--;
}

static void drain_one(enum sobj_kind kind, void *p, void *arg)
{
	ctx_unlist(p);
	mobj_put(p);
}

void msg_model_session_ended(struct session *s)
{
	session_obj_drain(s, drain_one, NULL);
}

/* A new object of @kind in @s's table, its handle in *@handle; or NULL
 * with the error answered. */
static struct mobj *mobj_add(struct conn *c, const struct djinn_hdr *hdr,
			     struct session *s, enum sobj_kind kind,
			     uint64_t *handle)
{
	struct mobj *o = calloc(1, sizeof(*o));
	int ret = o ? session_obj_add(s, kind, o, handle) : -ENOMEM;

	if (ret) {
		free(o);
		conn_error(c, hdr, ret, "%s",
			   ret == -EDQUOT ? "too many models and contexts in "
					    "the session" :
					    "out of memory");
		return NULL;
	}
	o->kind = kind;
	o->refs = 1;
	o->s = s;
	return o;
}

/* Context object @o holds @mc, of model @m. */
static void ctx_bind(struct mobj *o, struct mobj *m, struct model_ctx *mc,
		     uint32_t max_tokens)
{
	o->mc = mc;
	o->max_tokens = max_tokens;
	o->model = m;
	m->refs++;
	m->ctxs++;
}

/* ---------------------------------------------------------------------- */
/* Jobs */

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
 * @upload_max: the most bytes its files may hold in all
 * @resp:   PREFILL/DECODE/RESUME's answer
 */
struct admin_load;

struct mjob {
	struct djinn_hdr hdr;
	struct admin_load *load; /* ADMIN_MODEL_LOAD's, on one device */
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
	/* its body, called by run_call() */
	void (*call)(struct exec_job *job, const struct exec_env *env);
};

static void mjob_free(struct mjob *mj)
{
	free(mj->upload);
	free(mj->tokens);
	free(mj);
}

/* A job for a request, or NULL with -ENOMEM answered. */
static struct mjob *mjob_new(struct conn *c, const struct djinn_hdr *hdr)
{
	struct mjob *mj = calloc(1, sizeof(*mj));

	if (!mj)
		conn_error(c, hdr, -ENOMEM, "out of memory");
	return mj;
}

/* A context was made (new or forked) for @s: under static partitioning
 * it reserves its whole KV cache now, or is refused (-ENOMEM, why in
 * @msg; the caller frees it). With @relieve (an executor's thread, not
 * the I/O thread's) its model may first stream more of its layers to
 * make room (model_relieve()). */
static int ctx_made(struct session *s, struct model_ctx *c, bool relieve,
		    char *msg, size_t msglen)
{
	if (!sched_reserves(s->dev->sched))
		return 0;
	return model_ctx_reserve(c, relieve, msg, msglen);
}

static struct model_env env_of(const struct exec_env *e)
{
	return (struct model_env){ .v = e->v, .st = e->st, .b = e->b };
}

static void run_open(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error = model_open(job->s->dev->models, job->s->vs, mj->name,
				&mj->hold, job->msg, sizeof(job->msg));
}

/* Copy the text tensor @handle, which must be a U8 vector of SHA-256
 * @fp of at most @max bytes, into a new host buffer. */
static int fetch(struct exec_job *job, const struct exec_env *env,
		 const char *what, const struct djinn_model_file *mf,
		 uint64_t max, void **buf, size_t *len)
{
	struct vmu_provider *p = env->b->provider;
	unsigned long long h = (unsigned long long)mf->handle;
	struct tensor t;
	uint32_t slot;
	int ret;

	ret = session_tensor_hold(job->s, mf->handle, &t, &slot);
	if (ret) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: no tensor with handle %#llx", what, h);
		return ret;
	}
	if (!t.text || t.desc.dtype != DJINN_DTYPE_U8 || t.desc.ndim != 1) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: tensor %#llx is not a text tensor of U8 in one "
			 "dim",
			 what, h);
		ret = -EINVAL;
	} else if (memcmp(vmu_text_fp(t.text), mf->fp, DJINN_FP_LEN)) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: tensor %#llx has another fingerprint than the "
			 "request's",
			 what, h);
		ret = -EINVAL;
	} else if (t.bytes > max) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: %llu bytes, the limit is %llu", what,
			 (unsigned long long)t.bytes, (unsigned long long)max);
		ret = -E2BIG;
	} else if (!(*buf = malloc(t.bytes ? t.bytes : 1))) {
		ret = -ENOMEM;
	} else {
		*len = t.bytes;
		ret = p->ops->copy_dtoh(p, *buf, vmu_text_addr(t.text),
					t.bytes);
		if (ret)
			snprintf(job->msg, sizeof(job->msg),
				 "%s: reading tensor %#llx: %s", what, h,
				 strerror(-ret));
	}
	session_tensor_unhold(job->s, slot);
	return ret;
}

/* The sources' fingerprint: SHA-256 over the files' SHA-256s (the
 * index's among them), then the flags when they are not 0. */
static int upload_src(const struct djinn_model_upload *r,
		      uint8_t src[DJINN_FP_LEN])
{
	const uint8_t flags[4] = { r->flags, r->flags >> 8, r->flags >> 16,
				   r->flags >> 24 };
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok;

	if (!md)
		return -ENOMEM;
	ok = EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(md, r->config.fp, DJINN_FP_LEN);
	for (uint32_t i = 0; ok && i < r->nr_files; i++)
		ok = EVP_DigestUpdate(md, r->files[i].fp, DJINN_FP_LEN);
	if (r->flags)
		ok = ok && EVP_DigestUpdate(md, flags, sizeof(flags));
	ok = ok && EVP_DigestFinal_ex(md, src, NULL);
	EVP_MD_CTX_free(md);
	return ok ? 0 : -EIO;
}

/* The bytes the upload's tensors hold in all; a handle that holds no
 * tensor counts 0 (fetch() says so). */
static uint64_t upload_bytes(struct exec_job *job,
			     const struct djinn_model_upload *r)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i <= r->nr_files; i++) {
		const struct djinn_model_file *mf =
			i < r->nr_files ? &r->files[i] : &r->config;
		struct tensor t;
		uint32_t slot;

		if (session_tensor_hold(job->s, mf->handle, &t, &slot))
			continue;
		sum += t.bytes;
		session_tensor_unhold(job->s, slot);
	}
	return sum;
}

static void run_open_upload(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	const struct djinn_model_upload *r = mj->upload;
	uint32_t n = r->nr_files;
	struct model_upload up = { .nr_files = n };
	void **bufs = calloc(n + 1, sizeof(*bufs));
	size_t *lens = calloc(n + 1, sizeof(*lens));
	int ret = -ENOMEM;

	if (!bufs || !lens)
		goto out;
	ret = upload_src(r, up.src);
	if (ret)
		goto out;
	if (r->config.handle) {
		bool index = r->flags & DJINN_MODEL_UPLOAD_INDEX;
		uint64_t total = upload_bytes(job, r);

		/* Every file is copied to the host: bounded before any is. */
		if (total > mj->upload_max) {
			snprintf(job->msg, sizeof(job->msg),
				 "%u files and config.json hold %llu bytes, "
				 "over the limit of %llu (memory.upload_max)",
				 n, (unsigned long long)total,
				 (unsigned long long)mj->upload_max);
			ret = -E2BIG;
			goto out;
		}
		ret = fetch(job, env, "config.json", &r->config,
			    MODEL_MAX_CONFIG, &bufs[n], &lens[n]);
		for (uint32_t i = 0; i < n && !ret; i++) {
			char what[32] = "model.safetensors.index.json";
			uint64_t max = DJINN_MODEL_CONFIG_MAX;

			if (!index || i) {
				snprintf(what, sizeof(what), "file %u", i);
				max = SIZE_MAX;
			}
			ret = fetch(job, env, what, &r->files[i], max, &bufs[i],
				    &lens[i]);
		}
		if (ret)
			goto out;
		up.config = bufs[n];
		up.config_len = lens[n];
		up.files = (const void *const *)bufs;
		up.lens = lens;
		if (index) {
			/* files[0] is the index, the shards follow */
			up.index = bufs[0];
			up.index_len = lens[0];
			up.files++;
			up.lens++;
			up.nr_files--;
		}
	}
	ret = model_open_uploaded(job->s->dev->models, job->s->vs, &up,
				  &mj->hold, job->msg, sizeof(job->msg));
out:
	for (uint32_t i = 0; bufs && i <= n; i++)
		free(bufs[i]);
	free(bufs);
	free(lens);
	job->error = ret;
}

/* CTX_NEW's cache did not fit: the model may stream more of its layers */
static void run_ctx_room(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error = ctx_made(job->s, mj->mc, true, job->msg, sizeof(job->msg));
}

static void run_fork(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	struct model_env me = env_of(env);

	job->error = model_ctx_fork(mj->o->mc, &me, &mj->mc, job->msg,
				    sizeof(job->msg));
	if (!job->error) {
		job->error = ctx_made(job->s, mj->mc, true, job->msg,
				      sizeof(job->msg));
		if (job->error) {
			model_ctx_free(mj->mc);
			mj->mc = NULL;
		}
	}
}

static void run_reset(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error = model_ctx_reset(mj->o->mc);
	if (job->error)
		snprintf(job->msg, sizeof(job->msg), "reset: %s",
			 strerror(-job->error));
}

/* The last logits as a tensor (1, vocab) f32 of the session. */
static int logits_tensor(struct exec_job *job, struct mobj *o, uint64_t *handle)
{
	struct model_ctx *mc = o->mc;
	uint32_t vocab = o->model->h->m->cfg.vocab;
	const float *l = model_ctx_logits(mc);
	struct vmu_session *vs = job->s->vs;
	struct tensor t = {
		.desc = { .dtype = DJINN_DTYPE_F32,
			  .ndim = 2,
			  .dims = { 1, vocab } },
		.bytes = (uint64_t)vocab * sizeof(float),
	};
	int ret;

	if (!l)
		return -EINVAL;
	ret = vmu_region_create(vs, t.bytes, &t.region);
	if (ret)
		return ret;
	ret = vmu_region_resize(vs, t.region, t.bytes, NULL);
	if (!ret)
		ret = vmu_region_write(vs, t.region, 0, l, t.bytes);
	if (!ret)
		ret = session_tensor_add(job->s, &t, handle);
	if (ret)
		vmu_region_destroy(vs, t.region);
	return ret;
}

/* A new tensor of the session: a copy of the paused hidden state. */
static int hidden_tensor(struct exec_job *job, const struct model_env *me,
			 struct model_ctx *mc, uint64_t *handle)
{
	struct model_pause_info pi;
	struct tensor t = { 0 };
	int ret;

	model_ctx_paused(mc, &pi);
	t.desc = pi.desc;
	t.bytes = pi.desc.dims[0] * pi.desc.dims[1] *
		  djinn_dtype_size(pi.desc.dtype);
	ret = model_ctx_hidden_copy(mc, me, &t.region, job->msg,
				    sizeof(job->msg));
	if (ret)
		return ret;
	ret = session_tensor_add(job->s, &t, handle);
	if (ret) {
		vmu_region_destroy(job->s->vs, t.region);
		snprintf(job->msg, sizeof(job->msg),
			 "no handle for the hidden state: %s", strerror(-ret));
	}
	return ret;
}

/* A step, or a resumed one, has returned @ret with @r: the answer. */
static int step_answer(struct exec_job *job, const struct model_env *me,
		       struct mobj *o, const struct model_run *r, int ret,
		       uint64_t t0)
{
	struct mjob *mj = job->ctx;
	uint64_t h = 0;

	mj->resp.nr_tokens = r->nr_out;
	if (!ret && r->paused) {
		/* the context stays paused even if the copy fails */
		ret = hidden_tensor(job, me, o->mc, &h);
		mj->resp.hidden = h;
		mj->resp.state = DJINN_CTX_PAUSED;
		mj->resp.layer = r->layer;
	} else if (!ret && (o->pause_flags & DJINN_STEP_LOGITS)) {
		ret = logits_tensor(job, o, &h);
		mj->resp.logits = h;
		if (ret)
			snprintf(job->msg, sizeof(job->msg),
				 "no memory for the logits: %s",
				 strerror(-ret));
	}
	mj->resp.len = model_ctx_len(o->mc);
	mj->resp.run_ns = loop_now() - t0;
	return ret;
}

static void run_step(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	struct model_ctx *mc = mj->o->mc;
	struct model_env me = env_of(env);
	const struct djinn_sampling *sp = &mj->step.sampling;
	struct model_run r = { .brk = mj->step.break_layer, .out = mj->tokens };
	uint64_t t0 = loop_now();
	int ret;

	if (mj->hdr.type == DJINN_MSG_CTX_PREFILL) {
		r.out = NULL;
		ret = model_ctx_run_prefill(mc, &me, mj->tokens,
					    mj->step.nr_tokens, &r, job->msg,
					    sizeof(job->msg));
	} else {
		struct model_sampling ms = {
			.temperature = sp->temperature,
			.top_k = sp->top_k,
			.top_p = sp->top_p == 0 ? 1.0f : sp->top_p,
			.seed = sp->seed,
		};

		ret = model_ctx_run_decode(mc, &me, mj->step.nr_tokens, &ms, &r,
					   job->msg, sizeof(job->msg));
	}
	if (!ret)
		mj->o->pause_flags = mj->step.flags;
	job->error = step_answer(job, &me, mj->o, &r, ret, t0);
}

/* Write the tensor @handle over the paused hidden state of @mc. */
static int steer(struct exec_job *job, const struct model_env *me,
		 struct model_ctx *mc, uint64_t handle)
{
	struct vmu_session *vs = job->s->vs;
	struct vmu_region_info info;
	struct tensor t;
	uint64_t addr;
	uint32_t slot;
	int ret;

	ret = session_tensor_hold(job->s, handle, &t, &slot);
	if (ret) {
		snprintf(job->msg, sizeof(job->msg),
			 "no tensor with handle %#llx",
			 (unsigned long long)handle);
		return ret;
	}
	if (t.text) {
		addr = vmu_text_addr(t.text);
	} else {
		ret = vmu_region_pin(vs, t.region, NULL, &info);
		if (ret) {
			snprintf(job->msg, sizeof(job->msg),
				 "tensor %#llx: cannot make resident",
				 (unsigned long long)handle);
			goto out;
		}
		addr = info.addr;
	}
	ret = model_ctx_steer(mc, me, addr, &t.desc, job->msg,
			      sizeof(job->msg));
	if (!t.text)
		vmu_region_unpin(vs, t.region);
out:
	session_tensor_unhold(job->s, slot);
	return ret;
}

static void run_resume(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	struct model_ctx *mc = mj->o->mc;
	struct model_env me = env_of(env);
	struct model_pause_info pi;
	struct model_run r = { 0 };
	uint64_t t0 = loop_now();
	int ret;

	if (!model_ctx_paused(mc, &pi)) {
		snprintf(job->msg, sizeof(job->msg),
			 "the context is not paused");
		job->error = -EBUSY;
		return;
	}
	if (pi.decode) {
		mj->tokens = malloc(pi.want * sizeof(int32_t));
		if (!mj->tokens) {
			job->error = -ENOMEM;
			return;
		}
		r.out = mj->tokens;
	}
	ret = mj->steer ? steer(job, &me, mc, mj->steer) : 0;
	if (ret) { /* still paused, as it was */
		job->error = ret;
		return;
	}
	ret = model_ctx_resume(mc, &me, &r, job->msg, sizeof(job->msg));
	job->error = step_answer(job, &me, mj->o, &r, ret, t0);
}

static void call_done(struct exec_job *job, void *arg);

/* Queue @call for @c's request @hdr with @mj on @lane of @s's device
 * (compute: in order with its graphs, and counted with them against
 * SCHED_INFLIGHT_MAX); answered by call_done(). The job takes its own
 * reference on @s and owns @mj, which is freed here if it cannot go. */
/* Queue @call on @s's @lane, @done to answer; false (answered, @mj
 * freed) when it could not be. */
/* A model job's body, unless its session has ended meanwhile. */
static void run_call(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	if (!svc_job_gone(job))
		mj->call(job, env);
}

static bool submit_to(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, struct mjob *mj, enum sched_lane lane,
		      void (*call)(struct exec_job *, const struct exec_env *),
		      void (*done)(struct exec_job *, void *))
{
	struct exec_job *job = NULL;

	if (lane != SCHED_COMPUTE || !msg_inflight_full(c, hdr, s)) {
		job = calloc(1, sizeof(*job));
		if (!job)
			conn_error(c, hdr, -ENOMEM, "out of memory");
	}
	if (!job) {
		if (mj->o)
			mobj_put(mj->o);
		mjob_free(mj);
		return false;
	}
	mj->hdr = *hdr;
	mj->call = call;
	job->lane = lane;
	job->run = run_call;
	job->ctx = mj;
	job->s = s;
	job->se = &s->se;
	session_ref(s);
	job->request_id = hdr->request_id;
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->t0 = msg_defer(c);
	job->done = done;
	job->done_arg = c->srv;
	if (lane == SCHED_COMPUTE)
		msg_inflight_add(s);
	sched_submit(s->dev->sched, job);
	return true;
}

static void call_done(struct exec_job *job, void *arg);

static void submit(struct conn *c, const struct djinn_hdr *hdr,
		   struct session *s, struct mjob *mj, enum sched_lane lane,
		   void (*call)(struct exec_job *, const struct exec_env *))
{
	submit_to(c, hdr, s, mj, lane, call, call_done);
}

/* A model job is back on the I/O thread: make its objects, answer. */
static void call_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct mjob *mj = job->ctx;
	struct conn *c = job->conn;
	struct session *s = job->s;
	const struct djinn_hdr *hdr = &mj->hdr;
	struct mobj *o = NULL;
	uint64_t handle;
	int ret = job->error;

	metrics_observe(&srv->st, hdr->type, loop_now() - job->t0);
	if (hdr->type == DJINN_MSG_CTX_NEW)
		mj->o->ctxs--; /* its wait's count; ctx_bind() counts it */
	if (!ret && s->dead)
		ret = -ECANCELED;
	/* a device fault while it ran: what it made is lost */
	if (!ret)
		ret = session_lost(srv, s, job->msg, sizeof(job->msg));
	if (ret) {
		/* What the job made goes with it. */
		if (mj->hold)
			model_close(mj->hold);
		model_ctx_free(mj->mc);
		if (mj->resp.logits)
			session_tensor_release(s, mj->resp.logits);
		if (mj->resp.hidden)
			session_tensor_release(s, mj->resp.hidden);
		conn_error(c, hdr, ret, "%s",
			   job->msg[0]	     ? job->msg :
			   ret == -ECANCELED ? "session ended" :
					       strerror(-ret));
		goto out;
	}
	switch (hdr->type) {
	case DJINN_MSG_MODEL_OPEN:
	case DJINN_MSG_MODEL_OPEN_UPLOADED: {
		const struct model *m = mj->hold->m;
		struct djinn_model_resp r = {
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
		o = mobj_add(c, hdr, s, SOBJ_MODEL, &handle);
		if (!o) {
			model_close(mj->hold);
			break;
		}
		o->h = mj->hold;
		r.model = handle;
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		break;
	}
	case DJINN_MSG_CTX_FORK: {
		struct djinn_ctx_resp r = { .len = model_ctx_len(mj->mc),
					    .max_tokens = mj->o->max_tokens };

		o = mobj_add(c, hdr, s, SOBJ_CTX, &handle);
		if (!o) {
			model_ctx_free(mj->mc);
			break;
		}
		ctx_bind(o, mj->o->model, mj->mc, mj->o->max_tokens);
		r.ctx = handle;
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		break;
	}
	case DJINN_MSG_CTX_NEW: {
		struct djinn_ctx_resp r = { 0 };

		o = mobj_add(c, hdr, s, SOBJ_CTX, &handle);
		if (!o) {
			model_ctx_free(mj->mc);
			break;
		}
		ctx_bind(o, mj->o, mj->mc, mj->max);
		r.ctx = handle;
		r.max_tokens = o->max_tokens;
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		break;
	}
	case DJINN_MSG_CTX_RESET:
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		break;
	default: { /* PREFILL, DECODE, RESUME */
		size_t n = mj->resp.nr_tokens * sizeof(int32_t);
		size_t len = sizeof(mj->resp) + ((n + 7) & ~(size_t)7);
		uint8_t *r = calloc(1, len);

		if (!r) {
			if (mj->resp.logits)
				session_tensor_release(s, mj->resp.logits);
			if (mj->resp.hidden)
				session_tensor_release(s, mj->resp.hidden);
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
	if (srv->leases->ops->complete && (hdr->type == DJINN_MSG_CTX_PREFILL ||
					   hdr->type == DJINN_MSG_CTX_DECODE ||
					   hdr->type == DJINN_MSG_CTX_RESUME))
		srv->leases->ops->complete(srv->leases, s, hdr->request_id,
					   hdr->type, ret);
	if (mj->o)
		mobj_put(mj->o);
	mjob_free(mj);
	job->ctx = NULL;
	if (job->lane == SCHED_COMPUTE)
		msg_inflight_sub(s);
	conn_put(c);
	svc_job_free(job);
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
	struct mobj *o = session_obj_get(s, handle, kind);

	if (!o)
		conn_error(c, hdr, -ENOENT, "no %s with handle %#llx",
			   kind == SOBJ_MODEL ? "model" : "context",
			   (unsigned long long)handle);
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
	submit(c, hdr, s, mj, SCHED_MEM, run_open);
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
	submit(c, hdr, s, mj, SCHED_MEM, run_open_upload);
}

void handle_model_close(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;
	struct mobj *o = obj_get(c, hdr, s, r->handle, SOBJ_MODEL);

	if (o && o->ctxs) {
		conn_error(c, hdr, -EBUSY, "model has %u contexts", o->ctxs);
	} else if (o) {
		session_obj_del(s, r->handle, SOBJ_MODEL);
		mobj_put(o);
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
	}
}

void handle_ctx_new(struct conn *c, const struct djinn_hdr *hdr,
		    struct session *s, void *req, uint64_t len)
{
	const struct djinn_ctx_new *r = req;
	char msg[DJINN_MAX_ERROR_MSG] = "";
	struct djinn_ctx_resp resp = { 0 };
	struct model_ctx *mc;
	struct mobj *m, *o;
	uint64_t handle;
	uint32_t max;
	int ret;

	if (r->__reserved) {
		conn_error(c, hdr, -EINVAL, "reserved field set");
		return;
	}
	m = obj_get(c, hdr, s, r->model, SOBJ_MODEL);
	if (!m)
		return;
	/* Only reserves the cache's address space: cheap, here. */
	max = r->max_tokens ? r->max_tokens : m->h->m->cfg.n_ctx;
	ret = model_ctx_new(m->h, max, &mc, msg, sizeof(msg));
	if (!ret) {
		ret = ctx_made(s, mc, false, msg, sizeof(msg));
		if (ret == -ENOMEM) {
			/* no room for its cache: moving the model's weights
			 * may make some, the memory executor's work */
			struct mjob *mj = mjob_new(c, hdr);

			if (!mj) {
				model_ctx_free(mc);
				return;
			}
			/* counted as the model's while it waits, so that
			 * MODEL_CLOSE is -EBUSY meanwhile (call_done()) */
			mj->o = m;
			m->refs++;
			m->ctxs++;
			mj->mc = mc;
			mj->max = max;
			if (!submit_to(c, hdr, s, mj, SCHED_MEM, run_ctx_room,
				       call_done)) {
				m->ctxs--;
				model_ctx_free(mc);
			}
			return;
		}
		if (ret)
			model_ctx_free(mc);
	}
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg[0] ? msg : strerror(-ret));
		return;
	}
	o = mobj_add(c, hdr, s, SOBJ_CTX, &handle);
	if (!o) {
		model_ctx_free(mc);
		return;
	}
	ctx_bind(o, m, mc, max);
	resp.ctx = handle;
	resp.max_tokens = o->max_tokens;
	conn_reply(c, hdr, &resp, sizeof(resp), NULL, 0, NULL, NULL);
}

void handle_ctx_free(struct conn *c, const struct djinn_hdr *hdr,
		     struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;
	struct mobj *o = session_obj_del(s, r->handle, SOBJ_CTX);

	if (!o) {
		conn_error(c, hdr, -ENOENT, "no context with handle %#llx",
			   (unsigned long long)r->handle);
		return;
	}
	ctx_unlist(o);
	mobj_put(o); /* steps in flight keep it until they end */
	conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* FORK, RESET, RESUME (with @steer): @call, a job on the graph
 * executor, in order with the steps. */
static void ctx_job(struct conn *c, const struct djinn_hdr *hdr,
		    struct session *s, uint64_t handle, uint64_t steer,
		    void (*call)(struct exec_job *, const struct exec_env *))
{
	struct mobj *o = obj_get(c, hdr, s, handle, SOBJ_CTX);
	struct mjob *mj;

	if (!o)
		return;
	mj = mjob_new(c, hdr);
	if (!mj)
		return;
	mj->steer = steer;
	mj->o = o;
	o->refs++;
	submit(c, hdr, s, mj, SCHED_COMPUTE, call);
}

void handle_ctx_fork(struct conn *c, const struct djinn_hdr *hdr,
		     struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;

	ctx_job(c, hdr, s, r->handle, 0, run_fork);
}

void handle_ctx_reset(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, void *req, uint64_t len)
{
	const struct djinn_handle_req *r = req;

	ctx_job(c, hdr, s, r->handle, 0, run_reset);
}

void handle_ctx_resume(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s, void *req, uint64_t len)
{
	const struct djinn_ctx_resume *r = req;

	ctx_job(c, hdr, s, r->ctx, r->hidden, run_resume);
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
	submit(c, hdr, s, mj, SCHED_COMPUTE, run_step);
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
/* ADMIN_MODEL_LOAD (djinnctl model load) */

/*
 * struct admin_load - one request's loads, a job per device
 * @c, @hdr:      the admin connection (a reference) and the request
 * @pending:      jobs not back yet
 * @error, @msg:  the first failure
 * @answered:     that failure was answered already
 * @set:          it set a budget; @was the budget each device had
 */
struct admin_load {
	struct conn *c;
	struct djinn_hdr hdr;
	unsigned int pending;
	int error;
	char msg[DJINN_MAX_ERROR_MSG];
	bool answered, set;
	char name[DJINN_MODEL_NAME_MAX];
	struct {
		uint64_t bytes;
		unsigned int slots;
	} was[]; /* one per device */
};

/* The last job back answers: the model's entries, or the first error
 * with the budget as it was. */
static void load_finish(struct server *srv, struct admin_load *al)
{
	if (al->error) {
		/* the budget as it was, and no copy placed under the new one
		 * (a device that loaded it while another failed) left */
		for (unsigned int d = 0; al->set && d < srv->nr_dev; d++)
			if (srv->dev[d].models) {
				model_store_set_budget(srv->dev[d].models,
						       al->name,
						       al->was[d].bytes,
						       al->was[d].slots, NULL,
						       0);
				model_store_drop_stale(srv->dev[d].models,
						       al->name);
			}
		if (!al->answered)
			conn_error(al->c, &al->hdr, al->error, "%s", al->msg);
	} else {
		msg_admin_models_reply(al->c, &al->hdr, al->name);
	}
	conn_put(al->c);
	free(al);
}

static void load_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct mjob *mj = job->ctx;
	struct admin_load *al = mj->load;
	struct session *s = job->s;
	int ret = job->error;

	if (!ret && s->dead)
		ret = -ECANCELED;
	if (mj->hold)
		model_close(mj->hold); /* loaded: it stays, unheld */
	if (ret && !al->error) {
		char why[DJINN_MAX_ERROR_MSG - 32];

		snprintf(why, sizeof(why), "%.*s", (int)sizeof(why) - 1,
			 job->msg[0] ? job->msg : strerror(-ret));
		al->error = ret;
		if (srv->nr_dev > 1)
			snprintf(al->msg, sizeof(al->msg), "%s: %s",
				 s->dev->name, why);
		else
			snprintf(al->msg, sizeof(al->msg), "%s", why);
	}
	metrics_observe(&srv->st, al->hdr.type, loop_now() - job->t0);
	session_end(srv, s, SESSION_CLOSED);
	mjob_free(mj);
	job->ctx = NULL;
	conn_put(job->conn);
	svc_job_free(job);
	if (!--al->pending)
		load_finish(srv, al);
}

void handle_admin_model_load(struct conn *c, const struct djinn_hdr *hdr,
			     struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_model_load *r = req;
	struct server *srv = c->srv;
	char msg[DJINN_MAX_ERROR_MSG];
	bool set = r->flags & DJINN_LOAD_BUDGET;
	struct admin_load *al;

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
	if (!srv->dev[0].models) {
		conn_error(c, hdr, -ENOENT, "this djinnd serves no models");
		return;
	}
	/* A new placement must not move layers that sessions use: check
	 * every device before any changes. */
	for (unsigned int d = 0; set && d < srv->nr_dev; d++)
		if (srv->dev[d].models &&
		    model_store_budget_check(srv->dev[d].models, r->name,
					     r->budget, r->slots, msg,
					     sizeof(msg))) {
			conn_error(c, hdr, -EBUSY, "%s", msg);
			return;
		}
	al = calloc(1, sizeof(*al) + srv->nr_dev * sizeof(al->was[0]));
	if (!al) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	al->c = c;
	al->hdr = *hdr;
	al->set = set;
	memcpy(al->name, r->name, sizeof(al->name));
	conn_get(c);
	msg_defer(c);
	al->pending = 1; /* ours, until every job is queued */
	for (unsigned int d = 0; d < srv->nr_dev; d++) {
		struct device *dev = &srv->dev[d];
		struct session *s;
		struct mjob *mj;
		int ret;

		if (!dev->models)
			continue;
		if (set) {
			model_store_get_budget(dev->models, r->name,
					       &al->was[d].bytes,
					       &al->was[d].slots);
			model_store_set_budget(dev->models, r->name, r->budget,
					       r->slots, NULL, 0);
			model_store_drop_stale(dev->models, r->name);
		}
		/* a session of its own on the device, for the memory
		 * executor's queue and the text's charge while it loads */
		ret = session_create(srv, dev, "admin", "model-load", 0,
				     srv->cfg.lease_max_ns, 0, getpid(), &s);
		if (!ret) {
			ret = session_publish(srv, s);
			if (ret)
				session_put(s);
		}
		mj = ret ? NULL : calloc(1, sizeof(*mj));
		if (!ret && !mj) {
			session_end(srv, s, SESSION_CLOSED);
			ret = -ENOMEM;
		}
		if (ret) {
			if (!al->error) {
				al->error = ret;
				snprintf(al->msg, sizeof(al->msg),
					 "%s: no session to load through: %s",
					 dev->name, strerror(-ret));
			}
			continue;
		}
		memcpy(mj->name, r->name, sizeof(mj->name));
		mj->load = al;
		if (submit_to(c, hdr, s, mj, SCHED_MEM, run_open, load_done)) {
			al->pending++;
		} else {
			/* -ENOMEM, answered */
			al->error = al->error ? al->error : -ENOMEM;
			al->answered = true;
			session_end(srv, s, SESSION_CLOSED);
		}
	}
	if (!--al->pending)
		load_finish(srv, al);
}
