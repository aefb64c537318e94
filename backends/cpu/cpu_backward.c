/* The cpu backend's training kernels: the forward that saves each attention
 * row's logsumexp (lse) and the backward, in the manner of FlashAttention:
 * no (B, H, N, N) tensor is ever held. Scores, the relation MLP's bias and
 * the softmax are recomputed per pair wherever they are needed.
 *
 * With s_ij = q_i.k_j / sqrt(hd) + bias_ij on the edges of row i, per head:
 *
 *   p_ij = exp(s_ij - lse_i)        dp_ij = dctx_i . v_j      Di = sum_j p_ij dp_ij
 *   ds_ij = p_ij (dp_ij - Di)       dq_i = sum_j ds_ij k_j / sqrt(hd)
 *   dk_j = sum_i ds_ij q_i / sqrt(hd)                         dv_j = sum_i p_ij dctx_i
 *
 * and ds_ij, over the heads, is the gradient of the relation bias, which the
 * MLP's backward takes to the pair features and w1, b1, w2, b2.
 *
 * The backward runs in passes over rows r = b*N + i of all batch entries:
 *   0. LayerNorm, q, k, v and dctx = d_out Wo, per group of RB rows (one
 *      pass over a weight matrix serves the group);
 *   A. per query row: ctx, Di, dq, the MLP's backward of each edge (the pair
 *      gradient, the MLP weights' gradients as partial sums per block of rows);
 *   B. per key row j: dk_j and dv_j, recomputing p and ds of every edge (i, j);
 *   C. the projections' weight gradients (one owner per RB weight rows), dx
 *      and the LayerNorm backward per group of rows, dgamma and dbeta (one
 *      owner per column).
 * The saved lse is not read: pass A forms every score of a row anyway, and
 * from them the row's logsumexp in double, as the forward did before
 * rounding it to float. With the float one, the row's p would sum to 1 only
 * up to lse's rounding times |lse|, and sum_j ds_ij, the bias gradient
 * common to a row (zero in exact arithmetic, as db2 is), would be off by Di
 * times that; a row with one edge would not get ds = 0 exactly.
 *
 * Every output element has one writer and sums in a fixed order; the
 * partial sums of blocks are added in block order. So the result is
 * bit-identical whatever the thread count.
 *
 * Memory: 9 (B, N, D) float arrays, two (B, N) and two (B, H, N) double
 * arrays, and per thread O(N (P + H) + RB D + P) doubles; the MLP weights'
 * partial sums are taken in waves of a few blocks per thread.
 *
 * Arithmetic: tensors are kept in float, every sum is accumulated in double,
 * the MLP and the softmax are evaluated in double. */
#include "cpu_backward.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif


/* rows (or weight rows) that share one pass over a (D, D) matrix; the
 * unrolled sums of project_group are written for 4 */
#define RB 4
/* query rows per block of the MLP weights' partial sums */
#define ROW_BLOCK 16
/* columns per task of the dgamma, dbeta pass */
#define COL_BLOCK 64

/* a * b, saturating: an impossible size stays impossible (SIZE_MAX) */
static size_t mulsz(size_t a, size_t b)
{
    return (b != 0 && a > SIZE_MAX / b) ? SIZE_MAX : a * b;
}

static size_t addsz(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* Scratch carved from the caller's block (aligned to 16 bytes): each piece
 * at a multiple of 64 bytes from its start, so doubles and int64 are
 * aligned and pieces share no cache line. */
typedef struct carve {
    unsigned char *base;
    size_t used;
} carve;

static void *take(carve *c, size_t bytes)
{
    void *p = c->base ? c->base + c->used : NULL;
    c->used = bytes > SIZE_MAX - 63 ? SIZE_MAX : addsz(c->used, (bytes + 63) & ~(size_t)63);
    return p;
}

static int thread_count(int threads)
{
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int is_edge(const void *mask, int u8, size_t idx)
{
    if (u8)
        return ((const uint8_t *)mask)[idx] != 0;
    return ((const float *)mask)[idx] != 0.0f; /* NaN is nonzero: an edge */
}

static double dot_ff(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t t = 0; t < n; t++)
        s += (double)a[t] * (double)b[t];
    return s;
}

static double dot_df(const double *a, const float *b, int64_t n)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t t = 0; t < n; t++)
        s += a[t] * (double)b[t];
    return s;
}

static void zero_d(double *a, int64_t n)
{
    for (int64_t t = 0; t < n; t++)
        a[t] = 0.0;
}

/* what the passes share */
typedef struct run {
    const sgk_cpu_weights *w;
    int64_t B, N, D, H, P, hd;
    double scale; /* 1 / sqrt(hd) */
    const float *nodes, *pair, *dout;
    const void *mask;
    int u8;
    /* (B, N, D): x holds dx once the weight gradients have read it */
    float *x, *q, *k, *v, *dctx, *ctx, *dq, *dk, *dv;
    double *mean, *rstd; /* (B, N) */
    double *lse_d, *di;  /* (B, H, N): lse in double and Di, from pass A */
    float *dpair;        /* or NULL */
    int mlp_back;        /* the MLP's backward is wanted */
} run;

/* R zeroed, then the call's sizes, inputs and the arrays of f (nd floats
 * each, in the order of run's x, q, k, v, dctx, ctx, dq, dk, dv; n of them). */
static void run_init(run *R, const sgk_cpu_weights *w, int64_t B, int64_t N, const float *nodes,
                     const float *pair_feats, const void *mask, int mask_u8, float *f, size_t nd,
                     int n)
{
    memset(R, 0, sizeof *R);
    R->w = w;
    R->B = B;
    R->N = N;
    R->D = w->D;
    R->H = w->H;
    R->P = w->P;
    R->hd = w->D / w->H;
    R->scale = 1.0 / sqrt((double)R->hd);
    R->nodes = nodes;
    R->pair = pair_feats;
    R->mask = mask;
    R->u8 = mask_u8;
    float **arrays[] = {&R->x, &R->q, &R->k, &R->v, &R->dctx, &R->ctx, &R->dq, &R->dk, &R->dv};
    for (int a = 0; a < n; a++)
        *arrays[a] = f + (size_t)a * nd;
}

/* acc (n) = sum_e wt[e] * base[js[e] * stride .. + n] */
static void weighted_rows(double *acc, const float *base, int64_t stride, const int64_t *js,
                          const double *wt, int64_t ne, int64_t n)
{
    zero_d(acc, n);
    for (int64_t e = 0; e < ne; e++) {
        const float *row = base + js[e] * stride;
        const double x = wt[e];
#pragma omp simd
        for (int64_t t = 0; t < n; t++)
            acc[t] += x * (double)row[t];
    }
}

/* LayerNorm of row r into x (and mean, rstd when kept) */
static void norm_row(const run *R, int64_t r, double *mean_out, double *rstd_out)
{
    const sgk_cpu_weights *w = R->w;
    int64_t D = R->D;
    const float *row = R->nodes + r * D;
    float *x = R->x + r * D;
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < D; c++)
        mean += (double)row[c];
    mean /= (double)D;
    for (int64_t c = 0; c < D; c++) {
        double d = (double)row[c] - mean;
        var += d * d;
    }
    var /= (double)D;
    double rstd = 1.0 / sqrt(var + (double)w->eps);
    for (int64_t c = 0; c < D; c++)
        x[c] = (float)(((double)row[c] - mean) * rstd * (double)w->gamma[c] + (double)w->beta[c]);
    if (mean_out) {
        *mean_out = mean;
        *rstd_out = rstd;
    }
}

/* Y = X W^T for the rows of the group [r0, r0 + RB) that exist: one pass
 * over W serves them all. */
static void project_group(const run *R, int64_t r0, const float *X, const float *W, float *Y)
{
    int64_t D = R->D, rows = R->B * R->N;
    const float *x[RB];
    for (int k = 0; k < RB; k++) /* a missing row repeats the first, discarded */
        x[k] = X + (r0 + k < rows ? r0 + k : r0) * D;
    for (int64_t o = 0; o < D; o++) {
        const float *wo = W + o * D;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t c = 0; c < D; c++) {
            double wc = (double)wo[c];
            s0 += (double)x[0][c] * wc;
            s1 += (double)x[1][c] * wc;
            s2 += (double)x[2][c] * wc;
            s3 += (double)x[3][c] * wc;
        }
        double sk[RB] = {s0, s1, s2, s3};
        for (int k = 0; k < RB && r0 + k < rows; k++)
            Y[(r0 + k) * D + o] = (float)sk[k];
    }
}

/* adds G W to acc (RB*D) for the rows of group r0: row r0 + k gets
 * sum_o G[r0 + k][o] W[o][:] at acc + k*D */
static void back_project_group(const run *R, int64_t r0, const float *G, const float *W,
                               double *acc)
{
    int64_t D = R->D, rows = R->B * R->N;
    for (int64_t o = 0; o < D; o++) {
        const float *wo = W + o * D;
        for (int64_t k = 0; k < RB && r0 + k < rows; k++) {
            double g = (double)G[(r0 + k) * D + o];
            double *a = acc + k * D;
#pragma omp simd
            for (int64_t c = 0; c < D; c++)
                a[c] += g * (double)wo[c];
        }
    }
}

/* LayerNorm, q, k, v of the rows of group r0 (mean, rstd kept when wanted) */
static void norm_project_group(const run *R, int64_t r0, int keep_stats)
{
    int64_t rows = R->B * R->N;
    for (int64_t r = r0; r < r0 + RB && r < rows; r++)
        norm_row(R, r, keep_stats ? R->mean + r : NULL, keep_stats ? R->rstd + r : NULL);
    project_group(R, r0, R->x, R->w->wq, R->q);
    project_group(R, r0, R->x, R->w->wk, R->k);
    project_group(R, r0, R->x, R->w->wv, R->v);
}

/* The relation MLP of the pair features f (P): z1, a1 = silu(z1) (P each)
 * and the bias of every head (H). */
static void mlp_forward(const sgk_cpu_weights *w, const float *f, double *z1, double *a1,
                        double *bias)
{
    int64_t P = w->P, H = w->H;
    for (int64_t p = 0; p < P; p++) {
        double z = (double)w->b1[p] + dot_ff(w->w1 + p * P, f, P);
        z1[p] = z;
        a1[p] = z / (1.0 + exp(-z));
    }
    for (int64_t h = 0; h < H; h++)
        bias[h] = (double)w->b2[h] + dot_df(a1, w->w2 + h * P, P);
}

/* score of query row ri and key row rj (both b*N + index) in head h */
static double score(const run *R, int64_t ri, int64_t rj, int64_t h, double bias)
{
    const float *qh = R->q + ri * R->D + h * R->hd, *kh = R->k + rj * R->D + h * R->hd;
    return R->scale * dot_ff(qh, kh, R->hd) + bias;
}

/* the edges of query row r, into js; returns their count */
static int64_t row_edges(const run *R, int64_t r, int64_t *js)
{
    int64_t n = 0;
    for (int64_t j = 0; j < R->N; j++)
        if (is_edge(R->mask, R->u8, (size_t)(r * R->N + j)))
            js[n++] = j;
    return n;
}

/* ---- forward ------------------------------------------------------------ */

/* Query row r: attention over its edges, lse, the output row.
 * scr: bias (N*H), sc (N), z1, a1 (P each), acc (D). */
static void forward_row(const run *R, int64_t r, double *scr, int64_t *js, float *out,
                        float *lse)
{
    const sgk_cpu_weights *w = R->w;
    int64_t N = R->N, D = R->D, H = R->H, P = R->P, hd = R->hd;
    int64_t b = r / N, i = r % N, rb = b * N;
    double *bias = scr, *sc = bias + N * H, *z1 = sc + N, *a1 = z1 + P, *acc = a1 + P;
    int64_t ne = row_edges(R, r, js);
    for (int64_t e = 0; e < ne; e++)
        mlp_forward(w, R->pair + (size_t)(r * N + js[e]) * (size_t)P, z1, a1, bias + e * H);
    zero_d(acc, D);
    for (int64_t h = 0; h < H; h++) {
        double m = -INFINITY, sum = 0.0;
        for (int64_t e = 0; e < ne; e++) {
            sc[e] = score(R, r, rb + js[e], h, bias[e * H + h]);
            m = e ? fmax(m, sc[e]) : sc[e];
        }
        float *l = lse + (b * H + h) * N + i;
        if (ne == 0) {
            *l = -INFINITY; /* no edge: ctx stays 0 */
            continue;
        }
        for (int64_t e = 0; e < ne; e++) {
            sc[e] = exp(sc[e] - m);
            sum += sc[e];
        }
        *l = (float)(m + log(sum));
        double *ah = acc + h * hd;
        for (int64_t e = 0; e < ne; e++) {
            double a = sc[e] / sum;
            const float *vj = R->v + (rb + js[e]) * D + h * hd;
#pragma omp simd
            for (int64_t t = 0; t < hd; t++)
                ah[t] += a * (double)vj[t];
        }
    }
    for (int64_t o = 0; o < D; o++)
        out[r * D + o] = (float)((double)R->nodes[r * D + o] + dot_df(acc, w->wo + o * D, D));
}

/* The forward's scratch: x, q, k, v, then each thread's row buffers. With
 * a NULL base, only counts (c->used). */
static void forward_scratch(carve *c, const sgk_cpu_weights *w, int64_t B, int64_t N, int nt,
                            float **f, double **scr, int64_t **js, size_t *per_thread)
{
    size_t rows = (size_t)B * (size_t)N, nd = mulsz(rows, (size_t)w->D);
    *per_thread = (size_t)(N * w->H + N + 2 * w->P + w->D);
    *f = take(c, mulsz(mulsz(nd, 4), sizeof(float)));
    *scr = take(c, mulsz(mulsz(*per_thread, (size_t)nt), sizeof(double)));
    *js = take(c, mulsz(mulsz((size_t)N, (size_t)nt), sizeof(int64_t)));
}

size_t sgk_cpu_forward_train_scratch(const sgk_cpu_weights *w, int64_t B, int64_t N, int threads)
{
    carve c = {NULL, 0};
    float *f;
    double *scr;
    int64_t *js;
    size_t per_thread;
    forward_scratch(&c, w, B, N, thread_count(threads), &f, &scr, &js, &per_thread);
    return c.used;
}

void sgk_cpu_forward_train(const sgk_cpu_weights *w, int64_t B, int64_t N, const float *nodes,
                           const float *pair_feats, const void *mask, int mask_u8, float *out,
                           float *lse, int threads, void *scratch)
{
    int nt = thread_count(threads);
    size_t rows = (size_t)B * (size_t)N, nd = rows * (size_t)w->D;
    carve c = {scratch, 0};
    float *f;
    double *scr;
    int64_t *js;
    size_t per_thread;
    forward_scratch(&c, w, B, N, nt, &f, &scr, &js, &per_thread);
    run R;
    run_init(&R, w, B, N, nodes, pair_feats, mask, mask_u8, f, nd, 4);
    int64_t nrows = (int64_t)rows;

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r0 = 0; r0 < nrows; r0 += RB)
            norm_project_group(&R, r0, 0);
        int tid = thread_id();
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 4)
#endif
        for (int64_t r = 0; r < nrows; r++)
            forward_row(&R, r, scr + (size_t)tid * per_thread, js + (size_t)tid * (size_t)N, out,
                        lse);
    }
}

/* ---- backward ----------------------------------------------------------- */

/* dctx = d_out Wo for the rows of group r0; acc (RB*D) */
static void dctx_group(const run *R, int64_t r0, double *acc)
{
    int64_t D = R->D, rows = R->B * R->N;
    zero_d(acc, RB * D);
    back_project_group(R, r0, R->dout, R->w->wo, acc);
    for (int64_t r = r0; r < r0 + RB && r < rows; r++)
        for (int64_t c = 0; c < D; c++)
            R->dctx[r * D + c] = (float)acc[(r - r0) * D + c];
}

/* Pass A, query row r: ctx, Di, dq; then per edge the MLP's backward, the
 * MLP weights' gradients added to part: dw1 (P*P), db1 (P), dw2 (H*P), db2 (H).
 * scr: z1, a1 (N*P each), bias, pr, ds (N*H each), acc (D), da1, dz1, df (P each). */
static void query_row(const run *R, int64_t r, double *scr, int64_t *js, double *part)
{
    const sgk_cpu_weights *w = R->w;
    int64_t N = R->N, D = R->D, H = R->H, P = R->P, hd = R->hd;
    int64_t b = r / N, i = r % N, rb = b * N;
    double *z1 = scr, *a1 = z1 + N * P, *bias = a1 + N * P, *pr = bias + N * H, *ds = pr + N * H;
    double *acc = ds + N * H, *da1 = acc + D, *dz1 = da1 + P, *df = dz1 + P;
    int64_t ne = row_edges(R, r, js);
    for (int64_t e = 0; e < ne; e++)
        mlp_forward(w, R->pair + (size_t)(r * N + js[e]) * (size_t)P, z1 + e * P, a1 + e * P,
                    bias + e * H);

    for (int64_t h = 0; h < H; h++) {
        size_t st = (size_t)((b * H + h) * N + i);
        double m = -INFINITY, psum = 0.0, dsum = 0.0;
        const float *dch = R->dctx + r * D + h * hd;
        double *ph = pr + h * N, *dh = ds + h * N;
        for (int64_t e = 0; e < ne; e++) {
            ph[e] = score(R, r, rb + js[e], h, bias[e * H + h]);
            m = e ? fmax(m, ph[e]) : ph[e];
        }
        for (int64_t e = 0; e < ne; e++) {
            ph[e] = exp(ph[e] - m);
            psum += ph[e];
        }
        /* the forward's lse before rounding to float; key_row's p = exp(s - lse) */
        R->lse_d[st] = m + log(psum);
        for (int64_t e = 0; e < ne; e++) {
            ph[e] /= psum;
            dh[e] = dot_ff(dch, R->v + (rb + js[e]) * D + h * hd, hd);
            dsum += ph[e] * dh[e];
        }
        R->di[st] = dsum;
        for (int64_t e = 0; e < ne; e++)
            dh[e] = ph[e] * (dh[e] - dsum);

        weighted_rows(acc, R->v + rb * D + h * hd, D, js, ph, ne, hd);
        for (int64_t t = 0; t < hd; t++)
            R->ctx[r * D + h * hd + t] = (float)acc[t];

        weighted_rows(acc, R->k + rb * D + h * hd, D, js, dh, ne, hd);
        for (int64_t t = 0; t < hd; t++)
            R->dq[r * D + h * hd + t] = (float)(R->scale * acc[t]);
    }

    if (R->dpair) /* non-edges get zero; edges are written below */
        memset(R->dpair + (size_t)(r * N) * (size_t)P, 0, (size_t)(N * P) * sizeof(float));
    if (!R->mlp_back)
        return;
    double *dw1 = part, *db1 = dw1 + P * P, *dw2 = db1 + P, *db2 = dw2 + H * P;
    for (int64_t e = 0; e < ne; e++) {
        const double *ae = a1 + e * P, *ze = z1 + e * P;
        zero_d(da1, P);
        for (int64_t h = 0; h < H; h++) {
            double d = ds[h * N + e];
            const float *w2h = w->w2 + h * P;
            db2[h] += d;
#pragma omp simd
            for (int64_t p = 0; p < P; p++) {
                dw2[h * P + p] += d * ae[p];
                da1[p] += d * (double)w2h[p];
            }
        }
        for (int64_t p = 0; p < P; p++) {
            double z = ze[p], sg = 1.0 / (1.0 + exp(-z));
            dz1[p] = da1[p] * sg * (1.0 + z * (1.0 - sg)); /* silu'(z) */
            db1[p] += dz1[p];
        }
        size_t pair0 = (size_t)(r * N + js[e]) * (size_t)P;
        const float *f = R->pair + pair0;
        zero_d(df, P);
        for (int64_t p = 0; p < P; p++) {
            double d = dz1[p];
            const float *w1p = w->w1 + p * P;
#pragma omp simd
            for (int64_t q = 0; q < P; q++) {
                dw1[p * P + q] += d * (double)f[q];
                df[q] += d * (double)w1p[q];
            }
        }
        if (R->dpair)
            for (int64_t q = 0; q < P; q++)
                R->dpair[pair0 + (size_t)q] = (float)df[q];
    }
}

/* Pass B, key row r = b*N + j: dk_j and dv_j from every edge (i, j).
 * scr: z1, a1 (P each), bias (H), ak, av (D each). */
static void key_row(const run *R, int64_t r, double *scr)
{
    int64_t N = R->N, D = R->D, H = R->H, P = R->P, hd = R->hd;
    int64_t b = r / N, j = r % N, rb = b * N;
    double *z1 = scr, *a1 = z1 + P, *bias = a1 + P, *ak = bias + H, *av = ak + D;
    zero_d(ak, D);
    zero_d(av, D);
    for (int64_t i = 0; i < N; i++) {
        int64_t ri = rb + i;
        size_t idx = (size_t)(ri * N + j);
        if (!is_edge(R->mask, R->u8, idx))
            continue;
        mlp_forward(R->w, R->pair + idx * (size_t)P, z1, a1, bias);
        for (int64_t h = 0; h < H; h++) {
            double p = exp(score(R, ri, r, h, bias[h]) - R->lse_d[(b * H + h) * N + i]);
            const float *dch = R->dctx + ri * D + h * hd, *qh = R->q + ri * D + h * hd;
            double dp = dot_ff(dch, R->v + r * D + h * hd, hd);
            double d = p * (dp - R->di[(b * H + h) * N + i]);
            double *akh = ak + h * hd, *avh = av + h * hd;
#pragma omp simd
            for (int64_t t = 0; t < hd; t++) {
                akh[t] += d * (double)qh[t];
                avh[t] += p * (double)dch[t];
            }
        }
    }
    for (int64_t c = 0; c < D; c++) {
        R->dk[r * D + c] = (float)(R->scale * ak[c]);
        R->dv[r * D + c] = (float)av[c];
    }
}

/* rows [o0, o0 + RB) of a (D, D) weight's gradient: row o is the sum over
 * rows r of G[r][o] X[r][:]; acc (RB*D) */
static void weight_grad_group(const run *R, const float *G, const float *X, int64_t o0,
                              double *acc, float *dst)
{
    int64_t D = R->D, rows = R->B * R->N, no = o0 + RB < D ? RB : D - o0;
    zero_d(acc, RB * D);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = X + r * D;
        for (int64_t k = 0; k < no; k++) {
            double g = (double)G[r * D + o0 + k];
            double *a = acc + k * D;
#pragma omp simd
            for (int64_t c = 0; c < D; c++)
                a[c] += g * (double)xr[c];
        }
    }
    for (int64_t k = 0; k < no; k++)
        for (int64_t c = 0; c < D; c++)
            dst[(o0 + k) * D + c] = (float)acc[k * D + c];
}

/* row r's dx (acc, D) into R->x and, when dnodes is set, LayerNorm's backward */
static void norm_back_row(const run *R, int64_t r, const double *acc, float *dnodes)
{
    const sgk_cpu_weights *w = R->w;
    int64_t D = R->D;
    for (int64_t c = 0; c < D; c++)
        R->x[r * D + c] = (float)acc[c];
    if (!dnodes)
        return;
    const float *row = R->nodes + r * D;
    double mean = R->mean[r], rstd = R->rstd[r], m1 = 0.0, m2 = 0.0;
    for (int64_t c = 0; c < D; c++) {
        double dxh = acc[c] * (double)w->gamma[c];
        m1 += dxh;
        m2 += dxh * ((double)row[c] - mean) * rstd;
    }
    m1 /= (double)D;
    m2 /= (double)D;
    for (int64_t c = 0; c < D; c++) {
        double xh = ((double)row[c] - mean) * rstd, dxh = acc[c] * (double)w->gamma[c];
        dnodes[r * D + c] = (float)((double)R->dout[r * D + c] + rstd * (dxh - m1 - xh * m2));
    }
}

/* dx = dq Wq + dk Wk + dv Wv for the rows of group r0, then norm_back_row;
 * acc (RB*D) */
static void norm_back_group(const run *R, int64_t r0, double *acc, float *dnodes)
{
    int64_t D = R->D, rows = R->B * R->N;
    zero_d(acc, RB * D);
    back_project_group(R, r0, R->dq, R->w->wq, acc);
    back_project_group(R, r0, R->dk, R->w->wk, acc);
    back_project_group(R, r0, R->dv, R->w->wv, acc);
    for (int64_t r = r0; r < r0 + RB && r < rows; r++)
        norm_back_row(R, r, acc + (r - r0) * D, dnodes);
}

/* dgamma, dbeta of columns [c0, c0 + COL_BLOCK) from dx (in R->x) */
static void norm_params_cols(const run *R, int64_t c0, float *dgamma, float *dbeta)
{
    int64_t D = R->D, rows = R->B * R->N, c1 = c0 + COL_BLOCK < D ? c0 + COL_BLOCK : D;
    double sg[COL_BLOCK] = {0}, sb[COL_BLOCK] = {0};
    for (int64_t r = 0; r < rows; r++) {
        const float *row = R->nodes + r * D, *dx = R->x + r * D;
        double mean = R->mean[r], rstd = R->rstd[r];
        for (int64_t c = c0; c < c1; c++) {
            sg[c - c0] += (double)dx[c] * (((double)row[c] - mean) * rstd);
            sb[c - c0] += (double)dx[c];
        }
    }
    for (int64_t c = c0; c < c1; c++) {
        if (dgamma)
            dgamma[c] = (float)sg[c - c0];
        if (dbeta)
            dbeta[c] = (float)sb[c - c0];
    }
}

/* The backward's scratch: nine (B*N, D) float arrays, the row statistics,
 * each thread's row buffers and key lists, the MLP weights' partial sums.
 * With a NULL base, only counts (c->used). */
typedef struct bwd_scratch {
    float *f;
    double *st, *scr, *part;
    int64_t *js;
    size_t per_thread;
} bwd_scratch;

static void backward_scratch(carve *c, const sgk_cpu_weights *w, int64_t B, int64_t N, int nt,
                             bwd_scratch *b)
{
    int64_t D = w->D, H = w->H, P = w->P, nrows = B * N;
    int64_t wave = 4 * (int64_t)nt;
    size_t rows = (size_t)nrows, nd = mulsz(rows, (size_t)D);
    size_t part_size = (size_t)(P * P + P + H * P + H);
    b->per_thread = (size_t)(2 * N * P + 3 * N * H + D + 3 * P);
    if (b->per_thread < (size_t)(2 * P + H + RB * D)) /* key_row's, the groups' share */
        b->per_thread = (size_t)(2 * P + H + RB * D);
    size_t stats = addsz(mulsz(rows, 2), mulsz(rows, (size_t)(2 * H)));
    /* the MLP weights' total, then one partial sum per block of a wave */
    size_t parts = mulsz(part_size, (size_t)(wave + 1));
    b->f = take(c, mulsz(mulsz(nd, 9), sizeof(float)));
    b->st = take(c, mulsz(stats, sizeof(double)));
    b->scr = take(c, mulsz(mulsz(b->per_thread, (size_t)nt), sizeof(double)));
    b->js = take(c, mulsz(mulsz((size_t)N, (size_t)nt), sizeof(int64_t)));
    b->part = take(c, mulsz(parts, sizeof(double)));
}

size_t sgk_cpu_backward_scratch(const sgk_cpu_weights *w, int64_t B, int64_t N, int threads)
{
    carve c = {NULL, 0};
    bwd_scratch b;
    backward_scratch(&c, w, B, N, thread_count(threads), &b);
    return c.used;
}

void sgk_cpu_backward(const sgk_cpu_weights *w, int64_t B, int64_t N, const float *nodes,
                      const float *pair_feats, const void *mask, int mask_u8, const float *lse,
                      const float *d_out, const sgk_cpu_grads *g, int threads, void *scratch)
{
    (void)lse; /* see the top of the file */
    int nt = thread_count(threads);
    int64_t D = w->D, H = w->H, P = w->P, nrows = B * N;
    int64_t blocks = (nrows + ROW_BLOCK - 1) / ROW_BLOCK, wave = 4 * (int64_t)nt;
    size_t rows = (size_t)nrows, nd = rows * (size_t)D;
    size_t part_size = (size_t)(P * P + P + H * P + H);
    carve c = {scratch, 0};
    bwd_scratch sb;
    backward_scratch(&c, w, B, N, nt, &sb);
    float *f = sb.f;
    double *st = sb.st, *scr = sb.scr, *part = sb.part;
    int64_t *js = sb.js;
    const size_t per_thread = sb.per_thread;

    run R;
    run_init(&R, w, B, N, nodes, pair_feats, mask, mask_u8, f, nd, 9);
    R.dout = d_out;
    R.mean = st;
    R.rstd = st + rows;
    R.lse_d = st + 2 * rows;
    R.di = R.lse_d + rows * (size_t)H;
    R.dpair = g->pair_feats;
    R.mlp_back = g->pair_feats || g->w1 || g->b1 || g->w2 || g->b2;
    int want_dx = g->nodes || g->gamma || g->beta;
    int want_kv = want_dx || g->wk || g->wv;
    double *total = part, *wave_parts = part + part_size;
    memset(total, 0, part_size * sizeof(double));

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        int tid = thread_id();
        double *my = scr + (size_t)tid * per_thread;
        int64_t *my_js = js + (size_t)tid * (size_t)N;

        /* pass 0 */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r0 = 0; r0 < nrows; r0 += RB) {
            norm_project_group(&R, r0, 1);
            dctx_group(&R, r0, my);
        }

        /* pass A, in waves of blocks; each wave's partial sums are added to
         * the total in block order */
        for (int64_t w0 = 0; w0 < blocks; w0 += wave) {
            int64_t w1 = w0 + wave < blocks ? w0 + wave : blocks;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t blk = w0; blk < w1; blk++) {
                double *pb = wave_parts + (size_t)(blk - w0) * part_size;
                zero_d(pb, (int64_t)part_size);
                int64_t r1 = (blk + 1) * ROW_BLOCK < nrows ? (blk + 1) * ROW_BLOCK : nrows;
                for (int64_t r = blk * ROW_BLOCK; r < r1; r++)
                    query_row(&R, r, my, my_js, pb);
            }
            if (R.mlp_back) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (size_t e = 0; e < part_size; e++)
                    for (int64_t blk = w0; blk < w1; blk++)
                        total[e] += wave_parts[(size_t)(blk - w0) * part_size + e];
            }
        }

        /* pass B */
        if (want_kv) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 4)
#endif
            for (int64_t r = 0; r < nrows; r++)
                key_row(&R, r, my);
        }

        /* pass C: weight gradients first, since dx then takes x's place */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t o0 = 0; o0 < D; o0 += RB) {
            if (g->wo)
                weight_grad_group(&R, R.dout, R.ctx, o0, my, g->wo);
            if (g->wq)
                weight_grad_group(&R, R.dq, R.x, o0, my, g->wq);
            if (g->wk)
                weight_grad_group(&R, R.dk, R.x, o0, my, g->wk);
            if (g->wv)
                weight_grad_group(&R, R.dv, R.x, o0, my, g->wv);
        }
        if (want_dx) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t r0 = 0; r0 < nrows; r0 += RB)
                norm_back_group(&R, r0, my, g->nodes);
        }
        if (g->gamma || g->beta) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t c0 = 0; c0 < D; c0 += COL_BLOCK)
                norm_params_cols(&R, c0, g->gamma, g->beta);
        }
    }

    float *dst[4] = {g->w1, g->b1, g->w2, g->b2};
    size_t count[4] = {(size_t)(P * P), (size_t)P, (size_t)(H * P), (size_t)H};
    const double *src = total;
    for (int t = 0; t < 4; t++) {
        for (size_t e = 0; dst[t] && e < count[t]; e++)
            dst[t][e] = (float)src[e];
        src += count[t];
    }
}
