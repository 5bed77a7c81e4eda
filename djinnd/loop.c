// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "loop.h"

uint64_t loop_now(void)
{
	return mono_ns();
}

/* Kernel version as major * 1000 + minor: some features (multishot
 * receive) have no probe bit of their own. */
static int kernel_version(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return 0;
	return major * 1000 + minor;
}

static void probe(struct loop *l)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(&l->ring);
	int kv = kernel_version();

	if (p) {
		l->feat.send_zc =
			io_uring_opcode_supported(p, IORING_OP_SEND_ZC);
		io_uring_free_probe(p);
	}
	l->feat.multishot_accept = kv >= 5019;
	l->feat.multishot_recv = kv >= 6000;
	l->feat.buf_ring = kv >= 5019;
	log_info("io_uring: multishot accept %s, multishot recv %s, "
		 "buffer rings %s, zero-copy send %s, coop taskrun %s, "
		 "single issuer %s",
		 l->feat.multishot_accept ? "yes" : "no",
		 l->feat.multishot_recv ? "yes" : "no",
		 l->feat.buf_ring ? "yes" : "no",
		 l->feat.send_zc ? "yes" : "no",
		 l->feat.coop_taskrun ? "yes" : "no",
		 l->feat.single_issuer ? "yes" : "no");
}

int loop_init(struct loop *l, unsigned int entries)
{
	struct io_uring_params p;
	int ret;

	memset(l, 0, sizeof(*l));
	INIT_LIST_HEAD(&l->timers);
	/* Newest set-up flags first; older kernels refuse them with
	 * -EINVAL and get the plain ring (5.15 LTS is the oldest). */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
	ret = io_uring_queue_init_params(entries, &l->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_COOP_TASKRUN;
		ret = io_uring_queue_init_params(entries, &l->ring, &p);
		if (ret == -EINVAL) {
			memset(&p, 0, sizeof(p));
			ret = io_uring_queue_init_params(entries, &l->ring, &p);
		}
	}
	if (ret)
		return ret;
	l->feat.coop_taskrun = p.flags & IORING_SETUP_COOP_TASKRUN;
	l->feat.single_issuer = p.flags & IORING_SETUP_SINGLE_ISSUER;
	probe(l);
	return 0;
}

void loop_exit(struct loop *l)
{
	io_uring_queue_exit(&l->ring);
}

/*
 * A full SQ is submitted to make room; if the kernel cannot take it just
 * now (-EAGAIN, -EBUSY while the CQ overflows), wait a little and retry.
 * After 5 s of that the ring is stuck: say so once and return NULL, and
 * return NULL at once to every caller until the loop has reaped its
 * completions (loop_once()), so that one stuck ring costs one wait, not
 * one per caller. Callers fail what they were doing (a connection is
 * closed before the loop sleeps again, a standing read is armed again
 * from a timer: loop_retry()); none may free what it is using.
 */
struct io_uring_sqe *loop_sqe(struct loop *l, struct io_src *src,
			      unsigned int tag)
{
	struct io_uring_sqe *sqe;

	for (int tries = 0; !(sqe = io_uring_get_sqe(&l->ring)); tries++) {
		int ret = io_uring_submit(&l->ring);

		if (ret >= 0)
			continue;
		if (l->sq_stuck)
			return NULL;
		if (tries > 5000) {
			log_err("io_uring: cannot submit (%s) for 5 s: "
				"failing what needs the ring",
				strerror(-ret));
			l->sq_stuck = true;
			return NULL;
		}
		usleep(1000);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)src | tag);
	return sqe;
}

void loop_retry(struct loop *l, struct loop_timer *t)
{
	if (list_empty(&t->node))
		loop_timer_add(l, t, loop_now() + LOOP_RETRY_NS);
}

/* ---------------------------------------------------------------------- */
/* Notifications from other threads */

/* What was posted waits in the eventfd until the read is armed: a failed
 * loop_sqe() delays it, it loses none. */
static void notify_arm(struct loop_notify *n)
{
	struct io_uring_sqe *sqe = loop_sqe(n->l, &n->src, 0);

	if (!sqe) {
		loop_retry(n->l, &n->rearm);
		return;
	}
	io_uring_prep_read(sqe, n->fd, &n->val, sizeof(n->val), 0);
}

static uint64_t notify_rearm(struct loop_timer *t, uint64_t now)
{
	notify_arm(container_of(t, struct loop_notify, rearm));
	return 0;
}

static void notify_complete(struct io_src *src, struct io_uring_cqe *cqe,
			    unsigned int tag)
{
	struct loop_notify *n = container_of(src, struct loop_notify, src);

	n->fn(n);
	if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -ECANCELED)
		log_err("%s: eventfd read: %s", n->name, strerror(-cqe->res));
	if (cqe->res != -ECANCELED)
		notify_arm(n);
}

int loop_notify_init(struct loop *l, struct loop_notify *n, const char *name,
		     void (*fn)(struct loop_notify *n))
{
	n->l = l;
	n->name = name;
	n->fn = fn;
	n->src.complete = notify_complete;
	n->rearm.fn = notify_rearm;
	INIT_LIST_HEAD(&n->rearm.node);
	n->fd = eventfd(0, EFD_CLOEXEC);
	if (n->fd < 0)
		return -errno;
	return 0;
}

void loop_notify_start(struct loop_notify *n)
{
	notify_arm(n);
}

void loop_notify_post(struct loop_notify *n)
{
	uint64_t one = 1;

	/* only fails when the count would overflow: then it is readable */
	if (write(n->fd, &one, sizeof(one)) < 0)
		log_err("%s: eventfd: %s", n->name, strerror(errno));
}

void loop_notify_fini(struct loop_notify *n)
{
	loop_timer_del(&n->rearm);
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
}

void loop_timer_add(struct loop *l, struct loop_timer *t, uint64_t when)
{
	struct loop_timer *pos;

	t->when = when;
	list_for_each_entry(pos, &l->timers, node)
		if (pos->when > when)
			break;
	list_add_tail(&t->node, &pos->node);
}

void loop_timer_del(struct loop_timer *t)
{
	list_del_init(&t->node);
}

static void run_timers(struct loop *l)
{
	uint64_t now = loop_now();

	while (!list_empty(&l->timers)) {
		struct loop_timer *t =
			list_first_entry(&l->timers, struct loop_timer, node);
		uint64_t next;

		if (t->when > now)
			break;
		list_del_init(&t->node);
		next = t->fn(t, now);
		if (next)
			loop_timer_add(l, t, now + next);
	}
}

int loop_once(struct loop *l, uint64_t max_wait_ns)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	uint64_t wait = max_wait_ns;
	unsigned int head, n = 0;
	int ret;

	if (l->before_sleep)
		l->before_sleep(l);
	if (!list_empty(&l->timers)) {
		uint64_t now = loop_now(),
			 when = list_first_entry(&l->timers, struct loop_timer,
						 node)
					->when;

		if (when <= now)
			wait = 0;
		else if (when - now < wait)
			wait = when - now;
	}
	ts.tv_sec = (long long)(wait / NSEC_PER_SEC);
	ts.tv_nsec = (long long)(wait % NSEC_PER_SEC);
	ret = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return ret;
	io_uring_for_each_cqe(&l->ring, head, cqe)
	{
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		struct io_src *src = (struct io_src *)(uintptr_t)(ud & ~7ull);

		n++;
		if (src)
			src->complete(src, cqe, ud & 7);
	}
	io_uring_cq_advance(&l->ring, n);
	l->sq_stuck = false; /* the CQ has room again: worth another try */
	run_timers(l);
	return 0;
}

int loop_run(struct loop *l)
{
	while (!l->stop) {
		int ret = loop_once(l, 3600 * NSEC_PER_SEC);

		if (ret)
			return ret;
	}
	return 0;
}
