// SPDX-License-Identifier: MIT
/*
 * Who a client is: tenant.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <sys/socket.h>

#include "session/session.h"
#include "session/tenant.h"

void tenant_of(const struct session_limits *lim, uid_t uid, const gid_t *gids,
	       unsigned int n, char out[DJINN_TENANT_LEN])
{
	for (unsigned int i = 0; i < lim->nr_maps; i++) {
		const struct tenant_map *m = &lim->maps[i];

		for (unsigned int k = 0; k < m->nr_uids; k++)
			if (m->uids[k] == uid) {
				memcpy(out, m->tenant, DJINN_TENANT_LEN);
				return;
			}
	}
	/* by the primary group, then by the first tenant in the file's
	 * order that lists a supplementary one (the kernel sorts those) */
	for (unsigned int pass = 0; pass < 2 && n; pass++)
		for (unsigned int i = 0; i < lim->nr_maps; i++) {
			const struct tenant_map *m = &lim->maps[i];

			for (unsigned int k = 0; k < m->nr_gids; k++)
				for (unsigned int g = pass; g < (pass ? n : 1);
				     g++)
					if (m->gids[k] == gids[g]) {
						memcpy(out, m->tenant,
						       DJINN_TENANT_LEN);
						return;
					}
		}
	snprintf(out, DJINN_TENANT_LEN, "uid:%u", (unsigned int)uid);
}

const struct tenant_map *tenant_map_find(const struct session_limits *lim,
					 const char *name)
{
	for (unsigned int i = 0; i < lim->nr_maps; i++)
		if (!strcmp(lim->maps[i].tenant, name))
			return &lim->maps[i];
	return NULL;
}

bool tenant_delegate(const struct session_limits *lim, const char *tenant,
		     uid_t uid)
{
	const struct tenant_map *m = tenant_map_find(lim, tenant);

	for (unsigned int k = 0; m && k < m->nr_delegates; k++)
		if (m->delegates[k] == uid)
			return true;
	return false;
}

bool tenant_client_kernels(const struct session_limits *lim, const char *tenant)
{
	const struct tenant_map *m = tenant_map_find(lim, tenant);

	return m && m->client_kernels;
}

struct tenant_state *tenant_state_find(struct session_table *tab,
				       const char *name)
{
	struct tenant_state *t;

	list_for_each_entry(t, &tab->tenants, node)
		if (!strcmp(t->name, name))
			return t;
	return NULL;
}

struct tenant_state *tenant_state_get(struct session_table *tab,
				      const char *name)
{
	struct tenant_state *t = tenant_state_find(tab, name);

	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	snprintf(t->name, sizeof(t->name), "%s", name);
	INIT_LIST_HEAD(&t->read_conns);
	list_add_tail(&t->node, &tab->tenants);
	return t;
}

void tenant_state_drop(struct tenant_state *t)
{
	if (!t || t->conns || t->sessions || t->inflight || t->read_staged ||
	    t->reads_waiting)
		return;
	list_del_init(&t->node);
	free(t);
}

unsigned int tenant_peer_groups(int fd, gid_t gid, gid_t *gids,
				unsigned int max)
{
	gid_t more[256];
	socklen_t len = sizeof(more);
	unsigned int n = 0;

	if (max)
		gids[n++] = gid;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, more, &len))
		return n; /* the primary group alone */
	for (unsigned int i = 0; i < len / sizeof(gid_t) && n < max; i++)
		if (more[i] != gid)
			gids[n++] = more[i];
	return n;
}

/* ---------------------------------------------------------------------- */
/* Loopback TCP: the peer socket's owner, from sock_diag */

struct diag_answer {
	bool found, orphan;
	uid_t uid;
};

static int diag_valid(struct nl_msg *msg, void *arg)
{
	struct nlmsghdr *nh = nlmsg_hdr(msg);
	struct diag_answer *a = arg;
	const struct inet_diag_msg *m;

	if (nh->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    nlmsg_datalen(nh) < (int)sizeof(*m))
		return NL_SKIP;
	m = nlmsg_data(nh);
	/* A socket no process holds (closed: FIN_WAIT, TIME_WAIT) has no
	 * inode, and the kernel reports its uid as 0: it names no one. */
	if (!m->idiag_inode) {
		a->orphan = true;
		return NL_OK;
	}
	a->found = true;
	a->uid = m->idiag_uid;
	return NL_OK;
}

/* @ss's address as sock_diag wants it: family, port, 16 bytes. A v4
 * address mapped into IPv6 is the IPv4 one (the peer's socket is). */
static void diag_addr(const struct sockaddr_storage *ss, uint8_t *family,
		      __be16 *port, __be32 addr[4])
{
	memset(addr, 0, 16);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;

		*family = AF_INET;
		*port = in->sin_port;
		addr[0] = in->sin_addr.s_addr;
		return;
	}
	{
		const struct sockaddr_in6 *in6 = (const void *)ss;

		*port = in6->sin6_port;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			*family = AF_INET;
			memcpy(addr, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			*family = AF_INET6;
			memcpy(addr, &in6->sin6_addr, 16);
		}
	}
}

int tenant_tcp_peer_uid(int fd, uid_t *uid)
{
	struct inet_diag_req_v2 req = { .sdiag_protocol = IPPROTO_TCP,
					.idiag_states = ~0u };
	struct sockaddr_storage local, peer;
	socklen_t ll = sizeof(local), pl = sizeof(peer);
	struct diag_answer a = { 0 };
	uint8_t fam_local, fam_peer;
	struct nl_sock *sk;
	struct nl_msg *msg;
	int ret;

	if (getsockname(fd, (struct sockaddr *)&local, &ll) ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl))
		return -errno;
	if (local.ss_family != AF_INET && local.ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	/* the peer's socket: its source is our peer, its destination us */
	diag_addr(&peer, &fam_peer, &req.id.idiag_sport, req.id.idiag_src);
	diag_addr(&local, &fam_local, &req.id.idiag_dport, req.id.idiag_dst);
	if (fam_peer != fam_local)
		return -EAFNOSUPPORT;
	req.sdiag_family = fam_peer;
	req.id.idiag_cookie[0] = req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	sk = nl_socket_alloc();
	if (!sk)
		return -ENOMEM;
	ret = nl_connect(sk, NETLINK_SOCK_DIAG);
	if (ret)
		goto out;
	msg = nlmsg_alloc_simple(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST);
	if (!msg) {
		ret = -NLE_NOMEM;
		goto out;
	}
	ret = nlmsg_append(msg, &req, sizeof(req), NLMSG_ALIGNTO);
	if (!ret)
		ret = nl_send_auto(sk, msg);
	nlmsg_free(msg);
	if (ret < 0)
		goto out;
	ret = nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, diag_valid,
				  &a);
	if (!ret)
		ret = nl_recvmsgs_default(sk);
out:
	nl_socket_free(sk);
	if (ret < 0)
		return ret == -NLE_OBJ_NOTFOUND ? -ENOENT : -EIO;
	if (!a.found)
		return a.orphan ? -ESTALE : -ENOENT;
	*uid = a.uid;
	return 0;
}
