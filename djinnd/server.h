/* SPDX-License-Identifier: MIT */
/*
 * The server: its configuration, its I/O loop, its listeners and
 * connections, its session table (session/session.h), its devices
 * (device.h) and its counters. server.c makes it (server_init()); the
 * protocol layer (net/) serves with it, so this header is of net/'s
 * floor and no floor below includes it (Documentation/architecture.rst).
 * Only the I/O thread touches connections and the session table;
 * executor threads meet it through the executor's queues and eventfd.
 */
#ifndef DJINN_SERVER_H
#define DJINN_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"
#include "backend/backend.h"
#include "loop.h"
#include "net/metrics.h"
#include "net/msg.h"
#include "sched/sched.h"
#include "session/lease.h"
#include "session/session.h"
#include "vmu/vmu.h"
#include "device.h"

#define SERVER_MAX_LISTEN 8
/* Admin socket connections at once, beside server.max_connections: a
 * table full of clients' does not lock the administrator out. */
#define SERVER_ADMIN_CONNS 16
/* Connections of server.token_auth's socket that have not sent AUTH yet,
 * at most, all uids together: they count against no uid's cap (pods
 * share the host's uids), and each has server.frame_timeout to send
 * it */
#define SERVER_TOKEN_PREAUTH 64

/*
 * struct model_budget - [model.NAME] budget and ring_slots
 * @model: the served model's name
 * @bytes: the device bytes it may take on each device, its text entry
 *         and its layer ring together (0: none; config_validate()
 *         leaves no entry without one)
 * @slots: its ring's layers when it is over @bytes (0: 2)
 *
 * Each device's model store has them (model_store_set_budget()), for
 * the model's next load: one loaded keeps its placement until it is
 * evicted or reclaimed.
 */
/* [tenant.NAME] and [model.NAME] sections at most */
#define SERVER_TENANT_MAPS_MAX 64

#define SERVER_RING_SLOTS_MAX DJINN_RING_SLOTS_MAX
struct model_budget {
	char model[DJINN_MODEL_NAME_MAX];
	uint64_t bytes;
	unsigned int slots;
	/* where each was set (config.c: set twice in one file is an
	 * error, and a ring without a budget is blamed on its line) */
	const char *bytes_file, *slots_file;
	unsigned int bytes_line, slots_line;
};

/*
 * djinnd's exit status when a device died (backend.dead: an error no
 * context reset clears, or a recovery that failed): EX_IOERR of
 * <sysexits.h> (systemctl status shows "status=74/IOERR"). Not 2, which
 * the unit does not restart on (RestartPreventExitStatus=2): under
 * Restart=on-failure systemd starts djinnd again, and with it the
 * driver's state for the process. See djinnd(8), EXIT STATUS.
 */
#define DJINND_EXIT_DEVICE_DEAD 74

struct server_config {
	const char *listen[SERVER_MAX_LISTEN]; /* "unix:PATH", "tcp:H:P" */
	unsigned int nr_listen;
	const char *admin_socket;
	/* "unix:PATH", one of @listen, whose clients name their tenant by
	 * a bearer token in AUTH (tokens and minted ones), never by their
	 * uid: the socket handed to containers; NULL: none */
	const char *token_auth;
	const char *backend; /* "cpu" */
	uint64_t cpu_mem;
	uint64_t gpu_mem; /* each GPU's bytes for sessions at most; 0: what
			   * it has free, less a headroom */
	uint64_t swap; /* host bytes swapped data may hold, per device; 0:
			* as much as the device has */
	uint64_t upload_max; /* MODEL_OPEN_UPLOADED's files in all, bytes; 0:
			      * the device's capacity */
	/* staging buffers one tenant's reads of device-only memory hold at
	 * once, bytes (net/msg_tensor.c) */
	uint64_t read_staging;
	unsigned int threads; /* kernel threads, 0: one per CPU */
	/* graphs a device runs at once, 0: its backend's default; at
	 * most DEVICE_COMPUTE_THREADS_MAX */
	unsigned int compute_threads;
	uint64_t lease_default_ns, lease_min_ns, lease_max_ns;
	unsigned int max_sessions;
	unsigned int max_sessions_per_uid; /* TCP peers count as one uid */
	unsigned int max_conns;
	/* live connections per peer uid (unix sockets, SO_PEERCRED) and per
	 * peer address (TCP); the admin socket is not counted */
	unsigned int max_conns_per_uid, max_conns_per_addr;
	/* the address block max_conns_per_addr counts a remote peer by */
	unsigned int addr_prefix_v4, addr_prefix_v6;
	/* a frame's header and fixed body must arrive within
	 * @frame_timeout_ns of its first byte, and its streamed data may not
	 * stall longer; a client connection with no session attached and
	 * nothing in flight is closed after @idle_timeout_ns */
	uint64_t frame_timeout_ns, idle_timeout_ns;
	unsigned int warn_pct, crit_pct; /* VMU pressure thresholds, % */
	const char *admin_group; /* the admin socket's; NULL: "djinn" if any */
	const char *model_dir; /* where models are read from */
	const char *metrics; /* "tcp:HOST:PORT" of the metrics endpoint */
	uint64_t devices; /* bit per device index; 0: all GPUs, or one
			   * CPU device */
	const char *leases; /* lease.provider: auto, kmod or user */
	/* server.plain_tcp: "loopback" (TCP listeners must be) or "any" */
	const char *plain_tcp;
	/* [tls] (net/tls.h): the server's certificate chain and key, the CA
	 * that client certificates are verified against, the bearer
	 * tokens' file, where a certificate names its tenant ("cn",
	 * "san-dns", "san-email", "san-uri") and whether the kernel may
	 * take the records ("auto", "off"); NULL or "" when unset */
	const char *tls_cert, *tls_key, *tls_client_ca, *tls_tokens;
	const char *tls_tenant_from, *tls_ktls;
	/* tls.max_records: records an AES-GCM connection carries from
	 * djinnd before it closes (djinnd never rekeys) */
	unsigned int tls_max_records;
	bool fault_injection; /* --fault-injection: ADMIN_FAULT_INJECT, for
			       * tests */
	/* --handover PATH: take the listening sockets from the djinnd that
	 * serves PATH, and serve PATH for the next one (net/fdstore.h) */
	const char *handover;
	/* --no-crash-journal: no journal in the fd store (net/journal.h):
	 * a crash loses the sessions */
	bool no_crash_journal;
	bool cpu_device_only; /* --cpu-device-only: a CPU device's memory is
			       * reached through the provider's copies only,
			       * as a GPU's (provider.device_only): tests */
	/* [sched] and [tenant.NAME]: sched.shares points at @shares */
	struct sched_config sched;
	struct sched_share shares[SCHED_TENANTS_MAX];
	unsigned int nr_shares;
	/* [tenant.NAME] uids and gids: who each tenant is */
	struct tenant_map tmaps[SERVER_TENANT_MAPS_MAX];
	unsigned int nr_tmaps;
	/* [model.NAME] readable = yes: served models whose weights any
	 * client may find by fingerprint and read (open weights) */
	char readable[SERVER_TENANT_MAPS_MAX][DJINN_MODEL_NAME_MAX];
	unsigned int nr_readable;
	/* [model.NAME] max_batch: sched.batches points at @batches */
	struct sched_batch batches[SCHED_BATCHES_MAX];
	unsigned int nr_batches;
	/* [model.NAME] budget and ring_slots */
	struct model_budget budgets[SERVER_TENANT_MAPS_MAX];
	unsigned int nr_budgets;
};

struct listener;
struct bufring;
struct tls_server;
struct ident_worker;

struct server_stats {
	uint64_t conns_accepted, conns_closed;
	uint64_t requests, errors;
	uint64_t bytes_in, bytes_out;
	uint64_t graphs_run, graphs_failed;
	uint64_t conns_stalled; /* closed: took no reply bytes */
	uint64_t conns_refused; /* over a per-uid or per-address cap */
	uint64_t conns_timed_out; /* a frame not finished in time */
	uint64_t conns_idle; /* closed for idling without a session */
	uint64_t conns_throttled; /* stopped receiving: reads in flight */
	uint64_t metrics_scrapes, metrics_bad;
	/* TEXT_LOOKUPs, and those that found nothing (answered -ENOENT, not
	 * counted in @errors: the normal first step of an upload) */
	uint64_t text_lookups, text_misses;
	/* TLS handshakes done (of them, the kernel took @tls_kernel) and
	 * failed; AUTHs refused */
	uint64_t tls_handshakes, tls_kernel, tls_failed, auth_refused;
	struct msg_stats msgs[METRICS_MSGS];
};

struct server {
	struct server_config cfg;
	struct loop loop;
	struct device *dev; /* the devices, nr_dev of them (at least 1) */
	unsigned int nr_dev;
	struct loop_timer send_timer; /* closes peers that take no replies */
	struct loop_timer conn_timer; /* frame and idle deadlines */

	struct session_table sessions; /* session/session.h */

	struct list_head listeners;
	struct list_head conns;
	struct list_head closing; /* closed, still owed completions */
	bool conns_failed; /* some have conn->failed: conns_close_failed() */
	unsigned int nr_conns; /* metrics connections too */
	/* of them, the admin socket's: they have SERVER_ADMIN_CONNS slots
	 * of their own, outside server.max_connections */
	unsigned int nr_admin;
	struct list_head http; /* metrics connections (net/metrics.c) */
	unsigned int nr_http;
	struct bufring *br; /* provided receive buffers, or NULL */
	struct tls_server *tls; /* with a tls: listener (net/tls.h) */
	struct token_table *tokens; /* bearer tokens (net/tokens.h) */
	struct ident_worker *ident; /* loopback TCP owners (net/ident.h) */

	bool draining; /* SIGTERM: finish in-flight work, then stop */
	/* a planned restart (net/restart.h) is handing djinnd's state to
	 * its successor: connections stop between frames */
	struct restart *restart;
	/* a predecessor's record, read at start until it is restored */
	struct restart_in *restore;
	/* the crash journal (net/journal.h), or NULL; @jdone: its records
	 * written (a reply whose @need is past it waits: UINT64_MAX without
	 * a journal), @jdirty: one is owed; @journal_prev: a predecessor's
	 * journal's name in the store, forgotten once this one's is in */
	struct journal *journal;
	uint64_t jdone;
	bool jdirty;
	char **journal_prev; /* NULL-terminated */
	/* posted when a free waits for a record (jwake_on: made) */
	struct loop_notify jwake;
	bool jwake_on;
	bool term_pending; /* a SIGTERM came during it: drain if it fails */
	/* 0, or DJINND_EXIT_DEVICE_DEAD once a device died (then
	 * @dead_msg says which and why): djinnd drains and exits with it */
	int exit_status;
	char dead_msg[512];
	struct loop_timer dead_watch;
	/* a successor started for a dead device must come for the state
	 * by then (loop time), else djinnd drains; 0: none started */
	uint64_t dead_deadline;
	/* main.c's, on the I/O thread: configuration reload and the
	 * service manager's notifications; NULL: nothing to do */
	struct server_hooks {
		void (*reload)(struct server *srv); /* SIGHUP */
		void (*stopping)(struct server *srv); /* draining begins */
		/* server.c's own: stop and drain (SIGTERM's) */
		void (*drain)(struct server *srv);
		/* SIGUSR2 and ADMIN_RESTART: start the successor, whose
		 * pid goes in *@pid; 0, or a negative errno saying why in
		 * @msg */
		int (*restart)(struct server *srv, pid_t *pid, char *msg,
			       size_t msglen);
	} hooks;
	struct server_stats st;
	uint64_t started_ns; /* loop_now() at server_init() */
};

/* net/listen.c and net/conn.c */
int listeners_open(struct server *srv);
/* Stop accepting (shutdown); listeners_free() once the loop has ended. */
void listeners_close(struct server *srv);
void listeners_free(struct server *srv);
/* A restored admin connection's peer (@fd): allowed by the admin
 * socket's rules now, else closed (false). */
bool listeners_admin_peer_ok(struct server *srv, int fd);
/* A restart (net/restart.h): the client and admin listeners stop
 * accepting (@hold), their connections waiting in the backlog, or
 * accept again; held: no accept is outstanding any more (every one
 * accepted has been made a connection). */
void listeners_hold(struct server *srv, bool hold);
bool listeners_held(const struct server *srv);
/* djinnd serves: the listening sockets a predecessor passed are its own
 * now (it removes their paths when it stops for good). */
void listeners_own(struct server *srv);
/* The listening sockets a successor takes: at most @max, each one's
 * store name and fd in @names and @fds; how many. */
unsigned int listeners_stored(struct server *srv, char **names, int *fds,
			      unsigned int max);
void conns_close_all(struct server *srv, bool force);
/* Close the connections loop_sqe() failed (conn_fail()); called before
 * the loop sleeps, where closing frees nothing under anyone. */
void conns_close_failed(struct server *srv);

#endif /* DJINN_SERVER_H */
