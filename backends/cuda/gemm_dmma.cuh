/* The projections of the tuned-tiled-dmma variant where K (the layer's D) is
 * 256: C = op(A) W^T (+ residual), the arguments of sgemm.cuh, on the FP64
 * tensor cores of compute capability 9.x (mma.sync m16n8k16 .f64, as
 * mlp_dmma.cuh).
 *
 * Why: gemm_panel.cuh's FFMA loop issues about one instruction a FMA and
 * ran mid's Q/K/V GEMM at a third of the FFMA peak. One DMMA does 2,048
 * FMAs in one issue slot at the same peak, so the loop is a few loads and
 * conversions a DMMA; on the H200 it made tuned-tiled-dmma faster than with
 * tiled's FFMA projections at mid, large and xl, and the n-tile walk, A
 * streamed beside W and slices of 64 k each gained again. The loop alone
 * keeps the DMMA pipe nearly busy at two warps a scheduler, conversions
 * and a barrier every two k-steps included (`dev/mma_probe.cu`), and the
 * whole kernel well short of that (DESIGN.md), so what is left is around
 * the loop: the prologue, the waits for slices and the epilogue.
 *
 * Exactness: A (LayerNorm'd in fp32, as everywhere) and W are fp32; their
 * products are exact in fp64 and the sums are fp64; the Q scale and the
 * residual are applied in fp64, so each output is rounded to fp32 once.
 *
 * A block is 64 x 64 outputs at a time, 4 warps of 32 x 32 (2 m-tiles of
 * 16 by 4 n-tiles of 8), and walks the n-tiles of its group (gridDim.y
 * groups) in turn; variants.cu's dgemm_ntiles picks how many: three at
 * large, where that is clearly faster than one a block. With LayerNorm its A panel (64 rows x 256) is copied
 * into shared memory whole and LayerNorm'd in place once (gemm_panel.cuh's
 * routine), and W streams through a ring of STAGES slices of 64 rows n by
 * BKC k, each issued STAGES - 1 slices ahead; without, each ring slot
 * holds A's slice beside W's, so the first DMMAs wait for one slice, not
 * the panel. W comes as [n][k] (Wnk: PyTorch's layout, as
 * the generated kernels' packed weights hold it), so that both operands
 * are k-contiguous:
 * the k-slots t + 4j of a lane (g, t) in an m16n8k16 fragment stand for
 * k = 4t + j of the k-step, and each fragment is one 16-byte load of four
 * fp32 values per row (A: rows g and g + 8; W: row g), converted to fp64
 * in registers. Rows of 272 and 80 floats (16 mod 32 banks) give those
 * loads 4 wavefronts each, the least for 512 bytes.
 *
 * Shapes: K = 256, Nc a multiple of 64 (3D and D at D = 256), Wnk 16-byte
 * aligned (sgk_packed_layout's offsets are multiples of 4 floats when D
 * is); A, C and the residual at any four-byte alignment (a.vec and
 * a.vec_out say which copies and stores may be wide). */
#ifndef SGK_CUDA_GEMM_DMMA_CUH
#define SGK_CUDA_GEMM_DMMA_CUH

#include "gemm_panel.cuh"
#include "mlp_dmma.cuh"

#define SGKC_GD_BM 64
#define SGKC_GD_BN 64
#define SGKC_GD_NT 128               /* 4 warps of 32 x 32 */
#define SGKC_GD_LDA (SGKC_GP_K + 16) /* the A panel's row, floats */
#define SGKC_GD_BKC 64 /* k of a ring slot (slices of 32 k in 3 stages were slower at large) */
#define SGKC_GD_STAGES 2
#define SGKC_GD_LDB (SGKC_GD_BKC + 16) /* a ring slot's row (one n), floats */

/* With LayerNorm a block holds its whole A panel and a ring of W slices;
 * without, a ring slot holds the A slice (BM rows) above the W slice. */
__host__ __device__ constexpr size_t sgkc_gd_smem_bytes(bool ln)
{
    return (ln ? (size_t)SGKC_GD_BM * SGKC_GD_LDA + (size_t)SGKC_GD_STAGES * SGKC_GD_BN * SGKC_GD_LDB
               : (size_t)SGKC_GD_STAGES * (SGKC_GD_BM + SGKC_GD_BN) * SGKC_GD_LDB) *
           sizeof(float);
}

/* A warp's 32 x 32 outputs, then its accumulators zeroed for the next
 * n-tile. c[2s + e] of tile (mt, nt) is row m + 16 mt + 8s, column
 * n + 8 nt + e (m and n: the lane's first row and column). */
template <bool RES>
__device__ __forceinline__ void sgkc_gd_store(const sgkc_gemm_args &a, double (&acc)[2][4][4], int64_t m_lane,
                                              int n_lane, const float (&res)[2][2][4][2])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const int64_t m = m_lane + 16 * mt + 8 * s;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int n = n_lane + 8 * nt;
                double v[2] = {acc[mt][nt][2 * s], acc[mt][nt][2 * s + 1]};
                acc[mt][nt][2 * s] = acc[mt][nt][2 * s + 1] = 0.0;
                if (m >= a.M)
                    continue;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (n + e < a.scale_cols)
                        v[e] *= (double)a.scale;
                    if constexpr (RES)
                        v[e] += (double)res[mt][s][nt][e];
                }
                float *dst = a.C + (size_t)m * a.Nc + n;
                if (a.vec_out)
                    *reinterpret_cast<float2 *>(dst) = make_float2(__double2float_rn(v[0]), __double2float_rn(v[1]));
                else {
                    dst[0] = __double2float_rn(v[0]);
                    dst[1] = __double2float_rn(v[1]);
                }
            }
        }
}

template <bool LN, bool RES>
__global__ void __launch_bounds__(SGKC_GD_NT, 2) sgkc_gemm_dmma_kernel(sgkc_gemm_args a)
{
    constexpr int BM = SGKC_GD_BM, BN = SGKC_GD_BN, NT = SGKC_GD_NT, K = SGKC_GP_K;
    constexpr int LDA = SGKC_GD_LDA, BKC = SGKC_GD_BKC, LDB = SGKC_GD_LDB, STAGES = SGKC_GD_STAGES;
    constexpr int NCK = K / BKC;
    static_assert((BN * BKC / 4) % NT == 0 && (BM * K / 4) % NT == 0, "whole copies a thread");

    extern __shared__ __align__(16) float smem[];
    constexpr int SLOT = (LN ? BN : BM + BN) * LDB; /* a ring slot: [BM][LDB] of A (without LN), [BN][LDB] of W */
    float *As = smem;                         /* LN: the panel, [BM][LDA] */
    float *ring = smem + (LN ? BM * LDA : 0); /* [STAGES][SLOT] */
    const int64_t M = a.M;
    const int64_t m0 = (int64_t)blockIdx.x * BM;
    /* gridDim.y groups of the Nc / BN n-tiles; this block walks its group's
     * tiles in turn over one panel, its W slices one stream through the ring */
    const int ntiles = a.Nc / BN / (int)gridDim.y, nbase = (int)blockIdx.y * ntiles * BN;
    const int NS = ntiles * NCK; /* ring slices this block */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, t = lane & 3;

    auto load_b = [&](int sl) {
        float *dst = ring + (sl % STAGES) * SLOT + (LN ? 0 : BM * LDB);
        const float *src = a.Wnk + (size_t)(nbase + sl / NCK * BN) * K + sl % NCK * BKC;
#pragma unroll
        for (int l = 0; l < BN * BKC / 4 / NT; l++) {
            const int e = tid + l * NT, r = e / (BKC / 4), q = e % (BKC / 4);
            sgkc_cp_async16(dst + r * LDB + 4 * q, src + (size_t)r * K + 4 * q);
        }
    };
    /* BM rows of A, KQ float4 columns from kq0 on, into rows of ld floats */
    auto load_a = [&](float *dst0, int ld, int kq0, int KQ) {
        for (int e = tid; e < BM * KQ; e += NT) {
            const int r = e / KQ, q = e % KQ;
            float *dst = dst0 + r * ld + 4 * q;
            const float *src = a.A + (size_t)(m0 + r) * K + 4 * (kq0 + q);
            if (m0 + r >= M) /* rows past M: zeros, never stored */
                *reinterpret_cast<float4 *>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
            else if (a.vec)
                sgkc_cp_async16(dst, src);
            else
#pragma unroll
                for (int i = 0; i < 4; i++)
                    sgkc_cp_async4(dst + i, src + i);
        }
    };
    auto load_a_slice = [&](int sl) { load_a(ring + (sl % STAGES) * SLOT, LDB, sl % NCK * (BKC / 4), BKC / 4); };

    /* The residual of the lane's outputs of n-tile j, into registers long
     * before the epilogue (its loads were the output projection's longest
     * stall in ncu). The residual (the call's nodes) was complete before
     * the call's first kernel passed its wait, so n-tile 0's is read before
     * this one's. */
    float res[2][2][4][2];
    auto load_res = [&](int j) {
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const int64_t m = m0 + wm * 32 + g + 16 * mt + 8 * s;
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        res[mt][s][nt][e] = m < M ? __ldg(a.residual + (size_t)m * a.Nc + nbase + j * BN + wn * 32 +
                                                          2 * t + 8 * nt + e)
                                                  : 0.0f;
            }
    };
    if constexpr (RES)
        load_res(0);

    /* W (packed when the layer was created) before the grid wait; A may be
     * the previous kernel's output. Slice sl is complete with commit group
     * max(sl - STAGES + 2, 0), as the waits below count: with LayerNorm the
     * first group holds the panel and groups 1 .. STAGES - 2 are empty;
     * without, group sl holds A's slice sl. */
#pragma unroll
    for (int sl = 0; sl < STAGES - 1; sl++)
        if (sl < NS)
            load_b(sl);
    sgkc_grid_wait();
    if constexpr (LN)
        load_a(As, LDA, 0, K / 4);
#pragma unroll
    for (int sl = 0; sl < STAGES - 1; sl++) {
        if (!LN && sl < NS)
            load_a_slice(sl);
        sgkc_cp_commit();
    }

    double acc[2][4][4] = {};
    for (int j = 0; j < ntiles; j++) {
        if (RES && j > 0)
            load_res(j);
#pragma unroll 1
        for (int c = 0; c < NCK; c++) {
            const int sl = j * NCK + c;
            sgkc_cp_wait<STAGES - 2>();
            __syncthreads(); /* slice sl (and at sl = 0 the panel) landed; slot (sl - 1) % STAGES free */
            if constexpr (LN) {
                if (sl == 0) {
                    sgkc_gp_layernorm<BM, NT / 32, LDA>(As, a, warp, lane);
                    __syncthreads();
                }
            }
            if (sl + STAGES - 1 < NS) {
                load_b(sl + STAGES - 1);
                if constexpr (!LN)
                    load_a_slice(sl + STAGES - 1);
            }
            sgkc_cp_commit();

            const float *slot = ring + (sl % STAGES) * SLOT;
            const float *a_lane = LN ? As + (wm * 32 + g) * LDA + 4 * t + c * BKC : slot + (wm * 32 + g) * LDB + 4 * t;
            constexpr int ALD = LN ? LDA : LDB;
            const float *b_lane = slot + (LN ? 0 : BM * LDB) + (wn * 32 + g) * LDB + 4 * t;
#pragma unroll
            for (int kk = 0; kk < BKC / 16; kk++) {
                double af[2][8];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int s = 0; s < 2; s++) {
                        const float4 v = *reinterpret_cast<const float4 *>(a_lane + (16 * mt + 8 * s) * ALD + 16 * kk);
                        af[mt][s] = v.x;
                        af[mt][2 + s] = v.y;
                        af[mt][4 + s] = v.z;
                        af[mt][6 + s] = v.w;
                    }
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const float4 w = *reinterpret_cast<const float4 *>(b_lane + 8 * nt * LDB + 16 * kk);
                    const double2 b01 = make_double2(w.x, w.y), b23 = make_double2(w.z, w.w);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
                        sgkc_dmma(acc[mt][nt], af[mt], b01, b23, acc[mt][nt]);
                }
            }
        }
        if (j == ntiles - 1)
            sgkc_grid_trigger();
        sgkc_gd_store<RES>(a, acc, m0 + wm * 32 + g, nbase + j * BN + wn * 32 + 2 * t, res);
    }
}

#endif
