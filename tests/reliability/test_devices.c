/* Several devices, and several contexts on one device: a context on device
 * k computes on device k whatever device the calling thread has current.
 *
 * One context on every device of the backend and a second on device 0,
 * each with its own layer and inputs. Each context's forward alone is
 * checked against the double-precision reference; then one thread a
 * context runs it at once, the cuda threads with another device (the next
 * one) made current first, and every result must be bitwise the context's
 * alone, with the thread's current device left as it was. On cuda with two
 * devices or more, sgk_forward_device of a layer on device 0 given nodes
 * on device 1 is refused (SGK_ERR_INVALID_ARGUMENT, naming the argument)
 * and leaves out as it was; with one device that case skips, saying so.
 * Usage: test_devices BACKEND */
#include <math.h>
#include <pthread.h>
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

#define MAX_CONTEXTS 9 /* up to eight devices, and the second context */
#define ITERS 6
#define B_ 2
#define N_ 23
#define D_ 48
#define H_ 4
#define P_ 6

static const char *g_backend;

typedef struct one {
    int device;
    sgk_context *ctx;
    sgk_layer *layer;
    sgkt_inputs in;
    float *alone;
    int other;                 /* the device its thread makes current (cuda) */
    pthread_barrier_t *start;  /* shared by every thread */
    /* filled by its thread */
    int failures, mismatches, current_moved;
    char err[256];
} one;

typedef struct shared {
    int n;        /* contexts */
    int devices;  /* of the backend */
    sgkt_weights w;
    one c[MAX_CONTEXTS];
    pthread_barrier_t start;
} shared;

static int is_cuda(void) { return strcmp(g_backend, "cuda") == 0; }

static void *run_one(void *arg)
{
    one *c = arg;
    const size_t n = (size_t)(B_ * N_ * D_);
    float *out = malloc(n * sizeof(float));
    /* the calling thread works on another device, as a framework's might */
    if (is_cuda() && devmem_cuda_make_current(c->other) != 0)
        c->failures++;
    pthread_barrier_wait(c->start);
    for (int it = 0; it < ITERS && out; it++) {
        sgkt_poison_nan(out, n);
        sgk_status st = sgk_forward(c->layer, B_, N_, c->in.nodes, c->in.pair_feats, c->in.edge_mask,
                                    c->in.mask_type, out);
        if (st != SGK_OK) {
            c->failures++;
            snprintf(c->err, sizeof c->err, "%s", sgk_last_error());
        } else if (!rel_bitwise_equal(out, c->alone, n)) {
            c->mismatches++;
        }
    }
    int now = -1;
    if (is_cuda() && (devmem_cuda_current_device(&now) != 0 || now != c->other))
        c->current_moved++;
    if (!out)
        c->failures++;
    free(out);
    return NULL;
}

static void test_devices_alone_and_together(void **state)
{
    (void)state;
    sgk_backend_info info;
    assert_int_equal(sgk_backend_find(g_backend, &info), SGK_OK);
    shared *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->devices = info.device_count;
    s->n = (s->devices < MAX_CONTEXTS - 1 ? s->devices : MAX_CONTEXTS - 1) + 1;
    if (is_cuda()) {
        devmem m;
        char why[256];
        if (devmem_open("cuda", 0, &m, why, sizeof why) != 0)
            fail_msg("%s", why);
    }

    const uint64_t seed = sgkt_env_seed(0x5d3u);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    assert_int_equal(sgkt_weights_alloc(&s->w, D_, H_, P_), 0);
    sgkt_weights_random(&s->w, &rng);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&s->w, &desc);
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&s->w, &ref);
    const size_t n = (size_t)(B_ * N_ * D_);
    double *want = malloc(n * sizeof(double));
    assert_non_null(want);

    for (int i = 0; i < s->n; i++) {
        one *c = &s->c[i];
        c->device = i < s->devices ? i : 0; /* the last: a second context on device 0 */
        sgk_context_options co;
        sgk_context_options_init(&co);
        co.cpu_threads = 2;
        assert_int_equal(sgk_context_create(g_backend, c->device, &co, &c->ctx), SGK_OK);
        assert_int_equal(sgk_layer_create(c->ctx, &desc, &c->layer), SGK_OK);
        assert_int_equal(sgkt_inputs_alloc(&c->in, B_, N_, D_, P_, SGK_MASK_F32), 0);
        sgkt_inputs_random(&c->in, &rng, SGKT_MASK_EMPTY_ROWS, 0.6);
        c->alone = malloc(n * sizeof(float));
        assert_non_null(c->alone);
        sgkt_poison_nan(c->alone, n);
        rel_forward_ok(c->layer, &c->in, c->alone);
        assert_int_equal(sgk_ref_forward(&ref, B_, N_, c->in.nodes, c->in.pair_feats, c->in.edge_mask,
                                         c->in.mask_type, want, NULL), 0);
        sgkt_error e = sgkt_compare(c->alone, want, n);
        if (!sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL))
            fail_msg("%s device %d (context %d) alone: rel L2 %.3e max abs %.3e (seed 0x%llx)", g_backend,
                     c->device, i, e.rel_l2, e.max_abs, (unsigned long long)seed);
    }

    pthread_barrier_init(&s->start, NULL, (unsigned)s->n);
    pthread_t tid[MAX_CONTEXTS];
    for (int i = 0; i < s->n; i++) {
        s->c[i].other = (s->c[i].device + 1) % s->devices;
        s->c[i].start = &s->start;
        assert_int_equal(pthread_create(&tid[i], NULL, run_one, &s->c[i]), 0);
    }
    for (int i = 0; i < s->n; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&s->start);

    int failures = 0, mismatches = 0, moved = 0;
    for (int i = 0; i < s->n; i++) {
        one *c = &s->c[i];
        if (c->failures || c->mismatches || c->current_moved)
            printf("context %d (device %d): %d failures%s%s, %d results not bitwise the alone one, "
                   "current device moved: %d\n",
                   i, c->device, c->failures, c->err[0] ? ": " : "", c->err, c->mismatches, c->current_moved);
        failures += c->failures, mismatches += c->mismatches, moved += c->current_moved;
    }
    rel_figure("devices backend=%s devices=%d contexts=%d calls=%d failures=%d bitwise_mismatches=%d "
               "current_device_moved=%d (seed 0x%llx)",
               g_backend, s->devices, s->n, s->n * ITERS, failures, mismatches, moved, (unsigned long long)seed);
    assert_int_equal(failures, 0);
    assert_int_equal(mismatches, 0);
    assert_int_equal(moved, 0);

    for (int i = 0; i < s->n; i++) {
        one *c = &s->c[i];
        free(c->alone);
        sgkt_inputs_free(&c->in);
        sgk_layer_destroy(c->layer);
        sgk_context_destroy(c->ctx);
    }
    free(want);
    sgkt_weights_free(&s->w);
    free(s);
}

/* Buffers of one device: made current on this thread first. */
static void *on_device(const devmem *m, int device, size_t bytes, const void *host)
{
    void *p = NULL;
    if (devmem_cuda_make_current(device) != 0 || m->alloc(&p, bytes) != 0)
        fail_msg("device memory on device %d", device);
    if (host && m->h2d(p, host, bytes) != 0)
        fail_msg("copy to device %d", device);
    return p;
}

static void test_foreign_pointer_refused(void **state)
{
    (void)state;
    sgk_backend_info info;
    assert_int_equal(sgk_backend_find(g_backend, &info), SGK_OK);
    if (!is_cuda() || info.device_count < 2) {
        printf("skipped: needs the cuda backend with two devices (%s has %d)\n", g_backend, info.device_count);
        skip();
    }
    devmem m;
    char why[256];
    if (devmem_open("cuda", 0, &m, why, sizeof why) != 0)
        fail_msg("%s", why);
    rel_fixture f;
    rel_fixture_init(&f, "cuda", 0, B_, N_, D_, H_, P_, SGK_MASK_F32, 41);
    const size_t nb = (size_t)(B_ * N_ * D_) * sizeof(float), pb = (size_t)(B_ * N_ * N_ * P_) * sizeof(float),
                 mb = (size_t)(B_ * N_ * N_) * sizeof(float);
    size_t wsb = 0;
    assert_int_equal(sgk_workspace_size(f.layer, B_, N_, &wsb), SGK_OK);
    float *poison = malloc(nb), *back = malloc(nb);
    assert_non_null(poison);
    assert_non_null(back);
    sgkt_poison_nan(poison, nb / sizeof(float));
    void *nodes1 = on_device(&m, 1, nb, f.in.nodes);
    void *pair0 = on_device(&m, 0, pb, f.in.pair_feats), *mask0 = on_device(&m, 0, mb, f.in.edge_mask);
    void *out0 = on_device(&m, 0, nb, poison), *ws0 = on_device(&m, 0, wsb ? wsb : 1, NULL);
    sgk_status st = sgk_forward_device(f.layer, B_, N_, nodes1, pair0, mask0, SGK_MASK_F32, out0, ws0, wsb, NULL);
    const char *msg = sgk_last_error();
    printf("nodes on device 1, layer on device 0: %s: %s\n", sgk_status_string(st), msg);
    assert_int_equal(st, SGK_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "nodes"));
    assert_non_null(strstr(msg, "device 1"));
    assert_int_equal(m.sync(), 0);
    assert_int_equal(m.d2h(back, out0, nb), 0);
    assert_memory_equal(back, poison, nb);
    /* and the same buffers all on device 0 run */
    void *nodes0 = on_device(&m, 0, nb, f.in.nodes);
    assert_int_equal(sgk_forward_device(f.layer, B_, N_, nodes0, pair0, mask0, SGK_MASK_F32, out0, ws0, wsb, NULL),
                     SGK_OK);
    assert_int_equal(devmem_cuda_make_current(1), 0);
    m.release(nodes1);
    assert_int_equal(devmem_cuda_make_current(0), 0);
    m.release(nodes0), m.release(pair0), m.release(mask0), m.release(out0), m.release(ws0);
    free(poison);
    free(back);
    rel_fixture_free(&f);
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    rel_require_backend(g_backend);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_alone_and_together),
        cmocka_unit_test(test_foreign_pointer_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
