// SPDX-License-Identifier: MIT
/*
 * systemd's fd store, played for tests and benchmarks (fdstore_standin.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdstore_standin.h"

struct djd_store {
	char dir[64];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int sock;
	int stop[2];
	pthread_t th;
	pthread_mutex_t lock;
	unsigned int n;
	char names[DJD_STORE_MAX][256];
	int fds[DJD_STORE_MAX];
};

/* "NAME" of a line "KEY=NAME" in @msg, into @out: whether there is one. */
static bool value(const char *msg, const char *key, char *out, size_t len)
{
	size_t k = strlen(key);

	for (const char *p = msg; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : p) {
		if (!strncmp(p, key, k)) {
			size_t n = strcspn(p + k, "\n");

			if (n >= len)
				return false;
			memcpy(out, p + k, n);
			out[n] = 0;
			return true;
		}
	}
	return false;
}

static bool has(const char *msg, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = msg; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, line, n) && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

static void put(struct djd_store *st, const char *name, int fd)
{
	for (unsigned int i = 0; i < st->n; i++)
		if (!strcmp(st->names[i], name)) {
			close(st->fds[i]); /* systemd keeps the newer */
			st->fds[i] = fd;
			return;
		}
	if (st->n == DJD_STORE_MAX) {
		fprintf(stderr, "store: full: %s dropped\n", name);
		close(fd);
		return;
	}
	snprintf(st->names[st->n], sizeof(st->names[0]), "%s", name);
	st->fds[st->n++] = fd;
}

static void drop(struct djd_store *st, const char *name)
{
	for (unsigned int i = 0; i < st->n; i++)
		if (!strcmp(st->names[i], name)) {
			close(st->fds[i]);
			st->n--;
			memcpy(st->names[i], st->names[st->n],
			       sizeof(st->names[0]));
			st->fds[i] = st->fds[st->n];
			return;
		}
}

static void *run(void *arg)
{
	struct djd_store *st = arg;

	for (;;) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(struct ucred)) +
			       CMSG_SPACE(16 * sizeof(int))];
		} cm;
		char buf[4096], name[256];
		struct iovec iov = { buf, sizeof(buf) - 1 };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = &cm,
				     .msg_controllen = sizeof(cm) };
		struct pollfd p[2] = { { .fd = st->sock, .events = POLLIN },
				       { .fd = st->stop[0],
					 .events = POLLIN } };
		int fd = -1;
		ssize_t n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return NULL;
		if (p[1].revents)
			return NULL;
		if (!p[0].revents)
			continue;
		n = recvmsg(st->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0)
			continue;
		buf[n] = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c;
		     c = CMSG_NXTHDR(&mh, c)) {
			int got;

			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t off = 0;
			     CMSG_LEN(off + sizeof(int)) <= c->cmsg_len;
			     off += sizeof(int)) {
				memcpy(&got, CMSG_DATA(c) + off, sizeof(got));
				if (fd < 0)
					fd = got;
				else
					close(got);
			}
		}
		pthread_mutex_lock(&st->lock);
		if (has(buf, "FDSTORE=1") && fd >= 0 &&
		    value(buf, "FDNAME=", name, sizeof(name))) {
			put(st, name, fd);
			fd = -1;
		} else if (has(buf, "FDSTOREREMOVE=1") &&
			   value(buf, "FDNAME=", name, sizeof(name))) {
			drop(st, name);
		}
		pthread_mutex_unlock(&st->lock);
		if (fd >= 0)
			close(fd);
	}
}

struct djd_store *djd_store_open(void)
{
	struct djd_store *st = calloc(1, sizeof(*st));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int one = 1;

	if (!st)
		return NULL;
	strcpy(st->dir, "/tmp/djinn-store.XXXXXX");
	if (!mkdtemp(st->dir)) {
		free(st);
		return NULL;
	}
	snprintf(st->path, sizeof(st->path), "%s/notify", st->dir);
	strcpy(sa.sun_path, st->path);
	pthread_mutex_init(&st->lock, NULL);
	st->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (st->sock < 0 ||
	    setsockopt(st->sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) ||
	    bind(st->sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    pipe2(st->stop, O_CLOEXEC) ||
	    pthread_create(&st->th, NULL, run, st)) {
		fprintf(stderr, "store: %s\n", strerror(errno));
		if (st->sock >= 0)
			close(st->sock);
		unlink(st->path);
		rmdir(st->dir);
		free(st);
		return NULL;
	}
	return st;
}

void djd_store_close(struct djd_store *st)
{
	if (!st)
		return;
	write(st->stop[1], "x", 1);
	pthread_join(st->th, NULL);
	for (unsigned int i = 0; i < st->n; i++)
		close(st->fds[i]);
	close(st->sock);
	close(st->stop[0]);
	close(st->stop[1]);
	unlink(st->path);
	rmdir(st->dir);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

const char *djd_store_socket(const struct djd_store *st)
{
	return st->path;
}

bool djd_store_has(struct djd_store *st, const char *name)
{
	size_t n = strlen(name);
	bool found = false;

	/* "PREFIX*": any name that begins so */
	if (n && name[n - 1] == '*')
		n--;
	else
		n++; /* the NUL too: the whole name */
	pthread_mutex_lock(&st->lock);
	for (unsigned int i = 0; i < st->n && !found; i++)
		found = !strncmp(st->names[i], name, n);
	pthread_mutex_unlock(&st->lock);
	return found;
}

bool djd_store_wait(struct djd_store *st, const char *name, bool want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (djd_store_has(st, name) == want)
			return true;
		usleep(1000);
	}
	return djd_store_has(st, name) == want;
}

void djd_store_lock(struct djd_store *st)
{
	pthread_mutex_lock(&st->lock);
}

void djd_store_unlock(struct djd_store *st)
{
	pthread_mutex_unlock(&st->lock);
}

void djd_store_pass(struct djd_store *st)
{
	static char names[DJD_STORE_MAX * 257];
	char v[32];
	int high[DJD_STORE_MAX];

	setenv("NOTIFY_SOCKET", st->path, 1);
	/* the child of a fork under djd_store_lock(): no thread here */
	if (!st->n)
		return;
	names[0] = 0;
	/* each dup'd above the range first, so that none is lost */
	for (unsigned int i = 0; i < st->n; i++)
		high[i] = fcntl(st->fds[i], F_DUPFD_CLOEXEC, 3 + DJD_STORE_MAX);
	for (unsigned int i = 0; i < st->n; i++) {
		dup2(high[i], 3 + (int)i);
		if (i)
			strcat(names, ":");
		strcat(names, st->names[i]);
	}
	snprintf(v, sizeof(v), "%u", st->n);
	setenv("LISTEN_FDS", v, 1);
	snprintf(v, sizeof(v), "%d", (int)getpid());
	setenv("LISTEN_PID", v, 1);
	setenv("LISTEN_FDNAMES", names, 1);
}
