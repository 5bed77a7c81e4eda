// SPDX-License-Identifier: MIT
/*
 * TLS listeners against a real djinnd (Documentation/security.rst, "TLS";
 * djinnd/net/tls.c, libdjinn/tls.c): who a client is comes from its
 * verified certificate or a bearer token, never from a string it sends,
 * and every refusal is precise and harms no one else.
 *
 * The certificates are made here with libcrypto into a temporary
 * directory: a CA, an unrelated second CA, djinnd's certificate (CN
 * localhost, SAN IP:127.0.0.1 and DNS:localhost), clients alice and bob,
 * carol's expired one, mallory's naming alice but from the other CA, and
 * one of our CA whose CN is not a tenant name; tls.tokens names bob and
 * carol by the SHA-256 of random tokens. Each test starts its own djinnd
 * with a unix socket, a tls: listener on a free port of 127.0.0.1 (by
 * --listen: the command line's listeners replace the file's) and
 * --config naming [tls].
 *
 * Each attack asserts the precise failure (the errno and the words of
 * djinn_last_error() or of djinnd's error frame) and that victims opened
 * before it, a session over the unix socket and one over TLS as alice,
 * each holding a tensor of known bytes, read them back unchanged and
 * still make round trips. The metrics endpoint's TLS counters are
 * checked where a test knows them exactly.
 *
 * libdjinn is the client; where it cannot say what a test needs (AUTH
 * twice, opcodes before AUTH) a bridge thread carries raw frames over
 * TLS: the test speaks plaintext on one end of a socketpair
 * (fixture.h's calls) and the thread seals it with OpenSSL.
 *
 * The test needs no root and waits on no timer: a counter the daemon
 * bumps after the client has returned is polled until it is reached.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <djinn/djinn.h>

#include "fixture.h"
#include "pki.h"
#include "../unit/testutil.h"

#define DAY (24 * 3600L)
#define BIG_BYTES (8 * MiB) /* many records, partial sends */
#define VICTIM_BYTES (256 * KiB)
#define WORN_RECORDS 5 /* tls.max_records of setup_worn()'s daemon */

/* The temporary directory of the certificates, keys, tokens and config. */
static char pki[] = "/tmp/djinn-tls.XXXXXX";
static char conf[sizeof(pki) + 16], conf_worn[sizeof(pki) + 24];
/* Hex tokens: bob's and carol's are in tls.tokens, the last is not. */
static char tok_bob[65], tok_carol[65], tok_wrong[65];
/* This test's djinnd: tls:127.0.0.1:PORT, and tcp: on the same port. */
static char tls_addr[48], tcp_addr[48];
static unsigned int tls_port;

/* ---------------------------------------------------------------------- */
/* Certificates, tokens and the configuration */

/* "DIR/NAME.EXT" in the temporary directory. */
static void pki_path(char *buf, size_t len, const char *name, const char *ext)
{
	snprintf(buf, len, "%s/%s.%s", pki, name, ext);
}

/* Issue certificate @name (files NAME.pem and NAME.key in the
 * directory) with subject CN @cn under @ca, valid from @from to @to
 * seconds from now, with extendedKeyUsage @eku and subjectAltName @san
 * (or NULL). */
static void issue(const struct pki_ca *ca, const char *name, const char *cn,
		  long from, long to, const char *eku, const char *san)
{
	const struct pki_cert c = { .cn = cn,
				    .san = san,
				    .not_before = from,
				    .not_after = to,
				    .eku = eku };
	char cert[PATH_MAX], key[PATH_MAX];

	pki_path(cert, sizeof(cert), name, "pem");
	pki_path(key, sizeof(key), name, "key");
	assert_int_equal(pki_issue(ca, &c, cert, key), 0);
}

/* A random token of 32 bytes, in hex. */
static void make_token(char out[65])
{
	uint8_t b[32];

	assert_int_equal(RAND_bytes(b, sizeof(b)), 1);
	for (size_t i = 0; i < sizeof(b); i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* "TENANT SHA256HEX" of @token, a line of tls.tokens, into @f. */
static void token_line(FILE *f, const char *tenant, const char *token)
{
	uint8_t h[32];

	assert_int_equal(EVP_Digest(token, strlen(token), h, NULL, EVP_sha256(),
				    NULL),
			 1);
	fprintf(f, "%s ", tenant);
	for (size_t i = 0; i < sizeof(h); i++)
		fprintf(f, "%02x", h[i]);
	fprintf(f, "\n");
}

static int group_setup(void **state)
{
	struct pki_ca *ca, *other;
	char path[PATH_MAX];
	FILE *f;

	if (!mkdtemp(pki))
		return -1;
	ca = pki_ca_new("djinn test CA");
	other = pki_ca_new("another CA");
	assert_non_null(ca);
	assert_non_null(other);
	pki_path(path, sizeof(path), "ca", "pem");
	assert_int_equal(pki_ca_write(ca, path), 0);
	pki_path(path, sizeof(path), "other-ca", "pem");
	assert_int_equal(pki_ca_write(other, path), 0);
	issue(ca, "server", "localhost", -DAY, 30 * DAY, "serverAuth",
	      "IP:127.0.0.1,DNS:localhost");
	issue(ca, "alice", "alice", -DAY, 30 * DAY, "clientAuth", NULL);
	issue(ca, "bob", "bob", -DAY, 30 * DAY, "clientAuth", NULL);
	/* valid for a day, a week ago */
	issue(ca, "carol-expired", "carol", -7 * DAY, -6 * DAY, "clientAuth",
	      NULL);
	issue(other, "mallory", "alice", -DAY, 30 * DAY, "clientAuth", NULL);
	issue(ca, "spaced", "alice smith", -DAY, 30 * DAY, "clientAuth", NULL);
	/* names djinnd gives itself, two CNs, a NUL inside one */
	issue(ca, "uidzero", "uid:0", -DAY, 30 * DAY, "clientAuth", NULL);
	{
		const struct pki_cert two = { .cn = "alice",
					      .cn2 = "bob",
					      .not_before = -DAY,
					      .not_after = 30 * DAY,
					      .eku = "clientAuth" };
		const struct pki_cert nul = { .cn = "alice\0.x",
					      .cn_len = 9,
					      .not_before = -DAY,
					      .not_after = 30 * DAY,
					      .eku = "clientAuth" };
		char cert[PATH_MAX], key[PATH_MAX];

		pki_path(cert, sizeof(cert), "twocn", "pem");
		pki_path(key, sizeof(key), "twocn", "key");
		assert_int_equal(pki_issue(ca, &two, cert, key), 0);
		pki_path(cert, sizeof(cert), "nulcn", "pem");
		pki_path(key, sizeof(key), "nulcn", "key");
		assert_int_equal(pki_issue(ca, &nul, cert, key), 0);
	}
	pki_ca_free(ca);
	pki_ca_free(other);

	make_token(tok_bob);
	make_token(tok_carol);
	make_token(tok_wrong);
	pki_path(path, sizeof(path), "tokens", "txt");
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "# tenant sha256(token)\n");
	token_line(f, "bob", tok_bob);
	token_line(f, "carol", tok_carol);
	assert_int_equal(fclose(f), 0);

	snprintf(conf, sizeof(conf), "%s/djinnd.conf", pki);
	snprintf(conf_worn, sizeof(conf_worn), "%s/djinnd-worn.conf", pki);
	for (int i = 0; i < 2; i++) {
		f = fopen(i ? conf_worn : conf, "w");
		assert_non_null(f);
		fprintf(f,
			"[tls]\n"
			"certificate = %s/server.pem\n"
			"key = %s/server.key\n"
			"client_ca = %s/ca.pem\n"
			"tokens = %s/tokens.txt\n",
			pki, pki, pki, pki);
		if (i)
			fprintf(f, "max_records = %d\n", WORN_RECORDS);
		assert_int_equal(fclose(f), 0);
	}
	return 0;
}

static int group_teardown(void **state)
{
	return rm_tree(pki) ? -1 : 0;
}

/* A daemon with a unix socket, the admin socket and a tls: listener on
 * a port free now, configured by @path; @staged: --cpu-device-only
 * (reads staged, those over 4 MiB sent in parts, as on a GPU). */
static int setup_conf(void **state, const char *path, bool staged)
{
	char listen[48];
	const char *const extra[] = { "--config",
				      path,
				      "--listen",
				      listen,
				      staged ? "--cpu-device-only" : NULL,
				      NULL };

	tls_port = dj_free_port();
	if (!tls_port)
		return -1;
	snprintf(listen, sizeof(listen), "tls:127.0.0.1:%u", tls_port);
	snprintf(tls_addr, sizeof(tls_addr), "tls:127.0.0.1:%u", tls_port);
	snprintf(tcp_addr, sizeof(tcp_addr), "tcp:127.0.0.1:%u", tls_port);
	return fx_start_args(state, DEV_MEM, 10000, extra);
}

static int setup(void **state)
{
	return setup_conf(state, conf, false);
}

static int setup_staged(void **state)
{
	return setup_conf(state, conf, true);
}

/* The same, with tls.max_records = WORN_RECORDS: test_max_records(). */
static int setup_worn(void **state)
{
	return setup_conf(state, conf_worn, false);
}

/* ---------------------------------------------------------------------- */
/* Connecting through libdjinn */

/* The connections a test holds, disconnected by the teardown when a
 * failure left them (a failed test returns from anywhere). */
static struct djinn_conn *held[16];

static struct djinn_conn *hold(struct djinn_conn *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(held); i++) {
		if (!held[i]) {
			held[i] = c;
			return c;
		}
	}
	fail_msg("more than %zu connections held", ARRAY_SIZE(held));
	return c;
}

static void disconnect(struct djinn_conn *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(held); i++)
		if (held[i] == c)
			held[i] = NULL;
	djinn_disconnect(c);
}

/*
 * djinn_connect_opts() to the tls: listener trusting CA file @ca (NULL:
 * our CA), with the certificate and key of @who (NULL: none) and
 * @token (NULL: none). Its result; *@c on success.
 */
static int tls_connect(const char *ca, const char *who, const char *token,
		       struct djinn_conn **c)
{
	char ca_path[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
	struct djinn_connect_opts o = { .size = sizeof(o),
					.tls_ca = ca_path,
					.token = token };

	pki_path(ca_path, sizeof(ca_path), ca ? ca : "ca", "pem");
	if (who) {
		pki_path(cert, sizeof(cert), who, "pem");
		pki_path(key, sizeof(key), who, "key");
		o.tls_cert = cert;
		o.tls_key = key;
	}
	*c = NULL;
	return djinn_connect_opts(tls_addr, &o, c);
}

/* A connection that must succeed, over TLS. */
static struct djinn_conn *xtls_at(int line, const char *ca, const char *who,
				  const char *token)
{
	struct djinn_conn *c;
	int ret = tls_connect(ca, who, token, &c);

	if (ret)
		fail_msg("line %d: connect as %s: %s: %s", line,
			 who ? who : "(no certificate)", strerror(-ret),
			 djinn_last_error());
	hold(c);
	if (strncmp(djinn_conn_transport(c), "tls, ", 5))
		fail_msg("line %d: transport '%s', not TLS", line,
			 djinn_conn_transport(c));
	return c;
}
#define xtls(ca, who, token) xtls_at(__LINE__, ca, who, token)

/* @ret must be @err, djinn_last_error() holding @phrase. */
static void refused_at(int line, int ret, int err, const char *phrase)
{
	const char *why = djinn_last_error();

	if (ret != err)
		fail_msg("line %d: %d (%s), not %d (%s); last error '%s'", line,
			 ret, strerror(-ret), err, strerror(-err), why);
	if (phrase && !strstr(why, phrase))
		fail_msg("line %d: last error '%s' does not say '%s'", line,
			 why, phrase);
}
#define refused(ret, err, phrase) refused_at(__LINE__, ret, err, phrase)

/* Connecting with these must fail with @err, saying @phrase. */
static void connect_refused_at(int line, const char *ca, const char *who,
			       const char *token, int err, const char *phrase)
{
	struct djinn_conn *c;
	int ret = tls_connect(ca, who, token, &c);

	if (!ret)
		djinn_disconnect(c);
	refused_at(line, ret, err, phrase);
	assert_null(c);
}
#define connect_refused(ca, who, token, err, phrase) \
	connect_refused_at(__LINE__, ca, who, token, err, phrase)

static struct djinn_session *xopen_at(int line, struct djinn_conn *c,
				      const char *label)
{
	struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;
	struct djinn_session *s;
	int ret;

	o.tenant = label;
	ret = djinn_session_open(c, &o, &s);
	if (ret)
		fail_msg("line %d: session open: %s: %s", line, strerror(-ret),
			 djinn_last_error());
	return s;
}
#define xopen(c, label) xopen_at(__LINE__, c, label)

static uint64_t session_id(struct djinn_session *s)
{
	struct djinn_session_info i;

	assert_int_equal(djinn_session_info(s, &i), 0);
	return i.id;
}

/* Session @s's tenant by the admin socket; its label must be @label. */
static const char *tenant_of(struct fx *fx, struct djinn_session *s,
			     const char *label)
{
	static char t[DJINN_TENANT_LEN];
	struct djinn_admin_session e = session_entry(fx, session_id(s));

	e.label[sizeof(e.label) - 1] = 0;
	assert_string_equal(e.label, label);
	memcpy(t, e.tenant, sizeof(t));
	t[sizeof(t) - 1] = 0;
	return t;
}

/* A data tensor of @bytes of pattern @seed. */
static struct djinn_tensor *upload_at(int line, struct djinn_session *s,
				      uint64_t bytes, uint64_t seed)
{
	const struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, bytes);
	uint8_t *data = pattern_buf(seed, bytes);
	struct djinn_tensor *t;
	int ret = djinn_tensor_upload(s, &d, data, DJINN_SEG_DATA, &t);

	free(data);
	if (ret)
		fail_msg("line %d: upload of %llu bytes: %s: %s", line,
			 (unsigned long long)bytes, strerror(-ret),
			 djinn_last_error());
	return t;
}
#define upload(s, bytes, seed) upload_at(__LINE__, s, bytes, seed)

/* @len bytes at @off of @t must be pattern @seed's at @off. */
static void expect_bytes_at(int line, struct djinn_tensor *t, uint64_t off,
			    uint64_t len, uint64_t seed)
{
	uint8_t *got = xmalloc(len);
	char what[64];
	int ret = djinn_tensor_download(t, off, len, got);

	if (ret)
		fail_msg("line %d: download: %s: %s", line, strerror(-ret),
			 djinn_last_error());
	snprintf(what, sizeof(what), "line %d: tensor bytes", line);
	expect_pattern(got, seed, off, len, what);
	free(got);
}
#define expect_bytes(t, off, len, seed) \
	expect_bytes_at(__LINE__, t, off, len, seed)

/* ---------------------------------------------------------------------- */
/* Victims */

/*
 * struct victim - a session opened before an attack, which must not
 * notice it
 * @c:    its connection (unix, or TLS as alice)
 * @s:    the session
 * @t:    a tensor of VICTIM_BYTES of pattern @seed
 */
struct victim {
	struct djinn_conn *c;
	struct djinn_session *s;
	struct djinn_tensor *t;
	uint64_t seed;
};

static void victim_open(struct fx *fx, struct victim *v, bool tls,
			uint64_t seed)
{
	char addr[sizeof(fx->d.sock) + 8];

	if (tls) {
		v->c = xtls(NULL, "alice", NULL);
	} else {
		snprintf(addr, sizeof(addr), "unix:%s", fx->d.sock);
		assert_int_equal(djinn_connect(addr, &v->c), 0);
		hold(v->c);
	}
	v->s = xopen(v->c, "victim");
	v->t = upload(v->s, VICTIM_BYTES, seed);
	v->seed = seed;
}

/* The victim is served as before: its bytes, a round trip, its lease. */
static void victim_check_at(int line, struct victim *v)
{
	expect_bytes_at(line, v->t, 0, VICTIM_BYTES, v->seed);
	if (djinn_conn_ping(v->c) || djinn_session_heartbeat(v->s))
		fail_msg("line %d: the victim's round trips fail: %s", line,
			 djinn_last_error());
}
#define victim_check(v) victim_check_at(__LINE__, v)

static void victim_close(struct victim *v)
{
	victim_check(v);
	assert_int_equal(djinn_tensor_release(v->t), 0);
	assert_int_equal(djinn_session_close(v->s), 0);
	disconnect(v->c);
}

/* Both victims: over the unix socket and over TLS as alice. */
struct victims {
	struct victim local, tls;
};

static void victims_open(struct fx *fx, struct victims *v)
{
	victim_open(fx, &v->local, false, 101);
	victim_open(fx, &v->tls, true, 102);
}

static void victims_check_at(int line, struct victims *v)
{
	victim_check_at(line, &v->local);
	victim_check_at(line, &v->tls);
}
#define victims_check(v) victims_check_at(__LINE__, v)

static void victims_close(struct victims *v)
{
	victim_close(&v->local);
	victim_close(&v->tls);
}

/* ---------------------------------------------------------------------- */
/* Metrics */

static uint64_t metric(struct fx *fx, const char *name)
{
	char *m = metrics_scrape(fx), key[96], *p;
	uint64_t v;

	snprintf(key, sizeof(key), "\n%s ", name);
	p = strstr(m, key);
	if (!p)
		fail_msg("no %s in the metrics", name);
	v = strtoull(p + strlen(key), NULL, 10);
	free(m);
	return v;
}

/* Counter @name reaches @want (the daemon may count a refusal after the
 * client has returned); else fail, naming @line. */
static void wait_metric_at(int line, struct fx *fx, const char *name,
			   uint64_t want)
{
	int64_t deadline = dj_now_ms() + DJ_TIMEOUT_MS;
	const struct timespec ms = { 0, 2000000 };
	uint64_t v;

	while ((v = metric(fx, name)) != want && dj_now_ms() < deadline)
		nanosleep(&ms, NULL);
	if (v != want)
		fail_msg("line %d: %s is %llu, not %llu", line, name,
			 (unsigned long long)v, (unsigned long long)want);
}
#define wait_metric(fx, name, want) wait_metric_at(__LINE__, fx, name, want)

/* The TLS counters: @done handshakes, @failed, @refused AUTHs. The
 * kernel took the records of all or none (one kernel on both sides). */
static void tls_counters_at(int line, struct fx *fx, uint64_t done,
			    uint64_t failed, uint64_t refused, bool kernel)
{
	wait_metric_at(line, fx, "djinn_tls_failed_total", failed);
	wait_metric_at(line, fx, "djinn_tls_handshakes_total", done);
	wait_metric_at(line, fx, "djinn_tls_kernel_total", kernel ? done : 0);
	wait_metric_at(line, fx, "djinn_auth_refused_total", refused);
}
#define tls_counters(fx, done, failed, refused, kernel) \
	tls_counters_at(__LINE__, fx, done, failed, refused, kernel)

static bool is_kernel(struct djinn_conn *c)
{
	return !strcmp(djinn_conn_transport(c), "tls, kernel");
}

/* ---------------------------------------------------------------------- */
/* Raw frames over TLS: a bridge thread */

/*
 * struct bridge - a TLS connection to djinnd carried for a test that
 * speaks plaintext frames on @fd
 * @fd:     the test's end of the socketpair
 * @inner:  the thread's end
 * @sock:   the TCP socket to djinnd
 * @key_update: set by the test: a KeyUpdate goes before the next record
 * @notify: set by the test before it shuts its end for writing: the
 *          thread sends close_notify then, and reads on
 * @clean, @reason: how djinnd's side ended: with close_notify, or the
 *          OpenSSL reason of the failure (a received alert's is
 *          SSL_AD_REASON_OFFSET + its description)
 */
struct bridge {
	pthread_t thr;
	SSL_CTX *ctx;
	SSL *ssl;
	int fd, inner, sock;
	bool running, key_update, notify, inner_done, clean;
	int reason;
};

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Records from djinnd: their plaintext to the test. False when the
 * connection ended. */
static bool bridge_down(struct bridge *b, uint8_t *buf, int len)
{
	for (;;) {
		int n = SSL_read(b->ssl, buf, len);

		int e;

		if (n > 0) {
			if (write_all(b->inner, buf, (size_t)n))
				return false;
			continue;
		}
		e = SSL_get_error(b->ssl, n);
		if (e == SSL_ERROR_WANT_READ)
			return true;
		b->clean = e == SSL_ERROR_ZERO_RETURN;
		b->reason = ERR_GET_REASON(ERR_peek_error());
		return false;
	}
}

/* Plaintext from the test, sealed to djinnd. False when either ended. */
static bool bridge_up(struct bridge *b, uint8_t *buf, int len)
{
	ssize_t n = read(b->inner, buf, (size_t)len);
	int off = 0;

	if (n == 0 && __atomic_load_n(&b->notify, __ATOMIC_ACQUIRE)) {
		SSL_shutdown(b->ssl); /* close_notify; djinnd's still to come */
		b->inner_done = true;
		return true;
	}
	if (n <= 0)
		return false;
	/* (the test sees a refusal go missing: no cmocka asserts here) */
	if (__atomic_exchange_n(&b->key_update, false, __ATOMIC_ACQ_REL))
		SSL_key_update(b->ssl, SSL_KEY_UPDATE_NOT_REQUESTED);
	while (off < n) {
		int w = SSL_write(b->ssl, buf + off, (int)n - off);
		struct pollfd p = { .fd = b->sock };

		if (w > 0) {
			off += w;
			continue;
		}
		switch (SSL_get_error(b->ssl, w)) {
		case SSL_ERROR_WANT_WRITE:
			p.events = POLLOUT;
			break;
		case SSL_ERROR_WANT_READ:
			p.events = POLLIN;
			break;
		default:
			return false;
		}
		poll(&p, 1, DJ_TIMEOUT_MS);
	}
	return true;
}

static void *bridge_run(void *arg)
{
	struct bridge *b = arg;
	uint8_t buf[16384];
	bool up = true;

	while (up) {
		struct pollfd p[2] = { { .fd = b->sock, .events = POLLIN },
				       { .fd = b->inner_done ? -1 : b->inner,
					 .events = POLLIN } };

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			up = bridge_down(b, buf, sizeof(buf));
		if (up && p[1].revents)
			up = bridge_up(b, buf, sizeof(buf));
	}
	shutdown(b->inner, SHUT_RDWR); /* the test reads EOF */
	return NULL;
}

/* The bridges open, closed by the teardown when a failure left them:
 * their threads must not outlive the test. */
static struct bridge *bridges[4];

/* A TLS connection as @who (NULL: no certificate) with a plaintext end
 * in ->fd; djinnd's certificate is verified. Or fail. */
static struct bridge *bridge_open(const char *who)
{
	const struct timeval tv = { DJ_TIMEOUT_MS / 1000, 0 };
	char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
	struct bridge *b = NULL;
	int sv[2], fl;

	for (size_t i = 0; i < ARRAY_SIZE(bridges) && !b; i++)
		if (!bridges[i])
			b = bridges[i] = calloc(1, sizeof(*b));
	assert_non_null(b);
	b->fd = b->inner = b->sock = -1;
	b->ctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(b->ctx);
	assert_int_equal(SSL_CTX_set_min_proto_version(b->ctx, TLS1_3_VERSION),
			 1);
	pki_path(ca, sizeof(ca), "ca", "pem");
	assert_int_equal(SSL_CTX_load_verify_locations(b->ctx, ca, NULL), 1);
	SSL_CTX_set_verify(b->ctx, SSL_VERIFY_PEER, NULL);
	if (who) {
		pki_path(cert, sizeof(cert), who, "pem");
		pki_path(key, sizeof(key), who, "key");
		assert_int_equal(
			SSL_CTX_use_certificate_chain_file(b->ctx, cert), 1);
		assert_int_equal(SSL_CTX_use_PrivateKey_file(b->ctx, key,
							     SSL_FILETYPE_PEM),
				 1);
	}
	b->sock = dj_connect_tcp(tls_port);
	assert_true(b->sock >= 0);
	/* the handshake is bounded */
	setsockopt(b->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(b->sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	b->ssl = SSL_new(b->ctx);
	assert_non_null(b->ssl);
	assert_int_equal(X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(b->ssl),
						       "127.0.0.1"),
			 1);
	assert_int_equal(SSL_set_fd(b->ssl, b->sock), 1);
	if (SSL_connect(b->ssl) != 1) {
		char e[256];

		ERR_error_string_n(ERR_get_error(), e, sizeof(e));
		fail_msg("TLS handshake as %s: %s", who ? who : "nobody", e);
	}
	fl = fcntl(b->sock, F_GETFL);
	assert_int_equal(fcntl(b->sock, F_SETFL, fl | O_NONBLOCK), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	b->fd = sv[0];
	b->inner = sv[1];
	assert_int_equal(pthread_create(&b->thr, NULL, bridge_run, b), 0);
	b->running = true;
	return b;
}

/* Wait for @b's thread to end (djinnd's side closed): then ->clean and
 * ->reason say how. */
static void bridge_join(struct bridge *b)
{
	if (b->running)
		pthread_join(b->thr, NULL);
	b->running = false;
}

static void bridge_close(struct bridge *b)
{
	for (size_t i = 0; i < ARRAY_SIZE(bridges); i++)
		if (bridges[i] == b)
			bridges[i] = NULL;
	if (b->fd >= 0)
		close(b->fd); /* the thread sees EOF and ends */
	if (b->running)
		pthread_join(b->thr, NULL);
	if (b->inner >= 0)
		close(b->inner);
	SSL_free(b->ssl);
	SSL_CTX_free(b->ctx);
	if (b->sock >= 0)
		close(b->sock);
	free(b);
}

/* What a failed test left: its bridges and connections. Then the
 * fixture's checks. */
static int teardown(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(bridges); i++)
		if (bridges[i])
			bridge_close(bridges[i]);
	for (size_t i = 0; i < ARRAY_SIZE(held); i++)
		if (held[i])
			disconnect(held[i]);
	return fx_teardown(state);
}

/* AUTH with @token on @fd: the response, unchecked, in @r. */
static void auth_try(int fd, const char *token, struct dj_resp *r)
{
	uint8_t buf[sizeof(struct djinn_auth) + 128];
	struct djinn_auth a = { .len = (uint32_t)strlen(token) };

	assert_true(a.len <= 128);
	memcpy(buf, &a, sizeof(a));
	memcpy(buf + sizeof(a), token, a.len);
	assert_int_equal(
		dj_call(fd, DJINN_MSG_AUTH, 0, buf, sizeof(a) + a.len, r), 1);
}

/* AUTH with @token must name @tenant. */
static void auth_ok_at(int line, int fd, const char *token, const char *tenant)
{
	struct dj_resp r;

	auth_try(fd, token, &r);
	if (r.error)
		fail_msg("line %d: AUTH: %s: %s", line, strerror(-r.error),
			 r.msg);
	assert_int_equal(r.len, sizeof(struct djinn_auth_resp));
	assert_non_null(memchr(r.data, 0, r.len));
	assert_string_equal((const char *)r.data, tenant);
	/* nothing of djinnd's memory after the name (main() has its heap
	 * filled with non-zero bytes) */
	for (size_t i = strlen(tenant) + 1; i < r.len; i++)
		if (((const uint8_t *)r.data)[i])
			fail_msg("line %d: AUTH's answer: byte %zu after the "
				 "name '%s' is %#x, not 0",
				 line, i, tenant, ((const uint8_t *)r.data)[i]);
	dj_resp_free(&r);
}
#define auth_ok(fd, token, tenant) auth_ok_at(__LINE__, fd, token, tenant)

/* AUTH with @token must fail with @err, saying @phrase. */
static void auth_err_at(int line, int fd, const char *token, int err,
			const char *phrase)
{
	struct dj_resp r;

	auth_try(fd, token, &r);
	expect_error_at(line, &r, err, phrase);
	dj_resp_free(&r);
}
#define auth_err(fd, token, err, phrase) \
	auth_err_at(__LINE__, fd, token, err, phrase)

/* ---------------------------------------------------------------------- */
/* The tests */

/* 1. A client certificate of our CA is the tenant its CN names; a big
 * tensor crosses TLS both ways byte for byte. */
static void test_cert_tenant(void **state)
{
	struct fx *fx = *state;
	struct victim v;
	struct djinn_conn *c = xtls(NULL, "alice", NULL);
	struct djinn_session *s = xopen(c, "mine");
	struct djinn_tensor *t;
	const uint64_t off = 3 * MiB + 7, len = 2 * MiB + 13;
	uint8_t *patch;

	victim_open(fx, &v, false, 101);
	assert_string_equal(tenant_of(fx, s, "mine"), "alice");

	t = upload(s, BIG_BYTES, 1);
	expect_bytes(t, 0, BIG_BYTES, 1);
	/* an odd range overwritten: what is around it stays */
	patch = xmalloc(len);
	pattern(patch, 2, off, len);
	assert_int_equal(djinn_tensor_write(t, off, len, patch), 0);
	free(patch);
	expect_bytes(t, 0, off, 1);
	expect_bytes(t, off, len, 2);
	expect_bytes(t, off + len, BIG_BYTES - off - len, 1);
	assert_int_equal(djinn_conn_ping(c), 0);

	tls_counters(fx, 1, 0, 0, is_kernel(c));
	assert_int_equal(djinn_tensor_release(t), 0);
	assert_int_equal(djinn_session_close(s), 0);
	disconnect(c);
	victim_close(&v);
}

/* 1a. The same on a device the I/O thread cannot read (a GPU's data path,
 * --cpu-device-only): the big read goes in parts of 4 MiB, each sealed
 * into records as it comes. */
static void test_cert_tenant_staged(void **state)
{
	test_cert_tenant(state);
}

/* 2. A certificate from another CA: refused in the handshake, djinnd's
 * alert saying why. */
static void test_other_ca(void **state)
{
	struct fx *fx = *state;
	struct victims v;

	victims_open(fx, &v);
	connect_refused(NULL, "mallory", NULL, -EACCES, "unknown ca");
	victims_check(&v);
	tls_counters(fx, 1, 1, 0, is_kernel(v.tls.c));
	victims_close(&v);
}

/* 3. An expired certificate of our CA: refused, saying so. */
static void test_expired(void **state)
{
	struct fx *fx = *state;
	struct victims v;

	victims_open(fx, &v);
	connect_refused(NULL, "carol-expired", NULL, -EACCES, "expired");
	/* carol's token is good: the tenant is not what was refused */
	connect_refused(NULL, "carol-expired", tok_carol, -EACCES, "expired");
	victims_check(&v);
	tls_counters(fx, 1, 2, 0, is_kernel(v.tls.c));
	victims_close(&v);
}

/* 4. Neither certificate nor token: HELLO is served, nothing else
 * before AUTH. */
static void test_anonymous(void **state)
{
	struct fx *fx = *state;
	struct victims v;
	struct djinn_session *s = NULL;
	struct djinn_conn *c;
	struct bridge *b;
	int ret;

	victims_open(fx, &v);
	c = xtls(NULL, NULL, NULL);
	ret = djinn_session_open(c, NULL, &s);
	refused(ret, -EACCES, "before AUTH");
	assert_null(s);
	refused(djinn_conn_ping(c), -EACCES, "no tenant yet");
	disconnect(c);

	/* in raw frames: the refusals keep the connection, AUTH then
	 * names the tenant */
	b = bridge_open(NULL);
	hello(b->fd);
	call_err(b->fd, DJINN_MSG_SESSION_OPEN, 0, NULL, 0, -EACCES,
		 "opcode 2 before AUTH");
	call_err(b->fd, DJINN_MSG_HEARTBEAT, 0, NULL, 0, -EACCES,
		 "before AUTH");
	call_err(b->fd, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, -EPERM,
		 "not served here");
	hello(b->fd);
	auth_ok(b->fd, tok_carol, "carol");
	close_session(b->fd, open_session(b->fd, "after"));
	bridge_close(b);

	assert_int_equal(sessions_now(fx, NULL), 2); /* the victims' */
	victims_check(&v);
	tls_counters(fx, 3, 0, 0, is_kernel(v.tls.c));
	victims_close(&v);
}

/*
 * Record keys (Documentation/security.rst, "TLS"). djinnd does not rekey,
 * and refuses a peer's KeyUpdate in both modes: the kernel's (which
 * fails the receive on it) with a fatal unexpected_message alert, and
 * OpenSSL's (which would take it) by closing the connection; the request
 * sent after it is not answered. Nobody else notices.
 */
static void test_key_update(void **state)
{
	struct fx *fx = *state;
	struct victims v;
	struct bridge *b;
	struct dj_resp r;

	victims_open(fx, &v);
	b = bridge_open("alice");
	hello(b->fd);
	__atomic_store_n(&b->key_update, true, __ATOMIC_RELEASE);
	assert_int_equal(dj_call(b->fd, DJINN_MSG_HEARTBEAT, 0, NULL, 0, &r),
			 0);
	bridge_join(b);
	assert_false(b->clean);
	if (is_kernel(v.tls.c))
		assert_int_equal(b->reason, SSL_AD_REASON_OFFSET +
						    SSL_AD_UNEXPECTED_MESSAGE);
	bridge_close(b);
	victims_check(&v);
	victims_close(&v);
}

/* The peer's close_notify ends its input, in either mode, and djinnd ends
 * its side with its own: the peer sees a clean end, not a truncation. */
static void test_close_notify(void **state)
{
	struct fx *fx = *state;
	struct victims v;
	struct bridge *b;
	struct dj_resp r;

	victims_open(fx, &v);
	b = bridge_open("alice");
	hello(b->fd);
	assert_int_equal(dj_call(b->fd, DJINN_MSG_HEARTBEAT, 0, NULL, 0, &r),
			 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	__atomic_store_n(&b->notify, true, __ATOMIC_RELEASE);
	assert_int_equal(shutdown(b->fd, SHUT_WR), 0);
	assert_int_equal(dj_recv(b->fd, &r, DJ_TIMEOUT_MS), 0);
	bridge_join(b);
	if (!b->clean)
		fail_msg("djinnd's side ended without close_notify (reason "
			 "%d)",
			 b->reason);
	bridge_close(b);
	victims_check(&v);
	victims_close(&v);
}

/* tls.max_records (5 in this daemon's configuration): djinnd sends that
 * many records on an AES-GCM connection, then closes it cleanly after
 * the replies it owed; a new connection is served. */
static void test_max_records(void **state)
{
	struct bridge *b;
	struct dj_resp r;

	for (int round = 0; round < 2; round++) {
		b = bridge_open("alice");
		hello(b->fd); /* the first record */
		for (int i = 1; i < WORN_RECORDS; i++) {
			assert_int_equal(dj_call(b->fd, DJINN_MSG_HEARTBEAT, 0,
						 NULL, 0, &r),
					 1);
			assert_int_equal(r.error, 0);
			dj_resp_free(&r);
		}
		assert_int_equal(dj_recv(b->fd, &r, DJ_TIMEOUT_MS), 0);
		bridge_join(b);
		assert_true(b->clean);
		bridge_close(b);
	}
}

/* 5. Plain TCP to the TLS listener: no connection, and djinnd goes on
 * serving; TLS to a peer that does not speak it: -EPROTO. */
/* A peer that connects to the TLS port and says nothing: the handshake
 * thread gives it up after server.frame_timeout (5 s), and everyone else
 * is served meanwhile. */
static void test_stalled_handshake(void **state)
{
	struct fx *fx = *state;
	struct victims v;
	int fd;

	victims_open(fx, &v);
	fd = dj_connect_tcp(tls_port);
	assert_true(fd >= 0);
	victims_check(&v);
	assert_int_equal(dj_wait_eof(fd, 15000), 1);
	close(fd);
	/* (the line may come after the close the test saw) */
	wait_log(fx->d.log, "handshake not finished in 5000 ms");
	victims_check(&v);
	victims_close(&v);
}

static void test_plain_tcp(void **state)
{
	struct fx *fx = *state;
	char metrics[48];
	struct victims v;
	struct djinn_conn *c = NULL, *ok;
	struct djinn_connect_opts o = { .size = sizeof(o) };
	char ca[PATH_MAX];
	int fd, ret;

	victims_open(fx, &v);
	/* its HELLO is no ClientHello: djinnd closes (after a TLS alert
	 * that libdjinn reads as the start of a frame) */
	ret = djinn_connect(tcp_addr, &c);
	if (!ret)
		fail_msg("plain TCP to the TLS listener connected (%s)",
			 djinn_conn_transport(c));
	if (ret != -ECONNRESET && ret != -EPROTO)
		fail_msg("plain TCP to the TLS listener: %s: %s",
			 strerror(-ret), djinn_last_error());
	assert_null(c);

	/* a raw HELLO in the clear: closed, nothing answered in the clear */
	fd = dj_connect_tcp(tls_port);
	assert_true(fd >= 0);
	assert_int_equal(dj_send(fd, DJINN_MSG_HELLO, dj_next_id(), 0, NULL, 0),
			 0);
	{
		char *got = dj_read_all(fd, DJ_TIMEOUT_MS);

		assert_non_null(got);
		/* a TLS alert record (type 21) at most, never a frame */
		assert_true(!got[0] || got[0] == 21);
		free(got);
	}
	close(fd);

	pki_path(ca, sizeof(ca), "ca", "pem");
	o.tls_ca = ca;
	snprintf(metrics, sizeof(metrics), "tls:127.0.0.1:%u",
		 fx->d.metrics_port);
	ret = djinn_connect_opts(metrics, &o, &c);
	refused(ret, -EPROTO, "TLS handshake");
	assert_null(c);

	victims_check(&v);
	ok = xtls(NULL, "bob", NULL);
	assert_int_equal(djinn_conn_ping(ok), 0);
	disconnect(ok);
	tls_counters(fx, 2, 2, 0, is_kernel(v.tls.c));
	victims_close(&v);
}

/* 6. Bearer tokens: bob's names bob; a wrong one is refused and closes
 * the connection; AUTH once only, and only on TLS. */
static void test_tokens(void **state)
{
	struct fx *fx = *state;
	struct victims v;
	struct djinn_conn *c;
	struct djinn_session *s;
	char prefix[33];
	struct bridge *b;
	int fd;

	victims_open(fx, &v);
	c = xtls(NULL, NULL, tok_bob);
	s = xopen(c, "bobs");
	assert_string_equal(tenant_of(fx, s, "bobs"), "bob");
	assert_int_equal(djinn_session_close(s), 0);
	disconnect(c);

	connect_refused(NULL, NULL, tok_wrong, -EACCES,
			"AUTH: the token names no tenant");
	/* a prefix of a good token is a wrong one */
	memcpy(prefix, tok_bob, 32);
	prefix[32] = 0;
	connect_refused(NULL, NULL, prefix, -EACCES, "names no tenant");

	/* raw: once, then -EISCONN; the second names no one else */
	b = bridge_open(NULL);
	auth_ok(b->fd, tok_carol, "carol");
	auth_err(b->fd, tok_carol, -EISCONN, "tenant carol already");
	hello(b->fd);
	bridge_close(b);
	/* a certificate's tenant is fixed too */
	b = bridge_open("alice");
	auth_err(b->fd, tok_carol, -EISCONN, "tenant alice already");
	bridge_close(b);
	/* a wrong token: refused, then closed */
	b = bridge_open(NULL);
	auth_err(b->fd, tok_wrong, -EACCES, "names no tenant");
	expect_eof(b->fd);
	bridge_close(b);
	/* a malformed AUTH is no guess: the connection stays */
	b = bridge_open(NULL);
	{
		struct djinn_auth a = { .len = 40 };

		call_err(b->fd, DJINN_MSG_AUTH, 0, &a, sizeof(a), -EINVAL,
			 "a token of 1 to 512 bytes");
	}
	auth_ok(b->fd, tok_carol, "carol");
	bridge_close(b);
	/* on the unix socket the kernel says who it is */
	fd = xconnect(fx->d.sock);
	auth_err(fd, tok_bob, -EOPNOTSUPP, "AUTH is for TLS connections");
	hello(fd);
	close(fd);

	victims_check(&v);
	tls_counters(fx, 8, 0, 3, is_kernel(v.tls.c));
	victims_close(&v);
}

/* Whether bob's token names bob now: a connection with it, or -EACCES.
 * Polls until it is @want (SIGHUP's reload is asynchronous), 20 s at
 * most. */
static void bob_until(struct fx *fx, bool want)
{
	for (int i = 0; i < 2000; i++) {
		struct djinn_conn *c;
		int ret = tls_connect(NULL, NULL, tok_bob, &c);

		if (!ret)
			djinn_disconnect(c);
		else if (ret != -EACCES)
			fail_msg("bob's token: %s: %s", strerror(-ret),
				 djinn_last_error());
		if (!ret == want)
			return;
		usleep(10000);
	}
	fail_msg("bob's token still %s after 20 s",
		 want ? "refused" : "accepted");
}

/* Write @text as tls.tokens (NULL: remove it), then SIGHUP. */
static void tokens_file(struct fx *fx, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	pki_path(path, sizeof(path), "tokens", "txt");
	if (!text) {
		assert_int_equal(unlink(path), 0);
	} else {
		f = fopen(path, "w");
		assert_non_null(f);
		fputs(text, f);
		assert_int_equal(fclose(f), 0);
	}
	assert_int_equal(kill(fx->d.pid, SIGHUP), 0);
}

/* 6b. Revocation fails closed: a tokens file removed, or one that does
 * not read (a hash with a sign, one with 0x, a line over 510 bytes),
 * revokes every token at SIGHUP, until a reload reads a good file. */
static void test_tokens_revoked(void **state)
{
	struct fx *fx = *state;
	char good[1024], bad[2048], *line;
	FILE *f = fmemopen(good, sizeof(good), "w");
	size_t n;

	assert_non_null(f);
	token_line(f, "bob", tok_bob);
	token_line(f, "carol", tok_carol);
	fputc(0, f);
	assert_int_equal(fclose(f), 0);
	bob_until(fx, true);

	tokens_file(fx, NULL);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);

	/* carol's hash with its first two digits as "+f", and as "0x":
	 * the file does not read, so bob's good line goes too */
	n = strlen(good);
	memcpy(bad, good, n + 1);
	line = strchr(strchr(bad, '\n') + 1, ' ') + 1;
	line[0] = '+';
	line[1] = 'f';
	tokens_file(fx, bad);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);
	line[0] = '0';
	line[1] = 'x';
	tokens_file(fx, bad);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);

	/* a comment line of 600 bytes before them */
	memset(bad, 'x', 600);
	bad[0] = '#';
	bad[600] = '\n';
	memcpy(bad + 601, good, n + 1);
	tokens_file(fx, bad);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);
	/* a line naming uid:0: no token may name a tenant djinnd gives
	 * itself, and the file does not read */
	snprintf(bad, sizeof(bad), "%suid:0 %064d\n", good, 0);
	tokens_file(fx, bad);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);
	/* carol's line alone is what the file says: bob's token is gone */
	tokens_file(fx, strchr(good, '\n') + 1);
	bob_until(fx, false);
	tokens_file(fx, good);
	bob_until(fx, true);
	wait_log(fx->d.log, "every bearer token is revoked");
}

/* 7. Another tenant's session: bob, holding alice's session id and its
 * token, does not get in (as SESSION_BIND refuses another user's kernel
 * session with -EPERM), and alice's session is as it was. */
static void test_attach_other_tenant(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn *ca = xtls(NULL, "alice", NULL);
	struct djinn_conn *cb = xtls(NULL, NULL, tok_bob);
	struct djinn_session *sa = xopen(ca, "alices"), *sb = NULL;
	struct djinn_tensor *t = upload(sa, VICTIM_BYTES, 7);
	struct djinn_tensor_info ti;
	struct djinn_session_info si;
	struct djinn_tensor_io io;
	struct bridge *b;
	int ret;

	assert_int_equal(djinn_session_info(sa, &si), 0);
	assert_int_equal(djinn_tensor_info(t, &ti), 0);
	io = (struct djinn_tensor_io){ .handle = ti.handle, .len = 64 };

	/* by id alone: not bob's connection's session */
	b = bridge_open("bob");
	call_err(b->fd, DJINN_MSG_TENSOR_READ, si.id, &io, sizeof(io), -EPERM,
		 "is not attached to this connection");

	/* with its token */
	ret = djinn_session_attach(cb, si.id, si.token, &sb);
	if (!ret) {
		djinn_session_close(sb);
		fail_msg("bob (token) attached to alice's session %llu",
			 (unsigned long long)si.id);
	}
	refused(ret, -EPERM, "");
	assert_null(sb);
	call_err(b->fd, DJINN_MSG_SESSION_ATTACH, si.id, si.token, 16, -EPERM,
		 NULL);
	call_err(b->fd, DJINN_MSG_TENSOR_READ, si.id, &io, sizeof(io), -EPERM,
		 "is not attached to this connection");
	hello(b->fd);
	bridge_close(b);
	assert_int_equal(djinn_conn_ping(cb), 0);

	assert_string_equal(tenant_of(fx, sa, "alices"), "alice");
	expect_bytes(t, 0, VICTIM_BYTES, 7);
	assert_int_equal(djinn_session_heartbeat(sa), 0);
	assert_int_equal(djinn_tensor_release(t), 0);
	assert_int_equal(djinn_session_close(sa), 0);
	disconnect(ca);
	disconnect(cb);
}

/* 8. The tenant a client writes at SESSION_OPEN is a label. */
static void test_label_spoof(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn *cb = xtls(NULL, NULL, tok_bob);
	struct djinn_conn *cm = xtls(NULL, "alice", NULL);
	struct djinn_session *sb = xopen(cb, "alice");
	struct djinn_session *sm = xopen(cm, "bob");
	struct bridge *b;
	uint64_t sid;

	assert_string_equal(tenant_of(fx, sb, "alice"), "bob");
	assert_string_equal(tenant_of(fx, sm, "bob"), "alice");
	/* and in raw frames after AUTH */
	b = bridge_open(NULL);
	auth_ok(b->fd, tok_carol, "carol");
	sid = open_session(b->fd, "alice");
	assert_string_equal(session_entry(fx, sid).tenant, "carol");
	close_session(b->fd, sid);
	bridge_close(b);

	assert_int_equal(djinn_session_close(sb), 0);
	assert_int_equal(djinn_session_close(sm), 0);
	disconnect(cb);
	disconnect(cm);
}

/* 9. A certificate of our CA whose CN is no tenant name: refused. */
static void test_cn_not_tenant(void **state)
{
	struct fx *fx = *state;
	struct victims v;

	victims_open(fx, &v);
	/* the client hears the alert; djinnd's log says which rule (a
	 * line it writes after sending the alert) */
	connect_refused(NULL, "spaced", NULL, -EACCES, "bad certificate");
	wait_log(fx->d.log, "'alice smith' is not a tenant name");
	/* a CN of a name djinnd gives local users itself is no one's
	 * (it was uid 0's tenant); two CNs, or a NUL inside one ("alice\0.x"
	 * was alice), are refused */
	connect_refused(NULL, "uidzero", NULL, -EACCES, "bad certificate");
	wait_log(fx->d.log, "'uid:0' is a name djinnd gives itself");
	connect_refused(NULL, "twocn", NULL, -EACCES, "bad certificate");
	wait_log(fx->d.log, "has several subject CNs");
	connect_refused(NULL, "nulcn", NULL, -EACCES, "bad certificate");
	wait_log(fx->d.log, "has a NUL inside it");
	victims_check(&v);
	tls_counters(fx, 1, 4, 0, is_kernel(v.tls.c));
	victims_close(&v);
}

/* Copy certificate and key @from to @to (a new file each: a new inode,
 * as a rotation that renames files into place gives). */
static void cert_copy(const char *from, const char *to)
{
	static const char *const ext[] = { "pem", "key" };

	for (int i = 0; i < 2; i++) {
		char a[PATH_MAX], b[PATH_MAX], tmp[PATH_MAX + 4], buf[8192];
		FILE *in, *out;
		size_t n;

		pki_path(a, sizeof(a), from, ext[i]);
		pki_path(b, sizeof(b), to, ext[i]);
		snprintf(tmp, sizeof(tmp), "%s.new", b);
		in = fopen(a, "r");
		out = fopen(tmp, "w");
		assert_non_null(in);
		assert_non_null(out);
		while ((n = fread(buf, 1, sizeof(buf), in)))
			assert_int_equal(fwrite(buf, 1, n, out), n);
		fclose(in);
		assert_int_equal(fclose(out), 0);
		assert_int_equal(rename(tmp, b), 0);
	}
}

/* libdjinn keeps contexts by their files: a certificate rotated in place
 * (the same path) is the one the next connect presents. */
static void test_rotated_certificate(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn *c;
	struct djinn_session *s;

	cert_copy("alice", "rotating");
	c = xtls(NULL, "rotating", NULL);
	s = xopen(c, "before");
	assert_string_equal(tenant_of(fx, s, "before"), "alice");
	assert_int_equal(djinn_session_close(s), 0);
	disconnect(c);

	cert_copy("bob", "rotating");
	c = xtls(NULL, "rotating", NULL);
	s = xopen(c, "after");
	assert_string_equal(tenant_of(fx, s, "after"), "bob");
	assert_int_equal(djinn_session_close(s), 0);
	disconnect(c);
}

/* 10. The client trusts another CA than djinnd's: it refuses djinnd. A
 * certificate without its key is no certificate. */
static void test_wrong_server_ca(void **state)
{
	struct fx *fx = *state;
	struct djinn_connect_opts o = { .size = sizeof(o) };
	char ca[PATH_MAX], cert[PATH_MAX];
	struct djinn_conn *c = NULL;
	struct victims v;

	victims_open(fx, &v);
	connect_refused("other-ca", "alice", NULL, -EACCES,
			"djinnd's certificate");
	connect_refused("other-ca", NULL, tok_bob, -EACCES,
			"djinnd's certificate");

	victims_check(&v);
	tls_counters(fx, 1, 2, 0, is_kernel(v.tls.c));

	/* (libdjinn reads its files after connecting: djinnd counts a
	 * failed handshake for this one too, so it comes last) */
	pki_path(ca, sizeof(ca), "ca", "pem");
	pki_path(cert, sizeof(cert), "alice", "pem");
	o.tls_ca = ca;
	o.tls_cert = cert;
	refused(djinn_connect_opts(tls_addr, &o, &c), -EINVAL, "needs its key");
	assert_null(c);
	victims_close(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cert_tenant, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cert_tenant_staged,
						setup_staged, teardown),
		cmocka_unit_test_setup_teardown(test_rotated_certificate, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_stalled_handshake, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_other_ca, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expired, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anonymous, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_plain_tcp, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tokens_revoked, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_attach_other_tenant, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_label_spoof, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cn_not_tenant, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_key_update, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_notify, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_max_records, setup_worn,
						teardown),
		cmocka_unit_test_setup_teardown(test_wrong_server_ca, setup,
						teardown),
	};

	/* The daemons this starts fill what malloc() gives with non-zero
	 * bytes (glibc's MALLOC_PERTURB_; ASan fills them itself), so an
	 * answer that carries uninitialised heap shows it. */
	setenv("MALLOC_PERTURB_", "165", 1);
	int ret;

	/* what a test does not pass, the environment must not fill in */
	unsetenv("DJINN_TLS_CA");
	unsetenv("DJINN_TLS_CERT");
	unsetenv("DJINN_TLS_KEY");
	unsetenv("DJINN_TOKEN");
	ret = fx_can_run();
	if (ret)
		return ret;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
