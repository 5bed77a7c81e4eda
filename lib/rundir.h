/* SPDX-License-Identifier: MIT */
/*
 * Where djinnd's sockets are when nothing says otherwise, found one way
 * by djinnd (its defaults), libdjinn (the address djinn_connect(NULL)
 * dials without $DJINN_ADDR) and djinnctl (its admin socket).
 */
#ifndef DJINN_RUNDIR_H
#define DJINN_RUNDIR_H

#include <stddef.h>

/* The system service's directory (systemd's RuntimeDirectory=djinn). */
#define DJINND_SYSTEM_RUN_DIR "/run/djinn"

/*
 * djinnd's directory for its sockets: /run/djinn for root (the system
 * service), else $XDG_RUNTIME_DIR/djinn for a user who has one, else
 * "run", relative to the current directory (a checkout). Written into
 * @buf when it is not a constant; returned either way.
 */
const char *djinnd_run_dir(char *buf, size_t len);

/* The socket @name ("djinnd.sock", "admin.sock") in djinnd_run_dir(),
 * into @buf: where djinnd puts it by default. */
void djinnd_socket_default(const char *name, char *buf, size_t len);

/*
 * Where a client looks for djinnd's socket @name, into @buf: where a
 * djinnd of the same user puts it (djinnd_socket_default()); for a user
 * other than root with no such socket there, the system service's
 * /run/djinn/NAME when that one exists.
 */
void djinnd_socket_find(const char *name, char *buf, size_t len);

#endif /* DJINN_RUNDIR_H */
