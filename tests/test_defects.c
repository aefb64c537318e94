/* The defects of the first attempt at this operator (SPEC section 2), one
 * named test each, run on every kernel variant of the backend.
 *
 * Every test first proves it has teeth: the reference run with that very flaw
 * re-created (sgk_ref_forward_flawed) must FAIL the test's own check. Then the
 * backend's variants must pass it.
 *
 * Usage: test_defects BACKEND (or SGK_TEST_BACKEND); exits 77 when the
 * backend cannot run here. SGK_TEST_DEVICE and SGK_TEST_SEED as in
 * test_conformance. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define MAX_VARIANTS 32
#define DEFAULT_SEED 0x44454631ull /* "DEF1" */

static const char *backend;
static int device;
static uint64_t base_seed;
static sgk_context *ctx;

typedef struct defect {
    const char *name;
    sgkt_case shape;
    unsigned flaw;         /* the flaw the teeth check re-creates */
    void (*tweak)(sgkt_prepared *p, sgkt_rng *rng);
    int repeats;           /* runs per variant; > 1 also demands bitwise-identical results */
    int may_be_unsupported; /* a size past the required range: refusing it is fine, a wrong answer is not */
    double delta_tol;      /* > 0: also bound the rel L2 error of out - nodes (the layer's own term) */
} defect;

/* Relative L2 error of the residual branch alone: out - nodes against
 * ref - nodes. The residual carries |nodes| into the plain measure and so
 * hides errors of the attention path from it. */
static double delta_rel_l2(const sgkt_prepared *p, const float *out)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < p->n_out; i++) {
        double x = (double)p->in.nodes[i];
        double g = (double)out[i] - x, r = p->ref[i] - x;
        num += (g - r) * (g - r);
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

/* The check every backend result and every flawed reference must face. */
static int check_output(const defect *d, const sgkt_prepared *p, const float *out, char *why,
                        size_t len)
{
    sgkt_error e = sgkt_compare(out, p->ref, p->n_out);
    if (!sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL)) {
        snprintf(why, len, "rel_l2=%.3e max_abs=%.3e nonfinite_mismatch=%zu at %zu (got %.9g ref %.9g)",
                 e.rel_l2, e.max_abs, e.mismatched_nonfinite, e.worst, (double)out[e.worst],
                 p->ref[e.worst]);
        return 0;
    }
    for (size_t i = 0; i < p->n_out; i++)
        if (!isfinite(out[i])) {
            snprintf(why, len, "non-finite output at %zu", i);
            return 0;
        }
    if (!sgkt_masked_rows_exact(&p->in, out)) {
        snprintf(why, len, "a fully masked row differs from its nodes row");
        return 0;
    }
    if (d->delta_tol > 0) {
        double dr = delta_rel_l2(p, out);
        if (getenv("SGK_TEST_VERBOSE"))
            printf("  %s: rel_l2=%.3e of out - nodes\n", d->name, dr);
        if (!(dr <= d->delta_tol)) {
            snprintf(why, len, "out - nodes: rel_l2=%.3e > %.1e", dr, d->delta_tol);
            return 0;
        }
    }
    return 1;
}

static void prepare_defect(const defect *d, sgkt_prepared *p, int sub)
{
    uint64_t tag = 1469598103934665603ull; /* FNV-1a of the name: one seed per test */
    for (const char *c = d->name; *c; c++)
        tag = (tag ^ (unsigned char)*c) * 1099511628211ull;
    uint64_t seed = sgkt_seed_mix(base_seed, tag + (uint64_t)sub);
    assert_int_equal(sgkt_prepare(p, &d->shape, seed), 0);
    if (d->tweak) {
        sgkt_rng rng;
        sgkt_rng_seed(&rng, seed ^ 0x7eeull);
        d->tweak(p, &rng);
        assert_int_equal(sgkt_prepare_reference(p), 0);
    }
}

/* The flawed reference must fail check_output: otherwise the test is blind. */
static void assert_teeth(const defect *d, const sgkt_prepared *p)
{
    float *flawed = malloc(p->n_out * sizeof(float));
    assert_non_null(flawed);
    sgk_ref_layer L;
    sgkt_weights_to_ref(&p->w, &L);
    assert_int_equal(sgk_ref_forward_flawed(&L, p->in.B, p->in.N, p->in.nodes, p->in.pair_feats,
                                            p->in.edge_mask, p->in.mask_type, d->flaw, NULL,
                                            flawed),
                     0);
    char why[256] = "";
    int caught = !check_output(d, p, flawed, why, sizeof why);
    printf("teeth: %s (B=%lld N=%lld D=%lld H=%lld P=%lld): the flawed reference %s (%s)\n",
           d->name, (long long)d->shape.B, (long long)d->shape.N, (long long)d->shape.D,
           (long long)d->shape.H, (long long)d->shape.P, caught ? "is caught" : "PASSES",
           caught ? why : "the check cannot see this defect");
    if (d->delta_tol > 0) {
        /* the tighter measure must see the flaw on its own, with room to spare */
        double dr = delta_rel_l2(p, flawed);
        printf("teeth: %s: flawed out - nodes rel_l2=%.3e (bound %.1e)\n", d->name, dr, d->delta_tol);
        caught = caught && dr > 5 * d->delta_tol;
    }
    free(flawed);
    assert_true(caught);
}

/* Runs every variant that supports the shape; returns the number run. */
static int run_backend(const defect *d, const sgkt_prepared *p, int *failures)
{
    sgk_layer *layer = NULL;
    sgk_status st = sgkt_layer_from_weights(ctx, &p->w, &layer);
    if (st != SGK_OK) {
        printf("%s %s: backend=%s refuses the layer (D=%lld H=%lld P=%lld): %s: %s\n",
               d->may_be_unsupported && st == SGK_ERR_UNSUPPORTED ? "note" : "FAIL", d->name,
               backend, (long long)p->w.D, (long long)p->w.H, (long long)p->w.P,
               sgk_status_string(st), sgk_last_error());
        if (!(d->may_be_unsupported && st == SGK_ERR_UNSUPPORTED))
            (*failures)++;
        return 0;
    }
    const char *names[MAX_VARIANTS];
    int supported[MAX_VARIANTS], count = 0, ran = 0;
    st = sgk_layer_variants(layer, p->in.B, p->in.N, names, supported, MAX_VARIANTS, &count);
    if (st != SGK_OK)
        (*failures)++;
    for (int v = 0; st == SGK_OK && v < count && v < MAX_VARIANTS; v++) {
        if (!supported[v]) {
            printf("note %s: backend=%s variant=%s does not support B=%lld N=%lld\n", d->name,
                   backend, names[v], (long long)p->in.B, (long long)p->in.N);
            continue;
        }
        assert_int_equal(sgk_layer_set_variant(layer, names[v]), SGK_OK);
        float *first = NULL;
        for (int rep = 0; rep < (d->repeats > 0 ? d->repeats : 1); rep++) {
            sgkt_run r = sgkt_run_forward(layer, &p->in, 0);
            char why[256] = "";
            int ok = 0;
            if (r.status != SGK_OK)
                snprintf(why, sizeof why, "%s: %s", sgk_status_string(r.status), sgk_last_error());
            else if (!r.guard_ok)
                snprintf(why, sizeof why, "guard bytes after the output overwritten");
            else if (check_output(d, p, r.out, why, sizeof why))
                ok = 1;
            if (ok && first && memcmp(first, r.out, p->n_out * sizeof(float)) != 0) {
                snprintf(why, sizeof why, "repeat %d differs bitwise from repeat 0", rep);
                ok = 0;
            }
            if (!ok) {
                printf("FAIL %s: backend=%s device=%d variant=%s seed=0x%016llx run %d: %s\n",
                       d->name, backend, device, names[v], (unsigned long long)p->seed, rep, why);
                (*failures)++;
            }
            if (!first && r.status == SGK_OK) {
                first = malloc(p->n_out * sizeof(float));
                assert_non_null(first);
                memcpy(first, r.out, p->n_out * sizeof(float));
            }
            sgkt_run_free(&r);
            if (!ok)
                break;
        }
        free(first);
        ran++;
    }
    sgk_layer_destroy(layer);
    return ran;
}

static void run_defect(const defect *d)
{
    sgkt_prepared p;
    prepare_defect(d, &p, 0);
    assert_teeth(d, &p);
    int failures = 0;
    int ran = run_backend(d, &p, &failures);
    printf("defect %s: backend=%s variants_run=%d failures=%d\n", d->name, backend, ran, failures);
    sgkt_prepared_free(&p);
    assert_int_equal(failures, 0);
    if (!d->may_be_unsupported && ran == 0)
        fail_msg("%s: no variant of %s supports the shape", d->name, backend);
}

/* ---- input tweaks ----------------------------------------------------- */

static void big_mlp_biases(sgkt_prepared *p, sgkt_rng *rng)
{
    /* b1 moves SiLU off its linear part; w2 scaled so the bias decides the
     * attention. A constant b2 per head cancels in the softmax, so only a
     * loss of b1 can change the output; the large b2 checks that adding it
     * does not cost precision either. */
    for (int64_t i = 0; i < p->w.P; i++)
        p->w.b1[i] = (float)((sgkt_rng_u64(rng) & 1 ? 1 : -1) * sgkt_rng_range(rng, 1.0, 3.0));
    for (int64_t i = 0; i < p->w.H * p->w.P; i++)
        p->w.w2[i] *= 4.0f;
    for (int64_t h = 0; h < p->w.H; h++)
        p->w.b2[h] = (float)sgkt_rng_range(rng, -20.0, 20.0);
}

static void large_scores(sgkt_prepared *p, sgkt_rng *rng)
{
    /* Every score near +-100 over 64 keys: the sum of a row's scores is near
     * +-6400, so exp(s - sum) is 0 (or inf) for every key, in double too;
     * and a softmax that skips the max altogether overflows float (exp(100))
     * or underflows it (exp(-100)), though the true weights are ordinary. */
    for (int64_t h = 0; h < p->w.H; h++)
        p->w.b2[h] = (float)((h % 2 ? -100.0 : 100.0) + sgkt_rng_range(rng, -1.0, 1.0));
}

static void masked_rows(sgkt_prepared *p, sgkt_rng *rng)
{
    (void)rng;
    int64_t N = p->in.N;
    float *m = p->in.edge_mask;
    for (int64_t j = 0; j < N; j++) {
        m[(0 * N + 0) * N + j] = 0.0f;          /* first row of the first entry */
        m[(1 * N + N - 1) * N + j] = 0.0f;      /* last row of the second */
        m[(0 * N + 5) * N + j] = j == 5 ? 1.0f : 0.0f; /* a row with only its self edge */
    }
    for (int64_t e = 0; e < N * N; e++)
        m[2 * N * N + e] = 0.0f; /* the whole third entry */
}

static void diverse_rows(sgkt_prepared *p, sgkt_rng *rng)
{
    /* Row statistics that differ a lot between neighbouring rows: a
     * reduction that reads a neighbour's value left in scratch is visible. */
    int64_t D = p->in.D;
    for (int64_t r = 0; r < p->in.B * p->in.N; r++) {
        double off = sgkt_rng_range(rng, -2.0, 2.0);
        double scale = pow(10.0, sgkt_rng_range(rng, -0.5, 0.5));
        for (int64_t c = 0; c < D; c++)
            p->in.nodes[r * D + c] = (float)(off + scale * sgkt_rng_normal(rng));
    }
}

static void offset_nodes(sgkt_prepared *p, sgkt_rng *rng)
{
    /* A common offset: LayerNorm statistics must be accumulated carefully. */
    (void)rng;
    for (size_t i = 0; i < p->n_out; i++)
        p->in.nodes[i] += 8.0f;
}

/* ---- the tests -------------------------------------------------------- */

static void test_defect_transposed_weights(void **state)
{
    (void)state;
    static const defect d = {"transposed_weights",
                             {"", 2, 16, 64, 4, 8, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
                             SGK_REF_FLAW_TRANSPOSED, NULL, 1, 0, 0};
    /* the reference itself must tell W from W^T on these weights */
    sgkt_prepared p;
    prepare_defect(&d, &p, 1);
    double *ref_w = malloc(p.n_out * sizeof(double));
    assert_non_null(ref_w);
    memcpy(ref_w, p.ref, p.n_out * sizeof(double));
    sgkt_transpose_square(p.w.wq, p.w.D);
    sgkt_transpose_square(p.w.wk, p.w.D);
    sgkt_transpose_square(p.w.wv, p.w.D);
    sgkt_transpose_square(p.w.wo, p.w.D);
    sgkt_transpose_square(p.w.w1, p.w.P);
    assert_int_equal(sgkt_prepare_reference(&p), 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < p.n_out; i++) {
        num += (p.ref[i] - ref_w[i]) * (p.ref[i] - ref_w[i]);
        den += ref_w[i] * ref_w[i];
    }
    printf("teeth: reference with W vs with W^T: rel_l2=%.3e\n", sqrt(num / den));
    assert_true(sqrt(num / den) > 1e-2);
    free(ref_w);
    sgkt_prepared_free(&p);
    run_defect(&d);
}

static void test_defect_mlp_bias_ignored(void **state)
{
    (void)state;
    static const defect d = {"mlp_bias_ignored",
                             {"", 2, 20, 32, 4, 8, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
                             SGK_REF_FLAW_NO_MLP_BIAS, big_mlp_biases, 1, 0, 0};
    run_defect(&d);
}

static void test_defect_softmax_max_as_sum(void **state)
{
    (void)state;
    static const defect d = {"softmax_max_as_sum",
                             {"", 2, 64, 32, 4, 8, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
                             SGK_REF_FLAW_SUM_AS_MAX, large_scores, 1, 0, 0};
    run_defect(&d);
}

static void test_defect_head_dim_over_32(void **state)
{
    (void)state;
    static const defect ds[] = {
        {"head_dim_64", {"", 2, 16, 128, 2, 4, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
         SGK_REF_FLAW_HEAD_DIM_32, NULL, 1, 0, 0},
        {"head_dim_128", {"", 2, 16, 256, 2, 4, SGKT_MASK_RANDOM, 0.6, SGK_MASK_U8, 0},
         SGK_REF_FLAW_HEAD_DIM_32, NULL, 1, 0, 0},
        {"head_dim_256", {"", 1, 16, 512, 2, 4, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
         SGK_REF_FLAW_HEAD_DIM_32, NULL, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        run_defect(&ds[i]);
}

static void test_defect_dim_over_1024(void **state)
{
    (void)state;
    /* The required range ends at D = 1024: past it a backend may refuse the
     * shape, but whatever it accepts must be right. */
    static const defect ds[] = {
        {"dim_1536", {"", 1, 12, 1536, 12, 4, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
         SGK_REF_FLAW_DIM_1024, NULL, 1, 1, 0},
        {"dim_2048", {"", 1, 10, 2048, 8, 4, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
         SGK_REF_FLAW_DIM_1024, NULL, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        run_defect(&ds[i]);
}

static void test_defect_fully_masked_row(void **state)
{
    (void)state;
    static const defect d = {"fully_masked_row",
                             {"", 3, 20, 32, 4, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
                             SGK_REF_FLAW_MASKED_NAN, masked_rows, 1, 0, 0};
    run_defect(&d);
}

static void test_defect_shared_scratch_race(void **state)
{
    (void)state;
    static const defect d = {"shared_scratch_race",
                             {"", 4, 256, 128, 4, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
                             SGK_REF_FLAW_STALE_SCRATCH, diverse_rows, 3, 0, 0};
    run_defect(&d);
}

static void test_defect_narrow_scratch(void **state)
{
    (void)state;
    /* The first attempt kept float scratch under a double dispatch: values
     * crossed a reduction at less precision than they were computed in. The
     * equivalent here is any intermediate kept narrower than float; these
     * shapes need long accurate sums (D = 1024, 2048 keys, offset rows). */
    static const defect ds[] = {
        {"narrow_scratch_long_dot", {"", 1, 16, 1024, 4, 4, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
         SGK_REF_FLAW_NARROW_SCRATCH, NULL, 1, 0, 2e-5},
        {"narrow_scratch_long_softmax", {"", 1, 2048, 16, 2, 2, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
         SGK_REF_FLAW_NARROW_SCRATCH, NULL, 1, 0, 2e-5},
        {"narrow_scratch_offset_rows", {"", 2, 32, 256, 4, 4, SGKT_MASK_RANDOM, 0.7, SGK_MASK_F32, 0},
         SGK_REF_FLAW_NARROW_SCRATCH, offset_nodes, 1, 0, 2e-5},
    };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        run_defect(&ds[i]);
}

static int group_setup(void **state)
{
    (void)state;
    ctx = sgkt_open_context(backend, device);
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
    int skip = sgkt_backend_usable(backend, NULL);
    if (skip)
        return skip;
    base_seed = sgkt_env_seed(DEFAULT_SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defect_transposed_weights),
        cmocka_unit_test(test_defect_mlp_bias_ignored),
        cmocka_unit_test(test_defect_softmax_max_as_sum),
        cmocka_unit_test(test_defect_head_dim_over_32),
        cmocka_unit_test(test_defect_dim_over_1024),
        cmocka_unit_test(test_defect_fully_masked_row),
        cmocka_unit_test(test_defect_shared_scratch_race),
        cmocka_unit_test(test_defect_narrow_scratch),
    };
    int devices[2], n_dev = sgkt_test_devices(devices), failed = 0;
    for (int d = 0; d < n_dev; d++) {
        device = devices[d];
        char group[96];
        snprintf(group, sizeof group, "defects-%s-device%d", backend, device);
        failed += _cmocka_run_group_tests(group, tests, sizeof tests / sizeof tests[0],
                                          group_setup, group_teardown);
    }
    return failed ? 1 : 0;
}
