/* Training kernels of the cpu backend: a forward that keeps each attention
 * row's logsumexp, and the backward that takes it. Plain C11 with optional
 * OpenMP; internal to libsgk (the API layer validates arguments and wires
 * these in). */
#ifndef SGK_CPU_BACKWARD_H
#define SGK_CPU_BACKWARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sgk_cpu_weights {
    int64_t D, H, P;                /* dim, heads, pair_dim; D % H == 0 */
    float eps;                      /* LayerNorm eps */
    const float *gamma, *beta;      /* (D) */
    const float *wq, *wk, *wv, *wo; /* (D, D), PyTorch weight[out][in] */
    const float *w1, *b1;           /* (P, P), (P) */
    const float *w2, *b2;           /* (H, P), (H) */
} sgk_cpu_weights;

typedef struct sgk_cpu_grads { /* any may be NULL: not wanted (not written) */
    float *nodes;              /* (B, N, D) */
    float *pair_feats;         /* (B, N, N, P) */
    float *gamma, *beta;       /* (D) */
    float *wq, *wk, *wv, *wo;  /* (D, D) */
    float *w1, *b1;            /* (P, P), (P) */
    float *w2, *b2;            /* (H, P), (H) */
} sgk_cpu_grads;

/* The forward (the math of SPEC section 1: out = nodes + Wo · attention(LN(nodes))
 * with the relation-MLP bias, masked softmax over edges) that also writes
 * lse (B, H, N): lse[(b*H + h)*N + i] = log(sum_j exp(s[b,h,i,j])) over the
 * edges j of row i (natural log), -INFINITY for a row with no edge.
 * mask: float (mask_u8 = 0; nonzero, NaN included, is an edge) or uint8
 * (mask_u8 = 1). threads: OpenMP threads (<= 0: OpenMP's default); the
 * result is bit-identical for any count. scratch: the caller's block of
 * sgk_cpu_forward_train_scratch bytes, aligned to 16; nothing is
 * allocated. */
void sgk_cpu_forward_train(const sgk_cpu_weights *w, int64_t B, int64_t N, const float *nodes,
                           const float *pair_feats, const void *mask, int mask_u8, float *out,
                           float *lse, int threads, void *scratch);
/* Bytes of scratch sgk_cpu_forward_train needs (SIZE_MAX when that does
 * not fit a size_t). */
size_t sgk_cpu_forward_train_scratch(const sgk_cpu_weights *w, int64_t B, int64_t N, int threads);

/* Gradients of sum(d_out * out) with respect to every input and weight,
 * given the forward's inputs and the lse it saved; written (not accumulated)
 * into g's non-NULL members. (This backend re-forms lse in double from the
 * scores it recomputes, so it does not read lse; other backends may.) A
 * pair with no edge gets zero pair_feats gradient, a row with no edge
 * nothing through its attention. Bit-identical for any thread count.
 * scratch: as for the forward, sgk_cpu_backward_scratch bytes. */
void sgk_cpu_backward(const sgk_cpu_weights *w, int64_t B, int64_t N, const float *nodes,
                      const float *pair_feats, const void *mask, int mask_u8, const float *lse,
                      const float *d_out, const sgk_cpu_grads *g, int threads, void *scratch);
/* Bytes of scratch sgk_cpu_backward needs (SIZE_MAX when that does not fit
 * a size_t). */
size_t sgk_cpu_backward_scratch(const sgk_cpu_weights *w, int64_t B, int64_t N, int threads);

#ifdef __cplusplus
}
#endif
#endif
