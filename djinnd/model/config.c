// SPDX-License-Identifier: MIT
/*
 * config.json and the weight layout of GPT-2 and Llama. See config.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "errmsg.h"
#include "model/config.h"

const char *model_arch_name(enum model_arch a)
{
	switch (a) {
	case MODEL_GPT2:
		return "gpt2";
	case MODEL_LLAMA:
		return "llama";
	}
	return "unknown";
}

/* ---------------------------------------------------------------------- */
/* config.json */

struct cfg_ctx {
	json_t *root;
	const char *path;
	char *msg;
	size_t msglen;
};

/* An integer field in [lo, hi]; @def when absent (or null) and @def >= 0,
 * else required. */
static int get_uint(struct cfg_ctx *x, const char *key, long long def,
		    long long lo, long long hi, uint32_t *out)
{
	json_t *v = json_object_get(x->root, key);
	long long n;

	if (!v || json_is_null(v)) {
		if (def < 0)
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"%s\" is missing", x->path, key);
		*out = (uint32_t)def;
		return 0;
	}
	if (!json_is_integer(v))
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s\" is not an integer", x->path, key);
	n = json_integer_value(v);
	if (n < lo || n > hi)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s\" is %lld, not in [%lld, %lld]",
			      x->path, key, n, lo, hi);
	*out = (uint32_t)n;
	return 0;
}

/* A positive finite number; @def when absent and @def > 0. */
static int get_pos(struct cfg_ctx *x, const char *key, double def, float *out)
{
	json_t *v = json_object_get(x->root, key);
	double d;

	if (!v || json_is_null(v)) {
		if (def <= 0)
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"%s\" is missing", x->path, key);
		*out = (float)def;
		return 0;
	}
	if (!json_is_number(v))
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s\" is not a number", x->path, key);
	d = json_number_value(v);
	if (!(d > 0) || !isfinite((float)d) || (float)d == 0.0f)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s\" is %g, not a positive float", x->path,
			      key, d);
	*out = (float)d;
	return 0;
}

static int get_bool(struct cfg_ctx *x, const char *key, bool def, bool *out)
{
	json_t *v = json_object_get(x->root, key);

	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s\" is not true or false", x->path, key);
	*out = json_is_true(v);
	return 0;
}

/* A string field, if present, must be one of @ok (NULL-terminated). */
static int want_string(struct cfg_ctx *x, const char *key,
		       const char *const *ok)
{
	json_t *v = json_object_get(x->root, key);

	if (!v || json_is_null(v))
		return 0;
	for (unsigned int i = 0; json_is_string(v) && ok[i]; i++)
		if (!strcmp(json_string_value(v), ok[i]))
			return 0;
	return errmsg(x->msg, x->msglen, -EINVAL,
		      "%s: \"%s\" is not %s: not supported", x->path, key,
		      ok[0]);
}

/* A field that, if present, must be null or false: a feature this
 * runtime does not have. */
static int want_off(struct cfg_ctx *x, const char *key)
{
	json_t *v = json_object_get(x->root, key);

	if (!v || json_is_null(v) || json_is_false(v))
		return 0;
	return errmsg(x->msg, x->msglen, -EINVAL,
		      "%s: \"%s\" is set: not supported", x->path, key);
}

static int parse_gpt2(struct cfg_ctx *x, struct model_config *c)
{
	static const char *const act[] = { "gelu_new", NULL };
	uint32_t inner;
	int ret;

	if ((ret = get_uint(x, "n_embd", -1, 1, MODEL_MAX_DIM, &c->n_embd)) ||
	    (ret = get_uint(x, "n_head", -1, 1, MODEL_MAX_DIM, &c->n_head)) ||
	    (ret = get_uint(x, "n_layer", -1, 1, MODEL_MAX_LAYERS,
			    &c->n_layer)) ||
	    (ret = get_uint(x, "n_positions", -1, 1, MODEL_MAX_DIM,
			    &c->n_ctx)) ||
	    (ret = get_uint(x, "vocab_size", -1, 1, MODEL_MAX_VOCAB,
			    &c->vocab)) ||
	    (ret = get_uint(x, "n_inner", 0, 1, MODEL_MAX_DIM, &inner)) ||
	    (ret = get_pos(x, "layer_norm_epsilon", 1e-5, &c->eps)) ||
	    (ret = get_bool(x, "tie_word_embeddings", true, &c->tied)) ||
	    (ret = want_string(x, "activation_function", act)) ||
	    (ret = want_off(x, "scale_attn_by_inverse_layer_idx")) ||
	    (ret = want_off(x, "reorder_and_upcast_attn")) ||
	    (ret = want_off(x, "add_cross_attention")))
		return ret;
	if (json_is_false(json_object_get(x->root, "scale_attn_weights")))
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"scale_attn_weights\" is false: not "
			      "supported",
			      x->path);
	if (c->n_embd % c->n_head)
		return errmsg(
			x->msg, x->msglen, -EINVAL,
			"%s: \"n_embd\" %u is not a multiple of \"n_head\" "
			"%u",
			x->path, c->n_embd, c->n_head);
	if (!inner && (uint64_t)c->n_embd * 4 > MODEL_MAX_DIM)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: 4 \"n_embd\" is over %u", x->path,
			      MODEL_MAX_DIM);
	c->n_inner = inner ? inner : 4 * c->n_embd;
	c->n_kv_head = c->n_head;
	c->head_dim = c->n_embd / c->n_head;
	return 0;
}

static int parse_llama(struct cfg_ctx *x, struct model_config *c)
{
	static const char *const act[] = { "silu", NULL };
	uint32_t hd;
	int ret;

	if ((ret = get_uint(x, "hidden_size", -1, 1, MODEL_MAX_DIM,
			    &c->n_embd)) ||
	    (ret = get_uint(x, "intermediate_size", -1, 1, MODEL_MAX_DIM,
			    &c->n_inner)) ||
	    (ret = get_uint(x, "num_attention_heads", -1, 1, MODEL_MAX_DIM,
			    &c->n_head)) ||
	    (ret = get_uint(x, "num_key_value_heads", c->n_head, 1,
			    MODEL_MAX_DIM, &c->n_kv_head)) ||
	    (ret = get_uint(x, "num_hidden_layers", -1, 1, MODEL_MAX_LAYERS,
			    &c->n_layer)) ||
	    (ret = get_uint(x, "max_position_embeddings", -1, 1, MODEL_MAX_DIM,
			    &c->n_ctx)) ||
	    (ret = get_uint(x, "vocab_size", -1, 1, MODEL_MAX_VOCAB,
			    &c->vocab)) ||
	    (ret = get_pos(x, "rms_norm_eps", -1, &c->eps)) ||
	    (ret = get_pos(x, "rope_theta", 10000.0, &c->rope_theta)) ||
	    (ret = get_bool(x, "tie_word_embeddings", false, &c->tied)) ||
	    (ret = want_string(x, "hidden_act", act)) ||
	    (ret = want_off(x, "rope_scaling")) ||
	    (ret = want_off(x, "attention_bias")) ||
	    (ret = want_off(x, "mlp_bias")))
		return ret;
	if (c->n_embd % c->n_head)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"hidden_size\" %u is not a multiple of "
			      "\"num_attention_heads\" %u",
			      x->path, c->n_embd, c->n_head);
	if (c->n_head % c->n_kv_head)
		return errmsg(
			x->msg, x->msglen, -EINVAL,
			"%s: \"num_attention_heads\" %u is not a multiple "
			"of \"num_key_value_heads\" %u",
			x->path, c->n_head, c->n_kv_head);
	c->head_dim = c->n_embd / c->n_head;
	if (c->head_dim % 2)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: head dim %u is odd: RoPE needs pairs",
			      x->path, c->head_dim);
	if ((ret = get_uint(x, "head_dim", c->head_dim, c->head_dim,
			    c->head_dim, &hd)))
		return ret;
	return 0;
}

int model_config_parse_json(const char *text, size_t len, const char *path,
			    struct model_config *c, char *msg, size_t msglen)
{
	struct cfg_ctx x = { .path = path, .msg = msg, .msglen = msglen };
	struct model_config n = { 0 };
	json_error_t jerr;
	const char *type;
	int ret;

	x.root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!x.root)
		return errmsg(msg, msglen, -EINVAL, "%s: line %d: %s", path,
			      jerr.line, jerr.text);
	if (!json_is_object(x.root)) {
		ret = errmsg(msg, msglen, -EINVAL, "%s: not a JSON object",
			     path);
		goto out;
	}
	type = json_string_value(json_object_get(x.root, "model_type"));
	if (!type) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: \"model_type\" is missing or not a string",
			     path);
		goto out;
	}
	if (!strcmp(type, "gpt2")) {
		n.arch = MODEL_GPT2;
		ret = parse_gpt2(&x, &n);
	} else if (!strcmp(type, "llama")) {
		n.arch = MODEL_LLAMA;
		ret = parse_llama(&x, &n);
	} else {
		char t[40];

		snprintf(t, sizeof(t), "%s", type);
		for (char *p = t; *p; p++)
			*p = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: \"model_type\" '%s' is not gpt2 or llama",
			     path, t);
	}
	if (!ret)
		*c = n;
out:
	json_decref(x.root);
	return ret;
}

int model_config_parse(const char *path, struct model_config *c, char *msg,
		       size_t msglen)
{
	struct stat st;
	char *buf;
	long len;
	FILE *f;
	int ret;

	f = fopen(path, "rb");
	if (!f)
		return errmsg(msg, msglen, -errno, "%s: %s", path,
			      strerror(errno));
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		ret = errmsg(msg, msglen, -EINVAL, "%s: not a regular file",
			     path);
		goto out_close;
	}
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET)) {
		ret = errmsg(msg, msglen, -EIO, "%s: cannot size", path);
		goto out_close;
	}
	if (len > MODEL_MAX_CONFIG) {
		ret = errmsg(msg, msglen, -E2BIG, "%s: %ld bytes, over %u",
			     path, len, MODEL_MAX_CONFIG);
		goto out_close;
	}
	buf = malloc((size_t)len + 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	if (fread(buf, 1, (size_t)len, f) != (size_t)len)
		ret = errmsg(msg, msglen, -EIO, "%s: short read", path);
	else
		ret = model_config_parse_json(buf, (size_t)len, path, c, msg,
					      msglen);
	free(buf);
out_close:
	fclose(f);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Weights */

void model_layout_free(struct model_layout *L)
{
	free(L->w);
	memset(L, 0, sizeof(*L));
}

static void slot(struct model_weight *w, unsigned int ndim, uint64_t d0,
		 uint64_t d1, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void slot(struct model_weight *w, unsigned int ndim, uint64_t d0,
		 uint64_t d1, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->name, sizeof(w->name), fmt, ap);
	va_end(ap);
	w->ndim = ndim;
	w->shape[0] = d0;
	w->shape[1] = d1;
}

static void names_gpt2(const struct model_config *c, const char *pfx,
		       struct model_weight *w)
{
	uint64_t C = c->n_embd, F = c->n_inner;

	slot(&w[GPT2_WTE], 2, c->vocab, C, "%swte.weight", pfx);
	slot(&w[GPT2_WPE], 2, c->n_ctx, C, "%swpe.weight", pfx);
	slot(&w[GPT2_LNF_W], 1, C, 0, "%sln_f.weight", pfx);
	slot(&w[GPT2_LNF_B], 1, C, 0, "%sln_f.bias", pfx);
	slot(&w[GPT2_LM_HEAD], 2, c->vocab, C, "lm_head.weight");
	for (uint32_t l = 0; l < c->n_layer; l++) {
		struct model_weight *p = &w[GPT2_NR_GLOBAL + l * GPT2_NR_LAYER];

		slot(&p[GPT2_LN1_W], 1, C, 0, "%sh.%u.ln_1.weight", pfx, l);
		slot(&p[GPT2_LN1_B], 1, C, 0, "%sh.%u.ln_1.bias", pfx, l);
		slot(&p[GPT2_ATTN_W], 2, C, 3 * C, "%sh.%u.attn.c_attn.weight",
		     pfx, l);
		slot(&p[GPT2_ATTN_B], 1, 3 * C, 0, "%sh.%u.attn.c_attn.bias",
		     pfx, l);
		slot(&p[GPT2_APROJ_W], 2, C, C, "%sh.%u.attn.c_proj.weight",
		     pfx, l);
		slot(&p[GPT2_APROJ_B], 1, C, 0, "%sh.%u.attn.c_proj.bias", pfx,
		     l);
		slot(&p[GPT2_LN2_W], 1, C, 0, "%sh.%u.ln_2.weight", pfx, l);
		slot(&p[GPT2_LN2_B], 1, C, 0, "%sh.%u.ln_2.bias", pfx, l);
		slot(&p[GPT2_FC_W], 2, C, F, "%sh.%u.mlp.c_fc.weight", pfx, l);
		slot(&p[GPT2_FC_B], 1, F, 0, "%sh.%u.mlp.c_fc.bias", pfx, l);
		slot(&p[GPT2_MPROJ_W], 2, F, C, "%sh.%u.mlp.c_proj.weight", pfx,
		     l);
		slot(&p[GPT2_MPROJ_B], 1, C, 0, "%sh.%u.mlp.c_proj.bias", pfx,
		     l);
	}
}

static void names_llama(const struct model_config *c, struct model_weight *w)
{
	uint64_t C = c->n_embd, F = c->n_inner, D = c->head_dim;
	uint64_t Q = c->n_head * D, KV = c->n_kv_head * D;

	slot(&w[LLAMA_EMBED], 2, c->vocab, C, "model.embed_tokens.weight");
	slot(&w[LLAMA_NORM], 1, C, 0, "model.norm.weight");
	slot(&w[LLAMA_LM_HEAD], 2, c->vocab, C, "lm_head.weight");
	for (uint32_t l = 0; l < c->n_layer; l++) {
		struct model_weight *p =
			&w[LLAMA_NR_GLOBAL + l * LLAMA_NR_LAYER];
		const char *m = "model.layers";

		slot(&p[LLAMA_IN_NORM], 1, C, 0, "%s.%u.input_layernorm.weight",
		     m, l);
		slot(&p[LLAMA_Q], 2, Q, C, "%s.%u.self_attn.q_proj.weight", m,
		     l);
		slot(&p[LLAMA_K], 2, KV, C, "%s.%u.self_attn.k_proj.weight", m,
		     l);
		slot(&p[LLAMA_V], 2, KV, C, "%s.%u.self_attn.v_proj.weight", m,
		     l);
		slot(&p[LLAMA_O], 2, C, Q, "%s.%u.self_attn.o_proj.weight", m,
		     l);
		slot(&p[LLAMA_POST_NORM], 1, C, 0,
		     "%s.%u.post_attention_layernorm.weight", m, l);
		slot(&p[LLAMA_GATE], 2, F, C, "%s.%u.mlp.gate_proj.weight", m,
		     l);
		slot(&p[LLAMA_UP], 2, F, C, "%s.%u.mlp.up_proj.weight", m, l);
		slot(&p[LLAMA_DOWN], 2, C, F, "%s.%u.mlp.down_proj.weight", m,
		     l);
	}
}

static void shape_str(char *buf, size_t len, unsigned int ndim,
		      const uint64_t *shape)
{
	size_t at = (size_t)snprintf(buf, len, "(");

	for (unsigned int i = 0; i < ndim && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%llu",
				       i ? ", " : "",
				       (unsigned long long)shape[i]);
	if (at < len)
		snprintf(buf + at, len - at, ")");
}

int model_layout_build(const struct model_config *c, const struct st_set *set,
		       struct model_layout *L, char *msg, size_t msglen)
{
	const char *where = set->nr_files ? set->files[0]->path : "model";
	unsigned int head, embed;
	struct model_weight *w;
	uint64_t off = 0;
	int ret = 0;

	memset(L, 0, sizeof(*L));
	if (c->arch == MODEL_GPT2) {
		L->nr_global = GPT2_NR_GLOBAL;
		L->per_layer = GPT2_NR_LAYER;
		head = GPT2_LM_HEAD;
		embed = GPT2_WTE;
	} else {
		L->nr_global = LLAMA_NR_GLOBAL;
		L->per_layer = LLAMA_NR_LAYER;
		head = LLAMA_LM_HEAD;
		embed = LLAMA_EMBED;
	}
	L->nr = L->nr_global + (size_t)c->n_layer * L->per_layer;
	L->w = w = calloc(L->nr, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if (c->arch == MODEL_GPT2)
		/* checkpoints name the body "transformer.*" or not at all */
		names_gpt2(c,
			   st_set_find(set, "transformer.wte.weight") ?
				   "transformer." :
				   "",
			   w);
	else
		names_llama(c, w);

	for (size_t i = 0; i < L->nr; i++) {
		const struct st_tensor *t;
		char want[64], got[64];
		bool same;

		if (i == head && c->tied) {
			w[i].alias = true;
			continue;
		}
		t = st_set_find(set, w[i].name);
		if (!t) {
			ret = errmsg(msg, msglen, -EINVAL,
				     "%s: tensor '%s' is missing", where,
				     w[i].name);
			goto out;
		}
		same = t->ndim == w[i].ndim;
		for (unsigned int d = 0; same && d < t->ndim; d++)
			same = t->shape[d] == w[i].shape[d];
		if (!same) {
			shape_str(want, sizeof(want), w[i].ndim, w[i].shape);
			shape_str(got, sizeof(got), t->ndim, t->shape);
			ret = errmsg(msg, msglen, -EINVAL,
				     "%s: tensor '%s' has shape %s, the config "
				     "says %s",
				     t->file->path, t->name, got, want);
			goto out;
		}
		if (!L->dtype) {
			L->dtype = st_dtype_djinn(t->dtype);
			if (L->dtype != DJINN_DTYPE_F32 &&
			    L->dtype != DJINN_DTYPE_F16 &&
			    L->dtype != DJINN_DTYPE_BF16) {
				ret = errmsg(msg, msglen, -EINVAL,
					     "%s: tensor '%s' is %s: weights "
					     "must be F32, F16 or BF16",
					     t->file->path, t->name,
					     st_dtype_name(t->dtype));
				goto out;
			}
		} else if (st_dtype_djinn(t->dtype) != L->dtype) {
			ret = errmsg(msg, msglen, -EINVAL,
				     "%s: tensor '%s' is %s, the model's "
				     "other weights %s",
				     t->file->path, t->name,
				     st_dtype_name(t->dtype),
				     st_dtype_name(w[0].t->dtype));
			goto out;
		}
		w[i].t = t;
		w[i].off = off;
		off += (t->size + MODEL_ALIGN - 1) &
		       ~(uint64_t)(MODEL_ALIGN - 1);
	}
	if (c->tied) {
		w[head].t = w[embed].t;
		w[head].off = w[embed].off;
	}
	L->bytes = off;
out:
	if (ret)
		model_layout_free(L);
	return ret;
}

int model_layout_emit(const struct model_layout *L, model_emit_fn fn, void *arg)
{
	static const uint8_t zero[MODEL_ALIGN];
	uint64_t at = 0;
	int ret = 0;

	for (size_t i = 0; i < L->nr && !ret; i++) {
		const struct model_weight *w = &L->w[i];

		if (w->alias)
			continue;
		if (w->off > at)
			ret = fn(arg, zero, w->off - at);
		if (!ret && w->t->size)
			ret = fn(arg, w->t->data, w->t->size);
		at = w->off + w->t->size;
	}
	if (!ret && L->bytes > at)
		ret = fn(arg, zero, L->bytes - at);
	return ret;
}
