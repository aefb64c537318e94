/* The relation MLP pass (mlp_tc.cuh's arguments and head-major output) for
 * layers whose pair features and weights are bf16 or f16 (BF: bf16): the
 * features are read as they are, 2 bytes each, instead of from a float
 * copy, and the first layer (the P^2 of the pass's 2P^2 + 2PH FLOPs a
 * pair) runs in one m16n8k16 MMA of that type: a product of two 16-bit
 * values is exact in the fp32 accumulator, so the pass keeps the fp32
 * contract on the rounded inputs. The second layer is mlp_tc.cuh's product
 * on the fp32 hidden units in one TF32 pass: TF32 keeps more bits than the
 * layer's 16-bit data carry and fp32's range (an f16 hidden unit could
 * overflow), at a third of 3xTF32's MMAs and without splitting the hidden
 * units.
 *
 * A warp takes 16 pairs at a time (persistent, as mlp_tc.cuh). For each
 * k-step of 16 features, lane (g, t) loads features 16q + 4t .. + 3 of its
 * rows g and g + 8 (8 bytes each) and feeds them as the MMA's k slots 2t,
 * 2t + 1 and 2t + 8, 2t + 9; W1 sits in shared memory as 16-bit rows, read
 * in the same order (a dot product takes its terms in any order). The
 * hidden tiles then go through b1, silu and the second layer as in
 * mlp_tc.cuh, W2 rounded to TF32 once a block.
 *
 * Weights arrive as the layer's floats (16-bit values widened, so the
 * conversion back is exact). */
#ifndef SGK_CUDA_MLP_H16_CUH
#define SGK_CUDA_MLP_H16_CUH

#include "mlp_tc.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* c += a b, one m16n8k16 tile of 16-bit operands: lane (g, t) holds
 * a = {A[g][2t..2t+1], A[g+8][2t..2t+1], A[g][2t+8..2t+9], A[g+8][2t+8..2t+9]},
 * b = {B[2t..2t+1][g], B[2t+8..2t+9][g]}, the lower index in the lower half. */
template <bool BF>
__device__ __forceinline__ void sgkc_mma16_16x8x16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    if constexpr (BF)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* a float that holds a 16-bit value, as those 16 bits */
template <bool BF>
__device__ __forceinline__ uint16_t sgkc_h16_bits(float x)
{
    if constexpr (BF)
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    else
        return __half_as_ushort(__float2half_rn(x));
}

/* two floats as a pair of 16-bit values, lo in the low half */
template <bool BF>
__device__ __forceinline__ uint32_t sgkc_pack16(float lo, float hi)
{
    return (uint32_t)sgkc_h16_bits<BF>(lo) | (uint32_t)sgkc_h16_bits<BF>(hi) << 16;
}

/* Row stride of W1's 16-bit rows in shared memory, in halves: a half warp's
 * 8-byte reads (rows g .. g + 3 at halves 16q + 4t) fall on distinct banks
 * at PCAP >= 32. */
__host__ __device__ constexpr int sgkc_mh_ldh(int pcap)
{
    return pcap + 16;
}
/* Shared memory in floats: W1's 16-bit rows, b1, W2 rounded to TF32, b2. */
__host__ __device__ constexpr size_t sgkc_mh_smem_floats(int pcap, int ht)
{
    return (size_t)pcap * sgkc_mh_ldh(pcap) / 2 + pcap + (size_t)8 * ht * sgkc_mt_ldw2(pcap) + 8 * ht;
}

/* Features 16 q + 4 t .. + 3 of row r (lane t's share of each k-step of
 * 16), two 16-bit values a word; zero past P, and everywhere where !in.
 * 8-byte loads where a.pvec (P % 4 == 0 and the features 8-byte aligned).
 * Args: any kernel's arguments with pair16, P and pvec (this pass's,
 * attn_rel16.cuh's). */
template <int NQ, typename Args>
__device__ __forceinline__ void sgkc_mh_load_row(const Args &a, int64_t r, bool in, int t, uint2 (&x)[NQ])
{
    const int P = a.P;
    const uint16_t *src = a.pair16 + (size_t)(in ? r : 0) * P;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        const int f = 16 * q + 4 * t;
        uint2 v = make_uint2(0u, 0u);
        if (in && f < P) {
            if (a.pvec) {
                v = __ldg(reinterpret_cast<const uint2 *>(src + f));
            } else {
                const uint32_t e0 = __ldg(src + f), e1 = f + 1 < P ? __ldg(src + f + 1) : 0u;
                const uint32_t e2 = f + 2 < P ? __ldg(src + f + 2) : 0u;
                const uint32_t e3 = f + 3 < P ? __ldg(src + f + 3) : 0u;
                v = make_uint2(e0 | e1 << 16, e2 | e3 << 16);
            }
        }
        x[q] = v;
    }
}

/* The weights into a block's shared memory (sgkc_mh_smem_floats of them):
 * W1 as 16-bit rows, b1, W2 rounded to TF32, b2, zero past P and H. No
 * barrier: the caller's. */
template <int PCAP, int HT, bool BF, int NT>
__device__ __forceinline__ void sgkc_mh_stage(float *smem, const float *w1, const float *b1, const float *w2t,
                                              const float *b2, int P, int H, int tid)
{
    constexpr int LDH = sgkc_mh_ldh(PCAP), LDW2 = sgkc_mt_ldw2(PCAP);
    uint16_t *W1h = reinterpret_cast<uint16_t *>(smem);
    float *b1s = smem + PCAP * LDH / 2, *W2s = b1s + PCAP, *b2s = W2s + 8 * HT * LDW2;
    sgkc_mt_stage_w1<PCAP, NT>(w1, P, tid, [&](int n, int k, float4 v) {
        /* n LDH and k are multiples of 4 halves: 8-byte aligned */
        *reinterpret_cast<uint2 *>(W1h + n * LDH + k) = make_uint2(sgkc_pack16<BF>(v.x, v.y), sgkc_pack16<BF>(v.z, v.w));
    });
    for (int i = tid; i < PCAP; i += NT)
        b1s[i] = i < P ? __ldg(b1 + i) : 0.0f;
    for (int i = tid; i < 8 * HT * PCAP; i += NT) {
        const int h = i / PCAP, p = i % PCAP;
        reinterpret_cast<uint32_t *>(W2s)[h * LDW2 + p] = sgkc_tf32(h < H && p < P ? __ldg(w2t + (size_t)p * H + h) : 0.0f);
    }
    for (int i = tid; i < 8 * HT; i += NT)
        b2s[i] = i < H ? __ldg(b2 + i) : 0.0f;
}

/* One tile of 16 pairs through both layers, b2 not added: o[ht] = {[g][h],
 * [g][h+1], [g+8][h], [g+8][h+1]}, h = 8 ht + 2t, from rows g and g + 8's
 * features as sgkc_mh_load_row gives them and the weights sgkc_mh_stage
 * put in smem. */
template <int PCAP, int HT, bool BF>
__device__ __forceinline__ void sgkc_mh_tile(float (&o)[HT][4], const uint2 (&x0)[PCAP / 16],
                                             const uint2 (&x1)[PCAP / 16], const float *smem, int g, int t)
{
    constexpr int LDH = sgkc_mh_ldh(PCAP), LDW2 = sgkc_mt_ldw2(PCAP), W2F = 8 * HT * LDW2;
    constexpr int NQ = PCAP / 16, NJ = PCAP / 8, JG = NJ < 8 ? NJ : 8;
    static_assert(NJ % JG == 0, "whole steps");
    const uint16_t *W1h = reinterpret_cast<const uint16_t *>(smem);
    const float *b1s = smem + PCAP * LDH / 2, *W2s = b1s + PCAP;
#pragma unroll
    for (int ht = 0; ht < HT; ht++)
        o[ht][0] = o[ht][1] = o[ht][2] = o[ht][3] = 0.0f;
#pragma unroll
    for (int jg = 0; jg < NJ; jg += JG) {
        float acc[JG][4] = {};
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const uint32_t af[4] = {x0[q].x, x1[q].x, x0[q].y, x1[q].y};
#pragma unroll
            for (int j = 0; j < JG; j++) {
                const uint2 w = *reinterpret_cast<const uint2 *>(W1h + (8 * (jg + j) + g) * LDH + 16 * q + 4 * t);
                const uint32_t bf[2] = {w.x, w.y};
                sgkc_mma16_16x8x16<BF>(acc[j], af, bf);
            }
        }
        /* hidden units 8(jg + j) + 2t, + 1 of rows g, g + 8 -> the second layer */
#pragma unroll
        for (int j = 0; j < JG; j++)
            sgkc_mt_layer2<HT, LDW2, W2F, true, false>(o, acc[j], b1s, W2s, 8 * (jg + j) + 2 * t, g);
    }
}

/* Warps a block: eight at PCAP >= 64, where a warp's tile is long enough
 * that the block's weight staging pays for twice the warps; four below,
 * where more warps a block cost blocks an SM. */
__host__ __device__ constexpr int sgkc_mh_nw(int pcap)
{
    return pcap >= 64 ? 8 : 4;
}

template <int PCAP, int HT, bool BF, int NW = sgkc_mh_nw(PCAP)>
__global__ void __launch_bounds__(32 * NW) sgkc_mlp_h16_kernel(sgkc_mlp_args a)
{
    constexpr int NT = 32 * NW;
    constexpr int NQ = PCAP / 16;   /* k-steps of 16 features */
    constexpr bool PF = PCAP <= 64; /* the next tile's features load during this one */
    static_assert(PCAP % 16 == 0, "whole steps");

    extern __shared__ __align__(16) float smem[];
    const float *b2s = smem + PCAP * sgkc_mh_ldh(PCAP) / 2 + PCAP + 8 * HT * sgkc_mt_ldw2(PCAP);
    const int P = a.P, H = a.H, tid = (int)threadIdx.x;
    sgkc_mh_stage<PCAP, HT, BF, NT>(smem, a.w1, a.b1, a.w2t, a.b2, P, H, tid);
    __syncthreads();
    sgkc_grid_wait();

    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t M = a.M, tiles = (M + 15) / 16;
    const int64_t stride = (int64_t)gridDim.x * NW;

    /* rows g and g + 8 of a tile */
    auto load = [&](uint2 (&x0)[NQ], uint2 (&x1)[NQ], int64_t tile) {
        const int64_t r0 = tile * 16 + g, r1 = r0 + 8;
        sgkc_mh_load_row<NQ>(a, r0, tile < tiles && r0 < M, t, x0);
        sgkc_mh_load_row<NQ>(a, r1, tile < tiles && r1 < M, t, x1);
    };

    int64_t tile = (int64_t)blockIdx.x * NW + (tid >> 5);
    uint2 x0[NQ], x1[NQ];
    load(x0, x1, tile);
    for (; tile < tiles; tile += stride) {
        uint2 n0[PF ? NQ : 1], n1[PF ? NQ : 1];
        if constexpr (PF)
            load(n0, n1, tile + stride);

        float o[HT][4];
        sgkc_mh_tile<PCAP, HT, BF>(o, x0, x1, smem, g, t);
        sgkc_mt_store<HT>(a, o, b2s, tile, g, t);

        if constexpr (PF) {
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                x0[q] = n0[q];
                x1[q] = n1[q];
            }
        } else {
            load(x0, x1, tile + stride);
        }
    }
}

#endif
