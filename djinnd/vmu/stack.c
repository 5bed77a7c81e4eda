// SPDX-License-Identifier: MIT
/*
 * The VMU's stack segment: one stack per executor thread, bump allocation
 * from a watermark that resets when the request ends.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "vmu/vmu_private.h"

#define VMU_STACK_ALIGN 256

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
	ret = vmu_mapping_reserve(v, &st->m, vmu_round(v, max_size));
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
	vmu_seg_add(v, VMU_SEG_STACK, -(int64_t)bytes);
	vmu_mapping_release(v, &st->m);
	vmu_uncharge(v, bytes);
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
	vmu_pressure_update(v);
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
	vmu_pressure_update(v);
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
	ret = vmu_charge(v, need - from, resv, &from_resv);
	if (ret)
		goto out;
	vmu_drop_lock(v);
	ret = vmu_mapping_grow(v, &st->m, need);
	vmu_take_lock(v);
	if (ret)
		vmu_uncharge_resv(v, need - from, resv, from_resv);
	else
		vmu_seg_add(v, VMU_SEG_STACK, need - from);
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
		vmu_admit_check_locked(
			v, need > UINT64_MAX - peak ? UINT64_MAX : need + peak,
			msg, msglen);
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
		      vmu_admit_locked(v, need + grow, r, st, msg, msglen);
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
	vmu_pressure_update(v);
	pthread_cond_broadcast(&v->freed);
	v->st.seg[VMU_SEG_STACK].allocs += st->nr_allocs;
	v->st.seg[VMU_SEG_STACK].frees++;
	v->st.stack_last_peak = peak;
	vmu_unlock(v);
	st->top = 0;
	return peak;
}
