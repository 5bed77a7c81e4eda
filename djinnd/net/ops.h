/* SPDX-License-Identifier: MIT */
/*
 * What the opcode handlers share (net/ops.c, net/model_ops.c).
 */
#ifndef DJINN_OPS_H
#define DJINN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include <djinn/proto.h>

struct conn;
struct session;

/* The live session @hdr names, attached to @c, lease renewed; or NULL
 * with the error sent. */
struct session *ops_req_session(struct conn *c, const struct djinn_hdr *hdr);
/* Whether a payload has exactly the struct's size (else answered). */
bool ops_exact(struct conn *c, const struct djinn_hdr *hdr, uint64_t len,
	       uint64_t want);
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

/* An opcode's handler: @body (@len bytes) is freed after it returns,
 * unless the opcode's table entry says the handler keeps it. */
typedef void op_fn(struct conn *c, const struct djinn_hdr *hdr, uint8_t *body,
		   uint64_t len);

/* net/model_ops.c */
op_fn model_op;
/* A session ended: let go of its models and contexts. */
void model_ops_session_ended(struct session *s);
op_fn op_admin_models;
op_fn op_admin_model_evict;

#endif /* DJINN_OPS_H */
