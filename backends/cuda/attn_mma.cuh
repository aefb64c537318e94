/* Attention on the tensor cores in 3xTF32 (tc_mma.cuh), for calls whose
 * relation MLP ran as its own pass (mlp_tc.cuh): the bias is read per edge,
 * so what is left is masked softmax attention, the flash-attention way.
 * One block owns (batch b, BQ = 64 query rows, one head h); each of its
 * four warps owns 16 of the rows and keeps its scores, softmax state and
 * O in registers. Per tile of BK = 32 keys:
 *   the block stages the tile's K and V rows of the head in shared memory
 *   (rows past N zero); after a barrier each warp computes S = Q.K^T (16 x 32, Q pre-scaled, Q in shared
 *   memory since the prologue), adds the bias of each edge and gives
 *   non-edges -inf, folds the tile into its online softmax (row max and
 *   sums over the four lanes of a quad); a second barrier ORs a scan of the
 *   V tile for NaN/Inf; each warp adds P.V to O: the score
 *   accumulators become the A operand without a shuffle, as in
 *   mlp_tc.cuh (columns 2t, 2t + 1 of key tile j are fed as k = t, t + 4,
 *   with V's rows read in that order). A tile whose V holds a NaN or Inf
 *   takes P.V on FFMA instead, skipping keys of weight 0 (sgkc_pv), since
 *   an MMA would give 0 * inf = NaN to rows that do not attend to that key.
 * Head dims are padded to HDP (zero columns in Q, K and V). Grids too small
 * for the GPU split their keys over the ks blocks of a cluster and merge
 * as attn_tiled.cuh does (sgkc_attn_merge). */
#ifndef SGK_CUDA_ATTN_MMA_CUH
#define SGK_CUDA_ATTN_MMA_CUH

#include "attn_tiled.cuh"
#include "tc_mma.cuh"

#define SGKC_AM_NT 128
#define SGKC_AM_BQ 64
#define SGKC_AM_BK 32

/* Row stride of Q, K and V in shared memory: the fragment reads of a warp
 * (rows g at columns t, or rows 2t at columns g) fall on distinct banks. */
__host__ __device__ constexpr int sgkc_am_ld(int hdp)
{
    return hdp + 4;
}
/* Shared memory of a block of nw warps (16 nw queries) and bk-key tiles,
 * in floats. The library runs nw = 4, bk = 32; dev/attn_check.cu times
 * other instances. */
__host__ __device__ constexpr size_t sgkc_am_smem_floats(int hdp, int nw = SGKC_AM_NT / 32, int bk = SGKC_AM_BK)
{
    return (size_t)(16 * nw + 2 * bk) * sgkc_am_ld(hdp) + 2 * 16 * nw;
}

template <int HDP, int NW = SGKC_AM_NT / 32, int BK = SGKC_AM_BK>
__global__ void __launch_bounds__(32 * NW) sgkc_attn_mma_kernel(sgkc_attn_args a)
{
    constexpr int NT = 32 * NW, BQ = 16 * NW, LD = sgkc_am_ld(HDP);
    constexpr int NK = BK / 8;   /* key tiles of 8: S's n-tiles, P.V's k-steps */
    constexpr int ND = HDP / 8;  /* head-dim tiles of 8: Q.K's k-steps, O's n-tiles */
    static_assert(HDP % 8 == 0 && BK % 8 == 0, "whole tiles of 8");

    extern __shared__ __align__(16) float smem[];
    float *Qs = smem, *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ms = Vs + BK * LD, *Ls = Ms + BQ;

    const int N = a.N, D = a.D, H = a.H, hd = a.hd;
    const int rank = (int)(blockIdx.x % (unsigned)a.ks);
    const int64_t tile = blockIdx.x / (unsigned)a.ks;
    const int h = (int)(tile % H);
    const int64_t rest = tile / H;
    const int qt = (int)(rest % a.qtiles);
    const int64_t b = rest / a.qtiles;
    const int q0 = qt * BQ, d0 = h * hd;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;
    const bool v4 = a.qvec && (d0 % 4 == 0) && (hd % 4 == 0);

    /* zero padding: columns past hd stay zero in every tile */
    for (int i = tid; i < (BQ + 2 * BK) * LD; i += NT)
        smem[i] = 0.0f;
    __syncthreads();
    sgkc_grid_wait(); /* qkv and the bias are earlier kernels' */
    for (int i = tid; i < BQ * hd; i += NT) {
        const int q = i / hd, d = i % hd;
        if (q0 + q < N)
            Qs[q * LD + d] = __ldg(qkv_b + (size_t)(q0 + q) * row3 + d0 + d);
    }

    const int r0 = 16 * warp + g; /* this lane's rows r0, r0 + 8 of the block */
    float O[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
        O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
    float m[2] = {SGKC_NEG_INF, SGKC_NEG_INF}, l[2] = {0.0f, 0.0f};

    int kb, ke;
    sgkc_attn_key_range((N + BK - 1) / BK, a.ks, rank, kb, ke);
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK;
        __syncthreads(); /* every warp is done with the previous tile (and Q is in) */
        if (v4) {
            const int c4 = hd / 4;
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
            sgkc_cp_wait<0>();
        } else {
            for (int i = tid; i < BK * hd; i += NT) {
                const int k = i / hd, d = i % hd;
                const bool in = k0 + k < N;
                const float *src = qkv_b + (size_t)(k0 + k) * row3 + D + d0 + d;
                Ks[k * LD + d] = in ? __ldg(src) : 0.0f;
                Vs[k * LD + d] = in ? __ldg(src + D) : 0.0f;
            }
        }
        __syncthreads(); /* the tile is in (every thread's copies and stores) */

        /* ---- S = Q.K^T: s[j] = {[r0][8j+2t], [r0][8j+2t+1], [r0+8][8j+2t], [r0+8][8j+2t+1]} ---- */
        float s[NK][4];
#pragma unroll
        for (int j = 0; j < NK; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < ND; kk++) {
            uint32_t ah[4], al[4];
            const float *qa = Qs + r0 * LD + 8 * kk + t;
            sgkc_split_tf32_inf(qa[0], ah[0], al[0]);
            sgkc_split_tf32_inf(qa[8 * LD], ah[1], al[1]);
            sgkc_split_tf32_inf(qa[4], ah[2], al[2]);
            sgkc_split_tf32_inf(qa[8 * LD + 4], ah[3], al[3]);
#pragma unroll
            for (int j = 0; j < NK; j++) {
                const float *kp = Ks + (8 * j + g) * LD + 8 * kk + t;
                uint32_t bh[2], bl[2];
                sgkc_split_tf32_inf(kp[0], bh[0], bl[0]);
                sgkc_split_tf32_inf(kp[4], bh[1], bl[1]);
                sgkc_mma3_tf32(s[j], ah, al, bh, bl);
            }
        }

        /* ---- bias of each edge, -inf elsewhere; online softmax ---- */
        float tmax[2] = {SGKC_NEG_INF, SGKC_NEG_INF};
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qg = q0 + r0 + (e >> 1) * 8, kg = k0 + 8 * j + 2 * t + (e & 1);
                const size_t pi = ((size_t)b * N + qg) * N + kg;
                const bool edge = qg < N && kg < N && sgkc_edge(a.mask, a.mask_u8, pi);
                s[j][e] = edge ? sgkc_add_score(__ldg(a.bias + pi * H + h), s[j][e]) : SGKC_NEG_INF;
                tmax[e >> 1] = fmaxf(tmax[e >> 1], s[j][e]);
            }
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            const float m_new = fmaxf(m[r], tmax[r]);
            m_use[r] = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            alpha[r] = expf(m[r] - m_use[r]);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = expf(s[j][e] - m_use[e >> 1]);
                l[e >> 1] += s[j][e];
            }
#pragma unroll
        for (int n = 0; n < ND; n++) {
            O[n][0] *= alpha[0];
            O[n][1] *= alpha[0];
            O[n][2] *= alpha[1];
            O[n][3] *= alpha[1];
        }

        /* ---- O += P.V: does this tile's V hold a NaN or Inf (padding is zero)? ---- */
        const bool v_nonfinite = __syncthreads_or(sgkc_nonfinite_share(Vs, BK * LD, tid, NT));
        if (!v_nonfinite) {
#pragma unroll
            for (int j = 0; j < NK; j++) {
                uint32_t ph[4], pl[4];
                sgkc_split_tf32(s[j][0], ph[0], pl[0]);
                sgkc_split_tf32(s[j][2], ph[1], pl[1]);
                sgkc_split_tf32(s[j][1], ph[2], pl[2]);
                sgkc_split_tf32(s[j][3], ph[3], pl[3]);
                const float *vp = Vs + (8 * j + 2 * t) * LD + g;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    uint32_t bh[2], bl[2];
                    sgkc_split_tf32(vp[8 * n], bh[0], bl[0]);
                    sgkc_split_tf32(vp[LD + 8 * n], bh[1], bl[1]);
                    sgkc_mma3_tf32(O[n], ph, pl, bh, bl);
                }
            }
        } else {
            /* key by key on FFMA, its weights from the quad's lane that holds them */
#pragma unroll
            for (int j = 0; j < NK; j++)
#pragma unroll
                for (int w = 0; w < 8; w++) {
                    const int src = (lane & ~3) | (w >> 1);
                    const float pa = __shfl_sync(0xffffffffu, s[j][w & 1], src);
                    const float pb = __shfl_sync(0xffffffffu, s[j][2 + (w & 1)], src);
                    const float *vr = Vs + (8 * j + w) * LD + 2 * t;
#pragma unroll
                    for (int n = 0; n < ND; n++) {
                        const float v0 = vr[8 * n], v1 = vr[8 * n + 1];
                        O[n][0] = sgkc_pv<true>(pa, v0, O[n][0]);
                        O[n][1] = sgkc_pv<true>(pa, v1, O[n][1]);
                        O[n][2] = sgkc_pv<true>(pb, v0, O[n][2]);
                        O[n][3] = sgkc_pv<true>(pb, v1, O[n][3]);
                    }
                }
        }
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }

    if (a.ks > 1) {
        /* O, m and l of the warp's own rows into Q's space, once every
         * thread is past its Q loads (a block without key tiles has had no
         * barrier since), then the cluster's merge */
        __syncthreads();
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int c = 8 * n + 2 * t;
            Qs[r0 * LD + c] = O[n][0];
            Qs[r0 * LD + c + 1] = O[n][1];
            Qs[(r0 + 8) * LD + c] = O[n][2];
            Qs[(r0 + 8) * LD + c + 1] = O[n][3];
        }
        if (t == 0) {
            Ms[r0] = m[0];
            Ls[r0] = l[0];
            Ms[r0 + 8] = m[1];
            Ls[r0 + 8] = l[1];
        }
        sgkc_attn_merge<BQ, NT>(a, Qs, LD, Ms, Ls, rank, b, q0, d0, hd);
        return;
    }

    /* ---- ctx = O / l; a row with no edge has l == 0 and gets 0 ---- */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int qg = q0 + r0 + 8 * r;
        if (qg >= N)
            continue;
        float *dst = a.ctx + ((size_t)b * N + qg) * D + d0;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int c = 8 * n + 2 * t;
            if (c < hd)
                dst[c] = l[r] == 0.0f ? 0.0f : O[n][2 * r] / l[r];
            if (c + 1 < hd)
                dst[c + 1] = l[r] == 0.0f ? 0.0f : O[n][2 * r + 1] / l[r];
        }
    }
}

#endif
