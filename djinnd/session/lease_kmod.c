// SPDX-License-Identifier: MIT
/*
 * The kernel module's lease provider: djinn.ko keeps the leases.
 *
 * djinnd opens /dev/djinn and attaches as the daemon (DAEMON_ATTACH), and
 * joins the "djinn" generic netlink family's "events" group through libnl.
 * The netlink socket is polled on the I/O thread's io_uring (a poll SQE,
 * then nl_recvmsgs until the socket is empty): no thread of its own.
 *
 * Two kinds of djinnd session ride on kernel sessions:
 *
 *  - bound: a local client opened a session on /dev/djinn itself and
 *    presented its id and token (SESSION_BIND); verify() checked them
 *    with SESSION_INFO and DJINN_INFO_F_VERIFY. The client's file owns
 *    the lease: it heartbeats with the ioctl, and its death closes the
 *    session in the kernel at once. djinnd posts completion records to
 *    its ring (complete()).
 *  - proxy: any other session (TCP clients, and local ones that did not
 *    bind) gets a proxy session (PROXY_OPEN) on djinnd's file, with its
 *    own lease, renewed by the client's requests and HEARTBEATs through
 *    the HEARTBEAT ioctl, released with PROXY_CLOSE.
 *
 * A closed, expired or killed event about either ends the djinnd session
 * through session_end(), the one teardown. If events were lost (ENOBUFS:
 * the socket's buffer overflowed) every kernel session djinnd follows is
 * looked up again with SESSION_INFO, which is what a re-dump would tell.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

#include "uapi/linux/djinn.h"

#include "device.h"
#include "log.h"
#include "sched/sched.h"
#include "session/lease.h"
#include "session/session.h"

_Static_assert((int)DJINN_SIGNAL_IO_WAIT == (int)DJINN_PHASE_IO_WAIT &&
		       (int)DJINN_SIGNAL_COMPUTE == (int)DJINN_PHASE_COMPUTE &&
		       (int)DJINN_SIGNAL_IDLE == (int)DJINN_PHASE_IDLE,
	       "the module's phases are the protocol's");
/* DJINN_TENANT_LEN and DJINN_TOKEN_LEN: <linux/djinn.h> and proto.h
 * define each alike, so that a difference is a macro redefinition here. */

struct kentry {
	uint64_t kid;
	bool local; /* bound to a client's own kernel session */
	bool gone; /* the kernel ended it: nothing to undo there */
	uint64_t renewed; /* proxy: the last HEARTBEAT sent */
};

struct kmod_lease {
	struct lease_provider base;
	struct io_src src; /* the netlink socket's poll */
	struct session_table *tab; /* whose sessions */
	int fd; /* /dev/djinn, attached as the daemon */
	struct nl_sock *nl;
	int family;
	bool resync; /* events were lost */
	bool broken; /* the netlink socket failed: look every second */
	bool active; /* set up: the provider in use */
	struct list_head sessions; /* through s->lease_node */
	uint64_t posted, overflowed;
};

static struct kmod_lease *to_kmod(struct lease_provider *lp)
{
	return (struct kmod_lease *)lp;
}

static int kioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static struct session *find(struct kmod_lease *k, uint64_t kid)
{
	struct session *s;

	list_for_each_entry(s, &k->sessions, lease_node)
		if (((struct kentry *)s->lease_priv)->kid == kid)
			return s;
	return NULL;
}

/*
 * A restart's session (s->lease_adopt): the kernel session its
 * predecessor had on the file passed with the record. A proxy's lease is
 * renewed at once (the restart's gap back); one that ended meanwhile (its
 * client died, it expired or was killed while no djinnd read the events)
 * is ended by the next resync, as after lost events.
 */
static int kadopt(struct kmod_lease *k, struct session *s, struct kentry *e,
		  uint64_t now)
{
	struct djinn_ioc_session_info i = { .size = sizeof(i),
					    .session_id = s->lease_kid };
	struct djinn_ioc_heartbeat hb = { .size = sizeof(hb),
					  .session_id = s->lease_kid };
	bool proxy;

	if (s->lease_kid > UINT32_MAX || find(k, s->lease_kid))
		return -EBADMSG; /* not a kernel session, or one taken */
	e->kid = s->lease_kid;
	e->local = s->lease_bound;
	e->renewed = now;
	if (kioctl(k->fd, DJINN_IOC_SESSION_INFO, &i) ||
	    i.state != DJINN_STATE_LIVE) {
		/* ended meanwhile */
		s->lease_adopt = false;
		k->resync = true;
		return 0;
	}
	/* what the record says it is: a proxy on this file, or a session
	 * of the user that bound it */
	proxy = i.kind & DJINN_SESSION_PROXY;
	if (proxy == e->local ||
	    (e->local && s->uid && i.uid != (uint32_t)s->uid))
		return -EBADMSG;
	s->lease_adopt = false;
	if (!e->local && kioctl(k->fd, DJINN_IOC_HEARTBEAT, &hb)) {
		k->resync = true;
		return 0;
	}
	s->lease_ns = i.lease_ns;
	s->deadline_ns = e->local ? i.deadline_ns : hb.deadline_ns;
	return 0;
}

static int kmod_open(struct lease_provider *lp, struct session *s, uint64_t now)
{
	struct kmod_lease *k = to_kmod(lp);
	struct kentry *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	if (s->lease_adopt) {
		ret = kadopt(k, s, e, now);
		if (ret) {
			log_warn(
				"session %llu: the record's kernel session %llu "
				"is not one it had",
				(unsigned long long)s->id,
				(unsigned long long)s->lease_kid);
			free(e);
			return ret;
		}
	} else if (s->lease_kid) {
		struct djinn_ioc_session_info i = {
			.size = sizeof(i), .session_id = s->lease_kid
		};

		/* verify() just checked it; it may have ended since */
		ret = kioctl(k->fd, DJINN_IOC_SESSION_INFO, &i);
		if (ret || i.state != DJINN_STATE_LIVE) {
			free(e);
			return ret ? ret : -ENOENT;
		}
		e->kid = s->lease_kid;
		e->local = s->lease_bound = true;
		s->lease_ns = i.lease_ns;
		s->deadline_ns = i.deadline_ns;
	} else {
		struct djinn_ioc_proxy_open po = { .size = sizeof(po),
						   .priority = s->priority,
						   .lease_ns = s->lease_ns };

		snprintf(po.tenant, sizeof(po.tenant), "%s", s->tenant);
		ret = kioctl(k->fd, DJINN_IOC_PROXY_OPEN, &po);
		if (ret) {
			log_warn("session %llu: PROXY_OPEN: %s",
				 (unsigned long long)s->id, strerror(-ret));
			free(e);
			return ret;
		}
		e->kid = po.session_id;
		e->renewed = now;
		s->lease_kid = po.session_id;
		s->lease_ns = po.lease_ns;
		s->deadline_ns = po.deadline_ns;
	}
	s->lease_priv = e;
	list_add_tail(&s->lease_node, &k->sessions);
	log_debug("session %llu: kernel %s session %llu",
		  (unsigned long long)s->id, e->local ? "local" : "proxy",
		  (unsigned long long)e->kid);
	return 0;
}

/* Any request renews a proxy's lease; a bound session's lease is its
 * client's to renew (the HEARTBEAT ioctl on its own file). At most one
 * ioctl per 1/16 of the lease. */
static void kmod_renew(struct lease_provider *lp, struct session *s,
		       uint64_t now)
{
	struct kmod_lease *k = to_kmod(lp);
	struct kentry *e = s->lease_priv;
	struct djinn_ioc_heartbeat hb = { .size = sizeof(hb) };

	if (!e || e->local || e->gone || now - e->renewed < s->lease_ns / 16)
		return;
	hb.session_id = e->kid;
	if (!kioctl(k->fd, DJINN_IOC_HEARTBEAT, &hb)) {
		e->renewed = now;
		s->deadline_ns = hb.deadline_ns;
	}
	/* else it ended: its event is on the way */
}

static void kmod_close(struct lease_provider *lp, struct session *s)
{
	struct kmod_lease *k = to_kmod(lp);
	struct kentry *e = s->lease_priv;
	int ret = 0;

	if (!e)
		return;
	list_del_init(&s->lease_node);
	s->lease_priv = NULL;
	if (s->lease_disown) {
		/* not ours to end: the predecessor's again */
	} else if (!e->local) {
		struct djinn_ioc_proxy_close pc = { .size = sizeof(pc),
						    .session_id = e->kid };

		ret = kioctl(k->fd, DJINN_IOC_PROXY_CLOSE, &pc);
	} else if (!e->gone && s->reason == SESSION_KILLED) {
		/* killed in djinnd (djinnctl kill over the admin socket):
		 * the client learns it from its ring and poll() */
		struct djinn_ioc_kill kl = { .size = sizeof(kl),
					     .session_id = e->kid };

		ret = kioctl(k->fd, DJINN_IOC_KILL, &kl);
		if (ret == -ENOENT) /* it ended meanwhile */
			ret = 0;
	}
	if (ret)
		log_warn("session %llu: releasing kernel session %llu: %s",
			 (unsigned long long)s->id, (unsigned long long)e->kid,
			 strerror(-ret));
	free(e);
}

/* ---------------------------------------------------------------------- */
/* Events */

static void kend(struct kmod_lease *k, struct session *s,
		 enum session_end_reason why)
{
	struct kentry *e = s->lease_priv;

	e->gone = true;
	log_info("session %llu: kernel session %llu %s",
		 (unsigned long long)s->id, (unsigned long long)e->kid,
		 session_reason_name(why));
	session_end(k->tab, s, why);
}

static int on_event(struct nl_msg *msg, void *arg)
{
	struct kmod_lease *k = arg;
	struct nlmsghdr *nh = nlmsg_hdr(msg);
	struct nlattr *tb[DJINN_A_SESSION_MAX + 1];
	enum session_end_reason why;
	struct genlmsghdr *gh;
	struct session *s;

	if (nh->nlmsg_type != k->family ||
	    genlmsg_parse(nh, 0, tb, DJINN_A_SESSION_MAX, NULL) ||
	    !tb[DJINN_A_SESSION_ID])
		return NL_SKIP;
	gh = nlmsg_data(nh);
	s = find(k, nla_get_u64(tb[DJINN_A_SESSION_ID]));
	if (!s)
		return NL_OK;
	switch (gh->cmd) {
	case DJINN_CMD_CLOSED_NTF:
		why = SESSION_CLOSED;
		break;
	case DJINN_CMD_EXPIRED_NTF:
		why = SESSION_EXPIRED;
		break;
	case DJINN_CMD_KILLED_NTF:
		why = SESSION_KILLED;
		break;
	case DJINN_CMD_SIGNAL_NTF: {
		uint64_t now = loop_now(), exp = 0;
		uint32_t phase = s->se.w.phase;
		char bad[DJINN_MAX_ERROR_MSG];

		if (tb[DJINN_A_SESSION_EXPECTED_NS])
			exp = nla_get_u64(tb[DJINN_A_SESSION_EXPECTED_NS]);
		if (tb[DJINN_A_SESSION_PHASE])
			phase = nla_get_u32(tb[DJINN_A_SESSION_PHASE]);
		/* the receipt time, for make bench-kmod */
		log_debug("session %llu: phase %u for %llu ns (kernel signal, "
			  "received %llu)",
			  (unsigned long long)s->id, phase,
			  (unsigned long long)exp, (unsigned long long)now);
		/* The module refuses what the socket refuses; an older
		 * module's signal that slips through is logged, not used. */
		if (phase > DJINN_PHASE_IDLE ||
		    sched_signal_check(s->dev->sched, phase, &exp, bad,
				       sizeof(bad))) {
			log_warn("session %llu: kernel signal ignored: %s",
				 (unsigned long long)s->id,
				 phase > DJINN_PHASE_IDLE ? "unknown phase" :
							    bad);
			return NL_OK;
		}
		sched_signal(s->dev->sched, &s->se.w, phase, exp);
		return NL_OK;
	}
	default:
		return NL_OK;
	}
	kend(k, s, why);
	return NL_OK;
}

/* Events were lost: ask the module about every session followed. */
static void resync(struct kmod_lease *k)
{
	struct session *s, *n;

	k->resync = false;
	list_for_each_entry_safe(s, n, &k->sessions, lease_node) {
		struct kentry *e = s->lease_priv;
		struct djinn_ioc_session_info i = { .size = sizeof(i),
						    .session_id = e->kid };
		int ret = kioctl(k->fd, DJINN_IOC_SESSION_INFO, &i);

		if (ret == -ENOENT) /* a local one ended: how is lost */
			kend(k, s, SESSION_CLOSED);
		else if (!ret && i.state == DJINN_STATE_EXPIRED)
			kend(k, s, SESSION_EXPIRED);
		else if (!ret && i.state == DJINN_STATE_KILLED)
			kend(k, s, SESSION_KILLED);
		else if (!ret && i.state == DJINN_STATE_CLOSED)
			kend(k, s, SESSION_CLOSED);
	}
}

static void nl_arm(struct kmod_lease *k)
{
	struct io_uring_sqe *sqe = loop_sqe(k->tab->loop, &k->src, 0);

	if (!sqe) { /* loop_sqe() said why: look every second instead */
		k->broken = true;
		return;
	}
	io_uring_prep_poll_add(sqe, nl_socket_get_fd(k->nl), POLLIN);
}

static void nl_complete(struct io_src *src, struct io_uring_cqe *cqe,
			unsigned int tag)
{
	struct kmod_lease *k = container_of(src, struct kmod_lease, src);
	int ret;

	if (cqe->res == -ECANCELED)
		return;
	for (;;) {
		ret = nl_recvmsgs_default(k->nl);
		if (ret == -NLE_AGAIN)
			break;
		if (ret == -NLE_NOMEM) { /* ENOBUFS: events were dropped */
			log_warn("netlink: events lost (ENOBUFS): "
				 "looking the sessions up again");
			k->resync = true;
			continue;
		}
		if (ret < 0) {
			/* not polled again (it would fail at once, for
			 * ever): the lease timer looks every second */
			log_err("netlink: %s: no more events; looking the "
				"sessions up every second",
				nl_geterror(ret));
			k->broken = true;
			break;
		}
	}
	if (k->resync || k->broken)
		resync(k);
	if (!k->broken)
		nl_arm(k);
}

/* ---------------------------------------------------------------------- */

static uint64_t kmod_poll(struct lease_provider *lp, uint64_t now,
			  void (*expired)(struct session *s, void *arg),
			  void *arg)
{
	struct kmod_lease *k = to_kmod(lp);

	if (k->resync || k->broken)
		resync(k);
	return NSEC_PER_SEC; /* the module tells: nothing to look at */
}

/*
 * The ring record of an answered request (Documentation/protocol.rst,
 * "Completion rings"): user_data the request_id, res 0 or the negative
 * errno it failed with, flags the opcode, aux[0] the djinnd session id.
 */
static void kmod_complete(struct lease_provider *lp, struct session *s,
			  uint64_t request_id, uint16_t opcode, int res)
{
	struct kmod_lease *k = to_kmod(lp);
	struct kentry *e = s->lease_priv;
	struct djinn_ioc_post p = { .size = sizeof(p) };
	int ret;

	if (!e || !e->local || e->gone)
		return;
	p.session_id = e->kid;
	p.cqe.user_data = request_id;
	p.cqe.res = res;
	p.cqe.flags = opcode;
	p.cqe.aux[0] = s->id;
	ret = kioctl(k->fd, DJINN_IOC_POST, &p);
	if (!ret)
		k->posted++;
	else if (ret == -EOVERFLOW)
		k->overflowed++; /* counted in the ring too */
	else if (ret != -ENOENT)
		log_warn("session %llu: POST: %s", (unsigned long long)s->id,
			 strerror(-ret));
}

static int kmod_verify(struct lease_provider *lp, uint64_t kid,
		       const uint8_t token[16], uid_t uid,
		       struct lease_kinfo *out)
{
	struct kmod_lease *k = to_kmod(lp);
	struct djinn_ioc_session_info i = { .size = sizeof(i),
					    .flags = DJINN_INFO_F_VERIFY,
					    .session_id = kid };
	int ret;

	if (!kid || kid > UINT32_MAX)
		return -ENOENT;
	memcpy(i.token, token, sizeof(i.token));
	ret = kioctl(k->fd, DJINN_IOC_SESSION_INFO, &i);
	if (ret == -EACCES)
		return -EPERM;
	if (ret)
		return ret;
	if (i.state != DJINN_STATE_LIVE || (i.kind & DJINN_SESSION_PROXY))
		return -ENOENT;
	if (uid && i.uid != uid) /* root may bind any user's session */
		return -EPERM;
	if (find(k, kid))
		return -EBUSY;
	snprintf(out->tenant, sizeof(out->tenant), "%s", i.tenant);
	out->priority = i.priority;
	out->lease_ns = i.lease_ns;
	out->ring_entries = i.ring_entries;
	return 0;
}

static void kmod_destroy(struct lease_provider *lp)
{
	struct kmod_lease *k = to_kmod(lp);

	if (k->active)
		log_info("leases: kmod: %llu completions posted, %llu dropped "
			 "(ring full)",
			 (unsigned long long)k->posted,
			 (unsigned long long)k->overflowed);
	if (k->nl)
		nl_socket_free(k->nl);
	if (k->fd >= 0)
		close(k->fd); /* ends the proxies that are left */
	free(k);
}

static void kmod_hold(struct lease_provider *lp, uint64_t now)
{
	struct kmod_lease *k = to_kmod(lp);
	struct session *s;

	list_for_each_entry(s, &k->sessions, lease_node) {
		struct kentry *e = s->lease_priv;
		struct djinn_ioc_heartbeat hb = { .size = sizeof(hb),
						  .session_id = e->kid };

		if (e->local || e->gone)
			continue;
		if (!kioctl(k->fd, DJINN_IOC_HEARTBEAT, &hb)) {
			e->renewed = now;
			s->deadline_ns = hb.deadline_ns;
		}
	}
}

static void kmod_drop(struct lease_provider *lp, uint64_t kid)
{
	struct kmod_lease *k = to_kmod(lp);
	struct djinn_ioc_proxy_close pc = { .size = sizeof(pc),
					    .session_id = kid };

	/* another's, or ended already: the module refuses, nothing else */
	if (!find(k, kid) && !kioctl(k->fd, DJINN_IOC_PROXY_CLOSE, &pc))
		log_info("leases: kmod: proxy %llu of a record not restored "
			 "closed",
			 (unsigned long long)kid);
}

static int kmod_file(struct lease_provider *lp)
{
	return to_kmod(lp)->fd;
}

static const struct lease_ops kmod_ops = {
	.name = "kmod",
	.open = kmod_open,
	.renew = kmod_renew,
	.close = kmod_close,
	.poll = kmod_poll,
	.destroy = kmod_destroy,
	.complete = kmod_complete,
	.verify = kmod_verify,
	.file = kmod_file,
	.hold = kmod_hold,
	.drop = kmod_drop,
};

/* Whether @fd is /dev/djinn's character device. */
static bool is_djinn_dev(int fd)
{
	struct stat a, b;

	return !fstat(fd, &a) && !stat(DJINN_DEVICE, &b) &&
	       S_ISCHR(a.st_mode) && S_ISCHR(b.st_mode) &&
	       a.st_rdev == b.st_rdev;
}

/* 0, or -errno and why in @why. @passed: /dev/djinn attached already,
 * or -1. */
static int kmod_lease_create(struct session_table *tab, int passed,
			     struct kmod_lease **out, char *why, size_t len)
{
	struct djinn_ioc_daemon_attach da = { .size = sizeof(da) };
	struct kmod_lease *k = calloc(1, sizeof(*k));
	int ret, grp;

	if (!k)
		return -ENOMEM;
	k->base.ops = &kmod_ops;
	k->src.complete = nl_complete;
	k->tab = tab;
	INIT_LIST_HEAD(&k->sessions);
	if (passed >= 0 && !is_djinn_dev(passed)) {
		log_warn("leases: kmod: the fd passed as %s is not it: "
			 "closed",
			 DJINN_DEVICE);
		close(passed);
		passed = -1;
	}
	k->fd = passed >= 0 ? passed : open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);
	if (k->fd < 0) {
		ret = -errno;
		snprintf(why, len, "%s: %s", DJINN_DEVICE, strerror(errno));
		goto fail;
	}
	/* a predecessor's file is the daemon's already */
	ret = passed >= 0 ? 0 : kioctl(k->fd, DJINN_IOC_DAEMON_ATTACH, &da);
	if (ret) {
		snprintf(why, len, "%s: DAEMON_ATTACH: %s%s", DJINN_DEVICE,
			 strerror(-ret),
			 ret == -EBUSY ? " (another daemon is attached)" :
			 ret == -EPERM ? " (it needs CAP_SYS_ADMIN)" :
					 "");
		goto fail;
	}
	ret = -ENOMEM;
	k->nl = nl_socket_alloc();
	if (!k->nl) {
		snprintf(why, len, "netlink: out of memory");
		goto fail;
	}
	nl_socket_disable_seq_check(k->nl);
	nl_socket_disable_auto_ack(k->nl);
	ret = genl_connect(k->nl);
	if (ret) {
		snprintf(why, len, "netlink: %s", nl_geterror(ret));
		ret = -ECONNREFUSED;
		goto fail;
	}
	k->family = genl_ctrl_resolve(k->nl, DJINN_FAMILY_NAME);
	grp = k->family < 0 ? k->family :
			      genl_ctrl_resolve_grp(k->nl, DJINN_FAMILY_NAME,
						    DJINN_MCGRP_EVENTS);
	if (grp < 0) {
		snprintf(why, len, "netlink: no family %s with group %s: %s",
			 DJINN_FAMILY_NAME, DJINN_MCGRP_EVENTS,
			 nl_geterror(grp));
		ret = -ENOENT;
		goto fail;
	}
	ret = nl_socket_add_membership(k->nl, grp);
	if (ret) {
		snprintf(why, len, "netlink: joining %s: %s%s",
			 DJINN_MCGRP_EVENTS, nl_geterror(ret),
			 ret == -NLE_PERM ? " (it needs CAP_NET_ADMIN)" : "");
		ret = -EPERM;
		goto fail;
	}
	nl_socket_modify_cb(k->nl, NL_CB_VALID, NL_CB_CUSTOM, on_event, k);
	nl_socket_set_nonblocking(k->nl);
	/* a burst of sessions ending at once must not drop events: past
	 * net.core.rmem_max as CAP_NET_ADMIN may, else up to it */
	if (setsockopt(nl_socket_get_fd(k->nl), SOL_SOCKET, SO_RCVBUFFORCE,
		       &(int){ 4 << 20 }, sizeof(int)))
		nl_socket_set_buffer_size(k->nl, 4 << 20, 0);
	*out = k;
	return 0;

fail:
	kmod_destroy(&k->base);
	return ret;
}

int lease_provider_open(struct session_table *tab, const char *which,
			int passed, struct lease_provider **out)
{
	struct kmod_lease *k = NULL;
	char why[300] = "";
	int ret;

	if (!which || !strcmp(which, "user")) {
		if (passed >= 0) {
			/* its proxies end with it; bound sessions are
			 * djinnd's own from now on */
			log_notice("leases: the predecessor's %s closed: "
				   "lease.provider = user",
				   DJINN_DEVICE);
			close(passed);
		}
		ret = user_lease_create(out);
		if (!ret)
			log_info("leases: user (lease.provider = user)");
		return ret;
	}
	if (passed < 0 && !strcmp(which, "auto") &&
	    access(DJINN_DEVICE, F_OK)) {
		ret = user_lease_create(out);
		if (!ret)
			log_info("leases: user (auto: no %s; djinn.ko is "
				 "not loaded)",
				 DJINN_DEVICE);
		return ret;
	}
	ret = kmod_lease_create(tab, passed, &k, why, sizeof(why));
	if (ret && !strcmp(which, "kmod")) {
		log_err("leases: kmod: %s", why);
		return ret;
	}
	if (ret) {
		ret = user_lease_create(out);
		if (!ret)
			log_notice("leases: user (auto: %s)", why);
		return ret;
	}
	nl_arm(k);
	k->active = true;
	*out = &k->base;
	log_notice("leases: kmod (%s%s %s, following netlink events)",
		   !strcmp(which, "auto") ? "auto: " : "", DJINN_DEVICE,
		   passed >= 0 ? "taken over from the predecessor" :
				 "attached as the daemon");
	return 0;
}
