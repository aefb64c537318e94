/* OpenCL side of the bench. The ICD loader is opened at run time, so that
 * sgk-bench starts on machines without OpenCL; buffers, kernels and timing
 * all go through the context, device and queue that the sgk opencl backend
 * hands out with sgk_context_native. Calls are timed by profiling events of
 * two empty kernels that bracket them on the queue (the sgk queue has
 * profiling enabled); where profiling is off, by clFinish and the monotonic
 * clock. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

#define CL_FUNCS(X)                                                                              \
    X(cl_int, clGetDeviceInfo, (cl_device_id, cl_device_info, size_t, void *, size_t *))           \
    X(cl_int, clGetCommandQueueInfo, (cl_command_queue, cl_command_queue_info, size_t, void *,     \
                                      size_t *))                                                   \
    X(cl_mem, clCreateBuffer, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                \
    X(cl_int, clReleaseMemObject, (cl_mem))                                                        \
    X(cl_int, clEnqueueWriteBuffer, (cl_command_queue, cl_mem, cl_bool, size_t, size_t,            \
                                     const void *, cl_uint, const cl_event *, cl_event *))         \
    X(cl_int, clEnqueueReadBuffer, (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *,     \
                                    cl_uint, const cl_event *, cl_event *))                        \
    X(cl_int, clFinish, (cl_command_queue))                                                        \
    X(cl_program, clCreateProgramWithSource, (cl_context, cl_uint, const char **, const size_t *,  \
                                              cl_int *))                                           \
    X(cl_int, clBuildProgram, (cl_program, cl_uint, const cl_device_id *, const char *,            \
                               void (*)(cl_program, void *), void *))                              \
    X(cl_int, clGetProgramBuildInfo, (cl_program, cl_device_id, cl_program_build_info, size_t,     \
                                      void *, size_t *))                                           \
    X(cl_kernel, clCreateKernel, (cl_program, const char *, cl_int *))                             \
    X(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void *))                          \
    X(cl_int, clEnqueueNDRangeKernel, (cl_command_queue, cl_kernel, cl_uint, const size_t *,       \
                                       const size_t *, const size_t *, cl_uint, const cl_event *,  \
                                       cl_event *))                                                \
    X(cl_int, clWaitForEvents, (cl_uint, const cl_event *))                                        \
    X(cl_int, clGetEventProfilingInfo, (cl_event, cl_profiling_info, size_t, void *, size_t *))    \
    X(cl_int, clReleaseEvent, (cl_event))                                                          \
    X(cl_int, clReleaseKernel, (cl_kernel))                                                        \
    X(cl_int, clReleaseProgram, (cl_program))

typedef struct cl_api {
#define DECL(ret, name, args) ret(CL_API_CALL *name) args;
    CL_FUNCS(DECL)
#undef DECL
} cl_api;

struct bench_dev {
    void *lib;
    cl_api f;
    cl_context ctx;
    cl_device_id device;
    cl_command_queue queue;
    int profiling;
    cl_program program;
    cl_kernel empty, copy;
    char err[1024];
};

static const char kernel_source[] =
    "kernel void sgk_bench_empty(void) {}\n"
    "kernel void sgk_bench_copy(global const float4 *src, global float4 *dst, ulong n) {\n"
    "    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) dst[i] = src[i];\n"
    "}\n";

static int fail(bench_dev *d, const char *what, cl_int e)
{
    snprintf(d->err, sizeof d->err, "%s failed with OpenCL error %d", what, (int)e);
    return -1;
}

#define CK(d, call)                                   \
    do {                                              \
        cl_int e_ = (call);                           \
        if (e_ != CL_SUCCESS) return fail(d, #call, e_); \
    } while (0)

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int load_api(bench_dev *d, char *err, size_t err_len)
{
    d->lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib) d->lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib) {
        snprintf(err, err_len, "cannot load the OpenCL ICD loader: %s", dlerror());
        return -1;
    }
#define LOAD(ret, name, args)                                                   \
    *(void **)(&d->f.name) = dlsym(d->lib, #name);                              \
    if (!d->f.name) {                                                           \
        snprintf(err, err_len, "the OpenCL ICD loader has no %s", #name);       \
        return -1;                                                              \
    }
    CL_FUNCS(LOAD)
#undef LOAD
    return 0;
}

static int build_kernels(bench_dev *d)
{
    cl_int e;
    const char *src = kernel_source;
    d->program = d->f.clCreateProgramWithSource(d->ctx, 1, &src, NULL, &e);
    if (e != CL_SUCCESS) return fail(d, "clCreateProgramWithSource", e);
    e = d->f.clBuildProgram(d->program, 1, &d->device, "", NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[512] = "";
        d->f.clGetProgramBuildInfo(d->program, d->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        snprintf(d->err, sizeof d->err, "building the bench's reference kernels: OpenCL error %d: %s",
                 (int)e, log);
        return -1;
    }
    d->empty = d->f.clCreateKernel(d->program, "sgk_bench_empty", &e);
    if (e != CL_SUCCESS) return fail(d, "clCreateKernel(sgk_bench_empty)", e);
    d->copy = d->f.clCreateKernel(d->program, "sgk_bench_copy", &e);
    if (e != CL_SUCCESS) return fail(d, "clCreateKernel(sgk_bench_copy)", e);
    return 0;
}

static void ocl_close(bench_dev *d)
{
    if (!d) return;
    if (d->queue && d->f.clFinish) d->f.clFinish(d->queue);
    if (d->copy) d->f.clReleaseKernel(d->copy);
    if (d->empty) d->f.clReleaseKernel(d->empty);
    if (d->program) d->f.clReleaseProgram(d->program);
    if (d->lib) dlclose(d->lib);
    free(d);
}

static int ocl_open(sgk_context *ctx, bench_dev **out, char *err, size_t err_len)
{
    bench_dev *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of host memory");
        return -1;
    }
    void *c = NULL, *dev = NULL, *q = NULL;
    if (sgk_context_native(ctx, SGK_NATIVE_CL_CONTEXT, &c) != SGK_OK ||
        sgk_context_native(ctx, SGK_NATIVE_CL_DEVICE, &dev) != SGK_OK ||
        sgk_context_native(ctx, SGK_NATIVE_CL_QUEUE, &q) != SGK_OK) {
        snprintf(err, err_len, "sgk_context_native: %s", sgk_last_error());
        free(d);
        return -1;
    }
    d->ctx = (cl_context)c;
    d->device = (cl_device_id)dev;
    d->queue = (cl_command_queue)q;
    if (load_api(d, err, err_len) != 0) {
        ocl_close(d);
        return -1;
    }
    cl_command_queue_properties props = 0;
    if (d->f.clGetCommandQueueInfo(d->queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) == CL_SUCCESS)
        d->profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
    if (build_kernels(d) != 0) {
        snprintf(err, err_len, "%s", d->err);
        ocl_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

static const char *ocl_error(bench_dev *d) { return d->err; }

static void ocl_info(bench_dev *d, bench_dev_info *info)
{
    memset(info, 0, sizeof *info);
    d->f.clGetDeviceInfo(d->device, CL_DEVICE_NAME, sizeof info->name - 1, info->name, NULL);
    d->f.clGetDeviceInfo(d->device, CL_DRIVER_VERSION, sizeof info->driver - 1, info->driver, NULL);
    cl_ulong cache = 0;
    if (d->f.clGetDeviceInfo(d->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL) == CL_SUCCESS)
        info->cache_bytes = (double)cache;
    if (!d->profiling)
        snprintf(info->clock, sizeof info->clock, "clFinish and the monotonic clock (queue without profiling)");
    /* OpenCL does not say how many FP32 lanes a compute unit has. */
    snprintf(info->peak_source, sizeof info->peak_source, "unknown on OpenCL (give --peak-gflops)");
}

static int ocl_alloc(bench_dev *d, size_t bytes, void **ptr)
{
    cl_int e;
    cl_mem m = d->f.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
    if (e != CL_SUCCESS) return fail(d, "clCreateBuffer", e);
    *ptr = (void *)m;
    return 0;
}

static void ocl_free(bench_dev *d, void *ptr)
{
    if (ptr) d->f.clReleaseMemObject((cl_mem)ptr);
}

static int ocl_upload(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    CK(d, d->f.clEnqueueWriteBuffer(d->queue, (cl_mem)dst, CL_TRUE, 0, bytes, src, 0, NULL, NULL));
    return 0;
}

static int ocl_download(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    CK(d, d->f.clEnqueueReadBuffer(d->queue, (cl_mem)src, CL_TRUE, 0, bytes, dst, 0, NULL, NULL));
    return 0;
}

static void *ocl_stream(bench_dev *d) { return (void *)d->queue; }

static int ocl_synchronize(bench_dev *d)
{
    CK(d, d->f.clFinish(d->queue));
    return 0;
}

static int enqueue_empty(bench_dev *d, cl_event *ev)
{
    size_t one = 1;
    CK(d, d->f.clEnqueueNDRangeKernel(d->queue, d->empty, 1, NULL, &one, &one, 0, NULL, ev));
    return 0;
}

static int ocl_time_calls(bench_dev *d, bench_call_fn fn, void *arg, int first, int iters, double *seconds)
{
    CK(d, d->f.clFinish(d->queue));
    if (!d->profiling) {
        double t0 = now_seconds();
        for (int i = 0; i < iters; i++)
            if (fn(arg, first + i) != 0) return -1;
        CK(d, d->f.clFinish(d->queue));
        *seconds = now_seconds() - t0;
        return 0;
    }
    cl_event before = NULL, after = NULL;
    int rc = enqueue_empty(d, &before);
    for (int i = 0; rc == 0 && i < iters; i++) rc = fn(arg, first + i);
    if (rc == 0) rc = enqueue_empty(d, &after);
    cl_ulong t0 = 0, t1 = 0;
    cl_int e = CL_SUCCESS;
    if (rc == 0) {
        e = d->f.clWaitForEvents(1, &after);
        if (e == CL_SUCCESS)
            e = d->f.clGetEventProfilingInfo(before, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
        if (e == CL_SUCCESS)
            e = d->f.clGetEventProfilingInfo(after, CL_PROFILING_COMMAND_START, sizeof t1, &t1, NULL);
        if (e != CL_SUCCESS) rc = fail(d, "profiling the timed calls", e);
    }
    if (before) d->f.clReleaseEvent(before);
    if (after) d->f.clReleaseEvent(after);
    d->f.clFinish(d->queue);
    if (rc == 0) *seconds = (double)(t1 - t0) * 1e-9;
    return rc;
}

static int ocl_graph_capture(bench_dev *d, bench_call_fn fn, void *arg, int i, void **graph)
{
    (void)fn, (void)arg, (void)i, (void)graph;
    snprintf(d->err, sizeof d->err, "OpenCL has no graphs");
    return -1;
}

static int ocl_graph_launch(bench_dev *d, void *graph)
{
    (void)graph;
    snprintf(d->err, sizeof d->err, "OpenCL has no graphs");
    return -1;
}

static void ocl_graph_destroy(bench_dev *d, void *graph) { (void)d, (void)graph; }

static int ocl_empty_launch(bench_dev *d) { return enqueue_empty(d, NULL); }

static int ocl_copy_launch(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    cl_mem s = (cl_mem)src, t = (cl_mem)dst;
    cl_ulong n = bytes / 16;
    size_t local = 256, global = 1 << 20;
    if (n < global) global = ((size_t)n + local - 1) / local * local;
    CK(d, d->f.clSetKernelArg(d->copy, 0, sizeof s, &s));
    CK(d, d->f.clSetKernelArg(d->copy, 1, sizeof t, &t));
    CK(d, d->f.clSetKernelArg(d->copy, 2, sizeof n, &n));
    CK(d, d->f.clEnqueueNDRangeKernel(d->queue, d->copy, 1, NULL, &global, NULL, 0, NULL, NULL));
    return 0;
}

static bench_dev_ops opencl_ops = {
    "opencl", "OpenCL profiling events on the queue", 0,
    ocl_open, ocl_close, ocl_error, ocl_info,
    ocl_alloc, ocl_free, ocl_upload, ocl_download, ocl_stream, ocl_synchronize,
    ocl_time_calls, ocl_graph_capture, ocl_graph_launch, ocl_graph_destroy,
    ocl_empty_launch, ocl_copy_launch,
};

const bench_dev_ops *bench_opencl_ops(void) { return &opencl_ops; }
