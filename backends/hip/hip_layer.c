/* Layers of the hip backend: weights packed into device memory (at
 * creation and when replaced), the variants of kernels/plan.h sized to the
 * context's device, and forward, which only enqueues the generated kernels
 * on the caller's stream: no allocation, no copy, no synchronisation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_internal.h"

typedef unsigned char uchar; /* the dialect's name, used by the generated prototypes */
#include "relation_hip.h"

/* In order of preference: small runs one group per batch entry, which
 * leaves most of a GPU idle at the batch sizes robots use (the same
 * generated kernels through CUDA on the H200 at the seed preset, B = 4:
 * small takes nearly twice tiled's time). */
enum { V_TILED, V_SMALL, V_COUNT };
static const char *const k_variants[V_COUNT] = { [V_TILED] = "tiled", [V_SMALL] = "small" };


static const sgk_host *host(void) { return sgk_hip_host; }

/* Floats of device memory after the weights: the runs (as floats) and the
 * stage; fills l's repack members, with runs written to *host_runs (NULL
 * where there is no repack). */
static sgk_status repack_plan(hip_layer *l, const sgk_repack_map *m, int64_t **host_runs, size_t *floats)
{
    *host_runs = NULL;
    *floats = 0;
    snprintf(l->map_reason, sizeof l->map_reason, "%s", m->reason);
    if (m->runs == NULL)
        return SGK_OK;
    const size_t at = sgk_repack_stage(l->D, l->H, l->P, 64, l->stage_at);
    l->nruns = (int64_t)m->count;
    if (l->nruns > l->ctx->k[SGK_HIP_K_REPACK].max_groups0) {
        snprintf(l->map_reason, sizeof l->map_reason,
                 "the repack map has more runs than one launch of the repack kernel has groups");
        return SGK_OK;
    }
    int64_t *runs = sgk_hip_host_alloc(m->count * 5 * sizeof(int64_t));
    if (runs == NULL)
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: cannot allocate the host memory for the repack map");
    sgk_repack_kernel_runs(m, l->stage_at, runs);
    memcpy(l->scales, m->scales, sizeof l->scales);
    *host_runs = runs;
    *floats = m->count * 10 + at; /* five int64 a run, two floats each */
    return SGK_OK;
}

/* desc with 16-bit weights widened to float (*wide to free; NULL for F32). */
static sgk_status widened(const sgk_layer_desc *desc, sgk_layer_desc *f, float **wide)
{
    if (sgk_widen_desc(desc, f, wide, host()->alloc_should_fail) != 0)
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate the host memory to widen the weights to float");
    return SGK_OK;
}

sgk_status sgk_hip_layer_create(void *bctx, const sgk_layer_desc *desc16, void **out)
{
    const sgk_hip_ctx *c = bctx;
    sgk_layer_desc fdesc;
    float *wide;
    sgk_status st0 = widened(desc16, &fdesc, &wide);
    if (st0 != SGK_OK)
        return st0;
    const sgk_layer_desc *desc = &fdesc;
    hip_layer *l = sgk_hip_host_alloc(sizeof *l);
    if (l == NULL) {
        free(wide);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: cannot allocate the layer");
    }
    l->ctx = c;
    l->dtype = desc16->dtype;
    l->D = desc->dim;
    l->H = desc->heads;
    l->P = desc->pair_dim;
    l->eps = desc->eps;
    l->off = sgk_gen_layout(l->D, l->H, l->P, SGK_GEN_PAD, 64);
    const size_t bytes = l->off.total * sizeof(float);
    float *packed = sgk_hip_host_alloc(bytes);
    if (packed == NULL) {
        free(l);
        free(wide);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate %zu bytes of host memory to pack the weights",
                                 bytes);
    }
    sgk_gen_pack(desc, &l->off, packed);
    sgk_repack_map map;
    const int mapped = sgk_repack_map_build(desc, sgk_gen_pack_fn, &l->off, l->off.total, packed,
                                            host()->alloc_should_fail, &map);
    free(wide);
    if (mapped != 0) {
        free(packed);
        free(l);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate the host memory to map the packed weights");
    }
    int64_t *runs = NULL;
    size_t extra = 0;
    sgk_status st = repack_plan(l, &map, &runs, &extra);
    sgk_repack_map_free(&map);

    char where[400];
    snprintf(where, sizeof where, " for %zu bytes of packed weights on device %d \"%s\"",
             bytes + extra * sizeof(float), c->device, c->label);
    sgk_hip_guard g;
    if (st == SGK_OK)
        st = sgk_hip_enter(c->device, &g);
    if (st == SGK_OK) {
        void *dev = NULL;
        hipError_t err = hipSuccess;
        if (host()->alloc_should_fail())
            st = host()->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: out of memory%s", where);
        else if ((err = hipMalloc(&dev, bytes + extra * sizeof(float))) != hipSuccess)
            st = sgk_hip_fail(sgk_hip_status_of(err), "hipMalloc", err, where);
        else if ((err = hipMemcpy(dev, packed, bytes, hipMemcpyHostToDevice)) != hipSuccess ||
                 (runs && (err = hipMemcpy((float *)dev + l->off.total, runs,
                                           (size_t)l->nruns * 5 * sizeof(int64_t),
                                           hipMemcpyHostToDevice)) != hipSuccess)) {
            st = sgk_hip_fail(SGK_ERR_BACKEND, "hipMemcpy", err, where);
            (void)hipFree(dev);
        } else {
            l->w = dev;
            if (runs) {
                l->runs = (const int64_t *)(l->w + l->off.total);
                l->stage = l->w + l->off.total + (size_t)l->nruns * 10;
            }
        }
        sgk_hip_leave(&g);
    }
    free(runs);
    free(packed);
    if (st != SGK_OK) {
        free(l);
        return st;
    }
    *out = l;
    return SGK_OK;
}

sgk_status sgk_hip_set_weights(void *bl, const sgk_layer_desc *desc16)
{
    hip_layer *l = bl;
    const sgk_hip_ctx *c = l->ctx;
    const size_t bytes = l->off.total * sizeof(float);
    float *packed = sgk_hip_host_alloc(bytes);
    if (packed == NULL)
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate %zu bytes of host memory to pack the "
                                 "weights",
                                 bytes);
    sgk_layer_desc desc;
    float *wide;
    sgk_status st0 = widened(desc16, &desc, &wide);
    if (st0 != SGK_OK) {
        free(packed);
        return st0;
    }
    sgk_gen_pack(&desc, &l->off, packed);
    free(wide);
    char where[400];
    snprintf(where, sizeof where, " writing %zu bytes of packed weights on device %d \"%s\"",
             bytes, c->device, c->label);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st == SGK_OK) {
        /* hipMemcpy from pageable memory may return before the copy lands;
         * the null stream's synchronisation waits for it. */
        hipError_t err = hipMemcpy(l->w, packed, bytes, hipMemcpyHostToDevice);
        if (err == hipSuccess)
            err = hipStreamSynchronize(NULL);
        if (err != hipSuccess)
            st = sgk_hip_fail(SGK_ERR_BACKEND, "hipMemcpy", err, where);
        sgk_hip_leave(&g);
    }
    free(packed);
    if (st == SGK_OK)
        l->eps = desc.eps;
    return st;
}

/* n elements converted on stream s between float and the layer's 16-bit
 * dtype: widen (16-bit src, float dst) or narrow (float src, 16-bit dst). */
hipError_t sgk_hip_convert(const hip_layer *l, int widen, const void *src, void *dst, size_t n, hipStream_t s)
{
    if (n == 0)
        return hipSuccess;
    const sgk_hip_kernel *k = &l->ctx->k[widen ? SGK_HIP_K_WIDEN : SGK_HIP_K_NARROW];
    /* one element a work-item where the groups allow: a work-item's
     * elements are a chain of load, store, load (src and dst may alias),
     * one memory latency each */
    int64_t per = (int64_t)k->threads;
    if (((int64_t)n + per - 1) / per > k->max_groups0)
        per = ((int64_t)n + k->max_groups0 - 1) / k->max_groups0;
    if (per > INT32_MAX)
        return hipErrorInvalidValue;
    const int groups = (int)(((int64_t)n + per - 1) / per), kind = l->dtype == SGK_DTYPE_F16;
    return widen ? sgk_launch_widen16(groups, 1, k->threads, sizeof(float), s, src, dst, (sgk_off)n, kind, (int)per)
                 : sgk_launch_narrow16(groups, 1, k->threads, sizeof(float), s, src, dst, (sgk_off)n, kind, (int)per);
}

/* The sources into the stage, then the repack kernel, all on stream. */
sgk_status sgk_hip_set_weights_device(void *bl, const sgk_layer_desc *desc, void *stream)
{
    hip_layer *l = bl;
    const sgk_hip_ctx *c = l->ctx;
    if (l->runs == NULL)
        return host()->set_error(SGK_ERR_UNSUPPORTED, "hip: no device repack for this layer: %s",
                                 l->map_reason);
    const void *src[SGK_SRC_COUNT];
    size_t count[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    sgk_repack_sources(l->D, l->H, l->P, count);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st != SGK_OK)
        return st;
    hipError_t err = hipSuccess;
    const char *call = "hipMemcpyAsync";
    for (int s = 0; s < SGK_SRC_COUNT && err == hipSuccess; s++)
        err = l->dtype == SGK_DTYPE_F32
                  ? hipMemcpyAsync(l->stage + l->stage_at[s], src[s], count[s] * sizeof(float),
                                   hipMemcpyDeviceToDevice, (hipStream_t)stream)
                  : sgk_hip_convert(l, 1, src[s], l->stage + l->stage_at[s], count[s], (hipStream_t)stream);
    if (err == hipSuccess) {
        call = "launching the repack kernel";
        err = sgk_launch_repack((int)l->nruns, 1, c->k[SGK_HIP_K_REPACK].threads, sizeof(float),
                                (hipStream_t)stream, (const sgk_off *)l->runs, l->stage, l->w, l->scales[1], l->scales[2],
                                l->scales[3]);
    }
    sgk_hip_leave(&g);
    if (err != hipSuccess) {
        char where[400];
        snprintf(where, sizeof where, " writing new weights on device %d \"%s\"", c->device, c->label);
        return sgk_hip_fail(SGK_ERR_BACKEND, call, err, where);
    }
    return SGK_OK;
}

void sgk_hip_layer_destroy(void *bl)
{
    hip_layer *l = bl;
    if (l == NULL)
        return;
    sgk_hip_guard g;
    if (sgk_hip_enter(l->ctx->device, &g) == SGK_OK) {
        (void)hipFree(l->w);
        sgk_hip_leave(&g);
    }
    free(l);
}

int sgk_hip_variant_count(void *bl)
{
    (void)bl;
    return V_COUNT;
}

const char *sgk_hip_variant_name(void *bl, int v)
{
    (void)bl;
    return k_variants[v];
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The tiled variant's kernels share one plan, so it gets the tightest of
 * their limits. Tiles as the opencl backend's: 64 x 64 projection tiles,
 * 16 queries against 32 keys, shrunk to the device's shared memory. */
static int plan_for(const hip_layer *l, int v, int64_t B, int64_t N, sgk_plan *p)
{
    const sgk_hip_kernel *k = l->ctx->k;
    /* attn groups: two a compute unit, the keys split where query tiles are fewer */
    sgk_limits lim = { 0, 0, SGK_GEN_PAD, 256, 64, 64, 16, 32, l->dtype != SGK_DTYPE_F32, 2 * (int64_t)l->ctx->units };
    if (v == V_SMALL) {
        const sgk_hip_kernel *f = &k[SGK_HIP_K_FUSED];
        lim.local_bytes = f->local_bytes;
        lim.max_groups = f->max_groups0;
        return sgk_plan_make(SGK_PLAN_SMALL, B, N, l->D, l->H, l->P, &lim, p);
    }
    const sgk_hip_kernel *nm = &k[SGK_HIP_K_NORM], *pj = &k[SGK_HIP_K_PROJ], *at = &k[SGK_HIP_K_ATTN];
    lim.local_bytes = nm->local_bytes < at->local_bytes ? nm->local_bytes : at->local_bytes;
    lim.max_groups = min64(min64(nm->max_groups0, pj->max_groups0),
                           min64(at->max_groups0, k[SGK_HIP_K_COMBINE].max_groups0));
    return sgk_plan_make(SGK_PLAN_TILED, B, N, l->D, l->H, l->P, &lim, p);
}

int sgk_hip_variant_supports(void *bl, int v, int64_t B, int64_t N, sgk_backend_plan *out)
{
    sgk_plan p;
    if (!plan_for(bl, v, B, N, &p))
        return 0;
    sgk_plan_store(&p, out);
    return 1;
}

size_t sgk_hip_workspace_size(void *bl, int v, int64_t B, int64_t N,
                              const sgk_backend_plan *plan)
{
    (void)bl;
    (void)v;
    (void)B;
    (void)N;
    sgk_plan p;
    sgk_plan_load(plan, &p);
    return p.workspace_bytes;
}

sgk_status sgk_hip_launch_failed(const hip_layer *l, const char *kernel, hipError_t err, int ng0,
                                int ng1, const sgk_hip_kernel *k, size_t smem_floats)
{
    char where[512];
    snprintf(where, sizeof where,
             " for kernel %s (%d x %d groups of %d work-items, %zu bytes of shared memory) on "
             "device %d \"%s\"",
             kernel, ng0, ng1, k->threads, smem_floats * sizeof(float), l->ctx->device,
             l->ctx->label);
    return sgk_hip_fail(SGK_ERR_BACKEND, "launching a kernel", err, where);
}

/* Each launcher returns hipGetLastError() of its launch. The tiled path's
 * kernels follow each other on the same stream, so each sees what the one
 * before wrote. */
static sgk_status enqueue(const hip_layer *l, const sgk_plan *p, const sgk_fwd *a, int pair_dt)
{
    const sgk_hip_kernel *k = l->ctx->k;
    hipStream_t s = (hipStream_t)a->stream;
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    const int mask_u8 = a->mask_type == SGK_MASK_U8;
    const uchar *mask = a->edge_mask;
    hipError_t err;
    if (p->kind == SGK_PLAN_SMALL) {
        const sgk_hip_kernel *kf = &k[SGK_HIP_K_FUSED];
        err = sgk_launch_fused((int)p->B, 1, kf->threads, p->smem_fused * sizeof(float), s, a->nodes,
                               a->pair_feats, pair_dt, mask, mask_u8, w + o.gamma, w + o.beta, w + o.wqkv, w + o.w1,
                               p->ldp, w + o.b1, w + o.w2, p->ldh, w + o.b2, w + o.wo, p->ldo, a->out, p->N,
                               p->D, p->H, p->P, p->ldk, p->ldc, p->tq, p->tqp, p->tk, p->qc, l->eps, p->scale);
        if (err != hipSuccess)
            return sgk_hip_launch_failed(l, "fused", err, (int)p->B, 1, kf, p->smem_fused);
        return SGK_OK;
    }
    /* the LayerNorm'd rows in the context's place, until attn writes it */
    return sgk_hip_tiled(l, p, a, pair_dt, (sgk_off)(p->ctx_offset / sizeof(float)), NULL);
}

sgk_status sgk_hip_tiled(const hip_layer *l, const sgk_plan *p, const sgk_fwd *a, int pair_dt, int64_t xn0,
                         float *lse)
{
    const sgk_hip_kernel *k = l->ctx->k;
    hipStream_t s = (hipStream_t)a->stream;
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    const int mask_u8 = a->mask_type == SGK_MASK_U8;
    const uchar *mask = a->edge_mask;
    const sgk_hip_kernel *kn = &k[SGK_HIP_K_NORM], *kp = &k[SGK_HIP_K_PROJ], *ka = &k[SGK_HIP_K_ATTN];
    float *ws = a->workspace;
    const sgk_off ctx0 = (sgk_off)(p->ctx_offset / sizeof(float));
    const int rows = (int)(p->B * p->N), lse_on = lse != NULL;
    hipError_t err = sgk_launch_norm((int)p->groups_norm, 1, kn->threads, p->smem_norm * sizeof(float), s, a->nodes,
                                     w + o.gamma, w + o.beta, l->eps, ws, xn0, p->ldc, rows, p->D, p->rt);
    if (err != hipSuccess)
        return sgk_hip_launch_failed(l, "norm", err, (int)p->groups_norm, 1, kn, p->smem_norm);
    err = sgk_launch_proj((int)p->groups_rows, (int)p->groups_qkv, kp->threads, sizeof(float), s, ws, xn0, p->ldc,
                          w + o.wqkv, p->ldk, 0, ws, ws, 0, p->ldk, rows, p->D, p->ldk, p->mt, p->nt);
    if (err != hipSuccess)
        return sgk_hip_launch_failed(l, "proj", err, (int)p->groups_rows, (int)p->groups_qkv, kp, 1);
    err = sgk_launch_attn((int)p->groups_attn, 1, ka->threads, p->smem_attn * sizeof(float), s, ws, p->ldk,
                          a->pair_feats, pair_dt, mask, mask_u8, w + o.w1, p->ldp, w + o.b1, w + o.w2, p->ldh, w + o.b2,
                          ws, ctx0, p->ldc, p->N, p->D, p->H, p->P, p->tq, p->tqp, p->tk, p->qc, (int)p->groups_q,
                          p->scale, p->ks, (sgk_off)(p->part_offset / sizeof(float)), rows,
                          lse_on && p->ks == 1 ? lse : ws, lse_on && p->ks == 1);
    if (err != hipSuccess)
        return sgk_hip_launch_failed(l, "attn", err, (int)p->groups_attn, 1, ka, p->smem_attn);
    if (p->ks > 1) {
        const sgk_hip_kernel *kc = &k[SGK_HIP_K_COMBINE];
        err = sgk_launch_combine((int)p->groups_norm, 1, kc->threads, sizeof(float), s, ws, ctx0, p->ldc,
                                 (sgk_off)(p->part_offset / sizeof(float)), p->ks, rows, p->D, p->H, p->rt,
                                 lse_on ? lse : ws, lse_on, p->N);
        if (err != hipSuccess)
            return sgk_hip_launch_failed(l, "combine", err, (int)p->groups_norm, 1, kc, 1);
    }
    if (a->out == NULL)
        return SGK_OK;
    err = sgk_launch_proj((int)p->groups_rows, (int)p->groups_out, kp->threads, sizeof(float), s, ws, ctx0, p->ldc,
                          w + o.wo, p->ldo, 1, a->nodes, a->out, 0, p->D, rows, p->D, p->D, p->mt, p->nt);
    if (err != hipSuccess)
        return sgk_hip_launch_failed(l, "proj", err, (int)p->groups_rows, (int)p->groups_out, kp, 1);
    return SGK_OK;
}

sgk_status sgk_hip_forward(void *bl, int v, const sgk_backend_plan *plan, const sgk_fwd *a)
{
    (void)v;
    const hip_layer *l = bl;
    sgk_plan p;
    sgk_plan_load(plan, &p);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(l->ctx->device, &g);
    if (st != SGK_OK)
        return st;
    if (l->dtype == SGK_DTYPE_F32) {
        st = enqueue(l, &p, a, SGK_DTYPE_F32);
        sgk_hip_leave(&g);
        return st;
    }
    /* A 16-bit call: nodes widened into the workspace, the float kernels,
     * out narrowed from the workspace. */
    const size_t n = (size_t)p.B * (size_t)p.N * (size_t)l->D;
    sgk_fwd f = *a;
    f.nodes = (char *)a->workspace + p.wide_nodes;
    f.out = (char *)a->workspace + p.wide_out;
    hipError_t err = sgk_hip_convert(l, 1, a->nodes, (void *)f.nodes, n, (hipStream_t)a->stream);
    if (err == hipSuccess) {
        st = enqueue(l, &p, &f, (int)l->dtype);
        if (st == SGK_OK)
            err = sgk_hip_convert(l, 0, f.out, a->out, n, (hipStream_t)a->stream);
    }
    sgk_hip_leave(&g);
    if (err != hipSuccess) {
        char where[400];
        snprintf(where, sizeof where, " converting 16-bit values on device %d \"%s\"", l->ctx->device,
                 l->ctx->label);
        return sgk_hip_fail(SGK_ERR_BACKEND, "launching a kernel", err, where);
    }
    return st;
}
