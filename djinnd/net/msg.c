// SPDX-License-Identifier: MIT
/*
 * The messages' dispatch table (at the end), what the handlers share,
 * and the protocol's hooks in the floors below. The handlers are in
 * msg_session.c, msg_tensor.c, msg_graph.c, msg_model.c and msg_admin.c.
 * Runs on the I/O thread.
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
#include "net/journal.h"
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
struct session *msg_req_session(struct conn *c, const struct djinn_hdr *hdr,
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
	struct session *s = msg_req_session(c, hdr, flags & ROW_LOST_OK);

	if (s && (flags & ROW_MODELS) && !s->dev->models) {
		conn_error(c, hdr, -EOPNOTSUPP, "this djinnd serves no models");
		session_put(s);
		return NULL;
	}
	return s;
}

struct session *msg_row_session(struct conn *c, const struct djinn_hdr *hdr)
{
	return msg_session(c, hdr, msg_desc(hdr->type)->flags);
}

void msg_tensor_resp(struct djinn_tensor_resp *r, uint64_t handle,
		     const struct djinn_tensor_desc *desc, uint32_t flags)
{
	memset(r, 0, sizeof(*r));
	r->handle = handle;
	r->desc = *desc;
	r->flags = flags;
}

void msg_queue(struct conn *c, struct exec_job *job,
	       void (*done)(struct exec_job *, void *))
{
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->t0 = msg_defer(c);
	job->done = done;
	job->done_arg = c->srv;
	svc_submit(job);
}

void msg_answer(struct conn *c, const struct djinn_hdr *hdr, int ret,
		const char *msg)
{
	if (ret)
		conn_error(c, hdr, ret, "%s", msg);
	else
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Hooks */

/* A session ended (the session table's @ended_hook): its models and
 * contexts go, no connection has it attached any more, and its uploads
 * in progress stop. */
static void session_ended(struct session *s, void *arg)
{
	struct server *srv = arg;
	struct conn *c;

	svc_model_session_ended(s);
	journal_dirty(srv); /* its end, whoever ended it */
	list_for_each_entry(c, &srv->conns, node) {
		conn_detach(c, s->id);
		msg_stream_session_ended(c, s);
	}
}

void msg_init(struct server *srv)
{
	srv->sessions.ended_hook = session_ended;
	srv->sessions.hook_arg = srv;
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
	struct djinn_ctx_truncate ctx_truncate;
	struct djinn_ctx_step ctx_step;
	struct djinn_ctx_resume ctx_resume;
	struct djinn_admin_kill admin_kill;
	struct djinn_admin_model_evict admin_model_evict;
	struct djinn_admin_model_load admin_model_load;
	struct djinn_admin_fault_req admin_fault;
	struct djinn_admin_token_mint admin_token_mint;
	struct djinn_admin_token_revoke admin_token_revoke;
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
	ROW_NONE(STATUS, handle_status, ROW_CLIENT),
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
	ROW_FIXED(CTX_TRUNCATE, handle_ctx_truncate, ctx_truncate, __reserved,
		  ROW_IN_MODELS),
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
	ROW_NONE(ADMIN_RESTART, handle_admin_restart, ROW_ADMIN),
	ROW_FIXED(ADMIN_TOKEN_MINT, handle_admin_token_mint, admin_token_mint,
		  ttl_ns, ROW_ADMIN),
	ROW_FIXED(ADMIN_TOKEN_REVOKE, handle_admin_token_revoke,
		  admin_token_revoke, id, ROW_ADMIN),
	ROW_NONE(ADMIN_TOKENS, handle_admin_tokens, ROW_ADMIN),
	ROW_NONE(ADMIN_HEALTH, handle_admin_health, ROW_ADMIN),
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
	return djinn_msg_label(type) != NULL;
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
