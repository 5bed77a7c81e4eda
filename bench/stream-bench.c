// SPDX-License-Identifier: MIT
/*
 * stream-bench: models larger than the device (issue 15) on the CPU
 * backend, or on GPU 0 with --backend cuda. A Llama-shaped f32 model (12 layers of 50 MB, 640 MB in all,
 * seeded random weights from scripts/mkmodel.py, kept in CACHE/models/)
 * runs through the real runtime: the model store places it, wholly on the
 * device and under budgets of a half and a quarter of its weights
 * (streamed through the layer ring), and contexts prefill and decode as
 * djinnd's executors run them.
 *
 * Figures, one JSON object per line (STYLE.md, Benchmarks), the medians
 * of --rounds rounds:
 *   prefill_tok_s, decode_tok_s   at each budget, beside the model wholly
 *                                 on the device;
 *   stream_gbps                   the ring's bytes over the decode's time,
 *                                 beside the copy peak measured in the
 *                                 same run: the provider's copy_htod()
 *                                 from host_alloc() memory to device
 *                                 memory, which is memcpy on the CPU and
 *                                 a pinned cuMemcpyHtoDAsync on a GPU;
 *                                 target 0.8 of it when copy bound;
 *   overlap_decode_tok_s_2x       decode tokens/s with a ring of two
 *                                 slots (the next layer copies while one
 *                                 computes) over one slot (copy, compute,
 *                                 next: Accelerate's CPU offload), the
 *                                 same layers resident;
 *   overlap_prefill_tok_s_2x      the same for a prefill of --balance
 *                                 tokens (default 8), where a layer's
 *                                 compute takes about as long as its
 *                                 copy on the CPU: the case TARGETS.md's
 *                                 1.7 is for (the note gives both
 *                                 times, so a reader sees how balanced
 *                                 the run was);
 *   batch_speedup                 tokens/s of --sessions sessions
 *                                 decoding together (one pass per token
 *                                 for all of them) over one session's;
 *                                 target 5 with 8.
 * The copy lane's own figures (time copying, compute waiting for it,
 * the lane waiting for room) are in each line's note, so a reader can
 * see whether a run was copy or compute bound. Every streamed run's
 * greedy tokens must equal the resident model's, or the run fails.
 *
 * Usage: stream-bench [--backend cpu|cuda] [--cache DIR] [--threads N]
 *                     [--prefill N] [--decode N] [--balance N]
 *                     [--rounds N] [--sessions N]
 *
 *   make bench-stream BENCH_STREAM_ARGS='--rounds 5'
 *
 * The lines' "bench" is "stream_cpu" or "stream_cuda".
 *
 * Exit status: 0, 1 on a failure or a token that differs, 2 usage, 77
 * --backend cuda without a GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "model/runtime.h"
#include "model/stream.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define MAX_ROUNDS 16
#define MAX_SESSIONS 32

static const char *model_args =
	"--arch llama --layers 12 --embd 1024 --heads 16 --inner 2816 "
	"--vocab 4096 --ctx 1024 --untied --seed 3";

static struct {
	const char *backend, *cache, *mkmodel;
	unsigned int threads, prefill, decode, balance, rounds, sessions;
} opt = {
	.backend = "cpu",
	.cache = "build/bench-cache",
	.mkmodel = "scripts/mkmodel.py",
	.prefill = 64,
	.decode = 16,
	.balance = 8,
	.rounds = 3,
	.sessions = 8,
};

/* One line: @value against @base (named), @target on the ratio; its keys
 * in an order of their own, the baseline's name before the ratio
 * (lib/figure.h). */
static void emit(const char *metric, double value, const char *unit,
		 double base, const char *base_name, double target,
		 const char *note)
{
	char bench[32];
	double ratio = base > 0 ? value / base : NAN;

	snprintf(bench, sizeof(bench), "stream_%s", opt.backend);
	fig_begin(bench, metric);
	fig_num("value", value);
	fig_str("unit", unit);
	fig_num("baseline", base);
	fig_str("baseline_name", base_name);
	fig_num("ratio", ratio);
	if (target > 0)
		fig_target("ratio", ">=", target, ratio);
	fig_u64("samples", opt.rounds);
	if (note)
		fig_str("note", note);
	fig_end();
}

/* ---------------------------------------------------------------------- */
/* The runtime */

struct rt {
	struct backend *b;
	struct model_env env;
	struct model_store *ms;
	struct vmu_session *s;
};

/* The copy peak: GB/s of the provider's copy_htod() of 256 MiB from
 * host_alloc() memory into a text area, the best of five. */
static double copy_peak(struct rt *R)
{
	struct vmu_provider *p = R->b->provider;
	uint64_t n = 256 * MiB;
	struct vmu_text_area *a;
	char msg[256] = "";
	double best = 0;
	void *h;

	check_msg(p->ops->host_alloc(p, n, &h), "host memory", NULL);
	check_msg(vmu_text_area_alloc(R->env.v, n, &a, msg, sizeof(msg)),
		  "device memory", msg);
	memset(h, 1, n);
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = mono_ns();
		double g;

		check_msg(p->ops->copy_htod(p, vmu_text_area_addr(a), h, n),
			  "copy_htod", NULL);
		g = (double)n / (double)(mono_ns() - t0);
		best = g > best ? g : best;
	}
	vmu_text_area_free(R->env.v, a);
	p->ops->host_free(p, h, n);
	return best;
}

static struct model_hold *open_model(struct rt *R, struct vmu_session *s,
				     const char *name, uint64_t budget,
				     unsigned int slots)
{
	struct model_hold *h;
	char msg[256] = "";

	check_msg(model_store_set_budget(R->ms, name, budget, slots, msg,
					 sizeof(msg)),
		  "budget", msg);
	check_msg(model_open(R->ms, s, name, &h, msg, sizeof(msg)), name, msg);
	return h;
}

static void close_model(struct rt *R, struct model_hold *h, const char *name)
{
	char msg[256] = "";

	model_close(h);
	check_msg(model_store_evict(R->ms, name, msg, sizeof(msg)), "evict",
		  msg);
}

/*
 * struct side - one placement's medians
 * @pre, @dec: tokens/s
 * @gbps:      ring bytes per second of decode
 * @copy_ms, @stall_ms, @full_ms: per decoded token, the copy lane's time
 *             copying, compute waiting for it, and it waiting for room
 * @pre_copy_ms: per prefill, the lane's time copying
 */
struct side {
	double pre, dec, gbps;
	double copy_ms, stall_ms, full_ms, pre_copy_ms;
	int32_t *toks;
};

/* A streamed placement's decode tokens/s and ring GB/s, beside the
 * resident model's and the copy peak, with the copy lane's times. */
static void emit_decode(const char *x, const struct side *s,
			const struct side *res, double peak,
			const char *peak_name)
{
	char metric[64], note[256];

	snprintf(note, sizeof(note),
		 "per token: copying %.1f ms, compute waiting %.1f ms, the "
		 "lane waiting for room %.1f ms",
		 s->copy_ms, s->stall_ms, s->full_ms);
	snprintf(metric, sizeof(metric), "decode_tok_s_%s", x);
	emit(metric, s->dec, "tok/s", res->dec,
	     "the model wholly on the device", 0, note);
	snprintf(metric, sizeof(metric), "stream_gbps_%s", x);
	emit(metric, s->gbps, "GB/s", peak, peak_name, 0.8, note);
}

static void stats(const struct model *m, struct model_stream_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (m->stream)
		model_stream_stats(m->stream, s);
}

static void run_side(struct rt *R, struct model_hold *h, const int32_t *prompt,
		     struct side *out)
{
	const struct model_sampling greedy = { .top_p = 1 };
	double pre[MAX_ROUNDS], dec[MAX_ROUNDS], gb[MAX_ROUNDS];
	double cp[MAX_ROUNDS], st[MAX_ROUNDS], fu[MAX_ROUNDS], pc[MAX_ROUNDS];
	char msg[256] = "";

	out->toks = calloc(opt.decode, sizeof(int32_t));
	for (unsigned int r = 0; r <= opt.rounds; r++) {
		struct model_stream_stats a0, a, b;
		struct model_ctx *c;
		uint64_t t0, t1, t2;

		check_msg(model_ctx_new(h, opt.prefill + opt.decode + 1, &c,
					msg, sizeof(msg)),
			  "context", msg);
		stats(h->m, &a0);
		t0 = mono_ns();
		check_msg(model_ctx_prefill(c, &R->env, prompt, opt.prefill,
					    NULL, msg, sizeof(msg)),
			  "prefill", msg);
		t1 = mono_ns();
		stats(h->m, &a);
		check_msg(model_ctx_decode(c, &R->env, opt.decode, &greedy,
					   out->toks, msg, sizeof(msg)),
			  "decode", msg);
		t2 = mono_ns();
		stats(h->m, &b);
		model_ctx_free(c);
		if (!r)
			continue; /* the warm-up */
		pre[r - 1] = opt.prefill / secs(t0, t1);
		dec[r - 1] = opt.decode / secs(t1, t2);
		gb[r - 1] = (double)(b.ring.bytes - a.ring.bytes) /
			    (double)(t2 - t1);
		cp[r - 1] = (double)(b.ring.copy_ns - a.ring.copy_ns) / 1e6 /
			    opt.decode;
		st[r - 1] = (double)(b.ring.stall_ns - a.ring.stall_ns) / 1e6 /
			    opt.decode;
		fu[r - 1] = (double)(b.ring.full_ns - a.ring.full_ns) / 1e6 /
			    opt.decode;
		pc[r - 1] = (double)(a.ring.copy_ns - a0.ring.copy_ns) / 1e6;
	}
	out->pre = median(pre, opt.rounds);
	out->dec = median(dec, opt.rounds);
	out->gbps = median(gb, opt.rounds);
	out->copy_ms = median(cp, opt.rounds);
	out->stall_ms = median(st, opt.rounds);
	out->full_ms = median(fu, opt.rounds);
	out->pre_copy_ms = median(pc, opt.rounds);
}

/* llama-640m-s under @budget and @slots: its figures into @out; the layers
 * it kept resident. */
static uint32_t placed(struct rt *R, uint64_t budget, unsigned int slots,
		       const int32_t *prompt, struct side *out)
{
	struct model_hold *h =
		open_model(R, R->s, "llama-640m-s", budget, slots);
	uint32_t res = h->m->resident;

	fprintf(stderr,
		"stream-bench: budget %llu, a ring of %u: %u of %u layers "
		"resident\n",
		(unsigned long long)budget, slots ? slots : 2, res,
		h->m->cfg.n_layer);
	run_side(R, h, prompt, out);
	close_model(R, h, "llama-640m-s");
	return res;
}

/* Sessions decoding together */

struct dec {
	struct model_env env;
	struct model_ctx *c;
	int32_t *toks;
	char msg[256];
	struct model_req q;
};

/* Tokens/s of @n sessions each decoding opt.decode tokens at once, after
 * a prefill each; the mean batch of their passes in *@batch. */
static double run_together(struct rt *R, const char *name, uint64_t budget,
			   const int32_t *prompt, const int32_t *want,
			   unsigned int n, double *batch)
{
	struct vmu_session *s[MAX_SESSIONS];
	struct model_hold *h[MAX_SESSIONS];
	const struct model_sampling greedy = { .top_p = 1 };
	struct model_req *qs[MAX_SESSIONS];
	struct dec d[MAX_SESSIONS];
	double tps[MAX_ROUNDS], bt[MAX_ROUNDS];
	char msg[256] = "";

	for (unsigned int i = 0; i < n; i++) {
		check_msg(vmu_session_create(R->env.v, "bench", &s[i]),
			  "session", NULL);
		h[i] = open_model(R, s[i], name, budget, 0);
		d[i].env = R->env;
		check_msg(vmu_stack_create(R->env.v, 1 * GiB, &d[i].env.st),
			  "stack", NULL);
		d[i].toks = calloc(opt.decode, sizeof(int32_t));
	}
	for (unsigned int r = 0; r <= opt.rounds; r++) {
		struct model_stream_stats a, b;
		uint64_t t0;

		for (unsigned int i = 0; i < n; i++) {
			check_msg(model_ctx_new(h[i],
						opt.prefill + opt.decode + 1,
						&d[i].c, msg, sizeof(msg)),
				  "context", msg);
			check_msg(model_ctx_prefill(d[i].c, &d[i].env, prompt,
						    opt.prefill, NULL, msg,
						    sizeof(msg)),
				  "prefill", msg);
		}
		stats(h[0]->m, &a);
		t0 = mono_ns();
		/* as djinnd's scheduler runs them: one pass per token for
		 * all the sessions (model_pass()) */
		for (unsigned int i = 0; i < n; i++) {
			d[i].q = (struct model_req){
				.c = d[i].c,
				.kind = MODEL_REQ_DECODE,
				.n = opt.decode,
				.sp = greedy,
				.r = { .out = d[i].toks },
				.msg = d[i].msg,
				.msglen = sizeof(d[i].msg),
			};
			check_msg(model_req_start(&d[i].q), "decode", d[i].msg);
			qs[i] = &d[i].q;
		}
		while (!d[0].q.done)
			model_pass(qs, n, &d[0].env);
		for (unsigned int i = 0; i < n; i++) {
			check_msg(d[i].q.ret, "decode together", d[i].msg);
			model_req_fini(&d[i].q);
			if (memcmp(d[i].toks, want,
				   opt.decode * sizeof(int32_t)))
				fail("session %u of %u decoding together: "
				     "other tokens than alone",
				     i, n);
		}
		if (r) {
			tps[r - 1] =
				(double)n * opt.decode / secs(t0, mono_ns());
			stats(h[0]->m, &b);
			bt[r - 1] = (double)(b.jobs - a.jobs) /
				    (double)(b.passes - a.passes);
		}
		for (unsigned int i = 0; i < n; i++)
			model_ctx_free(d[i].c);
	}
	for (unsigned int i = n; i-- > 0;) {
		if (i)
			model_close(h[i]);
		else
			close_model(R, h[i], name);
		vmu_stack_destroy(d[i].env.st);
		vmu_session_destroy(s[i]);
		free(d[i].toks);
	}
	*batch = median(bt, opt.rounds);
	return median(tps, opt.rounds);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: stream-bench [--backend cpu|cuda] [--cache DIR] "
		"[--threads N] [--prefill N] [--decode N] [--balance N] "
		"[--rounds N] [--sessions N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "backend", required_argument, NULL, 'b' },
		{ "cache", required_argument, NULL, 'c' },
		{ "threads", required_argument, NULL, 't' },
		{ "prefill", required_argument, NULL, 'p' },
		{ "decode", required_argument, NULL, 'd' },
		{ "balance", required_argument, NULL, 'B' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "sessions", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	char models[1024], note[512], msg[256] = "";
	struct side res, half, quarter, sync, bal2, bal1;
	struct model_hold *h;
	struct rt R = { 0 };
	int32_t *prompt;
	uint64_t weights, big, half_b, quarter_b, sync_b;
	const char *peak_name = "memcpy peak";
	double peak, one, many, batch;
	uint32_t R2;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
				usage();
			opt.backend = optarg;
			break;
		case 'c':
			opt.cache = optarg;
			break;
		case 't':
			opt.threads = (unsigned int)num(optarg, 0, 256);
			break;
		case 'p':
			opt.prefill = (unsigned int)num(optarg, 1, 512);
			break;
		case 'd':
			opt.decode = (unsigned int)num(optarg, 1, 256);
			break;
		case 'B':
			opt.balance = (unsigned int)num(optarg, 1, 512);
			break;
		case 'r':
			opt.rounds = (unsigned int)num(optarg, 1, MAX_ROUNDS);
			break;
		case 'n':
			opt.sessions =
				(unsigned int)num(optarg, 2, MAX_SESSIONS);
			break;
		default:
			usage();
		}
	}
	if (!strcmp(opt.backend, "cuda"))
		need_gpu(); /* before writing the model */
	snprintf(models, sizeof(models), "%s/models", opt.cache);
	ensure_mkmodel(models, "llama-640m", opt.mkmodel, model_args);
	/* the same weights under a second name, placed under budgets */
	{
		char cmd[4096];

		snprintf(
			cmd, sizeof(cmd),
			"cd %s && rm -rf llama-640m-s && mkdir llama-640m-s && "
			"ln -s ../llama-640m/config.json "
			"../llama-640m/model.safetensors llama-640m-s/",
			models);
		if (system(cmd))
			fail("failed: %s", cmd);
	}
	if (!strcmp(opt.backend, "cuda")) {
		if (cuda_backend_create(0, 0, &R.b, msg, sizeof(msg)))
			fail("cuda:0: %s", msg);
		fprintf(stderr, "stream-bench: cuda:0: %s\n", msg);
		peak_name = "pinned cuMemcpyHtoDAsync peak";
	} else {
		check_msg(cpu_backend_create(4 * GiB, opt.threads, &R.b),
			  "backend", NULL);
	}
	check_msg(vmu_create(R.b->provider, NULL, &R.env.v), "vmu", NULL);
	check_msg(vmu_stack_create(R.env.v, 1 * GiB, &R.env.st), "stack", NULL);
	check_msg(vmu_session_create(R.env.v, "bench", &R.s), "session", NULL);
	check_msg(model_store_create(R.env.v, models, &R.ms), "store", NULL);
	R.env.b = R.b;
	peak = copy_peak(&R);

	prompt = calloc(opt.prefill > opt.balance ? opt.prefill : opt.balance,
			sizeof(int32_t));
	for (unsigned int i = 0;
	     i < (opt.prefill > opt.balance ? opt.prefill : opt.balance); i++)
		prompt[i] = (int32_t)((i * 2654435761u) % 4096);

	/* wholly on the device */
	check_msg(model_open(R.ms, R.s, "llama-640m", &h, msg, sizeof(msg)),
		  "llama-640m", msg);
	weights = h->m->layout.bytes;
	big = model_layer_max(&h->m->layout, h->m->cfg.n_layer);
	run_side(&R, h, prompt, &res);
	close_model(&R, h, "llama-640m");

	/* half and a quarter of the weights; a ring of one slot, the same
	 * layers resident: no overlap */
	half_b = weights / 2;
	quarter_b = weights / 4;
	sync_b = half_b - vmu_round(R.env.v, 2 * big) + vmu_round(R.env.v, big);
	R2 = placed(&R, half_b, 0, prompt, &half);
	placed(&R, quarter_b, 0, prompt, &quarter);
	if (placed(&R, sync_b, 1, prompt, &sync) != R2)
		fail("one slot: other layers resident than with two");
	/* a short prefill, compute about as long as the copy: two slots,
	 * then one */
	{
		unsigned int pf = opt.prefill, dc = opt.decode;

		opt.prefill = opt.balance;
		opt.decode = 1;
		placed(&R, half_b, 0, prompt, &bal2);
		placed(&R, sync_b, 1, prompt, &bal1);
		opt.prefill = pf;
		opt.decode = dc;
	}
	if (memcmp(half.toks, res.toks, opt.decode * 4) ||
	    memcmp(quarter.toks, res.toks, opt.decode * 4) ||
	    memcmp(sync.toks, res.toks, opt.decode * 4))
		fail("a streamed model decoded other tokens than the resident "
		     "one");

	emit("prefill_tok_s_2x", half.pre, "tok/s", res.pre,
	     "the model wholly on the device", 0, NULL);
	emit("prefill_tok_s_4x", quarter.pre, "tok/s", res.pre,
	     "the model wholly on the device", 0, NULL);
	emit_decode("2x", &half, &res, peak, peak_name);
	emit_decode("4x", &quarter, &res, peak, peak_name);
	snprintf(note, sizeof(note),
		 "one slot, per token: copying %.1f ms, compute waiting %.1f "
		 "ms",
		 sync.copy_ms, sync.stall_ms);
	emit("overlap_decode_tok_s_2x", half.dec, "tok/s", sync.dec,
	     "synchronous layer-by-layer offload (a ring of one slot)", 0,
	     note);
	{
		/* one slot: a prefill is its copies, then its compute */
		double total = 1e3 * opt.balance / bal1.pre;

		snprintf(note, sizeof(note),
			 "prefill of %u tokens; one slot, per prefill: "
			 "copying %.1f ms, computing %.1f ms",
			 opt.balance, bal1.pre_copy_ms,
			 total - bal1.pre_copy_ms);
		emit("overlap_prefill_tok_s_2x", bal2.pre, "tok/s", bal1.pre,
		     "synchronous layer-by-layer offload (a ring of one slot)",
		     1.7, note);
	}

	/* sessions decoding together on the half budget */
	one = run_together(&R, "llama-640m-s", half_b, prompt, res.toks, 1,
			   &batch);
	many = run_together(&R, "llama-640m-s", half_b, prompt, res.toks,
			    opt.sessions, &batch);
	snprintf(note, sizeof(note), "%u sessions, mean pass of %.1f",
		 opt.sessions, batch);
	emit("batch_decode_tok_s_2x", many, "tok/s", one, "one session", 5,
	     note);

	model_store_destroy(R.ms);
	vmu_session_destroy(R.s);
	vmu_stack_destroy(R.env.st);
	vmu_destroy(R.env.v);
	R.b->ops->destroy(R.b);
	free(prompt);
	free(res.toks), free(half.toks), free(quarter.toks), free(sync.toks);
	free(bal2.toks), free(bal1.toks);
	return 0;
}
