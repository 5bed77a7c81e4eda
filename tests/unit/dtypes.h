/* SPDX-License-Identifier: MIT */
/*
 * Short names of the dtypes, for the tests that spell out many tensors
 * (test_graph, test_cpu_backend, tests/gpu/test_cuda_ops).
 */
#ifndef DJINN_TEST_DTYPES_H
#define DJINN_TEST_DTYPES_H

#include <djinn/proto.h>

#define F32 DJINN_DTYPE_F32
#define F16 DJINN_DTYPE_F16
#define BF16 DJINN_DTYPE_BF16
#define I32 DJINN_DTYPE_I32
#define I64 DJINN_DTYPE_I64
#define U8 DJINN_DTYPE_U8

#endif /* DJINN_TEST_DTYPES_H */
