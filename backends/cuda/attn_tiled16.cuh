/* The tiled variant's attention kernel for grids that the 32-query blocks of
 * attn_tiled.cuh would leave under one block per SM (the mid preset: 64
 * blocks on 132 SMs). Same math; 16-query blocks and a compacted edge list.
 * On the H200 it ran the mid preset's attention in about half the time of
 * attn_tiled.cuh; on the large and xl presets, where both fill the GPU, it
 * was slower (at 130 KB of shared memory only one block fits an SM, and
 * the mask and feature loads of each tile wait on memory), so it is used
 * only for small grids. One block owns (batch b, BQ query rows, a group of HG
 * heads) and walks the keys in tiles of BK. For each (query, key) pair that
 * is an edge it runs the relation MLP from pair_feats, so the (B,H,N,N) bias
 * and score tensors never exist in memory; q.k is added, and the tile is
 * folded into an online softmax and the P.V accumulator. ctx for the block's
 * rows and heads goes to the workspace; the output projection is the next
 * kernel.
 *
 * Per key tile:
 *   K/V rows start loading (cp.async) into shared memory;
 *   the mask of the tile's BQ*BK pairs is scanned: non-edges get -inf, edges
 *   are compacted into a list, so that masked pairs cost no MLP work;
 *   barrier; each thread runs the MLP for up to two listed pairs (features
 *   in registers, weights broadcast from shared memory) -> S;
 *   barrier; S += Q.K^T (4x4 register tiles; a thread's 4 keys are 8 apart,
 *   so a warp's K rows are consecutive: no bank conflicts), and a scan of
 *   the V tile for NaN/Inf;
 *   barrier (OR of the scan); online softmax, two threads per (head, query)
 *   row -> P^T;
 *   barrier; O = O*alpha + P.V (4x4 register tiles; keys of weight 0
 *   skipped where the V tile is not all finite); barrier.
 * Registers are held to 128 a thread so that two blocks could share an SM
 * where shared memory allows (D = 256 needs 130 KB: one block). */
#ifndef SGK_CUDA_ATTN_TILED16_CUH
#define SGK_CUDA_ATTN_TILED16_CUH

#include "attn_tiled.cuh"

#define SGKC_AT16_NT 256
#define SGKC_AT16_BQ 16
#define SGKC_AT16_BK 32


/* Shared memory of one block, in floats; ld is the padded row of Q/K/V. */
__host__ __device__ inline size_t sgkc_at16_smem_floats(int pcap, int hmax, int ld)
{
    const int BK = SGKC_AT16_BK, BQ = SGKC_AT16_BQ;
    return (size_t)BQ * ld + 2u * BK * ld + (size_t)hmax * BQ * (BK + 1) +
           (size_t)hmax * BK * (BQ + 4) + sgkc_mlp_floats(pcap, hmax) + 3u * hmax * BQ + BQ * BK +
           2 * SGKC_AT16_NT / 32 + 4;
}

template <int PCAP, int HMAX>
__global__ void __launch_bounds__(SGKC_AT16_NT, 2)
sgkc_attn_tiled16_kernel(sgkc_attn_args a)
{
    constexpr int NT = SGKC_AT16_NT, BQ = SGKC_AT16_BQ, BK = SGKC_AT16_BK, NW = NT / 32;
    constexpr int PPT = BQ * BK / NT; /* pairs per thread per tile */
    constexpr int R4 = PCAP / 4;
    /* With more than 16 features the two pairs of a thread run one after
     * the other, to hold registers to 128. */
    constexpr int PREG = PCAP <= 16 ? PPT : 1;
    constexpr bool PRE = PCAP == 0; /* the bias comes from the MLP pass (a.bias) */
    constexpr int LDS_ = BK + 1, LDP = BQ + 4;
    static_assert(PPT == 2 && BK == 32 && NT == 256, "tile shape assumed below");
    static_assert(HMAX % 4 == 0 && PCAP % 4 == 0, "vector widths");

    extern __shared__ __align__(16) float smem[];
    const int N = a.N, D = a.D, P = a.P, hd = a.hd;
    const int rank = (int)(blockIdx.x % (unsigned)a.ks);
    const int64_t tile = blockIdx.x / (unsigned)a.ks;
    const int g = (int)(tile % a.G);
    const int64_t rest = tile / a.G;
    const int qt = (int)(rest % a.qtiles);
    const int64_t b = rest / a.qtiles;
    const int q0 = qt * BQ;
    const int h0 = g * a.HG;
    const int nh = min(a.HG, a.H - h0);
    const int d0 = h0 * hd, DG = nh * hd;
    const int LD = ((DG + 3) & ~3) + 4;
    const bool v4 = a.qvec && (d0 % 4 == 0) && (DG % 4 == 0);

    float *Qs = smem;
    float *Ks = Qs + BQ * LD;          /* [BK][LD] */
    float *Vs = Ks + BK * LD;          /* [BK][LD] */
    float *Ss = Vs + BK * LD;          /* [HMAX][BQ][BK+1] */
    float *Pt = Ss + HMAX * BQ * LDS_; /* [HMAX][BK][BQ+4] */
    float *W1t = Pt + HMAX * BK * LDP; /* MLP weights, sgkc_mlp_stage */
    const float *b2s = W1t + sgkc_mlp_floats(PCAP, HMAX) - HMAX;
    float *Ms = W1t + sgkc_mlp_floats(PCAP, HMAX), *Ls = Ms + HMAX * BQ, *Al = Ls + HMAX * BQ;
    int *list = reinterpret_cast<int *>(Al + HMAX * BQ); /* [BQ*BK] edge pair ids */
    int *wcnt = list + BQ * BK;                          /* [2][NW] edges per warp */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;

    /* ---- prologue: weights, Q tile (zero padded), softmax state ---- */
    for (int i = tid; i < BQ * LD + 2 * BK * LD; i += NT)
        smem[i] = 0.0f;
    if constexpr (!PRE)
        sgkc_mlp_stage<PCAP, HMAX>(W1t, a, h0, nh, tid, NT);
    for (int i = tid; i < HMAX * BQ; i += NT) {
        Ms[i] = SGKC_NEG_INF;
        Ls[i] = 0.0f;
    }
    __syncthreads(); /* zero fill before the loads below overwrite it */
    sgkc_grid_wait(); /* qkv (and the bias) are earlier kernels' */
    for (int i = tid; i < BQ * DG; i += NT) {
        const int q = i / DG, d = i % DG;
        if (q0 + q < N)
            Qs[q * LD + d] = __ldg(qkv_b + (size_t)(q0 + q) * row3 + d0 + d);
    }

    float O[4][4] = {};

    int kb, ke;
    sgkc_attn_key_range((N + BK - 1) / BK, a.ks, rank, kb, ke);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;

        /* ---- K/V of this tile: in flight during the mask scan and the MLP ---- */
        if (v4) {
            const int c4 = DG / 4;
            for (int i = tid; i < BK * c4; i += NT) {
                const int k = i / c4, c = (i % c4) * 4;
                if (k0 + k < N) {
                    const float *src = qkv_b + (size_t)(k0 + k) * row3 + D + d0 + c;
                    sgkc_cp_async16(Ks + k * LD + c, src);
                    sgkc_cp_async16(Vs + k * LD + c, src + D);
                } else {
                    /* rows past N must be zero in V: 0 * garbage could be NaN */
                    *reinterpret_cast<float4 *>(Ks + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                    *reinterpret_cast<float4 *>(Vs + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
            sgkc_cp_commit();
        } else {
            for (int i = tid; i < BK * DG; i += NT) {
                const int k = i / DG, d = i % DG;
                const bool in = k0 + k < N;
                const float *src = qkv_b + (size_t)(k0 + k) * row3 + D + d0 + d;
                Ks[k * LD + d] = in ? __ldg(src) : 0.0f;
                Vs[k * LD + d] = in ? __ldg(src + D) : 0.0f;
            }
        }

        /* ---- mask scan: non-edges -> -inf, edges -> compacted list (for the
         * MLP; where PRE, edges take the pass's bias here and need no list) ---- */
        {
            [[maybe_unused]] int pos[PPT];
            bool ed[PPT];
#pragma unroll
            for (int s = 0; s < PPT; s++) {
                const int e = tid + s * NT, q = e / BK, k = e % BK;
                const int qg = q0 + q, kg = k0 + k;
                const size_t pi = ((size_t)b * N + qg) * N + kg;
                ed[s] = qg < N && kg < N && sgkc_edge(a.mask, a.mask_u8, pi);
                if (!ed[s]) {
                    for (int h = 0; h < nh; h++)
                        Ss[(h * BQ + q) * LDS_ + k] = SGKC_NEG_INF;
                } else if constexpr (PRE) {
                    float bv[HMAX];
                    sgkc_ld_bias<HMAX>(bv, a, b, h0, nh, qg, kg, true);
#pragma unroll
                    for (int h = 0; h < HMAX; h++)
                        if (h < nh)
                            Ss[(h * BQ + q) * LDS_ + k] = bv[h];
                }
                if constexpr (!PRE) {
                    const unsigned bal = __ballot_sync(0xffffffffu, ed[s]);
                    pos[s] = __popc(bal & ((1u << lane) - 1u));
                    if (lane == 0)
                        wcnt[s * NW + warp] = __popc(bal);
                }
            }
            if constexpr (!PRE) {
                __syncthreads();
                /* list order: every warp's first pairs, then every warp's second */
#pragma unroll
                for (int s = 0; s < PPT; s++) {
                    int base = 0;
                    for (int i = 0; i < s * NW + warp; i++)
                        base += wcnt[i];
                    if (ed[s])
                        list[base + pos[s]] = tid + s * NT;
                }
            }
        }
        if constexpr (!PRE)
            __syncthreads();

        /* ---- relation MLP for the listed edges ---- */
        if constexpr (!PRE) {
            int total = 0;
            for (int i = 0; i < PPT * NW; i++)
                total += wcnt[i];
            for (int s0 = 0; s0 < PPT; s0 += PREG) {
                if (s0 * NT >= total) /* uniform: nothing left for any thread */
                    break;
                float4 x[PREG][R4 > 0 ? R4 : 1];
                int pid[PREG];
#pragma unroll
                for (int s = 0; s < PREG; s++) {
                    const int idx = tid + (s0 + s) * NT;
                    pid[s] = idx < total ? list[idx] : -1;
                    const int q = max(pid[s], 0) / BK, k = max(pid[s], 0) % BK;
                    const float *src = a.pair + (((size_t)b * N + q0 + q) * N + k0 + k) * P;
                    sgkc_ld_feats<R4>(x[s], src, P, a.pvec, pid[s] >= 0);
                }
                bool any = false;
#pragma unroll
                for (int s = 0; s < PREG; s++)
                    any |= pid[s] >= 0;
                if (any) {
                    float acc[PREG][HMAX] = {};
                    sgkc_mlp_regs<PCAP, HMAX, PREG>(x, W1t, acc);
#pragma unroll
                    for (int s = 0; s < PREG; s++) {
                        if (pid[s] < 0)
                            continue;
                        const int q = pid[s] / BK, k = pid[s] % BK;
#pragma unroll
                        for (int h = 0; h < HMAX; h++)
                            if (h < nh)
                                Ss[(h * BQ + q) * LDS_ + k] = acc[s][h] + b2s[h];
                    }
                }
            }
        }
        if (v4)
            sgkc_cp_wait<0>();
        __syncthreads();

        /* ---- S += Q.K^T: 4 queries x keys {k4, k4+8, k4+16, k4+24} ---- */
        {
            const int ntile = nh * (BQ / 4) * (BK / 4);
            for (int t = tid; t < ntile; t += NT) {
                const int k4 = t % 8, q4 = (t / 8) % (BQ / 4), h = t / (8 * (BQ / 4));
                float s[4][4] = {};
                const float *qb = Qs + q4 * 4 * LD + h * hd;
                const float *kb = Ks + k4 * LD + h * hd;
                if ((hd & 3) == 0) {
#pragma unroll 1
                    for (int d = 0; d < hd; d += 4) {
                        float4 qa[4], ka[4];
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            qa[i] = *reinterpret_cast<const float4 *>(qb + i * LD + d);
                            ka[i] = *reinterpret_cast<const float4 *>(kb + i * 8 * LD + d);
                        }
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int j = 0; j < 4; j++)
                                sgkc_fma4(s[i][j], qa[i], ka[j]);
                    }
                } else {
#pragma unroll 1
                    for (int d = 0; d < hd; d++) {
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int j = 0; j < 4; j++)
                                s[i][j] = fmaf(qb[i * LD + d], kb[j * 8 * LD + d], s[i][j]);
                    }
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float *dst = Ss + (h * BQ + q4 * 4 + i) * LDS_ + k4 + 8 * j;
                        *dst = sgkc_add_score(*dst, s[i][j]);
                    }
            }
        }
        /* Does this tile's V hold a NaN or Inf (padding is zero)? It picks
         * the P.V form below; the check rides on this barrier. */
        const bool v_nonfinite = __syncthreads_or(sgkc_nonfinite_share(Vs, BK * LD, tid, NT));

        /* ---- online softmax: two threads per (head, query) row, 16 keys each ---- */
        for (int t = tid; t < 2 * nh * BQ; t += NT) { /* 2*nh*BQ is a multiple of 32 */
            const int row = t >> 1, half = t & 1;
            const int h = row / BQ, q = row % BQ;
            const float *sr = Ss + row * LDS_ + half * (BK / 2);
            float tmax = SGKC_NEG_INF;
#pragma unroll
            for (int k = 0; k < BK / 2; k++)
                tmax = fmaxf(tmax, sr[k]);
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            const float m_old = Ms[row];
            const float m_new = fmaxf(m_old, tmax);
            const float m_use = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            float l = 0.0f;
#pragma unroll
            for (int k = 0; k < BK / 2; k++) {
                const float p = expf(sr[k] - m_use);
                Pt[(h * BK + half * (BK / 2) + k) * LDP + q] = p;
                l += p;
            }
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            /* both halves read Ms[row]; the write below waits for the other's read */
            __syncwarp();
            if (half == 0) {
                const float alpha = expf(m_old - m_use);
                Ms[row] = m_new;
                Ls[row] = Ls[row] * alpha + l;
                Al[row] = alpha;
            }
        }
        __syncthreads();

        /* ---- O = O * alpha + P.V, 4 queries x 4 columns per thread ---- */
        auto pv_phase = [&](auto guard) {
            constexpr bool G = decltype(guard)::value;
            const int c4n = (DG + 3) / 4;
            const int t = tid;
            if (t < (BQ / 4) * c4n) {
                const int c0 = (t % c4n) * 4, q4 = t / c4n;
                if ((hd & 3) == 0) {
                    const int h = c0 / hd;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float al = Al[h * BQ + q4 * 4 + i];
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            O[i][c] *= al;
                    }
                    const float *pp = Pt + h * BK * LDP + q4 * 4;
#pragma unroll 4
                    for (int k = 0; k < BK; k++) {
                        const float4 pv = *reinterpret_cast<const float4 *>(pp + k * LDP);
                        const float4 vv = *reinterpret_cast<const float4 *>(Vs + k * LD + c0);
                        const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
                        const float va[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int c = 0; c < 4; c++)
                                O[i][c] = sgkc_pv<G>(pa[i], va[c], O[i][c]);
                    }
                } else {
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const int h = min(c0 + c, DG - 1) / hd;
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            O[i][c] *= Al[h * BQ + q4 * 4 + i];
#pragma unroll 1
                            for (int k = 0; k < BK; k++)
                                O[i][c] = sgkc_pv<G>(Pt[(h * BK + k) * LDP + q4 * 4 + i],
                                                     Vs[k * LD + c0 + c], O[i][c]);
                        }
                    }
                }
            }
        };
        if (v_nonfinite)
            pv_phase(sgkc_guarded{});
        else
            pv_phase(sgkc_plain{});
        __syncthreads();
    }

    if (a.ks > 1) {
        /* O into the K buffer (BK >= BQ rows), free after the last tile */
        const int c4n = (DG + 3) / 4;
        if (tid < (BQ / 4) * c4n) {
            const int c0 = (tid % c4n) * 4, q4 = tid / c4n;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (c0 + c < DG)
                        Ks[(q4 * 4 + i) * LD + c0 + c] = O[i][c];
        }
        sgkc_attn_merge<BQ, NT>(a, Ks, LD, Ms, Ls, rank, b, q0, d0, DG);
        return;
    }

    /* ---- ctx = O / l; a row with no edge has l == 0 and gets 0 ---- */
    {
        const int c4n = (DG + 3) / 4;
        const int t = tid;
        if (t < (BQ / 4) * c4n) {
            const int c0 = (t % c4n) * 4, q4 = t / c4n;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int qg = q0 + q4 * 4 + i;
                if (qg >= N)
                    continue;
                float *dst = a.ctx + ((size_t)b * N + qg) * D + d0;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    if (c0 + c >= DG)
                        continue;
                    const float l = Ls[((c0 + c) / hd) * BQ + q4 * 4 + i];
                    dst[c0 + c] = l == 0.0f ? 0.0f : O[i][c] / l;
                }
            }
        }
    }
}

#endif
