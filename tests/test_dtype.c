/* kernels/dtype.h against an oracle in double: every 16-bit pattern of
 * both dtypes round-trips through float, and floats sampled across every
 * exponent (a stride through all 2^32 patterns, plus the edges: ties,
 * the overflow threshold, subnormals, signed zeros, inf and NaN) convert to
 * the representable value nearest in double, ties to the even one. Where
 * the compiler has _Float16, its conversion is checked against too.
 * Usage: test_dtype (exit 0 when every check holds). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "relation_c.h"

static int g_failures;

static void fail(const char *what, uint32_t in, unsigned got, unsigned want)
{
    if (g_failures++ < 20)
        fprintf(stderr, "test_dtype: %s of 0x%08x (%.9g): got 0x%04x, want 0x%04x\n", what, in,
                (double)sgk_f32_of_bits(in), got, want);
}

/* The positive finite values of a 16-bit dtype in increasing order, then
 * the value at which its inf starts (the next step past the largest). */
typedef struct {
    double v[0x7c01 > 0x7f81 ? 0x7c01 : 0x7f81];
    int count; /* finite values */
} ladder;

static void ladder_f16(ladder *l)
{
    l->count = 0x7c00;
    for (int h = 0; h < 0x7c00; h++)
        l->v[h] = (double)sgk_f32_from_f16((uint16_t)h);
    l->v[0x7c00] = 65536.0;
}

static void ladder_bf16(ladder *l)
{
    l->count = 0x7f80;
    for (int h = 0; h < 0x7f80; h++)
        l->v[h] = (double)sgk_f32_from_bf16((uint16_t)h);
    l->v[0x7f80] = ldexp(1.0, 128);
}

/* The nearest rung to |x|, ties to the even pattern; count is inf. */
static unsigned oracle(const ladder *l, double ax)
{
    int lo = 0, hi = l->count; /* v[lo] <= ax < v[hi], or ax >= v[count] */
    if (ax >= l->v[l->count])
        return (unsigned)l->count;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (l->v[mid] <= ax)
            lo = mid;
        else
            hi = mid;
    }
    const double dl = ax - l->v[lo], dh = l->v[hi] - ax;
    if (dl < dh)
        return (unsigned)lo;
    if (dh < dl)
        return (unsigned)hi;
    return (lo & 1) ? (unsigned)hi : (unsigned)lo;
}

static void check_round_trips(void)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        const float f = sgk_f32_from_f16((uint16_t)h), g = sgk_f32_from_bf16((uint16_t)h);
        const uint16_t hf = sgk_f16_from_f32(f), hg = sgk_bf16_from_f32(g);
        if (isnan(f) ? !(isnan(sgk_f32_from_f16(hf)) && (hf & 0x8000u) == (h & 0x8000u)) : hf != h)
            fail("f16 -> float -> f16", h, hf, h);
        if (isnan(g) ? !(isnan(sgk_f32_from_bf16(hg)) && (hg & 0x8000u) == (h & 0x8000u)) : hg != h)
            fail("bf16 -> float -> bf16", h, hg, h);
    }
}

static void check_one(const ladder *l16, const ladder *lb, uint32_t u)
{
    const float x = sgk_f32_of_bits(u);
    const unsigned sign = (u >> 16) & 0x8000u;
    const uint16_t h16 = sgk_f16_from_f32(x), hb = sgk_bf16_from_f32(x);
    if (isnan(x)) {
        if (!isnan(sgk_f32_from_f16(h16)) || (h16 & 0x8000u) != sign)
            fail("float -> f16 (NaN)", u, h16, 0x7e00u | sign);
        if (!isnan(sgk_f32_from_bf16(hb)) || (hb & 0x8000u) != sign)
            fail("float -> bf16 (NaN)", u, hb, 0x7fc0u | sign);
        return;
    }
    const double ax = fabs((double)x);
    const unsigned w16 = (isinf(x) ? 0x7c00u : oracle(l16, ax)) | sign;
    const unsigned wb = (isinf(x) ? 0x7f80u : oracle(lb, ax)) | sign;
    if (h16 != w16)
        fail("float -> f16", u, h16, w16);
    if (hb != wb)
        fail("float -> bf16", u, hb, wb);
#ifdef __FLT16_MAX__
    uint16_t c;
    const _Float16 y = (_Float16)x;
    memcpy(&c, &y, sizeof c);
    if (c != h16 && !(isnan(x) && isnan((float)y)))
        fail("float -> f16 against the compiler's _Float16", u, h16, c);
#endif
}

/* The generated kernels widen16 and narrow16 (kernels/relation.sgk, which
 * every backend without 16-bit arithmetic runs), as the C target emits
 * them, bit for bit against the functions above: every 16-bit pattern,
 * and one float in 997 with the ties of check_one's sweep left to it. */
static void check_generated(void)
{
    enum { PER = 4096 };
    const size_t n16 = 0x10000u, nf = (size_t)(0xffffffffull / 997) + 1;
    unsigned short *h = malloc(n16 * sizeof *h), *r = malloc(nf * sizeof *r);
    float *f = malloc(n16 * sizeof *f), *x = malloc(nf * sizeof *x), pool[1];
    if (!h || !r || !f || !x) {
        fail("allocating the generated kernels' buffers", 0, 0, 0);
        free(h), free(r), free(f), free(x);
        return;
    }
    for (size_t i = 0; i < n16; i++)
        h[i] = (unsigned short)i;
    for (size_t i = 0; i < nf; i++)
        x[i] = sgk_f32_of_bits((uint32_t)((uint64_t)i * 997u));
    for (int kind = 0; kind < 2; kind++) {
        sgk_cpu_widen16(1, (int)((n16 + PER - 1) / PER), 1, pool, 0, h, f, (sgk_off)n16, kind, PER);
        for (size_t i = 0; i < n16; i++) {
            const float want = kind ? sgk_f32_from_f16((uint16_t)i) : sgk_f32_from_bf16((uint16_t)i);
            if (sgk_f32_bits(f[i]) != sgk_f32_bits(want))
                fail(kind ? "widen16 (f16) against dtype.h" : "widen16 (bf16) against dtype.h", (uint32_t)i,
                     sgk_f32_bits(f[i]), sgk_f32_bits(want));
        }
        sgk_cpu_narrow16(1, (int)((nf + PER - 1) / PER), 1, pool, 0, x, r, (sgk_off)nf, kind, PER);
        for (size_t i = 0; i < nf; i++) {
            const unsigned want = kind ? sgk_f16_from_f32(x[i]) : sgk_bf16_from_f32(x[i]);
            if (r[i] != want)
                fail(kind ? "narrow16 (f16) against dtype.h" : "narrow16 (bf16) against dtype.h",
                     sgk_f32_bits(x[i]), r[i], want);
        }
    }
    free(h), free(r), free(f), free(x);
}

int main(void)
{
    static ladder l16, lb;
    ladder_f16(&l16);
    ladder_bf16(&lb);
    check_round_trips();
    uint64_t n = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 997, n++)
        check_one(&l16, &lb, (uint32_t)u);
    /* every exact tie and its neighbours, of both dtypes, both signs */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double mid = ((double)sgk_f32_from_f16((uint16_t)h) + l16.v[h + 1]) / 2;
        const uint32_t m = sgk_f32_bits((float)mid);
        for (uint32_t d = 0; d < 3; d++)
            for (uint32_t s = 0; s < 2; s++, n++)
                check_one(&l16, &lb, ((m + d - 1) & 0x7fffffffu) | (s << 31));
    }
    for (uint32_t h = 0; h < 0x7f80u; h++) {
        const uint32_t m = ((uint32_t)h << 16) | 0x8000u; /* exactly between h and h + 1 */
        for (uint32_t d = 0; d < 3; d++)
            for (uint32_t s = 0; s < 2; s++, n++)
                check_one(&l16, &lb, ((m + d - 1) & 0x7fffffffu) | (s << 31));
    }
    const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 5.9604645e-8f,
                           2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 6.1035152e-5f, FLT_MAX,
                           -FLT_MAX, FLT_MIN, 1e-45f, INFINITY, -INFINITY, NAN, -NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++, n++)
        check_one(&l16, &lb, sgk_f32_bits(edges[i]));
    check_generated();
    printf("test_dtype: %llu floats and 65536 patterns of each dtype, %d failures\n",
           (unsigned long long)n, g_failures);
    return g_failures ? 1 : 0;
}
