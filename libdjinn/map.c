// SPDX-License-Identifier: MIT
/*
 * Mapped results: pages fetched from djinnd when first touched.
 *
 * A mapping is anonymous, private and read-only, registered with the
 * connection's userfaultfd for missing pages (UFFD_USER_MODE_ONLY, so
 * no privilege is needed). The first touch of a page blocks the thread
 * that touched it; the connection's fault handler reads that page, and
 * more when the touches go forward (read-ahead doubling from 1 page to
 * DJ_AHEAD_MAX, reset by a jump), with TENSOR_READ and puts them in
 * place with UFFDIO_COPY, which wakes the thread. A bitmap per mapping
 * says which pages are in place.
 *
 * Where userfaultfd is not available the whole result is read into the
 * mapping at once (and the debug log says so).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define DJ_AHEAD_MAX 256 /* pages: 1 MiB */

static bool test_page(const struct dj_mapping *m, size_t page)
{
	return m->fetched[page / 64] & (1ull << (page % 64));
}

static void set_pages(struct dj_mapping *m, size_t page, size_t n)
{
	for (size_t p = page; p < page + n; p++)
		m->fetched[p / 64] |= 1ull << (p % 64);
}

static int uffd_open(void)
{
	int flags = O_CLOEXEC | O_NONBLOCK, fd, err;
	struct uffdio_api api = { .api = UFFD_API };

	fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
	if (fd < 0 && errno == EINVAL) /* before 5.11: no user-mode-only */
		fd = (int)syscall(SYS_userfaultfd, flags);
#ifdef USERFAULTFD_IOC_NEW
	if (fd < 0 && errno == EPERM) { /* 6.1: the device's permissions */
		int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);

		if (dev >= 0) {
			fd = ioctl(dev, USERFAULTFD_IOC_NEW,
				   flags | UFFD_USER_MODE_ONLY);
			err = errno;
			close(dev);
			errno = err;
		} else {
			errno = EPERM;
		}
	}
#endif
	if (fd < 0)
		return -errno;
	if (ioctl(fd, UFFDIO_API, &api)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* ---------------------------------------------------------------------- */
/* The fault handler */

static struct dj_mapping *find_mapping(struct djinn_conn *conn, uintptr_t a)
{
	struct dj_mapping *m;

	list_for_each_entry(m, &conn->mappings, node)
		if (a >= (uintptr_t)m->addr && a < (uintptr_t)m->addr + m->len)
			return m;
	return NULL;
}

static void uffd_wake(int uffd, uintptr_t addr)
{
	struct uffdio_range r = { .start = addr & ~(DJ_PAGE - 1),
				  .len = DJ_PAGE };

	ioctl(uffd, UFFDIO_WAKE, &r);
}

/* Put @len bytes at @dst; pages already there are skipped. */
static int uffd_copy(int uffd, uint8_t *dst, const uint8_t *src, size_t len)
{
	size_t done = 0;

	while (done < len) {
		struct uffdio_copy c = {
			.dst = (uintptr_t)(dst + done),
			.src = (uintptr_t)(src + done),
			.len = len - done,
		};

		if (!ioctl(uffd, UFFDIO_COPY, &c))
			return 0;
		if (errno == EAGAIN && c.copy > 0)
			done += (size_t)c.copy;
		else if (errno == EEXIST)
			done += (c.copy > 0 ? (size_t)c.copy : 0) + DJ_PAGE;
		else if (errno != EAGAIN)
			return -errno;
	}
	return 0;
}

/* Serve a fault at @addr, with @buf of DJ_AHEAD_MAX pages to read into. */
static void serve_fault(struct djinn_conn *conn, uintptr_t addr, uint8_t *buf)
{
	struct dj_mapping *m;
	size_t page, n = 0, pages, ahead;
	uint64_t off, len, handle, sid, gen;
	uint8_t *base;
	int ret;

	pthread_mutex_lock(&conn->lock);
	m = find_mapping(conn, addr);
	page = m ? (addr - (uintptr_t)m->addr) / DJ_PAGE : 0;
	if (!m || test_page(m, page)) {
		/* unmapped meanwhile, or another fault brought it */
		pthread_mutex_unlock(&conn->lock);
		uffd_wake(conn->uffd, addr);
		return;
	}
	pages = m->len / DJ_PAGE;
	ahead = page == m->next_page ?
			min_t(size_t, m->ahead * 2, DJ_AHEAD_MAX) :
			1;
	while (n < ahead && page + n < pages && !test_page(m, page + n))
		n++;
	m->ahead = ahead;
	m->next_page = page + n;
	off = page * DJ_PAGE;
	len = min_t(uint64_t, n * DJ_PAGE, m->r->bytes - off);
	handle = m->r->handle;
	sid = m->r->req->session_id;
	gen = m->gen;
	base = m->addr;
	pthread_mutex_unlock(&conn->lock);

	/* (one the connection dropped under is sent again: wire.c) */
	ret = __djinn_read(conn, sid, handle, off, len, buf);
	if (!ret) {
		/* counted first: the copy wakes the thread that touched it */
		atomic_fetch_add(&conn->map_faults, 1);
		atomic_fetch_add(&conn->map_bytes, len);
		memset(buf + len, 0, n * DJ_PAGE - len);
		ret = uffd_copy(conn->uffd, base + off, buf, n * DJ_PAGE);
	}

	pthread_mutex_lock(&conn->lock);
	m = find_mapping(conn, addr);
	if (m && m->gen == gen) {
		if (!ret) {
			set_pages(m, page, n);
		} else {
			/* a page that cannot come must not read as zeros */
			dj_err("mapped result at %p: bytes %llu..%llu: %s; "
			       "touching them raises SIGSEGV",
			       (void *)base, (unsigned long long)off,
			       (unsigned long long)(off + len), strerror(-ret));
			mprotect(base + off, n * DJ_PAGE, PROT_NONE);
		}
	}
	pthread_mutex_unlock(&conn->lock);
	uffd_wake(conn->uffd, addr);
}

static void *fault_handler(void *arg)
{
	struct djinn_conn *conn = arg;
	struct pollfd pfd[2] = {
		{ .fd = conn->uffd, .events = POLLIN },
		{ .fd = conn->uffd_stop, .events = POLLIN },
	};
	struct uffd_msg msgs[16];
	uint8_t *buf;
	ssize_t n;

	buf = aligned_alloc(DJ_PAGE, DJ_AHEAD_MAX * DJ_PAGE);
	if (!buf) {
		dj_err("fault handler: no memory: mapped results will hang");
		return NULL;
	}
	for (;;) {
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		n = read(conn->uffd, msgs, sizeof(msgs));
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			break;
		for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++)
			if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
				serve_fault(conn, msgs[i].arg.pagefault.address,
					    buf);
	}
	free(buf);
	return NULL;
}

/* Is userfaultfd usable on @conn? Sets it up once; under conn->lock. */
static bool uffd_usable(struct djinn_conn *conn)
{
	int fd, stop, ret;

	if (conn->uffd_err)
		return conn->uffd_err > 0;
	if (getenv("DJINN_NO_UFFD")) {
		conn->uffd_err = -ENOSYS;
		dj_dbg("DJINN_NO_UFFD is set: djinn_result_map() reads whole "
		       "results");
		return false;
	}
	fd = uffd_open();
	if (fd < 0) {
		conn->uffd_err = fd;
		dj_dbg("userfaultfd unavailable (%s): djinn_result_map() "
		       "reads whole results",
		       strerror(-fd));
		return false;
	}
	stop = eventfd(0, EFD_CLOEXEC);
	if (stop < 0) {
		close(fd);
		conn->uffd_err = -EMFILE;
		return false;
	}
	conn->uffd = fd;
	conn->uffd_stop = stop;
	ret = pthread_create(&conn->uffd_thread, NULL, fault_handler, conn);
	if (ret) {
		conn->uffd_err = -ret;
		dj_dbg("no fault handler (%s): djinn_result_map() reads whole "
		       "results",
		       strerror(ret));
		return false;
	}
	conn->uffd_started = true;
	conn->uffd_err = 1;
	return true;
}

/* ---------------------------------------------------------------------- */
/* Mapping */

void __djinn_unmap_locked(struct djinn_conn *conn, struct djinn_result *r)
{
	struct dj_mapping *m = r->map;

	list_del_init(&m->node);
	munmap(m->addr, m->len);
	free(m->fetched);
	free(m);
	r->map = NULL;
}

/* A mapping of @r served by faults, or NULL; under conn->lock. */
static struct dj_mapping *map_uffd(struct djinn_conn *conn,
				   struct djinn_result *r, size_t len)
{
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct dj_mapping *m = calloc(1, sizeof(*m));
	size_t pages = len / DJ_PAGE;

	if (!m)
		return NULL;
	m->fetched = calloc((pages + 63) / 64, sizeof(uint64_t));
	m->addr = mmap(NULL, len, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!m->fetched || m->addr == MAP_FAILED)
		goto out_free;
	reg.range.start = (uintptr_t)m->addr;
	reg.range.len = len;
	if (ioctl(conn->uffd, UFFDIO_REGISTER, &reg)) {
		dj_dbg("UFFDIO_REGISTER: %s: reading the result whole",
		       strerror(errno));
		munmap(m->addr, len);
		goto out_free;
	}
	m->uffd = true;
	m->ahead = 1;
	m->next_page = SIZE_MAX;
	return m;

out_free:
	free(m->fetched);
	free(m);
	return NULL;
}

int djinn_result_map(struct djinn_result *r, void **addr)
{
	struct djinn_conn *conn;
	struct dj_mapping *m = NULL;
	uint64_t handle;
	bool done = false;
	size_t len;
	void *p;
	int ret;

	if (!r || !addr)
		return -EINVAL;
	conn = r->req->conn;
	ret = __djinn_result_ready(r, &handle);
	if (ret)
		return ret;
	len = (r->bytes + DJ_PAGE - 1) & ~(DJ_PAGE - 1);

	pthread_mutex_lock(&conn->lock);
	if (r->released || !r->req->s) {
		ret = -ENOENT;
		done = true;
	} else if (r->map) {
		r->map->refs++;
		*addr = r->map->addr;
		done = true;
	} else if (uffd_usable(conn) && (m = map_uffd(conn, r, len))) {
		m->r = r;
		m->refs = 1;
		m->len = len;
		m->gen = ++conn->map_gen;
		list_add_tail(&m->node, &conn->mappings);
		r->map = m;
		*addr = m->addr;
		done = true;
	}
	pthread_mutex_unlock(&conn->lock);
	if (done)
		return ret;

	/* no userfaultfd: one read of everything, unlocked */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	ret = __djinn_read(conn, r->req->session_id, handle, 0, r->bytes, p);
	if (!ret && mprotect(p, len, PROT_READ))
		ret = -errno;
	m = ret ? NULL : calloc(1, sizeof(*m));
	if (!m) {
		munmap(p, len);
		return ret ? ret : -ENOMEM;
	}
	atomic_fetch_add(&conn->map_bytes, r->bytes);
	pthread_mutex_lock(&conn->lock);
	if (r->released || !r->req->s) {
		ret = -ENOENT;
	} else if (r->map) { /* another thread mapped it meanwhile */
		r->map->refs++;
		*addr = r->map->addr;
	} else {
		m->r = r;
		m->addr = p;
		m->len = len;
		m->refs = 1;
		m->gen = ++conn->map_gen;
		list_add_tail(&m->node, &conn->mappings);
		r->map = m;
		*addr = p;
		m = NULL;
	}
	pthread_mutex_unlock(&conn->lock);
	if (m) {
		munmap(p, len);
		free(m);
	}
	return ret;
}

int djinn_result_unmap(struct djinn_result *r)
{
	struct djinn_conn *conn;
	int ret = 0;

	if (!r)
		return -EINVAL;
	conn = r->req->conn;
	pthread_mutex_lock(&conn->lock);
	if (!r->map)
		ret = -EINVAL;
	else if (!--r->map->refs)
		__djinn_unmap_locked(conn, r);
	pthread_mutex_unlock(&conn->lock);
	return ret;
}
