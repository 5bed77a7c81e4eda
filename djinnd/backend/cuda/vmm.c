// SPDX-License-Identifier: MIT
/*
 * The CUDA provider: the VMU on CUDA virtual memory management.
 *
 * Each provider operation is the driver call provider.h names for it:
 * reserve/release are cuMemAddressReserve/cuMemAddressFree, create and
 * destroy cuMemCreate/cuMemRelease of pinned device memory, map is
 * cuMemMap then cuMemSetAccess (read-write for this device), unmap
 * cuMemUnmap. Granularity is cuMemGetAllocationGranularity's minimum
 * for the device (2 MiB on current GPUs).
 *
 * Copies are synchronous, as provider.h requires: each is enqueued on
 * the calling thread's copy stream and waited for. A copy from or to a
 * pinned buffer (host_alloc) is a DMA at the link's full speed and runs
 * beside the kernels of the compute streams; one from pageable memory is
 * staged by the driver.
 *
 * host_alloc is pinned memory: anonymous memory registered with
 * cuMemHostRegister (page-locked, mapped for the device, portable), not
 * cuMemHostAlloc, so that it outlives a context reset: after a fault the
 * swapped-out regions, which live there, keep their bytes, and recovery
 * registers the buffers again.
 *
 * The provider remembers every reservation, chunk, mapping and host
 * buffer, for recovery (cuda.c, recover()). Memory made by cuMemCreate,
 * its reservations and its mappings belong to no context: a context
 * reset leaves them where they are, and recovery keeps them, gives each
 * mapping its access again and zeroes it (cuda_vmm_restore()). What the
 * VMU lets go of while the device is lost (a poisoned context answers
 * every call with its sticky error) is not called into the driver then:
 * it waits on the stale lists, and recovery undoes it in the new
 * context. Every driver call's result is checked; one the provider
 * cannot return is logged.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_internal.h"

static struct cuda_vmm *to_vmm(struct vmu_provider *p)
{
	return (struct cuda_vmm *)p;
}

/* Enter the device for a provider call (the lane for copies). */
#define VMM_ENTER(v, lane)                                  \
	do {                                                \
		int _r = cuda_enter((v)->d, lane, NULL, 0); \
		if (_r)                                     \
			return _r;                          \
	} while (0)

/*
 * Teardown (release, destroy, unmap, host_free) keeps the provider's
 * books whether or not the device is lost, so it does not use
 * cuda_enter(). teardown_enter() takes ctx_lock for reading and makes
 * the context current unless the device is lost: CUDA_SUCCESS when the
 * driver may be called, else the result for teardown(), with *@what
 * the call that failed where one did. cuda_leave() ends it (and
 * recovers, if the call found the context poisoned).
 */
static CUresult teardown_enter(struct cuda_dev *d, const char **what)
{
	CUresult r;

	pthread_rwlock_rdlock(&d->ctx_lock);
	if (atomic_load(&d->lost))
		return CUDA_ERROR_CONTEXT_IS_DESTROYED; /* not called */
	r = d->cu->CtxSetCurrent(d->ctx);
	if (r != CUDA_SUCCESS)
		*what = "cuCtxSetCurrent";
	return r;
}

enum teardown_result {
	TD_DONE, /* the driver did it */
	TD_LATER, /* the device is lost: recovery does it, after the reset */
	TD_FAILED, /* another error, logged: the object is left as it is */
};

/* How a teardown call @what of [@va, +@size) went, from its result @r. */
static enum teardown_result teardown(struct cuda_dev *d, CUresult r,
				     const char *what, uint64_t va,
				     uint64_t size)
{
	if (r == CUDA_SUCCESS)
		return TD_DONE;
	/* lost before the call (not made), or by it (a sticky error) */
	if (atomic_load(&d->lost) ||
	    (cuda_err(d, r, what, NULL, 0) && atomic_load(&d->lost)))
		return TD_LATER;
	cuda_log(LOG_WARNING, "%s: %s at %#llx (%llu bytes): %s", d->name, what,
		 (unsigned long long)va, (unsigned long long)size,
		 cu_errname(d->cu, r));
	return TD_FAILED;
}

/* A driver call whose failure no caller hears of: checked and logged
 * (a sticky error marks the device lost, as everywhere). */
static void check(struct cuda_dev *d, CUresult r, const char *what, uint64_t va,
		  uint64_t size)
{
	if (cuda_err(d, r, what, NULL, 0))
		cuda_log(LOG_WARNING, "%s: %s at %#llx (%llu bytes): %s",
			 d->name, what, (unsigned long long)va,
			 (unsigned long long)size, cu_errname(d->cu, r));
}

static int span_add(struct cuda_span **list, uint64_t va, uint64_t size,
		    struct cuda_chunk *c)
{
	struct cuda_span *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->va = va;
	s->size = size;
	s->chunk = c;
	s->access = VMU_ACCESS_READWRITE;
	s->next = *list;
	*list = s;
	return 0;
}

static struct cuda_span **span_find(struct cuda_span **list, uint64_t va)
{
	for (; *list; list = &(*list)->next)
		if ((*list)->va == va)
			return list;
	return NULL;
}

static void span_del(struct cuda_span **at)
{
	struct cuda_span *s = *at;

	*at = s->next;
	free(s);
}

static CUmemAllocationProp chunk_prop(struct cuda_dev *d)
{
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d->ordinal;
	return prop;
}

static CUmemAccessDesc access_desc(struct cuda_dev *d, unsigned int access)
{
	CUmemAccessDesc a;

	memset(&a, 0, sizeof(a));
	a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.location.id = d->ordinal;
	a.flags = access == VMU_ACCESS_READWRITE ?
			  CU_MEM_ACCESS_FLAGS_PROT_READWRITE :
		  access == VMU_ACCESS_READ ? CU_MEM_ACCESS_FLAGS_PROT_READ :
					      CU_MEM_ACCESS_FLAGS_PROT_NONE;
	return a;
}

/* ---------------------------------------------------------------------- */
/* Address space and physical memory */

static int vmm_reserve(struct vmu_provider *p, uint64_t size, uint64_t align,
		       uint64_t *va)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	CUdeviceptr ptr = 0;
	CUresult r;
	int ret;

	VMM_ENTER(v, NULL);
	r = d->cu->MemAddressReserve(&ptr, size, align, 0, 0);
	ret = cuda_err(d, r, "cuMemAddressReserve", NULL, 0);
	if (!ret) {
		pthread_mutex_lock(&d->lock);
		ret = span_add(&v->resv, ptr, size, NULL);
		pthread_mutex_unlock(&d->lock);
		if (ret)
			check(d, d->cu->MemAddressFree(ptr, size),
			      "cuMemAddressFree", ptr, size);
		else
			*va = ptr;
	}
	cuda_leave(d);
	return ret;
}

static void vmm_release(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_span **at, *s = NULL;
	enum teardown_result td;
	const char *what = "cuMemAddressFree";
	CUresult r;

	r = teardown_enter(d, &what);
	if (r == CUDA_SUCCESS)
		r = d->cu->MemAddressFree(va, size);
	td = teardown(d, r, what, va, size);
	pthread_mutex_lock(&d->lock);
	at = span_find(&v->resv, va);
	if (at) {
		s = *at;
		*at = s->next;
		if (td == TD_LATER) {
			s->next = v->stale_resv;
			v->stale_resv = s;
			s = NULL;
		}
	}
	pthread_mutex_unlock(&d->lock);
	free(s);
	cuda_leave(d);
}

static int vmm_create(struct vmu_provider *p, uint64_t size, uint64_t *chunk)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	CUmemAllocationProp prop = chunk_prop(d);
	struct cuda_chunk *c;
	CUresult r;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&d->lock);
	if (size > p->capacity - v->used) {
		pthread_mutex_unlock(&d->lock);
		free(c);
		return -ENOMEM;
	}
	v->used += size;
	pthread_mutex_unlock(&d->lock);

	ret = cuda_enter(d, NULL, NULL, 0);
	if (!ret) {
		r = d->cu->MemCreate(&c->h, size, &prop, 0);
		ret = cuda_err(d, r, "cuMemCreate", NULL, 0);
		cuda_leave(d);
	}
	pthread_mutex_lock(&d->lock);
	if (ret) {
		v->used -= size;
		free(c);
	} else {
		c->size = size;
		c->next = v->chunks.next;
		c->prev = &v->chunks;
		v->chunks.next->prev = c;
		v->chunks.next = c;
		*chunk = (uintptr_t)c;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static void vmm_destroy(struct vmu_provider *p, uint64_t chunk)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_chunk *c = (struct cuda_chunk *)(uintptr_t)chunk;
	enum teardown_result td;
	const char *what = "cuMemRelease";
	CUresult r;

	r = teardown_enter(d, &what);
	if (r == CUDA_SUCCESS)
		r = d->cu->MemRelease(c->h);
	td = teardown(d, r, what, 0, c->size);
	pthread_mutex_lock(&d->lock);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	v->used -= c->size;
	/* a mapping of it left behind (the VMU unmaps first) goes too */
	for (struct cuda_span **at = &v->maps; *at;)
		if ((*at)->chunk == c)
			span_del(at);
		else
			at = &(*at)->next;
	if (td == TD_LATER) { /* released after the reset */
		c->next = v->stale_chunks.next;
		c->prev = &v->stale_chunks;
		v->stale_chunks.next->prev = c;
		v->stale_chunks.next = c;
		c = NULL;
	}
	pthread_mutex_unlock(&d->lock);
	cuda_leave(d);
	free(c);
}

/* Undo a cuMemMap the books do not hold: now, or after the reset when
 * the device is lost (the mapping outlives the reset). */
static void map_undo(struct cuda_dev *d, uint64_t va, uint64_t size)
{
	struct cuda_vmm *v = &d->vmm;
	CUresult r = CUDA_ERROR_CONTEXT_IS_DESTROYED; /* not called */
	int ret;

	if (!atomic_load(&d->lost))
		r = d->cu->MemUnmap(va, size);
	if (teardown(d, r, "cuMemUnmap", va, size) != TD_LATER)
		return;
	pthread_mutex_lock(&d->lock);
	ret = span_add(&v->stale_maps, va, size, NULL);
	pthread_mutex_unlock(&d->lock);
	if (ret)
		cuda_log(LOG_ERR,
			 "%s: out of memory: the mapping at %#llx outlives "
			 "recovery",
			 d->name, (unsigned long long)va);
}

static int vmm_map(struct vmu_provider *p, uint64_t va, uint64_t size,
		   uint64_t chunk)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_chunk *c = (struct cuda_chunk *)(uintptr_t)chunk;
	CUmemAccessDesc a = access_desc(d, VMU_ACCESS_READWRITE);
	CUresult r;
	int ret;

	if (size > c->size)
		return -EINVAL;
	VMM_ENTER(v, NULL);
	r = d->cu->MemMap(va, size, 0, c->h, 0);
	ret = cuda_err(d, r, "cuMemMap", NULL, 0);
	if (!ret) {
		r = d->cu->MemSetAccess(va, size, &a, 1);
		ret = cuda_err(d, r, "cuMemSetAccess", NULL, 0);
		if (ret)
			map_undo(d, va, size);
	}
	if (!ret) {
		pthread_mutex_lock(&d->lock);
		ret = span_add(&v->maps, va, size, c);
		pthread_mutex_unlock(&d->lock);
		if (ret)
			map_undo(d, va, size);
	}
	cuda_leave(d);
	return ret;
}

static int vmm_unmap(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_span **at, *s;
	enum teardown_result td;
	const char *what = "cuMemUnmap";
	CUresult r;

	/* On a lost device the mapping is unmapped after the reset (which
	 * keeps it): until then recovery neither zeroes it nor maps the
	 * address again. */
	r = teardown_enter(d, &what);
	if (r == CUDA_SUCCESS)
		r = d->cu->MemUnmap(va, size);
	td = teardown(d, r, what, va, size);
	if (td == TD_FAILED) { /* still mapped, as far as anyone knows */
		cuda_leave(d);
		return -EIO;
	}
	pthread_mutex_lock(&d->lock);
	at = span_find(&v->maps, va);
	if (at) {
		s = *at;
		*at = s->next;
		s->chunk = NULL;
		if (td == TD_LATER) {
			s->next = v->stale_maps;
			v->stale_maps = s;
		} else {
			free(s);
		}
	}
	pthread_mutex_unlock(&d->lock);
	cuda_leave(d);
	return 0;
}

static int vmm_set_access(struct vmu_provider *p, uint64_t va, uint64_t size,
			  enum vmu_access access)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	CUmemAccessDesc a = access_desc(d, access);
	CUresult r;
	int ret;

	VMM_ENTER(v, NULL);
	if (access == VMU_ACCESS_READ && d->no_read_only)
		a = access_desc(d, VMU_ACCESS_READWRITE);
	r = d->cu->MemSetAccess(va, size, &a, 1);
	if (access == VMU_ACCESS_READ && !d->no_read_only &&
	    (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED)) {
		/* A driver that cannot make device memory read-only: the
		 * text segment stays read-only to clients (TENSOR_WRITE is
		 * refused), not to kernels. */
		d->no_read_only = true;
		a = access_desc(d, VMU_ACCESS_READWRITE);
		r = d->cu->MemSetAccess(va, size, &a, 1);
	}
	ret = cuda_err(d, r, "cuMemSetAccess", NULL, 0);
	if (!ret) {
		/* remembered per mapping, for recovery */
		pthread_mutex_lock(&d->lock);
		for (struct cuda_span *s = v->maps; s; s = s->next)
			if (s->va >= va && s->va - va < size)
				s->access =
					a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ ?
						VMU_ACCESS_READ :
					a.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ?
						VMU_ACCESS_NONE :
						VMU_ACCESS_READWRITE;
		pthread_mutex_unlock(&d->lock);
	}
	cuda_leave(d);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Copies: the calling thread's copy stream, waited for */

static int copy_wait(struct cuda_dev *d, struct cuda_lane *l, CUresult r,
		     const char *what)
{
	if (r == CUDA_SUCCESS)
		r = d->cu->StreamSynchronize(l->copy);
	return cuda_err(d, r, what, NULL, 0);
}

static int vmm_copy_htod(struct vmu_provider *p, uint64_t dst, const void *src,
			 uint64_t len)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_lane *l;
	int ret;

	VMM_ENTER(v, &l);
	ret = copy_wait(v->d, l,
			v->d->cu->MemcpyHtoDAsync(dst, src, len, l->copy),
			"cuMemcpyHtoDAsync");
	cuda_leave(v->d);
	return ret;
}

static int vmm_copy_dtoh(struct vmu_provider *p, void *dst, uint64_t src,
			 uint64_t len)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_lane *l;
	int ret;

	VMM_ENTER(v, &l);
	ret = copy_wait(v->d, l,
			v->d->cu->MemcpyDtoHAsync(dst, src, len, l->copy),
			"cuMemcpyDtoHAsync");
	cuda_leave(v->d);
	return ret;
}

static int vmm_copy_dtod(struct vmu_provider *p, uint64_t dst, uint64_t src,
			 uint64_t len)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_lane *l;
	int ret;

	VMM_ENTER(v, &l);
	ret = copy_wait(v->d, l,
			v->d->cu->MemcpyDtoDAsync(dst, src, len, l->copy),
			"cuMemcpyDtoDAsync");
	cuda_leave(v->d);
	return ret;
}

static int vmm_memset(struct vmu_provider *p, uint64_t dst, int byte,
		      uint64_t len)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_lane *l;
	int ret;

	VMM_ENTER(v, &l);
	ret = copy_wait(v->d, l,
			v->d->cu->MemsetD8Async(dst, (unsigned char)byte, len,
						l->copy),
			"cuMemsetD8Async");
	cuda_leave(v->d);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Pinned host memory */

#define HOST_REG_FLAGS \
	(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)

static int vmm_host_alloc(struct vmu_provider *p, uint64_t size, void **buf)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	void *m;
	CUresult r;
	int ret;

	if (!size)
		return -EINVAL;
	m = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	ret = cuda_enter(d, NULL, NULL, 0);
	if (!ret) {
		r = d->cu->MemHostRegister(m, size, HOST_REG_FLAGS);
		ret = cuda_err(d, r, "cuMemHostRegister", NULL, 0);
		if (!ret) {
			pthread_mutex_lock(&d->lock);
			ret = span_add(&v->host, (uintptr_t)m, size, NULL);
			pthread_mutex_unlock(&d->lock);
			if (ret)
				check(d, d->cu->MemHostUnregister(m),
				      "cuMemHostUnregister", (uintptr_t)m,
				      size);
		}
		cuda_leave(d);
	}
	if (ret) {
		munmap(m, size);
		return ret;
	}
	*buf = m;
	return 0;
}

static void vmm_host_free(struct vmu_provider *p, void *buf, uint64_t size)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_span **at, *s = NULL;
	enum teardown_result td;
	const char *what = "cuMemHostUnregister";
	CUresult r;

	r = teardown_enter(d, &what);
	if (r == CUDA_SUCCESS)
		r = d->cu->MemHostUnregister(buf);
	td = teardown(d, r, what, (uintptr_t)buf, size);
	pthread_mutex_lock(&d->lock);
	at = span_find(&v->host, (uintptr_t)buf);
	if (at) {
		s = *at;
		*at = s->next;
		if (td == TD_LATER) { /* unregistered and unmapped after the
				       * reset */
			s->next = v->stale_host;
			v->stale_host = s;
			s = NULL;
		}
	}
	pthread_mutex_unlock(&d->lock);
	cuda_leave(d);
	free(s);
	/* memory still registered (an unregister that failed) is leaked
	 * rather than unmapped under the driver */
	if (td == TD_DONE)
		munmap(buf, size);
}

/* The provider is part of the device: cuda_destroy() frees both. */
static void vmm_free(struct vmu_provider *p)
{
}

static const struct vmu_provider_ops cuda_vmm_ops = {
	.reserve = vmm_reserve,
	.release = vmm_release,
	.create = vmm_create,
	.destroy = vmm_destroy,
	.map = vmm_map,
	.unmap = vmm_unmap,
	.set_access = vmm_set_access,
	.copy_htod = vmm_copy_htod,
	.copy_dtoh = vmm_copy_dtoh,
	.copy_dtod = vmm_copy_dtod,
	.memset = vmm_memset,
	.host_alloc = vmm_host_alloc,
	.host_free = vmm_host_free,
	.free = vmm_free,
};

int cuda_vmm_init(struct cuda_dev *d, char *msg, size_t msglen)
{
	struct cuda_vmm *v = &d->vmm;
	CUmemAllocationProp prop = chunk_prop(d);
	size_t gran = 0;
	CUresult r;

	r = d->cu->MemGetAllocationGranularity(
		&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS)
		return cuda_err(d, r, "cuMemGetAllocationGranularity", msg,
				msglen);
	if (!gran || (gran & (gran - 1)))
		return errmsg(msg, msglen, -EIO,
			      "%s: granularity %zu is not a power of two",
			      d->name, gran);
	v->d = d;
	snprintf(v->name, sizeof(v->name), "%s", d->name);
	v->base.ops = &cuda_vmm_ops;
	v->base.name = v->name;
	v->base.granularity = gran;
	v->base.device_only = true;
	v->chunks.next = v->chunks.prev = &v->chunks;
	v->stale_chunks.next = v->stale_chunks.prev = &v->stale_chunks;
	return 0;
}

/* A call of cuda_vmm_fini(), made only on a device that is not lost
 * (on a lost one every call fails: djinnd is exiting). */
static void fini_call(struct cuda_dev *d, CUresult r, const char *what,
		      uint64_t va, uint64_t size)
{
	if (r != CUDA_SUCCESS)
		cuda_log(LOG_WARNING,
			 "%s: at exit: %s at %#llx (%llu bytes): %s", d->name,
			 what, (unsigned long long)va, (unsigned long long)size,
			 cu_errname(d->cu, r));
}

void cuda_vmm_fini(struct cuda_dev *d)
{
	struct cuda_vmm *v = &d->vmm;
	const struct cu_api *cu = d->cu;
	bool live = !atomic_load(&d->lost);
	struct cuda_span **lists[] = { &v->maps, &v->stale_maps };
	struct cuda_chunk *heads[] = { &v->chunks, &v->stale_chunks };

	/* The VMU released everything before the backend is destroyed; a
	 * leak here is someone's bug, but the device is let go cleanly. The
	 * stale lists are empty unless the device died while lost. */
	for (unsigned int i = 0; i < 2; i++)
		while (*lists[i]) {
			struct cuda_span *s = *lists[i];

			if (live)
				fini_call(d, cu->MemUnmap(s->va, s->size),
					  "cuMemUnmap", s->va, s->size);
			span_del(lists[i]);
		}
	for (unsigned int i = 0; i < 2; i++)
		while (heads[i]->next != heads[i]) {
			struct cuda_chunk *c = heads[i]->next;

			if (live)
				fini_call(d, cu->MemRelease(c->h),
					  "cuMemRelease", 0, c->size);
			c->prev->next = c->next;
			c->next->prev = c->prev;
			free(c);
		}
	lists[0] = &v->resv;
	lists[1] = &v->stale_resv;
	for (unsigned int i = 0; i < 2; i++)
		while (*lists[i]) {
			struct cuda_span *s = *lists[i];

			if (live)
				fini_call(d, cu->MemAddressFree(s->va, s->size),
					  "cuMemAddressFree", s->va, s->size);
			span_del(lists[i]);
		}
	/* the VMU's buffers are its to unmap; the stale ones are ours */
	while (v->host) {
		if (live)
			fini_call(d,
				  cu->MemHostUnregister(
					  (void *)(uintptr_t)v->host->va),
				  "cuMemHostUnregister", v->host->va,
				  v->host->size);
		span_del(&v->host);
	}
	while (v->stale_host) {
		if (live)
			fini_call(d,
				  cu->MemHostUnregister(
					  (void *)(uintptr_t)v->stale_host->va),
				  "cuMemHostUnregister", v->stale_host->va,
				  v->stale_host->size);
		munmap((void *)(uintptr_t)v->stale_host->va,
		       v->stale_host->size);
		span_del(&v->stale_host);
	}
}

/* A step of cuda_vmm_restore() failed: which, where, and its result. */
static int restore_fail(struct cuda_dev *d, CUresult r, CUresult *err,
			const char *what, uint64_t va, uint64_t size, char *msg,
			size_t msglen)
{
	*err = r;
	return errmsg(msg, msglen, -EIO, "%s at %#llx (%llu bytes): %s", what,
		      (unsigned long long)va, (unsigned long long)size,
		      cu_errname(d->cu, r));
}

int cuda_vmm_restore(struct cuda_dev *d, CUresult *err, char *msg,
		     size_t msglen)
{
	struct cuda_vmm *v = &d->vmm;
	const struct cu_api *cu = d->cu;
	CUmemAccessDesc rw = access_desc(d, VMU_ACCESS_READWRITE);
	unsigned int nmaps = 0, nhost = 0, nstale = 0;
	uint64_t bytes = 0;
	CUresult r;

	*err = CUDA_SUCCESS;
	/*
	 * First what the VMU let go of while the device was lost, so that
	 * nothing it gave back is zeroed, and an address it unmapped can be
	 * mapped again. Under ctx_lock for writing: no provider call runs.
	 */
	while (v->stale_maps) {
		struct cuda_span *s = v->stale_maps;

		r = cu->MemUnmap(s->va, s->size);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemUnmap", s->va,
					    s->size, msg, msglen);
		span_del(&v->stale_maps);
		nstale++;
	}
	while (v->stale_chunks.next != &v->stale_chunks) {
		struct cuda_chunk *c = v->stale_chunks.next;

		r = cu->MemRelease(c->h);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemRelease", 0,
					    c->size, msg, msglen);
		c->prev->next = c->next;
		c->next->prev = c->prev;
		free(c);
		nstale++;
	}
	while (v->stale_resv) {
		struct cuda_span *s = v->stale_resv;

		r = cu->MemAddressFree(s->va, s->size);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemAddressFree",
					    s->va, s->size, msg, msglen);
		span_del(&v->stale_resv);
		nstale++;
	}
	while (v->stale_host) {
		struct cuda_span *s = v->stale_host;

		/* the reset may have unregistered it already */
		r = cu->MemHostUnregister((void *)(uintptr_t)s->va);
		if (r != CUDA_SUCCESS &&
		    r != CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
			return restore_fail(d, r, err, "cuMemHostUnregister",
					    s->va, s->size, msg, msglen);
		munmap((void *)(uintptr_t)s->va, s->size);
		span_del(&v->stale_host);
		nstale++;
	}

	/* Every mapping: its access again, read-write to zero it. */
	for (struct cuda_span *s = v->maps; s; s = s->next) {
		r = cu->MemSetAccess(s->va, s->size, &rw, 1);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemSetAccess", s->va,
					    s->size, msg, msglen);
		r = cu->MemsetD8(s->va, 0, s->size);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemsetD8", s->va,
					    s->size, msg, msglen);
		nmaps++;
		bytes += s->size;
	}
	/* The pinned host buffers kept their bytes: registered again (or
	 * still, if the reset left them so). */
	for (struct cuda_span *s = v->host; s; s = s->next) {
		r = cu->MemHostRegister((void *)(uintptr_t)s->va, s->size,
					HOST_REG_FLAGS);
		if (r != CUDA_SUCCESS &&
		    r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
			return restore_fail(d, r, err, "cuMemHostRegister",
					    s->va, s->size, msg, msglen);
		nhost++;
	}
	/*
	 * cuMemsetD8 is asynchronous for device memory and runs on the
	 * legacy stream, which the lanes' non-blocking streams do not wait
	 * for: the zeros must land before any kernel or copy runs. A reset
	 * that did not take shows here too.
	 */
	r = cu->CtxSynchronize();
	if (r != CUDA_SUCCESS)
		return restore_fail(d, r, err, "cuCtxSynchronize", 0, 0, msg,
				    msglen);
	/* Then the text is read-only again. */
	for (struct cuda_span *s = v->maps; s; s = s->next) {
		CUmemAccessDesc a = access_desc(d, s->access);

		if (s->access == VMU_ACCESS_READWRITE)
			continue;
		r = cu->MemSetAccess(s->va, s->size, &a, 1);
		if (r != CUDA_SUCCESS)
			return restore_fail(d, r, err, "cuMemSetAccess", s->va,
					    s->size, msg, msglen);
	}
	cuda_log(LOG_INFO,
		 "%s: recovery: %u mappings (%llu MiB) zeroed in place, %u "
		 "pinned buffers registered, %u objects let go while lost "
		 "freed",
		 d->name, nmaps, (unsigned long long)(bytes >> 20), nhost,
		 nstale);
	return 0;
}
