/* SPDX-License-Identifier: MIT */
/*
 * What djinn-bench's benchmarks share (tools/bench/common.c): the options,
 * the transports, the daemon and the other children, the run's deadline,
 * latency histograms and raw sockets; their JSON lines are lib/figure.h's. Each benchmark is a
 * file of its own beside this one, run from tools/djinn-bench.c.
 */
#ifndef DJINN_TOOLS_BENCH_COMMON_H
#define DJINN_TOOLS_BENCH_COMMON_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "../../bench/bench.h"
#include "array_size.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

#define __printf(a, b) __attribute__((format(printf, a, b)))

#define MAX_XPORTS 2

/*
 * struct bench_opt - the command line's settings
 * @seconds: measured time of each rtt loop
 * @warmup:  time before it
 * @verbose: progress on stderr
 * @djinnd:  the djinnd to start, or NULL
 * @bulk_bytes: the tensor of bulk and tls (--bulk-mib; 256 MiB)
 */
struct bench_opt {
	double seconds;
	double warmup;
	bool verbose;
	const char *djinnd;
	size_t bulk_bytes;
};

extern struct bench_opt opt;

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

extern struct xport xports[MAX_XPORTS];
extern unsigned int nr_xports;
extern char tmpdir[64];

/* Children to stop whatever happens: the daemon and redis-server. */
extern volatile pid_t daemon_pid, redis_pid, child_pid;

/* ------------------------------------------------------------------------ */
/* Helpers: time, errors, memory, the run's deadline */

void make_tmpdir(void);
int stop_child(pid_t pid, int wait_ms);
void cleanup(void);
__printf(1, 2) void info(const char *fmt, ...);
void check(int ret, const char *what);
void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xmalloc_huge(size_t size);
void on_signal(int sig);

/* ------------------------------------------------------------------------ */
/* Latency histograms: log-linear, 128 steps per power of two (< 0.8%) */

#define HIST_SUB_BITS 7
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS) * HIST_SUB + HIST_SUB)

unsigned int hist_index(uint64_t v);
double hist_quantile(const uint64_t *h, uint64_t n, double p);

/*
 * struct loop_res - what one closed loop measured
 * @rate:     operations per second, all its connections together
 * @p50, @p99: latency, microseconds
 * @n:        operations measured
 */
struct loop_res {
	double rate, p50, p99;
	uint64_t n;
};
/* @r of @n operations between @t0 and @t1 (ns) whose latencies are in
 * @hist. */
void loop_res_set(struct loop_res *r, const uint64_t *hist, uint64_t n,
		  uint64_t t0, uint64_t t1);
/* Each figure's median over @nr rounds @v (at most 16); @n their sum. */
void loop_res_median(struct loop_res *out, const struct loop_res *v,
		     unsigned int nr);

/* ------------------------------------------------------------------------ */
/* Raw sockets */

int send_all(int fd, const void *buf, size_t len);
int recv_all(int fd, void *buf, size_t len, size_t chunk);
void set_nodelay(int fd);

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

void raw_listen(struct raw_ep *ep, bool is_unix, const char *name);
void raw_close(struct raw_ep *ep);
int raw_dial(const struct raw_ep *ep);
int dial_djinnd(const char *addr);
unsigned int free_tcp_port(void);

/* ------------------------------------------------------------------------ */
/* Children: the daemon, and what runs others */

bool in_path(const char *prog);
bool djinn_answers(const char *addr);
void daemon_start(void);
void daemon_stop(void);

/*
 * struct daemon_tls - a tls: listener for daemon_start_tls()
 * @cert, @key:  the server's certificate chain and its key (PEM)
 * @client_ca:   the CA of client certificates (PEM)
 * @addr:        set by daemon_start_tls(): tls:127.0.0.1:PORT
 */
struct daemon_tls {
	const char *cert, *key, *client_ca;
	char addr[64];
};

/*
 * struct pki - the PEM files, in tmpdir
 * @ca:                 the CA's certificate
 * @srv_cert, @srv_key: djinnd's, for localhost and 127.0.0.1
 * @cli_cert, @cli_key: the client's, CN bench (its tenant)
 */
struct pki {
	char ca[sizeof(tmpdir) + 16];
	char srv_cert[sizeof(tmpdir) + 16], srv_key[sizeof(tmpdir) + 16];
	char cli_cert[sizeof(tmpdir) + 16], cli_key[sizeof(tmpdir) + 16];
};

/* tools/bench/tls.c: the CA, djinnd's certificate (localhost, IP
 * 127.0.0.1) and the client's (CN bench), valid from an hour ago for a
 * day (lib/pki.c). */
void make_pki(struct pki *p);

/* daemon_start(), with a tls: listener on a free port as well. */
void daemon_start_tls(struct daemon_tls *tls);
/* Either, with more arguments @extra (NULL-terminated; later ones win,
 * as "--cpu-mem", "8G"); daemon_argv(): the command line it ran. */
void daemon_start_with(struct daemon_tls *tls, const char *const *extra);
char *const *daemon_argv(void);
int run_capture(char *const argv[], int timeout_ms, char *out, size_t len);

/* ------------------------------------------------------------------------ */
/* The benchmarks, one file each */

/* tools/bench/rtt.c; the run's deadline allows for its rounds */
#define RTT_ROUNDS 3
void bench_rtt(void);
/* tools/bench/bulk.c */
struct djinn_conn;
void bench_bulk(void);
/* @len (a multiple of 8) bytes that are not all alike into @src, every
 * page touched before timing. */
void bulk_fill(uint8_t *src, size_t len);
/* Runs of each direction of bulk_through(), after one to warm up. */
#define BULK_REPS 5
/* Upload and download @len bytes of @src through @conn, in a session of
 * its own, BULK_REPS times each: GB/s into @up[] and @down[]. What comes
 * back into @dst must be @src, or the run fails naming @name. */
void bulk_through(struct djinn_conn *conn, const char *name, const void *src,
		  void *dst, size_t len, double *up, double *down);
/* tools/bench/lazy.c */
void bench_lazy(void);
/* tools/bench/stall.c */
void bench_stall(void);
/* tools/bench/tls.c; the run's deadline allows for its timed loops, each
 * --seconds after the warm-up: TLS_ROUNDS rounds of connects (TCP, TLS
 * and OpenSSL's) and of round trips (TCP and TLS), then two of round
 * trips beside a flood of handshakes */
#define TLS_ROUNDS 3
#define TLS_LOOPS (5 * TLS_ROUNDS + 2)
void bench_tls(void);
/* tools/bench/restart.c */
void bench_restart(void);

#endif /* DJINN_TOOLS_BENCH_COMMON_H */
