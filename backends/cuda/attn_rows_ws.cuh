/* tiled-dmma's attention kernel: attn_rows.cuh with the relation MLP and
 * the attention in different warps of one block.
 *
 * attn_rows with the MLP on DMMA (its DM instances) ran large 308 us
 * against 363 with FFMAs, but ncu found no pipe near its limit: between
 * two barriers all eight warps of a block run the MLP (bound by the pipe
 * that converts fp32 <-> fp64 and runs MUFU), then all run Q.K and P.V
 * (bound by FFMA), and the two blocks of an SM stay in step (dev/NOTES.md,
 * runs 92-94). Here a block of 16 warps holds both phases at once:
 *
 *   warps 8-15 (MLP): warp w computes the biases of rows 2w, 2w + 1 of
 *   the block's 16 for key tile kt (sgkc_ar_dm_bias), waits until B[kt % 2]
 *   is free, stores them (sgkc_ar_dm_store), and says so; meanwhile they
 *   prefetch tile kt + 1's features into L2;
 *   warps 0-7 (attention): per tile, the next K/V tile's copies start into
 *   the other buffer, then, once tile kt's K/V have landed and B[kt % 2]
 *   is full, Q.K + B, the online softmax and P.V as in attn_rows
 *   (sgkc_ar_attend); at the end ctx.
 *
 * Named barriers (0 is __syncthreads): 1, the attention warps among
 * themselves (K/V landed, with the OR of "V holds a NaN or Inf"; K/V and
 * B read); 2 + s, B[s] full (MLP warps arrive, attention warps wait);
 * 4 + s, B[s] empty (the other way round). Each B[s] is filled for tiles
 * s, s + 2, ..., so a barrier's next use always waits on its previous
 * one. Shared memory: Q, two K/V tiles, two B buffers and the MLP's
 * fp64 fragments, 190 KB at PCAP 32: one block an SM. The MLP warps
 * read no output of the previous kernel, so they start before
 * sgkc_grid_wait(). */
#ifndef SGK_CUDA_ATTN_ROWS_WS_CUH
#define SGK_CUDA_ATTN_ROWS_WS_CUH

#include "attn_rows.cuh"

__host__ __device__ constexpr size_t sgkc_arw_smem_floats(int pcap)
{
    return (size_t)SGKC_AR_BQ * SGKC_AR_D + 4 * (size_t)SGKC_AR_BK * SGKC_AR_D +
           2 * (size_t)(SGKC_AR_NT / 64) * SGKC_AR_BLD + 2 * sgkc_dm_doubles(pcap);
}

__device__ __forceinline__ void sgkc_bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void sgkc_bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

template <int PCAP>
__global__ void __launch_bounds__(2 * SGKC_AR_NT, 1) sgkc_attn_rows_ws_kernel(sgkc_attn_args a)
{
    constexpr int NT = SGKC_AR_NT, BQ = SGKC_AR_BQ, BK = SGKC_AR_BK, D = SGKC_AR_D, BLD = SGKC_AR_BLD;
    constexpr int PAIRS = NT / 64; /* warp pairs of a role */
    static_assert(PCAP == 16 || PCAP == 32, "DMMA k-steps of 16");

    extern __shared__ __align__(16) float smem[];
    const int N = a.N, P = a.P;
    const int qt = blockIdx.x % a.qtiles;
    const int64_t b = blockIdx.x / a.qtiles;
    const int q0 = qt * BQ;
    float *Qs = smem;           /* [BQ][D] */
    float *KV = Qs + BQ * D;    /* [2][K [BK][D], V [BK][D]] */
    float *Bb = KV + 4 * BK * D; /* [2][PAIRS][BLD] */
    double *Wd = reinterpret_cast<double *>(Bb + 2 * PAIRS * BLD);

    const bool mlp_warp = threadIdx.x >= NT;
    const int tid = threadIdx.x % NT, lane = tid & 31, warp = tid >> 5;
    const int wp = warp >> 1, half = warp & 1;
    const int qp = q0 + 4 * wp;   /* the pair's rows: qp .. qp + 3 */
    const int qm = qp + 2 * half; /* an MLP warp's rows: qm, qm + 1 */
    const int ktiles = (N + BK - 1) / BK;

    sgkc_dm_stage<PCAP>(Wd, a, threadIdx.x, 2 * NT);
    __syncthreads();

    if (mlp_warp) {
        const bool pfull = a.pvec && P == PCAP; /* whole float4s, no checks */
        for (int kt = 0; kt < ktiles; kt++) {
            const int s = kt & 1, k0 = kt * BK;
            const size_t pr0 = ((size_t)b * N + qm) * N; /* pair (qm, 0) */
            if (k0 + BK < N)
                sgkc_ar_prefetch(a, pr0, k0, BK, qm, lane);
            unsigned eb[2];
            float res[4][4];
            /* the MLP warps hold nothing else: the next group's features
             * (PCAP 32), all four groups' (16) load ahead of the MMAs */
            sgkc_ar_dm_bias<PCAP, (PCAP > 16 ? 1 : 3)>(a, Wd, pr0, k0, qm, lane, pfull, eb, res);
            if (kt >= 2)
                sgkc_bar_sync(4 + s, 2 * NT); /* tile kt - 2 read out of B[s] */
            sgkc_ar_dm_store(Bb + (s * PAIRS + wp) * BLD, half, lane, eb, res);
            sgkc_bar_arrive(2 + s, 2 * NT);
        }
        return;
    }

    sgkc_grid_wait(); /* qkv is the previous kernel's output */
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;
    for (int i = tid; i < BQ * (D / 4); i += NT) {
        const int r = i >> 6, c = i & 63;
        float *dst = Qs + r * D + sgkc_ar_q(c);
        if (q0 + r < N)
            sgkc_cp_async16(dst, qkv_b + (size_t)(q0 + r) * row3 + c * 4);
        else
            *reinterpret_cast<float4 *>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const sgkc_ar_kv kv(qkv_b, tid);
    kv.load(KV, KV + BK * D, 0, N); /* one cp.async group with Q */

    const int h = 4 * half + (lane >> 3), t = lane & 7;
    const float *q_lane = Qs + 4 * wp * D + h * 32;
    float O[4][4] = {}; /* row r, columns h*32 + 4t + c */
    float mrow[4] = {SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF}, lrow[4] = {};
    for (int kt = 0; kt < ktiles; kt++) {
        const int s = kt & 1;
        float *Ks = KV + 2 * s * BK * D, *Vs = Ks + BK * D;
        if (kt + 1 < ktiles) {
            /* the other buffer was last read in tile kt - 1, before its
             * closing barrier */
            float *Kn = KV + 2 * (s ^ 1) * BK * D;
            kv.load(Kn, Kn + BK * D, (kt + 1) * BK, N);
            sgkc_cp_wait<1>();
        } else {
            sgkc_cp_wait<0>();
        }
        const bool v_nonfinite = sgkc_group_sync_or<2, NT>(0, kv.v_nonfinite(Vs));
        sgkc_bar_sync(2 + s, 2 * NT); /* B[s] holds tile kt */
        float *Bp = Bb + (s * PAIRS + wp) * BLD;
        sgkc_ar_attend(q_lane, Ks + t * D + h * 32, Vs + h * 32 + 4 * t, Bp, Bp + h * SGKC_AR_BRS + t, h, t,
                       v_nonfinite, O, mrow, lrow);
        sgkc_group_sync<2, NT>(0); /* K/V[s] and B[s] read by every attention warp */
        if (kt + 2 < ktiles)
            sgkc_bar_arrive(4 + s, 2 * NT);
    }

    sgkc_grid_trigger();
    sgkc_ar_store_ctx(a, b, qp, h, t, O, lrow);
}

#endif
