/* SPDX-License-Identifier: MIT */
/*
 * Graph validation and shape inference, shared by djinnd (which refuses
 * bad graphs before running anything) and libdjinn (whose result stubs
 * know their shape and dtype without a round trip).
 */
#ifndef DJINN_GRAPH_H
#define DJINN_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

/* Bytes of one element of @dtype, 0 for an unknown dtype. */
size_t djinn_dtype_size(unsigned int dtype);
/* "f32", "bf16", ...; "matmul", "layernorm", ... (enum djinn_opcode);
 * static strings, "unknown" for a value out of the enum. */
const char *djinn_dtype_name(unsigned int dtype);
const char *djinn_op_name(unsigned int op);
/* Whether op @op takes @nr inputs (false for an op this tree lacks). */
bool djinn_op_takes(unsigned int op, unsigned int nr);
/* Whether @dtype is f32, f16 or bf16. */
bool djinn_dtype_is_float(unsigned int dtype);

/* Elements of @d from dim @from on (all of them from 0; a row's length
 * from ndim - 1), for a desc already checked. */
uint64_t djinn_desc_elems_from(const struct djinn_tensor_desc *d,
			       unsigned int from);
/* Whether @a and @b have the same dims (dtypes aside). */
bool djinn_desc_same_shape(const struct djinn_tensor_desc *a,
			   const struct djinn_tensor_desc *b);

/* Elements and bytes of @d (either pointer may be NULL); -EINVAL for a
 * bad desc (dtype, ndim, a dim past ndim not zero, reserved bytes),
 * -E2BIG when the byte count reaches 2^63. A zero dim is allowed (an
 * empty tensor, 0 elements and bytes), but the other dims must still fit:
 * the byte count is checked with zero dims counted as one, so that every
 * stride of an empty tensor is representable. */
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
 * (-E2BIG; zero nodes or outputs: -EINVAL), the length exactly what the
 * counts imply (-EINVAL), reserved fields, flags, the outputs' padding
 * and every input ref checked (-EINVAL). Does not look at the nodes or
 * at what the outputs name. @payload must be 8-byte aligned (-EINVAL
 * otherwise): @view points into it and reads its structs in place. On
 * failure @view is untouched. @msg (may be NULL) gets a one-line reason.
 * Allocates nothing.
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
 *
 * Strictness: reserved bytes, the unused slots of a node's inputs[] and
 * the params bytes its op does not read must be zero; phase is at most
 * DJINN_PHASE_TRAINING (the others are for signals). Empty tensors: a
 * graph input may have zero dims (its desc is valid), but a node refuses
 * an empty input (-EINVAL), so no kernel ever sees one and every result
 * has at least one element. A result is at most 2^40 bytes (-E2BIG).
 *
 * @view comes from djinn_graph_parse(). On failure @out is unspecified.
 * Allocates nothing.
 */
int djinn_graph_infer(const struct djinn_graph_view *view,
		      const struct djinn_tensor_desc *in,
		      struct djinn_tensor_desc *out, char *msg, size_t msglen);

/*
 * DJINN_ATTN_VARLEN, a layout of ATTENTION that only djinnd's own graphs
 * use (a pass of the model runtime, djinnd/model/forward.c): attention of
 * N contexts at once, each over its own KV cache. q (R, H, D), k (R, Hk,
 * D), v (R, Hk, D) -> (R, H, D), the rows of the N contexts stacked in
 * order; input 3 is the contexts' table, (N, DJINN_VARLEN_COLS) i64 in
 * host memory (struct dj_tensor's @host), a row per context: its new
 * rows T (>= 1, summing to R), its cached tokens P, the device address of
 * its cache (P, slots, Hk D) (0 when P is 0), and that cache's row
 * stride in elements; cache_k and cache_v are the layer's slots in every
 * cache. Always causal: a context's row t sees its P cached keys, then
 * its own new keys up to t. The table names device addresses, so only
 * djinn_graph_infer_own() takes the layout: a client's graph with it is
 * refused.
 */
#define DJINN_ATTN_VARLEN 2
enum djinn_varlen_col {
	DJINN_VARLEN_T,
	DJINN_VARLEN_P,
	DJINN_VARLEN_CACHE,
	DJINN_VARLEN_STRIDE,
	DJINN_VARLEN_COLS,
};
#define DJINN_VARLEN_MAX 64 /* contexts in one table */

/* As djinn_graph_infer(), for a graph djinnd built itself: also takes
 * DJINN_ATTN_VARLEN. Never for a graph a client sent. */
int djinn_graph_infer_own(const struct djinn_graph_view *view,
			  const struct djinn_tensor_desc *in,
			  struct djinn_tensor_desc *out, char *msg,
			  size_t msglen);

/*
 * As djinn_graph_infer(), knowing which graph inputs are client modules
 * (tensors uploaded with DJINN_TENSOR_MODULE): @in_module[nr_inputs],
 * or NULL for none. A KERNEL node's inputs[0] must be one of them
 * (-EINVAL "input 0 is not a module" otherwise); djinn_graph_infer()
 * refuses every KERNEL node that way.
 */
int djinn_graph_infer_modules(const struct djinn_graph_view *view,
			      const struct djinn_tensor_desc *in,
			      const bool *in_module,
			      struct djinn_tensor_desc *out, char *msg,
			      size_t msglen);

/* The limits of a KERNEL node's launch (struct djinn_p_kernel). */
#define DJINN_KERNEL_MAX_THREADS 1024 /* per block */
#define DJINN_KERNEL_MAX_BLOCK_Z 64
#define DJINN_KERNEL_MAX_GRID_X 0x7fffffffu
#define DJINN_KERNEL_MAX_GRID_YZ 65535u
#define DJINN_KERNEL_MAX_SHMEM (48u * 1024)

#endif /* DJINN_GRAPH_H */
