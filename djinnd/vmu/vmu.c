// SPDX-License-Identifier: MIT
/*
 * The VMU: text, data and stack segments over a physical-memory provider.
 * Documentation/vmu.rst is the design; vmu.h is the contract. This is its
 * core; vmu_private.h says which file holds what and the locking and
 * accounting rules they all keep.
 */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "vmu/vmu_private.h"
#include "vmu/vmu_test.h"

/* ---------------------------------------------------------------------- */
/* Small helpers */

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

uint64_t vmu_granularity(const struct vmu *v)
{
	return v->gran;
}

struct vmu_provider *vmu_provider(const struct vmu *v)
{
	return v->prov;
}

uint64_t vmu_round(const struct vmu *v, uint64_t size)
{
	return round_up(size, v->gran);
}

/* The device's faults so far (cfg.faults), 0 for one that never faults. */
static uint64_t faults_now(const struct vmu *v)
{
	return v->cfg.faults ?
		       __atomic_load_n(v->cfg.faults, __ATOMIC_ACQUIRE) :
		       0;
}

uint64_t vmu_faults(const struct vmu *v)
{
	return faults_now(v);
}

static uint64_t avail(const struct vmu *v)
{
	uint64_t deferred =
		__atomic_load_n(&v->deferred_chunks, __ATOMIC_ACQUIRE);
	uint64_t used = v->committed + v->reserved + v->region_resv + deferred;

	return used < v->prov->capacity ? v->prov->capacity - used : 0;
}

void vmu_seg_add(struct vmu *v, enum vmu_seg seg, int64_t bytes)
{
	struct vmu_seg_stats *s = &v->st.seg[seg];

	s->used += bytes;
	if (s->used > s->peak)
		s->peak = s->used;
}

const char *vmu_pressure_name(enum vmu_pressure p)
{
	static const char *const names[] = { "normal", "warning", "critical" };

	return p <= VMU_PRESSURE_CRITICAL ? names[p] : "?";
}

const char *vmu_seg_name(enum vmu_seg seg)
{
	static const char *const names[] = { "text", "data", "stack" };

	return seg < VMU_NR_SEGS ? names[seg] : "?";
}

/* ---------------------------------------------------------------------- */
/* Locking and pressure */

/* The bytes held as the pressure level counts them. Lock held. Idle
 * stack backing does not count: admission trims it for nothing, and with
 * a stack per compute thread it would read as pressure on a device that
 * is not short of memory. */
static uint64_t pressure_used(const struct vmu *v)
{
	return v->committed - v->stack_idle + v->reserved + v->region_resv;
}

void vmu_pressure_update(struct vmu *v)
{
	uint64_t used = pressure_used(v);
	uint64_t cap = v->prov->capacity;
	enum vmu_pressure now = VMU_PRESSURE_NORMAL;

	if (used * 100 >= cap * v->cfg.crit_pct)
		now = VMU_PRESSURE_CRITICAL;
	else if (used * 100 >= cap * v->cfg.warn_pct)
		now = VMU_PRESSURE_WARNING;
	if (now != v->level) {
		v->notify = true;
		v->level = now;
	}
}

void vmu_lock(struct vmu *v)
{
	pthread_mutex_lock(&v->lock);
}

/*
 * Helpers that must let go of the lock in the middle of an operation (for
 * a copy, a mapping, a host allocation) use these, which never call the
 * pressure callback: the thread may hold a region MOVING that the
 * callback would wait for. Their comments say "drops the lock".
 */
void vmu_drop_lock(struct vmu *v)
{
	pthread_mutex_unlock(&v->lock);
}

void vmu_take_lock(struct vmu *v)
{
	pthread_mutex_lock(&v->lock);
}

static __thread bool in_pressure_cb;

/*
 * The unlock that ends a public call: tell the pressure callback of level
 * changes, one call at a time and in order, always ending on the level
 * as it is. A callback that calls back into the VMU is not re-entered;
 * the loop here picks up what its calls changed.
 */
void vmu_unlock(struct vmu *v)
{
	bool pending = v->notify && v->cfg.pressure_cb;
	enum vmu_pressure now, old;

	pthread_mutex_unlock(&v->lock);
	if (!pending || in_pressure_cb)
		return;
	pthread_mutex_lock(&v->cb_lock);
	in_pressure_cb = true;
	for (;;) {
		pthread_mutex_lock(&v->lock);
		now = v->level;
		v->notify = false;
		pthread_mutex_unlock(&v->lock);
		if (now == v->reported)
			break;
		old = v->reported;
		v->reported = now;
		v->cfg.pressure_cb(v->cfg.pressure_arg, old, now);
	}
	in_pressure_cb = false;
	pthread_mutex_unlock(&v->cb_lock);
}

static void charge_commit(struct vmu *v, uint64_t bytes)
{
	v->committed += bytes;
	vmu_pressure_update(v);
}

void vmu_uncharge(struct vmu *v, uint64_t bytes)
{
	v->committed -= bytes;
	vmu_pressure_update(v);
	if (bytes)
		pthread_cond_broadcast(&v->freed);
}

/* A reserved region's reservation follows its mapping: what is not
 * mapped of resv_to stays set aside. Lock held. */
static void resv_refill(struct vmu *v, struct vmu_region *r)
{
	uint64_t want;

	if (!r->resv_to)
		return;
	want = r->resv_to > r->m.mapped ? r->resv_to - r->m.mapped : 0;
	v->region_resv = v->region_resv - r->resv + want;
	r->resv = want;
	vmu_pressure_update(v);
}

static void resv_drop(struct vmu *v, struct vmu_region *r)
{
	v->region_resv -= r->resv;
	r->resv = 0;
	r->resv_to = 0;
	vmu_pressure_update(v);
	pthread_cond_broadcast(&v->freed);
}

/* ---------------------------------------------------------------------- */
/* Mappings: a reservation and the chunks mapped at its start */

int vmu_mapping_reserve(struct vmu *v, struct vmu_mapping *m, uint64_t size)
{
	*m = (struct vmu_mapping){ .vsize = size };
	return v->prov->ops->reserve(v->prov, size, v->gran, &m->addr);
}

/* Map one chunk so that @m->mapped becomes @to: a new one, or one of the
 * @nr kept pieces @pcs (ops->adopt). No lock needed: the caller owns @m
 * and has charged the bytes. */
int vmu_mapping_adopt(struct vmu *v, struct vmu_mapping *m, uint64_t to,
		      const struct vmu_piece *pcs, unsigned int nr)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t len = to - m->mapped, handle, have = 0;
	int ret;

	for (unsigned int i = 0; i < nr; i++)
		have += pcs[i].len;
	if (nr && (!ops->adopt || have != len))
		return -EINVAL;

	if (m->nr == m->cap) {
		unsigned int cap = m->cap ? m->cap * 2 : 4;
		struct vmu_chunk *c = realloc(m->chunks, cap * sizeof(*c));

		if (!c)
			return -ENOMEM;
		m->chunks = c;
		m->cap = cap;
	}
	ret = nr ? ops->adopt(v->prov, pcs, nr, &handle) :
		   ops->create(v->prov, len, &handle);
	if (ret)
		return ret;
	ret = ops->map(v->prov, m->addr + m->mapped, len, handle);
	if (ret) {
		ops->destroy(v->prov, handle);
		return ret;
	}
	m->chunks[m->nr++] = (struct vmu_chunk){ handle, m->mapped, len };
	m->mapped = to;
	return 0;
}

int vmu_mapping_grow(struct vmu *v, struct vmu_mapping *m, uint64_t to)
{
	return vmu_mapping_adopt(v, m, to, NULL, 0);
}

/* Unmap and destroy the chunks that lie wholly at or past @keep; returns
 * the bytes freed. A chunk that straddles @keep stays. */
uint64_t vmu_mapping_trim(struct vmu *v, struct vmu_mapping *m, uint64_t keep)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t freed = 0;

	while (m->nr && m->chunks[m->nr - 1].off >= keep) {
		struct vmu_chunk *c = &m->chunks[m->nr - 1];

		ops->unmap(v->prov, m->addr + c->off, c->size);
		if (!vmu_defer_free(v, c->handle, NULL, c->size))
			ops->destroy(v->prov, c->handle);
		freed += c->size;
		m->mapped = c->off;
		m->nr--;
	}
	return freed;
}

void vmu_mapping_release(struct vmu *v, struct vmu_mapping *m)
{
	vmu_mapping_trim(v, m, 0);
	if (m->vsize)
		v->prov->ops->release(v->prov, m->addr, m->vsize);
	free(m->chunks);
	*m = (struct vmu_mapping){ 0 };
}

/* ---------------------------------------------------------------------- */
/* Region accounting */

static void usage_add(struct vmu_usage *u, const struct region_share *sh,
		      int sign)
{
	u->data_bytes += sign * sh->foot;
	u->resident += sign * sh->resident;
	u->swapped += sign * sh->swapped;
	u->cached += sign * sh->cached;
}

/* Add (+1) the region's share of every counter, taken from its state now,
 * or remove (-1) what was added last. */
void vmu_region_acct(struct vmu *v, struct vmu_region *r, int sign)
{
	struct region_share *sh = &r->share;

	if (sign > 0) {
		bool on_dev = r->state != VMU_REGION_SWAPPED;
		uint64_t need = vmu_round(v, r->size);

		*sh = (struct region_share){ 0 };
		sh->dev = on_dev ? r->m.mapped : 0;
		if (r->cached) {
			sh->cached = sh->dev;
		} else {
			/* While MOVING, count what it holds or will hold. */
			sh->foot = r->m.mapped > need ? r->m.mapped : need;
			if (r->target > sh->foot)
				sh->foot = r->target;
			if (r->state == VMU_REGION_RESIDENT)
				sh->foot = r->m.mapped;
			if (on_dev)
				sh->resident = sh->foot;
			else
				sh->swapped = sh->foot;
		}
		sh->host = r->host_size;
		if (!r->cached && r->state == VMU_REGION_RESIDENT && !r->pins)
			sh->idle = r->m.mapped;
	}
	vmu_seg_add(v, VMU_SEG_DATA, sign * (int64_t)sh->dev);
	v->data_idle += sign * sh->idle;
	v->st.data_cached += sign * sh->cached;
	v->st.swapped_now += sign * sh->host;
	usage_add(&r->s->use, sh, sign);
	usage_add(&r->s->tenant->use, sh, sign);
}

/* ---------------------------------------------------------------------- */
/* Reclaim: what admission and every allocation fall back on */

static void region_free_locked(struct vmu *v, struct vmu_region *r);

/* Device bytes that swapping idle regions would free. Regions swap whole,
 * so under a swap limit count them in the order reclaim takes them. */
static uint64_t swappable(struct vmu *v)
{
	uint64_t room, idle = 0;
	struct vmu_region *r;

	if (v->no_swap)
		return 0;
	if (!v->cfg.swap_limit && !v->nr_swap_quotas && !v->nr_guarantees)
		return v->data_idle;
	room = !v->cfg.swap_limit ? UINT64_MAX :
	       v->cfg.swap_limit > v->st.swapped_now ?
				    v->cfg.swap_limit - v->st.swapped_now :
				    0;
	list_for_each_entry(r, &v->data_lru, lru) {
		uint64_t host = vmu_round(v, r->size);

		if (r->pins || !r->m.mapped || host > room ||
		    vmu_over_swap_quota(r->s->tenant, host) ||
		    vmu_guarded(r->s->tenant, r->m.mapped))
			continue;
		room -= host;
		idle += r->m.mapped;
	}
	return idle;
}

static uint64_t reclaimable(struct vmu *v)
{
	return v->st.data_cached + v->stack_idle + v->st.text_cached +
	       swappable(v);
}

/* Trim the backing of a stack no request is using. */
static bool trim_idle_stack(struct vmu *v)
{
	struct vmu_stack *st;

	list_for_each_entry(st, &v->stacks, node) {
		if (st->active || !st->m.mapped)
			continue;
		v->stack_idle -= st->m.mapped;
		vmu_seg_add(v, VMU_SEG_STACK, -(int64_t)st->m.mapped);
		vmu_uncharge(v, vmu_mapping_trim(v, &st->m, 0));
		return true;
	}
	return false;
}

/*
 * Free memory until @want bytes are available, cheapest first: cached
 * regions, idle stack backing, unheld text (oldest first), then idle data
 * regions swapped out (least recently used first). Lock held; drops it
 * while freeing and swapping. Returns true if @want is available.
 */
/* A region's reclaim key: its own or its session's, the higher. */
static uint64_t victim_key(const struct vmu_region *r)
{
	return r->victim > r->s->victim ? r->victim : r->s->victim;
}

static bool reclaim_locked(struct vmu *v, uint64_t want)
{
	uint64_t gen = ++v->reclaim_gen;

	while (avail(v) < want) {
		struct vmu_region *r, *victim = NULL;

		if (!list_empty(&v->region_cache)) {
			r = list_first_entry(&v->region_cache,
					     struct vmu_region, lru);
			region_free_locked(v, r);
			continue;
		}
		if (trim_idle_stack(v))
			continue;
		if (!list_empty(&v->text_lru)) {
			struct vmu_text *t = list_first_entry(
				&v->text_lru, struct vmu_text, lru);

			vmu_text_free_locked(v, t);
			v->st.text_evictions++;
			continue;
		}
		/* The first in LRU order of the sessions with the highest
		 * victim key (the scheduler's: 0 for most). */
		list_for_each_entry(r, &v->data_lru, lru) {
			if (v->no_swap)
				break;
			/* a tenant within its guaranteed share keeps it */
			if (r->pins || !r->m.mapped || r->fail_gen == gen ||
			    r->resv_to ||
			    vmu_guarded(r->s->tenant, r->m.mapped))
				continue;
			if (!victim || victim_key(r) > victim_key(victim))
				victim = r;
			if (!v->nr_victims) /* plain LRU: the first */
				break;
		}
		if (!victim)
			return false;
		/* One that cannot be swapped (limit, copy error) is passed
		 * over for the rest of this pass, wherever it ends up in
		 * the LRU; the loop ends when none are left. */
		if (vmu_swap_out_locked(v, victim))
			victim->fail_gen = gen;
	}
	return true;
}

uint64_t vmu_reclaim(struct vmu *v, uint64_t bytes)
{
	uint64_t now;

	vmu_lock(v);
	reclaim_locked(v, bytes);
	now = avail(v);
	vmu_unlock(v);
	return now;
}

/*
 * Charge @bytes of physical memory: from @resv first, the rest from free
 * memory, reclaiming if need be; *@from_resv says how much came from
 * @resv, for vmu_uncharge_resv(). Lock held; drops it while reclaiming.
 */
/* The thread that commits the crash journal's records (vmu_journal_on()'s
 * caller, the I/O thread): it never waits for one. */
static __thread bool journal_thread;

/* How long an allocation waits for the journal's next record to free
 * what waits for it, whatever vmu_set_admit_wait() says: it is written
 * at once (the free woke its loop), so this bounds only a stuck loop. */
#define JOURNAL_WAIT_NS (2 * NSEC_PER_SEC)

static void deadline_after(struct timespec *ts, uint64_t ns);

/*
 * Memory freed (a region reclaim just swapped out, say) that waits for
 * the crash journal's next record is had once the record is written:
 * wait for it, when it would make @need fit, but on the thread that
 * writes the records. Lock held; the wait drops it. Whether @need fits.
 */
static bool journal_wait_locked(struct vmu *v, uint64_t need)
{
	struct timespec until;

	if (journal_thread)
		return avail(v) >= need;
	deadline_after(&until, JOURNAL_WAIT_NS);
	for (;;) {
		uint64_t waiting =
			__atomic_load_n(&v->deferred_chunks, __ATOMIC_ACQUIRE);

		if (avail(v) >= need || !waiting || avail(v) + waiting < need ||
		    pthread_cond_timedwait(&v->freed, &v->lock, &until) ==
			    ETIMEDOUT)
			break;
	}
	return avail(v) >= need;
}

int vmu_charge(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
	       uint64_t *from_resv)
{
	uint64_t take = 0, rest;

	if (resv && resv->vmu == v)
		take = resv->bytes < bytes ? resv->bytes : bytes;
	rest = bytes - take;
	/* @resv has one owner, this thread: its bytes stay put while the
	 * lock is dropped for reclaim. */
	if (rest && avail(v) < rest && !reclaim_locked(v, rest) &&
	    !journal_wait_locked(v, rest))
		return -ENOMEM;
	if (take) {
		resv->bytes -= take;
		v->reserved -= take;
	}
	charge_commit(v, bytes);
	*from_resv = take;
	return 0;
}

/* Undo a vmu_charge() whose memory could not be had after all: the bytes go
 * back where they came from. The chunks are already freed. */
void vmu_uncharge_resv(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
		       uint64_t from_resv)
{
	vmu_uncharge(v, bytes);
	if (from_resv) {
		resv->bytes += from_resv;
		v->reserved += from_resv;
		vmu_pressure_update(v);
	}
}

/* ---------------------------------------------------------------------- */
/* Admission */

enum vmu_fit vmu_admit_check_locked(struct vmu *v, uint64_t need, char *msg,
				    size_t msglen)
{
	uint64_t free_now = avail(v), more = reclaimable(v);
	enum vmu_fit f = need <= free_now	 ? VMU_FIT_NOW :
			 need <= free_now + more ? VMU_FIT_AFTER_RECLAIM :
						   VMU_FIT_NEVER;

	if (msg && msglen)
		snprintf(
			msg, msglen,
			"need %llu bytes, available %llu (free %llu + reclaimable %llu) of %llu",
			(unsigned long long)need,
			(unsigned long long)(free_now + more),
			(unsigned long long)free_now, (unsigned long long)more,
			(unsigned long long)v->prov->capacity);
	return f;
}

enum vmu_fit vmu_admit_check(struct vmu *v, uint64_t need, char *msg,
			     size_t msglen)
{
	enum vmu_fit f;

	vmu_lock(v);
	f = vmu_admit_check_locked(v, need, msg, msglen);
	vmu_unlock(v);
	return f;
}

/* Whether memory is on its way back: another request's reservation or
 * stack (it ends), a region moving (a swap-out finishing). @own is the
 * caller's stack, which does not count. Lock held. */
static bool coming_free(struct vmu *v, const struct vmu_stack *own)
{
	const struct vmu_stack *st;

	if (v->reserved || v->nr_moving ||
	    __atomic_load_n(&v->deferred_chunks, __ATOMIC_ACQUIRE))
		return true; /* a journal's record frees what waits for it */
	list_for_each_entry(st, &v->stacks, node)
		if (st != own && st->active && st->m.mapped)
			return true;
	return false;
}

static void deadline_after(struct timespec *ts, uint64_t ns)
{
	*ts = ns_to_timespec(mono_ns() + ns);
}

/*
 * Memory that does not fit now may come free: wait for it, up to
 * admit_wait_ns, retrying on every release. True if @need fits now. Lock
 * held; the wait drops it.
 */
static bool admit_wait(struct vmu *v, uint64_t need,
		       const struct vmu_stack *own)
{
	struct timespec until;
	bool ok = false;

	if (!v->admit_wait_ns || need > v->prov->capacity ||
	    !coming_free(v, own))
		return false;
	deadline_after(&until, v->admit_wait_ns);
	v->st.admit_waits++;
	v->st.admit_waiting++;
	for (;;) {
		int ret = pthread_cond_timedwait(&v->freed, &v->lock, &until);

		if (vmu_admit_check_locked(v, need, NULL, 0) ==
		    VMU_FIT_AFTER_RECLAIM)
			reclaim_locked(v, need);
		if (avail(v) >= need) {
			ok = true;
			break;
		}
		if (ret == ETIMEDOUT || !coming_free(v, own))
			break;
	}
	v->st.admit_waiting--;
	if (!ok)
		v->st.admit_timeouts++;
	return ok;
}

/* Lock held; drops it while reclaiming and waiting. */
int vmu_admit_locked(struct vmu *v, uint64_t need, struct vmu_resv *r,
		     const struct vmu_stack *own, char *msg, size_t msglen)
{
	enum vmu_fit f;
	int ret = 0;

	f = vmu_admit_check_locked(v, need, msg, msglen);
	if (f == VMU_FIT_AFTER_RECLAIM) {
		v->st.admit_reclaims++;
		reclaim_locked(v, need);
	}
	/* what reclaim just swapped out waits for the crash journal's
	 * record, as in vmu_charge() */
	if (avail(v) < need &&
	    (journal_wait_locked(v, need) || admit_wait(v, need, own)))
		f = VMU_FIT_NOW;
	if (f == VMU_FIT_NEVER || avail(v) < need) {
		vmu_admit_check_locked(v, need, msg, msglen);
		v->st.admit_refusals++;
		ret = -ENOMEM;
		goto out;
	}
	v->reserved += need;
	r->bytes = need;
	v->st.admits++;
	vmu_pressure_update(v);
out:
	return ret;
}

int vmu_admit(struct vmu *v, uint64_t need, struct vmu_resv *r, char *msg,
	      size_t msglen)
{
	int ret;

	*r = (struct vmu_resv){ .vmu = v };
	vmu_lock(v);
	ret = vmu_admit_locked(v, need, r, NULL, msg, msglen);
	vmu_unlock(v);
	return ret;
}

void vmu_resv_release(struct vmu_resv *r)
{
	struct vmu *v = r->vmu;

	if (!v)
		return;
	vmu_lock(v);
	v->reserved -= r->bytes;
	r->bytes = 0;
	vmu_pressure_update(v);
	pthread_cond_broadcast(&v->freed);
	vmu_unlock(v);
}

/* ---------------------------------------------------------------------- */
/* Creation and configuration */

static int check_thresholds(unsigned int warn, unsigned int crit)
{
	return warn && warn < crit && crit <= 100 ? 0 : -EINVAL;
}

int vmu_create(struct vmu_provider *prov, const struct vmu_config *cfg,
	       struct vmu **out)
{
	struct vmu *v;

	if (!prov || !prov->granularity || !prov->capacity ||
	    (prov->granularity & (prov->granularity - 1)))
		return -EINVAL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (cfg)
		v->cfg = *cfg;
	if (!v->cfg.warn_pct)
		v->cfg.warn_pct = 80;
	if (!v->cfg.crit_pct)
		v->cfg.crit_pct = 95;
	if (!v->cfg.swap_cache)
		v->cfg.swap_cache = prov->capacity / 4;
	if (!v->cfg.session_cache)
		v->cfg.session_cache = prov->capacity / 4;
	if (check_thresholds(v->cfg.warn_pct, v->cfg.crit_pct)) {
		free(v);
		return -EINVAL;
	}
	v->prov = prov;
	v->gran = prov->granularity;
	v->hash_size = 64;
	v->hash = calloc(v->hash_size, sizeof(*v->hash));
	if (!v->hash) {
		free(v);
		return -ENOMEM;
	}
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->moved, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&v->freed, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_mutex_init(&v->cb_lock, NULL);
	INIT_LIST_HEAD(&v->tenants);
	INIT_LIST_HEAD(&v->sessions);
	INIT_LIST_HEAD(&v->stacks);
	INIT_LIST_HEAD(&v->text_lru);
	INIT_LIST_HEAD(&v->data_lru);
	INIT_LIST_HEAD(&v->region_cache);
	INIT_LIST_HEAD(&v->swapbufs);
	INIT_LIST_HEAD(&v->deferred);
	pthread_mutex_init(&v->jlock, NULL);
	slots_init(&v->slots, sizeof(struct vmu_slot), 64, 0, 0);
	v->text_epoch = faults_now(v);
	*out = v;
	return 0;
}

int vmu_set_thresholds(struct vmu *v, unsigned int warn_pct,
		       unsigned int crit_pct)
{
	int ret;

	vmu_lock(v);
	warn_pct = warn_pct ? warn_pct : v->cfg.warn_pct;
	crit_pct = crit_pct ? crit_pct : v->cfg.crit_pct;
	ret = check_thresholds(warn_pct, crit_pct);
	if (!ret) {
		v->cfg.warn_pct = warn_pct;
		v->cfg.crit_pct = crit_pct;
		vmu_pressure_update(v);
	}
	vmu_unlock(v);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Tenants and sessions */

static struct vmu_tenant *tenant_find(struct vmu *v, const char *name)
{
	struct vmu_tenant *t;

	list_for_each_entry(t, &v->tenants, node)
		if (!strcmp(t->name, name))
			return t;
	return NULL;
}

int vmu_tenant_get_locked(struct vmu *v, const char *name,
			  struct vmu_tenant **out)
{
	struct vmu_tenant *t;

	if (!name || !*name || strlen(name) >= VMU_NAME_MAX)
		return -EINVAL;
	t = tenant_find(v, name);
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		strcpy(t->name, name);
		list_add_tail(&t->node, &v->tenants);
	}
	*out = t;
	return 0;
}

/* Free a tenant nobody uses and that carries no quota. */
void vmu_tenant_put_locked(struct vmu_tenant *t)
{
	if (t->sessions || t->texts || t->use.quota || t->use.swap_quota ||
	    t->use.guaranteed)
		return;
	list_del_init(&t->node);
	free(t);
}

int vmu_session_create(struct vmu *v, const char *tenant,
		       struct vmu_session **out)
{
	struct vmu_session *s;
	int ret;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	vmu_lock(v);
	ret = vmu_tenant_get_locked(v, tenant, &s->tenant);
	if (ret) {
		vmu_unlock(v);
		free(s);
		return ret;
	}
	s->tenant->sessions++;
	s->vmu = v;
	INIT_LIST_HEAD(&s->regions);
	INIT_LIST_HEAD(&s->cache);
	INIT_LIST_HEAD(&s->refs);
	INIT_LIST_HEAD(&s->uploads);
	list_add_tail(&s->node, &v->sessions);
	vmu_unlock(v);
	*out = s;
	return 0;
}

int vmu_session_set_quota(struct vmu_session *s, uint64_t bytes)
{
	vmu_lock(s->vmu);
	s->use.quota = bytes;
	vmu_unlock(s->vmu);
	return 0;
}

/* Set @tenant's limit @field (of its struct vmu_usage) to @bytes; @nr,
 * when not NULL, counts the tenants with that limit set. */
static int tenant_set(struct vmu *v, const char *tenant, size_t field,
		      unsigned int *nr, uint64_t bytes)
{
	struct vmu_tenant *t;
	uint64_t *limit;
	int ret;

	vmu_lock(v);
	ret = vmu_tenant_get_locked(v, tenant, &t);
	if (!ret) {
		limit = (uint64_t *)((char *)&t->use + field);
		if (nr)
			*nr += (bytes != 0) - (*limit != 0);
		*limit = bytes;
		vmu_tenant_put_locked(t);
	}
	vmu_unlock(v);
	return ret;
}

int vmu_tenant_set_guarantee(struct vmu *v, const char *tenant, uint64_t bytes)
{
	return tenant_set(v, tenant, offsetof(struct vmu_usage, guaranteed),
			  &v->nr_guarantees, bytes);
}

int vmu_tenant_set_swap_quota(struct vmu *v, const char *tenant, uint64_t bytes)
{
	return tenant_set(v, tenant, offsetof(struct vmu_usage, swap_quota),
			  &v->nr_swap_quotas, bytes);
}

int vmu_tenant_set_quota(struct vmu *v, const char *tenant, uint64_t bytes)
{
	return tenant_set(v, tenant, offsetof(struct vmu_usage, quota), NULL,
			  bytes);
}

void vmu_session_usage(struct vmu_session *s, struct vmu_usage *u)
{
	vmu_lock(s->vmu);
	*u = s->use;
	vmu_unlock(s->vmu);
}

int vmu_tenant_usage(struct vmu *v, const char *tenant, struct vmu_usage *u)
{
	struct vmu_tenant *t;

	vmu_lock(v);
	t = tenant ? tenant_find(v, tenant) : NULL;
	if (t)
		*u = t->use;
	vmu_unlock(v);
	return t ? 0 : -ENOENT;
}

int vmu_tenant_stage(struct vmu_session *s, uint64_t bytes, uint64_t limit,
		     uint64_t *held)
{
	struct vmu_tenant *t = s->tenant;
	int ret = 0;

	vmu_lock(s->vmu);
	*held = t->staged;
	if (bytes > limit || t->staged > limit - bytes)
		ret = -EDQUOT;
	else
		t->staged += bytes;
	vmu_unlock(s->vmu);
	return ret;
}

void vmu_tenant_unstage(struct vmu_session *s, uint64_t bytes)
{
	vmu_lock(s->vmu);
	s->tenant->staged -= bytes;
	vmu_unlock(s->vmu);
}

static bool over_quota(const struct vmu_session *s, uint64_t bytes)
{
	const struct vmu_usage *su = &s->use;

	return (su->quota && su->data_bytes + bytes > su->quota) ||
	       vmu_over_tenant_quota(s->tenant, bytes);
}

/* -EDQUOT if adding @bytes to the session's data would pass a quota. */
static int quota_check(struct vmu *v, struct vmu_session *s, uint64_t bytes)
{
	if (over_quota(s, bytes) &&
	    (!vmu_text_trim_tenant_locked(v, s->tenant, bytes) ||
	     over_quota(s, bytes))) {
		v->st.quota_refusals++;
		return -EDQUOT;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Region handles */

static int slot_alloc(struct vmu *v, struct vmu_region *r)
{
	struct vmu_slot *sl;
	int ret;

	sl = slots_alloc(&v->slots, &ret);
	if (!sl)
		return ret;
	sl->r = r;
	r->slot = slots_index(&v->slots, sl);
	return 0;
}

static void slot_free(struct vmu *v, uint32_t i)
{
	slots_free(&v->slots, slots_at(&v->slots, i));
}

static uint64_t handle_of(const struct vmu *v, const struct vmu_region *r)
{
	return slots_handle(&v->slots, slots_at(&v->slots, r->slot));
}

/* The session's region named by @h, or NULL: stale, foreign or forged
 * handles all look the same from outside. */
static struct vmu_region *region_get(struct vmu_session *s, uint64_t h)
{
	struct vmu_slot *sl = slots_lookup(&s->vmu->slots, h);

	return sl && sl->r->s == s ? sl->r : NULL;
}

/* As region_get(), once no swap or remap is in progress on it. Waiting
 * drops the lock, and the region may be destroyed meanwhile, so the
 * handle is looked up again after every wait. */
struct vmu_region *vmu_region_get_settled(struct vmu_session *s, uint64_t h)
{
	struct vmu_region *r;

	while ((r = region_get(s, h)) && r->state == VMU_REGION_MOVING)
		pthread_cond_wait(&s->vmu->moved, &s->vmu->lock);
	return r;
}

/* ---------------------------------------------------------------------- */
/* Data regions */

/* The scheduler's reclaim key for @r alone (lock held). */
static void region_victim_locked(struct vmu *v, struct vmu_region *r,
				 uint64_t key)
{
	v->nr_victims += (key != 0) - (r->victim != 0);
	r->victim = key;
}

/* Release a region for good: no handle, no list points at it any more.
 * Lock held; drops it to free the physical memory, then uncharges. */
static void region_free_locked(struct vmu *v, struct vmu_region *r)
{
	uint64_t dev;

	region_victim_locked(v, r, 0);
	vmu_region_acct(v, r, -1);
	dev = r->share.dev;
	if (r->resv)
		resv_drop(v, r);
	list_del_init(&r->lru);
	list_del_init(&r->snode);
	if (r->host)
		vmu_swapbuf_put(v, r->host, r->host_size);
	v->st.seg[VMU_SEG_DATA].entries -= !r->cached;
	vmu_drop_lock(v);
	vmu_mapping_release(v, &r->m);
	free(r);
	vmu_take_lock(v);
	vmu_uncharge(v, dev);
}

int vmu_region_create(struct vmu_session *s, uint64_t max_size,
		      uint64_t *handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r, *c;
	uint64_t vsize;
	int ret;

	if (!max_size || max_size > UINT64_MAX - v->gran)
		return -EINVAL;
	vsize = vmu_round(v, max_size);
	if (vsize > v->prov->capacity)
		return -E2BIG;

	vmu_lock(v);
	/* A destroyed region of the same shape is reused as it is. */
	list_for_each_entry(c, &s->cache, snode) {
		if (c->m.vsize != vsize || over_quota(s, c->m.mapped))
			continue;
		ret = slot_alloc(v, c);
		if (ret) {
			vmu_unlock(v);
			return ret;
		}
		vmu_region_acct(v, c, -1);
		list_del_init(&c->snode);
		list_del_init(&c->lru);
		c->cached = false;
		r = c;
		goto publish;
	}
	vmu_unlock(v);

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = vmu_mapping_reserve(v, &r->m, vsize);
	if (ret)
		goto out_free;
	r->s = s;
	r->state = VMU_REGION_RESIDENT;
	INIT_LIST_HEAD(&r->lru);
	vmu_lock(v);
	ret = slot_alloc(v, r);
	if (ret)
		goto out_release;
publish:
	r->size = 0;
	r->max_size = max_size;
	list_add_tail(&r->snode, &s->regions);
	list_add_tail(&r->lru, &v->data_lru);
	vmu_region_acct(v, r, +1);
	v->st.seg[VMU_SEG_DATA].entries++;
	v->st.seg[VMU_SEG_DATA].allocs++;
	s->use.regions++;
	s->tenant->use.regions++;
	*handle = handle_of(v, r);
	vmu_unlock(v);
	return 0;

out_release:
	vmu_unlock(v);
	vmu_mapping_release(v, &r->m);
out_free:
	free(r);
	return ret;
}

/* Before @r grows, with the crash journal on: its chunks as they are,
 * which a record names while it grows (vmu_region_pieces()); none
 * copied (no memory), a record waits for the growth. Lock held. */
static void grow_note(struct vmu *v, struct vmu_region *r)
{
	if (!__atomic_load_n(&v->journal, __ATOMIC_ACQUIRE) || !r->m.nr)
		return;
	r->grow_was = malloc(r->m.nr * sizeof(*r->grow_was));
	if (!r->grow_was)
		return;
	memcpy(r->grow_was, r->m.chunks, r->m.nr * sizeof(*r->grow_was));
	r->grow_nr = r->m.nr;
	r->grow_mapped = r->m.mapped;
}

/* Lock held; drops it to map and zero the new chunk, or (@f's pieces) to
 * map the kept pieces, their bytes as they are. */
static int region_grow_locked(struct vmu *v, struct vmu_region *r,
			      uint64_t size, struct vmu_resv *resv,
			      const struct vmu_fill *f)
{
	uint64_t to = vmu_round(v, size), from = r->m.mapped, from_resv;
	uint64_t own = r->resv < to - from ? r->resv : to - from;
	int ret;

	ret = quota_check(v, r->s, to - from);
	if (ret)
		return ret;
	/* Counted against the quota from now, so no other growth of this
	 * session can pass the check meanwhile. */
	r->target = to;
	vmu_region_set_state(v, r, VMU_REGION_MOVING);
	/* from here: the charge may reclaim, and wait for a record */
	grow_note(v, r);
	/* A reserved region's growth comes from its reservation first. */
	r->resv -= own;
	v->region_resv -= own;
	ret = vmu_charge(v, to - from - own, resv, &from_resv);
	if (ret) {
		r->resv += own;
		v->region_resv += own;
		goto out;
	}
	charge_commit(v, own);
	vmu_drop_lock(v);
	if (f && f->nr_pieces) {
		ret = vmu_mapping_adopt(v, &r->m, to, f->pieces, f->nr_pieces);
	} else {
		ret = vmu_mapping_grow(v, &r->m, to);
		if (!ret)
			ret = v->prov->ops->memset(v->prov, r->m.addr + from, 0,
						   to - from);
	}
	if (ret)
		vmu_mapping_trim(v, &r->m, from);
	vmu_take_lock(v);
	if (ret) {
		vmu_uncharge_resv(v, to - from - own, resv, from_resv);
		vmu_uncharge(v, own);
		r->resv += own;
		v->region_resv += own;
	} else {
		r->size = size;
	}
out:
	free(r->grow_was);
	r->grow_was = NULL;
	r->target = 0;
	vmu_region_set_state(v, r, VMU_REGION_RESIDENT);
	return ret;
}

/* Release the chunks past the region's size, unless it is pinned: a
 * pinned region's memory may be in use, so it is trimmed on the last
 * unpin instead. Lock held. */
static void region_trim_locked(struct vmu *v, struct vmu_region *r)
{
	if (r->pins || r->state != VMU_REGION_RESIDENT)
		return;
	vmu_region_acct(v, r, -1);
	vmu_uncharge(v, vmu_mapping_trim(v, &r->m, vmu_round(v, r->size)));
	resv_refill(v, r);
	vmu_region_acct(v, r, +1);
}

int vmu_region_resize(struct vmu_session *s, uint64_t handle, uint64_t size,
		      struct vmu_resv *resv)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	if (size > r->max_size) {
		ret = -E2BIG;
		goto out;
	}
	if (r->state == VMU_REGION_SWAPPED) {
		ret = vmu_swap_in_locked(v, r, resv);
		if (ret)
			goto out;
	}
	if (vmu_round(v, size) > r->m.mapped) {
		ret = region_grow_locked(v, r, size, resv, NULL);
	} else {
		vmu_region_acct(v, r, -1);
		r->size = size;
		vmu_region_acct(v, r, +1);
		region_trim_locked(v, r);
	}
	if (!ret && r->state == VMU_REGION_RESIDENT)
		list_move_tail(&r->lru, &v->data_lru);
out:
	vmu_unlock(v);
	return ret;
}

int vmu_region_fill(struct vmu_session *s, uint64_t handle, uint64_t size,
		    const struct vmu_fill *f)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret;

	if (!f->nr_pieces && !f->swapped) {
		ret = vmu_region_resize(s, handle, size, NULL);
		return ret || !size ?
			       ret :
			       vmu_region_write(s, handle, 0, f->bytes, size);
	}
	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (!r)
		ret = -ENOENT;
	else if (size > r->max_size)
		ret = -E2BIG;
	else if (r->m.mapped || r->state != VMU_REGION_RESIDENT)
		ret = -EBUSY;
	else if (f->swapped && f->nr_pieces)
		ret = f->nr_pieces == 1 ?
			      vmu_swap_adopt_locked(v, r, size, f->pieces) :
			      -EINVAL;
	else if (f->swapped)
		ret = vmu_swap_fill_locked(v, r, size, f->bytes);
	else if (!size)
		ret = -EINVAL;
	else
		ret = region_grow_locked(v, r, size, NULL, f);
	if (!ret && r->state == VMU_REGION_RESIDENT)
		list_move_tail(&r->lru, &v->data_lru);
	vmu_unlock(v);
	return ret;
}

int vmu_mapping_pieces(struct vmu *v, const struct vmu_mapping *m, uint64_t len,
		       struct vmu_piece **out, unsigned int *nr)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	struct vmu_piece *p = NULL;
	unsigned int n = 0, cap = 0;

	if (!ops->pieces)
		return -EOPNOTSUPP;
	len = vmu_round(v, len);
	if (len > m->mapped)
		return -ERANGE;
	for (unsigned int i = 0; i < m->nr && m->chunks[i].off < len; i++) {
		const struct vmu_chunk *c = &m->chunks[i];
		uint64_t want = len - c->off < c->size ? len - c->off : c->size;
		unsigned int k = ops->pieces(v->prov, c->handle, NULL, 0);
		struct vmu_piece *q;

		if (n + k > cap) {
			cap = (n + k) * 2;
			q = realloc(p, cap * sizeof(*p));
			if (!q) {
				free(p);
				return -ENOMEM;
			}
			p = q;
		}
		ops->pieces(v->prov, c->handle, p + n, k);
		/* the chunk's pieces up to @want bytes of it, after the
		 * last one where they go on from it */
		for (unsigned int j = 0, base = n; j < k && want; j++) {
			struct vmu_piece x = p[base + j];

			x.len = x.len < want ? x.len : want;
			want -= x.len;
			if (n && p[n - 1].off + p[n - 1].len == x.off)
				p[n - 1].len += x.len;
			else
				p[n++] = x;
		}
	}
	*out = p;
	*nr = n;
	return 0;
}

/* Whether @r grows over its first @len bytes, which its chunks before
 * hold (grow_note()). Lock held. */
static bool grown_over(struct vmu *v, const struct vmu_region *r, uint64_t len)
{
	return r->grow_was && vmu_round(v, len) <= r->grow_mapped;
}

int vmu_region_pieces(struct vmu_session *s, uint64_t handle, uint64_t len,
		      struct vmu_piece **out, unsigned int *nr,
		      const void **host, uint64_t *max_size)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	/* a swap-in under way has its host copy (r->host) still, a
	 * swap-out its mapping (r->copying_out), a growth its chunks
	 * before (r->grow_was): each is named at once */
	while ((r = region_get(s, handle)) && r->state == VMU_REGION_MOVING &&
	       !r->host && !r->copying_out && !grown_over(v, r, len))
		pthread_cond_wait(&v->moved, &v->lock);
	if (!r) {
		ret = -ENOENT;
	} else {
		if (max_size)
			*max_size = r->max_size;
		if (r->state != VMU_REGION_RESIDENT && !r->copying_out &&
		    !grown_over(v, r, len)) {
			*host = r->host;
			ret = -ENODATA;
		}
	}
	if (!ret && r->state == VMU_REGION_MOVING && !r->copying_out) {
		struct vmu_mapping was = { .mapped = r->grow_mapped,
					   .chunks = r->grow_was,
					   .nr = r->grow_nr };

		ret = vmu_mapping_pieces(v, &was, len, out, nr);
	} else if (!ret) {
		ret = vmu_mapping_pieces(v, &r->m, len, out, nr);
	}
	vmu_unlock(v);
	return ret;
}

int vmu_region_destroy(struct vmu_session *s, uint64_t handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	if (r->pins) {
		ret = -EBUSY;
		goto out;
	}
	slot_free(v, r->slot);
	s->use.regions--;
	s->tenant->use.regions--;
	v->st.seg[VMU_SEG_DATA].frees++;
	resv_drop(v, r);
	region_victim_locked(v, r, 0);
	if (r->state == VMU_REGION_RESIDENT && r->m.mapped &&
	    s->use.cached + r->m.mapped <= v->cfg.session_cache) {
		/* Keep it mapped for the session's next region this shape. */
		vmu_region_acct(v, r, -1);
		list_del_init(&r->lru);
		list_move_tail(&r->snode, &s->cache);
		list_add_tail(&r->lru, &v->region_cache);
		r->cached = true;
		r->size = 0;
		vmu_region_acct(v, r, +1);
		v->st.seg[VMU_SEG_DATA].entries--;
		goto out;
	}
	region_free_locked(v, r);
out:
	vmu_unlock(v);
	return ret;
}

static void region_fill_info(struct vmu_region *r, struct vmu_region_info *i)
{
	if (!i)
		return;
	*i = (struct vmu_region_info){
		.addr = r->m.addr,
		.size = r->size,
		.mapped = r->m.mapped,
		.max_size = r->max_size,
		.state = r->state,
		.pins = r->pins,
	};
}

int vmu_region_info(struct vmu_session *s, uint64_t handle,
		    struct vmu_region_info *info)
{
	struct vmu_region *r;

	vmu_lock(s->vmu);
	r = vmu_region_get_settled(s, handle);
	if (r)
		region_fill_info(r, info);
	vmu_unlock(s->vmu);
	return r ? 0 : -ENOENT;
}

/* Pin a settled region, lock held; it is resident on success. */
static int pin_locked(struct vmu *v, struct vmu_region *r,
		      struct vmu_resv *resv)
{
	int ret = vmu_swap_in_locked(v, r, resv);

	if (ret)
		return ret;
	vmu_region_acct(v, r, -1);
	r->pins++;
	vmu_region_acct(v, r, +1);
	list_move_tail(&r->lru, &v->data_lru);
	return 0;
}

static void unpin_locked(struct vmu *v, struct vmu_region *r)
{
	vmu_region_acct(v, r, -1);
	r->pins--;
	vmu_region_acct(v, r, +1);
	region_trim_locked(v, r); /* a shrink while pinned */
}

int vmu_region_pin(struct vmu_session *s, uint64_t handle,
		   struct vmu_resv *resv, struct vmu_region_info *info)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (r) {
		ret = pin_locked(v, r, resv);
		if (!ret)
			region_fill_info(r, info);
	}
	vmu_unlock(v);
	return ret;
}

int vmu_region_unpin(struct vmu_session *s, uint64_t handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	r = region_get(s, handle);
	if (!r)
		ret = -ENOENT;
	else if (!r->pins)
		ret = -EINVAL;
	else
		unpin_locked(v, r);
	vmu_unlock(v);
	return ret;
}

/* Copy to or from a region, pinned for the duration. */
static int region_copy(struct vmu_session *s, uint64_t handle, uint64_t off,
		       void *buf, uint64_t len, bool write)
{
	const struct vmu_provider_ops *ops = s->vmu->prov->ops;
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	if (off > r->size || len > r->size - off) {
		ret = -ERANGE;
		goto out;
	}
	ret = pin_locked(v, r, NULL);
	if (ret)
		goto out;
	vmu_drop_lock(v);
	ret = write ? ops->copy_htod(v->prov, r->m.addr + off, buf, len) :
		      ops->copy_dtoh(v->prov, buf, r->m.addr + off, len);
	vmu_take_lock(v);
	unpin_locked(v, r);
out:
	vmu_unlock(v);
	return ret;
}

int vmu_region_write(struct vmu_session *s, uint64_t handle, uint64_t off,
		     const void *src, uint64_t len)
{
	return region_copy(s, handle, off, (void *)src, len, true);
}

int vmu_region_read(struct vmu_session *s, uint64_t handle, uint64_t off,
		    void *dst, uint64_t len)
{
	return region_copy(s, handle, off, dst, len, false);
}

void vmu_session_set_victim(struct vmu_session *s, uint64_t key)
{
	vmu_lock(s->vmu);
	s->vmu->nr_victims += (key != 0) - (s->victim != 0);
	s->victim = key;
	vmu_unlock(s->vmu);
}

int vmu_region_set_victim(struct vmu_session *s, uint64_t handle, uint64_t key)
{
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(s->vmu);
	r = region_get(s, handle); /* moving or not: the key is its own */
	if (r) {
		region_victim_locked(s->vmu, r, key);
		ret = 0;
	}
	vmu_unlock(s->vmu);
	return ret;
}

int vmu_region_usage(struct vmu_session *s, uint64_t handle,
		     struct vmu_usage *u)
{
	struct vmu_region *r;
	int ret = -ENOENT;

	memset(u, 0, sizeof(*u));
	vmu_lock(s->vmu);
	r = region_get(s, handle);
	if (r) {
		if (r->state == VMU_REGION_SWAPPED)
			u->swapped = r->size;
		else /* resident, or moving: what it maps now */
			u->resident = r->m.mapped;
		u->data_bytes = r->size;
		ret = 0;
	}
	vmu_unlock(s->vmu);
	return ret;
}

void vmu_set_admit_wait(struct vmu *v, uint64_t ns)
{
	vmu_lock(v);
	v->admit_wait_ns = ns;
	vmu_unlock(v);
}

int vmu_region_reserve(struct vmu_session *s, uint64_t handle, char *msg,
		       size_t msglen)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	uint64_t to, need;
	int ret = 0;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	if (r->state != VMU_REGION_RESIDENT) {
		ret = -EBUSY;
		goto out;
	}
	to = vmu_round(v, r->max_size);
	need = to > r->m.mapped + r->resv ? to - r->m.mapped - r->resv : 0;
	ret = quota_check(v, s, to - r->m.mapped);
	if (ret) {
		if (msg && msglen)
			snprintf(msg, msglen, "over the data quota");
		goto out;
	}
	if (avail(v) < need &&
	    vmu_admit_check_locked(v, need, NULL, 0) == VMU_FIT_AFTER_RECLAIM)
		reclaim_locked(v, need);
	if (avail(v) < need) {
		vmu_admit_check_locked(v, need, msg, msglen);
		v->st.admit_refusals++;
		ret = -ENOMEM;
		goto out;
	}
	r->resv += need;
	r->resv_to = to;
	v->region_resv += need;
	vmu_pressure_update(v);
out:
	vmu_unlock(v);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Faults */

int vmu_fault_simulate(struct vmu *v)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	struct vmu_session *s;
	struct vmu_region *r;
	int ret = 0;

	if (!v->cfg.faults)
		return -EOPNOTSUPP;
	vmu_lock(v);
	/* text is read-only once committed: writable for the memset */
	for (uint64_t i = 0; i < v->hash_size && !ret; i++) {
		for (struct vmu_text *t = v->hash[i]; t && !ret; t = t->hnext) {
			ret = ops->set_access(v->prov, t->m.addr, t->m.mapped,
					      VMU_ACCESS_READWRITE);
			if (!ret)
				ret = ops->memset(v->prov, t->m.addr, 0,
						  t->m.mapped);
			if (!ret)
				ret = ops->set_access(v->prov, t->m.addr,
						      t->m.mapped,
						      VMU_ACCESS_READ);
		}
	}
	list_for_each_entry(s, &v->sessions, node) {
		list_for_each_entry(r, &s->regions, snode) {
			if (ret)
				break;
			if (r->state == VMU_REGION_RESIDENT && r->m.mapped)
				ret = ops->memset(v->prov, r->m.addr, 0,
						  r->m.mapped);
		}
	}
	/* counted even if a memset failed: the contents are no good */
	__atomic_add_fetch(v->cfg.faults, 1, __ATOMIC_ACQ_REL);
	vmu_text_expire_locked(v);
	vmu_unlock(v);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Teardown and statistics */

void vmu_session_destroy(struct vmu_session *s)
{
	struct vmu *v = s->vmu;
	struct vmu_text_upload *u, *un;
	struct vmu_text_ref *ref, *rn;
	struct vmu_region *r;

	vmu_lock(v);
	list_for_each_entry_safe(u, un, &s->uploads, node) {
		list_del_init(&u->node);
		vmu_upload_free_locked(v, u);
	}
	list_for_each_entry_safe(ref, rn, &s->refs, node)
		vmu_text_unhold(s, ref, ref->count);
	/* The lock drops inside: take the first region each time. */
	while (!list_empty(&s->regions)) {
		r = list_first_entry(&s->regions, struct vmu_region, snode);
		if (r->state == VMU_REGION_MOVING) {
			/* r may be gone when this returns: look again. */
			pthread_cond_wait(&v->moved, &v->lock);
			continue;
		}
		slot_free(v, r->slot);
		s->use.regions--;
		s->tenant->use.regions--;
		v->st.seg[VMU_SEG_DATA].frees++;
		r->pins = 0; /* the executor has cancelled its work */
		region_free_locked(v, r);
	}
	while (!list_empty(&s->cache)) {
		r = list_first_entry(&s->cache, struct vmu_region, snode);
		region_free_locked(v, r);
	}
	list_del_init(&s->node);
	v->nr_victims -= s->victim != 0;
	s->tenant->sessions--;
	vmu_tenant_put_locked(s->tenant);
	vmu_unlock(v);
	free(s->ref_hash);
	free(s);
}

void vmu_get_stats(struct vmu *v, struct vmu_stats *st)
{
	uint64_t warn, used;

	vmu_lock(v);
	*st = v->st;
	st->capacity = v->prov->capacity;
	st->granularity = v->gran;
	st->committed = v->committed;
	st->reserved = v->reserved;
	st->region_reserved = v->region_resv;
	st->free = avail(v);
	st->pressure = v->level;
	warn = v->prov->capacity / 100 * v->cfg.warn_pct;
	used = pressure_used(v);
	st->pressure_room = warn > used ? warn - used : 0;
	vmu_unlock(v);
}

/* ---------------------------------------------------------------------- */
/* The crash journal's wait for frees (vmu.h) */

struct deferred {
	struct list_head node;
	uint64_t tag; /* the record that must be committed first */
	uint64_t handle; /* a chunk, or */
	void *buf; /* a swap buffer */
	uint64_t size;
};

bool vmu_defer_free(struct vmu *v, uint64_t handle, void *buf, uint64_t size)
{
	struct deferred *d;

	if (!__atomic_load_n(&v->journal, __ATOMIC_ACQUIRE))
		return false;
	/* Out of memory it is not freed at all: freed now, a crash at
	 * once after would restore what the record names, whatever it
	 * holds by then. */
	d = calloc(1, sizeof(*d));
	if (!d)
		return true;
	pthread_mutex_lock(&v->jlock);
	/* a record begun already may name it: the next one may not */
	d->tag = v->jstarted + 1;
	d->handle = handle;
	d->buf = buf;
	d->size = size;
	list_add_tail(&d->node, &v->deferred);
	v->deferred_bytes += size;
	if (!buf)
		__atomic_add_fetch(&v->deferred_chunks, size, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&v->jlock);
	if (v->jwake)
		v->jwake(v->jwake_arg);
	return true;
}

void vmu_journal_on(struct vmu *v, void (*wake)(void *arg), void *arg)
{
	journal_thread = true;
	v->jwake = wake;
	v->jwake_arg = arg;
	__atomic_store_n(&v->journal, true, __ATOMIC_RELEASE);
}

/* The deferred frees of @done, freed. */
static void free_deferred(struct vmu *v, struct list_head *done)
{
	struct deferred *d, *n;

	list_for_each_entry_safe(d, n, done, node) {
		if (d->buf)
			vmu_swapbuf_put_now(v, d->buf, d->size);
		else
			v->prov->ops->destroy(v->prov, d->handle);
		list_del_init(&d->node);
		free(d);
	}
}

void vmu_journal_off(struct vmu *v)
{
	struct list_head all = LIST_HEAD_INIT(all);

	vmu_lock(v);
	__atomic_store_n(&v->journal, false, __ATOMIC_RELEASE);
	pthread_mutex_lock(&v->jlock);
	list_splice_tail(&v->deferred, &all);
	INIT_LIST_HEAD(&v->deferred);
	v->deferred_bytes = 0;
	__atomic_store_n(&v->deferred_chunks, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&v->jlock);
	free_deferred(v, &all);
	pthread_cond_broadcast(&v->freed);
	vmu_unlock(v);
}

void vmu_journal_begin(struct vmu *v)
{
	pthread_mutex_lock(&v->jlock);
	v->jstarted++;
	pthread_mutex_unlock(&v->jlock);
}

void vmu_journal_done(struct vmu *v)
{
	struct deferred *d, *n;
	struct list_head done = LIST_HEAD_INIT(done);

	uint64_t chunks = 0;

	vmu_lock(v);
	pthread_mutex_lock(&v->jlock);
	list_for_each_entry_safe(d, n, &v->deferred, node) {
		if (d->tag > v->jstarted)
			break; /* in the order freed: the rest wait too */
		list_move_tail(&d->node, &done);
		v->deferred_bytes -= d->size;
		chunks += d->buf ? 0 : d->size;
	}
	pthread_mutex_unlock(&v->jlock);
	if (!list_empty(&done)) {
		/* destroyed first: available only once the provider has
		 * them back */
		free_deferred(v, &done);
		__atomic_sub_fetch(&v->deferred_chunks, chunks,
				   __ATOMIC_RELEASE);
		pthread_cond_broadcast(&v->freed);
	}
	vmu_unlock(v);
}

uint64_t vmu_journal_waiting(struct vmu *v)
{
	uint64_t n;

	pthread_mutex_lock(&v->jlock);
	n = v->deferred_bytes;
	pthread_mutex_unlock(&v->jlock);
	return n;
}

void vmu_destroy(struct vmu *v)
{
	struct swapbuf *b, *bn;

	vmu_journal_off(v); /* nothing of this VMU is named again */

	while (!list_empty(&v->sessions))
		vmu_session_destroy(list_first_entry(&v->sessions,
						     struct vmu_session, node));
	vmu_lock(v);
	while (!list_empty(&v->text_lru))
		vmu_text_free_locked(v, list_first_entry(&v->text_lru,
							 struct vmu_text, lru));
	list_for_each_entry_safe(b, bn, &v->swapbufs, node) {
		v->prov->ops->host_free(v->prov, b->buf, b->size);
		free(b);
	}
	while (!list_empty(&v->tenants)) {
		struct vmu_tenant *t =
			list_first_entry(&v->tenants, struct vmu_tenant, node);

		list_del_init(&t->node);
		free(t);
	}
	vmu_unlock(v);
	pthread_cond_destroy(&v->moved);
	pthread_cond_destroy(&v->freed);
	pthread_mutex_destroy(&v->cb_lock);
	pthread_mutex_destroy(&v->jlock);
	pthread_mutex_destroy(&v->lock);
	slots_fini(&v->slots);
	free(v->hash);
	free(v);
}
