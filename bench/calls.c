/* The calls that get timed, each an enqueue of one thing on the stream. */
#include <stdio.h>
#include <string.h>

#include "run_internal.h"

int sgk_failed(call_ctx *c, const char *call, sgk_status st)
{
    snprintf(c->err, sizeof c->err, "%s: %s: %s", call, sgk_status_string(st), sgk_last_error());
    return -1;
}

int dev_failed(call_ctx *c)
{
    snprintf(c->err, sizeof c->err, "%s", c->ops->error(c->dev));
    return -1;
}

int call_forward_device(void *arg, int i)
{
    call_ctx *c = arg;
    int s = i % c->sets;
    sgk_status st = sgk_forward_device(c->layer, c->B, c->N, c->nodes[s], c->pair[s], c->mask[s],
                                       c->mask_type, c->out[s], c->ws, c->ws_bytes, c->stream);
    return st == SGK_OK ? 0 : sgk_failed(c, "sgk_forward_device", st);
}

int call_forward_host(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    sgk_status st = sgk_forward(c->layer, c->B, c->N, c->nodes[0], c->pair[0], c->mask[0], c->mask_type,
                                c->out[0]);
    return st == SGK_OK ? 0 : sgk_failed(c, "sgk_forward", st);
}

int call_backward_device(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    sgk_status st = sgk_backward_device(c->layer, c->B, c->N, c->nodes[0], c->pair[0], c->mask[0], c->mask_type,
                                        c->saved, c->d_out, c->grads, c->ws, c->ws_bytes, c->stream);
    return st == SGK_OK ? 0 : sgk_failed(c, "sgk_backward_device", st);
}

int call_graph(void *arg, int i)
{
    call_ctx *c = arg;
    return c->ops->graph_launch(c->dev, c->graphs[i % c->sets]) == 0 ? 0 : dev_failed(c);
}

int call_empty(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    return c->ops->empty_launch(c->dev) == 0 ? 0 : dev_failed(c);
}

int call_copy(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    return c->ops->copy_launch(c->dev, c->copy_dst, c->copy_src, c->copy_bytes) == 0 ? 0 : dev_failed(c);
}

const bench_dev_ops *module_for(const char *backend)
{
#ifdef SGK_BENCH_FAKE_DEVICE
    if (!strcmp(backend, "cpu")) return bench_fake_ops();
#endif
#ifdef SGK_BENCH_HAVE_CUDA
    if (!strcmp(backend, "cuda")) return bench_cuda_ops();
#endif
#ifdef SGK_BENCH_HAVE_OPENCL
    if (!strcmp(backend, "opencl")) return bench_opencl_ops();
#endif
    (void)backend;
    return NULL;
}
