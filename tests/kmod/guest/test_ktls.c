// SPDX-License-Identifier: MIT
/*
 * Kernel TLS, in the guest, whose Debian kernel has the tls module (the
 * build machine's may not): djinnd on a tls: listener and libdjinn both
 * hand their records to the kernel after OpenSSL's handshake
 * (lib/ktls.c), and bytes cross intact in both directions, many records
 * and partial sends' worth; an alert djinnd sends (a refused
 * certificate) reaches the client through the kernel's record type; a
 * peer's KeyUpdate is refused with an alert and its close_notify
 * answered with djinnd's.
 * The certificates are made here (lib/pki.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <djinn/djinn.h>

#include "djd.h"
#include "kt.h"
#include "pki.h"
#include "../../unit/testutil.h"

#define DIR "/tmp/ktls"
#define ADDR "tls:127.0.0.1:7443"

static pid_t djinnd = -1;

static int setup(void **state)
{
	static const char *const extra[] = {
		"--listen", "tls:127.0.0.1:7443",
		"--set",    "tls.certificate=" DIR "/srv.pem",
		"--set",    "tls.key=" DIR "/srv.key",
		"--set",    "tls.client_ca=" DIR "/ca.pem",
		NULL,
	};
	const struct pki_cert srv = { .cn = "localhost",
				      .san = "IP:127.0.0.1",
				      .not_before = -60,
				      .not_after = 86400,
				      .eku = "serverAuth" },
			      alice = { .cn = "alice",
					.not_before = -60,
					.not_after = 86400,
					.eku = "clientAuth" },
			      old = { .cn = "alice",
				      .not_before = -7200,
				      .not_after = -3600,
				      .eku = "clientAuth" };
	struct pki_ca *ca = pki_ca_new("ktls test CA");

	(void)state;
	mkdir(DIR, 0700);
	if (!ca || pki_ca_write(ca, DIR "/ca.pem") ||
	    pki_issue(ca, &srv, DIR "/srv.pem", DIR "/srv.key") ||
	    pki_issue(ca, &alice, DIR "/alice.pem", DIR "/alice.key") ||
	    pki_issue(ca, &old, DIR "/old.pem", DIR "/old.key")) {
		fprintf(stderr, "making the certificates failed\n");
		pki_ca_free(ca);
		return -1;
	}
	pki_ca_free(ca);
	djinnd = djd_start_with("user", 10000, "info", extra);
	return djinnd > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (djinnd > 0 && djd_stop(djinnd)) {
		fprintf(stderr, "djinnd did not exit cleanly\n");
		return -1;
	}
	return 0;
}

static void test_kernel_records(void **state)
{
	struct djinn_connect_opts o = { .size = sizeof(o),
					.tls_ca = DIR "/ca.pem",
					.tls_cert = DIR "/alice.pem",
					.tls_key = DIR "/alice.key" };
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
				       .ndim = 1,
				       .dims = { 24u << 20 } };
	struct djinn_session_opts so = DJINN_SESSION_OPTS_INIT;
	struct djinn_session_info si;
	struct djinn_admin_session as;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_conn *conn;
	uint8_t *in, *out;

	(void)state;
	in = malloc(d.dims[0]);
	out = malloc(d.dims[0]);
	assert_non_null(in);
	assert_non_null(out);
	for (uint64_t i = 0; i < d.dims[0]; i++)
		in[i] = (uint8_t)(i * 2654435761u >> 13);

	assert_int_equal(djinn_connect_opts(ADDR, &o, &conn), 0);
	/* the client's side */
	assert_string_equal(djinn_conn_transport(conn), "tls, kernel");
	/* djinnd's side */
	wait_log(DJD_LOG, ", kernel, tenant alice");

	assert_int_equal(djinn_session_open(conn, &so, &s), 0);
	assert_int_equal(djinn_session_info(s, &si), 0);
	assert_int_equal(djd_session(si.id, &as), 0);
	assert_string_equal(as.tenant, "alice");

	assert_int_equal(djinn_tensor_upload(s, &d, in, DJINN_SEG_DATA, &t), 0);
	memset(out, 0, d.dims[0]);
	assert_int_equal(djinn_tensor_download(t, 0, d.dims[0], out), 0);
	assert_memory_equal(in, out, d.dims[0]);
	/* and a piece in the middle, not on a record's boundary */
	memset(out, 0, 4096);
	assert_int_equal(djinn_tensor_download(t, 12345, 4096, out), 0);
	assert_memory_equal(in + 12345, out, 4096);
	assert_int_equal(djinn_tensor_release(t), 0);
	assert_int_equal(djinn_session_close(s), 0);
	djinn_disconnect(conn);
	free(in);
	free(out);
}

/* djinnd refuses an expired certificate after the client's handshake is
 * done (TLS 1.3): the alert comes to a socket the kernel already reads,
 * as a record that is not data. */
static void test_kernel_alert(void **state)
{
	struct djinn_connect_opts o = { .size = sizeof(o),
					.tls_ca = DIR "/ca.pem",
					.tls_cert = DIR "/old.pem",
					.tls_key = DIR "/old.key" };
	struct djinn_conn *conn = NULL;

	(void)state;
	assert_int_equal(djinn_connect_opts(ADDR, &o, &conn), -EACCES);
	assert_null(conn);
	assert_non_null(strstr(djinn_last_error(), "expired"));
	/* (logged after the alert, which the client may see first) */
	wait_log(DJD_LOG, "certificate has expired");
}

/*
 * A raw TLS 1.3 client as alice on djinnd's listener (OpenSSL on the
 * socket: its records are the ones a test asks for). Or fail.
 */
static SSL *raw_connect(SSL_CTX **ctx, int *fd)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(7443),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const struct timeval tv = { 10, 0 };
	SSL *ssl;

	*ctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(*ctx);
	assert_int_equal(SSL_CTX_set_min_proto_version(*ctx, TLS1_3_VERSION),
			 1);
	assert_int_equal(
		SSL_CTX_load_verify_locations(*ctx, DIR "/ca.pem", NULL), 1);
	assert_int_equal(
		SSL_CTX_use_certificate_chain_file(*ctx, DIR "/alice.pem"), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey_file(*ctx, DIR "/alice.key",
						     SSL_FILETYPE_PEM),
			 1);
	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(*fd >= 0);
	assert_int_equal(connect(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssl = SSL_new(*ctx);
	assert_non_null(ssl);
	assert_int_equal(SSL_set_fd(ssl, *fd), 1);
	assert_int_equal(SSL_connect(ssl), 1);
	return ssl;
}

/* What the next SSL_read says of the connection's end: 0 for djinnd's
 * close_notify, else the OpenSSL reason (an alert's: its description
 * plus SSL_AD_REASON_OFFSET). */
static int raw_end(SSL *ssl)
{
	uint8_t buf[256];
	int n;

	ERR_clear_error();
	while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0)
		;
	if (SSL_get_error(ssl, n) == SSL_ERROR_ZERO_RETURN)
		return 0;
	return ERR_GET_REASON(ERR_peek_error()) ?: -1;
}

/* djinnd's kernel receive meets the peer's KeyUpdate as a record that is
 * not data: refused with a fatal unexpected_message alert (djinnd does
 * not rekey), as in user mode (tests/integration/test_tls.c). */
static void test_kernel_key_update(void **state)
{
	SSL_CTX *ctx;
	int fd;
	SSL *ssl = raw_connect(&ctx, &fd);

	(void)state;
	wait_log(DJD_LOG, ", kernel, tenant alice");
	assert_int_equal(SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
	assert_int_equal(SSL_do_handshake(ssl), 1); /* sends it */
	assert_int_equal(raw_end(ssl),
			 SSL_AD_REASON_OFFSET + SSL_AD_UNEXPECTED_MESSAGE);
	wait_log(DJD_LOG, "the peer's KeyUpdate: djinnd does not rekey");
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
}

/* The peer's close_notify, which the kernel fails the receive on, ends
 * its input as a FIN does, and djinnd ends its side with its own
 * close_notify: a clean end both ways. */
static void test_kernel_close_notify(void **state)
{
	SSL_CTX *ctx;
	int fd;
	SSL *ssl = raw_connect(&ctx, &fd);

	(void)state;
	assert_int_equal(SSL_shutdown(ssl), 0); /* ours sent, theirs to come */
	assert_int_equal(raw_end(ssl), 0);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
}

/* libdjinn's messages (why the kernel did not take a connection) */
static void log_fn(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "libdjinn (%d): %s\n", level, msg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_records),
		cmocka_unit_test(test_kernel_alert),
		cmocka_unit_test(test_kernel_key_update),
		cmocka_unit_test(test_kernel_close_notify),
	};
	char ulp[256] = "";
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");

	if (f) {
		if (!fgets(ulp, sizeof(ulp), f))
			ulp[0] = 0;
		fclose(f);
	}
	if (!strstr(ulp, "tls")) {
		fprintf(stderr, "test_ktls: no tls ULP in the guest (%s)\n",
			ulp);
		return 1;
	}
	djinn_set_log(log_fn, NULL);
	return cmocka_run_group_tests(tests, setup, teardown);
}
