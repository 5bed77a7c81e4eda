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
 * Passes: every step on a streamed model runs as a job of a pass, and
 * the jobs that are waiting when a pass starts run together, one graph
 * per layer for all of them, so each layer copied in serves every
 * context of the pass. The first job to arrive while no pass runs leads
 * the next one on its own thread; the others wait for it. A leader that
 * finds fewer jobs waiting than the last pass ran and left waiting (the
 * contexts decoding now) waits for the rest
 * before it starts, until they are there or for a quarter of the last
 * pass's time at most (50 ms at most), so that contexts decoding
 * together stay together: a context that stops decoding costs the others
 * that wait once. A pass takes at most FWD_MAX_SEQ jobs.
 */
#ifndef DJINN_MODEL_STREAM_H
#define DJINN_MODEL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "model/model_config.h"
#include "model/ring.h"
#include "vmu/vmu.h"

struct model_stream;
struct stream_job;

/*
 * Run layers [@l0, @l1) for the @n jobs @jobs, as one graph, the
 * weights of layer @l0 at device address @lbase when it is streamed (then
 * @l1 is @l0 + 1), else (0) in the text entry. Sets each job's @ret.
 */
typedef void (*stream_layer_fn)(struct stream_job **jobs, unsigned int n,
				uint32_t l0, uint32_t l1, uint64_t lbase);

/*
 * struct stream_job - one context's step (or part of one) in a pass
 * @l0, @l1: the layers it runs, [l0, l1)
 * @fn:      runs them (the same function for every job of a model)
 * @arg:     the caller's
 * @ret:     out: 0 or the first error of its layers
 */
struct stream_job {
	uint32_t l0, l1;
	stream_layer_fn fn;
	void *arg;
	int ret;
	/* private */
	struct list_head node;
	bool done;
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

/* Run @j in a pass, leading one if none runs: when it returns @j is
 * done and @j->ret says how. */
int model_stream_run(struct model_stream *st, struct stream_job *j);

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
