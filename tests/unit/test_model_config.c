// SPDX-License-Identifier: MIT
/*
 * config.json parsing for GPT-2 and Llama, and the weight layout: models
 * written by scripts/mkmodel.py load with every slot at the right tensor
 * and shape; bad configs and checkpoints are refused naming the field or
 * tensor. Runs from the repository root (it calls scripts/mkmodel.py).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/config.h"
#include "testutil.h"

static char dir[64];

static void run(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd))
		fail_msg("failed: %s", cmd);
}

static void mkmodel(const char *name, const char *args)
{
	run("python3 scripts/mkmodel.py %s %s/%s", args, dir, name);
}

static void write_text(const char *name, const char *text)
{
	char path[256];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
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

	assert_int_equal(model_layout_emit(L, to_blob, &b), 0);
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
	write_text("b1/config.json",
		   "{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
		   "\"n_layer\":2,\"n_positions\":128,\"vocab_size\":256}");
	refused("b1", "tensor 'h.1.ln_1.weight' is missing");
	/* a config with another vocabulary */
	write_text("b1/config.json",
		   "{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
		   "\"n_layer\":1,\"n_positions\":128,\"vocab_size\":300}");
	refused("b1", "tensor 'wte.weight' has shape (256, 64), the config "
		      "says (300, 64)");
	/* an untied config without a head */
	write_text("b1/config.json",
		   "{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_head\":4,"
		   "\"n_layer\":1,\"n_positions\":128,\"vocab_size\":256,"
		   "\"tie_word_embeddings\":false}");
	refused("b1", "tensor 'lm_head.weight' is missing");
	mkmodel("b3", "--arch llama --layers 1");
	mkmodel("b3/x", "--arch llama --layers 1 --dtype bf16 --embd 32");
	/* b3: every *.safetensors loads, so names clash */
	run("mv %s/b3/x/model.safetensors %s/b3/other.safetensors", dir, dir);
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
	run("python3 -c \"import json,struct;"
	    "d=open('%s/b4/x/model.safetensors','rb').read();"
	    "n=struct.unpack('<Q',d[:8])[0];h=json.loads(d[8:8+n]);"
	    "e=h['model.embed_tokens.weight'];b,en=e['data_offsets'];"
	    "h2={'lm_head.weight':dict(e,data_offsets=[0,en-b])};"
	    "j=json.dumps(h2).encode();"
	    "open('%s/b4/head.safetensors','wb').write(struct.pack('<Q',"
	    "len(j))+j+d[8+n+b:8+n+en])\"",
	    dir, dir);
	run("sed -i 's/\"tie_word_embeddings\": true/\"tie_word_embeddings\": "
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
	run("python3 -c \"import json,struct;p='%s/b5/model.safetensors';"
	    "d=open(p,'rb').read();n=struct.unpack('<Q',d[:8])[0];"
	    "h=d[8:8+n].replace(b'\\\"F32\\\"',b'\\\"I32\\\"');"
	    "open(p,'wb').write(d[:8]+h+d[8+n:])\"",
	    dir);
	refused("b5", "is I32: weights must be F32, F16 or BF16");
}

static int setup(void **state)
{
	if (system("python3 -c 'pass'")) {
		printf("test_model_config: skipped: no python3 for "
		       "scripts/mkmodel.py\n");
		exit(77);
	}
	if (access("scripts/mkmodel.py", R_OK)) {
		printf("test_model_config: skipped: run from the repository "
		       "root\n");
		exit(77);
	}
	snprintf(dir, sizeof(dir), "/tmp/djinn-mc-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_good),
		cmocka_unit_test(test_config_bad),
		cmocka_unit_test(test_layout_gpt2),
		cmocka_unit_test(test_layout_llama),
		cmocka_unit_test(test_layout_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
