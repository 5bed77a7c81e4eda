// SPDX-License-Identifier: MIT
/*
 * The messages: the dispatch table (at the end), and what djinnd does with
 * the session, tensor and graph requests; the model messages are in
 * msg_model.c, the admin messages in msg_admin.c. Runs on the I/O thread;
 * device work goes to the scheduler (sched/sched.h) and comes back
 * through the job's callback: graph_done(), mem_done().
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array_size.h"
#include "graph.h"
#include "log.h"
#include "msgnames.h"
#include "server.h"
#include "exec/executor.h"
#include "svc/model.h"
#include "svc/svc.h"
#include "net/conn.h"
#include "model/store.h"
#include "net/msg.h"
#include "net/tls.h"
#include "session/tenant.h"

#define GRAPH_MAX_PAYLOAD                                    \
	(sizeof(struct djinn_graph) +                        \
	 DJINN_MAX_GRAPH_INPUTS * sizeof(struct djinn_ref) + \
	 DJINN_MAX_NODES * sizeof(struct djinn_node) +       \
	 DJINN_MAX_GRAPH_OUTPUTS * sizeof(uint32_t))
#define STEP_MAX                         \
	(sizeof(struct djinn_ctx_step) + \
	 (uint64_t)DJINN_MAX_STEP_TOKENS * sizeof(int32_t))
#define UPLOAD_MAX                           \
	(sizeof(struct djinn_model_upload) + \
	 DJINN_MODEL_MAX_FILES * sizeof(struct djinn_model_file))

/*
 * The longest payload of a fixed-size request: a newer client's struct,
 * grown by fields this djinnd does not know, which it takes when they
 * are zero. Longer is -EMSGSIZE, before anything is allocated.
 */
#define MSG_STRUCT_MAX 4096

/*
 * struct msg_desc - a message type's row of the dispatch table
 * (msg_table, at the end), after kmod/main.c's ioctl table
 * @handle:   its handler; NULL for a streaming message (ROW_STREAM), whose
 *            struct goes to msg_stream_begin() and its data to the device
 * @size:     the request struct's size. A fixed-size request (neither
 *            ROW_VAR nor ROW_STREAM) is taken by copy_struct_from_user()'s
 *            rules: a payload of @min_size to @size bytes is zero-filled
 *            to @size; a longer one (to MSG_STRUCT_MAX) is cut to @size
 *            when every byte past @size is zero, and refused -E2BIG
 *            otherwise. Either way the handler sees @size bytes.
 *            ROW_STREAM: @size bytes of struct exactly, then the data
 * @min_size: the shortest payload taken (-EINVAL below): the struct's
 *            first version, so that the fields added to its end since
 *            are zero when an older client sends it
 * @max:      ROW_VAR and ROW_STREAM: the longest payload (-EMSGSIZE over)
 * @flags:    OP_*
 */
struct msg_desc {
	msg_fn *handle;
	uint32_t size, min_size;
	uint64_t max;
	unsigned int flags;
};

/* msg_desc.flags */
enum {
	ROW_CLIENT = 1u << 0, /* served on the client sockets */
	ROW_ADMIN = 1u << 1, /* served on the admin socket */
	/* hdr.session_id names a session attached to the connection, not
	 * lost in a device fault (session_lost()): its lease is renewed and
	 * the handler gets it */
	ROW_SESSION = 1u << 2,
	ROW_LOST_OK = 1u << 3, /* ROW_SESSION, even one a fault has lost */
	ROW_MODELS = 1u << 4, /* ROW_SESSION, on a device that serves models */
	/* variable length: @min_size to @max bytes, as they came; the
	 * handler checks the rest (counts and what follows the struct) */
	ROW_VAR = 1u << 5,
	ROW_KEEPS_BODY = 1u << 6, /* ROW_VAR: the handler keeps the payload */
	ROW_STREAM = 1u << 7, /* @size bytes of struct, then data */
	/* served to a TLS connection whose tenant is not known yet (no
	 * certificate, no AUTH so far) */
	ROW_ANON = 1u << 8,

	ROW_IN_SESSION = ROW_CLIENT | ROW_SESSION,
	ROW_IN_MODELS = ROW_IN_SESSION | ROW_MODELS,
};

static const struct msg_desc *msg_desc(uint16_t type);

/* ---------------------------------------------------------------------- */
/* Helpers */

bool msg_all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

bool msg_model_name_ok(struct conn *c, const struct djinn_hdr *hdr,
		       const char name[DJINN_MODEL_NAME_MAX])
{
	char msg[DJINN_MAX_ERROR_MSG];
	size_t n = strnlen(name, DJINN_MODEL_NAME_MAX);

	if (n == DJINN_MODEL_NAME_MAX ||
	    !msg_all_zero(name + n, DJINN_MODEL_NAME_MAX - n)) {
		conn_error(c, hdr, -EINVAL, "model name: not NUL-padded");
		return false;
	}
	if (model_name_check(name, msg, sizeof(msg))) {
		conn_error(c, hdr, -EINVAL, "%s", msg);
		return false;
	}
	return true;
}

/* The live session @hdr names, attached to @c, lease renewed; or NULL
 * with the error sent. Unless @lost_ok, a session whose device state a
 * fault has lost since it was made is refused -EIO (session_lost()). */
static struct session *req_session(struct conn *c, const struct djinn_hdr *hdr,
				   bool lost_ok)
{
	struct session *s = session_get(&c->srv->sessions, hdr->session_id);
	char msg[DJINN_MAX_ERROR_MSG];
	int ret;

	if (!s) {
		conn_error(c, hdr, -ENOENT, "no session %llu",
			   (unsigned long long)hdr->session_id);
		return NULL;
	}
	if (!conn_attached(c, s->id)) {
		conn_error(c, hdr, -EPERM,
			   "session %llu is not attached to this connection",
			   (unsigned long long)s->id);
		session_put(s);
		return NULL;
	}
	session_touch(&c->srv->sessions, s);
	if (!lost_ok && (ret = session_lost(s, msg, sizeof(msg)))) {
		conn_error(c, hdr, ret, "%s", msg);
		session_put(s);
		return NULL;
	}
	return s;
}

/* The session a request's row asks for (ROW_SESSION, with ROW_LOST_OK
 * and ROW_MODELS as it says), a reference; or NULL with the error sent. */
static struct session *msg_session(struct conn *c, const struct djinn_hdr *hdr,
				   unsigned int flags)
{
	struct session *s = req_session(c, hdr, flags & ROW_LOST_OK);

	if (s && (flags & ROW_MODELS) && !s->dev->models) {
		conn_error(c, hdr, -EOPNOTSUPP, "this djinnd serves no models");
		session_put(s);
		return NULL;
	}
	return s;
}

void msg_tensor_resp(struct djinn_tensor_resp *r, uint64_t handle,
		     const struct djinn_tensor_desc *desc, uint32_t flags)
{
	memset(r, 0, sizeof(*r));
	r->handle = handle;
	r->desc = *desc;
	r->flags = flags;
}

bool msg_inflight_full(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s)
{
	const struct tenant_map *m =
		tenant_map_find(&c->srv->sessions.lim, s->tenant);

	if (m && m->inflight && s->ts->inflight >= m->inflight) {
		conn_error(c, hdr, -EDQUOT,
			   "%u graphs and model steps in flight for tenant "
			   "%s, its quota (tenant.%s.inflight): wait for "
			   "their answers",
			   s->ts->inflight, s->tenant, s->tenant);
		return true;
	}
	if (s->se.inflight < SCHED_INFLIGHT_MAX)
		return false;
	conn_error(c, hdr, -EAGAIN,
		   "%u graphs and model steps in flight: wait for their "
		   "answers",
		   s->se.inflight);
	return true;
}

void msg_inflight_add(struct session *s)
{
	s->se.inflight++;
	s->ts->inflight++;
}

void msg_inflight_sub(struct session *s)
{
	s->se.inflight--;
	s->ts->inflight--;
	tenant_state_drop(s->ts);
}

/* Check a desc from the wire: 0 and its byte count, or the error sent. */
static int check_desc(struct conn *c, const struct djinn_hdr *hdr,
		      const struct djinn_tensor_desc *d, uint64_t *bytes)
{
	uint64_t elems;
	int ret = djinn_desc_check(d, &elems, bytes);

	if (ret) {
		conn_error(c, hdr, ret, "bad tensor: %s",
			   ret == -E2BIG ? "too large" :
					   "bad dtype, ndim or dims");
		return ret;
	}
	if (!*bytes) {
		conn_error(c, hdr, -EINVAL, "empty tensor");
		return -EINVAL;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Sessions */

/* A session refused by a limit: which one. */
static void session_quota_error(struct conn *c, const struct djinn_hdr *hdr)
{
	const struct server_config *cfg = &c->srv->cfg;
	uid_t uid = c->tcp ? (uid_t)-1 : c->cred.uid;

	if (c->srv->sessions.nr >= cfg->max_sessions)
		conn_error(c, hdr, -EDQUOT,
			   "%llu sessions open, the server's limit "
			   "(server.max_sessions)",
			   (unsigned long long)c->srv->sessions.nr);
	else if (session_tenant_full(&c->srv->sessions, c->tenant))
		conn_error(c, hdr, -EDQUOT,
			   "%u sessions open for tenant %s, its quota "
			   "(tenant.%s.sessions)",
			   session_tenant_sessions(&c->srv->sessions,
						   c->tenant),
			   c->tenant, c->tenant);
	else
		conn_error(c, hdr, -EDQUOT,
			   "%u sessions open for %s %d, the limit "
			   "(server.max_sessions_per_uid)",
			   session_uid_sessions(&c->srv->sessions, uid),
			   c->tcp ? "TCP peers as uid" : "uid", (int)uid);
}

static void handle_hello(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	/* The first device's figures: with several, each session's are its
	 * device's (ADMIN_VMU). */
	const struct device *d = &c->srv->dev[0];
	struct djinn_hello_resp r = {
		.version = DJINN_PROTO_VERSION,
		.max_payload = DJINN_MAX_PAYLOAD,
		.capacity = d->backend->provider->capacity,
		.granularity = d->backend->provider->granularity,
		.features = (d->models ? DJINN_FEAT_MODELS : 0) |
			    (c->srv->sessions.leases->ops->verify ?
				     DJINN_FEAT_KMOD :
				     0),
	};

	snprintf(r.backend, sizeof(r.backend), "%s", d->backend->name);
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* A TLS connection without a certificate names its tenant with a bearer
 * token (struct djinn_auth). A wrong one closes the connection. */
static void handle_auth(struct conn *c, const struct djinn_hdr *hdr,
			struct session *unused, void *req, uint64_t len)
{
	const struct djinn_auth *a = req;
	struct djinn_auth_resp r = { 0 };

	if (!c->tls) {
		conn_error(c, hdr, -EOPNOTSUPP,
			   "AUTH is for TLS connections: this one is tenant "
			   "%s by what the kernel says of its peer",
			   c->tenant);
		return;
	}
	if (c->tenant[0]) {
		conn_error(c, hdr, -EISCONN,
			   "this connection is tenant %s already (its "
			   "certificate or an earlier AUTH)",
			   c->tenant);
		return;
	}
	if (a->__reserved || !a->len || a->len > DJINN_AUTH_TOKEN_MAX ||
	    len != sizeof(*a) + a->len) {
		conn_error(c, hdr, -EINVAL,
			   "AUTH: a token of 1 to %d bytes after the struct, "
			   "exactly (len %u, payload %llu bytes)",
			   DJINN_AUTH_TOKEN_MAX, a->len,
			   (unsigned long long)len);
		return;
	}
	if (tls_token_tenant(c->srv, (const uint8_t *)(a + 1), a->len,
			     r.tenant)) {
		c->srv->st.auth_refused++;
		log_notice("conn %d: AUTH with a token that names no tenant: "
			   "closing",
			   c->fd);
		conn_error(c, hdr, -EACCES,
			   "the token names no tenant (tls.tokens): closing");
		c->close_after = true;
		return;
	}
	memcpy(c->tenant, r.tenant, sizeof(c->tenant));
	if (!conn_identified(c))
		return; /* over its connections quota: refused, closing */
	log_info("conn %d: AUTH: tenant %s", c->fd, c->tenant);
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

static void session_reply(struct conn *c, const struct djinn_hdr *hdr,
			  const struct session *s, bool token)
{
	struct djinn_session_resp r = {
		.session_id = s->id,
		.lease_ns = s->lease_ns,
		.deadline_ns = s->deadline_ns,
	};

	if (token)
		memcpy(r.token, s->token, sizeof(r.token));
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* A session just made: bound to kernel session @kid if any, in the
 * server's table, attached to @c. On failure it is gone again. */
static int session_start(struct conn *c, struct session *s, uint64_t kid)
{
	int ret;

	s->lease_kid = kid;
	ret = session_publish(&c->srv->sessions, s);
	if (ret) {
		session_put(s);
		return ret;
	}
	ret = conn_attach(c, s->id);
	if (ret)
		session_end(&c->srv->sessions, s, SESSION_CLOSED);
	return ret;
}

static void handle_session_open(struct conn *c, const struct djinn_hdr *hdr,
				struct session *unused, void *req, uint64_t len)
{
	const struct djinn_session_open *o = req;
	struct device *d;
	struct session *s;
	char msg[128];
	int ret;

	if (!memchr(o->tenant, 0, sizeof(o->tenant))) {
		conn_error(c, hdr, -EINVAL, "tenant not NUL-terminated");
		return;
	}
	d = server_place(c->srv, o->device, msg, sizeof(msg));
	if (!d) {
		conn_error(c, hdr, -ENODEV, "%s", msg);
		return;
	}
	ret = session_create(&c->srv->sessions, d, c->tenant, o->tenant,
			     o->priority, o->lease_ns,
			     c->tcp ? (uid_t)-1 : c->cred.uid,
			     c->tcp ? 0 : c->cred.pid, &s);
	if (!ret)
		ret = session_start(c, s, 0);
	if (ret == -EDQUOT) {
		session_quota_error(c, hdr);
		return;
	}
	if (ret) {
		conn_error(c, hdr, ret, "%s",
			   ret == -EINVAL ? "bad tenant name or priority" :
					    "cannot open a session");
		return;
	}
	log_info("session %llu opened: tenant %s, label %s, priority %u, "
		 "lease %llu ms, device %u (%s)",
		 (unsigned long long)s->id, s->tenant, s->label, s->priority,
		 (unsigned long long)(s->lease_ns / NSEC_PER_MSEC), d->index,
		 d->name);
	session_reply(c, hdr, s, true);
}

static void handle_session_attach(struct conn *c, const struct djinn_hdr *hdr,
				  struct session *unused, void *req,
				  uint64_t len)
{
	const struct djinn_session_attach *a = req;
	struct session *s;
	uint8_t diff = 0;

	s = session_get(&c->srv->sessions, hdr->session_id);
	if (!s) {
		conn_error(c, hdr, -ENOENT, "no session %llu",
			   (unsigned long long)hdr->session_id);
		return;
	}
	for (size_t i = 0; i < sizeof(a->token); i++) /* constant time */
		diff |= a->token[i] ^ s->token[i];
	/* A token is a session's secret within its tenant: one that leaked
	 * to another tenant opens nothing. The same answer as a wrong one. */
	if (strcmp(s->tenant, c->tenant))
		diff = 1;
	if (diff) {
		conn_error(c, hdr, -EPERM,
			   "wrong token for session %llu, or another tenant's",
			   (unsigned long long)s->id);
	} else if (conn_attach(c, s->id)) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
	} else {
		session_touch(&c->srv->sessions, s);
		session_reply(c, hdr, s, false);
	}
	session_put(s);
}

/* A local client's session on /dev/djinn becomes a djinnd session bound
 * to it (DOC: sessions in proto.h); the lease provider checks it. */
static void handle_session_bind(struct conn *c, const struct djinn_hdr *hdr,
				struct session *unused, void *req, uint64_t len)
{
	const struct djinn_session_bind *b = req;
	struct lease_provider *lp = c->srv->sessions.leases;
	struct lease_kinfo ki;
	struct session *s;
	int ret;

	if (!lp->ops->verify) {
		conn_error(c, hdr, -EOPNOTSUPP,
			   "leases are %s: no /dev/djinn sessions",
			   lp->ops->name);
		return;
	}
	if (c->tcp) {
		conn_error(c, hdr, -EPERM, "SESSION_BIND is for local clients");
		return;
	}
	ret = lp->ops->verify(lp, b->kernel_id, b->token, c->cred.uid, &ki);
	if (ret) {
		conn_error(c, hdr, ret, "kernel session %llu: %s",
			   (unsigned long long)b->kernel_id,
			   ret == -EPERM  ? "wrong token or another user's" :
			   ret == -EBUSY  ? "bound already" :
			   ret == -ENOENT ? "no such live session" :
					    strerror(-ret));
		return;
	}
	ret = session_create(&c->srv->sessions,
			     server_place(c->srv, 0, NULL, 0), c->tenant,
			     ki.tenant, ki.priority, ki.lease_ns, c->cred.uid,
			     c->cred.pid, &s);
	if (!ret)
		ret = session_start(c, s, b->kernel_id);
	if (ret == -EDQUOT) {
		session_quota_error(c, hdr);
		return;
	}
	if (ret) {
		conn_error(c, hdr, ret, "cannot bind the session");
		return;
	}
	log_info("session %llu bound to kernel session %llu: tenant %s, "
		 "priority %u, lease %llu ms",
		 (unsigned long long)s->id, (unsigned long long)b->kernel_id,
		 s->tenant, s->priority,
		 (unsigned long long)(s->lease_ns / NSEC_PER_MSEC));
	session_reply(c, hdr, s, true);
}

static void handle_session_close(struct conn *c, const struct djinn_hdr *hdr,
				 struct session *s, void *req, uint64_t len)
{
	conn_detach(c, s->id);
	session_end(&c->srv->sessions, s, SESSION_CLOSED);
	conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* HEARTBEAT renews a lease; with session 0 it is a plain round trip. */
static void handle_heartbeat(struct conn *c, const struct djinn_hdr *hdr,
			     struct session *unused, void *req, uint64_t len)
{
	struct session *s;

	if (!hdr->session_id) {
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		return;
	}
	s = req_session(c, hdr, true); /* a lost session stays alive */
	if (!s)
		return;
	session_reply(c, hdr, s, false);
	session_put(s);
}

static void handle_signal(struct conn *c, const struct djinn_hdr *hdr,
			  struct session *s, void *req, uint64_t len)
{
	const struct djinn_signal *sg = req;
	char msg[DJINN_MAX_ERROR_MSG];
	uint64_t expected;
	int ret;

	if (sg->phase > DJINN_PHASE_IDLE || sg->__reserved) {
		conn_error(c, hdr, -EINVAL, "%s",
			   sg->__reserved ? "reserved field set" :
					    "unknown phase");
		return;
	}
	expected = sg->expected_ns;
	ret = sched_signal_check(s->dev->sched, sg->phase, &expected, msg,
				 sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return;
	}
	log_debug("session %llu: phase %u for %llu ns (received %llu)",
		  (unsigned long long)s->id, sg->phase,
		  (unsigned long long)expected, (unsigned long long)loop_now());
	sched_signal(s->dev->sched, &s->se, sg->phase, expected);
	conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Tensors */

/* What waits on an EXEC_MEM job: carries on once it is back. */
struct mem_waiter {
	void (*done)(struct conn *c, struct exec_job *job,
		     struct mem_waiter *w);
};

/* A streaming request in progress (TENSOR_CREATE or TENSOR_WRITE). */
struct stream {
	struct mem_waiter w;
	struct session *s;
	struct tensor t;
	bool create;
	bool pinned; /* st->t.region is pinned for the data */
	struct exec_job *job; /* preparing the memory (EXEC_MEM) */
	uint32_t held; /* WRITE: the held slot + 1 */
	uint64_t offset; /* WRITE: where in the tensor */
	uint32_t flags;
	uint8_t fp[DJINN_FP_LEN];
};

static void stream_free(struct conn *c, struct stream *st, bool failed)
{
	/* A job in flight finds its stream gone and undoes its own work. */
	if (st->job)
		st->job->ctx = NULL;
	if (st->pinned)
		vmu_region_unpin(st->s->vs, st->t.region);
	if (failed && st->create) {
		if (c->sink.upload)
			vmu_text_abort(c->sink.upload);
		else if (st->t.region)
			vmu_region_destroy(st->s->vs, st->t.region);
	}
	if (st->held)
		session_tensor_unhold(st->s, st->held - 1);
	session_put(st->s);
	free(st);
	c->stream = NULL;
	c->sink.upload = NULL;
}

/* The answer comes later, from a job: it is timed there. Returns when
 * the request arrived. */
uint64_t msg_defer(struct conn *c)
{
	c->req_open = false;
	return c->req_t0;
}

/* Refuse an allocation of @s, saying what the device has, or what its
 * tenant holds of its quota. */
static void alloc_error(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, int err, uint64_t bytes)
{
	struct vmu *vmu = s->dev->vmu;
	char why[VMU_MSG_LEN];
	struct vmu_usage u;

	if (err == -EDQUOT && !vmu_tenant_usage(vmu, s->tenant, &u) &&
	    u.quota) {
		conn_error(c, hdr, err,
			   "cannot allocate %llu bytes: tenant %s holds %llu "
			   "bytes of data and %llu of text on %s, its quota "
			   "%llu (tenant.%s.memory)",
			   (unsigned long long)bytes, s->tenant,
			   (unsigned long long)u.data_bytes,
			   (unsigned long long)u.text_bytes, s->dev->name,
			   (unsigned long long)u.quota, s->tenant);
		return;
	}
	/* Bigger than the device (the VMU's -E2BIG) is refused like any
	 * allocation that cannot fit. */
	if (err == -E2BIG)
		err = -ENOMEM;
	vmu_admit_check(vmu, vmu_round(vmu, bytes), why, sizeof(why));
	conn_error(c, hdr, err, "cannot allocate %llu bytes: %s",
		   (unsigned long long)bytes, why);
}

static void mem_done(struct exec_job *job, void *arg);

/* Memory for a transfer is prepared on the memory executor: mapping and
 * zeroing a large tensor or swapping one in takes milliseconds to
 * seconds, which the I/O thread spends serving everyone else. @ctx is
 * the stream or read that waits; mem_done() carries on. */
static int mem_submit(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, const struct exec_mem *m, void *ctx,
		      struct exec_job **out)
{
	struct exec_job *job = calloc(1, sizeof(*job));

	if (!job) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	job->lane = SCHED_MEM;
	job->run = svc_mem_run;
	job->mem = *m;
	job->request_id = hdr->request_id;
	job->s = s;
	job->se = &s->se;
	session_ref(s);
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->ctx = ctx;
	job->done = mem_done;
	job->done_arg = c->srv;
	*out = job;
	s->mem_waits++;
	sched_submit(s->dev->sched, job);
	return 0;
}

/* Client kernels reach all of the device's memory: only tenants the
 * administrator allows run them (Documentation/security.rst). */
static int kernels_allowed(struct conn *c, const struct djinn_hdr *hdr,
			   struct session *s)
{
	if (tenant_client_kernels(&c->srv->sessions.lim, s->tenant))
		return 0;
	conn_error(c, hdr, -EPERM,
		   "client kernels are off for tenant %s "
		   "([tenant.%s] client_kernels = yes in djinnd.conf)",
		   s->tenant, s->tenant);
	return -EPERM;
}

/* A client module's upload (DJINN_TENSOR_MODULE): a u8 vector of text,
 * to a backend that runs client kernels, for a tenant allowed them. */
static int module_check(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, const struct djinn_tensor_create *r)
{
	struct backend *b = s->dev->backend;

	if (r->segment != DJINN_SEG_TEXT || r->desc.dtype != DJINN_DTYPE_U8 ||
	    r->desc.ndim != 1) {
		conn_error(c, hdr, -EINVAL,
			   "flags: a module (DJINN_TENSOR_MODULE) is text, u8, "
			   "one dim: not %s, %s, %u dims",
			   r->segment == DJINN_SEG_TEXT ? "text" : "data",
			   djinn_dtype_name(r->desc.dtype), r->desc.ndim);
		return -EINVAL;
	}
	if (kernels_allowed(c, hdr, s))
		return -EPERM;
	if (!b->ops->module_load || !b->ops->run_kernel) {
		conn_error(c, hdr, -EOPNOTSUPP, BACKEND_NO_KERNELS, b->name);
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The module's bytes have arrived: the backend loads them once, here, so
 * that one that does not load is refused now and not at its first run.
 * On failure the text reference is dropped and a new entry evicted. */
static int module_load(struct conn *c, const struct djinn_hdr *hdr,
		       struct stream *st, bool created)
{
	struct backend *b = st->s->dev->backend;
	struct vmu_provider *p = b->provider;
	uint64_t len = vmu_text_size(st->t.text);
	char msg[DJINN_MAX_ERROR_MSG];
	void *image = malloc(len);
	int ret;

	if (!image) {
		ret = -ENOMEM;
		snprintf(msg, sizeof(msg), "out of memory");
	} else {
		ret = p->ops->copy_dtoh(p, image, vmu_text_addr(st->t.text),
					len);
		if (ret)
			snprintf(msg, sizeof(msg),
				 "cannot read the module back: error %d", ret);
	}
	if (!ret)
		ret = b->ops->module_load(b, st->fp, image, len, msg,
					  sizeof(msg));
	free(image);
	if (!ret)
		return 0;
	conn_error(c, hdr, ret, "%s", msg);
	vmu_text_put(st->s->vs, st->t.text);
	if (created)
		vmu_text_evict(st->s->dev->vmu, st->fp,
			       vmu_session_tenant(st->s->vs));
	return ret;
}

static int stream_create(struct conn *c, const struct djinn_hdr *hdr,
			 const struct djinn_tensor_create *r, struct stream *st)
{
	uint64_t bytes, data = hdr->payload_len - sizeof(*r);
	int ret;

	ret = check_desc(c, hdr, &r->desc, &bytes);
	if (ret)
		return ret;
	if (r->segment > DJINN_SEG_TEXT ||
	    r->flags & ~DJINN_TENSOR_CREATE_ALL) {
		conn_error(c, hdr, -EINVAL, "%s",
			   r->segment > DJINN_SEG_TEXT ? "unknown segment" :
							 "unknown flags");
		return -EINVAL;
	}
	if (r->flags & DJINN_TENSOR_MODULE) {
		ret = module_check(c, hdr, st->s, r);
		if (ret)
			return ret;
		st->t.module = true;
	}
	if (data > bytes || (r->segment == DJINN_SEG_TEXT && data != bytes)) {
		conn_error(c, hdr, -EINVAL,
			   "%llu bytes of data for a tensor of %llu%s",
			   (unsigned long long)data, (unsigned long long)bytes,
			   r->segment == DJINN_SEG_TEXT ?
				   " (text comes whole)" :
				   "");
		return -EINVAL;
	}
	st->create = true;
	st->t.desc = r->desc;
	st->t.bytes = bytes;
	if (r->segment == DJINN_SEG_TEXT) {
		memcpy(st->fp, r->fp, sizeof(st->fp));
		ret = vmu_text_begin(st->s->vs, bytes, &c->sink.upload);
	} else if (!msg_all_zero(r->fp, sizeof(r->fp))) {
		conn_error(c, hdr, -EINVAL, "fingerprint set for data");
		return -EINVAL;
	} else {
		struct exec_mem m = {
			.create = true,
			.bytes = bytes,
			.zero_from = data,
		};

		ret = mem_submit(c, hdr, st->s, &m, st, &st->job);
		return ret ? ret : 1;
	}
	if (ret)
		alloc_error(c, hdr, st->s, ret, bytes);
	return ret;
}

static int stream_write(struct conn *c, const struct djinn_hdr *hdr,
			const struct djinn_tensor_io *io, struct stream *st)
{
	struct vmu_region_info info;
	uint32_t slot;
	int ret;

	if (io->len != hdr->payload_len - sizeof(*io)) {
		conn_error(
			c, hdr, -EINVAL, "len %llu, but %llu bytes follow",
			(unsigned long long)io->len,
			(unsigned long long)(hdr->payload_len - sizeof(*io)));
		return -EINVAL;
	}
	ret = session_tensor_hold(st->s, io->handle, &st->t, &slot);
	if (ret) {
		conn_error(c, hdr, -ENOENT, "no tensor with handle %#llx",
			   (unsigned long long)io->handle);
		return ret;
	}
	st->held = slot + 1;
	if (st->t.text) {
		conn_error(c, hdr, -EPERM, "text tensors are read-only");
		return -EPERM;
	}
	if (io->offset > st->t.bytes || io->len > st->t.bytes - io->offset) {
		conn_error(c, hdr, -EINVAL,
			   "range [%llu, +%llu) outside a tensor of %llu bytes",
			   (unsigned long long)io->offset,
			   (unsigned long long)io->len,
			   (unsigned long long)st->t.bytes);
		return -EINVAL;
	}
	st->offset = io->offset;
	/* Resident: pin it here (cheap); swapped out: bring it back on
	 * the memory executor. */
	ret = vmu_region_info(st->s->vs, st->t.region, &info);
	if (!ret && info.state != VMU_REGION_RESIDENT) {
		struct exec_mem m = { .region = st->t.region };

		ret = mem_submit(c, hdr, st->s, &m, st, &st->job);
		return ret ? ret : 1;
	}
	if (!ret)
		ret = vmu_region_pin(st->s->vs, st->t.region, NULL, &info);
	if (ret) {
		conn_error(c, hdr, ret, "cannot make the tensor resident");
		return ret;
	}
	st->pinned = true;
	c->sink.addr = info.addr + io->offset;
	c->sink.prov = st->s->dev->backend->provider;
	return 0;
}

/* The stream's memory is ready (or not): take its data, or refuse it. */
static void stream_mem_done(struct conn *c, struct exec_job *job,
			    struct mem_waiter *w)
{
	struct stream *st = container_of(w, struct stream, w);

	st->job = NULL;
	if (job->error) {
		if (st->create)
			alloc_error(c, &c->hdr, job->s, job->error,
				    job->mem.bytes);
		else
			conn_error(c, &c->hdr, job->error,
				   "cannot make the tensor resident");
		stream_free(c, st, true);
		conn_stream_ready(c, job->error);
		return;
	}
	st->t.region = job->mem.region;
	st->pinned = true;
	c->sink.addr = job->mem.addr + st->offset;
	c->sink.prov = job->s->dev->backend->provider;
	conn_stream_ready(c, 0);
}

int msg_stream_begin(struct conn *c, const struct djinn_hdr *hdr,
		     const uint8_t *body)
{
	struct stream *st = calloc(1, sizeof(*st));
	int ret;

	if (!st) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	st->s = msg_session(c, hdr, msg_desc(hdr->type)->flags);
	if (!st->s) {
		free(st);
		return -ENOENT;
	}
	c->stream = st;
	st->w.done = stream_mem_done;
	if (hdr->type == DJINN_MSG_TENSOR_CREATE)
		ret = stream_create(c, hdr, (const void *)body, st);
	else
		ret = stream_write(c, hdr, (const void *)body, st);
	if (ret < 0)
		stream_free(c, st, true);
	return ret;
}

void msg_stream_end(struct conn *c, const struct djinn_hdr *hdr)
{
	struct stream *st = c->stream;
	struct djinn_tensor_resp r;
	uint64_t handle;
	bool created = true;
	char msg[DJINN_MAX_ERROR_MSG];
	int ret = c->sink.error;

	if (ret) {
		conn_error(c, hdr, ret, "writing to the device failed");
		stream_free(c, st, true);
		return;
	}
	/* a fault while the bytes came: they went to lost memory */
	ret = session_lost(st->s, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		stream_free(c, st, true);
		return;
	}
	if (!st->create) {
		stream_free(c, st, false);
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		return;
	}
	if (c->sink.upload) {
		struct vmu_text_upload *u = c->sink.upload;

		c->sink.upload = NULL; /* commit frees it, either way */
		ret = vmu_text_commit(u, st->fp, &st->t.text, &created);
		if (ret) {
			conn_error(
				c, hdr, ret, "%s",
				ret == -EBADMSG ?
					"bytes do not match the fingerprint" :
					"cannot store the text");
			stream_free(c, st, false);
			return;
		}
		if (st->t.module && module_load(c, hdr, st, created)) {
			stream_free(c, st, false);
			return;
		}
	} else {
		vmu_region_unpin(st->s->vs, st->t.region);
		st->pinned = false;
	}
	ret = session_tensor_add(st->s, &st->t, &handle);
	if (ret) {
		if (st->t.text)
			vmu_text_put(st->s->vs, st->t.text);
		else
			vmu_region_destroy(st->s->vs, st->t.region);
		conn_error(c, hdr, ret, "out of memory for handles");
	} else {
		msg_tensor_resp(&r, handle, &st->t.desc,
				created ? 0 : DJINN_TENSOR_DEDUP);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
	}
	stream_free(c, st, false);
}

/* Bytes of a streaming request arrive: the client is alive, so its
 * lease is renewed (it cannot send a HEARTBEAT mid-frame). */
void msg_stream_progress(struct conn *c)
{
	struct stream *st = c->stream;

	if (st)
		c->srv->sessions.leases->ops->renew(c->srv->sessions.leases,
						    st->s, loop_now());
}

void msg_stream_abort(struct conn *c)
{
	stream_free(c, c->stream, true);
}

/* A session ended (the session table's @ended_hook): its uploads in
 * progress stop now (their memory goes with the session), the rest of
 * their bytes are skipped, and they are answered -ECANCELED. */
static void session_ended(struct session *s, void *arg)
{
	struct server *srv = arg;
	struct conn *c;

	svc_model_session_ended(s);
	list_for_each_entry(c, &srv->conns, node) {
		struct stream *st = c->stream;

		conn_detach(c, s->id);
		if (!st || st->s != s)
			continue;
		conn_error(c, &c->hdr, -ECANCELED, "session %llu ended: %s",
			   (unsigned long long)s->id,
			   session_reason_name(s->reason));
		stream_free(c, st, true);
		free(c->body);
		c->body = NULL;
		c->body_len = c->body_got = 0;
		c->ps = c->left ? P_DISCARD : P_HDR;
		c->hdr_got = 0;
	}
}

void msg_init(struct server *srv)
{
	srv->sessions.ended_hook = session_ended;
	srv->sessions.hook_arg = srv;
}

/* A read in flight: its tensor stays held, and resident, until sent. */
struct read_ctx {
	struct mem_waiter w; /* swapping in, or staging, first */
	struct conn *c; /* counts it in flight (conn_read_begin) */
	struct djinn_hdr hdr;
	uint64_t t0;
	uint64_t offset, len;
	struct session *s;
	uint32_t slot;
	uint64_t region;
	struct exec_mem staged; /* a device-only device's bytes, on the host */
};

static void read_done(void *arg)
{
	struct read_ctx *rc = arg;

	if (rc->region)
		vmu_region_unpin(rc->s->vs, rc->region);
	/* The reply is sent: another read may have the buffer now. */
	executor_unstage(rc->s->dev->mem, &rc->staged);
	/* The connection outlives its replies and the jobs that hold it. */
	conn_read_end(rc->c, rc->len);
	session_tensor_unhold(rc->s, rc->slot);
	session_put(rc->s);
	free(rc);
}

/* The tensor is resident (swapped in), or its bytes staged: send them. */
static void read_mem_done(struct conn *c, struct exec_job *job,
			  struct mem_waiter *w)
{
	struct read_ctx *rc = container_of(w, struct read_ctx, w);
	const void *src;

	metrics_observe(&c->srv->st, DJINN_MSG_TENSOR_READ,
			loop_now() - rc->t0);
	if (job->error) {
		conn_error(c, &rc->hdr, job->error, "%s the tensor",
			   job->mem.stage_len ? "cannot copy from the device" :
						"cannot make resident");
		read_done(rc);
		return;
	}
	rc->region = job->mem.region;
	rc->staged = job->mem;
	src = rc->staged.staged ?
		      rc->staged.staged :
		      (const void *)(uintptr_t)(job->mem.addr + rc->offset);
	conn_reply(c, &rc->hdr, NULL, 0, src, rc->len, read_done, rc);
}

static void handle_tensor_read(struct conn *c, const struct djinn_hdr *hdr,
			       struct session *s, void *req, uint64_t len)
{
	const struct djinn_tensor_io *io = req;
	struct vmu_region_info info = { 0 };
	struct vmu_provider *p;
	struct read_ctx *rc;
	struct tensor t;
	uint64_t addr;
	int ret;

	rc = calloc(1, sizeof(*rc));
	if (!rc) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	ret = session_tensor_hold(s, io->handle, &t, &rc->slot);
	if (ret) {
		conn_error(c, hdr, -ENOENT, "no tensor with handle %#llx",
			   (unsigned long long)io->handle);
		free(rc);
		return;
	}
	rc->s = s; /* read_done() lets go of it */
	session_ref(s);
	rc->c = c;
	rc->len = io->len;
	conn_read_begin(c, rc->len);
	if (io->offset > t.bytes || io->len > t.bytes - io->offset) {
		conn_error(c, hdr, -EINVAL,
			   "range [%llu, +%llu) outside a tensor of %llu bytes",
			   (unsigned long long)io->offset,
			   (unsigned long long)io->len,
			   (unsigned long long)t.bytes);
		read_done(rc);
		return;
	}
	p = rc->s->dev->backend->provider;
	if (!t.text) {
		ret = vmu_region_info(rc->s->vs, t.region, &info);
		if (ret) {
			conn_error(c, hdr, ret,
				   "cannot make the tensor resident");
			read_done(rc);
			return;
		}
	}
	/*
	 * On a GPU (provider device_only) the I/O thread cannot read device
	 * memory: the memory executor copies the range to pinned host
	 * memory, and the reply is sent from there. A swapped-out tensor
	 * goes there too, to be swapped in. Else the bytes go as they are:
	 * on the CPU backend a device address is a host pointer.
	 */
	if ((p->device_only && io->len) ||
	    (!t.text && info.state != VMU_REGION_RESIDENT)) {
		struct exec_mem m = { .region = t.text ? 0 : t.region };
		struct exec_job *job;

		if (t.text)
			m.addr = vmu_text_addr(t.text);
		if (p->device_only) {
			m.stage_off = io->offset;
			m.stage_len = io->len;
		}
		rc->w.done = read_mem_done;
		rc->hdr = *hdr;
		rc->t0 = msg_defer(c);
		rc->offset = io->offset;
		if (mem_submit(c, hdr, rc->s, &m, &rc->w, &job))
			read_done(rc);
		return;
	}
	if (t.text) {
		addr = vmu_text_addr(t.text);
	} else {
		ret = vmu_region_pin(rc->s->vs, t.region, NULL, &info);
		if (ret) {
			conn_error(c, hdr, ret,
				   "cannot make the tensor resident");
			read_done(rc);
			return;
		}
		rc->region = t.region;
		addr = info.addr;
	}
	conn_reply(c, hdr, NULL, 0,
		   p->device_only ?
			   NULL :
			   (const void *)(uintptr_t)(addr + io->offset),
		   io->len, read_done, rc);
}

static void handle_tensor_release(struct conn *c, const struct djinn_hdr *hdr,
				  struct session *s, void *req, uint64_t len)
{
	const struct djinn_tensor_release *r = req;

	if (session_tensor_release(s, r->handle))
		conn_error(c, hdr, -ENOENT, "no tensor with handle %#llx",
			   (unsigned long long)r->handle);
	else
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* model.NAME.readable: an open-weight served model. */
static bool readable_model(void *arg, const char *name)
{
	const struct server_config *cfg = arg;

	for (unsigned int i = 0; i < cfg->nr_readable; i++)
		if (!strcmp(cfg->readable[i], name))
			return true;
	return false;
}

static void handle_text_lookup(struct conn *c, const struct djinn_hdr *hdr,
			       struct session *s, void *req, uint64_t len)
{
	const struct djinn_text_lookup *l = req;
	struct djinn_tensor_resp r;
	struct tensor t = { 0 };
	uint64_t handle;

	if (check_desc(c, hdr, &l->desc, &t.bytes))
		return;
	t.desc = l->desc;
	c->srv->st.text_lookups++;
	if (vmu_text_lookup(s->vs, l->fp, &t.text) &&
	    (!model_store_served_fp(s->dev->models, l->fp, readable_model,
				    &c->srv->cfg) ||
	     vmu_text_lookup_shared(s->vs, l->fp, &t.text))) {
		c->srv->st.text_misses++;
		conn_miss(c, hdr, -ENOENT, "no text with that fingerprint");
	} else if (vmu_text_size(t.text) != t.bytes) {
		conn_error(c, hdr, -EINVAL,
			   "text of %llu bytes viewed as %llu bytes",
			   (unsigned long long)vmu_text_size(t.text),
			   (unsigned long long)t.bytes);
		vmu_text_put(s->vs, t.text);
	} else if (session_tensor_add(s, &t, &handle)) {
		conn_error(c, hdr, -ENOMEM, "out of memory for handles");
		vmu_text_put(s->vs, t.text);
	} else {
		msg_tensor_resp(&r, handle, &t.desc, DJINN_TENSOR_DEDUP);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
	}
}

/* ---------------------------------------------------------------------- */
/* Graphs */

static void graph_done(struct exec_job *job, void *arg);

static void handle_graph_submit(struct conn *c, const struct djinn_hdr *hdr,
				struct session *s, void *req, uint64_t len)
{
	struct exec_job *job = calloc(1, sizeof(*job));
	char msg[DJINN_MAX_ERROR_MSG];
	struct djinn_tensor_desc *outs = NULL;
	bool *in_module = NULL;
	uint32_t nin, nout;
	int ret;

	if (!job) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		free(req);
		return;
	}
	job->payload = req; /* the row says: the handler keeps it */
	job->request_id = hdr->request_id;
	job->s = s;
	session_ref(s);
	ret = djinn_graph_parse(req, len, &job->view, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		goto out_free;
	}
	/* a tenant's modules stay after a reload turns its kernels off */
	for (uint32_t i = 0; i < job->view.g->nr_nodes; i++)
		if (job->view.nodes[i].op == DJINN_GOP_KERNEL &&
		    kernels_allowed(c, hdr, s))
			goto out_free;
	if (msg_inflight_full(c, hdr, s))
		goto out_free;
	nin = job->view.g->nr_inputs;
	nout = job->view.g->nr_outputs;
	job->in_descs = calloc(nin ? nin : 1, sizeof(*job->in_descs));
	job->descs = calloc(job->view.g->nr_nodes, sizeof(*job->descs));
	outs = calloc(nout, sizeof(*outs));
	in_module = calloc(nin ? nin : 1, sizeof(*in_module));
	if (!job->in_descs || !job->descs || !outs || !in_module) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* The inputs' shapes: tensors now, or results of earlier graphs,
	 * which are known from their submission. */
	for (uint32_t i = 0; i < nin; i++) {
		const struct djinn_ref *ref = &job->view.inputs[i];
		struct tensor t;

		ret = ref->kind == DJINN_REF_RESULT ?
			      session_result_desc(job->s, ref->id, ref->index,
						  &job->in_descs[i]) :
			      session_tensor_get(job->s, ref->id, &t);
		if (!ret && ref->kind == DJINN_REF_HANDLE) {
			job->in_descs[i] = t.desc;
			in_module[i] = t.module;
		}
		if (ret) {
			conn_error(c, hdr, -ENOENT, "input %u: no such %s", i,
				   ref->kind == DJINN_REF_RESULT ? "result" :
								   "tensor");
			goto out_free;
		}
	}
	ret = djinn_graph_infer_modules(&job->view, job->in_descs, in_module,
					job->descs, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		goto out_free;
	}
	for (uint32_t k = 0; k < nout; k++)
		outs[k] = job->descs[job->view.outputs[k]];
	ret = session_result_begin(job->s, hdr->request_id, nout, outs);
	if (ret) {
		conn_error(c, hdr, ret, "out of memory");
		goto out_free;
	}
	free(outs);
	free(in_module);
	job->lane = SCHED_COMPUTE;
	job->run = svc_graph_run;
	job->cancel = svc_graph_cancel;
	job->se = &job->s->se;
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->t0 = msg_defer(c);
	job->done = graph_done;
	job->done_arg = c->srv;
	msg_inflight_add(job->s);
	sched_submit(job->s->dev->sched, job);
	return;

out_free:
	free(outs);
	free(in_module);
	svc_job_free(job);
}

static void graph_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct conn *c = job->conn;
	uint32_t nout = job->view.g->nr_outputs;
	struct djinn_hdr hdr = {
		.type = DJINN_MSG_GRAPH_SUBMIT,
		.request_id = job->request_id,
		.session_id = job->s->id,
	};

	metrics_observe(&srv->st, DJINN_MSG_GRAPH_SUBMIT, loop_now() - job->t0);
	/* a fault while it was queued or ran: its results are lost */
	if (!job->error)
		job->error = session_lost(job->s, job->msg, sizeof(job->msg));
	if (job->error) {
		srv->st.graphs_failed++;
		conn_error(c, &hdr, job->error, "%s", job->msg);
	} else {
		size_t len = sizeof(struct djinn_graph_resp) +
			     nout * sizeof(struct djinn_tensor_resp);
		struct djinn_graph_resp *r = calloc(1, len);
		struct djinn_tensor_resp *t = (void *)(r + 1);

		srv->st.graphs_run++;
		if (!r) {
			conn_error(c, &hdr, -ENOMEM, "out of memory");
		} else {
			r->nr_outputs = nout;
			r->peak_bytes = job->res.peak_bytes;
			r->run_ns = job->res.run_ns;
			for (uint32_t k = 0; k < nout; k++)
				msg_tensor_resp(
					&t[k], job->handles[k],
					&job->descs[job->view.outputs[k]], 0);
			conn_reply(c, &hdr, r, len, NULL, 0, NULL, NULL);
			free(r);
		}
	}
	msg_inflight_sub(job->s);
	if (srv->sessions.leases->ops->complete)
		srv->sessions.leases->ops->complete(srv->sessions.leases,
						    job->s, job->request_id,
						    DJINN_MSG_GRAPH_SUBMIT,
						    job->error);
	conn_put(c);
	svc_job_free(job);
}

static void mem_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct mem_waiter *w = job->ctx;
	struct conn *c = job->conn;

	job->s->mem_waits--;
	/* The client waited on the daemon: it was not idle. */
	if (!job->s->dead)
		srv->sessions.leases->ops->renew(srv->sessions.leases, job->s,
						 loop_now());
	if (w) {
		w->done(c, job, w);
	} else {
		/* Whoever waited is gone (the session ended, or the
		 * connection closed): undo. */
		if (!job->error && job->mem.region)
			vmu_region_unpin(job->s->vs, job->mem.region);
		executor_unstage(job->s->dev->mem, &job->mem);
		if (!job->error && job->mem.create)
			vmu_region_destroy(job->s->vs, job->mem.region);
		conn_resume(c);
	}
	conn_put(c);
	svc_job_free(job);
}

/* ---------------------------------------------------------------------- */
/* Dispatch */

/* Room for every fixed-size request, as kmod/main.c's union
 * djinn_ucmd_buffer: a row names its struct as a member of it. */
union msg_req {
	struct djinn_session_open session_open;
	struct djinn_session_attach session_attach;
	struct djinn_session_bind session_bind;
	struct djinn_signal signal;
	struct djinn_tensor_io tensor_io;
	struct djinn_tensor_release tensor_release;
	struct djinn_text_lookup text_lookup;
	struct djinn_model_open model_open;
	struct djinn_handle_req handle;
	struct djinn_ctx_new ctx_new;
	struct djinn_ctx_step ctx_step;
	struct djinn_ctx_resume ctx_resume;
	struct djinn_admin_kill admin_kill;
	struct djinn_admin_model_evict admin_model_evict;
	struct djinn_admin_model_load admin_model_load;
	struct djinn_admin_fault_req admin_fault;
};

#define REQ_SIZE(m) sizeof(((union msg_req *)0)->m)
#define REQ_END(m, last) (offsetof(union msg_req, m.last) + REQ_SIZE(m.last))

/* No payload; a later version may give it a struct, which this djinnd
 * then takes when it is all zero. */
#define ROW_NONE(msg, fn, fl) \
	[DJINN_MSG_##msg] = { .handle = fn, .flags = (fl) }
/* A fixed-size request: union msg_req's member @m, whose first version
 * ended with its field @last. */
#define ROW_FIXED(msg, fn, m, last, fl)                     \
	[DJINN_MSG_##msg] = { .handle = fn,                 \
			      .size = REQ_SIZE(m),          \
			      .min_size = REQ_END(m, last), \
			      .flags = (fl) }
/* A fixed-size request that had no payload before its struct: 0 bytes
 * is the struct zeroed. */
#define ROW_GREW(msg, fn, m, fl) \
	[DJINN_MSG_##msg] = { .handle = fn, .size = REQ_SIZE(m), .flags = (fl) }
/* Variable length: a struct @type, then what it counts, @mx bytes at
 * most in all. */
#define ROW_VARLEN(msg, fn, type, mx, fl)               \
	[DJINN_MSG_##msg] = { .handle = fn,             \
			      .size = sizeof(type),     \
			      .min_size = sizeof(type), \
			      .max = (mx),              \
			      .flags = ROW_VAR | (fl) }
/* Streamed: a struct @type, then data to the device. */
#define ROW_STREAMED(msg, type, fl)                     \
	[DJINN_MSG_##msg] = { .size = sizeof(type),     \
			      .min_size = sizeof(type), \
			      .max = DJINN_MAX_PAYLOAD, \
			      .flags = ROW_STREAM | (fl) }

/* Every message type djinnd serves, once. Its name is lib/msgnames.c's. */
static const struct msg_desc msg_table[] = {
	ROW_NONE(HELLO, handle_hello, ROW_CLIENT | ROW_ADMIN | ROW_ANON),
	ROW_VARLEN(AUTH, handle_auth, struct djinn_auth,
		   sizeof(struct djinn_auth) + DJINN_AUTH_TOKEN_MAX,
		   ROW_CLIENT | ROW_ANON),
	ROW_FIXED(SESSION_OPEN, handle_session_open, session_open, lease_ns,
		  ROW_CLIENT),
	ROW_FIXED(SESSION_ATTACH, handle_session_attach, session_attach, token,
		  ROW_CLIENT),
	ROW_FIXED(SESSION_BIND, handle_session_bind, session_bind, token,
		  ROW_CLIENT),
	ROW_NONE(SESSION_CLOSE, handle_session_close,
		 ROW_IN_SESSION | ROW_LOST_OK),
	/* session 0 is a round trip: it looks its session up itself */
	ROW_NONE(HEARTBEAT, handle_heartbeat, ROW_CLIENT),
	ROW_FIXED(SIGNAL, handle_signal, signal, expected_ns, ROW_IN_SESSION),

	ROW_STREAMED(TENSOR_CREATE, struct djinn_tensor_create, ROW_IN_SESSION),
	ROW_STREAMED(TENSOR_WRITE, struct djinn_tensor_io, ROW_IN_SESSION),
	ROW_FIXED(TENSOR_READ, handle_tensor_read, tensor_io, len,
		  ROW_IN_SESSION),
	ROW_FIXED(TENSOR_RELEASE, handle_tensor_release, tensor_release, handle,
		  ROW_IN_SESSION),
	ROW_FIXED(TEXT_LOOKUP, handle_text_lookup, text_lookup, desc,
		  ROW_IN_SESSION),
	ROW_VARLEN(GRAPH_SUBMIT, handle_graph_submit, struct djinn_graph,
		   GRAPH_MAX_PAYLOAD, ROW_IN_SESSION | ROW_KEEPS_BODY),

	ROW_FIXED(MODEL_OPEN, handle_model_open, model_open, name,
		  ROW_IN_MODELS),
	ROW_VARLEN(MODEL_OPEN_UPLOADED, handle_model_open_uploaded,
		   struct djinn_model_upload, UPLOAD_MAX, ROW_IN_MODELS),
	ROW_FIXED(MODEL_CLOSE, handle_model_close, handle, handle,
		  ROW_IN_MODELS),
	ROW_FIXED(CTX_NEW, handle_ctx_new, ctx_new, __reserved, ROW_IN_MODELS),
	ROW_FIXED(CTX_FREE, handle_ctx_free, handle, handle, ROW_IN_MODELS),
	ROW_FIXED(CTX_FORK, handle_ctx_fork, handle, handle, ROW_IN_MODELS),
	ROW_FIXED(CTX_RESET, handle_ctx_reset, handle, handle, ROW_IN_MODELS),
	ROW_VARLEN(CTX_PREFILL, handle_ctx_prefill, struct djinn_ctx_step,
		   STEP_MAX, ROW_IN_MODELS),
	ROW_FIXED(CTX_DECODE, handle_ctx_decode, ctx_step, sampling,
		  ROW_IN_MODELS),
	ROW_FIXED(CTX_RESUME, handle_ctx_resume, ctx_resume, hidden,
		  ROW_IN_MODELS),

	ROW_NONE(ADMIN_SESSIONS, handle_admin_sessions, ROW_ADMIN),
	ROW_FIXED(ADMIN_KILL, handle_admin_kill, admin_kill, session_id,
		  ROW_ADMIN),
	ROW_NONE(ADMIN_VMU, handle_admin_vmu, ROW_ADMIN),
	ROW_NONE(ADMIN_STATS, handle_admin_stats, ROW_ADMIN),
	ROW_NONE(ADMIN_MODELS, handle_admin_models, ROW_ADMIN),
	ROW_FIXED(ADMIN_MODEL_EVICT, handle_admin_model_evict,
		  admin_model_evict, name, ROW_ADMIN),
	ROW_GREW(ADMIN_FAULT_INJECT, handle_admin_fault_inject, admin_fault,
		 ROW_ADMIN),
	ROW_NONE(ADMIN_SCHED, handle_admin_sched, ROW_ADMIN),
	ROW_NONE(ADMIN_TENANTS, handle_admin_tenants, ROW_ADMIN),
	ROW_FIXED(ADMIN_MODEL_LOAD, handle_admin_model_load, admin_model_load,
		  flags, ROW_ADMIN),
};

/* A row is there when a socket serves it. */
static const struct msg_desc *msg_desc(uint16_t type)
{
	if (type >= ARRAY_SIZE(msg_table) ||
	    !(msg_table[type].flags & (ROW_CLIENT | ROW_ADMIN)))
		return NULL;
	return &msg_table[type];
}

bool msg_known(uint16_t type)
{
	return msg_desc(type) != NULL;
}

const char *msg_label(uint16_t type)
{
	const char *label = djinn_msg_label(type);

	return label ? label : "unknown";
}

int msg_body_len(const struct conn *c, const struct djinn_hdr *hdr,
		 uint64_t *fixed, uint64_t *max)
{
	const struct msg_desc *d = msg_desc(hdr->type);

	if (!d)
		return -EOPNOTSUPP;
	/* The admin socket serves HELLO and the admin messages only. */
	if (!(d->flags & (c->admin ? ROW_ADMIN : ROW_CLIENT)))
		return -EPERM;
	/* A TLS connection without a tenant yet: HELLO and AUTH. */
	if (!c->tenant[0] && !(d->flags & ROW_ANON))
		return -EACCES;
	*fixed = d->flags & ROW_STREAM ? d->size : 0;
	*max = d->flags & (ROW_VAR | ROW_STREAM) ? d->max : MSG_STRUCT_MAX;
	return 0;
}

/*
 * A fixed-size request's @len bytes into @req, by copy_struct_from_user()'s
 * rules: a short one (down to the row's minimum, checked already) is
 * zero-filled, a long one cut to the struct when the bytes past it are
 * zero: the fields a newer client has and left unset. A byte set there
 * asks for what this djinnd does not know: -E2BIG, and nothing done.
 */
static int req_copy(struct conn *c, const struct djinn_hdr *hdr,
		    const struct msg_desc *d, union msg_req *req,
		    const uint8_t *body, uint64_t len)
{
	for (uint64_t i = d->size; i < len; i++) {
		if (!body[i])
			continue;
		conn_error(c, hdr, -E2BIG,
			   "%s takes %u bytes; byte %llu of the %llu sent is "
			   "not zero: a field this djinnd does not know",
			   djinn_msg_name(hdr->type), d->size,
			   (unsigned long long)i, (unsigned long long)len);
		return -E2BIG;
	}
	memset(req, 0, sizeof(*req));
	memcpy(req, body, len < d->size ? len : d->size);
	return 0;
}

void msg_handle(struct conn *c, const struct djinn_hdr *hdr, uint8_t *body,
		uint64_t len)
{
	const struct msg_desc *d = msg_desc(hdr->type); /* msg_body_len() */
	struct session *s = NULL;
	union msg_req req;
	void *p = body;

	if (len < d->min_size) {
		conn_error(c, hdr, -EINVAL,
			   "%s takes at least %u bytes, not %llu",
			   djinn_msg_name(hdr->type), d->min_size,
			   (unsigned long long)len);
		goto out_free;
	}
	if (!(d->flags & ROW_VAR)) {
		if (req_copy(c, hdr, d, &req, body, len))
			goto out_free;
		free(body);
		body = NULL;
		p = &req;
		len = d->size;
	}
	if (d->flags & ROW_SESSION) {
		s = msg_session(c, hdr, d->flags);
		if (!s)
			goto out_free;
	}
	d->handle(c, hdr, s, p, len);
	if (s)
		session_put(s);
	if (d->flags & ROW_KEEPS_BODY)
		return;

out_free:
	free(body);
}
