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

/* Floats of local memory the attention phase needs for a (tq, tk) tile. */
static size_t attn_floats(int64_t tq, int64_t tk, int64_t D, int64_t H)
{
    return (size_t)(tq * tk * H + tq * D + 3 * tq * H);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int sgk_plan_make(sgk_plan_kind kind, int64_t B, int64_t N, int64_t D, int64_t H, int64_t P,
                  const sgk_limits *lim, sgk_plan *plan)
{
    const size_t budget = lim->local_bytes / sizeof(float);
    /* Counts inside the kernels are int; rows of the flattened batch too. */
    if (B < 1 || N < 1 || D < 1 || H < 1 || P < 1 || D % H != 0)
        return 0;
    if (B > INT_MAX / N || 3 * D * D > INT_MAX || N * P > INT_MAX)
        return 0;
    memset(plan, 0, sizeof(*plan));
    plan->kind = kind;
    plan->B = B;
    plan->N = (int)N;
    plan->D = (int)D;
    plan->H = (int)H;
    plan->P = (int)P;
    plan->scale = (float)(1.0 / sqrt((double)(D / H)));

    if (kind == SGK_PLAN_SMALL) {
        /* Q/K/V of the whole entry, then the larger of LayerNorm's scratch
         * and the attention tile, which reuse one region. A single query
         * row already needs N*H floats: past the budget, stop before the
         * products below can overflow. */
        if (B > lim->max_groups || N * H > (int64_t)budget || 3 * N * D > (int64_t)budget)
            return 0;
        const size_t qkv = (size_t)(3 * N * D), ln = (size_t)(N * D + 2 * N);
        for (int64_t tq = N; tq >= 1; tq = tq > 8 ? (tq + 1) / 2 : tq - 1) {
            const size_t at = attn_floats(tq, N, D, H);
            const size_t need = qkv + (ln > at ? ln : at);
            if (need <= budget) {
                plan->tq = (int)tq;
                plan->tk = (int)N;
                plan->smem_fused = need;
                return 1;
            }
        }
        return 0;
    }

    /* Tiled: keys in tiles of up to 32, queries in tiles of up to 16, both
     * shrunk until the tile fits; then as many LayerNorm rows as fit. */
    int64_t tq = min64(N, 16), tk = min64(N, 32);
    while (attn_floats(tq, tk, D, H) > budget && (tk > 1 || tq > 1)) {
        if (tk >= tq && tk > 1)
            tk = (tk + 1) / 2;
        else
            tq = (tq + 1) / 2;
    }
    if (attn_floats(tq, tk, D, H) > budget)
        return 0;
    int64_t rt = min64(8, (int64_t)(budget / (size_t)(D + 2)));
    rt = min64(rt, B * N);
    if (rt < 1)
        return 0;
    plan->tq = (int)tq;
    plan->tk = (int)tk;
    plan->rt = (int)rt;
    plan->smem_ln = (size_t)(rt * D + 2 * rt);
    plan->smem_attn = attn_floats(tq, tk, D, H);
    plan->groups_ln = (B * N + rt - 1) / rt;
    plan->groups_q = (N + tq - 1) / tq;
    plan->groups_attn = plan->groups_q * B;
    if (plan->groups_ln > lim->max_groups || plan->groups_attn > lim->max_groups || plan->groups_attn > INT_MAX)
        return 0;
    if ((size_t)(B * N) > SIZE_MAX / ((size_t)(3 * D) * sizeof(float)))
        return 0;
    plan->workspace_bytes = (size_t)(B * N) * (size_t)(3 * D) * sizeof(float);
    return 1;
}
