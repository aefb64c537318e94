/* Contexts: one backend, one device. */
#include <stdlib.h>
#include <string.h>

#include "sgk_internal.h"

SGK_EXPORT void sgk_context_options_init(sgk_context_options *options)
{
    if (options == NULL)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->cpu_threads = 0;
}

/* The first sgk_context_options ended with cpu_threads. */
#define OPTIONS_OLDEST SGK_SIZE_THROUGH(sgk_context_options, cpu_threads)

/* The caller's options (NULL: all defaults) in this sgk's layout, checked. */
static sgk_status read_options(const sgk_context_options *options, sgk_context_options *opt)
{
    sgk_context_options_init(opt);
    if (options == NULL)
        return SGK_OK;
    sgk_status st = sgk_read_struct("options->struct_size", "sgk_context_options",
                                    "sgk_context_options_init", options, OPTIONS_OLDEST,
                                    sizeof *opt, opt);
    if (st != SGK_OK)
        return st;
    if (opt->cpu_threads < 0 || opt->cpu_threads > SGK_MAX_CPU_THREADS)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "options->cpu_threads must be in [0, %d] (0 = OpenMP default), got %d",
                             SGK_MAX_CPU_THREADS, opt->cpu_threads);
    if (opt->gpu_group_size < 0 || opt->gpu_group_size > SGK_MAX_GPU_GROUP)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "options->gpu_group_size must be in [0, %d] (0 = the backend's choice), got %d",
                             SGK_MAX_GPU_GROUP, opt->gpu_group_size);
    return SGK_OK;
}

SGK_EXPORT sgk_status sgk_context_create(const char *backend, int device,
                                         const sgk_context_options *options,
                                         sgk_context **out)
{
    if (out == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "out is NULL");
    sgk_context_options opt;
    sgk_status st = read_options(options, &opt);
    if (st != SGK_OK)
        return st;
    const sgk_backend_slot *slot;
    st = sgk_registry_require(backend, "backend", &slot);
    if (st != SGK_OK)
        return st;
    st = sgk_registry_check_device(slot, device);
    if (st != SGK_OK)
        return st;

    sgk_context *ctx = sgk_malloc(sizeof *ctx);
    if (ctx == NULL)
        return sgk_set_error(SGK_ERR_OUT_OF_MEMORY, "out of memory allocating a context (%zu bytes)",
                             sizeof *ctx);
    ctx->backend = slot;
    ctx->ops = slot->ops;
    ctx->device = device;
    ctx->bctx = NULL;
    uint64_t serial = sgk_error_serial();
    st = sgk_backend_result(slot->ops->context_create(device, &opt, &ctx->bctx), serial,
                            slot->ops, "context_create");
    if (st != SGK_OK) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return SGK_OK;
}

SGK_EXPORT void sgk_context_destroy(sgk_context *ctx)
{
    if (ctx == NULL)
        return;
    ctx->ops->context_destroy(ctx->bctx);
    free(ctx);
}

SGK_EXPORT const char *sgk_context_backend(const sgk_context *ctx)
{
    if (ctx == NULL) {
        sgk_set_error(SGK_ERR_NULL_POINTER, "ctx is NULL");
        return "";
    }
    return ctx->backend->name;
}

SGK_EXPORT sgk_status sgk_context_native(sgk_context *ctx, sgk_native_kind kind, void **out)
{
    if (ctx == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "ctx is NULL");
    if (out == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "out is NULL");
    if (kind < SGK_NATIVE_DEVICE_ORDINAL || kind > SGK_NATIVE_CL_QUEUE)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "kind (%d) is not an sgk_native_kind", (int)kind);
    if (ctx->ops->native == NULL)
        return sgk_set_error(SGK_ERR_UNSUPPORTED, "backend %s has no native handles", ctx->backend->name);
    void *handle = NULL;
    uint64_t serial = sgk_error_serial();
    sgk_status st = sgk_backend_result(ctx->ops->native(ctx->bctx, kind, &handle), serial, ctx->ops, "native");
    if (st == SGK_OK)
        *out = handle;
    return st;
}
