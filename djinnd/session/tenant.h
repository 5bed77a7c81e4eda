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

struct server_config;

/* The tenant of uid @uid with groups @gids[0 .. @n) (the primary one
 * first), into @out. */
void tenant_of(const struct server_config *cfg, uid_t uid, const gid_t *gids,
	       unsigned int n, char out[DJINN_TENANT_LEN]);

/* Whether sessions of @tenant may upload and run client kernels
 * ([tenant.NAME] client_kernels; off by default). */
bool tenant_client_kernels(const struct server_config *cfg, const char *tenant);

/* The groups of the peer of unix socket @fd: its primary gid @gid first,
 * then what SO_PEERGROUPS gives, at most @max; how many. */
unsigned int tenant_peer_groups(int fd, gid_t gid, gid_t *gids,
				unsigned int max);

#endif /* DJINN_TENANT_H */
