/* tuned-tc: the layer on the tensor cores in 3xTF32, at any shape whose
 * head dim is at most 256 and P at most 128. Three launches: LayerNorm and
 * the Q/K/V projection (wg_gemm.cuh, or tc_gemm.cuh: tc_gemm_any),
 * attention with the relation MLP on the fly (tc_attn.cuh), the output
 * projection with the residual (the same GEMM). The workspace holds qkv (B*N, 3D) and ctx (B*N, D). */
#include "cuda_layer.h"
#include "tc.h"
#include "tc_attn.cuh"
#include "tc_gemm.cuh"
#include "wg_gemm.cuh"

#include <limits.h>
#include <math.h>
#include <string.h>

static const size_t TC_ALIGN = 256;

/* wg_gemm.cuh where the build has sm_90a code, the device is compute
 * capability 9.0 with the shared memory for its tiles and the driver can
 * make tensor maps; the layer then keeps its projections' weights as that
 * kernel takes them (L->wg). */
static bool wg_device(const sgkc_layer *L)
{
#if defined(SGKC_HAVE_SM90A)
    return L->cc_major == 9 && L->cc_minor == 0 && SGKC_WG_SMEM <= L->smem_optin && sgkc_wg_encoder();
#else
    (void)L;
    return false;
#endif
}

/* A 16-bit layer's output projection takes its own dtype's operands on
 * wg_gemm.cuh, its LayerNorm'd Q/K/V projection one TF32 pass (gamma and
 * beta folded into W, as for float layers: the LayerNorm'd A on 16-bit
 * operands measured slower) */
static bool wo_h16(const sgkc_layer *L) { return L->dtype != SGK_DTYPE_F32; }
static int wg_ar(const sgkc_layer *L, bool ln)
{
    if (L->dtype == SGK_DTYPE_F32)
        return SGKC_WG_X3;
    return ln ? SGKC_WG_TF32 : L->dtype == SGK_DTYPE_F16 ? SGKC_WG_F16 : SGKC_WG_BF16;
}

size_t sgkc_tc_wg_floats(const sgkc_layer *L)
{
    const int D = L->D;
    return wg_device(L) ? sgkc_wg_floats(3 * D, D) + sgkc_wg_floats(D, D, wo_h16(L)) : 0;
}

cudaError_t sgkc_tc_wg_prep(const sgkc_layer *L, cudaStream_t s)
{
    if (!L->wg)
        return cudaSuccess;
    const int D = L->D;
    float *wo = L->wg + sgkc_wg_floats(3 * D, D);
    const cudaError_t e = sgkc_wg_prep(L->gen + L->gen_off.wqkv, L->gamma, L->beta, 3 * D, D, L->wg, s);
    if (e != cudaSuccess)
        return e;
    if (wo_h16(L)) /* the weights as given: their widened floats are exact */
        return sgkc_wg_prep16(L->gen + L->gen_off.wo, D, D, L->dtype == SGK_DTYPE_F16, wo, s);
    return sgkc_wg_prep(L->gen + L->gen_off.wo, nullptr, nullptr, D, D, wo, s);
}

/* Whether g is one of the layer's two projections with its weights in
 * L->wg (*w), on a grid wg_gemm.cuh takes: its blocks (128 x *bn tiles,
 * times the blocks its split over k, *ks, gives each) for at least a
 * quarter of the SMs. On fewer, tc_gemm.cuh's split over k, in smaller
 * tiles, keeps more SMs busy. */
static bool wg_weights(const sgkc_layer *L, const sgkc_tc_gemm_args &g, sgkc_wg_weights *w, int *ks, int *bn)
{
    const int D = L->D;
    if (!L->wg || !sgkc_wg_takes(g) || g.K != D)
        return false;
    *ks = sgkc_wg_ks(g.M, g.Nc, g.K, L->sm_count);
    *bn = *ks > 1 ? 128 : sgkc_wg_bn(g.M, g.Nc, L->sm_count, g.gamma != nullptr);
    if (4 * *ks * ((g.M + SGKC_WG_BM - 1) / SGKC_WG_BM) * (((int64_t)g.Nc + *bn - 1) / *bn) < L->sm_count)
        return false;
    if (g.W == L->gen + L->gen_off.wqkv && g.Nc == 3 * D && g.gamma == L->gamma && g.beta == L->beta) {
        *w = sgkc_wg_weights_at(L->wg, 3 * D, D);
        return true;
    }
    if (g.W == L->gen + L->gen_off.wo && g.Nc == D && !g.gamma) {
        *w = sgkc_wg_weights_at(L->wg + sgkc_wg_floats(3 * D, D), D, D, wo_h16(L));
        return true;
    }
    return false;
}

/* Float layers' projections in 3xTF32; 16-bit layers' in one TF32 pass or
 * (wg_gemm.cuh's output projection) on their dtype's operands */
static cudaError_t tc_gemm_any(const sgkc_layer *L, sgkc_tc_gemm_args g, cudaStream_t s)
{
    sgkc_wg_weights w;
    int ks, bn;
    g.one_pass = L->dtype != SGK_DTYPE_F32;
    if (wg_weights(L, g, &w, &ks, &bn))
        return sgkc_wg_gemm(g, w, bn, ks, wg_ar(L, g.gamma != nullptr), true, s);
    return sgkc_tc_gemm(g, L->sm_count, L->cc_major, s);
}

/* The output projection rounds a 16-bit layer's out itself. */
int sgkc_tc_out16(const sgkc_layer *L, const sgk_backend_plan *, const sgkc_fwd *)
{
    return L->dtype != SGK_DTYPE_F32;
}

/* The plan holds the attention instance, picked once a call. */
int sgkc_tc_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    if (L->cc_major < 8 || N > INT_MAX || B * N > INT_MAX / 4 || sgkc_tc_gemm_smem() > L->smem_optin)
        return 0;
    if ((B * N + 63) / 64 > INT_MAX || (3 * (int64_t)L->D + 63) / 64 > 65535)
        return 0;
    const sgkc_tca_inst *inst = sgkc_tca_plan(L->hd, L->P, L->smem_optin, B, L->H);
    if (!inst)
        return 0;
    sgkc_plan_put(inst, plan);
    return 1;
}

size_t sgkc_tc_workspace(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *)
{
    return (size_t)B * (size_t)N * 4u * (size_t)L->D * sizeof(float) + TC_ALIGN;
}

cudaError_t sgkc_tc_prepare(const sgkc_layer *L)
{
    if (L->cc_major < 8)
        return cudaSuccess;
    cudaError_t e = sgkc_tc_gemm_smem() <= L->smem_optin ? sgkc_tc_gemm_prepare() : cudaSuccess;
    if (e == cudaSuccess && wg_device(L))
        e = sgkc_wg_gemm_prepare();
    return e != cudaSuccess ? e : sgkc_tca_prepare(L->smem_optin);
}

cudaError_t sgkc_tc_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    const int D = L->D;
    const int64_t M = f->B * f->N;
    uintptr_t base = ((uintptr_t)f->ws + TC_ALIGN - 1) & ~(uintptr_t)(TC_ALIGN - 1);
    float *qkv = (float *)base, *ctx = qkv + (size_t)M * 3u * (size_t)D;

    sgkc_tc_gemm_args g;
    memset(&g, 0, sizeof g);
    g.A = f->nodes;
    g.W = L->gen + L->gen_off.wqkv; /* Wq | Wk | Wv as given: [n][k] */
    g.C = qkv;
    g.M = M;
    g.Nc = 3 * D;
    g.K = D;
    g.gamma = L->gamma;
    g.beta = L->beta;
    g.eps = L->eps;
    g.scale_cols = D;
    g.scale = 1.0f / sqrtf((float)L->hd);
    g.ln_stats = sgkc_ln_stats_in(ctx, (size_t)M * (size_t)D, M); /* free until the attention writes it */
    cudaError_t e = tc_gemm_any(L, g, f->stream);
    if (e != cudaSuccess)
        return e;

    sgkc_tca_args a;
    a.qkv = qkv;
    a.pair = f->pair;
    a.mask = f->mask;
    a.mask_u8 = f->mask_u8;
    a.w1 = L->gen + L->gen_off.w1;
    a.b1 = L->gen + L->gen_off.b1;
    a.w2 = L->gen + L->gen_off.w2;
    a.b2 = L->gen + L->gen_off.b2;
    a.ctx = ctx;
    a.N = (int)f->N;
    a.D = D;
    a.H = L->H;
    a.P = L->P;
    a.hd = L->hd;
    e = sgkc_tca_launch(sgkc_plan_get<const sgkc_tca_inst *>(plan), a, f->B, f->stream);
    if (e != cudaSuccess)
        return e;

    memset(&g, 0, sizeof g);
    g.A = ctx;
    g.W = L->gen + L->gen_off.wo;
    g.C = f->out;
    if (f->out16) { /* sgkc_tc_out16 */
        g.C16 = (uint16_t *)f->out16;
        g.k16 = L->dtype == SGK_DTYPE_F16 ? 2 : 1;
    }
    g.M = M;
    g.Nc = D;
    g.K = D;
    g.residual = f->nodes;
    g.scale = 1.0f;
    return tc_gemm_any(L, g, f->stream);
}

static sgkc_tc_gemm_args tc_args(const sgkc_gemm_args &p)
{
    sgkc_tc_gemm_args g;
    memset(&g, 0, sizeof g);
    g.A = p.A;
    g.W = p.Wnk;
    g.C = p.C;
    g.M = p.M;
    g.Nc = p.Nc;
    g.K = p.K;
    g.gamma = p.gamma;
    g.beta = p.beta;
    g.eps = p.eps;
    g.residual = p.residual;
    g.scale_cols = p.scale_cols;
    g.scale = p.scale;
    g.ln_stats = p.ln_stats;
    g.C16 = p.C16;
    g.k16 = p.k16;
    return g;
}

cudaError_t sgkc_tc_project(const sgkc_layer *L, const sgkc_gemm_args &p, cudaStream_t s)
{
    return tc_gemm_any(L, tc_args(p), s);
}

cudaError_t sgkc_tc_product(const sgkc_layer *L, const float *A, int lda, const float *W, int ldw, float *C, int ldc,
                            const float *residual, int64_t M, int Nc, int K, bool w_late, cudaStream_t s)
{
    sgkc_tc_gemm_args g;
    memset(&g, 0, sizeof g);
    g.A = A;
    g.W = W;
    g.C = C;
    g.M = M;
    g.Nc = Nc;
    g.K = K;
    g.residual = residual;
    g.scale = 1.0f;
    g.lda = lda;
    g.ldw = ldw;
    g.ldc = ldc;
    g.w_late = w_late;
    if (!sgkc_tc_gemm_fits(g))
        return cudaErrorInvalidValue;
    return sgkc_tc_gemm(g, L->sm_count, L->cc_major, s);
}

bool sgkc_tc_project_wg(const sgkc_layer *L, const sgkc_gemm_args &p)
{
    sgkc_wg_weights w;
    int ks, bn;
    return wg_weights(L, tc_args(p), &w, &ks, &bn);
}

bool sgkc_tc_project_fits(const sgkc_layer *L)
{
    return L->cc_major >= 8 && sgkc_tc_gemm_smem() <= L->smem_optin;
}

int sgkc_tc_project_ksplit(const sgkc_layer *L, int64_t M, int Nc, int K)
{
    const int plan = sgkc_tc_gemm_plan(M, Nc, K, L->sm_count, L->cc_major);
    return plan > 0 ? plan : 1;
}
