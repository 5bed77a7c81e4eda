// SPDX-License-Identifier: MIT
/*
 * Sessions on /dev/djinn (djinn.ko), when djinnd follows the module
 * (HELLO's DJINN_FEAT_KMOD) and the connection is a unix socket.
 *
 * djinn_session_open() opens the session on a file of its own
 * (DJINN_IOC_SESSION_OPEN), maps its completion ring and binds it to a
 * djinnd session (SESSION_BIND, Documentation/protocol.rst). The kernel
 * then owns the lease: when this process dies, however it dies, the
 * session ends at once and djinnd frees its memory. The keeper renews it
 * with the HEARTBEAT ioctl, which also gives ring slots back, instead of
 * a socket round trip; djinn_wait() on a graph first waits for its record
 * in the ring (poll on the session file, and on the socket for answers
 * that come without one), then reads the answer frame from the socket.
 *
 * DJINN_KDEV=0 in the environment keeps sessions on the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "uapi/linux/djinn.h"

#include "internal.h"

#define KDEV_SEEN 64 /* records read for other waiters, kept for them */

struct dj_kdev {
	int fd;
	uint64_t kid;
	void *ring;
	size_t ring_len;
	const uint32_t *head, *tail, *mask, *flags;
	const struct djinn_cqe *cqes;
	pthread_mutex_t lock;
	uint32_t next; /* the next record to read; given back by heartbeats */
	uint64_t seen[KDEV_SEEN];
	unsigned int nr_seen;
};

static bool kdev_wanted(struct djinn_conn *conn)
{
	const char *env = getenv("DJINN_KDEV");
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (env && !strcmp(env, "0"))
		return false;
	if (!(conn->server.features & DJINN_FEAT_KMOD))
		return false;
	if (getsockname(conn->fd, (struct sockaddr *)&ss, &len) ||
	    ss.ss_family != AF_UNIX)
		return false;
	return !access(DJINN_DEVICE, R_OK | W_OK);
}

void __djinn_kdev_close(struct dj_kdev *kd)
{
	if (!kd)
		return;
	if (kd->ring)
		munmap(kd->ring, kd->ring_len);
	if (kd->fd >= 0)
		close(kd->fd); /* ends the kernel session: djinnd is told */
	pthread_mutex_destroy(&kd->lock);
	free(kd);
}

int __djinn_kdev_open(struct djinn_conn *conn, const char *tenant,
		      uint32_t priority, uint64_t lease_ns,
		      struct dj_kdev **out, struct djinn_session_resp *r)
{
	struct djinn_ioc_session_open o = { .size = sizeof(o),
					    .priority = priority,
					    .lease_ns = lease_ns };
	struct djinn_session_bind b;
	struct iovec iov = { &b, sizeof(b) };
	struct dj_kdev *kd;
	const char *base;
	int ret;

	if (!kdev_wanted(conn))
		return -EOPNOTSUPP;
	kd = calloc(1, sizeof(*kd));
	if (!kd)
		return -ENOMEM;
	pthread_mutex_init(&kd->lock, NULL);
	kd->fd = open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);
	if (kd->fd < 0) {
		ret = -errno;
		goto fail;
	}
	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	if (ioctl(kd->fd, DJINN_IOC_SESSION_OPEN, &o)) {
		ret = -errno;
		dj_dbg("%s: SESSION_OPEN: %s", DJINN_DEVICE, strerror(-ret));
		goto fail;
	}
	kd->kid = o.session_id;
	if (o.features & DJINN_FEAT_RING) {
		kd->ring_len = o.ring_bytes;
		kd->ring = mmap(NULL, kd->ring_len, PROT_READ, MAP_SHARED,
				kd->fd, DJINN_MMAP_RING);
		if (kd->ring == MAP_FAILED) {
			kd->ring = NULL;
			ret = -errno;
			goto fail;
		}
		base = kd->ring;
		kd->head = (const uint32_t *)(base + o.ring.head);
		kd->tail = (const uint32_t *)(base + o.ring.tail);
		kd->mask = (const uint32_t *)(base + o.ring.mask);
		kd->flags = (const uint32_t *)(base + o.ring.flags);
		kd->cqes = (const struct djinn_cqe *)(base + o.ring.cqes);
		kd->next = __atomic_load_n(kd->head, __ATOMIC_ACQUIRE);
	}
	b.kernel_id = o.session_id;
	memcpy(b.token, o.token, sizeof(b.token));
	ret = __djinn_call_sync(conn, DJINN_MSG_SESSION_BIND, 0, &iov, 1, r,
				sizeof(*r));
	if (ret)
		goto fail;
	dj_dbg("session %llu: bound to %s session %llu",
	       (unsigned long long)r->session_id, DJINN_DEVICE,
	       (unsigned long long)kd->kid);
	*out = kd;
	return 0;

fail:
	__djinn_kdev_close(kd);
	return ret;
}

int __djinn_kdev_heartbeat(struct dj_kdev *kd, uint64_t *deadline_ns)
{
	struct djinn_ioc_heartbeat hb = { .size = sizeof(hb) };

	pthread_mutex_lock(&kd->lock);
	if (kd->ring) {
		hb.flags = DJINN_HEARTBEAT_F_HEAD;
		hb.ring_head = kd->next;
	}
	if (ioctl(kd->fd, DJINN_IOC_HEARTBEAT, &hb)) {
		pthread_mutex_unlock(&kd->lock);
		return -errno; /* -ETIMEDOUT, -ECANCELED: it ended */
	}
	pthread_mutex_unlock(&kd->lock);
	*deadline_ns = hb.deadline_ns;
	return 0;
}

/* Read the ring's new records; true if @rid's is among them or was read
 * before. Lock held. */
static bool kdev_scan(struct dj_kdev *kd, uint64_t rid)
{
	uint32_t tail = __atomic_load_n(kd->tail, __ATOMIC_ACQUIRE);
	bool found = false;

	for (unsigned int i = 0; i < kd->nr_seen; i++) {
		if (kd->seen[i] == rid) {
			kd->seen[i] = kd->seen[--kd->nr_seen];
			return true;
		}
	}
	for (; kd->next != tail; kd->next++) {
		uint64_t ud = kd->cqes[kd->next & *kd->mask].user_data;

		if (ud == rid)
			found = true;
		else if (kd->nr_seen < KDEV_SEEN)
			kd->seen[kd->nr_seen++] = ud;
		/* else forgotten: its waiter finds the socket readable */
	}
	return found;
}

void __djinn_kdev_wait(struct dj_kdev *kd, struct djinn_conn *conn,
		       struct dj_call *c, uint64_t deadline_ns)
{
	bool sock = false;

	for (;;) {
		struct pollfd p[2] = {
			{ .fd = kd->fd, .events = POLLIN },
			{ .fd = conn->fd, .events = POLLIN },
		};
		uint64_t now = __djinn_now_ns();
		bool done, found;
		int ms;

		pthread_mutex_lock(&conn->lock);
		done = c->done;
		pthread_mutex_unlock(&conn->lock);
		pthread_mutex_lock(&kd->lock);
		found = kdev_scan(kd, c->id);
		pthread_mutex_unlock(&kd->lock);
		if (found)
			dj_dbg("request %llu: its completion is in the ring",
			       (unsigned long long)c->id);
		/* the socket has bytes (an answer without a record), or the
		 * session ended: the socket read decides */
		if (done || found || sock || now >= deadline_ns)
			return;
		/* at most 50 ms at a time: another thread may take the
		 * answer off the socket without the ring saying so */
		ms = deadline_ns - now > 50000000ull ?
			     50 :
			     (int)((deadline_ns - now) / 1000000) + 1;
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			return;
		sock = (p[1].revents & (POLLIN | POLLHUP | POLLERR)) ||
		       (p[0].revents & (POLLHUP | POLLERR));
	}
}
