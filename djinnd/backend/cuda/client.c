// SPDX-License-Identifier: MIT
/*
 * Client kernels (cuda_backend.h); event stamps and asynchronous copies,
 * which only tests use (cuda_test.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "cuda_backend.h"
#include "cuda_internal.h"
#include "cuda_test.h"
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

/* The JIT's error log: more than a one-line message has room for. */
#define CUDA_JIT_LOG 2048

/*
 * @log as one line in @out[@len] (@len > 0): each run of line breaks
 * becomes "; ", each run of other blanks and control characters one
 * space, none at either end. Cut short when @out is full.
 */
static void fold_lines(char *out, size_t len, const char *log)
{
	bool brk = false, blank = false;
	size_t n = 0;

	for (; *log && n + 3 < len; log++) {
		unsigned char ch = (unsigned char)*log;

		if (ch == '\n' || ch == '\r') {
			brk = true;
			continue;
		}
		if (ch <= ' ' || ch == 0x7f) {
			blank = true;
			continue;
		}
		if (n && brk) {
			out[n++] = ';';
			out[n++] = ' ';
		} else if (n && blank) {
			out[n++] = ' ';
		}
		brk = blank = false;
		out[n++] = (char)ch;
	}
	out[n] = '\0';
}

/*
 * Load @m->image in the current context (the caller has entered). An
 * image that does not load is -EINVAL with the JIT's error log folded
 * into the message ("ptxas application ptx input, line N; error : ...";
 * none for a cubin the loader refuses).
 */
static int module_load(struct cuda_dev *d, struct cuda_module *m, char *msg,
		       size_t msglen)
{
	char log[CUDA_JIT_LOG] = "", line[CUDA_JIT_LOG];
	/* cuda.h, CUjit_option: the buffer is a char *, its size an
	 * unsigned int passed as the value itself (cast to void *) */
	CUjit_option opt[] = { CU_JIT_ERROR_LOG_BUFFER,
			       CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *val[] = { log, (void *)(uintptr_t)sizeof(log) };
	CUresult r;

	r = d->cu->ModuleLoadDataEx(&m->mod, m->image, 2, opt, val);
	if (r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
	    r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
	    r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
	    r == CUDA_ERROR_INVALID_SOURCE || r == CUDA_ERROR_INVALID_VALUE ||
	    r == CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) {
		log[sizeof(log) - 1] = '\0';
		fold_lines(line, sizeof(line), log);
		return errmsg(msg, msglen, -EINVAL,
			      "%s: the module does not load: %s%s%s", d->name,
			      cu_errname(d->cu, r), line[0] ? ": " : "", line);
	}
	if (r != CUDA_SUCCESS)
		return cuda_err(d, r, "cuModuleLoadDataEx", msg, msglen);
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
		return errmsg(msg, msglen, -EINVAL, "an empty module");
	m = calloc(1, sizeof(*m));
	if (!m)
		return errmsg(msg, msglen, -ENOMEM, "out of memory");
	/* PTX is text: the loader wants it NUL-terminated */
	m->image = calloc(1, len + 1);
	if (!m->image) {
		free(m);
		return errmsg(msg, msglen, -ENOMEM, "out of memory");
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
			return errmsg(msg, msglen, -EINVAL,
				      "kernel %s takes %zu parameters, "
				      "not %u (a pointer and a count per "
				      "tensor)",
				      name, i, 2 * nargs);
		if (size != 8)
			return errmsg(msg, msglen, -EINVAL,
				      "kernel %s: parameter %zu is %zu "
				      "bytes, not 8",
				      name, i, size);
	}
	if (d->cu->FuncGetParamInfo(f, 2 * nargs, &off, &size) == CUDA_SUCCESS)
		return errmsg(msg, msglen, -EINVAL,
			      "kernel %s takes more than %u parameters", name,
			      2 * nargs);
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
		return errmsg(msg, msglen, -E2BIG,
			      "%u tensor arguments, at most %d", nargs,
			      CUDA_KERNEL_MAX_ARGS);
	for (unsigned int i = 0; i < nargs; i++) {
		uint64_t n, bytes;
		size_t es = djinn_dtype_size(args[i].desc.dtype);

		if (djinn_desc_check(&args[i].desc, &n, &bytes) || !es ||
		    args[i].addr % es)
			return errmsg(msg, msglen, -EINVAL,
				      "argument %u: bad desc or address", i);
		ptrs[i] = args[i].addr;
		counts[i] = n;
		params[2 * i] = &ptrs[i];
		params[2 * i + 1] = &counts[i];
	}
	for (unsigned int k = 0; k < 3; k++)
		if (!grid[k] || !block[k])
			return errmsg(msg, msglen, -EINVAL,
				      "grid and block dims must be > 0");
	if (threads > 1024 || block[2] > 64 || grid[1] > 65535 ||
	    grid[2] > 65535 || grid[0] > 0x7fffffffu)
		return errmsg(msg, msglen, -EINVAL,
			      "grid (%u, %u, %u) block (%u, %u, %u) past "
			      "the device's limits",
			      grid[0], grid[1], grid[2], block[0], block[1],
			      block[2]);
	if (shmem > 48 * 1024)
		return errmsg(msg, msglen, -EINVAL,
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
		ret = errmsg(msg, msglen, -ENOENT, "no kernel %s in the module",
			     name);
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
/*
 * Asynchronous copies, on the calling thread's copy stream so that they
 * run beside its kernels, ordered against the compute stream by events
 * (one of each direction per lane, made with the lane):
 *
 * - host to device: the compute stream waits for the copy (l->done), so
 *   later kernels read the bytes; earlier ones overlap it, and must not
 *   touch @dst;
 * - device to host: the copy waits for the compute stream's earlier
 *   kernels (cuda_copy_after_compute()), so it reads what they wrote;
 *   later kernels overlap it, and must not write @src before
 *   cuda_copy_wait().
 */

/* Make @l's copy stream wait for every kernel enqueued so far on its
 * compute stream (l->computed recorded there, then waited on): a copy
 * queued next on the copy stream reads what those kernels wrote. Later
 * kernels are not held back. */
static CUresult cuda_copy_after_compute(struct cuda_lane *l)
{
	const struct cu_api *cu = l->d->cu;
	CUresult r;

	/* cuStreamWaitEvent waits for the event's most recent record */
	r = cu->EventRecord(l->computed, l->compute);
	if (r == CUDA_SUCCESS)
		r = cu->StreamWaitEvent(l->copy, l->computed,
					CU_EVENT_WAIT_DEFAULT);
	return r;
}

static int copy_async(struct cuda_dev *d, bool htod, uint64_t dev, void *host,
		      uint64_t len)
{
	const char *what = "waiting for the compute stream";
	struct cuda_lane *l;
	CUresult r;
	int ret;

	ret = cuda_enter(d, &l, NULL, 0);
	if (ret)
		return ret;
	if (htod) {
		what = "cuMemcpyHtoDAsync";
		r = d->cu->MemcpyHtoDAsync(dev, host, len, l->copy);
		if (r == CUDA_SUCCESS) {
			what = "making the compute stream wait for a copy";
			r = d->cu->EventRecord(l->done, l->copy);
		}
		if (r == CUDA_SUCCESS)
			r = d->cu->StreamWaitEvent(l->compute, l->done,
						   CU_EVENT_WAIT_DEFAULT);
	} else {
		r = cuda_copy_after_compute(l);
		if (r == CUDA_SUCCESS) {
			what = "cuMemcpyDtoHAsync";
			r = d->cu->MemcpyDtoHAsync(host, dev, len, l->copy);
		}
	}
	ret = cuda_err(d, r, what, NULL, 0);
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

/* ---------------------------------------------------------------------- */
/*
 * Client kernels over the wire (backend_ops' module_load, run_kernel).
 *
 * A module uploaded with DJINN_TENSOR_MODULE is loaded at upload and
 * kept, with the names of its kernels and their hashes, in a small cache
 * keyed by the text's fingerprint. A KERNEL node finds its module there
 * or, when it has been evicted, reads the bytes back from the text
 * segment (checking them against the fingerprint) and loads them again.
 * d->mlock is held from the lookup to the launch, so an eviction, which
 * waits for the context before it unloads, never pulls a module from
 * under a kernel.
 */
#define CUDA_WIRE_MODULES 64

/*
 * struct cuda_wmod - a module of the cache
 * @names, @hashes: its kernels and the first 8 bytes (little-endian) of
 *                  the SHA-256 of each name
 * @used:           last use, for LRU eviction
 */
struct cuda_wmod {
	uint8_t fp[DJINN_FP_LEN];
	struct cuda_module *m;
	char **names;
	uint64_t *hashes;
	unsigned int nr_names;
	uint64_t used;
};

static uint64_t name_hash(const char *name)
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	uint64_t h = 0;

	if (!EVP_Digest(name, strlen(name), md, &n, EVP_sha256(), NULL) ||
	    n < 8)
		return 0;
	for (int k = 7; k >= 0; k--)
		h = h << 8 | md[k];
	return h;
}

static int add_name(struct cuda_wmod *w, const char *name, size_t len)
{
	char **names;
	uint64_t *hashes;
	char *s;

	for (unsigned int k = 0; k < w->nr_names; k++)
		if (strlen(w->names[k]) == len &&
		    !memcmp(w->names[k], name, len))
			return 0;
	s = strndup(name, len);
	names = realloc(w->names, (w->nr_names + 1) * sizeof(*names));
	if (names)
		w->names = names;
	hashes = realloc(w->hashes, (w->nr_names + 1) * sizeof(*hashes));
	if (hashes)
		w->hashes = hashes;
	if (!s || !names || !hashes) {
		free(s);
		return -ENOMEM;
	}
	w->names[w->nr_names] = s;
	w->hashes[w->nr_names++] = name_hash(s);
	return 0;
}

static bool ident_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || ch == '_' || ch == '$';
}

/* The kernels of PTX text: the name after each ".entry". */
static int ptx_names(struct cuda_wmod *w, const char *ptx, size_t len)
{
	static const char entry[] = ".entry";
	const size_t el = sizeof(entry) - 1;

	for (size_t i = 0; i + el < len; i++) {
		size_t a, z;
		int ret;

		if (memcmp(ptx + i, entry, el) ||
		    (ptx[i + el] != ' ' && ptx[i + el] != '\t'))
			continue;
		for (a = i + el; a < len && (ptx[a] == ' ' || ptx[a] == '\t');
		     a++)
			;
		for (z = a; z < len && ident_char(ptx[z]); z++)
			;
		if (z == a)
			continue;
		ret = add_name(w, ptx + a, z - a);
		if (ret)
			return ret;
	}
	return 0;
}

/* The kernels of a loaded module: from the driver where it can list them
 * (CUDA 12.4), else, for PTX, from its text. */
static int module_names(struct cuda_dev *d, struct cuda_wmod *w,
			const void *image, size_t len, char *msg, size_t msglen)
{
	const struct cu_api *cu = d->cu;
	CUfunction *fns = NULL;
	unsigned int n = 0;
	int ret = 0;

	if (cu->ModuleGetFunctionCount && cu->ModuleEnumerateFunctions &&
	    cu->FuncGetName) {
		ret = cuda_enter(d, NULL, msg, msglen);
		if (ret)
			return ret;
		if (cu->ModuleGetFunctionCount(&n, w->m->mod) == CUDA_SUCCESS &&
		    n && (fns = calloc(n, sizeof(*fns))) &&
		    cu->ModuleEnumerateFunctions(fns, n, w->m->mod) ==
			    CUDA_SUCCESS) {
			for (unsigned int k = 0; k < n && !ret; k++) {
				const char *name = NULL;

				if (cu->FuncGetName(&name, fns[k]) ==
					    CUDA_SUCCESS &&
				    name)
					ret = add_name(w, name, strlen(name));
			}
		}
		cuda_leave(d);
		free(fns);
	}
	if (!ret && !w->nr_names && memmem(image, len, ".entry", 6))
		ret = ptx_names(w, image, len);
	if (ret)
		return errmsg(msg, msglen, ret, "out of memory");
	if (!w->nr_names)
		return errmsg(msg, msglen, -EINVAL,
			      "%s: no kernels found in the module (a cubin "
			      "needs a driver that lists them: CUDA 12.4)",
			      d->name);
	return 0;
}

static void wmod_free(struct cuda_dev *d, struct cuda_wmod *w)
{
	for (unsigned int k = 0; k < w->nr_names; k++)
		free(w->names[k]);
	free(w->names);
	free(w->hashes);
	if (w->m)
		cuda_module_unload(&d->base, w->m);
	memset(w, 0, sizeof(*w));
}

static struct cuda_wmod *wmod_find(struct cuda_dev *d, const uint8_t *fp)
{
	for (unsigned int k = 0; k < d->nr_wmods; k++)
		if (!memcmp(d->wmods[k].fp, fp, DJINN_FP_LEN)) {
			d->wmods[k].used = ++d->wmod_tick;
			return &d->wmods[k];
		}
	return NULL;
}

/* A free slot of the cache; the least recently used module goes when it
 * is full, once the context has finished every kernel enqueued. */
static int wmod_slot(struct cuda_dev *d, struct cuda_wmod **out, char *msg,
		     size_t msglen)
{
	struct cuda_wmod *w;
	unsigned int lru = 0;
	int ret;

	if (!d->wmods) {
		d->wmods = calloc(CUDA_WIRE_MODULES, sizeof(*d->wmods));
		if (!d->wmods)
			return errmsg(msg, msglen, -ENOMEM, "out of memory");
	}
	if (d->nr_wmods < CUDA_WIRE_MODULES) {
		*out = &d->wmods[d->nr_wmods];
		return 0;
	}
	for (unsigned int k = 1; k < d->nr_wmods; k++)
		if (d->wmods[k].used < d->wmods[lru].used)
			lru = k;
	w = &d->wmods[lru];
	ret = cuda_enter(d, NULL, msg, msglen);
	if (ret)
		return ret;
	ret = cuda_err(d, d->cu->CtxSynchronize(), "cuCtxSynchronize", msg,
		       msglen);
	cuda_leave(d);
	if (ret)
		return ret;
	wmod_free(d, w);
	d->wmods[lru] = d->wmods[--d->nr_wmods];
	memset(&d->wmods[d->nr_wmods], 0, sizeof(*w));
	*out = &d->wmods[d->nr_wmods];
	return 0;
}

/* Load @image as module @fp into the cache (under d->mlock). */
static int wmod_load(struct cuda_dev *d, const uint8_t *fp, const void *image,
		     size_t len, struct cuda_wmod **out, char *msg,
		     size_t msglen)
{
	struct cuda_wmod *w = NULL;
	int ret;

	ret = wmod_slot(d, &w, msg, msglen);
	if (ret)
		return ret;
	ret = cuda_module_load(&d->base, image, len, &w->m, msg, msglen);
	if (!ret)
		ret = module_names(d, w, image, len, msg, msglen);
	if (ret) {
		wmod_free(d, w);
		return ret;
	}
	memcpy(w->fp, fp, DJINN_FP_LEN);
	w->used = ++d->wmod_tick;
	d->nr_wmods++;
	*out = w;
	return 0;
}

int cuda_wire_module_load(struct backend *b, const uint8_t *fp,
			  const void *image, size_t len, char *msg,
			  size_t msglen)
{
	struct cuda_dev *d = to_dev(b);
	struct cuda_wmod *w;
	int ret = 0;

	pthread_mutex_lock(&d->mlock);
	if (!wmod_find(d, fp))
		ret = wmod_load(d, fp, image, len, &w, msg, msglen);
	pthread_mutex_unlock(&d->mlock);
	return ret;
}

/* The module of a KERNEL node: cached, or its bytes read back from the
 * text segment (@t) and loaded (under d->mlock). */
static int wmod_get(struct cuda_dev *d, const uint8_t *fp,
		    const struct dj_tensor *t, struct cuda_wmod **out,
		    char *msg, size_t msglen)
{
	uint8_t md[EVP_MAX_MD_SIZE];
	uint64_t len = t->desc.dims[0];
	unsigned int n = 0;
	void *image;
	int ret;

	*out = wmod_find(d, fp);
	if (*out)
		return 0;
	if (t->desc.dtype != DJINN_DTYPE_U8 || t->desc.ndim != 1)
		return errmsg(msg, msglen, -EINVAL,
			      "the module is not a u8 vector");
	image = malloc(len);
	if (!image)
		return errmsg(msg, msglen, -ENOMEM, "out of memory");
	ret = cuda_enter(d, NULL, msg, msglen);
	if (!ret) {
		ret = cuda_err(d, d->cu->MemcpyDtoH(image, t->addr, len),
			       "reading the module back", msg, msglen);
		cuda_leave(d);
	}
	if (!ret && (!EVP_Digest(image, len, md, &n, EVP_sha256(), NULL) ||
		     n != DJINN_FP_LEN || memcmp(md, fp, DJINN_FP_LEN)))
		ret = errmsg(msg, msglen, -EIO,
			     "%s: the module's bytes on the device no "
			     "longer match its fingerprint",
			     d->name);
	if (!ret)
		ret = wmod_load(d, fp, image, len, out, msg, msglen);
	free(image);
	return ret;
}

/* The result's first bytes: zeros, or a copy of the input it is like. */
static int result_init(struct cuda_dev *d, const struct dj_tensor *out,
		       const struct dj_tensor *like, char *msg, size_t msglen)
{
	uint64_t bytes = 0;
	struct cuda_lane *l;
	CUresult r;
	int ret;

	if (djinn_desc_check(&out->desc, NULL, &bytes))
		return errmsg(msg, msglen, -EINVAL, "bad result desc");
	ret = cuda_enter(d, &l, msg, msglen);
	if (ret)
		return ret;
	r = like ? d->cu->MemcpyDtoDAsync(out->addr, like->addr, bytes,
					  l->compute) :
		   d->cu->MemsetD8Async(out->addr, 0, bytes, l->compute);
	ret = cuda_err(d, r, like ? "cuMemcpyDtoDAsync" : "cuMemsetD8Async",
		       msg, msglen);
	cuda_leave(d);
	return ret;
}

int cuda_wire_run_kernel(struct backend *b, const struct djinn_node *node,
			 const uint8_t *fp, const struct dj_tensor *in,
			 const struct dj_tensor *out, char *msg, size_t msglen)
{
	const struct djinn_p_kernel *p = &node->params.kernel;
	struct dj_tensor args[DJINN_MAX_NODE_INPUTS];
	struct cuda_dev *d = to_dev(b);
	const char *name = NULL;
	struct cuda_wmod *w;
	int ret;

	if (node->nr_inputs < 2 || node->nr_inputs > DJINN_MAX_NODE_INPUTS ||
	    p->out_like < 1 || p->out_like >= node->nr_inputs)
		return errmsg(msg, msglen, -EINVAL, "a malformed node");
	pthread_mutex_lock(&d->mlock);
	ret = wmod_get(d, fp, &in[0], &w, msg, msglen);
	if (ret)
		goto out;
	for (unsigned int k = 0; k < w->nr_names && !name; k++)
		if (w->hashes[k] == p->name_hash)
			name = w->names[k];
	if (!name) {
		ret = errmsg(msg, msglen, -ENOENT,
			     "no kernel in the module has name hash "
			     "%016llx (it has %u: %s%s)",
			     (unsigned long long)p->name_hash, w->nr_names,
			     w->names[0], w->nr_names > 1 ? ", ..." : "");
		goto out;
	}
	ret = result_init(d, out, p->out_init ? &in[p->out_like] : NULL, msg,
			  msglen);
	if (ret)
		goto out;
	args[0] = *out;
	for (unsigned int k = 1; k < node->nr_inputs; k++)
		args[k] = in[k];
	ret = cuda_kernel_run(b, w->m, name, p->grid, p->block, p->shmem, args,
			      node->nr_inputs, msg, msglen);
out:
	pthread_mutex_unlock(&d->mlock);
	return ret;
}

void cuda_wire_fini(struct cuda_dev *d)
{
	const struct cu_api *cu = d->cu;

	for (unsigned int k = 0; k < d->nr_wmods; k++) {
		struct cuda_wmod *w = &d->wmods[k];

		/* the context is current and quiet: unload it directly */
		if (w->m && w->m->mod && w->m->gen == atomic_load(&d->gen) &&
		    !atomic_load(&d->lost))
			cu->ModuleUnload(w->m->mod);
		if (w->m) {
			free(w->m->image);
			free(w->m);
			w->m = NULL;
		}
		wmod_free(d, w);
	}
	free(d->wmods);
	d->wmods = NULL;
	d->nr_wmods = 0;
}
