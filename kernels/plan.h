/* Host side of the generated kernels, shared by every backend that runs them:
 * how weights are packed, and how a shape maps onto groups, tiles and local
 * memory for the two variants of kernels/relation.sgk.
 *
 *   "small": one `fused` group per batch entry; the entry's Q/K/V stay in
 *            local memory. No workspace.
 *   "tiled": `ln_qkv` over groups of rows into a workspace of B*N*3D floats,
 *            then `attn_tile` over query tiles x B. Any N.
 */
#ifndef SGK_PLAN_H
#define SGK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sgk_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Offsets (in floats) of each weight inside one packed buffer. */
typedef struct sgk_packed {
    size_t gamma, beta, wqkv, wo, w1, b1, w2, b2, total;
} sgk_packed;

sgk_packed sgk_packed_layout(int64_t D, int64_t H, int64_t P);
/* Copies desc's weights (validated, F32) into dst laid out as sgk_packed. */
void sgk_pack_weights(const sgk_layer_desc *desc, float *dst);

/* What a device allows a group. */
typedef struct sgk_limits {
    size_t local_bytes;   /* local (shared) memory per group */
    int64_t max_groups;   /* groups in one launch (all kernels are 1D) */
} sgk_limits;

typedef enum { SGK_PLAN_SMALL = 0, SGK_PLAN_TILED = 1 } sgk_plan_kind;

typedef struct sgk_plan {
    sgk_plan_kind kind;
    int D, H, P, N;
    int64_t B;
    float scale;             /* 1 / sqrt(D / H) */
    int tq, tk;              /* query rows per tile, keys per tile */
    int rt;                  /* tiled: rows per ln_qkv group */
    size_t smem_fused;       /* floats of local memory per group, per kernel */
    size_t smem_ln, smem_attn;
    int64_t groups_ln;       /* tiled: ln_qkv groups */
    int64_t groups_q;        /* tiled: query tiles per batch entry */
    int64_t groups_attn;     /* tiled: attn_tile groups, groups_q * B */
    size_t workspace_bytes;  /* tiled: B*N*3D floats */
} sgk_plan;

/* Fills plan and returns 1 when the variant runs this shape within limits;
 * returns 0 (plan unspecified) otherwise. */
int sgk_plan_make(sgk_plan_kind kind, int64_t B, int64_t N, int64_t D, int64_t H, int64_t P,
                  const sgk_limits *limits, sgk_plan *plan);

/* An sgk_plan is what the backends running these kernels hand from
 * variant_supports to workspace_size and forward (sgk_backend.h); these
 * copy it into and out of the call's sgk_backend_plan. */
void sgk_plan_store(const sgk_plan *plan, sgk_backend_plan *out);
void sgk_plan_load(const sgk_backend_plan *in, sgk_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
