// SPDX-License-Identifier: MIT
/*
 * The model service (svc/model.h): a session's models and contexts, and
 * the bodies of the jobs that load models and run their steps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "device.h"
#include "graph.h"
#include "log.h"
#include "svc/model.h"
#include "svc/svc.h"

void mobj_put(struct mobj *o)
{
	if (--o->refs)
		return;
	if (o->lost) {
		/* it holds nothing */
	} else if (o->kind == SOBJ_CTX) {
		model_ctx_free(o->mc);
		mobj_put(o->model);
	} else {
		model_close(o->h);
	}
	free(o);
}

/* A context leaves its session's table: its model may be closed now
 * (steps still in flight keep the model's memory until they end). */
void mobj_ctx_unlist(struct mobj *o)
{
	if (o->kind != SOBJ_CTX || o->lost)
		return;
	o->model->ctxs--;
	sched_wait_end(o->s->dev->sched, o->wait);
	o->wait = NULL;
}

static void drain_one(enum sobj_kind kind, void *p, void *arg)
{
	mobj_ctx_unlist(p);
	mobj_put(p);
}

void svc_model_session_ended(struct session *s)
{
	session_obj_drain(s, drain_one, NULL);
}

/* Context object @o holds @mc, of model @m. */
void mobj_ctx_bind(struct mobj *o, struct mobj *m, struct model_ctx *mc,
		   uint32_t max_tokens)
{
	o->mc = mc;
	o->max_tokens = max_tokens;
	o->model = m;
	m->refs++;
	m->ctxs++;
}

void mjob_free(struct mjob *mj)
{
	model_req_fini(&mj->q);
	free(mj->upload);
	free(mj->tokens);
	free(mj);
}

/* A context was made (new or forked) for @s: under static partitioning
 * it reserves its whole KV cache now, or is refused (-ENOMEM, why in
 * @msg; the caller frees it). With @relieve (an executor's thread, not
 * the I/O thread's) its model may first stream more of its layers to
 * make room (model_relieve()). */
int svc_ctx_made(struct session *s, struct model_ctx *c, bool relieve,
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

void mjob_open(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error = model_open(job->s->dev->models, job->s->vs, mj->name,
				&mj->hold, job->msg, sizeof(job->msg));
}

/*
 * Copy the text tensor @handle, which must be a U8 vector of SHA-256 @fp
 * of at most @max bytes, into a new host buffer. Its size is checked
 * here, once, against what the upload has copied so far (*@staged) and
 * what memory.upload_max leaves the tenant's uploads in flight; *@staged
 * grows by what it holds.
 */
static int fetch(struct exec_job *job, const struct exec_env *env,
		 const char *what, const struct djinn_model_file *mf,
		 uint64_t max, void **buf, size_t *len, uint64_t *staged)
{
	struct vmu_provider *p = env->b->provider;
	unsigned long long h = (unsigned long long)mf->handle;
	struct mjob *mj = job->ctx;
	uint64_t held;
	struct tensor t;
	uint32_t slot;
	int ret;

	ret = session_tensor_hold(job->s, mf->handle, &t, &slot);
	if (ret) {
		size_t n = (size_t)snprintf(job->msg, sizeof(job->msg),
					    "%s: ", what);

		if (n < sizeof(job->msg))
			session_tensor_why(job->s, mf->handle, ret,
					   job->msg + n, sizeof(job->msg) - n);
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
	} else if (*staged + t.bytes < *staged ||
		   *staged + t.bytes > mj->upload_max) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: %llu bytes after %llu: the files hold more than "
			 "%llu (memory.upload_max)",
			 what, (unsigned long long)t.bytes,
			 (unsigned long long)*staged,
			 (unsigned long long)mj->upload_max);
		ret = -E2BIG;
	} else if (vmu_tenant_stage(job->s->vs, t.bytes, mj->upload_max,
				    &held)) {
		snprintf(job->msg, sizeof(job->msg),
			 "%s: %llu bytes: the tenant's model uploads in "
			 "flight hold %llu of memory.upload_max (%llu) in "
			 "host memory",
			 what, (unsigned long long)t.bytes,
			 (unsigned long long)held,
			 (unsigned long long)mj->upload_max);
		ret = -EDQUOT;
	} else if (!(*buf = malloc(t.bytes ? t.bytes : 1))) {
		vmu_tenant_unstage(job->s->vs, t.bytes);
		ret = -ENOMEM;
	} else {
		*staged += t.bytes;
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

void mjob_open_upload(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	const struct djinn_model_upload *r = mj->upload;
	uint32_t n = r->nr_files;
	struct model_upload up = { .nr_files = n };
	void **bufs = calloc(n + 1, sizeof(*bufs));
	size_t *lens = calloc(n + 1, sizeof(*lens));
	uint64_t staged = 0; /* host bytes held for the tenant */
	int ret = -ENOMEM;

	if (!bufs || !lens)
		goto out;
	ret = upload_src(r, up.src);
	if (ret)
		goto out;
	if (r->config.handle) {
		bool index = r->flags & DJINN_MODEL_UPLOAD_INDEX;

		/* Every file is copied to the host, each checked as it is
		 * against memory.upload_max: the upload's, and its
		 * tenant's uploads' in flight together. */
		ret = fetch(job, env, "config.json", &r->config,
			    MODEL_MAX_CONFIG, &bufs[n], &lens[n], &staged);
		for (uint32_t i = 0; i < n && !ret; i++) {
			char what[32] = "model.safetensors.index.json";
			uint64_t max = DJINN_MODEL_CONFIG_MAX;

			if (!index || i) {
				snprintf(what, sizeof(what), "file %u", i);
				max = SIZE_MAX;
			}
			ret = fetch(job, env, what, &r->files[i], max, &bufs[i],
				    &lens[i], &staged);
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
	if (staged)
		vmu_tenant_unstage(job->s->vs, staged);
	free(bufs);
	free(lens);
	job->error = ret;
}

/* CTX_NEW's cache did not fit: the model may stream more of its layers */
void mjob_ctx_room(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error =
		svc_ctx_made(job->s, mj->mc, true, job->msg, sizeof(job->msg));
}

void mjob_fork(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;
	struct model_env me = env_of(env);

	job->error = model_ctx_fork(mj->o->mc, &me, &mj->mc, job->msg,
				    sizeof(job->msg));
	if (!job->error) {
		job->error = svc_ctx_made(job->s, mj->mc, true, job->msg,
					  sizeof(job->msg));
		if (job->error) {
			model_ctx_free(mj->mc);
			mj->mc = NULL;
		}
	}
}

/* A step of @o's own has begun, or its tokens were cut: a RESUME no
 * longer hears of a step a crash lost (the journal reads the flag). */
static void lost_pause_gone(struct mobj *o)
{
	__atomic_store_n(&o->pause_lost, false, __ATOMIC_RELAXED);
}

void mjob_reset(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error =
		model_ctx_truncate(mj->o->mc, 0, job->msg, sizeof(job->msg));
	if (!job->error)
		lost_pause_gone(mj->o);
}

void mjob_truncate(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	job->error = model_ctx_truncate(mj->o->mc, mj->max, job->msg,
					sizeof(job->msg));
	if (!job->error)
		lost_pause_gone(mj->o);
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
		session_tensor_why(job->s, handle, ret, job->msg,
				   sizeof(job->msg));
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

/* A step's request starts: 0, or its error is the job's (the request
 * is done). */
static int step_start(struct exec_job *job, const struct model_env *me)
{
	struct mjob *mj = job->ctx;
	struct model_ctx *mc = mj->o->mc;
	const struct djinn_sampling *sp = &mj->step.sampling;
	struct model_req *q = &mj->q;
	struct model_pause_info pi;
	int ret;

	mj->started = true;
	mj->t0 = loop_now();
	*q = (struct model_req){ .c = mc,
				 .r = { .brk = mj->step.break_layer,
					.out = mj->tokens },
				 .msg = job->msg,
				 .msglen = sizeof(job->msg) };
	switch (mj->hdr.type) {
	case DJINN_MSG_CTX_PREFILL:
		q->kind = MODEL_REQ_PREFILL;
		q->tokens = mj->tokens;
		q->n = mj->step.nr_tokens;
		q->r.out = NULL;
		break;
	case DJINN_MSG_CTX_DECODE:
		q->kind = MODEL_REQ_DECODE;
		q->n = mj->step.nr_tokens;
		q->sp = (struct model_sampling){
			.temperature = sp->temperature,
			.top_k = sp->top_k,
			.top_p = sp->top_p == 0 ? 1.0f : sp->top_p,
			.seed = sp->seed,
		};
		break;
	default: /* CTX_RESUME */
		q->kind = MODEL_REQ_RESUME;
		q->r.brk = 0;
		if (!model_ctx_paused(mc, &pi) && mj->o->pause_lost) {
			snprintf(job->msg, sizeof(job->msg),
				 "djinnd restarted while the context's step "
				 "was paused: the paused part was lost, and "
				 "the context holds what the step's answers "
				 "said (len); run the rest again");
			return job->error = -EAGAIN;
		}
		if (!model_ctx_paused(mc, &pi)) {
			snprintf(job->msg, sizeof(job->msg),
				 "the context is not paused");
			return job->error = -EBUSY;
		}
		if (pi.decode) {
			mj->tokens = malloc(pi.want * sizeof(int32_t));
			if (!mj->tokens)
				return job->error = -ENOMEM;
			q->r.out = mj->tokens;
		}
		/* a failed steer leaves it paused, as it was */
		ret = mj->steer ? steer(job, me, mc, mj->steer) : 0;
		if (ret)
			return job->error = ret;
		break;
	}
	ret = model_req_start(q);
	if (ret)
		job->error = step_answer(job, me, mj->o, &q->r, ret, mj->t0);
	else if (q->kind != MODEL_REQ_RESUME)
		lost_pause_gone(mj->o);
	return ret;
}

/* The request of @job has ended: the answer. */
static void step_end(struct exec_job *job, const struct model_env *me)
{
	struct mjob *mj = job->ctx;
	struct model_req *q = &mj->q;

	if (!q->ret && mj->hdr.type != DJINN_MSG_CTX_RESUME)
		mj->o->pause_flags = mj->step.flags;
	job->error = step_answer(job, me, mj->o, &q->r, q->ret, mj->t0);
	model_req_fini(q);
}

/* Whether @job ends before its next step: its session ended, or its
 * context was freed. */
static bool step_gone(struct exec_job *job)
{
	struct mjob *mj = job->ctx;

	if (svc_job_gone(job))
		return true;
	if (!__atomic_load_n(&mj->o->freed, __ATOMIC_ACQUIRE))
		return false;
	job->error = -ECANCELED;
	snprintf(job->msg, sizeof(job->msg),
		 "context freed while its step ran");
	return true;
}

void svc_model_pass(struct exec_job **jobs, unsigned int n,
		    const struct exec_env *env)
{
	struct model_env me = env_of(env);
	struct model_req *qs[EXEC_PASS_MAX];
	struct exec_job *in[EXEC_PASS_MAX];
	unsigned int nq = 0;
	uint64_t t0 = loop_now(), ns, rows = 0;

	for (unsigned int i = 0; i < n; i++) {
		struct exec_job *job = jobs[i];
		struct mjob *mj = job->ctx;

		job->again = false;
		if (step_gone(job)) {
			model_req_fini(&mj->q);
			continue;
		}
		if (!mj->started && step_start(job, &me))
			continue;
		mj->q.grant = job->grant;
		in[nq] = job;
		qs[nq++] = &mj->q;
	}
	model_pass(qs, nq, &me);
	ns = loop_now() - t0;
	for (unsigned int i = 0; i < nq; i++)
		rows += model_req_stepped(qs[i]);
	for (unsigned int i = 0; i < nq; i++) {
		struct exec_job *job = in[i];
		struct mjob *mj = job->ctx;

		/* its share of the pass, by the rows it carried */
		mj->resp.run_ns += rows ? ns * model_req_stepped(qs[i]) / rows :
					  0;
		if (qs[i]->done) {
			uint64_t run = mj->resp.run_ns;

			step_end(job, &me);
			mj->resp.run_ns = run;
			continue;
		}
		job->again = true;
		job->rows = model_req_rows(qs[i]);
	}
}

/* A step job run alone: a pass of its own after another, to its end
 * (svc_model_pass() is its @run_pass; this is its @call). */
void mjob_step(struct exec_job *job, const struct exec_env *env)
{
	do {
		job->grant = 0;
		svc_model_pass(&job, 1, env);
	} while (job->again);
}

/* A step job taken off its queue (its session ended): its request's
 * memory goes. */
void mjob_cancel(struct exec_job *job)
{
	struct mjob *mj = job->ctx;

	model_req_fini(&mj->q);
}

/* A model job's body, unless its session has ended meanwhile. */
void mjob_run(struct exec_job *job, const struct exec_env *env)
{
	struct mjob *mj = job->ctx;

	if (!svc_job_gone(job))
		mj->call(job, env);
}

/* ---------------------------------------------------------------------- */
/* The service's operations, on the I/O thread */

int mobj_add(struct session *s, enum sobj_kind kind, struct mobj **out,
	     uint64_t *handle, char *msg, size_t msglen)
{
	struct mobj *o = calloc(1, sizeof(*o));
	int ret = o ? session_obj_add(s, kind, o, handle) : -ENOMEM;

	if (ret) {
		free(o);
		snprintf(msg, msglen, "%s",
			 ret == -EDQUOT ? "too many models and contexts in the "
					  "session" :
					  "out of memory");
		return ret;
	}
	o->kind = kind;
	o->refs = 1;
	o->s = s;
	*out = o;
	return 0;
}

/* A restored object of @kind in live slot @slot of @s: NULL, with why
 * in @msg and *@err. */
static struct mobj *mobj_restore(struct session *s, uint32_t slot,
				 enum sobj_kind kind, int *err, char *msg,
				 size_t msglen)
{
	struct mobj *o = calloc(1, sizeof(*o));

	*err = o ? session_obj_restore(s, slot, kind, o) : -ENOMEM;
	if (*err) {
		free(o);
		snprintf(msg, msglen,
			 *err == -ENOMEM ? "out of memory" :
					   "slot %u is not a live handle",
			 slot);
		return NULL;
	}
	o->kind = kind;
	o->refs = 1;
	o->s = s;
	return o;
}

bool svc_obj_is_lost(struct session *s, uint32_t slot, enum sobj_kind kind)
{
	const struct mobj *o = session_obj_at(s, slot, kind);

	return o && o->lost;
}

int svc_obj_restore_lost(struct session *s, uint32_t slot, enum sobj_kind kind,
			 uint8_t why, char *msg, size_t msglen)
{
	int ret;
	struct mobj *o = mobj_restore(s, slot, kind, &ret, msg, msglen);

	if (o)
		o->lost = why;
	return o ? 0 : ret;
}

int svc_model_restore(struct session *s, uint32_t slot, const char *name,
		      const uint8_t fp[32], const struct model_kept *kept,
		      char *msg, size_t msglen)
{
	struct model_hold *h;
	struct mobj *o;
	int ret;

	ret = kept ? model_open_kept(s->dev->models, s->vs, kept, &h, msg,
				     msglen) :
		     model_open(s->dev->models, s->vs, name, &h, msg, msglen);
	if (ret)
		return ret;
	if (memcmp(h->m->fp, fp, 32)) {
		model_close(h);
		snprintf(msg, msglen,
			 "model %s has other weights than before the restart",
			 name);
		return -ESTALE;
	}
	o = mobj_restore(s, slot, SOBJ_MODEL, &ret, msg, msglen);
	if (!o) {
		model_close(h);
		return ret;
	}
	o->h = h;
	return 0;
}

int svc_ctx_pause_restore(struct session *s, uint32_t slot,
			  const struct model_ctx_pause *p,
			  const struct vmu_fill *hidden,
			  const struct vmu_fill *kv, uint32_t flags, char *msg,
			  size_t msglen)
{
	struct mobj *o = session_obj_at(s, slot, SOBJ_CTX);
	int ret;

	if (!o || o->lost) {
		snprintf(msg, msglen, "slot %u holds no context%s", slot,
			 o ? " that was kept" : "");
		return -EBADMSG;
	}
	ret = model_ctx_pause_set(o->mc, p, hidden, kv, msg, msglen);
	if (!ret)
		o->pause_flags = flags;
	return ret;
}

int svc_ctx_restore(struct session *s, uint32_t slot, uint32_t model_slot,
		    uint32_t max, uint32_t len, const struct vmu_fill *kv,
		    uint64_t kv_bytes, const float *logits,
		    uint64_t logits_bytes, bool pause_lost, char *msg,
		    size_t msglen)
{
	struct mobj *m = session_obj_at(s, model_slot, SOBJ_MODEL), *o;
	struct model_ctx *mc = NULL;
	int ret;

	if (m && m->lost) {
		snprintf(msg, msglen, "its model's slot %u holds a lost model",
			 model_slot);
		return -EBADMSG;
	}
	if (!m) {
		snprintf(msg, msglen, "its model's slot %u holds none",
			 model_slot);
		return -EINVAL;
	}
	ret = model_ctx_restore(m->h, max, len, kv, kv_bytes, logits,
				logits_bytes, &mc, msg, msglen);
	if (!ret)
		ret = svc_ctx_made(s, mc, false, msg, msglen);
	o = ret ? NULL : mobj_restore(s, slot, SOBJ_CTX, &ret, msg, msglen);
	if (!o) {
		if (mc)
			model_ctx_free(mc);
		return ret;
	}
	mobj_ctx_bind(o, m, mc, max);
	o->pause_lost = pause_lost;
	return 0;
}

struct mobj *mobj_get(struct session *s, uint64_t handle, enum sobj_kind kind,
		      int *err, char *msg, size_t msglen)
{
	struct mobj *o = session_obj_get(s, handle, kind);
	const char *what = kind == SOBJ_MODEL ? "model" : "context";

	if (o && o->lost == LOST_CRASH) {
		snprintf(msg, msglen,
			 "%s %#llx was lost when djinnd crashed: %s", what,
			 (unsigned long long)handle,
			 kind == SOBJ_MODEL ?
				 "its weights were in device memory, which "
				 "a crash does not keep; close it" :
				 "its cache was where a crash does not keep "
				 "it (a GPU's memory, or anonymous memory it "
				 "was swapped out to); free it and prefill a "
				 "new one");
		*err = -EIO;
		return NULL;
	}
	if (o && o->lost) {
		snprintf(msg, msglen,
			 "%s %#llx was lost when %s was reset: %s in "
			 "device memory when djinnd restarted; %s it",
			 what, (unsigned long long)handle, s->dev->name,
			 kind == SOBJ_MODEL ? "its weights were" :
					      "its cache was",
			 kind == SOBJ_MODEL ? "close" : "free");
		*err = -EIO;
		return NULL;
	}
	if (!o) {
		snprintf(msg, msglen, "no %s with handle %#llx", what,
			 (unsigned long long)handle);
		*err = -ENOENT;
	}
	return o;
}

int svc_ctx_signal(struct session *s, uint64_t ctx, uint32_t phase,
		   uint64_t expected_ns, char *msg, size_t msglen)
{
	int ret;
	struct mobj *o = mobj_get(s, ctx, SOBJ_CTX, &ret, msg, msglen);

	if (!o)
		return ret;
	if (!o->wait) {
		o->wait = sched_wait_new(s->dev->sched, &s->se,
					 model_ctx_cache(o->mc));
		if (!o->wait) {
			snprintf(msg, msglen, "out of memory");
			return -ENOMEM;
		}
	}
	sched_signal(s->dev->sched, o->wait, phase, expected_ns);
	return 0;
}

int svc_model_close(struct session *s, uint64_t handle, char *msg,
		    size_t msglen)
{
	/* a lost one closes too */
	struct mobj *o = session_obj_get(s, handle, SOBJ_MODEL);

	if (!o) {
		snprintf(msg, msglen, "no model with handle %#llx",
			 (unsigned long long)handle);
		return -ENOENT;
	}
	if (o->ctxs) {
		snprintf(msg, msglen, "model has %u contexts", o->ctxs);
		return -EBUSY;
	}
	session_obj_del(s, handle, SOBJ_MODEL);
	mobj_put(o);
	return 0;
}

int svc_ctx_free(struct session *s, uint64_t handle, char *msg, size_t msglen)
{
	struct mobj *o = session_obj_del(s, handle, SOBJ_CTX);

	if (!o) {
		snprintf(msg, msglen, "no context with handle %#llx",
			 (unsigned long long)handle);
		return -ENOENT;
	}
	__atomic_store_n(&o->freed, true, __ATOMIC_RELEASE);
	mobj_ctx_unlist(o);
	mobj_put(o); /* steps in flight keep it until they end */
	return 0;
}

int svc_model_job(struct session_table *t, struct session *s,
		  const struct djinn_hdr *hdr, struct mjob *mj,
		  enum sched_lane lane,
		  void (*call)(struct exec_job *, const struct exec_env *),
		  struct exec_job **out, char *msg, size_t msglen)
{
	struct exec_job *job = NULL;
	/* in flight with the session's graphs: its compute jobs, and an
	 * uploaded model's load, which copies up to memory.upload_max into
	 * host memory */
	bool counted = lane == SCHED_COMPUTE ||
		       hdr->type == DJINN_MSG_MODEL_OPEN_UPLOADED;
	int ret = 0;

	if (counted)
		ret = session_inflight_check(t, s, msg, msglen);
	if (!ret) {
		job = calloc(1, sizeof(*job));
		if (!job) {
			ret = -ENOMEM;
			snprintf(msg, msglen, "out of memory");
		}
	}
	if (ret) {
		if (mj->o)
			mobj_put(mj->o);
		mjob_free(mj);
		return ret;
	}
	mj->hdr = *hdr;
	mj->call = call;
	if (mj->o && mj->o->kind == SOBJ_CTX)
		job->wait = mj->o->wait; /* a step on it ends its wait */
	job->lane = lane;
	job->counted = counted;
	job->run = mjob_run;
	if (call == mjob_step) {
		const struct model *m = mj->o->model->h->m;

		job->run_pass = svc_model_pass;
		job->cancel = mjob_cancel;
		job->pass = m;
		job->pass_max = sched_max_batch(s->dev->sched, m->name);
		job->rows = hdr->type == DJINN_MSG_CTX_PREFILL ?
				    mj->step.nr_tokens :
				    1;
		job->chunk = hdr->type == DJINN_MSG_CTX_PREFILL &&
			     !mj->step.break_layer;
	}
	job->ctx = mj;
	job->s = s;
	job->se = &s->se;
	session_ref(s);
	job->request_id = hdr->request_id;
	*out = job;
	return 0;
}

int svc_ctx_new(struct session_table *t, struct session *s,
		const struct djinn_hdr *hdr, uint64_t model,
		uint32_t max_tokens, uint64_t *handle, uint32_t *max,
		struct exec_job **wait, char *msg, size_t msglen)
{
	struct model_ctx *mc;
	struct mobj *m, *o;
	struct mjob *mj;
	int ret;

	*wait = NULL;
	m = mobj_get(s, model, SOBJ_MODEL, &ret, msg, msglen);
	if (!m)
		return ret;
	/* Only reserves the cache's address space: cheap, here. */
	*max = max_tokens ? max_tokens : m->h->m->cfg.n_ctx;
	ret = model_ctx_new(m->h, *max, &mc, msg, msglen);
	if (ret)
		return ret;
	ret = svc_ctx_made(s, mc, false, msg, msglen);
	if (ret && ret != -ENOMEM)
		goto out_free;
	if (ret) {
		/* no room for its cache: moving the model's weights may make
		 * some, the memory executor's work */
		mj = calloc(1, sizeof(*mj));
		if (!mj) {
			snprintf(msg, msglen, "out of memory");
			goto out_free;
		}
		/* counted as the model's while it waits, so that MODEL_CLOSE
		 * is -EBUSY meanwhile (svc_mjob_finish()) */
		mj->o = m;
		m->refs++;
		m->ctxs++;
		mj->mc = mc;
		mj->max = *max;
		ret = svc_model_job(t, s, hdr, mj, SCHED_MEM, mjob_ctx_room,
				    wait, msg, msglen);
		if (ret) {
			m->ctxs--;
			goto out_free;
		}
		return 0;
	}
	ret = mobj_add(s, SOBJ_CTX, &o, handle, msg, msglen);
	if (ret)
		goto out_free;
	mobj_ctx_bind(o, m, mc, *max);
	return 0;

out_free:
	model_ctx_free(mc);
	return ret;
}

void mjob_undo(struct exec_job *job)
{
	struct mjob *mj = job->ctx;

	if (mj->hold)
		model_close(mj->hold);
	mj->hold = NULL;
	model_ctx_free(mj->mc);
	mj->mc = NULL;
	if (mj->resp.logits)
		session_tensor_release(job->s, mj->resp.logits);
	if (mj->resp.hidden)
		session_tensor_release(job->s, mj->resp.hidden);
	mj->resp.logits = mj->resp.hidden = 0;
}

int svc_mjob_finish(struct exec_job *job, uint64_t *handle, char *msg,
		    size_t msglen)
{
	struct mjob *mj = job->ctx;
	struct session *s = job->s;
	struct mobj *o;
	int ret = job->error;

	if (mj->hdr.type == DJINN_MSG_CTX_NEW)
		mj->o->ctxs--; /* its wait's count; mobj_ctx_bind() counts it */
	if (!ret && s->dead)
		ret = -ECANCELED;
	/* a device fault while it ran: what it made is lost */
	if (!ret)
		ret = session_lost(s, job->msg, sizeof(job->msg));
	if (ret) {
		/* What the job made goes with it. */
		mjob_undo(job);
		snprintf(msg, msglen, "%s",
			 job->msg[0]	   ? job->msg :
			 ret == -ECANCELED ? "session ended" :
					     strerror(-ret));
		return ret;
	}
	switch (mj->hdr.type) {
	case DJINN_MSG_MODEL_OPEN:
	case DJINN_MSG_MODEL_OPEN_UPLOADED:
		ret = mobj_add(s, SOBJ_MODEL, &o, handle, msg, msglen);
		if (ret) {
			mjob_undo(job);
			return ret;
		}
		o->h = mj->hold;
		mj->hold = NULL; /* the object's now */
		return 0;
	case DJINN_MSG_CTX_FORK:
	case DJINN_MSG_CTX_NEW:
		ret = mobj_add(s, SOBJ_CTX, &o, handle, msg, msglen);
		if (ret) {
			mjob_undo(job);
			return ret;
		}
		if (mj->hdr.type == DJINN_MSG_CTX_FORK)
			mobj_ctx_bind(o, mj->o->model, mj->mc,
				      mj->o->max_tokens);
		else
			mobj_ctx_bind(o, mj->o, mj->mc, mj->max);
		mj->mc = NULL; /* the object's now */
		return 0;
	default:
		return 0;
	}
}

void svc_mjob_release(struct exec_job *job)
{
	struct mjob *mj = job->ctx;

	if (mj->o)
		mobj_put(mj->o);
	mjob_free(mj);
	job->ctx = NULL;
	if (job->counted)
		session_inflight_sub(job->s);
	svc_job_free(job);
}
