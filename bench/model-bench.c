// SPDX-License-Identifier: MIT
/*
 * model-bench: the model runtime's figures from TARGETS.md (design notes):
 * prefill and decode tokens/s of a GPT-2 124M-shaped model with seeded
 * random f32 weights on the CPU backend, beside PyTorch eager running the
 * same weights in the same run (bench/model_torch.py), and the text
 * segment's bytes with one and with four sessions holding the model,
 * and the sampler's time per token (model_sample()).
 *
 * --arch qwen2 runs a Qwen2-shaped model of about the same size instead
 * (the llama family's path: RMSNorm, RoPE with theta 1e6, grouped-query
 * attention of 12 query heads over 4 key/value heads, q/k/v biases,
 * SwiGLU, a tied head; 100M parameters), and model_torch.py runs its
 * Llama-family forward on it; the lines are "model_qwen2_cpu"'s. The
 * default, --arch gpt2, gives "model_cpu"'s lines as before.
 *
 * The model is written once by scripts/mkmodel.py into CACHE/models/ and
 * reused while its arguments stay the same. djinnd's side runs through
 * the real runtime: the model store loads it into the text segment of a
 * VMU over the host provider, and contexts prefill and decode on the CPU
 * backend as djinnd's executor threads do. Each side runs a warm-up round
 * and then --rounds rounds of: prefill --prefill tokens from an empty
 * context, then --decode greedy tokens one at a time over the cache; the
 * figures are the medians.
 *
 * The two must agree: the prefill's last logits within 1e-4 of the
 * largest, and the first 8 greedy tokens equal (a token may differ only
 * where PyTorch's two best logits are within what that error explains,
 * after which the sequences part). Otherwise the run fails.
 *
 * Output: one JSON object per line (STYLE.md, Benchmarks). Without
 * PyTorch (it did not import) the baselines are null, with a note. A
 * line held to a constant (a tolerance, a count of tokens compared, the
 * weights' bytes) says so with "limit" and "limit_name" where a measured
 * line has "baseline" and "baseline_name"; "ratio" is value / limit.
 *
 * --backend cuda runs djinnd's side on GPU 0 through the CUDA backend and
 * PyTorch's on the same GPU (model_torch.py --device cuda); the figures
 * are "model_cuda"'s and the target 1.1 times PyTorch's (TARGETS.md).
 * Without a GPU it exits 77 and says why.
 *
 * Usage: model-bench [--cache DIR] [--python PY] [--threads N]
 *                    [--prefill N] [--decode N] [--rounds N] [--seed N]
 *                    [--no-torch] [--torch-script PATH]
 *                    [--backend cpu|cuda] [--arch gpt2|qwen2]
 *
 *   make bench-model BENCH_MODEL_ARGS='--arch qwen2 --rounds 5'
 *   model-bench --arch qwen2 --cache /tmp/bench-cache \
 *               --python VENV/bin/python
 *
 * decode_of_ceiling puts the decode figure beside the memory's ceiling
 * for it: the bytes a decode step reads (the weights, and the cache at
 * the decode's average length) over the traffic rate of a 256 MiB
 * device-to-device copy through the backend's provider in the same run
 * (each byte copied counted twice, read and written).
 *
 * Exit status: 0 success, 1 a failure or a disagreement with PyTorch,
 * 2 usage, 77 --backend cuda without a GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <limits.h>

#include "bench.h"
#include "djinnd.h"
#include "model-bench.h"
#include "model/runtime.h"
#include "model/runtime_test.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

#define SESSIONS 4
#define CHECK_TOKENS 8
#define LOGITS_TOL 1e-4
#define MAX_ROUNDS 32

/*
 * struct arch - a model --arch runs
 * @bench:   the JSON lines' "bench", before "_" and the backend
 * @model:   its directory under CACHE/models/ (and its name in the store)
 * @mkmodel: scripts/mkmodel.py's arguments for it
 * @vocab:   of @mkmodel
 */
struct arch {
	const char *name, *bench, *model, *mkmodel;
	uint32_t vocab;
};

static const struct arch archs[] = {
	{ "gpt2", "model", "gpt2-124m",
	  "--layers 12 --embd 768 --heads 12 --vocab 50257 --ctx 1024 "
	  "--seed 1",
	  50257 },
	/* Qwen2's shape at GPT-2 124M's width and depth: 3 query heads to a
	 * key/value head, an MLP 8/3 as wide, theta 1e6 (Qwen2's) */
	{ "qwen2", "model_qwen2", "qwen2-100m",
	  "--arch qwen2 --layers 12 --embd 768 --heads 12 --kv-heads 4 "
	  "--inner 2048 --vocab 32000 --ctx 1024 --rope-theta 1000000 "
	  "--tied --seed 1",
	  32000 },
	/* GPT-2 124M's depth at a width where the arithmetic is nothing:
	 * a step's time is what the host spends on it */
	{ "gpt2-tiny", "model_tiny", "gpt2-tiny",
	  "--layers 12 --embd 64 --heads 4 --vocab 512 --ctx 1024 --seed 1",
	  512 },
};

static struct {
	const char *cache, *python, *script, *mkmodel, *backend;
	const struct arch *arch;
	unsigned int threads, prefill, decode, rounds;
	uint64_t seed;
	bool no_torch;
	const char *sessions, *djinnd, *djinnctl;
	uint64_t mem;
} opt = {
	.cache = "build/bench-cache",
	.python = "python3",
	.script = "bench/model_torch.py",
	.mkmodel = "scripts/mkmodel.py",
	.backend = "cpu",
	.arch = &archs[0],
	.prefill = 128,
	.decode = 64,
	.rounds = 3,
	.seed = 42,
};

/* ------------------------------------------------------------------------ */
/* JSON lines */

/*
 * @f as a line of the architecture's and the backend's bench ("gpt2_cpu";
 * lib/figure.h). A target is against 1 on the ratio; a tok/s target on
 * the GPU is 1.1 (TARGETS.md).
 */
static void emit(const struct fig *f)
{
	char bench[64];
	struct fig g = *f;

	snprintf(bench, sizeof(bench), "%s_%s", opt.arch->bench, opt.backend);
	g.bench = bench;
	if (g.target) {
		bool gpu_rate = g.unit && !strcmp(g.unit, "tok/s") &&
				!strcmp(opt.backend, "cuda");

		g.want = !strcmp(g.target, ">=") && gpu_rate ? 1.1 : 1;
	}
	fig_emit(&g);
}

/* A --sessions line: the same bench, a ratio target of 1 whatever the
 * backend (the targets are ratios), and its session count. */
static void emit_sessions(const struct fig *f, unsigned int sessions)
{
	char bench[64];
	struct fig g = *f;

	snprintf(bench, sizeof(bench), "%s_%s", opt.arch->bench, opt.backend);
	g.bench = bench;
	g.want = 1;
	fig_put(&g);
	fig_u64("sessions", sessions);
	fig_end();
}

/* --sessions 1,2,4,8: the counts, at most SESSIONS_MAX_N of 1 to 64 */
static void parse_sessions(const char *list, struct sessions_opt *so)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (so->nr_n == SESSIONS_MAX_N)
			fail("--sessions: at most %d counts", SESSIONS_MAX_N);
		so->n[so->nr_n++] = (unsigned int)num(tok, 1, 64);
	}
	if (!so->nr_n)
		fail("--sessions: a list of counts, such as 1,2,4,8");
}

/* model-bench --sessions LIST (model-sessions.c) */
static int run_sessions(const char *models)
{
	char abs[PATH_MAX];
	bool gpu = !strcmp(opt.backend, "cuda");
	struct sessions_opt so = {
		.models = abs,
		.model = opt.arch->model,
		.arch = opt.arch->name,
		.backend = opt.backend,
		.mem = opt.mem ? opt.mem : 4 * GiB,
		.python = opt.python,
		.script = opt.script,
		.threads = opt.threads,
		.no_torch = opt.no_torch,
		.prefill = opt.prefill,
		.decode = opt.decode,
		.rounds = opt.rounds,
		.seed = opt.seed,
		.vocab = opt.arch->vocab,
		/* the targets: 3x at 8 on the CPU, 12x at 32 on a
		 * GPU */
		.target_n = gpu ? 32 : 8,
		.target_x = gpu ? 12 : 3,
	};

	if (!realpath(models, abs))
		fail("%s: %s", models, strerror(errno));
	parse_sessions(opt.sessions, &so);
	bdj_find(opt.djinnd, opt.djinnctl);
	sessions_bench(&so, emit_sessions);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The model, written once */

/* CACHE/models/<the arch's model> (ensure_mkmodel()): its directory in
 * @models. */
static void ensure_model(char *models, size_t len)
{
	snprintf(models, len, "%s/models", opt.cache);
	ensure_mkmodel(models, opt.arch->model, opt.mkmodel, opt.arch->mkmodel);
}

/* ------------------------------------------------------------------------ */
/* djinnd's side */

struct djinn_side {
	double load_s, prefill, decode; /* medians, tokens/s */
	double host_us; /* median: a decode step's host part */
	int32_t *tokens; /* greedy, opt.decode of them */
	float *logits; /* the prefill's last row */
	double gaps[CHECK_TOKENS]; /* best minus second best logit */
	uint64_t text_1, text_n, entries_1, entries_n, weight_bytes;
	uint64_t kv_token_bytes; /* the cache's bytes a token */
	double copy_bytes_s; /* the device's traffic rate, best of rounds */
};

/* The largest logit minus the second largest. */
static double top2_gap(const float *x, uint32_t n)
{
	float a = -INFINITY, b = -INFINITY;

	for (uint32_t i = 0; i < n; i++) {
		if (x[i] > a) {
			b = a;
			a = x[i];
		} else if (x[i] > b) {
			b = x[i];
		}
	}
	return (double)a - b;
}

/*
 * One round: prefill @prompt, decode opt.decode greedy tokens. With
 * @logits (the warm-up, untimed) also the prefill's last logits and, for
 * the first CHECK_TOKENS tokens, the gap of the logits each came from,
 * decoding one token per call.
 */
static void round_djinn(struct model_hold *h, const struct model_env *env,
			const int32_t *prompt, int32_t *toks, float *logits,
			double *gaps, double *pre, double *dec, double *host)
{
	struct model_sampling greedy = { .temperature = 0, .top_p = 1 };
	struct model_ctx *c;
	char msg[256] = "";
	uint64_t t0, t1, t2, h1, n1;

	check_msg(model_ctx_new(h, opt.prefill + opt.decode + 1, &c, msg,
				sizeof(msg)),
		  "context", msg);
	t0 = mono_ns();
	check_msg(model_ctx_prefill(c, env, prompt, opt.prefill, NULL, msg,
				    sizeof(msg)),
		  "prefill", msg);
	t1 = mono_ns();
	h1 = model_ctx_host_ns();
	n1 = model_ctx_graphs();
	if (logits) {
		memcpy(logits, model_ctx_logits(c),
		       h->m->cfg.vocab * sizeof(float));
		for (unsigned int i = 0; i < opt.decode; i++) {
			if (i < CHECK_TOKENS)
				gaps[i] = top2_gap(model_ctx_logits(c),
						   h->m->cfg.vocab);
			check_msg(model_ctx_decode(c, env, 1, &greedy, &toks[i],
						   msg, sizeof(msg)),
				  "decode", msg);
		}
	} else {
		check_msg(model_ctx_decode(c, env, opt.decode, &greedy, toks,
					   msg, sizeof(msg)),
			  "decode", msg);
	}
	t2 = mono_ns();
	*host = model_ctx_graphs() > n1 ?
			(double)(model_ctx_host_ns() - h1) / 1e3 /
				(double)(model_ctx_graphs() - n1) :
			NAN;
	model_ctx_free(c);
	*pre = opt.prefill / secs(t0, t1);
	*dec = opt.decode ? opt.decode / secs(t1, t2) : NAN;
}

struct djinn_run {
	struct backend *b;
	struct model_env env;
	struct model_store *ms;
	struct vmu_session *s[SESSIONS];
	struct model_hold *h[SESSIONS];
};

/* A region of @s of @bytes, pinned: its device address. */
static uint64_t bench_region(struct vmu_session *s, uint64_t bytes, uint64_t *h)
{
	struct vmu_region_info info;

	check_msg(vmu_region_create(s, bytes, h), "region", NULL);
	check_msg(vmu_region_resize(s, *h, bytes, NULL), "region", NULL);
	check_msg(vmu_region_pin(s, *h, NULL, &info), "pin", NULL);
	return info.addr;
}

#define COPY_BYTES (256ull << 20)
#define COPY_ROUNDS 5

/* The device memory's traffic rate: bytes read and written a second by
 * the provider's copy of COPY_BYTES between two regions of @s, the best
 * of COPY_ROUNDS after one to warm up. */
static double copy_rate(struct vmu_session *s, struct vmu_provider *p)
{
	uint64_t h[2], a[2];
	double best = 0;

	for (int i = 0; i < 2; i++)
		a[i] = bench_region(s, COPY_BYTES, &h[i]);
	for (int r = 0; r <= COPY_ROUNDS; r++) {
		uint64_t t0 = mono_ns();
		double rate;

		check_msg(p->ops->copy_dtod(p, a[1], a[0], COPY_BYTES), "copy",
			  NULL);
		rate = 2.0 * COPY_BYTES / secs(t0, mono_ns());
		if (r && rate > best)
			best = rate;
	}
	for (int i = 0; i < 2; i++) {
		vmu_region_unpin(s, h[i]);
		vmu_region_destroy(s, h[i]);
	}
	return best;
}

/* The backend, a VMU, a stack and the model held by one session. */
static void djinn_open(const char *models, struct djinn_run *R,
		       struct djinn_side *d)
{
	char msg[256] = "";
	uint64_t t0;

	if (!strcmp(opt.backend, "cuda")) {
		if (cuda_backend_create(0, 0, &R->b, msg, sizeof(msg)))
			fail("cuda:0: %s", msg);
		fprintf(stderr, "model-bench: cuda:0: %s\n", msg);
	} else {
		check_msg(cpu_backend_create(6 * GiB, opt.threads, &R->b),
			  "cpu backend", NULL);
	}
	check_msg(vmu_create(R->b->provider, NULL, &R->env.v), "vmu", NULL);
	check_msg(vmu_stack_create(R->env.v, 2 * GiB, &R->env.st), "stack",
		  NULL);
	R->env.b = R->b;
	check_msg(model_store_create(R->env.v, models, &R->ms), "model store",
		  NULL);
	check_msg(vmu_session_create(R->env.v, "bench0", &R->s[0]), "session",
		  NULL);
	t0 = mono_ns();
	check_msg(model_open(R->ms, R->s[0], opt.arch->model, &R->h[0], msg,
			     sizeof(msg)),
		  "model_open", msg);
	d->load_s = secs(t0, mono_ns());
	if (R->h[0]->m->cfg.vocab != opt.arch->vocab)
		fail("%s: a vocabulary of %u, not %u", opt.arch->model,
		     R->h[0]->m->cfg.vocab, opt.arch->vocab);
	d->weight_bytes = R->h[0]->m->layout.bytes;
	{
		struct model_ctx *c;

		check_msg(model_ctx_new(R->h[0], 8, &c, msg, sizeof(msg)),
			  "context", msg);
		d->kv_token_bytes = model_ctx_token_bytes(c);
		model_ctx_free(c);
	}
	d->copy_bytes_s = copy_rate(R->s[0], R->b->provider);
	d->tokens = calloc(opt.decode + 1, sizeof(int32_t));
	d->logits = calloc(R->h[0]->m->cfg.vocab, sizeof(float));
	if (!d->tokens || !d->logits)
		fail("no memory");
}

/* The text segment with one session holding the model, then with
 * SESSIONS, each of which runs a step of its own on it. */
static void djinn_sessions(struct djinn_run *R, const int32_t *prompt,
			   struct djinn_side *d)
{
	struct vmu_stats vs;
	char msg[256] = "";

	vmu_get_stats(R->env.v, &vs);
	d->text_1 = vs.seg[VMU_SEG_TEXT].used;
	d->entries_1 = vs.seg[VMU_SEG_TEXT].entries;
	for (unsigned int i = 1; i < SESSIONS; i++) {
		struct model_ctx *c;
		char name[16];

		snprintf(name, sizeof(name), "bench%u", i);
		check_msg(vmu_session_create(R->env.v, name, &R->s[i]),
			  "session", NULL);
		check_msg(model_open(R->ms, R->s[i], opt.arch->model, &R->h[i],
				     msg, sizeof(msg)),
			  "model_open", msg);
		check_msg(model_ctx_new(R->h[i], 8, &c, msg, sizeof(msg)),
			  "context", msg);
		check_msg(model_ctx_prefill(c, &R->env, prompt, 8, NULL, msg,
					    sizeof(msg)),
			  "prefill", msg);
		model_ctx_free(c);
	}
	vmu_get_stats(R->env.v, &vs);
	d->text_n = vs.seg[VMU_SEG_TEXT].used;
	d->entries_n = vs.seg[VMU_SEG_TEXT].entries;
}

static void djinn_close(struct djinn_run *R)
{
	for (unsigned int i = 0; i < SESSIONS; i++) {
		if (R->h[i])
			model_close(R->h[i]);
		if (R->s[i])
			vmu_session_destroy(R->s[i]);
	}
	model_store_destroy(R->ms);
	vmu_stack_destroy(R->env.st);
	vmu_destroy(R->env.v);
	R->b->ops->destroy(R->b);
}

/* ------------------------------------------------------------------------ */
/* PyTorch's side: bench/model_torch.py in a child */

/*
 * struct torch_side - what model_torch.py reported
 * @ran:     it ran at least once; @off: it could not (no PyTorch)
 * @n:       runs so far, each a warm-up and one round; medians of @load_s,
 *           @prefill, @decode
 * @tokens, @gaps, @logits: of the first run (later ones must agree)
 */
struct torch_side {
	bool ran, off;
	char note[512];
	char version[64];
	unsigned int n;
	double load_s[MAX_ROUNDS], prefill[MAX_ROUNDS], decode[MAX_ROUNDS];
	int32_t tokens[CHECK_TOKENS];
	double gaps[CHECK_TOKENS];
	unsigned int nr_tokens;
	float *logits;
};

/* One run of model_torch.py: a warm-up and one round. */
static void run_torch(const char *models, const int32_t *prompt, uint32_t vocab,
		      struct torch_side *t)
{
	char tmpl[] = "/tmp/model-bench.XXXXXX", cmd[16384], path[4096];
	char *out = NULL, *err = NULL, *toks, *lg = NULL;
	size_t len, o = 0, n;
	json_error_t je;
	json_t *j = NULL, *a;
	int st;

	if (!mkdtemp(tmpl))
		fail("mkdtemp: %s", strerror(errno));
	toks = malloc(opt.prefill * 12 + 1);
	if (!toks)
		fail("no memory");
	toks[0] = 0;
	for (unsigned int i = 0; i < opt.prefill; i++)
		o += (size_t)sprintf(toks + o, "%s%d", i ? "," : "", prompt[i]);
	snprintf(cmd, sizeof(cmd),
		 "%s %s --model %s/%s --arch %s --tokens %s --decode %u "
		 "--rounds 1 --threads %u --device %s --logits-out %s/logits "
		 "> %s/out 2> %s/err",
		 opt.python, opt.script, models, opt.arch->model,
		 opt.arch->name, toks, opt.decode, opt.threads, opt.backend,
		 tmpl, tmpl, tmpl);
	free(toks);
	st = system(cmd);
	snprintf(path, sizeof(path), "%s/err", tmpl);
	err = slurp(path, &len);
	if (st) {
		char why[400] = "";

		if (err)
			last_line(why, sizeof(why), err);
		/* not installed: null baselines; anything else is a bug */
		if (!t->ran &&
		    ((WIFEXITED(st) && WEXITSTATUS(st) == 127) ||
		     (err && strstr(err, "No module named 'torch'")))) {
			snprintf(t->note, sizeof(t->note),
				 "PyTorch did not run (%s): no baseline", why);
			t->off = true;
		} else
			fail("%s failed: %s", opt.script, why);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/out", tmpl);
	out = slurp(path, &len);
	if (!out || !(j = json_loads(out, 0, &je)))
		fail("%s: no JSON: %s", opt.script,
		     out ? je.text : "no output");
	snprintf(t->version, sizeof(t->version), "pytorch %s eager",
		 json_string_value(json_object_get(j, "torch")));
	t->load_s[t->n] = json_number_value(json_object_get(j, "load_s"));
	t->prefill[t->n] =
		json_number_value(json_object_get(j, "prefill_tok_s"));
	t->decode[t->n] = json_number_value(json_object_get(j, "decode_tok_s"));
	if (json_integer_value(json_object_get(j, "threads")) !=
	    (json_int_t)opt.threads)
		fail("pytorch ran on %lld threads, not %u",
		     (long long)json_integer_value(
			     json_object_get(j, "threads")),
		     opt.threads);
	a = json_object_get(j, "tokens");
	if (t->n++) { /* a later run: the same tokens */
		for (unsigned int i = 0; i < t->nr_tokens; i++)
			if (t->tokens[i] !=
			    (int32_t)json_integer_value(json_array_get(a, i)))
				fail("pytorch's greedy tokens changed between "
				     "runs");
		goto out;
	}
	t->nr_tokens = (unsigned int)json_array_size(a);
	if (t->nr_tokens > CHECK_TOKENS)
		t->nr_tokens = CHECK_TOKENS;
	for (unsigned int i = 0; i < t->nr_tokens; i++) {
		t->tokens[i] =
			(int32_t)json_integer_value(json_array_get(a, i));
		t->gaps[i] = json_number_value(
			json_array_get(json_object_get(j, "gaps"), i));
	}
	snprintf(path, sizeof(path), "%s/logits", tmpl);
	lg = slurp(path, &n);
	if (!lg || n != vocab * sizeof(float))
		fail("%s: no logits of %u floats", opt.script, vocab);
	t->logits = malloc(n);
	if (!t->logits)
		fail("no memory");
	memcpy(t->logits, lg, n); /* little-endian f32, as here */
	t->ran = true;
out:
	json_decref(j);
	free(out);
	free(err);
	free(lg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
	if (system(cmd))
		fprintf(stderr, "model-bench: could not remove %s\n", tmpl);
}

/* ------------------------------------------------------------------------ */
/* The sampler */

/* Qwen2's vocabulary: the widest the runtime meets */
#define SAMPLE_WIDE_VOCAB 151936u
#define SAMPLE_CALLS 2000u
#define SAMPLE_BATCH_NS 200000000ull

/*
 * sample_op_us: the backend's SAMPLE op (a one-row node and the wait
 * for it) on the same logits and setting, already on the device: what a
 * decode step's sampling costs where its logits are, beside
 * model_sample() on the host (which a step on a GPU also pays a copy of
 * the logits for). The median of 5 batches, as sample_us.
 */
static double op_sample_us(struct djinn_run *R, const float *lg, uint32_t n,
			   const struct model_sampling *sp)
{
	struct vmu_session *s = R->s[0];
	struct djinn_sample_params p = { .temperature = sp->temperature,
					 .top_p = sp->top_p,
					 .top_k = sp->top_k,
					 .rng = 42 };
	struct djinn_node node = { .op = DJINN_GOP_SAMPLE, .nr_inputs = 2 };
	struct dj_tensor in[2] = { 0 }, out = { 0 };
	uint64_t h[3];
	double us[5];
	char msg[256] = "";

	in[0].addr = bench_region(s, (uint64_t)n * sizeof(float), &h[0]);
	in[0].desc = (struct djinn_tensor_desc){ .dtype = DJINN_DTYPE_F32,
						 .ndim = 2,
						 .dims = { 1, n } };
	in[1].addr = bench_region(s, sizeof(p), &h[1]);
	in[1].desc = (struct djinn_tensor_desc){ .dtype = DJINN_DTYPE_U8,
						 .ndim = 2,
						 .dims = { 1, sizeof(p) } };
	out.addr = bench_region(s, sizeof(int64_t), &h[2]);
	out.desc = (struct djinn_tensor_desc){ .dtype = DJINN_DTYPE_I64,
					       .ndim = 1,
					       .dims = { 1 } };
	check_msg(vmu_region_write(s, h[0], 0, lg, (uint64_t)n * sizeof(float)),
		  "logits", NULL);
	check_msg(vmu_region_write(s, h[1], 0, &p, sizeof(p)), "params", NULL);
	for (int b = 0; b < 5; b++) {
		uint64_t t0 = mono_ns(), t1 = t0;
		unsigned int i = 0;

		while (i < SAMPLE_CALLS && t1 - t0 < SAMPLE_BATCH_NS) {
			check_msg(R->b->ops->run_node(R->b, &node, in, &out,
						      msg, sizeof(msg)),
				  "SAMPLE", msg);
			check_msg(R->b->ops->sync(R->b), "sync", NULL);
			i++;
			t1 = mono_ns();
		}
		us[b] = secs(t0, t1) * 1e6 / i;
	}
	for (int k = 0; k < 3; k++) {
		vmu_region_unpin(s, h[k]);
		vmu_region_destroy(s, h[k]);
	}
	return median(us, 5);
}

/*
 * sample_us: model_sample()'s time per token on @logits[@V] (the
 * prefill's real logits), and on them tiled out to Qwen2's vocabulary
 * with a little noise, for greedy and the settings clients use: the
 * OpenAI API's default (temperature 1, all tokens), top-k, top-p and
 * both. The median of 5 batches, each SAMPLE_CALLS calls or as many as
 * fit in SAMPLE_BATCH_NS. Then sample_op_us beside each.
 */
static void bench_sampling(struct djinn_run *R, const float *logits, uint32_t V)
{
	static const struct {
		const char *name;
		struct model_sampling sp;
	} set[] = {
		{ "greedy", { .temperature = 0, .top_p = 1 } },
		{ "t1", { .temperature = 1, .top_p = 1 } },
		{ "t0.8_k40",
		  { .temperature = 0.8f, .top_k = 40, .top_p = 1 } },
		{ "t1.3_p0.9", { .temperature = 1.3f, .top_p = 0.9f } },
		{ "t0.7_k50_p0.95",
		  { .temperature = 0.7f, .top_k = 50, .top_p = 0.95f } },
	};
	float *wide = malloc(SAMPLE_WIDE_VOCAB * sizeof(*wide));
	uint64_t rs = 1;

	if (!wide)
		fail("no memory");
	for (uint32_t i = 0; i < SAMPLE_WIDE_VOCAB; i++)
		wide[i] = logits[i % V] +
			  (float)(splitmix64(&rs) >> 40) * 0x1p-24f;
	for (int w = 0; w < 2; w++) {
		const float *lg = w ? wide : logits;
		uint32_t n = w ? SAMPLE_WIDE_VOCAB : V;

		for (size_t k = 0; k < ARRAY_SIZE(set); k++) {
			double us[5];
			char metric[64], note[160], msg[256];
			uint64_t rng = 42;
			int32_t tok;

			for (int b = 0; b < 5; b++) {
				uint64_t t0 = mono_ns(), t1 = t0;
				unsigned int i = 0;

				while (i < SAMPLE_CALLS &&
				       t1 - t0 < SAMPLE_BATCH_NS) {
					check_msg(model_sample(lg, n,
							       &set[k].sp, &rng,
							       &tok, msg,
							       sizeof(msg)),
						  "sample", msg);
					i++;
					t1 = mono_ns();
				}
				us[b] = secs(t0, t1) * 1e6 / i;
			}
			snprintf(metric, sizeof(metric), "sample_us_%s_v%u",
				 set[k].name, n);
			snprintf(note, sizeof(note),
				 "model_sample() per token, %u-token "
				 "vocabulary (%s)",
				 n,
				 w ? "the prefill's logits tiled, with noise" :
				     "the prefill's logits");
			emit(&(struct fig){ .metric = metric,
					    .value = median(us, 5),
					    .unit = "us",
					    .baseline = NAN,
					    .samples = 5,
					    .note = note });
			snprintf(metric, sizeof(metric), "sample_op_us_%s_v%u",
				 set[k].name, n);
			snprintf(note, sizeof(note),
				 "the %s backend's SAMPLE op per token, its "
				 "logits on the device, and the wait for it",
				 opt.backend);
			emit(&(struct fig){
				.metric = metric,
				.value = op_sample_us(R, lg, n, &set[k].sp),
				.unit = "us",
				.baseline = median(us, 5),
				.baseline_name = "model_sample() on the host",
				.samples = 5,
				.note = note });
		}
	}
	free(wide);
}

/* ------------------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
		"usage: model-bench [--cache DIR] [--python PY] [--threads N]\n"
		"                   [--prefill N] [--decode N] [--rounds N]\n"
		"                   [--seed N] [--no-torch] [--torch-script "
		"PATH]\n"
		"                   [--backend cpu|cuda] [--arch gpt2|qwen2]\n"
		"                   [--sessions N,N,... [--mem MiB] [--djinnd "
		"PATH]\n"
		"                    [--djinnctl PATH]]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "cache", required_argument, NULL, 'c' },
		{ "python", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "prefill", required_argument, NULL, 'P' },
		{ "decode", required_argument, NULL, 'd' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' },
		{ "no-torch", no_argument, NULL, 'n' },
		{ "torch-script", required_argument, NULL, 'T' },
		{ "backend", required_argument, NULL, 'B' },
		{ "arch", required_argument, NULL, 'a' },
		{ "sessions", required_argument, NULL, 'S' },
		{ "djinnd", required_argument, NULL, 'D' },
		{ "djinnctl", required_argument, NULL, 'C' },
		{ "mem", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	double pre[MAX_ROUNDS], dec[MAX_ROUNDS], host[MAX_ROUNDS];
	double tload = NAN, tpre = NAN;
	double tdec = NAN;
	struct djinn_side d = { 0 };
	struct torch_side t = { 0 };
	struct djinn_run R = { 0 };
	int32_t *toks;
	char models[1100], note[256], tnote[800];
	unsigned int matched = 0, compared;
	double err = 0, scale = 1e-30, gap_err = 0;
	const char *why = NULL;
	int32_t *prompt;
	uint32_t vocab;
	uint64_t rs;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			opt.cache = optarg;
			break;
		case 'p':
			opt.python = optarg;
			break;
		case 't':
			opt.threads = num(optarg, 1, 1024);
			break;
		case 'P':
			opt.prefill = num(optarg, 1, 512);
			break;
		case 'd':
			opt.decode = num(optarg, 1, 400);
			break;
		case 'r':
			opt.rounds = num(optarg, 1, MAX_ROUNDS);
			break;
		case 's':
			opt.seed = num(optarg, 0, UINT32_MAX);
			break;
		case 'n':
			opt.no_torch = true;
			break;
		case 'T':
			opt.script = optarg;
			break;
		case 'B':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
				usage();
			opt.backend = optarg;
			break;
		case 'a':
			opt.arch = NULL;
			for (size_t i = 0; i < ARRAY_SIZE(archs); i++)
				if (!strcmp(optarg, archs[i].name))
					opt.arch = &archs[i];
			if (!opt.arch)
				usage();
			break;
		case 'S':
			opt.sessions = optarg;
			break;
		case 'D':
			opt.djinnd = optarg;
			break;
		case 'C':
			opt.djinnctl = optarg;
			break;
		case 'm':
			opt.mem = (uint64_t)num(optarg, 64, 1 << 20) << 20;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (!shell_safe(opt.cache) || !shell_safe(opt.python) ||
	    !shell_safe(opt.script) || strlen(opt.cache) >= 1024 ||
	    strlen(opt.python) >= 1024)
		fail("--cache, --python, --torch-script: [A-Za-z0-9/._-+,=:]"
		     " (and under 1024 bytes)");
	if (!opt.threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		opt.threads = n < 1 ? 1 : n > 1024 ? 1024 : (unsigned int)n;
	}

	if (!strcmp(opt.backend, "cuda"))
		need_gpu(); /* before a minute of writing the model */
	ensure_model(models, sizeof(models));
	if (opt.sessions)
		return run_sessions(models);
	vocab = opt.arch->vocab;
	prompt = calloc(opt.prefill, sizeof(*prompt));
	if (!prompt)
		fail("no memory");
	rs = opt.seed;
	for (unsigned int i = 0; i < opt.prefill; i++)
		prompt[i] = (int32_t)(splitmix64(&rs) % vocab);

	/* A warm-up round, then rounds of djinnd and PyTorch in turn, so
	 * that both see the machine as it is at the time. */
	djinn_open(models, &R, &d);
	toks = calloc(opt.decode + 1, sizeof(int32_t));
	if (!toks)
		fail("no memory");
	if (opt.no_torch) {
		snprintf(t.note, sizeof(t.note), "--no-torch: no baseline");
		t.off = true;
	}
	for (unsigned int r = 0; r <= opt.rounds; r++) {
		double p, q, hu;

		round_djinn(R.h[0], &R.env, prompt, r ? toks : d.tokens,
			    r ? NULL : d.logits, d.gaps, &p, &q, &hu);
		if (!r)
			continue;
		if (memcmp(toks, d.tokens, opt.decode * sizeof(*toks)))
			fail("djinnd's greedy tokens changed between rounds");
		pre[r - 1] = p;
		dec[r - 1] = q;
		host[r - 1] = hu;
		if (!t.off)
			run_torch(models, prompt, vocab, &t);
	}
	free(toks);
	d.prefill = median(pre, opt.rounds);
	d.decode = median(dec, opt.rounds);
	d.host_us = median(host, opt.rounds);
	djinn_sessions(&R, prompt, &d);
	if (t.ran) {
		tload = median(t.load_s, t.n);
		tpre = median(t.prefill, t.n);
		tdec = median(t.decode, t.n);
	}

	/* The cross-check */
	compared = opt.decode < CHECK_TOKENS ? opt.decode : CHECK_TOKENS;
	if (t.ran) {
		for (uint32_t i = 0; i < vocab; i++) {
			err = fmax(err,
				   fabs((double)d.logits[i] - t.logits[i]));
			scale = fmax(scale, fabs((double)t.logits[i]));
		}
		err /= scale;
		if (err > LOGITS_TOL)
			why = "the prefill's logits differ from PyTorch's";
		for (; matched < compared && matched < t.nr_tokens; matched++)
			if (d.tokens[matched] != t.tokens[matched])
				break;
		/* a flip only where PyTorch's best two logits are within
		 * twice the tolerated error: then the sequences part */
		if (!why && matched < compared &&
		    t.gaps[matched] > 2 * LOGITS_TOL * scale)
			why = "the greedy tokens differ from PyTorch's";
		/* the decode steps' logits, through the gap of their best
		 * two, while the tokens agree */
		for (unsigned int i = 0; i < matched; i++)
			gap_err = fmax(gap_err, fabs(d.gaps[i] - t.gaps[i]));
		gap_err /= scale;
		if (!why && gap_err > 2 * LOGITS_TOL)
			why = "the decode steps' logits differ from PyTorch's";
	}

	snprintf(note, sizeof(note), "%s f32, %u tokens, %u threads",
		 opt.arch->model, opt.prefill, opt.threads);
	snprintf(tnote, sizeof(tnote), "%s; %s", note, t.note);
	emit(&(struct fig){ .metric = "prefill_tok_per_s",
			    .value = d.prefill,
			    .unit = "tok/s",
			    .baseline = tpre,
			    .baseline_name = t.ran ? t.version : NULL,
			    .target = ">=",
			    .samples = opt.rounds,
			    .note = t.ran ? note : tnote });
	snprintf(note, sizeof(note),
		 "%s f32, %u greedy tokens after %u, %u threads",
		 opt.arch->model, opt.decode, opt.prefill, opt.threads);
	snprintf(tnote, sizeof(tnote), "%s; %s", note, t.note);
	emit(&(struct fig){ .metric = "decode_tok_per_s",
			    .value = d.decode,
			    .unit = "tok/s",
			    .baseline = tdec,
			    .baseline_name = t.ran ? t.version : NULL,
			    .target = ">=",
			    .samples = opt.rounds,
			    .note = t.ran ? note : tnote });
	emit(&(struct fig){
		.metric = "decode_host_us_per_step",
		.value = d.host_us,
		.unit = "us",
		.baseline = NAN,
		.samples = opt.rounds,
		.note = "a decode step's time outside the backend's "
			"running of its nodes: building, checking "
			"and planning its graph, memory, staging, "
			"copies out" });
	{
		/* a step reads the weights and the cache: on average the
		 * prompt and half the decode's tokens */
		double bytes = (double)d.weight_bytes +
			       (double)d.kv_token_bytes *
				       (opt.prefill + (opt.decode - 1) / 2.0),
		       ceiling = d.copy_bytes_s / bytes;

		snprintf(note, sizeof(note),
			 "decode tok/s over the ceiling of %.0f tok/s: %.1f MB "
			 "a token (weights and cache) at %.1f GB/s, a %llu "
			 "MiB device-to-device copy's traffic in this run",
			 ceiling, bytes / 1e6, d.copy_bytes_s / 1e9,
			 COPY_BYTES >> 20);
		emit(&(struct fig){ .metric = "decode_of_ceiling",
				    .value = d.decode / ceiling,
				    .unit = "of the memory's ceiling",
				    .baseline = NAN,
				    .samples = opt.rounds,
				    .note = note });
	}
	emit(&(struct fig){ .metric = "load_s",
			    .value = d.load_s,
			    .unit = "s",
			    .baseline = tload,
			    .baseline_name = t.ran ? t.version : NULL,
			    .note = "djinnd: parse, hash, copy into the text "
				    "segment; pytorch: read into tensors" });
	if (t.ran) {
		emit(&(struct fig){ .metric = "prefill_logits_rel_err",
				    .value = err,
				    .unit = "of the largest logit",
				    .limit = LOGITS_TOL,
				    .limit_name = "tolerance",
				    .target = "<=",
				    .note = "djinnd's last prefill logits "
					    "against pytorch's" });
		emit(&(struct fig){
			.metric = "decode_top2_gap_rel_err",
			.value = gap_err,
			.unit = "of the largest prefill logit",
			.limit = 2 * LOGITS_TOL,
			.limit_name = "tolerance",
			.target = "<=",
			.note = "best minus second best logit of each "
				"greedy step, against pytorch's" });
		snprintf(note, sizeof(note),
			 "the first %u greedy tokens equal pytorch's%s",
			 compared,
			 matched < compared && !why ?
				 "; they part at a near-tie" :
				 "");
		emit(&(struct fig){ .metric = "greedy_tokens_equal",
				    .value = matched,
				    .unit = "tokens",
				    .limit = compared,
				    .limit_name = "compared",
				    .target = ">=",
				    .note = note });
	}
	emit(&(struct fig){ .metric = "text_bytes_1_session",
			    .value = (double)d.text_1,
			    .unit = "bytes",
			    .limit = (double)d.weight_bytes,
			    .limit_name = "the weights' bytes",
			    .note = "text segment, one session holding the "
				    "model" });
	snprintf(note, sizeof(note),
		 "text segment, %u sessions holding and running the model: "
		 "%" PRIu64 " entries, one session: %" PRIu64,
		 SESSIONS, d.entries_n, d.entries_1);
	emit(&(struct fig){ .metric = "text_bytes_4_sessions",
			    .value = (double)d.text_n,
			    .unit = "bytes",
			    .baseline = (double)d.text_1,
			    .baseline_name = "text_bytes_1_session",
			    .target = "<=",
			    .note = note });

	if (vocab >= 32000) /* a real vocabulary's: not the tiny model's */
		bench_sampling(&R, d.logits, vocab);
	djinn_close(&R);

	if (d.text_n != d.text_1 || d.entries_n != d.entries_1)
		fail("the text segment grew with more sessions: %" PRIu64
		     " -> %" PRIu64 " bytes",
		     d.text_1, d.text_n);
	if (why) {
		fprintf(stderr, "model-bench: %s (logits %.3g, tokens:", why,
			err);
		for (unsigned int i = 0; i < compared; i++)
			fprintf(stderr, " %d/%d", d.tokens[i],
				i < t.nr_tokens ? t.tokens[i] : -1);
		fprintf(stderr, ")\n");
		return 1;
	}
	free(prompt);
	free(d.tokens);
	free(d.logits);
	free(t.logits);
	return 0;
}
