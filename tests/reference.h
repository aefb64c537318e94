/* The reference: the relation-update layer of SPEC section 1 and its
 * gradients, computed in double precision straight from the math. It shares
 * no code with the kernels and is checked against golden outputs and
 * gradients of the PyTorch module; the gradients also against finite
 * differences of the forward (test_backward.c). */
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

/* The same weights in double, for sgk_ref_forward_d. */
typedef struct sgk_ref_layer_d {
    int64_t D, H, P;
    double eps;
    const double *ln_gamma, *ln_beta;
    const double *wq, *wk, *wv, *wo;
    const double *w1, *b1;
    const double *w2, *b2;
} sgk_ref_layer_d;

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

/* sgk_ref_forward that also returns the softmax statistics of every row, the
 * values an attention forward keeps for its backward: for each (b, h, i), at
 * row_max[(b*H + h)*N + i], the largest score s[b,h,i,j] over the edges j
 * and, in row_sum, sum_j exp(s[b,h,i,j] - row_max) over them (so the row's
 * logsumexp is row_max + log(row_sum)). A row with no edge has -inf and 0.
 * Both (B, H, N), both required. */
int sgk_ref_forward_stats(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                          const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                          double *out_d, float *out_f, double *row_max, double *row_sum);

/* The forward on double inputs and weights, into out (B, N, D), for finite
 * differences, whose steps are finer than a float can hold. On float values
 * converted to double it gives sgk_ref_forward's out_d bit for bit. */
int sgk_ref_forward_d(const sgk_ref_layer_d *layer, int64_t B, int64_t N, const double *nodes,
                      const double *pair_feats, const void *mask, sgk_mask_type mask_type,
                      double *out);

/* Where sgk_ref_backward writes the gradient of each input and weight, in
 * the shape of that tensor (the weights' in PyTorch layout). Any may be NULL
 * (not wanted). */
typedef struct sgk_ref_grads {
    double *nodes;                /* (B, N, D) */
    double *pair_feats;           /* (B, N, N, P) */
    double *ln_gamma, *ln_beta;   /* (D) */
    double *wq, *wk, *wv, *wo;    /* (D, D) */
    double *w1, *b1;              /* (P, P), (P) */
    double *w2, *b2;              /* (H, P), (H) */
} sgk_ref_grads;

/* Gradients of sum(d_out * out) for out = sgk_ref_forward(inputs), d_out
 * (B, N, D): what autograd gives the PyTorch module. A pair with no edge
 * gets zero gradient (pair_feats[b,i,j,:] never enters the output), and so
 * does everything that reaches a fully masked row only through its
 * attention: that row's output is its input, so its own query gets nothing;
 * its node still gets the gradient of its key and value from the rows that
 * attend to it. Deterministic whatever the thread count. Returns 0, or -1 on
 * bad arguments or when out of memory (before writing anything). */
int sgk_ref_backward(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                     const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                     const float *d_out, const sgk_ref_grads *grads);

#ifdef __cplusplus
}
#endif
#endif
