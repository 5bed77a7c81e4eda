// SPDX-License-Identifier: MIT
/*
 * Loading the Driver API and cuBLAS with dlopen(). See cuda_api.h.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_api.h"

#define CU_STR(x) #x
#define CU_XSTR(x) CU_STR(x)

static struct cu_api cu;
static int cu_ret;
static char cu_msg[256];
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static struct cublas_api cb;
static int cb_ret;
static char cb_msg[256];
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

/*
 * The symbol the header maps a name to; for the few whose newer ABI
 * version only renamed them (same prototype), the older name is taken
 * from an older driver.
 */
static void *cu_sym(void *lib, const char *sym)
{
	static const char *const older[][2] = {
		{ "cuEventElapsedTime_v2", "cuEventElapsedTime" },
	};
	void *p = dlsym(lib, sym);

	for (size_t i = 0; !p && i < sizeof(older) / sizeof(older[0]); i++)
		if (!strcmp(sym, older[i][0]))
			p = dlsym(lib, older[i][1]);
	return p;
}

static void cu_load_once(void)
{
	const char *missing = NULL;
	CUresult r;

	cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu.lib) {
		cu_ret = -ENOENT;
		snprintf(cu_msg, sizeof(cu_msg),
			 "no CUDA driver: dlopen(libcuda.so.1): %s", dlerror());
		return;
	}
#define CU_API_LOAD(f, n)                                                \
	if (!missing && !(*(void **)&cu.f = cu_sym(cu.lib, CU_XSTR(n)))) \
		missing = CU_XSTR(n);
	CU_API_LIST(CU_API_LOAD)
#undef CU_API_LOAD
	if (missing) {
		cu_ret = -ENOSYS;
		snprintf(cu_msg, sizeof(cu_msg),
			 "the CUDA driver lacks %s: it is older than the "
			 "CUDA %d.%d this djinnd was built for",
			 missing, CUDA_VERSION / 1000,
			 CUDA_VERSION % 1000 / 10);
		goto out_close;
	}
	*(void **)&cu.FuncGetParamInfo = dlsym(cu.lib, "cuFuncGetParamInfo");
	*(void **)&cu.ModuleGetFunctionCount =
		dlsym(cu.lib, "cuModuleGetFunctionCount");
	*(void **)&cu.ModuleEnumerateFunctions =
		dlsym(cu.lib, "cuModuleEnumerateFunctions");
	*(void **)&cu.FuncGetName = dlsym(cu.lib, "cuFuncGetName");
	r = cu.Init(0);
	if (r != CUDA_SUCCESS) {
		cu_ret = -ENODEV;
		snprintf(cu_msg, sizeof(cu_msg), "cuInit: %s",
			 cu_errname(&cu, r));
		goto out_close;
	}
	if (cu.DriverGetVersion(&cu.driver_version) != CUDA_SUCCESS)
		cu.driver_version = 0;
	return;

out_close:
	dlclose(cu.lib);
	cu.lib = NULL;
}

int cu_api_load(const struct cu_api **api, char *msg, size_t msglen)
{
	pthread_once(&cu_once, cu_load_once);
	if (cu_ret) {
		if (msg && msglen)
			snprintf(msg, msglen, "%s", cu_msg);
		return cu_ret;
	}
	*api = &cu;
	return 0;
}

static void cublas_load_once(void)
{
	static const char *const names[] = {
		"libcublas.so.13",
		"libcublas.so.12",
		"libcublas.so.11",
		"libcublas.so",
	};
	static const char *const syms[] = {
		"cublasCreate_v2",
		"cublasDestroy_v2",
		"cublasSetStream_v2",
		"cublasGemmStridedBatchedEx",
	};
	void **fn[] = {
		(void **)&cb.Create,
		(void **)&cb.Destroy,
		(void **)&cb.SetStream,
		(void **)&cb.GemmStridedBatchedEx,
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !cb.lib; i++) {
		cb.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (cb.lib)
			snprintf(cb.version, sizeof(cb.version), "%s",
				 names[i]);
	}
	if (!cb.lib) {
		cb_ret = -ENOENT;
		snprintf(cb_msg, sizeof(cb_msg),
			 "no cuBLAS: dlopen(libcublas.so.13/.12/.11): %s",
			 dlerror());
		return;
	}
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*fn[i] = dlsym(cb.lib, syms[i]);
		if (!*fn[i]) {
			cb_ret = -ENOSYS;
			snprintf(cb_msg, sizeof(cb_msg), "%s lacks %s",
				 cb.version, syms[i]);
			dlclose(cb.lib);
			cb.lib = NULL;
			return;
		}
	}
}

int cublas_api_load(const struct cublas_api **api, char *msg, size_t msglen)
{
	pthread_once(&cb_once, cublas_load_once);
	if (cb_ret) {
		if (msg && msglen)
			snprintf(msg, msglen, "%s", cb_msg);
		return cb_ret;
	}
	*api = &cb;
	return 0;
}

/* What the driver may not be able to name (a stub library cannot). */
static const struct {
	CUresult r;
	const char *name, *str;
} cu_known[] = {
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
	  "no CUDA-capable device is detected" },
	{ CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
	  "libcuda.so.1 is the toolkit's stub, not a driver" },
	{ CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
	  "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	  "libcuda and the kernel module differ in version" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", NULL },
};

const char *cu_errname(const struct cu_api *api, CUresult r)
{
	static __thread char buf[160];
	const char *name = NULL, *str = NULL;

	if (api && api->GetErrorName &&
	    api->GetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	if (api && api->GetErrorString &&
	    api->GetErrorString(r, &str) != CUDA_SUCCESS)
		str = NULL;
	for (size_t i = 0; i < sizeof(cu_known) / sizeof(cu_known[0]); i++)
		if (cu_known[i].r == r) {
			name = name ? name : cu_known[i].name;
			str = str ? str : cu_known[i].str;
		}
	snprintf(buf, sizeof(buf), "%s (%d)%s%s", name ? name : "CUresult",
		 (int)r, str ? ": " : "", str ? str : "");
	return buf;
}

bool cu_error_is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_UNKNOWN:
		return true;
	default:
		return false;
	}
}
