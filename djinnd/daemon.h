/* SPDX-License-Identifier: MIT */
/*
 * The daemon's start, run and reload (server.c, for main.c): the top
 * floor's own interface, which no floor below includes
 * (Documentation/architecture.rst).
 */
#ifndef DJINN_DAEMON_H
#define DJINN_DAEMON_H

#include <stdbool.h>

#include "server.h"

int server_block_signals(void);
int server_init(struct server *srv, const struct server_config *cfg);
int server_run(struct server *srv);
void server_exit(struct server *srv);
/* Jobs queued or running on every device's executors. */
unsigned int server_depth(struct server *srv);

/* The session table's limits (struct session_limits) from srv->cfg: at
 * start, and after a reload has changed it. */
void server_session_limits(struct server *srv);
/* Set (@on) or lift each [tenant.NAME] memory and swap quota of srv->cfg on
 * every device's VMU. */
void server_tenant_quotas(struct server *srv, bool on);
/* Give every device's model store the [model.NAME] budgets of srv->cfg,
 * and lift those of @old (@nr_old of them) that it no longer names: each
 * from the model's next load. */
void server_model_budgets(struct server *srv, const struct model_budget *old,
			  unsigned int nr_old);

/* The scheduler's settings of @cfg (its shares in place). */
struct sched_config server_sched_config(const struct server_config *cfg);

#endif /* DJINN_DAEMON_H */
