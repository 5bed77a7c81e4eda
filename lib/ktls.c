// SPDX-License-Identifier: MIT
/*
 * Kernel TLS after an OpenSSL handshake (ktls.h says why and how).
 *
 * The keys are RFC 8446's: from a traffic secret S, key =
 * HKDF-Expand-Label(S, "key", "", key length) and iv =
 * HKDF-Expand-Label(S, "iv", "", 12), with the cipher suite's hash. The
 * kernel takes the 12-byte iv as a 4-byte salt and an 8-byte iv
 * (AES-GCM), or whole (ChaCha20-Poly1305).
 */
#include <errno.h>
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/kdf.h>

#include "hex.h"
#include "ktls.h"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif

static int ex_index = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void ex_init(void)
{
	ex_index =
		SSL_get_ex_new_index(0, "djinn ktls secrets", NULL, NULL, NULL);
}

/* "LABEL CLIENT_RANDOM SECRET", the NSS key log format OpenSSL writes. */
static void keylog(const SSL *ssl, const char *line)
{
	static const char client[] = "CLIENT_TRAFFIC_SECRET_0 ",
			  server[] = "SERVER_TRAFFIC_SECRET_0 ";
	struct ktls_secrets *s = SSL_get_ex_data(ssl, ex_index);
	uint8_t *out;
	unsigned int *len, n = 0;
	const char *hex;

	if (!s)
		return;
	if (!strncmp(line, client, sizeof(client) - 1)) {
		out = s->client;
		len = &s->client_len;
	} else if (!strncmp(line, server, sizeof(server) - 1)) {
		out = s->server;
		len = &s->server_len;
	} else {
		return;
	}
	hex = strrchr(line, ' ');
	if (!hex)
		return;
	for (hex++; hex[0] && hex[1] && n < sizeof(s->client); hex += 2) {
		int hi = hex_digit(hex[0]), lo = hex_digit(hex[1]);

		if (hi < 0 || lo < 0)
			return;
		out[n++] = (uint8_t)(hi << 4 | lo);
	}
	*len = n;
}

void ktls_ctx_init(SSL_CTX *ctx)
{
	pthread_once(&ex_once, ex_init);
	SSL_CTX_set_keylog_callback(ctx, keylog);
}

int ktls_attach(SSL *ssl, struct ktls_secrets *s)
{
	pthread_once(&ex_once, ex_init);
	memset(s, 0, sizeof(*s));
	if (ex_index < 0 || !SSL_set_ex_data(ssl, ex_index, s))
		return -ENOMEM;
	return 0;
}

/* RFC 8446 7.1: HKDF-Expand-Label(@secret, @label, "", @len). */
static int expand_label(const EVP_MD *md, const uint8_t *secret,
			unsigned int secret_len, const char *label,
			uint8_t *out, size_t len)
{
	uint8_t info[2 + 1 + 255 + 1];
	size_t ll = strlen(label), n = 0;
	OSSL_PARAM params[5], *p = params;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	EVP_KDF_CTX *kctx;
	EVP_KDF *kdf;
	int ret;

	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + ll);
	memcpy(info + n, "tls13 ", 6);
	memcpy(info + n + 6, label, ll);
	n += 6 + ll;
	info[n++] = 0; /* no context */

	kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	if (!kdf)
		return -ENOSYS;
	kctx = EVP_KDF_CTX_new(kdf);
	EVP_KDF_free(kdf);
	if (!kctx)
		return -ENOMEM;
	*p++ = OSSL_PARAM_construct_utf8_string(
		OSSL_KDF_PARAM_DIGEST, (char *)EVP_MD_get0_name(md), 0);
	*p++ = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
						 (void *)secret, secret_len);
	*p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
	*p = OSSL_PARAM_construct_end();
	ret = EVP_KDF_derive(kctx, out, len, params) == 1 ? 0 : -EINVAL;
	EVP_KDF_CTX_free(kctx);
	return ret;
}

union crypto_info {
	struct tls_crypto_info info;
	struct tls12_crypto_info_aes_gcm_128 gcm128;
	struct tls12_crypto_info_aes_gcm_256 gcm256;
	struct tls12_crypto_info_chacha20_poly1305 chacha;
};

/* The kernel's description of one direction, keyed from @secret: its
 * size, or -errno. */
static int crypto_info(const SSL_CIPHER *cipher, const uint8_t *secret,
		       unsigned int secret_len, union crypto_info *ci)
{
	const EVP_MD *md = SSL_CIPHER_get_handshake_digest(cipher);
	uint8_t key[32], iv[12];
	size_t key_len;
	int ret, size;

	memset(ci, 0, sizeof(*ci));
	ci->info.version = TLS_1_3_VERSION;
	switch (SSL_CIPHER_get_protocol_id(cipher)) {
	case 0x1301: /* TLS_AES_128_GCM_SHA256 */
		ci->info.cipher_type = TLS_CIPHER_AES_GCM_128;
		key_len = 16;
		size = sizeof(ci->gcm128);
		break;
	case 0x1302: /* TLS_AES_256_GCM_SHA384 */
		ci->info.cipher_type = TLS_CIPHER_AES_GCM_256;
		key_len = 32;
		size = sizeof(ci->gcm256);
		break;
	case 0x1303: /* TLS_CHACHA20_POLY1305_SHA256 */
		ci->info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
		key_len = 32;
		size = sizeof(ci->chacha);
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (!md || !secret_len ||
	    secret_len != (unsigned int)EVP_MD_get_size(md))
		return -EPROTO; /* the keylog callback saw no secret */
	ret = expand_label(md, secret, secret_len, "key", key, key_len);
	if (!ret)
		ret = expand_label(md, secret, secret_len, "iv", iv,
				   sizeof(iv));
	if (ret)
		goto out;
	switch (ci->info.cipher_type) {
	case TLS_CIPHER_AES_GCM_128:
		memcpy(ci->gcm128.salt, iv, 4);
		memcpy(ci->gcm128.iv, iv + 4, 8);
		memcpy(ci->gcm128.key, key, 16);
		break;
	case TLS_CIPHER_AES_GCM_256:
		memcpy(ci->gcm256.salt, iv, 4);
		memcpy(ci->gcm256.iv, iv + 4, 8);
		memcpy(ci->gcm256.key, key, 32);
		break;
	default:
		memcpy(ci->chacha.iv, iv, 12);
		memcpy(ci->chacha.key, key, 32);
		break;
	}
	ret = size;
out:
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(iv, sizeof(iv));
	return ret;
}

int ktls_install(int fd, SSL *ssl, struct ktls_secrets *s, bool server)
{
	const SSL_CIPHER *cipher = SSL_get_current_cipher(ssl);
	union crypto_info tx, rx;
	int ret, txn, rxn, one = 1;

	if (SSL_version(ssl) != TLS1_3_VERSION || !cipher) {
		ret = -EOPNOTSUPP;
		goto out;
	}
	/* Bytes OpenSSL already holds would be lost to the kernel. */
	if (SSL_has_pending(ssl)) {
		ret = -EBUSY;
		goto out;
	}
	txn = crypto_info(cipher, server ? s->server : s->client,
			  server ? s->server_len : s->client_len, &tx);
	rxn = crypto_info(cipher, server ? s->client : s->server,
			  server ? s->client_len : s->server_len, &rx);
	if (txn < 0 || rxn < 0) {
		ret = txn < 0 ? txn : rxn;
		goto out;
	}
	/* The kernel loads the tls module for this when it is there. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls"))) {
		ret = -errno;
		goto out;
	}
	/* A socket with the tls ULP and no keys is still plain TCP. */
	if (setsockopt(fd, SOL_TLS, TLS_TX, &tx, (socklen_t)txn)) {
		ret = -errno == -ENOENT ? -EOPNOTSUPP : -errno;
		goto out;
	}
	if (setsockopt(fd, SOL_TLS, TLS_RX, &rx, (socklen_t)rxn)) {
		ret = -EPROTO;
		goto out;
	}
	/* Neither side pads records: decrypt in place (Linux 6.0; an older
	 * kernel refuses, which changes nothing). */
	setsockopt(fd, SOL_TLS, TLS_RX_EXPECT_NO_PAD, &one, sizeof(one));
	ret = 0;
out:
	OPENSSL_cleanse(&tx, sizeof(tx));
	OPENSSL_cleanse(&rx, sizeof(rx));
	OPENSSL_cleanse(s, sizeof(*s));
	return ret;
}

const char *ktls_ssl_error(char *buf, size_t len, const char *dflt)
{
	unsigned long e = ERR_get_error();
	const char *reason;

	if (!e) {
		snprintf(buf, len, "%s", dflt);
		return buf;
	}
	reason = ERR_reason_error_string(e);
	if (reason)
		snprintf(buf, len, "%s", reason);
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

long ktls_recv_record(int fd, uint8_t *type, uint8_t *buf, unsigned long len)
{
	char cbuf[CMSG_SPACE(sizeof(unsigned char))];
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT);

	if (r < 0)
		return -errno;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_level != SOL_TLS ||
	    cm->cmsg_type != TLS_GET_RECORD_TYPE)
		return -EPROTO;
	*type = *CMSG_DATA(cm);
	return r;
}

int ktls_send_record(int fd, uint8_t type, const void *buf, unsigned long len)
{
	char cbuf[CMSG_SPACE(sizeof(unsigned char))];
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	cm->cmsg_level = SOL_TLS;
	cm->cmsg_type = TLS_SET_RECORD_TYPE;
	cm->cmsg_len = CMSG_LEN(sizeof(unsigned char));
	*CMSG_DATA(cm) = type;
	return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len ?
		       0 :
		       -(errno ? errno : EAGAIN);
}
