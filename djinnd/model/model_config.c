// SPDX-License-Identifier: MIT
/*
 * config.json and the weight layout of GPT-2 and Llama. See
 * model_config.h.
 */
#include <assert.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "array_size.h"
#include "errmsg.h"
#include "graph.h"
#include "model/model_config.h"

/* ---------------------------------------------------------------------- */
/* config.json */

/*
 * @obj is the object being read, @pre what names it in messages ("" for
 * the top level, "rope_parameters." inside that).
 */
struct cfg_ctx {
	json_t *root;
	json_t *obj;
	const char *pre;
	const char *path;
	char *msg;
	size_t msglen;
};

static json_t *field(struct cfg_ctx *x, const char *key)
{
	json_t *v = json_object_get(x->obj, key);

	return json_is_null(v) ? NULL : v;
}

static int bad(struct cfg_ctx *x, const char *key, const char *why)
{
	return errmsg(x->msg, x->msglen, -EINVAL, "%s: \"%s%s\" %s", x->path,
		      x->pre, key, why);
}

/* An integer field in [lo, hi]; @def when absent (or null) and @def >= 0,
 * else required. */
static int get_uint(struct cfg_ctx *x, const char *key, long long def,
		    long long lo, long long hi, uint32_t *out)
{
	json_t *v = field(x, key);
	long long n;

	if (!v) {
		if (def < 0)
			return bad(x, key, "is missing");
		*out = (uint32_t)def;
		return 0;
	}
	if (!json_is_integer(v))
		return bad(x, key, "is not an integer");
	n = json_integer_value(v);
	if (n < lo || n > hi)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s%s\" is %lld, not in [%lld, %lld]",
			      x->path, x->pre, key, n, lo, hi);
	*out = (uint32_t)n;
	return 0;
}

/* A finite number in [lo, hi] (@lo excluded when @open); @def when
 * absent and @def is not NAN, else required. */
static int get_num(struct cfg_ctx *x, const char *key, double def, double lo,
		   bool open, double hi, double *out)
{
	json_t *v = field(x, key);
	double d;

	if (!v) {
		if (isnan(def))
			return bad(x, key, "is missing");
		*out = def;
		return 0;
	}
	if (!json_is_number(v))
		return bad(x, key, "is not a number");
	d = json_number_value(v);
	if (!isfinite(d) || d < lo || (open && d == lo) || d > hi ||
	    !isfinite((float)d))
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s%s\" is %g, not in %c%g, %g]", x->path,
			      x->pre, key, d, open ? '(' : '[', lo, hi);
	*out = d;
	return 0;
}

/* A positive finite float; @def when absent and @def > 0. */
static int get_pos(struct cfg_ctx *x, const char *key, double def, float *out)
{
	double d;
	int ret;

	ret = get_num(x, key, def > 0 ? def : NAN, 0, true, FLT_MAX, &d);
	if (!ret && (float)d == 0.0f)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"%s%s\" is %g, not a positive float",
			      x->path, x->pre, key, d);
	if (!ret)
		*out = (float)d;
	return ret;
}

static int get_bool(struct cfg_ctx *x, const char *key, bool def, bool *out)
{
	json_t *v = field(x, key);

	if (!v) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return bad(x, key, "is not true or false");
	*out = json_is_true(v);
	return 0;
}

/* A string field, if present, must be one of @ok (NULL-terminated). */
static int want_string(struct cfg_ctx *x, const char *key,
		       const char *const *ok)
{
	json_t *v = field(x, key);
	char why[96];

	if (!v)
		return 0;
	for (unsigned int i = 0; json_is_string(v) && ok[i]; i++)
		if (!strcmp(json_string_value(v), ok[i]))
			return 0;
	snprintf(why, sizeof(why), "is not %s%s%s: not supported", ok[0],
		 ok[1] ? " or " : "", ok[1] ? ok[1] : "");
	return bad(x, key, why);
}

/* A field that, if present, must be null or false: a feature this
 * runtime does not have. */
static int want_off(struct cfg_ctx *x, const char *key)
{
	json_t *v = field(x, key);

	if (!v || json_is_false(v))
		return 0;
	return bad(x, key, "is set: not supported");
}

/* A string for messages: printable, at most 40 bytes. */
static const char *printable(char *buf, size_t len, const char *s)
{
	snprintf(buf, len, "%s", s);
	for (char *p = buf; *p; p++)
		*p = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
	return buf;
}

/* torch's names of the weights' dtypes, as config.json spells them */
static const struct {
	const char *name;
	unsigned int dtype;
} torch_dtypes[] = {
	{ "float32", DJINN_DTYPE_F32 },
	{ "float16", DJINN_DTYPE_F16 },
	{ "bfloat16", DJINN_DTYPE_BF16 },
};

static const char *torch_dtype_name(unsigned int dtype)
{
	for (unsigned int i = 0; i < 3; i++)
		if (torch_dtypes[i].dtype == dtype)
			return torch_dtypes[i].name;
	return "?";
}

/* "dtype" (transformers 5 and the last 4.x) or "torch_dtype" (older): the
 * weights' dtype. */
static int parse_dtype(struct cfg_ctx *x, struct model_config *c)
{
	static const char *const keys[] = { "dtype", "torch_dtype" };
	const typeof(torch_dtypes[0]) *names = torch_dtypes;

	for (unsigned int k = 0; k < 2; k++) {
		json_t *v = field(x, keys[k]);
		unsigned int dt = 0;
		char t[48];

		if (!v)
			continue;
		for (unsigned int i = 0; json_is_string(v) && i < 3; i++)
			if (!strcmp(json_string_value(v), names[i].name))
				dt = names[i].dtype;
		if (!dt)
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"%s\" is %s: weights must be "
				      "float32, float16 or bfloat16",
				      x->path, keys[k],
				      json_is_string(v) ?
					      printable(t, sizeof(t),
							json_string_value(v)) :
					      "not a string");
		if (c->dtype && c->dtype != dt)
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"dtype\" and \"torch_dtype\" "
				      "disagree",
				      x->path);
		c->dtype = dt;
		c->dtype_key = keys[k];
	}
	return 0;
}

static int parse_gpt2(struct cfg_ctx *x, struct model_config *c)
{
	static const char *const act[] = { "gelu_new", "gelu_pytorch_tanh",
					   NULL };
	uint32_t inner;
	int ret;

	if ((ret = get_uint(x, "n_embd", -1, 1, MODEL_MAX_DIM, &c->n_embd)) ||
	    (ret = get_uint(x, "n_head", -1, 1, MODEL_MAX_DIM, &c->n_head)) ||
	    (ret = get_uint(x, "n_layer", -1, 1, MODEL_MAX_LAYERS,
			    &c->n_layer)) ||
	    (ret = get_uint(x, "n_positions", -1, 1, MODEL_MAX_DIM,
			    &c->n_pos)) ||
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
	if (json_is_false(field(x, "scale_attn_weights")))
		return bad(x, "scale_attn_weights", "is false: not supported");
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
	c->n_ctx = c->n_pos;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* RoPE */

/* Every key transformers' RopeParameters knows; those a type does not
 * use are ignored as transformers ignores them, any other is refused. */
static const char *const rope_keys[] = {
	"rope_type",
	"type",
	"rope_theta",
	"factor",
	"low_freq_factor",
	"high_freq_factor",
	"original_max_position_embeddings",
	"attention_factor",
	"beta_fast",
	"beta_slow",
	"mscale",
	"mscale_all_dim",
	"truncate",
	"partial_rotary_factor",
	"short_factor",
	"long_factor",
	"mrope_section",
	NULL,
};

/* yarn's default attention factor: transformers' get_mscale() */
static double yarn_mscale(double scale, double m)
{
	return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/*
 * The parameters of @x->obj (rope_parameters or rope_scaling, or the
 * top level when neither is given): transformers 5's
 * standardize_rope_params() and its _compute_*_parameters().
 */
static int parse_rope_params(struct cfg_ctx *x, struct model_config *c,
			     double theta)
{
	static const char *const types[] = { "default", "linear", "dynamic",
					     "llama3", "yarn" };
	struct model_rope *r = &c->rope;
	json_t *t = NULL, *v;
	double d, prf, fast, slow, ms, msa;
	const char *key;
	char name[48];
	int ret;

	if (x->obj != x->root)
		json_object_foreach(x->obj, key, v)
		{
			unsigned int i;

			for (i = 0; rope_keys[i] && strcmp(rope_keys[i], key);
			     i++)
				;
			if (!rope_keys[i])
				return bad(x,
					   printable(name, sizeof(name), key),
					   "is not a RoPE parameter djinn "
					   "knows");
		}
	if (x->obj != x->root) {
		t = field(x, "rope_type");
		if (!t)
			t = field(x, "type");
	}
	r->type = ROPE_DEFAULT;
	if (t) {
		unsigned int i;

		for (i = 0; json_is_string(t) && i < 5 &&
			    strcmp(json_string_value(t), types[i]);
		     i++)
			;
		if (!json_is_string(t) || i == 5)
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"%srope_type\" '%s' is not "
				      "supported: djinn has default, linear, "
				      "dynamic, llama3 and yarn",
				      x->path, x->pre,
				      json_is_string(t) ?
					      printable(name, sizeof(name),
							json_string_value(t)) :
					      "(not a string)");
		r->type = (enum model_rope_type)i;
	}
	/* the parameters' own rope_theta wins over a top-level one */
	if ((ret = get_num(x, "rope_theta", theta, 1, true, FLT_MAX, &d)))
		return ret;
	r->theta = (float)d;
	if ((ret = get_num(x, "partial_rotary_factor", 1.0, 0, true, 1, &prf)))
		return ret;
	if (prf != 1.0)
		return bad(x, "partial_rotary_factor",
			   "is not 1: partial rotary embeddings are not "
			   "supported");
	if (field(x, "mrope_section"))
		return bad(x, "mrope_section",
			   "is set: multimodal RoPE is not supported");
	r->attn_factor = 1.0f;
	r->factor = 1.0f;
	if (x->obj == x->root || r->type == ROPE_DEFAULT)
		return 0;

	/* every scaled type has a factor (yarn's may be implied) */
	if (r->type != ROPE_YARN || field(x, "factor")) {
		if ((ret = get_num(x, "factor", NAN, 1, false, 1e6, &d)))
			return ret;
		r->factor = (float)d;
	}
	if (r->type == ROPE_LLAMA3 || r->type == ROPE_YARN) {
		/* a top-level one wins (transformers' Phi-3 rule) */
		json_t *obj = x->obj;
		const char *pre = x->pre;

		if (json_object_get(x->root,
				    "original_max_position_embeddings")) {
			x->obj = x->root;
			x->pre = "";
		}
		ret = get_uint(x, "original_max_position_embeddings", c->n_pos,
			       1, MODEL_MAX_DIM, &r->orig_ctx);
		x->obj = obj;
		x->pre = pre;
		if (ret)
			return ret;
	}
	if (r->type == ROPE_LLAMA3) {
		if ((ret = get_num(x, "low_freq_factor", NAN, 0, true, 1e6,
				   &d)))
			return ret;
		r->low_freq_factor = (float)d;
		if ((ret = get_num(x, "high_freq_factor", NAN, 0, true, 1e6,
				   &d)))
			return ret;
		r->high_freq_factor = (float)d;
		if (r->high_freq_factor <= r->low_freq_factor)
			return bad(x, "high_freq_factor",
				   "is not above \"low_freq_factor\"");
	}
	if (r->type != ROPE_YARN)
		return 0;
	if (!field(x, "factor"))
		r->factor = (float)((double)c->n_pos / r->orig_ctx);
	if ((ret = get_num(x, "beta_fast", 32, 0, false, 1e6, &fast)) ||
	    (ret = get_num(x, "beta_slow", 1, 0, false, 1e6, &slow)) ||
	    (ret = get_num(x, "mscale", 0, 0, false, 1e6, &ms)) ||
	    (ret = get_num(x, "mscale_all_dim", 0, 0, false, 1e6, &msa)) ||
	    (ret = get_bool(x, "truncate", true, &r->truncate)))
		return ret;
	/* transformers: "beta_fast or 32", "beta_slow or 1" */
	r->beta_fast = fast ? (float)fast : 32.0f;
	r->beta_slow = slow ? (float)slow : 1.0f;
	if (field(x, "attention_factor")) {
		if ((ret = get_num(x, "attention_factor", NAN, 0, true, 1e6,
				   &d)))
			return ret;
		r->attn_factor = (float)d;
	} else if (ms && msa) {
		r->attn_factor = (float)(yarn_mscale(r->factor, ms) /
					 yarn_mscale(r->factor, msa));
	} else {
		r->attn_factor = (float)yarn_mscale(r->factor, 1);
	}
	return 0;
}

/* Where the RoPE parameters are: rope_scaling wins over rope_parameters
 * (transformers' convert_rope_params_to_dict()); both given must agree. */
static int parse_rope(struct cfg_ctx *x, struct model_config *c)
{
	json_t *rs = field(x, "rope_scaling"),
	       *rp = field(x, "rope_parameters");
	double theta;
	int ret;

	if ((ret = get_num(x, "rope_theta", 10000.0, 1, true, FLT_MAX, &theta)))
		return ret;
	if (rs && !json_is_object(rs))
		return bad(x, "rope_scaling", "is not an object");
	if (rp && !json_is_object(rp))
		return bad(x, "rope_parameters", "is not an object");
	if (rs && json_object_size(rs) && rp && json_object_size(rp) &&
	    !json_equal(rs, rp)) {
		/* transformers 4.5x writes both; the same is fine */
		json_t *a = json_deep_copy(rs), *b = json_deep_copy(rp);
		bool same;

		json_object_del(a, "rope_theta");
		json_object_del(b, "rope_theta");
		json_object_del(a, "type");
		json_object_del(b, "type");
		if (!json_object_get(a, "rope_type"))
			json_object_set_new(
				a, "rope_type",
				json_deep_copy(json_object_get(rs, "type")));
		same = json_equal(a, b);
		json_decref(a);
		json_decref(b);
		if (!same)
			return bad(x, "rope_scaling",
				   "and \"rope_parameters\" disagree");
	}
	x->obj = rs && json_object_size(rs) ? rs : rp ? rp : x->root;
	x->pre = x->obj == rs ? "rope_scaling." :
		 x->obj == rp ? "rope_parameters." :
				"";
	{
		/* transformers copies a top-level one into the parameters */
		json_t *prf = json_object_get(x->root, "partial_rotary_factor");

		if (prf && !json_is_null(prf) &&
		    !(json_is_number(prf) && json_number_value(prf) == 1.0))
			return errmsg(x->msg, x->msglen, -EINVAL,
				      "%s: \"partial_rotary_factor\" is not "
				      "1: partial rotary embeddings are not "
				      "supported",
				      x->path);
	}
	ret = parse_rope_params(x, c, theta);
	x->obj = x->root;
	x->pre = "";
	if (ret)
		return ret;
	if (c->rope.type == ROPE_DYNAMIC) {
		/* contexts up to factor times max_position_embeddings */
		double n = floor((double)c->rope.factor * c->n_pos);

		c->n_ctx = n > MODEL_MAX_DIM ? MODEL_MAX_DIM : (uint32_t)n;
	}
	model_rope_freqs(c, 0, c->rope.inv_freq);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* The llama family */

/* The sliding window of qwen2 and qwen3: "use_sliding_window" sets it;
 * "layer_types" (or, without it, "max_window_layers") says which layers
 * slide. */
static int parse_qwen_window(struct cfg_ctx *x, struct model_config *c,
			     uint32_t window)
{
	json_t *lt = field(x, "layer_types");
	uint32_t mwl;
	bool use, any = false;
	int ret;

	if ((ret = get_bool(x, "use_sliding_window", false, &use)) ||
	    (ret = get_uint(x, "max_window_layers", 28, 0, MODEL_MAX_LAYERS,
			    &mwl)))
		return ret;
	if (lt) {
		size_t i;
		json_t *v;

		if (!json_is_array(lt) || json_array_size(lt) != c->n_layer)
			return bad(x, "layer_types",
				   "is not a list of one type per layer");
		json_array_foreach(lt, i, v)
		{
			const char *s = json_string_value(v);

			if (s && !strcmp(s, "sliding_attention"))
				any = true;
			else if (!s || strcmp(s, "full_attention"))
				return bad(x, "layer_types",
					   "has a type other than "
					   "full_attention and "
					   "sliding_attention");
		}
	} else {
		any = use && window && mwl < c->n_layer;
	}
	/* transformers: sliding_window is None unless use_sliding_window */
	if (use && any) {
		if (!window)
			return bad(x, "sliding_window",
				   "is missing for sliding layers");
		c->window = window;
	}
	return 0;
}

static int parse_llama(struct cfg_ctx *x, struct model_config *c)
{
	static const char *const act[] = { "silu", "swish", NULL };
	/* transformers' class defaults where config.json has no key */
	long long kv_def = c->arch == MODEL_QWEN2 || c->arch == MODEL_QWEN3 ?
				   32 :
			   c->arch == MODEL_MISTRAL ? 8 :
						      -2;
	uint32_t window = 0;
	int ret;

	if ((ret = get_uint(x, "hidden_size", -1, 1, MODEL_MAX_DIM,
			    &c->n_embd)) ||
	    (ret = get_uint(x, "intermediate_size", -1, 1, MODEL_MAX_DIM,
			    &c->n_inner)) ||
	    (ret = get_uint(x, "num_attention_heads", -1, 1, MODEL_MAX_DIM,
			    &c->n_head)))
		return ret;
	/* an explicit null is the heads, as transformers' __post_init__
	 * makes it; only a missing key takes the class default */
	if (kv_def == -2 ||
	    json_is_null(json_object_get(x->root, "num_key_value_heads")))
		kv_def = c->n_head;
	if ((ret = get_uint(x, "num_key_value_heads", kv_def, 1, MODEL_MAX_DIM,
			    &c->n_kv_head)) ||
	    (ret = get_uint(x, "num_hidden_layers", -1, 1, MODEL_MAX_LAYERS,
			    &c->n_layer)) ||
	    (ret = get_uint(x, "max_position_embeddings", -1, 1, MODEL_MAX_DIM,
			    &c->n_pos)) ||
	    (ret = get_uint(x, "vocab_size", -1, 1, MODEL_MAX_VOCAB,
			    &c->vocab)) ||
	    (ret = get_pos(x, "rms_norm_eps", 1e-6, &c->eps)) ||
	    (ret = get_bool(x, "tie_word_embeddings", false, &c->tied)) ||
	    (ret = want_string(x, "hidden_act", act)))
		return ret;
	if (c->n_head % c->n_kv_head)
		return errmsg(
			x->msg, x->msglen, -EINVAL,
			"%s: \"num_attention_heads\" %u is not a multiple "
			"of \"num_key_value_heads\" %u",
			x->path, c->n_head, c->n_kv_head);
	/* head_dim: given, else C / H (qwen3's class default is 128) */
	if (!field(x, "head_dim") && c->arch != MODEL_QWEN3 &&
	    c->n_embd % c->n_head)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: \"hidden_size\" %u is not a multiple of "
			      "\"num_attention_heads\" %u and there is no "
			      "\"head_dim\"",
			      x->path, c->n_embd, c->n_head);
	if ((ret = get_uint(x, "head_dim",
			    c->arch == MODEL_QWEN3 ? 128 :
						     c->n_embd / c->n_head,
			    2, MODEL_MAX_HEAD_DIM, &c->head_dim)))
		return ret;
	/* a default is not range-checked by get_uint() */
	if (c->head_dim < 2 || c->head_dim > MODEL_MAX_HEAD_DIM)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: head dim %u is not in [2, %u]", x->path,
			      c->head_dim, MODEL_MAX_HEAD_DIM);
	if (c->head_dim % 2)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: head dim %u is odd: RoPE needs pairs",
			      x->path, c->head_dim);
	if ((uint64_t)c->n_head * c->head_dim > MODEL_MAX_DIM)
		return errmsg(x->msg, x->msglen, -EINVAL,
			      "%s: heads times head_dim is over %u", x->path,
			      MODEL_MAX_DIM);

	switch (c->arch) {
	case MODEL_LLAMA:
		ret = get_bool(x, "attention_bias", false, &c->qkv_bias);
		if (!ret)
			ret = get_bool(x, "mlp_bias", false, &c->mlp_bias);
		c->o_bias = c->qkv_bias;
		break;
	case MODEL_QWEN2:
		c->qkv_bias = true; /* qwen2's q, k and v always have them */
		break;
	case MODEL_QWEN3:
		ret = get_bool(x, "attention_bias", false, &c->qkv_bias);
		c->o_bias = c->qkv_bias;
		c->qk_norm = true;
		break;
	default: /* mistral */
		break;
	}
	if (ret)
		return ret;
	if ((ret = get_uint(x, "sliding_window", 0, 1, UINT32_MAX, &window)))
		return ret;
	if (c->arch == MODEL_MISTRAL)
		c->window = window; /* every layer, when set */
	else if (c->arch == MODEL_QWEN2 || c->arch == MODEL_QWEN3)
		ret = parse_qwen_window(x, c, window);
	if (ret)
		return ret;
	c->n_ctx = c->n_pos;
	ret = parse_rope(x, c);
	if (!ret && c->window && c->window < c->n_ctx)
		c->n_ctx = c->window;
	return ret;
}

static const struct {
	const char *type;
	enum model_arch arch;
} arch_names[] = {
	{ "gpt2", MODEL_GPT2 },	      { "llama", MODEL_LLAMA },
	{ "qwen2", MODEL_QWEN2 },     { "qwen3", MODEL_QWEN3 },
	{ "mistral", MODEL_MISTRAL },
};

/* the wire names architectures by the same numbers */
static_assert((int)MODEL_GPT2 == DJINN_ARCH_GPT2 &&
		      (int)MODEL_LLAMA == DJINN_ARCH_LLAMA &&
		      (int)MODEL_QWEN2 == DJINN_ARCH_QWEN2 &&
		      (int)MODEL_QWEN3 == DJINN_ARCH_QWEN3 &&
		      (int)MODEL_MISTRAL == DJINN_ARCH_MISTRAL,
	      "enum model_arch is enum djinn_arch");

int model_config_parse_json(const char *text, size_t len, const char *path,
			    struct model_config *c, char *msg, size_t msglen)
{
	struct cfg_ctx x = {
		.path = path, .pre = "", .msg = msg, .msglen = msglen
	};
	struct model_config *n;
	json_error_t jerr;
	const char *type;
	char t[40];
	int ret;

	x.root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!x.root)
		return errmsg(msg, msglen, -EINVAL, "%s: line %d: %s", path,
			      jerr.line, jerr.text);
	x.obj = x.root;
	n = calloc(1, sizeof(*n));
	if (!n) {
		ret = -ENOMEM;
		goto out;
	}
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
	for (size_t i = 0; i < ARRAY_SIZE(arch_names); i++)
		if (!strcmp(type, arch_names[i].type))
			n->arch = arch_names[i].arch;
	if (!n->arch) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: \"model_type\" '%s' is not supported: djinn "
			     "runs gpt2, llama, qwen2, qwen3 and mistral",
			     path, printable(t, sizeof(t), type));
		goto out;
	}
	ret = parse_dtype(&x, n);
	if (!ret)
		ret = n->arch == MODEL_GPT2 ? parse_gpt2(&x, n) :
					      parse_llama(&x, n);
	if (!ret)
		*c = *n;
out:
	free(n);
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
		slot(&p[LLAMA_Q_B], 1, Q, 0, "%s.%u.self_attn.q_proj.bias", m,
		     l);
		slot(&p[LLAMA_K_B], 1, KV, 0, "%s.%u.self_attn.k_proj.bias", m,
		     l);
		slot(&p[LLAMA_V_B], 1, KV, 0, "%s.%u.self_attn.v_proj.bias", m,
		     l);
		slot(&p[LLAMA_O_B], 1, C, 0, "%s.%u.self_attn.o_proj.bias", m,
		     l);
		slot(&p[LLAMA_Q_NORM], 1, D, 0, "%s.%u.self_attn.q_norm.weight",
		     m, l);
		slot(&p[LLAMA_K_NORM], 1, D, 0, "%s.%u.self_attn.k_norm.weight",
		     m, l);
		slot(&p[LLAMA_GATE_B], 1, F, 0, "%s.%u.mlp.gate_proj.bias", m,
		     l);
		slot(&p[LLAMA_UP_B], 1, F, 0, "%s.%u.mlp.up_proj.bias", m, l);
		slot(&p[LLAMA_DOWN_B], 1, C, 0, "%s.%u.mlp.down_proj.bias", m,
		     l);
		/* what this configuration has no weight for */
		for (unsigned int k = LLAMA_Q_B; k <= LLAMA_V_B; k++)
			p[k].unused = !c->qkv_bias;
		p[LLAMA_O_B].unused = !c->o_bias;
		p[LLAMA_Q_NORM].unused = p[LLAMA_K_NORM].unused = !c->qk_norm;
		for (unsigned int k = LLAMA_GATE_B; k <= LLAMA_DOWN_B; k++)
			p[k].unused = !c->mlp_bias;
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

/* @L's slots for @c, named as a checkpoint names them (GPT-2's body
 * "transformer.*" when @prefixed), with no offsets yet; which are the
 * head and the embeddings. */
static int layout_slots(const struct model_config *c, bool prefixed,
			struct model_layout *L, unsigned int *head,
			unsigned int *embed)
{
	memset(L, 0, sizeof(*L));
	if (c->arch == MODEL_GPT2) {
		L->nr_global = GPT2_NR_GLOBAL;
		L->per_layer = GPT2_NR_LAYER;
		*head = GPT2_LM_HEAD;
		*embed = GPT2_WTE;
	} else {
		L->nr_global = LLAMA_NR_GLOBAL;
		L->per_layer = LLAMA_NR_LAYER;
		*head = LLAMA_LM_HEAD;
		*embed = LLAMA_EMBED;
	}
	L->nr = L->nr_global + (size_t)c->n_layer * L->per_layer;
	L->w = calloc(L->nr, sizeof(*L->w));
	if (!L->w)
		return -ENOMEM;
	if (c->arch == MODEL_GPT2)
		names_gpt2(c, prefixed ? "transformer." : "", L->w);
	else
		names_llama(c, L->w);
	return 0;
}

static uint64_t aligned(uint64_t n)
{
	return (n + MODEL_ALIGN - 1) & ~(uint64_t)(MODEL_ALIGN - 1);
}

int model_layout_build(const struct model_config *c, const struct st_set *set,
		       struct model_layout *L, char *msg, size_t msglen)
{
	const char *where = set->nr_files ? set->files[0]->path : "model";
	unsigned int head, embed;
	struct model_weight *w;
	uint64_t off = 0;
	/* checkpoints name the body "transformer.*" or not at all */
	int ret =
		layout_slots(c,
			     c->arch == MODEL_GPT2 &&
				     st_set_find(set, "transformer.wte.weight"),
			     L, &head, &embed);

	if (ret)
		return ret;
	w = L->w;
	for (size_t i = 0; i < L->nr; i++) {
		const struct st_tensor *t;
		char want[64], got[64];
		bool same;

		if (i == head && c->tied) {
			w[i].alias = true;
			continue;
		}
		if (w[i].unused)
			continue;
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
		off += aligned(t->size);
	}
	if (c->dtype && c->dtype != L->dtype) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: config.json's \"%s\" is %s, the weights "
			     "are %s: djinn computes in the weights' dtype "
			     "and does not convert them",
			     where, c->dtype_key, torch_dtype_name(c->dtype),
			     torch_dtype_name(L->dtype));
		goto out;
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

int model_layout_remake(const struct model_config *c, unsigned int dtype,
			bool prefixed, struct model_layout *L)
{
	unsigned int head, embed;
	uint64_t off = 0;
	int ret;

	if ((dtype != DJINN_DTYPE_F32 && dtype != DJINN_DTYPE_F16 &&
	     dtype != DJINN_DTYPE_BF16) ||
	    (c->dtype && c->dtype != dtype))
		return -EINVAL;
	ret = layout_slots(c, prefixed, L, &head, &embed);
	if (ret)
		return ret;
	L->dtype = dtype;
	for (size_t i = 0; i < L->nr; i++) {
		struct model_weight *w = &L->w[i];
		uint64_t n = w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1);

		if (i == head && c->tied) {
			w->alias = true;
			continue;
		}
		if (w->unused)
			continue;
		w->off = off;
		off += aligned(n * djinn_dtype_size(dtype));
	}
	if (c->tied)
		L->w[head].off = L->w[embed].off;
	L->bytes = off;
	return 0;
}

bool model_layout_prefixed(const struct model_config *c,
			   const struct model_layout *L)
{
	return c->arch == MODEL_GPT2 && L->nr > GPT2_WTE &&
	       !strncmp(L->w[GPT2_WTE].name, "transformer.", 12);
}

uint64_t model_layer_start(const struct model_layout *L, uint32_t n_layer,
			   uint32_t l)
{
	for (; l < n_layer; l++)
		for (unsigned int k = 0; k < L->per_layer; k++) {
			const struct model_weight *w = model_slot(L, (int)l, k);

			if (!w->alias && !w->unused)
				return w->off;
		}
	return L->bytes;
}

uint64_t model_layer_max(const struct model_layout *L, uint32_t n_layer)
{
	uint64_t big = 0, at = model_layer_start(L, n_layer, 0);

	for (uint32_t l = 0; l < n_layer; l++) {
		uint64_t next = model_layer_start(L, n_layer, l + 1);

		big = next - at > big ? next - at : big;
		at = next;
	}
	return big;
}

int model_layout_emit_range(const struct model_layout *L, uint64_t from,
			    uint64_t to, model_emit_fn fn, void *arg)
{
	static const uint8_t zero[MODEL_ALIGN];
	uint64_t at = from;
	int ret = 0;

	if (from > to || to > L->bytes)
		return -EINVAL;
	for (size_t i = 0; i < L->nr && !ret && at < to; i++) {
		const struct model_weight *w = &L->w[i];
		uint64_t b, e;

		if (w->alias || w->unused || w->off + w->t->size <= at)
			continue;
		b = w->off > at ? w->off : at;
		e = w->off + w->t->size < to ? w->off + w->t->size : to;
		if (b >= to)
			break;
		if (b > at) /* padding: less than MODEL_ALIGN */
			ret = fn(arg, zero, b - at);
		if (!ret && e > b)
			ret = fn(arg, w->t->data + (b - w->off), e - b);
		at = e;
	}
	if (!ret && to > at)
		ret = fn(arg, zero, to - at);
	return ret;
}
