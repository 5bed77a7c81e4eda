// SPDX-License-Identifier: MIT
/*
 * The service manager's file descriptor store. See fdstore.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "net/fdstore.h"

/* The fds passed at start: LISTEN_FDS of them from SD_LISTEN_FDS_START,
 * or those a predecessor handed over; each one's fd -1 once taken. */
static struct passed {
	char **names;
	int *fds;
	int n;
} passed;

/* Add @fd named @name (taken over) to the passed ones: 0 or -ENOMEM
 * (@fd closed). */
static int passed_add(char *name, int fd)
{
	char **names =
		realloc(passed.names, (size_t)(passed.n + 1) * sizeof(*names));
	int *fds;

	if (names)
		passed.names = names;
	fds = names ? realloc(passed.fds,
			      (size_t)(passed.n + 1) * sizeof(*fds)) :
		      NULL;
	if (!fds) {
		free(name);
		close(fd);
		return -ENOMEM;
	}
	passed.fds = fds;
	passed.names[passed.n] = name;
	passed.fds[passed.n++] = fd;
	return 0;
}

/* One message of the handover protocol within 5 s: its bytes in @buf
 * (NUL-terminated), its fd in *@fd (-1 if none). Its length, 0 at EOF,
 * or a negative errno. */
static int handover_recv(int sock, char *buf, size_t len, int *fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { buf, len - 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = &cm,
			     .msg_controllen = sizeof(cm) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct cmsghdr *c;
	ssize_t n;

	*fd = -1;
	if (poll(&p, 1, 5000) != 1)
		return -ETIMEDOUT;
	n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		if (*fd >= 0)
			close(*fd);
		return -EPROTO;
	}
	buf[n] = 0;
	return (int)n;
}

/* The fds of the djinnd serving @path (--handover): a message for
 * each, its name and the fd, then "end". The number taken; 0 when
 * nobody serves @path (a first start); a negative errno when the
 * handover broke off (what came is dropped). */
static int handover_take(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[FDSTORE_NAME_MAX + 2];
	int sock, ret, fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = errno == ENOENT || errno == ECONNREFUSED ? 0 : -errno;
		close(sock);
		if (!ret)
			log_info("handover: no djinnd serves %s: a first "
				 "start",
				 path);
		return ret;
	}
	for (;;) {
		char *name;

		ret = handover_recv(sock, buf, sizeof(buf), &fd);
		if (ret > 0 && fd < 0 && !strcmp(buf, "end"))
			break;
		if (ret <= 0 || fd < 0) {
			if (fd >= 0)
				close(fd);
			ret = ret < 0 ? ret : -EPROTO;
			break;
		}
		name = strdup(buf);
		if (!name) {
			close(fd);
			ret = -ENOMEM;
			break;
		}
		ret = passed_add(name, fd);
		if (ret)
			break;
		log_info("handover: passed %s (fd %d)", buf, fd);
	}
	close(sock);
	if (ret < 0) {
		log_err("handover from %s broke off: %s", path, strerror(-ret));
		for (int i = 0; i < passed.n; i++) {
			close(passed.fds[i]);
			free(passed.names[i]);
		}
		free(passed.names);
		free(passed.fds);
		memset(&passed, 0, sizeof(passed));
		return ret;
	}
	return passed.n;
}

int fdstore_init(const char *handover)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);

	if (n <= 0)
		return n < 0 || !handover ? n : handover_take(handover);
	passed.fds = calloc((size_t)n, sizeof(*passed.fds));
	if (!passed.fds) {
		for (int i = 0; i < n; i++) {
			close(SD_LISTEN_FDS_START + i);
			free(names[i]);
		}
		free(names);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		passed.fds[i] = SD_LISTEN_FDS_START + i;
		fcntl(passed.fds[i], F_SETFD, FD_CLOEXEC);
		log_info("fd store: passed %s (fd %d)", names[i],
			 passed.fds[i]);
	}
	passed.names = names;
	passed.n = n;
	return n;
}

int fdstore_take(const char *name)
{
	for (int i = 0; i < passed.n; i++) {
		int fd = passed.fds[i];

		if (fd < 0 || strcmp(passed.names[i], name))
			continue;
		passed.fds[i] = -1;
		return fd;
	}
	return -1;
}

void fdstore_done(void)
{
	for (int i = 0; i < passed.n; i++) {
		if (passed.fds[i] >= 0) {
			/* configured no more: out of the store too */
			log_info("fd store: %s is not used: dropped",
				 passed.names[i]);
			sd_notifyf(0, "FDSTOREREMOVE=1\nFDNAME=%s",
				   passed.names[i]);
			close(passed.fds[i]);
		}
		free(passed.names[i]);
	}
	free(passed.names);
	free(passed.fds);
	memset(&passed, 0, sizeof(passed));
}

bool fdstore_present(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	return e && *e;
}

bool fdstore_keep(const char *name, int fd)
{
	char msg[FDSTORE_NAME_MAX + 64];
	int ret;

	if (!fdstore_present())
		return false;
	/* FDPOLL=0: a listening socket is never "hung up"; keep it */
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s\nFDPOLL=0", name);
	ret = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
	if (ret <= 0) {
		log_warn("fd store: cannot keep %s: %s", name,
			 ret ? strerror(-ret) : "no store");
		return false;
	}
	return true;
}

int fdstore_name(char *out, size_t len, const char *prefix, const char *spec)
{
	size_t n = 0,
	       cap = len < FDSTORE_NAME_MAX + 1 ? len : FDSTORE_NAME_MAX + 1;

	for (const char *p = prefix; *p; p++) {
		if (n + 1 >= cap)
			return -ENAMETOOLONG;
		out[n++] = *p;
	}
	for (const char *p = spec; *p; p++) {
		if (*p == ':' || *p == '%') {
			if (n + 3 >= cap)
				return -ENAMETOOLONG;
			n += (size_t)snprintf(out + n, 4, "%%%02X",
					      (unsigned char)*p);
		} else {
			if (n + 1 >= cap)
				return -ENAMETOOLONG;
			out[n++] = *p;
		}
	}
	out[n] = 0;
	return 0;
}

int fdstore_handover_send(int sock, char *const *names, const int *fds,
			  unsigned int n)
{
	static const char end[] = "end";

	for (unsigned int i = 0; i < n; i++) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} cm;
		struct iovec iov = { names[i], strlen(names[i]) };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = &cm,
				     .msg_controllen = sizeof(cm) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		memset(&cm, 0, sizeof(cm));
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fds[i], sizeof(int));
		if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
			return -errno;
	}
	if (send(sock, end, sizeof(end) - 1, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}
