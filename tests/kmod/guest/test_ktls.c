// SPDX-License-Identifier: MIT
/*
 * Kernel TLS, in the guest, whose Debian kernel has the tls module (the
 * build machine's may not): djinnd on a tls: listener and libdjinn both
 * hand their records to the kernel after OpenSSL's handshake
 * (lib/ktls.c), and bytes cross intact in both directions, many records
 * and partial sends' worth; an alert djinnd sends (a refused
 * certificate) reaches the client through the kernel's record type.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
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
