// SPDX-License-Identifier: MIT
/*
 * djinn-bench rtt: round trips/s and p50/p99 latency of a no-op request
 * (djinn_conn_ping(): a 40-byte HEARTBEAT naming no session and its
 * 40-byte answer) over the unix socket and TCP loopback, with 1 and 50
 * connections: one thread per connection, one request in flight on each
 * (a closed loop), for --seconds after a warm-up. Beside it, the same
 * loop of 40 bytes each way against an echo server thread of this process
 * (epoll, one thread for all the connections, as djinnd has one I/O
 * thread) over the same transport; and, when redis-server and
 * redis-benchmark are installed, `redis-benchmark -t ping` against a
 * private redis-server, the better of its two PING kinds. A third loop
 * sends the same HEARTBEAT frames to djinnd from a plain socket, as the
 * raw loop sends its bytes, to tell djinnd's share of the time from
 * libdjinn's (no target: a diagnostic). The four run in turn, three
 * rounds; each figure is the median of its rounds. With one connection
 * a fifth loop submits a no-op graph (one SCALE of a one-element tensor
 * of its session) and waits for its result, as gpu-bench's rtt does on
 * a GPU: beside the ping, what the graph path (parse, checks, plan, the
 * executor's queue and wake-up, the result's region, the answer) adds
 * to a round trip on this backend.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "common.h"

#define PING_LEN 40 /* a struct djinn_hdr: the request and the answer */

/* ------------------------------------------------------------------------ */
/* The reference: an echo server of this process */

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
/* The other reference: redis-server and redis-benchmark */

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
		uint64_t deadline = mono_ns() + 5 * NSEC_PER_SEC;
		int status;

		r->port = free_tcp_port();
		snprintf(port, sizeof(port), "%u", r->port);
		redis_pid = spawn(argv, log, NULL);
		while (mono_ns() < deadline) {
			if (waitpid(redis_pid, &status, WNOHANG) == redis_pid) {
				redis_pid = -1;
				break;
			}
			if (redis_answers(r))
				return 0;
			sleep_ns(10 * NSEC_PER_MSEC);
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
 * @L_GRAPH:  a no-op graph submitted through libdjinn, waited for
 */
enum loop_kind { L_RAW, L_DJINN, L_FRAMES, L_GRAPH };

static const char *const loop_name[] = { "raw", "djinn", "frames", "graph" };

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
	struct djinn_session *s; /* L_GRAPH's, and its tensor */
	struct djinn_tensor *t;
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
			       .type = DJINN_MSG_HEARTBEAT,
			       .request_id = ++w->ops_sent };
	int ret = send_all(w->fd, &h, sizeof(h));

	if (!ret)
		ret = recv_all(w->fd, &h, sizeof(h), 0);
	if (!ret && (h.magic != DJINN_MAGIC || h.flags != DJINN_F_RESPONSE ||
		     h.type != DJINN_MSG_HEARTBEAT || h.payload_len ||
		     h.request_id != w->ops_sent))
		ret = -EPROTO;
	return ret;
}

/* A no-op graph: x * 1 of the session's one-element tensor, its result
 * a region of the session until the request is freed. */
static int graph_ping(struct worker *w)
{
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	int ret = djinn_graph_new(w->s, &g);

	if (ret)
		return ret;
	djinn_graph_output(g,
			   djinn_op_scale(g, djinn_graph_input(g, w->t), 1.0f));
	ret = djinn_submit(g, &req);
	if (!ret) {
		ret = djinn_wait(req, DJINN_WAIT_FOREVER);
		djinn_request_free(req);
	}
	djinn_graph_free(g);
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
		uint64_t t0 = mono_ns();
		int ret = run->kind == L_DJINN ? djinn_conn_ping(w->conn) :
			  run->kind == L_RAW   ? raw_ping(w) :
			  run->kind == L_GRAPH ? graph_ping(w) :
						 frame_ping(w);

		if (ret) {
			w->err = ret;
			break;
		}
		if (ph == PH_MEASURE) {
			w->hist[hist_index(mono_ns() - t0)]++;
			w->ops++;
		}
	}
	return NULL;
}

/* A closed loop of @kind over @conns connections: to @xp's daemon, or
 * raw to an echo server of the same transport. */
static void rtt_loop(const struct xport *xp, unsigned int conns,
		     enum loop_kind kind, struct loop_res *res)
{
	bool raw = kind == L_RAW;
	struct rtt_run run = { .kind = kind, .nr = conns };
	uint64_t *hist = xcalloc(HIST_BUCKETS, sizeof(*hist));
	uint64_t t0, t1, ops = 0;
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
		if (kind == L_GRAPH) {
			struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
						       .ndim = 1,
						       .dims = { 1 } };
			float one = 1.0f;

			check(djinn_session_open(w->conn, NULL, &w->s),
			      "djinn_session_open");
			check(djinn_tensor_upload(w->s, &d, &one,
						  DJINN_SEG_DATA, &w->t),
			      "djinn_tensor_upload");
		}
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
	t0 = mono_ns();
	atomic_store(&run.phase, PH_MEASURE);
	sleep_ns((uint64_t)(opt.seconds * 1e9));
	atomic_store(&run.phase, PH_STOP);
	t1 = mono_ns();

	memset(res, 0, sizeof(*res));
	for (unsigned int i = 0; i < conns; i++) {
		struct worker *w = &run.w[i];

		pthread_join(w->thread, NULL);
		if (w->err)
			fail("%s ping over %s, connection %u: %s",
			     loop_name[kind], xp->name, i, strerror(-w->err));
		for (unsigned int b = 0; b < HIST_BUCKETS; b++)
			hist[b] += w->hist[b];
		ops += w->ops;
		if (kind == L_GRAPH) {
			djinn_tensor_release(w->t);
			djinn_session_close(w->s);
		}
		if (kind == L_DJINN || kind == L_GRAPH)
			djinn_disconnect(w->conn);
		else
			close(w->fd);
		free(w->hist);
	}
	pthread_barrier_destroy(&run.start);
	free(run.w);
	if (raw)
		echo_stop(&e);

	loop_res_set(res, hist, ops, t0, t1);
	free(hist);
	info("rtt %s %s c=%u: %.0f req/s, p50 %.1f us, p99 %.1f us",
	     loop_name[kind], xp->name, conns, res->rate, res->p50, res->p99);
}

/* One figure of the rtt benchmark: @what of @xp at @conns connections;
 * @target (">=", "<=" or NULL) on the ratio against @want. */
static void emit_rtt(const struct xport *xp, unsigned int conns,
		     const char *what, double value, const char *unit,
		     double base, const char *base_name, const char *target,
		     double want, uint64_t samples, const char *note)
{
	char m[64];

	snprintf(m, sizeof(m), "%s_c%u_%s", xp->name, conns, what);
	fig_emit(&(struct fig){ .bench = "djinn_rtt",
				.metric = m,
				.value = value,
				.unit = unit,
				.baseline = base,
				.baseline_name = base_name,
				.target = target,
				.want = want,
				.samples = samples,
				.note = note });
}

/* RTT_ROUNDS rounds of raw, djinn, frames, redis (when @r) and, with
 * one connection, graphs, in turn; the medians of each. */
static void rtt_rounds(const struct xport *xp, unsigned int c,
		       const struct redis *r, struct loop_res *raw,
		       struct loop_res *dj, struct loop_res *fr,
		       struct loop_res *gr, double *redis)
{
	struct loop_res vraw[RTT_ROUNDS], vdj[RTT_ROUNDS], vfr[RTT_ROUNDS];
	struct loop_res vgr[RTT_ROUNDS];
	double vredis[RTT_ROUNDS];

	for (unsigned int i = 0; i < RTT_ROUNDS; i++) {
		rtt_loop(xp, c, L_RAW, &vraw[i]);
		rtt_loop(xp, c, L_DJINN, &vdj[i]);
		rtt_loop(xp, c, L_FRAMES, &vfr[i]);
		if (c == 1)
			rtt_loop(xp, c, L_GRAPH, &vgr[i]);
		vredis[i] = NAN;
		if (r) {
			/* as many PINGs as djinn did: about as long */
			uint64_t n = (uint64_t)(vdj[i].rate * opt.seconds);

			n = n < 2000 ? 2000 : n > 5000000 ? 5000000 : n;
			vredis[i] = redis_bench(r, xp, c, n);
			info("rtt redis %s c=%u: %.0f req/s", xp->name, c,
			     vredis[i]);
		}
	}
	loop_res_median(raw, vraw, RTT_ROUNDS);
	loop_res_median(dj, vdj, RTT_ROUNDS);
	loop_res_median(fr, vfr, RTT_ROUNDS);
	if (c == 1)
		loop_res_median(gr, vgr, RTT_ROUNDS);
	*redis = median(vredis, RTT_ROUNDS);
}

void bench_rtt(void)
{
	static const unsigned int conns[] = { 1, 50 };
	static const char raw_name[] = "raw_pingpong";
	static const char redis_name[] = "redis-benchmark -t ping";
	static const char frames_note[] =
		"djinnd answering HEARTBEAT frames from a plain socket "
		"client, without libdjinn: djinnd's share";
	static const char graph_note[] =
		"a no-op graph (SCALE of one element) submitted and waited "
		"for, beside the ping: what the graph path adds";
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
			struct loop_res dj, raw, fr, gr;
			double redis = NAN;
			const char *note = redis_note;

			/* Rounds in turn, medians: a round trip on this VM is
			 * mostly waiting for an idle vCPU to wake, which comes
			 * and goes for minutes at a time (c=1 has measured
			 * 13 k and 150 k req/s for the same binary), so one
			 * run of each could compare two different machines. */
			rtt_rounds(xp, c, have_redis ? &r : NULL, &raw, &dj,
				   &fr, &gr, &redis);
			if (have_redis && !isfinite(redis))
				note = "redis-benchmark failed";
			emit_rtt(xp, c, "rps", dj.rate, "req/s", raw.rate,
				 raw_name, NULL, 0, dj.n, NULL);
			emit_rtt(xp, c, "p50_us", dj.p50, "us", raw.p50,
				 raw_name, NULL, 0, dj.n, NULL);
			emit_rtt(xp, c, "p99_us", dj.p99, "us", raw.p99,
				 raw_name, "<=", 1.5, dj.n, NULL);
			emit_rtt(xp, c, "rps_vs_redis", dj.rate, "req/s", redis,
				 redis_name, ">=", 1, dj.n, note);
			emit_rtt(xp, c, "frames_rps", fr.rate, "req/s",
				 raw.rate, raw_name, NULL, 0, fr.n,
				 frames_note);
			emit_rtt(xp, c, "frames_p99_us", fr.p99, "us", raw.p99,
				 raw_name, NULL, 0, fr.n, frames_note);
			if (c != 1)
				continue;
			emit_rtt(xp, c, "graph_p50_us", gr.p50, "us", dj.p50,
				 "djinn_ping_p50", NULL, 0, gr.n, graph_note);
			emit_rtt(xp, c, "graph_p99_us", gr.p99, "us", dj.p99,
				 "djinn_ping_p99", NULL, 0, gr.n, graph_note);
		}
	}
	if (redis_pid > 0)
		redis_stop();
}
