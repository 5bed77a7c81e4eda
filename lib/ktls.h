/* SPDX-License-Identifier: MIT */
/*
 * TLS 1.3 shared by djinnd and libdjinn (Documentation/security.rst,
 * "TLS"): OpenSSL does the handshake on the socket itself, reading
 * exactly the records it needs, so whatever the peer sends after its
 * Finished is still in the socket. Then the kernel takes the connection
 * over (kernel TLS, the tls module): the traffic secrets OpenSSL derived
 * (caught by its keylog callback) become the keys of TLS_TX and TLS_RX,
 * both at record 0, and the socket carries plaintext for the program
 * from there: io_uring, sendmsg and recv stay as they are.
 *
 * Why not OpenSSL's own KTLS (SSL_OP_ENABLE_KTLS): OpenSSL 3.0 (Debian
 * 12) sends TLS 1.3 through the kernel but receives in userspace; doing
 * both directions here gives one mode per connection, whichever OpenSSL.
 *
 * Record 0 holds because neither side sends a record under the traffic
 * keys before the switch: djinnd sends no session tickets
 * (SSL_CTX_set_num_tickets(0)) and neither side asks for a key update.
 * A record the kernel does not pass as data (an alert, a key update)
 * fails the receive with EIO; ktls_recv_record() then reads it, and
 * ktls_send_record() sends one (an alert: close_notify, or a refusal).
 *
 * Where the kernel cannot (no tls module, a cipher it lacks), the
 * program falls back to userspace TLS through OpenSSL on memory BIOs.
 */
#ifndef DJINN_KTLS_H
#define DJINN_KTLS_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/ssl.h>

/* The TLS 1.3 cipher suites both sides offer, AES-GCM first: what the
 * kernel and AES-NI do fastest. */
#define KTLS_CIPHERSUITES                                \
	"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:" \
	"TLS_CHACHA20_POLY1305_SHA256"

/* The application traffic secrets of one connection (up to SHA-384's). */
struct ktls_secrets {
	uint8_t client[48], server[48];
	unsigned int client_len, server_len;
};

/* Have @ctx's keylog callback catch the secrets of each SSL that
 * ktls_attach() names. Replaces any keylog callback of @ctx. */
void ktls_ctx_init(SSL_CTX *ctx);
/* Catch @ssl's secrets into @s (which must outlive the handshake):
 * 0, or -ENOMEM. */
int ktls_attach(SSL *ssl, struct ktls_secrets *s);

/*
 * After a finished handshake of @ssl on socket @fd (@server: which side
 * this is), hand the connection to the kernel: 0, or -errno and nothing
 * changed when the kernel cannot (-ENOENT: no tls module; -EOPNOTSUPP:
 * a cipher suite or version it lacks; -EBUSY: OpenSSL holds bytes it
 * read past the handshake). A failure after TLS_TX was set leaves a
 * socket that is neither (-EPROTO): the connection must close. The
 * secrets in @s are wiped either way.
 */
int ktls_install(int fd, SSL *ssl, struct ktls_secrets *s, bool server);

/* Record content types, alerts and the handshake message this tree names
 * (RFC 8446 sections 5.1, 6 and 4). */
#define KTLS_REC_ALERT 21
#define KTLS_REC_HANDSHAKE 22
#define KTLS_ALERT_WARNING 1
#define KTLS_ALERT_FATAL 2
#define KTLS_ALERT_CLOSE_NOTIFY 0
#define KTLS_ALERT_UNEXPECTED_MESSAGE 10
#define KTLS_HS_KEY_UPDATE 24

/*
 * On a kernel TLS socket whose receive failed with EIO (a record that is
 * not data is next): read that record, nonblocking, its content type in
 * *@type and up to @len of its bytes in @buf. The byte count, or -errno.
 */
long ktls_recv_record(int fd, uint8_t *type, uint8_t *buf, unsigned long len);
/* Send a record of content type @type holding @len bytes on kernel TLS
 * socket @fd, nonblocking: 0 or -errno. */
int ktls_send_record(int fd, uint8_t type, const void *buf, unsigned long len);

/* OpenSSL's error queue as one line into @buf (emptied), or @dflt when
 * it is empty. */
const char *ktls_ssl_error(char *buf, size_t len, const char *dflt);

#endif /* DJINN_KTLS_H */
