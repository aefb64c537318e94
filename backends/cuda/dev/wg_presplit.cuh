/* A candidate for wg_gemm.cuh, timed beside it by tc_gemm_check.cu ("wg
 * presplit"): the weights arrive split, W's TF32 big parts in a.W and its
 * small parts in Wl (what sgkc_wgp_split writes, once a layer in a real
 * path, since they are the layer's weights), so that a k-tile's threads
 * split only A. Everything else is wg_gemm.cuh's kernel: 128 x 128 tiles,
 * two warpgroups, three stages of the four 16 KB tiles, 3xTF32 by
 * small A x big W, big A x small W, big A x big W. The question it
 * answers: how much of wg_gemm.cuh's time is the split of W (half the
 * split work and half the shared-memory writes of every k-tile). */
#ifndef SGK_CUDA_DEV_WG_PRESPLIT_CUH
#define SGK_CUDA_DEV_WG_PRESPLIT_CUH

#include "wg_gemm.cuh"

/* w (n floats) into its TF32 big parts (in place of wb) and small parts */
__global__ void sgkc_wgp_split_kernel(const float *w, float *wb, float *wl, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h, l;
        sgkc_split_tf32(w[i], h, l);
        wb[i] = __uint_as_float(h);
        wl[i] = __uint_as_float(l);
    }
}

template <bool LN, bool RES>
__global__ void __launch_bounds__(SGKC_WG_NT, 1)
    sgkc_wgp_gemm_kernel(sgkc_tc_gemm_args a, const float *__restrict__ Wl, sgkc_tc_flags f)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = SGKC_WG_BM, BK = SGKC_WG_BK, NT = SGKC_WG_NT, S = SGKC_WG_STAGES, TILE = SGKC_WG_TILE;
    constexpr int CH = BM * (BK / 4) / NT;
    extern __shared__ float4 wg_smem4[];
    float *ring = reinterpret_cast<float *>(((uintptr_t)wg_smem4 + 1023) & ~(uintptr_t)1023);
    float *s_shift = ring + S * SGKC_WG_STAGE, *s_mean = s_shift + BM, *s_rstd = s_mean + BM;

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int64_t M = a.M, m0 = (int64_t)blockIdx.x * BM;
    const int Nc = a.Nc, K = a.K, n0 = (int)blockIdx.y * SGKC_WG_BN;
    const int KT = (K + BK - 1) / BK;
    const int cc = tid & 7, r0 = tid >> 3;

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
    /* stage layout as wg_gemm.cuh: big A, big W, small A, small W */
    auto stage = [&](int kt) { return ring + (kt % S) * SGKC_WG_STAGE; };
    auto copy_w = [&](int kt) {
        copy(stage(kt) + TILE, a.W, n0, Nc, kt, f.vec_w);
        copy(stage(kt) + 3 * TILE, Wl, n0, Nc, kt, f.vec_w);
    };
    auto copy_a = [&](int kt) { copy(stage(kt), a.A, m0, M, kt, f.vec_a); };

#pragma unroll
    for (int s = 0; s < S - 1; s++)
        if (s < KT)
            copy_w(s);
    sgkc_grid_wait();
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < KT)
            copy_a(s);
        sgkc_cp_commit();
    }

    float ln_sh[LN ? CH : 1], ln_mu[LN ? CH : 1], ln_rs[LN ? CH : 1];
    if constexpr (LN) {
#pragma unroll 1
        for (int q = warp; q < BM / 4; q += NT / 32)
            sgkc_tc_row_stats<4>(a, m0 + 4 * q, f.vec_a, lane, s_shift + 4 * q, s_mean + 4 * q, s_rstd + 4 * q);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int r = r0 + 32 * i;
            ln_sh[i] = s_shift[r];
            ln_mu[i] = s_mean[r];
            ln_rs[i] = s_rstd[r];
        }
    }
    float gm_next[4], bt_next[4];
    auto load_gb = [&](int kt) {
        const int k = kt * BK + 4 * cc;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            gm_next[e] = LN && k + e < K ? __ldg(a.gamma + k + e) : 0.0f;
            bt_next[e] = LN && k + e < K ? __ldg(a.beta + k + e) : 0.0f;
        }
    };
    if constexpr (LN)
        load_gb(0);

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;

#pragma unroll 1
    for (int kt = 0; kt < KT; kt++) {
        sgkc_cp_wait<S - 2>();
        __syncthreads();
        float *Ab = stage(kt), *Wb = Ab + TILE, *Al = Wb + TILE, *Wl_s = Al + TILE;
        float gm[4], bt[4];
        if constexpr (LN) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                gm[e] = gm_next[e], bt[e] = bt_next[e];
            load_gb(kt + 1);
        }
        /* A alone: its big parts in place, its small parts beside them */
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int o = sgkc_wg_at(r0 + 32 * i, cc);
            float4 v = *reinterpret_cast<const float4 *>(Ab + o);
            if constexpr (LN) {
                auto ln = [&](float x, int e) { return fmaf(((x - ln_sh[i]) - ln_mu[i]) * ln_rs[i], gm[e], bt[e]); };
                v = make_float4(ln(v.x, 0), ln(v.y, 1), ln(v.z, 2), ln(v.w, 3));
            }
            uint32_t h[4], l[4];
            sgkc_split_tf32(v.x, h[0], l[0]);
            sgkc_split_tf32(v.y, h[1], l[1]);
            sgkc_split_tf32(v.z, h[2], l[2]);
            sgkc_split_tf32(v.w, h[3], l[3]);
            *reinterpret_cast<uint4 *>(Ab + o) = make_uint4(h[0], h[1], h[2], h[3]);
            *reinterpret_cast<uint4 *>(Al + o) = make_uint4(l[0], l[1], l[2], l[3]);
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();

        sgkc_wg_fence();
        sgkc_wg_hold(acc);
        const float *Aw = Ab + 64 * BK * wg, *Alw = Al + 64 * BK * wg;
#pragma unroll
        for (int ks = 0; ks < BK / 8; ks++) {
            const uint64_t ab = sgkc_wg_desc(Aw + 8 * ks), al = sgkc_wg_desc(Alw + 8 * ks);
            const uint64_t wb = sgkc_wg_desc(Wb + 8 * ks), wl = sgkc_wg_desc(Wl_s + 8 * ks);
            sgkc_wg_mma_64x128x8(acc, al, wb);
            sgkc_wg_mma_64x128x8(acc, ab, wl);
            sgkc_wg_mma_64x128x8(acc, ab, wb);
        }
        sgkc_wg_commit();
        sgkc_wg_wait<1>();
        sgkc_wg_hold(acc);
        __syncthreads();
        if (kt + S - 1 < KT) {
            copy_w(kt + S - 1);
            copy_a(kt + S - 1);
        }
        sgkc_cp_commit();
    }
    sgkc_wg_wait<0>();
    sgkc_wg_hold(acc);
    sgkc_cp_wait<0>();
    sgkc_grid_trigger();

    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int s = 0; s < 2; s++) {
        const int64_t m = m0 + 64 * wg + 16 * (warp & 3) + 8 * s + g;
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
static inline cudaError_t sgkc_wgp_gemm(const sgkc_tc_gemm_args &g, const float *wl, cudaStream_t s)
{
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    lc.gridDim = dim3((unsigned)((g.M + SGKC_WG_BM - 1) / SGKC_WG_BM), (unsigned)((g.Nc + SGKC_WG_BN - 1) / SGKC_WG_BN));
    lc.blockDim = dim3(SGKC_WG_NT);
    lc.dynamicSmemBytes = SGKC_WG_SMEM;
    lc.stream = s;
    const sgkc_tc_flags f = sgkc_tc_flags_of(g);
    if (g.gamma)
        return g.residual ? cudaLaunchKernelEx(&lc, sgkc_wgp_gemm_kernel<true, true>, g, wl, f)
                          : cudaLaunchKernelEx(&lc, sgkc_wgp_gemm_kernel<true, false>, g, wl, f);
    return g.residual ? cudaLaunchKernelEx(&lc, sgkc_wgp_gemm_kernel<false, true>, g, wl, f)
                      : cudaLaunchKernelEx(&lc, sgkc_wgp_gemm_kernel<false, false>, g, wl, f);
}

static inline cudaError_t sgkc_wgp_prepare()
{
    const void *const fns[] = {
        (const void *)sgkc_wgp_gemm_kernel<false, false>, (const void *)sgkc_wgp_gemm_kernel<false, true>,
        (const void *)sgkc_wgp_gemm_kernel<true, false>, (const void *)sgkc_wgp_gemm_kernel<true, true>};
    for (const void *fn : fns) {
        const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SGKC_WG_SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* W (n floats) split into wb and wl */
static inline cudaError_t sgkc_wgp_split(const float *w, float *wb, float *wl, size_t n, cudaStream_t s)
{
    sgkc_wgp_split_kernel<<<264, 256, 0, s>>>(w, wb, wl, n);
    return cudaGetLastError();
}

#endif
