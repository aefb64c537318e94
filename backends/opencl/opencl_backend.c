/* The opencl backend: a plugin (libsgk-opencl.so) that reaches devices only
 * through the OpenCL ICD loader. It runs the kernels generated from
 * kernels/relation.sgk, compiled per device at run time, with the variants
 * "tiled" and "small" of kernels/plan.h sized to what each device reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"
#include "relation_cl_args.h"

SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host);

const sgk_host *sgk_cl_host;

static const char *const k_variant_names[SGK_CL_V_COUNT] = { [SGK_CL_V_TILED] = "tiled", [SGK_CL_V_SMALL] = "small" };

static void *host_alloc(size_t bytes)
{
    if (sgk_cl_host->alloc_should_fail())
        return NULL;
    return calloc(1, bytes ? bytes : 1);
}

/* Allocation failures are the caller's to handle (OUT_OF_MEMORY); any
 * other error of the runtime is a BACKEND error. */
static sgk_status create_failed(const char *what, size_t bytes, cl_int err, const sgk_cl_ctx *c)
{
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY
        || err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE)
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate %zu bytes of %s on device \"%s\" "
                                      "(clCreateBuffer failed with %s (%d))",
                                      bytes, what, c->info.label, sgk_cl_error_name(err), (int)err);
    char where[320];
    snprintf(where, sizeof where, "allocating %zu bytes of %s on device \"%s\"", bytes, what,
             c->info.label);
    return sgk_cl_fail("clCreateBuffer", err, where);
}

/* ---- devices ------------------------------------------------------------ */

static int cl_probe(char *reason, size_t len)
{
    return sgk_cl_devices(reason, len);
}

static sgk_status cl_device_name(int device, char *buf, size_t len)
{
    return sgk_cl_device_label(device, buf, len);
}

/* ---- contexts ----------------------------------------------------------- */

static void ctx_release(sgk_cl_ctx *c)
{
    sgk_cl_program_release(&c->prog);
    if (c->queue)
        clReleaseCommandQueue(c->queue);
    if (c->context)
        clReleaseContext(c->context);
}

static sgk_status cl_context_create(int device, const sgk_context_options *opt, void **out)
{
    const sgk_cl_device *d = sgk_cl_device_at(device);
    if (d == NULL)
        return sgk_cl_host->set_error(SGK_ERR_INVALID_DEVICE, "opencl: no device %d", device);
    sgk_cl_ctx *c = host_alloc(sizeof *c);
    if (c == NULL)
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY, "opencl: cannot allocate the context");
    c->index = device;
    c->device = d->device;
    c->group_cap = opt ? (size_t)opt->gpu_group_size : 0;
    sgk_status st = sgk_cl_devinfo_query(device, &c->info);
    if (st != SGK_OK) {
        free(c);
        return st;
    }
    char where[320];
    snprintf(where, sizeof where, "for device \"%s\"", c->info.label);
    const cl_context_properties props[] = { CL_CONTEXT_PLATFORM,
                                            (cl_context_properties)d->platform, 0 };
    cl_int err = CL_SUCCESS;
    c->context = clCreateContext(props, 1, &c->device, NULL, NULL, &err);
    if (c->context == NULL || err != CL_SUCCESS) {
        c->context = NULL;
        st = sgk_cl_fail("clCreateContext", err, where);
    }
    if (st == SGK_OK) {
        /* Profiling on: the bench times calls with events on this queue. */
        c->queue = clCreateCommandQueue(c->context, c->device, CL_QUEUE_PROFILING_ENABLE, &err);
        if (c->queue == NULL || err != CL_SUCCESS) {
            c->queue = NULL;
            st = sgk_cl_fail("clCreateCommandQueue", err, where);
        }
    }
    if (st == SGK_OK && pthread_mutex_init(&c->lock, NULL) != 0)
        st = sgk_cl_host->set_error(SGK_ERR_BACKEND, "opencl: cannot initialise the context's lock");
    if (st != SGK_OK) {
        ctx_release(c);
        free(c);
        return st;
    }
    *out = c;
    return SGK_OK;
}

static void cl_context_destroy(void *bctx)
{
    sgk_cl_ctx *c = bctx;
    if (c == NULL)
        return;
    ctx_release(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The program is built on the first layer of a context, once, whichever
 * thread gets there first; a failed build is tried again next time. */
static sgk_status ensure_program(sgk_cl_ctx *c)
{
    sgk_status st = SGK_OK;
    pthread_mutex_lock(&c->lock);
    if (!c->built) {
        st = sgk_cl_program_build(c->context, c->device, &c->info, c->group_cap, &c->prog);
        c->built = st == SGK_OK;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- layers ------------------------------------------------------------- */

void sgk_cl_weight_range(const sgk_gen_packed *o, int i, size_t *at, size_t *end)
{
    const size_t a[SGK_CL_W_COUNT + 1] = { o->gamma, o->beta, o->wqkv, o->wo, o->w1, o->b1, o->w2,
                                           o->b2, o->wqkv_b, o->wo_b, o->w1_b, o->w2_b, o->total };
    *at = a[i];
    *end = a[i + 1];
}

static void cl_layer_destroy(void *bl)
{
    sgk_cl_layer *l = bl;
    if (l == NULL)
        return;
    /* A buffer still used by enqueued work lives until that work is done. */
    for (int i = 0; i < SGK_CL_W_COUNT; i++)
        if (l->w[i])
            clReleaseMemObject(l->w[i]);
    cl_mem own[] = { l->block, l->stage, l->runs };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i])
            clReleaseMemObject(own[i]);
    free(l);
}

/* A buffer of the layer's context, filled from host (may be NULL). */
static sgk_status new_buffer(const sgk_cl_ctx *c, cl_mem_flags flags, size_t bytes, void *host,
                             const char *what, cl_mem *out)
{
    if (sgk_cl_host->alloc_should_fail())
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate %zu bytes of %s on device \"%s\"", bytes,
                                      what, c->info.label);
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(c->context, flags | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes ? bytes : 1, host,
                          &err);
    if (*out == NULL || err != CL_SUCCESS) {
        *out = NULL;
        return create_failed(what, bytes, err, c);
    }
    return SGK_OK;
}

/* Weight i's part of the block, as the kernels' argument. */
static sgk_status weight_view(sgk_cl_layer *l, int i)
{
    size_t at, end;
    sgk_cl_weight_range(&l->off, i, &at, &end);
    cl_buffer_region r = { at * sizeof(float), (end - at) * sizeof(float) };
    cl_int err = CL_SUCCESS;
    l->w[i] = clCreateSubBuffer(l->block, CL_MEM_READ_ONLY, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    if (l->w[i] == NULL || err != CL_SUCCESS) {
        l->w[i] = NULL;
        char where[320];
        snprintf(where, sizeof where, "for a weight of the layer on device \"%s\"", l->ctx->info.label);
        return sgk_cl_fail("clCreateSubBuffer", err, where);
    }
    return SGK_OK;
}

/* The device repack of new weights (sgk_cl_set_weights_device): the map's
 * runs as the repack kernel reads them, and the stage their sources are
 * copied into, each source at a sub-buffer origin (16-bit ones are widened
 * into a sub-buffer of it). Without a map, map_reason says why. */
static sgk_status device_repack(sgk_cl_layer *l, const sgk_repack_map *m)
{
    snprintf(l->map_reason, sizeof l->map_reason, "%s", m->reason);
    if (m->runs == NULL)
        return SGK_OK;
    const size_t at = sgk_repack_stage(l->D, l->H, l->P, l->ctx->info.base_align / sizeof(float), l->stage_at);
    const size_t bytes = m->count * 5 * sizeof(int64_t);
    int64_t *runs = host_alloc(bytes);
    if (runs == NULL)
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate the host memory for the repack map");
    sgk_repack_kernel_runs(m, l->stage_at, runs);
    l->nruns = (int64_t)m->count;
    memcpy(l->scales, m->scales, sizeof l->scales);
    sgk_status st = SGK_OK;
    if (l->nruns > l->ctx->prog.k[SGK_CL_K_REPACK].max_groups)
        snprintf(l->map_reason, sizeof l->map_reason, "the repack map has more runs than one launch "
                 "of the repack kernel has groups");
    else
        st = new_buffer(l->ctx, CL_MEM_READ_ONLY, bytes, runs, "the repack map", &l->runs);
    free(runs);
    if (st == SGK_OK && l->runs)
        st = new_buffer(l->ctx, CL_MEM_READ_WRITE, at * sizeof(float), NULL, "staging for new weights",
                        &l->stage);
    return st;
}

static sgk_status cl_layer_create(void *bctx, const sgk_layer_desc *desc16, void **out)
{
    sgk_cl_ctx *c = bctx;
    sgk_status st = ensure_program(c);
    if (st != SGK_OK)
        return st;
    sgk_layer_desc fdesc;
    float *wide;
    if (sgk_widen_desc(desc16, &fdesc, &wide, sgk_cl_host->alloc_should_fail) != 0)
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate the host memory to widen the weights "
                                      "to float");
    const sgk_layer_desc *desc = &fdesc;
    sgk_cl_layer *l = host_alloc(sizeof *l);
    if (l == NULL) {
        free(wide);
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY, "opencl: cannot allocate the layer");
    }
    l->ctx = c;
    l->dtype = desc16->dtype;
    l->D = desc->dim;
    l->H = desc->heads;
    l->P = desc->pair_dim;
    l->eps = desc->eps;
    l->off = sgk_gen_layout(l->D, l->H, l->P, SGK_GEN_PAD, c->info.base_align / sizeof(float));
    const size_t bytes = l->off.total * sizeof(float);
    float *packed = host_alloc(bytes);
    if (packed == NULL) {
        free(l);
        free(wide);
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate %zu bytes to pack the weights", bytes);
    }
    sgk_gen_pack(desc, &l->off, packed);
    sgk_repack_map map;
    const int map_failed = sgk_repack_map_build(desc, sgk_gen_pack_fn, &l->off, l->off.total, packed,
                                                sgk_cl_host->alloc_should_fail, &map) != 0;
    free(wide);
    if (map_failed)
        st = sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                    "opencl: cannot allocate the host memory to map the packed "
                                    "weights");
    else
        st = device_repack(l, &map);
    if (!map_failed)
        sgk_repack_map_free(&map);
    if (st == SGK_OK)
        st = new_buffer(c, CL_MEM_READ_WRITE, bytes, packed, "weights", &l->block);
    for (int i = 0; i < SGK_CL_W_COUNT && st == SGK_OK; i++)
        st = weight_view(l, i);
    free(packed);
    if (st != SGK_OK) {
        cl_layer_destroy(l);
        return st;
    }
    *out = l;
    return SGK_OK;
}

/* ---- variants ----------------------------------------------------------- */

static int cl_variant_count(void *bl) { (void)bl; return SGK_CL_V_COUNT; }
static const char *cl_variant_name(void *bl, int v) { (void)bl; return k_variant_names[v]; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Variant v's plan for (B, N) within the device's limits as queried for the
 * built kernels; 0 when it does not run the shape. Tiles: 64 x 64
 * projection tiles (16 x 16 register tiles of 4 x 4), 16 queries against
 * 32 keys, shrunk by the plan to the device's local memory. */
sgk_limits sgk_cl_limits(const sgk_cl_layer *l, const int *kernels, int n)
{
    const sgk_cl_program *pr = &l->ctx->prog;
    /* attn groups: two a compute unit, the keys split where query tiles are fewer */
    sgk_limits lim = { SIZE_MAX, INT64_MAX, SGK_GEN_PAD, l->ctx->info.base_align, 64, 64, 16, 32,
                       l->dtype != SGK_DTYPE_F32, 2 * (int64_t)l->ctx->info.units };
    for (int i = 0; i < n; i++) {
        const sgk_cl_kernel *k = &pr->k[kernels[i]];
        if (k->local_bytes < lim.local_bytes)
            lim.local_bytes = k->local_bytes;
        lim.max_groups = min64(lim.max_groups, k->max_groups);
    }
    return lim;
}

static int cl_plan(const sgk_cl_layer *l, int v, int64_t B, int64_t N, sgk_plan *plan)
{
    if (v == SGK_CL_V_SMALL) {
        const int fused[] = { SGK_CL_K_FUSED };
        const sgk_limits lim = sgk_cl_limits(l, fused, 1);
        return sgk_plan_make(SGK_PLAN_SMALL, B, N, l->D, l->H, l->P, &lim, plan);
    }
    const int tiled[] = { SGK_CL_K_NORM, SGK_CL_K_PROJ, SGK_CL_K_ATTN, SGK_CL_K_COMBINE };
    const sgk_limits lim = sgk_cl_limits(l, tiled, 4);
    return sgk_plan_make(SGK_PLAN_TILED, B, N, l->D, l->H, l->P, &lim, plan);
}

static int cl_variant_supports(void *bl, int v, int64_t B, int64_t N, sgk_backend_plan *out)
{
    sgk_plan p;
    if (!cl_plan(bl, v, B, N, &p))
        return 0;
    sgk_plan_store(&p, out);
    return 1;
}

static size_t cl_workspace_size(void *bl, int v, int64_t B, int64_t N,
                                const sgk_backend_plan *plan)
{
    (void)bl;
    (void)v;
    (void)B;
    (void)N;
    sgk_plan p;
    sgk_plan_load(plan, &p);
    return p.workspace_bytes;
}

/* ---- memory ------------------------------------------------------------- */

static sgk_status cl_mem_alloc(void *bctx, size_t bytes, void **ptr)
{
    sgk_cl_ctx *c = bctx;
    if (sgk_cl_host->alloc_should_fail())
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate %zu bytes on device \"%s\"", bytes,
                                      c->info.label);
    /* One buffer may not exceed the device's limit, whatever memory is free. */
    if ((cl_ulong)bytes > c->info.max_alloc)
        return sgk_cl_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                      "opencl: cannot allocate %zu bytes in one buffer on device "
                                      "\"%s\": more than its CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu)",
                                      bytes, c->info.label, (unsigned long long)c->info.max_alloc);
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(c->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    if (m == NULL || err != CL_SUCCESS)
        return create_failed("device memory", bytes, err, c);
    *ptr = m;
    return SGK_OK;
}

static void cl_mem_free(void *bctx, void *ptr)
{
    (void)bctx;
    if (ptr)
        clReleaseMemObject((cl_mem)ptr);
}

static sgk_status cl_copy_to_device(void *bctx, void *dst, const void *src, size_t bytes)
{
    sgk_cl_ctx *c = bctx;
    if (bytes == 0)
        return SGK_OK;
    cl_int err = clEnqueueWriteBuffer(c->queue, (cl_mem)dst, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char where[320];
        snprintf(where, sizeof where, "copying %zu bytes to device \"%s\"", bytes, c->info.label);
        return sgk_cl_fail("clEnqueueWriteBuffer", err, where);
    }
    return SGK_OK;
}

static sgk_status cl_copy_to_host(void *bctx, void *dst, const void *src, size_t bytes)
{
    sgk_cl_ctx *c = bctx;
    if (bytes == 0)
        return SGK_OK;
    cl_int err = clEnqueueReadBuffer(c->queue, (cl_mem)(uintptr_t)src, CL_TRUE, 0, bytes, dst, 0,
                                     NULL, NULL);
    if (err != CL_SUCCESS) {
        char where[320];
        snprintf(where, sizeof where, "copying %zu bytes from device \"%s\"", bytes, c->info.label);
        return sgk_cl_fail("clEnqueueReadBuffer", err, where);
    }
    return SGK_OK;
}

static sgk_status cl_synchronize(void *bctx)
{
    sgk_cl_ctx *c = bctx;
    cl_int err = clFinish(c->queue);
    if (err != CL_SUCCESS) {
        char where[320];
        snprintf(where, sizeof where, "on device \"%s\" (an earlier kernel or copy failed)",
                 c->info.label);
        return sgk_cl_fail("clFinish", err, where);
    }
    return SGK_OK;
}

static sgk_status cl_native(void *bctx, sgk_native_kind kind, void **out)
{
    sgk_cl_ctx *c = bctx;
    switch (kind) {
    case SGK_NATIVE_CL_CONTEXT: *out = c->context; return SGK_OK;
    case SGK_NATIVE_CL_DEVICE: *out = c->device; return SGK_OK;
    case SGK_NATIVE_CL_QUEUE: *out = c->queue; return SGK_OK;
    case SGK_NATIVE_DEVICE_ORDINAL: break;
    }
    return sgk_cl_host->set_error(SGK_ERR_UNSUPPORTED,
                                  "kind (%d) has no opencl handle: opencl gives "
                                  "SGK_NATIVE_CL_CONTEXT, SGK_NATIVE_CL_DEVICE and "
                                  "SGK_NATIVE_CL_QUEUE",
                                  (int)kind);
}

/* Kernel offsets are 64-bit; the real bound on a tensor is the device's
 * largest buffer, which mem_alloc and forward check per device. */
static const sgk_backend_ops k_ops = {
    .abi_version = SGK_BACKEND_ABI,
    .name = "opencl",
    .dtypes = SGK_DTYPE_BIT(SGK_DTYPE_F32) | SGK_DTYPE_BIT(SGK_DTYPE_BF16) | SGK_DTYPE_BIT(SGK_DTYPE_F16),
    .max_elements = INT64_MAX / 16,
    .host_memory = 0,
    .probe = cl_probe,
    .device_name = cl_device_name,
    .context_create = cl_context_create,
    .context_destroy = cl_context_destroy,
    .layer_create = cl_layer_create,
    .layer_destroy = cl_layer_destroy,
    .variant_count = cl_variant_count,
    .variant_name = cl_variant_name,
    .variant_supports = cl_variant_supports,
    .workspace_size = cl_workspace_size,
    .forward = sgk_cl_forward,
    .mem_alloc = cl_mem_alloc,
    .mem_free = cl_mem_free,
    .copy_to_device = cl_copy_to_device,
    .copy_to_host = cl_copy_to_host,
    .synchronize = cl_synchronize,
    .native = cl_native,
    .layer_set_weights = sgk_cl_set_weights,
    .layer_set_weights_device = sgk_cl_set_weights_device,
    .saved_size = sgk_cl_saved_size,
    .train_workspace_size = sgk_cl_train_workspace_size,
    .forward_train = sgk_cl_forward_train,
    .backward = sgk_cl_backward,
};

SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host)
{
    sgk_cl_host = host;
    return &k_ops;
}
