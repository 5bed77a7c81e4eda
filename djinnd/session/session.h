/* SPDX-License-Identifier: MIT */
/*
 * Sessions: who holds what on the device, and for how long.
 *
 * A session has an id, a 128-bit random token, a tenant, a priority and
 * a lease, and owns a VMU session (its data regions and text references)
 * and a table of tensor handles. Handles are opaque 64-bit values:
 * slot index and generation, XORed with a per-session random key, so a
 * stale, foreign or forged handle is -ENOENT and never reaches memory.
 *
 * Lifetime. The session table holds one reference; every request in
 * flight holds another. session_end() is the one teardown, whatever the
 * reason (close, lease expiry, admin kill, daemon shutdown): it takes the
 * session out of the table, ends its lease, cancels its queued work and
 * calls the table's @ended hook (the protocol layer's: it lets go of the
 * session's connections); the last reference frees its tensors and its
 * VMU session, after which the session's VMU bytes and handles are zero.
 *
 * Threads. The I/O thread creates, finds and ends sessions; executor
 * threads resolve and register tensors. s->lock guards the tensor table
 * and the result record; references are atomic.
 *
 * Devices. A session lives on one device (struct device, device.h): its
 * VMU session, its jobs (that device's executors), its models. It is
 * placed when it is made and never moves.
 *
 * Faults. A session records its device's fault count (backend.faults)
 * when it is made: its epoch. A device fault loses the device memory of
 * every session on that device at once (Documentation/cuda.rst), so once the count has
 * moved on, session_lost() says so and the request layer fails every
 * request of the session but closing and heartbeats with -EIO until the
 * client closes it. Sessions made after the fault are not touched.
 */
#ifndef DJINN_SESSION_H
#define DJINN_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <djinn/proto.h>

#include "list.h"
#include "loop.h"
#include "slots.h"
#include "sched/sched.h"
#include "session/tenant.h"
#include "vmu/vmu.h"

struct device;
struct lease_provider;

enum session_end_reason {
	SESSION_CLOSED = 1,
	SESSION_EXPIRED,
	SESSION_KILLED,
	SESSION_SHUTDOWN,
};

/* Why an object came back lost from a restart (struct tensor's and
 * struct mobj's @lost): its bytes were in the memory of a device a fault
 * lost, or djinnd crashed and its journal did not keep them
 * (include/djinn/state.h: the record's values are these). */
enum lost_why {
	LOST_DEVICE = 1,
	LOST_CRASH = 2,
};

struct tensor {
	struct djinn_tensor_desc desc;
	uint64_t bytes;
	struct vmu_text *text; /* a text entry, or NULL: a data region */
	uint64_t region;
	bool module; /* text uploaded as a client module */
	/* enum lost_why: its bytes were lost before a restart
	 * (svc/state.c): no text, no region; every use answers -EIO */
	uint8_t lost;
};

/* The outputs of one GRAPH_SUBMIT, for DJINN_REF_RESULT: their shapes
 * from the moment it is submitted, their handles once it has run. */
struct result_rec {
	uint64_t request_id;
	uint32_t nr;
	bool done;
	int error; /* the graph failed: refs to it fail the same way */
	struct djinn_tensor_desc *descs;
	uint64_t *handles;
};

#define SESSION_RESULTS 64 /* graphs remembered for DJINN_REF_RESULT */
#define SESSION_MAX_TENSORS (1u << 20) /* handles per session */
#define SESSION_MAX_OBJS 4096 /* model and context handles per session */

/* A model or context the session holds (net/msg_model.c's). */
enum sobj_kind {
	SOBJ_MODEL = 1,
	SOBJ_CTX = 2,
};

struct sobj_slot {
	struct slot slot; /* in s->objs */
	uint8_t kind;
	void *p;
};

struct session {
	uint64_t id;
	uint8_t token[16];
	char tenant[DJINN_TENANT_LEN]; /* who: its connection's (tenant.h) */
	char label[DJINN_TENANT_LEN]; /* what the client named it */
	/* its tenant's counts, while it is in the table (I/O thread) */
	struct tenant_state *ts;
	uint32_t priority;
	uint64_t lease_ns;
	uint64_t deadline_ns; /* kept by the lease provider */
	uid_t uid; /* of the connection that opened it */
	pid_t pid; /* 0 for TCP */
	uint64_t requests;
	struct sched_entity se; /* its queues and the memory policy's state */
	uint32_t mem_waits; /* EXEC_MEM jobs in flight (I/O thread) */
	uint64_t epoch; /* its backend's faults when it was made */
	/* restored lost: its device state went before djinnd restarted */
	bool lost_restored;

	struct device *dev; /* where its memory and work are */
	struct vmu_session *vs; /* in dev's VMU */
	int refs; /* atomic */
	bool dead;
	enum session_end_reason reason;

	pthread_mutex_t lock;
	struct slots tensors; /* of struct tensor_slot (session.c) */
	uint32_t nr_tensors;
	/* A ring, one longer than the graphs remembered: a new graph's
	 * record must not push out one it names. */
	struct result_rec results[SESSION_RESULTS + 1];
	uint32_t results_next;

	/* Models and contexts: the I/O thread's, no lock. Their handles
	 * use a key of their own, so a tensor handle never names one. */
	struct slots objs; /* of struct sobj_slot */

	struct list_head node; /* server's sessions */
	struct list_head lease_node; /* the lease provider's */
	uint64_t lease_kid; /* kmod leases: the kernel session, 0: none */
	/* kmod leases: bound to its client's own kernel session, not a
	 * proxy on djinnd's file; a restart's: lease_kid is the kernel
	 * session a predecessor had, which open() takes over */
	bool lease_bound, lease_adopt;
	/* a restore undone: its kernel session is not djinnd's to end (a
	 * --handover predecessor serves on with it) */
	bool lease_disown;
	void *lease_priv; /* the lease provider's */
	struct session *hnext;
};

/* Sessions open now per peer uid (struct session_table). */
struct uid_sessions {
	uid_t uid;
	unsigned int n;
};

/*
 * struct session_table - the live sessions, by id (I/O thread only)
 * @lim:     what the configuration allows (server.c sets it)
 * @list:    every session in the table, oldest first
 * @tenants: struct tenant_state, a tenant's counts (tenant.h)
 * @leases:  the lease provider (lease.h); @loop, @lease_timer: its poll
 * @opened, @ended: sessions opened, and ended by each reason
 * @ended_hook: called by session_end() with @hook_arg once the session
 *           is out of the table (the protocol layer's: it lets go of the
 *           session's connections); NULL: none
 */
struct session_table {
	struct session_limits lim;
	struct list_head list;
	struct session **stab;
	uint64_t stab_size, nr, next_id;
	struct uid_sessions *uids;
	unsigned int nr_uids, cap_uids;
	struct list_head tenants;
	struct lease_provider *leases;
	struct loop *loop;
	struct loop_timer lease_timer;
	uint64_t opened, ended[SESSION_SHUTDOWN + 1];
	uint64_t held_at; /* leases held since (a restart), or 0 */
	void (*ended_hook)(struct session *s, void *arg);
	void *hook_arg;
};

/*
 * A restart (net/restart.h) holds the leases while it holds the
 * connections (their HEARTBEATs wait unread): none expires meanwhile,
 * and when they are let go (the restart failed) the time held is added
 * to every deadline. session_lease_left(): what is left of @s's lease,
 * not counting the time held.
 */
void session_table_hold_leases(struct session_table *t, bool hold);
uint64_t session_lease_left(const struct session_table *t,
			    const struct session *s);

/* An empty table whose timers run on @loop; start: its lease provider
 * (@leases, set meanwhile) is polled from now on; fini: the table is
 * empty and is freed. */
void session_table_init(struct session_table *t, struct loop *loop);
void session_table_start(struct session_table *t);
void session_table_fini(struct session_table *t);

/* For the frame fuzzer only: handles without the random key, so inputs
 * can name the tensors they made. Never set in djinnd. */
extern bool session_predictable_handles;

/* Make a session of @tenant (its connection's, session/tenant.h) with
 * the client's @label (both 1 to 63 printable bytes) on device @dev
 * (svc_place()), not yet in the table. */
int session_create(struct session_table *t, struct device *dev,
		   const char *tenant, const char *label, uint32_t priority,
		   uint64_t lease_ns, uid_t uid, pid_t pid,
		   struct session **out);
/* Sessions of @tenant open now; whether they are at its quota
 * (tenant.NAME.sessions). */
unsigned int session_tenant_sessions(struct session_table *t,
				     const char *tenant);
bool session_tenant_full(struct session_table *t, const char *tenant);
/* Sessions open now whose peer is @uid (TCP peers: (uid_t)-1). */
unsigned int session_uid_sessions(struct session_table *t, uid_t uid);
/* What server.max_sessions_per_uid counts for a peer of @uid and
 * @tenant: its uid's sessions, or for a TCP or TLS peer (uid -1) its
 * tenant's. */
unsigned int session_peer_sessions(struct session_table *t, const char *tenant,
				   uid_t uid);
/* Put it in the table and start its lease. */
int session_publish(struct session_table *t, struct session *s);
/*
 * A session as the djinnd before a restart left it (svc/state.h): its
 * id, token, handle keys, tenant, label, priority and lease (what was
 * left of it when @r was written, counted from now), on @dev, in the
 * table. Its tensor slots have the generations @gens, those with @live
 * set waiting for session_tensor_restore(); its object slots the
 * generations after those, those with @obj_live set waiting for
 * session_obj_restore(). No quota is checked: the
 * session exists already. 0, -EEXIST (its id is taken), -EINVAL (@r
 * does not hold together), -ENOMEM, or the lease provider's error.
 */
struct djinn_state_session;
int session_restore(struct session_table *t, struct device *dev,
		    const struct djinn_state_session *r, const uint32_t *gens,
		    const bool *live, const bool *obj_live,
		    struct session **out);
/* A restored session's result record in ring slot @index: graph
 * @request_id ran, with @nr outputs of @descs and @handles (or failed
 * with @error). 0, -EINVAL (a slot past the ring, or one filled
 * already), -ENOMEM. */
int session_result_restore(struct session *s, uint32_t index,
			   uint64_t request_id, uint32_t nr, int error,
			   const struct djinn_tensor_desc *descs,
			   const uint64_t *handles);
/* Fill restored live slot @slot with @t (whose VMU resources it takes
 * over): 0, or -EINVAL for a slot that is not one. */
int session_tensor_restore(struct session *s, uint32_t slot,
			   const struct tensor *t);
/* A reference to the live session @id, or NULL. */
struct session *session_get(struct session_table *t, uint64_t id);
void session_ref(struct session *s);
void session_put(struct session *s);
/* What the scheduler holds a session by: its sched_entity (sched.h). */
extern const struct sched_ops session_sched_ops;
/* The one teardown: see above. Idempotent. */
void session_end(struct session_table *t, struct session *s,
		 enum session_end_reason why);
const char *session_reason_name(enum session_end_reason why);

/* Whether a fault of its device has lost @s's state since it was made:
 * 0, or -EIO with "session ID: device state lost in a fault: ..." naming
 * the device and the fault in @msg. */
int session_lost(const struct session *s, char *msg, size_t msglen);

/* Renew the lease: any request does. */
void session_touch(struct session_table *t, struct session *s);

/*
 * Graphs and model steps in flight (I/O thread). check: 0, or -EDQUOT
 * when @s's tenant is at its tenant.NAME.inflight quota, or -EAGAIN when
 * @s has SCHED_INFLIGHT_MAX queued or running, saying so in @msg. add
 * and sub: one is queued, or its answer went (the session's count and
 * its tenant's).
 */
int session_inflight_check(struct session_table *t, const struct session *s,
			   char *msg, size_t msglen);
void session_inflight_add(struct session *s);
void session_inflight_sub(struct session *s);
/* Whether @s's tenant may upload and run client kernels: 0, or -EPERM
 * saying how the administrator allows them. */
int session_kernels_check(struct session_table *t, const struct session *s,
			  char *msg, size_t msglen);

/* Tensor handles. add takes over the tensor's VMU resources. */
int session_tensor_add(struct session *s, const struct tensor *t,
		       uint64_t *handle);
/* get and hold: -ENOENT (no such handle) or -EIO (a lost tensor, which
 * only release takes); session_tensor_why() says which, for @handle. */
int session_tensor_get(struct session *s, uint64_t handle, struct tensor *t);
void session_tensor_why(struct session *s, uint64_t handle, int err, char *msg,
			size_t msglen);
/* Remove and free the tensor's VMU resources; if the tensor is held
 * (being read, or an input of a running graph), the handle goes now and
 * the memory when the last holder lets go. */
int session_tensor_release(struct session *s, uint64_t handle);
/* Hold a tensor while its memory is in use off the session's lock; the
 * returned slot is what session_tensor_unhold() takes. */
int session_tensor_hold(struct session *s, uint64_t handle, struct tensor *t,
			uint32_t *slot);
void session_tensor_unhold(struct session *s, uint32_t slot);

/* Call @fn on each live tensor of @s and its slot index, in index
 * order, with s->lock held, until it returns non-zero: that, or 0. */
int session_tensor_each(struct session *s,
			int (*fn)(void *arg, uint32_t slot,
				  const struct tensor *t),
			void *arg);
/* The same, s->lock held by the caller. */
int session_tensor_each_locked(struct session *s,
			       int (*fn)(void *arg, uint32_t slot,
					 const struct tensor *t),
			       void *arg);

/* Model and context handles (I/O thread only). add: -EDQUOT past
 * SESSION_MAX_OBJS. get: the object, or NULL for a handle that is not
 * one of @kind. del: the same, and the handle is gone. */
int session_obj_add(struct session *s, enum sobj_kind kind, void *p,
		    uint64_t *handle);
void *session_obj_get(struct session *s, uint64_t handle, enum sobj_kind kind);
void *session_obj_del(struct session *s, uint64_t handle, enum sobj_kind kind);
/* A restored session's live object slot @slot gets @p (I/O thread):
 * 0, or -EINVAL for a slot that is not one waiting. at: the object in
 * slot @slot if it is of @kind, else NULL. */
int session_obj_restore(struct session *s, uint32_t slot, enum sobj_kind kind,
			void *p);
void *session_obj_at(struct session *s, uint32_t slot, enum sobj_kind kind);
/* Take every object out of the table, calling @fn on each. */
void session_obj_drain(struct session *s,
		       void (*fn)(enum sobj_kind kind, void *p, void *arg),
		       void *arg);

/* A submitted graph's outputs: their shapes now (the oldest record is
 * forgotten when SESSION_RESULTS are kept), their handles or its error
 * when it has run. */
int session_result_begin(struct session *s, uint64_t request_id, uint32_t nr,
			 const struct djinn_tensor_desc *descs);
void session_result_finish(struct session *s, uint64_t request_id,
			   const uint64_t *handles, int error);
/* The shape of output @index of graph @request_id: 0 or -ENOENT. */
int session_result_desc(struct session *s, uint64_t request_id, uint32_t index,
			struct djinn_tensor_desc *desc);
/* Its handle: 0; the graph's error; -EAGAIN if it has not run; -ENOENT. */
int session_result_handle(struct session *s, uint64_t request_id,
			  uint32_t index, uint64_t *handle);

#endif /* DJINN_SESSION_H */
