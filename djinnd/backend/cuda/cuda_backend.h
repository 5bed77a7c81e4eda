/* SPDX-License-Identifier: MIT */
/*
 * CUDA-only entry points beside the backend interface: client-supplied
 * kernels, and the benchmarks' no-op (what only tests call: cuda_test.h).
 *
 * Client kernels: a PTX or cubin image (the bytes a client uploaded to
 * the text segment) is loaded once per context with cuModuleLoadData;
 * cuda_kernel_run() launches one of its kernels on the calling thread's
 * compute stream. The kernel's parameters are, for each tensor argument
 * in order, its device address and its element count (T *, uint64_t):
 * the kernel is told every tensor's size and must keep within it. Before
 * the launch the arguments are checked: each a valid desc at an address
 * aligned to its element size, the grid and block within the device's
 * limits, the dynamic shared memory within 48 KiB, and, where the driver
 * can say (cuFuncGetParamInfo), the kernel taking exactly 2 * nargs
 * parameters of 8 bytes. A kernel that writes outside its tensors
 * anyway faults the context: see Documentation/cuda.rst for what that
 * costs.
 */
#ifndef DJINN_CUDA_BACKEND_H
#define DJINN_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define CUDA_KERNEL_MAX_ARGS 8

struct cuda_module;

/* Copy @image (@len bytes: PTX text with its NUL, or a cubin/fatbin) and
 * load it: -EINVAL with the reason when it does not load, the JIT's
 * error log (ptxas's, for PTX) folded onto the message's one line. */
int cuda_module_load(struct backend *b, const void *image, size_t len,
		     struct cuda_module **mod, char *msg, size_t msglen);
void cuda_module_unload(struct backend *b, struct cuda_module *mod);

/* Launch @name from @mod on @args[nargs]; returns once enqueued (the
 * backend's sync() waits). -ENOENT: no such kernel; -EINVAL: bad
 * arguments; -EIO: the device failed. */
int cuda_kernel_run(struct backend *b, struct cuda_module *mod,
		    const char *name, const uint32_t grid[3],
		    const uint32_t block[3], uint32_t shmem,
		    const struct dj_tensor *args, unsigned int nargs, char *msg,
		    size_t msglen);

/* Launch the empty kernel and wait: the local half of the round-trip
 * benchmark. */
int cuda_noop_sync(struct backend *b);

#endif /* DJINN_CUDA_BACKEND_H */
