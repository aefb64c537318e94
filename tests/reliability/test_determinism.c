/* Determinism: the same inputs give bitwise-identical outputs run after run
 * for every variant of a backend; on the cpu backend also across OpenMP
 * thread counts (1, 2, 3 and the default), since the decomposition into
 * groups does not depend on them; sgk_forward and sgk_forward_device agree
 * bitwise; a u8 mask and the same mask as float 0/1 agree bitwise. Variants
 * sum in different orders, so between variants only the reference tolerance
 * is required (the largest difference is printed). Usage: test_determinism BACKEND */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rel.h"

#define RUNS 5
#define MAX_VARIANTS 16

static const char *g_backend;

typedef struct shape {
    int64_t B, N, D, H, P;
} shape;

static const shape k_shapes[] = {
    {2, 9, 16, 4, 4},   /* one tile of everything */
    {3, 37, 32, 4, 8},  /* several query and key tiles, ragged last tile */
    {1, 70, 8, 8, 2},   /* head dim 1 */
};
#define SHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))

static float *alloc_out(size_t n)
{
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    return p;
}

static void test_repeat_and_variants(void **state)
{
    (void)state;
    for (int s = 0; s < SHAPES; s++) {
        const shape *sh = &k_shapes[s];
        rel_fixture f;
        rel_fixture_init(&f, g_backend, 0, sh->B, sh->N, sh->D, sh->H, sh->P, SGK_MASK_F32,
                         31 + (uint64_t)s);
        size_t n = f.out_floats;
        sgk_ref_layer ref;
        sgkt_weights_to_ref(&f.w, &ref);
        double *expect = malloc(n * sizeof(double));
        assert_non_null(expect);
        assert_int_equal(sgk_ref_forward(&ref, sh->B, sh->N, f.in.nodes, f.in.pair_feats,
                                         f.in.edge_mask, SGK_MASK_F32, expect, NULL), 0);
        const char *names[MAX_VARIANTS];
        int nv = rel_variants(f.layer, sh->B, sh->N, names, MAX_VARIANTS);
        assert_true(nv >= 1);
        float *first[MAX_VARIANTS];
        float *out = alloc_out(n);
        for (int v = 0; v < nv; v++) {
            assert_int_equal(sgk_layer_set_variant(f.layer, names[v]), SGK_OK);
            first[v] = alloc_out(n);
            rel_forward_ok(f.layer, &f.in, first[v]);
            int same = 1;
            for (int r = 1; r < RUNS; r++) {
                sgkt_poison_nan(out, n);
                rel_forward_ok(f.layer, &f.in, out);
                same = same && rel_bitwise_equal(out, first[v], n);
            }
            sgkt_error e = sgkt_compare(first[v], expect, n);
            rel_figure("determinism backend=%s shape=%lldx%lldx%lldx%lldx%lld variant=%s "
                       "runs=%d bitwise_identical=%d rel_l2_vs_ref=%.3g",
                       g_backend, (long long)sh->B, (long long)sh->N, (long long)sh->D,
                       (long long)sh->H, (long long)sh->P, names[v], RUNS, same, e.rel_l2);
            assert_true(same);
            assert_true(sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL));
        }
        /* The automatic choice is one of the variants, bit for bit. */
        assert_int_equal(sgk_layer_set_variant(f.layer, NULL), SGK_OK);
        const char *chosen = NULL;
        assert_int_equal(sgk_layer_variant_for(f.layer, sh->B, sh->N, &chosen), SGK_OK);
        rel_forward_ok(f.layer, &f.in, out);
        for (int v = 0; v < nv; v++)
            if (strcmp(names[v], chosen) == 0)
                assert_true(rel_bitwise_equal(out, first[v], n));
        for (int a = 0; a < nv; a++)
            for (int b = a + 1; b < nv; b++)
                rel_figure("determinism backend=%s shape=%lldx%lldx%lldx%lldx%lld variants=%s/%s "
                           "bitwise_identical=%d max_rel_diff=%.3g",
                           g_backend, (long long)sh->B, (long long)sh->N, (long long)sh->D,
                           (long long)sh->H, (long long)sh->P, names[a], names[b],
                           rel_bitwise_equal(first[a], first[b], n),
                           rel_max_rel_diff(first[a], first[b], n));
        for (int v = 0; v < nv; v++)
            free(first[v]);
        free(out);
        free(expect);
        rel_fixture_free(&f);
    }
}

/* cpu only: one layer per thread count, same weights and inputs. */
static void test_cpu_thread_counts(void **state)
{
    (void)state;
    if (strcmp(g_backend, "cpu") != 0)
        skip();
    static const int counts[] = {1, 2, 3, 0};
    for (int s = 0; s < SHAPES; s++) {
        const shape *sh = &k_shapes[s];
        rel_fixture f[4];
        for (int c = 0; c < 4; c++)
            rel_fixture_init(&f[c], g_backend, counts[c], sh->B, sh->N, sh->D, sh->H, sh->P,
                             SGK_MASK_U8, 41 + (uint64_t)s);
        size_t n = f[0].out_floats;
        const char *names[MAX_VARIANTS];
        int nv = rel_variants(f[0].layer, sh->B, sh->N, names, MAX_VARIANTS);
        float *base = alloc_out(n), *out = alloc_out(n);
        for (int v = 0; v < nv; v++) {
            int same = 1;
            for (int c = 0; c < 4; c++) {
                assert_int_equal(sgk_layer_set_variant(f[c].layer, names[v]), SGK_OK);
                rel_forward_ok(f[c].layer, &f[c].in, c == 0 ? base : out);
                if (c > 0)
                    same = same && rel_bitwise_equal(out, base, n);
            }
            rel_figure("determinism backend=cpu shape=%lldx%lldx%lldx%lldx%lld variant=%s "
                       "cpu_threads=1,2,3,default bitwise_identical=%d",
                       (long long)sh->B, (long long)sh->N, (long long)sh->D, (long long)sh->H,
                       (long long)sh->P, names[v], same);
            assert_true(same);
        }
        free(base);
        free(out);
        for (int c = 0; c < 4; c++)
            rel_fixture_free(&f[c]);
    }
}

/* cpu only: sgk_forward_device on host pointers is the same computation. */
static void test_cpu_forward_device_matches(void **state)
{
    (void)state;
    if (strcmp(g_backend, "cpu") != 0)
        skip();
    const shape *sh = &k_shapes[1];
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, sh->B, sh->N, sh->D, sh->H, sh->P, SGK_MASK_F32, 51);
    size_t n = f.out_floats;
    const char *names[MAX_VARIANTS];
    int nv = rel_variants(f.layer, sh->B, sh->N, names, MAX_VARIANTS);
    float *a = alloc_out(n), *b = alloc_out(n);
    for (int v = 0; v < nv; v++) {
        assert_int_equal(sgk_layer_set_variant(f.layer, names[v]), SGK_OK);
        size_t ws = 0;
        assert_int_equal(sgk_workspace_size(f.layer, sh->B, sh->N, &ws), SGK_OK);
        void *work = ws ? malloc(ws) : NULL;
        rel_forward_ok(f.layer, &f.in, a);
        assert_int_equal(sgk_forward_device(f.layer, sh->B, sh->N, f.in.nodes, f.in.pair_feats,
                                            f.in.edge_mask, f.in.mask_type, b, work, ws, NULL),
                         SGK_OK);
        rel_figure("determinism backend=cpu variant=%s forward_vs_forward_device "
                   "bitwise_identical=%d", names[v], rel_bitwise_equal(a, b, n));
        assert_true(rel_bitwise_equal(a, b, n));
        free(work);
    }
    free(a);
    free(b);
    rel_fixture_free(&f);
}

/* A u8 mask and the same edges as float 0/1 give the same bits. */
static void test_mask_types_agree(void **state)
{
    (void)state;
    const shape *sh = &k_shapes[1];
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 0, sh->B, sh->N, sh->D, sh->H, sh->P, SGK_MASK_U8, 61);
    size_t n = f.out_floats, edges = (size_t)(sh->B * sh->N * sh->N);
    float *fmask = malloc(edges * sizeof(float));
    assert_non_null(fmask);
    for (size_t i = 0; i < edges; i++)
        fmask[i] = ((const uint8_t *)f.in.edge_mask)[i] ? 1.0f : 0.0f;
    const char *names[MAX_VARIANTS];
    int nv = rel_variants(f.layer, sh->B, sh->N, names, MAX_VARIANTS);
    float *a = alloc_out(n), *b = alloc_out(n);
    for (int v = 0; v < nv; v++) {
        assert_int_equal(sgk_layer_set_variant(f.layer, names[v]), SGK_OK);
        rel_forward_ok(f.layer, &f.in, a);
        assert_int_equal(sgk_forward(f.layer, sh->B, sh->N, f.in.nodes, f.in.pair_feats, fmask,
                                     SGK_MASK_F32, b),
                         SGK_OK);
        rel_figure("determinism backend=%s variant=%s mask_u8_vs_f32 bitwise_identical=%d",
                   g_backend, names[v], rel_bitwise_equal(a, b, n));
        assert_true(rel_bitwise_equal(a, b, n));
    }
    free(fmask);
    free(a);
    free(b);
    rel_fixture_free(&f);
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    rel_require_backend(g_backend);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_and_variants),
        cmocka_unit_test(test_cpu_thread_counts),
        cmocka_unit_test(test_cpu_forward_device_matches),
        cmocka_unit_test(test_mask_types_agree),
    };
    return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
