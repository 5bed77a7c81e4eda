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

#include <limits.h>
#include <syslog.h> /* LOG_ERR .. LOG_DEBUG, for cuda_log() */
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
	X(ModuleLoadDataEx, cuModuleLoadDataEx)                       \
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
	/* optional: the library's release, after a handle is made */
	cublasStatus_t (*GetVersion)(cublasHandle_t h, int *version);
	char version[32]; /* the soname that worked: "libcublas.so.13" */
	char path[PATH_MAX]; /* the file it was loaded from */
	int release; /* 130100 for cuBLAS 13.1.0; 0 if unknown */
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
 * Whether a driver of CUDA @driver (cuDriverGetVersion(): 1000 * major
 * + 10 * minor) runs what was built for CUDA @built (the toolkit's
 * CUDA_VERSION: the kernels' fatbin and the headers' ABI). 0: it does,
 * @msg empty. 1: the driver is older by a minor version only; it runs
 * the kernels' SASS (CUDA's minor version compatibility) but cannot JIT
 * their PTX for a GPU newer than they were built for: a warning, both
 * versions in @msg. -ENOSYS: an older major (or an unknown) version,
 * which cannot run them: refuse, both versions in @msg.
 */
int cu_version_check(int driver, int built, char *msg, size_t msglen);

/*
 * cuBLAS sonames to try, best first, for a driver of CUDA
 * @driver_version (0: unknown, taken as the CUDA djinnd was built for):
 * the driver's own major (libcublas.so.13 on a CUDA 13 driver), then
 * each older one down to .11 (a driver runs libraries built for older
 * CUDA), then libcublas.so. Never a newer major, which needs a newer
 * driver. Fills up to @max names, returns how many.
 */
#define CUBLAS_SONAME_LEN 24
size_t cublas_sonames(int driver_version, char (*names)[CUBLAS_SONAME_LEN],
		      size_t max);

/*
 * Find a cuBLAS that works: for each of @names in turn, in each of
 * @dirs (a NULL dir: the dynamic linker's own search, LD_LIBRARY_PATH
 * and the ld.so cache), dlopen() it, look up its entry points, and make
 * and destroy one handle (cublasCreate_v2 needs a context current on
 * the calling thread). The first that does all of it is kept: 0, *@out
 * filled and logged (notice). One found that fails is closed, logged
 * (warning, naming it and why) and the next tried. None: -ENOENT, the
 * reasons in @msg, logged at err with "MATMUL runs on the fallback
 * kernel". Logs through djinnd's dj_log() where it is linked, else on
 * stderr.
 */
int cublas_pick(const char *const *dirs, size_t nr_dirs,
		const char (*names)[CUBLAS_SONAME_LEN], size_t nr_names,
		struct cublas_api *out, char *msg, size_t msglen);

/*
 * cublas_pick() over cublas_sonames() for the loaded driver, through the
 * dynamic linker's search: 0, or -ENOENT with the reasons in @msg. Once
 * per process, like cu_api_load(), and with a context current.
 */
int cublas_api_load(const struct cublas_api **api, char *msg, size_t msglen);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access ..." for @r. */
const char *cu_errname(const struct cu_api *cu, CUresult r);

/*
 * Errors after which the context is poisoned: every later call in it
 * fails the same way, and only a new context (a primary context reset)
 * gets the device back; for those cu_error_is_fatal() says, not even
 * that.
 */
bool cu_error_is_sticky(CUresult r);

/*
 * Sticky errors that no context reset clears: the GPU itself (or its
 * NVLink, its memory, its error containment) is at fault, not the
 * context, so djinnd stops using the device and says to restart it
 * (and the GPU reset or reboot the driver's log asks for). True for
 * CUDA_ERROR_CONTAINED, CUDA_ERROR_NVLINK_UNCORRECTABLE,
 * CUDA_ERROR_ECC_UNCORRECTABLE and CUDA_ERROR_TENSOR_MEMORY_LEAK;
 * every error it is true for is also cu_error_is_sticky().
 */
bool cu_error_is_fatal(CUresult r);

/* A line in djinnd's log (log.h) where the backend is linked into
 * djinnd; on stderr, err to notice only, where it is not (the tests). */
void cuda_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* DJINN_CUDA_API_H */
