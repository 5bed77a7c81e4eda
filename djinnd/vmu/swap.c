// SPDX-License-Identifier: MIT
/*
 * The VMU's swap: a data region's bytes copied out to host memory and its
 * chunks freed, then mapped again at the same address and copied back;
 * and the host buffers kept for it. Reclaim (vmu.c) picks the victims.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vmu/vmu_private.h"

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
	vmu_drop_lock(v);
	ret = v->prov->ops->host_alloc(v->prov, size, buf);
	vmu_take_lock(v);
	return ret;
}

void vmu_swapbuf_put(struct vmu *v, void *buf, uint64_t size)
{
	if (!vmu_defer_free(v, 0, buf, size))
		vmu_swapbuf_put_now(v, buf, size);
}

void vmu_swapbuf_put_now(struct vmu *v, void *buf, uint64_t size)
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

void vmu_region_set_state(struct vmu *v, struct vmu_region *r,
			  enum vmu_region_state state)
{
	vmu_region_acct(v, r, -1);
	if (r->state == VMU_REGION_RESIDENT && !r->cached)
		list_del_init(&r->lru);
	if (r->state == VMU_REGION_MOVING)
		v->nr_moving--;
	if (state == VMU_REGION_MOVING)
		v->nr_moving++;
	r->state = state;
	if (state == VMU_REGION_RESIDENT && !r->cached)
		list_add_tail(&r->lru, &v->data_lru);
	vmu_region_acct(v, r, +1);
	if (state != VMU_REGION_MOVING)
		pthread_cond_broadcast(&v->moved);
}

/* Lock held; drops it for the copy. */
int vmu_swap_out_locked(struct vmu *v, struct vmu_region *r)
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
	/* its tenant's host memory is bounded too (tenant.NAME.swap) */
	if (vmu_over_swap_quota(r->s->tenant, bufsize))
		return -EDQUOT;
	/* The host bytes count against the limit from here on. */
	r->host_size = bufsize;
	vmu_region_set_state(v, r, VMU_REGION_MOVING);
	/* With the crash journal on, its mapping is not touched until the
	 * copy is over, and then under the lock: a record names its bytes
	 * there meanwhile rather than wait for the copy
	 * (vmu_region_pieces()), and the chunks trimmed wait for a record
	 * begun after. Else they go as soon as copied, outside the lock. */
	r->copying_out = __atomic_load_n(&v->journal, __ATOMIC_ACQUIRE);
	if (len) {
		ret = swapbuf_get(v, len, &buf);
		if (ret)
			goto out_resident;
	}
	vmu_drop_lock(v);
	ret = len ? v->prov->ops->copy_dtoh(v->prov, buf, r->m.addr, len) : 0;
	freed = ret || r->copying_out ? 0 : vmu_mapping_trim(v, &r->m, 0);
	vmu_take_lock(v);
	if (ret) {
		vmu_swapbuf_put(v, buf, bufsize);
		goto out_resident;
	}
	if (r->copying_out)
		freed = vmu_mapping_trim(v, &r->m, 0);
	r->copying_out = false;
	vmu_uncharge(v, freed);
	r->host = buf;
	vmu_region_set_state(v, r, VMU_REGION_SWAPPED);
	v->st.swap_outs++;
	v->st.swapped_out_bytes += len;
	return 0;

out_resident:
	r->copying_out = false;
	r->host_size = 0;
	vmu_region_set_state(v, r, VMU_REGION_RESIDENT);
	return ret;
}

/* Lock held; drops it for the copy. */
int vmu_swap_fill_locked(struct vmu *v, struct vmu_region *r, uint64_t size,
			 const void *bytes)
{
	void *buf = NULL;
	int ret;

	if (r->m.mapped || r->state != VMU_REGION_RESIDENT)
		return -EBUSY;
	r->host_size = vmu_round(v, size);
	vmu_region_set_state(v, r, VMU_REGION_MOVING);
	ret = size ? swapbuf_get(v, size, &buf) : 0;
	if (ret) {
		r->host_size = 0;
		vmu_region_set_state(v, r, VMU_REGION_RESIDENT);
		return ret;
	}
	vmu_drop_lock(v);
	memcpy(buf, bytes, size);
	vmu_take_lock(v);
	r->size = size;
	r->host = buf;
	vmu_region_set_state(v, r, VMU_REGION_SWAPPED);
	return 0;
}

/* Lock held. */
int vmu_swap_adopt_locked(struct vmu *v, struct vmu_region *r, uint64_t size,
			  const struct vmu_piece *pc)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	void *buf = NULL;
	int ret;

	if (r->m.mapped || r->state != VMU_REGION_RESIDENT)
		return -EBUSY;
	if (!ops->swap_adopt || pc->len < vmu_round(v, size))
		return -EINVAL;
	ret = size ? ops->swap_adopt(v->prov, pc, &buf) : -EINVAL;
	if (ret)
		return ret;
	r->host_size = pc->len;
	r->size = size;
	r->host = buf;
	vmu_region_set_state(v, r, VMU_REGION_SWAPPED);
	return 0;
}

/* Lock held; drops it for the mapping and the copy. */
int vmu_swap_in_locked(struct vmu *v, struct vmu_region *r,
		       struct vmu_resv *resv)
{
	const struct vmu_provider_ops *ops = v->prov->ops;
	uint64_t need = vmu_round(v, r->size), from_resv;
	int ret;

	if (r->state == VMU_REGION_RESIDENT)
		return 0;
	vmu_region_set_state(v, r, VMU_REGION_MOVING);
	ret = vmu_charge(v, need, resv, &from_resv);
	if (ret)
		goto out_swapped;
	vmu_drop_lock(v);
	ret = need ? vmu_mapping_grow(v, &r->m, need) : 0;
	if (!ret && r->size)
		ret = ops->copy_htod(v->prov, r->m.addr, r->host, r->size);
	if (!ret && need > r->size)
		ret = ops->memset(v->prov, r->m.addr + r->size, 0,
				  need - r->size);
	if (ret)
		vmu_mapping_trim(v, &r->m,
				 0); /* freed before it is uncharged */
	vmu_take_lock(v);
	if (ret) {
		vmu_uncharge_resv(v, need, resv, from_resv);
		goto out_swapped;
	}
	if (r->host)
		vmu_swapbuf_put(v, r->host, r->host_size);
	r->host = NULL;
	r->host_size = 0;
	vmu_region_set_state(v, r, VMU_REGION_RESIDENT);
	v->st.swap_ins++;
	v->st.swapped_in_bytes += r->size;
	return 0;

out_swapped:
	vmu_region_set_state(v, r, VMU_REGION_SWAPPED);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Swap calls: one region, a whole session, swapping on or off */

int vmu_region_swap_out(struct vmu_session *s, uint64_t handle)
{
	struct vmu *v = s->vmu;
	struct vmu_region *r;
	int ret = -ENOENT;

	vmu_lock(v);
	r = vmu_region_get_settled(s, handle);
	if (r)
		ret = vmu_swap_out_locked(v, r);
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
	r = vmu_region_get_settled(s, handle);
	if (r)
		ret = vmu_swap_in_locked(v, r, resv);
	vmu_unlock(v);
	return ret;
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
			/* the scheduler's swaps leave a tenant its
			 * guaranteed share too */
			if (out && (r->state != VMU_REGION_RESIDENT ||
				    r->pins || !r->m.mapped ||
				    vmu_guarded(s->tenant, r->m.mapped)))
				continue;
			if (!out && r->state != VMU_REGION_SWAPPED)
				continue;
			ret = out ? vmu_swap_out_locked(v, r) :
				    vmu_swap_in_locked(v, r, NULL);
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

void vmu_set_swap(struct vmu *v, bool on)
{
	vmu_lock(v);
	v->no_swap = !on;
	vmu_unlock(v);
}
