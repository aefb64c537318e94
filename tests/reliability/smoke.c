/* A short run through the whole public API on one backend (default cpu),
 * small enough for valgrind: registry, context, layer, every variant with
 * both mask types checked against the reference, new weights, rejected
 * calls, and teardown. Exits 0 when all is well. Usage: rel_smoke [BACKEND] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rel.h"

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "smoke: %s (last error: %s)\n", what, sgk_last_error());
        failures++;
    }
}

static void run_mask(const char *backend, sgk_mask_type mask_type, uint64_t seed)
{
    rel_fixture f;
    rel_fixture_init(&f, backend, 2, 2, 12, 32, 4, 8, mask_type, seed);
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&f.w, &ref);
    double *expect = malloc(f.out_floats * sizeof(double));
    float *out = malloc(f.out_floats * sizeof(float));
    check(expect && out, "allocating outputs");
    if (!expect || !out)
        exit(1);
    check(sgk_ref_forward(&ref, f.in.B, f.in.N, f.in.nodes, f.in.pair_feats, f.in.edge_mask,
                          mask_type, expect, NULL) == 0, "reference");
    const char *names[16];
    int n = rel_variants(f.layer, f.in.B, f.in.N, names, 16);
    check(n >= 1, "no variant supports the smoke shape");
    for (int v = 0; v < n; v++) {
        check(sgk_layer_set_variant(f.layer, names[v]) == SGK_OK, "set_variant");
        sgkt_poison_nan(out, f.out_floats);
        rel_forward_ok(f.layer, &f.in, out);
        sgkt_error e = sgkt_compare(out, expect, f.out_floats);
        printf("smoke: %s %s mask=%s rel_l2=%.3g max_abs=%.3g\n", backend, names[v],
               mask_type == SGK_MASK_U8 ? "u8" : "f32", e.rel_l2, e.max_abs);
        check(sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL), "result off the reference");
    }
    /* New weights: the same ones back through the host form (and, where
     * device pointers are host pointers, the device form): same results. */
    float *again = malloc(f.out_floats * sizeof(float));
    check(again != NULL, "allocating outputs");
    if (!again)
        exit(1);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&f.w, &desc);
    check(sgk_layer_set_variant(f.layer, NULL) == SGK_OK, "set_variant(NULL)");
    rel_forward_ok(f.layer, &f.in, out);
    check(sgk_layer_set_weights(f.layer, &desc) == SGK_OK, "sgk_layer_set_weights");
    if (strcmp(backend, "cpu") == 0)
        check(sgk_layer_set_weights_device(f.layer, &desc, NULL) == SGK_OK,
              "sgk_layer_set_weights_device");
    rel_forward_ok(f.layer, &f.in, again);
    check(rel_bitwise_equal(out, again, f.out_floats), "new weights changed the result");
    desc.dim = 2 * f.w.D;
    check(sgk_layer_set_weights(f.layer, &desc) == SGK_ERR_INVALID_ARGUMENT,
          "new weights of another dim accepted");
    free(again);
    check(sgk_forward(f.layer, 0, f.in.N, f.in.nodes, f.in.pair_feats, f.in.edge_mask,
                      mask_type, out) == SGK_ERR_INVALID_ARGUMENT, "B = 0 accepted");
    check(strstr(sgk_last_error(), "B") != NULL, "B = 0 message does not name B");
    free(expect);
    free(out);
    rel_fixture_free(&f);
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "cpu";
    printf("smoke: sgk %s\n", sgk_version());
    for (int i = 0; i < sgk_backend_count(); i++) {
        sgk_backend_info info;
        check(sgk_backend_get(i, &info) == SGK_OK, "sgk_backend_get");
        printf("smoke: backend %s available=%d devices=%d %s\n", info.name, info.available,
               info.device_count, info.reason);
    }
    rel_require_backend(backend);
    char name[128];
    check(sgk_device_name(backend, 0, name, sizeof name) == SGK_OK, "sgk_device_name");
    run_mask(backend, SGK_MASK_F32, 1);
    run_mask(backend, SGK_MASK_U8, 2);
    printf("smoke: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
