/* The relation MLP of attn_rows on the FP64 tensor cores of compute
 * capability 9.x (mma.sync m16n8k16 .f64, SASS DMMA): the tuned-tiled-dmma
 * variant.
 *
 * Why: the MLP is 3,248 of the 5,415 instructions a warp issues per
 * 32-key tile at PCAP 32 and about 1,100 of 3,050 at PCAP 16
 * (counted in the sm_90 SASS). On the H200 one DMMA m16n8k16 does 2,048 fp64 FMAs in
 * one issue slot, at 128 FMAs an SM-clock, the FFMA pipe's rate, on the
 * tensor pipe (dev/mma_probe.cu). What it costs instead is conversions:
 * fp32 <-> fp64 run on the pipe MUFU runs on, 16 results an SM-clock, and
 * each hidden unit takes four there (to fp32, ex2, rcp, back to fp64).
 * So it wins where the MLP is most of the work (P = 32: mid, large) and
 * loses at P = 16 (xl).
 *
 * Exactness: a product of two fp32 values is exact in fp64, the sums are
 * fp64 and the silu scale factors are applied to the weights in fp64, so
 * each pre-activation and each bias is accurate to fp64 before its one
 * rounding to fp32; the FFMA path rounds to fp32 after every FMA. silu
 * is the same fp32 sgkc_silu_u as the FFMA path's. No TF32 or other
 * reduced precision is involved.
 *
 * Layout (m16n8k16 .f64 fragments; lane = 4 g + t):
 *   A (16 x 16): a[2j + s] = A[g + 8s][t + 4j]
 *   B (16 x 8):  b[v]      = B[t + 4v][g]
 *   C (16 x 8):  c[2s + e] = C[g + 8s][2t + e]
 * A group is 16 pairs (rows of A and C). Lane (g, t) loads features
 * 16 ks + 4t .. +3 of pairs g and g + 8 as one float4 each; component j
 * is k-slot t + 4j of k-step ks, so W1 is staged with its inputs in that
 * order and A needs no shuffle. Layer 1's C for n-tile n holds hidden
 * units 8n + 2t + e of the lane's two pairs, which become layer 2's A in
 * k-slots t + 4(2 (n % 2) + e) of k-step n / 2: W2 is staged in that
 * order, and C turns into A in registers. Layer 2's C holds heads
 * 2t + e of pairs g and g + 8. */
#ifndef SGK_CUDA_MLP_DMMA_CUH
#define SGK_CUDA_MLP_DMMA_CUH

#include "attn_tiled.cuh"

/* doubles staged a block: W1 [K1][N1][2][32 lanes][2], W2 [K1][2][32][2]
 * (a lane's b[2h + e] at [h][lane][e], so that each 16-byte load of a
 * fragment is 512 contiguous bytes: 4 wavefronts, not 8), b1 [N1][4 t][2],
 * b2 [4 t][2] (K1 = PCAP / 16 k-steps, N1 = PCAP / 8 n-tiles of hidden
 * units) */
__host__ __device__ constexpr size_t sgkc_dm_doubles(int pcap)
{
    return (size_t)(pcap / 16) * (pcap / 8) * 128 + (size_t)(pcap / 16) * 128 + (pcap / 8) * 8 + 8;
}

/* The fragments above from the layer's fp32 weights, scaled as
 * sgkc_mlp_stage scales them where sgkc_mlp_fold (W1 and b1 by -log2(e),
 * W2 by -ln(2), for sgkc_silu_u), the factors applied in fp64. Inputs
 * and hidden units past P are zero. */
template <int PCAP>
__device__ __forceinline__ void sgkc_dm_stage(double *Wd, const sgkc_attn_args &a, int tid, int nt)
{
    constexpr int K1 = PCAP / 16, N1 = PCAP / 8;
    static_assert(PCAP % 16 == 0, "whole k-steps");
    double *W2d = Wd + K1 * N1 * 128, *b1d = W2d + K1 * 128, *b2d = b1d + N1 * 8;
    const double U = -1.4426950408889634, V = -0.6931471805599453;
    const int P = a.P;
    for (int i = tid; i < K1 * N1 * 128; i += nt) {
        const int v = 2 * ((i >> 6) & 1) + (i & 1), lane = (i >> 1) & 31, f = i >> 7;
        const int j = 8 * (f % N1) + (lane >> 2), r = 16 * (f / N1) + 4 * (lane & 3) + v;
        Wd[i] = j < P && r < P ? (double)__ldg(a.w1 + j * P + r) * U : 0.0;
    }
    for (int i = tid; i < K1 * 128; i += nt) {
        const int v = 2 * ((i >> 6) & 1) + (i & 1), lane = (i >> 1) & 31, ks = i >> 7;
        const int j = 16 * ks + 8 * (v >> 1) + 2 * (lane & 3) + (v & 1);
        W2d[i] = j < P ? (double)__ldg(a.w2t + (size_t)j * a.H + (lane >> 2)) * V : 0.0;
    }
    for (int i = tid; i < N1 * 8; i += nt) /* [n][t][e] is hidden unit 8n + 2t + e = i */
        b1d[i] = i < P ? (double)__ldg(a.b1 + i) * U : 0.0;
    for (int i = tid; i < 8; i += nt)
        b2d[i] = (double)__ldg(a.b2 + i);
}

/* Two doubles of shared memory, loaded where the code says: the compiler
 * kept every group's weight fragments in registers across the groups
 * otherwise, and spilled. */
__device__ __forceinline__ double2 sgkc_lds_d2(const double *p)
{
    double2 v;
    asm volatile("ld.volatile.shared.v2.f64 {%0, %1}, [%2];"
                 : "=d"(v.x), "=d"(v.y)
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}

/* d = a b + c, m16n8k16, fp64. Compiled for compute capability 9.x only;
 * the host launches the kernels that use it on such devices only. */
__device__ __forceinline__ void sgkc_dmma(double (&d)[4], const double (&a)[8], double2 b01, double2 b23,
                                          const double (&c)[4])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, "
        "{%12,%13,%14,%15}, {%16,%17,%18,%19};"
        : "=d"(d[0]), "=d"(d[1]), "=d"(d[2]), "=d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b01.x),
          "d"(b01.y), "d"(b23.x), "d"(b23.y), "d"(c[0]), "d"(c[1]), "d"(c[2]), "d"(c[3]));
#else
    (void)d, (void)a, (void)b01, (void)b23, (void)c;
    __trap();
#endif
}

/* The biases of one group of 16 pairs for the lane's four (pair, head)
 * slots: out[2s + e] = b2[2t + e] + w2[2t + e] . silu(b1 + w1 x) of pair
 * g + 8s, from F[s][ks], the lane's float4 of k-step ks of that pair. */
template <int PCAP>
__device__ __forceinline__ void sgkc_dm_group(const float4 (&F)[2][PCAP / 16], const double *Wd, int lane,
                                              float (&out)[4])
{
    constexpr int K1 = PCAP / 16, N1 = PCAP / 8;
    const double *W2d = Wd + K1 * N1 * 128, *b1d = W2d + K1 * 128, *b2d = b1d + N1 * 8;
    const int t = lane & 3;
    double C1[N1][4];
#pragma unroll
    for (int ks = 0; ks < K1; ks++) {
        double A[8];
#pragma unroll
        for (int s = 0; s < 2; s++) {
            A[s] = F[s][ks].x;
            A[2 + s] = F[s][ks].y;
            A[4 + s] = F[s][ks].z;
            A[6 + s] = F[s][ks].w;
        }
#pragma unroll
        for (int n = 0; n < N1; n++) {
            const double *bp = Wd + (ks * N1 + n) * 128 + 2 * lane;
            if (ks == 0) {
                const double2 bb = sgkc_lds_d2(b1d + n * 8 + 2 * t);
                const double c[4] = {bb.x, bb.y, bb.x, bb.y};
                sgkc_dmma(C1[n], A, sgkc_lds_d2(bp), sgkc_lds_d2(bp + 64), c);
            } else {
                sgkc_dmma(C1[n], A, sgkc_lds_d2(bp), sgkc_lds_d2(bp + 64), C1[n]);
            }
        }
    }
    const double2 bb = sgkc_lds_d2(b2d + 2 * t);
    double C2[4] = {bb.x, bb.y, bb.x, bb.y};
#pragma unroll
    for (int ks = 0; ks < K1; ks++) {
        double A[8];
#pragma unroll
        for (int nl = 0; nl < 2; nl++)
#pragma unroll
            for (int s = 0; s < 2; s++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    A[2 * (2 * nl + e) + s] = sgkc_silu_u(__double2float_rn(C1[2 * ks + nl][2 * s + e]));
        const double *bp = W2d + ks * 128 + 2 * lane;
        sgkc_dmma(C2, A, sgkc_lds_d2(bp), sgkc_lds_d2(bp + 64), C2);
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        out[i] = __double2float_rn(C2[i]);
}

#endif
