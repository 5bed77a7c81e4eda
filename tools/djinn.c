// SPDX-License-Identifier: MIT
/*
 * djinn: the scriptable client of djinnd, over libdjinn.
 *
 *   djinn [-a ADDR] generate (-m NAME | --upload DIR) -t 1,2,3 [-n N]
 *         [--break-at L] [--temperature T] [--top-k K] [--top-p P]
 *         [--seed S] [--logits FILE]
 *   djinn [-a ADDR] model info NAME [--hold SECONDS]
 *
 * generate opens a session, the model and a context with room for the
 * prompt and N more tokens, prefills the tokens, decodes N more on the
 * daemon and prints them, comma-separated on one line. With --break-at L
 * every step pauses after layer L: each pause prints a line "paused
 * after layer L: hidden (T, H) DTYPE" and resumes unchanged, so the
 * tokens are those of a run without it.
 * --upload DIR opens the checkpoint in local directory DIR
 * (djinn_model_upload()) instead of a model of the daemon's directory.
 * --logits FILE writes the f32 logits after the prompt and after each
 * generated token, N + 1 rows of the vocabulary's size: the tokens are
 * then decoded one call at a time, each step's logits read from their
 * stub and released on the daemon.
 *
 * model info prints what MODEL_OPEN says of a model; with --hold it
 * keeps the model open for SECONDS before closing it.
 *
 * Exit status: 0 success; 1 failure, after one line on stderr
 * "djinn: COMMAND: [WHAT: ]MESSAGE (ERRNO)"; 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "array_size.h"
#include "cli.h"

#define DJINN_TOOL_VERSION "0.1"
#define MAX_PROMPT 4096

struct args {
	const char *addr;
	const char *model;
	const char *upload; /* a local checkpoint directory, or NULL */
	const char *logits; /* where generate writes the logits, or NULL */
	const char *tokens;
	uint32_t n;
	int break_at; /* -1: none */
	struct djinn_sampling sp;
	unsigned int hold; /* seconds */
};

static const char *cmd_name = "djinn";

/* One line naming what failed (@what: NULL when libdjinn's message says
 * it) and why; returns the exit status 1. */
static int fail(int err, const char *what)
{
	const char *msg = djinn_last_error();

	if (!*msg)
		msg = strerror(-err);
	fprintf(stderr, "djinn: %s: %s%s%s (%s)\n", cmd_name, what ? what : "",
		what ? ": " : "", msg, errno_name(err));
	return 1;
}

const char tool_name[] = "djinn";

void usage(FILE *f)
{
	fprintf(f,
		"usage: djinn [-a ADDR] generate (-m NAME | --upload DIR) "
		"-t TOKENS [-n N]\n"
		"             [--break-at L] [--temperature T] [--top-k K] "
		"[--top-p P]\n"
		"             [--seed S] [--logits FILE]\n"
		"       djinn [-a ADDR] model info NAME [--hold SECONDS]\n\n"
		"  generate    prefill TOKENS (ids, comma-separated), decode N "
		"more\n"
		"              (default 16) and print them, comma-separated\n"
		"  model info  what djinnd says of model NAME\n\n"
		"  -a, --addr ADDR      djinnd (unix:PATH or tcp:HOST:PORT; "
		"default:\n"
		"                       $DJINN_ADDR, else djinnd's default "
		"socket:\n"
		"                       djinn_connect(3))\n"
		"  -m, --model NAME     the model, from djinnd's model "
		"directory\n"
		"      --upload DIR     the model in local directory DIR, sent "
		"to djinnd\n"
		"  -t, --tokens LIST    the prompt's token ids: 1,2,3\n"
		"  -n, --count N        tokens to generate\n"
		"  -b, --break-at L     pause after layer L at every step, print "
		"the\n"
		"                       hidden state's shape, resume unchanged\n"
		"      --temperature T  0 (default): greedy\n"
		"      --top-k K        keep the K most likely (0: all)\n"
		"      --top-p P        then the fewest reaching P, in (0, 1]\n"
		"      --seed S         the sampling stream (default 0)\n"
		"      --logits FILE    write the f32 logits after the prompt "
		"and after\n"
		"                       each token: N + 1 rows of the "
		"vocabulary's size\n"
		"      --hold SECONDS   model info: keep it open that long\n"
		"  -h, --help           print this and exit\n"
		"  -V, --version        print the version and exit\n\n"
		"Exit status: 0 success, 1 failure, 2 usage.\n");
}

static int parse_float(const char *s, float *v)
{
	char *end;

	errno = 0;
	*v = strtof(s, &end);
	return errno || *end || end == s || !isfinite(*v) ? -EINVAL : 0;
}

/* "1,2,3" into @out: how many, or -EINVAL. */
static int parse_tokens(const char *s, int32_t *out, int max)
{
	int n = 0;

	while (*s) {
		uint64_t v;
		char num[16];
		size_t len = strcspn(s, ",");

		if (!len || len >= sizeof(num) || n == max)
			return -EINVAL;
		memcpy(num, s, len);
		num[len] = 0;
		if (parse_u64(num, INT32_MAX, &v))
			return -EINVAL;
		out[n++] = (int32_t)v;
		s += len;
		if (*s == ',' && !*++s)
			return -EINVAL;
	}
	return n ? n : -EINVAL;
}

static const char *dtype_name(uint32_t d)
{
	static const char *const names[] = { "?",   "f32", "f16", "bf16",
					     "i32", "i64", "u8" };

	return d < ARRAY_SIZE(names) ? names[d] : "?";
}

static int open_all(const struct args *a, struct djinn_conn **conn,
		    struct djinn_session **s, struct djinn_model **m)
{
	int ret;

	ret = djinn_connect(a->addr, conn);
	if (ret)
		return fail(ret, "cannot connect to djinnd");
	ret = djinn_session_open(*conn, NULL, s);
	if (ret) {
		fail(ret, "cannot open a session");
		djinn_disconnect(*conn);
		return 1;
	}
	if (a->upload)
		ret = djinn_model_upload(*s, a->upload, m);
	else
		ret = djinn_model_open(*s, a->model, m);
	if (ret) {
		fail(ret, a->upload ? "cannot upload the model" :
				      "cannot open the model");
		djinn_session_close(*s);
		djinn_disconnect(*conn);
		return 1;
	}
	return 0;
}

/* Print a pause, then resume until done: the step's result, or <0. */
static int run_pauses(struct djinn_ctx *c, int ret, struct djinn_step *st)
{
	while (ret >= 0 && st->state == DJINN_CTX_PAUSED) {
		const struct djinn_tensor_desc *d =
			djinn_result_desc(st->hidden);

		printf("paused after layer %u: hidden (%" PRIu64 ", %" PRIu64
		       ") %s\n",
		       st->layer, (uint64_t)d->dims[0], (uint64_t)d->dims[1],
		       dtype_name(d->dtype));
		ret = djinn_ctx_resume(c, NULL, st);
	}
	return ret;
}

/*
 * Append step @st's logits, (1, @vocab) f32, to @f and release them on
 * the daemon: 0, or the exit status 1 after a message.
 */
static int put_logits(struct djinn_step *st, uint32_t vocab, float *row,
		      FILE *f, const char *path)
{
	const struct djinn_tensor_desc *d;
	int ret;

	if (!st->logits) {
		fprintf(stderr, "djinn: generate: the step gave no logits\n");
		return 1;
	}
	d = djinn_result_desc(st->logits);
	if (d->dtype != DJINN_DTYPE_F32 || d->ndim != 2 || d->dims[0] != 1 ||
	    d->dims[1] != vocab) {
		djinn_result_release(st->logits);
		fprintf(stderr,
			"djinn: generate: the logits are not (1, %u) f32\n",
			vocab);
		return 1;
	}
	ret = djinn_result_read(st->logits, 0, (uint64_t)vocab * sizeof(*row),
				row);
	djinn_result_release(st->logits);
	if (ret)
		return fail(ret, "cannot read the logits");
	if (fwrite(row, sizeof(*row), vocab, f) != vocab) {
		fprintf(stderr, "djinn: generate: cannot write %s: %s\n", path,
			strerror(errno));
		return 1;
	}
	return 0;
}

/* Decode @a->n tokens into @out: with --logits one call a token, each
 * step's logits written to @lf. The tokens decoded, or -1 after a
 * message. */
static int decode_all(const struct args *a, struct djinn_ctx *c,
		      const struct djinn_step_opts *opts, int32_t *out,
		      uint32_t vocab, float *row, FILE *lf)
{
	struct djinn_step st;
	int ret;

	if (!lf) {
		ret = djinn_ctx_decode(c, a->n, &a->sp, out, opts, &st);
		ret = run_pauses(c, ret, &st);
		if (ret < 0) {
			fail(ret, NULL);
			return -1;
		}
		return ret;
	}
	for (uint32_t i = 0; i < a->n; i++) {
		ret = djinn_ctx_decode(c, 1, &a->sp, out + i, opts, &st);
		ret = run_pauses(c, ret, &st);
		if (ret < 0) {
			fail(ret, NULL);
			return -1;
		}
		if (put_logits(&st, vocab, row, lf, a->logits))
			return -1;
	}
	return (int)a->n;
}

static int do_generate(const struct args *a)
{
	struct djinn_step_opts opts = { .logits = a->logits != NULL };
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_model_info mi;
	struct djinn_ctx *c = NULL;
	struct djinn_step st;
	int32_t prompt[MAX_PROMPT], *out;
	float *row = NULL;
	FILE *lf = NULL;
	int np, ret, rc = 1;

	np = parse_tokens(a->tokens, prompt, MAX_PROMPT);
	if (np < 0)
		return usage_error("generate: bad token list '%s'", a->tokens);
	out = calloc(a->n, sizeof(*out));
	if (!out)
		return fail(-ENOMEM, "no memory for the tokens");
	if (a->logits) {
		lf = fopen(a->logits, "wb");
		if (!lf) {
			fprintf(stderr, "djinn: generate: cannot open %s: %s\n",
				a->logits, strerror(errno));
			free(out);
			return 1;
		}
	}
	if (a->break_at >= 0)
		opts.break_layer = DJINN_BREAK_AFTER(a->break_at);
	if (open_all(a, &conn, &s, &m))
		goto out_files;
	djinn_model_info(m, &mi);
	if (lf) {
		row = calloc(mi.vocab, sizeof(*row));
		if (!row) {
			fail(-ENOMEM, "no memory for the logits");
			goto out;
		}
	}
	/* room for exactly the prompt and the tokens: a model that cannot
	 * hold them refuses here, saying why */
	ret = djinn_ctx_new(m, (uint32_t)np + a->n, &c);
	if (ret) {
		fail(ret, "cannot make a context");
		goto out;
	}
	ret = djinn_ctx_prefill(c, prompt, (uint32_t)np, &opts, &st);
	ret = run_pauses(c, ret, &st);
	if (ret < 0) {
		fail(ret, NULL);
		goto out;
	}
	if (lf && put_logits(&st, mi.vocab, row, lf, a->logits))
		goto out;
	ret = decode_all(a, c, &opts, out, mi.vocab, row, lf);
	if (ret < 0)
		goto out;
	for (int i = 0; i < ret; i++)
		printf("%s%d", i ? "," : "", out[i]);
	printf("\n");
	rc = 0;
out:
	djinn_ctx_free(c);
	djinn_model_close(m);
	djinn_session_close(s);
	djinn_disconnect(conn);
out_files:
	if (lf && fclose(lf) && !rc) {
		fprintf(stderr, "djinn: generate: cannot write %s: %s\n",
			a->logits, strerror(errno));
		rc = 1;
	}
	free(row);
	free(out);
	if (!rc && (fflush(stdout) || ferror(stdout))) {
		fprintf(stderr, "djinn: generate: cannot write the output\n");
		rc = 1;
	}
	return rc;
}

static int do_model_info(const struct args *a)
{
	static const char *const archs[] = {
		[DJINN_ARCH_GPT2] = "gpt2",	  [DJINN_ARCH_LLAMA] = "llama",
		[DJINN_ARCH_QWEN2] = "qwen2",	  [DJINN_ARCH_QWEN3] = "qwen3",
		[DJINN_ARCH_MISTRAL] = "mistral",
	};
	struct djinn_conn *conn;
	struct djinn_session *s;
	struct djinn_model *m;
	struct djinn_model_info mi;
	int rc = 0;

	if (open_all(a, &conn, &s, &m))
		return 1;
	djinn_model_info(m, &mi);
	printf("name:        %s\n", mi.name);
	printf("arch:        %s\n",
	       mi.arch < ARRAY_SIZE(archs) && archs[mi.arch] ? archs[mi.arch] :
							       "?");
	printf("dtype:       %s\n", dtype_name(mi.dtype));
	printf("vocab:       %u\n", mi.vocab);
	printf("layers:      %u\n", mi.n_layer);
	printf("resident:    %u\n", mi.resident);
	printf("hidden:      %u\n", mi.hidden);
	printf("heads:       %u (%u key/value)\n", mi.n_head, mi.n_kv_head);
	printf("max tokens:  %u\n", mi.max_tokens);
	printf("bytes:       %" PRIu64 "\n", mi.bytes);
	printf("weights:     %" PRIu64 "\n", mi.weights);
	printf("ring:        %" PRIu64 "\n", mi.ring);
	printf("fingerprint: ");
	for (int i = 0; i < DJINN_FP_LEN; i++)
		printf("%02x", mi.fp[i]);
	printf("\n");
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "djinn: model info: cannot write the output\n");
		rc = 1;
	}
	for (unsigned int i = 0; i < a->hold; i++)
		sleep(1); /* libdjinn renews the lease meanwhile */
	djinn_model_close(m);
	djinn_session_close(s);
	djinn_disconnect(conn);
	return rc;
}

int main(int argc, char **argv)
{
	enum {
		OPT_TEMP = 256,
		OPT_TOPK,
		OPT_TOPP,
		OPT_SEED,
		OPT_HOLD,
		OPT_LOGITS,
		OPT_UPLOAD,
	};
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "model", required_argument, NULL, 'm' },
		{ "tokens", required_argument, NULL, 't' },
		{ "count", required_argument, NULL, 'n' },
		{ "break-at", required_argument, NULL, 'b' },
		{ "temperature", required_argument, NULL, OPT_TEMP },
		{ "top-k", required_argument, NULL, OPT_TOPK },
		{ "top-p", required_argument, NULL, OPT_TOPP },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "hold", required_argument, NULL, OPT_HOLD },
		{ "logits", required_argument, NULL, OPT_LOGITS },
		{ "upload", required_argument, NULL, OPT_UPLOAD },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct args a = { .n = 16, .break_at = -1 };
	char **words;
	int c, nr_words;
	uint64_t v;

	while ((c = getopt_long(argc, argv, "a:m:t:n:b:hV", opts, NULL)) !=
	       -1) {
		switch (c) {
		case 'a':
			a.addr = optarg;
			break;
		case 'm':
			a.model = optarg;
			break;
		case 't':
			a.tokens = optarg;
			break;
		case 'n':
			if (parse_u64(optarg, DJINN_MAX_STEP_TOKENS, &v) || !v)
				return usage_error("bad count '%s'", optarg);
			a.n = (uint32_t)v;
			break;
		case 'b':
			if (parse_u64(optarg, 65535, &v))
				return usage_error("bad layer '%s'", optarg);
			a.break_at = (int)v;
			break;
		case OPT_TEMP:
			if (parse_float(optarg, &a.sp.temperature) ||
			    a.sp.temperature < 0)
				return usage_error("bad temperature '%s'",
						   optarg);
			break;
		case OPT_TOPK:
			if (parse_u64(optarg, UINT32_MAX, &v))
				return usage_error("bad top-k '%s'", optarg);
			a.sp.top_k = (uint32_t)v;
			break;
		case OPT_TOPP:
			if (parse_float(optarg, &a.sp.top_p) ||
			    !(a.sp.top_p > 0 && a.sp.top_p <= 1))
				return usage_error("bad top-p '%s'", optarg);
			break;
		case OPT_SEED:
			if (parse_u64(optarg, UINT64_MAX, &v))
				return usage_error("bad seed '%s'", optarg);
			a.sp.seed = v;
			break;
		case OPT_HOLD:
			if (parse_u64(optarg, 86400, &v))
				return usage_error("bad --hold '%s'", optarg);
			a.hold = (unsigned int)v;
			break;
		case OPT_LOGITS:
			a.logits = optarg;
			break;
		case OPT_UPLOAD:
			a.upload = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("djinn %s (protocol %d)\n", DJINN_TOOL_VERSION,
			       DJINN_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	words = argv + optind;
	nr_words = argc - optind;
	if (!nr_words)
		return usage_error("no command given");
	if (!strcmp(words[0], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(words[0], "generate")) {
		cmd_name = "generate";
		if (nr_words > 1)
			return usage_error("generate: unexpected argument '%s'",
					   words[1]);
		if (!a.model == !a.upload || !a.tokens)
			return usage_error("generate: needs --tokens and one "
					   "of --model and --upload");
		return do_generate(&a);
	}
	if (!strcmp(words[0], "model")) {
		cmd_name = "model info";
		if (nr_words < 2 || strcmp(words[1], "info"))
			return usage_error("model: the command is 'info'");
		if (nr_words != 3)
			return usage_error("model info: %s",
					   nr_words < 3 ? "missing NAME" :
							  "one NAME only");
		if (a.upload || a.logits)
			return usage_error("model info: --upload and --logits "
					   "are generate's");
		a.model = words[2];
		return do_model_info(&a);
	}
	return usage_error("unknown command '%s'", words[0]);
}
