/* Internal types of the sgk CUDA backend: a layer's packed weights on the
 * device, one forward call, and the variant table entry. Shared by the
 * plugin (plugin.cu), the variant launchers (variants.cu) and the dev
 * harness (dev/harness.cu), which drives the launchers without the core. */
#ifndef SGK_CUDA_LAYER_H
#define SGK_CUDA_LAYER_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "plan.h"
#include "sgk_backend.h"

/* attn_mma.cuh's instances in variants.cu's table (am_insts) */
#define SGKC_AM_INSTS 7

struct sgkc_layer {
    int device;
    int D, H, P, hd;
    float eps;
    /* The dtype of weights, nodes, pair features and out. The packed
     * weights are float whatever it is; only the generated variants run
     * 16-bit layers (generic.cu). */
    sgk_dtype dtype;
    /* One device allocation holds every packed array below (block_floats
     * floats), then the repack map. Kernels take weights only from here,
     * never by value, so that forwards captured in a CUDA graph see
     * weights replaced later; eps is the one kernel argument that is not
     * (sgk.h). */
    void *block;
    size_t block_floats;
    /* The packing's repack map (kernels/plan.h) in the block: its runs and
     * the floats written before each (map_count + 1 of them); NULL where
     * the packing is not a gather, map_reason saying why. */
    const sgk_repack_run *map_runs;
    const int64_t *map_first;
    int64_t map_count, map_covered;
    float map_scales[SGK_REPACK_SCALES];
    char map_reason[192];
    const float *gamma, *beta; /* (D) */
    const float *wqkv_t;       /* (D, 3D): [k][n], n < D -> Wq row n, then Wk, then Wv */
    const float *wo_t;         /* (D, D): [k][n] = Wo[n][k] */
    const float *w1, *b1;      /* (P, P) as given: w1[p][r]; (P) */
    const float *w2t, *b2;     /* (P, H): w2t[p][h] = w2[h][p]; (H) */
    /* tuned-fused-small's per-head-group images (fused_small.cuh), NULL where the
     * layer's shape cannot take that variant. */
    const float *fs_img, *fs_wo;
    int fs_img_floats;
    /* Its compiled-in shape's Q/K/V and Wo slices in thread order
     * (sgkc_fs_rw_pack); NULL unless the layer has that shape. */
    const float *fs_rw, *fs_rwo;
    /* The weights as given, one after another (kernels/plan.h,
     * sgk_pack_weights): gemm_dmma.cuh and tc.cu read their Wq | Wk | Wv
     * and Wo there ([n][k]). */
    const float *gen;
    sgk_packed gen_off;
    /* The projections' weights as wg_gemm.cuh takes them (tc.cu,
     * sgkc_tc_wg_prep): Q/K/V's with LayerNorm's gamma and beta folded in,
     * then Wo's; an allocation of its own, remade whenever the weights
     * change; NULL where that kernel does not run. */
    float *wg;
    /* The weights as the generated kernels take them (sgk_gen_pack). */
    const float *kern;
    sgk_gen_packed kern_off;
    /* Work-items a group of the generated kernels (generic.cu): 256, or
     * the context's sgk_context_options.gpu_group_size where smaller. */
    int gen_threads;
    /* Device limits read once at layer creation. */
    int sm_count;
    int cc_major, cc_minor;
    size_t smem_optin; /* largest dynamic shared memory a block may opt in to */
    /* tuned-fused-small clusters of 16 blocks (one an SM) that run at once; 0
     * where the device does not allow clusters past the portable 8 */
    int clusters16;
    /* blocks an SM of the attn_tiled.cuh and attn_tiled16.cuh instances this
     * layer runs (their occupancy, at creation): what their key split plans with */
    int at_per_sm, at16_per_sm;
    /* and of the relation MLP pass (mlp_wg.cuh, mlp_tc.cuh or, for a
     * 16-bit layer, mlp_h16.cuh: whichever variants.cu's mlp_pass_of takes
     * on this device) where tuned-tiled runs one */
    int mt_per_sm;                 /* and attn_mma.cuh's instances' (variants.cu, am_insts) after it */
    int am_per_sm[SGKC_AM_INSTS];
    /* shared memory of an SM, and what the device keeps back per block */
    size_t smem_sm, smem_rsv;
};

struct sgkc_fwd {
    int64_t B, N;
    /* float, or 16-bit elements of L->dtype (generic.cu alone runs those) */
    const float *nodes, *pair;
    /* a 16-bit layer's own pair features, for a variant that reads them as
     * they are (sgkc_variant.pair16; pair is then NULL), else NULL */
    const void *pair16;
    const void *mask;
    int mask_u8; /* 0: float32 mask, 1: uint8 mask */
    float *out;
    /* a 16-bit layer's own out, for a variant that writes it as its dtype
     * (sgkc_variant.out16; out is then NULL), else NULL */
    void *out16;
    /* a 16-bit layer's own nodes, for a variant that reads every buffer
     * as it is (sgkc_variant.io16; nodes, pair and out are then NULL, and
     * pair16 and out16 set), else NULL */
    const void *nodes16;
    void *ws;
    size_t ws_bytes;
    cudaStream_t stream;
};

/* A variant plans a call once (sgk_backend.h): plan fills the call's
 * sgk_backend_plan with the variant's own configuration, which workspace
 * and launch then read instead of working it out again. */
struct sgkc_variant {
    const char *name;
    /* 1 with *plan filled when the variant can compute this shape on this
     * layer's device; 0 otherwise. */
    int (*plan)(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
    /* NULL, or 0 where the variant can compute the shape but another later
     * in the table is the better choice: the automatic choice then passes
     * it over (sgk_backend_ops.variant_prefers); forced, it still runs. */
    int (*prefer)(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *plan);
    size_t (*workspace)(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *plan);
    /* Enqueues the forward on f->stream with a plan made for f's shape;
     * returns the first CUDA error. */
    cudaError_t (*launch)(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
    /* NULL, or 1 where the plan reads a 16-bit layer's pair features as
     * they are (f->pair16), so the call needs no float copy of them */
    int (*pair16)(const sgkc_layer *L, const sgk_backend_plan *plan);
    /* NULL, or 1 where the launch on f (a 16-bit layer's call on float
     * buffers) can write out as the layer's dtype instead (f->out16), so
     * the call needs no conversion of out */
    int (*out16)(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
    /* NULL, or 1 where the launch reads a 16-bit layer's nodes and pair
     * features and writes its out as they are (f->nodes16, f->pair16,
     * f->out16), so the call converts nothing and needs no workspace past
     * the variant's own */
    int (*io16)(const sgkc_layer *L, const sgk_backend_plan *plan);
};

/* Whether the automatic choice takes v at (B, N), given the plan v.plan
 * just filled: a forced variant runs wherever it plans the shape. */
static inline int sgkc_prefers(const sgkc_variant &v, const sgkc_layer *L, int64_t B, int64_t N,
                               const sgk_backend_plan *plan)
{
    return !v.prefer || v.prefer(L, B, N, plan);
}

/* A variant's configuration into and out of a call's plan, by copy: the
 * storage is not a T (sgk_backend.h). */
template <class T>
static inline void sgkc_plan_put(const T &cfg, sgk_backend_plan *plan)
{
    static_assert(std::is_trivially_copyable<T>::value, "a plan is copied bytewise");
    static_assert(sizeof(T) <= sizeof plan->bytes, "a plan must fit in SGK_BACKEND_PLAN_BYTES");
    memcpy(plan->bytes, &cfg, sizeof cfg);
}

template <class T>
static inline T sgkc_plan_get(const sgk_backend_plan *plan)
{
    static_assert(sizeof(T) <= sizeof plan->bytes, "a plan must fit in SGK_BACKEND_PLAN_BYTES");
    T cfg;
    memcpy(&cfg, plan->bytes, sizeof cfg);
    return cfg;
}

/* variants.cu: the table, in order of preference. */
extern const sgkc_variant sgkc_variants[];
extern const int sgkc_variant_count;

/* Packs desc's host weights (PyTorch layout, any dtype, validated; 16-bit
 * ones widened to float first) into L's device block. alloc_fail, when not NULL, is asked before the allocation (fault
 * injection); a nonzero answer makes this return cudaErrorMemoryAllocation
 * without allocating. L->device must be current. Fills every field of L. */
cudaError_t sgkc_layer_pack(sgkc_layer *L, int device, const sgk_layer_desc *desc,
                            int (*alloc_fail)(void));
/* New host weights (validated, L's shape) packed as sgkc_layer_pack did,
 * into the same block; returns once later work on any stream reads them.
 * alloc_fail as above. L->device must be current. */
cudaError_t sgkc_layer_repack_host(sgkc_layer *L, const sgk_layer_desc *desc, int (*alloc_fail)(void));
/* The same from device weights of L's device (in L->dtype), enqueued on s
 * by the repack map (L->map_runs not NULL); allocates and synchronises
 * nothing. */
cudaError_t sgkc_layer_repack_device(const sgkc_layer *L, const sgk_layer_desc *desc, cudaStream_t s);
void sgkc_layer_release(sgkc_layer *L);

#endif
