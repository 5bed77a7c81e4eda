/* SPDX-License-Identifier: MIT */
/*
 * The opcodes: what djinnd does with each request (net/ops.c, with the
 * model opcodes in net/model_ops.c and the admin opcodes in
 * net/admin_ops.c). Everything here runs on the I/O thread.
 *
 * ops.c holds the dispatch table: a row per opcode with its request's
 * size, the shortest payload it takes, whether it needs a session and
 * which socket serves it. ops_handle() checks all that once, by
 * copy_struct_from_user()'s rules for sizes (Documentation/protocol.rst,
 * "Request sizes"), and a handler sees a request of its struct's size.
 */
#ifndef DJINN_OPS_H
#define DJINN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

struct conn;
struct server;
struct session;

/* ---------------------------------------------------------------------- */
/* net/ops.c: the dispatch, for the connection (net/conn.c) */

/* For a request's opcode: @fixed gets the fixed part of a streaming
 * opcode (0 for one whose payload is read whole), @max the largest
 * payload allowed. -EOPNOTSUPP for an unknown opcode, -EPERM for one the
 * socket does not serve (admin opcodes outside the admin socket). */
int ops_body_len(const struct conn *c, const struct djinn_hdr *hdr,
		 uint64_t *fixed, uint64_t *max);
/* Run a request whose payload, @body of @len bytes, has arrived whole
 * (an opcode ops_body_len() accepted): its sizes and session are
 * checked, then its handler runs. @body is the callee's to free. */
void ops_handle(struct conn *c, const struct djinn_hdr *hdr, uint8_t *body,
		uint64_t len);
/* A streaming request's struct has arrived: set c->sink and return 0 to
 * take the data, or reply with an error and return it (data discarded). */
int ops_stream_begin(struct conn *c, const struct djinn_hdr *hdr,
		     const uint8_t *body);
void ops_stream_end(struct conn *c, const struct djinn_hdr *hdr);
/* The connection is going away mid-stream. */
void ops_stream_abort(struct conn *c);
/* Data of the streaming request arrived. */
void ops_stream_progress(struct conn *c);

/* An opcode's metric label, "session_open" ("unknown" if none). */
const char *ops_name(uint16_t op);
/* Whether djinnd serves opcode @op (a row of ops.c's table). */
bool ops_known(uint16_t op);
/* A session ended: its uploads in progress stop (answered -ECANCELED),
 * its models and contexts go. */
void ops_session_ended(struct server *srv, struct session *s);

/* ---------------------------------------------------------------------- */
/* net/ops.c: what the handlers share */

/*
 * An opcode's handler. @s is the session hdr.session_id names when the
 * opcode's row asks for one (else NULL): a reference held until the
 * handler returns; one that keeps it takes its own (session_ref()).
 * @req is the request: for a fixed-size opcode its struct, zero-filled
 * to the struct's size (@len), on the caller's stack; for a
 * variable-length one the payload as it came (@len bytes, at least the
 * row's minimum), freed after the handler returns unless the row says
 * the handler keeps it.
 */
typedef void op_fn(struct conn *c, const struct djinn_hdr *hdr,
		   struct session *s, void *req, uint64_t len);

bool ops_all_zero(const void *p, size_t n);
void ops_tensor_resp(struct djinn_tensor_resp *r, uint64_t handle,
		     const struct djinn_tensor_desc *desc, uint32_t flags);
/* The answer comes later, from a job, and is timed there: when the
 * request arrived. */
uint64_t ops_defer(struct conn *c);
/* Whether @s has SCHED_INFLIGHT_MAX graphs and model steps queued or
 * running (then -EAGAIN is answered). */
bool ops_inflight_full(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *s);

/* ---------------------------------------------------------------------- */
/* net/model_ops.c: the model opcodes (DOC: models in proto.h) */

op_fn op_model_open;
op_fn op_model_open_uploaded;
op_fn op_model_close;
op_fn op_ctx_new;
op_fn op_ctx_free;
op_fn op_ctx_fork;
op_fn op_ctx_reset;
op_fn op_ctx_prefill;
op_fn op_ctx_decode;
op_fn op_ctx_resume;
/* A session ended: let go of its models and contexts. */
void model_ops_session_ended(struct session *s);

/* ---------------------------------------------------------------------- */
/* net/admin_ops.c: the admin socket's opcodes */

op_fn op_admin_sessions;
op_fn op_admin_kill;
op_fn op_admin_vmu;
op_fn op_admin_stats;
op_fn op_admin_models;
op_fn op_admin_model_evict;
op_fn op_admin_fault_inject;
op_fn op_admin_sched;

#endif /* DJINN_OPS_H */
