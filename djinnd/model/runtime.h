/* SPDX-License-Identifier: MIT */
/*
 * Contexts: running a held model for one session.
 *
 * A context holds a KV cache in a data region of the session, token-major
 * (position, 2 n_layer, n_kv_head head_dim) in the weights' dtype, so
 * that each step appends rows and the region grows in place: its address
 * never changes and nothing is copied as it grows. Its virtual size is
 * reserved for max_tokens at creation.
 *
 * model_ctx_prefill() runs T tokens as one graph (phase prefill),
 * model_ctx_decode() one token per graph (phase decode), each attending
 * over the cache. The logits of the last token stay in the context for
 * the next sampling step; sampling (greedy, temperature, top-k, top-p,
 * seeded) runs in djinnd. A step that fails leaves the context as it was.
 *
 * Steps run on the calling thread with the executor stack given in
 * struct model_env (an executor thread's), never on the I/O thread.
 *
 * Breakpoints (model_ctx_run_prefill(), model_ctx_run_decode() with a
 * break): a step runs as two graphs, layers 0 .. L, then L + 1 .. on and
 * the head. Between them the context is paused: the hidden state after
 * layer L and the first graph's new keys and values wait in data regions
 * of the session (on the device, swappable like any region) and nothing
 * runs; the caller may read the hidden state (model_ctx_hidden_copy()),
 * replace it (model_ctx_steer()), and model_ctx_resume() runs the second
 * graph. Every value is stored in the weights' dtype whether the step
 * is split or not, so a step resumed unchanged computes the same bits as
 * one without a break. While paused every other step and fork is -EBUSY;
 * model_ctx_reset() and model_ctx_free() abandon the paused step.
 *
 * Errors: -EINVAL (a token out of the vocabulary, bad sampling
 * parameters), -ENOSPC (past max_tokens), -ENOMEM / -E2BIG (admission),
 * -EBUSY (paused), with a message.
 */
#ifndef DJINN_MODEL_RUNTIME_H
#define DJINN_MODEL_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/forward.h"
#include "model/store.h"

struct vmu_fill;
struct model_ctx;

/* A context of up to @max_tokens (at most the model's positions) for the
 * session of @h, which must outlive it. */
int model_ctx_new(struct model_hold *h, uint32_t max_tokens,
		  struct model_ctx **out, char *msg, size_t msglen);
/* Destroys the cache region. */
void model_ctx_free(struct model_ctx *c);
/* Set the device memory of the whole cache (max_tokens) aside now, as
 * static partitioning does (vmu_region_reserve()): -ENOMEM with need and
 * availability in @msg when it does not fit, after, with @relieve, its
 * model streamed more of its layers to make room if it could
 * (model_relieve(): slow, and never on the I/O thread). */
int model_ctx_reserve(struct model_ctx *c, bool relieve, char *msg,
		      size_t msglen);
/* A copy of @c: its own cache region with the same bytes, the same last
 * logits. */
int model_ctx_fork(struct model_ctx *c, const struct model_env *env,
		   struct model_ctx **out, char *msg, size_t msglen);
/* Keep the first @len tokens (no more than it holds: -EINVAL), the cache
 * shrinking to them, abandoning a paused step; no last logits until the
 * next step. A cache that cannot shrink is an error, the context
 * truncated all the same. */
int model_ctx_truncate(struct model_ctx *c, uint32_t len, char *msg,
		       size_t msglen);
/* Forget every token: model_ctx_truncate() to 0. */
int model_ctx_reset(struct model_ctx *c);

/*
 * What a restart keeps of a context (svc/state.c): its cache region
 * (model_ctx_cache()), model_ctx_len() tokens of model_ctx_token_bytes()
 * each, and its last logits (a paused step's state is
 * model_ctx_pause_get()'s). model_ctx_restore() makes a context of @h as
 * one kept: @len tokens whose cache is filled from @kv (vmu.h: its bytes,
 * or the pieces of memory that hold them; @kv_bytes, which must be @len
 * tokens' worth), and the last logits @logits (@logits_bytes: vocab
 * floats), or NULL before any step. -EINVAL with a reason when they do
 * not fit @h's model, else as model_ctx_new().
 */
uint64_t model_ctx_cache(const struct model_ctx *c);
/* Bytes of cache per token: 2 n_layer n_kv_head head_dim dtype-size. */
uint64_t model_ctx_token_bytes(const struct model_ctx *c);
int model_ctx_restore(struct model_hold *h, uint32_t max, uint32_t len,
		      const struct vmu_fill *kv, uint64_t kv_bytes,
		      const float *logits, uint64_t logits_bytes,
		      struct model_ctx **out, char *msg, size_t msglen);

uint32_t model_ctx_len(const struct model_ctx *c);
/* The last token's logits (vocab floats), or NULL before any step. */
const float *model_ctx_logits(const struct model_ctx *c);

/*
 * The crash journal (net/journal.h) names each context as its last
 * request left it, while steps run: its length, the cache rows before it
 * in place in the pool, and its last logits in place in the logits arena,
 * a memfd the fd store keeps (model_journal_arena(): made once; contexts
 * made from then on keep CTX_SLOTS logits buffers there, those made
 * before one of their own, which no record names).
 *
 * model_journal_begin() before each record (@seq, counting from 1),
 * model_journal_done() once it is in force, model_journal_off() when the
 * journal ends. model_ctx_journal() (in a record, under the session's
 * lock) says what the record names of @c and holds it: until a newer
 * record is in force, no step writes those logits, nor cache rows before
 * that length (a step after a truncation waits for a record of it), and
 * a context freed keeps its logits buffers from others. -ENODATA: @c's
 * logits are not in the arena.
 */
struct model_ctx_saved {
	uint32_t len;
	bool have_logits;
	uint64_t logits_off; /* in the arena's file */
	/* a step is paused at a breakpoint: @len and the logits are what
	 * it committed before (a breakpoint decode's tokens answered) */
	bool paused;
};
int model_journal_arena(void);
void model_journal_begin(uint64_t seq);
void model_journal_done(uint64_t seq);
void model_journal_off(void);
int model_ctx_journal(struct model_ctx *c, struct model_ctx_saved *out);

/*
 * Append @n >= 1 tokens and run them. @logits (may be NULL) gets the
 * logits of every one of them, (n, vocab) floats.
 */
int model_ctx_prefill(struct model_ctx *c, const struct model_env *env,
		      const int32_t *tokens, uint32_t n, float *logits,
		      char *msg, size_t msglen);

/*
 * struct model_step - what a step gives back, for model_ctx_step()
 * @all:    in: logits for every new token, (n, vocab); else the last
 *          token's only, (1, vocab)
 * @logits: in: where to copy them as floats (NULL: no copy)
 * @keep:   in: keep them on the device
 * @region: out: with @keep, the data region of the session holding
 *          them in the weights' dtype (a lazy result: the caller owns it
 *          and destroys it); else 0
 * @desc:   out: with @keep, their shape and dtype
 */
struct model_step {
	bool all;
	float *logits;
	bool keep;
	uint64_t region;
	struct djinn_tensor_desc desc;
};

/* Append @n >= 1 tokens and run them, as model_ctx_prefill() does, with
 * the choices of @st. */
int model_ctx_step(struct model_ctx *c, const struct model_env *env,
		   const int32_t *tokens, uint32_t n, struct model_step *st,
		   char *msg, size_t msglen);

/*
 * struct model_sampling - how to pick a token from logits
 * @temperature: 0 for greedy (the first largest logit), else > 0
 * @top_k:       keep the k most likely (0: all)
 * @top_p:       then the fewest whose probabilities reach p (1: all),
 *               in (0, 1]
 * @seed:        the random stream; the same seed, context and calls
 *               give the same tokens
 */
struct model_sampling {
	float temperature;
	uint32_t top_k;
	float top_p;
	uint64_t seed;
};

/*
 * A context paused at a breakpoint, as a restart keeps it:
 * model_ctx_pause_get() fills @p (its regions stay the context's: read
 * them, do not free them) and is false for a context not paused;
 * model_ctx_pause_set() pauses a restored context (not paused, its
 * cache restored) as @p says, with its hidden state and its first
 * part's keys and values filled into regions of its own (vmu.h) and
 * its decode's tokens (@p->done + 1 of them). -EINVAL with a reason when
 * they do not fit its model.
 */
struct model_ctx_pause {
	uint32_t layer, T, want, done, brk;
	bool all, decode;
	struct djinn_tensor_desc desc; /* the hidden state's */
	struct model_sampling sp;
	uint64_t rng;
	uint64_t hidden, kv; /* get: the regions; their sizes: */
	uint64_t hidden_bytes, kv_bytes;
	const int32_t *tokens; /* a decode's, @want of them */
};
bool model_ctx_pause_get(const struct model_ctx *c, struct model_ctx_pause *p);
int model_ctx_pause_set(struct model_ctx *c, const struct model_ctx_pause *p,
			const struct vmu_fill *hidden,
			const struct vmu_fill *kv, char *msg, size_t msglen);

/* Pick a token from @logits[V]; *@rng is the random state, advanced. */
int model_sample(const float *logits, uint32_t V,
		 const struct model_sampling *sp, uint64_t *rng, int32_t *out,
		 char *msg, size_t msglen);

/*
 * Generate @n tokens into @out: each is sampled from the last logits,
 * then appended (a decode step), so after the call the context holds
 * them all and the logits that follow the last. Needs a prefill first.
 * The random state starts from @sp->seed and the context's length.
 * Steps are separate: if one fails, the tokens sampled and appended
 * before it stay (model_ctx_len() says how many) and the error returns.
 */
int model_ctx_decode(struct model_ctx *c, const struct model_env *env,
		     uint32_t n, const struct model_sampling *sp, int32_t *out,
		     char *msg, size_t msglen);

/*
 * struct model_run - a prefill or decode that may pause
 * @brk:    in: 0, or L + 1 to pause after layer L (L < n_layer); for a
 *          decode, at every token
 * @logits: in: a prefill's: where the logits of every token go, (n,
 *          vocab) floats, when it is done (NULL: none); give it to the
 *          call that starts it and to model_ctx_resume() alike
 * @out:    in: a decode's: room for its n tokens
 * @nr_out: out: a decode's tokens so far in @out: while paused, the
 *          last of them is the one the paused step is running
 * @paused: out: stopped after layer @layer
 */
struct model_run {
	uint32_t brk;
	float *logits;
	int32_t *out;
	uint32_t nr_out;
	bool paused;
	uint32_t layer;
};

/* model_ctx_prefill() that may pause. */
int model_ctx_run_prefill(struct model_ctx *c, const struct model_env *env,
			  const int32_t *tokens, uint32_t n,
			  struct model_run *r, char *msg, size_t msglen);
/* model_ctx_decode() that may pause: sampled tokens and the random
 * stream are those model_ctx_decode() gives. A failure while starting
 * the next token ends the decode (the tokens done stay, as there). */
int model_ctx_run_decode(struct model_ctx *c, const struct model_env *env,
			 uint32_t n, const struct model_sampling *sp,
			 struct model_run *r, char *msg, size_t msglen);
/* Finish the paused step (and, for a decode, start the next token, which
 * pauses again). -EBUSY if not paused. If the second graph fails the
 * context stays paused, as it was. */
int model_ctx_resume(struct model_ctx *c, const struct model_env *env,
		     struct model_run *r, char *msg, size_t msglen);
/* Drop the paused step (nothing of it stays; a decode's earlier tokens
 * do). Nothing if not paused. */
void model_ctx_abandon(struct model_ctx *c);

/*
 * Requests and passes. A prefill, decode or resume may run as a request:
 * a series of steps, each one pass of model_pass(), which runs the next
 * step of every request given to it (all of one model, no context twice)
 * as one graph per stretch of layers, so each weight is read once for
 * all of them (stream.h: model_pass_layers()). A request's steps:
 *   PREFILL   its prompt in chunks of at most @grant tokens (0: all at
 *             once), through every layer; with a breakpoint the whole
 *             prompt to the break, which ends it (paused)
 *   DECODE    one token per step (sampled from the logits before it);
 *             with a breakpoint the first token to the break (paused)
 *   RESUME    the paused step's other layers, then, for a decode, the
 *             next token to the break
 * The requests of a pass are independent: one that fails (its quota,
 * its tokens) ends alone, and the others' steps run as they would
 * alone. What a request leaves on failure is what the calls below
 * leave: a prefill or decode without a break is taken back whole, a
 * decode with one keeps the tokens done, a resume stays paused.
 *
 * model_req_start() checks the request (-EINVAL, -ENOSPC, -EBUSY, with
 * why in @msg): on failure it is done already. model_req_rows() is the
 * rows its next step wants (0 once done); model_req_stepped() those its
 * last step carried. model_req_fini() frees what it holds (done or not:
 * an unfinished prefill or decode keeps the steps it committed).
 */
enum model_req_kind {
	MODEL_REQ_PREFILL,
	MODEL_REQ_DECODE,
	MODEL_REQ_RESUME,
};

/*
 * struct model_req - a request run in passes
 * @c, @kind:  the context and what to run
 * @tokens, @n: PREFILL: the prompt; DECODE: the tokens to make
 * @sp:        DECODE's sampling
 * @r:         brk, logits and out as model_ctx_run_*() take them; the
 *             outputs likewise
 * @grant:     set before each pass: the most tokens a PREFILL's next
 *             step may carry (0: all that are left)
 * @msg:       where an error is said
 * @ret, @done: out: whether it has ended, and how
 */
struct model_req {
	struct model_ctx *c;
	enum model_req_kind kind;
	const int32_t *tokens;
	uint32_t n;
	struct model_sampling sp;
	struct model_run r;
	uint32_t grant;
	char *msg;
	size_t msglen;
	int ret;
	bool done;
	void *priv;
};

int model_req_start(struct model_req *q);
uint32_t model_req_rows(const struct model_req *q);
uint32_t model_req_stepped(const struct model_req *q);
void model_pass(struct model_req **qs, unsigned int n,
		const struct model_env *env);
void model_req_fini(struct model_req *q);

/* The model @c runs (a pass's requests share it). */
const struct model *model_ctx_model(const struct model_ctx *c);

/*
 * struct model_pause_info - what a paused context is at
 * @layer:  it stopped after this layer
 * @T:      tokens of the paused step
 * @decode: a decode of @want tokens, @done of them finished
 * @hidden: the data region of the hidden state (the context's; the
 *          tests may read and write it directly)
 * @desc:   its shape (T, n_embd) and dtype (the weights')
 */
struct model_pause_info {
	uint32_t layer, T;
	bool decode;
	uint32_t want, done;
	uint64_t hidden;
	struct djinn_tensor_desc desc;
};

/* Whether @c is paused; if so and @pi, what at. */
bool model_ctx_paused(const struct model_ctx *c, struct model_pause_info *pi);
/* A new data region of the session with a copy of the hidden state
 * (the caller owns it). */
int model_ctx_hidden_copy(struct model_ctx *c, const struct model_env *env,
			  uint64_t *region, char *msg, size_t msglen);
/* Replace the hidden state with the tensor at device address @addr,
 * which must have its shape and dtype (@d; -EINVAL otherwise). */
int model_ctx_steer(struct model_ctx *c, const struct model_env *env,
		    uint64_t addr, const struct djinn_tensor_desc *d, char *msg,
		    size_t msglen);

#endif /* DJINN_MODEL_RUNTIME_H */
