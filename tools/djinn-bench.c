// SPDX-License-Identifier: MIT
/*
 * djinn-bench: the network figures of TARGETS.md (design notes) for djinnd
 * and libdjinn, each beside a reference measured in the same run on the
 * same machine.
 *
 *   rtt   round trips/s and p50/p99 latency of a no-op request
 *         (djinn_conn_ping(): a 40-byte HEARTBEAT naming no session and
 *         its 40-byte answer) over the unix socket and TCP loopback, with
 *         1 and 50 connections: one thread per connection, one request in
 *         flight on each (a closed loop), for --seconds after a warm-up.
 *         Beside it, the same loop of 40 bytes each way against an echo
 *         server thread of this process (epoll, one thread for all the
 *         connections, as djinnd has one I/O thread) over the same
 *         transport; and, when redis-server and redis-benchmark are
 *         installed, `redis-benchmark -t ping` against a private
 *         redis-server, the better of its two PING kinds. A third loop
 *         sends the same HEARTBEAT frames to djinnd from a plain socket,
 *         as the raw loop sends its bytes, to tell djinnd's share of the
 *         time from libdjinn's (no target: a diagnostic). The four run in
 *         turn, three rounds; each figure is the median of its rounds.
 *   bulk  upload and download GB/s of a 256 MiB f32 tensor, median of 5
 *         after one warm-up, beside a raw blast of the same 256 MiB from
 *         one thread of this process to another over the same transport,
 *         median of 5.
 *   lazy  bytes received to read 1% of a 196 MiB result: a range with
 *         djinn_result_read(), and 1% of its pages, spread over it,
 *         touched through djinn_result_map(); beside the result's size.
 *         The result is an embedding gather (a 4 MiB table, 50176 ids),
 *         so that little has to be uploaded to make it.
 *   stall no-op round-trip latency (p99 and worst) on one connection
 *         while another uploads a 1 GiB tensor, beside the same latency
 *         with nothing else going on. The upload's memory is mapped and
 *         zeroed on djinnd's memory executor, not its I/O thread, so the
 *         pings wait for the bytes in between, never for the allocation
 *         (no target: it shows head-of-line blocking across clients).
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
 *                    [--djinnd PATH] [--verbose] [rtt|bulk|lazy|stall|all]
 * Exit status: 0 success, 1 a call failed, a daemon did not start or bytes
 * came back wrong, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "../bench/bench.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define __printf(a, b) __attribute__((format(printf, a, b)))

#define PING_LEN 40 /* a struct djinn_hdr: the request and the answer */
#define MAX_XPORTS 2
#define BULK_BYTES (256 * MiB)
#define BULK_REPS 5
#define BLAST_RECV (64 * KiB)
#define LAZY_V 1024 /* the table: V rows of C f32 */
#define LAZY_C 1024
#define LAZY_N 50176 /* ids: N x C x 4 bytes = 196 MiB of result */
#define PAGE 4096

static struct {
	double seconds;
	double warmup;
	bool verbose;
	const char *djinnd;
} opt = { .seconds = 2.0, .warmup = 0.5 };

/*
 * struct xport - one transport to benchmark
 * @name:    "unix" or "tcp"
 * @addr:    the daemon's address in libdjinn's form
 * @is_unix: which kind
 */
struct xport {
	const char *name;
	char addr[PATH_MAX + 8];
	bool is_unix;
};

static struct xport xports[MAX_XPORTS];
static unsigned int nr_xports;
static char tmpdir[64];

/* Children to stop whatever happens: the daemon and redis-server. */
static volatile pid_t daemon_pid = -1, redis_pid = -1, child_pid = -1;

/* ------------------------------------------------------------------------ */
/* Helpers: time, errors, memory, the run's deadline */

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* What may be left in tmpdir, named before anything runs, so that a
 * signal handler can remove them. */
static const char *const tmp_names[] = { "djinnd.sock", "admin.sock",
					 "djinnd.log",	"echo.sock",
					 "blast.sock",	"redis.sock",
					 "redis.log" };
static char tmp_paths[ARRAY_SIZE(tmp_names)][sizeof(tmpdir) + 16];

static void make_tmpdir(void)
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
static int stop_child(pid_t pid, int wait_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)wait_ms * 1000000ull;
	int status;

	if (pid <= 0)
		return -1;
	kill(pid, SIGTERM);
	while (now_ns() < deadline) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return r == pid ? status : -1;
		sleep_ns(2000000);
	}
	kill(pid, SIGKILL);
	return waitpid(pid, &status, 0) == pid ? status : -1;
}

static void cleanup(void)
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

static __printf(1, 2) void info(const char *fmt, ...)
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

static void check(int ret, const char *what)
{
	if (ret < 0)
		fail("%s: %s (%d)", what, strerror(-ret), ret);
}

static void *xmalloc(size_t size)
{
	void *p = malloc(size);

	if (!p)
		fail("out of host memory (%zu bytes)", size);
	return p;
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		fail("out of host memory (%zu x %zu bytes)", n, size);
	return p;
}

/* @size bytes on transparent huge pages where the kernel has them, as
 * djinnd's device memory is: touched by the caller before timing. */
static void *xmalloc_huge(size_t size)
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
static void on_signal(int sig)
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
/* Output */

enum target_kind { T_NONE, T_GE, T_LE };

/*
 * struct fig - one figure
 * @metric:        what was measured
 * @value:         the figure
 * @unit:          its unit
 * @baseline:      the reference measured beside it; NAN for none (null)
 * @baseline_name: what the reference is
 * @kind, @thr:    the target from TARGETS.md on the ratio, if any
 * @samples:       how many measurements it is over (0: leave out)
 * @note:          why there is no baseline, or NULL
 */
struct fig {
	const char *metric;
	double value;
	const char *unit;
	double baseline;
	const char *baseline_name;
	enum target_kind kind;
	double thr;
	uint64_t samples;
	const char *note;
};

static void emit(const char *bench, const struct fig *f)
{
	char val[32], base[32], ratio[32];
	double r = NAN;

	if (isfinite(f->baseline) && f->baseline != 0)
		r = f->value / f->baseline;
	fmt_num(val, sizeof(val), f->value);
	fmt_num(base, sizeof(base), f->baseline);
	fmt_num(ratio, sizeof(ratio), r);
	printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %s, "
	       "\"unit\": \"%s\", \"baseline\": %s, \"ratio\": %s",
	       bench, f->metric, val, f->unit, base, ratio);
	if (f->baseline_name)
		printf(", \"baseline_name\": \"%s\"", f->baseline_name);
	if (f->kind != T_NONE) {
		printf(", \"target\": \"ratio %s %g\"",
		       f->kind == T_GE ? ">=" : "<=", f->thr);
		if (isfinite(r))
			printf(", \"met\": %s",
			       (f->kind == T_GE ? r >= f->thr : r <= f->thr) ?
				       "true" :
				       "false");
		else
			printf(", \"met\": null");
	}
	if (f->samples)
		printf(", \"samples\": %" PRIu64, f->samples);
	if (f->note)
		printf(", \"note\": \"%s\"", f->note);
	printf("}\n");
	fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* Latency histograms: log-linear, 128 steps per power of two (< 0.8%) */

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS) * HIST_SUB + HIST_SUB)

static unsigned int hist_index(uint64_t v)
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
static double hist_quantile(const uint64_t *h, uint64_t n, double p)
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

/* ------------------------------------------------------------------------ */
/* Raw sockets */

static int send_all(int fd, const void *buf, size_t len)
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
static int recv_all(int fd, void *buf, size_t len, size_t chunk)
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

static void set_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * struct raw_ep - a listening socket of this process
 * @lfd:     the listener
 * @sa:      where to connect to it
 * @is_unix: a unix socket (else TCP on 127.0.0.1)
 */
struct raw_ep {
	int lfd;
	struct sockaddr_storage sa;
	socklen_t salen;
	bool is_unix;
};

/* Listen on @tmpdir/@name, or on 127.0.0.1 at a port the kernel picks. */
static void raw_listen(struct raw_ep *ep, bool is_unix, const char *name)
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

static void raw_close(struct raw_ep *ep)
{
	close(ep->lfd);
	if (ep->is_unix)
		unlink(((struct sockaddr_un *)&ep->sa)->sun_path);
}

static int raw_dial(const struct raw_ep *ep)
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
static int dial_djinnd(const char *addr)
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
static unsigned int free_tcp_port(void)
{
	struct raw_ep ep;
	unsigned int port;

	raw_listen(&ep, false, NULL);
	port = ntohs(((struct sockaddr_in *)&ep.sa)->sin_port);
	close(ep.lfd);
	return port;
}

/*
 * The echo server: one thread, epoll, every connection nonblocking. It
 * reads PING_LEN bytes from a connection and sends them back, as many
 * times as they come.
 */
struct echo_conn {
	int fd;
	unsigned int have;
	uint8_t buf[PING_LEN];
};

struct echo {
	struct raw_ep ep;
	int epfd;
	int stopfd;
	pthread_t thread;
	struct echo_conn **conns;
	unsigned int nr_conns;
};

#define ECHO_LISTENER 0ull
#define ECHO_STOP 1ull

static void echo_accept(struct echo *e)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct echo_conn *c, **conns;
	int fd;

	fd = accept4(e->ep.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (!e->ep.is_unix)
		set_nodelay(fd);
	c = xcalloc(1, sizeof(*c));
	conns = realloc(e->conns, (e->nr_conns + 1) * sizeof(*conns));
	if (!conns)
		fail("out of host memory (echo connections)");
	e->conns = conns;
	e->conns[e->nr_conns++] = c;
	c->fd = fd;
	ev.data.ptr = c;
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev))
		fail("epoll_ctl: %s", strerror(errno));
}

static void echo_serve(struct echo *e, struct echo_conn *c)
{
	ssize_t r;

	if (c->fd < 0)
		return;
	r = recv(c->fd, c->buf + c->have, PING_LEN - c->have, 0);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		epoll_ctl(e->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
		return;
	}
	c->have += (unsigned int)r;
	if (c->have < PING_LEN)
		return;
	c->have = 0;
	if (send_all(c->fd, c->buf, PING_LEN)) {
		epoll_ctl(e->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
}

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	struct epoll_event evs[64];

	for (;;) {
		int n = epoll_wait(e->epfd, evs, ARRAY_SIZE(evs), -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			fail("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 == ECHO_STOP)
				return NULL;
			if (evs[i].data.u64 == ECHO_LISTENER)
				echo_accept(e);
			else
				echo_serve(e, evs[i].data.ptr);
		}
	}
}

static void echo_start(struct echo *e, bool is_unix)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ret;

	memset(e, 0, sizeof(*e));
	raw_listen(&e->ep, is_unix, "echo.sock");
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	e->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->epfd < 0 || e->stopfd < 0)
		fail("epoll/eventfd: %s", strerror(errno));
	ev.data.u64 = ECHO_LISTENER;
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->ep.lfd, &ev))
		fail("epoll_ctl: %s", strerror(errno));
	ev.data.u64 = ECHO_STOP;
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->stopfd, &ev))
		fail("epoll_ctl: %s", strerror(errno));
	ret = pthread_create(&e->thread, NULL, echo_thread, e);
	if (ret)
		fail("pthread_create: %s", strerror(ret));
}

static void echo_stop(struct echo *e)
{
	uint64_t one = 1;

	if (write(e->stopfd, &one, sizeof(one)) != sizeof(one))
		fail("eventfd write: %s", strerror(errno));
	pthread_join(e->thread, NULL);
	for (unsigned int i = 0; i < e->nr_conns; i++) {
		if (e->conns[i]->fd >= 0)
			close(e->conns[i]->fd);
		free(e->conns[i]);
	}
	free(e->conns);
	close(e->epfd);
	close(e->stopfd);
	raw_close(&e->ep);
}

/* ------------------------------------------------------------------------ */
/* Children: the daemon, redis-server, redis-benchmark */

/* Whether @prog is an executable file in $PATH. */
static bool in_path(const char *prog)
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
static bool djinn_answers(const char *addr)
{
	struct djinn_conn *conn;

	if (djinn_connect(addr, &conn))
		return false;
	djinn_disconnect(conn);
	return true;
}

/* Start djinnd on a unix socket in tmpdir and TCP at a free port. */
static void daemon_start(void)
{
	const char *bin = djinnd_binary();
	char listen_unix[sizeof(tmpdir) + 32], listen_tcp[64];
	char admin[sizeof(tmpdir) + 32], log[sizeof(tmpdir) + 32];
	char *argv[] = {
		(char *)bin, "--foreground", "--listen",       listen_unix,
		"--listen",  listen_tcp,     "--admin-socket", admin,
		"--cpu-mem", "2G",	     "--log-level",    "notice",
		NULL
	};

	if (access(bin, X_OK))
		fail("djinnd binary %s: %s (use --djinnd or $DJINND)", bin,
		     strerror(errno));
	snprintf(listen_unix, sizeof(listen_unix), "unix:%s/djinnd.sock",
		 tmpdir);
	snprintf(admin, sizeof(admin), "%s/admin.sock", tmpdir);
	snprintf(log, sizeof(log), "%s/djinnd.log", tmpdir);

	/* The port may be taken between looking and binding: try again. */
	for (unsigned int attempt = 0; attempt < 3; attempt++) {
		unsigned int port = free_tcp_port();
		uint64_t deadline = now_ns() + 20000000000ull;
		int status;

		snprintf(listen_tcp, sizeof(listen_tcp), "tcp:127.0.0.1:%u",
			 port);
		info("starting %s on %s and %s", bin, listen_unix, listen_tcp);
		daemon_pid = spawn(argv, log, NULL);
		while (now_ns() < deadline) {
			if (waitpid(daemon_pid, &status, WNOHANG) ==
			    daemon_pid) {
				daemon_pid = -1;
				break;
			}
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
				return;
			}
			sleep_ns(5000000);
		}
		if (daemon_pid > 0) {
			show_tail(log);
			fail("djinnd does not answer after 20 s");
		}
	}
	show_tail(log);
	fail("djinnd exited at start");
}

static void daemon_stop(void)
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
static int run_capture(char *const argv[], int timeout_ms, char *out,
		       size_t len)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	size_t have = 0;
	int fd, status;
	bool killed = false;

	child_pid = spawn(argv, NULL, &fd);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = now_ns();
		ssize_t r;

		if (now >= deadline) {
			kill(child_pid, SIGKILL);
			killed = true;
			break;
		}
		if (poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
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

/*
 * struct redis - a private redis-server
 * @port: its TCP port on 127.0.0.1
 * @sock: its unix socket
 */
struct redis {
	unsigned int port;
	char sock[sizeof(tmpdir) + 32];
};

static bool redis_installed(void)
{
	return in_path("redis-server") && in_path("redis-benchmark");
}

/* Connect to redis-server at @r and PING it: whether it answered. */
static bool redis_answers(const struct redis *r)
{
	struct sockaddr_in in = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)r->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 0, 200000 };
	char buf[16];
	bool ok = false;
	int fd;

	if (access(r->sock, F_OK))
		return false;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!connect(fd, (struct sockaddr *)&in, sizeof(in)) &&
	    !send_all(fd, "PING\r\n", 6) && recv(fd, buf, 5, MSG_WAITALL) == 5)
		ok = !memcmp(buf, "+PONG", 5);
	close(fd);
	return ok;
}

/* Start redis-server without persistence: 0, or -1 if it would not. */
static int redis_start(struct redis *r)
{
	char port[16], log[sizeof(tmpdir) + 32];
	char *argv[] = {
		"redis-server", "--port",	port,	 "--bind",
		"127.0.0.1",	"--unixsocket", r->sock, "--unixsocketperm",
		"700",		"--save",	"",	 "--appendonly",
		"no",		"--daemonize",	"no",	 "--protected-mode",
		"no",		"--dir",	tmpdir,	 NULL
	};

	snprintf(log, sizeof(log), "%s/redis.log", tmpdir);
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", tmpdir);
	for (unsigned int attempt = 0; attempt < 3; attempt++) {
		uint64_t deadline = now_ns() + 5000000000ull;
		int status;

		r->port = free_tcp_port();
		snprintf(port, sizeof(port), "%u", r->port);
		redis_pid = spawn(argv, log, NULL);
		while (now_ns() < deadline) {
			if (waitpid(redis_pid, &status, WNOHANG) == redis_pid) {
				redis_pid = -1;
				break;
			}
			if (redis_answers(r))
				return 0;
			sleep_ns(10000000);
		}
		if (redis_pid > 0)
			break;
	}
	show_tail(log);
	if (redis_pid > 0)
		stop_child(redis_pid, 1000);
	redis_pid = -1;
	return -1;
}

static void redis_stop(void)
{
	pid_t pid = redis_pid;

	redis_pid = -1;
	stop_child(pid, 2000);
}

/*
 * Run redis-benchmark -t ping with @conns connections and @n requests
 * against @r over @xp's transport: the better requests/s of PING_INLINE
 * and PING_MBULK, or NAN.
 */
static double redis_bench(const struct redis *r, const struct xport *xp,
			  unsigned int conns, uint64_t n)
{
	char port[16], c[16], nreq[24], out[4096];
	char *argv[] = { "redis-benchmark",
			 xp->is_unix ? "-s" : "-p",
			 xp->is_unix ? (char *)r->sock : port,
			 "-t",
			 "ping",
			 "-c",
			 c,
			 "-n",
			 nreq,
			 "--csv",
			 NULL };
	double best = NAN;
	int status, timeout_ms;
	char *line;

	snprintf(port, sizeof(port), "%u", r->port);
	snprintf(c, sizeof(c), "%u", conns);
	snprintf(nreq, sizeof(nreq), "%" PRIu64, n);
	/* it was sized to take about --seconds per kind: allow far more */
	timeout_ms = (int)(opt.seconds * 20000) + 10000;
	status = run_capture(argv, timeout_ms, out, sizeof(out));
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr,
			"djinn-bench: redis-benchmark failed (status %#x):\n%s\n",
			status, out);
		return NAN;
	}
	/* "PING_INLINE","119545.73","0.270",... */
	for (line = strtok(out, "\r\n"); line; line = strtok(NULL, "\r\n")) {
		double rps;

		if (strncmp(line, "\"PING_", 6))
			continue;
		line = strchr(line, ',');
		if (!line || sscanf(line, ",\"%lf\"", &rps) != 1)
			continue;
		if (!isfinite(best) || rps > best)
			best = rps;
	}
	return best;
}

/* ------------------------------------------------------------------------ */
/* rtt */

enum { PH_WARMUP, PH_MEASURE, PH_STOP };

/*
 * What a closed loop measures:
 * @L_RAW:    40 bytes each way to the echo server: the reference
 * @L_DJINN:  djinn_conn_ping() through libdjinn
 * @L_FRAMES: the same HEARTBEAT frame to djinnd from a plain socket, as
 *            L_RAW sends its bytes: djinnd's share without libdjinn's
 */
enum loop_kind { L_RAW, L_DJINN, L_FRAMES };

static const char *const loop_name[] = { "raw", "djinn", "frames" };

struct rtt_run;

/*
 * struct worker - one connection and the thread that drives it
 * @fd:   the raw ping-pong's socket
 * @conn: djinn's connection
 * @ops:  round trips in the measured phase
 * @err:  why it stopped early, or 0
 * @hist: their latencies, ns
 */
struct worker {
	pthread_t thread;
	struct rtt_run *run;
	int fd;
	struct djinn_conn *conn;
	uint64_t ops;
	uint64_t ops_sent;
	int err;
	uint64_t *hist;
};

struct rtt_run {
	atomic_int phase;
	pthread_barrier_t start;
	enum loop_kind kind;
	struct worker *w;
	unsigned int nr;
};

/*
 * struct rtt_result - what one closed loop measured
 * @rps:      round trips per second, all connections together
 * @p50, @p99: latency, microseconds
 * @ops:      round trips measured
 */
struct rtt_result {
	double rps, p50, p99;
	uint64_t ops;
};

static int raw_ping(struct worker *w)
{
	uint8_t buf[PING_LEN] = { 'D', 'J', 'N', '1' };
	int ret = send_all(w->fd, buf, sizeof(buf));

	return ret ? ret : recv_all(w->fd, buf, sizeof(buf), 0);
}

/* A HEARTBEAT naming no session, as djinn_conn_ping() sends it. */
static int frame_ping(struct worker *w)
{
	struct djinn_hdr h = { .magic = DJINN_MAGIC,
			       .version = DJINN_PROTO_VERSION,
			       .opcode = DJINN_OP_HEARTBEAT,
			       .request_id = ++w->ops_sent };
	int ret = send_all(w->fd, &h, sizeof(h));

	if (!ret)
		ret = recv_all(w->fd, &h, sizeof(h), 0);
	if (!ret && (h.magic != DJINN_MAGIC || h.flags != DJINN_F_RESPONSE ||
		     h.opcode != DJINN_OP_HEARTBEAT || h.payload_len ||
		     h.request_id != w->ops_sent))
		ret = -EPROTO;
	return ret;
}

static void *worker_thread(void *arg)
{
	struct worker *w = arg;
	struct rtt_run *run = w->run;
	int ph;

	pthread_barrier_wait(&run->start);
	while ((ph = atomic_load_explicit(&run->phase, memory_order_relaxed)) !=
	       PH_STOP) {
		uint64_t t0 = now_ns();
		int ret = run->kind == L_DJINN ? djinn_conn_ping(w->conn) :
			  run->kind == L_RAW   ? raw_ping(w) :
						 frame_ping(w);

		if (ret) {
			w->err = ret;
			break;
		}
		if (ph == PH_MEASURE) {
			w->hist[hist_index(now_ns() - t0)]++;
			w->ops++;
		}
	}
	return NULL;
}

/* A closed loop of @kind over @conns connections: to @xp's daemon, or
 * raw to an echo server of the same transport. */
static void rtt_loop(const struct xport *xp, unsigned int conns,
		     enum loop_kind kind, struct rtt_result *res)
{
	bool raw = kind == L_RAW;
	struct rtt_run run = { .kind = kind, .nr = conns };
	uint64_t *hist = xcalloc(HIST_BUCKETS, sizeof(*hist));
	uint64_t t0, t1;
	struct echo e;
	int ret;

	if (raw)
		echo_start(&e, xp->is_unix);
	atomic_init(&run.phase, PH_WARMUP);
	run.w = xcalloc(conns, sizeof(*run.w));
	for (unsigned int i = 0; i < conns; i++) {
		struct worker *w = &run.w[i];

		w->run = &run;
		w->hist = xcalloc(HIST_BUCKETS, sizeof(*w->hist));
		if (raw)
			w->fd = raw_dial(&e.ep);
		else if (kind == L_FRAMES)
			w->fd = dial_djinnd(xp->addr);
		else
			check(djinn_connect(xp->addr, &w->conn),
			      "djinn_connect");
	}
	pthread_barrier_init(&run.start, NULL, conns + 1);
	for (unsigned int i = 0; i < conns; i++) {
		ret = pthread_create(&run.w[i].thread, NULL, worker_thread,
				     &run.w[i]);
		if (ret)
			fail("pthread_create: %s", strerror(ret));
	}
	pthread_barrier_wait(&run.start);
	sleep_ns((uint64_t)(opt.warmup * 1e9));
	t0 = now_ns();
	atomic_store(&run.phase, PH_MEASURE);
	sleep_ns((uint64_t)(opt.seconds * 1e9));
	atomic_store(&run.phase, PH_STOP);
	t1 = now_ns();

	memset(res, 0, sizeof(*res));
	for (unsigned int i = 0; i < conns; i++) {
		struct worker *w = &run.w[i];

		pthread_join(w->thread, NULL);
		if (w->err)
			fail("%s ping over %s, connection %u: %s",
			     loop_name[kind], xp->name, i, strerror(-w->err));
		for (unsigned int b = 0; b < HIST_BUCKETS; b++)
			hist[b] += w->hist[b];
		res->ops += w->ops;
		if (kind == L_DJINN)
			djinn_disconnect(w->conn);
		else
			close(w->fd);
		free(w->hist);
	}
	pthread_barrier_destroy(&run.start);
	free(run.w);
	if (raw)
		echo_stop(&e);

	res->rps = (double)res->ops / ((double)(t1 - t0) / 1e9);
	res->p50 = hist_quantile(hist, res->ops, 0.50) / 1000;
	res->p99 = hist_quantile(hist, res->ops, 0.99) / 1000;
	free(hist);
	info("rtt %s %s c=%u: %.0f req/s, p50 %.1f us, p99 %.1f us",
	     loop_name[kind], xp->name, conns, res->rps, res->p50, res->p99);
}

/* One figure of the rtt benchmark: @what of @xp at @conns connections. */
static void emit_rtt(const struct xport *xp, unsigned int conns,
		     const char *what, double value, const char *unit,
		     double base, const char *base_name, enum target_kind kind,
		     double thr, uint64_t samples, const char *note)
{
	char m[64];

	snprintf(m, sizeof(m), "%s_c%u_%s", xp->name, conns, what);
	emit("djinn_rtt", &(struct fig){ .metric = m,
					 .value = value,
					 .unit = unit,
					 .baseline = base,
					 .baseline_name = base_name,
					 .kind = kind,
					 .thr = thr,
					 .samples = samples,
					 .note = note });
}

#define RTT_ROUNDS 3

static void rtt_median(struct rtt_result *out, const struct rtt_result *v)
{
	double rps[RTT_ROUNDS], p50[RTT_ROUNDS], p99[RTT_ROUNDS];

	out->ops = 0;
	for (unsigned int i = 0; i < RTT_ROUNDS; i++) {
		rps[i] = v[i].rps;
		p50[i] = v[i].p50;
		p99[i] = v[i].p99;
		out->ops += v[i].ops;
	}
	out->rps = median(rps, RTT_ROUNDS);
	out->p50 = median(p50, RTT_ROUNDS);
	out->p99 = median(p99, RTT_ROUNDS);
}

/* RTT_ROUNDS rounds of raw, djinn, frames and redis (when @r), in turn;
 * the medians of each. */
static void rtt_rounds(const struct xport *xp, unsigned int c,
		       const struct redis *r, struct rtt_result *raw,
		       struct rtt_result *dj, struct rtt_result *fr,
		       double *redis)
{
	struct rtt_result vraw[RTT_ROUNDS], vdj[RTT_ROUNDS], vfr[RTT_ROUNDS];
	double vredis[RTT_ROUNDS];

	for (unsigned int i = 0; i < RTT_ROUNDS; i++) {
		rtt_loop(xp, c, L_RAW, &vraw[i]);
		rtt_loop(xp, c, L_DJINN, &vdj[i]);
		rtt_loop(xp, c, L_FRAMES, &vfr[i]);
		vredis[i] = NAN;
		if (r) {
			/* as many PINGs as djinn did: about as long */
			uint64_t n = (uint64_t)(vdj[i].rps * opt.seconds);

			n = n < 2000 ? 2000 : n > 5000000 ? 5000000 : n;
			vredis[i] = redis_bench(r, xp, c, n);
			info("rtt redis %s c=%u: %.0f req/s", xp->name, c,
			     vredis[i]);
		}
	}
	rtt_median(raw, vraw);
	rtt_median(dj, vdj);
	rtt_median(fr, vfr);
	*redis = median(vredis, RTT_ROUNDS);
}

static void bench_rtt(void)
{
	static const unsigned int conns[] = { 1, 50 };
	static const char raw_name[] = "raw_pingpong";
	static const char redis_name[] = "redis-benchmark -t ping";
	static const char frames_note[] =
		"djinnd answering HEARTBEAT frames from a plain socket "
		"client, without libdjinn: djinnd's share";
	const char *redis_note = NULL;
	bool have_redis = redis_installed();
	struct redis r = { 0 };

	if (!have_redis) {
		redis_note = "redis-server or redis-benchmark not installed";
	} else if (redis_start(&r)) {
		redis_note = "redis-server did not start";
		have_redis = false;
	}
	for (unsigned int x = 0; x < nr_xports; x++) {
		const struct xport *xp = &xports[x];

		for (unsigned int k = 0; k < ARRAY_SIZE(conns); k++) {
			unsigned int c = conns[k];
			struct rtt_result dj, raw, fr;
			double redis = NAN;
			const char *note = redis_note;

			/* Rounds in turn, medians: a round trip on this VM is
			 * mostly waiting for an idle vCPU to wake, which comes
			 * and goes for minutes at a time (c=1 has measured
			 * 13 k and 150 k req/s for the same binary), so one
			 * run of each could compare two different machines. */
			rtt_rounds(xp, c, have_redis ? &r : NULL, &raw, &dj,
				   &fr, &redis);
			if (have_redis && !isfinite(redis))
				note = "redis-benchmark failed";
			emit_rtt(xp, c, "rps", dj.rps, "req/s", raw.rps,
				 raw_name, T_NONE, 0, dj.ops, NULL);
			emit_rtt(xp, c, "p50_us", dj.p50, "us", raw.p50,
				 raw_name, T_NONE, 0, dj.ops, NULL);
			emit_rtt(xp, c, "p99_us", dj.p99, "us", raw.p99,
				 raw_name, T_LE, 1.5, dj.ops, NULL);
			emit_rtt(xp, c, "rps_vs_redis", dj.rps, "req/s", redis,
				 redis_name, T_GE, 1, dj.ops, note);
			emit_rtt(xp, c, "frames_rps", fr.rps, "req/s", raw.rps,
				 raw_name, T_NONE, 0, fr.ops, frames_note);
			emit_rtt(xp, c, "frames_p99_us", fr.p99, "us", raw.p99,
				 raw_name, T_NONE, 0, fr.ops, frames_note);
		}
	}
	if (redis_pid > 0)
		redis_stop();
}

/* ------------------------------------------------------------------------ */
/* bulk */

struct blast {
	int fd;
	const void *buf;
	size_t len;
	int err;
};

static void *blast_thread(void *arg)
{
	struct blast *b = arg;

	b->err = send_all(b->fd, b->buf, b->len);
	return NULL;
}

/*
 * GB/s of @len bytes from @src to @dst between two threads, through a
 * connection of @xp's transport, median of BULK_REPS after a warm-up. The
 * sender writes all of it with one send() loop; the receiver reads 64 KiB
 * a call, as djinnd does through its receive buffers, which on TCP
 * loopback is about half again as fast as one read of all of it (a long
 * read holds the socket lock and stalls the sender).
 */
static double raw_blast(const struct xport *xp, const void *src, void *dst,
			size_t len)
{
	double gbps[BULK_REPS];
	struct raw_ep ep;
	int cfd, afd;

	raw_listen(&ep, xp->is_unix, "blast.sock");
	cfd = raw_dial(&ep);
	afd = accept4(ep.lfd, NULL, NULL, SOCK_CLOEXEC);
	if (afd < 0)
		fail("accept: %s", strerror(errno));
	if (!xp->is_unix)
		set_nodelay(afd);
	for (int rep = -1; rep < BULK_REPS; rep++) {
		struct blast b = { .fd = cfd, .buf = src, .len = len };
		pthread_t t;
		uint64_t t0 = now_ns();
		int ret = pthread_create(&t, NULL, blast_thread, &b);

		if (ret)
			fail("pthread_create: %s", strerror(ret));
		ret = recv_all(afd, dst, len, BLAST_RECV);
		pthread_join(t, NULL);
		if (ret || b.err)
			fail("raw blast over %s: %s", xp->name,
			     strerror(-(ret ? ret : b.err)));
		if (rep >= 0)
			gbps[rep] = (double)len / (double)(now_ns() - t0);
	}
	close(cfd);
	close(afd);
	raw_close(&ep);
	if (memcmp(src, dst, len))
		fail("raw blast over %s: bytes came back wrong", xp->name);
	return median(gbps, BULK_REPS);
}

static void bench_bulk(void)
{
	const struct djinn_tensor_desc desc = {
		.dtype = DJINN_DTYPE_F32,
		.ndim = 2,
		.dims = { 8192, 8192 },
	};
	const size_t len = BULK_BYTES;
	uint8_t *src = xmalloc_huge(len), *dst = xmalloc_huge(len);
	uint64_t x = 0x9e3779b97f4a7c15ull;

	/* Bytes that are not all alike, every page touched before timing. */
	for (size_t i = 0; i < len; i += sizeof(x)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(src + i, &x, sizeof(x));
	}
	memset(dst, 0, len);

	for (unsigned int k = 0; k < nr_xports; k++) {
		const struct xport *xp = &xports[k];
		double up[BULK_REPS], down[BULK_REPS], raw;
		struct djinn_session *s;
		struct djinn_tensor *t = NULL;
		struct djinn_conn *conn;
		char m[48];

		raw = raw_blast(xp, src, dst, len);
		memset(dst, 0, len);

		check(djinn_connect(xp->addr, &conn), "djinn_connect");
		check(djinn_session_open(conn, NULL, &s), "djinn_session_open");
		for (int rep = -1; rep < BULK_REPS; rep++) {
			uint64_t t0 = now_ns();

			check(djinn_tensor_upload(s, &desc, src, DJINN_SEG_DATA,
						  &t),
			      "djinn_tensor_upload");
			if (rep >= 0)
				up[rep] = (double)len / (double)(now_ns() - t0);
			if (rep < BULK_REPS - 1)
				check(djinn_tensor_release(t),
				      "djinn_tensor_release");
		}
		for (int rep = -1; rep < BULK_REPS; rep++) {
			uint64_t t0 = now_ns();

			check(djinn_tensor_download(t, 0, len, dst),
			      "djinn_tensor_download");
			if (rep >= 0)
				down[rep] =
					(double)len / (double)(now_ns() - t0);
			if (rep == -1 && memcmp(src, dst, len))
				fail("bulk over %s: the tensor came back wrong",
				     xp->name);
		}
		check(djinn_tensor_release(t), "djinn_tensor_release");
		check(djinn_session_close(s), "djinn_session_close");
		djinn_disconnect(conn);
		info("bulk %s: raw %.2f GB/s, upload %.2f, download %.2f",
		     xp->name, raw, median(up, BULK_REPS),
		     median(down, BULK_REPS));

		for (int d = 0; d < 2; d++) {
			snprintf(m, sizeof(m), "%s_%s_gbps",
				 d ? "download" : "upload", xp->name);
			emit("djinn_bulk",
			     &(struct fig){
				     .metric = m,
				     .value = median(d ? down : up, BULK_REPS),
				     .unit = "GB/s",
				     .baseline = raw,
				     .baseline_name = "raw_blast",
				     .kind = T_GE,
				     .thr = 0.9,
				     .samples = BULK_REPS });
		}
	}
	free(src);
	free(dst);
}

/* ------------------------------------------------------------------------ */
/* lazy */

/* The id of row @n of the result: rows cover the table many times over. */
static int32_t lazy_id(uint64_t n)
{
	return (int32_t)((n * 7919) % LAZY_V);
}

/* Whether @len bytes at @p are the result's bytes from @off on. */
static bool lazy_check(const uint8_t *p, uint64_t off, uint64_t len)
{
	for (uint64_t o = off; o < off + len; o += sizeof(float)) {
		uint64_t e = o / sizeof(float);
		float want = (float)((uint64_t)lazy_id(e / LAZY_C) * LAZY_C +
				     e % LAZY_C);
		float got;

		memcpy(&got, p + (o - off), sizeof(got));
		if (got != want)
			return false;
	}
	return true;
}

/*
 * Bytes received on @conn once every request sent has had its answer
 * counted. libdjinn counts an answer just after it wakes the caller, so
 * the counters read right after a call returns may not have it yet.
 */
static uint64_t rx_bytes(struct djinn_conn *conn)
{
	uint64_t deadline = now_ns() + 1000000000ull;
	struct djinn_conn_stats st;

	for (;;) {
		check(djinn_conn_stats(conn, &st), "djinn_conn_stats");
		if (st.responses >= st.requests)
			return st.bytes_received;
		if (now_ns() > deadline)
			fail("lazy: %" PRIu64 " requests, %" PRIu64
			     " answers counted after 1 s",
			     st.requests, st.responses);
		sleep_ns(20000);
	}
}

static void bench_lazy(void)
{
	const struct djinn_tensor_desc tdesc = { .dtype = DJINN_DTYPE_F32,
						 .ndim = 2,
						 .dims = { LAZY_V, LAZY_C } };
	const struct djinn_tensor_desc idesc = { .dtype = DJINN_DTYPE_I32,
						 .ndim = 1,
						 .dims = { LAZY_N } };
	const struct xport *xp = &xports[0];
	float *table = xmalloc(LAZY_V * LAZY_C * sizeof(float));
	int32_t *ids = xmalloc(LAZY_N * sizeof(int32_t));
	uint64_t bytes, off, len, before, rd, mp, touched = 0;
	struct djinn_graph_builder *g;
	struct djinn_tensor *tt, *ti;
	struct djinn_request *req;
	struct djinn_session *s;
	struct djinn_conn *conn;
	struct djinn_result *r;
	uint8_t *buf;
	void *addr;
	int out;

	for (uint64_t i = 0; i < LAZY_V * LAZY_C; i++)
		table[i] = (float)i;
	for (uint64_t n = 0; n < LAZY_N; n++)
		ids[n] = lazy_id(n);

	check(djinn_connect(xp->addr, &conn), "djinn_connect");
	check(djinn_session_open(conn, NULL, &s), "djinn_session_open");
	check(djinn_tensor_upload(s, &tdesc, table, DJINN_SEG_DATA, &tt),
	      "djinn_tensor_upload (table)");
	check(djinn_tensor_upload(s, &idesc, ids, DJINN_SEG_DATA, &ti),
	      "djinn_tensor_upload (ids)");
	check(djinn_graph_new(s, &g), "djinn_graph_new");
	out = djinn_graph_output(g,
				 djinn_op_embedding(g, djinn_graph_input(g, tt),
						    djinn_graph_input(g, ti)));
	if (out < 0)
		fail("embedding graph: %s: %s", strerror(-out),
		     djinn_graph_error(g));
	check(djinn_submit(g, &req), "djinn_submit");
	check(djinn_wait(req, DJINN_WAIT_FOREVER), "djinn_wait");
	r = djinn_request_results(req, 0);
	bytes = (uint64_t)LAZY_N * LAZY_C * sizeof(float);
	if (!r)
		fail("embedding graph: no result");

	/* (a) one range of 1% in the middle, whole elements */
	len = bytes / 100 / sizeof(float) * sizeof(float);
	off = bytes / 2 / sizeof(float) * sizeof(float);
	buf = xmalloc(len);
	memset(buf, 0, len);
	before = rx_bytes(conn);
	check(djinn_result_read(r, off, len, buf), "djinn_result_read");
	rd = rx_bytes(conn) - before;
	if (!lazy_check(buf, off, len))
		fail("lazy: djinn_result_read() bytes came back wrong");
	free(buf);

	/* (b) 1% of the pages, one in a hundred, over the whole result */
	before = rx_bytes(conn);
	check(djinn_result_map(r, &addr), "djinn_result_map");
	for (uint64_t p = 0; p < bytes / PAGE; p += 100) {
		if (!lazy_check((const uint8_t *)addr + p * PAGE, p * PAGE,
				PAGE))
			fail("lazy: mapped page %" PRIu64 " is wrong", p);
		touched++;
	}
	mp = rx_bytes(conn) - before;
	check(djinn_result_unmap(r), "djinn_result_unmap");
	info("lazy: read %" PRIu64 " of %" PRIu64 " bytes: %" PRIu64
	     " received; %" PRIu64 " pages touched: %" PRIu64 " received",
	     len, bytes, rd, touched, mp);

	djinn_request_free(req);
	djinn_graph_free(g);
	check(djinn_tensor_release(tt), "djinn_tensor_release");
	check(djinn_tensor_release(ti), "djinn_tensor_release");
	check(djinn_session_close(s), "djinn_session_close");
	djinn_disconnect(conn);
	free(table);
	free(ids);

	emit("djinn_lazy", &(struct fig){ .metric = "read_1pct_rx_bytes",
					  .value = (double)rd,
					  .unit = "bytes",
					  .baseline = (double)bytes,
					  .baseline_name = "result_bytes",
					  .kind = T_LE,
					  .thr = 0.011 });
	emit("djinn_lazy", &(struct fig){ .metric = "map_1pct_rx_bytes",
					  .value = (double)mp,
					  .unit = "bytes",
					  .baseline = (double)bytes,
					  .baseline_name = "result_bytes",
					  .kind = T_LE,
					  .thr = 0.011,
					  .samples = touched });
}

/* ------------------------------------------------------------------------ */
/* stall */

#define STALL_BYTES (1024 * MiB)
#define STALL_IDLE_PINGS 2000

struct stall_upload {
	struct djinn_session *s;
	const void *src;
	int err;
	atomic_bool done;
};

static void *stall_upload_thread(void *arg)
{
	const struct djinn_tensor_desc desc = {
		.dtype = DJINN_DTYPE_U8,
		.ndim = 2,
		.dims = { 1024, (int32_t)(STALL_BYTES / 1024) },
	};
	struct stall_upload *u = arg;
	struct djinn_tensor *t;

	u->err = djinn_tensor_upload(u->s, &desc, u->src, DJINN_SEG_DATA, &t);
	if (!u->err)
		u->err = djinn_tensor_release(t);
	atomic_store(&u->done, true);
	return NULL;
}

/* Round trips on @conn into @hist until @stop is set (or @n are done). */
static uint64_t stall_pings(struct djinn_conn *conn, uint64_t *hist,
			    uint64_t *worst, atomic_bool *stop, uint64_t n)
{
	uint64_t ops = 0;

	while (stop ? !atomic_load(stop) : ops < n) {
		uint64_t t0 = now_ns(), d;

		check(djinn_conn_ping(conn), "djinn_conn_ping");
		d = now_ns() - t0;
		hist[hist_index(d)]++;
		if (d > *worst)
			*worst = d;
		ops++;
	}
	return ops;
}

static void bench_stall(void)
{
	const struct xport *xp = &xports[0];
	uint64_t *idle = xcalloc(HIST_BUCKETS, sizeof(*idle));
	uint64_t *busy = xcalloc(HIST_BUCKETS, sizeof(*busy));
	uint64_t idle_worst = 0, busy_worst = 0, idle_n, busy_n;
	uint8_t *src = xmalloc_huge(STALL_BYTES);
	struct stall_upload u = { .src = src };
	struct djinn_conn *up, *pc;
	double ip99, bp99;
	pthread_t t;
	int ret;

	memset(src, 0x5a, STALL_BYTES);
	check(djinn_connect(xp->addr, &up), "djinn_connect");
	check(djinn_connect(xp->addr, &pc), "djinn_connect");
	check(djinn_session_open(up, NULL, &u.s), "djinn_session_open");
	idle_n = stall_pings(pc, idle, &idle_worst, NULL, STALL_IDLE_PINGS);
	ret = pthread_create(&t, NULL, stall_upload_thread, &u);
	if (ret)
		fail("pthread_create: %s", strerror(ret));
	busy_n = stall_pings(pc, busy, &busy_worst, &u.done, 0);
	pthread_join(t, NULL);
	check(u.err, "djinn_tensor_upload");
	check(djinn_session_close(u.s), "djinn_session_close");
	djinn_disconnect(up);
	djinn_disconnect(pc);
	ip99 = hist_quantile(idle, idle_n, 0.99) / 1000;
	bp99 = hist_quantile(busy, busy_n, 0.99) / 1000;
	info("stall %s: idle p99 %.1f us worst %.1f us; during a 1 GiB "
	     "upload p99 %.1f us worst %.1f us (%" PRIu64 " pings)",
	     xp->name, ip99, (double)idle_worst / 1000, bp99,
	     (double)busy_worst / 1000, busy_n);
	emit("djinn_stall",
	     &(struct fig){ .metric = "ping_p99_during_upload_us",
			    .value = bp99,
			    .unit = "us",
			    .baseline = ip99,
			    .baseline_name = "ping_p99_idle",
			    .samples = busy_n });
	emit("djinn_stall",
	     &(struct fig){ .metric = "ping_worst_during_upload_us",
			    .value = (double)busy_worst / 1000,
			    .unit = "us",
			    .baseline = (double)idle_worst / 1000,
			    .baseline_name = "ping_worst_idle",
			    .samples = busy_n });
	free(idle);
	free(busy);
	free(src);
}

/* ------------------------------------------------------------------------ */

static const struct {
	const char *name;
	void (*run)(void);
	unsigned int budget_s; /* on top of what --seconds asks for */
} benches[] = {
	{ "rtt", bench_rtt, 60 },
	{ "bulk", bench_bulk, 60 },
	{ "lazy", bench_lazy, 30 },
	{ "stall", bench_stall, 60 },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: djinn-bench [--json] [--seconds S] [--addr ADDR]... "
		"[--only NAME]\n"
		"                   [--djinnd PATH] [--verbose] "
		"[rtt|bulk|lazy|stall|all]\n"
		"  rtt    round trips/s and p50/p99 of a no-op request, 1 and "
		"50 connections,\n"
		"         beside a raw ping-pong and redis-benchmark -t ping\n"
		"  bulk   upload/download GB/s of a 256 MiB tensor beside a raw "
		"socket blast\n"
		"  lazy   bytes received to read 1%% of a 196 MiB result\n"
		"  stall  ping latency while another client uploads 1 GiB\n"
		"  all    all four (the default)\n"
		"  -j, --json         JSON lines on stdout (the only output; "
		"the default)\n"
		"  -s, --seconds S    measured time of each rtt loop (default "
		"2, at most 60)\n"
		"  -a, --addr ADDR    use the djinnd at ADDR (unix:PATH or "
		"tcp:HOST:PORT;\n"
		"                     once for each transport) instead of "
		"starting one\n"
		"  -o, --only NAME    run only benchmark NAME\n"
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *only = NULL;
	unsigned int i, budget = 30;
	bool run_one[ARRAY_SIZE(benches)] = { false };
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "js:a:o:d:vh", longopts, NULL)) !=
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
		run_one[i] = !only || !strcmp(only, benches[i].name);
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
			budget += benches[i].budget_s;
	if (run_one[0])
		budget += (unsigned int)(30 * RTT_ROUNDS *
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
