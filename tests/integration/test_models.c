// SPDX-License-Identifier: MIT
/*
 * Models: open by name, contexts, sampling, forks and logits;
 * breakpoints and steering; corrupt model files; uploaded models; a
 * model's budget from the configuration, streamed.
 *
 * A real djinnd per test (tests/integration/fixture.h), spoken to in
 * raw frames.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

/* ---------------------------------------------------------------------- */
/* Models */

static uint32_t models_listed(struct fx *fx, const char *name,
			      uint32_t *holders)
{
	struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t n, found = 0;

	call_ok(fx->adm, DJINN_MSG_ADMIN_MODELS, 0, NULL, 0, &r, -1);
	memcpy(&n, r.data, 4);
	assert_int_equal(r.len, 8 + n * sizeof(*e));
	e = (void *)(r.data + 8);
	for (uint32_t i = 0; i < n; i++) {
		if (strcmp(e[i].name, name))
			continue;
		found++;
		*holders = e[i].holders;
	}
	dj_resp_free(&r);
	return found;
}

/* The one entry of model @name in the admin list. */
static struct djinn_admin_model model_entry_at(int line, struct fx *fx,
					       const char *name)
{
	struct djinn_admin_model *e, found;
	struct dj_resp r;
	uint32_t n, k = 0;

	memset(&found, 0, sizeof(found));
	call_ok_at(line, fx->adm, DJINN_MSG_ADMIN_MODELS, 0, NULL, 0, &r, -1);
	memcpy(&n, r.data, 4);
	if (r.len != 8 + n * sizeof(*e))
		fail_msg("line %d: %u models in %llu bytes", line, n,
			 (unsigned long long)r.len);
	e = (void *)(r.data + 8);
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(e[i].name, name) && k++ == 0)
			found = e[i];
	dj_resp_free(&r);
	if (k != 1)
		fail_msg("line %d: model %s listed %u times", line, name, k);
	return found;
}

#define model_entry(fx, name) model_entry_at(__LINE__, fx, name)

/* A model wholly on the device, as MODEL_OPEN's answer @m and its admin
 * entry say: every layer resident, no ring, no budget, no passes. */
static void check_resident_at(int line, struct fx *fx, const char *name,
			      const struct djinn_model_resp *m)
{
	struct djinn_admin_model e = model_entry_at(line, fx, name);

	if (m->resident != m->n_layer || m->ring || m->weights != m->bytes ||
	    m->__reserved)
		fail_msg("line %d: %s: %u of %u layers resident, ring %llu, "
			 "%llu of %llu bytes, reserved %u",
			 line, name, m->resident, m->n_layer,
			 (unsigned long long)m->ring,
			 (unsigned long long)m->bytes,
			 (unsigned long long)m->weights, m->__reserved);
	if (e.layers != m->n_layer || e.resident != e.layers || e.ring ||
	    e.budget || e.passes || e.jobs || e.bytes != m->bytes ||
	    e.weights != m->weights)
		fail_msg("line %d: %s listed with %u of %u layers resident, "
			 "ring %llu, budget %llu, %llu passes of %llu jobs, "
			 "%llu of %llu bytes",
			 line, name, e.resident, e.layers,
			 (unsigned long long)e.ring,
			 (unsigned long long)e.budget,
			 (unsigned long long)e.passes,
			 (unsigned long long)e.jobs,
			 (unsigned long long)e.bytes,
			 (unsigned long long)e.weights);
}

#define check_resident(fx, name, m) check_resident_at(__LINE__, fx, name, m)

/* 18. Models: open by name (weights once in the text segment, however
 * many sessions), contexts whose KV cache survives between requests,
 * greedy and seeded sampling that repeat, forks, the logits as a tensor;
 * bad names, tokens and handles refused; everything back at the end. */
static void test_models(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	uint64_t sid, sid2, c1, c2, c3;
	struct djinn_model_resp m, m2;
	struct djinn_ctx_step_resp st;
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	int32_t t[6], u[1], a[3], b[3], all[10];
	const struct djinn_sampling sp = {
		.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7
	};
	struct djinn_admin_vmu v0, v1;
	float logits[256];
	uint32_t holders = 0;
	int best = 0;

	assert_int_equal(djd_make_model(&fx->d, "tiny-gpt2", TINY_GPT2), 0);
	sid = open_session(fd, "model-a");
	sid2 = open_session(fd2, "model-b");
	v0 = vmu_now(fx);
	m = model_open(fd, sid, "tiny-gpt2");
	assert_int_equal(m.arch, DJINN_ARCH_GPT2);
	assert_int_equal(m.vocab, 256);
	assert_int_equal(m.n_layer, 2);
	assert_int_equal(m.hidden, 64);
	assert_int_equal(m.max_tokens, 64);
	assert_int_equal(m.dtype, DJINN_DTYPE_F32);
	v1 = vmu_now(fx);
	assert_true(v1.seg[0].used >= v0.seg[0].used + m.bytes);
	/* A second session shares the weights: nothing more is loaded. */
	m2 = model_open(fd2, sid2, "tiny-gpt2");
	assert_memory_equal(m2.fp, m.fp, sizeof(m.fp));
	assert_int_equal(vmu_now(fx).seg[0].used, v1.seg[0].used);
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 1);
	assert_int_equal(holders, 2);
	/* It fits: every layer on the device, no ring. */
	assert_int_equal(m.resident, 2);
	assert_int_equal(m.ring, 0);
	check_resident(fx, "tiny-gpt2", &m);

	/* Prefill with the logits; greedy decoding starts at their argmax
	 * and the cache holds every token. */
	c1 = ctx_new(fd, sid, m.model, 0);
	st = prefill(fd, sid, c1, prompt, 4, DJINN_STEP_LOGITS);
	assert_int_equal(st.len, 4);
	assert_true(st.logits != 0);
	tensor_read(fd, sid, st.logits, 0, sizeof(logits), logits);
	for (int i = 1; i < 256; i++)
		if (logits[i] > logits[best])
			best = i;
	tensor_release(fd, sid, st.logits);
	st = decode(fd, sid, c1, 6, NULL, t);
	assert_int_equal(st.nr_tokens, 6);
	assert_int_equal(st.len, 10);
	assert_int_equal(t[0], best);

	/* The cache is what a full prefill computes: prompt + 5 tokens in
	 * another session's context, then one more. */
	memcpy(all, prompt, sizeof(prompt));
	memcpy(all + 4, t, 5 * 4);
	c2 = ctx_new(fd2, sid2, m2.model, 16);
	prefill(fd2, sid2, c2, all, 9, 0);
	decode(fd2, sid2, c2, 1, NULL, u);
	assert_int_equal(u[0], t[5]);
	/* Past max_tokens (10 + 7 > 16): refused, and the context is as
	 * it was. */
	{
		struct djinn_ctx_step st2 = { .ctx = c2, .nr_tokens = 7 };

		call_err(fd2, DJINN_MSG_CTX_DECODE, sid2, &st2, sizeof(st2),
			 -ENOSPC, NULL);
		assert_int_equal(decode(fd2, sid2, c2, 1, NULL, u).len, 11);
	}

	/* A fork carries on as its parent does, sampled with the same
	 * seed. */
	{
		struct djinn_ctx_resp fr;
		struct dj_resp r;

		call_ok(fd, DJINN_MSG_CTX_FORK, sid, &c1, 8, &r, sizeof(fr));
		memcpy(&fr, r.data, sizeof(fr));
		dj_resp_free(&r);
		assert_int_equal(fr.len, 10);
		c3 = fr.ctx;
	}
	decode(fd, sid, c1, 3, &sp, a);
	decode(fd, sid, c3, 3, &sp, b);
	assert_memory_equal(a, b, sizeof(a));
	/* Reset: empty again, and the same prompt gives the same token. */
	call_void(fd, DJINN_MSG_CTX_RESET, sid, &c3, 8);
	prefill(fd, sid, c3, prompt, 4, 0);
	decode(fd, sid, c3, 1, NULL, u);
	assert_int_equal(u[0], t[0]);

	/* Refused, and nothing else changes. */
	{
		struct djinn_model_open o = { "../etc" };
		int32_t bad[2] = { 5, 256 };
		size_t len = sizeof(struct djinn_ctx_step) + sizeof(bad);
		struct djinn_ctx_step *s = calloc(1, len);

		call_err(fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o), -EINVAL,
			 NULL);
		strcpy(o.name, "no-such-model");
		call_err(fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o), -ENOENT,
			 NULL);
		s->ctx = c1;
		s->nr_tokens = 2;
		memcpy(s + 1, bad, sizeof(bad));
		call_err(fd, DJINN_MSG_CTX_PREFILL, sid, s, len, -EINVAL, NULL);
		s->ctx = m.model; /* a model handle is not a context */
		call_err(fd, DJINN_MSG_CTX_PREFILL, sid, s, len, -ENOENT, NULL);
		s->ctx = c2; /* another session's */
		call_err(fd, DJINN_MSG_CTX_PREFILL, sid, s, len, -ENOENT, NULL);
		s->ctx = c1;
		s->nr_tokens = 3; /* the payload holds 2 */
		call_err(fd, DJINN_MSG_CTX_PREFILL, sid, s, len, -EINVAL, NULL);
		free(s);
		call_err(fd, DJINN_MSG_MODEL_CLOSE, sid, &m.model, 8, -EBUSY,
			 NULL);
		st = decode(fd, sid, c1, 1, NULL, u);
		assert_int_equal(st.len, 14);
	}

	call_void(fd, DJINN_MSG_CTX_FREE, sid, &c1, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &c3, 8);
	call_err(fd, DJINN_MSG_CTX_FREE, sid, &c1, 8, -ENOENT, NULL);
	/* Its steps ran on the device: no passes, no jobs of streaming. */
	check_resident(fx, "tiny-gpt2", &m);
	call_void(fd, DJINN_MSG_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	/* Held by the other session: not evicted. */
	call_err(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0,
		 &(struct djinn_admin_model_evict){ "tiny-gpt2" },
		 sizeof(struct djinn_admin_model_evict), -EBUSY, NULL);
	close_session(fd2, sid2); /* its context and model go with it */
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 1);
	assert_int_equal(holders, 0);
	call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "tiny-gpt2" },
		  sizeof(struct djinn_admin_model_evict));
	assert_int_equal(models_listed(fx, "tiny-gpt2", &holders), 0);
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Models: breakpoints, steering, corrupt files */

/* A paused answer: after @layer, @T rows of hidden state (f32, C 64). */
static void paused_at(int line, const struct djinn_ctx_step_resp *st,
		      uint32_t layer, uint32_t len)
{
	if (st->state != DJINN_CTX_PAUSED || st->layer != layer ||
	    !st->hidden || st->logits || st->len != len)
		fail_msg("line %d: state %u layer %u hidden %#llx logits "
			 "%#llx len %u; want paused after %u with %u",
			 line, st->state, st->layer,
			 (unsigned long long)st->hidden,
			 (unsigned long long)st->logits, st->len, layer, len);
}

#define paused(st, layer, len) paused_at(__LINE__, st, layer, len)

/* 18b. Breakpoints: a prefill and a decode that pause after a layer give
 * the hidden state as a tensor, refuse other steps meanwhile while other
 * sessions run, and resumed unchanged give the same logits and tokens;
 * a steering tensor replaces the state (the same bits: the same logits;
 * others: others); reset and free abandon; bad requests refused. */
static void test_model_breakpoints(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	const struct djinn_sampling sp = {
		.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 7
	};
	struct djinn_tensor_desc d = F32(4, 64), hd;
	float want[256], got[256], hid[4 * 64], x[4 * 64];
	int32_t t[6], u[6], ts[6], us[6], v[2];
	struct djinn_ctx_step_resp st;
	struct djinn_model_resp m, m2;
	uint64_t sid, sid2, c1, c2, c3, cb, xt, bad;
	int pauses = 0;

	assert_int_equal(djd_make_model(&fx->d, "brk", TINY_GPT2), 0);
	sid = open_session(fd, "brk-a");
	sid2 = open_session(fd2, "brk-b");
	m = model_open(fd, sid, "brk");
	m2 = model_open(fd2, sid2, "brk");

	/* without breaks: the logits after the prompt, 6 greedy tokens,
	 * 6 seeded ones */
	c1 = ctx_new(fd, sid, m.model, 32);
	st = prefill(fd, sid, c1, prompt, 4, DJINN_STEP_LOGITS);
	tensor_read(fd, sid, st.logits, 0, sizeof(want), want);
	tensor_release(fd, sid, st.logits);
	decode(fd, sid, c1, 6, NULL, t);
	call_void(fd, DJINN_MSG_CTX_RESET, sid, &c1, 8);
	prefill(fd, sid, c1, prompt, 4, 0);
	decode(fd, sid, c1, 6, &sp, ts);

	/* a prefill that pauses after layer 0 */
	c2 = ctx_new(fd, sid, m.model, 32);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, c2, prompt,
			 4, 1, DJINN_STEP_LOGITS, NULL, NULL);
	paused(&st, 0, 0);
	assert_int_equal(st.nr_tokens, 0);
	tensor_read(fd, sid, st.hidden, 0, sizeof(hid), hid);
	tensor_release(fd, sid, st.hidden);
	/* meanwhile: the context refuses steps, forks and breaks past the
	 * last layer; other contexts and sessions run */
	brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, c1, prompt, 1, 0,
		    0, NULL, NULL);
	{
		struct djinn_ctx_step s = { .ctx = c2, .nr_tokens = 1 };
		uint8_t buf[sizeof(s) + 8];

		memcpy(buf, &s, sizeof(s));
		memcpy(buf + sizeof(s), prompt, 4);
		call_err(fd, DJINN_MSG_CTX_PREFILL, sid, buf, sizeof(s) + 4,
			 -EBUSY, "paused after layer 0");
		call_err(fd, DJINN_MSG_CTX_DECODE, sid, &s, sizeof(s), -EBUSY,
			 "paused after layer 0");
		s.ctx = c1;
		s.break_layer = 3;
		call_err(fd, DJINN_MSG_CTX_DECODE, sid, &s, sizeof(s), -EINVAL,
			 "has layers 0 to 1");
	}
	call_err(fd, DJINN_MSG_CTX_FORK, sid, &c2, 8, -EBUSY, "paused");
	cb = ctx_new(fd2, sid2, m2.model, 32);
	prefill(fd2, sid2, cb, prompt, 4, 0);
	decode(fd2, sid2, cb, 6, NULL, u);
	assert_memory_equal(u, t, sizeof(t));
	/* resumed unchanged: the same logits, bit for bit */
	st = resume(fd, sid, c2, 0, NULL);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_int_equal(st.len, 4);
	assert_int_equal(st.hidden, 0);
	assert_true(st.logits != 0);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_equal(got, want, sizeof(want));
	call_err(fd, DJINN_MSG_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c2 }),
		 sizeof(struct djinn_ctx_resume), -EBUSY, "not paused");

	/* a greedy decode pausing after layer 1 at every token: the
	 * tokens so far at each pause, the same six at the end */
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_DECODE, c2, NULL, 6,
			 2, 0, NULL, u);
	while (st.state == DJINN_CTX_PAUSED) {
		paused(&st, 1, 4 + pauses);
		assert_int_equal(st.nr_tokens, ++pauses);
		assert_memory_equal(u, t, pauses * 4);
		tensor_release(fd, sid, st.hidden);
		st = resume(fd, sid, c2, 0, u);
	}
	assert_int_equal(pauses, 6);
	assert_int_equal(st.nr_tokens, 6);
	assert_int_equal(st.len, 10);
	assert_memory_equal(u, t, sizeof(t));
	/* seeded, pausing after layer 0: the same tokens too */
	call_void(fd, DJINN_MSG_CTX_RESET, sid, &c2, 8);
	prefill(fd, sid, c2, prompt, 4, 0);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_DECODE, c2, NULL, 6,
			 1, 0, &sp, us);
	for (pauses = 0; st.state == DJINN_CTX_PAUSED; pauses++) {
		tensor_release(fd, sid, st.hidden);
		st = resume(fd, sid, c2, 0, us);
	}
	assert_int_equal(pauses, 6);
	assert_memory_equal(us, ts, sizeof(ts));

	/* steering: a tensor of the paused state's own bytes gives the
	 * same logits; a wrong shape is refused and it stays paused;
	 * other values give other logits */
	c3 = ctx_new(fd, sid, m.model, 32);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, c3, prompt,
			 4, 1, DJINN_STEP_LOGITS, NULL, NULL);
	paused(&st, 0, 0);
	tensor_read(fd, sid, st.hidden, 0, sizeof(x), x);
	assert_memory_equal(x, hid, sizeof(x)); /* as the first time */
	tensor_release(fd, sid, st.hidden);
	xt = create_data(fd, sid, &d, hid, sizeof(hid));
	hd = F32(4, 32);
	bad = create_data(fd, sid, &hd, hid, 4 * 32 * 4);
	call_err(fd, DJINN_MSG_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c3, .hidden = bad }),
		 sizeof(struct djinn_ctx_resume), -EINVAL,
		 "the hidden state is (4, 64)");
	call_err(fd, DJINN_MSG_CTX_RESUME, sid,
		 (&(struct djinn_ctx_resume){ .ctx = c3, .hidden = 12345 }),
		 sizeof(struct djinn_ctx_resume), -ENOENT, "no tensor");
	st = resume(fd, sid, c3, xt, NULL);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_equal(got, want, sizeof(want));
	for (int i = 0; i < 4 * 64; i++)
		x[i] = hid[i] + (float)sin(i);
	tensor_write(fd, sid, xt, 0, x, sizeof(x));
	call_void(fd, DJINN_MSG_CTX_RESET, sid, &c3, 8);
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, c3, prompt,
			 4, 1, DJINN_STEP_LOGITS, NULL, NULL);
	tensor_release(fd, sid, st.hidden);
	st = resume(fd, sid, c3, xt, NULL);
	tensor_read(fd, sid, st.logits, 0, sizeof(got), got);
	tensor_release(fd, sid, st.logits);
	assert_memory_not_equal(got, want, sizeof(want));
	tensor_release(fd, sid, xt);
	tensor_release(fd, sid, bad);

	/* pipelined: a prefill sent right behind one that pauses sees the
	 * pause, and a resume sent behind both finishes the first */
	{
		struct {
			struct djinn_ctx_step s;
			int32_t tok[4];
		} a = { .s = { .ctx = c3, .nr_tokens = 4, .break_layer = 1 } },
		  b = { .s = { .ctx = c3, .nr_tokens = 4 } };
		struct djinn_ctx_resume rs = { .ctx = c3 };
		uint64_t id[3] = { dj_next_id(), dj_next_id(), dj_next_id() };
		struct djinn_ctx_step_resp ra, rc;
		bool seen[3] = { false };

		memcpy(a.tok, prompt, sizeof(prompt));
		memcpy(b.tok, prompt, sizeof(prompt));
		assert_int_equal(dj_send(fd, DJINN_MSG_CTX_PREFILL, id[0], sid,
					 &a, sizeof(a)),
				 0);
		assert_int_equal(dj_send(fd, DJINN_MSG_CTX_PREFILL, id[1], sid,
					 &b, sizeof(b)),
				 0);
		assert_int_equal(dj_send(fd, DJINN_MSG_CTX_RESUME, id[2], sid,
					 &rs, sizeof(rs)),
				 0);
		for (int k = 0; k < 3; k++) {
			struct dj_resp r;
			int i;

			assert_int_equal(dj_recv(fd, &r, 10000), 1);
			for (i = 0; i < 2 && r.hdr.request_id != id[i]; i++)
				;
			assert_int_equal(r.hdr.request_id, id[i]);
			assert_false(seen[i]);
			seen[i] = true;
			if (i == 1) {
				expect_error(&r, -EBUSY,
					     "paused after layer 0");
			} else {
				assert_int_equal(r.error, 0);
				memcpy(i ? &rc : &ra, r.data, sizeof(ra));
			}
			dj_resp_free(&r);
		}
		paused(&ra, 0, 4);
		tensor_release(fd, sid, ra.hidden);
		assert_int_equal(rc.state, DJINN_CTX_DONE);
		assert_int_equal(rc.len, 8);
		call_void(fd, DJINN_MSG_CTX_RESET, sid, &c3, 8);
		prefill(fd, sid, c3, prompt, 4, 0);
	}

	/* reset abandons a paused step; free a paused context */
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, c3, prompt,
			 4, 2, 0, NULL, NULL);
	paused(&st, 1, 4);
	tensor_release(fd, sid, st.hidden);
	call_void(fd, DJINN_MSG_CTX_RESET, sid, &c3, 8);
	st = prefill(fd, sid, c3, prompt, 4, 0);
	assert_int_equal(st.len, 4);
	decode(fd, sid, c3, 2, NULL, v);
	assert_memory_equal(v, t, sizeof(v));
	st = brk_step_at(__LINE__, fd, sid, DJINN_MSG_CTX_DECODE, c3, NULL, 2,
			 1, 0, NULL, v);
	paused(&st, 0, 6);
	tensor_release(fd, sid, st.hidden);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &c3, 8);

	call_void(fd, DJINN_MSG_CTX_FREE, sid, &c1, 8);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &c2, 8);
	call_void(fd, DJINN_MSG_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "brk" },
		  sizeof(struct djinn_admin_model_evict));
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* Run @script (Python) on @fx's model @name's model.safetensors. */
static void corrupt_model(struct fx *fx, const char *name, const char *script)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "python3 - '%s/models/%s/model.safetensors' <<'EOF'\n"
		 "import json, struct, sys\n"
		 "p = sys.argv[1]\n"
		 "b = bytearray(open(p, 'rb').read())\n"
		 "n = struct.unpack('<Q', b[:8])[0]\n"
		 "h = json.loads(b[8:8 + n])\n"
		 "%s\n"
		 "EOF",
		 fx->d.dir, name, script);
	assert_int_equal(system(cmd), 0);
}

/* 18c. Corrupt models in the model directory are refused at MODEL_OPEN
 * with a message naming the file and the fault, and the daemon keeps
 * serving another session's model meanwhile. */
static void test_model_corrupt(void **state)
{
	static const struct {
		const char *name, *script, *words;
		int err;
	} bad[] = {
		{ "truncated", "open(p, 'wb').write(b[:-5])",
		  "truncated/model.safetensors: tensor 'ln_f.bias': "
		  "data_offsets [298496, 298752) past the data's 298747 bytes",
		  -EINVAL },
		{ "overlap",
		  /* the second tensor's bytes start inside the first's */
		  "ks = sorted((k for k in h if k != '__metadata__'),\n"
		  "            key=lambda k: h[k]['data_offsets'][0])\n"
		  "a, z = h[ks[0]]['data_offsets'], h[ks[1]]['data_offsets']\n"
		  "h[ks[1]]['data_offsets'] = [z[0] - 4, z[1] - 4]\n"
		  "j = json.dumps(h).encode()\n"
		  "j += b' ' * (-len(j) % 8)\n"
		  "open(p, 'wb').write(struct.pack('<Q', len(j)) + j +\n"
		  "                    b[8 + n:])",
		  "overlap tensor", -EINVAL },
		{ "huge",
		  "b[:8] = struct.pack('<Q', 1 << 40)\n"
		  "open(p, 'wb').write(b)",
		  "huge/model.safetensors: header length 1099511627776 over "
		  "the limit",
		  -E2BIG },
	};
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[3] = { 7, 8, 9 };
	struct djinn_model_resp m;
	int32_t t[2], u[2];
	uint64_t sid, sid2, c;

	assert_int_equal(djd_make_model(&fx->d, "good", TINY_GPT2), 0);
	sid = open_session(fd, "corrupt-a");
	sid2 = open_session(fd2, "corrupt-b");
	m = model_open(fd2, sid2, "good");
	c = ctx_new(fd2, sid2, m.model, 16);
	prefill(fd2, sid2, c, prompt, 3, 0);
	decode(fd2, sid2, c, 2, NULL, t);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct djinn_model_open o = { { 0 } };
		uint32_t holders;

		assert_int_equal(djd_make_model(&fx->d, bad[i].name,
						"--layers 1 --seed 4"),
				 0);
		corrupt_model(fx, bad[i].name, bad[i].script);
		strcpy(o.name, bad[i].name);
		call_err(fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o),
			 bad[i].err, bad[i].words);
		/* twice: nothing was left behind by the first */
		call_err(fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o),
			 bad[i].err, bad[i].words);
		assert_int_equal(models_listed(fx, bad[i].name, &holders), 0);
		/* the other session still runs, the same as before */
		call_void(fd2, DJINN_MSG_CTX_RESET, sid2, &c, 8);
		prefill(fd2, sid2, c, prompt, 3, 0);
		decode(fd2, sid2, c, 2, NULL, u);
		assert_memory_equal(u, t, sizeof(t));
	}
	call_void(fd2, DJINN_MSG_CTX_FREE, sid2, &c, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0,
		  &(struct djinn_admin_model_evict){ "good" },
		  sizeof(struct djinn_admin_model_evict));
	close(fd);
	close(fd2);
	check_health(fx, 0);
}

/* 18d. Uploaded models: a client sends config.json and the safetensors
 * as text tensors, found by fingerprint first; the model is listed as
 * upload-HEX, its weights its tenant's own text (the directory model
 * with those files is served, in the shared scope: another entry), and
 * it generates the same tokens; a second session of the tenant opens it
 * by fingerprints alone; bad uploads are refused precisely. */
static void test_model_upload(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock), fd2 = xconnect(fx->d.sock);
	const int32_t prompt[4] = { 1, 2, 3, 4 };
	struct djinn_model_file cfg = { 0 }, w = { 0 }, fpcfg, fpw, x;
	struct djinn_model_resp m, md, m2;
	size_t clen, wlen;
	uint8_t *cb, *wb, src[DJINN_FP_LEN], both[2 * DJINN_FP_LEN];
	uint64_t sid, sid2, ctx, t1, t2, data;
	int32_t tu[6], td[6];
	char name[64];
	uint32_t holders, flags;
	uint64_t used;

	assert_int_equal(djd_make_model(&fx->d, "src", TINY_GPT2), 0);
	cb = model_file_read(fx, "src", "config.json", &clen);
	wb = model_file_read(fx, "src", "model.safetensors", &wlen);
	sid = open_session(fd, "upload-a");
	sid2 = open_session(fd2, "upload-b");

	/* by fingerprint: not loaded yet */
	sha256(cb, clen, fpcfg.fp);
	sha256(wb, wlen, fpw.fp);
	fpcfg.handle = fpw.handle = 0;
	upload_open(fd, sid, &fpcfg, &fpw, &m, -ENOENT,
		    "not uploaded: send its files");
	/* send the files, open with their handles */
	t1 = text_file(fd, sid, cb, clen, cfg.fp);
	t2 = text_file(fd, sid, wb, wlen, w.fp);
	cfg.handle = t1;
	w.handle = t2;
	upload_open(fd, sid, &cfg, &w, &m, 0, NULL);
	assert_int_equal(m.arch, DJINN_ARCH_GPT2);
	assert_int_equal(m.n_layer, 2);
	assert_int_equal(m.hidden, 64);
	memcpy(both, cfg.fp, DJINN_FP_LEN);
	memcpy(both + DJINN_FP_LEN, w.fp, DJINN_FP_LEN);
	sha256(both, sizeof(both), src);
	snprintf(name, sizeof(name), "upload-");
	for (int i = 0; i < 8; i++)
		snprintf(name + 7 + 2 * i, 3, "%02x", src[i]);
	assert_int_equal(models_listed(fx, name, &holders), 1);
	assert_int_equal(holders, 1);
	check_resident(fx, name, &m);
	/* the file tensors may go; the directory's model with the same
	 * files is served: an entry of the shared scope beside the
	 * tenant's, never the tenant's own (Documentation/security.rst) */
	tensor_release(fd, sid, t1);
	tensor_release(fd, sid, t2);
	used = vmu_now(fx).seg[0].used;
	md = model_open(fd2, sid2, "src");
	assert_memory_equal(md.fp, m.fp, sizeof(m.fp));
	assert_int_equal(vmu_now(fx).seg[0].used,
			 used + granules(fx, md.bytes));
	/* and they generate the same tokens */
	ctx = ctx_new(fd, sid, m.model, 16);
	prefill(fd, sid, ctx, prompt, 4, 0);
	decode(fd, sid, ctx, 6, NULL, tu);
	call_void(fd, DJINN_MSG_CTX_FREE, sid, &ctx, 8);
	ctx = ctx_new(fd2, sid2, md.model, 16);
	prefill(fd2, sid2, ctx, prompt, 4, 0);
	decode(fd2, sid2, ctx, 6, NULL, td);
	call_void(fd2, DJINN_MSG_CTX_FREE, sid2, &ctx, 8);
	assert_memory_equal(tu, td, sizeof(tu));
	/* another session: fingerprints only */
	upload_open(fd2, sid2, &fpcfg, &fpw, &m2, 0, NULL);
	assert_memory_equal(m2.fp, m.fp, sizeof(m.fp));
	assert_int_equal(models_listed(fx, name, &holders), 1);
	assert_int_equal(holders, 2);

	/* refused */
	{
		struct djinn_tensor_desc d = DESC(DJINN_DTYPE_U8, clen);
		struct djinn_model_upload u = { .nr_files = 0 };

		call_err(fd, DJINN_MSG_MODEL_OPEN_UPLOADED, sid, &u, sizeof(u),
			 -EINVAL, "1 to 64 files");
		data = create_data(fd, sid, &d, cb, clen);
		x = (struct djinn_model_file){ .handle = data };
		memcpy(x.fp, cfg.fp, DJINN_FP_LEN);
		t2 = text_file_at(__LINE__, fd, sid, wb, wlen - 1, w.fp);
		w.handle = t2;
		upload_open(fd, sid, &x, &w, &m2, -EINVAL,
			    "config.json: tensor");
		/* another file's fingerprint than the tensor's */
		t1 = create_at(__LINE__, fd, sid, &d, DJINN_SEG_TEXT, cfg.fp,
			       cb, clen, &flags);
		x = (struct djinn_model_file){ .handle = t1 };
		memcpy(x.fp, fpw.fp, DJINN_FP_LEN);
		upload_open(fd, sid, &x, &w, &m2, -EINVAL,
			    "has another fingerprint");
		/* a handle and a fingerprint alone */
		upload_open(fd, sid, &cfg, &fpw, &m2, -EINVAL,
			    "every handle 0");
		/* a truncated file: the parser's message, naming it */
		cfg.handle = t1;
		upload_open(fd, sid, &cfg, &w, &m2, -EINVAL,
			    ": file 0: tensor 'ln_f.bias': data_offsets");
		tensor_release(fd, sid, data);
		tensor_release(fd, sid, t1);
		tensor_release(fd, sid, t2);
	}

	call_void(fd, DJINN_MSG_MODEL_CLOSE, sid, &m.model, 8);
	close_session(fd, sid);
	close_session(fd2, sid2);
	{
		struct djinn_admin_model_evict e = { { 0 } };

		strcpy(e.name, name);
		call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0, &e,
			  sizeof(e));
		memset(&e, 0, sizeof(e));
		strcpy(e.name, "src");
		call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0, &e,
			  sizeof(e));
	}
	free(cb);
	free(wb);
	close(fd);
	close(fd2);
	/* the file tensors' text may stay cached (as in test_text) */
	check_text_cached(fx);
	check_health(fx, 0);
}

/* ---------------------------------------------------------------------- */
/* Budgets */

/* 4 layers of about 3.9 MB, embeddings and head about 1 MB: with a 2 MiB
 * granule, 6M streams every layer through a ring of one, 14M with a ring
 * of one keeps two. */
#define BUDGET_LLAMA                                                \
	"--seed 21 --arch llama --embd 256 --heads 4 --kv-heads 2 " \
	"--inner 1024 --layers 4 --vocab 512 --untied"
#define BUDGET_ND 8

/* Model @name in a session of its own: the prompt, then BUDGET_ND
 * tokens decoded greedily into @out. Its MODEL_OPEN answer; how much the
 * text segment grew when it was opened in *@grew. */
static struct djinn_model_resp budget_run_at(int line, struct fx *fx,
					     const char *name, int32_t *out,
					     uint64_t *grew)
{
	static const int32_t prompt[7] = { 3, 141, 59, 26, 5, 358, 97 };
	int fd = xconnect_at(line, fx->d.sock);
	uint64_t sid = open_at(line, fd, "budget", 4, 0, NULL);
	uint64_t text = vmu_now(fx).seg[0].used, ctx;
	struct djinn_model_resp m = model_open_at(line, fd, sid, name);

	*grew = vmu_now(fx).seg[0].used - text;
	ctx = ctx_new_at(line, fd, sid, m.model, 64);
	step_at(line, fd, sid, DJINN_MSG_CTX_PREFILL, ctx, prompt, 7, NULL, 0,
		NULL);
	step_at(line, fd, sid, DJINN_MSG_CTX_DECODE, ctx, NULL, BUDGET_ND, NULL,
		0, out);
	close_session(fd, sid); /* its context and model go with it */
	close(fd);
	return m;
}

#define budget_run(fx, name, out, grew) \
	budget_run_at(__LINE__, fx, name, out, grew)

/* Write @text to the configuration @path, SIGHUP the daemon and wait for
 * @line in its log: the reload is applied then (the I/O thread does the
 * rest of it before it reads another request). */
static void budget_reload(struct fx *fx, const char *path, const char *text,
			  const char *line)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(kill(fx->d.pid, SIGHUP), 0);
	wait_log(fx->d.log, line);
}

static void budget_evict(struct fx *fx, const char *name)
{
	struct djinn_admin_model_evict e = { { 0 } };

	snprintf(e.name, sizeof(e.name), "%s", name);
	call_void(fx->adm, DJINN_MSG_ADMIN_MODEL_EVICT, 0, &e, sizeof(e));
}

/* 18e. [model.NAME] budget and ring_slots: a model over the budget its
 * configuration gives it is streamed (the text segment holds no more
 * than the budget, the resident part's fingerprint is not the whole
 * weights') and decodes the same tokens as the same weights under
 * another name without one; SIGHUP changes the budget for the next load
 * and, taken out of the file, lifts it. */
static void test_model_budget(void **state)
{
	char dir[] = "/tmp/djinn-budget.XXXXXX", path[64];
	const char *extra[] = { "--config", path, NULL };
	int32_t ta[BUDGET_ND], tb[BUDGET_ND];
	struct djinn_model_resp ma, mb, m6;
	uint64_t grew_a, grew_b;
	struct fx *fx;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/djinnd.conf", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[model.llama-b]\nbudget = 6M\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(fx_start_args((void **)&fx, DEV_MEM, 10000, extra), 0);
	/* the same seed: the same weights under two names */
	assert_int_equal(djd_make_model(&fx->d, "llama-a", BUDGET_LLAMA), 0);
	assert_int_equal(djd_make_model(&fx->d, "llama-b", BUDGET_LLAMA), 0);

	/* streamed: its text entry and ring within the budget, a part of
	 * the weights' bytes */
	mb = budget_run(fx, "llama-b", tb, &grew_b);
	ma = budget_run(fx, "llama-a", ta, &grew_a);
	print_message("llama-a: %llu bytes of text; llama-b under 6M: %llu\n",
		      (unsigned long long)grew_a, (unsigned long long)grew_b);
	assert_int_equal(mb.n_layer, 4);
	assert_true(grew_b > 0 && grew_b <= 6 * MiB);
	assert_true(grew_a >= 16 * MiB);
	assert_memory_not_equal(mb.fp, ma.fp, sizeof(ma.fp));
	assert_memory_equal(tb, ta, sizeof(ta));
	m6 = mb;

	/* another budget and ring from the next load: more of it on the
	 * device, the same tokens */
	budget_evict(fx, "llama-b");
	budget_reload(fx, path,
		      "[model.llama-b]\nbudget = 14M\nring_slots = 1\n",
		      "reload: model.llama-b: budget 6M -> 14M, ring_slots 1");
	mb = budget_run(fx, "llama-b", tb, &grew_b);
	print_message("llama-b under 14M, a ring of one: %llu\n",
		      (unsigned long long)grew_b);
	assert_true(grew_b > 6 * MiB && grew_b <= 14 * MiB);
	assert_memory_not_equal(mb.fp, ma.fp, sizeof(ma.fp));
	assert_memory_not_equal(mb.fp, m6.fp, sizeof(m6.fp));
	assert_memory_equal(tb, ta, sizeof(ta));

	/* out of the file: wholly on the device again, sharing llama-a's
	 * weights */
	budget_evict(fx, "llama-b");
	budget_reload(
		fx, path, "",
		"reload: model.llama-b: budget 14M, ring_slots 1 -> none");
	mb = budget_run(fx, "llama-b", tb, &grew_b);
	assert_memory_equal(mb.fp, ma.fp, sizeof(ma.fp));
	assert_memory_equal(tb, ta, sizeof(ta));

	budget_evict(fx, "llama-a");
	budget_evict(fx, "llama-b");
	check_text_cached(fx);
	fx_teardown((void **)&fx);
	unlink(path);
	rmdir(dir);
}

/* One ADMIN_MODEL_LOAD that must succeed: the model's one entry. */
static struct djinn_admin_model load_at(int line, struct fx *fx,
					const struct djinn_admin_model_load *r)
{
	struct djinn_admin_model e;
	struct dj_resp resp;
	uint32_t n;

	call_ok_at(line, fx->adm, DJINN_MSG_ADMIN_MODEL_LOAD, 0, r, sizeof(*r),
		   &resp, 8 + sizeof(e));
	memcpy(&n, resp.data, 4);
	if (n != 1)
		fail_msg("line %d: %u entries", line, n);
	memcpy(&e, resp.data + 8, sizeof(e));
	dj_resp_free(&resp);
	if (strcmp(e.name, r->name))
		fail_msg("line %d: the entry of %s", line, e.name);
	return e;
}

#define load(fx, ...) \
	load_at(__LINE__, fx, &(struct djinn_admin_model_load){ __VA_ARGS__ })

#define load_err(fx, err, phrase, ...)                            \
	call_err(fx->adm, DJINN_MSG_ADMIN_MODEL_LOAD, 0,          \
		 &(struct djinn_admin_model_load){ __VA_ARGS__ }, \
		 sizeof(struct djinn_admin_model_load), err, phrase)

/* 18f. ADMIN_MODEL_LOAD (djinnctl model load): bad requests are refused
 * and change nothing; a load leaves the model loaded, held by none, its
 * session gone; a budget below the least is refused and put back; a
 * held model refuses another budget and keeps its own. */
static void test_model_load(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_model e;
	struct djinn_model_resp m;
	struct dj_resp r;
	uint32_t holders, n;
	uint64_t sid;
	int fd;

	assert_int_equal(djd_make_model(&fx->d, "llama-l", BUDGET_LLAMA), 0);
	load_err(fx, -EINVAL, "unknown bits", .name = "llama-l", .flags = 2);
	load_err(fx, -EINVAL, "without DJINN_LOAD_BUDGET", .name = "llama-l",
		 .budget = 6 * MiB);
	load_err(fx, -EINVAL, "at most 8", .name = "llama-l", .budget = 6 * MiB,
		 .slots = 9, .flags = DJINN_LOAD_BUDGET);
	load_err(fx, -EINVAL, "without a budget", .name = "llama-l", .slots = 2,
		 .flags = DJINN_LOAD_BUDGET);
	load_err(fx, -EINVAL, NULL, .name = "../llama-l");
	load_err(fx, -EINVAL, "not NUL-padded", .name = { 'l', 'l', 0, 'x' });
	load_err(fx, -ENOENT, NULL, .name = "nosuch");
	load_err(fx, -ENOMEM, "it needs 6291456 at least", .name = "llama-l",
		 .budget = 1, .flags = DJINN_LOAD_BUDGET);
	assert_int_equal(models_listed(fx, "llama-l", &holders), 0);
	/* not on the client socket */
	fd = xconnect(fx->d.sock);
	call_err(fd, DJINN_MSG_ADMIN_MODEL_LOAD, 0,
		 &(struct djinn_admin_model_load){ .name = "llama-l" },
		 sizeof(struct djinn_admin_model_load), -EPERM, NULL);

	/* the refused budget was put back: none, the model whole */
	e = load(fx, .name = "llama-l");
	assert_int_equal(e.holders, 0);
	assert_int_equal(e.resident, 4);
	assert_int_equal(e.ring, 0);
	assert_int_equal(e.budget, 0);
	assert_int_equal(e.bytes, e.weights);
	/* its session is gone */
	call_ok(fx->adm, DJINN_MSG_ADMIN_SESSIONS, 0, NULL, 0, &r, -1);
	memcpy(&n, r.data, 4);
	assert_int_equal(n, 0);
	dj_resp_free(&r);

	/* under 6M: evicted (held by none) and loaded streamed */
	e = load(fx, .name = "llama-l", .budget = 6 * MiB,
		 .flags = DJINN_LOAD_BUDGET);
	assert_int_equal(e.holders, 0);
	assert_int_equal(e.resident, 0);
	assert_true(e.ring > 0);
	assert_int_equal(e.budget, 6 * MiB);

	/* a client opens it as it is; another budget is refused while it
	 * holds it, and nothing changes */
	sid = open_session(fd, "load");
	m = model_open(fd, sid, "llama-l");
	assert_int_equal(m.resident, 0);
	load_err(fx, -EBUSY,
		 "held by 1 session, placed under a budget of "
		 "6291456 bytes",
		 .name = "llama-l", .flags = DJINN_LOAD_BUDGET);
	e = load(fx, .name = "llama-l", .budget = 6 * MiB,
		 .flags = DJINN_LOAD_BUDGET);
	assert_int_equal(e.holders, 1);
	assert_int_equal(e.resident, 0);
	close_session(fd, sid);
	close(fd);
	/* let go: whole again */
	e = load(fx, .name = "llama-l", .flags = DJINN_LOAD_BUDGET);
	assert_int_equal(e.resident, 4);
	assert_int_equal(e.budget, 0);
	budget_evict(fx, "llama-l");
	check_health(fx, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_models, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_model_breakpoints,
						fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_model_corrupt, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_model_upload, fx_setup,
						fx_teardown),
		cmocka_unit_test(test_model_budget),
		cmocka_unit_test_setup_teardown(test_model_load, fx_setup,
						fx_teardown),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	return cmocka_run_group_tests_name("djinnd models", tests, NULL, NULL);
}
