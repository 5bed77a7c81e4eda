/* SPDX-License-Identifier: MIT */
/*
 * The I/O thread's event loop: one io_uring, after Redis's ae.c in spirit
 * (one loop, timers that return their next period, a hook before each
 * wait) but driven by completions.
 *
 * user_data packing, once for the whole daemon: every object that submits
 * work embeds a struct io_src and is at least 8-byte aligned, so the low
 * three bits of its address are free:
 *
 *     user_data = (uintptr_t)src | tag        tag in 0..7
 *
 * The tag tells the object which of its operations completed (a
 * connection's receive, send, or zero-copy notification, say).
 */
#ifndef DJINN_LOOP_H
#define DJINN_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include <liburing.h>

#include "clock.h"
#include "list.h"

struct io_src {
	void (*complete)(struct io_src *src, struct io_uring_cqe *cqe,
			 unsigned int tag);
};

/* What this kernel's io_uring offers; probed at start and logged. */
struct loop_features {
	bool multishot_accept; /* 5.19 */
	bool multishot_recv; /* 6.0 */
	bool buf_ring; /* provided buffer rings, 5.19 */
	bool send_zc; /* 6.0 */
	bool coop_taskrun; /* 5.19 */
	bool single_issuer; /* 6.0 */
};

/*
 * struct loop_timer - called at @when, then every period it returns
 * (0: stop). Runs on the I/O thread between completions.
 */
struct loop_timer {
	struct list_head node;
	uint64_t when; /* CLOCK_MONOTONIC ns */
	uint64_t (*fn)(struct loop_timer *t, uint64_t now);
};

struct loop {
	struct io_uring ring;
	struct loop_features feat;
	struct list_head timers; /* by @when */
	void (*before_sleep)(struct loop *l);
	bool stop;
	bool sq_stuck; /* loop_sqe() gave up: fail fast until the next reap */
};

uint64_t loop_now(void);

int loop_init(struct loop *l, unsigned int entries);
void loop_exit(struct loop *l);

/* A fresh SQE tagged for @src; submits to make room if the SQ is full.
 * NULL (logged) when the ring takes no more for seconds: the caller fails
 * what it was doing, without freeing what it is using. */
struct io_uring_sqe *loop_sqe(struct loop *l, struct io_src *src,
			      unsigned int tag);

#define LOOP_RETRY_NS (10 * NSEC_PER_MSEC)
/* For what must stay armed (a read of an eventfd or a pipe, an accept)
 * when loop_sqe() failed: @t, whose fn arms it again, runs in
 * LOOP_RETRY_NS unless it is already due. */
void loop_retry(struct loop *l, struct loop_timer *t);

/*
 * struct loop_notify - another thread wakes the I/O thread: @fn(@n) runs
 * there after loop_notify_post() from any thread (posts before it ran
 * coalesce). An eventfd whose read stays armed on the ring; @name says
 * whose in logs. The executors hand their finished jobs back this way,
 * the TLS handshake thread its finished handshakes.
 */
struct loop_notify {
	struct io_src src;
	struct loop_timer rearm; /* the read, when loop_sqe() failed */
	struct loop *l;
	const char *name;
	void (*fn)(struct loop_notify *n);
	int fd;
	uint64_t val;
};

/* 0, or -errno (no eventfd). */
int loop_notify_init(struct loop *l, struct loop_notify *n, const char *name,
		     void (*fn)(struct loop_notify *n));
/* Arm the read: @fn runs from the next post on. Once what @fn uses is
 * all there (its owner is not freed while the read is armed). */
void loop_notify_start(struct loop_notify *n);
void loop_notify_post(struct loop_notify *n);
/* Once nothing posts any more, and once the ring is gone or its read
 * cancelled: the read may have been pending until then. */
void loop_notify_fini(struct loop_notify *n);

void loop_timer_add(struct loop *l, struct loop_timer *t, uint64_t when);
void loop_timer_del(struct loop_timer *t);

/* Run until loop->stop is set; returns 0 or a negative errno. */
int loop_run(struct loop *l);
/* Wait for completions (at most @max_wait_ns, or the next timer), handle
 * them and the timers due. */
int loop_once(struct loop *l, uint64_t max_wait_ns);

#endif /* DJINN_LOOP_H */
