// SPDX-License-Identifier: MIT
/*
 * The service manager's file descriptor store, and --handover. See
 * fdstore.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "net/fdstore.h"
#include "net/restart.h"

/* The fds passed at start: LISTEN_FDS of them from SD_LISTEN_FDS_START,
 * or those a predecessor handed over; each one's fd -1 once taken. With
 * a handover, the predecessor (a pidfd: its pid cannot be reused under
 * us), told to drain once this djinnd serves. */
static struct passed {
	char **names;
	int *fds;
	int n;
	bool from_store; /* systemd's: FDSTOREREMOVE drops what is unused */
	int pred; /* pidfd, or -1 */
	pid_t pred_pid;
	/* the handover's socket, kept to say "serving" on, or -1; whether
	 * the predecessor handed its state (net/restart.h) and waits for
	 * that word rather than a SIGTERM */
	int sock;
	bool state;
} passed = { .pred = -1, .sock = -1 };

/* The names this djinnd knows are in the store: those it stored, and
 * those passed and taken, until it has the store forget them
 * (fdstore_has()). */
static struct {
	char **names;
	unsigned int n;
} held;

static int held_find(const char *name)
{
	for (unsigned int i = 0; i < held.n; i++)
		if (!strcmp(held.names[i], name))
			return (int)i;
	return -1;
}

static void held_add(const char *name)
{
	char **names, *dup;

	if (held_find(name) >= 0)
		return;
	names = realloc(held.names, (held.n + 1) * sizeof(*names));
	if (!names)
		return;
	held.names = names;
	dup = strdup(name);
	if (dup)
		held.names[held.n++] = dup;
}

static void held_del(const char *name)
{
	int i = held_find(name);

	if (i < 0)
		return;
	free(held.names[i]);
	held.names[i] = held.names[--held.n];
}

/* How long a successor waits for each message of a handover: the
 * predecessor first lets its requests in flight finish. */
#define HANDOVER_WAIT_MS ((RESTART_QUIESCE_S + RESTART_READY_S) * 1000)

static void passed_free(void)
{
	for (int i = 0; i < passed.n; i++) {
		if (passed.fds[i] >= 0)
			close(passed.fds[i]);
		free(passed.names[i]);
	}
	free(passed.names);
	free(passed.fds);
	passed.names = NULL;
	passed.fds = NULL;
	passed.n = 0;
}

/* Add @fd named @name (both taken over) to the passed ones: 0 or
 * -ENOMEM (both let go). */
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

/* One message of the handover protocol within HANDOVER_WAIT_MS: its bytes in @buf
 * (NUL-terminated), its fd in *@fd (-1 if none; a message with more
 * than one is refused, all of them closed), who sent it in *@from (the
 * kernel's word: SO_PASSCRED). Its length, 0 at EOF, or a negative
 * errno. */
static int handover_recv(int sock, char *buf, size_t len, int *fd,
			 struct ucred *from)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred)) +
		       CMSG_SPACE(4 * sizeof(int))];
	} cm;
	struct iovec iov = { buf, len - 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = &cm,
			     .msg_controllen = sizeof(cm) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int nfds = 0, ret = 0;
	struct cmsghdr *c;
	ssize_t n;

	*fd = -1;
	memset(from, 0, sizeof(*from));
	from->uid = (uid_t)-1;
	if (poll(&p, 1, HANDOVER_WAIT_MS) != 1)
		return -ETIMEDOUT;
	n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		int got;

		if (c->cmsg_level == SOL_SOCKET &&
		    c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len == CMSG_LEN(sizeof(*from))) {
			memcpy(from, CMSG_DATA(c), sizeof(*from));
			continue;
		}
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t off = 0; CMSG_LEN(off + sizeof(int)) <= c->cmsg_len;
		     off += sizeof(int)) {
			memcpy(&got, CMSG_DATA(c) + off, sizeof(got));
			if (!nfds++)
				*fd = got;
			else
				close(got);
		}
	}
	if (nfds > 1 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		ret = -EPROTO;
	if (ret) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return ret;
	}
	buf[n] = 0;
	return (int)n;
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The fds of the djinnd serving @path (--handover): a message for
 * each, its name and the fd, then "end". The number taken; 0 when
 * nobody serves @path (a first start); a negative errno when the
 * handover failed (nothing is kept: the caller must not bind in the
 * running djinnd's place). */
static int handover_take(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[FDSTORE_NAME_MAX + 2];
	struct ucred cr = { 0 }, from;
	socklen_t len = sizeof(cr);
	int sock, ret, fd, one = 1, resets = 0;
	bool got;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
again:
	got = false;
	len = sizeof(cr);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	/* each message says who sent it: the djinnd serving now, not the
	 * one that made the socket (which SO_PEERCRED names) */
	setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = errno == ENOENT || errno == ECONNREFUSED ? 0 : -errno;
		close(sock);
		if (!ret)
			log_info("handover: no djinnd serves %s: a first "
				 "start",
				 path);
		return ret;
	}
	/* Only djinnd's own uid, or root, may hand it sockets: another
	 * could pass one bound elsewhere than djinnd.conf says. */
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
	    (cr.uid && cr.uid != geteuid())) {
		log_err("handover: %s is served by pid %d of uid %u, not "
			"djinnd's: refused",
			path, (int)cr.pid, (unsigned int)cr.uid);
		close(sock);
		return -EPERM;
	}
	for (;;) {
		char *name;

		ret = handover_recv(sock, buf, sizeof(buf), &fd, &from);
		got |= ret > 0;
		if (ret > 0 &&
		    ((from.uid && from.uid != geteuid()) ||
		     (passed.pred_pid && from.pid != passed.pred_pid))) {
			if (fd >= 0)
				close(fd);
			fd = -1;
			ret = -EPERM;
		}
		if (ret > 0 && !passed.pred_pid) {
			passed.pred_pid = from.pid;
			cr.pid = from.pid;
			passed.pred = pidfd_open_(from.pid);
		}
		if (ret > 0 && fd < 0 && !strcmp(buf, "end"))
			break;
		if (ret > 0 && fd < 0 && !strncmp(buf, "error: ", 7)) {
			log_err("handover: pid %d cannot hand over: %s",
				(int)from.pid, buf + 7);
			ret = -EBUSY;
			break;
		}
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
		passed.state |= !strcmp(name, "state");
		ret = passed_add(name, fd);
		if (ret)
			break;
		log_info("handover: passed %s (fd %d)", buf, fd);
	}
	if (ret > 0) { /* "end" */
		ret = 0;
		passed.sock = sock;
	} else {
		close(sock);
	}
	/* Reset before a word: a djinnd that was ending (killed: its
	 * io_uring lets go of the socket a moment after the process is
	 * gone). Dial again, for a second at most, until nobody serves (a
	 * first start) or one answers; a live djinnd that refuses closes
	 * (an end of input, not a reset), which fails as any refusal. */
	if (ret == -ECONNRESET && !got && ++resets < 50) {
		log_info("handover: %s was reset before a word: dialling "
			 "again",
			 path);
		usleep(20000);
		goto again;
	}
	if (!ret && passed.pred < 0) {
		log_err("handover: pid %d: no pidfd for it",
			(int)passed.pred_pid);
		ret = -ESRCH;
	}
	if (ret < 0) {
		log_err("handover from pid %d over %s failed: %s", (int)cr.pid,
			path, strerror(-ret));
		passed_free();
		if (passed.pred >= 0)
			close(passed.pred);
		if (passed.sock >= 0)
			close(passed.sock);
		passed.pred = passed.sock = -1;
		passed.pred_pid = 0;
		passed.state = false;
		return ret;
	}
	return passed.n;
}

int fdstore_init(const char *handover)
{
	int n = sd_listen_fds(0), named;
	char **names = NULL;

	if (n > 0) {
		named = sd_listen_fds_with_names(1, &names);
		if (named != n) {
			/* LISTEN_FDNAMES does not match: none can be named,
			 * and each listener is bound anew */
			log_err("fd store: %d fds passed, %d names: all closed",
				n, named);
			for (int i = 0; i < n; i++)
				close(SD_LISTEN_FDS_START + i);
			for (int i = 0; named > 0 && names && names[i]; i++)
				free(names[i]);
			free(names);
			return 0;
		}
	} else {
		sd_listen_fds(1); /* unset LISTEN_FDS for our children */
		return n < 0 || !handover ? n : handover_take(handover);
	}
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
	passed.from_store = true;
	return n;
}

int fdstore_take(const char *name)
{
	for (int i = 0; i < passed.n; i++) {
		int fd = passed.fds[i];

		if (fd < 0 || strcmp(passed.names[i], name))
			continue;
		passed.fds[i] = -1;
		if (passed.from_store)
			held_add(name);
		return fd;
	}
	return -1;
}

void fdstore_drop(const char *name, int fd)
{
	fdstore_forget(name);
	close(fd);
}

/* Close, and drop from the store, the passed fds not named in @names;
 * with @state, those of a restart's state too. */
static void drop_others(const char *const *names, unsigned int n, bool state)
{
	for (int i = 0; i < passed.n; i++) {
		bool named = false;

		if (passed.fds[i] < 0)
			continue;
		for (unsigned int k = 0; k < n && !named; k++)
			named = !strcmp(passed.names[i], names[k]);
		/* the state's are restart_restore()'s to take first */
		if (named ||
		    (!state && (!strcmp(passed.names[i], "state") ||
				!strcmp(passed.names[i], "state-data") ||
				!strncmp(passed.names[i], "pool-", 5) ||
				!strncmp(passed.names[i], "conn-", 5))))
			continue;
		log_info("fd store: %s is %s: dropped", passed.names[i],
			 state ? "not taken" : "not configured");
		fdstore_drop(passed.names[i], passed.fds[i]);
		passed.fds[i] = -1;
	}
}

void fdstore_retain(const char *const *names, unsigned int n)
{
	/* configured no more: closed before anything is bound, so that an
	 * address it held is free */
	drop_others(names, n, false);
}

void fdstore_done(void)
{
	/* a connection not restored is closed, and the store lets go of
	 * it: its client sees the end, not a socket nobody reads */
	drop_others(NULL, 0, true);
	passed_free();
	passed.from_store = false;
}

int fdstore_handover_finish(void)
{
	static const char serving[] = "serving";

	if (passed.sock >= 0 && passed.state) {
		/* it handed its state over and exits on this word; one not
		 * told serves on, with the same memory: this one must not */
		int ret = 0;

		if (send(passed.sock, serving, sizeof(serving) - 1,
			 MSG_NOSIGNAL) < 0) {
			ret = -errno;
			log_err("handover: cannot tell pid %d: %s; it serves "
				"on, and this djinnd exits",
				(int)passed.pred_pid, strerror(errno));
		} else {
			log_notice("handover: serving; pid %d told",
				   (int)passed.pred_pid);
		}
		close(passed.sock);
		close(passed.pred);
		passed.sock = passed.pred = -1;
		return ret;
	}
	if (passed.sock >= 0)
		close(passed.sock);
	passed.sock = -1;
	if (passed.pred < 0)
		return 0;
	/* it drains and exits, as on SIGTERM */
	if (syscall(SYS_pidfd_send_signal, passed.pred, SIGTERM, NULL, 0))
		log_warn("handover: cannot tell pid %d to drain: %s",
			 (int)passed.pred_pid, strerror(errno));
	else
		log_notice("handover: serving; pid %d told to drain",
			   (int)passed.pred_pid);
	close(passed.pred);
	passed.pred = -1;
	return 0;
}

bool fdstore_handed_state(void)
{
	return passed.state;
}

int fdstore_take_prefix(const char *prefix, char *name, size_t len)
{
	for (int i = 0; i < passed.n; i++)
		if (passed.fds[i] >= 0 &&
		    !strncmp(passed.names[i], prefix, strlen(prefix))) {
			snprintf(name, len, "%s", passed.names[i]);
			return fdstore_take(passed.names[i]);
		}
	return -1;
}

bool fdstore_has(const char *name)
{
	return held_find(name) >= 0;
}

void fdstore_forget(const char *name)
{
	held_del(name);
	if (passed.from_store || fdstore_present())
		sd_notifyf(0, "FDSTOREREMOVE=1\nFDNAME=%s", name);
}

bool fdstore_present(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	return e && *e;
}

bool fdstore_keep(const char *name, int fd, bool poll)
{
	char msg[FDSTORE_NAME_MAX + 64];
	int ret;

	if (!fdstore_present())
		return false;
	/* FDPOLL=0: a listening socket or a memfd is never "hung up";
	 * keep it. A connection is dropped if its peer hangs up. */
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s%s", name,
		 poll ? "" : "\nFDPOLL=0");
	ret = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
	if (ret <= 0) {
		log_warn("fd store: cannot keep %s: %s", name,
			 ret ? strerror(-ret) : "no store");
		return false;
	}
	held_add(name);
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
	/* FDNAME takes printable ASCII but ':' (LISTEN_FDNAMES' separator):
	 * ':', '%' and anything else are escaped */
	for (const unsigned char *p = (const unsigned char *)spec; *p; p++) {
		if (*p == ':' || *p == '%' || *p <= ' ' || *p >= 0x7f) {
			if (n + 3 >= cap)
				return -ENAMETOOLONG;
			n += (size_t)snprintf(out + n, 4, "%%%02X", *p);
		} else {
			if (n + 1 >= cap)
				return -ENAMETOOLONG;
			out[n++] = (char)*p;
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
