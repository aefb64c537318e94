/* The training calls on HIP: kernels/train.sgk on the tiled plan
 * (sgk_train_plan), enqueued on the caller's stream on the layer's device.
 * Float32 layers (the core refuses the others first). */
#include <stdint.h>
#include <stdio.h>

#include "hip_internal.h"

typedef unsigned char uchar; /* the dialect's name, used by the generated prototypes */
#include "relation_hip.h"

static const int k_train_kernels[] = { SGK_HIP_K_NORM,    SGK_HIP_K_PROJ,       SGK_HIP_K_ATTN,
                                       SGK_HIP_K_COMBINE, SGK_HIP_K_BWD_DI,     SGK_HIP_K_ATTN_BWD,
                                       SGK_HIP_K_REDUCE_QKV, SGK_HIP_K_LN_BWD,  SGK_HIP_K_LN_WGRAD,
                                       SGK_HIP_K_WGRAD,   SGK_HIP_K_REDUCE_MLP, SGK_HIP_K_REDUCE_PARTS };

/* The tightest limits of the kernels the training calls launch; tiles as
 * the forward's (hip_layer.c). */
static int train_plan(const hip_layer *l, int64_t B, int64_t N, sgk_train_plan *tp)
{
    sgk_limits lim = { SIZE_MAX, INT64_MAX, SGK_GEN_PAD, 256, 64, 64, 16, 32, l->dtype != SGK_DTYPE_F32,
                       2 * (int64_t)l->ctx->units };
    for (size_t i = 0; i < sizeof k_train_kernels / sizeof k_train_kernels[0]; i++) {
        const sgk_hip_kernel *k = &l->ctx->k[k_train_kernels[i]];
        if (k->local_bytes < lim.local_bytes)
            lim.local_bytes = k->local_bytes;
        if (k->max_groups0 < lim.max_groups)
            lim.max_groups = k->max_groups0;
    }
    return sgk_train_plan_make(B, N, l->D, l->H, l->P, &lim, tp);
}

static sgk_status no_plan(const hip_layer *l, int64_t B, int64_t N)
{
    return sgk_hip_host->set_error(SGK_ERR_UNSUPPORTED,
                                   "hip: the training kernels do not fit B=%lld, N=%lld on device %d \"%s\" (its "
                                   "shared memory or grid)",
                                   (long long)B, (long long)N, l->ctx->device, l->ctx->label);
}

size_t sgk_hip_saved_size(void *blayer, int64_t B, int64_t N)
{
    const hip_layer *l = blayer;
    return (size_t)B * (size_t)l->H * (size_t)N * sizeof(float);
}

size_t sgk_hip_train_workspace_size(void *blayer, int64_t B, int64_t N)
{
    sgk_train_plan tp;
    return train_plan(blayer, B, N, &tp) ? tp.workspace_bytes : SIZE_MAX;
}

static sgk_status converting_failed(const hip_layer *l, hipError_t err)
{
    char where[400];
    snprintf(where, sizeof where, " converting 16-bit values on device %d \"%s\"", l->ctx->device, l->ctx->label);
    return sgk_hip_fail(SGK_ERR_BACKEND, "launching a kernel", err, where);
}

/* The plan, then the layer's device current (sgk_hip_leave restores it). */
static sgk_status begin(const hip_layer *l, const sgk_fwd *a, sgk_train_plan *tp, sgk_hip_guard *g)
{
    if (!train_plan(l, a->B, a->N, tp))
        return no_plan(l, a->B, a->N);
    return sgk_hip_enter(l->ctx->device, g);
}

sgk_status sgk_hip_forward_train(void *blayer, const sgk_fwd *a, void *saved)
{
    const hip_layer *l = blayer;
    sgk_train_plan tp;
    sgk_hip_guard g;
    sgk_status st = begin(l, a, &tp, &g);
    if (st != SGK_OK)
        return st;
    const sgk_off xn0 = (sgk_off)(tp.fwd.ctx_offset / sizeof(float));
    if (l->dtype == SGK_DTYPE_F32) {
        st = sgk_hip_tiled(l, &tp.fwd, a, SGK_DTYPE_F32, xn0, saved);
    } else {
        /* nodes widened into the workspace, out computed in float there and rounded */
        const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D;
        hipStream_t s = (hipStream_t)a->stream;
        sgk_fwd f = *a;
        f.nodes = (char *)a->workspace + tp.fwd.wide_nodes;
        f.out = (char *)a->workspace + tp.fwd.wide_out;
        hipError_t err = sgk_hip_convert(l, 1, a->nodes, (void *)f.nodes, nd, s);
        if (err == hipSuccess) {
            st = sgk_hip_tiled(l, &tp.fwd, &f, (int)l->dtype, xn0, saved);
            if (st == SGK_OK)
                err = sgk_hip_convert(l, 0, f.out, a->out, nd, s);
        }
        if (err != hipSuccess)
            st = converting_failed(l, err);
    }
    sgk_hip_leave(&g);
    return st;
}

#define LAUNCHED(name, which, g0, g1, smem)                                                                          \
    do {                                                                                                             \
        if (err != hipSuccess)                                                                                       \
            return sgk_hip_launch_failed(l, name, err, (int)(g0), (int)(g1), &k[which], smem);                      \
    } while (0)

/* The backward's kernels after the recomputed context, in order on the
 * caller's stream. */
static sgk_status enqueue_backward(const hip_layer *l, const sgk_train_plan *tp, const sgk_fwd *a,
                                   const float *saved, const float *d_out, const sgk_grads *g)
{
    const sgk_hip_kernel *k = l->ctx->k;
    const sgk_plan *p = &tp->fwd;
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    hipStream_t s = (hipStream_t)a->stream;
    float *ws = a->workspace;
    const int rows = (int)(p->B * p->N), D = p->D, mask_u8 = a->mask_type == SGK_MASK_U8;
    const sgk_off ctx0 = (sgk_off)(p->ctx_offset / sizeof(float)), xn0 = (sgk_off)tp->xn, dctx0 = (sgk_off)tp->dctx;
    sgk_fwd c = *a;
    c.out = NULL;
    sgk_status st = sgk_hip_tiled(l, p, &c, (int)l->dtype, xn0, NULL);
    if (st != SGK_OK)
        return st;
    hipError_t err = sgk_launch_proj((int)p->groups_rows, (int)tp->groups_dctx, k[SGK_HIP_K_PROJ].threads,
                                     sizeof(float), s, d_out, 0, D, w + o.wo_b, o.ldd, 0, ws, ws, dctx0, tp->ldd, rows,
                                     D, tp->ldd, p->mt, p->nt);
    LAUNCHED("proj", SGK_HIP_K_PROJ, p->groups_rows, tp->groups_dctx, 1);
    err = sgk_launch_bwd_di((int)p->groups_norm, 1, k[SGK_HIP_K_BWD_DI].threads, sizeof(float), s, ws, p->ldk, dctx0, tp->ldd,
                            ctx0, p->ldc, (sgk_off)tp->di, a->edge_mask, mask_u8, p->N, rows, D, p->H, p->rt);
    LAUNCHED("bwd_di", SGK_HIP_K_BWD_DI, p->groups_norm, 1, 1);
    err = sgk_launch_attn_bwd((int)tp->groups_bwd, 1, k[SGK_HIP_K_ATTN_BWD].threads, tp->smem_bwd * sizeof(float), s,
                              ws, p->ldk, dctx0, tp->ldd, (sgk_off)tp->di, a->pair_feats, (int)l->dtype,
                              a->edge_mask, mask_u8,
                              w + o.w1, w + o.w1_b, p->ldp, w + o.b1, w + o.w2, p->ldh, w + o.w2_b, w + o.b2, saved,
                              (sgk_off)tp->dq, (sgk_off)tp->dkv, tp->ldv, (sgk_off)tp->mlp, tp->mlpw, g->pair_feats,
                              g->pair_feats != NULL, p->N, D, p->H, p->P, tp->tq, tp->tqp, tp->tk, tp->qc, tp->rq,
                              tp->rk, p->scale, rows);
    LAUNCHED("attn_bwd", SGK_HIP_K_ATTN_BWD, tp->groups_bwd, 1, tp->smem_bwd);
    err = sgk_launch_reduce_qkv((int)p->groups_norm, 1, k[SGK_HIP_K_REDUCE_QKV].threads, sizeof(float), s, ws,
                                (sgk_off)tp->dq, tp->ldd, (sgk_off)tp->dkv, tp->ldv, tp->rk, tp->rq, p->ldk, p->scale,
                                rows, D, p->rt);
    LAUNCHED("reduce_qkv", SGK_HIP_K_REDUCE_QKV, p->groups_norm, 1, 1);
    /* dxn = [dq dk dv] [Wq; Wk; Wv], where dctx was */
    err = sgk_launch_proj((int)p->groups_rows, (int)p->groups_out, k[SGK_HIP_K_PROJ].threads, sizeof(float), s, ws,
                          0, p->ldk, w + o.wqkv_b, o.ldo, 0, ws, ws, dctx0, tp->ldd, rows, 3 * D, D, p->mt, p->nt);
    LAUNCHED("proj", SGK_HIP_K_PROJ, p->groups_rows, p->groups_out, 1);
    err = sgk_launch_ln_bwd((int)p->groups_norm, 1, k[SGK_HIP_K_LN_BWD].threads, sizeof(float), s, a->nodes,
                            w + o.gamma, l->eps, ws, dctx0, tp->ldd, (sgk_off)tp->st, d_out, g->nodes, g->nodes != NULL,
                            rows, D, p->rt);
    LAUNCHED("ln_bwd", SGK_HIP_K_LN_BWD, p->groups_norm, 1, 1);
    /* LayerNorm's and the projections' weight gradients by chunks of rows,
     * then the chunks added in order */
    const int want_ln = (g->ln_gamma != NULL) | (g->ln_beta != NULL) << 1;
    if (want_ln) {
        err = sgk_launch_ln_wgrad((int)tp->groups_cols, tp->lch, k[SGK_HIP_K_LN_WGRAD].threads,
                                  tp->smem_cols * sizeof(float), s, a->nodes, ws, dctx0, tp->ldd, (sgk_off)tp->st,
                                  (sgk_off)tp->lpart, rows, tp->lk, D, tp->cb);
        LAUNCHED("ln_wgrad", SGK_HIP_K_LN_WGRAD, tp->groups_cols, tp->lch, tp->smem_cols);
        err = sgk_launch_reduce_parts((D + tp->per - 1) / tp->per, 2, k[SGK_HIP_K_REDUCE_PARTS].threads,
                                      sizeof(float), s, ws, (sgk_off)tp->lpart, (sgk_off)(2 * D), tp->lch, 0, D,
                                      g->ln_gamma, g->ln_beta, NULL, NULL, want_ln, tp->per);
        LAUNCHED("reduce_parts", SGK_HIP_K_REDUCE_PARTS, (D + tp->per - 1) / tp->per, 2, 1);
    }
    /* one chunk: each gradient straight into its buffer; several: the
     * chunks' parts of all four, then their sums */
    const int want_w = (g->wq != NULL) | (g->wk != NULL) << 1 | (g->wv != NULL) << 2 | (g->wo != NULL) << 3;
    const sgk_off gst = (sgk_off)4 * D * D;
    void *const dw[4] = { g->wq, g->wk, g->wv, g->wo };
    for (int m = 0; m < 4 && tp->wch == 1; m++)
        if (dw[m]) {
            err = sgk_launch_wgrad((int)tp->groups_wr, (int)tp->groups_wc, k[SGK_HIP_K_WGRAD].threads, sizeof(float),
                                   s, m < 3 ? ws : d_out, m < 3 ? (sgk_off)m * D : 0, m < 3 ? p->ldk : D, ws,
                                   m < 3 ? xn0 : ctx0, p->ldc, dw[m], 0, 0, D, rows, rows, D, D, tp->wmt, tp->wnt,
                                   (int)tp->groups_wc);
            LAUNCHED("wgrad", SGK_HIP_K_WGRAD, tp->groups_wr, tp->groups_wc, 1);
        }
    if (tp->wch > 1 && (want_w & 7)) {
        err = sgk_launch_wgrad((3 * D + tp->wmt - 1) / tp->wmt, (int)tp->groups_wc * tp->wch,
                               k[SGK_HIP_K_WGRAD].threads, sizeof(float), s, ws, 0, p->ldk, ws, xn0, p->ldc, ws,
                               (sgk_off)tp->wpart, gst, D, rows, tp->wkc, 3 * D, D, tp->wmt, tp->wnt,
                               (int)tp->groups_wc);
        LAUNCHED("wgrad", SGK_HIP_K_WGRAD, (3 * D + tp->wmt - 1) / tp->wmt, tp->groups_wc * tp->wch, 1);
    }
    if (tp->wch > 1 && (want_w & 8)) {
        err = sgk_launch_wgrad((int)tp->groups_wr, (int)tp->groups_wc * tp->wch, k[SGK_HIP_K_WGRAD].threads,
                               sizeof(float), s, d_out, 0, D, ws, ctx0, p->ldc, ws,
                               (sgk_off)tp->wpart + (sgk_off)3 * D * D, gst, D, rows, tp->wkc, D, D, tp->wmt, tp->wnt,
                               (int)tp->groups_wc);
        LAUNCHED("wgrad", SGK_HIP_K_WGRAD, tp->groups_wr, tp->groups_wc * tp->wch, 1);
    }
    if (tp->wch > 1 && want_w) {
        const int m0 = want_w & 7 ? 0 : 3, m1 = want_w & 8 ? 4 : 3;
        err = sgk_launch_reduce_parts((D * D + tp->per - 1) / tp->per, m1 - m0, k[SGK_HIP_K_REDUCE_PARTS].threads,
                                      sizeof(float), s, ws, (sgk_off)tp->wpart, gst, tp->wch, m0, D * D, g->wq, g->wk,
                                      g->wv, g->wo, want_w, tp->per);
        LAUNCHED("reduce_parts", SGK_HIP_K_REDUCE_PARTS, (D * D + tp->per - 1) / tp->per, m1 - m0, 1);
    }
    const int want_mlp = (g->w1 != NULL) | (g->b1 != NULL) << 1 | (g->w2 != NULL) << 2 | (g->b2 != NULL) << 3;
    if (want_mlp) {
        err = sgk_launch_reduce_mlp((int)tp->groups_mlp, 1, k[SGK_HIP_K_REDUCE_MLP].threads, sizeof(float), s, ws,
                                    (sgk_off)tp->mlp, tp->mlpw, (int)tp->groups_bwd, p->ldp, p->P, p->H, g->w1, g->b1,
                                    g->w2, g->b2, want_mlp, tp->per);
        LAUNCHED("reduce_mlp", SGK_HIP_K_REDUCE_MLP, tp->groups_mlp, 1, 1);
    }
    return SGK_OK;
}

sgk_status sgk_hip_backward(void *blayer, const sgk_fwd *a, const void *saved, const void *d_out,
                            const sgk_grads *grads)
{
    const hip_layer *l = blayer;
    sgk_train_plan tp;
    sgk_hip_guard g;
    sgk_status st = begin(l, a, &tp, &g);
    if (st != SGK_OK)
        return st;
    if (l->dtype == SGK_DTYPE_F32) {
        st = enqueue_backward(l, &tp, a, saved, d_out, grads);
        sgk_hip_leave(&g);
        return st;
    }
    /* nodes and d_out widened into the workspace, every gradient but the
     * pair features' computed in float there and then rounded into the
     * caller's buffer (the pair features' is rounded as attn_bwd stores it) */
    const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D;
    float *ws = a->workspace;
    hipStream_t s = (hipStream_t)a->stream;
    sgk_fwd f = *a;
    f.nodes = (char *)a->workspace + tp.fwd.wide_nodes;
    sgk_grads fg = *grads;
    void **slot[12] = { &fg.nodes, &fg.pair_feats, &fg.ln_gamma, &fg.ln_beta, &fg.wq, &fg.wk,
                        &fg.wv,    &fg.wo,         &fg.w1,       &fg.b1,      &fg.w2, &fg.b2 };
    void *const user[12] = { grads->nodes, grads->pair_feats, grads->ln_gamma, grads->ln_beta, grads->wq, grads->wk,
                             grads->wv,    grads->wo,         grads->w1,       grads->b1,      grads->w2, grads->b2 };
    for (int i = 0; i < 12; i++)
        if (tp.grad_n[i] && user[i])
            *slot[i] = ws + tp.grad16[i];
    hipError_t err = sgk_hip_convert(l, 1, a->nodes, (void *)f.nodes, nd, s);
    if (err == hipSuccess)
        err = sgk_hip_convert(l, 1, d_out, ws + tp.wide_dout, nd, s);
    if (err == hipSuccess) {
        st = enqueue_backward(l, &tp, &f, saved, ws + tp.wide_dout, &fg);
        for (int i = 0; i < 12 && st == SGK_OK && err == hipSuccess; i++)
            if (tp.grad_n[i] && user[i])
                err = sgk_hip_convert(l, 0, ws + tp.grad16[i], user[i], tp.grad_n[i], s);
    }
    if (err != hipSuccess)
        st = converting_failed(l, err);
    sgk_hip_leave(&g);
    return st;
}
