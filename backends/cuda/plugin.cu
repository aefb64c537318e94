/* The sgk CUDA backend plugin: sgk_backend_ops over the variants of
 * variants.cu. cudart is linked statically, so the plugin needs only the
 * driver (libcuda.so.1, which cudart opens itself); without one, probe()
 * reports the runtime's own reason. Every entry point makes the layer's or
 * context's device current and restores the caller's afterwards, since the
 * calling thread may be working on another device. */
#include "cuda_layer.h"
#include "generic.h"

#include "sgk_backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sgk_host *g_host;

struct sgkc_context {
    int device;
    int gen_threads; /* the generated kernels' group size (sgkc_layer.gen_threads) */
};

/* Makes `device` current for the life of the object, then puts back the
 * caller's device. */
class DeviceScope {
public:
    explicit DeviceScope(int device) : prev_(-1)
    {
        if (cudaGetDevice(&prev_) != cudaSuccess)
            prev_ = -1;
        err_ = prev_ == device ? cudaSuccess : cudaSetDevice(device);
    }
    ~DeviceScope()
    {
        if (prev_ >= 0)
            cudaSetDevice(prev_);
    }
    cudaError_t error() const { return err_; }

private:
    int prev_;
    cudaError_t err_;
};

static sgk_status cuda_fail(cudaError_t e, const char *what)
{
    /* clear a non-sticky error so that it does not resurface in a later call */
    cudaGetLastError();
    const sgk_status st = e == cudaErrorMemoryAllocation ? SGK_ERR_OUT_OF_MEMORY : SGK_ERR_BACKEND;
    return g_host->set_error(st, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Devices on this host, counted when the registry probes the backend
 * (once, before any context): pointers are checked against the layer's
 * device only where there is another. */
static int g_devices;

/* SGK_ERR_INVALID_ARGUMENT when one of the n pointers is device memory of
 * a GPU other than the layer's: a kernel would read it over the peer path,
 * or fault where peer access is off, instead of telling the caller. Host,
 * managed and unknown memory pass (the call's own checks apply). */
static sgk_status foreign_memory(const sgkc_layer *L, const char *const *names, const void *const *ptrs, int n)
{
    if (g_devices < 2)
        return SGK_OK;
    for (int i = 0; i < n; i++) {
        if (!ptrs[i])
            continue;
        cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, ptrs[i]) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (a.type == cudaMemoryTypeDevice && a.device != L->device)
            return g_host->set_error(SGK_ERR_INVALID_ARGUMENT,
                                     "cuda: %s is memory of CUDA device %d, but the layer's context is on "
                                     "device %d: pass buffers of the context's device",
                                     names[i], a.device, L->device);
    }
    return SGK_OK;
}

static sgk_status foreign_call(const sgkc_layer *L, const sgk_fwd *a)
{
    static const char *const names[] = {"nodes", "pair_feats", "edge_mask", "out", "workspace"};
    const void *const ptrs[] = {a->nodes, a->pair_feats, a->edge_mask, a->out, a->workspace};
    return foreign_memory(L, names, ptrs, 5);
}

/* The static runtime reports a missing driver as "driver version is
 * insufficient"; say plainly that there is no driver at all. */
static int driver_present(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    dlclose(h);
    return 1;
}

/* The oldest Linux driver branch that runs what this runtime built: CUDA 13.x
 * needs 580 or later, CUDA 12.x 525 or later (minor-version compatibility; the
 * plugin carries machine code for its SM versions, so no PTX JIT is needed on
 * them). */
static int driver_branch_needed(void)
{
    return CUDART_VERSION >= 13000 ? 580 : 525;
}

/* Why the runtime cannot be used, in words a user can act on. */
static void probe_reason(cudaError_t e, char *reason, size_t reason_len)
{
    int drv = 0;
    char has[64] = "";
    switch (e) {
    case cudaErrorInsufficientDriver:
    case cudaErrorCompatNotSupportedOnDevice:
        /* 0 when the driver lacks even the entry points this runtime asks for */
        if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
            snprintf(has, sizeof has, "; the driver supports CUDA %d.%d", drv / 1000, drv % 1000 / 10);
        snprintf(reason, reason_len,
                 "the NVIDIA driver is older than this CUDA build needs (built with CUDA %d.%d, "
                 "needs driver >= %d%s%s)",
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, driver_branch_needed(), has,
                 e == cudaErrorCompatNotSupportedOnDevice
                     ? "; the CUDA forward-compatibility package in use does not support this GPU"
                     : "");
        break;
    case cudaErrorNoDevice:
        snprintf(reason, reason_len, "no CUDA-capable device is visible to the NVIDIA driver");
        break;
    case cudaErrorSystemDriverMismatch:
        snprintf(reason, reason_len,
                 "the NVIDIA kernel module and libcuda.so.1 are of different driver versions");
        break;
    default:
        snprintf(reason, reason_len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        break;
    }
}

static int sgkc_probe(char *reason, size_t reason_len)
{
    if (!driver_present()) {
        if (reason && reason_len)
            snprintf(reason, reason_len, "libcuda.so.1 not found: no NVIDIA driver is installed");
        return 0;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n <= 0)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess) {
        if (reason && reason_len)
            probe_reason(e, reason, reason_len);
        cudaGetLastError();
        return 0;
    }
    g_devices = n;
    return n;
}

static sgk_status sgkc_device_name(int device, char *buf, size_t buf_len)
{
    cudaDeviceProp prop;
    const cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaGetDeviceProperties");
    snprintf(buf, buf_len, "%s", prop.name);
    return SGK_OK;
}

static sgk_status sgkc_context_create(int device, const sgk_context_options *opt, void **bctx)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaGetDeviceCount");
    if (device < 0 || device >= n)
        return g_host->set_error(SGK_ERR_INVALID_DEVICE, "cuda: device %d out of range (%d devices)",
                                 device, n);
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    /* Initialise the primary context now, so that a broken device fails here. */
    e = cudaFree(0);
    if (e != cudaSuccess)
        return cuda_fail(e, "context initialisation");
    if (g_host->alloc_should_fail())
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cuda: out of host memory for the context");
    sgkc_context *c = (sgkc_context *)malloc(sizeof *c);
    if (!c)
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cuda: out of host memory for the context");
    c->device = device;
    c->gen_threads = sgkc_generic_threads(opt ? opt->gpu_group_size : 0);
    *bctx = c;
    return SGK_OK;
}

static void sgkc_context_destroy(void *bctx)
{
    free(bctx);
}

static sgk_status sgkc_layer_create(void *bctx, const sgk_layer_desc *desc, void **blayer)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    if (desc->dim > 65536 || desc->pair_dim > 65536)
        return g_host->set_error(SGK_ERR_UNSUPPORTED,
                                 "cuda: desc->dim and desc->pair_dim must be at most 65536");
    DeviceScope scope(c->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    if (g_host->alloc_should_fail())
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cuda: out of host memory for the layer");
    sgkc_layer *L = (sgkc_layer *)malloc(sizeof *L);
    if (!L)
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cuda: out of host memory for the layer");
    const cudaError_t e = sgkc_layer_pack(L, c->device, desc, g_host->alloc_should_fail);
    if (e != cudaSuccess) {
        free(L);
        return cuda_fail(e, "packing the layer's weights");
    }
    L->gen_threads = c->gen_threads;
    *blayer = L;
    return SGK_OK;
}

static void sgkc_layer_destroy(void *blayer)
{
    sgkc_layer *L = (sgkc_layer *)blayer;
    if (!L)
        return;
    {
        DeviceScope scope(L->device);
        sgkc_layer_release(L);
    }
    free(L);
}

static sgk_status sgkc_set_weights(void *blayer, const sgk_layer_desc *desc)
{
    sgkc_layer *L = (sgkc_layer *)blayer;
    DeviceScope scope(L->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const cudaError_t e = sgkc_layer_repack_host(L, desc, g_host->alloc_should_fail);
    if (e != cudaSuccess)
        return cuda_fail(e, "packing the layer's new weights");
    return SGK_OK;
}

static sgk_status sgkc_set_weights_device(void *blayer, const sgk_layer_desc *desc, void *stream)
{
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    if (!L->map_runs)
        return g_host->set_error(SGK_ERR_UNSUPPORTED, "cuda: no device repack for this layer: %s",
                                 L->map_reason);
    static const char *const names[] = {"ln_gamma", "ln_beta", "wq", "wk", "wv", "wo", "w1", "b1", "w2", "b2"};
    const void *const ptrs[] = {desc->ln_gamma, desc->ln_beta, desc->wq, desc->wk, desc->wv,
                                desc->wo, desc->w1, desc->b1, desc->w2, desc->b2};
    const sgk_status st = foreign_memory(L, names, ptrs, 10);
    if (st != SGK_OK)
        return st;
    DeviceScope scope(L->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const cudaError_t e = sgkc_layer_repack_device(L, desc, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return cuda_fail(e, "repacking the layer's weights on the device");
    return SGK_OK;
}

static int sgkc_variant_count_fn(void *blayer)
{
    (void)blayer;
    return sgkc_variant_count;
}

static const char *sgkc_variant_name(void *blayer, int variant)
{
    (void)blayer;
    return variant >= 0 && variant < sgkc_variant_count ? sgkc_variants[variant].name : NULL;
}

/* ---- 16-bit layers on the float variants ------------------------------
 * The generated variants, and those whose plan says so (sgkc_variant.io16:
 * tuned-fused-small), read and write 16-bit buffers themselves. Every
 * other variant computes on float buffers: a 16-bit call widens nodes and
 * pair features into the workspace past the variant's own, runs the
 * variant there and narrows out (kernels/dtype.h's rounding, as the
 * generated variants round). The float copy of the pair features, 4 B N^2 P
 * bytes written and read again, is what this costs over a float call, so a
 * plan that reads the 16-bit features itself (sgkc_variant.pair16:
 * tuned-tiled's MLP pass, mlp_h16.cuh) gets them as they are instead, and
 * one whose output projection rounds out itself (sgkc_variant.out16: the
 * tensor-core GEMMs) writes the caller's out directly. */
struct wide16 {
    size_t nodes, pair, out, total; /* byte offsets into the workspace, and its size */
};

/* a 16-bit call the variant's plan takes on the caller's buffers as they are */
static int io16_runs(const sgkc_layer *L, const sgkc_variant &v, const sgk_backend_plan *plan)
{
    return L->dtype != SGK_DTYPE_F32 && v.io16 && v.io16(L, plan);
}

static int wide16_runs(const sgkc_layer *L, const sgkc_variant &v, const sgk_backend_plan *plan)
{
    return L->dtype != SGK_DTYPE_F32 && v.launch != sgkc_generic_launch && !io16_runs(L, v, plan);
}

static int wide16_pair16(const sgkc_layer *L, const sgkc_variant &v, const sgk_backend_plan *plan)
{
    return v.pair16 && v.pair16(L, plan);
}

static wide16 wide16_layout(const sgkc_layer *L, size_t own, int64_t B, int64_t N, int pair16)
{
    const auto up = [](size_t x) { return (x + 255) & ~(size_t)255; };
    const size_t rows = (size_t)B * (size_t)N * (size_t)L->D * sizeof(float);
    const size_t pairs = pair16 ? 0 : (size_t)B * (size_t)N * (size_t)N * (size_t)L->P * sizeof(float);
    wide16 w;
    w.nodes = up(own);
    w.pair = up(w.nodes + rows);
    w.out = up(w.pair + pairs);
    w.total = w.out + rows;
    return w;
}

static int sgkc_variant_supports(void *blayer, int variant, int64_t B, int64_t N,
                                 sgk_backend_plan *plan)
{
    if (variant < 0 || variant >= sgkc_variant_count)
        return 0;
    return sgkc_variants[variant].plan((const sgkc_layer *)blayer, B, N, plan);
}

static int sgkc_variant_prefers(void *blayer, int variant, int64_t B, int64_t N,
                                const sgk_backend_plan *plan)
{
    if (variant < 0 || variant >= sgkc_variant_count)
        return 0;
    return sgkc_prefers(sgkc_variants[variant], (const sgkc_layer *)blayer, B, N, plan);
}

static size_t sgkc_workspace_size(void *blayer, int variant, int64_t B, int64_t N,
                                  const sgk_backend_plan *plan)
{
    if (variant < 0 || variant >= sgkc_variant_count)
        return 0;
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    const sgkc_variant &v = sgkc_variants[variant];
    const size_t own = v.workspace(L, B, N, plan);
    if (!wide16_runs(L, v, plan) || own == SIZE_MAX)
        return own;
    return wide16_layout(L, own, B, N, wide16_pair16(L, v, plan)).total;
}

/* A call's arguments as the launchers take them. */
static sgkc_fwd fwd_of(const sgk_fwd *a)
{
    sgkc_fwd f;
    f.B = a->B;
    f.N = a->N;
    f.nodes = (const float *)a->nodes;
    f.pair = (const float *)a->pair_feats;
    f.pair16 = NULL;
    f.mask = a->edge_mask;
    f.mask_u8 = a->mask_type == SGK_MASK_U8;
    f.out = (float *)a->out;
    f.out16 = NULL;
    f.nodes16 = NULL;
    f.ws = a->workspace;
    f.ws_bytes = a->workspace_bytes;
    f.stream = (cudaStream_t)a->stream;
    return f;
}

static sgk_status sgkc_forward(void *blayer, int variant, const sgk_backend_plan *plan,
                               const sgk_fwd *args)
{
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    if (variant < 0 || variant >= sgkc_variant_count)
        return g_host->set_error(SGK_ERR_UNKNOWN_VARIANT, "cuda: variant %d does not exist", variant);
    const sgkc_variant &v = sgkc_variants[variant];
    sgk_status st = foreign_call(L, args);
    if (st != SGK_OK)
        return st;
    DeviceScope scope(L->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const sgkc_fwd f = fwd_of(args);
    cudaError_t e;
    if (io16_runs(L, v, plan)) {
        sgkc_fwd g = f; /* the variant converts on load and store itself */
        g.nodes = NULL;
        g.pair = NULL;
        g.out = NULL;
        g.nodes16 = args->nodes;
        g.pair16 = args->pair_feats;
        g.out16 = args->out;
        e = v.launch(L, plan, &g);
    } else if (wide16_runs(L, v, plan)) {
        const size_t own = v.workspace(L, f.B, f.N, plan);
        const int p16 = wide16_pair16(L, v, plan);
        const wide16 w = wide16_layout(L, own, f.B, f.N, p16);
        char *ws = (char *)f.ws;
        sgkc_fwd g = f;
        g.nodes = (const float *)(ws + w.nodes);
        g.pair = p16 ? NULL : (const float *)(ws + w.pair);
        g.pair16 = p16 ? (const void *)f.pair : NULL;
        g.out = (float *)(ws + w.out);
        g.ws_bytes = own;
        if (v.out16 && v.out16(L, plan, &g)) { /* the variant rounds out itself */
            g.out = NULL;
            g.out16 = (void *)f.out;
        }
        const size_t rows = (size_t)f.B * (size_t)f.N * (size_t)L->D;
        e = sgkc_convert16(L, 1, f.nodes, (void *)g.nodes, rows, f.stream);
        if (e == cudaSuccess && !p16)
            e = sgkc_convert16(L, 1, f.pair, (void *)g.pair, (size_t)f.B * f.N * f.N * L->P, f.stream);
        if (e == cudaSuccess)
            e = v.launch(L, plan, &g);
        if (e == cudaSuccess && !g.out16)
            e = sgkc_convert16(L, 0, g.out, f.out, rows, f.stream);
    } else {
        e = v.launch(L, plan, &f);
    }
    if (e != cudaSuccess)
        return cuda_fail(e, v.name);
    return SGK_OK;
}

/* ---- the training calls: the generated kernels (generic.cu) ---------- */

static size_t sgkc_saved_size(void *blayer, int64_t B, int64_t N)
{
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    return (size_t)B * (size_t)L->H * (size_t)N * sizeof(float);
}

static size_t sgkc_train_workspace_size(void *blayer, int64_t B, int64_t N)
{
    return sgkc_train_workspace((const sgkc_layer *)blayer, B, N);
}

static sgk_status sgkc_forward_train(void *blayer, const sgk_fwd *args, void *saved)
{
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    static const char *const names[] = {"saved"};
    const void *const ptrs[] = {saved};
    sgk_status st = foreign_call(L, args);
    if (st == SGK_OK)
        st = foreign_memory(L, names, ptrs, 1);
    if (st != SGK_OK)
        return st;
    DeviceScope scope(L->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const sgkc_fwd f = fwd_of(args);
    const cudaError_t e = sgkc_train_forward(L, &f, (float *)saved);
    return e == cudaSuccess ? SGK_OK : cuda_fail(e, "forward_train");
}

static sgk_status sgkc_backward(void *blayer, const sgk_fwd *args, const void *saved, const void *d_out,
                                const sgk_grads *grads)
{
    const sgkc_layer *L = (const sgkc_layer *)blayer;
    static const char *const names[] = {"saved", "d_out", "grads->nodes", "grads->pair_feats",
                                        "grads->ln_gamma", "grads->ln_beta", "grads->wq", "grads->wk",
                                        "grads->wv", "grads->wo", "grads->w1", "grads->b1",
                                        "grads->w2", "grads->b2"};
    const void *const ptrs[] = {saved, d_out, grads->nodes, grads->pair_feats, grads->ln_gamma,
                                grads->ln_beta, grads->wq, grads->wk, grads->wv, grads->wo,
                                grads->w1, grads->b1, grads->w2, grads->b2};
    sgk_status st = foreign_call(L, args);
    if (st == SGK_OK)
        st = foreign_memory(L, names, ptrs, 14);
    if (st != SGK_OK)
        return st;
    DeviceScope scope(L->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const sgkc_fwd f = fwd_of(args);
    const cudaError_t e = sgkc_train_backward(L, &f, (const float *)saved, (const float *)d_out, grads);
    return e == cudaSuccess ? SGK_OK : cuda_fail(e, "backward");
}

static sgk_status sgkc_mem_alloc(void *bctx, size_t bytes, void **ptr)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    if (g_host->alloc_should_fail())
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cuda: cudaMalloc of %zu bytes failed", bytes);
    DeviceScope scope(c->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaMalloc");
    return SGK_OK;
}

static void sgkc_mem_free(void *bctx, void *ptr)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    if (!ptr)
        return;
    DeviceScope scope(c->device);
    cudaFree(ptr);
}

static sgk_status sgkc_copy(void *bctx, void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    DeviceScope scope(c->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    if (bytes == 0)
        return SGK_OK;
    const cudaError_t e = cudaMemcpy(dst, src, bytes, k);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaMemcpy");
    return SGK_OK;
}

static sgk_status sgkc_copy_to_device(void *bctx, void *dst, const void *src, size_t bytes)
{
    return sgkc_copy(bctx, dst, src, bytes, cudaMemcpyHostToDevice);
}

static sgk_status sgkc_copy_to_host(void *bctx, void *dst, const void *src, size_t bytes)
{
    return sgkc_copy(bctx, dst, src, bytes, cudaMemcpyDeviceToHost);
}

static sgk_status sgkc_synchronize(void *bctx)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    DeviceScope scope(c->device);
    if (scope.error() != cudaSuccess)
        return cuda_fail(scope.error(), "cudaSetDevice");
    const cudaError_t e = cudaStreamSynchronize(0);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaStreamSynchronize");
    return SGK_OK;
}

static sgk_status sgkc_native(void *bctx, sgk_native_kind kind, void **out)
{
    const sgkc_context *c = (const sgkc_context *)bctx;
    if (kind != SGK_NATIVE_DEVICE_ORDINAL)
        return g_host->set_error(SGK_ERR_UNSUPPORTED,
                                 "cuda: native kind %d: only SGK_NATIVE_DEVICE_ORDINAL exists here", (int)kind);
    *out = (void *)(intptr_t)c->device;
    return SGK_OK;
}

static const sgk_backend_ops g_ops = {
    SGK_BACKEND_ABI,
    "cuda",
    (int64_t)1 << 50, /* every kernel indexes global memory with 64-bit offsets */
    0,
    sgkc_probe,
    sgkc_device_name,
    sgkc_context_create,
    sgkc_context_destroy,
    sgkc_layer_create,
    sgkc_layer_destroy,
    sgkc_variant_count_fn,
    sgkc_variant_name,
    sgkc_variant_supports,
    sgkc_workspace_size,
    sgkc_forward,
    sgkc_mem_alloc,
    sgkc_mem_free,
    sgkc_copy_to_device,
    sgkc_copy_to_host,
    sgkc_synchronize,
    sgkc_native,
    sgkc_set_weights,
    sgkc_set_weights_device,
    sgkc_variant_prefers,
    sgkc_saved_size,
    sgkc_train_workspace_size,
    sgkc_forward_train,
    sgkc_backward,
    SGK_DTYPE_BIT(SGK_DTYPE_F32) | SGK_DTYPE_BIT(SGK_DTYPE_BF16) | SGK_DTYPE_BIT(SGK_DTYPE_F16),
};

extern "C" __attribute__((visibility("default"))) const sgk_backend_ops *
sgk_backend_entry(const sgk_host *host)
{
    if (!host || host->abi_version != SGK_BACKEND_ABI)
        return NULL;
    g_host = host;
    return &g_ops;
}
