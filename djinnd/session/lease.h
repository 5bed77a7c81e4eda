/* SPDX-License-Identifier: MIT */
/*
 * Lease providers. A session's lease is renewed by heartbeats (and any
 * request); when one runs out, the provider reports it and the server
 * ends the session. The user-space provider keeps deadlines itself and is
 * polled from the I/O thread's timer; the kernel module's provider (issue
 * 4) will learn of expiry and process death from /dev/djinn instead,
 * behind the same operations.
 */
#ifndef DJINN_LEASE_H
#define DJINN_LEASE_H

#include <stdint.h>

struct session;

struct lease_provider;

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
};

struct lease_provider {
	const struct lease_ops *ops;
};

int user_lease_create(struct lease_provider **out);

#endif /* DJINN_LEASE_H */
