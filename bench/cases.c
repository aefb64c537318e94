/* Weights, inputs and the reference, made once per shape; progress and notes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "reference.h"
#include "run_internal.h"

void progress(const bench_options *opt, const char *fmt, ...)
{
    if (!opt->progress) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

void progress_clear(const bench_options *opt)
{
    if (opt->progress) fputs("\r\033[K", stderr), fflush(stderr);
}

void add_note(bench_results *res, const char *fmt, ...)
{
    size_t used = strlen(res->notes);
    if (used + 2 >= sizeof res->notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->notes + used, sizeof res->notes - used - 1, fmt, ap);
    va_end(ap);
    strcat(res->notes, "\n");
}

static int to_16bit(sgk_dtype dtype, const bench_shape *s, case_data *cd);

int case_prepare(const bench_options *opt, const bench_shape *s, case_data *cd)
{
    if (cd->ready) return 0;
    if (sgkt_weights_alloc(&cd->w, s->D, s->H, s->P) != 0) return -1;
    if (sgkt_inputs_alloc(&cd->in, s->B, s->N, s->D, s->P, opt->mask_type) != 0) {
        sgkt_weights_free(&cd->w);
        return -1;
    }
    /* Weights and inputs depend only on the seed and the shape, so rows of
     * one shape from different runs and machines see the same numbers. */
    sgkt_rng rng;
    sgkt_rng_seed(&rng, sgkt_seed_mix(opt->seed, 1));
    sgkt_weights_random(&cd->w, &rng);
    sgkt_rng_seed(&rng, sgkt_seed_mix(opt->seed, 2));
    sgkt_inputs_random(&cd->in, &rng, SGKT_MASK_RANDOM, opt->density);
    if (opt->dtype != SGK_DTYPE_F32 && to_16bit(opt->dtype, s, cd) != 0) {
        sgkt_weights_free(&cd->w);
        sgkt_inputs_free(&cd->in);
        return -1;
    }
    cd->ready = 1;
    return 0;
}

/* n floats at x rounded to dtype in place, and the 16-bit values to h. */
static void round_to(sgk_dtype dtype, float *x, uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h[i] = dtype == SGK_DTYPE_BF16 ? sgk_bf16_from_f32(x[i]) : sgk_f16_from_f32(x[i]);
        x[i] = dtype == SGK_DTYPE_BF16 ? sgk_f32_from_bf16(h[i]) : sgk_f32_from_f16(h[i]);
    }
}

/* The weights in sgk_layer_desc's order and their element counts. */
static void weight_list(const bench_shape *s, const case_data *cd, float *w[10], size_t n[10])
{
    float *p[10] = {cd->w.ln_gamma, cd->w.ln_beta, cd->w.wq, cd->w.wk, cd->w.wv,
                    cd->w.wo, cd->w.w1, cd->w.b1, cd->w.w2, cd->w.b2};
    const size_t D = (size_t)s->D, H = (size_t)s->H, P = (size_t)s->P;
    const size_t c[10] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    memcpy(w, p, sizeof p);
    memcpy(n, c, sizeof c);
}

static int to_16bit(sgk_dtype dtype, const bench_shape *s, case_data *cd)
{
    float *w[10];
    size_t n[10], total = 0;
    weight_list(s, cd, w, n);
    for (int i = 0; i < 10; i++) total += n[i];
    const size_t nd = (size_t)(s->B * s->N * s->D), np = (size_t)(s->B * s->N * s->N * s->P);
    cd->w16 = malloc(total * sizeof(uint16_t));
    cd->nodes16 = malloc(nd * sizeof(uint16_t));
    cd->pair16 = malloc(np * sizeof(uint16_t));
    if (!cd->w16 || !cd->nodes16 || !cd->pair16) {
        free(cd->w16), free(cd->nodes16), free(cd->pair16);
        cd->w16 = cd->nodes16 = cd->pair16 = NULL;
        return -1;
    }
    size_t at = 0;
    for (int i = 0; i < 10; i++) {
        round_to(dtype, w[i], cd->w16 + at, n[i]);
        at += n[i];
    }
    round_to(dtype, cd->in.nodes, cd->nodes16, nd);
    round_to(dtype, cd->in.pair_feats, cd->pair16, np);
    return 0;
}

void case_desc(const bench_options *opt, const case_data *cd, sgk_layer_desc *desc)
{
    sgk_layer_desc_init(desc);
    sgkt_weights_to_desc(&cd->w, desc);
    if (opt->dtype == SGK_DTYPE_F32)
        return;
    const bench_shape s = {0, 0, cd->w.D, cd->w.H, cd->w.P};
    float *w[10];
    size_t n[10], at = 0;
    weight_list(&s, cd, w, n);
    const void **dst[10] = {&desc->ln_gamma, &desc->ln_beta, &desc->wq, &desc->wk, &desc->wv,
                            &desc->wo, &desc->w1, &desc->b1, &desc->w2, &desc->b2};
    for (int i = 0; i < 10; i++) {
        *dst[i] = cd->w16 + at;
        at += n[i];
    }
    desc->dtype = opt->dtype;
}

const double *case_reference(const bench_options *opt, const char *name, const bench_shape *s,
                                    case_data *cd)
{
    if (cd->ref || cd->ref_failed) return cd->ref;
    progress(opt, "reference for %s ...", name);
    size_t n = (size_t)(s->B * s->N * s->D);
    cd->ref = malloc(n * sizeof(double));
    sgk_ref_layer L = {s->D, s->H, s->P, cd->w.eps, cd->w.ln_gamma, cd->w.ln_beta, cd->w.wq, cd->w.wk,
                       cd->w.wv, cd->w.wo, cd->w.w1, cd->w.b1, cd->w.w2, cd->w.b2};
    if (!cd->ref || sgk_ref_forward(&L, s->B, s->N, cd->in.nodes, cd->in.pair_feats, cd->in.edge_mask,
                                    cd->in.mask_type, cd->ref, NULL) != 0) {
        free(cd->ref);
        cd->ref = NULL;
        cd->ref_failed = 1;
    }
    return cd->ref;
}

void case_free(case_data *cd)
{
    if (!cd->ready) return;
    sgkt_weights_free(&cd->w);
    sgkt_inputs_free(&cd->in);
    free(cd->w16), free(cd->nodes16), free(cd->pair16);
    free(cd->ref);
    memset(cd, 0, sizeof *cd);
}
