/* Weights, inputs and the reference, made once per shape; progress and notes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (opt->dtype != SGK_DTYPE_F32 && sgkt_round16(opt->dtype, &cd->w, &cd->in, &cd->h) != 0) {
        sgkt_weights_free(&cd->w);
        sgkt_inputs_free(&cd->in);
        return -1;
    }
    cd->ready = 1;
    return 0;
}

void case_desc(const bench_options *opt, const case_data *cd, sgk_layer_desc *desc)
{
    sgk_layer_desc_init(desc);
    if (opt->dtype != SGK_DTYPE_F32)
        sgkt_desc16(opt->dtype, &cd->w, &cd->h, desc);
    else
        sgkt_weights_to_desc(&cd->w, desc);
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
    sgkt_case16_free(&cd->h);
    free(cd->ref);
    memset(cd, 0, sizeof *cd);
}
