// SPDX-License-Identifier: MIT
/*
 * A helper for the load/unload loop in the guest's init:
 *
 *   djinn_holder sessions N   open N sessions (rings mapped, a signal
 *                             each), print "ready", then wait to be killed
 *   djinn_holder listen       join the "events" group and read until
 *                             killed (it stays subscribed across unloads)
 *
 * Exits 1 with a message if a step fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/djinn.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

static int hold(int n)
{
	for (int i = 0; i < n; i++) {
		struct djinn_ioc_session_open o = { .size = sizeof(o) };
		struct djinn_ioc_signal s = {
			.size = sizeof(s),
			.phase = DJINN_SIGNAL_IO_WAIT,
			.expected_ns = 1000000000, /* a wait says how long */
		};
		int fd = open(DJINN_DEVICE, O_RDWR);

		strcpy(o.tenant, "holder");
		if (fd < 0 || ioctl(fd, DJINN_IOC_SESSION_OPEN, &o) ||
		    mmap(NULL, o.ring_bytes, PROT_READ, MAP_SHARED, fd, 0) ==
			    MAP_FAILED ||
		    ioctl(fd, DJINN_IOC_SIGNAL, &s)) {
			fprintf(stderr, "djinn_holder: session %d: %s\n", i,
				strerror(errno));
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int listen_events(void)
{
	struct nl_sock *sk = nl_socket_alloc();
	int grp;

	if (!sk || genl_connect(sk))
		return 1;
	grp = genl_ctrl_resolve_grp(sk, DJINN_FAMILY_NAME, DJINN_MCGRP_EVENTS);
	if (grp < 0 || nl_socket_add_membership(sk, grp)) {
		fprintf(stderr, "djinn_holder: cannot join events\n");
		return 1;
	}
	nl_socket_disable_seq_check(sk);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		struct pollfd p = { .fd = nl_socket_get_fd(sk),
				    .events = POLLIN };

		if (poll(&p, 1, -1) > 0)
			nl_recvmsgs_default(sk);
	}
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "sessions"))
		return hold(atoi(argv[2]));
	if (argc == 2 && !strcmp(argv[1], "listen"))
		return listen_events();
	fprintf(stderr, "usage: djinn_holder sessions N | listen\n");
	return 2;
}
