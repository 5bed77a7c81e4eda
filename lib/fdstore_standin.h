/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for systemd's file descriptor store, for the tests and
 * benchmarks that start djinnd where systemd is not PID 1 (the
 * integration tests' daemon.h, the guest's, djinn-bench restart): a
 * NOTIFY_SOCKET bound in a directory of its own, read by a thread that
 * keeps the fds of FDSTORE=1 messages by FDNAME and drops them on
 * FDSTOREREMOVE=1, as systemd does; a djinnd started with it
 * (djd_store_pass() in the child) gets them back as LISTEN_FDS and
 * LISTEN_FDNAMES. Unlike systemd it keeps every fd until it is removed
 * (no FDPOLL).
 */
#ifndef DJINN_FDSTORE_STANDIN_H
#define DJINN_FDSTORE_STANDIN_H

#include <stdbool.h>
#include <sys/un.h>

#define DJD_STORE_MAX 256

struct djd_store;

/* A store, its socket bound: NULL on failure (said on stderr). */
struct djd_store *djd_store_open(void);
/* Stop its thread, close its fds, remove its directory. */
void djd_store_close(struct djd_store *st);
/* $NOTIFY_SOCKET for djinnd. */
const char *djd_store_socket(const struct djd_store *st);
/* Whether it holds an fd named @name now (a @name that ends in '*': one
 * whose name begins with the rest). */
bool djd_store_has(struct djd_store *st, const char *name);
/* Wait at most @ms for @name to be there (@want) or gone: whether it
 * came to be so. */
bool djd_store_wait(struct djd_store *st, const char *name, bool want, int ms);
/* Held around a fork, so that the child sees a whole store. */
void djd_store_lock(struct djd_store *st);
void djd_store_unlock(struct djd_store *st);
/* For a child about to exec djinnd (after fork): its fds dup'd to 3..,
 * and LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID and NOTIFY_SOCKET set. */
void djd_store_pass(struct djd_store *st);

#endif /* DJINN_FDSTORE_STANDIN_H */
