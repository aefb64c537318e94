/* The cpu backend: the generated kernels (kernels/relation.sgk, emitted as C
 * by sgkgen.py) run one group per OpenMP iteration. Built into libsgk. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "sgk_backend.h"
#include "dtype.h"
#include "plan.h"
#include "relation_c.h"

const sgk_backend_ops *sgk_cpu_backend_entry(const sgk_host *host);

static const sgk_host *g_host;

/* A group's local memory is one thread's slice of the workspace, kept
 * within a core's L2 cache: "small" holds a batch entry's Q/K/V there,
 * "tiled" a tile's scratch. Tiles: 64 x 128 projection tiles (eight
 * register rows of the AVX-512 instance, four of its column groups), 32
 * queries (the widest register row) against 64 keys. */
static const sgk_limits k_small_limits = {1u << 20, INT_MAX, SGK_GEN_PAD, 64, 64, 128, 32, 64, 0, 0};
static const sgk_limits k_tiled_limits = {512u << 10, INT_MAX, SGK_GEN_PAD, 64, 64, 128, 32, 64, 0, 0};

static const char *const k_variants[] = {"small", "tiled"};
enum { V_SMALL, V_TILED, V_COUNT };

typedef struct cpu_ctx {
    int threads;
} cpu_ctx;

typedef struct cpu_layer {
    const cpu_ctx *ctx;
    int64_t D, H, P;
    sgk_dtype dtype; /* BF16 and F16 are widened to float on load, rounded back on store */
    float eps;
    sgk_gen_packed off; /* the generated kernels' layout of w */
    float *w;
    sgk_repack_map map; /* sgk_gen_pack's map, for set_weights_device */
} cpu_layer;

static int cpu_probe(char *reason, size_t len)
{
    (void)reason;
    (void)len;
    return 1;
}

static sgk_status cpu_device_name(int device, char *buf, size_t len)
{
    (void)device;
    char line[256], name[200] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (colon && strncmp(line, "model name", 10) == 0) {
                snprintf(name, sizeof name, "%s", colon + 2);
                name[strcspn(name, "\n")] = 0;
                break;
            }
        }
        fclose(f);
    }
    /* the instruction set its kernels run with (SGK_CPU_ISA lowers it) */
    snprintf(buf, len, "%s [%s]", name, sgk_cpu_isa_name());
    return SGK_OK;
}

static void *host_alloc(size_t bytes)
{
    if (g_host->alloc_should_fail())
        return NULL;
    return malloc(bytes ? bytes : 1);
}

/* Where the packed weights, the workspace's parts and each thread's local
 * memory start: a cache line. Their rows are padded to multiples of it
 * (SGK_GEN_PAD floats), so that from an aligned start a register tile's
 * 64-byte loads and stores do not span two lines, as every one of them did
 * from malloc's 16-byte alignment or a caller's workspace. */
enum { CPU_ALIGN = 64 };

static size_t align_bytes(size_t n) { return (n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN; }

static void *host_alloc_aligned(size_t bytes)
{
    if (g_host->alloc_should_fail())
        return NULL;
    return aligned_alloc(CPU_ALIGN, align_bytes(bytes ? bytes : 1)); /* a size aligned_alloc takes */
}

/* a's workspace from its first aligned byte on: what the plans' offsets
 * count from. The workspace sizes below leave CPU_ALIGN bytes for it. */
static sgk_fwd aligned_args(const sgk_fwd *a)
{
    sgk_fwd f = *a;
    f.workspace = (void *)(((uintptr_t)a->workspace + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1));
    return f;
}

static sgk_status cpu_context_create(int device, const sgk_context_options *opt, void **out)
{
    (void)device;
    cpu_ctx *c = host_alloc(sizeof *c);
    if (!c)
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cpu: cannot allocate the context");
    int threads = opt ? opt->cpu_threads : 0;
#ifdef _OPENMP
    if (threads <= 0)
        threads = omp_get_max_threads();
#else
    threads = 1;
#endif
    c->threads = threads;
    *out = c;
    return SGK_OK;
}

static void cpu_context_destroy(void *c) { free(c); }

/* n elements of a 16-bit dtype at src as floats at dst, and back (nearest,
 * ties to even): the generated kernels every backend without 16-bit
 * arithmetic runs (kernels/relation.sgk), over threads. */
enum { CONVERT_PER = 16384 };
static void widen(sgk_dtype dtype, const void *src, float *dst, size_t n, int threads)
{
    float pool[1];
    sgk_cpu_widen16(threads, (int)((n + CONVERT_PER - 1) / CONVERT_PER), 1, pool, 0, src, dst, (sgk_off)n,
                    dtype == SGK_DTYPE_F16, CONVERT_PER);
}

static void narrow(sgk_dtype dtype, const float *src, void *dst, size_t n, int threads)
{
    float pool[1];
    sgk_cpu_narrow16(threads, (int)((n + CONVERT_PER - 1) / CONVERT_PER), 1, pool, 0, src, dst, (sgk_off)n,
                     dtype == SGK_DTYPE_F16, CONVERT_PER);
}

/* desc as an F32 descriptor (sgk_widen_desc), or the error */
static sgk_status widen_desc(const sgk_layer_desc *desc, sgk_layer_desc *f, float **store)
{
    if (sgk_widen_desc(desc, f, store, g_host->alloc_should_fail) != 0)
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cpu: cannot allocate the memory to widen the weights to float");
    return SGK_OK;
}

static sgk_status cpu_layer_create(void *bctx, const sgk_layer_desc *desc16, void **out)
{
    sgk_layer_desc fdesc;
    float *wide;
    sgk_status st = widen_desc(desc16, &fdesc, &wide);
    if (st != SGK_OK)
        return st;
    const sgk_layer_desc *desc = &fdesc;
    cpu_layer *l = host_alloc(sizeof *l);
    if (!l) {
        free(wide);
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cpu: cannot allocate the layer");
    }
    l->dtype = desc16->dtype;
    l->ctx = bctx;
    l->D = desc->dim;
    l->H = desc->heads;
    l->P = desc->pair_dim;
    l->eps = desc->eps;
    l->off = sgk_gen_layout(l->D, l->H, l->P, SGK_GEN_PAD, 16);
    l->off.sw = SGK_GEN_PAD; /* the projections' weights in strips (plan.h) */
    const size_t total = l->off.total;
    l->w = host_alloc_aligned(total * sizeof(float));
    if (!l->w) {
        const size_t bytes = total * sizeof(float);
        free(l);
        free(wide);
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes of packed weights",
                                 bytes);
    }
    sgk_gen_pack(desc, &l->off, l->w);
    const int mapped = sgk_repack_map_build(desc, sgk_gen_pack_fn, &l->off, total, l->w,
                                            g_host->alloc_should_fail, &l->map) == 0;
    free(wide);
    if (!mapped) {
        free(l->w);
        free(l);
        return g_host->set_error(SGK_ERR_OUT_OF_MEMORY,
                                 "cpu: cannot allocate the memory to map the packed weights");
    }
    *out = l;
    return SGK_OK;
}

static void cpu_layer_destroy(void *bl)
{
    cpu_layer *l = bl;
    if (l) {
        free(l->w);
        sgk_repack_map_free(&l->map);
    }
    free(l);
}

/* The packed weights are read only by forward calls, which the caller
 * keeps from running meanwhile (sgk.h), so they are written in place. */
static sgk_status cpu_set_weights(void *bl, const sgk_layer_desc *desc16)
{
    cpu_layer *l = bl;
    sgk_layer_desc desc;
    float *wide;
    sgk_status st = widen_desc(desc16, &desc, &wide);
    if (st != SGK_OK)
        return st;
    sgk_gen_pack(&desc, &l->off, l->w);
    l->eps = desc.eps;
    free(wide);
    return SGK_OK;
}

static sgk_status cpu_set_weights_device(void *bl, const sgk_layer_desc *desc16, void *stream)
{
    (void)stream;
    cpu_layer *l = bl;
    if (l->map.runs == NULL)
        return g_host->set_error(SGK_ERR_UNSUPPORTED, "cpu: no repack map for this layer: %s",
                                 l->map.reason);
    sgk_layer_desc desc;
    float *wide;
    sgk_status st = widen_desc(desc16, &desc, &wide);
    if (st != SGK_OK)
        return st;
    sgk_repack_apply(&l->map, &desc, l->w);
    free(wide);
    return SGK_OK;
}

static int cpu_variant_count(void *bl) { (void)bl; return V_COUNT; }
static const char *cpu_variant_name(void *bl, int v) { (void)bl; return k_variants[v]; }

/* Groups of a projection of rows x cols in tiles of mt x nt. */
static int64_t proj_groups(int64_t rows, int64_t cols, int mt, int nt)
{
    const int64_t m = rows < mt ? rows : mt;
    return (rows + m - 1) / m * ((cols + nt - 1) / nt);
}

/* The tiled path's limits for (B, N) at the context's thread count. */
static sgk_limits tiled_limits(const cpu_layer *l, int64_t B, int64_t N)
{
    sgk_limits lim = k_tiled_limits;
    lim.wide16 = l->dtype != SGK_DTYPE_F32;
    /* query tiles small enough that attn has two groups a thread, down to
     * 8 queries: few batch entries of a hundred nodes would otherwise leave
     * most of sixteen threads idle */
    const int64_t want = 2 * (int64_t)l->ctx->threads;
    while (lim.tq > 8 && B * ((N + lim.tq - 1) / lim.tq) < want)
        lim.tq /= 2;
    lim.min_groups = want; /* and then the keys split */
    /* and projection tiles small enough that the output projection (D
     * columns, the narrower of the two) has two groups a thread: columns
     * down to one AVX-512 register tile's 32, then rows down to its 8 */
    const int64_t rows = B * N;
    while (lim.nt > 32 && proj_groups(rows, l->D, lim.mt, lim.nt) < want)
        lim.nt /= 2;
    while (lim.mt > 8 && proj_groups(rows, l->D, lim.mt, lim.nt) < want)
        lim.mt /= 2;
    return lim;
}

static int plan_for(const cpu_layer *l, int v, int64_t B, int64_t N, sgk_plan *p)
{
    if (v == V_SMALL) {
        sgk_limits lim = k_small_limits;
        lim.wide16 = l->dtype != SGK_DTYPE_F32;
        return sgk_plan_make(SGK_PLAN_SMALL, B, N, l->D, l->H, l->P, &lim, p);
    }
    const sgk_limits lim = tiled_limits(l, B, N);
    return sgk_plan_make(SGK_PLAN_TILED, B, N, l->D, l->H, l->P, &lim, p);
}

static int cpu_variant_supports(void *bl, int v, int64_t B, int64_t N, sgk_backend_plan *out)
{
    sgk_plan p;
    if (!plan_for(bl, v, B, N, &p))
        return 0;
    sgk_plan_store(&p, out);
    return 1;
}

/* small, first in the table, runs a batch entry a group with no workspace
 * and one parallel loop instead of four, and wins where every thread gets
 * two or more entries; with fewer it leaves threads idle, and tiled, which
 * splits every pass over rows and query tiles, is the faster. */
static int cpu_variant_prefers(void *bl, int v, int64_t B, int64_t N, const sgk_backend_plan *plan)
{
    (void)plan;
    const cpu_layer *l = bl;
    sgk_plan p;
    return v != V_SMALL || B >= 2 * (int64_t)l->ctx->threads || !plan_for(l, V_TILED, B, N, &p);
}

/* Floats of per-thread local memory, after the plan's workspace. */
static size_t pool_floats(const sgk_plan *p)
{
    const size_t n = p->kind == SGK_PLAN_SMALL ? p->smem_fused
                     : p->smem_norm > p->smem_attn ? p->smem_norm : p->smem_attn;
    return align_bytes(n * sizeof(float)) / sizeof(float); /* each thread's slice aligned */
}

static size_t cpu_workspace_size(void *bl, int v, int64_t B, int64_t N,
                                 const sgk_backend_plan *plan)
{
    (void)v;
    (void)B;
    (void)N;
    const cpu_layer *l = bl;
    sgk_plan p;
    sgk_plan_load(plan, &p);
    return CPU_ALIGN + align_bytes(p.workspace_bytes) + (size_t)l->ctx->threads * pool_floats(&p) * sizeof(float);
}

static sgk_status forward_f32(const cpu_layer *l, const sgk_backend_plan *plan, const sgk_fwd *a);

/* 16-bit calls widen nodes into the workspace (where the plan puts them),
 * run the float path on them (which widens the pair features as it stages
 * them), and round its out back: SPEC's fp32 accumulation, with every
 * input exactly the caller's value. */
static sgk_status cpu_forward(void *bl, int v, const sgk_backend_plan *plan, const sgk_fwd *args)
{
    (void)v;
    const cpu_layer *l = bl;
    const sgk_fwd aligned = aligned_args(args), *a = &aligned;
    if (l->dtype == SGK_DTYPE_F32)
        return forward_f32(l, plan, a);
    sgk_plan p;
    sgk_plan_load(plan, &p);
    const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D;
    float *nodes = (float *)((char *)a->workspace + p.wide_nodes);
    float *out = (float *)((char *)a->workspace + p.wide_out);
    sgk_fwd f = *a;
    f.nodes = nodes;
    f.out = out;
    widen(l->dtype, a->nodes, nodes, nd, l->ctx->threads);
    sgk_status st = forward_f32(l, plan, &f);
    narrow(l->dtype, out, a->out, nd, l->ctx->threads);
    return st;
}

/* The tiled path up to the context: LayerNorm'd rows into ws from float
 * xn0 on (the forward puts them where the context will be), Q/K/V, the
 * attention (and the combine of split keys) into the context; each (head,
 * row)'s log-sum-exp into lse where it is not NULL. */
static void tiled_context(const cpu_layer *l, const sgk_plan *p, const sgk_fwd *a, float *pool_mem, size_t pool,
                          sgk_off xn0, float *lse)
{
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    const int threads = l->ctx->threads;
    float *ws = a->workspace;
    const sgk_off ctx0 = (sgk_off)(p->ctx_offset / sizeof(float)), part0 = (sgk_off)(p->part_offset / sizeof(float));
    const int rows = (int)(p->B * p->N), lse_on = lse != NULL;
    sgk_cpu_norm(threads, (int)p->groups_norm, 1, pool_mem, pool, a->nodes, w + o.gamma, w + o.beta, l->eps, ws, xn0,
                 p->ldc, rows, p->D, p->rt);
    sgk_cpu_proj(threads, (int)p->groups_rows, (int)p->groups_qkv, pool_mem, pool, ws, xn0, p->ldc, w + o.wqkv,
                 sgk_gen_ldw(&o, p->ldk), 0, ws, ws, 0, p->ldk, rows, p->D, 3 * p->D, p->mt, p->nt);
    sgk_cpu_attn(threads, (int)p->groups_attn, 1, pool_mem, pool, ws, p->ldk, a->pair_feats, (int)l->dtype,
                 a->edge_mask, a->mask_type == SGK_MASK_U8, w + o.w1, p->ldp, w + o.b1, w + o.w2, p->ldh, w + o.b2,
                 ws, ctx0, p->ldc, p->N, p->D, p->H, p->P, p->tq, p->tqp, p->tk, p->qc, (int)p->groups_q, p->scale,
                 p->ks, part0, rows, lse_on && p->ks == 1 ? lse : ws, lse_on && p->ks == 1);
    if (p->ks > 1)
        sgk_cpu_combine(threads, (int)p->groups_norm, 1, pool_mem, pool, ws, ctx0, p->ldc, part0, p->ks, rows, p->D,
                        p->H, p->rt, lse_on ? lse : ws, lse_on, p->N);
}

/* The tiled forward: the context, then out = nodes + context Wo^T. */
static void tiled_forward(const cpu_layer *l, const sgk_plan *p, const sgk_fwd *a, float *pool_mem, size_t pool,
                          float *lse)
{
    const sgk_off ctx0 = (sgk_off)(p->ctx_offset / sizeof(float));
    tiled_context(l, p, a, pool_mem, pool, ctx0, lse);
    sgk_cpu_proj(l->ctx->threads, (int)p->groups_rows, (int)p->groups_out, pool_mem, pool, a->workspace, ctx0,
                 p->ldc, l->w + l->off.wo, sgk_gen_ldw(&l->off, p->ldo), 1, a->nodes, a->out, 0, p->D,
                 (int)(p->B * p->N), p->D, p->D, p->mt, p->nt);
}

static sgk_status forward_f32(const cpu_layer *l, const sgk_backend_plan *plan, const sgk_fwd *a)
{
    sgk_plan p;
    sgk_plan_load(plan, &p);
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    const size_t pool = pool_floats(&p);
    float *pool_mem = (float *)((char *)a->workspace + align_bytes(p.workspace_bytes));
    if (p.kind == SGK_PLAN_SMALL) {
        sgk_cpu_fused(l->ctx->threads, (int)p.B, 1, pool_mem, pool, a->nodes, a->pair_feats, (int)l->dtype,
                      a->edge_mask, a->mask_type == SGK_MASK_U8, w + o.gamma, w + o.beta, w + o.wqkv, w + o.w1,
                      p.ldp, w + o.b1, w + o.w2, p.ldh, w + o.b2, w + o.wo, sgk_gen_ldw(&o, p.ldo), a->out, p.N,
                      p.D, p.H, p.P, p.ldk, p.ldc, p.tq, p.tqp, p.tk, p.qc, l->eps, p.scale);
        return SGK_OK;
    }
    tiled_forward(l, &p, a, pool_mem, pool, NULL);
    return SGK_OK;
}

/* ---- the training calls: kernels/train.sgk on the tiled plan ---------- */

static int train_plan_for(const cpu_layer *l, int64_t B, int64_t N, sgk_train_plan *tp)
{
    const sgk_limits lim = tiled_limits(l, B, N);
    return sgk_train_plan_make(B, N, l->D, l->H, l->P, &lim, tp);
}

/* Floats of per-thread local memory, after the training plan's workspace. */
static size_t train_pool_floats(const sgk_train_plan *tp)
{
    size_t m = pool_floats(&tp->fwd);
    m = tp->smem_bwd > m ? tp->smem_bwd : m;
    m = tp->smem_cols > m ? tp->smem_cols : m;
    return align_bytes(m * sizeof(float)) / sizeof(float);
}

static size_t cpu_saved_size(void *bl, int64_t B, int64_t N)
{
    const cpu_layer *l = bl;
    return (size_t)B * (size_t)l->H * (size_t)N * sizeof(float);
}

static size_t cpu_train_workspace_size(void *bl, int64_t B, int64_t N)
{
    const cpu_layer *l = bl;
    sgk_train_plan tp;
    if (!train_plan_for(l, B, N, &tp))
        return SIZE_MAX;
    const size_t pool = train_pool_floats(&tp) * sizeof(float), head = CPU_ALIGN + align_bytes(tp.workspace_bytes);
    if (pool > (SIZE_MAX - head) / (size_t)l->ctx->threads)
        return SIZE_MAX;
    return head + (size_t)l->ctx->threads * pool;
}

/* 16-bit layers: nodes widened into the workspace (and out computed in
 * float there, then rounded), as the forward does. */
static sgk_status cpu_forward_train(void *bl, const sgk_fwd *args, void *saved)
{
    const cpu_layer *l = bl;
    const sgk_fwd aligned = aligned_args(args), *a = &aligned;
    sgk_train_plan tp;
    if (!train_plan_for(l, a->B, a->N, &tp))
        return g_host->set_error(SGK_ERR_UNSUPPORTED, "cpu: no training plan for B=%lld, N=%lld",
                                 (long long)a->B, (long long)a->N);
    float *pool_mem = (float *)((char *)a->workspace + align_bytes(tp.workspace_bytes));
    if (l->dtype == SGK_DTYPE_F32) {
        tiled_forward(l, &tp.fwd, a, pool_mem, train_pool_floats(&tp), saved);
        return SGK_OK;
    }
    const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D;
    sgk_fwd f = *a;
    f.nodes = (float *)((char *)a->workspace + tp.fwd.wide_nodes);
    f.out = (float *)((char *)a->workspace + tp.fwd.wide_out);
    widen(l->dtype, a->nodes, (float *)f.nodes, nd, l->ctx->threads);
    tiled_forward(l, &tp.fwd, &f, pool_mem, train_pool_floats(&tp), saved);
    narrow(l->dtype, f.out, a->out, nd, l->ctx->threads);
    return SGK_OK;
}

static void backward_float(const cpu_layer *l, const sgk_train_plan *tpp, const sgk_fwd *a, const void *saved,
                           const float *d_out, const sgk_grads *g);

/* 16-bit layers: nodes and d_out widened into the workspace, every
 * gradient but the pair features' computed in float there and then
 * rounded into the caller's buffer (the pair features' is rounded as
 * attn_bwd stores it). */
static sgk_status cpu_backward(void *bl, const sgk_fwd *args, const void *saved, const void *d_out,
                               const sgk_grads *g)
{
    const cpu_layer *l = bl;
    const sgk_fwd aligned = aligned_args(args), *a = &aligned;
    sgk_train_plan tp;
    if (!train_plan_for(l, a->B, a->N, &tp))
        return g_host->set_error(SGK_ERR_UNSUPPORTED, "cpu: no training plan for B=%lld, N=%lld",
                                 (long long)a->B, (long long)a->N);
    if (l->dtype == SGK_DTYPE_F32) {
        backward_float(l, &tp, a, saved, d_out, g);
        return SGK_OK;
    }
    const size_t nd = (size_t)a->B * (size_t)a->N * (size_t)l->D;
    float *ws = a->workspace;
    sgk_fwd f = *a;
    f.nodes = (float *)((char *)a->workspace + tp.fwd.wide_nodes);
    widen(l->dtype, a->nodes, (float *)f.nodes, nd, l->ctx->threads);
    widen(l->dtype, d_out, ws + tp.wide_dout, nd, l->ctx->threads);
    sgk_grads fg = *g;
    void **slot[12] = {&fg.nodes, &fg.pair_feats, &fg.ln_gamma, &fg.ln_beta, &fg.wq, &fg.wk,
                       &fg.wv,    &fg.wo,         &fg.w1,       &fg.b1,      &fg.w2, &fg.b2};
    const void *const user[12] = {g->nodes, g->pair_feats, g->ln_gamma, g->ln_beta, g->wq, g->wk,
                                  g->wv,    g->wo,         g->w1,       g->b1,      g->w2, g->b2};
    for (int i = 0; i < 12; i++)
        if (tp.grad_n[i] && user[i])
            *slot[i] = ws + tp.grad16[i];
    backward_float(l, &tp, &f, saved, ws + tp.wide_dout, &fg);
    for (int i = 0; i < 12; i++)
        if (tp.grad_n[i] && user[i])
            narrow(l->dtype, ws + tp.grad16[i], (void *)user[i], tp.grad_n[i], l->ctx->threads);
    return SGK_OK;
}

/* The backward on float nodes and d_out (pair features and their gradient
 * in the layer's dtype), gradients into g's float buffers. */
static void backward_float(const cpu_layer *l, const sgk_train_plan *tpp, const sgk_fwd *a, const void *saved,
                           const float *d_out, const sgk_grads *g)
{
    const sgk_train_plan tp = *tpp;
    const sgk_plan *p = &tp.fwd;
    const float *w = l->w;
    const sgk_gen_packed o = l->off;
    const int threads = l->ctx->threads, rows = (int)(p->B * p->N), D = p->D;
    const size_t pool = train_pool_floats(&tp);
    float *pm = (float *)((char *)a->workspace + align_bytes(tp.workspace_bytes));
    float *ws = a->workspace;
    const sgk_off ctx0 = (sgk_off)(p->ctx_offset / sizeof(float));
    const sgk_off xn0 = (sgk_off)tp.xn, dctx0 = (sgk_off)tp.dctx;
    tiled_context(l, p, a, pm, pool, xn0, NULL);
    sgk_cpu_proj(threads, (int)p->groups_rows, (int)tp.groups_dctx, pm, pool, d_out, 0, D, w + o.wo_b, o.ldd, 0, ws,
                 ws, dctx0, tp.ldd, rows, D, tp.ldd, p->mt, p->nt);
    sgk_cpu_bwd_di(threads, (int)p->groups_norm, 1, pm, pool, ws, p->ldk, dctx0, tp.ldd, ctx0, p->ldc, (sgk_off)tp.di,
                   a->edge_mask, a->mask_type == SGK_MASK_U8, p->N, rows, D, p->H, p->rt);
    sgk_cpu_attn_bwd(threads, (int)tp.groups_bwd, 1, pm, pool, ws, p->ldk, dctx0, tp.ldd, (sgk_off)tp.di,
                     a->pair_feats, (int)l->dtype, a->edge_mask, a->mask_type == SGK_MASK_U8, w + o.w1, w + o.w1_b,
                     p->ldp,
                     w + o.b1, w + o.w2, p->ldh, w + o.w2_b, w + o.b2, saved, (sgk_off)tp.dq, (sgk_off)tp.dkv, tp.ldv,
                     (sgk_off)tp.mlp, tp.mlpw, g->pair_feats, g->pair_feats != NULL, p->N, D, p->H, p->P, tp.tq,
                     tp.tqp, tp.tk, tp.qc, tp.rq, tp.rk, p->scale, rows);
    sgk_cpu_reduce_qkv(threads, (int)p->groups_norm, 1, pm, pool, ws, (sgk_off)tp.dq, tp.ldd, (sgk_off)tp.dkv,
                       tp.ldv, tp.rk, tp.rq, p->ldk, p->scale, rows, D, p->rt);
    /* dxn = [dq dk dv] [Wq; Wk; Wv], where dctx was */
    sgk_cpu_proj(threads, (int)p->groups_rows, (int)p->groups_out, pm, pool, ws, 0, p->ldk, w + o.wqkv_b, o.ldo, 0,
                 ws, ws, dctx0, tp.ldd, rows, 3 * D, D, p->mt, p->nt);
    sgk_cpu_ln_bwd(threads, (int)p->groups_norm, 1, pm, pool, a->nodes, w + o.gamma, l->eps, ws, dctx0, tp.ldd,
                   (sgk_off)tp.st, d_out, g->nodes, g->nodes != NULL, rows, D, p->rt);
    /* LayerNorm's and the projections' weight gradients by chunks of rows,
     * then the chunks added in order */
    const int want_ln = (g->ln_gamma != NULL) | (g->ln_beta != NULL) << 1;
    if (want_ln) {
        sgk_cpu_ln_wgrad(threads, (int)tp.groups_cols, tp.lch, pm, pool, a->nodes, ws, dctx0, tp.ldd, (sgk_off)tp.st,
                         (sgk_off)tp.lpart, rows, tp.lk, D, tp.cb);
        sgk_cpu_reduce_parts(threads, (D + tp.per - 1) / tp.per, 2, pm, pool, ws, (sgk_off)tp.lpart, (sgk_off)(2 * D),
                             tp.lch, 0, D, g->ln_gamma, g->ln_beta, NULL, NULL, want_ln, tp.per);
    }
    /* one chunk: each gradient straight into its buffer; several: the
     * chunks' parts of all four, then their sums */
    const int want_w = (g->wq != NULL) | (g->wk != NULL) << 1 | (g->wv != NULL) << 2 | (g->wo != NULL) << 3;
    const sgk_off gst = (sgk_off)4 * D * D;
    void *const dw[4] = {g->wq, g->wk, g->wv, g->wo};
    for (int m = 0; m < 4 && tp.wch == 1; m++)
        if (dw[m])
            sgk_cpu_wgrad(threads, (int)tp.groups_wr, (int)tp.groups_wc, pm, pool, m < 3 ? ws : d_out,
                          m < 3 ? (sgk_off)m * D : 0, m < 3 ? p->ldk : D, ws, m < 3 ? xn0 : ctx0, p->ldc, dw[m], 0, 0,
                          D, rows, rows, D, D, tp.wmt, tp.wnt, (int)tp.groups_wc);
    if (tp.wch > 1 && (want_w & 7))
        sgk_cpu_wgrad(threads, (int)(3 * D + tp.wmt - 1) / tp.wmt, (int)tp.groups_wc * tp.wch, pm, pool, ws, 0, p->ldk,
                      ws, xn0, p->ldc, ws, (sgk_off)tp.wpart, gst, D, rows, tp.wkc, 3 * D, D, tp.wmt, tp.wnt,
                      (int)tp.groups_wc);
    if (tp.wch > 1 && (want_w & 8))
        sgk_cpu_wgrad(threads, (int)tp.groups_wr, (int)tp.groups_wc * tp.wch, pm, pool, d_out, 0, D, ws, ctx0, p->ldc,
                      ws, (sgk_off)tp.wpart + (sgk_off)3 * D * D, gst, D, rows, tp.wkc, D, D, tp.wmt, tp.wnt,
                      (int)tp.groups_wc);
    if (tp.wch > 1 && want_w) {
        const int m0 = want_w & 7 ? 0 : 3, m1 = want_w & 8 ? 4 : 3;
        sgk_cpu_reduce_parts(threads, (D * D + tp.per - 1) / tp.per, m1 - m0, pm, pool, ws, (sgk_off)tp.wpart, gst,
                             tp.wch, m0, D * D, g->wq, g->wk, g->wv, g->wo, want_w, tp.per);
    }
    const int want_mlp = (g->w1 != NULL) | (g->b1 != NULL) << 1 | (g->w2 != NULL) << 2 | (g->b2 != NULL) << 3;
    if (want_mlp)
        sgk_cpu_reduce_mlp(threads, (int)tp.groups_mlp, 1, pm, pool, ws, (sgk_off)tp.mlp, tp.mlpw, (int)tp.groups_bwd,
                           p->ldp, p->P, p->H, g->w1, g->b1, g->w2, g->b2, want_mlp, tp.per);
}

/* Device memory is host memory: these serve only callers that ask anyway. */
static sgk_status cpu_mem_alloc(void *bctx, size_t bytes, void **ptr)
{
    (void)bctx;
    *ptr = host_alloc(bytes);
    return *ptr ? SGK_OK : g_host->set_error(SGK_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
}

static void cpu_mem_free(void *bctx, void *ptr)
{
    (void)bctx;
    free(ptr);
}

static sgk_status cpu_copy(void *bctx, void *dst, const void *src, size_t bytes)
{
    (void)bctx;
    memcpy(dst, src, bytes);
    return SGK_OK;
}

static sgk_status cpu_synchronize(void *bctx)
{
    (void)bctx;
    return SGK_OK;
}

static const sgk_backend_ops k_ops = {
    .abi_version = SGK_BACKEND_ABI,
    .name = "cpu",
    .max_elements = INT64_MAX / 16,
    .host_memory = 1,
    .probe = cpu_probe,
    .device_name = cpu_device_name,
    .context_create = cpu_context_create,
    .context_destroy = cpu_context_destroy,
    .layer_create = cpu_layer_create,
    .layer_destroy = cpu_layer_destroy,
    .variant_count = cpu_variant_count,
    .variant_name = cpu_variant_name,
    .variant_supports = cpu_variant_supports,
    .workspace_size = cpu_workspace_size,
    .forward = cpu_forward,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .native = NULL,
    .layer_set_weights = cpu_set_weights,
    .layer_set_weights_device = cpu_set_weights_device,
    .variant_prefers = cpu_variant_prefers,
    .saved_size = cpu_saved_size,
    .train_workspace_size = cpu_train_workspace_size,
    .forward_train = cpu_forward_train,
    .backward = cpu_backward,
    .dtypes = SGK_DTYPE_BIT(SGK_DTYPE_F32) | SGK_DTYPE_BIT(SGK_DTYPE_BF16) | SGK_DTYPE_BIT(SGK_DTYPE_F16),
};

const sgk_backend_ops *sgk_cpu_backend_entry(const sgk_host *host)
{
    g_host = host;
    return &k_ops;
}
