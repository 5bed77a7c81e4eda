// SPDX-License-Identifier: MIT
/*
 * The memory policy: what the scheduler does with what sessions say
 * (Documentation/sched.rst).
 *
 *   semantic  On IO_WAIT with an estimate, the session's idle data
 *             regions (its contexts' KV caches, its results) leave the
 *             device at once if memory is needed now or soon
 *             (memory_needed()) and the wait is worth
 *             the swap and the restore (sched_plan_wait()); while it
 *             waits, the tick swaps it out as soon as memory is needed.
 *             Its regions are the VMU's first victims meanwhile
 *             (vmu_session_set_victim()): an overrunner's first, then the
 *             one back last. A restore starts so that the regions are
 *             resident again by the estimate's end (the prefetch), and at
 *             once when a request or COMPUTE comes first. Sessions that
 *             never signal are left to the VMU's LRU.
 *   lru       Signals are recorded, nothing acts on them: the VMU swaps
 *             the least recently used idle regions when an admission or
 *             an allocation needs the memory, and a swapped region comes
 *             back when it is used.
 *   static    Nothing swaps; a context reserves its whole KV cache when
 *             it is made (model_ctx_reserve()), so admission refuses the
 *             context that does not fit, after its model, held whole or
 *             in part, streamed more of its layers to make room if it
 *             could (model_relieve(), on the memory lane).
 *
 * Swaps and restores are jobs of the memory lane, charged to the session
 * they move; the bandwidth they reach is measured here, per device, and
 * feeds the rule. Everything here runs on the I/O thread but the jobs'
 * bodies.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "log.h"
#include "backend/backend.h"
#include "sched/policy.h"
#include "vmu/vmu.h"

#define TICK_NS (2 * NSEC_PER_MSEC) /* while sessions wait */
#define MAX_SWAP_JOBS 2 /* the policy's swap-outs at once, per device */
#define MB (1ull << 20)

/* ---------------------------------------------------------------------- */
/* The rule */

static uint64_t move_ns(uint64_t bytes, uint64_t bps)
{
	if (!bps)
		bps = SCHED_BPS_GUESS;
	return SCHED_SWAP_FIXED_NS +
	       (uint64_t)((double)bytes * 1e9 / (double)bps);
}

void sched_plan_wait(const struct sched_config *cfg, uint64_t now,
		     uint64_t left_ns, uint64_t bytes, uint64_t bw_out,
		     uint64_t bw_in, bool needed, struct sched_plan *p)
{
	unsigned int margin = cfg->swap_margin_pct ? cfg->swap_margin_pct :
						     SCHED_SWAP_MARGIN_DEFAULT;
	uint64_t lead;

	p->out_ns = move_ns(bytes, bw_out);
	p->in_ns = move_ns(bytes, bw_in);
	p->worth = bytes &&
		   (double)left_ns * 100.0 >
			   (double)margin * (double)(p->out_ns + p->in_ns);
	p->swap = p->worth && needed;
	lead = p->in_ns + p->in_ns / 2 + SCHED_PREFETCH_SLACK_NS;
	p->prefetch_at = left_ns > lead ? now + left_ns - lead : now;
}

uint64_t sched_victim_key(bool overran, uint64_t wait_until)
{
	if (overran)
		return UINT64_MAX;
	/* 0 is "not waiting": a wait always has a key above it */
	return wait_until < UINT64_MAX - 1 ? wait_until + 1 : UINT64_MAX - 1;
}

/* ---------------------------------------------------------------------- */
/* Measurements */

/* Memory is needed now or soon: an admission waits for it, pressure is
 * critical, or pressure is at warning while other sessions' steps are
 * queued (they allocate as they run). A device at warning with nothing
 * queued keeps its waiting sessions' data: moving it out and back would
 * cost two copies that nobody needed. */
static bool memory_needed(struct sched *sc)
{
	unsigned int queued, running;
	struct vmu_stats vs;

	vmu_get_stats(sc->dev->vmu, &vs);
	if (vs.admit_waiting || vs.pressure >= VMU_PRESSURE_CRITICAL)
		return true;
	if (vs.pressure < VMU_PRESSURE_WARNING)
		return false;
	sched_depth(sc, SCHED_COMPUTE, &queued, &running);
	return queued > 0;
}

/* What @w covers: its context's region, or its whole session. Never
 * waits for a region in transit (the I/O thread's). */
static void usage_of(struct sched_wait *w, struct vmu_usage *u)
{
	if (w->region)
		vmu_region_usage(w->se->vs, w->region, u); /* gone: zeros */
	else
		vmu_session_usage(w->se->vs, u);
}

static uint64_t resident_of(struct sched_wait *w)
{
	struct vmu_usage u;

	usage_of(w, &u);
	return u.resident;
}

static uint64_t swapped_of(struct sched_wait *w)
{
	struct vmu_usage u;

	usage_of(w, &u);
	return u.swapped;
}

/* The reclaim ranking of what @w covers. */
static void set_victim(struct sched_wait *w, uint64_t key)
{
	if (w->region)
		vmu_region_set_victim(w->se->vs, w->region, key);
	else
		vmu_session_set_victim(w->se->vs, key);
}

static void wait_put(struct sched_wait *w)
{
	if (w->own && !--w->refs)
		free(w);
}

/* A swap of @bytes took @ns: the bandwidth, averaged (small moves say
 * more about the fixed cost than the bandwidth, and are left out). */
static void measured(struct sched *sc, bool out, uint64_t bytes, uint64_t ns)
{
	uint64_t *bw = out ? &sc->st.swap_out_bps : &sc->st.swap_in_bps;
	uint64_t now;

	if (bytes < MB || !ns)
		return;
	now = (uint64_t)((double)bytes * 1e9 / (double)ns);
	pthread_mutex_lock(&sc->stat_lock);
	*bw = *bw ? (3 * *bw + now) / 4 : now;
	pthread_mutex_unlock(&sc->stat_lock);
}

/* ---------------------------------------------------------------------- */
/* The jobs: a session's regions out or back, on the memory lane */

enum { POLICY_SWAP_OUT = 1, POLICY_RESTORE, POLICY_PREFETCH };

/*
 * A wait's regions out or back, on a memory thread: its session's, or
 * its context's one. The copy holds
 * one of the device's copy engines for its length: several at once
 * would share the engine's bandwidth, so that each arrives later than
 * planned (the rule's bandwidth is a copy's alone), and on a CPU device
 * each would take a core from its kernels. Its time, measured once the
 * engine is had, is the copy's own.
 */
static void run_swap(struct exec_job *job, const struct exec_env *env)
{
	struct sched *sc = job->done_arg;
	struct sched_wait *w = job->wait;
	struct vmu_session *vs = job->se->vs;
	pthread_mutex_t *engine =
		&sc->copy_engine[sc->nr_copy_engines > 1 && job->swap.out];
	struct vmu_usage before, after;
	uint64_t t0;
	int ret;

	/* Its session or context ended while it was queued: nothing to
	 * move. */
	if (__atomic_load_n(&job->se->ended, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&w->ended, __ATOMIC_ACQUIRE)) {
		job->error = -ECANCELED;
		return;
	}
	pthread_mutex_lock(engine);
	t0 = loop_now();
	usage_of(w, &before);
	if (w->region) {
		ret = job->swap.out ? vmu_region_swap_out(vs, w->region) :
				      vmu_region_swap_in(vs, w->region, NULL);
		ret = ret ? ret : 1;
	} else {
		ret = job->swap.out ? vmu_session_swap_out(vs) :
				      vmu_session_swap_in(vs);
	}
	usage_of(w, &after);
	job->res.run_ns = loop_now() - t0;
	pthread_mutex_unlock(engine);
	job->swap.bytes = job->swap.out ?
				  (after.swapped > before.swapped ?
					   after.swapped - before.swapped :
					   0) :
				  (before.swapped > after.swapped ?
					   before.swapped - after.swapped :
					   0);
	job->swap.regions = ret > 0 ? (uint64_t)ret : 0;
	job->error = ret < 0 ? ret : 0;
}

static void policy_job_done(struct exec_job *job, void *arg)
{
	struct sched *sc = arg;
	struct sched_entity *se = job->se;
	struct sched_wait *w = job->wait;
	bool out = job->swap.out;

	if (out) {
		w->swap_jobs--;
		sc->swap_jobs--;
	} else {
		w->restore_jobs--;
	}
	if (job->error && job->error != -ECANCELED)
		log_info("session %llu: %s: %s", (unsigned long long)se->id,
			 out ? "swapping out" : "restoring",
			 strerror(-job->error));
	if (!job->error && job->swap.bytes) {
		measured(sc, out, job->swap.bytes, job->res.run_ns);
		if (out) {
			pthread_mutex_lock(&sc->stat_lock);
			sc->st.swaps_signal += job->swap.regions;
			pthread_mutex_unlock(&sc->stat_lock);
			if (w->waiting)
				w->swapped_in_wait = true;
		}
		log_debug("session %llu: %s %llu bytes in %llu us",
			  (unsigned long long)se->id,
			  out ? "swapped out" : "restored",
			  (unsigned long long)job->swap.bytes,
			  (unsigned long long)(job->res.run_ns / 1000));
	}
	wait_put(w);
	sc->ops.put(se);
	free(job);
}

static void start(struct sched *sc, struct sched_wait *w, int what)
{
	struct sched_entity *se = w->se;
	struct exec_job *job;
	bool stopped;

	/* Shutting down: the memory executor has stopped taking jobs. */
	pthread_mutex_lock(&sc->lane[SCHED_MEM].lock);
	stopped = sc->lane[SCHED_MEM].stop;
	pthread_mutex_unlock(&sc->lane[SCHED_MEM].lock);
	if (stopped)
		return;
	job = calloc(1, sizeof(*job));
	if (!job) {
		log_err("session %llu: no memory for a swap job",
			(unsigned long long)se->id);
		return;
	}
	job->lane = SCHED_MEM;
	job->run = run_swap;
	job->swap.out = what == POLICY_SWAP_OUT;
	job->done = policy_job_done;
	job->done_arg = sc;
	job->se = se;
	job->wait = w;
	sc->ops.get(se);
	if (w->own)
		w->refs++;
	if (what == POLICY_SWAP_OUT) {
		w->swap_jobs++;
		sc->swap_jobs++;
	} else {
		w->restore_jobs++;
	}
	if (what == POLICY_PREFETCH) {
		pthread_mutex_lock(&sc->stat_lock);
		sc->st.prefetches++;
		pthread_mutex_unlock(&sc->stat_lock);
	}
	sched_submit(sc, job);
}

/* ---------------------------------------------------------------------- */
/* Waits */

static void tick_arm(struct sched *sc);

static void plan_for(struct sched *sc, struct sched_wait *w, uint64_t now,
		     bool needed, struct sched_plan *p)
{
	uint64_t left = w->wait_until > now ? w->wait_until - now : 0;
	struct sched_stats st;

	pthread_mutex_lock(&sc->stat_lock);
	st.swap_out_bps = sc->st.swap_out_bps;
	st.swap_in_bps = sc->st.swap_in_bps;
	pthread_mutex_unlock(&sc->stat_lock);
	sched_plan_wait(&sc->cfg, now, left, resident_of(w), st.swap_out_bps,
			st.swap_in_bps, needed, p);
}

static uint64_t prefetch_fire(struct loop_timer *t, uint64_t now)
{
	struct sched_wait *w = container_of(t, struct sched_wait, prefetch);
	struct sched *sc = w->se->sc;

	w->prefetch_armed = false;
	if (!w->waiting || w->se->ended || w->ended)
		return 0;
	/* About to be back: no longer a victim before the others. */
	set_victim(w, 0);
	if (swapped_of(w)) {
		w->swapped_in_wait = true;
		w->prefetched = true;
		if (!w->restore_jobs)
			start(sc, w, POLICY_PREFETCH);
	}
	return 0;
}

static void begin_wait(struct sched *sc, struct sched_wait *w, uint64_t now,
		       uint64_t expected)
{
	struct sched_plan p;

	if (w->prefetch_armed) {
		loop_timer_del(&w->prefetch);
		w->prefetch_armed = false;
	}
	if (!w->waiting) {
		list_add_tail(&w->wnode, &sc->waiting);
		w->se->ctx_waiting += w->region != 0;
	}
	w->waiting = true;
	w->swapped_in_wait = false;
	w->prefetched = false;
	w->wait_start = now;
	w->wait_until = now + expected;
	if (sc->policy != DJINN_SCHED_SEMANTIC)
		return;
	set_victim(w, sched_victim_key(w->overran, w->wait_until));
	plan_for(sc, w, now, memory_needed(sc), &p);
	if (p.swap && !w->swap_jobs)
		start(sc, w, POLICY_SWAP_OUT);
	/* Back by the estimate's end, whoever swapped it meanwhile. */
	w->prefetch.fn = prefetch_fire;
	loop_timer_add(sc->loop, &w->prefetch, p.prefetch_at);
	w->prefetch_armed = true;
	tick_arm(sc);
}

/* The wait is over (a request, a signal, the end of its session or
 * context). Whether its data left the device during it (semantic). */
static bool end_wait(struct sched *sc, struct sched_wait *w, uint64_t now,
		     bool count)
{
	uint64_t est = w->wait_until - w->wait_start;
	bool out;

	if (!w->waiting)
		return false;
	w->waiting = false;
	w->se->ctx_waiting -= w->region != 0;
	list_del_init(&w->wnode);
	if (w->prefetch_armed) {
		loop_timer_del(&w->prefetch);
		w->prefetch_armed = false;
	}
	if (sc->policy != DJINN_SCHED_SEMANTIC)
		return false;
	set_victim(w, 0);
	if (!count)
		return false;
	/* Late by more than a tenth of the estimate (and a millisecond):
	 * next time it is the first to go. */
	w->overran = now > w->wait_until + est / 10 + NSEC_PER_MSEC;
	/* what is resident now: a restore that has brought it all back is a
	 * hit even before its job's end reaches this thread */
	out = swapped_of(w) != 0;
	if (out)
		w->swapped_in_wait = true;
	if (!w->swapped_in_wait)
		return false;
	pthread_mutex_lock(&sc->stat_lock);
	if (out)
		sc->st.prefetch_misses++;
	else
		sc->st.prefetch_hits++;
	pthread_mutex_unlock(&sc->stat_lock);
	return true;
}

/* Back from a wait during which its data left: what is still out comes
 * back at once, whole (the regions it uses next would come back one by
 * one, each on its request's path). A session swapped by reclaim
 * outside a wait gets each region back when it is used, as under lru. */
static void restore_now(struct sched *sc, struct sched_wait *w)
{
	if (!w->restore_jobs && swapped_of(w))
		start(sc, w, POLICY_RESTORE);
}

void policy_request(struct sched *sc, struct sched_wait *w)
{
	if (!sc->loop)
		return;
	if (end_wait(sc, w, loop_now(), true))
		restore_now(sc, w);
}

int sched_signal_check(const struct sched *sc, uint32_t phase,
		       uint64_t *expected_ns, char *msg, size_t msglen)
{
	if (phase != DJINN_PHASE_IO_WAIT)
		return 0;
	if (!*expected_ns) {
		snprintf(
			msg, msglen,
			"IO_WAIT needs an expected duration (expected_ns > 0)");
		return -EINVAL;
	}
	if (*expected_ns > INT64_MAX) {
		snprintf(msg, msglen,
			 "IO_WAIT of %llu ns: past INT64_MAX (a negative "
			 "duration converted?)",
			 (unsigned long long)*expected_ns);
		return -EINVAL;
	}
	if (*expected_ns > sc->cfg.max_io_wait_ns)
		*expected_ns = sc->cfg.max_io_wait_ns;
	return 0;
}

void sched_signal(struct sched *sc, struct sched_wait *w, uint32_t phase,
		  uint64_t expected_ns)
{
	uint64_t now = loop_now();

	w->phase = phase;
	if (phase == DJINN_PHASE_IO_WAIT) {
		begin_wait(sc, w, now, expected_ns);
		return;
	}
	if (end_wait(sc, w, now, true) && phase == DJINN_PHASE_COMPUTE)
		restore_now(sc, w);
}

struct sched_wait *sched_wait_new(struct sched *sc, struct sched_entity *se,
				  uint64_t region)
{
	struct sched_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->se = se;
	w->region = region;
	w->own = true;
	w->refs = 1;
	INIT_LIST_HEAD(&w->wnode);
	return w;
}

void sched_wait_end(struct sched *sc, struct sched_wait *w)
{
	if (!w)
		return;
	/* run_swap() reads it on a memory thread */
	__atomic_store_n(&w->ended, true, __ATOMIC_RELEASE);
	end_wait(sc, w, loop_now(), false);
	wait_put(w);
}

/* ---------------------------------------------------------------------- */
/* The tick: while sessions wait, swap them out once memory is needed */

static uint64_t tick_fire(struct loop_timer *t, uint64_t now)
{
	struct sched *sc = container_of(t, struct sched, tick);
	struct sched_wait *w;

	if (list_empty(&sc->waiting) || sc->policy != DJINN_SCHED_SEMANTIC) {
		sc->tick_armed = false;
		return 0;
	}
	if (sc->swap_jobs >= MAX_SWAP_JOBS || !memory_needed(sc))
		return TICK_NS;
	/* The best victim first: an overrunner, then the one back last. */
	for (unsigned int n = sc->swap_jobs; n < MAX_SWAP_JOBS; n++) {
		struct sched_wait *best = NULL;
		uint64_t best_key = 0;

		list_for_each_entry(w, &sc->waiting, wnode) {
			struct sched_plan p;
			uint64_t key;

			if (w->swap_jobs || w->prefetched || w->ended ||
			    w->se->ended)
				continue;
			plan_for(sc, w, now, true, &p);
			if (!p.swap || p.prefetch_at <= now)
				continue;
			key = sched_victim_key(w->overran, w->wait_until);
			if (key > best_key) {
				best_key = key;
				best = w;
			}
		}
		if (!best)
			break;
		start(sc, best, POLICY_SWAP_OUT);
	}
	return TICK_NS;
}

static void tick_arm(struct sched *sc)
{
	if (sc->tick_armed || !sc->loop)
		return;
	sc->tick.fn = tick_fire;
	loop_timer_add(sc->loop, &sc->tick, loop_now() + TICK_NS);
	sc->tick_armed = true;
}

bool sched_reserves(const struct sched *sc)
{
	return sc->policy == DJINN_SCHED_STATIC;
}

/* ---------------------------------------------------------------------- */
/* Set-up */

void policy_init(struct sched *sc)
{
	if (!sc->dev || !sc->dev->vmu)
		return;
	/* static partitioning: nothing leaves the device */
	vmu_set_swap(sc->dev->vmu, sc->policy != DJINN_SCHED_STATIC);
	/* a GPU copies each way on an engine of its own; a CPU device's
	 * copies are its spare core's */
	sc->nr_copy_engines =
		sc->dev->backend && strcmp(sc->dev->backend->name, "cpu") ? 2 :
									    1;
	policy_configure(sc);
}

void policy_configure(struct sched *sc)
{
	if (sc->dev && sc->dev->vmu)
		vmu_set_admit_wait(sc->dev->vmu, sc->cfg.admit_wait_ns);
}

void policy_fini(struct sched *sc)
{
	if (sc->tick_armed)
		loop_timer_del(&sc->tick);
	sc->tick_armed = false;
}

void policy_entity_end(struct sched *sc, struct sched_entity *se)
{
	end_wait(sc, &se->w, loop_now(), false);
}

void policy_entity_info(struct sched *sc, struct sched_entity *se,
			struct djinn_admin_sched_session *e)
{
	const struct sched_wait *w = &se->w;
	uint64_t now = loop_now();

	if (w->waiting && w->wait_until > now)
		e->phase_left_ns = w->wait_until - now;
	if (w->waiting && w->swapped_in_wait)
		e->flags |= DJINN_SCHED_SWAPPED_BY_SIGNAL;
	if (w->overran)
		e->flags |= DJINN_SCHED_OVERRAN;
	if (w->restore_jobs)
		e->flags |= DJINN_SCHED_PREFETCHING;
}
