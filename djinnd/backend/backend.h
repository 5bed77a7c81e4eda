/* SPDX-License-Identifier: MIT */
/*
 * The device backend interface: the only code that knows CUDA or the CPU.
 *
 * A backend owns one device: its physical memory (a struct vmu_provider
 * the VMU sits on) and the kernels that run graph nodes on tensors in
 * that memory. The executor validates graphs (lib/graph.h), plans memory
 * and allocates every result before it calls run_node(), so a backend
 * sees only well-formed nodes whose output is already allocated, with
 * the shape inference gave it.
 *
 * Tensors are aligned to their element size at least (the executor gives
 * 256 bytes); a node's result never overlaps its inputs. run_node() may be
 * called from several executor threads at once. Kernel scratch (the CPU
 * backend's f16/bf16 conversions, attention rows) is the backend's own
 * host memory for now, outside admission; a workspace query that lets the
 * planner put it on the stack is the next step for the GPU.
 */
#ifndef DJINN_BACKEND_H
#define DJINN_BACKEND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

#include "errmsg.h"
#include "graph.h"
#include "vmu/provider.h"

/*
 * A tensor in device memory: contiguous, row-major, outermost dim first.
 * @host: NULL, or (an input of djinnd's own graph) the same bytes in
 * host memory, where they came from: graph_run() stages such an input on
 * the stack, and a node may read it on the host instead
 * (DJINN_ATTN_VARLEN's table, lib/graph.h). Nothing a client sends
 * becomes one.
 */
struct dj_tensor {
	uint64_t addr;
	struct djinn_tensor_desc desc;
	const void *host;
};

/* Whether @t is no tensor a kernel can use: an unknown dtype, too many
 * dims, or an address not aligned to its elements (kernels read them
 * through typed pointers). */
static inline bool dj_tensor_bad(const struct dj_tensor *t)
{
	size_t es = djinn_dtype_size(t->desc.dtype);

	return !es || t->desc.ndim > DJINN_MAX_DIMS || t->addr % es;
}

/* What every run_node() checks before its kernel: that the op is one of
 * BACKEND_OPS (below), so that its table has a kernel for it, that it
 * takes as many inputs (lib/graph.c's table) and that the tensors are
 * usable. */
static inline int dj_node_check(const struct djinn_node *node,
				const struct dj_tensor *in,
				const struct dj_tensor *out, char *msg,
				size_t msglen)
{
	if (!node->op || node->op > DJINN_GOP_MAX ||
	    node->op == DJINN_GOP_KERNEL)
		return errmsg(msg, msglen, -EOPNOTSUPP, "unknown op %u",
			      node->op);
	if (!djinn_op_takes(node->op, node->nr_inputs))
		return errmsg(msg, msglen, -EINVAL, "%u inputs",
			      node->nr_inputs);
	for (unsigned int i = 0; i < node->nr_inputs; i++)
		if (dj_tensor_bad(&in[i]))
			return errmsg(msg, msglen, -EINVAL,
				      "input %u: bad desc or address", i);
	if (dj_tensor_bad(out))
		return errmsg(msg, msglen, -EINVAL,
			      "result: bad desc or address");
	return 0;
}

/* SAMPLE's tensors as every backend checks them (lib/graph.c inferred
 * them): logits @in[0] (..., V), 0 < V < 2^31, a 24-byte row of
 * parameters each in @in[1], an i64 each in @out. *@rows, *@V. */
static inline int dj_sample_check(const struct dj_tensor *in,
				  const struct dj_tensor *out, uint64_t *rows,
				  uint64_t *V, char *msg, size_t msglen)
{
	const struct djinn_tensor_desc *x = &in[0].desc, *pd = &in[1].desc;

	if (x->ndim < 1 || pd->dtype != DJINN_DTYPE_U8 || !pd->ndim ||
	    pd->dims[pd->ndim - 1] != sizeof(struct djinn_sample_params))
		return errmsg(msg, msglen, -EINVAL,
			      "not logits and u8 rows of parameters");
	*V = x->dims[x->ndim - 1];
	*rows = *V ? djinn_desc_elems_from(x, 0) / *V : 0;
	if (!*V || *V > INT32_MAX ||
	    djinn_desc_elems_from(pd, 0) !=
		    *rows * sizeof(struct djinn_sample_params))
		return errmsg(msg, msglen, -EINVAL,
			      "%llu rows of logits and not a row of "
			      "parameters each",
			      (unsigned long long)*rows);
	if (out->desc.dtype != DJINN_DTYPE_I64 ||
	    djinn_desc_elems_from(&out->desc, 0) != *rows)
		return errmsg(msg, msglen, -EINVAL,
			      "result is not %llu i64 elements",
			      (unsigned long long)*rows);
	return 0;
}

/*
 * The graph ops every backend's run_node() runs, each with the name of its
 * kernel: one list, so that no backend can miss an op. A backend defines
 * those kernels (static, in its own terms) and makes its table of them
 * with BACKEND_OP_TABLE(): a kernel it lacks does not build. The count
 * below does not build when proto.h gains an op this list lacks; with it,
 * the table's size and no entry twice (-Woverride-init), every op from 1
 * to DJINN_GOP_MAX but DJINN_GOP_KERNEL has its kernel, as
 * dj_node_check() lets through. DJINN_GOP_KERNEL is not here: exec.c
 * runs it with run_kernel().
 */
#define BACKEND_OPS(X)             \
	X(MATMUL, op_matmul)       \
	X(ADD, op_binary)          \
	X(SUB, op_binary)          \
	X(MUL, op_binary)          \
	X(DIV, op_binary)          \
	X(SCALE, op_unary)         \
	X(GELU, op_unary)          \
	X(RELU, op_unary)          \
	X(SILU, op_unary)          \
	X(SOFTMAX, op_softmax)     \
	X(LAYERNORM, op_norm)      \
	X(RMSNORM, op_norm)        \
	X(EMBEDDING, op_embedding) \
	X(RESHAPE, op_reshape)     \
	X(PERMUTE, op_permute)     \
	X(SLICE, op_slice)         \
	X(CONCAT, op_concat)       \
	X(ATTENTION, op_attention) \
	X(ARGMAX, op_argmax)       \
	X(SAMPLE, op_sample)

/* A backend's table @name of its kernels (of type @fn_type), by op */
#define BACKEND_OP_ENTRY(op, kernel) [DJINN_GOP_##op] = kernel,
#define BACKEND_OP_TABLE(fn_type, name)                        \
	const fn_type name[DJINN_GOP_MAX + 1] = { BACKEND_OPS( \
		BACKEND_OP_ENTRY) }

#define BACKEND_OP_COUNT(op, kernel) +1
_Static_assert(0 BACKEND_OPS(BACKEND_OP_COUNT) == DJINN_GOP_MAX - 1,
	       "BACKEND_OPS lists every op but DJINN_GOP_KERNEL");

struct backend;

/* The refusal where backend_ops has no client kernels; %s: its name. */
#define BACKEND_NO_KERNELS \
	"client kernels need a CUDA device; this djinnd runs on %s"

struct backend_ops {
	/*
	 * Run one node: @in[node->nr_inputs] -> @out. Returns 0, or a
	 * negative errno with a reason in @msg (a dtype the backend has no
	 * kernel for: -EOPNOTSUPP). Synchronous on the CPU; on a GPU it
	 * may only enqueue, and sync() waits.
	 *
	 * The caller's duty: call sync() after the last run_node() or
	 * run_kernel() and before any memory those nodes read or write is
	 * released, unpinned or reused, on every path. A node that fails
	 * does not undo the ones enqueued before it: their kernels may
	 * still be running, and cuMemUnmap()/cuMemRelease() do not wait
	 * for them. In djinnd the only caller is exec.c's run_nodes(),
	 * which syncs before it returns whatever happened (exec.h).
	 */
	int (*run_node)(struct backend *b, const struct djinn_node *node,
			const struct dj_tensor *in, const struct dj_tensor *out,
			char *msg, size_t msglen);
	/*
	 * Client kernels (Documentation/cuda.rst), optional: NULL on a
	 * backend without them (the CPU), where a module upload and a
	 * KERNEL node are refused with -EOPNOTSUPP and BACKEND_NO_KERNELS.
	 * module_load(): load the module @image (@len bytes, SHA-256 @fp)
	 * now, or find it loaded: 0, or -EINVAL with the JIT's or loader's
	 * reason. run_kernel(): run a KERNEL node: @in[0] is the module, its
	 * bytes in device memory (read back and loaded when they are not
	 * loaded), @fp its fingerprint, @in[1..] the arguments, @out the
	 * result; like run_node() otherwise.
	 */
	int (*module_load)(struct backend *b, const uint8_t *fp,
			   const void *image, size_t len, char *msg,
			   size_t msglen);
	int (*run_kernel)(struct backend *b, const struct djinn_node *node,
			  const uint8_t *fp, const struct dj_tensor *in,
			  const struct dj_tensor *out, char *msg,
			  size_t msglen);
	/*
	 * A graph's copies between host memory and the device, queued with
	 * its nodes so that a graph waits for the device once, in sync().
	 * copy_in(): @len bytes of host memory @src to device address @dst,
	 * before the nodes enqueued after it read them; @src may be reused
	 * as soon as it returns. copy_out(): @len bytes at device address
	 * @src, as the nodes enqueued before it leave them, to host memory
	 * @dst, there once sync() has returned 0 (@dst must stay until
	 * then; a failed sync() may leave it partly written). Synchronous
	 * on the CPU.
	 */
	int (*copy_in)(struct backend *b, uint64_t dst, const void *src,
		       uint64_t len, char *msg, size_t msglen);
	int (*copy_out)(struct backend *b, void *dst, uint64_t src,
			uint64_t len, char *msg, size_t msglen);
	/* Wait for everything the calling thread enqueued, after a failed
	 * node too, copies out included; -EIO if the device failed. */
	int (*sync)(struct backend *b);
	void (*destroy)(struct backend *b);
	/* Optional. For tests only (djinnd --fault-injection): fault the
	 * device for real (a kernel that stores to address 0), so that it
	 * is counted in @faults and recovered as any fault is; 0 once it
	 * has, with the fault in @msg. NULL: the server simulates one
	 * (svc_fault_inject()). */
	int (*inject_fault)(struct backend *b, char *msg, size_t msglen);
	/* Optional: the last fault in words ("cuda:0: device context
	 * lost: CUDA_ERROR_ILLEGAL_ADDRESS (700) ... in cuStreamSynchronize"),
	 * "" if none. */
	void (*fault_info)(struct backend *b, char *msg, size_t msglen);
};

/*
 * struct backend - one device
 * @ops:      the operations
 * @name:     "cpu", "cuda:0"
 * @provider: its memory, for vmu_create()
 * @faults:   device faults so far (read it with __atomic_load_n): each
 *            one lost the device memory of every session on the device,
 *            see Documentation/cuda.rst. The session layer and the VMU
 *            compare it with the count at a session's or text entry's
 *            making (the fault epoch). On the CPU only injected faults
 *            count (svc_fault_inject()).
 * @dead:     NULL while the device serves or may recover; once it is
 *            dead for good (an error no context reset clears, or a
 *            recovery that failed), why: "CUDA_ERROR_CONTAINED (226) in
 *            cuStreamSynchronize", a string that lives as long as the
 *            backend. Set once, with __atomic_store_n(__ATOMIC_RELEASE),
 *            by the backend (or by svc_fault_inject()'s simulation);
 *            read with __atomic_load_n(__ATOMIC_ACQUIRE). djinnd's I/O
 *            loop then exits so that systemd restarts it (server.c).
 * @max_compute, @def_compute: how many graphs it can run at once, each
 *            from its own thread, and how many by default
 *            (device.compute_threads): 1 and 1 on the CPU, whose kernel
 *            threads are one pool; on a GPU each thread has its own
 *            streams and cuBLAS handle (cuda.c, lanes), so sessions'
 *            small kernels overlap on the device's SMs.
 */
struct backend {
	const struct backend_ops *ops;
	const char *name;
	struct vmu_provider *provider;
	uint64_t faults;
	const char *dead;
	unsigned int max_compute, def_compute;
};

/*
 * The CPU backend: @capacity bytes of host-provider memory (djinnd's
 * --cpu-mem), @threads kernel threads (0: one per online CPU, at most
 * 1024), GEMM through OpenBLAS. OpenBLAS's thread count is process-wide:
 * the last CPU backend created sets it.
 */
int cpu_backend_create(uint64_t capacity, unsigned int threads,
		       struct backend **out);
/* The same over host provider @prov (vmu_host_provider_open(): a
 * restart's), which it takes, freed on failure too. */
int cpu_backend_with(struct vmu_provider *prov, unsigned int threads,
		     struct backend **out);

/*
 * The CUDA backend (djinnd/backend/cuda/, Documentation/cuda.rst). It is
 * linked into djinnd only when the build found nvcc (mk/cuda.mk); these
 * are weak symbols, NULL in a djinnd built without it. Both load the
 * driver with dlopen() on first use, so they work, and fail with a
 * reason, on a host without one.
 *
 * cuda_devices(): how many CUDA devices the driver sees, in *@n; or
 * -ENOENT (no driver library), -ENOSYS (a driver too old), -ENODEV
 * (cuInit failed), with the reason in @msg.
 *
 * cuda_backend_create(): device @ordinal, its primary context, the
 * kernels and cuBLAS; memory is the device's free memory less a margin
 * for the context, capped at @mem_limit unless that is 0. A short
 * description of the device ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs,
 * 79.1 GiB") goes in @msg on success, the reason on failure: -ENODEV
 * (no such device), the errors of cuda_devices(), -ENOMEM, -EIO.
 */
int cuda_devices(unsigned int *n, char *msg, size_t msglen)
	__attribute__((weak));
int cuda_backend_create(unsigned int ordinal, uint64_t mem_limit,
			struct backend **out, char *msg, size_t msglen)
	__attribute__((weak));

#endif /* DJINN_BACKEND_H */
