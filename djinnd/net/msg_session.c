// SPDX-License-Identifier: MIT
/*
 * The session messages: HELLO and AUTH, SESSION_OPEN, _ATTACH, _BIND and
 * _CLOSE, HEARTBEAT and SIGNAL (DOC: sessions in include/djinn/proto.h).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"
#include "server.h"
#include "exec/executor.h"
#include "svc/devices.h"
#include "svc/svc.h"
#include "net/conn.h"
#include "model/store.h"
#include "net/msg.h"
#include "net/tls.h"
#include "net/tokens.h"
#include "session/tenant.h"

void handle_hello(struct conn *c, const struct djinn_hdr *hdr,
		  struct session *unused, void *req, uint64_t len)
{
	/* The first device's figures: with several, each session's are its
	 * device's (ADMIN_VMU). */
	const struct device *d = &c->srv->dev[0];
	struct djinn_hello_resp r = {
		.version = DJINN_PROTO_VERSION,
		.max_payload = DJINN_MAX_PAYLOAD,
		.capacity = d->backend->provider->capacity,
		.granularity = d->backend->provider->granularity,
		.features = (d->models ? DJINN_FEAT_MODELS : 0) |
			    (c->srv->sessions.leases->ops->verify ?
				     DJINN_FEAT_KMOD :
				     0) |
			    (c->token ? DJINN_FEAT_TOKEN_AUTH : 0),
	};

	snprintf(r.backend, sizeof(r.backend), "%s", d->backend->name);
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* A TLS connection without a certificate, or one of server.token_auth's
 * socket, names its tenant with a bearer token (struct djinn_auth). A
 * wrong one closes the connection. */
void handle_auth(struct conn *c, const struct djinn_hdr *hdr,
		 struct session *unused, void *req, uint64_t len)
{
	const struct djinn_auth *a = req;
	struct djinn_auth_resp r = { 0 };

	if (!c->tls && !c->token) {
		conn_error(c, hdr, -EOPNOTSUPP,
			   "AUTH is for TLS connections and "
			   "server.token_auth's socket: this one is tenant "
			   "%s by what the kernel says of its peer",
			   c->tenant);
		return;
	}
	if (c->tenant[0]) {
		conn_error(c, hdr, -EISCONN,
			   "this connection is tenant %s already (its "
			   "certificate or an earlier AUTH)",
			   c->tenant);
		return;
	}
	if (a->__reserved || !a->len || a->len > DJINN_AUTH_TOKEN_MAX ||
	    len != sizeof(*a) + a->len) {
		conn_error(c, hdr, -EINVAL,
			   "AUTH: a token of 1 to %d bytes after the struct, "
			   "exactly (len %u, payload %llu bytes)",
			   DJINN_AUTH_TOKEN_MAX, a->len,
			   (unsigned long long)len);
		return;
	}
	if (tokens_tenant(c->srv, (const uint8_t *)(a + 1), a->len, r.tenant)) {
		c->srv->st.auth_refused++;
		log_notice("conn %d: AUTH with a token that names no tenant: "
			   "closing",
			   c->fd);
		conn_error(c, hdr, -EACCES,
			   "the token names no tenant (tls.tokens, or minted "
			   "and not revoked or expired): closing");
		c->close_after = true;
		return;
	}
	memcpy(c->tenant, r.tenant, sizeof(c->tenant));
	if (!conn_identified(c))
		return; /* over its connections quota: refused, closing */
	log_info("conn %d: AUTH: tenant %s", c->fd, c->tenant);
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

static void session_reply(struct conn *c, const struct djinn_hdr *hdr,
			  const struct session *s, bool token)
{
	struct djinn_session_resp r = {
		.session_id = s->id,
		.lease_ns = s->lease_ns,
		.deadline_ns = s->deadline_ns,
	};

	if (token)
		memcpy(r.token, s->token, sizeof(r.token));
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* A session of @c's peer (of @tenant when not NULL: a delegation
 * checked), placed on @device, published and attached to @c (with @bind,
 * SESSION_BIND's, bound to kernel session @kid); or the error answered. */
static struct session *
session_start(struct conn *c, const struct djinn_hdr *hdr, uint32_t device,
	      const char *label, uint32_t priority, uint64_t lease_ns,
	      bool bind, uint64_t kid, const char *tenant)
{
	const struct svc_peer peer = { .tenant = tenant ? tenant : c->tenant,
				       .uid = c->cred.uid,
				       .pid = c->cred.pid,
				       .tcp = c->tcp || c->token };
	char msg[DJINN_MAX_ERROR_MSG];
	struct session *s;
	int ret;

	ret = svc_session_open(&c->srv->sessions, c->srv->dev, c->srv->nr_dev,
			       &peer, device, label, priority, lease_ns, kid,
			       &s, msg, sizeof(msg));
	if (!ret) {
		ret = conn_attach(c, s->id);
		if (ret) {
			session_end(&c->srv->sessions, s, SESSION_CLOSED);
			msg[0] = 0;
		}
	}
	if (!ret)
		return s;
	if (!msg[0])
		snprintf(msg, sizeof(msg), "%s",
			 bind		? "cannot bind the session" :
			 ret == -EINVAL ? "bad tenant name or priority" :
					  "cannot open a session");
	conn_error(c, hdr, ret, "%s", msg);
	return NULL;
}

void handle_session_open(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	const struct djinn_session_open *o = req;
	const char *tenant = NULL;
	struct session *s;

	if (!memchr(o->tenant, 0, sizeof(o->tenant))) {
		conn_error(c, hdr, -EINVAL, "tenant not NUL-terminated");
		return;
	}
	if ((o->flags & ~DJINN_SESSION_DELEGATED) || o->__reserved) {
		conn_error(c, hdr, -EINVAL, "unknown flags %#x",
			   o->flags & ~DJINN_SESSION_DELEGATED);
		return;
	}
	if (o->flags & DJINN_SESSION_DELEGATED) {
		/* a front-end names the tenant: an administrator's grant to
		 * a user the kernel names */
		if (c->tcp || c->token) {
			conn_error(c, hdr, -EPERM,
				   "a delegated session is opened over a unix "
				   "socket whose user names the tenant (not "
				   "TCP, not server.token_auth's)");
			return;
		}
		if (!tenant_delegate(&c->srv->sessions.lim, o->tenant,
				     c->cred.uid)) {
			conn_error(c, hdr, -EPERM,
				   "uid %u may not open sessions of tenant %s: "
				   "not one of its delegates (djinnd.conf "
				   "[tenant.%s] delegates)",
				   (unsigned int)c->cred.uid, o->tenant,
				   o->tenant);
			return;
		}
		tenant = o->tenant;
	}
	s = session_start(c, hdr, o->device, o->tenant, o->priority,
			  o->lease_ns, false, 0, tenant);
	if (!s)
		return;
	log_info("session %llu opened: tenant %s%s, label %s, priority %u, "
		 "lease %llu ms, device %u (%s)",
		 (unsigned long long)s->id, s->tenant,
		 tenant ? " (delegated)" : "", s->label, s->priority,
		 (unsigned long long)(s->lease_ns / NSEC_PER_MSEC),
		 s->dev->index, s->dev->name);
	session_reply(c, hdr, s, true);
}

void handle_session_attach(struct conn *c, const struct djinn_hdr *hdr,
			   struct session *unused, void *req, uint64_t len)
{
	const struct djinn_session_attach *a = req;
	struct session *s;
	uint8_t diff = 0;

	/* Session ids are sequential: a missing session, another
	 * tenant's and a wrong token get one answer, so that ATTACH tells a
	 * prober nothing but that it may not attach. */
	s = session_get(&c->srv->sessions, hdr->session_id);
	if (s) {
		for (size_t i = 0; i < sizeof(a->token);
		     i++) /* constant time */
			diff |= a->token[i] ^ s->token[i];
		/* a token is a session's secret within its tenant: one
		 * that leaked to another tenant opens nothing (but to the
		 * tenant's delegates, who may open its sessions anyway) */
		if (strcmp(s->tenant, c->tenant) &&
		    (c->tcp || c->token ||
		     !tenant_delegate(&c->srv->sessions.lim, s->tenant,
				      c->cred.uid)))
			diff = 1;
	}
	if (!s || diff) {
		conn_error(c, hdr, -EPERM,
			   "no session %llu of this tenant with that token "
			   "(a wrong token, another tenant's, or ended)",
			   (unsigned long long)hdr->session_id);
	} else if (conn_attach(c, s->id)) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
	} else {
		session_touch(&c->srv->sessions, s);
		session_reply(c, hdr, s, false);
	}
	if (s)
		session_put(s);
}

/* A local client's session on /dev/djinn becomes a djinnd session bound
 * to it (DOC: sessions in proto.h); the lease provider checks it. */
void handle_session_bind(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	const struct djinn_session_bind *b = req;
	struct lease_provider *lp = c->srv->sessions.leases;
	struct lease_kinfo ki;
	struct session *s;
	int ret;

	if (!lp->ops->verify) {
		conn_error(c, hdr, -EOPNOTSUPP,
			   "leases are %s: no /dev/djinn sessions",
			   lp->ops->name);
		return;
	}
	if (c->tcp || c->token) {
		conn_error(c, hdr, -EPERM,
			   "SESSION_BIND is for local clients whose user "
			   "names the tenant (not TCP, not "
			   "server.token_auth's socket)");
		return;
	}
	ret = lp->ops->verify(lp, b->kernel_id, b->token, c->cred.uid, &ki);
	if (ret) {
		conn_error(c, hdr, ret, "kernel session %llu: %s",
			   (unsigned long long)b->kernel_id,
			   ret == -EPERM  ? "wrong token or another user's" :
			   ret == -EBUSY  ? "bound already" :
			   ret == -ENOENT ? "no such live session" :
					    strerror(-ret));
		return;
	}
	s = session_start(c, hdr, 0, ki.tenant, ki.priority, ki.lease_ns, true,
			  b->kernel_id, NULL);
	if (!s)
		return;
	log_info("session %llu bound to kernel session %llu: tenant %s, "
		 "priority %u, lease %llu ms",
		 (unsigned long long)s->id, (unsigned long long)b->kernel_id,
		 s->tenant, s->priority,
		 (unsigned long long)(s->lease_ns / NSEC_PER_MSEC));
	session_reply(c, hdr, s, true);
}

void handle_session_close(struct conn *c, const struct djinn_hdr *hdr,
			  struct session *s, void *req, uint64_t len)
{
	conn_detach(c, s->id);
	session_end(&c->srv->sessions, s, SESSION_CLOSED);
	conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* HEARTBEAT renews a lease; with session 0 it is a plain round trip. */
void handle_heartbeat(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *unused, void *req, uint64_t len)
{
	struct session *s;

	if (!hdr->session_id) {
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		return;
	}
	s = msg_req_session(c, hdr, true); /* a lost session stays alive */
	if (!s)
		return;
	session_reply(c, hdr, s, false);
	session_put(s);
}

void handle_signal(struct conn *c, const struct djinn_hdr *hdr,
		   struct session *s, void *req, uint64_t len)
{
	const struct djinn_signal *sg = req;
	char msg[DJINN_MAX_ERROR_MSG];
	int ret;

	if (sg->__reserved) {
		conn_error(c, hdr, -EINVAL, "reserved field set");
		return;
	}
	log_debug("session %llu: context %#llx: phase %u for %llu ns "
		  "(received %llu)",
		  (unsigned long long)s->id, (unsigned long long)sg->ctx,
		  sg->phase, (unsigned long long)sg->expected_ns,
		  (unsigned long long)loop_now());
	ret = svc_session_signal(s, sg->phase, sg->expected_ns, sg->ctx, msg,
				 sizeof(msg));
	msg_answer(c, hdr, ret, msg);
}

/* STATUS: what a client choosing among hosts weighs (struct djinn_status):
 * memory, pressure, sessions, queue, and the served models loaded. */
void handle_status(struct conn *c, const struct djinn_hdr *hdr,
		   struct session *unused, void *req, uint64_t len)
{
	struct server *srv = c->srv;
	struct djinn_status_model *m;
	struct djinn_status st = {
		.size = sizeof(st),
		.nr_dev = srv->nr_dev,
		.sessions = (uint32_t)srv->sessions.nr,
		.max_sessions = srv->cfg.max_sessions,
	};
	char why[8];
	size_t n;

	if (msg_ready(srv, why, sizeof(why)))
		st.flags |= DJINN_STATUS_READY;
	if (svc_status(srv->dev, srv->nr_dev, c->tenant, &st, &m, &n)) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	st.nr_models = (uint32_t)n;
	/* the models sent from where they are, freed once sent */
	conn_reply(c, hdr, &st, sizeof(st), m, n * sizeof(*m), free, m);
}
