/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the integration tests: start a real djinnd on temporary
 * sockets, talk to it in raw frames, stop it and check how it ended.
 *
 * Nothing here blocks without a bound: every read polls with a timeout
 * and every wait for the daemon has a deadline, so a hung daemon fails a
 * test instead of hanging CI. Functions return 0 or a negative errno and
 * print what went wrong to stderr; the tests do the asserting (the
 * raw-protocol tests through fixture.h's calls).
 */
#ifndef DJINN_TEST_DAEMON_H
#define DJINN_TEST_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include <djinn/proto.h>

#include "clock.h"

/* Default bound on one response; generous for the ASan build. */
#define DJ_TIMEOUT_MS 10000

/*
 * struct djd - one djinnd started by a test
 * @pid:    the daemon
 * @dir:    its mkdtemp() directory (sockets and log)
 * @sock:   the client socket
 * @admin:  the admin socket
 * @log:    its stdout and stderr (log lines, sanitizer reports)
 * @end:    after djd_stop(): how it ended ("exit status 0", "killed by
 *          signal 11", or the sanitizer report's SUMMARY line)
 */
struct djd {
	pid_t pid;
	char dir[64];
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char admin[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char log[96];
	char end[200];
	unsigned int metrics_port; /* its metrics endpoint, on 127.0.0.1 */
	/* the fd store it runs under (store.h), or NULL */
	struct djd_store *store;
	/* how it was started, for djd_restart() */
	char cpu_mem[16];
	unsigned int lease_ms;
	const char *const *extra;
};

/* The daemon binary: $DJINND, else djinnd/djinnd beside this test's
 * build tree (../../djinnd/djinnd from the test binary). */
const char *djd_binary(void);

/*
 * Start djinnd in the foreground with @cpu_mem ("64M") of device memory
 * and a default lease of @lease_ms, models from DIR/models (empty), and
 * its metrics endpoint on a free
 * TCP port of 127.0.0.1, and wait (at most 20 s) until its sockets
 * accept. The daemon gets SIGKILL if this process dies.
 */
int djd_start(struct djd *d, const char *cpu_mem, unsigned int lease_ms);
/* The same, with one more setting @set ("section.key=value", or NULL). */
int djd_start_set(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		  const char *set);
/* The same, with more arguments @extra (NULL-terminated; NULL: none),
 * e.g. { "--fault-injection", NULL }. */
int djd_start_args(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		   const char *const *extra);
/* The same under the fd store stand-in @st (store.h). */
struct djd_store;
int djd_start_store(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		    const char *const *extra, struct djd_store *st);
/* Write model @name into the daemon's model directory (DIR/models) with
 * scripts/mkmodel.py ($DJINN_MKMODEL, else the checkout's beside this
 * build) and its options @args. */
int djd_make_model(const struct djd *d, const char *name, const char *args);

/*
 * Whether djinnd can run here, for a test's main(): 0 when a daemon with
 * @cpu_mem of memory starts and stops cleanly; 77 (skip), said on
 * stdout, when there is no binary, or when this process's own
 * io_uring_setup(2) fails with ENOSYS or EPERM (a kernel without it or
 * with it turned off, a seccomp filter) and djinnd stopped with that
 * very error; 1 for any other failure, one naming io_uring included.
 */
int djd_can_run(const char *cpu_mem);
/* After djd_start() failed because the daemon exited: its last log line
 * (why it could not start), else "". */
const char *djd_start_error(void);

/*
 * SIGTERM the daemon and wait at most @timeout_ms for it to exit. 0 when
 * it exited with status 0 and its log holds no sanitizer report;
 * otherwise it prints why and the log's tail and returns -EIO (or
 * -ETIMEDOUT, after a SIGKILL). Removes the directory either way.
 */
int djd_stop(struct djd *d, int timeout_ms);

/* Kill with SIGKILL, reap, remove the directory: for cleanup after a
 * failed test. No-op when already stopped. */
void djd_kill(struct djd *d);

/*
 * Wait at most @timeout_ms for the daemon to exit by itself (no signal
 * is sent): 0 with its wait status in *@status, or -ETIMEDOUT while it
 * still runs. Its directory and log stay for the test to read;
 * djd_kill() removes them.
 */
int djd_wait_exit(struct djd *d, int timeout_ms, int *status);

/*
 * A planned restart: start a successor exactly as @d was started (@d's
 * @extra must name a --handover path, and stay valid), its output
 * appended to the same log, and wait at most @timeout_ms for the running
 * djinnd to hand over and exit. 0 when it exited with status 0 (then
 * d->pid is the successor's); -ECHILD when the successor exited first,
 * -EIO when the predecessor ended otherwise, -ETIMEDOUT (the successor
 * killed).
 */
int djd_restart(struct djd *d, int timeout_ms);
/* Only start such a successor: its pid (the test reaps it), or -errno. */
pid_t djd_spawn_next(struct djd *d);

/* Connect to TCP @port of 127.0.0.1: the fd, or -errno. */
int dj_connect_tcp(unsigned int port);

/* A TCP port of 127.0.0.1 that nothing listens on now, or 0. */
unsigned int dj_free_port(void);

/* Whether the daemon's log holds a sanitizer report or a crash. */
bool djd_log_has_report(const struct djd *d);
/* Whether a line of @d's log holds @what. */
bool djd_log_has(const struct djd *d, const char *what);

/* Print the last @bytes of the log to stderr. */
void djd_log_tail(const struct djd *d, long bytes);

/* ---------------------------------------------------------------------- */
/* Raw frames */

/* djinnctl: $DJINNCTL, else the build's beside this test
 * (BUILD/tests/integration/X -> BUILD/tools/djinnctl). */
const char *djd_djinnctl(void);

/* A connected unix socket to @path, or a negative errno. */
int dj_connect(const char *path);

/* The same, connected by a child process running as @uid, @gid with
 * supplementary groups @groups[0 .. @n), so that djinnd's SO_PEERCRED
 * (and SO_PEERGROUPS) say so; -EPERM when this process cannot change
 * its ids (not root). The socket's directory is made searchable by
 * everyone (0711) for it. @path "tcp:PORT" connects to 127.0.0.1:PORT
 * instead, from a socket @uid owns. */
int dj_connect_as(const char *path, uid_t uid, gid_t gid, const gid_t *groups,
		  size_t n);

/* Write all of @buf within @timeout_ms: 0, -ETIMEDOUT, or -errno. */
int dj_write(int fd, const void *buf, size_t len, int timeout_ms);

/* Read exactly @len bytes within @timeout_ms: @len, 0 on EOF before
 * anything, -EPIPE on EOF midway, -ETIMEDOUT, or -errno. */
long dj_read(int fd, void *buf, size_t len, int timeout_ms);

/* Whether the peer closed within @timeout_ms (a read returns 0); bytes
 * still queued before the close are read and dropped. 1 closed, 0 still
 * open at the deadline, negative errno on error. */
int dj_wait_eof(int fd, int timeout_ms);

/* Everything @fd receives until the peer closes it, each read waiting
 * at most @timeout_ms: malloc'd and NUL-terminated (the caller frees
 * it), or NULL when out of memory. */
char *dj_read_all(int fd, int timeout_ms);

/* A request header: magic, our version, no flags. */
struct djinn_hdr dj_hdr(uint16_t op, uint64_t request_id, uint64_t session_id,
			uint64_t payload_len);

/* Send @h and then @len bytes of @payload (which may be shorter than
 * h->payload_len: a truncated frame). */
int dj_send_raw(int fd, const struct djinn_hdr *h, const void *payload,
		size_t len);

/* Send a request with @len payload bytes. */
int dj_send(int fd, uint16_t op, uint64_t request_id, uint64_t session_id,
	    const void *payload, size_t len);

/*
 * struct dj_resp - one response frame
 * @hdr:   its header
 * @data:  its payload (malloc'd, NULL when empty)
 * @len:   payload bytes
 * @error: for DJINN_F_ERROR, the errno (negative); else 0
 * @msg:   for DJINN_F_ERROR, the message, NUL-terminated
 */
struct dj_resp {
	struct djinn_hdr hdr;
	uint8_t *data;
	uint64_t len;
	int error;
	char msg[DJINN_MAX_ERROR_MSG + 1];
};

/*
 * Read one response frame within @timeout_ms. 1 with @r filled, 0 on EOF
 * before a header, negative errno otherwise (-EBADMSG: not a well-formed
 * response frame: magic, version, flags, an error payload's length).
 */
int dj_recv(int fd, struct dj_resp *r, int timeout_ms);
void dj_resp_free(struct dj_resp *r);

/*
 * Send a request and read its response, which must carry the same
 * request id and opcode (-EBADMSG otherwise). 1 with @r filled, 0 on
 * EOF, negative errno. The request id is taken from a global counter.
 */
int dj_call(int fd, uint16_t op, uint64_t session_id, const void *payload,
	    size_t len, struct dj_resp *r);

/* A fresh request id, unique in this process. */
uint64_t dj_next_id(void);

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t dj_now_ms(void);

#endif /* DJINN_TEST_DAEMON_H */
