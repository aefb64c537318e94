/* Forward calls: argument checks, then dispatch to the backend, either on
 * the caller's device pointers or, for sgk_forward, through device copies
 * of the caller's host buffers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgk_internal.h"

sgk_status sgk_check_inputs(const sgk_layer *layer, const void *nodes, const void *pair_feats,
                            const void *edge_mask)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (nodes == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "nodes is NULL");
    if (pair_feats == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "pair_feats is NULL");
    if (edge_mask == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "edge_mask is NULL");
    return SGK_OK;
}

void sgk_fwd_init(sgk_fwd *args, int64_t B, int64_t N, const void *nodes, const void *pair_feats,
                  const void *edge_mask, sgk_mask_type mask_type)
{
    memset(args, 0, sizeof *args);
    args->B = B;
    args->N = N;
    args->nodes = nodes;
    args->pair_feats = pair_feats;
    args->edge_mask = edge_mask;
    args->mask_type = mask_type;
}

static sgk_status check_pointers(const sgk_layer *layer, const void *nodes,
                                 const void *pair_feats, const void *edge_mask, const void *out)
{
    sgk_status st = sgk_check_inputs(layer, nodes, pair_feats, edge_mask);
    if (st == SGK_OK && out == NULL)
        st = sgk_set_error(SGK_ERR_NULL_POINTER, "out is NULL");
    return st;
}

sgk_status sgk_mask_elem_size(sgk_mask_type mask_type, size_t *elem)
{
    switch (mask_type) {
    case SGK_MASK_F32: *elem = sizeof(float); return SGK_OK;
    case SGK_MASK_U8: *elem = sizeof(uint8_t); return SGK_OK;
    }
    return sgk_set_error(SGK_ERR_UNSUPPORTED,
                         "mask_type (%d) is not an sgk_mask_type (SGK_MASK_F32 or SGK_MASK_U8)",
                         (int)mask_type);
}

sgk_status sgk_check_workspace(const char *who, const char *query, size_t need, int64_t B, int64_t N,
                               const void *workspace, size_t workspace_bytes, size_t align,
                               const char *why_aligned)
{
    if (need > 0 && workspace == NULL)
        return sgk_set_error(SGK_ERR_INSUFFICIENT_WORKSPACE,
                             "workspace is NULL but %s needs %zu bytes for B=%lld, N=%lld (see %s)",
                             who, need, (long long)B, (long long)N, query);
    if (workspace_bytes < need)
        return sgk_set_error(SGK_ERR_INSUFFICIENT_WORKSPACE,
                             "workspace_bytes (%zu) is less than the %zu bytes %s needs for B=%lld, "
                             "N=%lld (see %s)",
                             workspace_bytes, need, who, (long long)B, (long long)N, query);
    if ((uintptr_t)workspace % align != 0)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "workspace (%p) is not aligned to %zu bytes: %s", workspace, align,
                             why_aligned);
    return SGK_OK;
}

static sgk_status check_workspace(const sgk_layer *layer, const sgk_call *call, int64_t B,
                                  int64_t N, const void *workspace, size_t workspace_bytes)
{
    const size_t need = call->workspace_bytes;
    if (workspace_bytes >= need && (need == 0 || workspace != NULL) &&
        (uintptr_t)workspace % _Alignof(float) == 0)
        return SGK_OK; /* every call: no message to format */
    char who[96];
    snprintf(who, sizeof who, "variant \"%s\"", sgk_variant_name(layer, call->variant));
    return sgk_check_workspace(who, "sgk_workspace_size", need, B, N, workspace,
                               workspace_bytes, _Alignof(float), "backends keep floats in it");
}

int sgk_ranges_overlap(const void *a, size_t a_len, const void *b, size_t b_len)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + b_len && pb < pa + a_len;
}

/* With host pointers the byte ranges are compared; device pointers may be
 * opaque handles (OpenCL), so only identical pointers are caught there. */
static sgk_status check_aliasing(const sgk_fwd *a, const sgk_call *call, int ranges)
{
    const struct { const char *name; const void *ptr; size_t bytes; } in[] = {
        { "nodes", a->nodes, call->nodes_bytes },
        { "pair_feats", a->pair_feats, call->pair_bytes },
        { "edge_mask", a->edge_mask, call->mask_bytes },
        { "out", a->out, call->nodes_bytes },
    };
    for (int i = 0; i < 3; i++)
        if (ranges ? sgk_ranges_overlap(a->out, call->nodes_bytes, in[i].ptr, in[i].bytes)
                   : a->out == in[i].ptr)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "out overlaps %s: out must not alias an input", in[i].name);
    if (a->workspace == NULL || call->workspace_bytes == 0)
        return SGK_OK;
    for (int i = 0; i < 4; i++)
        if (ranges ? sgk_ranges_overlap(a->workspace, call->workspace_bytes, in[i].ptr, in[i].bytes)
                   : a->workspace == in[i].ptr)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "workspace overlaps %s: workspace must be a buffer of its own",
                                 in[i].name);
    return SGK_OK;
}

/* Data is read in elements of the layer's dtype (and the mask as float or
 * uint8): a buffer at an address that is not a multiple of its element
 * size is undefined behaviour on the host and faults on GPUs, so it is
 * refused rather than read. cl_mem handles are pointers to objects and
 * pass. */
sgk_status sgk_check_aligned(const char *name, const void *ptr, size_t align)
{
    if ((uintptr_t)ptr % align == 0)
        return SGK_OK;
    return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                         "%s (%p) is not aligned to %zu bytes: a buffer must be aligned to the "
                         "size of its elements",
                         name, ptr, align);
}

static sgk_status check_alignment(const sgk_layer *layer, const void *nodes, const void *pair_feats,
                                  const void *edge_mask, size_t mask_elem, const void *out)
{
    const size_t elem = sgk_dtype_size(layer->dtype);
    sgk_status st = sgk_check_aligned("nodes", nodes, elem);
    if (st == SGK_OK)
        st = sgk_check_aligned("pair_feats", pair_feats, elem);
    if (st == SGK_OK)
        st = sgk_check_aligned("edge_mask", edge_mask,
                               mask_elem == sizeof(float) ? _Alignof(float) : 1);
    if (st == SGK_OK)
        st = sgk_check_aligned("out", out, elem);
    return st;
}

/* Checks shared by both forward calls; fills args and call. */
static sgk_status prepare(sgk_layer *layer, int64_t B, int64_t N, const void *nodes,
                          const void *pair_feats, const void *edge_mask, sgk_mask_type mask_type,
                          void *out, sgk_fwd *args, sgk_call *call)
{
    sgk_status st = check_pointers(layer, nodes, pair_feats, edge_mask, out);
    size_t mask_elem = 0;
    if (st == SGK_OK)
        st = sgk_mask_elem_size(mask_type, &mask_elem);
    if (st == SGK_OK)
        st = check_alignment(layer, nodes, pair_feats, edge_mask, mask_elem, out);
    if (st == SGK_OK)
        st = sgk_plan_call(layer, B, N, mask_elem, 1, call);
    if (st != SGK_OK)
        return st;
    sgk_fwd_init(args, B, N, nodes, pair_feats, edge_mask, mask_type);
    args->out = out;
    return SGK_OK;
}

static sgk_status run_in_host_memory(sgk_layer *layer, const sgk_call *call, sgk_fwd *args)
{
    void *work = NULL;
    if (call->workspace_bytes > 0) {
        work = sgk_malloc(call->workspace_bytes);
        if (work == NULL)
            return sgk_set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "out of memory allocating %zu bytes of workspace for variant "
                                 "\"%s\"",
                                 call->workspace_bytes, sgk_variant_name(layer, call->variant));
    }
    args->workspace = work;
    args->workspace_bytes = call->workspace_bytes;
    uint64_t serial = sgk_error_serial();
    sgk_status st = layer->ops->forward(layer->blayer, call->variant, &call->plan, args);
    st = sgk_backend_result(st, serial, layer->ops, "forward");
    free(work);
    return st;
}

enum { BUF_NODES, BUF_PAIR, BUF_MASK, BUF_OUT, BUF_WORK, BUF_COUNT };

/* Device copies of the caller's buffers. out is written only once every
 * step has succeeded, from a host staging buffer, so that a failure while
 * copying back cannot leave it half written. */
static sgk_status run_with_copies(sgk_layer *layer, const sgk_call *call, const sgk_fwd *host)
{
    const sgk_backend_ops *ops = layer->ops;
    void *bctx = layer->ctx->bctx;
    const size_t bytes[BUF_COUNT] = { call->nodes_bytes, call->pair_bytes, call->mask_bytes,
                                      call->nodes_bytes, call->workspace_bytes };
    void *dev[BUF_COUNT] = { NULL };
    void *staging = sgk_malloc(call->nodes_bytes);
    if (staging == NULL)
        return sgk_set_error(SGK_ERR_OUT_OF_MEMORY,
                             "out of memory allocating %zu bytes to stage out", call->nodes_bytes);

    uint64_t serial = sgk_error_serial();
    const char *step = "mem_alloc";
    sgk_status st = SGK_OK;
    for (int i = 0; i < BUF_COUNT && st == SGK_OK; i++)
        if (bytes[i] > 0)
            st = ops->mem_alloc(bctx, bytes[i], &dev[i]);
    if (st == SGK_OK) {
        step = "copy_to_device";
        st = ops->copy_to_device(bctx, dev[BUF_NODES], host->nodes, bytes[BUF_NODES]);
    }
    if (st == SGK_OK)
        st = ops->copy_to_device(bctx, dev[BUF_PAIR], host->pair_feats, bytes[BUF_PAIR]);
    if (st == SGK_OK)
        st = ops->copy_to_device(bctx, dev[BUF_MASK], host->edge_mask, bytes[BUF_MASK]);
    if (st == SGK_OK) {
        sgk_fwd args = *host;
        args.nodes = dev[BUF_NODES];
        args.pair_feats = dev[BUF_PAIR];
        args.edge_mask = dev[BUF_MASK];
        args.out = dev[BUF_OUT];
        args.workspace = dev[BUF_WORK];
        args.workspace_bytes = bytes[BUF_WORK];
        args.stream = NULL;
        step = "forward";
        st = ops->forward(layer->blayer, call->variant, &call->plan, &args);
    }
    if (st == SGK_OK) {
        step = "synchronize";
        st = ops->synchronize(bctx);
    }
    if (st == SGK_OK) {
        step = "copy_to_host";
        st = ops->copy_to_host(bctx, staging, dev[BUF_OUT], bytes[BUF_OUT]);
    }
    st = sgk_backend_result(st, serial, ops, step);
    if (st == SGK_OK)
        memcpy(host->out, staging, call->nodes_bytes);

    for (int i = 0; i < BUF_COUNT; i++)
        if (dev[i] != NULL)
            ops->mem_free(bctx, dev[i]);
    free(staging);
    return st;
}

SGK_EXPORT sgk_status sgk_forward(sgk_layer *layer, int64_t B, int64_t N, const void *nodes,
                                  const void *pair_feats, const void *edge_mask,
                                  sgk_mask_type mask_type, void *out)
{
    sgk_fwd args;
    sgk_call call;
    sgk_status st = prepare(layer, B, N, nodes, pair_feats, edge_mask, mask_type, out, &args,
                            &call);
    if (st == SGK_OK)
        st = check_aliasing(&args, &call, 1);
    if (st != SGK_OK)
        return st;
    if (layer->ops->host_memory)
        return run_in_host_memory(layer, &call, &args);
    return run_with_copies(layer, &call, &args);
}

SGK_EXPORT sgk_status sgk_forward_device(sgk_layer *layer, int64_t B, int64_t N,
                                         const void *nodes, const void *pair_feats,
                                         const void *edge_mask, sgk_mask_type mask_type,
                                         void *out, void *workspace, size_t workspace_bytes,
                                         void *stream)
{
    sgk_fwd args;
    sgk_call call;
    sgk_status st = prepare(layer, B, N, nodes, pair_feats, edge_mask, mask_type, out, &args,
                            &call);
    if (st == SGK_OK)
        st = check_workspace(layer, &call, B, N, workspace, workspace_bytes);
    if (st != SGK_OK)
        return st;
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    args.stream = stream;
    st = check_aliasing(&args, &call, layer->ops->host_memory);
    if (st != SGK_OK)
        return st;
    uint64_t serial = sgk_error_serial();
    st = layer->ops->forward(layer->blayer, call.variant, &call.plan, &args);
    return sgk_backend_result(st, serial, layer->ops, "forward");
}

SGK_EXPORT sgk_status sgk_workspace_size(sgk_layer *layer, int64_t B, int64_t N, size_t *bytes)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (bytes == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "bytes is NULL");
    sgk_call call;
    /* The mask type is not known here; a float mask is the larger one. */
    sgk_status st = sgk_plan_call(layer, B, N, sizeof(float), 1, &call);
    if (st != SGK_OK)
        return st;
    *bytes = call.workspace_bytes;
    return SGK_OK;
}
