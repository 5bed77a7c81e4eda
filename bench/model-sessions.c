// SPDX-License-Identifier: MIT
/*
 * model-bench --sessions: many sessions decoding on one model through a
 * real djinnd and its scheduler (model-bench.h). See model-bench.c's
 * head for the lines.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <djinn/djinn.h>
#include <jansson.h>

#include "bench.h"
#include "djinnd.h"
#include "model-bench.h"

/* One session of a round: a connection, a context prefilled. */
struct sess {
	const struct sessions_opt *o;
	unsigned int i;
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_ctx *c;
	int32_t *toks;
	uint64_t t0, t1;
	int ret;
	char err[256];
	pthread_barrier_t *go;
};

/* Session @i's prompt: o->prefill tokens of its own. */
static void prompt_of(const struct sessions_opt *o, unsigned int i, int32_t *p)
{
	uint64_t rs = o->seed + 1000003ull * (i + 1);

	for (unsigned int t = 0; t < o->prefill; t++)
		p[t] = (int32_t)(splitmix64(&rs) % o->vocab);
}

static void sess_open(const struct sessions_opt *o, struct sess *x,
		      unsigned int i)
{
	int32_t *p = calloc(o->prefill, sizeof(*p));
	int ret;

	memset(x, 0, sizeof(*x));
	x->o = o;
	x->i = i;
	x->toks = calloc(o->decode, sizeof(int32_t));
	if (!p || !x->toks)
		fail("no memory");
	prompt_of(o, i, p);
	ret = djinn_connect(bench_djinnd.addr, &x->conn);
	if (!ret)
		ret = djinn_session_open(x->conn, NULL, &x->s);
	if (!ret)
		ret = djinn_model_open(x->s, o->model, &x->m);
	if (!ret)
		ret = djinn_ctx_new(x->m, o->prefill + o->decode + 1, &x->c);
	if (!ret)
		ret = djinn_ctx_prefill(x->c, p, o->prefill, NULL, NULL);
	if (ret)
		fail("session %u: %s: %s", i, strerror(-ret),
		     djinn_last_error());
	free(p);
}

static void sess_close(struct sess *x)
{
	djinn_ctx_free(x->c);
	djinn_model_close(x->m);
	djinn_session_close(x->s);
	djinn_disconnect(x->conn);
	free(x->toks);
}

static void *sess_main(void *arg)
{
	struct sess *x = arg;

	pthread_barrier_wait(x->go);
	x->t0 = mono_ns();
	x->ret =
		djinn_ctx_decode(x->c, x->o->decode, NULL, x->toks, NULL, NULL);
	x->t1 = mono_ns();
	if (x->ret != (int)x->o->decode)
		snprintf(x->err, sizeof(x->err), "%s", djinn_last_error());
	return NULL;
}

/* The scheduler's pass counters: passes and their steps. */
static void pass_counts(double *passes, double *steps)
{
	json_t *j = bdj_ctl_json("sched");
	json_t *d = json_array_get(json_object_get(j, "devices"), 0);

	*passes = bdj_num(d, "passes");
	*steps = bdj_num(d, "pass_jobs");
	json_decref(j);
}

/* One round of @n sessions decoding together: their tokens into
 * @toks[n][decode], the figures into @r. */
static void round_n(const struct sessions_opt *o, unsigned int n, int32_t *toks,
		    struct sessions_result *r)
{
	struct sess *x = calloc(n, sizeof(*x));
	pthread_t *th = calloc(n, sizeof(*th));
	double *per = calloc(n, sizeof(double));
	pthread_barrier_t go;
	double p0, s0, p1, s1;
	uint64_t t0 = UINT64_MAX, t1 = 0;

	if (!x || !th || !per)
		fail("no memory");
	for (unsigned int i = 0; i < n; i++)
		sess_open(o, &x[i], i);
	pthread_barrier_init(&go, NULL, n);
	pass_counts(&p0, &s0);
	for (unsigned int i = 0; i < n; i++) {
		x[i].go = &go;
		if (pthread_create(&th[i], NULL, sess_main, &x[i]))
			fail("pthread_create");
	}
	for (unsigned int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pass_counts(&p1, &s1);
	for (unsigned int i = 0; i < n; i++) {
		if (x[i].ret != (int)o->decode)
			fail("session %u of %u: decode: %d: %s", i, n, x[i].ret,
			     x[i].err);
		t0 = x[i].t0 < t0 ? x[i].t0 : t0;
		t1 = x[i].t1 > t1 ? x[i].t1 : t1;
		per[i] = secs(x[i].t0, x[i].t1) * 1e3 / o->decode;
		memcpy(toks + (size_t)i * o->decode, x[i].toks,
		       o->decode * sizeof(int32_t));
		sess_close(&x[i]);
	}
	pthread_barrier_destroy(&go);
	qsort(per, n, sizeof(double), cmp_double);
	r->tok_s = (double)n * o->decode / secs(t0, t1);
	r->p50_ms = per[(n - 1) / 2];
	r->p99_ms = per[(size_t)ceil(0.99 * n) - 1];
	r->rows = (s1 - s0) / (p1 - p0);
	free(x);
	free(th);
	free(per);
}

/* djinnd with @extra (NULL ended) run over every N: @res[k], the tokens
 * @toks[k] (n[k] * decode each). */
static void run_daemon(const struct sessions_opt *o, const char *max_batch,
		       struct sessions_result *res, int32_t **toks)
{
	char mem[32], set[64];
	const char *args[24];
	unsigned int a = 0;
	struct sessions_result warm;
	int32_t *wt = calloc(o->decode, sizeof(int32_t));

	if (!wt)
		fail("no memory");
	snprintf(mem, sizeof(mem), "%" PRIu64, o->mem);
	snprintf(set, sizeof(set), "device.max_batch=%s", max_batch);
	args[a++] = "--backend";
	args[a++] = o->backend;
	args[a++] = strcmp(o->backend, "cuda") ? "--cpu-mem" : "--gpu-mem";
	args[a++] = mem;
	args[a++] = "--model-dir";
	args[a++] = o->models;
	args[a++] = "--log-level";
	args[a++] = "notice";
	args[a++] = "--set";
	args[a++] = set;
	args[a] = NULL;
	bdj_start(args, !strcmp(o->backend, "cuda"));
	round_n(o, 1, wt, &warm); /* loads the model, warms the caches */
	for (unsigned int k = 0; k < o->nr_n; k++) {
		struct sessions_result r[SESSIONS_MAX_ROUNDS];
		size_t bytes = (size_t)o->n[k] * o->decode * sizeof(int32_t);
		int32_t *again = malloc(bytes);
		double v[SESSIONS_MAX_ROUNDS], mid;

		if (!again)
			fail("no memory");
		/* the round of the median tokens/s; every round's tokens
		 * the same */
		for (unsigned int i = 0; i < o->rounds; i++) {
			round_n(o, o->n[k], i ? again : toks[k], &r[i]);
			if (i && memcmp(again, toks[k], bytes))
				fail("%u sessions, max_batch %s: other tokens "
				     "in round %u than in the first",
				     o->n[k], max_batch, i + 1);
			v[i] = r[i].tok_s;
		}
		mid = median(v, o->rounds);
		res[k] = r[0];
		for (unsigned int i = 1; i < o->rounds; i++)
			if (fabs(r[i].tok_s - mid) < fabs(res[k].tok_s - mid))
				res[k] = r[i];
		free(again);
	}
	if (!bdj_stop())
		fail("djinnd did not stop cleanly");
	free(wt);
}

/* PyTorch running the @n sessions' sequences as one batch:
 * its decode tokens/s, NAN (and @note) when it did not run. */
static double torch_batch(const struct sessions_opt *o, unsigned int n,
			  char *note, size_t nlen)
{
	char tmpl[] = "/tmp/model-sessions.XXXXXX", cmd[4096], path[600];
	char *out = NULL, *err = NULL, why[400] = "";
	int32_t *p = calloc(o->prefill, sizeof(*p));
	double v = NAN;
	json_error_t je;
	json_t *j;
	size_t len;
	FILE *f;
	int st;

	if (!p || !mkdtemp(tmpl))
		fail("model-sessions: no memory or no temporary directory");
	snprintf(path, sizeof(path), "%s/tokens", tmpl);
	f = fopen(path, "w");
	if (!f)
		fail("%s: %s", path, strerror(errno));
	for (unsigned int i = 0; i < n; i++) {
		prompt_of(o, i, p);
		for (unsigned int t = 0; t < o->prefill; t++)
			fprintf(f, "%s%d", t ? "," : "", p[t]);
		fputc('\n', f);
	}
	fclose(f);
	free(p);
	snprintf(cmd, sizeof(cmd),
		 "%s %s --model %s/%s --arch %s --tokens-file %s/tokens "
		 "--decode %u --rounds 1 --threads %u --device %s > %s/out "
		 "2> %s/err",
		 o->python, o->script, o->models, o->model, o->arch, tmpl,
		 o->decode, o->threads, o->backend, tmpl, tmpl);
	st = system(cmd);
	snprintf(path, sizeof(path), "%s/err", tmpl);
	err = slurp(path, &len);
	if (st) {
		if (err)
			last_line(why, sizeof(why), err);
		if ((WIFEXITED(st) && WEXITSTATUS(st) == 127) ||
		    (err && strstr(err, "No module named 'torch'")))
			snprintf(note, nlen, "PyTorch did not run (%s)", why);
		else
			fail("%s --tokens-file failed: %s", o->script, why);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/out", tmpl);
	out = slurp(path, &len);
	if (!out || !(j = json_loads(out, 0, &je)))
		fail("%s: no JSON", o->script);
	v = json_number_value(json_object_get(j, "decode_tok_s"));
	if (json_integer_value(json_object_get(j, "batch")) != (json_int_t)n)
		fail("%s: a batch of %lld, not %u", o->script,
		     (long long)json_integer_value(json_object_get(j, "batch")),
		     n);
	snprintf(note, nlen, "pytorch %s eager, a batch of %u",
		 json_string_value(json_object_get(j, "torch")), n);
	json_decref(j);
out:
	free(out);
	free(err);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
	if (system(cmd))
		fprintf(stderr, "model-bench: could not remove %s\n", tmpl);
	return v;
}

void sessions_bench(const struct sessions_opt *o,
		    void (*emit)(const struct fig *f, unsigned int sessions))
{
	struct sessions_result on[SESSIONS_MAX_N], off[SESSIONS_MAX_N];
	int32_t *ton[SESSIONS_MAX_N], *toff[SESSIONS_MAX_N];
	char note[512], tnote[512];
	double one = NAN;

	bdj_tmpdir("model-sessions");
	for (unsigned int k = 0; k < o->nr_n; k++) {
		ton[k] = calloc((size_t)o->n[k] * o->decode, sizeof(int32_t));
		toff[k] = calloc((size_t)o->n[k] * o->decode, sizeof(int32_t));
		if (!ton[k] || !toff[k])
			fail("no memory");
	}
	run_daemon(o, "64", on, ton);
	run_daemon(o, "1", off, toff);
	for (unsigned int k = 0; k < o->nr_n; k++) {
		unsigned int n = o->n[k], same = 0;
		double t = NAN;

		if (n == 1)
			one = on[k].tok_s;
		for (unsigned int i = 0; i < n; i++)
			same += !memcmp(ton[k] + (size_t)i * o->decode,
					toff[k] + (size_t)i * o->decode,
					o->decode * sizeof(int32_t));
		snprintf(tnote, sizeof(tnote), "--no-torch");
		if (!o->no_torch)
			t = torch_batch(o, n, tnote, sizeof(tnote));
		snprintf(note, sizeof(note),
			 "%u sessions of %s f32 through djinnd, each %u greedy "
			 "tokens after %u at once; baseline: the same with "
			 "device.max_batch=1",
			 n, o->model, o->decode, o->prefill);
		emit(&(struct fig){ .metric = "sessions_decode_tok_per_s",
				    .value = on[k].tok_s,
				    .unit = "tok/s",
				    .baseline = off[k].tok_s,
				    .baseline_name = "batching off",
				    .target = ">=",
				    .note = note },
		     n);
		emit(&(struct fig){ .metric = "sessions_decode_vs_torch",
				    .value = on[k].tok_s,
				    .unit = "tok/s",
				    .baseline = t,
				    .baseline_name = isnan(t) ? NULL : tnote,
				    .target = ">=",
				    .note = isnan(t) ? tnote :
						       "pytorch decodes the "
						       "same sequences as one "
						       "batch" },
		     n);
		if (isfinite(one))
			emit(
				&(struct fig){
					.metric = "sessions_decode_x_one",
					.value = on[k].tok_s / one,
					.unit = "x one session's tok/s",
					.limit = n >= o->target_n ?
							 o->target_x :
							 NAN,
					.baseline = NAN,
					.limit_name = n >= o->target_n ?
							      "target" :
							      NULL,
					.target = n >= o->target_n ? ">=" :
								     NULL,
					.note = "aggregate over one session's, "
						"batching on" },
				n);
		emit(&(struct fig){ .metric = "sessions_token_ms_p50",
				    .value = on[k].p50_ms,
				    .unit = "ms",
				    .baseline = off[k].p50_ms,
				    .baseline_name = "batching off",
				    .note = "a session's decode time over its "
					    "tokens, median session" },
		     n);
		emit(
			&(struct fig){
				.metric = "sessions_token_ms_p99",
				.value = on[k].p99_ms,
				.unit = "ms",
				.baseline = off[k].p99_ms,
				.baseline_name = "batching off",
				.note = "the same, 99th percentile session" },
			n);
		emit(&(struct fig){ .metric = "sessions_rows_per_pass",
				    .value = on[k].rows,
				    .unit = "steps",
				    .baseline = off[k].rows,
				    .baseline_name = "batching off",
				    .note = "ADMIN_SCHED: pass_jobs / passes "
					    "over the round" },
		     n);
		snprintf(note, sizeof(note),
			 "sessions whose %u tokens equal their tokens with "
			 "batching off",
			 o->decode);
		emit(&(struct fig){ .metric = "sessions_tokens_equal",
				    .value = same,
				    .unit = "sessions",
				    .limit = n,
				    .limit_name = "sessions",
				    .note = note },
		     n);
		free(ton[k]);
		free(toff[k]);
	}
}
