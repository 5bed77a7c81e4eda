// SPDX-License-Identifier: MIT
/*
 * Client kernels, event stamps, asynchronous copies: cuda_backend.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_internal.h"
#include "graph.h"

/*
 * struct cuda_module - a client's image, loaded in the current context
 * @gen: the context generation @mod was loaded in; a context reset
 *       unloads every module, and the next run loads the image again
 */
struct cuda_module {
	void *image;
	size_t len;
	CUmodule mod;
	unsigned int gen;
};

struct cuda_stamp {
	CUevent ev;
	unsigned int gen;
};

static struct cuda_dev *to_dev(struct backend *b)
{
	return (struct cuda_dev *)b;
}

/* Load @m->image in the current context (the caller has entered). */
static int module_load(struct cuda_dev *d, struct cuda_module *m, char *msg,
		       size_t msglen)
{
	CUresult r;

	r = d->cu->ModuleLoadData(&m->mod, m->image);
	if (r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
	    r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
	    r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
	    r == CUDA_ERROR_INVALID_SOURCE || r == CUDA_ERROR_INVALID_VALUE)
		return cuda_fail(msg, msglen, -EINVAL,
				 "%s: the module does not load: %s", d->name,
				 cu_errname(d->cu, r));
	if (r != CUDA_SUCCESS)
		return cuda_err(d, r, "cuModuleLoadData", msg, msglen);
	m->gen = atomic_load(&d->gen);
	return 0;
}

int cuda_module_load(struct backend *b, const void *image, size_t len,
		     struct cuda_module **out, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_module *m;
	int ret;

	if (!len)
		return cuda_fail(msg, msglen, -EINVAL, "an empty module");
	m = calloc(1, sizeof(*m));
	if (!m)
		return cuda_fail(msg, msglen, -ENOMEM, "out of memory");
	/* PTX is text: the loader wants it NUL-terminated */
	m->image = calloc(1, len + 1);
	if (!m->image) {
		free(m);
		return cuda_fail(msg, msglen, -ENOMEM, "out of memory");
	}
	memcpy(m->image, image, len);
	m->len = len;
	ret = cuda_enter(d, NULL, msg, msglen);
	if (!ret) {
		ret = module_load(d, m, msg, msglen);
		cuda_leave(d);
	}
	if (ret) {
		free(m->image);
		free(m);
		return ret;
	}
	*out = m;
	return 0;
}

void cuda_module_unload(struct backend *b, struct cuda_module *m)
{
	struct cuda_dev *d = to_dev(b);

	if (!m)
		return;
	if (!cuda_enter(d, NULL, NULL, 0)) {
		if (m->mod && m->gen == atomic_load(&d->gen))
			d->cu->ModuleUnload(m->mod);
		cuda_leave(d);
	}
	free(m->image);
	free(m);
}

/* The kernel's parameters, if the driver can say: 2 * @nargs of 8 bytes
 * each. */
static int check_params(struct cuda_dev *d, CUfunction f, const char *name,
			unsigned int nargs, char *msg, size_t msglen)
{
	size_t off, size;

	if (!d->cu->FuncGetParamInfo)
		return 0;
	for (size_t i = 0; i < 2 * nargs; i++) {
		if (d->cu->FuncGetParamInfo(f, i, &off, &size) != CUDA_SUCCESS)
			return cuda_fail(msg, msglen, -EINVAL,
					 "kernel %s takes %zu parameters, "
					 "not %u (a pointer and a count per "
					 "tensor)",
					 name, i, 2 * nargs);
		if (size != 8)
			return cuda_fail(msg, msglen, -EINVAL,
					 "kernel %s: parameter %zu is %zu "
					 "bytes, not 8",
					 name, i, size);
	}
	if (d->cu->FuncGetParamInfo(f, 2 * nargs, &off, &size) == CUDA_SUCCESS)
		return cuda_fail(msg, msglen, -EINVAL,
				 "kernel %s takes more than %u parameters",
				 name, 2 * nargs);
	return 0;
}

int cuda_kernel_run(struct backend *b, struct cuda_module *m, const char *name,
		    const uint32_t grid[3], const uint32_t block[3],
		    uint32_t shmem, const struct dj_tensor *args,
		    unsigned int nargs, char *msg, size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	uint64_t ptrs[CUDA_KERNEL_MAX_ARGS], counts[CUDA_KERNEL_MAX_ARGS];
	void *params[2 * CUDA_KERNEL_MAX_ARGS];
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
	struct cuda_lane *l;
	CUfunction f;
	CUresult r;
	int ret;

	if (nargs > CUDA_KERNEL_MAX_ARGS)
		return cuda_fail(msg, msglen, -E2BIG,
				 "%u tensor arguments, at most %d", nargs,
				 CUDA_KERNEL_MAX_ARGS);
	for (unsigned int i = 0; i < nargs; i++) {
		uint64_t n, bytes;
		size_t es = djinn_dtype_size(args[i].desc.dtype);

		if (djinn_desc_check(&args[i].desc, &n, &bytes) || !es ||
		    args[i].addr % es)
			return cuda_fail(msg, msglen, -EINVAL,
					 "argument %u: bad desc or address", i);
		ptrs[i] = args[i].addr;
		counts[i] = n;
		params[2 * i] = &ptrs[i];
		params[2 * i + 1] = &counts[i];
	}
	for (unsigned int k = 0; k < 3; k++)
		if (!grid[k] || !block[k])
			return cuda_fail(msg, msglen, -EINVAL,
					 "grid and block dims must be > 0");
	if (threads > 1024 || block[2] > 64 || grid[1] > 65535 ||
	    grid[2] > 65535 || grid[0] > 0x7fffffffu)
		return cuda_fail(msg, msglen, -EINVAL,
				 "grid (%u, %u, %u) block (%u, %u, %u) past "
				 "the device's limits",
				 grid[0], grid[1], grid[2], block[0], block[1],
				 block[2]);
	if (shmem > 48 * 1024)
		return cuda_fail(msg, msglen, -EINVAL,
				 "%u bytes of shared memory, at most 48 KiB",
				 shmem);
	ret = cuda_enter(d, &l, msg, msglen);
	if (ret)
		return ret;
	if (m->gen != atomic_load(&d->gen) || !m->mod) {
		ret = module_load(d, m, msg, msglen);
		if (ret)
			goto out;
	}
	r = d->cu->ModuleGetFunction(&f, m->mod, name);
	if (r == CUDA_ERROR_NOT_FOUND) {
		ret = cuda_fail(msg, msglen, -ENOENT,
				"no kernel %s in the module", name);
		goto out;
	}
	ret = cuda_err(d, r, "cuModuleGetFunction", msg, msglen);
	if (!ret)
		ret = check_params(d, f, name, nargs, msg, msglen);
	if (ret)
		goto out;
	r = d->cu->LaunchKernel(f, grid[0], grid[1], grid[2], block[0],
				block[1], block[2], shmem, l->compute, params,
				NULL);
	ret = cuda_err(d, r, "cuLaunchKernel", msg, msglen);
out:
	cuda_leave(d);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Stamps */

int cuda_stamp_record(struct backend *b, bool copy, struct cuda_stamp **out)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_stamp *st;
	struct cuda_lane *l;
	CUresult r;
	int ret;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	ret = cuda_enter(d, &l, NULL, 0);
	if (ret) {
		free(st);
		return ret;
	}
	r = d->cu->EventCreate(&st->ev, CU_EVENT_DEFAULT);
	if (r == CUDA_SUCCESS)
		r = d->cu->EventRecord(st->ev, copy ? l->copy : l->compute);
	ret = cuda_err(d, r, "cuEventRecord", NULL, 0);
	st->gen = atomic_load(&d->gen);
	cuda_leave(d);
	if (ret) {
		free(st);
		return ret;
	}
	*out = st;
	return 0;
}

int cuda_stamp_elapsed(struct backend *b, struct cuda_stamp *a,
		       struct cuda_stamp *z, float *ms)
{
	struct cuda_dev *d = to_dev(b);
	CUresult r;
	int ret;

	ret = cuda_enter(d, NULL, NULL, 0);
	if (ret)
		return ret;
	r = d->cu->EventSynchronize(a->ev);
	if (r == CUDA_SUCCESS)
		r = d->cu->EventSynchronize(z->ev);
	if (r == CUDA_SUCCESS)
		r = d->cu->EventElapsedTime(ms, a->ev, z->ev);
	ret = cuda_err(d, r, "cuEventElapsedTime", NULL, 0);
	cuda_leave(d);
	return ret;
}

void cuda_stamp_free(struct backend *b, struct cuda_stamp *st)
{
	struct cuda_dev *d = to_dev(b);

	if (!st)
		return;
	if (!cuda_enter(d, NULL, NULL, 0)) {
		if (st->gen == atomic_load(&d->gen))
			d->cu->EventDestroy(st->ev);
		cuda_leave(d);
	}
	free(st);
}

/* ---------------------------------------------------------------------- */
/* Asynchronous copies: the copy stream, then an event the compute stream
 * waits on, so later kernels see the bytes and earlier ones overlap. */

static int copy_async(struct cuda_dev *d, bool htod, uint64_t dev, void *host,
		      uint64_t len)
{
	struct cuda_lane *l;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, NULL, 0);
	if (ret)
		return ret;
	r = htod ? d->cu->MemcpyHtoDAsync(dev, host, len, l->copy) :
		   d->cu->MemcpyDtoHAsync(host, dev, len, l->copy);
	if (r == CUDA_SUCCESS)
		r = d->cu->EventRecord(l->done, l->copy);
	if (r == CUDA_SUCCESS && htod)
		r = d->cu->StreamWaitEvent(l->compute, l->done, 0);
	ret = cuda_err(d, r, htod ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync",
		       NULL, 0);
	cuda_leave(d);
	return ret;
}

int cuda_copy_htod_async(struct backend *b, uint64_t dst, const void *host,
			 uint64_t len)
{
	return copy_async(to_dev(b), true, dst, (void *)host, len);
}

int cuda_copy_dtoh_async(struct backend *b, void *host, uint64_t src,
			 uint64_t len)
{
	return copy_async(to_dev(b), false, src, host, len);
}

int cuda_copy_wait(struct backend *b)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_lane *l;
	int ret;

	ret = cuda_enter(d, &l, NULL, 0);
	if (ret)
		return ret;
	ret = cuda_err(d, d->cu->StreamSynchronize(l->copy),
		       "cuStreamSynchronize", NULL, 0);
	cuda_leave(d);
	return ret;
}

int cuda_noop_sync(struct backend *b)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_lane *l;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, NULL, 0);
	if (ret)
		return ret;
	r = d->cu->LaunchKernel(d->fn[K_noop], 1, 1, 1, 1, 1, 1, 0, l->compute,
				NULL, NULL);
	if (r == CUDA_SUCCESS)
		r = d->cu->StreamSynchronize(l->compute);
	ret = cuda_err(d, r, "the no-op kernel", NULL, 0);
	cuda_leave(d);
	return ret;
}
