// SPDX-License-Identifier: MIT
/*
 * Contexts: the KV cache in a session data region, prefill and decode
 * steps. See runtime.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "clock.h"
#include "errmsg.h"
#include "half.h"
#include "list.h"
#include "model/ctx.h"
#include "model/runtime_test.h"

/* ---------------------------------------------------------------------- */
/* Regions */

static void drop(struct vmu_session *s, uint64_t handle)
{
	if (handle)
		vmu_region_destroy(s, handle);
}

static uint64_t pin_addr(struct vmu_session *s, uint64_t handle, int *ret)
{
	struct vmu_region_info info;

	*ret = vmu_region_pin(s, handle, NULL, &info);
	return *ret ? 0 : info.addr;
}

/* ---------------------------------------------------------------------- */
/* Logits buffers, and what the crash journal names (runtime.h) */

/* @c's logits buffers for a vocabulary of @vocab: CTX_SLOTS in the
 * arena when there is one, else one of its own. Slot 0 first. */
static int slots_new(struct model_ctx *c, uint32_t vocab)
{
	uint64_t bytes = (uint64_t)vocab * sizeof(float);

	pthread_mutex_init(&c->jlock, NULL);
	c->slot_bytes = (bytes + 63) & ~63ull;
	c->slots = arena_alloc(c->slot_bytes * CTX_SLOTS, &c->arena_off);
	if (c->slots) {
		c->nr_slots = CTX_SLOTS;
		/* the arena's memory is reused: no earlier logits show */
		memset(c->slots, 0, c->slot_bytes);
	} else {
		c->slots = calloc(1, c->slot_bytes);
		if (!c->slots) {
			pthread_mutex_destroy(&c->jlock);
			return -ENOMEM;
		}
		c->nr_slots = 1;
	}
	c->logits = (float *)c->slots;
	return 0;
}

static void slots_free(struct model_ctx *c)
{
	if (c->nr_slots == CTX_SLOTS)
		arena_free(c->arena_off, c->slot_bytes * CTX_SLOTS);
	else
		free(c->slots);
	pthread_mutex_destroy(&c->jlock);
}

void ctx_publish(struct model_ctx *c)
{
	pthread_mutex_lock(&c->jlock);
	/* paused: what it has committed (a breakpoint decode's tokens
	 * answered so far), not the paused part */
	c->pub.len = c->len;
	c->pub.slot = c->cur;
	c->pub.have_logits = c->have_logits;
	c->pub.paused = c->pz.on;
	pthread_mutex_unlock(&c->jlock);
}

/* The buffer a step's logits go to: one no record may name, nor the
 * published state (a record begun from now may name it). With one
 * buffer, that one (no journal names it). */
static float *next_slot(struct model_ctx *c, uint32_t *slot)
{
	unsigned int busy = 0;

	*slot = 0;
	if (c->nr_slots == 1)
		return c->logits;
	pthread_mutex_lock(&c->jlock);
	busy |= 1u << c->pub.slot;
	for (unsigned int i = 0; i < 2; i++)
		if (arena_live(c->pin[i].seq))
			busy |= 1u << c->pin[i].slot;
	pthread_mutex_unlock(&c->jlock);
	while (busy & (1u << *slot))
		++*slot; /* three held at most: one of CTX_SLOTS is free */
	return (float *)(c->slots + *slot * c->slot_bytes);
}

/* How long a step waits for the journal to record a truncation. */
#define JOURNAL_WAIT_S 2

int ctx_journal_wait(struct model_ctx *c, char *msg, size_t msglen)
{
	struct timespec until;

	if (c->nr_slots == 1)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += JOURNAL_WAIT_S;
	for (;;) {
		uint64_t seen = arena_in_force();
		uint32_t need = 0;

		pthread_mutex_lock(&c->jlock);
		for (unsigned int i = 0; i < 2; i++)
			if (arena_live(c->pin[i].seq) && c->pin[i].len > need)
				need = c->pin[i].len;
		pthread_mutex_unlock(&c->jlock);
		if (c->len >= need)
			return 0;
		if (arena_wait(seen, &until))
			return errmsg(msg, msglen, -EAGAIN,
				      "the crash journal has not recorded "
				      "the context's truncation to %u tokens "
				      "in %d s (it names %u): try again",
				      c->len, JOURNAL_WAIT_S, need);
	}
}

int model_ctx_journal(struct model_ctx *c, struct model_ctx_saved *out)
{
	uint64_t seq = arena_begun();

	if (c->nr_slots == 1 || !seq)
		return -ENODATA;
	pthread_mutex_lock(&c->jlock);
	c->pin[seq & 1] = c->pub;
	c->pin[seq & 1].seq = seq;
	*out = (struct model_ctx_saved){
		.len = c->pub.len,
		.have_logits = c->pub.have_logits,
		.logits_off = c->arena_off + c->pub.slot * c->slot_bytes,
		.paused = c->pub.paused,
	};
	pthread_mutex_unlock(&c->jlock);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Contexts */

int model_ctx_new(struct model_hold *h, uint32_t max_tokens,
		  struct model_ctx **out, char *msg, size_t msglen)
{
	const struct model_config *cfg = &h->m->cfg;
	struct model_ctx *c;
	int ret;

	if (max_tokens > cfg->n_ctx && cfg->window == cfg->n_ctx)
		return errmsg(msg, msglen, -EINVAL,
			      "context of %u tokens: model %s attends over a "
			      "sliding_window of %u tokens, and djinn runs "
			      "contexts up to it only",
			      max_tokens, h->m->name, cfg->window);
	if (!max_tokens || max_tokens > cfg->n_ctx)
		return errmsg(msg, msglen, -EINVAL,
			      "context of %u tokens: model %s has 1 to %u",
			      max_tokens, h->m->name, cfg->n_ctx);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	ret = slots_new(c, cfg->vocab);
	if (ret) {
		free(c);
		return ret;
	}
	c->h = h;
	c->max = max_tokens;
	c->tok_bytes = 2ull * cfg->n_layer * cfg->n_kv_head * cfg->head_dim *
		       djinn_dtype_size(h->m->layout.dtype);
	ret = vmu_region_create(h->s, c->tok_bytes * max_tokens, &c->cache);
	if (ret) {
		errmsg(msg, msglen, ret, "no KV cache of %llu bytes: %s",
		       (unsigned long long)(c->tok_bytes * max_tokens),
		       strerror(-ret));
		slots_free(c);
		free(c);
		return ret;
	}
	*out = c;
	return 0;
}

void model_ctx_abandon(struct model_ctx *c)
{
	struct vmu_session *s = c->h->s;

	if (c->pz.hidden)
		vmu_region_destroy(s, c->pz.hidden);
	if (c->pz.kv)
		vmu_region_destroy(s, c->pz.kv);
	free(c->pz.tokens);
	memset(&c->pz, 0, sizeof(c->pz));
}

int model_ctx_reserve(struct model_ctx *c, bool relieve, char *msg,
		      size_t msglen)
{
	char why[VMU_MSG_LEN] = "", moved[ST_MSG_LEN] = "";
	int ret;

	ret = vmu_region_reserve(c->h->s, c->cache, why, sizeof(why));
	/* under memory pressure its model streams more of its layers
	 * rather than refuse the context (store.h, model_relieve()) */
	if (ret == -ENOMEM && relieve &&
	    !model_relieve(c->h, c->tok_bytes * c->max, moved, sizeof(moved))) {
		why[0] = 0;
		ret = vmu_region_reserve(c->h->s, c->cache, why, sizeof(why));
	}
	if (ret)
		errmsg(msg, msglen, ret,
		       "context of %u tokens reserves its KV cache of %llu "
		       "bytes (sched.policy static): %s%s%s",
		       c->max, (unsigned long long)(c->tok_bytes * c->max),
		       why[0] ? why : strerror(-ret), moved[0] ? "; " : "",
		       moved);
	return ret;
}

void model_ctx_free(struct model_ctx *c)
{
	if (!c)
		return;
	model_ctx_abandon(c);
	vmu_region_destroy(c->h->s, c->cache);
	slots_free(c);
	free(c->raw);
	free(c);
}

int model_ctx_truncate(struct model_ctx *c, uint32_t len, char *msg,
		       size_t msglen)
{
	int ret;

	if (len > c->len)
		return errmsg(msg, msglen, -EINVAL,
			      "truncate to %u tokens: the context holds %u",
			      len, c->len);
	model_ctx_abandon(c);
	c->len = len;
	c->have_logits = false;
	/* before the cache shrinks: a record names no rows past it */
	ctx_publish(c);
	ret = vmu_region_resize(c->h->s, c->cache, (uint64_t)len * c->tok_bytes,
				NULL);
	if (ret) /* it holds @len tokens all the same, in a larger cache */
		return errmsg(msg, msglen, ret,
			      "truncate to %u tokens: the cache keeps its "
			      "size: %s",
			      len, strerror(-ret));
	return 0;
}

int model_ctx_reset(struct model_ctx *c)
{
	return model_ctx_truncate(c, 0, NULL, 0);
}

uint32_t model_ctx_len(const struct model_ctx *c)
{
	return c->len;
}

uint64_t model_ctx_cache(const struct model_ctx *c)
{
	return c->cache;
}

static uint64_t graphs_run; /* model_ctx_graphs() */
static uint64_t graphs_host_ns; /* model_ctx_host_ns() */

uint64_t model_ctx_graphs(void)
{
	return __atomic_load_n(&graphs_run, __ATOMIC_RELAXED);
}

uint64_t model_ctx_host_ns(void)
{
	return __atomic_load_n(&graphs_host_ns, __ATOMIC_RELAXED);
}

void model_plans_stats(const struct model_hold *h, uint64_t *kept,
		       uint64_t *planned)
{
	*kept = *planned = 0;
	if (h->m->plans)
		fwd_plans_stats(h->m->plans, kept, planned);
}

uint64_t model_ctx_raw_bytes(const struct model_ctx *c)
{
	return c->raw_cap;
}

uint64_t model_ctx_logits_kept(const struct model_ctx *c)
{
	return c->logits_kept;
}

uint64_t model_ctx_token_bytes(const struct model_ctx *c)
{
	return c->tok_bytes;
}

const float *model_ctx_logits(const struct model_ctx *c)
{
	return c->have_logits ? c->logits : NULL;
}

/* Copy @bytes between two regions of @s on the device. */
static int copy_regions(const struct model_env *env, struct vmu_session *s,
			uint64_t dst, uint64_t dst_off, uint64_t src,
			uint64_t bytes)
{
	struct vmu_provider *p = env->b->provider;
	uint64_t da, sa;
	int ret;

	da = pin_addr(s, dst, &ret);
	if (ret)
		return ret;
	sa = pin_addr(s, src, &ret);
	if (!ret) {
		ret = p->ops->copy_dtod(p, da + dst_off, sa, bytes);
		vmu_region_unpin(s, src);
	}
	vmu_region_unpin(s, dst);
	return ret;
}

int model_ctx_restore(struct model_hold *h, uint32_t max, uint32_t len,
		      const struct vmu_fill *kv, uint64_t kv_bytes,
		      const float *logits, uint64_t logits_bytes,
		      struct model_ctx **out, char *msg, size_t msglen)
{
	struct model_ctx *c;
	int ret;

	ret = model_ctx_new(h, max, &c, msg, msglen);
	if (ret)
		return ret;
	if (logits && logits_bytes != h->m->cfg.vocab * sizeof(float)) {
		model_ctx_free(c);
		return errmsg(msg, msglen, -EINVAL,
			      "logits of %llu bytes: model %s has a vocabulary "
			      "of %u",
			      (unsigned long long)logits_bytes, h->m->name,
			      h->m->cfg.vocab);
	}
	if (len > max || kv_bytes != (uint64_t)len * c->tok_bytes) {
		model_ctx_free(c);
		return errmsg(msg, msglen, -EINVAL,
			      "a context of %u of %u tokens with %llu bytes "
			      "of cache: model %s keeps %llu a token",
			      len, max, (unsigned long long)kv_bytes,
			      h->m->name, (unsigned long long)c->tok_bytes);
	}
	if (len) {
		ret = vmu_region_fill(h->s, c->cache, kv_bytes, kv);
		if (ret) {
			model_ctx_free(c);
			return errmsg(msg, msglen, ret,
				      "its cache of %llu bytes: %s",
				      (unsigned long long)kv_bytes,
				      strerror(-ret));
		}
	}
	c->len = len;
	if (logits) {
		memcpy(c->logits, logits, h->m->cfg.vocab * sizeof(float));
		c->have_logits = true;
	}
	ctx_publish(c);
	*out = c;
	return 0;
}

/* The keys and values a step paused after layer @layer holds for @T
 * tokens: (T, 2 (layer + 1), Hk D) of the cache's dtype. */
static uint64_t pause_kv_bytes(const struct model_ctx *c, uint32_t layer,
			       uint32_t T)
{
	return (uint64_t)T * (layer + 1) *
	       (c->tok_bytes / c->h->m->cfg.n_layer);
}

bool model_ctx_pause_get(const struct model_ctx *c, struct model_ctx_pause *p)
{
	const struct model_pause *pz = &c->pz;
	struct vmu_region_info hi, ki;

	if (!pz->on)
		return false;
	*p = (struct model_ctx_pause){
		.layer = pz->layer,
		.T = pz->T,
		.want = pz->want,
		.done = pz->done,
		.brk = pz->brk,
		.all = pz->all,
		.decode = pz->decode,
		.desc = pz->desc,
		.sp = pz->sp,
		.rng = pz->rng,
		.hidden = pz->hidden,
		.kv = pz->kv,
		.tokens = pz->tokens,
	};
	/* what the regions hold, which the restore checks against the
	 * model */
	p->hidden_bytes = vmu_region_info(c->h->s, pz->hidden, &hi) ? 0 :
								      hi.size;
	p->kv_bytes = vmu_region_info(c->h->s, pz->kv, &ki) ? 0 : ki.size;
	return true;
}

/* A region of @c's session with @len bytes from @src: its handle, or 0. */
static uint64_t region_of(struct model_ctx *c, const struct vmu_fill *src,
			  uint64_t len, int *err)
{
	uint64_t r;

	*err = vmu_region_create(c->h->s, len, &r);
	if (*err)
		return 0;
	*err = vmu_region_fill(c->h->s, r, len, src);
	if (*err) {
		vmu_region_destroy(c->h->s, r);
		return 0;
	}
	return r;
}

int model_ctx_pause_set(struct model_ctx *c, const struct model_ctx_pause *p,
			const struct vmu_fill *hidden,
			const struct vmu_fill *kv, char *msg, size_t msglen)
{
	const struct model_config *cfg = &c->h->m->cfg;
	struct model_pause *pz = &c->pz;
	int ret;

	if (pz->on || p->layer + 1 >= cfg->n_layer || !p->T ||
	    p->desc.ndim != 2 || p->desc.dims[0] != p->T ||
	    p->desc.dims[1] != cfg->n_embd ||
	    p->desc.dtype != c->h->m->layout.dtype ||
	    p->hidden_bytes != (uint64_t)p->T * cfg->n_embd *
				       djinn_dtype_size(p->desc.dtype) ||
	    p->kv_bytes != pause_kv_bytes(c, p->layer, p->T) ||
	    p->T > c->max - c->len ||
	    (p->decode && (p->T != 1 || p->done >= p->want ||
			   p->want > c->max || p->brk != p->layer + 1)))
		return errmsg(msg, msglen, -EINVAL,
			      "a step paused after layer %u of %u tokens does "
			      "not fit model %s",
			      p->layer, p->T, c->h->m->name);
	if (p->decode) {
		pz->tokens = malloc(p->want * sizeof(int32_t));
		if (!pz->tokens)
			return -ENOMEM;
		memcpy(pz->tokens, p->tokens, (p->done + 1) * sizeof(int32_t));
	}
	pz->hidden = region_of(c, hidden, p->hidden_bytes, &ret);
	if (pz->hidden)
		pz->kv = region_of(c, kv, p->kv_bytes, &ret);
	if (ret) {
		model_ctx_abandon(c);
		return errmsg(msg, msglen, ret, "its paused step: %s",
			      strerror(-ret));
	}
	pz->on = true;
	pz->layer = p->layer;
	pz->T = p->T;
	pz->all = p->all;
	pz->desc = p->desc;
	pz->decode = p->decode;
	pz->want = p->want;
	pz->done = p->done;
	pz->brk = p->brk;
	pz->sp = p->sp;
	pz->rng = p->rng;
	ctx_publish(c);
	return 0;
}

int model_ctx_fork(struct model_ctx *c, const struct model_env *env,
		   struct model_ctx **out, char *msg, size_t msglen)
{
	struct model_ctx *n;
	int ret;

	if (c->pz.on)
		return errmsg(msg, msglen, -EBUSY,
			      "the context is paused after layer %u",
			      c->pz.layer);
	ret = model_ctx_new(c->h, c->max, &n, msg, msglen);
	if (ret)
		return ret;
	if (c->len) {
		ret = vmu_region_resize(c->h->s, n->cache,
					c->len * c->tok_bytes, NULL);
		if (!ret)
			ret = copy_regions(env, c->h->s, n->cache, 0, c->cache,
					   c->len * c->tok_bytes);
		if (ret) {
			errmsg(msg, msglen, ret, "fork: copying the cache: %s",
			       strerror(-ret));
			model_ctx_free(n);
			return ret;
		}
	}
	n->len = c->len;
	n->have_logits = c->have_logits;
	memcpy(n->logits, c->logits, c->h->m->cfg.vocab * sizeof(float));
	ctx_publish(n);
	*out = n;
	return 0;
}

void ctx_part_drop(struct part *p)
{
	struct model_ctx *c = p->c;

	if (p->own) {
		drop(c->h->s, p->out[0]);
		drop(c->h->s, p->out[1]);
	}
	if (p->kv_in_cache) /* not counted: the rows go */
		vmu_region_resize(c->h->s, c->cache, c->len * c->tok_bytes,
				  NULL);
	p->logits_host = NULL; /* the context's */
	p->kv_in_cache = false;
	p->out[0] = p->out[1] = 0;
	p->own = false;
}

/* The step's position inputs in host memory (*@mem, malloc'd): gpt2
 * positions, the llama family's cos and sin. */
static int positions(struct model_ctx *c, uint32_t n, struct fwd_seq *a,
		     void **mem)
{
	const struct model_config *cfg = &c->h->m->cfg;
	unsigned int dt = c->h->m->layout.dtype;
	size_t es = djinn_dtype_size(dt), D = cfg->head_dim;
	float inv[MODEL_MAX_HEAD_DIM / 2];
	uint8_t *buf;
	float *cs;

	if (cfg->arch == MODEL_GPT2) {
		int32_t *pos = malloc(n * sizeof(*pos));

		if (!pos)
			return -ENOMEM;
		for (uint32_t t = 0; t < n; t++)
			pos[t] = (int32_t)(c->len + t);
		a->pos = *mem = pos;
		return 0;
	}
	/*
	 * angle(t, i) = (P + t) inv_freq[i], i < D / 2, twice over, in
	 * float32 as transformers computes it; cos and sin scaled by the
	 * attention factor. Dynamic RoPE's frequencies follow the length
	 * of the sequence this call ends at, as transformers' do.
	 */
	cs = malloc(2 * n * D * sizeof(float));
	buf = malloc(2 * n * D * es);
	if (!cs || !buf) {
		free(cs);
		free(buf);
		return -ENOMEM;
	}
	if (cfg->rope.type == ROPE_DYNAMIC && c->len + n > cfg->n_pos)
		model_rope_freqs(cfg, c->len + n, inv);
	else
		memcpy(inv, cfg->rope.inv_freq, D / 2 * sizeof(float));
	for (uint32_t t = 0; t < n; t++)
		for (size_t i = 0; i < D / 2; i++) {
			float ang = (float)(c->len + t) * inv[i];
			float co = (float)cos(ang) * cfg->rope.attn_factor;
			float si = (float)sin(ang) * cfg->rope.attn_factor;

			cs[t * D + i] = cs[t * D + i + D / 2] = co;
			cs[(n + t) * D + i] = cs[(n + t) * D + i + D / 2] = si;
		}
	djinn_half_from_f32(dt, cs, buf, 2 * n * D);
	free(cs);
	a->cos = buf;
	a->sin = buf + n * D * es;
	*mem = buf;
	return 0;
}

int ctx_check_step(struct model_ctx *c, const int32_t *tokens, uint32_t n,
		   char *msg, size_t msglen)
{
	const struct model_config *cfg = &c->h->m->cfg;

	if (c->pz.on)
		return errmsg(msg, msglen, -EBUSY,
			      "the context is paused after layer %u: resume, "
			      "reset or free it",
			      c->pz.layer);
	if (!n)
		return errmsg(msg, msglen, -EINVAL, "no tokens");
	if (n > c->max - c->len)
		return errmsg(
			msg, msglen, -ENOSPC,
			"context full: %u tokens and %u more, room for %u",
			c->len, n, c->max);
	for (uint32_t i = 0; tokens && i < n; i++)
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= cfg->vocab)
			return errmsg(
				msg, msglen, -EINVAL,
				"token %u is %d: not in the vocabulary of "
				"%u",
				i, tokens[i], cfg->vocab);
	return 0;
}

void ctx_part_inputs_drop(struct part *p)
{
	free(p->in_mem);
	p->in_mem = NULL;
	p->have_in = false;
}

/*
 * The inputs @p's graphs take besides the weights and the state, for
 * all its layers [l0, l1) at once, in host memory (each graph stages
 * them on the executor's stack): the ids (from layer 0, the request's
 * own tokens) and positions (from layer 0, and on RoPE models for every
 * graph).
 */
static int part_inputs(struct part *p, char *msg, size_t msglen)
{
	struct model_ctx *c = p->c;
	int ret = 0;

	p->in.T = p->n;
	if (!p->l0)
		p->in.ids = p->tokens;
	if (!p->l0 || (c->h->m->cfg.arch != MODEL_GPT2 && p->l0 < p->l1))
		ret = positions(c, p->n, &p->in, &p->in_mem);
	if (ret)
		return errmsg(msg, msglen, ret, "step inputs: %s",
			      strerror(-ret));
	p->have_in = true;
	return 0;
}

/* The raw buffer back to one row after a step that wanted every row's
 * logits (a prompt's can be a gigabyte): only a row stays between
 * steps. */
static void ctx_raw_trim(struct model_ctx *c)
{
	size_t row = (size_t)c->h->m->cfg.vocab *
		     djinn_dtype_size(c->h->m->layout.dtype);

	if (c->raw_cap > row) {
		free(c->raw);
		c->raw = NULL;
		c->raw_cap = 0;
	}
}

/* The raw buffer holds @bytes (grown, and kept): 0 or -ENOMEM. */
static int ctx_raw_room(struct model_ctx *c, size_t bytes)
{
	void *b;

	if (bytes <= c->raw_cap)
		return 0;
	b = realloc(c->raw, bytes);
	if (!b)
		return -ENOMEM;
	c->raw = b;
	c->raw_cap = bytes;
	return 0;
}

/* The step's graph samples its token (fwd_seq.sample: its last row's,
 * so never with every row's logits). */
static bool part_samples(const struct part *p)
{
	return p->sample && !p->all;
}

/*
 * Where the graph that ends @p's step puts its outputs (struct part):
 * the cache grown by its rows (*@grown), and the context's raw buffer
 * for its logits unless the caller keeps them or the graph samples its
 * token from them (*@logits; it grows to the most rows a step asked
 * for, and stays). On failure, nothing.
 */
static int head_places(struct part *p, const struct fwd_seq *sq, bool *grown,
		       void **logits, char *msg, size_t msglen)
{
	struct model_ctx *c = p->c;
	size_t row = (size_t)c->h->m->cfg.vocab *
		     djinn_dtype_size(c->h->m->layout.dtype);
	uint64_t rows = (uint64_t)sq->P + sq->T;
	int ret;

	ret = vmu_region_resize(c->h->s, c->cache, rows * c->tok_bytes, NULL);
	if (ret)
		return errmsg(msg, msglen, ret,
			      "KV cache growth to %llu tokens: %s",
			      (unsigned long long)rows,
			      ret == -EDQUOT ? "over the tenant's quota of "
					       "device memory" :
					       strerror(-ret));
	*grown = true;
	if (p->keep || part_samples(p))
		return 0;
	if (ctx_raw_room(c, row * (sq->all ? sq->T : 1))) {
		vmu_region_resize(c->h->s, c->cache, c->len * c->tok_bytes,
				  NULL);
		*grown = false;
		return errmsg(msg, msglen, -ENOMEM, "no memory for the logits");
	}
	*logits = c->raw;
	return 0;
}

/*
 * One graph: layers [@l0, @l1) of the steps of the @np parts @ps
 * (lbase: fwd_args'). Each part's inputs are its @out, and become the
 * graph's outputs for it. On failure nothing of any part changes, and
 * @msg says why.
 */
static int run_graph(struct part **ps, unsigned int np,
		     const struct model_env *env, uint32_t l0, uint32_t l1,
		     uint64_t lbase, char *msg, size_t msglen)
{
	struct fwd_seq seq[FWD_MAX_SEQ];
	struct djinn_tensor_desc descs[2 * FWD_MAX_SEQ];
	bool pinned[FWD_MAX_SEQ][3], grown[FWD_MAX_SEQ] = { false };
	void *lhost[FWD_MAX_SEQ] = { NULL };
	struct fwd_args a = {
		.l0 = l0, .l1 = l1, .lbase = lbase, .nr_seq = np, .seq = seq
	};
	struct graph_result res = { 0 };
	uint64_t t0 = mono_ns();
	struct gbuild *g;
	unsigned int i;
	int ret = 0;

	memset(pinned, 0, sizeof(pinned));
	g = gb_new();
	if (!g)
		return -ENOMEM;
	g->plans = ps[0]->c->h->m->plans;
	for (i = 0; i < np && !ret; i++) {
		struct part *p = ps[i];
		struct model_ctx *c = p->c;
		struct vmu_session *s = c->h->s;
		struct fwd_seq *sq = &seq[i];

		if (!p->have_in) {
			ret = part_inputs(p, msg, msglen);
			if (ret)
				break;
		}
		*sq = p->in;
		sq->s = s;
		sq->P = c->len;
		sq->head = p->head && l1 == c->h->m->cfg.n_layer;
		sq->all = p->all;
		if (sq->head)
			ret = head_places(p, sq, &grown[i], &lhost[i], msg,
					  msglen);
		if (!ret && (sq->P || sq->head)) {
			sq->cache = pin_addr(s, c->cache, &ret);
			pinned[i][0] = !ret;
			if (!ret && sq->head)
				sq->kv_into = sq->cache + sq->P * c->tok_bytes;
		}
		sq->logits_host = lhost[i];
		sq->sample = sq->head && part_samples(p) ? p->sample : NULL;
		sq->token_host = &p->token;
		if (!ret && l0) {
			sq->hidden = pin_addr(s, p->out[0], &ret);
			pinned[i][1] = !ret;
		}
		if (!ret && l0) {
			sq->kv_in = pin_addr(s, p->out[1], &ret);
			pinned[i][2] = !ret;
		}
		if (ret && !msg[0])
			errmsg(msg, msglen, ret, "step inputs: %s",
			       strerror(-ret));
	}
	if (!ret) {
		ret = model_build_forward(g, ps[0]->c->h, &a);
		if (ret)
			errmsg(msg, msglen, ret, "building the graph: %s",
			       strerror(-ret));
		else {
			__atomic_add_fetch(&graphs_run, 1, __ATOMIC_RELAXED);
			ret = gb_run(g, env, ps[0]->c->h->s, &res, descs, msg,
				     msglen);
		}
	}
	for (i = 0; i < np; i++) {
		struct part *p = ps[i];
		struct vmu_session *s = p->c->h->s;

		if (pinned[i][0])
			vmu_region_unpin(s, p->c->cache);
		if (pinned[i][1])
			vmu_region_unpin(s, p->out[0]);
		if (pinned[i][2])
			vmu_region_unpin(s, p->out[1]);
		if (ret) {
			if (grown[i]) /* as it was */
				vmu_region_resize(s, p->c->cache,
						  p->c->len * p->c->tok_bytes,
						  NULL);
			ctx_raw_trim(p->c);
			continue;
		}
		ctx_part_drop(p);
		p->out[0] = res.regions[2 * i];
		p->out[1] = res.regions[2 * i + 1];
		p->desc[0] = descs[2 * i];
		p->desc[1] = descs[2 * i + 1];
		p->kv_in_cache = grown[i];
		p->logits_host = lhost[i];
		p->own = true;
	}
	gb_free(g);
	if (!ret) /* all but the backend's running of the nodes */
		__atomic_add_fetch(&graphs_host_ns, mono_ns() - t0 - res.run_ns,
				   __ATOMIC_RELAXED);
	return ret;
}

/* Where a part's step puts its output in the graph of [l0, l1): its
 * token (0), its logits to the host (1) or kept on the device (2), its
 * hidden state (3). */
#define PART_KINDS 4

static unsigned int part_kind(const struct part *p, uint32_t l1)
{
	if (!p->head || l1 != p->c->h->m->cfg.n_layer)
		return 3;
	if (part_samples(p))
		return 0;
	return p->keep ? 2 : 1;
}

void ctx_layers(struct pass_job **jobs, unsigned int n, uint32_t l0,
		uint32_t l1, uint64_t lbase)
{
	struct part *ps[FWD_MAX_SEQ], *in[FWD_MAX_SEQ];
	unsigned int k = 0;
	int ret;

	if (!n || n > FWD_MAX_SEQ)
		return;
	for (unsigned int i = 0; i < n; i++)
		ps[i] = container_of(jobs[i], struct part, job);
	/* the graph takes them by kind, in their order within each: its
	 * outputs' pattern is then a function of how many of each there
	 * are, not of where, and a pass's plan is kept for the passes like
	 * it (struct fwd_plans); the sampling rows lead the logits. All
	 * are of one model: the graph's plans and hold are in[0]'s. */
	for (unsigned int kind = 0; kind < PART_KINDS; kind++)
		for (unsigned int i = 0; i < n; i++)
			if (part_kind(ps[i], l1) == kind)
				in[k++] = ps[i];
	ret = run_graph(in, n, ps[0]->env, l0, l1, lbase, ps[0]->msg,
			ps[0]->msglen);
	if (!ret || n == 1) {
		jobs[0]->ret = ret;
		return;
	}
	ps[0]->msg[0] = 0;
	if (ret == -E2BIG || ret == -ENOMEM) {
		/* more nodes than a graph holds, or more memory than the
		 * device has for the outputs and the stack now (each output
		 * is a region of its own): two graphs of half as many
		 * contexts, each weight read once for each */
		ctx_layers(jobs, n / 2, l0, l1, lbase);
		ctx_layers(jobs + n / 2, n - n / 2, l0, l1, lbase);
		return;
	}
	for (unsigned int i = 0; i < n; i++)
		jobs[i]->ret = run_graph(&ps[i], 1, ps[i]->env, l0, l1, lbase,
					 ps[i]->msg, ps[i]->msglen);
}

void ctx_pass(struct part **ps, unsigned int np)
{
	const struct model *m = ps[0]->c->h->m;
	struct pass_job *jobs[FWD_MAX_SEQ];
	unsigned int nj = 0;

	for (unsigned int i = 0; i < np; i++) {
		struct part *p = ps[i];

		p->msg[0] = 0;
		p->job.l0 = p->l0;
		p->job.l1 = p->l1;
		p->job.fn = ctx_layers;
		/* the weights stay where they are until it leaves
		 * (store.h) */
		p->job.ret = model_step_enter(p->c->h, p->msg, p->msglen);
		p->entered = !p->job.ret;
		if (!p->entered)
			continue;
		if (p->l0 == p->l1) /* a paused step's head only */
			ctx_layers((struct pass_job *[]){ &p->job }, 1, p->l0,
				   p->l1, 0);
		else
			jobs[nj++] = &p->job;
	}
	/* m->stream stays as it is while its steps are entered */
	if (nj)
		model_pass_layers(m->stream, jobs, nj);
	for (unsigned int i = 0; i < np; i++) {
		struct part *p = ps[i];

		if (p->entered) {
			if (p->job.ret && !p->msg[0])
				errmsg(p->msg, p->msglen, p->job.ret,
				       "%s model %s: %s",
				       m->stream ? "streaming" : "running",
				       m->name, strerror(-p->job.ret));
			model_step_leave(p->c->h);
		}
		p->entered = false;
		ctx_part_inputs_drop(p);
		if (p->job.ret)
			ctx_part_drop(p);
	}
}

/* Run @p's layers alone. On failure the part's own regions are gone. */
static int run_step(struct part *p)
{
	ctx_pass(&p, 1);
	return p->job.ret;
}

int ctx_commit(struct model_ctx *c, const struct model_env *env, uint32_t n,
	       struct part *p, struct model_step *st, char *msg, size_t msglen)
{
	const struct model_config *cfg = &c->h->m->cfg;
	struct vmu_session *s = c->h->s;
	unsigned int dt = c->h->m->layout.dtype;
	uint64_t P = c->len, rows, row_bytes;
	void *host;
	int ret;

	/* the step's last graph wrote its keys and values into the cache,
	 * past its rows (head_places()): they count from here */
	if (!p->kv_in_cache) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "the step's keys and values are not in the cache");
		goto out;
	}
	p->kv_in_cache = false; /* the rows are the cache's to undo here */
	if (part_samples(p)) {
		/* the graph sampled its token (p->token) from logits that
		 * were its own: the context has none for its new length
		 * until a step keeps them (a decode's last) */
		c->have_logits = false;
		c->len += n;
		ret = 0;
		goto out;
	}

	/* the logits, (rows, V) in the weights' dtype, in the context's
	 * raw buffer: every row for the caller's copy, else the last, which
	 * the context keeps (there already, logits_host, unless the caller
	 * keeps them on the device: read back from that region then) */
	rows = p->desc[0].dims[0];
	row_bytes = cfg->vocab * djinn_dtype_size(dt);
	ret = 0;
	if (p->logits_host) {
		host = p->logits_host;
		p->logits_host = NULL;
		if (!st->logits)
			memmove(host, (uint8_t *)host + (rows - 1) * row_bytes,
				row_bytes);
	} else {
		uint64_t want = st->logits ? rows * row_bytes : row_bytes;

		ret = ctx_raw_room(c, want);
		host = c->raw;
		if (!ret)
			ret = vmu_region_read(
				s, p->out[0],
				st->logits ? 0 : (rows - 1) * row_bytes, host,
				want);
	}
	if (!ret) {
		uint32_t slot;
		float *into = next_slot(c, &slot);

		if (st->logits)
			djinn_half_to_f32(dt, host, st->logits,
					  rows * cfg->vocab);
		djinn_half_to_f32(dt,
				  (uint8_t *)host +
					  (st->logits ? rows - 1 : 0) *
						  row_bytes,
				  into, cfg->vocab);
		c->logits = into;
		c->cur = slot;
		c->have_logits = true;
		c->logits_kept++;
		c->len += n;
		if (st->keep) { /* the caller's now */
			st->region = p->out[0];
			st->desc = p->desc[0];
			p->out[0] = 0;
		}
	} else {
		errmsg(msg, msglen, ret, "reading the logits: %s",
		       strerror(-ret));
		vmu_region_resize(s, c->cache, P * c->tok_bytes, NULL);
	}
out:
	ctx_part_drop(p);
	ctx_raw_trim(c);
	return ret;
}

int model_ctx_step(struct model_ctx *c, const struct model_env *env,
		   const int32_t *tokens, uint32_t n, struct model_step *st,
		   char *msg, size_t msglen)
{
	struct part p = { .c = c,
			  .tokens = tokens,
			  .n = n,
			  .head = true,
			  .all = st->all,
			  .keep = st->keep,
			  .l1 = c->h->m->cfg.n_layer,
			  .msg = msg,
			  .msglen = msglen,
			  .env = env };
	int ret;

	st->region = 0;
	ret = ctx_check_step(c, tokens, n, msg, msglen);
	if (!ret)
		ret = ctx_journal_wait(c, msg, msglen);
	if (!ret)
		ret = run_step(&p);
	if (!ret)
		ret = ctx_commit(c, env, n, &p, st, msg, msglen);
	ctx_publish(c);
	return ret;
}

int model_ctx_prefill(struct model_ctx *c, const struct model_env *env,
		      const int32_t *tokens, uint32_t n, float *logits,
		      char *msg, size_t msglen)
{
	struct model_step st = { .all = logits != NULL, .logits = logits };

	return model_ctx_step(c, env, tokens, n, &st, msg, msglen);
}

/* ---------------------------------------------------------------------- */
/* Breakpoints */

static uint64_t pause_bytes(const struct model_ctx *c)
{
	return c->pz.desc.dims[0] * c->pz.desc.dims[1] *
	       djinn_dtype_size(c->pz.desc.dtype);
}

bool model_ctx_paused(const struct model_ctx *c, struct model_pause_info *pi)
{
	if (!c->pz.on)
		return false;
	if (pi) {
		pi->layer = c->pz.layer;
		pi->T = c->pz.T;
		pi->decode = c->pz.decode;
		pi->want = c->pz.want;
		pi->done = c->pz.done;
		pi->hidden = c->pz.hidden;
		pi->desc = c->pz.desc;
	}
	return true;
}

int ctx_check_brk(struct model_ctx *c, uint32_t brk, char *msg, size_t msglen)
{
	uint32_t L = c->h->m->cfg.n_layer;

	if (brk > L)
		return errmsg(
			msg, msglen, -EINVAL,
			"break after layer %u: model %s has layers 0 to %u",
			brk - 1, c->h->m->name, L - 1);
	return 0;
}

void ctx_pause(struct model_ctx *c, struct part *p, uint32_t brk, uint32_t n,
	       bool all)
{
	c->pz.on = true;
	c->pz.layer = brk - 1;
	c->pz.T = n;
	c->pz.all = all;
	c->pz.hidden = p->out[0];
	c->pz.kv = p->out[1];
	c->pz.desc = p->desc[0];
	p->out[0] = p->out[1] = 0;
	p->own = false;
}

void ctx_run_out(struct model_ctx *c, struct model_run *r, uint32_t nr)
{
	if (nr && r->out)
		memcpy(r->out, c->pz.tokens, nr * sizeof(int32_t));
	r->nr_out = nr;
	r->paused = c->pz.on;
	r->layer = c->pz.on ? c->pz.layer : 0;
}

int model_ctx_hidden_copy(struct model_ctx *c, const struct model_env *env,
			  uint64_t *region, char *msg, size_t msglen)
{
	struct vmu_session *s = c->h->s;
	uint64_t bytes;
	int ret;

	if (!c->pz.on)
		return errmsg(msg, msglen, -EBUSY, "the context is not paused");
	bytes = pause_bytes(c);
	ret = vmu_region_create(s, bytes, region);
	if (ret)
		goto out;
	ret = vmu_region_resize(s, *region, bytes, NULL);
	if (!ret)
		ret = copy_regions(env, s, *region, 0, c->pz.hidden, bytes);
	if (ret) {
		vmu_region_destroy(s, *region);
		*region = 0;
	}
out:
	if (ret)
		errmsg(msg, msglen, ret, "copying the hidden state: %s",
		       strerror(-ret));
	return ret;
}

int model_ctx_steer(struct model_ctx *c, const struct model_env *env,
		    uint64_t addr, const struct djinn_tensor_desc *d, char *msg,
		    size_t msglen)
{
	struct vmu_provider *p = env->b->provider;
	const struct djinn_tensor_desc *w = &c->pz.desc;
	struct vmu_session *s = c->h->s;
	uint64_t da;
	int ret;

	if (!c->pz.on)
		return errmsg(msg, msglen, -EBUSY, "the context is not paused");
	if (d->dtype != w->dtype || d->ndim != 2 || d->dims[0] != w->dims[0] ||
	    d->dims[1] != w->dims[1])
		return errmsg(msg, msglen, -EINVAL,
			      "steering tensor of dtype %u and %u dims (%llu, "
			      "%llu): the hidden state is (%llu, %llu) of "
			      "dtype %u",
			      d->dtype, d->ndim, (unsigned long long)d->dims[0],
			      (unsigned long long)(d->ndim > 1 ? d->dims[1] :
								 0),
			      (unsigned long long)w->dims[0],
			      (unsigned long long)w->dims[1], w->dtype);
	da = pin_addr(s, c->pz.hidden, &ret);
	if (!ret) {
		ret = p->ops->copy_dtod(p, da, addr, pause_bytes(c));
		vmu_region_unpin(s, c->pz.hidden);
	}
	if (ret)
		errmsg(msg, msglen, ret, "writing the hidden state: %s",
		       strerror(-ret));
	return ret;
}

const struct model *model_ctx_model(const struct model_ctx *c)
{
	return c->h->m;
}
