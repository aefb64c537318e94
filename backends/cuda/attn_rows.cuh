/* The tiled variant's attention kernel for eight heads of 32 columns
 * (D = 256; the mid, large and xl presets) with P <= 32. attn_tiled.cuh runs
 * one 256-thread block an SM at 255 registers, and its four phases per key
 * tile each end in a block barrier, so ncu saw 8 warps an SM stalled on
 * shared-memory loads and barriers (CPI 4.6-5.0). Here a block is 8 warps
 * and 16 query rows; a pair of warps owns 4 rows, each warp 4 of the 8
 * heads; registers stay at 128 so that two blocks share an SM.
 *
 * Per key tile of 32 keys (one per lane):
 *   relation MLP: each warp of a pair computes, lane j for key j, the bias
 *   of 2 of the pair's 4 rows for all eight heads (features in registers,
 *   weights broadcast from shared memory) into the pair's buffer
 *   B[head][row][key], -inf where the pair is not an edge; meanwhile the
 *   tile's K/V rows arrive by cp.async;
 *   barrier (K/V landed, B complete; OR of "V holds a NaN or Inf");
 *   S = Q.K^T + B: lane (head h of the warp's 4, t = lane%8) takes keys
 *   t, t+8, t+16, t+24 of the 4 rows (4 x 4 register tile); online softmax,
 *   the row max over the head's 8 lanes by shuffles; P back into B;
 *   O = O*alpha + P.V: the same lane owns columns 4t..4t+3 of head h;
 *   barrier (K/V and B free), the next tile's K/V copies start.
 * Each K element loaded feeds 4 rows (16 FMAs a 16-byte load), twice what
 * a warp of 2 rows and 8 heads gets: shared-memory wavefronts, not FMAs,
 * bounded that layout (ncu: L1 data pipe 65-72 % busy).
 *
 * The MLP's weights are staged from the layer's device memory into shared
 * memory (sgkc_mlp_stage) at every PCAP. Kernel parameters read by the
 * FFMAs from uniform registers took their wavefronts off the L1 pipe,
 * which limits xl, but a parameter is a copy that a forward captured in a
 * CUDA graph keeps: new weights (sgk_layer_set_weights_device) would not
 * reach it. At PCAP = 32 constants lost anyway: 5 KB is past what the
 * constant cache serves at full rate, and even b1 and W2 alone as
 * constants made mid and large slower.
 *
 * DM (the tuned-tiled-dmma variant, compute capability 9.x): the relation MLP
 * runs on the FP64 tensor cores instead (mlp_dmma.cuh), in groups of 16
 * pairs: lane (g, t) of the warp loads one float4 of features of keys
 * g and g + 8 of a group, the edge bits come from ballots of the lanes'
 * mask tests, and each lane stores the biases of its two pairs for heads
 * 2t and 2t + 1. Everything after the barrier is the same code. On the
 * H200 it is faster at P = 32 (large, mid) and slower at P = 16 (xl): the
 * fp32 <-> fp64 conversions and silu's MUFUs share one pipe, 16 results
 * an SM-clock, and all eight warps of a block are in their MLP at once.
 *
 * Q and K rows sit in shared memory unpadded, their 16-byte chunks permuted
 * inside each head (sgkc_ar_q/k) so that every load phase hits 8 distinct
 * bank groups. The next tile's pair features are prefetched into L2 while
 * this one runs.
 *
 * KS = 2 (grids of at most one block an SM, mid): a block of 16 warps in two
 * key groups, each with its own Q copy, K/V tiles, B buffers and named
 * barrier, group g taking tiles g, g + 2, ...; at the end group 1's
 * (O, m, l) is merged into group 0's through shared memory. Each scheduler
 * then has four warps instead of two to issue from (mid's 128 blocks of
 * one key group issued 0.43 a scheduler-cycle); at PCAP = 32 the MLP
 * weights are staged once for both groups. */
#ifndef SGK_CUDA_ATTN_ROWS_CUH
#define SGK_CUDA_ATTN_ROWS_CUH

#include "attn_tiled.cuh"
#include "cuda_layer.h"
#include "mlp_dmma.cuh"

#define SGKC_AR_NT 256
#define SGKC_AR_BQ 16 /* query rows of a block: 4 a warp pair */
#define SGKC_AR_BK 32 /* keys of a tile: 1 a lane */
#define SGKC_AR_D 256 /* 8 heads x 32 columns */
#define SGKC_AR_BRS 136 /* floats per head in a pair's B buffer: [4 rows][32] + 8 */
#define SGKC_AR_BLD (8 * SGKC_AR_BRS)

/* A key group's floats: its Q, K and V tiles and its B buffers */
#define SGKC_AR_GF ((SGKC_AR_BQ + 2 * SGKC_AR_BK) * SGKC_AR_D + (SGKC_AR_NT / 64) * SGKC_AR_BLD)

/* dm: the MLP runs on DMMA (mlp_dmma.cuh), its weights staged as fp64 */
__host__ __device__ constexpr size_t sgkc_ar_smem_floats(int pcap, int ks, bool dm)
{
    return (size_t)ks * SGKC_AR_GF + (dm ? 2 * sgkc_dm_doubles(pcap) : sgkc_mlp_floats(pcap, 8));
}

/* Where 16-byte chunk c (0..63; head c/8) of a row sits, as a float offset:
 * Q (a warp reads one row, 4 heads, chunk d of each): d ^ head;
 * K (lane (h, t) reads rows t + 8u, chunk d of head h): d ^ (row % 8).
 * V needs none: lane (h, t) reads chunk t of head h of one row. */
__device__ __forceinline__ int sgkc_ar_q(int c) { return ((c & ~7) | ((c ^ (c >> 3)) & 7)) * 4; }
__device__ __forceinline__ int sgkc_ar_k(int row, int c) { return ((c & ~7) | ((c ^ row) & 7)) * 4; }

template <int PCAP, int KS, bool DM>
__global__ void __launch_bounds__(SGKC_AR_NT * KS, 2 / KS) sgkc_attn_rows_kernel(sgkc_attn_args a)
{
    constexpr int NT = SGKC_AR_NT, BQ = SGKC_AR_BQ, BK = SGKC_AR_BK, D = SGKC_AR_D, RS = SGKC_AR_BRS;
    static_assert(KS == 1 || KS == 2, "one or two key groups");
    constexpr int R4 = PCAP / 4;
    static_assert(PCAP % 4 == 0 && PCAP <= 32, "features in registers");

    extern __shared__ __align__(16) float smem[];
    const int N = a.N, P = a.P;
    const int qt = blockIdx.x % a.qtiles;
    const int64_t b = blockIdx.x / a.qtiles;
    const int q0 = qt * BQ;

    /* key group g (threads 256 g ..) takes key tiles g, g + KS, ... */
    const int g = KS == 1 ? 0 : threadIdx.x / NT;
    float *Qs = smem + g * SGKC_AR_GF; /* [BQ][D], a copy a group */
    float *Ks = Qs + BQ * D;           /* [BK][D] */
    float *Vs = Ks + BK * D;           /* [BK][D] */
    float *Bb = Vs + BK * D;           /* per warp pair [8 heads][RS]: row r at 32 r */
    float *W1t = smem + KS * SGKC_AR_GF; /* sgkc_mlp_stage */
    double *Wd = reinterpret_cast<double *>(W1t); /* sgkc_dm_stage at DM */
    const float4 *b2s = reinterpret_cast<const float4 *>(W1t + sgkc_mlp_floats(PCAP, 8) - 8);

    const int tid = KS == 1 ? threadIdx.x : threadIdx.x % NT, lane = tid & 31, warp = tid >> 5;
    const int wp = warp >> 1, half = warp & 1; /* warp pair, which 4 heads */
    const int h = 4 * half + (lane >> 3), t = lane & 7;
    float *Bp = Bb + wp * SGKC_AR_BLD;
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;

    /* ---- prologue: MLP weights, Q tile, K/V tile 0 ---- */
    if constexpr (DM)
        sgkc_dm_stage<PCAP>(Wd, a, threadIdx.x, KS * NT);
    else
        sgkc_mlp_stage<PCAP, 8>(W1t, a, 0, 8, threadIdx.x, KS * NT);
    sgkc_grid_wait(); /* qkv is the previous kernel's output */
    for (int i = tid; i < BQ * (D / 4); i += NT) {
        const int r = i >> 6, c = i & 63;
        float *dst = Qs + r * D + sgkc_ar_q(c);
        if (q0 + r < N)
            sgkc_cp_async16(dst, qkv_b + (size_t)(q0 + r) * row3 + c * 4);
        else
            *reinterpret_cast<float4 *>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* This thread's K/V chunks: chunk tid % 64 of rows tid / 64 + 4m. It
     * checks the V ones it copied itself (its own cp.async writes are
     * visible to it after the wait). */
    constexpr int KVM = BK * (D / 4) / NT;
    const int kv_r0 = tid >> 6, kv_c = tid & 63;
    const int ko0 = kv_r0 * D + sgkc_ar_k(kv_r0, kv_c), ko1 = kv_r0 * D + sgkc_ar_k(kv_r0 + 4, kv_c);
    const int vo = kv_r0 * D + kv_c * 4; /* row + 4m: + 4mD */
    const float *kv_src = qkv_b + (size_t)kv_r0 * row3 + D + kv_c * 4;
    /* row m of this thread's chunks: K and V of key k0 + kv_r0 + 4m */
    auto kv_k = [&](int m) { return Ks + (m & 1 ? ko1 : ko0) + 4 * m * D; };
    auto kv_v = [&](int m) { return Vs + vo + 4 * m * D; };
    auto load_kv = [&](int k0) {
        /* A whole tile without a test a row: ptxas then issues its 16
         * copies in about 60 instructions a warp, against about 140 with
         * the tests, which shows at xl and large. Not with
         * two key groups (mid, whose groups load their one tile each before
         * the loop) nor DMMA, where it spills. */
        if (KS == 1 && !DM && k0 + BK <= N) {
            const float *src = kv_src + (size_t)k0 * row3;
#pragma unroll
            for (int m = 0; m < KVM; m++) {
                sgkc_cp_async16(kv_k(m), src + (size_t)(4 * m) * row3);
                sgkc_cp_async16(kv_v(m), src + (size_t)(4 * m) * row3 + D);
            }
            sgkc_cp_commit();
            return;
        }
#pragma unroll
        for (int m = 0; m < KVM; m++) {
            float *kd = kv_k(m), *vd = kv_v(m);
            if (k0 + kv_r0 + 4 * m < N) {
                const float *src = kv_src + (size_t)(k0 + 4 * m) * row3;
                sgkc_cp_async16(kd, src);
                sgkc_cp_async16(vd, src + D);
            } else {
                /* rows past N must be zero in V: 0 * garbage could be NaN */
                *reinterpret_cast<float4 *>(kd) = make_float4(0.f, 0.f, 0.f, 0.f);
                *reinterpret_cast<float4 *>(vd) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        sgkc_cp_commit();
    };
    /* 0 * v is NaN exactly when v is NaN or Inf */
    auto v_nonfinite_mine = [&]() {
        float z = 0.0f;
#pragma unroll
        for (int m = 0; m < KVM; m++) {
            const float4 v = *reinterpret_cast<const float4 *>(kv_v(m));
            z = fmaf(0.0f, v.x, z);
            z = fmaf(0.0f, v.y, z);
            z = fmaf(0.0f, v.z, z);
            z = fmaf(0.0f, v.w, z);
        }
        return z != z;
    };
    const int ktiles = (N + BK - 1) / BK;
    if (KS == 1 || g < ktiles)
        load_kv(g * BK);

    const int qp = q0 + 4 * wp;          /* the pair's rows: qp .. qp + 3 */
    const int qm = qp + 2 * half;        /* this warp's MLP rows: qm, qm + 1 */
    const float *q_lane = Qs + 4 * wp * D + h * 32;
    const float *k_lane = Ks + t * D + h * 32;
    const float *v_lane = Vs + h * 32 + 4 * t;
    float *b_lane = Bp + h * RS + t; /* row r, key t + 8u at + 32r + 8u */
    float O[4][4] = {}; /* row r, columns h*32 + 4t + c */
    float mrow[4] = {SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF}, lrow[4] = {};
    __syncthreads(); /* MLP weights in shared memory */

    /* P == PCAP with aligned rows: whole float4s, no checks */
    const bool pfull = a.pvec && P == PCAP;
    for (int kt = g; kt < ktiles; kt += KS) {
        const int k0 = kt * BK;
        /* pair index of (qm, 0), recomputed each tile: held across the loop
         * it costs PCAP = 32 a spill */
        const size_t pr0 = ((size_t)b * N + qm) * N;

        /* The group's next tile's features and mask rows into L2 (a line a
         * lane): the loads below then wait on L2, not HBM. */
        if (k0 + KS * BK < N) {
            const bool pf = lane * 32 < min(BK, N - k0 - KS * BK) * P; /* a row's tile: P <= 32 lines */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                if (qm + r >= N)
                    continue;
                const size_t pi = pr0 + (size_t)r * N + k0 + KS * BK;
                if (pf)
                    sgkc_prefetch_l2(a.pair + pi * P + lane * 32);
                if (lane == 0)
                    sgkc_prefetch_l2(a.mask_u8 ? (const void *)((const unsigned char *)a.mask + pi)
                                               : (const void *)((const float *)a.mask + pi));
            }
        }

        /* ---- relation MLP of pairs (qm + r, k0 + lane) -> B ---- */
        /* At PCAP = 32 the MLP needs the registers of O: O waits in the
         * 16 B slots this lane fills after the MLP (the pair's B is free
         * since the last barrier). At PCAP = 16 it fits without. */
        constexpr bool STASH = PCAP > 16;
        float *ost = Bp + (2 * half) * 32 + lane;
        auto stash_o = [&]() {
#pragma unroll
            for (int q = 0; q < 16; q++)
                ost[(q >> 1) * RS + (q & 1) * 32] = O[q >> 2][q & 3];
        };
        auto reload_o = [&]() {
#pragma unroll
            for (int q = 0; q < 16; q++)
                O[q >> 2][q & 3] = ost[(q >> 1) * RS + (q & 1) * 32];
        };
        if constexpr (DM) {
            /* lane j: pair (qm + r, k0 + j) an edge? Then the groups of
             * mlp_dmma.cuh: group G is row r = G / 2, keys 16 (G % 2) ..
             * + 15; lane (mg, mt) holds keys + mg and + mg + 8 of it. */
            const int mg = lane >> 2, mt = lane & 3;
            unsigned eb[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int kg = k0 + lane;
                eb[r] = __ballot_sync(0xffffffffu,
                                      qm + r < N && kg < N && sgkc_edge(a.mask, a.mask_u8, pr0 + (size_t)r * N + kg));
            }
            constexpr int K1 = PCAP / 16;
            /* Group G's features load LA groups ahead of its MMAs (0: just
             * before them). All four ahead at PCAP 16 and one at 32 were
             * no faster, and slower at mid and large. */
            constexpr int LA = PCAP > 16 ? 0 : 1;
            float4 F[4][2][K1];
            auto load_group = [&](int G, auto full) {
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    const int kk = 16 * (G & 1) + mg + 8 * s;
                    const bool e = (eb[G >> 1] >> kk) & 1u;
                    const size_t pi = pr0 + (size_t)(G >> 1) * N + k0 + kk;
#pragma unroll
                    for (int ks = 0; ks < K1; ks++) {
                        if (!e)
                            F[G][s][ks] = make_float4(0.f, 0.f, 0.f, 0.f);
                        else if constexpr (decltype(full)::value)
                            F[G][s][ks] = sgkc_ld4(a.pair + pi * PCAP + 16 * ks + 4 * mt);
                        else
                            F[G][s][ks] = sgkc_ld_feat4(a.pair + pi * P, 4 * ks + mt, P, a.pvec);
                    }
                }
            };
            if constexpr (STASH)
                stash_o();
            float res[4][4] = {}; /* no edge: only -inf is stored */
            auto mlp = [&](auto full) {
#pragma unroll
                for (int G = 0; G < (LA > 0 ? LA : 1); G++)
                    load_group(G, full);
#pragma unroll
                for (int G = 0; G < 4; G++) {
                    if (LA > 0 && G + LA < 4)
                        load_group(G + LA, full);
                    else if (LA == 0 && G > 0)
                        load_group(G, full);
                    sgkc_dm_group<PCAP>(F[G], Wd, lane, res[G]);
                }
            };
            if ((eb[0] | eb[1]) != 0u) {
                if (pfull) /* P and alignment known: no checks in the loads */
                    mlp(std::true_type{});
                else
                    mlp(std::false_type{});
            }
            if constexpr (STASH) {
                asm volatile("" ::: "memory");
                reload_o();
                __syncwarp(); /* a lane's B stores land in other lanes' O slots */
            }
#pragma unroll
            for (int G = 0; G < 4; G++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int kk = 16 * (G & 1) + mg + 8 * (i >> 1), hh = 2 * mt + (i & 1);
                    const bool e = (eb[G >> 1] >> kk) & 1u;
                    Bp[hh * RS + (2 * half + (G >> 1)) * 32 + kk] = e ? res[G][i] : SGKC_NEG_INF;
                }
        } else {
            float4 x[2][R4];
            bool edge[2];
            const int kg = k0 + lane;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int qg = qm + r;
                const size_t pi = pr0 + (size_t)r * N + kg;
                edge[r] = qg < N && kg < N && sgkc_edge(a.mask, a.mask_u8, pi);
                if (pfull) /* the checks fold away with P and vec known */
                    sgkc_ld_feats<R4>(x[r], a.pair + pi * PCAP, PCAP, true, edge[r]);
                else
                    sgkc_ld_feats<R4>(x[r], a.pair + pi * P, P, a.pvec, edge[r]);
            }
            float acc[2][8];
            if constexpr (STASH) {
                stash_o();
                asm volatile("" ::: "memory"); /* the reload below is from memory */
            }
            /* The sums start at b2: loaded here into the registers they
             * accumulate in, instead of added before each store of B (16
             * scalar loads whose shared address the compiler rebuilt, at 128
             * registers, from the CTA id each time). */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float4 u = b2s[0], v = b2s[1];
                acc[r][0] = u.x; acc[r][1] = u.y; acc[r][2] = u.z; acc[r][3] = u.w;
                acc[r][4] = v.x; acc[r][5] = v.y; acc[r][6] = v.z; acc[r][7] = v.w;
            }
            if (__any_sync(0xffffffffu, edge[0] || edge[1]))
                sgkc_mlp_regs<PCAP, 8, 2>(x, W1t, acc);
            if constexpr (STASH) {
                asm volatile("" ::: "memory");
                reload_o();
            }
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int hh = 0; hh < 8; hh++)
                    Bp[hh * RS + (2 * half + r) * 32 + lane] = edge[r] ? acc[r][hh] : SGKC_NEG_INF;
        }

        sgkc_cp_wait<0>();
        /* K/V of this tile landed, the pair's B complete */
        const bool v_nonfinite = sgkc_group_sync_or<KS, NT>(g, v_nonfinite_mine());

        /* ---- S = Q.K^T + B for keys t + 8u of head h, the pair's 4 rows ---- */
        float S[4][4] = {};
#pragma unroll 4
        for (int d4 = 0; d4 < 8; d4++) {
            float4 qv[4], kv[4];
#pragma unroll
            for (int r = 0; r < 4; r++)
                qv[r] = *reinterpret_cast<const float4 *>(q_lane + r * D + 4 * (d4 ^ h));
#pragma unroll
            for (int u = 0; u < 4; u++)
                kv[u] = *reinterpret_cast<const float4 *>(k_lane + 8 * u * D + 4 * (d4 ^ t));
            asm volatile("" ::: "memory"); /* all eight loads in flight before the first FMA */
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int u = 0; u < 4; u++)
                    sgkc_fma4(S[r][u], qv[r], kv[u]);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float *br = b_lane + 32 * r;
            float tmax = SGKC_NEG_INF;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                S[r][u] = sgkc_add_score(br[8 * u], S[r][u]);
                tmax = fmaxf(tmax, S[r][u]);
            }
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
            const float m_new = fmaxf(mrow[r], tmax);
            const float m_use = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            const float alpha = sgkc_ex2((mrow[r] - m_use) * SGKC_LOG2E);
            float l = 0.0f;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float p = sgkc_ex2((S[r][u] - m_use) * SGKC_LOG2E);
                br[8 * u] = p;
                l += p;
            }
            mrow[r] = m_new;
            lrow[r] = lrow[r] * alpha + l;
#pragma unroll
            for (int c = 0; c < 4; c++)
                O[r][c] *= alpha;
        }
        __syncwarp();

        /* ---- O += P.V over the tile's 32 keys ---- */
        auto pv = [&](auto guard) {
            constexpr bool G = decltype(guard)::value;
            const float *pl = Bp + h * RS;
#pragma unroll 4
            for (int j4 = 0; j4 < BK / 4; j4++) {
                float4 pr[4], vv[4];
#pragma unroll
                for (int r = 0; r < 4; r++)
                    pr[r] = *reinterpret_cast<const float4 *>(pl + 32 * r + 4 * j4);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    vv[e] = *reinterpret_cast<const float4 *>(v_lane + (4 * j4 + e) * D);
                asm volatile("" ::: "memory");
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float va[4] = {vv[e].x, vv[e].y, vv[e].z, vv[e].w};
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const float pe = e == 0 ? pr[r].x : e == 1 ? pr[r].y : e == 2 ? pr[r].z : pr[r].w;
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            O[r][c] = sgkc_pv<G>(pe, va[c], O[r][c]);
                    }
                }
            }
        };
        if (v_nonfinite)
            pv(sgkc_guarded{});
        else
            pv(sgkc_plain{});
        sgkc_group_sync<KS, NT>(g); /* K/V and B read by every warp of the group */
        if (kt + KS < ktiles)
            load_kv(k0 + KS * BK);
    }

    sgkc_grid_trigger();

    /* ---- two key groups: group 1's (O, m, l) merged into group 0's ---- */
    if constexpr (KS == 2) {
        float *st = smem + SGKC_AR_GF + BQ * D + tid; /* group 1's K tile, free now */
        if (g == 1) {
#pragma unroll
            for (int r = 0; r < 4; r++) {
#pragma unroll
                for (int c = 0; c < 4; c++)
                    st[(4 * r + c) * NT] = O[r][c];
                st[(16 + r) * NT] = mrow[r];
                st[(20 + r) * NT] = lrow[r];
            }
        }
        __syncthreads();
        if (g == 1)
            return;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float m1 = st[(16 + r) * NT];
            const float m_new = fmaxf(mrow[r], m1);
            const float m_use = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            const float a0 = sgkc_ex2((mrow[r] - m_use) * SGKC_LOG2E), a1 = sgkc_ex2((m1 - m_use) * SGKC_LOG2E);
            lrow[r] = lrow[r] * a0 + st[(20 + r) * NT] * a1;
#pragma unroll
            for (int c = 0; c < 4; c++)
                O[r][c] = O[r][c] * a0 + st[(4 * r + c) * NT] * a1;
        }
    }

    /* ---- ctx = O / l, l summed over the head's 8 lanes; 0 if no edge ---- */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        const int qg = qp + r;
        if (qg >= N)
            continue;
        const float il = l == 0.0f ? 0.0f : 1.0f / l;
        float *dst = a.ctx + ((size_t)b * N + qg) * D + h * 32 + 4 * t;
        *reinterpret_cast<float4 *>(dst) = make_float4(O[r][0] * il, O[r][1] * il, O[r][2] * il, O[r][3] * il);
    }
}

#endif
