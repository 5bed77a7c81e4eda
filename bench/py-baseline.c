// SPDX-License-Identifier: MIT
/*
 * py-baseline: the C client's side of bench/python-bench.py. Each
 * function makes one libdjinn call and returns how long it took, timed
 * in C (CLOCK_MONOTONIC), or the call's negative errno; the benchmark
 * loads this library into the same process as the package and calls it
 * with the package's own connection, context and result, taking turns
 * call by call, so that both sides make the same calls on the same
 * objects under the same load, and the difference is the Python
 * layer's.
 *
 *   pyb_ping(conn)                djinn_conn_ping()
 *   pyb_decode(ctx, tok)          djinn_ctx_decode() of one greedy token
 *   pyb_read(result, buf, len)    djinn_result_read() of @len bytes
 *
 * Built as BUILD/bench/libpy-baseline.so (mk/python.mk).
 */
#include <stdint.h>

#include <djinn/djinn.h>

#include "clock.h"

int64_t pyb_ping(struct djinn_conn *c);
int64_t pyb_decode(struct djinn_ctx *ctx, int32_t *tok);
int64_t pyb_read(struct djinn_result *r, void *buf, uint64_t len);

static int64_t since(uint64_t t0, int ret)
{
	return ret < 0 ? ret : (int64_t)(mono_ns() - t0);
}

int64_t pyb_ping(struct djinn_conn *c)
{
	uint64_t t0 = mono_ns();

	return since(t0, djinn_conn_ping(c));
}

int64_t pyb_decode(struct djinn_ctx *ctx, int32_t *tok)
{
	uint64_t t0 = mono_ns();

	return since(t0, djinn_ctx_decode(ctx, 1, NULL, tok, NULL, NULL));
}

int64_t pyb_read(struct djinn_result *r, void *buf, uint64_t len)
{
	uint64_t t0 = mono_ns();

	return since(t0, djinn_result_read(r, 0, len, buf));
}
