/* tuned-fused-small's traffic between the shared memories of a cluster: bulk
 * copies from global memory, the mbarriers that count their bytes and the
 * pushes into other blocks, and the waits for them (fused_small.cuh). */
#ifndef SGK_CUDA_FUSED_CLUSTER_CUH
#define SGK_CUDA_FUSED_CLUSTER_CUH

#include "kernel_common.cuh"

/* One bulk copy (the copy engine moves the whole span: one instruction
 * from one thread instead of a cp.async per 16 bytes from every thread)
 * and the mbarrier that counts its bytes. src, dst and bytes are multiples
 * of 16. */
__device__ __forceinline__ unsigned sgkc_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
/* This thread's arrival on bar, which then also waits for `bytes` more;
 * or, !ARRIVE, only the wait for more bytes (a copy before the one that
 * arrives). */
template <bool ARRIVE = true>
__device__ __forceinline__ void sgkc_mbar_expect(unsigned long long *bar, unsigned bytes)
{
    if constexpr (ARRIVE)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sgkc_smem_addr(bar)), "r"(bytes)
                     : "memory");
    else
        asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(sgkc_smem_addr(bar)), "r"(bytes)
                     : "memory");
}
template <bool ARRIVE = true>
__device__ __forceinline__ void sgkc_bulk_load(void *dst, const void *src, unsigned bytes, unsigned long long *bar)
{
    sgkc_mbar_expect<ARRIVE>(bar, bytes);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     sgkc_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(sgkc_smem_addr(bar))
                 : "memory");
}
/* Waits for phase `parity` of bar. CLUSTER: other blocks' pushes count on
 * bar (sgkc_push1/4), and acquire at cluster scope makes their data
 * visible here; otherwise only this block's bulk copies do. */
#define SGKC_TRY_WAIT(sem)                                                                             \
    "{\n .reg .pred p;\n mbarrier.try_wait.parity" sem ".shared::cta.b64 p, [%1], %2;\n"               \
    " selp.u32 %0, 1, 0, p;\n}\n"
template <bool CLUSTER = false>
__device__ __forceinline__ void sgkc_mbar_wait(unsigned long long *bar, unsigned parity)
{
    unsigned done = 0;
    do {
        if constexpr (CLUSTER)
            asm volatile(SGKC_TRY_WAIT(".acquire.cluster") : "=r"(done) : "r"(sgkc_smem_addr(bar)), "r"(parity) : "memory");
        else
            asm volatile(SGKC_TRY_WAIT("") : "=r"(done) : "r"(sgkc_smem_addr(bar)), "r"(parity) : "memory");
    } while (!done);
}
#undef SGKC_TRY_WAIT

/* Pushes into another block's shared memory (its rank in the cluster):
 * st.async lands the value and counts its bytes on the receiver's own
 * mbarrier, so the receiver waits for exactly the data it needs
 * (sgkc_mbar_wait<true>) instead of a cluster barrier, whose release
 * compiles to a GPU-scope fence that drains every outstanding remote store
 * (ncu at seed: the two cluster barriers were 3,300 of 15,600 cycles). */
__device__ __forceinline__ unsigned sgkc_cluster_addr(const void *p, int rank)
{
    unsigned r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(sgkc_smem_addr(p)), "r"(rank));
    return r;
}
__device__ __forceinline__ void sgkc_push1(const float *dst, float v, const unsigned long long *bar, int rank)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(
                     sgkc_cluster_addr(dst, rank)),
                 "r"(__float_as_uint(v)), "r"(sgkc_cluster_addr(bar, rank))
                 : "memory");
}
__device__ __forceinline__ void sgkc_push4(const float *dst, float4 v, const unsigned long long *bar, int rank)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                     sgkc_cluster_addr(dst, rank)),
                 "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                 "r"(__float_as_uint(v.w)), "r"(sgkc_cluster_addr(bar, rank))
                 : "memory");
}

#endif
