/* SPDX-License-Identifier: MIT */
/*
 * Running one graph on one device: planning, admission, execution.
 *
 * The caller (a service, or the model runtime) has parsed and inferred
 * the graph (lib/graph.h) and resolved its inputs to pinned device tensors. Here:
 *
 *   plan   every node's result goes either to the executor's stack (an
 *          intermediate, gone when the graph ends) or to a new data
 *          region of the session (a graph output, kept);
 *   admit  the peak need, sum of the outputs' granule-rounded sizes and
 *          what the stack must add, goes to vmu_admit() before anything
 *          is allocated: a graph that cannot fit is refused whole with
 *          -ENOMEM and the VMU's need/availability message;
 *   run    the nodes in order on the backend, drawing on the
 *          reservation, so nothing fails half-way for lack of memory.
 *
 * On any failure every region made for the graph is destroyed and the
 * stack is reset: a refused or failed graph leaves no trace. A graph
 * that reached the backend is drained first: the backend's sync() runs
 * after its last node on every path, a failed node's included, before
 * anything made for it is released, so no kernel of an earlier node can
 * still be using memory that is unmapped (backend.h, run_node()).
 */
#ifndef DJINN_GRAPH_RUN_H
#define DJINN_GRAPH_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "backend/backend.h"
#include "vmu/vmu.h"

/* Alignment of every intermediate on the stack. */
#define GRAPH_ALIGN 256

/*
 * struct graph_plan - where each node's result goes
 * @stack_peak: stack bytes the intermediates take, aligned
 * @out_bytes:  device bytes of the outputs, granule-rounded
 * @output_of:  per node, its index among the graph's outputs, or -1
 *              (an output copied to the host is planned as an
 *              intermediate)
 * @stack_off:  per node, its offset on the stack (intermediates only),
 *              or GRAPH_VIEW: the node's result is its input's bytes,
 *              seen through its own desc, and nothing runs
 */
#define GRAPH_VIEW UINT64_MAX

struct graph_plan {
	uint64_t stack_peak;
	uint64_t out_bytes;
	int32_t *output_of;
	uint64_t *stack_off;
};

/*
 * struct graph_place - where one output of djinnd's own graph goes
 * instead of a new data region (graph_run_owned())
 * @into: nonzero: written at this device address, in a pinned region
 *        its caller owns (a context's KV cache, past its rows)
 * @host: non-NULL: the bytes are copied here (backend_ops.copy_out(),
 *        queued behind the nodes, there by the graph's one sync());
 *        on the device they are an intermediate, on the stack
 * Both 0: a new region, as a client's graph's outputs.
 */
struct graph_place {
	uint64_t into;
	void *host;
};

/* Plan @view whose node results have the shapes @descs[nr_nodes]; the
 * outputs go to @place[nr_outputs] (NULL: all to new regions), their
 * sizes rounded to @v's granule. The plan's arrays are malloc'd;
 * graph_plan_free() frees them. */
int graph_plan(const struct djinn_graph_view *view,
	       const struct djinn_tensor_desc *descs,
	       const struct graph_place *place, struct vmu *v,
	       struct graph_plan *plan);
void graph_plan_free(struct graph_plan *plan);

/*
 * struct graph_result - what a graph left behind
 * @regions:    per graph output, the data region of @s holding it
 * @peak_bytes: planned peak (stack + outputs)
 * @run_ns:     time spent in the backend
 */
struct graph_result {
	uint64_t regions[DJINN_MAX_GRAPH_OUTPUTS];
	uint64_t peak_bytes;
	uint64_t run_ns;
};

/*
 * Run the graph @view for session @s on backend @b with stack @st.
 * @inputs[nr_inputs] are the graph's inputs, resident (pinned) on the
 * device, or (djinnd's own graphs: dj_tensor's @host) in host memory:
 * those are staged on the stack after the intermediates, admitted with
 * them, in one copy before the first node; @descs[nr_nodes] the
 * inferred shapes. On success the outputs
 * are new regions of @s, unpinned, listed in @res. Returns 0 or a
 * negative errno with a reason in @msg, and either way only once the
 * device is done with the graph: the caller may unpin @inputs then.
 */
int graph_run(struct vmu *v, struct vmu_stack *st, struct backend *b,
	      struct vmu_session *s, const struct djinn_graph_view *view,
	      const struct dj_tensor *inputs,
	      const struct djinn_tensor_desc *descs, struct graph_result *res,
	      char *msg, size_t msglen);

/*
 * As graph_run(), for graphs with client kernels: @in_fp[nr_inputs] has
 * the fingerprint of each input that is a client module (a text tensor
 * uploaded with DJINN_TENSOR_MODULE) and NULL for the others. A KERNEL
 * node goes to the backend's run_kernel(): -EOPNOTSUPP on a backend
 * without client kernels, -EINVAL if its input 0 is not a module.
 * graph_run() is this with no modules.
 */
int graph_run_kernels(struct vmu *v, struct vmu_stack *st, struct backend *b,
		      struct vmu_session *s,
		      const struct djinn_graph_view *view,
		      const struct dj_tensor *inputs,
		      const uint8_t *const *in_fp,
		      const struct djinn_tensor_desc *descs,
		      struct graph_result *res, char *msg, size_t msglen);

/*
 * As graph_run(), for djinnd's own graphs (the model runtime's, which
 * run the steps of several sessions at once): output k becomes a region
 * of @owners[k] instead of @s, or goes where @place[k] says (@place may
 * be NULL): such an output has no region (res->regions[k] is 0), and on
 * failure what was written at @into is unspecified. The graph's memory
 * is admitted as one, and on failure every output region is destroyed
 * as graph_run() does. @plan: NULL, or what graph_plan() made of this
 * view, descs and the same kinds of @place (region, @into or @host for
 * each output) on the same VMU, kept from an earlier run: it is used as
 * it is, not made again (the caller keeps it).
 */
int graph_run_owned(struct vmu *v, struct vmu_stack *st, struct backend *b,
		    struct vmu_session *const *owners,
		    const struct djinn_graph_view *view,
		    const struct dj_tensor *inputs,
		    const struct graph_place *place,
		    const struct djinn_tensor_desc *descs,
		    const struct graph_plan *plan, struct graph_result *res,
		    char *msg, size_t msglen);

#endif /* DJINN_GRAPH_RUN_H */
