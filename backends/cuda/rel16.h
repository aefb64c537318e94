/* attn_rel16.cuh's instances (rel16.cu), for tuned-tiled's 16-bit layers:
 * the relation MLP and the attention in one kernel. */
#ifndef SGK_CUDA_REL16_H
#define SGK_CUDA_REL16_H

#include "attn_rel16.cuh"
#include "cuda_layer.h"

typedef void (*sgkc_rel16_fn)(sgkc_ar16_args);
typedef void (*sgkc_rel16_pack_fn)(const float *, uint16_t *, unsigned char *, int, int, int, int);

struct sgkc_rel16_inst {
    sgkc_rel16_fn fn;        /* nullptr: no instance for the layer */
    sgkc_rel16_pack_fn pack; /* Q, K and V into the kernel's 16-bit layout */
    int hdp, warps;
    size_t smem;
};

/* The instance for a bf16 or f16 layer: head dim up to 64 with H up to 16
 * or up to 128 with H up to 8, P up to 64, compute capability 8.0 or
 * later, its shared memory within the opt-in limit; fn == nullptr
 * otherwise. */
sgkc_rel16_inst sgkc_rel16_of(const sgkc_layer *L);

/* The blocks of a cluster that split each query tile's keys where B
 * ceil(N / 16) blocks leave slots of the GPU (per_sm blocks an SM) empty:
 * enough to fill them, up to 8 and the key tiles, each block the same
 * number of key tiles; 1 below compute capability 9.0 (no clusters). */
int sgkc_rel16_ks(const sgkc_layer *L, int64_t B, int64_t N, int per_sm);

/* Raises every instance's shared memory limit to limit bytes on the
 * current device. */
cudaError_t sgkc_rel16_prepare(int limit);

#endif
