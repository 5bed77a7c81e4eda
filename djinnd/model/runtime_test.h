/* SPDX-License-Identifier: MIT */
/*
 * What the tests look at inside a context (runtime.h is the runtime):
 * included by ctx.c, which defines it, and by the tests.
 */
#ifndef DJINN_MODEL_RUNTIME_TEST_H
#define DJINN_MODEL_RUNTIME_TEST_H

#include <stdint.h>

#include "model/runtime.h"

/* Forward graphs this process's contexts built and ran, ever (not
 * those too big to build). */
uint64_t model_ctx_graphs(void);
/* Nanoseconds those graphs (the ones that ran) spent outside the
 * backend's running of their nodes: building, checking and planning,
 * memory, staging, copies out: the host's part of a step. */
uint64_t model_ctx_host_ns(void);
/* Graphs of @h's model's steps found planned already, and planned
 * (struct fwd_plans), this process's ever. */
void model_plans_stats(const struct model_hold *h, uint64_t *kept,
		       uint64_t *planned);
/* Bytes of host memory the context keeps for its raw logits between
 * steps (one row, or 0). */
uint64_t model_ctx_raw_bytes(const struct model_ctx *c);
/* Steps whose logits @c took from the device into its own buffer, ever
 * (a decode's steps that sampled in the graph took none). */
uint64_t model_ctx_logits_kept(const struct model_ctx *c);

#endif /* DJINN_MODEL_RUNTIME_TEST_H */
