/* C = op(A) W^T (+ residual) on the TF32 tensor cores, split in three
 * (3xTF32, tc_mma.cuh), for the layer's projections at any shape:
 *
 *   qkv = LayerNorm(nodes) [Wq;Wk;Wv]^T, columns n < scale_cols scaled;
 *   out = nodes + ctx Wo^T.
 *
 * A is (M, K) and W (Nc, K), both row-major and k-contiguous (W is
 * PyTorch's weight[out][in]), C and the residual (M, Nc). Any M, Nc, K >= 1.
 * Rows are K, K and Nc floats apart unless lda, ldw, ldc say otherwise
 * (the generated kernels' padded rows, which the training calls share).
 *
 * A block computes BM x BN outputs with warps of WM x WN; A and W tiles of
 * BK k stream through a ring of STAGES shared-memory slots by cp.async,
 * each slot issued STAGES - 1 k-tiles ahead. Rows past M or Nc and k past
 * K are zero-filled by the copy, so the MMA loop has no bounds tests. A
 * row is copied 16 bytes at a time where rows are 16-byte aligned (K % 4
 * == 0 and an aligned base), else 4.
 *
 * Fragments: within 16 k, lane (g, t) reads the four floats k = 4t .. 4t+3
 * of each of its rows (LDS.128); the first k8 MMA takes 4t, 4t+1 as its
 * k-slots t, t+4 and the second 4t+2, 4t+3 (a k permutation shared by A
 * and W, so the sums are unchanged). A slot row holds BK floats; for BK >=
 * 32 the 16-byte chunks of odd rows are swapped by halves (chunk c ^ 4),
 * so the eight lanes of a quarter-warp (rows g, g+1, chunks t) hit eight
 * distinct bank quads, and the copies (a quarter-warp writes one row)
 * stay conflict-free too. Each fragment value is split once and used by
 * the three MMAs of every tile it enters; a warp issues its tiles' MMAs of
 * one product before the next, so MT*NT MMAs are independent.
 *
 * Split over k (KSPLIT > 1, compute capability 9.0): where the output
 * tiles alone leave SMs idle, the KSPLIT blocks of a thread-block cluster
 * take consecutive k ranges of one output tile. Each leaves its partial
 * tile in its own shared memory; after a cluster barrier, block r sums
 * the r-th share of the tile's elements over the cluster's blocks in rank
 * order (through distributed shared memory) and writes them with the
 * epilogue. The sum's order is fixed, so results do not depend on timing,
 * and no partial goes through global memory.
 *
 * LayerNorm (LN): the block first takes its rows' statistics in two passes
 * over each row (mean, then centred squares; both of x - x0 with x0 the
 * row's first element, so their rounding follows the row's spread, not its
 * mean; split over k, the cluster's blocks take turns at the rows' groups
 * of four and read each other's), then, once a slot has landed, rewrites its A tile in place as
 * ((x - x0) - mean) rstd gamma[k] + beta[k] before any warp reads it. The
 * normalisation is never folded into W: with row means of 1e4 and spreads
 * of 1e-2 that cancels away every digit. */
#ifndef SGK_CUDA_TC_GEMM_CUH
#define SGK_CUDA_TC_GEMM_CUH

#include "tc_mma.cuh"

#include <string.h>

struct sgkc_tc_gemm_args {
    const float *A; /* (M, K) */
    const float *W; /* (Nc, K): weight[out][in] */
    float *C;       /* (M, Nc) */
    int64_t M;
    int Nc, K;
    const float *gamma, *beta; /* (K): LayerNorm on A's rows when gamma is not null */
    float eps;
    const float *residual; /* (M, Nc) added to the result when not null */
    int scale_cols;        /* columns n < scale_cols are multiplied by scale */
    float scale;
    int ksplit; /* blocks of a cluster that share an output tile's k range (>= 1) */
    /* wg_gemm.cuh with LayerNorm: sgkc_ln_stats_floats(M) floats of
     * scratch where a pass of its own takes the rows' statistics once for
     * every column block (null: that kernel does not take the call) */
    float *ln_stats;
    /* 16-bit layers: one TF32 pass (their contract, 1e-2, is far from what
     * TF32 keeps) instead of 3xTF32 */
    int one_pass;
    /* a 16-bit layer's output written as its dtype (k16 1: bf16, 2: f16)
     * at C16, rounded as the conversion kernels round, in place of C
     * (null: C as floats) */
    uint16_t *C16;
    int k16;
    /* floats from one row to the next of A, W, and C and the residual; 0:
     * K, K, Nc */
    int lda, ldw, ldc;
    /* W is not the layer's weights but the output of a kernel before: the
     * launch then does not overlap the kernel before it, whose tail the
     * copies of W ahead of the grid wait would otherwise race */
    int w_late;
};

/* The row lengths of g, its zeros replaced by what they stand for. */
static inline void sgkc_tc_rows(sgkc_tc_gemm_args &g)
{
    g.lda = g.lda ? g.lda : g.K;
    g.ldw = g.ldw ? g.ldw : g.K;
    g.ldc = g.ldc ? g.ldc : g.Nc;
}

/* The copy widths and store width the pointers and sizes allow. */
struct sgkc_tc_flags {
    int vec_a, vec_w; /* 16-byte rows: K and the row length % 4 == 0, an aligned base */
    int vec_out;      /* float2 stores: Nc and ldc even, C and residual 8-byte aligned */
    int vec_out4;     /* float4 stores: Nc and ldc % 4 == 0, C and residual 16-byte aligned */
    int x3;           /* 3xTF32 products; 0: the big halves' alone (one_pass) */
};

/* Output element o written as a 16-bit layer's dtype (a.C16), the
 * residual added where RES */
template <bool RES>
__device__ __forceinline__ void sgkc_tc_store16(const sgkc_tc_gemm_args &a, size_t o, float v)
{
    if constexpr (RES)
        v += __ldg(a.residual + o);
    a.C16[o] = sgkc_narrow16(v, a.k16 == 2);
}

/* Outputs (m, n) and (m, n + 1) of the MMA kernels' fragments: scaled
 * where the column is under a.scale_cols, the residual added where RES,
 * stored as one float2 where f allows, else each where its column is under
 * a.Nc. */
template <bool RES>
__device__ __forceinline__ void sgkc_tc_store2(const sgkc_tc_gemm_args &a, const sgkc_tc_flags &f, int64_t m, int n,
                                               float v0, float v1)
{
    float v[2] = {v0, v1};
    const size_t o = (size_t)m * a.ldc + n;
#pragma unroll
    for (int e = 0; e < 2; e++)
        if (n + e < a.scale_cols)
            v[e] *= a.scale;
    if (a.C16) {
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (n + e < a.Nc)
                sgkc_tc_store16<RES>(a, o + e, v[e]);
        return;
    }
    if (f.vec_out && n < a.Nc) {
        if constexpr (RES) {
            const float2 r = __ldg(reinterpret_cast<const float2 *>(a.residual + o));
            v[0] += r.x;
            v[1] += r.y;
        }
        *reinterpret_cast<float2 *>(a.C + o) = make_float2(v[0], v[1]);
    } else {
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (n + e < a.Nc) {
                if constexpr (RES)
                    v[e] += __ldg(a.residual + o + e);
                a.C[o + e] = v[e];
            }
    }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct sgkc_tc_cfg {
    static constexpr int NW = (BM / WM) * (BN / WN), NT = 32 * NW;
    /* blocks an SM the registers are sized for: 4 warps at 4 blocks (128
     * registers) spill, at 3 they do not */
    static constexpr int MINB = NW <= 4 ? 3 : 1;
    static constexpr int CPR = BK / 4;           /* 16-byte chunks a slot row */
    static constexpr int SLOT = (BM + BN) * BK; /* floats: A tile, then W tile */
    static constexpr size_t SMEM = ((size_t)STAGES * SLOT + 3 * BM) * sizeof(float);
    static constexpr int LDR = BN + 4; /* a partial tile's row, over the ring after the k loop */
    static_assert(BM * LDR <= STAGES * SLOT, "a partial tile fits the ring");
    static_assert(WM % 16 == 0 && WN % 8 == 0 && BM % WM == 0 && BN % WN == 0, "whole MMA tiles");
    static_assert(BK % 16 == 0 && (BK == 16 || BK % 32 == 0), "fragments take 16 k at a time");
    static_assert((BM * CPR) % NT == 0 && (BN * CPR) % NT == 0 && NT % CPR == 0, "whole chunks a thread");
    static_assert(BM % NW == 0 && (BM / NW) % 4 == 0, "LayerNorm rows: 4 at a time a warp");
    static_assert(STAGES >= 2, "a ring");
    /* float offset of chunk c of slot row r */
    __device__ static __forceinline__ int at(int r, int c) { return (r * CPR + (CPR >= 8 ? c ^ ((r & 1) << 2) : c)) * 4; }
};

/* Mean and rstd of R rows by one warp: two passes over each row from
 * global memory (the second mostly from L1), every row's loads of a pass in
 * flight together. Rows at or past M give zeros. */
template <int R>
__device__ __forceinline__ void sgkc_tc_row_stats(const sgkc_tc_gemm_args &a, int64_t m, bool vec, int lane,
                                                  float *s_shift, float *s_mean, float *s_rstd)
{
    const int K = a.K;
    const float *row[R];
    bool ok[R];
    float x0[R], s[R], q[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        ok[i] = m + i < a.M;
        row[i] = a.A + (size_t)(ok[i] ? m + i : 0) * a.lda;
        x0[i] = ok[i] ? __ldg(row[i]) : 0.0f;
        s[i] = q[i] = 0.0f;
    }
    /* f(i, x) over the row's elements, this lane's share */
    auto pass = [&](auto f) {
        if (vec) {
#pragma unroll 4
            for (int k = 4 * lane; k < K; k += 128)
#pragma unroll
                for (int i = 0; i < R; i++)
                    if (ok[i]) {
                        const float4 v = sgkc_ld4(row[i] + k);
                        f(i, v.x), f(i, v.y), f(i, v.z), f(i, v.w);
                    }
        } else {
#pragma unroll 8
            for (int k = lane; k < K; k += 32)
#pragma unroll
                for (int i = 0; i < R; i++)
                    if (ok[i])
                        f(i, __ldg(row[i] + k));
        }
    };
    pass([&](int i, float x) { s[i] += x - x0[i]; });
    sgkc_warp_sums<R>(s);
    float mean[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        mean[i] = s[i] / (float)K;
    pass([&](int i, float x) {
        const float d = (x - x0[i]) - mean[i];
        q[i] = fmaf(d, d, q[i]);
    });
    sgkc_warp_sums<R>(q);
    if (lane < R) {
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i == lane) {
                s_shift[i] = x0[i];
                s_mean[i] = mean[i];
                s_rstd[i] = ok[i] ? 1.0f / sqrtf(q[i] / (float)K + a.eps) : 0.0f;
            }
    }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool LN, bool RES>
__global__ void __launch_bounds__(sgkc_tc_cfg<BM, BN, BK, WM, WN, STAGES>::NT, sgkc_tc_cfg<BM, BN, BK, WM, WN, STAGES>::MINB)
sgkc_tc_gemm_kernel(sgkc_tc_gemm_args a, sgkc_tc_flags f)
{
    using cfg = sgkc_tc_cfg<BM, BN, BK, WM, WN, STAGES>;
    constexpr int NT = cfg::NT, NW = cfg::NW, CPR = cfg::CPR, SLOT = cfg::SLOT;
    constexpr int MT = WM / 16, NTL = WN / 8; /* MMA tiles of a warp */
    constexpr int CA = BM * CPR / NT, CW = BN * CPR / NT; /* chunks a thread copies a k-tile */

    extern __shared__ float4 tc_smem4[];
    float *ring = reinterpret_cast<float *>(tc_smem4);
    float *s_shift = ring + STAGES * SLOT, *s_mean = s_shift + BM, *s_rstd = s_mean + BM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    /* blockIdx.x = output row tile * ksplit + k range; the k ranges of a
     * tile are one cluster, the range its rank (host: every range has a
     * k-tile) */
    const int S = a.ksplit, rank = (int)(blockIdx.x % (unsigned)S);
    const int64_t M = a.M, m0 = (int64_t)(blockIdx.x / (unsigned)S) * BM;
    const int Nc = a.Nc, K = a.K, n0 = blockIdx.y * BN;
    const int KT_ALL = (K + BK - 1) / BK, KPER = (KT_ALL + S - 1) / S;
    const int kb = rank * KPER, KT = min(KT_ALL, kb + KPER) - kb; /* this block's k-tiles: kb .. kb + KT */
    /* a thread's chunks sit in one column c (NT % CPR == 0), rows r0 + i * NT / CPR */
    const int cc = tid % CPR, r0 = tid / CPR;

    /* Rows base .. base + BM (or BN) of an (nrows x K) matrix whose rows
     * are ld floats apart, k-tile kt, into a slot: zeros for rows at or
     * past nrows and for k past K. */
    auto copy = [&](float *dst, const float *src, int ld, int64_t base, int64_t nrows, int kt, bool vec,
                    auto nchunks) {
        constexpr int NCH = decltype(nchunks)::value;
        const int k = (kb + kt) * BK + 4 * cc;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            const int r = r0 + i * (NT / CPR);
            const bool rok = base + r < nrows;
            const float *p = src + (size_t)(rok ? base + r : 0) * ld;
            float *d = dst + cfg::at(r, cc);
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
    auto copy_a = [&](int kt) {
        copy(ring + (kt % STAGES) * SLOT, a.A, a.lda, m0, M, kt, f.vec_a, std::integral_constant<int, CA>());
    };
    auto copy_w = [&](int kt) {
        copy(ring + (kt % STAGES) * SLOT + BM * BK, a.W, a.ldw, n0, Nc, kt, f.vec_w,
             std::integral_constant<int, CW>());
    };

    /* W (the layer's weights) before the grid wait, A after: it may be the
     * previous kernel's output. Commit group s holds A's k-tile s (group 0
     * also all of W's prologue tiles). */
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++)
        if (s < KT)
            copy_w(s);
    sgkc_grid_wait();
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT)
            copy_a(s);
        sgkc_cp_commit();
    }

    /* LayerNorm statistics while the prologue's copies fly; a thread keeps
     * those of the rows it rewrites, and the columns' gamma and beta. */
    float ln_sh[LN ? CA : 1], ln_mu[LN ? CA : 1], ln_rs[LN ? CA : 1];
    if constexpr (LN) {
        /* row group q (rows 4q .. 4q + 3) is block q % S's, warp (q / S) % NW's */
        const bool vec = f.vec_a;
#pragma unroll 1
        for (int q = warp * S + rank; q < BM / 4; q += NW * S)
            sgkc_tc_row_stats<4>(a, m0 + 4 * q, vec, lane, s_shift + 4 * q, s_mean + 4 * q, s_rstd + 4 * q);
        sgkc_cluster_sync(S);
#pragma unroll
        for (int i = 0; i < CA; i++) {
            const int r = r0 + i * (NT / CPR), owner = (r / 4) % S;
            ln_sh[i] = *sgkc_cluster_peer(s_shift + r, owner, S);
            ln_mu[i] = *sgkc_cluster_peer(s_mean + r, owner, S);
            ln_rs[i] = *sgkc_cluster_peer(s_rstd + r, owner, S);
        }
    }

    /* gamma and beta of this thread's four columns of k-tile kt; 0 past K */
    float gm_next[4], bt_next[4];
    auto load_gb = [&](int kt) {
        const int k = (kb + kt) * BK + 4 * cc;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            gm_next[e] = LN && k + e < K ? __ldg(a.gamma + k + e) : 0.0f;
            bt_next[e] = LN && k + e < K ? __ldg(a.beta + k + e) : 0.0f;
        }
    };
    if constexpr (LN)
        load_gb(0);

    const int wm = warp / (BN / WN), wn = warp % (BN / WN);
    float acc[MT][NTL][4] = {};

#pragma unroll 1
    for (int kt = 0; kt < KT; kt++) {
        sgkc_cp_wait<STAGES - 2>();
        __syncthreads(); /* k-tile kt landed; slot (kt - 1) % STAGES is free */
        if (kt + STAGES - 1 < KT) {
            copy_w(kt + STAGES - 1);
            copy_a(kt + STAGES - 1);
        }
        sgkc_cp_commit();
        float *As = ring + (kt % STAGES) * SLOT;
        const float *Ws = As + BM * BK;

        if constexpr (LN) {
            float gm[4], bt[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                gm[e] = gm_next[e], bt[e] = bt_next[e];
            load_gb(kt + 1); /* the next k-tile's, long before they are needed */
#pragma unroll
            for (int i = 0; i < CA; i++) {
                float4 *p = reinterpret_cast<float4 *>(As + cfg::at(r0 + i * (NT / CPR), cc));
                float4 v = *p;
                auto ln = [&](float x, int e) { return fmaf(((x - ln_sh[i]) - ln_mu[i]) * ln_rs[i], gm[e], bt[e]); };
                v = make_float4(ln(v.x, 0), ln(v.y, 1), ln(v.z, 2), ln(v.w, 3));
                *p = v; /* gamma = beta = 0 past K: stays 0 against W's zeros */
            }
            __syncthreads();
        }

#pragma unroll
        for (int h = 0; h < BK / 16; h++) {
            float4 af[MT][2], bf[NTL];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int s = 0; s < 2; s++)
                    af[mt][s] = *reinterpret_cast<const float4 *>(As + cfg::at(wm * WM + 16 * mt + 8 * s + g, 4 * h + t));
#pragma unroll
            for (int nt = 0; nt < NTL; nt++)
                bf[nt] = *reinterpret_cast<const float4 *>(Ws + cfg::at(wn * WN + 8 * nt + g, 4 * h + t));
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uint32_t ab[MT][4], as[MT][4], bb[NTL][2], bs[NTL][2];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const float x[4] = {j ? af[mt][0].z : af[mt][0].x, j ? af[mt][1].z : af[mt][1].x,
                                        j ? af[mt][0].w : af[mt][0].y, j ? af[mt][1].w : af[mt][1].y};
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sgkc_split_tf32(x[e], ab[mt][e], as[mt][e]);
                    if (!f.x3) /* one pass keeps a computed NaN only rounded by sgkc_tf32 */
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            ab[mt][e] = sgkc_tf32(x[e]);
                }
#pragma unroll
                for (int nt = 0; nt < NTL; nt++) {
                    sgkc_split_tf32(j ? bf[nt].z : bf[nt].x, bb[nt][0], bs[nt][0]);
                    sgkc_split_tf32(j ? bf[nt].w : bf[nt].y, bb[nt][1], bs[nt][1]);
                }
                /* the small terms first, so the big product lands on them
                 * (a uniform branch: one instance serves both passes) */
                if (f.x3) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int nt = 0; nt < NTL; nt++)
                            sgkc_mma_tf32_16x8x8(acc[mt][nt], as[mt], bb[nt]);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int nt = 0; nt < NTL; nt++)
                            sgkc_mma_tf32_16x8x8(acc[mt][nt], ab[mt], bs[nt]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < NTL; nt++)
                        sgkc_mma_tf32_16x8x8(acc[mt][nt], ab[mt], bb[nt]);
            }
        }
    }
    sgkc_cp_wait<0>(); /* no copy outlives the block (the last groups are empty) */
    sgkc_grid_trigger();

    if (S > 1) {
        __syncthreads(); /* every warp is past its last read of the ring */
        float *red = ring;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int nt = 0; nt < NTL; nt++)
                    *reinterpret_cast<float2 *>(red + (wm * WM + 16 * mt + 8 * s + g) * cfg::LDR + wn * WN + 8 * nt +
                                                2 * t) = make_float2(acc[mt][nt][2 * s], acc[mt][nt][2 * s + 1]);
        sgkc_cluster_sync(S);
        /* float4 e of the tile, e = rank, rank + S, ...: its sum over the
         * cluster in rank order, then the epilogue */
        for (int e = rank * NT + tid; e < BM * BN / 4; e += S * NT) {
            const int r = e / (BN / 4), c = 4 * (e % (BN / 4));
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int p = 0; p < S; p++) {
                const float4 u = *reinterpret_cast<const float4 *>(sgkc_cluster_peer(red + r * cfg::LDR + c, p, S));
                v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
            }
            const int64_t m = m0 + r;
            const int n = n0 + c;
            if (m >= M || n >= Nc)
                continue;
            float x[4] = {v.x, v.y, v.z, v.w};
            const size_t o = (size_t)m * a.ldc + n;
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (n + i < a.scale_cols)
                    x[i] *= a.scale;
            if (a.C16) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (n + i < Nc)
                        sgkc_tc_store16<RES>(a, o + i, x[i]);
            } else if (f.vec_out4) {
                if constexpr (RES) {
                    const float4 q = __ldg(reinterpret_cast<const float4 *>(a.residual + o));
                    x[0] += q.x, x[1] += q.y, x[2] += q.z, x[3] += q.w;
                }
                *reinterpret_cast<float4 *>(a.C + o) = make_float4(x[0], x[1], x[2], x[3]);
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (n + i < Nc) {
                        if constexpr (RES)
                            x[i] += __ldg(a.residual + o + i);
                        a.C[o + i] = x[i];
                    }
            }
        }
        sgkc_cluster_sync(S); /* no block leaves while another reads its tile */
        return;
    }

    /* c[2s + e] of tile (mt, nt): row 16 mt + 8 s + g, column 8 nt + 2 t + e */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const int64_t m = m0 + wm * WM + 16 * mt + 8 * s + g;
            if (m >= M)
                continue;
#pragma unroll
            for (int nt = 0; nt < NTL; nt++)
                sgkc_tc_store2<RES>(a, f, m, n0 + wn * WN + 8 * nt + 2 * t, acc[mt][nt][2 * s], acc[mt][nt][2 * s + 1]);
        }
}

/* Whether the grid of the smaller instance (the larger one's is smaller
 * still) fits the launch limits, and the arguments are complete. */
static inline bool sgkc_tc_gemm_fits(const sgkc_tc_gemm_args &g)
{
    return g.A && g.W && g.C && g.M >= 1 && g.Nc >= 1 && g.K >= 1 && (g.M + 63) / 64 * 8 <= 0x7fffffff &&
           (g.Nc + 63) / 64 <= 65535 && (!g.gamma || g.beta);
}

static inline sgkc_tc_flags sgkc_tc_flags_of(const sgkc_tc_gemm_args &g)
{
    sgkc_tc_flags f;
    f.vec_a = g.K % 4 == 0 && g.lda % 4 == 0 && sgkc_aligned16(g.A);
    f.vec_w = g.K % 4 == 0 && g.ldw % 4 == 0 && sgkc_aligned16(g.W);
    f.vec_out = g.Nc % 2 == 0 && g.ldc % 2 == 0 && ((uintptr_t)g.C & 7u) == 0 &&
                (!g.residual || ((uintptr_t)g.residual & 7u) == 0);
    f.vec_out4 = g.Nc % 4 == 0 && g.ldc % 4 == 0 && sgkc_aligned16(g.C) && (!g.residual || sgkc_aligned16(g.residual));
    f.x3 = !g.one_pass;
    return f;
}

/* pdl: launched to overlap the kernel before it (the kernel waits for it
 * before reading A or writing C; compute capability 9.0). */
template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool LN, bool RES>
static cudaError_t sgkc_tc_gemm_launch_inst(const sgkc_tc_gemm_args &given, bool pdl, cudaStream_t s)
{
    sgkc_tc_gemm_args g = given;
    sgkc_tc_rows(g);
    using cfg = sgkc_tc_cfg<BM, BN, BK, WM, WN, STAGES>;
    cudaLaunchConfig_t lc;
    memset(&lc, 0, sizeof lc);
    lc.gridDim = dim3((unsigned)((g.M + BM - 1) / BM * g.ksplit), (unsigned)((g.Nc + BN - 1) / BN));
    lc.blockDim = dim3(cfg::NT);
    lc.dynamicSmemBytes = cfg::SMEM;
    lc.stream = s;
    cudaLaunchAttribute attr[2];
    memset(attr, 0, sizeof attr);
    unsigned n = 0;
    if (g.ksplit > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = (unsigned)g.ksplit;
        attr[n].val.clusterDim.y = attr[n].val.clusterDim.z = 1;
        n++;
    }
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    lc.attrs = attr;
    lc.numAttrs = n;
    return cudaLaunchKernelEx(&lc, sgkc_tc_gemm_kernel<BM, BN, BK, WM, WN, STAGES, LN, RES>, g, sgkc_tc_flags_of(g));
}

/* One tile instance; LayerNorm and the residual as the arguments ask. */
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
cudaError_t sgkc_tc_gemm_launch(const sgkc_tc_gemm_args &g, bool pdl, cudaStream_t s)
{
    if (g.gamma)
        return g.residual ? sgkc_tc_gemm_launch_inst<BM, BN, BK, WM, WN, STAGES, true, true>(g, pdl, s)
                          : sgkc_tc_gemm_launch_inst<BM, BN, BK, WM, WN, STAGES, true, false>(g, pdl, s);
    return g.residual ? sgkc_tc_gemm_launch_inst<BM, BN, BK, WM, WN, STAGES, false, true>(g, pdl, s)
                      : sgkc_tc_gemm_launch_inst<BM, BN, BK, WM, WN, STAGES, false, false>(g, pdl, s);
}

/* The two instances: 128 x 128 (8 warps of 64 x 32, 3 stages, 97.5 KB of
 * shared memory, about 200 registers: one block an SM) and 64 x 64 (4
 * warps of 32 x 32, 4 stages, 64.8 KB, at most 168 registers: three
 * blocks an SM on compute capability 9.0, two on 8.0). */
#define SGKC_TC_LARGE 128, 128, 32, 64, 32, 3
#define SGKC_TC_SMALL 64, 64, 32, 32, 32, 4

/* Lets every instance take its shared memory (past the default 48 KB);
 * once a device, at layer creation, since the limit is a device's. */
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
static cudaError_t sgkc_tc_gemm_prepare_tile()
{
    using cfg = sgkc_tc_cfg<BM, BN, BK, WM, WN, STAGES>;
    const void *const fns[] = {
        (const void *)sgkc_tc_gemm_kernel<BM, BN, BK, WM, WN, STAGES, false, false>,
        (const void *)sgkc_tc_gemm_kernel<BM, BN, BK, WM, WN, STAGES, false, true>,
        (const void *)sgkc_tc_gemm_kernel<BM, BN, BK, WM, WN, STAGES, true, false>,
        (const void *)sgkc_tc_gemm_kernel<BM, BN, BK, WM, WN, STAGES, true, true>,
    };
    for (const void *f : fns) {
        const cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* How many blocks of a cluster share an output tile's k range: the most,
 * up to 8, that keep the grid (tiles of them) within one wave of `slots`
 * blocks and give each block two k-tiles or more; then as few as give
 * each the same number of k-tiles, so that none is empty. One where the
 * tiles alone fill the SMs, and below compute capability 9.0 (no
 * clusters). */
static inline int sgkc_tc_ksplit(int64_t tiles, int K, int BK, int64_t slots, int sm_count, int cc_major)
{
    const int kt = (K + BK - 1) / BK;
    int s = 1;
    if (cc_major < 9 || tiles >= sm_count)
        return 1;
    while (s < 8 && tiles * 2 * s <= slots && kt >= 4 * s)
        s *= 2;
    const int per = (kt + s - 1) / s;
    return (kt + per - 1) / per;
}

/* The large tile where its tiles fill the SMs at least once (0), else the
 * small one (four times the blocks, three an SM), split over k (the count
 * returned, 1 for none) where even those leave SMs idle. */
static inline int sgkc_tc_gemm_plan(int64_t M, int Nc, int K, int sm_count, int cc_major)
{
    if ((M + 127) / 128 * ((Nc + 127) / 128) >= sm_count)
        return 0;
    return sgkc_tc_ksplit((M + 63) / 64 * ((Nc + 63) / 64), K, 32, 3 * (int64_t)sm_count, sm_count, cc_major);
}

static inline cudaError_t sgkc_tc_gemm(sgkc_tc_gemm_args g, int sm_count, int cc_major, cudaStream_t s)
{
    const bool pdl = cc_major >= 9 && !g.w_late;
    const int plan = sgkc_tc_gemm_plan(g.M, g.Nc, g.K, sm_count, cc_major);
    g.ksplit = plan > 0 ? plan : 1;
    return plan == 0 ? sgkc_tc_gemm_launch<SGKC_TC_LARGE>(g, pdl, s) : sgkc_tc_gemm_launch<SGKC_TC_SMALL>(g, pdl, s);
}

static inline cudaError_t sgkc_tc_gemm_prepare()
{
    const cudaError_t e = sgkc_tc_gemm_prepare_tile<SGKC_TC_LARGE>();
    return e != cudaSuccess ? e : sgkc_tc_gemm_prepare_tile<SGKC_TC_SMALL>();
}

/* Shared memory the larger instance needs: a device must allow it a block. */
static inline size_t sgkc_tc_gemm_smem() { return sgkc_tc_cfg<SGKC_TC_LARGE>::SMEM; }

#endif
