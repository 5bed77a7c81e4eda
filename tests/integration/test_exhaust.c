// SPDX-License-Identifier: MIT
/*
 * Exhaustion attacks against a real djinnd (Documentation/djinnd.rst,
 * "Connection limits"): each test mounts one attack and asserts both that
 * it fails with a precise error and that a victim running alongside
 * completes its work (a session, a tensor written and read back).
 *
 * - a TEXT_LOOKUP that misses is a miss in ADMIN_STATS, not an error;
 * - half a frame header, or a header and half its body, held open: the
 *   frame is refused with -ETIMEDOUT after server.frame_timeout and the
 *   connection closed;
 * - connections idling without a session: closed with -ETIMEDOUT after
 *   server.idle_timeout, while one with a session idles on;
 * - one uid opening more unix connections than
 *   server.max_connections_per_uid, one address more TCP connections
 *   than server.max_connections_per_addr: the one over is refused with
 *   -EUSERS and closed, the others and other addresses are served;
 * - reads pipelined and left unread, staged as on a GPU
 *   (--cpu-device-only): djinnd's memory stays bounded, each tenant's
 *   staging within memory.read_staging and a buffer a connection, and
 *   every answer comes once read.
 *
 * Timeouts are configured short (hundreds of ms) so the tests stay fast.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixture.h"

#define SHORT_MS 300
#define MiB (1ull << 20)

/* A victim's whole job: a session, a tensor written and read back, the
 * session closed. */
static void victim_at(int line, int fd)
{
	float in[16], out[16];
	struct djinn_tensor_desc d = F32(16);
	uint64_t sid, h;

	for (int i = 0; i < 16; i++)
		in[i] = (float)i * 1.5f - 3.0f;
	sid = open_session(fd, "victim");
	h = create_data(fd, sid, &d, in, sizeof(in));
	memset(out, 0, sizeof(out));
	tensor_read(fd, sid, h, 0, sizeof(out), out);
	if (memcmp(in, out, sizeof(in)))
		fail_msg("line %d: victim read back other bytes", line);
	close_session(fd, sid);
}
#define victim(fd) victim_at(__LINE__, fd)

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* The connection-level error @err (request @id, 0: none) on @fd, its
 * message holding @phrase, then EOF. */
static void expect_refused_at(int line, int fd, uint64_t id, int err,
			      const char *phrase)
{
	struct dj_resp r;
	int ret = dj_recv(fd, &r, 5000);

	if (ret != 1)
		fail_msg("line %d: no error frame (%d, %s)", line, ret,
			 ret_str(ret));
	expect_error_at(line, &r, err, phrase);
	if (r.hdr.request_id != id)
		fail_msg("line %d: error for request %llu, want %llu", line,
			 (unsigned long long)r.hdr.request_id,
			 (unsigned long long)id);
	dj_resp_free(&r);
	expect_eof_at(line, fd);
}
#define expect_refused(fd, id, err, phrase) \
	expect_refused_at(__LINE__, fd, id, err, phrase)

/* ---------------------------------------------------------------------- */

/* A TEXT_LOOKUP that finds nothing is the first step of every upload: a
 * miss, not an error, in the statistics. */
static void test_lookup_miss(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_stats st0 = stats_now(fx), st;
	struct djinn_text_lookup l = { .desc = F32(4) };
	int fd = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "t");

	memset(l.fp, 0xa5, sizeof(l.fp));
	for (int i = 0; i < 3; i++)
		call_err(fd, DJINN_MSG_TEXT_LOOKUP, sid, &l, sizeof(l), -ENOENT,
			 "no text with that fingerprint");
	st = stats_now(fx);
	assert_int_equal(st.text_lookups, st0.text_lookups + 3);
	assert_int_equal(st.text_misses, st0.text_misses + 3);
	assert_int_equal(st.errors, st0.errors);
	/* A real error still counts. */
	call_err(fd, DJINN_MSG_TENSOR_RELEASE, sid, &(uint64_t){ 99 }, 8,
		 -ENOENT, NULL);
	st = stats_now(fx);
	assert_int_equal(st.errors, st0.errors + 1);
	close_session(fd, sid);
	victim(fd);
	close(fd);
	check_health(fx, 0);
}

static int setup_frame(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000,
			    "server.frame_timeout=300ms");
}

/* Half a header, then nothing: -ETIMEDOUT for no request, then EOF;
 * a header and half its body: -ETIMEDOUT for that request. */
static void test_half_header(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .priority = 4 };
	struct djinn_hdr h = dj_hdr(DJINN_MSG_HELLO, 7, 0, 0);
	struct djinn_hdr hb = dj_hdr(DJINN_MSG_SESSION_OPEN, 8, 0, sizeof(o));
	struct djinn_admin_stats st0 = stats_now(fx);
	int a[4], fd = xconnect(fx->d.sock);
	int64_t t0 = dj_now_ms();

	for (int i = 0; i < 4; i++) {
		a[i] = xconnect(fx->d.sock);
		if (i % 2)
			assert_int_equal(dj_send_raw(a[i], &hb, &o, 10), 0);
		else
			assert_int_equal(dj_write(a[i], &h, 20, 1000), 0);
	}
	/* The victim is served while the attackers hold their frames. */
	victim(fd);
	for (int i = 0; i < 4; i++) {
		if (i % 2)
			expect_refused(a[i], 8, -ETIMEDOUT,
				       "frame body not finished within 300 ms");
		else
			expect_refused(a[i], 0, -ETIMEDOUT,
				       "frame header not finished within "
				       "300 ms");
		close(a[i]);
	}
	assert_true(dj_now_ms() - t0 >= SHORT_MS);
	assert_int_equal(stats_now(fx).sessions_opened,
			 st0.sessions_opened + 1);
	/* A frame sent slowly but within the deadline is taken. */
	assert_int_equal(dj_write(fd, &h, 20, 1000), 0);
	sleep_ms(SHORT_MS / 3);
	assert_int_equal(dj_write(fd, (uint8_t *)&h + 20, sizeof(h) - 20, 1000),
			 0);
	{
		struct dj_resp r;

		assert_int_equal(dj_recv(fd, &r, 5000), 1);
		assert_int_equal(r.error, 0);
		assert_int_equal(r.hdr.request_id, 7);
		dj_resp_free(&r);
	}
	victim(fd);
	close(fd);
	check_health(fx, 0);
}

/*
 * A tensor's data trickled a byte at a time, each within frame_timeout
 * of the last: it may take frame_timeout plus 1 s a MiB in all (here 300
 * ms + 1 s for 1 MiB), then the request is refused with -ETIMEDOUT and
 * its memory given back; the victim is served meanwhile.
 */
static void test_trickle(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(1 << 18); /* 1 MiB */
	int fd = xconnect(fx->d.sock), v = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "trickle");
	struct djinn_tensor_create c = { .desc = d, .segment = DJINN_SEG_DATA };
	struct djinn_hdr h =
		dj_hdr(DJINN_MSG_TENSOR_CREATE, 9, sid, sizeof(c) + (1 << 20));
	int64_t t0 = dj_now_ms();
	bool refused = false;
	uint8_t byte = 0;

	assert_int_equal(dj_send_raw(fd, &h, &c, sizeof(c)), 0);
	/* a byte every 150 ms: never a stall of 300 */
	while (dj_now_ms() - t0 < 5000) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 150) > 0) {
			refused = true;
			break;
		}
		if (dj_write(fd, &byte, 1, 1000))
			break;
	}
	assert_true(refused);
	expect_refused(fd, 9, -ETIMEDOUT,
		       "the frame's data not finished within 1300 ms");
	assert_true(dj_now_ms() - t0 >= 1300);
	close(fd);
	victim(v);
	close(v);
	check_health(fx, 0);
}

static int setup_idle(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000, "server.idle_timeout=300ms");
}

/* Connections that idle with no session are closed; one holding a
 * session is not. */
static void test_idle(void **state)
{
	struct fx *fx = *state;
	struct djinn_tensor_desc d = F32(4);
	float in[4] = { 1, 2, 3, 4 }, out[4];
	int a[4], fd = xconnect(fx->d.sock);
	uint64_t sid, h;

	sid = open_session(fd, "holder");
	h = create_data(fd, sid, &d, in, sizeof(in));
	for (int i = 0; i < 4; i++) {
		a[i] = xconnect(fx->d.sock);
		if (i == 0)
			hello(a[i]); /* idle after a request, too */
	}
	for (int i = 0; i < 4; i++) {
		expect_refused(a[i], 0, -ETIMEDOUT,
			       "idle for 300 ms without a session");
		close(a[i]);
	}
	/* The session's connection idled as long and still works. */
	sleep_ms(2 * SHORT_MS);
	tensor_read(fd, sid, h, 0, sizeof(out), out);
	assert_memory_equal(in, out, sizeof(in));
	close_session(fd, sid);
	close(fd);
	/* A fresh connection that goes straight to work is served. */
	fd = xconnect(fx->d.sock);
	victim(fd);
	close(fd);
	check_health(fx, 0);
}

static int setup_uid(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000,
			    "server.max_connections_per_uid=4");
}

/* A uid over its cap is refused; its connections already open are
 * served, and so is a new one once one has closed. */
static void test_per_uid(void **state)
{
	struct fx *fx = *state;
	int a[4], over;
	char phrase[80];

	for (int i = 0; i < 4; i++) {
		a[i] = xconnect(fx->d.sock);
		hello(a[i]);
	}
	over = xconnect(fx->d.sock);
	snprintf(phrase, sizeof(phrase), "4 connections of uid %d already",
		 (int)geteuid());
	expect_refused(over, 0, -EUSERS, phrase);
	close(over);
	/* The admin socket does not count. */
	hello(fx->adm);
	victim(a[3]);
	close(a[0]);
	/* Once it is gone, a new connection takes its place. */
	for (int tries = 0;; tries++) {
		struct dj_resp r;

		over = xconnect(fx->d.sock);
		if (dj_call(over, DJINN_MSG_HELLO, 0, NULL, 0, &r) == 1 &&
		    !r.error) {
			dj_resp_free(&r);
			break;
		}
		dj_resp_free(&r);
		close(over);
		if (tries == 50)
			fail_msg("no connection after one closed");
		sleep_ms(20);
	}
	victim(over);
	close(over);
	for (int i = 1; i < 4; i++)
		close(a[i]);
	check_health(fx, 0);
}

static int setup_conns(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000, "server.max_connections=16");
}

/* Clients filling server.max_connections: one more is closed
 * unanswered, while the admin socket, whose slots are its own, still
 * answers a new connection (it counted against the clients' before). */
static void test_admin_slots(void **state)
{
	struct fx *fx = *state;
	int a[16], over, adm;
	struct dj_resp r;

	/* sixteen answered (the set-up's own connection may still be
	 * going: a refused one is tried again) */
	for (int i = 0, tries = 0; i < 16;) {
		a[i] = xconnect(fx->d.sock);
		if (dj_call(a[i], DJINN_MSG_HELLO, 0, NULL, 0, &r) == 1 &&
		    !r.error) {
			dj_resp_free(&r);
			i++;
			continue;
		}
		close(a[i]);
		if (++tries == 100)
			fail_msg("only %d client connections of 16", i);
		sleep_ms(20);
	}
	over = xconnect(fx->d.sock);
	assert_int_equal(dj_wait_eof(over, 10000), 1);
	close(over);
	adm = xconnect(fx->d.admin);
	assert_int_equal(dj_call(adm, DJINN_MSG_ADMIN_STATS, 0, NULL, 0, &r),
			 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	close(adm);
	victim(a[15]);
	for (int i = 0; i < 16; i++)
		close(a[i]);
	check_health(fx, 0);
}

static unsigned int tcp_port;

/* fx_start_set() with arguments @extra. */
static int start_args(void **state, const char *const *extra)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct dj_resp r;
	int fd;

	if (!fx)
		return -1;
	if (djd_start_args(&fx->d, DEV_MEM, 10000, extra)) {
		free(fx);
		return -1;
	}
	fd = dj_connect(fx->d.sock);
	fx->adm = dj_connect(fx->d.admin);
	if (fd < 0 || fx->adm < 0 ||
	    dj_call(fx->adm, DJINN_MSG_ADMIN_VMU, 0, NULL, 0, &r) != 1 ||
	    r.error || r.len != sizeof(fx->base)) {
		fprintf(stderr, "setup: no ADMIN_VMU\n");
		djd_kill(&fx->d);
		free(fx);
		return -1;
	}
	memcpy(&fx->base, r.data, sizeof(fx->base));
	dj_resp_free(&r);
	close(fd);
	*state = fx;
	return 0;
}

static int setup_addr(void **state)
{
	char listen[40];
	const char *extra[] = { "--set", "server.max_connections_per_uid=2",
				"--listen", listen, NULL };

	tcp_port = dj_free_port();
	if (!tcp_port)
		return -1;
	snprintf(listen, sizeof(listen), "tcp:127.0.0.1:%u", tcp_port);
	return start_args(state, extra);
}

/* A TCP connection to the daemon from @from (127.0.0.x). */
static int tcp_from_at(int line, const char *from)
{
	struct sockaddr_in src = { .sin_family = AF_INET },
			   dst = { .sin_family = AF_INET,
				   .sin_port = htons((uint16_t)tcp_port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, from, &src.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) ||
	    connect(fd, (struct sockaddr *)&dst, sizeof(dst)))
		fail_msg("line %d: tcp from %s: %s", line, from,
			 strerror(errno));
	return fd;
}
#define tcp_from(from) tcp_from_at(__LINE__, from)

/*
 * A local peer over TCP counts as its uid, wherever in 127.0.0.0/8 it
 * binds (it counted by address, so one user spread over 127.0.0.0/8 had a
 * cap per address): root's third connection, from another loopback
 * address, is refused, and so is a unix one of root's; another uid's is
 * served, and root's again once one has closed. (Remote peers count by
 * address block: tests/unit/test_addrkey.c.)
 */
static void test_per_addr(void **state)
{
	struct fx *fx = *state;
	char port[24];
	int a[2], over, fd;

	for (int i = 0; i < 2; i++) {
		a[i] = tcp_from("127.0.0.2");
		hello(a[i]);
	}
	over = tcp_from("127.0.0.3");
	expect_refused(over, 0, -EUSERS, "2 connections of uid 0 already");
	close(over);
	over = xconnect(fx->d.sock);
	expect_refused(over, 0, -EUSERS, "2 connections of uid 0 already");
	close(over);
	/* another uid, over TCP */
	snprintf(port, sizeof(port), "tcp:%u", tcp_port);
	fd = dj_connect_as(port, 65534, 65534, NULL, 0);
	if (fd == -EPERM) {
		printf("  not root: no other uid to connect as\n");
	} else {
		assert_true(fd >= 0);
		victim(fd);
		close(fd);
	}
	victim(a[1]);
	close(a[0]);
	/* once one is gone, root's unix connection takes its place */
	for (int tries = 0;; tries++) {
		struct dj_resp r;

		fd = xconnect(fx->d.sock);
		if (dj_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r) == 1 &&
		    !r.error) {
			dj_resp_free(&r);
			break;
		}
		dj_resp_free(&r);
		close(fd);
		if (tries == 50)
			fail_msg("no connection after one closed");
		sleep_ms(20);
	}
	victim(fd);
	close(fd);
	close(a[1]);
	check_health(fx, 0);
}

static int setup_staged(void **state)
{
	const char *extra[] = { "--cpu-device-only", NULL };

	return start_args(state, extra);
}

/* The daemon's resident memory, bytes. */
static uint64_t rss_at(int line, const struct fx *fx)
{
	char path[64], l[256];
	uint64_t kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)fx->d.pid);
	f = fopen(path, "r");
	if (!f)
		fail_msg("line %d: %s: %s", line, path, strerror(errno));
	while (fgets(l, sizeof(l), f))
		if (sscanf(l, "VmRSS: %" SCNu64, &kb) == 1)
			break;
	fclose(f);
	if (!kb)
		fail_msg("line %d: no VmRSS in %s", line, path);
	return kb << 10;
}
#define rss(fx) rss_at(__LINE__, fx)

/*
 * TENSOR_READs pipelined and never read: each is staged in host memory
 * (--cpu-device-only, as on a GPU). At 64 reads or 64 MiB in flight djinnd
 * stops taking the connection's requests, so its memory stays bounded;
 * nothing is lost: once the client reads, every answer comes, in full.
 */
static void test_pipelined_reads(void **state)
{
	enum { READS = 512 };
	const uint64_t bytes = MiB;
	struct fx *fx = *state;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, MiB);
	size_t fl = sizeof(struct djinn_hdr) + sizeof(struct djinn_tensor_io);
	uint8_t *data = malloc(bytes), *frames = malloc(READS * fl);
	int fd = xconnect(fx->d.sock), v;
	uint64_t sid, h, rss0, grew;
	bool seen[READS] = { false };

	assert_non_null(data);
	assert_non_null(frames);
	for (uint64_t i = 0; i < bytes; i++)
		data[i] = (uint8_t)(i * 7 + i / 251);
	sid = open_session(fd, "reader");
	h = create_data(fd, sid, &d, data, bytes);
	rss0 = rss(fx);
	for (int i = 0; i < READS; i++) {
		struct djinn_tensor_io io = { .handle = h, .len = bytes };
		struct djinn_hdr hd = dj_hdr(DJINN_MSG_TENSOR_READ,
					     5000 + (uint64_t)i, sid,
					     sizeof(io));

		memcpy(frames + i * fl, &hd, sizeof(hd));
		memcpy(frames + i * fl + sizeof(hd), &io, sizeof(io));
	}
	assert_int_equal(dj_write(fd, frames, READS * fl, 5000), 0);
	/* A victim is served meanwhile. */
	v = xconnect(fx->d.sock);
	victim(v);
	sleep_ms(SHORT_MS);
	grew = rss(fx) - rss0;
	printf("# %d unread reads of 1 MiB: djinnd grew by %llu MiB\n", READS,
	       (unsigned long long)(grew / MiB));
	if (grew > 160 * MiB)
		fail_msg("%d unread reads of 1 MiB grew djinnd by %llu MiB",
			 READS, (unsigned long long)(grew / MiB));
	victim(v);
	close(v);
	/* answers may come in any order (protocol.rst): each once */
	for (int k = 0; k < READS; k++) {
		struct dj_resp r;
		uint64_t i;

		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		if (r.error)
			fail_msg("answer %d: error %d \"%s\"", k, r.error,
				 r.msg);
		i = r.hdr.request_id - 5000;
		if (r.hdr.request_id < 5000 || i >= READS || seen[i])
			fail_msg("an answer to request %llu",
				 (unsigned long long)r.hdr.request_id);
		seen[i] = true;
		assert_int_equal(r.len, bytes);
		assert_memory_equal(r.data, data, bytes);
		dj_resp_free(&r);
	}
	close_session(fd, sid);
	close(fd);
	free(frames);
	free(data);
	check_health(fx, 0);
}

/* Staging for reads of a GPU's memory: 16 MiB a tenant (two reads in
 * parts at once), on a device big enough for several tensors of 12 MiB. */
static int setup_staging(void **state)
{
	const char *extra[] = { "--cpu-device-only", "--set",
				"memory.read_staging=16M", NULL };
	const char *asan = getenv("ASAN_OPTIONS");
	char *saved = asan ? strdup(asan) : NULL, opts[512];
	int ret;

	/* Under ASan (make asan) freed memory waits in a quarantine of up
	 * to 256 MiB, resident: the test weighs djinnd's own growth, so
	 * its djinnd keeps a small one. */
	if (saved) {
		snprintf(opts, sizeof(opts), "%s:quarantine_size_mb=4", saved);
		setenv("ASAN_OPTIONS", opts, 1);
	}
	ret = fx_start_args(state, "512M", 10000, extra);
	if (saved) {
		setenv("ASAN_OPTIONS", saved, 1);
		free(saved);
	}
	return ret;
}

/* Tenant @tenant's sample of family @name now (-1: none). */
static int64_t tenant_metric(struct fx *fx, const char *name,
			     const char *tenant)
{
	char series[160], *m = metrics_scrape(fx);
	int64_t v;

	snprintf(series, sizeof(series), "%s{tenant=\"%s\"}", name, tenant);
	v = metrics_value(m, series);
	free(m);
	return v;
}

/* Wait (bounded) until @tenant's reads hold no staging and none waits. */
static void wait_unstaged_at(int line, struct fx *fx, const char *tenant)
{
	int64_t deadline = dj_now_ms() + DJ_TIMEOUT_MS, staged, waiting;

	for (;;) {
		staged = tenant_metric(fx, "djinn_tenant_read_staging_bytes",
				       tenant);
		waiting =
			tenant_metric(fx, "djinn_tenant_reads_waiting", tenant);
		if (staged <= 0 && waiting <= 0)
			return;
		if (dj_now_ms() > deadline)
			fail_msg("line %d: %s still stages %lld bytes, %lld "
				 "reads waiting",
				 line, tenant, (long long)staged,
				 (long long)waiting);
		sleep_ms(10);
	}
}
#define wait_unstaged(fx, tenant) wait_unstaged_at(__LINE__, fx, tenant)

/* A U8 tensor of @len bytes of @seed's pattern, in @data. */
static uint64_t patterned_at(int line, int fd, uint64_t sid, uint8_t *data,
			     uint64_t len, unsigned int seed)
{
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, len);

	for (uint64_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * seed + i / 251);
	return create_at(line, fd, sid, &d, DJINN_SEG_DATA, NULL, data, len,
			 NULL);
}
#define patterned(fd, sid, data, len, seed) \
	patterned_at(__LINE__, fd, sid, data, len, seed)

/* @n reads of [@off, +@len) of @h sent at once, request ids @id0 on. */
static void send_reads(int fd, uint64_t sid, uint64_t h, uint64_t off,
		       uint64_t len, unsigned int n, uint64_t id0)
{
	size_t fl = sizeof(struct djinn_hdr) + sizeof(struct djinn_tensor_io);
	uint8_t *frames = malloc(n * fl);

	assert_non_null(frames);
	for (unsigned int i = 0; i < n; i++) {
		struct djinn_tensor_io io = { .handle = h,
					      .offset = off,
					      .len = len };
		struct djinn_hdr hd =
			dj_hdr(DJINN_MSG_TENSOR_READ, id0 + i, sid, sizeof(io));

		memcpy(frames + i * fl, &hd, sizeof(hd));
		memcpy(frames + i * fl + sizeof(hd), &io, sizeof(io));
	}
	assert_int_equal(dj_write(fd, frames, n * fl, DJ_TIMEOUT_MS), 0);
	free(frames);
}

#define STAGED_LEN (12 * MiB + 5) /* three parts and a byte */
#define ATTACKERS 6
#define ATTACK_READS 6
/* Staged at most: memory.read_staging (two reads in parts, two buffers
 * each) and one buffer for each connection's first read; so many reads
 * started, at most. */
#define STAGED_MAX ((int64_t)(16 * MiB + ATTACKERS * 4 * MiB))
#define STARTED_MAX (2 + ATTACKERS)

/*
 * Reads of a GPU's memory are staged in pinned host memory. One over
 * 4 MiB goes in parts through two buffers of 4 MiB, whatever its
 * length, and a tenant's reads hold at most memory.read_staging at once:
 * its reads past that wait, in order, for its earlier ones to be sent.
 *
 * - ranges that start and end inside parts, or on their edges, read
 *   back the bytes written;
 * - six connections of one tenant each pipeline six reads of 12 MiB and
 *   read nothing: djinnd grows by a few buffers, not by the 432 MiB
 *   they ask for, the tenant's staging stays within its 16 MiB and a
 *   buffer a connection, reads wait; a victim tenant alongside reads
 *   12 MiB of its own meanwhile; then, read one connection after the
 *   other, every answer comes, whole and in its bytes (each
 *   connection's first read goes on whatever its tenant holds);
 * - a connection closed with its replies unread gives its staging back;
 * - a session killed while its read is mid-reply: the reply is finished
 *   (its header promised the bytes), the connection goes on.
 */
static void test_staged_reads(void **state)
{
	static const uint64_t ranges[][2] = {
		{ 0, STAGED_LEN },
		{ 1, 9 * MiB + 7 },
		{ 4 * MiB - 3, 4 * MiB + 6 },
		{ 0, 4 * MiB },
		{ 5, 4 * MiB + 1 },
		{ STAGED_LEN - 1, 1 },
		{ STAGED_LEN - 8 * MiB - 1, 8 * MiB + 1 },
	};
	struct fx *fx = *state;
	char me[32];
	uint8_t *data[ATTACKERS], *vdata = malloc(STAGED_LEN);
	uint8_t *buf = malloc(STAGED_LEN);
	uint64_t sid[ATTACKERS], h[ATTACKERS], vsid, vh, lsid, lh, rss0, grew;
	int fd[ATTACKERS], v, late;
	int64_t staged, waiting, deadline;
	struct djinn_session_resp resp0;
	struct djinn_hdr rh;

	assert_non_null(vdata);
	assert_non_null(buf);
	snprintf(me, sizeof(me), "uid:%u", (unsigned int)getuid());
	for (int c = 0; c < ATTACKERS; c++) {
		data[c] = malloc(STAGED_LEN);
		assert_non_null(data[c]);
		fd[c] = xconnect(fx->d.sock);
		sid[c] = open_at(__LINE__, fd[c], "reader", 4, 0,
				 c ? NULL : &resp0);
		h[c] = patterned(fd[c], sid[c], data[c], STAGED_LEN,
				 7 + (unsigned int)c);
	}
	for (size_t i = 0; i < ARRAY_SIZE(ranges); i++) {
		read_at(__LINE__, fd[0], sid[0], h[0], ranges[i][0],
			ranges[i][1], buf);
		if (memcmp(buf, data[0] + ranges[i][0], ranges[i][1]))
			fail_msg("range [%llu, +%llu) read back other bytes",
				 (unsigned long long)ranges[i][0],
				 (unsigned long long)ranges[i][1]);
	}
	wait_unstaged(fx, me);

	rss0 = rss(fx);
	for (int c = 0; c < ATTACKERS; c++)
		send_reads(fd[c], sid[c], h[c], 0, STAGED_LEN, ATTACK_READS,
			   6000);
	/* the reads fill the tenant's staging, and the rest wait */
	deadline = dj_now_ms() + DJ_TIMEOUT_MS;
	do {
		sleep_ms(10);
		staged = tenant_metric(fx, "djinn_tenant_read_staging_bytes",
				       me);
		waiting = tenant_metric(fx, "djinn_tenant_reads_waiting", me);
	} while (waiting < ATTACKERS * ATTACK_READS - STARTED_MAX &&
		 dj_now_ms() < deadline);
	sleep_ms(SHORT_MS);
	staged = tenant_metric(fx, "djinn_tenant_read_staging_bytes", me);
	waiting = tenant_metric(fx, "djinn_tenant_reads_waiting", me);
	printf("# %d unread reads of 12 MiB: %lld bytes staged, %lld reads "
	       "waiting\n",
	       ATTACKERS * ATTACK_READS, (long long)staged, (long long)waiting);
	if (staged > STAGED_MAX)
		fail_msg("the tenant stages %lld bytes, over 16 MiB and 4 MiB "
			 "a connection",
			 (long long)staged);
	if (waiting < ATTACKERS * ATTACK_READS - STARTED_MAX)
		fail_msg("%lld reads wait, want at least %d",
			 (long long)waiting,
			 ATTACKERS * ATTACK_READS - STARTED_MAX);

	/* another tenant is not held up by it */
	v = dj_connect_as(fx->d.sock, 65534, 65534, NULL, 0);
	if (v < 0)
		fail_msg("connect as nobody: %s", strerror(-v));
	hello(v);
	vsid = open_session(v, "victim");
	vh = patterned(v, vsid, vdata, STAGED_LEN, 3);
	read_at(__LINE__, v, vsid, vh, 0, STAGED_LEN, buf);
	assert_memory_equal(buf, vdata, STAGED_LEN);
	victim(v);

	grew = rss(fx) - rss0;
	printf("# djinnd grew by %llu MiB\n", (unsigned long long)(grew / MiB));
	if (grew > 96 * MiB)
		fail_msg("%d unread reads of 12 MiB grew djinnd by %llu MiB",
			 ATTACKERS * ATTACK_READS,
			 (unsigned long long)(grew / MiB));

	/* nothing is lost: each answer comes whole (any order) */
	for (int c = 0; c < ATTACKERS; c++) {
		bool seen[ATTACK_READS] = { false };

		for (int k = 0; k < ATTACK_READS; k++) {
			struct dj_resp r;
			uint64_t i;

			assert_int_equal(dj_recv(fd[c], &r, DJ_TIMEOUT_MS), 1);
			if (r.error)
				fail_msg("conn %d answer %d: error %d \"%s\"",
					 c, k, r.error, r.msg);
			i = r.hdr.request_id - 6000;
			if (i >= ATTACK_READS || seen[i])
				fail_msg("an answer to request %llu",
					 (unsigned long long)r.hdr.request_id);
			seen[i] = true;
			assert_int_equal(r.len, STAGED_LEN);
			if (memcmp(r.data, data[c], STAGED_LEN))
				fail_msg("conn %d answer %d: other bytes", c,
					 k);
			dj_resp_free(&r);
		}
	}
	wait_unstaged(fx, me);

	/* replies left unread on a connection that closes: staging back */
	late = xconnect(fx->d.sock);
	hello(late);
	attach(late, sid[0], resp0.token);
	send_reads(late, sid[0], h[0], 0, STAGED_LEN, ATTACK_READS, 7000);
	assert_true(dj_read(late, buf, MiB, DJ_TIMEOUT_MS) > 0);
	close(late);
	wait_unstaged(fx, me);
	victim(fd[0]);

	/* its session killed mid-reply: the reply, whose header promised
	 * its bytes, is finished all the same (the read holds the memory);
	 * the other read ends whole or "session ended"; the connection and
	 * the tenant's others go on, and the staging comes back */
	late = xconnect(fx->d.sock);
	hello(late);
	lsid = open_session(late, "killed");
	lh = patterned(late, lsid, vdata, STAGED_LEN, 5);
	send_reads(late, lsid, lh, 0, STAGED_LEN, 2, 8000);
	/* the first answer has begun: its header is here */
	assert_int_equal(dj_read(late, &rh, sizeof(rh), DJ_TIMEOUT_MS),
			 sizeof(rh));
	assert_int_equal(rh.flags & DJINN_F_ERROR, 0);
	assert_int_equal(rh.payload_len, STAGED_LEN);
	call_void(fx->adm, DJINN_MSG_ADMIN_KILL, 0,
		  &(struct djinn_admin_kill){ .session_id = lsid },
		  sizeof(struct djinn_admin_kill));
	assert_int_equal(dj_read(late, buf, STAGED_LEN, DJ_TIMEOUT_MS),
			 STAGED_LEN);
	assert_memory_equal(buf, vdata, STAGED_LEN);
	{
		struct dj_resp r;

		assert_int_equal(dj_recv(late, &r, DJ_TIMEOUT_MS), 1);
		/* the other one of 8000 and 8001 */
		assert_int_equal(r.hdr.request_id, 16001 - rh.request_id);
		printf("# the killed session's other read: %s\n",
		       r.error ? "session ended" : "whole");
		if (r.error)
			expect_error(&r, -ECANCELED, "session ended");
		else if (r.len != STAGED_LEN ||
			 memcmp(r.data, vdata, STAGED_LEN))
			fail_msg("the other read of the killed session: %llu "
				 "other bytes",
				 (unsigned long long)r.len);
		dj_resp_free(&r);
	}
	victim(late);
	close(late);
	wait_unstaged(fx, me);
	victim(fd[0]);

	for (int c = 0; c < ATTACKERS; c++) {
		close_session(fd[c], sid[c]);
		close(fd[c]);
		free(data[c]);
	}
	close_session(v, vsid);
	close(v);
	free(vdata);
	free(buf);
	check_health(fx, 0);
}

/* A text tensor (U8, one dim) of @len bytes of @seed's pattern. */
static uint64_t text_at(int line, int fd, uint64_t sid, size_t len,
			unsigned int seed, struct djinn_model_file *mf)
{
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, len);
	uint8_t *data = malloc(len);
	uint32_t flags;

	if (!data)
		fail_msg("line %d: out of memory", line);
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * seed + i / 253);
	sha256(data, len, mf->fp);
	mf->handle = create_at(line, fd, sid, &d, DJINN_SEG_TEXT, mf->fp, data,
			       len, &flags);
	free(data);
	return mf->handle;
}
#define text(fd, sid, len, seed, mf) text_at(__LINE__, fd, sid, len, seed, mf)

/* MODEL_OPEN_UPLOADED of @cfg and @n @files must fail with @err. */
static void upload_err_at(int line, int fd, uint64_t sid,
			  const struct djinn_model_file *cfg,
			  const struct djinn_model_file *files, uint32_t n,
			  int err, const char *phrase)
{
	struct djinn_model_upload u = { .nr_files = n, .config = *cfg };
	size_t len = sizeof(u) + n * sizeof(*files);
	uint8_t *rq = malloc(len);

	assert_non_null(rq);
	memcpy(rq, &u, sizeof(u));
	memcpy(rq + sizeof(u), files, n * sizeof(*files));
	call_err_at(line, fd, DJINN_MSG_MODEL_OPEN_UPLOADED, sid, rq, len, err,
		    phrase);
	free(rq);
}
#define upload_err(...) upload_err_at(__LINE__, __VA_ARGS__)

/* One file listed many times (by handle or by fingerprint), or with
 * config.json's handle, is refused before anything is copied. */
static void test_upload_dups(void **state)
{
	enum { N = 64 };
	struct fx *fx = *state;
	struct djinn_model_file cfg, w, files[N], fp[N];
	int fd = xconnect(fx->d.sock), v = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "uploader");

	text(fd, sid, 64, 3, &cfg);
	text(fd, sid, 4 * MiB, 5, &w);
	for (int i = 0; i < N; i++) {
		files[i] = w;
		fp[i] = (struct djinn_model_file){ 0 };
		memcpy(fp[i].fp, w.fp, DJINN_FP_LEN);
	}
	upload_err(fd, sid, &cfg, files, N, -EINVAL,
		   "file 0 and file 1: the same handle");
	fp[0].fp[0] ^= 1;
	upload_err(fd, sid, &(struct djinn_model_file){ 0 }, fp, N, -EINVAL,
		   "file 1 and file 2: the same fingerprint");
	files[3] = cfg;
	upload_err(fd, sid, &cfg, files + 3, 2, -EINVAL,
		   "config.json and file 0: the same handle");
	victim(v);
	close_session(fd, sid);
	close(fd);
	close(v);
	check_text_cached(fx);
	check_health(fx, 0);
}

static int setup_upload_max(void **state)
{
	return fx_start_set(state, DEV_MEM, 10000, "memory.upload_max=1M");
}

/* An upload whose files hold more than memory.upload_max is refused at
 * the first file past it, before that one is copied to the host, naming
 * the numbers. */
static void test_upload_max(void **state)
{
	struct fx *fx = *state;
	struct djinn_model_file cfg, w[2];
	int fd = xconnect(fx->d.sock), v = xconnect(fx->d.sock);
	uint64_t sid = open_session(fd, "uploader");

	text(fd, sid, 100, 3, &cfg);
	text(fd, sid, 600 * 1024, 5, &w[0]);
	text(fd, sid, 600 * 1024, 7, &w[1]);
	upload_err(fd, sid, &cfg, w, 2, -E2BIG,
		   "file 1: 614400 bytes after 614500: the files hold more "
		   "than 1048576 (memory.upload_max)");
	/* Under the limit the files are read and parsed (and refused for
	 * what they hold: they are no model). */
	upload_err(fd, sid, &cfg, w, 1, -EINVAL, NULL);
	victim(v);
	close_session(fd, sid);
	close(fd);
	close(v);
	check_text_cached(fx);
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lookup_miss, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_half_header, setup_frame,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_trickle, setup_frame,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_idle, setup_idle,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_per_uid, setup_uid,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_admin_slots, setup_conns,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_per_addr, setup_addr,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_pipelined_reads,
						setup_staged, fx_teardown),
		cmocka_unit_test_setup_teardown(test_staged_reads,
						setup_staging, fx_teardown),
		cmocka_unit_test_setup_teardown(test_upload_dups, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_upload_max,
						setup_upload_max, fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd exhaustion", tests, NULL,
					   NULL);
}
