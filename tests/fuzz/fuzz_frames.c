// SPDX-License-Identifier: MIT
/*
 * Fuzz the daemon's request path: the input's first byte picks the
 * client or the admin socket, the rest goes through the frame parser as
 * received bytes, and every request it makes runs for real (a CPU
 * backend, the VMU, the executor), answers going out on a socketpair.
 * After each input every session is ended and the VMU must be empty.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "daemon.h"
#include "server.h"
#include "exec/executor.h"
#include "net/conn.h"

const char fuzz_name[] = "frames";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server srv;

static void drain(int peer, bool (*done)(void))
{
	char buf[65536];

	for (int i = 0; i < 2000 && !done(); i++) {
		loop_once(&srv.loop, NSEC_PER_MSEC);
		while (peer >= 0 && read(peer, buf, sizeof(buf)) > 0)
			;
	}
}

static bool idle(void)
{
	return !server_depth(&srv);
}

static bool no_conns(void)
{
	return !srv.nr_conns;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	struct vmu_stats st;
	struct conn *c;
	int sv[2];

	if (!ready) {
		struct server_config cfg = {
			.backend = "cpu",
			.cpu_mem = 64ull << 20,
			.threads = 1,
			.lease_default_ns = 10 * NSEC_PER_SEC,
			.lease_min_ns = 10 * NSEC_PER_MSEC,
			.lease_max_ns = 60 * NSEC_PER_SEC,
			.max_sessions = 1024,
			.max_conns = 16,
		};

		/* DJINN_FUZZ_LOG=debug shows what the daemon did. */
		log_init(getenv("DJINN_FUZZ_LOG") ?
				 log_parse_level(getenv("DJINN_FUZZ_LOG")) :
				 LOG_CRIT,
			 NULL);
		if (server_block_signals() || server_init(&srv, &cfg))
			abort();
		/* The first tensor of a session is 0x100000000, the next
		 * 0x100000001, ...: inputs can name what they made. */
		session_predictable_handles = true;
		ready = true;
	}
	if (!size)
		return 0;
	srv.sessions.next_id = 0; /* session ids 1, 2, ... in every input */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0,
		       sv))
		abort();
	c = conn_create(&srv, sv[0], data[0] & 1, false);
	if (!c)
		abort();
	conn_feed(c, data + 1, size - 1);
	drain(sv[1], idle);
	while (!list_empty(&srv.sessions.list))
		session_end(&srv.sessions,
			    list_first_entry(&srv.sessions.list, struct session,
					     node),
			    SESSION_SHUTDOWN);
	conn_close(c, true);
	drain(sv[1], no_conns);
	close(sv[1]);
	/* Every session is gone: nothing may stay charged but cached text
	 * and the executor's idle stack. */
	vmu_get_stats(srv.dev[0].vmu, &st);
	if (st.seg[VMU_SEG_DATA].used || st.reserved || srv.nr_conns)
		abort();
	return 0;
}
