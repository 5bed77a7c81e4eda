/* SPDX-License-Identifier: MIT */
/*
 * Graph validation and shape inference, shared by djinnd (which refuses
 * bad graphs before running anything) and libdjinn (whose result stubs
 * know their shape and dtype without a round trip).
 */
#ifndef DJINN_GRAPH_H
#define DJINN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

/* Bytes of one element of @dtype, 0 for an unknown dtype. */
size_t djinn_dtype_size(unsigned int dtype);
const char *djinn_dtype_name(unsigned int dtype);
const char *djinn_op_name(unsigned int op);

/* Elements and bytes of @d; -EINVAL for a bad desc (dtype, ndim, a dim
 * past ndim not zero), -E2BIG when the byte count overflows 2^63. */
int djinn_desc_check(const struct djinn_tensor_desc *d, uint64_t *elems,
		     uint64_t *bytes);

/*
 * struct djinn_graph_view - a GRAPH_SUBMIT payload, split into its arrays
 * (pointers into the payload, which stays the caller's).
 */
struct djinn_graph_view {
	const struct djinn_graph *g;
	const struct djinn_ref *inputs;
	const struct djinn_node *nodes;
	const uint32_t *outputs;
};

/*
 * Split a GRAPH_SUBMIT payload of @len bytes: counts within the limits
 * (-E2BIG), the length exactly what the counts imply (-EINVAL), reserved
 * fields zero. Does not look at the nodes. @msg gets a one-line reason.
 */
int djinn_graph_parse(const void *payload, uint64_t len,
		      struct djinn_graph_view *view, char *msg, size_t msglen);

/*
 * Check every node and infer its result's shape and dtype into
 * @out[nr_nodes], given the descs of the graph's inputs (@in[nr_inputs]).
 * Refuses, with the node's index, op and reason in @msg: an unknown op,
 * a wrong number of inputs, an input that is not an earlier value (a
 * cycle or a dangling reference), mismatched shapes or dtypes, bad
 * parameters (-EINVAL); results over the limits (-E2BIG). Outputs must
 * name nodes, each at most once.
 */
int djinn_graph_infer(const struct djinn_graph_view *view,
		      const struct djinn_tensor_desc *in,
		      struct djinn_tensor_desc *out, char *msg, size_t msglen);

#endif /* DJINN_GRAPH_H */
