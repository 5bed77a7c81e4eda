// SPDX-License-Identifier: MIT
/*
 * libdjinn's model API against a real djinnd: a tiny GPT-2 written with
 * scripts/mkmodel.py into the daemon's model directory, opened, run and
 * read through libdjinn, and checked against the same requests spoken in
 * raw frames (tests/integration/daemon.h), against the admin socket's
 * model list, and against itself (a decode after a prefill equals a
 * fresh context prefilled with the prompt and the first tokens).
 * djinnd runs breakpoints, so an answer of -EOPNOTSUPP to break_layer
 * fails the breakpoint test.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "array_size.h"
#include "libdjinn_fx.h"

/* logits of 16 KiB: a range of them is much less */
#define WIDE_GPT2                                                  \
	"--arch gpt2 --layers 1 --embd 32 --heads 2 --vocab 4096 " \
	"--ctx 32 --seed 5"

struct fx {
	struct djd d;
	struct djinn_conn *conn;
	struct djinn_session *s;
};

static const int32_t prompt[4] = { 1, 2, 3, 4 };

static int fx_setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	if (djd_start_conn(&fx->d, "256M", 10000, NULL, "tiny-gpt2", TINY_GPT2,
			   &fx->conn))
		goto out_free;
	if (djd_make_model(&fx->d, "wide-gpt2", WIDE_GPT2) ||
	    djinn_session_open(fx->conn, NULL, &fx->s))
		goto out_kill;
	*state = fx;
	return 0;

out_kill:
	djinn_disconnect(fx->conn);
	djd_kill(&fx->d);
out_free:
	free(fx);
	return -1;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	int ret = djd_stop_conn(&fx->d, fx->conn, 10000);

	free(fx);
	return ret;
}

/* After a test that killed the daemon. */
static int fx_teardown_killed(void **state)
{
	struct fx *fx = *state;

	djd_kill_conn(&fx->d, fx->conn);
	free(fx);
	return 0;
}

static int argmax(const float *v, unsigned int n)
{
	int best = 0;

	for (unsigned int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = (int)i;
	return best;
}

/* ---------------------------------------------------------------------- */
/* Raw frames: the same requests without libdjinn */

/* Greedy tokens for @prompt[@np] then @n tokens, in raw frames on a
 * session of its own. */
static void raw_greedy(struct fx *fx, const int32_t *p, uint32_t np, uint32_t n,
		       int32_t *out)
{
	int fd = dj_connect(fx->d.sock);
	struct djinn_ctx_step *st;
	struct djinn_ctx_step_resp rr;
	struct dj_resp r;
	size_t len = sizeof(*st) + np * sizeof(int32_t);
	uint64_t sid, ctx = djd_raw_ctx(fd, "raw", 4, "tiny-gpt2", &sid);

	st = calloc(1, len);
	assert_non_null(st);
	st->ctx = ctx;
	st->nr_tokens = np;
	memcpy(st + 1, p, np * sizeof(int32_t));
	r = djd_raw_ok(fd, DJINN_MSG_CTX_PREFILL, sid, st, len);
	dj_resp_free(&r);
	memset(st, 0, sizeof(*st));
	st->ctx = ctx;
	st->nr_tokens = n;
	r = djd_raw_ok(fd, DJINN_MSG_CTX_DECODE, sid, st, sizeof(*st));
	memcpy(&rr, r.data, sizeof(rr));
	assert_int_equal(rr.nr_tokens, n);
	memcpy(out, r.data + sizeof(rr), n * sizeof(int32_t));
	dj_resp_free(&r);
	free(st);
	r = djd_raw_ok(fd, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0);
	dj_resp_free(&r);
	close(fd);
}

/* Holders of @name on the admin socket, -1 when it is not loaded. */
static int holders(struct fx *fx, const char *name)
{
	int fd = dj_connect(fx->d.admin), n = -1;
	const struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t count;

	assert_true(fd >= 0);
	r = djd_raw_ok(fd, DJINN_MSG_ADMIN_MODELS, 0, NULL, 0);
	memcpy(&count, r.data, sizeof(count));
	e = (const void *)(r.data + 8);
	for (uint32_t i = 0; i < count; i++)
		if (!strcmp(e[i].name, name))
			n = (int)e[i].holders;
	dj_resp_free(&r);
	close(fd);
	return n;
}

/* ---------------------------------------------------------------------- */

/* Generation through libdjinn is what the raw protocol gives, and what a
 * fresh context prefilled with the prompt and the first tokens gives; a
 * second session shares the model. */
static void test_generate(void **state)
{
	struct fx *fx = *state;
	struct djinn_model *m, *m2;
	struct djinn_session *s2;
	struct djinn_model_info mi;
	struct djinn_ctx *c, *c2;
	struct djinn_step st;
	struct djinn_step_opts lo = { .logits = true };
	int32_t t[6], raw[6], all[10], u[1];
	float logits[256];

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_model_info(m, &mi), 0);
	assert_string_equal(mi.name, "tiny-gpt2");
	assert_int_equal(mi.arch, DJINN_ARCH_GPT2);
	assert_int_equal(mi.vocab, 256);
	assert_int_equal(mi.n_layer, 2);
	assert_int_equal(mi.hidden, 64);
	assert_int_equal(mi.max_tokens, 64);
	assert_true(mi.bytes > 0);
	/* wholly on the device: every layer resident, no ring */
	assert_int_equal(mi.resident, 2);
	assert_int_equal(mi.ring, 0);
	assert_int_equal(mi.weights, mi.bytes);
	assert_int_equal(holders(fx, "tiny-gpt2"), 1);

	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_len(c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, &lo, &st), 0);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_int_equal(st.len, 4);
	assert_null(st.hidden);
	assert_non_null(st.logits);
	assert_int_equal(djinn_result_desc(st.logits)->ndim, 2);
	assert_int_equal(djinn_result_desc(st.logits)->dims[1], 256);
	assert_int_equal(
		djinn_result_read(st.logits, 0, sizeof(logits), logits), 0);
	assert_int_equal(djinn_ctx_decode(c, 6, NULL, t, NULL, &st), 6);
	assert_int_equal(st.nr_tokens, 6);
	assert_int_equal(st.len, 10);
	assert_int_equal(djinn_ctx_len(c), 10);
	assert_null(st.logits);
	/* greedy: the first token is the prefill's argmax */
	assert_int_equal(t[0], argmax(logits, 256));

	/* The raw protocol gives the same tokens. */
	raw_greedy(fx, prompt, 4, 6, raw);
	assert_memory_equal(t, raw, sizeof(t));

	/* KV cache reuse: prompt + 5 tokens from scratch, in another
	 * session, then one more, is the sixth. */
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s2), 0);
	assert_int_equal(djinn_model_open(s2, "tiny-gpt2", &m2), 0);
	assert_int_equal(holders(fx, "tiny-gpt2"), 2);
	assert_int_equal(djinn_ctx_new(m2, 16, &c2), 0);
	memcpy(all, prompt, sizeof(prompt));
	memcpy(all + 4, t, 5 * sizeof(int32_t));
	assert_int_equal(djinn_ctx_prefill(c2, all, 9, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c2, 1, NULL, u, NULL, NULL), 1);
	assert_int_equal(u[0], t[5]);

	/* A model with contexts stays open. */
	assert_int_equal(djinn_model_close(m), -EBUSY);
	assert_true(strstr(djinn_last_error(), "contexts") != NULL);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(holders(fx, "tiny-gpt2"), 1);
	/* Closing the session lets go of its model and context. */
	assert_int_equal(djinn_session_close(s2), 0);
	assert_int_equal(holders(fx, "tiny-gpt2"), 0);
}

/* The logits are a stub: only the range read crosses the wire. */
static void test_logits_lazy(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn_stats a, b;
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_graph_builder *g;
	struct djinn_request *req;
	struct djinn_model *m;
	struct djinn_ctx *c;
	struct djinn_step st;
	float part[4], *all, *mapped;
	int64_t best;
	void *addr;

	assert_int_equal(djinn_model_open(fx->s, "wide-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_conn_stats(fx->conn, &a), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, &lo, &st), 0);
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	/* the answer names the logits; their 16 KiB stay on the daemon */
	assert_true(b.bytes_received - a.bytes_received < 512);
	assert_int_equal(djinn_result_desc(st.logits)->dims[1], 4096);

	a = b;
	assert_int_equal(
		djinn_result_read(st.logits, 1000 * 4, sizeof(part), part), 0);
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	/* one TENSOR_READ of 16 bytes: 40 + 16 back (a heartbeat may add
	 * 80 more) */
	assert_true(b.bytes_received - a.bytes_received >= 40 + 16);
	assert_true(b.bytes_received - a.bytes_received < 40 + 16 + 200);

	all = malloc(4096 * sizeof(float));
	assert_non_null(all);
	assert_int_equal(djinn_result_read(st.logits, 0, 4096 * 4, all), 0);
	assert_memory_equal(all + 1000, part, sizeof(part));
	/* Mapped: the same bytes. */
	assert_int_equal(djinn_result_map(st.logits, &addr), 0);
	mapped = addr;
	assert_memory_equal(mapped, all, 4096 * sizeof(float));
	assert_int_equal(djinn_result_unmap(st.logits), 0);

	/* A graph takes the stub as an input: argmax on the daemon. */
	assert_int_equal(djinn_graph_new(fx->s, &g), 0);
	assert_true(djinn_graph_output(
			    g, djinn_op_argmax(g, djinn_graph_input_result(
							  g, st.logits))) >= 0);
	assert_int_equal(djinn_submit(g, &req), 0);
	assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), 0);
	assert_int_equal(djinn_result_read(djinn_request_results(req, 0), 0,
					   sizeof(best), &best),
			 0);
	assert_int_equal(best, argmax(all, 4096));
	djinn_request_free(req);
	djinn_graph_free(g);

	/* Released: reading it is -ENOENT. */
	assert_int_equal(djinn_result_release(st.logits), 0);
	assert_int_equal(djinn_result_read(st.logits, 0, 4, part), -ENOENT);
	/* The next step's logits are new ones; the earlier ones stay
	 * readable until the context is reset or freed. */
	{
		struct djinn_step first;
		int32_t tok[1];

		assert_int_equal(djinn_ctx_prefill(c, prompt, 1, &lo, &first),
				 0);
		assert_int_equal(djinn_ctx_decode(c, 1, NULL, tok, &lo, &st),
				 1);
		assert_non_null(st.logits);
		assert_true(st.logits != first.logits);
		assert_int_equal(
			djinn_result_read(first.logits, 0, 4096 * 4, all), 0);
		/* greedy: the token is the argmax of the logits before it */
		assert_int_equal(tok[0], argmax(all, 4096));
		assert_int_equal(djinn_result_read(st.logits, 0, 4, part), 0);
		assert_int_equal(djinn_ctx_reset(c), 0);
		assert_int_equal(djinn_ctx_len(c), 0);
	}
	free(all);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/* A fork goes on as its parent; a reset empties the cache. */
static void test_fork_reset(void **state)
{
	struct fx *fx = *state;
	const struct djinn_sampling sp = {
		.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7
	};
	struct djinn_model *m;
	struct djinn_ctx *c, *f;
	int32_t t[4], a[3], b[3], u[1];

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 32, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, t, NULL, NULL), 4);
	assert_int_equal(djinn_ctx_fork(c, &f), 0);
	assert_int_equal(djinn_ctx_len(f), 8);
	assert_int_equal(djinn_ctx_decode(c, 3, &sp, a, NULL, NULL), 3);
	assert_int_equal(djinn_ctx_decode(f, 3, &sp, b, NULL, NULL), 3);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(djinn_ctx_len(f), 11);

	assert_int_equal(djinn_ctx_reset(f), 0);
	assert_int_equal(djinn_ctx_len(f), 0);
	assert_int_equal(djinn_ctx_prefill(f, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(f, 1, NULL, u, NULL, NULL), 1);
	assert_int_equal(u[0], t[0]);
	assert_int_equal(djinn_ctx_free(f), 0);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/*
 * A truncated context goes on from where it was cut as it went on
 * before: the rows it keeps are the same; a cut past its end is refused
 * and changes nothing; until its next step it has no logits to decode
 * from.
 */
static void test_truncate(void **state)
{
	struct fx *fx = *state;
	struct djinn_model *m;
	struct djinn_ctx *c;
	int32_t t[6], u[4], v[1];

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 32, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 6, NULL, t, NULL, NULL), 6);
	assert_int_equal(djinn_ctx_len(c), 10);

	assert_int_equal(djinn_ctx_truncate(c, 11), -EINVAL);
	assert_non_null(strstr(djinn_last_error(), "the context holds 10"));
	assert_int_equal(djinn_ctx_len(c), 10);

	/* keep the prompt and t[0]: run t[1] again, then t[2..] follow */
	assert_int_equal(djinn_ctx_truncate(c, 5), 0);
	assert_int_equal(djinn_ctx_len(c), 5);
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, v, NULL, NULL), -EINVAL);
	assert_int_equal(djinn_ctx_prefill(c, &t[1], 1, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, u, NULL, NULL), 4);
	assert_memory_equal(u, &t[2], sizeof(u));
	assert_int_equal(djinn_ctx_len(c), 10);

	assert_int_equal(djinn_ctx_truncate(c, 0), 0);
	assert_int_equal(djinn_ctx_len(c), 0);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/* Refused with a precise errno, and nothing changes. */
static void test_errors(void **state)
{
	struct fx *fx = *state;
	const int32_t bad[2] = { 5, 256 }, neg[1] = { -1 };
	const struct djinn_sampling hot = { .temperature = -1.0f };
	struct djinn_step_opts brk = { .break_layer = DJINN_BREAK_AFTER(2) };
	struct djinn_model *m;
	struct djinn_ctx *c;
	struct djinn_step st;
	int32_t t[8];

	assert_int_equal(djinn_model_open(fx->s, "no-such-model", &m), -ENOENT);
	assert_true(strlen(djinn_last_error()) > 0);
	assert_int_equal(djinn_model_open(fx->s, "../etc", &m), -EINVAL);
	assert_int_equal(djinn_model_open(fx->s, "", &m), -EINVAL);
	assert_int_equal(holders(fx, "no-such-model"), -1);

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 65, &c), -EINVAL);
	assert_int_equal(djinn_ctx_new(m, 8, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_prefill(c, bad, 2, NULL, NULL), -EINVAL);
	assert_true(strstr(djinn_last_error(), "token 256 at 1") != NULL);
	assert_int_equal(djinn_ctx_prefill(c, neg, 1, NULL, NULL), -EINVAL);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 0, NULL, NULL), -EINVAL);
	assert_int_equal(djinn_ctx_decode(c, 0, NULL, t, NULL, NULL), -EINVAL);
	assert_int_equal(djinn_ctx_decode(c, 1, &hot, t, NULL, NULL), -EINVAL);
	/* a breakpoint past the last layer, or with nowhere to say so */
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, t, &brk, &st), -EINVAL);
	brk.break_layer = DJINN_BREAK_AFTER(0);
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, t, &brk, NULL), -EINVAL);
	/* not paused */
	assert_int_equal(djinn_ctx_resume(c, NULL, &st), -EBUSY);
	/* past max_tokens: 4 + 5 > 8 */
	assert_int_equal(djinn_ctx_decode(c, 5, NULL, t, NULL, NULL), -ENOSPC);
	assert_int_equal(djinn_ctx_len(c), 4);
	/* and it still works */
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, t, NULL, &st), 4);
	assert_int_equal(st.len, 8);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/* Text segment bytes in use on the daemon's one device. */
static uint64_t text_used(struct fx *fx)
{
	int fd = dj_connect(fx->d.admin);
	struct djinn_admin_vmu v;
	struct dj_resp r;

	assert_true(fd >= 0);
	r = djd_raw_ok(fd, DJINN_MSG_ADMIN_VMU, 0, NULL, 0);
	assert_true(r.len >= sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	close(fd);
	return v.seg[0].used;
}

/* Rewrite key @key of model @name's config.json to the JSON @value
 * (python3, as mkmodel.py). */
static void set_config(struct fx *fx, const char *name, const char *key,
		       const char *value)
{
	char cmd[1024];

	snprintf(
		cmd, sizeof(cmd),
		"python3 -c 'import json,sys; p=sys.argv[1]; "
		"c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); "
		"json.dump(c,open(p,\"w\"))' %s/models/%s/config.json '%s' "
		"'%s'",
		fx->d.dir, name, key, value);
	assert_int_equal(system(cmd), 0);
}

/*
 * Configs djinn does not implement, and checkpoints that contradict
 * their config, are refused at open with the file, the key and the
 * reason: nothing is loaded or charged, and a session using another
 * model goes on as if nothing happened. A sliding window bounds the
 * context, by name.
 */
static void test_bad_models(void **state)
{
	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{ "rope_parameters",
		  "{\"rope_type\": \"longrope\", \"rope_theta\": 1e4}",
		  "\"rope_parameters.rope_type\" 'longrope' is not supported" },
		{ "rope_parameters",
		  "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}",
		  "\"rope_parameters.partial_rotary_factor\" is not 1" },
		{ "hidden_act", "\"gelu\"", "\"hidden_act\" is not silu" },
		{ "dtype", "\"bfloat16\"",
		  "config.json's \"dtype\" is bfloat16, the weights are float32" },
		{ "intermediate_size", "100",
		  "tensor 'model.layers.0.mlp.gate_proj.weight' has shape (96, 32), "
		  "the config says (100, 32)" },
	};
	struct fx *fx = *state;
	int32_t want[6], got[6];
	struct djinn_model *m, *ok;
	struct djinn_ctx *c;
	uint64_t text;
	char name[32];

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &ok), 0);
	assert_int_equal(djinn_ctx_new(ok, 16, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 3, NULL, want, NULL, NULL), 3);
	text = text_used(fx);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		snprintf(name, sizeof(name), "bad-%zu", i);
		assert_int_equal(
			djd_make_model(&fx->d, name,
				       "--arch llama --layers 1 "
				       "--embd 32 --heads 2 --inner 96 "
				       "--vocab 64 --ctx 32"),
			0);
		set_config(fx, name, bad[i].key, bad[i].value);
		assert_int_equal(djinn_model_open(fx->s, name, &m), -EINVAL);
		if (!strstr(djinn_last_error(), bad[i].want))
			fail_msg("%s: '%s' lacks '%s'", name,
				 djinn_last_error(), bad[i].want);
		assert_int_equal(holders(fx, name), -1);
		assert_int_equal(text_used(fx), text);
	}
	/* the other model's context goes on where it was */
	assert_int_equal(djinn_ctx_decode(c, 3, NULL, want + 3, NULL, NULL), 3);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_ctx_new(ok, 16, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 6, NULL, got, NULL, NULL), 6);
	assert_memory_equal(got, want, sizeof(got));
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(ok), 0);

	/* a sliding window of 8: contexts up to it, longer ones refused */
	assert_int_equal(djd_make_model(&fx->d, "window8",
					"--arch mistral --layers 1 --embd 32 "
					"--heads 2 --vocab 64 --ctx 32 "
					"--sliding-window 8"),
			 0);
	assert_int_equal(djinn_model_open(fx->s, "window8", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 9, &c), -EINVAL);
	assert_non_null(strstr(djinn_last_error(), "sliding_window of 8"));
	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, got, NULL, NULL), 4);
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, got, NULL, NULL),
			 -ENOSPC);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/* A dead daemon fails every call at once. */
static void test_dead_daemon(void **state)
{
	struct fx *fx = *state;
	struct djinn_model *m;
	struct djinn_ctx *c, *f;
	int32_t t[4];
	int64_t t0;
	int ret;

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	djd_kill(&fx->d);
	t0 = dj_now_ms();
	ret = djinn_ctx_decode(c, 4, NULL, t, NULL, NULL);
	assert_true(ret == -ECONNRESET || ret == -EPIPE);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL),
			 -ECONNRESET);
	assert_int_equal(djinn_ctx_fork(c, &f), -ECONNRESET);
	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), -ECONNRESET);
	assert_true(dj_now_ms() - t0 < 2000);
	/* freed on this side whatever the daemon cannot say */
	assert_int_equal(djinn_ctx_free(c), -ECONNRESET);
	assert_int_equal(djinn_model_close(m), -ECONNRESET);
}

/*
 * Breakpoints: pausing after a layer and resuming unchanged gives the
 * tokens of a run without them; the hidden state is (T, hidden).
 */
static void test_breakpoints(void **state)
{
	struct fx *fx = *state;
	struct djinn_step_opts brk = { .break_layer = DJINN_BREAK_AFTER(1) };
	struct djinn_model *m;
	struct djinn_ctx *c, *ref;
	struct djinn_step st;
	int32_t want[4], got[4];
	unsigned int pauses = 0;
	float h[64];
	int ret;

	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &m), 0);
	assert_int_equal(djinn_ctx_new(m, 0, &ref), 0);
	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(ref, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(ref, 4, NULL, want, NULL, NULL), 4);

	ret = djinn_ctx_prefill(c, prompt, 4, &brk, &st);
	if (ret)
		print_message("breakpoint prefill: %d (%s)\n", ret,
			      djinn_last_error());
	assert_int_equal(ret, 0);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	assert_int_equal(st.layer, 1);
	assert_non_null(st.hidden);
	assert_int_equal(djinn_result_desc(st.hidden)->dims[0], 4);
	assert_int_equal(djinn_result_desc(st.hidden)->dims[1], 64);
	/* paused: only resume, reset and free */
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, got, NULL, NULL), -EBUSY);
	assert_int_equal(djinn_ctx_resume(c, NULL, &st), 0);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_int_equal(st.len, 4);

	ret = djinn_ctx_decode(c, 4, NULL, got, &brk, &st);
	while (ret >= 0 && st.state == DJINN_CTX_PAUSED) {
		pauses++;
		assert_int_equal(st.layer, 1);
		assert_int_equal(djinn_result_desc(st.hidden)->dims[0], 1);
		assert_int_equal(djinn_result_read(st.hidden, 0, sizeof(h), h),
				 0);
		assert_int_equal((uint32_t)ret, st.nr_tokens);
		ret = djinn_ctx_resume(c, NULL, &st);
	}
	assert_int_equal(ret, 4);
	assert_int_equal(pauses, 4);
	assert_memory_equal(got, want, sizeof(want));

	/* Steering: the hidden state read and written back unchanged gives
	 * the logits of a run without the breakpoint; zeros change them; a
	 * replacement of another shape is refused and it stays paused. */
	{
		struct djinn_step_opts lb = {
			.logits = true, .break_layer = DJINN_BREAK_AFTER(0)
		};
		struct djinn_step_opts lo = { .logits = true };
		struct djinn_tensor_desc d, bad = { .dtype = DJINN_DTYPE_F32,
						    .ndim = 2,
						    .dims = { 3, 64 } };
		struct djinn_tensor *same, *zeros, *wrong;
		static float l0[256], l1[256], hs[4 * 64];

		assert_int_equal(djinn_ctx_reset(ref), 0);
		assert_int_equal(djinn_ctx_prefill(ref, prompt, 4, &lo, &st),
				 0);
		assert_int_equal(
			djinn_result_read(st.logits, 0, sizeof(l0), l0), 0);

		assert_int_equal(djinn_ctx_reset(c), 0);
		assert_int_equal(djinn_ctx_prefill(c, prompt, 4, &lb, &st), 0);
		assert_int_equal(st.state, DJINN_CTX_PAUSED);
		d = *djinn_result_desc(st.hidden);
		assert_int_equal(d.dims[0], 4);
		assert_int_equal(
			djinn_result_read(st.hidden, 0, sizeof(hs), hs), 0);
		assert_int_equal(djinn_tensor_upload(fx->s, &d, hs,
						     DJINN_SEG_DATA, &same),
				 0);
		assert_int_equal(djinn_tensor_upload(fx->s, &bad, NULL,
						     DJINN_SEG_DATA, &wrong),
				 0);
		assert_int_equal(djinn_ctx_resume(c, wrong, &st), -EINVAL);
		assert_int_equal(djinn_ctx_resume(c, same, &st), 0);
		assert_int_equal(st.state, DJINN_CTX_DONE);
		assert_non_null(st.logits);
		assert_int_equal(
			djinn_result_read(st.logits, 0, sizeof(l1), l1), 0);
		assert_memory_equal(l0, l1, sizeof(l0));

		assert_int_equal(djinn_ctx_reset(c), 0);
		assert_int_equal(djinn_ctx_prefill(c, prompt, 4, &lb, &st), 0);
		assert_int_equal(djinn_tensor_upload(fx->s, &d, NULL,
						     DJINN_SEG_DATA, &zeros),
				 0);
		assert_int_equal(djinn_ctx_resume(c, zeros, &st), 0);
		assert_int_equal(
			djinn_result_read(st.logits, 0, sizeof(l1), l1), 0);
		assert_true(memcmp(l0, l1, sizeof(l0)) != 0);
		djinn_tensor_release(same);
		djinn_tensor_release(zeros);
		djinn_tensor_release(wrong);
	}
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_ctx_free(ref), 0);
	assert_int_equal(djinn_model_close(m), 0);
}

/*
 * @dir uploaded again, from a new session *@s2: the daemon has every
 * file, so only fingerprints go (under 4 KiB), and the model is @mi's,
 * held twice now. Returns the model, *@mi2 its info.
 */
static struct djinn_model *upload_again(struct fx *fx, const char *dir,
					const struct djinn_model_info *mi,
					struct djinn_session **s2,
					struct djinn_model_info *mi2)
{
	struct djinn_conn_stats a, b;
	struct djinn_model *m2;

	assert_int_equal(djinn_session_open(fx->conn, NULL, s2), 0);
	assert_int_equal(djinn_conn_stats(fx->conn, &a), 0);
	assert_int_equal(djinn_model_upload(*s2, dir, &m2), 0);
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	assert_true(b.bytes_sent - a.bytes_sent < 4096);
	assert_int_equal(djinn_model_info(m2, mi2), 0);
	assert_string_equal(mi2->name, mi->name);
	assert_int_equal(holders(fx, mi->name), 2);
	return m2;
}

/* Uploaded models: the files cross the wire once; a second client with
 * the same files sends only their fingerprints, and generates what the
 * directory model does. */
static void test_upload(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn_stats a, b;
	struct djinn_model_info mi, mi2;
	struct djinn_model *m, *m2, *md;
	struct djinn_session *s2;
	struct djinn_ctx *c;
	char dir[sizeof(fx->d.dir) + 32];
	int32_t t[4], want[4];
	int ret;

	snprintf(dir, sizeof(dir), "%s/models/tiny-gpt2", fx->d.dir);
	assert_int_equal(djinn_conn_stats(fx->conn, &a), 0);
	ret = djinn_model_upload(fx->s, dir, &m);
	if (ret)
		fail_msg("upload: %d: %s", ret, djinn_last_error());
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	assert_int_equal(djinn_model_info(m, &mi), 0);
	assert_true(!strncmp(mi.name, "upload-", 7) && strlen(mi.name) == 23);
	assert_int_equal(mi.resident, mi.n_layer);
	assert_int_equal(mi.ring, 0);
	/* The weights went up once (config.json and the file). */
	assert_true(b.bytes_sent - a.bytes_sent > 200000);
	assert_int_equal(holders(fx, mi.name), 1);

	/* The same files from another session: fingerprints only. */
	m2 = upload_again(fx, dir, &mi, &s2, &mi2);
	assert_memory_equal(mi2.fp, mi.fp, sizeof(mi.fp));

	/* It is the directory model's weights: the same tokens. */
	assert_int_equal(djinn_model_open(fx->s, "tiny-gpt2", &md), 0);
	assert_int_equal(djinn_model_info(md, &mi2), 0);
	assert_memory_equal(mi2.fp, mi.fp, sizeof(mi.fp));
	assert_int_equal(djinn_ctx_new(md, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, want, NULL, NULL), 4);
	assert_int_equal(djinn_ctx_free(c), 0);
	assert_int_equal(djinn_ctx_new(m2, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, t, NULL, NULL), 4);
	assert_memory_equal(t, want, sizeof(t));
	assert_int_equal(djinn_ctx_free(c), 0);

	/* A directory without the files, or with no config.json. */
	snprintf(dir, sizeof(dir), "%s/models", fx->d.dir);
	assert_int_equal(djinn_model_upload(fx->s, dir, &m2), -ENOENT);
	assert_int_equal(djinn_model_upload(fx->s, "/nonexistent", &m2),
			 -ENOENT);
	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(djinn_model_close(md), 0);
	assert_int_equal(djinn_session_close(s2), 0);
	assert_int_equal(holders(fx, mi.name), 0);
}

/* ---------------------------------------------------------------------- */
/* Sharded uploads */

/* Greedy tokens of @m after the prompt, in a context of its own. */
static void greedy(struct djinn_model *m, int32_t out[6])
{
	struct djinn_ctx *c;

	assert_int_equal(djinn_ctx_new(m, 0, &c), 0);
	assert_int_equal(djinn_ctx_prefill(c, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_ctx_decode(c, 6, NULL, out, NULL, NULL), 6);
	assert_int_equal(djinn_ctx_free(c), 0);
}

/* Models the admin socket lists. */
static uint32_t nr_models(struct fx *fx)
{
	int fd = dj_connect(fx->d.admin);
	struct dj_resp r;
	uint32_t count;

	assert_true(fd >= 0);
	r = djd_raw_ok(fd, DJINN_MSG_ADMIN_MODELS, 0, NULL, 0);
	memcpy(&count, r.data, sizeof(count));
	dj_resp_free(&r);
	close(fd);
	return count;
}

/* DIR/@name's bytes (malloc'd, NUL-terminated), their number in *@len. */
static char *file_read(const char *dir, const char *name, size_t *len)
{
	char path[256];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void file_write(const char *dir, const char *name, const char *buf,
		       size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* Index text @ix with @tensor's shard made @shard (malloc'd). */
static char *index_move(const char *ix, const char *tensor, const char *shard)
{
	char key[128], *out;
	const char *k, *v0, *v1;

	snprintf(key, sizeof(key), "\"%s\"", tensor);
	k = strstr(ix, key);
	assert_non_null(k);
	v0 = strchr(k + strlen(key), '"'); /* the shard's quotes */
	assert_non_null(v0);
	v1 = strchr(v0 + 1, '"');
	assert_non_null(v1);
	out = malloc(strlen(ix) + strlen(shard) + 1);
	assert_non_null(out);
	sprintf(out, "%.*s\"%s%s", (int)(v0 - ix), ix, shard, v1);
	return out;
}

#define INDEX "model.safetensors.index.json"

/* Upload @copy with its index @ix changed to put h.0.attn.c_attn.bias in
 * @shard. */
static int upload_moved(struct djinn_session *s, const char *copy,
			const char *ix, const char *shard,
			struct djinn_model **m)
{
	char *bad = index_move(ix, "h.0.attn.c_attn.bias", shard);

	file_write(copy, INDEX, bad, strlen(bad));
	free(bad);
	return djinn_model_upload(s, copy, m);
}

/*
 * A sharded checkpoint (model.safetensors.index.json and three shards)
 * uploaded: the index and the shards it names go up, each found by
 * fingerprint first, and the model generates what the same checkpoint
 * opened by name does. A second upload sends no shard again, whether of
 * the same model or of another config.json over the same shards. An
 * index naming a missing shard, or putting a tensor in a shard that does
 * not hold it, is refused with its message, nothing is loaded, and the
 * daemon serves another session afterwards.
 */
static void test_upload_sharded(void **state)
{
	struct fx *fx = *state;
	struct djinn_conn_stats a, b;
	struct djinn_model_info mi, mi2, mid;
	struct djinn_model *m, *m2, *md;
	struct djinn_session *s2;
	char dir[sizeof(fx->d.dir) + 32], copy[sizeof(fx->d.dir) + 32];
	char cmd[3 * sizeof(copy)], *ix, *cfg;
	int32_t t[6], want[6];
	uint32_t models;
	size_t len, ixlen;
	int ret;

	assert_int_equal(djd_make_model(&fx->d, "tiny-sharded",
					TINY_GPT2 " --shards 3"),
			 0);
	snprintf(dir, sizeof(dir), "%s/models/tiny-sharded", fx->d.dir);
	assert_int_equal(djinn_model_open(fx->s, "tiny-sharded", &md), 0);
	assert_int_equal(djinn_model_info(md, &mid), 0);
	greedy(md, want);

	/* All three shards go up, once: 482304 bytes of tensors. */
	assert_int_equal(djinn_conn_stats(fx->conn, &a), 0);
	ret = djinn_model_upload(fx->s, dir, &m);
	if (ret)
		fail_msg("upload: %d: %s", ret, djinn_last_error());
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	assert_true(b.bytes_sent - a.bytes_sent > 482304);
	assert_true(b.bytes_sent - a.bytes_sent < 482304 + 16384);
	assert_int_equal(djinn_model_info(m, &mi), 0);
	assert_true(!strncmp(mi.name, "upload-", 7) && strlen(mi.name) == 23);
	assert_int_equal(holders(fx, mi.name), 1);
	/* the directory's weights, and its tokens */
	assert_memory_equal(mi.fp, mid.fp, sizeof(mi.fp));
	greedy(m, t);
	assert_memory_equal(t, want, sizeof(t));

	/* The same upload from another session: fingerprints only. */
	m2 = upload_again(fx, dir, &mi, &s2, &mi2);
	assert_int_equal(djinn_model_close(m2), 0);

	/* Another config.json over the same index and shards: a model of
	 * its own, and the shards are found by fingerprint, not sent. */
	snprintf(copy, sizeof(copy), "%s/sharded-copy", fx->d.dir);
	snprintf(cmd, sizeof(cmd), "cp -r %s %s", dir, copy);
	assert_int_equal(system(cmd), 0);
	cfg = file_read(copy, "config.json", &len);
	cfg[len] = '\n'; /* over its NUL: one more byte */
	file_write(copy, "config.json", cfg, len + 1);
	free(cfg);
	assert_int_equal(djinn_conn_stats(fx->conn, &a), 0);
	ret = djinn_model_upload(s2, copy, &m2);
	if (ret)
		fail_msg("upload: %d: %s", ret, djinn_last_error());
	assert_int_equal(djinn_conn_stats(fx->conn, &b), 0);
	assert_true(b.bytes_sent - a.bytes_sent < 16384);
	assert_int_equal(djinn_model_info(m2, &mi2), 0);
	assert_string_not_equal(mi2.name, mi.name);
	assert_memory_equal(mi2.fp, mi.fp, sizeof(mi.fp));
	assert_int_equal(djinn_model_close(m2), 0);

	/* An index naming a shard the directory lacks: the client refuses
	 * it, naming the index and the shard. */
	ix = file_read(copy, INDEX, &ixlen);
	assert_int_equal(upload_moved(s2, copy, ix,
				      "model-00004-of-00004.safetensors", &m2),
			 -ENOENT);
	assert_non_null(strstr(djinn_last_error(),
			       INDEX ": shard 'model-00004-of-00004."
				     "safetensors': No such file"));
	/* JSON escapes are read as the daemon reads them */
	ret = upload_moved(s2, copy, ix,
			   "model-00001-of-00003\\u002esafetensors", &m2);
	if (ret)
		fail_msg("upload: %d: %s", ret, djinn_last_error());
	assert_int_equal(djinn_model_info(m2, &mi2), 0);
	assert_memory_equal(mi2.fp, mi.fp, sizeof(mi.fp));
	assert_int_equal(djinn_model_close(m2), 0);
	assert_int_equal(upload_moved(s2, copy, ix,
				      "\\u002e\\u002e/x.safetensors", &m2),
			 -EINVAL);
	assert_non_null(strstr(djinn_last_error(),
			       "shard '../x.safetensors' is not a plain"));
	/* not JSON */
	file_write(copy, INDEX, ix, ixlen / 2);
	assert_int_equal(djinn_model_upload(s2, copy, &m2), -EINVAL);
	assert_non_null(strstr(djinn_last_error(), INDEX ": line "));
	/* a shard name that leaves the directory */
	assert_int_equal(
		upload_moved(s2, copy, ix,
			     "../tiny-sharded/model-00001-of-00003.safetensors",
			     &m2),
		-EINVAL);
	assert_non_null(strstr(djinn_last_error(),
			       "tensor 'h.0.attn.c_attn.bias': shard "
			       "'../tiny-sharded/model-00001-of-00003."
			       "safetensors' is not a plain"));

	/* A shard holding a tensor the index puts in another: the daemon
	 * refuses it with the index's check, and loads nothing. */
	models = nr_models(fx);
	assert_int_equal(upload_moved(s2, copy, ix,
				      "model-00002-of-00003.safetensors", &m2),
			 -EINVAL);
	assert_non_null(strstr(djinn_last_error(),
			       INDEX ": tensor 'h.0.attn.c_attn.bias': not in "
				     "shard model-00002-of-00003.safetensors"));
	assert_int_equal(nr_models(fx), models);
	free(ix);

	/* The daemon goes on: another session opens and generates. */
	assert_int_equal(djinn_session_close(s2), 0);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s2), 0);
	assert_int_equal(djinn_model_upload(s2, dir, &m2), 0);
	greedy(m2, t);
	assert_memory_equal(t, want, sizeof(t));
	assert_int_equal(djinn_session_close(s2), 0);

	/* Raw frames: an unknown flag, and an index with no shard. */
	{
		int fd = dj_connect(fx->d.sock);
		struct djinn_session_open so = { .tenant = "raw" };
		struct djinn_model_upload u = { .nr_files = 1,
						.flags = 1u << 5 };
		uint8_t rq[sizeof(u) + sizeof(struct djinn_model_file)] = { 0 };
		struct djinn_session_resp sr;
		struct dj_resp r;

		assert_true(fd >= 0);
		r = djd_raw_ok(fd, DJINN_MSG_HELLO, 0, NULL, 0);
		dj_resp_free(&r);
		r = djd_raw_ok(fd, DJINN_MSG_SESSION_OPEN, 0, &so, sizeof(so));
		memcpy(&sr, r.data, sizeof(sr));
		dj_resp_free(&r);
		memcpy(rq, &u, sizeof(u));
		assert_int_equal(dj_call(fd, DJINN_MSG_MODEL_OPEN_UPLOADED,
					 sr.session_id, rq, sizeof(rq), &r),
				 1);
		assert_int_equal(r.error, -EINVAL);
		assert_non_null(strstr(r.msg, "unknown flags 0x20"));
		dj_resp_free(&r);
		u.flags = DJINN_MODEL_UPLOAD_INDEX;
		memcpy(rq, &u, sizeof(u));
		assert_int_equal(dj_call(fd, DJINN_MSG_MODEL_OPEN_UPLOADED,
					 sr.session_id, rq, sizeof(rq), &r),
				 1);
		assert_int_equal(r.error, -EINVAL);
		assert_non_null(strstr(r.msg, "an index and no shard"));
		dj_resp_free(&r);
		close(fd);
	}

	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(djinn_model_close(md), 0);
	assert_int_equal(holders(fx, mi.name), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
	const struct CMUnitTest tests[] = {
		T(test_generate),
		T(test_logits_lazy),
		T(test_fork_reset),
		T(test_truncate),
		T(test_errors),
		T(test_breakpoints),
		T(test_upload),
		T(test_upload_sharded),
		T(test_bad_models),
		cmocka_unit_test_setup_teardown(test_dead_daemon, fx_setup,
						fx_teardown_killed),
	};
#undef T
	int ret = djd_can_run("64M");

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("libdjinn models", tests, NULL,
					   NULL);
}
