// SPDX-License-Identifier: MIT
/*
 * Running one graph: plan, admit, run. See exec.h.
 *
 * The stack is bump-allocated and reset when the graph ends, so the plan
 * is simple: every intermediate gets its own aligned slot, and the stack
 * peak is their sum. That wastes nothing by fragmentation; reusing dead
 * intermediates' slots (liveness) would lower the peak and is left for
 * when a workload shows it matters.
 *
 * Views: a RESHAPE, and a SLICE of contiguous bytes (every dim before
 * its axis 1), is its input's bytes under another desc. Such a node that
 * is not a graph output takes no slot and runs nothing: its value is its
 * input's address (plus the slice's offset). Nothing writes a node's
 * input and every value lives until the graph ends, so sharing bytes is
 * safe. A transformer's reshapes around attention, and a decode step's
 * q, k, v slices of one row, cost nothing then.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "graph/run.h"

static uint64_t desc_bytes(const struct djinn_tensor_desc *d)
{
	uint64_t elems, bytes;

	return djinn_desc_check(d, &elems, &bytes) ? 0 : bytes;
}

/* Whether node @i's result can be its input's bytes (see the top). */
static bool is_view(const struct djinn_node *node,
		    const struct djinn_tensor_desc *d)
{
	int axis;

	if (node->op == DJINN_GOP_RESHAPE)
		return true;
	if (node->op != DJINN_GOP_SLICE)
		return false;
	/* graph.c checked the axis; outer dims are the input's too */
	axis = node->params.axis.axis;
	axis += axis < 0 ? d->ndim : 0;
	for (int k = 0; k < axis; k++)
		if (d->dims[k] != 1)
			return false;
	return true;
}

/* The byte offset of view node @node's result in its input @x. */
static uint64_t view_offset(const struct djinn_node *node,
			    const struct djinn_tensor_desc *x)
{
	const struct djinn_p_axis *p = &node->params.axis;
	int axis = p->axis + (p->axis < 0 ? x->ndim : 0);
	int64_t start = p->start;

	if (node->op != DJINN_GOP_SLICE)
		return 0;
	start += start < 0 ? (int64_t)x->dims[axis] : 0;
	return (uint64_t)start * djinn_desc_elems_from(x, axis + 1) *
	       djinn_dtype_size(x->dtype);
}

void graph_plan_free(struct graph_plan *plan)
{
	free(plan->output_of);
	free(plan->stack_off);
	plan->output_of = NULL;
	plan->stack_off = NULL;
}

int graph_plan(const struct djinn_graph_view *view,
	       const struct djinn_tensor_desc *descs,
	       const struct graph_place *place, struct vmu *v,
	       struct graph_plan *plan)
{
	uint32_t n = view->g->nr_nodes;

	memset(plan, 0, sizeof(*plan));
	plan->output_of = malloc(n * sizeof(*plan->output_of));
	plan->stack_off = calloc(n, sizeof(*plan->stack_off));
	if (!plan->output_of || !plan->stack_off) {
		graph_plan_free(plan);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		plan->output_of[i] = -1;
	for (uint32_t k = 0; k < view->g->nr_outputs; k++) {
		uint32_t node = view->outputs[k];

		if (place && place[k].host)
			continue; /* on the stack, then to the host */
		plan->output_of[node] = (int32_t)k;
		if (!place || !place[k].into)
			plan->out_bytes +=
				vmu_round(v, desc_bytes(&descs[node]));
	}
	for (uint32_t i = 0; i < n; i++) {
		if (plan->output_of[i] >= 0)
			continue;
		if (is_view(&view->nodes[i], &descs[i])) {
			plan->stack_off[i] = GRAPH_VIEW;
			continue;
		}
		plan->stack_off[i] = plan->stack_peak;
		plan->stack_peak += (desc_bytes(&descs[i]) + GRAPH_ALIGN - 1) &
				    ~(uint64_t)(GRAPH_ALIGN - 1);
	}
	return 0;
}

/* Destroy the first @n output regions made for a graph that failed
 * (0: an output placed elsewhere). */
static void drop_regions(struct vmu_session *const *s, struct graph_result *res,
			 uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		if (!res->regions[k])
			continue;
		vmu_region_unpin(s[k], res->regions[k]);
		vmu_region_destroy(s[k], res->regions[k]);
		res->regions[k] = 0;
	}
}

/* Make and pin the output regions; fills @addr[nr_outputs] (an output
 * placed elsewhere: its address, or 0 for one copied to the host). */
static int make_outputs(struct vmu_session *const *s,
			const struct djinn_graph_view *view,
			const struct djinn_tensor_desc *descs,
			const struct graph_place *place, struct vmu_resv *resv,
			struct graph_result *res, uint64_t *addr, char *msg,
			size_t msglen)
{
	uint32_t k;
	int ret = 0;

	for (k = 0; k < view->g->nr_outputs; k++) {
		uint64_t bytes = desc_bytes(&descs[view->outputs[k]]);
		struct vmu_region_info info;

		if (place && (place[k].into || place[k].host)) {
			res->regions[k] = 0;
			addr[k] = place[k].into;
			continue;
		}
		ret = vmu_region_create(s[k], bytes, &res->regions[k]);
		if (ret)
			break;
		ret = vmu_region_resize(s[k], res->regions[k], bytes, resv);
		if (!ret)
			ret = vmu_region_pin(s[k], res->regions[k], resv,
					     &info);
		if (ret) {
			vmu_region_destroy(s[k], res->regions[k]);
			res->regions[k] = 0;
			break;
		}
		addr[k] = info.addr;
	}
	if (ret) {
		snprintf(msg, msglen,
			 "output %u: cannot allocate %llu bytes: %s", k,
			 (unsigned long long)desc_bytes(
				 &descs[view->outputs[k]]),
			 ret == -EDQUOT ? "over the tenant's quota of device "
					  "memory" :
					  strerror(-ret));
		drop_regions(s, res, k);
	}
	return ret;
}

/* The value a node input names: a graph input or an earlier node. */
static void value(const struct djinn_graph_view *view,
		  const struct dj_tensor *inputs, const struct dj_tensor *nodes,
		  uint32_t idx, struct dj_tensor *t)
{
	if (idx < view->g->nr_inputs)
		*t = inputs[idx];
	else
		*t = nodes[idx - view->g->nr_inputs];
}

/* A KERNEL node: its module's fingerprint, and the backend's hook. */
static int run_kernel(struct backend *b, const struct djinn_graph_view *view,
		      const uint8_t *const *in_fp,
		      const struct djinn_node *node, const struct dj_tensor *in,
		      const struct dj_tensor *out, char *msg, size_t msglen)
{
	uint32_t m = node->inputs[0];

	if (!b->ops->run_kernel) {
		snprintf(msg, msglen, BACKEND_NO_KERNELS, b->name);
		return -EOPNOTSUPP;
	}
	if (!in_fp || m >= view->g->nr_inputs || !in_fp[m]) {
		snprintf(msg, msglen, "input 0 is not a module");
		return -EINVAL;
	}
	return b->ops->run_kernel(b, node, in_fp[m], in, out, msg, msglen);
}

/* The outputs @place sends to the host, queued to be copied there from
 * the values the graph leaves (on the stack, or a view of an input) by
 * the time the device is waited for. */
static int copy_to_host(struct backend *b, const struct djinn_graph_view *view,
			const struct graph_place *place,
			const struct djinn_tensor_desc *descs,
			const struct dj_tensor *vals, char *msg, size_t msglen)
{
	for (uint32_t k = 0; place && k < view->g->nr_outputs; k++) {
		uint32_t node = view->outputs[k];
		char why[128] = "";
		int ret;

		if (!place[k].host)
			continue;
		ret = b->ops->copy_out(b, place[k].host, vals[node].addr,
				       desc_bytes(&descs[node]), why,
				       sizeof(why));
		if (ret)
			return errmsg(msg, msglen, ret, "output %u to host: %s",
				      k, why[0] ? why : strerror(-ret));
	}
	return 0;
}

/*
 * Run the nodes: give each to the backend in order, then wait for the
 * device. This is the one place in djinnd that calls run_node() and
 * run_kernel(), and it returns only after sync(), on every path: a node
 * that fails (a kernel its module lacks, bad kernel parameters, a
 * shared-memory limit, a cuBLAS error) stops the loop but does not undo
 * the nodes enqueued before it, whose kernels may still be running on a
 * GPU's stream, reading the inputs and writing the stack and the
 * outputs. So when this returns the device is done with all of them,
 * and the caller may release what it made for the graph (the stack, the
 * output regions) and its inputs' pins. The first error is returned,
 * with its message; a failed sync() after nodes that all went in is
 * the error then.
 */
static int run_nodes(struct backend *b, const struct djinn_graph_view *view,
		     const struct dj_tensor *inputs,
		     const uint8_t *const *in_fp,
		     const struct djinn_tensor_desc *descs,
		     const struct graph_plan *plan, uint64_t base,
		     const uint64_t *out_addr, const struct graph_place *place,
		     struct dj_tensor *vals, char *msg, size_t msglen)
{
	int ret = 0, err;

	for (uint32_t i = 0; i < view->g->nr_nodes; i++) {
		const struct djinn_node *node = &view->nodes[i];
		struct dj_tensor in[DJINN_MAX_NODE_INPUTS];

		for (uint32_t j = 0; j < node->nr_inputs; j++)
			value(view, inputs, vals, node->inputs[j], &in[j]);
		vals[i].desc = descs[i];
		if (plan->stack_off[i] == GRAPH_VIEW) {
			vals[i].addr =
				in[0].addr + view_offset(node, &in[0].desc);
			continue;
		}
		vals[i].addr = plan->output_of[i] >= 0 ?
				       out_addr[plan->output_of[i]] :
				       base + plan->stack_off[i];
		if (node->op == DJINN_GOP_KERNEL)
			ret = run_kernel(b, view, in_fp, node, in, &vals[i],
					 msg, msglen);
		else
			ret = b->ops->run_node(b, node, in, &vals[i], msg,
					       msglen);
		if (ret) {
			char why[128];

			snprintf(why, sizeof(why), "%s", msg);
			snprintf(msg, msglen, "node %u (%s): %s", i,
				 djinn_op_name(node->op), why);
			break;
		}
	}
	if (!ret)
		ret = copy_to_host(b, view, place, descs, vals, msg, msglen);
	/* Whatever happened above: see the comment. */
	err = b->ops->sync(b);
	if (ret)
		return ret;
	if (err) {
		char why[128] = "";

		if (b->ops->fault_info)
			b->ops->fault_info(b, why, sizeof(why));
		snprintf(msg, msglen, "waiting for the device: %s",
			 why[0] ? why : strerror(-err));
	}
	return err;
}

int graph_run(struct vmu *v, struct vmu_stack *st, struct backend *b,
	      struct vmu_session *s, const struct djinn_graph_view *view,
	      const struct dj_tensor *inputs,
	      const struct djinn_tensor_desc *descs, struct graph_result *res,
	      char *msg, size_t msglen)
{
	return graph_run_kernels(v, st, b, s, view, inputs, NULL, descs, res,
				 msg, msglen);
}

/*
 * Inputs from host memory (dj_tensor's @host: djinnd's own graphs, the
 * model runtime's token ids, positions and varlen tables): their bytes,
 * each GRAPH_ALIGN-aligned, go in one block on the stack after the
 * intermediates, admitted with them, and reach the device in one copy
 * before the first node. Each keeps @host for a node that reads it there.
 */
static uint64_t staged_bytes(const struct djinn_graph_view *view,
			     const struct dj_tensor *inputs)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < view->g->nr_inputs; i++)
		if (inputs[i].host)
			n += (desc_bytes(&inputs[i].desc) + GRAPH_ALIGN - 1) &
			     ~(uint64_t)(GRAPH_ALIGN - 1);
	return n;
}

/* The inputs with the staged ones' addresses in @at's block of @bytes
 * (*@out, malloc'd), the block queued to be copied to the device before
 * the first node. */
static int stage_inputs(struct backend *b, const struct djinn_graph_view *view,
			const struct dj_tensor *inputs, uint64_t at,
			uint64_t bytes, struct dj_tensor **out, char *msg,
			size_t msglen)
{
	uint32_t n = view->g->nr_inputs;
	char why[128] = "";
	struct dj_tensor *in = malloc(n * sizeof(*in));
	uint8_t *buf = calloc(1, bytes);
	uint64_t off = 0;
	int ret;

	if (!in || !buf) {
		free(in);
		free(buf);
		return errmsg(msg, msglen, -ENOMEM, "no memory for the inputs");
	}
	memcpy(in, inputs, n * sizeof(*in));
	for (uint32_t i = 0; i < n; i++) {
		uint64_t len = desc_bytes(&in[i].desc);

		if (!in[i].host)
			continue;
		memcpy(buf + off, in[i].host, len);
		in[i].addr = at + off;
		off += (len + GRAPH_ALIGN - 1) & ~(uint64_t)(GRAPH_ALIGN - 1);
	}
	ret = b->ops->copy_in(b, at, buf, bytes, why, sizeof(why));
	free(buf);
	if (ret) {
		free(in);
		return errmsg(msg, msglen, ret, "copying the inputs: %s",
			      why[0] ? why : strerror(-ret));
	}
	*out = in;
	return 0;
}

static int
run_graph(struct vmu *v, struct vmu_stack *st, struct backend *b,
	  struct vmu_session *const *s, const struct djinn_graph_view *view,
	  const struct dj_tensor *inputs, const uint8_t *const *in_fp,
	  const struct graph_place *place,
	  const struct djinn_tensor_desc *descs, const struct graph_plan *kept,
	  struct graph_result *res, char *msg, size_t msglen)
{
	uint32_t n = view->g->nr_nodes, nout = view->g->nr_outputs;
	uint64_t out_addr[DJINN_MAX_GRAPH_OUTPUTS], base, t0, staged, at;
	struct dj_tensor *vals, *in = NULL;
	struct graph_plan plan;
	struct vmu_resv resv;
	int ret;

	memset(res, 0, sizeof(*res));
	if (kept) { /* its arrays are the caller's: not freed below */
		plan = *kept;
	} else {
		ret = graph_plan(view, descs, place, v, &plan);
		if (ret)
			return ret;
	}
	staged = staged_bytes(view, inputs);
	at = plan.stack_peak;
	plan.stack_peak += staged;
	vals = calloc(n, sizeof(*vals));
	if (!vals) {
		ret = -ENOMEM;
		goto out_plan;
	}
	/* The stack is claimed and admitted with the outputs, so reclaim
	 * cannot trim the backing the plan counted on. */
	base = 0;
	if (plan.stack_peak) {
		ret = vmu_admit_stack(v, plan.out_bytes, st, plan.stack_peak,
				      &resv, msg, msglen);
		if (ret)
			goto out_vals;
		/* One bump for all the intermediates: offsets are planned. */
		ret = vmu_stack_alloc(st, plan.stack_peak, GRAPH_ALIGN, &base);
		if (ret)
			goto out_stack;
	} else {
		ret = vmu_admit(v, plan.out_bytes, &resv, msg, msglen);
		if (ret)
			goto out_vals;
	}
	ret = make_outputs(s, view, descs, place, &resv, res, out_addr, msg,
			   msglen);
	if (ret)
		goto out_stack;
	if (staged) {
		ret = stage_inputs(b, view, inputs, base + at, staged, &in, msg,
				   msglen);
		if (ret) {
			(void)b->ops->sync(b); /* nothing may be left queued */
			drop_regions(s, res, nout);
			goto out_stack;
		}
		inputs = in;
	}

	/* Only the staged inputs' copy is enqueued before this, and the
	 * device is done with everything after it: run_nodes() syncs on
	 * every path. */
	t0 = mono_ns();
	ret = run_nodes(b, view, inputs, in_fp, descs, &plan, base, out_addr,
			place, vals, msg, msglen);
	res->run_ns = mono_ns() - t0;
	res->peak_bytes = plan.out_bytes + plan.stack_peak;
	if (ret)
		drop_regions(s, res, nout);
	else
		for (uint32_t k = 0; k < nout; k++)
			if (res->regions[k])
				vmu_region_unpin(s[k], res->regions[k]);
out_stack:
	free(in);
	if (plan.stack_peak)
		vmu_stack_end(st);
	vmu_resv_release(&resv);
out_vals:
	free(vals);
out_plan:
	if (!kept)
		graph_plan_free(&plan);
	return ret;
}

/* Every output of a graph of one session is that session's. */
static struct vmu_session **owners_of(struct vmu_session *s, uint32_t nout)
{
	struct vmu_session **o = calloc(nout ? nout : 1, sizeof(*o));

	for (uint32_t k = 0; o && k < nout; k++)
		o[k] = s;
	return o;
}

int graph_run_kernels(struct vmu *v, struct vmu_stack *st, struct backend *b,
		      struct vmu_session *s,
		      const struct djinn_graph_view *view,
		      const struct dj_tensor *inputs,
		      const uint8_t *const *in_fp,
		      const struct djinn_tensor_desc *descs,
		      struct graph_result *res, char *msg, size_t msglen)
{
	struct vmu_session **o = owners_of(s, view->g->nr_outputs);
	int ret;

	if (!o)
		return -ENOMEM;
	ret = run_graph(v, st, b, o, view, inputs, in_fp, NULL, descs, NULL,
			res, msg, msglen);
	free(o);
	return ret;
}

int graph_run_owned(struct vmu *v, struct vmu_stack *st, struct backend *b,
		    struct vmu_session *const *owners,
		    const struct djinn_graph_view *view,
		    const struct dj_tensor *inputs,
		    const struct graph_place *place,
		    const struct djinn_tensor_desc *descs,
		    const struct graph_plan *plan, struct graph_result *res,
		    char *msg, size_t msglen)
{
	return run_graph(v, st, b, owners, view, inputs, NULL, place, descs,
			 plan, res, msg, msglen);
}
