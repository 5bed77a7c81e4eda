// SPDX-License-Identifier: MIT
/*
 * The kernel ABI header compiled the way user space compiles it, beside
 * the wire protocol and libdjinn's API (djinnd and libdjinn will include
 * them together): every struct's size and the offsets the extensible
 * rules depend on, fixed here so that a change is never an accident.
 */
#include <stddef.h>

#include <djinn/djinn.h>
#include <djinn/proto.h>
#include <linux/djinn.h>

#define SIZE(s, n) static_assert(sizeof(struct s) == (n), #s " layout")
#define AT(s, f, n) \
	static_assert(offsetof(struct s, f) == (n), #s "." #f " offset")

SIZE(djinn_ring_offsets, 32);
SIZE(djinn_cqe, 32);
SIZE(djinn_ioc_session_open, 160);
SIZE(djinn_ioc_heartbeat, 32);
SIZE(djinn_ioc_signal, 32);
SIZE(djinn_ioc_session_info, 184);
SIZE(djinn_ioc_daemon_attach, 8);
SIZE(djinn_ioc_proxy_open, 120);
SIZE(djinn_ioc_proxy_close, 16);
SIZE(djinn_ioc_post, 56);
SIZE(djinn_ioc_kill, 16);

/* size and flags first, everywhere */
AT(djinn_ioc_session_open, flags, 4);
AT(djinn_ioc_session_open, session_id, 88);
AT(djinn_ioc_session_open, ring, 128);
AT(djinn_ioc_session_info, token, 16);
AT(djinn_ioc_post, cqe, 16);

/* DJINN_TENANT_LEN and DJINN_TOKEN_LEN: one name in both headers,
 * defined alike (a difference is a redefinition error here); the
 * fields they size agree */
#define FIELD_SIZE(s, f) sizeof(((struct s *)0)->f)
static_assert(FIELD_SIZE(djinn_ioc_session_info, tenant) ==
		      FIELD_SIZE(djinn_session_open, tenant),
	      "tenant length");
static_assert(FIELD_SIZE(djinn_ioc_session_info, token) ==
		      FIELD_SIZE(djinn_session_resp, token),
	      "token length");
static_assert((int)DJINN_SIGNAL_IO_WAIT == (int)DJINN_PHASE_IO_WAIT, "IO_WAIT");
static_assert((int)DJINN_SIGNAL_COMPUTE == (int)DJINN_PHASE_COMPUTE, "COMPUTE");
static_assert((int)DJINN_SIGNAL_IDLE == (int)DJINN_PHASE_IDLE, "IDLE");
