/* Layers: a descriptor checked once, weights handed to the backend at
 * creation and whenever the caller replaces them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgk_internal.h"

SGK_EXPORT void sgk_layer_desc_init(sgk_layer_desc *desc)
{
    if (desc == NULL)
        return;
    memset(desc, 0, sizeof *desc);
    desc->struct_size = sizeof *desc;
    desc->eps = 1e-5f;
    desc->dtype = SGK_DTYPE_F32;
}

/* The first sgk_layer_desc ended with b2. */
#define DESC_OLDEST SGK_SIZE_THROUGH(sgk_layer_desc, b2)

/* The caller's descriptor in this sgk's layout, fields it lacks defaulted. */
static sgk_status read_desc(const sgk_layer_desc *desc, sgk_layer_desc *d)
{
    sgk_layer_desc_init(d);
    return sgk_read_struct("desc->struct_size", "sgk_layer_desc", "sgk_layer_desc_init", desc,
                           DESC_OLDEST, sizeof *d, d);
}

size_t sgk_dtype_size(sgk_dtype dtype)
{
    switch (dtype) {
    case SGK_DTYPE_F32: return 4;
    case SGK_DTYPE_BF16: return 2;
    case SGK_DTYPE_F16: return 2;
    }
    return 0;
}

const char *sgk_dtype_name(sgk_dtype dtype)
{
    switch (dtype) {
    case SGK_DTYPE_F32: return "SGK_DTYPE_F32";
    case SGK_DTYPE_BF16: return "SGK_DTYPE_BF16";
    case SGK_DTYPE_F16: return "SGK_DTYPE_F16";
    }
    return "not an sgk_dtype";
}

int sgk_backend_runs_dtype(const sgk_backend_ops *ops, sgk_dtype dtype)
{
    const unsigned runs = ops->dtypes ? ops->dtypes : SGK_DTYPE_BIT(SGK_DTYPE_F32);
    return sgk_dtype_size(dtype) != 0 && (runs & SGK_DTYPE_BIT(dtype)) != 0;
}

/* A dtype the backend's layers take; the message lists those it does. */
static sgk_status check_dtype(sgk_dtype dtype, const sgk_backend_ops *ops)
{
    if (sgk_backend_runs_dtype(ops, dtype))
        return SGK_OK;
    char runs[64] = "";
    const sgk_dtype all[] = { SGK_DTYPE_F32, SGK_DTYPE_BF16, SGK_DTYPE_F16 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (sgk_backend_runs_dtype(ops, all[i]))
            snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s", runs[0] ? ", " : "",
                     sgk_dtype_name(all[i]));
    if (sgk_dtype_size(dtype) == 0)
        return sgk_set_error(SGK_ERR_UNSUPPORTED,
                             "desc->dtype (%d) is not an sgk_dtype; backend %s runs %s",
                             (int)dtype, ops->name, runs);
    return sgk_set_error(SGK_ERR_UNSUPPORTED,
                         "desc->dtype %s is not supported by backend %s, which runs %s",
                         sgk_dtype_name(dtype), ops->name, runs);
}

static sgk_status check_eps(float eps)
{
    if (!isfinite(eps) || eps < 0.0f)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "desc->eps must be finite and >= 0, got %g",
                             (double)eps);
    return SGK_OK;
}

static sgk_status check_dims(const sgk_layer_desc *desc)
{
    const struct { const char *name; int64_t value; } dims[] = {
        { "dim", desc->dim }, { "heads", desc->heads }, { "pair_dim", desc->pair_dim },
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value < 1)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "desc->%s must be >= 1, got %lld",
                                 dims[i].name, (long long)dims[i].value);
    if (desc->dim % desc->heads != 0)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "desc->dim (%lld) is not divisible by desc->heads (%lld)",
                             (long long)desc->dim, (long long)desc->heads);
    return check_eps(desc->eps);
}

static sgk_status check_weights(const sgk_layer_desc *desc)
{
    const struct { const char *name; const void *ptr; } w[] = {
        { "ln_gamma", desc->ln_gamma }, { "ln_beta", desc->ln_beta },
        { "wq", desc->wq }, { "wk", desc->wk }, { "wv", desc->wv }, { "wo", desc->wo },
        { "w1", desc->w1 }, { "b1", desc->b1 }, { "w2", desc->w2 }, { "b2", desc->b2 },
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i].ptr == NULL)
            return sgk_set_error(SGK_ERR_NULL_POINTER, "desc->%s is NULL", w[i].name);
    return SGK_OK;
}

/* The largest weights must be indexable by the backend. */
static sgk_status check_weight_sizes(const sgk_layer_desc *desc, const sgk_backend_ops *ops)
{
    const int64_t dd[] = { desc->dim, desc->dim };
    const int64_t pp[] = { desc->pair_dim, desc->pair_dim };
    const int64_t hp[] = { desc->heads, desc->pair_dim };
    const size_t elem = sgk_dtype_size(desc->dtype);
    size_t bytes;
    sgk_status st = sgk_tensor_bytes("desc->wq", "D*D", dd, 2, elem, ops, 1, &bytes);
    if (st == SGK_OK)
        st = sgk_tensor_bytes("desc->w1", "P*P", pp, 2, elem, ops, 1, &bytes);
    if (st == SGK_OK)
        st = sgk_tensor_bytes("desc->w2", "H*P", hp, 2, elem, ops, 1, &bytes);
    return st;
}

static sgk_status check_desc(const sgk_context *ctx, const sgk_layer_desc *desc)
{
    sgk_status st = check_dtype(desc->dtype, ctx->ops);
    if (st == SGK_OK)
        st = check_dims(desc);
    if (st == SGK_OK)
        st = check_weights(desc);
    if (st == SGK_OK)
        st = check_weight_sizes(desc, ctx->ops);
    return st;
}

SGK_EXPORT sgk_status sgk_layer_create(sgk_context *ctx, const sgk_layer_desc *desc,
                                       sgk_layer **out)
{
    if (ctx == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "ctx is NULL");
    if (desc == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "desc is NULL");
    if (out == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "out is NULL");
    sgk_layer_desc d;
    sgk_status st = read_desc(desc, &d);
    if (st == SGK_OK)
        st = check_desc(ctx, &d);
    if (st != SGK_OK)
        return st;
    desc = &d;

    sgk_layer *layer = sgk_malloc(sizeof *layer);
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_OUT_OF_MEMORY, "out of memory allocating a layer (%zu bytes)",
                             sizeof *layer);
    layer->ctx = ctx;
    layer->ops = ctx->ops;
    layer->blayer = NULL;
    layer->D = desc->dim;
    layer->H = desc->heads;
    layer->P = desc->pair_dim;
    layer->dtype = desc->dtype;
    layer->eps = desc->eps;
    layer->forced = -1;
    uint64_t serial = sgk_error_serial();
    st = sgk_backend_result(ctx->ops->layer_create(ctx->bctx, desc, &layer->blayer), serial,
                            ctx->ops, "layer_create");
    if (st != SGK_OK) {
        free(layer);
        return st;
    }
    int count = ctx->ops->variant_count(layer->blayer);
    layer->variant_count = count > 0 ? count : 0;
    *out = layer;
    return SGK_OK;
}

SGK_EXPORT void sgk_layer_destroy(sgk_layer *layer)
{
    if (layer == NULL)
        return;
    layer->ops->layer_destroy(layer->blayer);
    free(layer);
}

/* ---- new weights for a layer ------------------------------------------- */

/* desc against the layer it is to replace the weights of: the same shape
 * and dtype, a valid eps (the layer's own for the device form), no NULL
 * weight, and for the device form float-aligned pointers. */
static sgk_status check_replacement(const sgk_layer *layer, const sgk_layer_desc *d, int device)
{
    const char *call = device ? "sgk_layer_set_weights_device" : "sgk_layer_set_weights";
    const struct { const char *name; int64_t got, have; } dims[] = {
        { "dim", d->dim, layer->D }, { "heads", d->heads, layer->H },
        { "pair_dim", d->pair_dim, layer->P },
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].got != dims[i].have)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "desc->%s (%lld) differs from the layer's %s (%lld): %s keeps "
                                 "the layer's shape (create a new layer for another)",
                                 dims[i].name, (long long)dims[i].got, dims[i].name,
                                 (long long)dims[i].have, call);
    if (d->dtype != layer->dtype)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "desc->dtype (%d, %s) differs from the layer's dtype (%d, %s): %s "
                             "keeps the layer's dtype",
                             (int)d->dtype, sgk_dtype_name(d->dtype), (int)layer->dtype,
                             sgk_dtype_name(layer->dtype), call);
    sgk_status st = check_eps(d->eps);
    if (st != SGK_OK)
        return st;
    /* eps reaches the kernels as an argument, which a CUDA graph keeps as
     * captured: a repack enqueued on a stream cannot change it for them. */
    if (device && d->eps != layer->eps)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "desc->eps (%.9g) differs from the layer's eps (%.9g): "
                             "sgk_layer_set_weights_device keeps eps, since forward calls "
                             "captured in a CUDA graph hold it; change eps with "
                             "sgk_layer_set_weights",
                             (double)d->eps, (double)layer->eps);
    st = check_weights(d);
    if (st != SGK_OK || !device)
        return st;
    const struct { const char *name; const void *ptr; } w[] = {
        { "ln_gamma", d->ln_gamma }, { "ln_beta", d->ln_beta },
        { "wq", d->wq }, { "wk", d->wk }, { "wv", d->wv }, { "wo", d->wo },
        { "w1", d->w1 }, { "b1", d->b1 }, { "w2", d->w2 }, { "b2", d->b2 },
    };
    const size_t align = sgk_dtype_size(layer->dtype);
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if ((uintptr_t)w[i].ptr % align != 0)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "desc->%s (%p) is not aligned to %zu bytes: device weights must "
                                 "be aligned to their element size (%s)",
                                 w[i].name, w[i].ptr, align, sgk_dtype_name(layer->dtype));
    return SGK_OK;
}

static sgk_status set_weights(sgk_layer *layer, const sgk_layer_desc *desc, int device,
                              void *stream)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (desc == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "desc is NULL");
    sgk_layer_desc d;
    sgk_status st = read_desc(desc, &d);
    if (st == SGK_OK)
        st = check_replacement(layer, &d, device);
    if (st != SGK_OK)
        return st;
    const sgk_backend_ops *ops = layer->ops;
    uint64_t serial = sgk_error_serial();
    if (device)
        return sgk_backend_result(ops->layer_set_weights_device(layer->blayer, &d, stream), serial,
                                  ops, "layer_set_weights_device");
    st = sgk_backend_result(ops->layer_set_weights(layer->blayer, &d), serial, ops,
                            "layer_set_weights");
    if (st == SGK_OK)
        layer->eps = d.eps;
    return st;
}

SGK_EXPORT sgk_status sgk_layer_set_weights(sgk_layer *layer, const sgk_layer_desc *desc)
{
    return set_weights(layer, desc, 0, NULL);
}

SGK_EXPORT sgk_status sgk_layer_set_weights_device(sgk_layer *layer, const sgk_layer_desc *desc,
                                                   void *stream)
{
    return set_weights(layer, desc, 1, stream);
}
