/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend's insides: the device, its lanes (per-thread streams)
 * and its memory provider. See Documentation/cuda.rst.
 *
 * Locking: every operation that touches the device holds d->ctx_lock for
 * reading; recovery from a fault holds it for writing, so it runs alone.
 * d->lock guards the lane list and the provider's tables.
 */
#ifndef DJINN_CUDA_INTERNAL_H
#define DJINN_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "errmsg.h"
#include "cuda_api.h"
#include "kernels.h"

/* The embedded fatbin (mk/cuda.mk: kernels.cu -> kernels.fatbin). */
extern const unsigned char djinn_cuda_fatbin[];
extern const unsigned char djinn_cuda_fatbin_end[];

/* The kernels cuda.c looks up in the module, by index; families in the
 * dtypes' order (f32, f16, bf16, i32, i64, u8) or by unit size. */
// clang-format off
#define CUDA_KERNELS(X)                                                 \
	X(binary_f32) X(binary_f16) X(binary_bf16) X(binary_i32)        \
	X(binary_i64) X(binary_u8) X(any_zero_i32) X(any_zero_i64)      \
	X(any_zero_u8) X(unary_f32) X(unary_f16) X(unary_bf16)          \
	X(softmax_f32) X(softmax_f16) X(softmax_bf16) X(norm_f32)       \
	X(norm_f16) X(norm_bf16) X(argmax_f32) X(argmax_f16)            \
	X(argmax_bf16) X(argmax_i32) X(argmax_i64) X(argmax_u8)         \
	X(sample_f32) X(sample_f16) X(sample_bf16)                      \
	X(embed_check_i32) X(embed_check_i64) X(embed_1) X(embed_2)     \
	X(embed_4) X(embed_8) X(embed_16) X(permute_1) X(permute_2)     \
	X(permute_4) X(permute_8) X(copy_rows_1) X(copy_rows_2)         \
	X(copy_rows_4) X(copy_rows_8) X(copy_rows_16)                   \
	X(attention_f32) X(attention_f16) X(attention_bf16)             \
	X(attention_varlen_f32) X(attention_varlen_f16)                 \
	X(attention_varlen_bf16)                                        \
	X(matmul_f32) X(matmul_f16) X(matmul_bf16) X(noop)
// clang-format on

#define CUDA_K_ENUM(n) K_##n,
enum cuda_kernel { CUDA_KERNELS(CUDA_K_ENUM) K_COUNT };
#undef CUDA_K_ENUM

struct cuda_dev;
struct cuda_wmod;

/*
 * struct cuda_lane - one thread's streams on a device
 * @compute: kernels, in the order run_node() enqueues them
 * @copy:    the provider's copies, beside the compute stream
 * @done:    recorded on @copy and waited on by @compute when a copy must
 *           come before later kernels
 * @computed: recorded on @compute and waited on by @copy when a copy must
 *           come after earlier kernels (cuda_copy_after_compute())
 * @blas:    cuBLAS bound to @compute (NULL without cuBLAS)
 * @flag:    a few bytes of device memory for kernels that report to the
 *           host (a zero divisor, the first bad embedding id)
 * @gen:     the context generation the streams belong to
 *
 * Every field but @d, @next and @gen belongs to the context: recovery
 * clears them all without calling into the poisoned context (cuda.c,
 * forget_context()), and lane_get() makes them again.
 */
/*
 * A graph's copies (backend_ops.copy_in, copy_out) go through @stage,
 * pinned memory of the lane's context (CUDA_STAGE bytes, made on first
 * use), in the compute stream's order: an input's bytes copied there
 * first, an output's copied from there to its place when sync() has
 * waited (@pend of them, CUDA_OUT_PEND at most). One that does not fit
 * goes straight from or to its pageable place. @queued: copies since the
 * last sync(); @lost: a context reset dropped them (forget_context()),
 * and the next sync() says so.
 */
#define CUDA_STAGE (4u << 20)
#define CUDA_OUT_PEND 64

struct cuda_out_pend {
	void *dst;
	uint64_t off, len;
};

struct cuda_lane {
	struct cuda_dev *d;
	struct cuda_lane *next;
	unsigned int gen;
	CUstream compute, copy;
	CUevent done, computed;
	cublasHandle_t blas;
	CUdeviceptr flag;
	uint8_t *stage;
	bool no_stage; /* cuMemHostAlloc refused it: copies go straight */
	bool queued, lost;
	uint64_t stage_used;
	unsigned int nr_pend;
	struct cuda_out_pend pend[CUDA_OUT_PEND];
};

/*
 * A physical chunk, a reservation, a pinned host buffer: the provider
 * remembers them all. Chunks, reservations and mappings (cuMemCreate,
 * cuMemAddressReserve, cuMemMap) belong to no context, so they outlive a
 * context reset and recovery keeps them; what the VMU lets go of while
 * the device is lost waits on the stale lists for the new context.
 */
struct cuda_chunk {
	CUmemGenericAllocationHandle h;
	uint64_t size;
	struct cuda_chunk *next, *prev;
};

struct cuda_span {
	uint64_t va, size;
	struct cuda_chunk *chunk; /* mappings: what is mapped there */
	unsigned int access; /* mappings: enum vmu_access */
	struct cuda_span *next;
};

struct cuda_vmm {
	struct vmu_provider base;
	struct cuda_dev *d;
	char name[16];
	uint64_t used; /* bytes of chunks created */
	struct cuda_chunk chunks; /* list head */
	struct cuda_span *resv, *maps, *host;
	/* unmapped, destroyed, released or freed by the VMU while the
	 * device was lost: done by cuda_vmm_restore() after the reset */
	struct cuda_chunk stale_chunks; /* list head */
	struct cuda_span *stale_resv, *stale_maps, *stale_host;
};

/*
 * struct cuda_dev - one GPU
 * @serial:   unique among devices ever made (the lane cache's key)
 * @gen:      bumped by every context reset
 * @lost:     a sticky error poisoned the context: everything fails -EIO
 *            until recovery
 * @lost_err: the sticky error (a fatal one, cu_error_is_fatal(), if any
 *            came before recovery): recovery does not reset for those
 * @faults:   faults seen; backend.faults mirrors it
 * @dead:     lost for good (a fatal error, or recovery failed): every
 *            call fails -EIO; backend.dead points at @dead_why, and
 *            djinnd exits so that systemd restarts it
 */
struct cuda_dev {
	struct backend base;
	struct cuda_vmm vmm;
	const struct cu_api *cu;
	const struct cublas_api *blas; /* NULL: the fallback matmul */
	int ordinal;
	CUdevice dev;
	CUcontext ctx;
	unsigned int serial;
	int cc_major, cc_minor, sms, max_grid;
	char name[16];
	char model[96];
	CUmodule mod;
	CUfunction fn[K_COUNT];
	pthread_rwlock_t ctx_lock;
	pthread_mutex_t lock;
	struct cuda_lane *lanes;
	atomic_uint gen;
	atomic_bool lost;
	char lost_why[384];
	CUresult lost_err;
	char lost_in[64]; /* the call that returned @lost_err */
	uint64_t faults, recoveries;
	bool no_read_only; /* the driver refused PROT_READ once */
	/* client modules of the wire, by fingerprint (client.c) */
	pthread_mutex_t mlock;
	struct cuda_wmod *wmods;
	unsigned int nr_wmods;
	uint64_t wmod_tick;
	bool dead; /* lost for good, not tried again: see above */
	char dead_why[512];
};

/*
 * Turn @r from @what into an errno, with the reason in @msg: a sticky
 * error marks the device lost (-EIO) and logs the fault once,
 * CUDA_ERROR_OUT_OF_MEMORY is -ENOMEM, an invalid value -EINVAL,
 * anything else -EIO.
 */
int cuda_err(struct cuda_dev *d, CUresult r, const char *what, char *msg,
	     size_t msglen);

/*
 * Enter the device on this thread: take ctx_lock for reading, make the
 * context current, find (or make) the thread's lane. -EIO while the
 * device is lost. cuda_leave() drops the lock and, if the call found the
 * context poisoned, recovers it.
 */
int cuda_enter(struct cuda_dev *d, struct cuda_lane **lane, char *msg,
	       size_t msglen);
void cuda_leave(struct cuda_dev *d);

/* Launch kernel @k on @lane's compute stream, enough blocks of @threads
 * for @work items (capped for grid-stride loops), @shmem dynamic bytes. */
int cuda_launch(struct cuda_lane *lane, enum cuda_kernel k, uint64_t work,
		unsigned int threads, unsigned int shmem, void **args,
		char *msg, size_t msglen);

/* The provider (vmm.c) */
int cuda_vmm_init(struct cuda_dev *d, char *msg, size_t msglen);
/* Free everything the VMU left (nothing, when it released all). */
void cuda_vmm_fini(struct cuda_dev *d);
/*
 * After a context reset (under ctx_lock for writing, the new context
 * current): undo what the VMU let go of while the device was lost, give
 * every mapping its access again and zero it, register the pinned host
 * buffers again, and wait for it all (cuCtxSynchronize). The chunks,
 * reservations and mappings themselves are kept: no context owns them.
 * 0, or -EIO with the failed call in @msg and its result in *@err.
 */
int cuda_vmm_restore(struct cuda_dev *d, CUresult *err, char *msg,
		     size_t msglen);

/* Client kernels of the wire (client.c): backend_ops' module_load and
 * run_kernel, and the cache's end (under no lock, the context current). */
int cuda_wire_module_load(struct backend *b, const uint8_t *fp,
			  const void *image, size_t len, char *msg,
			  size_t msglen);
int cuda_wire_run_kernel(struct backend *b, const struct djinn_node *node,
			 const uint8_t *fp, const struct dj_tensor *in,
			 const struct dj_tensor *out, char *msg, size_t msglen);
void cuda_wire_fini(struct cuda_dev *d);

/* The graph ops (graph_ops.c) */
int cuda_run_node(struct backend *b, const struct djinn_node *node,
		  const struct dj_tensor *in, const struct dj_tensor *out,
		  char *msg, size_t msglen);

#endif /* DJINN_CUDA_INTERNAL_H */
