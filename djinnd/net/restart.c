// SPDX-License-Identifier: MIT
/*
 * Planned restarts that keep djinnd's state (net/restart.h): holding the
 * connections, writing and sending the record, and restoring it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "server.h"
#include "net/conn.h"
#include "net/fdstore.h"
#include "net/journal.h"
#include "net/restart.h"
#include "net/tls.h"
#include "session/lease.h"
#include "session/session.h"
#include "session/tenant.h"
#include "svc/devices.h"
#include "svc/state.h"
#include "vmu/provider.h"

#define HOLD_TICK_NS (2 * NSEC_PER_MSEC)

struct restart {
	struct server *srv;
	bool to_store; /* into systemd's fd store, for the next start */
	int sock; /* to the successor, or -1 */
	pid_t pid;
	int pidfd;
	uint64_t t0, deadline;
	struct loop_timer timer;
};

/* The hold ends: listeners accept, leases run (the time held given
 * back), connections read again. */
static void release(struct server *srv)
{
	srv->restart = NULL;
	listeners_hold(srv, false);
	session_table_hold_leases(&srv->sessions, false);
	restart_serving(srv);
}

/* The successor is told why (it exits), and this djinnd serves on. */
static void hand_over_fail(struct restart *r, const char *why, bool kill)
{
	struct server *srv = r->srv;
	char msg[300];

	if (r->to_store) {
		/* stopping, as without a store: the sessions end */
		log_err("restart: the state cannot be kept: %s; draining", why);
		free(r);
		release(srv);
		srv->hooks.drain(srv);
		return;
	}
	log_err("restart: handing over to pid %d failed: %s; serving on",
		(int)r->pid, why);
	snprintf(msg, sizeof(msg), "error: %s", why);
	send(r->sock, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
	if (kill && r->pidfd >= 0) {
		struct pollfd p = { .fd = r->pidfd, .events = POLLIN };

		/* gone before this djinnd serves on: it may have begun on
		 * the memory both map */
		syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL, NULL, 0);
		if (poll(&p, 1, 10000) != 1)
			log_err("restart: pid %d is not gone 10 s after "
				"SIGKILL",
				(int)r->pid);
	}
	close(r->sock);
	if (r->pidfd >= 0)
		close(r->pidfd);
	free(r);
	release(srv);
	if (srv->exit_status) {
		/* a device is dead: this djinnd cannot serve on */
		log_err("restart: %s: draining", srv->dead_msg);
		srv->hooks.drain(srv);
	} else if (srv->term_pending) {
		/* a SIGTERM came meanwhile: it is answered now, as any */
		log_notice("restart: SIGTERM while handing over: answered now");
		if (!restart_to_store(srv))
			srv->hooks.drain(srv);
		else if (srv->hooks.stopping)
			srv->hooks.stopping(srv);
	}
}

/*
 * A TLS connection cannot change hands (its OpenSSL state stays here):
 * before it closes with this process, tell its client that every
 * request it has no answer to was not run (GOAWAY: the connections are
 * held between frames and nothing runs), so that libdjinn sends them
 * again on a new connection; then close_notify. One that still owes
 * bytes gets neither: its client finds the connection closed.
 */
static void tls_goaway(struct server *srv)
{
	const struct djinn_hdr h = { .magic = DJINN_MAGIC,
				     .version = DJINN_PROTO_VERSION,
				     .type = DJINN_MSG_GOAWAY,
				     .flags = DJINN_F_RESPONSE };
	unsigned int told = 0, nr = 0;
	uint8_t drop[4096];
	struct conn *c;

	list_for_each_entry(c, &srv->conns, node) {
		if (!c->tls)
			continue;
		nr++;
		if (!list_empty(&c->outq) || !list_empty(&c->zcwait) ||
		    tls_send_now(c->tls, &h, sizeof(h)))
			continue;
		tls_close_notify(c->tls);
		/* A socket closed with bytes unread is reset, and a reset
		 * drops what is still to be sent: the GOAWAY. What the
		 * client sent meanwhile is not run anyway. */
		while (recv(c->fd, drop, sizeof(drop), MSG_DONTWAIT) > 0)
			;
		shutdown(c->fd, SHUT_WR);
		told++;
	}
	if (nr)
		log_info("restart: %u of %u TLS connections told GOAWAY", told,
			 nr);
	/* and a moment for it to leave: until each send queue is empty,
	 * 200 ms at most */
	for (int i = 0; told && i < 200; i++) {
		bool queued = false;

		list_for_each_entry(c, &srv->conns, node) {
			int outq = 0;

			if (c->tls && !ioctl(c->fd, SIOCOUTQ, &outq) && outq)
				queued = true;
		}
		if (!queued)
			break;
		usleep(1000);
	}
}

/* /dev/djinn's file, where the kernel leases live, or -1 (user leases). */
static int kmod_fd(struct server *srv)
{
	struct lease_provider *lp = srv->sessions.leases;

	return lp->ops->file ? lp->ops->file(lp) : -1;
}

/* Device @d's pool, whose pieces the record names. */
static int pool_fd(struct device *d)
{
	struct vmu_provider *prov = d->backend->provider;

	return prov->ops->file(prov);
}

/* Device @d's swap arena, or -1. */
static int arena_fd(struct device *d)
{
	struct vmu_provider *prov = d->backend->provider;
	uint64_t size;

	return prov->ops->swap_file ? prov->ops->swap_file(prov, &size) : -1;
}

bool restart_keep_files(struct server *srv)
{
	bool ok = true;
	char name[24];

	for (unsigned int d = 0; d < srv->nr_dev && ok; d++) {
		if (!svc_state_in_pool(&srv->dev[d]))
			continue;
		snprintf(name, sizeof(name), "pool-%u", d);
		ok = fdstore_has(name) ||
		     fdstore_keep(name, pool_fd(&srv->dev[d]), false);
		snprintf(name, sizeof(name), "swap-%u", d);
		if (ok && arena_fd(&srv->dev[d]) >= 0 && !fdstore_has(name))
			ok = fdstore_keep(name, arena_fd(&srv->dev[d]), false);
	}
	if (ok && kmod_fd(srv) >= 0 && !fdstore_has(RESTART_KMOD_FD))
		ok = fdstore_keep(RESTART_KMOD_FD, kmod_fd(srv), false);
	return ok;
}

void restart_forget_files(struct server *srv)
{
	char name[24];

	for (unsigned int d = 0; d < srv->nr_dev; d++) {
		snprintf(name, sizeof(name), "pool-%u", d);
		fdstore_forget(name);
		snprintf(name, sizeof(name), "swap-%u", d);
		fdstore_forget(name);
	}
	fdstore_forget(RESTART_KMOD_FD);
}

/* Into the store: the record and the pools it names, then each
 * connection (polled: one whose client hangs up meanwhile is dropped).
 * The listening sockets are there already. */
static void keep_in_store(struct restart *r, int rec_fd, int data_fd,
			  unsigned int nr_conns)
{
	struct server *srv = r->srv;
	unsigned int i = 0, kept = 0;
	struct conn *c;
	char name[24];

	/* the record first (the pools it names before it, unless the crash
	 * journal keeps them there already): a store short of room drops
	 * connections (their clients reconnect), not the sessions */
	if (!restart_keep_files(srv) ||
	    !fdstore_keep("state-data", data_fd, false) ||
	    !fdstore_keep("state", rec_fd, false)) {
		close(rec_fd);
		close(data_fd);
		restart_forget_files(srv);
		fdstore_forget("state-data");
		hand_over_fail(r, "the store did not take the record", false);
		return;
	}
	list_for_each_entry(c, &srv->conns, node) {
		if (c->tls)
			continue;
		snprintf(name, sizeof(name), "conn-%u", i++);
		kept += fdstore_keep(name, c->fd, true);
	}
	log_notice("restart: %llu sessions and %u of %u connections kept in "
		   "the fd store in %llu ms; exiting",
		   (unsigned long long)srv->sessions.nr, kept, nr_conns,
		   (unsigned long long)((loop_now() - r->t0) / NSEC_PER_MSEC));
	/* the record in the store is newer than the journal's */
	journal_handed_over(srv, false);
	sd_notify(0, "STATUS=state kept in the fd store; exiting");
	tls_goaway(srv);
	/* a dead device's: failed, for Restart=on-failure, which keeps
	 * the store for the next start */
	_exit(srv->exit_status);
}

/* The record: the sessions' entries, then a connection's for each one
 * that can change hands (all but TLS ones), numbered as sent. */
static int write_record(struct server *srv, int *rec_fd, int *data_fd,
			unsigned int *nr_conns, uint64_t *data_size)
{
	struct state_out o;
	struct conn *c;
	unsigned int i = 0;
	int ret;

	*data_size = svc_state_data_size(&srv->sessions);
	ret = state_out_begin(&o, *data_size);
	if (ret)
		return ret;
	ret = svc_state_save(&o, &srv->sessions, srv->dev, srv->nr_dev);
	if (ret) {
		state_out_abort(&o);
		return ret;
	}
	list_for_each_entry(c, &srv->conns, node) {
		struct djinn_state_conn *e;
		uint64_t len;

		if (c->tls)
			continue;
		len = sizeof(*e) + (uint64_t)c->nr_sessions * 8 +
		      c->backlog_len;
		if (len > UINT32_MAX) {
			state_out_abort(&o);
			return -E2BIG;
		}
		e = state_out_ent(&o, DJINN_STATE_CONN, (uint32_t)len);
		if (!e)
			break;
		e->index = i++;
		e->admin = c->admin;
		e->tcp = c->tcp;
		e->tcp_uid = c->tcp_uid;
		e->token = c->token;
		e->pid = (uint32_t)c->cred.pid;
		e->uid = (uint32_t)c->cred.uid;
		e->gid = (uint32_t)c->cred.gid;
		e->nr_sessions = c->nr_sessions;
		e->backlog = c->backlog_len;
		memcpy(e->peer, &c->peer, sizeof(e->peer));
		memcpy(e->tenant, c->tenant, sizeof(e->tenant));
		if (c->nr_sessions)
			memcpy(e + 1, c->sessions, (size_t)c->nr_sessions * 8);
		if (c->backlog_len)
			memcpy((uint8_t *)(e + 1) + (size_t)c->nr_sessions * 8,
			       c->backlog, c->backlog_len);
	}
	*nr_conns = i;
	return state_out_end(&o, rec_fd, data_fd);
}

/* Wait for the successor's word: 1 once it serves, 0 when it closed
 * first (it exited, or only looked), -ETIMEDOUT. */
static int successor_serves(struct restart *r)
{
	struct pollfd p = { .fd = r->sock, .events = POLLIN };
	char buf[64];
	ssize_t n;

	if (poll(&p, 1, RESTART_READY_S * 1000) != 1)
		return -ETIMEDOUT;
	n = recv(r->sock, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return !strcmp(buf, "serving");
}

/* @fd, named "@what-@i" (the name malloc()ed), as the @n-th to send. */
static int name_fd(char **names, int *fds, unsigned int *n, const char *what,
		   unsigned int i, int fd)
{
	names[*n] = malloc(24);
	if (!names[*n])
		return -ENOMEM;
	snprintf(names[*n], 24, "%s-%u", what, i);
	fds[(*n)++] = fd;
	return 0;
}

static void hand_over(struct restart *r)
{
	struct server *srv = r->srv;
	unsigned int nr_conns = 0, n = 0, k = 0, nr_pools = 0, max;
	int rec_fd = -1, data_fd = -1, ret;
	char **names = NULL, why[160];
	int *fds = NULL;
	struct conn *c;
	uint64_t t = loop_now(), size = 0;

	ret = write_record(srv, &rec_fd, &data_fd, &nr_conns, &size);
	if (!ret)
		log_notice(
			"restart: held in %llu ms; record of %llu MiB "
			"written in %llu ms",
			(unsigned long long)((t - r->t0) / NSEC_PER_MSEC),
			(unsigned long long)(size >> 20),
			(unsigned long long)((loop_now() - t) / NSEC_PER_MSEC));
	if (!ret && r->to_store) {
		keep_in_store(r, rec_fd, data_fd, nr_conns);
		return;
	}
	if (ret) {
		snprintf(why, sizeof(why), "the state record: %s%s",
			 strerror(-ret), ret == -EBUSY ? " (see the log)" : "");
		hand_over_fail(r, why, false);
		return;
	}
	max = SERVER_MAX_LISTEN + 3 + 3 + 2 * srv->nr_dev + nr_conns;
	names = calloc(max, sizeof(*names));
	fds = calloc(max, sizeof(*fds));
	if (!names || !fds) {
		ret = -ENOMEM;
		goto out;
	}
	n = listeners_stored(srv, names, fds, SERVER_MAX_LISTEN + 3);
	names[n] = "state";
	fds[n++] = rec_fd;
	names[n] = "state-data";
	fds[n++] = data_fd;
	if (kmod_fd(srv) >= 0) {
		names[n] = RESTART_KMOD_FD;
		fds[n++] = kmod_fd(srv);
	}
	k = n;
	for (unsigned int d = 0; d < srv->nr_dev && !ret; d++) {
		if (!svc_state_in_pool(&srv->dev[d]))
			continue;
		ret = name_fd(names, fds, &n, "pool", d, pool_fd(&srv->dev[d]));
		if (!ret && arena_fd(&srv->dev[d]) >= 0)
			ret = name_fd(names, fds, &n, "swap", d,
				      arena_fd(&srv->dev[d]));
	}
	if (ret)
		goto out;
	nr_pools = n - k;
	list_for_each_entry(c, &srv->conns, node) {
		if (c->tls)
			continue;
		ret = name_fd(names, fds, &n, "conn", n - k - nr_pools, c->fd);
		if (ret)
			goto out;
	}
	ret = fdstore_handover_send(r->sock, names, fds, n);
out:
	for (unsigned int i = k; names && i < n; i++)
		free(names[i]);
	free(names);
	free(fds);
	close(rec_fd);
	close(data_fd);
	if (ret) {
		snprintf(why, sizeof(why), "sending: %s", strerror(-ret));
		hand_over_fail(r, why, true);
		return;
	}
	log_notice("restart: %llu sessions and %u connections handed to pid %d "
		   "in %llu ms; waiting for it to serve",
		   (unsigned long long)srv->sessions.nr, nr_conns, (int)r->pid,
		   (unsigned long long)((loop_now() - r->t0) / NSEC_PER_MSEC));
	ret = successor_serves(r);
	if (ret <= 0) {
		/* one that still runs is stopped: it must not serve too */
		snprintf(why, sizeof(why),
			 ret ? "the successor did not serve within %d s: "
			       "killed" :
			       "the successor closed without serving",
			 RESTART_READY_S);
		hand_over_fail(r, why, ret != 0);
		return;
	}
	/* Everything is the successor's now: nothing here may touch a
	 * socket or end a session on its way out, but for the TLS
	 * connections it does not have. */
	log_notice("restart: pid %d serves; exiting", (int)r->pid);
	/* the successor keeps a journal of its own, if under a store */
	journal_handed_over(srv, true);
	tls_goaway(srv);
	_exit(0);
}

static uint64_t hold_tick(struct loop_timer *t, uint64_t now)
{
	struct restart *r = container_of(t, struct restart, timer);
	struct server *srv = r->srv;
	bool quiet = !svc_jobs(srv->dev, srv->nr_dev) &&
		     list_empty(&srv->closing) && listeners_held(srv);
	unsigned int busy = 0;
	struct conn *c, *n;

	list_for_each_entry_safe(c, n, &srv->conns, node) {
		if (!c->paused && conn_between_frames(c) && !c->handshaking &&
		    !c->identifying)
			conn_hold(c);
		if (!conn_quiet(c)) {
			quiet = false;
			busy++;
		}
	}
	if (quiet) {
		hand_over(r);
		return 0;
	}
	if (now >= r->deadline) {
		char why[128];

		snprintf(why, sizeof(why),
			 "%u connections and %u jobs still busy after %d s",
			 busy, svc_jobs(srv->dev, srv->nr_dev),
			 RESTART_QUIESCE_S);
		hand_over_fail(r, why, false);
		return 0;
	}
	return HOLD_TICK_NS;
}

static struct restart *restart_begin(struct server *srv)
{
	struct restart *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->srv = srv;
	r->sock = r->pidfd = -1;
	r->t0 = loop_now();
	r->deadline = r->t0 + RESTART_QUIESCE_S * NSEC_PER_SEC;
	r->timer.fn = hold_tick;
	INIT_LIST_HEAD(&r->timer.node);
	srv->restart = r;
	srv->term_pending = false;
	/* new clients wait in the backlog, for whichever djinnd serves
	 * next; leases do not run out while HEARTBEATs wait unread */
	listeners_hold(srv, true);
	session_table_hold_leases(&srv->sessions, true);
	loop_timer_add(&srv->loop, &r->timer, r->t0);
	return r;
}

void restart_hand_over(struct server *srv, int sock, pid_t pid)
{
	struct restart *r;

	if (srv->restart || srv->draining) {
		log_warn("restart: pid %d: %s already; refused", (int)pid,
			 srv->restart ? "handing over" : "draining");
		close(sock);
		return;
	}
	r = restart_begin(srv);
	if (!r) {
		log_err("restart: pid %d: out of memory; refused", (int)pid);
		close(sock);
		return;
	}
	r->sock = sock;
	r->pid = pid;
	r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	log_notice("restart: handing over to pid %d: %llu sessions, %u "
		   "connections held between frames",
		   (int)pid, (unsigned long long)srv->sessions.nr,
		   srv->nr_conns);
}

bool restart_to_store(struct server *srv)
{
	struct restart *r;

	if (srv->restart || !fdstore_present())
		return false;
	r = restart_begin(srv);
	if (!r)
		return false;
	r->to_store = true;
	log_notice("restart: keeping the state in the fd store: %llu "
		   "sessions, %u connections held between frames",
		   (unsigned long long)srv->sessions.nr, srv->nr_conns);
	return true;
}

/* ---------------------------------------------------------------------- */
/* Restoring */

/* Whether TCP socket @fd's peer is the address @peer holds. */
static bool peer_is(int fd, const uint8_t *peer)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	if (getpeername(fd, (struct sockaddr *)&sa, &len))
		return false;
	return !memcmp(&sa, peer,
		       sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
						  sizeof(struct sockaddr_in));
}

static void restore_conn(struct server *srv, const struct djinn_state_conn *e)
{
	const uint64_t *ids = (const void *)(e + 1);
	const uint8_t *backlog = (const uint8_t *)(ids + e->nr_sessions);
	char name[24];
	struct conn *c;
	int fd;

	snprintf(name, sizeof(name), "conn-%u", e->index);
	fd = fdstore_take(name);
	if (fd < 0) {
		log_warn("restart: %s was not passed: its client reconnects",
			 name);
		return;
	}
	fdstore_forget(name);
	if (e->tcp && !peer_is(fd, e->peer)) {
		log_warn("restart: %s: not connected to the peer the record "
			 "names: closed",
			 name);
		close(fd);
		return;
	}
	/* the admin socket's rules as they are now */
	if (e->admin && !listeners_admin_peer_ok(srv, fd))
		return;
	c = conn_create(srv, fd, e->admin, e->tcp);
	if (!c) {
		close(fd);
		return;
	}
	if (e->token) {
		/* its tenant is the token's it sent (or none yet), never
		 * its uid's */
		c->token = true;
		memcpy(c->tenant, e->tenant, sizeof(c->tenant));
		c->tenant[sizeof(c->tenant) - 1] = 0;
	} else if (c->tcp) {
		/* as it was identified when it was accepted */
		c->identifying = false;
		c->tcp_uid = e->tcp_uid;
		c->cred.pid = (pid_t)e->pid;
		c->cred.uid = (uid_t)e->uid;
		c->cred.gid = (gid_t)e->gid;
		memcpy(c->tenant, e->tenant, sizeof(c->tenant));
		c->tenant[sizeof(c->tenant) - 1] = 0;
	}
	if (c->tenant[0])
		conn_tenant_count(c);
	for (uint32_t i = 0; i < e->nr_sessions; i++) {
		struct session *s = session_get(&srv->sessions, ids[i]);

		/* a session the record had, of this connection's tenant or
		 * of a tenant it is a delegate of (as ATTACH would) */
		if (s && (!strcmp(s->tenant, c->tenant) ||
			  (!c->tcp && !c->token &&
			   tenant_delegate(&srv->sessions.lim, s->tenant,
					   c->cred.uid))))
			conn_attach(c, ids[i]);
		if (s)
			session_put(s);
	}
	/* held until djinnd serves (restart_serving()); what it had
	 * received waits in its backlog as a paused connection's does */
	c->paused = true;
	if (e->backlog)
		conn_backlog_add(c, backlog, e->backlog);
}

/* A predecessor's record, from before the devices open to the restore */
struct restart_in {
	struct state_in in;
	int rec_fd, data_fd;
	int pools[DEVICE_MAX]; /* "pool-N" by device index, or -1 */
	int swaps[DEVICE_MAX]; /* "swap-N" */
	uint64_t t0;
};

/* Whether this djinnd will keep a crash journal (net/journal.h), which
 * keeps the pools and /dev/djinn's file in the store, as they are. */
static bool journal_wanted(const struct server *srv)
{
	return fdstore_present() && !srv->cfg.no_crash_journal;
}

/* The store lets go of the record and its pools: taken for good (with
 * @keep, the pools stay: the journal keeps them). */
static void record_forget(const struct restart_in *r, bool keep)
{
	char name[24];

	fdstore_forget("state");
	fdstore_forget("state-data");
	if (keep)
		return;
	fdstore_forget(RESTART_KMOD_FD);
	for (uint32_t i = 0; r->in.hdr && i < r->in.nr_pools; i++) {
		uint32_t dev = r->in.pools[i]->device;

		snprintf(name, sizeof(name), "%s-%u",
			 dev & DJINN_STATE_SWAP_ARENA ? "swap" : "pool",
			 dev & ~DJINN_STATE_SWAP_ARENA);
		fdstore_forget(name);
	}
}

static void record_close(struct restart_in *r)
{
	if (r->in.hdr)
		state_in_close(&r->in);
	for (unsigned int i = 0; i < DEVICE_MAX; i++) {
		if (r->pools[i] >= 0)
			close(r->pools[i]);
		if (r->swaps[i] >= 0)
			close(r->swaps[i]);
	}
	if (r->rec_fd >= 0)
		close(r->rec_fd);
	if (r->data_fd >= 0)
		close(r->data_fd);
	free(r);
}

/* When the record in @fd was written (CLOCK_MONOTONIC), or 0. */
static uint64_t written(int fd)
{
	struct djinn_state_hdr h;

	return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) ?
		       h.written_ns :
		       0;
}

/*
 * The crash journals passed from the store (a predecessor's; more than
 * one only if a djinnd died before it could have the store forget the
 * one before): each taken, the store to forget each once this djinnd's
 * own is in (srv->journal_prev, net/journal.h); the newest record in
 * force among them restored, copied into @r's two fds. 0 when there is
 * one to restore. Only without a planned restart's record, which is
 * newer (fdstore_retain() drops the journals then).
 */
static int journal_open(struct server *srv, struct restart_in *r)
{
	char name[FDSTORE_NAME_MAX + 1], msg[256], best[FDSTORE_NAME_MAX + 1];
	unsigned int n = 0;
	int jfd, found = -ENOENT;

	while ((jfd = fdstore_take_prefix(JOURNAL_FD_PREFIX, name,
					  sizeof(name))) >= 0) {
		char **prev =
			realloc(srv->journal_prev, (n + 3) * sizeof(*prev));
		char lname[FDSTORE_NAME_MAX + 1];
		int rec_fd, data_fd, lfd, ret;

		journal_logits_name(lname, sizeof(lname), name);
		lfd = fdstore_take(lname);
		ret = journal_record(jfd, lfd, &rec_fd, &data_fd, msg,
				     sizeof(msg));
		close(jfd);
		if (lfd >= 0)
			close(lfd);
		if (prev) {
			srv->journal_prev = prev;
			prev[n] = strdup(name);
			n += prev[n] != NULL;
			prev[n] = lfd >= 0 ? strdup(lname) : NULL;
			n += prev[n] != NULL;
			prev[n] = NULL;
		}
		if (ret && ret != -ENOENT)
			log_err("restart: the crash journal %s cannot be "
				"read: %s",
				name, msg);
		if (ret)
			continue;
		if (!found && written(rec_fd) <= written(r->rec_fd)) {
			close(rec_fd);
			close(data_fd);
			continue;
		}
		if (!found) {
			close(r->rec_fd);
			close(r->data_fd);
		}
		r->rec_fd = rec_fd;
		r->data_fd = data_fd;
		snprintf(best, sizeof(best), "%s", name);
		found = 0;
	}
	if (!found)
		log_notice("restart: djinnd stopped without handing its state "
			   "over (a crash): restoring the record in force in "
			   "%s",
			   best);
	return found;
}

int restart_record_open(struct server *srv)
{
	struct restart_in *r;
	char msg[256], name[24];
	int ret = 0;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (unsigned int i = 0; i < DEVICE_MAX; i++)
		r->pools[i] = r->swaps[i] = -1;
	r->t0 = loop_now();
	r->rec_fd = fdstore_take("state");
	r->data_fd = fdstore_take("state-data");
	if (r->rec_fd < 0 && r->data_fd < 0 && journal_open(srv, r)) {
		free(r);
		return 0;
	}
	if (r->rec_fd < 0 || r->data_fd < 0) {
		log_err("restart: only one of the state's two fds was passed: "
			"nothing restored");
		ret = -EBADMSG;
		goto fail;
	}
	ret = state_in_open(&r->in, r->rec_fd, r->data_fd, msg, sizeof(msg));
	if (ret) {
		log_err("restart: state record refused: %s", msg);
		goto fail;
	}
	/* each device's pool that the record says where its data is, and
	 * swap arena, where its swapped-out data is */
	for (uint32_t i = 0; i < r->in.nr_pools; i++) {
		uint32_t dev = r->in.pools[i]->device;
		bool arena = dev & DJINN_STATE_SWAP_ARENA;
		int fd;

		dev &= ~DJINN_STATE_SWAP_ARENA;
		snprintf(name, sizeof(name), "%s-%u", arena ? "swap" : "pool",
			 dev);
		fd = dev < DEVICE_MAX ? fdstore_take(name) : -1;
		if (fd < 0) {
			log_err("restart: state record refused: the %s of "
				"its device %u (%s) was not passed",
				arena ? "swap arena" : "pool", dev, name);
			ret = -EBADMSG;
			goto fail;
		}
		if (arena)
			r->swaps[dev] = fd;
		else
			r->pools[dev] = fd;
	}
	/* the store keeps them until the restore: a start that fails
	 * before it leaves them for the next one */
	srv->restore = r;
	return 0;
fail:
	record_forget(r, false);
	record_close(r);
	/* from a store djinnd starts afresh; a --handover predecessor
	 * serves on */
	return fdstore_handed_state() ? ret : 0;
}

/* Device @index's pool, or with @arena its swap arena, handed out. */
static int take_file(struct server *srv, unsigned int index, bool arena,
		     uint64_t *granularity, const struct vmu_piece **keep,
		     unsigned int *nr)
{
	struct restart_in *r = srv->restore;
	const struct djinn_state_pool *p;
	int *fds = r ? (arena ? r->swaps : r->pools) : NULL, fd;

	if (!fds || index >= DEVICE_MAX || fds[index] < 0)
		return -1;
	p = state_in_pool(&r->in, index | (arena ? DJINN_STATE_SWAP_ARENA : 0));
	fd = fds[index];
	fds[index] = -1;
	*granularity = p->granularity;
	*keep = (const struct vmu_piece *)(p + 1);
	*nr = p->nr;
	return fd;
}

int restart_pool(struct server *srv, unsigned int index, uint64_t *granularity,
		 const struct vmu_piece **keep, unsigned int *nr)
{
	return take_file(srv, index, false, granularity, keep, nr);
}

int restart_swap(struct server *srv, unsigned int index,
		 const struct vmu_piece **keep, unsigned int *nr)
{
	uint64_t granularity;

	return take_file(srv, index, true, &granularity, keep, nr);
}

void restart_abandon(struct server *srv, bool forget)
{
	if (srv->restore && forget)
		record_forget(srv->restore, false);
	if (srv->restore)
		record_close(srv->restore);
	srv->restore = NULL;
}

/* A record not restored, from a store (its djinnd is gone): the proxies
 * its sessions had on the passed /dev/djinn end (a --handover
 * predecessor serves on with them instead). */
static void drop_kernel_sessions(struct server *srv, struct restart_in *r)
{
	struct lease_provider *lp = srv->sessions.leases;
	const struct djinn_state_session *e;
	uint32_t type, len;

	if (!lp->ops->drop)
		return;
	state_in_rewind(&r->in);
	while ((e = state_in_next(&r->in, &type, &len)))
		if (type == DJINN_STATE_SESSION && e->kid && !e->kbound)
			lp->ops->drop(lp, e->kid);
}

int restart_restore(struct server *srv)
{
	struct restart_in *r = srv->restore;
	const void *p;
	uint32_t type, len;
	char msg[256];
	int ret = 0;

	if (!r)
		goto unkeep;
	record_forget(r, journal_wanted(srv));
	ret = svc_state_restore(&r->in, &srv->sessions, srv->dev, srv->nr_dev,
				msg, sizeof(msg));
	if (ret) {
		log_err("restart: state not restored: %s", msg);
		if (!fdstore_handed_state())
			drop_kernel_sessions(srv, r);
	} else {
		state_in_rewind(&r->in);
		while ((p = state_in_next(&r->in, &type, &len))) {
			if (type == DJINN_STATE_CONN)
				restore_conn(srv, p);
		}
		log_notice("restart: %u connections restored from pid %u's "
			   "record, %llu MiB of data in place and %llu MiB "
			   "copied; all in %llu ms",
			   r->in.hdr->nr_conns, r->in.hdr->pid,
			   (unsigned long long)(state_in_in_place(&r->in) >>
						20),
			   (unsigned long long)(r->in.hdr->data_size >> 20),
			   (unsigned long long)((loop_now() - r->t0) /
						NSEC_PER_MSEC));
	}
	restart_abandon(srv, false);
	/* undone for a --handover predecessor, which serves on: this djinnd
	 * exits, and what it kept stays the predecessor's, untouched */
	if (ret && fdstore_handed_state())
		return ret;
unkeep:
	/* what the predecessor held and no restored object took is the
	 * devices' own again */
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct vmu_provider *prov = srv->dev[i].backend->provider;

		if (prov->ops->unkeep)
			prov->ops->unkeep(prov);
	}
	return ret && fdstore_handed_state() ? ret : 0;
}

void restart_settled(struct server *srv)
{
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct vmu_provider *prov = srv->dev[i].backend->provider;

		if (prov->ops->swap_trim)
			prov->ops->swap_trim(prov);
	}
}

void restart_serving(struct server *srv)
{
	struct conn *c, *n;

	list_for_each_entry_safe(c, n, &srv->conns, node)
		conn_resume(c);
}
