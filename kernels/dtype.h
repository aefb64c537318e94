/* Conversions between float and the 16-bit dtypes sgk_dtype names
 * (SGK_DTYPE_BF16, SGK_DTYPE_F16), for host code and the C target: what a
 * backend without such arithmetic converts on load and store. Plain C99
 * (also valid C++ and CUDA host code), no dependence on the compiler's own
 * half types, so that every backend rounds alike.
 *
 * float -> 16 bits rounds to nearest, ties to even, as PyTorch's .to()
 * does: past the largest finite value it gives inf (f16 past 65504 + half
 * an ulp; bf16 only at float's own overflow), below the smallest it gives
 * subnormals and then a signed zero (f16; bf16 keeps float's exponent range
 * and its subnormals). NaN stays NaN, quiet, with its sign. 16 bits ->
 * float is exact. */
#ifndef SGK_KERNELS_DTYPE_H
#define SGK_KERNELS_DTYPE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t sgk_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float sgk_f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float sgk_f32_from_bf16(uint16_t h)
{
    return sgk_f32_of_bits((uint32_t)h << 16);
}

static inline uint16_t sgk_bf16_from_f32(float f)
{
    const uint32_t u = sgk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, set the quiet bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* round the low 16 bits to nearest, ties to the even result; a carry
     * into the exponent is the right answer (up to inf) */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float sgk_f32_from_f16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf, NaN (payload kept, quiet bit set as float conversion does) */
        return sgk_f32_of_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
    if (exp != 0)
        return sgk_f32_of_bits(sign | ((exp + 112u) << 23) | (man << 13));
    /* zero and subnormals: man * 2^-24, exact in float */
    const float m = (float)man * 5.9604644775390625e-8f;
    return sgk_f32_of_bits(sign | sgk_f32_bits(m));
}

static inline uint16_t sgk_f16_from_f32(float f)
{
    const uint32_t u = sgk_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: the top payload bits, quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up (65504 + half an ulp rounds away): inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* 2^-14 and up: normal */
        const uint32_t r = a - 0x38000000u; /* exponent rebased by 127 - 15, in place */
        return (uint16_t)(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a < 0x33000000u) /* below 2^-25 (half the smallest subnormal, or less): zero */
        return sign;
    /* subnormal: the 24-bit significand shifted so that its unit is 2^-24,
     * rounded to nearest even; a carry to 0x400 is the smallest normal */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; /* 14 .. 24 */
    const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return (uint16_t)(sign | (q + (rem > half || (rem == half && (q & 1u)))));
}

#endif
