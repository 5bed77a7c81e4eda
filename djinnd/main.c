// SPDX-License-Identifier: MIT
/*
 * djinnd: the Djinn daemon. Start-up, configuration, the service
 * manager's notifications and the main loop; see djinnd(8),
 * djinnd.conf(5) and Documentation/.
 *
 * The configuration is built in three layers, each over the last: the
 * defaults, the file (--config PATH, else /etc/djinn/djinnd.conf when it
 * exists) and the command line. Every flag names a key of the file, so
 * both fill one struct through config_set() (config/). SIGHUP builds it
 * again the same way and applies what may change at run time.
 *
 * A relative path on the command line (--config, --model-dir,
 * --listen unix:PATH, ...) is taken against the directory djinnd started
 * in; the file's paths keep the file's rules (djinnd.conf(5)).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "daemon.h"
#include "server.h"
#include "net/fdstore.h"
#include "net/restart.h"
#include "net/tls.h"
#include "net/tokens.h"

#define DJINND_VERSION "0.1"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: djinnd [OPTIONS]\n"
		"  -c, --config PATH        the configuration file (default\n"
		"                           " DJINND_CONFIG_PATH
		" when it exists)\n"
		"      --check-config       check the configuration, print the\n"
		"                           effective settings and exit\n"
		"  -o, --set SECTION.KEY=VALUE  any key of djinnd.conf(5)\n"
		"  -l, --listen ADDR        unix:PATH, tcp:HOST:PORT or tls:HOST:PORT\n"
		"                           (repeatable; TCP binds loopback unless\n"
		"                           HOST says otherwise; tls: needs [tls])\n"
		"  -a, --admin-socket PATH  the admin socket for djinnctl\n"
		"  -b, --backend NAME       cpu (default), cuda, or auto (cuda if\n"
		"                           there is a GPU, else cpu)\n"
		"  -d, --device N           a device to drive (repeatable): GPU N;\n"
		"                           with the cpu backend, a CPU device\n"
		"                           each (default: every GPU, or one CPU)\n"
		"  -m, --cpu-mem SIZE       each CPU device's memory (default 2G)\n"
		"      --gpu-mem SIZE       each GPU's memory for sessions at most\n"
		"                           (default: what it has free)\n"
		"  -t, --threads N          kernel threads (default: one per CPU)\n"
		"      --compute-threads N  graphs a device runs at once, a stream\n"
		"                           each (default: 8 on a GPU, 1 on the\n"
		"                           cpu, which runs one at a time)\n"
		"      --lease-ms MS        default lease period (default 10000)\n"
		"      --leases PROVIDER    auto (default: djinn.ko when /dev/djinn\n"
		"                           is there), kmod or user\n"
		"      --metrics ADDR       tcp:HOST:PORT for the metrics endpoint\n"
		"      --model-dir DIR      models by name (default\n"
		"                           /var/lib/djinn/models)\n"
		"      --sched-policy NAME  memory policy: semantic (default),\n"
		"                           lru or static\n"
		"  -f, --foreground         stay in the foreground (default when\n"
		"                           stderr is a terminal or under systemd)\n"
		"  -L, --log-level LEVEL    err, warning, notice, info (default), debug\n"
		"      --log-file PATH      append the log there (SIGHUP reopens it)\n"
		"      --fault-injection    let admins fault the device\n"
		"                           (ADMIN_FAULT_INJECT): for tests only\n"
		"      --handover PATH      take the listening sockets, sessions\n"
		"                           and connections from the djinnd\n"
		"                           serving PATH, which exits once this\n"
		"                           one serves; serve PATH for the next\n"
		"                           one\n"
		"      --cpu-device-only    reach CPU devices' memory only through\n"
		"                           copies, as a GPU's: for tests only\n"
		"      --no-crash-journal   under an fd store, keep no journal of\n"
		"                           the state: a crash loses the sessions\n"
		"  -h, --help, -V, --version\n"
		"Flags override the file; their relative paths are taken against\n"
		"the current directory. Defaults: sockets in /run/djinn/ for root,\n"
		"in $XDG_RUNTIME_DIR/djinn/ for a user who has one, else in ./run/.\n");
}

enum {
	OPT_LEASE_MS = 256,
	OPT_LOG_FILE,
	OPT_CHECK,
	OPT_METRICS,
	OPT_MODEL_DIR,
	OPT_LEASES,
	OPT_FAULT_INJECTION,
	OPT_CPU_DEVICE_ONLY,
	OPT_SCHED_POLICY,
	OPT_GPU_MEM,
	OPT_COMPUTE_THREADS,
	OPT_HANDOVER,
	OPT_NO_CRASH_JOURNAL,
};

static const struct option opts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "check-config", no_argument, NULL, OPT_CHECK },
	{ "set", required_argument, NULL, 'o' },
	{ "listen", required_argument, NULL, 'l' },
	{ "admin-socket", required_argument, NULL, 'a' },
	{ "backend", required_argument, NULL, 'b' },
	{ "device", required_argument, NULL, 'd' },
	{ "cpu-mem", required_argument, NULL, 'm' },
	{ "gpu-mem", required_argument, NULL, OPT_GPU_MEM },
	{ "threads", required_argument, NULL, 't' },
	{ "compute-threads", required_argument, NULL, OPT_COMPUTE_THREADS },
	{ "lease-ms", required_argument, NULL, OPT_LEASE_MS },
	{ "leases", required_argument, NULL, OPT_LEASES },
	{ "metrics", required_argument, NULL, OPT_METRICS },
	{ "model-dir", required_argument, NULL, OPT_MODEL_DIR },
	{ "foreground", no_argument, NULL, 'f' },
	{ "log-level", required_argument, NULL, 'L' },
	{ "log-file", required_argument, NULL, OPT_LOG_FILE },
	{ "fault-injection", no_argument, NULL, OPT_FAULT_INJECTION },
	{ "no-crash-journal", no_argument, NULL, OPT_NO_CRASH_JOURNAL },
	{ "cpu-device-only", no_argument, NULL, OPT_CPU_DEVICE_ONLY },
	{ "handover", required_argument, NULL, OPT_HANDOVER },
	{ "sched-policy", required_argument, NULL, OPT_SCHED_POLICY },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ 0 },
};
static const char shortopts[] = "c:o:l:a:b:d:m:t:fL:hV";

/* What the command line says besides the configuration. */
struct args {
	int argc;
	char **argv;
	const char *config; /* --config, or NULL */
	char cwd[PATH_MAX]; /* where djinnd started; "" if unknown */
	char config_abs[PATH_MAX + 64]; /* --config against @cwd */
	bool check, foreground;
	/* --fault-injection: a flag, never a file key, so that no
	 * configuration left behind turns it on in production */
	bool fault_injection;
	/* --cpu-device-only: the same, for the GPU's data paths on a CPU */
	bool cpu_device_only;
	bool no_crash_journal; /* --no-crash-journal */
	/* --handover, against @cwd */
	const char *handover;
	char handover_abs[PATH_MAX + 64];
};

/* The key each flag sets. */
static const char *flag_key(int c)
{
	switch (c) {
	case 'l':
		return "server.listen";
	case 'a':
		return "server.admin_socket";
	case 'b':
		return "device.backend";
	case 'd':
		return "device.devices";
	case 'm':
		return "memory.budget";
	case OPT_GPU_MEM:
		return "memory.gpu_budget";
	case 't':
		return "device.threads";
	case OPT_COMPUTE_THREADS:
		return "device.compute_threads";
	case OPT_LEASE_MS:
		return "lease.default";
	case OPT_LEASES:
		return "lease.provider";
	case OPT_METRICS:
		return "metrics.listen";
	case OPT_MODEL_DIR:
		return "server.model_dir";
	case 'L':
		return "log.level";
	case OPT_LOG_FILE:
		return "log.file";
	case OPT_SCHED_POLICY:
		return "sched.policy";
	}
	return NULL;
}

/* Path @arg taken against where djinnd started, in @buf (@len bytes)
 * when it is relative: what to use. */
static const char *against_cwd(const struct args *a, const char *arg, char *buf,
			       size_t len)
{
	int n;

	if (arg[0] == '/' || !a->cwd[0])
		return arg;
	n = snprintf(buf, len, "%s/%s", a->cwd, arg);
	return n > 0 && (size_t)n < len ? buf : arg;
}

/* The first pass: flags that are not settings. 0, 1 to exit 0 (help,
 * version), or 2 on a usage error. */
static int parse_args(struct args *a)
{
	int c;

	optind = 0;
	while ((c = getopt_long(a->argc, a->argv, shortopts, opts, NULL)) !=
	       -1) {
		switch (c) {
		case 'c':
			a->config = against_cwd(a, optarg, a->config_abs,
						sizeof(a->config_abs));
			break;
		case OPT_CHECK:
			a->check = true;
			break;
		case 'f':
			a->foreground = true;
			break;
		case OPT_FAULT_INJECTION:
			a->fault_injection = true;
			break;
		case OPT_CPU_DEVICE_ONLY:
			a->cpu_device_only = true;
			break;
		case OPT_NO_CRASH_JOURNAL:
			a->no_crash_journal = true;
			break;
		case OPT_HANDOVER:
			a->handover = against_cwd(a, optarg, a->handover_abs,
						  sizeof(a->handover_abs));
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf("djinnd %s (protocol %d)\n", DJINND_VERSION,
			       DJINN_PROTO_VERSION);
			return 1;
		case '?':
			usage(stderr);
			return 2;
		}
	}
	if (optind < a->argc) {
		fprintf(stderr, "djinnd: unexpected argument '%s'\n",
			a->argv[optind]);
		usage(stderr);
		return 2;
	}
	return 0;
}

/* Defaults, the file, then the flags, into @c: 0 or -errno with c->err
 * set. */
static int config_build(struct djinnd_config *c, const struct args *a)
{
	const char *path = a->config;
	char buf[64], devs[256] = "";
	int opt, ret;

	config_init(c);
	c->flag_dir = a->cwd[0] ? a->cwd : NULL;
	if (!path && access(DJINND_CONFIG_PATH, F_OK) == 0)
		path = DJINND_CONFIG_PATH;
	if (path) {
		ret = config_load(c, path);
		if (ret)
			return ret;
	}
	optind = 0;
	while ((opt = getopt_long(a->argc, a->argv, shortopts, opts, NULL)) !=
	       -1) {
		const char *key = flag_key(opt), *val = optarg;
		char kbuf[128];

		if (opt == 'o') {
			const char *eq = strchr(optarg, '=');

			if (!eq || (size_t)(eq - optarg) >= sizeof(kbuf)) {
				snprintf(c->err, sizeof(c->err),
					 "command line: --set '%s': want "
					 "SECTION.KEY=VALUE",
					 optarg);
				return -EINVAL;
			}
			memcpy(kbuf, optarg, (size_t)(eq - optarg));
			kbuf[eq - optarg] = 0;
			key = kbuf;
			val = eq + 1;
		} else if (!key) {
			continue;
		} else if (opt == OPT_LEASE_MS) {
			snprintf(buf, sizeof(buf), "%sms", optarg);
			val = buf;
		} else if (opt == 'd') {
			/* repeatable: the devices so far, and this one */
			size_t at = devs[0] ? strlen(devs) : 0;

			snprintf(devs + at, sizeof(devs) - at, "%s%s",
				 at ? "," : "", optarg);
			val = devs;
		}
		ret = config_set(c, key, val);
		if (ret)
			return ret;
	}
	c->srv.fault_injection = a->fault_injection;
	c->srv.cpu_device_only = a->cpu_device_only;
	c->srv.no_crash_journal = a->no_crash_journal;
	c->srv.handover = a->handover;
	return config_validate(c);
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

/* ---------------------------------------------------------------------- */
/* The service manager: sd_notify(3). Each call is a no-op without
 * $NOTIFY_SOCKET. */

static struct args args;
static struct djinnd_config running;
static struct loop_timer watchdog;

static uint64_t watchdog_tick(struct loop_timer *t, uint64_t now)
{
	uint64_t usec = 0;

	sd_notify(0, "WATCHDOG=1");
	/* Twice per period, as sd_watchdog_enabled(3) advises. */
	if (sd_watchdog_enabled(0, &usec) <= 0 || !usec)
		return 0;
	return usec * 1000 / 2;
}

static unsigned long long monotonic_usec(void)
{
	return (unsigned long long)(mono_ns() / NSEC_PER_USEC);
}

/* SIGHUP, after the log file has been reopened: read the configuration
 * again and apply what may change at run time. */
static void on_reload(struct server *srv)
{
	struct djinnd_config next;
	unsigned int mask, nr_restart;
	int ret;

	/* systemd >= 253 wants MONOTONIC_USEC with RELOADING=1. */
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
		   monotonic_usec());
	ret = config_build(&next, &args);
	if (ret) {
		log_err("reload: %s: keeping the running configuration",
			next.err);
		sd_notifyf(0, "READY=1\nSTATUS=reload failed: %s", next.err);
		config_free(&next);
		return;
	}
	mask = config_diff(&running, &next, &nr_restart);
	config_apply(&running, &next, mask);
	config_free(&next);
	if (mask & CONFIG_RELOAD_LOG)
		log_set_level(running.log_level);
	if (mask & CONFIG_RELOAD_PRESSURE) {
		for (unsigned int i = 0; i < srv->nr_dev; i++) {
			ret = vmu_set_thresholds(srv->dev[i].vmu,
						 running.srv.warn_pct,
						 running.srv.crit_pct);
			if (ret)
				log_err("reload: %s: pressure thresholds: %s",
					srv->dev[i].name, strerror(-ret));
		}
	}
	if (mask & CONFIG_RELOAD_SCHED) {
		/* Weights of open sessions too; the policy stays. */
		srv->cfg.sched = running.srv.sched;
		memcpy(srv->cfg.shares, running.srv.shares,
		       sizeof(srv->cfg.shares));
		srv->cfg.nr_shares = running.srv.nr_shares;
		memcpy(srv->cfg.batches, running.srv.batches,
		       sizeof(srv->cfg.batches));
		srv->cfg.nr_batches = running.srv.nr_batches;
		for (unsigned int i = 0; i < srv->nr_dev; i++) {
			struct sched_config sc = server_sched_config(&srv->cfg);

			sched_configure(srv->dev[i].sched, &sc);
		}
	}
	if (mask & CONFIG_RELOAD_MODELS) {
		/* Budgets from each model's next load: a loaded one keeps
		 * its placement until it is evicted or reclaimed. */
		struct model_budget old[SERVER_TENANT_MAPS_MAX];
		unsigned int nr_old = srv->cfg.nr_budgets;

		memcpy(srv->cfg.readable, running.srv.readable,
		       sizeof(srv->cfg.readable));
		srv->cfg.nr_readable = running.srv.nr_readable;
		memcpy(old, srv->cfg.budgets, nr_old * sizeof(old[0]));
		memcpy(srv->cfg.budgets, running.srv.budgets,
		       sizeof(srv->cfg.budgets));
		srv->cfg.nr_budgets = running.srv.nr_budgets;
		server_model_budgets(srv, old, nr_old);
	}
	if (mask & CONFIG_RELOAD_TENANTS) {
		/* Connections accepted from now on: open ones keep who
		 * they are. Quotas apply at once: the memory ones to the
		 * next growth (what a tenant holds over a lowered quota
		 * stays until it lets go). */
		server_tenant_quotas(srv, false);
		memcpy(srv->cfg.tmaps, running.srv.tmaps,
		       running.srv.nr_tmaps * sizeof(running.srv.tmaps[0]));
		srv->cfg.nr_tmaps = running.srv.nr_tmaps;
		server_tenant_quotas(srv, true);
	}
	if (mask & CONFIG_RELOAD_LEASE) {
		/* Sessions opened from now on; open ones keep theirs. */
		srv->cfg.lease_default_ns = running.srv.lease_default_ns;
		srv->cfg.lease_min_ns = running.srv.lease_min_ns;
		srv->cfg.lease_max_ns = running.srv.lease_max_ns;
	}
	server_session_limits(srv);
	/* The tokens' file is read again on every reload: a token taken
	 * out is refused from now on (connections it opened stay). */
	tokens_reload(srv);
	log_notice("reload: %s%s; %u setting%s need%s a restart",
		   mask ? "applied" : "nothing to apply",
		   running.path ? "" : " (no file)", nr_restart,
		   nr_restart == 1 ? "" : "s", nr_restart == 1 ? "s" : "");
	sd_notify(0, "READY=1\nSTATUS=running");
}

/* The binary djinnd was started from, by path: the file found there
 * when a restart starts it again (a binary upgrade replaces it). */
static char self_exe[PATH_MAX];

/*
 * SIGUSR2 and ADMIN_RESTART: start this djinnd's successor, the binary
 * at @self_exe with djinnd's own command line in its directory, which
 * takes the state over --handover's socket (net/restart.h). Started
 * through an intermediate child that exits at once, so the successor
 * is no child of this djinnd (which exits first) and never a zombie of
 * it; its pid comes back through a pipe.
 */
static int on_restart(struct server *srv, pid_t *pid, char *msg, size_t msglen)
{
	pid_t mid, next = -1;
	int p[2], status;

	if (!srv->cfg.handover) {
		snprintf(msg, msglen,
			 "djinnd serves no --handover path: start it with "
			 "--handover PATH (under systemd, systemctl restart "
			 "djinnd keeps the sessions)");
		return -EOPNOTSUPP;
	}
	if (srv->restart || srv->draining || srv->dead_deadline) {
		snprintf(msg, msglen, "a %s is under way",
			 srv->restart || srv->dead_deadline ? "restart" :
							      "drain");
		return -EBUSY;
	}
	if (!self_exe[0]) {
		snprintf(msg, msglen, "djinnd's own binary is not known");
		return -ENOENT;
	}
	if (pipe2(p, O_CLOEXEC)) {
		snprintf(msg, msglen, "pipe: %s", strerror(errno));
		return -errno;
	}
	mid = fork();
	if (mid < 0) {
		int ret = -errno;

		close(p[0]);
		close(p[1]);
		snprintf(msg, msglen, "fork: %s", strerror(-ret));
		return ret;
	}
	if (!mid) {
		sigset_t none;

		next = fork();
		if (!next) {
			/* the successor: signals as a new process has them */
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			signal(SIGHUP, SIG_DFL);
			signal(SIGUSR2, SIG_DFL);
			signal(SIGPIPE, SIG_DFL);
			if (args.cwd[0] && chdir(args.cwd))
				_exit(127);
			execv(self_exe, args.argv);
			_exit(127);
		}
		if (write(p[1], &next, sizeof(next)) != sizeof(next))
			_exit(1);
		_exit(next < 0);
	}
	close(p[1]);
	if (read(p[0], &next, sizeof(next)) != sizeof(next))
		next = -1;
	close(p[0]);
	waitpid(mid, &status, 0);
	if (next < 0) {
		snprintf(msg, msglen, "the successor could not be started");
		return -ECHILD;
	}
	log_notice("restart: pid %d started from %s to take over", (int)next,
		   self_exe);
	*pid = next;
	return 0;
}

static void on_stopping(struct server *srv)
{
	if (srv->exit_status)
		sd_notifyf(0, "STOPPING=1\nSTATUS=%s: exiting for a restart",
			   srv->dead_msg);
	else
		sd_notify(0, "STOPPING=1\nSTATUS=draining");
}

int main(int argc, char **argv)
{
	struct server srv;
	bool foreground;
	int ret;

	args.argc = argc;
	args.argv = argv;
	{
		ssize_t n = readlink("/proc/self/exe", self_exe,
				     sizeof(self_exe) - 1);

		self_exe[n > 0 ? n : 0] = 0;
	}
	if (!getcwd(args.cwd, sizeof(args.cwd)))
		args.cwd[0] = 0;
	ret = parse_args(&args);
	if (ret)
		return ret == 1 ? 0 : 2;
	ret = config_build(&running, &args);
	if (ret) {
		fprintf(stderr, "djinnd: %s\n", running.err);
		config_free(&running);
		return args.check ? 1 : 2;
	}
	if (args.check) {
		config_print(&running, stdout);
		config_free(&running);
		return 0;
	}
	/* Under systemd (and anyone playing it), never fork: the service
	 * manager watches this process. */
	foreground = args.foreground || isatty(2) || getenv("INVOCATION_ID") ||
		     getenv("NOTIFY_SOCKET");
	if (!foreground && !running.log_file)
		running.log_file = "djinnd.log";
	ret = log_init(running.log_level, running.log_file);
	if (ret) {
		fprintf(stderr, "djinnd: log %s: %s\n", running.log_file,
			strerror(-ret));
		config_free(&running);
		return 1;
	}
	if (!foreground && daemonize()) {
		log_err("cannot daemonize: %s", strerror(errno));
		config_free(&running);
		return 1;
	}
	log_info("djinnd %s starting (configuration: %s)", DJINND_VERSION,
		 running.path ? running.path : "none");
	raise_nofile(&running.srv);
	ret = server_block_signals();
	if (!ret)
		ret = server_init(&srv, &running.srv);
	if (!ret) {
		uint64_t usec = 0;

		srv.hooks.reload = on_reload;
		srv.hooks.stopping = on_stopping;
		srv.hooks.restart = on_restart;
		if (sd_watchdog_enabled(0, &usec) > 0 && usec) {
			watchdog.fn = watchdog_tick;
			INIT_LIST_HEAD(&watchdog.node);
			loop_timer_add(&srv.loop, &watchdog, loop_now());
			log_info("watchdog: every %llu ms",
				 (unsigned long long)(usec / 2000));
		}
		/* serving: a predecessor (--handover) may drain now */
		if (fdstore_handover_finish())
			_exit(1);
		listeners_own(&srv);
		restart_serving(&srv); /* restored connections go on */
		restart_settled(&srv);
		sd_notifyf(0, "READY=1\nSTATUS=running\nMAINPID=%d",
			   (int)getpid());
		ret = server_run(&srv);
	}
	server_exit(&srv);
	config_free(&running);
	if (!ret && srv.exit_status) {
		/* a device died: systemd (Restart=on-failure) starts us
		 * again; devices_watch() has logged why */
		log_err("exiting with status %d: %s", srv.exit_status,
			srv.dead_msg);
		sd_notifyf(0, "STATUS=%s\nERRNO=%d", srv.dead_msg, EIO);
		return srv.exit_status;
	}
	if (ret) {
		log_err("exiting: %s", strerror(-ret));
		sd_notifyf(0, "STATUS=failed: %s\nERRNO=%d", strerror(-ret),
			   -ret);
		return 1;
	}
	return 0;
}
