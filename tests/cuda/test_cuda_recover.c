// SPDX-License-Identifier: MIT
/*
 * Recovery from a device fault (cuda.c's recover(), vmm.c's
 * cuda_vmm_restore()) without a GPU: the backend's device and provider
 * over a stand-in driver table that records each call, so that the
 * order of the calls, which ones are made and which are not, and what a
 * failure at each step leaves, are checked on every host with nvcc
 * (make test, make asan). tests/gpu/test_cuda_client runs a real fault.
 *
 * The stand-in keeps what cuda.h says of the driver: memory made by
 * cuMemCreate, its reservations and its mappings are no context's, so
 * cuDevicePrimaryCtxReset leaves them (unless a case says otherwise); a
 * poisoned context answers every call with its sticky error until the
 * reset (unless a case says the reset does not clear it). This file
 * defines dj_log(), so what the backend logs comes here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_test.h"
#include "logcap.h"

/* CUDA 12.0's cuda.h lacks it; the driver never renumbers */
#define ERR_CONTAINED ((CUresult)226)

/* ------------------------------------------------------------------
 * The stand-in driver. Each call appends "Name[@va] " to calls[].
 */
#define NR_MAPS 16
#define NR_RESV 16
#define NR_HANDLES 64

static struct {
	char calls[32768];
	bool poisoned; /* every call fails with @sticky */
	CUresult sticky;
	bool reset_keeps_poison; /* a reset that does not help */
	bool reset_unmaps; /* a driver whose reset takes the mappings */
	unsigned int ctxs; /* contexts retained so far */
	struct {
		uint64_t va, size;
		bool used;
	} resv[NR_RESV];
	struct {
		uint64_t va, size;
		bool used;
		CUmemAccess_flags access;
		bool zeroed;
	} maps[NR_MAPS];
	bool live[NR_HANDLES]; /* cuMemCreate handles, by value */
	unsigned int nr_handles;
	unsigned int registered; /* host buffers */
	unsigned int streams, events, allocs;
} F;

static void call(const char *name, uint64_t va)
{
	size_t n = strlen(F.calls);

	if (va)
		snprintf(F.calls + n, sizeof(F.calls) - n, "%s@%#llx ", name,
			 (unsigned long long)va);
	else
		snprintf(F.calls + n, sizeof(F.calls) - n, "%s ", name);
}

/* The offset of the first call "@what" after offset @from, or -1. */
static long at(const char *what, long from)
{
	const char *p = from >= 0 ? strstr(F.calls + from, what) : NULL;

	return p ? p - F.calls : -1;
}

/* How many times @what was called. */
static int count(const char *what)
{
	int n = 0;

	for (const char *p = F.calls; (p = strstr(p, what)); p++)
		n++;
	return n;
}

#define POISON(name, va)                 \
	do {                             \
		call(name, va);          \
		if (F.poisoned)          \
			return F.sticky; \
	} while (0)

static int map_find(uint64_t va)
{
	for (int i = 0; i < NR_MAPS; i++)
		if (F.maps[i].used && F.maps[i].va == va)
			return i;
	return -1;
}

static CUresult f_GetErrorName(CUresult r, const char **s)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
		*s = "CUDA_ERROR_ILLEGAL_ADDRESS";
		return CUDA_SUCCESS;
	case ERR_CONTAINED:
		*s = "CUDA_ERROR_CONTAINED";
		return CUDA_SUCCESS;
	case CUDA_ERROR_INVALID_VALUE:
		*s = "CUDA_ERROR_INVALID_VALUE";
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult f_GetErrorString(CUresult r, const char **s)
{
	*s = "a stand-in error";
	return CUDA_SUCCESS;
}

/* Context management answers in a poisoned context too. */
static CUresult f_CtxSetCurrent(CUcontext c)
{
	call("CtxSetCurrent", 0);
	return CUDA_SUCCESS;
}

static CUresult f_CtxSynchronize(void)
{
	POISON("CtxSynchronize", 0);
	return CUDA_SUCCESS;
}

static CUresult f_DevicePrimaryCtxReset(CUdevice dev)
{
	call("DevicePrimaryCtxReset", 0);
	if (!F.reset_keeps_poison)
		F.poisoned = false;
	if (F.reset_unmaps)
		memset(F.maps, 0, sizeof(F.maps));
	/* what the context owned goes with it */
	F.streams = F.events = F.allocs = 0;
	return CUDA_SUCCESS;
}

static CUresult f_DevicePrimaryCtxRelease(CUdevice dev)
{
	call("DevicePrimaryCtxRelease", 0);
	return CUDA_SUCCESS;
}

static CUresult f_DevicePrimaryCtxRetain(CUcontext *c, CUdevice dev)
{
	call("DevicePrimaryCtxRetain", 0);
	*c = (CUcontext)(uintptr_t)(0x1000 + 0x100 * ++F.ctxs);
	return CUDA_SUCCESS;
}

static CUresult f_MemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
				    CUdeviceptr addr, unsigned long long flags)
{
	POISON("MemAddressReserve", 0);
	for (int i = 0; i < NR_RESV; i++)
		if (!F.resv[i].used) {
			F.resv[i].used = true;
			F.resv[i].va = 0x7f0000000000ull + ((uint64_t)i << 32);
			F.resv[i].size = size;
			*p = F.resv[i].va;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult f_MemAddressFree(CUdeviceptr p, size_t size)
{
	POISON("MemAddressFree", p);
	for (int i = 0; i < NR_RESV; i++)
		if (F.resv[i].used && F.resv[i].va == p) {
			F.resv[i].used = false;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_MemCreate(CUmemGenericAllocationHandle *h, size_t size,
			    const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	POISON("MemCreate", 0);
	if (F.nr_handles + 1 >= NR_HANDLES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*h = ++F.nr_handles;
	F.live[*h] = true;
	return CUDA_SUCCESS;
}

static CUresult f_MemRelease(CUmemGenericAllocationHandle h)
{
	POISON("MemRelease", 0);
	if (h >= NR_HANDLES || !F.live[h])
		return CUDA_ERROR_INVALID_VALUE;
	F.live[h] = false;
	return CUDA_SUCCESS;
}

static CUresult f_MemMap(CUdeviceptr p, size_t size, size_t off,
			 CUmemGenericAllocationHandle h,
			 unsigned long long flags)
{
	POISON("MemMap", p);
	if (map_find(p) >= 0 || h >= NR_HANDLES || !F.live[h])
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < NR_MAPS; i++)
		if (!F.maps[i].used) {
			F.maps[i].used = true;
			F.maps[i].va = p;
			F.maps[i].size = size;
			F.maps[i].access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
			F.maps[i].zeroed = false;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult f_MemUnmap(CUdeviceptr p, size_t size)
{
	int i;

	POISON("MemUnmap", p);
	i = map_find(p);
	if (i < 0 || F.maps[i].size != size)
		return CUDA_ERROR_INVALID_VALUE;
	F.maps[i].used = false;
	return CUDA_SUCCESS;
}

static CUresult f_MemSetAccess(CUdeviceptr p, size_t size,
			       const CUmemAccessDesc *desc, size_t n)
{
	int i;

	call(desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? "SetAccessR" :
							    "SetAccessRW",
	     p);
	if (F.poisoned)
		return F.sticky;
	i = map_find(p);
	if (i < 0 || F.maps[i].size != size)
		return CUDA_ERROR_INVALID_VALUE;
	F.maps[i].access = desc->flags;
	return CUDA_SUCCESS;
}

static CUresult f_MemsetD8(CUdeviceptr p, unsigned char c, size_t n)
{
	int i;

	POISON("MemsetD8", p);
	i = map_find(p);
	if (i < 0 || F.maps[i].access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return CUDA_ERROR_INVALID_VALUE;
	F.maps[i].zeroed = !c && n == F.maps[i].size;
	return CUDA_SUCCESS;
}

static CUresult f_MemsetD8Async(CUdeviceptr p, unsigned char c, size_t n,
				CUstream s)
{
	POISON("MemsetD8Async", p);
	return map_find(p) >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_MemHostRegister(void *p, size_t size, unsigned int flags)
{
	POISON("MemHostRegister", 0);
	F.registered++;
	return CUDA_SUCCESS;
}

static CUresult f_MemHostUnregister(void *p)
{
	POISON("MemHostUnregister", 0);
	if (!F.registered)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	F.registered--;
	return CUDA_SUCCESS;
}

static CUresult f_StreamCreate(CUstream *s, unsigned int flags)
{
	POISON("StreamCreate", 0);
	*s = (CUstream)(uintptr_t)(0x10 + ++F.streams);
	return CUDA_SUCCESS;
}

static CUresult f_StreamSynchronize(CUstream s)
{
	POISON("StreamSynchronize", 0);
	return CUDA_SUCCESS;
}

static CUresult f_StreamDestroy(CUstream s)
{
	POISON("StreamDestroy", 0);
	return CUDA_SUCCESS;
}

static CUresult f_EventCreate(CUevent *e, unsigned int flags)
{
	POISON("EventCreate", 0);
	*e = (CUevent)(uintptr_t)(0x20 + ++F.events);
	return CUDA_SUCCESS;
}

static CUresult f_EventDestroy(CUevent e)
{
	POISON("EventDestroy", 0);
	return CUDA_SUCCESS;
}

static CUresult f_MemAlloc(CUdeviceptr *p, size_t size)
{
	POISON("MemAlloc", 0);
	*p = 0x500000000ull + ++F.allocs * 0x1000;
	return CUDA_SUCCESS;
}

static CUresult f_MemFree(CUdeviceptr p)
{
	POISON("MemFree", 0);
	return CUDA_SUCCESS;
}

static CUresult f_ModuleLoadData(CUmodule *m, const void *image)
{
	POISON("ModuleLoadData", 0);
	*m = (CUmodule)(uintptr_t)0x30;
	return CUDA_SUCCESS;
}

static CUresult f_ModuleUnload(CUmodule m)
{
	POISON("ModuleUnload", 0);
	return CUDA_SUCCESS;
}

static CUresult f_ModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	POISON("ModuleGetFunction", 0);
	*f = (CUfunction)(uintptr_t)0x40;
	return CUDA_SUCCESS;
}

static CUresult
f_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
			      CUmemAllocationGranularity_flags o)
{
	*g = 2u << 20;
	return CUDA_SUCCESS;
}

/* Every entry point recovery and the provider use; the rest stay NULL,
 * so that a call nobody expected crashes here, by name in a debugger. */
static const struct cu_api fake = {
	.GetErrorName = f_GetErrorName,
	.GetErrorString = f_GetErrorString,
	.CtxSetCurrent = f_CtxSetCurrent,
	.CtxSynchronize = f_CtxSynchronize,
	.DevicePrimaryCtxReset = f_DevicePrimaryCtxReset,
	.DevicePrimaryCtxRelease = f_DevicePrimaryCtxRelease,
	.DevicePrimaryCtxRetain = f_DevicePrimaryCtxRetain,
	.MemAddressReserve = f_MemAddressReserve,
	.MemAddressFree = f_MemAddressFree,
	.MemCreate = f_MemCreate,
	.MemRelease = f_MemRelease,
	.MemMap = f_MemMap,
	.MemUnmap = f_MemUnmap,
	.MemSetAccess = f_MemSetAccess,
	.MemsetD8 = f_MemsetD8,
	.MemsetD8Async = f_MemsetD8Async,
	.MemHostRegister = f_MemHostRegister,
	.MemHostUnregister = f_MemHostUnregister,
	.StreamCreate = f_StreamCreate,
	.StreamSynchronize = f_StreamSynchronize,
	.StreamDestroy = f_StreamDestroy,
	.EventCreate = f_EventCreate,
	.EventDestroy = f_EventDestroy,
	.MemAlloc = f_MemAlloc,
	.MemFree = f_MemFree,
	.ModuleLoadData = f_ModuleLoadData,
	.ModuleUnload = f_ModuleUnload,
	.ModuleGetFunction = f_ModuleGetFunction,
	.MemGetAllocationGranularity = f_MemGetAllocationGranularity,
};

/* ------------------------------------------------------------------
 * A device over the stand-in, as cuda_backend_create() makes one, with
 * some memory in use:
 *
 *   A: a data mapping, read-write       B: a text mapping, read-only
 *   C: a mapping the VMU unmaps (and whose chunk it destroys, and whose
 *      reservation it releases) while the device is lost
 *   H: a pinned host buffer (kept)      S: one freed while lost
 */
struct fix {
	struct cuda_dev *d;
	struct vmu_provider *p;
	uint64_t a, b, c;
	uint64_t ca, cb, cc;
	void *h, *s;
};

#define MAP (2ull << 20)

static unsigned int serial = 100;

static int setup(void **state)
{
	struct fix *x = calloc(1, sizeof(*x));
	struct cuda_dev *d = calloc(1, sizeof(*d));
	const struct vmu_provider_ops *ops;
	char msg[256];

	if (!x || !d)
		return -1;
	memset(&F, 0, sizeof(F));
	logbuf[0] = 0;
	d->cu = &fake;
	d->serial = serial++; /* the lane cache's key */
	snprintf(d->name, sizeof(d->name), "cuda:0");
	pthread_rwlock_init(&d->ctx_lock, NULL);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->mlock, NULL);
	d->ctx = (CUcontext)(uintptr_t)0x1000;
	if (cuda_vmm_init(d, msg, sizeof(msg)))
		return -1;
	d->vmm.base.capacity = 1ull << 30;
	d->base.provider = &d->vmm.base;
	x->d = d;
	x->p = &d->vmm.base;
	ops = x->p->ops;

	if (ops->reserve(x->p, MAP, 0, &x->a) ||
	    ops->reserve(x->p, MAP, 0, &x->b) ||
	    ops->reserve(x->p, MAP, 0, &x->c) ||
	    ops->create(x->p, MAP, &x->ca) || ops->create(x->p, MAP, &x->cb) ||
	    ops->create(x->p, MAP, &x->cc) ||
	    ops->map(x->p, x->a, MAP, x->ca) ||
	    ops->map(x->p, x->b, MAP, x->cb) ||
	    ops->map(x->p, x->c, MAP, x->cc) ||
	    ops->set_access(x->p, x->b, MAP, VMU_ACCESS_READ) ||
	    ops->host_alloc(x->p, 1 << 20, &x->h) ||
	    ops->host_alloc(x->p, 1 << 20, &x->s) ||
	    /* a lane: a copy stream, events, a flag buffer */
	    ops->memset(x->p, x->a, 0, 64))
		return -1;
	F.calls[0] = 0;
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;

	/* what the VMU gives back before the backend goes */
	if (!atomic_load(&d->lost)) {
		x->p->ops->unmap(x->p, x->a, MAP);
		x->p->ops->unmap(x->p, x->b, MAP);
		x->p->ops->destroy(x->p, x->ca);
		x->p->ops->destroy(x->p, x->cb);
		x->p->ops->release(x->p, x->a, MAP);
		x->p->ops->release(x->p, x->b, MAP);
		x->p->ops->host_free(x->p, x->h, 1 << 20);
	}
	cuda_vmm_fini(d);
	if (atomic_load(&d->lost))
		munmap(x->h, 1 << 20); /* the VMU's, as host_free() would */
	while (d->lanes) {
		struct cuda_lane *l = d->lanes;

		d->lanes = l->next;
		free(l);
	}
	pthread_rwlock_destroy(&d->ctx_lock);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->mlock);
	free(d);
	free(x);
	return 0;
}

/* A kernel faults with @r, seen in cuStreamSynchronize. */
static void fault(struct fix *x, CUresult r)
{
	uint64_t n = __atomic_load_n(&x->d->base.faults, __ATOMIC_ACQUIRE);
	char msg[256];

	F.calls[0] = 0;
	F.poisoned = true;
	F.sticky = r;
	assert_int_equal(cuda_err(x->d, r, "cuStreamSynchronize", msg,
				  sizeof(msg)),
			 -EIO);
	assert_true(atomic_load(&x->d->lost));
	assert_int_equal(__atomic_load_n(&x->d->base.faults, __ATOMIC_ACQUIRE),
			 n + 1);
	assert_non_null(strstr(msg, "device context lost"));
}

/* The VMU frees C and S while the device is dead (its teardown of a
 * lost session): nothing is called into the context. (On a device that
 * recovers, the first of these recovers it on its way out: see
 * test_freed_while_lost.) */
static void free_while_dead(struct fix *x)
{
	size_t before = strlen(F.calls);

	assert_int_equal(x->p->ops->unmap(x->p, x->c, MAP), 0);
	x->p->ops->destroy(x->p, x->cc);
	x->p->ops->release(x->p, x->c, MAP);
	x->p->ops->host_free(x->p, x->s, 1 << 20);
	assert_int_equal(strlen(F.calls), before);
	/* and new memory is refused meanwhile */
	{
		uint64_t va;

		assert_int_equal(x->p->ops->reserve(x->p, MAP, 0, &va), -EIO);
	}
}

/* ------------------------------------------------------------------ */

/* A fault that a reset clears: the memory is kept, given its access
 * again and zeroed; a mapping the VMU unmapped while the device was lost
 * is unmapped in the new context; the zeros land before the text is
 * read-only again. */
static void test_recover(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;
	int ia = map_find(x->a), ib = map_find(x->b);
	long reset, sync;
	char msg[256] = "";

	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	/* the VMU unmaps C: not called into the poisoned context, but
	 * after the reset, by the recovery this thread runs on its way out
	 * of the device (cuda_leave()) */
	assert_int_equal(x->p->ops->unmap(x->p, x->c, MAP), 0);
	assert_false(atomic_load(&d->lost));
	assert_int_equal(cuda_backend_recover(&d->base, msg, sizeof(msg)), 0);
	printf("# calls: %.*s...\n", (int)at("ModuleGetFunction", 0), F.calls);

	assert_false(atomic_load(&d->lost));
	assert_null(__atomic_load_n(&d->base.dead, __ATOMIC_ACQUIRE));
	assert_int_equal(d->recoveries, 1);
	assert_int_equal(atomic_load(&d->gen), 1);
	/* the reset first: nothing called into the poisoned context */
	reset = at("DevicePrimaryCtxReset", 0);
	assert_int_equal(reset, 0);
	assert_true(at("DevicePrimaryCtxRelease", reset) >= 0);
	assert_true(at("DevicePrimaryCtxRetain", reset) >= 0);
	assert_int_equal(count("StreamDestroy"), 0);
	assert_int_equal(count("EventDestroy"), 0);
	assert_int_equal(count("MemFree"), 0);
	assert_int_equal(count("ModuleUnload"), 0);
	/* the memory is kept: nothing made again */
	assert_int_equal(count("MemCreate"), 0);
	assert_int_equal(count("MemAddressReserve"), 0);
	assert_int_equal(count("MemMap"), 0);
	assert_true(map_find(x->a) == ia && map_find(x->b) == ib);
	/* what the VMU let go of while lost: undone now, once, first */
	assert_int_equal(count("MemUnmap"), 1);
	assert_true(at("MemUnmap", reset) >= 0);
	assert_true(at("MemUnmap", reset) < at("SetAccessRW", reset));
	assert_int_equal(map_find(x->c), -1);
	assert_int_equal(count("SetAccessRW"), 2); /* A and B, not C */
	/* every mapping: access again, zeroed, waited for */
	assert_true(F.maps[ia].zeroed && F.maps[ib].zeroed);
	sync = at("CtxSynchronize", 0);
	assert_true(sync > at("MemsetD8@", 0));
	{
		char a[64], b[64];

		snprintf(a, sizeof(a), "MemsetD8@%#llx",
			 (unsigned long long)x->a);
		snprintf(b, sizeof(b), "MemsetD8@%#llx",
			 (unsigned long long)x->b);
		assert_true(at(a, 0) > at("SetAccessRW", reset));
		assert_true(at(a, 0) < sync && at(b, 0) < sync);
	}
	/* then the text is read-only again, after the zeros */
	assert_true(at("SetAccessR@", sync) > sync);
	assert_int_equal(F.maps[ia].access, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	assert_int_equal(F.maps[ib].access, CU_MEM_ACCESS_FLAGS_PROT_READ);
	/* the pinned host buffers are registered again */
	assert_int_equal(count("MemHostRegister"), 2);
	/* the kernels are loaded again, last */
	assert_true(at("ModuleLoadData", sync) > sync);
	assert_true(logged(LOG_ERR,
			   "cuda:0: fault 1: CUDA_ERROR_ILLEGAL_ADDRESS",
			   "in cuStreamSynchronize"));
	assert_true(logged(LOG_NOTICE, "cuda:0: recovered from fault 1", NULL));

	/* The device serves: a copy makes the lane's streams again, in the
	 * new context (the old ones went with the reset). */
	F.calls[0] = 0;
	assert_int_equal(x->p->ops->memset(x->p, x->a, 0, 64), 0);
	assert_true(at("StreamCreate", 0) >= 0);
	assert_true(at("StreamCreate", 0) < at("MemsetD8Async", 0));
	assert_int_equal(count("StreamDestroy"), 0);
}

/* Each kind of object the VMU lets go of while the device is lost
 * waits for the reset, and is let go of in the new context, once. */
static void test_freed_while_lost(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;
	CUmemGenericAllocationHandle hc =
		((struct cuda_chunk *)(uintptr_t)x->cc)->h;

	assert_int_equal(x->p->ops->unmap(x->p, x->c, MAP), 0);

	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	x->p->ops->destroy(x->p, x->cc);
	assert_false(atomic_load(&d->lost));
	assert_int_equal(count("MemRelease"), 1);
	assert_true(at("MemRelease", at("DevicePrimaryCtxReset", 0)) > 0);
	assert_false(F.live[hc]);

	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	x->p->ops->release(x->p, x->c, MAP);
	assert_false(atomic_load(&d->lost));
	assert_int_equal(count("MemAddressFree"), 1);
	assert_true(at("MemAddressFree", at("DevicePrimaryCtxReset", 0)) > 0);

	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	x->p->ops->host_free(x->p, x->s, 1 << 20);
	assert_false(atomic_load(&d->lost));
	assert_int_equal(count("MemHostUnregister"), 1);
	assert_true(at("MemHostUnregister", at("DevicePrimaryCtxReset", 0)) >
		    0);
	/* and only the kept buffer is registered again */
	assert_int_equal(count("MemHostRegister"), 1);
	assert_int_equal(d->recoveries, 3);
	assert_int_equal(__atomic_load_n(&d->base.faults, __ATOMIC_ACQUIRE), 3);
}

/* An error no reset clears: no reset; the device is dead, and says so
 * to every caller, the log and djinnd (backend.dead). */
static void test_fatal(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;
	const char *dead;
	char msg[512] = "";
	uint64_t va;

	fault(x, ERR_CONTAINED);
	free_while_dead(x);
	assert_int_equal(cuda_backend_recover(&d->base, msg, sizeof(msg)),
			 -EIO);
	printf("# %s\n", msg);
	assert_int_equal(count("DevicePrimaryCtxReset"), 0);
	assert_string_equal(F.calls, "");
	dead = __atomic_load_n(&d->base.dead, __ATOMIC_ACQUIRE);
	assert_non_null(dead);
	assert_string_equal(dead, "CUDA_ERROR_CONTAINED (226) in "
				  "cuStreamSynchronize; no context reset "
				  "clears it");
	assert_non_null(strstr(msg, "CUDA_ERROR_CONTAINED"));
	assert_non_null(strstr(msg, "djinnd exits so that systemd restarts"));
	assert_true(logged(LOG_ERR,
			   "cuda:0: the device is dead after "
			   "CUDA_ERROR_CONTAINED",
			   "until djinnd is restarted"));
	/* not tried again; every call fails with the reason */
	assert_int_equal(cuda_backend_recover(&d->base, msg, sizeof(msg)),
			 -EIO);
	assert_int_equal(x->p->ops->reserve(x->p, MAP, 0, &va), -EIO);
	assert_string_equal(F.calls, "");
}

/* A fatal error after a plain one, before recovery: no reset either. */
static void test_fatal_after_sticky(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;

	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	assert_int_equal(
		cuda_err(d, ERR_CONTAINED, "cuMemcpyDtoHAsync", NULL, 0), -EIO);
	/* one fault, counted once */
	assert_int_equal(__atomic_load_n(&d->base.faults, __ATOMIC_ACQUIRE), 1);
	assert_int_equal(cuda_backend_recover(&d->base, NULL, 0), -EIO);
	assert_int_equal(count("DevicePrimaryCtxReset"), 0);
	assert_string_equal(__atomic_load_n(&d->base.dead, __ATOMIC_ACQUIRE),
			    "CUDA_ERROR_CONTAINED (226) in cuMemcpyDtoHAsync; "
			    "no context reset clears it");
}

/* A reset that does not clear the error: the first call in the new
 * context fails with it, and the device is dead. */
static void test_still_sticky(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;
	const char *dead;
	char msg[512] = "";

	F.reset_keeps_poison = true;
	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	assert_int_equal(cuda_backend_recover(&d->base, msg, sizeof(msg)),
			 -EIO);
	printf("# calls: %s\n# %s\n", F.calls, msg);
	assert_int_equal(count("DevicePrimaryCtxReset"), 1);
	/* nothing after the first call that failed */
	assert_int_equal(count("SetAccessRW"), 1);
	assert_int_equal(count("MemsetD8"), 0);
	assert_int_equal(count("ModuleLoadData"), 0);
	dead = __atomic_load_n(&d->base.dead, __ATOMIC_ACQUIRE);
	assert_non_null(dead);
	assert_non_null(strstr(dead, "CUDA_ERROR_ILLEGAL_ADDRESS (700) in "
				     "cuStreamSynchronize; recovery failed: "
				     "cuMemSetAccess at "));
	assert_non_null(strstr(dead, "(still sticky after the context reset)"));
	assert_true(atomic_load(&d->lost));
	assert_true(
		logged(LOG_ERR, "the device is dead after", "still sticky"));
}

/* A driver whose reset took the mappings after all: found by the first
 * cuMemSetAccess (not assumed away), and the device is dead. */
static void test_mappings_gone(void **state)
{
	struct fix *x = *state;
	struct cuda_dev *d = x->d;
	const char *dead;

	F.reset_unmaps = true;
	fault(x, CUDA_ERROR_ILLEGAL_ADDRESS);
	assert_int_equal(cuda_backend_recover(&d->base, NULL, 0), -EIO);
	dead = __atomic_load_n(&d->base.dead, __ATOMIC_ACQUIRE);
	assert_non_null(dead);
	assert_non_null(strstr(dead, "recovery failed: cuMemSetAccess at "));
	assert_non_null(strstr(dead, "CUDA_ERROR_INVALID_VALUE"));
	assert_null(strstr(dead, "still sticky"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_recover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_freed_while_lost, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fatal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fatal_after_sticky, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_still_sticky, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_mappings_gone, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
