/* Threads, as sgk.h promises them: the registry is built safely by
 * concurrent first calls; one context and its layers are shared by 8
 * threads, each calling sgk_forward (and sgk_forward_device on the cpu
 * backend) with its own buffers, and every result is bitwise identical to
 * the same call made by one thread; the last-error message is per thread;
 * contexts and layers can be created and destroyed by threads concurrently.
 * Usage: test_threads BACKEND */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rel.h"

#define THREADS 8
#define ITERS 12
#define MAX_LAYERS 8
#define B_ 2
#define N_ 9
#define D_ 16
#define H_ 4
#define P_ 4

static const char *g_backend;

typedef struct shared {
    rel_fixture f;
    int layers;                      /* [0] automatic, then one per forced variant */
    sgk_layer *layer[MAX_LAYERS];
    const char *label[MAX_LAYERS];
    sgkt_inputs in[THREADS];
    float *expect[MAX_LAYERS][THREADS];
    pthread_barrier_t start;
    atomic_int calls, mismatches, failures, message_mixups;
} shared;

typedef struct worker {
    shared *s;
    int id;
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    shared *s = w->s;
    const sgkt_inputs *in = &s->in[w->id];
    size_t n = s->f.out_floats;
    float *out = malloc(n * sizeof(float));
    void *work = NULL;
    size_t work_bytes = 0;
    int host = strcmp(g_backend, "cpu") == 0;
    pthread_barrier_wait(&s->start);
    for (int it = 0; it < ITERS && out; it++) {
        for (int l = 0; l < s->layers; l++) {
            sgk_status st = sgk_forward(s->layer[l], in->B, in->N, in->nodes, in->pair_feats,
                                        in->edge_mask, in->mask_type, out);
            atomic_fetch_add(&s->calls, 1);
            if (st != SGK_OK)
                atomic_fetch_add(&s->failures, 1);
            else if (!rel_bitwise_equal(out, s->expect[l][w->id], n))
                atomic_fetch_add(&s->mismatches, 1);
            if (!host)
                continue;
            size_t need = 0;
            if (sgk_workspace_size(s->layer[l], in->B, in->N, &need) != SGK_OK) {
                atomic_fetch_add(&s->failures, 1);
                continue;
            }
            if (need > work_bytes) {
                free(work);
                work = malloc(need);
                work_bytes = work ? need : 0;
            }
            memset(out, 0, n * sizeof(float));
            st = sgk_forward_device(s->layer[l], in->B, in->N, in->nodes, in->pair_feats,
                                    in->edge_mask, in->mask_type, out, work, work_bytes, NULL);
            atomic_fetch_add(&s->calls, 1);
            if (st != SGK_OK)
                atomic_fetch_add(&s->failures, 1);
            else if (!rel_bitwise_equal(out, s->expect[l][w->id], n))
                atomic_fetch_add(&s->mismatches, 1);
        }
        /* A rejected call: its message must be this thread's, whatever the
         * other threads are doing. N carries the thread's id. */
        int64_t bad_n = -(int64_t)(w->id + 1);
        char want[64];
        snprintf(want, sizeof want, "N must be >= 1, got %lld", (long long)bad_n);
        sgk_status st = sgk_forward(s->layer[0], in->B, bad_n, in->nodes, in->pair_feats,
                                    in->edge_mask, in->mask_type, out);
        if (st != SGK_ERR_INVALID_ARGUMENT || strstr(sgk_last_error(), want) == NULL)
            atomic_fetch_add(&s->message_mixups, 1);
    }
    if (!out)
        atomic_fetch_add(&s->failures, 1);
    free(out);
    free(work);
    return NULL;
}

static void test_shared_layer(void **state)
{
    (void)state;
    shared *s = calloc(1, sizeof *s);
    assert_non_null(s);
    rel_fixture_init(&s->f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 21);
    s->layer[0] = s->f.layer;
    s->label[0] = "auto";
    s->layers = 1;
    const char *names[MAX_LAYERS];
    int nv = rel_variants(s->f.layer, B_, N_, names, MAX_LAYERS - 1);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&s->f.w, &desc);
    for (int v = 0; v < nv; v++) {
        sgk_layer *l = NULL;
        assert_int_equal(sgk_layer_create(s->f.ctx, &desc, &l), SGK_OK);
        assert_int_equal(sgk_layer_set_variant(l, names[v]), SGK_OK);
        s->layer[s->layers] = l;
        s->label[s->layers++] = names[v];
    }
    for (int t = 0; t < THREADS; t++) {
        rel_inputs_like(&s->f, &s->in[t], 100 + (uint64_t)t);
        for (int l = 0; l < s->layers; l++) {
            s->expect[l][t] = malloc(s->f.out_floats * sizeof(float));
            assert_non_null(s->expect[l][t]);
            rel_forward_ok(s->layer[l], &s->in[t], s->expect[l][t]);
        }
    }

    pthread_barrier_init(&s->start, NULL, THREADS);
    pthread_t tid[THREADS];
    worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t].s = s;
        w[t].id = t;
        assert_int_equal(pthread_create(&tid[t], NULL, run_worker, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&s->start);

    char labels[256] = "";
    for (int l = 0; l < s->layers; l++)
        snprintf(labels + strlen(labels), sizeof labels - strlen(labels), "%s%s", l ? "," : "",
                 s->label[l]);
    rel_figure("threads backend=%s threads=%d layers=%s calls=%d failures=%d "
               "bitwise_mismatches=%d last_error_mixups=%d",
               g_backend, THREADS, labels, atomic_load(&s->calls), atomic_load(&s->failures),
               atomic_load(&s->mismatches), atomic_load(&s->message_mixups));
    assert_int_equal(atomic_load(&s->failures), 0);
    assert_int_equal(atomic_load(&s->mismatches), 0);
    assert_int_equal(atomic_load(&s->message_mixups), 0);
    assert_true(atomic_load(&s->calls) >= THREADS * ITERS * s->layers);

    for (int l = 1; l < s->layers; l++)
        sgk_layer_destroy(s->layer[l]);
    for (int t = 0; t < THREADS; t++) {
        for (int l = 0; l < s->layers; l++)
            free(s->expect[l][t]);
        sgkt_inputs_free(&s->in[t]);
    }
    rel_fixture_free(&s->f);
    free(s);
}

/* sgk_forward_train and sgk_backward on one shared layer from every thread
 * at once, each with its own inputs: the gradients of nodes, wq and b2 are
 * bitwise those of the same calls made by one thread. Skipped where the
 * backend has no backward. */
typedef struct train_job {
    sgk_layer *layer;
    const sgkt_inputs *in;
    const float *d_out;
    float *got;       /* nodes (B*N*D), wq (D*D), b2 (H) */
    const float *expect;
    pthread_barrier_t *start;
    int bad;
} train_job;

enum { TRAIN_FLOATS = B_ * N_ * D_ + D_ * D_ + H_ };

static sgk_status train_once(sgk_layer *layer, const sgkt_inputs *in, const float *d_out,
                             float *got)
{
    float saved[B_ * H_ * N_], out[B_ * N_ * D_];
    sgk_grads g;
    memset(&g, 0, sizeof g);
    g.nodes = got;
    g.wq = got + B_ * N_ * D_;
    g.b2 = got + B_ * N_ * D_ + D_ * D_;
    sgk_status st = sgk_forward_train(layer, in->B, in->N, in->nodes, in->pair_feats,
                                      in->edge_mask, in->mask_type, out, saved);
    if (st == SGK_OK)
        st = sgk_backward(layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                          in->mask_type, saved, d_out, &g);
    return st;
}

static void *run_train(void *arg)
{
    train_job *j = arg;
    pthread_barrier_wait(j->start);
    for (int it = 0; it < 3; it++) {
        memset(j->got, 0, TRAIN_FLOATS * sizeof(float));
        if (train_once(j->layer, j->in, j->d_out, j->got) != SGK_OK ||
            !rel_bitwise_equal(j->got, j->expect, TRAIN_FLOATS))
            j->bad++;
    }
    return NULL;
}

static void test_shared_layer_backward(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_F32, 23);
    size_t bytes = 0;
    if (sgk_saved_size(f.layer, B_, N_, &bytes) == SGK_ERR_UNSUPPORTED) {
        rel_figure("threads backend=%s backward skipped: %s", g_backend, sgk_last_error());
        rel_fixture_free(&f);
        skip();
    }
    sgkt_inputs in[THREADS];
    train_job job[THREADS];
    static float d_out[B_ * N_ * D_];
    for (size_t i = 0; i < sizeof d_out / sizeof d_out[0]; i++)
        d_out[i] = (float)((int)(i % 11) - 5) * 0.125f;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int t = 0; t < THREADS; t++) {
        rel_inputs_like(&f, &in[t], 300 + (uint64_t)t);
        float *expect = malloc(TRAIN_FLOATS * sizeof(float));
        float *got = malloc(TRAIN_FLOATS * sizeof(float));
        assert_non_null(expect);
        assert_non_null(got);
        assert_int_equal(train_once(f.layer, &in[t], d_out, expect), SGK_OK);
        train_job j = {f.layer, &in[t], d_out, got, expect, &start, 0};
        job[t] = j;
    }
    pthread_t tid[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&tid[t], NULL, run_train, &job[t]), 0);
    int bad = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        bad += job[t].bad;
        free(job[t].got);
        free((float *)job[t].expect);
        sgkt_inputs_free(&in[t]);
    }
    pthread_barrier_destroy(&start);
    rel_figure("threads backend=%s backward threads=%d calls=%d bitwise_mismatches_or_failures=%d",
               g_backend, THREADS, THREADS * 3, bad);
    rel_fixture_free(&f);
    assert_int_equal(bad, 0);
}

/* Each thread creates, uses and destroys contexts and layers of its own,
 * all at once; results match a layer built once beforehand. */
typedef struct churn {
    const rel_fixture *f;
    const float *expect;
    pthread_barrier_t *start;
    int bad;
} churn;

static void *run_churn(void *arg)
{
    churn *c = arg;
    float *out = malloc(c->f->out_floats * sizeof(float));
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&c->f->w, &desc);
    sgk_context_options opt;
    sgk_context_options_init(&opt);
    opt.cpu_threads = 2;
    pthread_barrier_wait(c->start);
    for (int it = 0; it < 4 && out; it++) {
        sgk_context *ctx = NULL;
        sgk_layer *layer = NULL;
        if (sgk_context_create(g_backend, 0, &opt, &ctx) != SGK_OK ||
            sgk_layer_create(ctx, &desc, &layer) != SGK_OK ||
            sgk_forward(layer, c->f->in.B, c->f->in.N, c->f->in.nodes, c->f->in.pair_feats,
                        c->f->in.edge_mask, c->f->in.mask_type, out) != SGK_OK ||
            !rel_bitwise_equal(out, c->expect, c->f->out_floats))
            c->bad++;
        sgk_layer_destroy(layer);
        sgk_context_destroy(ctx);
    }
    if (!out)
        c->bad++;
    free(out);
    return NULL;
}

static void test_concurrent_create_destroy(void **state)
{
    (void)state;
    rel_fixture f;
    rel_fixture_init(&f, g_backend, 2, B_, N_, D_, H_, P_, SGK_MASK_U8, 22);
    float *expect = malloc(f.out_floats * sizeof(float));
    assert_non_null(expect);
    rel_forward_ok(f.layer, &f.in, expect);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t tid[THREADS];
    churn c[THREADS];
    for (int t = 0; t < THREADS; t++) {
        c[t] = (churn){&f, expect, &start, 0};
        assert_int_equal(pthread_create(&tid[t], NULL, run_churn, &c[t]), 0);
    }
    int bad = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        bad += c[t].bad;
    }
    pthread_barrier_destroy(&start);
    rel_figure("threads backend=%s threads=%d create_use_destroy_cycles=%d bad=%d", g_backend,
               THREADS, THREADS * 4, bad);
    assert_int_equal(bad, 0);
    free(expect);
    rel_fixture_free(&f);
}

/* The registry is built by whichever call comes first; let 8 threads race
 * to be first. Must run before anything else in the process touches sgk. */
typedef struct first_call {
    pthread_barrier_t *start;
    sgk_backend_info info;
    sgk_status st;
    int count;
} first_call;

static void *run_first_call(void *arg)
{
    first_call *fc = arg;
    pthread_barrier_wait(fc->start);
    fc->st = sgk_backend_find(g_backend, &fc->info);
    fc->count = sgk_backend_count();
    return NULL;
}

static int race_registry(void)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t tid[THREADS];
    first_call fc[THREADS];
    for (int t = 0; t < THREADS; t++) {
        fc[t].start = &start;
        if (pthread_create(&tid[t], NULL, run_first_call, &fc[t]) != 0)
            return 0;
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    int same = 1;
    for (int t = 0; t < THREADS; t++)
        same = same && fc[t].st == SGK_OK && fc[t].count == fc[0].count &&
               fc[t].info.available == fc[0].info.available &&
               fc[t].info.device_count == fc[0].info.device_count &&
               strcmp(fc[t].info.reason, fc[0].info.reason) == 0;
    rel_figure("threads backend=%s registry_first_use_by=%d threads agree=%d", g_backend,
               THREADS, same);
    return same;
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    if (!race_registry()) {
        fprintf(stderr, "threads racing to build the registry saw different backends\n");
        return 1;
    }
    rel_require_backend(g_backend);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_layer),
        cmocka_unit_test(test_shared_layer_backward),
        cmocka_unit_test(test_concurrent_create_destroy),
    };
    return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
