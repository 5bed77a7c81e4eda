// SPDX-License-Identifier: MIT
/*
 * djinnd: the Djinn daemon. Start-up, options and the main loop; see
 * djinnd --help and Documentation/.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

#define DJINND_VERSION "0.1"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: djinnd [OPTIONS]\n"
		"  -l, --listen ADDR        unix:PATH or tcp:HOST:PORT (repeatable; TCP\n"
		"                           binds loopback unless HOST says otherwise)\n"
		"  -a, --admin-socket PATH  the admin socket for djinnctl\n"
		"  -b, --backend NAME       cpu (default)\n"
		"  -m, --cpu-mem SIZE       the CPU backend's device memory (default 2G)\n"
		"  -t, --threads N          kernel threads (default: one per CPU)\n"
		"      --lease-ms MS        default lease period (default 10000)\n"
		"  -f, --foreground         stay in the foreground (default when\n"
		"                           stderr is a terminal or under systemd)\n"
		"  -L, --log-level LEVEL    err, warning, notice, info (default), debug\n"
		"      --log-file PATH      append the log there (SIGHUP reopens it)\n"
		"  -h, --help, -V, --version\n"
		"Defaults: sockets in /run/djinn/ for root, in $XDG_RUNTIME_DIR/djinn/\n"
		"for a user who has one, else in ./run/.\n");
}

/* "512M", "2G", "65536": bytes, or 0 on error. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;

	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	case 't':
	case 'T':
		shift = 40;
		end++;
		break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end || end == s || (v << shift) >> shift != v)
		return 0;
	return (uint64_t)v << shift;
}

/* Where sockets go by default. */
static const char *run_dir(void)
{
	static char dir[4096];
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (geteuid() == 0)
		return "/run/djinn";
	if (xdg && *xdg) {
		snprintf(dir, sizeof(dir), "%s/djinn", xdg);
		return dir;
	}
	return "run";
}

/* Connections need fds: take the hard limit, and keep max_conns under
 * it with room for everything else, so accept never runs out. */
static void raise_nofile(struct server_config *cfg)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < cfg->max_conns + 256)
		cfg->max_conns = rl.rlim_cur > 512 ? rl.rlim_cur - 256 : 256;
}

static int daemonize(void)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0)
		_exit(0);
	if (!freopen("/dev/null", "r", stdin) ||
	    !freopen("/dev/null", "w", stdout))
		return -errno;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "backend", required_argument, NULL, 'b' },
		{ "cpu-mem", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "lease-ms", required_argument, NULL, 1 },
		{ "foreground", no_argument, NULL, 'f' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "log-file", required_argument, NULL, 2 },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	static char def_listen[4200], def_admin[4200];
	struct server_config cfg = {
		.backend = "cpu",
		.cpu_mem = 2ull << 30,
		.lease_default_ns = 10000000000ull,
		.lease_min_ns = 10000000ull,
		.lease_max_ns = 3600000000000ull,
		.max_sessions = 65536,
		.max_conns = 4096,
	};
	const char *log_file = NULL;
	bool foreground = isatty(2) || getenv("INVOCATION_ID");
	int level = LOG_INFO, c, ret;
	struct server srv;

	while ((c = getopt_long(argc, argv, "l:a:b:m:t:fL:hV", opts, NULL)) !=
	       -1) {
		switch (c) {
		case 'l':
			if (cfg.nr_listen == SERVER_MAX_LISTEN) {
				fprintf(stderr, "djinnd: at most %d --listen\n",
					SERVER_MAX_LISTEN);
				return 2;
			}
			cfg.listen[cfg.nr_listen++] = optarg;
			break;
		case 'a':
			cfg.admin_socket = optarg;
			break;
		case 'b':
			cfg.backend = optarg;
			break;
		case 'm':
			cfg.cpu_mem = parse_size(optarg);
			if (!cfg.cpu_mem) {
				fprintf(stderr, "djinnd: bad size '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			cfg.threads = (unsigned int)atoi(optarg);
			break;
		case 1:
			cfg.lease_default_ns =
				strtoull(optarg, NULL, 10) * 1000000ull;
			if (!cfg.lease_default_ns) {
				fprintf(stderr, "djinnd: bad lease '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'f':
			foreground = true;
			break;
		case 'L':
			level = log_parse_level(optarg);
			if (level < 0) {
				fprintf(stderr, "djinnd: bad log level '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 2:
			log_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("djinnd %s (protocol %d)\n", DJINND_VERSION,
			       DJINN_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (!cfg.nr_listen) {
		snprintf(def_listen, sizeof(def_listen), "unix:%s/djinnd.sock",
			 run_dir());
		cfg.listen[cfg.nr_listen++] = def_listen;
	}
	if (!cfg.admin_socket) {
		snprintf(def_admin, sizeof(def_admin), "%s/admin.sock",
			 run_dir());
		cfg.admin_socket = def_admin;
	}
	if (!foreground && !log_file)
		log_file = "djinnd.log";
	ret = log_init(level, log_file);
	if (ret) {
		fprintf(stderr, "djinnd: log %s: %s\n", log_file,
			strerror(-ret));
		return 1;
	}
	if (!foreground && daemonize()) {
		log_err("cannot daemonize: %s", strerror(errno));
		return 1;
	}
	log_info("djinnd %s starting", DJINND_VERSION);
	raise_nofile(&cfg);
	ret = server_block_signals();
	if (!ret)
		ret = server_init(&srv, &cfg);
	if (!ret)
		ret = server_run(&srv);
	server_exit(&srv);
	if (ret) {
		log_err("exiting: %s", strerror(-ret));
		return 1;
	}
	return 0;
}
