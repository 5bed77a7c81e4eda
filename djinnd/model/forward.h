/* SPDX-License-Identifier: MIT */
/*
 * The forward pass as a graph of the op set (internal to djinnd/model).
 *
 * A struct gbuild collects graph inputs (device tensors: weights in the
 * text segment, token ids, positions, the KV cache) and nodes, then runs
 * them the way a client's GRAPH_SUBMIT runs: djinn_graph_parse(),
 * djinn_graph_infer(), graph_run() on the session's stack, outputs in
 * new data regions of the session.
 *
 * Values are uint32_t: an input's index, or GB_NODE | a node's index.
 * A builder function that fails (too many nodes, no memory) records the
 * error in the builder and returns GB_BAD; gb_run() then refuses.
 */
#ifndef DJINN_MODEL_FORWARD_H
#define DJINN_MODEL_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "graph/run.h"
#include "model/store.h"

#define GB_NODE 0x80000000u
#define GB_BAD 0xffffffffu

struct fwd_plans;

struct gbuild {
	uint32_t nr_in;
	struct dj_tensor in[DJINN_MAX_GRAPH_INPUTS];
	uint32_t nr_nodes;
	struct djinn_node nodes[DJINN_MAX_NODES];
	uint32_t nr_out;
	uint32_t out[DJINN_MAX_GRAPH_OUTPUTS];
	uint8_t phase; /* enum djinn_phase of every node */
	int err;
	/* whose region each output becomes (NULL: gb_run()'s session);
	 * gb_output() takes @owner */
	struct vmu_session *owner;
	struct vmu_session *out_s[DJINN_MAX_GRAPH_OUTPUTS];
	struct graph_place place[DJINN_MAX_GRAPH_OUTPUTS];
	/* the contexts' table of a pass's varlen attention (lib/graph.h),
	 * a host input of the graph */
	int64_t varlen[DJINN_VARLEN_MAX][DJINN_VARLEN_COLS];
	/* the rows of parameters of its SAMPLE node, a host input */
	struct djinn_sample_params sample[DJINN_VARLEN_MAX];
	void *host_mem; /* host inputs the builder made (gb_free() frees) */
	/* NULL, or where gb_run() keeps the graph's plan for the next
	 * graph like it, and finds it (the model's) */
	struct fwd_plans *plans;
};

/*
 * struct fwd_plans - a model's decode step graphs as checked and planned
 *
 * A step builds its graph each time (microseconds); gb_run() then
 * parses it, infers every node's shape and plans the stack, tens of
 * microseconds more, which a decode step's graph it has run before need
 * not pay again (a graph with a prefill in it plans each time: its
 * arithmetic dwarfs that, and its graph changes with its tokens). Two graphs are alike when their nodes, outputs, the kinds of
 * their outputs' places (a region, an address, the host) and their
 * inputs' shapes (and which are in host memory) are the same bytes: a
 * pure function of those is kept, and nothing else is. Addresses (the
 * weights', the caches', the host inputs') are not part of a graph, and
 * a context's cache length is in its varlen table, not in a shape: a
 * decode step's graph is alike from token to token, and a pass's is
 * alike for the same number of contexts. A lookup compares a hash of
 * those bytes, then the bytes of the one that matches. Up to FWD_PLANS_MAX
 * graphs are kept, the least recently used given up first; a graph in
 * use by another thread's step is never given up under it.
 *
 * fwd_plans_new(): NULL without memory (the steps then plan each time).
 * fwd_plans_stats(): how many decode steps found their graph kept and
 * how many planned it (for tests and counters).
 */
#define FWD_PLANS_MAX 64

struct fwd_plans *fwd_plans_new(void);
void fwd_plans_free(struct fwd_plans *p);
void fwd_plans_stats(struct fwd_plans *p, uint64_t *kept, uint64_t *planned);

/* A builder, empty (NULL: no memory); gb_free() frees it and what its
 * graph kept in host memory. */
struct gbuild *gb_new(void);
void gb_free(struct gbuild *g);

uint32_t gb_input(struct gbuild *g, uint64_t addr, unsigned int dtype,
		  unsigned int ndim, const uint64_t *dims);
/* A graph input in host memory at @host (graph_run() stages it on the
 * stack), which must stay there until gb_run() returns. */
uint32_t gb_host_input(struct gbuild *g, const void *host, unsigned int dtype,
		       unsigned int ndim, const uint64_t *dims);
uint32_t gb_op(struct gbuild *g, unsigned int op, unsigned int nr,
	       const uint32_t *ins, const void *params, size_t plen);
/* Mark @v an output (its result kept in a new data region of
 * @g->owner, or of gb_run()'s session). */
void gb_output(struct gbuild *g, uint32_t v, unsigned int residency);
/* The same, written at device address @into, or (@into 0) copied to
 * @host once the graph has run: no region (struct graph_place). */
void gb_output_place(struct gbuild *g, uint32_t v, unsigned int residency,
		     uint64_t into, void *host);

/*
 * struct model_env - where a forward pass runs
 * @v, @st, @b: the VMU, an executor stack, the backend (one device)
 */
struct model_env {
	struct vmu *v;
	struct vmu_stack *st;
	struct backend *b;
};

/* Parse, infer (djinnd's own graph: djinn_graph_infer_own()), plan
 * and execute for session @s (each output for its owner), or execute
 * the plan @g->plans kept for a graph alike;
 * @res gets the output regions and @descs[nr_out] their shapes. */
int gb_run(struct gbuild *g, const struct model_env *env, struct vmu_session *s,
	   struct graph_result *res, struct djinn_tensor_desc *descs, char *msg,
	   size_t msglen);

/*
 * struct fwd_seq - one context's tokens in a step, or in a part of one
 * @s:      the session whose regions its outputs become
 * @T:      new tokens
 * @P:      tokens already in the cache
 * @head:   this part ends the step (l1 == n_layer): the logits, not the
 *          hidden state
 * @all:    with @head: logits for every new token, else the last one's
 * @ids:    l0 == 0: (T) i32 token ids
 * @pos:    gpt2, l0 == 0: (T) i32 positions P .. P + T - 1
 * @cos, @sin: llama: (T, 1, head_dim) in the weights' dtype
 *          (the four in host memory: graph inputs staged on the stack)
 * @cache:  (P, 2 n_layer, n_kv_head head_dim), when P > 0
 * @hidden: l0 > 0: (T, n_embd) the hidden state entering layer l0
 * @kv_in:  l0 > 0: (T, 2 l0, n_kv_head head_dim), the new keys and
 *          values of layers 0 .. l0 - 1 (from the parts before)
 * @kv_into: with @head, nonzero: its keys and values are written there
 *          (the cache's rows P .. P + T - 1), not to a region
 * @logits_host: with @head, non-NULL: its logits are copied there, not
 *          kept in a region
 * @sample: with @head and not @all, non-NULL: its last row's token is
 *          sampled with these (DJINN_GOP_SAMPLE) in the graph, and the
 *          token (1) i64, or SAMPLE's in-band code, is its output,
 *          copied to @token_host: the logits stay in the graph. The
 *          contexts that sample come before the other heads (-EINVAL)
 */
struct fwd_seq {
	struct vmu_session *s;
	uint32_t T, P;
	bool head, all;
	const void *ids, *pos, *cos, *sin;
	uint64_t cache, hidden, kv_in;
	uint64_t kv_into;
	void *logits_host;
	const struct djinn_sample_params *sample;
	int64_t *token_host;
};

/*
 * struct fwd_args - layers [l0, l1) of @nr_seq contexts' steps, as one
 * graph
 * @l0, @l1: the layers to run; l1 0 means n_layer
 * @lbase:   0, or (a streamed model, l1 == l0 + 1) the device address
 *           where layer l0's weights are, laid out as in the text
 *           entry from model_layer_start(l0): a slot of the ring
 * @seq:     the contexts, at most FWD_MAX_SEQ
 *
 * Every context's rows go through the layers' matrix products together
 * (each weight read once for all of them); attention is each context's
 * own, over its own cache: with many contexts one varlen attention node
 * a layer over all of them (DJINN_ATTN_VARLEN, its table in
 * gbuild.varlen). The graph's outputs are two per context, in
 * order: the logits (@head: (T or 1, vocab)), or its token (@sample: one
 * SAMPLE node for all the contexts that sample), or the hidden state after
 * layer l1 - 1 (T, n_embd), then the new keys and values of layers 0 ..
 * l1 - 1 (T, 2 l1, n_kv_head head_dim), @head's to append to the cache
 * (or placed: @kv_into, @logits_host; its region is then 0).
 * Splitting a step into parts computes the same bits as running it
 * whole: every value is stored in the weights' dtype either way. With
 * one context the graph is the one a context alone runs.
 */
#define FWD_MAX_SEQ DJINN_VARLEN_MAX

struct fwd_args {
	uint32_t l0, l1;
	uint64_t lbase;
	uint32_t nr_seq;
	const struct fwd_seq *seq;
};

int model_build_forward(struct gbuild *g, const struct model_hold *h,
			const struct fwd_args *a);

#endif /* DJINN_MODEL_FORWARD_H */
