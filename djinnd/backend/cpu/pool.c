// SPDX-License-Identifier: MIT
/*
 * The CPU backend's thread pool: one parallel loop at a time over
 * nr_threads - 1 workers and the thread that started it.
 *
 * A loop is cut into chunks that the threads claim one by one (so a slow
 * or descheduled thread holds up at most one chunk), and the caller
 * waits for the count of finished chunks, not for the workers: a worker
 * that wakes late finds nothing left and goes back to sleep. Claims go
 * through one 64-bit word, the loop's generation above the next chunk's
 * index, so a worker still holding an old loop's description can never
 * claim a chunk of a newer loop: its compare-and-swap fails.
 *
 * Between loops a worker polls for the next one for POOL_SPIN_NS before
 * it sleeps, and the caller polls for its last chunk as long before it
 * sleeps: a model step is hundreds of loops microseconds apart, and a
 * futex wake-up on a virtual CPU costs tens of microseconds, in which
 * the caller did the late worker's chunk itself (a decode step's
 * matrix-vector products ran on one core half the time). OpenMP's
 * threads, what PyTorch runs on, wait the same way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "cpu.h"

struct cpu_loop {
	cpu_range_fn fn;
	void *arg;
	size_t n, chunk;
	uint32_t nr_chunks;
};

/*
 * struct cpu_pool
 * @run_lock: held by the thread running a loop
 * @lock:     @stop, @gen, @loop; the condition variables
 * @wake:     a loop was posted, or @stop set
 * @done:     the last chunk of the loop finished
 * @claim:    gen << 32 | index of the next chunk to claim
 * @finished: chunks of the current loop done
 * @err:      the first error a chunk returned
 */
struct cpu_pool {
	unsigned int nr_threads, nr_workers;
	pthread_t *workers;
	pthread_mutex_t run_lock;
	pthread_mutex_t lock;
	pthread_cond_t wake, done;
	_Atomic bool stop;
	_Atomic uint32_t gen;
	struct cpu_loop loop;
	_Atomic uint64_t claim;
	_Atomic uint32_t finished;
	_Atomic int err;
};

/* How long a thread polls before it sleeps; see the top. */
#define POOL_SPIN_NS 50000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Poll until *@word is not @old, or @stop, for POOL_SPIN_NS at most. */
static void spin_while(_Atomic uint32_t *word, uint32_t old, _Atomic bool *stop)
{
	uint64_t end = mono_ns() + POOL_SPIN_NS;

	do {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(word, memory_order_acquire) !=
				    old ||
			    (stop && atomic_load(stop)))
				return;
			cpu_relax();
		}
	} while (mono_ns() < end);
}

/* Set in workers, and in a caller while its loop runs: no nesting. */
static __thread bool in_loop;

/* Claim and run chunks of loop @gen until none are left. */
static void run_chunks(struct cpu_pool *p, const struct cpu_loop *l,
		       uint32_t gen)
{
	uint64_t c = atomic_load(&p->claim);

	for (;;) {
		size_t lo, hi;
		int ret, zero = 0;

		if ((uint32_t)(c >> 32) != gen || (uint32_t)c >= l->nr_chunks)
			return;
		if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1))
			continue;
		lo = (size_t)(uint32_t)c * l->chunk;
		hi = l->n - lo < l->chunk ? l->n : lo + l->chunk;
		ret = l->fn(l->arg, lo, hi);
		if (ret)
			atomic_compare_exchange_strong(&p->err, &zero, ret);
		if (atomic_fetch_add(&p->finished, 1) + 1 == l->nr_chunks) {
			pthread_mutex_lock(&p->lock);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->lock);
		}
		c = atomic_load(&p->claim);
	}
}

static void *worker(void *data)
{
	struct cpu_pool *p = data;
	struct cpu_loop l;
	uint32_t seen;

	in_loop = true;
	pthread_mutex_lock(&p->lock);
	seen = p->gen;
	for (;;) {
		if (!p->stop && p->gen == seen) {
			pthread_mutex_unlock(&p->lock);
			spin_while(&p->gen, seen, &p->stop);
			pthread_mutex_lock(&p->lock);
		}
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		l = p->loop;
		pthread_mutex_unlock(&p->lock);
		run_chunks(p, &l, seen);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int cpu_parallel_for(struct cpu_pool *p, size_t n, size_t grain,
		     cpu_range_fn fn, void *arg)
{
	size_t per, chunk;
	uint32_t nr_chunks, gen;
	struct cpu_loop l;
	int ret;

	if (!n)
		return 0;
	if (!grain)
		grain = 1;
	if (p->nr_threads == 1 || n <= grain || in_loop)
		return fn(arg, 0, n);

	/* Four chunks a thread balance uneven rows; none below @grain. */
	per = n / ((size_t)p->nr_threads * 4) + 1;
	chunk = per > grain ? per : grain;
	nr_chunks = (uint32_t)((n - 1) / chunk + 1);
	l = (struct cpu_loop){ fn, arg, n, chunk, nr_chunks };

	pthread_mutex_lock(&p->run_lock);
	in_loop = true;
	pthread_mutex_lock(&p->lock);
	gen = ++p->gen;
	p->loop = l;
	atomic_store(&p->err, 0);
	atomic_store(&p->finished, 0);
	atomic_store(&p->claim, (uint64_t)gen << 32);
	/* Wake only the workers there are chunks for. */
	for (uint32_t i = 1; i < nr_chunks && i <= p->nr_workers; i++)
		pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);

	run_chunks(p, &l, gen);
	for (uint32_t f; (f = atomic_load(&p->finished)) < nr_chunks;) {
		spin_while(&p->finished, f, NULL);
		if (atomic_load(&p->finished) == f)
			break; /* nothing finished while polling: sleep */
	}
	pthread_mutex_lock(&p->lock);
	while (atomic_load(&p->finished) < nr_chunks)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	ret = atomic_load(&p->err);
	in_loop = false;
	pthread_mutex_unlock(&p->run_lock);
	return ret;
}

unsigned int cpu_pool_threads(const struct cpu_pool *p)
{
	return p->nr_threads;
}

static void stop_workers(struct cpu_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->nr_workers; i++)
		pthread_join(p->workers[i], NULL);
	p->nr_workers = 0;
}

int cpu_pool_create(unsigned int nr_threads, struct cpu_pool **out)
{
	struct cpu_pool *p;
	int ret;

	if (!nr_threads)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->nr_threads = nr_threads;
	p->workers = calloc(nr_threads, sizeof(*p->workers));
	if (!p->workers) {
		ret = -ENOMEM;
		goto out_free;
	}
	pthread_mutex_init(&p->run_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);

	for (unsigned int i = 0; i + 1 < nr_threads; i++) {
		ret = -pthread_create(&p->workers[i], NULL, worker, p);
		if (ret)
			goto out_stop;
		p->nr_workers++;
	}
	*out = p;
	return 0;

out_stop:
	stop_workers(p);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->run_lock);
	free(p->workers);
out_free:
	free(p);
	return ret;
}

void cpu_pool_destroy(struct cpu_pool *p)
{
	if (!p)
		return;
	stop_workers(p);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->run_lock);
	free(p->workers);
	free(p);
}
