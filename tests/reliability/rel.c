#include "rel.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "reliability fixture: %s: %s\n", what, sgk_last_error());
    abort();
}

void rel_require_backend(const char *backend)
{
    sgk_backend_info info;
    if (sgk_backend_find(backend, &info) != SGK_OK) {
        printf("skip: %s\n", sgk_last_error());
        exit(REL_SKIP);
    }
    if (!info.available) {
        printf("skip: backend %s is unavailable: %s\n", backend, info.reason);
        exit(REL_SKIP);
    }
}

void rel_fixture_init(rel_fixture *f, const char *backend, int cpu_threads, int64_t B,
                      int64_t N, int64_t D, int64_t H, int64_t P, sgk_mask_type mask_type,
                      uint64_t seed)
{
    memset(f, 0, sizeof *f);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    if (sgkt_weights_alloc(&f->w, D, H, P) != 0)
        die("weights");
    sgkt_weights_random(&f->w, &rng);
    if (sgkt_inputs_alloc(&f->in, B, N, D, P, mask_type) != 0)
        die("inputs");
    sgkt_inputs_random(&f->in, &rng, SGKT_MASK_EMPTY_ROWS, 0.6);
    f->out_floats = (size_t)(B * N * D);

    sgk_context_options opt;
    sgk_context_options_init(&opt);
    opt.cpu_threads = cpu_threads;
    if (sgk_context_create(backend, 0, &opt, &f->ctx) != SGK_OK)
        die("sgk_context_create");
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&f->w, &desc);
    if (sgk_layer_create(f->ctx, &desc, &f->layer) != SGK_OK)
        die("sgk_layer_create");
}

void rel_fixture_free(rel_fixture *f)
{
    sgk_layer_destroy(f->layer);
    sgk_context_destroy(f->ctx);
    sgkt_inputs_free(&f->in);
    sgkt_weights_free(&f->w);
    memset(f, 0, sizeof *f);
}

void rel_inputs_like(const rel_fixture *f, sgkt_inputs *in, uint64_t seed)
{
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    if (sgkt_inputs_alloc(in, f->in.B, f->in.N, f->in.D, f->in.P, f->in.mask_type) != 0)
        die("inputs");
    sgkt_inputs_random(in, &rng, SGKT_MASK_EMPTY_ROWS, 0.6);
}

int rel_variants(sgk_layer *layer, int64_t B, int64_t N, const char **names, int capacity)
{
    const char *all[16];
    int supported[16], count = 0;
    if (sgk_layer_variants(layer, B, N, all, supported, 16, &count) != SGK_OK)
        die("sgk_layer_variants");
    int n = 0;
    for (int v = 0; v < count && n < capacity; v++)
        if (supported[v])
            names[n++] = all[v];
    return n;
}

void rel_forward_ok(sgk_layer *layer, const sgkt_inputs *in, float *out)
{
    if (sgk_forward(layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                    in->mask_type, out) != SGK_OK)
        die("sgk_forward");
}

int rel_bitwise_equal(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

double rel_max_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y)))
                return INFINITY;
            continue;
        }
        double d = fabs(x - y) / fmax(1.0, fabs(y));
        if (d > worst)
            worst = d;
    }
    return worst;
}

void rel_figure(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("[figure] ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}
