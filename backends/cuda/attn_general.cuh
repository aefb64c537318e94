/* The general attention kernel: any D, any H dividing D, any P, any N that
 * fits one block's shared memory per key chunk. One block per (batch, query
 * row). Slow but simple; it is the path for shapes the tuned kernels do not
 * take (head dim over 256, H over what the tiled kernel keeps in registers,
 * P over 128, odd widths) and the oracle the tuned kernels are compared with
 * in the dev harness. Reads q/k/v from the workspace written by the Q/K/V
 * projection and writes ctx there for the output projection. */
#ifndef SGK_CUDA_ATTN_GENERAL_CUH
#define SGK_CUDA_ATTN_GENERAL_CUH

#include "kernel_common.cuh"

#define SGKC_AG_NT 128

struct sgkc_gen_args {
    const float *qkv; /* (B*N, 3D), q pre-scaled */
    const float *pair;
    const void *mask;
    int mask_u8;
    const float *w1, *b1, *w2t, *b2;
    float *ctx; /* (B*N, D) */
    int N, D, H, P, hd;
    int KC; /* keys per chunk */
};

__host__ __device__ inline size_t sgkc_ag_smem_floats(int D, int H, int P, int KC)
{
    return 2u * (size_t)D + (size_t)H * KC + (size_t)KC * P + 3u * (size_t)H;
}

__global__ void __launch_bounds__(SGKC_AG_NT) sgkc_attn_general_kernel(sgkc_gen_args a)
{
    extern __shared__ float smem[];
    const int N = a.N, D = a.D, H = a.H, P = a.P, hd = a.hd, KC = a.KC;
    const int64_t b = blockIdx.x / N;
    const int i = blockIdx.x % N;
    const int tid = threadIdx.x;

    float *qs = smem, *acc = qs + D, *S = acc + D, *hid = S + (size_t)H * KC;
    float *Ms = hid + (size_t)KC * P, *Ls = Ms + H, *Al = Ls + H;

    const size_t row3 = 3 * (size_t)D;
    const float *qkv_b = a.qkv + (size_t)b * N * row3;
    const size_t mrow = ((size_t)b * N + i) * N; /* mask / pair row of query i */

    for (int d = tid; d < D; d += SGKC_AG_NT) {
        qs[d] = __ldg(qkv_b + (size_t)i * row3 + d);
        acc[d] = 0.0f;
    }
    for (int h = tid; h < H; h += SGKC_AG_NT) {
        Ms[h] = SGKC_NEG_INF;
        Ls[h] = 0.0f;
    }
    __syncthreads();

    for (int j0 = 0; j0 < N; j0 += KC) {
        const int kc = min(KC, N - j0);

        for (int e = tid; e < kc * P; e += SGKC_AG_NT) {
            const int jj = e / P, p = e % P;
            float hv = 0.0f;
            if (sgkc_edge(a.mask, a.mask_u8, mrow + j0 + jj)) {
                const float *x = a.pair + (mrow + j0 + jj) * P;
                const float *w = a.w1 + (size_t)p * P;
                float t = __ldg(a.b1 + p);
                for (int r = 0; r < P; r++)
                    t = fmaf(__ldg(w + r), __ldg(x + r), t);
                hv = sgkc_silu(t);
            }
            hid[e] = hv;
        }
        __syncthreads();

        for (int e = tid; e < H * kc; e += SGKC_AG_NT) {
            const int h = e / kc, jj = e % kc;
            float s = SGKC_NEG_INF;
            if (sgkc_edge(a.mask, a.mask_u8, mrow + j0 + jj)) {
                float bias = 0.0f;
                for (int p = 0; p < P; p++)
                    bias = fmaf(__ldg(a.w2t + (size_t)p * H + h), hid[jj * P + p], bias);
                bias += __ldg(a.b2 + h);
                const float *k = qkv_b + (size_t)(j0 + jj) * row3 + D + (size_t)h * hd;
                float qk = 0.0f;
                for (int d = 0; d < hd; d++)
                    qk = fmaf(qs[h * hd + d], __ldg(k + d), qk);
                s = bias + qk;
            }
            S[h * KC + jj] = s;
        }
        __syncthreads();

        for (int h = tid; h < H; h += SGKC_AG_NT) {
            float tmax = SGKC_NEG_INF;
            for (int jj = 0; jj < kc; jj++)
                tmax = fmaxf(tmax, S[h * KC + jj]);
            const float m_old = Ms[h], m_new = fmaxf(m_old, tmax);
            const float m_use = m_new == SGKC_NEG_INF ? 0.0f : m_new;
            const float alpha = expf(m_old - m_use);
            float l = Ls[h] * alpha;
            for (int jj = 0; jj < kc; jj++) {
                const float p = expf(S[h * KC + jj] - m_use);
                S[h * KC + jj] = p;
                l += p;
            }
            Ms[h] = m_new;
            Ls[h] = l;
            Al[h] = alpha;
        }
        __syncthreads();

        /* V comes straight from global memory here, so every term takes the
         * guarded form: a key of weight 0 adds nothing, even a NaN. */
        for (int d = tid; d < D; d += SGKC_AG_NT) {
            const int h = d / hd;
            float o = acc[d] * Al[h];
            const float *v = qkv_b + (size_t)j0 * row3 + 2 * (size_t)D + d;
            for (int jj = 0; jj < kc; jj++)
                o = sgkc_pv<true>(S[h * KC + jj], __ldg(v + (size_t)jj * row3), o);
            acc[d] = o;
        }
        __syncthreads();
    }

    float *dst = a.ctx + ((size_t)b * N + i) * D;
    for (int d = tid; d < D; d += SGKC_AG_NT) {
        const float l = Ls[d / hd];
        dst[d] = l == 0.0f ? 0.0f : acc[d] / l;
    }
}

#endif
