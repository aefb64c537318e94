/* Device helpers shared by the sgk CUDA kernels. */
#ifndef SGK_CUDA_KERNEL_COMMON_CUH
#define SGK_CUDA_KERNEL_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#define SGKC_NEG_INF (-INFINITY)

/* Dev builds only (-DSGKC_TIMELINE, dev/harness.cu "timeline"): thread 0 of
 * each block (SGKC_TL_AT: thread t) stamps clock64() at phase boundaries
 * (slots 0-14, 16-31), slot 15 the globaltimer at entry, so a phase's share
 * of a latency-bound kernel can be read directly. */
#ifdef SGKC_TIMELINE
#define SGKC_TL_SLOTS 32
__device__ unsigned long long sgkc_tl[256 * SGKC_TL_SLOTS];
#define SGKC_TL_AT(k, t)                                                                  \
    do {                                                                                  \
        if (threadIdx.x == (t) && blockIdx.x < 256) {                                     \
            sgkc_tl[blockIdx.x * SGKC_TL_SLOTS + (k)] = clock64();                        \
            if ((k) == 0) {                                                               \
                unsigned long long g;                                                     \
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));                     \
                sgkc_tl[blockIdx.x * SGKC_TL_SLOTS + 15] = g;                             \
            }                                                                             \
        }                                                                                 \
    } while (0)
#else
#define SGKC_TL_AT(k, t) ((void)0)
#endif
#define SGKC_TL(k) SGKC_TL_AT(k, 0)

/* silu(t) = t / (1 + exp(-t)), accurate: expf and a 2-ulp division. For
 * t < -88 exp overflows to inf and the quotient is -0, the limit. */
__device__ __forceinline__ float sgkc_silu(float t)
{
    return __fdividef(t, 1.0f + expf(-t));
}

#define SGKC_LOG2E 1.4426950408889634f

/* 2^x and 1/x, the hardware approximations (a few ulp and 1 ulp); results
 * below 2^-126 flush to 0. */
__device__ __forceinline__ float sgkc_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float sgkc_rcp(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* silu with the hardware exp2 and reciprocal: five instructions (two of
 * them MUFU). __expf and __fdividef took eight, three of them for
 * subnormal results that cannot matter here: exp(-t) below 2^-126 beside
 * 1, or 1 / (1 + exp(-t)) below 2^-126 (t < -87.3), where silu is within
 * 1e-36 of 0 and comes out -0. Its relative error (a few
 * ulp for moderate |t|, growing with |t|) reaches the output only through
 * the attention bias. The tiled and tuned-fused-small kernels use it; across the
 * dev harness's 20 validation cases on the H200 the largest relative L2
 * error of any variant stayed at 4.5e-7 with the hardware exp2 as without
 * it (budget 1e-5). For t < -88, exp(-t) is
 * inf and the result -0, as above; NaN stays NaN and +inf gives +inf. */
__device__ __forceinline__ float sgkc_silu_fast(float t)
{
    return t * sgkc_rcp(1.0f + sgkc_ex2(t * -SGKC_LOG2E));
}

/* The same on the scaled argument u = -t log2(e), for weights staged with
 * that factor folded in (sgkc_mlp_stage): u / (1 + 2^u) = -log2(e) silu(t),
 * one multiply fewer; the second layer's weights carry -ln(2) to undo it.
 * Limits as above: u -> +inf (t -> -inf) gives 0, u = -inf gives -inf.
 * A first-layer weight or bias beyond FLT_MAX / log2(e) (2.4e38) would
 * overflow to inf when scaled. */
#define SGKC_MLP_U (-SGKC_LOG2E)            /* -log2(e): on w1, b1 */
#define SGKC_MLP_W2 (-0.6931471805599453f) /* -ln(2): on w2 */
__device__ __forceinline__ float sgkc_silu_u(float u)
{
    return u * sgkc_rcp(1.0f + sgkc_ex2(u));
}

/* A mask value's bits: the byte, or the float's. Loaded apart from the
 * test, so that a kernel can issue its other loads before the mask value
 * arrives (the test, not the load, waits for it). */
__device__ __forceinline__ unsigned sgkc_mask_bits(const void *mask, int u8, size_t idx)
{
    return u8 ? (unsigned)__ldg((const unsigned char *)mask + idx) : __float_as_uint(__ldg((const float *)mask + idx));
}

/* An edge is any nonzero mask value (NaN too); -0.0f is zero: a bit other
 * than the float's sign (a byte never reaches it). */
__device__ __forceinline__ bool sgkc_bits_edge(unsigned m)
{
    return (m << 1) != 0u;
}

__device__ __forceinline__ bool sgkc_edge(const void *mask, int u8, size_t idx)
{
    return sgkc_bits_edge(sgkc_mask_bits(mask, u8, idx));
}

__device__ __forceinline__ float4 sgkc_ld4(const float *p)
{
    return __ldg(reinterpret_cast<const float4 *>(p));
}

/* Features 4*r4 .. 4*r4+3 of one pair (P floats at src), zero past P;
 * vec: P % 4 == 0 and src 16-byte aligned. */
__device__ __forceinline__ float4 sgkc_ld_feat4(const float *src, int r4, int P, bool vec)
{
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r4 * 4 >= P)
        return v;
    if (vec)
        return sgkc_ld4(src + r4 * 4);
    v.x = __ldg(src + r4 * 4);
    if (r4 * 4 + 1 < P) v.y = __ldg(src + r4 * 4 + 1);
    if (r4 * 4 + 2 < P) v.z = __ldg(src + r4 * 4 + 2);
    if (r4 * 4 + 3 < P) v.w = __ldg(src + r4 * 4 + 3);
    return v;
}

/* A 16-bit dtype's bits (f16, else bf16) as the float they hold: exact */
__device__ __forceinline__ float sgkc_widen16(uint32_t h, bool f16)
{
    return f16 ? __half2float(__ushort_as_half((unsigned short)h)) : __uint_as_float(h << 16);
}

/* Four 16-bit values packed two a word, lower first, as floats */
__device__ __forceinline__ float4 sgkc_widen16x4(uint2 u, bool f16)
{
    return make_float4(sgkc_widen16(u.x & 0xffffu, f16), sgkc_widen16(u.x >> 16, f16), sgkc_widen16(u.y & 0xffffu, f16),
                       sgkc_widen16(u.y >> 16, f16));
}

/* sgkc_ld_feat4 on a 16-bit layer's features (f16, else bf16); vec: P % 4
 * == 0 and src 8-byte aligned */
__device__ __forceinline__ float4 sgkc_ld_feat4_16(const uint16_t *src, int r4, int P, bool vec, bool f16)
{
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r4 * 4 >= P)
        return v;
    if (vec)
        return sgkc_widen16x4(__ldg(reinterpret_cast<const uint2 *>(src + r4 * 4)), f16);
    v.x = sgkc_widen16(__ldg(src + r4 * 4), f16);
    if (r4 * 4 + 1 < P) v.y = sgkc_widen16(__ldg(src + r4 * 4 + 1), f16);
    if (r4 * 4 + 2 < P) v.z = sgkc_widen16(__ldg(src + r4 * 4 + 2), f16);
    if (r4 * 4 + 3 < P) v.w = sgkc_widen16(__ldg(src + r4 * 4 + 3), f16);
    return v;
}

/* All R4 feature vectors of one pair (sgkc_ld_feat4), or zeros when !load:
 * a pair that is not an edge, or past the tile, reads nothing. */
template <int R4>
__device__ __forceinline__ void sgkc_ld_feats(float4 (&x)[R4], const float *src, int P, bool vec, bool load)
{
#pragma unroll
    for (int r4 = 0; r4 < R4; r4++)
        x[r4] = load ? sgkc_ld_feat4(src, r4, P, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
}

__device__ __forceinline__ void sgkc_fma4(float &acc, float4 a, float4 b)
{
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    acc = fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float sgkc_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Each of R values summed over the warp; the R butterflies interleave, so
 * their shuffle latencies overlap instead of adding up. */
template <int R>
__device__ __forceinline__ void sgkc_warp_sums(float (&v)[R])
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int r = 0; r < R; r++)
            v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
}

__device__ __forceinline__ float sgkc_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Masked entries carry -inf in the bias slot; q.k must not be added to them
 * (a NaN there would otherwise leak through a masked edge). */
__device__ __forceinline__ float sgkc_add_score(float bias, float qk)
{
    return bias == SGKC_NEG_INF ? bias : bias + qk;
}

/* One term of ctx = P.V. A key of weight 0 (masked, or whose exp
 * underflowed) must add nothing, yet fmaf(0, v, o) is NaN when v is NaN or
 * Inf: a non-finite node would reach every row of its batch entry, also rows
 * that do not attend to it. GUARD skips such terms; where V is staged in
 * shared memory a kernel checks each tile once (sgkc_nonfinite_share) and
 * pays for the guard only on a tile that holds a non-finite value, since
 * for finite v the plain FMA adds exactly 0. */
template <bool GUARD>
__device__ __forceinline__ float sgkc_pv(float p, float v, float o)
{
    return (GUARD && p == 0.0f) ? o : fmaf(p, v, o);
}

/* Tags that pick the guarded or plain P.V form at compile time. */
using sgkc_guarded = std::true_type;
using sgkc_plain = std::false_type;

/* Whether all four are finite (false for NaN too). */
__device__ __forceinline__ bool sgkc_finite4(float4 v)
{
    return (fabsf(v.x) < INFINITY) & (fabsf(v.y) < INFINITY) & (fabsf(v.z) < INFINITY) & (fabsf(v.w) < INFINITY);
}

/* This thread's share of "is any of the n floats at p NaN or Inf": p
 * 16-byte aligned, n % 4 == 0, thread tid of nt takes every nt-th 4-vector.
 * OR the shares over the block (__syncthreads_or). */
__device__ __forceinline__ bool sgkc_nonfinite_share(const float *p, int n, int tid, int nt)
{
    bool finite = true;
    for (int i = 4 * tid; i < n; i += 4 * nt)
        finite &= sgkc_finite4(*reinterpret_cast<const float4 *>(p + i));
    return !finite;
}

/* Row statistics of LayerNorm for one row of length D, by one warp, two
 * passes (mean, then centred squares), both over the row shifted by its
 * first element x0: the normalised value is ((x - x0) - mean) * rstd, whose
 * rounding follows the row's spread, not |mean| (kernels/relation.sgk,
 * layer_norm, says why). The row may be in global or shared memory. */
__device__ __forceinline__ void sgkc_row_stats(const float *row, int D, float eps, int lane,
                                               float *shift_out, float *mean_out, float *rstd_out)
{
    const float x0 = row[0];
    float s = 0.0f;
    for (int k = lane; k < D; k += 32)
        s += row[k] - x0;
    const float mean = sgkc_warp_sum(s) / (float)D;
    float v = 0.0f;
    for (int k = lane; k < D; k += 32) {
        const float t = (row[k] - x0) - mean;
        v = fmaf(t, t, v);
    }
    const float var = sgkc_warp_sum(v) / (float)D;
    *shift_out = x0;
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var + eps);
}

/* The same for R rows at once (row stride ld floats), every load in flight
 * before the first reduction: one memory latency for R rows instead of two
 * per row. Needs D % 4 == 0, 16-byte aligned rows, D <= 128 * V4. Rows at or
 * past nvalid give shift 0, mean 0, rstd 0. */
template <int R, int V4>
__device__ __forceinline__ void sgkc_rows_stats4(const float *row0, size_t ld, int nvalid, int D,
                                                 float eps, int lane, float *shift, float *mean, float *rstd)
{
    float4 v[R][V4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int u = 0; u < V4; u++) {
            const int k = (lane + 32 * u) * 4;
            v[r][u] = (r < nvalid && k < D) ? sgkc_ld4(row0 + r * ld + k) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
    for (int r = 0; r < R; r++) {
        /* column 0 is lane 0's first value; columns past D stay 0 */
        const float x0 = __shfl_sync(0xffffffffu, v[r][0].x, 0);
        float s = 0.0f;
#pragma unroll
        for (int u = 0; u < V4; u++) {
            if ((lane + 32 * u) * 4 < D) {
                v[r][u].x -= x0;
                v[r][u].y -= x0;
                v[r][u].z -= x0;
                v[r][u].w -= x0;
            }
            s += (v[r][u].x + v[r][u].y) + (v[r][u].z + v[r][u].w);
        }
        const float m = sgkc_warp_sum(s) / (float)D;
        float q = 0.0f;
#pragma unroll
        for (int u = 0; u < V4; u++) {
            if ((lane + 32 * u) * 4 < D) {
                const float a = v[r][u].x - m, b = v[r][u].y - m, c = v[r][u].z - m, d = v[r][u].w - m;
                q = fmaf(a, a, q);
                q = fmaf(b, b, q);
                q = fmaf(c, c, q);
                q = fmaf(d, d, q);
            }
        }
        const float var = sgkc_warp_sum(q) / (float)D;
        shift[r] = r < nvalid ? x0 : 0.0f;
        mean[r] = r < nvalid ? m : 0.0f;
        rstd[r] = r < nvalid ? 1.0f / sqrtf(var + eps) : 0.0f;
    }
}

/* cp.async: global -> shared without a register round trip (sm_80+); 16
 * bytes (both addresses 16-byte aligned) or 4. */
__device__ __forceinline__ void sgkc_cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void sgkc_cp_async4(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void sgkc_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void sgkc_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* A hint: bring the 128-byte line holding p into L2. */
__device__ __forceinline__ void sgkc_prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

static inline bool sgkc_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* A float as a 16-bit dtype's bits (f16, else bf16), rounded as the
 * conversion kernels and kernels/dtype.h round: to nearest, ties to even,
 * overflow to inf; a NaN keeps its sign and top payload bits, quiet. */
__device__ __forceinline__ uint16_t sgkc_narrow16(float x, bool f16)
{
    const uint32_t u = __float_as_uint(x), a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return f16 ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu)) : (uint16_t)((u >> 16) | 0x0040u);
    return f16 ? __half_as_ushort(__float2half_rn(x)) : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* The LayerNorm statistics wg_gemm.cuh takes in a pass of their own
 * (sgkc_tc_gemm_args.ln_stats): shift, mean and rstd arrays, each of M
 * rounded up to the four rows a warp takes. */
__host__ __device__ static inline int64_t sgkc_ln_stats_rows(int64_t M) { return (M + 3) / 4 * 4; }
static inline size_t sgkc_ln_stats_floats(int64_t M) { return 3 * (size_t)sgkc_ln_stats_rows(M); }
/* buf (floats of it) as that scratch for M rows where it is large enough, else null */
static inline float *sgkc_ln_stats_in(float *buf, size_t floats, int64_t M)
{
    return sgkc_ln_stats_floats(M) <= floats ? buf : nullptr;
}

/* Programmatic dependent launch (Hopper). A kernel launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization may start while the
 * kernel before it on the stream is still running: its blocks do their
 * independent setup, then sgkc_grid_wait() blocks until that kernel has
 * finished and its writes are visible. sgkc_grid_trigger() lets the next
 * kernel start before this one ends. Launched without the attribute (or
 * below sm_90), neither does anything. */
__device__ __forceinline__ void sgkc_grid_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void sgkc_grid_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* The barrier of one of G groups of NT threads that split a block's work
 * (attn_rows' key groups, gemm_panel's K groups; tuned-fused-small's GEMM warps
 * as group 0, apart from its MLP warps): __syncthreads when G = 1, else
 * group g's NT threads on named barrier 1 + g (0 is __syncthreads'). */
template <int G, int NT>
__device__ __forceinline__ void sgkc_group_sync(int g)
{
    if constexpr (G == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(1 + g), "n"(NT) : "memory");
}

/* The same, returning whether v is true in any thread of the group. */
template <int G, int NT>
__device__ __forceinline__ bool sgkc_group_sync_or(int g, bool v)
{
    if constexpr (G == 1)
        return __syncthreads_or(v);
    int r;
    asm volatile("{\n\t.reg .pred p, q;\n\t"
                 "setp.ne.s32 p, %1, 0;\n\t"
                 "bar.red.or.pred q, %2, %3, p;\n\t"
                 "selp.s32 %0, 1, 0, q;\n\t}"
                 : "=r"(r)
                 : "r"((int)v), "r"(1 + g), "n"(NT)
                 : "memory");
    return r != 0;
}

/* Across the S blocks of a cluster that split one tile's work (tc_gemm.cuh
 * over k, attn_tiled.cuh over keys): a barrier (release and acquire of
 * shared memory; a block barrier where S = 1), and the address of p in
 * block rank's shared memory. Clusters exist from compute capability 9.0;
 * below it the host never splits. */
__device__ __forceinline__ void sgkc_cluster_sync(int S)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (S > 1) {
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
        return;
    }
#endif
    __syncthreads();
}
template <typename T>
__device__ __forceinline__ T *sgkc_cluster_peer(T *p, int rank, int S)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (S > 1) {
        uint64_t r;
        asm("mapa.u64 %0, %1, %2;\n" : "=l"(r) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
        return reinterpret_cast<T *>(r);
    }
#endif
    (void)rank;
    return p;
}

#endif
