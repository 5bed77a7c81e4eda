// SPDX-License-Identifier: MIT
/*
 * open_session: a test helper that holds sessions open on a djinnd.
 *
 *   open_session [-t SECONDS] SOCKET TENANT[:PRIO[:PHASE[:BYTES]]]...
 *
 * Opens one session per TENANT over one connection to the client socket,
 * with priority PRIO, a SIGNAL to PHASE (enum djinn_phase) and a data
 * tensor of BYTES bytes when given; prints "ID TENANT" a line for each,
 * then renews the leases every second until it is killed, its sessions
 * are all gone, the daemon goes away or SECONDS (default 60) pass.
 * Speaks the protocol itself: it tests djinnd and djinnctl, not libdjinn.
 * Exit status: 0, or 1 with a message when a request fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <djinn/proto.h>

#include "clock.h"

#define MAX_SESSIONS 64

static int fd = -1;
static uint64_t next_id = 1;

static int xfer(void *buf, size_t len, int out)
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

/* One request and its answer: 0 with up to @ans_len bytes of payload in
 * @ans, the daemon's negative errno, or an I/O -errno (reported). */
static int call(uint16_t op, uint64_t session, const void *req,
		uint32_t req_len, void *ans, size_t ans_len)
{
	struct djinn_hdr h = {
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = op,
		.request_id = next_id++,
		.session_id = session,
		.payload_len = req_len,
	};
	uint8_t buf[sizeof(struct djinn_error) + DJINN_MAX_ERROR_MSG + 512];
	int ret;

	ret = xfer(&h, sizeof(h), 1);
	if (!ret && req_len)
		ret = xfer((void *)req, req_len, 1);
	if (!ret)
		ret = xfer(&h, sizeof(h), 0);
	if (ret)
		return ret;
	if (h.magic != DJINN_MAGIC || h.payload_len > sizeof(buf)) {
		fprintf(stderr, "open_session: bad answer to opcode %u\n", op);
		return -EPROTO;
	}
	ret = xfer(buf, h.payload_len, 0);
	if (ret)
		return ret;
	if (h.flags & DJINN_F_ERROR) {
		struct djinn_error e;

		memcpy(&e, buf, sizeof(e));
		return e.error;
	}
	if (ans_len)
		memcpy(ans, buf,
		       h.payload_len < ans_len ? h.payload_len : ans_len);
	return 0;
}

static int open_one(char *spec, uint64_t *id)
{
	struct djinn_session_open o = { .priority = 4 };
	struct djinn_session_resp r;
	char *prio = strchr(spec, ':'), *phase = NULL, *bytes = NULL;
	int ret;

	if (prio) {
		*prio++ = 0;
		o.priority = (uint32_t)strtoul(prio, NULL, 10);
		phase = strchr(prio, ':');
	}
	if (phase) {
		*phase++ = 0;
		bytes = strchr(phase, ':');
		if (bytes)
			*bytes++ = 0;
	}
	snprintf(o.tenant, sizeof(o.tenant), "%s", spec);
	ret = call(DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(r));
	if (ret)
		goto out_err;
	*id = r.session_id;
	if (phase && *phase) {
		struct djinn_signal sg = {
			.phase = (uint32_t)strtoul(phase, NULL, 10),
			.expected_ns = NSEC_PER_SEC,
		};

		ret = call(DJINN_MSG_SIGNAL, *id, &sg, sizeof(sg), NULL, 0);
		if (ret)
			goto out_err;
	}
	if (bytes && *bytes) {
		struct djinn_tensor_create tc = {
			.desc = { .dtype = DJINN_DTYPE_U8, .ndim = 1 },
			.segment = DJINN_SEG_DATA,
		};
		struct djinn_tensor_resp tr;

		tc.desc.dims[0] = strtoull(bytes, NULL, 10);
		ret = call(DJINN_MSG_TENSOR_CREATE, *id, &tc, sizeof(tc), &tr,
			   sizeof(tr));
		if (ret)
			goto out_err;
	}
	return 0;

out_err:
	fprintf(stderr, "open_session: tenant %s: %s\n", spec, strerror(-ret));
	return ret;
}

int main(int argc, char **argv)
{
	struct timeval tv = { .tv_sec = 5 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t ids[MAX_SESSIONS];
	int nr = 0, lifetime = 60, first = 1;

	if (argc > 2 && !strcmp(argv[1], "-t")) {
		lifetime = atoi(argv[2]);
		argv += 2;
		argc -= 2;
	}
	if (argc < 3 || argc - 2 > MAX_SESSIONS ||
	    strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: open_session [-t SECONDS] SOCKET "
				"TENANT[:PRIO[:PHASE[:BYTES]]]...\n");
		return 2;
	}
	strcpy(sa.sun_path, argv[1]);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "open_session: %s: %s\n", argv[1],
			strerror(errno));
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		char *tenant = argv[i];

		if (open_one(argv[i], &ids[nr]))
			return 1;
		printf("%" PRIu64 " %s\n", ids[nr++], tenant);
	}
	fflush(stdout);

	/* Renew every lease each second; a killed session drops out. */
	for (int t = 0; t < lifetime && nr; t++) {
		if (!first)
			sleep(1);
		first = 0;
		for (int i = 0; i < nr; i++) {
			struct djinn_session_resp r;
			int ret = call(DJINN_MSG_HEARTBEAT, ids[i], NULL, 0, &r,
				       sizeof(r));

			if (ret == -ENOENT) {
				ids[i--] = ids[--nr];
			} else if (ret == -ECONNRESET || ret == -EPIPE) {
				return 0;
			} else if (ret) {
				fprintf(stderr,
					"open_session: heartbeat %" PRIu64
					": %s\n",
					ids[i], strerror(-ret));
				return 1;
			}
		}
	}
	return 0;
}
