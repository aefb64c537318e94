/* Device memory, streams and graphs for the tests (devmem.h). */
#include "devmem.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int host_alloc(void **p, size_t n) { return (*p = malloc(n)) ? 0 : -1; }
static void host_release(void *p) { free(p); }
static int host_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); return 0; }
static int host_sync(void) { return 0; }

/* CUDA driver API: the runtime the plugin uses works in the device's
 * primary context, so memory allocated there is the plugin's to use. */
typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_retain_t)(void **, int);
typedef int (*cu_set_current_t)(void *);
typedef int (*cu_alloc_t)(unsigned long long *, size_t);
typedef int (*cu_free_t)(unsigned long long);
typedef int (*cu_htod_t)(unsigned long long, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, unsigned long long, size_t);
typedef int (*cu_sync_t)(void);
static struct {
    cu_alloc_t alloc;
    cu_free_t release;
    cu_htod_t htod;
    cu_dtoh_t dtoh;
    cu_sync_t sync;
    int (*stream_create)(void **, unsigned);
    int (*stream_destroy)(void *);
    int (*stream_sync)(void *);
    int (*begin_capture)(void *, int);
    int (*end_capture)(void *, void **);
    int (*instantiate)(void **, void *, unsigned long long);
    int (*graph_destroy)(void *);
    int (*exec_destroy)(void *);
    int (*graph_launch)(void *, void *);
    int (*mem_info)(size_t *, size_t *);
    cu_device_get_t device_get;
    cu_retain_t retain;
    cu_set_current_t set_current;
    int (*ctx_get_device)(int *);
} cu;
static int cu_alloc(void **p, size_t n)
{
    unsigned long long d = 0;
    int e = cu.alloc(&d, n);
    *p = (void *)(uintptr_t)d;
    return e;
}
static void cu_release(void *p) { cu.release((unsigned long long)(uintptr_t)p); }
static int cu_h2d(void *d, const void *h, size_t n) { return cu.htod((unsigned long long)(uintptr_t)d, h, n); }
static int cu_d2h(void *h, const void *d, size_t n) { return cu.dtoh(h, (unsigned long long)(uintptr_t)d, n); }
static int cu_sync(void) { return cu.sync(); }

/* HIP runtime, the one the plugin links (hipMemcpy kinds 1 and 2). */
static struct {
    int (*set_device)(int);
    int (*alloc)(void **, size_t);
    int (*release)(void *);
    int (*copy)(void *, const void *, size_t, int);
    int (*sync)(void);
} hp;
static int hip_alloc(void **p, size_t n) { return hp.alloc(p, n); }
static void hip_release(void *p) { hp.release(p); }
static int hip_h2d(void *d, const void *h, size_t n) { return hp.copy(d, h, n, 1); }
static int hip_d2h(void *h, const void *d, size_t n) { return hp.copy(h, d, n, 2); }
static int hip_sync(void) { return hp.sync(); }

/* OpenCL through the ICD loader: buffers of the sgk context's cl_context,
 * blocking copies on its default queue. */
static struct {
    void *context, *queue;
    void *(*create_buffer)(void *, uint64_t, size_t, void *, int32_t *);
    int32_t (*release)(void *);
    int32_t (*write)(void *, void *, uint32_t, size_t, size_t, const void *, uint32_t, const void *, void *);
    int32_t (*read)(void *, void *, uint32_t, size_t, size_t, void *, uint32_t, const void *, void *);
    int32_t (*finish)(void *);
} cl;
static int cl_alloc(void **p, size_t n)
{
    int32_t err = 0;
    *p = cl.create_buffer(cl.context, 1u /* CL_MEM_READ_WRITE */, n ? n : 1, NULL, &err);
    return *p && err == 0 ? 0 : -1;
}
static void cl_release(void *p) { cl.release(p); }
static int cl_h2d(void *d, const void *h, size_t n) { return n ? cl.write(cl.queue, d, 1, 0, n, h, 0, NULL, NULL) : 0; }
static int cl_d2h(void *h, const void *d, size_t n) { return n ? cl.read(cl.queue, (void *)d, 1, 0, n, h, 0, NULL, NULL) : 0; }
static int cl_sync(void) { return cl.finish(cl.queue); }

#define SYM(lib, dst, name)                                                                        \
    do {                                                                                           \
        *(void **)&(dst) = dlsym(lib, name);                                                       \
        if (!(dst)) {                                                                              \
            snprintf(why, why_len, "%s has no %s", lib_name, name);                                \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

/* Fills m for the backend's device ordinal; on failure says why. */
int devmem_open(const char *backend, int ordinal, devmem *m, char *why, size_t why_len)
{
    if (strcmp(backend, "cpu") == 0) {
        *m = (devmem){"host memory", host_alloc, host_release, host_copy, host_copy, host_sync};
        return 0;
    }
    if (strcmp(backend, "cuda") == 0) {
        const char *lib_name = "libcuda.so.1";
        void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, why_len, "dlopen %s: %s", lib_name, dlerror());
            return -1;
        }
        cu_init_t init;
        SYM(lib, init, "cuInit");
        SYM(lib, cu.device_get, "cuDeviceGet");
        SYM(lib, cu.retain, "cuDevicePrimaryCtxRetain");
        SYM(lib, cu.set_current, "cuCtxSetCurrent");
        SYM(lib, cu.ctx_get_device, "cuCtxGetDevice");
        SYM(lib, cu.alloc, "cuMemAlloc_v2");
        SYM(lib, cu.release, "cuMemFree_v2");
        SYM(lib, cu.htod, "cuMemcpyHtoD_v2");
        SYM(lib, cu.dtoh, "cuMemcpyDtoH_v2");
        SYM(lib, cu.sync, "cuCtxSynchronize");
        SYM(lib, cu.stream_create, "cuStreamCreate");
        SYM(lib, cu.stream_destroy, "cuStreamDestroy_v2");
        SYM(lib, cu.stream_sync, "cuStreamSynchronize");
        SYM(lib, cu.begin_capture, "cuStreamBeginCapture_v2");
        SYM(lib, cu.end_capture, "cuStreamEndCapture");
        SYM(lib, cu.instantiate, "cuGraphInstantiateWithFlags");
        SYM(lib, cu.graph_destroy, "cuGraphDestroy");
        SYM(lib, cu.exec_destroy, "cuGraphExecDestroy");
        SYM(lib, cu.graph_launch, "cuGraphLaunch");
        SYM(lib, cu.mem_info, "cuMemGetInfo_v2");
        int e;
        if ((e = init(0)) != 0 || (e = devmem_cuda_make_current(ordinal)) != 0) {
            snprintf(why, why_len, "CUDA driver API: error %d setting up device %d", e, ordinal);
            return -1;
        }
        *m = (devmem){"cuMemAlloc", cu_alloc, cu_release, cu_h2d, cu_d2h, cu_sync};
        return 0;
    }
    if (strcmp(backend, "hip") == 0) {
        static const char *const libs[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};
        const char *lib_name = libs[0];
        void *lib = NULL;
        for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !lib; i++)
            lib = dlopen(lib_name = libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, why_len, "dlopen %s: %s", lib_name, dlerror());
            return -1;
        }
        SYM(lib, hp.set_device, "hipSetDevice");
        SYM(lib, hp.alloc, "hipMalloc");
        SYM(lib, hp.release, "hipFree");
        SYM(lib, hp.copy, "hipMemcpy");
        SYM(lib, hp.sync, "hipDeviceSynchronize");
        int e = hp.set_device(ordinal);
        if (e != 0) {
            snprintf(why, why_len, "hipSetDevice(%d): error %d", ordinal, e);
            return -1;
        }
        *m = (devmem){"hipMalloc", hip_alloc, hip_release, hip_h2d, hip_d2h, hip_sync};
        return 0;
    }
    snprintf(why, why_len, "%s takes no device pointers this test can offset", backend);
    return -1;
}

int devmem_cuda_make_current(int ordinal)
{
    int dev = 0, e;
    void *pctx = NULL;
    if ((e = cu.device_get(&dev, ordinal)) != 0 || (e = cu.retain(&pctx, dev)) != 0)
        return e;
    return cu.set_current(pctx);
}

int devmem_cuda_current_device(int *ordinal)
{
    return cu.ctx_get_device(ordinal);
}

int devmem_open_context(sgk_context *ctx, devmem *m, char *why, size_t why_len)
{
    const char *backend = sgk_context_backend(ctx);
    if (strcmp(backend, "opencl") != 0) {
        void *ordinal = NULL;
        if (strcmp(backend, "cpu") != 0 && sgk_context_native(ctx, SGK_NATIVE_DEVICE_ORDINAL, &ordinal) != SGK_OK) {
            snprintf(why, why_len, "sgk_context_native: %s", sgk_last_error());
            return -1;
        }
        return devmem_open(backend, (int)(intptr_t)ordinal, m, why, why_len);
    }
    const char *lib_name = "libOpenCL.so.1";
    void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "dlopen %s: %s", lib_name, dlerror());
        return -1;
    }
    SYM(lib, cl.create_buffer, "clCreateBuffer");
    SYM(lib, cl.release, "clReleaseMemObject");
    SYM(lib, cl.write, "clEnqueueWriteBuffer");
    SYM(lib, cl.read, "clEnqueueReadBuffer");
    SYM(lib, cl.finish, "clFinish");
    if (sgk_context_native(ctx, SGK_NATIVE_CL_CONTEXT, &cl.context) != SGK_OK ||
        sgk_context_native(ctx, SGK_NATIVE_CL_QUEUE, &cl.queue) != SGK_OK) {
        snprintf(why, why_len, "sgk_context_native: %s", sgk_last_error());
        return -1;
    }
    *m = (devmem){"clCreateBuffer", cl_alloc, cl_release, cl_h2d, cl_d2h, cl_sync};
    return 0;
}

int devmem_weights(const devmem *m, const sgkt_weights *w, sgk_layer_desc *desc, void *bufs[10])
{
    const size_t d = (size_t)w->D, h = (size_t)w->H, p = (size_t)w->P;
    const float *src[10] = {w->ln_gamma, w->ln_beta, w->wq, w->wk, w->wv, w->wo, w->w1, w->b1, w->w2, w->b2};
    const size_t n[10] = {d, d, d * d, d * d, d * d, d * d, p * p, p, h * p, h};
    memset(bufs, 0, 10 * sizeof *bufs);
    for (int i = 0; i < 10; i++)
        if (m->alloc(&bufs[i], n[i] * sizeof(float)) != 0 || m->h2d(bufs[i], src[i], n[i] * sizeof(float)) != 0) {
            devmem_weights_free(m, bufs);
            return -1;
        }
    desc->dim = w->D;
    desc->heads = w->H;
    desc->pair_dim = w->P;
    desc->eps = w->eps;
    const void **dst[10] = {&desc->ln_gamma, &desc->ln_beta, &desc->wq, &desc->wk, &desc->wv,
                            &desc->wo, &desc->w1, &desc->b1, &desc->w2, &desc->b2};
    for (int i = 0; i < 10; i++)
        *dst[i] = bufs[i];
    return 0;
}

void devmem_weights_free(const devmem *m, void *bufs[10])
{
    for (int i = 0; i < 10; i++) {
        if (bufs[i])
            m->release(bufs[i]);
        bufs[i] = NULL;
    }
}

/* CU_STREAM_NON_BLOCKING, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */
int devmem_cuda_stream_create(void **stream) { return cu.stream_create(stream, 1u); }
int devmem_cuda_stream_destroy(void *stream) { return cu.stream_destroy(stream); }
int devmem_cuda_stream_sync(void *stream) { return cu.stream_sync(stream); }
int devmem_cuda_capture_begin(void *stream) { return cu.begin_capture(stream, 1); }

int devmem_cuda_capture_end(void *stream, void **exec)
{
    void *graph = NULL;
    int e = cu.end_capture(stream, &graph);
    if (e == 0)
        e = cu.instantiate(exec, graph, 0);
    if (graph)
        cu.graph_destroy(graph);
    return e;
}

int devmem_cuda_graph_launch(void *exec, void *stream) { return cu.graph_launch(exec, stream); }
int devmem_cuda_graph_destroy(void *exec) { return cu.exec_destroy(exec); }
int devmem_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) { return cu.mem_info(free_bytes, total_bytes); }
