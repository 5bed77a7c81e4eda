// SPDX-License-Identifier: MIT
/*
 * Streamed models on a GPU (issue 15): tests/unit/test_model_stream.c on
 * the CUDA backend. The ring lives in device memory, the streamed layers
 * in pinned host memory, and the copy lane's uploads run on its own
 * non-blocking stream while the executor's graphs run on theirs; the
 * logits must still equal those of the model wholly on the device, bit
 * for bit, through every break and steering, four sessions decoding in
 * one pass get their tokens alone, and a model moved under memory
 * pressure goes on computing the same bits. Exits 77, saying why, where there
 * is no GPU. Runs from the repository root.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu.h"

/* Before the models are written: exit 77 saying why without a GPU. */
__attribute__((constructor)) static void need_gpu(void)
{
	unsigned int n = 0;
	char msg[512];
	int ret = cuda_devices(&n, msg, sizeof(msg));

	if (ret || !n) {
		printf("SKIP: %s\n",
		       ret ? msg : "the CUDA driver is here but sees no GPU");
		exit(GPU_SKIP);
	}
}

/* Each test's backend: device $DJINN_GPU (default 0), 256 MiB of it as
 * the CPU fixture has (test_relieve fills the device), or fail. */
static struct backend *stream_cuda(void)
{
	const char *env = getenv("DJINN_GPU");
	unsigned int dev = env ? (unsigned int)atoi(env) : 0;
	static int said;
	struct backend *b;
	char msg[512];

	if (cuda_backend_create(dev, 256ull << 20, &b, msg, sizeof(msg))) {
		fprintf(stderr, "cuda:%u: %s\n", dev, msg);
		exit(1);
	}
	if (!said++)
		printf("# cuda:%u: %s\n", dev, msg);
	return b;
}

#define STREAM_BACKEND stream_cuda
#include "../unit/test_model_stream.c"
