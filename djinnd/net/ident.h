/* SPDX-License-Identifier: MIT */
/*
 * Who a loopback TCP peer is, found off the I/O thread
 * (Documentation/security.rst, "Identities").
 *
 * The kernel knows which uid owns the peer's socket of a loopback TCP
 * connection (sock_diag, session/tenant.h's tenant_tcp_peer_uid()): a
 * netlink round trip. It runs on a thread of its own, one connection
 * after another, so that a flood of connections costs the I/O thread
 * only their accepts; the answer comes back to the I/O thread through a
 * loop_notify, and until then the connection's frames wait unread (its
 * receive is not armed).
 */
#ifndef DJINN_NET_IDENT_H
#define DJINN_NET_IDENT_H

#include <stdbool.h>

struct server;
struct conn;

/* The thread, and its way back to @srv's loop: 0 or -errno. */
int ident_start(struct server *srv);
/* Stop it; a lookup not done yet comes back failed (-ECANCELED). */
void ident_stop(struct server *srv);
/* Look @c's peer up (I/O thread; @c gets a reference until
 * conn_ident_done(), net/conn.h, is called with the answer). */
void ident_lookup(struct conn *c);
/* For tests (ADMIN_FAULT_INJECT): lookups wait while @hold. */
void ident_hold(struct server *srv, bool hold);

#endif /* DJINN_NET_IDENT_H */
