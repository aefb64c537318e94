/* Double-precision reference of the relation update (SPEC section 1): the
 * forward, then its gradients (the backward section below).
 *
 * Written for clarity, not speed: per batch entry it forms the LayerNorm rows,
 * the three projections, then for each query row the relation-MLP bias of
 * every edge, the masked softmax per head, the context and the output row.
 * Rows are independent, so OpenMP (when built with it) spreads them over
 * threads; each row's arithmetic is sequential, so results do not depend on
 * the thread count.
 *
 * Inputs arrive as float (the library's types) or as double (finite
 * differences need steps smaller than a float's spacing). Either way the
 * arithmetic is in double on the same values: a float converts exactly. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

typedef struct ref_run {
    const sgk_ref_layer_d *L;
    unsigned flaws;
    double *row_max, *row_sum; /* (B, H, N) or NULL */
} ref_run;

/* An input tensor given as float or as double: exactly one is set. */
typedef struct ref_src {
    const float *f;
    const double *d;
} ref_src;

/* n values of src from element off, as doubles: src's own memory when it is
 * double, else converted into buf. */
static const double *src_span(ref_src src, size_t off, size_t n, double *buf)
{
    if (src.d)
        return src.d + off;
    for (size_t e = 0; e < n; e++)
        buf[e] = (double)src.f[off + e];
    return buf;
}

/* Weight element [out][in] of a (rows, cols) Linear weight; the transposed
 * flaw reads the same buffer as if it were laid out [in][out]. */
static double wget(const ref_run *r, const double *w, int64_t rows, int64_t cols, int64_t o,
                   int64_t i)
{
    if (r->flaws & SGK_REF_FLAW_TRANSPOSED)
        return w[i * rows + o];
    return w[o * cols + i];
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

static void layer_norm(const ref_run *r, int64_t N, const double *nodes, double *x)
{
    const sgk_ref_layer_d *L = r->L;
    int64_t D = L->D;
    double prev_mean = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const double *row = nodes + i * D;
        double mean = 0.0;
        for (int64_t c = 0; c < D; c++)
            mean += row[c];
        mean /= (double)D;
        double center = mean;
        if ((r->flaws & SGK_REF_FLAW_STALE_SCRATCH) && i > 0)
            center = prev_mean;
        double var = 0.0;
        for (int64_t c = 0; c < D; c++) {
            double d = row[c] - center;
            var += d * d;
        }
        var /= (double)D;
        prev_mean = mean;
        double inv = 1.0 / sqrt(var + L->eps);
        for (int64_t c = 0; c < D; c++)
            x[i * D + c] = narrow(r, (row[c] - mean) * inv * L->ln_gamma[c] + L->ln_beta[c]);
    }
}

/* y = x W^T for an (N, D) x and a (D, D) weight. */
static void project(const ref_run *r, int64_t N, const double *x, const double *w, double *y)
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
static void relation_bias(const ref_run *r, const double *f, double *hidden, double *bias)
{
    const sgk_ref_layer_d *L = r->L;
    int64_t P = L->P, H = L->H;
    int use_bias = !(r->flaws & SGK_REF_FLAW_NO_MLP_BIAS);
    for (int64_t p = 0; p < P; p++) {
        double t = use_bias ? L->b1[p] : 0.0;
        for (int64_t q = 0; q < P; q++)
            t += wget(r, L->w1, P, P, p, q) * f[q];
        hidden[p] = t / (1.0 + exp(-t));
    }
    for (int64_t h = 0; h < H; h++) {
        double t = use_bias ? L->b2[h] : 0.0;
        for (int64_t p = 0; p < P; p++)
            t += wget(r, L->w2, H, P, h, p) * hidden[p];
        bias[h] = t;
    }
}

/* One query row i of batch entry b: attention over its edges and the output
 * row. Scratch: bias (N*H), score (N), hidden (P), ctx (D), feats (N*P). */
static void attend_row(const ref_run *r, int64_t b, int64_t N, int64_t i, const double *nodes_b,
                       ref_src pair, const void *mask, sgk_mask_type mt, const double *q,
                       const double *k, const double *v, double *bias, double *score,
                       double *hidden, double *ctx, double *feats, double *out_row)
{
    const sgk_ref_layer_d *L = r->L;
    int64_t D = L->D, H = L->H, P = L->P, hd = D / H;
    double inv_sqrt_hd = 1.0 / sqrt((double)hd);
    int64_t q_feats = hd;
    if ((r->flaws & SGK_REF_FLAW_HEAD_DIM_32) && q_feats > 32)
        q_feats = 32;

    size_t mask_row0 = (size_t)((b * N + i) * N);
    const double *f = src_span(pair, mask_row0 * (size_t)P, (size_t)(N * P), feats);
    for (int64_t j = 0; j < N; j++)
        if (is_edge(mask, mt, mask_row0 + (size_t)j))
            relation_bias(r, f + j * P, hidden, bias + j * H);

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
        if (r->row_max) {
            size_t st = (size_t)((b * H + h) * N + i);
            r->row_max[st] = m; /* no edge: -inf, and denom stays 0 */
            r->row_sum[st] = denom;
        }
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
        out_row[o] = nodes_b[i * D + o] + acc;
        if ((r->flaws & SGK_REF_FLAW_DIM_1024) && o >= 1024)
            out_row[o] = NAN;
    }
}

static int forward_batch(const ref_run *r, int64_t b, int64_t N, const double *nodes_b,
                         ref_src pair, const void *mask, sgk_mask_type mt, double *x, double *q,
                         double *k, double *v, double *out_b)
{
    const sgk_ref_layer_d *L = r->L;
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
        double *feats = malloc((size_t)(N * P) * sizeof(double));
        if (!bias || !score || !hidden || !ctx || !feats) {
            failed = 1;
        } else {
#if defined(_OPENMP)
#pragma omp for schedule(dynamic, 4)
#endif
            for (int64_t i = 0; i < N; i++)
                attend_row(r, b, N, i, nodes_b, pair, mask, mt, q, k, v, bias, score, hidden,
                           ctx, feats, out_b + i * D);
        }
        free(bias);
        free(score);
        free(hidden);
        free(ctx);
        free(feats);
    }
    return failed ? -1 : 0;
}

static int layer_ok(int64_t D, int64_t H, int64_t P)
{
    return D >= 1 && H >= 1 && P >= 1 && D % H == 0;
}

/* The forward over all batch entries, weights already in double. */
static int forward_all(const ref_run *r, int64_t B, int64_t N, ref_src nodes, ref_src pair,
                       const void *mask, sgk_mask_type mask_type, double *out_d, float *out_f)
{
    if (B < 1 || N < 1 || !nodes.f == !nodes.d || !pair.f == !pair.d || !mask ||
        (mask_type != SGK_MASK_F32 && mask_type != SGK_MASK_U8))
        return -1;
    int64_t D = r->L->D;
    size_t nd = (size_t)(N * D);
    double *x = malloc(nd * sizeof(double));
    double *q = malloc(nd * sizeof(double));
    double *k = malloc(nd * sizeof(double));
    double *v = malloc(nd * sizeof(double));
    double *o = malloc(nd * sizeof(double));
    double *nb = malloc(nd * sizeof(double));
    int rc = (x && q && k && v && o && nb) ? 0 : -1;
    for (int64_t b = 0; b < B && rc == 0; b++) {
        const double *nodes_b = src_span(nodes, (size_t)b * nd, nd, nb);
        rc = forward_batch(r, b, N, nodes_b, pair, mask, mask_type, x, q, k, v, o);
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
    free(nb);
    return rc;
}

/* A float layer's weights converted into one double allocation (*buf). */
static int layer_to_double(const sgk_ref_layer *l, sgk_ref_layer_d *d, double **buf)
{
    const float *src[10] = {l->ln_gamma, l->ln_beta, l->wq, l->wk, l->wv,
                            l->wo,       l->w1,      l->b1, l->w2, l->b2};
    size_t D = (size_t)l->D, H = (size_t)l->H, P = (size_t)l->P;
    size_t n[10] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    size_t total = 0;
    for (int t = 0; t < 10; t++) {
        if (!src[t])
            return -1;
        total += n[t];
    }
    double *w = malloc(total * sizeof(double));
    if (!w)
        return -1;
    const double *dst[10];
    size_t off = 0;
    for (int t = 0; t < 10; t++) {
        for (size_t e = 0; e < n[t]; e++)
            w[off + e] = (double)src[t][e];
        dst[t] = w + off;
        off += n[t];
    }
    sgk_ref_layer_d L = {l->D,   l->H,   l->P,   l->eps, dst[0], dst[1], dst[2], dst[3],
                         dst[4], dst[5], dst[6], dst[7], dst[8], dst[9]};
    *d = L;
    *buf = w;
    return 0;
}

static int forward_float(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                         const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                         unsigned flaws, double *out_d, float *out_f, double *row_max,
                         double *row_sum)
{
    if (!layer || !layer_ok(layer->D, layer->H, layer->P) || !nodes || !pair_feats ||
        !row_max != !row_sum)
        return -1;
    sgk_ref_layer_d L;
    double *w;
    if (layer_to_double(layer, &L, &w))
        return -1;
    ref_run r = {&L, flaws, row_max, row_sum};
    ref_src n = {nodes, NULL}, p = {pair_feats, NULL};
    int rc = forward_all(&r, B, N, n, p, mask, mask_type, out_d, out_f);
    free(w);
    return rc;
}

int sgk_ref_forward_flawed(const sgk_ref_layer *layer, int64_t B, int64_t N,
                           const float *nodes, const float *pair_feats, const void *mask,
                           sgk_mask_type mask_type, unsigned flaws, double *out_d,
                           float *out_f)
{
    return forward_float(layer, B, N, nodes, pair_feats, mask, mask_type, flaws, out_d, out_f,
                         NULL, NULL);
}

int sgk_ref_forward(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                    const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                    double *out_d, float *out_f)
{
    return forward_float(layer, B, N, nodes, pair_feats, mask, mask_type, 0, out_d, out_f, NULL,
                         NULL);
}

int sgk_ref_forward_stats(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                          const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                          double *out_d, float *out_f, double *row_max, double *row_sum)
{
    if (!row_max || !row_sum)
        return -1;
    return forward_float(layer, B, N, nodes, pair_feats, mask, mask_type, 0, out_d, out_f,
                         row_max, row_sum);
}

int sgk_ref_forward_d(const sgk_ref_layer_d *layer, int64_t B, int64_t N, const double *nodes,
                      const double *pair_feats, const void *mask, sgk_mask_type mask_type,
                      double *out)
{
    if (!layer || !layer_ok(layer->D, layer->H, layer->P) || !nodes || !pair_feats ||
        !layer->ln_gamma || !layer->ln_beta || !layer->wq || !layer->wk || !layer->wv ||
        !layer->wo || !layer->w1 || !layer->b1 || !layer->w2 || !layer->b2)
        return -1;
    ref_run r = {layer, 0, NULL, NULL};
    ref_src n = {NULL, nodes}, p = {NULL, pair_feats};
    return forward_all(&r, B, N, n, p, mask, mask_type, out, NULL);
}

/* ---- backward ------------------------------------------------------------
 *
 * The gradients, written from the chain rule of the math, not from the
 * forward's code: the backward recomputes the forward's intermediates itself,
 * then takes the steps back. With G = d_out, per batch entry, row i, key j
 * and head h (q, k, v, ctx restricted to head h's columns where they meet a,
 * s or bias):
 *
 *   out = nodes + ctx Wo^T    dnodes = G + (LayerNorm's part), dWo += G^T ctx, dctx = G Wo
 *   ctx_i = sum_j a_ij v_j    dv_j = sum_i a_ij dctx_i, da_ij = dctx_i . v_j
 *   a_i = softmax on edges    ds_ij = a_ij (da_ij - sum_j' a_ij' da_ij')
 *   s_ij = q_i.k_j / sqrt(hd) + bias_ij
 *                             dq_i = sum_j ds_ij k_j / sqrt(hd), dk_j = sum_i ds_ij q_i / sqrt(hd)
 *   bias_ij = w2 g + b2       dw2 += ds_ij g^T, db2 += ds_ij, dg = w2^T ds_ij (ds_ij over h)
 *   g = silu(u)               du = dg silu'(u)
 *   u = w1 f_ij + b1          dw1 += du f_ij^T, db1 += du, df_ij = w1^T du
 *   q, k, v = x W^T           dWq += dq^T x (and k, v), dx = dq Wq + dk Wk + dv Wv
 *   x = xhat gamma + beta     dgamma += dx xhat, dbeta += dx, dxh = dx gamma
 *   xhat = (n - mean) rstd    dnodes += rstd (dxh - mean(dxh) - xhat mean(dxh xhat))
 *
 * A non-edge has a = 0 and ds = 0 and its pair features get zero; a row with
 * no edge has a = 0 everywhere, so ctx_i = 0 and its query gets nothing.
 *
 * OpenMP (when built with it) spreads loops whose every output element has
 * one owner; each element's sum runs in a fixed order. The relation MLP's
 * weight gradients, which every pair adds to, are summed per block of rows
 * of a fixed size and the blocks then in order, so the result does not
 * depend on the thread count. Memory is O(H*N*N) per batch entry (the
 * attention and its gradient are kept), fine for N up to several hundred. */

/* rows whose relation-MLP weight gradients share one partial sum */
#define ROW_BLOCK 8

enum { G_GAMMA, G_BETA, G_WQ, G_WK, G_WV, G_WO, G_W1, G_B1, G_W2, G_B2, G_COUNT };

typedef struct bwd {
    const sgk_ref_layer *L;
    int64_t N, D, H, P, hd;
    double scale;
    const void *mask;
    sgk_mask_type mt;
    /* one batch entry: (N, D) each, rstd (N) */
    double *xhat, *rstd, *x, *q, *k, *v, *ctx, *dctx, *dq, *dk, *dv, *dx;
    double *a, *ds;   /* (H, N, N): [(h*N + i)*N + j] */
    double *part;     /* per row block: dw1 (P*P), db1 (P), dw2 (H*P), db2 (H) */
    size_t part_size;
    double *scratch;  /* per thread: u, g (N*P each), bias (N*H), da (N), du (P) */
    size_t scratch_size;
    /* summed over the batch, in PyTorch layout */
    double *acc[G_COUNT];
    size_t count[G_COUNT];
} bwd;

static double bw_w(const float *w, int64_t cols, int64_t o, int64_t i)
{
    return (double)w[o * cols + i];
}

static int bw_edge(const bwd *w, int64_t b, int64_t i, int64_t j)
{
    size_t idx = (size_t)((b * w->N + i) * w->N + j);
    if (w->mt == SGK_MASK_U8)
        return ((const uint8_t *)w->mask)[idx] != 0;
    return ((const float *)w->mask)[idx] != 0.0f; /* NaN is nonzero: an edge */
}

static double bw_sigmoid(double t) { return 1.0 / (1.0 + exp(-t)); }

static void bw_layer_norm(bwd *w, const float *nodes_b)
{
    const sgk_ref_layer *L = w->L;
    int64_t D = w->D;
    for (int64_t i = 0; i < w->N; i++) {
        const float *row = nodes_b + i * D;
        double mean = 0.0, var = 0.0;
        for (int64_t c = 0; c < D; c++)
            mean += (double)row[c];
        mean /= (double)D;
        for (int64_t c = 0; c < D; c++)
            var += ((double)row[c] - mean) * ((double)row[c] - mean);
        var /= (double)D;
        w->rstd[i] = 1.0 / sqrt(var + L->eps);
        for (int64_t c = 0; c < D; c++) {
            double xh = ((double)row[c] - mean) * w->rstd[i];
            w->xhat[i * D + c] = xh;
            w->x[i * D + c] = xh * (double)L->ln_gamma[c] + (double)L->ln_beta[c];
        }
    }
}

/* y = x W^T, (N, D) by a (D, D) weight */
static void bw_linear(const bwd *w, const double *x, const float *wt, double *y)
{
    int64_t D = w->D;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < w->N; i++)
        for (int64_t o = 0; o < D; o++) {
            double s = 0.0;
            for (int64_t c = 0; c < D; c++)
                s += x[i * D + c] * bw_w(wt, D, o, c);
            y[i * D + o] = s;
        }
}

/* Row i of batch entry b: the relation MLP of its edges, the softmax per
 * head (into w->a), ctx_i, dctx_i, ds (into w->ds), dq_i, then the MLP's
 * backward for every pair (i, j): df into dpair_b, weight gradients added
 * to part. */
static void bw_row(bwd *w, int64_t b, int64_t i, const float *pair_b, const float *dout_b,
                     double *dpair_b, double *part, double *scr)
{
    const sgk_ref_layer *L = w->L;
    int64_t N = w->N, D = w->D, H = w->H, P = w->P, hd = w->hd;
    double *u = scr, *g = u + N * P, *bias = g + N * P, *da = bias + N * H, *du = da + N;
    double *dw1 = part, *db1 = dw1 + P * P, *dw2 = db1 + P, *db2 = dw2 + H * P;
    const float *f_i = pair_b + i * N * P;

    int any = 0;
    for (int64_t j = 0; j < N; j++) {
        if (!bw_edge(w, b, i, j))
            continue;
        any = 1;
        for (int64_t p = 0; p < P; p++) {
            double t = (double)L->b1[p];
            for (int64_t r = 0; r < P; r++)
                t += bw_w(L->w1, P, p, r) * (double)f_i[j * P + r];
            u[j * P + p] = t;
            g[j * P + p] = t * bw_sigmoid(t);
        }
        for (int64_t h = 0; h < H; h++) {
            double t = (double)L->b2[h];
            for (int64_t p = 0; p < P; p++)
                t += bw_w(L->w2, P, h, p) * g[j * P + p];
            bias[j * H + h] = t;
        }
    }

    for (int64_t h = 0; h < H; h++) {
        double *ah = w->a + (h * N + i) * N;
        const double *qi = w->q + i * D + h * hd;
        double m = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < N; j++) {
            ah[j] = 0.0;
            if (!bw_edge(w, b, i, j))
                continue;
            double s = 0.0;
            for (int64_t t = 0; t < hd; t++)
                s += qi[t] * w->k[j * D + h * hd + t];
            ah[j] = s * w->scale + bias[j * H + h];
            m = fmax(m, ah[j]);
        }
        if (!any)
            continue; /* no edge: the row's attention stays all zeros */
        for (int64_t j = 0; j < N; j++)
            if (bw_edge(w, b, i, j))
                sum += exp(ah[j] - m);
        for (int64_t j = 0; j < N; j++)
            ah[j] = bw_edge(w, b, i, j) ? exp(ah[j] - m) / sum : 0.0;
    }

    for (int64_t c = 0; c < D; c++) {
        const double *ah = w->a + ((c / hd) * N + i) * N;
        double s = 0.0;
        for (int64_t j = 0; j < N; j++)
            s += ah[j] * w->v[j * D + c];
        w->ctx[i * D + c] = s;
        double t = 0.0;
        for (int64_t o = 0; o < D; o++)
            t += (double)dout_b[i * D + o] * bw_w(L->wo, D, o, c);
        w->dctx[i * D + c] = t;
    }

    for (int64_t h = 0; h < H; h++) {
        const double *ah = w->a + (h * N + i) * N;
        double *dsh = w->ds + (h * N + i) * N;
        double rho = 0.0;
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t t = 0; t < hd; t++)
                s += w->dctx[i * D + h * hd + t] * w->v[j * D + h * hd + t];
            da[j] = s;
            rho += ah[j] * s;
        }
        for (int64_t j = 0; j < N; j++)
            dsh[j] = bw_edge(w, b, i, j) ? ah[j] * (da[j] - rho) : 0.0;
        for (int64_t t = 0; t < hd; t++) {
            double s = 0.0;
            for (int64_t j = 0; j < N; j++)
                s += dsh[j] * w->k[j * D + h * hd + t];
            w->dq[i * D + h * hd + t] = s * w->scale;
        }
    }

    for (int64_t j = 0; j < N; j++) {
        double *df = dpair_b ? dpair_b + (i * N + j) * P : NULL;
        if (!bw_edge(w, b, i, j)) {
            for (int64_t r = 0; df && r < P; r++)
                df[r] = 0.0;
            continue;
        }
        for (int64_t h = 0; h < H; h++) {
            double dbias = w->ds[(h * N + i) * N + j];
            db2[h] += dbias;
            for (int64_t p = 0; p < P; p++)
                dw2[h * P + p] += dbias * g[j * P + p];
        }
        for (int64_t p = 0; p < P; p++) {
            double dg = 0.0;
            for (int64_t h = 0; h < H; h++)
                dg += w->ds[(h * N + i) * N + j] * bw_w(L->w2, P, h, p);
            double t = u[j * P + p], sg = bw_sigmoid(t);
            du[p] = dg * sg * (1.0 + t * (1.0 - sg)); /* silu'(t) */
            db1[p] += du[p];
            for (int64_t r = 0; r < P; r++)
                dw1[p * P + r] += du[p] * (double)f_i[j * P + r];
        }
        for (int64_t r = 0; df && r < P; r++) {
            double s = 0.0;
            for (int64_t p = 0; p < P; p++)
                s += du[p] * bw_w(L->w1, P, p, r);
            df[r] = s;
        }
    }
}

/* dk, dv (each row j its own owner), the projections' weight gradients and
 * dx, then LayerNorm's backward into dnodes_b. */
static void bw_finish(bwd *w, const float *dout_b, double *dnodes_b)
{
    const sgk_ref_layer *L = w->L;
    int64_t N = w->N, D = w->D, hd = w->hd;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (int64_t j = 0; j < N; j++)
        for (int64_t c = 0; c < D; c++) {
            int64_t h = c / hd;
            double sk = 0.0, sv = 0.0;
            for (int64_t i = 0; i < N; i++) {
                sk += w->ds[(h * N + i) * N + j] * w->q[i * D + c];
                sv += w->a[(h * N + i) * N + j] * w->dctx[i * D + c];
            }
            w->dk[j * D + c] = sk * w->scale;
            w->dv[j * D + c] = sv;
        }

#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (int64_t o = 0; o < D; o++)
        for (int64_t c = 0; c < D; c++) {
            double so = 0.0, sq = 0.0, sk = 0.0, sv = 0.0;
            for (int64_t i = 0; i < N; i++) {
                so += (double)dout_b[i * D + o] * w->ctx[i * D + c];
                sq += w->dq[i * D + o] * w->x[i * D + c];
                sk += w->dk[i * D + o] * w->x[i * D + c];
                sv += w->dv[i * D + o] * w->x[i * D + c];
            }
            w->acc[G_WO][o * D + c] += so;
            w->acc[G_WQ][o * D + c] += sq;
            w->acc[G_WK][o * D + c] += sk;
            w->acc[G_WV][o * D + c] += sv;
        }

#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < D; c++) {
            double s = 0.0;
            for (int64_t o = 0; o < D; o++)
                s += w->dq[i * D + o] * bw_w(L->wq, D, o, c) +
                     w->dk[i * D + o] * bw_w(L->wk, D, o, c) +
                     w->dv[i * D + o] * bw_w(L->wv, D, o, c);
            w->dx[i * D + c] = s;
        }

    for (int64_t c = 0; c < D; c++)
        for (int64_t i = 0; i < N; i++) {
            w->acc[G_GAMMA][c] += w->dx[i * D + c] * w->xhat[i * D + c];
            w->acc[G_BETA][c] += w->dx[i * D + c];
        }

    for (int64_t i = 0; i < N; i++) {
        const double *xh = w->xhat + i * D;
        double m1 = 0.0, m2 = 0.0;
        for (int64_t c = 0; c < D; c++) {
            double dxh = w->dx[i * D + c] * (double)L->ln_gamma[c];
            m1 += dxh;
            m2 += dxh * xh[c];
        }
        m1 /= (double)D;
        m2 /= (double)D;
        for (int64_t c = 0; c < D; c++) {
            double dxh = w->dx[i * D + c] * (double)L->ln_gamma[c];
            dnodes_b[i * D + c] =
                (double)dout_b[i * D + c] + w->rstd[i] * (dxh - m1 - xh[c] * m2);
        }
    }
}

static void bw_batch(bwd *w, int64_t b, const float *nodes, const float *pair,
                        const float *d_out, const sgk_ref_grads *out, double *dnodes_b)
{
    int64_t N = w->N, D = w->D, P = w->P;
    const float *pair_b = pair + b * N * N * P, *dout_b = d_out + b * N * D;
    double *dpair_b = out->pair_feats ? out->pair_feats + b * N * N * P : NULL;
    bw_layer_norm(w, nodes + b * N * D);
    bw_linear(w, w->x, w->L->wq, w->q);
    bw_linear(w, w->x, w->L->wk, w->k);
    bw_linear(w, w->x, w->L->wv, w->v);

    int64_t blocks = (N + ROW_BLOCK - 1) / ROW_BLOCK;
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int64_t blk = 0; blk < blocks; blk++) {
        int tid = 0;
#if defined(_OPENMP)
        tid = omp_get_thread_num();
#endif
        double *part = w->part + (size_t)blk * w->part_size;
        memset(part, 0, w->part_size * sizeof(double));
        for (int64_t i = blk * ROW_BLOCK; i < N && i < (blk + 1) * ROW_BLOCK; i++)
            bw_row(w, b, i, pair_b, dout_b, dpair_b, part,
                     w->scratch + (size_t)tid * w->scratch_size);
    }
    /* the MLP's weight gradients: blocks in order, whatever ran them */
    for (int64_t blk = 0; blk < blocks; blk++) {
        const double *part = w->part + (size_t)blk * w->part_size;
        double *dst[4] = {w->acc[G_W1], w->acc[G_B1], w->acc[G_W2], w->acc[G_B2]};
        for (int t = 0; t < 4; t++) {
            size_t n = w->count[G_W1 + t];
            for (size_t e = 0; e < n; e++)
                dst[t][e] += part[e];
            part += n;
        }
    }
    bw_finish(w, dout_b, dnodes_b);
}

int sgk_ref_backward(const sgk_ref_layer *layer, int64_t B, int64_t N, const float *nodes,
                     const float *pair_feats, const void *mask, sgk_mask_type mask_type,
                     const float *d_out, const sgk_ref_grads *grads)
{
    if (!layer || !nodes || !pair_feats || !mask || !d_out || !grads || B < 1 || N < 1 ||
        layer->D < 1 || layer->H < 1 || layer->P < 1 || layer->D % layer->H != 0 ||
        (mask_type != SGK_MASK_F32 && mask_type != SGK_MASK_U8) || !layer->ln_gamma ||
        !layer->ln_beta || !layer->wq || !layer->wk || !layer->wv || !layer->wo || !layer->w1 ||
        !layer->b1 || !layer->w2 || !layer->b2)
        return -1;
    bwd w;
    memset(&w, 0, sizeof w);
    w.L = layer;
    w.N = N;
    w.D = layer->D;
    w.H = layer->H;
    w.P = layer->P;
    w.hd = w.D / w.H;
    w.scale = 1.0 / sqrt((double)w.hd);
    w.mask = mask;
    w.mt = mask_type;
    size_t n = (size_t)N, D = (size_t)w.D, H = (size_t)w.H, P = (size_t)w.P;
    size_t counts[G_COUNT] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    int threads = 1;
#if defined(_OPENMP)
    threads = omp_get_max_threads();
#endif
    size_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    w.part_size = P * P + P + H * P + H;
    w.scratch_size = 2 * n * P + n * H + n + P;
    size_t acc_total = 0;
    for (int t = 0; t < G_COUNT; t++)
        acc_total += counts[t];
    size_t total = 11 * n * D + n + 2 * H * n * n + blocks * w.part_size +
                   (size_t)threads * w.scratch_size + acc_total + n * D;
    double *mem = calloc(total, sizeof(double));
    if (!mem)
        return -1;
    double *cur = mem;
    double **slots[] = {&w.xhat, &w.x, &w.q, &w.k, &w.v, &w.ctx, &w.dctx, &w.dq, &w.dk, &w.dv,
                        &w.dx};
    for (size_t s = 0; s < sizeof slots / sizeof slots[0]; s++) {
        *slots[s] = cur;
        cur += n * D;
    }
    w.rstd = cur;
    cur += n;
    w.a = cur;
    cur += H * n * n;
    w.ds = cur;
    cur += H * n * n;
    w.part = cur;
    cur += blocks * w.part_size;
    w.scratch = cur;
    cur += (size_t)threads * w.scratch_size;
    for (int t = 0; t < G_COUNT; t++) {
        w.acc[t] = cur;
        w.count[t] = counts[t];
        cur += counts[t];
    }
    double *dnodes_b = cur; /* a batch entry's d_nodes, when not wanted */

    for (int64_t b = 0; b < B; b++)
        bw_batch(&w, b, nodes, pair_feats, d_out, grads,
                    grads->nodes ? grads->nodes + b * N * w.D : dnodes_b);

    double *dst[G_COUNT] = {grads->ln_gamma, grads->ln_beta, grads->wq, grads->wk, grads->wv,
                            grads->wo,       grads->w1,      grads->b1, grads->w2, grads->b2};
    for (int t = 0; t < G_COUNT; t++)
        if (dst[t])
            memcpy(dst[t], w.acc[t], counts[t] * sizeof(double));
    free(mem);
    return 0;
}
