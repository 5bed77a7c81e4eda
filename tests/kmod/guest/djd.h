/* SPDX-License-Identifier: MIT */
/*
 * In-guest helpers for the tests and benchmarks of djinnd on djinn.ko:
 * start and stop a djinnd, and speak its protocol (client and admin
 * sockets) directly, so that what is tested is djinnd and the module.
 */
#ifndef DJINN_DJD_H
#define DJINN_DJD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <djinn/proto.h>
#include <linux/djinn.h>

#define DJD_SOCK "/tmp/djd/djinnd.sock"
#define DJD_ADMIN "/tmp/djd/admin.sock"
#define DJD_LOG "/tmp/djd/djinnd.log"

/* Start djinnd (from $PATH) with --leases @leases ("kmod", "user"), the
 * default lease @lease_ms and @log_level; wait until both sockets
 * accept. Its pid, or -errno. */
pid_t djd_start(const char *leases, unsigned int lease_ms,
		const char *log_level);
/* The same with more of djinnd's options, NULL-terminated. */
pid_t djd_start_with(const char *leases, unsigned int lease_ms,
		     const char *log_level, const char *const *extra);
/* What each start does around its fork (NULL: nothing): @before and
 * @after in this process, @child in the child before the exec, each
 * with @arg. A test's fd store (tests/integration/store.h) passes its
 * fds so. */
struct djd_fork_hooks {
	void (*before)(void *arg);
	void (*child)(void *arg);
	void (*after)(void *arg);
	void *arg;
};
void djd_set_fork_hooks(const struct djd_fork_hooks *h);
/* A successor of the djinnd serving: the same options, its sockets and
 * log left as they are (with --handover in @extra it takes over). Its
 * pid, or -errno; the caller waits for the predecessor to exit. */
pid_t djd_start_next(const char *leases, unsigned int lease_ms,
		     const char *log_level, const char *const *extra);
/* SIGTERM, wait; 0 if it exited 0. */
int djd_stop(pid_t pid);

/* A connection to a unix socket, or -errno. */
int djd_connect(const char *path);
/* One request and its answer: 0 with up to @ans_len bytes of its payload
 * in @ans (its length in *@got if not NULL), the daemon's negative errno,
 * or an I/O -errno. */
int djd_call(int fd, uint16_t op, uint64_t session, const void *req,
	     uint32_t req_len, void *ans, size_t ans_len, uint64_t *got);
/* The two halves, for a client that waits elsewhere in between; the
 * request_id sent last. */
int djd_call_send(int fd, uint16_t op, uint64_t session, const void *req,
		  uint32_t req_len);
int djd_call_recv(int fd, void *ans, size_t ans_len, uint64_t *got);
extern uint64_t djd_last_request;
/* The sessions djinnd has (ADMIN_SESSIONS): their count, at most @max
 * copied; or -errno. */
int djd_sessions(struct djinn_admin_session *out, int max);
/* The session @id as the admin socket sees it: 0, or -ENOENT. */
int djd_session(uint64_t id, struct djinn_admin_session *out);
int djd_stats(struct djinn_admin_stats *st);
int djd_vmu(struct djinn_admin_vmu *v);

/* A local client's session on /dev/djinn bound to djinnd (SESSION_BIND
 * over a fresh connection): the session file, the connection, the ids. */
struct djd_client {
	int dev, sock;
	uint64_t kid, id;
	uint8_t token[16];
	void *ring;
	size_t ring_len;
	struct djinn_ring_offsets off;
};
int djd_client_bind(struct djd_client *c, const char *tenant,
		    uint64_t lease_ns);
void djd_client_close(struct djd_client *c);
/* A data tensor of @bytes in session @id on connection @fd: 0 or -errno. */
int djd_tensor(int fd, uint64_t id, uint64_t bytes);

uint64_t djd_now_ns(void);

#endif /* DJINN_DJD_H */
