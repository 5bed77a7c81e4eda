// SPDX-License-Identifier: MIT
/*
 * hello: connect to djinnd, say what it is, open a session, signal a
 * phase, and close.
 *
 *   hello [ADDR]     ADDR: unix:PATH or tcp:HOST:PORT (default $DJINN_ADDR,
 *                    else where djinnd listens by default: djinn_connect(3))
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <djinn/djinn.h>

static int fail(const char *what, int err)
{
	fprintf(stderr, "hello: %s: %s\n", what, strerror(-err));
	return 1;
}

int main(int argc, char **argv)
{
	struct djinn_server_info srv;
	struct djinn_session_info si;
	struct djinn_conn_stats st;
	struct djinn_session *s;
	struct djinn_conn *conn;
	int ret;

	ret = djinn_connect(argc > 1 ? argv[1] : NULL, &conn);
	if (ret)
		return fail("connect", ret);
	djinn_conn_server_info(conn, &srv);
	printf("djinnd: protocol %u, backend %s, %" PRIu64
	       " MiB of device memory\n",
	       srv.version, srv.backend, srv.capacity >> 20);

	ret = djinn_session_open(conn, NULL, &s);
	if (ret) {
		djinn_disconnect(conn);
		return fail("session open", ret);
	}
	djinn_session_info(s, &si);
	printf("session %" PRIu64 " (tenant %s), lease %" PRIu64 " ms\n", si.id,
	       si.tenant, si.lease_ns / 1000000);

	ret = djinn_signal(s, DJINN_PHASE_IO_WAIT, 2000000000ull);
	if (!ret)
		ret = djinn_conn_ping(conn);
	if (ret)
		fail("signal", ret);
	ret = djinn_session_close(s) ?: ret;
	djinn_conn_stats(conn, &st);
	printf("wire: %" PRIu64 " requests, %" PRIu64 " bytes sent, %" PRIu64
	       " received\n",
	       st.requests, st.bytes_sent, st.bytes_received);
	djinn_disconnect(conn);
	return ret ? 1 : 0;
}
