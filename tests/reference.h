/* The reference: the relation-update layer of SPEC section 1, computed in
 * double precision straight from the math. It shares no code with the
 * kernels and is checked against golden outputs of the PyTorch module. */
#ifndef SGK_TESTS_REFERENCE_H
#define SGK_TESTS_REFERENCE_H

#include <stdint.h>

#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weights in PyTorch nn.Linear layout (weight[out][in]), float as the
 * library takes them. */
typedef struct sgk_ref_layer {
    int64_t D, H, P;
    double eps;
    const float *ln_gamma, *ln_beta; /* (D) */
    const float *wq, *wk, *wv, *wo;  /* (D, D) */
    const float *w1, *b1;            /* (P, P), (P) */
    const float *w2, *b2;            /* (H, P), (H) */
} sgk_ref_layer;

/* Flaws the first attempt at the operator had (SPEC section 2), re-created
 * here on purpose so that the defect tests can prove they catch each one. A
 * real reference run passes 0. */
enum {
    SGK_REF_FLAW_TRANSPOSED = 1u << 0,    /* weights read as [in][out] */
    SGK_REF_FLAW_NO_MLP_BIAS = 1u << 1,   /* b1 and b2 ignored */
    SGK_REF_FLAW_SUM_AS_MAX = 1u << 2,    /* softmax "max" is the sum of the scores */
    SGK_REF_FLAW_HEAD_DIM_32 = 1u << 3,   /* q beyond 32 features of a head is lost */
    SGK_REF_FLAW_DIM_1024 = 1u << 4,      /* output features past 1024 never written */
    SGK_REF_FLAW_MASKED_NAN = 1u << 5,    /* fully masked row divides 0 by 0 */
    SGK_REF_FLAW_STALE_SCRATCH = 1u << 6, /* variance reads the previous row's mean */
    SGK_REF_FLAW_NARROW_SCRATCH = 1u << 7 /* intermediates kept at half precision */
};

/* out_d (double) and/or out_f (float) may be NULL; they receive (B, N, D).
 * mask is float (nonzero, NaN included, is an edge) or uint8 per mask_type.
 * Returns 0, or -1 on bad arguments or when out of memory. */
int sgk_ref_forward(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                    const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                    double *out_d, float *out_f);

/* The same with deliberate flaws (see above); flaws = 0 is sgk_ref_forward. */
int sgk_ref_forward_flawed(const sgk_ref_layer *layer, int64_t B, int64_t N,
                           const float *nodes, const float *pair_feats, const void *mask,
                           sgk_mask_type mask_type, unsigned flaws, double *out_d,
                           float *out_f);

#ifdef __cplusplus
}
#endif
#endif
