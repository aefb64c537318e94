/* The relation MLP's inner loop alone, two ways: the weights broadcast from
 * shared memory (LDS.128, attn_rows' sgkc_mlp_regs), or the weights as
 * kernel-parameter constants (sgkc_mlp_cregs, attn_rows.cuh), every loop
 * unrolled so that each weight is a compile-time offset. The question it
 * answered: would constant operands free attn_rows' shared-memory pipe for
 * Q.K and P.V? ptxas keeps them out of the FFMAs (ULDC.64 into uniform
 * registers, then FFMA with a uniform operand), and at P = 32 (5.3 KB of
 * weights) the constant path ran at a fifth of the shared-memory one; at
 * P = 16 it gained 4-14 % (two runs, before the loop moved into
 * attn_rows.cuh). attn_rows now takes the P = 16 weights this way (xl
 * -5 %, run 87); at P = 32 even part of them as constants was slower (run
 * 88). Figures: logs/mlp-const-microbench.txt; dev/NOTES.md, "What limits
 * each preset". Build and run on the H200:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -I.. -I../../../api -I../../../kernels -Xptxas -v -o /tmp/mlp_const mlp_const.cu && /tmp/mlp_const
 */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "attn_rows.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

template <int P> struct MlpW {
    float w1t[P * P]; /* [input r][hidden j] */
    float b1[P];
    float w2[P * 8]; /* [hidden j][head h] */
    float b2[8];
};

/* MODE 0: the weights copied into shared memory (MlpW's layout is
 * sgkc_mlp_stage's) and sgkc_mlp_regs; MODE 1: sgkc_mlp_cregs on the
 * parameters, JC hidden units a pass. */
template <int P, int NP, int MODE, int JC>
__global__ void __launch_bounds__(256, 2) bench_k(const __grid_constant__ MlpW<P> W, const float *xin, float *out, int iters)
{
    __shared__ __align__(16) float Ws[P * P + P + 8 * P + 8];
    if (MODE == 0) {
        for (int i = threadIdx.x; i < P * P + P + 8 * P + 8; i += 256) Ws[i] = (&W.w1t[0])[i];
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
        float acc[NP][8] = {};
        if (MODE == 0) sgkc_mlp_regs<P, 8, NP>(x, Ws, acc);
        else sgkc_mlp_cregs<P, NP, JC>(x, W, acc);
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
    float *wf = &W.w1t[0];
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
