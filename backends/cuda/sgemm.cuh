/* Register-tiled fp32 GEMM, C = op(A) * Bt (+ residual), for the Q/K/V
 * projection (LayerNorm applied to A's tiles in shared memory) and the output
 * projection (residual added in the epilogue).
 *
 * A is (M, K) row-major, Bt is (K, Nc) row-major (weights packed transposed at
 * layer creation so tile loads are coalesced), C is (M, Nc).
 *
 * The K dimension of these GEMMs is the model width (256 at every preset but
 * seed), so a block sees only K / BK tiles: with one tile in flight the
 * previous kernel waited on memory every tile (ncu: Long Scoreboard the top
 * stall, 17-21 TFLOP/s). Here ST - 1 tiles are in flight by cp.async while
 * one is computed, and 64 x 64 blocks of 128 threads (8 x 4 a thread) give
 * the presets' small M x Nc several blocks per SM instead of part of a wave.
 * With LN, each block first computes its rows' statistics (while its first
 * tiles load), then normalises every A tile in place once it lands. */
#ifndef SGK_CUDA_SGEMM_CUH
#define SGK_CUDA_SGEMM_CUH

#include "kernel_common.cuh"

struct sgkc_gemm_args {
    const float *A, *Bt;
    float *C;
    int64_t M;
    int Nc, K;
    const float *gamma, *beta; /* LayerNorm on A's rows (LN instantiation) */
    float eps;
    const float *residual; /* (M, Nc) added to the result, or NULL */
    int scale_cols;        /* columns n < scale_cols are multiplied by scale */
    float scale;
    int vec; /* K % 4 == 0, Nc % 4 == 0, A, Bt, C (and residual) 16-byte aligned */
};

#define SGKC_GM_BM 64
#define SGKC_GM_BN 64
#define SGKC_GM_NT 128

template <bool LN>
__global__ void __launch_bounds__(SGKC_GM_NT, LN ? 3 : 4) sgkc_sgemm_kernel(sgkc_gemm_args a)
{
    constexpr int BM = SGKC_GM_BM, BN = SGKC_GM_BN, BK = 16, TM = 8, TN = 4, ST = 4;
    constexpr int NT = SGKC_GM_NT, TX = BN / TN, TY = BM / TM;
    constexpr int LDA = BK + 4; /* rows 16-byte aligned; a warp's two rows on different banks */
    static_assert(TX * TY == NT, "thread grid");

    __shared__ __align__(16) float As[ST][BM][LDA];
    __shared__ __align__(16) float Bs[ST][BK][BN];
    __shared__ float s_mu[LN ? BM : 1], s_rs[LN ? BM : 1];

    const int tid = threadIdx.x;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int K = a.K, Nc = a.Nc;
    const int64_t M = a.M;
    const int ktiles = (K + BK - 1) / BK;

    /* Tile kt into stage slot: out-of-range elements arrive as zeros. */
    auto issue = [&](int kt, int slot) {
        const int k0 = kt * BK;
        if (a.vec) {
            for (int e = tid; e < BM * BK / 4; e += NT) {
                const int row = e / (BK / 4), c = (e % (BK / 4)) * 4;
                const bool in = m0 + row < M && k0 + c < K;
                sgkc_cp_async16_zfill(&As[slot][row][c], in ? a.A + (size_t)(m0 + row) * K + k0 + c : a.A,
                                      in ? 16 : 0);
            }
            for (int e = tid; e < BK * BN / 4; e += NT) {
                const int kr = e / (BN / 4), c = (e % (BN / 4)) * 4;
                const bool in = k0 + kr < K && n0 + c < Nc;
                sgkc_cp_async16_zfill(&Bs[slot][kr][c], in ? a.Bt + (size_t)(k0 + kr) * Nc + n0 + c : a.Bt,
                                      in ? 16 : 0);
            }
        } else {
            for (int e = tid; e < BM * BK; e += NT) {
                const int row = e / BK, c = e % BK;
                const bool in = m0 + row < M && k0 + c < K;
                sgkc_cp_async4_zfill(&As[slot][row][c], in ? a.A + (size_t)(m0 + row) * K + k0 + c : a.A,
                                     in ? 4 : 0);
            }
            for (int e = tid; e < BK * BN; e += NT) {
                const int kr = e / BN, c = e % BN;
                const bool in = k0 + kr < K && n0 + c < Nc;
                sgkc_cp_async4_zfill(&Bs[slot][kr][c], in ? a.Bt + (size_t)(k0 + kr) * Nc + n0 + c : a.Bt,
                                     in ? 4 : 0);
            }
        }
    };

#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < ktiles)
            issue(s, s);
        sgkc_cp_commit(); /* empty groups keep the wait count uniform */
    }

    if constexpr (LN) {
        /* Row statistics from global memory while the first tiles land. */
        const int warp = tid >> 5, lane = tid & 31;
        constexpr int RPW = BM / (NT / 32);
        const int64_t r0 = m0 + warp * RPW;
        const int nvalid = (int)(M - r0 < RPW ? (M - r0 > 0 ? M - r0 : 0) : RPW);
        if (a.vec && K <= 256) {
            static_assert(RPW % 4 == 0, "rows per warp in fours");
#pragma unroll 1
            for (int r = 0; r < RPW; r += 4) {
                float mu[4], rs[4];
                sgkc_rows_stats4<4, 2>(a.A + (size_t)(r0 + r) * K, K, nvalid - r, K, a.eps, lane, mu, rs);
                if (lane == 0)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        s_mu[warp * RPW + r + i] = mu[i];
                        s_rs[warp * RPW + r + i] = rs[i];
                    }
            }
        } else {
            for (int r = 0; r < RPW; r++) {
                float mean = 0.0f, rstd = 0.0f;
                if (r < nvalid)
                    sgkc_row_stats(a.A + (size_t)(r0 + r) * K, K, a.eps, lane, &mean, &rstd);
                if (lane == 0) {
                    s_mu[warp * RPW + r] = mean;
                    s_rs[warp * RPW + r] = rstd;
                }
            }
        }
    }

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;

    const int ty = tid / TX, tx = tid % TX;
    for (int kt = 0; kt < ktiles; kt++) {
        const int slot = kt % ST;
        sgkc_cp_wait<ST - 2>();
        __syncthreads(); /* tile kt visible; slot (kt - 1) % ST free again */
        if constexpr (LN) {
            const int k0 = kt * BK;
            for (int e = tid; e < BM * BK; e += NT) {
                const int row = e / BK, c = e % BK;
                if (k0 + c < K) {
                    float &x = As[slot][row][c];
                    x = fmaf((x - s_mu[row]) * s_rs[row], __ldg(a.gamma + k0 + c), __ldg(a.beta + k0 + c));
                }
            }
            __syncthreads();
        }
        if (kt + ST - 1 < ktiles)
            issue(kt + ST - 1, (kt + ST - 1) % ST);
        sgkc_cp_commit();

#pragma unroll
        for (int kk = 0; kk < BK; kk += 4) {
            float4 av[TM];
#pragma unroll
            for (int i = 0; i < TM; i++)
                av[i] = *reinterpret_cast<const float4 *>(&As[slot][ty + i * TY][kk]);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 b = *reinterpret_cast<const float4 *>(&Bs[slot][kk + u][tx * TN]);
#pragma unroll
                for (int i = 0; i < TM; i++) {
                    const float x = u == 0 ? av[i].x : u == 1 ? av[i].y : u == 2 ? av[i].z : av[i].w;
                    acc[i][0] = fmaf(x, b.x, acc[i][0]);
                    acc[i][1] = fmaf(x, b.y, acc[i][1]);
                    acc[i][2] = fmaf(x, b.z, acc[i][2]);
                    acc[i][3] = fmaf(x, b.w, acc[i][3]);
                }
            }
        }
    }
    sgkc_cp_wait<0>();

    const int n = n0 + tx * TN;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int64_t m = m0 + ty + i * TY;
        if (m >= M)
            continue;
        float v[TN];
#pragma unroll
        for (int j = 0; j < TN; j++)
            v[j] = n + j < a.scale_cols ? acc[i][j] * a.scale : acc[i][j];
        float *dst = a.C + (size_t)m * Nc + n;
        if (a.vec && n < Nc) {
            if (a.residual) {
                const float4 r = sgkc_ld4(a.residual + (size_t)m * Nc + n);
                v[0] += r.x; v[1] += r.y; v[2] += r.z; v[3] += r.w;
            }
            *reinterpret_cast<float4 *>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
            for (int j = 0; j < TN; j++)
                if (n + j < Nc)
                    dst[j] = a.residual ? v[j] + __ldg(a.residual + (size_t)m * Nc + n + j) : v[j];
        }
    }
}

#endif
