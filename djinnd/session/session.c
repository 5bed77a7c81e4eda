// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"
#include "names.h"
#include "server.h"
#include "session/tenant.h"
#include "exec/executor.h"

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

static uint64_t bucket(const struct server *srv, uint64_t id)
{
	return (id * 0x9e3779b97f4a7c15ull >> 17) & (srv->stab_size - 1);
}

/* The count of @uid's sessions, made when @add and missing; NULL when
 * missing (or out of memory). */
static struct uid_sessions *uid_count(struct server *srv, uid_t uid, bool add)
{
	for (unsigned int i = 0; i < srv->nr_uids; i++)
		if (srv->uids[i].uid == uid)
			return &srv->uids[i];
	if (!add)
		return NULL;
	if (srv->nr_uids == srv->cap_uids) {
		unsigned int cap = srv->cap_uids ? srv->cap_uids * 2 : 8;
		struct uid_sessions *u = realloc(srv->uids, cap * sizeof(*u));

		if (!u)
			return NULL;
		srv->uids = u;
		srv->cap_uids = cap;
	}
	srv->uids[srv->nr_uids] = (struct uid_sessions){ .uid = uid };
	return &srv->uids[srv->nr_uids++];
}

unsigned int session_uid_sessions(struct server *srv, uid_t uid)
{
	struct uid_sessions *u = uid_count(srv, uid, false);

	return u ? u->n : 0;
}

static int stab_add(struct server *srv, struct session *s)
{
	struct uid_sessions *u;

	if (srv->nr_sessions >= srv->stab_size) {
		uint64_t n = srv->stab_size ? srv->stab_size * 2 : 64;
		struct session **t = calloc(n, sizeof(*t)), *e;

		if (!t)
			return -ENOMEM;
		free(srv->stab);
		srv->stab = t;
		srv->stab_size = n;
		list_for_each_entry(e, &srv->sessions, node) {
			uint64_t b = bucket(srv, e->id);

			e->hnext = t[b];
			t[b] = e;
		}
	}
	u = uid_count(srv, s->uid, true);
	if (!u)
		return -ENOMEM;
	s->ts = tenant_state_get(srv, s->tenant);
	if (!s->ts) {
		if (!u->n)
			*u = srv->uids[--srv->nr_uids];
		return -ENOMEM;
	}
	s->ts->sessions++;
	u->n++;
	s->hnext = srv->stab[bucket(srv, s->id)];
	srv->stab[bucket(srv, s->id)] = s;
	list_add_tail(&s->node, &srv->sessions);
	srv->nr_sessions++;
	s->dev->nr_sessions++;
	return 0;
}

static void stab_del(struct server *srv, struct session *s)
{
	struct uid_sessions *u = uid_count(srv, s->uid, false);

	struct session **p = &srv->stab[bucket(srv, s->id)];

	while (*p && *p != s)
		p = &(*p)->hnext;
	if (*p)
		*p = s->hnext;
	list_del_init(&s->node);
	srv->nr_sessions--;
	s->dev->nr_sessions--;
	s->ts->sessions--;
	tenant_state_drop(s->ts);
	if (u && !--u->n)
		*u = srv->uids[--srv->nr_uids]; /* the last takes its place */
}

struct session *session_get(struct server *srv, uint64_t id)
{
	struct session *s;

	if (!srv->stab_size)
		return NULL;
	for (s = srv->stab[bucket(srv, id)]; s; s = s->hnext) {
		if (s->id == id && !s->dead) {
			session_ref(s);
			return s;
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------------- */
/* Lifetime */

static void rec_clear(struct result_rec *r);

unsigned int session_tenant_sessions(struct server *srv, const char *tenant)
{
	struct tenant_state *t = tenant_state_find(srv, tenant);

	return t ? t->sessions : 0;
}

bool session_tenant_full(struct server *srv, const char *tenant)
{
	const struct tenant_map *m = tenant_map_find(&srv->cfg, tenant);

	return m && m->sessions &&
	       session_tenant_sessions(srv, tenant) >= m->sessions;
}

int session_create(struct server *srv, struct device *dev, const char *tenant,
		   const char *label, uint32_t priority, uint64_t lease_ns,
		   uid_t uid, pid_t pid, struct session **out)
{
	const struct tenant_map *tm;
	struct session *s;
	uint64_t key, obj_key;
	int ret;

	if (!tenant_name_ok(tenant) || !tenant_name_ok(label) || priority > 7)
		return -EINVAL;
	if (srv->nr_sessions >= srv->cfg.max_sessions ||
	    session_uid_sessions(srv, uid) >= srv->cfg.max_sessions_per_uid ||
	    session_tenant_full(srv, tenant))
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
		lease_ns = srv->cfg.lease_default_ns;
	if (lease_ns < srv->cfg.lease_min_ns)
		lease_ns = srv->cfg.lease_min_ns;
	if (lease_ns > srv->cfg.lease_max_ns)
		lease_ns = srv->cfg.lease_max_ns;
	tm = tenant_map_find(&srv->cfg, tenant);
	if (tm && tm->lease_max_ns && lease_ns > tm->lease_max_ns)
		lease_ns = tm->lease_max_ns; /* tenant.NAME.lease_max */
	s->lease_ns = lease_ns;
	s->uid = uid;
	s->pid = pid;
	s->dev = dev;
	sched_session_init(dev->sched, s);
	s->epoch = __atomic_load_n(&dev->backend->faults, __ATOMIC_ACQUIRE);
	s->refs = 1; /* the table's */
	pthread_mutex_init(&s->lock, NULL);
	INIT_LIST_HEAD(&s->node);
	INIT_LIST_HEAD(&s->lease_node);
	*out = s;
	return 0;
}

int session_publish(struct server *srv, struct session *s)
{
	int ret;

	s->id = ++srv->next_id;
	ret = stab_add(srv, s);
	if (ret)
		return ret;
	ret = srv->leases->ops->open(srv->leases, s, loop_now());
	if (ret) {
		stab_del(srv, s);
		return ret;
	}
	/* The lease timer waits for the earliest deadline it knew of: bring
	 * it forward if this lease runs out sooner. */
	if (s->deadline_ns && s->deadline_ns < srv->lease_timer.when) {
		loop_timer_del(&srv->lease_timer);
		loop_timer_add(&srv->loop, &srv->lease_timer, s->deadline_ns);
	}
	srv->st.sessions_opened++;
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
	else
		vmu_region_destroy(s->vs, t->region);
}

void session_put(struct session *s)
{
	if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL))
		return;
	/* The last reference: nothing else can reach the session. The VMU
	 * teardown frees every region and text reference at once. */
	vmu_session_destroy(s->vs);
	for (uint32_t i = 0; i <= SESSION_RESULTS; i++)
		rec_clear(&s->results[i]);
	pthread_mutex_destroy(&s->lock);
	slots_fini(&s->tensors);
	slots_fini(&s->objs);
	free(s);
}

void session_end(struct server *srv, struct session *s,
		 enum session_end_reason why)
{
	if (s->dead)
		return;
	/* Executor threads look at it without the I/O thread's table. */
	__atomic_store_n(&s->dead, true, __ATOMIC_RELEASE);
	s->reason = why;
	stab_del(srv, s);
	srv->leases->ops->close(srv->leases, s);
	sched_session_end(s->dev->sched, s);
	executor_cancel(s->dev->exec, s);
	executor_cancel(s->dev->mem, s);
	msg_session_ended(srv, s);
	srv->st.sessions_ended[why]++;
	log_info("session %llu (tenant %s) ended: %s",
		 (unsigned long long)s->id, s->tenant,
		 session_reason_name(why));
	session_put(s);
}

int session_lost(struct server *srv, const struct session *s, char *msg,
		 size_t msglen)
{
	uint64_t now =
		__atomic_load_n(&s->dev->backend->faults, __ATOMIC_ACQUIRE);
	char why[256];

	if (now == s->epoch)
		return 0;
	server_fault_info(s->dev, why, sizeof(why));
	snprintf(msg, msglen,
		 "session %llu: device state lost in a fault: %s fault %llu "
		 "(%s); close the session and open a new one",
		 (unsigned long long)s->id, s->dev->name,
		 (unsigned long long)now, why);
	return -EIO;
}

void session_touch(struct server *srv, struct session *s)
{
	s->requests++;
	srv->leases->ops->renew(srv->leases, s, loop_now());
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

int session_tensor_get(struct session *s, uint64_t handle, struct tensor *t)
{
	struct tensor_slot *sl;

	pthread_mutex_lock(&s->lock);
	sl = slots_lookup(&s->tensors, handle);
	if (sl)
		*t = sl->t;
	pthread_mutex_unlock(&s->lock);
	return sl ? 0 : -ENOENT;
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
