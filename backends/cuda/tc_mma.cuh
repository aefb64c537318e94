/* Tensor-core primitives for fp32 work on compute capability 8.0+: the
 * 3xTF32 split, the m16n8k8 TF32 MMA, and cp.async copies that zero-fill
 * what lies outside the source (the plain copies are kernel_common.cuh's).
 *
 * 3xTF32: x = big + small, big = x rounded to TF32 (10 explicit mantissa
 * bits), small = x - big (exact in fp32); a product is taken as
 * big*big + big*small + small*big with fp32 accumulation. The tensor core
 * reads only the top 19 bits of a TF32 operand register, so small enters
 * truncated: |small| <= 2^-11 |x| and its truncation costs at most 2^-10 of
 * that, and the dropped small*small term is below 2^-22 |a b|, so a product
 * keeps about 21 bits, with errors that are unbiased (big is rounded, so
 * small's sign is not tied to x's). */
#ifndef SGK_CUDA_TC_MMA_CUH
#define SGK_CUDA_TC_MMA_CUH

#include "kernel_common.cuh"

/* big: x rounded to nearest TF32 (ties away), in two integer instructions;
 * cvt.rna.tf32.f32 takes four (it also guards inf and NaN, which need no
 * guard here: inf stays inf, and a NaN that the add carries into the sign
 * still leaves small = NaN, so the product stays NaN). */
__device__ __forceinline__ void sgkc_split_tf32(float x, uint32_t &big, uint32_t &small)
{
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

/* c += a * b, one m16n8k8 tile: lane (g, t) = (lane / 4, lane % 4) holds
 * a = {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]}, b = {B[t][g], B[t+4][g]}
 * and c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}. */
__device__ __forceinline__ void sgkc_mma_tf32_16x8x8(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The same split for operands that may hold inf (pair features, whose
 * relation MLP must give inf where the math does): small = 0 where big is
 * not finite, so inf * w stays inf instead of becoming inf - inf. */
__device__ __forceinline__ void sgkc_split_tf32_inf(float x, uint32_t &big, uint32_t &small)
{
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = (big & 0x7f800000u) == 0x7f800000u ? 0u : __float_as_uint(x - __uint_as_float(big));
}

/* x rounded to the nearest TF32 for a product in one pass. The integer
 * rounding of the splits carries a NaN whose top mantissa bits are all set
 * (the NaN arithmetic makes, 0x7fffffff) into the sign, leaving -0 or +0:
 * harmless in 3xTF32, whose small half is then NaN, but a finite value
 * where one pass has no small half. cvt.rna keeps NaN and inf. */
__device__ __forceinline__ uint32_t sgkc_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* The split a product at a layer's precision takes (sgkc_mma_x): X3, the
 * TF32 halves (INF: sgkc_split_tf32_inf's, else sgkc_split_tf32's); else x
 * rounded by sgkc_tf32 and no small half. */
template <bool X3, bool INF = true>
__device__ __forceinline__ void sgkc_split_x(float x, uint32_t &big, uint32_t &small)
{
    if constexpr (!X3) {
        big = sgkc_tf32(x);
        small = 0u;
    } else if constexpr (INF) {
        sgkc_split_tf32_inf(x, big, small);
    } else {
        sgkc_split_tf32(x, big, small);
    }
}

/* 3xTF32: c += ah bh + ah bl + al bh, the small products first. */
__device__ __forceinline__ void sgkc_mma3_tf32(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                               const uint32_t (&bh)[2], const uint32_t (&bl)[2])
{
    sgkc_mma_tf32_16x8x8(c, al, bh);
    sgkc_mma_tf32_16x8x8(c, ah, bl);
    sgkc_mma_tf32_16x8x8(c, ah, bh);
}

/* c += a b at a layer's precision: X3, 3xTF32 (the fp32 contract); else
 * one TF32 pass on the big halves (16-bit layers, whose data carry fewer
 * bits than TF32 keeps; computed operands rounded by sgkc_split_x); the
 * small halves are then dead code. */
template <bool X3>
__device__ __forceinline__ void sgkc_mma_x(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                           const uint32_t (&bh)[2], const uint32_t (&bl)[2])
{
    if constexpr (X3)
        sgkc_mma3_tf32(c, ah, al, bh, bl);
    else
        sgkc_mma_tf32_16x8x8(c, ah, bh);
}

/* cp.async of 16 (or 4) bytes of which the first `bytes` are read from gmem
 * and the rest of the destination is zeroed; bytes = 0 reads nothing (gmem
 * must still be a valid address). */
__device__ __forceinline__ void sgkc_cp_async16_zfill(void *smem, const void *gmem, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void sgkc_cp_async4_zfill(void *smem, const void *gmem, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}

#endif
