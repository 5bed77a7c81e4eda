// SPDX-License-Identifier: MIT
/*
 * libdjinn's model calls against a scripted peer: the far end of a
 * socketpair answers each request with the frame a test wrote for it, so
 * that the answers djinnd never gives can be given: a decode answer of
 * the wrong length or with a token outside the vocabulary, logits nobody
 * asked for. Each must break the connection (-EPROTO), not be believed.
 * Also the variable-length answers of a decode paused at a breakpoint,
 * with its tokens landing in the caller's buffer across resumes, and a
 * model's placement (resident layers, ring) as MODEL_OPEN answers it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include "test_libdjinn.h"

#define SID 1
#define VOCAB 16
#define HIDDEN 8

struct answer {
	uint16_t op;
	uint8_t payload[128];
	size_t len;
};

/*
 * struct peer - the daemon's end
 * @answers:  what to answer, in order, to requests other than
 *            HEARTBEAT and TENSOR_RELEASE (answered empty-handed)
 * @released: handles of TENSOR_RELEASEs seen
 * @bad:      a request came that the script did not expect
 */
struct peer {
	int fd;
	pthread_t thread;
	const struct answer *answers;
	unsigned int nr, next;
	uint64_t released[8];
	unsigned int nr_released;
	char bad[128];
	pthread_mutex_t lock;
};

static void *serve(void *arg)
{
	struct peer *p = arg;
	struct djinn_hdr h;
	uint8_t buf[4096];

	while (read_full(p->fd, &h, sizeof(h))) {
		struct djinn_hdr a = h;
		const void *payload = NULL;
		struct djinn_session_resp sr = {
			.session_id = SID, .lease_ns = 1000 * NSEC_PER_SEC
		};

		if (h.payload_len > sizeof(buf) ||
		    !read_full(p->fd, buf, h.payload_len))
			break;
		a.flags = DJINN_F_RESPONSE;
		a.payload_len = 0;
		pthread_mutex_lock(&p->lock);
		if (h.type == DJINN_MSG_TENSOR_RELEASE) {
			if (p->nr_released < 8)
				memcpy(&p->released[p->nr_released++], buf, 8);
		} else if (h.type == DJINN_MSG_HEARTBEAT) {
			payload = &sr;
			a.payload_len = sizeof(sr);
		} else if (p->next < p->nr &&
			   p->answers[p->next].op == h.type) {
			payload = p->answers[p->next].payload;
			a.payload_len = p->answers[p->next].len;
			p->next++;
		} else {
			snprintf(p->bad, sizeof(p->bad),
				 "request %u, script at %u", h.type, p->next);
		}
		pthread_mutex_unlock(&p->lock);
		write_full(p->fd, &a, sizeof(a));
		if (a.payload_len)
			write_full(p->fd, payload, a.payload_len);
	}
	return NULL;
}

static struct djinn_conn *start(struct peer *p, const struct answer *answers,
				unsigned int nr, struct djinn_session **s)
{
	struct djinn_conn *conn;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	p->answers = answers;
	p->nr = nr;
	conn = pair_conn(&p->fd);
	*s = fake_session(conn, SID, 1000 * NSEC_PER_SEC);
	assert_int_equal(pthread_create(&p->thread, NULL, serve, p), 0);
	return conn;
}

static void stop(struct peer *p, struct djinn_conn *conn)
{
	djinn_disconnect(conn); /* the peer reads EOF */
	pthread_join(p->thread, NULL);
	close(p->fd);
	pthread_mutex_destroy(&p->lock);
	if (p->bad[0])
		fail_msg("peer: %s", p->bad);
}

/* The answers that open a model and make a context of 32 tokens. */
static void open_answers(struct answer *a)
{
	struct djinn_model_resp m = { .model = 0x11,
				      .arch = DJINN_ARCH_GPT2,
				      .dtype = DJINN_DTYPE_F32,
				      .vocab = VOCAB,
				      .n_layer = 2,
				      .hidden = HIDDEN,
				      .n_head = 2,
				      .n_kv_head = 2,
				      .max_tokens = 32,
				      .bytes = 4096,
				      .weights = 4096,
				      .resident = 2 };
	struct djinn_ctx_resp c = { .ctx = 0x22, .len = 0, .max_tokens = 32 };

	a[0].op = DJINN_MSG_MODEL_OPEN;
	memcpy(a[0].payload, &m, sizeof(m));
	a[0].len = sizeof(m);
	a[1].op = DJINN_MSG_CTX_NEW;
	memcpy(a[1].payload, &c, sizeof(c));
	a[1].len = sizeof(c);
}

/* A step answer: @r then @n tokens, padded to 8 bytes. */
static void step_answer(struct answer *a, uint16_t op,
			struct djinn_ctx_step_resp r, const int32_t *tok,
			uint32_t n)
{
	a->op = op;
	r.nr_tokens = n;
	memset(a->payload, 0, sizeof(a->payload));
	memcpy(a->payload, &r, sizeof(r));
	if (n)
		memcpy(a->payload + sizeof(r), tok, n * sizeof(int32_t));
	a->len = sizeof(r) + ((n * sizeof(int32_t) + 7) & ~(size_t)7);
}

static void open_ctx(struct djinn_session *s, struct djinn_model **m,
		     struct djinn_ctx **c)
{
	assert_int_equal(djinn_model_open(s, "tiny", m), 0);
	assert_int_equal(djinn_ctx_new(*m, 0, c), 0);
}

/* ---------------------------------------------------------------------- */

/* A decode paused at a breakpoint: its answers carry the tokens so far,
 * and they land in the caller's buffer across resumes. */
static void test_paused_decode(void **state)
{
	const int32_t tok[4] = { 3, 1, 4, 1 };
	struct answer a[5];
	struct djinn_step_opts bo = { .break_layer = DJINN_BREAK_AFTER(1) };
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	struct djinn_step st;
	struct djinn_conn *conn;
	struct peer p;
	int32_t out[4] = { -1, -1, -1, -1 };

	open_answers(a);
	step_answer(&a[2], DJINN_MSG_CTX_DECODE,
		    (struct djinn_ctx_step_resp){ .state = DJINN_CTX_PAUSED,
						  .len = 1,
						  .layer = 1,
						  .hidden = 0x33 },
		    tok, 1);
	step_answer(&a[3], DJINN_MSG_CTX_RESUME,
		    (struct djinn_ctx_step_resp){ .state = DJINN_CTX_PAUSED,
						  .len = 3,
						  .layer = 1,
						  .hidden = 0x34 },
		    tok, 3);
	step_answer(&a[4], DJINN_MSG_CTX_RESUME,
		    (struct djinn_ctx_step_resp){ .state = DJINN_CTX_DONE,
						  .len = 4 },
		    tok, 4);
	conn = start(&p, a, 5, &s);
	open_ctx(s, &m, &c);

	assert_int_equal(djinn_ctx_decode(c, 4, NULL, out, &bo, &st), 1);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	assert_int_equal(st.layer, 1);
	assert_int_equal(out[0], 3);
	assert_int_equal(out[1], -1);
	assert_int_equal(djinn_result_desc(st.hidden)->dims[0], 1);
	assert_int_equal(djinn_result_desc(st.hidden)->dims[1], HIDDEN);
	/* paused: no new step, no fork; nothing is sent */
	assert_int_equal(djinn_ctx_decode(c, 1, NULL, out, NULL, NULL), -EBUSY);
	assert_int_equal(djinn_ctx_prefill(c, tok, 1, NULL, NULL), -EBUSY);

	assert_int_equal(djinn_ctx_resume(c, NULL, &st), 3);
	assert_int_equal(st.state, DJINN_CTX_PAUSED);
	assert_int_equal(djinn_ctx_resume(c, NULL, &st), 4);
	assert_int_equal(st.state, DJINN_CTX_DONE);
	assert_null(st.hidden);
	assert_memory_equal(out, tok, sizeof(tok));
	assert_int_equal(djinn_ctx_len(c), 4);
	/* done: not paused any more */
	assert_int_equal(djinn_ctx_resume(c, NULL, &st), -EBUSY);
	assert_true(strstr(djinn_last_error(), "not paused") != NULL);
	stop(&p, conn);
}

/* Answers that cannot be: each breaks the connection. */
static void bad_answer(struct djinn_ctx_step_resp r, const int32_t *tok,
		       uint32_t n, size_t len_delta, bool logits)
{
	struct answer a[3];
	struct djinn_step_opts lo = { .logits = logits };
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	struct djinn_conn *conn;
	struct peer p;
	int32_t out[4];

	open_answers(a);
	step_answer(&a[2], DJINN_MSG_CTX_DECODE, r, tok, n);
	a[2].len -= len_delta;
	conn = start(&p, a, 3, &s);
	open_ctx(s, &m, &c);
	assert_int_equal(djinn_ctx_decode(c, 4, NULL, out, &lo, NULL), -EPROTO);
	assert_int_equal(djinn_conn_ping(conn), -EPROTO);
	stop(&p, conn);
}

static void test_bad_answers(void **state)
{
	const int32_t tok[4] = { 3, 1, 4, 1 }, big[4] = { 3, 1, VOCAB, 1 };
	const struct djinn_ctx_step_resp done = { .state = DJINN_CTX_DONE,
						  .len = 4 };
	struct djinn_ctx_step_resp r;

	/* done with 3 tokens of 4 */
	bad_answer(done, tok, 3, 0, false);
	/* 4 tokens in a payload cut by 8 bytes */
	bad_answer(done, tok, 4, 8, false);
	/* a token outside the vocabulary */
	bad_answer(done, big, 4, 0, false);
	/* logits nobody asked for */
	r = done;
	r.logits = 0x44;
	bad_answer(r, tok, 4, 0, false);
	/* no logits when asked */
	bad_answer(done, tok, 4, 0, true);
	/* paused with no breakpoint asked */
	r = (struct djinn_ctx_step_resp){ .state = DJINN_CTX_PAUSED,
					  .hidden = 0x55 };
	bad_answer(r, tok, 1, 0, false);
	/* a state that does not exist */
	r = done;
	r.state = 7;
	bad_answer(r, tok, 4, 0, false);
}

/* Open a model on an answer of @len bytes of @r: what djinn_model_open()
 * returns; *@mi what djinn_model_info() says when it is 0. */
static int open_on(const struct djinn_model_resp *r, size_t len,
		   struct djinn_model_info *mi)
{
	struct answer a[1] = { { .op = DJINN_MSG_MODEL_OPEN, .len = len } };
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_conn *conn;
	struct peer p;
	int ret;

	memcpy(a[0].payload, r, len);
	conn = start(&p, a, 1, &s);
	ret = djinn_model_open(s, "tiny", &m);
	if (!ret)
		assert_int_equal(djinn_model_info(m, mi), 0);
	else
		assert_int_equal(djinn_conn_ping(conn), -EPROTO);
	stop(&p, conn);
	return ret;
}

/* A model's placement: a streamed model's resident layers and ring as
 * the daemon says them; an older daemon's answer (80 bytes, up to the
 * fingerprint) as a model wholly on the device; placements that cannot
 * be refused. */
static void test_placement(void **state)
{
	const struct djinn_model_resp streamed = { .model = 0x11,
						   .arch = DJINN_ARCH_GPT2,
						   .dtype = DJINN_DTYPE_F32,
						   .vocab = VOCAB,
						   .n_layer = 4,
						   .hidden = HIDDEN,
						   .n_head = 2,
						   .n_kv_head = 2,
						   .max_tokens = 32,
						   .bytes = 4096,
						   .fp = { 0xab },
						   .weights = 12288,
						   .ring = 8192,
						   .resident = 1 };
	const size_t v0 = offsetof(struct djinn_model_resp, weights);
	struct djinn_model_resp r;
	struct djinn_model_info mi;

	memset(&mi, 0xff, sizeof(mi));
	assert_int_equal(open_on(&streamed, sizeof(streamed), &mi), 0);
	assert_int_equal(mi.n_layer, 4);
	assert_int_equal(mi.resident, 1);
	assert_int_equal(mi.ring, 8192);
	assert_int_equal(mi.bytes, 4096);
	assert_int_equal(mi.weights, 12288);
	assert_int_equal(mi.fp[0], 0xab);

	/* an older daemon's answer: every layer on the device */
	assert_int_equal(v0, 80);
	memset(&mi, 0xff, sizeof(mi));
	assert_int_equal(open_on(&streamed, v0, &mi), 0);
	assert_int_equal(mi.n_layer, 4);
	assert_int_equal(mi.resident, 4);
	assert_int_equal(mi.ring, 0);
	assert_int_equal(mi.weights, 4096);

	/* more resident layers than layers */
	r = streamed;
	r.resident = 5;
	assert_int_equal(open_on(&r, sizeof(r), &mi), -EPROTO);
	/* streamed layers and no ring */
	r = streamed;
	r.ring = 0;
	assert_int_equal(open_on(&r, sizeof(r), &mi), -EPROTO);
	/* a ring for a model wholly on the device */
	r = streamed;
	r.resident = 4;
	assert_int_equal(open_on(&r, sizeof(r), &mi), -EPROTO);
	/* fewer weights than the text entry holds */
	r = streamed;
	r.weights = 2048;
	assert_int_equal(open_on(&r, sizeof(r), &mi), -EPROTO);
	/* reserved set */
	r = streamed;
	r.__reserved = 1;
	assert_int_equal(open_on(&r, sizeof(r), &mi), -EPROTO);
	/* an answer of neither size */
	assert_int_equal(open_on(&streamed, v0 + 8, &mi), -EPROTO);
}

/* djinn_model_info@DJINN_0.1 fills the struct as it was then (up to the
 * fingerprint), and not a byte past it: a program built against it has
 * no room for more. */
static void test_info_v0_1(void **state)
{
	struct answer a[2];
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_conn *conn;
	struct djinn_model_info mi;
	struct peer p;
	uint8_t buf[sizeof(mi)];

	open_answers(a);
	conn = start(&p, a, 1, &s);
	assert_int_equal(djinn_model_open(s, "tiny", &m), 0);
	assert_int_equal(djinn_model_info(m, &mi), 0);
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(__djinn_model_info_v0_1(m, buf), 0);
	assert_int_equal(DJINN_MODEL_INFO_V0_1, 136);
	assert_memory_equal(buf, &mi, DJINN_MODEL_INFO_V0_1);
	for (size_t i = DJINN_MODEL_INFO_V0_1; i < sizeof(buf); i++)
		if (buf[i] != 0x5a)
			fail_msg("byte %zu written", i);
	assert_int_equal(__djinn_model_info_v0_1(NULL, buf), -EINVAL);
	stop(&p, conn);
}

/* The logits answered are a stub; the context releases it when freed. */
static void test_stub_released(void **state)
{
	const int32_t tok[2] = { 2, 5 };
	struct answer a[4];
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	struct djinn_step st;
	struct djinn_conn *conn;
	struct peer p;
	bool seen = false;

	open_answers(a);
	step_answer(&a[2], DJINN_MSG_CTX_PREFILL,
		    (struct djinn_ctx_step_resp){
			    .state = DJINN_CTX_DONE, .len = 2, .logits = 0x66 },
		    NULL, 0);
	a[3].op = DJINN_MSG_CTX_FREE;
	a[3].len = 0;
	conn = start(&p, a, 4, &s);
	open_ctx(s, &m, &c);
	assert_int_equal(djinn_ctx_prefill(c, tok, 2, &lo, &st), 0);
	assert_non_null(st.logits);
	assert_int_equal(djinn_result_desc(st.logits)->dims[1], VOCAB);
	assert_int_equal(djinn_ctx_free(c), 0);
	/* the keeper sends the release: wait for it a little */
	for (int i = 0; i < 200 && !seen; i++) {
		pthread_mutex_lock(&p.lock);
		for (unsigned int k = 0; k < p.nr_released; k++)
			seen |= p.released[k] == 0x66;
		pthread_mutex_unlock(&p.lock);
		if (!seen)
			usleep(10000);
	}
	assert_true(seen);
	stop(&p, conn);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_paused_decode),
		cmocka_unit_test(test_bad_answers),
		cmocka_unit_test(test_stub_released),
		cmocka_unit_test(test_placement),
		cmocka_unit_test(test_info_v0_1),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
