/* The relation MLP as a pass of its own, on the tensor cores in 3xTF32
 * (tc_mma.cuh): for every pair m = (b, i, j) of the call,
 *   bias[m][h] = b2[h] + sum_p w2[h][p] silu(b1[p] + sum_r w1[p][r] pair[m][r]),
 * into the workspace head-major, (B, H, N*N), which the attention kernels
 * then read in place of running the MLP per pair (attn_mma.cuh, a head's
 * query row of keys contiguous, and attn_tiled(16).cuh's PCAP = 0
 * instances). A pair the mask makes no edge gets -inf at every head:
 * sgkc_add_score(-inf, s) is -inf, what the attention gives a non-edge, so
 * attn_mma.cuh reads the bias alone and no mask.
 * The pair features are read once either way; the pass adds H floats a
 * pair written and read back, which is why the plan takes it only where P
 * is larger than H and the MLP's 2P^2 FLOPs a pair are a large share.
 *
 * Each warp owns 16 pairs at a time (persistent: a grid of what fits on
 * the SMs, warps striding over the tiles) and keeps everything in
 * registers: the features as the A operand straight from global memory,
 * the hidden layer as m16n8 accumulators, and those accumulators, after
 * b1 and silu, as the A operand of the second layer. That last step needs
 * no shuffle because a dot product does not care in which order its k
 * terms come: lane (g, t) holds columns 2t and 2t+1 of each 8-wide
 * accumulator tile, and the second layer's MMA is fed them as its k = t and
 * k = t + 4, with W2's columns read in the same order. The first layer uses
 * the same freedom to read features as float4: columns 16c + 4t .. + 3 of a
 * row are k = t and t + 4 of MMA step 2c, then of step 2c + 1.
 *
 * Block weights in shared memory, staged before the grid wait (they are
 * inputs): W1 [PCAP n][LDW] as given (n-major, k contiguous: the MMA's
 * column-major B), b1, W2 [8 HT h][LDW2] and b2, zero padded, so padded
 * hidden units are silu(0) = 0 against zero W2 columns. The bias buffer is
 * written only after the grid wait: the previous call's attention may still
 * be reading it. */
#ifndef SGK_CUDA_MLP_TC_CUH
#define SGK_CUDA_MLP_TC_CUH

#include "tc_mma.cuh"

#define SGKC_MT_NT 128 /* four warps */

struct sgkc_mlp_args {
    const float *pair;          /* (M, P) */
    const uint16_t *pair16;     /* mlp_h16.cuh: the features of a bf16 or f16 layer, (M, P) */
    const float *w1, *b1;       /* (P, P) as given, (P) */
    const float *w2t, *b2;      /* (P, H): w2t[p][h] = w2[h][p]; (H) */
    float *bias;                /* (B, H, N*N): head-major, as the attention reads it;
                                   -inf at pairs the mask makes no edge */
    const void *mask;           /* (B, N, N), float or bytes (mask_u8) */
    int mask_u8;
    int64_t M;                  /* B*N*N pairs */
    int64_t NN;                 /* N*N */
    int P, H;
    int pvec; /* P % 4 == 0 and pair 16-byte aligned (pair16: 8-byte) */
};

/* Where pair m's bias of head 0 goes in the head-major bias (heads NN
 * apart): pair m is (batch m / NN, query-key ij = m % NN). */
__device__ __forceinline__ size_t sgkc_bias_at(int64_t m, int H, int64_t NN)
{
    const int64_t b = m / NN;
    return (size_t)(b * H * NN + (m - b * NN));
}

/* Row strides of W1 and W2 in shared memory, in floats: a quarter warp's
 * float4 reads of W1 (rows g, g + 1 at columns 4t) and a half warp's
 * float2 reads of W2 (rows g .. g + 3 at columns 2t) fall on distinct
 * banks. */
__host__ __device__ constexpr int sgkc_mt_ldw(int pcap)
{
    return pcap % 32 == 0 ? pcap + 16 : pcap;
}
__host__ __device__ constexpr int sgkc_mt_ldw2(int pcap)
{
    return pcap + 8;
}
/* Shared memory in floats; split: W1 and W2 kept as their TF32 halves
 * (hi, then lo), split once per block. The library runs split instances
 * (variants.cu, mlp_inst); dev/mlp_check.cu times them beside the others. */
__host__ __device__ constexpr size_t sgkc_mt_smem_floats(int pcap, int ht, bool split = false)
{
    return (split ? 2 : 1) * ((size_t)pcap * sgkc_mt_ldw(pcap) + (size_t)8 * ht * sgkc_mt_ldw2(pcap)) + pcap +
           8 * ht;
}

/* the inf-safe split for every operand: features, weights and hidden units
 * may be inf, and inf * w must stay inf rather than become inf - inf */
__device__ __forceinline__ void sgkc_mt_split(float x, uint32_t &hi, uint32_t &lo)
{
    sgkc_split_tf32_inf(x, hi, lo);
}

/* One hidden tile of rows g, g + 8 (acc: the first layer's m16n8
 * accumulators of hidden units n = 8 j + 2t and n + 1, b1 not yet added)
 * through b1 and silu into the second layer: o[ht] += their product with
 * W2's rows 8 ht .. 8 ht + 7 in 3xTF32 (X3; else one TF32 pass on the
 * big halves, which never reads W2's small halves). Columns n, n + 1 are fed as the
 * MMA's k = t, t + 4, W2's columns read in that order; W2s holds W2 as its
 * TF32 halves (SPLIT: the small halves W2F floats on) or as floats. */
template <int HT, int LDW2, int W2F, bool SPLIT, bool X3 = true>
__device__ __forceinline__ void sgkc_mt_layer2(float (&o)[HT][4], const float (&acc)[4], const float *b1s,
                                               const float *W2s, int n, int g)
{
    const float2 bb = *reinterpret_cast<const float2 *>(b1s + n);
    uint32_t hh[4], hl[4];
    sgkc_split_x<X3>(sgkc_silu_fast(acc[0] + bb.x), hh[0], hl[0]);
    sgkc_split_x<X3>(sgkc_silu_fast(acc[2] + bb.x), hh[1], hl[1]);
    sgkc_split_x<X3>(sgkc_silu_fast(acc[1] + bb.y), hh[2], hl[2]);
    sgkc_split_x<X3>(sgkc_silu_fast(acc[3] + bb.y), hh[3], hl[3]);
#pragma unroll
    for (int ht = 0; ht < HT; ht++) {
        const int off = (8 * ht + g) * LDW2 + n;
        uint32_t wh[2], wl[2];
        if constexpr (SPLIT) {
            const uint2 uh = *reinterpret_cast<const uint2 *>(W2s + off);
            const uint2 ul = *reinterpret_cast<const uint2 *>(W2s + W2F + off);
            wh[0] = uh.x; wh[1] = uh.y; wl[0] = ul.x; wl[1] = ul.y;
        } else {
            const float2 w = *reinterpret_cast<const float2 *>(W2s + off);
            sgkc_mt_split(w.x, wh[0], wl[0]);
            sgkc_mt_split(w.y, wh[1], wl[1]);
        }
        sgkc_mma_x<X3>(o[ht], hh, hl, wh, wl);
    }
}

/* A tile's bias: o[ht] = {[g][h], [g][h+1], [g+8][h], [g+8][h+1]}, h = 8 ht
 * + 2t, of pairs 16 tile + g and + 8, plus b2, head-major; -inf at every
 * head of a pair the mask makes no edge. */
template <int HT>
__device__ __forceinline__ void sgkc_mt_store(const sgkc_mlp_args &a, const float (&o)[HT][4], const float *b2s,
                                              int64_t tile, int g, int t)
{
    const int64_t M = a.M, r0 = tile * 16 + g, r1 = r0 + 8;
    const int H = a.H;
    float *const d0 = a.bias + sgkc_bias_at(r0, H, a.NN), *const d1 = a.bias + sgkc_bias_at(r1, H, a.NN);
    const bool e0 = r0 < M && sgkc_edge(a.mask, a.mask_u8, (size_t)r0);
    const bool e1 = r1 < M && sgkc_edge(a.mask, a.mask_u8, (size_t)r1);
#pragma unroll
    for (int ht = 0; ht < HT; ht++) {
        const int h = 8 * ht + 2 * t;
        if (h < H) {
            if (r0 < M)
                d0[(size_t)h * a.NN] = e0 ? o[ht][0] + b2s[h] : SGKC_NEG_INF;
            if (r1 < M)
                d1[(size_t)h * a.NN] = e1 ? o[ht][2] + b2s[h] : SGKC_NEG_INF;
        }
        if (h + 1 < H) {
            if (r0 < M)
                d0[(size_t)(h + 1) * a.NN] = e0 ? o[ht][1] + b2s[h + 1] : SGKC_NEG_INF;
            if (r1 < M)
                d1[(size_t)(h + 1) * a.NN] = e1 ? o[ht][3] + b2s[h + 1] : SGKC_NEG_INF;
        }
    }
}

/* W1 (P x P floats, row n at w1 + n P) into a block's PCAP x PCAP tile,
 * four columns a step: put4(n, k, v) takes columns k .. k + 3 of row n,
 * zero past P. float4 loads where P % 4 == 0 and w1 is 16-byte aligned:
 * a persistent pass runs as many blocks as fit the SMs, each staging all
 * of W1 (P^2 values) for the pairs it takes, which at large P are few
 * beside it, so the staging's instructions count beside the pass's own. */
template <int PCAP, int NT, typename F>
__device__ __forceinline__ void sgkc_mt_stage_w1(const float *w1, int P, int tid, F put4)
{
    const bool vec = P % 4 == 0 && ((uintptr_t)w1 & 15) == 0;
    for (int i = tid; i < PCAP * PCAP / 4; i += NT) {
        const int n = i / (PCAP / 4), k = (i % (PCAP / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (n < P && k < P) {
            const float *src = w1 + (size_t)n * P + k;
            if (vec) {
                v = __ldg(reinterpret_cast<const float4 *>(src));
            } else {
                v.x = __ldg(src);
                v.y = k + 1 < P ? __ldg(src + 1) : 0.0f;
                v.z = k + 2 < P ? __ldg(src + 2) : 0.0f;
                v.w = k + 3 < P ? __ldg(src + 3) : 0.0f;
            }
        }
        put4(n, k, v);
    }
}

template <int PCAP, int HT, int NW = SGKC_MT_NT / 32, bool SPLIT = false>
__global__ void __launch_bounds__(32 * NW) sgkc_mlp_tc_kernel(sgkc_mlp_args a)
{
    constexpr int NT = 32 * NW;
    constexpr int LDW = sgkc_mt_ldw(PCAP), LDW2 = sgkc_mt_ldw2(PCAP);
    constexpr int W1F = PCAP * LDW, W2F = 8 * HT * LDW2; /* floats of each half where SPLIT */
    constexpr int NC = PCAP / 16; /* float4 columns of a lane's row: chunks of 16 features */
    constexpr int NJ = PCAP / 8;  /* hidden units in tiles of 8 */
    constexpr int JG = NJ < 8 ? NJ : 8; /* hidden tiles accumulated at once */
    /* The next tile's features load while this one computes, where their
     * registers fit beside it (PCAP <= 64); at 128 the MMA work of a tile is
     * long enough that the other warps of the SM cover the load. */
    constexpr bool PF = PCAP <= 64;
    static_assert(PCAP % 16 == 0 && NJ % JG == 0, "whole chunks");

    extern __shared__ __align__(16) float smem[];
    float *W1s = smem, *b1s = W1s + (SPLIT ? 2 : 1) * W1F, *W2s = b1s + PCAP, *b2s = W2s + (SPLIT ? 2 : 1) * W2F;
    const int P = a.P, H = a.H, tid = (int)threadIdx.x;
    /* a weight into its place: the float, or its halves at base[idx] and base[half + idx] */
    auto put = [&](float *base, int idx, int half, float v) {
        if constexpr (SPLIT) {
            uint32_t hi, lo;
            sgkc_mt_split(v, hi, lo);
            reinterpret_cast<uint32_t *>(base)[idx] = hi;
            reinterpret_cast<uint32_t *>(base)[half + idx] = lo;
        } else {
            (void)half;
            base[idx] = v;
        }
    };
    sgkc_mt_stage_w1<PCAP, NT>(a.w1, P, tid, [&](int n, int k, float4 v) {
        put(W1s, n * LDW + k, W1F, v.x);
        put(W1s, n * LDW + k + 1, W1F, v.y);
        put(W1s, n * LDW + k + 2, W1F, v.z);
        put(W1s, n * LDW + k + 3, W1F, v.w);
    });
    for (int i = tid; i < PCAP; i += NT)
        b1s[i] = i < P ? __ldg(a.b1 + i) : 0.0f;
    for (int i = tid; i < 8 * HT * PCAP; i += NT) {
        const int h = i / PCAP, p = i % PCAP;
        put(W2s, h * LDW2 + p, W2F, h < H && p < P ? __ldg(a.w2t + (size_t)p * H + h) : 0.0f);
    }
    for (int i = tid; i < 8 * HT; i += NT)
        b2s[i] = i < H ? __ldg(a.b2 + i) : 0.0f;
    __syncthreads();
    sgkc_grid_wait();

    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t M = a.M, tiles = (M + 15) / 16;
    const int64_t stride = (int64_t)gridDim.x * NW;

    /* rows g and g + 8 of a tile, features 16c + 4t .. + 3 (zero past P or M) */
    auto load = [&](float4 (&x0)[NC], float4 (&x1)[NC], int64_t tile) {
        const int64_t r0 = tile * 16 + g, r1 = r0 + 8;
        const float *p0 = a.pair + (size_t)(r0 < M ? r0 : 0) * P;
        const float *p1 = a.pair + (size_t)(r1 < M ? r1 : 0) * P;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            x0[c] = tile < tiles && r0 < M ? sgkc_ld_feat4(p0, 4 * c + t, P, a.pvec) : make_float4(0.f, 0.f, 0.f, 0.f);
            x1[c] = tile < tiles && r1 < M ? sgkc_ld_feat4(p1, 4 * c + t, P, a.pvec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };

    int64_t tile = (int64_t)blockIdx.x * NW + (tid >> 5);
    float4 x0[NC], x1[NC];
    load(x0, x1, tile);
    for (; tile < tiles; tile += stride) {
        float4 n0[PF ? NC : 1], n1[PF ? NC : 1];
        if constexpr (PF)
            load(n0, n1, tile + stride);

        float o[HT][4] = {};
#pragma unroll
        for (int jg = 0; jg < NJ; jg += JG) {
            float acc[JG][4] = {};
#pragma unroll
            for (int c = 0; c < NC; c++) {
                /* steps 2c (x, y) and 2c + 1 (z, w): a = {[g][k], [g+8][k], [g][k+4], [g+8][k+4]} */
                uint32_t ah0[4], al0[4], ah1[4], al1[4];
                sgkc_mt_split(x0[c].x, ah0[0], al0[0]);
                sgkc_mt_split(x1[c].x, ah0[1], al0[1]);
                sgkc_mt_split(x0[c].y, ah0[2], al0[2]);
                sgkc_mt_split(x1[c].y, ah0[3], al0[3]);
                sgkc_mt_split(x0[c].z, ah1[0], al1[0]);
                sgkc_mt_split(x1[c].z, ah1[1], al1[1]);
                sgkc_mt_split(x0[c].w, ah1[2], al1[2]);
                sgkc_mt_split(x1[c].w, ah1[3], al1[3]);
#pragma unroll
                for (int j = 0; j < JG; j++) {
                    const int off = (8 * (jg + j) + g) * LDW + 16 * c + 4 * t;
                    uint32_t bh0[2], bl0[2], bh1[2], bl1[2];
                    if constexpr (SPLIT) {
                        const uint4 uh = *reinterpret_cast<const uint4 *>(W1s + off);
                        const uint4 ul = *reinterpret_cast<const uint4 *>(W1s + W1F + off);
                        bh0[0] = uh.x; bh0[1] = uh.y; bh1[0] = uh.z; bh1[1] = uh.w;
                        bl0[0] = ul.x; bl0[1] = ul.y; bl1[0] = ul.z; bl1[1] = ul.w;
                    } else {
                        const float4 u = *reinterpret_cast<const float4 *>(W1s + off);
                        sgkc_mt_split(u.x, bh0[0], bl0[0]);
                        sgkc_mt_split(u.y, bh0[1], bl0[1]);
                        sgkc_mt_split(u.z, bh1[0], bl1[0]);
                        sgkc_mt_split(u.w, bh1[1], bl1[1]);
                    }
                    sgkc_mma3_tf32(acc[j], ah0, al0, bh0, bl0);
                    sgkc_mma3_tf32(acc[j], ah1, al1, bh1, bl1);
                }
            }
            /* hidden units 8(jg + j) + 2t, + 1 of rows g, g + 8 -> the second layer */
#pragma unroll
            for (int j = 0; j < JG; j++)
                sgkc_mt_layer2<HT, LDW2, W2F, SPLIT>(o, acc[j], b1s, W2s, 8 * (jg + j) + 2 * t, g);
        }
        sgkc_mt_store<HT>(a, o, b2s, tile, g, t);

        if constexpr (PF) {
#pragma unroll
            for (int c = 0; c < NC; c++) {
                x0[c] = n0[c];
                x1[c] = n1[c];
            }
        } else {
            load(x0, x1, tile + stride);
        }
    }
}

#endif
