/* SPDX-License-Identifier: MIT */
/*
 * File descriptors that outlive djinnd: its service manager's store
 * (systemd's FDSTORE=1, sd_pid_notify_with_fds(3)), and those the store
 * (or whoever started djinnd) passes back at start (LISTEN_FDS and
 * LISTEN_FDNAMES, sd_listen_fds_with_names(3)).
 *
 * Each fd is stored under a name of its own. A listening socket's is its
 * kind and its address as configured ("client-tcp%3A127.0.0.1%3A7000":
 * FDNAME may not hold a colon, so ':', '%' and bytes outside printable
 * ASCII are escaped), so that a djinnd started with the same listener
 * finds it again and takes it instead of binding anew (net/listen.c
 * checks that it listens where the name says): the socket, and the
 * connections waiting in its backlog, live across the restart, and a
 * client that connects meanwhile waits rather than being refused.
 *
 * fdstore_init() takes what was passed, once, before the listeners open;
 * fdstore_retain() closes (and has the store forget) those no listener
 * names any more, before any address is bound; fdstore_take() hands one
 * out by name; fdstore_done() lets go of the rest. fdstore_keep() puts
 * an fd in the store. Without $NOTIFY_SOCKET there is no store: nothing
 * is kept, and nothing is passed.
 *
 * Without a service manager, `djinnd --handover PATH` does the same from
 * process to process: each djinnd serves PATH (a unix SOCK_SEQPACKET
 * socket, mode 0600), and a new one started with the same PATH connects
 * to it (checking that its server runs as djinnd's uid or root) and is
 * sent every listening socket, a message each (its name, the fd by
 * SCM_RIGHTS), then "end", by a running djinnd that sends only to its
 * own uid or root. Both serve until the new one is ready: then it tells
 * the old one to drain and exit, as on SIGTERM (fdstore_handover_finish(),
 * through a pidfd). A successor that dies first, or a peer that only
 * looked, leaves the old djinnd serving. A handover that fails stops the
 * new djinnd: it does not bind in the running one's place.
 */
#ifndef DJINN_NET_FDSTORE_H
#define DJINN_NET_FDSTORE_H

#include <stdbool.h>
#include <stddef.h>

/* A stored fd's name, at most (FDNAME's limit) */
#define FDSTORE_NAME_MAX 255

/* Take the fds passed at start (close-on-exec from here on): systemd's
 * (LISTEN_FDS), else, with @handover, those of the djinnd serving that
 * path. The number taken (0 for none: nobody serves @handover), or a
 * negative errno (a handover that failed, names that do not match). */
int fdstore_init(const char *handover);
/* Close, and drop from the store, the passed fds whose names are not
 * among @names[0 .. @n). */
void fdstore_retain(const char *const *names, unsigned int n);
/* The passed fd named @name, now the caller's, or -1. */
int fdstore_take(const char *name);
/* A passed fd taken but not used: closed, and dropped from the store. */
void fdstore_drop(const char *name, int fd);
/* Whether the state passed at start came from a --handover predecessor
 * (which serves on if it cannot be restored), not from the store. */
bool fdstore_handed_state(void);
/* A passed fd taken for good: the store forgets it (a stored
 * connection's socket closes when djinnd closes it). */
void fdstore_forget(const char *name);
/* Close the passed fds nobody took. */
void fdstore_done(void);
/* djinnd serves: a predecessor that handed its sockets over is told to
 * drain (SIGTERM); one that handed its state over is told it may exit:
 * a negative errno when it cannot be told (it serves on, with the
 * memory this djinnd restored: this one must exit at once), else 0. */
int fdstore_handover_finish(void);
/* Store @fd under @name, dropped by the store if it hangs up (@poll):
 * true when a store took the message. */
bool fdstore_keep(const char *name, int fd, bool poll);
/* The first passed fd whose name begins with @prefix, now the caller's,
 * its name in @name; or -1. */
int fdstore_take_prefix(const char *prefix, char *name, size_t len);
/* Whether @name is in the store as far as this djinnd knows: it stored
 * it, or took it as passed from the store, and has not had the store
 * forget it since (the crash journal keeps the pools there once). */
bool fdstore_has(const char *name);
/* Whether djinnd runs under a store ($NOTIFY_SOCKET). */
bool fdstore_present(void);
/* @prefix and @spec, escaped, into @out: 0, or -ENAMETOOLONG past
 * FDSTORE_NAME_MAX. */
int fdstore_name(char *out, size_t len, const char *prefix, const char *spec);
/* Hand @n fds @fds named @names to the successor connected on @sock
 * (--handover): 0, or a negative errno (it may have some of them). */
int fdstore_handover_send(int sock, char *const *names, const int *fds,
			  unsigned int n);

#endif /* DJINN_NET_FDSTORE_H */
