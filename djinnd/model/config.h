/* SPDX-License-Identifier: MIT */
/*
 * Model configurations (Hugging Face config.json) and weight layouts.
 *
 * Two architectures:
 *
 *   gpt2   learned position embeddings, LayerNorm with bias, GELU (tanh),
 *          Conv1D weights stored (in, out), fused c_attn, tied embeddings
 *          unless tie_word_embeddings is false
 *   llama  RoPE, RMSNorm, SwiGLU, grouped-query attention, Linear weights
 *          stored (out, in), untied unless tie_word_embeddings is true
 *
 * model_config_parse() reads config.json strictly: the fields the
 * architecture needs must be there with the right JSON types and sane
 * values; fields that would change the computation in a way this runtime
 * does not implement (rope_scaling, attention biases, another activation)
 * are refused by name rather than ignored. Other fields (tokenizer ids,
 * torch_dtype, ...) are ignored.
 *
 * model_layout_build() then finds every weight the architecture needs in
 * a model's safetensors (safetensors.h), checks its shape and that all
 * share one dtype (F32, F16 or BF16), and lays them out, in a fixed
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

enum model_arch {
	MODEL_GPT2 = 1,
	MODEL_LLAMA = 2,
};

const char *model_arch_name(enum model_arch a);

/*
 * struct model_config - what the forward pass needs
 * @n_embd:    hidden size C
 * @n_head:    query heads H; @n_kv_head: key/value heads (H for gpt2)
 * @head_dim:  C / H
 * @n_inner:   MLP width (gpt2: n_inner or 4 C; llama: intermediate_size)
 * @n_ctx:     positions (n_positions, max_position_embeddings)
 * @eps:       layer_norm_epsilon / rms_norm_eps
 * @rope_theta: llama only
 * @tied:      the LM head is the token embedding
 */
struct model_config {
	enum model_arch arch;
	uint32_t n_embd;
	uint32_t n_head;
	uint32_t n_kv_head;
	uint32_t head_dim;
	uint32_t n_layer;
	uint32_t n_inner;
	uint32_t n_ctx;
	uint32_t vocab;
	float eps;
	float rope_theta;
	bool tied;
};

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
	LLAMA_NR_LAYER,
};

/*
 * struct model_weight - one slot
 * @name:  the tensor's name in the checkpoint
 * @ndim, @shape: the shape the architecture wants (and the file has)
 * @t:     the tensor, in its file's mapping
 * @off:   its offset in the blob
 * @alias: true for a tied LM head (no bytes of its own)
 */
struct model_weight {
	char name[96];
	unsigned int ndim;
	uint64_t shape[2];
	const struct st_tensor *t;
	uint64_t off;
	bool alias;
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
void model_layout_free(struct model_layout *L);

/* Slot @k of layer @layer (or global slot @k for @layer -1). */
static inline const struct model_weight *
model_slot(const struct model_layout *L, int layer, unsigned int k)
{
	return &L->w[layer < 0 ?
			     k :
			     L->nr_global + (size_t)layer * L->per_layer + k];
}

/* Write the blob into @dst (@L->bytes; padding zeroed). For tests and
 * hashing; the store streams it instead (model_layout_emit()). */
typedef int (*model_emit_fn)(void *arg, const void *buf, uint64_t len);
int model_layout_emit(const struct model_layout *L, model_emit_fn fn,
		      void *arg);

#endif /* DJINN_MODEL_CONFIG_H */
