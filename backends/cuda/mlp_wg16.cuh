/* The relation MLP pass of bf16 and f16 layers (mlp_h16.cuh's arithmetic:
 * the first layer on the 16-bit features and W1, exact products into fp32;
 * the second in one TF32 pass on the fp32 hidden units) on Hopper's
 * warpgroup MMA, in mlp_wg.cuh's shape: a warpgroup takes 64 pairs at a
 * time, warp w of it pairs 16 w .. 16 w + 15, persistent. mlp_h16.cuh's
 * mma.sync loads each W1 fragment from shared memory for every 16 pairs,
 * and those loads, not the MMAs, bound it; here one m64nPCAPk16 product
 * reads W1 for 64 pairs without a load instruction.
 * - The features are the first layer's A from registers: lane (g, t) loads
 *   features 16 q + 4 t .. + 3 of its rows g and g + 8 (sgkc_mh_load_row)
 *   and k-step q takes them as its k 2 t, 2 t + 1, 2 t + 8, 2 t + 9; W1
 *   sits in shared memory as 16-bit values in 64-wide k-tiles of 128-byte
 *   swizzled rows, its columns permuted to match (column 16 ks + s of a
 *   k-tile holds feature 16 ks + 4 ((s % 8) / 2) + 2 (s / 8) + s % 2).
 * - The accumulators start at b1; silu, then rounded to TF32, they are the
 *   second layer's A as in mlp_wg.cuh (W2 rounded to TF32 in its layout).
 * Every wgmma group holds two k-steps (ptxas serializes a group of one,
 * C7513): at PCAP 16 the first layer's second k-step multiplies zero
 * columns of W1 by zero features. Fragments alternate between two pairs
 * of register sets, so that a group's are made while the previous runs.
 *
 * Weights are staged before the grid wait, features read and the bias
 * written after it, as in mlp_wg.cuh. Instances: PCAP 16, 32, 64, 128 and
 * HT 1, 2 (P <= PCAP, H <= 8 HT), F16 (else bf16), 256 threads and
 * sgkc_mw16_smem_floats of dynamic shared memory; sm_90a code only, and a
 * launch outside what the instance takes traps. */
#ifndef SGK_CUDA_MLP_WG16_CUH
#define SGK_CUDA_MLP_WG16_CUH

#include "mlp_h16.cuh"
#include "mlp_wg.cuh"

/* Shared memory in floats: W1's 16-bit k-tiles (PCAP rows of 128 bytes
 * each), W2's TF32 k-tiles (8 HT rows of 128 bytes), b1, b2, and room to
 * align the tiles to 1 KB */
__host__ __device__ constexpr size_t sgkc_mw16_smem_floats(int pcap, int ht)
{
    return (size_t)((pcap + 63) / 64) * pcap * 32 + (size_t)((pcap + 31) / 32) * 8 * ht * 32 + pcap + 8 * ht + 256;
}

template <int PCAP, int HT, bool F16>
__global__ void __launch_bounds__(SGKC_MW_NT, 1) sgkc_mlp_wg16_kernel(sgkc_mlp_args a)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(PCAP == 16 || PCAP == 32 || PCAP == 64 || PCAP == 128, "whole k-steps of 16");
    constexpr int KT1 = (PCAP + 63) / 64; /* W1's 16-bit k-tiles of 64 */
    constexpr int KT2 = (PCAP + 31) / 32; /* W2's TF32 k-tiles of 32 */
    constexpr int NQ = PCAP / 16;         /* first-layer k-steps */
    constexpr int G1 = (NQ + 1) / 2;      /* their groups of two */
    constexpr int G2 = PCAP / 16;         /* second-layer groups of two k-steps of 8 */
    constexpr int R1 = PCAP / 2, R2 = 4 * HT;
    constexpr int W1T = PCAP * 32, W2T = 8 * HT * 32; /* floats of a k-tile */
    constexpr bool PF = true;             /* the next tile's features load during this one */
    extern __shared__ float4 mw_smem4[];
    float *W1 = reinterpret_cast<float *>(((uintptr_t)mw_smem4 + 1023) & ~(uintptr_t)1023);
    float *W2 = W1 + KT1 * W1T, *b1s = W2 + KT2 * W2T, *b2s = b1s + PCAP;
    const int P = a.P, H = a.H, tid = (int)threadIdx.x;
    uint32_t dyn_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn_smem));
    if (blockDim.x != SGKC_MW_NT || P > PCAP || H > 8 * HT || dyn_smem < sgkc_mw16_smem_floats(PCAP, HT) * sizeof(float))
        __trap(); /* not what this instance takes: an error, not a wrong bias */

    uint16_t *W1h = reinterpret_cast<uint16_t *>(W1);
    for (int i = tid; i < PCAP * KT1 * 64; i += SGKC_MW_NT) {
        const int n = i / (KT1 * 64), kk = i % (KT1 * 64), kt = kk / 64, q = kk % 64, ks = q >> 4, s = q & 15;
        const int r = 64 * kt + 16 * ks + 4 * ((s & 7) >> 1) + 2 * (s >> 3) + (s & 1); /* the feature at column q */
        const float v = n < P && r < P ? __ldg(a.w1 + (size_t)n * P + r) : 0.0f;
        W1h[2 * kt * W1T + n * 64 + (((q >> 3) ^ (n & 7)) << 3) + (q & 7)] = sgkc_h16_bits<!F16>(v);
    }
    for (int i = tid; i < 8 * HT * KT2 * 32; i += SGKC_MW_NT) {
        const int h = i / (KT2 * 32), kk = i % (KT2 * 32), kt = kk / 32, q = kk % 32, ks = q >> 3, s = q & 7;
        const int p = 32 * kt + 8 * ks + 2 * (s & 3) + (s >> 2); /* the hidden unit at column q */
        reinterpret_cast<uint32_t *>(W2 + kt * W2T)[h * 32 + (((q >> 2) ^ (h & 7)) << 2) + (q & 3)] =
            sgkc_tf32(h < H && p < P ? __ldg(a.w2t + (size_t)p * H + h) : 0.0f);
    }
    sgkc_mw_stage_biases<PCAP, HT>(a, b1s, b2s, tid);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* wgmma reads what these stores wrote */
    __syncthreads();
    sgkc_grid_wait();

    const int lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    const int64_t M = a.M, tiles = (M + 63) / 64, stride = (int64_t)gridDim.x * 2;
    auto load = [&](uint2 (&xa)[NQ], uint2 (&xb)[NQ], int64_t tile) {
        const int64_t ra = tile * 64 + 16 * w4 + g, rb = ra + 8;
        sgkc_mh_load_row<NQ>(a, ra, tile < tiles && ra < M, t, xa);
        sgkc_mh_load_row<NQ>(a, rb, tile < tiles && rb < M, t, xb);
    };
    /* the shared-memory tile of k-step i: W1's of 16 (4 a k-tile), W2's of 8 */
    auto w1_step = [&](int i) { return W1 + (i >> 2) * W1T + 8 * (i & 3); };
    auto w2_step = [&](int i) { return W2 + (i >> 2) * W2T + 8 * (i & 3); };

    int64_t tile = (int64_t)blockIdx.x * 2 + wg;
    uint2 xa[NQ], xb[NQ];
    load(xa, xb, tile);
    for (; tile < tiles; tile += stride) {
        uint2 na[PF ? NQ : 1], nb[PF ? NQ : 1];
        if constexpr (PF)
            load(na, nb, tile + stride);

        /* acc[4j + 2s + e]: row 16 w4 + 8 s + g, hidden unit 8 j + 2 t + e */
        float acc[R1];
        sgkc_mw_start<PCAP / 8>(acc, b1s, t);

        uint32_t af[4][4];
        /* first layer: group gi takes k-steps 2 gi and 2 gi + 1 in sets 2 (gi % 2) and + 1 */
#pragma unroll
        for (int gi = 0; gi < G1; gi++) {
            const int s0 = 2 * (gi & 1);
            if (gi >= 2) {
                sgkc_wg_wait<1>(); /* group gi - 2, which read these sets, is done */
                sgkc_wg_hold(acc);
                sgkc_wg_hold4(af[s0]);
                sgkc_wg_hold4(af[s0 + 1]);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int q = 2 * gi + e; /* past NQ only at PCAP 16: zero features */
                const uint2 va = q < NQ ? xa[q % NQ] : make_uint2(0u, 0u), vb = q < NQ ? xb[q % NQ] : make_uint2(0u, 0u);
                af[s0 + e][0] = va.x;
                af[s0 + e][1] = vb.x;
                af[s0 + e][2] = va.y;
                af[s0 + e][3] = vb.y;
            }
            sgkc_wg_step2<R1, true, F16>(acc, af[s0], af[s0 + 1], w1_step(2 * gi), w1_step(2 * gi + 1));
        }
        sgkc_wg_wait<0>();
        sgkc_wg_hold(acc);

        /* second layer: k-step j takes hidden units 8 j .. 8 j + 7 */
        float o[R2];
        sgkc_mw_start<HT>(o, b2s, t);
#pragma unroll
        for (int gi = 0; gi < G2; gi++) {
            const int s0 = 2 * (gi & 1);
            if (gi >= 2) {
                sgkc_wg_wait<1>();
                sgkc_wg_hold(o);
                sgkc_wg_hold4(af[s0]);
                sgkc_wg_hold4(af[s0 + 1]);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = 2 * gi + e;
                /* {row g, k t}, {row g + 8, k t}, {row g, k t + 4}, {row g + 8, k t + 4} */
                const float v[4] = {acc[4 * j], acc[4 * j + 2], acc[4 * j + 1], acc[4 * j + 3]};
#pragma unroll
                for (int c = 0; c < 4; c++)
                    af[s0 + e][c] = sgkc_tf32(sgkc_silu_fast(v[c]));
            }
            sgkc_wg_step2<R2, false, false>(o, af[s0], af[s0 + 1], w2_step(2 * gi), w2_step(2 * gi + 1));
        }
        sgkc_wg_wait<0>();
        sgkc_wg_hold(o);
        sgkc_mw_store<HT>(a, o, tile, w4, g, t);

        if constexpr (PF) {
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                xa[q] = na[q];
                xb[q] = nb[q];
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
