/* Register-tiled fp32 GEMM, C = op(A) * Bt (+ residual), used for the Q/K/V
 * projection (with LayerNorm applied to A while tiles are loaded) and for the
 * output projection (with the residual added in the epilogue), where
 * gemm_panel.cuh does not take the shape (D != 256, misaligned inputs,
 * the output projection past one wave, a device whose shared memory is
 * too small for the panels).
 *
 * A is (M, K) row-major, Bt is (K, Nc) row-major (weights packed transposed at
 * layer creation so tile loads are coalesced), C is (M, Nc). Tiles are double
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
    const float *residual; /* (M, Nc) added to the result (RES instantiation) */
    int scale_cols;        /* columns n < scale_cols are multiplied by scale */
    float scale;
    int vec;     /* K % 4 == 0, Nc % 4 == 0 and A, Bt 16-byte aligned */
    int vec_out; /* C and residual 16-byte aligned (with vec) */
    const float *Wnk; /* gemm_dmma.cuh: B as [Nc][K], 16-byte aligned (Wq|Wk|Wv or Wo in the layer's gen block) */
    float *ln_stats;  /* sgkc_tc_gemm_args' (tc.cu): scratch for the LayerNorm statistics, or null */
    /* sgkc_tc_gemm_args' (tc.cu): C as 16-bit elements of kind k16 (1 bf16,
     * 2 f16) in place of C, or null; only the tensor-core GEMMs write it */
    uint16_t *C16;
    int k16;
};

/* MINB: blocks per SM the register budget is sized for.
 *
 * Each thread owns TM x TN outputs as 4-wide chunks spread over the tile
 * (chunk c of A at c * BM / (TM / 4) + ty * 4), so one warp's fragment loads
 * are LDS.128 over contiguous shared memory. Interior tiles (every block of a
 * preset) load without per-element bounds checks; edge tiles and unaligned
 * inputs take the checked path. */
template <int BM, int BN, int BK, int TM, int TN, bool LN, bool RES, int MINB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB)
sgkc_sgemm_kernel(sgkc_gemm_args a)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int TX = BN / TN; /* threads along columns */
    constexpr int CM = TM / 4, CN = TN / 4;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are 4-float chunks");
    static_assert((BM * BK) % (4 * NT) == 0 && (BK * BN) % (4 * NT) == 0, "whole 4-vectors per thread");
    constexpr int LDA = BM + 4;

    __shared__ __align__(16) float As[2][BK][LDA];
    __shared__ __align__(16) float Bs[2][BK][BN];
    __shared__ float s_shift[LN ? BM : 1], s_mean[LN ? BM : 1], s_rstd[LN ? BM : 1];

    const int tid = threadIdx.x;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int K = a.K, Nc = a.Nc;
    const int64_t M = a.M;
    const bool full = a.vec && m0 + BM <= M && n0 + BN <= Nc && K % BK == 0;

    /* Launched after another kernel (sgkc_grid_wait): the LayerNorm
     * instance is a call's first kernel, so its A (the caller's nodes) may
     * be what the kernel before it wrote; the output projection's A is the
     * attention's ctx, while its residual rows (the nodes again) were
     * complete before the call's first kernel passed its wait. */
    if constexpr (LN) {
        sgkc_grid_wait();
        const int warp = tid >> 5, lane = tid & 31;
        constexpr int RPW = BM / (NT / 32); /* rows per warp */
        constexpr int SR = 4;               /* rows whose loads are in flight at once */
        const int64_t r0 = m0 + warp * RPW;
        const int nvalid = (int)(M - r0 < RPW ? (M - r0 > 0 ? M - r0 : 0) : RPW);
        if (a.vec && K <= 256 && RPW % SR == 0) {
            for (int r = 0; r < RPW; r += SR) {
                float sh[SR], mu[SR], rs[SR];
                sgkc_rows_stats4<SR, 2>(a.A + (size_t)(r0 + r) * K, K, nvalid - r, K, a.eps, lane, sh, mu, rs);
                if (lane == 0) {
#pragma unroll
                    for (int i = 0; i < SR; i++) {
                        s_shift[warp * RPW + r + i] = sh[i];
                        s_mean[warp * RPW + r + i] = mu[i];
                        s_rstd[warp * RPW + r + i] = rs[i];
                    }
                }
            }
        } else {
            for (int r = 0; r < RPW; r++) {
                float shift = 0.0f, mean = 0.0f, rstd = 0.0f;
                if (r < nvalid)
                    sgkc_row_stats(a.A + (size_t)(r0 + r) * K, K, a.eps, lane, &shift, &mean, &rstd);
                if (lane == 0) {
                    s_shift[warp * RPW + r] = shift;
                    s_mean[warp * RPW + r] = mean;
                    s_rstd[warp * RPW + r] = rstd;
                }
            }
        }
        __syncthreads();
    }

    /* This thread's share of each tile load: LA and LB 4-vectors. */
    constexpr int LA = BM * BK / (4 * NT), LB = BK * BN / (4 * NT);
    float4 ra[LA], rb[LB];
    auto load_tile = [&](int k0) {
#pragma unroll
        for (int l = 0; l < LA; l++) {
            const int e = tid + l * NT;
            const int row = e / (BK / 4), kq = (e % (BK / 4)) * 4;
            const int64_t m = m0 + row;
            const int k = k0 + kq;
            if (full) {
                ra[l] = sgkc_ld4(a.A + (size_t)m * K + k);
            } else {
                float v[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = (m < M && k + i < K) ? __ldg(a.A + (size_t)m * K + k + i) : 0.0f;
                ra[l] = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            const int e = tid + l * NT;
            const int kb = k0 + e / (BN / 4), n = n0 + (e % (BN / 4)) * 4;
            if (full) {
                rb[l] = sgkc_ld4(a.Bt + (size_t)kb * Nc + n);
            } else {
                float v[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = (kb < K && n + i < Nc) ? __ldg(a.Bt + (size_t)kb * Nc + n + i) : 0.0f;
                rb[l] = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
    };
    /* LayerNorm is applied here, after the compute of the previous tile, so
     * that the global loads of ra stay in flight across it. Zero padding
     * (rows past M, k past K) stays zero. */
    auto store_tile = [&](int buf, int k0) {
#pragma unroll
        for (int l = 0; l < LA; l++) {
            const int e = tid + l * NT;
            const int row = e / (BK / 4), kq = (e % (BK / 4)) * 4;
            float v[4] = {ra[l].x, ra[l].y, ra[l].z, ra[l].w};
            if constexpr (LN) {
                const int k = k0 + kq;
                const float sh = s_shift[row], mu = s_mean[row], rs = s_rstd[row];
                if (full) {
                    const float4 g = sgkc_ld4(a.gamma + k), b = sgkc_ld4(a.beta + k);
                    v[0] = fmaf(((v[0] - sh) - mu) * rs, g.x, b.x);
                    v[1] = fmaf(((v[1] - sh) - mu) * rs, g.y, b.y);
                    v[2] = fmaf(((v[2] - sh) - mu) * rs, g.z, b.z);
                    v[3] = fmaf(((v[3] - sh) - mu) * rs, g.w, b.w);
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        if (m0 + row < M && k + i < K)
                            v[i] = fmaf(((v[i] - sh) - mu) * rs, __ldg(a.gamma + k + i), __ldg(a.beta + k + i));
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                As[buf][kq + i][row] = v[i];
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            const int e = tid + l * NT;
            *reinterpret_cast<float4 *>(&Bs[buf][e / (BN / 4)][(e % (BN / 4)) * 4]) = rb[l];
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;

    /* A warp holds 8 x 4 of the thread grid (tx, ty), lane bits 1-3 giving
     * tx and bits 0 and 4 giving ty. A k step's fragment loads are then
     * 64 bytes of A and 128 bytes of B a warp, and the lanes that share an
     * address come in the pairs the shared-memory pipe returns at twice
     * the rate (lane n and n ^ 2 read the same A, n and n ^ 1 the same B).
     * Row-major over the grid (16 threads a row) a warp read 2 A and 16 B
     * chunks, B at the single rate, and the GEMMs were bound by that pipe
     * (MIO Throttle and Short Scoreboard the top stalls in ncu). */
    constexpr int WX = 8, WY = 4;
    static_assert(TX % WX == 0 && (NT / TX) % WY == 0, "whole warps of 8 x 4 threads");
    const int wid = tid >> 5, wl = tid & 31;
    const int tx = (wid % (TX / WX)) * WX + ((wl >> 1) & 7);
    const int ty = (wid / (TX / WX)) * WY + ((wl & 1) | (wl >> 4) << 1);
    /* This thread's outputs: row i (0..TM) of C, and 4-column chunk c
     * (0..CN) as an offset in the block's tile. */
    auto out_m = [&](int i) { return m0 + (i / 4) * (BM / CM) + ty * 4 + (i % 4); };
    auto out_col = [&](int c) { return c * (BN / CN) + tx * 4; };
    const int ktiles = (K + BK - 1) / BK;
    const bool vout = full && a.vec_out;
    /* The residual is read before the main loop so that its latency hides
     * behind the tiles instead of stalling the epilogue. */
    float4 res[RES ? TM : 1][RES ? CN : 1];
    if constexpr (RES) {
        if (vout)
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int c = 0; c < CN; c++)
                    res[i][c] = sgkc_ld4(a.residual + (size_t)out_m(i) * Nc + n0 + out_col(c));
    }
    if constexpr (!LN)
        sgkc_grid_wait();
    load_tile(0);
    store_tile(0, 0);
    __syncthreads();
    for (int kt = 0; kt < ktiles; kt++) {
        const int cur = kt & 1;
        if (kt + 1 < ktiles)
            load_tile((kt + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int c = 0; c < CM; c++)
                *reinterpret_cast<float4 *>(fa + 4 * c) =
                    *reinterpret_cast<const float4 *>(&As[cur][kk][c * (BM / CM) + ty * 4]);
#pragma unroll
            for (int c = 0; c < CN; c++)
                *reinterpret_cast<float4 *>(fb + 4 * c) = *reinterpret_cast<const float4 *>(&Bs[cur][kk][out_col(c)]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
        }
        if (kt + 1 < ktiles)
            store_tile(cur ^ 1, (kt + 1) * BK);
        __syncthreads();
    }

    sgkc_grid_trigger();

    /* Epilogue: a chunk of 4 columns is all-Q or all-not when vec (D % 4 == 0). */
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int64_t m = out_m(i);
        if (m >= M)
            continue;
#pragma unroll
        for (int c = 0; c < CN; c++) {
            const int n = n0 + out_col(c);
            float v[4] = {acc[i][4 * c], acc[i][4 * c + 1], acc[i][4 * c + 2], acc[i][4 * c + 3]};
            if (vout) {
                if (n < a.scale_cols)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        v[j] *= a.scale;
                if constexpr (RES) {
                    v[0] += res[i][c].x; v[1] += res[i][c].y; v[2] += res[i][c].z; v[3] += res[i][c].w;
                }
                *reinterpret_cast<float4 *>(a.C + (size_t)m * Nc + n) = make_float4(v[0], v[1], v[2], v[3]);
                continue;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (n + j >= Nc)
                    continue;
                if (n + j < a.scale_cols)
                    v[j] *= a.scale;
                if constexpr (RES)
                    v[j] += __ldg(a.residual + (size_t)m * Nc + n + j);
                a.C[(size_t)m * Nc + n + j] = v[j];
            }
        }
    }
}

#endif
