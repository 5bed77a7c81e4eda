// SPDX-License-Identifier: MIT
/*
 * tls:HOST:PORT: TLS 1.3 to djinnd (Documentation/security.rst, "TLS").
 *
 * The handshake runs on the connected socket before any thread of the
 * connection starts. Then the kernel takes the records where it can
 * (lib/ktls.h), and the socket is used as a plain one; else OpenSSL
 * seals and opens them on memory BIOs: senders seal under
 * conn->send_lock (their order is the records' order), the reader opens
 * what it receives, and the SSL object is shared under t->lock, never
 * held across a blocking call.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tls.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"
#include "ktls.h"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif

#define SEAL_MAX (64u << 10) /* plaintext sealed per send */

struct dj_tls {
	SSL_CTX *ctx;
	SSL *ssl;
	bool kernel;
	struct ktls_secrets secrets;
	pthread_mutex_t lock; /* ssl, rbio, wbio: user mode */
	BIO *rbio, *wbio;
	uint8_t *in; /* records received (the reader's) */
	uint8_t *out; /* records to send (under conn->send_lock) */
	size_t out_cap;
	/* the first TLS failure a receive saw (an alert), and what it said */
	int fail;
	char fail_why[DJINN_MAX_ERROR_MSG];
};

static const char *opt_or_env(const char *v, const char *env)
{
	if (v && *v)
		return v;
	v = getenv(env);
	return v && *v ? v : NULL;
}

/* What TLS alert @desc means to the caller: about certificates (djinnd
 * refused ours, or we refused its), -EACCES; close_notify, -ECONNRESET;
 * the rest -EPROTO. */
static int alert_errno(int desc)
{
	switch (desc) {
	case SSL_AD_BAD_CERTIFICATE:
	case SSL_AD_UNSUPPORTED_CERTIFICATE:
	case SSL_AD_CERTIFICATE_REVOKED:
	case SSL_AD_CERTIFICATE_EXPIRED:
	case SSL_AD_CERTIFICATE_UNKNOWN:
	case SSL_AD_UNKNOWN_CA:
	case SSL_AD_ACCESS_DENIED:
	case SSL_AD_CERTIFICATE_REQUIRED:
		return -EACCES;
	case SSL_AD_CLOSE_NOTIFY:
		return -ECONNRESET;
	}
	return -EPROTO;
}

/* OpenSSL's error @e (an alert it received, a verification): errno. */
static int alert_err(unsigned long e)
{
	if (ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED)
		return -EACCES;
	return alert_errno(ERR_GET_REASON(e) - SSL_AD_REASON_OFFSET);
}

/* OpenSSL's first error as one line: its errno. */
static int ssl_fail(char *why, size_t len, const char *what)
{
	unsigned long e = ERR_peek_error();
	char buf[200];
	int err = e ? alert_err(e) : -EPROTO;

	snprintf(why, len, "%s: %s", what,
		 ktls_ssl_error(buf, sizeof(buf), "failed"));
	return err;
}

void __djinn_tls_free(struct dj_tls *t)
{
	if (!t)
		return;
	SSL_free(t->ssl);
	SSL_CTX_free(t->ctx);
	OPENSSL_cleanse(&t->secrets, sizeof(t->secrets));
	pthread_mutex_destroy(&t->lock);
	free(t->in);
	free(t->out);
	free(t);
}

/* A context of these files (each may be NULL), into t->ctx. */
static int tls_ctx_make(struct dj_tls *t, const char *ca, const char *cert,
			const char *key, char *why, size_t len)
{
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx || !SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(t->ctx, KTLS_CIPHERSUITES))
		return ssl_fail(why, len, "TLS context");
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	ktls_ctx_init(t->ctx);
	if (ca ? SSL_CTX_load_verify_locations(t->ctx, ca, NULL) != 1 :
		 SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		ssl_fail(why, len, ca ? ca : "the system's CA certificates");
		return -EINVAL;
	}
	if (!cert != !key) {
		snprintf(why, len,
			 "a client certificate needs its key and a key its "
			 "certificate (DJINN_TLS_CERT, DJINN_TLS_KEY)");
		return -EINVAL;
	}
	if (cert &&
	    (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1 ||
	     SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1 ||
	     SSL_CTX_check_private_key(t->ctx) != 1)) {
		ssl_fail(why, len, cert);
		return -EINVAL;
	}
	return 0;
}

/*
 * Contexts already made, by their files: OpenSSL 3 takes most of a
 * millisecond to make one and read a CA, a certificate and a key, more
 * than the handshake's own work. A file that changed (its inode, size or
 * time) makes a new one: a rotated certificate is read at the next
 * connect.
 */
#define CTX_CACHE 4

struct ctx_file {
	char *path; /* NULL: none */
	struct stat st;
};

static struct ctx_cache {
	SSL_CTX *ctx;
	struct ctx_file f[3]; /* ca, cert, key */
	uint64_t used;
} ctx_cache[CTX_CACHE];
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ctx_clock;

static bool file_same(const struct ctx_file *f, const char *path,
		      const struct stat *st)
{
	if (!path || !f->path)
		return !path && !f->path;
	return !strcmp(path, f->path) && st->st_dev == f->st.st_dev &&
	       st->st_ino == f->st.st_ino && st->st_size == f->st.st_size &&
	       st->st_mtim.tv_sec == f->st.st_mtim.tv_sec &&
	       st->st_mtim.tv_nsec == f->st.st_mtim.tv_nsec;
}

/* A cached context of these files, with a reference for the caller, or
 * NULL. */
static SSL_CTX *ctx_lookup(const char *const paths[3], const struct stat st[3])
{
	SSL_CTX *ctx = NULL;

	pthread_mutex_lock(&ctx_lock);
	for (unsigned int i = 0; i < CTX_CACHE && !ctx; i++) {
		struct ctx_cache *e = &ctx_cache[i];
		bool same = e->ctx != NULL;

		for (unsigned int k = 0; k < 3 && same; k++)
			same = file_same(&e->f[k], paths[k], &st[k]);
		if (same && SSL_CTX_up_ref(e->ctx)) {
			ctx = e->ctx;
			e->used = ++ctx_clock;
		}
	}
	pthread_mutex_unlock(&ctx_lock);
	return ctx;
}

/* Keep @ctx for these files, in the place used longest ago. */
static void ctx_keep(SSL_CTX *ctx, const char *const paths[3],
		     const struct stat st[3])
{
	struct ctx_cache *e = &ctx_cache[0];
	struct ctx_file f[3] = { { 0 } };

	for (unsigned int k = 0; k < 3; k++) {
		if (paths[k] && !(f[k].path = strdup(paths[k])))
			goto out;
		f[k].st = st[k];
	}
	if (!SSL_CTX_up_ref(ctx))
		goto out;
	pthread_mutex_lock(&ctx_lock);
	for (unsigned int i = 1; i < CTX_CACHE; i++)
		if (ctx_cache[i].used < e->used)
			e = &ctx_cache[i];
	SSL_CTX_free(e->ctx);
	for (unsigned int k = 0; k < 3; k++) {
		free(e->f[k].path);
		e->f[k] = f[k];
		f[k].path = NULL;
	}
	e->ctx = ctx;
	e->used = ++ctx_clock;
	pthread_mutex_unlock(&ctx_lock);
out:
	for (unsigned int k = 0; k < 3; k++)
		free(f[k].path);
}

static int tls_ctx(struct dj_tls *t, const struct djinn_connect_opts *o,
		   char *why, size_t len)
{
	const char *ca = opt_or_env(DJ_OPT(o, tls_ca), "DJINN_TLS_CA");
	const char *cert = opt_or_env(DJ_OPT(o, tls_cert), "DJINN_TLS_CERT");
	const char *key = opt_or_env(DJ_OPT(o, tls_key), "DJINN_TLS_KEY");
	const char *const paths[3] = { ca, cert, key };
	struct stat st[3] = { { 0 } };
	bool cacheable = true;
	int ret;

	for (unsigned int k = 0; k < 3; k++)
		if (paths[k] && stat(paths[k], &st[k]))
			cacheable = false; /* the load says why */
	if (cacheable) {
		t->ctx = ctx_lookup(paths, st);
		if (t->ctx)
			return 0;
	}
	ret = tls_ctx_make(t, ca, cert, key, why, len);
	if (!ret && cacheable)
		ctx_keep(t->ctx, paths, st);
	return ret;
}

/*
 * SSL_connect(), without the SIGPIPE a peer that closed would raise in
 * the program (OpenSSL writes the socket with write(2)): blocked for the
 * handshake, and one it raised taken before the mask is restored.
 */
static int handshake(SSL *ssl)
{
	static const struct timespec now = { 0, 0 };
	sigset_t pipe, old, pending;
	bool was_pending;
	int r;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	r = SSL_connect(ssl);
	sigpending(&pending);
	if (!was_pending && sigismember(&pending, SIGPIPE))
		sigtimedwait(&pipe, NULL, &now);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

int __djinn_tls_new(const struct djinn_connect_opts *o, struct dj_tls **out,
		    char *why, size_t len)
{
	struct dj_tls *t = calloc(1, sizeof(*t));
	int ret;

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	ret = tls_ctx(t, o, why, len);
	if (ret) {
		__djinn_tls_free(t);
		return ret;
	}
	*out = t;
	return 0;
}

int __djinn_tls_handshake(struct dj_tls *t, int fd, const char *host, char *why,
			  size_t len)
{
	struct in6_addr a6;
	int ret = -ENOMEM;

	t->ssl = SSL_new(t->ctx);
	if (!t->ssl || ktls_attach(t->ssl, &t->secrets) ||
	    !SSL_set_fd(t->ssl, fd))
		goto fail;
	/* The server's certificate must name @host: an address as an IP
	 * SAN, a name as a DNS one. */
	if (inet_pton(AF_INET, host, &a6) == 1 ||
	    inet_pton(AF_INET6, host, &a6) == 1) {
		if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl),
						   host))
			goto fail;
	} else if (!SSL_set1_host(t->ssl, host) ||
		   !SSL_set_tlsext_host_name(t->ssl, host)) {
		goto fail;
	}
	ERR_clear_error();
	if (handshake(t->ssl) != 1) {
		long v = SSL_get_verify_result(t->ssl);

		if (v != X509_V_OK) {
			snprintf(why, len, "djinnd's certificate: %s",
				 X509_verify_cert_error_string(v));
			ERR_clear_error();
			ret = -EACCES;
		} else {
			ret = ssl_fail(why, len, "TLS handshake");
		}
		goto fail;
	}
	ret = ktls_install(fd, t->ssl, &t->secrets, false);
	if (!ret) {
		t->kernel = true;
	} else if (ret == -EPROTO) {
		snprintf(why, len,
			 "kernel TLS took the sending keys and "
			 "refused the receiving ones");
		goto fail;
	} else {
		BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());

		t->in = malloc(SEAL_MAX);
		if (!r || !w || !t->in) {
			BIO_free(r);
			BIO_free(w);
			ret = -ENOMEM;
			goto fail;
		}
		BIO_set_mem_eof_return(r, -1);
		SSL_set_bio(t->ssl, r, w);
		t->rbio = r;
		t->wbio = w;
		dj_dbg("TLS: userspace records (kernel TLS: %s)",
		       strerror(-ret));
	}
	return 0;
fail:
	return ret;
}

const char *__djinn_tls_mode(const struct dj_tls *t)
{
	return t->kernel ? "tls, kernel" : "tls, user";
}

bool __djinn_tls_user(const struct dj_tls *t)
{
	return t && !t->kernel;
}

/* Send all of @len bytes. */
static int send_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t r = send(fd, p, len, MSG_NOSIGNAL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

int __djinn_tls_sendv(struct dj_tls *t, int fd, const struct iovec *v, int n)
{
	int i = 0, ret = 0;
	size_t off = 0;

	while (i < n && !ret) {
		size_t plain = 0, pending;

		pthread_mutex_lock(&t->lock);
		while (i < n && plain < SEAL_MAX) {
			size_t l = v[i].iov_len - off;

			if (l > SEAL_MAX - plain)
				l = SEAL_MAX - plain;
			if (l &&
			    SSL_write(t->ssl, (uint8_t *)v[i].iov_base + off,
				      (int)l) != (int)l) {
				ret = -EPROTO;
				break;
			}
			plain += l;
			off += l;
			if (off == v[i].iov_len) {
				i++;
				off = 0;
			}
		}
		pending = BIO_ctrl_pending(t->wbio);
		if (!ret && pending > t->out_cap) {
			uint8_t *b = realloc(t->out, pending);

			if (b) {
				t->out = b;
				t->out_cap = pending;
			} else {
				ret = -ENOMEM;
			}
		}
		if (!ret &&
		    BIO_read(t->wbio, t->out, (int)pending) != (int)pending)
			ret = -EPROTO;
		pthread_mutex_unlock(&t->lock);
		if (!ret)
			ret = send_all(fd, t->out, pending);
	}
	return ret;
}

/* Kernel TLS failed a receive with EIO: a record that is not data came.
 * Its type and, for an alert, what it says. */
static int kernel_record(int fd, char *why, size_t len)
{
	uint8_t rec[64], type = 0;
	long r = ktls_recv_record(fd, &type, rec, sizeof(rec));

	if (r >= 2 && type == KTLS_REC_ALERT) {
		snprintf(why, len, "djinnd sent a TLS alert: %s",
			 SSL_alert_desc_string_long(rec[1]));
		return alert_errno(rec[1]);
	}
	snprintf(why, len, "a TLS record the kernel does not pass on%s",
		 r < 0 ? " (unreadable)" : "");
	return -EPROTO;
}

static ssize_t tls_recv(struct dj_tls *t, int fd, void *buf, size_t len,
			int flags, int *err, char *why, size_t why_len);

ssize_t __djinn_tls_recv(struct dj_tls *t, int fd, void *buf, size_t len,
			 int flags, int *err, char *why, size_t why_len)
{
	ssize_t r = tls_recv(t, fd, buf, len, flags, err, why, why_len);

	/* Kept for __djinn_tls_alert(): the connection may be marked dead
	 * for another reason first (a send that met the reset). */
	if (*err && *err != -ECONNRESET && !t->fail) {
		t->fail = *err;
		snprintf(t->fail_why, sizeof(t->fail_why), "%s", why);
	}
	return r;
}

static ssize_t tls_recv(struct dj_tls *t, int fd, void *buf, size_t len,
			int flags, int *err, char *why, size_t why_len)
{
	char e[200];
	ssize_t r;

	*err = 0;
	if (t->kernel) {
		r = recv(fd, buf, len, flags);
		if (r < 0 && errno == EIO) {
			*err = kernel_record(fd, why, why_len);
			errno = -*err;
		}
		return r;
	}
	for (;;) {
		int n, code;

		pthread_mutex_lock(&t->lock);
		ERR_clear_error();
		n = SSL_read(t->ssl, buf,
			     (int)(len > INT32_MAX ? INT32_MAX : len));
		code = n > 0 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, n);
		if (code != SSL_ERROR_NONE && code != SSL_ERROR_WANT_READ) {
			unsigned long x = ERR_peek_error();

			*err = code == SSL_ERROR_ZERO_RETURN ? -ECONNRESET :
			       x			     ? alert_err(x) :
							       -EPROTO;
			snprintf(why, why_len, "TLS: %s",
				 code == SSL_ERROR_ZERO_RETURN ?
					 "djinnd closed the connection" :
					 ktls_ssl_error(e, sizeof(e),
							"a malformed record"));
		}
		pthread_mutex_unlock(&t->lock);
		if (n > 0)
			return n;
		if (*err) {
			errno = -*err;
			return -1;
		}
		r = recv(fd, t->in, SEAL_MAX, flags);
		if (r <= 0)
			return r;
		pthread_mutex_lock(&t->lock);
		n = BIO_write(t->rbio, t->in, (int)r);
		pthread_mutex_unlock(&t->lock);
		if (n != (int)r) {
			*err = -ENOMEM;
			snprintf(why, why_len, "TLS: out of memory");
			errno = ENOMEM;
			return -1;
		}
	}
}

int __djinn_tls_alert(struct dj_tls *t, int fd, char *why, size_t len)
{
	uint8_t buf[256];
	int err = 0;

	for (int i = 0; i < 8 && !t->fail; i++) {
		ssize_t r = __djinn_tls_recv(t, fd, buf, sizeof(buf),
					     MSG_DONTWAIT, &err, why, len);

		if (r <= 0)
			break;
	}
	if (t->fail)
		snprintf(why, len, "%s", t->fail_why);
	return t->fail;
}
