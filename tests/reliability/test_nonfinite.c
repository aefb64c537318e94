/* NaN and Inf stay where the math puts them (SPEC section 1): a non-finite
 * input reaches the outputs it touches and no other row or batch entry. A
 * node that a row does not attend to is invisible to that row, whatever its
 * values; a fully masked row is its input exactly. Every variant of the
 * backend is compared with the reference element by element, finiteness
 * included. Usage: test_nonfinite BACKEND */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rel.h"

static const char *g_backend;

static int run(int64_t N, int64_t P, const sgkt_poison *p)
{
    const int64_t B = 2, D = 8, H = 2;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 0, B, N, D, H, P, SGK_MASK_F32, 91);
    sgkt_poison_mask(f.in.edge_mask, N);
    sgkt_poison_apply(p, f.in.nodes, f.in.pair_feats, N, D, P);
    size_t n = f.out_floats;
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&f.w, &ref);
    double *expect = malloc(n * sizeof(double));
    float *out = malloc(n * sizeof(float));
    assert_non_null(expect);
    assert_non_null(out);
    assert_int_equal(sgk_ref_forward(&ref, B, N, f.in.nodes, f.in.pair_feats, f.in.edge_mask,
                                     SGK_MASK_F32, expect, NULL), 0);
    const char *names[16];
    int nv = rel_variants(f.layer, B, N, names, 16);
    int bad = 0;
    for (int v = 0; v < nv; v++) {
        assert_int_equal(sgk_layer_set_variant(f.layer, names[v]), SGK_OK);
        rel_forward_ok(f.layer, &f.in, out);
        /* Rows that became non-finite although the reference keeps them finite. */
        int leaked = 0, first = -1;
        for (size_t r = 0; r < (size_t)(B * N); r++) {
            int row_bad = 0;
            for (size_t d = 0; d < (size_t)D; d++)
                row_bad |= isfinite(expect[r * D + d]) && !isfinite(out[r * D + d]);
            if (row_bad && first < 0)
                first = (int)r;
            leaked += row_bad;
        }
        sgkt_error e = sgkt_compare(out, expect, n);
        int masked_row_exact = memcmp(out + 3 * D, f.in.nodes + 3 * D, D * sizeof(float)) == 0;
        int ok = leaked == 0 && sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL) &&
                 masked_row_exact;
        rel_figure("nonfinite backend=%s variant=%s N=%lld P=%lld %s: rows_wrongly_nonfinite=%d "
                   "(first: batch %d row %d) fully_masked_row_exact=%d %s",
                   g_backend, names[v], (long long)N, (long long)P, p->what, leaked,
                   first < 0 ? -1 : first / (int)N, first < 0 ? -1 : first % (int)N,
                   masked_row_exact, ok ? "ok" : "WRONG");
        bad += !ok;
    }
    free(expect);
    free(out);
    rel_fixture_free(&f);
    return bad;
}

static void test_small_graph(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < sgkt_poison_count; i++)
        bad += run(5, 3, &sgkt_poisons[i]);
    assert_int_equal(bad, 0);
}

/* Enough nodes for several key tiles, so that the masked node sits in a
 * tile other than the last. */
static void test_tiled_graph(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < sgkt_poison_count; i++)
        bad += run(70, 3, &sgkt_poisons[i]);
    assert_int_equal(bad, 0);
}

/* Wide pair features, where a backend may run the relation MLP as a pass
 * of its own and read back its bias (CUDA's tuned-tiled at P > 16): the
 * non-finite bias of one pair, and a non-finite V row under tensor-core
 * attention, must stay where they belong too. An odd N as well, whose
 * rows of bias and mask a kernel cannot read two keys a load. */
static void test_tiled_graph_wide_pairs(void **state)
{
    (void)state;
    int bad = 0;
    for (int i = 0; i < sgkt_poison_count; i++) {
        bad += run(70, 24, &sgkt_poisons[i]);
        bad += run(69, 24, &sgkt_poisons[i]);
    }
    assert_int_equal(bad, 0);
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    rel_require_backend(g_backend);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_graph),
        cmocka_unit_test(test_tiled_graph),
        cmocka_unit_test(test_tiled_graph_wide_pairs),
    };
    return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
