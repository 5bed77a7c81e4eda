/* SPDX-License-Identifier: MIT */
/*
 * libdjinn: the client library of Djinn.
 *
 * A program connects to djinnd, opens a leased session, puts tensors on
 * the daemon's device, builds graphs of ops over them, submits the graphs
 * asynchronously and reads their results lazily: a byte range on request,
 * or page by page through a mapping. The wire protocol underneath is
 * include/djinn/proto.h, whose types (struct djinn_tensor_desc, enum
 * djinn_dtype, enum djinn_opcode, enum djinn_phase, ...) this API uses.
 *
 * Conventions, for every function here:
 *
 *  - int functions return 0 (or a documented non-negative value) on
 *    success and a negative errno on failure; errno is never set.
 *  - Functions that return a pointer say what it is valid for; none of
 *    them fails with an error code.
 *  - Every object belongs to a connection, and every function may be
 *    called from any thread: a connection serialises what needs it. The
 *    exception is a graph builder, which one thread at a time builds.
 *  - A connection to a daemon that died fails every waiting and every
 *    later call promptly with -ECONNRESET (or -EPROTO when the daemon
 *    broke the protocol, -ESHUTDOWN after djinn_disconnect() began);
 *    nothing waits forever on a dead daemon.
 *
 * The comment on each declaration says who owns what.
 */
#ifndef DJINN_DJINN_H
#define DJINN_DJINN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

#ifdef __cplusplus
extern "C" {
#endif

struct djinn_conn;
struct djinn_session;
struct djinn_tensor;
struct djinn_graph_builder;
struct djinn_request;
struct djinn_result;

/* ---------------------------------------------------------------------- */
/* Logging */

enum djinn_log_level {
	DJINN_LOG_ERROR = 0,
	DJINN_LOG_WARN = 1,
	DJINN_LOG_INFO = 2,
	DJINN_LOG_DEBUG = 3,
};

/* A log hook: @msg is one line without a newline, valid during the call. */
typedef void (*djinn_log_fn)(void *arg, int level, const char *msg);

/*
 * Send libdjinn's messages (the daemon's error messages, a protocol
 * version mismatch naming both versions, the userfaultfd fallback) to @fn
 * with @arg, for the whole process. NULL restores the default, which
 * prints to stderr when $DJINN_DEBUG is set and is silent otherwise.
 * @fn may be called from any thread, including libdjinn's own, and with
 * libdjinn's locks held: it must not call libdjinn.
 */
void djinn_set_log(djinn_log_fn fn, void *arg);

/* ---------------------------------------------------------------------- */
/* Connections */

/*
 * Connect to djinnd at @addr, "unix:/path/to/socket" ("unix:@name" for
 * the abstract namespace) or "tcp:host:port" ("tcp:[::1]:port"); NULL
 * means $DJINN_ADDR, else where djinnd listens by default: the socket
 * djinnd.sock in /run/djinn for root, in $XDG_RUNTIME_DIR/djinn for a
 * user who has one, else in ./run; a user other than root with no socket
 * there takes the system service's, /run/djinn/djinnd.sock, when it
 * exists. djinn_last_error() names the address tried. Sends HELLO and checks
 * the daemon's protocol version: -EPROTONOSUPPORT if it differs (both
 * versions go to the log). -EINVAL for a malformed address, the errno of
 * connect(2) (-ENOENT, -ECONNREFUSED, ...) when nobody listens there.
 * On success *@out is a connection the caller owns and frees with
 * djinn_disconnect().
 *
 * When djinnd drops the connection (a restart that cannot keep it: a
 * crash, a stop, a TLS connection in user mode) libdjinn dials the same
 * address again, sends HELLO (and AUTH) and attaches every session of
 * the connection by its token, for up to $DJINN_RECONNECT_MS (default
 * 60000; 0: never). Reads, writes, heartbeats, signals and releases
 * that were waiting for an answer are sent again on the new connection
 * (running one twice does what once does), and so is any call djinnd
 * said it had not run (GOAWAY, at a planned restart); other calls that
 * were waiting, and submitted graphs, fail with -ECONNABORTED: djinnd
 * may not have run them, and the caller may send them again. Later
 * calls wait for the new connection. A session
 * djinnd no longer has (or one on /dev/djinn) fails every call with
 * -ENOENT. When the time is up every call fails with -ENOTCONN, and
 * djinn_last_error() says what the last try met; a refusal a new try
 * would meet again (a certificate refused, another protocol version)
 * ends the tries at once, with its own error.
 */
int djinn_connect(const char *addr, struct djinn_conn **out);

/*
 * struct djinn_connect_opts - how to reach a djinnd over TLS
 * @size:     sizeof(struct djinn_connect_opts): fields past it are unset
 * @tls_ca:   the CA certificates (PEM) djinnd's certificate is verified
 *            against; NULL: $DJINN_TLS_CA, else the system's
 * @tls_cert: this client's certificate chain (PEM), whose subject CN (or
 *            SAN: the server's tls.tenant_from) names its tenant; NULL:
 *            $DJINN_TLS_CERT, else none
 * @tls_key:  its private key (PEM); NULL: $DJINN_TLS_KEY
 * @token:    a bearer token, sent in AUTH after HELLO when there is no
 *            certificate; NULL: $DJINN_TOKEN, else none
 * @reconnect_ms: how long libdjinn tries to reconnect after djinnd drops
 *            the connection (djinn_connect() says how); 0:
 *            $DJINN_RECONNECT_MS, else 60000; negative: never
 * @model:    for a dns: or srv: address, the model the connection's
 *            sessions will open: a djinnd that has it loaded is chosen
 *            first; NULL: $DJINN_MODEL, else none
 *
 * Without a certificate, a token (@token, $DJINN_TOKEN, else the first
 * line of the file $DJINN_TOKEN_FILE) goes in AUTH over TLS, and on a
 * unix socket that says it takes one (djinnd's server.token_auth
 * socket, HELLO's DJINN_FEAT_TOKEN_AUTH) when the kernel says its server
 * is root or this user (else -EACCES); other unix sockets name their
 * peers by uid, and never see the token.
 */
struct djinn_connect_opts {
	size_t size;
	const char *tls_ca, *tls_cert, *tls_key;
	const char *token;
	long reconnect_ms;
	const char *model;
};

/*
 * djinn_connect() with @o (NULL: the environment alone). Two more forms
 * of address name several djinnd, of which one is chosen:
 * "dns:NAME:PORT" (every A and AAAA record of NAME, such as a headless
 * Service of Kubernetes) and "srv:NAME" (its SRV records, the lowest
 * priority first, each target's addresses). Each djinnd is connected to
 * at once, for up to $DJINN_PROBE_MS (default 3000) in all, and asked
 * for its state (djinn_status()); the connection kept is the best one's:
 * ready; with room for the tenant (memory, sessions); the lowest SRV
 * priority; left below its pressure threshold by a session of the size
 * sessions have there on average, where another would be; with @o's
 * model loaded; then with the most memory free for this tenant, then with
 * the fewest requests queued. The others are closed. It is a connection to
 * that djinnd alone: its sessions stay there for life, and a
 * reconnection dials the same address again (djinn_conn_addr() says
 * which); a djinnd that died costs only new connections a try. Their
 * transport is TLS when a CA, certificate or key is given (@o or
 * $DJINN_TLS_CA, $DJINN_TLS_CERT), checking djinnd's certificate
 * against NAME (the SRV target's for srv:, which the DNS answer names:
 * without DNSSEC, any djinnd of the CA may answer for it), else plain
 * TCP. -EHOSTUNREACH when the name gives no address or none answers
 * (djinn_last_error() says what each met). Name resolution is not
 * within $DJINN_PROBE_MS: the resolver's own timeouts bound it. For
 * "tls:host:port" (TLS 1.3; "tls:[::1]:port"): djinnd's certificate must
 * be valid for host. Kernel TLS carries the records where the kernel
 * has the tls module, OpenSSL otherwise (djinn_conn_transport() says
 * which). Beyond djinn_connect()'s errors: -EACCES when a certificate
 * was refused, by either side, or djinnd took no token (the reason in
 * djinn_last_error()); -EPROTO for a peer that does not speak TLS 1.3;
 * -EINVAL for an unreadable certificate, key or CA file.
 */
int djinn_connect_opts(const char *addr, const struct djinn_connect_opts *o,
		       struct djinn_conn **out);

/* The address @conn dials ("tcp:10.0.0.7:7411"): djinn_connect()'s, or
 * for a dns: or srv: address the djinnd chosen. @conn's string. */
const char *djinn_conn_addr(const struct djinn_conn *conn);

/*
 * struct djinn_status_info - what djinn_status() says of a djinnd
 * @ready:        it takes new sessions (not draining, restarting, or with
 *                a dead device)
 * @serves_models: it has a model directory
 * @capacity, @free: its devices' session memory and what of it is free
 * @tenant_free:  what this tenant may still take on its roomiest device
 *                (free bytes, less where its memory quota ends first)
 * @pressure:     0 normal, 1 past its warning threshold, 2 critical
 * @nr_dev, @sessions, @max_sessions, @queued: devices, sessions open and
 *                at most, graphs and model steps queued or running
 * @nr_models:    entries of @models: the served models loaded now
 * @pressure_room: what its roomiest device may still take before its
 *                pressure warning threshold (0: past it everywhere)
 * @data_bytes:   session data held (KV caches, tensors), all devices
 */
struct djinn_status_info {
	bool ready, serves_models;
	uint64_t capacity, free, tenant_free;
	unsigned int pressure, nr_dev, sessions, max_sessions, queued;
	unsigned int nr_models;
	uint64_t pressure_room, data_bytes;
	struct djinn_status_model_info {
		char name[DJINN_MODEL_NAME_MAX];
		uint64_t bytes;
		unsigned int holders;
		bool streamed;
	} models[];
};

/*
 * Ask @conn's djinnd (STATUS) for its state: 0 with *@out malloc()ed (the
 * caller frees it), or -errno: -EACCES before a tenant is known (AUTH).
 */
int djinn_status(struct djinn_conn *conn, struct djinn_status_info **out);

/* How @conn reaches djinnd: "unix", "tcp", "tls, kernel" (the kernel
 * seals the records) or "tls, user" (OpenSSL does). */
const char *djinn_conn_transport(const struct djinn_conn *conn);

/* How many times libdjinn connected @conn again after djinnd dropped
 * it (a restart), each time attaching its sessions. */
uint64_t djinn_conn_reconnects(const struct djinn_conn *conn);

/*
 * Close @conn and free it with every object of it: sessions, tensors,
 * graph builders, requests and result mappings. Sessions are not closed
 * on the daemon: they live until their leases run out, so a program may
 * reconnect and djinn_session_attach() to them. NULL is ignored. No other
 * thread may be using @conn or its objects.
 */
void djinn_disconnect(struct djinn_conn *conn);

/*
 * struct djinn_server_info - what djinnd said in its HELLO
 * @version:     its protocol version (DJINN_PROTO_VERSION)
 * @features:    DJINN_FEAT_* bits
 * @max_payload: the largest frame payload it accepts
 * @capacity:    device memory of its first device, bytes
 * @granularity: its allocation granule
 * @backend:     "cpu", "cuda", NUL-terminated
 */
struct djinn_server_info {
	uint32_t version;
	uint32_t features;
	uint64_t max_payload;
	uint64_t capacity;
	uint64_t granularity;
	char backend[17];
};

/* Copy the daemon's HELLO answer into the caller's @info. */
int djinn_conn_server_info(struct djinn_conn *conn,
			   struct djinn_server_info *info);

/* One round trip with djinnd (a HEARTBEAT naming no session). */
int djinn_conn_ping(struct djinn_conn *conn);

/*
 * struct djinn_conn_stats - what moved over a connection so far
 * @bytes_sent:     frame bytes written, headers included
 * @bytes_received: frame bytes read, headers included
 * @requests:       request frames sent
 * @responses:      response frames received
 * @map_faults:     first touches of mapped results served
 * @map_bytes:      result bytes fetched to serve them
 */
struct djinn_conn_stats {
	uint64_t bytes_sent;
	uint64_t bytes_received;
	uint64_t requests;
	uint64_t responses;
	uint64_t map_faults;
	uint64_t map_bytes;
};

/* Copy @conn's counters into the caller's @stats. */
int djinn_conn_stats(struct djinn_conn *conn, struct djinn_conn_stats *stats);

/* ---------------------------------------------------------------------- */
/* Sessions */

/*
 * struct djinn_session_opts - how to open a session
 * @tenant:   the session's label, 1 to 63 bytes; NULL: $USER, else
 *            "default". djinnd decides the tenant itself, from who the
 *            kernel says the client is (Documentation/security.rst).
 * @priority: 0 (lowest) to 7
 * @lease_ns: the lease period to ask for; 0: the daemon's default
 *
 * A zeroed struct asks for the lowest priority: start from
 * DJINN_SESSION_OPTS_INIT, or pass NULL for all the defaults.
 */
struct djinn_session_opts {
	const char *tenant;
	unsigned int priority;
	uint64_t lease_ns;
};

#define DJINN_PRIORITY_DEFAULT 4
#define DJINN_SESSION_OPTS_INIT                                     \
	{                                                           \
		.tenant = NULL, .priority = DJINN_PRIORITY_DEFAULT, \
		.lease_ns = 0                                       \
	}

/*
 * Open a session on @conn with @opts (NULL: the defaults; read during the
 * call only). libdjinn renews its lease from then on: a thread of @conn
 * sends it a HEARTBEAT every third of a lease.
 * *@out belongs to @conn; djinn_session_close() ends it.
 */
int djinn_session_open(struct djinn_conn *conn,
		       const struct djinn_session_opts *opts,
		       struct djinn_session **out);

/*
 * The same on device @device of a djinnd that drives several (its index,
 * as `djinnctl vmu` lists them), or -1 to let djinnd choose: the device
 * with the most free memory. djinn_session_open() is this with
 * $DJINN_DEVICE (a decimal index; unset: -1; anything else: -EINVAL).
 * -ENODEV (djinn_last_error() says how many there are) for a device
 * djinnd does not have. A session asking for a device is opened over
 * the socket, never on /dev/djinn.
 */
int djinn_session_open_on(struct djinn_conn *conn,
			  const struct djinn_session_opts *opts, int device,
			  struct djinn_session **out);

/*
 * A session of tenant @tenant, opened for it by a front-end (djinn serve
 * for its API keys): the program's user must be one of the tenant's
 * delegates (djinnd.conf(5), [tenant.NAME] delegates) and @conn a unix
 * socket, else -EPERM (djinn_last_error() names both). The session is
 * the tenant's in every way: its quotas, shares and isolation. @opts'
 * tenant (the label) is @tenant; $DJINN_DEVICE places it as for
 * djinn_session_open(). Never on /dev/djinn. Came with DJINN_0.3.
 */
int djinn_session_open_as(struct djinn_conn *conn, const char *tenant,
			  const struct djinn_session_opts *opts,
			  struct djinn_session **out);

/*
 * Use on @conn the session @id opened elsewhere (another connection, or
 * this program before it reconnected), proving it with its @token
 * (DJINN_TOKEN_LEN bytes, read during the call). -EPERM for a
 * wrong token, -ENOENT for no such session. *@out belongs to @conn and is
 * renewed like an opened one.
 */
int djinn_session_attach(struct djinn_conn *conn, uint64_t id,
			 const uint8_t *token, struct djinn_session **out);

/*
 * End session @s on the daemon, which frees everything it held, and free
 * @s with every tensor, graph builder, request and result mapping of it.
 * Returns the daemon's answer (-ENOENT if the lease had already run out),
 * but @s is freed in every case.
 */
int djinn_session_close(struct djinn_session *s);

/*
 * struct djinn_session_info - a session as the daemon last described it
 * @id:          its id
 * @token:       its secret, for djinn_session_attach()
 * @lease_ns:    the lease period the daemon chose
 * @deadline_ns: CLOCK_MONOTONIC time on the daemon's host the lease ends
 * @tenant:      the label it was opened with (empty if attached)
 */
struct djinn_session_info {
	uint64_t id;
	uint8_t token[DJINN_TOKEN_LEN];
	uint64_t lease_ns;
	uint64_t deadline_ns;
	char tenant[DJINN_TENANT_LEN];
};

/* Copy what is known of @s into the caller's @info. */
int djinn_session_info(struct djinn_session *s,
		       struct djinn_session_info *info);

/* Renew @s's lease now (libdjinn does it anyway); waits for the answer. */
int djinn_session_heartbeat(struct djinn_session *s);

/*
 * Tell the scheduler that @s is about to be in @phase (enum djinn_phase,
 * e.g. DJINN_PHASE_IO_WAIT while an agent waits on a tool) for about
 * @expected_ns (0: unknown). Waits for the daemon's answer.
 */
int djinn_signal(struct djinn_session *s, unsigned int phase,
		 uint64_t expected_ns);

/*
 * An agent's tool call, for the scheduler: begin() says the session waits
 * on a tool for about @expected_ns (> 0; SIGNAL IO_WAIT), so that djinnd
 * may move its KV caches to host memory for the wait and bring them back
 * by its end; end() says it is back (SIGNAL COMPUTE). Requests made
 * meanwhile are served all the same (their data is restored at once).
 * 0 or a negative errno; both wait for the daemon's answer.
 */
int djinn_tool_call_begin(struct djinn_session *s, uint64_t expected_ns);
int djinn_tool_call_end(struct djinn_session *s);

/* ---------------------------------------------------------------------- */
/* Tensors */

/*
 * Put a tensor of shape @desc on the daemon, in segment @seg, with the
 * desc's bytes from @data (read during the call only).
 *
 * DJINN_SEG_TEXT: shared, read-only and deduplicated. libdjinn sends the
 * SHA-256 of the bytes first (TEXT_LOOKUP) and the bytes only when the
 * daemon lacks them, so a second program uploading the same weights
 * sends 32 bytes. @data is required.
 *
 * DJINN_SEG_DATA: private to the session. @data may be NULL for a tensor
 * of zeros. Uploads larger than the daemon's frame limit are split.
 *
 * -EINVAL for a bad desc or segment. *@out belongs to @s; release it with
 * djinn_tensor_release() (or it goes with the session).
 */
int djinn_tensor_upload(struct djinn_session *s,
			const struct djinn_tensor_desc *desc, const void *data,
			enum djinn_segment seg, struct djinn_tensor **out);

/* Copy @len bytes at @offset of @t into the caller's @buf. -EINVAL for a
 * range past the tensor's end. */
int djinn_tensor_download(struct djinn_tensor *t, uint64_t offset, uint64_t len,
			  void *buf);

/* Overwrite @len bytes at @offset of data tensor @t from @buf (read
 * during the call). -EINVAL for a range past the tensor's end. */
int djinn_tensor_write(struct djinn_tensor *t, uint64_t offset, uint64_t len,
		       const void *buf);

/* Drop @t on the daemon and free @t, whatever the daemon answers (which
 * is returned). NULL is ignored. */
int djinn_tensor_release(struct djinn_tensor *t);

/* @t's shape and type: a pointer into @t, valid until @t is released. */
const struct djinn_tensor_desc *djinn_tensor_desc(const struct djinn_tensor *t);

/*
 * struct djinn_tensor_info - a tensor as the daemon holds it
 * @handle:  its handle on the wire
 * @bytes:   its size
 * @segment: enum djinn_segment
 * @flags:   DJINN_TENSOR_DEDUP: a text upload found the bytes present
 * @fp:      its SHA-256 (text only)
 */
struct djinn_tensor_info {
	uint64_t handle;
	uint64_t bytes;
	uint32_t segment;
	uint32_t flags;
	uint8_t fp[DJINN_FP_LEN];
};

/* Copy what is known of @t into the caller's @info. */
int djinn_tensor_info(const struct djinn_tensor *t,
		      struct djinn_tensor_info *info);

/*
 * Upload the CUDA module @image (@len bytes, read during the call: PTX
 * text or a cubin/fatbin image) to @s's text segment as a client module,
 * whose kernels graphs run with djinn_op_kernel(). The daemon loads it
 * now: -EINVAL with the loader's reason (djinn_last_error()) if it does
 * not load; -EOPNOTSUPP from a daemon without client kernels (one on
 * the CPU). Bytes the daemon holds already are not stored twice
 * (djinn_tensor_info()'s flags: DJINN_TENSOR_DEDUP). *@out is a u8
 * tensor of @len elements and belongs to @s, like a tensor of
 * djinn_tensor_upload(); -EMSGSIZE if @len exceeds one frame.
 */
int djinn_module_upload(struct djinn_session *s, const void *image, size_t len,
			struct djinn_tensor **out);

/* ---------------------------------------------------------------------- */
/* Graphs */

/*
 * A graph is built value by value: every input and every node is a value,
 * numbered from 0 in the order they were added, and the functions below
 * return that number (>= 0) or a negative errno. A function taking value
 * numbers returns the first negative one it is given unchanged, so calls
 * nest without checks in between:
 *
 *	h = djinn_op_gelu(g, djinn_op_matmul(g, x, w, false, false));
 *
 * A builder is used by one thread at a time. It can be submitted any
 * number of times.
 */

/* Start a graph of session @s. *@out belongs to @s; free it with
 * djinn_graph_free(). */
int djinn_graph_new(struct djinn_session *s, struct djinn_graph_builder **out);

/* Free @g (a submitted graph's requests live on). NULL is ignored. */
void djinn_graph_free(struct djinn_graph_builder *g);

/*
 * Add tensor @t (of @g's session) as an input; returns its value. @g
 * copies what it needs: @t may be released afterwards, but a graph
 * submitted after the daemon dropped @t fails with -ENOENT. Adding the
 * same tensor twice returns the same value.
 */
int djinn_graph_input(struct djinn_graph_builder *g, struct djinn_tensor *t);

/*
 * Add result @r of an earlier submit of @g's session as an input, before
 * or after that request completes; returns its value. Its bytes never
 * leave the daemon. @g keeps @r's request alive until djinn_graph_free().
 * -ENOENT if @r was released, the request's error if it failed.
 */
int djinn_graph_input_result(struct djinn_graph_builder *g,
			     struct djinn_result *r);

/*
 * struct djinn_node_opts - a node's annotations for the scheduler
 * @phase:     enum djinn_phase, DJINN_PHASE_UNKNOWN to _TRAINING
 * @residency: enum djinn_residency of the node's result
 */
struct djinn_node_opts {
	unsigned int phase;
	unsigned int residency;
};

/*
 * Set the annotations of the nodes added from now on with NULL
 * annotations (initially all zero: unknown phase, activation).
 */
int djinn_graph_annotate(struct djinn_graph_builder *g,
			 const struct djinn_node_opts *opts);

/*
 * Add a node: op @op over the values @inputs[@nr] with @params_len bytes
 * of parameters (a struct djinn_p_*, zero-padded to 40 bytes; NULL when
 * 0) and @annotations (NULL: those of djinn_graph_annotate()). All are
 * copied. Returns the node's value. The op's own rules (shapes, dtypes,
 * params) are checked by djinn_submit(), with the daemon's messages.
 */
int djinn_graph_node(struct djinn_graph_builder *g, enum djinn_opcode op,
		     const uint32_t *inputs, unsigned int nr,
		     const void *params, size_t params_len,
		     const struct djinn_node_opts *annotations);

/*
 * Keep node value @value as a result of the graph; returns its index
 * among the results (for djinn_request_results()). A graph input cannot
 * be an output: -EINVAL.
 */
int djinn_graph_output(struct djinn_graph_builder *g, int value);

/*
 * Why the last call on @g that failed did: "node 3 (matmul): inner dims
 * 64 and 32 differ", or "" if none did. A pointer into @g, valid until
 * the next call on @g.
 */
const char *djinn_graph_error(const struct djinn_graph_builder *g);

/*
 * Convenience wrappers over djinn_graph_node() for each op, with the
 * builder's annotations. Values are ints so that errors propagate (see
 * above). Shapes as in proto.h's enum djinn_opcode.
 */
int djinn_op_matmul(struct djinn_graph_builder *g, int a, int b, bool trans_a,
		    bool trans_b);
int djinn_op_add(struct djinn_graph_builder *g, int a, int b);
int djinn_op_sub(struct djinn_graph_builder *g, int a, int b);
int djinn_op_mul(struct djinn_graph_builder *g, int a, int b);
int djinn_op_div(struct djinn_graph_builder *g, int a, int b);
int djinn_op_scale(struct djinn_graph_builder *g, int x, float alpha);
int djinn_op_gelu(struct djinn_graph_builder *g, int x);
int djinn_op_relu(struct djinn_graph_builder *g, int x);
int djinn_op_silu(struct djinn_graph_builder *g, int x);
int djinn_op_softmax(struct djinn_graph_builder *g, int x);
int djinn_op_layernorm(struct djinn_graph_builder *g, int x, int gamma,
		       int beta, float eps);
int djinn_op_rmsnorm(struct djinn_graph_builder *g, int x, int gamma,
		     float eps);
int djinn_op_embedding(struct djinn_graph_builder *g, int table, int ids);
/* @dims[@ndim]: the new shape, one entry may be -1 */
int djinn_op_reshape(struct djinn_graph_builder *g, int x, unsigned int ndim,
		     const int32_t *dims);
/* result dim k is input dim @perm[k] */
int djinn_op_permute(struct djinn_graph_builder *g, int x, unsigned int ndim,
		     const int32_t *perm);
int djinn_op_slice(struct djinn_graph_builder *g, int x, int axis,
		   int64_t start, int64_t end);
/* @xs[@nr], 2 to 4 values */
int djinn_op_concat(struct djinn_graph_builder *g, const int *xs,
		    unsigned int nr, int axis);
/* @scale 0: 1/sqrt(D) */
int djinn_op_attention(struct djinn_graph_builder *g, int q, int k, int v,
		       float scale, bool causal);
/* token-major q (T, H, D), k, v (Sn, Hk, D) after the keys and values in
 * slots @slot_k and @slot_v of @cache (P, R, Hk D), read in place */
int djinn_op_attention_cache(struct djinn_graph_builder *g, int q, int k, int v,
			     int cache, unsigned int slot_k,
			     unsigned int slot_v, float scale, bool causal);
int djinn_op_argmax(struct djinn_graph_builder *g, int x);
/* A token per row of float @logits (..., V): @params (..., 24) u8, a
 * struct djinn_sample_params a row (proto.h); to i64, or in-band codes */
int djinn_op_sample(struct djinn_graph_builder *g, int logits, int params);

/*
 * struct djinn_kernel_launch - how djinn_op_kernel() runs a kernel
 * @grid:     blocks, each dim > 0 (x < 2^31, y and z <= 65535)
 * @block:    threads per block, each dim > 0, at most 1024 in all, z <= 64
 * @shmem:    dynamic shared memory, bytes, at most 48 KiB
 * @out_like: the result has the dtype and shape of args[@out_like]
 * @out_init: 0: the result starts zeroed; 1: as a copy of args[@out_like]
 */
struct djinn_kernel_launch {
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shmem;
	unsigned int out_like;
	unsigned int out_init;
};

/*
 * A node that runs kernel @name of module @module (the value of a
 * tensor from djinn_module_upload(), added with djinn_graph_input()) on
 * @args[@nargs], 1 to 3 values, launched as @launch says (read during
 * the call). The kernel is called with, for the result and then each
 * argument, its device address and element count: (T *out, uint64_t n,
 * T1 *a1, uint64_t n1, ...). Returns the result's value.
 */
int djinn_op_kernel(struct djinn_graph_builder *g, int module, const char *name,
		    const int *args, unsigned int nargs,
		    const struct djinn_kernel_launch *launch);

/* ---------------------------------------------------------------------- */
/* Requests and lazy results */

/*
 * Submit @g and return at once. The graph is checked and its shapes
 * inferred here first (lib/graph.c, the daemon's own code), so a bad
 * graph fails at once with -EINVAL or -E2BIG and the daemon's message in
 * djinn_graph_error(g), and every result stub knows its shape. *@req
 * belongs to @g's session; free it with djinn_request_free().
 */
int djinn_submit(struct djinn_graph_builder *g, struct djinn_request **req);

/*
 * Wait up to @timeout_ns (DJINN_WAIT_FOREVER: no limit) for @req: 0 when
 * it ran, -ETIMEDOUT, or the request's error (its message in
 * djinn_request_error()).
 */
#define DJINN_WAIT_FOREVER UINT64_MAX
int djinn_wait(struct djinn_request *req, uint64_t timeout_ns);

/* 0 if @req ran, -EAGAIN while it is pending, or its error. */
int djinn_poll(struct djinn_request *req);

/*
 * The message of @req's error ("node 3 (matmul): ...", "connection reset
 * by djinnd"), "" if it has none (yet). A pointer into @req, valid until
 * djinn_request_free().
 */
const char *djinn_request_error(const struct djinn_request *req);

/*
 * Result @idx of @req (the order of djinn_graph_output()), or NULL if
 * @idx is out of range. A stub that knows its shape at once; a pointer
 * into @req, valid until djinn_request_free(req).
 */
struct djinn_result *djinn_request_results(struct djinn_request *req,
					   unsigned int idx);

/*
 * struct djinn_request_info - a request
 * @id:         its request_id on the wire
 * @nr_results: its results
 * @peak_bytes: planned peak device memory (once it ran)
 * @run_ns:     time on the device (once it ran)
 */
struct djinn_request_info {
	uint64_t id;
	unsigned int nr_results;
	uint64_t peak_bytes;
	uint64_t run_ns;
};

/* Copy what is known of @req into the caller's @info. */
int djinn_request_info(const struct djinn_request *req,
		       struct djinn_request_info *info);

/*
 * Free @req and its result stubs, unmapping their mappings. Results not
 * released yet are released on the daemon once nothing needs them: when
 * the request completes, and when no graph builder holds them as inputs.
 * Need not wait for @req. NULL is ignored.
 */
void djinn_request_free(struct djinn_request *req);

/* @r's shape and type, known at submit: a pointer into @r's request. */
const struct djinn_tensor_desc *djinn_result_desc(const struct djinn_result *r);

/*
 * Copy @len bytes at @offset of @r into the caller's @buf, waiting for
 * the request to complete first. Only that range moves over the wire.
 * The request's error if it failed, -ENOENT if @r was released, -EINVAL
 * for a range past the end.
 */
int djinn_result_read(struct djinn_result *r, uint64_t offset, uint64_t len,
		      void *buf);

/*
 * Map @r read-only into memory, waiting for the request to complete
 * first; *@addr is the first of its bytes. Pages are fetched from djinnd
 * when first touched (userfaultfd, user-mode faults only: a system call
 * handed an untouched page fails with EFAULT). Where userfaultfd is not
 * available, or $DJINN_NO_UFFD is set, the whole result is read at once
 * and the log says so. If the connection dies before a page is fetched,
 * touching that page raises SIGSEGV. Mapping @r again returns the same
 * address. The mapping belongs to @r: djinn_result_unmap() (once per
 * map) or freeing the request removes it.
 */
int djinn_result_map(struct djinn_result *r, void **addr);

/* Undo one djinn_result_map() of @r; the last one unmaps. */
int djinn_result_unmap(struct djinn_result *r);

/*
 * Drop @r on the daemon now, or, while its request is pending, as soon
 * as it completes. The stub stays (its desc still works) until the
 * request is freed; reading or mapping it gives -ENOENT. Its mapping, if
 * any, is removed.
 */
int djinn_result_release(struct djinn_result *r);

/* ---------------------------------------------------------------------- */
/* Errors */

/*
 * The message of the last call in this thread that failed: the daemon's
 * ("no model 'x' in /var/lib/djinn/models"), or libdjinn's for what it
 * refused itself ("token 300 at 2 is not below the vocabulary of 256"),
 * "" if none failed yet. A pointer to thread-local memory, valid until
 * this thread's next libdjinn call.
 */
const char *djinn_last_error(void);

/* ---------------------------------------------------------------------- */
/* Models */

/*
 * djinnd runs transformer models (GPT-2, Llama) from its model directory
 * on the client's behalf (DOC: models in proto.h): the weights never
 * cross the wire, a context's KV cache stays on the device between
 * calls, and the API takes and returns token ids (tokenizing is the
 * caller's). A model and its contexts belong to a session and go with
 * it; a context's steps run in order with the session's graphs.
 *
 * One step at a time per context: a step on a context while another
 * thread's step on it is in flight is -EBUSY, and so is anything but
 * djinn_ctx_resume(), djinn_ctx_reset() and djinn_ctx_free() while it is
 * paused at a breakpoint.
 */
struct djinn_model;
struct djinn_ctx;

/*
 * Open model @name of djinnd's model directory ([A-Za-z0-9._-], 1 to 63
 * bytes) in session @s. The daemon loads it once for all its sessions
 * (its weights go into the text segment, shared); a second opener waits
 * for nothing but the answer. -ENOENT for no such model, -EINVAL for a
 * bad name or a model the daemon refuses (djinn_last_error() says why),
 * -EOPNOTSUPP from a djinnd that serves no models. *@out belongs to @s;
 * djinn_model_close() closes it.
 */
int djinn_model_open(struct djinn_session *s, const char *name,
		     struct djinn_model **out);

/*
 * Open the model in local directory @dir (config.json and its
 * *.safetensors files; with model.safetensors.index.json, the index and
 * exactly the shards its weight_map names) in session @s, sending it to
 * djinnd: only the files' fingerprints cross the wire when the daemon
 * has the model, or the same files, already (text deduplication); else
 * the missing files, once. The daemon checks them as strictly as its own
 * model directory and names the model "upload-" and 16 hex digits of the
 * files' fingerprints (djinn_model_info()). Errors as djinn_model_open(),
 * and -EINVAL for a config.json or index over DJINN_MODEL_CONFIG_MAX
 * bytes, a file that is not a regular file, or an index that is not JSON
 * or names a shard that is not a plain *.safetensors file name; -ENOENT
 * for a shard it names that @dir lacks.
 */
int djinn_model_upload(struct djinn_session *s, const char *dir,
		       struct djinn_model **out);

/*
 * struct djinn_model_info - a model as the daemon described it
 * @name:       its name
 * @arch:       enum djinn_arch
 * @dtype:      enum djinn_dtype of its weights
 * @vocab:      token ids are 0 .. vocab - 1
 * @n_layer:    layers; breakpoints are after 0 .. n_layer - 1
 * @hidden:     the hidden size
 * @n_head:     attention heads
 * @n_kv_head:  key/value heads
 * @max_tokens: the longest context
 * @bytes:      its weights in the text segment: all of them, or a
 *              streamed model's resident part
 * @fp:         their fingerprint (SHA-256)
 * @weights:    every weight's bytes, streamed ones too (@bytes for a
 *              model wholly on the device)
 * @ring:       a streamed model's ring on the device, bytes; else 0
 * @resident:   layers 0 .. resident - 1 are on the device; @n_layer for a
 *              model wholly there. The daemon streams the others in from
 *              host memory, through the ring, for every step of a model
 *              whose weights exceed its device budget.
 *
 * @weights, @ring and @resident came with version DJINN_0.2 of
 * djinn_model_info(): a program built against an older djinn.h gets the
 * struct up to @fp, as it was.
 */
struct djinn_model_info {
	char name[DJINN_MODEL_NAME_MAX];
	uint32_t arch;
	uint32_t dtype;
	uint32_t vocab;
	uint32_t n_layer;
	uint32_t hidden;
	uint32_t n_head;
	uint32_t n_kv_head;
	uint32_t max_tokens;
	uint64_t bytes;
	uint8_t fp[DJINN_FP_LEN];
	uint64_t weights;
	uint64_t ring;
	uint32_t resident;
};

/* Copy what is known of @m into the caller's @info. */
int djinn_model_info(const struct djinn_model *m,
		     struct djinn_model_info *info);

/*
 * Close @m: -EBUSY while it has contexts, and @m stays open; otherwise
 * @m is freed whatever the daemon answers (which is returned). The
 * daemon drops the weights only when no session holds them and an
 * administrator evicts them (djinnctl model evict).
 */
int djinn_model_close(struct djinn_model *m);

/*
 * A context of model @m with room for @max_tokens tokens (0: the
 * model's longest): an empty KV cache in the session's data segment.
 * -EINVAL when @max_tokens is over the model's. *@out belongs to @m's
 * session; free it with djinn_ctx_free().
 */
int djinn_ctx_new(struct djinn_model *m, uint32_t max_tokens,
		  struct djinn_ctx **out);

/* A new context with a copy of @c's cache (on the device), which then
 * goes on as @c does. */
int djinn_ctx_fork(struct djinn_ctx *c, struct djinn_ctx **out);

/* Empty @c's cache (abandoning a paused step); its steps' stubs are
 * freed and released on the daemon. */
int djinn_ctx_reset(struct djinn_ctx *c);

/*
 * djinn_signal() for context @c alone: a session may hold many
 * conversations, each with its own waits. IO_WAIT (its estimate > 0)
 * lets djinnd move @c's KV cache to host memory for the wait and bring
 * it back by its end; a step on @c, or COMPUTE, ends the wait. Waits for
 * the daemon's answer: 0 or a negative errno (-ENOENT: no such context).
 */
int djinn_ctx_signal(struct djinn_ctx *c, unsigned int phase,
		     uint64_t expected_ns);

/* Keep the first @len tokens of @c's cache (-EINVAL for more than it
 * holds), as djinn_ctx_reset() keeps none: a conversation that branches
 * goes on from where the branches part. Its steps' stubs are freed, and
 * it has no last logits until its next step (prefill at least a token
 * before a decode). */
int djinn_ctx_truncate(struct djinn_ctx *c, uint32_t len);

/* Drop @c on the daemon, and free it and its stubs whatever the daemon
 * answers (which is returned). NULL is ignored. No other thread may be in
 * a call on @c. */
int djinn_ctx_free(struct djinn_ctx *c);

/* Tokens in @c's cache, as of the last answer: >= 0, or -EINVAL. */
int djinn_ctx_len(const struct djinn_ctx *c);

/*
 * struct djinn_step_opts - what a step should also give
 * @logits:      keep the logits after the last token, as a lazy stub
 * @break_layer: 0, or DJINN_BREAK_AFTER(L) to pause after layer L
 *
 * NULL or a zeroed struct: neither.
 */
struct djinn_step_opts {
	bool logits;
	unsigned int break_layer;
};
#define DJINN_BREAK_AFTER(layer) ((unsigned int)(layer) + 1u)

/*
 * struct djinn_step - how a step went
 * @state:     DJINN_CTX_DONE, or DJINN_CTX_PAUSED at a breakpoint
 * @nr_tokens: a decode's tokens in the caller's buffer so far
 * @len:       tokens in the context's cache now
 * @layer:     when paused: the layer it paused after
 * @run_ns:    time on the device for this call
 * @logits:    with opts->logits, when done: the logits (1, vocab) f32
 *             after the last token; else NULL
 * @hidden:    when paused: the hidden state after @layer, (T, hidden)
 *             in the weights' dtype (T: the step's tokens, 1 for a
 *             decode); else NULL
 *
 * @logits and @hidden are result stubs of the session: their bytes stay
 * on the daemon until read (djinn_result_read(), djinn_result_map(),
 * which move only what is asked), and djinn_graph_input_result() can
 * use them. They belong to the context and stay valid until it is reset
 * or freed, which releases them on the daemon. Each holds session
 * memory on the daemon until then (vocab * 4 bytes for the logits):
 * djinn_result_release() one that is no longer needed, as a decode loop
 * asking for the logits at every step should.
 */
struct djinn_step {
	unsigned int state;
	uint32_t nr_tokens;
	uint32_t len;
	uint32_t layer;
	uint64_t run_ns;
	struct djinn_result *logits;
	struct djinn_result *hidden;
};

/*
 * Append @tokens[@n] to @c's cache and run them (one batched forward
 * pass); @opts and @out may be NULL (@out is needed with a breakpoint).
 * -EINVAL for no tokens or a token outside the vocabulary, -ENOSPC when
 * the cache would pass its max_tokens; @c is then unchanged. Returns 0.
 */
int djinn_ctx_prefill(struct djinn_ctx *c, const int32_t *tokens, uint32_t n,
		      const struct djinn_step_opts *opts,
		      struct djinn_step *out);

/*
 * Generate @n tokens on the daemon, each sampled from the last logits
 * with @sp (NULL or a zeroed struct: greedy; see struct djinn_sampling:
 * the same seed, context and calls give the same tokens) and appended to
 * the cache, into the caller's @tokens_out[@n]. Returns how many are
 * there: @n, or fewer when it paused at a breakpoint (then every
 * djinn_ctx_resume() adds to @tokens_out, which must stay valid until
 * the step is done or abandoned).
 */
int djinn_ctx_decode(struct djinn_ctx *c, uint32_t n,
		     const struct djinn_sampling *sp, int32_t *tokens_out,
		     const struct djinn_step_opts *opts,
		     struct djinn_step *out);

/*
 * Go on with @c's paused step: with the hidden state as it was
 * (@replacement NULL), or replaced by data tensor @replacement of its
 * shape and dtype (steering). -EBUSY when @c is not paused. Returns what
 * the paused call would have: 0 for a prefill, a decode's tokens so far.
 * A step resumed unchanged gives the tokens and logits it gives without
 * the breakpoint.
 */
int djinn_ctx_resume(struct djinn_ctx *c, struct djinn_tensor *replacement,
		     struct djinn_step *out);

#ifdef __cplusplus
}
#endif

#endif /* DJINN_DJINN_H */
