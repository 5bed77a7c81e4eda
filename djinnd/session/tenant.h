/* SPDX-License-Identifier: MIT */
/*
 * Who a client is (Documentation/security.rst, "Identity"): its tenant
 * comes from what the kernel says of the peer, never from a string the
 * client sent. A unix-socket client is the tenant whose [tenant.NAME]
 * uids list its SO_PEERCRED uid, else the one whose gids list its
 * primary group, else the first in the file's order whose gids list one
 * of its supplementary groups (SO_PEERGROUPS), else "uid:N". The
 * string a client sends at SESSION_OPEN is a label within its tenant.
 */
#ifndef DJINN_TENANT_H
#define DJINN_TENANT_H

#include <stdbool.h>
#include <sys/types.h>

#include <djinn/proto.h>

#include "list.h"

struct server;
struct server_config;
struct tenant_map;

/*
 * struct tenant_state - what a tenant holds now, against its quotas
 * (struct tenant_map): its connections, its sessions (in the table) and
 * their graphs and model steps queued or running. One per tenant that
 * holds anything, on srv->tenants; I/O thread only. Freed when it holds
 * nothing (tenant_state_drop()).
 */
struct tenant_state {
	struct list_head node;
	char name[DJINN_TENANT_LEN];
	unsigned int conns, sessions, inflight;
};

/* @name's state, or NULL while it holds nothing. */
struct tenant_state *tenant_state_find(struct server *srv, const char *name);
/* @name's state, made if it holds nothing yet: NULL when out of memory. */
struct tenant_state *tenant_state_get(struct server *srv, const char *name);
/* Free @t if it holds nothing any more. */
void tenant_state_drop(struct tenant_state *t);
/* @name's [tenant.NAME] entry, or NULL (no quotas). */
const struct tenant_map *tenant_map_find(const struct server_config *cfg,
					 const char *name);

/* The tenant of uid @uid with groups @gids[0 .. @n) (the primary one
 * first), into @out. */
void tenant_of(const struct server_config *cfg, uid_t uid, const gid_t *gids,
	       unsigned int n, char out[DJINN_TENANT_LEN]);

/* Whether sessions of @tenant may upload and run client kernels
 * ([tenant.NAME] client_kernels; off by default). */
bool tenant_client_kernels(const struct server_config *cfg, const char *tenant);

/* The uid that owns the peer's socket of TCP socket @fd, when the peer
 * is on this host (loopback), from the kernel's sock_diag: 0, or -ENOENT
 * (no such socket here), or another negative errno. */
int tenant_tcp_peer_uid(int fd, uid_t *uid);

/* The groups of the peer of unix socket @fd: its primary gid @gid first,
 * then what SO_PEERGROUPS gives, at most @max; how many. */
unsigned int tenant_peer_groups(int fd, gid_t gid, gid_t *gids,
				unsigned int max);

#endif /* DJINN_TENANT_H */
