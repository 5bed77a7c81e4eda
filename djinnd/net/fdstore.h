/* SPDX-License-Identifier: MIT */
/*
 * File descriptors that outlive djinnd: its service manager's store
 * (systemd's FDSTORE=1, sd_pid_notify_with_fds(3)), and those the store
 * (or whoever started djinnd) passes back at start (LISTEN_FDS and
 * LISTEN_FDNAMES, sd_listen_fds_with_names(3)).
 *
 * Each fd is stored under a name of its own. A listening socket's is its
 * kind and its address ("client-tcp%3A127.0.0.1%3A7000": FDNAME may not
 * hold a colon, so ':' and '%' are escaped), so that a djinnd started
 * with the same listener finds it again and takes it instead of binding
 * anew: the socket, and the connections waiting in its backlog, live
 * across the restart, and a client that connects meanwhile waits rather
 * than being refused.
 *
 * fdstore_init() takes what was passed, once, before the listeners open;
 * fdstore_take() hands out one by name; fdstore_done() closes the rest
 * and has the store forget them (a listener no longer configured).
 * fdstore_keep() puts an fd in the store. Without $NOTIFY_SOCKET there is
 * no store: nothing is kept, and nothing is passed.
 */
#ifndef DJINN_NET_FDSTORE_H
#define DJINN_NET_FDSTORE_H

#include <stdbool.h>
#include <stddef.h>

/* A stored fd's name, at most (FDNAME's limit) */
#define FDSTORE_NAME_MAX 255

/* Take the fds passed at start (close-on-exec from here on). The number
 * taken, or a negative errno. */
int fdstore_init(void);
/* The passed fd named @name, now the caller's, or -1. */
int fdstore_take(const char *name);
/* Close the passed fds nobody took, and drop them from the store. */
void fdstore_done(void);
/* Store @fd under @name: true when a store took the message. */
bool fdstore_keep(const char *name, int fd);
/* Whether djinnd runs under a store ($NOTIFY_SOCKET). */
bool fdstore_present(void);
/* @prefix and @spec, with ':' and '%' escaped, into @out: 0, or
 * -ENAMETOOLONG past FDSTORE_NAME_MAX. */
int fdstore_name(char *out, size_t len, const char *prefix, const char *spec);

#endif /* DJINN_NET_FDSTORE_H */
