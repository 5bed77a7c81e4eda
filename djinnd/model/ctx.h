/* SPDX-License-Identifier: MIT */
/*
 * Inside a context (internal to djinnd/model: ctx.c, the context and
 * its parts; req.c, requests run in passes). runtime.h is the runtime.
 */
#ifndef DJINN_MODEL_CTX_H
#define DJINN_MODEL_CTX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "model/runtime.h"
#include "model/stream.h"

/*
 * struct model_pause - a step stopped after layer @layer
 * @T:      its new tokens
 * @all:    it wants the logits of every one of them
 * @hidden: data region (T, n_embd) in the weights' dtype: the hidden
 *          state after @layer, what the second part starts from
 * @kv:     data region (T, 2 (layer + 1), Hk D): the first part's new
 *          keys and values, appended to the cache with the second's
 * @desc:   @hidden's shape and dtype
 * @decode: a decode of @want tokens, @done of them through every layer,
 *          the next one (@tokens[@done]) paused; @sp and @rng its
 *          sampling; @brk the breakpoint (layer + 1)
 */
struct model_pause {
	bool on;
	uint32_t layer, T;
	bool all;
	uint64_t hidden, kv;
	struct djinn_tensor_desc desc;
	bool decode;
	uint32_t want, done, brk;
	struct model_sampling sp;
	uint64_t rng;
	int32_t *tokens;
};

/* The logits buffers a context keeps in the crash journal's arena
 * (logits.c): the one its last request left, those two records may
 * name, and one for the step under way. */
#define CTX_SLOTS 4

/*
 * struct ctx_mark - a context as a crash journal's record may name it
 * @seq:    the record (a pin; 0: none), or 0 (the published state)
 * @len:    its tokens
 * @slot:   the logits buffer that holds its logits (@have_logits)
 * @paused: a step of its is paused at a breakpoint (the record names
 *          the context as it was before that step)
 */
struct ctx_mark {
	uint64_t seq;
	uint32_t len, slot;
	bool have_logits, paused;
};

struct model_ctx {
	struct model_hold *h;
	uint64_t cache; /* region handle */
	uint32_t len, max;
	uint64_t tok_bytes;
	float *logits; /* vocab: slot @cur of @slots */
	bool have_logits;
	/* @nr_slots logits buffers of @slot_bytes, from @slots: the arena's
	 * (at @arena_off, CTX_SLOTS of them) or the context's own (one) */
	uint8_t *slots;
	uint32_t nr_slots, cur;
	uint64_t slot_bytes, arena_off;
	/* what the crash journal names (model_ctx_journal()), under @jlock:
	 * the context as its last request left it (@pub), and what each of
	 * the journal's two slots' records named (@pin, by seq & 1). A step
	 * writes its logits into a buffer none of them holds, and rows of
	 * the cache at or past every live pin's length. */
	pthread_mutex_t jlock;
	struct ctx_mark pub, pin[2];
	struct model_pause pz;
	/* the last step's logits as its graph left them (the weights'
	 * dtype), kept from step to step: no allocation a step (one row;
	 * a step that wants every row's grows it for its own time) */
	void *raw;
	size_t raw_cap;
	uint64_t logits_kept; /* steps whose logits it took (runtime_test.h) */
};

/*
 * struct part - one context's step going through layers [l0, l1)
 * @tokens, @n: its new tokens (the input of layer 0)
 * @head:   the step ends at l1 == n_layer (logits); else it pauses
 * @all:    with @head: every token's logits, else the last one's
 * @out:    data regions: entering the first layer, the hidden state and
 *          the keys and values of the layers before (0 at layer 0);
 *          after the last, the logits (@head) or the hidden state, and
 *          the keys and values of layers 0 .. l1 - 1; @desc their shapes
 * @own:    @out are the step's (else the paused context's): a step that
 *          fails destroys its own only
 * @in, @in_mem: the step's ids and positions (cos and sin) in host
 *          memory (the positions in @in_mem, malloc'd), made once for
 *          all its graphs (@have_in)
 * @keep, @kv_in_cache, @logits_host: the graph that ends the step writes
 *          its keys and values into the cache, past its rows (grown for
 *          them; ctx_commit() counts them, ctx_part_drop() gives the
 *          rows back), and, unless @keep, its logits to @logits_host
 *          (the context's raw buffer): out[1], and then out[0], are 0
 * @ret, @msg: how it went
 * @env:    where it runs
 * @job:    its job in a pass (model_pass_layers())
 */
struct part {
	struct model_ctx *c;
	const int32_t *tokens;
	uint32_t n;
	bool head, all;
	uint32_t l0, l1;
	uint64_t out[2];
	struct djinn_tensor_desc desc[2];
	bool own;
	struct fwd_seq in;
	void *in_mem;
	bool have_in;
	bool keep; /* the caller keeps the logits on the device */
	bool kv_in_cache; /* the keys and values are in the cache already */
	void *logits_host; /* the logits, when not in out[0] */
	/* non-NULL: the step's graph samples its token with these, and
	 * only that comes back (@token; struct fwd_seq) */
	const struct djinn_sample_params *sample;
	int64_t token;
	bool entered;
	char *msg;
	size_t msglen;
	const struct model_env *env;
	struct pass_job job;
};

/* The part's regions go, its own ones (@own) destroyed. */
void ctx_part_drop(struct part *p);
/* Its step's inputs (ids, positions) go. */
void ctx_part_inputs_drop(struct part *p);
/* A pass's layer function (pass_layer_fn) for parts: the @n parts'
 * layers [l0, l1) as one graph; a graph too big (-E2BIG: more nodes than
 * DJINN_MAX_NODES; -ENOMEM: more than the device's memory has room for)
 * as two of half the parts each; any other failure as each part alone,
 * so that one context's fault (its quota, a bad steering) fails its own
 * step only. */
void ctx_layers(struct pass_job **jobs, unsigned int n, uint32_t l0,
		uint32_t l1, uint64_t lbase);
/* Run the layers of the parts @ps, of one model, as one pass on this
 * thread (each part entered and left its model's step, store.h): each
 * part's job.ret says how it went; a part that failed has no regions
 * of its own left. */
void ctx_pass(struct part **ps, unsigned int np);
/* Whether @n tokens at @tokens (NULL: not looked at) may be appended. */
int ctx_check_step(struct model_ctx *c, const int32_t *tokens, uint32_t n,
		   char *msg, size_t msglen);
/* Whether a break after layer @brk - 1 is one. */
int ctx_check_brk(struct model_ctx *c, uint32_t brk, char *msg, size_t msglen);
/* A step of @n tokens has run through every layer (@p's outputs, its
 * keys and values in the cache past its rows already): count them, take
 * its logits (@st's choices). On failure the context is as it was. @p's
 * regions and buffers are gone either way (but a kept one, which is
 * @st's). */
int ctx_commit(struct model_ctx *c, const struct model_env *env, uint32_t n,
	       struct part *p, struct model_step *st, char *msg, size_t msglen);
/* @p ran layers 0 .. brk - 1 of a step of @n tokens: the context pauses
 * there, holding @p's outputs. */
void ctx_pause(struct model_ctx *c, struct part *p, uint32_t brk, uint32_t n,
	       bool all);
/* @r's outputs: the first @nr of the paused decode's tokens, and
 * whether the context is paused. */
void ctx_run_out(struct model_ctx *c, struct model_run *r, uint32_t nr);

/* The context as it is now is the one the crash journal may name: after
 * a request ends (paused: its state before that request stays named). */
void ctx_publish(struct model_ctx *c);
/* Before a step writes the cache: wait (2 s at most) until no record the
 * crash journal may restore names more tokens than the context holds (a
 * truncation not yet recorded): 0, or -EAGAIN with why in @msg. */
int ctx_journal_wait(struct model_ctx *c, char *msg, size_t msglen);

/* The arena (logits.c): @len bytes, at *@off in its file, or NULL (no
 * arena, or full); given back, quarantined while a journal is on. */
uint8_t *arena_alloc(uint64_t len, uint64_t *off);
void arena_free(uint64_t off, uint64_t len);
/* The newest record begun (0: no journal on), the one in force; whether
 * a pin of record @seq may still be restored (the journal is on, and
 * @seq is in force or newer); wait until the record in force is no
 * longer @seen (or the journal is off), until @until (CLOCK_MONOTONIC):
 * 0 or -ETIMEDOUT. */
uint64_t arena_begun(void);
uint64_t arena_in_force(void);
bool arena_live(uint64_t seq);
int arena_wait(uint64_t seen, const struct timespec *until);

#endif /* DJINN_MODEL_CTX_H */
