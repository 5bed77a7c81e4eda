/* SPDX-License-Identifier: MIT */
/*
 * The CUDA Driver API and cuBLAS, loaded at run time.
 *
 * djinnd links neither libcuda nor libcublas: cu_api_load() dlopen()s
 * libcuda.so.1 and looks up every entry point it uses, so the same
 * binary starts on a host without an NVIDIA driver (and says so). The
 * prototypes come from the toolkit's headers, which also name the ABI
 * version of each entry point (cuMemcpyHtoD is cuMemcpyHtoD_v2): the
 * table is filled with the symbol the header maps each name to.
 */
#ifndef DJINN_CUDA_API_H
#define DJINN_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>

/* X(field, cuda_name): one entry point each */
#define CU_API_LIST(X)                                                \
	X(Init, cuInit)                                               \
	X(DriverGetVersion, cuDriverGetVersion)                       \
	X(GetErrorName, cuGetErrorName)                               \
	X(GetErrorString, cuGetErrorString)                           \
	X(DeviceGetCount, cuDeviceGetCount)                           \
	X(DeviceGet, cuDeviceGet)                                     \
	X(DeviceGetName, cuDeviceGetName)                             \
	X(DeviceGetAttribute, cuDeviceGetAttribute)                   \
	X(DeviceTotalMem, cuDeviceTotalMem)                           \
	X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)           \
	X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease)         \
	X(DevicePrimaryCtxReset, cuDevicePrimaryCtxReset)             \
	X(CtxSetCurrent, cuCtxSetCurrent)                             \
	X(CtxSynchronize, cuCtxSynchronize)                           \
	X(MemGetInfo, cuMemGetInfo)                                   \
	X(MemGetAllocationGranularity, cuMemGetAllocationGranularity) \
	X(MemAddressReserve, cuMemAddressReserve)                     \
	X(MemAddressFree, cuMemAddressFree)                           \
	X(MemCreate, cuMemCreate)                                     \
	X(MemRelease, cuMemRelease)                                   \
	X(MemMap, cuMemMap)                                           \
	X(MemUnmap, cuMemUnmap)                                       \
	X(MemSetAccess, cuMemSetAccess)                               \
	X(MemAlloc, cuMemAlloc)                                       \
	X(MemFree, cuMemFree)                                         \
	X(MemHostAlloc, cuMemHostAlloc)                               \
	X(MemFreeHost, cuMemFreeHost)                                 \
	X(MemHostRegister, cuMemHostRegister)                         \
	X(MemHostUnregister, cuMemHostUnregister)                     \
	X(MemcpyHtoD, cuMemcpyHtoD)                                   \
	X(MemcpyDtoH, cuMemcpyDtoH)                                   \
	X(MemcpyDtoD, cuMemcpyDtoD)                                   \
	X(MemcpyHtoDAsync, cuMemcpyHtoDAsync)                         \
	X(MemcpyDtoHAsync, cuMemcpyDtoHAsync)                         \
	X(MemcpyDtoDAsync, cuMemcpyDtoDAsync)                         \
	X(Memcpy2DAsync, cuMemcpy2DAsync)                             \
	X(MemsetD8, cuMemsetD8)                                       \
	X(MemsetD8Async, cuMemsetD8Async)                             \
	X(ModuleLoadData, cuModuleLoadData)                           \
	X(ModuleUnload, cuModuleUnload)                               \
	X(ModuleGetFunction, cuModuleGetFunction)                     \
	X(LaunchKernel, cuLaunchKernel)                               \
	X(StreamCreate, cuStreamCreate)                               \
	X(StreamDestroy, cuStreamDestroy)                             \
	X(StreamSynchronize, cuStreamSynchronize)                     \
	X(StreamWaitEvent, cuStreamWaitEvent)                         \
	X(EventCreate, cuEventCreate)                                 \
	X(EventDestroy, cuEventDestroy)                               \
	X(EventRecord, cuEventRecord)                                 \
	X(EventSynchronize, cuEventSynchronize)                       \
	X(EventQuery, cuEventQuery)                                   \
	X(EventElapsedTime, cuEventElapsedTime)

/* cuBLAS: only the types of its header; the library is dlopen()ed. */
typedef struct cublasContext *cublasHandle_t;
typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS is 0 */

/* The cuBLAS entry points djinnd uses, with cublas_api.h's values. */
#define CUBLAS_OP_N_ 0
#define CUBLAS_OP_T_ 1
#define CUDA_R_32F_ 0
#define CUDA_R_16F_ 2
#define CUDA_R_16BF_ 14
#define CUBLAS_COMPUTE_32F_ 68
#define CUBLAS_COMPUTE_32F_PEDANTIC_ 69
#define CUBLAS_GEMM_DEFAULT_ (-1)

struct cublas_api {
	void *lib;
	cublasStatus_t (*Create)(cublasHandle_t *h);
	cublasStatus_t (*Destroy)(cublasHandle_t h);
	cublasStatus_t (*SetStream)(cublasHandle_t h, CUstream s);
	cublasStatus_t (*GemmStridedBatchedEx)(
		cublasHandle_t h, int transa, int transb, int m, int n, int k,
		const void *alpha, const void *A, int Atype, int lda,
		long long strideA, const void *B, int Btype, int ldb,
		long long strideB, const void *beta, void *C, int Ctype,
		int ldc, long long strideC, int batch, int compute, int algo);
	char version[32];
};

#define CU_API_FIELD(f, n) __typeof__(n) *f;
struct cu_api {
	void *lib;
	int driver_version;
	/* optional (CUDA 12.4): a kernel's parameters, NULL if absent */
	CUresult (*FuncGetParamInfo)(CUfunction f, size_t index, size_t *offset,
				     size_t *size);
	/* optional (CUDA 12.4): a module's kernels and their names */
	CUresult (*ModuleGetFunctionCount)(unsigned int *count, CUmodule mod);
	CUresult (*ModuleEnumerateFunctions)(CUfunction *fns, unsigned int n,
					     CUmodule mod);
	CUresult (*FuncGetName)(const char **name, CUfunction f);
	CU_API_LIST(CU_API_FIELD)
};
#undef CU_API_FIELD

/*
 * Load libcuda.so.1 and cuInit() it, once per process: 0 and *@api, or
 * -ENOENT (no driver library: a host without an NVIDIA driver), -ENOSYS
 * (a driver too old: an entry point is missing), -ENODEV (cuInit failed:
 * no device, or the driver cannot talk to it), with the reason in @msg.
 * Later calls return what the first one did.
 */
int cu_api_load(const struct cu_api **api, char *msg, size_t msglen);

/*
 * Load cuBLAS (libcublas.so.13, .12, .11, then libcublas.so): 0, or
 * -ENOENT with the reason in @msg. Once per process, like cu_api_load().
 */
int cublas_api_load(const struct cublas_api **api, char *msg, size_t msglen);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access ..." for @r. */
const char *cu_errname(const struct cu_api *cu, CUresult r);

/*
 * Errors after which the context is poisoned: every later call in it
 * fails the same way, and only a new context (a primary context reset)
 * gets the device back.
 */
bool cu_error_is_sticky(CUresult r);

#endif /* DJINN_CUDA_API_H */
