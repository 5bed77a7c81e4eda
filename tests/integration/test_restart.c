// SPDX-License-Identifier: MIT
/*
 * Planned restarts that keep the state (djinnd/net/restart.h): a
 * successor started with the same --handover path takes the sessions,
 * their tensors and the client connections over while clients keep
 * working, and one that cannot restore leaves the running djinnd serving
 * with nothing lost. A crash (SIGKILL) under the fd store keeps the
 * sessions too, through the crash journal djinnd keeps there: every
 * change it answered is in the next djinnd, its clients attach again.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "fdstore_standin.h"

#define NR_CONNS 4
#define NR_SESSIONS 100
#define LEASE_MS 60000
#define MiB (UINT64_C(1) << 20)

static char hpath[96];
static const char *extra[] = { "--handover", hpath, NULL };

/* djinnd serving the handover path, with @args (--handover's first) */
static int start(void **state, const char **args)
{
	snprintf(hpath, sizeof(hpath), "/tmp/djinn-restart.%d", (int)getpid());
	unlink(hpath);
	return fx_start_args(state, "256M", LEASE_MS, args);
}

static int setup(void **state)
{
	return start(state, extra);
}

static const char *extra_fault[] = { "--handover", hpath, "--fault-injection",
				     NULL };

static int setup_fault(void **state)
{
	return start(state, extra_fault);
}

static int teardown(void **state)
{
	int ret = fx_teardown(state);

	unlink(hpath);
	return ret;
}

/* What a session holds: its id and token, its tensors and their bytes,
 * and a handle it released. */
struct held {
	int fd;
	uint64_t sid;
	uint8_t token[16];
	uint64_t h[3];
	uint8_t *bytes[3];
	uint64_t len[3];
	uint64_t released;
};

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (uint64_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* Session @i: a data tensor of a size its own, a larger one for every
 * tenth, a text tensor for every fifth, and one made and released. */
static void make_session(struct held *s, int fd, unsigned int i)
{
	struct djinn_session_resp resp;
	uint64_t n[3] = { 1000 + 37 * i, i % 10 ? 64 : (3u << 20) / 4,
			  (i % 5) ? 0 : 512 + i };
	struct djinn_tensor_desc d;
	uint64_t gone;
	uint8_t tmp[64];

	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->sid = open_at(__LINE__, fd, "restart", i % 8, 0, &resp);
	memcpy(s->token, resp.token, sizeof(s->token));
	for (unsigned int k = 0; k < 3; k++) {
		if (!n[k])
			continue;
		d = DESC(DJINN_DTYPE_U8, n[k]);
		s->len[k] = n[k];
		s->bytes[k] = malloc(n[k]);
		assert_non_null(s->bytes[k]);
		fill(s->bytes[k], n[k], i * 3 + k);
		if (k == 2) {
			uint8_t fp[DJINN_FP_LEN];

			sha256(s->bytes[k], n[k], fp);
			s->h[k] = create_at(__LINE__, fd, s->sid, &d,
					    DJINN_SEG_TEXT, fp, s->bytes[k],
					    n[k], NULL);
		} else {
			s->h[k] =
				create_data(fd, s->sid, &d, s->bytes[k], n[k]);
		}
	}
	d = DESC(DJINN_DTYPE_U8, sizeof(tmp));
	gone = create_data(fd, s->sid, &d, tmp, sizeof(tmp));
	tensor_release(fd, s->sid, gone);
	s->released = gone;
}

/* Held session @s closed on @fd, its bytes freed. */
static void held_close(int fd, struct held *s)
{
	close_session(fd, s->sid);
	for (unsigned int k = 0; k < 3; k++)
		free(s->bytes[k]);
}

/* Every byte as it was, the released handle still gone. */
static void check_session(const struct held *s)
{
	struct dj_resp r;
	struct djinn_tensor_io rd = { .handle = s->released, .len = 1 };

	for (unsigned int k = 0; k < 3; k++) {
		uint8_t *got;

		if (!s->len[k])
			continue;
		got = malloc(s->len[k]);
		assert_non_null(got);
		tensor_read(s->fd, s->sid, s->h[k], 0, s->len[k], got);
		if (memcmp(got, s->bytes[k], s->len[k]))
			fail_msg("session %llu: tensor %u differs",
				 (unsigned long long)s->sid, k);
		free(got);
	}
	assert_int_equal(dj_call(s->fd, DJINN_MSG_TENSOR_READ, s->sid, &rd,
				 sizeof(rd), &r),
			 1);
	expect_error(&r, -ENOENT, NULL);
	dj_resp_free(&r);
}

/* A client reading its tensor over and over, through the restart. */
struct reader {
	pthread_t th;
	int fd;
	uint64_t sid, h;
	uint8_t bytes[4096];
	volatile int stop;
	volatile long reads, bad;
	char why[400];
};

static void *reader_run(void *arg)
{
	struct reader *rd = arg;

	while (!rd->stop) {
		struct djinn_tensor_io q = { .handle = rd->h,
					     .len = sizeof(rd->bytes) };
		struct dj_resp r;
		int ret = dj_call(rd->fd, DJINN_MSG_TENSOR_READ, rd->sid, &q,
				  sizeof(q), &r);

		if (ret != 1 || r.error || r.len != sizeof(rd->bytes) ||
		    memcmp(r.data, rd->bytes, sizeof(rd->bytes))) {
			snprintf(rd->why, sizeof(rd->why), "read %ld: %s %s",
				 rd->reads, ret == 1 ? "answer" : ret_str(ret),
				 ret == 1 ? r.msg : "");
			rd->bad++;
			if (ret == 1)
				dj_resp_free(&r);
			break;
		}
		dj_resp_free(&r);
		rd->reads++;
	}
	return NULL;
}

/* A client connecting anew over and over, through the restart: each
 * connection must be answered, by one djinnd or the other. */
struct connector {
	pthread_t th;
	const char *path;
	volatile int stop;
	volatile long hellos, bad;
	char why[128];
};

static void *connector_run(void *arg)
{
	struct connector *cn = arg;

	while (!cn->stop) {
		struct djinn_hello_resp h;
		struct dj_resp r;
		int fd = dj_connect(cn->path), ret = 0;

		if (fd >= 0)
			ret = dj_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &r);
		if (fd < 0 || ret != 1 || r.error || r.len != sizeof(h)) {
			snprintf(cn->why, sizeof(cn->why), "hello %ld: %s",
				 cn->hellos,
				 fd < 0 ? strerror(-fd) : ret_str(ret));
			cn->bad++;
			if (ret == 1)
				dj_resp_free(&r);
			if (fd >= 0)
				close(fd);
			break;
		}
		dj_resp_free(&r);
		close(fd);
		cn->hellos++;
	}
	return NULL;
}

/* Run graph @g as request @id on @sid: its first output's handle. */
static uint64_t graph_run(int fd, uint64_t sid, uint64_t id, const struct gb *g)
{
	struct djinn_tensor_resp out;
	struct dj_resp r;

	graph_send_at(__LINE__, fd, sid, id, g);
	assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
	if (r.error)
		fail_msg("graph %llu: %s", (unsigned long long)id, r.msg);
	assert_int_equal(r.len, sizeof(struct djinn_graph_resp) + sizeof(out));
	memcpy(&out, r.data + sizeof(struct djinn_graph_resp), sizeof(out));
	dj_resp_free(&r);
	return out.handle;
}

static bool log_has(const struct fx *fx, const char *what)
{
	return djd_log_has(&fx->d, what);
}

/* The log has @what within 10 s: what djinnd logs after it answers. */
static bool log_shows(const struct fx *fx, const char *what)
{
	for (int i = 0; i < 10000; i++) {
		if (log_has(fx, what))
			return true;
		usleep(1000);
	}
	return false;
}

static void test_planned_restart(void **state)
{
	struct fx *fx = *state;
	static struct held s[NR_SESSIONS];
	int fds[NR_CONNS];
	struct reader rd = { 0 };
	struct connector cn = { 0 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, sizeof(rd.bytes));
	struct djinn_tensor_desc d16 = F32(16);
	struct djinn_session_resp resp;
	struct gb g1 = { 0 }, g2 = { 0 };
	float *x, y[16];
	uint64_t gid = 0x5eed;
	unsigned int tensors = 0;
	uint64_t max_sid = 0, sid, swapped_sid = 0, swapped = 0;
	long before, hellos;
	char want[96];
	int fd;

	for (int i = 0; i < NR_CONNS; i++)
		fds[i] = xconnect(fx->d.sock);
	for (unsigned int i = 0; i < NR_SESSIONS; i++) {
		make_session(&s[i], fds[i % NR_CONNS], i);
		for (unsigned int k = 0; k < 3; k++)
			tensors += s[i].len[k] != 0;
		max_sid = s[i].sid > max_sid ? s[i].sid : max_sid;
	}
	/* a graph's output that a later one names by DJINN_REF_RESULT */
	gb_output(&g1, gb_op(&g1, DJINN_GOP_SCALE, 1,
			     gb_input(&g1, upload_rand(s[0].fd, s[0].sid, &d16,
						       7, 1, &x))));
	g1.node[0].params.scalar.alpha = 2.0f;
	graph_run(s[0].fd, s[0].sid, gid, &g1);
	tensors += 2; /* its input and its output */
	rd.fd = xconnect(fx->d.sock);
	rd.sid = open_session(rd.fd, "reader");
	fill(rd.bytes, sizeof(rd.bytes), 4242);
	rd.h = create_data(rd.fd, rd.sid, &d, rd.bytes, sizeof(rd.bytes));
	max_sid = rd.sid > max_sid ? rd.sid : max_sid;
	assert_int_equal(pthread_create(&rd.th, NULL, reader_run, &rd), 0);
	for (int i = 0; i < 10000 && rd.reads < 20 && !rd.bad; i++)
		usleep(1000);
	assert_true(rd.reads >= 20);

	/* some session's data was swapped out: how much */
	{
		struct djinn_admin_session *list = NULL;
		uint32_t n = sessions_now(fx, &list);

		for (uint32_t i = 0; i < n && !swapped_sid; i++) {
			if (list[i].swapped) {
				swapped_sid = list[i].id;
				swapped = list[i].swapped;
			}
		}
		free(list);
	}
	assert_true(swapped_sid != 0);
	/* the restart, while the reader reads and new clients connect */
	cn.path = fx->d.sock;
	assert_int_equal(pthread_create(&cn.th, NULL, connector_run, &cn), 0);
	before = rd.reads;
	assert_int_equal(djd_restart(&fx->d, 60000), 0);
	snprintf(want, sizeof(want), "%d sessions, %u tensors and 0 models",
		 NR_SESSIONS + 1, tensors + 1);
	assert_true(log_has(fx, want));
	assert_true(log_has(fx, "connections restored"));
	/* the CPU device's pool was taken over: its data in place */
	assert_true(log_has(fx, "MiB of data in place"));
	assert_false(log_has(fx, " 0 MiB of data in place"));
	/* 300 tensors of a granule or more on 256 MiB: some were swapped
	 * out, and stay so, their host copies where they were, in the swap
	 * arena handed over with the pool: nothing copied */
	assert_true(log_has(fx, " and 0 MiB copied"));
	assert_true(log_has(fx, "restart: swap arena taken over"));
	assert_false(log_has(fx, "taken over: 0 MiB"));
	assert_int_equal(session_entry(fx, swapped_sid).swapped, swapped);
	/* new clients are answered by the successor */
	hellos = cn.hellos;
	for (int i = 0; i < 10000 && cn.hellos < hellos + 5 && !cn.bad; i++)
		usleep(1000);
	/* its reads went on: on the same connection, with no error */
	for (int i = 0; i < 10000 && rd.reads < before + 50 && !rd.bad; i++)
		usleep(1000);
	rd.stop = 1;
	pthread_join(rd.th, NULL);
	cn.stop = 1;
	pthread_join(cn.th, NULL);
	if (rd.bad)
		fail_msg("the reader: %s", rd.why);
	if (cn.bad)
		fail_msg("a new client: %s", cn.why);
	assert_true(rd.reads >= before + 50);
	assert_true(cn.hellos >= hellos + 5);

	/* the graph's record came along: 2x + 2x */
	gb_output(&g2, gb_op(&g2, DJINN_GOP_ADD, 2, gb_result(&g2, gid, 0),
			     gb_result(&g2, gid, 0)));
	tensor_read(s[0].fd, s[0].sid,
		    graph_run(s[0].fd, s[0].sid, gid + 1, &g2), 0, sizeof(y),
		    y);
	for (int i = 0; i < 16; i++)
		assert_true(y[i] == 4.0f * x[i]);
	free(x);

	/* every session, on the connection it was opened on */
	for (unsigned int i = 0; i < NR_SESSIONS; i++)
		check_session(&s[i]);
	/* a session's token still attaches it on a new connection */
	fd = xconnect(fx->d.sock);
	attach(fd, s[7].sid, s[7].token);
	tensor_read(fd, s[7].sid, s[7].h[0], 0, 16, (uint8_t[16]){ 0 });
	/* new sessions continue the numbering */
	sid = open_at(__LINE__, fd, "after", 4, 0, &resp);
	assert_true(sid > max_sid);
	close_session(fd, sid);
	close(fd);
	/* the admin connection came along too */
	(void)vmu_now(fx);

	for (unsigned int i = 0; i < NR_SESSIONS; i++)
		held_close(s[i].fd, &s[i]);
	close_session(rd.fd, rd.sid);
	close(rd.fd);
	for (int i = 0; i < NR_CONNS; i++)
		close(fds[i]);
	/* the text entries stay cached, unheld */
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

/*
 * A successor that cannot restore the state exits; the running djinnd
 * serves on with every byte. This one maps the session's tensors and the
 * model's weights in place from the pool they share (the tensors come
 * before the model in the record), then finds the model gone from its
 * directory: what it took must be the old one's still, byte for byte,
 * and the model's weights must still decode as they did.
 */
static void test_failed_successor(void **state)
{
	struct fx *fx = *state;
	const int32_t prompt[4] = { 2, 7, 1, 8 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 32 * MiB);
	int32_t want[6], tok[6];
	uint8_t *big, *got;
	struct held s;
	int fd = xconnect(fx->d.sock), status, n;
	uint64_t model, a, b, sw, hb, fill_sid;
	char cmd[512];
	pid_t next;

	/* a tensor another session's uploads swap out: its host copy in
	 * the swap arena, which the failed successor takes (its session is
	 * restored before the one that fails) and lets go again */
	big = malloc(32 * MiB);
	got = malloc(32 * MiB);
	assert_non_null(big);
	assert_non_null(got);
	fill(big, 32 * MiB, 55);
	sw = open_session(fd, "swapped");
	hb = create_data(fd, sw, &d, big, 32 * MiB);
	fill_sid = open_session(fd, "filler");
	for (n = 0; n < 16 && session_entry(fx, sw).swapped < 32 * MiB; n++)
		create_data(fd, fill_sid, &d, got, 32 * MiB);
	assert_true(session_entry(fx, sw).swapped >= 32 * MiB);
	close_session(fd, fill_sid);
	make_session(&s, fd, 10); /* 3 MiB and more */
	assert_int_equal(djd_make_model(&fx->d, "tiny", TINY_GPT2), 0);
	model = model_open(fd, s.sid, "tiny").model;
	a = ctx_new(fd, s.sid, model, 16);
	b = ctx_new(fd, s.sid, model, 16);
	prefill(fd, s.sid, a, prompt, 4, 0);
	prefill(fd, s.sid, b, prompt, 4, 0);
	decode(fd, s.sid, a, 6, NULL, want);
	snprintf(cmd, sizeof(cmd), "mv %s/models/tiny %s/models/away",
		 fx->d.dir, fx->d.dir);
	assert_int_equal(system(cmd), 0);
	next = djd_spawn_next(&fx->d);
	assert_true(next > 0);
	assert_int_equal(waitpid(next, &status, 0), next);
	snprintf(cmd, sizeof(cmd), "mv %s/models/away %s/models/tiny",
		 fx->d.dir, fx->d.dir);
	assert_int_equal(system(cmd), 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	assert_true(log_shows(fx, "the successor closed without serving"));
	assert_true(log_has(fx, "state not restored"));
	assert_true(log_has(fx, "(tiny)"));
	check_session(&s);
	decode(fd, s.sid, b, 6, NULL, tok);
	assert_memory_equal(tok, want, sizeof(tok));
	/* every byte swapped out is the old djinnd's still */
	memset(got, 0, 32 * MiB);
	tensor_read(fd, sw, hb, 0, 32 * MiB, got);
	if (memcmp(got, big, 32 * MiB))
		fail_msg("a swapped-out tensor changed under a failed "
			 "successor");
	free(big);
	free(got);
	close_session(fd, sw);
	hello(fd);
	held_close(fd, &s);
	close(fd);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

/*
 * Contexts live on: each session's model and two contexts with the same
 * prompt and the same tokens decoded; one decodes on before the restart
 * (what the other would give), the other after it, greedy and sampled,
 * and they agree token for token. A decode sent as the restart begins
 * is answered. The handles of models and contexts, and a released one,
 * are as they were.
 */
#define CTX_SESSIONS 6

static void test_restart_contexts(void **state)
{
	struct fx *fx = *state;
	const int32_t prompt[5] = { 3, 1, 4, 1, 5 };
	const struct djinn_sampling sp = {
		.temperature = 0.9f, .top_k = 30, .top_p = 0.95f, .seed = 11
	};
	struct {
		uint64_t sid, model, a, b, gone;
		int32_t want[8];
	} c[CTX_SESSIONS];
	struct djinn_ctx_step st = { 0 };
	struct djinn_ctx_step_resp resp;
	struct dj_resp r;
	int32_t got[8], tok[4];
	uint64_t id;
	pid_t old, next;
	int status = -1;
	int fd = xconnect(fx->d.sock);

	assert_int_equal(djd_make_model(&fx->d, "tiny", TINY_GPT2), 0);
	for (int i = 0; i < CTX_SESSIONS; i++) {
		const struct djinn_sampling *how = i % 2 ? &sp : NULL;
		struct djinn_model_resp m;

		c[i].sid = open_session(fd, "ctx");
		m = model_open(fd, c[i].sid, "tiny");
		c[i].model = m.model;
		c[i].gone = ctx_new(fd, c[i].sid, m.model, 16);
		c[i].a = ctx_new(fd, c[i].sid, m.model, 32);
		c[i].b = ctx_new(fd, c[i].sid, m.model, 32);
		call_void(fd, DJINN_MSG_CTX_FREE, c[i].sid, &c[i].gone, 8);
		prefill(fd, c[i].sid, c[i].a, prompt, 5 - i % 3, 0);
		prefill(fd, c[i].sid, c[i].b, prompt, 5 - i % 3, 0);
		/* the same tokens in both, then b goes on alone */
		decode(fd, c[i].sid, c[i].a, 3, how, tok);
		decode(fd, c[i].sid, c[i].b, 3, how, got);
		assert_memory_equal(tok, got, 3 * 4);
		decode(fd, c[i].sid, c[i].b, 8, how, c[i].want);
	}
	/* a decode sent once the restart has begun: one djinnd or the
	 * other answers it */
	old = fx->d.pid;
	next = djd_spawn_next(&fx->d);
	assert_true(next > 0);
	assert_true(log_shows(fx, "held between frames"));
	st.ctx = c[0].b;
	st.nr_tokens = 10;
	id = dj_next_id();
	assert_int_equal(dj_send(fd, DJINN_MSG_CTX_DECODE, id, c[0].sid, &st,
				 sizeof(st)),
			 0);
	for (int i = 0; i < 60000 && waitpid(old, &status, WNOHANG) != old; i++)
		usleep(1000);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	fx->d.pid = next;
	assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
	assert_int_equal(r.hdr.request_id, id);
	assert_int_equal(r.error, 0);
	memcpy(&resp, r.data, sizeof(resp));
	assert_int_equal(resp.nr_tokens, 10);
	dj_resp_free(&r);
	/* a model and two contexts each */
	assert_true(log_has(fx, "6 sessions, 0 tensors and 18 models and "
				"contexts restored"));

	for (int i = 0; i < CTX_SESSIONS; i++) {
		decode(fd, c[i].sid, c[i].a, 8, i % 2 ? &sp : NULL, got);
		if (memcmp(got, c[i].want, sizeof(got)))
			fail_msg("session %d: the context continued "
				 "otherwise after the restart",
				 i);
		/* the freed context's handle is still gone; the model's
		 * works */
		st.ctx = c[i].gone;
		st.nr_tokens = 1;
		call_err(fd, DJINN_MSG_CTX_DECODE, c[i].sid, &st, sizeof(st),
			 -ENOENT, NULL);
		ctx_new(fd, c[i].sid, c[i].model, 8);
		close_session(fd, c[i].sid);
	}
	close(fd);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

/*
 * Uploaded models (MODEL_OPEN_UPLOADED) are kept, made again from the
 * record without their files: their weights in place in the pool, or,
 * on a device the record cannot point into (--cpu-device-only, as a
 * GPU), copied through it. After the restart a context on one continues
 * to the tokens its twin gave, a second session's handle on it works,
 * and the tenant's next session opens it by fingerprints alone.
 */
static void restart_upload(struct fx *fx)
{
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	struct djinn_model_file cfg, w, fpcfg, fpw;
	struct djinn_model_resp m, m2, mb;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid, sid2, sidb, a, b, c;
	int32_t tok[2], got[6], want[6];
	size_t clen, wlen;
	uint8_t *cb, *wb;
	pid_t old, next;
	int status = -1;

	assert_int_equal(djd_make_model(&fx->d, "src", TINY_GPT2), 0);
	cb = model_file_read(fx, "src", "config.json", &clen);
	wb = model_file_read(fx, "src", "model.safetensors", &wlen);
	assert_non_null(cb);
	assert_non_null(wb);
	sid = open_session(fd, "up-a");
	cfg.handle = text_file(fd, sid, cb, clen, cfg.fp);
	w.handle = text_file(fd, sid, wb, wlen, w.fp);
	upload_open(fd, sid, &cfg, &w, &m, 0, NULL);
	/* the model's weights are its own text entry, held by it alone */
	tensor_release(fd, sid, cfg.handle);
	tensor_release(fd, sid, w.handle);
	a = ctx_new(fd, sid, m.model, 32);
	b = ctx_new(fd, sid, m.model, 32);
	prefill(fd, sid, a, prompt, 4, 0);
	prefill(fd, sid, b, prompt, 4, 0);
	decode(fd, sid, a, 2, NULL, tok);
	decode(fd, sid, b, 2, NULL, got);
	assert_memory_equal(tok, got, sizeof(tok));
	decode(fd, sid, b, 6, NULL, want);
	/* another session of the tenant, by fingerprints alone: one
	 * model, two holders */
	fpcfg = (struct djinn_model_file){ .handle = 0 };
	fpw = fpcfg;
	memcpy(fpcfg.fp, cfg.fp, DJINN_FP_LEN);
	memcpy(fpw.fp, w.fp, DJINN_FP_LEN);
	sidb = open_session(fd2, "up-b");
	upload_open(fd2, sidb, &fpcfg, &fpw, &mb, 0, NULL);

	old = fx->d.pid;
	next = djd_spawn_next(&fx->d);
	assert_true(next > 0);
	for (int i = 0; i < 60000 && waitpid(old, &status, WNOHANG) != old; i++)
		usleep(1000);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	fx->d.pid = next;
	assert_true(log_shows(fx, "2 sessions, 0 tensors and 4 models and "
				  "contexts restored"));

	decode(fd, sid, a, 6, NULL, got);
	if (memcmp(got, want, sizeof(want)))
		fail_msg("the context on the upload continued otherwise "
			 "after the restart");
	/* the tenant's next session: by fingerprints alone */
	sid2 = open_session(fd, "up-c");
	upload_open(fd, sid2, &fpcfg, &fpw, &m2, 0, NULL);
	assert_memory_equal(m2.fp, m.fp, sizeof(m.fp));
	c = ctx_new(fd, sid2, m2.model, 16);
	prefill(fd, sid2, c, prompt, 4, 0);
	decode(fd, sid2, c, 2, NULL, got);
	assert_memory_equal(got, tok, sizeof(tok));
	/* the other session's handle works */
	c = ctx_new(fd2, sidb, mb.model, 16);
	prefill(fd2, sidb, c, prompt, 4, 0);
	decode(fd2, sidb, c, 2, NULL, got);
	assert_memory_equal(got, tok, sizeof(tok));
	close_session(fd, sid);
	close_session(fd, sid2);
	close_session(fd2, sidb);
	close(fd);
	close(fd2);
	free(cb);
	free(wb);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

static void test_restart_upload(void **state)
{
	restart_upload(*state);
}

static const char *extra_copied[] = { "--handover", hpath, "--cpu-device-only",
				      NULL };

static int setup_copied(void **state)
{
	return start(state, extra_copied);
}

static void test_restart_upload_copied(void **state)
{
	restart_upload(*state);
}

/*
 * A context paused at a breakpoint is kept paused: resumed after the
 * restart, a prefill gives the logits, and a decode the tokens, its twin
 * gave without a break or before it.
 */
static void test_restart_paused(void **state)
{
	struct fx *fx = *state;
	const int32_t prompt[4] = { 2, 7, 1, 8 };
	struct djinn_ctx_step_resp st;
	float want[256], got[256];
	int32_t tw[5], tg[5];
	uint64_t sid, m, a, b, c, d;
	int fd = xconnect(fx->d.sock);

	assert_int_equal(djd_make_model(&fx->d, "tiny", TINY_GPT2), 0);
	sid = open_session(fd, "paused");
	m = model_open(fd, sid, "tiny").model;
	a = ctx_new(fd, sid, m, 16);
	b = ctx_new(fd, sid, m, 16);
	c = ctx_new(fd, sid, m, 16);
	d = ctx_new(fd, sid, m, 16);
	/* b runs its prompt whole; a pauses after layer 0 */
	st = prefill(fd, sid, b, prompt, 4, DJINN_STEP_LOGITS);
	tensor_read(fd, sid, st.logits, 0, sizeof(want), want);
	tensor_release(fd, sid, st.logits);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, a, prompt, 4,
			 1, DJINN_STEP_LOGITS, NULL, NULL);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	tensor_release(fd, sid, st.hidden);
	/* d decodes 5 tokens whole; c pauses on its first */
	prefill(fd, sid, c, prompt, 4, 0);
	prefill(fd, sid, d, prompt, 4, 0);
	decode(fd, sid, d, 5, NULL, tw);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_DECODE, c, NULL, 5, 1,
			 0, NULL, tg);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	tensor_release(fd, sid, st.hidden);

	assert_int_equal(djd_restart(&fx->d, 60000), 0);
	st = resume(fd, sid, a, 0, NULL);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_int_equal(st.len, 4);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_equal(got, want, sizeof(want));
	for (st = resume(fd, sid, c, 0, tg); st.state == DJINN_CTX_PAUSED;
	     st = resume(fd, sid, c, 0, tg))
		tensor_release(fd, sid, st.hidden);
	assert_int_equal(st.nr_tokens, 5);
	assert_memory_equal(tg, tw, sizeof(tw));
	close_session(fd, sid);
	close(fd);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

/*
 * Session @s (make_session(), with a text tensor) after a restart that
 * found its device memory gone: each tensor and its context @ctx answer
 * -EIO naming them, and are released; its served model, handle @model,
 * was opened again (loaded again) and makes contexts that work; and the
 * session makes new tensors.
 */
static void check_lost(int fd, struct held *s, uint64_t ctx, uint64_t model)
{
	const int32_t prompt[3] = { 1, 2, 3 };
	struct djinn_tensor_io io = { .len = 4 };
	struct djinn_ctx_step st = { .ctx = ctx, .nr_tokens = 1 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 4);
	uint64_t c, h;
	uint8_t b[4] = { 1, 2, 3, 4 }, got[4];
	char want[64];
	int32_t tok[2];

	for (unsigned int k = 0; k < 3; k++) {
		if (!s->len[k])
			continue;
		io.handle = s->h[k];
		snprintf(want, sizeof(want), "tensor %#llx was lost when",
			 (unsigned long long)s->h[k]);
		call_err(fd, DJINN_MSG_TENSOR_READ, s->sid, &io, sizeof(io),
			 -EIO, want);
		tensor_release(fd, s->sid, s->h[k]);
		call_err(fd, DJINN_MSG_TENSOR_READ, s->sid, &io, sizeof(io),
			 -ENOENT, "no tensor");
	}
	snprintf(want, sizeof(want), "context %#llx was lost when",
		 (unsigned long long)ctx);
	call_err(fd, DJINN_MSG_CTX_DECODE, s->sid, &st, sizeof(st), -EIO, want);
	call_void(fd, DJINN_MSG_CTX_FREE, s->sid, &ctx, 8);
	c = ctx_new(fd, s->sid, model, 16);
	prefill(fd, s->sid, c, prompt, 3, 0);
	decode(fd, s->sid, c, 2, NULL, tok);
	h = create_data(fd, s->sid, &d, b, sizeof(b));
	tensor_read(fd, s->sid, h, 0, sizeof(got), got);
	assert_memory_equal(got, b, sizeof(b));
}

/*
 * A session whose device state a fault lost (djinnd survived it) is
 * sorted by a restart: its objects come back lost one by one
 * (check_lost()), and it goes on. Sessions made after the fault are kept
 * whole.
 */
static void test_restart_lost(void **state)
{
	struct fx *fx = *state;
	const int32_t prompt[3] = { 1, 2, 3 };
	struct held s, after;
	struct dj_resp r;
	uint64_t ctx, model;
	int fd = xconnect(fx->d.sock);

	assert_int_equal(djd_make_model(&fx->d, "tiny", TINY_GPT2), 0);
	make_session(&s, fd, 5); /* data and text */
	model = model_open(fd, s.sid, "tiny").model;
	ctx = ctx_new(fd, s.sid, model, 16);
	prefill(fd, s.sid, ctx, prompt, 3, 0);
	call_ok(fx->adm, DJINN_MSG_ADMIN_FAULT_INJECT, 0, NULL, 0, &r, -1);
	dj_resp_free(&r);
	make_session(&after, fd, 6);

	assert_int_equal(djd_restart(&fx->d, 60000), 0);
	/* the session lost in the fault comes back, its objects lost */
	assert_true(log_has(fx, "2 sessions, 5 tensors and 2 models"));
	check_lost(fd, &s, ctx, model);
	check_session(&after);
	held_close(fd, &s);
	held_close(fd, &after);
	close(fd);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

/* The djinnd that djinnd @old started (its log's last "restart: pid N
 * started"), once @old has exited 0 after handing over: its pid. The
 * successor is this test's child (PR_SET_CHILD_SUBREAPER), so djd_stop()
 * can reap it. */
static pid_t successor_of(struct fx *fx, pid_t old)
{
	int64_t deadline = dj_now_ms() + 60000;
	pid_t next = -1;
	char line[512];
	int status = -1;
	FILE *f;

	while (dj_now_ms() < deadline && waitpid(old, &status, WNOHANG) != old)
		usleep(1000);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	f = fopen(fx->d.log, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "restart: pid ");

		if (p && strstr(p, " started from "))
			next = (pid_t)atoi(p + strlen("restart: pid "));
	}
	fclose(f);
	assert_true(next > 0);
	return next;
}

/*
 * ADMIN_RESTART (djinnctl restart) and SIGUSR2: djinnd starts its own
 * binary again and hands its state to it, as a successor started by
 * hand gets it; the answer comes first, with the successor's pid.
 * Without --handover there is nothing to hand over to: -EOPNOTSUPP.
 */
static void test_self_restart(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_restart ar;
	struct held s[3];
	struct dj_resp r;
	pid_t old = fx->d.pid;
	int fd = xconnect(fx->d.sock);

	for (unsigned int i = 0; i < 3; i++)
		make_session(&s[i], fd, i);
	call_ok(fx->adm, DJINN_MSG_ADMIN_RESTART, 0, NULL, 0, &r, sizeof(ar));
	memcpy(&ar, r.data, sizeof(ar));
	dj_resp_free(&r);
	fx->d.pid = successor_of(fx, old);
	assert_int_equal(fx->d.pid, (pid_t)ar.pid);
	for (unsigned int i = 0; i < 3; i++)
		check_session(&s[i]);

	/* and by signal, from the one it started */
	old = fx->d.pid;
	assert_int_equal(kill(old, SIGUSR2), 0);
	fx->d.pid = successor_of(fx, old);
	assert_true(fx->d.pid != old);
	for (unsigned int i = 0; i < 3; i++) {
		check_session(&s[i]);
		held_close(fd, &s[i]);
	}
	close(fd);
	check_text_cached(fx);
	fx->base = vmu_now(fx);
}

static int setup_plain(void **state)
{
	return fx_start(state, "64M", LEASE_MS);
}

static char delegates[64];
static const char *extra_delegated[] = { "--handover", hpath, "--set",
					 delegates, NULL };

/* This user a delegate of tenant "research" (djinn serve's case). */
static int setup_delegated(void **state)
{
	snprintf(hpath, sizeof(hpath), "/tmp/djinn-restart.%d", (int)getpid());
	unlink(hpath);
	snprintf(delegates, sizeof(delegates), "tenant.research.delegates=%u",
		 (unsigned int)getuid());
	return fx_start_args(state, "64M", LEASE_MS, extra_delegated);
}

/*
 * A delegate's session (opened for tenant research, not the
 * connection's own tenant) is attached again to its restored
 * connection, as ATTACH would attach it: the connection goes on using
 * it after the restart.
 */
static void test_restart_delegated(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .priority = 4,
					.flags = DJINN_SESSION_DELEGATED };
	struct djinn_signal sg = { .phase = DJINN_PHASE_COMPUTE };
	struct djinn_admin_restart ar;
	struct djinn_session_resp s;
	struct dj_resp r;
	pid_t old = fx->d.pid;
	int fd = xconnect(fx->d.sock);

	snprintf(o.tenant, sizeof(o.tenant), "research");
	call_ok(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	call_ok(fx->adm, DJINN_MSG_ADMIN_RESTART, 0, NULL, 0, &r, sizeof(ar));
	dj_resp_free(&r);
	fx->d.pid = successor_of(fx, old);
	call_ok(fd, DJINN_MSG_SIGNAL, s.session_id, &sg, sizeof(sg), &r, 0);
	dj_resp_free(&r);
	assert_string_equal(session_entry(fx, s.session_id).tenant, "research");
	close_session(fd, s.session_id);
	close(fd);
	fx->base = vmu_now(fx);
}

static void test_self_restart_needs_handover(void **state)
{
	struct fx *fx = *state;

	call_err(fx->adm, DJINN_MSG_ADMIN_RESTART, 0, NULL, 0, -EOPNOTSUPP,
		 "--handover PATH");
}

/*
 * Under a service manager: SIGTERM keeps the state in the fd store
 * (systemctl restart), and the next djinnd, passed it, restores it: the
 * sessions, every byte, and the connections, on which the clients go
 * on. The store forgets what was taken.
 */
static void test_store_restart(void **state)
{
	struct djd_store *st = djd_store_open();
	struct held s[8];
	struct reader rd = { 0 };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, sizeof(rd.bytes));
	struct djd dd;
	pid_t next;
	long before;
	int fd, status;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, NULL, st), 0);
	fd = xconnect(dd.sock);
	for (unsigned int i = 0; i < 8; i++)
		make_session(&s[i], fd, i);
	rd.fd = xconnect(dd.sock);
	rd.sid = open_session(rd.fd, "reader");
	fill(rd.bytes, sizeof(rd.bytes), 99);
	rd.h = create_data(rd.fd, rd.sid, &d, rd.bytes, sizeof(rd.bytes));
	assert_int_equal(pthread_create(&rd.th, NULL, reader_run, &rd), 0);
	for (int i = 0; i < 10000 && rd.reads < 20 && !rd.bad; i++)
		usleep(1000);
	assert_true(rd.reads >= 20);

	before = rd.reads;
	assert_int_equal(kill(dd.pid, SIGTERM), 0);
	assert_int_equal(waitpid(dd.pid, &status, 0), dd.pid);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	/* the state, then the two connections: the last one stored means
	 * all are there (the store takes its messages in order) */
	assert_true(djd_store_wait(st, "conn-1", true, 10000));
	assert_true(djd_store_has(st, "state"));
	assert_true(djd_store_has(st, "state-data"));
	assert_true(djd_store_has(st, "conn-0"));
	assert_true(djd_store_has(st, "conn-1"));
	next = djd_spawn_next(&dd);
	assert_true(next > 0);
	dd.pid = next;
	for (int i = 0; i < 10000 && rd.reads < before + 50 && !rd.bad; i++)
		usleep(1000);
	rd.stop = 1;
	pthread_join(rd.th, NULL);
	if (rd.bad)
		fail_msg("the reader: %s", rd.why);
	assert_true(rd.reads >= before + 50);
	for (unsigned int i = 0; i < 8; i++)
		check_session(&s[i]);
	/* taken: the store forgets the state and the connections */
	assert_true(djd_store_wait(st, "state", false, 10000));
	assert_true(djd_store_wait(st, "conn-0", false, 10000));
	for (unsigned int i = 0; i < 8; i++)
		held_close(fd, &s[i]);
	close_session(rd.fd, rd.sid);
	close(rd.fd);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * A record the next djinnd cannot restore (a model gone from the model
 * directory meanwhile) is restored not at all: it starts afresh, its
 * clients see their connections end, and the store lets go of all of
 * it.
 */
static void test_store_restart_refused(void **state)
{
	struct djd_store *st = djd_store_open();
	const int32_t prompt[3] = { 1, 2, 3 };
	char cmd[256];
	struct djd dd;
	uint64_t sid, ctx;
	int fd, fd2, status;
	pid_t next;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, NULL, st), 0);
	assert_int_equal(djd_make_model(&dd, "gone", TINY_GPT2), 0);
	fd = xconnect(dd.sock);
	fd2 = xconnect(dd.sock);
	sid = open_session(fd, "refused");
	ctx = ctx_new(fd, sid, model_open(fd, sid, "gone").model, 16);
	prefill(fd, sid, ctx, prompt, 3, 0);
	open_session(fd2, "other");
	assert_int_equal(kill(dd.pid, SIGTERM), 0);
	assert_int_equal(waitpid(dd.pid, &status, 0), dd.pid);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	assert_true(djd_store_wait(st, "conn-1", true, 10000));
	assert_true(djd_store_has(st, "state"));
	snprintf(cmd, sizeof(cmd), "rm -rf %s/models/gone", dd.dir);
	assert_int_equal(system(cmd), 0);
	next = djd_spawn_next(&dd);
	assert_true(next > 0);
	dd.pid = next;
	/* both clients' connections end; the store has nothing of it */
	assert_int_equal(dj_wait_eof(fd, DJ_TIMEOUT_MS), 1);
	assert_int_equal(dj_wait_eof(fd2, DJ_TIMEOUT_MS), 1);
	assert_true(djd_store_wait(st, "state", false, 10000));
	assert_true(djd_store_wait(st, "conn-0", false, 10000));
	assert_true(djd_store_wait(st, "conn-1", false, 10000));
	close(fd);
	close(fd2);
	/* it serves, afresh: the session ids start again */
	fd = xconnect(dd.sock);
	assert_int_equal(open_session(fd, "afresh"), 1);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * A device that dies (DJINN_FAULT_DEAD, as after CUDA_ERROR_CONTAINED):
 * djinnd hands its state to a successor it starts itself (--handover)
 * rather than drop every session. Each session stays, on the same
 * connection: what was swapped out to host memory comes back whole, and
 * each object whose bytes were on the dead device answers -EIO naming
 * it (check_lost()); the served model opens again on the successor's
 * fresh device (loaded again), and new sessions work.
 */
static void test_dead_device(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_fault_req q = { .flags = DJINN_FAULT_DEAD };
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 32 * MiB);
	const int32_t prompt[3] = { 1, 2, 3 };
	uint8_t *big = malloc(32 * MiB), *got = malloc(32 * MiB);
	struct held s, after;
	struct dj_resp r;
	pid_t old = fx->d.pid;
	uint64_t hb, fill_sid, ctx, model;
	int fd = xconnect(fx->d.sock), n;

	assert_non_null(big);
	assert_non_null(got);
	assert_int_equal(djd_make_model(&fx->d, "tiny", TINY_GPT2), 0);
	fill(big, 32 * MiB, 77);
	hb = create_data(fd, open_session(fd, "swapped"), &d, big, 32 * MiB);
	/* another session fills the device: the first one's tensor goes
	 * out to host memory */
	fill_sid = open_session(fd, "filler");
	for (n = 0; n < 16 && session_entry(fx, 1).swapped < 32 * MiB; n++)
		create_data(fd, fill_sid, &d, got, 32 * MiB);
	assert_true(session_entry(fx, 1).swapped >= 32 * MiB);
	/* made after the fill: on the device */
	make_session(&s, fd, 5);
	model = model_open(fd, s.sid, "tiny").model;
	ctx = ctx_new(fd, s.sid, model, 16);
	prefill(fd, s.sid, ctx, prompt, 3, 0);

	call_ok(fx->adm, DJINN_MSG_ADMIN_FAULT_INJECT, 0, &q, sizeof(q), &r,
		-1);
	dj_resp_free(&r);
	fx->d.pid = successor_of(fx, old);
	assert_true(log_has(fx, "is dead after"));
	assert_true(log_has(fx, "3 sessions, "));
	/* swapped out: whole */
	memset(got, 0, 32 * MiB);
	tensor_read(fd, 1, hb, 0, 32 * MiB, got);
	if (memcmp(got, big, 32 * MiB))
		fail_msg("the tensor swapped out changed over the restart");
	check_lost(fd, &s, ctx, model);
	close_session(fd, s.sid);
	close_session(fd, fill_sid);
	close_session(fd, 1);
	make_session(&after, fd, 6);
	(void)model_open(fd, after.sid, "tiny");
	check_session(&after);
	close_session(fd, after.sid);
	for (unsigned int k = 0; k < 3; k++) {
		free(s.bytes[k]);
		free(after.bytes[k]);
	}
	free(big);
	free(got);
	close(fd);
	fx->base = vmu_now(fx);
}

/*
 * The same under systemd: the state goes into the fd store, djinnd
 * exits DJINND_EXIT_DEVICE_DEAD (74), a failure systemd restarts with
 * the store kept, and the djinnd it starts restores it.
 */
static void test_dead_device_store(void **state)
{
	static const char *const fault[] = { "--fault-injection", NULL };
	struct djinn_admin_fault_req q = { .flags = DJINN_FAULT_DEAD };
	struct djinn_tensor_io io = { .len = 4 };
	struct djd_store *st = djd_store_open();
	struct held s, after;
	struct dj_resp r;
	struct djd dd;
	uint64_t model, ctx;
	char cmd[256], want[64];
	int fd, adm, status;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, fault, st), 0);
	assert_int_equal(djd_make_model(&dd, "gone", TINY_GPT2), 0);
	fd = xconnect(dd.sock);
	make_session(&s, fd, 5);
	model = model_open(fd, s.sid, "gone").model;
	ctx = ctx_new(fd, s.sid, model, 16);
	/* its files go: the model cannot be opened again, and comes back
	 * lost with its context rather than failing the restore */
	snprintf(cmd, sizeof(cmd), "rm -rf %s/models/gone", dd.dir);
	assert_int_equal(system(cmd), 0);
	adm = xconnect(dd.admin);
	call_ok(adm, DJINN_MSG_ADMIN_FAULT_INJECT, 0, &q, sizeof(q), &r, -1);
	dj_resp_free(&r);
	assert_int_equal(waitpid(dd.pid, &status, 0), dd.pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 74);
	assert_true(djd_store_wait(st, "conn-1", true, 10000));
	assert_true(djd_store_has(st, "state"));
	dd.pid = djd_spawn_next(&dd);
	assert_true(dd.pid > 0);
	io.handle = s.h[0];
	call_err(fd, DJINN_MSG_TENSOR_READ, s.sid, &io, sizeof(io), -EIO,
		 "was lost when");
	snprintf(want, sizeof(want), "model %#llx was lost when",
		 (unsigned long long)model);
	call_err(fd, DJINN_MSG_CTX_NEW, s.sid,
		 &(struct djinn_ctx_new){ .model = model },
		 sizeof(struct djinn_ctx_new), -EIO, want);
	call_void(fd, DJINN_MSG_MODEL_CLOSE, s.sid, &model, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, s.sid, &ctx, 8);
	close_session(fd, s.sid);
	make_session(&after, fd, 6);
	check_session(&after);
	close_session(fd, after.sid);
	for (unsigned int k = 0; k < 3; k++) {
		free(s.bytes[k]);
		free(after.bytes[k]);
	}
	close(adm);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/* ---------------------------------------------------------------------- */
/* Crashes under the fd store: the journal */

/* The name of djinnd @pid's crash journal in the store ("journal-PID-"
 * and when it began: any such, to the stand-in store). */
static void journal_name(char *name, size_t len, pid_t pid)
{
	snprintf(name, len, "journal-%d-*", (int)pid);
}

/* The store holds djinnd @pid's journal, within 10 s (@want), or no more. */
static bool journal_wait(struct djd_store *st, pid_t pid, bool want)
{
	char name[32];

	journal_name(name, sizeof(name), pid);
	return djd_store_wait(st, name, want, 10000);
}

/* SIGKILL djinnd @dd and reap it: it dies at once and says nothing to
 * anyone. Returns its pid; none runs until djd_spawn_next(). */
static pid_t crash_kill(struct djd *dd)
{
	pid_t old = dd->pid;
	int status = 0;

	assert_int_equal(kill(old, SIGKILL), 0);
	assert_int_equal(waitpid(old, &status, 0), old);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	return old;
}

/*
 * SIGKILL djinnd @dd (crash_kill()). Then start the next one with what
 * the store holds (@dd->pid becomes its). Returns the pid of the one
 * killed.
 */
static pid_t crash(struct djd *dd)
{
	pid_t old = crash_kill(dd);

	dd->pid = djd_spawn_next(dd);
	assert_true(dd->pid > 0);
	return old;
}

/*
 * A new connection to @dd's client socket once the djinnd started after
 * a crash serves: its HELLO answered. The listening socket is in the
 * store, so the connection waits in its backlog meanwhile; wait at most
 * 60 s for the restore, failing at once if that djinnd exits.
 */
static int reconnect(struct djd *dd)
{
	int64_t deadline = dj_now_ms() + 60000;
	uint64_t id = dj_next_id();
	int fd = xconnect(dd->sock), status;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct dj_resp r;

	assert_int_equal(dj_send(fd, DJINN_MSG_HELLO, id, 0, NULL, 0), 0);
	while (poll(&p, 1, 10) <= 0) {
		if (waitpid(dd->pid, &status, WNOHANG) == dd->pid) {
			dd->pid = -1;
			djd_log_tail(dd, 8192);
			fail_msg("djinnd exited after the crash (status %#x)",
				 status);
		}
		if (dj_now_ms() > deadline) {
			djd_log_tail(dd, 8192);
			fail_msg("djinnd does not serve 60 s after the crash");
		}
	}
	assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
	assert_int_equal(r.hdr.request_id, id);
	if (r.error)
		fail_msg("HELLO after the crash: %s", r.msg);
	dj_resp_free(&r);
	return fd;
}

/* After a crash: the client connection *@fd and the admin one *@adm,
 * which djinnd's death closed (they read EOF, within the bound), closed
 * here, and new ones made to the next djinnd once it serves. */
static void reconnect_all(struct djd *dd, int *fd, int *adm)
{
	assert_int_equal(dj_wait_eof(*fd, DJ_TIMEOUT_MS), 1);
	assert_int_equal(dj_wait_eof(*adm, DJ_TIMEOUT_MS), 1);
	close(*fd);
	close(*adm);
	*fd = reconnect(dd);
	*adm = xconnect(dd->admin);
}

/* Session @sid's ADMIN_SESSIONS entry on admin connection @adm; how
 * many sessions there are in *@nr (may be NULL). */
static struct djinn_admin_session admin_entry(int adm, uint64_t sid,
					      uint32_t *nr)
{
	struct djinn_admin_session e = { 0 };
	struct dj_resp r;
	uint32_t n[2], i;

	call_ok(adm, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, &r, -1);
	assert_true(r.len >= 8);
	memcpy(n, r.data, sizeof(n));
	assert_int_equal(r.len, 8 + (uint64_t)n[0] * sizeof(e));
	for (i = 0; i < n[0]; i++) {
		memcpy(&e, r.data + 8 + i * sizeof(e), sizeof(e));
		if (e.id == sid)
			break;
	}
	dj_resp_free(&r);
	if (i == n[0])
		fail_msg("session %llu not in ADMIN_SESSIONS",
			 (unsigned long long)sid);
	if (nr)
		*nr = n[0];
	return e;
}

/* Session @s came back as it was (entry @was): attached on @fd by its
 * token, the same tenant, label and priority, every byte. */
static void check_attached(int fd, int adm, struct held *s,
			   const struct djinn_admin_session *was)
{
	struct djinn_admin_session e;

	attach(fd, s->sid, s->token);
	s->fd = fd;
	e = admin_entry(adm, s->sid, NULL);
	assert_string_equal(e.tenant, was->tenant);
	assert_string_equal(e.label, was->label);
	assert_int_equal(e.priority, was->priority);
	check_session(s);
}

/* A new context on @model: the prompt, then 4 greedy tokens, into @tok. */
static uint64_t ctx_tokens(int fd, uint64_t sid, uint64_t model, int32_t tok[4])
{
	static const int32_t prompt[4] = { 2, 7, 1, 8 };
	uint64_t ctx = ctx_new(fd, sid, model, 16);

	prefill(fd, sid, ctx, prompt, 4, 0);
	decode(fd, sid, ctx, 4, NULL, tok);
	return ctx;
}

/*
 * Contexts of session @sid on @model before a crash, for crash_ctxs_check()
 * after: @x->a and its twin @x->b each ran the prompt and 4 tokens
 * (ctx_tokens(), @x->first), b 8 more (@x->want, then @x->next); @x->t
 * ran 12 too, then a truncation to 7 and a prefill of the 8th sent
 * together, and 4 tokens again: its cache rows 7 to 11 are written
 * again (a step that would write them before the journal has recorded
 * the truncation waits for it); @x->p is paused at a breakpoint in its
 * prompt.
 */
struct crash_ctxs {
	uint64_t a, b, t, p;
	int32_t first[4], want[4], next[4];
};

static void crash_ctxs_make(struct crash_ctxs *x, int fd, uint64_t sid,
			    uint64_t model)
{
	static const int32_t prompt[4] = { 2, 7, 1, 8 };
	struct djinn_ctx_truncate tr = { .len = 7 };
	struct djinn_ctx_step_resp sr;
	uint8_t pf[sizeof(struct djinn_ctx_step) + sizeof(int32_t)];
	struct djinn_ctx_step st = { .nr_tokens = 1 };
	uint64_t id_t, id_p;
	int32_t got[4];
	struct dj_resp r;

	x->a = ctx_tokens(fd, sid, model, x->first);
	x->b = ctx_tokens(fd, sid, model, got);
	assert_memory_equal(got, x->first, sizeof(got));
	decode(fd, sid, x->b, 4, NULL, x->want);
	decode(fd, sid, x->b, 4, NULL, x->next);
	x->t = ctx_tokens(fd, sid, model, got);
	decode(fd, sid, x->t, 4, NULL, got);
	tr.ctx = st.ctx = x->t;
	memcpy(pf, &st, sizeof(st));
	memcpy(pf + sizeof(st), &x->first[3], sizeof(int32_t));
	id_t = dj_next_id();
	id_p = dj_next_id();
	assert_int_equal(dj_send(fd, DJINN_MSG_CTX_TRUNCATE, id_t, sid, &tr,
				 sizeof(tr)),
			 0);
	assert_int_equal(dj_send(fd, DJINN_MSG_CTX_PREFILL, id_p, sid, pf,
				 sizeof(pf)),
			 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(dj_recv(fd, &r, DJ_TIMEOUT_MS), 1);
		if (r.error)
			fail_msg("%s: %s",
				 r.hdr.request_id == id_t ? "truncate" :
							    "the prefill after",
				 r.msg);
		if (r.hdr.request_id == id_p) {
			memcpy(&sr, r.data, sizeof(sr));
			assert_int_equal(sr.len, 8);
		}
		dj_resp_free(&r);
	}
	decode(fd, sid, x->t, 4, NULL, got);
	assert_memory_equal(got, x->want, sizeof(got));
	x->p = ctx_new(fd, sid, model, 16);
	sr = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, x->p, prompt,
			 4, 1, 0, NULL, NULL);
	assert_int_equal(sr.state, DJINN_CTX_PAUSED);
	tensor_release(fd, sid, sr.hidden);
}

/*
 * After the crash: @x->a and @x->t continue to the tokens @x->b gave
 * (cache rows and last logits kept, in place); @x->p's paused step was
 * lost (RESUME: -EAGAIN saying so), and it is as before it: empty, its
 * prompt then gives the same tokens. The contexts are freed.
 */
static void crash_ctxs_check(struct crash_ctxs *x, int fd, uint64_t sid)
{
	static const int32_t prompt[4] = { 2, 7, 1, 8 };
	struct djinn_ctx_resume rs = { .ctx = x->p };
	int32_t got[4];

	decode(fd, sid, x->a, 4, NULL, got);
	assert_memory_equal(got, x->want, sizeof(got));
	decode(fd, sid, x->t, 4, NULL, got);
	assert_memory_equal(got, x->next, sizeof(got));
	call_err(fd, DJINN_MSG_CTX_RESUME, sid, &rs, sizeof(rs), -EAGAIN,
		 "restarted while the context's step was paused");
	assert_int_equal(prefill(fd, sid, x->p, prompt, 4, 0).len, 4);
	decode(fd, sid, x->p, 4, NULL, got);
	assert_memory_equal(got, x->first, sizeof(got));
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &x->a, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &x->b, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &x->t, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &x->p, 8);
}

#define NR_CRASH 8

/*
 * A crash (SIGKILL) under the fd store keeps the sessions: djinnd keeps
 * its pool and a journal of its state record there, each change in it
 * before its answer, and the next djinnd restores from it. The
 * connections die with djinnd; on a new one each session attaches by
 * its token and has every byte, its tenant and priority, a tensor
 * written after its create as written, a released handle still gone
 * and a closed session still closed. Its contexts are kept, and go on
 * as they would have (crash_ctxs_check()). Each djinnd keeps a journal
 * of its own, the old one's dropped, so a second crash, after a
 * session made on the first successor, keeps them all again.
 */
static void test_crash_restart(void **state)
{
	struct djd_store *st = djd_store_open();
	static struct held s[NR_CRASH + 1];
	struct djinn_admin_session e[NR_CRASH + 1];
	struct djinn_session_resp resp;
	uint8_t patch[100], closed_token[16];
	uint64_t model, closed;
	struct crash_ctxs x;
	struct djd dd;
	uint32_t nr;
	pid_t old;
	int fd, adm;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, NULL, st), 0);
	assert_int_equal(djd_make_model(&dd, "m", TINY_GPT2), 0);
	fd = xconnect(dd.sock);
	adm = xconnect(dd.admin);
	for (unsigned int i = 0; i < NR_CRASH; i++)
		make_session(&s[i], fd, i);
	/* a TENSOR_WRITE after the create */
	fill(patch, sizeof(patch), 31337);
	tensor_write(fd, s[1].sid, s[1].h[0], 10, patch, sizeof(patch));
	memcpy(s[1].bytes[0] + 10, patch, sizeof(patch));
	/* a session opened and closed again */
	closed = open_at(__LINE__, fd, "closed", 4, 0, &resp);
	memcpy(closed_token, resp.token, sizeof(closed_token));
	close_session(fd, closed);
	/* a model, and contexts that have run */
	model = model_open(fd, s[0].sid, "m").model;
	crash_ctxs_make(&x, fd, s[0].sid, model);
	for (unsigned int i = 0; i < NR_CRASH; i++)
		e[i] = admin_entry(adm, s[i].sid, NULL);
	/* the journal is in the store: the pool and this djinnd's record */
	assert_true(djd_store_wait(st, "pool-0", true, 10000));
	assert_true(journal_wait(st, dd.pid, true));

	old = crash(&dd);
	/* the connections died with it: the clients connect again */
	reconnect_all(&dd, &fd, &adm);
	for (unsigned int i = 0; i < NR_CRASH; i++)
		check_attached(fd, adm, &s[i], &e[i]);
	call_err(fd, DJINN_MSG_SESSION_ATTACH, closed, closed_token, 16, -EPERM,
		 "no session");
	(void)admin_entry(adm, s[0].sid, &nr);
	assert_int_equal(nr, NR_CRASH);
	crash_ctxs_check(&x, fd, s[0].sid);
	crash_ctxs_make(&x, fd, s[0].sid, model);
	/* the new djinnd's journal replaces the old one's */
	assert_true(journal_wait(st, dd.pid, true));
	assert_true(journal_wait(st, old, false));
	assert_true(djd_store_has(st, "pool-0"));

	/* a session made after the first crash, then a second crash */
	make_session(&s[NR_CRASH], fd, NR_CRASH);
	for (unsigned int i = 0; i < NR_CRASH; i++)
		assert_true(s[i].sid != s[NR_CRASH].sid);
	e[NR_CRASH] = admin_entry(adm, s[NR_CRASH].sid, NULL);
	old = crash(&dd);
	reconnect_all(&dd, &fd, &adm);
	for (unsigned int i = 0; i <= NR_CRASH; i++)
		check_attached(fd, adm, &s[i], &e[i]);
	(void)admin_entry(adm, s[0].sid, &nr);
	assert_int_equal(nr, NR_CRASH + 1);
	crash_ctxs_check(&x, fd, s[0].sid);
	assert_true(journal_wait(st, dd.pid, true));
	assert_true(journal_wait(st, old, false));
	assert_true(djd_store_has(st, "pool-0"));

	for (unsigned int i = 0; i <= NR_CRASH; i++)
		held_close(fd, &s[i]);
	close(adm);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * A client creating, writing and releasing tensors, on a connection
 * and session of its own, until djinnd dies under it: what it was
 * answered, tensor by tensor.
 */
#define LOAD_MAX 2048
#define LOAD_MIN 200

enum load_state {
	LOAD_SENT, /* created, written, either in flight */
	LOAD_MADE, /* created and written: both answered */
	LOAD_RELEASING, /* its release in flight */
	LOAD_RELEASED, /* its release answered */
};

struct writer {
	pthread_t th;
	int fd;
	uint64_t sid;
	uint8_t token[16];
	volatile int killed, done;
	volatile unsigned int n, made;
	struct {
		uint64_t h;
		enum load_state state;
	} t[LOAD_MAX];
	long bad;
	char why[DJINN_MAX_ERROR_MSG + 128];
};

/* Tensor @i: 2 to 5 KiB of bytes of its own. */
static uint64_t load_len(unsigned int i)
{
	return 2048 + (i % 7) * 512;
}

static uint64_t load_seed(unsigned int i)
{
	return 70000 + i;
}

/* Whether the call gave a good answer (@want_len bytes); else the
 * writer stops: quietly once djinnd was killed and the connection is
 * gone, else with the reason. Never asserts: not the test's thread. */
static bool writer_ok(struct writer *w, int ret, struct dj_resp *r,
		      uint64_t want_len, const char *what, unsigned int i)
{
	if (ret == 1 && !r->error && r->len == want_len)
		return true;
	if (ret == 1) {
		snprintf(w->why, sizeof(w->why),
			 "tensor %u: %s answered %d (%s), %llu bytes", i, what,
			 r->error, r->msg, (unsigned long long)r->len);
		w->bad++;
		dj_resp_free(r);
	} else if (!w->killed) {
		snprintf(w->why, sizeof(w->why), "tensor %u: %s: %s", i, what,
			 ret_str(ret));
		w->bad++;
	}
	return false;
}

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	uint8_t buf[4096 + 1024];

	for (unsigned int i = 0; i < LOAD_MAX; i++) {
		uint64_t len = load_len(i), half = len / 2;
		struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, len);
		struct djinn_tensor_resp tr;
		struct dj_resp r;
		unsigned int k;
		size_t plen;
		uint8_t *p;
		int ret;

		/* the first half with the create, the rest written */
		fill(buf, len, load_seed(i));
		w->t[i].state = LOAD_SENT;
		w->n = i + 1;
		p = create_payload(&d, DJINN_SEG_DATA, NULL, buf, half, &plen);
		ret = dj_call(w->fd, DJINN_MSG_TENSOR_CREATE, w->sid, p, plen,
			      &r);
		free(p);
		if (!writer_ok(w, ret, &r, sizeof(tr), "create", i))
			break;
		memcpy(&tr, r.data, sizeof(tr));
		dj_resp_free(&r);
		w->t[i].h = tr.handle;
		p = write_payload(tr.handle, half, buf + half, len - half,
				  &plen);
		ret = dj_call(w->fd, DJINN_MSG_TENSOR_WRITE, w->sid, p, plen,
			      &r);
		free(p);
		if (!writer_ok(w, ret, &r, 0, "write", i))
			break;
		dj_resp_free(&r);
		w->t[i].state = LOAD_MADE;
		w->made++;
		/* every other one, release one made 5 before (each odd
		 * one, once) */
		if (i % 2 || i < 6)
			continue;
		k = i - 5;
		w->t[k].state = LOAD_RELEASING;
		ret = dj_call(w->fd, DJINN_MSG_TENSOR_RELEASE, w->sid,
			      &w->t[k].h, 8, &r);
		if (!writer_ok(w, ret, &r, 0, "release", k))
			break;
		dj_resp_free(&r);
		w->t[k].state = LOAD_RELEASED;
	}
	w->done = 1;
	return NULL;
}

/*
 * A crash under load: djinnd is killed while a client creates, writes
 * and releases tensors as fast as it is answered. Each tensor whose
 * create and write were answered reads back whole, each release that
 * was answered stays done (-ENOENT), and the session holds no other
 * tensor but the one in flight at the kill, which may have been done
 * or not. Sessions made before the load are kept whole.
 */
static void test_crash_under_load(void **state)
{
	struct djd_store *st = djd_store_open();
	static struct writer w;
	struct held s[4];
	struct djinn_admin_session e[4], we;
	struct djinn_session_resp resp;
	unsigned int live = 0, unsure = 0, gone = 0;
	uint8_t buf[4096 + 1024], got[4096 + 1024];
	struct djd dd;
	pid_t old;
	int fd, adm;

	(void)state;
	assert_non_null(st);
	memset(&w, 0, sizeof(w));
	/* room for every tensor, none swapped out */
	assert_int_equal(djd_start_store(&dd, "512M", LEASE_MS, NULL, st), 0);
	fd = xconnect(dd.sock);
	adm = xconnect(dd.admin);
	for (unsigned int i = 0; i < 4; i++) {
		make_session(&s[i], fd, i);
		e[i] = admin_entry(adm, s[i].sid, NULL);
	}
	w.fd = xconnect(dd.sock);
	w.sid = open_at(__LINE__, w.fd, "writer", 4, 0, &resp);
	memcpy(w.token, resp.token, sizeof(w.token));
	assert_true(journal_wait(st, dd.pid, true));
	assert_int_equal(pthread_create(&w.th, NULL, writer_run, &w), 0);
	for (int i = 0; i < 60000 && w.made < LOAD_MIN && !w.done; i++)
		usleep(1000);
	if (w.bad)
		fail_msg("the writer, before the crash: %s", w.why);
	assert_true(w.made >= LOAD_MIN);

	/* the kill, while it writes */
	w.killed = 1;
	old = crash(&dd);
	pthread_join(w.th, NULL);
	if (w.bad)
		fail_msg("the writer: %s", w.why);
	close(w.fd);
	reconnect_all(&dd, &fd, &adm);
	attach(fd, w.sid, w.token);
	for (unsigned int i = 0; i < w.n; i++) {
		struct djinn_tensor_io io = { .handle = w.t[i].h, .len = 1 };
		struct dj_resp r;

		switch (w.t[i].state) {
		case LOAD_MADE:
			live++;
			fill(buf, load_len(i), load_seed(i));
			tensor_read(fd, w.sid, w.t[i].h, 0, load_len(i), got);
			if (memcmp(got, buf, load_len(i)))
				fail_msg("tensor %u (handle %#llx) differs "
					 "after the crash",
					 i, (unsigned long long)w.t[i].h);
			break;
		case LOAD_RELEASED:
			gone++;
			assert_int_equal(dj_call(fd, DJINN_MSG_TENSOR_READ,
						 w.sid, &io, sizeof(io), &r),
					 1);
			expect_error(&r, -ENOENT, NULL);
			dj_resp_free(&r);
			break;
		default: /* in flight at the kill */
			unsure++;
			break;
		}
	}
	assert_true(unsure <= 1);
	assert_true(live + gone + unsure == w.n);
	assert_true(gone > 0);
	/* nothing else came back: no phantom, no release undone */
	we = admin_entry(adm, w.sid, NULL);
	assert_true(we.tensors >= live && we.tensors <= live + unsure);
	for (unsigned int i = 0; i < 4; i++)
		check_attached(fd, adm, &s[i], &e[i]);
	assert_true(journal_wait(st, dd.pid, true));
	assert_true(journal_wait(st, old, false));

	close_session(fd, w.sid);
	for (unsigned int i = 0; i < 4; i++)
		held_close(fd, &s[i]);
	close(adm);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * Agents decoding until djinnd dies under them: NR_AGENTS connections,
 * AGENT_SESSIONS sessions each, one context each, greedy DECODEs of
 * AGENT_STEP tokens round the sessions, each answered before the next.
 */
#define NR_AGENTS 4
#define AGENT_SESSIONS 25
#define AGENT_STEP 3
#define AGENT_MAX 48 /* tokens generated at most, past the prompt */

struct agent {
	pthread_t th;
	int fd;
	volatile int killed;
	volatile unsigned int steps;
	struct {
		uint64_t sid, ctx;
		uint8_t token[16];
		uint32_t len; /* as the last answer said */
		bool sent; /* a DECODE unanswered */
	} s[AGENT_SESSIONS];
	long bad;
	char why[DJINN_MAX_ERROR_MSG + 128];
};

static void *agent_run(void *arg)
{
	struct agent *a = arg;
	struct djinn_ctx_step st = { .nr_tokens = AGENT_STEP };
	struct djinn_ctx_step_resp sr;

	for (unsigned int i = 0; !a->bad && !a->killed;
	     i = (i + 1) % AGENT_SESSIONS) {
		struct dj_resp r;
		int ret;

		if (a->s[i].len + AGENT_STEP > 4 + AGENT_MAX)
			continue;
		st.ctx = a->s[i].ctx;
		a->s[i].sent = true;
		ret = dj_call(a->fd, DJINN_MSG_CTX_DECODE, a->s[i].sid, &st,
			      sizeof(st), &r);
		if (ret != 1) {
			if (!a->killed) {
				snprintf(a->why, sizeof(a->why),
					 "session %u: DECODE: %s", i,
					 ret_str(ret));
				a->bad++;
			}
			break;
		}
		if (r.error || r.len < sizeof(sr)) {
			snprintf(a->why, sizeof(a->why),
				 "session %u: DECODE answered %d (%s)", i,
				 r.error, r.msg);
			a->bad++;
			dj_resp_free(&r);
			break;
		}
		memcpy(&sr, r.data, sizeof(sr));
		dj_resp_free(&r);
		if (sr.len != a->s[i].len + AGENT_STEP) {
			snprintf(a->why, sizeof(a->why),
				 "session %u: %u tokens after a DECODE of %u "
				 "from %u",
				 i, sr.len, AGENT_STEP, a->s[i].len);
			a->bad++;
			break;
		}
		a->s[i].len = sr.len;
		a->s[i].sent = false;
		a->steps++;
	}
	return NULL;
}

/*
 * SIGKILL while 100 sessions' contexts generate: each context comes
 * back with the tokens its last answered DECODE said, or, for the one
 * in flight on each connection, those and the ones it was running (it
 * may have finished before the kill without being answered); its cache
 * rows and last logits are those of that length, so it goes on to the
 * very tokens a context that never crashed gives (the greedy stream of
 * the prompt, made first on a context of its own).
 */
static void test_crash_contexts_under_load(void **state)
{
	static const int32_t prompt[4] = { 2, 7, 1, 8 };
	struct djd_store *st = djd_store_open();
	static struct agent ag[NR_AGENTS];
	int32_t stream[AGENT_MAX + 8], got[8];
	struct djinn_session_resp resp;
	unsigned int steps = 0, unsure = 0;
	uint64_t sid, ctx;
	struct djd dd;
	int fd;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "512M", LEASE_MS, NULL, st), 0);
	assert_int_equal(djd_make_model(&dd, "m", TINY_GPT2), 0);
	fd = xconnect(dd.sock);
	sid = open_session(fd, "stream");
	ctx = ctx_new(fd, sid, model_open(fd, sid, "m").model, 64);
	prefill(fd, sid, ctx, prompt, 4, 0);
	decode(fd, sid, ctx, AGENT_MAX + 8, NULL, stream);
	close_session(fd, sid);
	for (unsigned int k = 0; k < NR_AGENTS; k++) {
		struct agent *a = &ag[k];

		memset(a, 0, sizeof(*a));
		a->fd = xconnect(dd.sock);
		for (unsigned int i = 0; i < AGENT_SESSIONS; i++) {
			uint64_t model;

			a->s[i].sid =
				open_at(__LINE__, a->fd, "agent", 4, 0, &resp);
			memcpy(a->s[i].token, resp.token, 16);
			model = model_open(a->fd, a->s[i].sid, "m").model;
			a->s[i].ctx = ctx_new(a->fd, a->s[i].sid, model, 64);
			prefill(a->fd, a->s[i].sid, a->s[i].ctx, prompt, 4, 0);
			a->s[i].len = 4;
		}
	}
	assert_true(journal_wait(st, dd.pid, true));
	for (unsigned int k = 0; k < NR_AGENTS; k++)
		assert_int_equal(
			pthread_create(&ag[k].th, NULL, agent_run, &ag[k]), 0);
	/* each session two steps on, on average */
	for (int i = 0; i < 60000 && steps < 2 * NR_AGENTS * AGENT_SESSIONS;
	     i++) {
		usleep(1000);
		steps = 0;
		for (unsigned int k = 0; k < NR_AGENTS; k++)
			steps += ag[k].steps + (ag[k].bad ? 1u << 20 : 0);
	}
	for (unsigned int k = 0; k < NR_AGENTS; k++) {
		if (ag[k].bad)
			fail_msg("agent %u, before the crash: %s", k,
				 ag[k].why);
		ag[k].killed = 1;
	}
	(void)crash(&dd);
	for (unsigned int k = 0; k < NR_AGENTS; k++) {
		pthread_join(ag[k].th, NULL);
		if (ag[k].bad)
			fail_msg("agent %u: %s", k, ag[k].why);
		close(ag[k].fd);
	}
	close(fd);

	fd = reconnect(&dd);
	for (unsigned int k = 0; k < NR_AGENTS; k++) {
		for (unsigned int i = 0; i < AGENT_SESSIONS; i++) {
			typeof(ag[k].s[i]) *x = &ag[k].s[i];
			struct djinn_ctx_step_resp sr;
			uint32_t len;

			attach(fd, x->sid, x->token);
			sr = decode(fd, x->sid, x->ctx, 8, NULL, got);
			len = sr.len - 8;
			if (len != x->len &&
			    !(x->sent && len == x->len + AGENT_STEP))
				fail_msg("agent %u session %u: %u tokens after "
					 "the crash; %u were answered%s",
					 k, i, len, x->len,
					 x->sent ? ", 3 more in flight" : "");
			unsure += len != x->len;
			if (memcmp(got, stream + (len - 4), sizeof(got)))
				fail_msg("agent %u session %u: at %u tokens, "
					 "the context went on otherwise after "
					 "the crash",
					 k, i, len);
			close_session(fd, x->sid);
		}
	}
	assert_true(unsure <= NR_AGENTS);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * A tensor swapped out to host memory lies in the swap arena, which the
 * journal names in place ("swap-0" in the store): after a crash it comes
 * back byte for byte, swapped out or not, as does the tensor of the
 * session that pushed it out. Read back on a full device, its swap-in
 * waits for the journal to free what it pushes out, while the journal's
 * record names it by its host copy (it does not wait for the swap-in).
 */
static void test_crash_swapped(void **state)
{
	struct djd_store *st = djd_store_open();
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, 32 * MiB);
	uint8_t *big = malloc(32 * MiB), *filler = malloc(32 * MiB),
		*got = malloc(32 * MiB);
	struct djinn_session_resp r1, r2;
	uint64_t sid, fill_sid, hb, hf = 0;
	struct djd dd;
	int fd, adm, n;

	(void)state;
	assert_non_null(st);
	assert_non_null(big);
	assert_non_null(filler);
	assert_non_null(got);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, NULL, st), 0);
	fd = xconnect(dd.sock);
	adm = xconnect(dd.admin);
	sid = open_at(__LINE__, fd, "swapped", 0, 0, &r1);
	fill(big, 32 * MiB, 77);
	hb = create_data(fd, sid, &d, big, 32 * MiB);
	/* another session fills the device: the first one's tensor goes
	 * out to host memory */
	fill_sid = open_at(__LINE__, fd, "filler", 0, 0, &r2);
	fill(filler, 32 * MiB, 78);
	for (n = 0; n < 16 && admin_entry(adm, sid, NULL).swapped < 32 * MiB;
	     n++)
		hf = create_data(fd, fill_sid, &d, filler, 32 * MiB);
	assert_true(admin_entry(adm, sid, NULL).swapped >= 32 * MiB);
	assert_true(djd_store_has(st, "swap-0"));

	(void)crash(&dd);
	reconnect_all(&dd, &fd, &adm);
	attach(fd, sid, r1.token);
	attach(fd, fill_sid, r2.token);
	/* the device full again: reading the tensor swaps it in, which
	 * pushes others out, their memory freed only once the journal's
	 * next record is in, whose writing must not wait for that swap-in */
	for (n = 0; n < 3; n++)
		(void)create_data(fd, fill_sid, &d, filler, 32 * MiB);
	memset(got, 0, 32 * MiB);
	tensor_read(fd, sid, hb, 0, 32 * MiB, got);
	if (memcmp(got, big, 32 * MiB))
		fail_msg("the tensor swapped out changed over the crash");
	memset(got, 0, 32 * MiB);
	tensor_read(fd, fill_sid, hf, 0, 32 * MiB, got);
	if (memcmp(got, filler, 32 * MiB))
		fail_msg("the filler's last tensor changed over the crash");
	close_session(fd, sid);
	close_session(fd, fill_sid);
	close(adm);
	close(fd);
	free(big);
	free(filler);
	free(got);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

/*
 * Clients killed under load, with djinnd itself killed in between:
 * nothing leaks. NR_DOOMED clients, each a process of its own on a
 * session with a short lease (DOOMED_LEASE_MS), create and release
 * tensors as fast as they are answered (so memory is freed while the
 * journal runs, held for its next record) when djinnd is killed; then,
 * before the next djinnd starts, the clients are killed too: no one
 * comes back for their sessions. The next djinnd restores them, their
 * leases whole again, and with no heartbeat they expire and
 * are reaped, each one's tensors freed, while two sessions made beside
 * them, heartbeated, attach again whole. Once those are closed too, no
 * session is left and the device's memory is back where it was before
 * the first client came: neither the dead clients' tensors nor memory
 * held for a journal record stayed.
 */
#define NR_DOOMED 4
#define DOOMED_LEASE_MS 3000
#define DOOMED_LIVE 3 /* tensors each keeps, releasing the oldest */
#define DOOMED_ROUNDS 20 /* rounds of load before it says its session */

static pid_t doomed[NR_DOOMED];

/* What a doomed client tells the test: its session and token. */
struct doomed_id {
	uint64_t sid;
	uint8_t token[16];
};

/* Once djinnd is gone (or anything fails), a doomed client only waits
 * for its SIGKILL: it never exits of its own accord. */
static void doomed_wait(void)
{
	for (;;)
		pause();
}

/* A doomed client's tensor made, 8 to 20 KiB of its bytes: its handle,
 * or 0. */
static uint64_t doomed_make(int fd, uint64_t sid, unsigned int round)
{
	uint64_t len = 8192 + (round % 4) * 4096;
	struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, len);
	struct djinn_tensor_resp tr;
	uint8_t buf[8192 + 3 * 4096];
	struct dj_resp r;
	size_t plen;
	uint8_t *p;
	int ret;

	fill(buf, len, sid * 1000 + round);
	p = create_payload(&d, DJINN_SEG_DATA, NULL, buf, len, &plen);
	ret = dj_call(fd, DJINN_MSG_TENSOR_CREATE, sid, p, plen, &r);
	free(p);
	if (ret != 1)
		return 0;
	if (r.error || r.len != sizeof(tr)) {
		dj_resp_free(&r);
		return 0;
	}
	memcpy(&tr, r.data, sizeof(tr));
	dj_resp_free(&r);
	return tr.handle;
}

/*
 * Doomed client @i (a child process: it asserts nothing): opens a
 * session with a lease of DOOMED_LEASE_MS, then, round after round,
 * creates a tensor and releases the one made DOOMED_LIVE rounds before;
 * after DOOMED_ROUNDS rounds it writes its id and token to @out, and
 * goes on until djinnd stops answering.
 */
static void doomed_client(const char *sock, unsigned int i, int out)
{
	struct djinn_session_open o = {
		.tenant = "doomed",
		.priority = i % 8,
		.lease_ns = DOOMED_LEASE_MS * NSEC_PER_MSEC,
	};
	uint64_t h[DOOMED_LIVE] = { 0 };
	struct djinn_session_resp s;
	struct doomed_id id;
	struct dj_resp r;
	int fd = dj_connect(sock);

	if (fd < 0 ||
	    dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r) != 1)
		doomed_wait();
	if (r.error || r.len != sizeof(s)) {
		dj_resp_free(&r);
		doomed_wait();
	}
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	id.sid = s.session_id;
	memcpy(id.token, s.token, sizeof(id.token));
	for (unsigned int round = 0;; round++) {
		uint64_t *slot = &h[round % DOOMED_LIVE];

		if (*slot) {
			if (dj_call(fd, DJINN_MSG_TENSOR_RELEASE, id.sid, slot,
				    8, &r) != 1)
				doomed_wait();
			if (r.error) {
				dj_resp_free(&r);
				doomed_wait();
			}
			dj_resp_free(&r);
		}
		*slot = doomed_make(fd, id.sid, round);
		if (!*slot)
			doomed_wait();
		if (round == DOOMED_ROUNDS &&
		    write(out, &id, sizeof(id)) != sizeof(id))
			doomed_wait();
	}
}

/* SIGKILL doomed client @i and reap it: whether it died of that. */
static bool doomed_kill(unsigned int i)
{
	int status = 0;
	pid_t pid = doomed[i];

	doomed[i] = 0;
	if (pid <= 0 || kill(pid, SIGKILL) || waitpid(pid, &status, 0) != pid)
		return false;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* The teardown: no doomed client outlives the test, failed or not. */
static int doomed_teardown(void **state)
{
	(void)state;
	for (unsigned int i = 0; i < NR_DOOMED; i++)
		if (doomed[i] > 0)
			(void)doomed_kill(i);
	return 0;
}

/* How many sessions djinnd holds (ADMIN_SESSIONS, on @adm). */
static uint32_t admin_count(int adm)
{
	struct dj_resp r;
	uint32_t n[2];

	call_ok(adm, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, &r, -1);
	assert_true(r.len >= 8);
	memcpy(n, r.data, sizeof(n));
	dj_resp_free(&r);
	return n[0];
}

/* ADMIN_VMU on @adm: the (one) device's memory. */
static struct djinn_admin_vmu admin_vmu(int adm)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	call_ok(adm, DJINN_MSG_ADMIN_VMU, 0, NULL, 0, &r, sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

/* Why @b's free memory is not @a's (the stack's backing aside). */
static const char *free_diff(const struct djinn_admin_vmu *a,
			     const struct djinn_admin_vmu *b, char *why,
			     size_t len)
{
	snprintf(why, len,
		 "free %llu (stack %llu), was %llu (%llu): memory held "
		 "for a journal record",
		 (unsigned long long)b->free,
		 (unsigned long long)b->seg[2].used,
		 (unsigned long long)a->free,
		 (unsigned long long)a->seg[2].used);
	return why;
}

static void test_crash_clients_die(void **state)
{
	struct djd_store *st = djd_store_open();
	static struct held s[2];
	struct djinn_admin_session e[2];
	struct doomed_id ids[NR_DOOMED];
	struct djinn_admin_vmu base, v;
	struct djinn_admin_stats stats;
	struct dj_resp r;
	const char *why;
	char whybuf[256];
	int64_t deadline;
	uint32_t nr;
	int fd, adm, pipefd[2];
	struct djd dd;
	pid_t old;

	(void)state;
	assert_non_null(st);
	assert_int_equal(djd_start_store(&dd, "256M", LEASE_MS, NULL, st), 0);
	adm = xconnect(dd.admin);
	/* the device before any client: where its memory must come back */
	base = admin_vmu(adm);

	/* the doomed clients, each under load by the time it says its id */
	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	for (unsigned int i = 0; i < NR_DOOMED; i++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (!pid) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(pipefd[0]);
			close(adm);
			doomed_client(dd.sock, i, pipefd[1]);
			_exit(1);
		}
		doomed[i] = pid;
	}
	close(pipefd[1]);
	for (unsigned int i = 0; i < NR_DOOMED; i++) {
		struct pollfd p = { .fd = pipefd[0], .events = POLLIN };

		if (poll(&p, 1, DJ_TIMEOUT_MS) != 1 ||
		    read(pipefd[0], &ids[i], sizeof(ids[i])) != sizeof(ids[i]))
			fail_msg("doomed client %u of %u did not get going", i,
				 NR_DOOMED);
	}
	close(pipefd[0]);
	/* two sessions beside them, which come back (no text tensor:
	 * make_session() makes one for every fifth, and text stays
	 * cached, which would blur the memory's return) */
	fd = xconnect(dd.sock);
	for (unsigned int k = 0; k < 2; k++) {
		make_session(&s[k], fd, k + 1);
		e[k] = admin_entry(adm, s[k].sid, NULL);
	}
	/* every doomed session is there, none expired under the load */
	for (unsigned int i = 0; i < NR_DOOMED; i++)
		assert_true(admin_entry(adm, ids[i].sid, &nr).tensors > 0);
	assert_int_equal(nr, NR_DOOMED + 2);
	assert_true(journal_wait(st, dd.pid, true));

	/* djinnd killed while the clients work; then the clients, before
	 * the next djinnd starts: no one will come back for their sessions */
	old = crash_kill(&dd);
	for (unsigned int i = 0; i < NR_DOOMED; i++)
		if (!doomed_kill(i))
			fail_msg("doomed client %u did not die of its SIGKILL",
				 i);
	dd.pid = djd_spawn_next(&dd);
	assert_true(dd.pid > 0);

	/* ours attach again whole; the doomed ones were restored too */
	reconnect_all(&dd, &fd, &adm);
	for (unsigned int k = 0; k < 2; k++)
		check_attached(fd, adm, &s[k], &e[k]);
	/* with nothing renewing them, the doomed sessions expire (what was
	 * left of a DOOMED_LEASE_MS lease) and are reaped; ours, renewed
	 * every 50 ms, stay */
	deadline = dj_now_ms() + 5 * DOOMED_LEASE_MS + 10000;
	for (;;) {
		for (unsigned int k = 0; k < 2; k++) {
			call_ok(fd, DJINN_MSG_HEARTBEAT, s[k].sid, NULL, 0, &r,
				sizeof(struct djinn_session_resp));
			dj_resp_free(&r);
		}
		nr = admin_count(adm);
		if (nr == 2)
			break;
		if (dj_now_ms() > deadline)
			fail_msg("%u sessions %d ms after the restart, want 2 "
				 "(the doomed ones expired)",
				 nr, 5 * DOOMED_LEASE_MS + 10000);
		usleep(50000);
	}
	for (unsigned int i = 0; i < NR_DOOMED; i++)
		call_err(fd, DJINN_MSG_SESSION_ATTACH, ids[i].sid, ids[i].token,
			 16, -EPERM, "no session");
	call_ok(adm, DJINN_MSG_ADMIN_STATS, 0, NULL, 0, &r, sizeof(stats));
	memcpy(&stats, r.data, sizeof(stats));
	dj_resp_free(&r);
	assert_int_equal(stats.sessions_expired, NR_DOOMED);
	for (unsigned int k = 0; k < 2; k++) {
		(void)admin_entry(adm, s[k].sid, NULL);
		check_session(&s[k]);
	}

	/*
	 * Ours closed: no session, and the device's memory where it was
	 * before the first client. vmu_diff(): the data segment's bytes
	 * and regions, the text segment, what is committed but for the
	 * stack's backing (which may stay between graphs), and what is
	 * reserved. A region freed under the journal leaves "committed" at
	 * once but is held, out of "free", until the next record is in
	 * force (vmu_defer_free()): so "free" too, the stack's backing
	 * (seg[2]) taken out as vmu_diff() does, must come back. Both are
	 * waited for, not read once: the reaping, and the record that
	 * lets the memory go, come after the answers this test saw.
	 */
	for (unsigned int k = 0; k < 2; k++) {
		close_session(fd, s[k].sid);
		for (unsigned int j = 0; j < 3; j++)
			free(s[k].bytes[j]);
	}
	deadline = dj_now_ms() + 10000;
	for (;;) {
		nr = admin_count(adm);
		v = admin_vmu(adm);
		why = vmu_diff(&base, &v, whybuf, sizeof(whybuf));
		if (!why &&
		    v.free + v.seg[2].used != base.free + base.seg[2].used)
			why = free_diff(&base, &v, whybuf, sizeof(whybuf));
		if (!nr && !why)
			break;
		if (dj_now_ms() > deadline)
			fail_msg("10 s after the last close: %u sessions, %s",
				 nr, why ? why : "the VMU as it was");
		usleep(50000);
	}
	assert_true(journal_wait(st, dd.pid, true));
	assert_true(journal_wait(st, old, false));
	close(adm);
	close(fd);
	assert_int_equal(djd_stop(&dd, 20000), 0);
	djd_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_planned_restart, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_failed_successor, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_contexts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_lost, setup_fault,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_upload, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_upload_copied,
						setup_copied, teardown),
		cmocka_unit_test_setup_teardown(test_restart_paused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_self_restart, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_restart_delegated,
						setup_delegated, teardown),
		cmocka_unit_test_setup_teardown(test_self_restart_needs_handover,
						setup_plain, fx_teardown),
		cmocka_unit_test(test_store_restart),
		cmocka_unit_test(test_store_restart_refused),
		cmocka_unit_test_setup_teardown(test_dead_device, setup_fault,
						teardown),
		cmocka_unit_test(test_dead_device_store),
		cmocka_unit_test(test_crash_restart),
		cmocka_unit_test(test_crash_under_load),
		cmocka_unit_test(test_crash_contexts_under_load),
		cmocka_unit_test(test_crash_swapped),
		cmocka_unit_test_teardown(test_crash_clients_die,
					  doomed_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	/* the djinnds djinnd starts itself (ADMIN_RESTART, SIGUSR2) are
	 * this test's to reap when their parent is gone */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
