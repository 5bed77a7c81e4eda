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
#include <stdint.h>
#include <sys/types.h>

#include <djinn/proto.h>

#include "list.h"

struct session_table;

/*
 * struct tenant_map - [tenant.NAME] uids, gids and client_kernels
 *
 * A unix-socket client whose peer uid is listed is tenant NAME; one
 * whose uid no tenant lists but whose primary or supplementary gid one
 * does, that one's. Anyone else is tenant "uid:N" (tenant_of()).
 * A uid or gid is listed by one tenant at most (config_validate()).
 * @client_kernels: its sessions may upload and run client kernels
 * (KERNEL nodes), which reach all of the device's memory: off unless
 * the administrator says so.
 * @memory, @swap, @sessions, @conns, @inflight, @lease_max_ns: its
 * quotas (0: none): data bytes on each device, of them in host memory
 * (swapped out), sessions and connections open at once, graphs and
 * model steps queued or running, the longest lease.
 * @guaranteed: its resident data on each device that reclaim and the
 * scheduler's swaps leave it (0: none).
 */
#define TENANT_IDS_MAX 32
struct tenant_map {
	char tenant[DJINN_TENANT_LEN];
	unsigned int nr_uids, nr_gids;
	uid_t uids[TENANT_IDS_MAX];
	gid_t gids[TENANT_IDS_MAX];
	/* users that may open sessions of this tenant for it (a front-end
	 * such as djinn serve): SESSION_OPEN with DJINN_SESSION_DELEGATED */
	unsigned int nr_delegates;
	uid_t delegates[TENANT_IDS_MAX];
	bool client_kernels;
	uint64_t memory, swap, guaranteed, lease_max_ns;
	unsigned int sessions, conns, inflight;
	/* where each list was set (config.c: a list set twice in one file
	 * is an error) */
	const char *uids_file, *gids_file, *delegates_file;
	unsigned int uids_line, gids_line, delegates_line;
};

/*
 * struct session_limits - what the configuration says of sessions and
 * tenants: server.max_sessions and max_sessions_per_uid, the lease's
 * default and bounds, and the [tenant.NAME] sections (@maps, @nr_maps:
 * the server's configuration's, in the file's order). server.c sets it
 * at start and after a reload.
 */
struct session_limits {
	unsigned int max_sessions, max_sessions_per_uid;
	uint64_t lease_default_ns, lease_min_ns, lease_max_ns;
	const struct tenant_map *maps;
	unsigned int nr_maps;
};

/*
 * struct tenant_state - what a tenant holds now, against its quotas
 * (struct tenant_map): its connections, its sessions (in the table) and
 * their graphs, model steps and uploaded models' loads queued or
 * running; the staging buffers its reads of device-only memory hold
 * (@read_staged bytes, against memory.read_staging), its reads waiting
 * for them, and the connections whose first waiting read waits for the
 * tenant's staging alone (@read_conns, in turn: net/msg_tensor.c). One per
 * tenant that holds anything, on its session table's @tenants; I/O
 * thread only. Freed when it holds nothing (tenant_state_drop()).
 */
struct tenant_state {
	struct list_head node;
	char name[DJINN_TENANT_LEN];
	unsigned int conns, sessions, inflight;
	uint64_t read_staged;
	unsigned int reads_waiting;
	struct list_head read_conns;
};

/* @name's state, or NULL while it holds nothing. */
struct tenant_state *tenant_state_find(struct session_table *t,
				       const char *name);
/* @name's state, made if it holds nothing yet: NULL when out of memory. */
struct tenant_state *tenant_state_get(struct session_table *t,
				      const char *name);
/* Free @t if it holds nothing any more. */
void tenant_state_drop(struct tenant_state *t);
/* @name's [tenant.NAME] entry, or NULL (no quotas). */
const struct tenant_map *tenant_map_find(const struct session_limits *lim,
					 const char *name);
/* Whether user @uid may open sessions of tenant @tenant for it (its
 * [tenant.NAME] delegates). */
bool tenant_delegate(const struct session_limits *lim, const char *tenant,
		     uid_t uid);

/* The tenant of uid @uid with groups @gids[0 .. @n) (the primary one
 * first), into @out. */
void tenant_of(const struct session_limits *lim, uid_t uid, const gid_t *gids,
	       unsigned int n, char out[DJINN_TENANT_LEN]);

/* Whether sessions of @tenant may upload and run client kernels
 * ([tenant.NAME] client_kernels; off by default). */
bool tenant_client_kernels(const struct session_limits *lim,
			   const char *tenant);

/* The uid that owns the peer's socket of TCP socket @fd, when the peer
 * is on this host (loopback), from the kernel's sock_diag: 0, or -ENOENT
 * (no such socket here), -ESTALE (the peer closed it: no process holds
 * it, and the kernel would say uid 0), or another negative errno. */
int tenant_tcp_peer_uid(int fd, uid_t *uid);

/* The groups of the peer of unix socket @fd: its primary gid @gid first,
 * then what SO_PEERGROUPS gives, at most @max; how many. */
unsigned int tenant_peer_groups(int fd, gid_t gid, gid_t *gids,
				unsigned int max);

#endif /* DJINN_TENANT_H */
