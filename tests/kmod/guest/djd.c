// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/djinn.h>

#include "djd.h"

uint64_t djd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int djd_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 20 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), ret;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

pid_t djd_start(const char *leases, unsigned int lease_ms,
		const char *log_level)
{
	return djd_start_with(leases, lease_ms, log_level, NULL);
}

static struct djd_fork_hooks hooks;

void djd_set_fork_hooks(const struct djd_fork_hooks *h)
{
	hooks = h ? *h : (struct djd_fork_hooks){ 0 };
}

/* fork and exec djinnd with the options the helpers' djinnd has */
static pid_t spawn(const char *leases, unsigned int lease_ms,
		   const char *log_level, const char *const *extra)
{
	const char *argv[64];
	char lease[32];
	unsigned int n = 0;
	pid_t pid;

	snprintf(lease, sizeof(lease), "%u", lease_ms);
	fflush(NULL);
	if (hooks.before)
		hooks.before(hooks.arg);
	pid = fork();
	if (pid && hooks.after)
		hooks.after(hooks.arg);
	if (pid < 0)
		return -errno;
	if (!pid) {
		int nul = open("/dev/null", O_RDWR);

		dup2(nul, 0);
		dup2(nul, 1);
		if (hooks.child)
			hooks.child(hooks.arg);
		const char *const base[] = {
			"djinnd",	  "--foreground", "--config",
			"/dev/null",	  "--listen",	  "unix:" DJD_SOCK,
			"--admin-socket", DJD_ADMIN,	  "--cpu-mem",
			"256M",		  "--threads",	  "1",
			"--lease-ms",	  lease,	  "--leases",
			leases,		  "--model-dir",  "/tmp/djd/models",
			"--log-level",	  log_level,	  "--log-file",
			DJD_LOG,
		};

		for (unsigned int i = 0; i < sizeof(base) / sizeof(*base); i++)
			argv[n++] = base[i];
		for (; extra && *extra && n < 63; extra++)
			argv[n++] = *extra;
		argv[n] = NULL;
		execvp("djinnd", (char *const *)argv);
		fprintf(stderr, "exec djinnd: %s\n", strerror(errno));
		_exit(127);
	}
	return pid;
}

pid_t djd_start_next(const char *leases, unsigned int lease_ms,
		     const char *log_level, const char *const *extra)
{
	return spawn(leases, lease_ms, log_level, extra);
}

pid_t djd_start_with(const char *leases, unsigned int lease_ms,
		     const char *log_level, const char *const *extra)
{
	pid_t pid;

	mkdir("/tmp/djd", 0755);
	mkdir("/tmp/djd/models", 0755);
	unlink(DJD_SOCK);
	unlink(DJD_ADMIN);
	unlink(DJD_LOG);
	pid = spawn(leases, lease_ms, log_level, extra);
	if (pid < 0)
		return pid;
	for (int i = 0; i < 3000; i++) { /* 30 s: TCG is slow */
		int status, a, b;

		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "djinnd exited at start (%#x)\n",
				status);
			return -ECHILD;
		}
		a = djd_connect(DJD_SOCK);
		b = a >= 0 ? djd_connect(DJD_ADMIN) : -1;
		if (a >= 0)
			close(a);
		if (b >= 0) {
			close(b);
			return pid;
		}
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

int djd_stop(pid_t pid)
{
	int status;

	if (pid <= 0)
		return -1;
	kill(pid, SIGTERM);
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : -1;
}

static int xfer(int fd, void *buf, size_t len, int out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) :
				  recv(fd, p, len, 0);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
		} else if (n == 0) {
			return -ECONNRESET;
		} else if (errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

uint64_t djd_last_request;

int djd_call_send(int fd, uint16_t op, uint64_t session, const void *req,
		  uint32_t req_len)
{
	static uint64_t next_id = 1;
	struct djinn_hdr h = {
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = op,
		.request_id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED),
		.session_id = session,
		.payload_len = req_len,
	};
	int ret = xfer(fd, &h, sizeof(h), 1);

	djd_last_request = h.request_id;
	if (!ret && req_len)
		ret = xfer(fd, (void *)req, req_len, 1);
	return ret;
}

int djd_call_recv(int fd, void *ans, size_t ans_len, uint64_t *got)
{
	struct djinn_hdr h;
	uint64_t left;
	uint8_t junk[4096];
	int ret = xfer(fd, &h, sizeof(h), 0);

	if (ret)
		return ret;
	if (h.magic != DJINN_MAGIC)
		return -EPROTO;
	if (h.flags & DJINN_F_ERROR) {
		struct djinn_error e;

		if (h.payload_len < sizeof(e) || h.payload_len > sizeof(junk))
			return -EPROTO;
		ret = xfer(fd, junk, h.payload_len, 0);
		if (ret)
			return ret;
		memcpy(&e, junk, sizeof(e));
		return e.error < 0 ? e.error : -EPROTO;
	}
	if (got)
		*got = h.payload_len;
	left = h.payload_len;
	if (ans_len) {
		size_t n = left < ans_len ? left : ans_len;

		ret = xfer(fd, ans, n, 0);
		if (ret)
			return ret;
		left -= n;
	}
	while (left) {
		size_t n = left < sizeof(junk) ? left : sizeof(junk);

		ret = xfer(fd, junk, n, 0);
		if (ret)
			return ret;
		left -= n;
	}
	return 0;
}

int djd_call(int fd, uint16_t op, uint64_t session, const void *req,
	     uint32_t req_len, void *ans, size_t ans_len, uint64_t *got)
{
	int ret = djd_call_send(fd, op, session, req, req_len);

	return ret ? ret : djd_call_recv(fd, ans, ans_len, got);
}

int djd_sessions(struct djinn_admin_session *out, int max)
{
	static uint8_t buf[8 + 1024 * sizeof(struct djinn_admin_session)];
	uint64_t got;
	uint32_t head[2];
	int fd = djd_connect(DJD_ADMIN), ret, n;

	if (fd < 0)
		return fd;
	ret = djd_call(fd, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, buf,
		       sizeof(buf), &got);
	close(fd);
	if (ret)
		return ret;
	memcpy(head, buf, sizeof(head));
	n = (int)head[0];
	if (got != 8 + (uint64_t)n * sizeof(*out) || got > sizeof(buf))
		return -EPROTO;
	memcpy(out, buf + 8, (size_t)(n < max ? n : max) * sizeof(*out));
	return n;
}

int djd_session(uint64_t id, struct djinn_admin_session *out)
{
	static struct djinn_admin_session es[1024];
	int n = djd_sessions(es, 1024);

	if (n < 0)
		return n;
	for (int i = 0; i < n && i < 1024; i++)
		if (es[i].id == id) {
			if (out)
				*out = es[i];
			return 0;
		}
	return -ENOENT;
}

int djd_stats(struct djinn_admin_stats *st)
{
	int fd = djd_connect(DJD_ADMIN), ret;

	if (fd < 0)
		return fd;
	ret = djd_call(fd, DJINN_MSG_ADMIN_STATS, 0, NULL, 0, st, sizeof(*st),
		       NULL);
	close(fd);
	return ret;
}

int djd_vmu(struct djinn_admin_vmu *v)
{
	int fd = djd_connect(DJD_ADMIN), ret;

	if (fd < 0)
		return fd;
	ret = djd_call(fd, DJINN_MSG_ADMIN_VMU, 0, NULL, 0, v, sizeof(*v),
		       NULL);
	close(fd);
	return ret;
}

int djd_client_bind(struct djd_client *c, const char *tenant, uint64_t lease_ns)
{
	struct djinn_ioc_session_open o = { .size = sizeof(o),
					    .priority = 3,
					    .lease_ns = lease_ns };
	struct djinn_session_bind b = { 0 };
	struct djinn_session_resp r;
	int ret;

	memset(c, 0, sizeof(*c));
	c->sock = -1;
	c->dev = open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);
	if (c->dev < 0)
		return -errno;
	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	if (ioctl(c->dev, DJINN_IOC_SESSION_OPEN, &o)) {
		ret = -errno;
		goto fail;
	}
	c->kid = o.session_id;
	memcpy(c->token, o.token, sizeof(c->token));
	c->off = o.ring;
	c->ring_len = o.ring_bytes;
	c->ring = mmap(NULL, c->ring_len, PROT_READ, MAP_SHARED, c->dev,
		       DJINN_MMAP_RING);
	if (c->ring == MAP_FAILED) {
		c->ring = NULL;
		ret = -errno;
		goto fail;
	}
	c->sock = djd_connect(DJD_SOCK);
	if (c->sock < 0) {
		ret = c->sock;
		goto fail;
	}
	b.kernel_id = c->kid;
	memcpy(b.token, c->token, sizeof(b.token));
	ret = djd_call(c->sock, DJINN_MSG_SESSION_BIND, 0, &b, sizeof(b), &r,
		       sizeof(r), NULL);
	if (ret)
		goto fail;
	c->id = r.session_id;
	return 0;

fail:
	djd_client_close(c);
	return ret;
}

void djd_client_close(struct djd_client *c)
{
	if (c->ring)
		munmap(c->ring, c->ring_len);
	if (c->sock >= 0)
		close(c->sock);
	if (c->dev >= 0)
		close(c->dev);
	c->ring = NULL;
	c->sock = c->dev = -1;
}

int djd_tensor(int fd, uint64_t id, uint64_t bytes)
{
	struct djinn_tensor_create tc = {
		.desc = { .dtype = DJINN_DTYPE_U8, .ndim = 1 },
		.segment = DJINN_SEG_DATA,
	};
	struct djinn_tensor_resp tr;

	tc.desc.dims[0] = bytes;
	return djd_call(fd, DJINN_MSG_TENSOR_CREATE, id, &tc, sizeof(tc), &tr,
			sizeof(tr), NULL);
}
