/* tuned-tc's attention: masked softmax attention over graph edges with the
 * relation MLP computed on the fly, on the tensor cores in 3xTF32 (each
 * fp32 operand split into a TF32 high part and a TF32 remainder; the
 * product keeps hi*hi + hi*lo + lo*hi, which holds fp32's result contract
 * where one TF32 pass does not).
 *
 * A block of four warps owns 16, 32 or 64 query rows of one batch entry
 * (one to four row groups of 16) and a group of up to NH heads
 * (blockIdx.z); the G warps of a row group split its heads, so that blocks
 * of 16 rows keep every warp busy where a block takes four heads or more,
 * and even small graphs give the GPU enough blocks. The keys are walked 16
 * at a time:
 *   1. the block stages the 16 keys' K and V columns of the group;
 *   2. the warps of a row group run the relation MLP for its 16 x 16 pairs
 *      as two small GEMMs (pairs x P times W1^T, SiLU, times W2^T of the
 *      group's heads), an m16n8k8 tile being one query row's 16 keys, and
 *      leave the bias in the row group's shared slice, since the MMA's
 *      output layout (pairs by heads) is not the layout the scores need
 *      (rows by keys);
 *   3. per head: scores Q K^T, plus bias, masked pairs to -inf, an online
 *      softmax update, and O += P V with P taken straight from the score
 *      accumulators (the k index of every fragment is permuted the same way
 *      on both operands so an accumulator pair is an operand pair).
 * Rows whose 16 keys the mask removes skip the MLP; a row group whose
 * 16 x 16 block is all masked skips the step.
 *
 * Shapes are template parameters where registers depend on them: HDP is
 * the head dim padded to a multiple of 8, PMAX bounds P (padded to 8), NH
 * the heads a block takes. Everything else is a run-time bound. */
#ifndef SGK_CUDA_TC_ATTN_CUH
#define SGK_CUDA_TC_ATTN_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "tc_mma.cuh"

struct sgkc_tca_args {
    const float *qkv;  /* (B*N, 3D): q (pre-scaled by 1/sqrt(hd)) | k | v */
    const float *pair; /* (B, N, N, P) */
    const void *mask;  /* (B, N, N) float32 or uint8 */
    int mask_u8;
    const float *w1, *b1, *w2, *b2; /* PyTorch layout: w1[P][P], w2[H][P] */
    float *ctx;                     /* (B*N, D) */
    int N, D, H, P, hd;
};

namespace sgkc_tca {

constexpr int BN = 16, WARPS = 4, THREADS = 32 * WARPS;

/* Row strides in floats. Fragment loads of Q, K and the weights read
 * float2 at [row g][2t] (g = lane / 4, t = lane % 4): a stride of 8 mod 32
 * keeps each half-warp's 16 lanes on distinct banks. V's operand reads
 * [key 2t][col g]: a stride of 4 mod 32. */
__host__ __device__ constexpr int stride8(int n) { return (n + 31) / 32 * 32 + 8; }
__host__ __device__ constexpr int stride4(int n) { return (n + 31) / 32 * 32 + 4; }
constexpr int BIAS_LD = BN + 8;             /* bias slice row: 16 keys */
constexpr int BIAS_HEAD = BN * BIAS_LD + 8; /* one head's 16 x 16 */

/* G warps share a row group of 16 query rows and split its heads; the
 * block has 4 / G row groups. G = 4 where a block takes four heads or
 * more, so that blocks of 16 rows give even small graphs enough blocks. */
template <int HDP, int PMAX, int NH> struct shape {
    static constexpr int G = NH >= 4 ? 4 : NH >= 2 ? 2 : 1, R = WARPS / G, BM = 16 * R, NHW = NH / G;
    static constexpr int CG = HDP * NH; /* the group's columns */
    static constexpr int QS = stride8(CG), KS = stride8(CG), VS = stride4(CG);
    static constexpr int WS = stride8(PMAX); /* w1 and w2 rows */
    static constexpr int MT0 = PMAX <= 16 ? 4 : PMAX <= 32 ? 2 : 1, MT = MT0 < 16 / G ? MT0 : 16 / G;
    static constexpr int off_w1 = 0, off_w2 = off_w1 + PMAX * WS, off_b1 = off_w2 + 8 * WS,
                         off_b2 = off_b1 + PMAX, off_q = off_b2 + 8, off_k = off_q + BM * QS,
                         off_v = off_k + 2 * BN * KS, off_bias = off_v + 2 * BN * VS,
                         floats = off_bias + R * NH * BIAS_HEAD;
    static constexpr size_t bytes = (size_t)floats * sizeof(float);
};

__device__ __forceinline__ float silu(float t) { return __fdividef(t, 1.0f + __expf(-t)); }

/* A value pair of row r at columns k, k + 1 of a row-major (rows, cols)
 * array with leading dimension ld; zero outside it. */
__device__ __forceinline__ float2 ld_pair(const float *p, int64_t row_off, int k, int cols, bool even)
{
    if (even && k + 1 < cols)
        return *reinterpret_cast<const float2 *>(p + row_off + k);
    float2 v;
    v.x = k < cols ? p[row_off + k] : 0.0f;
    v.y = k + 1 < cols ? p[row_off + k + 1] : 0.0f;
    return v;
}

/* rows x (the group's heads, hd columns each) of qkv's column block at
 * `part` (0 q, D k, 2D v) into dst (stride ld, head h at h * HDP, zero
 * padding); float4 copies where hd and D allow them. Returns whether any
 * copied value is not finite. */
template <int HDP>
__device__ __forceinline__ int stage(float *dst, int ld, const float *qkv, int64_t row_first, int rows_valid,
                                     int rows, int hg, int hd, int64_t ld3, int64_t col0, bool vec4, int tid)
{
    int bad = 0;
    const int CGv = hg * HDP;
    if (vec4) {
        const int c4 = HDP / 4, per_row = hg * c4;
        for (int i = tid; i < rows * per_row; i += THREADS) {
            const int r = i / per_row, u = i % per_row, hh = u / c4, c = (u % c4) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < rows_valid && c < hd)
                v = *reinterpret_cast<const float4 *>(qkv + (row_first + r) * ld3 + col0 + (int64_t)hh * hd + c);
            *reinterpret_cast<float4 *>(dst + r * ld + hh * HDP + c) = v;
            bad |= !isfinite(v.x) | !isfinite(v.y) | !isfinite(v.z) | !isfinite(v.w);
        }
    } else {
        for (int i = tid; i < rows * CGv; i += THREADS) {
            const int r = i / CGv, col = i % CGv, hh = col / HDP, c = col % HDP;
            const float v = r < rows_valid && c < hd ? qkv[(row_first + r) * ld3 + col0 + (int64_t)hh * hd + c] : 0.0f;
            dst[r * ld + col] = v;
            bad |= !isfinite(v);
        }
    }
    return bad;
}

/* The same copy as stage() through cp.async (zero-filled outside), for the
 * K and V tiles, which are staged a step ahead; with CHECK it copies
 * nothing and tells whether what this thread copied is finite (once
 * landed: after the wait). */
template <int HDP, bool CHECK>
__device__ __forceinline__ int stage_async(float *dst, int ld, const float *qkv, int64_t row_first, int rows_valid,
                                           int rows, int hg, int hd, int64_t ld3, int64_t col0, bool vec4, int tid)
{
    int bad = 0;
    if (vec4) {
        const int c4 = HDP / 4, per_row = hg * c4;
        for (int i = tid; i < rows * per_row; i += THREADS) {
            const int r = i / per_row, u = i % per_row, hh = u / c4, c = (u % c4) * 4;
            float *d = dst + r * ld + hh * HDP + c;
            if (CHECK) {
                const float4 v = *reinterpret_cast<const float4 *>(d);
                bad |= !isfinite(v.x) | !isfinite(v.y) | !isfinite(v.z) | !isfinite(v.w);
            } else {
                const bool in = r < rows_valid && c < hd;
                sgkc_cp_async16_zfill(d, in ? qkv + (row_first + r) * ld3 + col0 + (int64_t)hh * hd + c : qkv,
                                      in ? 16 : 0);
            }
        }
    } else {
        const int CGv = hg * HDP;
        for (int i = tid; i < rows * CGv; i += THREADS) {
            const int r = i / CGv, col = i % CGv, hh = col / HDP, c = col % HDP;
            float *d = dst + r * ld + col;
            if (CHECK) {
                bad |= !isfinite(*d);
            } else {
                const bool in = r < rows_valid && c < hd;
                sgkc_cp_async4_zfill(d, in ? qkv + (row_first + r) * ld3 + col0 + (int64_t)hh * hd + c : qkv, in ? 4 : 0);
            }
        }
    }
    return bad;
}

template <int HDP, int PMAX, int NH>
__global__ void __launch_bounds__(THREADS) attn_kernel(const sgkc_tca_args a)
{
    using S = shape<HDP, PMAX, NH>;
    constexpr int HD8 = HDP / 8, PM8 = PMAX / 8, MT = S::MT, G = S::G, NHW = S::NHW, BM = S::BM;
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *w1s = sm + S::off_w1, *w2s = sm + S::off_w2, *b1s = sm + S::off_b1, *b2s = sm + S::off_b2;
    float *qs = sm + S::off_q;

    const int N = a.N, D = a.D, P = a.P, hd = a.hd;
    const int PP = (P + 7) & ~7, PP8 = PP / 8;
    const int b = blockIdx.y, q0 = blockIdx.x * BM, h0 = blockIdx.z * NH;
    const int hg = min(NH, a.H - h0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int rg = warp / G, gw = warp % G; /* row group; place among its G warps */
    const int64_t row0 = (int64_t)b * N;    /* first row of this batch entry in qkv / ctx */
    const int64_t ld3 = 3 * (int64_t)D;
    const bool vec4 = hd % 4 == 0 && D % 4 == 0;
    float *bias_s = sm + S::off_bias + rg * NH * BIAS_HEAD;

    /* Weights: w1 rows are hidden units, w2 rows the group's heads; zero
     * past P and past the group, so padded lanes contribute nothing. */
    for (int i = tid; i < PMAX * S::WS; i += THREADS) {
        const int n = i / S::WS, k = i % S::WS;
        w1s[i] = n < P && k < P ? a.w1[(int64_t)n * P + k] : 0.0f;
    }
    for (int i = tid; i < 8 * S::WS; i += THREADS) {
        const int n = i / S::WS, k = i % S::WS;
        w2s[i] = n < hg && k < P ? a.w2[(int64_t)(h0 + n) * P + k] : 0.0f;
    }
    for (int i = tid; i < PMAX; i += THREADS)
        b1s[i] = i < P ? a.b1[i] : 0.0f;
    for (int i = tid; i < 8; i += THREADS)
        b2s[i] = i < hg ? a.b2[h0 + i] : 0.0f;
    stage<HDP>(qs, S::QS, a.qkv, row0 + q0, min(BM, N - q0), BM, hg, hd, ld3, (int64_t)h0 * hd, vec4, tid);

    /* This warp's heads: gw, gw + G, ... of the group. */
    float o[NHW][HD8][4];
    float mrow[NHW][2], lrow[NHW][2];
#pragma unroll
    for (int i = 0; i < NHW; i++) {
        mrow[i][0] = mrow[i][1] = -INFINITY;
        lrow[i][0] = lrow[i][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < HD8; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    }

    const int wr0 = q0 + rg * 16; /* the row group's first query row */
    /* float2 loads where every pair's row is 8-byte aligned */
    const bool pair_even = P % 2 == 0 && ((uintptr_t)a.pair & 7u) == 0;
    const float LOG2E = 1.4426950408889634f;

    /* K and V tiles in two buffers: step j's copies fly while step j - 1
     * computes. */
    const int64_t kcol = (int64_t)D + (int64_t)h0 * hd, vcol = 2 * (int64_t)D + (int64_t)h0 * hd;
    auto issue = [&](int buf, int j) {
        const int rows = min(BN, N - j);
        stage_async<HDP, false>(sm + S::off_k + buf * BN * S::KS, S::KS, a.qkv, row0 + j, rows, BN, hg, hd, ld3, kcol,
                                vec4, tid);
        stage_async<HDP, false>(sm + S::off_v + buf * BN * S::VS, S::VS, a.qkv, row0 + j, rows, BN, hg, hd, ld3, vcol,
                                vec4, tid);
    };
    issue(0, 0);
    sgkc_cp_commit();

    for (int j0 = 0, it = 0; j0 < N; j0 += BN, it++) {
        const int cur = it & 1;
        __syncthreads(); /* the last step's K, V and bias are consumed (and the setup is done) */
        if (j0 + BN < N)
            issue(cur ^ 1, j0 + BN);
        sgkc_cp_commit(); /* possibly empty: one group a step */
        sgkc_cp_wait<1>(); /* this step's tiles, copied by this thread, have landed */
        const float *ks = sm + S::off_k + cur * BN * S::KS, *vs = sm + S::off_v + cur * BN * S::VS;
        /* A non-finite V (a node whose input was NaN or inf) must reach only
         * the rows that attend to it; the MMA would give 0 * inf = NaN to
         * every row, so such a step takes the FMA path below. */
        int v_bad = stage_async<HDP, true>(const_cast<float *>(vs), S::VS, a.qkv, row0 + j0, 0, BN, hg, hd, ld3, vcol,
                                           vec4, tid);
        v_bad = __syncthreads_or(v_bad);

        /* This lane's mask bits: rows g and g + 8, keys 8n + 2t + e. */
        uint32_t mbits = 0;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int qi = wr0 + g + 8 * half;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int kj = j0 + 8 * n + 2 * t + e;
                    bool on = false;
                    if (qi < N && kj < N) {
                        const int64_t mo = ((int64_t)b * N + qi) * N + kj;
                        on = a.mask_u8 ? static_cast<const uint8_t *>(a.mask)[mo] != 0
                                       : static_cast<const float *>(a.mask)[mo] != 0.0f;
                    }
                    mbits |= (uint32_t)on << (half * 4 + n * 2 + e);
                }
        }
        /* Rows of the row group's 16 with any edge among these keys. */
        const uint32_t lo_any = __ballot_sync(0xffffffffu, (mbits & 0x0fu) != 0);
        const uint32_t hi_any = __ballot_sync(0xffffffffu, (mbits & 0xf0u) != 0);
        uint32_t rows_any = 0;
#pragma unroll
        for (int r = 0; r < 8; r++) {
            rows_any |= (uint32_t)(((lo_any >> (4 * r)) & 0xfu) != 0) << r;
            rows_any |= (uint32_t)(((hi_any >> (4 * r)) & 0xfu) != 0) << (r + 8);
        }

        /* 2. The relation MLP for this warp's share of the row group's rows:
         * an m-tile is one row's 16 keys (pair g and g + 8 of the tile are
         * keys j0 + g, j0 + g + 8). */
        for (int mt0 = gw * (16 / G); mt0 < (gw + 1) * (16 / G); mt0 += MT) {
            bool live[MT], any = false;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                live[m] = (rows_any >> (mt0 + m)) & 1u;
                any |= live[m];
            }
            if (!any)
                continue;
            float acc[MT][PM8][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < PM8; n++)
                    acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
#pragma unroll
            for (int s = 0; s < PM8; s++) {
                if (s < PP8) {
                    uint32_t ah[MT][4], al[MT][4];
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        const int qi = wr0 + mt0 + m;
                        float2 x0 = make_float2(0.f, 0.f), x1 = x0;
                        if (live[m]) {
                            const int64_t base = (((int64_t)b * N + qi) * N + j0) * P;
                            if (j0 + g < N)
                                x0 = ld_pair(a.pair, base + (int64_t)g * P, 8 * s + 2 * t, P, pair_even);
                            if (j0 + g + 8 < N)
                                x1 = ld_pair(a.pair, base + (int64_t)(g + 8) * P, 8 * s + 2 * t, P, pair_even);
                        }
                        sgkc_split_tf32_inf(x0.x, ah[m][0], al[m][0]);
                        sgkc_split_tf32_inf(x1.x, ah[m][1], al[m][1]);
                        sgkc_split_tf32_inf(x0.y, ah[m][2], al[m][2]);
                        sgkc_split_tf32_inf(x1.y, ah[m][3], al[m][3]);
                    }
#pragma unroll
                    for (int n = 0; n < PM8; n++) {
                        if (n < PP8) {
                            const float2 w =
                                *reinterpret_cast<const float2 *>(w1s + (8 * n + g) * S::WS + 8 * s + 2 * t);
                            uint32_t bh[2], bl[2];
                            sgkc_split_tf32(w.x, bh[0], bl[0]);
                            sgkc_split_tf32(w.y, bh[1], bl[1]);
#pragma unroll
                            for (int m = 0; m < MT; m++)
                                sgkc_mma3_tf32(acc[m][n], ah[m], al[m], bh, bl);
                        }
                    }
                }
            }
            /* b1, SiLU, then the second layer: the accumulators of n-tile s
             * are the operand of k-step s. */
            float bacc[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++)
                bacc[m][0] = bacc[m][1] = bacc[m][2] = bacc[m][3] = 0.0f;
#pragma unroll
            for (int s = 0; s < PM8; s++) {
                if (s < PP8) {
                    const float c0 = b1s[8 * s + 2 * t], c1 = b1s[8 * s + 2 * t + 1];
                    const float2 w = *reinterpret_cast<const float2 *>(w2s + g * S::WS + 8 * s + 2 * t);
                    uint32_t bh[2], bl[2];
                    sgkc_split_tf32(w.x, bh[0], bl[0]);
                    sgkc_split_tf32(w.y, bh[1], bl[1]);
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        uint32_t ah[4], al[4];
                        sgkc_split_tf32_inf(silu(acc[m][s][0] + c0), ah[0], al[0]);
                        sgkc_split_tf32_inf(silu(acc[m][s][2] + c0), ah[1], al[1]);
                        sgkc_split_tf32_inf(silu(acc[m][s][1] + c1), ah[2], al[2]);
                        sgkc_split_tf32_inf(silu(acc[m][s][3] + c1), ah[3], al[3]);
                        sgkc_mma3_tf32(bacc[m], ah, al, bh, bl);
                    }
                }
            }
            /* bacc[m]: (key g | g + 8, head 2t | 2t + 1) of row mt0 + m. */
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int r = mt0 + m;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hh = 2 * t + (e & 1), key = g + 8 * (e >> 1);
                    if (hh < NH)
                        bias_s[hh * BIAS_HEAD + r * BIAS_LD + key] = bacc[m][e] + b2s[hh];
                }
            }
        }
        __syncthreads(); /* the row group's bias is complete */
        if (rows_any == 0)
            continue;

        /* 3. Scores, online softmax and P V, for each of this warp's heads. */
#pragma unroll
        for (int i = 0; i < NHW; i++) {
            const int hh = gw + G * i;
            if (hh < hg) {
                float sc[2][4];
#pragma unroll
                for (int n = 0; n < 2; n++)
                    sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
                const float *qrow = qs + (rg * 16 + g) * S::QS + hh * HDP;
#pragma unroll
                for (int s = 0; s < HD8; s++) {
                    const float2 x0 = *reinterpret_cast<const float2 *>(qrow + 8 * s + 2 * t);
                    const float2 x1 = *reinterpret_cast<const float2 *>(qrow + 8 * S::QS + 8 * s + 2 * t);
                    uint32_t ah[4], al[4];
                    sgkc_split_tf32(x0.x, ah[0], al[0]);
                    sgkc_split_tf32(x1.x, ah[1], al[1]);
                    sgkc_split_tf32(x0.y, ah[2], al[2]);
                    sgkc_split_tf32(x1.y, ah[3], al[3]);
#pragma unroll
                    for (int n = 0; n < 2; n++) {
                        const float2 k2 =
                            *reinterpret_cast<const float2 *>(ks + (8 * n + g) * S::KS + hh * HDP + 8 * s + 2 * t);
                        uint32_t bh[2], bl[2];
                        sgkc_split_tf32(k2.x, bh[0], bl[0]);
                        sgkc_split_tf32(k2.y, bh[1], bl[1]);
                        sgkc_mma3_tf32(sc[n], ah, al, bh, bl);
                    }
                }
                /* bias and mask; sc[n][e]: row g + 8 (e >> 1), key 8n + 2t + (e & 1) */
                const float *bh_s = bias_s + hh * BIAS_HEAD;
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < 2; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int half = e >> 1, key = 8 * n + 2 * t + (e & 1);
                        const bool on = (mbits >> (half * 4 + n * 2 + (e & 1))) & 1u;
                        const float v = sc[n][e] + bh_s[(g + 8 * half) * BIAS_LD + key];
                        sc[n][e] = on ? v : -INFINITY;
                        mx[half] = fmaxf(mx[half], sc[n][e]);
                    }
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
                    mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
                }
                float alpha[2], ref[2];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const float mnew = fmaxf(mrow[i][half], mx[half]);
                    ref[half] = mnew == -INFINITY ? 0.0f : mnew;
                    alpha[half] = exp2f((mrow[i][half] - ref[half]) * LOG2E);
                    mrow[i][half] = mnew;
                }
#pragma unroll
                for (int n = 0; n < 2; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[n][e] = exp2f((sc[n][e] - ref[e >> 1]) * LOG2E);
                /* Each lane keeps its own part of the row sums (alpha is
                 * the same across a quad); the parts are added at the end. */
#pragma unroll
                for (int half = 0; half < 2; half++)
                    lrow[i][half] = lrow[i][half] * alpha[half] + sc[0][2 * half] + sc[0][2 * half + 1] +
                                    sc[1][2 * half] + sc[1][2 * half + 1];
#pragma unroll
                for (int n = 0; n < HD8; n++) {
                    o[i][n][0] *= alpha[0];
                    o[i][n][1] *= alpha[0];
                    o[i][n][2] *= alpha[1];
                    o[i][n][3] *= alpha[1];
                }
                if (v_bad) {
                    /* P through this head's bias slice, whose values are
                     * read: [row][key]; only this warp uses the head. */
                    float *ps = bias_s + hh * BIAS_HEAD;
                    __syncwarp();
#pragma unroll
                    for (int n = 0; n < 2; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            ps[(g + 8 * (e >> 1)) * BIAS_LD + 8 * n + 2 * t + (e & 1)] = sc[n][e];
                    __syncwarp();
#pragma unroll
                    for (int n = 0; n < HD8; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int row = g + 8 * (e >> 1), col = hh * HDP + 8 * n + 2 * t + (e & 1);
                            float acc = o[i][n][e];
                            for (int key = 0; key < BN; key++) {
                                const float p = ps[row * BIAS_LD + key];
                                acc = p != 0.0f ? fmaf(p, vs[key * S::VS + col], acc) : acc;
                            }
                            o[i][n][e] = acc;
                        }
                    continue;
                }
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    uint32_t ah[4], al[4];
                    sgkc_split_tf32(sc[kk][0], ah[0], al[0]);
                    sgkc_split_tf32(sc[kk][2], ah[1], al[1]);
                    sgkc_split_tf32(sc[kk][1], ah[2], al[2]);
                    sgkc_split_tf32(sc[kk][3], ah[3], al[3]);
                    const float *v0 = vs + (8 * kk + 2 * t) * S::VS + hh * HDP + g;
#pragma unroll
                    for (int n = 0; n < HD8; n++) {
                        uint32_t bh[2], bl[2];
                        sgkc_split_tf32(v0[8 * n], bh[0], bl[0]);
                        sgkc_split_tf32(v0[S::VS + 8 * n], bh[1], bl[1]);
                        sgkc_mma3_tf32(o[i][n], ah, al, bh, bl);
                    }
                }
            }
        }
    }

    /* Finish: the row sums are spread over a quad; a row with no edge has
     * l = 0 and gives zeros. */
#pragma unroll
    for (int i = 0; i < NHW; i++) {
        const int hh = gw + G * i;
        if (hh < hg) {
            float inv[2];
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float l = lrow[i][half];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                inv[half] = l > 0.0f ? 1.0f / l : 0.0f;
            }
#pragma unroll
            for (int n = 0; n < HD8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int half = e >> 1, c = 8 * n + 2 * t + (e & 1), qi = wr0 + g + 8 * half;
                    if (qi < N && c < hd)
                        a.ctx[(row0 + qi) * D + (int64_t)(h0 + hh) * hd + c] = o[i][n][e] * inv[half];
                }
        }
    }
}

} // namespace sgkc_tca

/* The compiled instances: head dims padded to 16, 24, 32, 64, 96, 128 or
 * 256, P to 16, 32 or 128; a block takes as many heads as keep its
 * accumulators within 128 registers a thread (64 with P past 32, whose
 * MLP accumulators need the rest). */
struct sgkc_tca_inst {
    int hdp, pmax, nh, bm;
    void (*kernel)(const sgkc_tca_args);
    size_t smem;
};

#define SGKC_TCA_NH(hdp, pmax) ((((pmax) <= 32 ? 256 : 128) / (hdp)) < 8 ? (((pmax) <= 32 ? 256 : 128) / (hdp)) : 8)
#define SGKC_TCA_I(hdp, pmax)                                                                                  \
    {hdp, pmax, SGKC_TCA_NH(hdp, pmax) > 0 ? SGKC_TCA_NH(hdp, pmax) : 1,                                       \
     sgkc_tca::shape<hdp, pmax, (SGKC_TCA_NH(hdp, pmax) > 0 ? SGKC_TCA_NH(hdp, pmax) : 1)>::BM,                \
     sgkc_tca::attn_kernel<hdp, pmax, (SGKC_TCA_NH(hdp, pmax) > 0 ? SGKC_TCA_NH(hdp, pmax) : 1)>,              \
     sgkc_tca::shape<hdp, pmax, (SGKC_TCA_NH(hdp, pmax) > 0 ? SGKC_TCA_NH(hdp, pmax) : 1)>::bytes}
#define SGKC_TCA_ROW(pmax)                                                                                     \
    SGKC_TCA_I(16, pmax), SGKC_TCA_I(24, pmax), SGKC_TCA_I(32, pmax), SGKC_TCA_I(64, pmax),                   \
        SGKC_TCA_I(96, pmax), SGKC_TCA_I(128, pmax), SGKC_TCA_I(256, pmax)

static const sgkc_tca_inst sgkc_tca_insts[] = {SGKC_TCA_ROW(16), SGKC_TCA_ROW(32), SGKC_TCA_ROW(128)};

/* The instance for head dim hd and P, or NULL where none takes them. */
static inline const sgkc_tca_inst *sgkc_tca_pick(int hd, int P)
{
    const sgkc_tca_inst *best = NULL;
    for (const sgkc_tca_inst &i : sgkc_tca_insts)
        if (hd <= i.hdp && P <= i.pmax && (!best || i.hdp < best->hdp || (i.hdp == best->hdp && i.pmax < best->pmax)))
            best = &i;
    return best;
}

/* Raises every instance's dynamic shared memory limit; call once a device. */
static inline cudaError_t sgkc_tca_prepare(size_t optin)
{
    for (const sgkc_tca_inst &i : sgkc_tca_insts)
        if (i.smem <= optin) {
            const cudaError_t e = cudaFuncSetAttribute((const void *)i.kernel,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)i.smem);
            if (e != cudaSuccess)
                return e;
        }
    return cudaSuccess;
}

/* The instance that runs (hd, P) on a device with optin bytes of shared
 * memory a block, with a grid within CUDA's limits; NULL where none does. */
static inline const sgkc_tca_inst *sgkc_tca_plan(int hd, int P, size_t optin, int64_t B, int H)
{
    const sgkc_tca_inst *i = sgkc_tca_pick(hd, P);
    return i && i->smem <= optin && B <= 65535 && (H + i->nh - 1) / i->nh <= 65535 ? i : NULL;
}

/* i: sgkc_tca_plan's instance for a's shape */
static inline cudaError_t sgkc_tca_launch(const sgkc_tca_inst *i, const sgkc_tca_args &a, int64_t B, cudaStream_t s)
{
    const dim3 grid((unsigned)((a.N + i->bm - 1) / i->bm), (unsigned)B,
                    (unsigned)((a.H + i->nh - 1) / i->nh));
    i->kernel<<<grid, sgkc_tca::THREADS, i->smem, s>>>(a);
    return cudaGetLastError();
}

#endif
