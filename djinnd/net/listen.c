// SPDX-License-Identifier: MIT
/*
 * Listeners and new connections: the sockets djinnd listens on (unix,
 * TCP, TLS, the admin socket, /metrics), accepting, who a new peer is
 * (tenant.h) and whether it may stay (per-uid, per-address and tenant
 * caps). See conn.h for the shape of it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "addrkey.h"
#include "array_size.h"
#include "log.h"
#include "server.h"
#include "net/conn.h"
#include "net/fdstore.h"
#include "net/restart.h"
#include "net/ident.h"
#include "net/tls.h"
#include "session/lease.h"
#include "session/session.h"
#include "session/tenant.h"

/* TCP keepalive on accepted sockets: probes after 60 s of silence, every
 * 10 s, 6 unanswered ones drop the peer (about 2 minutes). */
#define KEEPALIVE_IDLE 60
#define KEEPALIVE_INTVL 10
#define KEEPALIVE_CNT 6

struct listener {
	struct io_src src;
	struct server *srv;
	struct list_head node;
	struct loop_timer retry; /* accept again after running out of fds */
	uint64_t last_warn;
	int fd;
	bool admin, metrics, tcp, tls, multishot;
	bool token; /* server.token_auth's: tenants by AUTH only */
	/* in the service manager's fd store, or handed to a successor
	 * (net/fdstore.h): its unix path stays at exit */
	bool stored;
	bool borrowed; /* passed by a predecessor; this djinnd not serving */
	/* a restart holds it: not accepting (connections wait in the
	 * backlog for the successor); whether an accept is outstanding */
	bool held, accepting;
	bool handover; /* --handover's socket: a successor connects */
	char name[FDSTORE_NAME_MAX + 1]; /* in the store; "" for none */
	/* the admin socket's group (server.admin_group), when it has one */
	bool has_gid;
	gid_t gid;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static bool peer_is_loopback(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getpeername(fd, (struct sockaddr *)&ss, &len))
		return false;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >>
			24) == 127;
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a =
			&((struct sockaddr_in6 *)&ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/* Dead TCP peers (a host that went away) are found and dropped. */
static void keepalive(int fd)
{
	int on = 1, idle = KEEPALIVE_IDLE, intvl = KEEPALIVE_INTVL,
	    cnt = KEEPALIVE_CNT;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The peer addresses of two TCP connections are the same host (ports
 * aside; an IPv4-mapped IPv6 address is its IPv4 one). */
/* Whether two remote TCP peers are in one address block
 * (server.addr_prefix_v4 and _v6, lib/addrkey.h). */
static bool same_block(const struct server *srv,
		       const struct sockaddr_storage *a,
		       const struct sockaddr_storage *b)
{
	uint8_t x[16], y[16];

	return addr_key(a, srv->cfg.addr_prefix_v4, srv->cfg.addr_prefix_v6,
			x) &&
	       addr_key(b, srv->cfg.addr_prefix_v4, srv->cfg.addr_prefix_v6,
			y) &&
	       !memcmp(x, y, sizeof(x));
}

/* The peer's address in words, for messages. */
static const char *addr_str(const struct sockaddr_storage *ss, char *buf,
			    size_t len)
{
	const void *a = ss->ss_family == AF_INET ?
				(const void *)&((const struct sockaddr_in *)ss)
					->sin_addr :
				(const void *)&((const struct sockaddr_in6 *)ss)
					->sin6_addr;

	if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6)
		return "?";
	if (!inet_ntop(ss->ss_family, a, buf, (socklen_t)len))
		return "?";
	return buf;
}

/*
 * A new client connection over server.max_connections_per_uid (unix
 * sockets: its SO_PEERCRED uid) or server.max_connections_per_addr (TCP:
 * its peer address) is refused with -EUSERS and closed; live connections
 * count, closing ones and the admin socket's do not. True if refused.
 */
static bool conn_over_cap(struct conn *c)
{
	struct server *srv = c->srv;
	unsigned int n = 0, cap;
	struct conn *o;
	char buf[INET6_ADDRSTRLEN];
	bool by_uid;

	if (c->admin)
		return false;
	/* a local peer (unix, or loopback TCP whose owner sock_diag gave)
	 * by its uid, wherever in 127.0.0.0/8 it binds; a remote one by
	 * its address block; one of the token socket by none of them (its
	 * uid is shared by tenants that distrust each other): until its
	 * AUTH, among SERVER_TOKEN_PREAUTH, then by its tenant's quota */
	by_uid = !c->tcp || c->tcp_uid;
	cap = c->token ? SERVER_TOKEN_PREAUTH :
	      by_uid   ? srv->cfg.max_conns_per_uid :
			 srv->cfg.max_conns_per_addr;
	list_for_each_entry(o, &srv->conns, node) {
		if (o == c || o->admin || o->closing)
			continue;
		if (c->token ? o->token && !o->tenant[0] :
		    o->token ? false :
		    by_uid   ? (!o->tcp || o->tcp_uid) &&
				     o->cred.uid == c->cred.uid :
			     o->tcp && !o->tcp_uid &&
				     same_block(srv, &o->peer, &c->peer))
			n++;
	}
	if (n < cap)
		return false;
	srv->st.conns_refused++;
	if (c->handshaking) {
		/* An error frame would be plaintext in a TLS stream. */
		log_notice("conn %d: %u connections from %s already: closed "
			   "before its TLS handshake",
			   c->fd, n, addr_str(&c->peer, buf, sizeof(buf)));
		conn_close(c, true);
	} else if (c->token) {
		log_notice("conn %d: %u connections of the token socket "
			   "without AUTH already: refused",
			   c->fd, n);
		conn_refuse(c, NULL, -EUSERS,
			    "%u connections of this socket have not sent "
			    "AUTH yet, the limit: try again",
			    n);
	} else if (!by_uid) {
		log_notice("conn %d: %u connections from %s's block already: "
			   "refused",
			   c->fd, n, addr_str(&c->peer, buf, sizeof(buf)));
		conn_refuse(c, NULL, -EUSERS,
			    "%u connections from %s's address block already, "
			    "the limit (server.max_connections_per_addr)",
			    n, addr_str(&c->peer, buf, sizeof(buf)));
	} else {
		log_notice("conn %d: %u connections of uid %d already: refused",
			   c->fd, n, (int)c->cred.uid);
		conn_refuse(c, NULL, -EUSERS,
			    "%u connections of uid %d already, the limit "
			    "(server.max_connections_per_uid)",
			    n, (int)c->cred.uid);
	}
	return true;
}

/*
 * A new client connection of a tenant at its tenant.NAME.connections
 * quota is refused with -EDQUOT and closed; else it counts against the
 * quota until it is freed. True if refused.
 */
bool conn_over_tenant_quota(struct conn *c)
{
	struct server *srv = c->srv;
	const struct tenant_map *m;
	struct tenant_state *t;

	if (c->admin)
		return false;
	t = tenant_state_get(&srv->sessions, c->tenant);
	if (!t) {
		conn_refuse(c, NULL, -ENOMEM, "out of memory");
		return true;
	}
	m = tenant_map_find(&srv->sessions.lim, c->tenant);
	if (m && m->conns && t->conns >= m->conns) {
		srv->st.conns_refused++;
		log_notice("conn %d: %u connections of tenant %s already: "
			   "refused",
			   c->fd, t->conns, c->tenant);
		conn_refuse(c, NULL, -EDQUOT,
			    "%u connections of tenant %s open, its quota "
			    "(tenant.%s.connections)",
			    t->conns, c->tenant, c->tenant);
		tenant_state_drop(t);
		return true;
	}
	c->ts = t;
	t->conns++;
	return false;
}

/*
 * A TCP peer's tenant. On loopback the kernel knows who owns the peer's
 * socket (sock_diag): that uid's tenant, as for a unix client (its
 * groups are not known), found off the I/O thread (net/ident.h): the
 * connection waits, unread, for conn_ident_done(). Else the peer's
 * address: "tcp:ADDRESS".
 */
static void tcp_identify(struct conn *c, char *abuf, size_t len)
{
	if (c->no_zc) {
		c->identifying = true;
		snprintf(c->tenant, sizeof(c->tenant), "unknown");
		return;
	}
	snprintf(c->tenant, sizeof(c->tenant), "tcp:%s",
		 addr_str(&c->peer, abuf, len));
}

void conn_ident_done(struct conn *c, int ret, uid_t uid)
{
	struct server *srv = c->srv;
	char abuf[INET6_ADDRSTRLEN];

	c->identifying = false;
	if (c->closing) {
		conn_put(c);
		return;
	}
	if (ret) {
		/* A local peer is someone of this host: one whose owner is
		 * not known (it closed its socket already, which the kernel
		 * would report as root's) is refused, not taken for its
		 * address, whose tenant any local user could be. */
		log_warn("conn %d: loopback peer %s: no owner from "
			 "sock_diag (%s): closed",
			 c->fd, addr_str(&c->peer, abuf, sizeof(abuf)),
			 ret == -ESTALE ? "its socket is closed" :
					  strerror(-ret));
		conn_close(c, true);
		conn_put(c);
		return;
	}
	tenant_of(&srv->sessions.lim, uid, NULL, 0, c->tenant);
	c->cred.uid = uid; /* counted as the uid's (caps) */
	c->cred.pid = 0;
	c->tcp_uid = true;
	log_debug("conn %d: loopback peer of uid %d, tenant %s", c->fd,
		  (int)uid, c->tenant);
	if (!conn_over_cap(c) && !conn_over_tenant_quota(c))
		conn_recv_arm(c);
	conn_put(c);
}

/* A connection of a tls: listener: its tenant comes with the handshake
 * (a certificate) or after it (AUTH). */
static struct conn *conn_alloc(struct server *srv, int fd, bool admin, bool tcp,
			       bool tls);

static struct conn *conn_create_tls(struct server *srv, int fd)
{
	struct conn *c = conn_alloc(srv, fd, false, true, true);

	if (!c)
		return NULL;
	c->tls = tls_conn_new(srv, fd);
	if (!c->tls) {
		c->fd = -1; /* the caller's, as on the other failures */
		conn_close(c, true);
		return NULL;
	}
	return c;
}

struct conn *conn_create(struct server *srv, int fd, bool admin, bool tcp)
{
	return conn_alloc(srv, fd, admin, tcp, false);
}

static struct conn *conn_alloc(struct server *srv, int fd, bool admin, bool tcp,
			       bool tls)
{
	char abuf[INET6_ADDRSTRLEN];
	socklen_t len = sizeof(struct ucred);
	struct conn *c;
	int one = 1;

	c = calloc(1, sizeof(*c));
	if (!c || (!srv->br && !(c->rbuf = malloc(RBUF_SIZE)))) {
		free(c);
		return NULL;
	}
	c->src.complete = conn_complete;
	c->srv = srv;
	c->fd = fd;
	c->admin = admin;
	c->tcp = tcp;
	c->no_zc = !tcp;
	c->refs = 1; /* the list's */
	INIT_LIST_HEAD(&c->outq);
	INIT_LIST_HEAD(&c->zcwait);
	INIT_LIST_HEAD(&c->read_wait);
	INIT_LIST_HEAD(&c->read_node);
	c->active = c->born = loop_now();
	if (tcp) {
		socklen_t plen = sizeof(c->peer);

		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		keepalive(fd);
		if (getpeername(fd, (struct sockaddr *)&c->peer, &plen))
			c->peer.ss_family = AF_UNSPEC;
		/* On loopback the kernel copies zero-copy pages again when it
		 * delivers them (skb_copy_ubufs): plain sends are faster. */
		c->no_zc = peer_is_loopback(fd);
		if (!tls)
			tcp_identify(c, abuf, sizeof(abuf));
	} else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len)) {
		c->cred.uid = (uid_t)-1;
		snprintf(c->tenant, sizeof(c->tenant), "unknown");
	} else {
		gid_t gids[64];
		unsigned int n = tenant_peer_groups(fd, c->cred.gid, gids,
						    ARRAY_SIZE(gids));

		tenant_of(&srv->sessions.lim, c->cred.uid, gids, n, c->tenant);
	}
	list_add_tail(&c->node, &srv->conns);
	srv->nr_conns++;
	srv->nr_admin += admin;
	srv->st.conns_accepted++;
	log_debug("conn %d: %s%s, pid %d uid %d, tenant %s", fd,
		  tls ? "tls" :
		  tcp ? "tcp" :
			"unix",
		  admin ? " (admin)" : "", (int)c->cred.pid, (int)c->cred.uid,
		  c->tenant);
	return c;
}

/*
 * The admin socket's peer, by its credentials rather than the socket
 * file's mode alone: root, djinnd's own uid, or a member of the admin
 * group. Anyone else is closed at once with a log line (whatever the
 * file's mode became, by a mistake or a chmod).
 */
static bool admin_peer_ok(struct listener *ls, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	gid_t gids[64];
	unsigned int n;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		log_warn("admin socket: no peer credentials: %s: closed",
			 strerror(errno));
		close(fd);
		return false;
	}
	if (cr.uid == 0 || cr.uid == geteuid())
		return true;
	n = tenant_peer_groups(fd, cr.gid, gids, ARRAY_SIZE(gids));
	for (unsigned int i = 0; ls->has_gid && i < n; i++)
		if (gids[i] == ls->gid)
			return true;
	log_warn("admin socket: pid %d uid %d is neither root nor in the "
		 "admin group: closed",
		 (int)cr.pid, (int)cr.uid);
	close(fd);
	return false;
}

bool listeners_admin_peer_ok(struct server *srv, int fd)
{
	struct listener *ls;

	list_for_each_entry(ls, &srv->listeners, node)
		if (ls->admin)
			return admin_peer_ok(ls, fd);
	log_warn("admin connection: no admin socket is configured: closed");
	close(fd);
	return false;
}

void conn_tenant_count(struct conn *c)
{
	if (c->admin)
		return;
	c->ts = tenant_state_get(&c->srv->sessions, c->tenant);
	if (c->ts)
		c->ts->conns++;
}

static void listener_arm(struct listener *ls);

/* Its accept ends (-ECANCELED). */
static void listener_cancel(struct listener *ls)
{
	struct io_uring_sqe *sqe = loop_sqe(&ls->srv->loop, NULL, 0);

	if (sqe)
		io_uring_prep_cancel64(
			sqe, (uint64_t)(uintptr_t)&ls->src | TAG_ACCEPT, 0);
}

void listeners_hold(struct server *srv, bool hold)
{
	struct listener *ls;

	list_for_each_entry(ls, &srv->listeners, node) {
		if (ls->fd < 0 || ls->metrics || ls->handover)
			continue;
		ls->held = hold;
		if (!hold) {
			listener_arm(ls);
			continue;
		}
		if (ls->accepting)
			listener_cancel(ls);
	}
}

bool listeners_held(const struct server *srv)
{
	const struct listener *ls;

	list_for_each_entry(ls, &srv->listeners, node)
		if (ls->held && ls->accepting)
			return false;
	return true;
}

void listeners_own(struct server *srv)
{
	struct listener *ls;

	list_for_each_entry(ls, &srv->listeners, node)
		ls->borrowed = false;
}

unsigned int listeners_stored(struct server *srv, char **names, int *fds,
			      unsigned int max)
{
	struct listener *l;
	unsigned int n = 0;

	list_for_each_entry(l, &srv->listeners, node)
		if (l->fd >= 0 && l->name[0] && n < max) {
			names[n] = l->name;
			fds[n++] = l->fd;
		}
	return n;
}

/* A successor connected to --handover's socket: if it is djinnd's own
 * uid or root, it is sent every listening socket and the state
 * (net/restart.h). */
static void handover_serve(struct listener *ls, int fd)
{
	struct server *srv = ls->srv;
	struct timeval tv = { .tv_sec = 1 };
	struct ucred cr = { 0 };
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
	    (cr.uid && cr.uid != geteuid())) {
		log_warn("handover: pid %d (uid %u) may not take djinnd's "
			 "sockets: refused",
			 (int)cr.pid, (unsigned int)cr.uid);
		close(fd);
		return;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	restart_hand_over(srv, fd, cr.pid);
}

static void conn_new(struct listener *ls, int fd)
{
	struct server *srv = ls->srv;
	struct conn *c;

	if (ls->metrics) {
		metrics_accept(srv, fd);
		return;
	}
	if (srv->draining) {
		close(fd);
		return;
	}
	if (ls->handover) {
		handover_serve(ls, fd);
		return;
	}
	if (ls->admin) {
		/* slots of its own: clients filling max_connections do not
		 * lock djinnctl out; its peers are checked first */
		if (srv->nr_admin >= SERVER_ADMIN_CONNS) {
			log_warn("admin socket: %u connections already: closed",
				 srv->nr_admin);
			close(fd);
			return;
		}
		if (!admin_peer_ok(ls, fd))
			return;
	} else if (srv->nr_conns - srv->nr_admin >= srv->cfg.max_conns) {
		close(fd);
		return;
	}
	if (ls->tls)
		c = conn_create_tls(srv, fd);
	else
		c = conn_create(srv, fd, ls->admin, ls->tcp);
	if (!c) {
		close(fd);
		return;
	}
	if (c->tls) {
		/* Its refusals would be plaintext in a TLS stream: over
		 * the address's cap it is closed before any handshake. */
		c->handshaking = true;
		if (conn_over_cap(c))
			return;
		conn_get(c); /* the handshake thread's */
		tls_handshake_start(c->tls, c);
		return;
	}
	if (c->identifying) {
		ident_lookup(c); /* conn_ident_done() goes on */
		return;
	}
	if (ls->token) {
		/* HELLO and AUTH until a token names its tenant, within
		 * server.frame_timeout; among SERVER_TOKEN_PREAUTH until then
		 * (conn_over_cap()), by its tenant's quota after */
		c->token = true;
		memset(c->tenant, 0, sizeof(c->tenant));
		if (!conn_over_cap(c))
			conn_recv_arm(c);
		return;
	}
	if (conn_over_cap(c) || conn_over_tenant_quota(c))
		return;
	conn_recv_arm(c);
}

static void listener_arm(struct listener *ls)
{
	struct io_uring_sqe *sqe;

	if (ls->held || ls->accepting)
		return;
	sqe = loop_sqe(&ls->srv->loop, &ls->src, TAG_ACCEPT);
	if (!sqe) {
		loop_retry(&ls->srv->loop, &ls->retry);
		return;
	}
	if (ls->multishot)
		io_uring_prep_multishot_accept(sqe, ls->fd, NULL, NULL,
					       SOCK_CLOEXEC);
	else
		io_uring_prep_accept(sqe, ls->fd, NULL, NULL, SOCK_CLOEXEC);
	ls->accepting = true;
}

static uint64_t listener_retry(struct loop_timer *t, uint64_t now)
{
	struct listener *ls = container_of(t, struct listener, retry);

	if (ls->fd >= 0)
		listener_arm(ls);
	return 0;
}

static void listener_complete(struct io_src *src, struct io_uring_cqe *cqe,
			      unsigned int tag)
{
	struct listener *ls = container_of(src, struct listener, src);
	bool out_of_fds = cqe->res == -EMFILE || cqe->res == -ENFILE;
	uint64_t now = loop_now();

	if (!(cqe->flags & IORING_CQE_F_MORE))
		ls->accepting = false;
	if (cqe->res >= 0) {
		conn_new(ls, cqe->res);
	} else if (cqe->res != -ECANCELED &&
		   now - ls->last_warn > NSEC_PER_SEC) {
		ls->last_warn = now; /* at most a line a second */
		log_warn("accept: %s", strerror(-cqe->res));
	}
	if (cqe->res == -ECANCELED || ls->fd < 0)
		return;
	if (out_of_fds) {
		/* Accepting again at once would spin: wait for fds. */
		if (list_empty(&ls->retry.node))
			loop_timer_add(&ls->srv->loop, &ls->retry,
				       now + 100 * NSEC_PER_MSEC);
		return;
	}
	if (!(cqe->flags & IORING_CQE_F_MORE))
		listener_arm(ls);
}

/* The admin socket's group (server.admin_group, else "djinn"), given to
 * the socket at @path: its peers are checked against it at accept. */
static void admin_group(struct listener *ls, const char *path)
{
	struct group *g;

	if (!ls->admin)
		return;
	g = getgrnam(ls->srv->cfg.admin_group ? ls->srv->cfg.admin_group :
						"djinn");
	if (g && !lchown(path, (uid_t)-1, g->gr_gid) && !chmod(path, 0660)) {
		ls->has_gid = true;
		ls->gid = g->gr_gid;
	}
}

static int listen_unix(struct listener *ls, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	char *slash;
	mode_t old;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(ls->path, path);
	/* Make the socket's directory (./run/, /run/djinn/) if missing. */
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		mkdir(dir, 0755);
	}
	fd = socket(AF_UNIX,
		    (ls->handover ? SOCK_SEQPACKET : SOCK_STREAM) |
			    SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	unlink(path); /* a stale socket from an earlier run */
	/* Made with its mode: the admin socket its owner's alone (0600)
	 * until its group is set below, so that no one else can connect in
	 * between, the handover socket for good; the clients' open to every
	 * user (0666). */
	old = umask(ls->admin || ls->handover ? 0177 : 0111);
	ret = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
	umask(old);
	if (!ret && listen(fd, SOMAXCONN))
		ret = -errno;
	if (ret) {
		close(fd);
		return ret;
	}
	admin_group(ls, path);
	ls->fd = fd;
	return 0;
}

/* TCP listener @spec ("HOST:PORT", "[V6]:PORT", ":PORT" for loopback)
 * resolved: 0 and *@ai (freeaddrinfo() it), or -errno. */
static int tcp_resolve(const char *spec, struct addrinfo **ai)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	char host[256], *port;

	if (strlen(spec) >= sizeof(host))
		return -ENAMETOOLONG;
	strcpy(host, spec);
	port = strrchr(host, ':');
	if (!port)
		return -EINVAL;
	*port++ = 0;
	if (host[0] == '[' && port[-2] == ']') { /* [::1]:port */
		port[-2] = 0;
		memmove(host, host + 1, strlen(host));
	}
	return getaddrinfo(*host ? host : "127.0.0.1", port, &hints, ai) ?
		       -EINVAL :
		       0;
}

/* Whether passed socket @fd listens where @spec says, as @ls would
 * bind it: its family, type and address (a unix one's path there, and
 * a socket still). */
static bool passed_matches(struct listener *ls, int fd, const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int on = 0, type = 0;
	socklen_t olen = sizeof(on), tlen = sizeof(type);
	struct addrinfo *ai;
	struct stat st;
	bool ok;

	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &olen) || !on ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len))
		return false;
	if (!strncmp(spec, "unix:", 5)) {
		const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;

		return ss.ss_family == AF_UNIX &&
		       type == (ls->handover ? SOCK_SEQPACKET : SOCK_STREAM) &&
		       len > offsetof(struct sockaddr_un, sun_path) &&
		       !strncmp(un->sun_path, spec + 5, sizeof(un->sun_path)) &&
		       !lstat(spec + 5, &st) && S_ISSOCK(st.st_mode);
	}
	if (type != SOCK_STREAM || tcp_resolve(spec + 4, &ai))
		return false;
	ok = ai->ai_family == ss.ss_family && ai->ai_addrlen == len &&
	     !memcmp(ai->ai_addr, &ss, len);
	freeaddrinfo(ai);
	return ok;
}

/* A listening socket passed at start (net/fdstore.h) for @spec, taken
 * instead of binding: 0, or -ENOENT (none, or one that does not listen
 * where @spec says: dropped, and bound anew). */
static int listen_passed(struct listener *ls, const char *name,
			 const char *spec)
{
	int fd = fdstore_take(name);

	if (fd < 0)
		return -ENOENT;
	if (!passed_matches(ls, fd, spec)) {
		log_warn("fd store: %s does not listen where %s says: "
			 "bound anew",
			 name, spec);
		fdstore_drop(name, fd);
		return -ENOENT;
	}
	if (!strncmp(spec, "unix:", 5)) {
		snprintf(ls->path, sizeof(ls->path), "%s", spec + 5);
		admin_group(ls, ls->path);
	} else {
		ls->tcp = true;
	}
	ls->fd = fd;
	return 0;
}

static int listen_tcp(struct listener *ls, const char *spec)
{
	struct addrinfo *ai;
	int fd, one = 1, ret;

	ret = tcp_resolve(spec, &ai);
	if (ret)
		return ret;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		freeaddrinfo(ai);
		return -errno;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
		ret = -errno;
		close(fd);
		freeaddrinfo(ai);
		return ret;
	}
	freeaddrinfo(ai);
	ls->fd = fd;
	ls->tcp = true;
	return 0;
}

enum listener_kind { LS_CLIENT, LS_ADMIN, LS_METRICS, LS_HANDOVER };

/* A listener's name in the fd store: this, then its spec, escaped */
static const char *const kind_prefix[] = { "client-", "admin-", "metrics-",
					   "handover-" };

/* Listen on @spec, as @kind: the socket passed at start under @name
 * (net/fdstore.h; "" for none), else a new one. */
static int listener_add(struct server *srv, const char *spec,
			enum listener_kind kind, const char *name)
{
	static const char *const what[] = { "", " (admin)", " (metrics)",
					    " (handover)" };
	struct listener *ls = calloc(1, sizeof(*ls));
	bool passed = false, is_unix;
	int ret;

	if (!ls)
		return -ENOMEM;
	ls->src.complete = listener_complete;
	ls->retry.fn = listener_retry;
	INIT_LIST_HEAD(&ls->retry.node);
	ls->srv = srv;
	ls->admin = kind == LS_ADMIN;
	ls->metrics = kind == LS_METRICS;
	ls->handover = kind == LS_HANDOVER;
	ls->fd = -1;
	ls->multishot = srv->loop.feat.multishot_accept;
	strcpy(ls->name, name); /* at most FDSTORE_NAME_MAX: fdstore_name() */
	is_unix = !strncmp(spec, "unix:", 5) && kind != LS_METRICS;
	if (!is_unix && strncmp(spec, "tcp:", 4) &&
	    (strncmp(spec, "tls:", 4) || kind != LS_CLIENT || !srv->tls)) {
		ret = -EINVAL;
	} else if (name[0] && !listen_passed(ls, name, spec)) {
		passed = true;
		ret = 0;
	} else {
		ret = is_unix ? listen_unix(ls, spec + 5) :
				listen_tcp(ls, spec + 4);
	}
	if (ret) {
		log_err("listen %s: %s", spec, strerror(-ret));
		free(ls);
		return ret;
	}
	ls->tls = !strncmp(spec, "tls:", 4);
	ls->token = kind == LS_CLIENT && srv->cfg.token_auth &&
		    !strcmp(spec, srv->cfg.token_auth);
	/* kept for the next djinnd (again if passed: a store that lost it
	 * has it back) */
	ls->stored = name[0] && fdstore_keep(name, ls->fd, false);
	/* a predecessor's (--handover) serves its path until this djinnd
	 * does: not this one's to remove before then */
	ls->borrowed = passed && srv->cfg.handover && !ls->stored;
	list_add_tail(&ls->node, &srv->listeners);
	listener_arm(ls);
	log_info("listening on %s%s%s", spec, what[kind],
		 passed ? ", passed at start" : "");
	return 0;
}

int listeners_open(struct server *srv)
{
	char admin[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
	char handover[sizeof(admin)];
	struct {
		const char *spec;
		enum listener_kind kind;
	} want[SERVER_MAX_LISTEN + 3];
	char names[ARRAY_SIZE(want)][FDSTORE_NAME_MAX + 1];
	const char *named[ARRAY_SIZE(want)];
	unsigned int n = 0, k = 0;
	int ret;

	msg_init(srv);
	conns_start(srv);
	for (unsigned int i = 0; i < srv->cfg.nr_listen; i++)
		want[n].spec = srv->cfg.listen[i], want[n++].kind = LS_CLIENT;
	if (srv->cfg.admin_socket) {
		snprintf(admin, sizeof(admin), "unix:%s",
			 srv->cfg.admin_socket);
		want[n].spec = admin, want[n++].kind = LS_ADMIN;
	}
	if (srv->cfg.metrics)
		want[n].spec = srv->cfg.metrics, want[n++].kind = LS_METRICS;
	if (srv->cfg.handover) {
		snprintf(handover, sizeof(handover), "unix:%s",
			 srv->cfg.handover);
		want[n].spec = handover, want[n++].kind = LS_HANDOVER;
	}
	/* each listener's name in the store ("" for one too long: bound
	 * anew each time, not kept); the passed fds no listener names go
	 * first, freeing their addresses */
	for (unsigned int i = 0; i < n; i++) {
		if (fdstore_name(names[i], sizeof(names[i]),
				 kind_prefix[want[i].kind], want[i].spec))
			names[i][0] = 0;
		else
			named[k++] = names[i];
	}
	fdstore_retain(named, k);
	ret = 0;
	for (unsigned int i = 0; !ret && i < n; i++)
		ret = listener_add(srv, want[i].spec, want[i].kind, names[i]);
	/* the state a predecessor passed, if any */
	/* nothing of a record that fails is restored: from a store,
	 * djinnd starts afresh (its connections are closed); from a
	 * --handover, the predecessor serves on */
	if (!ret)
		ret = restart_restore(srv);
	fdstore_done();
	return ret;
}

void listeners_close(struct server *srv)
{
	struct listener *ls;

	list_for_each_entry(ls, &srv->listeners, node) {
		if (ls->fd < 0)
			continue;
		listener_cancel(ls);
		io_uring_submit(&srv->loop.ring);
		close(ls->fd);
		ls->fd = -1;
		/* a stored socket stays, for the next djinnd to take */
		if (!ls->tcp && ls->path[0] && !ls->stored && !ls->borrowed)
			unlink(ls->path);
	}
}

void listeners_free(struct server *srv)
{
	while (!list_empty(&srv->listeners)) {
		struct listener *ls = list_first_entry(&srv->listeners,
						       struct listener, node);

		list_del_init(&ls->node);
		loop_timer_del(&ls->retry);
		free(ls);
	}
	conns_stop(srv);
}
