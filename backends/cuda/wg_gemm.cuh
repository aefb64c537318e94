/* C = op(A) W^T (+ residual) on Hopper's warpgroup MMA (wgmma, sm_90a) in
 * 3xTF32: tc_gemm.cuh's projections (the same arguments, LayerNorm, scaled
 * columns and residual) at the tensor cores' full TF32 rate, which
 * mma.sync does not reach.
 *
 * A block computes 128 x 128 outputs with two warpgroups of 64 rows. Per
 * k-tile of 32, A's and W's tiles land by cp.async in 128-byte-swizzled
 * rows (the 16-byte chunk c of row r at c ^ (r % 8), the layout wgmma's
 * descriptors read); then every thread rewrites its chunks in place as
 * their TF32 big part and writes the small part to a second tile of the
 * same layout (LayerNorm first, as tc_gemm.cuh does), and each warpgroup
 * issues, per k-step of 8, small A x big W, big A x small W, big A x big W
 * into its 64 accumulators a thread. The MMAs run asynchronously: while
 * one k-tile's are in flight the threads split the next, and the copy of
 * the k-tile two ahead goes into the stage whose MMAs both warpgroups have
 * waited for. Three stages of the four tiles take 192 KB: one block an SM.
 *
 * The kernel body exists only in sm_90a code (__CUDA_ARCH_FEAT_SM90_ALL);
 * the host takes it where the build has sm_90a (SGKC_HAVE_SM90A) and the
 * device is compute capability 9.0, elsewhere tc_gemm.cuh. */
#ifndef SGK_CUDA_WG_GEMM_CUH
#define SGK_CUDA_WG_GEMM_CUH

#include "tc_gemm.cuh"

#define SGKC_WG_BM 128
#define SGKC_WG_BN 128
#define SGKC_WG_BK 32
#define SGKC_WG_STAGES 3
#define SGKC_WG_NT 256 /* two warpgroups */
#define SGKC_WG_TILE (SGKC_WG_BM * SGKC_WG_BK) /* floats of one operand tile (BM == BN) */
#define SGKC_WG_STAGE (4 * SGKC_WG_TILE)        /* big A, big W, small A, small W */
/* the stages, the LayerNorm statistics, and room to align the stages to 1 KB */
#define SGKC_WG_SMEM ((size_t)(SGKC_WG_STAGES * SGKC_WG_STAGE + 3 * SGKC_WG_BM) * sizeof(float) + 1024)

/* float offset of chunk c (4 floats) of row r in a 128-byte-swizzled tile */
__device__ __forceinline__ int sgkc_wg_at(int r, int c)
{
    return r * SGKC_WG_BK + ((c ^ (r & 7)) << 2);
}

/* Shared-memory matrix descriptor of a K-major tile in 128-byte-swizzled
 * rows: start address >> 4 (bits 0-13), leading byte offset (unused with
 * this swizzle, 1), stride byte offset 1024 >> 4 between groups of 8 rows
 * (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63). p is the tile's
 * first row (1 KB aligned) plus 32 bytes a k-step. */
__device__ __forceinline__ uint64_t sgkc_wg_desc(const float *p)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((s & 0x3ffffu) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d += A B^T over one k-step of 8: A 64 x 8 and B 128 x 8 (K-major, both
 * read from shared memory through their descriptors), d the warpgroup's
 * 64 x 128 fp32 accumulators (64 a thread) */
__device__ __forceinline__ void sgkc_wg_mma_64x128x8(float (&d)[64], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void sgkc_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void sgkc_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void sgkc_wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* keeps the compiler from moving accesses of the accumulators across an
 * MMA that is still in flight */
template <int R>
__device__ __forceinline__ void sgkc_wg_hold(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
#endif

template <bool LN, bool RES>
__global__ void __launch_bounds__(SGKC_WG_NT, 1) sgkc_wg_gemm_kernel(sgkc_tc_gemm_args a, sgkc_tc_flags f)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = SGKC_WG_BM, BK = SGKC_WG_BK, NT = SGKC_WG_NT, S = SGKC_WG_STAGES, TILE = SGKC_WG_TILE;
    constexpr int CH = BM * (BK / 4) / NT; /* chunks of one tile a thread copies and splits: 4 */
    extern __shared__ float4 wg_smem4[];
    float *ring = reinterpret_cast<float *>(((uintptr_t)wg_smem4 + 1023) & ~(uintptr_t)1023);
    float *s_shift = ring + S * SGKC_WG_STAGE, *s_mean = s_shift + BM, *s_rstd = s_mean + BM;

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int64_t M = a.M, m0 = (int64_t)blockIdx.x * BM;
    const int Nc = a.Nc, K = a.K, n0 = (int)blockIdx.y * SGKC_WG_BN;
    const int KT = (K + BK - 1) / BK;
    /* a thread's chunks: column cc of rows r0 + 32 i */
    const int cc = tid & 7, r0 = tid >> 3;

    /* A thread's chunks of a tile: column cc of rows r0 + 32 i, at the same
     * shared-memory offsets in A's and W's tiles. Their rows' sources are
     * found once (a row at or past the matrix's end reads as zeros from a
     * valid address), so that a k-tile's copy is an add, a compare and the
     * copy itself a chunk. */
    int at[CH];
    const float *pa[CH], *pw[CH];
    bool oka[CH], okw[CH];
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int r = r0 + 32 * i;
        at[i] = sgkc_wg_at(r, cc);
        oka[i] = m0 + r < M;
        okw[i] = n0 + r < Nc;
        pa[i] = a.A + (size_t)(oka[i] ? m0 + r : 0) * K;
        pw[i] = a.W + (size_t)(okw[i] ? n0 + r : 0) * K;
    }
    /* k-tile kt of the rows ps into a tile: zeros for rows out of range
     * (ok) and for k past K */
    auto copy = [&](float *dst, const float *const (&ps)[CH], const bool (&ok)[CH], int kt, bool vec) {
        const int k = kt * BK + 4 * cc;
#pragma unroll
        for (int i = 0; i < CH; i++) {
            float *d = dst + at[i];
            if (vec) {
                const bool in = ok[i] && k < K;
                sgkc_cp_async16_zfill(d, in ? ps[i] + k : ps[i], in ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = ok[i] && k + e < K;
                    sgkc_cp_async4_zfill(d + e, in ? ps[i] + k + e : ps[i], in ? 4 : 0);
                }
            }
        }
    };
    auto stage = [&](int kt) { return ring + (kt % S) * SGKC_WG_STAGE; };
    auto copy_w = [&](int kt) { copy(stage(kt) + TILE, pw, okw, kt, f.vec_w); };
    auto copy_a = [&](int kt) { copy(stage(kt), pa, oka, kt, f.vec_a); };

    /* W before the grid wait, A after (it may be the previous kernel's
     * output); commit group s holds k-tile s (group 0 also W's tile 1) */
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
        __syncthreads(); /* k-tile kt landed */
        float *Ab = stage(kt), *Wb = Ab + TILE, *Al = Wb + TILE, *Wl = Al + TILE;
        float gm[4], bt[4];
        if constexpr (LN) {
#pragma unroll
            for (int e = 0; e < 4; e++)
                gm[e] = gm_next[e], bt[e] = bt_next[e];
            load_gb(kt + 1);
        }
        /* big parts in place, small parts beside them */
        auto split = [&](float *big, float *small, int o, float4 v) {
            uint32_t h[4], l[4];
            sgkc_split_tf32(v.x, h[0], l[0]);
            sgkc_split_tf32(v.y, h[1], l[1]);
            sgkc_split_tf32(v.z, h[2], l[2]);
            sgkc_split_tf32(v.w, h[3], l[3]);
            *reinterpret_cast<uint4 *>(big + o) = make_uint4(h[0], h[1], h[2], h[3]);
            *reinterpret_cast<uint4 *>(small + o) = make_uint4(l[0], l[1], l[2], l[3]);
        };
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int o = sgkc_wg_at(r0 + 32 * i, cc);
            float4 v = *reinterpret_cast<const float4 *>(Ab + o);
            if constexpr (LN) {
                auto ln = [&](float x, int e) { return fmaf(((x - ln_sh[i]) - ln_mu[i]) * ln_rs[i], gm[e], bt[e]); };
                v = make_float4(ln(v.x, 0), ln(v.y, 1), ln(v.z, 2), ln(v.w, 3));
            }
            split(Ab, Al, o, v);
            split(Wb, Wl, o, *reinterpret_cast<const float4 *>(Wb + o));
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the MMAs read what these stores wrote */
        __syncthreads();

        sgkc_wg_fence();
        sgkc_wg_hold(acc);
        const float *Aw = Ab + 64 * BK * wg, *Alw = Al + 64 * BK * wg;
#pragma unroll
        for (int ks = 0; ks < BK / 8; ks++) {
            const uint64_t ab = sgkc_wg_desc(Aw + 8 * ks), al = sgkc_wg_desc(Alw + 8 * ks);
            const uint64_t wb = sgkc_wg_desc(Wb + 8 * ks), wl = sgkc_wg_desc(Wl + 8 * ks);
            sgkc_wg_mma_64x128x8(acc, al, wb);
            sgkc_wg_mma_64x128x8(acc, ab, wl);
            sgkc_wg_mma_64x128x8(acc, ab, wb);
        }
        sgkc_wg_commit();
        sgkc_wg_wait<1>(); /* this warpgroup's MMAs of k-tile kt - 1 are done */
        sgkc_wg_hold(acc);
        __syncthreads(); /* and both warpgroups': its stage takes k-tile kt + 2 */
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

    /* acc[4j + 2s + e]: row 16 (warp % 4) + 8 s + g of the warpgroup's 64,
     * column 8 j + 2 t + e */
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
    (void)f;
    __trap(); /* the host launches it only where sm_90a code exists */
#endif
}

template <bool LN, bool RES>
static cudaError_t sgkc_wg_gemm_launch_inst(const sgkc_tc_gemm_args &g, bool pdl, cudaStream_t s)
{
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    lc.gridDim = dim3((unsigned)((g.M + SGKC_WG_BM - 1) / SGKC_WG_BM), (unsigned)((g.Nc + SGKC_WG_BN - 1) / SGKC_WG_BN));
    lc.blockDim = dim3(SGKC_WG_NT);
    lc.dynamicSmemBytes = SGKC_WG_SMEM;
    lc.stream = s;
    cudaLaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = &attr;
    lc.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&lc, sgkc_wg_gemm_kernel<LN, RES>, g, sgkc_tc_flags_of(g));
}

/* LayerNorm and the residual as the arguments ask (g.ksplit is ignored) */
static inline cudaError_t sgkc_wg_gemm(const sgkc_tc_gemm_args &g, bool pdl, cudaStream_t s)
{
    if (g.gamma)
        return g.residual ? sgkc_wg_gemm_launch_inst<true, true>(g, pdl, s)
                          : sgkc_wg_gemm_launch_inst<true, false>(g, pdl, s);
    return g.residual ? sgkc_wg_gemm_launch_inst<false, true>(g, pdl, s)
                      : sgkc_wg_gemm_launch_inst<false, false>(g, pdl, s);
}

static inline cudaError_t sgkc_wg_gemm_prepare()
{
    const void *const fns[] = {
        (const void *)sgkc_wg_gemm_kernel<false, false>, (const void *)sgkc_wg_gemm_kernel<false, true>,
        (const void *)sgkc_wg_gemm_kernel<true, false>, (const void *)sgkc_wg_gemm_kernel<true, true>};
    for (const void *fn : fns) {
        const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SGKC_WG_SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

#endif
