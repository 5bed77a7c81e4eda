// SPDX-License-Identifier: MIT
/*
 * TLS listeners: the context, the handshake, identity from certificates
 * (tokens: net/tokens.c), and userspace records where the kernel
 * cannot. See tls.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "hex.h"
#include "ktls.h"
#include "log.h"
#include "names.h"
#include "server.h"
#include "net/conn.h"
#include "net/tls.h"

/*
 * The handshake thread: every TLS handshake runs there, nonblocking, on
 * an epoll of their sockets, so that a flood of them (a public listener,
 * no credentials needed) costs the I/O thread nothing but the accepts.
 * Finished ones go back to the I/O thread through an eventfd its ring
 * reads (conn_handshake_done()).
 */
struct tls_worker {
	pthread_t thread;
	bool started;
	int ep; /* the sockets in handshake, and @wake */
	int wake; /* eventfd: new handshakes, or stop */
	pthread_mutex_t lock; /* @in, @done, @stop */
	struct list_head in; /* submitted, not taken yet */
	struct list_head done; /* finished, for the I/O thread */
	bool stop;
	uint64_t timeout_ns;
	/* the I/O thread's side */
	struct server *srv;
	struct loop_notify notify; /* finished handshakes: hs_reap() */
};

struct tls_server {
	SSL_CTX *ctx;
	struct tls_worker w;
	enum { ID_CN, ID_SAN_DNS, ID_SAN_EMAIL, ID_SAN_URI } id_from;
	bool ktls;
};

struct tls_conn {
	struct tls_server *ts;
	/* the handshake thread's (tls_handshake_start()) */
	struct list_head node;
	struct conn *owner;
	uint64_t t0;
	bool in_epoll;
	int hs_ret;
	char hs_why[256];
	char hs_tenant[DJINN_TENANT_LEN];
	SSL *ssl;
	int fd;
	enum tls_mode mode;
	struct ktls_secrets secrets;
	const char *how; /* "kernel", or why userspace */
	char why[192]; /* why the verify callback refused the certificate */
	BIO *rbio, *wbio; /* TLS_USER */
	uint8_t *tx; /* sealed records being sent */
	uint64_t tx_len, tx_off, tx_cap, tx_plain;
	bool key_update; /* TLS_USER: the peer sent a KeyUpdate */
	uint64_t records, max_records; /* sent, and at most (AES-GCM) */
};

/* ---------------------------------------------------------------------- */
/* Identity */

/* @x's one subject CN as UTF-8 into @name[@len]: 1, 0 if it has none,
 * -EACCES with @why for several, an unreadable one, a NUL inside one, or
 * one too long. */
static int cert_cn(X509 *x, char *name, size_t len, char *why, size_t wlen)
{
	X509_NAME *n = X509_get_subject_name(x);
	int i = X509_NAME_get_index_by_NID(n, NID_commonName, -1);
	unsigned char *u = NULL;
	int ul;

	if (i < 0)
		return 0;
	if (X509_NAME_get_index_by_NID(n, NID_commonName, i) >= 0) {
		snprintf(why, wlen,
			 "the client certificate has several subject CNs");
		return -EACCES;
	}
	ul = ASN1_STRING_to_UTF8(
		&u, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(n, i)));
	if (ul < 0) {
		snprintf(why, wlen,
			 "the client certificate's subject CN is not text");
		return -EACCES;
	}
	if (memchr(u, 0, (size_t)ul) || (size_t)ul >= len) {
		snprintf(why, wlen, "the client certificate's subject CN %s",
			 (size_t)ul >= len ? "is too long" :
					     "has a NUL inside it");
		OPENSSL_free(u);
		return -EACCES;
	}
	memcpy(name, u, (size_t)ul);
	name[ul] = 0;
	OPENSSL_free(u);
	return 1;
}

/* The tenant certificate @x names: 0 and @out, or -ENOENT (no
 * certificate), or -EACCES with @why. */
static int cert_tenant(const struct tls_server *ts, X509 *x,
		       char out[DJINN_TENANT_LEN], char *why, size_t len)
{
	static const int gen_type[] = { [ID_SAN_DNS] = GEN_DNS,
					[ID_SAN_EMAIL] = GEN_EMAIL,
					[ID_SAN_URI] = GEN_URI };
	static const char *const what[] = { "subject CN", "DNS SAN",
					    "email SAN", "URI SAN" };
	char name[256] = "";
	int found = 0;

	if (!x)
		return -ENOENT;
	if (ts->id_from == ID_CN) {
		found = cert_cn(x, name, sizeof(name), why, len);
		if (found < 0)
			return found;
	} else {
		GENERAL_NAMES *gens =
			X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);

		for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
			GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
			const ASN1_STRING *s;
			int n;

			if (g->type != gen_type[ts->id_from])
				continue;
			s = g->d.ia5;
			n = ASN1_STRING_length(s);
			if (n <= 0 || (size_t)n >= sizeof(name))
				continue;
			memcpy(name, ASN1_STRING_get0_data(s), (size_t)n);
			name[n] = 0;
			if (strlen(name) != (size_t)n)
				continue; /* an embedded NUL */
			found = 1;
			break;
		}
		GENERAL_NAMES_free(gens);
	}
	if (!found) {
		snprintf(why, len, "the client certificate has no %s",
			 what[ts->id_from]);
		return -EACCES;
	}
	if (strlen(name) >= DJINN_TENANT_LEN || !tenant_name_ok(name)) {
		snprintf(why, len,
			 "the client certificate's %s '%.64s' is not a tenant "
			 "name (1 to %d printable bytes, no spaces)",
			 what[ts->id_from], name, DJINN_TENANT_LEN - 1);
		return -EACCES;
	}
	if (tenant_name_implicit(name)) {
		snprintf(why, len,
			 "the client certificate's %s '%s' is a name djinnd "
			 "gives itself (uid:N, tcp:ADDR, unknown), not a "
			 "certificate's",
			 what[ts->id_from], name);
		return -EACCES;
	}
	memset(out, 0, DJINN_TENANT_LEN);
	memcpy(out, name, strlen(name));
	return 0;
}

/* A client certificate that verifies but names no tenant is refused in
 * the handshake, so that the client hears why (a bad_certificate
 * alert), not a closed socket after it. */
static int verify_cb(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(
		x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct tls_conn *t = ssl ? SSL_get_app_data(ssl) : NULL;
	char tenant[DJINN_TENANT_LEN];

	if (!ok || !t || X509_STORE_CTX_get_error_depth(x))
		return ok;
	if (cert_tenant(t->ts, X509_STORE_CTX_get_current_cert(x), tenant,
			t->why, sizeof(t->why)) == -EACCES) {
		X509_STORE_CTX_set_error(x, X509_V_ERR_CERT_REJECTED);
		return 0;
	}
	return 1;
}

static int hs_start(struct server *srv, struct tls_worker *w);
static void hs_stop(struct tls_worker *w);

/* ---------------------------------------------------------------------- */
/* The context */

int tls_server_init(struct server *srv, char *why, size_t len)
{
	const struct server_config *cfg = &srv->cfg;
	struct tls_server *ts;
	bool any = false;
	char e[256];
	int mode, ret;

	for (unsigned int i = 0; i < cfg->nr_listen; i++)
		any |= !strncmp(cfg->listen[i], "tls:", 4);
	if (!any)
		return 0;
	ts = calloc(1, sizeof(*ts));
	if (!ts) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	srv->tls = ts;
	ts->w.ep = ts->w.wake = ts->w.notify.fd = -1;
	ts->ktls = !cfg->tls_ktls || strcmp(cfg->tls_ktls, "off");
	ts->id_from =
		!cfg->tls_tenant_from || !strcmp(cfg->tls_tenant_from, "cn") ?
			ID_CN :
		!strcmp(cfg->tls_tenant_from, "san-dns")   ? ID_SAN_DNS :
		!strcmp(cfg->tls_tenant_from, "san-email") ? ID_SAN_EMAIL :
							     ID_SAN_URI;
	ts->ctx = SSL_CTX_new(TLS_server_method());
	if (!ts->ctx ||
	    !SSL_CTX_set_min_proto_version(ts->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(ts->ctx, KTLS_CIPHERSUITES)) {
		snprintf(why, len, "TLS context: %s",
			 ktls_ssl_error(e, sizeof(e), "out of memory"));
		goto fail;
	}
	/* No session tickets: no record under the traffic keys before
	 * the kernel takes over (lib/ktls.h), and nothing to resume. */
	SSL_CTX_set_num_tickets(ts->ctx, 0);
	SSL_CTX_set_session_cache_mode(ts->ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(ts->ctx, SSL_OP_NO_RENEGOTIATION);
	ktls_ctx_init(ts->ctx);
	if (SSL_CTX_use_certificate_chain_file(ts->ctx, cfg->tls_cert) != 1) {
		snprintf(why, len, "tls.certificate: %s: %s", cfg->tls_cert,
			 ktls_ssl_error(e, sizeof(e), "unreadable"));
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ts->ctx, cfg->tls_key,
					SSL_FILETYPE_PEM) != 1) {
		snprintf(why, len, "tls.key: %s: %s", cfg->tls_key,
			 ktls_ssl_error(e, sizeof(e), "unreadable"));
		goto fail;
	}
	if (SSL_CTX_check_private_key(ts->ctx) != 1) {
		snprintf(why, len, "tls.key: %s is not the key of %s: %s",
			 cfg->tls_key, cfg->tls_cert,
			 ktls_ssl_error(e, sizeof(e), "mismatch"));
		goto fail;
	}
	if (cfg->tls_client_ca && *cfg->tls_client_ca) {
		STACK_OF(X509_NAME) *names =
			SSL_load_client_CA_file(cfg->tls_client_ca);

		if (!names || SSL_CTX_load_verify_locations(
				      ts->ctx, cfg->tls_client_ca, NULL) != 1) {
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			snprintf(why, len, "tls.client_ca: %s: %s",
				 cfg->tls_client_ca,
				 ktls_ssl_error(e, sizeof(e),
						"no certificate in it"));
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ts->ctx, names);
		/* With tokens a client may come without a certificate and
		 * send AUTH; without, it must have one. */
		mode = SSL_VERIFY_PEER;
		if (!cfg->tls_tokens || !*cfg->tls_tokens)
			mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
		SSL_CTX_set_verify(ts->ctx, mode, verify_cb);
	}
	ret = hs_start(srv, &ts->w);
	if (ret) {
		snprintf(why, len, "tls: the handshake thread: %s",
			 strerror(-ret));
		goto fail;
	}
	log_info("tls: %s%s%s, tenants from %s, kernel TLS %s",
		 cfg->tls_client_ca && *cfg->tls_client_ca ?
			 "client certificates" :
			 "",
		 cfg->tls_client_ca && *cfg->tls_client_ca && cfg->tls_tokens &&
				 *cfg->tls_tokens ?
			 " and " :
			 "",
		 cfg->tls_tokens && *cfg->tls_tokens ? "bearer tokens" : "",
		 cfg->tls_tenant_from ? cfg->tls_tenant_from : "cn",
		 ts->ktls ? "when the kernel has it" : "off (tls.ktls)");
	return 0;
fail:
	tls_server_free(srv);
	return -EINVAL;
}

void tls_server_free(struct server *srv)
{
	struct tls_server *ts = srv->tls;

	if (!ts)
		return;
	hs_stop(&ts->w);
	SSL_CTX_free(ts->ctx);
	free(ts);
	srv->tls = NULL;
}

/* ---------------------------------------------------------------------- */
/* Connections */

/* OpenSSL's message callback: note a KeyUpdate the peer sent, which
 * OpenSSL would take (tls_open() refuses it, as the kernel does). */
static void msg_seen(int write_p, int version, int content_type,
		     const void *buf, size_t len, SSL *ssl, void *arg)
{
	struct tls_conn *t = arg;

	(void)version;
	(void)ssl;
	if (!write_p && content_type == KTLS_REC_HANDSHAKE && len &&
	    *(const uint8_t *)buf == KTLS_HS_KEY_UPDATE)
		t->key_update = true;
}

struct tls_conn *tls_conn_new(struct server *srv, int fd)
{
	struct tls_conn *t = calloc(1, sizeof(*t));
	int fl;

	if (!t)
		return NULL;
	t->ts = srv->tls;
	t->fd = fd;
	INIT_LIST_HEAD(&t->node);
	t->ssl = SSL_new(t->ts->ctx);
	if (!t->ssl || ktls_attach(t->ssl, &t->secrets) ||
	    !SSL_set_fd(t->ssl, fd)) {
		SSL_free(t->ssl);
		free(t);
		return NULL;
	}
	SSL_set_accept_state(t->ssl);
	SSL_set_app_data(t->ssl, t);
	SSL_set_msg_callback(t->ssl, msg_seen);
	SSL_set_msg_callback_arg(t->ssl, t);
	t->max_records = srv->cfg.tls_max_records;
	/* OpenSSL reads and writes the socket itself until the handshake
	 * is done; io_uring's polls say when to go on. */
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	return t;
}

void tls_conn_free(struct tls_conn *t)
{
	if (!t)
		return;
	SSL_free(t->ssl); /* and the BIOs; the socket is the conn's */
	OPENSSL_cleanse(&t->secrets, sizeof(t->secrets));
	free(t->tx);
	free(t);
}

enum tls_mode tls_conn_mode(const struct tls_conn *t)
{
	return t->mode;
}

const char *tls_conn_desc(const struct tls_conn *t, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s, %s", SSL_get_version(t->ssl),
		 SSL_get_cipher_name(t->ssl),
		 t->mode == TLS_KERNEL ? "kernel" :
		 t->how		       ? t->how :
					 "user");
	return buf;
}

/* The handshake is done: the kernel takes the records, else OpenSSL
 * does on memory BIOs. 0, or -EPROTO. */
static int tls_settle(struct tls_conn *t, char *why, size_t len)
{
	int fl = fcntl(t->fd, F_GETFL), ret = -EOPNOTSUPP;
	BIO *r, *w;

	if (fl >= 0)
		fcntl(t->fd, F_SETFL, fl & ~O_NONBLOCK); /* io_uring's now */
	/* RFC 8446 5.5: AES-GCM keys seal at most 2^24.5 records; djinnd
	 * never rekeys, so its connection ends before (tls_sent()).
	 * ChaCha20-Poly1305's sequence numbers wrap first. */
	if (!strstr(SSL_get_cipher_name(t->ssl), "GCM"))
		t->max_records = 0;
	if (t->ts->ktls) {
		ret = ktls_install(t->fd, t->ssl, &t->secrets, true);
		if (!ret) {
			t->mode = TLS_KERNEL;
			return 0;
		}
		if (ret == -EPROTO) {
			snprintf(why, len,
				 "the kernel took the sending keys and refused "
				 "the receiving ones");
			return -EPROTO;
		}
	}
	OPENSSL_cleanse(&t->secrets, sizeof(t->secrets));
	t->how = ret == -EOPNOTSUPP && !t->ts->ktls ? "user (tls.ktls = off)" :
		 ret == -ENOENT			    ? "user (no tls module)" :
		 ret == -EOPNOTSUPP ? "user (cipher not in the kernel)" :
				      "user";
	r = BIO_new(BIO_s_mem());
	w = BIO_new(BIO_s_mem());
	if (!r || !w) {
		BIO_free(r);
		BIO_free(w);
		snprintf(why, len, "out of memory");
		return -EPROTO;
	}
	BIO_set_mem_eof_return(r, -1); /* empty: wait for more */
	SSL_set_bio(t->ssl, r, w); /* frees the socket BIO, not the fd */
	t->rbio = r;
	t->wbio = w;
	t->mode = TLS_USER;
	return 0;
}

/*
 * One step of @t's handshake, on the handshake thread: 0 when it is done
 * (the connection is in TLS_KERNEL or TLS_USER mode, and @tenant holds
 * the certificate's tenant, or is empty: AUTH must name one); -EAGAIN
 * with *@events the poll(2) events to wait for; another -errno when it
 * failed, with @why saying how (the peer has been sent an alert where TLS
 * allows).
 */
static int tls_handshake(struct tls_conn *t, short *events,
			 char tenant[DJINN_TENANT_LEN], char *why, size_t len)
{
	char e[200];
	long v;
	int r, ret;

	ERR_clear_error();
	r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		tenant[0] = 0;
		ret = cert_tenant(t->ts, SSL_get0_peer_certificate(t->ssl),
				  tenant, why, len);
		if (ret && ret != -ENOENT)
			return ret;
		tenant[0] = ret ? 0 : tenant[0];
		return tls_settle(t, why, len);
	}
	switch (SSL_get_error(t->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		*events = POLLIN;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		*events = POLLOUT;
		return -EAGAIN;
	case SSL_ERROR_SYSCALL:
		snprintf(why, len, "the peer went away in the handshake%s%s",
			 errno ? ": " : "", errno ? strerror(errno) : "");
		return -ECONNRESET;
	default:
		v = SSL_get_verify_result(t->ssl);
		if (v != X509_V_OK) {
			snprintf(why, len, "client certificate: %s",
				 t->why[0] ? t->why :
					     X509_verify_cert_error_string(v));
			ERR_clear_error();
			return -EACCES;
		}
		snprintf(why, len, "handshake: %s",
			 ktls_ssl_error(e, sizeof(e), "failed"));
		return -EPROTO;
	}
}

/* ---------------------------------------------------------------------- */
/* Userspace records */

int tls_open(struct tls_conn *t, const uint8_t *p, size_t len,
	     void (*feed)(void *arg, const uint8_t *p, size_t len),
	     bool (*stop)(void *arg), void *arg, char *why, size_t why_len)
{
	uint8_t buf[16384];
	char e[200];

	if (len && BIO_write(t->rbio, p, (int)len) != (int)len) {
		snprintf(why, why_len, "out of memory");
		return -EPROTO;
	}
	while (!stop(arg)) {
		int n;

		ERR_clear_error();
		n = SSL_read(t->ssl, buf, sizeof(buf));
		if (t->key_update) {
			snprintf(why, why_len, TLS_KEY_UPDATE_REFUSED);
			return -EPROTO;
		}
		if (n > 0) {
			feed(arg, buf, (size_t)n);
			continue;
		}
		switch (SSL_get_error(t->ssl, n)) {
		case SSL_ERROR_WANT_READ:
			return 0;
		case SSL_ERROR_ZERO_RETURN:
			return 1;
		default:
			snprintf(why, why_len, "TLS record: %s",
				 ktls_ssl_error(e, sizeof(e), "malformed"));
			return -EPROTO;
		}
	}
	return 0;
}

uint64_t tls_seal(struct tls_conn *t, const struct iovec *iov, unsigned int n)
{
	uint64_t plain = 0;
	size_t pending;

	for (unsigned int i = 0; i < n && plain < TLS_SEAL_MAX; i++) {
		size_t l = iov[i].iov_len;

		if (l > TLS_SEAL_MAX - plain)
			l = TLS_SEAL_MAX - plain;
		/* A memory BIO takes everything: no partial writes. */
		if (l && SSL_write(t->ssl, iov[i].iov_base, (int)l) != (int)l)
			break;
		plain += l;
	}
	pending = BIO_ctrl_pending(t->wbio);
	if (pending > t->tx_cap) {
		uint8_t *b = realloc(t->tx, pending);

		if (!b)
			return 0;
		t->tx = b;
		t->tx_cap = pending;
	}
	t->tx_len = (uint64_t)BIO_read(t->wbio, t->tx, (int)pending);
	t->tx_off = 0;
	t->tx_plain = plain;
	return plain;
}

void tls_sealed(struct tls_conn *t, const uint8_t **p, uint64_t *len)
{
	*p = t->tx + t->tx_off;
	*len = t->tx_len - t->tx_off;
}

uint64_t tls_sent(struct tls_conn *t, uint64_t n)
{
	t->tx_off += n;
	if (t->tx_off < t->tx_len)
		return 0;
	t->tx_off = t->tx_len = 0;
	tls_count(t, t->tx_plain);
	return t->tx_plain;
}

void tls_count(struct tls_conn *t, uint64_t plain)
{
	/* at most a record a full 16 KiB and one for the rest: OpenSSL's
	 * SSL_write and the kernel's sendmsg both cut there */
	t->records += (plain + 16383) / 16384;
}

bool tls_worn(const struct tls_conn *t)
{
	return t->max_records && t->records >= t->max_records;
}

int tls_kernel_record(struct tls_conn *t, char *why, size_t len)
{
	static const uint8_t refuse[2] = { KTLS_ALERT_FATAL,
					   KTLS_ALERT_UNEXPECTED_MESSAGE };
	uint8_t rec[64], type = 0;
	long r = ktls_recv_record(t->fd, &type, rec, sizeof(rec));

	if (r < 0) {
		snprintf(why, len, "receive: %s", strerror((int)-r));
		return -EPROTO;
	}
	if (type == KTLS_REC_ALERT && r >= 2) {
		if (rec[1] == KTLS_ALERT_CLOSE_NOTIFY)
			return 1;
		snprintf(why, len, "the peer's TLS alert: %s",
			 SSL_alert_desc_string_long(rec[1]));
		return -EPROTO;
	}
	if (type == KTLS_REC_HANDSHAKE && r >= 1 &&
	    rec[0] == KTLS_HS_KEY_UPDATE) {
		ktls_send_record(t->fd, KTLS_REC_ALERT, refuse, sizeof(refuse));
		snprintf(why, len, TLS_KEY_UPDATE_REFUSED);
		return -EPROTO;
	}
	snprintf(why, len, "a TLS record of type %u where data belongs", type);
	return -EPROTO;
}

int tls_send_now(struct tls_conn *t, const void *p, size_t len)
{
	uint8_t rec[512];
	ssize_t sent;
	size_t n;

	if (len > sizeof(rec) - 64)
		return -EINVAL;
	if (t->mode == TLS_KERNEL) { /* the kernel seals what is sent */
		sent = send(t->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		return sent == (ssize_t)len ? 0 : sent < 0 ? -errno : -EAGAIN;
	}
	if (t->mode != TLS_USER || t->tx_len)
		return -EAGAIN;
	ERR_clear_error();
	if (SSL_write(t->ssl, p, (int)len) != (int)len)
		return -EIO;
	n = BIO_ctrl_pending(t->wbio);
	if (!n || n > sizeof(rec) || BIO_read(t->wbio, rec, (int)n) != (int)n)
		return -EIO;
	sent = send(t->fd, rec, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	return sent == (ssize_t)n ? 0 : sent < 0 ? -errno : -EAGAIN;
}

void tls_close_notify(struct tls_conn *t)
{
	static const uint8_t bye[2] = { KTLS_ALERT_WARNING,
					KTLS_ALERT_CLOSE_NOTIFY };
	uint8_t rec[64]; /* a TLS 1.3 alert: 24 bytes */
	size_t n;

	if (t->mode == TLS_KERNEL) {
		ktls_send_record(t->fd, KTLS_REC_ALERT, bye, sizeof(bye));
		return;
	}
	if (t->mode != TLS_USER || t->tx_len)
		return;
	ERR_clear_error();
	SSL_shutdown(t->ssl); /* close_notify into the write BIO */
	n = BIO_ctrl_pending(t->wbio);
	if (n && n <= sizeof(rec) && BIO_read(t->wbio, rec, (int)n) == (int)n)
		send(t->fd, rec, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* ---------------------------------------------------------------------- */
/* The handshake thread */

#define HS_EVENTS 64

/* @t is finished: to the I/O thread. */
static void hs_finish(struct tls_worker *w, struct tls_conn *t)
{
	if (t->in_epoll)
		epoll_ctl(w->ep, EPOLL_CTL_DEL, t->fd, NULL);
	t->in_epoll = false;
	list_del_init(&t->node);
	pthread_mutex_lock(&w->lock);
	list_add_tail(&t->node, &w->done);
	pthread_mutex_unlock(&w->lock);
	loop_notify_post(&w->notify);
}

/* One step of @t's handshake: waiting again, or finished. */
static void hs_step(struct tls_worker *w, struct tls_conn *t)
{
	struct epoll_event ev = { .data.ptr = t };
	short events = 0;

	t->hs_ret = tls_handshake(t, &events, t->hs_tenant, t->hs_why,
				  sizeof(t->hs_why));
	if (t->hs_ret != -EAGAIN) {
		hs_finish(w, t);
		return;
	}
	ev.events = EPOLLONESHOT | EPOLLRDHUP |
		    (events & POLLOUT ? EPOLLOUT : EPOLLIN);
	if (epoll_ctl(w->ep, t->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, t->fd,
		      &ev)) {
		t->hs_ret = -errno;
		snprintf(t->hs_why, sizeof(t->hs_why), "epoll: %s",
			 strerror(errno));
		hs_finish(w, t);
		return;
	}
	t->in_epoll = true;
}

static void *hs_main(void *arg)
{
	struct tls_worker *w = arg;
	struct epoll_event evs[HS_EVENTS];
	struct list_head active; /* in handshake here, oldest first */
	bool stop = false;

	INIT_LIST_HEAD(&active);
	while (!stop) {
		struct tls_conn *t, *n;
		uint64_t now = loop_now(), next = now + NSEC_PER_SEC;
		int nev, ms;

		/* The oldest decides when to look at deadlines again. */
		list_for_each_entry_safe(t, n, &active, node) {
			if (now - t->t0 < w->timeout_ns) {
				if (t->t0 + w->timeout_ns < next)
					next = t->t0 + w->timeout_ns;
				break;
			}
			t->hs_ret = -ETIMEDOUT;
			snprintf(t->hs_why, sizeof(t->hs_why),
				 "handshake not finished in %llu ms",
				 (unsigned long long)(w->timeout_ns /
						      NSEC_PER_MSEC));
			hs_finish(w, t);
		}
		ms = (int)((next - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC);
		nev = epoll_wait(w->ep, evs, HS_EVENTS, ms);
		for (int i = 0; i < nev; i++) {
			uint64_t v;

			if (evs[i].data.ptr) {
				hs_step(w, evs[i].data.ptr);
				continue;
			}
			struct list_head fresh;

			INIT_LIST_HEAD(&fresh);
			if (read(w->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_err("tls: eventfd: %s", strerror(errno));
			pthread_mutex_lock(&w->lock);
			stop = w->stop;
			list_splice_tail(&w->in, &fresh);
			INIT_LIST_HEAD(&w->in);
			pthread_mutex_unlock(&w->lock);
			/* Each takes its first step (the peer's ClientHello
			 * may be there already). */
			list_for_each_entry_safe(t, n, &fresh, node) {
				list_move_tail(&t->node, &active);
				hs_step(w, t);
			}
		}
	}
	/* Stopping: what is in handshake goes back, failed. */
	while (!list_empty(&active)) {
		struct tls_conn *t =
			list_first_entry(&active, struct tls_conn, node);

		t->hs_ret = -ECANCELED;
		snprintf(t->hs_why, sizeof(t->hs_why), "djinnd is stopping");
		hs_finish(w, t);
	}
	return NULL;
}

/* Finished handshakes on the I/O thread. */
static void hs_reap(struct tls_worker *w)
{
	struct list_head done;
	struct tls_conn *t, *n;

	INIT_LIST_HEAD(&done);
	pthread_mutex_lock(&w->lock);
	list_splice_tail(&w->done, &done);
	INIT_LIST_HEAD(&w->done);
	pthread_mutex_unlock(&w->lock);
	list_for_each_entry_safe(t, n, &done, node) {
		list_del_init(&t->node);
		conn_handshake_done(t->owner, t->hs_ret, t->hs_tenant,
				    t->hs_why);
	}
}

static void hs_notified(struct loop_notify *n)
{
	hs_reap(container_of(n, struct tls_worker, notify));
}

static int hs_start(struct server *srv, struct tls_worker *w)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int ret;

	w->srv = srv;
	w->timeout_ns = srv->cfg.frame_timeout_ns;
	INIT_LIST_HEAD(&w->in);
	INIT_LIST_HEAD(&w->done);
	pthread_mutex_init(&w->lock, NULL);
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	w->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->ep < 0 || w->wake < 0 ||
	    epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake, &ev))
		return -errno;
	ret = loop_notify_init(&srv->loop, &w->notify, "tls", hs_notified);
	if (ret)
		return ret;
	ret = -pthread_create(&w->thread, NULL, hs_main, w);
	if (ret)
		return ret;
	w->started = true;
	loop_notify_start(&w->notify);
	return 0;
}

static void hs_stop(struct tls_worker *w)
{
	uint64_t one = 1;

	if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stop = true;
		pthread_mutex_unlock(&w->lock);
		if (write(w->wake, &one, sizeof(one)) < 0)
			log_err("tls: eventfd: %s", strerror(errno));
		pthread_join(w->thread, NULL);
		w->started = false;
		hs_reap(w); /* each goes back to its connection */
	}
	if (!w->srv)
		return; /* never started */
	loop_notify_fini(&w->notify);
	if (w->ep >= 0)
		close(w->ep);
	if (w->wake >= 0)
		close(w->wake);
	pthread_mutex_destroy(&w->lock);
}

void tls_handshake_start(struct tls_conn *t, struct conn *owner)
{
	struct tls_worker *w = &t->ts->w;
	uint64_t one = 1;

	t->owner = owner;
	t->t0 = loop_now();
	t->hs_ret = 1; /* not stepped yet */
	pthread_mutex_lock(&w->lock);
	list_add_tail(&t->node, &w->in);
	pthread_mutex_unlock(&w->lock);
	if (write(w->wake, &one, sizeof(one)) < 0)
		log_err("tls: eventfd: %s", strerror(errno));
}
