/* The hip backend: a plugin (libsgk-hip.so) for AMD GPUs through the HIP
 * runtime (libamdhip64). It runs the kernels generated from
 * kernels/relation.sgk, compiled ahead of time by hipcc for the targets of
 * the meson option amdgpu_targets, with the variants "tiled" and "small" of
 * kernels/plan.h sized to what each device and kernel report. This file:
 * the entry point, devices, contexts and device memory. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_internal.h"

#ifndef SGK_HIP_TARGETS
#error "SGK_HIP_TARGETS (the amdgpu targets hipcc compiled for) must be defined by the build"
#endif

SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host);

const sgk_host *sgk_hip_host;

static const char *const k_kernel_names[SGK_HIP_K_COUNT] = {
    "fused", "norm", "proj", "attn", "repack", "widen16", "narrow16", "combine", "bwd_di", "attn_bwd",
    "reduce_qkv", "ln_bwd", "ln_wgrad", "wgrad", "reduce_mlp", "reduce_parts" };

/* Work-items per group when the device and kernel allow it: the kernels
 * spread every loop over the group, so any size is correct; 256 is four
 * wavefronts of 64 (CDNA) or eight of 32 (RDNA). */
enum { PREFERRED_THREADS = 256 };

/* ---- errors and the current device -------------------------------------- */

/* ROCm's hipGetErrorString may only repeat the name; then the name is enough. */
static void error_text(hipError_t err, char *buf, size_t len)
{
    const char *name = hipGetErrorName(err);
    const char *text = hipGetErrorString(err);
    if (name == NULL)
        name = "an unrecognised HIP error";
    if (text != NULL && text[0] != '\0' && strcmp(text, name) != 0)
        snprintf(buf, len, "%s (%s)", name, text);
    else
        snprintf(buf, len, "%s (%d)", name, (int)err);
}

sgk_status sgk_hip_fail(sgk_status status, const char *call, hipError_t err, const char *context)
{
    char text[256];
    error_text(err, text, sizeof text);
    /* Reported here, so the caller's next hipGetLastError need not see it. */
    (void)hipGetLastError();
    return sgk_hip_host->set_error(status, "hip: %s failed with %s%s", call, text, context);
}

sgk_status sgk_hip_status_of(hipError_t err)
{
    return err == hipErrorOutOfMemory ? SGK_ERR_OUT_OF_MEMORY : SGK_ERR_BACKEND;
}

sgk_status sgk_hip_enter(int device, sgk_hip_guard *g)
{
    g->prev = device;
    g->restore = 0;
    hipError_t err = hipGetDevice(&g->prev);
    if (err != hipSuccess)
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipGetDevice", err, "");
    if (g->prev == device)
        return SGK_OK;
    err = hipSetDevice(device);
    if (err != hipSuccess) {
        char where[64];
        snprintf(where, sizeof where, " for device %d", device);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipSetDevice", err, where);
    }
    g->restore = 1;
    return SGK_OK;
}

void sgk_hip_leave(const sgk_hip_guard *g)
{
    /* The caller's device was valid a moment ago; there is nothing better
     * to do if it no longer is. */
    if (g->restore)
        (void)hipSetDevice(g->prev);
}

void *sgk_hip_host_alloc(size_t bytes)
{
    if (sgk_hip_host->alloc_should_fail())
        return NULL;
    return calloc(1, bytes ? bytes : 1);
}

/* ---- devices ------------------------------------------------------------ */

static int hip_probe(char *reason, size_t len)
{
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess) {
        char text[256];
        error_text(err, text, sizeof text);
        snprintf(reason, len, "hipGetDeviceCount failed with %s", text);
        (void)hipGetLastError();
        return 0;
    }
    if (count < 1) {
        snprintf(reason, len, "hipGetDeviceCount reports no device");
        return 0;
    }
    return count;
}

static void device_label(const hipDeviceProp_t *p, char *buf, size_t len)
{
    const char *name = p->name[0] ? p->name : "AMD GPU";
    if (p->gcnArchName[0])
        snprintf(buf, len, "%.200s (%.100s)", name, p->gcnArchName);
    else
        snprintf(buf, len, "%.200s", name);
}

static sgk_status get_properties(int device, hipDeviceProp_t *p)
{
    memset(p, 0, sizeof *p);
    hipError_t err = hipGetDeviceProperties(p, device);
    if (err != hipSuccess) {
        char where[64];
        snprintf(where, sizeof where, " for device %d", device);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipGetDeviceProperties", err, where);
    }
    return SGK_OK;
}

static sgk_status hip_device_name(int device, char *buf, size_t len)
{
    hipDeviceProp_t p;
    sgk_status st = get_properties(device, &p);
    if (st == SGK_OK)
        device_label(&p, buf, len);
    return st;
}

/* ---- contexts ----------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The kernel's launch shape on the current device. Its attributes come
 * from the code object for this device, so a device whose architecture the
 * plugin was not built for fails here, at context creation. */
static sgk_status kernel_shape(sgk_hip_ctx *c, const hipDeviceProp_t *p, int which)
{
    hipFuncAttributes a;
    memset(&a, 0, sizeof a);
    hipError_t err = sgk_hip_kernel_attributes(which, &a);
    if (err != hipSuccess) {
        char where[640];
        snprintf(where, sizeof where,
                 " for kernel %s on device %d \"%s\" (this plugin holds code objects for %s; "
                 "another architecture needs a build with -Damdgpu_targets=<its gfx name>)",
                 k_kernel_names[which], c->device, c->label, SGK_HIP_TARGETS);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipFuncGetAttributes", err, where);
    }
    int threads = PREFERRED_THREADS;
    if (a.maxThreadsPerBlock > 0 && a.maxThreadsPerBlock < threads)
        threads = a.maxThreadsPerBlock;
    if (p->maxThreadsPerBlock > 0 && p->maxThreadsPerBlock < threads)
        threads = p->maxThreadsPerBlock;
    if (p->maxThreadsDim[0] > 0 && p->maxThreadsDim[0] < threads)
        threads = p->maxThreadsDim[0];
    /* Whole wavefronts: a partial one would idle its missing lanes. */
    if (threads >= c->wavefront)
        threads -= threads % c->wavefront;
    if (c->group_cap > 0 && c->group_cap < threads)
        threads = c->group_cap;
    if (threads < 1)
        return sgk_hip_host->set_error(SGK_ERR_BACKEND,
                                       "hip: kernel %s allows no work-group size on device %d "
                                       "\"%s\" (kernel limit %d, device limit %d)",
                                       k_kernel_names[which], c->device, c->label,
                                       a.maxThreadsPerBlock, p->maxThreadsPerBlock);
    sgk_hip_kernel *k = &c->k[which];
    k->threads = threads;
    /* Shared memory the kernel declares itself is not there for smem. */
    size_t local = p->sharedMemPerBlock > a.sharedSizeBytes ? p->sharedMemPerBlock - a.sharedSizeBytes : 0;
    if (a.maxDynamicSharedSizeBytes > 0 && (size_t)a.maxDynamicSharedSizeBytes < local)
        local = (size_t)a.maxDynamicSharedSizeBytes;
    k->local_bytes = local;
    /* Group ids are int inside the kernels, and the dispatch counts the
     * work-items of each dimension in 32 bits. */
    int64_t g0 = p->maxGridSize[0] > 0 ? p->maxGridSize[0] : INT_MAX;
    k->max_groups0 = min64(min64(g0, (int64_t)(UINT32_MAX / (uint32_t)threads)), INT_MAX);
    return SGK_OK;
}

static sgk_status describe_device(sgk_hip_ctx *c)
{
    hipDeviceProp_t p;
    sgk_status st = get_properties(c->device, &p);
    if (st != SGK_OK)
        return st;
    device_label(&p, c->label, sizeof c->label);
    c->wavefront = p.warpSize > 0 ? p.warpSize : 1;
    c->units = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
    for (int i = 0; i < SGK_HIP_K_COUNT && st == SGK_OK; i++)
        st = kernel_shape(c, &p, i);
    return st;
}

static sgk_status hip_context_create(int device, const sgk_context_options *opt, void **out)
{
    sgk_hip_ctx *c = sgk_hip_host_alloc(sizeof *c);
    if (c == NULL)
        return sgk_hip_host->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: cannot allocate the context");
    c->device = device;
    c->group_cap = opt ? opt->gpu_group_size : 0;
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(device, &g);
    if (st == SGK_OK) {
        st = describe_device(c);
        sgk_hip_leave(&g);
    }
    if (st != SGK_OK) {
        free(c);
        return st;
    }
    *out = c;
    return SGK_OK;
}

static void hip_context_destroy(void *c) { free(c); }

static sgk_status hip_native(void *bctx, sgk_native_kind kind, void **out)
{
    const sgk_hip_ctx *c = bctx;
    if (kind != SGK_NATIVE_DEVICE_ORDINAL)
        return sgk_hip_host->set_error(SGK_ERR_UNSUPPORTED,
                                       "kind (%d) has no hip handle: backend hip offers "
                                       "SGK_NATIVE_DEVICE_ORDINAL only",
                                       (int)kind);
    *out = (void *)(intptr_t)c->device;
    return SGK_OK;
}

/* ---- device memory (sgk_forward on host buffers) ------------------------ */

static sgk_status hip_mem_alloc(void *bctx, size_t bytes, void **ptr)
{
    const sgk_hip_ctx *c = bctx;
    char where[400];
    snprintf(where, sizeof where, " allocating %zu bytes on device %d \"%s\"", bytes, c->device,
             c->label);
    if (sgk_hip_host->alloc_should_fail())
        return sgk_hip_host->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: out of memory%s", where);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st != SGK_OK)
        return st;
    void *p = NULL;
    hipError_t err = hipMalloc(&p, bytes ? bytes : 1);
    sgk_hip_leave(&g);
    if (err != hipSuccess)
        return sgk_hip_fail(sgk_hip_status_of(err), "hipMalloc", err, where);
    *ptr = p;
    return SGK_OK;
}

static void hip_mem_free(void *bctx, void *ptr)
{
    const sgk_hip_ctx *c = bctx;
    sgk_hip_guard g;
    if (sgk_hip_enter(c->device, &g) != SGK_OK)
        return;
    (void)hipFree(ptr);
    sgk_hip_leave(&g);
}

static sgk_status copy(const sgk_hip_ctx *c, void *dst, const void *src, size_t bytes,
                       hipMemcpyKind kind)
{
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st != SGK_OK)
        return st;
    hipError_t err = hipMemcpy(dst, src, bytes, kind);
    sgk_hip_leave(&g);
    if (err != hipSuccess) {
        char where[400];
        snprintf(where, sizeof where, " copying %zu bytes %s device %d \"%s\"", bytes,
                 kind == hipMemcpyHostToDevice ? "to" : "from", c->device, c->label);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipMemcpy", err, where);
    }
    return SGK_OK;
}

static sgk_status hip_copy_to_device(void *bctx, void *dst, const void *src, size_t bytes)
{
    return copy(bctx, dst, src, bytes, hipMemcpyHostToDevice);
}

static sgk_status hip_copy_to_host(void *bctx, void *dst, const void *src, size_t bytes)
{
    return copy(bctx, dst, src, bytes, hipMemcpyDeviceToHost);
}

/* The context's default stream is the device's null stream, where forward
 * enqueues when the caller passes no stream. */
static sgk_status hip_synchronize(void *bctx)
{
    const sgk_hip_ctx *c = bctx;
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st != SGK_OK)
        return st;
    hipError_t err = hipStreamSynchronize(NULL);
    sgk_hip_leave(&g);
    if (err != hipSuccess) {
        char where[400];
        snprintf(where, sizeof where, " on device %d \"%s\"", c->device, c->label);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipStreamSynchronize", err, where);
    }
    return SGK_OK;
}

static const sgk_backend_ops k_ops = {
    .abi_version = SGK_BACKEND_ABI,
    .name = "hip",
    .max_elements = INT64_MAX / 16,
    .host_memory = 0,
    .probe = hip_probe,
    .device_name = hip_device_name,
    .context_create = hip_context_create,
    .context_destroy = hip_context_destroy,
    .layer_create = sgk_hip_layer_create,
    .layer_destroy = sgk_hip_layer_destroy,
    .variant_count = sgk_hip_variant_count,
    .variant_name = sgk_hip_variant_name,
    .variant_supports = sgk_hip_variant_supports,
    .workspace_size = sgk_hip_workspace_size,
    .forward = sgk_hip_forward,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .copy_to_device = hip_copy_to_device,
    .copy_to_host = hip_copy_to_host,
    .synchronize = hip_synchronize,
    .native = hip_native,
    .layer_set_weights = sgk_hip_set_weights,
    .layer_set_weights_device = sgk_hip_set_weights_device,
    .saved_size = sgk_hip_saved_size,
    .train_workspace_size = sgk_hip_train_workspace_size,
    .forward_train = sgk_hip_forward_train,
    .backward = sgk_hip_backward,
    .dtypes = SGK_DTYPE_BIT(SGK_DTYPE_F32) | SGK_DTYPE_BIT(SGK_DTYPE_BF16) | SGK_DTYPE_BIT(SGK_DTYPE_F16),
};

SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host)
{
    sgk_hip_host = host;
    return &k_ops;
}
