/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the djinn.ko tests that run inside the QEMU guest: opening
 * sessions, raw ioctls that return -errno, the ring, dropping privileges
 * and a small libnl client of the "djinn" family.
 */
#ifndef DJINN_KT_H
#define DJINN_KT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/djinn.h>

#define KT_NOBODY 65534

/* ioctl() as -errno: 0 on success. */
int kt_ioctl(int fd, unsigned long cmd, void *arg);
/* A fresh open of /dev/djinn (asserts). */
int kt_open_dev(void);
/* Open a file with a session of @lease_ns and @entries ring slots. */
int kt_session(const char *tenant, uint64_t lease_ns, uint32_t entries,
	       struct djinn_ioc_session_open *out);
/* A file attached as the daemon (asserts). */
int kt_daemon(void);
int kt_info(int fd, uint64_t id, struct djinn_ioc_session_info *info);
int kt_heartbeat(int fd, uint64_t id, bool set_head, uint32_t head);
int kt_signal(int fd, uint64_t id, uint32_t phase, uint64_t expected_ns);
int kt_post(int dfd, uint64_t id, uint64_t user_data, uint32_t *tail);
int kt_kill(int fd, uint64_t id);
uint64_t kt_now_ns(void);

/* The ring of a session file, mapped read-only. */
struct kt_ring {
	void *map;
	size_t len;
	const uint32_t *head, *tail, *mask, *entries, *flags, *overflow;
	const struct djinn_cqe *cqes;
};
int kt_ring_map(int fd, const struct djinn_ioc_session_open *o,
		struct kt_ring *r);
void kt_ring_unmap(struct kt_ring *r);

/* Run @fn in a child that dropped to uid/gid nobody and every
 * capability; returns fn's return value (the child's exit status), or -1
 * if the child died otherwise. */
int kt_as_nobody(int (*fn)(void *arg), void *arg);

/* The "djinn" generic netlink family through libnl. */
struct kt_nl_msg {
	uint8_t cmd;
	uint64_t id;
	char tenant[DJINN_TENANT_LEN];
	uint32_t state, phase, pid, uid, kind;
	uint64_t expected_ns, time_ns, posts, overflow, signals, heartbeats;
};
struct kt_nl;
/* Connect; with @events, join the "events" group. NULL and -errno in
 * *err on failure. */
struct kt_nl *kt_nl_open(bool events, int *err);
void kt_nl_close(struct kt_nl *nl);
int kt_nl_fd(struct kt_nl *nl);
/* A receive buffer of @bytes for a busy events socket (root). */
int kt_nl_rcvbuf(struct kt_nl *nl, int bytes);
/* Next event within @timeout_ms: 0, -ETIMEDOUT, or -errno. */
int kt_nl_event(struct kt_nl *nl, int timeout_ms, struct kt_nl_msg *m);
/* Next event of command @cmd about @id within @timeout_ms, skipping
 * others. */
int kt_nl_wait(struct kt_nl *nl, uint8_t cmd, uint64_t id, int timeout_ms,
	       struct kt_nl_msg *m);
int kt_nl_get(struct kt_nl *nl, uint64_t id, struct kt_nl_msg *m);
/* Dump into @out (at most @max); returns the count or -errno. */
int kt_nl_dump(struct kt_nl *nl, struct kt_nl_msg *out, int max);
int kt_nl_kill(struct kt_nl *nl, uint64_t id);

#endif /* DJINN_KT_H */
