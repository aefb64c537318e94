/* What the bench needs from a GPU runtime to time sgk_forward_device as a
 * framework would call it: device buffers, the stream sgk runs on, a clock
 * on that stream, graphs where the runtime has them, and two reference
 * kernels (empty, copy) for the floor. Each GPU runtime is one module
 * (timer_cuda.cu, timer_opencl.c) built only where its toolchain exists; the
 * sgk core and backends know nothing of it. */
#ifndef SGK_BENCH_DEVICE_H
#define SGK_BENCH_DEVICE_H

#include <stddef.h>

#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One enqueued call; i counts calls within a timed loop (for rotating among
 * input sets). Returns 0, or -1 with the reason in the caller's state. */
typedef int (*bench_call_fn)(void *arg, int i);

typedef struct bench_dev bench_dev;

typedef struct bench_dev_info {
    char name[256];
    char driver[128];     /* driver / runtime version, "" when unknown */
    double peak_gflops;   /* fp32 FMA peak from device properties, 0 when unknown */
    char peak_source[96]; /* how peak_gflops was derived */
    double peak16_gflops;   /* dense bf16/f16 tensor-core peak (fp32 accumulation), 0 when unknown */
    char peak16_source[96]; /* how peak16_gflops was derived */
    double cache_bytes;   /* last-level (L2) cache size, 0 when unknown */
    char clock[96];       /* how time_calls measures, "" for ops->clock */
} bench_dev_info;

typedef struct bench_dev_ops {
    const char *backend; /* the sgk backend it serves: "cuda", "opencl", "hip" */
    const char *clock;   /* how time_calls measures, for the output */
    int has_graph;       /* graph_* are usable */

    /* Attaches to the device of an sgk context (via sgk_context_native). */
    int (*open)(sgk_context *ctx, bench_dev **out, char *err, size_t err_len);
    void (*close)(bench_dev *dev);
    const char *(*error)(bench_dev *dev); /* reason for the last -1 */
    void (*info)(bench_dev *dev, bench_dev_info *info);

    int (*alloc)(bench_dev *dev, size_t bytes, void **ptr);
    void (*free)(bench_dev *dev, void *ptr);
    int (*upload)(bench_dev *dev, void *dst, const void *src, size_t bytes);
    int (*download)(bench_dev *dev, void *dst, const void *src, size_t bytes);
    void *(*stream)(bench_dev *dev); /* pass to sgk_forward_device */
    int (*synchronize)(bench_dev *dev);

    /* Seconds of device time for calls first .. first+iters-1 enqueued back
     * to back on the stream. */
    int (*time_calls)(bench_dev *dev, bench_call_fn fn, void *arg, int first, int iters,
                      double *seconds);

    /* Captures fn(arg, i) into a graph; launch replays it on the stream. */
    int (*graph_capture)(bench_dev *dev, bench_call_fn fn, void *arg, int i, void **graph);
    int (*graph_launch)(bench_dev *dev, void *graph);
    void (*graph_destroy)(bench_dev *dev, void *graph);

    int (*empty_launch)(bench_dev *dev);
    /* Enqueues a copy of bytes (a multiple of 16) from src to dst. */
    int (*copy_launch)(bench_dev *dev, void *dst, const void *src, size_t bytes);
} bench_dev_ops;

/* The modules built into this bench, NULL where a module was not built. */
const bench_dev_ops *bench_cuda_ops(void);
const bench_dev_ops *bench_opencl_ops(void);
const bench_dev_ops *bench_fake_ops(void); /* the bench's own test only */

#ifdef __cplusplus
}
#endif
#endif
