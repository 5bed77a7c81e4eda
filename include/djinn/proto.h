/* SPDX-License-Identifier: MIT */
/*
 * The wire protocol between libdjinn (and djinnctl) and djinnd.
 *
 * DOC: framing
 *
 * Every message is a frame: a 40-byte struct djinn_hdr followed by
 * hdr.payload_len bytes of payload. All integers are little-endian; all
 * structs have a fixed layout with explicit padding named __reserved*,
 * which senders set to zero and receivers refuse when it is not
 * (-EINVAL). No text encodings: tensor bytes follow their struct as they
 * are.
 *
 * A client numbers its requests (hdr.request_id, any value, unique among
 * its requests in flight on the connection, and unique within a session
 * for GRAPH_SUBMIT, whose request_id names its results). Each request
 * gets exactly one response frame with the same request_id, type and
 * session_id and DJINN_F_RESPONSE set; its version is the server's, so a
 * client that gets another version in an error response to HELLO has
 * met a server of another protocol. Responses may come in any order:
 * many requests can be in flight on one connection.
 *
 * Payloads: HELLO, SESSION_CLOSE and a HEARTBEAT request carry none;
 * the responses to SESSION_CLOSE, SIGNAL, TENSOR_WRITE and
 * TENSOR_RELEASE carry none either. Every other payload is the struct
 * its message type names below.
 *
 * DOC: errors
 *
 * A failed request's response has DJINN_F_ERROR set and a struct
 * djinn_error payload: a negative errno and a short message naming what
 * was wrong ("node 3 (matmul): inner dims 64 and 32 differ"). The errno
 * contract, for every message:
 *
 *   -EPROTO        bad magic, or a frame that cannot be parsed: the
 *                  server answers once and closes the connection
 *   -EPROTONOSUPPORT  hdr.version is not the server's; the message names
 *                  both versions; the connection stays open
 *   -EOPNOTSUPP    unknown message type; also a DJINN_TENSOR_MODULE upload
 *                  or a KERNEL node on a backend without client kernels
 *   -EINVAL        reserved field or unknown flag set, bad enum value,
 *                  malformed payload (the message names the field), a
 *                  payload shorter than its struct's first version
 *   -EMSGSIZE      payload_len over DJINN_MAX_PAYLOAD, or over what the
 *                  message allows; checked before anything is allocated
 *   -E2BIG         a limit below exceeded (dims, nodes, tensor bytes); a
 *                  non-zero byte past the request's struct (a field this
 *                  server does not know: Documentation/protocol.rst,
 *                  "Request sizes")
 *   -ENOENT        no such session, tensor or text entry; also stale,
 *                  foreign and forged handles
 *   -EPERM         the session is not attached to this connection, or the
 *                  token is wrong
 *   -ENOMEM        admission refused: the message gives need and
 *                  availability
 *   -EPERM         also: TENSOR_WRITE to a text tensor (read-only)
 *   -EDQUOT        a quota or limit would be exceeded (sessions on the
 *                  server, tensors per session)
 *   -EAGAIN        too many graphs in flight for the session (64): retry
 *                  once answers have come
 *   -EBADMSG       text bytes that do not hash to the fingerprint given
 *   -ECANCELED     the session ended while the request was queued
 *   -EBUSY         a model that still has contexts closed or evicted; a
 *                  paused context asked for anything but RESUME, RESET
 *                  or FREE, or a context that is not paused RESUMEd
 *   -ENOSPC        a context's tokens would pass its max_tokens
 *   -EIO           the device failed; also every request but
 *                  SESSION_CLOSE and HEARTBEAT of a session made before
 *                  a device fault ("session 3: device state lost in a
 *                  fault: cuda:0 fault 1 (...)"), until it is closed; and
 *                  after a restart every use of a handle whose bytes were
 *                  in device memory a fault lost ("tensor 0x100000003
 *                  was lost when cuda:0 was reset: ..."), which only
 *                  TENSOR_RELEASE, MODEL_CLOSE or CTX_FREE take
 *
 * DOC: sessions
 *
 * SESSION_OPEN creates a session bound to the connection and returns its
 * id and a 128-bit token. Every request about a session carries its id in
 * hdr.session_id. Another connection may use the session after
 * SESSION_ATTACH with the token. A session lives until SESSION_CLOSE, an
 * admin kill, daemon shutdown, or its lease running out: the client
 * renews the lease with HEARTBEAT (any request renews it too); a
 * HEARTBEAT naming session 0 is a plain round trip with an empty answer.
 * Closing a connection does not end its sessions; their leases do.
 *
 * When djinn.ko keeps the leases (HELLO's DJINN_FEAT_KMOD), a local
 * client may instead open its session on /dev/djinn and SESSION_BIND it
 * with the kernel session's id and token: the session then lives as long
 * as the client's file (its death ends it at once), its lease is renewed
 * with the HEARTBEAT ioctl, and completions arrive in its mapped ring
 * (struct djinn_session_bind). -EOPNOTSUPP without the module, -EPERM for
 * a wrong token, another user's session or a TCP connection, -ENOENT for
 * no such live session, -EBUSY if it is bound already.
 *
 * DOC: handles and results
 *
 * Tensors are named by 64-bit handles the server issues: opaque,
 * session-scoped, generation-checked. A tensor has at least one element
 * (-EINVAL for an empty one). GRAPH_SUBMIT is answered when the graph
 * has run, with the handles of its outputs. Before that, a later graph
 * of the same session may already use an output as an input by naming
 * it (DJINN_REF_RESULT) with the submit's request_id and the output's
 * index: a session's graphs run in the order they were submitted. The
 * server remembers the last 64 graphs of a session for this; an older
 * one is -ENOENT (use its handles). A graph's inputs are looked up when
 * it runs: release them only after its response.
 */
#ifndef DJINN_PROTO_H
#define DJINN_PROTO_H

#include <assert.h>
#include <linux/types.h>

#define DJINN_MAGIC 0x314e4a44u /* "DJN1" */
#define DJINN_PROTO_VERSION 1

/* Hard limits, checked before anything is allocated. */
#define DJINN_MAX_PAYLOAD (1ull << 34) /* 16 GiB: one frame */
#define DJINN_MAX_DIMS 8
#define DJINN_MAX_NODES 4096
#define DJINN_MAX_GRAPH_INPUTS 4096
#define DJINN_MAX_GRAPH_OUTPUTS 256
#define DJINN_MAX_NODE_INPUTS 4
#define DJINN_MAX_ERROR_MSG 256
/* <linux/djinn.h> (the kernel module's ABI) defines these two alike: a
 * program that includes both gets one value or a redefinition error. */
#define DJINN_TENANT_LEN 64 /* with its NUL */
#define DJINN_TOKEN_LEN 16 /* a session's 128-bit secret */
#define DJINN_FP_LEN 32 /* SHA-256 */

enum djinn_msg {
	DJINN_MSG_HELLO = 1,
	DJINN_MSG_SESSION_OPEN = 2,
	DJINN_MSG_SESSION_ATTACH = 3,
	DJINN_MSG_SESSION_CLOSE = 4,
	DJINN_MSG_HEARTBEAT = 5,
	DJINN_MSG_SIGNAL = 6,
	DJINN_MSG_TENSOR_CREATE = 7,
	DJINN_MSG_TENSOR_WRITE = 8,
	DJINN_MSG_TENSOR_READ = 9,
	DJINN_MSG_TENSOR_RELEASE = 10,
	DJINN_MSG_TEXT_LOOKUP = 11,
	DJINN_MSG_GRAPH_SUBMIT = 12,
	/* Models (DJINN_FEAT_MODELS): see DOC: models. */
	DJINN_MSG_MODEL_OPEN = 13,
	DJINN_MSG_MODEL_CLOSE = 14,
	DJINN_MSG_CTX_NEW = 15,
	DJINN_MSG_CTX_FREE = 16,
	DJINN_MSG_CTX_FORK = 17,
	DJINN_MSG_CTX_RESET = 18,
	DJINN_MSG_CTX_PREFILL = 19,
	DJINN_MSG_CTX_DECODE = 20,
	DJINN_MSG_CTX_RESUME = 21,
	/* 22 stays unassigned: test_framing's unknown-type test uses it */
	DJINN_MSG_MODEL_OPEN_UPLOADED = 23,
	/* Who a TLS client is, by bearer token: see struct djinn_auth. */
	DJINN_MSG_AUTH = 24,
	/*
	 * djinnd's last word on a connection it closes at a restart (no
	 * client sends it): flags DJINN_F_RESPONSE, request_id 0, session_id
	 * 0, no payload. Every request of the connection that has no answer
	 * by then was not run, and may be sent again on a new connection.
	 */
	DJINN_MSG_GOAWAY = 25,
	DJINN_MSG_CTX_TRUNCATE = 26,
	/* What this djinnd holds, for a client choosing among hosts: see
	 * struct djinn_status. */
	DJINN_MSG_STATUS = 27,
	/* A session on /dev/djinn (DJINN_FEAT_KMOD): see DOC: sessions. */
	DJINN_MSG_SESSION_BIND = 32,

	/* Admin socket only. */
	DJINN_MSG_ADMIN_SESSIONS = 64,
	DJINN_MSG_ADMIN_KILL = 65,
	DJINN_MSG_ADMIN_VMU = 66,
	DJINN_MSG_ADMIN_STATS = 67,
	DJINN_MSG_ADMIN_MODELS = 68,
	DJINN_MSG_ADMIN_MODEL_EVICT = 69,
	DJINN_MSG_ADMIN_FAULT_INJECT = 70, /* djinnd --fault-injection only */
	DJINN_MSG_ADMIN_SCHED = 71,
	DJINN_MSG_ADMIN_TENANTS = 72,
	DJINN_MSG_ADMIN_MODEL_LOAD = 73,
	DJINN_MSG_ADMIN_RESTART = 74,
	DJINN_MSG_ADMIN_TOKEN_MINT = 75,
	DJINN_MSG_ADMIN_TOKEN_REVOKE = 76,
	DJINN_MSG_ADMIN_TOKENS = 77,
	DJINN_MSG_ADMIN_HEALTH = 78,
};

/* hdr.flags */
#define DJINN_F_RESPONSE (1u << 0)
#define DJINN_F_ERROR (1u << 1)
#define DJINN_F_ALL (DJINN_F_RESPONSE | DJINN_F_ERROR)

/**
 * struct djinn_hdr - every frame starts with one
 * @magic:       DJINN_MAGIC
 * @version:     DJINN_PROTO_VERSION of the sender
 * @type:        enum djinn_msg: what the frame asks or answers
 * @flags:       DJINN_F_*; requests carry none
 * @__reserved:  zero
 * @request_id:  chosen by the client, echoed in the response
 * @session_id:  the session the request is about, 0 for none
 * @payload_len: bytes that follow the header
 */
struct djinn_hdr {
	__u32 magic;
	__u16 version;
	__u16 type;
	__u32 flags;
	__u32 __reserved;
	__u64 request_id;
	__u64 session_id;
	__u64 payload_len;
};
static_assert(sizeof(struct djinn_hdr) == 40, "djinn_hdr layout");

/**
 * struct djinn_error - payload of a DJINN_F_ERROR response
 * @error: a negative errno
 * @len:   bytes of @msg, at most DJINN_MAX_ERROR_MSG, not NUL-terminated
 */
struct djinn_error {
	__s32 error;
	__u32 len;
	char msg[];
};
static_assert(sizeof(struct djinn_error) == 8, "djinn_error layout");

/* ---------------------------------------------------------------------- */
/* Tensors */

enum djinn_dtype {
	DJINN_DTYPE_F32 = 1,
	DJINN_DTYPE_F16 = 2,
	DJINN_DTYPE_BF16 = 3,
	DJINN_DTYPE_I32 = 4,
	DJINN_DTYPE_I64 = 5,
	DJINN_DTYPE_U8 = 6,
};

enum djinn_segment {
	DJINN_SEG_DATA = 0, /* private to the session */
	DJINN_SEG_TEXT = 1, /* shared, read-only, deduplicated */
};

/**
 * struct djinn_tensor_desc - shape and type
 * @dtype:   enum djinn_dtype
 * @ndim:    0 (a scalar) to DJINN_MAX_DIMS
 * @dims:    sizes, outermost first; entries past @ndim are zero
 */
struct djinn_tensor_desc {
	__u8 dtype;
	__u8 ndim;
	__u8 __reserved[6];
	__u64 dims[DJINN_MAX_DIMS];
};
static_assert(sizeof(struct djinn_tensor_desc) == 72, "desc layout");

/* ---------------------------------------------------------------------- */
/* Requests and responses */

/**
 * struct djinn_auth - AUTH request: a bearer token names the tenant of a
 * TLS connection that came without a client certificate
 * @len:        the token's bytes, 1 to DJINN_AUTH_TOKEN_MAX, after the
 *              struct; the payload is the struct and the token exactly
 * @__reserved: 0
 *
 * Until a certificate or a token names its tenant, a connection of a
 * tls: listener may send HELLO and AUTH only (-EACCES). A token that
 * names no tenant is -EACCES and the connection closes after the
 * answer: one guess per TLS handshake. AUTH on a connection whose tenant
 * is known already is -EISCONN; on a unix or plain TCP one, whose tenant
 * the kernel says, -EOPNOTSUPP.
 */
struct djinn_auth {
	__u32 len;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_auth) == 8, "auth layout");
#define DJINN_AUTH_TOKEN_MAX 512

/* AUTH response: the tenant the token names. */
struct djinn_auth_resp {
	char tenant[DJINN_TENANT_LEN];
};
static_assert(sizeof(struct djinn_auth_resp) == 64, "auth resp layout");

/**
 * struct djinn_hello_resp - HELLO: what the server is and allows
 * @version:      DJINN_PROTO_VERSION
 * @features:     capability bits: DJINN_FEAT_*
 * @max_payload:  the largest frame payload it accepts
 * @capacity:     device memory of its first device, bytes
 * @granularity:  its allocation granule
 * @backend:      "cpu", "cuda", NUL-padded
 */
struct djinn_hello_resp {
	__u32 version;
	__u32 features;
	__u64 max_payload;
	__u64 capacity;
	__u64 granularity;
	char backend[16];
};
static_assert(sizeof(struct djinn_hello_resp) == 48, "hello layout");

/* djinn_hello_resp.features */
#define DJINN_FEAT_MODELS (1u << 0) /* the model messages */
/* djinn.ko keeps the leases: SESSION_BIND, completion rings */
#define DJINN_FEAT_KMOD (1u << 8)
/* this socket names its clients by an AUTH token alone
 * (server.token_auth): a unix client sends its token here, and only to
 * a server its kernel says is root or its own user */
#define DJINN_FEAT_TOKEN_AUTH (1u << 9)

/**
 * struct djinn_session_open - SESSION_OPEN request
 * @tenant:    NUL-terminated name, 1 to 63 bytes
 * @priority:  0 (lowest) to 7; default 4
 * @device:    0 lets the server place the session (on the device with
 *             the most free memory); N + 1 asks for device N, one of
 *             the server's (0 to its device count - 1; see
 *             Documentation/djinnd.rst, "Devices"): a device it does
 *             not have is -ENODEV. The session stays there: its
 *             tensors, graphs and models are that device's. The answer
 *             does not say which device was chosen: ADMIN_SESSIONS does
 *             (djinn_admin_session.device)
 * @lease_ns:  lease period; 0 asks for the server's default; the server
 *             clamps it to its limits and says what it chose
 * @flags:     DJINN_SESSION_DELEGATED, or 0 (the 80 bytes before it are
 *             the request of older clients)
 *
 * @tenant is a label the client chose: djinnd decides who it is (its
 * peer's credentials, certificate or token). With
 * DJINN_SESSION_DELEGATED, @tenant names the tenant the session is
 * opened for instead: a front-end (djinn serve) acts for its clients.
 * The peer must be a user the administrator lists in that tenant's
 * delegates (djinnd.conf(5), [tenant.NAME] delegates), over a unix
 * socket (its uid the kernel's); else -EPERM naming both. The session is
 * then that tenant's in every way (quotas, shares, isolation), and a
 * connection of the delegate may attach it.
 */
struct djinn_session_open {
	char tenant[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 device;
	__u64 lease_ns;
	__u32 flags;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_session_open) == 88, "open layout");

#define DJINN_SESSION_DELEGATED (1u << 0)

/**
 * struct djinn_session_resp - SESSION_OPEN / ATTACH / HEARTBEAT response
 * @session_id: the session
 * @token:      128-bit secret for SESSION_ATTACH (zero except on OPEN)
 * @lease_ns:   the lease period
 * @deadline_ns: CLOCK_MONOTONIC time the lease runs out, on the server
 */
struct djinn_session_resp {
	__u64 session_id;
	__u8 token[DJINN_TOKEN_LEN];
	__u64 lease_ns;
	__u64 deadline_ns;
};
static_assert(sizeof(struct djinn_session_resp) == 40, "session layout");

/* SESSION_ATTACH request: the token; hdr.session_id names the session. */
struct djinn_session_attach {
	__u8 token[DJINN_TOKEN_LEN];
};
static_assert(sizeof(struct djinn_session_attach) == 16, "attach layout");

/**
 * struct djinn_session_bind - SESSION_BIND request (hdr.session_id 0)
 * @kernel_id: the session the client opened on /dev/djinn
 * @token:     its token, as DJINN_IOC_SESSION_OPEN gave it
 *
 * Answered with a djinn_session_resp: a djinnd session (its own id and
 * token) whose lease is the kernel session's. Its completions are posted
 * to the kernel session's ring: one struct djinn_cqe per GRAPH_SUBMIT and
 * per model step (CTX_PREFILL, CTX_DECODE, CTX_RESUME) answered, after
 * the answer was queued on the connection: @user_data the request_id,
 * @res 0 or the negative errno it failed with, @flags the message type,
 * @aux[0] the djinnd session id, @aux[1] zero.
 */
struct djinn_session_bind {
	__u64 kernel_id;
	__u8 token[DJINN_TOKEN_LEN];
};
static_assert(sizeof(struct djinn_session_bind) == 24, "bind layout");

enum djinn_phase {
	DJINN_PHASE_UNKNOWN = 0,
	DJINN_PHASE_PREFILL = 1,
	DJINN_PHASE_DECODE = 2,
	DJINN_PHASE_VISION = 3,
	DJINN_PHASE_TRAINING = 4,
	DJINN_PHASE_IO_WAIT = 5, /* signals only: waiting on a tool */
	DJINN_PHASE_COMPUTE = 6, /* signals only */
	DJINN_PHASE_IDLE = 7, /* signals only */
};

/*
 * SIGNAL request: what the session is about to do, and for how long; or,
 * with @ctx (a context handle; 0: none, the session), what that context
 * is: an IO_WAIT of its own moves its KV cache alone, and a step on it,
 * or its COMPUTE, ends it. One session can so hold many conversations,
 * each waiting on its own tools. The 16 bytes before @ctx are the
 * request of djinnds and clients older than it.
 */
struct djinn_signal {
	__u32 phase;
	__u32 __reserved;
	__u64 expected_ns;
	__u64 ctx;
};
static_assert(sizeof(struct djinn_signal) == 24, "signal layout");

/**
 * struct djinn_tensor_create - TENSOR_CREATE request
 * @desc:    shape and type; the tensor has desc bytes exactly
 * @segment: enum djinn_segment
 * @flags:   DJINN_TENSOR_MODULE or 0
 * @fp:      for DJINN_SEG_TEXT, the SHA-256 of the bytes: the server
 *           refuses (-EBADMSG) bytes that do not hash to it
 *
 * The payload after the struct is the tensor's first bytes (all of them
 * for text; for data, fewer or none, the rest zero until written).
 * Response: struct djinn_tensor_resp.
 *
 * DJINN_TENSOR_MODULE: the bytes are a CUDA module (PTX text or a
 * cubin/fatbin image) whose kernels graphs may run (DJINN_GOP_KERNEL).
 * Text segment only, dtype u8, one dim (-EINVAL otherwise). The server
 * loads it at upload and refuses a module that does not load (-EINVAL,
 * the JIT's or loader's message); a server whose backend cannot run
 * client kernels (the CPU backend) refuses it with -EOPNOTSUPP. The
 * bytes are deduplicated like any text, by fingerprint; the tensor is a
 * module only under the handle this request returns (a TEXT_LOOKUP of
 * the same bytes gives a plain u8 tensor).
 */
struct djinn_tensor_create {
	struct djinn_tensor_desc desc;
	__u32 segment;
	__u32 flags;
	__u8 fp[DJINN_FP_LEN];
};
static_assert(sizeof(struct djinn_tensor_create) == 112, "create layout");

/**
 * struct djinn_tensor_resp - a tensor the server holds
 * @handle: its handle
 * @desc:   its shape and type
 * @flags:  DJINN_TENSOR_DEDUP when a text upload found the bytes present
 */
struct djinn_tensor_resp {
	__u64 handle;
	struct djinn_tensor_desc desc;
	__u32 flags;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_tensor_resp) == 88, "tensor resp layout");

#define DJINN_TENSOR_DEDUP (1u << 0)

/* djinn_tensor_create.flags */
#define DJINN_TENSOR_MODULE (1u << 0) /* a CUDA module: see above */
#define DJINN_TENSOR_CREATE_ALL DJINN_TENSOR_MODULE

/**
 * struct djinn_tensor_io - TENSOR_WRITE and TENSOR_READ requests
 * @handle: the tensor (a data tensor for WRITE)
 * @offset: first byte
 * @len:    bytes; for WRITE they follow the struct and len must equal
 *          payload_len - sizeof(struct); READ's response payload is the
 *          @len bytes
 */
struct djinn_tensor_io {
	__u64 handle;
	__u64 offset;
	__u64 len;
};
static_assert(sizeof(struct djinn_tensor_io) == 24, "io layout");

/* TENSOR_RELEASE request. */
struct djinn_tensor_release {
	__u64 handle;
};
static_assert(sizeof(struct djinn_tensor_release) == 8, "release layout");

/* TEXT_LOOKUP request: take a reference on text the server has; response
 * struct djinn_tensor_resp, or -ENOENT: then upload with TENSOR_CREATE. */
struct djinn_text_lookup {
	__u8 fp[DJINN_FP_LEN];
	struct djinn_tensor_desc desc; /* the shape to view it as */
};
static_assert(sizeof(struct djinn_text_lookup) == 104, "lookup layout");

/* ---------------------------------------------------------------------- */
/* Graphs */

enum djinn_opcode {
	DJINN_GOP_MATMUL = 1, /* a (..., M, K) x b (..., K, N); batched */
	DJINN_GOP_ADD = 2, /* elementwise, numpy broadcasting */
	DJINN_GOP_SUB = 3,
	DJINN_GOP_MUL = 4,
	DJINN_GOP_DIV = 5,
	DJINN_GOP_SCALE = 6, /* x * alpha */
	DJINN_GOP_GELU = 7, /* tanh approximation, as GPT-2 */
	DJINN_GOP_RELU = 8,
	DJINN_GOP_SILU = 9,
	DJINN_GOP_SOFTMAX = 10, /* over the last dim */
	DJINN_GOP_LAYERNORM = 11, /* x, gamma, beta over the last dim */
	DJINN_GOP_RMSNORM = 12, /* x, gamma over the last dim */
	DJINN_GOP_EMBEDDING = 13, /* table (V, C), ids (...) -> (..., C) */
	DJINN_GOP_RESHAPE = 14,
	DJINN_GOP_PERMUTE = 15,
	DJINN_GOP_SLICE = 16, /* [start, end) along one axis */
	DJINN_GOP_CONCAT = 17, /* along one axis, 2 to 4 inputs */
	/* SDPA, H a multiple of Hkv: q (B,H,T,D), k and v (B,Hkv,S,D); or
	 * token-major, reading a KV cache (struct djinn_p_attention) */
	DJINN_GOP_ATTENTION = 18,
	DJINN_GOP_ARGMAX = 19, /* over the last dim, to i64 */
	/* a client kernel: module, 1 to 3 tensors (struct djinn_p_kernel) */
	DJINN_GOP_KERNEL = 20,
	/* a token per row: logits (..., V), a row of parameters each
	 * (struct djinn_sample_params), to i64 */
	DJINN_GOP_SAMPLE = 21,
	DJINN_GOP_MAX = DJINN_GOP_SAMPLE,
};

enum djinn_residency {
	DJINN_RES_ACTIVATION = 0,
	DJINN_RES_WEIGHT = 1,
	DJINN_RES_KV_CACHE = 2,
	DJINN_RES_OUTPUT = 3,
};

/* Node parameters, by op; unused bytes are zero. */
struct djinn_p_matmul {
	__u32 trans_a; /* 0 or 1: use a's last two dims transposed */
	__u32 trans_b;
};
struct djinn_p_scalar {
	float alpha; /* SCALE */
	float eps; /* LAYERNORM, RMSNORM */
};
struct djinn_p_shape {
	__u32 ndim; /* RESHAPE: new dims, one may be -1; PERMUTE: perm */
	__s32 dims[DJINN_MAX_DIMS];
};
struct djinn_p_axis {
	__s32 axis; /* SLICE, CONCAT; negative counts from the end */
	__u32 __reserved;
	__s64 start, end; /* SLICE: [start, end), negative from the end */
};
/*
 * ATTENTION's layouts. DJINN_ATTN_HEADS: q (B, H, T, D), k (B, Hk, S, D),
 * v (B, Hk, S, Dv) -> (B, H, T, Dv). DJINN_ATTN_TOKENS, as a projection
 * leaves them: q (T, H, D), k (Sn, Hk, D), v (Sn, Hk, Dv) -> (T, H, Dv),
 * and an optional fourth input, a KV cache (P, R, Hk D) whose slots
 * cache_k and cache_v of every row hold the keys and values of the P
 * tokens before k and v (so D == Dv): S = P + Sn keys, read in place.
 */
enum djinn_attn_layout {
	DJINN_ATTN_HEADS = 0,
	DJINN_ATTN_TOKENS = 1,
};
struct djinn_p_attention {
	float scale; /* 0: 1/sqrt(D) */
	__u32 causal; /* 1: position t sees keys 0 .. t + (S - T) */
	__u32 layout; /* enum djinn_attn_layout */
	__u32 cache_k, cache_v; /* with a cache: its key and value slots */
};
/**
 * struct djinn_p_kernel - DJINN_GOP_KERNEL: a kernel of a client module
 * @grid:       blocks, each > 0; grid[0] < 2^31, grid[1], grid[2] <= 65535
 * @block:      threads per block, each > 0, at most 1024 in all,
 *              block[2] <= 64
 * @shmem:      dynamic shared memory, bytes, at most 48 KiB
 * @out_like:   the result has the dtype and shape of inputs[out_like],
 *              1 <= out_like < nr_inputs
 * @out_init:   0: the result starts zeroed; 1: as a copy of that input
 * @__reserved: zero
 * @name_hash:  the kernel: the first 8 bytes of the SHA-256 of its name
 *              (as the module spells it, no NUL), little-endian
 *
 * inputs[0] is the module: a graph input uploaded with
 * DJINN_TENSOR_MODULE; inputs[1 .. nr_inputs - 1] are the kernel's
 * tensor arguments. The kernel is called with, for the result and then
 * each argument in order, its device address and its element count
 * (T *, uint64_t): (result, n, arg1, n1, ...). It must keep within those
 * counts: a client kernel runs with the access of the whole device
 * context (see Documentation/cuda.rst).
 */
struct djinn_p_kernel {
	__u32 grid[3];
	__u32 block[3];
	__u32 shmem;
	__u8 out_like;
	__u8 out_init;
	__u16 __reserved;
	__u64 name_hash;
};
/**
 * struct djinn_sample_params - one row's choices for DJINN_GOP_SAMPLE
 * @temperature: 0: greedy (the first largest logit, no draw); else
 *               finite and > 0
 * @top_p:       in (0, 1]: after top_k, the fewest most likely tokens
 *               whose probabilities reach top_p (1: all)
 * @top_k:       keep the k most likely (0: all); ties by lower id
 * @__reserved:  zero
 * @rng:         a splitmix64 state: with temperature > 0 the row draws
 *               the stream's next output (that of state
 *               @rng + DJINN_SAMPLE_GAMMA), once; the caller advances its
 *               state by DJINN_SAMPLE_GAMMA for each row sampled
 *
 * SAMPLE takes logits x (..., V), float, V < 2^31, and params (..., 24)
 * u8 whose leading dims are x's, each row of 24 bytes one of these
 * (little-endian); its result (...) i64 is each row's token id, or,
 * read with the result instead of failing the graph: -1 - i when logit
 * i is the row's first NaN, DJINN_SAMPLE_BAD_PARAMS when its params
 * are out of range. The draw and the order of ties are those of
 * Documentation/model.rst ("Sampling"), the same on every backend.
 */
struct djinn_sample_params {
	float temperature;
	float top_p;
	__u32 top_k;
	__u32 __reserved;
	__u64 rng;
};
#define DJINN_SAMPLE_GAMMA 0x9e3779b97f4a7c15ull
#define DJINN_SAMPLE_BAD_PARAMS (-0x7fffffffffffffffll - 1)
static_assert(sizeof(struct djinn_sample_params) == 24, "sample layout");
static_assert(sizeof(struct djinn_p_matmul) == 8, "p_matmul layout");
static_assert(sizeof(struct djinn_p_scalar) == 8, "p_scalar layout");
static_assert(sizeof(struct djinn_p_shape) == 36, "p_shape layout");
static_assert(sizeof(struct djinn_p_axis) == 24, "p_axis layout");
static_assert(sizeof(struct djinn_p_attention) == 20, "p_attention layout");
static_assert(sizeof(struct djinn_p_kernel) == 40, "p_kernel layout");

/**
 * struct djinn_node - one op of a graph
 * @op:        enum djinn_opcode
 * @phase:     enum djinn_phase (PREFILL, DECODE, ...): an annotation
 * @residency: enum djinn_residency of the node's result
 * @nr_inputs: how many of @inputs are used
 * @inputs:    values: index i < nr_graph_inputs names graph input i;
 *             nr_graph_inputs + k names node k, which must come before
 * @params:    op parameters (the djinn_p_* structs), zero-padded
 */
struct djinn_node {
	__u16 op;
	__u8 phase;
	__u8 residency;
	__u8 nr_inputs;
	__u8 __reserved[3];
	__u32 inputs[DJINN_MAX_NODE_INPUTS];
	union {
		struct djinn_p_matmul matmul;
		struct djinn_p_scalar scalar;
		struct djinn_p_shape shape;
		struct djinn_p_axis axis;
		struct djinn_p_attention attention;
		struct djinn_p_kernel kernel;
		__u8 raw[40];
	} params;
};
static_assert(sizeof(struct djinn_node) == 64, "node layout");

enum djinn_ref_kind {
	DJINN_REF_HANDLE = 0, /* @id is a tensor handle */
	DJINN_REF_RESULT = 1, /* @id is an earlier GRAPH_SUBMIT's request_id */
};

/**
 * struct djinn_ref - a graph input
 * @id:    a handle, or a request_id (see @kind)
 * @index: for DJINN_REF_RESULT, which output of that graph
 * @kind:  enum djinn_ref_kind
 */
struct djinn_ref {
	__u64 id;
	__u32 index;
	__u16 kind;
	__u16 __reserved;
};
static_assert(sizeof(struct djinn_ref) == 16, "ref layout");

/**
 * struct djinn_graph - GRAPH_SUBMIT request
 * @nr_inputs:  graph inputs: struct djinn_ref[nr_inputs] follows
 * @nr_nodes:   then struct djinn_node[nr_nodes]
 * @nr_outputs: then __u32 outputs[nr_outputs]: node indices whose
 *              results are kept (in the session's data segment) and
 *              returned; padded with zeros to a multiple of 8 bytes
 * @flags:      none yet
 *
 * The payload is exactly that long. Response: struct djinn_graph_resp
 * then struct djinn_tensor_resp[nr_outputs].
 */
struct djinn_graph {
	__u32 nr_inputs;
	__u32 nr_nodes;
	__u32 nr_outputs;
	__u32 flags;
	__u64 __reserved;
};
static_assert(sizeof(struct djinn_graph) == 24, "graph layout");

/**
 * struct djinn_graph_resp - how a graph ran
 * @nr_outputs:  tensors that follow
 * @peak_bytes:  its planned peak device memory (stack + outputs)
 * @run_ns:      time on the device
 */
struct djinn_graph_resp {
	__u32 nr_outputs;
	__u32 __reserved;
	__u64 peak_bytes;
	__u64 run_ns;
};
static_assert(sizeof(struct djinn_graph_resp) == 24, "graph resp layout");

/* ---------------------------------------------------------------------- */
/*
 * DOC: models
 *
 * djinnd runs transformer models from its model directory; the client
 * never holds their weights. MODEL_OPEN loads a model by name (once for
 * the whole server: its weights go into the text segment, shared) and
 * gives the session a model handle. CTX_NEW makes a context on it: a KV
 * cache in the session's data segment that lives between requests.
 * CTX_PREFILL appends tokens and runs them; CTX_DECODE samples and
 * appends tokens one at a time, on the server. The API takes and
 * returns token ids; tokenizing is the client's.
 *
 * Model and context handles are session-scoped, opaque and checked like
 * tensor handles (-ENOENT for a stale, foreign or forged one). A model
 * with contexts cannot be closed (-EBUSY). A session's steps run in
 * order with its graphs.
 *
 * Breakpoints: a step with break_layer = L + 1 pauses after layer L of
 * the model (0 <= L < n_layer; more is -EINVAL) and answers
 * DJINN_CTX_PAUSED with a copy of the hidden state after that layer as
 * a new tensor (T, hidden) of the session, in the weights' dtype, which
 * the client owns and releases. The paused state stays on the device and
 * occupies no executor. CTX_RESUME goes on, with the hidden state as it
 * was (hidden 0) or replaced by a tensor of the same shape and dtype
 * (steering; -EINVAL otherwise, and the context stays paused), and
 * answers as the step it resumes. A decode of n tokens pauses at that
 * layer for every token, each answer carrying the tokens generated so
 * far. While a context is paused, PREFILL, DECODE and FORK of it are
 * -EBUSY; RESET and FREE abandon the step; RESUME of a context that is
 * not paused is -EBUSY. A step that resumes with the hidden state
 * unchanged gives exactly the tokens and logits it gives without the
 * breakpoint.
 */

#define DJINN_MODEL_NAME_MAX 64 /* with its NUL */
#define DJINN_MAX_STEP_TOKENS (1u << 20) /* tokens of one PREFILL/DECODE */

/* config.json's "model_type"; see Documentation/model.rst */
enum djinn_arch {
	DJINN_ARCH_GPT2 = 1,
	DJINN_ARCH_LLAMA = 2,
	DJINN_ARCH_QWEN2 = 3,
	DJINN_ARCH_QWEN3 = 4,
	DJINN_ARCH_MISTRAL = 5,
};

/* MODEL_OPEN request: [A-Za-z0-9._-], 1 to 63 bytes, NUL-padded. */
struct djinn_model_open {
	char name[DJINN_MODEL_NAME_MAX];
};
static_assert(sizeof(struct djinn_model_open) == 64, "model open layout");

/**
 * struct djinn_model_resp - MODEL_OPEN response
 * @model:     its handle in the session
 * @arch:      enum djinn_arch
 * @dtype:     enum djinn_dtype of the weights
 * @vocab:     token ids are 0 .. vocab - 1
 * @n_layer:   layers (breakpoints: 0 .. n_layer - 1)
 * @hidden:    the hidden size
 * @n_head, @n_kv_head: attention heads
 * @max_tokens: the longest context (positions)
 * @bytes:     the weights' size in the text segment: all of them, or a
 *             streamed model's resident part
 * @fp:        their fingerprint (SHA-256)
 * @weights:   every weight's bytes, streamed ones too (@bytes for a
 *             model wholly on the device)
 * @ring:      a streamed model's ring on the device, bytes; else 0
 * @resident:  layers 0 .. resident - 1 are on the device with the
 *             embeddings and the head, the others streamed through the
 *             ring each step; n_layer for a model wholly on the device
 * @__reserved: zero
 *
 * A model whose weights exceed its device budget is streamed: it keeps
 * its embeddings, head and first layers on the device and copies the
 * others in from host memory, through a ring, for each step. The fields
 * from @weights on came with streaming: an older server's answer ends at
 * @fp (80 bytes), and libdjinn takes it as a model wholly on the device.
 */
struct djinn_model_resp {
	__u64 model;
	__u32 arch;
	__u32 dtype;
	__u32 vocab;
	__u32 n_layer;
	__u32 hidden;
	__u32 n_head;
	__u32 n_kv_head;
	__u32 max_tokens;
	__u64 bytes;
	__u8 fp[DJINN_FP_LEN];
	__u64 weights;
	__u64 ring;
	__u32 resident;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_model_resp) == 104, "model resp layout");

/*
 * Uploaded models: MODEL_OPEN_UPLOADED opens a model the client sends
 * instead of one of the model directory: config.json and one or more
 * *.safetensors files, each uploaded as a text tensor (DJINN_DTYPE_U8,
 * one dim, its bytes), found first with TEXT_LOOKUP by its SHA-256 and
 * created with TENSOR_CREATE only when missing. Without flags the files
 * are the checkpoint's *.safetensors in any order, checked each on its
 * own and for no tensor name twice. With DJINN_MODEL_UPLOAD_INDEX,
 * files[0] is model.safetensors.index.json (at most
 * DJINN_MODEL_CONFIG_MAX bytes) and files[1..] are the shards its
 * "weight_map" names, one per distinct shard name, in strcmp() order of
 * those names: the server maps each file to its shard by that order
 * alone and checks the index as it checks one in its model directory
 * (every shard holds exactly the tensors the map gives it). The server
 * parses them as strictly as files of its directory, lays the weights
 * out and puts them into the text segment under their fingerprint,
 * shared with every model that has the same weights. The model is listed
 * as "upload-" followed by 16 hex digits of the sources' fingerprint:
 * SHA-256 over the concatenated SHA-256s of config.json and of each file
 * in the request's order (the index first when there is one), followed,
 * when flags is not 0, by flags as 4 little-endian bytes.
 *
 * Deduplication: a client first sends the request with every handle 0
 * (fingerprints only). If the model is loaded, that is all it sends;
 * -ENOENT means it must send the files (TEXT_LOOKUP, then TENSOR_CREATE
 * for what is missing) and ask again with their handles. It may release
 * the file tensors once the model is open. Response: struct
 * djinn_model_resp, as MODEL_OPEN's.
 */
#define DJINN_MODEL_MAX_FILES 64 /* files of one upload, the index counted */
#define DJINN_MODEL_CONFIG_MAX (1u << 20) /* bytes of config.json, index */

/* djinn_model_upload.flags */
#define DJINN_MODEL_UPLOAD_INDEX (1u << 0) /* files[0] is the index */
#define DJINN_MODEL_UPLOAD_ALL DJINN_MODEL_UPLOAD_INDEX

/**
 * struct djinn_model_file - one file of MODEL_OPEN_UPLOADED
 * @handle: a text tensor (U8, one dim) of the session holding the file,
 *          or 0 to name it by @fp alone
 * @fp:     the SHA-256 of the file's bytes (the text tensor's
 *          fingerprint: a tensor with another is -EINVAL)
 */
struct djinn_model_file {
	__u64 handle;
	__u8 fp[DJINN_FP_LEN];
};
static_assert(sizeof(struct djinn_model_file) == 40, "model file layout");

/**
 * struct djinn_model_upload - MODEL_OPEN_UPLOADED request
 * @nr_files: files, 1 to DJINN_MODEL_MAX_FILES (2 or more with
 *            DJINN_MODEL_UPLOAD_INDEX: the index and a shard at least)
 * @flags:    DJINN_MODEL_UPLOAD_*; another bit is -EINVAL
 * @config:   config.json (at most DJINN_MODEL_CONFIG_MAX bytes)
 * @files:    the safetensors files, @nr_files of them; with
 *            DJINN_MODEL_UPLOAD_INDEX model.safetensors.index.json, then
 *            the shards in strcmp() order of their names in its
 *            weight_map
 *
 * Every handle is 0, or every handle is set. The payload is the struct
 * and the @files, exactly. A file named twice (the same handle, or the
 * same fingerprint when handles are 0; @config included) is -EINVAL; the
 * files and @config holding more than the server's memory.upload_max
 * bytes in all is -E2BIG.
 */
struct djinn_model_upload {
	__u32 nr_files;
	__u32 flags;
	struct djinn_model_file config;
	struct djinn_model_file files[];
};
static_assert(sizeof(struct djinn_model_upload) == 48, "upload layout");

/* MODEL_CLOSE, CTX_FREE, CTX_FORK, CTX_RESET requests: one handle. */
struct djinn_handle_req {
	__u64 handle;
};
static_assert(sizeof(struct djinn_handle_req) == 8, "handle req layout");

/* CTX_TRUNCATE request: keep the first @len tokens of context @ctx (no
 * more than it holds), abandoning a paused step; no logits until its
 * next step. Empty answer. */
struct djinn_ctx_truncate {
	__u64 ctx;
	__u32 len;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_ctx_truncate) == 16, "truncate layout");

/* CTX_NEW request: @max_tokens 0 for the model's longest. */
struct djinn_ctx_new {
	__u64 model;
	__u32 max_tokens;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_ctx_new) == 16, "ctx new layout");

/* CTX_NEW and CTX_FORK response. */
struct djinn_ctx_resp {
	__u64 ctx;
	__u32 len; /* tokens in its cache */
	__u32 max_tokens;
};
static_assert(sizeof(struct djinn_ctx_resp) == 16, "ctx resp layout");

/**
 * struct djinn_sampling - how CTX_DECODE picks tokens
 * @temperature: 0 for greedy (the first largest logit), else > 0
 * @top_k:       keep the k most likely (0: all)
 * @top_p:       then the fewest whose probabilities reach it, (0, 1];
 *               0 means 1 (no cut), so a zeroed struct is greedy
 * @seed:        the random stream: the same seed, context and requests
 *               give the same tokens
 */
struct djinn_sampling {
	float temperature;
	__u32 top_k;
	float top_p;
	__u32 __reserved;
	__u64 seed;
};
static_assert(sizeof(struct djinn_sampling) == 24, "sampling layout");

/* djinn_ctx_step.flags */
#define DJINN_STEP_LOGITS (1u << 0) /* answer with the last logits */
#define DJINN_STEP_ALL DJINN_STEP_LOGITS

/**
 * struct djinn_ctx_step - CTX_PREFILL and CTX_DECODE requests
 * @ctx:         the context
 * @nr_tokens:   PREFILL: the token ids (__s32) that follow, at least 1;
 *               DECODE: tokens to generate, at least 1 (none follow)
 * @flags:       DJINN_STEP_*
 * @break_layer: 0, or L + 1 to pause after layer L
 * @sampling:    DECODE's; zero for PREFILL
 *
 * PREFILL's payload is the struct then __s32 tokens[nr_tokens].
 * Response: struct djinn_ctx_step_resp.
 */
struct djinn_ctx_step {
	__u64 ctx;
	__u32 nr_tokens;
	__u32 flags;
	__u32 break_layer;
	__u32 __reserved;
	struct djinn_sampling sampling;
};
static_assert(sizeof(struct djinn_ctx_step) == 48, "ctx step layout");

/* CTX_RESUME request: @hidden 0 keeps the paused hidden state, else a
 * tensor of its shape and dtype replaces it. */
struct djinn_ctx_resume {
	__u64 ctx;
	__u64 hidden;
};
static_assert(sizeof(struct djinn_ctx_resume) == 16, "ctx resume layout");

enum djinn_ctx_state {
	DJINN_CTX_DONE = 0,
	DJINN_CTX_PAUSED = 1,
};

/**
 * struct djinn_ctx_step_resp - PREFILL, DECODE and RESUME response
 * @state:     enum djinn_ctx_state
 * @nr_tokens: DECODE: the tokens generated by this request so far (they
 *             follow, __s32, padded to 8 bytes); else 0
 * @len:       tokens in the context's cache now
 * @layer:     PAUSED: the layer it paused after
 * @logits:    with DJINN_STEP_LOGITS, when DONE: a tensor (1, vocab) f32
 *             of the session, the logits after the last token; else 0
 * @hidden:    PAUSED: the hidden state, a tensor (T, hidden) of the
 *             session in the weights' dtype; else 0
 * @run_ns:    time on the device for this request
 */
struct djinn_ctx_step_resp {
	__u32 state;
	__u32 nr_tokens;
	__u32 len;
	__u32 layer;
	__u64 logits;
	__u64 hidden;
	__u64 run_ns;
};
static_assert(sizeof(struct djinn_ctx_step_resp) == 40, "step resp layout");

/* ---------------------------------------------------------------------- */
/* Admin socket (root or the djinn group) */

/**
 * struct djinn_admin_session - one entry of ADMIN_SESSIONS' response
 *
 * The response payload is a __u32 count, __u32 zero, then the entries.
 * Times are CLOCK_MONOTONIC ns of the server; bytes are the VMU's
 * accounting (struct vmu_usage).
 */
struct djinn_admin_session {
	__u64 id;
	char tenant[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 phase; /* last SIGNAL */
	__u64 lease_ns;
	__u64 deadline_ns;
	__u64 data_bytes;
	__u64 resident;
	__u64 swapped;
	__u64 text_refs;
	__u64 tensors;
	__u64 requests;
	__u32 uid;
	__s32 pid; /* 0 over TCP */
	__u32 device; /* the device it is on: an index of ADMIN_VMU's */
	__u32 ctx_waiting; /* its contexts in an IO_WAIT of their own */
	/* what the client asked for at SESSION_OPEN; @tenant is who it is */
	char label[DJINN_TENANT_LEN];
};
static_assert(sizeof(struct djinn_admin_session) == 224, "admin session");

/*
 * struct djinn_admin_tenant - one entry of ADMIN_TENANTS' response: a
 * __u32 count, a zero __u32, then the entries, sorted by name. A tenant
 * is listed while it holds a connection, a session or a job, or when
 * djinnd.conf names it with uids, gids, client_kernels or a quota.
 * @conns, @sessions, @inflight: held now (server-wide)
 * @data_bytes, @swapped, @text_refs: its sessions' data, over every
 *     device, and of it in host memory; text references held
 * @text_bytes: the text entries of its scope (its uploads), over every
 *     device: @q_memory counts them with its data
 * @q_*: its quotas, 0 for none: @q_memory data bytes on each device,
 *     @q_swap of them in host memory, @q_guaranteed its guaranteed
 *     share of resident data on each device, @q_lease_max_ns the longest
 *     lease
 *     (djinnd.conf(5), [tenant.NAME])
 */
#define DJINN_TENANT_CONFIGURED (1u << 0) /* named in djinnd.conf */
#define DJINN_TENANT_CLIENT_KERNELS (1u << 1)
struct djinn_admin_tenant {
	char name[DJINN_TENANT_LEN];
	__u32 conns;
	__u32 sessions;
	__u32 inflight;
	__u32 flags; /* DJINN_TENANT_* */
	__u64 data_bytes;
	__u64 swapped;
	__u64 text_refs;
	__u64 text_bytes;
	__u64 q_memory;
	__u64 q_swap;
	__u64 q_guaranteed;
	__u64 q_lease_max_ns;
	__u32 q_sessions;
	__u32 q_conns;
	__u32 q_inflight;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_admin_tenant) == 160, "admin tenant");

/* ADMIN_KILL request: end a session (reason "killed"). */
struct djinn_admin_kill {
	__u64 session_id;
};
static_assert(sizeof(struct djinn_admin_kill) == 8, "admin kill");

/* Per segment, in ADMIN_VMU's response. */
struct djinn_admin_seg {
	__u64 used;
	__u64 peak;
	__u64 entries;
};
static_assert(sizeof(struct djinn_admin_seg) == 24, "admin seg");

/**
 * struct djinn_admin_vmu - ADMIN_VMU response: a device's memory
 *
 * The response is one struct per device, in device index order (the
 * index a session names in djinn_session_open.device, minus one): as
 * many as its length holds. A djinnd with one device answers one.
 */
struct djinn_admin_vmu {
	char device[16];
	__u64 capacity;
	__u64 granularity;
	__u64 committed;
	__u64 reserved;
	__u64 free;
	__u32 pressure; /* 0 normal, 1 warning, 2 critical */
	__u32 __reserved;
	struct djinn_admin_seg seg[3]; /* text, data, stack */
	__u64 text_cached;
	__u64 text_evictions;
	__u64 swap_outs;
	__u64 swap_ins;
	__u64 swapped_out_bytes;
	__u64 swapped_in_bytes;
	__u64 swapped_now;
	__u64 admits;
	__u64 admit_refusals;
	__u64 quota_refusals;
};
static_assert(sizeof(struct djinn_admin_vmu) == 216, "admin vmu");

/* The scheduler's memory policy (sched.policy in djinnd.conf). */
enum djinn_sched_policy {
	DJINN_SCHED_SEMANTIC = 0, /* acts on IO_WAIT: swap early, prefetch */
	DJINN_SCHED_LRU = 1, /* swaps least recently used, when it must */
	DJINN_SCHED_STATIC = 2, /* a context reserves its whole KV cache */
};

/**
 * struct djinn_admin_sched_dev - a device's scheduler, in ADMIN_SCHED
 * @device:          "cpu", "cuda:0"
 * @policy:          enum djinn_sched_policy
 * @busy:            sessions with jobs queued or running
 * @queued, @running: jobs, [0] graphs and model steps (the compute
 *                   queue), [1] memory jobs
 * @admit_waiting:   admissions waiting for memory to come free now
 * @swap_out_bps, @swap_in_bps: the bandwidth measured by the policy's
 *                   swaps (bytes per second; 0: none measured yet)
 * @swaps_signal:    regions swapped out on an IO_WAIT signal
 * @swaps_pressure:  regions swapped out by reclaim (an admission or an
 *                   allocation that needed the memory)
 * @swap_bytes_out, @swap_bytes_in: bytes moved, both causes
 * @prefetches:      restores started ahead of a session's return
 * @prefetch_hits:   sessions swapped during a wait that were resident
 *                   again when their next request came
 * @prefetch_misses: ... that were not (the request waited on a restore)
 * @admit_waits:     admissions that waited for memory
 * @admit_timeouts:  ... and were refused when sched.admit_wait ran out
 * @passes:          model passes run (steps of many contexts of one model
 *                   as one forward), @pass_jobs their steps, @pass_rows
 *                   their rows (tokens)
 * @pass_hist:       passes by steps: [i] counts 2^(i-1) + 1 .. 2^i ([0]:
 *                   one, [7]: 65 and more)
 * @joins:           steps that joined a pass another step led, @join_ns
 *                   their waits from being queued to the pass, in all,
 *                   and @join_p99_ns the 99th percentile (a power of two
 *                   microseconds, its bucket's bound)
 */
struct djinn_admin_sched_dev {
	char device[16];
	__u32 policy;
	__u32 busy;
	__u32 queued[2];
	__u32 running[2];
	__u32 admit_waiting;
	__u32 __reserved;
	__u64 swap_out_bps;
	__u64 swap_in_bps;
	__u64 swaps_signal;
	__u64 swaps_pressure;
	__u64 swap_bytes_out;
	__u64 swap_bytes_in;
	__u64 prefetches;
	__u64 prefetch_hits;
	__u64 prefetch_misses;
	__u64 admit_waits;
	__u64 admit_timeouts;
	__u64 passes;
	__u64 pass_jobs;
	__u64 pass_rows;
	__u64 pass_hist[8];
	__u64 joins;
	__u64 join_ns;
	__u64 join_p99_ns;
};
static_assert(sizeof(struct djinn_admin_sched_dev) == 248, "admin sched dev");

/* struct djinn_admin_sched_session.flags */
#define DJINN_SCHED_SWAPPED_BY_SIGNAL (1u << 0) /* in this wait */
#define DJINN_SCHED_OVERRAN (1u << 1) /* its last wait ran past its estimate */
#define DJINN_SCHED_PREFETCHING (1u << 2) /* a restore is under way */

/**
 * struct djinn_admin_sched_session - a session, in ADMIN_SCHED
 * @phase:          the last SIGNAL's (enum djinn_phase)
 * @flags:          DJINN_SCHED_*
 * @phase_left_ns:  time left of an IO_WAIT's estimate (0: none, or past)
 * @resident, @swapped: its data bytes on the device and in host memory
 * @queued, @inflight: its jobs queued, and queued or running, every kind
 * @weight:         its share of device time: tenant share x (priority+1)
 * @ahead_max:      the most jobs of other sessions that started while one
 *                  of its jobs waited (the fairness bound: at most one per
 *                  other busy session)
 * @deficit_ns:     device time it may still use this round (negative: what
 *                  it owes from a job longer than its quantum)
 * @cost_ns:        device time its jobs took, in all
 * @jobs:           its jobs run
 * @wait_p99_ns:    99th percentile of its jobs' queue wait (upper bucket
 *                  bound of a power-of-two histogram)
 *
 * ADMIN_SCHED's response: a __u32 count of devices, a __u32 count of
 * sessions, the devices in index order, then the sessions.
 */
struct djinn_admin_sched_session {
	__u64 id;
	char tenant[DJINN_TENANT_LEN];
	__u32 device;
	__u32 priority;
	__u32 phase;
	__u32 flags;
	__u64 phase_left_ns;
	__u64 resident;
	__u64 swapped;
	__u32 queued;
	__u32 inflight;
	__u32 weight;
	__u32 ahead_max;
	__s64 deficit_ns;
	__u64 cost_ns;
	__u64 jobs;
	__u64 wait_p99_ns;
};
static_assert(sizeof(struct djinn_admin_sched_session) == 160,
	      "admin sched session");

/**
 * struct djinn_admin_stats - ADMIN_STATS response: the daemon's counters
 * @errors:       requests answered with an error, TEXT_LOOKUP misses not
 *                included
 * @text_lookups: TEXT_LOOKUP requests
 * @text_misses:  TEXT_LOOKUPs answered -ENOENT (no such text: the normal
 *                first step of an upload, so not counted in @errors)
 */
struct djinn_admin_stats {
	__u64 uptime_ns;
	__u64 conns;
	__u64 conns_accepted;
	__u64 sessions;
	__u64 sessions_opened;
	__u64 sessions_closed;
	__u64 sessions_expired;
	__u64 sessions_killed;
	__u64 requests;
	__u64 errors;
	__u64 bytes_in;
	__u64 bytes_out;
	__u64 graphs_run;
	__u64 graphs_failed;
	__u64 queue_depth;
	__u64 text_lookups;
	__u64 text_misses;
};
static_assert(sizeof(struct djinn_admin_stats) == 136, "admin stats");

/**
 * struct djinn_admin_model - one entry of ADMIN_MODELS' response
 * @name:     the model's name, NUL-padded
 * @arch:     enum djinn_arch
 * @dtype:    enum djinn_dtype of the weights
 * @bytes:    its text entry: every weight, or a streamed model's
 *            resident part (embeddings, head, layers 0 .. resident - 1)
 * @holders:  sessions holding it
 * @device:   the device that holds this copy
 * @fp:       the weights' fingerprint (SHA-256)
 * @weights:  every weight's bytes, streamed ones too
 * @layers:   its layers
 * @resident: layers on the device; @layers for a model wholly there
 * @ring:     a streamed model's ring on the device, bytes; else 0
 * @budget:   the device bytes it was placed under (text entry and ring);
 *            0 when it had none and fit
 * @passes:   a streamed model's passes (one stream of its layers through
 *            the ring, for every context waiting); else 0
 * @jobs:     the steps those passes ran
 *
 * The response payload is a __u32 count, __u32 zero, then the entries,
 * sorted by name, then device: every model loaded, held or not, once per
 * device that has loaded it (each device loads its own copy).
 */
struct djinn_admin_model {
	char name[DJINN_MODEL_NAME_MAX];
	__u32 arch;
	__u32 dtype;
	__u64 bytes;
	__u32 holders;
	__u32 device;
	__u8 fp[DJINN_FP_LEN];
	__u64 weights;
	__u32 layers;
	__u32 resident;
	__u64 ring;
	__u64 budget;
	__u64 passes;
	__u64 jobs;
};
static_assert(sizeof(struct djinn_admin_model) == 168, "admin model");

/* ADMIN_MODEL_EVICT request: drop an unheld model from every device that
 * has it loaded (-EBUSY if held on every one that has it). */
struct djinn_admin_model_evict {
	char name[DJINN_MODEL_NAME_MAX];
};
static_assert(sizeof(struct djinn_admin_model_evict) == 64, "model evict");

/* A streamed model's ring holds at most this many layers. */
#define DJINN_RING_SLOTS_MAX 8

/* struct djinn_admin_model_load's @flags */
#define DJINN_LOAD_BUDGET (1u << 0)

/**
 * struct djinn_admin_model_load - ADMIN_MODEL_LOAD request
 * @name:   a served model (a directory under djinnd's model directory)
 * @budget: with DJINN_LOAD_BUDGET, the device bytes its weights may take
 *          on each device, text entry and ring (0: none), as
 *          [model.NAME] budget in djinnd.conf, which sets it again on
 *          the next reload (SIGHUP) if it names the model
 * @slots:  with DJINN_LOAD_BUDGET and a budget, its ring's layers, 1 ..
 *          DJINN_RING_SLOTS_MAX (0: 2)
 * @flags:  DJINN_LOAD_BUDGET, or 0: load under the budget it has
 *
 * Loads the model on every device that serves models, through a session
 * of tenant "admin" that closes when the load is done: the weights stay
 * in the text segment, held by no one (listed with 0 holders), until
 * they are evicted or reclaimed, and the next MODEL_OPEN finds them
 * there. A new budget first applies to every device: a copy loaded
 * under another budget and held by no session is evicted and loaded
 * again; one that sessions hold refuses the request with -EBUSY, and
 * nothing changes. A load that fails (-ENOMEM: the budget is below the
 * model's least, or there is no room) puts the budget back as it was.
 * The response is ADMIN_MODELS' for this model alone: a __u32 count, a
 * __u32 zero, an entry per device.
 */
struct djinn_admin_model_load {
	char name[DJINN_MODEL_NAME_MAX];
	__u64 budget;
	__u32 slots;
	__u32 flags;
};
static_assert(sizeof(struct djinn_admin_model_load) == 80, "model load");

/**
 * struct djinn_admin_restart - ADMIN_RESTART response
 * @pid: the djinnd started to take over
 *
 * A planned restart, as SIGUSR2 does (djinnd(8)): the request has no
 * payload. djinnd starts its own binary again, by the path it was
 * started from (a binary upgrade: the new file at that path), with its
 * command line; the new djinnd takes the sessions, tensors, models,
 * contexts and connections over --handover's socket
 * (Documentation/admin-guide.rst, "Upgrades and restarts"), and this
 * one exits once it serves. This answer comes first, on a connection
 * that the new djinnd then serves. -EOPNOTSUPP for a djinnd started
 * without --handover (under systemd: systemctl restart keeps the
 * state), -EBUSY while a restart or a drain is under way.
 */
struct djinn_admin_restart {
	__u32 pid;
	__u32 __reserved;
};
static_assert(sizeof(struct djinn_admin_restart) == 8, "admin restart");

/**
 * struct djinn_admin_fault - ADMIN_FAULT_INJECT response
 * @faults: the device's faults so far, this one included
 * @device: "cpu", "cuda:0"
 * @what:   the fault, in words
 *
 * For tests. The request has no payload (device 0), or a struct
 * djinn_admin_fault_req naming the device. A daemon started without
 * --fault-injection refuses it with -EPERM. Otherwise the device faults:
 * on a GPU for real (a kernel stores to address 0, and the context is
 * recovered as after any fault), on the CPU simulated (its memory
 * zeroed, the fault counted). Every session made before it is then lost
 * (see -EIO in DOC: errors), its text is not deduplicated against, and
 * models loaded before it load again on their next open.
 *
 * With DJINN_FAULT_DEAD the device is then dead, as after an error no
 * context reset clears (CUDA_ERROR_CONTAINED): the answer comes, and
 * djinnd stops reading requests, ends its sessions, closes every
 * connection and exits with status 74 so that systemd restarts it
 * (djinnd(8), EXIT STATUS).
 *
 * DJINN_FAULT_IDENT_HOLD and DJINN_FAULT_IDENT_GO fault nothing: the
 * lookups of new loopback TCP connections' owners (sock_diag, on
 * djinnd's identity thread) wait from the first until the second, so
 * that a test can see the I/O thread go on meanwhile. @faults and
 * @device are answered as they are.
 */
/**
 * struct djinn_admin_fault_req - ADMIN_FAULT_INJECT's optional request
 * @device: an index of ADMIN_VMU's answer (one it does not have is
 *          -ENODEV)
 * @flags:  DJINN_FAULT_*; another bit is -EINVAL (this field was
 *          __reserved, zero, before DJINN_FAULT_DEAD)
 */
struct djinn_admin_fault_req {
	__u32 device;
	__u32 flags;
};
static_assert(sizeof(struct djinn_admin_fault_req) == 8, "fault req");

/* djinn_admin_fault_req.flags */
#define DJINN_FAULT_DEAD (1u << 0) /* the device dies: djinnd exits */
#define DJINN_FAULT_IDENT_HOLD (1u << 1) /* no fault: identities wait */
#define DJINN_FAULT_IDENT_GO (1u << 2) /* no fault: identities go on */

struct djinn_admin_fault {
	__u64 faults;
	char device[32];
	char what[216];
};
static_assert(sizeof(struct djinn_admin_fault) == 256, "admin fault");

/**
 * struct djinn_status - STATUS response: what a client choosing among
 * several djinnd (libdjinn's dns: and srv: addresses) asks each
 * @size:        sizeof(struct djinn_status) as this server sends it
 * @flags:       DJINN_STATUS_READY: it takes new sessions (not draining,
 *               restarting, or with a dead device); DJINN_STATUS_MODELS:
 *               it serves models (server.model_dir)
 * @capacity:    session memory of its devices, bytes, summed
 * @free:        of it, neither held nor set aside now
 * @tenant_free: what the asking tenant may still take on the device
 *               with the most room: that device's free bytes, less than
 *               its [tenant] memory quota leaves where it has one
 * @pressure:    the worst device's: 0 normal, 1 past
 *               memory.pressure_warning, 2 past pressure_critical
 * @nr_dev:      its devices
 * @sessions, @max_sessions: sessions open, and server.max_sessions
 * @queued:      graphs and model steps queued or running, all devices
 * @nr_models:   struct djinn_status_model entries after the struct
 * @pressure_room: what the device with the most of it may still take
 *               before memory.pressure_warning (0: every one is past it)
 * @data_bytes:  session data (KV caches, tensors) held, all devices: with
 *               @sessions, what a session holds on average here
 *
 * The request has no payload; a connection whose tenant is known may
 * send it (HELLO stays as it was, for anyone). The entries name the
 * models the server serves that are loaded now, once each, by name
 * (every tenant may open them); uploaded models, which are their
 * tenant's, are never listed.
 */
struct djinn_status {
	__u32 size;
	__u32 flags;
	__u64 capacity;
	__u64 free;
	__u64 tenant_free;
	__u32 pressure;
	__u32 nr_dev;
	__u32 sessions;
	__u32 max_sessions;
	__u32 queued;
	__u32 nr_models;
	__u64 pressure_room;
	__u64 data_bytes;
};
static_assert(sizeof(struct djinn_status) == 72, "status layout");

#define DJINN_STATUS_READY (1u << 0)
#define DJINN_STATUS_MODELS (1u << 1)
/* At most this many models follow a STATUS answer (by name). */
#define DJINN_STATUS_MODELS_MAX 1024

/**
 * struct djinn_status_model - a loaded model in STATUS's answer
 * @name:    its name, NUL-padded
 * @bytes:   its weights on the device (a streamed model's resident part)
 * @holders: sessions holding it, all devices
 * @flags:   DJINN_STATUS_STREAMED: some layers are streamed each step
 */
struct djinn_status_model {
	char name[DJINN_MODEL_NAME_MAX];
	__u64 bytes;
	__u32 holders;
	__u32 flags;
};
static_assert(sizeof(struct djinn_status_model) == 80, "status model");

#define DJINN_STATUS_STREAMED (1u << 0)

/* A minted token's text: 64 hex digits (32 random bytes), no NUL. */
#define DJINN_MINTED_TOKEN_LEN 64

/**
 * struct djinn_admin_token_mint - ADMIN_TOKEN_MINT request
 * @tenant: the tenant the token names: printable bytes without spaces,
 *          NUL-terminated, not a name djinnd gives itself (uid:N,
 *          tcp:ADDR, unknown)
 * @ttl_ns: how long it is valid (at most a year); 0: until revoked
 *
 * djinnd draws a token, keeps its SHA-256 (beside the admin socket, in
 * "minted-tokens", so the next djinnd knows it too) and answers its
 * text once (struct djinn_admin_token_minted). A client sends it in
 * AUTH on a tls: listener or on server.token_auth's socket, as a line of
 * tls.tokens. -EINVAL for a bad name or ttl, -EDQUOT past 65536 tokens.
 */
struct djinn_admin_token_mint {
	char tenant[DJINN_TENANT_LEN];
	__u64 ttl_ns;
};
static_assert(sizeof(struct djinn_admin_token_mint) == 72, "token mint");

/**
 * struct djinn_admin_token_minted - ADMIN_TOKEN_MINT response
 * @id:         its number, for ADMIN_TOKEN_REVOKE: random, 1 to 2^48 - 1,
 *              so that an id kept from before a reboot (which loses
 *              the tokens) names a newer token by a 2^-48 chance at most
 * @expires_ns: when it ends, CLOCK_REALTIME ns; 0: never
 * @token:      its text (no NUL)
 */
struct djinn_admin_token_minted {
	__u64 id;
	__u64 expires_ns;
	char token[DJINN_MINTED_TOKEN_LEN];
};
static_assert(sizeof(struct djinn_admin_token_minted) == 80, "token minted");

/* ADMIN_TOKEN_REVOKE request: forget minted token @id (-ENOENT for none).
 * Connections it named stay; new AUTHs with it are refused. */
struct djinn_admin_token_revoke {
	__u64 id;
};
static_assert(sizeof(struct djinn_admin_token_revoke) == 8, "token revoke");

/**
 * struct djinn_admin_token - one entry of ADMIN_TOKENS' response (a __u32
 * count, __u32 zero, then the entries): a minted token, never its text
 * @id, @created_ns, @expires_ns: its number, when it was minted and when
 *            it ends (CLOCK_REALTIME ns; 0: never)
 * @tenant:   the tenant it names
 */
struct djinn_admin_token {
	__u64 id;
	__u64 created_ns;
	__u64 expires_ns;
	char tenant[DJINN_TENANT_LEN];
};
static_assert(sizeof(struct djinn_admin_token) == 88, "admin token");

/**
 * struct djinn_admin_health - ADMIN_HEALTH response: whether djinnd takes
 * new work, for a readiness probe or a device plugin
 * @ready:        1, or 0 with @reason saying why
 * @nr_dev:       its devices
 * @sessions:     sessions open
 * @max_sessions: server.max_sessions
 * @reason:       NUL-terminated; empty when ready
 */
struct djinn_admin_health {
	__u32 ready;
	__u32 nr_dev;
	__u32 sessions;
	__u32 max_sessions;
	char reason[240];
};
static_assert(sizeof(struct djinn_admin_health) == 256, "admin health");

#endif /* DJINN_PROTO_H */
