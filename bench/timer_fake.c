/* A stand-in GPU module for the bench's own test: it serves the cpu backend
 * as if it were a device with a stream, graphs and a small cache, so that
 * the stream, graph and rotation paths of sgk-bench run on machines without
 * a GPU. A "graph" records the call and replays it. Never installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "measure.h"

struct bench_dev {
    char err[128];
};

typedef struct fake_graph {
    bench_call_fn fn;
    void *arg;
    int i;
} fake_graph;

static int fk_open(sgk_context *ctx, bench_dev **out, char *err, size_t err_len)
{
    (void)ctx;
    *out = calloc(1, sizeof **out);
    if (!*out) snprintf(err, err_len, "out of host memory");
    return *out ? 0 : -1;
}

static void fk_close(bench_dev *d) { free(d); }
static const char *fk_error(bench_dev *d) { return d->err; }

static void fk_info(bench_dev *d, bench_dev_info *info)
{
    (void)d;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "fake device on the cpu backend");
    snprintf(info->driver, sizeof info->driver, "none");
    info->peak_gflops = 100;
    snprintf(info->peak_source, sizeof info->peak_source, "made up");
    info->peak16_gflops = 800;
    snprintf(info->peak16_source, sizeof info->peak16_source, "made up");
    info->cache_bytes = 1 << 20; /* small, so that seed rotates */
}

static int fk_alloc(bench_dev *d, size_t bytes, void **ptr)
{
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr) snprintf(d->err, sizeof d->err, "malloc(%zu) failed", bytes);
    return *ptr ? 0 : -1;
}

static void fk_free(bench_dev *d, void *ptr)
{
    (void)d;
    free(ptr);
}

static int fk_copy(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    memcpy(dst, src, bytes);
    return 0;
}

static void *fk_stream(bench_dev *d)
{
    (void)d;
    return NULL;
}

static int fk_synchronize(bench_dev *d)
{
    (void)d;
    return 0;
}

static int fk_time_calls(bench_dev *d, bench_call_fn fn, void *arg, int first, int iters, double *seconds)
{
    (void)d;
    bench_clock c = bench_host_clock();
    return c.time(c.self, fn, arg, first, iters, seconds);
}

static int fk_graph_capture(bench_dev *d, bench_call_fn fn, void *arg, int i, void **graph)
{
    fake_graph *g = malloc(sizeof *g);
    if (!g) {
        snprintf(d->err, sizeof d->err, "out of host memory");
        return -1;
    }
    g->fn = fn, g->arg = arg, g->i = i;
    *graph = g;
    return 0;
}

static int fk_graph_launch(bench_dev *d, void *graph)
{
    fake_graph *g = graph;
    if (g->fn(g->arg, g->i) != 0) {
        snprintf(d->err, sizeof d->err, "replayed call failed");
        return -1;
    }
    return 0;
}

static void fk_graph_destroy(bench_dev *d, void *graph)
{
    (void)d;
    free(graph);
}

static int fk_empty(bench_dev *d)
{
    (void)d;
    return 0;
}

static int fk_copy_launch(bench_dev *d, void *dst, const void *src, size_t bytes)
{
    return fk_copy(d, dst, src, bytes);
}

static const bench_dev_ops fake_ops = {
    "cpu", "host clock (fake device)", 1,
    fk_open, fk_close, fk_error, fk_info,
    fk_alloc, fk_free, fk_copy, fk_copy, fk_stream, fk_synchronize,
    fk_time_calls, fk_graph_capture, fk_graph_launch, fk_graph_destroy,
    fk_empty, fk_copy_launch,
};

const bench_dev_ops *bench_fake_ops(void) { return &fake_ops; }
