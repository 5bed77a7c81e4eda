/* SPDX-License-Identifier: MIT */
/*
 * What the GPU tests and the GPU benchmark share: opening the CUDA
 * backend (or exiting 77 with the reason when this host has no NVIDIA
 * driver or GPU), an arena of device memory mapped through the backend's
 * own provider, and f16/bf16 conversions written here, apart from both
 * backends.
 */
#ifndef DJINN_TESTS_GPU_H
#define DJINN_TESTS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

/* Exit status of a test that cannot run here. */
#define GPU_SKIP 77

/*
 * struct gpu - the device under test
 * @b:       the CUDA backend on device $DJINN_GPU (default 0)
 * @cpu:     a CPU backend to compare with (NULL unless asked for)
 * @va:      the arena: one reservation, one chunk mapped at its start
 * @size:    its bytes
 * @used:    bump pointer
 */
struct gpu {
	struct backend *b, *cpu;
	uint64_t va, size, used, chunk;
};

/* Open the backend (and a CPU backend if @with_cpu) and map an arena of
 * @arena bytes; exit(GPU_SKIP) saying why if there is no GPU, exit(1) on
 * any other failure. */
void gpu_open(struct gpu *g, uint64_t arena, bool with_cpu);
void gpu_close(struct gpu *g);

/* @bytes of the arena, 256-aligned; exit(1) when it is full. */
uint64_t gpu_alloc(struct gpu *g, uint64_t bytes);
void gpu_reset(struct gpu *g);

/* Synchronous copies through the provider; exit(1) on failure. */
void gpu_put(struct gpu *g, uint64_t dst, const void *src, uint64_t len);
void gpu_get(struct gpu *g, void *dst, uint64_t src, uint64_t len);

/* f32 <-> f16/bf16, rounding to nearest even, NaN kept. */
uint16_t gpu_to_f16(float f);
uint16_t gpu_to_bf16(float f);
float gpu_from_f16(uint16_t h);
float gpu_from_bf16(uint16_t h);

/*
 * A client's PTX module, as a client would upload it (written by hand,
 * checked with ptxas for sm_80 and sm_90), three kernels each taking one
 * tensor (a pointer and its element count), and one taking two, as a
 * KERNEL node calls it (the result, then its argument):
 *   add_one(f32 x[n]):  x[i] += 1 for i < n (grid-wide, one per thread)
 *   add_one_to(f32 o[no], f32 x[nx]): o[i] = x[i] + 1 for i < no, nx
 *   fault(any):         stores to device address 0: an illegal address
 *   spin(i64 t[1]):     spins t[0] ns by %globaltimer, then sets t[0]
 *                       to the ns it spun
 */
extern const char gpu_test_ptx[];

/* PTX that is well formed but for an unknown instruction on line 9:
 * ptxas refuses it, naming the line (the JIT's error log). */
extern const char gpu_bad_op_ptx[];

#endif /* DJINN_TESTS_GPU_H */
