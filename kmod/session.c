// SPDX-License-Identifier: GPL-2.0
/*
 * Sessions: creation, the table, leases, phase signals, the completion
 * ring and the one way a session ends. See djinn_priv.h for the
 * lifetimes and the lock order.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/ktime.h>
#include <linux/log2.h>
#include <linux/poll.h>
#include <linux/random.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/vmalloc.h>

#include "djinn_priv.h"

static DEFINE_XARRAY_ALLOC1(djinn_sessions);
static u32 djinn_next_id;

/*
 * The limits. Every session counts from djinn_session_create() until it is
 * freed (an ended session still counts while its file, or the daemon's
 * proxy list, holds it). Under djinn_limits_lock: the counts and the
 * per-uid table (kuid -> xa_mk_value(local sessions), no entry for 0).
 * Both ends run in process context: creation in an ioctl, the free from
 * the last djinn_session_put(), which vfree()s and so already may sleep.
 */
static DEFINE_MUTEX(djinn_limits_lock);
static unsigned int djinn_nr_sessions; /* local and proxy */
static unsigned int djinn_nr_local;
static DEFINE_XARRAY(djinn_uid_sessions);

static unsigned int max_sessions = 65536;
module_param(max_sessions, uint, 0644);
MODULE_PARM_DESC(max_sessions, "sessions (local and proxy) at most");

static unsigned int reserved_proxy_sessions = 1024;
module_param(reserved_proxy_sessions, uint, 0644);
MODULE_PARM_DESC(reserved_proxy_sessions,
		 "slots of max_sessions only the daemon's proxies may take");

static unsigned int max_sessions_per_uid = 64;
module_param(max_sessions_per_uid, uint, 0644);
MODULE_PARM_DESC(max_sessions_per_uid,
		 "local sessions of one uid at most (0: no limit)");

static unsigned int lease_ms = 10000;
module_param(lease_ms, uint, 0644);
MODULE_PARM_DESC(lease_ms, "default lease period in milliseconds");

/*
 * A ring is charged to the memory cgroup of the task that opens the
 * session (__GFP_ACCOUNT), as the session itself is. A ring that does not
 * fit under the cgroup's limit fails with -ENOMEM, quietly
 * (__GFP_NOWARN), instead of waking the cgroup's OOM killer
 * (__GFP_RETRY_MAYFAIL): the caller chose its size. vmalloc_user() does
 * not charge; __vmalloc() does, but leaves VM_USERMAP off the area, so
 * remap_vmalloc_range() would refuse it: djinn_fops_mmap() inserts the
 * pages one by one, as kernel/kcov.c does.
 */
#define DJINN_RING_GFP \
	(GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN | __GFP_RETRY_MAYFAIL)

/* Local sessions of @uid, under djinn_limits_lock. */
static unsigned long djinn_uid_count(kuid_t uid)
{
	void *e = xa_load(&djinn_uid_sessions, __kuid_val(uid));

	return e ? xa_to_value(e) : 0;
}

/* Exempt from max_sessions_per_uid, as from RLIMIT_NPROC and the pipe
 * limits. Asked only of a caller at its limit, so that nobody else leaves
 * an audit record. */
static bool djinn_uid_exempt(void)
{
	return capable(CAP_SYS_RESOURCE) || capable(CAP_SYS_ADMIN);
}

/*
 * Count one more session, or refuse it and count nothing: -EUSERS for a
 * local one whose uid holds max_sessions_per_uid local sessions already;
 * -EDQUOT when the table is full for it. A proxy may take any of the
 * max_sessions slots; local sessions together may take all but
 * reserved_proxy_sessions of them, so local users can never make the
 * daemon's PROXY_OPEN fail.
 */
static int djinn_limits_charge(bool local, kuid_t uid)
{
	unsigned int max = READ_ONCE(max_sessions);
	unsigned int reserved = READ_ONCE(reserved_proxy_sessions);
	unsigned int per_uid = READ_ONCE(max_sessions_per_uid);
	unsigned long n = 0;
	int ret = 0;

	mutex_lock(&djinn_limits_lock);
	if (local) {
		n = djinn_uid_count(uid);
		if (per_uid && n >= per_uid && !djinn_uid_exempt()) {
			ret = -EUSERS;
			goto out_unlock;
		}
		if (djinn_nr_local >= max - min(max, reserved)) {
			ret = -EDQUOT;
			goto out_unlock;
		}
	}
	if (djinn_nr_sessions >= max) {
		ret = -EDQUOT;
		goto out_unlock;
	}
	if (local) {
		ret = xa_err(xa_store(&djinn_uid_sessions, __kuid_val(uid),
				      xa_mk_value(n + 1), GFP_KERNEL));
		if (ret)
			goto out_unlock;
		djinn_nr_local++;
	}
	djinn_nr_sessions++;
out_unlock:
	mutex_unlock(&djinn_limits_lock);
	return ret;
}

static void djinn_limits_uncharge(bool local, kuid_t uid)
{
	unsigned long n;

	mutex_lock(&djinn_limits_lock);
	if (local) {
		n = djinn_uid_count(uid);
		djinn_debug_check(!n || !djinn_nr_local);
		/* Replacing a present entry allocates nothing. */
		if (n > 1)
			xa_store(&djinn_uid_sessions, __kuid_val(uid),
				 xa_mk_value(n - 1), GFP_KERNEL);
		else
			xa_erase(&djinn_uid_sessions, __kuid_val(uid));
		djinn_nr_local--;
	}
	djinn_debug_check(!djinn_nr_sessions);
	djinn_nr_sessions--;
	mutex_unlock(&djinn_limits_lock);
}

static u32 *ring_u32(struct djinn_session *s, unsigned int off)
{
	return s->ring + off;
}

static struct djinn_cqe *ring_cqes(struct djinn_session *s)
{
	return s->ring + DJINN_RING_CQES;
}

void djinn_session_fill_ring_offsets(struct djinn_ring_offsets *o)
{
	o->head = DJINN_RING_HEAD;
	o->tail = DJINN_RING_TAIL;
	o->mask = DJINN_RING_MASK;
	o->entries = DJINN_RING_ENTRIES;
	o->flags = DJINN_RING_FLAGS;
	o->overflow = DJINN_RING_OVERFLOW;
	o->cqes = DJINN_RING_CQES;
	o->__reserved = 0;
}

/* 1 to 63 printable ASCII bytes, a NUL, then zeros. */
int djinn_tenant_valid(const char tenant[DJINN_TENANT_LEN])
{
	size_t len = strnlen(tenant, DJINN_TENANT_LEN);
	size_t i;

	if (len == 0 || len == DJINN_TENANT_LEN)
		return -EINVAL;
	for (i = 0; i < len; i++)
		if (tenant[i] < 0x20 || tenant[i] > 0x7e)
			return -EINVAL;
	for (; i < DJINN_TENANT_LEN; i++)
		if (tenant[i])
			return -EINVAL;
	return 0;
}

static enum hrtimer_restart djinn_lease_timer(struct hrtimer *t)
{
	struct djinn_session *s = container_of(t, struct djinn_session, timer);

	/* No lock here: the work decides under s->lock, and re-arms the
	 * timer if a heartbeat moved the deadline meanwhile. */
	queue_work(system_wq, &s->expire_work);
	return HRTIMER_NORESTART;
}

static void djinn_expire_work(struct work_struct *w)
{
	struct djinn_session *s =
		container_of(w, struct djinn_session, expire_work);
	bool expired = false;

	spin_lock(&s->lock);
	if (s->state == DJINN_STATE_LIVE) {
		if (ktime_before(ktime_get(), s->deadline))
			hrtimer_start(&s->timer, s->deadline, HRTIMER_MODE_ABS);
		else
			expired = true;
	}
	spin_unlock(&s->lock);
	if (expired)
		djinn_session_end(s, DJINN_STATE_EXPIRED);
}

struct djinn_session *djinn_session_create(struct djinn_file *owner,
					   const struct djinn_open_args *a)
{
	bool local = !(a->kind & DJINN_SESSION_PROXY);
	/* the effective uid: what SO_PEERCRED reports of the same process
	 * on djinnd's socket, where SESSION_BIND compares them */
	kuid_t uid = current_euid();
	struct djinn_session *s;
	u32 entries;
	int ret;

	ret = djinn_limits_charge(local, uid);
	if (ret)
		return ERR_PTR(ret);
	s = kzalloc(sizeof(*s), GFP_KERNEL_ACCOUNT);
	if (!s)
		goto out_uncharge;

	strscpy(s->tenant, a->tenant, sizeof(s->tenant));
	s->priority = a->priority;
	s->kind = a->kind;
	s->uid = uid;
	s->pid = get_pid(task_tgid(current));
	s->owner = owner;
	kref_init(&s->ref);
	spin_lock_init(&s->lock);
	s->state = DJINN_STATE_LIVE;
	s->lease_ns = a->lease_ns ? a->lease_ns : (u64)lease_ms * NSEC_PER_MSEC;
	s->lease_ns = clamp_t(u64, s->lease_ns, DJINN_LEASE_MIN_NS,
			      DJINN_LEASE_MAX_NS);
	get_random_bytes(s->token, sizeof(s->token));
	djinn_hrtimer_setup(&s->timer, djinn_lease_timer, CLOCK_MONOTONIC,
			    HRTIMER_MODE_ABS);
	INIT_WORK(&s->expire_work, djinn_expire_work);
	init_waitqueue_head(&s->wait);
	INIT_LIST_HEAD(&s->proxy_node);

	if (local) {
		entries = a->ring_entries ? a->ring_entries :
					    DJINN_RING_ENTRIES_DEFAULT;
		entries = roundup_pow_of_two(entries);
		s->ring_entries = entries;
		s->ring_bytes = PAGE_ALIGN(DJINN_RING_CQES +
					   entries * sizeof(struct djinn_cqe));
		s->ring = __vmalloc(s->ring_bytes, DJINN_RING_GFP);
		if (!s->ring)
			goto out_free;
		*ring_u32(s, DJINN_RING_MASK) = entries - 1;
		*ring_u32(s, DJINN_RING_ENTRIES) = entries;
	}
	return s;

out_free:
	put_pid(s->pid);
	kfree(s);
out_uncharge:
	djinn_limits_uncharge(local, uid);
	return ERR_PTR(-ENOMEM);
}

/* Give the session an id: a reserved slot in the table, invisible to
 * lookups until djinn_session_publish(). */
int djinn_session_reserve(struct djinn_session *s)
{
	u32 id;
	int ret;

	ret = xa_alloc_cyclic(&djinn_sessions, &id, NULL, XA_LIMIT(1, U32_MAX),
			      &djinn_next_id, GFP_KERNEL);
	if (ret < 0)
		return ret == -EBUSY ? -EDQUOT : ret;
	s->id = id;
	return 0;
}

/* Undo djinn_session_reserve() and free a session never published. */
void djinn_session_unreserve(struct djinn_session *s)
{
	xa_erase(&djinn_sessions, s->id);
	s->state = DJINN_STATE_CLOSED;
	djinn_session_put(s);
}

/*
 * Into the table (which takes a reference), the event sent, then the
 * lease started: in this order a lease short enough to run out at once
 * still ends a session that is in the table, after its "opened".
 */
void djinn_session_publish(struct djinn_session *s)
{
	kref_get(&s->ref);
	s->deadline = ktime_add_ns(ktime_get(), s->lease_ns);
	WARN_ON(xa_is_err(xa_store(&djinn_sessions, s->id, s, GFP_KERNEL)));
	djinn_nl_event(s, DJINN_CMD_OPENED_NTF);
	spin_lock(&s->lock);
	if (s->state == DJINN_STATE_LIVE) /* not killed meanwhile */
		hrtimer_start(&s->timer, s->deadline, HRTIMER_MODE_ABS);
	spin_unlock(&s->lock);
}

struct djinn_session *djinn_session_get(u64 id)
{
	struct djinn_session *s;

	if (!id || id > U32_MAX)
		return NULL;
	xa_lock(&djinn_sessions);
	s = xa_load(&djinn_sessions, id);
	if (s)
		kref_get(&s->ref);
	xa_unlock(&djinn_sessions);
	return s;
}

static void djinn_session_free(struct kref *ref)
{
	struct djinn_session *s = container_of(ref, struct djinn_session, ref);

	djinn_debug_check(s->state == DJINN_STATE_LIVE);
	djinn_debug_check(hrtimer_active(&s->timer));
	djinn_debug_check(work_pending(&s->expire_work));
	vfree(s->ring);
	put_pid(s->pid);
	djinn_limits_uncharge(!(s->kind & DJINN_SESSION_PROXY), s->uid);
	kfree(s);
}

void djinn_session_put(struct djinn_session *s)
{
	kref_put(&s->ref, djinn_session_free);
}

static u8 djinn_state_event(u32 state)
{
	switch (state) {
	case DJINN_STATE_EXPIRED:
		return DJINN_CMD_EXPIRED_NTF;
	case DJINN_STATE_KILLED:
		return DJINN_CMD_KILLED_NTF;
	default:
		return DJINN_CMD_CLOSED_NTF;
	}
}

/*
 * The one ending: @state is CLOSED, EXPIRED or KILLED. Returns false if
 * the session had already ended. The caller holds a reference.
 */
bool djinn_session_end(struct djinn_session *s, u32 state)
{
	u32 flag = 0;

	spin_lock(&s->lock);
	if (s->state != DJINN_STATE_LIVE) {
		spin_unlock(&s->lock);
		return false;
	}
	s->state = state;
	if (state == DJINN_STATE_EXPIRED)
		flag = DJINN_RING_F_EXPIRED;
	else if (state == DJINN_STATE_KILLED)
		flag = DJINN_RING_F_KILLED;
	if (s->ring && flag)
		WRITE_ONCE(*ring_u32(s, DJINN_RING_FLAGS),
			   *ring_u32(s, DJINN_RING_FLAGS) | flag);
	spin_unlock(&s->lock);

	/* The owner syncs with the timer; here it only must not fire. */
	hrtimer_try_to_cancel(&s->timer);
	xa_erase(&djinn_sessions, s->id);
	wake_up_all(&s->wait);
	djinn_nl_event(s, djinn_state_event(state));
	djinn_session_put(s); /* the table's */
	return true;
}

/* The owner lets go: end the session if it is live, stop its timer and
 * work for good, drop the owner's reference. */
void djinn_session_release_owner(struct djinn_session *s)
{
	djinn_session_end(s, DJINN_STATE_CLOSED);
	hrtimer_cancel(&s->timer);
	cancel_work_sync(&s->expire_work);
	djinn_session_put(s);
}

int djinn_session_live_err(const struct djinn_session *s)
{
	switch (s->state) {
	case DJINN_STATE_LIVE:
		return 0;
	case DJINN_STATE_EXPIRED:
		return -ETIMEDOUT;
	case DJINN_STATE_KILLED:
		return -ECANCELED;
	default:
		return -ENOENT;
	}
}

int djinn_session_renew(struct djinn_session *s, bool set_head, u32 head,
			u64 *deadline_ns)
{
	int ret;

	spin_lock(&s->lock);
	ret = djinn_session_live_err(s);
	if (ret)
		goto out_unlock;
	if (set_head) {
		/* Between the old head and the tail, in ring arithmetic. */
		if (!s->ring ||
		    head - s->ring_head > s->ring_tail - s->ring_head) {
			ret = -EINVAL;
			goto out_unlock;
		}
		s->ring_head = head;
		smp_store_release(ring_u32(s, DJINN_RING_HEAD), head);
	}
	/* The timer stays where it is: when it fires, the work sees the
	 * later deadline and re-arms it. A heartbeat is a store. */
	s->deadline = ktime_add_ns(ktime_get(), s->lease_ns);
	s->heartbeats++;
	*deadline_ns = ktime_to_ns(s->deadline);
	djinn_debug_check(s->ring &&
			  s->ring_tail - s->ring_head > s->ring_entries);
out_unlock:
	spin_unlock(&s->lock);
	return ret;
}

int djinn_session_signal(struct djinn_session *s, u32 phase, u64 expected_ns)
{
	int ret;

	spin_lock(&s->lock);
	ret = djinn_session_live_err(s);
	if (!ret) {
		s->phase = phase;
		s->expected_ns = expected_ns;
		s->signals++;
	}
	spin_unlock(&s->lock);
	if (!ret)
		djinn_nl_event(s, DJINN_CMD_SIGNAL_NTF);
	return ret;
}

int djinn_session_post(struct djinn_session *s, const struct djinn_cqe *cqe,
		       u32 *tail)
{
	u32 t;
	int ret = 0;

	if (!s->ring)
		return -EOPNOTSUPP;
	spin_lock(&s->lock);
	djinn_assert_held(&s->lock);
	if (s->state != DJINN_STATE_LIVE) {
		ret = -ENOENT;
		goto out_unlock;
	}
	t = s->ring_tail;
	if (t - s->ring_head >= s->ring_entries) {
		s->overflow++;
		WRITE_ONCE(*ring_u32(s, DJINN_RING_OVERFLOW), (u32)s->overflow);
		WRITE_ONCE(*ring_u32(s, DJINN_RING_FLAGS),
			   *ring_u32(s, DJINN_RING_FLAGS) |
				   DJINN_RING_F_OVERFLOW);
		ret = -EOVERFLOW;
		goto out_unlock;
	}
	ring_cqes(s)[t & (s->ring_entries - 1)] = *cqe;
	s->ring_tail = t + 1;
	/* The entry before the tail that publishes it. */
	smp_store_release(ring_u32(s, DJINN_RING_TAIL), t + 1);
	s->posts++;
	*tail = t + 1;
	djinn_debug_check(s->ring_tail - s->ring_head > s->ring_entries);
out_unlock:
	spin_unlock(&s->lock);
	if (!ret)
		wake_up_poll(&s->wait, EPOLLIN | EPOLLRDNORM);
	return ret;
}

void djinn_sessions_exit(void)
{
	/* Every session ends with its file, and the module cannot go while
	 * a file is open: anything left here is a leak. */
	WARN_ON(!xa_empty(&djinn_sessions));
	WARN_ON(djinn_nr_sessions || djinn_nr_local);
	WARN_ON(!xa_empty(&djinn_uid_sessions));
	xa_destroy(&djinn_sessions);
	xa_destroy(&djinn_uid_sessions);
}

/* For netlink: call @fn on each live session from index *pos on, under
 * the table's lock (fn must not sleep); stops when fn returns non-zero and
 * leaves *pos at the session it stopped on. */
int djinn_sessions_walk(unsigned long *pos,
			int (*fn)(struct djinn_session *s, void *arg),
			void *arg)
{
	struct djinn_session *s;
	unsigned long id;
	int ret = 0;

	xa_lock(&djinn_sessions);
	xa_for_each_start(&djinn_sessions, id, s, *pos)
	{
		ret = fn(s, arg);
		if (ret) {
			*pos = id;
			break;
		}
	}
	if (!ret)
		*pos = ULONG_MAX;
	xa_unlock(&djinn_sessions);
	return ret;
}
