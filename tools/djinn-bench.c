// SPDX-License-Identifier: MIT
/*
 * djinn-bench: the network figures of TARGETS.md (design notes) for djinnd
 * and libdjinn, each beside a reference measured in the same run on the
 * same machine. One benchmark a file in tools/bench/, each saying what it
 * measures and against what:
 *
 *   rtt   (rtt.c) round trips/s and p50/p99 latency of a no-op request,
 *         1 and 50 connections, over the unix socket and TCP loopback,
 *         beside a raw ping-pong and redis-benchmark -t ping.
 *   bulk  (bulk.c) upload and download GB/s of a 256 MiB f32 tensor,
 *         beside a raw socket blast of the same bytes.
 *   lazy  (lazy.c) bytes received to read 1% of a 196 MiB result, by
 *         range and through a mapping, beside the result's size.
 *   stall (stall.c) no-op round-trip latency on one connection while
 *         another uploads a 1 GiB tensor, beside the same latency idle.
 *   tls   (tls.c) over a tls: listener, beside the same over TCP
 *         loopback: connects/s (TLS 1.3 handshake and HELLO), one
 *         connection's round trips/s and p50/p99, upload and download
 *         GB/s of a 256 MiB tensor (target: 0.8 of TCP, for kernel
 *         TLS); and a plain OpenSSL client and server moving the same
 *         bytes, beside a raw TCP blast. Each line says which TLS it
 *         measured ("transport": "tls, kernel" or "tls, user"). It makes
 *         its own certificates and restarts the daemon with a tls:
 *         listener, so it is skipped with --addr.
 *   restart (restart.c) the pause clients see while djinnd restarts
 *         without losing its sessions (--handover), with 1 and 4 GiB
 *         of session data (tensors and KV caches), beside a cold start
 *         that builds the same state again, and the target that the
 *         copy peak measured in the run gives. Its own djinnd only.
 *
 * What they share (the daemon, the run's deadline, the JSON lines, the
 * histograms, raw sockets) is in tools/bench/common.c; this file parses
 * the command line and runs them.
 *
 * Unless --addr names a running daemon, djinn-bench starts its own djinnd
 * in the foreground (--djinnd, else $DJINND, else BUILD/djinnd/djinnd
 * beside this binary) on a unix socket in a temporary directory and on
 * TCP 127.0.0.1 at a free port, with --cpu-mem 2G, and stops it with
 * SIGTERM at the end.
 *
 * Output is one JSON object per line on stdout (STYLE.md, Benchmarks);
 * every figure has its reference measured in this run beside it. Whatever
 * happens, the run is bounded: every child has a deadline and an alarm
 * ends the whole run.
 *
 * Usage: djinn-bench [--json] [--seconds S] [--addr ADDR]... [--only NAME]
 *                    [--djinnd PATH] [--verbose]
 *                    [rtt|bulk|lazy|stall|tls|restart|all]
 * Exit status: 0 success, 1 a call failed, a daemon did not start or bytes
 * came back wrong, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/common.h"

static const struct {
	const char *name;
	void (*run)(void);
	unsigned int budget_s; /* on top of what --seconds asks for */
	unsigned int loops; /* timed loops of --seconds and its warm-up */
	bool by_name; /* not in "all": run when named */
} benches[] = {
	{ "rtt", bench_rtt, 60, 30 * RTT_ROUNDS, false },
	{ "bulk", bench_bulk, 60, 0, false },
	{ "lazy", bench_lazy, 30, 0, false },
	{ "stall", bench_stall, 60, 0, false },
	{ "tls", bench_tls, 90, 2 * TLS_LOOPS, false },
	{ "restart", bench_restart, 900, 0, true },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: djinn-bench [--json] [--seconds S] [--addr ADDR]... "
		"[--only NAME]\n"
		"                   [--djinnd PATH] [--bulk-mib N] [--verbose] "
		"[rtt|bulk|lazy|stall|tls|restart|all]\n"
		"  rtt    round trips/s and p50/p99 of a no-op request, 1 and "
		"50 connections,\n"
		"         beside a raw ping-pong and redis-benchmark -t ping\n"
		"  bulk   upload/download GB/s of a 256 MiB tensor beside a raw "
		"socket blast\n"
		"  lazy   bytes received to read 1%% of a 196 MiB result\n"
		"  stall  ping latency while another client uploads 1 GiB\n"
		"  tls    connects/s, ping and bulk over TLS beside TCP, and "
		"plain OpenSSL\n"
		"         beside a raw blast (its own djinnd: not with "
		"--addr)\n"
		"  restart the pause of a restart that keeps 1 and 4 GiB of "
		"sessions, beside\n"
		"         a cold start (its own djinnd; by name only: it needs "
		"14 GiB)\n"
		"  all    the first five (the default)\n"
		"  -j, --json         JSON lines on stdout (the only output; "
		"the default)\n"
		"  -s, --seconds S    measured time of each rtt and tls loop "
		"(default 2, at most 60)\n"
		"  -a, --addr ADDR    use the djinnd at ADDR (unix:PATH or "
		"tcp:HOST:PORT;\n"
		"                     once for each transport) instead of "
		"starting one\n"
		"  -o, --only NAME    run only benchmark NAME\n"
		"  -b, --bulk-mib N   the tensor of bulk and tls, MiB "
		"(default 256)\n"
		"  -d, --djinnd PATH  the djinnd to start (default $DJINND, "
		"else beside this tool)\n"
		"  -v, --verbose      progress on stderr\n");
}

static void add_addr(const char *addr)
{
	struct xport *xp;

	if (nr_xports == MAX_XPORTS) {
		fprintf(stderr, "djinn-bench: at most %d --addr\n", MAX_XPORTS);
		exit(2);
	}
	xp = &xports[nr_xports];
	if (!strncmp(addr, "unix:", 5)) {
		xp->name = "unix";
		xp->is_unix = true;
	} else if (!strncmp(addr, "tcp:", 4)) {
		xp->name = "tcp";
	} else {
		fprintf(stderr,
			"djinn-bench: address '%s' is neither unix:PATH nor "
			"tcp:HOST:PORT\n",
			addr);
		exit(2);
	}
	if (strlen(addr) >= sizeof(xp->addr)) {
		fprintf(stderr, "djinn-bench: address too long\n");
		exit(2);
	}
	strcpy(xp->addr, addr);
	nr_xports++;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "seconds", required_argument, NULL, 's' },
		{ "addr", required_argument, NULL, 'a' },
		{ "only", required_argument, NULL, 'o' },
		{ "djinnd", required_argument, NULL, 'd' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "bulk-mib", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *only = NULL;
	unsigned int i, budget = 30;
	bool run_one[ARRAY_SIZE(benches)] = { false };
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "js:a:o:d:vb:h", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 'j':
			break;
		case 's':
			errno = 0;
			opt.seconds = strtod(optarg, &end);
			if (errno || !*optarg || *end || !(opt.seconds > 0) ||
			    opt.seconds > 60) {
				fprintf(stderr,
					"djinn-bench: bad --seconds '%s' (0 to "
					"60)\n",
					optarg);
				return 2;
			}
			opt.warmup = opt.seconds / 4 < 0.5 ? opt.seconds / 4 :
							     0.5;
			break;
		case 'a':
			add_addr(optarg);
			break;
		case 'o':
			only = optarg;
			break;
		case 'd':
			opt.djinnd = optarg;
			break;
		case 'v':
			opt.verbose = true;
			break;
		case 'b': {
			unsigned long mib = strtoul(optarg, &end, 10);

			if (!*optarg || *end || mib < 1 || mib > 4096) {
				fprintf(stderr,
					"djinn-bench: bad --bulk-mib '%s' (1 "
					"to 4096)\n",
					optarg);
				return 2;
			}
			opt.bulk_bytes = (size_t)mib * MiB;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc - 1) {
		usage(stderr);
		return 2;
	}
	if (optind == argc - 1) {
		if (only && strcmp(only, argv[optind])) {
			fprintf(stderr,
				"djinn-bench: both '%s' and --only %s\n",
				argv[optind], only);
			return 2;
		}
		only = argv[optind];
	}
	if (only && !strcmp(only, "all"))
		only = NULL;
	for (i = 0; i < ARRAY_SIZE(benches); i++)
		run_one[i] = only ? !strcmp(only, benches[i].name) :
				    !benches[i].by_name;
	if (only) {
		for (i = 0; i < ARRAY_SIZE(benches); i++)
			if (run_one[i])
				break;
		if (i == ARRAY_SIZE(benches)) {
			fprintf(stderr, "djinn-bench: no benchmark '%s'\n",
				only);
			usage(stderr);
			return 2;
		}
	}

	/* The deadline of the whole run: generous, but there is one. */
	for (i = 0; i < ARRAY_SIZE(benches); i++)
		if (run_one[i])
			budget += benches[i].budget_s +
				  (unsigned int)(benches[i].loops *
						 (opt.seconds + opt.warmup)) +
				  1;
	make_tmpdir();
	atexit(cleanup);
	signal(SIGALRM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	alarm(budget);
	if (!nr_xports)
		daemon_start();
	for (i = 0; i < nr_xports; i++)
		if (!djinn_answers(xports[i].addr))
			fail("no djinnd answers at %s", xports[i].addr);

	for (i = 0; i < ARRAY_SIZE(benches); i++)
		if (run_one[i])
			benches[i].run();
	daemon_stop();
	return 0;
}
