// SPDX-License-Identifier: MIT
/*
 * The service manager's file descriptor store. See fdstore.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "net/fdstore.h"

/* The fds passed at start: LISTEN_FDS of them from SD_LISTEN_FDS_START,
 * each NULLed (its fd -1) once taken. */
static struct passed {
	char **names;
	int *fds;
	int n;
} passed;

int fdstore_init(void)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);

	if (n <= 0)
		return n;
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
