// SPDX-License-Identifier: MIT
/*
 * Unit tests for libdjinn without a daemon: addresses, connecting to
 * nobody, the SHA-256 fingerprints of text uploads, argument checks of
 * every public function, the log hook, and the keeper's heartbeats as
 * they appear on the socket.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <cmocka.h>

#include "array_size.h"
#include "rundir.h"
#include "testutil.h"
#include "test_libdjinn.h"

/* ---------------------------------------------------------------------- */
/* Addresses */

static void test_addr_unix(void **state)
{
	struct dj_addr a;

	assert_int_equal(__djinn_addr_parse("unix:/run/djinn/d.sock", &a), 0);
	assert_true(a.is_unix);
	assert_string_equal(a.unix_path, "/run/djinn/d.sock");
	assert_int_equal(a.path_len, strlen("/run/djinn/d.sock"));

	assert_int_equal(__djinn_addr_parse("unix:run/djinnd.sock", &a), 0);
	assert_string_equal(a.unix_path, "run/djinnd.sock");

	/* abstract: a NUL where the '@' was, and no NUL counted after */
	assert_int_equal(__djinn_addr_parse("unix:@djinn", &a), 0);
	assert_true(a.is_unix);
	assert_int_equal(a.unix_path[0], '\0');
	assert_memory_equal(a.unix_path + 1, "djinn", 5);
	assert_int_equal(a.path_len, 6);
}

static void test_addr_tcp(void **state)
{
	struct dj_addr a;

	assert_int_equal(__djinn_addr_parse("tcp:127.0.0.1:7000", &a), 0);
	assert_false(a.is_unix);
	assert_string_equal(a.host, "127.0.0.1");
	assert_string_equal(a.port, "7000");

	assert_int_equal(__djinn_addr_parse("tcp:gpu-host-3:65535", &a), 0);
	assert_string_equal(a.host, "gpu-host-3");
	assert_string_equal(a.port, "65535");

	assert_int_equal(__djinn_addr_parse("tcp:[::1]:1", &a), 0);
	assert_string_equal(a.host, "::1");
	assert_string_equal(a.port, "1");
}

static void test_addr_bad(void **state)
{
	static const char *const bad[] = {
		"",
		"unix:",
		"unix:@",
		"udp:1.2.3.4:5",
		"/run/djinn/d.sock",
		"tcp:",
		"tcp:host",
		"tcp:host:",
		"tcp::7000",
		"tcp:host:0",
		"tcp:host:65536",
		"tcp:host:12x",
		"tcp:host:-1",
		"tcp:host:0000070000",
		"tcp:::1:7000", /* IPv6 without brackets */
		"tcp:[::1]7000",
		"tcp:[::1",
		"tcp:[]:7000",
		"TCP:host:7000",
	};
	char longpath[200];
	struct dj_addr a;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (__djinn_addr_parse(bad[i], &a) != -EINVAL)
			fail_msg("\"%s\" was accepted", bad[i]);
	/* sun_path holds 108 bytes with the NUL */
	memset(longpath, 'x', sizeof(longpath));
	memcpy(longpath, "unix:", 5);
	longpath[5 + 107] = '\0';
	assert_int_equal(__djinn_addr_parse(longpath, &a), 0);
	longpath[5 + 107] = 'x';
	longpath[5 + 108] = '\0';
	assert_int_equal(__djinn_addr_parse(longpath, &a), -EINVAL);
}

/* Where djinnd puts its socket by default, for this user. */
static const char *default_socket(void)
{
	static char path[4200];

	djinnd_socket_find("djinnd.sock", path, sizeof(path));
	return path;
}

static void test_addr_default(void **state)
{
	struct dj_addr a;

	setenv("DJINN_ADDR", "tcp:example:99", 1);
	assert_int_equal(__djinn_addr_parse(NULL, &a), 0);
	assert_string_equal(a.host, "example");
	assert_string_equal(a.port, "99");
	setenv("DJINN_ADDR", "", 1);
	assert_int_equal(__djinn_addr_parse(NULL, &a), 0);
	assert_string_equal(a.unix_path, default_socket());
	unsetenv("DJINN_ADDR");
	assert_int_equal(__djinn_addr_parse(NULL, &a), 0);
	assert_true(a.is_unix);
	assert_string_equal(a.unix_path, default_socket());
}

/* Without $DJINN_ADDR, where djinnd itself listens by default: /run/djinn
 * for root, else $XDG_RUNTIME_DIR/djinn, else ./run; and a user's client
 * with no djinnd of its own finds the system service's. The error names
 * the address and $DJINN_ADDR. */
static void test_addr_default_user(void **state)
{
	char dir[] = "/tmp/djinn-xdg-XXXXXX", want[200], sock[200];
	struct djinn_conn *conn;
	const char *from;
	char buf[300];

	unsetenv("DJINN_ADDR");
	assert_non_null(mkdtemp(dir));
	setenv("XDG_RUNTIME_DIR", dir, 1);
	if (geteuid())
		snprintf(want, sizeof(want), "unix:%s/djinn/djinnd.sock", dir);
	else
		snprintf(want, sizeof(want), "unix:/run/djinn/djinnd.sock");
	assert_string_equal(__djinn_addr_name(NULL, buf, sizeof(buf), &from),
			    want);
	assert_non_null(strstr(from, "DJINN_ADDR"));
	if (access(want + 5, F_OK)) { /* no djinnd there (root: a service) */
		assert_int_equal(djinn_connect(NULL, &conn), -ENOENT);
		assert_non_null(strstr(djinn_last_error(), want));
		assert_non_null(strstr(djinn_last_error(), "DJINN_ADDR"));
	}
	if (!geteuid()) {
		/* root: the system service's, whatever the environment */
		unsetenv("XDG_RUNTIME_DIR");
		assert_string_equal(__djinn_addr_name(NULL, buf, sizeof(buf),
						      &from),
				    "unix:/run/djinn/djinnd.sock");
	} else {
		unsetenv("XDG_RUNTIME_DIR");
		djinnd_socket_find("djinnd.sock", sock, sizeof(sock));
		assert_true(!strcmp(sock, "run/djinnd.sock") ||
			    !strcmp(sock, "/run/djinn/djinnd.sock"));
	}
	assert_string_equal(__djinn_addr_name("tcp:h:1", buf, sizeof(buf),
					      &from),
			    "tcp:h:1");
	assert_null(from);
	setenv("DJINN_ADDR", "unix:/nonexistent/d.sock", 1);
	assert_string_equal(__djinn_addr_name(NULL, buf, sizeof(buf), &from),
			    "unix:/nonexistent/d.sock");
	assert_string_equal(from, "$DJINN_ADDR");
	assert_int_equal(djinn_connect(NULL, &conn), -ENOENT);
	assert_non_null(strstr(djinn_last_error(),
			       "unix:/nonexistent/d.sock ($DJINN_ADDR)"));
	unsetenv("DJINN_ADDR");
	rmdir(dir);
}

/* ---------------------------------------------------------------------- */
/* Connecting to nobody */

static void expect_connect(const char *addr, int want)
{
	struct djinn_conn *conn = (void *)0x1;
	uint64_t t0 = mono_ns();
	int ret = djinn_connect(addr, &conn);

	if (ret != want)
		fail_msg("%s: %d (%s), want %d", addr, ret, strerror(-ret),
			 want);
	assert_ptr_equal(conn, (void *)0x1); /* untouched */
	assert_true(mono_ns() - t0 < 2 * NSEC_PER_SEC);
}

static void test_connect_nobody(void **state)
{
	char dir[] = "/tmp/test_libdjinn.XXXXXX", path[64], addr[160];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/djinnd.sock", dir);
	snprintf(addr, sizeof(addr), "unix:%s", path);
	expect_connect(addr, -ENOENT);

	/* a socket file nobody listens on */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	expect_connect(addr, -ECONNREFUSED);
	close(fd);
	unlink(path);
	rmdir(dir);

	/* a TCP port nobody listens on: bound, not listening */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	snprintf(addr, sizeof(addr), "tcp:127.0.0.1:%u", ntohs(sin.sin_port));
	expect_connect(addr, -ECONNREFUSED);
	close(fd);

	expect_connect("tcp:no-such-host.invalid:7000", -EHOSTUNREACH);
	expect_connect("bogus", -EINVAL);
	assert_int_equal(djinn_connect("unix:/x", NULL), -EINVAL);
}

/* ---------------------------------------------------------------------- */
/* Fingerprints */

static void expect_sha256(const void *data, size_t len, const char *hex)
{
	uint8_t fp[DJINN_FP_LEN];
	char got[2 * DJINN_FP_LEN + 1];

	assert_int_equal(__djinn_sha256(data, len, fp), 0);
	for (int i = 0; i < DJINN_FP_LEN; i++)
		snprintf(got + 2 * i, 3, "%02x", fp[i]);
	assert_string_equal(got, hex);
}

/* FIPS 180-2's vectors: what TEXT_LOOKUP and TENSOR_CREATE carry. */
static void test_sha256(void **state)
{
	size_t n = 1000000;
	char *a = xmalloc(n);

	expect_sha256("", 0,
		      "e3b0c44298fc1c149afbf4c8996fb924"
		      "27ae41e4649b934ca495991b7852b855");
	expect_sha256("abc", 3,
		      "ba7816bf8f01cfea414140de5dae2223"
		      "b00361a396177a9cb410ff61f20015ad");
	expect_sha256(
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
		"248d6a61d20638b8e5c026930c3e6039"
		"a33ce45964ff2167f6ecedd419db06c1");
	memset(a, 'a', n);
	expect_sha256(a, n,
		      "cdc76e5c9914fb9281a1c7e284d73e67"
		      "f1809a48a497200e046d39ccc7112cd0");
	free(a);
}

/* ---------------------------------------------------------------------- */
/* Arguments */

static int setup(void **state)
{
	struct peer_fx *f = calloc(1, sizeof(*f));

	peer_fx_open(f, 7);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	peer_fx_close(*state);
	free(*state);
	return 0;
}

static void test_args_null(void **state)
{
	struct peer_fx *f = *state;
	struct djinn_tensor_desc d = D(DJINN_DTYPE_F32, 4);
	struct djinn_graph_builder *g;
	struct djinn_session_info si;
	struct djinn_server_info srv;
	struct djinn_conn_stats st;
	struct djinn_session *s;
	struct djinn_tensor *t;
	struct djinn_request *req;
	struct djinn_tensor_info ti;
	struct djinn_request_info ri;
	uint8_t token[16] = { 0 };
	uint32_t in = 0;
	void *addr;
	char buf[4];

	assert_int_equal(djinn_connect(NULL, NULL), -EINVAL);
	assert_int_equal(djinn_conn_ping(NULL), -EINVAL);
	assert_int_equal(djinn_conn_stats(NULL, &st), -EINVAL);
	assert_int_equal(djinn_conn_stats(f->conn, NULL), -EINVAL);
	assert_int_equal(djinn_conn_server_info(NULL, &srv), -EINVAL);
	assert_int_equal(djinn_conn_server_info(f->conn, NULL), -EINVAL);
	assert_int_equal(djinn_session_open(NULL, NULL, &s), -EINVAL);
	assert_int_equal(djinn_session_open(f->conn, NULL, NULL), -EINVAL);
	assert_int_equal(djinn_session_attach(NULL, 1, token, &s), -EINVAL);
	assert_int_equal(djinn_session_attach(f->conn, 0, token, &s), -EINVAL);
	assert_int_equal(djinn_session_attach(f->conn, 1, NULL, &s), -EINVAL);
	assert_int_equal(djinn_session_attach(f->conn, 1, token, NULL),
			 -EINVAL);
	assert_int_equal(djinn_session_close(NULL), -EINVAL);
	assert_int_equal(djinn_session_info(NULL, &si), -EINVAL);
	assert_int_equal(djinn_session_info(f->s, NULL), -EINVAL);
	assert_int_equal(djinn_session_heartbeat(NULL), -EINVAL);
	assert_int_equal(djinn_signal(NULL, DJINN_PHASE_IO_WAIT, 0), -EINVAL);

	assert_int_equal(djinn_tensor_upload(NULL, &d, buf, 0, &t), -EINVAL);
	assert_int_equal(djinn_tensor_upload(f->s, NULL, buf, 0, &t), -EINVAL);
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, NULL), -EINVAL);
	assert_int_equal(djinn_tensor_download(NULL, 0, 1, buf), -EINVAL);
	assert_int_equal(djinn_tensor_write(NULL, 0, 1, buf), -EINVAL);
	assert_int_equal(djinn_tensor_release(NULL), 0);
	assert_null(djinn_tensor_desc(NULL));
	assert_int_equal(djinn_tensor_info(NULL, &ti), -EINVAL);

	assert_int_equal(djinn_graph_new(NULL, &g), -EINVAL);
	assert_int_equal(djinn_graph_new(f->s, NULL), -EINVAL);
	djinn_graph_free(NULL);
	assert_int_equal(djinn_graph_input(NULL, NULL), -EINVAL);
	assert_int_equal(djinn_graph_input_result(NULL, NULL), -EINVAL);
	assert_int_equal(djinn_graph_node(NULL, DJINN_GOP_GELU, &in, 1, NULL, 0,
					  NULL),
			 -EINVAL);
	assert_int_equal(djinn_graph_output(NULL, 0), -EINVAL);
	assert_int_equal(djinn_graph_annotate(NULL, NULL), -EINVAL);
	assert_string_equal(djinn_graph_error(NULL), "");
	assert_int_equal(djinn_op_gelu(NULL, 0), -EINVAL);
	assert_int_equal(djinn_op_concat(NULL, NULL, 2, 0), -EINVAL);
	assert_int_equal(djinn_submit(NULL, &req), -EINVAL);

	assert_int_equal(djinn_wait(NULL, 0), -EINVAL);
	assert_int_equal(djinn_poll(NULL), -EINVAL);
	assert_string_equal(djinn_request_error(NULL), "");
	assert_null(djinn_request_results(NULL, 0));
	assert_int_equal(djinn_request_info(NULL, &ri), -EINVAL);
	djinn_request_free(NULL);
	assert_null(djinn_result_desc(NULL));
	assert_int_equal(djinn_result_read(NULL, 0, 1, buf), -EINVAL);
	assert_int_equal(djinn_result_map(NULL, &addr), -EINVAL);
	assert_int_equal(djinn_result_unmap(NULL), -EINVAL);
	assert_int_equal(djinn_result_release(NULL), -EINVAL);
	djinn_disconnect(NULL);
	expect_silence(f->peer);
}

static void test_args_session(void **state)
{
	struct peer_fx *f = *state;
	struct djinn_session_opts o = DJINN_SESSION_OPTS_INIT;
	char tenant[DJINN_TENANT_LEN + 1];
	struct djinn_session *s = NULL;

	o.tenant = "";
	assert_int_equal(djinn_session_open(f->conn, &o, &s), -EINVAL);
	memset(tenant, 'x', sizeof(tenant));
	tenant[DJINN_TENANT_LEN] = '\0'; /* 64 bytes: one too many */
	o.tenant = tenant;
	assert_int_equal(djinn_session_open(f->conn, &o, &s), -EINVAL);
	o.tenant = NULL;
	o.priority = 8;
	assert_int_equal(djinn_session_open(f->conn, &o, &s), -EINVAL);
	assert_null(s);
	assert_int_equal(djinn_signal(f->s, DJINN_PHASE_IDLE + 1, 0), -EINVAL);
	expect_silence(f->peer);
}

static void test_args_tensor(void **state)
{
	struct peer_fx *f = *state;
	struct djinn_tensor *t = NULL, *x;
	struct djinn_tensor_desc d;
	uint8_t buf[64] = { 0 };

	d = D(0, 4); /* no dtype */
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -EINVAL);
	d = D(DJINN_DTYPE_U8 + 1, 4);
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -EINVAL);
	d = D(DJINN_DTYPE_F32, 4);
	d.ndim = DJINN_MAX_DIMS + 1;
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -EINVAL);
	d = D(DJINN_DTYPE_F32, 4);
	d.dims[3] = 2; /* past ndim */
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -EINVAL);
	d = D(DJINN_DTYPE_F32, 4);
	d.__reserved[5] = 1;
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -EINVAL);
	d = D(DJINN_DTYPE_I64, 1ull << 31, 1ull << 31);
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 0, &t), -E2BIG);
	d = D(DJINN_DTYPE_F32, 4);
	assert_int_equal(djinn_tensor_upload(f->s, &d, buf, 2, &t), -EINVAL);
	assert_int_equal(djinn_tensor_upload(f->s, &d, NULL, DJINN_SEG_TEXT,
					     &t),
			 -EINVAL);
	assert_null(t);

	/* ranges past the end of a 16-byte tensor */
	x = fake_tensor(f->s, 0x42, d);
	assert_ptr_equal(djinn_tensor_desc(x), &x->desc);
	assert_memory_equal(djinn_tensor_desc(x), &d, sizeof(d));
	assert_int_equal(djinn_tensor_download(x, 0, 17, buf), -EINVAL);
	assert_int_equal(djinn_tensor_download(x, 17, 0, buf), -EINVAL);
	assert_int_equal(djinn_tensor_download(x, 8, UINT64_MAX, buf), -EINVAL);
	assert_int_equal(djinn_tensor_download(x, 0, 4, NULL), -EINVAL);
	assert_int_equal(djinn_tensor_write(x, 12, 5, buf), -EINVAL);
	assert_int_equal(djinn_tensor_write(x, 0, 4, NULL), -EINVAL);
	expect_silence(f->peer);
}

/* ---------------------------------------------------------------------- */
/* Logging */

static char logged[512];
static int logged_level = -1;

static void log_hook(void *arg, int level, const char *msg)
{
	*(int *)arg += 1;
	logged_level = level;
	snprintf(logged, sizeof(logged), "%s", msg);
}

static void test_log_hook(void **state)
{
	struct djinn_conn *conn;
	int calls = 0;

	djinn_set_log(log_hook, &calls);
	assert_int_equal(djinn_connect("unix:/nonexistent/djinnd.sock", &conn),
			 -ENOENT);
	assert_true(calls > 0);
	assert_int_equal(logged_level, DJINN_LOG_DEBUG);
	assert_non_null(strstr(logged, "unix:/nonexistent/djinnd.sock"));
	djinn_set_log(NULL, NULL);
	calls = 0;
	assert_int_equal(djinn_connect("unix:/nonexistent/djinnd.sock", &conn),
			 -ENOENT);
	assert_int_equal(calls, 0);
}

/* ---------------------------------------------------------------------- */
/* The keeper */

/* A session with a 30 ms lease gets a HEARTBEAT about every 10 ms, and
 * one at a time: the next waits for the answer. */
static void test_keeper_heartbeat(void **state)
{
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_hdr h;
	uint64_t t0;
	int peer;

	conn = pair_conn(&peer);
	t0 = mono_ns();
	s = fake_session(conn, 42, 30 * NSEC_PER_MSEC);
	peer_frame(peer, &h);
	assert_true(mono_ns() - t0 >= 9 * NSEC_PER_MSEC);
	assert_true(mono_ns() - t0 < NSEC_PER_SEC);
	assert_int_equal(h.magic, DJINN_MAGIC);
	assert_int_equal(h.version, DJINN_PROTO_VERSION);
	assert_int_equal(h.type, DJINN_MSG_HEARTBEAT);
	assert_int_equal(h.flags, 0);
	assert_int_equal(h.__reserved, 0);
	assert_int_equal(h.session_id, 42);
	assert_int_equal(h.payload_len, 0);
	usleep(50000); /* unanswered: no second one */
	expect_silence(peer);
	(void)s; /* freed with the connection */
	djinn_disconnect(conn);
	close(peer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addr_unix),
		cmocka_unit_test(test_addr_tcp),
		cmocka_unit_test(test_addr_bad),
		cmocka_unit_test(test_addr_default),
		cmocka_unit_test(test_addr_default_user),
		cmocka_unit_test(test_connect_nobody),
		cmocka_unit_test(test_sha256),
		cmocka_unit_test_setup_teardown(test_args_null, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_args_session, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_args_tensor, setup,
						teardown),
		cmocka_unit_test(test_log_hook),
		cmocka_unit_test(test_keeper_heartbeat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
