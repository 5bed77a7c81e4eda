// SPDX-License-Identifier: MIT
/*
 * djinnctl over generic netlink: see djinnctl_nl.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

#include "array_size.h"
#include "clock.h"
#include "uapi/linux/djinn.h"

#include "djinnctl_nl.h"
#include "json_print.h"

struct knl_msg {
	uint8_t cmd;
	uint64_t id;
	char tenant[DJINN_TENANT_LEN];
	uint32_t priority, kind, state, uid, pid, phase;
	uint64_t lease_ns, deadline_ns, expected_ns, heartbeats, signals;
	uint64_t posts, overflow, time_ns;
};

struct knl {
	struct nl_sock *sk;
	int family;
	struct knl_msg *out;
	int nr, cap;
	int err;
	bool grow; /* a dump: make room as it comes */
};

static int parse(struct nl_msg *msg, void *arg)
{
	struct knl *nl = arg;
	struct nlmsghdr *nh = nlmsg_hdr(msg);
	struct nlattr *tb[DJINN_A_SESSION_MAX + 1];
	struct knl_msg *m;

	if (nh->nlmsg_type != nl->family ||
	    genlmsg_parse(nh, 0, tb, DJINN_A_SESSION_MAX, NULL))
		return NL_SKIP;
	if (nl->nr == nl->cap) {
		int cap = nl->cap ? 2 * nl->cap : 64;
		struct knl_msg *n;

		if (!nl->grow)
			return NL_SKIP;
		n = realloc(nl->out, (size_t)cap * sizeof(*n));
		if (!n) {
			nl->err = -ENOMEM;
			return NL_STOP;
		}
		nl->out = n;
		nl->cap = cap;
	}
	m = &nl->out[nl->nr++];
	memset(m, 0, sizeof(*m));
	m->cmd = ((struct genlmsghdr *)nlmsg_data(nh))->cmd;
#define U64(a, f)  \
	if (tb[a]) \
		m->f = nla_get_u64(tb[a]);
#define U32(a, f)  \
	if (tb[a]) \
		m->f = nla_get_u32(tb[a]);
	U64(DJINN_A_SESSION_ID, id);
	U32(DJINN_A_SESSION_PRIORITY, priority);
	U32(DJINN_A_SESSION_KIND, kind);
	U32(DJINN_A_SESSION_STATE, state);
	U32(DJINN_A_SESSION_UID, uid);
	U32(DJINN_A_SESSION_PID, pid);
	U32(DJINN_A_SESSION_PHASE, phase);
	U64(DJINN_A_SESSION_LEASE_NS, lease_ns);
	U64(DJINN_A_SESSION_DEADLINE_NS, deadline_ns);
	U64(DJINN_A_SESSION_EXPECTED_NS, expected_ns);
	U64(DJINN_A_SESSION_HEARTBEATS, heartbeats);
	U64(DJINN_A_SESSION_SIGNALS, signals);
	U64(DJINN_A_SESSION_POSTS, posts);
	U64(DJINN_A_SESSION_OVERFLOW, overflow);
	U64(DJINN_A_SESSION_TIME_NS, time_ns);
#undef U64
#undef U32
	/* the module checks tenants; a terminal should not have to trust
	 * it: anything not printable becomes '?' */
	if (tb[DJINN_A_SESSION_TENANT]) {
		snprintf(m->tenant, sizeof(m->tenant), "%s",
			 nla_get_string(tb[DJINN_A_SESSION_TENANT]));
		for (char *p = m->tenant; *p; p++)
			if (*p < ' ' || *p > '~')
				*p = '?';
	}
	return NL_OK;
}

static int on_error(struct sockaddr_nl *who, struct nlmsgerr *e, void *arg)
{
	((struct knl *)arg)->err = e->error;
	return NL_STOP;
}

static int on_ack(struct nl_msg *msg, void *arg)
{
	return NL_STOP;
}

static void knl_close(struct knl *nl)
{
	nl_socket_free(nl->sk);
	free(nl->out);
	free(nl);
}

static int knl_open(struct knl **out, bool events, char *msg, size_t len)
{
	struct knl *nl = calloc(1, sizeof(*nl));
	int ret, grp;

	if (!nl || !(nl->sk = nl_socket_alloc())) {
		free(nl);
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	ret = genl_connect(nl->sk);
	if (ret) {
		snprintf(msg, len, "netlink: %s", nl_geterror(ret));
		knl_close(nl);
		return -ECONNREFUSED;
	}
	nl->family = genl_ctrl_resolve(nl->sk, DJINN_FAMILY_NAME);
	if (nl->family < 0) {
		snprintf(msg, len,
			 "no generic netlink family %s: djinn.ko "
			 "is not loaded",
			 DJINN_FAMILY_NAME);
		knl_close(nl);
		return -ENOENT;
	}
	nl_socket_modify_cb(nl->sk, NL_CB_VALID, NL_CB_CUSTOM, parse, nl);
	nl_socket_modify_err_cb(nl->sk, NL_CB_CUSTOM, on_error, nl);
	nl_socket_modify_cb(nl->sk, NL_CB_ACK, NL_CB_CUSTOM, on_ack, nl);
	if (events) {
		grp = genl_ctrl_resolve_grp(nl->sk, DJINN_FAMILY_NAME,
					    DJINN_MCGRP_EVENTS);
		nl_socket_disable_seq_check(nl->sk);
		/* the socket call, for the kernel's own errno */
		if (grp < 0 ||
		    setsockopt(nl_socket_get_fd(nl->sk), SOL_NETLINK,
			       NETLINK_ADD_MEMBERSHIP, &grp, sizeof(grp))) {
			ret = grp < 0 ? -ENOENT : -errno;
			snprintf(msg, len, "joining the %s group: %s%s",
				 DJINN_MCGRP_EVENTS, strerror(-ret),
				 ret == -EPERM ? " (it needs CAP_NET_ADMIN)" :
						 "");
			knl_close(nl);
			return ret;
		}
	}
	*out = nl;
	return 0;
}

/* A request and its answer: 0 or -errno (the kernel's). */
static int request(struct knl *nl, uint8_t cmd, int flags, uint64_t id)
{
	struct nl_msg *msg = nlmsg_alloc();
	int ret;

	if (!msg)
		return -ENOMEM;
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl->family, 0,
			 (flags & NLM_F_DUMP) ? flags : flags | NLM_F_ACK, cmd,
			 DJINN_FAMILY_VERSION) ||
	    (id && nla_put_u64(msg, DJINN_A_SESSION_ID, id))) {
		nlmsg_free(msg);
		return -EMSGSIZE;
	}
	ret = nl_send_auto(nl->sk, msg);
	nlmsg_free(msg);
	if (ret < 0)
		return -EIO;
	/* until the ack (or the dump's end, or an error) */
	ret = nl_wait_for_ack(nl->sk);
	if (nl->err)
		return nl->err;
	return ret < 0 ? -EIO : 0;
}

static const char *state_name(uint32_t s)
{
	static const char *const n[] = { "?", "live", "closed", "expired",
					 "killed" };

	return s < ARRAY_SIZE(n) ? n[s] : "?";
}

static const char *phase_name(uint32_t p)
{
	switch (p) {
	case 0:
		return "unknown";
	case DJINN_SIGNAL_IO_WAIT:
		return "io_wait";
	case DJINN_SIGNAL_COMPUTE:
		return "compute";
	case DJINN_SIGNAL_IDLE:
		return "idle";
	}
	return "?";
}

static const char *event_name(uint8_t cmd)
{
	switch (cmd) {
	case DJINN_CMD_OPENED_NTF:
		return "opened";
	case DJINN_CMD_CLOSED_NTF:
		return "closed";
	case DJINN_CMD_EXPIRED_NTF:
		return "expired";
	case DJINN_CMD_KILLED_NTF:
		return "killed";
	case DJINN_CMD_SIGNAL_NTF:
		return "signal";
	}
	return "unknown";
}

int knl_session_list(char *msg, size_t len)
{
	struct knl *nl;
	uint64_t now;
	int ret, idw = 2, tw = 6;

	ret = knl_open(&nl, false, msg, len);
	if (ret)
		return ret;
	nl->grow = true;
	ret = request(nl, DJINN_CMD_GET, NLM_F_DUMP, 0);
	if (ret) {
		snprintf(msg, len, "dumping the kernel's sessions: %s%s",
			 strerror(-ret),
			 ret == -EPERM ? " (it needs CAP_NET_ADMIN)" : "");
		knl_close(nl);
		return ret;
	}
	now = mono_ns();
	for (int i = 0; i < nl->nr; i++) {
		char id[24];
		int n = snprintf(id, sizeof(id), "%" PRIu64, nl->out[i].id);

		idw = n > idw ? n : idw;
		n = (int)strlen(nl->out[i].tenant);
		tw = n > tw ? n : tw;
	}
	print_text("%-*s %-*s PRIO KIND  STATE   PHASE    LEASE    LEFT "
		   "HEARTBEATS SIGNALS  POSTS    UID    PID\n",
		   idw, "ID", tw, "TENANT");
	open_json_array(NULL);
	for (int i = 0; i < nl->nr; i++) {
		const struct knl_msg *m = &nl->out[i];
		char f[32];

		open_json_object(NULL);
		snprintf(f, sizeof(f), "%%-%d" PRIu64, idw);
		print_u64(PRINT_ANY, "id", f, m->id);
		snprintf(f, sizeof(f), " %%-%ds", tw);
		print_string(PRINT_ANY, "tenant", f, m->tenant);
		print_u64(PRINT_ANY, "priority", " %4" PRIu64, m->priority);
		print_string(PRINT_ANY, "kind", " %-5s",
			     m->kind & DJINN_SESSION_PROXY ? "proxy" : "local");
		print_string(PRINT_ANY, "state", " %-7s", state_name(m->state));
		print_string(PRINT_ANY, "phase", " %-8s", phase_name(m->phase));
		print_duration(PRINT_ANY, "lease_ns", " %-7s", m->lease_ns);
		print_u64(PRINT_ANY, "lease_left_ms", " %6" PRIu64 "ms",
			  m->deadline_ns > now ?
				  (m->deadline_ns - now) / NSEC_PER_MSEC :
				  0);
		print_u64(PRINT_ANY, "heartbeats", " %10" PRIu64,
			  m->heartbeats);
		print_u64(PRINT_ANY, "signals", " %7" PRIu64, m->signals);
		print_u64(PRINT_ANY, "posts", " %6" PRIu64, m->posts);
		print_u64(PRINT_JSON, "overflow", NULL, m->overflow);
		print_u64(PRINT_ANY, "uid", " %6" PRIu64, m->uid);
		if (m->pid)
			print_u64(PRINT_ANY, "pid", " %6" PRIu64 "\n", m->pid);
		else
			print_null(PRINT_ANY, "pid", " %6s\n", "-");
		close_json_object();
	}
	close_json_array();
	knl_close(nl);
	return 0;
}

int knl_session_kill(uint64_t id, char *msg, size_t len)
{
	struct knl *nl;
	int ret = knl_open(&nl, false, msg, len);

	if (ret)
		return ret;
	ret = request(nl, DJINN_CMD_KILL, 0, id);
	if (ret)
		snprintf(msg, len, "kernel session %" PRIu64 ": %s%s", id,
			 strerror(-ret),
			 ret == -EPERM	? " (it needs CAP_NET_ADMIN and "
					  "CAP_SYS_ADMIN)" :
			 ret == -ENOENT ? " (no such live session)" :
					  "");
	knl_close(nl);
	return ret == -ENOENT ? -ESRCH : ret; /* -ENOENT: no family */
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	stop = 1;
}

static void print_event(const struct knl_msg *m)
{
	printf("{\"event\":\"%s\",\"id\":%" PRIu64 ",\"tenant\":\"",
	       event_name(m->cmd), m->id);
	for (const char *p = m->tenant; *p; p++)
		printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
	printf("\",\"priority\":%u,\"kind\":\"%s\",\"state\":\"%s\","
	       "\"uid\":%u,\"pid\":%u,\"lease_ns\":%" PRIu64
	       ",\"deadline_ns\":%" PRIu64 ",\"phase\":\"%s\","
	       "\"expected_ns\":%" PRIu64 ",\"heartbeats\":%" PRIu64
	       ",\"signals\":%" PRIu64 ",\"posts\":%" PRIu64
	       ",\"overflow\":%" PRIu64 ",\"time_ns\":%" PRIu64 "}\n",
	       m->priority, m->kind & DJINN_SESSION_PROXY ? "proxy" : "local",
	       state_name(m->state), m->uid, m->pid, m->lease_ns,
	       m->deadline_ns, phase_name(m->phase), m->expected_ns,
	       m->heartbeats, m->signals, m->posts, m->overflow, m->time_ns);
}

int knl_monitor(uint64_t max, char *msg, size_t len)
{
	struct sigaction sa = { .sa_handler = on_stop };
	uint64_t seen = 0;
	struct knl *nl;
	int ret = knl_open(&nl, true, msg, len);

	if (ret)
		return ret;
	nl->grow = true;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL); /* no SA_RESTART: poll returns */
	sigaction(SIGTERM, &sa, NULL);
	/* the "ready" line lets a script start acting */
	fprintf(stderr, "djinnctl: monitoring %s events\n", DJINN_FAMILY_NAME);
	while (!stop && (!max || seen < max)) {
		struct pollfd p = { .fd = nl_socket_get_fd(nl->sk),
				    .events = POLLIN };

		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			snprintf(msg, len, "poll: %s", strerror(errno));
			break;
		}
		nl->nr = 0;
		ret = nl_recvmsgs_default(nl->sk);
		if (ret == -NLE_NOMEM) {
			/* ENOBUFS: the kernel dropped events for us */
			printf("{\"event\":\"lost\"}\n");
			fflush(stdout);
			ret = 0;
			continue;
		}
		if (ret < 0) {
			snprintf(msg, len, "netlink: %s", nl_geterror(ret));
			ret = -EIO;
			break;
		}
		for (int i = 0; i < nl->nr && (!max || seen < max); i++) {
			print_event(&nl->out[i]);
			seen++;
		}
		if (fflush(stdout)) {
			ret = -errno;
			snprintf(msg, len, "writing: %s", strerror(errno));
			break;
		}
		ret = 0;
	}
	knl_close(nl);
	return ret;
}
