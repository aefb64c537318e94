/* Hopper's warpgroup MMA (wgmma, sm_90a) as wg_gemm.cuh and mlp_wg.cuh
 * use it: TF32 (or, for 16-bit layers' projections, bf16 or f16) products
 * of an A from registers (m16n8k8's or m16n8k16's fragment layout, warp w
 * of the warpgroup holding rows 16 w .. 16 w + 15) and a K-major B in
 * 128-byte-swizzled shared memory, into fp32 accumulators; the fences,
 * commits and waits around them. The MMA forms exist only in sm_90a code
 * (__CUDA_ARCH_FEAT_SM90_ALL). */
#ifndef SGK_CUDA_WG_MMA_CUH
#define SGK_CUDA_WG_MMA_CUH

#include <stdint.h>

/* Shared-memory matrix descriptor of a K-major tile in 128-byte-swizzled
 * rows: start address >> 4 (bits 0-13), leading byte offset (unused with
 * this swizzle, 1), stride byte offset 1024 >> 4 between groups of 8 rows
 * (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63). p is the tile's
 * first row (1 KB aligned) plus 32 bytes a k-step. */
__device__ __forceinline__ uint64_t sgkc_wg_desc(const float *p)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((s & 0x3ffffu) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d += A B^T over one k-step of 8: A 64 x 8 from registers (a), B N x 8
 * K-major from shared memory (descriptor db), d the warpgroup's 64 x N
 * fp32 accumulators (N / 2 a thread) */
__device__ __forceinline__ void sgkc_wg_mma_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* The forms of N 16 to 256, one asm statement each, as macros over the
 * instruction (OP) and what follows its scale operands (TAIL: 16-bit
 * operands take B's transpose flag, 0 for K-major), so that the TF32 and
 * the 16-bit forms share their operand lists: accumulators d[0 .. R - 1]
 * as operands %0 .. %R-1 (in blocks of 8), then A's four registers and
 * B's descriptor. */
#define SGKC_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define SGKC_WG_R1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define SGKC_WG_R2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define SGKC_WG_R3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define SGKC_WG_R4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define SGKC_WG_R5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define SGKC_WG_R6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define SGKC_WG_R7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define SGKC_WG_R8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define SGKC_WG_R9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define SGKC_WG_R10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define SGKC_WG_R11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define SGKC_WG_R12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define SGKC_WG_R13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define SGKC_WG_R14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define SGKC_WG_R15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define SGKC_WG_D8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define SGKC_WG_D32(b) SGKC_WG_D8(b), SGKC_WG_D8(b + 8), SGKC_WG_D8(b + 16), SGKC_WG_D8(b + 24)
#define SGKC_WG_R32(a, b, c, e) SGKC_WG_R##a ", " SGKC_WG_R##b ", " SGKC_WG_R##c ", " SGKC_WG_R##e
#define SGKC_WG_AB : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
#define SGKC_WG_ASM64(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R32(0, 1, 2, 3) "}, {%32, %33, %34, %35}, %36, 1, 1, 1" TAIL ";\n" \
                 : SGKC_WG_D32(0) SGKC_WG_AB)
#define SGKC_WG_ASM128(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R32(0, 1, 2, 3) ", " SGKC_WG_R32(4, 5, 6, 7) "}, {%64, %65, %66, %67}, %68, 1, 1, 1" TAIL ";\n" \
                 : SGKC_WG_D32(0), SGKC_WG_D32(32) SGKC_WG_AB)
#define SGKC_WG_ASM192(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R32(0, 1, 2, 3) ", " SGKC_WG_R32(4, 5, 6, 7) ", " SGKC_WG_R32(8, 9, 10, 11) "}, {%96, %97, %98, %99}, %100, 1, 1, 1" TAIL ";\n" \
                 : SGKC_WG_D32(0), SGKC_WG_D32(32), SGKC_WG_D32(64) SGKC_WG_AB)
#define SGKC_WG_ASM256(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R32(0, 1, 2, 3) ", " SGKC_WG_R32(4, 5, 6, 7) ", " SGKC_WG_R32(8, 9, 10, 11) ", " SGKC_WG_R32(12, 13, 14, 15) "}, {%128, %129, %130, %131}, %132, 1, 1, 1" TAIL ";\n" \
                 : SGKC_WG_D32(0), SGKC_WG_D32(32), SGKC_WG_D32(64), SGKC_WG_D32(96) SGKC_WG_AB)

#define SGKC_WG_ASM16(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R0 "}, {%8, %9, %10, %11}, %12, 1, 1, 1" TAIL ";\n" : SGKC_WG_D8(0) SGKC_WG_AB)
#define SGKC_WG_ASM32(OP, TAIL) \
    asm volatile(OP " {" SGKC_WG_R0 ", " SGKC_WG_R1 "}, {%16, %17, %18, %19}, %20, 1, 1, 1" TAIL ";\n" \
                 : SGKC_WG_D8(0), SGKC_WG_D8(8) SGKC_WG_AB)

__device__ __forceinline__ void sgkc_wg_mma_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM16("wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32", "");
}

__device__ __forceinline__ void sgkc_wg_mma_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM32("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32", "");
}

__device__ __forceinline__ void sgkc_wg_mma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", "");
}

__device__ __forceinline__ void sgkc_wg_mma_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM128("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "");
}

__device__ __forceinline__ void sgkc_wg_mma_n192(float (&d)[96], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM192("wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32", "");
}

__device__ __forceinline__ void sgkc_wg_mma_n256(float (&d)[128], const uint32_t (&a)[4], uint64_t db)
{
    SGKC_WG_ASM256("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", "");
}

/* the form for R accumulators a thread: m64n(2R)k8 */
template <int R>
__device__ __forceinline__ void sgkc_wg_mma(float (&d)[R], const uint32_t (&a)[4], uint64_t db)
{
    static_assert(R == 4 || R == 8 || R == 16 || R == 32 || R == 64 || R == 96 || R == 128, "an N wgmma takes");
    if constexpr (R == 4)
        sgkc_wg_mma_n8(d, a, db);
    else if constexpr (R == 8)
        sgkc_wg_mma_n16(d, a, db);
    else if constexpr (R == 16)
        sgkc_wg_mma_n32(d, a, db);
    else if constexpr (R == 32)
        sgkc_wg_mma_n64(d, a, db);
    else if constexpr (R == 64)
        sgkc_wg_mma_n128(d, a, db);
    else if constexpr (R == 96)
        sgkc_wg_mma_n192(d, a, db);
    else
        sgkc_wg_mma_n256(d, a, db);
}

__device__ __forceinline__ void sgkc_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void sgkc_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void sgkc_wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* keeps the compiler from moving accesses of the accumulators, or of a
 * fragment, across an MMA that is still in flight */
template <int R>
__device__ __forceinline__ void sgkc_wg_hold(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void sgkc_wg_hold4(uint32_t (&a)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        asm volatile("" : "+r"(a[i])::"memory");
}

/* One k-step in 3xTF32, issued as a group: d += small(a) big(B) +
 * big(a) small(B) + big(a) big(B), with B's halves in shared memory at big
 * and small and a's in ah, al (made since the last fence). */
template <int R>
__device__ __forceinline__ void sgkc_wg_step3(float (&d)[R], uint32_t (&ah)[4], uint32_t (&al)[4], const float *big,
                                              const float *small)
{
    sgkc_wg_fence();
    sgkc_wg_hold(d);
    sgkc_wg_hold4(ah);
    sgkc_wg_hold4(al);
    const uint64_t bb = sgkc_wg_desc(big), bl = sgkc_wg_desc(small);
    sgkc_wg_mma<R>(d, al, bb);
    sgkc_wg_mma<R>(d, ah, bl);
    sgkc_wg_mma<R>(d, ah, bb);
    sgkc_wg_commit();
}

/* m64n(2R)k16 with 16-bit operands (F16: f16, else bf16), fp32
 * accumulators: A 64 x 16 from registers (a lane's a[0..3] hold rows g,
 * g + 8 at k 2t, 2t + 1, then rows g, g + 8 at k 2t + 8, 2t + 9, two
 * elements a register, the lower k in the low half), B N x 16 K-major in
 * 128-byte-swizzled shared memory */
template <int R, bool F16>
__device__ __forceinline__ void sgkc_wg_mma16(float (&d)[R], const uint32_t (&a)[4], uint64_t db)
{
    static_assert(R == 32 || R == 64 || R == 96 || R == 128, "an N the 16-bit forms have");
    if constexpr (R == 32) {
        if constexpr (F16)
            SGKC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", ", 0");
        else
            SGKC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", ", 0");
    } else if constexpr (R == 64) {
        if constexpr (F16)
            SGKC_WG_ASM128("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", ", 0");
        else
            SGKC_WG_ASM128("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 0");
    } else if constexpr (R == 96) {
        if constexpr (F16)
            SGKC_WG_ASM192("wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16", ", 0");
        else
            SGKC_WG_ASM192("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16", ", 0");
    } else {
        if constexpr (F16)
            SGKC_WG_ASM256("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", ", 0");
        else
            SGKC_WG_ASM256("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 0");
    }
}

/* Two k-steps issued as one group, d += a0 B0 + a1 B1 (B's k-steps at b0
 * and b1): in one TF32 pass on B's big parts (W16 false; 16-bit layers,
 * whose contract a TF32 product keeps: their operands carry 8 or 11 bits,
 * TF32 11), or k-steps of 16 on 16-bit operands (F16: f16, else bf16).
 * ptxas serializes a group of one wgmma whose A comes from registers
 * (C7513). */
template <int R, bool W16, bool F16>
__device__ __forceinline__ void sgkc_wg_step2(float (&d)[R], uint32_t (&a0)[4], uint32_t (&a1)[4], const float *b0,
                                              const float *b1)
{
    sgkc_wg_fence();
    sgkc_wg_hold(d);
    sgkc_wg_hold4(a0);
    sgkc_wg_hold4(a1);
    if constexpr (W16) {
        sgkc_wg_mma16<R, F16>(d, a0, sgkc_wg_desc(b0));
        sgkc_wg_mma16<R, F16>(d, a1, sgkc_wg_desc(b1));
    } else {
        sgkc_wg_mma<R>(d, a0, sgkc_wg_desc(b0));
        sgkc_wg_mma<R>(d, a1, sgkc_wg_desc(b1));
    }
    sgkc_wg_commit();
}
#endif

#endif
