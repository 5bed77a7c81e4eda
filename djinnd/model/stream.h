/* SPDX-License-Identifier: MIT */
/*
 * Streamed models (issue 15: models larger than the device): the part of
 * a model that does not stay on the device, and the passes that run
 * steps over it.
 *
 * A streamed model keeps layers 0 .. resident - 1 in its text entry with
 * the embeddings and the head; layers resident .. n_layer - 1 live in
 * host memory (the provider's host_alloc(): pinned on a GPU, so copies
 * run at the link's speed), laid out as in the text entry, and go
 * through a layer ring (ring.h) in a text area of the device at every
 * step that needs them.
 *
 * Passes (model_pass_layers()): the steps of several contexts of one
 * model run together, one graph per stretch of layers for all of them,
 * so each weight is read once for every context of the pass, and on a
 * streamed model each layer copied in serves every one. Who joins a pass
 * is the scheduler's choice (Documentation/sched.rst, "Passes"); a pass
 * runs on the thread that calls it. A model wholly on the device runs
 * its passes the same way, with no ring. A pass takes at most
 * FWD_MAX_SEQ jobs.
 */
#ifndef DJINN_MODEL_STREAM_H
#define DJINN_MODEL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model_config.h"
#include "model/ring.h"
#include "vmu/vmu.h"

struct model_stream;
struct pass_job;

/*
 * Run layers [@l0, @l1) for the @n jobs @jobs, as one graph, the
 * weights of layer @l0 at device address @lbase when it is streamed (then
 * @l1 is @l0 + 1), else (0) in the text entry. Sets each job's @ret.
 */
typedef void (*pass_layer_fn)(struct pass_job **jobs, unsigned int n,
			      uint32_t l0, uint32_t l1, uint64_t lbase);

/*
 * struct pass_job - one context's step (or part of one) in a pass
 * @l0, @l1: the layers it runs, [l0, l1)
 * @fn:      runs them (the same function for every job of a model)
 * @ret:     out: 0 or the first error of its layers
 */
struct pass_job {
	uint32_t l0, l1;
	pass_layer_fn fn;
	int ret;
};

/*
 * The streamed part of a model of layout @L and configuration @c whose
 * first @resident layers are in its text entry: the other layers' bytes
 * copied, from @host when it is not NULL (blob bytes from layer
 * @resident's start on) else out of @L's tensors (the files may go after
 * this), and a ring of @ring_bytes (at least the largest streamed layer)
 * in a text area of @v. 0, or -ENOMEM / -E2BIG with need and
 * availability in @msg.
 */
int model_stream_create(struct vmu *v, const struct model_layout *L,
			const struct model_config *c, uint32_t resident,
			uint64_t ring_bytes, const void *host,
			struct model_stream **out, char *msg, size_t msglen);
/* The streamed layers' bytes in host memory (blob bytes from the first
 * streamed layer's start on); no pass may be running. */
const void *model_stream_host(const struct model_stream *st);
/* No pass may be running. */
void model_stream_destroy(struct model_stream *st);

/*
 * Run the @n jobs @b (at most FWD_MAX_SEQ, of one model) as one pass on
 * this thread: over streamed model @st, one pass at a time per model,
 * or, @st NULL, a model wholly on the device. Sets each job's @ret (an
 * empty range of layers: -EINVAL).
 */
void model_pass_layers(struct model_stream *st, struct pass_job **b,
		       unsigned int n);

/*
 * struct model_stream_stats - what a streamed model has done
 * @passes, @jobs: passes run and the jobs they ran (jobs / passes: the
 *         mean batch); @max_batch the largest
 * @pass_ns: time in passes
 * @ring:  the copy lane's figures (ring.h)
 */
struct model_stream_stats {
	uint64_t passes, jobs, max_batch, pass_ns;
	struct ring_stats ring;
};
void model_stream_stats(struct model_stream *st,
			struct model_stream_stats *out);

#endif /* DJINN_MODEL_STREAM_H */
