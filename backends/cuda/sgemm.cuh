/* Register-tiled fp32 GEMM, C = op(A) * Bt (+ residual), used for the Q/K/V
 * projection (with LayerNorm applied to A while tiles are loaded) and for the
 * output projection (with the residual added in the epilogue).
 *
 * A is (M, K) row-major, Bt is (K, Nc) row-major (weights packed transposed at
 * layer creation so tile loads are coalesced), C is (M, Nc). Each thread owns
 * a TM x TN block split into four quarters at BM/2 and BN/2, so that the
 * fragment loads of a warp cover contiguous shared memory. Tiles are double
 * buffered through registers: one barrier per BK step. */
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
    int vec; /* K % 4 == 0, Nc % 4 == 0 and A, Bt 16-byte aligned */
};

template <int N>
__device__ __forceinline__ void sgkc_frag(float *dst, const float *src)
{
    if constexpr (N == 4) {
        const float4 v = *reinterpret_cast<const float4 *>(src);
        dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
    } else if constexpr (N == 2) {
        const float2 v = *reinterpret_cast<const float2 *>(src);
        dst[0] = v.x; dst[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < N; i++)
            dst[i] = src[i];
    }
}

/* MINB: blocks per SM the register budget is sized for. */
template <int BM, int BN, int BK, int TM, int TN, bool LN, int MINB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB)
sgkc_sgemm_kernel(sgkc_gemm_args a)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int TX = BN / TN; /* threads along columns */
    constexpr int HM = TM / 2, HN = TN / 2;
    static_assert((BM * BK) % (4 * NT) == 0 && (BK * BN) % (4 * NT) == 0, "whole 4-vectors per thread");
    constexpr int LDA = BM + 4;

    __shared__ __align__(16) float As[2][BK][LDA];
    __shared__ __align__(16) float Bs[2][BK][BN];
    __shared__ float s_mean[LN ? BM : 1], s_rstd[LN ? BM : 1];

    const int tid = threadIdx.x;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int K = a.K, Nc = a.Nc;
    const int64_t M = a.M;

    if constexpr (LN) {
        const int warp = tid >> 5, lane = tid & 31;
        constexpr int RPW = BM / (NT / 32); /* rows per warp */
        const int64_t r0 = m0 + warp * RPW;
        const int nvalid = (int)(M - r0 < RPW ? (M - r0 > 0 ? M - r0 : 0) : RPW);
        if (a.vec && K <= 256 && RPW % 8 == 0) {
            for (int r = 0; r < RPW; r += 8) {
                float mu[8], rs[8];
                sgkc_rows_stats4<8, 2>(a.A + (size_t)(r0 + r) * K, K, nvalid - r, K, a.eps, lane, mu, rs);
                if (lane == 0) {
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        s_mean[warp * RPW + r + i] = mu[i];
                        s_rstd[warp * RPW + r + i] = rs[i];
                    }
                }
            }
        } else {
            for (int r = 0; r < RPW; r++) {
                float mean = 0.0f, rstd = 0.0f;
                if (r < nvalid)
                    sgkc_row_stats(a.A + (size_t)(r0 + r) * K, K, a.eps, lane, &mean, &rstd);
                if (lane == 0) {
                    s_mean[warp * RPW + r] = mean;
                    s_rstd[warp * RPW + r] = rstd;
                }
            }
        }
        __syncthreads();
    }

    /* This thread's share of each tile load: LA and LB 4-vectors. */
    constexpr int LA = BM * BK / (4 * NT), LB = BK * BN / (4 * NT);
    float ra[LA][4], rb[LB][4];
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int l = 0; l < LA; l++) {
            const int e = tid + l * NT;
            const int row = e / (BK / 4), kq = (e % (BK / 4)) * 4;
            const int64_t m = m0 + row;
            const int k = k0 + kq;
            if (a.vec && m < M && k < K) {
                const float4 v = sgkc_ld4(a.A + (size_t)m * K + k);
                ra[l][0] = v.x; ra[l][1] = v.y; ra[l][2] = v.z; ra[l][3] = v.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    ra[l][i] = (m < M && k + i < K) ? __ldg(a.A + (size_t)m * K + k + i) : 0.0f;
            }
            if constexpr (LN) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (m < M && k + i < K)
                        ra[l][i] = fmaf((ra[l][i] - s_mean[row]) * s_rstd[row], __ldg(a.gamma + k + i),
                                        __ldg(a.beta + k + i));
            }
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            const int e = tid + l * NT;
            const int kb = k0 + e / (BN / 4), n = n0 + (e % (BN / 4)) * 4;
            if (a.vec && kb < K && n < Nc) {
                const float4 v = sgkc_ld4(a.Bt + (size_t)kb * Nc + n);
                rb[l][0] = v.x; rb[l][1] = v.y; rb[l][2] = v.z; rb[l][3] = v.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    rb[l][i] = (kb < K && n + i < Nc) ? __ldg(a.Bt + (size_t)kb * Nc + n + i) : 0.0f;
            }
        }
    };
    auto store_tile = [&](int buf) {
#pragma unroll
        for (int l = 0; l < LA; l++) {
            const int e = tid + l * NT;
            const int row = e / (BK / 4), kq = (e % (BK / 4)) * 4;
#pragma unroll
            for (int i = 0; i < 4; i++)
                As[buf][kq + i][row] = ra[l][i];
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            const int e = tid + l * NT;
            *reinterpret_cast<float4 *>(&Bs[buf][e / (BN / 4)][(e % (BN / 4)) * 4]) =
                make_float4(rb[l][0], rb[l][1], rb[l][2], rb[l][3]);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;

    const int ty = tid / TX, tx = tid % TX;
    const int ktiles = (K + BK - 1) / BK;
    load_tile(0);
    store_tile(0);
    __syncthreads();
    for (int kt = 0; kt < ktiles; kt++) {
        const int cur = kt & 1;
        if (kt + 1 < ktiles)
            load_tile((kt + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float fa[TM], fb[TN];
            sgkc_frag<HM>(fa, &As[cur][kk][ty * HM]);
            sgkc_frag<HM>(fa + HM, &As[cur][kk][BM / 2 + ty * HM]);
            sgkc_frag<HN>(fb, &Bs[cur][kk][tx * HN]);
            sgkc_frag<HN>(fb + HN, &Bs[cur][kk][BN / 2 + tx * HN]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
        }
        if (kt + 1 < ktiles)
            store_tile(cur ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int64_t m = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int n = n0 + (j < HN ? tx * HN + j : BN / 2 + tx * HN + (j - HN));
            if (n >= Nc)
                continue;
            float v = acc[i][j];
            if (n < a.scale_cols)
                v *= a.scale;
            if (a.residual)
                v += __ldg(a.residual + (size_t)m * Nc + n);
            a.C[(size_t)m * Nc + n] = v;
        }
    }
}

#endif
