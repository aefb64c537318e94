/* A candidate for wg_gemm.cuh, validated and timed beside it by
 * tc_gemm_check.cu ("tma128", "tma192", "tma256"): the same projections
 * with far fewer instructions a product, which is what holds wg_gemm.cuh
 * well below the 3xTF32 ceiling (DESIGN.md, "What limits it").
 *
 * - The copies leave the threads: thread 0 issues one TMA load a tile (A,
 *   W's big parts, W's small parts) into 128-byte-swizzled stages, with an
 *   mbarrier a stage for "landed" and one for "free again". (A producer
 *   warp of its own would make the block 288 threads, which ptxas sizes
 *   registers for as 384: 168 a thread, too few for 128 accumulators.)
 * - W arrives split, with gamma folded in: whenever the weights change the
 *   host would remake Wb + Wl = W o gamma (each column scaled by gamma, its
 *   TF32 big part and the rest) and bias = W beta, so LayerNorm in the loop
 *   is ((x - shift) - mean) * rstd and beta is the accumulators' start.
 *   LN(x) W^T = ((x - mean) rstd) (W o gamma)^T + W beta exactly; the mean is
 *   still taken off x itself, so rows with a large mean lose nothing.
 * - A goes to wgmma from registers (m16n8k8's fragment layout, warp w of a
 *   warpgroup holding rows 16 w .. 16 w + 15), made from the landed tile:
 *   W's columns are permuted within each 32-wide k-tile (a sum does not
 *   care about the order of its terms) so that lane (g, t)'s eight columns
 *   of a k-tile are two 16-byte loads a row instead of eight.
 * - One warpgroup takes 64 x BN outputs (m64nBNk8), so a fragment feeds BN
 *   columns; BN 256 halves the fragment work of a FLOP against 128.
 * Per k-step of 8 a warpgroup issues small A x big W, big A x small W, big A
 * x big W, as wg_gemm.cuh does; fragments alternate between two sets of 8
 * registers so that the next k-step's are made while the MMAs run.
 *
 * Needs K % 4 == 0 and a 16-byte aligned A (TMA's row stride and address);
 * the harness skips other cases. */
#ifndef SGK_CUDA_DEV_WG_TMA_CUH
#define SGK_CUDA_DEV_WG_TMA_CUH

#include "wg_gemm.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#define SGKC_WGT_BM 128
#define SGKC_WGT_BK 32
#define SGKC_WGT_NT 256 /* two warpgroups */

template <int BN, int S>
struct sgkc_wgt_cfg {
    static constexpr int A_FL = SGKC_WGT_BM * SGKC_WGT_BK, W_FL = BN * SGKC_WGT_BK;
    static constexpr int STAGE_FL = A_FL + 2 * W_FL;
    static constexpr uint32_t BYTES = (uint32_t)STAGE_FL * 4u; /* a stage's TMA bytes */
    /* stages (1 KB aligned), LayerNorm statistics, 2 S mbarriers, alignment slack */
    static constexpr size_t SMEM = (size_t)S * STAGE_FL * 4 + 3 * SGKC_WGT_BM * 4 + 2 * S * 8 + 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void sgkc_wgt_mma_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void sgkc_wgt_mma_n192(float (&d)[96], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void sgkc_wgt_mma_n256(float (&d)[128], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}


template <int R>
__device__ __forceinline__ void sgkc_wgt_mma(float (&d)[R], const uint32_t (&a)[4], uint64_t db)
{
    if constexpr (R == 64)
        sgkc_wgt_mma_n128(d, a, db);
    else if constexpr (R == 96)
        sgkc_wgt_mma_n192(d, a, db);
    else
        sgkc_wgt_mma_n256(d, a, db);
}

/* sgkc_wg_hold's counterpart for a fragment still read by MMAs in flight */
__device__ __forceinline__ void sgkc_wgt_hold4(uint32_t (&a)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        asm volatile("" : "+r"(a[i])::"memory");
}

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

/* The tensor maps of one call, made on the host (a layer would keep them). */
struct sgkc_wgt_maps {
    CUtensorMap a, wb, wl;
};

template <int BN, int S, bool LN, bool RES>
__global__ void __launch_bounds__(SGKC_WGT_NT, 1)
    sgkc_wgt_kernel(const __grid_constant__ sgkc_wgt_maps maps, sgkc_tc_gemm_args a, const float *__restrict__ bias,
                    sgkc_tc_flags f)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using cfg = sgkc_wgt_cfg<BN, S>;
    constexpr int BM = SGKC_WGT_BM, BK = SGKC_WGT_BK, R = BN / 2;
    extern __shared__ float4 wgt_smem4[];
    float *ring = reinterpret_cast<float *>(((uintptr_t)wgt_smem4 + 1023) & ~(uintptr_t)1023);
    float *s_shift = ring + S * cfg::STAGE_FL, *s_mean = s_shift + BM, *s_rstd = s_mean + BM;
    uint64_t *bars = reinterpret_cast<uint64_t *>(s_rstd + BM); /* full[S], then empty[S] */
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(bars);
    auto full = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto empty = [&](int s) { return bar0 + 8u * (uint32_t)(S + s); };
    auto stage = [&](int s) { return ring + s * cfg::STAGE_FL; };

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t M = a.M, m0 = (int64_t)blockIdx.x * BM;
    const int Nc = a.Nc, K = a.K, n0 = (int)blockIdx.y * BN;
    const int KT = (K + BK - 1) / BK;

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
     * kt - 1 + S once both warpgroups have given k-tile kt - 1's stage back */
    auto load = [&](int kt, bool w, bool x) {
        const int s = kt % S;
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(stage(s));
        if (w) {
            sgkc_tma_2d(dst + (uint32_t)cfg::A_FL * 4u, &maps.wb, kt * BK, n0, full(s));
            sgkc_tma_2d(dst + (uint32_t)(cfg::A_FL + cfg::W_FL) * 4u, &maps.wl, kt * BK, n0, full(s));
        }
        if (x)
            sgkc_tma_2d(dst, &maps.a, kt * BK, (int)m0, full(s));
    };
    const int pro = KT < S ? KT : S;
    if (tid == 0)
        for (int kt = 0; kt < pro; kt++) {
            sgkc_mbar_expect(full(kt), cfg::BYTES);
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
#pragma unroll 1
        for (int q = warp; q < BM / 4; q += 8)
            sgkc_tc_row_stats<4>(a, m0 + 4 * q, f.vec_a, lane, s_shift + 4 * q, s_mean + 4 * q, s_rstd + 4 * q);
        __syncthreads();
        sh_a = s_shift[ra], mu_a = s_mean[ra], rs_a = s_rstd[ra];
        sh_b = s_shift[rb], mu_b = s_mean[rb], rs_b = s_rstd[rb];
    }

    /* acc[4j + 2s + e]: row 16 w4 + 8 s + g of the warpgroup's 64, column
     * 8 j + 2 t + e; W beta is where the sums start */
    float acc[R];
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int n = n0 + 8 * j + 2 * t + e;
            const float b0 = LN && n < Nc ? __ldg(bias + n) : 0.0f;
            acc[4 * j + e] = b0;
            acc[4 * j + 2 + e] = b0;
        }

    uint32_t ah[2][4], al[2][4];
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
        for (int e = 0; e < 4; e++)
            sgkc_split_tf32(v[e], ah[set][e], al[set][e]);
    };

    /* The k-steps run as one sequence i = 4 kt + ks, fragment set i % 2:
     * before step i's fragments are made, step i - 2's MMAs (which read
     * that set) must be done, and once step 4 kt + 1 has waited so, all of
     * k-tile kt - 1's are, and its stage goes back to thread 0's loads.
     * The warp-synchronous wgmma instructions follow only after __syncwarp,
     * since thread 0 alone may have waited for a stage. */
#pragma unroll 1
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % S;
        sgkc_mbar_wait(full(s), (uint32_t)((kt / S) & 1));
        __syncwarp();
        const float *As = stage(s), *Wb = As + cfg::A_FL, *Wl = Wb + cfg::W_FL;
        float4 xa[2], xb[2];
#pragma unroll
        for (int c = 0; c < 2; c++) {
            xa[c] = *reinterpret_cast<const float4 *>(As + sgkc_wg_at(ra, 2 * t + c));
            xb[c] = *reinterpret_cast<const float4 *>(As + sgkc_wg_at(rb, 2 * t + c));
        }
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const int set = ks & 1;
            if (kt > 0 || ks >= 2) {
                sgkc_wg_wait<1>();
                sgkc_wg_hold(acc);
                sgkc_wgt_hold4(ah[set]);
                sgkc_wgt_hold4(al[set]);
            }
            if (kt > 0 && ks == 1) {
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory"); /* the whole warpgroup has waited */
                if ((tid & 127) == 0)
                    sgkc_mbar_arrive(empty((kt - 1) % S));
                if (tid == 0 && kt - 1 + S < KT) {
                    const int sp = (kt - 1) % S;
                    sgkc_mbar_wait(empty(sp), (uint32_t)(((kt - 1) / S) & 1));
                    sgkc_mbar_expect(full(sp), cfg::BYTES);
                    load(kt - 1 + S, true, true);
                }
                __syncwarp();
            }
            frag(set, ks, xa, xb);
            sgkc_wg_fence();
            sgkc_wg_hold(acc);
            sgkc_wgt_hold4(ah[set]);
            sgkc_wgt_hold4(al[set]);
            const uint64_t wb = sgkc_wg_desc(Wb + 8 * ks), wl = sgkc_wg_desc(Wl + 8 * ks);
            sgkc_wgt_mma<R>(acc, al[set], wb);
            sgkc_wgt_mma<R>(acc, ah[set], wl);
            sgkc_wgt_mma<R>(acc, ah[set], wb);
            sgkc_wg_commit();
        }
    }
    sgkc_wg_wait<0>();
    sgkc_wg_hold(acc);
    sgkc_grid_trigger();

#pragma unroll
    for (int sr = 0; sr < 2; sr++) {
        const int64_t m = m0 + (sr ? rb : ra);
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
            sgkc_tc_store2<RES>(a, f, m, n0 + 8 * j + 2 * t, acc[4 * j + 2 * sr], acc[4 * j + 2 * sr + 1]);
    }
#else
    (void)maps;
    (void)a;
    (void)bias;
    (void)f;
    __trap();
#endif
}

/* The weights as the kernel takes them, remade whenever W, gamma or beta
 * change: wb and wl (Nc, Kp = K rounded up to 32) the TF32 big part of
 * W[n][k] gamma[k] and the rest, columns permuted within each k-tile (smem
 * column 8 ks + j holds column 8 (j % 4) + 2 ks + j / 4 of the k-tile),
 * zeros past K; bias[n] = sum_k W[n][k] beta[k], in double. */
__global__ void sgkc_wgt_prep_kernel(const float *__restrict__ W, const float *__restrict__ gamma,
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

static inline int sgkc_wgt_kp(int K) { return (K + 31) / 32 * 32; }

static inline cudaError_t sgkc_wgt_prep(const sgkc_tc_gemm_args &g, float *wb, float *wl, float *bias, cudaStream_t s)
{
    sgkc_wgt_prep_kernel<<<264, 256, 0, s>>>(g.W, g.gamma, g.beta, g.Nc, g.K, sgkc_wgt_kp(g.K), wb, wl, bias);
    return cudaGetLastError();
}

/* 1 when the kernel takes g: TMA needs A's rows 16-byte aligned */
static inline bool sgkc_wgt_takes(const sgkc_tc_gemm_args &g)
{
    return g.K % 4 == 0 && ((uintptr_t)g.A & 15) == 0;
}

static inline cudaError_t sgkc_wgt_map(CUtensorMap *m, const float *p, int inner, int64_t outer, int box_outer)
{
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = nullptr;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
            return e != cudaSuccess ? e : cudaErrorNotSupported;
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * sizeof(float)};
    const cuuint32_t box[2] = {SGKC_WGT_BK, (cuuint32_t)box_outer};
    const cuuint32_t el[2] = {1, 1};
    const CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)p, dims, strides, box, el,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* One call's maps: A (M, K), wb and wl (Nc, Kp) */
template <int BN>
static inline cudaError_t sgkc_wgt_maps_make(const sgkc_tc_gemm_args &g, const float *wb, const float *wl,
                                             sgkc_wgt_maps *m)
{
    cudaError_t e = sgkc_wgt_map(&m->a, g.A, g.K, g.M, SGKC_WGT_BM);
    if (e == cudaSuccess)
        e = sgkc_wgt_map(&m->wb, wb, sgkc_wgt_kp(g.K), g.Nc, BN);
    if (e == cudaSuccess)
        e = sgkc_wgt_map(&m->wl, wl, sgkc_wgt_kp(g.K), g.Nc, BN);
    return e;
}

template <int BN, int S>
static inline cudaError_t sgkc_wgt_launch(const sgkc_wgt_maps &m, const sgkc_tc_gemm_args &g, const float *bias,
                                          cudaStream_t s)
{
    using cfg = sgkc_wgt_cfg<BN, S>;
    const dim3 grid((unsigned)((g.M + SGKC_WGT_BM - 1) / SGKC_WGT_BM), (unsigned)((g.Nc + BN - 1) / BN));
    const sgkc_tc_flags f = sgkc_tc_flags_of(g);
    if (g.gamma) {
        if (g.residual)
            sgkc_wgt_kernel<BN, S, true, true><<<grid, SGKC_WGT_NT, cfg::SMEM, s>>>(m, g, bias, f);
        else
            sgkc_wgt_kernel<BN, S, true, false><<<grid, SGKC_WGT_NT, cfg::SMEM, s>>>(m, g, bias, f);
    } else {
        if (g.residual)
            sgkc_wgt_kernel<BN, S, false, true><<<grid, SGKC_WGT_NT, cfg::SMEM, s>>>(m, g, bias, f);
        else
            sgkc_wgt_kernel<BN, S, false, false><<<grid, SGKC_WGT_NT, cfg::SMEM, s>>>(m, g, bias, f);
    }
    return cudaGetLastError();
}

template <int BN, int S>
static inline cudaError_t sgkc_wgt_prepare_inst()
{
    using cfg = sgkc_wgt_cfg<BN, S>;
    const void *const fns[] = {(const void *)sgkc_wgt_kernel<BN, S, false, false>,
                               (const void *)sgkc_wgt_kernel<BN, S, false, true>,
                               (const void *)sgkc_wgt_kernel<BN, S, true, false>,
                               (const void *)sgkc_wgt_kernel<BN, S, true, true>};
    for (const void *fn : fns) {
        const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

#endif
