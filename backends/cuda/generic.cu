/* The generated kernels (kernels/relation.sgk emitted for CUDA by sgkgen.py)
 * as variants "small" and "tiled" of the CUDA backend: the
 * same logic the cpu, hip and opencl backends run, with the host plan they
 * share (kernels/plan.c). The tuned variants come first in the table; these
 * serve as the portable baseline and are tested like every variant. */
#include <limits.h>

#include "cuda_layer.h"
#include "generic.h"
#include "relation_cuda.cu"

/* Work-items per group: a multiple of the warp size, never tied to D. */
static const int k_threads = 256;

sgk_gen_packed sgkc_generic_layout(int D, int H, int P)
{
    return sgk_gen_layout(D, H, P, SGK_PAD, 64);
}

/* 64 x 64 projection tiles (16 x 16 register tiles of 4 x 4), 16 queries
 * against 32 keys, shrunk by the plan to the shared memory. */
static int plan_for(const sgkc_layer *L, sgk_plan_kind kind, int64_t B, int64_t N, sgk_plan *p)
{
    /* attn groups: two an SM, the keys split where query tiles are fewer */
    const sgk_limits lim = {L->smem_optin, INT_MAX, SGK_PAD, 256, 64, 64, 16, 32, L->dtype != SGK_DTYPE_F32,
                            2 * (int64_t)L->sm_count};
    return sgk_plan_make(kind, B, N, L->D, L->H, L->P, &lim, p);
}

cudaError_t sgkc_generic_prepare(int smem_limit)
{
    const void *fns[] = {(const void *)sgk_k_fused, (const void *)sgk_k_attn};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        const cudaError_t e = cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

int sgkc_generic_small_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    sgk_plan p;
    if (!plan_for(L, SGK_PLAN_SMALL, B, N, &p))
        return 0;
    sgk_plan_store(&p, plan);
    return 1;
}

int sgkc_generic_tiled_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    sgk_plan p;
    if (!plan_for(L, SGK_PLAN_TILED, B, N, &p))
        return 0;
    sgk_plan_store(&p, plan);
    return 1;
}

size_t sgkc_generic_workspace(const sgkc_layer *, int64_t, int64_t, const sgk_backend_plan *plan)
{
    sgk_plan p;
    sgk_plan_load(plan, &p);
    return p.workspace_bytes;
}

/* The float kernels on f (nodes and out float; pair features of pair_dt). */
static cudaError_t run_float(const sgkc_layer *L, const sgk_plan &p, const sgkc_fwd *f, int pair_dt)
{
    const float *w = L->kern;
    const sgk_gen_packed &o = L->kern_off;
    if (p.kind == SGK_PLAN_SMALL)
        return sgk_launch_fused((int)p.B, 1, k_threads, p.smem_fused * sizeof(float), f->stream, f->nodes, f->pair, pair_dt,
                                (const uchar *)f->mask, f->mask_u8, w + o.gamma, w + o.beta, w + o.wqkv, w + o.w1,
                                p.ldp, w + o.b1, w + o.w2, p.ldh, w + o.b2, w + o.wo, p.ldo, f->out, p.N, p.D, p.H,
                                p.P, p.ldk, p.ldc, p.tq, p.tqp, p.tk, p.qc, L->eps, p.scale);
    float *ws = (float *)f->ws;
    const sgk_off ctx0 = (sgk_off)(p.ctx_offset / sizeof(float));
    const int rows = (int)(p.B * p.N);
    /* the LayerNorm'd rows in the context's place, until attn writes it */
    cudaError_t e = sgk_launch_norm((int)p.groups_norm, 1, k_threads, p.smem_norm * sizeof(float), f->stream,
                                    f->nodes, w + o.gamma, w + o.beta, L->eps, ws, ctx0, p.ldc, rows, p.D, p.rt);
    if (e == cudaSuccess)
        e = sgk_launch_proj((int)p.groups_rows, (int)p.groups_qkv, k_threads, 0, f->stream, ws, ctx0, p.ldc,
                            w + o.wqkv, p.ldk, 0, ws, ws, 0, p.ldk, rows, p.D, p.ldk, p.mt, p.nt);
    if (e == cudaSuccess)
        e = sgk_launch_attn((int)p.groups_attn, 1, k_threads, p.smem_attn * sizeof(float), f->stream, ws, p.ldk,
                            f->pair, pair_dt, (const uchar *)f->mask, f->mask_u8, w + o.w1, p.ldp, w + o.b1, w + o.w2, p.ldh,
                            w + o.b2, ws, ctx0, p.ldc, p.N, p.D, p.H, p.P, p.tq, p.tqp, p.tk, p.qc, (int)p.groups_q,
                            p.scale, p.ks, (sgk_off)(p.part_offset / sizeof(float)), rows, ws, 0);
    if (e == cudaSuccess && p.ks > 1)
        e = sgk_launch_combine((int)p.groups_norm, 1, k_threads, 0, f->stream, ws, ctx0, p.ldc,
                               (sgk_off)(p.part_offset / sizeof(float)), p.ks, rows, p.D, p.H, p.rt, ws, 0, p.N);
    if (e == cudaSuccess)
        e = sgk_launch_proj((int)p.groups_rows, (int)p.groups_out, k_threads, 0, f->stream, ws, ctx0, p.ldc, w + o.wo,
                            p.ldo, 1, f->nodes, f->out, 0, p.D, rows, p.D, p.D, p.mt, p.nt);
    return e;
}

/* n elements converted between float and the 16-bit dtype (widen: 16-bit
 * src to float dst; else float src to 16-bit dst). */
static cudaError_t convert(int widen, sgk_dtype dtype, const void *src, void *dst, size_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    const int per = 16 * k_threads;
    const size_t groups = (n + per - 1) / per;
    if (groups > INT_MAX)
        return cudaErrorInvalidValue; /* the core's element limit keeps n far below this */
    const int kind = dtype == SGK_DTYPE_F16;
    return widen ? sgk_launch_widen16((int)groups, 1, k_threads, 0, s, (const unsigned short *)src, (float *)dst,
                                      (sgk_off)n, kind, per)
                 : sgk_launch_narrow16((int)groups, 1, k_threads, 0, s, (const float *)src, (unsigned short *)dst,
                                       (sgk_off)n, kind, per);
}

cudaError_t sgkc_generic_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    sgk_plan p;
    sgk_plan_load(plan, &p);
    if (L->dtype == SGK_DTYPE_F32)
        return run_float(L, p, f, SGK_DTYPE_F32);
    /* A 16-bit call: nodes widened into the workspace (where the plan puts
     * them), the float kernels, out narrowed from the workspace. */
    const size_t n = (size_t)p.B * (size_t)p.N * (size_t)L->D;
    sgkc_fwd g = *f;
    g.nodes = (const float *)((const char *)f->ws + p.wide_nodes);
    g.out = (float *)((char *)f->ws + p.wide_out);
    cudaError_t e = convert(1, L->dtype, f->nodes, (void *)g.nodes, n, f->stream);
    if (e == cudaSuccess)
        e = run_float(L, p, &g, (int)L->dtype);
    if (e == cudaSuccess)
        e = convert(0, L->dtype, g.out, f->out, n, f->stream);
    return e;
}
