// SPDX-License-Identifier: MIT
/*
 * generate: text generation from a model djinnd holds, in two sessions
 * at once.
 *
 * Two threads share one connection, each with a session of its own: each
 * opens the model by name (djinnd loads its weights once, into the
 * shared text segment; the client never holds them), makes a context,
 * prefills the same prompt with the logits kept on the daemon, reads
 * just the logit of the token greedy decoding will pick, and generates
 * 16 tokens: the first session greedily, the second sampled (temperature
 * 0.8, top-k 40, top-p 0.95, seed 42), so its tokens repeat from run to
 * run. Then both hold the model for HOLD seconds (for djinnctl model
 * list to see them) and close.
 *
 *   generate [ADDR] [MODEL] [HOLD]   MODEL: default tiny-gpt2; HOLD: 0
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <djinn/djinn.h>

#define NR_TOKENS 16

struct gen {
	struct djinn_conn *conn;
	const char *model;
	unsigned int idx;
	pthread_barrier_t *done;
	unsigned int hold;
	int ret;
	char out[1024];
};

static const int32_t prompt[] = { 464, 2068, 7586, 21831, 18045, 625 };
#define PROMPT_LEN (sizeof(prompt) / sizeof(prompt[0]))

static void *run(void *arg)
{
	struct gen *g = arg;
	const struct djinn_sampling sampled = {
		.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 42
	};
	struct djinn_session_opts so = DJINN_SESSION_OPTS_INIT;
	struct djinn_step_opts lo = { .logits = true };
	struct djinn_session *s = NULL;
	struct djinn_model *m = NULL;
	struct djinn_ctx *c = NULL;
	struct djinn_model_info mi;
	struct djinn_step st;
	int32_t toks[NR_TOKENS], p[PROMPT_LEN];
	char tenant[16];
	float logit;
	size_t n = 0;
	int ret;

	snprintf(tenant, sizeof(tenant), "generate-%u", g->idx);
	so.tenant = tenant;
	ret = djinn_session_open(g->conn, &so, &s);
	if (!ret)
		ret = djinn_model_open(s, g->model, &m);
	if (ret) {
		snprintf(g->out, sizeof(g->out), "cannot open %s: %s (%s)",
			 g->model, djinn_last_error(), strerror(-ret));
		goto out;
	}
	djinn_model_info(m, &mi);
	/* The prompt, folded into the model's vocabulary. */
	for (size_t i = 0; i < PROMPT_LEN; i++)
		p[i] = prompt[i] % (int32_t)mi.vocab;
	ret = djinn_ctx_new(m, 0, &c);
	if (!ret)
		ret = djinn_ctx_prefill(c, p, PROMPT_LEN, &lo, &st);
	if (!ret)
		ret = djinn_ctx_decode(c, NR_TOKENS, g->idx ? &sampled : NULL,
				       toks, NULL, NULL);
	/* 4 bytes of the prefill's logits: those of the first token */
	if (ret == NR_TOKENS)
		ret = djinn_result_read(st.logits, (uint64_t)toks[0] * 4, 4,
					&logit);
	if (ret) {
		snprintf(g->out, sizeof(g->out), "generating: %s (%s)",
			 djinn_last_error(), strerror(-ret));
		goto out;
	}
	n = (size_t)snprintf(g->out, sizeof(g->out),
			     "session %u (%s, %s): %u prompt tokens ->", g->idx,
			     tenant, g->idx ? "sampled, seed 42" : "greedy",
			     (unsigned int)PROMPT_LEN);
	for (int i = 0; i < NR_TOKENS && n < sizeof(g->out); i++)
		n += (size_t)snprintf(g->out + n, sizeof(g->out) - n, " %d",
				      toks[i]);
	if (n < sizeof(g->out))
		snprintf(g->out + n, sizeof(g->out) - n,
			 "\n  first token's logit %.4f (read: 4 of %u bytes); "
			 "context holds %d tokens",
			 logit, mi.vocab * 4, djinn_ctx_len(c));
out:
	g->ret = ret;
	/* Both have the model open now, or failed. */
	pthread_barrier_wait(g->done);
	sleep(g->hold);
	djinn_ctx_free(c);
	if (m)
		djinn_model_close(m);
	if (s)
		djinn_session_close(s);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *addr = argc > 1 ? argv[1] : NULL;
	struct gen g[2] = { { 0 } };
	struct djinn_conn_stats cs;
	pthread_barrier_t done;
	pthread_t th[2];
	int ret;

	ret = djinn_connect(addr, &g[0].conn);
	if (ret) {
		fprintf(stderr, "generate: cannot connect to %s: %s\n",
			addr ? addr : "djinnd", strerror(-ret));
		return 1;
	}
	pthread_barrier_init(&done, NULL, 3);
	for (unsigned int i = 0; i < 2; i++) {
		g[i].conn = g[0].conn;
		g[i].model = argc > 2 ? argv[2] : "tiny-gpt2";
		g[i].hold = argc > 3 ? (unsigned int)atoi(argv[3]) : 0;
		g[i].idx = i;
		g[i].done = &done;
		pthread_create(&th[i], NULL, run, &g[i]);
	}
	pthread_barrier_wait(&done);
	for (unsigned int i = 0; i < 2; i++)
		printf("%s\n", g[i].out);
	if (g[0].hold && !g[0].ret && !g[1].ret)
		printf("both sessions hold %s for %u s\n", g[0].model,
		       g[0].hold);
	fflush(stdout);
	for (unsigned int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&done);
	djinn_conn_stats(g[0].conn, &cs);
	printf("over the wire, both sessions: %" PRIu64 " bytes sent, %" PRIu64
	       " received, in %" PRIu64 " requests: no weights\n",
	       cs.bytes_sent, cs.bytes_received, cs.requests);
	djinn_disconnect(g[0].conn);
	return g[0].ret || g[1].ret ? 1 : 0;
}
