// SPDX-License-Identifier: MIT
/*
 * Helpers for the in-guest djinn.ko tests (kt.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include "kt.h"

int kt_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

uint64_t kt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int kt_open_dev(void)
{
	int fd = open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		fail_msg("open %s: %s", DJINN_DEVICE, strerror(errno));
	return fd;
}

int kt_session(const char *tenant, uint64_t lease_ns, uint32_t entries,
	       struct djinn_ioc_session_open *out)
{
	struct djinn_ioc_session_open o = {
		.size = sizeof(o),
		.priority = 4,
		.lease_ns = lease_ns,
		.ring_entries = entries,
	};
	int fd = kt_open_dev();
	int ret;

	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	ret = kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, &o);
	if (ret)
		fail_msg("SESSION_OPEN: %s", strerror(-ret));
	if (out)
		*out = o;
	return fd;
}

int kt_daemon(void)
{
	struct djinn_ioc_daemon_attach a = { .size = sizeof(a) };
	int fd = kt_open_dev();
	int ret = kt_ioctl(fd, DJINN_IOC_DAEMON_ATTACH, &a);

	if (ret)
		fail_msg("DAEMON_ATTACH: %s", strerror(-ret));
	return fd;
}

int kt_info(int fd, uint64_t id, struct djinn_ioc_session_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	info->session_id = id;
	return kt_ioctl(fd, DJINN_IOC_SESSION_INFO, info);
}

int kt_heartbeat(int fd, uint64_t id, bool set_head, uint32_t head)
{
	struct djinn_ioc_heartbeat h = {
		.size = sizeof(h),
		.flags = set_head ? DJINN_HEARTBEAT_F_HEAD : 0,
		.session_id = id,
		.ring_head = head,
	};

	return kt_ioctl(fd, DJINN_IOC_HEARTBEAT, &h);
}

int kt_signal(int fd, uint64_t id, uint32_t phase, uint64_t expected_ns)
{
	struct djinn_ioc_signal s = {
		.size = sizeof(s),
		.session_id = id,
		.phase = phase,
		.expected_ns = expected_ns,
	};

	return kt_ioctl(fd, DJINN_IOC_SIGNAL, &s);
}

int kt_post(int dfd, uint64_t id, uint64_t user_data, uint32_t *tail)
{
	struct djinn_ioc_post p = {
		.size = sizeof(p),
		.session_id = id,
		.cqe = { .user_data = user_data,
			 .res = (int32_t)user_data,
			 .aux = { ~user_data, 7 } },
	};
	int ret = kt_ioctl(dfd, DJINN_IOC_POST, &p);

	if (!ret && tail)
		*tail = p.tail;
	return ret;
}

int kt_kill(int fd, uint64_t id)
{
	struct djinn_ioc_kill k = { .size = sizeof(k), .session_id = id };

	return kt_ioctl(fd, DJINN_IOC_KILL, &k);
}

int kt_ring_map(int fd, const struct djinn_ioc_session_open *o,
		struct kt_ring *r)
{
	const char *base;

	r->len = o->ring_bytes;
	r->map = mmap(NULL, r->len, PROT_READ, MAP_SHARED, fd, DJINN_MMAP_RING);
	if (r->map == MAP_FAILED)
		return -errno;
	base = r->map;
	r->head = (const uint32_t *)(base + o->ring.head);
	r->tail = (const uint32_t *)(base + o->ring.tail);
	r->mask = (const uint32_t *)(base + o->ring.mask);
	r->entries = (const uint32_t *)(base + o->ring.entries);
	r->flags = (const uint32_t *)(base + o->ring.flags);
	r->overflow = (const uint32_t *)(base + o->ring.overflow);
	r->cqes = (const struct djinn_cqe *)(base + o->ring.cqes);
	return 0;
}

void kt_ring_unmap(struct kt_ring *r)
{
	munmap(r->map, r->len);
}

int kt_as_nobody(int (*fn)(void *arg), void *arg)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		fail_msg("fork: %s", strerror(errno));
	if (pid == 0) {
		if (setgroups(0, NULL) ||
		    setresgid(KT_NOBODY, KT_NOBODY, KT_NOBODY) ||
		    setresuid(KT_NOBODY, KT_NOBODY, KT_NOBODY))
			_exit(100);
		/* From root to nobody clears every capability set. */
		_exit(fn(arg));
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/* ---------------------------------------------------------------------- */
/* netlink */

struct kt_nl {
	struct nl_sock *sk;
	int family;
	struct kt_nl_msg *out;
	int nr, max;
	int err;
	bool got;
};

static int kt_nl_parse(struct nl_msg *msg, void *arg)
{
	struct kt_nl *nl = arg;
	struct genlmsghdr *gh = nlmsg_data(nlmsg_hdr(msg));
	struct nlattr *tb[DJINN_A_SESSION_MAX + 1];
	struct kt_nl_msg *m;

	if (nlmsg_hdr(msg)->nlmsg_type != nl->family)
		return NL_SKIP;
	if (nl->nr >= nl->max)
		return NL_SKIP;
	m = &nl->out[nl->nr++];
	memset(m, 0, sizeof(*m));
	if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, DJINN_A_SESSION_MAX, NULL))
		return NL_SKIP;
	m->cmd = gh->cmd;
#define U64(a, f)  \
	if (tb[a]) \
		m->f = nla_get_u64(tb[a]);
#define U32(a, f)  \
	if (tb[a]) \
		m->f = nla_get_u32(tb[a]);
	U64(DJINN_A_SESSION_ID, id);
	U32(DJINN_A_SESSION_STATE, state);
	U32(DJINN_A_SESSION_PHASE, phase);
	U32(DJINN_A_SESSION_PID, pid);
	U32(DJINN_A_SESSION_UID, uid);
	U32(DJINN_A_SESSION_KIND, kind);
	U64(DJINN_A_SESSION_EXPECTED_NS, expected_ns);
	U64(DJINN_A_SESSION_TIME_NS, time_ns);
	U64(DJINN_A_SESSION_POSTS, posts);
	U64(DJINN_A_SESSION_OVERFLOW, overflow);
	U64(DJINN_A_SESSION_SIGNALS, signals);
	U64(DJINN_A_SESSION_HEARTBEATS, heartbeats);
#undef U64
#undef U32
	if (tb[DJINN_A_SESSION_TENANT])
		snprintf(m->tenant, sizeof(m->tenant), "%s",
			 nla_get_string(tb[DJINN_A_SESSION_TENANT]));
	nl->got = true;
	return NL_OK;
}

static int kt_nl_error(struct sockaddr_nl *who, struct nlmsgerr *e, void *arg)
{
	struct kt_nl *nl = arg;

	nl->err = e->error;
	return NL_STOP;
}

static int kt_nl_ack(struct nl_msg *msg, void *arg)
{
	return NL_STOP;
}

struct kt_nl *kt_nl_open(bool events, int *err)
{
	struct kt_nl *nl = calloc(1, sizeof(*nl));
	int grp;

	*err = -ENOMEM;
	if (!nl)
		return NULL;
	nl->sk = nl_socket_alloc();
	if (!nl->sk)
		goto out_free;
	*err = -ECONNREFUSED;
	if (genl_connect(nl->sk))
		goto out_sock;
	nl->family = genl_ctrl_resolve(nl->sk, DJINN_FAMILY_NAME);
	*err = -ENOENT;
	if (nl->family < 0)
		goto out_sock;
	nl_socket_modify_cb(nl->sk, NL_CB_VALID, NL_CB_CUSTOM, kt_nl_parse, nl);
	nl_socket_modify_err_cb(nl->sk, NL_CB_CUSTOM, kt_nl_error, nl);
	nl_socket_modify_cb(nl->sk, NL_CB_ACK, NL_CB_CUSTOM, kt_nl_ack, nl);
	if (events) {
		grp = genl_ctrl_resolve_grp(nl->sk, DJINN_FAMILY_NAME,
					    DJINN_MCGRP_EVENTS);
		if (grp < 0)
			goto out_sock;
		nl_socket_disable_seq_check(nl->sk);
		/* The socket call itself, for the kernel's errno. */
		if (setsockopt(nl_socket_get_fd(nl->sk), SOL_NETLINK,
			       NETLINK_ADD_MEMBERSHIP, &grp, sizeof(grp))) {
			*err = -errno;
			goto out_sock;
		}
	}
	*err = 0;
	return nl;

out_sock:
	nl_socket_free(nl->sk);
out_free:
	free(nl);
	return NULL;
}

void kt_nl_close(struct kt_nl *nl)
{
	if (!nl)
		return;
	nl_socket_free(nl->sk);
	free(nl);
}

int kt_nl_fd(struct kt_nl *nl)
{
	return nl_socket_get_fd(nl->sk);
}

int kt_nl_rcvbuf(struct kt_nl *nl, int bytes)
{
	/* FORCE: past net.core.rmem_max, as root may */
	if (setsockopt(nl_socket_get_fd(nl->sk), SOL_SOCKET, SO_RCVBUFFORCE,
		       &bytes, sizeof(bytes)))
		return -errno;
	return 0;
}

int kt_nl_event(struct kt_nl *nl, int timeout_ms, struct kt_nl_msg *m)
{
	struct pollfd p = { .fd = nl_socket_get_fd(nl->sk), .events = POLLIN };
	int ret;

	for (;;) {
		ret = poll(&p, 1, timeout_ms);
		if (ret < 0)
			return -errno;
		if (ret == 0)
			return -ETIMEDOUT;
		nl->out = m;
		nl->nr = 0;
		nl->max = 1;
		nl->got = false;
		ret = nl_recvmsgs_default(nl->sk);
		if (ret < 0)
			return -EIO;
		if (nl->got)
			return 0;
	}
}

int kt_nl_wait(struct kt_nl *nl, uint8_t cmd, uint64_t id, int timeout_ms,
	       struct kt_nl_msg *m)
{
	uint64_t end = kt_now_ns() + (uint64_t)timeout_ms * 1000000;
	int ret;

	for (;;) {
		uint64_t now = kt_now_ns();

		if (now >= end)
			return -ETIMEDOUT;
		ret = kt_nl_event(nl, (int)((end - now) / 1000000) + 1, m);
		if (ret)
			return ret;
		if (m->cmd == cmd && m->id == id)
			return 0;
	}
}

static int kt_nl_request(struct kt_nl *nl, uint8_t cmd, int flags, uint64_t id,
			 struct kt_nl_msg *out, int max)
{
	struct nl_msg *msg = nlmsg_alloc();
	int ret;

	if (!msg)
		return -ENOMEM;
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl->family, 0,
			 (flags & NLM_F_DUMP) ? flags : flags | NLM_F_ACK, cmd,
			 DJINN_FAMILY_VERSION) ||
	    (id && nla_put_u64(msg, DJINN_A_SESSION_ID, id))) {
		nlmsg_free(msg);
		return -EMSGSIZE;
	}
	nl->out = out;
	nl->nr = 0;
	nl->max = max;
	nl->err = 0;
	ret = nl_send_auto(nl->sk, msg);
	nlmsg_free(msg);
	if (ret < 0)
		return -EIO;
	ret = nl_recvmsgs_default(nl->sk);
	if (nl->err)
		return nl->err;
	if (ret < 0)
		return -EIO;
	/* A doit's reply then its ack: read the ack too. */
	if (!(flags & NLM_F_DUMP) && nl->nr) {
		ret = nl_recvmsgs_default(nl->sk);
		if (nl->err)
			return nl->err;
	}
	return nl->nr;
}

int kt_nl_get(struct kt_nl *nl, uint64_t id, struct kt_nl_msg *m)
{
	int ret = kt_nl_request(nl, DJINN_CMD_GET, 0, id, m, 1);

	return ret < 0 ? ret : ret == 1 ? 0 : -EIO;
}

int kt_nl_dump(struct kt_nl *nl, struct kt_nl_msg *out, int max)
{
	return kt_nl_request(nl, DJINN_CMD_GET, NLM_F_DUMP, 0, out, max);
}

int kt_nl_kill(struct kt_nl *nl, uint64_t id)
{
	int ret = kt_nl_request(nl, DJINN_CMD_KILL, 0, id, NULL, 0);

	return ret < 0 ? ret : 0;
}
