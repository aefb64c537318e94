/* The gradient version of the conformance table: sgk_forward_train and
 * sgk_backward on every case of the table the double reference backward
 * can take in a few seconds, against sgk_ref_forward_stats and
 * sgk_ref_backward. Per gradient tensor: relative L2 <= 1e-4 (the
 * reference's norm floored, sgkt_rel_l2_floored) and max abs <= 1e-4 times the
 * larger of 1 and the reference tensor's largest magnitude; the saved log-sum-exp within 1e-5 relative; every output
 * NaN-poisoned and guarded; a second backward bitwise equal to the first;
 * a NULL member of sgk_grads left alone; the device forms on buffers of
 * the backend's memory bitwise the host forms. Then one NaN or Inf input
 * at a time on a small graph: the gradients agree with the reference's
 * wherever those are finite, and the batch entry it cannot reach stays
 * finite. Then the calls' argument checks.
 * A backend without a backward exits 77 (skip) with the library's reason.
 *
 *   test_train [backend]   (default cpu) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "devmem.h"
#include "harness.h"

#define DEFAULT_SEED 0x5452414eull
#define GRAD_REL_L2 1e-4
#define GRAD_MAX_ABS 1e-4
#define N_GRADS SGKT_N_GRADS

static const char *backend;
static uint64_t base_seed;
static sgk_context *ctx;

/* The cases the reference backward runs quickly: its O(H N^2) scores and
 * pair MLP in double. */
static int case_small_enough(const sgkt_case *c)
{
    const double pairs = (double)c->B * (double)c->N * (double)c->N;
    const double work = pairs * ((double)c->P * (double)c->P + (double)c->D) +
                        (double)c->B * (double)c->N * (double)c->D * (double)c->D;
    return sgkt_case_enabled(c) && work <= 1e8;
}

typedef struct grads_buf {
    sgk_grads g;
    size_t n[N_GRADS];
} grads_buf;

static int grads_alloc(grads_buf *b, const sgkt_case *c, unsigned skip_mask)
{
    memset(b, 0, sizeof *b);
    sgkt_grad_counts(c->B, c->N, c->D, c->H, c->P, b->n);
    for (int i = 0; i < N_GRADS; i++) {
        if (skip_mask & (1u << i))
            continue;
        float *p = sgkt_guarded_alloc(b->n[i] * sizeof(float));
        if (!p)
            return -1;
        sgkt_poison_nan(p, b->n[i]);
        *sgkt_grad_slot(&b->g, i) = p;
    }
    return 0;
}

static void grads_free(grads_buf *b)
{
    for (int i = 0; i < N_GRADS; i++)
        sgkt_guarded_free(*sgkt_grad_slot(&b->g, i));
}

/* The output's gradient the tests feed: n normal values from seed. */
static float *random_d_out(size_t n, uint64_t seed)
{
    float *d_out = malloc(n * sizeof(float));
    assert_non_null(d_out);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed ^ 0xd0u);
    sgkt_fill_normal(&rng, d_out, n, 0.0, 1.0);
    return d_out;
}

/* The reference's gradients of case c, in double. */
static void ref_grads_alloc(sgk_ref_grads *rg, const sgkt_case *c)
{
    size_t n[N_GRADS];
    memset(rg, 0, sizeof *rg);
    sgkt_grad_counts(c->B, c->N, c->D, c->H, c->P, n);
    for (int i = 0; i < N_GRADS; i++) {
        *sgkt_ref_grad_slot(rg, i) = malloc(n[i] * sizeof(double));
        assert_non_null(*sgkt_ref_grad_slot(rg, i));
    }
}

static void ref_grads_free(sgk_ref_grads *rg)
{
    for (int i = 0; i < N_GRADS; i++)
        free(*sgkt_ref_grad_slot(rg, i));
}

static double max_abs_of(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* Where the reference is finite, got must be finite too: a non-finite
 * value spreads no further than the reference lets it. (The reference may
 * be NaN where sgk is not: it multiplies masked pairs' zero weights into
 * a NaN query, which sgk never reads.) */
static size_t finiteness_mismatches(const float *got, const double *ref, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += isfinite(ref[i]) && !isfinite(got[i]);
    return bad;
}

/* Largest |got - ref| over the elements where ref is finite; infinite
 * where got is not finite there. */
static double max_abs_where_finite(const float *got, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]))
            continue;
        const double d = isfinite(got[i]) ? fabs((double)got[i] - ref[i]) : INFINITY;
        m = d > m ? d : m;
    }
    return m;
}

/* Every gradient of g against the reference's rg: the tolerances of the
 * file's head over rg's finite elements, no element non-finite where rg's
 * is finite, guards intact. Prints FAIL lines naming what; returns 1 when
 * all agree. */
static int grads_agree(const char *what, const grads_buf *g, sgk_ref_grads *rg)
{
    int ok = 1;
    for (int i = 0; i < N_GRADS; i++) {
        const float *got = *sgkt_grad_slot((sgk_grads *)&g->g, i);
        const double *want = *sgkt_ref_grad_slot(rg, i);
        const size_t n = g->n[i];
        const double rel = sgkt_rel_l2_floored(got, want, n);
        const double abs_err = max_abs_where_finite(got, want, n);
        const double scale = fmax(1.0, max_abs_of(want, n));
        const size_t fin = finiteness_mismatches(got, want, n);
        const int gok = rel <= GRAD_REL_L2 && abs_err <= GRAD_MAX_ABS * scale && fin == 0 &&
                        sgkt_guard_ok(got, n * sizeof(float));
        if (!gok)
            printf("FAIL %s grad %s: rel L2 %.2e max abs %.2e (allowed %.2e), "
                   "finiteness mismatches %zu\n",
                   what, sgkt_grad_names[i], rel, abs_err, GRAD_MAX_ABS * scale, fin);
        ok &= gok;
    }
    return ok;
}

/* sgk_forward_train_device and sgk_backward_device on copies of the
 * inputs in the backend's memory (devmem: host memory on cpu, cl_mem on
 * opencl), with a workspace of sgk_train_workspace_size bytes there,
 * give bitwise what the host forms gave (out, saved, every gradient of
 * g1); NaN-poisoned outputs. Prints FAIL and returns 0 otherwise. */
static int device_forms_match(sgk_layer *layer, const sgkt_case *c, const sgkt_prepared *p, const float *d_out,
                              const float *out, const float *saved, const grads_buf *g1)
{
    devmem m;
    char why[256] = "";
    const sgkt_inputs *in = &p->in;
    const size_t f = sizeof(float), BHN = (size_t)(c->B * c->H * c->N);
    const size_t pair_bytes = (size_t)(in->B * in->N * in->N * in->P) * f;
    const size_t mask_bytes = (size_t)(in->B * in->N * in->N) * sgkt_mask_elem_size(in->mask_type);
    size_t ws_bytes = 0;
    if (devmem_open_context(ctx, &m, why, sizeof why) != 0) {
        printf("FAIL case=%s: no device memory for the device forms: %s\n", c->name, why);
        return 0;
    }
    if (sgk_train_workspace_size(layer, c->B, c->N, &ws_bytes) != SGK_OK) {
        printf("FAIL case=%s: sgk_train_workspace_size: %s\n", c->name, sgk_last_error());
        return 0;
    }
    /* device buffers: nodes, pair, mask, d_out, out, saved, workspace, then the gradients */
    enum { NODES, PAIR, MASK, DOUT, OUT, SAVED, WS, GRADS, COUNT = GRADS + N_GRADS };
    void *dev[COUNT] = {0};
    size_t bytes[COUNT] = {p->n_out * f, pair_bytes, mask_bytes, p->n_out * f, p->n_out * f, BHN * f, ws_bytes};
    for (int i = 0; i < N_GRADS; i++)
        bytes[GRADS + i] = g1->n[i] * f;
    size_t most = 0;
    for (int i = 0; i < COUNT; i++)
        most = bytes[i] > most ? bytes[i] : most;
    float *host = malloc(most ? most : 1);
    int ok = host != NULL;
    for (int i = 0; ok && i < COUNT; i++)
        ok = m.alloc(&dev[i], bytes[i] ? bytes[i] : 1) == 0;
    if (ok) {
        ok = m.h2d(dev[NODES], in->nodes, bytes[NODES]) == 0 && m.h2d(dev[PAIR], in->pair_feats, pair_bytes) == 0 &&
             m.h2d(dev[MASK], in->edge_mask, mask_bytes) == 0 && m.h2d(dev[DOUT], d_out, bytes[DOUT]) == 0;
        for (int i = OUT; ok && i < COUNT; i++)
            if (i != WS) {
                sgkt_poison_nan(host, bytes[i] / f);
                ok = m.h2d(dev[i], host, bytes[i]) == 0;
            }
        if (!ok)
            snprintf(why, sizeof why, "copying to the device failed");
    } else {
        snprintf(why, sizeof why, "allocating device memory failed");
    }
    sgk_grads dg;
    memset(&dg, 0, sizeof dg);
    for (int i = 0; i < N_GRADS; i++)
        *sgkt_grad_slot(&dg, i) = dev[GRADS + i];
    if (ok && (sgk_forward_train_device(layer, c->B, c->N, dev[NODES], dev[PAIR], dev[MASK], in->mask_type,
                                        dev[OUT], dev[SAVED], dev[WS], ws_bytes, NULL) != SGK_OK ||
               sgk_backward_device(layer, c->B, c->N, dev[NODES], dev[PAIR], dev[MASK], in->mask_type, dev[SAVED],
                                   dev[DOUT], &dg, dev[WS], ws_bytes, NULL) != SGK_OK)) {
        snprintf(why, sizeof why, "%s", sgk_last_error());
        ok = 0;
    }
    if (ok && m.sync() != 0) {
        snprintf(why, sizeof why, "synchronising failed");
        ok = 0;
    }
    /* each output against the host forms' */
    const void *want[COUNT] = {0};
    want[OUT] = out;
    want[SAVED] = saved;
    for (int i = 0; i < N_GRADS; i++)
        want[GRADS + i] = *sgkt_grad_slot((sgk_grads *)&g1->g, i);
    for (int i = OUT; ok && i < COUNT; i++) {
        if (i == WS)
            continue;
        if (m.d2h(host, dev[i], bytes[i]) != 0) {
            snprintf(why, sizeof why, "copying back failed");
            ok = 0;
        } else if (memcmp(host, want[i], bytes[i]) != 0) {
            snprintf(why, sizeof why, "%s differs",
                     i == OUT ? "out" : i == SAVED ? "saved" : sgkt_grad_names[i - GRADS]);
            ok = 0;
        }
    }
    for (int i = 0; i < COUNT; i++)
        if (dev[i])
            m.release(dev[i]);
    free(host);
    if (!ok)
        printf("FAIL case=%s: the device forms (workspace %zu bytes, %s memory) against the host forms: %s\n",
               c->name, ws_bytes, m.what, why);
    return ok;
}

static void test_case(void **state)
{
    const sgkt_case *c = *state;
    const uint64_t seed = sgkt_seed_mix(base_seed, (uint64_t)(c - sgkt_cases));
    sgkt_prepared p;
    if (sgkt_prepare(&p, c, seed) != 0)
        fail_msg("case %s: out of memory preparing inputs", c->name);
    sgk_layer *layer = NULL;
    sgk_status st = sgkt_layer_from_weights(ctx, &p.w, &layer);
    if (st != SGK_OK) {
        sgkt_prepared_free(&p);
        fail_msg("case %s: sgk_layer_create: %s: %s", c->name, sgk_status_string(st),
                 sgk_last_error());
    }
    const size_t BHN = (size_t)(c->B * c->H * c->N);
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&p.w, &ref);
    double *rmax = malloc(BHN * sizeof(double)), *rsum = malloc(BHN * sizeof(double));
    double *out_d = malloc(p.n_out * sizeof(double));
    float *d_out = random_d_out(p.n_out, seed);
    float *out = sgkt_guarded_alloc(p.n_out * sizeof(float));
    float *saved = sgkt_guarded_alloc(BHN * sizeof(float));
    size_t saved_bytes = 0;
    assert_non_null(rmax);
    assert_non_null(rsum);
    assert_non_null(out_d);
    assert_non_null(out);
    assert_non_null(saved);
    assert_int_equal(sgk_ref_forward_stats(&ref, c->B, c->N, p.in.nodes, p.in.pair_feats,
                                           p.in.edge_mask, p.in.mask_type, out_d, NULL, rmax,
                                           rsum),
                     0);
    int ok = 1;
    st = sgk_saved_size(layer, c->B, c->N, &saved_bytes);
    if (st != SGK_OK || saved_bytes != BHN * sizeof(float)) {
        printf("FAIL case=%s: sgk_saved_size: %s, %zu bytes (want %zu) %s\n", c->name,
               sgk_status_string(st), saved_bytes, BHN * sizeof(float), sgk_last_error());
        ok = 0;
    }

    /* forward_train: out as the forward's contract, saved as the reference's */
    sgkt_poison_nan(out, p.n_out);
    sgkt_poison_nan(saved, BHN);
    st = sgk_forward_train(layer, c->B, c->N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                           p.in.mask_type, out, saved);
    if (st != SGK_OK) {
        printf("FAIL case=%s: sgk_forward_train: %s %s\n", c->name, sgk_status_string(st),
               sgk_last_error());
        ok = 0;
    } else {
        sgkt_error e = sgkt_compare(out, out_d, p.n_out);
        size_t lse_bad = 0;
        for (size_t i = 0; i < BHN; i++) {
            const double want = rsum[i] > 0 ? rmax[i] + log(rsum[i]) : -INFINITY;
            const double got = saved[i];
            lse_bad += isinf(want) ? !(isinf(got) && got < 0)
                                   : !(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)));
        }
        const int fwd_ok = sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL) && lse_bad == 0 &&
                           sgkt_guard_ok(out, p.n_out * sizeof(float)) &&
                           sgkt_guard_ok(saved, BHN * sizeof(float));
        printf("%s case=%s forward_train: rel L2 %.2e max abs %.2e, saved rows off %zu\n",
               fwd_ok ? "ok" : "FAIL", c->name, e.rel_l2, e.max_abs, lse_bad);
        ok &= fwd_ok;
    }

    /* backward: every gradient against the reference's */
    grads_buf g1, g2;
    sgk_ref_grads rg;
    ref_grads_alloc(&rg, c);
    assert_int_equal(grads_alloc(&g1, c, 0), 0);
    /* the second run leaves out the weight gradients of wk and b1 */
    const unsigned skip2 = (1u << 5) | (1u << 9);
    assert_int_equal(grads_alloc(&g2, c, skip2), 0);
    assert_int_equal(sgk_ref_backward(&ref, c->B, c->N, p.in.nodes, p.in.pair_feats,
                                      p.in.edge_mask, p.in.mask_type, d_out, &rg),
                     0);
    st = sgk_backward(layer, c->B, c->N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                      p.in.mask_type, saved, d_out, &g1.g);
    if (st != SGK_OK) {
        printf("FAIL case=%s: sgk_backward: %s %s\n", c->name, sgk_status_string(st),
               sgk_last_error());
        ok = 0;
    } else {
        ok &= grads_agree(c->name, &g1, &rg);
        /* the same bits again, and NULL members left alone */
        st = sgk_backward(layer, c->B, c->N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                          p.in.mask_type, saved, d_out, &g2.g);
        int same = st == SGK_OK;
        for (int i = 0; same && i < N_GRADS; i++)
            if (!(skip2 & (1u << i)))
                same = memcmp(*sgkt_grad_slot(&g1.g, i), *sgkt_grad_slot(&g2.g, i),
                              g1.n[i] * sizeof(float)) == 0;
        if (!same)
            printf("FAIL case=%s: a second sgk_backward (%s) is not bitwise the first\n",
                   c->name, sgk_status_string(st));
        ok &= same;
        /* the device forms, on buffers of the backend's memory: the same bits */
        const int dev_ok = device_forms_match(layer, c, &p, d_out, out, saved, &g1);
        ok &= dev_ok;
        printf("%s case=%s backward: %d gradients against the reference, repeat and device "
               "forms bitwise\n",
               ok ? "ok" : "FAIL", c->name, N_GRADS);
    }
    grads_free(&g1);
    grads_free(&g2);
    ref_grads_free(&rg);
    sgkt_guarded_free(out);
    sgkt_guarded_free(saved);
    free(rmax);
    free(rsum);
    free(out_d);
    free(d_out);
    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    if (!ok)
        fail_msg("case %s failed (seed 0x%016llx); see FAIL lines above", c->name,
                 (unsigned long long)seed);
}

/* One non-finite input of a small graph (the poisons of
 * reliability/test_nonfinite.c): B = 2; in batch entry 0 rows 1 and 2 do
 * not attend to node 0 and row 3 attends to nothing. The gradients must
 * agree with the reference's wherever those are finite, and batch entry
 * 1's input gradients, which nothing of entry 0 reaches, must be finite. */
static int nonfinite_run(int64_t N, int64_t P, const sgkt_poison *z, uint64_t seed)
{
    const sgkt_case c = {"nonfinite", 2, N, 8, 2, P, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0};
    sgkt_prepared p;
    assert_int_equal(sgkt_prepare(&p, &c, seed), 0);
    sgkt_poison_mask(p.in.edge_mask, N);
    sgkt_poison_apply(z, p.in.nodes, p.in.pair_feats, N, c.D, P);
    sgk_layer *layer = NULL;
    assert_int_equal(sgkt_layer_from_weights(ctx, &p.w, &layer), SGK_OK);
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&p.w, &ref);
    const size_t BHN = (size_t)(c.B * c.H * N);
    float *d_out = random_d_out(p.n_out, seed), *out = malloc(p.n_out * sizeof(float));
    float *saved = malloc(BHN * sizeof(float));
    assert_non_null(out);
    assert_non_null(saved);
    grads_buf g;
    sgk_ref_grads rg;
    assert_int_equal(grads_alloc(&g, &c, 0), 0);
    ref_grads_alloc(&rg, &c);
    assert_int_equal(sgk_ref_backward(&ref, c.B, N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      p.in.mask_type, d_out, &rg),
                     0);
    char what[160];
    snprintf(what, sizeof what, "nonfinite N=%lld P=%lld %s", (long long)N, (long long)P, z->what);
    int ok = 0;
    sgk_status st = sgk_forward_train(layer, c.B, N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      p.in.mask_type, out, saved);
    if (st == SGK_OK)
        st = sgk_backward(layer, c.B, N, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                          p.in.mask_type, saved, d_out, &g.g);
    if (st != SGK_OK) {
        printf("FAIL %s: %s %s\n", what, sgk_status_string(st), sgk_last_error());
    } else {
        ok = grads_agree(what, &g, &rg);
        /* entry 1 of the node and pair gradients (members 0 and 1) */
        size_t leaked = 0;
        for (int i = 0; i < 2; i++) {
            const float *x = *sgkt_grad_slot(&g.g, i);
            for (size_t k = g.n[i] / 2; k < g.n[i]; k++)
                leaked += !isfinite(x[k]);
        }
        if (leaked)
            printf("FAIL %s: %zu gradients of batch entry 1 not finite\n", what, leaked);
        ok &= leaked == 0;
        printf("%s %s: gradients against the reference where it is finite\n", ok ? "ok" : "FAIL", what);
    }
    grads_free(&g);
    ref_grads_free(&rg);
    free(d_out);
    free(out);
    free(saved);
    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    return ok;
}

/* Shapes as reliability/test_nonfinite.c's: one key tile, several, wide
 * pair features (a separate MLP pass on some backends) and an odd N. */
static void test_nonfinite(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{5, 3}, {70, 3}, {70, 24}, {69, 24}};
    const uint64_t seed = sgkt_seed_mix(base_seed, 0x4e46u);
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int z = 0; z < sgkt_poison_count; z++)
            bad += !nonfinite_run(shapes[s][0], shapes[s][1], &sgkt_poisons[z], seed);
    if (bad)
        fail_msg("%d non-finite runs failed (seed 0x%016llx); see FAIL lines above", bad,
                 (unsigned long long)seed);
}

/* Refused calls: a specific status, a message naming the argument, and no
 * output written. */
static void test_bad_inputs(void **state)
{
    (void)state;
    const sgkt_case *c = sgkt_find_case("seed_shape_b7");
    if (!c)
        c = &sgkt_cases[0];
    sgkt_prepared p;
    assert_int_equal(sgkt_prepare(&p, c, base_seed), 0);
    sgk_layer *layer = NULL;
    assert_int_equal(sgkt_layer_from_weights(ctx, &p.w, &layer), SGK_OK);
    const size_t BHN = (size_t)(c->B * c->H * c->N);
    float *saved = calloc(BHN, sizeof(float)), *out = malloc(p.n_out * sizeof(float));
    float *d_out = calloc(p.n_out, sizeof(float));
    assert_non_null(saved);
    assert_non_null(out);
    assert_non_null(d_out);
    grads_buf g;
    assert_int_equal(grads_alloc(&g, c, 0), 0);
    const sgkt_inputs *in = &p.in;
    size_t bytes = 0;
    int bad = 0;
#define EXPECT(call, status, word)                                                            \
    do {                                                                                      \
        const sgk_status got_ = (call);                                                       \
        const int named_ = strstr(sgk_last_error(), word) != NULL;                            \
        if (got_ != (status) || !named_) {                                                    \
            printf("FAIL %s: %s (%s), want %s naming %s\n", #call, sgk_status_string(got_),   \
                   sgk_last_error(), sgk_status_string(status), word);                        \
            bad++;                                                                            \
        }                                                                                     \
    } while (0)
    EXPECT(sgk_saved_size(NULL, c->B, c->N, &bytes), SGK_ERR_NULL_POINTER, "layer");
    EXPECT(sgk_saved_size(layer, 0, c->N, &bytes), SGK_ERR_INVALID_ARGUMENT, "B");
    EXPECT(sgk_forward_train(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                             in->mask_type, out, NULL),
           SGK_ERR_NULL_POINTER, "saved");
    EXPECT(sgk_forward_train(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                             (sgk_mask_type)7, out, saved),
           SGK_ERR_UNSUPPORTED, "mask_type");
    EXPECT(sgk_forward_train(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                             in->mask_type, in->nodes, saved),
           SGK_ERR_INVALID_ARGUMENT, "out overlaps nodes");
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, d_out, NULL),
           SGK_ERR_NULL_POINTER, "grads");
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, NULL, d_out, &g.g),
           SGK_ERR_NULL_POINTER, "saved");
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, NULL, &g.g),
           SGK_ERR_NULL_POINTER, "d_out");
    EXPECT(sgk_backward(layer, c->B, -1, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, d_out, &g.g),
           SGK_ERR_INVALID_ARGUMENT, "N");
    /* an output over an input, two outputs over each other, a misaligned one */
    sgk_grads over = g.g;
    over.wq = d_out;
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, d_out, &over),
           SGK_ERR_INVALID_ARGUMENT, "grads->wq overlaps d_out");
    sgk_grads twice = g.g;
    twice.wk = twice.wq;
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, d_out, &twice),
           SGK_ERR_INVALID_ARGUMENT, "grads->wq overlaps grads->wk");
    sgk_grads odd = g.g;
    odd.b2 = (char *)g.g.b2 + 1;
    EXPECT(sgk_backward(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                        in->mask_type, saved, d_out, &odd),
           SGK_ERR_INVALID_ARGUMENT, "grads->b2");
    /* the device forms' workspace: NULL, short, misaligned */
    size_t ws_bytes = 0;
    EXPECT(sgk_train_workspace_size(layer, c->B, c->N, NULL), SGK_ERR_NULL_POINTER, "bytes");
    assert_int_equal(sgk_train_workspace_size(layer, c->B, c->N, &ws_bytes), SGK_OK);
    unsigned char *ws = malloc(ws_bytes + 32);
    assert_non_null(ws);
    unsigned char *ws16 = ws + (16 - (uintptr_t)ws % 16) % 16;
    EXPECT(sgk_backward_device(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                               in->mask_type, saved, d_out, &g.g, NULL, ws_bytes, NULL),
           SGK_ERR_INSUFFICIENT_WORKSPACE, "workspace is NULL");
    EXPECT(sgk_backward_device(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                               in->mask_type, saved, d_out, &g.g, ws16, ws_bytes - 1, NULL),
           SGK_ERR_INSUFFICIENT_WORKSPACE, "sgk_train_workspace_size");
    EXPECT(sgk_forward_train_device(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                                    in->mask_type, out, saved, ws16 + 4, ws_bytes, NULL),
           SGK_ERR_INVALID_ARGUMENT, "aligned to 16");
    EXPECT(sgk_backward_device(layer, c->B, c->N, in->nodes, in->pair_feats, in->edge_mask,
                               in->mask_type, saved, d_out, &g.g, g.g.wv, ws_bytes, NULL),
           /* a workspace of that size from wv on may cover other gradients
            * too: whichever the check meets first is named */
           SGK_ERR_INVALID_ARGUMENT, "overlaps workspace");
    free(ws);
#undef EXPECT
    /* no refused call wrote a gradient */
    for (int i = 0; i < N_GRADS; i++) {
        const float *x = *sgkt_grad_slot(&g.g, i);
        for (size_t j = 0; j < g.n[i]; j++)
            if (!isnan(x[j])) {
                printf("FAIL a refused sgk_backward wrote grads->%s[%zu]\n", sgkt_grad_names[i], j);
                bad++;
                break;
            }
    }
    grads_free(&g);
    free(saved);
    free(out);
    free(d_out);
    sgk_layer_destroy(layer);
    sgkt_prepared_free(&p);
    assert_int_equal(bad, 0);
}

static int group_setup(void **state)
{
    (void)state;
    ctx = sgkt_open_context(backend, 0);
    return ctx ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    sgk_context_destroy(ctx);
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
    /* a backend without a backward skips, with the library's reason */
    ctx = sgkt_open_context(backend, 0);
    if (!ctx)
        return 1;
    {
        sgkt_prepared p;
        sgk_layer *layer = NULL;
        size_t bytes = 0;
        if (sgkt_prepare(&p, &sgkt_cases[0], base_seed) != 0 ||
            sgkt_layer_from_weights(ctx, &p.w, &layer) != SGK_OK)
            return 1;
        sgk_status st = sgk_saved_size(layer, sgkt_cases[0].B, sgkt_cases[0].N, &bytes);
        sgk_layer_destroy(layer);
        sgkt_prepared_free(&p);
        if (st == SGK_ERR_UNSUPPORTED) {
            printf("SKIP %s: %s\n", backend, sgk_last_error());
            sgk_context_destroy(ctx);
            return SGKT_EXIT_SKIP;
        }
    }
    sgk_context_destroy(ctx);
    printf("train: backend=%s base seed 0x%016llx (set SGK_TEST_SEED to change)\n", backend,
           (unsigned long long)base_seed);
    struct CMUnitTest *tests = calloc((size_t)sgkt_case_count + 3, sizeof *tests);
    if (!tests)
        return 1;
    size_t n = 0;
    for (int i = 0; i < sgkt_case_count; i++) {
        if (!case_small_enough(&sgkt_cases[i]))
            continue;
        struct CMUnitTest t = {sgkt_cases[i].name, test_case, NULL, NULL,
                               (void *)&sgkt_cases[i]};
        tests[n++] = t;
    }
    struct CMUnitTest nonfinite = {"nonfinite", test_nonfinite, NULL, NULL, NULL};
    tests[n++] = nonfinite;
    struct CMUnitTest bad = {"bad_inputs", test_bad_inputs, NULL, NULL, NULL};
    tests[n++] = bad;
    const char *filter = getenv("SGK_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    char group[64];
    snprintf(group, sizeof group, "train-%s", backend);
    int failed = _cmocka_run_group_tests(group, tests, n, group_setup, group_teardown);
    free(tests);
    return failed ? 1 : 0;
}
