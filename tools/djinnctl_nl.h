/* SPDX-License-Identifier: MIT */
/*
 * djinnctl's side of djinn.ko's generic netlink family "djinn"
 * (Documentation/netlink/specs/djinn.yaml), through libnl-genl-3: the
 * kernel's sessions, killing one, and following the "events" group.
 *
 * Each function returns 0, -ENOENT when the family is not registered
 * (djinn.ko is not loaded: the caller falls back to djinnd's admin
 * socket), or another -errno with a message in @msg.
 */
#ifndef DJINNCTL_NL_H
#define DJINNCTL_NL_H

#include <stddef.h>
#include <stdint.h>

/* `session list`: the table, or JSON through json_print.h. */
int knl_session_list(char *msg, size_t len);
/* `session kill ID`: DJINN_CMD_KILL (CAP_NET_ADMIN and CAP_SYS_ADMIN). */
int knl_session_kill(uint64_t id, char *msg, size_t len);
/* `monitor`: one JSON object per event on stdout, flushed, until
 * SIGINT or SIGTERM (0) or @max events (0: no limit). */
int knl_monitor(uint64_t max, char *msg, size_t len);

#endif /* DJINNCTL_NL_H */
