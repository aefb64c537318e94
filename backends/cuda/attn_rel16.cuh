/* The relation MLP and the masked attention in one kernel, for bf16 and
 * f16 layers, on 16-bit m16n8k16 MMAs: the bias is computed where it is
 * used and never written to memory, so a call reads each pair's features
 * once (2 P bytes a pair) instead of the pass writing and the attention
 * reading 4 H bytes a pair more. The library does not launch it yet
 * (DESIGN.md says why); dev/rel16_check.cu validates and times it.
 *
 * One block owns 16 queries of one batch entry and every head, with WH
 * warps. Per tile of 16 keys:
 *   the relation MLP of the tile's 256 pairs: warp w takes queries w,
 *   w + WH, ... as MMA tiles of 16 pairs (one query, the tile's 16 keys:
 *   16 consecutive feature rows), the first layer in one m16n8k16 of the
 *   layer's type and the second in one TF32 pass on the fp32 hidden units,
 *   as mlp_h16.cuh computes them; b2 added, -inf where the mask makes no
 *   edge or the key is past N, into a shared tile [head][query][key]. The
 *   next tile's features are loaded during this one;
 *   K and V of the tile arrive by cp.async into the other of two stages
 *   while the tile before is computed; whether the tile's V holds a NaN or
 *   Inf is read from the pack kernel's flags of its rows;
 *   warp w takes heads w, w + WH, ... (up to HPW): S = Q.K^T (Q pre-scaled,
 *   its fragments held in registers for the whole key loop) plus the bias,
 *   the online softmax (row max and sums over the quad of lanes that
 *   shares a row), and O += P.V with P rounded to the layer's type as the
 *   A operand straight from the score accumulators. A tile whose V holds a
 *   NaN or Inf takes P.V on FFMA, skipping keys of weight 0, since an MMA
 *   would give 0 * inf = NaN to rows that do not attend to that key.
 *
 * Grids too small for the GPU split each query tile's keys over the ks
 * blocks of a cluster, which merge their O, row max and sum through
 * distributed shared memory (attn_tiled.cuh's sgkc_attn_merge).
 *
 * Q, K and V arrive as 16-bit rows (B N, 3, H, HDP), each head's columns
 * padded with zeros to HDP, q pre-scaled by 1/sqrt(hd); ctx leaves as
 * floats (B N, D). A fully masked row's ctx is 0. */
#ifndef SGK_CUDA_ATTN_REL16_CUH
#define SGK_CUDA_ATTN_REL16_CUH

#include "attn_tiled.cuh"
#include "mlp_h16.cuh"

struct sgkc_ar16_args {
    const uint16_t *qkv16;    /* (B N, 3, H, HDP) */
    const uint16_t *pair16;   /* (B, N, N, P) */
    const float *w1, *b1;     /* (P, P), (P): the layer's 16-bit values, widened */
    const float *w2t, *b2;    /* (P, H): w2t[p][h] = w2[h][p]; (H) */
    const void *mask;         /* (B, N, N), float or bytes (mask_u8) */
    int mask_u8;
    float *ctx;               /* (B N, D) */
    int N, D, H, P, hd;
    int qtiles;               /* query tiles of 16 a batch entry */
    int pvec;                 /* P % 4 == 0 and pair16 8-byte aligned */
    int ks;                   /* blocks of a cluster splitting the keys (>= 1) */
    const unsigned char *vrow; /* (B N): nonzero where the row's V holds a NaN or Inf (the pack kernel's) */
};

/* Strides: a K or V row in halves (its 32-bit fragment reads and ldmatrix
 * rows fall on distinct banks: (stride / 2) % 8 == 4); a bias row in
 * floats (a half warp's float2 reads of rows g at keys 2t: 24 words
 * apart); a head's bias block (2 HS % 32 in {8, 24}: the MLP's stores of
 * heads 2t at keys g fall on distinct banks). */
__host__ __device__ constexpr int sgkc_ar16_kld(int H, int hdp)
{
    return H * hdp + 8;
}
#define SGKC_AR16_LDS 24
#define SGKC_AR16_HS (16 * SGKC_AR16_LDS + 4)

/* Shared memory of a block, in bytes: weights, the bias tile, two stages
 * of K and V. */
__host__ __device__ constexpr size_t sgkc_ar16_smem(int pcap, int ht, int H, int hdp)
{
    return sgkc_mh_smem_floats(pcap, ht) * 4 + (size_t)8 * ht * SGKC_AR16_HS * 4 +
           (size_t)2 * 2 * 16 * sgkc_ar16_kld(H, hdp) * 2;
}

__device__ __forceinline__ void sgkc_ldsm_x4(uint32_t (&r)[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void sgkc_ldsm_x4_trans(uint32_t (&r)[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* a 16-bit value's exponent all ones: Inf or NaN */
template <bool BF>
__device__ __forceinline__ bool sgkc_nonfinite16(uint32_t h)
{
    return BF ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u;
}

template <int HDP, int WH, int HPW, int PCAP, int HT, bool BF>
__global__ void __launch_bounds__(32 * WH) sgkc_attn_rel16_kernel(sgkc_ar16_args a)
{
    constexpr int NT = 32 * WH, BK = 16;
    constexpr int NQ = PCAP / 16;         /* the features' k-steps */
    constexpr int MPW = 16 / WH;          /* MLP tiles (queries) a warp per key tile */
    constexpr int KS = HDP / 16;          /* Q.K's k-steps */
    constexpr int ND = HDP / 8;           /* O's n-tiles */
    constexpr int LDS = SGKC_AR16_LDS, HS = SGKC_AR16_HS, SBS = 8 * HT * HS;
    static_assert(16 % WH == 0 && WH > 0 && HDP % 16 == 0 && PCAP % 16 == 0, "whole tiles");

    extern __shared__ __align__(16) float smem[];
    const float *b2s = smem + PCAP * sgkc_mh_ldh(PCAP) / 2 + PCAP + 8 * HT * sgkc_mt_ldw2(PCAP);
    float *Sb = smem + sgkc_mh_smem_floats(PCAP, HT); /* [stage][head][query][key] */
    uint16_t *KV = reinterpret_cast<uint16_t *>(Sb + SBS);

    const int N = a.N, H = a.H, P = a.P, hd = a.hd;
    const int KLD = sgkc_ar16_kld(H, HDP);   /* halves */
    const int RW = H * HDP;                  /* a row's q, k or v: halves */
    const int CPR = RW / 8;                  /* 16-byte chunks of one */
    uint16_t *Ks = KV, *Vs = KV + 2 * BK * KLD; /* [stage][key][col] */
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int rank = (int)(blockIdx.x % (unsigned)a.ks);
    const int64_t tile = blockIdx.x / (unsigned)a.ks;
    const int qt = (int)(tile % a.qtiles);
    const int64_t b = tile / a.qtiles;
    const int q0 = qt * 16;
    const uint16_t *qkv_b = a.qkv16 + (size_t)b * N * 3 * RW;
    int kb, ke; /* this block's key tiles */
    sgkc_attn_key_range((N + BK - 1) / BK, a.ks, rank, kb, ke);

    sgkc_mh_stage<PCAP, HT, BF, NT>(smem, a.w1, a.b1, a.w2t, a.b2, P, H, tid); /* the barrier is the key loop's first */
    sgkc_grid_wait(); /* qkv16 is an earlier kernel's */

    /* K and V of key tile kt into stage st; rows past N zero. The chunks
     * (32 rows: K's 16, then V's; CPR 16-byte chunks a row) a thread copies
     * are the same every tile, walked by adds from its first: a division
     * by the runtime row width for each chunk would cost more than the
     * copy it addresses. */
    const int dR = NT / CPR, dC = NT - dR * CPR, rr0 = tid / CPR, c00 = tid - rr0 * CPR;
    auto load_kv = [&](int kt, int st) {
        const int k0 = kt * BK;
        int rr = rr0, c = c00;
        while (rr < 2 * BK) {
            const int which = rr >= BK, r = rr - which * BK;
            const bool in = k0 + r < N;
            const uint16_t *src = qkv_b + (size_t)(in ? k0 + r : 0) * 3 * RW + (1 + which) * RW + 8 * c;
            uint16_t *dst = KV + ((which * 2 + st) * BK + r) * KLD + 8 * c;
            sgkc_cp_async16_zfill(dst, src, in ? 16 : 0);
            c += dC;
            rr += dR;
            if (c >= CPR) {
                c -= CPR;
                rr++;
            }
        }
    };
    /* whether V of key tile kt holds a NaN or Inf (the pack kernel's flag
     * of each row) */
    const unsigned char *vrow_b = a.vrow + (size_t)b * N;
    auto v_nonfinite = [&](int kt) {
        const int k = kt * BK + (lane & 15);
        return __any_sync(0xffffffffu, k < N && vrow_b[k] != 0) != 0;
    };

    if (kb < ke)
        load_kv(kb, kb & 1);
    sgkc_cp_commit();

    /* Q fragments of the warp's heads (rows q0 + g, + 8; zero past N) */
    uint32_t qf[HPW][KS][4];
    {
        const int r0 = q0 + g, r1 = r0 + 8;
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            const int h = warp + WH * i;
            const bool hv = h < H;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                const int c = (hv ? h : 0) * HDP + 16 * kk + 2 * t;
                const bool in0 = hv && r0 < N, in1 = hv && r1 < N;
                const uint32_t *p0 = reinterpret_cast<const uint32_t *>(qkv_b + (size_t)(in0 ? r0 : 0) * 3 * RW + c);
                const uint32_t *p1 = reinterpret_cast<const uint32_t *>(qkv_b + (size_t)(in1 ? r1 : 0) * 3 * RW + c);
                qf[i][kk][0] = in0 ? __ldg(p0) : 0u;
                qf[i][kk][1] = in1 ? __ldg(p1) : 0u;
                qf[i][kk][2] = in0 ? __ldg(p0 + 4) : 0u;
                qf[i][kk][3] = in1 ? __ldg(p1 + 4) : 0u;
            }
        }
    }

    /* features and mask bits of MLP tile (kt, mi): query q0 + warp + WH mi,
     * keys kt BK + g and + 8 */
    struct feats {
        uint2 x0[NQ], x1[NQ];
        unsigned m0, m1;
    };
    auto load_feats = [&](feats &f, int kt, int mi) {
        const int q = q0 + warp + WH * mi, k = kt * BK + g;
        const bool in0 = kt < ke && q < N && k < N, in1 = kt < ke && q < N && k + 8 < N;
        const int64_t r0 = ((int64_t)b * N + (q < N ? q : 0)) * N + k;
        sgkc_mh_load_row<NQ>(a, in0 ? r0 : 0, in0, t, f.x0);
        sgkc_mh_load_row<NQ>(a, in1 ? r0 + 8 : 0, in1, t, f.x1);
        f.m0 = in0 ? sgkc_mask_bits(a.mask, a.mask_u8, (size_t)r0) : 0u;
        f.m1 = in1 ? sgkc_mask_bits(a.mask, a.mask_u8, (size_t)r0 + 8) : 0u;
    };

    float o[HPW][ND][4];
    float mrow[HPW][2], lrow[HPW][2];
#pragma unroll
    for (int i = 0; i < HPW; i++) {
#pragma unroll
        for (int n = 0; n < ND; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
        mrow[i][0] = mrow[i][1] = SGKC_NEG_INF;
        lrow[i][0] = lrow[i][1] = 0.0f;
    }

    /* the MLP of this warp's tiles of key tile kt into the bias stage Sbs */
    feats cur;
    auto mlp = [&](int kt, float *Sbs) {
#pragma unroll 1
        for (int mi = 0; mi < MPW; mi++) {
            feats nxt;
            if (mi + 1 < MPW)
                load_feats(nxt, kt, mi + 1);
            else
                load_feats(nxt, kt + 1, 0);

            float ob[HT][4];
            sgkc_mh_tile<PCAP, HT, BF>(ob, cur.x0, cur.x1, smem, g, t);
            const int ql = warp + WH * mi;
            const bool e0 = sgkc_bits_edge(cur.m0), e1 = sgkc_bits_edge(cur.m1);
#pragma unroll
            for (int ht = 0; ht < HT; ht++) {
                const int h = 8 * ht + 2 * t;
                float *s0 = Sbs + h * HS + ql * LDS + g;
                s0[0] = e0 ? ob[ht][0] + b2s[h] : SGKC_NEG_INF;
                s0[HS] = e0 ? ob[ht][1] + b2s[h + 1] : SGKC_NEG_INF;
                s0[8] = e1 ? ob[ht][2] + b2s[h] : SGKC_NEG_INF;
                s0[HS + 8] = e1 ? ob[ht][3] + b2s[h + 1] : SGKC_NEG_INF;
            }
            cur = nxt;
        }
    };
    /* the attention of this warp's heads over key tile kt (stage st of K
     * and V, bias stage Sbs) */
    auto attend = [&](int kt, int st, const float *Sbs) {
        const uint16_t *Kst = Ks + st * BK * KLD, *Vst = Vs + st * BK * KLD;
        const bool vbad = v_nonfinite(kt);
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            const int h = warp + WH * i;
            if (h >= H)
                break;
            float s[2][4] = {};
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                /* matrices: keys 0-7 cols +0, keys 0-7 cols +8, keys 8-15 cols +0, keys 8-15 cols +8 */
                const int m = lane >> 3, r = lane & 7;
                uint32_t kf[4];
                sgkc_ldsm_x4(kf, Kst + ((m >> 1) * 8 + r) * KLD + h * HDP + 16 * kk + (m & 1) * 8);
                const uint32_t b0[2] = {kf[0], kf[1]}, b1[2] = {kf[2], kf[3]};
                sgkc_mma16_16x8x16<BF>(s[0], qf[i][kk], b0);
                sgkc_mma16_16x8x16<BF>(s[1], qf[i][kk], b1);
            }
            const float *sb = Sbs + h * HS + g * LDS + 2 * t;
            float mx0 = SGKC_NEG_INF, mx1 = SGKC_NEG_INF;
#pragma unroll
            for (int n = 0; n < 2; n++) {
                const float2 u0 = *reinterpret_cast<const float2 *>(sb + 8 * n);
                const float2 u1 = *reinterpret_cast<const float2 *>(sb + 8 * LDS + 8 * n);
                s[n][0] = sgkc_add_score(u0.x, s[n][0]);
                s[n][1] = sgkc_add_score(u0.y, s[n][1]);
                s[n][2] = sgkc_add_score(u1.x, s[n][2]);
                s[n][3] = sgkc_add_score(u1.y, s[n][3]);
                mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
                mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(mrow[i][0], mx0), mn1 = fmaxf(mrow[i][1], mx1);
            /* a row with no edge yet keeps m = -inf; its weights are 0 */
            const float mu0 = mn0 == SGKC_NEG_INF ? 0.0f : mn0, mu1 = mn1 == SGKC_NEG_INF ? 0.0f : mn1;
            const float al0 = sgkc_ex2((mrow[i][0] - mu0) * SGKC_LOG2E);
            const float al1 = sgkc_ex2((mrow[i][1] - mu1) * SGKC_LOG2E);
            mrow[i][0] = mn0;
            mrow[i][1] = mn1;
            float p[2][4];
#pragma unroll
            for (int n = 0; n < 2; n++) {
                p[n][0] = sgkc_ex2((s[n][0] - mu0) * SGKC_LOG2E);
                p[n][1] = sgkc_ex2((s[n][1] - mu0) * SGKC_LOG2E);
                p[n][2] = sgkc_ex2((s[n][2] - mu1) * SGKC_LOG2E);
                p[n][3] = sgkc_ex2((s[n][3] - mu1) * SGKC_LOG2E);
            }
            lrow[i][0] = lrow[i][0] * al0 + (p[0][0] + p[0][1] + p[1][0] + p[1][1]);
            lrow[i][1] = lrow[i][1] * al1 + (p[0][2] + p[0][3] + p[1][2] + p[1][3]);
#pragma unroll
            for (int n = 0; n < ND; n++) {
                o[i][n][0] *= al0;
                o[i][n][1] *= al0;
                o[i][n][2] *= al1;
                o[i][n][3] *= al1;
            }
            if (!vbad) {
                const uint32_t pa[4] = {sgkc_pack16<BF>(p[0][0], p[0][1]), sgkc_pack16<BF>(p[0][2], p[0][3]),
                                        sgkc_pack16<BF>(p[1][0], p[1][1]), sgkc_pack16<BF>(p[1][2], p[1][3])};
                /* matrices: keys 0-7 and 8-15 at cols 8n, then at cols 8n + 8 */
                const int m = lane >> 3, r = lane & 7;
#pragma unroll
                for (int n = 0; n < ND; n += 2) {
                    uint32_t vb[4];
                    sgkc_ldsm_x4_trans(vb, Vst + ((m & 1) * 8 + r) * KLD + h * HDP + 8 * (n + (m >> 1)));
                    const uint32_t v0[2] = {vb[0], vb[1]}, v1[2] = {vb[2], vb[3]};
                    sgkc_mma16_16x8x16<BF>(o[i][n], pa, v0);
                    sgkc_mma16_16x8x16<BF>(o[i][n + 1], pa, v1);
                }
            } else {
                /* key by key on FFMA, weights of 0 skipped: row g's and
                 * g + 8's weight of key k from the quad lane that holds it */
#pragma unroll
                for (int k = 0; k < BK; k++) {
                    const int src = (lane & ~3) | ((k & 7) >> 1);
                    const float pg = __shfl_sync(0xffffffffu, p[k >> 3][k & 1], src);
                    const float pg8 = __shfl_sync(0xffffffffu, p[k >> 3][2 + (k & 1)], src);
                    const uint16_t *vr = Vst + k * KLD + h * HDP + 2 * t;
#pragma unroll
                    for (int n = 0; n < ND; n++) {
                        const float v0 = sgkc_widen16(vr[8 * n], !BF), v1 = sgkc_widen16(vr[8 * n + 1], !BF);
                        o[i][n][0] = sgkc_pv<true>(pg, v0, o[i][n][0]);
                        o[i][n][1] = sgkc_pv<true>(pg, v1, o[i][n][1]);
                        o[i][n][2] = sgkc_pv<true>(pg8, v0, o[i][n][2]);
                        o[i][n][3] = sgkc_pv<true>(pg8, v1, o[i][n][3]);
                    }
                }
            }
        }
    };

    load_feats(cur, kb, 0);
    __syncthreads(); /* the weights */
    for (int kt = kb; kt < ke; kt++) {
        const int st = kt & 1;
        if (kt + 1 < ke)
            load_kv(kt + 1, st ^ 1);
        sgkc_cp_commit();
        mlp(kt, Sb);
        sgkc_cp_wait<1>();
        __syncthreads(); /* Sb written, this stage arrived */
        attend(kt, st, Sb);
        __syncthreads(); /* Sb and this stage are free */
    }
    sgkc_cp_wait<0>();

    const int r0 = q0 + g, r1 = r0 + 8;
    /* f(i, h) for each of the warp's heads */
    auto each_head = [&](auto f) {
#pragma unroll
        for (int i = 0; i < HPW; i++) {
            const int h = warp + WH * i;
            if (h >= H)
                break;
            f(i, h);
        }
    };
    each_head([&](int i, int) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            lrow[i][e] += __shfl_xor_sync(0xffffffffu, lrow[i][e], 1);
            lrow[i][e] += __shfl_xor_sync(0xffffffffu, lrow[i][e], 2);
        }
    });
    if (a.ks > 1) {
        /* O (unnormalised, its head dims unpadded), m and l of the block's
         * rows into its own shared memory (K/V's and the bias tile's, free
         * after the last tile's barrier), merged as attn_tiled.cuh merges */
        const int D = a.D, LDO = D + 4;
        float *Os = reinterpret_cast<float *>(KV), *Ms = Sb, *Ls = Sb + 16 * H;
        each_head([&](int i, int h) {
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int c = 8 * n + 2 * t;
                float *o0 = Os + g * LDO + h * hd + c;
                if (c < hd) {
                    o0[0] = o[i][n][0];
                    o0[8 * LDO] = o[i][n][2];
                }
                if (c + 1 < hd) {
                    o0[1] = o[i][n][1];
                    o0[8 * LDO + 1] = o[i][n][3];
                }
            }
            if (t == 0) {
                Ms[h * 16 + g] = mrow[i][0];
                Ms[h * 16 + g + 8] = mrow[i][1];
                Ls[h * 16 + g] = lrow[i][0];
                Ls[h * 16 + g + 8] = lrow[i][1];
            }
        });
        sgkc_attn_merge<16, NT>(a, Os, LDO, Ms, Ls, rank, b, q0, 0, D);
        return;
    }

    /* ctx = O / l (0 for a row without an edge) */
    each_head([&](int i, int h) {
        const float l0 = lrow[i][0], l1 = lrow[i][1];
        /* l = 0: no edge; a NaN l (a row that met a NaN) stays NaN */
        const bool z0 = l0 == 0.0f, z1 = l1 == 0.0f;
        const float i0 = 1.0f / l0, i1 = 1.0f / l1;
        float *c0 = a.ctx + ((size_t)b * N + r0) * a.D + h * hd, *c1 = c0 + (size_t)8 * a.D;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int c = 8 * n + 2 * t;
            if (r0 < N) {
                if (c < hd)
                    c0[c] = z0 ? 0.0f : o[i][n][0] * i0;
                if (c + 1 < hd)
                    c0[c + 1] = z0 ? 0.0f : o[i][n][1] * i0;
            }
            if (r1 < N) {
                if (c < hd)
                    c1[c] = z1 ? 0.0f : o[i][n][2] * i1;
                if (c + 1 < hd)
                    c1[c + 1] = z1 ? 0.0f : o[i][n][3] * i1;
            }
        }
    });
}

/* Q, K and V rows (B N, 3D floats, q pre-scaled) as the layer's 16-bit
 * values in the kernel's layout (B N, 3, H, hdp), zero past hd, and for
 * each V row whether it holds a NaN or Inf (vrow): one block a row's q, k
 * or v (r3 = 3 row + which), its threads over the halves in pairs. */
template <bool BF>
__global__ void __launch_bounds__(128) sgkc_ar16_pack_kernel(const float *qkv, uint16_t *qkv16, unsigned char *vrow,
                                                           int D, int H, int hd, int hdp)
{
    sgkc_grid_wait(); /* qkv is the GEMM's before */
    const size_t r3 = blockIdx.x;
    const float *src = qkv + r3 * D;
    uint32_t *dst = reinterpret_cast<uint32_t *>(qkv16 + r3 * H * hdp);
    bool bad = false;
    for (int j = (int)threadIdx.x; j < H * hdp / 2; j += 128) {
        const int h = 2 * j / hdp, c = 2 * j - h * hdp;
        const float x0 = c < hd ? __ldg(src + h * hd + c) : 0.0f;
        const float x1 = c + 1 < hd ? __ldg(src + h * hd + c + 1) : 0.0f;
        const uint32_t v = sgkc_pack16<BF>(x0, x1);
        bad |= sgkc_nonfinite16<BF>(v & 0xffffu) | sgkc_nonfinite16<BF>(v >> 16);
        dst[j] = v;
    }
    const int any = __syncthreads_or(bad);
    if (threadIdx.x == 0 && r3 % 3 == 2)
        vrow[r3 / 3] = any ? 1 : 0;
}

#endif
