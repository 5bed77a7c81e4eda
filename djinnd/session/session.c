// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <djinn/state.h>

#include "log.h"
#include "names.h"
#include "device.h"
#include "backend/backend.h"
#include "exec/executor.h"
#include "session/lease.h"
#include "session/session.h"

/* A tensor handle's slot in s->tensors: live while the handle is valid,
 * kept off the free list while held (holders) after it is gone. */
struct tensor_slot {
	struct slot slot;
	struct tensor t;
	uint32_t holders;
};

bool session_predictable_handles;

const char *session_reason_name(enum session_end_reason why)
{
	switch (why) {
	case SESSION_CLOSED:
		return "closed";
	case SESSION_EXPIRED:
		return "lease expired";
	case SESSION_KILLED:
		return "killed";
	case SESSION_SHUTDOWN:
		return "daemon shutdown";
	}
	return "?";
}

/* ---------------------------------------------------------------------- */
/* The table of live sessions, by id */

static uint64_t bucket(const struct session_table *t, uint64_t id)
{
	return (id * 0x9e3779b97f4a7c15ull >> 17) & (t->stab_size - 1);
}

/* The count of @uid's sessions, made when @add and missing; NULL when
 * missing (or out of memory). */
static struct uid_sessions *uid_count(struct session_table *t, uid_t uid,
				      bool add)
{
	for (unsigned int i = 0; i < t->nr_uids; i++)
		if (t->uids[i].uid == uid)
			return &t->uids[i];
	if (!add)
		return NULL;
	if (t->nr_uids == t->cap_uids) {
		unsigned int cap = t->cap_uids ? t->cap_uids * 2 : 8;
		struct uid_sessions *u = realloc(t->uids, cap * sizeof(*u));

		if (!u)
			return NULL;
		t->uids = u;
		t->cap_uids = cap;
	}
	t->uids[t->nr_uids] = (struct uid_sessions){ .uid = uid };
	return &t->uids[t->nr_uids++];
}

unsigned int session_uid_sessions(struct session_table *t, uid_t uid)
{
	struct uid_sessions *u = uid_count(t, uid, false);

	return u ? u->n : 0;
}

unsigned int session_peer_sessions(struct session_table *t, const char *tenant,
				   uid_t uid)
{
	/* TCP and TLS peers have no uid (-1): one network tenant must not
	 * take the limit from all of them */
	return uid == (uid_t)-1 ? session_tenant_sessions(t, tenant) :
				  session_uid_sessions(t, uid);
}

static int stab_add(struct session_table *t, struct session *s)
{
	struct uid_sessions *u;

	if (t->nr >= t->stab_size) {
		uint64_t n = t->stab_size ? t->stab_size * 2 : 64;
		struct session **h = calloc(n, sizeof(*h)), *e;

		if (!h)
			return -ENOMEM;
		free(t->stab);
		t->stab = h;
		t->stab_size = n;
		list_for_each_entry(e, &t->list, node) {
			uint64_t b = bucket(t, e->id);

			e->hnext = h[b];
			h[b] = e;
		}
	}
	u = uid_count(t, s->uid, true);
	if (!u)
		return -ENOMEM;
	s->ts = tenant_state_get(t, s->tenant);
	if (!s->ts) {
		if (!u->n)
			*u = t->uids[--t->nr_uids];
		return -ENOMEM;
	}
	s->ts->sessions++;
	u->n++;
	s->hnext = t->stab[bucket(t, s->id)];
	t->stab[bucket(t, s->id)] = s;
	list_add_tail(&s->node, &t->list);
	t->nr++;
	s->dev->nr_sessions++;
	return 0;
}

static void stab_del(struct session_table *t, struct session *s)
{
	struct uid_sessions *u = uid_count(t, s->uid, false);

	struct session **p = &t->stab[bucket(t, s->id)];

	while (*p && *p != s)
		p = &(*p)->hnext;
	if (*p)
		*p = s->hnext;
	list_del_init(&s->node);
	t->nr--;
	s->dev->nr_sessions--;
	s->ts->sessions--;
	tenant_state_drop(s->ts);
	if (u && !--u->n)
		*u = t->uids[--t->nr_uids]; /* the last takes its place */
}

struct session *session_get(struct session_table *t, uint64_t id)
{
	struct session *s;

	if (!t->stab_size)
		return NULL;
	for (s = t->stab[bucket(t, id)]; s; s = s->hnext) {
		if (s->id == id && !s->dead) {
			session_ref(s);
			return s;
		}
	}
	return NULL;
}

void session_table_init(struct session_table *t, struct loop *loop)
{
	memset(t, 0, sizeof(*t));
	INIT_LIST_HEAD(&t->list);
	INIT_LIST_HEAD(&t->tenants);
	t->loop = loop;
}

static void lease_expired(struct session *s, void *arg)
{
	struct session_table *t = arg;

	/* Waiting on the memory executor, its connection is paused: the
	 * HEARTBEATs the client sends meanwhile cannot be read yet. */
	if (s->mem_waits) {
		t->leases->ops->renew(t->leases, s, loop_now());
		return;
	}
	session_end(t, s, SESSION_EXPIRED);
}

static uint64_t lease_tick(struct loop_timer *lt, uint64_t now)
{
	struct session_table *t =
		container_of(lt, struct session_table, lease_timer);
	uint64_t next;

	if (t->held_at)
		return 100 * NSEC_PER_MSEC; /* a restart holds the leases */
	next = t->leases->ops->poll(t->leases, now, lease_expired, t);
	return next ? next : NSEC_PER_MSEC;
}

void session_table_hold_leases(struct session_table *t, bool hold)
{
	uint64_t now = loop_now();
	struct session *s;

	if (hold) {
		if (!t->held_at)
			t->held_at = now;
		if (t->leases->ops->hold)
			t->leases->ops->hold(t->leases, now);
		return;
	}
	if (!t->held_at)
		return;
	/* the time held is given back */
	list_for_each_entry(s, &t->list, node)
		if (s->deadline_ns)
			s->deadline_ns += now - t->held_at;
	t->held_at = 0;
}

uint64_t session_lease_left(const struct session_table *t,
			    const struct session *s)
{
	uint64_t now = t->held_at ? t->held_at : loop_now();
	uint64_t left = s->deadline_ns > now ? s->deadline_ns - now : 0;

	return left < s->lease_ns ? left : s->lease_ns;
}

void session_table_start(struct session_table *t)
{
	t->lease_timer.fn = lease_tick;
	loop_timer_add(t->loop, &t->lease_timer, loop_now() + NSEC_PER_MSEC);
}

void session_table_fini(struct session_table *t)
{
	free(t->stab);
	free(t->uids);
	t->stab = NULL;
	t->uids = NULL;
	t->stab_size = t->nr_uids = t->cap_uids = 0;
}

/* ---------------------------------------------------------------------- */
/* Lifetime */

static void rec_clear(struct result_rec *r);

unsigned int session_tenant_sessions(struct session_table *t,
				     const char *tenant)
{
	struct tenant_state *ts = tenant_state_find(t, tenant);

	return ts ? ts->sessions : 0;
}

bool session_tenant_full(struct session_table *t, const char *tenant)
{
	const struct tenant_map *m = tenant_map_find(&t->lim, tenant);

	return m && m->sessions &&
	       session_tenant_sessions(t, tenant) >= m->sessions;
}

int session_create(struct session_table *t, struct device *dev,
		   const char *tenant, const char *label, uint32_t priority,
		   uint64_t lease_ns, uid_t uid, pid_t pid,
		   struct session **out)
{
	const struct tenant_map *tm;
	struct session *s;
	uint64_t key, obj_key;
	int ret;

	if (!tenant_name_ok(tenant) || !tenant_name_ok(label) || priority > 7)
		return -EINVAL;
	if (t->nr >= t->lim.max_sessions ||
	    session_peer_sessions(t, tenant, uid) >=
		    t->lim.max_sessions_per_uid ||
	    session_tenant_full(t, tenant))
		return -EDQUOT;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (getrandom(s->token, sizeof(s->token), 0) != sizeof(s->token) ||
	    getrandom(&key, sizeof(key), 0) != sizeof(key) ||
	    getrandom(&obj_key, sizeof(obj_key), 0) != sizeof(obj_key)) {
		free(s);
		return -EIO;
	}
	if (session_predictable_handles)
		key = obj_key = 0;
	slots_init(&s->tensors, sizeof(struct tensor_slot), 16, 0, key);
	slots_init(&s->objs, sizeof(struct sobj_slot), 8, SESSION_MAX_OBJS,
		   obj_key);
	ret = vmu_session_create(dev->vmu, tenant, &s->vs);
	if (ret) {
		free(s);
		return ret;
	}
	strcpy(s->tenant, tenant);
	strcpy(s->label, label);
	s->priority = priority;
	if (!lease_ns)
		lease_ns = t->lim.lease_default_ns;
	if (lease_ns < t->lim.lease_min_ns)
		lease_ns = t->lim.lease_min_ns;
	if (lease_ns > t->lim.lease_max_ns)
		lease_ns = t->lim.lease_max_ns;
	tm = tenant_map_find(&t->lim, tenant);
	if (tm && tm->lease_max_ns && lease_ns > tm->lease_max_ns)
		lease_ns = tm->lease_max_ns; /* tenant.NAME.lease_max */
	s->lease_ns = lease_ns;
	s->uid = uid;
	s->pid = pid;
	s->dev = dev;
	sched_entity_init(dev->sched, &s->se, 0, s->tenant, priority, s->vs);
	s->epoch = __atomic_load_n(&dev->backend->faults, __ATOMIC_ACQUIRE);
	s->refs = 1; /* the table's */
	pthread_mutex_init(&s->lock, NULL);
	INIT_LIST_HEAD(&s->node);
	INIT_LIST_HEAD(&s->lease_node);
	*out = s;
	return 0;
}

/* Into the table as @id, its lease counted from @start. */
static int publish(struct session_table *t, struct session *s, uint64_t id,
		   uint64_t start)
{
	int ret;

	s->id = id;
	s->se.id = s->id;
	ret = stab_add(t, s);
	if (ret)
		return ret;
	ret = t->leases->ops->open(t->leases, s, start);
	if (ret) {
		stab_del(t, s);
		return ret;
	}
	/* The lease timer waits for the earliest deadline it knew of: bring
	 * it forward if this lease runs out sooner. */
	if (s->deadline_ns && s->deadline_ns < t->lease_timer.when) {
		loop_timer_del(&t->lease_timer);
		loop_timer_add(t->loop, &t->lease_timer, s->deadline_ns);
	}
	return 0;
}

int session_publish(struct session_table *t, struct session *s)
{
	int ret = publish(t, s, t->next_id + 1, loop_now());

	if (ret)
		return ret;
	t->next_id++;
	t->opened++;
	return 0;
}

int session_restore(struct session_table *t, struct device *dev,
		    const struct djinn_state_session *r, const uint32_t *gens,
		    const bool *live, const bool *obj_live,
		    struct session **out)
{
	uint64_t now = loop_now(), left = r->lease_left_ns;
	struct session *s = r->id ? session_get(t, r->id) : NULL;
	int ret;

	if (s) {
		session_put(s);
		return -EEXIST;
	}
	if (!r->id || memchr(r->tenant, 0, sizeof(r->tenant)) == NULL ||
	    memchr(r->label, 0, sizeof(r->label)) == NULL ||
	    !tenant_name_ok(r->tenant) || !tenant_name_ok(r->label) ||
	    r->priority > 7 || !r->lease_ns || left > r->lease_ns)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	memcpy(s->token, r->token, sizeof(s->token));
	slots_init(&s->tensors, sizeof(struct tensor_slot), 16, 0,
		   r->tensor_key);
	slots_init(&s->objs, sizeof(struct sobj_slot), 8, SESSION_MAX_OBJS,
		   r->obj_key);
	ret = slots_restore(&s->tensors, r->nr_slots, gens, live);
	if (!ret)
		ret = slots_restore(&s->objs, r->nr_obj_slots,
				    gens + r->nr_slots, obj_live);
	if (ret) {
		slots_fini(&s->tensors);
		free(s);
		return ret;
	}
	ret = vmu_session_create(dev->vmu, r->tenant, &s->vs);
	if (ret) {
		slots_fini(&s->tensors);
		slots_fini(&s->objs);
		free(s);
		return ret;
	}
	strcpy(s->tenant, r->tenant);
	strcpy(s->label, r->label);
	s->priority = r->priority;
	s->lease_ns = r->lease_ns;
	s->uid = r->uid;
	s->pid = (pid_t)r->pid;
	s->requests = r->requests;
	s->results_next = r->results_next % (SESSION_RESULTS + 1);
	/* the kernel session it had: the lease provider's open() takes it
	 * over (a user lease provider lets it go) */
	s->lease_kid = r->kid;
	s->lease_bound = r->kbound && r->kid;
	s->lease_adopt = r->kid != 0;
	s->dev = dev;
	sched_entity_init(dev->sched, &s->se, 0, s->tenant, s->priority, s->vs);
	s->epoch = __atomic_load_n(&dev->backend->faults, __ATOMIC_ACQUIRE);
	if (r->lost) {
		s->epoch = ~s->epoch; /* never the count again: lost */
		s->lost_restored = true;
	}
	s->refs = 1;
	pthread_mutex_init(&s->lock, NULL);
	INIT_LIST_HEAD(&s->node);
	INIT_LIST_HEAD(&s->lease_node);
	/* the lease as it was when the record was written: the restart's
	 * gap is added back */
	ret = publish(t, s, r->id, now - (r->lease_ns - left));
	if (ret) {
		session_put(s);
		return ret;
	}
	if (r->id > t->next_id)
		t->next_id = r->id;
	*out = s;
	return 0;
}

int session_tensor_restore(struct session *s, uint32_t slot,
			   const struct tensor *t)
{
	struct tensor_slot *sl;

	if (slot >= s->tensors.nr)
		return -EINVAL;
	sl = slots_at(&s->tensors, slot);
	if (!sl->slot.live || sl->t.text || sl->t.region || sl->t.lost)
		return -EINVAL; /* not a live slot, or one filled already */
	sl->t = *t;
	s->nr_tensors++;
	return 0;
}

void session_ref(struct session *s)
{
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

static void tensor_free(struct session *s, struct tensor *t)
{
	if (t->text)
		vmu_text_put(s->vs, t->text);
	else if (!t->lost)
		vmu_region_destroy(s->vs, t->region);
}

void session_put(struct session *s)
{
	if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL))
		return;
	/* The last reference: nothing else can reach the session. The VMU
	 * teardown frees every region and text reference at once. */
	sched_entity_fini(s->dev->sched, &s->se);
	vmu_session_destroy(s->vs);
	for (uint32_t i = 0; i <= SESSION_RESULTS; i++)
		rec_clear(&s->results[i]);
	pthread_mutex_destroy(&s->lock);
	slots_fini(&s->tensors);
	slots_fini(&s->objs);
	free(s);
}

/* Its queued jobs fail with -ECANCELED and go back to their callers;
 * a running one finishes, and finds the session gone. */
static void cancel_jobs(struct session *s)
{
	struct device *d = s->dev;
	struct list_head taken;

	INIT_LIST_HEAD(&taken);
	sched_take(d->sched, SCHED_COMPUTE, &s->se, &taken);
	executor_cancel(d->exec, &taken);
	sched_take(d->sched, SCHED_MEM, &s->se, &taken);
	executor_cancel(d->mem, &taken);
}

static void se_get(struct sched_entity *se)
{
	session_ref(container_of(se, struct session, se));
}

static void se_put(struct sched_entity *se)
{
	session_put(container_of(se, struct session, se));
}

const struct sched_ops session_sched_ops = { se_get, se_put };

void session_end(struct session_table *t, struct session *s,
		 enum session_end_reason why)
{
	if (s->dead)
		return;
	/* Executor threads look at it without the I/O thread's table. */
	__atomic_store_n(&s->dead, true, __ATOMIC_RELEASE);
	s->reason = why;
	stab_del(t, s);
	t->leases->ops->close(t->leases, s);
	sched_entity_end(s->dev->sched, &s->se);
	cancel_jobs(s);
	if (t->ended_hook)
		t->ended_hook(s, t->hook_arg);
	t->ended[why]++;
	log_info("session %llu (tenant %s) ended: %s",
		 (unsigned long long)s->id, s->tenant,
		 session_reason_name(why));
	session_put(s);
}

/* The last fault of @d in words: its backend's, or the VMU's simulated
 * one (a CPU device's). */
static void fault_info(struct device *d, char *msg, size_t msglen)
{
	struct backend *b = d->backend;

	if (b->ops->fault_info)
		b->ops->fault_info(b, msg, msglen);
	else
		snprintf(msg, msglen, "%s", d->fault_why);
}

int session_lost(const struct session *s, char *msg, size_t msglen)
{
	uint64_t now =
		__atomic_load_n(&s->dev->backend->faults, __ATOMIC_ACQUIRE);
	char why[256];

	if (now == s->epoch)
		return 0;
	if (s->lost_restored) {
		snprintf(msg, msglen,
			 "session %llu: its device state on %s was lost before "
			 "djinnd restarted (a device fault, or the device "
			 "died); close the session and open a new one",
			 (unsigned long long)s->id, s->dev->name);
		return -EIO;
	}
	fault_info(s->dev, why, sizeof(why));
	snprintf(msg, msglen,
		 "session %llu: device state lost in a fault: %s fault %llu "
		 "(%s); close the session and open a new one",
		 (unsigned long long)s->id, s->dev->name,
		 (unsigned long long)now, why);
	return -EIO;
}

void session_touch(struct session_table *t, struct session *s)
{
	s->requests++;
	t->leases->ops->renew(t->leases, s, loop_now());
}

/* ---------------------------------------------------------------------- */
/* Tensor handles */

int session_tensor_add(struct session *s, const struct tensor *t,
		       uint64_t *handle)
{
	struct tensor_slot *sl;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (s->nr_tensors >= SESSION_MAX_TENSORS) {
		ret = -EDQUOT;
		goto out;
	}
	sl = slots_alloc(&s->tensors, &ret);
	if (!sl)
		goto out;
	sl->t = *t;
	s->nr_tensors++;
	*handle = slots_handle(&s->tensors, sl);
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int session_tensor_each_locked(struct session *s,
			       int (*fn)(void *arg, uint32_t slot,
					 const struct tensor *t),
			       void *arg)
{
	struct tensor_slot *sl;
	int ret = 0;

	slots_for_each(&s->tensors, sl) {
		ret = fn(arg, slots_index(&s->tensors, sl), &sl->t);
		if (ret)
			break;
	}
	return ret;
}

int session_tensor_each(struct session *s,
			int (*fn)(void *arg, uint32_t slot,
				  const struct tensor *t),
			void *arg)
{
	int ret;

	pthread_mutex_lock(&s->lock);
	ret = session_tensor_each_locked(s, fn, arg);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int session_tensor_get(struct session *s, uint64_t handle, struct tensor *t)
{
	struct tensor_slot *sl;
	int ret = -ENOENT;

	pthread_mutex_lock(&s->lock);
	sl = slots_lookup(&s->tensors, handle);
	if (sl) {
		*t = sl->t;
		ret = sl->t.lost ? -EIO : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void session_tensor_why(struct session *s, uint64_t handle, int err, char *msg,
			size_t msglen)
{
	struct tensor_slot *sl;
	uint8_t why = LOST_DEVICE;

	pthread_mutex_lock(&s->lock);
	sl = slots_lookup(&s->tensors, handle);
	if (sl && sl->t.lost)
		why = sl->t.lost;
	pthread_mutex_unlock(&s->lock);
	if (err == -EIO && why == LOST_CRASH)
		snprintf(msg, msglen,
			 "tensor %#llx was lost when djinnd crashed: its "
			 "bytes were in %s's memory, which a crash does not "
			 "keep; release it",
			 (unsigned long long)handle, s->dev->name);
	else if (err == -EIO)
		snprintf(msg, msglen,
			 "tensor %#llx was lost when %s was reset: its bytes "
			 "were in device memory when djinnd restarted; "
			 "release it",
			 (unsigned long long)handle, s->dev->name);
	else
		snprintf(msg, msglen, "no tensor with handle %#llx",
			 (unsigned long long)handle);
}

/* Drop the lock; if @sl's handle is gone and nobody holds it, put the
 * slot back on the free list and free its tensor. */
static void slot_unlock(struct session *s, struct tensor_slot *sl)
{
	struct tensor t = sl->t;
	bool free_now = !sl->holders && !sl->slot.live;

	if (free_now)
		slots_put(&s->tensors, sl);
	pthread_mutex_unlock(&s->lock);
	if (free_now)
		tensor_free(s, &t);
}

int session_tensor_release(struct session *s, uint64_t handle)
{
	struct tensor_slot *sl;

	pthread_mutex_lock(&s->lock);
	sl = slots_lookup(&s->tensors, handle);
	if (!sl) {
		pthread_mutex_unlock(&s->lock);
		return -ENOENT;
	}
	slots_retire(&s->tensors, sl);
	s->nr_tensors--;
	slot_unlock(s, sl);
	return 0;
}

int session_tensor_hold(struct session *s, uint64_t handle, struct tensor *t,
			uint32_t *slot)
{
	struct tensor_slot *sl;

	pthread_mutex_lock(&s->lock);
	sl = slots_lookup(&s->tensors, handle);
	if (sl && sl->t.lost) {
		pthread_mutex_unlock(&s->lock);
		return -EIO;
	}
	if (sl) {
		sl->holders++;
		*t = sl->t;
		*slot = slots_index(&s->tensors, sl);
	}
	pthread_mutex_unlock(&s->lock);
	return sl ? 0 : -ENOENT;
}

void session_tensor_unhold(struct session *s, uint32_t slot)
{
	struct tensor_slot *sl;

	pthread_mutex_lock(&s->lock);
	sl = slots_at(&s->tensors, slot);
	sl->holders--;
	slot_unlock(s, sl);
}

/* ---------------------------------------------------------------------- */
/* Graph results, for DJINN_REF_RESULT */

static void rec_clear(struct result_rec *r)
{
	free(r->descs);
	free(r->handles);
	memset(r, 0, sizeof(*r));
}

/* The record of @request_id. Lock held. */
static struct result_rec *rec_find(struct session *s, uint64_t request_id)
{
	for (uint32_t i = 0; i <= SESSION_RESULTS; i++)
		if (s->results[i].nr && s->results[i].request_id == request_id)
			return &s->results[i];
	return NULL;
}

int session_result_restore(struct session *s, uint32_t index,
			   uint64_t request_id, uint32_t nr, int error,
			   const struct djinn_tensor_desc *descs,
			   const uint64_t *handles)
{
	struct result_rec *r;

	if (index > SESSION_RESULTS || !nr)
		return -EINVAL;
	r = &s->results[index];
	if (r->descs)
		return -EINVAL; /* the slot twice */
	r->descs = malloc(nr * sizeof(*r->descs));
	r->handles = calloc(nr, sizeof(*r->handles));
	if (!r->descs || !r->handles) {
		rec_clear(r);
		return -ENOMEM;
	}
	memcpy(r->descs, descs, nr * sizeof(*descs));
	if (!error)
		memcpy(r->handles, handles, nr * sizeof(*handles));
	r->request_id = request_id;
	r->nr = nr;
	r->done = true;
	r->error = error;
	return 0;
}

int session_result_begin(struct session *s, uint64_t request_id, uint32_t nr,
			 const struct djinn_tensor_desc *descs)
{
	struct result_rec *r;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	r = &s->results[s->results_next];
	rec_clear(r);
	r->descs = malloc(nr * sizeof(*r->descs));
	r->handles = calloc(nr, sizeof(*r->handles));
	if (!r->descs || !r->handles) {
		rec_clear(r);
		ret = -ENOMEM;
		goto out;
	}
	memcpy(r->descs, descs, nr * sizeof(*descs));
	r->request_id = request_id;
	r->nr = nr;
	s->results_next = (s->results_next + 1) % (SESSION_RESULTS + 1);
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void session_result_finish(struct session *s, uint64_t request_id,
			   const uint64_t *handles, int error)
{
	struct result_rec *r;

	pthread_mutex_lock(&s->lock);
	r = rec_find(s, request_id);
	if (r) {
		r->done = true;
		r->error = error;
		if (!error)
			memcpy(r->handles, handles, r->nr * sizeof(*handles));
	}
	pthread_mutex_unlock(&s->lock);
}

int session_result_desc(struct session *s, uint64_t request_id, uint32_t index,
			struct djinn_tensor_desc *desc)
{
	struct result_rec *r;
	int ret = -ENOENT;

	pthread_mutex_lock(&s->lock);
	r = rec_find(s, request_id);
	if (r && index < r->nr) {
		*desc = r->descs[index];
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int session_result_handle(struct session *s, uint64_t request_id,
			  uint32_t index, uint64_t *handle)
{
	struct result_rec *r;
	int ret = -ENOENT;

	pthread_mutex_lock(&s->lock);
	r = rec_find(s, request_id);
	if (r && index < r->nr) {
		if (!r->done)
			ret = -EAGAIN;
		else if (r->error)
			ret = r->error;
		else
			*handle = r->handles[index], ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Model and context handles */

int session_obj_restore(struct session *s, uint32_t slot, enum sobj_kind kind,
			void *p)
{
	struct sobj_slot *o;

	if (slot >= s->objs.nr)
		return -EINVAL;
	o = slots_at(&s->objs, slot);
	if (!o->slot.live || o->p)
		return -EINVAL;
	o->kind = (uint8_t)kind;
	o->p = p;
	return 0;
}

void *session_obj_at(struct session *s, uint32_t slot, enum sobj_kind kind)
{
	struct sobj_slot *o;

	if (slot >= s->objs.nr)
		return NULL;
	o = slots_at(&s->objs, slot);
	return o->slot.live && o->kind == kind ? o->p : NULL;
}

int session_obj_add(struct session *s, enum sobj_kind kind, void *p,
		    uint64_t *handle)
{
	struct sobj_slot *o;
	int ret;

	o = slots_alloc(&s->objs, &ret);
	if (!o)
		return ret == -ENOSPC ? -EDQUOT : ret;
	o->kind = (uint8_t)kind;
	o->p = p;
	*handle = slots_handle(&s->objs, o);
	return 0;
}

static struct sobj_slot *obj_slot(struct session *s, uint64_t handle,
				  enum sobj_kind kind)
{
	struct sobj_slot *o = slots_lookup(&s->objs, handle);

	return o && o->kind == kind ? o : NULL;
}

void *session_obj_get(struct session *s, uint64_t handle, enum sobj_kind kind)
{
	struct sobj_slot *o = obj_slot(s, handle, kind);

	return o ? o->p : NULL;
}

void *session_obj_del(struct session *s, uint64_t handle, enum sobj_kind kind)
{
	struct sobj_slot *o = obj_slot(s, handle, kind);
	void *p;

	if (!o)
		return NULL;
	p = o->p;
	slots_free(&s->objs, o);
	return p;
}

void session_obj_drain(struct session *s,
		       void (*fn)(enum sobj_kind kind, void *p, void *arg),
		       void *arg)
{
	struct sobj_slot *o;

	/* Contexts first: each holds its model. */
	for (int pass = SOBJ_CTX; pass >= SOBJ_MODEL; pass--) {
		slots_for_each(&s->objs, o) {
			void *p = o->p;

			if (o->kind != pass)
				continue;
			slots_free(&s->objs, o);
			fn((enum sobj_kind)pass, p, arg);
		}
	}
}

/* ---------------------------------------------------------------------- */
/* What a session may have in flight, and run */

int session_inflight_check(struct session_table *t, const struct session *s,
			   char *msg, size_t msglen)
{
	const struct tenant_map *m = tenant_map_find(&t->lim, s->tenant);

	if (m && m->inflight && s->ts->inflight >= m->inflight) {
		snprintf(msg, msglen,
			 "%u graphs, model steps and model uploads in flight "
			 "for tenant %s, its quota (tenant.%s.inflight): wait "
			 "for their answers",
			 s->ts->inflight, s->tenant, s->tenant);
		return -EDQUOT;
	}
	if (s->se.inflight < SCHED_INFLIGHT_MAX)
		return 0;
	snprintf(msg, msglen,
		 "%u graphs, model steps and model uploads in flight: wait "
		 "for their answers",
		 s->se.inflight);
	return -EAGAIN;
}

void session_inflight_add(struct session *s)
{
	s->se.inflight++;
	s->ts->inflight++;
}

void session_inflight_sub(struct session *s)
{
	s->se.inflight--;
	s->ts->inflight--;
	tenant_state_drop(s->ts);
}

int session_kernels_check(struct session_table *t, const struct session *s,
			  char *msg, size_t msglen)
{
	if (tenant_client_kernels(&t->lim, s->tenant))
		return 0;
	snprintf(msg, msglen,
		 "client kernels are off for tenant %s ([tenant.%s] "
		 "client_kernels = yes in djinnd.conf)",
		 s->tenant, s->tenant);
	return -EPERM;
}
