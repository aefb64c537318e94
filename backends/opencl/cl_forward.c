/* Forward on device buffers: the caller's cl_mem handles and queue are
 * checked (context, device, size), then the variant's kernels are enqueued.
 * Nothing here waits for the device; the core's host path synchronises.
 * New weights for a layer too, which write the layer's own buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"
#include "relation_cl_args.h"

static const sgk_host *host(void) { return sgk_cl_host; }

/* The queue must feed the layer's device in the layer's context. An
 * out-of-order queue gets an event between the tiled path's two kernels. */
static sgk_status check_queue(const sgk_cl_ctx *c, cl_command_queue q, int *in_order)
{
    cl_context qc = NULL;
    cl_device_id qd = NULL;
    cl_command_queue_properties props = 0;
    cl_int err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qc, &qc, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof qd, &qd, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    if (err != CL_SUCCESS)
        return host()->set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "stream is not a usable cl_command_queue (clGetCommandQueueInfo "
                                 "failed with %s (%d))",
                                 sgk_cl_error_name(err), (int)err);
    if (qc != c->context)
        return host()->set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "stream is a cl_command_queue of another cl_context: it must "
                                 "belong to the layer's (sgk_context_native, "
                                 "SGK_NATIVE_CL_CONTEXT)");
    if (qd != c->device)
        return host()->set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "stream is a cl_command_queue of another device: it must feed "
                                 "the layer's device \"%s\"",
                                 c->info.label);
    *in_order = (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0;
    return SGK_OK;
}

/* A buffer of the layer's context holding at least need bytes; a short one
 * would let the kernels read or write past its end. */
static sgk_status check_buffer(const sgk_cl_ctx *c, const void *ptr, const char *name,
                               const char *formula, size_t need, sgk_status short_status)
{
    cl_mem m = (cl_mem)(uintptr_t)ptr;
    cl_context mc = NULL;
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(m, CL_MEM_CONTEXT, sizeof mc, &mc, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return host()->set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "%s is not a usable cl_mem (clGetMemObjectInfo failed with %s "
                                 "(%d)); on opencl device pointers are cl_mem handles",
                                 name, sgk_cl_error_name(err), (int)err);
    if (mc != c->context)
        return host()->set_error(SGK_ERR_INVALID_ARGUMENT,
                                 "%s is a cl_mem of another cl_context: it must belong to the "
                                 "layer's (sgk_context_native, SGK_NATIVE_CL_CONTEXT)",
                                 name);
    if (size < need)
        return host()->set_error(short_status,
                                 "%s is a cl_mem of %zu bytes, less than the %zu bytes of %s",
                                 name, size, need, formula);
    return SGK_OK;
}

static sgk_status check_args(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a,
                             cl_command_queue q, int *in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t f = sizeof(float);
    const size_t rows = (size_t)a->B * (size_t)a->N;
    const size_t pairs = rows * (size_t)a->N;
    const size_t mask_elem = a->mask_type == SGK_MASK_U8 ? 1 : f;
    sgk_status st = check_queue(c, q, in_order);
    if (st == SGK_OK)
        st = check_buffer(c, a->nodes, "nodes", "B*N*D floats", rows * (size_t)l->D * f,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = check_buffer(c, a->pair_feats, "pair_feats", "B*N*N*P floats",
                          pairs * (size_t)l->P * f, SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = check_buffer(c, a->edge_mask, "edge_mask",
                          mask_elem == 1 ? "B*N*N uint8" : "B*N*N floats", pairs * mask_elem,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = check_buffer(c, a->out, "out", "B*N*D floats", rows * (size_t)l->D * f,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK && p->workspace_bytes > 0)
        st = check_buffer(c, a->workspace, "workspace", "the variant's workspace",
                          p->workspace_bytes, SGK_ERR_INSUFFICIENT_WORKSPACE);
    return st;
}

static cl_mem mem(const void *p) { return (cl_mem)(uintptr_t)p; }

static sgk_status launch_failed(const char *call, cl_int err, const char *kernel,
                                const sgk_cl_ctx *c)
{
    char where[320];
    snprintf(where, sizeof where, "for kernel %s on device \"%s\"", kernel, c->info.label);
    return sgk_cl_fail(call, err, where);
}

/* Called with the context's lock held: the arguments live in the kernel
 * object until the enqueue has captured them. */
static sgk_status enqueue(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a,
                          cl_command_queue q, int in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const sgk_cl_program *pr = &c->prog;
    const cl_mem *w = l->w;
    const cl_int mask_u8 = a->mask_type == SGK_MASK_U8;
    cl_int err;
    if (p->kind == SGK_PLAN_SMALL) {
        const sgk_cl_kernel *k = &pr->k[SGK_CL_K_FUSED];
        err = sgk_cl_args_fused(k->kernel, mem(a->nodes), mem(a->pair_feats), mem(a->edge_mask),
                                mask_u8, w[SGK_CL_W_GAMMA], w[SGK_CL_W_BETA], w[SGK_CL_W_WQKV],
                                w[SGK_CL_W_W1], w[SGK_CL_W_B1], w[SGK_CL_W_W2], w[SGK_CL_W_B2],
                                w[SGK_CL_W_WO], mem(a->out), p->N, p->D, p->H, p->P, p->tq,
                                l->eps, p->scale, p->smem_fused * sizeof(float));
        if (err != CL_SUCCESS)
            return launch_failed("clSetKernelArg", err, "fused", c);
        const size_t global = (size_t)p->B * k->local;
        err = clEnqueueNDRangeKernel(q, k->kernel, 1, NULL, &global, &k->local, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return launch_failed("clEnqueueNDRangeKernel", err, "fused", c);
        return SGK_OK;
    }

    const sgk_cl_kernel *kl = &pr->k[SGK_CL_K_LN_QKV], *ka = &pr->k[SGK_CL_K_ATTN_TILE];
    err = sgk_cl_args_ln_qkv(kl->kernel, mem(a->nodes), w[SGK_CL_W_GAMMA], w[SGK_CL_W_BETA],
                             w[SGK_CL_W_WQKV], mem(a->workspace), (cl_int)(p->B * p->N), p->D,
                             p->rt, l->eps, p->smem_ln * sizeof(float));
    if (err != CL_SUCCESS)
        return launch_failed("clSetKernelArg", err, "ln_qkv", c);
    const size_t gl = (size_t)p->groups_ln * kl->local;
    cl_event done = NULL;
    err = clEnqueueNDRangeKernel(q, kl->kernel, 1, NULL, &gl, &kl->local, 0, NULL,
                                 in_order ? NULL : &done);
    if (err != CL_SUCCESS)
        return launch_failed("clEnqueueNDRangeKernel", err, "ln_qkv", c);
    err = sgk_cl_args_attn_tile(ka->kernel, mem(a->workspace), mem(a->nodes), mem(a->pair_feats),
                                mem(a->edge_mask), mask_u8, w[SGK_CL_W_W1], w[SGK_CL_W_B1],
                                w[SGK_CL_W_W2], w[SGK_CL_W_B2], w[SGK_CL_W_WO], mem(a->out), p->N,
                                p->D, p->H, p->P, p->tq, p->tk, (int)p->groups_q, p->scale,
                                p->smem_attn * sizeof(float));
    sgk_status st = SGK_OK;
    if (err != CL_SUCCESS) {
        st = launch_failed("clSetKernelArg", err, "attn_tile", c);
    } else {
        const size_t ga = (size_t)p->groups_attn * ka->local;
        err = clEnqueueNDRangeKernel(q, ka->kernel, 1, NULL, &ga, &ka->local, done ? 1 : 0,
                                     done ? &done : NULL, NULL);
        if (err != CL_SUCCESS)
            st = launch_failed("clEnqueueNDRangeKernel", err, "attn_tile", c);
    }
    if (done)
        clReleaseEvent(done);
    return st;
}

sgk_status sgk_cl_forward(void *blayer, int variant, const sgk_backend_plan *plan,
                          const sgk_fwd *a)
{
    (void)variant;
    sgk_cl_layer *l = blayer;
    sgk_cl_ctx *c = l->ctx;
    sgk_plan p;
    sgk_plan_load(plan, &p);
    cl_command_queue q = a->stream ? (cl_command_queue)a->stream : c->queue;
    int in_order = 1;
    sgk_status st = check_args(l, &p, a, q, &in_order);
    if (st != SGK_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    st = enqueue(l, &p, a, q, in_order);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- new weights ---------------------------------------------------------- */

sgk_status sgk_cl_set_weights(void *blayer, const sgk_layer_desc *desc)
{
    sgk_cl_layer *l = blayer;
    const sgk_cl_ctx *c = l->ctx;
    const size_t bytes = l->off.total * sizeof(float);
    if (host()->alloc_should_fail())
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "opencl: cannot allocate %zu bytes to pack the weights", bytes);
    float *packed = malloc(bytes ? bytes : 1);
    if (packed == NULL)
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "opencl: cannot allocate %zu bytes to pack the weights", bytes);
    sgk_pack_weights(desc, packed);
    sgk_status st = SGK_OK;
    for (int i = 0; i < SGK_CL_W_COUNT && st == SGK_OK; i++) {
        size_t at, end;
        sgk_cl_weight_range(&l->off, i, &at, &end);
        /* Blocking: the copy is done when the call returns. */
        cl_int err = clEnqueueWriteBuffer(c->queue, l->w[i], CL_TRUE, 0,
                                          (end - at) * sizeof(float), packed + at, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            char where[320];
            snprintf(where, sizeof where, "writing the layer's weights on device \"%s\"",
                     c->info.label);
            st = sgk_cl_fail("clEnqueueWriteBuffer", err, where);
        }
    }
    free(packed);
    if (st == SGK_OK)
        l->eps = desc->eps;
    return st;
}

sgk_status sgk_cl_set_weights_device(void *blayer, const sgk_layer_desc *desc, void *stream)
{
    sgk_cl_layer *l = blayer;
    const sgk_cl_ctx *c = l->ctx;
    if (l->map.runs == NULL)
        return host()->set_error(SGK_ERR_UNSUPPORTED, "opencl: no device repack for this layer: %s",
                                 l->map.reason);
    cl_command_queue q = stream ? (cl_command_queue)stream : c->queue;
    int in_order = 1;
    sgk_status st = check_queue(c, q, &in_order);
    static const char *const names[SGK_SRC_COUNT] = {
        "desc->ln_gamma", "desc->ln_beta", "desc->wq", "desc->wk", "desc->wv",
        "desc->wo", "desc->w1", "desc->b1", "desc->w2", "desc->b2",
    };
    static const char *const sizes[SGK_SRC_COUNT] = {
        "D floats", "D floats", "D*D floats", "D*D floats", "D*D floats",
        "D*D floats", "P*P floats", "P floats", "H*P floats", "H floats",
    };
    const void *src[SGK_SRC_COUNT];
    size_t count[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    sgk_repack_sources(l->D, l->H, l->P, count);
    for (int s = 0; s < SGK_SRC_COUNT && st == SGK_OK; s++)
        st = check_buffer(c, src[s], names[s], sizes[s], count[s] * sizeof(float),
                          SGK_ERR_INVALID_ARGUMENT);
    if (st != SGK_OK)
        return st;
    /* On an out-of-order queue, barriers keep the copies after the work
     * enqueued before and ahead of the work enqueued after. */
    cl_int err = in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(q, 0, NULL, NULL);
    const char *call = "clEnqueueBarrierWithWaitList";
    for (size_t r = 0; r < l->map.count && err == CL_SUCCESS; r++) {
        const sgk_repack_run *u = &l->map.runs[r];
        int i = 0;
        size_t at = 0, end = 0;
        for (; i < SGK_CL_W_COUNT; i++) {
            sgk_cl_weight_range(&l->off, i, &at, &end);
            if ((size_t)u->dst >= at && (size_t)u->dst < end)
                break;
        }
        call = "clEnqueueCopyBuffer";
        err = clEnqueueCopyBuffer(q, mem(src[u->seg]), l->w[i], (size_t)u->src * sizeof(float),
                                  ((size_t)u->dst - at) * sizeof(float),
                                  (size_t)u->len * sizeof(float), 0, NULL, NULL);
    }
    if (err == CL_SUCCESS && !in_order) {
        call = "clEnqueueBarrierWithWaitList";
        err = clEnqueueBarrierWithWaitList(q, 0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        char where[320];
        snprintf(where, sizeof where, "copying new weights on device \"%s\"", c->info.label);
        return sgk_cl_fail(call, err, where);
    }
    return SGK_OK;
}
