/* Shape checks shared by sgk_forward, sgk_forward_device, sgk_workspace_size,
 * sgk_layer_variants, sgk_layer_variant_for and the training calls: sizes, their overflow, the
 * backend's index limit and the choice of variant. */
#include <stdint.h>
#include <stdio.h>

#include "sgk_internal.h"

/* Sets the message only when the caller reports errors. */
static sgk_status fail(int report, sgk_status status, const char *fmt, ...) SGK_PRINTF(3, 4);
static sgk_status fail(int report, sgk_status status, const char *fmt, ...)
{
    if (report) {
        va_list ap;
        va_start(ap, fmt);
        sgk_set_errorv(status, fmt, ap);
        va_end(ap);
    }
    return status;
}

static void format_dims(char *buf, size_t len, const int64_t *dims, int n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%lld", i ? "*" : "", (long long)dims[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

sgk_status sgk_tensor_bytes(const char *tensor, const char *formula, const int64_t *dims,
                            int n, size_t elem, const sgk_backend_ops *ops, int report,
                            size_t *bytes)
{
    int64_t count = 1;
    int overflow = 0;
    for (int i = 0; i < n; i++)
        overflow |= __builtin_mul_overflow(count, dims[i], &count);
    size_t b = 0;
    const int too_many_bytes =
        !overflow && ((uint64_t)count > SIZE_MAX || __builtin_mul_overflow((size_t)count, elem, &b));
    if (!overflow && !too_many_bytes && count <= ops->max_elements) {
        *bytes = b;
        return SGK_OK;
    }
    /* the message's dims are formatted only here: the checks run on every call */
    char shown[128];
    format_dims(shown, sizeof shown, dims, n);
    if (overflow)
        return fail(report, SGK_ERR_SIZE_OVERFLOW,
                    "%s has %s = %s elements, more than int64 can count", tensor, formula, shown);
    if (too_many_bytes)
        return fail(report, SGK_ERR_SIZE_OVERFLOW,
                    "%s has %s = %s = %lld elements of %zu bytes, more bytes than size_t can hold",
                    tensor, formula, shown, (long long)count, elem);
    return fail(report, SGK_ERR_SIZE_OVERFLOW,
                "%s has %s = %s = %lld elements, more than backend %s can index in one tensor "
                "(max_elements = %lld)",
                tensor, formula, shown, (long long)count, ops->name, (long long)ops->max_elements);
}

const char *sgk_variant_name(const sgk_layer *layer, int variant)
{
    const char *name = layer->ops->variant_name(layer->blayer, variant);
    return name ? name : "(unnamed)";
}

/* Asks each variant in turn (or the forced one) and keeps the plan of the
 * first that supports the shape, so that no variant plans twice. */
static sgk_status pick_variant(const sgk_layer *layer, int64_t B, int64_t N, int report,
                               sgk_call *call)
{
    const sgk_backend_ops *ops = layer->ops;
    if (layer->forced >= 0) {
        if (!ops->variant_supports(layer->blayer, layer->forced, B, N, &call->plan))
            return fail(report, SGK_ERR_UNSUPPORTED,
                        "variant \"%s\" (forced by sgk_layer_set_variant) does not support "
                        "B=%lld, N=%lld with D=%lld, H=%lld, P=%lld in %s; a forced variant never "
                        "falls back to another",
                        sgk_variant_name(layer, layer->forced), (long long)B, (long long)N,
                        (long long)layer->D, (long long)layer->H, (long long)layer->P,
                        sgk_dtype_name(layer->dtype));
        call->variant = layer->forced;
        return SGK_OK;
    }
    /* The first variant that runs the shape and prefers it; failing that,
     * the first that runs it. */
    int first = -1;
    for (int v = 0; v < layer->variant_count; v++) {
        if (!ops->variant_supports(layer->blayer, v, B, N, &call->plan))
            continue;
        if (ops->variant_prefers == NULL ||
            ops->variant_prefers(layer->blayer, v, B, N, &call->plan)) {
            call->variant = v;
            return SGK_OK;
        }
        if (first < 0)
            first = v;
    }
    if (first >= 0 && ops->variant_supports(layer->blayer, first, B, N, &call->plan)) {
        call->variant = first; /* its plan again: later variants wrote theirs */
        return SGK_OK;
    }
    return fail(report, SGK_ERR_UNSUPPORTED,
                "no variant of backend %s supports B=%lld, N=%lld with D=%lld, H=%lld, P=%lld "
                "in %s (%d variant%s tried)",
                ops->name, (long long)B, (long long)N, (long long)layer->D, (long long)layer->H,
                (long long)layer->P, sgk_dtype_name(layer->dtype), layer->variant_count,
                layer->variant_count == 1 ? "" : "s");
}

sgk_status sgk_check_shape(const sgk_layer *layer, int64_t B, int64_t N, size_t mask_elem,
                           int report, sgk_call *call)
{
    if (B < 1)
        return fail(report, SGK_ERR_INVALID_ARGUMENT, "B must be >= 1, got %lld", (long long)B);
    if (N < 1)
        return fail(report, SGK_ERR_INVALID_ARGUMENT, "N must be >= 1, got %lld", (long long)N);

    const sgk_backend_ops *ops = layer->ops;
    const int64_t nodes[] = { B, N, layer->D };
    const int64_t pair[] = { B, N, N, layer->P };
    const int64_t mask[] = { B, N, N };
    const size_t elem = sgk_dtype_size(layer->dtype);
    sgk_status st = sgk_tensor_bytes("nodes", "B*N*D", nodes, 3, elem, ops, report,
                                     &call->nodes_bytes);
    if (st == SGK_OK)
        st = sgk_tensor_bytes("pair_feats", "B*N*N*P", pair, 4, elem, ops, report,
                              &call->pair_bytes);
    if (st == SGK_OK)
        st = sgk_tensor_bytes("edge_mask", "B*N*N", mask, 3, mask_elem, ops, report,
                              &call->mask_bytes);
    return st;
}

int sgk_shape_fits(const sgk_layer *layer, int64_t B, int64_t N)
{
    sgk_call call;
    return sgk_check_shape(layer, B, N, sizeof(float), 0, &call) == SGK_OK;
}

sgk_status sgk_plan_call(const sgk_layer *layer, int64_t B, int64_t N, size_t mask_elem,
                         int report, sgk_call *call)
{
    sgk_status st = sgk_check_shape(layer, B, N, mask_elem, report, call);
    if (st == SGK_OK)
        st = pick_variant(layer, B, N, report, call);
    if (st != SGK_OK)
        return st;
    call->workspace_bytes =
        layer->ops->workspace_size(layer->blayer, call->variant, B, N, &call->plan);
    return SGK_OK;
}
