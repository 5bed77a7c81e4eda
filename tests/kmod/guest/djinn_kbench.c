// SPDX-License-Identifier: MIT
/*
 * djinn.ko benchmarks, run inside the QEMU guest (make bench-kmod).
 * Timings under TCG are only relative: compare the figure with its
 * baseline from the same run, never across machines.
 *
 *   signal:  from just before ioctl(SIGNAL) to another process's receipt
 *            of the SIGNAL_NTF event (the sender's clock rides in
 *            expected_ns); baseline: the same 56-byte message (a protocol
 *            header and a SIGNAL payload, what the user-space provider
 *            gets) sent over an AF_UNIX SOCK_SEQPACKET socket
 *   death:   from kill(SIGKILL) of a process holding a session to the
 *            kernel sending CLOSED_NTF (the event's time attribute);
 *            baseline: kill to the parent's waitpid() returning
 *
 * All of it runs on CPU 0 (children inherit the affinity). One JSON line
 * per figure, as bench/ prints them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/djinn.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#define N 2000
#define WARM 100
#define DEATHS 50

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, int n, double p)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(int)(p * (n - 1))] / 1e3;
}

static void die(const char *what)
{
	fprintf(stderr, "djinn_kbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The event listener: the receipt time of each event's expected_ns or
 * CLOSED_NTF, written to @out. */
struct ev {
	uint8_t cmd;
	uint64_t expected_ns;
	uint64_t time_ns; /* the kernel's, when it sent the event */
	uint64_t at;
};

static int on_msg(struct nl_msg *msg, void *arg)
{
	struct nlattr *tb[DJINN_A_SESSION_MAX + 1];
	struct genlmsghdr *gh = nlmsg_data(nlmsg_hdr(msg));
	struct ev *e = arg;

	e->at = now_ns();
	if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, DJINN_A_SESSION_MAX, NULL))
		return NL_SKIP;
	e->cmd = gh->cmd;
	e->expected_ns = tb[DJINN_A_SESSION_EXPECTED_NS] ?
				 nla_get_u64(tb[DJINN_A_SESSION_EXPECTED_NS]) :
				 0;
	e->time_ns = tb[DJINN_A_SESSION_TIME_NS] ?
			     nla_get_u64(tb[DJINN_A_SESSION_TIME_NS]) :
			     0;
	return NL_OK;
}

static struct nl_sock *events(struct ev *e)
{
	struct nl_sock *sk = nl_socket_alloc();
	int grp;

	if (!sk || genl_connect(sk))
		die("genl_connect");
	grp = genl_ctrl_resolve_grp(sk, DJINN_FAMILY_NAME, DJINN_MCGRP_EVENTS);
	if (grp < 0 || nl_socket_add_membership(sk, grp))
		die("join events");
	nl_socket_disable_seq_check(sk);
	/* events are small: one recvmsg each, no peek first */
	nl_socket_disable_msg_peek(sk);
	nl_socket_modify_cb(sk, NL_CB_VALID, NL_CB_CUSTOM, on_msg, e);
	return sk;
}

static void emit(const char *bench, const char *metric, double v, double base)
{
	printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.1f, "
	       "\"unit\": \"us\", \"baseline\": %.1f, \"ratio\": %.2f}\n",
	       bench, metric, v, base, base > 0 ? v / base : 0);
}

static uint64_t kmod_lat[N], unix_lat[N], send_lat[N];

static void bench_signal(void)
{
	struct djinn_ioc_session_open o = {
		.size = sizeof(o),
		.lease_ns = 3600ull * 1000000000, /* signals do not renew it */
	};
	int ack[2], res[2], sp[2], fd, i;
	pid_t pid;
	char c = 0;

	fd = open(DJINN_DEVICE, O_RDWR);
	strcpy(o.tenant, "bench");
	if (fd < 0 || ioctl(fd, DJINN_IOC_SESSION_OPEN, &o))
		die("session");
	if (pipe(ack) || pipe(res) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct ev e;
		struct nl_sock *sk = events(&e);
		unsigned char frame[56];

		if (write(ack[1], &c, 1) != 1) /* subscribed */
			_exit(1);
		for (i = 0; i < WARM + N; i++) {
			do {
				e.cmd = 0;
				nl_recvmsgs_default(sk);
			} while (e.cmd != DJINN_CMD_SIGNAL_NTF);
			if (i >= WARM) {
				kmod_lat[i - WARM] = e.at - e.expected_ns;
				send_lat[i - WARM] = e.time_ns - e.expected_ns;
			}
			if (write(ack[1], &c, 1) != 1)
				_exit(1);
		}
		for (i = 0; i < WARM + N; i++) {
			uint64_t t0;

			if (recv(sp[1], frame, sizeof(frame), 0) != 56)
				_exit(1);
			memcpy(&t0, frame + 48, 8);
			if (i >= WARM)
				unix_lat[i - WARM] = now_ns() - t0;
			if (send(sp[1], &c, 1, 0) != 1)
				_exit(1);
		}
		if (write(res[1], kmod_lat, sizeof(kmod_lat)) !=
			    sizeof(kmod_lat) ||
		    write(res[1], unix_lat, sizeof(unix_lat)) !=
			    sizeof(unix_lat) ||
		    write(res[1], send_lat, sizeof(send_lat)) !=
			    sizeof(send_lat))
			_exit(1);
		_exit(0);
	}
	if (read(ack[0], &c, 1) != 1)
		die("listener");
	for (i = 0; i < WARM + N; i++) {
		struct djinn_ioc_signal s = { .size = sizeof(s),
					      .phase = DJINN_SIGNAL_IO_WAIT };

		s.expected_ns = now_ns();
		if (ioctl(fd, DJINN_IOC_SIGNAL, &s))
			die("SIGNAL");
		if (read(ack[0], &c, 1) != 1)
			die("ack");
	}
	for (i = 0; i < WARM + N; i++) {
		unsigned char frame[56] = { 0 };
		uint64_t t0 = now_ns();

		/* a header and a SIGNAL payload whose expected_ns carries
		 * the send time, as the kmod events do */
		memcpy(frame + 48, &t0, 8);
		if (send(sp[0], frame, sizeof(frame), 0) != 56 ||
		    recv(sp[0], &c, 1, 0) != 1)
			die("unix");
	}
	if (read(res[0], kmod_lat, sizeof(kmod_lat)) != sizeof(kmod_lat) ||
	    read(res[0], unix_lat, sizeof(unix_lat)) != sizeof(unix_lat) ||
	    read(res[0], send_lat, sizeof(send_lat)) != sizeof(send_lat))
		die("results");
	waitpid(pid, NULL, 0);
	close(fd);
	emit("kmod_signal", "p50", pct(kmod_lat, N, 0.5),
	     pct(unix_lat, N, 0.5));
	emit("kmod_signal", "p99", pct(kmod_lat, N, 0.99),
	     pct(unix_lat, N, 0.99));
	/* the part before delivery: ioctl entry to the event built */
	emit("kmod_signal_sent", "p50", pct(send_lat, N, 0.5),
	     pct(unix_lat, N, 0.5));
}

static void bench_death(void)
{
	static uint64_t ev_lat[DEATHS], wait_lat[DEATHS];
	struct ev e;
	struct nl_sock *sk = events(&e);
	int i;

	for (i = 0; i < DEATHS; i++) {
		int ready[2];
		uint64_t t0;
		pid_t pid;
		char c;

		if (pipe(ready))
			die("pipe");
		pid = fork();
		if (pid == 0) {
			struct djinn_ioc_session_open o = { .size = sizeof(o) };
			int fd = open(DJINN_DEVICE, O_RDWR);

			strcpy(o.tenant, "dying");
			if (fd < 0 || ioctl(fd, DJINN_IOC_SESSION_OPEN, &o) ||
			    write(ready[1], &c, 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		if (read(ready[0], &c, 1) != 1)
			die("child");
		do { /* its OPENED_NTF */
			e.cmd = 0;
			nl_recvmsgs_default(sk);
		} while (e.cmd != DJINN_CMD_OPENED_NTF);
		t0 = now_ns();
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		wait_lat[i] = now_ns() - t0;
		do {
			e.cmd = 0;
			nl_recvmsgs_default(sk);
		} while (e.cmd != DJINN_CMD_CLOSED_NTF);
		ev_lat[i] = e.time_ns - t0;
		close(ready[0]);
		close(ready[1]);
	}
	nl_socket_free(sk);
	emit("kmod_death", "p50", pct(ev_lat, DEATHS, 0.5),
	     pct(wait_lat, DEATHS, 0.5));
}

int main(void)
{
	cpu_set_t one;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* Every process on one CPU: wake-ups stay on it, so the figures
	 * measure the paths and not (emulated) cross-CPU interrupts. */
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		die("sched_setaffinity");
	bench_signal();
	bench_death();
	return 0;
}
