/* The generated kernels (kernels/relation.sgk emitted for CUDA by sgkgen.py)
 * as variants "small" and "tiled" of the CUDA backend: the
 * same logic the cpu, hip and opencl backends run, with the host plan they
 * share (kernels/plan.c). The tuned variants come first in the table; these
 * serve as the portable baseline and are tested like every variant. */
#include <limits.h>

#include "cuda_layer.h"
#include "generic.h"
#include "relation_cuda.cu"
#include "tc.h"

/* Work-items per group: a multiple of the warp size, never tied to D; a
 * context may ask for fewer (the kernels hold no warp size). */
static const int k_threads = 256;

int sgkc_generic_threads(int cap)
{
    return cap > 0 && cap < k_threads ? cap : k_threads;
}

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
    const void *fns[] = {(const void *)sgk_k_fused, (const void *)sgk_k_attn, (const void *)sgk_k_attn_bwd,
                         (const void *)sgk_k_ln_wgrad};
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

static cudaError_t run_tiled(const sgkc_layer *L, const sgk_plan &p, const sgkc_fwd *f, int pair_dt, sgk_off xn0,
                             float *lse, bool tc);

/* The float kernels on f (nodes and out float; pair features of pair_dt). */
static cudaError_t run_float(const sgkc_layer *L, const sgk_plan &p, const sgkc_fwd *f, int pair_dt)
{
    const float *w = L->kern;
    const sgk_gen_packed &o = L->kern_off;
    if (p.kind == SGK_PLAN_SMALL)
        return sgk_launch_fused((int)p.B, 1, L->gen_threads, p.smem_fused * sizeof(float), f->stream, f->nodes, f->pair, pair_dt,
                                (const uchar *)f->mask, f->mask_u8, w + o.gamma, w + o.beta, w + o.wqkv, w + o.w1,
                                p.ldp, w + o.b1, w + o.w2, p.ldh, w + o.b2, w + o.wo, p.ldo, f->out, p.N, p.D, p.H,
                                p.P, p.ldk, p.ldc, p.tq, p.tqp, p.tk, p.qc, L->eps, p.scale);
    /* the LayerNorm'd rows in the context's place, until attn writes it */
    return run_tiled(L, p, f, pair_dt, (sgk_off)(p.ctx_offset / sizeof(float)), NULL, false);
}

/* The training calls run their products (the projections, dctx, dxn and
 * the weight gradients) on tc_gemm.cuh's tensor-core GEMM where the device
 * has it, the rest on the generated kernels; the "tiled" variant stays the
 * generated kernels alone, as on every backend. */
static bool train_tc(const sgkc_layer *L)
{
    return sgkc_tc_project_fits(L);
}

/* Columns [c0, ld) of rows rows of ld floats from buf on: zero (the padding
 * that the generated kernels read past a row's last output and that their
 * own products store as zeros) */
static cudaError_t zero_cols(float *buf, int ld, int c0, int rows, cudaStream_t s)
{
    if (c0 >= ld || rows <= 0)
        return cudaSuccess;
    return cudaMemset2DAsync(buf + c0, (size_t)ld * sizeof(float), 0, (size_t)(ld - c0) * sizeof(float), (size_t)rows, s);
}

/* The tiled plan p on f: LayerNorm'd rows into the workspace from float
 * xn0 on, Q/K/V, the context (each (head, row)'s log-sum-exp into lse
 * where it is not NULL), then out where f->out is not NULL; the two
 * projections on the tensor-core GEMM where tc. */
static cudaError_t run_tiled(const sgkc_layer *L, const sgk_plan &p, const sgkc_fwd *f, int pair_dt, sgk_off xn0,
                             float *lse, bool tc)
{
    const float *w = L->kern;
    const sgk_gen_packed &o = L->kern_off;
    float *ws = (float *)f->ws;
    const sgk_off ctx0 = (sgk_off)(p.ctx_offset / sizeof(float));
    const int rows = (int)(p.B * p.N), lse_on = lse != NULL;
    cudaError_t e = sgk_launch_norm((int)p.groups_norm, 1, L->gen_threads, p.smem_norm * sizeof(float), f->stream,
                                    f->nodes, w + o.gamma, w + o.beta, L->eps, ws, xn0, p.ldc, rows, p.D, p.rt);
    if (e == cudaSuccess && tc) {
        e = sgkc_tc_product(L, ws + xn0, p.ldc, L->gen + L->gen_off.wqkv, p.D, ws, p.ldk, NULL, rows, 3 * p.D, p.D,
                            false, f->stream);
        if (e == cudaSuccess)
            e = zero_cols(ws, p.ldk, 3 * p.D, rows, f->stream);
    } else if (e == cudaSuccess) {
        e = sgk_launch_proj((int)p.groups_rows, (int)p.groups_qkv, L->gen_threads, 0, f->stream, ws, xn0, p.ldc,
                            w + o.wqkv, p.ldk, 0, ws, ws, 0, p.ldk, rows, p.D, p.ldk, p.mt, p.nt);
    }
    if (e == cudaSuccess)
        e = sgk_launch_attn((int)p.groups_attn, 1, L->gen_threads, p.smem_attn * sizeof(float), f->stream, ws, p.ldk,
                            f->pair, pair_dt, (const uchar *)f->mask, f->mask_u8, w + o.w1, p.ldp, w + o.b1, w + o.w2, p.ldh,
                            w + o.b2, ws, ctx0, p.ldc, p.N, p.D, p.H, p.P, p.tq, p.tqp, p.tk, p.qc, (int)p.groups_q,
                            p.scale, p.ks, (sgk_off)(p.part_offset / sizeof(float)), rows,
                            lse_on && p.ks == 1 ? lse : ws, lse_on && p.ks == 1);
    if (e == cudaSuccess && p.ks > 1)
        e = sgk_launch_combine((int)p.groups_norm, 1, L->gen_threads, 0, f->stream, ws, ctx0, p.ldc,
                               (sgk_off)(p.part_offset / sizeof(float)), p.ks, rows, p.D, p.H, p.rt,
                               lse_on ? lse : ws, lse_on, p.N);
    if (e == cudaSuccess && f->out != NULL && tc)
        e = sgkc_tc_product(L, ws + ctx0, p.ldc, L->gen + L->gen_off.wo, p.D, f->out, p.D, f->nodes, rows, p.D, p.D,
                            false, f->stream);
    else if (e == cudaSuccess && f->out != NULL)
        e = sgk_launch_proj((int)p.groups_rows, (int)p.groups_out, L->gen_threads, 0, f->stream, ws, ctx0, p.ldc, w + o.wo,
                            p.ldo, 1, f->nodes, f->out, 0, p.D, rows, p.D, p.D, p.mt, p.nt);
    return e;
}

static cudaError_t convert(int threads, int widen, sgk_dtype dtype, const void *src, void *dst, size_t n,
                           cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    /* one element a thread: a thread's elements would be a chain of load,
     * store, load (src and dst may alias, so no load moves above a store),
     * one memory latency each */
    const int per = threads;
    const size_t groups = (n + per - 1) / per;
    if (groups > INT_MAX)
        return cudaErrorInvalidValue; /* the core's element limit keeps n far below this */
    const int kind = dtype == SGK_DTYPE_F16;
    return widen ? sgk_launch_widen16((int)groups, 1, threads, 0, s, (const unsigned short *)src, (float *)dst,
                                      (sgk_off)n, kind, per)
                 : sgk_launch_narrow16((int)groups, 1, threads, 0, s, (const float *)src, (unsigned short *)dst,
                                       (sgk_off)n, kind, per);
}

cudaError_t sgkc_convert16(const sgkc_layer *L, int widen, const void *src, void *dst, size_t n, cudaStream_t s)
{
    return convert(L->gen_threads, widen, L->dtype, src, dst, n, s);
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
    cudaError_t e = convert(L->gen_threads, 1, L->dtype, f->nodes, (void *)g.nodes, n, f->stream);
    if (e == cudaSuccess)
        e = run_float(L, p, &g, (int)L->dtype);
    if (e == cudaSuccess)
        e = convert(L->gen_threads, 0, L->dtype, g.out, f->out, n, f->stream);
    return e;
}

/* ---- the training calls: kernels/train.sgk on the tiled plan ---------- */

static int train_plan_for(const sgkc_layer *L, int64_t B, int64_t N, sgk_train_plan *tp)
{
    const sgk_limits lim = {L->smem_optin, INT_MAX, SGK_PAD, 256, 64, 64, 16, 32, L->dtype != SGK_DTYPE_F32,
                            2 * (int64_t)L->sm_count};
    return sgk_train_plan_make(B, N, L->D, L->H, L->P, &lim, tp);
}

size_t sgkc_train_workspace(const sgkc_layer *L, int64_t B, int64_t N)
{
    sgk_train_plan tp;
    return train_plan_for(L, B, N, &tp) ? tp.workspace_bytes : SIZE_MAX;
}

/* 16-bit layers: nodes widened into the workspace, out computed in float
 * there and rounded, as the forward does. */
cudaError_t sgkc_train_forward(const sgkc_layer *L, const sgkc_fwd *f, float *saved)
{
    sgk_train_plan tp;
    if (!train_plan_for(L, f->B, f->N, &tp))
        return cudaErrorInvalidValue; /* the core asked for the workspace size first */
    const sgk_off xn0 = (sgk_off)(tp.fwd.ctx_offset / sizeof(float));
    if (L->dtype == SGK_DTYPE_F32)
        return run_tiled(L, tp.fwd, f, SGK_DTYPE_F32, xn0, saved, train_tc(L));
    const size_t n = (size_t)f->B * (size_t)f->N * (size_t)L->D;
    sgkc_fwd g = *f;
    g.nodes = (const float *)((const char *)f->ws + tp.fwd.wide_nodes);
    g.out = (float *)((char *)f->ws + tp.fwd.wide_out);
    cudaError_t e = convert(L->gen_threads, 1, L->dtype, f->nodes, (void *)g.nodes, n, f->stream);
    if (e == cudaSuccess)
        e = run_tiled(L, tp.fwd, &g, (int)L->dtype, xn0, saved, train_tc(L));
    if (e == cudaSuccess)
        e = convert(L->gen_threads, 0, L->dtype, g.out, f->out, n, f->stream);
    return e;
}

static cudaError_t backward_float(const sgkc_layer *L, const sgk_train_plan &tp, const sgkc_fwd *f,
                                  const float *saved, const float *d_out, const sgk_grads *g);

/* out = in^T: in (rows, cols) with rows ldi floats apart, out (cols, rows)
 * with rows ldo apart. The weight gradients' sums run over the rows, which
 * the tensor-core GEMM takes as its k, contiguous. */
__global__ void __launch_bounds__(256) sgkc_transpose_kernel(const float *__restrict__ in, int64_t ldi,
                                                             float *__restrict__ out, int64_t ldo, int rows, int cols)
{
    __shared__ float t[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32, x = threadIdx.x;
    for (int i = threadIdx.y; i < 32; i += 8)
        if (r0 + i < rows && c0 + x < cols)
            t[i][x] = in[(size_t)(r0 + i) * ldi + c0 + x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8)
        if (c0 + i < cols && r0 + x < rows)
            out[(size_t)(c0 + i) * ldo + r0 + x] = t[x][i];
}

static cudaError_t transpose(const float *in, int64_t ldi, float *out, int rows, int cols, cudaStream_t s)
{
    const dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32));
    sgkc_transpose_kernel<<<grid, dim3(32, 8), 0, s>>>(in, ldi, out, rows, rows, cols);
    return cudaGetLastError();
}

/* The weight gradients of Wq, Wk, Wv and Wo that g asks for, each dW =
 * dY^T X over the rows on the tensor-core GEMM: both operands transposed
 * first into parts of the workspace that are free by now (the partial sums
 * of dq, dk and dv, and dxn's rows, each B N D floats or more). */
static cudaError_t wgrad_tc(const sgkc_layer *L, const sgk_train_plan &tp, const sgkc_fwd *f, const float *d_out,
                            const sgk_grads *g)
{
    const sgk_plan &p = tp.fwd;
    float *ws = (float *)f->ws;
    const cudaStream_t s = f->stream;
    const int rows = (int)(p.B * p.N), D = p.D;
    float *t1 = ws + tp.dq, *t2 = ws + tp.dkv, *t3 = ws + tp.dkv + (size_t)rows * D, *tx = ws + tp.dctx;
    void *const dw[3] = {g->wq, g->wk, g->wv};
    float *const ty[3] = {t1, t2, t3};
    cudaError_t e = cudaSuccess;
    if (dw[0] || dw[1] || dw[2])
        e = transpose(ws + tp.xn, p.ldc, tx, rows, D, s);
    for (int m = 0; m < 3 && e == cudaSuccess; m++)
        if (dw[m])
            e = transpose(ws + (size_t)m * D, p.ldk, ty[m], rows, D, s);
    for (int m = 0; m < 3 && e == cudaSuccess; m++)
        if (dw[m])
            e = sgkc_tc_product(L, ty[m], rows, tx, rows, (float *)dw[m], D, NULL, D, D, rows, true, s);
    if (e == cudaSuccess && g->wo) {
        e = transpose(d_out, D, t1, rows, D, s);
        if (e == cudaSuccess)
            e = transpose(ws + p.ctx_offset / sizeof(float), p.ldc, t2, rows, D, s);
        if (e == cudaSuccess)
            e = sgkc_tc_product(L, t1, rows, t2, rows, (float *)g->wo, D, NULL, D, D, rows, true, s);
    }
    return e;
}

/* 16-bit layers: nodes and d_out widened into the workspace, every
 * gradient but the pair features' computed in float there and then
 * rounded into the caller's buffer (the pair features' is rounded as
 * attn_bwd stores it). */
cudaError_t sgkc_train_backward(const sgkc_layer *L, const sgkc_fwd *f, const float *saved, const float *d_out,
                                const sgk_grads *g)
{
    sgk_train_plan tp;
    if (!train_plan_for(L, f->B, f->N, &tp))
        return cudaErrorInvalidValue;
    if (L->dtype == SGK_DTYPE_F32)
        return backward_float(L, tp, f, saved, d_out, g);
    const size_t nd = (size_t)f->B * (size_t)f->N * (size_t)L->D;
    float *ws = (float *)f->ws;
    sgkc_fwd fa = *f;
    fa.nodes = (const float *)((const char *)f->ws + tp.fwd.wide_nodes);
    sgk_grads fg = *g;
    void **slot[12] = {&fg.nodes, &fg.pair_feats, &fg.ln_gamma, &fg.ln_beta, &fg.wq, &fg.wk,
                       &fg.wv,    &fg.wo,         &fg.w1,       &fg.b1,      &fg.w2, &fg.b2};
    void *const user[12] = {g->nodes, g->pair_feats, g->ln_gamma, g->ln_beta, g->wq, g->wk,
                            g->wv,    g->wo,         g->w1,       g->b1,      g->w2, g->b2};
    for (int i = 0; i < 12; i++)
        if (tp.grad_n[i] && user[i])
            *slot[i] = ws + tp.grad16[i];
    cudaError_t e = convert(L->gen_threads, 1, L->dtype, f->nodes, (void *)fa.nodes, nd, f->stream);
    if (e == cudaSuccess)
        e = convert(L->gen_threads, 1, L->dtype, d_out, ws + tp.wide_dout, nd, f->stream);
    if (e == cudaSuccess)
        e = backward_float(L, tp, &fa, saved, ws + tp.wide_dout, &fg);
    for (int i = 0; i < 12 && e == cudaSuccess; i++)
        if (tp.grad_n[i] && user[i])
            e = convert(L->gen_threads, 0, L->dtype, ws + tp.grad16[i], user[i], tp.grad_n[i], f->stream);
    return e;
}

/* The backward on float nodes and d_out (pair features and their gradient
 * in the layer's dtype), gradients into g's float buffers. */
static cudaError_t backward_float(const sgkc_layer *L, const sgk_train_plan &tp, const sgkc_fwd *f,
                                  const float *saved, const float *d_out, const sgk_grads *g)
{
    const sgk_plan &p = tp.fwd;
    const float *w = L->kern;
    const sgk_gen_packed &o = L->kern_off;
    float *ws = (float *)f->ws;
    const cudaStream_t s = f->stream;
    const int rows = (int)(p.B * p.N), D = p.D;
    const sgk_off ctx0 = (sgk_off)(p.ctx_offset / sizeof(float)), xn0 = (sgk_off)tp.xn, dctx0 = (sgk_off)tp.dctx;
    sgkc_fwd c = *f;
    c.out = NULL;
    const bool tc = train_tc(L);
    cudaError_t e = run_tiled(L, p, &c, (int)L->dtype, xn0, NULL, tc);
    if (e == cudaSuccess && tc) {
        e = sgkc_tc_product(L, d_out, D, w + o.wo, o.ldo, ws + dctx0, tp.ldd, NULL, rows, D, D, false, s);
        if (e == cudaSuccess)
            e = zero_cols(ws + dctx0, tp.ldd, D, rows, s);
    } else if (e == cudaSuccess) {
        e = sgk_launch_proj((int)p.groups_rows, (int)tp.groups_dctx, L->gen_threads, 0, s, d_out, 0, D, w + o.wo_b, o.ldd,
                            0, ws, ws, dctx0, tp.ldd, rows, D, tp.ldd, p.mt, p.nt);
    }
    if (e == cudaSuccess)
        e = sgk_launch_bwd_di((int)p.groups_norm, 1, L->gen_threads, 0, s, ws, p.ldk, dctx0, tp.ldd, ctx0, p.ldc, (sgk_off)tp.di,
                              (const uchar *)f->mask, f->mask_u8, p.N, rows, D, p.H, p.rt);
    if (e == cudaSuccess)
        e = sgk_launch_attn_bwd((int)tp.groups_bwd, 1, L->gen_threads, tp.smem_bwd * sizeof(float), s, ws, p.ldk, dctx0,
                                tp.ldd, (sgk_off)tp.di, f->pair, (int)L->dtype, (const uchar *)f->mask, f->mask_u8,
                                w + o.w1,
                                w + o.w1_b, p.ldp, w + o.b1, w + o.w2, p.ldh, w + o.w2_b, w + o.b2, saved,
                                (sgk_off)tp.dq, (sgk_off)tp.dkv, tp.ldv, (sgk_off)tp.mlp, tp.mlpw,
                                (float *)g->pair_feats, g->pair_feats != NULL, p.N, D, p.H, p.P, tp.tq, tp.tqp,
                                tp.tk, tp.qc, tp.rq, tp.rk, p.scale, rows);
    if (e == cudaSuccess)
        e = sgk_launch_reduce_qkv((int)p.groups_norm, 1, L->gen_threads, 0, s, ws, (sgk_off)tp.dq, tp.ldd, (sgk_off)tp.dkv,
                                  tp.ldv, tp.rk, tp.rq, p.ldk, p.scale, rows, D, p.rt);
    /* dxn = [dq dk dv] [Wq; Wk; Wv], where dctx was; on the tensor cores
     * as one sum over 3D, or (3D past the longest sum they take) as three
     * over D, each added to the one before */
    if (e == cudaSuccess && tc && 3 * D <= SGK_TC_MAX_K)
        e = sgkc_tc_product(L, ws, p.ldk, w + o.wqkv, p.ldk, ws + dctx0, tp.ldd, NULL, rows, D, 3 * D, false, s);
    for (int m = 0; m < 3 && e == cudaSuccess && tc && 3 * D > SGK_TC_MAX_K; m++)
        e = sgkc_tc_product(L, ws + (size_t)m * D, p.ldk, w + o.wqkv + (size_t)m * D, p.ldk, ws + dctx0, tp.ldd,
                            m ? ws + dctx0 : NULL, rows, D, D, false, s);
    if (e == cudaSuccess && !tc)
        e = sgk_launch_proj((int)p.groups_rows, (int)p.groups_out, L->gen_threads, 0, s, ws, 0, p.ldk, w + o.wqkv_b, o.ldo,
                            0, ws, ws, dctx0, tp.ldd, rows, 3 * D, D, p.mt, p.nt);
    if (e == cudaSuccess)
        e = sgk_launch_ln_bwd((int)p.groups_norm, 1, L->gen_threads, 0, s, f->nodes, w + o.gamma, L->eps, ws, dctx0,
                              tp.ldd, (sgk_off)tp.st, d_out, (float *)g->nodes, g->nodes != NULL, rows, D, p.rt);
    /* LayerNorm's and the projections' weight gradients by chunks of rows,
     * then the chunks added in order */
    const int want_ln = (g->ln_gamma != NULL) | (g->ln_beta != NULL) << 1;
    if (e == cudaSuccess && want_ln)
        e = sgk_launch_ln_wgrad((int)tp.groups_cols, tp.lch, L->gen_threads, tp.smem_cols * sizeof(float), s, f->nodes,
                                ws, dctx0, tp.ldd, (sgk_off)tp.st, (sgk_off)tp.lpart, rows, tp.lk, D, tp.cb);
    if (e == cudaSuccess && want_ln)
        e = sgk_launch_reduce_parts((D + tp.per - 1) / tp.per, 2, L->gen_threads, 0, s, ws, (sgk_off)tp.lpart,
                                    (sgk_off)(2 * D), tp.lch, 0, D, (float *)g->ln_gamma, (float *)g->ln_beta, NULL,
                                    NULL, want_ln, tp.per);
    /* one chunk: each gradient straight into its buffer; several: the
     * chunks' parts of all four, then their sums */
    const int want_w = (g->wq != NULL) | (g->wk != NULL) << 1 | (g->wv != NULL) << 2 | (g->wo != NULL) << 3;
    /* on the tensor cores only where they would take the whole sum over
     * the rows (as mm_part rules for the generated kernels) */
    const bool wtc = tc && rows <= SGK_TC_MAX_K;
    if (e == cudaSuccess && wtc && want_w)
        e = wgrad_tc(L, tp, f, d_out, g);
    const sgk_off gst = (sgk_off)4 * D * D;
    void *const dw[4] = {g->wq, g->wk, g->wv, g->wo};
    for (int m = 0; m < 4 && !wtc && tp.wch == 1 && e == cudaSuccess; m++)
        if (dw[m])
            e = sgk_launch_wgrad((int)tp.groups_wr, (int)tp.groups_wc, L->gen_threads, 0, s, m < 3 ? ws : d_out,
                                 m < 3 ? (sgk_off)m * D : 0, m < 3 ? p.ldk : D, ws, m < 3 ? xn0 : ctx0, p.ldc,
                                 (float *)dw[m], 0, 0, D, rows, rows, D, D, tp.wmt, tp.wnt, (int)tp.groups_wc);
    if (e == cudaSuccess && !wtc && tp.wch > 1 && (want_w & 7))
        e = sgk_launch_wgrad((3 * D + tp.wmt - 1) / tp.wmt, (int)tp.groups_wc * tp.wch, L->gen_threads, 0, s, ws, 0,
                             p.ldk, ws, xn0, p.ldc, ws, (sgk_off)tp.wpart, gst, D, rows, tp.wkc, 3 * D, D, tp.wmt,
                             tp.wnt, (int)tp.groups_wc);
    if (e == cudaSuccess && !wtc && tp.wch > 1 && (want_w & 8))
        e = sgk_launch_wgrad((int)tp.groups_wr, (int)tp.groups_wc * tp.wch, L->gen_threads, 0, s, d_out, 0, D, ws, ctx0,
                             p.ldc, ws, (sgk_off)tp.wpart + (sgk_off)3 * D * D, gst, D, rows, tp.wkc, D, D, tp.wmt,
                             tp.wnt, (int)tp.groups_wc);
    if (e == cudaSuccess && !wtc && tp.wch > 1 && want_w) {
        const int m0 = want_w & 7 ? 0 : 3, m1 = want_w & 8 ? 4 : 3;
        e = sgk_launch_reduce_parts((D * D + tp.per - 1) / tp.per, m1 - m0, L->gen_threads, 0, s, ws, (sgk_off)tp.wpart,
                                    gst, tp.wch, m0, D * D, (float *)g->wq, (float *)g->wk, (float *)g->wv,
                                    (float *)g->wo, want_w, tp.per);
    }
    const int want_mlp = (g->w1 != NULL) | (g->b1 != NULL) << 1 | (g->w2 != NULL) << 2 | (g->b2 != NULL) << 3;
    if (e == cudaSuccess && want_mlp)
        e = sgk_launch_reduce_mlp((int)tp.groups_mlp, 1, L->gen_threads, 0, s, ws, (sgk_off)tp.mlp, tp.mlpw,
                                  (int)tp.groups_bwd, p.ldp, p.P, p.H, (float *)g->w1, (float *)g->b1, (float *)g->w2,
                                  (float *)g->b2, want_mlp, tp.per);
    return e;
}
