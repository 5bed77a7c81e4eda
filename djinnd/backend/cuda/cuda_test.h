/* SPDX-License-Identifier: MIT */
/*
 * What only the CUDA tests call (tests/gpu/, tests/cuda/): included by
 * cuda.c and client.c, which define it, and by those tests; djinnd's
 * other code and the benchmarks use cuda_backend.h.
 */
#ifndef DJINN_CUDA_TEST_H
#define DJINN_CUDA_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/*
 * Recover a lost device now (normally the next call after the fault
 * does): 0 if the device is usable (it was not lost, or recovery
 * worked), else -EIO with the reason.
 */
int cuda_backend_recover(struct backend *b, char *msg, size_t msglen);

/* Event timestamps of the calling thread's streams, for the overlap
 * test: record an event on the compute (@copy false) or copy stream; the
 * time between two in ms once both completed. */
struct cuda_stamp;
int cuda_stamp_record(struct backend *b, bool copy, struct cuda_stamp **st);
int cuda_stamp_elapsed(struct backend *b, struct cuda_stamp *a,
		       struct cuda_stamp *z, float *ms);
void cuda_stamp_free(struct backend *b, struct cuda_stamp *st);

/*
 * Asynchronous copies on the calling thread's copy stream; @host must be
 * pinned (the provider's host_alloc) for the copy to overlap compute.
 * An upload is ordered before the compute stream's later kernels by an
 * event (earlier ones overlap it and must not touch @dst); a download
 * after its earlier kernels (later ones overlap it and must not write
 * @src until cuda_copy_wait()). cuda_copy_wait() waits for the copy
 * stream.
 */
int cuda_copy_htod_async(struct backend *b, uint64_t dst, const void *host,
			 uint64_t len);
int cuda_copy_dtoh_async(struct backend *b, void *host, uint64_t src,
			 uint64_t len);
int cuda_copy_wait(struct backend *b);

#endif /* DJINN_CUDA_TEST_H */
