/* The work model of one sgk forward call, used for GFLOP/s, GB/s and the
 * floor. It is deliberately simple so that anyone can recompute it by hand;
 * bench/README.md states the same formulas. */
#ifndef SGK_BENCH_MODEL_H
#define SGK_BENCH_MODEL_H

#include <stdint.h>

typedef struct bench_shape {
    int64_t B, N, D, H, P;
} bench_shape;

/* FLOP: 2 per multiply-add of the matrix products only.
 *   8 B N D^2            Q, K, V and output projections
 *   B N^2 (2P^2 + 2PH)   relation MLP, both layers, for every ordered pair
 *   4 B N^2 D            Q K^T and A V over all heads
 * LayerNorm, SiLU, softmax, biases and the residual are not counted. */
double bench_flops(const bench_shape *s);

/* Bytes: compulsory traffic of one call, each input and weight read once and
 * the output written once, elem_bytes per element of data and weights (4
 * fp32, 2 bf16 and f16) and mask_bytes per element of the mask.
 *   e (2 B N D + B N^2 P) + mask_bytes B N^2 + e (4 D^2 + P^2 + P + H P + H + 2 D) */
double bench_bytes(const bench_shape *s, int mask_bytes, int elem_bytes);

/* Bytes of one input set (nodes, pair_feats, edge_mask, out): what must be
 * larger than the device's last-level cache for a cold-cache measurement. */
double bench_set_bytes(const bench_shape *s, int mask_bytes, int elem_bytes);

#endif
