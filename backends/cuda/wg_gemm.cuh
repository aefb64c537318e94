/* C = op(A) W^T (+ residual) on Hopper's warpgroup MMA (wgmma, sm_90a) in
 * 3xTF32: tc_gemm.cuh's projections (the same arguments: LayerNorm, scaled
 * columns, residual) at the tensor cores' full TF32 rate, which mma.sync
 * does not reach. The two the layer runs: LayerNorm'd A without a residual
 * (Q/K/V) and plain A with one (the output projection). 16-bit layers run
 * the same kernel on 16-bit operands (below, "16-bit").
 *
 * A block of two warpgroups computes 128 x BN outputs (BN 64, 128, 192 or
 * 256: m64nBNk8 a warpgroup, so one A fragment feeds BN columns). Per k-tile of
 * 32:
 * - Thread 0 issues one TMA load a tile (A; W's TF32 big parts; its small
 *   parts) into a ring of S 128-byte-swizzled stages, each with an
 *   mbarrier for "landed" and one for "free again". No thread spends
 *   instructions on copies or addresses.
 * - W arrives split (sgkc_wg_prep, whenever the weights change), with
 *   gamma folded in: LN(x) W^T = ((x - mean) rstd) (W o gamma)^T + W beta,
 *   W beta being where the accumulators start. The mean is still taken off
 *   x itself, in two passes about the row's first element, so rows with a
 *   mean of 1e4 and a spread of 1e-2 keep their digits. A pass of its own
 *   (sgkc_wg_stats_kernel) takes them once a row into the caller's scratch
 *   (ln_stats), which every column block then reads.
 * - A goes to wgmma from registers in m16n8k8's fragment layout (warp w of
 *   a warpgroup holding rows 16 w .. 16 w + 15), normalised and split
 *   there. W's columns are permuted within each k-tile (a sum does not
 *   care about the order of its terms) so that lane (g, t)'s eight columns
 *   of a k-tile are two 16-byte loads a row instead of eight.
 * Per k-step of 8 a warpgroup issues small A x big W, big A x small W, big
 * A x big W; fragments alternate between two register sets so that the
 * next k-step's are made while the MMAs run, and a stage goes back to
 * thread 0 once both warpgroups' MMAs that read it are done.
 *
 * 16-bit layers: the LayerNorm GEMM in one TF32 pass (W's big parts
 * alone, two k-steps a group); the residual GEMM on 16-bit operands: a
 * stage holds 64 k (two boxes of A, W's 16-bit elements in 128-byte rows),
 * A rounded to the layer's dtype in registers and multiplied with W as
 * given on m64nBNk16, two k-steps a group: half the products of a TF32
 * pass and a sixth of 3xTF32's.
 *
 * Needs K % 4 == 0 and a 16-byte aligned A (TMA's row stride and base);
 * sgkc_wg_takes says so. The kernel body exists only in sm_90a code
 * (__CUDA_ARCH_FEAT_SM90_ALL); the host takes it where the build has sm_90a
 * (SGKC_HAVE_SM90A) and the device is compute capability 9.0. */
#ifndef SGK_CUDA_WG_GEMM_CUH
#define SGK_CUDA_WG_GEMM_CUH

#include "tc_gemm.cuh"
#include "wg_mma.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define SGKC_WG_BM 128
#define SGKC_WG_BK 32
#define SGKC_WG_NT 256 /* two warpgroups */

/* The arithmetic: 3xTF32 on float operands (the fp32 contract); for
 * 16-bit layers (contract 1e-2), one TF32 pass on the big parts (SGKC_WG_TF32,
 * the LayerNorm GEMM: gamma and beta stay folded into W) or one product of
 * 16-bit operands, bf16 or f16 as the layer's dtype (the residual GEMM) */
enum { SGKC_WG_X3 = 0, SGKC_WG_BF16 = 1, SGKC_WG_F16 = 2, SGKC_WG_TF32 = 3 };

/* BN outputs a block's row, S stages, H16: 16-bit operands. A stage is a
 * k-tile: 3xTF32's of 32 (A's box, W's TF32 big and small parts, each
 * 128-byte rows), 16-bit's of 64 (two boxes of A, and W's 64 16-bit
 * elements, again 128-byte rows: the same bytes as a TF32 part's tile). */
template <int BN, int S, bool H16 = false>
struct sgkc_wg_cfg {
    static constexpr int A_FL = SGKC_WG_BM * SGKC_WG_BK, W_FL = BN * SGKC_WG_BK;
    static constexpr int STAGE_FL = H16 ? 2 * A_FL + W_FL : A_FL + 2 * W_FL;
    static constexpr int KB = H16 ? 2 * SGKC_WG_BK : SGKC_WG_BK; /* k a stage */
    static constexpr uint32_t BYTES = (uint32_t)STAGE_FL * 4u; /* a stage's TMA bytes */
    /* stages (1 KB aligned), 2 S mbarriers, alignment slack */
    static constexpr size_t SMEM = (size_t)S * STAGE_FL * 4 + 2 * S * 8 + 1024;
};
/* The instances: as many stages as fit 192 KB beside each other's tiles;
 * at 64, what lets two blocks share an SM where registers allow */
#define SGKC_WG_64 64, 3
#define SGKC_WG_128 128, 4
#define SGKC_WG_192 192, 3
#define SGKC_WG_256 256, 2
#define SGKC_WG_SMEM (sgkc_wg_cfg<SGKC_WG_128>::SMEM)
/* 16-bit operands' stages at each width (each holds twice the k) */
static constexpr int sgkc_wg_s16(int bn) { return bn == 64 ? 2 : bn == 128 ? 4 : 3; }

/* float offset of chunk c (4 floats) of row r in a 128-byte-swizzled tile */
__device__ __forceinline__ int sgkc_wg_at(int r, int c)
{
    return r * SGKC_WG_BK + ((c ^ (r & 7)) << 2);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void sgkc_mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void sgkc_mbar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void sgkc_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void sgkc_mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* the box of map at (c0 inner, c1 outer) into dst, completing on bar */
__device__ __forceinline__ void sgkc_tma_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
#endif

/* A call's tensor maps, made on the host: A (M, K) in boxes of 32 k by
 * 128 rows; W's two TF32 parts (Nc, Kp) in boxes of 32 k by BN rows, or
 * its 16-bit elements (Nc, Kp) in boxes of 64 k by BN rows (wb). */
struct sgkc_wg_maps {
    CUtensorMap a, wb, wl;
};
/* a float pair as two 16-bit elements of one register, the first in the
 * low half (round to nearest even) */
template <bool F16>
__device__ __forceinline__ uint32_t sgkc_wg_pack16(float lo, float hi)
{
    if constexpr (F16) {
        const __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t *>(&h);
    }
}
/* AR: SGKC_WG_X3; SGKC_WG_TF32 (LN); SGKC_WG_BF16 or SGKC_WG_F16 (RES) */
template <int BN, int S, bool LN, bool RES, int AR>
__global__ void __launch_bounds__(SGKC_WG_NT, 1)
    sgkc_wg_kernel(const __grid_constant__ sgkc_wg_maps maps, sgkc_tc_gemm_args a, const float *__restrict__ bias,
                    sgkc_tc_flags f)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool H16 = AR == SGKC_WG_BF16 || AR == SGKC_WG_F16, F16 = AR == SGKC_WG_F16, X3 = AR == SGKC_WG_X3;
    static_assert(!H16 || (!LN && RES), "16-bit operands take the residual GEMM (A as floats, no LayerNorm)");
    using cfg = sgkc_wg_cfg<BN, S, H16>;
    constexpr int BM = SGKC_WG_BM, BK = cfg::KB, R = BN / 2;
    extern __shared__ float4 wg_smem4[];
    float *ring = reinterpret_cast<float *>(((uintptr_t)wg_smem4 + 1023) & ~(uintptr_t)1023);
    uint64_t *bars = reinterpret_cast<uint64_t *>(ring + S * cfg::STAGE_FL); /* full[S], then empty[S] */
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(bars);
    auto full = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto empty = [&](int s) { return bar0 + 8u * (uint32_t)(S + s); };
    auto stage = [&](int s) { return ring + s * cfg::STAGE_FL; };

    /* a stage's TMA bytes (one TF32 pass: W's small part not loaded) */
    constexpr uint32_t BYTES = AR == SGKC_WG_TF32 ? (uint32_t)(cfg::A_FL + cfg::W_FL) * 4u : cfg::BYTES;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t M = a.M, m0 = (int64_t)blockIdx.x * BM;
    const int Nc = a.Nc, K = a.K, n0 = (int)blockIdx.y * BN;
    const int KT = (K + BK - 1) / BK;
    /* split over k: the gridDim.z blocks of one output tile are a cluster,
     * block rank z taking k-tiles kt0 .. kt0 + KTL - 1 */
    const int nsplit = (int)gridDim.z, rank = (int)blockIdx.z;
    const int kt0 = (int)((int64_t)KT * rank / nsplit), KTL = (int)((int64_t)KT * (rank + 1) / nsplit) - kt0;

    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            sgkc_mbar_init(full(s), 1);
            sgkc_mbar_init(empty(s), 2); /* one arrival a consumer warpgroup */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    /* thread 0 issues every load: the first S k-tiles here (W before the
     * grid wait, A, maybe the previous kernel's output, after it), k-tile
     * kt - 1 + S once both warpgroups have given k-tile kt - 1's stage back
     * (kt counts this block's k-tiles) */
    auto load = [&](int kt, bool w, bool x) {
        const int s = kt % S, k = (kt0 + kt) * BK;
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(stage(s));
        if constexpr (H16) { /* A's two boxes, then W's 64 k */
            if (w)
                sgkc_tma_2d(dst + (uint32_t)(2 * cfg::A_FL) * 4u, &maps.wb, k, n0, full(s));
            if (x) {
                sgkc_tma_2d(dst, &maps.a, k, (int)m0, full(s));
                sgkc_tma_2d(dst + (uint32_t)cfg::A_FL * 4u, &maps.a, k + SGKC_WG_BK, (int)m0, full(s));
            }
        } else {
            if (w) {
                sgkc_tma_2d(dst + (uint32_t)cfg::A_FL * 4u, &maps.wb, k, n0, full(s));
                if constexpr (X3)
                    sgkc_tma_2d(dst + (uint32_t)(cfg::A_FL + cfg::W_FL) * 4u, &maps.wl, k, n0, full(s));
            }
            if (x)
                sgkc_tma_2d(dst, &maps.a, k, (int)m0, full(s));
        }
    };
    const int pro = KTL < S ? KTL : S;
    if (tid == 0)
        for (int kt = 0; kt < pro; kt++) {
            sgkc_mbar_expect(full(kt), BYTES);
            load(kt, true, false);
        }
    sgkc_grid_wait();
    if (tid == 0)
        for (int kt = 0; kt < pro; kt++)
            load(kt, false, true);

    /* warpgroup wg of two, warp w4 of its four */
    const int wg = warp >> 2, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    const int ra = 64 * wg + 16 * w4 + g, rb = ra + 8; /* the rows of this thread's A fragments */
    float sh_a = 0.0f, mu_a = 0.0f, rs_a = 0.0f, sh_b = 0.0f, mu_b = 0.0f, rs_b = 0.0f;
    if constexpr (LN) {
        /* sgkc_wg_stats_kernel's, rows past M read as row M - 1's */
        const float *st = a.ln_stats;
        const int64_t Mp = sgkc_ln_stats_rows(M);
        const int64_t pa = m0 + ra < M ? m0 + ra : M - 1, pb = m0 + rb < M ? m0 + rb : M - 1;
        sh_a = st[pa], mu_a = st[Mp + pa], rs_a = st[2 * Mp + pa];
        sh_b = st[pb], mu_b = st[Mp + pb], rs_b = st[2 * Mp + pb];
    }

    /* acc[4j + 2s + e]: row 16 w4 + 8 s + g of the warpgroup's 64, column
     * 8 j + 2 t + e; W beta is where the sums start */
    float acc[R];
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int n = n0 + 8 * j + 2 * t + e;
            const float b0 = LN && rank == 0 && n < Nc ? __ldg(bias + n) : 0.0f;
            acc[4 * j + e] = b0;
            acc[4 * j + 2 + e] = b0;
        }

    /* 3xTF32: ah[set], al[set]; one pass and 16-bit: ah[2 kp + ks], two k-steps a group */
    uint32_t ah[4][4], al[2][4];
    /* fragments of k-step ks (0..3) of the k-tile whose two chunks of rows
     * ra and rb are xa and xb: physical columns 8 t + 2 ks and 8 t + 2 ks + 1
     * (W's permutation puts logical columns t and t + 4 of the k-step there) */
    auto frag = [&](int set, int ks, const float4 (&xa)[2], const float4 (&xb)[2]) {
        const float4 &ca = xa[ks >> 1], &cb = xb[ks >> 1];
        float v[4];
        v[0] = (ks & 1) ? ca.z : ca.x;
        v[1] = (ks & 1) ? cb.z : cb.x;
        v[2] = (ks & 1) ? ca.w : ca.y;
        v[3] = (ks & 1) ? cb.w : cb.y;
        if constexpr (LN) {
            v[0] = ((v[0] - sh_a) - mu_a) * rs_a;
            v[1] = ((v[1] - sh_b) - mu_b) * rs_b;
            v[2] = ((v[2] - sh_a) - mu_a) * rs_a;
            v[3] = ((v[3] - sh_b) - mu_b) * rs_b;
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (X3)
                sgkc_split_tf32(v[e], ah[set][e], al[set][e]);
            else
                ah[set][e] = sgkc_tf32(v[e]); /* one pass: NaN kept (sgkc_tf32) */
        }
    };
    /* 16-bit: fragments of k-step ks (0, 1) of the 32 k of one of A's boxes
     * whose chunks of rows ra and rb are xa and xb: physical columns 8 t +
     * 4 ks .. + 3, which W's permutation (sgkc_wg_prep16) puts at k-step
     * ks's k 2 t, 2 t + 1, 2 t + 8, 2 t + 9 */
    auto frag16 = [&](int set, int ks, const float4 (&xa)[2], const float4 (&xb)[2]) {
        const float4 va = xa[ks], vb = xb[ks];
        ah[set][0] = sgkc_wg_pack16<F16>(va.x, va.y);
        ah[set][1] = sgkc_wg_pack16<F16>(vb.x, vb.y);
        ah[set][2] = sgkc_wg_pack16<F16>(va.z, va.w);
        ah[set][3] = sgkc_wg_pack16<F16>(vb.z, vb.w);
    };
    /* k-tile kt - 1's MMAs are all done: its stage goes back to thread 0,
     * which loads k-tile kt - 1 + S into it */
    auto give_back = [&](int kt) {
        asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory"); /* the whole warpgroup has waited */
        if ((tid & 127) == 0)
            sgkc_mbar_arrive(empty((kt - 1) % S));
        if (tid == 0 && kt - 1 + S < KTL) {
            const int sp = (kt - 1) % S;
            sgkc_mbar_wait(empty(sp), (uint32_t)(((kt - 1) / S) & 1));
            sgkc_mbar_expect(full(sp), BYTES);
            load(kt - 1 + S, true, true);
        }
        __syncwarp();
    };
    /* before group kp (0, 1) of k-tile kt in one pass or 16-bit: the group
     * two before it, which read its fragment sets, is done, and after
     * group 1's wait all of k-tile kt - 1's are, whose stage goes back */
    auto group_wait = [&](int kt, int kp) {
        if (kt > 0) {
            sgkc_wg_wait<1>();
            sgkc_wg_hold(acc);
            sgkc_wg_hold4(ah[2 * kp]);
            sgkc_wg_hold4(ah[2 * kp + 1]);
        }
        if (kt > 0 && kp == 1)
            give_back(kt);
    };

    /* 3xTF32: the k-steps run as one sequence i = 4 kt + ks, fragment set
     * i % 2: before step i's fragments are made, step i - 2's MMAs (which
     * read that set) must be done, and once step 4 kt + 1 has waited so, all
     * of k-tile kt - 1's are. One pass: groups of two k-steps, i = 2 kt +
     * kp; 16-bit: groups of two k-steps of 16, one group a box of A, i = 2
     * kt + kp; the same rule on groups. The
     * warp-synchronous wgmma instructions follow only after __syncwarp,
     * since thread 0 alone may have waited for a stage. */
#pragma unroll 1
    for (int kt = 0; kt < KTL; kt++) {
        const int s = kt % S;
        sgkc_mbar_wait(full(s), (uint32_t)((kt / S) & 1));
        __syncwarp();
        const float *As = stage(s);
        if constexpr (!H16) {
            const float *Wb = As + cfg::A_FL, *Wl = Wb + cfg::W_FL;
            float4 xa[2], xb[2];
#pragma unroll
            for (int c = 0; c < 2; c++) {
                xa[c] = *reinterpret_cast<const float4 *>(As + sgkc_wg_at(ra, 2 * t + c));
                xb[c] = *reinterpret_cast<const float4 *>(As + sgkc_wg_at(rb, 2 * t + c));
            }
            if constexpr (X3) {
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int set = ks & 1;
                    if (kt > 0 || ks >= 2) {
                        sgkc_wg_wait<1>();
                        sgkc_wg_hold(acc);
                        sgkc_wg_hold4(ah[set]);
                        sgkc_wg_hold4(al[set]);
                    }
                    if (kt > 0 && ks == 1)
                        give_back(kt);
                    frag(set, ks, xa, xb);
                    sgkc_wg_step3(acc, ah[set], al[set], Wb + 8 * ks, Wl + 8 * ks);
                }
            } else {
                (void)Wl;
#pragma unroll
                for (int kp = 0; kp < 2; kp++) {
                    group_wait(kt, kp);
                    frag(2 * kp, 2 * kp, xa, xb);
                    frag(2 * kp + 1, 2 * kp + 1, xa, xb);
                    sgkc_wg_step2<R, false, false>(acc, ah[2 * kp], ah[2 * kp + 1], Wb + 16 * kp, Wb + 16 * kp + 8);
                }
            }
        } else {
            const float *Wt = As + 2 * cfg::A_FL; /* 64 k a row, k-step ks of box kp at 32 kp + 16 ks */
#pragma unroll
            for (int kp = 0; kp < 2; kp++) {
                const float *Ab = As + kp * cfg::A_FL;
                float4 xa[2], xb[2];
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    xa[c] = *reinterpret_cast<const float4 *>(Ab + sgkc_wg_at(ra, 2 * t + c));
                    xb[c] = *reinterpret_cast<const float4 *>(Ab + sgkc_wg_at(rb, 2 * t + c));
                }
                group_wait(kt, kp);
                frag16(2 * kp, 0, xa, xb);
                frag16(2 * kp + 1, 1, xa, xb);
                sgkc_wg_step2<R, true, F16>(acc, ah[2 * kp], ah[2 * kp + 1], Wt + 16 * kp, Wt + 16 * kp + 8);
            }
        }
    }
    sgkc_wg_wait<0>();
    sgkc_wg_hold(acc);
    sgkc_grid_trigger();

    if (nsplit == 1) {
#pragma unroll
        for (int sr = 0; sr < 2; sr++) {
            const int64_t m = m0 + (sr ? rb : ra);
            if (m >= M)
                continue;
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
                sgkc_tc_store2<RES>(a, f, m, n0 + 8 * j + 2 * t, acc[4 * j + 2 * sr], acc[4 * j + 2 * sr + 1]);
        }
        return;
    }
    /* Split over k: each block leaves its partial tile in its ring (rows
     * LDR floats apart, so that a warp's float2 stores of eight rows fall
     * on distinct banks), then block rank sums its share of the tile's
     * rows over the cluster's blocks in rank order (the same order every
     * call, so the same bits) and writes them with the epilogue. */
    constexpr int LDR = BN + 8;
    static_assert(SGKC_WG_BM * LDR <= S * cfg::STAGE_FL, "the partial tile fits in the ring");
    __syncthreads(); /* both warpgroups' MMAs, which read the ring, are done */
#pragma unroll
    for (int sr = 0; sr < 2; sr++)
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
            *reinterpret_cast<float2 *>(ring + (sr ? rb : ra) * LDR + 8 * j + 2 * t) =
                make_float2(acc[4 * j + 2 * sr], acc[4 * j + 2 * sr + 1]);
    sgkc_cluster_sync(nsplit);
    const int rows = BM / nsplit, r0 = rank * rows; /* nsplit divides 128 */
#pragma unroll 1
    for (int i = tid; i < rows * (BN / 2); i += SGKC_WG_NT) {
        const int r = r0 + i / (BN / 2), c = 2 * (i % (BN / 2));
        const int64_t m = m0 + r;
        float2 v = make_float2(0.0f, 0.0f);
        for (int p = 0; p < nsplit; p++) {
            const float2 u = *sgkc_cluster_peer(reinterpret_cast<const float2 *>(ring + r * LDR + c), p, nsplit);
            v.x += u.x;
            v.y += u.y;
        }
        if (m < M)
            sgkc_tc_store2<RES>(a, f, m, n0 + c, v.x, v.y);
    }
    sgkc_cluster_sync(nsplit); /* every peer has read this block's tile */
#else
    (void)maps;
    (void)a;
    (void)bias;
    (void)f;
    __trap();
#endif
}

/* The LayerNorm statistics of a.A's rows into a.ln_stats (shift, then
 * mean, then rstd, sgkc_ln_stats_rows(M) floats each), as the GEMM's blocks
 * would take them (the same function, so the same bits: a row's sums do not
 * depend on how many rows a warp takes). One row a warp, four warps a block:
 * the pass is latency-bound (two reads of a row that the second finds in
 * L1), so it wants as many warps in flight as there are rows, and at small M
 * as many blocks as there are rows to spread over the SMs. */
constexpr int SGKC_WG_STATS_NT = 128;
__global__ void __launch_bounds__(SGKC_WG_STATS_NT) sgkc_wg_stats_kernel(sgkc_tc_gemm_args a, int vec)
{
    sgkc_grid_wait(); /* A may be the previous kernel's output */
    /* The GEMM may launch at once: it stages its first weight tiles while
     * these statistics are taken, and its own grid wait returns only once
     * this grid has completed. */
    sgkc_grid_trigger();
    const int lane = (int)threadIdx.x & 31;
    const int64_t m = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (m < a.M)
        sgkc_tc_row_stats<1>(a, m, vec != 0, lane, a.ln_stats + m, a.ln_stats + sgkc_ln_stats_rows(a.M) + m,
                             a.ln_stats + 2 * sgkc_ln_stats_rows(a.M) + m);
}

__global__ void sgkc_wg_prep_kernel(const float *__restrict__ W, const float *__restrict__ gamma,
                                     const float *__restrict__ beta, int Nc, int K, int Kp, float *wb, float *wl,
                                     float *bias)
{
    const int64_t n_all = (int64_t)Nc * Kp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / Kp), q = (int)(i % Kp);
        const int pos = q & 31, ks = pos >> 3, j = pos & 7;
        const int k = (q & ~31) + 8 * (j & 3) + 2 * ks + (j >> 2);
        float w = 0.0f;
        if (k < K)
            w = gamma ? W[(size_t)n * K + k] * gamma[k] : W[(size_t)n * K + k];
        uint32_t h, l;
        sgkc_split_tf32(w, h, l);
        wb[i] = __uint_as_float(h);
        wl[i] = __uint_as_float(l);
    }
    /* one warp a column of W beta */
    const int lane = (int)threadIdx.x & 31;
    const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t n = wid; n < Nc; n += nw) {
        double s = 0.0;
        if (beta)
            for (int k = lane; k < K; k += 32)
                s += (double)W[(size_t)n * K + k] * (double)beta[k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            bias[n] = (float)s;
    }
}

/* W (Nc, K) as 16-bit elements (f16, else bf16: exact for a 16-bit
 * layer's widened weights) in k-tiles of 64, permuted within each so that
 * the kernel's A fragments are whole 16-byte chunks: column 32 kp + 16 ks
 * + j of a k-tile holds its column 32 kp + 8 ((j % 8) / 2) + 4 ks + 2 (j /
 * 8) + j % 2; zeros past K. */
__global__ void sgkc_wg_prep16_kernel(const float *__restrict__ W, int Nc, int K, int Kp, int f16, uint16_t *w)
{
    const int64_t n_all = (int64_t)Nc * Kp;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / Kp), q = (int)(i % Kp);
        const int j = q & 15, ks = (q >> 4) & 1, kp = (q >> 5) & 1;
        const int k = (q & ~63) + 32 * kp + 8 * ((j & 7) >> 1) + 4 * ks + 2 * (j >> 3) + (j & 1);
        const float v = k < K ? W[(size_t)n * K + k] : 0.0f;
        w[i] = sgkc_narrow16(v, f16 != 0);
    }
}

/* One projection's weights as the kernel takes them, remade whenever W,
 * gamma or beta change. 3xTF32 (sgkc_wg_prep): wb and wl (Nc, Kp = K
 * rounded up to 32) the TF32 big part of W[n][k] gamma[k] and the rest,
 * columns permuted within each k-tile (column 8 ks + j of a k-tile holds
 * its column 8 (j % 4) + 2 ks + j / 4), zeros past K; bias[n] = sum_k
 * W[n][k] beta[k] (in double; zeros without LayerNorm). 16-bit
 * (sgkc_wg_prep16): wb W's 16-bit elements (Nc, K rounded up to 64), as
 * sgkc_wg_prep16_kernel lays them out; wl and bias unused. */
struct sgkc_wg_weights {
    const float *wb, *wl, *bias;
};

static inline int sgkc_wg_kp(int K, bool h16 = false) { return h16 ? (K + 63) / 64 * 64 : (K + 31) / 32 * 32; }
/* floats of one projection's weights: wb, wl, then bias; 16-bit: wb alone */
static inline size_t sgkc_wg_floats(int Nc, int K, bool h16 = false)
{
    return h16 ? (size_t)Nc * (size_t)sgkc_wg_kp(K, true) / 2
               : 2 * (size_t)Nc * (size_t)sgkc_wg_kp(K) + (size_t)Nc;
}
static inline sgkc_wg_weights sgkc_wg_weights_at(const float *p, int Nc, int K, bool h16 = false)
{
    if (h16)
        return {p, nullptr, nullptr};
    const size_t n = (size_t)Nc * (size_t)sgkc_wg_kp(K);
    return {p, p + n, p + 2 * n};
}

/* W (Nc, K) with LayerNorm's gamma and beta (both null: none) into p */
static inline cudaError_t sgkc_wg_prep(const float *W, const float *gamma, const float *beta, int Nc, int K, float *p,
                                       cudaStream_t s)
{
    const int Kp = sgkc_wg_kp(K);
    const size_t n = (size_t)Nc * (size_t)Kp;
    const size_t blocks = (n + 255) / 256;
    sgkc_wg_prep_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(W, gamma, beta, Nc, K, Kp, p, p + n,
                                                                                 p + 2 * n);
    return cudaGetLastError();
}

/* W (Nc, K) as 16-bit operands (f16 where f16, else bf16) into p */
static inline cudaError_t sgkc_wg_prep16(const float *W, int Nc, int K, bool f16, float *p, cudaStream_t s)
{
    const int Kp = sgkc_wg_kp(K, true);
    const size_t blocks = ((size_t)Nc * (size_t)Kp + 255) / 256;
    sgkc_wg_prep16_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(W, Nc, K, Kp, f16 ? 1 : 0,
                                                                                    (uint16_t *)p);
    return cudaGetLastError();
}

/* Whether the kernel takes g: TMA needs A's rows and base 16-byte aligned;
 * the instances are LayerNorm without a residual (with scratch for its
 * statistics) and a residual without LayerNorm. */
static inline bool sgkc_wg_takes(const sgkc_tc_gemm_args &g)
{
    const bool packed = (!g.lda || g.lda == g.K) && (!g.ldw || g.ldw == g.K) && (!g.ldc || g.ldc == g.Nc);
    return packed && g.K % 4 == 0 && ((uintptr_t)g.A & 15) == 0 &&
           (g.gamma ? g.ln_stats && !g.residual : g.residual != nullptr);
}

/* The driver's tensor-map encoder, looked up once; null where the driver
 * does not have it (the kernel is then not taken). */
static inline PFN_cuTensorMapEncodeTiled_v12000 sgkc_wg_encoder()
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else /* CUDA 12.0-12.4, which have only the unversioned lookup (deprecated later) */
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return (PFN_cuTensorMapEncodeTiled_v12000) nullptr;
        }
        return q == cudaDriverEntryPointSuccess ? (PFN_cuTensorMapEncodeTiled_v12000)p : nullptr;
    }();
    return fn;
}

/* A row-major (outer, inner) matrix of floats (or, where t says, 16-bit
 * elements) in boxes of 128 bytes x box_outer, 128-byte swizzled; out of
 * range reads as zeros */
static inline cudaError_t sgkc_wg_map(CUtensorMap *m, const float *p, int inner, int64_t outer, int box_outer,
                                      CUtensorMapDataType t = CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = sgkc_wg_encoder();
    if (!encode)
        return cudaErrorNotSupported;
    const cuuint32_t es = t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * es};
    const cuuint32_t box[2] = {128 / es, (cuuint32_t)box_outer};
    const cuuint32_t el[2] = {1, 1};
    const CUresult r = encode(m, t, 2, (void *)p, dims, strides, box, el,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* One instance on g, with w's maps, after the previous kernel where pdl,
 * in arithmetic ar (SGKC_WG_X3, _TF32 with LayerNorm, _BF16 or _F16 with
 * the residual); S: the float operands' stages */
template <int BN, int S>
static inline cudaError_t sgkc_wg_launch(const sgkc_tc_gemm_args &given, const sgkc_wg_weights &w, int ks, int ar,
                                         bool pdl, cudaStream_t s)
{
    sgkc_tc_gemm_args g = given;
    sgkc_tc_rows(g);
    constexpr int S16 = sgkc_wg_s16(BN);
    const bool h16 = ar == SGKC_WG_BF16 || ar == SGKC_WG_F16;
    sgkc_wg_maps m = {};
    const int kp = sgkc_wg_kp(g.K, h16);
    cudaError_t e = sgkc_wg_map(&m.a, g.A, g.K, g.M, SGKC_WG_BM);
    if (e == cudaSuccess)
        e = h16 ? sgkc_wg_map(&m.wb, w.wb, kp, g.Nc, BN,
                              ar == SGKC_WG_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
                : sgkc_wg_map(&m.wb, w.wb, kp, g.Nc, BN);
    if (e == cudaSuccess && ar == SGKC_WG_X3) /* one pass never reads W's small part */
        e = sgkc_wg_map(&m.wl, w.wl, kp, g.Nc, BN);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    lc.blockDim = dim3(SGKC_WG_NT);
    lc.stream = s;
    cudaLaunchAttribute attr[2];
    memset(attr, 0, sizeof attr);
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = attr;
    lc.numAttrs = pdl ? 1 : 0;
    const sgkc_tc_flags f = sgkc_tc_flags_of(g);
    if (g.gamma) {
        lc.blockDim = dim3(SGKC_WG_STATS_NT);
        lc.gridDim = dim3((unsigned)((g.M + SGKC_WG_STATS_NT / 32 - 1) / (SGKC_WG_STATS_NT / 32)));
        e = cudaLaunchKernelEx(&lc, sgkc_wg_stats_kernel, g, f.vec_a);
        lc.blockDim = dim3(SGKC_WG_NT);
        if (e != cudaSuccess)
            return e;
        lc.numAttrs = 1; /* after the statistics */
    }
    lc.gridDim = dim3((unsigned)((g.M + SGKC_WG_BM - 1) / SGKC_WG_BM), (unsigned)((g.Nc + BN - 1) / BN), (unsigned)ks);
    lc.dynamicSmemBytes = h16 ? sgkc_wg_cfg<BN, S16, true>::SMEM : sgkc_wg_cfg<BN, S>::SMEM;
    if (ks > 1) {
        attr[lc.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[lc.numAttrs].val.clusterDim.x = 1;
        attr[lc.numAttrs].val.clusterDim.y = 1;
        attr[lc.numAttrs].val.clusterDim.z = (unsigned)ks;
        lc.numAttrs++;
    }
    if (g.gamma)
        return ar == SGKC_WG_TF32 ? cudaLaunchKernelEx(&lc, sgkc_wg_kernel<BN, S, true, false, SGKC_WG_TF32>, m, g, w.bias, f)
                                  : cudaLaunchKernelEx(&lc, sgkc_wg_kernel<BN, S, true, false, SGKC_WG_X3>, m, g, w.bias, f);
    switch (ar) {
    case SGKC_WG_BF16:
        return cudaLaunchKernelEx(&lc, sgkc_wg_kernel<BN, S16, false, true, SGKC_WG_BF16>, m, g, w.bias, f);
    case SGKC_WG_F16:
        return cudaLaunchKernelEx(&lc, sgkc_wg_kernel<BN, S16, false, true, SGKC_WG_F16>, m, g, w.bias, f);
    default:
        return cudaLaunchKernelEx(&lc, sgkc_wg_kernel<BN, S, false, true, SGKC_WG_X3>, m, g, w.bias, f);
    }
}

/* The blocks of a cluster that split each 128 x 128 output tile's k
 * range (1: none) where the tiles alone leave most SMs idle: doubled while
 * the grid stays within the SMs and each block keeps four k-tiles or more,
 * up to the portable cluster size. Below K = 512 a block's share of k is
 * too short to pay for the merge, so such grids stay on tc_gemm.cuh's
 * 64 x 64 tiles (DESIGN.md, "Split over k"). */
static inline int sgkc_wg_ks(int64_t M, int Nc, int K, int sms)
{
    if (K < 512)
        return 1;
    const int64_t tiles = ((M + SGKC_WG_BM - 1) / SGKC_WG_BM) * (((int64_t)Nc + 127) / 128);
    const int kt = (K + SGKC_WG_BK - 1) / SGKC_WG_BK;
    int ks = 1;
    while (ks < 8 && tiles * 2 * ks <= sms && kt / (2 * ks) >= 4)
        ks *= 2;
    return ks;
}

/* The block width for (M, Nc) on sms SMs (one block an SM): the least
 * waves x BN x a column's cost at that width, which falls as BN grows
 * (m64n256 makes one A fragment feed twice the columns m64n128 does): at
 * 1, 0.84 and 0.75 for 128, 192 and 256 it takes what ran fastest at the
 * Q/K/V and output shapes of the presets and the sweep. 64 (at 1.3) is for
 * output projections whose 128-wide tiles leave SMs idle: half the columns
 * a block, twice the blocks. With LayerNorm (ln) every block normalises and
 * splits its A fragments again, which at 64 columns costs more than the
 * blocks it adds save, so LayerNorm GEMMs keep 128 and up (DESIGN.md). */
static inline int sgkc_wg_bn(int64_t M, int Nc, int sms, bool ln)
{
    const int bn[4] = {64, 128, 192, 256};
    const double per[4] = {1.3, 1.0, 0.84, 0.75};
    const int64_t rows = (M + SGKC_WG_BM - 1) / SGKC_WG_BM;
    int best = 128;
    double best_cost = 0;
    for (int i = ln ? 1 : 0; i < 4; i++) {
        const int64_t blocks = rows * ((Nc + bn[i] - 1) / bn[i]), waves = (blocks + sms - 1) / sms;
        const double c = (double)waves * bn[i] * per[i];
        if (best_cost == 0 || c < best_cost)
            best = bn[i], best_cost = c;
    }
    return best;
}

/* C = op(A) W^T (+ residual) with g's LayerNorm, scaling and residual, W
 * as w holds it, in blocks of 128 x bn (64, 128, 192, 256: sgkc_wg_bn), each output tile's k
 * range split over ks blocks (1, 2, 4 or 8: sgkc_wg_ks); in 3xTF32 (ar
 * SGKC_WG_X3), one TF32 pass (SGKC_WG_TF32, LayerNorm GEMMs) or on 16-bit
 * operands (SGKC_WG_BF16, SGKC_WG_F16, residual GEMMs: w from
 * sgkc_wg_prep16) */
static inline cudaError_t sgkc_wg_gemm(const sgkc_tc_gemm_args &g, const sgkc_wg_weights &w, int bn, int ks,
                                       int ar, bool pdl, cudaStream_t s)
{
    const bool h16 = ar == SGKC_WG_BF16 || ar == SGKC_WG_F16;
    const int kb = h16 ? 2 * SGKC_WG_BK : SGKC_WG_BK;
    if (!sgkc_wg_takes(g) || (ks != 1 && ks != 2 && ks != 4 && ks != 8) || ks > (g.K + kb - 1) / kb ||
        (ar != SGKC_WG_X3 && (g.gamma ? ar != SGKC_WG_TF32 : !h16)))
        return cudaErrorInvalidValue;
    switch (bn) {
    case 64:
        return sgkc_wg_launch<SGKC_WG_64>(g, w, ks, ar, pdl, s);
    case 128:
        return sgkc_wg_launch<SGKC_WG_128>(g, w, ks, ar, pdl, s);
    case 192:
        return sgkc_wg_launch<SGKC_WG_192>(g, w, ks, ar, pdl, s);
    case 256:
        return sgkc_wg_launch<SGKC_WG_256>(g, w, ks, ar, pdl, s);
    default:
        return cudaErrorInvalidValue;
    }
}

template <int BN, int S>
static inline cudaError_t sgkc_wg_prepare_inst()
{
    constexpr int S16 = sgkc_wg_s16(BN);
    const int smem = (int)sgkc_wg_cfg<BN, S>::SMEM, smem16 = (int)sgkc_wg_cfg<BN, S16, true>::SMEM;
    const struct {
        const void *fn;
        int smem;
    } fns[] = {{(const void *)sgkc_wg_kernel<BN, S, true, false, SGKC_WG_X3>, smem},
               {(const void *)sgkc_wg_kernel<BN, S, false, true, SGKC_WG_X3>, smem},
               {(const void *)sgkc_wg_kernel<BN, S, true, false, SGKC_WG_TF32>, smem},
               {(const void *)sgkc_wg_kernel<BN, S16, false, true, SGKC_WG_BF16>, smem16},
               {(const void *)sgkc_wg_kernel<BN, S16, false, true, SGKC_WG_F16>, smem16}};
    cudaError_t e = cudaSuccess;
    for (const auto &f : fns)
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(f.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, f.smem);
    return e;
}

static inline cudaError_t sgkc_wg_gemm_prepare()
{
    cudaError_t e = sgkc_wg_prepare_inst<SGKC_WG_64>();
    if (e == cudaSuccess)
        e = sgkc_wg_prepare_inst<SGKC_WG_128>();
    if (e == cudaSuccess)
        e = sgkc_wg_prepare_inst<SGKC_WG_192>();
    if (e == cudaSuccess)
        e = sgkc_wg_prepare_inst<SGKC_WG_256>();
    return e;
}

#endif
