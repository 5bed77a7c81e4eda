// SPDX-License-Identifier: MIT
/*
 * The devices' services (svc/devices.h): where a new session goes, and a
 * fault injected for tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "log.h"
#include "backend/backend.h"
#include "model/store.h"
#include "sched/sched.h"
#include "svc/devices.h"
#include "vmu/vmu.h"

struct device *svc_place(struct device *devs, unsigned int nr_dev,
			 uint32_t want, char *msg, size_t msglen)
{
	struct device *best = NULL;
	uint64_t best_free = 0;

	if (want) {
		if (want <= nr_dev)
			return &devs[want - 1];
		snprintf(msg, msglen,
			 "no device %u: this djinnd has %u device%s (0 to %u)",
			 want - 1, nr_dev, nr_dev == 1 ? "" : "s", nr_dev - 1);
		return NULL;
	}
	for (unsigned int i = 0; i < nr_dev; i++) {
		struct device *d = &devs[i];
		struct vmu_stats st;

		vmu_get_stats(d->vmu, &st);
		if (!best || st.free > best_free ||
		    (st.free == best_free &&
		     d->nr_sessions < best->nr_sessions)) {
			best = d;
			best_free = st.free;
		}
	}
	return best;
}

int svc_fault_inject(struct device *d, uint32_t flags, char *msg, size_t msglen)
{
	struct backend *b = d->backend;
	uint64_t before = __atomic_load_n(&b->faults, __ATOMIC_ACQUIRE);
	int ret;

	if (b->ops->inject_fault) {
		ret = b->ops->inject_fault(b, msg, msglen);
	} else {
		snprintf(d->fault_why, sizeof(d->fault_why),
			 "%s: injected fault, simulated: device memory "
			 "zeroed",
			 d->name);
		ret = vmu_fault_simulate(d->vmu);
		snprintf(msg, msglen, "%s", d->fault_why);
		if (ret)
			snprintf(msg, msglen, "%s: zeroing the memory: %s",
				 d->name, strerror(-ret));
	}
	if (__atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) == before && !ret) {
		snprintf(msg, msglen, "%s: the fault was not counted", d->name);
		ret = -EIO;
	}
	if (__atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) != before)
		log_warn("%s: fault %llu injected (ADMIN_FAULT_INJECT): %s",
			 d->name,
			 (unsigned long long)__atomic_load_n(&b->faults,
							     __ATOMIC_ACQUIRE),
			 msg);
	/* The fault happened and the device did not survive it (a sticky
	 * error that the context reset does not clear: CUDA's documented
	 * case for an illegal address). What was asked for was done; the
	 * answer says the device is dead, as for DJINN_FAULT_DEAD. */
	if (ret && __atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) != before &&
	    __atomic_load_n(&b->dead, __ATOMIC_ACQUIRE))
		ret = 0;
	if (!ret && (flags & DJINN_FAULT_DEAD)) {
		const char *none = NULL;

		/* as after CUDA_ERROR_CONTAINED: devices_watch() exits */
		snprintf(d->dead_why, sizeof(d->dead_why),
			 "an injected fatal fault (ADMIN_FAULT_INJECT, "
			 "DJINN_FAULT_DEAD)");
		__atomic_compare_exchange_n(&b->dead, &none, d->dead_why, false,
					    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	}
	if (!ret && __atomic_load_n(&b->dead, __ATOMIC_ACQUIRE)) {
		char cause[256];

		/* first, so that a long cause cannot cut it off */
		snprintf(cause, sizeof(cause), "%s", msg);
		snprintf(msg, msglen,
			 "%s: the device is dead: djinnd exits so that systemd "
			 "restarts it; %s",
			 d->name, cause);
	}
	return ret;
}

unsigned int svc_jobs(struct device *devs, unsigned int nr_dev)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < nr_dev; i++) {
		if (!devs[i].sched)
			continue;
		for (unsigned int l = 0; l < SCHED_LANES; l++) {
			unsigned int q, r;

			sched_depth(devs[i].sched, l, &q, &r);
			n += q + r;
		}
	}
	return n;
}

/* @list's entry into @m (@n entries of @cap), found by name or added: 0,
 * or -ENOMEM (then @m and @n are as they were). */
static int status_model(const struct model_info *info,
			struct djinn_status_model **m, size_t *n, size_t *cap)
{
	struct djinn_status_model *e = NULL;

	for (size_t j = 0; j < *n && !e; j++)
		if (!strcmp((*m)[j].name, info->name))
			e = &(*m)[j];
	if (!e) {
		if (*n == DJINN_STATUS_MODELS_MAX)
			return 0;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 8;
			void *p = realloc(*m, nc * sizeof(**m));

			if (!p)
				return -ENOMEM;
			*m = p;
			*cap = nc;
		}
		e = &(*m)[(*n)++];
		memset(e, 0, sizeof(*e));
		memcpy(e->name, info->name, sizeof(e->name));
	}
	e->holders += info->holders;
	if (info->bytes > e->bytes)
		e->bytes = info->bytes;
	if (info->resident < info->layers)
		e->flags |= DJINN_STATUS_STREAMED;
	return 0;
}

int svc_status(struct device *devs, unsigned int nr_dev, const char *tenant,
	       struct djinn_status *st, struct djinn_status_model **models,
	       size_t *nr)
{
	struct djinn_status_model *m = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;

	for (unsigned int d = 0; d < nr_dev && !ret; d++) {
		struct device *dv = &devs[d];
		struct model_info *list = NULL;
		struct vmu_usage u;
		struct vmu_stats vs;
		uint64_t room;
		size_t k = 0;

		vmu_get_stats(dv->vmu, &vs);
		st->capacity += vs.capacity;
		st->free += vs.free;
		if ((uint32_t)vs.pressure > st->pressure)
			st->pressure = (uint32_t)vs.pressure;
		if (vs.pressure_room > st->pressure_room)
			st->pressure_room = vs.pressure_room;
		st->data_bytes += vs.seg[VMU_SEG_DATA].used;
		/* the tenant's room: the device's, less where its quota ends */
		room = vs.free;
		if (!vmu_tenant_usage(dv->vmu, tenant, &u) && u.quota)
			room = u.quota <= u.data_bytes ?
				       0 :
			       u.quota - u.data_bytes < room ?
				       u.quota - u.data_bytes :
				       room;
		if (room > st->tenant_free)
			st->tenant_free = room;
		st->queued += svc_jobs(dv, 1);
		if (!dv->models)
			continue;
		st->flags |= DJINN_STATUS_MODELS;
		ret = model_store_list(dv->models, &list, &k);
		for (size_t i = 0; i < k && !ret; i++)
			if (!list[i].uploaded) /* an upload is its tenant's */
				ret = status_model(&list[i], &m, &n, &cap);
		free(list);
	}
	if (ret) {
		free(m);
		return ret;
	}
	*models = m;
	*nr = n;
	return 0;
}
