/* SPDX-License-Identifier: MIT */
/*
 * The messages: what djinnd does with each request (net/msg.c, with the
 * model messages in net/msg_model.c and the admin messages in
 * net/msg_admin.c). Everything here runs on the I/O thread.
 *
 * msg.c holds the dispatch table: a row per message type with its
 * request's size, the shortest payload it takes, whether it needs a
 * session and which socket serves it. msg_handle() checks all that once, by
 * copy_struct_from_user()'s rules for sizes (Documentation/protocol.rst,
 * "Request sizes"), and a handler sees a request of its struct's size.
 */
#ifndef DJINN_MSG_H
#define DJINN_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

struct conn;
struct server;
struct session;

/* ---------------------------------------------------------------------- */
/* net/msg.c: the dispatch, for the connection (net/conn.c) */

/* For a request's message type: @fixed gets the fixed part of a
 * streaming one (0 for one whose payload is read whole), @max the largest
 * payload allowed. -EOPNOTSUPP for an unknown type, -EPERM for one the
 * socket does not serve (admin messages outside the admin socket). */
int msg_body_len(const struct conn *c, const struct djinn_hdr *hdr,
		 uint64_t *fixed, uint64_t *max);
/* Run a request whose payload, @body of @len bytes, has arrived whole
 * (of a type msg_body_len() accepted): its sizes and session are
 * checked, then its handler runs. @body is the callee's to free. */
void msg_handle(struct conn *c, const struct djinn_hdr *hdr, uint8_t *body,
		uint64_t len);
/* A streaming request's struct has arrived: set c->sink and return 0 to
 * take the data, or reply with an error and return it (data discarded). */
int msg_stream_begin(struct conn *c, const struct djinn_hdr *hdr,
		     const uint8_t *body);
void msg_stream_end(struct conn *c, const struct djinn_hdr *hdr);
/* The connection is going away mid-stream. */
void msg_stream_abort(struct conn *c);
/* The connection can send no more: its reads waiting for staging end
 * unanswered (net/msg_tensor.c, struct read_ctx). */
void msg_reads_abort(struct conn *c);
/* Data of the streaming request arrived. */
void msg_stream_progress(struct conn *c);
/* Session @s ended: @c's upload for it, if any, stops (-ECANCELED). */
void msg_stream_session_ended(struct conn *c, struct session *s);

/* A message type's metric label, "session_open" ("unknown" if none). */
const char *msg_label(uint16_t type);
/* Whether message type @type has a name (lib/msgnames.c): djinnd serves
 * it, or refuses it by name (GOAWAY, which only djinnd sends). */
bool msg_known(uint16_t type);
/* The protocol's hooks in the floors below: when a session ends (the
 * session table's @ended_hook), its uploads in progress stop (answered
 * -ECANCELED) and its models and contexts go. */
void msg_init(struct server *srv);

/* ---------------------------------------------------------------------- */
/* net/msg.c: what the handlers share */

/*
 * A message type's handler. @s is the session hdr.session_id names when
 * the type's row asks for one (else NULL): a reference held until the
 * handler returns; one that keeps it takes its own (session_ref()).
 * @req is the request: for a fixed-size message its struct, zero-filled
 * to the struct's size (@len), on the caller's stack; for a
 * variable-length one the payload as it came (@len bytes, at least the
 * row's minimum), freed after the handler returns unless the row says
 * the handler keeps it.
 */
typedef void msg_fn(struct conn *c, const struct djinn_hdr *hdr,
		    struct session *s, void *req, uint64_t len);

bool msg_all_zero(const void *p, size_t n);
/* A service's outcome: for 0 the empty answer, else the error @ret with
 * @msg. */
void msg_answer(struct conn *c, const struct djinn_hdr *hdr, int ret,
		const char *msg);
/* The live session @hdr names, attached to @c, lease renewed; or NULL
 * with the error answered. With @lost_ok, one a device fault has lost
 * too. */
struct session *msg_req_session(struct conn *c, const struct djinn_hdr *hdr,
				bool lost_ok);
/* The session the row of @hdr's type asks for (ROW_SESSION and its
 * flags), or NULL with the error answered. */
struct session *msg_row_session(struct conn *c, const struct djinn_hdr *hdr);
/* Whether a request's model name is NUL-padded and valid; if not, the
 * error is answered (-EINVAL, saying which). */
bool msg_model_name_ok(struct conn *c, const struct djinn_hdr *hdr,
		       const char name[DJINN_MODEL_NAME_MAX]);
void msg_tensor_resp(struct djinn_tensor_resp *r, uint64_t handle,
		     const struct djinn_tensor_desc *desc, uint32_t flags);
/* The answer comes later, from a job, and is timed there: when the
 * request arrived. */
uint64_t msg_defer(struct conn *c);
/* Queue a service's @job for @c's request being handled, answered by
 * @done when it is back (its answer timed there: msg_defer()). */
struct exec_job;
void msg_queue(struct conn *c, struct exec_job *job,
	       void (*done)(struct exec_job *, void *));
/* ADMIN_MODELS' answer, of model @name alone unless it is NULL. */
void msg_admin_models_reply(struct conn *c, const struct djinn_hdr *hdr,
			    const char *name);

/* ---------------------------------------------------------------------- */
/* net/msg_session.c, msg_tensor.c, msg_graph.c */

msg_fn handle_hello;
msg_fn handle_auth;
msg_fn handle_session_open;
msg_fn handle_session_attach;
msg_fn handle_session_bind;
msg_fn handle_session_close;
msg_fn handle_heartbeat;
msg_fn handle_status;
msg_fn handle_signal;
msg_fn handle_tensor_read;
msg_fn handle_tensor_release;
msg_fn handle_text_lookup;
msg_fn handle_graph_submit;

/* ---------------------------------------------------------------------- */
/* net/msg_model.c: the model messages (DOC: models in proto.h) */

msg_fn handle_model_open;
msg_fn handle_model_open_uploaded;
msg_fn handle_model_close;
msg_fn handle_ctx_new;
msg_fn handle_ctx_free;
msg_fn handle_ctx_fork;
msg_fn handle_ctx_reset;
msg_fn handle_ctx_truncate;
msg_fn handle_ctx_prefill;
msg_fn handle_ctx_decode;
msg_fn handle_ctx_resume;

/* ---------------------------------------------------------------------- */
/* net/msg_admin.c: the admin socket's messages */

msg_fn handle_admin_sessions;
msg_fn handle_admin_kill;
msg_fn handle_admin_vmu;
msg_fn handle_admin_stats;
msg_fn handle_admin_models;
msg_fn handle_admin_model_evict;
msg_fn handle_admin_model_load;
msg_fn handle_admin_fault_inject;
msg_fn handle_admin_sched;
msg_fn handle_admin_tenants;
msg_fn handle_admin_restart;
msg_fn handle_admin_token_mint;
msg_fn handle_admin_token_revoke;
msg_fn handle_admin_tokens;
msg_fn handle_admin_health;
/* Whether djinnd takes new work (ADMIN_HEALTH, GET /readyz, STATUS):
 * not while it drains, restarts, restores a predecessor's state, or has
 * a dead device; else false with @why[@len] saying so. */
bool msg_ready(struct server *srv, char *why, size_t len);

#endif /* DJINN_MSG_H */
