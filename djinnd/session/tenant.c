// SPDX-License-Identifier: MIT
/*
 * Who a client is: tenant.h.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "server.h"
#include "session/tenant.h"

void tenant_of(const struct server_config *cfg, uid_t uid, const gid_t *gids,
	       unsigned int n, char out[DJINN_TENANT_LEN])
{
	for (unsigned int i = 0; i < cfg->nr_tmaps; i++) {
		const struct tenant_map *m = &cfg->tmaps[i];

		for (unsigned int k = 0; k < m->nr_uids; k++)
			if (m->uids[k] == uid) {
				memcpy(out, m->tenant, DJINN_TENANT_LEN);
				return;
			}
	}
	/* by the primary group, then by the first tenant in the file's
	 * order that lists a supplementary one (the kernel sorts those) */
	for (unsigned int pass = 0; pass < 2 && n; pass++)
		for (unsigned int i = 0; i < cfg->nr_tmaps; i++) {
			const struct tenant_map *m = &cfg->tmaps[i];

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

bool tenant_client_kernels(const struct server_config *cfg, const char *tenant)
{
	for (unsigned int i = 0; i < cfg->nr_tmaps; i++)
		if (!strcmp(cfg->tmaps[i].tenant, tenant))
			return cfg->tmaps[i].client_kernels;
	return false;
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
