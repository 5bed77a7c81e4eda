// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "log.h"
#include "backend/backend.h"
#include "exec/executor.h"

_Static_assert(DEVICE_COMPUTE_THREADS_MAX <= EXEC_THREADS_MAX &&
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
	struct device *dev; /* whose device it runs on */
	enum exec_kind kind;
	struct exec_source src;
	struct loop_notify notify; /* finished jobs: reap() */
	struct exec_thread threads[EXEC_THREADS_MAX];
	unsigned int nr_threads;
	pthread_mutex_t lock; /* @done */
	struct list_head done;
	struct stage_pool stage; /* a memory executor's: reads' staging */
};

/* ---------------------------------------------------------------------- */
/* The executor thread */

void executor_unstage(struct executor *e, struct exec_mem *m)
{
	if (!m->staged)
		return;
	stage_put(&e->stage, m->staged, m->staged_size);
	m->staged = NULL;
	m->staged_size = 0;
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
	const struct exec_env env = { e->dev->vmu, th->stack, e->dev->backend,
				      &e->stage };
	struct exec_job *job, *jobs[EXEC_PASS_MAX];

	while ((job = e->src.next(e->src.arg))) {
		uint64_t t0 = loop_now(), ns, rows = 0;
		bool again[EXEC_PASS_MAX];
		unsigned int n = 1;

		jobs[0] = job;
		job->again = false;
		if (job->run_pass) {
			n = e->src.join(e->src.arg, job, jobs);
			for (unsigned int i = 0; i < n; i++)
				jobs[i]->again = false;
			job->run_pass(jobs, n, &env);
		} else {
			job->run(job, &env);
		}
		/* What the jobs cost is their device time (the backend has
		 * synchronised by the time a job returns), a pass's shared
		 * by the rows each carried. */
		ns = loop_now() - t0;
		for (unsigned int i = 0; i < n; i++)
			rows += jobs[i]->grant ? jobs[i]->grant : 1;
		for (unsigned int i = 0; i < n; i++)
			again[i] = jobs[i]->again;
		for (unsigned int i = 0; i < n; i++) {
			uint64_t r = jobs[i]->grant ? jobs[i]->grant : 1;

			/* once charged, a job queued again is the
			 * scheduler's: another thread may take it */
			e->src.charge(e->src.arg, jobs[i], ns * r / rows);
			if (!again[i])
				finish(e, jobs[i]);
		}
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

int executor_start(struct loop *loop, struct device *dev, enum exec_kind kind,
		   unsigned int threads, const struct exec_source *src,
		   struct executor **out)
{
	struct executor *e = calloc(1, sizeof(*e));
	unsigned int n = kind == EXEC_MEM ? EXEC_MEM_THREADS : threads;
	int ret = 0;

	if (!e)
		return -ENOMEM;
	e->dev = dev;
	e->kind = kind;
	e->src = *src;
	INIT_LIST_HEAD(&e->done);
	pthread_mutex_init(&e->lock, NULL);
	stage_pool_init(&e->stage, dev->backend->provider);
	ret = loop_notify_init(loop, &e->notify, "executor", executor_notified);
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
	e->src.stop(e->src.arg);
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

void executor_cancel(struct executor *e, struct list_head *jobs)
{
	struct exec_job *job;

	if (list_empty(jobs))
		return;
	list_for_each_entry(job, jobs, node) {
		job->error = -ECANCELED;
		snprintf(job->msg, sizeof(job->msg), "session ended");
		if (job->cancel)
			job->cancel(job);
	}
	pthread_mutex_lock(&e->lock);
	list_splice_tail(jobs, &e->done);
	pthread_mutex_unlock(&e->lock);
	loop_notify_post(&e->notify);
}

void executor_stop(struct executor *e)
{
	e->src.stop(e->src.arg);
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
