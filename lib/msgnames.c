// SPDX-License-Identifier: MIT
/*
 * Every wire message's name, once. The two lookups are switches over
 * enum djinn_msg without a default, so a message added to proto.h
 * without a row here is a build error (-Wswitch, in -Wall; -Werror),
 * with gcc and clang alike.
 */
#include <stddef.h>

#include <djinn/proto.h>

#include "msgnames.h"

/* X(MSG, label): DJINN_MSG_##MSG and its metric label, MSG in lower case */
#define WIRE_MSGS(X)                                \
	X(HELLO, hello)                             \
	X(SESSION_OPEN, session_open)               \
	X(SESSION_ATTACH, session_attach)           \
	X(SESSION_CLOSE, session_close)             \
	X(HEARTBEAT, heartbeat)                     \
	X(SIGNAL, signal)                           \
	X(TENSOR_CREATE, tensor_create)             \
	X(TENSOR_WRITE, tensor_write)               \
	X(TENSOR_READ, tensor_read)                 \
	X(TENSOR_RELEASE, tensor_release)           \
	X(TEXT_LOOKUP, text_lookup)                 \
	X(GRAPH_SUBMIT, graph_submit)               \
	X(MODEL_OPEN, model_open)                   \
	X(MODEL_CLOSE, model_close)                 \
	X(CTX_NEW, ctx_new)                         \
	X(CTX_FREE, ctx_free)                       \
	X(CTX_FORK, ctx_fork)                       \
	X(CTX_RESET, ctx_reset)                     \
	X(CTX_TRUNCATE, ctx_truncate)               \
	X(STATUS, status)                           \
	X(CTX_PREFILL, ctx_prefill)                 \
	X(CTX_DECODE, ctx_decode)                   \
	X(CTX_RESUME, ctx_resume)                   \
	X(MODEL_OPEN_UPLOADED, model_open_uploaded) \
	X(AUTH, auth)                               \
	X(GOAWAY, goaway)                           \
	X(SESSION_BIND, session_bind)               \
	X(ADMIN_SESSIONS, admin_sessions)           \
	X(ADMIN_KILL, admin_kill)                   \
	X(ADMIN_VMU, admin_vmu)                     \
	X(ADMIN_STATS, admin_stats)                 \
	X(ADMIN_MODELS, admin_models)               \
	X(ADMIN_MODEL_EVICT, admin_model_evict)     \
	X(ADMIN_FAULT_INJECT, admin_fault_inject)   \
	X(ADMIN_SCHED, admin_sched)                 \
	X(ADMIN_TENANTS, admin_tenants)             \
	X(ADMIN_MODEL_LOAD, admin_model_load)       \
	X(ADMIN_RESTART, admin_restart)             \
	X(ADMIN_TOKEN_MINT, admin_token_mint)       \
	X(ADMIN_TOKEN_REVOKE, admin_token_revoke)   \
	X(ADMIN_TOKENS, admin_tokens)               \
	X(ADMIN_HEALTH, admin_health)

#define NAME_CASE(msg, label) \
	case DJINN_MSG_##msg: \
		return #msg;
#define LABEL_CASE(msg, label) \
	case DJINN_MSG_##msg:  \
		return #label;

const char *djinn_msg_name(unsigned int type)
{
	switch ((enum djinn_msg)type) {
		WIRE_MSGS(NAME_CASE)
	}
	return NULL;
}

const char *djinn_msg_label(unsigned int type)
{
	switch ((enum djinn_msg)type) {
		WIRE_MSGS(LABEL_CASE)
	}
	return NULL;
}
