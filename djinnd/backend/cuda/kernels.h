/* SPDX-License-Identifier: MIT */
/*
 * What the host code and kernels.cu share: the kernels' parameter
 * structs, passed by value to cuLaunchKernel. C and CUDA C both read
 * this header; every struct is plain data with explicit padding.
 */
#ifndef DJINN_CUDA_KERNELS_H
#define DJINN_CUDA_KERNELS_H

#include <stdint.h>

#define DJK_MAX_DIMS 8

/* Binary ops (ADD, SUB, MUL, DIV as in enum djinn_opcode), broadcast:
 * the result's @nd dims (outermost first) and each input's strides along
 * them in elements (0: broadcast). */
struct djk_bcast {
	uint64_t n;
	uint32_t nd, op;
	uint64_t dims[DJK_MAX_DIMS];
	uint64_t sa[DJK_MAX_DIMS], sb[DJK_MAX_DIMS];
};

/* PERMUTE: result dims and, per result dim, the input's stride along it
 * in elements. */
struct djk_perm {
	uint64_t n;
	uint32_t nd, __pad;
	uint64_t dims[DJK_MAX_DIMS];
	uint64_t istride[DJK_MAX_DIMS];
};

/* Batched matmul without cuBLAS: a (M, K) x b (K, N) per batch, the
 * batch broadcast as a binary op's dims are, strides in matrices. */
struct djk_mm {
	uint64_t M, N, K;
	uint32_t ta, tb;
	struct djk_bcast batch;
};

/* Attention: q (B,H,T,D), k (B,Hk,S,D), v (B,Hk,S,Dv) -> (B,H,T,Dv). */
/*
 * Attention over strided rows (the CPU's struct cpu_attn): query t of
 * head h of batch b at q + b qs[0] + h qs[1] + t qs[2], its result at out
 * with os; key/value head g = h / (H / Hk); of the S = P + Sn keys, key
 * s < P at kc + s cs + g D (value: vc + s cs + g Dv), key s >= P at k +
 * b ks[0] + g ks[1] + (s - P) ks[2] (value: v with vs). kc and vc are
 * device addresses of elements of the query's type.
 */
struct djk_attn {
	uint64_t B, H, Hk, T, S, D, Dv;
	uint64_t P, cs, kc, vc;
	uint64_t qs[3], ks[3], vs[3], os[3];
	float scale;
	uint32_t causal;
};

/*
 * Attention of many contexts (DJINN_ATTN_VARLEN, lib/graph.h): q (R, H,
 * D), k and v (R, Hk, D) -> (R, H, D), context i's rows row0 .. row0 +
 * T - 1; its P cached keys at kc + s cs + g D (values: vc), then its new
 * ones in k and v. Causal: its row t sees P + t + 1 keys. Passed by
 * value: 16 + 40 n bytes of the 4 KiB a launch's parameters may take.
 */
#define DJK_VARLEN_MAX 64
struct djk_varlen_seq {
	uint64_t kc, vc, cs, P;
	uint32_t row0, T;
};
struct djk_varlen {
	uint64_t H, Hk, D;
	float scale;
	uint32_t n;
	struct djk_varlen_seq seq[DJK_VARLEN_MAX];
};

/* Threads per block of the row kernels and the attention tile. */
#define DJK_ROW_THREADS 256
#define DJK_ATTN_THREADS 128
/* Threads of SAMPLE's block, one block a row. */
#define DJK_SAMPLE_THREADS 512

#endif /* DJINN_CUDA_KERNELS_H */
