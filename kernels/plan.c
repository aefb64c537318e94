#include "plan.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

_Static_assert(sizeof(sgk_plan) <= sizeof(sgk_backend_plan),
               "sgk_plan must fit in a backend's per-call plan (SGK_BACKEND_PLAN_BYTES)");

void sgk_plan_store(const sgk_plan *plan, sgk_backend_plan *out)
{
    memcpy(out->bytes, plan, sizeof *plan);
}

void sgk_plan_load(const sgk_backend_plan *in, sgk_plan *plan)
{
    memcpy(plan, in->bytes, sizeof *plan);
}

sgk_packed sgk_packed_layout(int64_t D, int64_t H, int64_t P)
{
    sgk_packed p;
    size_t o = 0;
    p.gamma = o; o += (size_t)D;
    p.beta = o;  o += (size_t)D;
    p.wqkv = o;  o += (size_t)(3 * D * D);
    p.wo = o;    o += (size_t)(D * D);
    p.w1 = o;    o += (size_t)(P * P);
    p.b1 = o;    o += (size_t)P;
    p.w2 = o;    o += (size_t)(H * P);
    p.b2 = o;    o += (size_t)H;
    p.total = o;
    return p;
}

int sgk_widen_desc(const sgk_layer_desc *desc, sgk_layer_desc *f, float **store, int (*should_fail)(void))
{
    *f = *desc;
    *store = NULL;
    if (desc->dtype == SGK_DTYPE_F32)
        return 0;
    const size_t D = (size_t)desc->dim, H = (size_t)desc->heads, P = (size_t)desc->pair_dim;
    const void *src[] = {desc->ln_gamma, desc->ln_beta, desc->wq, desc->wk, desc->wv, desc->wo,
                         desc->w1, desc->b1, desc->w2, desc->b2};
    const void **dst[] = {&f->ln_gamma, &f->ln_beta, &f->wq, &f->wk, &f->wv, &f->wo,
                          &f->w1, &f->b1, &f->w2, &f->b2};
    const size_t n[] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    size_t total = 0;
    for (int i = 0; i < 10; i++)
        total += n[i];
    float *w = should_fail && should_fail() ? NULL : (float *)malloc(total * sizeof(float));
    if (!w)
        return -1;
    float *at = w;
    for (int i = 0; i < 10; i++) {
        const uint16_t *h = (const uint16_t *)src[i];
        for (size_t e = 0; e < n[i]; e++)
            at[e] = desc->dtype == SGK_DTYPE_BF16 ? sgk_f32_from_bf16(h[e]) : sgk_f32_from_f16(h[e]);
        *dst[i] = at;
        at += n[i];
    }
    f->dtype = SGK_DTYPE_F32;
    *store = w;
    return 0;
}

void sgk_pack_weights(const sgk_layer_desc *d, float *dst)
{
    const size_t D = (size_t)d->dim, H = (size_t)d->heads, P = (size_t)d->pair_dim;
    const sgk_packed p = sgk_packed_layout(d->dim, d->heads, d->pair_dim);
    memcpy(dst + p.gamma, d->ln_gamma, D * sizeof(float));
    memcpy(dst + p.beta, d->ln_beta, D * sizeof(float));
    memcpy(dst + p.wqkv, d->wq, D * D * sizeof(float));
    memcpy(dst + p.wqkv + D * D, d->wk, D * D * sizeof(float));
    memcpy(dst + p.wqkv + 2 * D * D, d->wv, D * D * sizeof(float));
    memcpy(dst + p.wo, d->wo, D * D * sizeof(float));
    memcpy(dst + p.w1, d->w1, P * P * sizeof(float));
    memcpy(dst + p.b1, d->b1, P * sizeof(float));
    memcpy(dst + p.w2, d->w2, H * P * sizeof(float));
    memcpy(dst + p.b2, d->b2, H * sizeof(float));
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int sgk_row_length(int64_t n, int pad)
{
    int64_t ld = (n + pad - 1) / pad * pad;
    /* rows 4 KB apart share their sets in a CPU's level-1 cache, so that a
     * register tile's rows evict each other */
    if (ld % 1024 == 0)
        ld += pad;
    return (int)ld;
}

sgk_gen_packed sgk_gen_layout(int64_t D, int64_t H, int64_t P, int pad, size_t align)
{
    sgk_gen_packed p;
    const size_t d = (size_t)D, a = align < 1 ? 1 : align;
    p.ldk = sgk_row_length(3 * D + pad, pad);
    p.ldo = sgk_row_length(D, pad);
    p.ldp = sgk_row_length(P, pad);
    p.ldh = sgk_row_length(H, pad);
    p.ldd = sgk_row_length(D + pad, pad);
    p.sw = 0;
    size_t o = 0;
    p.gamma = o; o = round_up(o + d, a);
    p.beta = o;  o = round_up(o + d, a);
    p.wqkv = o;  o = round_up(o + d * (size_t)p.ldk, a);
    p.wo = o;    o = round_up(o + d * (size_t)p.ldo, a);
    p.w1 = o;    o = round_up(o + (size_t)P * (size_t)p.ldp, a);
    p.b1 = o;    o = round_up(o + (size_t)p.ldp, a);
    p.w2 = o;    o = round_up(o + (size_t)P * (size_t)p.ldh, a);
    p.b2 = o;    o = round_up(o + (size_t)p.ldh, a);
    p.wqkv_b = o; o = round_up(o + 3 * d * (size_t)p.ldo, a);
    p.wo_b = o;  o = round_up(o + d * (size_t)p.ldd, a);
    p.w1_b = o;  o = round_up(o + (size_t)P * (size_t)p.ldp, a);
    p.w2_b = o;  o = round_up(o + (size_t)H * (size_t)p.ldp, a);
    p.total = o;
    return p;
}

void sgk_gen_pack(const sgk_layer_desc *d, const sgk_gen_packed *o, float *dst)
{
    const size_t D = (size_t)d->dim, H = (size_t)d->heads, P = (size_t)d->pair_dim;
    const float *w[3] = {(const float *)d->wq, (const float *)d->wk, (const float *)d->wv};
    const float *wo = (const float *)d->wo, *w1 = (const float *)d->w1, *w2 = (const float *)d->w2;
    memset(dst, 0, o->total * sizeof(float));
    memcpy(dst + o->gamma, d->ln_gamma, D * sizeof(float));
    memcpy(dst + o->beta, d->ln_beta, D * sizeof(float));
    /* element (k, c) of Wqkv^T or Wo^T: in rows of ld, or in strips of sw */
    const size_t sw = (size_t)o->sw;
    const size_t ldk = (size_t)o->ldk, ldo = (size_t)o->ldo;
#define SGK_AT(base, ld, k, c) ((base) + (sw ? (c) / sw * D * sw + (k) * sw + (c) % sw : (k) * (ld) + (c)))
    for (size_t k = 0; k < D; k++) {
        for (size_t m = 0; m < 3; m++)
            for (size_t n = 0; n < D; n++)
                dst[SGK_AT(o->wqkv, ldk, k, m * D + n)] = w[m][n * D + k];
        for (size_t n = 0; n < D; n++)
            dst[SGK_AT(o->wo, ldo, k, n)] = wo[n * D + k];
    }
#undef SGK_AT
    for (size_t r = 0; r < P; r++)
        for (size_t q = 0; q < P; q++)
            dst[o->w1 + r * (size_t)o->ldp + q] = w1[q * P + r];
    memcpy(dst + o->b1, d->b1, P * sizeof(float));
    for (size_t q = 0; q < P; q++)
        for (size_t h = 0; h < H; h++)
            dst[o->w2 + q * (size_t)o->ldh + h] = w2[h * P + q];
    memcpy(dst + o->b2, d->b2, H * sizeof(float));
    for (int m = 0; m < 3; m++)
        for (size_t n = 0; n < D; n++)
            memcpy(dst + o->wqkv_b + (m * D + n) * (size_t)o->ldo, w[m] + n * D, D * sizeof(float));
    for (size_t n = 0; n < D; n++)
        memcpy(dst + o->wo_b + n * (size_t)o->ldd, wo + n * D, D * sizeof(float));
    for (size_t q = 0; q < P; q++)
        memcpy(dst + o->w1_b + q * (size_t)o->ldp, w1 + q * P, P * sizeof(float));
    for (size_t h = 0; h < H; h++)
        memcpy(dst + o->w2_b + h * (size_t)o->ldp, w2 + h * P, P * sizeof(float));
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t up64(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

/* relation.sgk's sgk_hid_row: floats between two queries' hidden rows */
static int64_t hid_row(int64_t tk, int64_t P, int pad)
{
    return tk * P % 1024 == 0 ? tk * P + pad : tk * P;
}

/* Floats of local memory the attention phase needs (relation.sgk's
 * `attention`) for a (tq, tk) tile whose relation MLP runs qc query rows at
 * a time, with p's row lengths; pad is the target's. */
static size_t attn_floats(const sgk_plan *p, int64_t tq, int64_t tk, int64_t qc, const sgk_limits *lim)
{
    const int64_t tqp = up64(tq, lim->pad), D = p->D, H = p->H;
    const int64_t pf = lim->wide16 ? qc * tk * p->P : 0;
    const int64_t hid = qc * hid_row(tk, p->P, lim->pad);
    return (size_t)(D * tqp + H * tk * tqp + 3 * H * tqp + hid + qc * tk * H + tk * tqp + tqp + tk + pf);
}

/* An attention tile (tq queries, tk keys, the MLP qc query rows at a
 * time), from lim's (tq, tk) for N keys, and the floats it needs. */
typedef struct tile {
    int64_t tq, tk, qc;
} tile;

/* t shrunk until floats(t) fits budget: first the MLP's chunk of query
 * rows, then the key tile, then the query tile. 0 when even 1 x 1 does
 * not. */
static int shrink_tile(tile *t, size_t budget, size_t (*floats)(const tile *, const void *), const void *user)
{
    while (floats(t, user) > budget) {
        if (t->qc > 1)
            t->qc = (t->qc + 1) / 2;
        else if (t->tk > 1)
            t->tk = (t->tk + 1) / 2;
        else if (t->tq > 1)
            t->tq = t->qc = (t->tq + 1) / 2;
        else
            return 0;
    }
    return 1;
}

static tile first_tile(const sgk_limits *lim, int64_t N)
{
    const int64_t tq = min64(N, lim->tq < 1 ? 1 : lim->tq), tk = min64(N, lim->tk < 1 ? 1 : lim->tk);
    const tile t = {tq, tk, tq};
    return t;
}

typedef struct attn_need {
    const sgk_plan *p;
    const sgk_limits *lim;
    size_t fixed;
} attn_need;

static size_t attn_tile_floats(const tile *t, const void *user)
{
    const attn_need *n = user;
    return n->fixed + attn_floats(n->p, t->tq, t->tk, t->qc, n->lim);
}

/* The forward's attention tile for N keys within budget floats besides
 * fixed ones (shrink_tile). */
static int attn_tile(sgk_plan *p, const sgk_limits *lim, int64_t N, size_t budget, size_t fixed)
{
    tile t = first_tile(lim, N);
    const attn_need need = {p, lim, fixed};
    if (!shrink_tile(&t, budget, attn_tile_floats, &need))
        return 0;
    const int64_t tq = t.tq, tk = t.tk, qc = t.qc;
    p->tq = (int)tq;
    p->tqp = (int)up64(tq, lim->pad);
    p->tk = (int)tk;
    p->qc = (int)qc;
    p->smem_attn = attn_floats(p, tq, tk, qc, lim);
    return 1;
}

/* A 16-bit layer's nodes and out as floats after the plan's own parts of
 * the workspace; 0 when they do not fit a size_t. */
static int add_wide(sgk_plan *plan, const sgk_limits *lim, int64_t rows)
{
    if (!lim->wide16)
        return 1;
    const size_t align = lim->align < sizeof(float) ? sizeof(float) : lim->align;
    const size_t bytes = (size_t)plan->D * sizeof(float);
    if ((size_t)rows > (SIZE_MAX / 4 - plan->workspace_bytes) / 2 / bytes)
        return 0;
    plan->wide_nodes = round_up(plan->workspace_bytes, align);
    plan->wide_out = round_up(plan->wide_nodes + (size_t)rows * bytes, align);
    plan->workspace_bytes = plan->wide_out + (size_t)rows * bytes;
    return 1;
}

int sgk_plan_make(sgk_plan_kind kind, int64_t B, int64_t N, int64_t D, int64_t H, int64_t P,
                  const sgk_limits *lim, sgk_plan *plan)
{
    const size_t budget = lim->local_bytes / sizeof(float);
    /* Counts inside the kernels are int; rows of the flattened batch too,
     * and a group's local offsets. */
    if (B < 1 || N < 1 || D < 1 || H < 1 || P < 1 || D % H != 0 || lim->pad < 1)
        return 0;
    if (B > INT_MAX / N || 4 * D * D > INT_MAX || N * P > INT_MAX || D > INT_MAX / 64 || P > 4096 ||
        H > 4096 || (size_t)budget > (size_t)INT_MAX)
        return 0;
    memset(plan, 0, sizeof(*plan));
    const sgk_gen_packed w = sgk_gen_layout(D, H, P, lim->pad, 1);
    plan->kind = kind;
    plan->B = B;
    plan->N = (int)N;
    plan->D = (int)D;
    plan->H = (int)H;
    plan->P = (int)P;
    plan->scale = (float)(1.0 / sqrt((double)(D / H)));
    plan->ldk = w.ldk;
    plan->ldo = w.ldo;
    plan->ldp = w.ldp;
    plan->ldh = w.ldh;
    plan->ldc = sgk_row_length(D, lim->pad);
    const int64_t ldk = w.ldk, ldc = plan->ldc;

    if (kind == SGK_PLAN_SMALL) {
        /* Q/K/V and context of the whole entry, then the larger of the
         * LayerNorm's rows and the attention's scratch, which reuse one
         * region. */
        if (B > lim->max_groups || N * (ldk + ldc) > (int64_t)budget)
            return 0;
        const size_t held = (size_t)(N * (ldk + ldc)), ln = (size_t)(N * (ldc + 2));
        if (held + ln > budget || !attn_tile(plan, lim, N, budget, held))
            return 0;
        plan->smem_fused = held + (ln > plan->smem_attn ? ln : plan->smem_attn);
        return add_wide(plan, lim, B * N);
    }

    /* Tiled: norm's groups of up to 8 rows, the projections' tiles as lim
     * gives them (no local memory), the attention's as it fits. */
    if (!attn_tile(plan, lim, N, budget, 0))
        return 0;
    const int64_t rows = B * N;
    plan->rt = (int)min64(rows, 8);
    plan->smem_norm = (size_t)(2 * plan->rt);
    plan->mt = (int)min64(rows, lim->mt < 1 ? 1 : lim->mt);
    plan->nt = (int)min64(ldk, lim->nt < 1 ? 1 : lim->nt);
    plan->groups_norm = (rows + plan->rt - 1) / plan->rt;
    plan->groups_rows = (rows + plan->mt - 1) / plan->mt;
    plan->groups_qkv = (ldk + plan->nt - 1) / plan->nt;
    plan->groups_out = (D + plan->nt - 1) / plan->nt;
    plan->groups_q = (N + plan->tq - 1) / plan->tq;
    plan->groups_attn = plan->groups_q * B;
    /* too few query tiles for the device: split the keys, at most a key
     * tile a range */
    const int64_t kt = (N + plan->tk - 1) / plan->tk;
    int64_t ks = 1;
    if (lim->min_groups > plan->groups_attn)
        ks = min64((lim->min_groups + plan->groups_attn - 1) / plan->groups_attn, kt);
    plan->ks = (int)ks;
    plan->groups_attn *= ks;
    if (plan->groups_norm > lim->max_groups || plan->groups_rows > lim->max_groups ||
        plan->groups_qkv > lim->max_groups || plan->groups_attn > lim->max_groups ||
        plan->groups_attn > INT_MAX)
        return 0;
    const size_t align = lim->align < sizeof(float) ? sizeof(float) : lim->align;
    if ((size_t)rows > SIZE_MAX / 2 / ((size_t)(ldk + ldc) * sizeof(float)))
        return 0;
    plan->ctx_offset = round_up((size_t)rows * (size_t)ldk * sizeof(float), align);
    plan->workspace_bytes = plan->ctx_offset + (size_t)rows * (size_t)ldc * sizeof(float);
    if (ks > 1) {
        /* ks <= kt <= N, so this is at most N times the context's floats */
        if ((size_t)rows > SIZE_MAX / 4 / (size_t)ks / ((size_t)(ldc + 2 * H) * sizeof(float)))
            return 0;
        plan->part_offset = round_up(plan->workspace_bytes, align);
        plan->workspace_bytes = plan->part_offset + (size_t)ks * (size_t)rows * (size_t)(ldc + 2 * H) * sizeof(float);
    }
    return add_wide(plan, lim, rows);
}

/* Floats of local memory attn_bwd needs (train.sgk's carving, its last
 * 32 the row of ones its bias sums multiply by) for a tile of a (D, H)
 * layer whose W1 rows are ldp floats, on a target of pad. */
typedef struct bwd_need {
    int64_t D, H, ldp, pad;
} bwd_need;

static size_t bwd_floats(const tile *t, const void *user)
{
    const bwd_need *n = user;
    const int64_t tqp = up64(t->tq, n->pad), tk = t->tk, qc = t->qc;
    return (size_t)(2 * n->D * tqp + 2 * n->H * tk * tqp + 2 * n->H * tqp + tk * tqp + 2 * tqp +
                    3 * tk * qc * n->ldp + 2 * n->H * tk * qc + 32);
}

int sgk_train_plan_make(int64_t B, int64_t N, int64_t D, int64_t H, int64_t P, const sgk_limits *lim,
                        sgk_train_plan *tp)
{
    memset(tp, 0, sizeof *tp);
    if (!sgk_plan_make(SGK_PLAN_TILED, B, N, D, H, P, lim, &tp->fwd))
        return 0;
    const sgk_plan *f = &tp->fwd;
    const size_t budget = lim->local_bytes / sizeof(float);
    const int64_t ldp = f->ldp, rows = B * N;
    tp->ldd = sgk_row_length(D + lim->pad, lim->pad);
    tp->ldv = sgk_row_length(2 * D, lim->pad);
    /* the tile: as the forward's to start, shrunk until it fits */
    tile t = first_tile(lim, N);
    const bwd_need bn = {D, H, ldp, lim->pad};
    if (!shrink_tile(&t, budget, bwd_floats, &bn))
        return 0;
    const int64_t tq = t.tq, tk = t.tk;
    tp->tq = (int)tq;
    tp->tqp = (int)up64(tq, lim->pad);
    tp->tk = (int)tk;
    tp->qc = (int)t.qc;
    tp->smem_bwd = bwd_floats(&t, &bn);
    /* ranges of query and key tiles, the smaller one grown first, until
     * the groups keep the device busy */
    const int64_t qtiles = (N + tq - 1) / tq, ktiles = (N + tk - 1) / tk;
    int64_t rq = 1, rk = 1;
    while (B * rq * rk < lim->min_groups && (rq < qtiles || rk < ktiles)) {
        if (rq < qtiles && (rq <= rk || rk >= ktiles))
            rq++;
        else
            rk++;
    }
    tp->rq = (int)rq;
    tp->rk = (int)rk;
    tp->groups_bwd = B * rq * rk;
    tp->mlpw = (int)((P + 1 + H) * ldp + H);
    /* LayerNorm's weight gradients: 64 columns a group, the rows split
     * into chunks of 64 or more until there are min_groups groups */
    tp->cb = 64;
    tp->groups_cols = (D + tp->cb - 1) / tp->cb;
    tp->smem_cols = (size_t)(2 * tp->cb);
    int64_t lch = min64((rows + 63) / 64, (lim->min_groups + tp->groups_cols - 1) / tp->groups_cols);
    lch = lch < 1 ? 1 : lch;
    const int64_t lk = (rows + lch - 1) / lch;
    tp->lk = (int)lk;
    tp->lch = (int)((rows + lk - 1) / lk);
    tp->per = 256;
    tp->groups_mlp = (P * P + P + H * P + H + tp->per - 1) / tp->per;
    tp->groups_dctx = (tp->ldd + f->nt - 1) / f->nt;
    /* a weight's gradient: the forward's projection tiles, the rows split
     * into chunks (of 128 rows or more, and no more of them than rows / D,
     * so that their parts, D x D each, take no more room than the rows)
     * and then the tiles shrunk (columns to 32, then rows to 8) until
     * there are min_groups groups for Wo's gradient, the smallest call */
    int64_t wmt = min64(D, lim->mt < 1 ? 1 : lim->mt), wnt = min64(D, lim->nt < 1 ? 1 : lim->nt);
    const int64_t wch_most = max64(1, min64(rows / 128, rows / D));
    int64_t wch = 1;
    while (2 * wch <= wch_most && ((D + wmt - 1) / wmt) * ((D + wnt - 1) / wnt) * wch < lim->min_groups)
        wch *= 2;
    while (wnt > 32 && ((D + wmt - 1) / wmt) * ((D + wnt - 1) / wnt) * wch < lim->min_groups)
        wnt /= 2;
    while (wmt > 8 && ((D + wmt - 1) / wmt) * ((D + wnt - 1) / wnt) * wch < lim->min_groups)
        wmt /= 2;
    const int64_t wkc = (rows + wch - 1) / wch;
    tp->wmt = (int)wmt;
    tp->wnt = (int)wnt;
    tp->wkc = (int)wkc;
    tp->wch = (int)((rows + wkc - 1) / wkc);
    tp->groups_wr = (D + wmt - 1) / wmt;
    tp->groups_wc = (D + wnt - 1) / wnt;
    if (tp->groups_bwd > lim->max_groups || tp->groups_bwd > INT_MAX || tp->groups_mlp > lim->max_groups ||
        (D * D + tp->per - 1) / tp->per > lim->max_groups || 4 * D * D > INT_MAX)
        return 0;
    /* the workspace after the forward's: xn, dctx (then dxn), Di, the row
     * statistics, the partial sums; checked against size_t in doubles
     * first (each part is far below 2^53 floats where it fits) */
    const double need = (double)f->workspace_bytes / sizeof(float) +
                        (double)rows * (double)(f->ldc + tp->ldd + 3 * H + 3) +
                        (double)rk * (double)rows * (double)tp->ldd + (double)rq * (double)rows * (double)tp->ldv +
                        (double)tp->groups_bwd * (double)tp->mlpw + 10.0 * (double)(lim->align + 1) +
                        (double)tp->wch * 4.0 * (double)D * (double)D + (double)tp->lch * 2.0 * (double)D +
                        (lim->wide16 ? 2.0 * (double)rows * (double)D + 4.0 * (double)D * (double)D +
                                           (double)((P + 1) * (P + H) + 2 * D) + 16.0 * (double)(lim->align + 1)
                                     : 0.0);
    if (need * sizeof(float) > (double)(SIZE_MAX / 2))
        return 0;
    const size_t a = (lim->align < sizeof(float) ? sizeof(float) : lim->align) / sizeof(float);
    size_t o = round_up(f->workspace_bytes / sizeof(float), a);
    tp->xn = o;  o = round_up(o + (size_t)rows * (size_t)f->ldc, a);
    tp->dctx = o; o = round_up(o + (size_t)rows * (size_t)tp->ldd, a);
    tp->di = o;  o = round_up(o + (size_t)rows * (size_t)(3 * H + 1), a);
    tp->st = o;  o = round_up(o + (size_t)rows * 2, a);
    tp->dq = o;  o = round_up(o + (size_t)rk * (size_t)rows * (size_t)tp->ldd, a);
    tp->dkv = o; o = round_up(o + (size_t)rq * (size_t)rows * (size_t)tp->ldv, a);
    tp->mlp = o; o = round_up(o + (size_t)tp->groups_bwd * (size_t)tp->mlpw, a);
    tp->wpart = o; o = round_up(o + (tp->wch > 1 ? (size_t)tp->wch * 4 * (size_t)D * (size_t)D : 0), a);
    tp->lpart = o; o = o + (size_t)tp->lch * 2 * (size_t)D;
    if (lim->wide16) {
        const size_t d = (size_t)D, n[12] = {(size_t)rows * d, 0, d, d, d * d, d * d, d * d, d * d,
                                             (size_t)(P * P), (size_t)P, (size_t)(H * P), (size_t)H};
        memcpy(tp->grad_n, n, sizeof n);
        o = round_up(o, a);
        tp->wide_dout = o;
        o = round_up(o + (size_t)rows * d, a);
        for (int i = 0; i < 12; i++)
            if (n[i]) {
                tp->grad16[i] = o;
                o = round_up(o + n[i], a);
            }
    }
    tp->workspace_bytes = o * sizeof(float);
    return 1;
}
