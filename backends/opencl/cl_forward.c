/* Forward on device buffers: the caller's cl_mem handles and queue are
 * checked (context, device, size), then the variant's kernels are enqueued.
 * Nothing here waits for the device; the core's host path synchronises.
 * New weights for a layer too, which write the layer's own buffers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"
#include "relation_cl_args.h"

static const sgk_host *host(void) { return sgk_cl_host; }

/* The queue must feed the layer's device in the layer's context. An
 * out-of-order queue gets an event between the tiled path's two kernels. */
sgk_status sgk_cl_check_queue(const sgk_cl_ctx *c, cl_command_queue q, int *in_order)
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
sgk_status sgk_cl_check_buffer(const sgk_cl_ctx *c, const void *ptr, const char *name, const char *formula,
                               size_t need, sgk_status short_status)
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

/* bytes of an element of nodes, pair_feats and out, and their unit's name */
static size_t elem_bytes(const sgk_cl_layer *l) { return l->dtype == SGK_DTYPE_F32 ? 4 : 2; }
static const char *elem_unit(const sgk_cl_layer *l)
{
    return l->dtype == SGK_DTYPE_BF16 ? "bf16 values" : l->dtype == SGK_DTYPE_F16 ? "f16 values" : "floats";
}

static sgk_status check_args(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a,
                             cl_command_queue q, int *in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t f = sizeof(float), es = elem_bytes(l);
    const size_t rows = (size_t)a->B * (size_t)a->N;
    const size_t pairs = rows * (size_t)a->N;
    const size_t mask_elem = a->mask_type == SGK_MASK_U8 ? 1 : f;
    const size_t ws = p->workspace_bytes;
    char what[2][40];
    snprintf(what[0], sizeof what[0], "B*N*D %s", elem_unit(l));
    snprintf(what[1], sizeof what[1], "B*N*N*P %s", elem_unit(l));
    sgk_status st = sgk_cl_check_queue(c, q, in_order);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->nodes, "nodes", what[0], rows * (size_t)l->D * es,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->pair_feats, "pair_feats", what[1], pairs * (size_t)l->P * es,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->edge_mask, "edge_mask",
                          mask_elem == 1 ? "B*N*N uint8" : "B*N*N floats", pairs * mask_elem,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK)
        st = sgk_cl_check_buffer(c, a->out, "out", what[0], rows * (size_t)l->D * es,
                          SGK_ERR_INVALID_ARGUMENT);
    if (st == SGK_OK && ws > 0)
        st = sgk_cl_check_buffer(c, a->workspace, "workspace", "the variant's workspace", ws,
                          SGK_ERR_INSUFFICIENT_WORKSPACE);
    return st;
}

static cl_mem mem(const void *p) { return sgk_cl_mem(p); }

static sgk_status launch_failed(const char *call, cl_int err, const char *kernel,
                                const sgk_cl_ctx *c)
{
    char where[320];
    snprintf(where, sizeof where, "for kernel %s on device \"%s\"", kernel, c->info.label);
    return sgk_cl_fail(call, err, where);
}

/* A region of the workspace as a buffer of its own. */
sgk_status sgk_cl_sub_buffer(const sgk_cl_ctx *c, const void *ws, size_t at, size_t bytes, cl_mem *out)
{
    cl_buffer_region r = {at, bytes ? bytes : 1};
    cl_int err = CL_SUCCESS;
    *out = clCreateSubBuffer(mem(ws), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    if (*out == NULL || err != CL_SUCCESS) {
        *out = NULL;
        char where[640];
        snprintf(where, sizeof where,
                 "for a region of the workspace on device \"%s\"; "
                 "the workspace must be a buffer of its own, not a sub-buffer",
                 c->info.label);
        return sgk_cl_fail("clCreateSubBuffer", err, where);
    }
    return SGK_OK;
}

/* On an out-of-order queue, what comes after waits for what came before. */
sgk_status sgk_cl_order(cl_command_queue q, int in_order, const sgk_cl_ctx *c)
{
    cl_int err = in_order ? CL_SUCCESS : clEnqueueBarrierWithWaitList(q, 0, NULL, NULL);
    return err == CL_SUCCESS ? SGK_OK : launch_failed("clEnqueueBarrierWithWaitList", err, "(ordering)", c);
}

/* groups0 x groups1 groups of kernel k, whose arguments err says were set. */
sgk_status sgk_cl_launch(const sgk_cl_ctx *c, cl_command_queue q, int which, cl_int err, int64_t groups0,
                         int64_t groups1)
{
    const sgk_cl_kernel *k = &c->prog.k[which];
    if (err != CL_SUCCESS)
        return launch_failed("clSetKernelArg", err, sgk_cl_kernel_names[which], c);
    const size_t global[2] = { (size_t)groups0 * k->local, (size_t)groups1 }, local[2] = { k->local, 1 };
    err = clEnqueueNDRangeKernel(q, k->kernel, groups1 > 1 ? 2 : 1, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return launch_failed("clEnqueueNDRangeKernel", err, sgk_cl_kernel_names[which], c);
    return SGK_OK;
}

/* Called with the context's lock held: the arguments live in the kernel
 * object until the enqueue has captured them. */
static sgk_status enqueue(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a,
                          cl_command_queue q, int in_order, cl_mem lse)
{
    const sgk_cl_ctx *c = l->ctx;
    const sgk_cl_program *pr = &c->prog;
    const cl_mem *w = l->w;
    const cl_int mask_u8 = a->mask_type == SGK_MASK_U8;
    if (p->kind == SGK_PLAN_SMALL) {
        const cl_int err = sgk_cl_args_fused(
            pr->k[SGK_CL_K_FUSED].kernel, mem(a->nodes), mem(a->pair_feats), (cl_int)l->dtype, mem(a->edge_mask), mask_u8,
            w[SGK_CL_W_GAMMA], w[SGK_CL_W_BETA], w[SGK_CL_W_WQKV], w[SGK_CL_W_W1], p->ldp, w[SGK_CL_W_B1],
            w[SGK_CL_W_W2], p->ldh, w[SGK_CL_W_B2], w[SGK_CL_W_WO], p->ldo, mem(a->out), p->N, p->D, p->H,
            p->P, p->ldk, p->ldc, p->tq, p->tqp, p->tk, p->qc, l->eps, p->scale,
            p->smem_fused * sizeof(float));
        return sgk_cl_launch(c, q, SGK_CL_K_FUSED, err, p->B, 1);
    }
    /* the LayerNorm'd rows in the context's place, until attn writes it */
    return sgk_cl_tiled(l, p, a, q, in_order, (cl_long)(p->ctx_offset / sizeof(float)), lse);
}

sgk_status sgk_cl_tiled(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a, cl_command_queue q,
                        int in_order, cl_long xn0, cl_mem lse)
{
    const sgk_cl_ctx *c = l->ctx;
    const sgk_cl_program *pr = &c->prog;
    const cl_mem *w = l->w;
    const cl_int mask_u8 = a->mask_type == SGK_MASK_U8;
    const cl_mem ws = mem(a->workspace);
    const cl_long ctx0 = (cl_long)(p->ctx_offset / sizeof(float));
    const cl_int rows = (cl_int)(p->B * p->N), lse_on = lse != NULL;
    sgk_status st = sgk_cl_launch(c, q, SGK_CL_K_NORM,
                                  sgk_cl_args_norm(pr->k[SGK_CL_K_NORM].kernel, mem(a->nodes), w[SGK_CL_W_GAMMA],
                                                   w[SGK_CL_W_BETA], l->eps, ws, xn0, p->ldc, rows, p->D, p->rt,
                                                   p->smem_norm * sizeof(float)),
                                  p->groups_norm, 1);
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK)
        st = sgk_cl_launch(c, q, SGK_CL_K_PROJ,
                    sgk_cl_args_proj(pr->k[SGK_CL_K_PROJ].kernel, ws, xn0, p->ldc, w[SGK_CL_W_WQKV], p->ldk, 0, ws,
                                     ws, 0, p->ldk, rows, p->D, p->ldk, p->mt, p->nt, sizeof(float)),
                    p->groups_rows, p->groups_qkv);
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK)
        st = sgk_cl_launch(c, q, SGK_CL_K_ATTN,
                    sgk_cl_args_attn(pr->k[SGK_CL_K_ATTN].kernel, ws, p->ldk, mem(a->pair_feats),
                                     (cl_int)l->dtype, mem(a->edge_mask), mask_u8, w[SGK_CL_W_W1], p->ldp, w[SGK_CL_W_B1],
                                     w[SGK_CL_W_W2], p->ldh, w[SGK_CL_W_B2], ws, ctx0, p->ldc, p->N, p->D, p->H, p->P,
                                     p->tq, p->tqp, p->tk, p->qc, (cl_int)p->groups_q, p->scale, p->ks,
                                     (cl_long)(p->part_offset / sizeof(float)), rows,
                                     lse_on && p->ks == 1 ? lse : ws, lse_on && p->ks == 1,
                                     p->smem_attn * sizeof(float)),
                    p->groups_attn, 1);
    if (st == SGK_OK && p->ks > 1) {
        st = sgk_cl_order(q, in_order, c);
        if (st == SGK_OK)
            st = sgk_cl_launch(c, q, SGK_CL_K_COMBINE,
                        sgk_cl_args_combine(pr->k[SGK_CL_K_COMBINE].kernel, ws, ctx0, p->ldc,
                                            (cl_long)(p->part_offset / sizeof(float)), p->ks, rows, p->D, p->H,
                                            p->rt, lse_on ? lse : ws, lse_on, p->N, sizeof(float)),
                        p->groups_norm, 1);
    }
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK && a->out != NULL)
        st = sgk_cl_launch(c, q, SGK_CL_K_PROJ,
                    sgk_cl_args_proj(pr->k[SGK_CL_K_PROJ].kernel, ws, ctx0, p->ldc, w[SGK_CL_W_WO], p->ldo, 1,
                                     mem(a->nodes), mem(a->out), 0, p->D, rows, p->D, p->D, p->mt, p->nt,
                                     sizeof(float)),
                    p->groups_rows, p->groups_out);
    return st;
}

/* n elements of src into dst by widen16 (or narrow16): float <-> bf16 or
 * f16 as dtype says. Called with the context's lock held. */
sgk_status sgk_cl_convert(const sgk_cl_ctx *c, int which, sgk_dtype dtype, cl_mem src, cl_mem dst, size_t n,
                          cl_command_queue q)
{
    if (n == 0)
        return SGK_OK;
    const sgk_cl_kernel *k = &c->prog.k[which];
    const char *name = which == SGK_CL_K_WIDEN ? "widen16" : "narrow16";
    /* elements a group: one a work-item (a work-item's elements are a
     * chain of load, store, load, one memory latency each), or enough that
     * the groups fit the launch */
    size_t per = k->local;
    if ((n + per - 1) / per > (size_t)k->max_groups)
        per = (n + (size_t)k->max_groups - 1) / (size_t)k->max_groups;
    if (per > INT_MAX)
        return sgk_cl_host->set_error(SGK_ERR_UNSUPPORTED,
                                      "opencl: %zu elements are more than %s takes in one launch on "
                                      "device \"%s\"",
                                      n, name, c->info.label);
    const cl_int kind = dtype == SGK_DTYPE_F16;
    cl_int err = which == SGK_CL_K_WIDEN
                     ? sgk_cl_args_widen16(k->kernel, src, dst, (cl_long)n, kind, (cl_int)per, sizeof(float))
                     : sgk_cl_args_narrow16(k->kernel, src, dst, (cl_long)n, kind, (cl_int)per, sizeof(float));
    if (err != CL_SUCCESS)
        return launch_failed("clSetKernelArg", err, name, c);
    const size_t global = (n + per - 1) / per * k->local;
    err = clEnqueueNDRangeKernel(q, k->kernel, 1, NULL, &global, &k->local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return launch_failed("clEnqueueNDRangeKernel", err, name, c);
    return SGK_OK;
}


/* A 16-bit call: nodes widened into the workspace, the float kernels (which
 * widen the pair features as they stage them), out narrowed from it. Called
 * with the context's lock held. */
sgk_status sgk_cl_enqueue16(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a, cl_command_queue q,
                            int in_order, cl_mem lse)
{
    const sgk_cl_ctx *c = l->ctx;
    const size_t nd = (size_t)p->B * (size_t)p->N * (size_t)l->D;
    cl_mem wn = NULL, wo = NULL;
    sgk_status st = sgk_cl_sub_buffer(c, a->workspace, p->wide_nodes, nd * sizeof(float), &wn);
    if (st == SGK_OK)
        st = sgk_cl_sub_buffer(c, a->workspace, p->wide_out, nd * sizeof(float), &wo);
    if (st == SGK_OK)
        st = sgk_cl_convert(c, SGK_CL_K_WIDEN, l->dtype, mem(a->nodes), wn, nd, q);
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK) {
        sgk_fwd f = *a;
        f.nodes = wn;
        f.out = wo;
        st = enqueue(l, p, &f, q, in_order, lse);
    }
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK)
        st = sgk_cl_convert(c, SGK_CL_K_NARROW, l->dtype, wo, mem(a->out), nd, q);
    /* enqueued work keeps the sub-buffers alive until it is done */
    if (wn)
        clReleaseMemObject(wn);
    if (wo)
        clReleaseMemObject(wo);
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
    st = l->dtype == SGK_DTYPE_F32 ? enqueue(l, &p, a, q, in_order, NULL)
                                   : sgk_cl_enqueue16(l, &p, a, q, in_order, NULL);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- new weights ---------------------------------------------------------- */

sgk_status sgk_cl_set_weights(void *blayer, const sgk_layer_desc *desc16)
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
    sgk_layer_desc fdesc;
    float *wide;
    if (sgk_widen_desc(desc16, &fdesc, &wide, host()->alloc_should_fail) != 0) {
        free(packed);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "opencl: cannot allocate the host memory to widen the weights to float");
    }
    sgk_gen_pack(&fdesc, &l->off, packed);
    free(wide);
    /* Blocking: the copy is done when the call returns. */
    cl_int err = clEnqueueWriteBuffer(c->queue, l->block, CL_TRUE, 0, bytes, packed, 0, NULL, NULL);
    free(packed);
    if (err != CL_SUCCESS) {
        char where[320];
        snprintf(where, sizeof where, "writing the layer's weights on device \"%s\"", c->info.label);
        return sgk_cl_fail("clEnqueueWriteBuffer", err, where);
    }
    l->eps = fdesc.eps;
    return SGK_OK;
}

/* The sources into the stage (16-bit ones widened into a sub-buffer of it),
 * then the repack kernel over the map's runs. Called with the context's
 * lock held. */
static sgk_status repack_on(const sgk_cl_layer *l, const void *const src[SGK_SRC_COUNT],
                            const size_t count[SGK_SRC_COUNT], cl_command_queue q, int in_order)
{
    const sgk_cl_ctx *c = l->ctx;
    cl_int err = CL_SUCCESS;
    sgk_status st = SGK_OK;
    for (int s = 0; s < SGK_SRC_COUNT && st == SGK_OK && count[s] > 0; s++) {
        if (l->dtype == SGK_DTYPE_F32) {
            err = clEnqueueCopyBuffer(q, mem(src[s]), l->stage, 0, l->stage_at[s] * sizeof(float),
                                      count[s] * sizeof(float), 0, NULL, NULL);
            if (err != CL_SUCCESS)
                st = launch_failed("clEnqueueCopyBuffer", err, "(new weights)", c);
            continue;
        }
        cl_mem part = NULL;
        cl_buffer_region r = { l->stage_at[s] * sizeof(float), count[s] * sizeof(float) };
        part = clCreateSubBuffer(l->stage, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
        if (part == NULL || err != CL_SUCCESS) {
            char where[320];
            snprintf(where, sizeof where, "for new weights on device \"%s\"", c->info.label);
            return sgk_cl_fail("clCreateSubBuffer", err, where);
        }
        st = sgk_cl_convert(c, SGK_CL_K_WIDEN, l->dtype, mem(src[s]), part, count[s], q);
        clReleaseMemObject(part);
    }
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK)
        st = sgk_cl_launch(c, q, SGK_CL_K_REPACK,
                    sgk_cl_args_repack(c->prog.k[SGK_CL_K_REPACK].kernel, l->runs, l->stage, l->block,
                                       l->scales[1], l->scales[2], l->scales[3], sizeof(float)),
                    l->nruns, 1);
    return st;
}

sgk_status sgk_cl_set_weights_device(void *blayer, const sgk_layer_desc *desc, void *stream)
{
    sgk_cl_layer *l = blayer;
    sgk_cl_ctx *c = l->ctx;
    if (l->runs == NULL)
        return host()->set_error(SGK_ERR_UNSUPPORTED, "opencl: no device repack for this layer: %s",
                                 l->map_reason);
    cl_command_queue q = stream ? (cl_command_queue)stream : c->queue;
    int in_order = 1;
    sgk_status st = sgk_cl_check_queue(c, q, &in_order);
    static const char *const names[SGK_SRC_COUNT] = {
        "desc->ln_gamma", "desc->ln_beta", "desc->wq", "desc->wk", "desc->wv",
        "desc->wo", "desc->w1", "desc->b1", "desc->w2", "desc->b2",
    };
    static const char *const sizes[SGK_SRC_COUNT] = {
        "D", "D", "D*D", "D*D", "D*D", "D*D", "P*P", "P", "H*P", "H",
    };
    const void *src[SGK_SRC_COUNT];
    size_t count[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    sgk_repack_sources(l->D, l->H, l->P, count);
    for (int s = 0; s < SGK_SRC_COUNT && st == SGK_OK; s++) {
        char what[48];
        snprintf(what, sizeof what, "%s %s", sizes[s], elem_unit(l));
        st = sgk_cl_check_buffer(c, src[s], names[s], what, count[s] * elem_bytes(l), SGK_ERR_INVALID_ARGUMENT);
    }
    if (st != SGK_OK)
        return st;
    /* On an out-of-order queue, barriers keep the repack after the work
     * enqueued before, its kernel after its copies, and the work enqueued
     * after behind it. */
    pthread_mutex_lock(&c->lock);
    st = sgk_cl_order(q, in_order, c);
    if (st == SGK_OK)
        st = repack_on(l, src, count, q, in_order);
    if (st == SGK_OK)
        st = sgk_cl_order(q, in_order, c);
    pthread_mutex_unlock(&c->lock);
    return st;
}
