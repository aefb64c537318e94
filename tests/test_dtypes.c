/* The conformance table in SGK_DTYPE_BF16 and SGK_DTYPE_F16 (SPEC section 6):
 * weights and inputs are drawn as in test_conformance, rounded to the dtype
 * (kernels/dtype.h), and the double reference runs on the rounded values;
 * every variant that takes the shape, and the automatic choice, must come
 * within relative L2 1e-2 of it, with the same non-finite elements, fully
 * masked rows equal to their input bit for bit, and the guards around the
 * 16-bit output intact; NaN and Inf inputs where the math puts them; the
 * training calls against the reference backward.
 * Then the dtype's own argument rules: 2-byte alignment (not 4), and a
 * forced variant that does not take the shape refused. A dtype the backend
 * does not run is skipped with its message; a backend that runs neither
 * exits 77.
 * Usage: test_dtypes BACKEND (SGK_TEST_SEED changes the base seed). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtype.h"
#include "devmem.h"
#include "harness.h"

static const char *g_backend;
static sgk_context *g_ctx;
static uint64_t g_seed;
static int g_runs_bf16, g_runs_f16; /* probed once, in main */

#define REL_L2_16 1e-2

static float from16(sgk_dtype t, uint16_t h)
{
    return t == SGK_DTYPE_BF16 ? sgk_f32_from_bf16(h) : sgk_f32_from_f16(h);
}

/* A case's weights and inputs in the dtype (the floats rounded to match). */
typedef struct case16 {
    sgkt_case16 h;
    sgk_layer_desc desc;
} case16;

static void make16(sgk_dtype t, sgkt_prepared *p, case16 *c)
{
    assert_int_equal(sgkt_round16(t, &p->w, &p->in, &c->h), 0);
    assert_int_equal(sgkt_prepare_reference(p), 0);
    sgk_layer_desc_init(&c->desc);
    sgkt_desc16(t, &p->w, &c->h, &c->desc);
}

static void free16(case16 *c) { sgkt_case16_free(&c->h); }

/* One forward (host form, or the device form on a host-memory backend)
 * into a guarded 16-bit buffer poisoned with NaN; 0 when everything holds. */
static int check_run(sgk_dtype t, sgk_layer *layer, const sgkt_prepared *p, const case16 *c, int device_api,
                     const char *what)
{
    const size_t n = p->n_out, bytes = n * sizeof(uint16_t);
    uint16_t *out = sgkt_guarded_alloc(bytes);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++)
        out[i] = 0x7fffu; /* NaN in both dtypes */
    sgk_status st;
    void *ws = NULL;
    size_t wsb = 0;
    if (device_api) {
        assert_int_equal(sgk_workspace_size(layer, p->in.B, p->in.N, &wsb), SGK_OK);
        ws = wsb ? sgkt_guarded_alloc(wsb) : NULL;
        st = sgk_forward_device(layer, p->in.B, p->in.N, c->h.nodes, c->h.pair, p->in.edge_mask, p->in.mask_type,
                                out, ws, wsb, NULL);
    } else {
        st = sgk_forward(layer, p->in.B, p->in.N, c->h.nodes, c->h.pair, p->in.edge_mask, p->in.mask_type, out);
    }
    int bad = 0;
    if (st != SGK_OK) {
        printf("FAIL %s: status %s: %s\n", what, sgk_status_string(st), sgk_last_error());
        bad = 1;
    } else {
        float *got = malloc(n * sizeof(float));
        assert_non_null(got);
        for (size_t i = 0; i < n; i++)
            got[i] = from16(t, out[i]);
        const sgkt_error e = sgkt_compare(got, p->ref, n);
        /* fully masked rows: the input's 16 bits */
        const size_t D = (size_t)p->in.D;
        int rows_exact = 1;
        for (int64_t r = 0; r < p->in.B * p->in.N; r++) {
            const int64_t b = r / p->in.N, i = r % p->in.N;
            int edges = 0;
            for (int64_t j = 0; j < p->in.N && !edges; j++)
                edges = sgkt_mask_is_edge(p->in.edge_mask, p->in.mask_type, (size_t)((b * p->in.N + i) * p->in.N + j));
            if (!edges && memcmp(out + (size_t)r * D, c->h.nodes + (size_t)r * D, D * sizeof(uint16_t)) != 0)
                rows_exact = 0;
        }
        const int guards = sgkt_guard_ok(out, bytes) && (!ws || sgkt_guard_ok(ws, wsb));
        bad = !(e.mismatched_nonfinite == 0 && e.rel_l2 <= REL_L2_16 && rows_exact && guards);
        if (bad)
            printf("FAIL %s: rel_l2=%.3e (bound %.0e) nonfinite_mismatch=%zu at %zu (got %.9g ref %.9g) "
                   "masked_rows_exact=%d guards=%d seed=0x%016llx\n",
                   what, e.rel_l2, REL_L2_16, e.mismatched_nonfinite, e.worst, (double)got[e.worst],
                   p->ref[e.worst], rows_exact, guards, (unsigned long long)p->seed);
        free(got);
    }
    if (ws)
        sgkt_guarded_free(ws);
    sgkt_guarded_free(out);
    return bad;
}

/* Whether the backend runs dtype; prints why not. */
static int probe(sgk_dtype t)
{
    sgkt_prepared p;
    const sgkt_case tiny = {"tiny", 1, 3, 8, 2, 3, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0};
    assert_int_equal(sgkt_prepare(&p, &tiny, 1), 0);
    case16 c;
    make16(t, &p, &c);
    sgk_layer *layer = NULL;
    const sgk_status st = sgk_layer_create(g_ctx, &c.desc, &layer);
    if (st == SGK_OK)
        sgk_layer_destroy(layer);
    else
        printf("dtypes: backend=%s %s: %s (%s)\n", g_backend, t == SGK_DTYPE_BF16 ? "bf16" : "f16",
               sgk_status_string(st), sgk_last_error());
    free16(&c);
    sgkt_prepared_free(&p);
    /* only a refusal of the dtype means the backend does not run it; any
     * other failure is the test's */
    return st == SGK_OK ? 1 : st == SGK_ERR_UNSUPPORTED ? 0 : -1;
}

/* The case c (p rounded) through the automatic choice and every variant
 * that takes its shape, in forms call forms (host, then device); what
 * names the case in a failure. Returns the failures, adds the runs. */
static int each_variant(sgk_dtype t, const sgkt_prepared *p, const case16 *c, int forms, const char *what,
                        int *runs)
{
    const char *tname = t == SGK_DTYPE_BF16 ? "bf16" : "f16";
    sgk_layer *layer = NULL;
    assert_int_equal(sgk_layer_create(g_ctx, &c->desc, &layer), SGK_OK);
    const char *names[16];
    int supported[16], count = 0, bad = 0;
    assert_int_equal(sgk_layer_variants(layer, p->in.B, p->in.N, names, supported, 16, &count), SGK_OK);
    for (int v = -1; v < count; v++) {
        if (v >= 0 && !supported[v])
            continue;
        assert_int_equal(sgk_layer_set_variant(layer, v < 0 ? NULL : names[v]), SGK_OK);
        for (int dev = 0; dev < forms; dev++) {
            char full[240];
            snprintf(full, sizeof full, "backend=%s dtype=%s %s variant=%s%s", g_backend, tname, what,
                     v < 0 ? "auto" : names[v], dev ? " (device form)" : "");
            bad += check_run(t, layer, p, c, dev, full);
            (*runs)++;
        }
    }
    sgk_layer_destroy(layer);
    return bad;
}

static void table(sgk_dtype t)
{
    const char *tname = t == SGK_DTYPE_BF16 ? "bf16" : "f16";
    if (!(t == SGK_DTYPE_BF16 ? g_runs_bf16 : g_runs_f16)) {
        printf("dtypes: backend=%s leaves %s out\n", g_backend, tname);
        return;
    }
    int bad = 0, runs_done = 0;
    /* the device form takes host pointers only where device memory is host memory */
    const int forms = strcmp(g_backend, "cpu") == 0 ? 2 : 1;
    for (int k = 0; k < sgkt_case_count; k++) {
        const sgkt_case *cs = &sgkt_cases[k];
        if (!sgkt_case_enabled(cs))
            continue;
        sgkt_prepared p;
        assert_int_equal(sgkt_prepare(&p, cs, sgkt_seed_mix(g_seed, (uint64_t)k)), 0);
        case16 c;
        make16(t, &p, &c);
        char what[120];
        snprintf(what, sizeof what, "case=%s", cs->name);
        bad += each_variant(t, &p, &c, forms, what, &runs_done);
        free16(&c);
        sgkt_prepared_free(&p);
    }
    printf("dtypes: backend=%s dtype=%s: %d runs, %d failed\n", g_backend, tname, runs_done, bad);
    assert_int_equal(bad, 0);
}

/* NaN and Inf stay where the math puts them in a 16-bit layer too
 * (test_nonfinite's rule): a poisoned node reaches the rows that attend to
 * it and no other, a poisoned pair its own row. Arithmetic makes NaNs
 * whose payload a TF32 rounding can carry into the sign, so the shapes are
 * ones where CUDA's tuned-tiled multiplies computed operands in one TF32
 * pass: a small one, and one wide enough for warpgroup projections, both
 * with the relation MLP as a pass of its own (P > 16). */
static void nonfinite(sgk_dtype t)
{
    const char *tname = t == SGK_DTYPE_BF16 ? "bf16" : "f16";
    if (!(t == SGK_DTYPE_BF16 ? g_runs_bf16 : g_runs_f16)) {
        printf("dtypes: backend=%s leaves %s out\n", g_backend, tname);
        return;
    }
    static const sgkt_case shapes[] = {
        {"nonfinite_small", 2, 9, 16, 2, 24, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
        {"nonfinite_wide", 16, 64, 192, 6, 32, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    };
    static const struct {
        const char *what;
        int in_pair; /* 0: nodes[0, 0, 0]; 1: pair_feats[0, 1, 2, 0] */
        float value;
    } poisons[] = {
        {"NaN in node 0", 0, NAN},
        {"+Inf in node 0", 0, INFINITY},
        {"NaN in the pair (1, 2)", 1, NAN},
    };
    int bad = 0, runs_done = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const sgkt_case *cs = &shapes[k];
        if (!sgkt_case_enabled(cs))
            continue;
        for (size_t q = 0; q < sizeof poisons / sizeof poisons[0]; q++) {
            sgkt_prepared p;
            assert_int_equal(sgkt_prepare(&p, cs, sgkt_seed_mix(g_seed ^ 0x6e616e00ull, 8 * k + q)), 0);
            /* batch entry 0: rows 1 and 2 do not attend to node 0, row 3 attends to nothing */
            const int64_t N = cs->N;
            float *mask = (float *)p.in.edge_mask;
            mask[1 * N + 0] = 0.0f;
            mask[2 * N + 0] = 0.0f;
            for (int64_t j = 0; j < N; j++)
                mask[3 * N + j] = 0.0f;
            if (poisons[q].in_pair)
                p.in.pair_feats[(size_t)(1 * N + 2) * (size_t)cs->P] = poisons[q].value;
            else
                p.in.nodes[0] = poisons[q].value;
            case16 c;
            make16(t, &p, &c); /* the reference on the rounded, poisoned inputs */
            char what[120];
            snprintf(what, sizeof what, "case=%s %s", cs->name, poisons[q].what);
            bad += each_variant(t, &p, &c, 1, what, &runs_done);
            free16(&c);
            sgkt_prepared_free(&p);
        }
    }
    printf("dtypes: backend=%s dtype=%s: %d non-finite runs, %d failed\n", g_backend, tname, runs_done, bad);
    assert_int_equal(bad, 0);
}

/* The training calls on a 16-bit layer, over the cases the double
 * reference backward takes quickly: out as the forward's contract, the
 * saved log-sum-exp within 1e-3 of the reference's, and every gradient
 * (in the layer's dtype, NaN-poisoned before) within the 16-bit contract of
 * sgk_ref_backward on the rounded weights, inputs and d_out: relative L2
 * <= 1e-2 (the reference's norm floored, as for float32), and finite where
 * the reference is. */
static void train_table(sgk_dtype t)
{
    const char *tname = t == SGK_DTYPE_BF16 ? "bf16" : "f16";
    if (!(t == SGK_DTYPE_BF16 ? g_runs_bf16 : g_runs_f16))
        return;
    int bad = 0, runs = 0;
    for (int k = 0; k < sgkt_case_count; k++) {
        const sgkt_case *cs = &sgkt_cases[k];
        const double pairs = (double)cs->B * (double)cs->N * (double)cs->N;
        if (!sgkt_case_enabled(cs) ||
            pairs * ((double)cs->P * cs->P + (double)cs->D) + (double)cs->B * cs->N * (double)cs->D * cs->D > 1e8)
            continue;
        sgkt_prepared p;
        assert_int_equal(sgkt_prepare(&p, cs, sgkt_seed_mix(g_seed ^ 0x7261696eull, (uint64_t)k)), 0);
        case16 c;
        make16(t, &p, &c);
        sgk_layer *layer = NULL;
        assert_int_equal(sgk_layer_create(g_ctx, &c.desc, &layer), SGK_OK);
        const size_t n = p.n_out, BHN = (size_t)(cs->B * cs->H * cs->N);
        size_t cnt[SGKT_N_GRADS];
        sgkt_grad_counts(cs->B, cs->N, cs->D, cs->H, cs->P, cnt);
        /* d_out rounded to the dtype, and its 16 bits */
        float *dout = malloc(n * sizeof(float));
        uint16_t *dout16 = malloc(n * sizeof(uint16_t)), *out16 = malloc(n * sizeof(uint16_t));
        float *saved = malloc(BHN * sizeof(float)), *got = NULL;
        double *rmax = malloc(BHN * sizeof(double)), *rsum = malloc(BHN * sizeof(double));
        double *rout = malloc(n * sizeof(double));
        assert_true(dout && dout16 && out16 && saved && rmax && rsum && rout);
        sgkt_rng rng;
        sgkt_rng_seed(&rng, p.seed ^ 0xd0u);
        sgkt_fill_normal(&rng, dout, n, 0.0, 1.0);
        for (size_t i = 0; i < n; i++) {
            dout16[i] = t == SGK_DTYPE_BF16 ? sgk_bf16_from_f32(dout[i]) : sgk_f16_from_f32(dout[i]);
            dout[i] = from16(t, dout16[i]);
        }
        sgk_ref_layer ref;
        sgkt_weights_to_ref(&p.w, &ref);
        assert_int_equal(sgk_ref_forward_stats(&ref, cs->B, cs->N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                               p.in.mask_type, rout, NULL, rmax, rsum),
                         0);
        sgk_ref_grads rg;
        memset(&rg, 0, sizeof rg);
        uint16_t *g16[SGKT_N_GRADS];
        sgk_grads g;
        memset(&g, 0, sizeof g);
        for (int i = 0; i < SGKT_N_GRADS; i++) {
            *sgkt_ref_grad_slot(&rg, i) = malloc(cnt[i] * sizeof(double));
            g16[i] = sgkt_guarded_alloc(cnt[i] * sizeof(uint16_t));
            assert_non_null(*sgkt_ref_grad_slot(&rg, i));
            assert_non_null(g16[i]);
            for (size_t e = 0; e < cnt[i]; e++)
                g16[i][e] = 0x7fffu; /* NaN in both dtypes */
            *sgkt_grad_slot(&g, i) = g16[i];
        }
        assert_int_equal(sgk_ref_backward(&ref, cs->B, cs->N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                          p.in.mask_type, dout, &rg),
                         0);
        char what[160];
        snprintf(what, sizeof what, "backend=%s dtype=%s case=%s training", g_backend, tname, cs->name);
        sgk_status st = sgk_forward_train(layer, cs->B, cs->N, c.h.nodes, c.h.pair, p.in.edge_mask, p.in.mask_type,
                                          out16, saved);
        if (st == SGK_OK)
            st = sgk_backward(layer, cs->B, cs->N, c.h.nodes, c.h.pair, p.in.edge_mask, p.in.mask_type, saved,
                              dout16, &g);
        runs++;
        if (st != SGK_OK) {
            printf("FAIL %s: %s: %s\n", what, sgk_status_string(st), sgk_last_error());
            bad++;
        } else {
            got = malloc(n * sizeof(float));
            assert_non_null(got);
            for (size_t i = 0; i < n; i++)
                got[i] = from16(t, out16[i]);
            const sgkt_error e = sgkt_compare(got, rout, n);
            size_t lse_bad = 0;
            for (size_t i = 0; i < BHN; i++) {
                const double want = rsum[i] > 0 ? rmax[i] + log(rsum[i]) : -INFINITY;
                lse_bad += isinf(want) ? !(isinf(saved[i]) && saved[i] < 0)
                                       : !(fabs(saved[i] - want) <= 1e-3 * fmax(1.0, fabs(want)));
            }
            if (!(e.rel_l2 <= REL_L2_16 && e.mismatched_nonfinite == 0 && lse_bad == 0)) {
                printf("FAIL %s: out rel L2 %.2e, saved rows off %zu (seed 0x%016llx)\n", what, e.rel_l2, lse_bad,
                       (unsigned long long)p.seed);
                bad++;
            }
            free(got);
            for (int i = 0; i < SGKT_N_GRADS; i++) {
                float *gf = malloc((cnt[i] ? cnt[i] : 1) * sizeof(float));
                assert_non_null(gf);
                size_t fin = 0;
                const double *want = *sgkt_ref_grad_slot(&rg, i);
                for (size_t e2 = 0; e2 < cnt[i]; e2++) {
                    gf[e2] = from16(t, g16[i][e2]);
                    fin += isfinite(want[e2]) && !isfinite(gf[e2]);
                }
                const double rel = sgkt_rel_l2_floored(gf, want, cnt[i]);
                if (!(rel <= REL_L2_16) || fin || !sgkt_guard_ok(g16[i], cnt[i] * sizeof(uint16_t))) {
                    printf("FAIL %s grad %s: rel L2 %.2e (bound %.0e), finiteness mismatches %zu (seed 0x%016llx)\n",
                           what, sgkt_grad_names[i], rel, REL_L2_16, fin, (unsigned long long)p.seed);
                    bad++;
                }
                free(gf);
            }
        }
        for (int i = 0; i < SGKT_N_GRADS; i++) {
            free(*sgkt_ref_grad_slot(&rg, i));
            sgkt_guarded_free(g16[i]);
        }
        free(dout);
        free(dout16);
        free(out16);
        free(saved);
        free(rmax);
        free(rsum);
        free(rout);
        sgk_layer_destroy(layer);
        free16(&c);
        sgkt_prepared_free(&p);
    }
    printf("dtypes: backend=%s dtype=%s: %d training runs, %d failures\n", g_backend, tname, runs, bad);
    assert_int_equal(bad, 0);
}

/* The 16-bit tests, each run once a dtype: state points at the dtype. */
static sgk_dtype dtype_of(void **state) { return *(const sgk_dtype *)*state; }
static void test_table(void **state) { table(dtype_of(state)); }
static void test_nonfinite(void **state) { nonfinite(dtype_of(state)); }
static void test_train(void **state) { train_table(dtype_of(state)); }

/* 16-bit buffers need 2-byte alignment, not float's; an odd address is
 * refused naming the buffer, with the output untouched. */
static void test_rules(void **state)
{
    (void)state;
    const sgk_dtype t = g_runs_bf16 ? SGK_DTYPE_BF16 : SGK_DTYPE_F16; /* main skipped a backend of neither */
    const sgkt_case cs = {"rules", 2, 9, 16, 2, 5, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_U8, 0};
    sgkt_prepared p;
    assert_int_equal(sgkt_prepare(&p, &cs, g_seed), 0);
    case16 c;
    make16(t, &p, &c);
    sgk_layer *layer = NULL;
    assert_int_equal(sgk_layer_create(g_ctx, &c.desc, &layer), SGK_OK);
    const size_t nn = p.n_out, np = (size_t)(cs.B * cs.N * cs.N * cs.P);
    /* 2 mod 4: fine for 16-bit elements */
    uint16_t *nodes = malloc((nn + 2) * 2), *pair = malloc((np + 2) * 2), *out = malloc((nn + 2) * 2);
    assert_non_null(nodes);
    assert_non_null(pair);
    assert_non_null(out);
    memcpy(nodes + 1, c.h.nodes, nn * 2);
    memcpy(pair + 1, c.h.pair, np * 2);
    assert_int_equal(sgk_forward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type, out + 1),
                     SGK_OK);
    /* odd addresses */
    const char *bytes_n = (const char *)nodes + 1;
    for (size_t i = 0; i < nn + 2; i++)
        out[i] = 0x7fffu;
    assert_int_equal(sgk_forward(layer, cs.B, cs.N, bytes_n, pair + 1, p.in.edge_mask, p.in.mask_type, out + 1),
                     SGK_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(sgk_last_error(), "nodes"));
    assert_int_equal(sgk_forward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type,
                                 (char *)out + 1),
                     SGK_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(sgk_last_error(), "out"));
    for (size_t i = 0; i < nn + 2; i++)
        assert_int_equal(out[i], 0x7fffu);
    /* the training calls: 16-bit buffers at 2 mod 4 run; an odd d_out or
     * gradient is refused naming it, with no gradient written */
    {
        size_t sb = 0;
        assert_int_equal(sgk_saved_size(layer, cs.B, cs.N, &sb), SGK_OK);
        float *saved = malloc(sb);
        uint16_t *dout = calloc(nn + 2, 2), *gn = malloc((nn + 2) * 2);
        assert_true(saved && dout && gn);
        assert_int_equal(sgk_forward_train(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type,
                                           out + 1, saved),
                         SGK_OK);
        sgk_grads g;
        memset(&g, 0, sizeof g);
        g.nodes = gn + 1;
        assert_int_equal(sgk_backward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type, saved,
                                      dout + 1, &g),
                         SGK_OK);
        for (size_t i = 0; i < nn + 2; i++)
            gn[i] = 0x7fffu;
        assert_int_equal(sgk_backward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type, saved,
                                      (char *)dout + 1, &g),
                         SGK_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(sgk_last_error(), "d_out"));
        g.nodes = (char *)gn + 1;
        assert_int_equal(sgk_backward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type, saved,
                                      dout + 1, &g),
                         SGK_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(sgk_last_error(), "grads->nodes"));
        for (size_t i = 0; i < nn + 2; i++)
            assert_int_equal(gn[i], 0x7fffu);
        free(saved);
        free(dout);
        free(gn);
    }
    /* a variant that does not take the shape, forced: refused with a
     * message that names the layer's dtype, out untouched */
    const char *names[16];
    int supported[16], count = 0;
    assert_int_equal(sgk_layer_variants(layer, cs.B, cs.N, names, supported, 16, &count), SGK_OK);
    for (int v = 0; v < count; v++) {
        if (supported[v])
            continue;
        /* poisoned again: the training calls above wrote out */
        for (size_t i = 0; i < nn + 2; i++)
            out[i] = 0x7fffu;
        assert_int_equal(sgk_layer_set_variant(layer, names[v]), SGK_OK);
        assert_int_equal(sgk_forward(layer, cs.B, cs.N, nodes + 1, pair + 1, p.in.edge_mask, p.in.mask_type, out + 1),
                         SGK_ERR_UNSUPPORTED);
        assert_non_null(strstr(sgk_last_error(), t == SGK_DTYPE_BF16 ? "SGK_DTYPE_BF16" : "SGK_DTYPE_F16"));
        for (size_t i = 0; i < nn + 2; i++)
            assert_int_equal(out[i], 0x7fffu);
    }
    assert_int_equal(sgk_layer_set_variant(layer, NULL), SGK_OK);
    /* new 16-bit weights, from host and device pointers: the same bits as a
     * layer built from them */
    {
        sgkt_prepared q;
        assert_int_equal(sgkt_prepare(&q, &cs, g_seed + 1), 0);
        case16 c2;
        make16(t, &q, &c2);
        sgk_layer *fresh = NULL;
        assert_int_equal(sgk_layer_create(g_ctx, &c2.desc, &fresh), SGK_OK);
        uint16_t *want = malloc(nn * 2), *got = malloc(nn * 2);
        assert_non_null(want);
        assert_non_null(got);
        assert_int_equal(sgk_forward(fresh, cs.B, cs.N, c.h.nodes, c.h.pair, p.in.edge_mask, p.in.mask_type, want),
                         SGK_OK);
        /* the device form takes the weights from buffers of the backend's
         * own memory (host memory on cpu) */
        devmem m;
        char why[256];
        assert_int_equal(devmem_open_context(g_ctx, &m, why, sizeof why), 0);
        void *bufs[10] = {NULL};
        sgk_layer_desc ddesc = c2.desc;
        const void **dptr[10] = {&ddesc.ln_gamma, &ddesc.ln_beta, &ddesc.wq, &ddesc.wk, &ddesc.wv,
                                 &ddesc.wo, &ddesc.w1, &ddesc.b1, &ddesc.w2, &ddesc.b2};
        const size_t D = (size_t)cs.D, H = (size_t)cs.H, P = (size_t)cs.P;
        const size_t cnt[10] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
        for (int i = 0; i < 10; i++) {
            assert_int_equal(m.alloc(&bufs[i], cnt[i] * 2), 0);
            assert_int_equal(m.h2d(bufs[i], c2.h.w[i], cnt[i] * 2), 0);
            *dptr[i] = bufs[i];
        }
        for (int dev = 0; dev < 2; dev++) {
            assert_int_equal(dev ? sgk_layer_set_weights_device(layer, &ddesc, NULL)
                                 : sgk_layer_set_weights(layer, &c2.desc),
                             SGK_OK);
            assert_int_equal(sgk_forward(layer, cs.B, cs.N, c.h.nodes, c.h.pair, p.in.edge_mask, p.in.mask_type, got),
                             SGK_OK);
            assert_memory_equal(got, want, nn * 2);
            assert_int_equal(sgk_layer_set_weights(layer, &c.desc), SGK_OK);
        }
        for (int i = 0; i < 10; i++)
            m.release(bufs[i]);
        free(want);
        free(got);
        sgk_layer_destroy(fresh);
        free16(&c2);
        sgkt_prepared_free(&q);
    }
    free(nodes);
    free(pair);
    free(out);
    sgk_layer_destroy(layer);
    free16(&c);
    sgkt_prepared_free(&p);
}

int main(int argc, char **argv)
{
    g_backend = sgkt_backend_arg(argc, argv);
    sgk_backend_info info;
    int usable = sgkt_backend_usable(g_backend, &info);
    if (usable)
        return usable;
    g_ctx = sgkt_open_context(g_backend, 0);
    if (!g_ctx)
        return 1;
    g_seed = sgkt_env_seed(0x44545950ull);
    printf("dtypes: backend=%s base seed 0x%016llx (set SGK_TEST_SEED to change)\n", g_backend,
           (unsigned long long)g_seed);
    g_runs_bf16 = probe(SGK_DTYPE_BF16);
    g_runs_f16 = probe(SGK_DTYPE_F16);
    if (g_runs_bf16 < 0 || g_runs_f16 < 0) {
        printf("dtypes: backend=%s failed to create a 16-bit layer for a reason other than its dtype\n",
               g_backend);
        return 1;
    }
    if (!g_runs_bf16 && !g_runs_f16) {
        printf("SKIP %s: runs neither SGK_DTYPE_BF16 nor SGK_DTYPE_F16\n", g_backend);
        sgk_context_destroy(g_ctx);
        return SGKT_EXIT_SKIP;
    }
    static sgk_dtype bf16 = SGK_DTYPE_BF16, f16 = SGK_DTYPE_F16;
    const struct CMUnitTest tests[] = {
        {"test_bf16_table", test_table, NULL, NULL, &bf16},
        {"test_f16_table", test_table, NULL, NULL, &f16},
        {"test_bf16_nonfinite", test_nonfinite, NULL, NULL, &bf16},
        {"test_f16_nonfinite", test_nonfinite, NULL, NULL, &f16},
        cmocka_unit_test(test_rules),
        {"test_bf16_train", test_train, NULL, NULL, &bf16},
        {"test_f16_train", test_train, NULL, NULL, &f16},
    };
    int rc = cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
    sgk_context_destroy(g_ctx);
    return rc;
}
