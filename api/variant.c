/* Kernel variants of a layer's backend: listing, forcing one, and asking
 * which one forward would run. */
#include <stdio.h>
#include <string.h>

#include "sgk_internal.h"

SGK_EXPORT sgk_status sgk_layer_variants(sgk_layer *layer, int64_t B, int64_t N,
                                         const char **names, int *supported,
                                         int capacity, int *count)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (count == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "count is NULL");
    if (names == NULL) {
        *count = layer->variant_count;
        return SGK_OK;
    }
    if (capacity < layer->variant_count)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "capacity (%d) is less than the number of variants (%d); "
                             "pass names = NULL to ask for the count",
                             capacity, layer->variant_count);
    int fits = 0;
    sgk_backend_plan scratch; /* each variant's plan, asked for its answer only */
    if (supported != NULL) {
        if (B < 1)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "B must be >= 1, got %lld",
                                 (long long)B);
        if (N < 1)
            return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "N must be >= 1, got %lld",
                                 (long long)N);
        /* A shape past the size limits runs on no variant. */
        fits = sgk_shape_fits(layer, B, N);
    }
    for (int v = 0; v < layer->variant_count; v++) {
        names[v] = sgk_variant_name(layer, v);
        if (supported != NULL)
            supported[v] =
                fits && layer->ops->variant_supports(layer->blayer, v, B, N, &scratch) ? 1 : 0;
    }
    *count = layer->variant_count;
    return SGK_OK;
}

SGK_EXPORT sgk_status sgk_layer_set_variant(sgk_layer *layer, const char *name)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (name == NULL) {
        layer->forced = -1;
        return SGK_OK;
    }
    for (int v = 0; v < layer->variant_count; v++) {
        if (strcmp(sgk_variant_name(layer, v), name) == 0) {
            layer->forced = v;
            return SGK_OK;
        }
    }
    char valid[512] = "";
    size_t used = 0;
    for (int v = 0; v < layer->variant_count && used < sizeof valid; v++) {
        int w = snprintf(valid + used, sizeof valid - used, "%s%s", v ? ", " : "",
                         sgk_variant_name(layer, v));
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return sgk_set_error(SGK_ERR_UNKNOWN_VARIANT,
                         "name \"%.64s\" is not a variant of backend %s (valid: %s)", name,
                         layer->ops->name, layer->variant_count ? valid : "none");
}

SGK_EXPORT sgk_status sgk_layer_variant_for(sgk_layer *layer, int64_t B, int64_t N,
                                            const char **name)
{
    if (layer == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "layer is NULL");
    if (name == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "name is NULL");
    sgk_call call;
    sgk_status st = sgk_plan_call(layer, B, N, sizeof(float), 1, &call);
    if (st != SGK_OK)
        return st;
    *name = sgk_variant_name(layer, call.variant);
    return SGK_OK;
}
