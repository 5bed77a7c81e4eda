/* SPDX-License-Identifier: MIT */
/*
 * libdjinn's insides, shared by its files and its unit tests (which link
 * libdjinn.a and may call these). Nothing here is exported from
 * libdjinn.so: the version script exports djinn_* only.
 *
 * Reading: one thread at a time reads the socket, the one holding the
 * reader token (conn->rx_busy). It reads every frame, validates it,
 * matches it to its pending call by request_id and completes the call; on
 * EOF, error or a protocol violation it fails every pending call and marks
 * the connection dead. A reader never sends and never waits for anything
 * but the socket and conn->lock.
 *
 * A thread that waits for its own answer with no deadline takes the token
 * when it is free and reads until its call is done (leader/follower), so
 * that a synchronous call costs one sleep, in recv(), not a hand-over
 * between threads; then it hands the token to another such waiter, or to
 * the receiver when it has reading to do.
 *
 * Threads of a connection:
 *
 *   receiver  reads when answers are due that no thread waits to read
 *             (submitted graphs, HEARTBEATs, TENSOR_RELEASEs), and after
 *             the peer hung up or the connection died, until every
 *             pending call is done. Otherwise it sleeps in poll(),
 *             watching the socket for a hang-up only (data does not wake
 *             it) and rx_kick for work. It never sends.
 *   keeper    started with the first session: sends HEARTBEATs and the
 *             TENSOR_RELEASEs that completions defer to it (so that a
 *             reader never blocks on the send lock).
 *   faults    started with the first userfaultfd mapping: serves page
 *             faults with TENSOR_READ and UFFDIO_COPY.
 *
 * A receiver lives as long as its socket: when djinnd drops the
 * connection, the thread that dials again (wire.c, relink()) joins it and
 * starts another for the new socket.
 *
 * Locking: conn->lock guards the pending calls, the reader token, every
 * object list, the refcounts and all completion state; conn->send_lock
 * serialises whole frames on the socket. send_lock is never taken with
 * lock held, nor by the reader.
 */
#ifndef LIBDJINN_INTERNAL_H
#define LIBDJINN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <djinn/djinn.h>

#include "array_size.h"
#include "graph.h"
#include "list.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	      "the wire is little-endian: add byte swapping first");

#define __printf(a, b) __attribute__((format(printf, a, b)))
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))

#define DJ_CALL_BUCKETS 256 /* power of two */
#define DJ_RX_BUF (64 * 1024)
#define DJ_PAGE 4096ul

/* ---------------------------------------------------------------------- */
/* Logging */

void __djinn_log(int level, const char *fmt, ...) __printf(2, 3);
#define dj_err(...) __djinn_log(DJINN_LOG_ERROR, __VA_ARGS__)
#define dj_warn(...) __djinn_log(DJINN_LOG_WARN, __VA_ARGS__)
#define dj_info(...) __djinn_log(DJINN_LOG_INFO, __VA_ARGS__)
#define dj_dbg(...) __djinn_log(DJINN_LOG_DEBUG, __VA_ARGS__)

/* "HELLO", "GRAPH_SUBMIT", ...: a static string, "unknown" for others. */
const char *__djinn_msg_str(unsigned int type);

uint64_t __djinn_now_ns(void);

/* ---------------------------------------------------------------------- */
/* Addresses */

/*
 * struct dj_addr - a parsed "unix:PATH" or "tcp:HOST:PORT"
 * @unix_path: for unix, the path ('\0' first for the abstract namespace)
 * @path_len:  its bytes, without a NUL
 * @host:      for tcp, the host without brackets
 * @port:      for tcp, the port as text
 */
struct dj_addr {
	bool is_unix;
	bool tls; /* tls:HOST:PORT */
	char unix_path[108];
	size_t path_len;
	char host[256];
	char port[8];
	/* the name djinnd's certificate must be valid for, when not @host
	 * (a dns: or srv: address dials an IP address its name gave) */
	char tls_name[256];
};

/*
 * The address djinn_connect(@addr) dials: @addr, else $DJINN_ADDR, else
 * the default, "unix:" and where djinnd puts its socket
 * (djinnd_socket_find(), lib/rundir.h), made in @buf. *@from says which
 * for messages: NULL (@addr), "$DJINN_ADDR", or the default's words.
 */
#define DJINN_ADDR_NAME_MAX 4200
const char *__djinn_addr_name(const char *addr, char *buf, size_t len,
			      const char **from);

/* Parse @addr (NULL: $DJINN_ADDR, else the default): 0 or -EINVAL. */
int __djinn_addr_parse(const char *addr, struct dj_addr *out);

/* djinn_connect_opts() of a unix:, tcp: or tls: address @addr; with
 * @tls_name, djinnd's certificate must be valid for that name rather
 * than the dialled host (place.c dials addresses a name gave); the dial,
 * handshake, HELLO and AUTH done by @deadline_ns (CLOCK_MONOTONIC;
 * UINT64_MAX: none) or failed. */
int __djinn_connect_at(const char *addr, const char *tls_name,
		       const struct djinn_connect_opts *o, uint64_t deadline_ns,
		       struct djinn_conn **out);
/* djinn_connect_opts() of a dns:NAME:PORT or srv:NAME address (place.c):
 * every djinnd the name gives is asked (STATUS) and the best kept. */
int __djinn_place(const char *addr, const struct djinn_connect_opts *o,
		  struct djinn_conn **out);

/* ---------------------------------------------------------------------- */
/* Calls: one request in flight */

struct djinn_conn;
struct dj_call;

/*
 * Run by the reader under conn->lock when @c completes (also when it
 * fails because the connection died). A non-zero return, with @c->err
 * 0, means the response broke the protocol: the connection is killed.
 */
typedef int (*dj_complete_fn)(struct djinn_conn *conn, struct dj_call *c);

/*
 * struct dj_call - a request waiting for its response
 * @node:       in conn->calls[], while pending
 * @id:         its request_id
 * @session_id: hdr.session_id it was sent with
 * @type:       its message type, which the response must echo
 * @wnode:      in conn->rx_followers while a thread waits for it, ready
 *              to read when handed the reader token
 * @done:       the response came, or the connection died
 * @detached:   nobody waits: the reader frees it after @complete
 * @sync:       its sender waits for it at once with no deadline and so
 *              reads for it: the receiver need not
 * @rx_given:   the reader token was handed to a waiter of this call
 * @again:      sent again after the connection dropped under it
 * @not_run:    failed by a drop djinnd announced (GOAWAY): it did not run
 * @err:        once done: 0 or a negative errno
 * @peer_version: hdr.version of the response
 * @resp:       where a successful response's payload goes ...
 * @resp_len:   ... which must be exactly this long
 * @resp_upto:  ... or at most this long (a variable-length answer)
 * @resp_got:   once done: the payload's length
 * @complete:   optional, see dj_complete_fn
 * @cond:       waiters sleep here (CLOCK_MONOTONIC)
 * @msg:        once done with an error: its message, NUL-terminated
 */
struct dj_call {
	struct list_head node;
	uint64_t id;
	uint64_t session_id;
	uint16_t type;
	struct list_head wnode;
	bool done;
	bool detached;
	bool sync;
	bool rx_given;
	bool again;
	bool not_run;
	int err;
	unsigned int peer_version;
	void *resp;
	uint64_t resp_len;
	bool resp_upto;
	uint64_t resp_got;
	dj_complete_fn complete;
	pthread_cond_t cond;
	char msg[DJINN_MAX_ERROR_MSG + 1];
};

void __djinn_call_init(struct dj_call *c, uint16_t type, uint64_t session_id,
		       void *resp, uint64_t resp_len);
void __djinn_call_destroy(struct dj_call *c);

/*
 * Register @c and send its frame: the header, then @iov[@iovcnt] as the
 * payload. On failure @c is not pending and the connection's error (or
 * the send's) is returned.
 */
int __djinn_call_send(struct djinn_conn *conn, struct dj_call *c,
		      const struct iovec *iov, int iovcnt);

/*
 * Wait for @c until @deadline_ns (CLOCK_MONOTONIC; UINT64_MAX: none):
 * 0 or -ETIMEDOUT; @c->err says how it went. Takes conn->lock. With no
 * deadline the caller reads the socket itself while nobody else does.
 */
int __djinn_call_wait(struct djinn_conn *conn, struct dj_call *c,
		      uint64_t deadline_ns);

/*
 * Send a request and wait for its answer: @payload[@len] after the
 * header, the answer's payload into @resp[@resp_len]. Returns the
 * request's error, which it logs with the daemon's message.
 */
int __djinn_call_sync(struct djinn_conn *conn, uint16_t type,
		      uint64_t session_id, const struct iovec *iov, int iovcnt,
		      void *resp, uint64_t resp_len);
/* The same for an answer of at most @resp_len bytes (@upto), its length
 * in *@got (NULL: not wanted). Both send a call again after a dropped
 * connection when it is idempotent or djinnd said it had not run it. */
int __djinn_call_sync_upto(struct djinn_conn *conn, uint16_t type,
			   uint64_t session_id, const struct iovec *iov,
			   int iovcnt, void *resp, uint64_t resp_len, bool upto,
			   uint64_t *got);

/* Send @c (set up by __djinn_call_init()) with @iov[@iovcnt] as its
 * payload and wait for its answer until @deadline_ns (CLOCK_MONOTONIC;
 * UINT64_MAX: none), failing the connection at the deadline: @c->err. */
int __djinn_call_until(struct djinn_conn *conn, struct dj_call *c,
		       const struct iovec *iov, int iovcnt,
		       uint64_t deadline_ns);

/* Keep @fmt's message for djinn_last_error() in this thread. */
void __djinn_set_last_error(const char *fmt, ...) __printf(1, 2);

/* Fire and forget: the answer, if it is an error, is logged. */
int __djinn_call_detached(struct djinn_conn *conn, uint16_t type,
			  uint64_t session_id, const void *payload,
			  uint64_t len, uint64_t resp_len,
			  dj_complete_fn complete);

/*
 * The connection is broken (@err: -EPROTO, -ECONNRESET, -ESHUTDOWN): mark
 * it dead and shut the socket down, so that the reader fails every
 * pending call. Idempotent; the first error sticks. @why is logged.
 */
void __djinn_conn_fail(struct djinn_conn *conn, int err, const char *why, ...)
	__printf(3, 4);
/* The same under conn->lock, for the complete functions (the reader
 * shuts the socket down when they return non-zero). */
void __djinn_set_dead(struct djinn_conn *conn, int err, const char *why);

/* ---------------------------------------------------------------------- */
/* Objects */

/*
 * struct dj_release - a TENSOR_RELEASE the keeper is to send
 */
struct dj_release {
	struct list_head node;
	uint64_t session_id;
	uint64_t handle;
};

struct dj_tls;

struct djinn_conn {
	int fd;
	struct dj_tls *tls; /* tls:HOST:PORT (libdjinn/tls.c), or NULL */
	const char *transport; /* djinn_conn_transport() */
	/* 0 while usable, else the error every call gets, and why */
	atomic_int dead;
	char dead_msg[DJINN_MAX_ERROR_MSG];
	pthread_mutex_t lock;
	pthread_mutex_t send_lock;
	atomic_uint_fast64_t next_id;
	struct list_head calls[DJ_CALL_BUCKETS];

	pthread_t rx_thread;
	bool rx_started;
	/* the reader token and the receiver's state, under lock */
	bool rx_busy; /* a thread holds the token */
	bool rx_failed; /* every pending call failed: nothing more to read */
	bool rx_hup; /* the receiver saw the peer hang up */
	bool rx_wants; /* the receiver waits for the token */
	bool rx_kicked; /* rx_kick written and not yet read */
	unsigned int nr_async; /* pending calls that are not @sync */
	struct list_head rx_followers; /* dj_call.wnode */
	int rx_kick; /* an eventfd that wakes the receiver */
	/* the token holder's */
	uint8_t *rx_buf;
	size_t rx_head, rx_tail;

	struct djinn_server_info server;

	atomic_uint_fast64_t bytes_sent, bytes_received, requests, responses;
	atomic_uint_fast64_t map_faults, map_bytes;

	/* the keeper */
	struct list_head sessions;
	struct list_head releases;
	pthread_t keeper;
	bool keeper_started;
	bool stopping;
	pthread_cond_t keeper_cond;

	/* the fault handler */
	int uffd; /* -1: not set up */
	int uffd_err; /* 0: untried; 1: works; -errno: unavailable */
	int uffd_stop; /* an eventfd that stops the handler */
	pthread_t uffd_thread;
	bool uffd_started;
	struct list_head mappings;
	uint64_t map_gen;

	/* reconnecting (wire.c): where it was dialled and with what (the
	 * caller's strings copied), NULL for __djinn_conn_start()'s */
	char *dial;
	char *tls_name; /* struct dj_addr's, or NULL */
	struct djinn_connect_opts opts;
	uint64_t relink_ns; /* how long to try; 0: never */
	bool relinking; /* @relinker dials, other senders wait */
	bool relink_failed; /* it gave up: dead for good */
	uint64_t link_gen; /* bumped by each new link (send_lock and lock) */
	bool goaway; /* this link's djinnd said GOAWAY: it closes next */
	pthread_t relinker;
	pthread_cond_t relink_cond;
	atomic_uint_fast64_t reconnects;
};

/*
 * struct djinn_session - an open session
 * @last_ns:     when the keeper last sent it a HEARTBEAT
 * @hb_inflight: a heartbeat is out
 * @expired:     a heartbeat found it gone: stop renewing
 *
 * A session djinnd no longer had when libdjinn reconnected is lost: its
 * @id gets DJ_SESSION_LOST, which no id djinnd gives has, so that its
 * calls fail before they are sent (wire.c) and never reach a new session
 * a fresh djinnd gave the same number.
 */
#define DJ_SESSION_LOST (1ull << 63)

struct djinn_session {
	struct djinn_conn *conn;
	struct list_head node;
	uint64_t id;
	uint8_t token[DJINN_TOKEN_LEN];
	uint64_t lease_ns;
	uint64_t deadline_ns;
	char tenant[DJINN_TENANT_LEN];
	uint64_t last_ns;
	bool hb_inflight;
	bool expired;
	struct dj_kdev *kdev; /* kdev.c: a session on /dev/djinn, or NULL */
	struct list_head tensors, graphs, requests;
	struct list_head models, ctxs; /* model.c's */
};

/*
 * kdev.c: sessions on /dev/djinn. open: 0, or -errno and the caller
 * opens on the socket (-EOPNOTSUPP: not offered). heartbeat: the ioctl,
 * giving ring slots back. wait: until @c's record is in the ring, its
 * answer may be on the socket, or @deadline_ns; then read it as usual.
 */
struct dj_kdev;
int __djinn_kdev_open(struct djinn_conn *conn, const char *tenant,
		      uint32_t priority, uint64_t lease_ns,
		      struct dj_kdev **out, struct djinn_session_resp *r);
void __djinn_kdev_close(struct dj_kdev *kd);
int __djinn_kdev_heartbeat(struct dj_kdev *kd, uint64_t *deadline_ns);
void __djinn_kdev_wait(struct dj_kdev *kd, struct djinn_conn *conn,
		       struct dj_call *c, uint64_t deadline_ns);

struct djinn_tensor {
	struct djinn_session *s;
	struct list_head node;
	struct djinn_tensor_desc desc;
	struct djinn_tensor_info info;
	bool module; /* from djinn_module_upload() */
};

/*
 * struct dj_mapping - a mapped result
 * @refs:      djinn_result_map() calls not undone
 * @gen:       tells it from a later mapping at the same address
 * @uffd:      served by faults (else filled at once)
 * @fetched:   one bit per page, set once it is in place
 * @next_page: after the last fetch: a fault here is sequential
 * @ahead:     pages the next sequential fault fetches
 */
struct dj_mapping {
	struct list_head node;
	struct djinn_result *r;
	uint8_t *addr;
	size_t len;
	unsigned int refs;
	uint64_t gen;
	bool uffd;
	uint64_t *fetched;
	size_t next_page;
	size_t ahead;
};

/*
 * struct djinn_result - a result stub
 * @desc:            inferred at submit
 * @handle:          once the request ran
 * @released:        dropped, or to be dropped when the request completes
 */
struct djinn_result {
	struct djinn_request *req;
	unsigned int index;
	struct djinn_tensor_desc desc;
	uint64_t bytes;
	uint64_t handle;
	bool released;
	struct dj_mapping *map;
};

/*
 * struct djinn_request - a submitted graph
 * @s:          NULL once the session is closed
 * @refs:       the user's and one per builder input holding a result;
 *              at zero it is freed, or when it completes if it is pending
 * @sent:       its frame went (or is going) out: pending until call.done
 * @freed:      the user called djinn_request_free()
 * @resp:       the response: struct djinn_graph_resp, then tensor_resps
 */
struct djinn_request {
	struct djinn_conn *conn;
	struct djinn_session *s;
	uint64_t session_id;
	struct list_head node;
	unsigned int refs;
	bool sent;
	bool freed;
	struct dj_call call;
	void *resp;
	struct djinn_graph_resp info;
	unsigned int nr_results;
	struct djinn_result results[];
};

/* Drop a reference to @req under conn->lock; the last frees it, leaving
 * the release of its unreleased results to the keeper. */
void __djinn_request_put(struct djinn_request *req);

/*
 * Encode @g (__djinn_graph_encode()) and make its request, with its id
 * and result stubs but not sent: djinn_submit() sends *@payload[*@len]
 * and frees it.
 */
int __djinn_request_prepare(struct djinn_graph_builder *g,
			    struct djinn_request **out, void **payload,
			    uint64_t *len);

/*
 * A request that already ran, with one result: @desc on the daemon as
 * @handle, a tensor of @s that a model step made. Linked into @s like a
 * submitted one; djinn_request_free() frees it, releasing the result.
 */
int __djinn_request_stub(struct djinn_session *s,
			 const struct djinn_tensor_desc *desc, uint64_t handle,
			 struct djinn_request **out);

/* Wait for @r's request: 0 and @r's handle, or why it cannot be read. */
int __djinn_result_ready(struct djinn_result *r, uint64_t *handle);

/* Queue a TENSOR_RELEASE for the keeper; under conn->lock. */
void __djinn_release_later(struct djinn_conn *conn, uint64_t session_id,
			   uint64_t handle);

/* Start the keeper if it is not running; takes conn->lock. */
int __djinn_keeper_start(struct djinn_conn *conn);

/*
 * struct dj_input - a graph input as the builder keeps it
 * @ref:  the wire ref for a tensor (a handle); for a result, filled at
 *        each submit
 * @r:    the result, or NULL for a tensor
 * @value: its builder value
 */
struct dj_input {
	struct djinn_ref ref;
	uint32_t value;
	struct djinn_tensor_desc desc;
	struct djinn_result *r;
	bool module; /* a client module: a KERNEL node may run it */
};

/* A builder value: bit 31 set for node k, clear for input i. */
#define DJ_VALUE_NODE (1u << 31)

struct djinn_graph_builder {
	struct djinn_session *s;
	struct list_head node;
	uint32_t nr_inputs, nr_nodes, nr_outputs, nr_values;
	uint32_t cap_inputs, cap_nodes, cap_values;
	struct dj_input *inputs;
	/* the nodes' inputs[] hold builder values until encoded */
	struct djinn_node *nodes;
	uint32_t outputs[DJINN_MAX_GRAPH_OUTPUTS];
	uint32_t *values;
	struct djinn_node_opts annotations;
	char msg[DJINN_MAX_ERROR_MSG];
};

/*
 * Lay @g out as a GRAPH_SUBMIT payload, exactly as proto.h says, into a
 * new 8-byte aligned *@payload of *@len bytes (the caller frees it),
 * resolving result inputs to handles or DJINN_REF_RESULT refs; then
 * parse it back and infer it, the descs of its outputs into @out_descs
 * (DJINN_MAX_GRAPH_OUTPUTS of them). Under conn->lock when @g has result
 * inputs. Failures leave a message in @g->msg.
 */
int __djinn_graph_encode(struct djinn_graph_builder *g, void **payload,
			 uint64_t *len, struct djinn_tensor_desc *out_descs);

/* Free @g's memory; under conn->lock, with @g unlinked by the caller. */
void __djinn_graph_destroy(struct djinn_graph_builder *g);

/*
 * A session the daemon described in @r (a SESSION_OPEN or ATTACH answer;
 * @want_id: the id it must have, 0 for any); @tenant may be NULL. Links
 * it into @conn and starts the keeper.
 */
int __djinn_session_new(struct djinn_conn *conn,
			const struct djinn_session_resp *r, uint64_t want_id,
			const char *tenant, struct djinn_session **out);

/* Free everything of @s on this side (not on the daemon): its graphs,
 * requests (pending ones live on as orphans), tensors, mappings, models
 * and contexts. Takes conn->lock. */
void __djinn_session_teardown(struct djinn_session *s);

/* Free @s's models and contexts on this side; under conn->lock, after
 * its requests are gone (model.c). */
void __djinn_models_teardown(struct djinn_session *s);

/*
 * struct djinn_model_info as DJINN_0.1 had it: up to @fp, 136 bytes.
 * __djinn_model_info_v0_1() is djinn_model_info@DJINN_0.1, for programs
 * built against it: it copies that much into @info.
 */
#define DJINN_MODEL_INFO_V0_1 \
	(offsetof(struct djinn_model_info, fp) + DJINN_FP_LEN)
int __djinn_model_info_v0_1(const struct djinn_model *m, void *info);

/* ---------------------------------------------------------------------- */
/* Payloads */

/* SHA-256 of @data[@len] into @fp: 0 or -ENOMEM/-EIO. */
int __djinn_sha256(const void *data, size_t len, uint8_t fp[DJINN_FP_LEN]);

/* A tensor of @s the daemon holds as @handle, linked into @s. */
struct djinn_tensor *__djinn_tensor_new(struct djinn_session *s,
					const struct djinn_tensor_desc *desc,
					enum djinn_segment seg,
					uint64_t handle);

/* A TENSOR_CREATE or TEXT_LOOKUP answer is one for @desc: 0 or -EPROTO. */
int __djinn_tensor_resp_check(const struct djinn_tensor_resp *r,
			      const struct djinn_tensor_desc *desc);

/* Read @len bytes at @offset of @handle into @buf, in frames the daemon
 * accepts. */
int __djinn_read(struct djinn_conn *conn, uint64_t session_id, uint64_t handle,
		 uint64_t offset, uint64_t len, void *buf);

/* Take @r's mapping down; under conn->lock. */
void __djinn_unmap_locked(struct djinn_conn *conn, struct djinn_result *r);

/* ---------------------------------------------------------------------- */
/* Connections without HELLO, for the unit tests */

/* Make a connection over the connected socket @fd (which it takes) and
 * start its receiver; no HELLO. */
int __djinn_conn_start(int fd, struct djinn_conn **out);
/* Send HELLO on @conn and check the answer. */
int __djinn_hello(struct djinn_conn *conn);

/* @o's field @f, or NULL when @o is NULL or too old to have it. */
#define DJ_OPT(o, f)                                                  \
	((o) && (o)->size >= offsetof(struct djinn_connect_opts, f) + \
					 sizeof((o)->f) ?             \
		 (o)->f :                                             \
		 NULL)

/* libdjinn/tls.c: a TLS client of @o's files (or the environment's),
 * read before anything is dialled: 0 and *@out, or -EINVAL (a file),
 * -ENOMEM, with @why. */
int __djinn_tls_new(const struct djinn_connect_opts *o, struct dj_tls **out,
		    char *why, size_t len);
/* The handshake on connected socket @fd (djinnd's certificate must name
 * @host), then the kernel's TLS or OpenSSL's: 0, or -EACCES (a
 * certificate refused), -EPROTO, -ENOMEM, with @why. */
int __djinn_tls_handshake(struct dj_tls *t, int fd, const char *host, char *why,
			  size_t len);
void __djinn_tls_free(struct dj_tls *t);
const char *__djinn_tls_mode(const struct dj_tls *t);
/* OpenSSL seals and opens the records (no kernel TLS). */
bool __djinn_tls_user(const struct dj_tls *t);
/* Userspace records: seal and send all of @v, under conn->send_lock. */
int __djinn_tls_sendv(struct dj_tls *t, int fd, const struct iovec *v, int n);
/* recv(2) through TLS: what it returns, with errno; a TLS failure sets
 * *@err and @why too. */
ssize_t __djinn_tls_recv(struct dj_tls *t, int fd, void *buf, size_t len,
			 int flags, int *err, char *why, size_t why_len);
/* After a failure: an alert djinnd sent before it closed (it refused
 * the certificate), read without waiting: its -errno and @why, or 0. */
int __djinn_tls_alert(struct dj_tls *t, int fd, char *why, size_t len);

#endif /* LIBDJINN_INTERNAL_H */
