/* Throughput probes behind mlp_dmma.cuh: DMMA (mma.sync .f64) in two shapes,
 * f32 <-> f64 conversions, MUFU.EX2, FFMA, and mixes of them, in results an
 * SM-clock, on 4, 8 and 16 warps an SM. On the H200: DMMA 128 fp64
 * FMAs an SM-clock in either shape; conversions 15 and ex2 16, and the two
 * together take the sum of their times (one pipe); DMMA beside FFMA keeps
 * 107 of its 128. Mode 8 and gemm_loop ask the same of
 * DMMA beside conversions (127 of 128 at 8 warps an SM, 98 at 4) and of
 * gemm_dmma.cuh's inner loop alone (115 at 8 warps an SM in one block,
 * 131 with a barrier every two k-steps in two blocks of 4, 80 at 4).
 *   nvcc -O3 -arch=sm_90 -o mma_probe mma_probe.cu && ./mma_probe
 */
#include <cstdio>
#include <cuda_runtime.h>
#define IT 2048
__device__ float sinkf[1 << 20];
__device__ double sinkd[1 << 20];

__device__ __forceinline__ void mma16816(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                 "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
}
__device__ __forceinline__ void mma884(double (&d)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
               : "+d"(d[0]), "+d"(d[1]) : "d"(a), "d"(b));
}
__device__ __forceinline__ double cvt_d(float f) { double d; asm volatile("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(f)); return d; }
__device__ __forceinline__ float cvt_f(double d) { float f; asm volatile("cvt.rn.f32.f64 %0, %1;" : "=f"(f) : "d"(d)); return f; }
__device__ __forceinline__ float ex2(float x) { float y; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }

template <int MODE> __global__ void __launch_bounds__(512) probe(long long *cyc, float seed) {
  const int lane = threadIdx.x & 31;
  double a[8], b[4], d0[4] = {}, d1[4] = {}, d2[4] = {}, d3[4] = {};
  for (int i = 0; i < 8; i++) a[i] = seed * (lane + i);
  for (int i = 0; i < 4; i++) b[i] = seed * (lane - i);
  float f[8];
  for (int i = 0; i < 8; i++) f[i] = seed * (lane + 3 * i);
  double dd[8];
  float acc[8] = {};
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < IT; it++) {
    if (MODE == 0 || MODE == 3) { // 4 independent m16n8k16
      mma16816(d0, a, b); mma16816(d1, a, b); mma16816(d2, a, b); mma16816(d3, a, b);
    }
    if (MODE == 1) { // 8 independent m8n8k4
      mma884(*(double(*)[2])&d0[0], a[0], b[0]); mma884(*(double(*)[2])&d0[2], a[1], b[1]);
      mma884(*(double(*)[2])&d1[0], a[2], b[2]); mma884(*(double(*)[2])&d1[2], a[3], b[3]);
      mma884(*(double(*)[2])&d2[0], a[4], b[0]); mma884(*(double(*)[2])&d2[2], a[5], b[1]);
      mma884(*(double(*)[2])&d3[0], a[6], b[2]); mma884(*(double(*)[2])&d3[2], a[7], b[3]);
    }
    if (MODE == 8) { // 4 independent m16n8k16 beside the conversions below
      mma16816(d0, a, b); mma16816(d1, a, b); mma16816(d2, a, b); mma16816(d3, a, b);
    }
    if (MODE == 2 || MODE == 5 || MODE == 6 || MODE == 8) { // 8 f32->f64 and 8 f64->f32
#pragma unroll
      for (int i = 0; i < 8; i++) dd[i] = cvt_d(f[i]);
#pragma unroll
      for (int i = 0; i < 8; i++) f[i] = cvt_f(dd[i]);
    }
    if (MODE == 3 || MODE == 4 || MODE == 5) { // 64 FFMA
#pragma unroll
      for (int r = 0; r < 8; r++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] = fmaf(f[i], acc[i], f[(i + r) & 7]);
    }
    if (MODE == 6 || MODE == 7) { // 8 MUFU.EX2
#pragma unroll
      for (int i = 0; i < 8; i++) f[i] = ex2(f[i]);
    }
  }
  long long t1 = clock64();
  if (lane == 0) cyc[blockIdx.x * 16 + threadIdx.x / 32] = t1 - t0;
  double s = d0[0] + d1[1] + d2[2] + d3[3];
  float fs = 0;
  for (int i = 0; i < 8; i++) fs += f[i] + acc[i];
  sinkd[blockIdx.x * 512 + threadIdx.x] = s;
  sinkf[blockIdx.x * 512 + threadIdx.x] = fs;
}

/* gemm_dmma.cuh's inner loop alone (no barriers, no copies): a warp's 32 x 32
 * tile, per k-step of 16 four A and four W loads of 16 bytes, 32 f32 -> f64
 * conversions and 8 m16n8k16. G = 0: that loop; 1: fragments stored as fp64
 * (eight A and eight W loads of 16 bytes, no conversions); 2: the loads and
 * conversions of G = 0 without the DMMAs (their operands summed instead);
 * 3: G = 0 with a block barrier every two k-steps, as gemm_dmma's slices. */
template <int G> __global__ void __launch_bounds__(256) gemm_loop(long long *cyc, float seed) {
  extern __shared__ __align__(16) float sm[];
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) sm[i] = seed * (i & 255);
  __syncthreads();
  double acc[2][4][4] = {};
  double s = 0;
  long long t0 = clock64();
  for (int it = 0; it < IT / 4; it++) {
    const int k = (it * 16 + w * 48) & 255; /* rows of 272 floats (A) and 48 (W), as gemm_dmma */
    double af[2][8];
    double2 bf[4][2];
    if (G != 1) {
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const float4 v = *reinterpret_cast<const float4 *>(sm + ((16 * mt + 8 * r + g) * 272 + 4 * t + k) % 8192);
          af[mt][r] = v.x; af[mt][2 + r] = v.y; af[mt][4 + r] = v.z; af[mt][6 + r] = v.w;
        }
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const float4 v = *reinterpret_cast<const float4 *>(sm + 4096 + ((8 * nt + g) * 48 + 4 * t + (k & 31)) % 4096);
        bf[nt][0] = make_double2(v.x, v.y); bf[nt][1] = make_double2(v.z, v.w);
      }
    } else {
      const double *smd = reinterpret_cast<const double *>(sm);
#pragma unroll
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const double2 v = *reinterpret_cast<const double2 *>(smd + ((16 * mt + 8 * r + g) * 264 + 4 * t + 2 * h + k) % 2048);
            af[mt][4 * h + r] = v.x; af[mt][4 * h + 2 + r] = v.y;
          }
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
          bf[nt][h] = *reinterpret_cast<const double2 *>(smd + 2048 + ((8 * nt + g) * 40 + 4 * t + 2 * h + (k & 31)) % 2048);
    }
    if (G == 3 && (it & 1))
      __syncthreads();
    if (G == 2) {
#pragma unroll /* 32 independent adds, not one chain */
      for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[mt][i & 3][i >> 2] += af[mt][i];
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        acc[0][nt][2] += bf[nt][0].x; acc[0][nt][3] += bf[nt][0].y; acc[1][nt][2] += bf[nt][1].x; acc[1][nt][3] += bf[nt][1].y;
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          double b[4] = {bf[nt][0].x, bf[nt][0].y, bf[nt][1].x, bf[nt][1].y};
          mma16816(acc[mt][nt], af[mt], b);
        }
    }
  }
  long long t1 = clock64();
  if (lane == 0) cyc[blockIdx.x * 16 + w] = t1 - t0;
  for (int mt = 0; mt < 2; mt++)
    for (int nt = 0; nt < 4; nt++) s += acc[mt][nt][0] + acc[mt][nt][3];
  sinkd[blockIdx.x * 512 + threadIdx.x] = s;
}

template <int G> void run_gemm(const char *name, int warps, int blocks_per_sm = 1) {
  long long *cyc; cudaMalloc(&cyc, 132 * 2 * 16 * sizeof(long long));
  cudaFuncSetAttribute(gemm_loop<G>, cudaFuncAttributeMaxDynamicSharedMemorySize, 32768);
  const int nb = 132 * blocks_per_sm, nt = warps / blocks_per_sm * 32;
  gemm_loop<G><<<nb, nt, 32768>>>(cyc, 1e-3f);
  gemm_loop<G><<<nb, nt, 32768>>>(cyc, 1e-3f);
  cudaDeviceSynchronize();
  static long long h[132 * 2 * 16]; cudaMemcpy(h, cyc, sizeof h, cudaMemcpyDeviceToHost);
  long long mx = 0; for (int i = 0; i < warps / blocks_per_sm; i++) mx = h[i] > mx ? h[i] : mx;
  const double dmma_fma = 8 * 2048.0 * (IT / 4) * warps / (double)mx;
  printf("%-34s warps/SM %2d in %d blocks: %8.1f DMMA-FMA-equivalent per SM-clock (peak 128), %7.1f cycles a k-step a warp (%s)\n",
         name, warps, blocks_per_sm, dmma_fma, (double)mx / (IT / 4), cudaGetErrorString(cudaGetLastError()));
  cudaFree(cyc);
}

template <int MODE> void run(const char *name, int warps, double per_it_ops, const char *unit) {
  long long *cyc; cudaMalloc(&cyc, 132 * 16 * sizeof(long long));
  probe<MODE><<<132, warps * 32>>>(cyc, 1e-3f);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0);
  probe<MODE><<<132, warps * 32>>>(cyc, 1e-3f);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  long long h[132 * 16]; cudaMemcpy(h, cyc, sizeof h, cudaMemcpyDeviceToHost);
  long long mx = 0; for (int i = 0; i < warps; i++) mx = h[i] > mx ? h[i] : mx;
  double per_sm_clk = per_it_ops * IT * warps / (double)mx;
  printf("%-34s warps/SM %2d: %8.1f %s per SM-clock, %7.1f cycles/iter/warp, %.3f ms (err %s)\n", name, warps, per_sm_clk,
         unit, (double)mx / IT, ms, cudaGetErrorString(cudaGetLastError()));
  cudaFree(cyc);
}

int main() {
  for (int w : {4, 8, 16}) {
    run<0>("DMMA m16n8k16 x4 (fp64 FMA)", w, 4 * 2048.0, "FMA");
    run<1>("DMMA m8n8k4 x8 (fp64 FMA)", w, 8 * 256.0, "FMA");
    run<2>("cvt f32->f64 + f64->f32 (16)", w, 16 * 32.0, "cvt");
    run<4>("FFMA x64", w, 64 * 32.0, "FFMA");
    run<7>("MUFU.EX2 x8", w, 8 * 32.0, "ex2");
    run<3>("DMMA x4 + FFMA x64: DMMA FMA", w, 4 * 2048.0, "FMA");
    run<5>("cvt 16 + FFMA 64: cvt", w, 16 * 32.0, "cvt");
    run<6>("cvt 16 + EX2 8: cvt", w, 16 * 32.0, "cvt");
    run<8>("DMMA x4 + cvt 16: DMMA FMA", w, 4 * 2048.0, "FMA");
    run<2>("  (cvt 16 alone, for the sum)", w, 16 * 32.0, "cvt");
  }
  for (int w : {4, 8}) { /* gemm_dmma runs 8 warps an SM */
    run_gemm<0>("gemm loop: fp32 + cvt + DMMA", w);
    run_gemm<1>("gemm loop: fp64 frags + DMMA", w);
    run_gemm<2>("gemm loop: fp32 + cvt, no DMMA", w);
  }
  run_gemm<0>("gemm loop: fp32 + cvt + DMMA", 8, 2);
  run_gemm<3>("gemm loop + barrier each 2 k-steps", 8, 2);
  run_gemm<3>("gemm loop + barrier each 2 k-steps", 8, 1);
  return 0;
}
