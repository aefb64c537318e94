/* Attention on the tensor cores in 3xTF32 (tc_mma.cuh), for calls whose
 * relation MLP ran as its own pass: the bias is read per edge from the
 * pass's head-major output (B, H, N, N), so what is left is masked softmax
 * attention, the flash-attention way. The pass writes -inf where the mask
 * has no edge (mlp_tc.cuh), so this kernel reads the bias alone, no mask.
 *
 * One block owns (batch b, BQ = 16 WQ query rows, one head h) and has
 * WQ x WD warps: warp (wq, wd) owns rows 16 wq .. 16 wq + 15 and head
 * columns [wd DW, (wd + 1) DW), DW = HDP / WD. Splitting the head dim over
 * WD warps keeps a warp's O at DW / 2 registers a lane and its Q.K chains
 * short where heads are wide; the WD partial score tiles are summed through
 * shared memory in wd order, so every warp of a row group holds the same
 * scores and runs the same online softmax. Per tile of BK keys:
 *   K, V and the bias (BQ x BK) of tile kt + 1 are copied (cp.async) into
 *   the other of two stages while tile kt is computed, so the bias is in
 *   flight a whole tile without holding registers; the barrier that opens
 *   a tile also ORs each thread's check of the V chunks it copied for
 *   NaN/Inf;
 *   S = Q.K^T (16 x BK, Q pre-scaled) plus each pair's bias (-inf for a
 *   non-edge and for keys past N); the tile folds into the online softmax (row max and sums over
 *   the four lanes of a quad); O += P.V with the score accumulators as
 *   the A operand without a shuffle (columns 2t, 2t + 1 of key tile j are
 *   fed as k = t, t + 4, V's rows read in that order). A tile whose V
 *   holds a NaN or Inf takes P.V on FFMA instead, skipping keys of weight
 *   0 (sgkc_pv), since an MMA would give 0 * inf = NaN to rows that do not
 *   attend to that key.
 * X3: every product in 3xTF32 (the fp32 contract); false, one TF32 pass
 * (16-bit layers; tc_mma.cuh's sgkc_mma_x).
 * Head dims are padded to HDP (zero columns in Q, K and V). MINB > 0 caps
 * the registers at what MINB blocks an SM leave; 0 leaves ptxas its own
 * choice, which holds fewer registers than a stated minimum of one block
 * lets it take, so more blocks share an SM (DESIGN.md). Grids too small
 * for the GPU split their keys over the ks blocks of a cluster and merge
 * as attn_tiled.cuh does (sgkc_attn_merge). */
#ifndef SGK_CUDA_ATTN_MMA_CUH
#define SGK_CUDA_ATTN_MMA_CUH

#include "attn_tiled.cuh"
#include "tc_mma.cuh"

/* Row stride of Q, K and V in shared memory: the fragment reads of a warp
 * (rows g at columns t, or rows 2t at columns g) fall on distinct banks. */
__host__ __device__ constexpr int sgkc_am_ld(int hdp)
{
    return hdp + 4;
}
/* Row stride of a bias stage: a lane's float2 reads (rows g, keys 2t of a
 * step) fall on distinct banks in each half warp (stride = 8 mod 32
 * words at BK = 32, 24 at BK = 16). */
__host__ __device__ constexpr int sgkc_am_ldb(int bk)
{
    return bk + 8;
}
/* Shared memory of a block, in floats: Q, two stages of K and V, two of
 * the bias, the partial scores where WD > 1, the softmax state for the
 * cluster merge. */
__host__ __device__ constexpr size_t sgkc_am_smem_floats(int hdp, int wq, int wd, int bk)
{
    return (size_t)(16 * wq + 4 * bk) * sgkc_am_ld(hdp) + (size_t)2 * 16 * wq * sgkc_am_ldb(bk) +
           (wd > 1 ? (size_t)wq * wd * 4 * bk * 4 : 0) + 2 * 16 * wq;
}

/* exp(x - m) on the MUFU, as attn_rows.cuh takes it: expf's range
 * reduction costs several instructions a weight, and the product's
 * rounding moves a weight by about |x - m| 2^-24 of itself, far inside the
 * contract for the weights that count. x = -inf gives 0; +inf - +inf NaN. */
__device__ __forceinline__ float sgkc_am_exp(float x, float m)
{
    return sgkc_ex2((x - m) * SGKC_LOG2E);
}

template <int HDP, int WQ, int WD, int BK, int MINB = 0, bool X3 = true>
__global__ void __launch_bounds__(32 * WQ * WD, MINB) sgkc_attn_mma_kernel(sgkc_attn_args a)
{
    constexpr int NW = WQ * WD, NT = 32 * NW, BQ = 16 * WQ, LD = sgkc_am_ld(HDP), DW = HDP / WD;
    constexpr int LDB = sgkc_am_ldb(BK);
    constexpr int NK = BK / 8;  /* key tiles of 8: S's n-tiles, P.V's k-steps */
    constexpr int ND = DW / 8;  /* a warp's head-dim tiles of 8: Q.K's k-steps, O's n-tiles */
    static_assert(DW % 8 == 0 && BK % 8 == 0, "whole tiles of 8");

    extern __shared__ __align__(16) float smem[];
    float *Qs = smem, *Ks = Qs + BQ * LD, *Vs = Ks + 2 * BK * LD;
    float *Bs = Vs + 2 * BK * LD;                               /* [stage][row][key] */
    float *Ps = Bs + 2 * BQ * LDB;                              /* [warp][j][e][lane] where WD > 1 */
    float *Ms = Ps + (WD > 1 ? NW * NK * 4 * 32 : 0), *Ls = Ms + BQ;

    const int N = a.N, D = a.D, H = a.H, hd = a.hd;
    const int rank = (int)(blockIdx.x % (unsigned)a.ks);
    const int64_t tile = blockIdx.x / (unsigned)a.ks;
    const int h = (int)(tile % H);
    const int64_t rest = tile / H;
    const int qt = (int)(rest % a.qtiles);
    const int64_t b = rest / a.qtiles;
    const int q0 = qt * BQ, d0 = h * hd;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wq = warp / WD, wd = warp % WD, c0 = wd * DW;
    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;
    const bool v4 = a.qvec && (d0 % 4 == 0) && (hd % 4 == 0);
    const float *bias_bh = a.bias + ((size_t)b * H + h) * N * N;
    /* bias rows are 16-byte aligned where N % 4 == 0 (the workspace is) */
    const bool b4 = (N % 4 == 0) && ((reinterpret_cast<uintptr_t>(a.bias) & 15u) == 0);

    /* A padded row is C4 chunks of 16 bytes. Every loop over a tile's chunks
     * runs on compile-time bounds and divisors, and each thread takes the
     * same chunks of every tile: a runtime division (by hd) a chunk was
     * most of what the copies issued. */
    constexpr int C4 = HDP / 4;

    /* zero padding: columns past hd stay zero in every tile, and Q's rows
     * past N stay zero */
    for (int i = tid; i < (BQ + 4 * BK) * LD / 4; i += NT)
        reinterpret_cast<float4 *>(smem)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    sgkc_grid_wait(); /* qkv and the bias are earlier kernels' */
    if (v4) {
        for (int i = tid; i < BQ * C4; i += NT) {
            const int q = i / C4, c = (i % C4) * 4;
            if (q0 + q < N && c < hd)
                *reinterpret_cast<float4 *>(Qs + q * LD + c) =
                    __ldg(reinterpret_cast<const float4 *>(qkv_b + (size_t)(q0 + q) * row3 + d0 + c));
        }
    } else {
        for (int i = tid; i < BQ * HDP; i += NT) {
            const int q = i / HDP, d = i % HDP;
            if (q0 + q < N && d < hd)
                Qs[q * LD + d] = __ldg(qkv_b + (size_t)(q0 + q) * row3 + d0 + d);
        }
    }

    /* K and V of the tile at k0 into stage st (rows past N zero: 0 * garbage
     * could be NaN); cp.async where rows are 16-byte aligned */
    auto load_kv = [&](int k0, int st) {
        float *Kd = Ks + st * BK * LD, *Vd = Vs + st * BK * LD;
        const float *src0 = qkv_b + (size_t)k0 * row3 + D + d0;
        if (v4) {
#pragma unroll
            for (int i0 = 0; i0 < BK * C4; i0 += NT) {
                const int i = i0 + tid, k = i / C4, c = (i % C4) * 4;
                if ((BK * C4 % NT == 0 || i < BK * C4) && c < hd) {
                    if (k0 + k < N) {
                        const float *src = src0 + k * (int)row3 + c;
                        sgkc_cp_async16(Kd + k * LD + c, src);
                        sgkc_cp_async16(Vd + k * LD + c, src + D);
                    } else {
                        *reinterpret_cast<float4 *>(Kd + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                        *reinterpret_cast<float4 *>(Vd + k * LD + c) = make_float4(0.f, 0.f, 0.f, 0.f);
                    }
                }
            }
        } else {
            for (int i = tid; i < BK * HDP; i += NT) {
                const int k = i / HDP, d = i % HDP;
                if (d < hd) {
                    const bool in = k0 + k < N;
                    const float *src = src0 + k * (int)row3 + d;
                    Kd[k * LD + d] = in ? __ldg(src) : 0.0f;
                    Vd[k * LD + d] = in ? __ldg(src + D) : 0.0f;
                }
            }
        }
    };
    /* the bias of the block's rows for the tile at k0 into stage st: -inf
     * for keys and rows past N; 16-byte copies where rows are aligned
     * (then a chunk is wholly in or past N), else 4-byte ones */
    auto load_bias = [&](int k0, int st) {
        float *Bd = Bs + st * BQ * LDB;
        const int kn = N - k0 < BK ? N - k0 : BK;
        const float *src0 = bias_bh + (size_t)q0 * N + k0;
        if (b4) {
            constexpr int B4 = BK / 4;
#pragma unroll
            for (int i0 = 0; i0 < BQ * B4; i0 += NT) {
                const int i = i0 + tid, r = i / B4, c = (i % B4) * 4;
                if (BQ * B4 % NT == 0 || i < BQ * B4) {
                    float *dst = Bd + r * LDB + c;
                    if (q0 + r < N && c < kn)
                        sgkc_cp_async16(dst, src0 + (size_t)r * N + c);
                    else
                        *reinterpret_cast<float4 *>(dst) =
                            make_float4(SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF, SGKC_NEG_INF);
                }
            }
        } else {
            for (int i = tid; i < BQ * BK; i += NT) {
                const int r = i / BK, c = i % BK;
                float *dst = Bd + r * LDB + c;
                if (q0 + r < N && c < kn)
                    sgkc_cp_async4(dst, src0 + (size_t)r * N + c);
                else
                    *dst = SGKC_NEG_INF;
            }
        }
    };
    /* does any V value this thread copied into stage st hold a NaN or Inf?
     * (it reads the chunks load_kv gave it; columns past hd are zero) */
    auto own_v_nonfinite = [&](int st) {
        const float *Vd = Vs + st * BK * LD;
        bool finite = true;
        if (v4) {
#pragma unroll
            for (int i0 = 0; i0 < BK * C4; i0 += NT) {
                const int i = i0 + tid;
                if (BK * C4 % NT == 0 || i < BK * C4)
                    finite &= sgkc_finite4(*reinterpret_cast<const float4 *>(Vd + (i / C4) * LD + (i % C4) * 4));
            }
        } else {
            for (int i = tid; i < BK * HDP; i += NT)
                finite &= fabsf(Vd[(i / HDP) * LD + i % HDP]) < INFINITY;
        }
        return !finite;
    };

    const int r0 = 16 * wq + g; /* this lane's rows r0, r0 + 8 of the block */
    float O[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
        O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
    float m[2] = {SGKC_NEG_INF, SGKC_NEG_INF}, l[2] = {0.0f, 0.0f};

    int kb, ke;
    sgkc_attn_key_range((N + BK - 1) / BK, a.ks, rank, kb, ke);
    if (kb < ke) {
        load_kv(kb * BK, 0);
        load_bias(kb * BK, 0);
        sgkc_cp_commit();
    }
    for (int kt = kb; kt < ke; kt++) {
        const int k0 = kt * BK, st = (kt - kb) & 1;
        sgkc_cp_wait<0>();
        /* every warp is done with tile kt - 1 (its stage is free) and tile
         * kt is in; the OR says whether its V holds a NaN or Inf */
        const bool v_nonfinite = __syncthreads_or(own_v_nonfinite(st));
        if (kt + 1 < ke) {
            load_kv(k0 + BK, st ^ 1);
            load_bias(k0 + BK, st ^ 1);
            sgkc_cp_commit();
        }
        const float *Kc = Ks + st * BK * LD, *Vc = Vs + st * BK * LD, *Bc = Bs + st * BQ * LDB;

        /* ---- S = Q.K^T over this warp's columns: s[j] = {[r0][8j+2t], [r0][8j+2t+1], [r0+8][8j+2t], [r0+8][8j+2t+1]} ---- */
        float s[NK][4];
#pragma unroll
        for (int j = 0; j < NK; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll 4
        for (int kk = 0; kk < ND; kk++) {
            uint32_t ah[4], al[4];
            const float *qa = Qs + r0 * LD + c0 + 8 * kk + t;
            sgkc_split_x<X3>(qa[0], ah[0], al[0]);
            sgkc_split_x<X3>(qa[8 * LD], ah[1], al[1]);
            sgkc_split_x<X3>(qa[4], ah[2], al[2]);
            sgkc_split_x<X3>(qa[8 * LD + 4], ah[3], al[3]);
#pragma unroll
            for (int j = 0; j < NK; j++) {
                const float *kp = Kc + (8 * j + g) * LD + c0 + 8 * kk + t;
                uint32_t bh[2], bl[2];
                sgkc_split_x<X3>(kp[0], bh[0], bl[0]);
                sgkc_split_x<X3>(kp[4], bh[1], bl[1]);
                sgkc_mma_x<X3>(s[j], ah, al, bh, bl);
            }
        }
        if constexpr (WD > 1) {
            /* the row group's partial scores, summed in wd order */
            float *mine = Ps + warp * NK * 4 * 32 + lane;
#pragma unroll
            for (int j = 0; j < NK; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    mine[(4 * j + e) * 32] = s[j][e];
            __syncthreads();
            const float *grp = Ps + wq * WD * NK * 4 * 32 + lane;
#pragma unroll
            for (int j = 0; j < NK; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = grp[(4 * j + e) * 32];
#pragma unroll
                    for (int p = 1; p < WD; p++)
                        v += grp[(p * NK * 4 + 4 * j + e) * 32];
                    s[j][e] = v;
                }
        }

        /* ---- each pair's bias (-inf: a non-edge, or past N); online softmax ---- */
        float tmax[2] = {SGKC_NEG_INF, SGKC_NEG_INF};
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const float2 bv = *reinterpret_cast<const float2 *>(Bc + (r0 + 8 * r) * LDB + 8 * j + 2 * t);
                s[j][2 * r] = sgkc_add_score(bv.x, s[j][2 * r]);
                s[j][2 * r + 1] = sgkc_add_score(bv.y, s[j][2 * r + 1]);
                tmax[r] = fmaxf(tmax[r], fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            }
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            const float m_new = fmaxf(m[r], tmax[r]);
            m_use[r] = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            alpha[r] = sgkc_am_exp(m[r], m_use[r]);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < NK; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = sgkc_am_exp(s[j][e], m_use[e >> 1]);
                l[e >> 1] += s[j][e];
            }
#pragma unroll
        for (int n = 0; n < ND; n++) {
            O[n][0] *= alpha[0];
            O[n][1] *= alpha[0];
            O[n][2] *= alpha[1];
            O[n][3] *= alpha[1];
        }

        /* ---- O += P.V over this warp's columns ---- */
        if (!v_nonfinite) {
#pragma unroll
            for (int j = 0; j < NK; j++) {
                uint32_t ph[4], pl[4];
                sgkc_split_x<X3, false>(s[j][0], ph[0], pl[0]);
                sgkc_split_x<X3, false>(s[j][2], ph[1], pl[1]);
                sgkc_split_x<X3, false>(s[j][1], ph[2], pl[2]);
                sgkc_split_x<X3, false>(s[j][3], ph[3], pl[3]);
                const float *vp = Vc + (8 * j + 2 * t) * LD + c0 + g;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    uint32_t bh[2], bl[2];
                    sgkc_split_x<X3, false>(vp[8 * n], bh[0], bl[0]);
                    sgkc_split_x<X3, false>(vp[LD + 8 * n], bh[1], bl[1]);
                    sgkc_mma_x<X3>(O[n], ph, pl, bh, bl);
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
                    const float *vr = Vc + (8 * j + w) * LD + c0 + 2 * t;
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
        /* O, m and l of the warp's rows and columns into Q's space, once
         * every thread is past its Q loads (a block without key tiles has
         * had no barrier since), then the cluster's merge */
        __syncthreads();
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int c = c0 + 8 * n + 2 * t;
            Qs[r0 * LD + c] = O[n][0];
            Qs[r0 * LD + c + 1] = O[n][1];
            Qs[(r0 + 8) * LD + c] = O[n][2];
            Qs[(r0 + 8) * LD + c + 1] = O[n][3];
        }
        if (wd == 0 && t == 0) {
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
            const int c = c0 + 8 * n + 2 * t;
            if (c < hd)
                dst[c] = l[r] == 0.0f ? 0.0f : O[n][2 * r] / l[r];
            if (c + 1 < hd)
                dst[c + 1] = l[r] == 0.0f ? 0.0f : O[n][2 * r + 1] / l[r];
        }
    }
}

#endif
