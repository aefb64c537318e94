/* The training calls: sgk_saved_size, sgk_train_workspace_size,
 * sgk_forward_train[_device] and sgk_backward[_device]. The forward's
 * argument checks, then the backend's ABI 4 ops: the device forms on the
 * caller's pointers and workspace; the host forms on a workspace
 * allocated here and, on a backend of device memory, through device
 * copies of every buffer (outputs written only once all has succeeded). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sgk_internal.h"

static sgk_status require_backward(const sgk_layer *layer, const char *call)
{
    const sgk_backend_ops *ops = layer->ops;
    if (ops->saved_size == NULL || ops->train_workspace_size == NULL || ops->forward_train == NULL ||
        ops->backward == NULL)
        return sgk_set_error(SGK_ERR_UNSUPPORTED, "%s: backend %s has no backward", call, ops->name);
    return SGK_OK;
}

/* One buffer of a training call. */
typedef struct buf {
    const char *name;
    const void *ptr;
    size_t bytes;
    size_t align;
} buf;

/* Alignment of every buffer given (NULL ones are not wanted), then
 * overlaps: inputs, bufs[0 .. first_out), are only read and may share
 * memory; an output may meet no other buffer. Device pointers may be
 * opaque handles (OpenCL): there (ranges 0) only the same pointer twice is
 * caught. */
static sgk_status check_buffers(const buf *bufs, int n, int first_out, int ranges)
{
    for (int i = 0; i < n; i++) {
        if (bufs[i].ptr == NULL)
            continue;
        sgk_status st = sgk_check_aligned(bufs[i].name, bufs[i].ptr, bufs[i].align);
        if (st != SGK_OK)
            return st;
    }
    for (int i = first_out; i < n; i++)
        for (int j = 0; j < n && bufs[i].ptr != NULL; j++)
            if (j != i && bufs[j].ptr != NULL &&
                (ranges ? sgk_ranges_overlap(bufs[i].ptr, bufs[i].bytes, bufs[j].ptr, bufs[j].bytes)
                        : bufs[i].ptr == bufs[j].ptr))
                return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                                     "%s overlaps %s: each output must be a buffer of its own",
                                     bufs[i].name, bufs[j].name);
    return SGK_OK;
}

/* The three inputs' entries of a call's buffer list; returns 3. */
static int input_bufs(buf *b, const void *nodes, const void *pair_feats, const void *edge_mask,
                      sgk_mask_type mask_type, const sgk_call *call, size_t elem)
{
    const buf in[3] = {
        { "nodes", nodes, call->nodes_bytes, elem },
        { "pair_feats", pair_feats, call->pair_bytes, elem },
        { "edge_mask", edge_mask, call->mask_bytes,
          mask_type == SGK_MASK_F32 ? _Alignof(float) : 1 },
    };
    memcpy(b, in, sizeof in);
    return 3;
}

/* The checks every training call makes on the layer, the shape and the
 * inputs; fills args (host pointers) and call's byte counts. */
static sgk_status prepare(sgk_layer *layer, const char *name, int64_t B, int64_t N,
                          const void *nodes, const void *pair_feats, const void *edge_mask,
                          sgk_mask_type mask_type, sgk_fwd *args, sgk_call *call)
{
    size_t mask_elem = 0;
    sgk_status st = sgk_check_inputs(layer, nodes, pair_feats, edge_mask);
    if (st == SGK_OK)
        st = require_backward(layer, name);
    if (st == SGK_OK)
        st = sgk_mask_elem_size(mask_type, &mask_elem);
    if (st == SGK_OK)
        st = sgk_check_shape(layer, B, N, mask_elem, 1, call);
    if (st != SGK_OK)
        return st;
    sgk_fwd_init(args, B, N, nodes, pair_feats, edge_mask, mask_type);
    return SGK_OK;
}

static sgk_status saved_bytes(const sgk_layer *layer, int64_t B, int64_t N, size_t *bytes)
{
    const int64_t dims[] = { B, layer->H, N };
    return sgk_tensor_bytes("saved", "B*H*N", dims, 3, sizeof(float), layer->ops, 1, bytes);
}

SGK_EXPORT sgk_status sgk_saved_size(sgk_layer *layer, int64_t B, int64_t N, size_t *bytes)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (bytes == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "bytes is NULL");
    sgk_call call;
    size_t b = 0;
    sgk_status st = require_backward(layer, "sgk_saved_size");
    if (st == SGK_OK)
        st = sgk_check_shape(layer, B, N, sizeof(float), 1, &call);
    if (st == SGK_OK)
        st = saved_bytes(layer, B, N, &b);
    if (st == SGK_OK)
        *bytes = b;
    return st;
}

/* The workspace bytes the backend needs for (B, N), or an error where
 * that does not fit a size_t. */
static sgk_status train_need(const sgk_layer *layer, const char *name, int64_t B, int64_t N,
                             size_t *need)
{
    *need = layer->ops->train_workspace_size(layer->blayer, B, N);
    if (*need == SIZE_MAX)
        return sgk_set_error(SGK_ERR_SIZE_OVERFLOW,
                             "%s: the workspace for B=%lld, N=%lld is more bytes than size_t "
                             "can hold",
                             name, (long long)B, (long long)N);
    return SGK_OK;
}

/* The workspace of a training call: the caller's (device form: checked
 * against what the shape needs) or one allocated here (host form, *owned
 * set). */
static sgk_status workspace_for(const sgk_layer *layer, const char *name, int64_t B, int64_t N,
                                int host, void *workspace, size_t workspace_bytes, void **ws,
                                void **owned)
{
    size_t need = 0;
    *ws = *owned = NULL;
    sgk_status st = train_need(layer, name, B, N, &need);
    if (st != SGK_OK)
        return st;
    if (host) {
        if (!layer->ops->host_memory) { /* with the device copies (run_staged) */
            *ws = NULL;
            return SGK_OK;
        }
        *ws = *owned = sgk_malloc(need ? need : 1);
        if (*owned == NULL)
            return sgk_set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "%s: out of memory allocating %zu bytes of workspace", name,
                                 need);
        return SGK_OK;
    }
    st = sgk_check_workspace(name, "sgk_train_workspace_size", need, B, N, workspace,
                             workspace_bytes, 16, "the training calls take it aligned to 16 bytes");
    if (st != SGK_OK)
        return st;
    *ws = workspace;
    return SGK_OK;
}

SGK_EXPORT sgk_status sgk_train_workspace_size(sgk_layer *layer, int64_t B, int64_t N,
                                               size_t *bytes)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (bytes == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "bytes is NULL");
    sgk_call call;
    sgk_status st = require_backward(layer, "sgk_train_workspace_size");
    if (st == SGK_OK)
        st = sgk_check_shape(layer, B, N, sizeof(float), 1, &call);
    size_t need = 0;
    if (st == SGK_OK)
        st = train_need(layer, "sgk_train_workspace_size", B, N, &need);
    if (st == SGK_OK)
        *bytes = need;
    return st;
}

/* A host form's buffers on a backend of device memory: n of them, inputs
 * (in set) copied to device buffers, outputs (out set) copied back through
 * one host staging block and written to the caller's only once every step
 * has succeeded; NULL ones left out. */
typedef struct staged {
    const void *in;
    void *out;
    size_t bytes;
    void *dev;
} staged;

typedef sgk_status (*staged_op)(sgk_layer *layer, sgk_fwd *args, staged *b, void *user);

static sgk_status run_staged(sgk_layer *layer, const char *name, sgk_fwd *args, staged *b, int n,
                             size_t ws_bytes, staged_op op, void *user)
{
    const sgk_backend_ops *ops = layer->ops;
    void *bctx = layer->ctx->bctx;
    size_t out_bytes = 0;
    for (int i = 0; i < n; i++)
        if (b[i].out)
            out_bytes += b[i].bytes;
    unsigned char *staging = sgk_malloc(out_bytes ? out_bytes : 1);
    if (staging == NULL)
        return sgk_set_error(SGK_ERR_OUT_OF_MEMORY, "%s: out of memory allocating %zu bytes to stage the outputs",
                             name, out_bytes);
    uint64_t serial = sgk_error_serial();
    const char *step = "mem_alloc";
    void *ws = NULL;
    sgk_status st = ops->mem_alloc(bctx, ws_bytes ? ws_bytes : 1, &ws);
    for (int i = 0; i < n && st == SGK_OK; i++)
        if (b[i].in || b[i].out)
            st = ops->mem_alloc(bctx, b[i].bytes ? b[i].bytes : 1, &b[i].dev);
    if (st == SGK_OK)
        step = "copy_to_device";
    for (int i = 0; i < n && st == SGK_OK; i++)
        if (b[i].in)
            st = ops->copy_to_device(bctx, b[i].dev, b[i].in, b[i].bytes);
    if (st == SGK_OK) {
        step = name;
        args->workspace = ws;
        args->workspace_bytes = ws_bytes;
        args->stream = NULL;
        st = op(layer, args, b, user);
    }
    if (st == SGK_OK) {
        step = "synchronize";
        st = ops->synchronize(bctx);
    }
    size_t at = 0;
    if (st == SGK_OK)
        step = "copy_to_host";
    for (int i = 0; i < n && st == SGK_OK; i++)
        if (b[i].out) {
            st = ops->copy_to_host(bctx, staging + at, b[i].dev, b[i].bytes);
            at += b[i].bytes;
        }
    st = sgk_backend_result(st, serial, ops, step);
    at = 0;
    for (int i = 0; i < n; i++) {
        if (st == SGK_OK && b[i].out)
            memcpy(b[i].out, staging + at, b[i].bytes);
        if (b[i].out)
            at += b[i].bytes;
        if (b[i].dev)
            ops->mem_free(bctx, b[i].dev);
    }
    if (ws)
        ops->mem_free(bctx, ws);
    free(staging);
    return st;
}

static sgk_status staged_forward_train(sgk_layer *layer, sgk_fwd *args, staged *b, void *user)
{
    (void)user;
    args->nodes = b[0].dev;
    args->pair_feats = b[1].dev;
    args->edge_mask = b[2].dev;
    args->out = b[3].dev;
    return layer->ops->forward_train(layer->blayer, args, b[4].dev);
}

static sgk_status forward_train(int host, sgk_layer *layer, int64_t B, int64_t N,
                                const void *nodes, const void *pair_feats, const void *edge_mask,
                                sgk_mask_type mask_type, void *out, void *saved, void *workspace,
                                size_t workspace_bytes, void *stream)
{
    const char *name = host ? "sgk_forward_train" : "sgk_forward_train_device";
    sgk_fwd args;
    sgk_call call;
    sgk_status st = prepare(layer, name, B, N, nodes, pair_feats, edge_mask, mask_type, &args,
                            &call);
    if (st != SGK_OK)
        return st;
    if (out == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "out is NULL");
    if (saved == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "saved is NULL");
    size_t sbytes = 0;
    st = saved_bytes(layer, B, N, &sbytes);
    if (st != SGK_OK)
        return st;
    buf bufs[6];
    const size_t elem = sgk_dtype_size(layer->dtype);
    const int n_in = input_bufs(bufs, nodes, pair_feats, edge_mask, mask_type, &call, elem);
    const buf outs[] = {
        { "out", out, call.nodes_bytes, elem },
        { "saved", saved, sbytes, _Alignof(float) },
        { "workspace", host ? NULL : workspace, workspace_bytes, 1 },
    };
    memcpy(bufs + n_in, outs, sizeof outs);
    st = check_buffers(bufs, n_in + 3, n_in, host || layer->ops->host_memory);
    void *owned = NULL;
    if (st == SGK_OK)
        st = workspace_for(layer, name, B, N, host, workspace, workspace_bytes, &args.workspace,
                           &owned);
    if (st != SGK_OK)
        return st;
    if (host && !layer->ops->host_memory) {
        size_t need = 0;
        st = train_need(layer, name, B, N, &need);
        staged b[] = { { nodes, NULL, call.nodes_bytes, NULL },
                       { pair_feats, NULL, call.pair_bytes, NULL },
                       { edge_mask, NULL, call.mask_bytes, NULL },
                       { NULL, out, call.nodes_bytes, NULL },
                       { NULL, saved, sbytes, NULL } };
        if (st == SGK_OK)
            st = run_staged(layer, "forward_train", &args, b, 5, need, staged_forward_train, NULL);
        return st;
    }
    args.out = out;
    args.stream = stream;
    uint64_t serial = sgk_error_serial();
    st = layer->ops->forward_train(layer->blayer, &args, saved);
    free(owned);
    return sgk_backend_result(st, serial, layer->ops, "forward_train");
}

SGK_EXPORT sgk_status sgk_forward_train(sgk_layer *layer, int64_t B, int64_t N,
                                        const void *nodes, const void *pair_feats,
                                        const void *edge_mask, sgk_mask_type mask_type,
                                        void *out, void *saved)
{
    return forward_train(1, layer, B, N, nodes, pair_feats, edge_mask, mask_type, out, saved,
                         NULL, 0, NULL);
}

SGK_EXPORT sgk_status sgk_forward_train_device(sgk_layer *layer, int64_t B, int64_t N,
                                               const void *nodes, const void *pair_feats,
                                               const void *edge_mask, sgk_mask_type mask_type,
                                               void *out, void *saved, void *workspace,
                                               size_t workspace_bytes, void *stream)
{
    return forward_train(0, layer, B, N, nodes, pair_feats, edge_mask, mask_type, out, saved,
                         workspace, workspace_bytes, stream);
}

static sgk_status staged_backward(sgk_layer *layer, sgk_fwd *args, staged *b, void *user)
{
    (void)user;
    args->nodes = b[0].dev;
    args->pair_feats = b[1].dev;
    args->edge_mask = b[2].dev;
    sgk_grads g;
    void **slot[12] = { &g.nodes, &g.pair_feats, &g.ln_gamma, &g.ln_beta, &g.wq, &g.wk,
                        &g.wv,    &g.wo,         &g.w1,       &g.b1,      &g.w2, &g.b2 };
    for (int i = 0; i < 12; i++)
        *slot[i] = b[5 + i].dev;
    return layer->ops->backward(layer->blayer, args, b[3].dev, b[4].dev, &g);
}

static sgk_status backward(int host, sgk_layer *layer, int64_t B, int64_t N, const void *nodes,
                           const void *pair_feats, const void *edge_mask, sgk_mask_type mask_type,
                           const void *saved, const void *d_out, const sgk_grads *grads,
                           void *workspace, size_t workspace_bytes, void *stream)
{
    const char *name = host ? "sgk_backward" : "sgk_backward_device";
    sgk_fwd args;
    sgk_call call;
    sgk_status st = prepare(layer, name, B, N, nodes, pair_feats, edge_mask, mask_type, &args,
                            &call);
    if (st != SGK_OK)
        return st;
    if (saved == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "saved is NULL");
    if (d_out == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "d_out is NULL");
    if (grads == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "grads is NULL");
    size_t sbytes = 0;
    st = saved_bytes(layer, B, N, &sbytes);
    if (st != SGK_OK)
        return st;
    const size_t f = sgk_dtype_size(layer->dtype), D = (size_t)layer->D, H = (size_t)layer->H,
                 P = (size_t)layer->P;
    buf bufs[18];
    const size_t elem = sgk_dtype_size(layer->dtype);
    const int n_in = input_bufs(bufs, nodes, pair_feats, edge_mask, mask_type, &call, elem);
    const buf rest[] = {
        { "saved", saved, sbytes, _Alignof(float) },
        { "d_out", d_out, call.nodes_bytes, f },
        { "grads->nodes", grads->nodes, call.nodes_bytes, f },
        { "grads->pair_feats", grads->pair_feats, call.pair_bytes, f },
        { "grads->ln_gamma", grads->ln_gamma, D * f, f },
        { "grads->ln_beta", grads->ln_beta, D * f, f },
        { "grads->wq", grads->wq, D * D * f, f },
        { "grads->wk", grads->wk, D * D * f, f },
        { "grads->wv", grads->wv, D * D * f, f },
        { "grads->wo", grads->wo, D * D * f, f },
        { "grads->w1", grads->w1, P * P * f, f },
        { "grads->b1", grads->b1, P * f, f },
        { "grads->w2", grads->w2, H * P * f, f },
        { "grads->b2", grads->b2, H * f, f },
        { "workspace", host ? NULL : workspace, workspace_bytes, 1 },
    };
    memcpy(bufs + n_in, rest, sizeof rest);
    st = check_buffers(bufs, n_in + (int)(sizeof rest / sizeof rest[0]), n_in + 2,
                       host || layer->ops->host_memory);
    void *owned = NULL;
    if (st == SGK_OK)
        st = workspace_for(layer, name, B, N, host, workspace, workspace_bytes, &args.workspace,
                           &owned);
    if (st != SGK_OK)
        return st;
    if (host && !layer->ops->host_memory) {
        size_t need = 0;
        st = train_need(layer, name, B, N, &need);
        staged b[17] = { { nodes, NULL, call.nodes_bytes, NULL },
                         { pair_feats, NULL, call.pair_bytes, NULL },
                         { edge_mask, NULL, call.mask_bytes, NULL },
                         { saved, NULL, sbytes, NULL },
                         { d_out, NULL, call.nodes_bytes, NULL } };
        for (int i = 0; i < 12; i++) { /* the gradients, in sgk_grads' order as in rest[] */
            const buf *r = &rest[2 + i];
            staged s = { NULL, (void *)r->ptr, r->bytes, NULL };
            b[5 + i] = s;
        }
        if (st == SGK_OK)
            st = run_staged(layer, "backward", &args, b, 17, need, staged_backward, NULL);
        return st;
    }
    args.stream = stream;
    uint64_t serial = sgk_error_serial();
    st = layer->ops->backward(layer->blayer, &args, saved, d_out, grads);
    free(owned);
    return sgk_backend_result(st, serial, layer->ops, "backward");
}

SGK_EXPORT sgk_status sgk_backward(sgk_layer *layer, int64_t B, int64_t N, const void *nodes,
                                   const void *pair_feats, const void *edge_mask,
                                   sgk_mask_type mask_type, const void *saved,
                                   const void *d_out, const sgk_grads *grads)
{
    return backward(1, layer, B, N, nodes, pair_feats, edge_mask, mask_type, saved, d_out, grads,
                    NULL, 0, NULL);
}

SGK_EXPORT sgk_status sgk_backward_device(sgk_layer *layer, int64_t B, int64_t N,
                                          const void *nodes, const void *pair_feats,
                                          const void *edge_mask, sgk_mask_type mask_type,
                                          const void *saved, const void *d_out,
                                          const sgk_grads *grads, void *workspace,
                                          size_t workspace_bytes, void *stream)
{
    return backward(0, layer, B, N, nodes, pair_feats, edge_mask, mask_type, saved, d_out, grads,
                    workspace, workspace_bytes, stream);
}
