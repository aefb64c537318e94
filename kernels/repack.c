/* Repack maps (plan.h): the map of a packer, found by running it on probe
 * weights and checked by running it again. Compiles as C and as C++ (the
 * CUDA dev harness builds it with nvcc -x cu). */
#include "plan.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Probe weights: element i of source seg is first seg * LO + i % LO + 1,
 * then i / LO + 1. Both are integers of at most 2^20, exact in fp32; a
 * packed float divided by its scale (the packed float of all-ones weights)
 * gives them back within a relative 2^-23 after the packer's one rounding,
 * which names seg and i. Sources are limited to 2^32 elements. */
#define LO 4096
#define HI_MAX ((int64_t)1 << 20)
/* A run's len is an int32; longer ones are split. */
#define RUN_MAX ((int32_t)1 << 30)

void sgk_repack_sources(int64_t D, int64_t H, int64_t P, size_t count[SGK_SRC_COUNT])
{
    count[SGK_SRC_GAMMA] = count[SGK_SRC_BETA] = (size_t)D;
    count[SGK_SRC_WQ] = count[SGK_SRC_WK] = count[SGK_SRC_WV] = count[SGK_SRC_WO] =
        (size_t)D * (size_t)D;
    count[SGK_SRC_W1] = (size_t)P * (size_t)P;
    count[SGK_SRC_B1] = (size_t)P;
    count[SGK_SRC_W2] = (size_t)H * (size_t)P;
    count[SGK_SRC_B2] = (size_t)H;
}

void sgk_repack_pointers(const sgk_layer_desc *d, const void *src[SGK_SRC_COUNT])
{
    src[SGK_SRC_GAMMA] = d->ln_gamma;
    src[SGK_SRC_BETA] = d->ln_beta;
    src[SGK_SRC_WQ] = d->wq;
    src[SGK_SRC_WK] = d->wk;
    src[SGK_SRC_WV] = d->wv;
    src[SGK_SRC_WO] = d->wo;
    src[SGK_SRC_W1] = d->w1;
    src[SGK_SRC_B1] = d->b1;
    src[SGK_SRC_W2] = d->w2;
    src[SGK_SRC_B2] = d->b2;
}

void sgk_pack_weights_fn(const sgk_layer_desc *desc, float *dst, void *user)
{
    (void)user;
    sgk_pack_weights(desc, dst);
}

void sgk_gen_pack_fn(const sgk_layer_desc *desc, float *dst, void *user)
{
    sgk_gen_pack(desc, (const sgk_gen_packed *)user, dst);
}

/* the repack kernel takes s1, s2, s3: scales[1..3] */
_Static_assert(SGK_REPACK_SCALES == 4, "relation.sgk's repack kernel takes three scales besides the copy's");

size_t sgk_repack_stage(int64_t D, int64_t H, int64_t P, size_t align, size_t at[SGK_SRC_COUNT])
{
    size_t count[SGK_SRC_COUNT], o = 0;
    const size_t a = align < 1 ? 1 : align;
    sgk_repack_sources(D, H, P, count);
    for (int s = 0; s < SGK_SRC_COUNT; s++) {
        at[s] = o;
        o += (count[s] + a - 1) / a * a;
    }
    return o;
}

void sgk_repack_kernel_runs(const sgk_repack_map *map, const size_t at[SGK_SRC_COUNT], int64_t *out)
{
    for (size_t r = 0; r < map->count; r++) {
        const sgk_repack_run *u = &map->runs[r];
        out[5 * r] = u->dst;
        out[5 * r + 1] = (int64_t)at[u->seg] + u->src;
        out[5 * r + 2] = u->len;
        out[5 * r + 3] = u->stride;
        out[5 * r + 4] = u->scale;
    }
}

static float *alloc_floats(size_t n, int (*should_fail)(void))
{
    if (should_fail && should_fail())
        return NULL;
    if (n > SIZE_MAX / sizeof(float))
        return NULL;
    return (float *)malloc(n ? n * sizeof(float) : 1);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The three probes' packed floats, and the size of each source. */
typedef struct probes {
    const float *ones, *seg_lo, *hi;
    const size_t *count;
} probes;

/* v when q is within rounding of the integer v in [1, max], else -1. */
static int64_t probe_value(double q, int64_t max)
{
    const double v = floor(q + 0.5);
    if (!(v >= 1.0 && v <= (double)max) || !(fabs(q - v) <= v * 0x1p-22))
        return -1;
    return (int64_t)v;
}

/* What packed float e is: 0, a constant zero; 1, a gather (seg, idx and
 * scale filled; scales not yet in the map are added when add is set); -1,
 * neither (map->reason says why). */
static int decode(const probes *pr, size_t e, sgk_repack_map *map, int add, int *seg,
                  int64_t *idx, int *scale)
{
    const float s = pr->ones[e];
    if (bits_of(s) == 0) {
        if (bits_of(pr->seg_lo[e]) == 0 && bits_of(pr->hi[e]) == 0)
            return 0;
        snprintf(map->reason, sizeof map->reason,
                 "packed float %zu is 0 for weights of all ones but not for other weights", e);
        return -1;
    }
    if (!isfinite(s)) {
        snprintf(map->reason, sizeof map->reason,
                 "packed float %zu is %g for weights of all ones: not a weight times a "
                 "constant", e, (double)s);
        return -1;
    }
    int k = bits_of(s) == bits_of(1.0f) ? 0 : -1;
    for (int i = 1; k < 0 && i < map->nscales; i++)
        if (bits_of(map->scales[i]) == bits_of(s))
            k = i;
    if (k < 0 && add && map->nscales < SGK_REPACK_SCALES) {
        k = map->nscales++;
        map->scales[k] = s;
    }
    if (k < 0) {
        snprintf(map->reason, sizeof map->reason,
                 "the packer scales weights by more than %d distinct constants",
                 SGK_REPACK_SCALES - 1);
        return -1;
    }
    const int64_t a = probe_value((double)pr->seg_lo[e] / (double)s, (int64_t)SGK_SRC_COUNT * LO);
    const int64_t b = probe_value((double)pr->hi[e] / (double)s, HI_MAX);
    if (a < 0 || b < 0) {
        snprintf(map->reason, sizeof map->reason,
                 "packed float %zu is not one weight element times a constant", e);
        return -1;
    }
    *seg = (int)((a - 1) / LO);
    *idx = (b - 1) * LO + (a - 1) % LO;
    *scale = k;
    if ((uint64_t)*idx >= (uint64_t)pr->count[*seg]) {
        snprintf(map->reason, sizeof map->reason,
                 "packed float %zu names element %lld of source %d, which has %zu", e,
                 (long long)*idx, *seg, pr->count[*seg]);
        return -1;
    }
    return 1;
}

/* Runs of the packer's gathers in order of dst, into out (or only counted
 * when out is NULL, which also fills the map's scales). -1 when some
 * packed float is not a gather. */
static int make_runs(const probes *pr, size_t total, sgk_repack_map *map, sgk_repack_run *out,
                     size_t *count, size_t *covered)
{
    size_t n = 0, cov = 0;
    sgk_repack_run cur;
    int open = 0;
    memset(&cur, 0, sizeof cur);
    for (size_t e = 0; e < total; e++) {
        int seg = 0, scale = 0;
        int64_t idx = 0;
        const int k = decode(pr, e, map, out == NULL, &seg, &idx, &scale);
        if (k < 0)
            return -1;
        if (k == 0) {
            if (open && out)
                out[n] = cur;
            n += open;
            open = 0;
            continue;
        }
        cov++;
        if (open && seg == cur.seg && scale == cur.scale && cur.len < RUN_MAX) {
            if (cur.len == 1 && idx - cur.src >= INT32_MIN && idx - cur.src <= INT32_MAX) {
                cur.stride = (int32_t)(idx - cur.src);
                cur.len++;
                continue;
            }
            if (cur.len > 1 && idx == cur.src + (int64_t)cur.len * cur.stride) {
                cur.len++;
                continue;
            }
        }
        if (open && out)
            out[n] = cur;
        n += open;
        cur.dst = (int64_t)e;
        cur.src = idx;
        cur.len = 1;
        cur.stride = 1;
        cur.seg = seg;
        cur.scale = scale;
        open = 1;
    }
    if (open && out)
        out[n] = cur;
    n += open;
    *count = n;
    *covered = cov;
    return 0;
}

void sgk_repack_apply(const sgk_repack_map *map, const sgk_layer_desc *desc, float *dst)
{
    const void *src[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    for (size_t r = 0; r < map->count; r++) {
        const sgk_repack_run *u = &map->runs[r];
        const float *s = (const float *)src[u->seg] + u->src;
        float *d = dst + u->dst;
        if (u->scale == 0 && (u->stride == 1 || u->len == 1)) {
            memcpy(d, s, (size_t)u->len * sizeof(float));
            continue;
        }
        const float k = map->scales[u->scale];
        for (int32_t i = 0; i < u->len; i++) {
            const float *p = s + (int64_t)i * u->stride;
            if (u->scale == 0)
                memcpy(d + i, p, sizeof(float)); /* the bits, whatever they are */
            else
                d[i] = *p * k;
        }
    }
}

int sgk_repack_copies_only(const sgk_repack_map *map)
{
    for (size_t r = 0; r < map->count; r++)
        if (map->runs[r].scale != 0 || (map->runs[r].stride != 1 && map->runs[r].len > 1))
            return 0;
    return 1;
}

void sgk_repack_map_free(sgk_repack_map *map)
{
    if (map == NULL)
        return;
    free(map->runs);
    map->runs = NULL;
    map->count = 0;
}

/* desc with its weights at the sources in buf (laid out by off). */
static sgk_layer_desc probe_desc(const sgk_layer_desc *desc, float *buf, const size_t *off)
{
    sgk_layer_desc d = *desc;
    d.ln_gamma = buf + off[SGK_SRC_GAMMA];
    d.ln_beta = buf + off[SGK_SRC_BETA];
    d.wq = buf + off[SGK_SRC_WQ];
    d.wk = buf + off[SGK_SRC_WK];
    d.wv = buf + off[SGK_SRC_WV];
    d.wo = buf + off[SGK_SRC_WO];
    d.w1 = buf + off[SGK_SRC_W1];
    d.b1 = buf + off[SGK_SRC_B1];
    d.w2 = buf + off[SGK_SRC_W2];
    d.b2 = buf + off[SGK_SRC_B2];
    return d;
}

/* 1 when the map applied to desc's weights gives expect bit for bit;
 * scratch holds total floats. */
static int map_matches(sgk_repack_map *map, const sgk_layer_desc *desc, const float *expect,
                       float *scratch, size_t total, const char *which)
{
    memset(scratch, 0, total * sizeof(float));
    sgk_repack_apply(map, desc, scratch);
    if (memcmp(scratch, expect, total * sizeof(float)) == 0)
        return 1;
    size_t e = 0;
    while (e < total && bits_of(scratch[e]) == bits_of(expect[e]))
        e++;
    snprintf(map->reason, sizeof map->reason,
             "the probed map gives packed float %zu as %.9g where the packer gives %.9g (%s "
             "weights)",
             e, (double)scratch[e], (double)expect[e], which);
    return 0;
}

int sgk_repack_map_build(const sgk_layer_desc *desc, sgk_packer_fn pack, void *user,
                         size_t total, const float *packed, int (*should_fail)(void),
                         sgk_repack_map *map)
{
    memset(map, 0, sizeof *map);
    map->scales[0] = 1.0f;
    map->nscales = 1;
    size_t count[SGK_SRC_COUNT], off[SGK_SRC_COUNT + 1];
    sgk_repack_sources(desc->dim, desc->heads, desc->pair_dim, count);
    off[0] = 0;
    for (int s = 0; s < SGK_SRC_COUNT; s++) {
        if ((uint64_t)count[s] > (uint64_t)LO * (uint64_t)HI_MAX) {
            snprintf(map->reason, sizeof map->reason,
                     "a weight has %zu elements, more than a repack map indexes (2^32)",
                     count[s]);
            return 0;
        }
        off[s + 1] = off[s] + count[s];
    }
    const size_t n_src = off[SGK_SRC_COUNT];
    float *in = alloc_floats(n_src, should_fail);
    float *o1 = in ? alloc_floats(total, should_fail) : NULL;
    float *o2 = o1 ? alloc_floats(total, should_fail) : NULL;
    float *o3 = o2 ? alloc_floats(total, should_fail) : NULL;
    if (o3 == NULL) {
        free(in);
        free(o1);
        free(o2);
        return -1;
    }
    const sgk_layer_desc pd = probe_desc(desc, in, off);
    for (size_t i = 0; i < n_src; i++)
        in[i] = 1.0f;
    pack(&pd, o1, user);
    for (int s = 0; s < SGK_SRC_COUNT; s++)
        for (size_t i = 0; i < count[s]; i++)
            in[off[s] + i] = (float)(s * LO + (int)(i % LO) + 1);
    pack(&pd, o2, user);
    for (int s = 0; s < SGK_SRC_COUNT; s++)
        for (size_t i = 0; i < count[s]; i++)
            in[off[s] + i] = (float)(i / LO + 1);
    pack(&pd, o3, user);

    probes pr;
    pr.ones = o1;
    pr.seg_lo = o2;
    pr.hi = o3;
    pr.count = count;
    size_t runs = 0, covered = 0;
    int rc = 0;
    if (make_runs(&pr, total, map, NULL, &runs, &covered) == 0) {
        if (runs > SIZE_MAX / sizeof(sgk_repack_run) ||
            (should_fail && should_fail()) ||
            (map->runs = (sgk_repack_run *)malloc(runs ? runs * sizeof(sgk_repack_run) : 1)) ==
                NULL) {
            rc = -1;
        } else {
            make_runs(&pr, total, map, map->runs, &map->count, &map->covered);
        }
    }
    /* The map against the packer: on the layer's weights, then on random
     * ones (odd multiples of 2^-20 below 16, either sign: no two alike by
     * chance, none zero). */
    if (map->runs && !map_matches(map, desc, packed, o1, total, "the layer's"))
        sgk_repack_map_free(map);
    if (map->runs) {
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < n_src; i++) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            const float v = ldexpf((float)((z >> 40) | 1), -20);
            in[i] = z & 1 ? -v : v;
        }
        pack(&pd, o2, user);
        if (!map_matches(map, &pd, o2, o3, total, "random"))
            sgk_repack_map_free(map);
    }
    if (rc != 0)
        map->count = 0;
    free(in);
    free(o1);
    free(o2);
    free(o3);
    return rc;
}
