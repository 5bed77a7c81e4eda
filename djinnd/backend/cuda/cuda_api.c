// SPDX-License-Identifier: MIT
/*
 * Loading the Driver API and cuBLAS with dlopen(). See cuda_api.h.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "array_size.h"
#include "cuda_api.h"
#include "log.h"

#define CU_STR(x) #x
#define CU_XSTR(x) CU_STR(x)

static struct cu_api cu;
static int cu_ret;
static char cu_msg[256];
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static struct cublas_api cb;
static int cb_ret;
static char cb_msg[512];
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

	for (size_t i = 0; !p && i < ARRAY_SIZE(older); i++)
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

/* ---------------------------------------------------------------------
 * Versions
 */

int cu_version_check(int driver, int built, char *msg, size_t msglen)
{
	if (msglen)
		msg[0] = '\0';
	if (driver <= 0) {
		snprintf(msg, msglen,
			 "the CUDA driver does not say its version "
			 "(cuDriverGetVersion); djinnd's kernels were built "
			 "with CUDA %d.%d",
			 built / 1000, built % 1000 / 10);
		return -ENOSYS;
	}
	if (driver >= built)
		return 0;
	if (driver / 1000 < built / 1000) {
		snprintf(msg, msglen,
			 "the NVIDIA driver supports CUDA %d.%d, older than "
			 "the CUDA %d.%d djinnd's kernels were built with: "
			 "install a driver for CUDA %d.%d or newer",
			 driver / 1000, driver % 1000 / 10, built / 1000,
			 built % 1000 / 10, built / 1000, built % 1000 / 10);
		return -ENOSYS;
	}
	snprintf(msg, msglen,
		 "the NVIDIA driver supports CUDA %d.%d, older than the CUDA "
		 "%d.%d djinnd's kernels were built with: their SASS runs "
		 "(minor version compatibility), their PTX does not",
		 driver / 1000, driver % 1000 / 10, built / 1000,
		 built % 1000 / 10);
	return 1;
}

/* ---------------------------------------------------------------------
 * cuBLAS
 */

/* djinnd's log where it is linked (djinnd), else stderr (tests, bench) */
#pragma weak dj_log

void cuda_log(int level, const char *fmt, ...)
{
	char buf[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (dj_log)
		dj_log(level, "%s", buf);
	else if (level <= LOG_NOTICE)
		fprintf(stderr, "%s\n", buf);
}

size_t cublas_sonames(int driver_version, char (*names)[CUBLAS_SONAME_LEN],
		      size_t max)
{
	int major = (driver_version > 0 ? driver_version : CUDA_VERSION) / 1000;
	size_t n = 0;

	if (major > 99)
		major = 99;
	for (; major >= 11 && n < max; major--)
		snprintf(names[n++], CUBLAS_SONAME_LEN, "libcublas.so.%d",
			 major);
	if (n < max)
		snprintf(names[n++], CUBLAS_SONAME_LEN, "libcublas.so");
	return n;
}

static const char *cublas_status_name(cublasStatus_t st)
{
	switch (st) {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED";
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED";
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE";
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH";
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED";
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR";
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED";
	default:
		return "cublasStatus_t";
	}
}

/* Files tried and found wanting, by inode: libcublas.so is often a link
 * to libcublas.so.13, and the same file need not be tried twice. */
struct cb_seen {
	dev_t dev;
	ino_t ino;
};
#define CB_SEEN_MAX 32

/*
 * @file, dlopen()ed: 0 with @b filled, or -errno with the reason in
 * @why (-ENOENT: it is not there; -EALREADY: a file in @seen, tried
 * already; anything else: it is there and fails, and goes into @seen).
 */
static int cublas_try(const char *file, struct cublas_api *b, char *why,
		      size_t whylen, struct cb_seen *seen, size_t *nr_seen)
{
	static const char *const syms[] = {
		"cublasCreate_v2",
		"cublasDestroy_v2",
		"cublasSetStream_v2",
		"cublasGemmStridedBatchedEx",
	};
	void **fn[] = {
		(void **)&b->Create,
		(void **)&b->Destroy,
		(void **)&b->SetStream,
		(void **)&b->GemmStridedBatchedEx,
	};
	cublasHandle_t h = NULL;
	struct link_map *lm = NULL;
	struct stat sb = { 0 };
	cublasStatus_t st;
	Dl_info info;
	int ver = 0;

	memset(b, 0, sizeof(*b));
	b->lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!b->lib) {
		const char *err = dlerror();
		size_t len = strlen(file);

		snprintf(why, whylen, "%s", err ? err : "dlopen failed");
		/* "FILE: cannot open shared object file": not there; any
		 * other (a library it needs missing, a bad ELF): broken */
		if (err && !strncmp(err, file, len) &&
		    !strncmp(err + len, ": cannot open shared object file", 32))
			return -ENOENT;
		return -ELIBBAD;
	}
	if (!dlinfo(b->lib, RTLD_DI_LINKMAP, &lm) && lm && lm->l_name &&
	    !stat(lm->l_name, &sb)) {
		for (size_t i = 0; i < *nr_seen; i++)
			if (seen[i].dev == sb.st_dev &&
			    seen[i].ino == sb.st_ino) {
				snprintf(why, whylen, "%s, tried already",
					 lm->l_name);
				dlclose(b->lib);
				b->lib = NULL;
				return -EALREADY;
			}
	}
	for (size_t i = 0; i < ARRAY_SIZE(syms); i++) {
		*fn[i] = dlsym(b->lib, syms[i]);
		if (!*fn[i]) {
			snprintf(why, whylen, "it lacks %s", syms[i]);
			goto out_close;
		}
	}
	*(void **)&b->GetVersion = dlsym(b->lib, "cublasGetVersion_v2");
	st = b->Create(&h);
	if (st) {
		snprintf(why, whylen, "cublasCreate_v2: %s (%d)",
			 cublas_status_name(st), st);
		goto out_close;
	}
	if (b->GetVersion && b->GetVersion(h, &ver))
		ver = 0;
	st = b->Destroy(h);
	if (st) {
		snprintf(why, whylen, "cublasDestroy_v2: %s (%d)",
			 cublas_status_name(st), st);
		goto out_close;
	}
	b->release = ver > 0 ? ver : 0;
	if (dladdr(*(void **)&b->Create, &info) && info.dli_fname)
		snprintf(b->path, sizeof(b->path), "%s", info.dli_fname);
	else
		snprintf(b->path, sizeof(b->path), "%s", file);
	return 0;

out_close:
	if (sb.st_ino && *nr_seen < CB_SEEN_MAX)
		seen[(*nr_seen)++] =
			(struct cb_seen){ .dev = sb.st_dev, .ino = sb.st_ino };
	dlclose(b->lib);
	b->lib = NULL;
	return -ELIBBAD;
}

/* Append "; @fmt" to @msg. */
static void __attribute__((format(printf, 3, 4)))
cb_note(char *msg, size_t msglen, const char *fmt, ...)
{
	size_t used = strnlen(msg, msglen);
	va_list ap;

	if (used + 1 >= msglen)
		return;
	va_start(ap, fmt);
	vsnprintf(msg + used, msglen - used, fmt, ap);
	va_end(ap);
}

int cublas_pick(const char *const *dirs, size_t nr_dirs,
		const char (*names)[CUBLAS_SONAME_LEN], size_t nr_names,
		struct cublas_api *out, char *msg, size_t msglen)
{
	struct cb_seen seen[CB_SEEN_MAX];
	char file[PATH_MAX], why[PATH_MAX + 64];
	size_t broken = 0, nr_seen = 0;

	if (msglen)
		msg[0] = '\0';
	for (size_t i = 0; i < nr_names; i++) {
		for (size_t j = 0; j < nr_dirs; j++) {
			const char *where = dirs[j] ? dirs[j] : "";
			int ret;

			snprintf(file, sizeof(file), "%s%s%s", where,
				 *where ? "/" : "", names[i]);
			ret = cublas_try(file, out, why, sizeof(why), seen,
					 &nr_seen);
			if (!ret) {
				snprintf(out->version, sizeof(out->version),
					 "%s", names[i]);
				cuda_log(LOG_NOTICE,
					 "cuBLAS: %s, release %d.%d.%d, from "
					 "%s: a handle made and destroyed; "
					 "MATMUL uses it",
					 names[i], out->release / 10000,
					 out->release / 100 % 100,
					 out->release % 100, out->path);
				return 0;
			}
			if (ret == -ENOENT || ret == -EALREADY) {
				cuda_log(LOG_DEBUG, "cuBLAS: %s: %s", file,
					 why);
				continue;
			}
			broken++;
			cuda_log(LOG_WARNING,
				 "cuBLAS: %s does not work (%s): trying the "
				 "next",
				 file, why);
			cb_note(msg, msglen, "%s%s: %s", broken > 1 ? "; " : "",
				file, why);
		}
	}
	if (!broken)
		cb_note(msg, msglen, "none of %s .. %s found",
			nr_names ? names[0] : "libcublas.so",
			nr_names ? names[nr_names - 1] : "");
	cuda_log(LOG_ERR,
		 "cuBLAS: no cuBLAS works (%s): MATMUL runs on the fallback "
		 "kernel, many times slower",
		 msg);
	return -ENOENT;
}

static void cublas_load_once(void)
{
	static const char *const dirs[] = { NULL };
	char names[16][CUBLAS_SONAME_LEN];
	size_t n = cublas_sonames(cu.driver_version, names, 16);

	cb_ret = cublas_pick(dirs, 1, (const char(*)[CUBLAS_SONAME_LEN])names,
			     n, &cb, cb_msg, sizeof(cb_msg));
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
	for (size_t i = 0; i < ARRAY_SIZE(cu_known); i++)
		if (cu_known[i].r == r) {
			name = name ? name : cu_known[i].name;
			str = str ? str : cu_known[i].str;
		}
	snprintf(buf, sizeof(buf), "%s (%d)%s%s", name ? name : "CUresult",
		 (int)r, str ? ": " : "", str ? str : "");
	return buf;
}

/*
 * Some sticky errors are newer than the oldest toolkit djinnd builds
 * with (CUDA 12.0 lacks CUDA_ERROR_CONTAINED and
 * CUDA_ERROR_TENSOR_MEMORY_LEAK): they are named by value, which the
 * driver never renumbers, and checked against the header where it has
 * them.
 */
#define CU_ERR_NVLINK_UNCORRECTABLE ((CUresult)220)
#define CU_ERR_CONTAINED ((CUresult)226)
#define CU_ERR_TENSOR_MEMORY_LEAK ((CUresult)721)
#define CU_ERR_EXTERNAL_DEVICE ((CUresult)911)
_Static_assert(CU_ERR_NVLINK_UNCORRECTABLE == CUDA_ERROR_NVLINK_UNCORRECTABLE,
	       "CUDA_ERROR_NVLINK_UNCORRECTABLE");
_Static_assert(CU_ERR_EXTERNAL_DEVICE == CUDA_ERROR_EXTERNAL_DEVICE,
	       "CUDA_ERROR_EXTERNAL_DEVICE");
#if CUDA_VERSION >= 13000
_Static_assert(CU_ERR_CONTAINED == CUDA_ERROR_CONTAINED,
	       "CUDA_ERROR_CONTAINED");
_Static_assert(CU_ERR_TENSOR_MEMORY_LEAK == CUDA_ERROR_TENSOR_MEMORY_LEAK,
	       "CUDA_ERROR_TENSOR_MEMORY_LEAK");
#endif

/*
 * cuda.h says of each of these "This leaves the process in an
 * inconsistent state and any further CUDA work will return the same
 * error" (or, for CUDA_ERROR_ASSERT, "The context cannot be used
 * anymore"): a primary context reset is the in-process way out.
 */
bool cu_error_is_sticky(CUresult r)
{
	if (cu_error_is_fatal(r))
		return true;
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
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_UNKNOWN:
	case CU_ERR_EXTERNAL_DEVICE:
		return true;
	default:
		return false;
	}
}

/*
 * What cuda.h says of each, and why a context reset does not help:
 *
 * - CUDA_ERROR_CONTAINED (226): "an exception occurred on the device
 *   that is now contained by the GPU's error containment capability
 *   ... Certain classes of hardware errors ... the process must be
 *   terminated and relaunched": the GPU has fenced the process off.
 * - CUDA_ERROR_NVLINK_UNCORRECTABLE (220): "an uncorrectable NVLink
 *   error was detected during the execution": a link fault, not a
 *   context's.
 * - CUDA_ERROR_ECC_UNCORRECTABLE (214): "an uncorrectable ECC error
 *   was detected during execution": the same kind of hardware fault as
 *   the NVLink one, in device memory; the page it hit stays bad (row
 *   remapping waits for a GPU reset), so a new context could be placed
 *   on it again.
 * - CUDA_ERROR_TENSOR_MEMORY_LEAK (721): a kernel exited without
 *   freeing tensor memory, which is owned by the SM, not the context;
 *   "the process must be terminated and relaunched".
 *
 * CUDA_ERROR_EXTERNAL_DEVICE (911) is sticky but not fatal: the fault
 * is in another device, and a new context no longer waits on it.
 */
bool cu_error_is_fatal(CUresult r)
{
	switch (r) {
	case CU_ERR_CONTAINED:
	case CU_ERR_NVLINK_UNCORRECTABLE:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CU_ERR_TENSOR_MEMORY_LEAK:
		return true;
	default:
		return false;
	}
}
