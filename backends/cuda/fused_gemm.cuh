/* tuned-fused-small's GEMMs (fused_small.cuh): the runtime shapes' from shared
 * memory, and the compiled-in shapes' with the weights in registers. */
#ifndef SGK_CUDA_FUSED_GEMM_CUH
#define SGK_CUDA_FUSED_GEMM_CUH

#include "fused_cluster.cuh"

/* Threads of a tuned-fused-small block; the GEMMs spread their tiles over them. */
#define SGKC_FS_NT 512
/* Most K slices a runtime shape's GEMM tile is split into: 2^SGKC_FS_LKS.
 * More slices shorten each lane's FMA chain and add shuffle rounds and
 * warps; 4 were faster than 2 or 8 at seed when the seed shape still ran
 * this GEMM. */
#define SGKC_FS_LKS 2

/* One GEMM of the kernel, C(M x ncols) = A(M x K) W(K x ncols), both in
 * shared memory (K % 4 == 0), and what to do with C:
 *   qkv: columns [0, hs) are Q (scaled, kept here), [hs, 2hs) K and
 *        [2hs, 3hs) V (pushed to the Cr blocks of head group hg);
 *   out: C + res goes to out (row strides ldres, ldo). */
struct sgkc_fs_gemm_job {
    const float *A, *W;
    int lda, ldw, M, K, ncols;
    int qkv;
    float *Qs, *Ks, *Vs;
    const unsigned long long *kvbar; /* K/V pushes count on it (every receiver's copy) */
    int ldh, hs, Cr, hg, r0;
    float scale;
    float *out;
    uint16_t *out16; /* out as a 16-bit dtype (f16, else bf16) where not null */
    bool f16;
    const float *res;
    int ldres, ldo;
};

/* The runtime shapes' GEMMs. A thread owns TM rows x 4 columns (TM of
 * A's float4 and 4 of W's per 4 TM FMAs: shared-memory bandwidth, not FMA,
 * is what such small GEMMs run into). When those tiles are fewer than
 * threads, each tile's K is split over ks lanes (interleaved by 4) and
 * summed by shuffles, which also cuts the dependent FMA chain by ks. */
__device__ __forceinline__ void sgkc_fs_gemm(const sgkc_fs_gemm_job &j)
{
    constexpr int TM = 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* clusters */
    const int ncg = j.ncols / 4, ntiles = ((j.M + TM - 1) / TM) * ncg, K4 = j.K / 4;
    int lks = 0; /* log2 ks; each lane keeps at least 2 steps of 4 */
    while (lks < SGKC_FS_LKS && (ntiles << (lks + 1)) <= SGKC_FS_NT && K4 >= (4 << lks))
        lks++;
    /* A warp holds tpw tiles x ks slices, slice-major: lanes next to each
     * other read W columns next to each other (no bank conflicts, whatever
     * ldw), and a slice's partial sums meet by shuffles tpw lanes apart. */
    const int ltpw = 5 - lks, tpw = 1 << ltpw;
    const int total = ((ntiles + tpw - 1) >> ltpw) << 5;
    /* the loop is uniform over the block, so whole lane groups shuffle;
     * warps past the last tile group leave (total is whole warps) */
#pragma unroll 1
    for (int base = 0; base < total; base += SGKC_FS_NT) {
        const int w = base + (int)threadIdx.x, lane = w & 31;
        if (w >= total)
            break;
        const int tt = ((w >> 5) << ltpw) + (lane & (tpw - 1)), s = lane >> ltpw;
        const bool active = tt < ntiles;
        const int t = min(tt, ntiles - 1);
        const int rt = t / ncg, c = (t - rt * ncg) * 4;
        const float *arow[TM];
#pragma unroll
        for (int i = 0; i < TM; i++)
            arow[i] = j.A + (size_t)min(rt * TM + i, j.M - 1) * j.lda;
        const float *wcol = j.W + c;
        float acc[TM][4];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int u = 0; u < 4; u++)
                acc[i][u] = 0.0f;
        /* idle tiles skip the steps, not the shuffles */
        const int nsteps = active ? (K4 + (1 << lks) - 1) >> lks : 0;
#pragma unroll 1
        for (int it = 0; it < nsteps; it++) {
            const int k4 = s + (it << lks);
            if (K4 % (1 << lks) != 0 && k4 >= K4)
                break;
            float4 bv[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                bv[u] = *reinterpret_cast<const float4 *>(wcol + (size_t)(4 * k4 + u) * j.ldw);
#pragma unroll
            for (int i = 0; i < TM; i++) {
                const float4 av = *reinterpret_cast<const float4 *>(arow[i] + 4 * k4);
                const float ak[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    acc[i][0] = fmaf(ak[u], bv[u].x, acc[i][0]);
                    acc[i][1] = fmaf(ak[u], bv[u].y, acc[i][1]);
                    acc[i][2] = fmaf(ak[u], bv[u].z, acc[i][2]);
                    acc[i][3] = fmaf(ak[u], bv[u].w, acc[i][3]);
                }
            }
        }
#pragma unroll 1
        for (int o = tpw; o < 32; o <<= 1)
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int u = 0; u < 4; u++)
                    acc[i][u] += __shfl_xor_sync(0xffffffffu, acc[i][u], o);
        if (!active || s != 0)
            continue;
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int r = rt * TM + i;
            if (r >= j.M)
                break;
            float4 v = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            if (j.qkv) {
                const int seg = c < j.hs ? 0 : c < 2 * j.hs ? 1 : 2, cc = c - seg * j.hs;
                if (seg == 0) {
                    v.x *= j.scale; v.y *= j.scale; v.z *= j.scale; v.w *= j.scale;
                    *reinterpret_cast<float4 *>(j.Qs + r * j.ldh + cc) = v;
                } else {
                    const float *dst = (seg == 1 ? j.Ks : j.Vs) + (size_t)(j.r0 + r) * j.ldh + cc;
#pragma unroll 1
                    for (int q = 0; q < j.Cr; q++)
                        sgkc_push4(dst, v, j.kvbar, j.hg * j.Cr + q);
                }
            } else {
                const float *res = j.res + (size_t)r * j.ldres + c;
                if (j.out16) {
                    uint16_t *o = j.out16 + (size_t)r * j.ldo + c;
                    o[0] = sgkc_narrow16(res[0] + v.x, j.f16);
                    o[1] = sgkc_narrow16(res[1] + v.y, j.f16);
                    o[2] = sgkc_narrow16(res[2] + v.z, j.f16);
                    o[3] = sgkc_narrow16(res[3] + v.w, j.f16);
                } else {
                    float *o = j.out + (size_t)r * j.ldo + c;
                    o[0] = res[0] + v.x;
                    o[1] = res[1] + v.y;
                    o[2] = res[2] + v.z;
                    o[3] = res[3] + v.w;
                }
            }
        }
    }
#endif
}

/* The compiled-in shapes' GEMMs, C(M x NC) = A(M x K) W(K x NC), with W in
 * registers. Thread t owns a column pair and a K slice of KL = K / KS rows
 * (sgkc_fs_rw_pair, sgkc_fs_rw_slice), all M rows of A: each weight is
 * read from shared memory once, into registers, at the GEMM's start, where
 * sgkc_fs_gemm reads W once per 4-row tile. At seed these phases are
 * bound by shared-memory wavefronts, not by FMAs. An LDS.128 returns in 2
 * wavefronts where lanes t and t ^ 1 read the same address and in 4
 * otherwise (ncu's wavefront counts per instruction: attn_rows' broadcast
 * weight loads and gemm_panel's A loads, 8 lanes an address, take 2; the
 * slice in the lane's low bits gave A's 18 reads a thread 4 each, 648
 * wavefronts a block in the Q/K/V GEMM), so the slice sits in lane bits
 * 2-4 and the pair's low bits in 0-1: four lanes in a row read one
 * address. The weights sit in shared memory in the order their threads
 * read them (slot i of thread t at float2 i * nt + t, packed at layer
 * creation: sgkc_fs_rw_pack), free of bank conflicts, and come by bulk
 * copy, tracked by an mbarrier: loaded into registers from global memory
 * at the kernel's start instead, they held scoreboards that waits in
 * later phases then shared. The KS partial sums meet by a
 * reduce-scatter (sgkc_fs_rscatter): each shuffle round halves the values
 * a lane holds. */
#define SGKC_FS_RW_KS 8
#define SGKC_FS_RW_SH 2 /* lane bits of the pair below the slice's */
/* Thread t's K slice (lane bits 2-4) and column pair (lane bits 0-1, then
 * the warp): 4 pairs x 8 slices a warp. */
__host__ __device__ constexpr int sgkc_fs_rw_slice(int t)
{
    return (t >> SGKC_FS_RW_SH) & (SGKC_FS_RW_KS - 1);
}
__host__ __device__ constexpr int sgkc_fs_rw_pair(int t)
{
    return (t & ((1 << SGKC_FS_RW_SH) - 1)) | ((t >> 5) << SGKC_FS_RW_SH);
}
static_assert((SGKC_FS_RW_KS << SGKC_FS_RW_SH) == 32, "a warp is whole slices x pairs");
/* The float of slot (t, i, e) in a packed image of nt threads. */
__host__ __device__ constexpr size_t sgkc_fs_rw_at(int t, int i, int e, int nt)
{
    return ((size_t)i * nt + t) * 2 + e;
}
/* Packs W, K x NC with rows ldk floats apart, for NC / 2 * KS threads
 * (whole warps: NC % 8 == 0). */
__host__ __device__ inline void sgkc_fs_rw_pack(float *dst, const float *w, size_t ldk, int K, int NC)
{
    const int KS = SGKC_FS_RW_KS, KL = K / KS, nt = NC / 2 * KS;
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < KL; i++)
            for (int e = 0; e < 2; e++)
                dst[sgkc_fs_rw_at(t, i, e, nt)] =
                    w[(size_t)(sgkc_fs_rw_slice(t) * KL + i) * ldk + 2 * sgkc_fs_rw_pair(t) + e];
}
template <int K, int NT>
__device__ __forceinline__ void sgkc_fs_rw_load(float2 (&w)[K / SGKC_FS_RW_KS], const float *Ws, int t)
{
#pragma unroll
    for (int i = 0; i < K / SGKC_FS_RW_KS; i++)
        w[i] = *reinterpret_cast<const float2 *>(Ws + sgkc_fs_rw_at(t, i, 0, NT));
}

/* Values left to a lane after the reduce-scatter of n values over the
 * slices o, o/2, ..., 1 apart (a round that cannot halve them sums all),
 * and the slice bits of the rounds that summed all: lanes whose slices
 * differ only in those bits hold the same values. */
__host__ __device__ constexpr int sgkc_rs_left(int n, int o)
{
    return o == 0 ? n : n % 2 == 0 ? sgkc_rs_left(n / 2, o / 2) : sgkc_rs_left(n, o / 2);
}
__host__ __device__ constexpr int sgkc_rs_dup(int n, int o)
{
    return o == 0 ? 0 : n % 2 == 0 ? sgkc_rs_dup(n / 2, o / 2) : (o | sgkc_rs_dup(n, o / 2));
}
/* v[0, n) hold flat indices base .. base + n of the lane's values; after
 * the round o the lane keeps the half bit o of its slice s selects, plus
 * the partner's sums of that half (the partner: lane ^ (o << SGKC_FS_RW_SH)). */
template <int N, int O, int N0>
__device__ __forceinline__ void sgkc_fs_rscatter(float (&v)[N0], int s, int &base)
{
    if constexpr (O > 0) {
        if constexpr (N % 2 == 0) {
            constexpr int h = N / 2;
            const bool up = (s & O) != 0;
#pragma unroll
            for (int i = 0; i < h; i++) {
                const float send = up ? v[i] : v[h + i];
                const float keep = up ? v[h + i] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O << SGKC_FS_RW_SH);
            }
            base += up ? h : 0;
            sgkc_fs_rscatter<h, O / 2>(v, s, base);
        } else {
#pragma unroll
            for (int i = 0; i < N; i++)
                v[i] += __shfl_xor_sync(0xffffffffu, v[i], O << SGKC_FS_RW_SH);
            sgkc_fs_rscatter<N, O / 2>(v, s, base);
        }
    }
}
/* The GEMM of thread t's pair and slice (whole warps of threads: the
 * shuffles need every lane), A's rows lda floats apart. Returns the flat
 * index (row * 2 + column of the pair) of v[0]; v[0, sgkc_rs_left(2 M, KS
 * / 2)) are C's values, held by every lane whose slice differs only in
 * the bits of sgkc_rs_dup: only the one with those bits clear stores them. */
template <int M, int K>
__device__ __forceinline__ int sgkc_fs_rw_gemm(const float2 (&w)[K / SGKC_FS_RW_KS], const float *A, int lda, int t,
                                               float (&v)[2 * M])
{
    constexpr int KS = SGKC_FS_RW_KS, KL = K / KS;
    static_assert(K % (4 * KS) == 0, "K slices of whole float4");
    const int s = sgkc_fs_rw_slice(t);
    const float *a0 = A + s * KL;
#pragma unroll
    for (int i = 0; i < 2 * M; i++)
        v[i] = 0.0f;
    /* a step's rows all loaded, then k outer and rows inner: consecutive
     * FMAs go to 2M different sums */
#pragma unroll
    for (int k4 = 0; k4 < KL / 4; k4++) {
        float4 x[M];
#pragma unroll
        for (int r = 0; r < M; r++)
            x[r] = *reinterpret_cast<const float4 *>(a0 + r * lda + 4 * k4);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float2 wu = w[4 * k4 + u];
#pragma unroll
            for (int r = 0; r < M; r++) {
                const float xu = u == 0 ? x[r].x : u == 1 ? x[r].y : u == 2 ? x[r].z : x[r].w;
                v[2 * r] = fmaf(xu, wu.x, v[2 * r]);
                v[2 * r + 1] = fmaf(xu, wu.y, v[2 * r + 1]);
            }
        }
    }
    int base = 0;
    sgkc_fs_rscatter<2 * M, KS / 2>(v, s, base);
    return base;
}

/* Thread t of NT (whole warps) loads its weights from Ws (in thread
 * order), runs the GEMM on A and hands each of its sums of C, once, to
 * store(row, column, value): rows below nr, columns from c0. TL: the
 * timeline slot stamped when the sums are done (dev builds). */
template <int M, int K, int NT, int TL, typename F>
__device__ __forceinline__ void sgkc_fs_rw_run(const float *Ws, const float *A, int lda, int t, int c0, int nr,
                                               F &&store)
{
    float2 w[K / SGKC_FS_RW_KS];
    sgkc_fs_rw_load<K, NT>(w, Ws, t);
    float v[2 * M];
    const int base = sgkc_fs_rw_gemm<M, K>(w, A, lda, t, v);
    SGKC_TL(TL);
    constexpr int NL = sgkc_rs_left(2 * M, SGKC_FS_RW_KS / 2), DUP = sgkc_rs_dup(2 * M, SGKC_FS_RW_KS / 2);
    static_assert(NT % 32 == 0, "whole warps");
    if ((sgkc_fs_rw_slice(t) & DUP) == 0) {
        const int c = c0 + sgkc_fs_rw_pair(t) * 2;
#pragma unroll
        for (int j = 0; j < NL; j++) {
            const int f = base + j, r = f >> 1;
            if (r < nr)
                store(r, c + (f & 1), v[j]);
        }
    }
}

#endif
