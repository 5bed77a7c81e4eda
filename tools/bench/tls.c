// SPDX-License-Identifier: MIT
/*
 * djinn-bench tls: what TLS costs a djinnd client, each figure beside the
 * same over plain TCP loopback to the same daemon in the same run:
 *
 *   connects/s and p50/p99 of djinn_connect_opts() to the tls: listener
 *   (TCP connect, TLS 1.3 handshake with a client certificate, HELLO),
 *   beside djinn_connect() to the tcp: one; one connection at a time,
 *   each closed before the next; and the same TLS figures beside a plain
 *   OpenSSL client and server thread of this process doing the same
 *   handshake with the same certificates and one byte back, contexts
 *   made once (libdjinn makes one each connect);
 *
 *   round trips/s and p50/p99 of a no-op request (djinn_conn_ping(), as
 *   rtt does) on one connection, TLS beside TCP;
 *
 *   upload and download GB/s of a 256 MiB f32 tensor (as bulk does),
 *   TLS beside TCP, with the target TLS >= 0.8 of TCP; and the same TLS
 *   figures beside a plain OpenSSL client and server of this process
 *   (two threads, TLS 1.3 TLS_AES_128_GCM_SHA256 over loopback TCP,
 *   SSL_write() and SSL_read() of the same 256 MiB), which in turn is
 *   reported beside a raw TCP blast of the same bytes: what userspace
 *   TLS costs without djinnd.
 *
 * Connects and round trips run TLS_ROUNDS rounds, TCP, TLS (and the
 * OpenSSL handshake) in turn, for --seconds each after the warm-up; each
 * figure is the median of its rounds. Bulk figures are medians of 5
 * after one warm-up.
 *
 * Every line carries "transport": how djinnd and libdjinn moved the TLS
 * records in this run, as djinn_conn_transport() says: "tls, kernel"
 * (the kernel's tls module seals them, lib/ktls.c) or "tls, user"
 * (OpenSSL does, on memory BIOs). The 0.8 target is for kernel TLS;
 * where the run measured userspace TLS a note says so.
 *
 * It makes its own throwaway PKI in the run's temporary directory with
 * OpenSSL (an EC P-256 CA; a server certificate for CN localhost, SAN
 * IP:127.0.0.1; a client certificate for CN bench, the tenant) and
 * restarts djinn-bench's djinnd with a tls: listener on a free loopback
 * port that trusts it. With --addr there is no daemon of djinn-bench's
 * to restart, and one elsewhere would not trust this CA: the benchmark
 * says so on stderr and measures nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <djinn/djinn.h>

#include "pki.h"

#include "common.h"

#define TLS_RECV_CHUNK (64 * KiB)
/* Connections one timed loop opens at most: each leaves a TIME_WAIT
 * socket, and loopback has some 28 k ephemeral ports. */
#define TLS_MAX_CONNECTS 20000
#define TLS_CIPHER "TLS_AES_128_GCM_SHA256"

static const char bench_name[] = "djinn_tls";

/* OpenSSL's first error, and give up. */
__attribute__((noreturn)) static void ssl_die(const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256];

	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	fail("%s: %s", what, e ? buf : "OpenSSL failed");
}

/* ------------------------------------------------------------------------ */
/* The PKI: a CA, the server's certificate and the client's */

void make_pki(struct pki *p)
{
	const struct pki_cert srv = { .cn = "localhost",
				      .san = "IP:127.0.0.1,DNS:localhost",
				      .not_before = -3600,
				      .not_after = 86400,
				      .eku = "serverAuth" },
			      cli = { .cn = "bench",
				      .not_before = -3600,
				      .not_after = 86400,
				      .eku = "clientAuth" };
	struct pki_ca *ca = pki_ca_new("djinn-bench CA");

	snprintf(p->ca, sizeof(p->ca), "%s/tls-ca.pem", tmpdir);
	snprintf(p->srv_cert, sizeof(p->srv_cert), "%s/tls-srv.pem", tmpdir);
	snprintf(p->srv_key, sizeof(p->srv_key), "%s/tls-srv.key", tmpdir);
	snprintf(p->cli_cert, sizeof(p->cli_cert), "%s/tls-cli.pem", tmpdir);
	snprintf(p->cli_key, sizeof(p->cli_key), "%s/tls-cli.key", tmpdir);
	if (!ca || pki_ca_write(ca, p->ca) ||
	    pki_issue(ca, &srv, p->srv_cert, p->srv_key) ||
	    pki_issue(ca, &cli, p->cli_cert, p->cli_key))
		ssl_die("making the certificates");
	pki_ca_free(ca);
}

/* ------------------------------------------------------------------------ */
/* The references: a raw TCP blast, and a plain OpenSSL client and server */

/*
 * struct pipe_end - one end of a loopback TCP connection of this process
 * @fd:  the socket
 * @ssl: OpenSSL on it, or NULL (raw)
 * @buf, @len: what it sends or receives
 * @err: 0, or -errno, or -EPROTO for a TLS failure
 */
struct pipe_end {
	int fd;
	SSL *ssl;
	uint8_t *buf;
	size_t len;
	int err;
};

static int ssl_err(SSL *ssl, int r)
{
	int e = SSL_get_error(ssl, r);

	return e == SSL_ERROR_SYSCALL && errno ? -errno : -EPROTO;
}

/* All of @e's bytes: one send() loop, or SSL_write() (whole records of
 * 16 KiB; the socket blocks, so it writes it all). */
static void *pipe_send(void *arg)
{
	struct pipe_end *e = arg;
	size_t done = 0;

	if (!e->ssl) {
		e->err = send_all(e->fd, e->buf, e->len);
		return NULL;
	}
	while (done < e->len) {
		size_t n = e->len - done < INT_MAX ? e->len - done : INT_MAX;
		int r = SSL_write(e->ssl, e->buf + done, (int)n);

		if (r <= 0) {
			e->err = ssl_err(e->ssl, r);
			return NULL;
		}
		done += (size_t)r;
	}
	return NULL;
}

/* All of @e's bytes, at most TLS_RECV_CHUNK a call, as djinnd reads. */
static int pipe_recv(struct pipe_end *e)
{
	size_t done = 0;

	if (!e->ssl)
		return recv_all(e->fd, e->buf, e->len, TLS_RECV_CHUNK);
	while (done < e->len) {
		size_t n = e->len - done < TLS_RECV_CHUNK ? e->len - done :
							    TLS_RECV_CHUNK;
		int r = SSL_read(e->ssl, e->buf + done, (int)n);

		if (r <= 0)
			return ssl_err(e->ssl, r);
		done += (size_t)r;
	}
	return 0;
}

/* GB/s of @tx's bytes to @rx (another thread sends), median of
 * BULK_REPS after a warm-up; @what names it in errors. */
static double pipe_gbps(struct pipe_end *tx, struct pipe_end *rx,
			const char *what)
{
	double gbps[BULK_REPS];

	for (int rep = -1; rep < BULK_REPS; rep++) {
		uint64_t t0 = mono_ns();
		pthread_t t;
		int ret = pthread_create(&t, NULL, pipe_send, tx);

		if (ret)
			fail("pthread_create: %s", strerror(ret));
		ret = pipe_recv(rx);
		pthread_join(t, NULL);
		if (ret || tx->err)
			fail("%s: %s", what, strerror(-(ret ? ret : tx->err)));
		if (rep >= 0)
			gbps[rep] = (double)tx->len / (double)(mono_ns() - t0);
		if (rep == -1 && memcmp(tx->buf, rx->buf, tx->len))
			fail("%s: bytes came back wrong", what);
	}
	return median(gbps, BULK_REPS);
}

/* A loopback TCP connection of this process: *@cfd dialled, *@afd
 * accepted. */
static void loopback_pair(int *cfd, int *afd)
{
	struct raw_ep ep;

	raw_listen(&ep, false, NULL);
	*cfd = raw_dial(&ep);
	*afd = accept4(ep.lfd, NULL, NULL, SOCK_CLOEXEC);
	if (*afd < 0)
		fail("accept: %s", strerror(errno));
	set_nodelay(*afd);
	raw_close(&ep);
}

static double raw_blast(uint8_t *src, uint8_t *dst, size_t len)
{
	struct pipe_end tx = { .buf = src, .len = len };
	struct pipe_end rx = { .buf = dst, .len = len };
	double gbps;

	memset(dst, 0, len);
	loopback_pair(&tx.fd, &rx.fd);
	gbps = pipe_gbps(&tx, &rx, "raw TCP blast");
	close(tx.fd);
	close(rx.fd);
	info("tls reference: raw TCP blast %.2f GB/s", gbps);
	return gbps;
}

/* A TLS 1.3 context of @cipher only, in userspace, verifying its peer
 * against @p's CA, with the certificate and key given. */
static SSL_CTX *ref_ctx(const struct pki *p, bool server, const char *cert,
			const char *key)
{
	SSL_CTX *ctx =
		SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());

	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(ctx, TLS_CIPHER) ||
	    SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_load_verify_locations(ctx, p->ca, NULL) != 1)
		ssl_die("the OpenSSL reference's context");
#ifdef SSL_OP_ENABLE_KTLS
	SSL_CTX_clear_options(ctx, SSL_OP_ENABLE_KTLS);
#endif
	SSL_CTX_set_verify(ctx,
			   SSL_VERIFY_PEER |
				   (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT :
					     0),
			   NULL);
	if (server)
		SSL_CTX_set_num_tickets(ctx, 0);
	return ctx;
}

static void *ref_accept(void *arg)
{
	struct pipe_end *e = arg;
	int r = SSL_accept(e->ssl);

	e->err = r == 1 ? 0 : ssl_err(e->ssl, r);
	return NULL;
}

/* GB/s of @len bytes from a plain OpenSSL client to a plain OpenSSL
 * server, TLS 1.3 TLS_CIPHER on loopback TCP, both in userspace. */
static double openssl_blast(const struct pki *p, uint8_t *src, uint8_t *dst,
			    size_t len)
{
	SSL_CTX *sctx = ref_ctx(p, true, p->srv_cert, p->srv_key);
	SSL_CTX *cctx = ref_ctx(p, false, p->cli_cert, p->cli_key);
	struct pipe_end tx = { .buf = src, .len = len };
	struct pipe_end rx = { .buf = dst, .len = len };
	const char *cipher;
	pthread_t t;
	double gbps;
	int ret, r;

	memset(dst, 0, len);
	loopback_pair(&tx.fd, &rx.fd);
	tx.ssl = SSL_new(cctx);
	rx.ssl = SSL_new(sctx);
	if (!tx.ssl || !rx.ssl || !SSL_set_fd(tx.ssl, tx.fd) ||
	    !SSL_set_fd(rx.ssl, rx.fd) ||
	    !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tx.ssl), "127.0.0.1"))
		ssl_die("the OpenSSL reference's connection");
	ret = pthread_create(&t, NULL, ref_accept, &rx);
	if (ret)
		fail("pthread_create: %s", strerror(ret));
	r = SSL_connect(tx.ssl);
	pthread_join(t, NULL);
	if (r != 1 || rx.err)
		ssl_die("the OpenSSL reference's handshake");
	cipher = SSL_get_cipher_name(tx.ssl);
	if (strcmp(cipher, TLS_CIPHER))
		fail("the OpenSSL reference agreed on %s, not %s", cipher,
		     TLS_CIPHER);

	gbps = pipe_gbps(&tx, &rx, "OpenSSL reference");

	SSL_free(tx.ssl);
	SSL_free(rx.ssl);
	close(tx.fd);
	close(rx.fd);
	SSL_CTX_free(cctx);
	SSL_CTX_free(sctx);
	info("tls reference: OpenSSL %s %.2f GB/s", TLS_CIPHER, gbps);
	return gbps;
}

/*
 * struct hs_ref - the handshake reference: a plain OpenSSL server thread
 * of this process that accepts loopback TCP connections one at a time,
 * handshakes (TLS 1.3, TLS_CIPHER, a client certificate verified) and
 * sends one byte, as djinnd answers HELLO; a client of the same
 * certificates, its contexts made once
 * @err: the server's first failure, or 0
 */
struct hs_ref {
	struct raw_ep ep;
	SSL_CTX *sctx, *cctx;
	pthread_t thread;
	int err;
};

static void *hs_serve(void *arg)
{
	struct hs_ref *h = arg;

	for (;;) {
		int fd = accept4(h->ep.lfd, NULL, NULL, SOCK_CLOEXEC), r;
		SSL *ssl;

		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0)
			return NULL; /* hs_stop() shut the listener down */
		set_nodelay(fd);
		ssl = SSL_new(h->sctx);
		if (!ssl || !SSL_set_fd(ssl, fd))
			r = -ENOMEM;
		else if ((r = SSL_accept(ssl)) != 1 ||
			 (r = SSL_write(ssl, "h", 1)) != 1)
			r = ssl_err(ssl, r);
		else
			r = 0;
		if (r && !h->err)
			h->err = r;
		SSL_free(ssl);
		close(fd);
	}
}

static void hs_start(struct hs_ref *h, const struct pki *p)
{
	int ret;

	memset(h, 0, sizeof(*h));
	h->sctx = ref_ctx(p, true, p->srv_cert, p->srv_key);
	h->cctx = ref_ctx(p, false, p->cli_cert, p->cli_key);
	raw_listen(&h->ep, false, NULL);
	ret = pthread_create(&h->thread, NULL, hs_serve, h);
	if (ret)
		fail("pthread_create: %s", strerror(ret));
}

static void hs_stop(struct hs_ref *h)
{
	shutdown(h->ep.lfd, SHUT_RDWR); /* accept() fails: the thread ends */
	pthread_join(h->thread, NULL);
	raw_close(&h->ep);
	SSL_CTX_free(h->cctx);
	SSL_CTX_free(h->sctx);
	if (h->err)
		fail("the OpenSSL handshake reference's server: %s",
		     strerror(-h->err));
}

/* One handshake with @h and its byte: how long it took, ns; then the
 * connection is closed. */
static uint64_t hs_once(struct hs_ref *h)
{
	uint64_t t0 = mono_ns(), t1;
	int fd = raw_dial(&h->ep);
	SSL *ssl = SSL_new(h->cctx);
	char b;

	if (!ssl || !SSL_set_fd(ssl, fd) ||
	    !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1") ||
	    SSL_connect(ssl) != 1 || SSL_read(ssl, &b, 1) != 1)
		ssl_die("the OpenSSL handshake reference");
	t1 = mono_ns();
	SSL_free(ssl);
	close(fd);
	return t1 - t0;
}

/* ------------------------------------------------------------------------ */
/* Connects and round trips: timed loops, TCP, TLS and a reference in turn */

/*
 * struct loop_res - what one timed loop measured
 * @rate:      connects or round trips per second
 * @p50, @p99: the latency of one, microseconds
 * @n:         how many were measured
 */

/*
 * struct target - what a loop connects to
 * @addr:      a djinnd listener's address, or the reference's name
 * @o:         djinn_connect_opts()'s options for it, or NULL (TCP)
 * @ref:       the OpenSSL handshake reference instead of djinnd, or NULL
 * @transport: what djinn_conn_transport() said of a connection to it
 */
struct target {
	const char *addr;
	const struct djinn_connect_opts *o;
	struct hs_ref *ref;
	char transport[32];
};

static struct djinn_conn *target_connect(struct target *t)
{
	struct djinn_conn *conn;
	int ret = djinn_connect_opts(t->addr, t->o, &conn);

	if (ret)
		fail("djinn_connect_opts %s: %s (%s)", t->addr, strerror(-ret),
		     djinn_last_error());
	if (!t->transport[0])
		snprintf(t->transport, sizeof(t->transport), "%s",
			 djinn_conn_transport(conn));
	return conn;
}

/* Connect to @t and disconnect: how long the connect took, ns. */
static uint64_t connect_once(struct target *t)
{
	struct djinn_conn *conn;
	uint64_t t0, t1;

	if (t->ref)
		return hs_once(t->ref);
	t0 = mono_ns();
	conn = target_connect(t);
	t1 = mono_ns();
	djinn_disconnect(conn);
	return t1 - t0;
}

/* Connect to @t and disconnect, one after the other, for the warm-up and
 * then --seconds (or TLS_MAX_CONNECTS): the latency is the connect's. */
static void connect_loop(struct target *t, struct loop_res *r)
{
	uint64_t *hist = xcalloc(HIST_BUCKETS, sizeof(*hist));
	uint64_t start = mono_ns(), t0 = 0, t1;
	uint64_t warm = (uint64_t)(opt.warmup * 1e9);
	uint64_t span = (uint64_t)(opt.seconds * 1e9);

	memset(r, 0, sizeof(*r));
	for (;;) {
		uint64_t ns = connect_once(t);

		t1 = mono_ns();
		if (!t0 && t1 - start >= warm) {
			t0 = t1; /* the measured phase starts after this one */
			continue;
		}
		if (t0) {
			hist[hist_index(ns)]++;
			r->n++;
			if (t1 - t0 >= span || r->n == TLS_MAX_CONNECTS)
				break;
		}
	}
	loop_res_set(r, hist, r->n, t0, t1);
	free(hist);
	info("tls connects %s: %.0f/s, p50 %.1f us, p99 %.1f us", t->addr,
	     r->rate, r->p50, r->p99);
}

/* djinn_conn_ping() on one connection to @t, closed loop, for the
 * warm-up and then --seconds. */
static void ping_loop(struct target *t, struct loop_res *r)
{
	uint64_t *hist = xcalloc(HIST_BUCKETS, sizeof(*hist));
	struct djinn_conn *conn = target_connect(t);
	uint64_t start = mono_ns(), t0 = 0, t1;
	uint64_t warm = (uint64_t)(opt.warmup * 1e9);
	uint64_t span = (uint64_t)(opt.seconds * 1e9);

	memset(r, 0, sizeof(*r));
	for (;;) {
		uint64_t a = mono_ns();

		check(djinn_conn_ping(conn), "djinn_conn_ping");
		t1 = mono_ns();
		if (!t0 && t1 - start >= warm) {
			t0 = t1;
			continue;
		}
		if (t0) {
			hist[hist_index(t1 - a)]++;
			r->n++;
			if (t1 - t0 >= span)
				break;
		}
	}
	djinn_disconnect(conn);
	loop_res_set(r, hist, r->n, t0, t1);
	free(hist);
	info("tls ping %s: %.0f req/s, p50 %.1f us, p99 %.1f us", t->addr,
	     r->rate, r->p50, r->p99);
}

/* TLS_ROUNDS rounds of @loop over each of the @n @ts in turn: the
 * medians of each into @res. */
static void loop_rounds(void (*loop)(struct target *, struct loop_res *),
			struct target *const *ts, unsigned int n,
			struct loop_res *res)
{
	struct loop_res v[3][TLS_ROUNDS];

	if (n > ARRAY_SIZE(v))
		fail("tls: %u loops a round", n);
	for (unsigned int i = 0; i < TLS_ROUNDS; i++)
		for (unsigned int k = 0; k < n; k++)
			loop(ts[k], &v[k][i]);
	for (unsigned int k = 0; k < n; k++)
		loop_res_median(&res[k], v[k], TLS_ROUNDS);
}

/* ------------------------------------------------------------------------ */
/* Bulk through djinnd: as bulk.c does it */

/* Upload and download GB/s of @len bytes at @src through @t, medians of
 * BULK_REPS after a warm-up; @dst receives them. */
static void djinn_bulk(struct target *t, const void *src, void *dst, size_t len,
		       double *up_gbps, double *down_gbps)
{
	double up[BULK_REPS], down[BULK_REPS];
	struct djinn_conn *conn = target_connect(t);

	memset(dst, 0, len);
	bulk_through(conn, t->addr, src, dst, len, up, down);
	djinn_disconnect(conn);
	*up_gbps = median(up, BULK_REPS);
	*down_gbps = median(down, BULK_REPS);
	info("tls bulk %s: upload %.2f GB/s, download %.2f", t->addr, *up_gbps,
	     *down_gbps);
}

/* ------------------------------------------------------------------------ */
/* tls */

/* One figure of the tls benchmark, of @transport ("tls, kernel", "tls,
 * user" or NULL); @target (">=", "<=" or NULL) on the ratio against
 * @want. */
static void emit_tls(const char *transport, const char *metric, double value,
		     const char *unit, double base, const char *base_name,
		     const char *target, double want, uint64_t samples,
		     const char *note)
{
	fig_put(&(struct fig){ .bench = bench_name,
			       .metric = metric,
			       .value = value,
			       .unit = unit,
			       .baseline = base,
			       .baseline_name = base_name,
			       .target = target,
			       .want = want,
			       .samples = samples,
			       .note = note });
	if (transport)
		fig_str("transport", transport);
	fig_end();
}

static const char ref_note[] =
	"a plain OpenSSL client and server of this process, TLS 1.3 "
	"TLS_AES_128_GCM_SHA256 in userspace, without djinnd";

/* Connects: TCP, TLS and the OpenSSL handshake reference in turn. */
static void tls_connects(const struct pki *p, struct target *tcp,
			 struct target *tls, const char *xp)
{
	static const char hs_note[] =
		"a plain OpenSSL client and server of this process: TCP "
		"connect, TLS 1.3 handshake with the same certificates "
		"(contexts made once) and one byte back, without djinnd";
	struct hs_ref h;
	struct target ref = { .addr = "openssl", .ref = &h };
	struct target *const ts[] = { tcp, tls, &ref };
	struct loop_res c[ARRAY_SIZE(ts)];

	hs_start(&h, p);
	loop_rounds(connect_loop, ts, ARRAY_SIZE(ts), c);
	hs_stop(&h);
	emit_tls(xp, "connects_per_s", c[1].rate, "connects/s", c[0].rate,
		 "tcp_djinn_connect", NULL, 0, c[1].n, NULL);
	emit_tls(xp, "connect_p50_us", c[1].p50, "us", c[0].p50,
		 "tcp_djinn_connect", NULL, 0, c[1].n, NULL);
	emit_tls(xp, "connect_p99_us", c[1].p99, "us", c[0].p99,
		 "tcp_djinn_connect", NULL, 0, c[1].n, NULL);
	emit_tls(xp, "connects_vs_openssl_per_s", c[1].rate, "connects/s",
		 c[2].rate, "openssl_handshake", NULL, 0, c[1].n, hs_note);
	emit_tls(xp, "connect_vs_openssl_p50_us", c[1].p50, "us", c[2].p50,
		 "openssl_handshake", NULL, 0, c[1].n, hs_note);
}

/* Round trips on one connection: TCP and TLS in turn. */
static void tls_pings(struct target *tcp, struct target *tls, const char *xp)
{
	struct target *const ts[] = { tcp, tls };
	struct loop_res r[ARRAY_SIZE(ts)];

	loop_rounds(ping_loop, ts, ARRAY_SIZE(ts), r);
	emit_tls(xp, "c1_rps", r[1].rate, "req/s", r[0].rate, "tcp_c1_ping",
		 NULL, 0, r[1].n, NULL);
	emit_tls(xp, "c1_p50_us", r[1].p50, "us", r[0].p50, "tcp_c1_ping", NULL,
		 0, r[1].n, NULL);
	emit_tls(xp, "c1_p99_us", r[1].p99, "us", r[0].p99, "tcp_c1_ping", NULL,
		 0, r[1].n, NULL);
}

/*
 * A flood of TLS handshakes (TLS_FLOODERS threads connecting and
 * disconnecting) against another client's round trips on plain TCP:
 * djinnd does the handshakes' crypto on a thread of its own, so the
 * victim should see its idle latency. Before that thread, the same
 * flood took one connection's ping from 18 us to 5.5 ms at the p50.
 */
#define TLS_FLOODERS 2

struct flooder {
	struct target *t;
	pthread_t th;
	uint64_t n;
};

static _Atomic bool flood_stop;

static void *flood(void *arg)
{
	struct flooder *f = arg;

	while (!atomic_load(&flood_stop)) {
		connect_once(f->t);
		f->n++;
	}
	return NULL;
}

static void tls_flood(struct target *tcp, struct target *tls, const char *xp)
{
	static const char note[] =
		"one TCP connection's no-op round trips while 2 threads "
		"connect over TLS (handshake, HELLO, close) without pause, "
		"beside the same round trips with nothing else";
	struct flooder f[TLS_FLOODERS];
	struct loop_res idle, busy;
	uint64_t t0, n = 0;

	ping_loop(tcp, &idle);
	atomic_store(&flood_stop, false);
	for (int i = 0; i < TLS_FLOODERS; i++) {
		f[i] = (struct flooder){ .t = tls };
		if (pthread_create(&f[i].th, NULL, flood, &f[i]))
			fail("pthread_create: %s", strerror(errno));
	}
	t0 = mono_ns();
	ping_loop(tcp, &busy);
	atomic_store(&flood_stop, true);
	for (int i = 0; i < TLS_FLOODERS; i++) {
		pthread_join(f[i].th, NULL);
		n += f[i].n;
	}
	emit_tls(xp, "flood_c1_p50_us", busy.p50, "us", idle.p50,
		 "tcp_c1_ping_idle", NULL, 0, busy.n, note);
	emit_tls(xp, "flood_c1_p99_us", busy.p99, "us", idle.p99,
		 "tcp_c1_ping_idle", NULL, 0, busy.n, note);
	emit_tls(xp, "flood_handshakes_per_s",
		 (double)n / ((double)(mono_ns() - t0) / 1e9), "connects/s", 0,
		 NULL, NULL, 0, n, note);
}

/* Bulk: the raw and OpenSSL references, then djinnd over TCP and TLS. */
static void tls_bulk(const struct pki *p, struct target *tcp,
		     struct target *tls, const char *xp)
{
	static const char user_note[] =
		"the target is for kernel TLS; in this run OpenSSL sealed the "
		"records in userspace (no tls module)";
	const char *note = strcmp(xp, "tls, kernel") ? user_note : NULL;
	const size_t len = opt.bulk_bytes;
	uint8_t *src = xmalloc_huge(len), *dst = xmalloc_huge(len);
	double up_tcp, down_tcp, up_tls, down_tls, raw, ref;

	bulk_fill(src, len);
	raw = raw_blast(src, dst, len);
	ref = openssl_blast(p, src, dst, len);
	djinn_bulk(tcp, src, dst, len, &up_tcp, &down_tcp);
	djinn_bulk(tls, src, dst, len, &up_tls, &down_tls);
	free(src);
	free(dst);
	emit_tls(xp, "upload_gbps", up_tls, "GB/s", up_tcp, "tcp_upload",
		 ">=", 0.8, BULK_REPS, note);
	emit_tls(xp, "download_gbps", down_tls, "GB/s", down_tcp,
		 "tcp_download", ">=", 0.8, BULK_REPS, note);
	emit_tls(xp, "upload_vs_openssl_gbps", up_tls, "GB/s", ref,
		 "openssl_blast", NULL, 0, BULK_REPS, ref_note);
	emit_tls(xp, "download_vs_openssl_gbps", down_tls, "GB/s", ref,
		 "openssl_blast", NULL, 0, BULK_REPS, ref_note);
	emit_tls(xp, "openssl_gbps", ref, "GB/s", raw, "raw_blast", NULL, 0,
		 BULK_REPS, ref_note);
}

void bench_tls(void)
{
	struct djinn_connect_opts o = { .size = sizeof(o) };
	struct target tcp = { 0 }, tls = { 0 };
	struct daemon_tls dt;
	struct pki p;

	if (daemon_pid <= 0) {
		fprintf(stderr,
			"djinn-bench: tls: skipped: it needs the djinnd that "
			"djinn-bench starts (no --addr), to give it a tls: "
			"listener and certificates\n");
		return;
	}
	make_pki(&p);
	dt = (struct daemon_tls){ .cert = p.srv_cert,
				  .key = p.srv_key,
				  .client_ca = p.ca };
	daemon_stop();
	daemon_start_tls(&dt);
	o.tls_ca = p.ca;
	o.tls_cert = p.cli_cert;
	o.tls_key = p.cli_key;
	tls.addr = dt.addr;
	tls.o = &o;
	for (unsigned int i = 0; i < nr_xports; i++)
		if (!xports[i].is_unix)
			tcp.addr = xports[i].addr;
	if (!tcp.addr)
		fail("tls: djinnd has no tcp: listener");
	/* The first connection says which TLS this run measures. */
	djinn_disconnect(target_connect(&tls));
	info("tls: %s over %s, beside %s", tls.addr, tls.transport, tcp.addr);

	tls_connects(&p, &tcp, &tls, tls.transport);
	tls_pings(&tcp, &tls, tls.transport);
	tls_flood(&tcp, &tls, tls.transport);
	tls_bulk(&p, &tcp, &tls, tls.transport);
}
