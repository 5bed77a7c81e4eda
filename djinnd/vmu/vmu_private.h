/* SPDX-License-Identifier: MIT */
/*
 * The VMU's insides, shared by its source files and seen by nothing else
 * (vmu.h is the contract, Documentation/vmu.rst the design):
 *
 *   vmu.c    the core: accounting and pressure, mappings, reclaim,
 *            admission, tenants and sessions, data regions, faults,
 *            teardown and statistics
 *   swap.c   data regions out to host memory and back, swap buffers
 *   text.c   the text segment: the index, references, uploads
 *   stack.c  the stack segment
 *   host.c   the host provider, which sees provider.h only
 *
 * Locking. One mutex, v->lock, guards every list, table and counter.
 * Work that takes long (copies, zeroing, mapping) runs without it on an
 * object marked busy: a region in state MOVING, a stack that is active,
 * an upload that only its owner sees. Threads that need a MOVING region
 * wait on v->moved; but the crash journal's record (vmu_region_pieces())
 * names one whose bytes stay where they are (copying_out, grow_was),
 * so with the journal on a swap-out trims its mapping under the lock,
 * once its copy is over. Physical memory is freed to the provider before it
 * is uncharged, so the accounting never promises bytes the provider has
 * not got back. Functions named *_locked are called with the lock held;
 * those whose comments say "drops the lock" let go of it in the middle
 * (vmu_drop_lock()), and a public call ends with vmu_unlock().
 *
 * Accounting. v->committed counts the physical bytes of every chunk the
 * VMU holds; v->reserved counts bytes set aside by admission. A region's
 * share of every counter is added by vmu_region_acct(+1) and removed by
 * vmu_region_acct(-1) from a snapshot, so a counter can never drift while
 * the region changes without the lock.
 */
#ifndef DJINN_VMU_PRIVATE_H
#define DJINN_VMU_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "list.h"
#include "slots.h"
#include "vmu/vmu.h"

#define VMU_NAME_MAX 64

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
	unsigned int texts; /* text entries of its scope: it stays for them */
	struct vmu_usage use;
	/* bytes of its uploads in progress (vmu_text_begin()): they count
	 * against its quota from the start, so that uploads side by side
	 * cannot pass it together */
	uint64_t uploading;
	/* host bytes its model uploads hold while they are read
	 * (vmu_tenant_stage()) */
	uint64_t staged;
};

/* Tenant @name, made if it is not known yet: 0, -EINVAL, -ENOMEM. Lock
 * held. */
int vmu_tenant_get_locked(struct vmu *v, const char *name,
			  struct vmu_tenant **out);
/* Free @t if nothing keeps it: sessions, entries, quotas. Lock held. */
void vmu_tenant_put_locked(struct vmu_tenant *t);
/* Evict @t's unheld text, oldest first, until @bytes more fit its quota
 * (its own cache must not lock it out); whether they fit. Lock held. */
bool vmu_text_trim_tenant_locked(struct vmu *v, struct vmu_tenant *t,
				 uint64_t bytes);

/* Whether @bytes more of @t's data in host memory would pass its swap
 * quota. Lock held. */
/* Whether @bytes more of data or text of @t would pass its quota. */
static inline bool vmu_over_tenant_quota(const struct vmu_tenant *t,
					 uint64_t bytes)
{
	return t->use.quota &&
	       t->use.data_bytes + t->use.text_bytes + t->uploading + bytes >
		       t->use.quota;
}

/* Whether reclaim must leave @r: swapping it would take its tenant's
 * resident data below its guaranteed share. Lock held. */
static inline bool vmu_guarded(const struct vmu_tenant *t, uint64_t bytes)
{
	return t->use.guaranteed && t->use.resident < t->use.guaranteed + bytes;
}

static inline bool vmu_over_swap_quota(const struct vmu_tenant *t,
				       uint64_t bytes)
{
	return t->use.swap_quota && t->use.swapped + bytes > t->use.swap_quota;
}

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

/* What a region has added to the counters (see vmu_region_acct). */
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
	uint64_t victim; /* the scheduler's key for it alone (0: none) */
	struct vmu_mapping m;
	/* vmu_region_reserve(): the mapped size it is held to (0: none),
	 * and the bytes set aside for the rest */
	uint64_t resv_to, resv;
	void *host; /* swap buffer while SWAPPED */
	uint64_t host_size; /* its size, counted from before it is got
			     * until it is given back */
	/* MOVING, but its mapping stays as it is until the move is over
	 * (a swap-out's copy): vmu_region_pieces() names it meanwhile */
	bool copying_out;
	/* growing with the crash journal on: a copy of its chunks before
	 * (@grow_nr of them, @grow_mapped bytes), which stay as they are:
	 * vmu_region_pieces() names those bytes meanwhile */
	struct vmu_chunk *grow_was;
	unsigned int grow_nr;
	uint64_t grow_mapped;
	struct region_share share;
};

/* A region handle's slot in v->slots (lib/slots.h) */
struct vmu_slot {
	struct slot slot;
	struct vmu_region *r;
};

struct vmu_text {
	uint8_t fp[VMU_FP_LEN];
	/* whose: a tenant's name, or "" for the shared scope (vmu.h); the
	 * tenant, charged with its bytes (NULL when shared) */
	char owner[VMU_NAME_MAX];
	struct vmu_tenant *owner_t;
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
	bool shared; /* for the shared scope, else the session's tenant's */
	struct list_head node; /* s->uploads */
	struct vmu_mapping m;
	uint64_t size;
	uint64_t written;
	uint64_t epoch; /* the fault count when it began */
	EVP_MD_CTX *md; /* NULL when the caller has hashed already */
	uint64_t held; /* of its tenant's uploading (0: shared) */
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
	unsigned int nr_swap_quotas; /* tenants with one */
	unsigned int nr_guarantees; /* tenants with one */
	bool no_swap; /* vmu_set_swap(v, false) */
	uint64_t admit_wait_ns;
	enum vmu_pressure level;
	bool notify; /* level changed since the last callback */
	enum vmu_pressure reported; /* last level told, under cb_lock */
	uint64_t reclaim_gen; /* numbers reclaim passes */

	struct list_head tenants, sessions, stacks;

	struct slots slots; /* of struct vmu_slot: the region handles */

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

	/* The crash journal's (vmu_journal_*() in vmu.h): chunks and swap
	 * buffers freed wait in @deferred, under @jlock (taken inside
	 * @lock, never around it), until a record begun after their free
	 * is committed; @jstarted counts the records begun */
	pthread_mutex_t jlock;
	bool journal;
	uint64_t jstarted;
	struct list_head deferred;
	uint64_t deferred_bytes;
	/* of chunks (atomic): not available to allocations, though
	 * uncharged, until freed (avail()) */
	uint64_t deferred_chunks;
	/* told (any thread, any lock held) that a free waits: the I/O
	 * loop wakes to commit a record */
	void (*jwake)(void *arg);
	void *jwake_arg;

	struct vmu_stats st;
};

/* ---------------------------------------------------------------------- */
/* vmu.c */

void vmu_lock(struct vmu *v);
void vmu_unlock(struct vmu *v);
void vmu_drop_lock(struct vmu *v);
void vmu_take_lock(struct vmu *v);

void vmu_seg_add(struct vmu *v, enum vmu_seg seg, int64_t bytes);
int vmu_charge(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
	       uint64_t *from_resv);
void vmu_uncharge(struct vmu *v, uint64_t bytes);
/* The pressure level again, after the committed, reserved or idle stack
 * bytes changed (lock held; vmu_unlock() tells the callback). */
void vmu_pressure_update(struct vmu *v);
void vmu_uncharge_resv(struct vmu *v, uint64_t bytes, struct vmu_resv *resv,
		       uint64_t from_resv);

int vmu_mapping_reserve(struct vmu *v, struct vmu_mapping *m, uint64_t size);
int vmu_mapping_grow(struct vmu *v, struct vmu_mapping *m, uint64_t to);
/* The same with one chunk of the @nr kept pieces @pcs (the provider's
 * adopt()), their bytes as they are: -EINVAL unless they make @to -
 * @m->mapped bytes. */
int vmu_mapping_adopt(struct vmu *v, struct vmu_mapping *m, uint64_t to,
		      const struct vmu_piece *pcs, unsigned int nr);
/* Where @m's first @len bytes lie in the provider's file, as
 * vmu_region_pieces() says. */
int vmu_mapping_pieces(struct vmu *v, const struct vmu_mapping *m, uint64_t len,
		       struct vmu_piece **out, unsigned int *nr);
uint64_t vmu_mapping_trim(struct vmu *v, struct vmu_mapping *m, uint64_t keep);
/* With the journal on, a chunk's destroy, or a swap buffer given back
 * (vmu_swapbuf_put()), waits for the next record (true: it waits);
 * @buf NULL: chunk @handle, else the buffer. Any thread. */
bool vmu_defer_free(struct vmu *v, uint64_t handle, void *buf, uint64_t size);
void vmu_mapping_release(struct vmu *v, struct vmu_mapping *m);

void vmu_region_acct(struct vmu *v, struct vmu_region *r, int sign);
struct vmu_region *vmu_region_get_settled(struct vmu_session *s, uint64_t h);

enum vmu_fit vmu_admit_check_locked(struct vmu *v, uint64_t need, char *msg,
				    size_t msglen);
int vmu_admit_locked(struct vmu *v, uint64_t need, struct vmu_resv *r,
		     const struct vmu_stack *own, char *msg, size_t msglen);

/* ---------------------------------------------------------------------- */
/* swap.c */

/* A swap buffer given back (kept for reuse, or freed): with the journal
 * on, once the next record is committed; _now: at once. Lock held. */
void vmu_swapbuf_put(struct vmu *v, void *buf, uint64_t size);
void vmu_swapbuf_put_now(struct vmu *v, void *buf, uint64_t size);
void vmu_region_set_state(struct vmu *v, struct vmu_region *r,
			  enum vmu_region_state state);
int vmu_swap_out_locked(struct vmu *v, struct vmu_region *r);
/* An empty resident region made a swapped one of @size bytes from
 * @bytes (a restart's: it was swapped out), no device memory taken:
 * 0, -EBUSY, -ENOMEM. Drops the lock for the copy. */
int vmu_swap_fill_locked(struct vmu *v, struct vmu_region *r, uint64_t size,
			 const void *bytes);
/* The same over a predecessor's buffer, piece @pc of the provider's swap
 * arena (ops->swap_adopt()): nothing copied. 0, -EBUSY, -EINVAL. */
int vmu_swap_adopt_locked(struct vmu *v, struct vmu_region *r, uint64_t size,
			  const struct vmu_piece *pc);
int vmu_swap_in_locked(struct vmu *v, struct vmu_region *r,
		       struct vmu_resv *resv);

/* ---------------------------------------------------------------------- */
/* text.c */

void vmu_text_expire_locked(struct vmu *v);
void vmu_text_free_locked(struct vmu *v, struct vmu_text *t);
void vmu_text_unhold(struct vmu_session *s, struct vmu_text_ref *ref,
		     unsigned long count);
void vmu_upload_free_locked(struct vmu *v, struct vmu_text_upload *u);

#endif /* DJINN_VMU_PRIVATE_H */
