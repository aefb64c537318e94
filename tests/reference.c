/* Double-precision reference of the relation update (SPEC section 1).
 *
 * Written for clarity, not speed: per batch entry it forms the LayerNorm rows,
 * the three projections, then for each query row the relation-MLP bias of
 * every edge, the masked softmax per head, the context and the output row.
 * Rows are independent, so OpenMP (when built with it) spreads them over
 * threads; each row's arithmetic is sequential, so results do not depend on
 * the thread count. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_run {
    const sgk_ref_layer *L;
    unsigned flaws;
} ref_run;

/* Weight element [out][in] of a (rows, cols) Linear weight; the transposed
 * flaw reads the same buffer as if it were laid out [in][out]. */
static double wget(const ref_run *r, const float *w, int64_t rows, int64_t cols, int64_t o,
                   int64_t i)
{
    if (r->flaws & SGK_REF_FLAW_TRANSPOSED)
        return (double)w[i * rows + o];
    return (double)w[o * cols + i];
}

/* Rounds to 11 significant bits (IEEE half's precision, without its range). */
static double narrow(const ref_run *r, double x)
{
    if (!(r->flaws & SGK_REF_FLAW_NARROW_SCRATCH) || !isfinite(x) || x == 0.0)
        return x;
    int e;
    double m = frexp(x, &e);
    return ldexp(nearbyint(ldexp(m, 11)), e - 11);
}

static int is_edge(const void *mask, sgk_mask_type t, size_t idx)
{
    if (t == SGK_MASK_U8)
        return ((const uint8_t *)mask)[idx] != 0;
    return ((const float *)mask)[idx] != 0.0f; /* NaN is nonzero: an edge */
}

static void layer_norm(const ref_run *r, int64_t N, const float *nodes, double *x)
{
    const sgk_ref_layer *L = r->L;
    int64_t D = L->D;
    double prev_mean = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = nodes + i * D;
        double mean = 0.0;
        for (int64_t c = 0; c < D; c++)
            mean += (double)row[c];
        mean /= (double)D;
        double center = mean;
        if ((r->flaws & SGK_REF_FLAW_STALE_SCRATCH) && i > 0)
            center = prev_mean;
        double var = 0.0;
        for (int64_t c = 0; c < D; c++) {
            double d = (double)row[c] - center;
            var += d * d;
        }
        var /= (double)D;
        prev_mean = mean;
        double inv = 1.0 / sqrt(var + L->eps);
        for (int64_t c = 0; c < D; c++)
            x[i * D + c] = narrow(r, ((double)row[c] - mean) * inv * (double)L->ln_gamma[c] +
                                         (double)L->ln_beta[c]);
    }
}

/* y = x W^T for an (N, D) x and a (D, D) weight. */
static void project(const ref_run *r, int64_t N, const double *x, const float *w, double *y)
{
    int64_t D = r->L->D;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < D; o++) {
            double acc = 0.0;
            for (int64_t c = 0; c < D; c++)
                acc += x[i * D + c] * wget(r, w, D, D, o, c);
            y[i * D + o] = narrow(r, acc);
        }
}

/* bias[h] for the pair feature vector f (length P); hidden is scratch (P). */
static void relation_bias(const ref_run *r, const float *f, double *hidden, double *bias)
{
    const sgk_ref_layer *L = r->L;
    int64_t P = L->P, H = L->H;
    int use_bias = !(r->flaws & SGK_REF_FLAW_NO_MLP_BIAS);
    for (int64_t p = 0; p < P; p++) {
        double t = use_bias ? (double)L->b1[p] : 0.0;
        for (int64_t q = 0; q < P; q++)
            t += wget(r, L->w1, P, P, p, q) * (double)f[q];
        hidden[p] = t / (1.0 + exp(-t));
    }
    for (int64_t h = 0; h < H; h++) {
        double t = use_bias ? (double)L->b2[h] : 0.0;
        for (int64_t p = 0; p < P; p++)
            t += wget(r, L->w2, H, P, h, p) * hidden[p];
        bias[h] = t;
    }
}

/* One query row i: attention over its edges and the output row. Scratch:
 * bias (N*H), score (N), hidden (P), ctx (D). */
static void attend_row(const ref_run *r, int64_t N, int64_t i, const float *nodes_b,
                       const float *pair_b, const void *mask, sgk_mask_type mt,
                       size_t mask_row0, const double *q, const double *k, const double *v,
                       double *bias, double *score, double *hidden, double *ctx, double *out_row)
{
    const sgk_ref_layer *L = r->L;
    int64_t D = L->D, H = L->H, P = L->P, hd = D / H;
    double inv_sqrt_hd = 1.0 / sqrt((double)hd);
    int64_t q_feats = hd;
    if ((r->flaws & SGK_REF_FLAW_HEAD_DIM_32) && q_feats > 32)
        q_feats = 32;

    for (int64_t j = 0; j < N; j++)
        if (is_edge(mask, mt, mask_row0 + (size_t)j))
            relation_bias(r, pair_b + (i * N + j) * P, hidden, bias + j * H);

    for (int64_t h = 0; h < H; h++) {
        const double *qi = q + i * D + h * hd;
        int any = 0;
        double m = -INFINITY, msum = 0.0;
        for (int64_t j = 0; j < N; j++) {
            if (!is_edge(mask, mt, mask_row0 + (size_t)j)) {
                score[j] = -INFINITY;
                continue;
            }
            const double *kj = k + j * D + h * hd;
            double dot = 0.0;
            for (int64_t t = 0; t < q_feats; t++)
                dot += qi[t] * kj[t];
            score[j] = dot * inv_sqrt_hd + bias[j * H + h];
            m = any ? fmax(m, score[j]) : score[j];
            msum += score[j];
            any = 1;
        }
        if (r->flaws & SGK_REF_FLAW_SUM_AS_MAX)
            m = msum;
        double denom = 0.0;
        for (int64_t j = 0; j < N; j++)
            if (score[j] != -INFINITY)
                denom += exp(score[j] - m);
        if (!any) {
            /* every key masked: attention is all zeros (the flaw divides 0 by 0) */
            double fill = (r->flaws & SGK_REF_FLAW_MASKED_NAN) ? NAN : 0.0;
            for (int64_t t = 0; t < hd; t++)
                ctx[h * hd + t] = fill;
            continue;
        }
        for (int64_t t = 0; t < hd; t++)
            ctx[h * hd + t] = 0.0;
        for (int64_t j = 0; j < N; j++) {
            if (score[j] == -INFINITY)
                continue;
            double a = narrow(r, exp(score[j] - m) / denom);
            const double *vj = v + j * D + h * hd;
            for (int64_t t = 0; t < hd; t++)
                ctx[h * hd + t] += a * vj[t];
        }
    }
    for (int64_t c = 0; c < D; c++)
        ctx[c] = narrow(r, ctx[c]);

    for (int64_t o = 0; o < D; o++) {
        double acc = 0.0;
        for (int64_t c = 0; c < D; c++)
            acc += ctx[c] * wget(r, L->wo, D, D, o, c);
        out_row[o] = (double)nodes_b[i * D + o] + acc;
        if ((r->flaws & SGK_REF_FLAW_DIM_1024) && o >= 1024)
            out_row[o] = NAN;
    }
}

static int forward_batch(const ref_run *r, int64_t N, const float *nodes_b, const float *pair_b,
                         const void *mask, sgk_mask_type mt, size_t mask_b0, double *x,
                         double *q, double *k, double *v, double *out_b)
{
    const sgk_ref_layer *L = r->L;
    int64_t D = L->D, H = L->H, P = L->P;
    layer_norm(r, N, nodes_b, x);
    project(r, N, x, L->wq, q);
    project(r, N, x, L->wk, k);
    project(r, N, x, L->wv, v);

    int failed = 0;
#if defined(_OPENMP)
#pragma omp parallel reduction(| : failed)
#endif
    {
        double *bias = malloc((size_t)(N * H) * sizeof(double));
        double *score = malloc((size_t)N * sizeof(double));
        double *hidden = malloc((size_t)P * sizeof(double));
        double *ctx = malloc((size_t)D * sizeof(double));
        if (!bias || !score || !hidden || !ctx) {
            failed = 1;
        } else {
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 4)
#endif
            for (int64_t i = 0; i < N; i++)
                attend_row(r, N, i, nodes_b, pair_b, mask, mt, mask_b0 + (size_t)(i * N), q, k,
                           v, bias, score, hidden, ctx, out_b + i * D);
        }
        free(bias);
        free(score);
        free(hidden);
        free(ctx);
    }
    return failed ? -1 : 0;
}

int sgk_ref_forward_flawed(const sgk_ref_layer *layer, int64_t B, int64_t N,
                           const float *nodes, const float *pair_feats, const void *mask,
                           sgk_mask_type mask_type, unsigned flaws, double *out_d,
                           float *out_f)
{
    if (!layer || !nodes || !pair_feats || !mask || B < 1 || N < 1 || layer->D < 1 ||
        layer->H < 1 || layer->P < 1 || layer->D % layer->H != 0 ||
        (mask_type != SGK_MASK_F32 && mask_type != SGK_MASK_U8))
        return -1;
    int64_t D = layer->D, P = layer->P;
    size_t nd = (size_t)(N * D);
    double *x = malloc(nd * sizeof(double));
    double *q = malloc(nd * sizeof(double));
    double *k = malloc(nd * sizeof(double));
    double *v = malloc(nd * sizeof(double));
    double *o = malloc(nd * sizeof(double));
    int rc = (x && q && k && v && o) ? 0 : -1;
    ref_run r = {layer, flaws};
    for (int64_t b = 0; b < B && rc == 0; b++) {
        rc = forward_batch(&r, N, nodes + b * N * D, pair_feats + b * N * N * P, mask, mask_type,
                           (size_t)(b * N * N), x, q, k, v, o);
        if (rc)
            break;
        for (size_t e = 0; e < nd; e++) {
            if (out_d)
                out_d[(size_t)b * nd + e] = o[e];
            if (out_f)
                out_f[(size_t)b * nd + e] = (float)o[e];
        }
    }
    free(x);
    free(q);
    free(k);
    free(v);
    free(o);
    return rc;
}

int sgk_ref_forward(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                    const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                    double *out_d, float *out_f)
{
    return sgk_ref_forward_flawed(layer, B, N, nodes, pair_feats, mask, mask_type, 0, out_d,
                                  out_f);
}
