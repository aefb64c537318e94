/* fp32 GEMM for the projections where K (the layer's D) is 256, as at the
 * mid, large and xl presets: C = op(A) * Bt (+ residual), the arguments of
 * sgemm.cuh.
 *
 * sgemm.cuh stages one 16-deep k slice of A and B at a time through
 * registers, with a barrier per slice: its next slice's loads have one
 * slice of FMAs (about 512 issue cycles at 8 warps an SM) to land in, less
 * than a load from L2 takes, so at mid the Q/K/V GEMM ran at about a third
 * of the FFMA peak (ncu). Here a block's whole A
 * panel (BM rows x K) is copied into shared memory at once, LayerNorm'd in
 * place there (two passes over rows already in shared memory), and B
 * streams through a ring of STAGES slices of 32 rows by cp.async, each
 * issued STAGES - 1 slices ahead; the packed weights are constant, so the
 * first slices start before the grid wait. One barrier per 32-deep slice.
 *
 * A thread owns TM rows (ty + TY i) and TN columns: TN / 4 chunks of 4
 * (column 4 tx of each 4 TX wide band) and, when TN % 4 == 2, one chunk of
 * 2 after them. A warp is 8 x 4 of the (tx, ty) grid: its A loads read 4
 * rows (banks 4 apart, since the row stride K + 4 is 4 mod 32) and its B
 * loads 8 consecutive chunks, one shared-memory wavefront each. Each
 * output sums its K terms in order k = 0, 1, ..., as sgemm.cuh does; with
 * KG = 2 groups (no LayerNorm; the output projection at mid) a block has
 * twice the threads, the second half summing k = 128 .. 255 with its own
 * ring of B, and the two sums are added at the end: twice the warps an SM
 * for the same registers a thread.
 *
 * With WALK (the Q/K/V projection at large and xl, where one column block
 * a block made two waves) a block walks several column blocks over its
 * one copied and LayerNormed panel, so the copy and LayerNorm are paid
 * once for them and the grid is one wave.
 *
 * At mid the Q/K/V GEMM issues well ahead of sgemm.cuh's with 8 warps an
 * SM, its main loop almost all FFMA. The A panel (66.5 KB at BM = 64) is what caps a block's SM at
 * two blocks. */
#ifndef SGK_CUDA_GEMM_PANEL_CUH
#define SGK_CUDA_GEMM_PANEL_CUH

#include "sgemm.cuh"

#define SGKC_GP_BKC 32 /* rows of B a ring slot holds */
#define SGKC_GP_K 256  /* K, compiled in */

/* Dynamic shared memory of one block, in bytes: the A panel and a ring of
 * B slices for each of KG groups. */
__host__ __device__ constexpr size_t sgkc_gp_smem_bytes(int BM, int BN, int STAGES, int KG)
{
    return ((size_t)BM * (SGKC_GP_K + 4) + (size_t)KG * STAGES * SGKC_GP_BKC * BN) * sizeof(float);
}

/* The shapes the kernel takes: K = 256, whole column blocks, 16-byte
 * aligned A, Bt, C and residual (M may end inside a block). */
static inline bool sgkc_gp_fits(const sgkc_gemm_args &g, int BN)
{
    return g.K == SGKC_GP_K && g.Nc % BN == 0 && g.vec && g.vec_out;
}

/* LayerNorm of a panel's BM rows in place (row stride LDA): warp w of
 * NW takes rows 8w .. 8w + 7, then 8 (w + NW) .., eight at a time so that
 * the reductions' shuffle chains overlap; lane l holds columns l + 32 u.
 * Two passes, mean then centred squares, over the row shifted by its
 * first element, as sgkc_rows_stats4. */
template <int BM, int NW, int LDA = SGKC_GP_K + 4>
__device__ __forceinline__ void sgkc_gp_layernorm(float *As, const sgkc_gemm_args &a, int wid, int lane)
{
    constexpr int K = SGKC_GP_K, RB = 8, KU = K / 32;
    static_assert(BM % (NW * RB) == 0, "whole row batches per warp");
    float g[KU], bt[KU];
#pragma unroll
    for (int u = 0; u < KU; u++) {
        g[u] = __ldg(a.gamma + lane + 32 * u);
        bt[u] = __ldg(a.beta + lane + 32 * u);
    }
#pragma unroll 1
    for (int r0 = wid * RB; r0 < BM; r0 += NW * RB) {
        float x[RB][KU], mu[RB], rs[RB];
#pragma unroll
        for (int r = 0; r < RB; r++) {
            mu[r] = 0.0f;
            const float x0 = As[(r0 + r) * LDA];
#pragma unroll
            for (int u = 0; u < KU; u++) {
                x[r][u] = As[(r0 + r) * LDA + lane + 32 * u] - x0;
                mu[r] += x[r][u];
            }
        }
        sgkc_warp_sums(mu);
#pragma unroll
        for (int r = 0; r < RB; r++) {
            mu[r] *= 1.0f / (float)K;
            rs[r] = 0.0f;
#pragma unroll
            for (int u = 0; u < KU; u++) {
                const float d = x[r][u] - mu[r];
                rs[r] = fmaf(d, d, rs[r]);
            }
        }
        sgkc_warp_sums(rs);
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float rstd = 1.0f / sqrtf(rs[r] * (1.0f / (float)K) + a.eps);
#pragma unroll
            for (int u = 0; u < KU; u++)
                As[(r0 + r) * LDA + lane + 32 * u] = fmaf((x[r][u] - mu[r]) * rstd, g[u], bt[u]);
        }
    }
}

template <bool LN, bool RES, int BM, int BN, int TM, int TN, int STAGES, int MINB, int KG, bool WALK = false>
__global__ void __launch_bounds__(KG * (BM / TM) * (BN / TN), MINB) sgkc_gemm_panel_kernel(sgkc_gemm_args a)
{
    constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY, BKC = SGKC_GP_BKC;
    constexpr int K = SGKC_GP_K, LDA = K + 4, NCK = K / BKC, GCK = NCK / KG;
    static_assert(KG == 1 || (KG == 2 && !LN), "K groups only without LayerNorm (it needs whole rows)");
    static_assert(!WALK || (LN && !RES && KG == 1), "a walk over a LayerNorm'd panel only");
    static_assert(NCK % KG == 0, "whole slices a group");
    constexpr int C4 = TN / 4, C2 = TN % 4 == 2; /* chunks of 4 and of 2 */
    static_assert(TN % 2 == 0 && BN % TN == 0 && BM % TM == 0, "whole chunks and tiles");
    static_assert(TX % 8 == 0 && TY % 4 == 0, "whole warps of 8 x 4 threads");
    static_assert((BKC * BN / 4) % NT == 0, "whole ring-slot copies per thread");
    static_assert(STAGES >= 2, "a slot in use and one in flight");

    extern __shared__ __align__(16) float smem[];
    const int Nc = a.Nc;
    const int64_t M = a.M;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    /* WALK: a block walks ntiles column blocks over its panel (gridDim.y =
     * Nc / BN / ntiles), so it copies and LayerNorms its rows once for all
     * of them; their B slices stream through the ring as one sequence of S
     * slices. Otherwise a block has one column block, with ntiles a
     * constant: mid's Q/K/V was slower walking a runtime count of one. */
    const int ntiles = WALK ? Nc / BN / (int)gridDim.y : 1;
    const int nb = blockIdx.y * ntiles * BN;
    const int S = ntiles * GCK;
    /* K group kg (threads NT kg ..) sums slices kg GCK .. (kg + 1) GCK - 1
     * with its own ring and barrier (sgkc_group_sync); group 0 adds group
     * 1's sums. */
    const int kg = KG == 1 ? 0 : threadIdx.x / NT;
    const int c0 = kg * GCK;
    float *As = smem;                                 /* [BM][LDA] */
    float *Bs = As + BM * LDA + kg * STAGES * BKC * BN; /* [STAGES][BKC][BN] */

    const int tid = KG == 1 ? threadIdx.x : threadIdx.x % NT, lane = tid & 31, wid = tid >> 5;
    const int tx = (wid % (TX / 8)) * 8 + (lane & 7);
    const int ty = (wid / (TX / 8)) * 4 + (lane >> 3);

    auto load_b = [&](int sl) { /* slice sl % GCK of the group's K range, column block sl / GCK */
        float *dst = Bs + (sl % STAGES) * BKC * BN;
        const int c = c0 + (WALK ? sl % GCK : sl);
        const float *src = a.Bt + (size_t)c * BKC * Nc + nb + (WALK ? sl / GCK * BN : 0);
#pragma unroll
        for (int l = 0; l < BKC * BN / 4 / NT; l++) {
            const int e = tid + l * NT, r = e / (BN / 4), q = e % (BN / 4);
            sgkc_cp_async16(dst + r * BN + 4 * q, src + (size_t)r * Nc + 4 * q);
        }
    };

    /* The residual (the call's nodes) was complete before the call's first
     * kernel passed its wait, so it is read before this one's. */
    float res[RES ? TM : 1][RES ? TN : 1];
    if (RES && kg == 0) {
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int64_t m = m0 + ty + TY * i;
            const float *rr = a.residual + (size_t)(m < M ? m : 0) * Nc + nb;
#pragma unroll
            for (int c = 0; c < C4; c++) {
                const float4 v = sgkc_ld4(rr + c * 4 * TX + 4 * tx);
                res[i][4 * c] = v.x; res[i][4 * c + 1] = v.y; res[i][4 * c + 2] = v.z; res[i][4 * c + 3] = v.w;
            }
            if constexpr (C2) {
                const float2 v = __ldg(reinterpret_cast<const float2 *>(rr + C4 * 4 * TX + 2 * tx));
                res[i][4 * C4] = v.x; res[i][4 * C4 + 1] = v.y;
            }
        }
    }

    /* Group 0: the first STAGES - 1 slices of B (the packed weights, written
     * when the layer was created) and the whole A panel, which may be what
     * the previous kernel wrote. Empty groups after it keep "slice c is in
     * group max(c - STAGES + 2, 0)" for the waits below. */
    for (int c = 0; c < STAGES - 1 && c < S; c++)
        load_b(c);
    sgkc_grid_wait();
    { /* a group copies the columns it reads */
        constexpr int kq = K / 4 / KG;
        static_assert((BM * kq) % NT == 0, "whole panel copies per thread");
#pragma unroll 4
        for (int e = tid; e < BM * kq; e += NT) {
            const int r = e / kq, q = e % kq + kg * kq;
            float *dst = As + r * LDA + 4 * q;
            if (m0 + r < M)
                sgkc_cp_async16(dst, a.A + (size_t)(m0 + r) * K + 4 * q);
            else /* rows past M: zeros, never stored */
                *reinterpret_cast<float4 *>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    sgkc_cp_commit();
#pragma unroll
    for (int c = 1; c < STAGES - 1; c++)
        sgkc_cp_commit();

    const float *a_th = As + ty * LDA + c0 * BKC;
#pragma unroll 1
    for (int jt = 0; jt < ntiles; jt++) {
        const int n0 = nb + jt * BN;
        float acc[TM][TN] = {};
        for (int c = 0; c < GCK; c++) {
            const int sl = jt * GCK + c;
            sgkc_cp_wait<STAGES - 2>();
            sgkc_group_sync<KG, NT>(kg); /* slice sl (and at sl = 0 the A panel) landed; slot (sl - 1) % STAGES free */
            if constexpr (LN) {
                if (sl == 0) {
                    sgkc_gp_layernorm<BM, NT / 32>(As, a, wid, lane);
                    __syncthreads();
                }
            }
            if (sl + STAGES - 1 < S)
                load_b(sl + STAGES - 1);
            sgkc_cp_commit();

            const float *a_c = a_th + c * BKC;
            const float *b_c = Bs + (sl % STAGES) * BKC * BN;
#pragma unroll
            for (int k4 = 0; k4 < BKC / 4; k4++) {
                float4 av[TM];
#pragma unroll
                for (int i = 0; i < TM; i++)
                    av[i] = *reinterpret_cast<const float4 *>(a_c + TY * i * LDA + 4 * k4);
                float bv[4][TN];
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const float *br = b_c + (4 * k4 + kk) * BN;
#pragma unroll
                    for (int cc = 0; cc < C4; cc++)
                        *reinterpret_cast<float4 *>(&bv[kk][4 * cc]) =
                            *reinterpret_cast<const float4 *>(br + cc * 4 * TX + 4 * tx);
                    if constexpr (C2)
                        *reinterpret_cast<float2 *>(&bv[kk][4 * C4]) =
                            *reinterpret_cast<const float2 *>(br + C4 * 4 * TX + 2 * tx);
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
#pragma unroll
                    for (int i = 0; i < TM; i++) {
                        const float av_k = kk == 0 ? av[i].x : kk == 1 ? av[i].y : kk == 2 ? av[i].z : av[i].w;
#pragma unroll
                        for (int j = 0; j < TN; j++)
                            acc[i][j] = fmaf(av_k, bv[kk][j], acc[i][j]);
                    }
            }
        }

        if (jt == ntiles - 1)
            sgkc_grid_trigger();

        if constexpr (KG == 2) {
            /* Group 1's sums go to the slot of its ring after the one its last
             * slice is in: every thread of the group read that slot before the
             * last slice's barrier, and no copy into it is pending. */
            static_assert(STAGES >= 2 && TM * TN * NT <= BKC * BN, "group 1's sums fit in one free slot");
            float *st = As + BM * LDA + (STAGES + GCK % STAGES) * BKC * BN + tid;
            if (kg == 1) {
#pragma unroll
                for (int i = 0; i < TM; i++)
#pragma unroll
                    for (int j = 0; j < TN; j++)
                        st[(i * TN + j) * NT] = acc[i][j];
            }
            __syncthreads();
            if (kg == 1)
                return;
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    acc[i][j] += st[(i * TN + j) * NT];
        }

#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int64_t m = m0 + ty + TY * i;
            if (m >= M)
                continue;
            float *cr = a.C + (size_t)m * Nc + n0;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int n = n0 + (j < 4 * C4 ? (j / 4) * 4 * TX + 4 * tx + j % 4 : C4 * 4 * TX + 2 * tx + j - 4 * C4);
                if (n < a.scale_cols)
                    acc[i][j] *= a.scale;
                if constexpr (RES)
                    acc[i][j] += res[i][j];
            }
#pragma unroll
            for (int cc = 0; cc < C4; cc++)
                *reinterpret_cast<float4 *>(cr + cc * 4 * TX + 4 * tx) =
                    make_float4(acc[i][4 * cc], acc[i][4 * cc + 1], acc[i][4 * cc + 2], acc[i][4 * cc + 3]);
            if constexpr (C2)
                *reinterpret_cast<float2 *>(cr + C4 * 4 * TX + 2 * tx) = make_float2(acc[i][4 * C4], acc[i][4 * C4 + 1]);
        }
    }
}

#endif
