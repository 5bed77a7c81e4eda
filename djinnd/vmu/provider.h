/* SPDX-License-Identifier: MIT */
/*
 * Physical-memory providers: the one interface between the VMU and a
 * device's memory.
 *
 * The shape is the CUDA virtual memory management API, so a CUDA provider
 * implements each operation with one driver call:
 *
 *   query granularity/capacity  cuMemGetAllocationGranularity, cuDeviceTotalMem
 *   reserve / release           cuMemAddressReserve / cuMemAddressFree
 *   create / destroy            cuMemCreate / cuMemRelease
 *   map / unmap                 cuMemMap + cuMemSetAccess / cuMemUnmap
 *   set_access                  cuMemSetAccess
 *   copy_htod/dtoh/dtod         cuMemcpyHtoD / DtoH / DtoD
 *   memset                      cuMemsetD8
 *   host_alloc / host_free      pinned memory: cuMemHostAlloc, or
 *                               cuMemHostRegister of anonymous memory
 *
 * Device addresses are uint64_t, as CUdeviceptr is. Every size and offset
 * handed to reserve, create, map, unmap and set_access is a multiple of
 * the provider's granularity; the VMU rounds before it calls. Operations
 * return 0 or a negative errno and never exit.
 *
 * Copies are synchronous: they return when the bytes have arrived. An
 * asynchronous form for streaming will be added beside them as
 * copy_*_async(..., struct vmu_fence *) that returns once queued and
 * signals the fence on completion; the synchronous forms stay, so no
 * caller has to change.
 *
 * A provider is used from several threads at once; each implementation
 * does its own locking.
 */
#ifndef DJINN_VMU_PROVIDER_H
#define DJINN_VMU_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmu_provider;

/* Access rights for set_access(), as CU_MEM_ACCESS_FLAGS_PROT_*. */
enum vmu_access {
	VMU_ACCESS_NONE = 0,
	VMU_ACCESS_READ = 1,
	VMU_ACCESS_READWRITE = 3,
};

/* @len bytes at offset @off of a provider's file (ops->file()). */
struct vmu_piece {
	uint64_t off;
	uint64_t len;
};

struct vmu_provider_ops {
	/* Reserve @size bytes of device virtual address space, aligned to
	 * @align (a power of two, at least the granularity). Nothing is
	 * accessible there until a chunk is mapped. */
	int (*reserve)(struct vmu_provider *p, uint64_t size, uint64_t align,
		       uint64_t *va);
	void (*release)(struct vmu_provider *p, uint64_t va, uint64_t size);

	/* Create a physical chunk of @size bytes, counted against capacity
	 * until destroyed. Contents are unspecified. -ENOMEM when capacity
	 * is exhausted. */
	int (*create)(struct vmu_provider *p, uint64_t size, uint64_t *chunk);
	void (*destroy)(struct vmu_provider *p, uint64_t chunk);

	/* Map the first @size bytes of @chunk at @va (inside a reservation)
	 * with read-write access; unmap leaves the range reserved and
	 * inaccessible and the chunk's contents intact. */
	int (*map)(struct vmu_provider *p, uint64_t va, uint64_t size,
		   uint64_t chunk);
	int (*unmap)(struct vmu_provider *p, uint64_t va, uint64_t size);
	int (*set_access)(struct vmu_provider *p, uint64_t va, uint64_t size,
			  enum vmu_access access);

	int (*copy_htod)(struct vmu_provider *p, uint64_t dst, const void *src,
			 uint64_t len);
	int (*copy_dtoh)(struct vmu_provider *p, void *dst, uint64_t src,
			 uint64_t len);
	int (*copy_dtod)(struct vmu_provider *p, uint64_t dst, uint64_t src,
			 uint64_t len);
	int (*memset)(struct vmu_provider *p, uint64_t dst, int byte,
		      uint64_t len);

	/* Host memory that copies reach at full speed (pinned on a GPU).
	 * Swapped-out data regions live here. */
	int (*host_alloc)(struct vmu_provider *p, uint64_t size, void **buf);
	void (*host_free)(struct vmu_provider *p, void *buf, uint64_t size);

	/* Free the provider itself; everything else must be released first. */
	void (*free)(struct vmu_provider *p);

	/*
	 * Memory that outlives the process, for a restart (svc/state.c):
	 * a provider whose physical memory is one file (the host
	 * provider's pool, a memfd) fills these in; the others leave them
	 * NULL, and their bytes are copied out and in.
	 *
	 * file:   the file's fd (the provider's: dup it to keep it).
	 * pieces: @chunk's pieces of the file, in the order they are
	 *         mapped, into @out: their number, of which at most @max
	 *         are written.
	 * used:   every piece in use, as pieces() writes them: what a
	 *         successor keeps until its restore is over.
	 * adopt:  a chunk made of kept pieces (vmu_host_provider_open()'s
	 *         @keep) with the bytes they hold: 0, or -EINVAL for a
	 *         piece not kept whole or adopted already.
	 * unkeep: what is kept and was not adopted goes back to create() (and
 *         of the swap arena, to host_alloc(), its pages kept until
 *         swap_trim()).
	 */
	int (*file)(struct vmu_provider *p);
	unsigned int (*pieces)(struct vmu_provider *p, uint64_t chunk,
			       struct vmu_piece *out, unsigned int max);
	unsigned int (*used)(struct vmu_provider *p, struct vmu_piece *out,
			     unsigned int max);
	int (*adopt)(struct vmu_provider *p, const struct vmu_piece *pcs,
		     unsigned int nr, uint64_t *chunk);
	void (*unkeep)(struct vmu_provider *p);

	/*
	 * Swapped-out data that outlives the process (the host provider's;
	 * the others leave these NULL and their swapped data is copied):
	 *
	 * swap_arena: host_alloc()'s buffers from now on come from one
	 *         file of @size bytes (rounded down to the granule): @fd, a
	 *         predecessor's (taken; a larger one keeps its size), its
	 *         @nr pieces @keep kept until swap_adopt() or unkeep(), or
	 *         -1 for a new one. A buffer that finds no room there is
	 *         anonymous memory, as before. -EBUSY when it has one.
	 * swap_piece: where buffer @buf of @size bytes lies in that file
	 *         (its granules): 0, or -ENOENT (not there).
	 * swap_file: the file's fd (the provider's) and *@size, or -1.
	 * swap_used: every piece of it in use, as used() writes them.
	 * swap_adopt: a buffer of kept piece @pc with the bytes it holds,
	 *         in *@buf (host_free() takes it back; before unkeep(), a
	 *         restore undone, it is kept again): -EINVAL for a piece
	 *         not kept whole or adopted already.
	 */
	int (*swap_arena)(struct vmu_provider *p, uint64_t size, int fd,
			  const struct vmu_piece *keep, unsigned int nr);
	int (*swap_piece)(struct vmu_provider *p, const void *buf,
			  uint64_t size, struct vmu_piece *out);
	int (*swap_file)(struct vmu_provider *p, uint64_t *size);
	unsigned int (*swap_used)(struct vmu_provider *p, struct vmu_piece *out,
				  unsigned int max);
	int (*swap_adopt)(struct vmu_provider *p, const struct vmu_piece *pc,
			  void **buf);
	/* The predecessor is gone: the pages of what unkeep() freed of the
	 * arena, and nothing took since, go back to the system. */
	void (*swap_trim)(struct vmu_provider *p);
};

/*
 * struct vmu_provider - one device's physical memory
 * @ops:         the operations above
 * @name:        short name for logs ("host", "cuda:0")
 * @granularity: the mapping granule in bytes, a power of two
 * @capacity:    physical bytes that create() may hand out in all
 * @device_only: device addresses are not host pointers (a GPU's): the
 *               host reaches the bytes through the copies only. False for
 *               the host provider, whose addresses the host may read.
 */
struct vmu_provider {
	const struct vmu_provider_ops *ops;
	const char *name;
	uint64_t granularity;
	uint64_t capacity;
	bool device_only;
};

/*
 * The host provider: the CPU backend's device memory.
 *
 * @capacity bytes of "device memory" are one pool, a memfd mapped shared,
 * reserved at start and carved into chunks of granules. The memfd is what
 * a restart hands the next djinnd (ops->file), which opens a provider over
 * it with vmu_host_provider_open() and adopts its predecessor's chunks in
 * place: nothing is copied. Pages the pool
 * has touched stay resident when chunks are destroyed, as a GPU's memory
 * stays on the card. Reservations are mmap(PROT_NONE) ranges; map() moves
 * a chunk's pages into one with mremap(), page tables and all, and
 * unmap() moves them back, so an unmapped chunk keeps its bytes and
 * capacity is accounted exactly as a GPU's would be. Differences from
 * CUDA: a chunk is mapped in one place at a time (-EBUSY), unmap() takes
 * whole ranges given to map() and set_access() ranges inside mapped
 * chunks (-EINVAL otherwise).
 *
 * @granularity: 0 for the default (2 MiB, the usual CUDA granule), else a
 * power of two and a multiple of the page size. @capacity is rounded down
 * to it. Each granule may become a kernel mapping of its own, so
 * capacity / granularity is limited to about a third of
 * vm.max_map_count (with the default 65530 and 2 MiB granules: 40 GiB);
 * raise that sysctl for more. Returns 0 and sets *@out, or -EINVAL,
 * -E2BIG (over that limit), -ENOMEM, -errno.
 *
 * map() refuses a range outside a reservation (-EINVAL) or overlapping a
 * mapped one (-EBUSY), as CUDA does.
 */
int vmu_host_provider_create(uint64_t capacity, uint64_t granularity,
			     struct vmu_provider **out);

/*
 * A host provider over @fd, a predecessor's pool (ops->file), which it
 * takes (closed when it is freed, or on failure). Its capacity is the
 * larger of @capacity and the file's size (the file grows to it). The
 * @nr pieces @keep (the predecessor's ops->used) stay in use until
 * adopted or unkept. -EINVAL for a file or a piece not on granules, or a
 * piece past the file; else as vmu_host_provider_create().
 */
int vmu_host_provider_open(int fd, uint64_t capacity, uint64_t granularity,
			   const struct vmu_piece *keep, unsigned int nr,
			   struct vmu_provider **out);

#endif /* DJINN_VMU_PROVIDER_H */
