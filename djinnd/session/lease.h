/* SPDX-License-Identifier: MIT */
/*
 * Lease providers. A session's lease is renewed by heartbeats (and any
 * request); when one runs out, the provider reports it and the session
 * ends (session_end()). The user-space provider keeps deadlines itself and is
 * polled from the I/O thread's timer (lease.c); the kernel module's
 * provider (lease_kmod.c) learns of expiry and process death from
 * /dev/djinn's events instead, behind the same operations.
 */
#ifndef DJINN_LEASE_H
#define DJINN_LEASE_H

#include <stdint.h>
#include <sys/types.h>

struct session;
struct session_table;

struct lease_provider;

/* What a kernel session was opened with (verify). */
struct lease_kinfo {
	char tenant[64];
	uint32_t priority;
	uint64_t lease_ns;
	uint32_t ring_entries; /* 0: no ring */
};

struct lease_ops {
	const char *name;
	int (*open)(struct lease_provider *lp, struct session *s, uint64_t now);
	void (*renew)(struct lease_provider *lp, struct session *s,
		      uint64_t now);
	void (*close)(struct lease_provider *lp, struct session *s);
	/* Call @expired for each session whose lease ran out by @now;
	 * return the ns until the next check is due. */
	uint64_t (*poll)(struct lease_provider *lp, uint64_t now,
			 void (*expired)(struct session *s, void *arg),
			 void *arg);
	void (*destroy)(struct lease_provider *lp);

	/* Optional (NULL: not offered). */

	/* A request of @s was answered after it ran (a graph, a model
	 * step): tell the client (kmod: a record in its session's ring,
	 * see Documentation/protocol.rst, SESSION_BIND). */
	void (*complete)(struct lease_provider *lp, struct session *s,
			 uint64_t request_id, uint16_t opcode, int res);
	/* Check that a local client of uid @uid holds the kernel session
	 * @kid and knows its @token; fill in what it was opened with. 0,
	 * -ENOENT (no live session @kid), -EPERM (wrong token or another
	 * user's), -EBUSY (already bound to a djinnd session). A session
	 * then made with s->lease_kid = @kid is bound to it by open(). */
	int (*verify)(struct lease_provider *lp, uint64_t kid,
		      const uint8_t token[16], uid_t uid,
		      struct lease_kinfo *out);
	/* The file the leases live on (kmod: /dev/djinn, attached as the
	 * daemon), which a restart hands to the next djinnd with the
	 * sessions (a session of a restart's record, s->lease_adopt, is
	 * given the kernel session it had on it). */
	int (*file)(struct lease_provider *lp);
	/* djinnd stops reading for a while (a restart's hold): leases that
	 * run outside it (kmod: the proxies') are renewed now, so that the
	 * pause has a whole lease of room. */
	void (*hold)(struct lease_provider *lp, uint64_t now);
	/* Kernel session @kid of a restart's record that was not restored
	 * (its predecessor gone): ended (kmod: a proxy on the passed file is
	 * closed), so that nothing of it stays behind. */
	void (*drop)(struct lease_provider *lp, uint64_t kid);
};

struct lease_provider {
	const struct lease_ops *ops;
};

int user_lease_create(struct lease_provider **out);

/*
 * server.c's choice by lease.provider: "user", "kmod" (/dev/djinn, or
 * fail), or "auto" (kmod when /dev/djinn exists and DAEMON_ATTACH and the
 * "djinn" netlink family's events group work, else user); the log says
 * which and why. @passed: a predecessor's /dev/djinn (ops->file()),
 * attached already and taken over (the kmod provider then; closed, and
 * its proxies with it, under "user"), or -1. The kmod provider follows
 * events on @tab's I/O loop and ends sessions there through
 * session_end().
 */
int lease_provider_open(struct session_table *tab, const char *which,
			int passed, struct lease_provider **out);

#endif /* DJINN_LEASE_H */
