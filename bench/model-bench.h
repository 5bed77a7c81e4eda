/* SPDX-License-Identifier: MIT */
/*
 * model-bench's two parts: the runtime in process (model-bench.c) and
 * --sessions, many sessions through a real djinnd (model-sessions.c).
 */
#ifndef DJINN_BENCH_MODEL_BENCH_H
#define DJINN_BENCH_MODEL_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "figure.h"

#define SESSIONS_MAX_N 16 /* values of --sessions */
#define SESSIONS_MAX_ROUNDS 32

/*
 * struct sessions_opt - what --sessions runs
 * @models, @model, @arch: CACHE/models, the model's directory and arch
 * @backend, @mem:  djinnd's backend and its device bytes
 * @python, @script, @threads, @no_torch: PyTorch's baseline
 * @prefill, @decode, @seed, @vocab: each session's prompt and tokens
 * @rounds:         rounds of each count, the median's figures kept
 * @n, @nr_n:       the session counts
 * @target_n, @target_x: from @target_n sessions on, the aggregate should
 *                  be @target_x times one session's
 */
struct sessions_opt {
	const char *models, *model, *arch, *backend;
	uint64_t mem;
	const char *python, *script;
	unsigned int threads;
	bool no_torch;
	unsigned int prefill, decode, rounds;
	uint64_t seed;
	uint32_t vocab;
	unsigned int n[SESSIONS_MAX_N], nr_n;
	unsigned int target_n;
	double target_x;
};

/* One round's figures: aggregate tokens/s, a session's time per token
 * (median and 99th percentile session), steps per pass. */
struct sessions_result {
	double tok_s, p50_ms, p99_ms, rows;
};

/* Run them (djinnd with batching on, then off, then PyTorch's batches),
 * each line through @emit with its session count. */
void sessions_bench(const struct sessions_opt *o,
		    void (*emit)(const struct fig *f, unsigned int sessions));

#endif /* DJINN_BENCH_MODEL_BENCH_H */
