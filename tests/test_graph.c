/* sgk_forward_device captured in a CUDA graph and replayed, then soaked:
 * the replays give the same bits as the call made directly, every one of
 * them, and neither replays nor direct calls leak device memory.
 *
 * For each case and every cuda variant that supports it: inputs on the
 * device, one direct call on a stream of the test's own (checked against
 * the double reference), its capture into a graph, one replay into a
 * poisoned output (bitwise equal to the direct call), then SGK_TEST_SOAK
 * replays (default 100000 for the variant sgk picks at seed, a tenth of
 * that for every other variant and case) with the output compared bit for
 * bit every 1000, and a tenth as many direct calls; free device memory must
 * not drop over the soak. Then new weights: a forward captured before
 * sgk_layer_set_weights_device sees them at its next replay, and the call
 * captured in a graph reads its buffers at each replay (repack_variant).
 * Usage: test_graph cuda. Exits 77 (skip) where
 * the backend or the CUDA driver cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmem.h"
#include "harness.h"

#define DEFAULT_SEED 0x47524150ull /* "GRAP" */
#define MAX_VARIANTS 32
#define CHECK_EVERY 1000

static const char *const case_names[] = {"preset_seed", "preset_mid", "odd_sizes", "pair_dim_33"};
/* New weights reaching graphs: the seed shape, eight heads at P <= 16 and
 * at P = 32 (where CUDA packs its own layouts), another, and mid, whose
 * Q/K/V projection runs where CUDA keeps a split copy of the weights
 * (wg_gemm.cuh on compute capability 9.0). */
static const char *const repack_names[] = {"preset_seed", "heads_8_dim_256_n21", "heads_8_dim_256_dense_n40",
                                           "odd_sizes", "preset_mid"};

typedef struct bufs {
    void *nodes, *pair, *mask, *out, *ws;
    size_t out_bytes, ws_bytes;
} bufs;

static void bufs_free(const devmem *m, bufs *b)
{
    void *const all[] = {b->nodes, b->pair, b->mask, b->out, b->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            m->release(all[i]);
    memset(b, 0, sizeof *b);
}

static int bufs_make(const devmem *m, bufs *b, const sgkt_inputs *in, size_t ws)
{
    const size_t nodes = (size_t)(in->B * in->N * in->D) * sizeof(float);
    const size_t pair = (size_t)(in->B * in->N * in->N * in->P) * sizeof(float);
    const size_t mask = (size_t)(in->B * in->N * in->N) * sgkt_mask_elem_size(in->mask_type);
    memset(b, 0, sizeof *b);
    b->out_bytes = nodes;
    b->ws_bytes = ws;
    if (m->alloc(&b->nodes, nodes) || m->alloc(&b->pair, pair) || m->alloc(&b->mask, mask) ||
        m->alloc(&b->out, nodes) || (ws && m->alloc(&b->ws, ws)))
        return -1;
    return m->h2d(b->nodes, in->nodes, nodes) || m->h2d(b->pair, in->pair_feats, pair) ||
           m->h2d(b->mask, in->edge_mask, mask);
}

static sgk_status call(sgk_layer *layer, const sgkt_inputs *in, const bufs *b, void *stream)
{
    return sgk_forward_device(layer, in->B, in->N, b->nodes, b->pair, b->mask, in->mask_type, b->out, b->ws,
                              b->ws_bytes, stream);
}

/* One variant on one case; returns 1 when it passes (prints FAIL otherwise). */
static int run_variant(const devmem *m, sgk_layer *layer, const sgkt_case *c, const sgkt_prepared *p,
                       const char *variant, long replays)
{
    const sgkt_inputs *in = &p->in;
    const size_t n = p->n_out;
    size_t ws = 0;
    bufs b;
    void *stream = NULL, *exec = NULL;
    float *direct = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    const char *why = NULL;
    char detail[256] = "";
    sgk_status st = sgk_workspace_size(layer, in->B, in->N, &ws);
    if (!direct || !got || st != SGK_OK || bufs_make(m, &b, in, ws) != 0 || devmem_cuda_stream_create(&stream))
        why = "setup (host or device memory, workspace size, stream) failed";
    if (!why && ((st = call(layer, in, &b, stream)) != SGK_OK || devmem_cuda_stream_sync(stream) ||
                 m->d2h(direct, b.out, b.out_bytes))) {
        why = "the direct call failed";
        snprintf(detail, sizeof detail, "%s: %s", sgk_status_string(st), st ? sgk_last_error() : "driver");
    }
    if (!why) {
        sgkt_error e = sgkt_compare(direct, p->ref, n);
        if (!sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL)) {
            why = "the direct call differs from the reference";
            snprintf(detail, sizeof detail, "rel_l2=%.3e max_abs=%.3e", e.rel_l2, e.max_abs);
        }
    }
    if (!why) {
        int e = devmem_cuda_capture_begin(stream);
        st = e ? SGK_OK : call(layer, in, &b, stream);
        e = e ? e : devmem_cuda_capture_end(stream, &exec);
        if (e || st != SGK_OK) {
            why = "capturing sgk_forward_device into a graph failed";
            snprintf(detail, sizeof detail, "driver error %d; sgk %s: %s", e, sgk_status_string(st),
                     st ? sgk_last_error() : "");
        }
    }
    /* A poisoned output, then one replay: it must write every element. */
    if (!why) {
        sgkt_poison_nan(got, n);
        if (m->h2d(b.out, got, b.out_bytes) || devmem_cuda_graph_launch(exec, stream) ||
            devmem_cuda_stream_sync(stream) || m->d2h(got, b.out, b.out_bytes))
            why = "the first replay failed";
        else if (memcmp(got, direct, b.out_bytes) != 0)
            why = "the first replay's bits differ from the direct call's";
    }
    size_t free0 = 0, free1 = 0, total = 0;
    if (!why && devmem_cuda_mem_info(&free0, &total))
        why = "cuMemGetInfo failed";
    for (long r = 1; !why && r <= replays; r++) {
        if (devmem_cuda_graph_launch(exec, stream)) {
            why = "a replay failed";
        } else if (r % CHECK_EVERY == 0 || r == replays) {
            if (devmem_cuda_stream_sync(stream) || m->d2h(got, b.out, b.out_bytes))
                why = "synchronising or reading back failed";
            else if (memcmp(got, direct, b.out_bytes) != 0) {
                why = "a replay's bits differ from the direct call's";
                snprintf(detail, sizeof detail, "after %ld replays", r);
            }
        }
    }
    for (long r = 1; !why && r <= replays / 10; r++) {
        if ((st = call(layer, in, &b, stream)) != SGK_OK)
            why = "a direct call of the soak failed";
        else if (r % CHECK_EVERY == 0 || r == replays / 10) {
            if (devmem_cuda_stream_sync(stream) || m->d2h(got, b.out, b.out_bytes))
                why = "synchronising or reading back failed";
            else if (memcmp(got, direct, b.out_bytes) != 0) {
                why = "a direct call's bits drifted";
                snprintf(detail, sizeof detail, "after %ld calls", r);
            }
        }
    }
    if (!why && (devmem_cuda_stream_sync(stream) || devmem_cuda_mem_info(&free1, &total)))
        why = "cuMemGetInfo failed";
    else if (!why && free1 < free0) {
        why = "free device memory dropped over the soak";
        snprintf(detail, sizeof detail, "%zu -> %zu bytes", free0, free1);
    }
    if (why)
        printf("FAIL variant=%s case=%s (B=%lld N=%lld D=%lld H=%lld P=%lld) seed=0x%016llx: %s %s\n", variant,
               c->name, (long long)c->B, (long long)c->N, (long long)c->D, (long long)c->H, (long long)c->P,
               (unsigned long long)p->seed, why, detail);
    else
        printf("ok variant=%s case=%s: %ld replays and %ld direct calls, bitwise equal\n", variant, c->name, replays,
               replays / 10);
    if (exec)
        devmem_cuda_graph_destroy(exec);
    if (stream)
        devmem_cuda_stream_destroy(stream);
    bufs_free(m, &b);
    free(direct);
    free(got);
    return why == NULL;
}

/* out of one graph replay (or, exec NULL, of one direct call) into host */
static int replay(const devmem *m, sgk_layer *layer, const sgkt_inputs *in, const bufs *b, void *exec, void *stream,
                  float *host)
{
    if (exec ? devmem_cuda_graph_launch(exec, stream) != 0 : call(layer, in, b, stream) != SGK_OK)
        return -1;
    return devmem_cuda_stream_sync(stream) || m->d2h(host, b->out, b->out_bytes) ? -1 : 0;
}

/* New weights and graphs, for one variant: a forward captured before
 * sgk_layer_set_weights_device, replayed after it on the graph's stream,
 * gives the bits of a layer created with the new weights; and
 * sgk_layer_set_weights_device captured with a forward takes whatever its
 * device buffers hold at each replay. */
static int repack_variant(const devmem *m, sgk_context *ctx, sgk_layer *layer, const sgkt_case *c,
                          const sgkt_prepared *p, const char *variant)
{
    const sgkt_inputs *in = &p->in;
    const size_t n = p->n_out;
    sgkt_weights nw;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, p->seed ^ 0x5e7ull);
    if (sgkt_weights_alloc(&nw, c->D, c->H, c->P) != 0)
        return 0;
    sgkt_weights_random(&nw, &rng);
    nw.eps = p->w.eps;
    float *before = malloc(n * sizeof(float)), *expect = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    void *wa[10] = {NULL}, *wb[10] = {NULL}, *stream = NULL, *g1 = NULL, *g2 = NULL;
    sgk_layer_desc da, db;
    sgk_layer_desc_init(&da);
    sgk_layer_desc_init(&db);
    sgk_layer *fresh = NULL;
    size_t ws = 0;
    bufs b;
    memset(&b, 0, sizeof b);
    const char *why = NULL;
    sgk_status st = SGK_OK;
    if (!before || !expect || !got || sgk_workspace_size(layer, in->B, in->N, &ws) != SGK_OK ||
        bufs_make(m, &b, in, ws) != 0 || devmem_cuda_stream_create(&stream) || devmem_weights(m, &p->w, &da, wa) ||
        devmem_weights(m, &nw, &db, wb) || sgkt_layer_from_weights(ctx, &nw, &fresh) != SGK_OK ||
        sgk_layer_set_variant(fresh, variant) != SGK_OK)
        why = "setup (memory, stream, device weights, the fresh layer) failed";
    /* the fresh layer's bits, and the layer's own before new weights */
    if (!why && (replay(m, fresh, in, &b, NULL, stream, expect) || replay(m, layer, in, &b, NULL, stream, before)))
        why = "a direct call failed";
    if (!why && memcmp(before, expect, b.out_bytes) == 0)
        why = "the two weight sets give the same bits: the test could not tell them apart";
    if (!why) {
        int e = devmem_cuda_capture_begin(stream);
        st = e ? SGK_OK : call(layer, in, &b, stream);
        e = e ? e : devmem_cuda_capture_end(stream, &g1);
        if (e || st != SGK_OK)
            why = "capturing the forward failed";
    }
    if (!why && (st = sgk_layer_set_weights_device(layer, &db, stream)) != SGK_OK)
        why = "sgk_layer_set_weights_device on the graph's stream failed";
    if (!why && replay(m, layer, in, &b, g1, stream, got))
        why = "replaying the graph captured before the new weights failed";
    else if (!why && memcmp(got, expect, b.out_bytes) != 0)
        why = "the graph captured before the new weights does not give their bits";
    /* a graph of set_weights_device from da's buffers, then forward */
    if (!why) {
        int e = devmem_cuda_capture_begin(stream);
        st = e ? SGK_OK : sgk_layer_set_weights_device(layer, &da, stream);
        if (!e && st == SGK_OK)
            st = call(layer, in, &b, stream);
        e = e ? e : devmem_cuda_capture_end(stream, &g2);
        if (e || st != SGK_OK)
            why = "capturing sgk_layer_set_weights_device and a forward failed";
    }
    if (!why && replay(m, layer, in, &b, g2, stream, got))
        why = "replaying the graph of new weights and a forward failed";
    else if (!why && memcmp(got, before, b.out_bytes) != 0)
        why = "the captured sgk_layer_set_weights_device did not bring the layer's first weights back";
    /* the same graph after its source buffers took the new weights' values */
    const size_t d = (size_t)c->D, h = (size_t)c->H, pp = (size_t)c->P;
    const float *src[10] = {nw.ln_gamma, nw.ln_beta, nw.wq, nw.wk, nw.wv, nw.wo, nw.w1, nw.b1, nw.w2, nw.b2};
    const size_t cnt[10] = {d, d, d * d, d * d, d * d, d * d, pp * pp, pp, h * pp, h};
    for (int i = 0; i < 10 && !why; i++)
        if (m->h2d(wa[i], src[i], cnt[i] * sizeof(float)))
            why = "overwriting the captured weight buffers failed";
    if (!why && replay(m, layer, in, &b, g2, stream, got))
        why = "replaying the graph after its buffers changed failed";
    else if (!why && memcmp(got, expect, b.out_bytes) != 0)
        why = "the captured sgk_layer_set_weights_device did not read its buffers at the replay";
    if (why)
        printf("FAIL repack variant=%s case=%s seed=0x%016llx: %s (%s: %s)\n", variant, c->name,
               (unsigned long long)p->seed, why, sgk_status_string(st), st ? sgk_last_error() : "");
    else
        printf("ok repack variant=%s case=%s: graphs see new weights, bitwise a fresh layer's\n", variant, c->name);
    if (g1)
        devmem_cuda_graph_destroy(g1);
    if (g2)
        devmem_cuda_graph_destroy(g2);
    if (stream) {
        devmem_cuda_stream_sync(stream);
        devmem_cuda_stream_destroy(stream);
    }
    devmem_weights_free(m, wa);
    devmem_weights_free(m, wb);
    bufs_free(m, &b);
    sgk_layer_destroy(fresh);
    sgkt_weights_free(&nw);
    free(before);
    free(expect);
    free(got);
    return why == NULL;
}

int main(int argc, char **argv)
{
    const char *backend = sgkt_backend_arg(argc, argv);
    if (strcmp(backend, "cuda") != 0) {
        printf("SKIP %s: CUDA graphs are cuda's\n", backend);
        return SGKT_EXIT_SKIP;
    }
    sgk_backend_info info;
    int usable = sgkt_backend_usable(backend, &info);
    if (usable != 0)
        return usable;
    sgk_context *ctx = sgkt_open_context(backend, 0);
    if (!ctx)
        return 1;
    void *native = NULL;
    int ordinal = 0;
    if (sgk_context_native(ctx, SGK_NATIVE_DEVICE_ORDINAL, &native) == SGK_OK)
        ordinal = (int)(intptr_t)native;
    devmem m;
    char why[256];
    if (devmem_open(backend, ordinal, &m, why, sizeof why) != 0) {
        printf("SKIP %s: %s\n", backend, why);
        sgk_context_destroy(ctx);
        return SGKT_EXIT_SKIP;
    }
    const char *seed_env = getenv("SGK_TEST_SEED"), *soak_env = getenv("SGK_TEST_SOAK");
    const uint64_t base_seed = seed_env ? strtoull(seed_env, NULL, 0) : DEFAULT_SEED;
    const long soak = soak_env ? strtol(soak_env, NULL, 0) : 100000;
    printf("graph: backend=%s, base seed 0x%016llx (SGK_TEST_SEED), soak %ld replays (SGK_TEST_SOAK)\n", backend,
           (unsigned long long)base_seed, soak);
    int runs = 0, failed = 0;
    for (size_t k = 0; k < sizeof case_names / sizeof case_names[0]; k++) {
        const sgkt_case *c = sgkt_find_case(case_names[k]);
        if (!c) {
            printf("FAIL case %s is not in the case table\n", case_names[k]);
            failed++;
            continue;
        }
        sgkt_prepared p;
        if (sgkt_prepare(&p, c, sgkt_seed_mix(base_seed, (uint64_t)k)) != 0) {
            printf("FAIL case %s: out of memory preparing inputs and reference\n", c->name);
            failed++;
            continue;
        }
        sgk_layer *layer = NULL;
        sgk_status st = sgkt_layer_from_weights(ctx, &p.w, &layer);
        const char *names[MAX_VARIANTS];
        int supported[MAX_VARIANTS], count = 0;
        if (st == SGK_OK)
            st = sgk_layer_variants(layer, c->B, c->N, names, supported, MAX_VARIANTS, &count);
        if (st != SGK_OK || count <= 0) {
            printf("FAIL case %s: layer or variants: %s %s\n", c->name, sgk_status_string(st), sgk_last_error());
            failed++;
        }
        if (count > MAX_VARIANTS)
            count = MAX_VARIANTS;
        /* the whole soak for the variant sgk picks at the first case, a
         * tenth of it for every other variant and case */
        int first = 1;
        for (int v = 0; v < count && st == SGK_OK; v++) {
            if (!supported[v] || sgk_layer_set_variant(layer, names[v]) != SGK_OK)
                continue;
            runs++;
            failed += !run_variant(&m, layer, c, &p, names[v], k == 0 && first ? soak : soak / 10);
            first = 0;
        }
        sgk_layer_destroy(layer);
        sgkt_prepared_free(&p);
    }
    for (size_t k = 0; k < sizeof repack_names / sizeof repack_names[0]; k++) {
        const sgkt_case *c = sgkt_find_case(repack_names[k]);
        sgkt_prepared p;
        if (!c || sgkt_prepare(&p, c, sgkt_seed_mix(base_seed, 0x5e70 + k)) != 0) {
            printf("FAIL case %s: not in the table, or out of memory\n", repack_names[k]);
            failed++;
            continue;
        }
        const char *names[MAX_VARIANTS];
        int supported[MAX_VARIANTS], count = 0;
        for (int v = 0;; v++) {
            /* a layer for each variant: each run leaves new weights in it */
            sgk_layer *layer = NULL;
            sgk_status st = sgkt_layer_from_weights(ctx, &p.w, &layer);
            if (st == SGK_OK && v == 0)
                st = sgk_layer_variants(layer, c->B, c->N, names, supported, MAX_VARIANTS, &count);
            if (st != SGK_OK) {
                printf("FAIL case %s: layer or variants: %s %s\n", c->name, sgk_status_string(st), sgk_last_error());
                failed++;
            }
            if (st == SGK_OK && v < count && v < MAX_VARIANTS && supported[v] &&
                sgk_layer_set_variant(layer, names[v]) == SGK_OK) {
                runs++;
                failed += !repack_variant(&m, ctx, layer, c, &p, names[v]);
            }
            sgk_layer_destroy(layer);
            if (st != SGK_OK || v + 1 >= count || v + 1 >= MAX_VARIANTS)
                break;
        }
        sgkt_prepared_free(&p);
    }
    sgk_context_destroy(ctx);
    printf("graph: backend=%s runs=%d failed=%d\n", backend, runs, failed);
    if (runs == 0) {
        printf("FAIL no run: no case or variant ran, so nothing was tested\n");
        return 1;
    }
    return failed != 0;
}
