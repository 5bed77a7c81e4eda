// SPDX-License-Identifier: MIT
/*
 * The VMU: text, data and stack segments over a physical-memory provider.
 * Documentation/vmu.rst is the design; vmu.h is the contract.
 *
 * Locking. One mutex, v->lock, guards every list, table and counter.
 * Work that takes long (copies, zeroing, mapping) runs without it on an
 * object marked busy: a region in state MOVING, a stack that is active,
 * an upload that only its owner sees. Threads that need a MOVING region
 * wait on v->moved. Physical memory is freed to the provider before it
 * is uncharged, so the accounting never promises bytes the provider has
 * not got back.
 *
 * Accounting. v->committed counts the physical bytes of every chunk the
 * VMU holds; v->reserved counts bytes set aside by admission. A region's
 * share of every counter is added by region_acct(+1) and removed by
 * region_acct(-1) from a snapshot, so a counter can never drift while
 * the region changes without the lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "list.h"
#include "vmu/vmu.h"

#define VMU_NAME_MAX 64
#define VMU_STACK_ALIGN 256

/* ---------------------------------------------------------------------- */
/* Objects */

struct vmu_chunk {
	uint64_t handle; /* provider chunk */
	uint64_t off; /* where it is mapped, from the mapping's start */
	uint64_t size;
};

/* A reserved virtual range and the chunks mapped at its start. */
struct vmu_mapping {
	uint64_t addr;
	uint64_t vsize;
	uint64_t mapped;
	struct vmu_chunk *chunks;
	unsigned int nr, cap;
};

struct vmu_tenant {
	struct list_head node; /* v->tenants */
	char name[VMU_NAME_MAX];
	unsigned int sessions;
	struct vmu_usage use;
};

struct vmu_session {
	struct vmu *vmu;
	struct vmu_tenant *tenant;
	struct list_head node; /* v->sessions */
	struct list_head regions; /* live regions */
	struct list_head cache; /* destroyed regions kept for reuse */
	struct list_head refs; /* struct vmu_text_ref */
	struct vmu_text_ref **ref_hash; /* the same refs, by entry */
	uint32_t ref_hash_size, nr_refs;
	struct list_head uploads; /* struct vmu_text_upload */
	struct vmu_usage use;
	uint64_t victim; /* vmu_session_set_victim() */
};

/* What a region has added to the counters (see region_acct). */
struct region_share {
	uint64_t dev; /* physical bytes on the device */
	uint64_t foot; /* data bytes charged to session and tenant */
	uint64_t resident; /* of foot: mapped now */
	uint64_t swapped; /* of foot: in host memory */
	uint64_t host; /* host bytes of the swapped copy */
	uint64_t idle; /* swappable: resident, live, unpinned */
	uint64_t cached; /* kept for reuse after destroy */
};

struct vmu_region {
	struct vmu_session *s;
	struct list_head snode; /* s->regions, or s->cache */
	struct list_head lru; /* v->data_lru, or v->region_cache */
	uint32_t slot;
	bool cached;
	enum vmu_region_state state;
	unsigned int pins;
	uint64_t size;
	uint64_t max_size;
	uint64_t target; /* while growing: the mapped size it grows to */
	uint64_t fail_gen; /* reclaim pass in which a swap-out failed */
	struct vmu_mapping m;
	/* vmu_region_reserve(): the mapped size it is held to (0: none),
	 * and the bytes set aside for the rest */
	uint64_t resv_to, resv;
	void *host; /* swap buffer while SWAPPED */
	uint64_t host_size; /* its size, counted from before it is got
			     * until it is given back */
	struct region_share share;
};

struct vmu_slot {
	struct vmu_region *r;
	uint32_t gen;
	uint32_t next_free;
};

struct vmu_text {
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text *hnext;
	struct list_head lru; /* v->text_lru while unheld */
	struct vmu_mapping m;
	uint64_t size;
	unsigned long holders;
	uint64_t epoch; /* the device's fault count when its bytes came */
	bool stale; /* a fault since: out of the index, freed when unheld */
};

struct vmu_text_ref {
	struct list_head node; /* s->refs */
	struct vmu_text_ref *hnext; /* s->ref_hash */
	struct vmu_text *t;
	unsigned long count;
};

struct vmu_text_upload {
	struct vmu_session *s;
	struct list_head node; /* s->uploads */
	struct vmu_mapping m;
	uint64_t size;
	uint64_t written;
	uint64_t epoch; /* the fault count when it began */
	EVP_MD_CTX *md; /* NULL when the caller has hashed already */
};

struct vmu_stack {
	struct vmu *v;
	struct list_head node; /* v->stacks */
	struct vmu_mapping m;
	bool active;
	uint64_t top; /* watermark, from m.addr */
	uint64_t limit; /* the request's peak */
	uint64_t nr_allocs;
};

struct swapbuf {
	struct list_head node;
	void *buf;
	uint64_t size;
};

struct vmu {
	struct vmu_provider *prov;
	struct vmu_config cfg;
	uint64_t gran;
	pthread_mutex_t lock;
	pthread_cond_t moved; /* a region left MOVING */
	pthread_cond_t freed; /* memory was given back (admission waits) */
	pthread_mutex_t cb_lock; /* one pressure callback at a time */

	uint64_t committed, reserved;
	uint64_t region_resv; /* set aside by vmu_region_reserve() */
	unsigned int nr_moving; /* regions MOVING */
	unsigned int nr_victims; /* sessions with a victim key */
	bool no_swap; /* vmu_set_swap(v, false) */
	uint64_t admit_wait_ns;
	enum vmu_pressure level;
	bool notify; /* level changed since the last callback */
	enum vmu_pressure reported; /* last level told, under cb_lock */
	uint64_t reclaim_gen; /* numbers reclaim passes */

	struct list_head tenants, sessions, stacks;

	struct vmu_slot *slots;
	uint32_t nr_slots, free_slot; /* free list head, UINT32_MAX: none */

	struct vmu_text **hash;
	uint64_t hash_size, nr_text;
	struct list_head text_lru;
	uint64_t text_epoch; /* the fault count the index was swept at */

	struct list_head data_lru; /* resident live regions, oldest first */
	struct list_head region_cache; /* cached regions, oldest first */
	uint64_t data_idle; /* swappable bytes */
	uint64_t stack_idle; /* backing of stacks with no request */

	struct list_head swapbufs; /* newest first */
	uint64_t swapbuf_bytes;

	struct vmu_stats st;
};

#define NO_SLOT UINT32_MAX

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
	return v->prov->capacity - v->committed - v->reserved - v->region_resv;
}

static void seg_add(struct vmu *v, enum vmu_seg seg, int64_t bytes)
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

static void pressure_update(struct vmu *v)
{
	uint64_t used = v->committed + v->reserved + v->region_resv;
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

static void vmu_lock(struct vmu *v)
{
	pthread_mutex_lock(&v->lock);
}

/*
 * Helpers that must let go of the lock in the middle of an operation (for
 * a copy, a mapping, a host allocation) use these, which never call the
 * pressure callback: the thread may hold a region MOVING that the
 * callback would wait for. Their comments say "drops the lock".
 */
static void drop_lock(struct vmu *v)
{
	pthread_mutex_unlock(&v->lock);
}

static void take_lock(struct vmu *v)
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
static void vmu_unlock(struct vmu *v)
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
	pressure_update(v);
}

static void uncharge(struct vmu *v, uint64_t bytes)
{
	v->committed -= bytes;
	pressure_update(v);
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
	pressure_update(v);
}

static void resv_drop(struct vmu *v, struct vmu_region *r)
{
	v->region_resv -= r->resv;
	r->resv = 0;
	r->resv_to = 0;
	pressure_update(v);
	pthread_cond_broadcast(&v->freed);
}

/* ---------------------------------------------------------------------- */
/* Mappings: a reservation and the chunks mapped at its start */

static int mapping_reserve(struct vmu *v, struct vmu_mapping *m, uint64_t size)
{
	*m = (struct vmu_mapping){ .vsize = size };
	return v->prov->ops->reserve(v->prov, size, v->gran, &m->addr);
}

/* Map one new chunk so that @m->mapped becomes @to. No lock needed: the
 * caller owns @m and has charged the bytes. */
static int mapping_grow(struct vmu *v, struct vmu_mapping *m, uint64_t to)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t len = to - m->mapped, handle;
	int ret;

	if (m->nr == m->cap) {
		unsigned int cap = m->cap ? m->cap * 2 : 4;
		struct vmu_chunk *c = realloc(m->chunks, cap * sizeof(*c));

		if (!c)
			return -ENOMEM;
		m->chunks = c;
		m->cap = cap;
	}
	ret = ops->create(v->prov, len, &handle);
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

/* Unmap and destroy the chunks that lie wholly at or past @keep; returns
 * the bytes freed. A chunk that straddles @keep stays. */
static uint64_t mapping_trim(struct vmu *v, struct vmu_mapping *m,
			     uint64_t keep)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t freed = 0;

	while (m->nr && m->chunks[m->nr - 1].off >= keep) {
		struct vmu_chunk *c = &m->chunks[m->nr - 1];

		ops->unmap(v->prov, m->addr + c->off, c->size);
		ops->destroy(v->prov, c->handle);
		freed += c->size;
		m->mapped = c->off;
		m->nr--;
	}
	return freed;
}

static void mapping_release(struct vmu *v, struct vmu_mapping *m)
{
	mapping_trim(v, m, 0);
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
static void region_acct(struct vmu *v, struct vmu_region *r, int sign)
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
	seg_add(v, VMU_SEG_DATA, sign * (int64_t)sh->dev);
	v->data_idle += sign * sh->idle;
	v->st.data_cached += sign * sh->cached;
	v->st.swapped_now += sign * sh->host;
	usage_add(&r->s->use, sh, sign);
	usage_add(&r->s->tenant->use, sh, sign);
}

/* ---------------------------------------------------------------------- */
/* Swap buffers: host memory kept for reuse, as pinned memory is costly */

/* A host buffer for @size bytes: always vmu_round(@size) bytes, so the
 * swap limit counts exactly what is held. May drop the lock. */
static int swapbuf_get(struct vmu *v, uint64_t size, void **buf)
{
	struct swapbuf *b;
	int ret;

	size = vmu_round(v, size);
	list_for_each_entry(b, &v->swapbufs, node) {
		if (b->size != size)
			continue;
		list_del_init(&b->node);
		v->swapbuf_bytes -= b->size;
		*buf = b->buf;
		free(b);
		return 0;
	}
	drop_lock(v);
	ret = v->prov->ops->host_alloc(v->prov, size, buf);
	take_lock(v);
	return ret;
}

static void swapbuf_put(struct vmu *v, void *buf, uint64_t size)
{
	struct swapbuf *b = malloc(sizeof(*b));

	if (!b || size > v->cfg.swap_cache) {
		free(b);
		v->prov->ops->host_free(v->prov, buf, size);
		return;
	}
	b->buf = buf;
	b->size = size;
	list_add(&b->node, &v->swapbufs);
	v->swapbuf_bytes += size;
	while (v->swapbuf_bytes > v->cfg.swap_cache) {
		b = list_entry(v->swapbufs.prev, struct swapbuf, node);
		list_del_init(&b->node);
		v->swapbuf_bytes -= b->size;
		v->prov->ops->host_free(v->prov, b->buf, b->size);
		free(b);
	}
}

/* ---------------------------------------------------------------------- */
/* Swapping */

static void region_set_state(struct vmu *v, struct vmu_region *r,
			     enum vmu_region_state state)
{
	region_acct(v, r, -1);
	if (r->state == VMU_REGION_RESIDENT && !r->cached)
		list_del_init(&r->lru);
	if (r->state == VMU_REGION_MOVING)
		v->nr_moving--;
	if (state == VMU_REGION_MOVING)
		v->nr_moving++;
	r->state = state;
	if (state == VMU_REGION_RESIDENT && !r->cached)
		list_add_tail(&r->lru, &v->data_lru);
	region_acct(v, r, +1);
	if (state != VMU_REGION_MOVING)
		pthread_cond_broadcast(&v->moved);
}

/* Lock held; drops it for the copy. */
static int swap_out_locked(struct vmu *v, struct vmu_region *r)
{
	uint64_t len = r->size, bufsize = vmu_round(v, len), freed;
	void *buf = NULL;
	int ret;

	if (r->state == VMU_REGION_SWAPPED)
		return 0;
	if (r->pins || r->state != VMU_REGION_RESIDENT || r->resv_to)
		return -EBUSY;
	if (v->no_swap)
		return -EPERM;
	if (v->cfg.swap_limit &&
	    v->st.swapped_now + bufsize > v->cfg.swap_limit)
		return -ENOSPC;
	/* The host bytes count against the limit from here on. */
	r->host_size = bufsize;
	region_set_state(v, r, VMU_REGION_MOVING);
	if (len) {
		ret = swapbuf_get(v, len, &buf);
		if (ret)
			goto out_resident;
	}
	drop_lock(v);
	ret = len ? v->prov->ops->copy_dtoh(v->prov, buf, r->m.addr, len) : 0;
	freed = ret ? 0 : mapping_trim(v, &r->m, 0);
	take_lock(v);
	if (ret) {
		swapbuf_put(v, buf, bufsize);
		goto out_resident;
	}
	uncharge(v, freed);
	r->host = buf;
	region_set_state(v, r, VMU_REGION_SWAPPED);
	v->st.swap_outs++;
	v->st.swapped_out_bytes += len;
	return 0;

out_resident:
	r->host_size = 0;
	region_set_state(v, r, VMU_REGION_RESIDENT);
	return ret;
}

static int charge(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
		  uint64_t *from_resv);
static void uncharge_resv(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
			  uint64_t from_resv);

/* Lock held; drops it for the mapping and the copy. */
static int swap_in_locked(struct vmu *v, struct vmu_region *r,
			  struct vmu_resv *resv)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t need = vmu_round(v, r->size), from_resv;
	int ret;

	if (r->state == VMU_REGION_RESIDENT)
		return 0;
	region_set_state(v, r, VMU_REGION_MOVING);
	ret = charge(v, need, resv, &from_resv);
	if (ret)
		goto out_swapped;
	drop_lock(v);
	ret = need ? mapping_grow(v, &r->m, need) : 0;
	if (!ret && r->size)
		ret = ops->copy_htod(v->prov, r->m.addr, r->host, r->size);
	if (!ret && need > r->size)
		ret = ops->memset(v->prov, r->m.addr + r->size, 0,
				  need - r->size);
	if (ret)
		mapping_trim(v, &r->m, 0); /* freed before it is uncharged */
	take_lock(v);
	if (ret) {
		uncharge_resv(v, need, resv, from_resv);
		goto out_swapped;
	}
	if (r->host)
		swapbuf_put(v, r->host, r->host_size);
	r->host = NULL;
	r->host_size = 0;
	region_set_state(v, r, VMU_REGION_RESIDENT);
	v->st.swap_ins++;
	v->st.swapped_in_bytes += r->size;
	return 0;

out_swapped:
	region_set_state(v, r, VMU_REGION_SWAPPED);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Reclaim: what admission and every allocation fall back on */

static void text_free_locked(struct vmu *v, struct vmu_text *t);
static void region_free_locked(struct vmu *v, struct vmu_region *r);

/* Device bytes that swapping idle regions would free. Regions swap whole,
 * so under a swap limit count them in the order reclaim takes them. */
static uint64_t swappable(struct vmu *v)
{
	uint64_t room, idle = 0;
	struct vmu_region *r;

	if (v->no_swap)
		return 0;
	if (!v->cfg.swap_limit)
		return v->data_idle;
	room = v->cfg.swap_limit > v->st.swapped_now ?
		       v->cfg.swap_limit - v->st.swapped_now :
		       0;
	list_for_each_entry(r, &v->data_lru, lru) {
		uint64_t host = vmu_round(v, r->size);

		if (r->pins || !r->m.mapped || host > room)
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
		seg_add(v, VMU_SEG_STACK, -(int64_t)st->m.mapped);
		uncharge(v, mapping_trim(v, &st->m, 0));
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

			text_free_locked(v, t);
			v->st.text_evictions++;
			continue;
		}
		/* The first in LRU order of the sessions with the highest
		 * victim key (the scheduler's: 0 for most). */
		list_for_each_entry(r, &v->data_lru, lru) {
			if (v->no_swap)
				break;
			if (r->pins || !r->m.mapped || r->fail_gen == gen ||
			    r->resv_to)
				continue;
			if (!victim || r->s->victim > victim->s->victim)
				victim = r;
			if (!v->nr_victims) /* plain LRU: the first */
				break;
		}
		if (!victim)
			return false;
		/* One that cannot be swapped (limit, copy error) is passed
		 * over for the rest of this pass, wherever it ends up in
		 * the LRU; the loop ends when none are left. */
		if (swap_out_locked(v, victim))
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
 * @resv, for uncharge_resv(). Lock held; drops it while reclaiming.
 */
static int charge(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
		  uint64_t *from_resv)
{
	uint64_t take = 0, rest;

	if (resv && resv->vmu == v)
		take = resv->bytes < bytes ? resv->bytes : bytes;
	rest = bytes - take;
	/* @resv has one owner, this thread: its bytes stay put while the
	 * lock is dropped for reclaim. */
	if (rest && avail(v) < rest && !reclaim_locked(v, rest))
		return -ENOMEM;
	if (take) {
		resv->bytes -= take;
		v->reserved -= take;
	}
	charge_commit(v, bytes);
	*from_resv = take;
	return 0;
}

/* Undo a charge() whose memory could not be had after all: the bytes go
 * back where they came from. The chunks are already freed. */
static void uncharge_resv(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
			  uint64_t from_resv)
{
	uncharge(v, bytes);
	if (from_resv) {
		resv->bytes += from_resv;
		v->reserved += from_resv;
		pressure_update(v);
	}
}

/* ---------------------------------------------------------------------- */
/* Admission */

static enum vmu_fit fit(struct vmu *v, uint64_t need, char *msg, size_t msglen)
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
	f = fit(v, need, msg, msglen);
	vmu_unlock(v);
	return f;
}

/* Whether memory is on its way back: another request's reservation or
 * stack (it ends), a region moving (a swap-out finishing). @own is the
 * caller's stack, which does not count. Lock held. */
static bool coming_free(struct vmu *v, const struct vmu_stack *own)
{
	const struct vmu_stack *st;

	if (v->reserved || v->nr_moving)
		return true;
	list_for_each_entry(st, &v->stacks, node)
		if (st != own && st->active && st->m.mapped)
			return true;
	return false;
}

static void deadline_after(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ns += (uint64_t)ts->tv_nsec;
	ts->tv_sec += (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
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

		if (fit(v, need, NULL, 0) == VMU_FIT_AFTER_RECLAIM)
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
static int admit_locked(struct vmu *v, uint64_t need, struct vmu_resv *r,
			const struct vmu_stack *own, char *msg, size_t msglen)
{
	enum vmu_fit f;
	int ret = 0;

	f = fit(v, need, msg, msglen);
	if (f == VMU_FIT_AFTER_RECLAIM) {
		v->st.admit_reclaims++;
		reclaim_locked(v, need);
	}
	if (avail(v) < need && admit_wait(v, need, own))
		f = VMU_FIT_NOW;
	if (f == VMU_FIT_NEVER || avail(v) < need) {
		fit(v, need, msg, msglen);
		v->st.admit_refusals++;
		ret = -ENOMEM;
		goto out;
	}
	v->reserved += need;
	r->bytes = need;
	v->st.admits++;
	pressure_update(v);
out:
	return ret;
}

int vmu_admit(struct vmu *v, uint64_t need, struct vmu_resv *r, char *msg,
	      size_t msglen)
{
	int ret;

	*r = (struct vmu_resv){ .vmu = v };
	vmu_lock(v);
	ret = admit_locked(v, need, r, NULL, msg, msglen);
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
	pressure_update(v);
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
	v->free_slot = NO_SLOT;
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
		pressure_update(v);
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

static int tenant_get(struct vmu *v, const char *name, struct vmu_tenant **out)
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
static void tenant_put(struct vmu_tenant *t)
{
	if (t->sessions || t->use.quota)
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
	ret = tenant_get(v, tenant, &s->tenant);
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

int vmu_tenant_set_quota(struct vmu *v, const char *tenant, uint64_t bytes)
{
	struct vmu_tenant *t;
	int ret;

	vmu_lock(v);
	ret = tenant_get(v, tenant, &t);
	if (!ret) {
		t->use.quota = bytes;
		tenant_put(t);
	}
	vmu_unlock(v);
	return ret;
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

static bool over_quota(const struct vmu_session *s, uint64_t bytes)
{
	const struct vmu_usage *su = &s->use, *tu = &s->tenant->use;

	return (su->quota && su->data_bytes + bytes > su->quota) ||
	       (tu->quota && tu->data_bytes + bytes > tu->quota);
}

/* -EDQUOT if adding @bytes to the session's data would pass a quota. */
static int quota_check(struct vmu *v, struct vmu_session *s, uint64_t bytes)
{
	if (over_quota(s, bytes)) {
		v->st.quota_refusals++;
		return -EDQUOT;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Region handles */

static int slot_alloc(struct vmu *v, struct vmu_region *r)
{
	uint32_t i = v->free_slot;

	if (i == NO_SLOT) {
		uint32_t n = v->nr_slots ? v->nr_slots * 2 : 64;
		struct vmu_slot *s;

		if (n <= v->nr_slots)
			return -ENOSPC;
		s = realloc(v->slots, n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		for (uint32_t k = v->nr_slots; k < n; k++)
			s[k] = (struct vmu_slot){
				.gen = 1,
				.next_free = k + 1 < n ? k + 1 : NO_SLOT,
			};
		v->slots = s;
		i = v->nr_slots;
		v->nr_slots = n;
	}
	v->free_slot = v->slots[i].next_free;
	v->slots[i].r = r;
	r->slot = i;
	return 0;
}

static void slot_free(struct vmu *v, uint32_t i)
{
	v->slots[i].r = NULL;
	v->slots[i].gen = v->slots[i].gen == UINT32_MAX ? 1 :
							  v->slots[i].gen + 1;
	v->slots[i].next_free = v->free_slot;
	v->free_slot = i;
}

static uint64_t handle_of(const struct vmu *v, const struct vmu_region *r)
{
	return (uint64_t)v->slots[r->slot].gen << 32 | r->slot;
}

/* The session's region named by @h, or NULL: stale, foreign or forged
 * handles all look the same from outside. */
static struct vmu_region *region_get(struct vmu_session *s, uint64_t h)
{
	struct vmu *v = s->vmu;
	uint32_t i = (uint32_t)h, gen = (uint32_t)(h >> 32);

	if (i >= v->nr_slots || v->slots[i].gen != gen || !v->slots[i].r ||
	    v->slots[i].r->s != s)
		return NULL;
	return v->slots[i].r;
}

/* As region_get(), once no swap or remap is in progress on it. Waiting
 * drops the lock, and the region may be destroyed meanwhile, so the
 * handle is looked up again after every wait. */
static struct vmu_region *region_get_settled(struct vmu_session *s, uint64_t h)
{
	struct vmu_region *r;

	while ((r = region_get(s, h)) && r->state == VMU_REGION_MOVING)
		pthread_cond_wait(&s->vmu->moved, &s->vmu->lock);
	return r;
}

/* ---------------------------------------------------------------------- */
/* Data regions */

/* Release a region for good: no handle, no list points at it any more.
 * Lock held; drops it to free the physical memory, then uncharges. */
static void region_free_locked(struct vmu *v, struct vmu_region *r)
{
	uint64_t dev;

	region_acct(v, r, -1);
	dev = r->share.dev;
	if (r->resv)
		resv_drop(v, r);
	list_del_init(&r->lru);
	list_del_init(&r->snode);
	if (r->host)
		swapbuf_put(v, r->host, r->host_size);
	v->st.seg[VMU_SEG_DATA].entries -= !r->cached;
	drop_lock(v);
	mapping_release(v, &r->m);
	free(r);
	take_lock(v);
	uncharge(v, dev);
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
		region_acct(v, c, -1);
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
	ret = mapping_reserve(v, &r->m, vsize);
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
	region_acct(v, r, +1);
	v->st.seg[VMU_SEG_DATA].entries++;
	v->st.seg[VMU_SEG_DATA].allocs++;
	s->use.regions++;
	s->tenant->use.regions++;
	*handle = handle_of(v, r);
	vmu_unlock(v);
	return 0;

out_release:
	vmu_unlock(v);
	mapping_release(v, &r->m);
out_free:
	free(r);
	return ret;
}

/* Lock held; drops it to map and zero the new chunk. */
static int region_grow_locked(struct vmu *v, struct vmu_region *r,
			      uint64_t size, struct vmu_resv *resv)
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
	region_set_state(v, r, VMU_REGION_MOVING);
	/* A reserved region's growth comes from its reservation first. */
	r->resv -= own;
	v->region_resv -= own;
	ret = charge(v, to - from - own, resv, &from_resv);
	if (ret) {
		r->resv += own;
		v->region_resv += own;
		goto out;
	}
	charge_commit(v, own);
	drop_lock(v);
	ret = mapping_grow(v, &r->m, to);
	if (!ret)
		ret = v->prov->ops->memset(v->prov, r->m.addr + from, 0,
					   to - from);
	if (ret)
		mapping_trim(v, &r->m, from);
	take_lock(v);
	if (ret) {
		uncharge_resv(v, to - from - own, resv, from_resv);
		uncharge(v, own);
		r->resv += own;
		v->region_resv += own;
	} else {
		r->size = size;
	}
out:
	r->target = 0;
	region_set_state(v, r, VMU_REGION_RESIDENT);
	return ret;
}

/* Release the chunks past the region's size, unless it is pinned: a
 * pinned region's memory may be in use, so it is trimmed on the last
 * unpin instead. Lock held. */
static void region_trim_locked(struct vmu *v, struct vmu_region *r)
{
	if (r->pins || r->state != VMU_REGION_RESIDENT)
		return;
	region_acct(v, r, -1);
	uncharge(v, mapping_trim(v, &r->m, vmu_round(v, r->size)));
	resv_refill(v, r);
	region_acct(v, r, +1);
}

int vmu_region_resize(struct vmu_session *s, uint64_t handle, uint64_t size,
		      struct vmu_resv *resv)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	r = region_get_settled(s, handle);
	if (!r) {
		ret = -ENOENT;
		goto out;
	}
	if (size > r->max_size) {
		ret = -E2BIG;
		goto out;
	}
	if (r->state == VMU_REGION_SWAPPED) {
		ret = swap_in_locked(v, r, resv);
		if (ret)
			goto out;
	}
	if (vmu_round(v, size) > r->m.mapped) {
		ret = region_grow_locked(v, r, size, resv);
	} else {
		region_acct(v, r, -1);
		r->size = size;
		region_acct(v, r, +1);
		region_trim_locked(v, r);
	}
	if (!ret && r->state == VMU_REGION_RESIDENT)
		list_move_tail(&r->lru, &v->data_lru);
out:
	vmu_unlock(v);
	return ret;
}

int vmu_region_destroy(struct vmu_session *s, uint64_t handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = 0;

	vmu_lock(v);
	r = region_get_settled(s, handle);
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
	if (r->state == VMU_REGION_RESIDENT && r->m.mapped &&
	    s->use.cached + r->m.mapped <= v->cfg.session_cache) {
		/* Keep it mapped for the session's next region this shape. */
		region_acct(v, r, -1);
		list_del_init(&r->lru);
		list_move_tail(&r->snode, &s->cache);
		list_add_tail(&r->lru, &v->region_cache);
		r->cached = true;
		r->size = 0;
		region_acct(v, r, +1);
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
	r = region_get_settled(s, handle);
	if (r)
		region_fill_info(r, info);
	vmu_unlock(s->vmu);
	return r ? 0 : -ENOENT;
}

int vmu_region_swap_out(struct vmu_session *s, uint64_t handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(v);
	r = region_get_settled(s, handle);
	if (r)
		ret = swap_out_locked(v, r);
	vmu_unlock(v);
	return ret;
}

int vmu_region_swap_in(struct vmu_session *s, uint64_t handle,
		       struct vmu_resv *resv)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(v);
	r = region_get_settled(s, handle);
	if (r)
		ret = swap_in_locked(v, r, resv);
	vmu_unlock(v);
	return ret;
}

/* Pin a settled region, lock held; it is resident on success. */
static int pin_locked(struct vmu *v, struct vmu_region *r,
		      struct vmu_resv *resv)
{
	int ret = swap_in_locked(v, r, resv);

	if (ret)
		return ret;
	region_acct(v, r, -1);
	r->pins++;
	region_acct(v, r, +1);
	list_move_tail(&r->lru, &v->data_lru);
	return 0;
}

static void unpin_locked(struct vmu *v, struct vmu_region *r)
{
	region_acct(v, r, -1);
	r->pins--;
	region_acct(v, r, +1);
	region_trim_locked(v, r); /* a shrink while pinned */
}

int vmu_region_pin(struct vmu_session *s, uint64_t handle,
		   struct vmu_resv *resv, struct vmu_region_info *info)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(v);
	r = region_get_settled(s, handle);
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
	r = region_get_settled(s, handle);
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
	drop_lock(v);
	ret = write ? ops->copy_htod(v->prov, r->m.addr + off, buf, len) :
		      ops->copy_dtoh(v->prov, buf, r->m.addr + off, len);
	take_lock(v);
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

/* Swap every idle resident region of @s out (@out), or every swapped
 * one back: the number moved, or the first error (the rest stay as they
 * are). The list may change while the lock is dropped for a copy, so
 * the walk starts over after each region. */
static int session_swap(struct vmu_session *s, bool out)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int n = 0, ret = 0;
	bool again = true;

	vmu_lock(v);
	while (again) {
		again = false;
		list_for_each_entry(r, &s->regions, snode) {
			if (out && (r->state != VMU_REGION_RESIDENT ||
				    r->pins || !r->m.mapped))
				continue;
			if (!out && r->state != VMU_REGION_SWAPPED)
				continue;
			ret = out ? swap_out_locked(v, r) :
				    swap_in_locked(v, r, NULL);
			if (ret)
				goto out;
			n++;
			again = true;
			break;
		}
	}
out:
	vmu_unlock(v);
	return ret ? ret : n;
}

int vmu_session_swap_out(struct vmu_session *s)
{
	return session_swap(s, true);
}

int vmu_session_swap_in(struct vmu_session *s)
{
	return session_swap(s, false);
}

void vmu_session_set_victim(struct vmu_session *s, uint64_t key)
{
	vmu_lock(s->vmu);
	s->vmu->nr_victims += (key != 0) - (s->victim != 0);
	s->victim = key;
	vmu_unlock(s->vmu);
}

void vmu_set_swap(struct vmu *v, bool on)
{
	vmu_lock(v);
	v->no_swap = !on;
	vmu_unlock(v);
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
	r = region_get_settled(s, handle);
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
	if (avail(v) < need && fit(v, need, NULL, 0) == VMU_FIT_AFTER_RECLAIM)
		reclaim_locked(v, need);
	if (avail(v) < need) {
		fit(v, need, msg, msglen);
		v->st.admit_refusals++;
		ret = -ENOMEM;
		goto out;
	}
	r->resv += need;
	r->resv_to = to;
	v->region_resv += need;
	pressure_update(v);
out:
	vmu_unlock(v);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Text segment */

void vmu_fingerprint(const void *buf, size_t len, uint8_t fp[VMU_FP_LEN])
{
	EVP_Digest(buf, len, fp, NULL, EVP_sha256(), NULL);
}

static uint64_t fp_hash(const struct vmu *v, const uint8_t *fp)
{
	uint64_t h;

	memcpy(&h, fp, sizeof(h));
	return h & (v->hash_size - 1);
}

static void text_free_locked(struct vmu *v, struct vmu_text *t);

/*
 * After a device fault, every entry made before it holds zeros: take
 * them out of the index (a new insert of the same bytes makes a new
 * entry), free the unheld ones now and the held ones when their last
 * holder lets go. Once per fault, on the first lookup after it. Lock
 * held.
 */
static void text_expire_locked(struct vmu *v)
{
	uint64_t now = faults_now(v), n = 0;

	if (now == v->text_epoch)
		return;
	v->text_epoch = now;
	for (uint64_t i = 0; i < v->hash_size; i++) {
		struct vmu_text **p = &v->hash[i];

		while (*p) {
			struct vmu_text *t = *p;

			if (t->epoch == now) {
				p = &t->hnext;
				continue;
			}
			*p = t->hnext;
			t->hnext = NULL;
			t->stale = true;
			v->nr_text--;
			n++;
			if (!t->holders)
				text_free_locked(v, t);
		}
	}
	v->st.text_lost += n;
}

static struct vmu_text *text_find(struct vmu *v, const uint8_t *fp)
{
	struct vmu_text *t;

	text_expire_locked(v);
	t = v->hash[fp_hash(v, fp)];

	while (t && memcmp(t->fp, fp, VMU_FP_LEN))
		t = t->hnext;
	return t;
}

static void text_hash_add(struct vmu *v, struct vmu_text *t)
{
	struct vmu_text **slot;

	if (v->nr_text >= v->hash_size) {
		uint64_t old = v->hash_size, n = old * 2;
		struct vmu_text **nh = calloc(n, sizeof(*nh));

		if (nh) {
			struct vmu_text **oh = v->hash;

			v->hash = nh;
			v->hash_size = n;
			for (uint64_t i = 0; i < old; i++) {
				while (oh[i]) {
					struct vmu_text *e = oh[i];

					oh[i] = e->hnext;
					slot = &v->hash[fp_hash(v, e->fp)];
					e->hnext = *slot;
					*slot = e;
				}
			}
			free(oh);
		}
	}
	slot = &v->hash[fp_hash(v, t->fp)];
	t->hnext = *slot;
	*slot = t;
	v->nr_text++;
	v->st.seg[VMU_SEG_TEXT].entries++;
}

static void text_hash_del(struct vmu *v, struct vmu_text *t)
{
	struct vmu_text **p = &v->hash[fp_hash(v, t->fp)];

	while (*p != t)
		p = &(*p)->hnext;
	*p = t->hnext;
	v->nr_text--;
	v->st.seg[VMU_SEG_TEXT].entries--;
}

/* Free an unheld entry. Lock held throughout: unmapping one range is
 * quick, and eviction must not race with a lookup that revives it. */
static void text_free_locked(struct vmu *v, struct vmu_text *t)
{
	uint64_t bytes = t->m.mapped;

	if (t->stale) /* out of the index already */
		v->st.seg[VMU_SEG_TEXT].entries--;
	else
		text_hash_del(v, t);
	list_del_init(&t->lru);
	v->st.text_cached -= bytes;
	mapping_release(v, &t->m);
	seg_add(v, VMU_SEG_TEXT, -(int64_t)bytes);
	v->st.seg[VMU_SEG_TEXT].frees++;
	uncharge(v, bytes);
	free(t);
}

/* A session may hold hundreds of entries (a model's tensors): its
 * references are hashed by entry address. */
static uint32_t ref_bucket(uint32_t size, const struct vmu_text *t)
{
	return (uint32_t)(((uintptr_t)t >> 6) * 0x9e3779b97f4a7c15ull >> 40) &
	       (size - 1);
}

static struct vmu_text_ref *ref_find(struct vmu_session *s,
				     const struct vmu_text *t)
{
	struct vmu_text_ref *ref;

	if (!s->ref_hash_size)
		return NULL;
	ref = s->ref_hash[ref_bucket(s->ref_hash_size, t)];
	while (ref && ref->t != t)
		ref = ref->hnext;
	return ref;
}

static int ref_insert(struct vmu_session *s, struct vmu_text_ref *ref)
{
	struct vmu_text_ref **slot;

	if (s->nr_refs >= s->ref_hash_size) {
		uint32_t n = s->ref_hash_size ? s->ref_hash_size * 2 : 16;
		struct vmu_text_ref **h = calloc(n, sizeof(*h)), *e;

		if (!h)
			return -ENOMEM;
		list_for_each_entry(e, &s->refs, node) {
			slot = &h[ref_bucket(n, e->t)];
			e->hnext = *slot;
			*slot = e;
		}
		free(s->ref_hash);
		s->ref_hash = h;
		s->ref_hash_size = n;
	}
	slot = &s->ref_hash[ref_bucket(s->ref_hash_size, ref->t)];
	ref->hnext = *slot;
	*slot = ref;
	list_add_tail(&ref->node, &s->refs);
	s->nr_refs++;
	return 0;
}

static void ref_remove(struct vmu_session *s, struct vmu_text_ref *ref)
{
	struct vmu_text_ref **p =
		&s->ref_hash[ref_bucket(s->ref_hash_size, ref->t)];

	while (*p != ref)
		p = &(*p)->hnext;
	*p = ref->hnext;
	list_del_init(&ref->node);
	s->nr_refs--;
	free(ref);
}

/* Take a reference for @s on @t. Lock held. */
static int text_hold(struct vmu_session *s, struct vmu_text *t)
{
	struct vmu *v = s->vmu;
	struct vmu_text_ref *ref = ref_find(s, t);

	if (!ref) {
		ref = calloc(1, sizeof(*ref));
		if (!ref)
			return -ENOMEM;
		ref->t = t;
		if (ref_insert(s, ref)) {
			free(ref);
			return -ENOMEM;
		}
	}
	ref->count++;
	if (!t->holders++) {
		list_del_init(&t->lru);
		v->st.text_cached -= t->m.mapped;
	}
	s->use.text_refs++;
	s->tenant->use.text_refs++;
	v->st.seg[VMU_SEG_TEXT].allocs++;
	return 0;
}

/* Drop @count references of @ref. Lock held. */
static void text_unhold(struct vmu_session *s, struct vmu_text_ref *ref,
			unsigned long count)
{
	struct vmu *v = s->vmu;
	struct vmu_text *t = ref->t;

	ref->count -= count;
	t->holders -= count;
	s->use.text_refs -= count;
	s->tenant->use.text_refs -= count;
	if (!ref->count)
		ref_remove(s, ref);
	if (!t->holders) {
		list_add_tail(&t->lru, &v->text_lru);
		v->st.text_cached += t->m.mapped;
		if (t->stale) /* lost in a fault: nobody can find it */
			text_free_locked(v, t);
	}
}

int vmu_text_lookup(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
		    struct vmu_text **out)
{
	struct vmu *v = s->vmu;
	struct vmu_text *t;
	int ret = -ENOENT;

	vmu_lock(v);
	t = text_find(v, fp);
	if (t) {
		ret = text_hold(s, t);
		if (!ret) {
			v->st.text_hits++;
			*out = t;
		}
	} else {
		v->st.text_misses++;
	}
	vmu_unlock(v);
	return ret;
}

int vmu_text_put(struct vmu_session *s, struct vmu_text *t)
{
	struct vmu_text_ref *ref;
	int ret = -ENOENT;

	vmu_lock(s->vmu);
	ref = t ? ref_find(s, t) : NULL;
	if (ref) {
		text_unhold(s, ref, 1);
		ret = 0;
	}
	vmu_unlock(s->vmu);
	return ret;
}

int vmu_text_evict(struct vmu *v, const uint8_t fp[VMU_FP_LEN])
{
	struct vmu_text *t;
	int ret = -ENOENT;

	vmu_lock(v);
	t = text_find(v, fp);
	if (t && t->holders) {
		ret = -EBUSY;
	} else if (t) {
		text_free_locked(v, t);
		v->st.text_evictions++;
		ret = 0;
	}
	vmu_unlock(v);
	return ret;
}

uint64_t vmu_text_addr(const struct vmu_text *t)
{
	return t->m.addr;
}

uint64_t vmu_text_size(const struct vmu_text *t)
{
	return t->size;
}

const uint8_t *vmu_text_fp(const struct vmu_text *t)
{
	return t->fp;
}

/* Free an upload's memory. Lock held; the upload is off every list. */
static void upload_free_locked(struct vmu *v, struct vmu_text_upload *u)
{
	uint64_t bytes = u->m.mapped;

	mapping_release(v, &u->m);
	seg_add(v, VMU_SEG_TEXT, -(int64_t)bytes);
	uncharge(v, bytes);
	EVP_MD_CTX_free(u->md);
	free(u);
}

static int upload_start(struct vmu_session *s, uint64_t size, bool hash,
			struct vmu_text_upload **out)
{
	struct vmu *v = s->vmu;
	uint64_t bytes = vmu_round(v, size), from_resv;
	struct vmu_text_upload *u;
	int ret;

	if (!size || size > UINT64_MAX - v->gran)
		return -EINVAL;
	if (bytes > v->prov->capacity)
		return -E2BIG;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	if (hash) {
		u->md = EVP_MD_CTX_new();
		if (!u->md || !EVP_DigestInit_ex(u->md, EVP_sha256(), NULL)) {
			ret = -ENOMEM;
			goto out_free;
		}
	}
	ret = mapping_reserve(v, &u->m, bytes);
	if (ret)
		goto out_free;
	vmu_lock(v);
	ret = charge(v, bytes, NULL, &from_resv);
	vmu_unlock(v);
	if (ret)
		goto out_release;
	/* The granule's tail past @size is not zeroed: every read of an
	 * entry is bounded by its size, and zeroing would cost a whole
	 * granule for a small entry. */
	ret = mapping_grow(v, &u->m, bytes);
	vmu_lock(v);
	if (ret) {
		uncharge(v, bytes);
		vmu_unlock(v);
		goto out_release;
	}
	seg_add(v, VMU_SEG_TEXT, bytes);
	u->s = s;
	u->size = size;
	u->epoch = faults_now(v);
	list_add_tail(&u->node, &s->uploads);
	vmu_unlock(v);
	*out = u;
	return 0;

out_release:
	mapping_release(v, &u->m);
out_free:
	EVP_MD_CTX_free(u->md);
	free(u);
	return ret;
}

int vmu_text_begin(struct vmu_session *s, uint64_t size,
		   struct vmu_text_upload **out)
{
	return upload_start(s, size, true, out);
}

int vmu_text_write(struct vmu_text_upload *u, const void *src, uint64_t len)
{
	struct vmu_provider *p = u->s->vmu->prov;
	int ret;

	if (len > u->size - u->written)
		return -ERANGE;
	ret = p->ops->copy_htod(p, u->m.addr + u->written, src, len);
	if (ret)
		return ret;
	if (u->md && !EVP_DigestUpdate(u->md, src, len))
		return -EIO;
	u->written += len;
	return 0;
}

void vmu_text_abort(struct vmu_text_upload *u)
{
	struct vmu *v = u->s->vmu;

	vmu_lock(v);
	list_del_init(&u->node);
	upload_free_locked(v, u);
	vmu_unlock(v);
}

int vmu_text_commit(struct vmu_text_upload *u, const uint8_t *expect,
		    struct vmu_text **out, bool *created)
{
	struct vmu_session *s = u->s;
	struct vmu *v = s->vmu;
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text *t;
	int ret;

	if (u->written != u->size) {
		ret = -EINVAL; /* short upload */
		goto out_abort;
	}
	if (!u->md) {
		memcpy(fp, expect, VMU_FP_LEN); /* hashed by vmu_text_insert */
	} else if (!EVP_DigestFinal_ex(u->md, fp, NULL)) {
		ret = -EIO;
		goto out_abort;
	} else if (expect && memcmp(fp, expect, VMU_FP_LEN)) {
		ret = -EBADMSG;
		goto out_abort;
	}
	ret = v->prov->ops->set_access(v->prov, u->m.addr, u->m.vsize,
				       VMU_ACCESS_READ);
	if (ret)
		goto out_abort;

	vmu_lock(v);
	if (u->epoch != faults_now(v)) {
		/* its first bytes went to memory a fault has lost since */
		list_del_init(&u->node);
		upload_free_locked(v, u);
		vmu_unlock(v);
		return -EIO;
	}
	list_del_init(&u->node);
	t = text_find(v, fp);
	if (t) {
		/* Someone inserted the same bytes meanwhile: use theirs. */
		upload_free_locked(v, u);
		*created = false;
	} else {
		t = calloc(1, sizeof(*t));
		if (!t) {
			upload_free_locked(v, u);
			vmu_unlock(v);
			return -ENOMEM;
		}
		memcpy(t->fp, fp, VMU_FP_LEN);
		t->m = u->m;
		t->size = u->size;
		t->epoch = u->epoch;
		/* Published unheld; text_hold() takes it off the LRU. */
		list_add_tail(&t->lru, &v->text_lru);
		v->st.text_cached += t->m.mapped;
		text_hash_add(v, t);
		EVP_MD_CTX_free(u->md);
		free(u);
		*created = true;
	}
	ret = text_hold(s, t);
	if (!ret)
		*out = t;
	vmu_unlock(v);
	return ret;

out_abort:
	vmu_text_abort(u);
	return ret;
}

int vmu_text_insert(struct vmu_session *s, const void *src, uint64_t size,
		    struct vmu_text **out, bool *created)
{
	struct vmu_text_upload *u;
	uint8_t fp[VMU_FP_LEN];
	int ret;

	if (!size)
		return -EINVAL;
	/* Hash first: a hit costs no device memory and no copy. */
	vmu_fingerprint(src, size, fp);
	ret = vmu_text_lookup(s, fp, out);
	if (ret != -ENOENT) {
		if (!ret)
			*created = false;
		return ret;
	}
	ret = upload_start(s, size, false, &u);
	if (ret)
		return ret;
	ret = vmu_text_write(u, src, size);
	if (ret) {
		vmu_text_abort(u);
		return ret;
	}
	return vmu_text_commit(u, fp, out, created);
}

/* ---------------------------------------------------------------------- */
/* Stack segment */

int vmu_stack_create(struct vmu *v, uint64_t max_size, struct vmu_stack **out)
{
	struct vmu_stack *st;
	int ret;

	if (!max_size || max_size > UINT64_MAX - v->gran)
		return -EINVAL;
	if (vmu_round(v, max_size) > v->prov->capacity)
		return -E2BIG;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	ret = mapping_reserve(v, &st->m, vmu_round(v, max_size));
	if (ret) {
		free(st);
		return ret;
	}
	st->v = v;
	vmu_lock(v);
	list_add_tail(&st->node, &v->stacks);
	v->st.seg[VMU_SEG_STACK].entries++;
	vmu_unlock(v);
	*out = st;
	return 0;
}

void vmu_stack_destroy(struct vmu_stack *st)
{
	struct vmu *v = st->v;
	uint64_t bytes = st->m.mapped;

	vmu_lock(v);
	list_del_init(&st->node);
	if (!st->active)
		v->stack_idle -= bytes;
	v->st.seg[VMU_SEG_STACK].entries--;
	seg_add(v, VMU_SEG_STACK, -(int64_t)bytes);
	mapping_release(v, &st->m);
	uncharge(v, bytes);
	vmu_unlock(v);
	free(st);
}

uint64_t vmu_stack_need(struct vmu_stack *st, uint64_t peak)
{
	uint64_t need, have;

	if (peak > st->m.vsize)
		return UINT64_MAX; /* never fits */
	need = vmu_round(st->v, peak);
	vmu_lock(st->v);
	have = st->m.mapped;
	vmu_unlock(st->v);
	return need > have ? need - have : 0;
}

/* Mark the stack in use by a request, so reclaim leaves its backing. */
static int stack_claim(struct vmu_stack *st, uint64_t peak)
{
	struct vmu *v = st->v;

	if (st->active)
		return -EBUSY;
	if (peak > st->m.vsize) /* before rounding, which could wrap */
		return -E2BIG;
	vmu_lock(v);
	st->active = true;
	v->stack_idle -= st->m.mapped;
	vmu_unlock(v);
	st->top = 0;
	st->limit = peak;
	st->nr_allocs = 0;
	return 0;
}

static void stack_unclaim(struct vmu_stack *st)
{
	struct vmu *v = st->v;

	vmu_lock(v);
	st->active = false;
	v->stack_idle += st->m.mapped;
	pthread_cond_broadcast(&v->freed);
	vmu_unlock(v);
}

/* Map the claimed stack's backing up to @peak, drawing on @resv. */
static int stack_grow(struct vmu_stack *st, uint64_t peak,
		      struct vmu_resv *resv)
{
	struct vmu *v = st->v;
	uint64_t need = vmu_round(v, peak), from, from_resv;
	int ret = 0;

	vmu_lock(v);
	from = st->m.mapped;
	if (need <= from)
		goto out;
	ret = charge(v, need - from, resv, &from_resv);
	if (ret)
		goto out;
	drop_lock(v);
	ret = mapping_grow(v, &st->m, need);
	take_lock(v);
	if (ret)
		uncharge_resv(v, need - from, resv, from_resv);
	else
		seg_add(v, VMU_SEG_STACK, need - from);
out:
	vmu_unlock(v);
	return ret;
}

int vmu_stack_begin(struct vmu_stack *st, uint64_t peak, struct vmu_resv *resv)
{
	int ret = stack_claim(st, peak);

	if (ret)
		return ret;
	ret = stack_grow(st, peak, resv);
	if (ret)
		stack_unclaim(st);
	return ret;
}

int vmu_admit_stack(struct vmu *v, uint64_t need, struct vmu_stack *st,
		    uint64_t peak, struct vmu_resv *r, char *msg, size_t msglen)
{
	uint64_t grow;
	int ret;

	*r = (struct vmu_resv){ .vmu = v };
	if (peak > st->m.vsize) {
		/* More than the stack can ever hold: refused like any need
		 * that cannot fit, with the same message. */
		vmu_lock(v);
		fit(v, need > UINT64_MAX - peak ? UINT64_MAX : need + peak, msg,
		    msglen);
		v->st.admit_refusals++;
		vmu_unlock(v);
		return -ENOMEM;
	}
	ret = stack_claim(st, peak);
	if (ret)
		return ret;
	vmu_lock(v);
	grow = vmu_round(v, peak);
	grow = grow > st->m.mapped ? grow - st->m.mapped : 0;
	ret = need > UINT64_MAX - grow ?
		      -ENOMEM :
		      admit_locked(v, need + grow, r, st, msg, msglen);
	vmu_unlock(v);
	if (!ret)
		ret = stack_grow(st, peak, r);
	if (ret) {
		vmu_resv_release(r);
		stack_unclaim(st);
	}
	return ret;
}

int vmu_stack_alloc(struct vmu_stack *st, uint64_t size, uint64_t align,
		    uint64_t *addr)
{
	uint64_t off;

	if (!align)
		align = VMU_STACK_ALIGN;
	if (!st->active || !size || (align & (align - 1)))
		return -EINVAL;
	off = (st->top + align - 1) & ~(align - 1);
	if (off < st->top || off > st->limit || size > st->limit - off)
		return -ENOSPC;
	st->top = off + size;
	st->nr_allocs++;
	*addr = st->m.addr + off;
	return 0;
}

uint64_t vmu_stack_used(const struct vmu_stack *st)
{
	return st->top;
}

uint64_t vmu_stack_end(struct vmu_stack *st)
{
	struct vmu *v = st->v;
	uint64_t peak = st->top;

	if (!st->active)
		return 0;
	vmu_lock(v);
	st->active = false;
	v->stack_idle += st->m.mapped;
	pthread_cond_broadcast(&v->freed);
	v->st.seg[VMU_SEG_STACK].allocs += st->nr_allocs;
	v->st.seg[VMU_SEG_STACK].frees++;
	v->st.stack_last_peak = peak;
	vmu_unlock(v);
	st->top = 0;
	return peak;
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
	text_expire_locked(v);
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
		upload_free_locked(v, u);
	}
	list_for_each_entry_safe(ref, rn, &s->refs, node)
		text_unhold(s, ref, ref->count);
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
	tenant_put(s->tenant);
	vmu_unlock(v);
	free(s->ref_hash);
	free(s);
}

void vmu_get_stats(struct vmu *v, struct vmu_stats *st)
{
	vmu_lock(v);
	*st = v->st;
	st->capacity = v->prov->capacity;
	st->granularity = v->gran;
	st->committed = v->committed;
	st->reserved = v->reserved;
	st->region_reserved = v->region_resv;
	st->free = avail(v);
	st->pressure = v->level;
	vmu_unlock(v);
}

void vmu_destroy(struct vmu *v)
{
	struct swapbuf *b, *bn;

	while (!list_empty(&v->sessions))
		vmu_session_destroy(list_first_entry(&v->sessions,
						     struct vmu_session, node));
	vmu_lock(v);
	while (!list_empty(&v->text_lru))
		text_free_locked(v, list_first_entry(&v->text_lru,
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
	pthread_mutex_destroy(&v->lock);
	free(v->slots);
	free(v->hash);
	free(v);
}
