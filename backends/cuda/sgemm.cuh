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
    static_assert(BM * BK == 4 * NT && BK * BN == 4 * NT, "one 4-vector per thread per tile");
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
        for (int r = warp; r < BM; r += NT / 32) {
            float mean = 0.0f, rstd = 0.0f;
            if (m0 + r < M)
                sgkc_row_stats(a.A + (size_t)(m0 + r) * K, K, a.eps, lane, &mean, &rstd);
            if (lane == 0) {
                s_mean[r] = mean;
                s_rstd[r] = rstd;
            }
        }
        __syncthreads();
    }

    /* This thread's share of each tile load. */
    const int a_row = tid / (BK / 4), a_k = (tid % (BK / 4)) * 4;
    const int b_k = tid / (BN / 4), b_col = (tid % (BN / 4)) * 4;

    float ra[4], rb[4];
    auto load_tile = [&](int k0) {
        const int64_t m = m0 + a_row;
        const int k = k0 + a_k;
        if (a.vec && m < M && k < K) {
            const float4 v = sgkc_ld4(a.A + (size_t)m * K + k);
            ra[0] = v.x; ra[1] = v.y; ra[2] = v.z; ra[3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                ra[i] = (m < M && k + i < K) ? __ldg(a.A + (size_t)m * K + k + i) : 0.0f;
        }
        if constexpr (LN) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (m < M && k + i < K)
                    ra[i] = fmaf((ra[i] - s_mean[a_row]) * s_rstd[a_row], __ldg(a.gamma + k + i),
                                 __ldg(a.beta + k + i));
        }
        const int kb = k0 + b_k, n = n0 + b_col;
        if (a.vec && kb < K && n < Nc) {
            const float4 v = sgkc_ld4(a.Bt + (size_t)kb * Nc + n);
            rb[0] = v.x; rb[1] = v.y; rb[2] = v.z; rb[3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                rb[i] = (kb < K && n + i < Nc) ? __ldg(a.Bt + (size_t)kb * Nc + n + i) : 0.0f;
        }
    };
    auto store_tile = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            As[buf][a_k + i][a_row] = ra[i];
        *reinterpret_cast<float4 *>(&Bs[buf][b_k][b_col]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
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
