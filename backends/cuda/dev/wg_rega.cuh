/* A candidate for wg_gemm.cuh, timed beside it by tc_gemm_check.cu ("wgreg"):
 * A's TF32 halves go to wgmma from registers, W arrives split (its big parts
 * in a.W, its small parts in Wl, as dev/wg_presplit.cuh's
 * sgkc_wgp_split writes them), so that nothing is split in shared memory.
 *
 * What it changes, and why. In wg_gemm.cuh every k-tile's threads read the
 * A and W tiles from shared memory, write their big parts back and their
 * small parts beside them (96 KB of shared-memory traffic a 32-wide
 * k-tile), while the MMAs read big and small A and W from shared memory
 * (another 144 KB): more than the 128 bytes a cycle an SM's shared memory
 * gives in the time the tensor cores take for the k-tile's 24 products, and
 * the copy runs one k-tile ahead of the split only. Here a thread loads its
 * own A fragment (the m16n8k8 layout: rows g and g + 8 of its warp's 16,
 * columns t and t + 4 of each k-step of 8), applies LayerNorm and splits it
 * in registers; the MMAs read only W's two tiles from shared memory. A
 * stage is A, big W and small W (48 KB), four stages, the copy two k-tiles
 * ahead of the MMAs and one block barrier a k-tile. A thread's fragments
 * for a k-tile stay in registers until that k-tile's MMAs are waited for,
 * so they alternate between two sets (the loop runs two k-tiles a turn).
 * Products and their order are wg_gemm.cuh's: per k-step small A x big W,
 * big A x small W, big A x big W. */
#ifndef SGK_CUDA_DEV_WG_REGA_CUH
#define SGK_CUDA_DEV_WG_REGA_CUH

#include "dev/wg_presplit.cuh"

#include <type_traits>

#define SGKC_WGR_STAGES 4
#define SGKC_WGR_STAGE (3 * SGKC_WG_TILE) /* A, big W, small W */
#define SGKC_WGR_SMEM ((size_t)(SGKC_WGR_STAGES * SGKC_WGR_STAGE + 3 * SGKC_WG_BM) * sizeof(float) + 1024)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d += A B^T over one k-step of 8: A 64 x 8 from the warpgroup's registers
 * (a[0..3] of each thread, m16n8k8's layout per warp), B 128 x 8 from
 * shared memory through its descriptor */
__device__ __forceinline__ void sgkc_wgr_mma_64x128x8(float (&d)[64], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n}\n"
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
/* keeps the compiler from moving writes of fragments still read by MMAs in
 * flight */
__device__ __forceinline__ void sgkc_wgr_hold(uint32_t (&a)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        asm volatile("" : "+r"(a[i])::"memory");
}
#endif

template <bool LN, bool RES>
__global__ void __launch_bounds__(SGKC_WG_NT, 1)
    sgkc_wgr_gemm_kernel(sgkc_tc_gemm_args a, const float *__restrict__ Wl, sgkc_tc_flags f)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = SGKC_WG_BM, BK = SGKC_WG_BK, NT = SGKC_WG_NT, S = SGKC_WGR_STAGES, TILE = SGKC_WG_TILE;
    constexpr int CH = BM * (BK / 4) / NT; /* chunks of one tile a thread copies: 4 */
    constexpr int KS = BK / 8;             /* k-steps a k-tile */
    extern __shared__ float4 wg_smem4[];
    float *ring = reinterpret_cast<float *>(((uintptr_t)wg_smem4 + 1023) & ~(uintptr_t)1023);
    float *s_shift = ring + S * SGKC_WGR_STAGE, *s_mean = s_shift + BM, *s_rstd = s_mean + BM;

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    const int64_t M = a.M, m0 = (int64_t)blockIdx.x * BM;
    const int Nc = a.Nc, K = a.K, n0 = (int)blockIdx.y * SGKC_WG_BN;
    const int KT = (K + BK - 1) / BK;
    const int cc = tid & 7, r0 = tid >> 3;
    /* the two rows of the block's 128 whose A fragments this thread holds */
    const int ra = 64 * wg + 16 * (warp & 3) + g, rb = ra + 8;

    auto copy = [&](float *dst, const float *src, int64_t base, int64_t nrows, int kt, bool vec) {
        const int k = kt * BK + 4 * cc;
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int r = r0 + 32 * i;
            const bool rok = base + r < nrows;
            const float *p = src + (size_t)(rok ? base + r : 0) * K;
            float *d = dst + sgkc_wg_at(r, cc);
            if (vec) {
                const bool ok = rok && k < K;
                sgkc_cp_async16_zfill(d, ok ? p + k : src, ok ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool ok = rok && k + e < K;
                    sgkc_cp_async4_zfill(d + e, ok ? p + k + e : src, ok ? 4 : 0);
                }
            }
        }
    };
    auto stage = [&](int kt) { return ring + (kt % S) * SGKC_WGR_STAGE; };
    auto copy_w = [&](int kt) {
        copy(stage(kt) + TILE, a.W, n0, Nc, kt, f.vec_w);
        copy(stage(kt) + 2 * TILE, Wl, n0, Nc, kt, f.vec_w);
    };
    auto copy_a = [&](int kt) { copy(stage(kt), a.A, m0, M, kt, f.vec_a); };

    /* commit group s holds k-tile s for s < S - 2 (group 0 also W's later
     * prologue tiles); W before the grid wait, A after */
#pragma unroll
    for (int s = 0; s < S - 2; s++)
        if (s < KT)
            copy_w(s);
    sgkc_grid_wait();
#pragma unroll
    for (int s = 0; s < S - 2; s++) {
        if (s < KT)
            copy_a(s);
        sgkc_cp_commit();
    }

    float sh_a = 0.0f, mu_a = 0.0f, rs_a = 0.0f, sh_b = 0.0f, mu_b = 0.0f, rs_b = 0.0f;
    if constexpr (LN) {
#pragma unroll 1
        for (int q = warp; q < BM / 4; q += NT / 32)
            sgkc_tc_row_stats<4>(a, m0 + 4 * q, f.vec_a, lane, s_shift + 4 * q, s_mean + 4 * q, s_rstd + 4 * q);
        __syncthreads();
        sh_a = s_shift[ra], mu_a = s_mean[ra], rs_a = s_rstd[ra];
        sh_b = s_shift[rb], mu_b = s_mean[rb], rs_b = s_rstd[rb];
    }

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;
    /* fragments of two k-tiles in flight: [set][k-step][register] */
    uint32_t ah[2][KS][4], al[2][KS][4];

    /* k-tile kt with fragment set SET: wait for it, start the copy two
     * k-tiles ahead (into the stage of k-tile kt - 2, whose MMAs every
     * thread has waited for before this barrier), load, normalise and split
     * the fragments, issue the MMAs, and wait for k-tile kt - 1's */
    auto step = [&](auto set_c, int kt) {
        constexpr int SET = decltype(set_c)::value;
        sgkc_cp_wait<S - 3>();
        __syncthreads();
        if (kt + S - 2 < KT) {
            copy_w(kt + S - 2);
            copy_a(kt + S - 2);
        }
        sgkc_cp_commit();
        const float *As = stage(kt), *Wb = As + TILE, *Ws = Wb + TILE;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            /* k = kt * BK + 8 ks + t + 4 h: chunk 2 ks + h, element t */
            float v[4];
            v[0] = As[sgkc_wg_at(ra, 2 * ks) + t];
            v[1] = As[sgkc_wg_at(rb, 2 * ks) + t];
            v[2] = As[sgkc_wg_at(ra, 2 * ks + 1) + t];
            v[3] = As[sgkc_wg_at(rb, 2 * ks + 1) + t];
            if constexpr (LN) {
                const int k0 = kt * BK + 8 * ks + t, k1 = k0 + 4;
                const float g0 = k0 < K ? __ldg(a.gamma + k0) : 0.0f, b0 = k0 < K ? __ldg(a.beta + k0) : 0.0f;
                const float g1 = k1 < K ? __ldg(a.gamma + k1) : 0.0f, b1 = k1 < K ? __ldg(a.beta + k1) : 0.0f;
                v[0] = fmaf(((v[0] - sh_a) - mu_a) * rs_a, g0, b0);
                v[1] = fmaf(((v[1] - sh_b) - mu_b) * rs_b, g0, b0);
                v[2] = fmaf(((v[2] - sh_a) - mu_a) * rs_a, g1, b1);
                v[3] = fmaf(((v[3] - sh_b) - mu_b) * rs_b, g1, b1);
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                sgkc_split_tf32(v[e], ah[SET][ks][e], al[SET][ks][e]);
        }
        sgkc_wg_fence();
        sgkc_wg_hold(acc);
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            sgkc_wgr_hold(ah[SET][ks]);
            sgkc_wgr_hold(al[SET][ks]);
            const uint64_t wb = sgkc_wg_desc(Wb + 8 * ks), wl = sgkc_wg_desc(Ws + 8 * ks);
            sgkc_wgr_mma_64x128x8(acc, al[SET][ks], wb);
            sgkc_wgr_mma_64x128x8(acc, ah[SET][ks], wl);
            sgkc_wgr_mma_64x128x8(acc, ah[SET][ks], wb);
        }
        sgkc_wg_commit();
        sgkc_wg_wait<1>(); /* k-tile kt - 1's MMAs are done: its set and stage are free */
        sgkc_wg_hold(acc);
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            sgkc_wgr_hold(ah[1 - SET][ks]);
            sgkc_wgr_hold(al[1 - SET][ks]);
        }
    };
#pragma unroll 1
    for (int kt = 0; kt < KT; kt += 2) {
        step(std::integral_constant<int, 0>(), kt);
        if (kt + 1 < KT)
            step(std::integral_constant<int, 1>(), kt + 1);
    }
    sgkc_wg_wait<0>();
    sgkc_wg_hold(acc);
    sgkc_cp_wait<0>();
    sgkc_grid_trigger();

#pragma unroll
    for (int s = 0; s < 2; s++) {
        const int64_t m = m0 + (s ? rb : ra);
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < SGKC_WG_BN / 8; j++)
            sgkc_tc_store2<RES>(a, f, m, n0 + 8 * j + 2 * t, acc[4 * j + 2 * s], acc[4 * j + 2 * s + 1]);
    }
#else
    (void)a;
    (void)Wl;
    (void)f;
    __trap();
#endif
}

/* g.W: the big parts, wl the small parts (sgkc_wgp_split) */
static inline cudaError_t sgkc_wgr_gemm(const sgkc_tc_gemm_args &g, const float *wl, cudaStream_t s)
{
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    lc.gridDim = dim3((unsigned)((g.M + SGKC_WG_BM - 1) / SGKC_WG_BM), (unsigned)((g.Nc + SGKC_WG_BN - 1) / SGKC_WG_BN));
    lc.blockDim = dim3(SGKC_WG_NT);
    lc.dynamicSmemBytes = SGKC_WGR_SMEM;
    lc.stream = s;
    const sgkc_tc_flags f = sgkc_tc_flags_of(g);
    if (g.gamma)
        return g.residual ? cudaLaunchKernelEx(&lc, sgkc_wgr_gemm_kernel<true, true>, g, wl, f)
                          : cudaLaunchKernelEx(&lc, sgkc_wgr_gemm_kernel<true, false>, g, wl, f);
    return g.residual ? cudaLaunchKernelEx(&lc, sgkc_wgr_gemm_kernel<false, true>, g, wl, f)
                      : cudaLaunchKernelEx(&lc, sgkc_wgr_gemm_kernel<false, false>, g, wl, f);
}

static inline cudaError_t sgkc_wgr_prepare()
{
    const void *const fns[] = {
        (const void *)sgkc_wgr_gemm_kernel<false, false>, (const void *)sgkc_wgr_gemm_kernel<false, true>,
        (const void *)sgkc_wgr_gemm_kernel<true, false>, (const void *)sgkc_wgr_gemm_kernel<true, true>};
    for (const void *fn : fns) {
        const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SGKC_WGR_SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

#endif
