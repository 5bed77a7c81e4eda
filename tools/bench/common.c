// SPDX-License-Identifier: MIT
/*
 * What djinn-bench's benchmarks share (common.h): the options and the
 * transports, the daemon it starts and stops, the run's deadline, the JSON
 * lines, latency histograms and raw sockets.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "common.h"

struct bench_opt opt = { .seconds = 2.0,
			 .warmup = 0.5,
			 .bulk_bytes = 256 * MiB };

struct xport xports[MAX_XPORTS];
unsigned int nr_xports;
char tmpdir[64];

volatile pid_t daemon_pid = -1, redis_pid = -1, child_pid = -1;

/* ------------------------------------------------------------------------ */
/* Helpers: time, errors, memory, the run's deadline */

/* What may be left in tmpdir, named before anything runs, so that a
 * signal handler can remove them. */
static const char *const tmp_names[] = {
	"djinnd.sock", "admin.sock",  "djinnd.log",  "echo.sock",
	"blast.sock",  "redis.sock",  "redis.log",   "tls-ca.pem",
	"tls-srv.pem", "tls-srv.key", "tls-cli.pem", "tls-cli.key"
};
static char tmp_paths[ARRAY_SIZE(tmp_names)][sizeof(tmpdir) + 16];

void make_tmpdir(void)
{
	strcpy(tmpdir, "/tmp/djinn-bench.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		tmpdir[0] = 0;
		fprintf(stderr, "djinn-bench: mkdtemp: %s\n", strerror(errno));
		exit(1);
	}
	for (unsigned int i = 0; i < ARRAY_SIZE(tmp_names); i++)
		snprintf(tmp_paths[i], sizeof(tmp_paths[i]), "%s/%s", tmpdir,
			 tmp_names[i]);
}

/* Async-signal-safe. */
static void cleanup_tmpdir(void)
{
	if (!tmpdir[0])
		return;
	for (unsigned int i = 0; i < ARRAY_SIZE(tmp_paths); i++)
		unlink(tmp_paths[i]);
	rmdir(tmpdir);
	tmpdir[0] = 0;
}

/* Stop @pid: SIGTERM, up to @wait_ms for it to go, then SIGKILL. Returns
 * its wait status, or -1. */
int stop_child(pid_t pid, int wait_ms)
{
	uint64_t deadline = mono_ns() + (uint64_t)wait_ms * NSEC_PER_MSEC;
	int status;

	if (pid <= 0)
		return -1;
	kill(pid, SIGTERM);
	while (mono_ns() < deadline) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return r == pid ? status : -1;
		sleep_ns(2 * NSEC_PER_MSEC);
	}
	kill(pid, SIGKILL);
	return waitpid(pid, &status, 0) == pid ? status : -1;
}

void cleanup(void)
{
	pid_t pid;

	pid = child_pid;
	child_pid = -1;
	if (pid > 0)
		stop_child(pid, 100);
	pid = redis_pid;
	redis_pid = -1;
	if (pid > 0)
		stop_child(pid, 2000);
	pid = daemon_pid;
	daemon_pid = -1;
	if (pid > 0)
		stop_child(pid, 5000);
	cleanup_tmpdir();
}

void info(const char *fmt, ...)
{
	va_list ap;

	if (!opt.verbose)
		return;
	fputs("djinn-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void check(int ret, const char *what)
{
	if (ret < 0)
		fail("%s: %s (%d)", what, strerror(-ret), ret);
}

void *xmalloc(size_t size)
{
	void *p = malloc(size);

	if (!p)
		fail("out of host memory (%zu bytes)", size);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		fail("out of host memory (%zu x %zu bytes)", n, size);
	return p;
}

/* @size bytes on transparent huge pages where the kernel has them, as
 * djinnd's device memory is: touched by the caller before timing. */
void *xmalloc_huge(size_t size)
{
	void *p;
	int ret = posix_memalign(&p, 2 * MiB, size);

	if (ret)
		fail("out of host memory (%zu bytes)", size);
	madvise(p, size, MADV_HUGEPAGE);
	return p;
}

/*
 * The whole run has a deadline (SIGALRM), and SIGINT or SIGTERM end it
 * too: the children are killed, the temporary directory removed.
 */
void on_signal(int sig)
{
	static const char msg[] = "djinn-bench: run deadline passed\n";
	pid_t pids[] = { child_pid, redis_pid, daemon_pid };

	for (unsigned int i = 0; i < ARRAY_SIZE(pids); i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
	cleanup_tmpdir();
	if (sig == SIGALRM && write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(sig == SIGALRM ? 1 : 128 + sig);
}

/* ------------------------------------------------------------------------ */
/* Latency histograms: log-linear, 128 steps per power of two (< 0.8%) */

unsigned int hist_index(uint64_t v)
{
	unsigned int shift;

	if (v < 2 * HIST_SUB)
		return (unsigned int)v;
	shift = (unsigned int)(63 - __builtin_clzll(v)) - HIST_SUB_BITS;
	return shift * HIST_SUB + (unsigned int)(v >> shift);
}

/* The middle of bucket @i. */
static double hist_value(unsigned int i)
{
	unsigned int shift;

	if (i < 2 * HIST_SUB)
		return i;
	shift = i / HIST_SUB - 1;
	return (double)((uint64_t)(i % HIST_SUB + HIST_SUB) << shift) +
	       (double)((uint64_t)1 << shift) / 2;
}

/* The @p quantile (0 to 1) of @h, which holds @n values. */
double hist_quantile(const uint64_t *h, uint64_t n, double p)
{
	uint64_t want = (uint64_t)ceil(p * (double)n), seen = 0;

	if (!n)
		return NAN;
	if (!want)
		want = 1;
	for (unsigned int i = 0; i < HIST_BUCKETS; i++) {
		seen += h[i];
		if (seen >= want)
			return hist_value(i);
	}
	return NAN;
}

void loop_res_set(struct loop_res *r, const uint64_t *hist, uint64_t n,
		  uint64_t t0, uint64_t t1)
{
	r->n = n;
	r->rate = (double)n / ((double)(t1 - t0) / 1e9);
	r->p50 = hist_quantile(hist, n, 0.50) / 1000;
	r->p99 = hist_quantile(hist, n, 0.99) / 1000;
}

void loop_res_median(struct loop_res *out, const struct loop_res *v,
		     unsigned int nr)
{
	double rate[16], p50[16], p99[16];

	out->n = 0;
	for (unsigned int i = 0; i < nr && i < 16; i++) {
		rate[i] = v[i].rate;
		p50[i] = v[i].p50;
		p99[i] = v[i].p99;
		out->n += v[i].n;
	}
	nr = nr < 16 ? nr : 16;
	out->rate = median(rate, nr);
	out->p50 = median(p50, nr);
	out->p99 = median(p99, nr);
}

/* ------------------------------------------------------------------------ */
/* Raw sockets */

int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t r = send(fd, p, len, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };

			poll(&pfd, 1, 1000);
			continue;
		}
		if (r < 0)
			return -errno;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* Read @len bytes into @buf, at most @chunk (0: any number) a call. */
int recv_all(int fd, void *buf, size_t len, size_t chunk)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r = recv(fd, p, chunk && chunk < len ? chunk : len, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (!r)
			return -ECONNRESET;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

void set_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Listen on @tmpdir/@name, or on 127.0.0.1 at a port the kernel picks. */
void raw_listen(struct raw_ep *ep, bool is_unix, const char *name)
{
	memset(ep, 0, sizeof(*ep));
	ep->is_unix = is_unix;
	if (is_unix) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ep->sa;

		un->sun_family = AF_UNIX;
		snprintf(un->sun_path, sizeof(un->sun_path), "%s/%s", tmpdir,
			 name);
		unlink(un->sun_path);
		ep->salen = sizeof(*un);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ep->sa;

		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ep->salen = sizeof(*in);
	}
	ep->lfd = socket(is_unix ? AF_UNIX : AF_INET,
			 SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ep->lfd < 0)
		fail("socket: %s", strerror(errno));
	if (bind(ep->lfd, (struct sockaddr *)&ep->sa, ep->salen) ||
	    listen(ep->lfd, 128))
		fail("listen (%s): %s", is_unix ? "unix" : "tcp",
		     strerror(errno));
	if (!is_unix &&
	    getsockname(ep->lfd, (struct sockaddr *)&ep->sa, &ep->salen))
		fail("getsockname: %s", strerror(errno));
}

void raw_close(struct raw_ep *ep)
{
	close(ep->lfd);
	if (ep->is_unix)
		unlink(((struct sockaddr_un *)&ep->sa)->sun_path);
}

int raw_dial(const struct raw_ep *ep)
{
	int fd = socket(ep->is_unix ? AF_UNIX : AF_INET,
			SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		fail("socket: %s", strerror(errno));
	if (connect(fd, (const struct sockaddr *)&ep->sa, ep->salen))
		fail("connect (raw %s): %s", ep->is_unix ? "unix" : "tcp",
		     strerror(errno));
	if (!ep->is_unix)
		set_nodelay(fd);
	return fd;
}

/* A plain socket to djinnd at @addr ("unix:PATH" or "tcp:HOST:PORT"). */
int dial_djinnd(const char *addr)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	char host[256], *port;
	int fd = -1, ret;

	if (!strncmp(addr, "unix:", 5)) {
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		socklen_t len = sizeof(un);

		snprintf(un.sun_path, sizeof(un.sun_path), "%s", addr + 5);
		if (un.sun_path[0] == '@') { /* the abstract namespace */
			un.sun_path[0] = 0;
			len = (socklen_t)(offsetof(struct sockaddr_un,
						   sun_path) +
					  strlen(addr + 5));
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&un, len))
			fail("connect %s: %s", addr, strerror(errno));
		return fd;
	}
	snprintf(host, sizeof(host), "%s", addr + 4);
	port = strrchr(host, ':');
	if (!port)
		fail("address %s has no port", addr);
	*port++ = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret)
		fail("%s: %s", addr, gai_strerror(ret));
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
			    a->ai_protocol);
		if (fd >= 0 && !connect(fd, a->ai_addr, a->ai_addrlen))
			break;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fail("connect %s: %s", addr, strerror(errno));
	set_nodelay(fd);
	return fd;
}

/* A TCP port free on 127.0.0.1 just now. */
unsigned int free_tcp_port(void)
{
	struct raw_ep ep;
	unsigned int port;

	raw_listen(&ep, false, NULL);
	port = ntohs(((struct sockaddr_in *)&ep.sa)->sin_port);
	close(ep.lfd);
	return port;
}

/* ------------------------------------------------------------------------ */
/* Children: the daemon, and what runs others */

/* Whether @prog is an executable file in $PATH. */
bool in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");

		snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, n ? path : ".",
			 prog);
		if (!access(buf, X_OK))
			return true;
		path += n;
		if (*path == ':')
			path++;
	}
	return false;
}

static const char *djinnd_binary(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("DJINND");
	char self[PATH_MAX];
	ssize_t n;

	if (opt.djinnd)
		return opt.djinnd;
	if (env && *env)
		return env;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return "build/djinnd/djinnd";
	self[n] = 0;
	/* BUILD/tools/djinn-bench -> BUILD/djinnd/djinnd */
	snprintf(path, sizeof(path), "%s/../djinnd/djinnd", dirname(self));
	return path;
}

/* Whether a daemon answers HELLO at @addr. */
bool djinn_answers(const char *addr)
{
	struct djinn_conn *conn;

	if (djinn_connect(addr, &conn))
		return false;
	djinn_disconnect(conn);
	return true;
}

/* Start djinnd on a unix socket in tmpdir and TCP at a free port. */
void daemon_start(void)
{
	daemon_start_tls(NULL);
}

/* A free port for TLS that is not @other. */
static unsigned int other_tcp_port(unsigned int other)
{
	unsigned int port;

	do
		port = free_tcp_port();
	while (port == other);
	return port;
}

/* ... and, given @tls, on tls: at another free port with its files. */
void daemon_start_tls(struct daemon_tls *tls)
{
	daemon_start_with(tls, NULL);
}

/* The last daemon_start_with()'s command line (its strings static). */
static char *daemon_args[40];

char *const *daemon_argv(void)
{
	return daemon_args;
}

void daemon_start_with(struct daemon_tls *tls, const char *const *extra)
{
	const char *bin = djinnd_binary();
	static char listen_unix[sizeof(tmpdir) + 32], listen_tcp[64],
		listen_tls[64];
	static char admin[sizeof(tmpdir) + 32];
	static char set_cert[PATH_MAX + 32], set_key[PATH_MAX + 32];
	static char set_ca[PATH_MAX + 32];
	char log[sizeof(tmpdir) + 32];
	char **argv = daemon_args;
	char *const start[] = {
		(char *)bin, "--foreground", "--listen",       listen_unix,
		"--listen",  listen_tcp,     "--admin-socket", admin,
		"--cpu-mem", "2G",	     "--log-level",    "notice",
	};
	unsigned int argc = 12;

	memset(daemon_args, 0, sizeof(daemon_args));
	memcpy(daemon_args, start, sizeof(start));

	if (access(bin, X_OK))
		fail("djinnd binary %s: %s (use --djinnd or $DJINND)", bin,
		     strerror(errno));
	snprintf(listen_unix, sizeof(listen_unix), "unix:%s/djinnd.sock",
		 tmpdir);
	snprintf(admin, sizeof(admin), "%s/admin.sock", tmpdir);
	snprintf(log, sizeof(log), "%s/djinnd.log", tmpdir);
	if (tls) {
		snprintf(set_cert, sizeof(set_cert), "tls.certificate=%s",
			 tls->cert);
		snprintf(set_key, sizeof(set_key), "tls.key=%s", tls->key);
		snprintf(set_ca, sizeof(set_ca), "tls.client_ca=%s",
			 tls->client_ca);
		argv[argc++] = "--listen";
		argv[argc++] = listen_tls;
		argv[argc++] = "--set";
		argv[argc++] = set_cert;
		argv[argc++] = "--set";
		argv[argc++] = set_key;
		argv[argc++] = "--set";
		argv[argc++] = set_ca;
	}
	for (; extra && *extra && argc < ARRAY_SIZE(daemon_args) - 1; extra++)
		argv[argc++] = (char *)*extra;

	/* The port may be taken between looking and binding: try again. */
	for (unsigned int attempt = 0; attempt < 3; attempt++) {
		unsigned int port = free_tcp_port();
		uint64_t deadline = mono_ns() + 20 * NSEC_PER_SEC;
		int status;

		snprintf(listen_tcp, sizeof(listen_tcp), "tcp:127.0.0.1:%u",
			 port);
		if (tls) {
			snprintf(listen_tls, sizeof(listen_tls),
				 "tls:127.0.0.1:%u", other_tcp_port(port));
			info("starting %s on %s, %s and %s", bin, listen_unix,
			     listen_tcp, listen_tls);
		} else {
			info("starting %s on %s and %s", bin, listen_unix,
			     listen_tcp);
		}
		daemon_pid = spawn(argv, log, NULL);
		while (mono_ns() < deadline) {
			if (waitpid(daemon_pid, &status, WNOHANG) ==
			    daemon_pid) {
				daemon_pid = -1;
				break;
			}
			/* djinnd opens all its listeners before it serves
			 * any, and exits when one will not open */
			if (djinn_answers(listen_unix) &&
			    djinn_answers(listen_tcp)) {
				xports[0].name = "unix";
				xports[0].is_unix = true;
				snprintf(xports[0].addr, sizeof(xports[0].addr),
					 "%s", listen_unix);
				xports[1].name = "tcp";
				snprintf(xports[1].addr, sizeof(xports[1].addr),
					 "%s", listen_tcp);
				nr_xports = 2;
				if (tls)
					snprintf(tls->addr, sizeof(tls->addr),
						 "%s", listen_tls);
				return;
			}
			sleep_ns(5 * NSEC_PER_MSEC);
		}
		if (daemon_pid > 0) {
			show_tail(log);
			fail("djinnd does not answer after 20 s");
		}
	}
	show_tail(log);
	fail("djinnd exited at start");
}

void daemon_stop(void)
{
	pid_t pid = daemon_pid;
	int status;

	if (pid <= 0)
		return;
	daemon_pid = -1;
	status = stop_child(pid, 10000);
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		char log[sizeof(tmpdir) + 32];

		snprintf(log, sizeof(log), "%s/djinnd.log", tmpdir);
		show_tail(log);
		fail("djinnd did not stop cleanly on SIGTERM (status %#x)",
		     status);
	}
}

/*
 * Run @argv to its end or for @timeout_ms, whichever is first, with its
 * output into @out[@len] (NUL-terminated). Returns its wait status, or -1
 * when it had to be killed.
 */
int run_capture(char *const argv[], int timeout_ms, char *out, size_t len)
{
	uint64_t deadline = mono_ns() + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	size_t have = 0;
	int fd, status;
	bool killed = false;

	child_pid = spawn(argv, NULL, &fd);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = mono_ns();
		ssize_t r;

		if (now >= deadline) {
			kill(child_pid, SIGKILL);
			killed = true;
			break;
		}
		if (poll(&pfd, 1,
			 (int)((deadline - now) / NSEC_PER_MSEC + 1)) <= 0)
			continue;
		if (have + 1 >= len) {
			/* keep the last half: the summary comes last */
			memmove(out, out + len / 2, have - len / 2);
			have -= len / 2;
		}
		r = read(fd, out + have, len - have - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	out[have] = 0;
	close(fd);
	waitpid(child_pid, &status, 0);
	child_pid = -1;
	return killed ? -1 : status;
}
