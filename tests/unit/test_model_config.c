// SPDX-License-Identifier: MIT
/*
 * config.json parsing for GPT-2 and Llama, and the weight layout: models
 * written by scripts/mkmodel.py load with every slot at the right tensor
 * and shape; bad configs and checkpoints are refused naming the field or
 * tensor. Runs from the repository root (it calls scripts/mkmodel.py).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "array_size.h"
#include "model/model_config.h"
#include "testutil.h"

static char dir[64];

static void mkmodel(const char *name, const char *args)
{
	run_cmd("python3 scripts/mkmodel.py %s %s/%s", args, dir, name);
}

/* ---------------------------------------------------------------------- */
/* config.json */

#define GPT2_CFG                                                            \
	"\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,\"n_layer\":2," \
	"\"n_positions\":128,\"vocab_size\":256"
#define LLAMA_CFG                                                            \
	"\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":" \
	"192,\"num_attention_heads\":4,\"num_key_value_heads\":2,"           \
	"\"num_hidden_layers\":2,\"max_position_embeddings\":128,"           \
	"\"vocab_size\":256,\"rms_norm_eps\":1e-6"

static int parse(const char *json, struct model_config *c, char *msg)
{
	return model_config_parse_json(json, strlen(json), "cfg.json", c, msg,
				       ST_MSG_LEN);
}

static void test_config_good(void **state)
{
	char msg[ST_MSG_LEN];
	struct model_config c;

	assert_int_equal(parse("{" GPT2_CFG "}", &c, msg), 0);
	assert_int_equal(c.arch, MODEL_GPT2);
	assert_int_equal(c.n_embd, 64);
	assert_int_equal(c.n_head, 4);
	assert_int_equal(c.n_kv_head, 4);
	assert_int_equal(c.head_dim, 16);
	assert_int_equal(c.n_layer, 2);
	assert_int_equal(c.n_inner, 256);
	assert_int_equal(c.n_ctx, 128);
	assert_int_equal(c.vocab, 256);
	assert_true(c.eps == 1e-5f);
	assert_true(c.tied);

	assert_int_equal(parse("{" GPT2_CFG ",\"n_inner\":100,\"layer_norm_"
			       "epsilon\":1e-3,\"tie_word_embeddings\":false,"
			       "\"activation_function\":\"gelu_new\",\"bos_"
			       "token_id\":5,\"n_inner\":100}",
			       &c, msg),
			 -EINVAL); /* a duplicate key */
	assert_int_equal(parse("{" GPT2_CFG ",\"n_inner\":100,\"layer_norm_"
			       "epsilon\":1e-3,\"tie_word_embeddings\":false,"
			       "\"activation_function\":\"gelu_new\",\"bos_"
			       "token_id\":5}",
			       &c, msg),
			 0);
	assert_int_equal(c.n_inner, 100);
	assert_true(c.eps == 1e-3f);
	assert_false(c.tied);

	assert_int_equal(parse("{" LLAMA_CFG "}", &c, msg), 0);
	assert_int_equal(c.arch, MODEL_LLAMA);
	assert_int_equal(c.n_head, 4);
	assert_int_equal(c.n_kv_head, 2);
	assert_int_equal(c.head_dim, 16);
	assert_int_equal(c.n_inner, 192);
	assert_true(c.rope.theta == 10000.0f);
	assert_true(c.eps == 1e-6f);
	assert_false(c.tied);
	assert_int_equal(parse("{" LLAMA_CFG ",\"rope_theta\":500000.0,\"tie_"
			       "word_embeddings\":true,\"rope_scaling\":null,"
			       "\"head_dim\":16,\"hidden_act\":\"silu\"}",
			       &c, msg),
			 0);
	assert_true(c.rope.theta == 500000.0f);
	assert_true(c.tied);
}

static void bad(const char *json, const char *words)
{
	struct model_config c;
	char msg[ST_MSG_LEN] = "";

	memset(&c, 0x5a, sizeof(c));
	if (parse(json, &c, msg) != -EINVAL)
		fail_msg("accepted: %s", json);
	if (!strstr(msg, "cfg.json") || !strstr(msg, words))
		fail_msg("message '%s' lacks '%s'", msg, words);
	assert_int_equal(c.n_embd, 0x5a5a5a5a); /* untouched */
}

static void test_config_bad(void **state)
{
	bad("", "cfg.json");
	bad("[1]", "not a JSON object");
	bad("{}", "\"model_type\" is missing");
	bad("{\"model_type\":\"bert\"}", "'bert' is not supported");
	bad("{\"model_type\":3}", "model_type");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":64}", "\"n_head\" is missing");
	bad("{" GPT2_CFG ",\"n_embd\":64}", "duplicate");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":\"64\",\"n_head\":4,\"n_"
	    "layer\":2,\"n_positions\":128,\"vocab_size\":256}",
	    "\"n_embd\" is not an integer");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":0,\"n_head\":4,\"n_"
	    "layer\":2,\"n_positions\":128,\"vocab_size\":256}",
	    "\"n_embd\" is 0, not in");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":64.0,\"n_head\":4,\"n_"
	    "layer\":2,\"n_positions\":128,\"vocab_size\":256}",
	    "not an integer");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":5,\"n_"
	    "layer\":2,\"n_positions\":128,\"vocab_size\":256}",
	    "not a multiple of \"n_head\"");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,\"n_"
	    "layer\":99999,\"n_positions\":128,\"vocab_size\":256}",
	    "\"n_layer\" is 99999");
	bad("{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,\"n_"
	    "layer\":2,\"n_positions\":128,\"vocab_size\":-1}",
	    "\"vocab_size\" is -1");
	bad("{" GPT2_CFG ",\"layer_norm_epsilon\":-1}",
	    "\"layer_norm_epsilon\" is -1");
	bad("{" GPT2_CFG ",\"layer_norm_epsilon\":\"x\"}", "not a number");
	bad("{" GPT2_CFG ",\"layer_norm_epsilon\":1e-300}",
	    "not a positive float");
	bad("{" GPT2_CFG ",\"activation_function\":\"relu\"}",
	    "\"activation_function\" is not gelu_new");
	bad("{" GPT2_CFG ",\"tie_word_embeddings\":1}", "not true or false");
	bad("{" GPT2_CFG ",\"scale_attn_weights\":false}",
	    "\"scale_attn_weights\"");
	bad("{" GPT2_CFG ",\"add_cross_attention\":true}",
	    "\"add_cross_attention\" is set");

	bad("{\"model_type\":\"llama\",\"hidden_size\":64}",
	    "\"intermediate_size\" is missing");
	bad("{" LLAMA_CFG ",\"rope_scaling\":{\"type\":\"linear\"}}",
	    "\"rope_scaling.factor\" is missing");
	bad("{" LLAMA_CFG ",\"attention_bias\":1}",
	    "\"attention_bias\" is not true or false");
	bad("{" LLAMA_CFG ",\"hidden_act\":\"gelu\"}", "\"hidden_act\"");
	bad("{" LLAMA_CFG ",\"head_dim\":2048}", "\"head_dim\" is 2048");
	bad("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_"
	    "size\":192,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
	    "\"num_hidden_layers\":2,\"max_position_embeddings\":128,"
	    "\"vocab_size\":256,\"rms_norm_eps\":1e-6}",
	    "not a multiple of \"num_key_value_heads\" 3");
	bad("{\"model_type\":\"llama\",\"hidden_size\":60,\"intermediate_"
	    "size\":192,\"num_attention_heads\":4,"
	    "\"num_hidden_layers\":2,\"max_position_embeddings\":128,"
	    "\"vocab_size\":256,\"rms_norm_eps\":1e-6}",
	    "head dim 15 is odd");
	bad("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_"
	    "size\":192,\"num_attention_heads\":4,"
	    "\"num_hidden_layers\":2,\"max_position_embeddings\":128,"
	    "\"rms_norm_eps\":1e-6}",
	    "\"vocab_size\" is missing");
}

/* ---------------------------------------------------------------------- */
/* Layouts */

struct blob {
	uint8_t *buf;
	uint64_t len, cap;
};

static int to_blob(void *arg, const void *buf, uint64_t len)
{
	struct blob *b = arg;

	assert_true(b->len + len <= b->cap);
	memcpy(b->buf + b->len, buf, len);
	b->len += len;
	return 0;
}

static void load(const char *name, struct model_config *c, struct st_set **set,
		 struct model_layout *L)
{
	char path[256], msg[ST_MSG_LEN];

	snprintf(path, sizeof(path), "%s/%s/config.json", dir, name);
	if (model_config_parse(path, c, msg, sizeof(msg)))
		fail_msg("%s", msg);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (st_set_open(path, set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	if (model_layout_build(c, *set, L, msg, sizeof(msg)))
		fail_msg("%s", msg);
}

/* Every slot's bytes are the tensor's, at its offset, aligned; the tied
 * head shares the embedding's. */
static void check_blob(const struct model_layout *L)
{
	struct blob b = { xmalloc(L->bytes), 0, L->bytes };

	assert_int_equal(model_layout_emit_range(L, 0, L->bytes, to_blob, &b),
			 0);
	assert_int_equal(b.len, L->bytes);
	for (size_t i = 0; i < L->nr; i++) {
		const struct model_weight *w = &L->w[i];

		if (w->unused) { /* a bias the configuration lacks */
			assert_null(w->t);
			continue;
		}
		assert_non_null(w->t);
		assert_int_equal(w->off % MODEL_ALIGN, 0);
		assert_int_equal(memcmp(b.buf + w->off, w->t->data, w->t->size),
				 0);
		assert_int_equal(w->t->ndim, w->ndim);
		if (!w->alias)
			assert_string_equal(w->t->name, w->name);
	}
	free(b.buf);
}

/* The layout made again without the files (a restart's upload) is the
 * one built from them, slot for slot; a dtype no weights have is
 * refused. */
static void check_remake(const struct model_config *c,
			 const struct model_layout *L)
{
	struct model_layout R;

	assert_int_equal(model_layout_remake(c, DJINN_DTYPE_U8, false, &R),
			 -EINVAL);
	assert_int_equal(model_layout_remake(c, L->dtype,
					     model_layout_prefixed(c, L), &R),
			 0);
	assert_int_equal(R.dtype, L->dtype);
	assert_int_equal(R.nr, L->nr);
	assert_int_equal(R.nr_global, L->nr_global);
	assert_int_equal(R.per_layer, L->per_layer);
	assert_int_equal(R.bytes, L->bytes);
	for (size_t i = 0; i < L->nr; i++) {
		assert_string_equal(R.w[i].name, L->w[i].name);
		assert_int_equal(R.w[i].ndim, L->w[i].ndim);
		assert_memory_equal(R.w[i].shape, L->w[i].shape,
				    sizeof(L->w[i].shape));
		assert_int_equal(R.w[i].off, L->w[i].off);
		assert_int_equal(R.w[i].alias, L->w[i].alias);
		assert_int_equal(R.w[i].unused, L->w[i].unused);
		assert_null(R.w[i].t);
	}
	model_layout_free(&R);
}

static void test_layout_gpt2(void **state)
{
	const struct model_weight *w;
	struct model_config c;
	struct model_layout L;
	struct st_set *set;

	mkmodel("g", "--seed 3");
	load("g", &c, &set, &L);
	assert_int_equal(L.dtype, DJINN_DTYPE_F32);
	assert_int_equal(L.nr, GPT2_NR_GLOBAL + 2 * GPT2_NR_LAYER);
	w = model_slot(&L, 1, GPT2_ATTN_W);
	assert_string_equal(w->name, "h.1.attn.c_attn.weight");
	assert_int_equal(w->shape[0], 64);
	assert_int_equal(w->shape[1], 192);
	w = model_slot(&L, -1, GPT2_LM_HEAD);
	assert_true(w->alias);
	assert_int_equal(w->off, model_slot(&L, -1, GPT2_WTE)->off);
	check_blob(&L);
	check_remake(&c, &L);
	model_layout_free(&L);
	st_set_close(set);

	/* "transformer." names, an untied head, f16 */
	mkmodel("g2", "--prefix transformer. --untied --dtype f16 --layers 1");
	load("g2", &c, &set, &L);
	assert_int_equal(L.dtype, DJINN_DTYPE_F16);
	assert_string_equal(model_slot(&L, 0, GPT2_LN1_B)->name,
			    "transformer.h.0.ln_1.bias");
	assert_false(model_slot(&L, -1, GPT2_LM_HEAD)->alias);
	assert_int_not_equal(model_slot(&L, -1, GPT2_LM_HEAD)->off,
			     model_slot(&L, -1, GPT2_WTE)->off);
	check_blob(&L);
	check_remake(&c, &L);
	model_layout_free(&L);
	st_set_close(set);
}

static void test_layout_llama(void **state)
{
	const struct model_weight *w;
	struct model_config c;
	struct model_layout L;
	struct st_set *set;

	mkmodel("l", "--arch llama --dtype bf16 --kv-heads 2 --shards 3");
	load("l", &c, &set, &L);
	assert_int_equal(set->nr_files, 3);
	assert_int_equal(L.dtype, DJINN_DTYPE_BF16);
	w = model_slot(&L, 1, LLAMA_K);
	assert_string_equal(w->name, "model.layers.1.self_attn.k_proj.weight");
	assert_int_equal(w->shape[0], 32);
	assert_int_equal(w->shape[1], 64);
	assert_false(model_slot(&L, -1, LLAMA_LM_HEAD)->alias);
	check_blob(&L);
	check_remake(&c, &L);
	model_layout_free(&L);
	st_set_close(set);
}

static void refused(const char *name, const char *words)
{
	char path[256], msg[ST_MSG_LEN] = "";
	struct model_config c;
	struct model_layout L;
	struct st_set *set;

	snprintf(path, sizeof(path), "%s/%s/config.json", dir, name);
	if (model_config_parse(path, &c, msg, sizeof(msg)))
		fail_msg("%s", msg);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (st_set_open(path, &set, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_int_equal(model_layout_build(&c, set, &L, msg, sizeof(msg)),
			 -EINVAL);
	if (!strstr(msg, words))
		fail_msg("message '%s' lacks '%s'", msg, words);
	assert_null(L.w);
	st_set_close(set);
}

static void test_layout_refused(void **state)
{
	/* a config with more layers than the checkpoint */
	mkmodel("b1", "--layers 1");
	write_text_file(
		dir, "b1/config.json",
		"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
		"\"n_layer\":2,\"n_positions\":128,\"vocab_size\":256}");
	refused("b1", "tensor 'h.1.ln_1.weight' is missing");
	/* a config with another vocabulary */
	write_text_file(
		dir, "b1/config.json",
		"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
		"\"n_layer\":1,\"n_positions\":128,\"vocab_size\":300}");
	refused("b1", "tensor 'wte.weight' has shape (256, 64), the config "
		      "says (300, 64)");
	/* an untied config without a head */
	write_text_file(dir, "b1/config.json",
			"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
			"\"n_layer\":1,\"n_positions\":128,\"vocab_size\":256,"
			"\"tie_word_embeddings\":false}");
	refused("b1", "tensor 'lm_head.weight' is missing");
	mkmodel("b3", "--arch llama --layers 1");
	mkmodel("b3/x", "--arch llama --layers 1 --dtype bf16 --embd 32");
	/* b3: every *.safetensors loads, so names clash */
	run_cmd("mv %s/b3/x/model.safetensors %s/b3/other.safetensors", dir,
		dir);
	{
		char path[256], msg[ST_MSG_LEN];
		struct st_set *set;

		snprintf(path, sizeof(path), "%s/b3", dir);
		assert_int_equal(st_set_open(path, &set, msg, sizeof(msg)),
				 -EINVAL);
		assert_non_null(strstr(msg, "is also in"));
	}
	/* mixed dtypes: an f16 head file beside an f32 body */
	mkmodel("b4", "--arch llama --layers 1 --tied");
	mkmodel("b4/x", "--arch llama --layers 1 --dtype f16 --tied --seed 9");
	run_cmd("python3 -c \"import json,struct;"
		"d=open('%s/b4/x/model.safetensors','rb').read();"
		"n=struct.unpack('<Q',d[:8])[0];h=json.loads(d[8:8+n]);"
		"e=h['model.embed_tokens.weight'];b,en=e['data_offsets'];"
		"h2={'lm_head.weight':dict(e,data_offsets=[0,en-b])};"
		"j=json.dumps(h2).encode();"
		"open('%s/b4/head.safetensors','wb').write(struct.pack('<Q',"
		"len(j))+j+d[8+n+b:8+n+en])\"",
		dir, dir);
	run_cmd("sed -i 's/\"tie_word_embeddings\": true/\"tie_word_embeddings\": "
		"false/' %s/b4/config.json",
		dir);
	refused("b4", "tensor 'lm_head.weight' is F16, the model's other "
		      "weights F32");
	/* a config.json that is not a file */
	{
		char path[256], msg[ST_MSG_LEN];
		struct model_config c;

		snprintf(path, sizeof(path), "%s/b1", dir);
		assert_int_equal(model_config_parse(path, &c, msg, sizeof(msg)),
				 -EINVAL);
		assert_non_null(strstr(msg, "not a regular file"));
		snprintf(path, sizeof(path), "%s/none.json", dir);
		assert_int_equal(model_config_parse(path, &c, msg, sizeof(msg)),
				 -ENOENT);
	}
	/* an integer dtype */
	mkmodel("b5", "--layers 1");
	run_cmd("python3 -c \"import json,struct;p='%s/b5/model.safetensors';"
		"d=open(p,'rb').read();n=struct.unpack('<Q',d[:8])[0];"
		"h=d[8:8+n].replace(b'\\\"F32\\\"',b'\\\"I32\\\"');"
		"open(p,'wb').write(d[:8]+h+d[8+n:])\"",
		dir);
	refused("b5", "is I32: weights must be F32, F16 or BF16");
}

/* ---------------------------------------------------------------------- */
/* The llama family: architectures, RoPE forms, sliding windows */

#define FAMILY_CFG(type)                                                   \
	"\"model_type\":\"" type "\",\"hidden_size\":64,\"intermediate_"   \
	"size\":192,\"num_attention_heads\":4,\"num_key_value_heads\":2,"  \
	"\"num_hidden_layers\":2,\"max_position_embeddings\":128,\"vocab_" \
	"size\":256,\"rms_norm_eps\":1e-6"
#define ROPE_PARAMS(x) ",\"rope_parameters\":{" x "}"
#define ROPE_SCALING(x) ",\"rope_scaling\":{" x "}"

static void good(const char *json, struct model_config *c)
{
	char msg[ST_MSG_LEN];

	if (parse(json, c, msg))
		fail_msg("refused: %s: %s", json, msg);
}

/* Each setting that would change the math in a way djinn does not
 * compute is refused by name. */
static void test_config_rope_refused(void **state)
{
	bad("{" LLAMA_CFG ROPE_PARAMS(
		    "\"rope_type\":\"longrope\",\"rope_theta\":10000.0,"
		    "\"short_factor\":[1,1,1,1,1,1,1,1],\"long_factor\":[2,2,"
		    "2,2,2,2,2,2],\"original_max_position_embeddings\":64") "}",
	    "\"rope_parameters.rope_type\" 'longrope' is not supported");
	bad("{" LLAMA_CFG ROPE_SCALING("\"type\":\"longrope\",\"short_factor\":"
				       "[1],\"long_factor\":[1]") "}",
	    "'longrope' is not supported");
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"foo\",\"rope_theta\":"
				      "10000.0") "}",
	    "\"rope_parameters.rope_type\" 'foo' is not supported");
	bad("{" LLAMA_CFG ROPE_SCALING(
		    "\"rope_type\":\"foo\",\"factor\":2.0") "}",
	    "\"rope_scaling.rope_type\" 'foo' is not supported");
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":3") "}", "rope_type");
	/* partial rotary embeddings, inside the parameters and beside them */
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"default\",\"rope_"
				      "theta\":10000.0,\"partial_rotary_"
				      "factor\":0.5") "}",
	    "\"rope_parameters.partial_rotary_factor\" is not 1");
	bad("{" FAMILY_CFG("qwen2") ",\"partial_rotary_factor\":0.5}",
	    "\"partial_rotary_factor\" is not 1");
	bad("{" LLAMA_CFG ",\"rope_theta\":10000.0,\"rope_scaling\":null,"
	    "\"partial_rotary_factor\":0.25}",
	    "\"partial_rotary_factor\" is not 1");
	/* transformers 5 moves a top-level one into the parameters
	 * (convert_rope_params_to_dict), where it changes the math */
	bad("{" LLAMA_CFG ",\"partial_rotary_factor\":0.5" ROPE_PARAMS(
		    "\"rope_type\":\"linear\",\"factor\":2.0") "}",
	    "partial_rotary_factor\"");
	bad("{" LLAMA_CFG ",\"partial_rotary_factor\":0.5" ROPE_SCALING(
		    "\"rope_type\":\"linear\",\"factor\":2.0") "}",
	    "partial_rotary_factor\"");
	/* keys RoPE has not */
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"linear\",\"rope_theta\""
				      ":10000.0,\"factor\":2.0,\"foo\":1") "}",
	    "\"rope_parameters.foo\" is not a RoPE parameter");
	bad("{" FAMILY_CFG("mistral") ROPE_SCALING("\"rope_type\":\"dynamic\","
						   "\"factor\":2.0,\"scale\":"
						   "1.0") "}",
	    "\"rope_scaling.scale\" is not a RoPE parameter");
	bad("{" FAMILY_CFG("qwen3")
		    ROPE_PARAMS("\"rope_type\":\"default\","
				"\"mrope_section\":[2,3,3]") "}",
	    "mrope_section");
	/* a type's own parameters missing or wrong */
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"llama3\",\"factor\":"
				      "8.0,\"high_freq_factor\":4.0") "}",
	    "\"rope_parameters.low_freq_factor\"");
	bad("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"dynamic\"") "}",
	    "\"rope_parameters.factor\"");
	bad("{" LLAMA_CFG ",\"rope_parameters\":\"default\"}",
	    "\"rope_parameters\" is not an object");
	/* transformers 5 takes rope_scaling over rope_parameters: when both
	 * are there they must say the same */
	bad("{" LLAMA_CFG ROPE_SCALING("\"rope_type\":\"linear\",\"factor\":"
				       "2.0")
		    ROPE_PARAMS("\"rope_type\":\"linear\",\"factor\":4.0,"
				"\"rope_theta\":10000.0") "}",
	    "\"rope_scaling\" and \"rope_parameters\" disagree");
	bad("{" LLAMA_CFG ROPE_SCALING("\"type\":\"dynamic\",\"factor\":2.0")
		    ROPE_PARAMS("\"rope_type\":\"linear\",\"factor\":2.0") "}",
	    "disagree");
	/* SwiGLU only, in every member of the family */
	bad("{" FAMILY_CFG("qwen2") ",\"hidden_act\":\"gelu\"}",
	    "\"hidden_act\"");
	bad("{" FAMILY_CFG("mistral") ",\"hidden_act\":\"gelu_pytorch_tanh\"}",
	    "\"hidden_act\"");
	bad("{" FAMILY_CFG("qwen3") ",\"hidden_act\":\"relu\"}",
	    "\"hidden_act\"");
	bad("{" LLAMA_CFG ",\"dtype\":\"int8\"}", "\"dtype\" is int8");
	bad("{" LLAMA_CFG ",\"dtype\":\"float32\",\"torch_dtype\":\"bfloat16\""
	    "}",
	    "\"dtype\" and \"torch_dtype\" disagree");
	bad("{" FAMILY_CFG("qwen2") ",\"use_sliding_window\":true,\"sliding_"
				    "window\":64,\"layer_types\":[\"full_"
				    "attention\"]}",
	    "\"layer_types\"");
	bad("{" FAMILY_CFG("qwen3") ",\"use_sliding_window\":true,\"sliding_"
				    "window\":64,\"layer_types\":[\"full_"
				    "attention\",\"chunked_attention\"]}",
	    "\"layer_types\"");
}

/* What each architecture and RoPE setting parses to. */
static void test_config_family(void **state)
{
	struct model_config c;

	good("{" FAMILY_CFG("qwen2") "}", &c);
	assert_int_equal(c.arch, MODEL_QWEN2);
	assert_true(c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.qk_norm);
	assert_int_equal(c.head_dim, 16);
	good("{" FAMILY_CFG("qwen3") ",\"head_dim\":32,\"attention_bias\":"
				     "true}",
	     &c);
	assert_int_equal(c.arch, MODEL_QWEN3);
	assert_int_equal(c.head_dim, 32); /* not 64 / 4 */
	assert_true(c.qkv_bias && c.o_bias && c.qk_norm && !c.mlp_bias);
	good("{" LLAMA_CFG ",\"attention_bias\":true,\"mlp_bias\":true}", &c);
	assert_true(c.qkv_bias && c.o_bias && c.mlp_bias && !c.qk_norm);
	/* Qwen2Config and Qwen3Config: a null num_key_value_heads is
	 * num_attention_heads (left out, it is 32) */
	good("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_"
	     "size\":192,\"num_attention_heads\":4,\"num_key_value_heads\":"
	     "null,\"num_hidden_layers\":2,\"max_position_embeddings\":128,"
	     "\"vocab_size\":256}",
	     &c);
	assert_int_equal(c.n_kv_head, 4);
	good("{" FAMILY_CFG("mistral") ",\"head_dim\":null}", &c);
	assert_int_equal(c.arch, MODEL_MISTRAL);
	assert_int_equal(c.head_dim, 16);
	assert_false(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);

	/* theta: in rope_parameters (transformers 5) or beside rope_scaling */
	good("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"default\",\"rope_"
				       "theta\":500000.0") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_DEFAULT);
	assert_true(c.rope.theta == 500000.0f);
	assert_true(c.rope.inv_freq[1] == 1.0f / powf(500000.0f, 0.125f));
	good("{" LLAMA_CFG ",\"rope_theta\":250000.0,\"rope_scaling\":null}",
	     &c);
	assert_true(c.rope.theta == 250000.0f);
	/* linear, legacy "type" */
	good("{" LLAMA_CFG ",\"rope_theta\":10000.0" ROPE_SCALING(
		     "\"type\":\"linear\",\"factor\":4.0") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_LINEAR);
	assert_true(c.rope.factor == 4.0f);
	assert_int_equal(c.n_ctx, 128);
	/* dynamic: contexts up to floor(factor * max_position_embeddings) */
	good("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"dynamic\",\"factor\":"
				       "2.5,\"rope_theta\":10000.0") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_DYNAMIC);
	assert_int_equal(c.n_pos, 128);
	assert_int_equal(c.n_ctx, 320);
	/* llama3: original_max_position_embeddings defaults to the
	 * positions */
	good("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"llama3\",\"factor\":"
				       "8.0,\"low_freq_factor\":1.0,\"high_"
				       "freq_factor\":4.0,\"rope_theta\":"
				       "500000.0") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_LLAMA3);
	assert_int_equal(c.rope.orig_ctx, 128);
	assert_true(c.rope.low_freq_factor == 1.0f);
	assert_true(c.rope.high_freq_factor == 4.0f);
	assert_true(c.rope.attn_factor == 1.0f);
	/* yarn: attention factor 0.1 ln(factor) + 1 unless given; betas
	 * 32 and 1 unless given */
	good("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"yarn\",\"factor\":4.0,"
				       "\"original_max_position_embeddings\":"
				       "32") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_YARN);
	assert_int_equal(c.rope.orig_ctx, 32);
	assert_true(fabs(c.rope.attn_factor - (0.1 * log(4.0) + 1)) < 1e-6);
	assert_true(c.rope.beta_fast == 32.0f && c.rope.beta_slow == 1.0f);
	assert_true(c.rope.truncate);
	assert_int_equal(c.n_ctx, 128);
	good("{" LLAMA_CFG ROPE_PARAMS("\"rope_type\":\"yarn\",\"factor\":4.0,"
				       "\"attention_factor\":1.25,\"beta_fast\""
				       ":16,\"beta_slow\":2") "}",
	     &c);
	assert_true(c.rope.attn_factor == 1.25f);
	assert_true(c.rope.beta_fast == 16.0f && c.rope.beta_slow == 2.0f);
	assert_int_equal(c.rope.orig_ctx, 128);
	/* rope_scaling and rope_parameters both, saying the same */
	good("{" LLAMA_CFG ",\"rope_theta\":10000.0" ROPE_SCALING(
		     "\"type\":\"linear\",\"factor\":2.0")
		     ROPE_PARAMS("\"rope_type\":\"linear\",\"factor\":2.0,"
				 "\"rope_theta\":10000.0") "}",
	     &c);
	assert_int_equal(c.rope.type, ROPE_LINEAR);
	assert_true(c.rope.factor == 2.0f);
}

/* Sliding windows parse; contexts stop at them. */
static void test_config_window(void **state)
{
	struct model_config c;

	good("{" FAMILY_CFG("mistral") ",\"sliding_window\":64}", &c);
	assert_int_equal(c.window, 64);
	assert_int_equal(c.n_pos, 128);
	assert_int_equal(c.n_ctx, 64);
	good("{" FAMILY_CFG("mistral") ",\"sliding_window\":null}", &c);
	assert_int_equal(c.window, 0);
	assert_int_equal(c.n_ctx, 128);
	good("{" FAMILY_CFG("mistral") ",\"sliding_window\":4096}", &c);
	assert_int_equal(c.n_ctx, 128);
	/* the Hub's Qwen2.5 form: a window, not used */
	good("{" FAMILY_CFG("qwen2") ",\"use_sliding_window\":false,\"sliding_"
				     "window\":131072,\"max_window_layers\":"
				     "28}",
	     &c);
	assert_int_equal(c.window, 0);
	assert_int_equal(c.n_ctx, 128);
	/* layers from max_window_layers on slide */
	good("{" FAMILY_CFG("qwen2") ",\"use_sliding_window\":true,\"sliding_"
				     "window\":64,\"max_window_layers\":1}",
	     &c);
	assert_int_equal(c.window, 64);
	assert_int_equal(c.n_ctx, 64);
	good("{" FAMILY_CFG("qwen2") ",\"use_sliding_window\":true,\"sliding_"
				     "window\":64,\"max_window_layers\":2}",
	     &c);
	assert_int_equal(c.window, 0);
	assert_int_equal(c.n_ctx, 128);
	/* or as layer_types says */
	good("{" FAMILY_CFG("qwen3") ",\"use_sliding_window\":true,\"sliding_"
				     "window\":32,\"max_window_layers\":28,"
				     "\"layer_types\":[\"full_attention\","
				     "\"sliding_attention\"]}",
	     &c);
	assert_int_equal(c.window, 32);
	assert_int_equal(c.n_ctx, 32);
	good("{" FAMILY_CFG("qwen3") ",\"use_sliding_window\":true,\"sliding_"
				     "window\":32,\"layer_types\":[\"full_"
				     "attention\",\"full_attention\"]}",
	     &c);
	assert_int_equal(c.window, 0);
	/* dynamic RoPE's longer contexts stop at a window too */
	good("{" FAMILY_CFG("mistral") ",\"sliding_window\":200" ROPE_PARAMS(
		     "\"rope_type\":\"dynamic\",\"factor\":2.0") "}",
	     &c);
	assert_int_equal(c.n_ctx, 200);
}

static void same_config(const struct model_config *a,
			const struct model_config *b, const char *what)
{
	const struct model_rope *p = &a->rope, *q = &b->rope;

	if (a->arch != b->arch || a->n_embd != b->n_embd ||
	    a->n_head != b->n_head || a->n_kv_head != b->n_kv_head ||
	    a->head_dim != b->head_dim || a->n_layer != b->n_layer ||
	    a->n_inner != b->n_inner || a->n_pos != b->n_pos ||
	    a->n_ctx != b->n_ctx || a->window != b->window ||
	    a->vocab != b->vocab || a->eps != b->eps || a->tied != b->tied ||
	    a->qkv_bias != b->qkv_bias || a->o_bias != b->o_bias ||
	    a->mlp_bias != b->mlp_bias || a->qk_norm != b->qk_norm ||
	    a->dtype != b->dtype)
		fail_msg("%s: the two forms parse to other shapes", what);
	if (p->type != q->type || p->theta != q->theta ||
	    p->factor != q->factor ||
	    p->low_freq_factor != q->low_freq_factor ||
	    p->high_freq_factor != q->high_freq_factor ||
	    p->orig_ctx != q->orig_ctx || p->beta_fast != q->beta_fast ||
	    p->beta_slow != q->beta_slow || p->truncate != q->truncate ||
	    p->attn_factor != q->attn_factor ||
	    memcmp(p->inv_freq, q->inv_freq, a->head_dim / 2 * sizeof(float)))
		fail_msg("%s: the two forms parse to other RoPE", what);
}

/* scripts/mkmodel.py's transformers 4 and 5 forms of the same model
 * parse to the same configuration. */
static void test_config_forms(void **state)
{
	static const struct {
		const char *args;
		int arch, rope;
		uint32_t n_ctx;
	} m[] = {
		{ "--arch llama --rope-theta 500000", MODEL_LLAMA, ROPE_DEFAULT,
		  128 },
		{ "--arch llama --rope linear --rope-factor 4", MODEL_LLAMA,
		  ROPE_LINEAR, 128 },
		{ "--arch llama --rope dynamic --rope-factor 2.5 --ctx 16",
		  MODEL_LLAMA, ROPE_DYNAMIC, 40 },
		{ "--arch llama --rope llama3 --rope-factor 8 --original-max-pos "
		  "32 --rope-theta 500000",
		  MODEL_LLAMA, ROPE_LLAMA3, 128 },
		{ "--arch llama --rope yarn --rope-factor 4 --original-max-pos 32 "
		  "--beta-fast 16 --attention-factor 1.2",
		  MODEL_LLAMA, ROPE_YARN, 128 },
		{ "--arch llama --attention-bias --mlp-bias --tied --kv-heads 2",
		  MODEL_LLAMA, ROPE_DEFAULT, 128 },
		{ "--arch qwen2 --sliding-window 64 --max-window-layers 1 --tied",
		  MODEL_QWEN2, ROPE_DEFAULT, 64 },
		{ "--arch qwen3 --head-dim 32 --attention-bias --rope yarn "
		  "--rope-factor 2 --dtype bf16",
		  MODEL_QWEN3, ROPE_YARN, 128 },
		{ "--arch mistral --sliding-window 64 --rope linear",
		  MODEL_MISTRAL, ROPE_LINEAR, 64 },
		{ "--arch mistral", MODEL_MISTRAL, ROPE_DEFAULT, 128 },
	};
	char path[256], msg[ST_MSG_LEN], args[256];

	for (size_t i = 0; i < ARRAY_SIZE(m); i++) {
		struct model_config c[3];

		for (int k = 0; k < 3; k++) {
			char name[32];

			/* 5, 4, and 4 with rope_scaling's legacy "type" */
			snprintf(name, sizeof(name), "form%zu-%d", i, k);
			snprintf(args, sizeof(args), "%s --config-form %d%s",
				 m[i].args, k ? 4 : 5,
				 k == 2 && m[i].rope != ROPE_DEFAULT ?
					 " --rope-legacy-type" :
					 "");
			mkmodel(name, args);
			snprintf(path, sizeof(path), "%s/%s/config.json", dir,
				 name);
			if (model_config_parse(path, &c[k], msg, sizeof(msg)))
				fail_msg("%s: %s", args, msg);
		}
		assert_int_equal(c[0].arch, m[i].arch);
		assert_int_equal(c[0].rope.type, m[i].rope);
		assert_int_equal(c[0].n_ctx, m[i].n_ctx);
		assert_string_equal(c[0].dtype_key, "dtype");
		assert_string_equal(c[1].dtype_key, "torch_dtype");
		same_config(&c[0], &c[1], m[i].args);
		same_config(&c[0], &c[2], m[i].args);
	}
}

/* The config's dtype must be the weights'. */
static void test_layout_dtype(void **state)
{
	mkmodel("d1", "--arch qwen2 --layers 1");
	run_cmd("sed -i 's/\"dtype\": \"float32\"/\"dtype\": \"bfloat16\"/' "
		"%s/d1/config.json",
		dir);
	refused("d1", "config.json's \"dtype\" is");
	mkmodel("d2", "--arch llama --layers 1 --dtype bf16 --config-form 4");
	run_cmd("sed -i 's/\"torch_dtype\": \"bfloat16\"/\"torch_dtype\": "
		"\"float16\"/' %s/d2/config.json",
		dir);
	refused("d2", "config.json's \"torch_dtype\" is");
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/djinn-mc-XXXXXX");
	return model_tmpdir(dir);
}

static int teardown(void **state)
{
	return rm_tree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_good),
		cmocka_unit_test(test_config_bad),
		cmocka_unit_test(test_layout_gpt2),
		cmocka_unit_test(test_layout_llama),
		cmocka_unit_test(test_layout_refused),
		cmocka_unit_test(test_config_rope_refused),
		cmocka_unit_test(test_config_family),
		cmocka_unit_test(test_config_window),
		cmocka_unit_test(test_config_forms),
		cmocka_unit_test(test_layout_dtype),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
