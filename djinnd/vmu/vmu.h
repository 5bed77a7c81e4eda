/* SPDX-License-Identifier: MIT */
/*
 * The VMU (virtual memory unit): one device's memory in three segments.
 *
 *   text   shared read-only entries (weights, kernel modules) named by the
 *          SHA-256 of their bytes; reference counted per holding session;
 *          unheld entries stay cached in LRU order until memory is short.
 *   data   per-session regions (KV caches, results). A region reserves
 *          virtual space for its maximum size and maps physical chunks as
 *          it grows, so it never moves; it can be swapped out to host
 *          memory and comes back at the same address.
 *   stack  per-request scratch: bump allocation from a watermark, reset
 *          when the request ends.
 *
 * All physical memory comes from a struct vmu_provider (provider.h); the
 * VMU knows nothing of CUDA, the CPU or the network.
 *
 * Admission is the capability interlock: before a request runs, the
 * executor asks for its peak need with vmu_admit(). The VMU either
 * reserves that many bytes (evicting unheld text and swapping out idle
 * data regions first if it must), or refuses with -ENOMEM and a message
 * giving need and availability. Allocations made against the reservation
 * cannot then fail for lack of memory.
 *
 * Conventions: functions return 0 or a negative errno (-ENOMEM also when
 * a small host allocation fails); sizes are bytes; device addresses are
 * uint64_t. Every function is thread-safe except where a comment says an
 * object has a single owner (struct vmu_stack, struct vmu_resv,
 * vmu_session_destroy()).
 */
#ifndef DJINN_VMU_H
#define DJINN_VMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmu/provider.h"

#define VMU_FP_LEN 32 /* SHA-256 */
#define VMU_MSG_LEN 160 /* room for an admission message */

struct vmu;
struct vmu_session;
struct vmu_text;
struct vmu_text_upload;
struct vmu_stack;

enum vmu_seg {
	VMU_SEG_TEXT,
	VMU_SEG_DATA,
	VMU_SEG_STACK,
	VMU_NR_SEGS,
};

enum vmu_pressure {
	VMU_PRESSURE_NORMAL,
	VMU_PRESSURE_WARNING,
	VMU_PRESSURE_CRITICAL,
};

/*
 * struct vmu_config - tunables; zero fields take the defaults
 * @warn_pct:      pressure is WARNING from this % of capacity committed or
 *                 reserved by admission (80)
 * @crit_pct:      and CRITICAL from this % (95); 0 < warn_pct < crit_pct <= 100
 * @swap_limit:    host bytes swapped-out regions may hold, counted in
 *                 granules as host swap buffers are sized (0: no limit)
 * @swap_cache:    host swap buffers kept for reuse after a restore, in
 *                 bytes (default: a quarter of capacity)
 * @session_cache: bytes of destroyed regions each session keeps mapped for
 *                 reuse by its next region of the same size (default: a
 *                 quarter of capacity; the first thing reclaimed under
 *                 pressure)
 * @pressure_cb:   called when the pressure level changes, with no VMU lock
 *                 held, so it may call back into the VMU (evict, swap)
 * @faults:        the device's fault count (struct backend's), read
 *                 atomically; NULL for a device that never faults. Text
 *                 entries record it when their bytes arrive: see "Device
 *                 faults" below.
 */
struct vmu_config {
	unsigned int warn_pct;
	unsigned int crit_pct;
	uint64_t swap_limit;
	uint64_t swap_cache;
	uint64_t session_cache;
	void (*pressure_cb)(void *arg, enum vmu_pressure old,
			    enum vmu_pressure now);
	void *pressure_arg;
	uint64_t *faults;
};

/* Create a VMU over @prov (which stays the caller's). @cfg may be NULL. */
int vmu_create(struct vmu_provider *prov, const struct vmu_config *cfg,
	       struct vmu **out);
/* Destroy the VMU: every session must have been destroyed. Frees the
 * cached text entries, stacks are the caller's to destroy first. */
void vmu_destroy(struct vmu *v);
/* Change thresholds at run time (0 keeps the current value). */
int vmu_set_thresholds(struct vmu *v, unsigned int warn_pct,
		       unsigned int crit_pct);

uint64_t vmu_granularity(const struct vmu *v);
/* @size rounded up to the mapping granule: what it costs in memory. */
uint64_t vmu_round(const struct vmu *v, uint64_t size);
/* The provider of @v's memory. */
struct vmu_provider *vmu_provider(const struct vmu *v);

/* ---------------------------------------------------------------------- */
/* Sessions and tenants */

/* A session belongs to a tenant (created on first use, by name, at most
 * 63 bytes). Its data regions and text references are charged to it. */
int vmu_session_create(struct vmu *v, const char *tenant,
		       struct vmu_session **out);
/* Teardown: frees every data region (pinned ones too, waiting for swaps
 * in flight), drops every text reference and aborts pending uploads.
 * Afterwards nothing is charged to the session; the pointer is gone. The
 * caller has stopped all other use of @s (its requests are cancelled). */
void vmu_session_destroy(struct vmu_session *s);

/* Quotas on data bytes (mapped or swapped, granule-rounded); 0 lifts the
 * quota. Exceeding one is -EDQUOT. A tenant quota set before the tenant's
 * first session is kept for it. (A session's own: vmu_test.h.) */
int vmu_tenant_set_quota(struct vmu *v, const char *tenant, uint64_t bytes);
/* A tenant's quota on its data in host memory (swapped out), 0 for none:
 * reclaim and the scheduler's swaps pass over its regions that would
 * exceed it (-EDQUOT from a swap-out), so it keeps them on the device or
 * its allocation waits or fails like any that cannot fit. */
int vmu_tenant_set_swap_quota(struct vmu *v, const char *tenant,
			      uint64_t bytes);
/* A tenant's guaranteed share of the device, 0 for none: reclaim (for
 * anyone's admission or growth) and vmu_session_swap_out() never swap
 * its idle data out below it, so what other tenants borrowed above
 * their own shares goes first. */
int vmu_tenant_set_guarantee(struct vmu *v, const char *tenant, uint64_t bytes);

/*
 * struct vmu_usage - what a session or tenant is charged for
 * @data_bytes:    granule-rounded bytes of its regions, resident or not
 * @resident:      of those, bytes mapped on the device now
 * @swapped:       of those, bytes held in host memory now
 * @cached:        bytes of destroyed regions kept for reuse (not charged)
 * @regions:       live data regions
 * @text_refs:     text references held
 * @quota:         the quota, 0 if none; a tenant's counts @text_bytes
 *                 with @data_bytes
 * @text_bytes:    a tenant's: bytes of the text entries of its scope
 *                 (its uploads), held or cached
 * @swap_quota:    a tenant's: the most of @swapped it may have, 0 if none
 * @guaranteed:    a tenant's: @resident that reclaim leaves it, 0 if none
 */
struct vmu_usage {
	uint64_t data_bytes;
	uint64_t resident;
	uint64_t swapped;
	uint64_t cached;
	uint64_t regions;
	uint64_t text_refs;
	uint64_t quota;
	uint64_t text_bytes;
	uint64_t swap_quota;
	uint64_t guaranteed;
};
void vmu_session_usage(struct vmu_session *s, struct vmu_usage *u);

/*
 * Host memory @s's tenant holds for a model upload being read (the files
 * of MODEL_OPEN_UPLOADED are copied there): @bytes more, at most @limit
 * for all of the tenant's at once. 0, or -EDQUOT and nothing held, with
 * what the tenant holds already in *@held either way.
 * vmu_tenant_unstage() gives them back.
 */
int vmu_tenant_stage(struct vmu_session *s, uint64_t bytes, uint64_t limit,
		     uint64_t *held);
void vmu_tenant_unstage(struct vmu_session *s, uint64_t bytes);
int vmu_tenant_usage(struct vmu *v, const char *tenant, struct vmu_usage *u);

/* Swap out every idle region of @s (for the scheduler, on IO_WAIT);
 * returns the number swapped, or a negative errno. */
int vmu_session_swap_out(struct vmu_session *s);
/* Bring every swapped region of @s back (the scheduler's prefetch),
 * reclaiming as an allocation does; the number restored, or the first
 * error (the rest stay swapped). */
int vmu_session_swap_in(struct vmu_session *s);

/* The scheduler's ranking of @s's regions as reclaim victims: reclaim
 * swaps out the first, in LRU order, of the regions whose session has
 * the highest key; 0 (the default) for all is plain LRU. */
void vmu_session_set_victim(struct vmu_session *s, uint64_t key);
/* The same for region @handle alone (a context's wait): its key is its
 * own or its session's, the higher. -ENOENT for no such region. Never
 * waits for a move in progress (the I/O thread's). */
int vmu_region_set_victim(struct vmu_session *s, uint64_t handle, uint64_t key);
/* Region @handle's bytes as vmu_session_usage() counts a session's
 * (resident: mapped; swapped; data_bytes: its size), without waiting for
 * a move in progress (one in flight counts what it maps now); -ENOENT
 * and zeros for no such region. */
int vmu_region_usage(struct vmu_session *s, uint64_t handle,
		     struct vmu_usage *u);

/* Whether reclaim may swap data regions (default on). Off, as static
 * partitioning wants, idle regions stay and admission counts only what
 * eviction and stack trimming free. */
void vmu_set_swap(struct vmu *v, bool on);

/* How long an admission that does not fit waits for memory coming free
 * (another request's reservation or stack, a swap-out finishing) before
 * it is refused; 0 (the default): refused at once. */
void vmu_set_admit_wait(struct vmu *v, uint64_t ns);

/* ---------------------------------------------------------------------- */
/* Admission */

enum vmu_fit {
	VMU_FIT_NOW, /* free memory covers the need */
	VMU_FIT_AFTER_RECLAIM, /* after evicting text / swapping data */
	VMU_FIT_NEVER, /* not even then */
};

/*
 * struct vmu_resv - bytes set aside for one request by vmu_admit()
 *
 * Allocations given the reservation draw on it first and cannot fail for
 * lack of memory while it lasts. Release what is left with
 * vmu_resv_release() when the request ends. Owned by the caller.
 */
struct vmu_resv {
	struct vmu *vmu;
	uint64_t bytes;
};

/* Answer whether @need bytes would fit, without changing anything. @msg
 * (may be NULL) gets a line giving need and availability. */
enum vmu_fit vmu_admit_check(struct vmu *v, uint64_t need, char *msg,
			     size_t msglen);
/* Reserve @need bytes, reclaiming if it must. -ENOMEM (with @msg) when
 * they cannot fit: when the estimate says so, nothing is evicted or
 * swapped; a swap that fails during reclaim can still end in a refusal
 * after some eviction. Pin the regions a request will read before
 * admitting it: reclaim may swap out any region that is not pinned. */
int vmu_admit(struct vmu *v, uint64_t need, struct vmu_resv *r, char *msg,
	      size_t msglen);
/* The same for a request that runs on stack @st with peak @peak: the
 * stack is claimed first (so reclaim leaves its backing alone), @need
 * plus the stack's growth are admitted together, and on success the
 * stack is begun (as vmu_stack_begin) and @r holds @need. End the stack
 * with vmu_stack_end(). A peak beyond the stack's size is -ENOMEM with
 * the message, like any need that cannot fit. */
int vmu_admit_stack(struct vmu *v, uint64_t need, struct vmu_stack *st,
		    uint64_t peak, struct vmu_resv *r, char *msg,
		    size_t msglen);
void vmu_resv_release(struct vmu_resv *r);

/* ---------------------------------------------------------------------- */
/* Text segment */

/* SHA-256 of @len bytes at @buf. */
void vmu_fingerprint(const void *buf, size_t len, uint8_t fp[VMU_FP_LEN]);

/* The name of @s's tenant (vmu_session_create()'s @tenant). */
const char *vmu_session_tenant(const struct vmu_session *s);

/*
 * Scopes: an entry belongs to one tenant (a client's upload), found and
 * deduplicated only by sessions of that tenant, or to the shared scope
 * (the weights of models the administrator serves), found only through
 * the *_shared calls, which the model store alone makes. A lookup of
 * another tenant's bytes misses exactly as for bytes nobody uploaded
 * (Documentation/security.rst, "Text").
 *
 * Take a reference for @s on the entry named @fp of its tenant (of the
 * shared scope): 0, or -ENOENT.
 */
int vmu_text_lookup(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
		    struct vmu_text **out);
int vmu_text_lookup_shared(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
			   struct vmu_text **out);
/* Insert @size bytes from host memory, which must not change during the
 * call (they are hashed once, then copied). If an entry with the same
 * content exists, that one is referenced and returned and *@created is
 * false. */
int vmu_text_insert(struct vmu_session *s, const void *src, uint64_t size,
		    struct vmu_text **out, bool *created);
/* Drop one reference of @s: 0, or -ENOENT if @s holds none on @t. */
int vmu_text_put(struct vmu_session *s, struct vmu_text *t);
/* Drop the unheld entry @fp of tenant @owner (NULL: the shared scope)
 * now: 0, -ENOENT, or -EBUSY while held. */
int vmu_text_evict(struct vmu *v, const uint8_t fp[VMU_FP_LEN],
		   const char *owner);

/* The entry's bytes are at [addr, addr + size). The rest of its last
 * granule is not zeroed and may hold earlier bytes of any tenant: every
 * read of an entry is bounded by its size (a client kernel can read any
 * device memory of its context anyway; see the CUDA backend's notes). */
uint64_t vmu_text_addr(const struct vmu_text *t);
uint64_t vmu_text_size(const struct vmu_text *t);
const uint8_t *vmu_text_fp(const struct vmu_text *t);
/* Whether it is of the shared scope. */
bool vmu_text_shared(const struct vmu_text *t);

/*
 * A restart's text (svc/state.c). vmu_text_each() calls @fn for each
 * entry of the index with the VMU locked (@fn may not call into it):
 * its fingerprint, scope (its tenant's name, "" for the shared scope),
 * size, and where its bytes lie in the provider's file; the first error
 * @fn returns ends it, and is returned (-EOPNOTSUPP: the provider's
 * memory is no file). vmu_text_adopt() puts such an entry into the
 * index, unheld, with the bytes that pieces the provider keeps hold
 * (provider.h, adopt): 0, -EEXIST (the index has it), -EINVAL (pieces
 * not kept, or not vmu_round(size) bytes), -ENOMEM. vmu_text_pieces()
 * is where an entry's bytes lie, as vmu_region_pieces() says.
 */
struct vmu_text_desc {
	const uint8_t *fp;
	const char *owner;
	uint64_t size;
	const struct vmu_piece *pieces;
	unsigned int nr_pieces;
};
int vmu_text_each(struct vmu *v,
		  int (*fn)(void *arg, const struct vmu_text_desc *d),
		  void *arg);
int vmu_text_adopt(struct vmu *v, const struct vmu_text_desc *d);
int vmu_text_pieces(struct vmu *v, const struct vmu_text *t,
		    struct vmu_piece **out, unsigned int *nr);

/*
 * Streaming insert, for bytes that arrive in pieces (network uploads,
 * model shards). begin() allocates the device memory; write() appends in
 * order; commit() checks the fingerprint against @expect (if not NULL:
 * -EBADMSG on mismatch, and nothing is inserted) and publishes the entry,
 * or returns an existing one with the same content. commit and abort free
 * @u. A session's pending uploads are aborted by its teardown.
 */
int vmu_text_begin(struct vmu_session *s, uint64_t size,
		   struct vmu_text_upload **out);
/* The same into the shared scope. */
int vmu_text_begin_shared(struct vmu_session *s, uint64_t size,
			  struct vmu_text_upload **out);
int vmu_text_write(struct vmu_text_upload *u, const void *src, uint64_t len);
int vmu_text_commit(struct vmu_text_upload *u, const uint8_t *expect,
		    struct vmu_text **out, bool *created);
void vmu_text_abort(struct vmu_text_upload *u);

/*
 * Areas: writable device memory counted in the text segment, outside the
 * index (the layer ring of a streamed model, model/ring.h). An area has
 * no session and no fingerprint: its creator holds it until
 * vmu_text_area_free(), and the VMU never evicts it. Its bytes are
 * written through the provider's copies. 0, -EINVAL (@size 0), -E2BIG
 * (more than the device), -ENOMEM with need and availability in @msg.
 */
struct vmu_text_area;
int vmu_text_area_alloc(struct vmu *v, uint64_t size,
			struct vmu_text_area **out, char *msg, size_t msglen);
void vmu_text_area_free(struct vmu *v, struct vmu_text_area *a);
uint64_t vmu_text_area_addr(const struct vmu_text_area *a);

/* ---------------------------------------------------------------------- */
/* Data segment
 *
 * Regions are named by handles: opaque, per-VMU, generation-checked. A
 * stale handle (destroyed region) or another session's handle is -ENOENT
 * and touches nothing.
 */

enum vmu_region_state {
	VMU_REGION_RESIDENT,
	VMU_REGION_SWAPPED,
	VMU_REGION_MOVING, /* a swap or a growth is in progress */
};

struct vmu_region_info {
	uint64_t addr; /* device address; stable for the region's life */
	uint64_t size; /* bytes in use */
	uint64_t mapped; /* bytes backed by physical chunks */
	uint64_t max_size; /* reserved virtual size */
	enum vmu_region_state state;
	unsigned int pins;
};

/* Reserve a region of up to @max_size bytes, initially empty: -EINVAL for
 * 0, -E2BIG beyond capacity. */
int vmu_region_create(struct vmu_session *s, uint64_t max_size,
		      uint64_t *handle);
/* Grow or shrink in place. Growth maps zeroed chunks, drawing on @resv
 * (may be NULL); -E2BIG beyond max_size, -EDQUOT over quota, -ENOMEM out
 * of memory. Shrinking releases whole chunks past the new size, at once,
 * or at the last unpin if the region is pinned (its memory may be in
 * use). A swapped region is brought back first.
 *
 * Contents: bytes the session has not written are zero or bytes this
 * same session wrote earlier (a region taken back from its own cache, or
 * shrunk and grown again keeps them, as malloc would); never another
 * session's.
 *
 * Waste: growth maps one chunk for the new granules, so mapped - size is
 * under one granule. A chunk is released whole, so after shrinking (or
 * reusing a cached region for a smaller size) a region may keep up to one
 * chunk past its size until it is destroyed or swapped; a swap-in maps
 * exactly the granules its size needs. */
int vmu_region_resize(struct vmu_session *s, uint64_t handle, uint64_t size,
		      struct vmu_resv *resv);
/* Set memory aside now for the region to grow to its max_size (static
 * partitioning): its growth then cannot fail for lack of memory, a
 * shrink keeps what it gives back set aside, and destroying it gives all
 * back. -ENOMEM with need and availability in @msg when it cannot fit
 * (after reclaim), -EDQUOT over quota, -EBUSY while it is swapped or
 * moving. A reserved region is never swapped out. */
int vmu_region_reserve(struct vmu_session *s, uint64_t handle, char *msg,
		       size_t msglen);
/* Free the region; -EBUSY while pinned. */
int vmu_region_destroy(struct vmu_session *s, uint64_t handle);
int vmu_region_info(struct vmu_session *s, uint64_t handle,
		    struct vmu_region_info *info);

/* Move the region's bytes to host memory and free its chunks; the address
 * stays reserved. -EBUSY while pinned; -ENOSPC past swap_limit; 0 if
 * already swapped. */
int vmu_region_swap_out(struct vmu_session *s, uint64_t handle);
/* Bring it back at the same address with the same bytes. */
int vmu_region_swap_in(struct vmu_session *s, uint64_t handle,
		       struct vmu_resv *resv);

/* Pin for device use: swaps in if needed, then keeps the region resident
 * until unpinned. Fills @info (may be NULL). */
int vmu_region_pin(struct vmu_session *s, uint64_t handle,
		   struct vmu_resv *resv, struct vmu_region_info *info);
/* -EINVAL if not pinned. */
int vmu_region_unpin(struct vmu_session *s, uint64_t handle);

/* Copy between host memory and a region: -ERANGE outside [0, size). */
int vmu_region_write(struct vmu_session *s, uint64_t handle, uint64_t off,
		     const void *src, uint64_t len);
int vmu_region_read(struct vmu_session *s, uint64_t handle, uint64_t off,
		    void *dst, uint64_t len);

/*
 * A restart's regions (svc/state.c). What a region is filled with: @bytes
 * copied in (with @swapped, into host memory: the region stays swapped
 * out, as it was, and takes no device memory), or, with @nr_pieces, the
 * pieces @pieces of the provider's file taken over with the bytes they
 * hold (provider.h: a successor's provider keeps its predecessor's
 * memory for adopt()); with both @swapped and one piece, that piece of
 * the provider's swap arena taken over (swap_adopt()): swapped out as it
 * was, nothing copied.
 */
struct vmu_fill {
	const void *bytes;
	const struct vmu_piece *pieces;
	unsigned int nr_pieces;
	bool swapped;
};

/* Grow an empty region to @size with @f's bytes: -EBUSY when it is not
 * empty, -EINVAL for pieces that do not make vmu_round(@size) bytes or
 * that the provider does not keep; else as vmu_region_resize(). */
int vmu_region_fill(struct vmu_session *s, uint64_t handle, uint64_t size,
		    const struct vmu_fill *f);
/* Where the first @len bytes of a region lie in its provider's file: an
 * array (free() it) of pieces in their order, contiguous ones merged, in
 * *@out and their number in *@nr, and its max size in *@max_size (or
 * NULL). -EOPNOTSUPP when the provider's memory is no file, -ERANGE past
 * the region's mapped bytes, -ENODATA for a swapped region: its bytes
 * are in host memory at *@host (its size of them). A region moving is
 * not waited for when its bytes stay where they are (a crash journal's
 * record is written while requests run; a swap-in may wait for the
 * record to free the memory it needs, and the I/O thread that writes it
 * must not stall on a copy): one being swapped out is named where it
 * lies, its chunks untouched until the copy is over and then kept for
 * the next record; one being swapped in by its host copy, whole until the
 * swap-in is over and then kept likewise (-ENODATA); one growing, for
 * the bytes it held before, in the chunks that held them (a copy of
 * their list, made as the growth began). Bytes past those wait for the
 * growth. */
int vmu_region_pieces(struct vmu_session *s, uint64_t handle, uint64_t len,
		      struct vmu_piece **out, unsigned int *nr,
		      const void **host, uint64_t *max_size);

/* ---------------------------------------------------------------------- */
/* Stack segment
 *
 * One stack per executor thread. A stack has a single owner: begin, alloc
 * and end are called by one thread at a time. Its physical backing stays
 * mapped between requests for the next one and is trimmed under pressure
 * while no request runs on it.
 */

int vmu_stack_create(struct vmu *v, uint64_t max_size, struct vmu_stack **out);
void vmu_stack_destroy(struct vmu_stack *st);
/* Bytes vmu_stack_begin(st, peak) would have to add (UINT64_MAX if @peak
 * is over the stack's size). vmu_admit_stack() is the safe way to admit
 * them: a stack not yet claimed may be trimmed by reclaim meanwhile. */
uint64_t vmu_stack_need(struct vmu_stack *st, uint64_t peak);
/* Start a request that will use at most @peak bytes: maps the backing,
 * drawing on @resv (may be NULL). */
int vmu_stack_begin(struct vmu_stack *st, uint64_t peak, struct vmu_resv *resv);
/* Bump-allocate @size bytes aligned to @align (a power of two, 0 for 256):
 * -ENOSPC past the peak given to begin(), -EINVAL on bad arguments or
 * outside a request. Stack bytes are not zeroed: a request writes its
 * intermediates before it reads them. */
int vmu_stack_alloc(struct vmu_stack *st, uint64_t size, uint64_t align,
		    uint64_t *addr);
/* End the request: reset the watermark; returns the request's peak use. */
uint64_t vmu_stack_end(struct vmu_stack *st);
/* Bytes allocated (watermark) and live in the current request. */
uint64_t vmu_stack_used(const struct vmu_stack *st);

/* ---------------------------------------------------------------------- */
/* Device faults
 *
 * A device fault (a GPU kernel that poisons its context) loses the bytes
 * of the whole device's memory; the backend puts the memory back at the
 * same addresses, zeroed, and counts the fault in *cfg.faults. The VMU
 * keeps its bookkeeping and, for the text segment, the epoch: every
 * entry records the fault count when its upload began, and on the first
 * text lookup after the count changes (O(entries), once per fault) the
 * entries of an older epoch leave the index. A later insert or lookup of
 * the same bytes then misses and makes a new entry; the old one is
 * freed when its last holder puts it (the session layer fails the
 * holders' sessions). An upload that began before the fault and commits
 * after it is refused with -EIO. Data regions are the session layer's
 * concern (its sessions record the epoch too).
 */

/* The device's faults so far (0 when cfg.faults is NULL). */
uint64_t vmu_faults(const struct vmu *v);

/*
 * For tests, on a device that cannot fault (the CPU): what a fault does
 * to memory, simulated. Under the VMU's lock, zero every text entry and
 * every resident data region (swapped-out regions keep their bytes, as
 * they do in a real fault; regions being moved, session caches, pending
 * uploads and stacks are left as they are), add one to *cfg.faults and
 * take the stale text out of the index. Graphs running meanwhile are not
 * failed: they just see zeros. 0, -EOPNOTSUPP without cfg.faults, or the
 * provider's error (the fault is counted all the same).
 */
int vmu_fault_simulate(struct vmu *v);

/* ---------------------------------------------------------------------- */
/* The crash journal
 *
 * A djinnd that keeps its state for a crash (net/journal.h) commits a
 * record that names where its data lies in the device's memory, in
 * place, while that memory is in use. Memory freed after a record was
 * begun may still be named by the last committed one: from
 * vmu_journal_on(), a chunk destroyed (a region freed or swapped out, a
 * text entry evicted) and a swap buffer given back (a region swapped in)
 * are not given back to the provider, nor reused, until a record begun
 * after the free is committed, so that a crash never restores bytes the
 * memory has taken since (another session's). Meanwhile it is not
 * available (an allocation that needs it waits for it, as for memory
 * being moved, for up to 2 s whatever vmu_set_admit_wait() says, but on
 * the thread that called vmu_journal_on(), which writes the records),
 * and @wake (called from any thread, with locks held: it
 * must only post) tells the journal a record is owed. vmu_journal_begin()
 * before a record is written, vmu_journal_done() once it is committed:
 * what waited for it is freed. vmu_journal_waiting(): the bytes
 * waiting. I/O thread (the frees come from any thread).
 */
void vmu_journal_on(struct vmu *v, void (*wake)(void *arg), void *arg);
void vmu_journal_begin(struct vmu *v);
void vmu_journal_done(struct vmu *v);
uint64_t vmu_journal_waiting(struct vmu *v);
/* No journal any more: what waits is freed, and frees are not deferred
 * again. */
void vmu_journal_off(struct vmu *v);

/* ---------------------------------------------------------------------- */
/* Statistics */

/*
 * struct vmu_seg_stats - one segment
 * @used:    physical bytes the segment holds now
 * @peak:    highest @used seen
 * @entries: text entries / data regions / stacks
 * @allocs:  allocations (insert+lookup hits / regions / stack allocs)
 * @frees:   frees (entries freed / regions destroyed / stack resets)
 */
struct vmu_seg_stats {
	uint64_t used;
	uint64_t peak;
	uint64_t entries;
	uint64_t allocs;
	uint64_t frees;
};

struct vmu_stats {
	uint64_t capacity;
	uint64_t granularity;
	uint64_t committed; /* physical bytes held by all segments */
	uint64_t reserved; /* set aside by admission, not yet used */
	uint64_t region_reserved; /* by vmu_region_reserve() */
	uint64_t free; /* capacity - committed - both reserved */
	/* what may still be taken before memory.pressure_warning (0: past
	 * it), counted as the pressure level is: idle stacks left out */
	uint64_t pressure_room;
	enum vmu_pressure pressure;
	struct vmu_seg_stats seg[VMU_NR_SEGS];
	uint64_t text_hits, text_misses, text_evictions;
	uint64_t text_lost; /* entries dropped from the index by faults */
	uint64_t text_cached; /* bytes of unheld text entries */
	uint64_t data_cached; /* bytes in session region caches */
	uint64_t swap_outs, swap_ins;
	uint64_t swapped_out_bytes, swapped_in_bytes; /* totals */
	uint64_t swapped_now; /* host bytes held by swapped regions */
	uint64_t stack_last_peak; /* peak of the last finished request */
	uint64_t admits, admit_reclaims, admit_refusals;
	uint64_t admit_waits, admit_timeouts; /* vmu_set_admit_wait() */
	uint64_t admit_waiting; /* waiting now */
	uint64_t quota_refusals;
};
void vmu_get_stats(struct vmu *v, struct vmu_stats *st);

const char *vmu_pressure_name(enum vmu_pressure p);
const char *vmu_seg_name(enum vmu_seg seg);

#endif /* DJINN_VMU_H */
