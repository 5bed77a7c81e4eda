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
 * buffer, so that recovery can put them back where they were.
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
			d->cu->MemAddressFree(ptr, size);
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
	struct cuda_span **at;

	pthread_rwlock_rdlock(&d->ctx_lock);
	if (!atomic_load(&d->lost)) {
		d->cu->CtxSetCurrent(d->ctx);
		d->cu->MemAddressFree(va, size);
	}
	pthread_mutex_lock(&d->lock);
	at = span_find(&v->resv, va);
	if (at)
		span_del(at);
	pthread_mutex_unlock(&d->lock);
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

	pthread_rwlock_rdlock(&d->ctx_lock);
	if (!atomic_load(&d->lost)) {
		d->cu->CtxSetCurrent(d->ctx);
		d->cu->MemRelease(c->h);
	}
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
	pthread_mutex_unlock(&d->lock);
	cuda_leave(d);
	free(c);
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
			d->cu->MemUnmap(va, size);
	}
	if (!ret) {
		pthread_mutex_lock(&d->lock);
		ret = span_add(&v->maps, va, size, c);
		pthread_mutex_unlock(&d->lock);
		if (ret)
			d->cu->MemUnmap(va, size);
	}
	cuda_leave(d);
	return ret;
}

static int vmm_unmap(struct vmu_provider *p, uint64_t va, uint64_t size)
{
	struct cuda_vmm *v = to_vmm(p);
	struct cuda_dev *d = v->d;
	struct cuda_span **at;
	int ret = 0;

	/* A lost device unmaps nothing (the reset will), but forgets the
	 * mapping all the same: recovery must not map it again. */
	pthread_rwlock_rdlock(&d->ctx_lock);
	if (!atomic_load(&d->lost)) {
		d->cu->CtxSetCurrent(d->ctx);
		ret = cuda_err(d, d->cu->MemUnmap(va, size), "cuMemUnmap", NULL,
			       0);
	}
	if (!ret || atomic_load(&d->lost)) {
		pthread_mutex_lock(&d->lock);
		at = span_find(&v->maps, va);
		if (at)
			span_del(at);
		pthread_mutex_unlock(&d->lock);
	}
	cuda_leave(d);
	return ret;
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
				d->cu->MemHostUnregister(m);
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
	struct cuda_span **at;

	pthread_rwlock_rdlock(&d->ctx_lock);
	pthread_mutex_lock(&d->lock);
	at = span_find(&v->host, (uintptr_t)buf);
	if (at)
		span_del(at);
	pthread_mutex_unlock(&d->lock);
	if (!atomic_load(&d->lost)) {
		d->cu->CtxSetCurrent(d->ctx);
		d->cu->MemHostUnregister(buf);
	}
	cuda_leave(d);
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
	return 0;
}

void cuda_vmm_fini(struct cuda_dev *d)
{
	struct cuda_vmm *v = &d->vmm;
	const struct cu_api *cu = d->cu;

	/* The VMU released everything before the backend is destroyed; a
	 * leak here is someone's bug, but the device is let go cleanly. */
	while (v->maps) {
		cu->MemUnmap(v->maps->va, v->maps->size);
		span_del(&v->maps);
	}
	while (v->chunks.next != &v->chunks) {
		struct cuda_chunk *c = v->chunks.next;

		cu->MemRelease(c->h);
		c->prev->next = c->next;
		c->next->prev = c->prev;
		free(c);
	}
	while (v->resv) {
		cu->MemAddressFree(v->resv->va, v->resv->size);
		span_del(&v->resv);
	}
	while (v->host) {
		cu->MemHostUnregister((void *)(uintptr_t)v->host->va);
		span_del(&v->host);
	}
}

void cuda_vmm_drop(struct cuda_dev *d)
{
	struct cuda_vmm *v = &d->vmm;
	const struct cu_api *cu = d->cu;

	for (struct cuda_span *s = v->maps; s; s = s->next)
		cu->MemUnmap(s->va, s->size);
	for (struct cuda_chunk *c = v->chunks.next; c != &v->chunks;
	     c = c->next)
		cu->MemRelease(c->h);
	for (struct cuda_span *s = v->resv; s; s = s->next)
		cu->MemAddressFree(s->va, s->size);
	for (struct cuda_span *s = v->host; s; s = s->next)
		cu->MemHostUnregister((void *)(uintptr_t)s->va);
}

int cuda_vmm_restore(struct cuda_dev *d, char *msg, size_t msglen)
{
	struct cuda_vmm *v = &d->vmm;
	const struct cu_api *cu = d->cu;
	CUmemAllocationProp prop = chunk_prop(d);
	CUresult r;

	for (struct cuda_span *s = v->resv; s; s = s->next) {
		CUdeviceptr got = 0;

		r = cu->MemAddressReserve(&got, s->size, 0, s->va, 0);
		if (r != CUDA_SUCCESS)
			return errmsg(msg, msglen, -EIO,
				      "reserving %#llx again: %s",
				      (unsigned long long)s->va,
				      cu_errname(cu, r));
		if (got != s->va) {
			cu->MemAddressFree(got, s->size);
			return errmsg(msg, msglen, -EIO,
				      "%#llx is taken: got %#llx",
				      (unsigned long long)s->va,
				      (unsigned long long)got);
		}
	}
	for (struct cuda_chunk *c = v->chunks.next; c != &v->chunks;
	     c = c->next) {
		r = cu->MemCreate(&c->h, c->size, &prop, 0);
		if (r != CUDA_SUCCESS)
			return errmsg(msg, msglen, -EIO,
				      "creating a chunk again: %s",
				      cu_errname(cu, r));
	}
	for (struct cuda_span *s = v->maps; s; s = s->next) {
		CUmemAccessDesc a = access_desc(d, s->access);
		CUmemAccessDesc rw = access_desc(d, VMU_ACCESS_READWRITE);

		r = cu->MemMap(s->va, s->size, 0, s->chunk->h, 0);
		if (r == CUDA_SUCCESS)
			r = cu->MemSetAccess(s->va, s->size, &rw, 1);
		/* zeros, not whatever the new memory held */
		if (r == CUDA_SUCCESS)
			r = cu->MemsetD8(s->va, 0, s->size);
		if (r == CUDA_SUCCESS && s->access != VMU_ACCESS_READWRITE)
			r = cu->MemSetAccess(s->va, s->size, &a, 1);
		if (r != CUDA_SUCCESS)
			return errmsg(msg, msglen, -EIO,
				      "mapping %#llx again: %s",
				      (unsigned long long)s->va,
				      cu_errname(cu, r));
	}
	for (struct cuda_span *s = v->host; s; s = s->next) {
		r = cu->MemHostRegister((void *)(uintptr_t)s->va, s->size,
					HOST_REG_FLAGS);
		if (r != CUDA_SUCCESS &&
		    r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
			return errmsg(msg, msglen, -EIO,
				      "pinning a swap buffer again: %s",
				      cu_errname(cu, r));
	}
	return 0;
}
