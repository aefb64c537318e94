/* Injected allocation faults: for every k, the k-th host or device
 * allocation of a context creation, a layer creation and an sgk_forward
 * fails (sgk_testing_fail_alloc_after). Each such call must return
 * SGK_ERR_OUT_OF_MEMORY with a message, leave its output untouched and leak
 * nothing; k grows until the call succeeds with the hook armed, which
 * counts the injection points the call has; so too for
 * sgk_layer_set_weights, while its device form must allocate nothing; so
 * too for sgk_forward_train and sgk_backward, and for bf16 and f16 layers'
 * creation and sgk_forward.
 * Usage: test_faults BACKEND */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "devmem.h"
#include "rel.h"
#include "sgk_testing.h"

/* No call of sgk makes anywhere near this many allocations. */
#define MAX_POINTS 1000
#define B_ 2
#define N_ 5
#define D_ 8
#define H_ 2
#define P_ 3

static const char *g_backend;

/* What one armed call did. */
typedef struct armed {
    sgk_status st;
    int64_t allocs; /* allocations the hook saw */
    long live;      /* allocations still live after the call (leak check) */
} armed;

static void arm(int64_t k)
{
    rel_live_begin();
    sgk_testing_fail_alloc_after(k);
}

static armed disarm(sgk_status st)
{
    armed a;
    a.st = st;
    a.allocs = sgk_testing_alloc_count();
    sgk_testing_fail_alloc_after(0);
    a.live = rel_live_end();
    return a;
}

static int mentions_memory(const char *msg)
{
    return strstr(msg, "memory") != NULL || strstr(msg, "alloc") != NULL;
}

/* Common checks of a call that ran with the k-th allocation failing. Returns
 * 1 when the call succeeded (fewer than k allocations). */
static int check_armed(const armed *a, int64_t k, const char *call)
{
    if (a->st == SGK_OK) {
        if (a->allocs >= k)
            fail_msg("%s succeeded although allocation %lld of %lld was failed", call,
                     (long long)k, (long long)a->allocs);
        return 1;
    }
    if (a->st != SGK_ERR_OUT_OF_MEMORY)
        fail_msg("%s with allocation %lld failed: status %d (%s), expected "
                 "SGK_ERR_OUT_OF_MEMORY; message: %s",
                 call, (long long)k, (int)a->st, sgk_status_string(a->st), sgk_last_error());
    if (!mentions_memory(sgk_last_error()))
        fail_msg("%s with allocation %lld failed: message does not say memory: \"%s\"", call,
                 (long long)k, sgk_last_error());
    if (a->live != 0)
        fail_msg("%s with allocation %lld failed: %ld allocation(s) leaked", call, (long long)k,
                 a->live);
    return 0;
}

static void test_context_create(void **state)
{
    (void)state;
    sgk_context_options opt;
    sgk_context_options_init(&opt);
    opt.cpu_threads = 2;
    sgk_context *warm = NULL;
    assert_int_equal(sgk_context_create(g_backend, 0, &opt, &warm), SGK_OK);
    sgk_context_destroy(warm);

    int64_t k;
    for (k = 1; k <= MAX_POINTS; k++) {
        sgk_context *const sentinel = (sgk_context *)(uintptr_t)0x5a5a5a5a;
        sgk_context *ctx = sentinel;
        arm(k);
        armed a = disarm(sgk_context_create(g_backend, 0, &opt, &ctx));
        if (check_armed(&a, k, "sgk_context_create")) {
            assert_ptr_not_equal(ctx, sentinel);
            sgk_context_destroy(ctx);
            break;
        }
        assert_ptr_equal(ctx, sentinel);
    }
    assert_true(k <= MAX_POINTS);
    rel_figure("faults backend=%s call=sgk_context_create points=%lld all_oom_untouched_noleak=1",
               g_backend, (long long)(k - 1));
}

/* sgk_layer_create of desc with each of its allocations failing in turn:
 * out of memory, the handle and the caller's weights untouched, nothing
 * leaked; returns the layer the first unarmed creation made. */
static sgk_layer *layer_create_faults(sgk_context *ctx, const sgk_layer_desc *desc, const char *dtype)
{
    unsigned char gamma0[4];
    memcpy(gamma0, desc->ln_gamma, sizeof gamma0);
    sgk_layer *layer = NULL;
    int64_t k;
    for (k = 1; k <= MAX_POINTS; k++) {
        sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5a5a5a5a;
        layer = sentinel;
        arm(k);
        armed a = disarm(sgk_layer_create(ctx, desc, &layer));
        if (check_armed(&a, k, "sgk_layer_create")) {
            assert_ptr_not_equal(layer, sentinel);
            break;
        }
        assert_ptr_equal(layer, sentinel);
        assert_memory_equal(desc->ln_gamma, gamma0, sizeof gamma0);
    }
    assert_true(k <= MAX_POINTS);
    rel_figure("faults backend=%s dtype=%s call=sgk_layer_create points=%lld all_oom_untouched_noleak=1",
               g_backend, dtype, (long long)(k - 1));
    return layer;
}

static void test_layer_create(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 11);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&f.w, &desc);
    sgk_layer_destroy(layer_create_faults(f.ctx, &desc, "f32"));
    rel_fixture_free(&f);
}

/* The inputs of one layer's forward: the fixture's floats, or their 16-bit
 * copies for a bf16 or f16 layer; out_bytes of output. */
typedef struct fwd_in {
    sgk_layer *layer;
    const sgkt_inputs *in;
    const void *nodes, *pair;
    size_t out_bytes;
    const char *dtype; /* named in the figures */
} fwd_in;

static sgk_status forward(const fwd_in *x, void *out)
{
    return sgk_forward(x->layer, x->in->B, x->in->N, x->nodes, x->pair, x->in->edge_mask, x->in->mask_type, out);
}

/* sgk_forward with variant forced (NULL: the automatic choice) and each of
 * its allocations failing in turn. */
static void forward_faults(const fwd_in *x, const char *variant)
{
    assert_int_equal(sgk_layer_set_variant(x->layer, variant), SGK_OK);
    const size_t bytes = x->out_bytes;
    unsigned char *expect = malloc(bytes), *out = malloc(bytes), *pattern = malloc(bytes);
    assert_non_null(expect);
    assert_non_null(out);
    assert_non_null(pattern);
    memset(pattern, 0x5a, bytes);
    /* Twice unarmed: the first run may fill caches a backend keeps. */
    assert_int_equal(forward(x, expect), SGK_OK);
    assert_int_equal(forward(x, expect), SGK_OK);

    int64_t k;
    for (k = 1; k <= MAX_POINTS; k++) {
        memcpy(out, pattern, bytes);
        arm(k);
        armed a = disarm(forward(x, out));
        if (check_armed(&a, k, "sgk_forward")) {
            assert_memory_equal(out, expect, bytes);
            break;
        }
        if (memcmp(out, pattern, bytes) != 0)
            fail_msg("sgk_forward (%s) with allocation %lld failed wrote to out", x->dtype, (long long)k);
    }
    assert_true(k <= MAX_POINTS);
    rel_figure("faults backend=%s dtype=%s call=sgk_forward variant=%s points=%lld "
               "all_oom_untouched_noleak=1",
               g_backend, x->dtype, variant ? variant : "auto", (long long)(k - 1));
    /* Still right after all those failures. */
    assert_int_equal(forward(x, out), SGK_OK);
    assert_memory_equal(out, expect, bytes);
    assert_int_equal(sgk_layer_set_variant(x->layer, NULL), SGK_OK);
    free(expect);
    free(out);
    free(pattern);
}

/* Each variant the layer has at the fixture's shape, then the automatic choice. */
static void forward_faults_all(const fwd_in *x)
{
    const char *names[16];
    const int n = rel_variants(x->layer, x->in->B, x->in->N, names, 16);
    assert_true(n >= 1);
    for (int v = 0; v < n; v++)
        forward_faults(x, names[v]);
    forward_faults(x, NULL);
}

static void test_forward(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 12);
    const fwd_in x = {f.layer, &f.in, f.in.nodes, f.in.pair_feats, f.out_floats * sizeof(float), "f32"};
    forward_faults_all(&x);
    rel_fixture_free(&f);
}

/* sgk_forward_device on host memory is documented not to allocate: arming
 * the first allocation must change nothing. */
static void test_forward_device_allocates_nothing(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_U8, 13);
    if (strcmp(g_backend, "cpu") != 0) {
        rel_fixture_free(&f);
        skip();
    }
    const char *names[16];
    int n = rel_variants(f.layer, B_, N_, names, 16);
    float *expect = malloc(f.out_floats * sizeof(float));
    float *out = malloc(f.out_floats * sizeof(float));
    assert_non_null(expect);
    assert_non_null(out);
    for (int v = 0; v < n; v++) {
        assert_int_equal(sgk_layer_set_variant(f.layer, names[v]), SGK_OK);
        size_t ws = 0;
        assert_int_equal(sgk_workspace_size(f.layer, B_, N_, &ws), SGK_OK);
        void *work = ws ? malloc(ws) : NULL;
        rel_forward_ok(f.layer, &f.in, expect);
        arm(1);
        armed a = disarm(sgk_forward_device(f.layer, B_, N_, f.in.nodes, f.in.pair_feats,
                                            f.in.edge_mask, f.in.mask_type, out, work, ws, NULL));
        assert_int_equal(a.st, SGK_OK);
        assert_int_equal(a.allocs, 0);
        assert_true(rel_bitwise_equal(out, expect, f.out_floats));
        rel_figure("faults backend=%s call=sgk_forward_device variant=%s points=0", g_backend,
                   names[v]);
        free(work);
    }
    free(expect);
    free(out);
    rel_fixture_free(&f);
}

/* sgk_layer_set_weights with each of its allocations failing in turn:
 * SGK_ERR_OUT_OF_MEMORY, nothing leaked and the layer's weights as they
 * were; once it succeeds, the bits of a layer created with the new ones. */
static void test_set_weights(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 14);
    sgkt_weights w;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, 15);
    assert_int_equal(sgkt_weights_alloc(&w, D_, H_, P_), 0);
    sgkt_weights_random(&w, &rng);
    w.eps = 1e-3f;
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&w, &desc);
    sgk_layer *fresh = NULL;
    assert_int_equal(sgk_layer_create(f.ctx, &desc, &fresh), SGK_OK);
    float *before = malloc(f.out_floats * sizeof(float)), *after = malloc(f.out_floats * sizeof(float));
    float *out = malloc(f.out_floats * sizeof(float));
    assert_non_null(before);
    assert_non_null(after);
    assert_non_null(out);
    rel_forward_ok(f.layer, &f.in, before);
    rel_forward_ok(fresh, &f.in, after);
    assert_false(rel_bitwise_equal(before, after, f.out_floats));

    int64_t k;
    for (k = 1; k <= MAX_POINTS; k++) {
        arm(k);
        armed a = disarm(sgk_layer_set_weights(f.layer, &desc));
        rel_forward_ok(f.layer, &f.in, out);
        if (check_armed(&a, k, "sgk_layer_set_weights")) {
            assert_true(rel_bitwise_equal(out, after, f.out_floats));
            break;
        }
        if (!rel_bitwise_equal(out, before, f.out_floats))
            fail_msg("sgk_layer_set_weights with allocation %lld failed changed the weights",
                     (long long)k);
    }
    assert_true(k <= MAX_POINTS);
    rel_figure("faults backend=%s call=sgk_layer_set_weights points=%lld "
               "all_oom_untouched_noleak=1",
               g_backend, (long long)(k - 1));
    sgk_layer_destroy(fresh);
    sgkt_weights_free(&w);
    free(before);
    free(after);
    free(out);
    rel_fixture_free(&f);
}

/* sgk_layer_set_weights_device is documented not to allocate: with the
 * first allocation armed it succeeds and the hook sees none. */
static void test_set_weights_device_allocates_nothing(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_U8, 16);
    devmem m;
    char why[256];
    if (devmem_open_context(f.ctx, &m, why, sizeof why) != 0)
        fail_msg("device memory for backend %s: %s", g_backend, why);
    sgkt_weights w;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, 17);
    assert_int_equal(sgkt_weights_alloc(&w, D_, H_, P_), 0);
    sgkt_weights_random(&w, &rng);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&w, &desc);
    sgk_layer *fresh = NULL;
    assert_int_equal(sgk_layer_create(f.ctx, &desc, &fresh), SGK_OK);
    float *expect = malloc(f.out_floats * sizeof(float)), *out = malloc(f.out_floats * sizeof(float));
    assert_non_null(expect);
    assert_non_null(out);
    rel_forward_ok(fresh, &f.in, expect);
    void *bufs[10];
    assert_int_equal(devmem_weights(&m, &w, &desc, bufs), 0);
    sgk_testing_fail_alloc_after(1);
    sgk_status st = sgk_layer_set_weights_device(f.layer, &desc, NULL);
    int64_t allocs = sgk_testing_alloc_count();
    sgk_testing_fail_alloc_after(0);
    if (st != SGK_OK)
        fail_msg("sgk_layer_set_weights_device with an allocation armed: %s: %s",
                 sgk_status_string(st), sgk_last_error());
    assert_int_equal(allocs, 0);
    assert_int_equal(m.sync(), 0);
    rel_forward_ok(f.layer, &f.in, out);
    assert_true(rel_bitwise_equal(out, expect, f.out_floats));
    rel_figure("faults backend=%s call=sgk_layer_set_weights_device points=0", g_backend);
    devmem_weights_free(&m, bufs);
    sgk_layer_destroy(fresh);
    sgkt_weights_free(&w);
    free(expect);
    free(out);
    rel_fixture_free(&f);
}

/* sgk_forward_train and sgk_backward, where the backend has them: out and
 * saved, then every gradient, untouched by a call that failed. */
static void test_train(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 13);
    size_t saved_bytes = 0;
    if (sgk_saved_size(f.layer, B_, N_, &saved_bytes) == SGK_ERR_UNSUPPORTED) {
        rel_figure("faults backend=%s call=sgk_backward skipped: %s", g_backend, sgk_last_error());
        rel_fixture_free(&f);
        skip();
    }
    const size_t out_bytes = f.out_floats * sizeof(float);
    size_t counts[SGKT_N_GRADS], total = 0;
    sgkt_grad_counts(B_, N_, D_, H_, P_, counts);
    for (int i = 0; i < SGKT_N_GRADS; i++)
        total += counts[i] * sizeof(float);
    unsigned char *saved = malloc(saved_bytes), *out = malloc(out_bytes), *d_out = malloc(out_bytes);
    unsigned char *grads = malloc(total), *expect = malloc(total), *pattern = malloc(total);
    assert_true(saved && out && d_out && grads && expect && pattern);
    memset(pattern, 0x5a, total);
    for (size_t i = 0; i < f.out_floats; i++)
        ((float *)d_out)[i] = (float)((i % 7) * 0.25 - 0.75);
    sgk_grads g;
    size_t at = 0;
    for (int i = 0; i < SGKT_N_GRADS; i++, at += counts[i - 1] * sizeof(float))
        *sgkt_grad_slot(&g, i) = grads + at;

    int64_t k;
    for (k = 1; k <= MAX_POINTS; k++) {
        memset(out, 0x5a, out_bytes);
        memset(saved, 0x5a, saved_bytes);
        arm(k);
        armed a = disarm(sgk_forward_train(f.layer, B_, N_, f.in.nodes, f.in.pair_feats,
                                           f.in.edge_mask, f.in.mask_type, out, saved));
        if (check_armed(&a, k, "sgk_forward_train"))
            break;
        if (memcmp(out, pattern, out_bytes) != 0 || memcmp(saved, pattern, saved_bytes) != 0)
            fail_msg("sgk_forward_train with allocation %lld failed wrote its outputs", (long long)k);
    }
    assert_true(k <= MAX_POINTS);
    const int64_t fwd_points = k - 1;
    assert_int_equal(sgk_backward(f.layer, B_, N_, f.in.nodes, f.in.pair_feats, f.in.edge_mask,
                                  f.in.mask_type, saved, d_out, &g),
                     SGK_OK);
    memcpy(expect, grads, total);
    for (k = 1; k <= MAX_POINTS; k++) {
        memcpy(grads, pattern, total);
        arm(k);
        armed a = disarm(sgk_backward(f.layer, B_, N_, f.in.nodes, f.in.pair_feats,
                                      f.in.edge_mask, f.in.mask_type, saved, d_out, &g));
        if (check_armed(&a, k, "sgk_backward")) {
            assert_true(memcmp(grads, expect, total) == 0);
            break;
        }
        if (memcmp(grads, pattern, total) != 0)
            fail_msg("sgk_backward with allocation %lld failed wrote a gradient", (long long)k);
    }
    assert_true(k <= MAX_POINTS);
    rel_figure("faults backend=%s call=sgk_forward_train points=%lld call=sgk_backward points=%lld "
               "all_oom_untouched_noleak=1",
               g_backend, (long long)fwd_points, (long long)(k - 1));
    free(saved);
    free(out);
    free(d_out);
    free(grads);
    free(expect);
    free(pattern);
    rel_fixture_free(&f);
}

/* A 16-bit layer, as the float one above: its creation, then sgk_forward
 * with each variant and the automatic choice, each allocation failing in
 * turn; a failed call leaves the 16-bit out as it was. A backend that does
 * not run the dtype says so and the case is skipped. */
static void faults16(sgk_dtype t, const char *tname)
{
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 18);
    sgkt_case16 h;
    assert_int_equal(sgkt_round16(t, &f.w, &f.in, &h), 0);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_desc16(t, &f.w, &h, &desc);
    sgk_layer *layer = NULL;
    const sgk_status st = sgk_layer_create(f.ctx, &desc, &layer);
    if (st == SGK_ERR_UNSUPPORTED) {
        rel_figure("faults backend=%s dtype=%s skipped: %s", g_backend, tname, sgk_last_error());
        sgkt_case16_free(&h);
        rel_fixture_free(&f);
        return;
    }
    assert_int_equal(st, SGK_OK);
    sgk_layer_destroy(layer);
    layer = layer_create_faults(f.ctx, &desc, tname);

    const fwd_in x = {layer, &f.in, h.nodes, h.pair, f.out_floats * sizeof(uint16_t), tname};
    forward_faults_all(&x);
    sgk_layer_destroy(layer);
    sgkt_case16_free(&h);
    rel_fixture_free(&f);
}

static void test_forward_bf16(void **state)
{
    (void)state;
    faults16(SGK_DTYPE_BF16, "bf16");
}

static void test_forward_f16(void **state)
{
    (void)state;
    faults16(SGK_DTYPE_F16, "f16");
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    rel_require_backend(g_backend);
    rel_figure("faults backend=%s leak_check=%s", g_backend,
               rel_live_supported() ? "live-allocation count" : "LeakSanitizer");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_create),
        cmocka_unit_test(test_layer_create),
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_forward_device_allocates_nothing),
        cmocka_unit_test(test_set_weights),
        cmocka_unit_test(test_set_weights_device_allocates_nothing),
        cmocka_unit_test(test_train),
        cmocka_unit_test(test_forward_bf16),
        cmocka_unit_test(test_forward_f16),
    };
    return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
