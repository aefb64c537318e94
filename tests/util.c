#include "util.h"

#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets ---------------------------------------------------------- */

const sgkt_preset sgkt_presets[] = {
    {"seed", 4, 24, 96, 4, 16},
    {"mid", 32, 64, 256, 8, 32},
    {"large", 8, 512, 256, 8, 32},
    {"xl", 2, 2048, 256, 8, 16},
};
const int sgkt_preset_count = (int)(sizeof sgkt_presets / sizeof sgkt_presets[0]);

const sgkt_preset *sgkt_preset_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < sgkt_preset_count; i++)
        if (strcmp(sgkt_presets[i].name, name) == 0)
            return &sgkt_presets[i];
    return NULL;
}

/* ---- random numbers --------------------------------------------------- */

void sgkt_rng_seed(sgkt_rng *rng, uint64_t seed) { rng->state = seed; }

uint64_t sgkt_rng_u64(sgkt_rng *rng)
{
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sgkt_rng_uniform(sgkt_rng *rng)
{
    return (double)(sgkt_rng_u64(rng) >> 11) * 0x1.0p-53;
}

double sgkt_rng_range(sgkt_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * sgkt_rng_uniform(rng);
}

double sgkt_rng_normal(sgkt_rng *rng)
{
    /* Box-Muller with one value per call: simpler to reproduce than caching. */
    double u1 = 1.0 - sgkt_rng_uniform(rng); /* (0, 1]: log stays finite */
    double u2 = sgkt_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t sgkt_seed_mix(uint64_t base, uint64_t tag)
{
    sgkt_rng r = {base ^ (tag * 0xd1b54a32d192ed03ull)};
    (void)sgkt_rng_u64(&r);
    return sgkt_rng_u64(&r);
}

uint64_t sgkt_env_seed(uint64_t fallback)
{
    const char *s = getenv("SGK_TEST_SEED");
    if (!s || !*s)
        return fallback;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    return (end && *end == '\0') ? (uint64_t)v : fallback;
}

void sgkt_fill_uniform(sgkt_rng *rng, float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)sgkt_rng_range(rng, lo, hi);
}

void sgkt_fill_normal(sgkt_rng *rng, float *x, size_t n, double mean, double stddev)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + stddev * sgkt_rng_normal(rng));
}

int sgkt_env_flag(const char *name)
{
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}

/* ---- weights ---------------------------------------------------------- */

static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

int sgkt_weights_alloc(sgkt_weights *w, int64_t D, int64_t H, int64_t P)
{
    memset(w, 0, sizeof *w);
    if (D < 1 || H < 1 || P < 1)
        return -1;
    w->D = D;
    w->H = H;
    w->P = P;
    w->eps = 1e-5f;
    size_t d = (size_t)D, h = (size_t)H, p = (size_t)P;
    w->ln_gamma = malloc(d * sizeof(float));
    w->ln_beta = malloc(d * sizeof(float));
    w->wq = malloc(d * d * sizeof(float));
    w->wk = malloc(d * d * sizeof(float));
    w->wv = malloc(d * d * sizeof(float));
    w->wo = malloc(d * d * sizeof(float));
    w->w1 = malloc(p * p * sizeof(float));
    w->b1 = malloc(p * sizeof(float));
    w->w2 = malloc(h * p * sizeof(float));
    w->b2 = malloc(h * sizeof(float));
    if (!w->ln_gamma || !w->ln_beta || !w->wq || !w->wk || !w->wv || !w->wo || !w->w1 ||
        !w->b1 || !w->w2 || !w->b2) {
        sgkt_weights_free(w);
        return -1;
    }
    return 0;
}

void sgkt_weights_random(sgkt_weights *w, sgkt_rng *rng)
{
    size_t d = (size_t)w->D, h = (size_t)w->H, p = (size_t)w->P;
    double sd = 1.0 / sqrt((double)w->D), sp = 1.0 / sqrt((double)w->P);
    sgkt_fill_uniform(rng, w->ln_gamma, d, 0.5, 1.5);
    sgkt_fill_uniform(rng, w->ln_beta, d, -0.5, 0.5);
    sgkt_fill_uniform(rng, w->wq, d * d, -sd, sd);
    sgkt_fill_uniform(rng, w->wk, d * d, -sd, sd);
    sgkt_fill_uniform(rng, w->wv, d * d, -sd, sd);
    sgkt_fill_uniform(rng, w->wo, d * d, -sd, sd);
    sgkt_fill_uniform(rng, w->w1, p * p, -sp, sp);
    sgkt_fill_uniform(rng, w->b1, p, -sp, sp);
    sgkt_fill_uniform(rng, w->w2, h * p, -sp, sp);
    sgkt_fill_uniform(rng, w->b2, h, -sp, sp);
}

void sgkt_weights_free(sgkt_weights *w)
{
    free(w->ln_gamma);
    free(w->ln_beta);
    free(w->wq);
    free(w->wk);
    free(w->wv);
    free(w->wo);
    free(w->w1);
    free(w->b1);
    free(w->w2);
    free(w->b2);
    memset(w, 0, sizeof *w);
}

void sgkt_weights_to_desc(const sgkt_weights *w, sgk_layer_desc *desc)
{
    desc->dim = w->D;
    desc->heads = w->H;
    desc->pair_dim = w->P;
    desc->eps = w->eps;
    desc->ln_gamma = w->ln_gamma;
    desc->ln_beta = w->ln_beta;
    desc->wq = w->wq;
    desc->wk = w->wk;
    desc->wv = w->wv;
    desc->wo = w->wo;
    desc->w1 = w->w1;
    desc->b1 = w->b1;
    desc->w2 = w->w2;
    desc->b2 = w->b2;
}

/* n floats at x rounded to dtype in place; their 16-bit values in a new
 * buffer (NULL when out of memory) */
static uint16_t *round16(sgk_dtype dtype, float *x, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; h && i < n; i++) {
        h[i] = dtype == SGK_DTYPE_BF16 ? sgk_bf16_from_f32(x[i]) : sgk_f16_from_f32(x[i]);
        x[i] = dtype == SGK_DTYPE_BF16 ? sgk_f32_from_bf16(h[i]) : sgk_f32_from_f16(h[i]);
    }
    return h;
}

int sgkt_round16(sgk_dtype dtype, sgkt_weights *w, sgkt_inputs *in, sgkt_case16 *c)
{
    const size_t D = (size_t)w->D, H = (size_t)w->H, P = (size_t)w->P;
    float *src[10] = {w->ln_gamma, w->ln_beta, w->wq, w->wk, w->wv, w->wo, w->w1, w->b1, w->w2, w->b2};
    const size_t n[10] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    const size_t rows = (size_t)in->B * (size_t)in->N;
    memset(c, 0, sizeof *c);
    int ok = 1;
    for (int i = 0; i < 10; i++)
        ok &= (c->w[i] = round16(dtype, src[i], n[i])) != NULL;
    ok &= (c->nodes = round16(dtype, in->nodes, rows * D)) != NULL;
    ok &= (c->pair = round16(dtype, in->pair_feats, rows * (size_t)in->N * P)) != NULL;
    if (!ok)
        sgkt_case16_free(c);
    return ok ? 0 : -1;
}

void sgkt_desc16(sgk_dtype dtype, const sgkt_weights *w, const sgkt_case16 *c, sgk_layer_desc *desc)
{
    sgkt_weights_to_desc(w, desc);
    desc->dtype = dtype;
    desc->ln_gamma = c->w[0], desc->ln_beta = c->w[1];
    desc->wq = c->w[2], desc->wk = c->w[3], desc->wv = c->w[4], desc->wo = c->w[5];
    desc->w1 = c->w[6], desc->b1 = c->w[7], desc->w2 = c->w[8], desc->b2 = c->w[9];
}

void sgkt_case16_free(sgkt_case16 *c)
{
    for (int i = 0; i < 10; i++)
        free(c->w[i]);
    free(c->nodes);
    free(c->pair);
    memset(c, 0, sizeof *c);
}

void sgkt_weights_to_ref(const sgkt_weights *w, sgk_ref_layer *ref)
{
    ref->D = w->D;
    ref->H = w->H;
    ref->P = w->P;
    ref->eps = (double)w->eps;
    ref->ln_gamma = w->ln_gamma;
    ref->ln_beta = w->ln_beta;
    ref->wq = w->wq;
    ref->wk = w->wk;
    ref->wv = w->wv;
    ref->wo = w->wo;
    ref->w1 = w->w1;
    ref->b1 = w->b1;
    ref->w2 = w->w2;
    ref->b2 = w->b2;
}

void sgkt_transpose_square(float *m, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            float t = m[i * n + j];
            m[i * n + j] = m[j * n + i];
            m[j * n + i] = t;
        }
}

/* ---- inputs and masks ------------------------------------------------- */

const char *sgkt_mask_pattern_name(sgkt_mask_pattern pattern)
{
    switch (pattern) {
    case SGKT_MASK_DENSE: return "dense";
    case SGKT_MASK_RANDOM: return "random";
    case SGKT_MASK_EMPTY_ROWS: return "empty-rows";
    case SGKT_MASK_ALL_ZERO: return "all-zero";
    case SGKT_MASK_DIAGONAL: return "diagonal";
    case SGKT_MASK_ODD_VALUES: return "odd-values";
    }
    return "?";
}

size_t sgkt_mask_elem_size(sgk_mask_type mask_type)
{
    return mask_type == SGK_MASK_U8 ? 1 : sizeof(float);
}

int sgkt_inputs_alloc(sgkt_inputs *in, int64_t B, int64_t N, int64_t D, int64_t P,
                      sgk_mask_type mask_type)
{
    memset(in, 0, sizeof *in);
    size_t bn, bnd, bnn, bnnp, nb, pb, mb;
    if (B < 1 || N < 1 || D < 1 || P < 1 || !mul_ok((size_t)B, (size_t)N, &bn) ||
        !mul_ok(bn, (size_t)D, &bnd) || !mul_ok(bn, (size_t)N, &bnn) ||
        !mul_ok(bnn, (size_t)P, &bnnp) || !mul_ok(bnd, sizeof(float), &nb) ||
        !mul_ok(bnnp, sizeof(float), &pb) || !mul_ok(bnn, sgkt_mask_elem_size(mask_type), &mb))
        return -1;
    in->B = B;
    in->N = N;
    in->D = D;
    in->P = P;
    in->mask_type = mask_type;
    in->nodes = malloc(nb);
    in->pair_feats = malloc(pb);
    in->edge_mask = malloc(mb);
    if (!in->nodes || !in->pair_feats || !in->edge_mask) {
        sgkt_inputs_free(in);
        return -1;
    }
    return 0;
}

void sgkt_inputs_free(sgkt_inputs *in)
{
    free(in->nodes);
    free(in->pair_feats);
    free(in->edge_mask);
    memset(in, 0, sizeof *in);
}

void sgkt_inputs_random(sgkt_inputs *in, sgkt_rng *rng, sgkt_mask_pattern pattern,
                        double density)
{
    size_t bn = (size_t)in->B * (size_t)in->N;
    sgkt_fill_normal(rng, in->nodes, bn * (size_t)in->D, 0.0, 1.0);
    sgkt_fill_normal(rng, in->pair_feats, bn * (size_t)in->N * (size_t)in->P, 0.0, 1.0);
    sgkt_fill_mask(rng, pattern, density, in->mask_type, in->B, in->N, in->edge_mask);
}

void sgkt_nodes_offset(sgkt_inputs *in, sgkt_rng *rng)
{
    const size_t rows = (size_t)in->B * (size_t)in->N, D = (size_t)in->D;
    float off;
    for (size_t r = 0; r < rows; r++) {
        sgkt_fill_normal(rng, &off, 1, 0.0, 20.0);
        sgkt_fill_normal(rng, in->nodes + r * D, D, (double)off, 3e-3);
    }
}

static void put_mask(void *mask, sgk_mask_type t, size_t idx, float fv, uint8_t uv)
{
    if (t == SGK_MASK_U8)
        ((uint8_t *)mask)[idx] = uv;
    else
        ((float *)mask)[idx] = fv;
}

void sgkt_fill_mask(sgkt_rng *rng, sgkt_mask_pattern pattern, double density,
                    sgk_mask_type mask_type, int64_t B, int64_t N, void *mask)
{
    /* 1e-45 is the smallest subnormal: a kernel that flushes subnormals to
     * zero before comparing would drop these edges */
    static const float odd_edge_f[] = {0.3f, -2.0f, 1e-30f, INFINITY, NAN, 1e-45f, 1.0f};
    static const uint8_t odd_edge_u[] = {1, 2, 255, 128};
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++) {
            int empty_row = pattern == SGKT_MASK_EMPTY_ROWS && sgkt_rng_uniform(rng) < 0.25;
            for (int64_t j = 0; j < N; j++) {
                size_t idx = ((size_t)b * (size_t)N + (size_t)i) * (size_t)N + (size_t)j;
                int edge;
                switch (pattern) {
                case SGKT_MASK_DENSE: edge = 1; break;
                case SGKT_MASK_ALL_ZERO: edge = 0; break;
                case SGKT_MASK_DIAGONAL: edge = i == j; break;
                case SGKT_MASK_EMPTY_ROWS: edge = !empty_row && sgkt_rng_uniform(rng) < density; break;
                default: edge = sgkt_rng_uniform(rng) < density; break;
                }
                if (pattern != SGKT_MASK_ODD_VALUES) {
                    put_mask(mask, mask_type, idx, edge ? 1.0f : 0.0f, edge ? 1 : 0);
                } else if (edge) {
                    uint64_t r = sgkt_rng_u64(rng);
                    put_mask(mask, mask_type, idx, odd_edge_f[r % 7], odd_edge_u[r % 4]);
                } else {
                    /* -0.0 compares equal to zero: it is not an edge */
                    put_mask(mask, mask_type, idx, (sgkt_rng_u64(rng) & 1) ? -0.0f : 0.0f, 0);
                }
            }
        }
}

int sgkt_mask_is_edge(const void *mask, sgk_mask_type mask_type, size_t index)
{
    if (mask_type == SGK_MASK_U8)
        return ((const uint8_t *)mask)[index] != 0;
    return ((const float *)mask)[index] != 0.0f; /* NaN != 0 holds */
}

int64_t sgkt_mask_empty_rows(const void *mask, sgk_mask_type mask_type, int64_t B, int64_t N)
{
    int64_t empty = 0;
    for (int64_t r = 0; r < B * N; r++) {
        int any = 0;
        for (int64_t j = 0; j < N && !any; j++)
            any = sgkt_mask_is_edge(mask, mask_type, (size_t)(r * N + j));
        empty += !any;
    }
    return empty;
}

/* ---- guarded buffers -------------------------------------------------- */

/* A header before the caller's part keeps the raw pointer for free(). */
#define SGKT_GUARD_HEADER 64

static unsigned char guard_byte(size_t i) { return (unsigned char)(0xA5u ^ (i * 37u)); }

void *sgkt_guarded_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - SGKT_GUARD_BYTES - 2 * SGKT_GUARD_HEADER)
        return NULL;
    unsigned char *raw = malloc(bytes + SGKT_GUARD_BYTES + 2 * SGKT_GUARD_HEADER);
    if (!raw)
        return NULL;
    uintptr_t p = ((uintptr_t)raw + 2 * SGKT_GUARD_HEADER - 1) & ~(uintptr_t)(SGKT_GUARD_HEADER - 1);
    unsigned char *user = (unsigned char *)p;
    memcpy(user - sizeof raw, &raw, sizeof raw);
    for (size_t i = 0; i < SGKT_GUARD_BYTES; i++)
        user[bytes + i] = guard_byte(i);
    return user;
}

int sgkt_guard_ok(const void *buf, size_t bytes)
{
    const unsigned char *u = buf;
    for (size_t i = 0; i < SGKT_GUARD_BYTES; i++)
        if (u[bytes + i] != guard_byte(i))
            return 0;
    return 1;
}

void sgkt_guarded_free(void *buf)
{
    if (!buf)
        return;
    unsigned char *raw;
    memcpy(&raw, (unsigned char *)buf - sizeof raw, sizeof raw);
    free(raw);
}

void sgkt_poison_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

const sgkt_poison sgkt_poisons[] = {
    {"NaN in nodes of node 0 (rows 1, 2 do not attend it)", 0, 0, 0, NAN},
    {"+Inf in nodes of node 0 (rows 1, 2 do not attend it)", 0, 0, 0, INFINITY},
    {"NaN in pair_feats of masked pair (1, 0)", 1, 1, 0, NAN},
    {"NaN in pair_feats of edge (1, 2)", 1, 1, 2, NAN},
    {"-Inf in pair_feats of edge (2, 1)", 1, 2, 1, -INFINITY},
};
const int sgkt_poison_count = (int)(sizeof sgkt_poisons / sizeof sgkt_poisons[0]);

void sgkt_poison_mask(float *mask, int64_t N)
{
    for (int64_t i = 0; i < 2 * N * N; i++)
        mask[i] = 1.0f;
    mask[1 * N + 0] = 0.0f;
    mask[2 * N + 0] = 0.0f;
    for (int64_t j = 0; j < N; j++)
        mask[3 * N + j] = 0.0f;
}

void sgkt_poison_apply(const sgkt_poison *p, float *nodes, float *pair_feats, int64_t N, int64_t D, int64_t P)
{
    if (p->in_pair)
        pair_feats[((size_t)p->node * (size_t)N + (size_t)p->col) * (size_t)P] = p->value;
    else
        nodes[(size_t)p->node * (size_t)D] = p->value;
}

/* ---- comparison ------------------------------------------------------- */

static void cmp_one(sgkt_error *e, double g, double r, size_t i, double *num, double *den,
                    double *worst_diff)
{
    int gf = isfinite(g), rf = isfinite(r);
    if (!gf || !rf) {
        int same = (isnan(g) && isnan(r)) || (!gf && !rf && !isnan(g) && !isnan(r) && g == r);
        if (!same) {
            if (e->mismatched_nonfinite++ == 0)
                e->worst = i;
        }
        return;
    }
    double d = fabs(g - r);
    *num += d * d;
    *den += r * r;
    if (d > *worst_diff) {
        *worst_diff = d;
        if (e->mismatched_nonfinite == 0)
            e->worst = i;
    }
}

static sgkt_error finish(sgkt_error e, double num, double den, double worst_diff)
{
    if (e.mismatched_nonfinite) {
        e.rel_l2 = INFINITY;
        e.max_abs = INFINITY;
        return e;
    }
    e.rel_l2 = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    e.max_abs = worst_diff;
    return e;
}

sgkt_error sgkt_compare(const float *got, const double *ref, size_t n)
{
    sgkt_error e = {0, 0, 0, 0};
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        cmp_one(&e, (double)got[i], ref[i], i, &num, &den, &worst);
    return finish(e, num, den, worst);
}

sgkt_error sgkt_compare_f(const float *got, const float *ref, size_t n)
{
    sgkt_error e = {0, 0, 0, 0};
    double num = 0, den = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        cmp_one(&e, (double)got[i], (double)ref[i], i, &num, &den, &worst);
    return finish(e, num, den, worst);
}

int sgkt_error_ok(const sgkt_error *e, double rel_l2_max, double max_abs_max)
{
    return e->mismatched_nonfinite == 0 && e->rel_l2 <= rel_l2_max && e->max_abs <= max_abs_max;
}

double sgkt_rel_l2_floored(const float *got, const double *ref, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i])) {
            d += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
            r += ref[i] * ref[i];
        }
    const double floor = 1e-6 * (double)n;
    return sqrt(d / (r > floor ? r : floor));
}

const char *const sgkt_grad_names[SGKT_N_GRADS] = {"nodes", "pair_feats", "ln_gamma", "ln_beta", "wq", "wk",
                                                   "wv", "wo", "w1", "b1", "w2", "b2"};

void sgkt_grad_counts(int64_t B, int64_t N, int64_t D, int64_t H, int64_t P, size_t n[SGKT_N_GRADS])
{
    const size_t b = (size_t)B, m = (size_t)N, d = (size_t)D, h = (size_t)H, p = (size_t)P;
    const size_t k[SGKT_N_GRADS] = {b * m * d, b * m * m * p, d, d, d * d, d * d, d * d, d * d, p * p, p, h * p, h};
    memcpy(n, k, sizeof k);
}

void **sgkt_grad_slot(sgk_grads *g, int i)
{
    void **s[SGKT_N_GRADS] = {&g->nodes, &g->pair_feats, &g->ln_gamma, &g->ln_beta, &g->wq, &g->wk,
                              &g->wv, &g->wo, &g->w1, &g->b1, &g->w2, &g->b2};
    return s[i];
}

double **sgkt_ref_grad_slot(sgk_ref_grads *g, int i)
{
    double **s[SGKT_N_GRADS] = {&g->nodes, &g->pair_feats, &g->ln_gamma, &g->ln_beta, &g->wq, &g->wk,
                                &g->wv, &g->wo, &g->w1, &g->b1, &g->w2, &g->b2};
    return s[i];
}
