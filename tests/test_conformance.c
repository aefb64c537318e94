/* Conformance: every case of the table, on every device tested and every
 * kernel variant of the backend, against the double-precision reference;
 * and new weights for a layer (sgk_layer_set_weights and its device form)
 * bitwise equal to a layer created with them.
 *
 * Usage: test_conformance BACKEND (or SGK_TEST_BACKEND); SGK_TEST_SKIP_THREADS=1
 * leaves out the concurrent-callers test; SGK_TEST_DEVICE adds
 * a device besides 0; SGK_TEST_SEED changes the base seed; SGK_TEST_XL=1 adds
 * the xl preset; SGK_TEST_FILTER runs only the tests whose names match its
 * pattern (CMocka's: * and ?), for example mask_* under a slow sanitizer;
 * SGK_TEST_VARIANTS (names separated by commas) runs only those variants,
 * and the automatic choice only where it picks one of them: a sanitizer
 * run over one changed kernel.
 * Exits 77 when the backend cannot run here. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "devmem.h"
#include "harness.h"

#define MAX_VARIANTS 32
#define DEFAULT_SEED 0x53474b31ull /* "SGK1" */

typedef struct variant_stats {
    char name[64];
    int passed, failed, unsupported, filtered;
} variant_stats;

static const char *backend;
static int device;
static uint64_t base_seed;
static sgk_context *ctx;
static variant_stats stats[MAX_VARIANTS];
static int n_stats;
/* The backend's device memory, for sgk_layer_set_weights_device. */
static devmem mem;
static char mem_why[256];
static int mem_ok;

static variant_stats *stats_for(const char *name)
{
    for (int i = 0; i < n_stats; i++)
        if (strcmp(stats[i].name, name) == 0)
            return &stats[i];
    if (n_stats == MAX_VARIANTS)
        return &stats[MAX_VARIANTS - 1];
    variant_stats *s = &stats[n_stats++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* SGK_TEST_VARIANTS: unset or empty runs every variant. */
static int variant_selected(const char *name)
{
    const char *list = getenv("SGK_TEST_VARIANTS");
    if (!list || !*list)
        return 1;
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return 1;
        p += n + (end != NULL);
    }
    return 0;
}

static void describe_index(const sgkt_inputs *in, size_t idx, char *buf, size_t len)
{
    long long D = in->D, N = in->N;
    snprintf(buf, len, "b=%lld i=%lld d=%lld", (long long)idx / (N * D),
             (long long)(idx / D) % N, (long long)idx % D);
}

/* Checks one finished run against the reference; prints why on failure. */
static int check_run(const sgkt_case *c, const sgkt_prepared *p, const char *variant,
                     const char *api, const sgkt_run *r)
{
    const char *why = NULL;
    char detail[256] = "";
    sgkt_error e = {0, 0, 0, 0};
    if (r->status != SGK_OK) {
        why = "status";
        snprintf(detail, sizeof detail, "%s: %s", sgk_status_string(r->status), sgk_last_error());
    } else if (!r->guard_ok) {
        why = "guard bytes after the output or workspace overwritten";
    } else {
        e = sgkt_compare(r->out, p->ref, p->n_out);
        char where[96];
        describe_index(&p->in, e.worst, where, sizeof where);
        if (!sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL)) {
            why = "differs from the reference";
            snprintf(detail, sizeof detail,
                     "rel_l2=%.3e max_abs=%.3e nonfinite_mismatch=%zu worst at %s: got %.9g ref %.9g",
                     e.rel_l2, e.max_abs, e.mismatched_nonfinite, where, (double)r->out[e.worst],
                     p->ref[e.worst]);
        } else if (c->mask == SGKT_MASK_ALL_ZERO && !sgkt_equals_nodes(&p->in, r->out)) {
            why = "all-zero mask: output is not bitwise equal to nodes";
        } else if (!sgkt_masked_rows_exact(&p->in, r->out)) {
            why = "a fully masked row is not bitwise equal to its nodes row";
        }
    }
    if (!why)
        return 1;
    printf("FAIL backend=%s device=%d variant=%s api=%s case=%s (B=%lld N=%lld D=%lld H=%lld "
           "P=%lld mask=%s/%s) seed=0x%016llx: %s %s\n",
           backend, device, variant, api, c->name, (long long)c->B, (long long)c->N,
           (long long)c->D, (long long)c->H, (long long)c->P, sgkt_mask_pattern_name(c->mask),
           c->mask_type == SGK_MASK_U8 ? "u8" : "f32", (unsigned long long)p->seed, why, detail);
    printf("     rerun: SGK_TEST_SEED=0x%016llx (base seed; case seeds derive from it)\n",
           (unsigned long long)base_seed);
    return 0;
}

/* Runs one variant (name, or NULL for the automatic choice) on the case. */
static int run_variant(const sgkt_case *c, const sgkt_prepared *p, sgk_layer *layer,
                       const char *name)
{
    int ok = 1;
    const char *label = name ? name : "auto";
    for (int api = 0; api < 2; api++) {
        /* forward_device takes host pointers only on the cpu backend */
        if (api == 1 && strcmp(backend, "cpu") != 0)
            break;
        sgkt_run r = sgkt_run_forward(layer, &p->in, api);
        ok &= check_run(c, p, label, api ? "forward_device" : "forward", &r);
        sgkt_run_free(&r);
    }
    return ok;
}

/* A forced variant that does not support the shape must refuse it, leaving
 * the output untouched. */
static int check_refusal(const sgkt_case *c, const sgkt_prepared *p, sgk_layer *layer,
                         const char *name)
{
    sgkt_run r = sgkt_run_forward(layer, &p->in, 0);
    int ok = r.status == SGK_ERR_UNSUPPORTED && r.untouched && r.guard_ok;
    if (!ok)
        printf("FAIL backend=%s device=%d variant=%s case=%s seed=0x%016llx: variant says it "
               "does not support B=%lld N=%lld, but forward returned %s (output %s)\n",
               backend, device, name, c->name, (unsigned long long)p->seed, (long long)c->B,
               (long long)c->N, sgk_status_string(r.status),
               r.untouched ? "untouched" : "written");
    sgkt_run_free(&r);
    return ok;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- new weights for a layer -------------------------------------------- */

/* got (given new weights) and fresh (created with them) run variant
 * (NULL: the automatic choice) on in: 1 when both succeed with the same
 * bits; prints FAIL otherwise. */
static int same_bits(const char *what, const char *name, uint64_t seed, const sgkt_inputs *in,
                     sgk_layer *got, sgk_layer *fresh, const char *variant)
{
    const size_t n = (size_t)(in->B * in->N * in->D);
    sgk_status sv = sgk_layer_set_variant(got, variant);
    if (sv == SGK_OK)
        sv = sgk_layer_set_variant(fresh, variant);
    sgkt_run a = sgkt_run_forward(got, in, 0), b = sgkt_run_forward(fresh, in, 0);
    int ok = sv == SGK_OK && a.status == SGK_OK && b.status == SGK_OK && a.guard_ok &&
             memcmp(a.out, b.out, n * sizeof(float)) == 0;
    if (!ok)
        printf("FAIL backend=%s device=%d variant=%s case=%s seed=0x%016llx: forward after %s "
               "is not bitwise that of a layer created with the new weights (statuses %s, %s: "
               "%s)\n",
               backend, device, variant ? variant : "auto", name, (unsigned long long)seed, what,
               sgk_status_string(a.status), sgk_status_string(b.status),
               a.status == SGK_OK && b.status == SGK_OK ? "bits differ" : sgk_last_error());
    sgkt_run_free(&a);
    sgkt_run_free(&b);
    sgk_layer_set_variant(got, NULL);
    sgk_layer_set_variant(fresh, NULL);
    return ok;
}

/* Random weights of the case's shape from seed, with eps. */
static void new_weights(sgkt_weights *w, const sgkt_case *c, uint64_t seed, float eps)
{
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    assert_int_equal(sgkt_weights_alloc(w, c->D, c->H, c->P), 0);
    sgkt_weights_random(w, &rng);
    w->eps = eps;
}

/* Replaces layer's weights with w (device form when device, on the
 * backend's default stream) and compares each of variants (count of them;
 * 0: the automatic choice only) with a layer created with w. */
static int replace_and_compare(const sgkt_case *c, uint64_t seed, const sgkt_inputs *in,
                               sgk_layer *layer, const sgkt_weights *w, int device_form,
                               const char *const *variants, int count)
{
    const char *what = device_form ? "sgk_layer_set_weights_device" : "sgk_layer_set_weights";
    if (device_form && !mem_ok) {
        printf("FAIL backend=%s case=%s: no device memory for %s: %s\n", backend, c->name, what,
               mem_why);
        return 0;
    }
    void *bufs[10] = {NULL};
    sgk_layer_desc d;
    sgk_layer_desc_init(&d);
    sgk_status st;
    if (device_form) {
        if (devmem_weights(&mem, w, &d, bufs) != 0) {
            printf("FAIL backend=%s case=%s: copying weights to device memory failed\n", backend,
                   c->name);
            return 0;
        }
        st = sgk_layer_set_weights_device(layer, &d, NULL);
        if (st == SGK_OK && mem.sync() != 0)
            st = SGK_ERR_BACKEND;
    } else {
        sgkt_weights_to_desc(w, &d);
        st = sgk_layer_set_weights(layer, &d);
    }
    sgk_layer *fresh = NULL;
    int ok = st == SGK_OK;
    if (!ok)
        printf("FAIL backend=%s device=%d case=%s seed=0x%016llx: %s: %s: %s\n", backend, device,
               c->name, (unsigned long long)seed, what, sgk_status_string(st), sgk_last_error());
    if (ok && sgkt_layer_from_weights(ctx, w, &fresh) != SGK_OK) {
        printf("FAIL case=%s: sgk_layer_create: %s\n", c->name, sgk_last_error());
        ok = 0;
    }
    if (ok && count == 0)
        ok = same_bits(what, c->name, seed, in, layer, fresh, NULL);
    for (int v = 0; ok && v < count; v++)
        ok = same_bits(what, c->name, seed, in, layer, fresh, variants[v]);
    sgk_layer_destroy(fresh);
    devmem_weights_free(&mem, bufs);
    return ok;
}

static void test_case(void **state)
{
    const sgkt_case *c = *state;
    uint64_t seed = sgkt_seed_mix(base_seed, (uint64_t)(c - sgkt_cases));
    sgkt_prepared p;
    double t0 = now_s();
    if (sgkt_prepare(&p, c, seed) != 0)
        fail_msg("case %s: out of memory preparing inputs and reference", c->name);
    double t1 = now_s();

    sgk_layer *layer = NULL;
    sgk_status st = sgkt_layer_from_weights(ctx, &p.w, &layer);
    if (st != SGK_OK) {
        sgkt_prepared_free(&p);
        fail_msg("case %s: sgk_layer_create: %s: %s", c->name, sgk_status_string(st),
                 sgk_last_error());
    }

    const char *names[MAX_VARIANTS];
    int supported[MAX_VARIANTS], count = 0;
    st = sgk_layer_variants(layer, c->B, c->N, names, supported, MAX_VARIANTS, &count);
    int all_ok = st == SGK_OK && count > 0;
    if (!all_ok)
        printf("FAIL case=%s: sgk_layer_variants: %s (%d variants) %s\n", c->name,
               sgk_status_string(st), count, sgk_last_error());
    if (count > MAX_VARIANTS)
        count = MAX_VARIANTS;

    for (int v = 0; v < count && st == SGK_OK; v++) {
        variant_stats *s = stats_for(names[v]);
        if (!variant_selected(names[v])) {
            s->filtered++;
            continue;
        }
        sgk_status sv = sgk_layer_set_variant(layer, names[v]);
        if (sv != SGK_OK) {
            printf("FAIL case=%s: sgk_layer_set_variant(%s): %s %s\n", c->name, names[v],
                   sgk_status_string(sv), sgk_last_error());
            s->failed++;
            all_ok = 0;
            continue;
        }
        if (!supported[v]) {
            s->unsupported++;
            printf("note: backend=%s variant=%s does not support case %s\n", backend, names[v],
                   c->name);
            all_ok &= check_refusal(c, &p, layer, names[v]);
            continue;
        }
        if (run_variant(c, &p, layer, names[v]))
            s->passed++;
        else {
            s->failed++;
            all_ok = 0;
        }
    }

    /* the automatic choice must pick a variant that supports the shape */
    if (st == SGK_OK && sgk_layer_set_variant(layer, NULL) == SGK_OK) {
        const char *chosen = NULL;
        sgk_status sc = sgk_layer_variant_for(layer, c->B, c->N, &chosen);
        int chosen_ok = sc == SGK_OK && chosen != NULL;
        for (int v = 0; chosen_ok && v < count; v++)
            if (strcmp(names[v], chosen) == 0 && !supported[v])
                chosen_ok = 0;
        if (!chosen_ok) {
            printf("FAIL case=%s: sgk_layer_variant_for gave %s (%s)\n", c->name,
                   chosen ? chosen : "(null)", sgk_status_string(sc));
            all_ok = 0;
        }
        if (!chosen_ok || variant_selected(chosen))
            all_ok &= run_variant(c, &p, layer, NULL);
    }
    /* Every shape of the table takes new weights on the device. */
    if (st == SGK_OK) {
        sgkt_weights w2;
        new_weights(&w2, c, seed ^ 0x5e7ull, p.w.eps);
        all_ok &= replace_and_compare(c, seed, &p.in, layer, &w2, 1, NULL, 0);
        sgkt_weights_free(&w2);
    }

    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    printf("case %s: inputs+reference %.2f s, %s variants %.2f s\n", c->name, t1 - t0, backend,
           now_s() - t1);
    if (!all_ok)
        fail_msg("case %s failed (seed 0x%016llx); see FAIL lines above", c->name,
                 (unsigned long long)seed);
}

/* New weights for a layer on every variant, at shapes where CUDA packs
 * weights its own ways (the seed shape's thread-order images, eight heads
 * at P <= 16 and at P = 32, head groups that do not split) and a few
 * others: from device weights with the layer's eps, then from host
 * weights with another eps, then from device weights again with that one.
 * A device call with an eps the layer no longer has is refused and leaves
 * the weights; on opencl so is a source buffer too small. */
static void test_set_weights(void **state)
{
    (void)state;
    static const sgkt_case cases[] = {
        {"repack_seed", 4, 24, 96, 4, 16, SGKT_MASK_RANDOM, 0.7, SGK_MASK_F32, 0},
        {"repack_heads_8_pair_16", 2, 21, 256, 8, 16, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_U8, 0},
        {"repack_heads_8_pair_32", 1, 40, 256, 8, 32, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
        {"repack_odd_sizes", 3, 13, 30, 5, 7, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_F32, 0},
        {"repack_pair_dim_128", 1, 24, 64, 4, 128, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
        {"repack_head_dim_1", 2, 9, 8, 8, 3, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
        /* rows enough that CUDA's projections run on the split copy of
         * the weights it keeps on compute capability 9.0 (wg_gemm.cuh) */
        {"repack_many_rows", 64, 70, 64, 4, 8, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
    };
    static const float host_eps[] = {1e-3f, 0.0f, 0.25f};
    int all_ok = 1;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const sgkt_case *c = &cases[k];
        const uint64_t seed = sgkt_seed_mix(base_seed, 0x5e70 + k);
        sgkt_prepared p;
        assert_int_equal(sgkt_prepare(&p, c, seed), 0);
        sgk_layer *layer = NULL;
        assert_int_equal(sgkt_layer_from_weights(ctx, &p.w, &layer), SGK_OK);
        const char *all[MAX_VARIANTS], *names[MAX_VARIANTS];
        int supported[MAX_VARIANTS], count = 0, n = 0;
        assert_int_equal(sgk_layer_variants(layer, c->B, c->N, all, supported, MAX_VARIANTS, &count),
                         SGK_OK);
        for (int v = 0; v < count; v++)
            if (supported[v] && variant_selected(all[v]))
                names[n++] = all[v];
        sgkt_weights b, h;
        new_weights(&b, c, seed + 1, p.w.eps);
        new_weights(&h, c, seed + 2, host_eps[k % 3]);
        int ok = replace_and_compare(c, seed, &p.in, layer, &b, 1, names, n);
        ok = ok && replace_and_compare(c, seed, &p.in, layer, &h, 0, names, n);
        if (ok) {
            /* eps is h's now: the device form refuses the old one */
            void *bufs[10];
            sgk_layer_desc d;
            sgk_layer_desc_init(&d);
            sgk_layer *fresh = NULL;
            ok = devmem_weights(&mem, &b, &d, bufs) == 0;
            sgk_status st = ok ? sgk_layer_set_weights_device(layer, &d, NULL) : SGK_ERR_BACKEND;
            if (st != SGK_ERR_INVALID_ARGUMENT || !strstr(sgk_last_error(), "desc->eps")) {
                printf("FAIL backend=%s case=%s: sgk_layer_set_weights_device with the layer's "
                       "old eps gave %s (%s), not SGK_ERR_INVALID_ARGUMENT naming desc->eps\n",
                       backend, c->name, sgk_status_string(st), sgk_last_error());
                ok = 0;
            }
            if (ok && strcmp(backend, "opencl") == 0) {
                void *small = NULL, *wq = (void *)d.wq;
                ok = mem.alloc(&small, sizeof(float)) == 0;
                d.wq = small;
                d.eps = h.eps;
                st = ok ? sgk_layer_set_weights_device(layer, &d, NULL) : SGK_ERR_BACKEND;
                if (st != SGK_ERR_INVALID_ARGUMENT || !strstr(sgk_last_error(), "desc->wq")) {
                    printf("FAIL backend=opencl case=%s: a 4-byte cl_mem as desc->wq gave %s (%s), "
                           "not SGK_ERR_INVALID_ARGUMENT naming desc->wq\n",
                           c->name, sgk_status_string(st), sgk_last_error());
                    ok = 0;
                }
                if (small)
                    mem.release(small);
                d.wq = wq;
            }
            if (ok && sgkt_layer_from_weights(ctx, &h, &fresh) == SGK_OK)
                ok = same_bits("refused calls", c->name, seed, &p.in, layer, fresh, NULL);
            sgk_layer_destroy(fresh);
            devmem_weights_free(&mem, bufs);
        }
        b.eps = h.eps;
        ok = ok && replace_and_compare(c, seed, &p.in, layer, &b, 1, names, n);
        printf("set_weights: backend=%s case=%s variants=%d %s\n", backend, c->name, n,
               ok ? "bitwise equal to fresh layers" : "FAILED");
        all_ok &= ok;
        sgkt_weights_free(&b);
        sgkt_weights_free(&h);
        sgk_layer_destroy(layer);
        sgkt_prepared_free(&p);
    }
    assert_true(all_ok);
}

/* NaN and Inf in one batch entry never reach another. */
static void test_nan_isolation(void **state)
{
    (void)state;
    static const sgkt_case c = {"nan_isolation", 3, 12, 32, 4, 5, SGKT_MASK_RANDOM, 0.6,
                                SGK_MASK_F32, 0};
    uint64_t seed = sgkt_seed_mix(base_seed, 0xA11);
    sgkt_prepared p;
    assert_int_equal(sgkt_prepare(&p, &c, seed), 0);
    p.in.nodes[(1 * c.N + 4) * c.D + 7] = NAN;
    float *edge = (float *)p.in.edge_mask + (2 * c.N + 3) * c.N + 5;
    *edge = 1.0f;
    p.in.pair_feats[((2 * c.N + 3) * c.N + 5) * c.P + 1] = INFINITY;
    /* a masked pair's features never matter, even NaN ones */
    ((float *)p.in.edge_mask)[(0 * c.N + 2) * c.N + 6] = 0.0f;
    for (int64_t r = 0; r < c.P; r++)
        p.in.pair_feats[((0 * c.N + 2) * c.N + 6) * c.P + r] = NAN;
    assert_int_equal(sgkt_prepare_reference(&p), 0);

    sgk_layer *layer = NULL;
    assert_int_equal(sgkt_layer_from_weights(ctx, &p.w, &layer), SGK_OK);
    const char *names[MAX_VARIANTS];
    int supported[MAX_VARIANTS], count = 0;
    assert_int_equal(sgk_layer_variants(layer, c.B, c.N, names, supported, MAX_VARIANTS, &count),
                     SGK_OK);
    size_t per_b = (size_t)(c.N * c.D);
    int all_ok = 1;
    for (int v = 0; v < count && v < MAX_VARIANTS; v++) {
        variant_stats *s = stats_for(names[v]);
        if (!supported[v]) {
            s->unsupported++;
            continue;
        }
        assert_int_equal(sgk_layer_set_variant(layer, names[v]), SGK_OK);
        sgkt_run r = sgkt_run_forward(layer, &p.in, 0);
        /* batch 0 is clean; in batch 2 only row 3 meets the Inf */
        size_t row = (size_t)c.D, b2 = 2 * per_b;
        sgkt_error e = sgkt_compare(r.out, p.ref, per_b);
        sgkt_error e2a = sgkt_compare(r.out + b2, p.ref + b2, 3 * row);
        sgkt_error e2b = sgkt_compare(r.out + b2 + 4 * row, p.ref + b2 + 4 * row, 8 * row);
        int ok = r.status == SGK_OK && r.guard_ok &&
                 sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL) &&
                 sgkt_error_ok(&e2a, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL) &&
                 sgkt_error_ok(&e2b, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL);
        for (size_t i = 0; ok && i < per_b; i++)
            ok = isfinite(r.out[i]) && (i / row == 3 || isfinite(r.out[b2 + i]));
        /* the NaN node's own output row is NaN through its residual */
        ok = ok && isnan(r.out[per_b + 4 * (size_t)c.D + 7]);
        if (!ok)
            printf("FAIL backend=%s device=%d variant=%s case=nan_isolation seed=0x%016llx: "
                   "status %s, batch 0 rel_l2=%.3e nonfinite_mismatch=%zu, batch 2 rows "
                   "other than 3: rel_l2=%.3e/%.3e\n",
                   backend, device, names[v], (unsigned long long)seed,
                   sgk_status_string(r.status), e.rel_l2, e.mismatched_nonfinite, e2a.rel_l2,
                   e2b.rel_l2);
        if (ok)
            s->passed++;
        else
            s->failed++;
        all_ok &= ok;
        sgkt_run_free(&r);
    }
    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    assert_true(all_ok);
}

/* sgk.h: forward calls may run concurrently on one layer, each with its own
 * output (and workspace). */
typedef struct worker {
    sgk_layer *layer;
    const sgkt_prepared *p;
    int device_api, failures;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int rep = 0; rep < 3; rep++) {
        sgkt_run r = sgkt_run_forward(w->layer, &w->p->in, w->device_api);
        sgkt_error e = {0, 0, 0, 0};
        if (r.status == SGK_OK)
            e = sgkt_compare(r.out, w->p->ref, w->p->n_out);
        if (r.status != SGK_OK || !r.guard_ok ||
            !sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL))
            w->failures++;
        sgkt_run_free(&r);
    }
    return NULL;
}

static void test_concurrent_forward(void **state)
{
    (void)state;
    /* compute-sanitizer serialises host threads to a crawl: its runs cover
     * the kernels through the table and leave this test out. */
    if (sgkt_env_flag("SGK_TEST_SKIP_THREADS"))
        skip();
    static const sgkt_case c = {"concurrent", 3, 40, 64, 4, 8, SGKT_MASK_EMPTY_ROWS, 0.5,
                                SGK_MASK_F32, 0};
    uint64_t seed = sgkt_seed_mix(base_seed, 0xC0C);
    sgkt_prepared p;
    assert_int_equal(sgkt_prepare(&p, &c, seed), 0);
    sgk_layer *layer = NULL;
    assert_int_equal(sgkt_layer_from_weights(ctx, &p.w, &layer), SGK_OK);
    enum { THREADS = 4 };
    worker w[THREADS];
    pthread_t th[THREADS];
    int host_api = strcmp(backend, "cpu") == 0;
    for (int t = 0; t < THREADS; t++) {
        w[t] = (worker){layer, &p, host_api ? t % 2 : 0, 0};
        assert_int_equal(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
    }
    int failures = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        failures += w[t].failures;
    }
    if (failures)
        printf("FAIL backend=%s device=%d case=concurrent seed=0x%016llx: %d of %d concurrent "
               "forward calls wrong\n",
               backend, device, (unsigned long long)seed, failures, 3 * THREADS);
    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    assert_int_equal(failures, 0);
}

static void test_summary(void **state)
{
    (void)state;
    int total = 0;
    for (int i = 0; i < n_stats; i++) {
        variant_stats *s = &stats[i];
        printf("conformance: backend=%s variant=%s cases=%d passed=%d failed=%d unsupported=%d%s\n",
               backend, s->name, s->passed + s->failed, s->passed, s->failed, s->unsupported,
               s->filtered ? " (left out by SGK_TEST_VARIANTS)" : "");
        total += s->passed + s->failed;
    }
    fflush(stdout);
    if (total == 0)
        fail_msg("backend %s device %d ran no case on any variant", backend, device);
}

static int group_setup(void **state)
{
    (void)state;
    n_stats = 0;
    ctx = sgkt_open_context(backend, device);
    if (ctx)
        mem_ok = devmem_open_context(ctx, &mem, mem_why, sizeof mem_why) == 0;
    return ctx ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    sgk_context_destroy(ctx);
    ctx = NULL;
    return 0;
}

int main(int argc, char **argv)
{
    backend = sgkt_backend_arg(argc, argv);
    sgk_backend_info info;
    int skip = sgkt_backend_usable(backend, &info);
    if (skip)
        return skip;
    base_seed = sgkt_env_seed(DEFAULT_SEED);
    printf("conformance: backend=%s base seed 0x%016llx (set SGK_TEST_SEED to change)\n",
           backend, (unsigned long long)base_seed);

    struct CMUnitTest *tests = calloc((size_t)sgkt_case_count + 4, sizeof *tests);
    if (!tests)
        return 1;
    size_t n = 0;
    for (int i = 0; i < sgkt_case_count; i++) {
        if (!sgkt_case_enabled(&sgkt_cases[i]))
            continue;
        struct CMUnitTest t = {sgkt_cases[i].name, test_case, NULL, NULL,
                               (void *)&sgkt_cases[i]};
        tests[n++] = t;
    }
    struct CMUnitTest iso = {"nan_isolation", test_nan_isolation, NULL, NULL, NULL};
    struct CMUnitTest conc = {"concurrent_forward", test_concurrent_forward, NULL, NULL, NULL};
    struct CMUnitTest sum = {"summary", test_summary, NULL, NULL, NULL};
    struct CMUnitTest repack = {"set_weights", test_set_weights, NULL, NULL, NULL};
    tests[n++] = repack;
    tests[n++] = iso;
    tests[n++] = conc;
    tests[n++] = sum;

    const char *filter = getenv("SGK_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    int devices[2], n_dev = sgkt_test_devices(devices), failed = 0;
    for (int d = 0; d < n_dev; d++) {
        device = devices[d];
        char group[96];
        snprintf(group, sizeof group, "conformance-%s-device%d", backend, device);
        failed += _cmocka_run_group_tests(group, tests, n, group_setup, group_teardown);
    }
    free(tests);
    return failed ? 1 : 0;
}
