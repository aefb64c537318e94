/* The training calls on OpenCL: kernels/train.sgk on the tiled plan
 * (sgk_train_plan), on the caller's cl_mem buffers and queue. Each call
 * checks its buffers (context, size) before it enqueues anything; nothing
 * here waits for the device. */
#include <stdio.h>
#include <string.h>

#include "cl_internal.h"
#include "relation_cl_args.h"

static const sgk_host *host(void) { return sgk_cl_host; }

static const int k_train_kernels[] = { SGK_CL_K_NORM,     SGK_CL_K_PROJ,       SGK_CL_K_ATTN,
                                       SGK_CL_K_COMBINE,  SGK_CL_K_BWD_DI,     SGK_CL_K_ATTN_BWD,
                                       SGK_CL_K_REDUCE_QKV, SGK_CL_K_LN_BWD,   SGK_CL_K_LN_WGRAD,
                                       SGK_CL_K_WGRAD,    SGK_CL_K_REDUCE_MLP, SGK_CL_K_REDUCE_PARTS };

/* bytes of an element of nodes, pair_feats, out, d_out and the gradients */
static size_t elem_size(const sgk_cl_layer *l) { return l->dtype == SGK_DTYPE_F32 ? 4 : 2; }

static int train_plan(const sgk_cl_layer *l, int64_t B, int64_t N, sgk_train_plan *tp)
{
    const sgk_limits lim = sgk_cl_limits(l, k_train_kernels, (int)(sizeof k_train_kernels / sizeof k_train_kernels[0]));
    return sgk_train_plan_make(B, N, l->D, l->H, l->P, &lim, tp);
}

static sgk_status no_plan(const sgk_cl_layer *l, int64_t B, int64_t N)
{
    return host()->set_error(SGK_ERR_UNSUPPORTED,
                             "opencl: the training kernels do not fit B=%lld, N=%lld on device \"%s\" (its "
                             "local memory or launch size)",
                             (long long)B, (long long)N, l->ctx->info.label);
}

size_t sgk_cl_saved_size(void *blayer, int64_t B, int64_t N)
{
    const sgk_cl_layer *l = blayer;
    return (size_t)B * (size_t)l->H * (size_t)N * sizeof(float);
}

size_t sgk_cl_train_workspace_size(void *blayer, int64_t B, int64_t N)
{
    sgk_train_plan tp;
    if (!train_plan(blayer, B, N, &tp))
        return SIZE_MAX;
    return tp.workspace_bytes;
}

/* The queue and the buffers every training call takes. */
static sgk_status check_common(const sgk_cl_layer *l, const sgk_train_plan *tp, const sgk_fwd *a,
                               const void *saved, cl_command_queue q, int *in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t f = sizeof(float), es = elem_size(l), rows = (size_t)a->B * (size_t)a->N;
    const size_t pairs = rows * (size_t)a->N;
    const size_t mask_elem = a->mask_type == SGK_MASK_U8 ? 1 : f;
    sgk_status st = sgk_cl_check_queue(c, q, in_order);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->nodes, "nodes", "B*N*D elements", rows * (size_t)l->D * es,
                                 SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->pair_feats, "pair_feats", "B*N*N*P elements", pairs * (size_t)l->P * es,
                                 SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->edge_mask, "edge_mask", mask_elem == 1 ? "B*N*N uint8" : "B*N*N floats",
                                 pairs * mask_elem, SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, saved, "saved", "B*H*N floats", rows * (size_t)l->H * f,
                                 SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->workspace, "workspace", "sgk_train_workspace_size", tp->workspace_bytes,
                                 SGK_ERR_INSUFFICIENT_WORKSPACE);
    return st;
}

/* The plan, the queue (the caller's or the context's) and the checks every
 * training call makes. */
static sgk_status begin(const sgk_cl_layer *l, const sgk_fwd *a, const void *saved, sgk_train_plan *tp,
                        cl_command_queue *q, int *in_order)
{
    if (!train_plan(l, a->B, a->N, tp))
        return no_plan(l, a->B, a->N);
    *q = a->stream ? (cl_command_queue)a->stream : l->ctx->queue;
    *in_order = 1;
    return check_common(l, tp, a, saved, *q, in_order);
}

sgk_status sgk_cl_forward_train(void *blayer, const sgk_fwd *a, void *saved)
{
    sgk_cl_layer *l = blayer;
    sgk_cl_ctx *c = l->ctx;
    sgk_train_plan tp;
    cl_command_queue q = NULL;
    int in_order = 1;
    sgk_status st = begin(l, a, saved, &tp, &q, &in_order);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->out, "out", "B*N*D elements",
                                 (size_t)a->B * (size_t)a->N * (size_t)l->D * elem_size(l), SGK_ERR_INVALID_ARGUMENT);
    if (st != SGK_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    st = l->dtype == SGK_DTYPE_F32
             ? sgk_cl_tiled(l, &tp.fwd, a, q, in_order, (cl_long)(tp.fwd.ctx_offset / sizeof(float)), sgk_cl_mem(saved))
             : sgk_cl_enqueue16(l, &tp.fwd, a, q, in_order, sgk_cl_mem(saved));
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* A gradient buffer, where the caller asked for it. */
static sgk_status check_grad(const sgk_cl_layer *l, const void *g, const char *name, const char *formula, size_t n)
{
    return g == NULL ? SGK_OK
                     : sgk_cl_check_buffer(l->ctx, g, name, formula, n * elem_size(l), SGK_ERR_INVALID_ARGUMENT);
}

static sgk_status check_grads(const sgk_cl_layer *l, const sgk_fwd *a, const void *d_out, const sgk_grads *g)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t rows = (size_t)a->B * (size_t)a->N, D = (size_t)l->D, H = (size_t)l->H, P = (size_t)l->P;
    sgk_status st = sgk_cl_check_buffer(c, d_out, "d_out", "B*N*D elements", rows * D * elem_size(l),
                                        SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK) st = check_grad(l, g->nodes, "grads->nodes", "B*N*D elements", rows * D);
    if (st == SGK_OK) st = check_grad(l, g->pair_feats, "grads->pair_feats", "B*N*N*P floats", rows * (size_t)a->N * P);
    if (st == SGK_OK) st = check_grad(l, g->ln_gamma, "grads->ln_gamma", "D floats", D);
    if (st == SGK_OK) st = check_grad(l, g->ln_beta, "grads->ln_beta", "D floats", D);
    if (st == SGK_OK) st = check_grad(l, g->wq, "grads->wq", "D*D floats", D * D);
    if (st == SGK_OK) st = check_grad(l, g->wk, "grads->wk", "D*D floats", D * D);
    if (st == SGK_OK) st = check_grad(l, g->wv, "grads->wv", "D*D floats", D * D);
    if (st == SGK_OK) st = check_grad(l, g->wo, "grads->wo", "D*D floats", D * D);
    if (st == SGK_OK) st = check_grad(l, g->w1, "grads->w1", "P*P floats", P * P);
    if (st == SGK_OK) st = check_grad(l, g->b1, "grads->b1", "P floats", P);
    if (st == SGK_OK) st = check_grad(l, g->w2, "grads->w2", "H*P floats", H * P);
    if (st == SGK_OK) st = check_grad(l, g->b2, "grads->b2", "H floats", H);
    return st;
}

/* The backward's kernels after the recomputed context, in order, each
 * after the last (sgk_cl_order). Called with the context's lock held. */
static sgk_status enqueue_backward(const sgk_cl_layer *l, const sgk_train_plan *tp, const sgk_fwd *a,
                                   const void *saved, const void *d_out, const sgk_grads *g, cl_command_queue q,
                                   int in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const sgk_cl_program *pr = &c->prog;
    const cl_mem *w = l->w;
    const sgk_plan *p = &tp->fwd;
    const cl_mem ws = sgk_cl_mem(a->workspace), dout = sgk_cl_mem(d_out);
    const cl_int rows = (cl_int)(p->B * p->N), D = p->D, mask_u8 = a->mask_type == SGK_MASK_U8;
    const cl_long ctx0 = (cl_long)(p->ctx_offset / sizeof(float)), xn0 = (cl_long)tp->xn;
    const cl_long dctx0 = (cl_long)tp->dctx;
    sgk_status st = sgk_cl_tiled(l, p, a, q, in_order, xn0, NULL);
#define NEXT(which, args, g0, g1)                                                                                    \
    do {                                                                                                             \
        if (st == SGK_OK)                                                                                            \
            st = sgk_cl_order(q, in_order, c);                                                                       \
        if (st == SGK_OK)                                                                                            \
            st = sgk_cl_launch(c, q, which, args, g0, g1);                                                           \
    } while (0)
    NEXT(SGK_CL_K_PROJ,
         sgk_cl_args_proj(pr->k[SGK_CL_K_PROJ].kernel, dout, 0, D, w[SGK_CL_W_WO_B], l->off.ldd, 0, ws, ws, dctx0,
                          tp->ldd, rows, D, tp->ldd, p->mt, p->nt, sizeof(float)),
         p->groups_rows, tp->groups_dctx);
    NEXT(SGK_CL_K_BWD_DI,
         sgk_cl_args_bwd_di(pr->k[SGK_CL_K_BWD_DI].kernel, ws, p->ldk, dctx0, tp->ldd, ctx0, p->ldc, (cl_long)tp->di,
                            sgk_cl_mem(a->edge_mask), mask_u8, p->N, rows, D, p->H, p->rt, sizeof(float)),
         p->groups_norm, 1);
    NEXT(SGK_CL_K_ATTN_BWD,
         sgk_cl_args_attn_bwd(pr->k[SGK_CL_K_ATTN_BWD].kernel, ws, p->ldk, dctx0, tp->ldd, (cl_long)tp->di,
                              sgk_cl_mem(a->pair_feats), (cl_int)l->dtype, sgk_cl_mem(a->edge_mask), mask_u8,
                              w[SGK_CL_W_W1],
                              w[SGK_CL_W_W1_B], p->ldp, w[SGK_CL_W_B1], w[SGK_CL_W_W2], p->ldh, w[SGK_CL_W_W2_B],
                              w[SGK_CL_W_B2], sgk_cl_mem(saved), (cl_long)tp->dq, (cl_long)tp->dkv, tp->ldv,
                              (cl_long)tp->mlp, tp->mlpw, sgk_cl_mem(g->pair_feats), g->pair_feats != NULL, p->N, D,
                              p->H, p->P, tp->tq, tp->tqp, tp->tk, tp->qc, tp->rq, tp->rk, p->scale, rows,
                              tp->smem_bwd * sizeof(float)),
         tp->groups_bwd, 1);
    NEXT(SGK_CL_K_REDUCE_QKV,
         sgk_cl_args_reduce_qkv(pr->k[SGK_CL_K_REDUCE_QKV].kernel, ws, (cl_long)tp->dq, tp->ldd, (cl_long)tp->dkv,
                                tp->ldv, tp->rk, tp->rq, p->ldk, p->scale, rows, D, p->rt, sizeof(float)),
         p->groups_norm, 1);
    /* dxn = [dq dk dv] [Wq; Wk; Wv], where dctx was */
    NEXT(SGK_CL_K_PROJ,
         sgk_cl_args_proj(pr->k[SGK_CL_K_PROJ].kernel, ws, 0, p->ldk, w[SGK_CL_W_WQKV_B], l->off.ldo, 0, ws, ws, dctx0,
                          tp->ldd, rows, 3 * D, D, p->mt, p->nt, sizeof(float)),
         p->groups_rows, p->groups_out);
    NEXT(SGK_CL_K_LN_BWD,
         sgk_cl_args_ln_bwd(pr->k[SGK_CL_K_LN_BWD].kernel, sgk_cl_mem(a->nodes), w[SGK_CL_W_GAMMA], l->eps, ws, dctx0,
                            tp->ldd, (cl_long)tp->st, dout, sgk_cl_mem(g->nodes), g->nodes != NULL, rows, D, p->rt,
                            sizeof(float)),
         p->groups_norm, 1);
    /* LayerNorm's and the projections' weight gradients by chunks of rows,
     * then the chunks added in order */
    const cl_int want_ln = (g->ln_gamma != NULL) | (g->ln_beta != NULL) << 1;
    if (want_ln) {
        NEXT(SGK_CL_K_LN_WGRAD,
             sgk_cl_args_ln_wgrad(pr->k[SGK_CL_K_LN_WGRAD].kernel, sgk_cl_mem(a->nodes), ws, dctx0, tp->ldd,
                                  (cl_long)tp->st, (cl_long)tp->lpart, rows, tp->lk, D, tp->cb,
                                  tp->smem_cols * sizeof(float)),
             tp->groups_cols, tp->lch);
        NEXT(SGK_CL_K_REDUCE_PARTS,
             sgk_cl_args_reduce_parts(pr->k[SGK_CL_K_REDUCE_PARTS].kernel, ws, (cl_long)tp->lpart, (cl_long)2 * D,
                                      tp->lch, 0, D, sgk_cl_mem(g->ln_gamma), sgk_cl_mem(g->ln_beta), NULL, NULL,
                                      want_ln, tp->per, sizeof(float)),
             (D + tp->per - 1) / tp->per, 2);
    }
    /* one chunk: each gradient straight into its buffer; several: the
     * chunks' parts of all four, then their sums */
    const cl_int want_w = (g->wq != NULL) | (g->wk != NULL) << 1 | (g->wv != NULL) << 2 | (g->wo != NULL) << 3;
    const cl_long gst = (cl_long)4 * D * D;
    void *const dw[4] = { g->wq, g->wk, g->wv, g->wo };
    for (int m = 0; m < 4 && tp->wch == 1; m++)
        if (dw[m])
            NEXT(SGK_CL_K_WGRAD,
                 sgk_cl_args_wgrad(pr->k[SGK_CL_K_WGRAD].kernel, m < 3 ? ws : dout, m < 3 ? (cl_long)m * D : 0,
                                   m < 3 ? p->ldk : D, ws, m < 3 ? xn0 : ctx0, p->ldc, sgk_cl_mem(dw[m]), 0, 0, D,
                                   rows, rows, D, D, tp->wmt, tp->wnt, (cl_int)tp->groups_wc, sizeof(float)),
                 tp->groups_wr, tp->groups_wc);
    if (tp->wch > 1 && (want_w & 7))
        NEXT(SGK_CL_K_WGRAD,
             sgk_cl_args_wgrad(pr->k[SGK_CL_K_WGRAD].kernel, ws, 0, p->ldk, ws, xn0, p->ldc, ws, (cl_long)tp->wpart,
                               gst, D, rows, tp->wkc, 3 * D, D, tp->wmt, tp->wnt, (cl_int)tp->groups_wc,
                               sizeof(float)),
             (3 * D + tp->wmt - 1) / tp->wmt, tp->groups_wc * tp->wch);
    if (tp->wch > 1 && (want_w & 8))
        NEXT(SGK_CL_K_WGRAD,
             sgk_cl_args_wgrad(pr->k[SGK_CL_K_WGRAD].kernel, dout, 0, D, ws, ctx0, p->ldc, ws,
                               (cl_long)tp->wpart + (cl_long)3 * D * D, gst, D, rows, tp->wkc, D, D, tp->wmt, tp->wnt,
                               (cl_int)tp->groups_wc, sizeof(float)),
             tp->groups_wr, tp->groups_wc * tp->wch);
    if (tp->wch > 1 && want_w) {
        const cl_int m0 = want_w & 7 ? 0 : 3, m1 = want_w & 8 ? 4 : 3;
        NEXT(SGK_CL_K_REDUCE_PARTS,
             sgk_cl_args_reduce_parts(pr->k[SGK_CL_K_REDUCE_PARTS].kernel, ws, (cl_long)tp->wpart, gst, tp->wch, m0,
                                      D * D, sgk_cl_mem(g->wq), sgk_cl_mem(g->wk), sgk_cl_mem(g->wv),
                                      sgk_cl_mem(g->wo), want_w, tp->per, sizeof(float)),
             (D * D + tp->per - 1) / tp->per, m1 - m0);
    }
    const cl_int want_mlp = (g->w1 != NULL) | (g->b1 != NULL) << 1 | (g->w2 != NULL) << 2 | (g->b2 != NULL) << 3;
    if (want_mlp)
        NEXT(SGK_CL_K_REDUCE_MLP,
             sgk_cl_args_reduce_mlp(pr->k[SGK_CL_K_REDUCE_MLP].kernel, ws, (cl_long)tp->mlp, tp->mlpw,
                                    (cl_int)tp->groups_bwd, p->ldp, p->P, p->H, sgk_cl_mem(g->w1), sgk_cl_mem(g->b1),
                                    sgk_cl_mem(g->w2), sgk_cl_mem(g->b2), want_mlp, tp->per, sizeof(float)),
             tp->groups_mlp, 1);
#undef NEXT
    return st;
}

/* A 16-bit layer: nodes and d_out widened into the workspace, every
 * gradient but the pair features' computed in float there and then
 * rounded into the caller's buffer (the pair features' is rounded as
 * attn_bwd stores it). Called with the context's lock held. */
static sgk_status enqueue_backward16(const sgk_cl_layer *l, const sgk_train_plan *tp, const sgk_fwd *a,
                                     const void *saved, const void *d_out, const sgk_grads *g, cl_command_queue q,
                                     int in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D, f = sizeof(float);
    const size_t *n = tp->grad_n;
    sgk_grads fg = *g;
    void **slot[12] = { &fg.nodes, &fg.pair_feats, &fg.ln_gamma, &fg.ln_beta, &fg.wq, &fg.wk,
                        &fg.wv,    &fg.wo,         &fg.w1,       &fg.b1,      &fg.w2, &fg.b2 };
    void *const user[12] = { g->nodes, g->pair_feats, g->ln_gamma, g->ln_beta, g->wq, g->wk,
                             g->wv,    g->wo,         g->w1,       g->b1,      g->w2, g->b2 };
    cl_mem wn = NULL, wd = NULL, stage[12] = { NULL };
    sgk_status st = sgk_cl_sub_buffer(c, a->workspace, tp->fwd.wide_nodes, nd * f, &wn);
    if (st == SGK_OK)
        st = sgk_cl_sub_buffer(c, a->workspace, tp->wide_dout * f, nd * f, &wd);
    for (int i = 0; i < 12 && st == SGK_OK; i++)
        if (n[i] && user[i]) {
            st = sgk_cl_sub_buffer(c, a->workspace, tp->grad16[i] * f, n[i] * f, &stage[i]);
            *slot[i] = stage[i];
        }
    if (st == SGK_OK)
        st = sgk_cl_convert(c, SGK_CL_K_WIDEN, l->dtype, sgk_cl_mem(a->nodes), wn, nd, q);
    if (st == SGK_OK)
        st = sgk_cl_convert(c, SGK_CL_K_WIDEN, l->dtype, sgk_cl_mem(d_out), wd, nd, q);
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK) {
        sgk_fwd fa = *a;
        fa.nodes = wn;
        st = enqueue_backward(l, tp, &fa, saved, wd, &fg, q, in_order);
    }
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    for (int i = 0; i < 12 && st == SGK_OK; i++)
        if (stage[i])
            st = sgk_cl_convert(c, SGK_CL_K_NARROW, l->dtype, stage[i], sgk_cl_mem(user[i]), n[i], q);
    /* enqueued work keeps the sub-buffers alive until it is done */
    cl_mem own[14] = { wn, wd };
    memcpy(own + 2, stage, sizeof stage);
    for (int i = 0; i < 14; i++)
        if (own[i])
            clReleaseMemObject(own[i]);
    return st;
}

sgk_status sgk_cl_backward(void *blayer, const sgk_fwd *a, const void *saved, const void *d_out,
                           const sgk_grads *g)
{
    sgk_cl_layer *l = blayer;
    sgk_cl_ctx *c = l->ctx;
    sgk_train_plan tp;
    cl_command_queue q = NULL;
    int in_order = 1;
    sgk_status st = begin(l, a, saved, &tp, &q, &in_order);
    if (st == SGK_OK)
        st = check_grads(l, a, d_out, g);
    if (st != SGK_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    st = l->dtype == SGK_DTYPE_F32 ? enqueue_backward(l, &tp, a, saved, d_out, g, q, in_order)
                                   : enqueue_backward16(l, &tp, a, saved, d_out, g, q, in_order);
    pthread_mutex_unlock(&c->lock);
    return st;
}
