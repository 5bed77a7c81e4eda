// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: the input is a GRAPH_SUBMIT payload. It goes through
 * djinn_graph_parse() and, if that accepts it, djinn_graph_infer(), where
 * graph input i has the shape shapes[ref.id % 16]: a GPT-2-like set, a
 * huge one and an empty one. Whatever infer accepts must be a valid,
 * non-empty desc of at most 2^40 bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

const char fuzz_name[] = "graph";
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* clang-format off */
#define S(dt, nd, ...) { .dtype = DJINN_DTYPE_##dt, .ndim = nd, .dims = { __VA_ARGS__ } }
static const struct djinn_tensor_desc shapes[16] = {
	S(F32, 3, 2, 8, 64), S(F32, 1, 64), S(F32, 2, 64, 192), S(F32, 1, 192),
	S(F32, 2, 64, 64), S(F32, 2, 64, 256), S(F32, 1, 256), S(F32, 2, 256, 64),
	S(I32, 2, 2, 8), S(F32, 2, 100, 64), S(F16, 4, 2, 4, 8, 16), S(F32, 0),
	S(BF16, 3, 2, 8, 64), S(I64, 3, 3, 1, 5), S(U8, 2, 1ull << 31, 1ull << 31),
	S(F32, 3, 7, 0, 3),
};
/* clang-format on */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct djinn_tensor_desc in[DJINN_MAX_GRAPH_INPUTS];
	static struct djinn_tensor_desc out[DJINN_MAX_NODES];
	uint64_t *buf = malloc(size + 8), bytes; /* 8-byte aligned */
	struct djinn_graph_view view;
	char msg[DJINN_MAX_ERROR_MSG];

	if (!buf)
		return 0;
	if (size)
		memcpy(buf, data, size);
	if (!djinn_graph_parse(buf, size, &view, msg, sizeof(msg))) {
		for (uint32_t i = 0; i < view.g->nr_inputs; i++)
			in[i] = shapes[view.inputs[i].id % 16];
		if (!djinn_graph_infer(&view, in, out, msg, sizeof(msg)))
			for (uint32_t i = 0; i < view.g->nr_nodes; i++)
				if (djinn_desc_check(&out[i], NULL, &bytes) ||
				    !bytes || bytes > (1ull << 40))
					abort();
	}
	free(buf);
	return 0;
}
