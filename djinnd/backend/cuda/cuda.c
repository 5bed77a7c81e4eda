// SPDX-License-Identifier: MIT
/*
 * The CUDA backend: one GPU through the Driver API, loaded at run time.
 *
 * The device's primary context is retained at create and made current
 * on each thread that enters it. Each thread that runs nodes or copies
 * gets a lane (cuda_internal.h): its own compute and copy streams, both
 * non-blocking, so graphs of different executor threads and the copies
 * of the I/O and memory threads run side by side on the GPU, and sync()
 * waits for the caller's stream only.
 *
 * Faults: a kernel that faults poisons the context; every later call in
 * it returns the same sticky error. cuda_err() sees it, marks the device
 * lost, counts the fault (backend.faults) and logs it; from then on
 * every entry fails -EIO naming the fault, until the thread that saw it
 * leaves the device and recovers it under ctx_lock for writing (no
 * other call is in the device): see recover() for each step. Memory
 * made by cuMemCreate, its reservations and its mappings belong to no
 * context: they stay where they are across the reset, and are given
 * their access again and zeroed; the pinned host buffers keep their
 * bytes and are registered again. The VMU's bookkeeping stays valid
 * throughout. An error no reset clears (cu_error_is_fatal()), or a
 * recovery that fails, leaves the device dead: backend.dead says why,
 * and djinnd exits so that systemd restarts it (Documentation/cuda.rst).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_internal.h"
#include "cuda_test.h"
#include "graph.h"

/* Memory left to the context, cuBLAS and the kernels' scratch: the larger
 * of this and 1/32 of the device. */
#define CUDA_HEADROOM (768ull << 20)

static atomic_uint next_serial = 1;

/* "CUDA_ERROR_CONTAINED (226)": @r's name and number, in @buf. */
static const char *cuda_errcode(const struct cuda_dev *d, CUresult r, char *buf,
				size_t len)
{
	const char *name = NULL;

	if (d->cu->GetErrorName(r, &name) != CUDA_SUCCESS)
		name = NULL;
	snprintf(buf, len, "%s (%d)", name ? name : "CUresult", (int)r);
	return buf;
}

int cuda_err(struct cuda_dev *d, CUresult r, const char *what, char *msg,
	     size_t msglen)
{
	const char *why;

	if (r == CUDA_SUCCESS)
		return 0;
	why = cu_errname(d->cu, r);
	if (cu_error_is_sticky(r)) {
		bool was;
		uint64_t n = 0;

		pthread_mutex_lock(&d->lock);
		was = atomic_exchange(&d->lost, true);
		/* the first error names the fault; a fatal one that comes
		 * before recovery decides what recovery does */
		if (!was ||
		    (cu_error_is_fatal(r) && !cu_error_is_fatal(d->lost_err))) {
			d->lost_err = r;
			snprintf(d->lost_in, sizeof(d->lost_in), "%s", what);
		}
		if (!was) {
			snprintf(d->lost_why, sizeof(d->lost_why),
				 "%s: device context lost: %s in %s", d->name,
				 why, what);
			n = ++d->faults;
			__atomic_store_n(&d->base.faults, d->faults,
					 __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&d->lock);
		if (n)
			cuda_log(LOG_ERR, "%s: fault %llu: %s in %s", d->name,
				 (unsigned long long)n, why, what);
		return errmsg(msg, msglen, -EIO,
			      "%s: device context lost: %s in %s", d->name, why,
			      what);
	}
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return errmsg(msg, msglen, -ENOMEM, "%s: %s: %s", d->name, what,
			      why);
	if (r == CUDA_ERROR_INVALID_VALUE)
		return errmsg(msg, msglen, -EINVAL, "%s: %s: %s", d->name, what,
			      why);
	return errmsg(msg, msglen, -EIO, "%s: %s: %s", d->name, what, why);
}

static struct cuda_dev *to_dev(struct backend *b)
{
	return (struct cuda_dev *)b;
}

/* ---------------------------------------------------------------------- */
/* Lanes */

/* A thread's lanes, by device serial: a few devices per thread at most. */
#define LANE_CACHE 8
static __thread struct {
	unsigned int serial;
	struct cuda_lane *lane;
} lane_cache[LANE_CACHE];

static void lane_release(struct cuda_dev *d, struct cuda_lane *l)
{
	const struct cu_api *cu = d->cu;

	if (l->blas)
		d->blas->Destroy(l->blas);
	if (l->done)
		cu->EventDestroy(l->done);
	if (l->computed)
		cu->EventDestroy(l->computed);
	if (l->compute)
		cu->StreamDestroy(l->compute);
	if (l->copy)
		cu->StreamDestroy(l->copy);
	if (l->flag)
		cu->MemFree(l->flag);
	if (l->stage)
		cu->MemFreeHost(l->stage);
	l->blas = NULL;
	l->done = l->computed = NULL;
	l->compute = l->copy = NULL;
	l->flag = 0;
	l->stage = NULL;
	l->stage_used = 0;
	l->nr_pend = 0;
	l->queued = false;
}

/* Make @l's streams in the current context. */
static int lane_setup(struct cuda_dev *d, struct cuda_lane *l, char *msg,
		      size_t msglen)
{
	const struct cu_api *cu = d->cu;
	CUresult r;
	int ret;

	/* a context reset took the last context's staging with it */
	l->stage = NULL;
	l->no_stage = false;
	l->stage_used = 0;
	l->nr_pend = 0;
	l->queued = false;
	r = cu->StreamCreate(&l->compute, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS)
		r = cu->StreamCreate(&l->copy, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS)
		r = cu->EventCreate(&l->done, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = cu->EventCreate(&l->computed, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = cu->MemAlloc(&l->flag, 64);
	if (r != CUDA_SUCCESS) {
		ret = cuda_err(d, r, "making a thread's streams", msg, msglen);
		lane_release(d, l);
		return ret;
	}
	if (d->blas) {
		if (d->blas->Create(&l->blas) ||
		    d->blas->SetStream(l->blas, l->compute)) {
			if (l->blas)
				d->blas->Destroy(l->blas);
			l->blas = NULL; /* the fallback kernel instead */
		}
	}
	l->gen = atomic_load(&d->gen);
	return 0;
}

static int lane_get(struct cuda_dev *d, struct cuda_lane **out, char *msg,
		    size_t msglen)
{
	struct cuda_lane *l = NULL;
	unsigned int slot = LANE_CACHE;
	int ret;

	for (unsigned int i = 0; i < LANE_CACHE; i++) {
		if (lane_cache[i].serial == d->serial) {
			l = lane_cache[i].lane;
			break;
		}
		if (!lane_cache[i].serial && slot == LANE_CACHE)
			slot = i;
	}
	if (l && l->gen == atomic_load(&d->gen)) {
		*out = l;
		return 0;
	}
	if (!l) {
		l = calloc(1, sizeof(*l));
		if (!l)
			return errmsg(msg, msglen, -ENOMEM,
				      "no memory for a lane");
		l->d = d;
		ret = lane_setup(d, l, msg, msglen);
		if (ret) {
			free(l);
			return ret;
		}
		pthread_mutex_lock(&d->lock);
		l->next = d->lanes;
		d->lanes = l;
		pthread_mutex_unlock(&d->lock);
		/* a full cache forgets its first entry (that lane stays on
		 * the device's list and is freed with it) */
		if (slot == LANE_CACHE)
			slot = 0;
		lane_cache[slot].serial = d->serial;
		lane_cache[slot].lane = l;
	} else {
		/* made before a context reset: the streams went with it */
		ret = lane_setup(d, l, msg, msglen);
		if (ret)
			return ret;
	}
	*out = l;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Entering the device */

int cuda_enter(struct cuda_dev *d, struct cuda_lane **lane, char *msg,
	       size_t msglen)
{
	CUresult r;
	int ret;

	pthread_rwlock_rdlock(&d->ctx_lock);
	if (atomic_load(&d->lost)) {
		pthread_mutex_lock(&d->lock);
		ret = errmsg(msg, msglen, -EIO, "%s", d->lost_why);
		pthread_mutex_unlock(&d->lock);
		goto fail;
	}
	r = d->cu->CtxSetCurrent(d->ctx);
	if (r != CUDA_SUCCESS) {
		ret = cuda_err(d, r, "cuCtxSetCurrent", msg, msglen);
		goto fail;
	}
	if (!lane)
		return 0;
	ret = lane_get(d, lane, msg, msglen);
	if (!ret)
		return 0;
fail:
	cuda_leave(d);
	return ret;
}

static int recover(struct cuda_dev *d, char *msg, size_t msglen);

void cuda_leave(struct cuda_dev *d)
{
	pthread_rwlock_unlock(&d->ctx_lock);
	if (atomic_load(&d->lost))
		recover(d, NULL, 0);
}

int cuda_launch(struct cuda_lane *lane, enum cuda_kernel k, uint64_t work,
		unsigned int threads, unsigned int shmem, void **args,
		char *msg, size_t msglen)
{
	struct cuda_dev *d = lane->d;
	uint64_t blocks = (work + threads - 1) / threads;
	CUresult r;

	/* grid-stride loops: a few waves of blocks are enough */
	if (blocks > (uint64_t)d->max_grid)
		blocks = (uint64_t)d->max_grid;
	if (!blocks)
		blocks = 1;
	r = d->cu->LaunchKernel(d->fn[k], (unsigned int)blocks, 1, 1, threads,
				1, 1, shmem, lane->compute, args, NULL);
	return cuda_err(d, r, "cuLaunchKernel", msg, msglen);
}

/* ---------------------------------------------------------------------- */
/* The context: made at create, remade by recovery */

static const char *const kernel_names[K_COUNT] = {
#define CUDA_K_NAME(n) "dj_" #n,
	CUDA_KERNELS(CUDA_K_NAME)
#undef CUDA_K_NAME
};

static int load_kernels(struct cuda_dev *d, char *msg, size_t msglen)
{
	const struct cu_api *cu = d->cu;
	CUresult r;

	r = cu->ModuleLoadData(&d->mod, djinn_cuda_fatbin);
	if (r != CUDA_SUCCESS)
		return cuda_err(d, r,
				"loading the kernels (a GPU older than sm_80, "
				"or a driver older than the toolkit's PTX?)",
				msg, msglen);
	for (unsigned int i = 0; i < K_COUNT; i++) {
		r = cu->ModuleGetFunction(&d->fn[i], d->mod, kernel_names[i]);
		if (r != CUDA_SUCCESS) {
			cuda_err(d, r, kernel_names[i], msg, msglen);
			cu->ModuleUnload(d->mod);
			d->mod = NULL;
			return -EIO;
		}
	}
	return 0;
}

/* Let go of everything the context holds (errors ignored: it may be
 * poisoned). */
static void drop_context(struct cuda_dev *d)
{
	const struct cu_api *cu = d->cu;

	pthread_mutex_lock(&d->lock);
	for (struct cuda_lane *l = d->lanes; l; l = l->next)
		lane_release(d, l);
	pthread_mutex_unlock(&d->lock);
	if (d->mod)
		cu->ModuleUnload(d->mod);
	d->mod = NULL;
}

/*
 * What recovery does with the old context's objects: it forgets them
 * without calling into the context. cuDevicePrimaryCtxReset "destroys
 * and cleans up all resources associated with the current device in the
 * current process" (streams, events, cuMemAlloc memory, modules), and in
 * a poisoned context "any further CUDA work will return the same error".
 * Only the cuBLAS handles are destroyed, for the host memory that is
 * cuBLAS's own (a status other than success is logged: expected in a
 * poisoned context). Each lane keeps its place on the list; every handle
 * in it is cleared, whatever fields the lane has, and lane_get() makes
 * new ones in the new context once the generation has moved on.
 */
static void forget_context(struct cuda_dev *d)
{
	pthread_mutex_lock(&d->lock);
	for (struct cuda_lane *l = d->lanes; l; l = l->next) {
		/* copies it queued are gone with the streams: its
		 * thread's next sync() fails */
		struct cuda_lane keep = { .d = l->d,
					  .next = l->next,
					  .gen = l->gen,
					  .lost = l->queued || l->lost };

		if (l->blas) {
			cublasStatus_t st = d->blas->Destroy(l->blas);

			if (st)
				cuda_log(LOG_INFO,
					 "%s: recovery: cublasDestroy: status "
					 "%d in the poisoned context",
					 d->name, (int)st);
		}
		*l = keep;
	}
	pthread_mutex_unlock(&d->lock);
	d->mod = NULL;
	memset(d->fn, 0, sizeof(d->fn));
}

/*
 * The device is lost for good: every call fails -EIO with the fault and
 * @why, recovery is not tried again, and backend.dead (@dead_why) makes
 * djinnd exit so that systemd restarts it. Under ctx_lock for writing.
 */
static int device_dead(struct cuda_dev *d, const char *why, char *msg,
		       size_t msglen)
{
	char code[64];
	size_t n;

	d->dead = true;
	pthread_mutex_lock(&d->lock);
	snprintf(d->dead_why, sizeof(d->dead_why), "%s in %s; %s",
		 cuda_errcode(d, d->lost_err, code, sizeof(code)), d->lost_in,
		 why);
	n = strlen(d->lost_why);
	snprintf(d->lost_why + n, sizeof(d->lost_why) - n,
		 "; %s: the device is dead, djinnd exits so that systemd "
		 "restarts it",
		 why);
	pthread_mutex_unlock(&d->lock);
	cuda_log(LOG_ERR,
		 "%s: the device is dead after %s: every call on it fails "
		 "-EIO until djinnd is restarted",
		 d->name, d->dead_why);
	__atomic_store_n(&d->base.dead, d->dead_why, __ATOMIC_RELEASE);
	return errmsg(msg, msglen, -EIO, "%s", d->lost_why);
}

/*
 * Recover a lost device, on the thread that saw the fault, under
 * ctx_lock for writing (no other call is in the device). Each step's
 * result is checked; a failure leaves the device dead (device_dead()):
 *
 * 1. an error no context reset clears (cu_error_is_fatal():
 *    CUDA_ERROR_CONTAINED, CUDA_ERROR_NVLINK_UNCORRECTABLE, ...): dead,
 *    without a reset;
 * 2. forget the old context's streams, events, module and cuBLAS
 *    handles (forget_context());
 * 3. cuDevicePrimaryCtxReset, then a fresh reference to the new primary
 *    context (cuDevicePrimaryCtxRelease of the one held since create,
 *    cuDevicePrimaryCtxRetain) made current with cuCtxSetCurrent;
 * 4. the memory (cuda_vmm_restore()): the chunks, reservations and
 *    mappings are kept, since no context owns them; every mapping gets
 *    its access again (cuMemSetAccess) and is zeroed, the host buffers
 *    are registered again, and cuCtxSynchronize waits for it all. The
 *    first of these calls is the first call in the new context: if it
 *    still fails with a sticky error the reset did not help;
 * 5. the kernels, loaded again.
 */
#define STILL_STICKY " (still sticky after the context reset)"

static int recover(struct cuda_dev *d, char *msg, size_t msglen)
{
	const struct cu_api *cu = d->cu;
	char why[320], fault[64], step[256];
	const char *call;
	CUresult r, err;
	uint64_t n;

	pthread_rwlock_wrlock(&d->ctx_lock);
	if (!atomic_load(&d->lost)) { /* another thread did it */
		pthread_rwlock_unlock(&d->ctx_lock);
		return 0;
	}
	if (d->dead) { /* every call fails */
		pthread_rwlock_unlock(&d->ctx_lock);
		pthread_mutex_lock(&d->lock);
		errmsg(msg, msglen, -EIO, "%s", d->lost_why);
		pthread_mutex_unlock(&d->lock);
		return -EIO;
	}
	pthread_mutex_lock(&d->lock);
	err = d->lost_err;
	n = d->faults;
	pthread_mutex_unlock(&d->lock);
	cuda_errcode(d, err, fault, sizeof(fault));

	/* 1 */
	if (cu_error_is_fatal(err)) {
		snprintf(why, sizeof(why), "no context reset clears it");
		goto dead;
	}
	cuda_log(LOG_WARNING,
		 "%s: recovering from fault %llu (%s): resetting the primary "
		 "context; device memory stays mapped and is zeroed",
		 d->name, (unsigned long long)n, fault);

	/* 2 */
	forget_context(d);

	/* 3 */
	r = cu->DevicePrimaryCtxReset(d->dev);
	call = "cuDevicePrimaryCtxReset";
	if (r == CUDA_SUCCESS) {
		r = cu->DevicePrimaryCtxRelease(d->dev);
		call = "cuDevicePrimaryCtxRelease";
	}
	if (r == CUDA_SUCCESS) {
		r = cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
		call = "cuDevicePrimaryCtxRetain";
	}
	if (r == CUDA_SUCCESS) {
		r = cu->CtxSetCurrent(d->ctx);
		call = "cuCtxSetCurrent";
	}
	if (r != CUDA_SUCCESS) {
		snprintf(why, sizeof(why), "recovery failed: %s: %s%s", call,
			 cu_errname(cu, r),
			 strcmp(call, "cuDevicePrimaryCtxReset") &&
					 cu_error_is_sticky(r) ?
				 STILL_STICKY :
				 "");
		goto dead;
	}
	atomic_fetch_add(&d->gen, 1);

	/* 4 */
	if (cuda_vmm_restore(d, &r, step, sizeof(step))) {
		snprintf(why, sizeof(why), "recovery failed: %s%s", step,
			 cu_error_is_sticky(r) ? STILL_STICKY : "");
		goto dead;
	}

	/* 5 */
	if (load_kernels(d, step, sizeof(step))) {
		snprintf(why, sizeof(why), "recovery failed: %s", step);
		goto dead;
	}

	d->recoveries++;
	atomic_store(&d->lost, false);
	pthread_rwlock_unlock(&d->ctx_lock);
	cuda_log(LOG_NOTICE,
		 "%s: recovered from fault %llu (%s): new context, device "
		 "memory zeroed at its addresses",
		 d->name, (unsigned long long)n, fault);
	return 0;

dead:
	device_dead(d, why, msg, msglen);
	pthread_rwlock_unlock(&d->ctx_lock);
	return -EIO;
}

int cuda_backend_recover(struct backend *b, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);

	if (!atomic_load(&d->lost))
		return 0;
	return recover(d, msg, msglen);
}

/* ---------------------------------------------------------------------- */
/* The backend */

/* The calling thread's lane of @d, if it has one, without entering. */
static struct cuda_lane *lane_peek(struct cuda_dev *d)
{
	for (unsigned int i = 0; i < LANE_CACHE; i++)
		if (lane_cache[i].serial == d->serial)
			return lane_cache[i].lane;
	return NULL;
}

/* After a sync(): no copy is queued. */
static void lane_synced(struct cuda_lane *l)
{
	l->nr_pend = 0;
	l->stage_used = 0;
	l->queued = false;
}

static int cuda_sync(struct backend *b)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_lane *l;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, NULL, 0);
	if (ret) {
		/* the copies' places are not written, nor ever will be */
		l = lane_peek(d);
		if (l)
			lane_synced(l);
		return -EIO;
	}
	r = d->cu->StreamSynchronize(l->compute);
	ret = r == CUDA_SUCCESS ?
		      0 :
		      (cuda_err(d, r, "cuStreamSynchronize", NULL, 0), -EIO);
	if (l->lost) { /* a reset dropped what this thread had queued */
		l->lost = false;
		ret = -EIO;
	}
	/* the copies out, staged, to their places */
	for (unsigned int i = 0; !ret && i < l->nr_pend; i++)
		memcpy(l->pend[i].dst, l->stage + l->pend[i].off,
		       l->pend[i].len);
	lane_synced(l);
	cuda_leave(d);
	return ret;
}

/* @len bytes of @l's staging for a copy queued now (made on first use),
 * or NULL: the copy goes straight. */
static uint8_t *stage_take(struct cuda_dev *d, struct cuda_lane *l,
			   uint64_t len, uint64_t *off)
{
	uint64_t at = (l->stage_used + 255) & ~255ull;

	if (!l->stage && !l->no_stage &&
	    d->cu->MemHostAlloc((void **)&l->stage, CUDA_STAGE, 0) !=
		    CUDA_SUCCESS) {
		l->stage = NULL;
		l->no_stage = true; /* until a context reset */
		cuda_log(LOG_INFO,
			 "%s: cuMemHostAlloc of %u bytes failed: a graph's "
			 "copies go from and to pageable memory",
			 d->name, CUDA_STAGE);
	}
	if (!l->stage || len > CUDA_STAGE || at > CUDA_STAGE - len)
		return NULL;
	l->stage_used = at + len;
	*off = at;
	return l->stage + at;
}

/* In the compute stream's order, from the lane's pinned staging (or, not
 * fitting, from @src: pageable memory the driver stages itself). */
static int cuda_copy_in(struct backend *b, uint64_t dst, const void *src,
			uint64_t len, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_lane *l;
	uint64_t off;
	uint8_t *p;
	int ret;

	ret = cuda_enter(d, &l, msg, msglen);
	if (ret)
		return ret;
	p = stage_take(d, l, len, &off);
	if (p)
		memcpy(p, src, len);
	ret = cuda_err(
		d, d->cu->MemcpyHtoDAsync(dst, p ? p : src, len, l->compute),
		"cuMemcpyHtoDAsync", msg, msglen);
	l->queued = true;
	cuda_leave(d);
	return ret;
}

static int cuda_copy_out(struct backend *b, void *dst, uint64_t src,
			 uint64_t len, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_lane *l;
	uint64_t off = 0;
	uint8_t *p = NULL;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, msg, msglen);
	if (ret)
		return ret;
	if (l->nr_pend < CUDA_OUT_PEND)
		p = stage_take(d, l, len, &off);
	if (p) {
		r = d->cu->MemcpyDtoHAsync(p, src, len, l->compute);
		if (r == CUDA_SUCCESS)
			l->pend[l->nr_pend++] =
				(struct cuda_out_pend){ dst, off, len };
	} else {
		/* to pageable memory: it returns once the stream is there */
		r = d->cu->MemcpyDtoHAsync(dst, src, len, l->compute);
	}
	ret = cuda_err(d, r, "cuMemcpyDtoHAsync", msg, msglen);
	l->queued = true;
	cuda_leave(d);
	return ret;
}

static void cuda_fault_info(struct backend *b, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);

	pthread_mutex_lock(&d->lock);
	snprintf(msg, msglen, "%s", d->faults ? d->lost_why : "");
	pthread_mutex_unlock(&d->lock);
}

/*
 * Fault injection (djinnd --fault-injection, for tests): a kernel that
 * stores to address 0, launched on the caller's compute stream and
 * waited for. The sticky error it causes is seen, counted and recovered
 * by the same code as any other fault: recovery runs in cuda_leave().
 */
static const char fault_ptx[] = ".version 7.0\n"
				".target sm_80\n"
				".address_size 64\n"
				".visible .entry dj_fault()\n"
				"{\n"
				"\t.reg .b64 %rd<2>;\n"
				"\t.reg .f32 %f1;\n"
				"\tmov.u64 %rd1, 0;\n"
				"\tmov.f32 %f1, 0f3F800000;\n"
				"\tst.global.f32 [%rd1], %f1;\n"
				"\tret;\n"
				"}\n";

static int cuda_inject_fault(struct backend *b, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	const struct cu_api *cu = d->cu;
	struct cuda_lane *l;
	uint64_t before = __atomic_load_n(&b->faults, __ATOMIC_ACQUIRE);
	CUmodule mod = NULL;
	CUfunction fn;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, msg, msglen);
	if (ret)
		return ret;
	r = cu->ModuleLoadData(&mod, fault_ptx);
	if (r == CUDA_SUCCESS)
		r = cu->ModuleGetFunction(&fn, mod, "dj_fault");
	if (r == CUDA_SUCCESS)
		r = cu->LaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, l->compute, NULL,
				     NULL);
	if (r == CUDA_SUCCESS)
		r = cu->StreamSynchronize(l->compute);
	ret = cuda_err(d, r, "the injected fault kernel", msg, msglen);
	/* a poisoned context's reset unloads it */
	if (mod && !atomic_load(&d->lost)) {
		r = cu->ModuleUnload(mod);
		if (cuda_err(d, r, "cuModuleUnload", NULL, 0))
			cuda_log(LOG_WARNING,
				 "%s: unloading the fault kernel: %s", d->name,
				 cu_errname(cu, r));
	}
	cuda_leave(d); /* recovers */
	if (__atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) == before)
		return ret ? ret :
			     errmsg(msg, msglen, -EIO,
				    "%s: the fault kernel did not fault",
				    d->name);
	/* faulted, as asked; -EIO if the recovery failed */
	if (atomic_load(&d->lost)) {
		cuda_fault_info(b, msg, msglen);
		return -EIO;
	}
	return 0;
}

static void cuda_destroy(struct backend *b)
{
	struct cuda_dev *d = to_dev(b);
	const struct cu_api *cu;

	if (!b)
		return;
	cu = d->cu;
	cu->CtxSetCurrent(d->ctx);
	if (!atomic_load(&d->lost))
		cu->CtxSynchronize();
	cuda_wire_fini(d);
	drop_context(d);
	while (d->lanes) {
		struct cuda_lane *l = d->lanes;

		d->lanes = l->next;
		free(l);
	}
	cuda_vmm_fini(d);
	cu->DevicePrimaryCtxRelease(d->dev);
	pthread_rwlock_destroy(&d->ctx_lock);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->mlock);
	free(d);
}

static const struct backend_ops cuda_backend_ops = {
	.run_node = cuda_run_node,
	.module_load = cuda_wire_module_load,
	.run_kernel = cuda_wire_run_kernel,
	.copy_in = cuda_copy_in,
	.copy_out = cuda_copy_out,
	.sync = cuda_sync,
	.destroy = cuda_destroy,
	.inject_fault = cuda_inject_fault,
	.fault_info = cuda_fault_info,
};

int cuda_devices(unsigned int *n, char *msg, size_t msglen)
{
	const struct cu_api *cu;
	int count = 0, ret;
	CUresult r;

	ret = cu_api_load(&cu, msg, msglen);
	if (ret)
		return ret;
	r = cu->DeviceGetCount(&count);
	if (r != CUDA_SUCCESS)
		return errmsg(msg, msglen, -ENODEV, "cuDeviceGetCount: %s",
			      cu_errname(cu, r));
	*n = count < 0 ? 0 : (unsigned int)count;
	return 0;
}

static int attr(struct cuda_dev *d, CUdevice_attribute a, int *v)
{
	return d->cu->DeviceGetAttribute(v, a, d->dev) == CUDA_SUCCESS ? 0 :
									 -EIO;
}

int cuda_backend_create(unsigned int ordinal, uint64_t mem_limit,
			struct backend **out, char *msg, size_t msglen)
{
	const struct cu_api *cu;
	struct cuda_dev *d;
	pthread_rwlockattr_t ra;
	size_t free_b = 0, total_b = 0;
	uint64_t cap, headroom;
	char why[512], blas[80];
	unsigned int n;
	CUresult r;
	int ret, compat;

	ret = cuda_devices(&n, msg, msglen);
	if (ret)
		return ret;
	cu_api_load(&cu, NULL, 0);
	/* a driver older than the toolkit the kernels were built with */
	compat = cu_version_check(cu->driver_version, CUDA_VERSION, why,
				  sizeof(why));
	if (compat < 0)
		return errmsg(msg, msglen, compat, "%s", why);
	if (ordinal >= n)
		return errmsg(msg, msglen, -ENODEV,
			      "no CUDA device %u: the driver sees %u", ordinal,
			      n);
	d = calloc(1, sizeof(*d));
	if (!d)
		return errmsg(msg, msglen, -ENOMEM, "out of memory");
	d->cu = cu;
	d->ordinal = (int)ordinal;
	d->serial = atomic_fetch_add(&next_serial, 1);
	snprintf(d->name, sizeof(d->name), "cuda:%u", ordinal);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&d->ctx_lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->mlock, NULL);

	r = cu->DeviceGet(&d->dev, (int)ordinal);
	if (r == CUDA_SUCCESS)
		r = cu->DeviceGetName(d->model, sizeof(d->model), d->dev);
	if (r == CUDA_SUCCESS)
		r = cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
	if (r != CUDA_SUCCESS) {
		ret = errmsg(msg, msglen, -ENODEV, "%s: %s", d->name,
			     cu_errname(cu, r));
		goto out_free;
	}
	r = cu->CtxSetCurrent(d->ctx);
	if (r != CUDA_SUCCESS) {
		ret = cuda_err(d, r, "cuCtxSetCurrent", msg, msglen);
		goto out_ctx;
	}
	if (attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
		 &d->cc_major) ||
	    attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
		 &d->cc_minor) ||
	    attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->sms)) {
		ret = errmsg(msg, msglen, -EIO, "%s: cuDeviceGetAttribute",
			     d->name);
		goto out_ctx;
	}
	if (d->cc_major < 8) {
		ret = errmsg(msg, msglen, -ENODEV,
			     "%s: %s is sm_%d%d; djinnd's kernels need "
			     "sm_80 or newer",
			     d->name, d->model, d->cc_major, d->cc_minor);
		goto out_ctx;
	}
	/* grid-stride kernels: 32 blocks per SM keep every SM busy */
	d->max_grid = d->sms * 32;
	ret = load_kernels(d, msg, msglen);
	if (ret)
		goto out_ctx;
	/* made and destroyed a handle in this context (logged either way) */
	if (cublas_api_load(&d->blas, why, sizeof(why)))
		d->blas = NULL; /* matmul runs on the fallback kernel */
	if (d->blas && d->blas->release)
		snprintf(blas, sizeof(blas), "%s %d.%d.%d", d->blas->version,
			 d->blas->release / 10000, d->blas->release / 100 % 100,
			 d->blas->release % 100);
	else
		snprintf(blas, sizeof(blas), "%s",
			 d->blas ? d->blas->version :
				   "no working cuBLAS: MATMUL on the fallback "
				   "GEMM kernel");

	r = cu->MemGetInfo(&free_b, &total_b);
	if (r != CUDA_SUCCESS) {
		ret = cuda_err(d, r, "cuMemGetInfo", msg, msglen);
		goto out_mod;
	}
	ret = cuda_vmm_init(d, msg, msglen);
	if (ret)
		goto out_mod;
	headroom = total_b / 32 > CUDA_HEADROOM ? total_b / 32 : CUDA_HEADROOM;
	cap = free_b > headroom ? free_b - headroom : 0;
	if (mem_limit && mem_limit < cap)
		cap = mem_limit;
	cap -= cap % d->vmm.base.granularity;
	if (!cap) {
		ret = errmsg(msg, msglen, -ENOMEM,
			     "%s: %zu MiB free of %zu: nothing left for "
			     "sessions",
			     d->name, free_b >> 20, total_b >> 20);
		goto out_mod;
	}
	d->vmm.base.capacity = cap;

	d->base.ops = &cuda_backend_ops;
	d->base.name = d->name;
	/* each compute thread gets its own lane (streams, cuBLAS): eight
	 * sessions' kernels at once by default, sixteen at most */
	d->base.max_compute = 16;
	d->base.def_compute = 8;
	d->base.provider = &d->vmm.base;
	errmsg(msg, msglen, 0,
	       "%s, sm_%d%d, %d SMs, %.1f GiB (%.1f free, %.1f for "
	       "sessions), driver %d.%d%s, kernels %d.%d, %s",
	       d->model, d->cc_major, d->cc_minor, d->sms,
	       (double)total_b / (1 << 30), (double)free_b / (1 << 30),
	       (double)cap / (1 << 30), cu->driver_version / 1000,
	       cu->driver_version % 1000 / 10,
	       compat ? " (older: their SASS only)" : "", CUDA_VERSION / 1000,
	       CUDA_VERSION % 1000 / 10, blas);
	*out = &d->base;
	return 0;

out_mod:
	cu->ModuleUnload(d->mod);
out_ctx:
	cu->DevicePrimaryCtxRelease(d->dev);
out_free:
	pthread_rwlock_destroy(&d->ctx_lock);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->mlock);
	free(d);
	return ret;
}
