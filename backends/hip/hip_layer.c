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

typedef struct hip_layer {
    const sgk_hip_ctx *ctx;
    int64_t D, H, P;
    float eps;
    sgk_packed off;
    float *w; /* device memory: every weight, packed as plan.h lays them out */
    /* sgk_pack_weights' map, run as device copies by set_weights_device;
     * no runs (map.reason says why) where copies cannot run it */
    sgk_repack_map map;
} hip_layer;

static const sgk_host *host(void) { return sgk_hip_host; }

sgk_status sgk_hip_layer_create(void *bctx, const sgk_layer_desc *desc, void **out)
{
    const sgk_hip_ctx *c = bctx;
    hip_layer *l = sgk_hip_host_alloc(sizeof *l);
    if (l == NULL)
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: cannot allocate the layer");
    l->ctx = c;
    l->D = desc->dim;
    l->H = desc->heads;
    l->P = desc->pair_dim;
    l->eps = desc->eps;
    l->off = sgk_packed_layout(l->D, l->H, l->P);
    const size_t bytes = l->off.total * sizeof(float);
    float *packed = sgk_hip_host_alloc(bytes);
    if (packed == NULL) {
        free(l);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate %zu bytes of host memory to pack the weights",
                                 bytes);
    }
    sgk_pack_weights(desc, packed);
    if (sgk_repack_map_build(desc, sgk_pack_weights_fn, NULL, l->off.total, packed,
                             host()->alloc_should_fail, &l->map) != 0) {
        free(packed);
        free(l);
        return host()->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "hip: cannot allocate the host memory to map the packed weights");
    }
    if (l->map.runs && !sgk_repack_copies_only(&l->map)) {
        sgk_repack_map_free(&l->map);
        snprintf(l->map.reason, sizeof l->map.reason,
                 "the packed layout is not plain copies of the weights, and hip repacks by "
                 "copying");
    }

    char where[400];
    snprintf(where, sizeof where, " for %zu bytes of packed weights on device %d \"%s\"", bytes,
             c->device, c->label);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st == SGK_OK) {
        void *dev = NULL;
        hipError_t err = hipSuccess;
        if (host()->alloc_should_fail())
            st = host()->set_error(SGK_ERR_OUT_OF_MEMORY, "hip: out of memory%s", where);
        else if ((err = hipMalloc(&dev, bytes)) != hipSuccess)
            st = sgk_hip_fail(sgk_hip_status_of(err), "hipMalloc", err, where);
        else if ((err = hipMemcpy(dev, packed, bytes, hipMemcpyHostToDevice)) != hipSuccess) {
            st = sgk_hip_fail(SGK_ERR_BACKEND, "hipMemcpy", err, where);
            (void)hipFree(dev);
        } else {
            l->w = dev;
        }
        sgk_hip_leave(&g);
    }
    free(packed);
    if (st != SGK_OK) {
        sgk_repack_map_free(&l->map);
        free(l);
        return st;
    }
    *out = l;
    return SGK_OK;
}

sgk_status sgk_hip_set_weights(void *bl, const sgk_layer_desc *desc)
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
    sgk_pack_weights(desc, packed);
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
        l->eps = desc->eps;
    return st;
}

sgk_status sgk_hip_set_weights_device(void *bl, const sgk_layer_desc *desc, void *stream)
{
    hip_layer *l = bl;
    const sgk_hip_ctx *c = l->ctx;
    if (l->map.runs == NULL)
        return host()->set_error(SGK_ERR_UNSUPPORTED, "hip: no device repack for this layer: %s",
                                 l->map.reason);
    const void *src[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    sgk_hip_guard g;
    sgk_status st = sgk_hip_enter(c->device, &g);
    if (st != SGK_OK)
        return st;
    hipError_t err = hipSuccess;
    for (size_t r = 0; r < l->map.count && err == hipSuccess; r++) {
        const sgk_repack_run *u = &l->map.runs[r];
        err = hipMemcpyAsync(l->w + u->dst, (const float *)src[u->seg] + u->src,
                             (size_t)u->len * sizeof(float), hipMemcpyDeviceToDevice,
                             (hipStream_t)stream);
    }
    sgk_hip_leave(&g);
    if (err != hipSuccess) {
        char where[400];
        snprintf(where, sizeof where, " copying new weights on device %d \"%s\"", c->device,
                 c->label);
        return sgk_hip_fail(SGK_ERR_BACKEND, "hipMemcpyAsync", err, where);
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
    sgk_repack_map_free(&l->map);
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

/* The tiled variant's two kernels share one plan, so it gets the tighter
 * of their limits. */
static int plan_for(const hip_layer *l, int v, int64_t B, int64_t N, sgk_plan *p)
{
    const sgk_hip_kernel *k = l->ctx->k;
    sgk_limits lim;
    if (v == V_SMALL) {
        const sgk_hip_kernel *f = &k[SGK_HIP_K_FUSED];
        lim.local_bytes = f->local_bytes;
        lim.max_groups = f->max_groups0;
        return sgk_plan_make(SGK_PLAN_SMALL, B, N, l->D, l->H, l->P, &lim, p);
    }
    const sgk_hip_kernel *ln = &k[SGK_HIP_K_LN_QKV], *at = &k[SGK_HIP_K_ATTN_TILE];
    lim.local_bytes = ln->local_bytes < at->local_bytes ? ln->local_bytes : at->local_bytes;
    lim.max_groups = min64(ln->max_groups0, at->max_groups0);
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

static sgk_status launch_failed(const hip_layer *l, const char *kernel, hipError_t err, int ng0,
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
 * second kernel follows the first on the same stream, so it sees the
 * workspace complete. */
static sgk_status enqueue(const hip_layer *l, const sgk_plan *p, const sgk_fwd *a)
{
    const sgk_hip_kernel *k = l->ctx->k;
    hipStream_t s = (hipStream_t)a->stream;
    const float *w = l->w;
    const sgk_packed o = l->off;
    const int mask_u8 = a->mask_type == SGK_MASK_U8;
    const uchar *mask = a->edge_mask;
    hipError_t err;
    if (p->kind == SGK_PLAN_SMALL) {
        const sgk_hip_kernel *kf = &k[SGK_HIP_K_FUSED];
        err = sgk_launch_fused((int)p->B, 1, kf->threads, p->smem_fused * sizeof(float), s,
                               a->nodes, a->pair_feats, mask, mask_u8, w + o.gamma, w + o.beta,
                               w + o.wqkv, w + o.w1, w + o.b1, w + o.w2, w + o.b2, w + o.wo,
                               a->out, p->N, p->D, p->H, p->P, p->tq, l->eps, p->scale);
        if (err != hipSuccess)
            return launch_failed(l, "fused", err, (int)p->B, 1, kf, p->smem_fused);
        return SGK_OK;
    }
    const sgk_hip_kernel *kl = &k[SGK_HIP_K_LN_QKV], *ka = &k[SGK_HIP_K_ATTN_TILE];
    float *qkv = a->workspace;
    err = sgk_launch_ln_qkv((int)p->groups_ln, 1, kl->threads, p->smem_ln * sizeof(float), s,
                            a->nodes, w + o.gamma, w + o.beta, w + o.wqkv, qkv,
                            (int)(p->B * p->N), p->D, p->rt, l->eps);
    if (err != hipSuccess)
        return launch_failed(l, "ln_qkv", err, (int)p->groups_ln, 1, kl, p->smem_ln);
    err = sgk_launch_attn_tile((int)p->groups_attn, 1, ka->threads,
                               p->smem_attn * sizeof(float), s, qkv, a->nodes, a->pair_feats,
                               mask, mask_u8, w + o.w1, w + o.b1, w + o.w2, w + o.b2, w + o.wo,
                               a->out, p->N, p->D, p->H, p->P, p->tq, p->tk, (int)p->groups_q,
                               p->scale);
    if (err != hipSuccess)
        return launch_failed(l, "attn_tile", err, (int)p->groups_attn, 1, ka, p->smem_attn);
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
    st = enqueue(l, &p, a);
    sgk_hip_leave(&g);
    return st;
}
