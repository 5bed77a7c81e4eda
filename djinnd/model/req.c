// SPDX-License-Identifier: MIT
/*
 * Requests run in passes: a prefill, a decode or a resume as a series
 * of steps, each the request's part of a pass over its model. See
 * runtime.h ("Requests and passes").
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "model/ctx.h"
#include "sample.h"

/* One row's parameters for djinn_sample() and the SAMPLE op. */
static struct djinn_sample_params sample_params(const struct model_sampling *sp,
						uint64_t rng)
{
	return (struct djinn_sample_params){ .temperature = sp->temperature,
					     .top_p = sp->top_p,
					     .top_k = sp->top_k,
					     .rng = rng };
}

/* What a row's result says (token, or struct djinn_sample_params'
 * codes), with *@rng advanced as for a token drawn: 0, or -EINVAL with
 * why in @msg. */
static int sample_result(int64_t t, const struct model_sampling *sp,
			 uint64_t *rng, int32_t *out, char *msg, size_t msglen)
{
	if (t == DJINN_SAMPLE_BAD_PARAMS) {
		if (!isfinite(sp->temperature) || sp->temperature < 0)
			return errmsg(msg, msglen, -EINVAL,
				      "temperature %g: not 0 or positive",
				      (double)sp->temperature);
		return errmsg(msg, msglen, -EINVAL, "top_p %g: not in (0, 1]",
			      (double)sp->top_p);
	}
	if (t < 0)
		return errmsg(msg, msglen, -EINVAL, "logit %lld is NaN",
			      (long long)(-1 - t));
	if (sp->temperature > 0)
		*rng += DJINN_SAMPLE_GAMMA;
	*out = (int32_t)t;
	return 0;
}

int model_sample(const float *logits, uint32_t V,
		 const struct model_sampling *sp, uint64_t *rng, int32_t *out,
		 char *msg, size_t msglen)
{
	struct djinn_sample_params p = sample_params(sp, *rng);
	int64_t t;
	int ret = djinn_sample(logits, V, &p, &t);

	if (ret)
		return errmsg(msg, msglen, ret, "sampling: %s", strerror(-ret));
	return sample_result(t, sp, rng, out, msg, msglen);
}

/* What a request's next step is. */
enum req_stage {
	RQ_PREFILL, /* a chunk of the prompt, through every layer */
	RQ_PREFILL_BRK, /* the whole prompt, to the breakpoint */
	RQ_DECODE, /* the next token, through every layer */
	RQ_DECODE_BRK, /* the next token, to the breakpoint */
	RQ_RESUME, /* the paused step's other layers */
};

struct model_req_priv {
	enum req_stage stage;
	uint32_t at; /* PREFILL: tokens run; DECODE: tokens made */
	uint32_t rows; /* this pass's */
	uint32_t len0; /* the context's length before the request */
	float *logits0; /* and its logits, to put back on failure */
	bool had_logits;
	uint64_t rng;
	int32_t tok; /* DECODE: the token this step runs */
	/* DECODE: the next token's parameters, for this step's graph to
	 * sample it (all but the last step of a decode) */
	struct djinn_sample_params next;
	struct part p;
};

static void req_end(struct model_req *q, int ret)
{
	q->ret = ret;
	q->done = true;
	ctx_publish(q->c); /* what the crash journal may name from now */
}

/* Save the context's logits: a failure later puts them back. */
static int save_logits(struct model_req *q)
{
	struct model_req_priv *x = q->priv;
	struct model_ctx *c = q->c;
	size_t bytes = c->h->m->cfg.vocab * sizeof(float);

	x->len0 = c->len;
	x->had_logits = c->have_logits;
	x->logits0 = malloc(bytes);
	if (!x->logits0)
		return -ENOMEM;
	memcpy(x->logits0, c->logits, bytes);
	return 0;
}

/* A failure: the context as it was before the request (the steps it
 * committed taken back). */
static void roll_back(struct model_req *q)
{
	struct model_req_priv *x = q->priv;
	struct model_ctx *c = q->c;

	if (!x->logits0)
		return;
	c->len = x->len0;
	vmu_region_resize(c->h->s, c->cache, (uint64_t)x->len0 * c->tok_bytes,
			  NULL);
	memcpy(c->logits, x->logits0, c->h->m->cfg.vocab * sizeof(float));
	c->have_logits = x->had_logits;
}

int model_req_start(struct model_req *q)
{
	struct model_ctx *c = q->c;
	struct model_run *r = &q->r;
	struct model_req_priv *x;
	int ret = 0;

	q->done = false;
	q->ret = 0;
	r->paused = false;
	r->nr_out = 0;
	r->layer = 0;
	q->priv = x = calloc(1, sizeof(*x));
	if (!x) {
		req_end(q, -ENOMEM);
		return -ENOMEM;
	}
	switch (q->kind) {
	case MODEL_REQ_PREFILL:
		ret = ctx_check_step(c, q->tokens, q->n, q->msg, q->msglen);
		if (!ret && r->brk)
			ret = ctx_check_brk(c, r->brk, q->msg, q->msglen);
		if (!ret)
			ret = ctx_journal_wait(c, q->msg, q->msglen);
		x->stage = r->brk ? RQ_PREFILL_BRK : RQ_PREFILL;
		break;
	case MODEL_REQ_DECODE:
		if (c->pz.on) {
			ret = ctx_check_step(c, NULL, 0, q->msg, q->msglen);
			break;
		}
		if (r->brk) {
			ret = ctx_check_brk(c, r->brk, q->msg, q->msglen);
			if (ret)
				break;
		}
		if (!c->have_logits) {
			ret = errmsg(q->msg, q->msglen, -EINVAL,
				     "decode before a prefill: no logits");
			break;
		}
		if (!q->n || q->n > c->max - c->len) {
			ret = errmsg(q->msg, q->msglen,
				     q->n ? -ENOSPC : -EINVAL,
				     q->n ? "context full: %u tokens and %u "
					    "more, room for %u" :
					    "no tokens",
				     c->len, q->n, c->max);
			break;
		}
		ret = ctx_journal_wait(c, q->msg, q->msglen);
		if (ret)
			break;
		/* the random stream as model_ctx_decode() always seeded
		 * it: the same tokens */
		x->rng = q->sp.seed ^
			 ((uint64_t)c->len * 0xd1b54a32d192ed03ull);
		if (!r->brk) {
			x->stage = RQ_DECODE;
			/* a decode that fails is taken back whole */
			ret = save_logits(q);
			break;
		}
		c->pz.tokens = malloc(q->n * sizeof(int32_t));
		if (!c->pz.tokens) {
			ret = -ENOMEM;
			break;
		}
		c->pz.decode = true;
		c->pz.want = q->n;
		c->pz.brk = r->brk;
		c->pz.sp = q->sp;
		c->pz.rng = x->rng;
		x->stage = RQ_DECODE_BRK;
		break;
	case MODEL_REQ_RESUME:
		if (!c->pz.on)
			ret = errmsg(q->msg, q->msglen, -EBUSY,
				     "the context is not paused");
		x->stage = RQ_RESUME;
		break;
	default:
		ret = -EINVAL;
	}
	if (ret)
		req_end(q, ret);
	return ret;
}

uint32_t model_req_rows(const struct model_req *q)
{
	const struct model_req_priv *x = q->priv;

	if (q->done)
		return 0;
	switch (x->stage) {
	case RQ_PREFILL:
		return q->n - x->at;
	case RQ_PREFILL_BRK:
		return q->n;
	case RQ_RESUME:
		return q->c->pz.T;
	default:
		return 1;
	}
}

void model_req_fini(struct model_req *q)
{
	struct model_req_priv *x = q->priv;

	if (!x)
		return;
	free(x->logits0);
	free(x);
	q->priv = NULL;
}

/* A decode fails while starting a token to its breakpoint: it ends,
 * the tokens done stay in the context. */
static void decode_brk_fail(struct model_req *q, int ret)
{
	struct model_ctx *c = q->c;
	uint32_t done = c->pz.done;

	ctx_run_out(c, &q->r, done); /* pz.tokens still there */
	model_ctx_abandon(c);
	req_end(q, ret);
}

/* Set up @q's part of this pass: 0, or it has ended. */
static int begin(struct model_req *q, const struct model_env *env)
{
	struct model_req_priv *x = q->priv;
	struct model_ctx *c = q->c;
	struct model_pause *pz = &c->pz;
	struct part *p = &x->p;
	uint32_t L = c->h->m->cfg.n_layer, want;
	int ret;

	memset(p, 0, sizeof(*p));
	p->c = c;
	p->msg = q->msg;
	p->msglen = q->msglen;
	p->env = env;
	q->msg[0] = 0;
	switch (x->stage) {
	case RQ_PREFILL:
		want = q->n - x->at;
		x->rows = q->grant && q->grant < want ? q->grant : want;
		/* a prompt split over passes is taken back whole if a later
		 * chunk fails */
		if (x->rows < q->n && !x->logits0) {
			ret = save_logits(q);
			if (ret) {
				req_end(q, ret);
				return ret;
			}
		}
		p->tokens = q->tokens + x->at;
		p->n = x->rows;
		p->head = true;
		p->all = q->r.logits != NULL;
		p->l1 = L;
		return 0;
	case RQ_PREFILL_BRK:
		x->rows = q->n;
		p->tokens = q->tokens;
		p->n = q->n;
		p->all = q->r.logits != NULL;
		p->l1 = q->r.brk;
		return 0;
	case RQ_DECODE:
	case RQ_DECODE_BRK:
		x->rows = 1;
		if (x->stage == RQ_DECODE && x->at)
			ret = 0; /* the step before sampled it (finish()) */
		else if (x->stage == RQ_DECODE)
			ret = model_sample(c->logits, c->h->m->cfg.vocab,
					   &q->sp, &x->rng, &x->tok, q->msg,
					   q->msglen);
		else
			ret = model_sample(c->logits, c->h->m->cfg.vocab,
					   &pz->sp, &pz->rng, &x->tok, q->msg,
					   q->msglen);
		if (!ret)
			ret = ctx_check_step(c, &x->tok, 1, q->msg, q->msglen);
		if (ret) {
			if (x->stage == RQ_DECODE_BRK) {
				decode_brk_fail(q, ret);
			} else {
				roll_back(q);
				req_end(q, ret);
			}
			return ret;
		}
		p->tokens = &x->tok;
		p->n = 1;
		p->head = x->stage == RQ_DECODE;
		p->l1 = x->stage == RQ_DECODE ? L : pz->brk;
		/* the next token sampled where the logits are: only it comes
		 * back (the last step's logits stay the context's) */
		if (x->stage == RQ_DECODE && x->at + 1 < q->n) {
			x->next = sample_params(&q->sp, x->rng);
			p->sample = &x->next;
		}
		return 0;
	case RQ_RESUME:
		x->rows = pz->T;
		p->n = pz->T;
		p->head = true;
		p->all = pz->all;
		p->l0 = pz->layer + 1;
		p->l1 = L;
		p->out[0] = pz->hidden;
		p->out[1] = pz->kv;
		return 0;
	}
	return -EINVAL;
}

/* @q's part of the pass has run (or failed): commit it, pause, or end. */
static void finish(struct model_req *q, const struct model_env *env)
{
	struct model_req_priv *x = q->priv;
	struct model_ctx *c = q->c;
	struct model_pause *pz = &c->pz;
	struct part *p = &x->p;
	struct model_step st = { 0 };
	uint32_t V = c->h->m->cfg.vocab;
	int ret = p->job.ret;

	switch (x->stage) {
	case RQ_PREFILL:
		if (!ret) {
			st.all = p->all;
			st.logits = q->r.logits ?
					    q->r.logits + (uint64_t)x->at * V :
					    NULL;
			ret = ctx_commit(c, env, x->rows, p, &st, q->msg,
					 q->msglen);
		}
		if (ret) {
			roll_back(q);
			req_end(q, ret);
			return;
		}
		x->at += x->rows;
		if (x->at == q->n) {
			ctx_run_out(c, &q->r, 0);
			req_end(q, 0);
		}
		return;
	case RQ_PREFILL_BRK:
		if (!ret) {
			ctx_pause(c, p, q->r.brk, q->n, p->all);
			ctx_run_out(c, &q->r, 0);
		}
		req_end(q, ret);
		return;
	case RQ_DECODE:
		if (!ret)
			ret = ctx_commit(c, env, 1, p, &st, q->msg, q->msglen);
		if (ret) {
			roll_back(q);
			q->r.nr_out = 0;
			req_end(q, ret);
			return;
		}
		if (q->r.out)
			q->r.out[x->at] = x->tok;
		q->r.nr_out = ++x->at;
		if (x->at == q->n) {
			req_end(q, 0);
			return;
		}
		/* the token the step sampled, or why not (a NaN): the next
		 * step's, as if it had sampled it itself */
		ret = sample_result(p->token, &q->sp, &x->rng, &x->tok, q->msg,
				    q->msglen);
		if (ret) { /* taken back whole, as a failed step is */
			roll_back(q);
			q->r.nr_out = 0;
			req_end(q, ret);
		}
		return;
	case RQ_DECODE_BRK:
		if (ret) {
			decode_brk_fail(q, ret);
			return;
		}
		ctx_pause(c, p, pz->brk, 1, false);
		pz->tokens[pz->done] = x->tok;
		ctx_run_out(c, &q->r, pz->done + 1);
		req_end(q, 0);
		return;
	case RQ_RESUME:
		if (!ret) {
			st.all = pz->all;
			if (!pz->decode)
				st.logits = q->r.logits;
			ret = ctx_commit(c, env, pz->T, p, &st, q->msg,
					 q->msglen);
		}
		if (ret) { /* still paused: it may be resumed again */
			ctx_run_out(c, &q->r, pz->decode ? pz->done + 1 : 0);
			req_end(q, ret);
			return;
		}
		vmu_region_destroy(c->h->s, pz->hidden);
		vmu_region_destroy(c->h->s, pz->kv);
		pz->hidden = pz->kv = 0;
		pz->on = false;
		if (!pz->decode) {
			ctx_run_out(c, &q->r, 0);
			req_end(q, 0);
		} else if (++pz->done == pz->want) {
			ctx_run_out(c, &q->r, pz->done);
			model_ctx_abandon(c);
			req_end(q, 0);
		} else {
			x->stage = RQ_DECODE_BRK; /* the next token */
		}
		return;
	}
}

void model_pass(struct model_req **qs, unsigned int n,
		const struct model_env *env)
{
	struct part *ps[FWD_MAX_SEQ];
	struct model_req *in[FWD_MAX_SEQ];
	unsigned int np = 0;

	for (unsigned int i = 0; i < n && i < FWD_MAX_SEQ; i++) {
		struct model_req *q = qs[i];

		if (q->done || begin(q, env))
			continue;
		in[np] = q;
		ps[np++] = &((struct model_req_priv *)q->priv)->p;
	}
	if (!np)
		return;
	ctx_pass(ps, np);
	for (unsigned int i = 0; i < np; i++)
		finish(in[i], env);
}

uint32_t model_req_stepped(const struct model_req *q)
{
	const struct model_req_priv *x = q->priv;

	return x ? x->rows : 0;
}

/* ---------------------------------------------------------------------- */
/* One request alone, pass after pass */

static int run_alone(struct model_req *q, const struct model_env *env)
{
	int ret = model_req_start(q);

	while (!ret && !q->done)
		model_pass(&q, 1, env);
	ret = q->ret;
	model_req_fini(q);
	return ret;
}

int model_ctx_run_prefill(struct model_ctx *c, const struct model_env *env,
			  const int32_t *tokens, uint32_t n,
			  struct model_run *r, char *msg, size_t msglen)
{
	struct model_req q = { .c = c,
			       .kind = MODEL_REQ_PREFILL,
			       .tokens = tokens,
			       .n = n,
			       .r = *r,
			       .msg = msg,
			       .msglen = msglen };
	int ret = run_alone(&q, env);

	*r = q.r;
	return ret;
}

int model_ctx_run_decode(struct model_ctx *c, const struct model_env *env,
			 uint32_t n, const struct model_sampling *sp,
			 struct model_run *r, char *msg, size_t msglen)
{
	struct model_req q = { .c = c,
			       .kind = MODEL_REQ_DECODE,
			       .n = n,
			       .sp = *sp,
			       .r = *r,
			       .msg = msg,
			       .msglen = msglen };
	int ret = run_alone(&q, env);

	*r = q.r;
	return ret;
}

int model_ctx_resume(struct model_ctx *c, const struct model_env *env,
		     struct model_run *r, char *msg, size_t msglen)
{
	struct model_req q = { .c = c,
			       .kind = MODEL_REQ_RESUME,
			       .r = *r,
			       .msg = msg,
			       .msglen = msglen };
	int ret = run_alone(&q, env);

	*r = q.r;
	return ret;
}

int model_ctx_decode(struct model_ctx *c, const struct model_env *env,
		     uint32_t n, const struct model_sampling *sp, int32_t *out,
		     char *msg, size_t msglen)
{
	struct model_run r = { .out = out };

	return model_ctx_run_decode(c, env, n, sp, &r, msg, msglen);
}
