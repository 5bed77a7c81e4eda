// SPDX-License-Identifier: MIT
/*
 * djinn-bench restart: the pause clients see while djinnd restarts
 * without losing anything (djinnd --handover: admin-guide.rst, "Upgrades
 * and restarts"), with 1 GiB and 8 GiB of session data, beside a cold
 * start that reaches the same state from nothing.
 *
 * Session data: 8 sessions, each with a model (a 4-layer GPT-2 of
 * scripts/mkmodel.py, 256 wide, 1024 positions, in the run's model
 * directory) and 4 contexts of 960 prefilled tokens (KV caches: 8 KiB a
 * token, 240 MiB in all), and data tensors making up the rest.
 *
 * The pause: a client pings djinnd (djinn_conn_ping()) on a connection
 * of its own without a break, and the pause is the longest time between
 * two answers around the restart; the successor is started with the same
 * command line, and the restart is over when the old djinnd has exited.
 * A second client pings over TLS (in user mode where the kernel has no
 * tls module), whose connection the restart closes: its pause includes
 * libdjinn connecting again and attaching its session (a ping the drop
 * failed libdjinn sends again itself: any error fails the run).
 * After it every context decodes on and a sample of every tensor's bytes
 * is checked.
 *
 * Beside it: the copy peak (memcpy GB/s of 1 GiB in this process, pages
 * touched), and the target that follows from it: a pause of at most 1 s
 * plus the data moved at 0.8 of the copy peak. On the CPU backend the
 * session data stays in place (the successor maps its predecessor's
 * pool): what was copied is what the successor's log says ("... MiB
 * copied", the record's state-data: logits). And the cold start: djinnd
 * killed and started afresh, the same tensors uploaded again and the
 * same contexts prefilled again from the client, timed until the state
 * is back.
 *
 * A third run has 1 GiB with the device holding only half of it: the
 * rest is swapped out to host memory, whose copies (in the swap arena)
 * stay where they are across the restart too.
 *
 * Crash restarts (1 and 8 GiB): djinnd runs under a stand-in for
 * systemd's fd store (lib/fdstore_standin.h), which keeps its crash
 * journal (djinnd/net/journal.h); it is killed (SIGKILL) while a client
 * pings, and started again with what the store holds, as
 * Restart=on-failure does. The pause is the longest gap between pings
 * (libdjinn reconnects and attaches by itself); every tensor's bytes are
 * checked after it, and every context decodes on. Beside it, what the
 * journal costs: tensors made and released per second by one client,
 * beside 32 sessions of 8 tensors each, and decode steps per second by
 * one client round 16 contexts, with the journal and with
 * --no-crash-journal; and what a swap-out costs other clients with the
 * journal on (a record names a region being swapped out where it lies,
 * rather than wait for its copy): the longest gaps of a pinging client and
 * of one making and releasing tensors while a 640 MiB upload swaps
 * another 640 MiB out of 1 GiB of device memory, with the journal and
 * without.
 *
 * It needs its own djinnd (not --addr) and about 1.5 times the session
 * data in memory (the pool, which both djinnds map, and room beside it):
 * a size that does not fit the machine's free memory is skipped, saying
 * so.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/prctl.h>

#include <djinn/djinn.h>

#include "common.h"
#include "fdstore_standin.h"

#define SESSIONS 8
#define CTXS 4 /* per session */
#define PROMPT 960
#define MODEL_ARGS                                                          \
	"--arch", "gpt2", "--layers", "4", "--embd", "256", "--heads", "4", \
		"--vocab", "512", "--ctx", "1024", "--seed", "5"
#define TENSOR_MAX (64 * MiB)
#define CHECK_BYTES (64 * KiB)

static const char bench_name[] = "djinn_restart";

struct state {
	struct djinn_conn *conn;
	struct djinn_session *s[SESSIONS];
	struct djinn_model *m[SESSIONS];
	struct djinn_ctx *c[SESSIONS][CTXS];
	struct djinn_tensor **t;
	uint64_t *seed;
	size_t nr_t;
	uint64_t tensor_bytes;
};

/* A tensor's bytes from its seed: the same ones again to check. */
static void gen(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t x = seed;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = splitmix64(&x);

		memcpy(p + i, &v, 8);
	}
}

static void make_model(void)
{
	char dir[sizeof(tmpdir) + 32], script[PATH_MAX + 32];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *argv[] = { "python3", script, MODEL_ARGS, dir, NULL };
	char out[512];

	if (n < 0)
		fail("readlink: %s", strerror(errno));
	self[n] = 0;
	/* BUILD/tools/djinn-bench -> scripts/mkmodel.py of the checkout */
	*strrchr(self, '/') = 0;
	*strrchr(self, '/') = 0;
	*strrchr(self, '/') = 0;
	snprintf(script, sizeof(script), "%s/scripts/mkmodel.py", self);
	if (access(script, R_OK))
		snprintf(script, sizeof(script), "scripts/mkmodel.py");
	snprintf(dir, sizeof(dir), "%s/models/bench", tmpdir);
	if (run_capture(argv, 300000, out, sizeof(out)))
		fail("mkmodel.py: %s", out);
}

/* The session data of @bytes: contexts prefilled, tensors uploaded. */
static void build(struct state *st, const char *addr, uint64_t bytes)
{
	int32_t prompt[PROMPT];
	uint8_t *buf = xmalloc_huge(TENSOR_MAX);
	uint64_t kv = (uint64_t)SESSIONS * CTXS * PROMPT * 8 * KiB;
	uint64_t left = bytes > kv ? bytes - kv : 0;

	memset(st, 0, sizeof(*st));
	check(djinn_connect(addr, &st->conn), "djinn_connect");
	for (int i = 0; i < PROMPT; i++)
		prompt[i] = (i * 37 + 11) % 512;
	st->nr_t = (left + TENSOR_MAX - 1) / TENSOR_MAX;
	st->t = xcalloc(st->nr_t ? st->nr_t : 1, sizeof(*st->t));
	st->seed = xcalloc(st->nr_t ? st->nr_t : 1, sizeof(*st->seed));
	for (int i = 0; i < SESSIONS; i++) {
		check(djinn_session_open(st->conn, NULL, &st->s[i]),
		      "djinn_session_open");
		check(djinn_model_open(st->s[i], "bench", &st->m[i]),
		      "djinn_model_open");
		for (int k = 0; k < CTXS; k++) {
			check(djinn_ctx_new(st->m[i], 1024, &st->c[i][k]),
			      "djinn_ctx_new");
			prompt[0] = i * CTXS + k;
			check(djinn_ctx_prefill(st->c[i][k], prompt, PROMPT,
						NULL, NULL),
			      "djinn_ctx_prefill");
		}
	}
	for (size_t j = 0; j < st->nr_t; j++) {
		size_t len = left - j * TENSOR_MAX < TENSOR_MAX ?
				     (size_t)(left - j * TENSOR_MAX) :
				     TENSOR_MAX;
		const struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
						     .ndim = 1,
						     .dims = { len } };

		len &= ~(size_t)7;
		st->seed[j] = 1000 + j;
		gen(buf, len, st->seed[j]);
		check(djinn_tensor_upload(st->s[j % SESSIONS], &d, buf,
					  DJINN_SEG_DATA, &st->t[j]),
		      "djinn_tensor_upload");
		st->tensor_bytes += len;
	}
	free(buf);
}

/* After the restart: each context decodes on, each tensor's first and
 * last bytes are its own. */
static void verify(struct state *st)
{
	uint8_t *want = xmalloc(TENSOR_MAX), *got = xmalloc(CHECK_BYTES);

	for (int i = 0; i < SESSIONS; i++)
		for (int k = 0; k < CTXS; k++) {
			int32_t tok[2];

			if (djinn_ctx_decode(st->c[i][k], 2, NULL, tok, NULL,
					     NULL) != 2)
				fail("context %d.%d does not decode after the "
				     "restart",
				     i, k);
		}
	for (size_t j = 0; j < st->nr_t; j++) {
		struct djinn_tensor_info ti;
		size_t len;

		check(djinn_tensor_info(st->t[j], &ti), "djinn_tensor_info");
		len = (size_t)ti.bytes & ~(size_t)7;
		gen(want, len, st->seed[j]);
		check(djinn_tensor_download(st->t[j], 0, CHECK_BYTES, got),
		      "djinn_tensor_download");
		if (memcmp(got, want, CHECK_BYTES))
			fail("tensor %zu: its first bytes changed", j);
		check(djinn_tensor_download(st->t[j], len - CHECK_BYTES,
					    CHECK_BYTES, got),
		      "djinn_tensor_download");
		if (memcmp(got, want + len - CHECK_BYTES, CHECK_BYTES))
			fail("tensor %zu: its last bytes changed", j);
	}
	free(want);
	free(got);
}

static void drop(struct state *st)
{
	for (int i = 0; i < SESSIONS; i++)
		if (st->s[i])
			djinn_session_close(st->s[i]);
	djinn_disconnect(st->conn);
	free(st->t);
	free(st->seed);
}

/* A client pinging without a break: the longest gap between answers. */
struct pinger {
	pthread_t th;
	struct djinn_conn *conn;
	atomic_int stop;
	uint64_t max_gap, pings;
	int err;
};

static void *ping_run(void *arg)
{
	struct pinger *p = arg;
	uint64_t last = mono_ns();

	while (!atomic_load(&p->stop)) {
		uint64_t now;
		int ret = djinn_conn_ping(p->conn);

		if (ret) {
			p->err = ret;
			break;
		}
		now = mono_ns();
		if (now - last > p->max_gap)
			p->max_gap = now - last;
		last = now;
		p->pings++;
	}
	return NULL;
}

/* memcpy GB/s of 1 GiB, pages touched first: the copy peak. */
static double copy_peak(void)
{
	size_t len = 1024 * MiB;
	uint8_t *a = xmalloc_huge(len), *b = xmalloc_huge(len);
	double best = 0;

	memset(a, 1, len);
	memset(b, 2, len);
	for (int r = 0; r < 3; r++) {
		uint64_t t0 = mono_ns();

		memcpy(b, a, len);
		double gbs = (double)len / (double)(mono_ns() - t0);

		best = gbs > best ? gbs : best;
	}
	free(a);
	free(b);
	return best;
}

/* The successor: the same command line; the restart is over when the
 * old djinnd has exited. Seconds it took. */
static double restart_now(void)
{
	char log[sizeof(tmpdir) + 32];
	uint64_t t0 = mono_ns(), deadline = t0 + 300 * NSEC_PER_SEC;
	pid_t old = daemon_pid, next;
	int status;

	snprintf(log, sizeof(log), "%s/djinnd-next.log", tmpdir);
	next = spawn(daemon_argv(), log, NULL);
	while (mono_ns() < deadline) {
		if (waitpid(old, &status, WNOHANG) == old) {
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				fail("the old djinnd ended with %#x", status);
			daemon_pid = next;
			return secs(t0, mono_ns());
		}
		if (waitpid(next, &status, WNOHANG) == next) {
			show_tail(log);
			fail("the successor exited (%#x)", status);
		}
		sleep_ns(NSEC_PER_MSEC);
	}
	fail("no restart within 300 s");
}

/* The MiB the successor says it copied ("... MiB copied"), or -1. */
static double copied_mib(void)
{
	char path[sizeof(tmpdir) + 32], line[512];
	double mib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/djinnd-next.log", tmpdir);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = strstr(line, " MiB copied");
		unsigned long long n;

		while (p && p > line && p[-1] >= '0' && p[-1] <= '9')
			p--;
		if (p && sscanf(p, "%llu MiB copied", &n) == 1)
			mib = (double)n;
	}
	fclose(f);
	return mib;
}

/* With --verbose: what the two djinnds logged of the restart. */
static void show_restart_log(void)
{
	const char *logs[] = { "djinnd.log", "djinnd-next.log" };
	char path[sizeof(tmpdir) + 32], line[512];

	for (int i = 0; i < 2; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", tmpdir, logs[i]);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (strstr(line, "restart:") || strstr(line, "state:"))
				info("%s", strtok(line, "\n"));
		fclose(f);
	}
}

/* Whether 1.5 times @bytes of session data fit the machine's free memory
 * (the pool both djinnds map, and room beside it): if not, the run
 * @what is skipped, saying so. */
static bool fits(const char *what, uint64_t bytes)
{
	struct sysinfo si;
	double free_b;

	sysinfo(&si);
	free_b = (double)si.freeram * si.mem_unit +
		 (double)si.bufferram * si.mem_unit;
	if (free_b >= 1.5 * (double)bytes)
		return true;
	info("%s: skipped: %.1f GiB free, it needs 1.5 times the session "
	     "data",
	     what, (double)si.freeram * si.mem_unit / (1 << 30));
	return false;
}

/* A cold start: djinnd started afresh with @extra and @bytes of session
 * data built again from the client; seconds it took. */
static double cold_start(const char *const *extra, uint64_t bytes)
{
	uint64_t t0 = mono_ns();
	struct state st;
	double s;

	daemon_start_with(NULL, extra);
	build(&st, xports[0].addr, bytes);
	s = secs(t0, mono_ns());
	drop(&st);
	daemon_stop();
	return s;
}

/* Stop pinger @p, which must have met no error across the restart. */
static void ping_stop(struct pinger *p, const char *over)
{
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
	if (p->err)
		fail("a ping%s failed across the restart: %s", over,
		     strerror(-p->err));
}

/* With @swapped, the device holds half the data: the rest is swapped out
 * to host memory (the swap arena, which the successor takes over too). */
static void one_size(uint64_t gib, double peak, bool swapped)
{
	uint64_t bytes = gib << 30;
	char mem[32], swap[48], handover[sizeof(tmpdir) + 32],
		models[sizeof(tmpdir) + 32];
	const char *extra[] = { "--cpu-mem", mem,	    "--handover",
				handover,    "--model-dir", models,
				"--set",     swap,	    NULL };
	const char *what = swapped ? " half swapped out" : "";
	struct pinger p = { 0 }, pt = { 0 };
	struct djinn_session *ts;
	struct djinn_connect_opts o = { .size = sizeof(o) };
	struct daemon_tls dt;
	struct pki pk;
	struct state st;
	double restart_s, cold_s, moved, target, copied;
	char m[48];

	snprintf(m, sizeof(m), "restart %llu GiB%s", (unsigned long long)gib,
		 what);
	if (!fits(m, bytes))
		return;
	/* room beyond the data: under memory pressure djinnd would swap
	 * idle regions out (the scheduler's policy), which is another
	 * benchmark's figure */
	snprintf(mem, sizeof(mem), "%lluM",
		 (unsigned long long)((swapped ? bytes / 2 + 128 * MiB :
						 bytes + bytes / 2 +
							 1024 * MiB) >>
				      20));
	snprintf(swap, sizeof(swap), "memory.swap=%lluM",
		 (unsigned long long)((bytes + 1024 * MiB) >> 20));
	snprintf(handover, sizeof(handover), "%s/handover", tmpdir);
	snprintf(models, sizeof(models), "%s/models", tmpdir);
	make_pki(&pk);
	dt = (struct daemon_tls){ .cert = pk.srv_cert,
				  .key = pk.srv_key,
				  .client_ca = pk.ca };
	o.tls_ca = pk.ca;
	o.tls_cert = pk.cli_cert;
	o.tls_key = pk.cli_key;
	daemon_start_with(&dt, extra);
	build(&st, xports[0].addr, bytes);
	info("restart %llu GiB%s: %zu tensors (%.2f GiB) and %d contexts of %d "
	     "tokens built",
	     (unsigned long long)gib, what, st.nr_t,
	     (double)st.tensor_bytes / (1 << 30), SESSIONS * CTXS, PROMPT);

	check(djinn_connect(xports[0].addr, &p.conn), "djinn_connect");
	check(djinn_connect_opts(dt.addr, &o, &pt.conn), "djinn_connect_opts");
	/* a session, which the new connection attaches */
	check(djinn_session_open(pt.conn, NULL, &ts), "djinn_session_open");
	pthread_create(&p.th, NULL, ping_run, &p);
	pthread_create(&pt.th, NULL, ping_run, &pt);
	sleep_ns(300 * NSEC_PER_MSEC);
	restart_s = restart_now();
	for (int i = 0; i < 30000 && !djinn_conn_reconnects(pt.conn); i++)
		sleep_ns(NSEC_PER_MSEC);
	sleep_ns(300 * NSEC_PER_MSEC);
	ping_stop(&p, "");
	ping_stop(&pt, " over TLS");
	if (djinn_conn_reconnects(pt.conn) != 1)
		fail("the TLS connection reconnected %llu times, not once",
		     (unsigned long long)djinn_conn_reconnects(pt.conn));
	check(djinn_session_heartbeat(ts), "djinn_session_heartbeat");
	info("restart %llu GiB%s: over %s the pause was %.3f s",
	     (unsigned long long)gib, what, djinn_conn_transport(pt.conn),
	     (double)pt.max_gap / 1e9);
	djinn_session_close(ts);
	djinn_disconnect(pt.conn);
	djinn_disconnect(p.conn);
	show_restart_log();
	copied = copied_mib();
	verify(&st);
	drop(&st);

	/* cold: killed, started afresh, the same state built again */
	kill(daemon_pid, SIGKILL);
	waitpid(daemon_pid, NULL, 0);
	daemon_pid = -1;
	unlink(handover);
	cold_s = cold_start(extra, bytes);

	/* in place, what was copied moved twice: into the record, out */
	moved = copied < 0 ? 2.0 * (double)bytes : 2.0 * copied * MiB;
	target = 1.0 + moved / (0.8 * peak * 1e9);
	info("restart %llu GiB%s: pause %.3f s (restart %.3f s), target %.3f "
	     "s, cold start %.3f s",
	     (unsigned long long)gib, what, (double)p.max_gap / 1e9, restart_s,
	     target, cold_s);
	snprintf(m, sizeof(m), "planned_pause_%llugib%s_s",
		 (unsigned long long)gib, swapped ? "_swapped" : "");
	fig_emit(&(struct fig){
		.bench = bench_name,
		.metric = m,
		.value = (double)p.max_gap / 1e9,
		.unit = "s",
		.baseline = cold_s,
		.baseline_name = "cold_start_s",
		.limit = NAN,
		.target_text = "pause <= 1 s + data moved at 0.8 x copy peak",
		.samples = 1,
		.note = swapped ? "CPU backend: half the data swapped out, "
				  "its host copies in place in the swap arena, "
				  "which the successor maps with the pool" :
				  "CPU backend: the session data stays in "
				  "place in the pool, which the successor "
				  "maps" });
	snprintf(m, sizeof(m), "planned_pause_%llugib%s_tls_s",
		 (unsigned long long)gib, swapped ? "_swapped" : "");
	fig_emit(&(struct fig){
		.bench = bench_name,
		.metric = m,
		.value = (double)pt.max_gap / 1e9,
		.unit = "s",
		.baseline = (double)p.max_gap / 1e9,
		.baseline_name = "planned_pause_unix_s",
		.limit = NAN,
		.samples = 1,
		.note = "a TLS connection is closed at the restart: libdjinn "
			"reconnects and attaches its session" });
	snprintf(m, sizeof(m), "planned_pause_%llugib%s_vs_target",
		 (unsigned long long)gib, swapped ? "_swapped" : "");
	fig_emit(&(struct fig){ .bench = bench_name,
				.metric = m,
				.value = (double)p.max_gap / 1e9,
				.unit = "s",
				.limit = target,
				.limit_name = "1 s + 2 x data copied / (0.8 x "
					      "copy peak)",
				.target = "<=",
				.want = 1.0,
				.samples = 1 });
}

/* djinnd's command line again, with the store's fds passed (as systemd
 * does for Restart=on-failure): its pid. */
static pid_t start_from_store(struct djd_store *store, const char *log)
{
	char *const *argv = daemon_argv();
	pid_t parent = getpid(), pid;

	fflush(NULL);
	djd_store_lock(store);
	pid = fork();
	if (!pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent || fd < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		djd_store_pass(store);
		execvp(argv[0], argv);
		_exit(127);
	}
	djd_store_unlock(store);
	if (pid < 0)
		fail("fork: %s", strerror(errno));
	return pid;
}

/* djinnd under a stand-in store (@store: its crash journal there); the
 * command line @extra. */
static void start_stored(struct djd_store *store, const char *const *extra)
{
	setenv("NOTIFY_SOCKET", djd_store_socket(store), 1);
	daemon_start_with(NULL, extra);
	unsetenv("NOTIFY_SOCKET");
}

/* A crash restart with @gib of session data; the cold start beside it. */
static void crash_size(uint64_t gib)
{
	uint64_t bytes = gib << 30;
	char mem[32], models[sizeof(tmpdir) + 32], log[sizeof(tmpdir) + 32];
	const char *extra[] = { "--cpu-mem", mem, "--model-dir", models, NULL };
	struct djd_store *store;
	struct pinger p = { 0 };
	struct state st;
	double cold_s, serve_s;
	uint64_t t0;
	char m[48];

	snprintf(m, sizeof(m), "crash %llu GiB", (unsigned long long)gib);
	if (!fits(m, bytes))
		return;
	snprintf(mem, sizeof(mem), "%lluM",
		 (unsigned long long)((bytes + bytes / 2 + 1024 * MiB) >> 20));
	snprintf(models, sizeof(models), "%s/models", tmpdir);
	snprintf(log, sizeof(log), "%s/djinnd-next.log", tmpdir);
	store = djd_store_open();
	if (!store)
		fail("the stand-in fd store did not open");
	start_stored(store, extra);
	build(&st, xports[0].addr, bytes);
	info("crash %llu GiB: %zu tensors (%.2f GiB) and %d contexts of %d "
	     "tokens built",
	     (unsigned long long)gib, st.nr_t,
	     (double)st.tensor_bytes / (1 << 30), SESSIONS * CTXS, PROMPT);
	check(djinn_connect(xports[0].addr, &p.conn), "djinn_connect");
	pthread_create(&p.th, NULL, ping_run, &p);
	sleep_ns(300 * NSEC_PER_MSEC);

	kill(daemon_pid, SIGKILL);
	waitpid(daemon_pid, NULL, 0);
	t0 = mono_ns();
	daemon_pid = start_from_store(store, log);
	while (!djinn_answers(xports[0].addr)) {
		if (mono_ns() - t0 > 300 * NSEC_PER_SEC) {
			show_tail(log);
			fail("no djinnd answers 300 s after the crash");
		}
		sleep_ns(NSEC_PER_MSEC);
	}
	serve_s = secs(t0, mono_ns());
	for (int i = 0; i < 30000 && !djinn_conn_reconnects(p.conn); i++)
		sleep_ns(NSEC_PER_MSEC);
	sleep_ns(300 * NSEC_PER_MSEC);
	ping_stop(&p, "");
	if (djinn_conn_reconnects(p.conn) != 1)
		fail("the pinging connection reconnected %llu times, not once",
		     (unsigned long long)djinn_conn_reconnects(p.conn));
	djinn_disconnect(p.conn);
	show_restart_log();
	/* the tensors first: the connection reconnects and attaches its
	 * sessions as it is used */
	for (size_t j = 0; j < st.nr_t; j++) {
		struct djinn_tensor_info ti;

		check(djinn_tensor_info(st.t[j], &ti), "djinn_tensor_info");
	}
	verify(&st);
	drop(&st);
	daemon_stop();
	/* what it kept there closes: the listening socket too, whose path
	 * the next djinnd binds */
	djd_store_close(store);

	/* cold: started afresh, the same state built again */
	cold_s = cold_start(extra, bytes);

	info("crash %llu GiB: pause %.3f s (a djinnd serving %.3f s after "
	     "the kill), cold start %.3f s",
	     (unsigned long long)gib, (double)p.max_gap / 1e9, serve_s, cold_s);
	snprintf(m, sizeof(m), "crash_pause_%llugib_s",
		 (unsigned long long)gib);
	fig_emit(&(struct fig){
		.bench = bench_name,
		.metric = m,
		.value = (double)p.max_gap / 1e9,
		.unit = "s",
		.baseline = cold_s,
		.baseline_name = "cold_start_s",
		.limit = NAN,
		.samples = 1,
		.note = "SIGKILL, then a start from the stand-in fd store: "
			"sessions, tensors and contexts in place, the "
			"connection reconnected by libdjinn" });
}

/* One client making and releasing a 4 KiB tensor for @secs beside 32
 * sessions of 8 tensors each: per second. */
static double churn(double secs_)
{
	struct djinn_conn *c;
	struct djinn_session *s[32], *me;
	const struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
					     .ndim = 1,
					     .dims = { 4096 } };
	uint8_t buf[4096] = { 1 };
	uint64_t n = 0, t0, end;

	check(djinn_connect(xports[0].addr, &c), "djinn_connect");
	for (int i = 0; i < 32; i++) {
		check(djinn_session_open(c, NULL, &s[i]), "djinn_session_open");
		for (int k = 0; k < 8; k++) {
			struct djinn_tensor *t;

			check(djinn_tensor_upload(s[i], &d, buf, DJINN_SEG_DATA,
						  &t),
			      "djinn_tensor_upload");
		}
	}
	check(djinn_session_open(c, NULL, &me), "djinn_session_open");
	t0 = mono_ns();
	end = t0 + (uint64_t)(secs_ * 1e9);
	while (mono_ns() < end) {
		struct djinn_tensor *t;

		check(djinn_tensor_upload(me, &d, buf, DJINN_SEG_DATA, &t),
		      "djinn_tensor_upload");
		check(djinn_tensor_release(t), "djinn_tensor_release");
		n++;
	}
	t0 = mono_ns() - t0;
	for (int i = 0; i < 32; i++)
		djinn_session_close(s[i]);
	djinn_session_close(me);
	djinn_disconnect(c);
	return (double)n / ((double)t0 / 1e9);
}

#define STEP_CTXS 16

/* One client decoding a token at a time, round STEP_CTXS contexts of 64
 * prompt tokens, each in a session of its own, for @secs: tokens per
 * second. */
static double steps(double secs_)
{
	struct djinn_session *s[STEP_CTXS];
	struct djinn_model *m[STEP_CTXS];
	struct djinn_ctx *c[STEP_CTXS];
	struct djinn_conn *conn;
	int32_t prompt[64], tok;
	uint64_t done = 0, t0, end;

	for (int i = 0; i < 64; i++)
		prompt[i] = (i * 37 + 11) % 512;
	check(djinn_connect(xports[0].addr, &conn), "djinn_connect");
	for (unsigned int i = 0; i < STEP_CTXS; i++) {
		check(djinn_session_open(conn, NULL, &s[i]),
		      "djinn_session_open");
		check(djinn_model_open(s[i], "bench", &m[i]),
		      "djinn_model_open");
		check(djinn_ctx_new(m[i], 1024, &c[i]), "djinn_ctx_new");
		check(djinn_ctx_prefill(c[i], prompt, 64, NULL, NULL),
		      "djinn_ctx_prefill");
	}
	t0 = mono_ns();
	end = t0 + (uint64_t)(secs_ * 1e9);
	/* 900 tokens each at most: the contexts hold 1024 */
	while (mono_ns() < end && done < 900ull * STEP_CTXS)
		if (djinn_ctx_decode(c[done++ % STEP_CTXS], 1, NULL, &tok, NULL,
				     NULL) != 1)
			fail("a decode failed");
	t0 = mono_ns() - t0;
	for (unsigned int i = 0; i < STEP_CTXS; i++)
		djinn_session_close(s[i]);
	djinn_disconnect(conn);
	return (double)done / ((double)t0 / 1e9);
}

/* Figure @metric in @unit: @v[0] with the crash journal, beside @v[1]
 * with --no-crash-journal. */
static void journal_fig(const char *metric, const char *unit, const double v[2],
			const char *note)
{
	fig_emit(&(struct fig){ .bench = bench_name,
				.metric = metric,
				.value = v[0],
				.unit = unit,
				.baseline = v[1],
				.baseline_name = "no_crash_journal",
				.limit = NAN,
				.samples = 1,
				.note = note });
}

/*
 * What the journal costs a client whose every request waits for it:
 * @run for 3 s against djinnd under a stand-in store, with the journal
 * and with --no-crash-journal, as figure @metric (@what, @note).
 */
static void journal_cost(double (*run)(double secs_), const char *metric,
			 const char *what, const char *note)
{
	char models[sizeof(tmpdir) + 32];
	const char *on[] = { "--model-dir", models, NULL };
	const char *off[] = { "--model-dir", models, "--no-crash-journal",
			      NULL };
	double per_s[2];

	snprintf(models, sizeof(models), "%s/models", tmpdir);
	for (int i = 0; i < 2; i++) {
		struct djd_store *store = djd_store_open();

		if (!store)
			fail("the stand-in fd store did not open");
		start_stored(store, i ? off : on);
		per_s[i] = run(3.0);
		daemon_stop();
		djd_store_close(store);
	}
	info("crash journal: %.0f %s a second with it, %.0f without", per_s[0],
	     what, per_s[1]);
	journal_fig(metric, "1/s", per_s, note);
}

/* A client making and releasing a 4 KiB tensor without a break, each
 * answer waiting for a record: the longest gap between its answers. */
struct churner {
	pthread_t th;
	struct djinn_session *s;
	atomic_int stop;
	uint64_t max_gap;
	int err;
};

static void *churn_run(void *arg)
{
	struct churner *c = arg;
	const struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
					     .ndim = 1,
					     .dims = { 4096 } };
	uint8_t buf[4096] = { 2 };
	uint64_t last = mono_ns();

	while (!atomic_load(&c->stop)) {
		struct djinn_tensor *t;
		uint64_t now;

		c->err = djinn_tensor_upload(c->s, &d, buf, DJINN_SEG_DATA, &t);
		if (!c->err)
			c->err = djinn_tensor_release(t);
		if (c->err)
			break;
		now = mono_ns();
		if (now - last > c->max_gap)
			c->max_gap = now - last;
		last = now;
	}
	return NULL;
}

#define SWAP_MEM "1024M"
#define SWAP_BIG (640 * MiB)

/* One run of swap_stall(): the longest gaps of the pinger and the
 * churner while a 640 MiB upload swaps another 640 MiB out. */
static void swap_once(const char *const *extra, double *ping_s, double *churn_s)
{
	const struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
					     .ndim = 1,
					     .dims = { SWAP_BIG } };
	struct djd_store *store = djd_store_open();
	struct djinn_conn *a, *b, *cc;
	struct djinn_session *sa, *sb;
	struct djinn_tensor *ta, *tb;
	struct pinger p = { 0 };
	struct churner c = { 0 };
	uint8_t *buf = xmalloc(SWAP_BIG);

	if (!store)
		fail("the stand-in fd store did not open");
	memset(buf, 7, SWAP_BIG);
	start_stored(store, extra);
	check(djinn_connect(xports[0].addr, &a), "djinn_connect");
	check(djinn_session_open(a, NULL, &sa), "djinn_session_open");
	check(djinn_tensor_upload(sa, &d, buf, DJINN_SEG_DATA, &ta),
	      "djinn_tensor_upload");
	check(djinn_connect(xports[0].addr, &p.conn), "djinn_connect");
	check(djinn_connect(xports[0].addr, &cc), "djinn_connect");
	check(djinn_session_open(cc, NULL, &c.s), "djinn_session_open");
	pthread_create(&p.th, NULL, ping_run, &p);
	pthread_create(&c.th, NULL, churn_run, &c);
	sleep_ns(200 * NSEC_PER_MSEC);
	/* the second one's memory: the first is swapped out for it */
	check(djinn_connect(xports[0].addr, &b), "djinn_connect");
	check(djinn_session_open(b, NULL, &sb), "djinn_session_open");
	check(djinn_tensor_upload(sb, &d, buf, DJINN_SEG_DATA, &tb),
	      "djinn_tensor_upload");
	sleep_ns(200 * NSEC_PER_MSEC);
	atomic_store(&c.stop, 1);
	pthread_join(c.th, NULL);
	ping_stop(&p, " during the swap-out");
	if (c.err)
		fail("the churning client failed: %s", strerror(-c.err));
	*ping_s = (double)p.max_gap / 1e9;
	*churn_s = (double)c.max_gap / 1e9;
	djinn_disconnect(p.conn);
	djinn_session_close(c.s);
	djinn_disconnect(cc);
	djinn_session_close(sb);
	djinn_disconnect(b);
	djinn_session_close(sa);
	djinn_disconnect(a);
	daemon_stop();
	djd_store_close(store);
	free(buf);
}

/*
 * What a swap-out costs other clients under the crash journal: djinnd
 * with 1 GiB of device memory holds a 640 MiB tensor; while one client
 * pings and another makes and releases small tensors (a record a turn),
 * a third uploads 640 MiB, which swaps the first out. The longest gap
 * each saw, with the journal and with --no-crash-journal.
 */
static void swap_stall(void)
{
	const char *on[] = { "--cpu-mem", SWAP_MEM, NULL };
	const char *off[] = { "--cpu-mem", SWAP_MEM, "--no-crash-journal",
			      NULL };
	double ping[2], churn_gap[2];

	if (!fits("journal swap", 2 * SWAP_BIG))
		return;
	swap_once(on, &ping[0], &churn_gap[0]);
	swap_once(off, &ping[1], &churn_gap[1]);
	info("crash journal: a 640 MiB swap-out: the longest gap %.3f s "
	     "for a ping and %.3f s for a tensor made and released, with "
	     "it; %.3f s and %.3f s without",
	     ping[0], churn_gap[0], ping[1], churn_gap[1]);
	journal_fig("journal_swap_ping_gap_s", "s", ping,
		    "the longest gap between a client's pings while another's "
		    "640 MiB upload swaps a 640 MiB tensor out, a third making "
		    "and releasing tensors");
	journal_fig("journal_swap_churn_gap_s", "s", churn_gap,
		    "the same run: the longest gap between the answers of the "
		    "client making and releasing 4 KiB tensors");
}

void bench_restart(void)
{
	double peak;

	if (daemon_pid <= 0) {
		fprintf(stderr, "restart: skipped: it restarts djinn-bench's "
				"own djinnd (not with --addr)\n");
		return;
	}
	daemon_stop();
	make_model();
	peak = copy_peak();
	info("restart: copy peak %.2f GB/s", peak);
	fig_emit(&(struct fig){ .bench = bench_name,
				.metric = "copy_peak_gbps",
				.value = peak,
				.unit = "GB/s",
				.baseline = NAN,
				.samples = 3,
				.note = "memcpy of 1 GiB, best of 3" });
	one_size(1, peak, false);
	one_size(8, peak, false);
	one_size(1, peak, true);
	crash_size(1);
	crash_size(8);
	journal_cost(churn, "journal_create_release_per_s",
		     "tensors made and released",
		     "one client, a 4 KiB tensor made and released in a loop "
		     "beside 32 sessions of 8 tensors: each answer waits for "
		     "a record of the whole state");
	journal_cost(steps, "journal_decode_steps_per_s", "decode steps",
		     "one client decoding a token a request round 16 contexts "
		     "of the 4-layer GPT-2, a session each: each answer waits "
		     "for a record of the whole state");
	swap_stall();
	daemon_start();
}
