/* Tiled attention with the relation MLP fused in (the "tiled" variant's
 * middle kernel). One block owns (batch b, BQ query rows, a group of HG
 * heads). It walks the keys in tiles of BK: for each (query, key) pair of the
 * tile it runs the relation MLP from pair_feats (so the (B,H,N,N) bias and
 * score tensors never exist in memory), adds q.k, and folds the tile into an
 * online softmax and the P.V accumulator. ctx for the block's rows and
 * heads goes to the workspace; the output projection is the next kernel.
 *
 * Per key tile: bias (registers: one thread per pair, pair_feats in
 * registers, MLP weights broadcast from shared memory) -> S; barrier;
 * S += Q.K^T (4x4 register tiles) and a scan of the V tile for NaN/Inf;
 * barrier (OR of the scan); softmax rows -> P^T, rescale factors; barrier;
 * O = O*alpha + P.V (4x4 register tiles; keys of weight 0 skipped where the
 * V tile is not all finite); barrier.
 * The next tile's pair_feats and mask are loaded into registers while the
 * current tile's last three phases run, and its K/V rows by cp.async into
 * the other half of a double buffer. */
#ifndef SGK_CUDA_ATTN_TILED_CUH
#define SGK_CUDA_ATTN_TILED_CUH

#include "kernel_common.cuh"

#define SGKC_AT_NT 256
#define SGKC_AT_BQ 32
#define SGKC_AT_DGMAX 256 /* widest head group (columns) a block owns */

struct sgkc_attn_args {
    const float *qkv; /* (B*N, 3D): q (pre-scaled by 1/sqrt(hd)) | k | v */
    const float *pair;
    const void *mask;
    int mask_u8;
    const float *w1, *b1, *w2t, *b2;
    const float *bias; /* PCAP 0 instances and attn_mma.cuh: the relation MLP's output, (B, H, N*N) (mlp_tc.cuh) */
    float *ctx; /* (B*N, D) */
    int N, D, H, P, hd;
    int HG, G, qtiles; /* heads per block, head groups, query tiles per batch */
    int pvec;          /* P % 4 == 0 and pair 16-byte aligned */
    int qvec;          /* D % 4 == 0 (workspace rows 16-byte aligned) */
    int ks;            /* attn_tiled, attn_tiled16: blocks of a cluster splitting the keys (>= 1) */
};

/* Split over keys (attn_tiled.cuh, attn_tiled16.cuh): where a block for
 * each (batch, query tile, head group) leaves SMs idle, the ks blocks of a
 * cluster take consecutive ranges of key tiles of one such tile (block
 * index = tile * ks + rank). Block rank's key tiles, of ktiles: */
__device__ __forceinline__ void sgkc_attn_key_range(int ktiles, int ks, int rank, int &kb, int &ke)
{
    const int per = (ktiles + ks - 1) / ks;
    kb = rank * per;
    ke = min(ktiles, kb + per);
}

/* The split's merge: each block has left its unnormalised O (rows q0 ..
 * q0 + BQ, its group's DG columns) in Os[q * ldo + d] and its softmax
 * state in Ms, Ls [head][BQ]. After a cluster barrier, block rank takes
 * elements rank, rank + ks, ... (strides of NT) and combines the ks
 * blocks' parts in rank order, m = max m_s, o = sum o_s e^(m_s - m), l
 * likewise, so the result does not depend on timing; a row with no edge
 * (l = 0) gets 0 and NaN scores give NaN, as unsplit. A second barrier keeps every block's shared
 * memory alive until the others have read it. */
template <int BQ, int NT, typename Args>
__device__ void sgkc_attn_merge(const Args &a, const float *Os, int ldo, const float *Ms, const float *Ls,
                                int rank, int64_t b, int q0, int d0, int DG)
{
    const int S = a.ks, N = a.N;
    sgkc_cluster_sync(S);
    for (int e = rank * NT + (int)threadIdx.x; e < BQ * DG; e += S * NT) {
        const int q = e / DG, d = e % DG, row = (d / a.hd) * BQ + q;
        if (q0 + q >= N)
            continue;
        float m = SGKC_NEG_INF;
        for (int p = 0; p < S; p++)
            m = fmaxf(m, *sgkc_cluster_peer(Ms + row, p, S));
        /* as the online softmax does: relative to 0 where no score is
         * finite, so that a block's NaN l (NaN scores) still reaches l */
        const float mu = m == SGKC_NEG_INF ? 0.0f : m;
        float l = 0.0f, o = 0.0f;
        for (int p = 0; p < S; p++) {
            const float w = expf(*sgkc_cluster_peer(Ms + row, p, S) - mu);
            l = fmaf(*sgkc_cluster_peer(Ls + row, p, S), w, l);
            o = fmaf(*sgkc_cluster_peer(Os + q * ldo + d, p, S), w, o);
        }
        a.ctx[((size_t)b * N + q0 + q) * a.D + d0 + d] = l == 0.0f ? 0.0f : o / l;
    }
    sgkc_cluster_sync(S);
}

__host__ __device__ constexpr int sgkc_at_bk(int pcap)
{
    return (pcap <= 32 ? 2 : 1) * SGKC_AT_NT / SGKC_AT_BQ;
}

/* The relation MLP's weights in shared memory, zero padded to PCAP so that
 * every loop over features and hidden units has a compile-time length:
 * W1t [PCAP r][PCAP j] = w1[j][r] (input-major), b1 [PCAP], W2 [PCAP j][HMAX]
 * (the block's heads h0.. only), b2 [HMAX]. Padded hidden units have zero
 * weights and bias, so silu(0) = 0 times a zero row of W2 adds nothing.
 *
 * Where sgkc_mlp_fold(PCAP), W1t and b1 are scaled by -log2(e) and W2 by
 * -ln(2), and the MLP takes silu as sgkc_silu_u, a multiply fewer a hidden
 * unit. It pays where the MLP is a larger share of the work (PCAP 16, xl)
 * and not at PCAP 32 (large), so it is on for PCAP 16 only. Stage and MLP
 * read the same switch; DESIGN.md has the measurements. */
__host__ __device__ constexpr bool sgkc_mlp_fold(int pcap)
{
    return pcap <= 16;
}
__host__ __device__ constexpr size_t sgkc_mlp_floats(int pcap, int hmax)
{
    return (size_t)pcap * pcap + pcap + (size_t)pcap * hmax + hmax;
}

template <int PCAP, int HMAX>
__device__ __forceinline__ void sgkc_mlp_stage(float *W1t, const sgkc_attn_args &a, int h0, int nh, int tid,
                                               int nt)
{
    constexpr float U = sgkc_mlp_fold(PCAP) ? SGKC_MLP_U : 1.0f, V = sgkc_mlp_fold(PCAP) ? SGKC_MLP_W2 : 1.0f;
    float *b1s = W1t + PCAP * PCAP, *W2s = b1s + PCAP, *b2s = W2s + PCAP * HMAX;
    const int P = a.P;
    for (int i = tid; i < PCAP * PCAP; i += nt) {
        const int r = i / PCAP, j = i % PCAP;
        W1t[i] = r < P && j < P ? __ldg(a.w1 + j * P + r) * U : 0.0f;
    }
    for (int i = tid; i < PCAP; i += nt)
        b1s[i] = i < P ? __ldg(a.b1 + i) * U : 0.0f;
    for (int i = tid; i < PCAP * HMAX; i += nt) {
        const int j = i / HMAX, h = i % HMAX;
        W2s[i] = j < P && h < nh ? __ldg(a.w2t + (size_t)j * a.H + h0 + h) * V : 0.0f;
    }
    for (int i = tid; i < HMAX; i += nt)
        b2s[i] = i < nh ? __ldg(a.b2 + h0 + i) : 0.0f;
}

/* acc[s][h] += sum_j silu(b1[j] + x_s . w1[j]) * w2[h][j] for NP pairs whose
 * features x (zero padded) sit in registers; the caller sets acc's start
 * (b2, or 0 and b2 added after).
 * Hidden units go 8 at a time with the inputs as the inner loop, so each
 * weight load (a broadcast float4) feeds 4*NP independent FMAs and 8*NP
 * accumulators are in flight: the per-unit dot product it replaces was a
 * chain of P dependent FMAs per pair, latency bound at 8 warps an SM. */
template <int PCAP, int HMAX, int NP>
__device__ __forceinline__ void sgkc_mlp_regs(const float4 (&x)[NP][PCAP / 4], const float *W1t,
                                              float (&acc)[NP][HMAX])
{
    constexpr int JC = 4;
    static_assert(PCAP % JC == 0 && HMAX % 4 == 0, "whole chunks");
    const float *b1s = W1t + PCAP * PCAP, *W2s = b1s + PCAP;
#pragma unroll 1
    for (int j0 = 0; j0 < PCAP; j0 += JC) {
        float hs[NP][JC];
        const float4 bj = *reinterpret_cast<const float4 *>(b1s + j0);
#pragma unroll
        for (int s = 0; s < NP; s++) {
            hs[s][0] = bj.x; hs[s][1] = bj.y; hs[s][2] = bj.z; hs[s][3] = bj.w;
        }
#pragma unroll
        for (int r4 = 0; r4 < PCAP / 4; r4++) {
            /* keeps the compiler from hoisting every weight load of the
             * unrolled loop (a register spill at PCAP = 32) */
            asm volatile("" ::: "memory");
            float4 w[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                w[u] = *reinterpret_cast<const float4 *>(W1t + (4 * r4 + u) * PCAP + j0);
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float xv[4] = {x[s][r4].x, x[s][r4].y, x[s][r4].z, x[s][r4].w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    hs[s][0] = fmaf(xv[u], w[u].x, hs[s][0]);
                    hs[s][1] = fmaf(xv[u], w[u].y, hs[s][1]);
                    hs[s][2] = fmaf(xv[u], w[u].z, hs[s][2]);
                    hs[s][3] = fmaf(xv[u], w[u].w, hs[s][3]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < JC; u++) {
            const float4 *w2r = reinterpret_cast<const float4 *>(W2s + (j0 + u) * HMAX);
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float hv = sgkc_mlp_fold(PCAP) ? sgkc_silu_u(hs[s][u]) : sgkc_silu_fast(hs[s][u]);
#pragma unroll
                for (int h4 = 0; h4 < HMAX / 4; h4++) {
                    const float4 w = w2r[h4];
                    acc[s][4 * h4 + 0] = fmaf(w.x, hv, acc[s][4 * h4 + 0]);
                    acc[s][4 * h4 + 1] = fmaf(w.y, hv, acc[s][4 * h4 + 1]);
                    acc[s][4 * h4 + 2] = fmaf(w.z, hv, acc[s][4 * h4 + 2]);
                    acc[s][4 * h4 + 3] = fmaf(w.w, hv, acc[s][4 * h4 + 3]);
                }
            }
        }
    }
}

/* Pair (qg, kg) of batch entry b's bias for the block's heads h0 .. h0 +
 * nh (zero past nh), from the MLP pass's head-major (B, H, N*N) output,
 * for the PCAP = 0 instances of the attention kernels. */
template <int HMAX>
__device__ __forceinline__ void sgkc_ld_bias(float (&v)[HMAX], const sgkc_attn_args &a, int64_t b, int h0, int nh,
                                             int qg, int kg, bool load)
{
    const size_t nn = (size_t)a.N * a.N;
    const float *src = a.bias + ((size_t)b * a.H + h0) * nn + (size_t)qg * a.N + kg;
#pragma unroll
    for (int h = 0; h < HMAX; h++)
        v[h] = load && h < nh ? __ldg(src + h * nn) : 0.0f;
}

/* Shared memory of one block, in floats; ld is the padded row of Q/K/V. */
__host__ __device__ inline size_t sgkc_at_smem_floats(int pcap, int hmax, int ld)
{
    const int BK = sgkc_at_bk(pcap), BQ = SGKC_AT_BQ;
    return (size_t)BQ * ld + 4u * BK * ld + (size_t)hmax * BQ * (BK + 1) +
           (size_t)hmax * BK * (BQ + 4) + sgkc_mlp_floats(pcap, hmax) + 3u * hmax * BQ;
}


template <int PCAP, int HMAX>
__global__ void __launch_bounds__(SGKC_AT_NT, 1) sgkc_attn_tiled_kernel(sgkc_attn_args a)
{
    constexpr int NT = SGKC_AT_NT, BQ = SGKC_AT_BQ;
    constexpr int PPT = PCAP <= 32 ? 2 : 1;
    constexpr int BK = sgkc_at_bk(PCAP);
    constexpr int R4 = PCAP / 4;
    constexpr bool PRE = PCAP == 0; /* the bias comes from the MLP pass (a.bias) */
    constexpr int MT = (BQ / 4) * (SGKC_AT_DGMAX / 4) / NT;
    constexpr int LDS_ = BK + 1, LDP = BQ + 4;
    static_assert(BQ * BK == PPT * NT, "pairs of a tile spread evenly");
    static_assert(BQ <= 4 * BK, "a split's O fits the K/V buffers");
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
    float *Ks = Qs + BQ * LD;      /* [2][BK][LD] */
    float *Vs = Ks + 2 * BK * LD;  /* [2][BK][LD] */
    float *Ss = Vs + 2 * BK * LD;  /* [HMAX][BQ][BK+1] */
    float *Pt = Ss + HMAX * BQ * LDS_; /* [HMAX][BK][BQ+4] */
    float *W1t = Pt + HMAX * BK * LDP; /* MLP weights, sgkc_mlp_stage */
    const float *b2s = W1t + sgkc_mlp_floats(PCAP, HMAX) - HMAX;
    float *Ms = W1t + sgkc_mlp_floats(PCAP, HMAX), *Ls = Ms + HMAX * BQ, *Al = Ls + HMAX * BQ;

    const int tid = threadIdx.x;
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;

    /* ---- prologue: weights, Q tile, zeroed K/V, softmax state ---- */
    for (int i = tid; i < BQ * LD + 4 * BK * LD; i += NT)
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

    auto load_kv = [&](int k0, int buf) {
        float *kd = Ks + buf * BK * LD, *vd = Vs + buf * BK * LD;
        if (v4) {
            const int c4 = DG / 4;
            for (int i = tid; i < BK * c4; i += NT) {
                const int k = i / c4, c = (i % c4) * 4;
                if (k0 + k < N) {
                    const float *src = qkv_b + (size_t)(k0 + k) * row3 + D + d0 + c;
                    sgkc_cp_async16(kd + k * LD + c, src);
                    sgkc_cp_async16(vd + k * LD + c, src + D);
                } else {
                    /* rows past N must be zero in V: 0 * garbage could be NaN */
                    *reinterpret_cast<float4 *>(kd + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                    *reinterpret_cast<float4 *>(vd + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
        } else {
            for (int i = tid; i < BK * DG; i += NT) {
                const int k = i / DG, d = i % DG;
                const bool in = k0 + k < N;
                const float *src = qkv_b + (size_t)(k0 + k) * row3 + D + d0 + d;
                kd[k * LD + d] = in ? __ldg(src) : 0.0f;
                vd[k * LD + d] = in ? __ldg(src + D) : 0.0f;
            }
        }
        sgkc_cp_commit();
    };

    float4 x[PPT][PRE ? 1 : R4];
    float bx[PPT][PRE ? HMAX : 1];
    bool edge[PPT];
    auto load_pairs = [&](int k0) {
#pragma unroll
        for (int s = 0; s < PPT; s++) {
            const int t = tid + s * NT, q = t / BK, k = t % BK;
            const int qg = q0 + q, kg = k0 + k;
            const size_t pi = ((size_t)b * N + qg) * N + kg;
            edge[s] = qg < N && kg < N && sgkc_edge(a.mask, a.mask_u8, pi);
            if constexpr (PRE)
                sgkc_ld_bias<HMAX>(bx[s], a, b, h0, nh, qg, kg, edge[s]);
            else
                sgkc_ld_feats<R4>(x[s], a.pair + pi * P, P, a.pvec, edge[s]);
        }
    };

    float O[MT][4][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                O[m][i][c] = 0.0f;

    int kb, ke;
    sgkc_attn_key_range((N + BK - 1) / BK, a.ks, rank, kb, ke);
    load_kv(kb * BK, 0);
    load_pairs(kb * BK);
    __syncthreads(); /* weights in shared memory */

    for (int kt = kb; kt < ke; kt++) {
        const int cur = (kt - kb) & 1;
        const int k0 = kt * BK;
        const float *Kc = Ks + cur * BK * LD, *Vc = Vs + cur * BK * LD;

        /* ---- relation MLP: bias of this thread's pairs for the group's heads
         * (read back from the pass where PRE) ---- */
        {
            float acc[PPT][HMAX] = {};
            if constexpr (PRE) {
#pragma unroll
                for (int s = 0; s < PPT; s++)
#pragma unroll
                    for (int h = 0; h < HMAX; h++)
                        acc[s][h] = bx[s][h];
            } else {
                bool any = false;
#pragma unroll
                for (int s = 0; s < PPT; s++)
                    any |= edge[s];
                if (__any_sync(0xffffffffu, any))
                    sgkc_mlp_regs<PCAP, HMAX, PPT>(x, W1t, acc);
            }
#pragma unroll
            for (int s = 0; s < PPT; s++) {
                const int t = tid + s * NT, q = t / BK, k = t % BK;
#pragma unroll
                for (int h = 0; h < HMAX; h++)
                    if (h < nh)
                        Ss[(h * BQ + q) * LDS_ + k] = edge[s] ? (PRE ? acc[s][h] : acc[s][h] + b2s[h]) : SGKC_NEG_INF;
            }
        }

        /* ---- next tile's inputs in flight while this one finishes ---- */
        if (kt + 1 < ke) {
            load_pairs(k0 + BK);
            load_kv(k0 + BK, cur ^ 1);
            sgkc_cp_wait<1>();
        } else {
            sgkc_cp_wait<0>();
        }
        __syncthreads();

        /* ---- S += Q.K^T, 4 queries x 4 keys of one head per thread ---- */
        {
            const int ntile = nh * (BQ / 4) * (BK / 4);
            for (int t = tid; t < ntile; t += NT) {
                const int k4 = t % (BK / 4), q4 = (t / (BK / 4)) % (BQ / 4), h = t / ((BK / 4) * (BQ / 4));
                float s[4][4] = {};
                const float *qb = Qs + q4 * 4 * LD + h * hd;
                const float *kb = Kc + k4 * 4 * LD + h * hd;
                if ((hd & 3) == 0) {
                    for (int d = 0; d < hd; d += 4) {
                        float4 qa[4], ka[4];
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            qa[i] = *reinterpret_cast<const float4 *>(qb + i * LD + d);
                            ka[i] = *reinterpret_cast<const float4 *>(kb + i * LD + d);
                        }
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int j = 0; j < 4; j++)
                                sgkc_fma4(s[i][j], qa[i], ka[j]);
                    }
                } else {
                    for (int d = 0; d < hd; d++) {
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int j = 0; j < 4; j++)
                                s[i][j] = fmaf(qb[i * LD + d], kb[j * LD + d], s[i][j]);
                    }
                }
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float *dst = Ss + (h * BQ + q4 * 4 + i) * LDS_ + k4 * 4 + j;
                        *dst = sgkc_add_score(*dst, s[i][j]);
                    }
            }
        }
        /* Does this tile's V hold a NaN or Inf (padding is zero)? It picks
         * the P.V form below; the check rides on this barrier. */
        const bool v_nonfinite = __syncthreads_or(sgkc_nonfinite_share(Vc, BK * LD, tid, NT));

        /* ---- online softmax over this tile, one (head, query) row per thread ---- */
        for (int row = tid; row < nh * BQ; row += NT) {
            const int h = row / BQ, q = row % BQ;
            const float *sr = Ss + row * LDS_;
            float tmax = SGKC_NEG_INF;
#pragma unroll
            for (int k = 0; k < BK; k++)
                tmax = fmaxf(tmax, sr[k]);
            const float m_old = Ms[row];
            const float m_new = fmaxf(m_old, tmax);
            const float m_use = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            const float alpha = expf(m_old - m_use);
            float l = Ls[row] * alpha;
#pragma unroll
            for (int k = 0; k < BK; k++) {
                const float p = expf(sr[k] - m_use);
                Pt[(h * BK + k) * LDP + q] = p;
                l += p;
            }
            Ms[row] = m_new;
            Ls[row] = l;
            Al[row] = alpha;
        }
        __syncthreads();

        /* ---- O = O * alpha + P.V, 4 queries x 4 columns per tile ---- */
        auto pv_phase = [&](auto guard) {
            constexpr bool G = decltype(guard)::value;
            const int c4n = (DG + 3) / 4;
            const int ntile = (BQ / 4) * c4n;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int t = tid + m * NT;
                if (t >= ntile)
                    continue;
                const int c0 = (t % c4n) * 4, q4 = t / c4n;
                if ((hd & 3) == 0) {
                    const int h = c0 / hd;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float al = Al[h * BQ + q4 * 4 + i];
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            O[m][i][c] *= al;
                    }
                    const float *pp = Pt + h * BK * LDP + q4 * 4;
#pragma unroll
                    for (int k = 0; k < BK; k++) {
                        const float4 pv = *reinterpret_cast<const float4 *>(pp + k * LDP);
                        const float4 vv = *reinterpret_cast<const float4 *>(Vc + k * LD + c0);
                        const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
                        const float va[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
                        for (int i = 0; i < 4; i++)
#pragma unroll
                            for (int c = 0; c < 4; c++)
                                O[m][i][c] = sgkc_pv<G>(pa[i], va[c], O[m][i][c]);
                    }
                } else {
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const int h = min(c0 + c, DG - 1) / hd;
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            O[m][i][c] *= Al[h * BQ + q4 * 4 + i];
                            for (int k = 0; k < BK; k++)
                                O[m][i][c] = sgkc_pv<G>(Pt[(h * BK + k) * LDP + q4 * 4 + i],
                                                        Vc[k * LD + c0 + c], O[m][i][c]);
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
        /* O into the K/V buffers (4 BK >= BQ rows), free after the last tile */
        const int c4n = (DG + 3) / 4;
        const int ntile = (BQ / 4) * c4n;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int t = tid + m * NT;
            if (t >= ntile)
                continue;
            const int c0 = (t % c4n) * 4, q4 = t / c4n;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (c0 + c < DG)
                        Ks[(q4 * 4 + i) * LD + c0 + c] = O[m][i][c];
        }
        sgkc_attn_merge<BQ, NT>(a, Ks, LD, Ms, Ls, rank, b, q0, d0, DG);
        return;
    }

    /* ---- ctx = O / l; a row with no edge has l == 0 and gets 0 ---- */
    {
        const int c4n = (DG + 3) / 4;
        const int ntile = (BQ / 4) * c4n;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int t = tid + m * NT;
            if (t >= ntile)
                continue;
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
                    dst[c0 + c] = l == 0.0f ? 0.0f : O[m][i][c] / l;
                }
            }
        }
    }
}

#endif
