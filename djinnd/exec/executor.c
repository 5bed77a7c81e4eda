// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "exec/executor.h"

_Static_assert(SERVER_COMPUTE_THREADS_MAX <= EXEC_THREADS_MAX &&
		       EXEC_MEM_THREADS <= EXEC_THREADS_MAX,
	       "an executor's threads fit its array");

/* One executor thread; a graph thread has its own stack: the jobs of
 * different threads run at once. */
struct exec_thread {
	struct executor *e;
	pthread_t t;
	struct vmu_stack *stack;
};

struct executor {
	struct server *srv;
	struct device *dev; /* whose device it runs on */
	enum exec_kind kind;
	struct loop_notify notify; /* finished jobs: reap() */
	struct exec_thread threads[EXEC_THREADS_MAX];
	unsigned int nr_threads;
	enum sched_lane lane;
	struct sched *sched; /* the device's */
	pthread_mutex_t lock; /* @done */
	struct list_head done;
	struct stage_pool stage; /* a memory executor's: reads' staging */
};

void exec_job_free(struct exec_job *job)
{
	if (job->s)
		session_put(job->s);
	free(job->payload);
	free(job->in_descs);
	free(job->descs);
	free(job);
}

/* ---------------------------------------------------------------------- */
/* The executor thread */

/* A graph input, resolved, held and made resident; @held[0] gets its
 * slot + 1, @pinned its region, for release(); @fp a client module's
 * fingerprint (valid while it is held), else NULL. */
static int resolve(struct session *s, const struct djinn_ref *ref,
		   const struct djinn_tensor_desc *want, struct dj_tensor *t,
		   const uint8_t **fp, uint64_t *pinned, uint32_t *held,
		   char *msg, size_t msglen)
{
	uint64_t handle = ref->id;
	struct vmu_region_info info;
	struct tensor tn;
	uint32_t slot;
	int ret;

	*pinned = 0;
	*held = 0;
	*fp = NULL;
	if (ref->kind == DJINN_REF_RESULT) {
		ret = session_result_handle(s, ref->id, ref->index, &handle);
		if (ret) {
			snprintf(msg, msglen,
				 "result %u of request %llu: error %d",
				 ref->index, (unsigned long long)ref->id, ret);
			return ret == -EAGAIN ? -EIO : ret;
		}
	}
	ret = session_tensor_hold(s, handle, &tn, &slot);
	if (ret) {
		snprintf(msg, msglen, "no tensor with handle %#llx",
			 (unsigned long long)handle);
		return ret;
	}
	*held = slot + 1;
	if (memcmp(&tn.desc, want, sizeof(tn.desc))) {
		snprintf(msg, msglen, "tensor %#llx changed shape",
			 (unsigned long long)handle);
		return -EINVAL;
	}
	t->desc = tn.desc;
	if (tn.text) {
		t->addr = vmu_text_addr(tn.text);
		*fp = tn.module ? vmu_text_fp(tn.text) : NULL;
		return 0;
	}
	ret = vmu_region_pin(s->vs, tn.region, NULL, &info);
	if (ret) {
		snprintf(msg, msglen, "tensor %#llx: cannot make resident",
			 (unsigned long long)handle);
		return ret;
	}
	t->addr = info.addr;
	*pinned = tn.region;
	return 0;
}

static void run_job(struct exec_thread *th, struct exec_job *job)
{
	const struct djinn_graph_view *view = &job->view;
	uint32_t nin = view->g->nr_inputs, nout = view->g->nr_outputs, i;
	struct dj_tensor *in = calloc(nin ? nin : 1, sizeof(*in));
	uint64_t *pinned = calloc(nin ? nin : 1, sizeof(*pinned));
	uint32_t *held = calloc(nin ? nin : 1, sizeof(*held));
	const uint8_t **fps = calloc(nin ? nin : 1, sizeof(*fps));
	struct session *s = job->s;
	int ret = 0;

	if (!in || !pinned || !held || !fps) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < nin && !ret; i++) {
		char why[160];

		ret = resolve(s, &view->inputs[i], &job->in_descs[i], &in[i],
			      &fps[i], &pinned[i], &held[i], why, sizeof(why));
		if (ret)
			snprintf(job->msg, sizeof(job->msg), "input %u: %s", i,
				 why);
	}
	if (!ret)
		ret = graph_run_kernels(th->e->dev->vmu, th->stack,
					th->e->dev->backend, s->vs, view, in,
					fps, job->descs, &job->res, job->msg,
					sizeof(job->msg));
	for (uint32_t k = 0; k < i; k++) {
		if (pinned[k])
			vmu_region_unpin(s->vs, pinned[k]);
		if (held[k])
			session_tensor_unhold(s, held[k] - 1);
	}
	/* Outputs become the session's tensors. */
	for (uint32_t k = 0; !ret && k < nout; k++) {
		struct tensor t = {
			.desc = job->descs[view->outputs[k]],
			.region = job->res.regions[k],
		};

		djinn_desc_check(&t.desc, NULL, &t.bytes);
		ret = session_tensor_add(s, &t, &job->handles[k]);
		if (ret) {
			/* Undo: the earlier outputs' handles, the rest's
			 * regions. */
			for (uint32_t j = 0; j < k; j++)
				session_tensor_release(s, job->handles[j]);
			for (uint32_t j = k; j < nout; j++)
				vmu_region_destroy(s->vs, job->res.regions[j]);
			snprintf(job->msg, sizeof(job->msg),
				 "out of memory for handles");
		}
	}
out:
	session_result_finish(s, job->request_id, job->handles, ret);
	job->error = ret;
	free(in);
	free(pinned);
	free(held);
	free(fps);
}

/* Copy @m's staged range of the bytes at @addr to a staging buffer. */
static int stage(struct executor *e, struct exec_mem *m, uint64_t addr)
{
	struct vmu_provider *prov = e->dev->backend->provider;
	uint64_t size;
	void *buf;
	int ret;

	ret = stage_get(&e->stage, m->stage_len, &buf, &size);
	if (ret)
		return ret;
	ret = prov->ops->copy_dtoh(prov, buf, addr + m->stage_off,
				   m->stage_len);
	if (ret) {
		stage_put(&e->stage, buf, size);
		return ret;
	}
	m->staged = buf;
	m->staged_size = size;
	return 0;
}

void executor_unstage(struct executor *e, struct exec_mem *m)
{
	if (!m->staged)
		return;
	stage_put(&e->stage, m->staged, m->staged_size);
	m->staged = NULL;
	m->staged_size = 0;
}

/* Map (and zero) or swap in a region, leaving it pinned for the
 * transfer the I/O thread runs next; or stage a read's bytes. */
static void run_mem(struct executor *e, struct exec_job *job)
{
	struct vmu_provider *prov = e->dev->backend->provider;
	struct vmu_session *vs = job->s->vs;
	struct exec_mem *m = &job->mem;
	struct vmu_region_info info = { 0 };
	int ret;

	if (!m->create) {
		info.addr = m->addr;
		if (m->region) {
			ret = vmu_region_pin(vs, m->region, NULL, &info);
			if (ret)
				goto out;
		}
		ret = m->stage_len ? stage(e, m, info.addr) : 0;
		if (ret && m->region)
			vmu_region_unpin(vs, m->region);
		goto out;
	}
	ret = vmu_region_create(vs, m->bytes, &m->region);
	if (ret) {
		m->region = 0;
		goto out;
	}
	ret = vmu_region_resize(vs, m->region, m->bytes, NULL);
	if (ret)
		goto out_destroy;
	ret = vmu_region_pin(vs, m->region, NULL, &info);
	if (ret)
		goto out_destroy;
	/* What the client does not send reads as zero: a region taken back
	 * from the session's cache still holds its earlier bytes. */
	if (m->zero_from < m->bytes) {
		ret = prov->ops->memset(prov, info.addr + m->zero_from, 0,
					m->bytes - m->zero_from);
		if (ret)
			goto out_unpin;
	}
	goto out;

out_unpin:
	vmu_region_unpin(vs, m->region);
out_destroy:
	vmu_region_destroy(vs, m->region);
	m->region = 0;
out:
	m->addr = info.addr;
	job->error = ret;
}

/* Back to the I/O thread. */
static void finish(struct executor *e, struct exec_job *job)
{
	pthread_mutex_lock(&e->lock);
	list_add_tail(&job->node, &e->done);
	pthread_mutex_unlock(&e->lock);
	loop_notify_post(&e->notify);
}

static void *executor_main(void *arg)
{
	struct exec_thread *th = arg;
	struct executor *e = th->e;
	struct exec_job *job;

	while ((job = sched_next(e->sched, e->lane))) {
		uint64_t t0 = loop_now();

		if (__atomic_load_n(&job->s->dead, __ATOMIC_ACQUIRE)) {
			job->error = -ECANCELED;
			snprintf(job->msg, sizeof(job->msg), "session ended");
			if (job->kind == EXEC_GRAPH)
				session_result_finish(job->s, job->request_id,
						      NULL, -ECANCELED);
		} else if (job->kind == EXEC_GRAPH) {
			run_job(th, job);
		} else if (job->kind == EXEC_MEM) {
			run_mem(e, job);
		} else {
			const struct exec_env env = { e->dev->vmu, th->stack,
						      e->dev->backend };

			job->call(job, &env);
		}
		/* What the job cost is its device time: the backend has
		 * synchronised by the time a job returns. */
		sched_charge(e->sched, job, loop_now() - t0);
		finish(e, job);
	}
	return NULL;
}

/* ---------------------------------------------------------------------- */
/* The I/O thread's side */

/* Finished jobs back on the I/O thread: answer, free. */
static void reap(struct executor *e)
{
	struct list_head done;
	struct exec_job *job, *n;

	INIT_LIST_HEAD(&done);
	pthread_mutex_lock(&e->lock);
	list_splice_tail(&e->done, &done);
	pthread_mutex_unlock(&e->lock);
	list_for_each_entry_safe(job, n, &done, node) {
		list_del_init(&job->node);
		job->done(job, job->done_arg);
	}
}

static void executor_notified(struct loop_notify *n)
{
	reap(container_of(n, struct executor, notify));
}

int executor_start(struct server *srv, struct device *dev, enum exec_kind kind,
		   struct executor **out)
{
	struct executor *e = calloc(1, sizeof(*e));
	unsigned int n = kind == EXEC_MEM ? EXEC_MEM_THREADS :
					    dev->compute_threads;
	int ret = 0;

	if (!e)
		return -ENOMEM;
	e->srv = srv;
	e->dev = dev;
	e->kind = kind;
	e->lane = kind == EXEC_MEM ? SCHED_MEM : SCHED_COMPUTE;
	e->sched = dev->sched;
	INIT_LIST_HEAD(&e->done);
	pthread_mutex_init(&e->lock, NULL);
	stage_pool_init(&e->stage, dev->backend->provider);
	ret = loop_notify_init(&srv->loop, &e->notify, "executor",
			       executor_notified);
	if (ret)
		goto out_free;
	if (!n || n > EXEC_THREADS_MAX) {
		ret = -EINVAL;
		goto out_close;
	}
	/* Graph threads: device.compute_threads (one on the CPU, whose
	 * kernels use its cores; several on a GPU, a stream each, so that
	 * sessions' small kernels overlap); the scheduler runs a session's
	 * graphs one at a time, in order, on any of them. Memory jobs are
	 * independent (a connection waits for one at a time): a few
	 * threads, so that a small upload is not queued behind another
	 * session's large one. */
	for (unsigned int i = 0; i < n; i++) {
		struct exec_thread *th = &e->threads[i];

		th->e = e;
		/* Address space only: backing is mapped per request, as
		 * admitted. */
		if (kind == EXEC_GRAPH) {
			ret = vmu_stack_create(dev->vmu,
					       dev->backend->provider->capacity,
					       &th->stack);
			if (ret)
				goto out_threads;
		}
		ret = -pthread_create(&th->t, NULL, executor_main, th);
		if (ret) {
			if (th->stack)
				vmu_stack_destroy(th->stack);
			th->stack = NULL;
			goto out_threads;
		}
		e->nr_threads++;
	}
	loop_notify_start(&e->notify);
	*out = e;
	return 0;

out_threads:
	sched_stop(e->sched, e->lane);
	for (unsigned int i = 0; i < e->nr_threads; i++) {
		pthread_join(e->threads[i].t, NULL);
		if (e->threads[i].stack)
			vmu_stack_destroy(e->threads[i].stack);
	}
out_close:
	loop_notify_fini(&e->notify);
out_free:
	stage_pool_fini(&e->stage);
	free(e);
	return ret;
}

void executor_cancel(struct executor *e, struct session *s)
{
	struct exec_job *job, *n;
	struct list_head taken;

	INIT_LIST_HEAD(&taken);
	sched_take(e->sched, e->lane, s, &taken);
	if (list_empty(&taken))
		return;
	list_for_each_entry_safe(job, n, &taken, node) {
		job->error = -ECANCELED;
		snprintf(job->msg, sizeof(job->msg), "session ended");
		if (job->kind == EXEC_GRAPH)
			session_result_finish(job->s, job->request_id, NULL,
					      -ECANCELED);
	}
	pthread_mutex_lock(&e->lock);
	list_splice_tail(&taken, &e->done);
	pthread_mutex_unlock(&e->lock);
	loop_notify_post(&e->notify);
}

void executor_stop(struct executor *e)
{
	sched_stop(e->sched, e->lane);
	for (unsigned int i = 0; i < e->nr_threads; i++)
		pthread_join(e->threads[i].t, NULL);
	reap(e);
}

/* After the ring is gone: its read of the eventfd may have been pending
 * until then, naming @e. */
void executor_free(struct executor *e)
{
	for (unsigned int i = 0; i < e->nr_threads; i++)
		if (e->threads[i].stack)
			vmu_stack_destroy(e->threads[i].stack);
	/* Every read's reply is done with its buffer by now. */
	stage_pool_fini(&e->stage);
	loop_notify_fini(&e->notify);
	free(e);
}
