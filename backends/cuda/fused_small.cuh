/* The whole layer in one launch for small graphs (Hopper only): a
 * thread-block cluster per batch entry, nothing intermediate in global
 * memory.
 *
 * The cluster has Ch x Cr blocks; block rank = hg * Cr + rg owns head group
 * hg (H/Ch heads, hs = D/Ch feature columns) and query-row slice rg
 * (rows_r rows), so every block reads only its share of the weights.
 *
 * At these sizes the time is a chain of latencies, not arithmetic (the seed
 * preset does 9.5 MFLOP on 32 SMs), so the kernel is laid out to make the
 * chain short:
 *   0. every global load is issued at once: LayerNorm's weights, the Q/K/V
 *      weight slice and the MLP weights in one bulk copy of an image packed
 *      at layer creation in this kernel's shared-memory layout (two for the
 *      compiled-in shapes; before the wait for the previous kernel), node rows
 *      (cp.async), and each thread's pair features and mask value
 *      (registers). One memory latency in all.
 *   1. LayerNorm of its rows, from the raw rows (kept for the residual).
 *   2. Relation MLP for a slice of pair rows, each pair's hidden units split
 *      over adjacent lanes; each bias (or -inf where masked) goes straight
 *      into the shared memory of the block that owns (head, row). The
 *      compiled-in shapes run it on the warps step 3 leaves idle, beside
 *      step 3 (and at seed beside step 1).
 *   3. Q/K/V of its rows for its head group, split-K over lanes; K and V
 *      rows are pushed to every block of the same head group (the
 *      compiled-in shapes write their own in place and push them to the
 *      others; their weights come to registers: sgkc_fs_rw_gemm).
 *   wait until this block's biases, K and V have landed (an mbarrier that
 *   counts the pushed bytes; no cluster barrier)
 *   4. One warp per (row, head): scores in registers (a lane per key),
 *      softmax by shuffles, ctx = P.V with the weights broadcast by
 *      shuffles (a key of weight 0 adds nothing, even when V holds a NaN or
 *      Inf); ctx is pushed to every block of the same row slice.
 *   wait until this block's ctx rows have landed (a second such mbarrier)
 *   5. out = nodes + ctx Wo^T for its rows and its hs output columns; Wo's
 *      slice was copied in (one bulk copy) while step 4 ran.
 * No block-wide barrier sits inside step 4; steps 1-3 have one each. A
 * block exits only after every push into it has landed, so no block's
 * shared memory is written after it has gone. */
#ifndef SGK_CUDA_FUSED_SMALL_CUH
#define SGK_CUDA_FUSED_SMALL_CUH

#include "kernel_common.cuh"
#include "fused_gemm.cuh"
#include <cooperative_groups.h>


struct sgkc_fused_args {
    const float *nodes, *pair;
    const void *mask;
    int mask_u8;
    /* Per head group, the block's layer-constant shared memory as packed
     * at layer creation (fused_pack_images in variants.cu): img = [gamma |
     * beta | MLP weights | Q/K/V weight slice], img_floats apart; wo =
     * Wo's slice, D * ldw floats apart. */
    const float *img, *wo;
    int img_floats;
    /* The compiled-in shapes' Q/K/V and Wo slices in the order their
     * threads load them (sgkc_fs_rw_pack), D * 3hs and D * hs floats a head
     * group; null for other layers. */
    const float *rw, *rwo;
    float *out;
    /* a 16-bit layer's own buffers (t16 1: bf16, 2: f16), read and written
     * as they are, converted on load and store; nodes, pair and out are
     * then null. t16 0: the float buffers above. */
    const uint16_t *nodes16, *pair16;
    uint16_t *out16;
    int t16;
    int N, D, H, P, hd;
    float eps, scale;
    int Ch, Cr;  /* head groups x row slices = cluster size */
    int rows_r;  /* ceil(N / Cr) */
    int prow;    /* ceil(N / (Ch*Cr)): pair rows per block in step 2 */
    int lmsplit; /* log2 of the lanes per pair in step 2 (0 to 3) */
    int pvec;    /* P % 4 == 0 and pair 16-byte aligned (16-bit: 8-byte) */
    int nvec;    /* nodes 16-byte aligned (16-bit: and D % 8 == 0) */
};

/* log2 of the lanes per pair in step 2: as many as keep one pass over the
 * nt threads that run it, at most 8 and at most P. */
__host__ __device__ constexpr int sgkc_fs_lmsplit(int prow, int N, int P, int nt = SGKC_FS_NT)
{
    int l = 0;
    while (l < 3 && (2 << l) <= P && prow * N * (2 << l) <= nt)
        l++;
    return l;
}

/* Layout of a block's shared memory, in floats; every array starts on a
 * 16-byte boundary. */
struct sgkc_fs_layout {
    int ldx, ldh, ldn, ldw;
    size_t ns, xs, qs, ks, vs, bs, ps, cs, gb, w1, b1, w2, b2, wc, mb, total; /* [gb, mb): the image */
};

__host__ __device__ inline sgkc_fs_layout sgkc_fs_plan(int N, int D, int H, int P, int Ch,
                                                      int rows_r, int pcap, int hmax)
{
    auto up4 = [](size_t n) { return (n + 3) & ~(size_t)3; };
    sgkc_fs_layout l;
    const int hs = D / Ch, hpc = H / Ch;
    l.ldx = D + 4;
    l.ldh = hs + 4;
    l.ldn = N + 1;
    l.ldw = 3 * hs + 4;
    l.ns = 0;
    l.xs = l.ns + (size_t)rows_r * l.ldx;
    l.qs = l.xs + (size_t)rows_r * l.ldx;
    l.ks = l.qs + (size_t)rows_r * l.ldh;
    l.vs = l.ks + (size_t)N * l.ldh;
    l.bs = l.vs + (size_t)N * l.ldh;
    l.ps = up4(l.bs + (size_t)hpc * rows_r * l.ldn);
    l.cs = l.ps + (size_t)(SGKC_FS_NT / 32) * up4(N);
    l.gb = l.cs + (size_t)rows_r * l.ldx;
    l.w1 = l.gb + 2 * (size_t)D;
    l.b1 = l.w1 + (size_t)P * (pcap + 4);
    l.w2 = up4(l.b1 + P);
    l.b2 = l.w2 + (size_t)P * hmax;
    /* the Q/K/V weight slice, later Wo's; last, so that the compiled-in
     * shapes, which hold these weights in registers, copy [gb, wc) only */
    l.wc = up4(l.b2 + hmax);
    l.mb = l.wc + (size_t)D * l.ldw; /* four mbarriers (8 bytes each): weight copies, K/V and biases, ctx, image */
    l.total = l.mb + 8;
    return l;
}

/* SN..SCR > 0 compile one shape (N, D, H, P) and cluster (Ch x Cr) in: the
 * chain above is mostly integer work (addresses, bounds, divisions) issued
 * by 16 warps at a few cycles each, and constants remove most of it. With
 * SN = 0 every size comes from the arguments. */
template <int PCAP, int HMAX, int SN = 0, int SD = 0, int SH = 0, int SP = 0, int SCH = 0, int SCR = 0>
__global__ void __launch_bounds__(SGKC_FS_NT, 1) sgkc_fused_small_kernel(sgkc_fused_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    constexpr int NT = SGKC_FS_NT;
    constexpr int R4 = PCAP / 4;
    cg::cluster_group cluster = cg::this_cluster();
    SGKC_TL(0);
    extern __shared__ __align__(16) float smem[];
    constexpr bool FIX = SN > 0;
    const int N = FIX ? SN : a.N, D = FIX ? SD : a.D, H = FIX ? SH : a.H, P = FIX ? SP : a.P;
    const int hd = FIX ? SD / SH : a.hd;
    const int Ch = FIX ? SCH : a.Ch, Cr = FIX ? SCR : a.Cr, C = Ch * Cr;
    const int hs = D / Ch, hpc = H / Ch;
    const int rank = (int)cluster.block_rank();
    const int hg = rank / Cr, rg = rank % Cr;
    const int64_t b = blockIdx.x / C;
    const int rows_r = FIX ? (SN + SCR - 1) / SCR : a.rows_r;
    const int prow = FIX ? (SN + SCH * SCR - 1) / (SCH * SCR) : a.prow;
    const int r0 = rg * rows_r;
    const int nr = max(0, min(rows_r, N - r0));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const sgkc_fs_layout L = sgkc_fs_plan(N, D, H, P, Ch, rows_r, PCAP, HMAX);
    /* compiled-in shapes: rows a block, columns a head group, and the
     * threads of the Q/K/V and output GEMMs (sgkc_fs_rw_gemm) */
    constexpr int FROWS = FIX ? (SN + SCR - 1) / (SCR > 0 ? SCR : 1) : 0, FHS = FIX ? SD / SCH : 0;
    constexpr int QNT = 3 * FHS / 2 * SGKC_FS_RW_KS, ONT = FHS / 2 * SGKC_FS_RW_KS;
    static_assert(QNT % 32 == 0 && ONT % 32 == 0 && QNT < NT && FROWS <= NT / 32,
                  "whole warps, one left for the MLP, a row a warp");
    float *Ns = smem + L.ns, *Xs = smem + L.xs, *Qs = smem + L.qs, *Ks = smem + L.ks, *Vs = smem + L.vs;
    float *Bs = smem + L.bs, *Gs = smem + L.gb, *Wc = smem + L.wc;
    float *W1s = smem + L.w1, *b1s = smem + L.b1, *W2s = smem + L.w2, *b2s = smem + L.b2;
    float *Cs = smem + L.cs; /* ctx of this block's rows, all heads */

    /* mbarriers: bar counts the bulk copies (phase 0 the image, or at the
     * compiled-in shapes their Q/K/V slice, whose image has imgb; phase 1
     * Wo's slice); kvb the biases, K and V rows other blocks push here
     * (the compiled-in shapes write their own K and V rows in place);
     * ctxb the ctx columns. Each receiver expects its bytes before any
     * block can push (the cluster wait below orders the two). */
    unsigned long long *bar = reinterpret_cast<unsigned long long *>(smem + L.mb), *kvb = bar + 1, *ctxb = bar + 2,
                       *imgb = bar + 3;
    if (tid == 0) {
        const unsigned kv_bytes = (unsigned)((2 * (FIX ? N - nr : N) * hs + hpc * nr * N) * sizeof(float));
        const unsigned ctx_bytes = (unsigned)(nr * D * sizeof(float));
#pragma unroll
        for (int i = 0; i < 4; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(sgkc_smem_addr(bar + i)) : "memory");
        sgkc_mbar_expect(kvb, kv_bytes);
        sgkc_mbar_expect(ctxb, ctx_bytes);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        /* ---- 0. every load at once ----
         * The layer's weights first: constants, they need not wait for the
         * previous kernel. Issued here, before the cluster arrive, whose
         * predicate is a kernel-parameter load of its own: after it, the
         * copies' parameter loads missed the constant cache one after the
         * other, and the copies left about 800 cycles after entry. */
        const float *img = a.img + (size_t)hg * a.img_floats;
        if constexpr (FIX) {
            /* gamma, beta and the MLP weights (what LayerNorm and the MLP
             * wait for, 2.5 KB at seed) apart from the Q/K/V slice, in its
             * threads' order (a.rw), that only the GEMM waits for */
            sgkc_bulk_load(Gs, img, (unsigned)((L.wc - L.gb) * sizeof(float)), imgb);
            sgkc_bulk_load(Wc, a.rw + (size_t)hg * SD * 3 * FHS, (unsigned)(SD * 3 * FHS * sizeof(float)), bar);
        } else {
            sgkc_bulk_load(Gs, img, (unsigned)((L.mb - L.gb) * sizeof(float)), bar);
        }
    }
    /* Arrive now, wait just before the first push into another block:
     * every block of the cluster has started and set up its mbarriers by
     * then, and the barrier's latency hides behind the loads below. */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    /* The next call's kernel may be launched now: its blocks take SMs this
     * grid leaves idle and wait (below) until this one has finished. */
    sgkc_grid_trigger();

    const float *nodes_b = a.t16 ? nullptr : a.nodes + (size_t)b * N * D;
    const bool f16 = a.t16 == 2;
    SGKC_TL(21);
    sgkc_grid_wait(); /* the inputs may be the previous kernel's output */
    SGKC_TL(22);
    if (a.t16) {
        /* 16-bit rows: this block's, contiguous in global memory, copied
         * as they are into Xs (free until LayerNorm), widened into Ns once
         * they land (below); else loaded and widened here */
        const uint16_t *src = a.nodes16 + ((size_t)b * N + r0) * D;
        if (a.nvec) {
#pragma unroll 1
            for (int e = tid; e < nr * D / 8; e += NT)
                sgkc_cp_async16(Xs + 4 * e, src + 8 * e);
        } else {
#pragma unroll 1
            for (int e = tid; e < nr * D; e += NT) {
                const int r = e / D;
                Ns[r * L.ldx + e - r * D] = sgkc_widen16(__ldg(src + e), f16);
            }
        }
    } else if (a.nvec) {
        const int c4 = D / 4;
#pragma unroll 1
        for (int e = tid; e < nr * c4; e += NT) {
            const int r = e / c4, c = (e - r * c4) * 4;
            sgkc_cp_async16(Ns + r * L.ldx + c, nodes_b + (size_t)(r0 + r) * D + c);
        }
    } else {
#pragma unroll 1
        for (int e = tid; e < nr * D; e += NT) {
            const int r = e / D;
            sgkc_cp_async4(Ns + r * L.ldx + e - r * D, nodes_b + (size_t)r0 * D + e);
        }
    }
    sgkc_cp_commit();

    /* Pair w of step 2 is (pair w / S, hidden slice w % S); its mask and
     * features are loaded together, with no dependence between them: the
     * mask's bits are tested where the MLP starts, not here, so that the
     * feature loads issue before the mask value arrives.
     * Compiled-in shapes: step 2 runs on the warps the Q/K/V GEMM leaves
     * idle (from MW0 on) while warps 0 .. MW0 - 1 run step 3 (at seed,
     * from when the MLP weights land: beside step 1 too); its biases are
     * needed only by step 4. Other shapes: every warp runs steps 1, 2 and
     * 3 in turn. */
    constexpr int MW0 = FIX ? QNT / 32 : 0, MNT = NT - 32 * MW0;
    const int mt = tid - 32 * MW0; /* this thread's index among step 2's (< 0: none) */
    const int lS = FIX ? sgkc_fs_lmsplit((SN + SCH * SCR - 1) / (SCH * SCR), SN, SP, MNT) : a.lmsplit;
    const int S = 1 << lS;
    const int pr0 = rank * prow;
    const int npairs = max(0, min(prow, N - pr0)) * N;
    const int mtotal = prow * N * S; /* the same for every block: whole lane groups */
    auto load_pair = [&](int w, float4(&x)[R4]) -> unsigned {
        const int t = w >> lS;
        const bool valid = t < npairs;
        const int ti = t / N;
        const int i = pr0 + ti, j = t - ti * N;
        const size_t pi = ((size_t)b * N + i) * N + j;
        const unsigned m = valid ? sgkc_mask_bits(a.mask, a.mask_u8, pi) : 0u;
        if (a.t16) {
#pragma unroll
            for (int r4 = 0; r4 < R4; r4++)
                x[r4] = valid ? sgkc_ld_feat4_16(a.pair16 + pi * P, r4, P, a.pvec, f16) : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
            sgkc_ld_feats<R4>(x, a.pair + pi * P, P, a.pvec, valid);
        }
        return m;
    };
    float4 x[R4];
    unsigned mbits = 0u;
    if (mt >= 0)
        mbits = load_pair(mt, x);
    SGKC_TL(1);
    sgkc_cp_wait<0>();
    __syncthreads(); /* also orders the mbarrier's initialisation before the waits */
    if (a.t16 && a.nvec) { /* the 16-bit rows copied into Xs, widened into Ns */
        const uint16_t *raw = reinterpret_cast<const uint16_t *>(Xs);
#pragma unroll 1
        for (int e = tid; e < nr * D / 8; e += NT) {
            const uint4 u = *reinterpret_cast<const uint4 *>(raw + 8 * e);
            const int r = 8 * e / D, c = 8 * e - r * D;
            float4 *dst = reinterpret_cast<float4 *>(Ns + r * L.ldx + c);
            dst[0] = sgkc_widen16x4(make_uint2(u.x, u.y), f16);
            dst[1] = sgkc_widen16x4(make_uint2(u.z, u.w), f16);
        }
        __syncthreads(); /* Ns complete, Xs free for LayerNorm */
    }
    SGKC_TL(2);

    /* ---- 1. LayerNorm of this block's rows: Ns -> Xs ----
     * Normalized before gamma and beta arrive: the node rows land well
     * before the bulk copy that brings gamma and beta with the weights, and
     * the statistics' shuffle chains fill that wait. Each warp then scales
     * its own rows; the rounding is that of fmaf(((x - x0) - mean) * rstd, g, b).
     * Compiled-in shapes: a row a warp, D / 32 values a lane held in
     * registers; each lane's mean and sum of centred squares are merged
     * pairwise over the warp (equal counts: mean (ma + mb) / 2, M2a + M2b
     * + (mb - ma)^2 n / 2), one chain of 5 rounds instead of two passes
     * of 5 each (dev/ln_stats_sim.py). Both paths work on the row shifted
     * by its first element, so that x - mean rounds relative to the row's
     * spread, not to |mean| (kernels/relation.sgk, layer_norm). */
    if constexpr (FIX && SD % 32 == 0) {
        constexpr int KPL = SD / 32;
        float xv[KPL];
        if (warp < nr) {
            const float *row = Ns + warp * L.ldx;
            const float x0 = row[0];
            float m = 0.0f, q = 0.0f;
#pragma unroll
            for (int u = 0; u < KPL; u++) {
                xv[u] = row[lane + 32 * u] - x0;
                m += xv[u];
            }
            m *= 1.0f / KPL;
#pragma unroll
            for (int u = 0; u < KPL; u++) {
                const float t = xv[u] - m;
                q = fmaf(t, t, q);
            }
            float n = 0.5f * KPL;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1, n *= 2.0f) {
                const float mo = __shfl_xor_sync(0xffffffffu, m, o), qo = __shfl_xor_sync(0xffffffffu, q, o);
                const float d = mo - m; /* the partner's is -d: the same square */
                m = 0.5f * (m + mo);
                q = fmaf(d * d, n, q + qo);
            }
            const float rstd = rsqrtf(q * (1.0f / SD) + a.eps);
#pragma unroll
            for (int u = 0; u < KPL; u++)
                xv[u] = (xv[u] - m) * rstd;
        }
        SGKC_TL(14);
        sgkc_mbar_wait(imgb, 0); /* gamma, beta (and the MLP weights) */
        if (warp < nr) {
#pragma unroll
            for (int u = 0; u < KPL; u++) {
                const int k = lane + 32 * u;
                Xs[warp * L.ldx + k] = fmaf(xv[u], Gs[k], Gs[SD + k]);
            }
        }
    } else {
#pragma unroll 1
        for (int r = warp; r < nr; r += NT / 32) {
            const float *row = Ns + r * L.ldx;
            float x0, mean, rstd;
            sgkc_row_stats(row, D, a.eps, lane, &x0, &mean, &rstd);
#pragma unroll 1
            for (int k = lane; k < D; k += 32)
                Xs[r * L.ldx + k] = ((row[k] - x0) - mean) * rstd;
        }
        SGKC_TL(14);
        sgkc_mbar_wait(bar, 0); /* gamma, beta, the MLP weights and the Q/K/V slice */
#pragma unroll 1
        for (int r = warp; r < nr; r += NT / 32)
#pragma unroll 1
            for (int k = lane; k < D; k += 32)
                Xs[r * L.ldx + k] = fmaf(Xs[r * L.ldx + k], Gs[k], Gs[D + k]);
    }
    SGKC_TL(3);
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); /* before the first push */
    SGKC_TL(4);

    /* ---- 2. relation MLP for pair rows [rank*prow, ...), pushed to owners ---- */
    auto mlp = [&] {
        SGKC_TL_AT(23, 32 * MW0);
        for (int base = 0; base < mtotal; base += MNT) {
            const int w = base + mt, s = w & (S - 1);
            if (base > 0)
                mbits = load_pair(w, x);
            const bool edge = sgkc_bits_edge(mbits);
            float acc[HMAX];
#pragma unroll
            for (int h = 0; h < HMAX; h++)
                acc[h] = 0.0f;
            if (edge) {
#pragma unroll(FIX ? 4 : 1)
                for (int p = s; p < P; p += S) {
                    const float4 *w1r = reinterpret_cast<const float4 *>(W1s + p * (PCAP + 4));
                    float pa[4] = {b1s[p], 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int r4 = 0; r4 < R4; r4++)
                        sgkc_fma4(pa[r4 & 3], w1r[r4], x[r4]);
                    const float hv = sgkc_silu_fast((pa[0] + pa[1]) + (pa[2] + pa[3]));
                    const float4 *w2r = reinterpret_cast<const float4 *>(W2s + p * HMAX);
#pragma unroll
                    for (int h4 = 0; h4 < HMAX / 4; h4++) {
                        const float4 wv = w2r[h4];
                        acc[4 * h4 + 0] = fmaf(wv.x, hv, acc[4 * h4 + 0]);
                        acc[4 * h4 + 1] = fmaf(wv.y, hv, acc[4 * h4 + 1]);
                        acc[4 * h4 + 2] = fmaf(wv.z, hv, acc[4 * h4 + 2]);
                        acc[4 * h4 + 3] = fmaf(wv.w, hv, acc[4 * h4 + 3]);
                    }
                }
            }
            for (int o = 1; o < S; o <<= 1)
#pragma unroll
                for (int h = 0; h < HMAX; h++)
                    if (h < H)
                        acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], o);
            const int t = w >> lS;
            if (t < npairs) {
                const int ti = t / N;
                const int i = pr0 + ti, j = t - ti * N;
                const int rgd = i / rows_r, il = i - rgd * rows_r;
                int hgd = 0, hl = 0; /* head h = hgd * hpc + hl */
#pragma unroll
                for (int h = 0; h < HMAX; h++) {
                    if (h >= H)
                        break;
                    if ((h & (S - 1)) == s)
                        sgkc_push1(Bs + (hl * rows_r + il) * L.ldn + j, edge ? acc[h] + b2s[h] : SGKC_NEG_INF, kvb,
                                   hgd * Cr + rgd);
                    if (++hl == hpc) {
                        hl = 0;
                        hgd++;
                    }
                }
            }
        }
        SGKC_TL_AT(24, 32 * MW0);
    };

    /* ---- 3. Q/K/V of this block's rows and head group ---- */
    sgkc_fs_gemm_job job;
    if constexpr (FIX) {
        /* Warps 0 .. MW0 - 1 run the GEMM and the others the MLP: Q
         * scaled into Qs; K and V of this block's rows into its own Ks and
         * Vs, then pushed from there, as float4, to the other blocks of
         * the head group. Where every LayerNorm row is on a GEMM warp
         * (FROWS <= MW0: the seed instance), the MLP's warps go on as soon
         * as their weights have landed, beside LayerNorm, and only the
         * GEMM's warps meet before the GEMM (barrier 1); both groups then
         * pass the same block-wide barriers, the same number of times.
         * The B = 8-16 instance has LayerNorm rows on MLP warps, and
         * racecheck found its attention's reads unordered after the GEMM's
         * stores when its GEMM warps alone met at barrier 1, so it
         * keeps a block-wide barrier there. */
        if constexpr (FROWS <= MW0) {
            if (warp < MW0)
                sgkc_group_sync<2, 32 * MW0>(0); /* Xs complete */
        } else {
            __syncthreads(); /* normalized Xs visible to every thread */
        }
        SGKC_TL(5);
        if (warp < MW0) {
            sgkc_mbar_wait(bar, 0); /* the Q/K/V slice */
            SGKC_TL(19);
            sgkc_fs_rw_run<FROWS, SD, QNT, 16>(Wc, Xs, L.ldx, tid, 0, nr, [&](int r, int cc, float x) {
                if (cc < FHS)
                    Qs[r * L.ldh + cc] = x * a.scale;
                else
                    (cc < 2 * FHS ? Ks + (cc - FHS) : Vs + (cc - 2 * FHS))[(r0 + r) * L.ldh] = x;
            });
        } else {
            mlp();
        }
        __syncthreads(); /* Qs, this block's K and V rows; Wc read */
        SGKC_TL(17);
        if (tid == 0) { /* Wo's slice, in its threads' order, while attention runs */
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            sgkc_bulk_load(Wc, a.rwo + (size_t)hg * SD * FHS, (unsigned)(SD * FHS * sizeof(float)), bar);
        }
        constexpr int KV4 = 2 * FHS / 4; /* float4 of a K and V row */
        static_assert(FROWS * KV4 * (SCR > 1 ? SCR - 1 : 1) <= NT, "a push a thread");
        if (tid < FROWS * KV4 * (SCR - 1)) {
            const int q = tid / (FROWS * KV4), e = tid - q * (FROWS * KV4), r = e / KV4, c = (e - r * KV4) * 4;
            if (r < nr) {
                const float *src = (c < FHS ? Ks + c : Vs + c - FHS) + (size_t)(r0 + r) * L.ldh;
                sgkc_push4(src, *reinterpret_cast<const float4 *>(src), kvb, hg * SCR + q + (q >= rg));
            }
        }
        SGKC_TL(18);
    } else {
    mlp();
    __syncthreads(); /* normalized Xs visible to every thread */
    SGKC_TL(5);
    job.A = Xs;
    job.lda = L.ldx;
    job.W = Wc;
    job.ldw = L.ldw;
    job.M = nr;
    job.K = D;
    job.ncols = 3 * hs;
    job.qkv = 1;
    job.Qs = Qs;
    job.Ks = Ks;
    job.Vs = Vs;
    job.kvbar = kvb;
    job.ldh = L.ldh;
    job.hs = hs;
    job.Cr = Cr;
    job.hg = hg;
    job.r0 = r0;
    job.scale = a.scale;
    job.out = a.t16 ? nullptr : a.out + ((size_t)b * N + r0) * D + hg * hs;
    job.out16 = a.t16 ? a.out16 + ((size_t)b * N + r0) * D + hg * hs : nullptr;
    job.f16 = f16;
    job.res = Ns + hg * hs;
    job.ldres = L.ldx;
    job.ldo = D;
    if (nr > 0)
        sgkc_fs_gemm(job);
    __syncthreads(); /* Wc free: bring in Wo's slice while attention runs */
    if (tid == 0) {
        /* the Q/K/V GEMM's reads of Wc (generic proxy) before the copy's writes */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        sgkc_bulk_load(Wc, a.wo + (size_t)hg * D * L.ldw, (unsigned)((size_t)D * L.ldw * sizeof(float)), bar);
    }
    }
    SGKC_TL(6);
    sgkc_mbar_wait<true>(kvb, 0); /* this block's biases, K and V rows have landed */
    SGKC_TL(7);

    /* ---- 4. one warp per (head, row): scores, softmax, ctx ---- */
    float *ps = smem + L.ps + (size_t)warp * ((N + 3) & ~3);
#pragma unroll 1
    for (int task = warp; task < hpc * nr; task += NT / 32) {
        /* one head a block (seed: 4 heads over 4 head groups) needs no
         * division, whose chain opened every task */
        const int hl = hpc == 1 ? 0 : task / nr, il = task - hl * nr;
        const float *q = Qs + il * L.ldh + hl * hd;
        const float *brow = Bs + (hl * rows_r + il) * L.ldn;
        float mx = SGKC_NEG_INF;
#pragma unroll 1
        for (int j = lane; j < N; j += 32) {
            const float *kr = Ks + (size_t)j * L.ldh + hl * hd;
            float s0 = 0.0f, s1 = 0.0f;
            if ((hd & 3) == 0) {
                int d = 0;
#pragma unroll(FIX ? 8 : 1)
                for (; d + 8 <= hd; d += 8) {
                    sgkc_fma4(s0, *reinterpret_cast<const float4 *>(q + d), *reinterpret_cast<const float4 *>(kr + d));
                    sgkc_fma4(s1, *reinterpret_cast<const float4 *>(q + d + 4),
                              *reinterpret_cast<const float4 *>(kr + d + 4));
                }
                if (d < hd)
                    sgkc_fma4(s0, *reinterpret_cast<const float4 *>(q + d), *reinterpret_cast<const float4 *>(kr + d));
            } else {
#pragma unroll 1
                for (int d = 0; d < hd; d++)
                    s0 = fmaf(q[d], kr[d], s0);
            }
            const float sc = sgkc_add_score(brow[j], s0 + s1);
            ps[j] = sc;
            mx = fmaxf(mx, sc);
        }
        mx = sgkc_warp_max(mx);
        SGKC_TL(11);
        const float m_use = mx == SGKC_NEG_INF ? 0.0f : mx;
        float l = 0.0f;
#pragma unroll 1
        for (int j = lane; j < N; j += 32) {
            /* ex2.approx as in attn_rows (masked keys: 2^-inf = 0);
             * expf's range reduction sat on the task's dependent chain */
            const float e = sgkc_ex2((ps[j] - m_use) * SGKC_LOG2E);
            ps[j] = e;
            l += e;
        }
        l = sgkc_warp_sum(l);
        SGKC_TL(12);
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        __syncwarp();
#pragma unroll 1
        for (int d = lane; d < hd; d += 32) {
            const float *vcol = Vs + hl * hd + d;
            float o0 = 0.0f, o1 = 0.0f;
            int j = 0;
#pragma unroll(FIX ? 16 : 1)
            for (; j + 2 <= N; j += 2) {
                o0 = sgkc_pv<true>(ps[j], vcol[(size_t)j * L.ldh], o0);
                o1 = sgkc_pv<true>(ps[j + 1], vcol[(size_t)(j + 1) * L.ldh], o1);
            }
            if (j < N)
                o0 = sgkc_pv<true>(ps[j], vcol[(size_t)j * L.ldh], o0);
            const float o = (o0 + o1) * inv;
#pragma unroll(FIX ? 16 : 1)
            for (int g = 0; g < Ch; g++)
                sgkc_push1(Cs + il * L.ldx + hg * hs + hl * hd + d, o, ctxb, g * Cr + rg);
        }
        SGKC_TL(13);
        __syncwarp(); /* ps is rewritten by the next task */
    }
    SGKC_TL(8);
    sgkc_mbar_wait<true>(ctxb, 0); /* this block's ctx rows have landed */
    sgkc_mbar_wait(bar, 1); /* Wo's slice staged */
    SGKC_TL(9);

    /* ---- 5. out = nodes + ctx Wo^T, this block's rows and hs columns ---- */
    if constexpr (FIX) {
        if (tid < ONT) {
            const size_t o0 = ((size_t)b * SN + r0) * SD;
            sgkc_fs_rw_run<FROWS, SD, ONT, 20>(Wc, Cs, L.ldx, tid, hg * FHS, nr, [&](int r, int cc, float x) {
                const float v = Ns[r * L.ldx + cc] + x;
                if (a.t16)
                    a.out16[o0 + (size_t)r * SD + cc] = sgkc_narrow16(v, f16);
                else
                    a.out[o0 + (size_t)r * SD + cc] = v;
            });
        }
    } else {
        job.A = Cs;
        job.ncols = hs;
        job.qkv = 0;
        if (nr > 0)
            sgkc_fs_gemm(job);
    }
    SGKC_TL(10);
#endif
}

#endif
