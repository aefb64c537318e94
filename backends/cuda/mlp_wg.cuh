/* The relation MLP pass of mlp_tc.cuh (the same arguments and output: the
 * head-major bias (B, H, N*N) from the pair features, in 3xTF32) on Hopper's warpgroup
 * MMA, as wg_gemm.cuh runs the projections. The layer runs it on compute
 * capability 9.0 where the build has sm_90a code (variants.cu, launch_mlp),
 * mlp_tc.cuh's mma.sync kernel elsewhere: wgmma reaches the tensor cores'
 * full TF32 rate, which mma.sync does not, and one m64nN product reads its
 * B tile from shared memory for 64 pairs, where each warp of mlp_tc.cuh
 * loads its fragments for every 16 (DESIGN.md has what it measured).
 *
 * A warpgroup takes 64 pairs at a time (persistent: warpgroups stride over
 * the call's 64-pair tiles), warp w of it pairs 16 w .. 16 w + 15:
 * - their features are the first layer's A, from registers: lane (g, t)
 *   loads features 32 kt + 8 t .. + 7 of its rows g and g + 8 for each
 *   32-wide k-tile kt (two float4), and k-step ks takes features 8 t + 2 ks
 *   and + 1 as its k = t and t + 4. W1's TF32 halves sit in shared memory
 *   as wgmma's B (hidden units as rows, 128-byte swizzled 32-wide k-tiles,
 *   split once a block), its columns permuted to match: column 8 ks + j of
 *   a k-tile holds feature 8 (j % 4) + 2 ks + j / 4.
 * - m64nPCAPk8 products (small A x big W1, big A x small W1, big x big)
 *   into PCAP / 2 accumulators a thread, which start at b1;
 * - silu on the accumulators, which then are the second layer's A with no
 *   shuffle: a lane's hidden units 8 j + 2 t and + 1 are k-step j's k = t
 *   and t + 4, W2's columns permuted to match (column 8 ks + s of a k-tile
 *   holds hidden unit 8 ks + 2 (s % 4) + s / 4 of it), m64n(8 HT)k8 into
 *   accumulators that start at b2.
 * Fragments alternate between two register sets so that one k-step's are
 * made while the previous k-step's products run.
 *
 * As in mlp_tc.cuh, the weights are staged before the grid wait (they are
 * inputs; DESIGN.md says why a device repack of them cannot race this) and
 * the features are read and the bias written only after it; a block lets
 * the next kernel launch once its last tile is written (mlp_tc.cuh leaves
 * that to its exit), which changes nothing the next kernel's grid wait
 * sees. Features load as float4 where pvec says so (P % 4 == 0, 16-byte
 * aligned), else one float at a time. Instances:
 * PCAP 32, 64, 128 (whole 32-wide k-tiles) and HT 1, 2, for P <= PCAP and
 * H <= 8 HT, 256 threads and sgkc_mw_smem_floats of dynamic shared memory.
 * The body exists only in sm_90a code (__CUDA_ARCH_FEAT_SM90_ALL); launched
 * elsewhere, or outside what the instance takes, the kernel traps, which
 * the launch's stream reports as an error. */
#ifndef SGK_CUDA_MLP_WG_CUH
#define SGK_CUDA_MLP_WG_CUH

#include "mlp_tc.cuh"
#include "wg_mma.cuh"

#define SGKC_MW_NT 256 /* two warpgroups */

/* Shared memory in floats: W1's halves (PCAP x PCAP each), W2's (8 HT x
 * PCAP each), b1, b2, and room to align the tiles to 1 KB */
__host__ __device__ constexpr size_t sgkc_mw_smem_floats(int pcap, int ht)
{
    return 2 * (size_t)pcap * pcap + 2 * (size_t)8 * ht * pcap + pcap + 8 * ht + 256;
}

/* b1 (PCAP floats) and b2 (8 HT) into shared memory, zero past P and H */
template <int PCAP, int HT>
__device__ __forceinline__ void sgkc_mw_stage_biases(const sgkc_mlp_args &a, float *b1s, float *b2s, int tid)
{
    for (int i = tid; i < PCAP; i += SGKC_MW_NT)
        b1s[i] = i < a.P ? __ldg(a.b1 + i) : 0.0f;
    for (int i = tid; i < 8 * HT; i += SGKC_MW_NT)
        b2s[i] = i < a.H ? __ldg(a.b2 + i) : 0.0f;
}

/* A warpgroup's m64n(8 J) accumulators started at a bias of their columns:
 * d[4j + 2s + e] (row 8 s + g of a warp's 16, column 8 j + 2 t + e) =
 * bs[8 j + 2 t + e] */
template <int J>
__device__ __forceinline__ void sgkc_mw_start(float (&d)[4 * J], const float *bs, int t)
{
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            d[4 * j + e] = d[4 * j + 2 + e] = bs[8 * j + 2 * t + e];
}

/* A warpgroup's 64 x 8 HT second-layer accumulators (b2 in them) into the
 * bias: o[4j + 2s + e] is pair 64 tile + 16 w4 + 8 s + g, head 8 j + 2 t +
 * e; -inf at every head of a pair the mask makes no edge. */
template <int HT>
__device__ __forceinline__ void sgkc_mw_store(const sgkc_mlp_args &a, const float (&o)[4 * HT], int64_t tile, int w4,
                                              int g, int t)
{
#pragma unroll
    for (int s = 0; s < 2; s++) {
        const int64_t m = tile * 64 + 16 * w4 + 8 * s + g;
        if (m >= a.M)
            continue;
        float *const dst = a.bias + sgkc_bias_at(m, a.H, a.NN);
        const bool edge = sgkc_edge(a.mask, a.mask_u8, (size_t)m);
#pragma unroll
        for (int j = 0; j < HT; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int h = 8 * j + 2 * t + e;
                if (h < a.H)
                    dst[(size_t)h * a.NN] = edge ? o[4 * j + 2 * s + e] : SGKC_NEG_INF;
            }
    }
}

template <int PCAP, int HT>
__global__ void __launch_bounds__(SGKC_MW_NT, 1) sgkc_mlp_wg_kernel(sgkc_mlp_args a)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(PCAP == 32 || PCAP == 64 || PCAP == 128, "whole 32-wide k-tiles");
    constexpr int KT = PCAP / 32;       /* k-tiles of the first layer, and of the second */
    constexpr int R1 = PCAP / 2;        /* first-layer accumulators a thread */
    constexpr int R2 = 4 * HT;          /* second-layer accumulators a thread */
    constexpr int W1T = PCAP * 32;      /* floats of one k-tile of W1 (PCAP rows) */
    constexpr int W2T = 8 * HT * 32;    /* of W2 (8 HT rows) */
    constexpr bool PF = PCAP <= 64;     /* the next tile's features load during this one */
    extern __shared__ float4 mw_smem4[];
    float *W1h = reinterpret_cast<float *>(((uintptr_t)mw_smem4 + 1023) & ~(uintptr_t)1023);
    float *W1l = W1h + KT * W1T, *W2h = W1l + KT * W1T, *W2l = W2h + KT * W2T;
    float *b1s = W2l + KT * W2T, *b2s = b1s + PCAP;
    const int P = a.P, H = a.H, tid = (int)threadIdx.x;
    uint32_t dyn_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn_smem));
    if (blockDim.x != SGKC_MW_NT || P > PCAP || H > 8 * HT || dyn_smem < sgkc_mw_smem_floats(PCAP, HT) * sizeof(float))
        __trap(); /* not what this instance takes: an error, not a wrong bias */

    /* the weights, split and permuted, before the grid wait (they are inputs) */
    auto put = [&](float *hi, float *lo, int row, int q, float v) {
        /* column q of a k-tile's row in its 128-byte-swizzled place */
        const int o = row * 32 + (((q >> 2) ^ (row & 7)) << 2) + (q & 3);
        uint32_t h, l;
        sgkc_split_tf32_inf(v, h, l);
        reinterpret_cast<uint32_t *>(hi)[o] = h;
        reinterpret_cast<uint32_t *>(lo)[o] = l;
    };
    for (int i = tid; i < PCAP * PCAP; i += SGKC_MW_NT) {
        const int n = i / PCAP, kk = i % PCAP, kt = kk / 32, q = kk % 32, ks = q >> 3, j = q & 7;
        const int r = 32 * kt + 8 * (j & 3) + 2 * ks + (j >> 2); /* the feature at column q */
        put(W1h + kt * W1T, W1l + kt * W1T, n, q, n < P && r < P ? __ldg(a.w1 + (size_t)n * P + r) : 0.0f);
    }
    for (int i = tid; i < 8 * HT * PCAP; i += SGKC_MW_NT) {
        const int h = i / PCAP, kk = i % PCAP, kt = kk / 32, q = kk % 32, ks = q >> 3, s = q & 7;
        const int p = 32 * kt + 8 * ks + 2 * (s & 3) + (s >> 2); /* the hidden unit at column q */
        put(W2h + kt * W2T, W2l + kt * W2T, h, q, h < H && p < P ? __ldg(a.w2t + (size_t)p * H + h) : 0.0f);
    }
    sgkc_mw_stage_biases<PCAP, HT>(a, b1s, b2s, tid);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* wgmma reads what these stores wrote */
    __syncthreads();
    sgkc_grid_wait();

    const int lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    const int64_t M = a.M, tiles = (M + 63) / 64, stride = (int64_t)gridDim.x * 2;

    /* rows g and g + 8 of warp w4's 16 in a tile: features 32 kt + 8 t .. + 7 */
    auto load = [&](float4 (&xa)[2 * KT], float4 (&xb)[2 * KT], int64_t tile) {
        const int64_t ra = tile * 64 + 16 * w4 + g, rb = ra + 8;
        const float *pa = a.pair + (size_t)(ra < M ? ra : 0) * P, *pb = a.pair + (size_t)(rb < M ? rb : 0) * P;
#pragma unroll
        for (int c = 0; c < 2 * KT; c++) {
            const int r4 = 8 * (c >> 1) + 2 * t + (c & 1);
            xa[c] = tile < tiles && ra < M ? sgkc_ld_feat4(pa, r4, P, a.pvec) : make_float4(0.f, 0.f, 0.f, 0.f);
            xb[c] = tile < tiles && rb < M ? sgkc_ld_feat4(pb, r4, P, a.pvec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };

    int64_t tile = (int64_t)blockIdx.x * 2 + wg;
    float4 xa[2 * KT], xb[2 * KT];
    load(xa, xb, tile);
    for (; tile < tiles; tile += stride) {
        float4 na[PF ? 2 * KT : 1], nb[PF ? 2 * KT : 1];
        if constexpr (PF)
            load(na, nb, tile + stride);

        /* acc[4j + 2s + e]: row 16 w4 + 8 s + g, hidden unit 8 j + 2 t + e */
        float acc[R1];
        sgkc_mw_start<PCAP / 8>(acc, b1s, t);

        uint32_t ah[2][4], al[2][4];
        /* first layer: k-step i = 4 kt + ks, fragment set i % 2 */
#pragma unroll
        for (int i = 0; i < 4 * KT; i++) {
            const int kt = i >> 2, ks = i & 3, set = i & 1;
            if (i >= 2) {
                sgkc_wg_wait<1>(); /* step i - 2, which read this set, is done */
                sgkc_wg_hold(acc);
                sgkc_wg_hold4(ah[set]);
                sgkc_wg_hold4(al[set]);
            }
            const float4 &ca = xa[2 * kt + (ks >> 1)], &cb = xb[2 * kt + (ks >> 1)];
            const float v[4] = {(ks & 1) ? ca.z : ca.x, (ks & 1) ? cb.z : cb.x, (ks & 1) ? ca.w : ca.y,
                                (ks & 1) ? cb.w : cb.y};
#pragma unroll
            for (int e = 0; e < 4; e++)
                sgkc_split_tf32_inf(v[e], ah[set][e], al[set][e]);
            sgkc_wg_fence();
            sgkc_wg_hold(acc);
            sgkc_wg_hold4(ah[set]);
            sgkc_wg_hold4(al[set]);
            const uint64_t dh = sgkc_wg_desc(W1h + kt * W1T + 8 * ks), dl = sgkc_wg_desc(W1l + kt * W1T + 8 * ks);
            sgkc_wg_mma<R1>(acc, al[set], dh);
            sgkc_wg_mma<R1>(acc, ah[set], dl);
            sgkc_wg_mma<R1>(acc, ah[set], dh);
            sgkc_wg_commit();
        }
        sgkc_wg_wait<0>();
        sgkc_wg_hold(acc);

        /* second layer: k-step j takes hidden units 8 j .. 8 j + 7 */
        float o[R2];
        sgkc_mw_start<HT>(o, b2s, t);
#pragma unroll
        for (int j = 0; j < PCAP / 8; j++) {
            const int set = j & 1;
            if (j >= 2) {
                sgkc_wg_wait<1>();
                sgkc_wg_hold(o);
                sgkc_wg_hold4(ah[set]);
                sgkc_wg_hold4(al[set]);
            }
            /* {row g, k t}, {row g + 8, k t}, {row g, k t + 4}, {row g + 8, k t + 4} */
            const float v[4] = {acc[4 * j], acc[4 * j + 2], acc[4 * j + 1], acc[4 * j + 3]};
#pragma unroll
            for (int e = 0; e < 4; e++)
                sgkc_split_tf32_inf(sgkc_silu_fast(v[e]), ah[set][e], al[set][e]);
            sgkc_wg_fence();
            sgkc_wg_hold(o);
            sgkc_wg_hold4(ah[set]);
            sgkc_wg_hold4(al[set]);
            const int kt = j >> 2, ks = j & 3;
            const uint64_t dh = sgkc_wg_desc(W2h + kt * W2T + 8 * ks), dl = sgkc_wg_desc(W2l + kt * W2T + 8 * ks);
            sgkc_wg_mma<R2>(o, al[set], dh);
            sgkc_wg_mma<R2>(o, ah[set], dl);
            sgkc_wg_mma<R2>(o, ah[set], dh);
            sgkc_wg_commit();
        }
        sgkc_wg_wait<0>();
        sgkc_wg_hold(o);

        sgkc_mw_store<HT>(a, o, tile, w4, g, t);

        if constexpr (PF) {
#pragma unroll
            for (int c = 0; c < 2 * KT; c++) {
                xa[c] = na[c];
                xb[c] = nb[c];
            }
        } else {
            load(xa, xb, tile + stride);
        }
    }
    sgkc_grid_trigger();
#else
    (void)a;
    __trap();
#endif
}

#endif
