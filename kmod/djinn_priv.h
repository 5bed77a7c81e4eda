/* SPDX-License-Identifier: GPL-2.0 */
/*
 * djinn.ko internals.
 *
 * Objects. A struct djinn_file is one open of /dev/djinn. It owns at most
 * one local session (SESSION_OPEN) or, once it is the daemon's, a list of
 * proxy sessions. A struct djinn_session is counted by a kref: its owner
 * holds one reference for as long as the file holds the session, the
 * table (djinn_sessions, an xarray keyed by id) holds one while it is
 * live, and a lookup holds one while it works.
 *
 * Ending. A session ends once (djinn_session_end()): its state leaves
 * LIVE under s->lock, it leaves the table, its pollers wake, the event
 * goes out and the table's reference is dropped. Whoever ends it, only
 * the owner stops its timer and expiry work (hrtimer_cancel() and
 * cancel_work_sync() in djinn_session_release_owner()) before dropping
 * the owner's reference, so neither can run on freed memory. The timer is
 * (re)armed only under s->lock while the session is live.
 *
 * Locks, outermost first: djinn_file.lock (a mutex: a file's session and
 * proxy list), djinn_daemon_lock (a mutex: which file is the daemon's),
 * djinn_limits_lock (a mutex in session.c: the session counts against
 * the module's limits, taken when a session is created and freed), the
 * xarray's lock, s->lock (a spinlock: state, lease, counters, ring).
 * Nothing sleeps under s->lock; the hrtimer callback takes no lock. The
 * last djinn_session_put() sleeps (vfree(), djinn_limits_lock): nobody
 * drops a reference under a spinlock.
 */
#ifndef DJINN_PRIV_H
#define DJINN_PRIV_H

#include <linux/hrtimer.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/spinlock.h>
#include <linux/uidgid.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include <linux/djinn.h>

#include "compat.h"

/*
 * The debug build (make -C kmod DEBUG=1, what the QEMU tests load) adds
 * checks the Debian kernel's lockdep and KASAN-less configuration cannot
 * make: held-lock assertions without lockdep, ring invariants on every
 * change, and leak checks at unload. A failed check is a WARN, which the
 * tests' kernel log scan turns into a failure.
 */
#ifdef DJINN_DEBUG
#define djinn_assert_held(l)                      \
	do {                                      \
		lockdep_assert_held(l);           \
		WARN_ON_ONCE(!spin_is_locked(l)); \
	} while (0)
#define djinn_debug_check(cond) WARN_ON_ONCE(cond)
#else
#define djinn_assert_held(l) lockdep_assert_held(l)
#define djinn_debug_check(cond) ((void)0)
#endif

/* Ring layout in its mapping: head and tail on cache lines of their own,
 * the rest after them, entries from DJINN_RING_CQES on. */
#define DJINN_RING_HEAD 0
#define DJINN_RING_TAIL 64
#define DJINN_RING_MASK 128
#define DJINN_RING_ENTRIES 132
#define DJINN_RING_FLAGS 136
#define DJINN_RING_OVERFLOW 140
#define DJINN_RING_CQES 256

#define DJINN_LEASE_MIN_NS (1ULL * NSEC_PER_MSEC)
#define DJINN_LEASE_MAX_NS (3600ULL * NSEC_PER_SEC)

struct djinn_file;

struct djinn_session {
	u64 id;
	u8 token[DJINN_TOKEN_LEN];
	char tenant[DJINN_TENANT_LEN];
	u32 priority;
	u32 kind; /* DJINN_SESSION_* */
	kuid_t uid;
	struct pid *pid;
	struct djinn_file *owner; /* compared, never dereferenced */
	struct kref ref;

	spinlock_t lock;
	u32 state; /* enum djinn_state */
	u64 lease_ns;
	ktime_t deadline;
	u32 phase;
	u64 expected_ns;
	u64 heartbeats, signals, posts, overflow;

	/* the ring: the kernel's own head and tail, never read back */
	void *ring;
	u32 ring_bytes;
	u32 ring_entries;
	u32 ring_head;
	u32 ring_tail;

	struct hrtimer timer;
	struct work_struct expire_work;
	wait_queue_head_t wait;
	struct list_head proxy_node; /* the daemon's proxies */
};

struct djinn_file {
	struct mutex lock;
	struct djinn_session *session; /* set once, under lock */
	bool daemon; /* set once, under lock and djinn_daemon_lock */
	struct list_head proxies; /* under lock */
};

/* session.c */
struct djinn_open_args {
	const char *tenant;
	u32 priority;
	u32 ring_entries;
	u64 lease_ns;
	u32 kind;
};
int djinn_tenant_valid(const char tenant[DJINN_TENANT_LEN]);
struct djinn_session *djinn_session_create(struct djinn_file *owner,
					   const struct djinn_open_args *a);
int djinn_session_reserve(struct djinn_session *s);
void djinn_session_unreserve(struct djinn_session *s);
void djinn_session_publish(struct djinn_session *s);
struct djinn_session *djinn_session_get(u64 id);
void djinn_session_put(struct djinn_session *s);
bool djinn_session_end(struct djinn_session *s, u32 state);
void djinn_session_release_owner(struct djinn_session *s);
int djinn_session_live_err(const struct djinn_session *s);
int djinn_session_renew(struct djinn_session *s, bool set_head, u32 head,
			u64 *deadline_ns);
int djinn_session_signal(struct djinn_session *s, u32 phase, u64 expected_ns);
int djinn_session_post(struct djinn_session *s, const struct djinn_cqe *cqe,
		       u32 *tail);
void djinn_session_fill_ring_offsets(struct djinn_ring_offsets *o);
void djinn_sessions_exit(void);
int djinn_sessions_walk(unsigned long *pos,
			int (*fn)(struct djinn_session *s, void *arg),
			void *arg);

/* netlink.c */
int djinn_nl_init(void);
void djinn_nl_exit(void);
void djinn_nl_event(struct djinn_session *s, u8 cmd);

#endif /* DJINN_PRIV_H */
