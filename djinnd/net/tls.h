/* SPDX-License-Identifier: MIT */
/*
 * TLS listeners (server.listen = tls:HOST:PORT; Documentation/security.rst,
 * "TLS"): TLS 1.3 through OpenSSL, the handshake on a thread of its own
 * (tls_handshake_start()), then the kernel's TLS (lib/ktls.h) where it can,
 * else OpenSSL on memory BIOs around the same io_uring receives and
 * sends.
 *
 * Who the peer is comes from its certificate, verified against
 * tls.client_ca (its subject CN or a SAN, tls.tenant_from), or from a
 * bearer token it sends in AUTH (net/tokens.h).
 * Until one of them names a tenant the connection may send HELLO and
 * AUTH only.
 */
#ifndef DJINN_TLS_H
#define DJINN_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <djinn/proto.h>

struct server;
struct server_config;
struct tls_server;

enum tls_mode {
	TLS_HANDSHAKE, /* OpenSSL on the socket, on the handshake thread */
	TLS_KERNEL, /* the kernel encrypts: the socket carries plaintext */
	TLS_USER, /* OpenSSL on memory BIOs: conn.c seals and opens */
};

struct tls_conn;

/* The TLS context of srv->cfg (certificate, key, CA), when a
 * listener is tls:; 0, or -errno with *@why saying what is wrong (a
 * file, a key that does not match). */
int tls_server_init(struct server *srv, char *why, size_t len);
void tls_server_free(struct server *srv);

/* A connection's TLS on accepted socket @fd: NULL when out of memory. */
struct tls_conn *tls_conn_new(struct server *srv, int fd);
void tls_conn_free(struct tls_conn *t);
enum tls_mode tls_conn_mode(const struct tls_conn *t);

struct conn;

/* Run @t's handshake on the handshake thread; conn_handshake_done()
 * (net/conn.h) says how it ended, on the I/O thread. @owner must stay
 * until then (the caller holds a reference). */
void tls_handshake_start(struct tls_conn *t, struct conn *owner);

/* What the handshake agreed, for logs: "TLSv1.3 TLS_AES_128_GCM_SHA256,
 * kernel". */
const char *tls_conn_desc(const struct tls_conn *t, char *buf, size_t len);

/*
 * TLS_USER: open @len bytes received, passing the plaintext to
 * @feed(@arg, ...) until it is all fed or @stop(@arg) says to stop:
 * 0, 1 when the peer closed (close_notify), or -EPROTO with @why.
 */
int tls_open(struct tls_conn *t, const uint8_t *p, size_t len,
	     void (*feed)(void *arg, const uint8_t *p, size_t len),
	     bool (*stop)(void *arg), void *arg, char *why, size_t why_len);
/*
 * TLS_USER: seal the plaintext of @iov (up to TLS_SEAL_MAX bytes of it):
 * how many plaintext bytes went in; the records are then at
 * tls_sealed() until tls_sent() says they are all sent.
 */
#define TLS_SEAL_MAX (256u << 10)
uint64_t tls_seal(struct tls_conn *t, const struct iovec *iov, unsigned int n);
/* The sealed bytes still to send. */
void tls_sealed(struct tls_conn *t, const uint8_t **p, uint64_t *len);
/* @n of them went: the plaintext bytes they finish, once all are sent
 * (else 0: send the rest). */
uint64_t tls_sent(struct tls_conn *t, uint64_t n);

/*
 * Records, their lifetime and the end of a connection
 * (Documentation/security.rst, "TLS"). djinnd never rekeys: an AES-GCM
 * connection carries at most tls.max_records records from djinnd
 * (RFC 8446 5.5 allows 2^24.5), counted as the plaintext sent would fill
 * them, then closes; a peer's KeyUpdate is refused in both modes; and a
 * connection that closes with nothing owed ends with close_notify.
 */
#define TLS_KEY_UPDATE_REFUSED                                               \
	"the peer's KeyUpdate: djinnd does not rekey (a connection carries " \
	"tls.max_records records, then closes): reconnect instead"
/* @plain bytes went out in TLS_KERNEL mode (tls_sent() counts TLS_USER's) */
void tls_count(struct tls_conn *t, uint64_t plain);
/* Whether @t has sent its tls.max_records. */
bool tls_worn(const struct tls_conn *t);
/*
 * A TLS_KERNEL receive failed with EIO: the record that is next, read
 * here. 1: the peer's close_notify (an end of input); -EPROTO with @why
 * for anything else: a KeyUpdate (refused with a fatal
 * unexpected_message alert), another alert, another record type.
 */
int tls_kernel_record(struct tls_conn *t, char *why, size_t len);
/* The end of what djinnd sends: close_notify, nonblocking, best effort
 * (nothing while a sealed record is half sent). */
void tls_close_notify(struct tls_conn *t);
/*
 * Seal @len bytes of @p (a few hundred at most) and send them at once,
 * without waiting: a last word before the connection closes. 0, or
 * -EAGAIN while records of @t are still on their way (or the socket
 * took less), -EIO when OpenSSL would not seal them.
 */
int tls_send_now(struct tls_conn *t, const void *p, size_t len);

#endif /* DJINN_TLS_H */
