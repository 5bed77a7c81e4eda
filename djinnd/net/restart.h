/* SPDX-License-Identifier: MIT */
/*
 * Planned restarts that keep djinnd's state: sessions, their tensors and
 * the client connections (include/djinn/state.h is the record).
 *
 * Handing over (the running djinnd, when a successor connects to
 * --handover's socket): the client and admin listeners stop accepting
 * (new clients wait in the backlog), leases stop running (HEARTBEATs
 * wait unread), and every connection is held between two frames
 * (conn_hold()); requests in flight finish and their answers go out.
 * Once nothing runs, nothing is owed, no accept is outstanding and every
 * connection is held, the record is written (svc/state.h, and an entry
 * per connection) and sent with the listening sockets, the record's two
 * memfds and each connection's socket. The successor restores them and
 * says "serving": then this djinnd exits at once, touching nothing (the
 * sockets and the sessions are the successor's). Until then the I/O
 * loop waits for that word. A successor that closes first leaves this
 * djinnd serving as before, with everything: listeners accept, leases
 * run (the time held added to each), connections read again; one that
 * says nothing for RESTART_READY_S is killed, and the same follows.
 * Requests still running after RESTART_QUIESCE_S, or a record that
 * cannot be written, fail the handover the same way, the successor told
 * why; a SIGTERM that came meanwhile is then answered as any.
 *
 * Kept: sessions (id, token, tenant, priority, lease with the restart's
 * gap added back, handle keys and generations), their tensors (data and
 * text, at their handles, byte for byte), their models (opened again by
 * name, their weights checked by fingerprint) and contexts (KV cache and
 * last logits: each continues to the tokens it would have given), the
 * graphs' outputs each remembers for DJINN_REF_RESULT, and client
 * connections over unix sockets and plain TCP, with what they had
 * received; a context paused at a breakpoint stays paused, to be resumed.
 * Uploaded models are made again from their configuration, their
 * weights where they were (a streamed one makes the handover fail).
 * Under kernel leases /dev/djinn's file goes too (RESTART_KMOD_FD): its
 * proxies and the sessions bound to clients' own kernel sessions live
 * on it, and the successor takes each over (lease_kmod.c).
 * A dead device's djinnd hands its state over the same way (server.c),
 * each object of its sessions that was in device memory kept as lost.
 * Not kept yet: TLS connections (their OpenSSL state stays in the
 * process: they are closed after a GOAWAY, and their clients
 * reconnect).
 */
#ifndef DJINN_NET_RESTART_H
#define DJINN_NET_RESTART_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct server;
struct vmu_piece;

#define RESTART_QUIESCE_S 30 /* for requests in flight to finish */
#define RESTART_READY_S 120 /* for the successor to restore and serve */

/* The name /dev/djinn's file (kernel leases) is passed under. */
#define RESTART_KMOD_FD "kmod"

/* A successor of pid @pid connected on @sock (which is now the
 * restart's): begin handing over. */
void restart_hand_over(struct server *srv, int sock, pid_t pid);
/* SIGTERM under a service manager with an fd store: keep the state
 * there for the next start (systemctl restart), as for a successor,
 * and exit; systemd discards it if the unit is stopped instead. Whether
 * that began (else the caller drains, as without a store). If it
 * cannot finish, djinnd drains through
 * srv->hooks.drain. */
bool restart_to_store(struct server *srv);
/*
 * At start, before the devices open: take the record passed ("state",
 * "state-data") and check it, and take the pools it names ("pool-N": a
 * device whose memory is a file, the CPU backend's, whose data the
 * record says is in place in it) and swap arenas ("swap-N": where its
 * swapped-out regions' host copies are). restart_pool() hands device @index's
 * out: its fd (the caller's), its granule and the pieces in use, which
 * its provider keeps for the restore (vmu_host_provider_open()); -1 for
 * none. Once the devices, the session table and the listeners are up,
 * restart_restore() restores the record's sessions and connections
 * ("conn-N"), and the devices' providers let go of what no restored
 * object took. A record that is refused or cannot be restored is logged
 * and nothing of it restored: 0 (djinnd starts afresh) when it came
 * from a store, the negative errno when from a --handover predecessor,
 * which serves on. restart_abandon() closes a record not restored, and
 * with @forget has the store let go of it (djinnd starts afresh; else
 * the next start finds it again).
 */
int restart_record_open(struct server *srv);
int restart_pool(struct server *srv, unsigned int index, uint64_t *granularity,
		 const struct vmu_piece **keep, unsigned int *nr);
/* The same for device @index's swap arena ("swap-N": the host copies of
 * its swapped-out regions, provider.h's swap_arena()). */
int restart_swap(struct server *srv, unsigned int index,
		 const struct vmu_piece **keep, unsigned int *nr);
int restart_restore(struct server *srv);
void restart_abandon(struct server *srv, bool forget);
/* Into the store, each once (those there already are left): every CPU
 * device's pool and swap arena ("pool-N", "swap-N") and /dev/djinn's
 * file ("kmod"), what a record points into. Whether the store took
 * them. restart_forget_files(): the store lets go of them. */
bool restart_keep_files(struct server *srv);
void restart_forget_files(struct server *srv);
/* djinnd serves (its predecessor has been told): the restored
 * connections receive from here on. */
void restart_serving(struct server *srv);
/* The predecessor is gone: what it held and nothing restored took gives
 * its pages back (the swap arena's, swap_trim()), outside the pause. */
void restart_settled(struct server *srv);

#endif /* DJINN_NET_RESTART_H */
