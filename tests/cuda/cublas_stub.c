// SPDX-License-Identifier: MIT
/*
 * A stand-in for libcublas, for tests/cuda/test_cuda_api: mk/cuda.mk
 * builds it several times over, each a different way for a cuBLAS to
 * work or not, and the test copies them under cuBLAS's sonames.
 *
 *   STUB_CREATE   the status cublasCreate_v2 returns (0: it works)
 *   STUB_GEMM     defined: it has cublasGemmStridedBatchedEx
 *   STUB_RELEASE  what cublasGetVersion_v2 says (130100: 13.1.0)
 *
 * stub_creates and stub_destroys count the calls, for the test to read.
 */
#ifndef STUB_RELEASE
#define STUB_RELEASE 130100
#endif

int stub_creates, stub_destroys;

int cublasCreate_v2(void **h);
int cublasDestroy_v2(void *h);
int cublasSetStream_v2(void *h, void *stream);
int cublasGetVersion_v2(void *h, int *version);
int cublasGemmStridedBatchedEx(void);

int cublasCreate_v2(void **h)
{
	stub_creates++;
	if (STUB_CREATE)
		return STUB_CREATE;
	*h = &stub_creates;
	return 0;
}

int cublasDestroy_v2(void *h)
{
	stub_destroys++;
	return h == &stub_creates ? 0 : 7; /* CUBLAS_STATUS_INVALID_VALUE */
}

int cublasSetStream_v2(void *h, void *stream)
{
	return 0;
}

int cublasGetVersion_v2(void *h, int *version)
{
	*version = STUB_RELEASE;
	return 0;
}

#ifdef STUB_GEMM
int cublasGemmStridedBatchedEx(void)
{
	return 0;
}
#endif
