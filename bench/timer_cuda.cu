// CUDA side of the bench: buffers, a stream, event timing, graph capture and
// replay, and the empty and copy kernels that set the floor. It uses the
// runtime API on its own (linked statically, so sgk-bench starts on machines
// without CUDA) and meets the sgk cuda backend only through the public API:
// the device ordinal from sgk_context_native, and device pointers and the
// stream passed to sgk_forward_device.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

struct bench_dev {
    int ordinal;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    char err[512];
};

struct cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static int fail(bench_dev *d, const char *what, cudaError_t e)
{
    snprintf(d->err, sizeof d->err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}

#define CK(d, call)                              \
    do {                                         \
        cudaError_t e_ = (call);                 \
        if (e_ != cudaSuccess) return fail(d, #call, e_); \
    } while (0)

// With --device all several devices are open at once, used in turn by the
// main thread and each by a thread of its own, so every entry point makes its
// device current first. The launches inside a timed loop run under
// time_calls or graph_capture, which have; they skip it, so that the launch
// cost measured is the launch's alone.
#define USE(d) CK(d, cudaSetDevice((d)->ordinal))

__global__ void bench_empty_kernel() {}

__global__ void bench_copy_kernel(const float4 *__restrict__ src, float4 *__restrict__ dst, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

static int cu_open(sgk_context *ctx, bench_dev **out, char *err, size_t err_len)
{
    void *native = NULL;
    sgk_status st = sgk_context_native(ctx, SGK_NATIVE_DEVICE_ORDINAL, &native);
    if (st != SGK_OK) {
        snprintf(err, err_len, "sgk_context_native(DEVICE_ORDINAL): %s", sgk_last_error());
        return -1;
    }
    bench_dev *d = (bench_dev *)calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of host memory");
        return -1;
    }
    d->ordinal = (int)(intptr_t)native;
    cudaError_t e = cudaSetDevice(d->ordinal);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreate(&d->start);
    if (e == cudaSuccess) e = cudaEventCreate(&d->stop);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "CUDA runtime in the bench, device %d: %s", d->ordinal, cudaGetErrorString(e));
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

static void cu_close(bench_dev *d)
{
    if (!d) return;
    cudaSetDevice(d->ordinal);
    cudaStreamSynchronize(d->stream);
    cudaEventDestroy(d->start);
    cudaEventDestroy(d->stop);
    cudaStreamDestroy(d->stream);
    free(d);
}

static const char *cu_error(bench_dev *d) { return d->err; }

// FP32 lanes per SM: 64 on GP100, Volta, Turing and GA100; 128 on the other
// Pascal parts and on GA10x, Ada, Hopper and Blackwell.
static int fp32_lanes_per_sm(int major, int minor)
{
    if (major == 6 && minor == 0) return 64;
    if (major == 7) return 64;
    if (major == 8 && minor == 0) return 64;
    return 128;
}

/* Dense bf16 and f16 tensor-core FLOP a clock an SM with fp32 accumulation,
 * where one figure holds for the architecture (bench/README.md derives them
 * from the datasheets); 0 elsewhere, since parts of one compute capability
 * differ there (GeForce runs fp32 accumulation at a fraction of the rate). */
static int tc16_flop_per_sm(int major, int minor)
{
    if (major == 8 && minor == 0) return 2048;
    if (major == 9 && minor == 0) return 4096;
    return 0;
}

static void driver_version(char *buf, size_t len, int cuda_driver)
{
    char kmod[64] = "";
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        char line[256];
        if (fgets(line, sizeof line, f)) {
            // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Tue ..."
            const char *p = strstr(line, "Kernel Module");
            if (p && sscanf(p + strlen("Kernel Module"), "%63s", kmod) != 1) kmod[0] = 0;
        }
        fclose(f);
    }
    if (kmod[0])
        snprintf(buf, len, "%s (CUDA %d.%d)", kmod, cuda_driver / 1000, (cuda_driver % 1000) / 10);
    else
        snprintf(buf, len, "CUDA %d.%d", cuda_driver / 1000, (cuda_driver % 1000) / 10);
}

static void cu_info(bench_dev *d, bench_dev_info *info)
{
    memset(info, 0, sizeof *info);
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d->ordinal) == cudaSuccess) {
        snprintf(info->name, sizeof info->name, "%s", p.name);
        int sms = 0, khz = 0, l2 = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d->ordinal);
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d->ordinal);
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d->ordinal);
        int lanes = fp32_lanes_per_sm(p.major, p.minor);
        info->peak_gflops = (double)sms * (khz / 1e3) * lanes * 2.0 / 1e3;
        snprintf(info->peak_source, sizeof info->peak_source, "%d SMs x %d MHz x %d FMA x 2 (sm_%d%d)",
                 sms, khz / 1000, lanes, p.major, p.minor);
        const int tc = tc16_flop_per_sm(p.major, p.minor);
        if (tc > 0) {
            info->peak16_gflops = (double)sms * (khz / 1e3) * tc / 1e3;
            snprintf(info->peak16_source, sizeof info->peak16_source, "%d SMs x %d MHz x %d (sm_%d%d, dense)", sms,
                     khz / 1000, tc, p.major, p.minor);
        } else {
            snprintf(info->peak16_source, sizeof info->peak16_source, "unknown for sm_%d%d", p.major, p.minor);
        }
        info->cache_bytes = (double)l2;
    }
    int drv = 0;
    if (cudaDriverGetVersion(&drv) == cudaSuccess) driver_version(info->driver, sizeof info->driver, drv);
}

static int cu_alloc(bench_dev *d, size_t bytes, void **ptr)
{
    USE(d);
    CK(d, cudaMalloc(ptr, bytes));
    // Defined contents from the start: the copy kernel that times the
    // bandwidth floor reads its source unwritten otherwise, which
    // compute-sanitizer's initcheck reports as the bench's error.
    cudaError_t e = cudaMemset(*ptr, 0, bytes);
    if (e != cudaSuccess) {
        cudaFree(*ptr);
        *ptr = NULL;
        return fail(d, "cudaMemset", e);
    }
    return 0;
}

static void cu_free(bench_dev *d, void *ptr)
{
    cudaSetDevice(d->ordinal);
    cudaFree(ptr);
}

static int cu_upload(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    USE(d);
    CK(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream));
    CK(d, cudaStreamSynchronize(d->stream));
    return 0;
}

static int cu_download(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    USE(d);
    CK(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream));
    CK(d, cudaStreamSynchronize(d->stream));
    return 0;
}

static void *cu_stream(bench_dev *d) { return (void *)d->stream; }

static int cu_synchronize(bench_dev *d)
{
    USE(d);
    CK(d, cudaStreamSynchronize(d->stream));
    return 0;
}

static int cu_time_calls(bench_dev *d, bench_call_fn fn, void *arg, int first, int iters, double *seconds)
{
    USE(d);
    CK(d, cudaEventRecord(d->start, d->stream));
    for (int i = 0; i < iters; i++)
        if (fn(arg, first + i) != 0) {
            cudaStreamSynchronize(d->stream);
            return -1;
        }
    CK(d, cudaEventRecord(d->stop, d->stream));
    CK(d, cudaEventSynchronize(d->stop));
    float ms = 0;
    CK(d, cudaEventElapsedTime(&ms, d->start, d->stop));
    *seconds = ms * 1e-3;
    return 0;
}

static int cu_graph_capture(bench_dev *d, bench_call_fn fn, void *arg, int i, void **graph)
{
    USE(d);
    struct cuda_graph *g = (struct cuda_graph *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(d->err, sizeof d->err, "out of host memory");
        return -1;
    }
    // Global mode: a call that is unsafe during capture anywhere in the
    // process fails here, as it would under torch.cuda.graph.
    cudaError_t e = cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        free(g);
        return fail(d, "cudaStreamBeginCapture", e);
    }
    int rc = fn(arg, i);
    e = cudaStreamEndCapture(d->stream, &g->graph);
    if (rc != 0) {
        if (e == cudaSuccess) cudaGraphDestroy(g->graph);
        free(g);
        return -1;
    }
    if (e != cudaSuccess) {
        free(g);
        return fail(d, "cudaStreamEndCapture", e);
    }
    e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    if (e != cudaSuccess) {
        cudaGraphDestroy(g->graph);
        free(g);
        return fail(d, "cudaGraphInstantiate", e);
    }
    *graph = g;
    return 0;
}

static int cu_graph_launch(bench_dev *d, void *graph)
{
    CK(d, cudaGraphLaunch(((struct cuda_graph *)graph)->exec, d->stream));
    return 0;
}

static void cu_graph_destroy(bench_dev *d, void *graph)
{
    struct cuda_graph *g = (struct cuda_graph *)graph;
    if (!g) return;
    cudaSetDevice(d->ordinal);
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

static int cu_empty_launch(bench_dev *d)
{
    bench_empty_kernel<<<1, 32, 0, d->stream>>>();
    CK(d, cudaGetLastError());
    return 0;
}

static int cu_copy_launch(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    int sms = 0;
    CK(d, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d->ordinal));
    bench_copy_kernel<<<sms * 8, 512, 0, d->stream>>>((const float4 *)src, (float4 *)dst, bytes / 16);
    CK(d, cudaGetLastError());
    return 0;
}

static const bench_dev_ops cuda_ops = {
    "cuda", "CUDA events on the stream", 1,
    cu_open, cu_close, cu_error, cu_info,
    cu_alloc, cu_free, cu_upload, cu_download, cu_stream, cu_synchronize,
    cu_time_calls, cu_graph_capture, cu_graph_launch, cu_graph_destroy,
    cu_empty_launch, cu_copy_launch,
};

extern "C" const bench_dev_ops *bench_cuda_ops(void) { return &cuda_ops; }
