/* The relation MLP's inner loop alone, two ways: the weights broadcast from
 * shared memory (LDS.128, attn_rows.cuh's sgkc_mlp_regs loop), or the
 * weights as kernel-parameter constants, every loop unrolled so that each
 * weight is a compile-time offset. The question it answers: would constant
 * operands free attn_rows' shared-memory pipe for Q.K and P.V? ptxas keeps
 * them out of the FFMAs (ULDC.64 into uniform registers, then FFMA with a
 * uniform operand), and at P = 32 (5.3 KB of weights) the constant path
 * runs at a fifth of the shared-memory one; at P = 16 it gains 4-9 %.
 * Figures: logs/mlp-const-microbench.txt; dev/NOTES.md, "What limits each
 * preset". Build and run on the H200:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o /tmp/mlp_const mlp_const.cu && /tmp/mlp_const
 */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

template <int P> struct MlpW {
    float w1[P * P]; // [input i][hidden j]
    float b1[P];
    float w2[P * 8]; // [hidden j][head h]
    float b2[8];
};

__device__ __forceinline__ float rcpa(float x) { float y; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ float ex2a(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ float siluu(float u) { return u * rcpa(1.0f + ex2a(u)); }

// MODE 0: smem, the attn_rows loop (hidden units 4 at a time, LDS.128 weights)
template <int P, int NP>
__device__ __forceinline__ void mlp_smem(const float4 (&x)[NP][P / 4], const float *W, float (&acc)[NP][8])
{
    const float *b1s = W + P * P, *W2s = b1s + P;
#pragma unroll
    for (int s = 0; s < NP; s++)
#pragma unroll
        for (int h = 0; h < 8; h++) acc[s][h] = 0.f;
#pragma unroll 1
    for (int j0 = 0; j0 < P; j0 += 4) {
        float hs[NP][4];
        const float4 bj = *reinterpret_cast<const float4 *>(b1s + j0);
#pragma unroll
        for (int s = 0; s < NP; s++) { hs[s][0] = bj.x; hs[s][1] = bj.y; hs[s][2] = bj.z; hs[s][3] = bj.w; }
#pragma unroll
        for (int r4 = 0; r4 < P / 4; r4++) {
            asm volatile("" ::: "memory");
            float4 w[4];
#pragma unroll
            for (int u = 0; u < 4; u++) w[u] = *reinterpret_cast<const float4 *>(W + (4 * r4 + u) * P + j0);
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float xv[4] = {x[s][r4].x, x[s][r4].y, x[s][r4].z, x[s][r4].w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    hs[s][0] = fmaf(xv[u], w[u].x, hs[s][0]);
                    hs[s][1] = fmaf(xv[u], w[u].y, hs[s][1]);
                    hs[s][2] = fmaf(xv[u], w[u].z, hs[s][2]);
                    hs[s][3] = fmaf(xv[u], w[u].w, hs[s][3]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float4 *w2r = reinterpret_cast<const float4 *>(W2s + (j0 + u) * 8);
            const float4 wa = w2r[0], wb = w2r[1];
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float hv = siluu(hs[s][u]);
                acc[s][0] = fmaf(hv, wa.x, acc[s][0]); acc[s][1] = fmaf(hv, wa.y, acc[s][1]);
                acc[s][2] = fmaf(hv, wa.z, acc[s][2]); acc[s][3] = fmaf(hv, wa.w, acc[s][3]);
                acc[s][4] = fmaf(hv, wb.x, acc[s][4]); acc[s][5] = fmaf(hv, wb.y, acc[s][5]);
                acc[s][6] = fmaf(hv, wb.z, acc[s][6]); acc[s][7] = fmaf(hv, wb.w, acc[s][7]);
            }
        }
    }
}

// MODE 1: constants; JC hidden units at a time, every loop unrolled
template <int P, int NP, int JC>
__device__ __forceinline__ void mlp_const(const float4 (&x)[NP][P / 4], const MlpW<P> &W, float (&acc)[NP][8])
{
#pragma unroll
    for (int s = 0; s < NP; s++)
#pragma unroll
        for (int h = 0; h < 8; h++) acc[s][h] = 0.f;
#pragma unroll
    for (int j0 = 0; j0 < P; j0 += JC) {
        float hs[NP][JC];
#pragma unroll
        for (int s = 0; s < NP; s++)
#pragma unroll
            for (int u = 0; u < JC; u++) hs[s][u] = W.b1[j0 + u];
#pragma unroll
        for (int i = 0; i < P; i++) {
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float4 xq = x[s][i / 4];
                const float xv = (i & 3) == 0 ? xq.x : (i & 3) == 1 ? xq.y : (i & 3) == 2 ? xq.z : xq.w;
#pragma unroll
                for (int u = 0; u < JC; u++) hs[s][u] = fmaf(xv, W.w1[i * P + j0 + u], hs[s][u]);
            }
        }
#pragma unroll
        for (int u = 0; u < JC; u++)
#pragma unroll
            for (int s = 0; s < NP; s++) {
                const float hv = siluu(hs[s][u]);
#pragma unroll
                for (int h = 0; h < 8; h++) acc[s][h] = fmaf(hv, W.w2[(j0 + u) * 8 + h], acc[s][h]);
            }
    }
}

template <int P, int NP, int MODE, int JC>
__global__ void __launch_bounds__(256, 2) bench_k(const __grid_constant__ MlpW<P> W, const float *xin, float *out, int iters)
{
    __shared__ __align__(16) float Ws[P * P + P + 8 * P + 8];
    if (MODE == 0) {
        for (int i = threadIdx.x; i < P * P + P + 8 * P + 8; i += 256) Ws[i] = (&W.w1[0])[i];
        __syncthreads();
    }
    const int g = blockIdx.x * 256 + threadIdx.x;
    float4 x[NP][P / 4];
#pragma unroll
    for (int s = 0; s < NP; s++)
#pragma unroll
        for (int r = 0; r < P / 4; r++) x[s][r] = reinterpret_cast<const float4 *>(xin)[(g % 1024) * NP * (P / 4) + s * (P / 4) + r];
    float tot = 0.f;
    for (int it = 0; it < iters; it++) {
        float acc[NP][8];
        if (MODE == 0) mlp_smem<P, NP>(x, Ws, acc);
        else mlp_const<P, NP, JC>(x, W, acc);
#pragma unroll
        for (int s = 0; s < NP; s++) {
            float t = 0.f;
#pragma unroll
            for (int h = 0; h < 8; h++) t += acc[s][h];
            tot += t;
            x[s][0].x += t * 1e-6f;
        }
    }
    out[g] = tot;
}

template <int P, int NP, int MODE, int JC>
void run(const char *name, int iters)
{
    MlpW<P> W;
    srand(1);
    float *wf = &W.w1[0];
    for (size_t i = 0; i < sizeof(W) / 4; i++) wf[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.3f;
    std::vector<float> xh(1024 * NP * P);
    for (auto &v : xh) v = rand() / (float)RAND_MAX - 0.5f;
    float *xd, *od;
    const int blocks = 132 * 2, nt = blocks * 256;
    CK(cudaMalloc(&xd, xh.size() * 4));
    CK(cudaMalloc(&od, nt * 4));
    CK(cudaMemcpy(xd, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    bench_k<P, NP, MODE, JC><<<blocks, 256>>>(W, xd, od, iters);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0));
        bench_k<P, NP, MODE, JC><<<blocks, 256>>>(W, xd, od, iters);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    std::vector<float> oh(nt);
    CK(cudaMemcpy(oh.data(), od, nt * 4, cudaMemcpyDeviceToHost));
    double cs = 0; for (float v : oh) cs += v;
    const double fma = (double)nt * iters * NP * (P * P + 8 * P);
    printf("%-24s P=%2d NP=%d JC=%2d  %8.1f us  %6.2f TFLOP/s  (%5.1f %% of 66.9)  checksum %.6e\n", name, P, NP, JC,
           best * 1e3, 2 * fma / (best * 1e-3) / 1e12, 100 * 2 * fma / (best * 1e-3) / 66.9e12, cs);
    CK(cudaFree(xd)); CK(cudaFree(od));
}

int main()
{
    const int it = 256;
    run<32, 2, 0, 4>("smem LDS.128", it);
    run<32, 2, 1, 4>("const JC=4", it);
    run<32, 2, 1, 8>("const JC=8", it);
    run<32, 2, 1, 16>("const JC=16", it);
    run<16, 2, 0, 4>("smem LDS.128", it);
    run<16, 2, 1, 4>("const JC=4", it);
    run<16, 2, 1, 8>("const JC=8", it);
    run<16, 2, 1, 16>("const JC=16", it);
    run<32, 4, 1, 8>("const NP=4 JC=8", it);
    run<16, 4, 1, 8>("const NP=4 JC=8", it);
    return 0;
}
