/* SPDX-License-Identifier: MIT */
/*
 * Model configurations (Hugging Face config.json) and weight layouts.
 *
 * Five architectures, by config.json's "model_type":
 *
 *   gpt2     learned position embeddings, LayerNorm with bias, GELU (tanh),
 *            Conv1D weights stored (in, out), fused c_attn, tied embeddings
 *            unless tie_word_embeddings is false
 *   llama    RoPE, RMSNorm, SwiGLU, grouped-query attention, Linear weights
 *            stored (out, in), untied unless tie_word_embeddings is true;
 *            optional q/k/v/o biases (attention_bias) and MLP biases
 *            (mlp_bias)
 *   qwen2    llama with q, k and v biases, always
 *   qwen3    llama with a per-head RMSNorm on q and k before RoPE, its own
 *            head_dim, q/k/v/o biases when attention_bias
 *   mistral  llama with a sliding attention window
 *
 * The llama family's RoPE (struct model_rope) comes from either form
 * transformers writes: transformers 5's nested "rope_parameters", or
 * transformers 4's top-level "rope_theta" and "rope_scaling" ("type" is
 * read as "rope_type"). Types default, linear, dynamic (NTK), llama3 and
 * yarn are computed as transformers computes them; longrope and unknown
 * types are refused.
 *
 * model_config_parse() reads config.json strictly: the fields the
 * architecture needs must be there with the right JSON types and sane
 * values; every field that would change the computation in a way this
 * runtime does not implement is refused by name rather than ignored
 * (Documentation/model.rst has the table of every field). Fields that
 * change nothing at inference (dropout, token ids, use_cache, ...) are
 * ignored, as transformers' modeling code ignores them.
 *
 * model_layout_build() then finds every weight the architecture needs in
 * a model's safetensors (safetensors.h), checks its shape and that all
 * share one dtype (F32, F16 or BF16; the config's "dtype" or "torch_dtype",
 * when given, must name it), and lays them out, in a fixed
 * order and 256-byte aligned, as one blob: what the model store puts in
 * the text segment. Tensors the architecture does not use are ignored.
 *
 * Errors: -EINVAL with a message naming the file and field or tensor;
 * -ENOMEM.
 */
#ifndef DJINN_MODEL_CONFIG_H
#define DJINN_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/safetensors.h"

#define MODEL_ALIGN 256 /* of every weight in the blob */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_DIM (1u << 20) /* hidden, intermediate, positions */
#define MODEL_MAX_VOCAB (1u << 24)
#define MODEL_MAX_CONFIG (1u << 20) /* bytes of config.json */

#define MODEL_MAX_HEAD_DIM 1024 /* RoPE frequencies are kept per model */

enum model_arch {
	MODEL_GPT2 = 1,
	MODEL_LLAMA = 2,
	MODEL_QWEN2 = 3,
	MODEL_QWEN3 = 4,
	MODEL_MISTRAL = 5,
};

enum model_rope_type {
	ROPE_DEFAULT,
	ROPE_LINEAR,
	ROPE_DYNAMIC,
	ROPE_LLAMA3,
	ROPE_YARN,
};

/*
 * struct model_rope - rotary position embeddings (the llama family)
 * @type:      how the inverse frequencies are made
 * @theta:     the base
 * @factor:    linear, dynamic, llama3, yarn: the scaling factor
 * @low_freq_factor, @high_freq_factor: llama3
 * @orig_ctx:  llama3, yarn: original_max_position_embeddings
 * @beta_fast, @beta_slow, @truncate: yarn's correction range
 * @attn_factor: cos and sin are scaled by it (yarn; else 1)
 * @inv_freq:  head_dim / 2 inverse frequencies, computed once at parse
 *             (dynamic: those of a sequence within max_position_embeddings;
 *             longer ones get model_rope_freqs())
 */
struct model_rope {
	enum model_rope_type type;
	float theta;
	float factor;
	float low_freq_factor;
	float high_freq_factor;
	uint32_t orig_ctx;
	float beta_fast;
	float beta_slow;
	bool truncate;
	float attn_factor;
	float inv_freq[MODEL_MAX_HEAD_DIM / 2];
};

/*
 * struct model_config - what the forward pass needs
 * @n_embd:    hidden size C
 * @n_head:    query heads H; @n_kv_head: key/value heads (H for gpt2)
 * @head_dim:  D: head_dim, or C / H when the config has none
 * @n_inner:   MLP width (gpt2: n_inner or 4 C; llama: intermediate_size)
 * @n_pos:     n_positions / max_position_embeddings as the config says
 * @n_ctx:     the longest context: @n_pos, for dynamic RoPE factor
 *             @n_pos, and never past a sliding window
 * @window:    the sliding attention window of any layer (0: none); the
 *             longest context is at most it, so attention needs no mask
 *             beyond the causal one
 * @eps:       layer_norm_epsilon / rms_norm_eps
 * @tied:      the LM head is the token embedding
 * @qkv_bias, @o_bias: the attention projections have biases
 * @mlp_bias:  gate, up and down have biases
 * @qk_norm:   q and k get a per-head RMSNorm (qwen3)
 * @dtype:     enum djinn_dtype the config names ("dtype", "torch_dtype"),
 *             0 if none; @dtype_key: which of the two named it
 * @rope:      llama family
 */
struct model_config {
	enum model_arch arch;
	uint32_t n_embd;
	uint32_t n_head;
	uint32_t n_kv_head;
	uint32_t head_dim;
	uint32_t n_layer;
	uint32_t n_inner;
	uint32_t n_pos;
	uint32_t n_ctx;
	uint32_t window;
	uint32_t vocab;
	float eps;
	bool tied;
	bool qkv_bias;
	bool o_bias;
	bool mlp_bias;
	bool qk_norm;
	unsigned int dtype;
	const char *dtype_key;
	struct model_rope rope;
};

/*
 * The inverse frequencies (head_dim / 2 floats into @inv) for a forward
 * call whose last position is @seq_len - 1: @c->rope.inv_freq but for
 * dynamic RoPE past max_position_embeddings, which transformers
 * recomputes from the sequence's length at every call.
 */
void model_rope_freqs(const struct model_config *c, uint32_t seq_len,
		      float *inv);

/* Parse the config.json at @path, or @len bytes of JSON at @text (@path
 * names it in messages). */
int model_config_parse(const char *path, struct model_config *c, char *msg,
		       size_t msglen);
int model_config_parse_json(const char *text, size_t len, const char *path,
			    struct model_config *c, char *msg, size_t msglen);

/* Weight slots: globals first, then per layer (model_slot()). */
enum {
	GPT2_WTE,
	GPT2_WPE,
	GPT2_LNF_W,
	GPT2_LNF_B,
	GPT2_LM_HEAD, /* the same offset as GPT2_WTE when tied */
	GPT2_NR_GLOBAL,
};
enum {
	GPT2_LN1_W,
	GPT2_LN1_B,
	GPT2_ATTN_W, /* (C, 3C) */
	GPT2_ATTN_B,
	GPT2_APROJ_W, /* (C, C) */
	GPT2_APROJ_B,
	GPT2_LN2_W,
	GPT2_LN2_B,
	GPT2_FC_W, /* (C, 4C) */
	GPT2_FC_B,
	GPT2_MPROJ_W, /* (4C, C) */
	GPT2_MPROJ_B,
	GPT2_NR_LAYER,
};
enum {
	LLAMA_EMBED,
	LLAMA_NORM,
	LLAMA_LM_HEAD, /* the same offset as LLAMA_EMBED when tied */
	LLAMA_NR_GLOBAL,
};
enum {
	LLAMA_IN_NORM,
	LLAMA_Q, /* (H D, C) */
	LLAMA_K, /* (Hkv D, C) */
	LLAMA_V,
	LLAMA_O, /* (C, H D) */
	LLAMA_POST_NORM,
	LLAMA_GATE, /* (I, C) */
	LLAMA_UP,
	LLAMA_DOWN, /* (C, I) */
	LLAMA_Q_B, /* (H D): qkv_bias */
	LLAMA_K_B, /* (Hkv D) */
	LLAMA_V_B,
	LLAMA_O_B, /* (C): o_bias */
	LLAMA_Q_NORM, /* (D): qk_norm */
	LLAMA_K_NORM,
	LLAMA_GATE_B, /* (I): mlp_bias */
	LLAMA_UP_B,
	LLAMA_DOWN_B, /* (C) */
	LLAMA_NR_LAYER,
};

/*
 * struct model_weight - one slot
 * @name:  the tensor's name in the checkpoint
 * @ndim, @shape: the shape the architecture wants (and the file has)
 * @t:     the tensor, in its file's mapping
 * @off:   its offset in the blob
 * @alias: true for a tied LM head (no bytes of its own)
 * @unused: a slot this model's configuration has no weight for (a bias
 *         it lacks): no tensor, no bytes
 */
struct model_weight {
	char name[96];
	unsigned int ndim;
	uint64_t shape[2];
	const struct st_tensor *t;
	uint64_t off;
	bool alias;
	bool unused;
};

/*
 * struct model_layout - every weight of a model, laid out as a blob
 * @dtype:    enum djinn_dtype of every weight
 * @nr_global, @per_layer: slots
 * @nr:       nr_global + n_layer * per_layer
 * @bytes:    the blob's size
 */
struct model_layout {
	unsigned int dtype;
	unsigned int nr_global;
	unsigned int per_layer;
	size_t nr;
	struct model_weight *w;
	uint64_t bytes;
};

int model_layout_build(const struct model_config *c, const struct st_set *set,
		       struct model_layout *L, char *msg, size_t msglen);
/*
 * The layout model_layout_build() gave a checkpoint of @c whose weights
 * are all @dtype, made again without its files (a restart's uploaded
 * model, whose weights are in the text segment already): the offsets
 * follow from the configuration and the dtype alone. @prefixed: GPT-2's
 * body was named "transformer.*" (model_layout_prefixed()). -EINVAL for
 * a dtype weights cannot have, or not @c's.
 */
int model_layout_remake(const struct model_config *c, unsigned int dtype,
			bool prefixed, struct model_layout *L);
bool model_layout_prefixed(const struct model_config *c,
			   const struct model_layout *L);
void model_layout_free(struct model_layout *L);

/* Slot @k of layer @layer (or global slot @k for @layer -1). */
static inline const struct model_weight *
model_slot(const struct model_layout *L, int layer, unsigned int k)
{
	return &L->w[layer < 0 ?
			     k :
			     L->nr_global + (size_t)layer * L->per_layer + k];
}

/* Where layer @l's weights start in the blob: layers follow the global
 * weights in order, each one contiguous, so layer @l is [start(l),
 * start(l + 1)); start(n_layer) is the blob's end. */
uint64_t model_layer_start(const struct model_layout *L, uint32_t n_layer,
			   uint32_t l);
/* The bytes of the largest of the @n_layer layers: what a ring slot of a
 * streamed model holds. */
uint64_t model_layer_max(const struct model_layout *L, uint32_t n_layer);

/* Hand the blob's bytes [@from, @to) to @fn in order, padding as zeros
 * (all of it: 0, @L->bytes), where each of @from and @to is 0, the blob's
 * size or a weight's offset (model_layer_start()): -EINVAL otherwise. */
typedef int (*model_emit_fn)(void *arg, const void *buf, uint64_t len);
int model_layout_emit_range(const struct model_layout *L, uint64_t from,
			    uint64_t to, model_emit_fn fn, void *arg);

#endif /* DJINN_MODEL_CONFIG_H */
