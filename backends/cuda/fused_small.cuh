/* The whole layer in one launch for small and mid-size graphs (Hopper only):
 * a thread-block cluster per batch entry, nothing intermediate in global
 * memory.
 *
 * The cluster has Ch x Cr blocks; block rank = hg * Cr + rg owns head group
 * hg (H/Ch heads, hs = D/Ch feature columns) and query-row slice rg
 * (rows_r rows). Work is split so that every block reads only its share of
 * the weights:
 *   1. LayerNorm of its rows -> Xs (shared).
 *   2. Relation MLP for a slice of pair rows (all C blocks split the N query
 *      rows), every head: each bias (or -inf where masked) is stored straight
 *      into the shared memory of the block that owns (head, row), through
 *      distributed shared memory.
 *   3. Q/K/V of its rows for its head group; K and V rows are pushed to every
 *      block of the same head group, so each holds all N keys.
 *   cluster barrier
 *   4. Scores = bias + q.k, softmax per row, ctx = P.V for its rows and
 *      heads (keys of weight 0 skipped when V holds a NaN or Inf); ctx is
 *      pushed to every block of the same row slice (into the space Xs used,
 *      which all of them are done with).
 *   cluster barrier
 *   5. out = nodes + ctx Wo^T for its rows and its hs output columns.
 * The weight slices of steps 3 and 5 are copied into shared memory with
 * cp.async, the first at kernel start (behind LayerNorm and the MLP), the
 * second while attention runs. */
#ifndef SGK_CUDA_FUSED_SMALL_CUH
#define SGK_CUDA_FUSED_SMALL_CUH

#include "kernel_common.cuh"
#include <cooperative_groups.h>

#define SGKC_FS_NT 512

struct sgkc_fused_args {
    const float *nodes, *pair;
    const void *mask;
    int mask_u8;
    const float *gamma, *beta, *wqkv_t, *wo_t, *w1, *b1, *w2t, *b2;
    float *out;
    int N, D, H, P, hd;
    float eps, scale;
    int Ch, Cr;  /* head groups x row slices = cluster size */
    int rows_r;  /* ceil(N / Cr) */
    int prow;    /* ceil(N / (Ch*Cr)): pair rows per block in step 2 */
    int pvec;    /* P % 4 == 0 and pair 16-byte aligned */
    int nvec;    /* nodes 16-byte aligned */
};

/* Layout of a block's shared memory, in floats. */
struct sgkc_fs_layout {
    int ldx, ldh, ldn, ldw;
    size_t xs, qs, ks, vs, bs, wc, w1, b1, w2, b2, total;
};

__host__ __device__ inline sgkc_fs_layout sgkc_fs_plan(int N, int D, int H, int P, int Ch,
                                                      int rows_r, int pcap, int hmax)
{
    sgkc_fs_layout l;
    const int hs = D / Ch, hpc = H / Ch;
    l.ldx = D + 4;
    l.ldh = hs + 4;
    l.ldn = N + 1;
    l.ldw = 3 * hs + 4;
    l.xs = 0;
    l.qs = l.xs + (size_t)rows_r * l.ldx;
    l.ks = l.qs + (size_t)rows_r * l.ldh;
    l.vs = l.ks + (size_t)N * l.ldh;
    l.bs = l.vs + (size_t)N * l.ldh;
    l.wc = (l.bs + (size_t)hpc * rows_r * l.ldn + 3) & ~(size_t)3;
    l.w1 = l.wc + (size_t)D * l.ldw; /* the Q/K/V weight slice, later Wo's */
    l.b1 = l.w1 + (size_t)P * pcap;
    l.w2 = l.b1 + (size_t)((P + 3) & ~3);
    l.b2 = l.w2 + (size_t)P * hmax;
    l.total = l.b2 + hmax;
    return l;
}

/* Copies weight columns into shared memory Ws (K rows, row stride ldw) with
 * cp.async: column c comes from (c / segw) * segstride + base + c % segw of
 * Bg (row stride ldb). All offsets are multiples of 4 floats. */
__device__ __forceinline__ void sgkc_fs_stage(float *Ws, int ldw, const float *Bg, int ldb, int K,
                                              int ncols, int segw, int segstride, int base)
{
    const int ncg = ncols / 4;
    for (int e = threadIdx.x; e < K * ncg; e += SGKC_FS_NT) {
        const int k = e / ncg, c = (e % ncg) * 4;
        const float *src = Bg + (size_t)k * ldb + (c / segw) * segstride + base + c % segw;
        const unsigned dst = (unsigned)__cvta_generic_to_shared(Ws + (size_t)k * ldw + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* C(M x ncols) = As(M x K) Ws(K x ncols), both in shared memory. epi(row,
 * col, float4) receives 4 consecutive columns. Each thread owns NTL tiles of
 * TM rows x 4 columns. */
template <int TM, int NTL, typename Epi>
__device__ __forceinline__ void sgkc_fs_gemm(const float *As, int lda, int M, int K, const float *Ws,
                                             int ldw, int ncols, Epi epi)
{
    const int tid = threadIdx.x;
    const int ncg = ncols / 4;
    const int ntiles = ((M + TM - 1) / TM) * ncg;
#pragma unroll
    for (int u = 0; u < NTL; u++) {
        const int t = tid + u * SGKC_FS_NT;
        if (t >= ntiles)
            continue;
        const int rt = t / ncg, cg = t % ncg;
        const float *arow[TM];
#pragma unroll
        for (int i = 0; i < TM; i++)
            arow[i] = As + (size_t)min(rt * TM + i, M - 1) * lda;
        float acc[TM][4];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[i][c] = 0.0f;
#pragma unroll 2
        for (int k = 0; k < K; k += 4) {
            float4 av[TM], bv[4];
#pragma unroll
            for (int i = 0; i < TM; i++)
                av[i] = *reinterpret_cast<const float4 *>(arow[i] + k);
#pragma unroll
            for (int j = 0; j < 4; j++)
                bv[j] = *reinterpret_cast<const float4 *>(Ws + (size_t)(k + j) * ldw + cg * 4);
#pragma unroll
            for (int i = 0; i < TM; i++) {
                const float ak[4] = {av[i].x, av[i].y, av[i].z, av[i].w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[i][0] = fmaf(ak[j], bv[j].x, acc[i][0]);
                    acc[i][1] = fmaf(ak[j], bv[j].y, acc[i][1]);
                    acc[i][2] = fmaf(ak[j], bv[j].z, acc[i][2]);
                    acc[i][3] = fmaf(ak[j], bv[j].w, acc[i][3]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < TM; i++)
            if (rt * TM + i < M)
                epi(rt * TM + i, cg * 4, make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    }
}

/* Which tile shape a GEMM of M rows and ncols columns runs with: 4-row tiles
 * when they keep at least half the threads busy, else 1-row tiles. */
__host__ __device__ inline bool sgkc_fs_tm4(int M, int ncols)
{
    const int ncg = ncols / 4;
    return ((M + 3) / 4) * ncg >= SGKC_FS_NT / 2 || M * ncg > 4 * SGKC_FS_NT;
}

template <int PCAP, int HMAX>
__global__ void __launch_bounds__(SGKC_FS_NT, 1) sgkc_fused_small_kernel(sgkc_fused_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    constexpr int NT = SGKC_FS_NT;
    constexpr int R4 = PCAP / 4;
    cg::cluster_group cluster = cg::this_cluster();
    /* Arrive now, wait just before the first write into another block's
     * shared memory: every block of the cluster has started by then, and the
     * barrier's latency hides behind the loads below. */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

    extern __shared__ __align__(16) float smem[];
    const int N = a.N, D = a.D, H = a.H, P = a.P, hd = a.hd;
    const int Ch = a.Ch, Cr = a.Cr, C = Ch * Cr;
    const int hs = D / Ch, hpc = H / Ch;
    const int rank = (int)cluster.block_rank();
    const int hg = rank / Cr, rg = rank % Cr;
    const int64_t b = blockIdx.x / C;
    const int rows_r = a.rows_r;
    const int r0 = rg * rows_r;
    const int nr = max(0, min(rows_r, N - r0));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const sgkc_fs_layout L = sgkc_fs_plan(N, D, H, P, Ch, rows_r, PCAP, HMAX);
    float *Xs = smem + L.xs, *Qs = smem + L.qs, *Ks = smem + L.ks, *Vs = smem + L.vs;
    float *Bs = smem + L.bs, *Wc = smem + L.wc;
    float *W1s = smem + L.w1, *b1s = smem + L.b1, *W2s = smem + L.w2, *b2s = smem + L.b2;

    const float *nodes_b = a.nodes + (size_t)b * N * D;

    /* ---- 0. start every load: Q/K/V weight slice and this block's node
     * rows (cp.async), MLP weights, this thread's pair features ---- */
    sgkc_fs_stage(Wc, L.ldw, a.wqkv_t, 3 * D, D, 3 * hs, hs, D, hg * hs);
    if (a.nvec) {
        const int c4 = D / 4;
        for (int e = tid; e < nr * c4; e += NT) {
            const int r = e / c4, c = (e % c4) * 4;
            const unsigned dst = (unsigned)__cvta_generic_to_shared(Xs + r * L.ldx + c);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                         "l"(nodes_b + (size_t)(r0 + r) * D + c));
        }
    } else {
        for (int e = tid; e < nr * D; e += NT)
            Xs[(e / D) * L.ldx + e % D] = __ldg(nodes_b + (size_t)r0 * D + e);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    /* V's padding columns, so that step 4 can scan whole rows for NaN/Inf */
    for (int j = tid; j < N; j += NT)
        *reinterpret_cast<float4 *>(Vs + (size_t)j * L.ldh + hs) = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = tid; i < P * PCAP; i += NT) {
        const int p = i / PCAP, r = i % PCAP;
        W1s[i] = r < P ? __ldg(a.w1 + p * P + r) : 0.0f;
    }
    for (int i = tid; i < P; i += NT)
        b1s[i] = __ldg(a.b1 + i);
    for (int i = tid; i < P * HMAX; i += NT) {
        const int p = i / HMAX, h = i % HMAX;
        W2s[i] = h < H ? __ldg(a.w2t + (size_t)p * H + h) : 0.0f;
    }
    for (int i = tid; i < HMAX; i += NT)
        b2s[i] = i < H ? __ldg(a.b2 + i) : 0.0f;

    const int pr0 = rank * a.prow;
    const int npairs = max(0, min(a.prow, N - pr0)) * N;
    auto load_pair = [&](int t, float4 *x) -> bool {
        const int i = pr0 + t / N, j = t % N;
        const size_t pi = ((size_t)b * N + i) * N + j;
        const bool edge = t < npairs && sgkc_edge(a.mask, a.mask_u8, pi);
        const float *src = a.pair + pi * P;
#pragma unroll
        for (int r4 = 0; r4 < R4; r4++) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (edge && r4 * 4 < P) {
                if (a.pvec) {
                    v = sgkc_ld4(src + r4 * 4);
                } else {
                    v.x = __ldg(src + r4 * 4);
                    if (r4 * 4 + 1 < P) v.y = __ldg(src + r4 * 4 + 1);
                    if (r4 * 4 + 2 < P) v.z = __ldg(src + r4 * 4 + 2);
                    if (r4 * 4 + 3 < P) v.w = __ldg(src + r4 * 4 + 3);
                }
            }
            x[r4] = v;
        }
        return edge;
    };
    float4 x[R4];
    bool edge = load_pair(tid, x);

    /* ---- 1. LayerNorm of this block's rows, in place ---- */
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    for (int r = warp; r < nr; r += NT / 32) {
        float *row = Xs + r * L.ldx;
        float s = 0.0f;
        for (int k = lane; k < D; k += 32)
            s += row[k];
        const float mean = sgkc_warp_sum(s) / (float)D;
        float v = 0.0f;
        for (int k = lane; k < D; k += 32) {
            const float t = row[k] - mean;
            v = fmaf(t, t, v);
        }
        const float rstd = 1.0f / sqrtf(sgkc_warp_sum(v) / (float)D + a.eps);
        for (int k = lane; k < D; k += 32)
            row[k] = fmaf((row[k] - mean) * rstd, __ldg(a.gamma + k), __ldg(a.beta + k));
    }

    /* ---- 2. relation MLP for pair rows [rank*prow, ...), pushed to owners ---- */
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    for (int t = tid; t < npairs; t += NT) {
        if (t != tid)
            edge = load_pair(t, x);
        float acc[HMAX];
#pragma unroll
        for (int h = 0; h < HMAX; h++)
            acc[h] = 0.0f;
        if (edge) {
#pragma unroll 1
            for (int p = 0; p < P; p++) {
                const float4 *w1r = reinterpret_cast<const float4 *>(W1s + p * PCAP);
                float pa[4] = {b1s[p], 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int r4 = 0; r4 < R4; r4++)
                    sgkc_fma4(pa[r4 & 3], w1r[r4], x[r4]);
                const float hv = sgkc_silu_fast((pa[0] + pa[1]) + (pa[2] + pa[3]));
                const float4 *w2r = reinterpret_cast<const float4 *>(W2s + p * HMAX);
#pragma unroll
                for (int h4 = 0; h4 < HMAX / 4; h4++) {
                    const float4 w = w2r[h4];
                    acc[4 * h4 + 0] = fmaf(w.x, hv, acc[4 * h4 + 0]);
                    acc[4 * h4 + 1] = fmaf(w.y, hv, acc[4 * h4 + 1]);
                    acc[4 * h4 + 2] = fmaf(w.z, hv, acc[4 * h4 + 2]);
                    acc[4 * h4 + 3] = fmaf(w.w, hv, acc[4 * h4 + 3]);
                }
            }
        }
        const int i = pr0 + t / N, j = t % N;
        const int rgd = i / rows_r, il = i - rgd * rows_r;
#pragma unroll
        for (int h = 0; h < HMAX; h++) {
            if (h >= H)
                break;
            float *bd = cluster.map_shared_rank(Bs, (h / hpc) * Cr + rgd);
            bd[((h % hpc) * rows_r + il) * L.ldn + j] = edge ? acc[h] + b2s[h] : SGKC_NEG_INF;
        }
    }
    __syncthreads(); /* normalized Xs visible to every thread */

    /* ---- 3. Q/K/V of this block's rows and head group ---- */
    {
        const float scale = a.scale;
        auto epi = [&](int r, int c, float4 v) {
            const int seg = c / hs, cc = c % hs;
            if (seg == 0) {
                v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale;
                *reinterpret_cast<float4 *>(Qs + r * L.ldh + cc) = v;
            } else {
                float *dst0 = seg == 1 ? Ks : Vs;
                for (int q = 0; q < Cr; q++) {
                    float *dst = cluster.map_shared_rank(dst0, hg * Cr + q);
                    *reinterpret_cast<float4 *>(dst + (size_t)(r0 + r) * L.ldh + cc) = v;
                }
            }
        };
        if (nr > 0) {
            if (sgkc_fs_tm4(nr, 3 * hs))
                sgkc_fs_gemm<4, 1>(Xs, L.ldx, nr, D, Wc, L.ldw, 3 * hs, epi);
            else
                sgkc_fs_gemm<1, 4>(Xs, L.ldx, nr, D, Wc, L.ldw, 3 * hs, epi);
        }
    }
    __syncthreads(); /* Wc free: bring in Wo's slice while attention runs */
    sgkc_fs_stage(Wc, L.ldw, a.wo_t, D, D, hs, hs, 0, hg * hs);
    cluster.sync(); /* biases, K and V complete everywhere */

    /* ---- 4. scores, softmax, ctx for (this block's rows, its heads) ---- */
    {
        /* a thread's 4 keys are nkg apart, so a warp reads consecutive K rows */
        const int nkg = (N + 3) / 4;
        const int ntile = hpc * nr * nkg;
        for (int t = tid; t < ntile; t += NT) {
            const int kg = t % nkg, il = (t / nkg) % nr, hl = t / (nkg * nr);
            const float *q = Qs + il * L.ldh + hl * hd;
            float s[4] = {0.f, 0.f, 0.f, 0.f};
            const float *kr[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                kr[j] = Ks + (size_t)min(kg + j * nkg, N - 1) * L.ldh + hl * hd;
            if ((hd & 3) == 0) {
                for (int d = 0; d < hd; d += 4) {
                    const float4 qv = *reinterpret_cast<const float4 *>(q + d);
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        sgkc_fma4(s[j], qv, *reinterpret_cast<const float4 *>(kr[j] + d));
                }
            } else {
#pragma unroll 1
                for (int d = 0; d < hd; d++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        s[j] = fmaf(q[d], kr[j][d], s[j]);
            }
            float *srow = Bs + (hl * rows_r + il) * L.ldn;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (kg + j * nkg < N)
                    srow[kg + j * nkg] = sgkc_add_score(srow[kg + j * nkg], s[j]);
        }
        /* Does V hold a NaN or Inf? It picks the P.V form below; the check
         * rides on this barrier. */
        const bool v_nonfinite = __syncthreads_or(sgkc_nonfinite_share(Vs, N * L.ldh, tid, NT));

        for (int row = warp; row < hpc * nr; row += NT / 32) {
            const int hl = row / nr, il = row % nr;
            float *srow = Bs + (hl * rows_r + il) * L.ldn;
            float m = SGKC_NEG_INF;
            for (int j = lane; j < N; j += 32)
                m = fmaxf(m, srow[j]);
            m = sgkc_warp_max(m);
            const float m_use = m == SGKC_NEG_INF ? 0.0f : m;
            float l = 0.0f;
            for (int j = lane; j < N; j += 32) {
                const float e = expf(srow[j] - m_use);
                srow[j] = e;
                l += e;
            }
            l = sgkc_warp_sum(l);
            const float inv = l == 0.0f ? 0.0f : 1.0f / l;
            for (int j = lane; j < N; j += 32)
                srow[j] *= inv;
        }
        __syncthreads();

        const int ncg = hs / 4;
        for (int t = tid; t < nr * ncg; t += NT) {
            const int il = t / ncg, c0 = (t % ncg) * 4;
            float o[4] = {0.f, 0.f, 0.f, 0.f};
            auto pv_row = [&](auto guard) {
                constexpr bool G = decltype(guard)::value;
                if ((hd & 3) == 0) {
                    const float *pr = Bs + ((c0 / hd) * rows_r + il) * L.ldn;
#pragma unroll 4
                    for (int j = 0; j < N; j++) {
                        const float p = pr[j];
                        const float4 v = *reinterpret_cast<const float4 *>(Vs + (size_t)j * L.ldh + c0);
                        o[0] = sgkc_pv<G>(p, v.x, o[0]);
                        o[1] = sgkc_pv<G>(p, v.y, o[1]);
                        o[2] = sgkc_pv<G>(p, v.z, o[2]);
                        o[3] = sgkc_pv<G>(p, v.w, o[3]);
                    }
                } else {
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const float *pr = Bs + (((c0 + c) / hd) * rows_r + il) * L.ldn;
#pragma unroll 1
                        for (int j = 0; j < N; j++)
                            o[c] = sgkc_pv<G>(pr[j], Vs[(size_t)j * L.ldh + c0 + c], o[c]);
                    }
                }
            };
            if (v_nonfinite)
                pv_row(sgkc_guarded{});
            else
                pv_row(sgkc_plain{});
            const float4 ov = make_float4(o[0], o[1], o[2], o[3]);
            for (int g = 0; g < Ch; g++) {
                float *dst = cluster.map_shared_rank(Xs, g * Cr + rg);
                *reinterpret_cast<float4 *>(dst + il * L.ldx + hg * hs + c0) = ov;
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    cluster.sync(); /* ctx rows complete in every block of the row slice; Wo staged */

    /* ---- 5. out = nodes + ctx Wo^T, this block's rows and hs columns ---- */
    if (nr > 0) {
        float *out_b = a.out + (size_t)b * N * D;
        auto epi = [&](int r, int c, float4 v) {
            const size_t o = (size_t)(r0 + r) * D + hg * hs + c;
            out_b[o + 0] = __ldg(nodes_b + o + 0) + v.x;
            out_b[o + 1] = __ldg(nodes_b + o + 1) + v.y;
            out_b[o + 2] = __ldg(nodes_b + o + 2) + v.z;
            out_b[o + 3] = __ldg(nodes_b + o + 3) + v.w;
        };
        if (sgkc_fs_tm4(nr, hs))
            sgkc_fs_gemm<4, 1>(Xs, L.ldx, nr, D, Wc, L.ldw, hs, epi);
        else
            sgkc_fs_gemm<1, 4>(Xs, L.ldx, nr, D, Wc, L.ldw, hs, epi);
    }
#endif
}

#endif
