/* Validate-then-time harness for a candidate small-graph design (standalone,
 * needs a GPU):
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I backends/cuda backends/cuda/dev/tail_check.cu \
 *       -o /tmp/tail_check
 *   /tmp/tail_check [seed]
 *
 * At small graphs the layer's time is the chain of its four or five
 * dependent kernels (DESIGN.md, "Small graphs: tiles are not the
 * limit"), so this kernel is everything after the Q/K/V projection in
 * one launch: a block owns QT query rows of one batch entry and all
 * heads; it runs the relation MLP for its QT x N pairs into a shared
 * bias tile (-inf where the mask has no edge, and no MLP there), then the
 * masked softmax attention of each (row, head) on a warp (keys over
 * lanes, scores in registers), then out = nodes + ctx Wo^T for its rows.
 * All FFMA in fp32: at these sizes the work is latency, not FLOPs.
 *
 * Inputs are what the layer's Q/K/V GEMM leaves: rows of 3D floats (Q
 * already scaled by 1 / sqrt(hd)), plus pair features, an f32 mask, the
 * MLP weights as PyTorch holds them and Wo transposed (in, out). The
 * reference is the same formula in double on the same float inputs. A
 * fully masked row returns its node row bit for bit; a NaN in a masked
 * pair's features or a masked key's V must not reach any output (both
 * are in the cases). out is poisoned with NaN first; every element must be
 * within relative L2 1e-5 and max abs 1e-4 (scaled to the output's
 * largest) of the reference. Then each case is timed with events (3
 * warm-ups, median of 15). Exit status 1 on any failure.
 *
 * Limits of this form: P <= 64, H <= 16, N <= 128, D % 4 == 0, the bias
 * tile H x QT x N within 64 KB. */
#include "dev_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define TAIL_NT 256
#define TAIL_PMAX 64
#define TAIL_HMAX 16
#define TAIL_NMAX 128

struct tail_args {
    const float *qkv;   /* (B N, 3D): q (scaled), k, v */
    const float *pair;  /* (B, N, N, P) */
    const float *mask;  /* (B, N, N), nonzero: edge */
    const float *w1;    /* (P, P) [out][in] */
    const float *b1;    /* (P) */
    const float *w2;    /* (H, P) */
    const float *b2;    /* (H) */
    const float *wo_t;  /* (D in, D out) */
    const float *nodes; /* (B, N, D) */
    float *out;         /* (B, N, D) */
    int B, N, D, H, P, QT;
};

/* shared floats: the Q and ctx tiles, W1, b1, W2, b2, the bias tile, row flags */
static size_t tail_smem_floats(const tail_args &a)
{
    const size_t pp = (size_t)(a.P + 3) / 4 * 4;
    return (size_t)a.P * pp + a.P + (size_t)a.H * a.P + a.H + (size_t)a.H * a.QT * a.N + 2 * (size_t)a.QT * a.D +
           a.QT;
}

__global__ void __launch_bounds__(TAIL_NT) tail_kernel(tail_args a)
{
    extern __shared__ __align__(16) float sm[];
    const int N = a.N, D = a.D, H = a.H, P = a.P, QT = a.QT, hd = D / H, PP = (P + 3) / 4 * 4;
    const int b = blockIdx.y, i0 = blockIdx.x * QT, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rows = min(QT, N - i0);
    /* the float4-read tiles first, each a multiple of 4 floats long (D % 4
     * == 0; W1's rows padded with zeros to PP), so that all stay 16-byte
     * aligned */
    float *Qs = sm, *Cs = Qs + (size_t)QT * D, *W1 = Cs + (size_t)QT * D;
    float *B1 = W1 + P * PP, *W2 = B1 + P, *B2 = W2 + H * P, *bias = B2 + H, *edges = bias + (size_t)H * QT * N;
    const size_t ld = 3 * (size_t)D;
    const float *qkv = a.qkv + (size_t)b * N * ld;

    for (int t = tid; t < P * PP; t += TAIL_NT) {
        const int p = t / PP, r = t % PP;
        W1[t] = r < P ? a.w1[(size_t)p * P + r] : 0.0f;
    }
    for (int t = tid; t < P; t += TAIL_NT)
        B1[t] = a.b1[t];
    for (int t = tid; t < H * P; t += TAIL_NT)
        W2[t] = a.w2[t];
    for (int t = tid; t < H; t += TAIL_NT)
        B2[t] = a.b2[t];
    for (int t = tid; t < QT * D / 4; t += TAIL_NT) {
        const int i = t / (D / 4), c = (t % (D / 4)) * 4;
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < rows)
            q = *reinterpret_cast<const float4 *>(qkv + (size_t)(i0 + i) * ld + c);
        *reinterpret_cast<float4 *>(Qs + (size_t)i * D + c) = q;
    }
    __syncthreads();

    /* the relation MLP of the block's pairs: bias[h][i][j], -inf off the edges */
    for (int t = tid; t < QT * N; t += TAIL_NT) {
        const int i = t / N, j = t % N;
        const size_t pr = ((size_t)b * N + (i0 + i)) * N + j;
        const bool edge = i < rows && a.mask[pr] != 0.0f;
        float acc[TAIL_HMAX];
#pragma unroll
        for (int h = 0; h < TAIL_HMAX; h++)
            acc[h] = 0.0f;
        if (edge) {
            float f[TAIL_PMAX];
            const float *src = a.pair + pr * P;
#pragma unroll
            for (int r = 0; r < TAIL_PMAX; r++)
                f[r] = r < P ? src[r] : 0.0f;
            for (int p = 0; p < P; p++) {
                float s = B1[p];
                const float4 *w = reinterpret_cast<const float4 *>(W1 + p * PP);
#pragma unroll
                for (int r = 0; r < TAIL_PMAX; r += 4)
                    if (r < PP) {
                        const float4 x = w[r / 4];
                        s = fmaf(x.x, f[r], s);
                        s = fmaf(x.y, f[r + 1], s);
                        s = fmaf(x.z, f[r + 2], s);
                        s = fmaf(x.w, f[r + 3], s);
                    }
                const float u = s / (1.0f + expf(-s));
#pragma unroll
                for (int h = 0; h < TAIL_HMAX; h++)
                    if (h < H)
                        acc[h] = fmaf(W2[h * P + p], u, acc[h]);
            }
        }
#pragma unroll
        for (int h = 0; h < TAIL_HMAX; h++)
            if (h < H)
                bias[((size_t)h * QT + i) * N + j] = edge ? acc[h] + B2[h] : -INFINITY;
    }
    __syncthreads();

    /* attention: a warp per (row, head); key j on lane j % 32, slot j / 32 */
    constexpr int JS = TAIL_NMAX / 32;
    for (int w = warp; w < rows * H; w += TAIL_NT / 32) {
        const int i = w / H, h = w % H;
        const float *q = Qs + (size_t)i * D + h * hd, *bi = bias + ((size_t)h * QT + i) * N;
        float s[JS];
        float m = -INFINITY;
#pragma unroll
        for (int js = 0; js < JS; js++) {
            const int j = lane + 32 * js;
            s[js] = -INFINITY;
            if (j < N && bi[j] != -INFINITY) {
                const float *k = qkv + (size_t)j * ld + D + h * hd;
                float d0 = 0.0f;
                if (hd % 4 == 0) { /* rows of 3D floats, D % 4 == 0: 16-byte aligned */
                    for (int d = 0; d < hd; d += 4) {
                        const float4 kv = *reinterpret_cast<const float4 *>(k + d);
                        const float4 qv = *reinterpret_cast<const float4 *>(q + d);
                        d0 = fmaf(qv.x, kv.x, d0);
                        d0 = fmaf(qv.y, kv.y, d0);
                        d0 = fmaf(qv.z, kv.z, d0);
                        d0 = fmaf(qv.w, kv.w, d0);
                    }
                } else {
                    for (int d = 0; d < hd; d++)
                        d0 = fmaf(q[d], k[d], d0);
                }
                s[js] = d0 + bi[j];
                m = fmaxf(m, s[js]);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.0f;
#pragma unroll
        for (int js = 0; js < JS; js++) {
            s[js] = s[js] == -INFINITY ? 0.0f : expf(s[js] - m);
            l += s[js];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            l += __shfl_xor_sync(0xffffffffu, l, o);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        /* P.V, a lane a head column: each key's weight from its lane, all
         * lanes shuffling together; a zero weight (no edge, or one that
         * underflowed) adds nothing, so a masked key's NaN or Inf in V
         * never reaches this row */
        for (int d0 = 0; d0 < hd; d0 += 32) {
            const int d = d0 + lane;
            float c = 0.0f;
#pragma unroll
            for (int js = 0; js < JS; js++) {
                if (32 * js >= N)
                    break;
                for (int jl = 0; jl < 32; jl++) {
                    const int j = 32 * js + jl;
                    const float pj = __shfl_sync(0xffffffffu, s[js], jl);
                    if (j < N && pj != 0.0f && d < hd)
                        c = fmaf(pj, qkv[(size_t)j * ld + 2 * D + h * hd + d], c);
                }
            }
            if (d < hd)
                Cs[(size_t)i * D + h * hd + d] = c * inv;
        }
        /* whether row i has an edge at all (one writer: head 0's warp) */
        if (h == 0) {
            bool has = false;
#pragma unroll
            for (int js = 0; js < JS; js++) {
                const int j = lane + 32 * js;
                has = has || (j < N && bi[j] != -INFINITY);
            }
            has = __any_sync(0xffffffffu, has);
            if (lane == 0)
                edges[i] = has ? 1.0f : 0.0f;
        }
    }
    __syncthreads();

    /* out = nodes + ctx Wo^T; a row without edges returns its node row */
    constexpr int RM = 16;
    for (int c = tid; c < D; c += TAIL_NT) {
        for (int r0 = 0; r0 < rows; r0 += RM) {
            float acc[RM];
#pragma unroll
            for (int r = 0; r < RM; r++)
                acc[r] = 0.0f;
            for (int k = 0; k < D; k += 4) { /* D % 4 == 0 */
                const float w0 = a.wo_t[(size_t)k * D + c], w1 = a.wo_t[(size_t)(k + 1) * D + c];
                const float w2 = a.wo_t[(size_t)(k + 2) * D + c], w3 = a.wo_t[(size_t)(k + 3) * D + c];
#pragma unroll
                for (int r = 0; r < RM; r++)
                    if (r0 + r < rows) {
                        const float4 x = *reinterpret_cast<const float4 *>(Cs + (size_t)(r0 + r) * D + k);
                        acc[r] = fmaf(x.x, w0, acc[r]);
                        acc[r] = fmaf(x.y, w1, acc[r]);
                        acc[r] = fmaf(x.z, w2, acc[r]);
                        acc[r] = fmaf(x.w, w3, acc[r]);
                    }
            }
#pragma unroll
            for (int r = 0; r < RM; r++)
                if (r0 + r < rows) {
                    const size_t o = ((size_t)b * N + i0 + r0 + r) * D + c;
                    a.out[o] = edges[r0 + r] != 0.0f ? a.nodes[o] + acc[r] : a.nodes[o];
                }
        }
    }
}

/* ---- host side ---- */

struct shape {
    const char *name;
    int B, N, D, H, P;
};
static const shape shapes[] = {
    {"s04", 8, 96, 192, 6, 16}, {"s06", 32, 40, 64, 2, 8},    {"s11", 64, 24, 96, 4, 16},
    {"seed", 4, 24, 96, 4, 16}, {"s02", 1, 100, 512, 8, 24},  {"odd", 3, 37, 60, 5, 33},
    {"wide", 2, 64, 768, 12, 32}, {"one", 1, 1, 16, 2, 4},
};

static int pick_qt(const shape &s)
{
    int qt = 16;
    while (qt > 1 && (size_t)s.H * qt * s.N * 4 > 64 * 1024)
        qt /= 2;
    return qt;
}

static double silu_d(double t) { return t / (1.0 + exp(-t)); }

/* the tail in double on the float inputs */
static void reference(const shape &s, const std::vector<float> &qkv, const std::vector<float> &pair,
                      const std::vector<float> &mask, const std::vector<float> &w1, const std::vector<float> &b1,
                      const std::vector<float> &w2, const std::vector<float> &b2, const std::vector<float> &wo_t,
                      const std::vector<float> &nodes, std::vector<double> &out)
{
    const int N = s.N, D = s.D, H = s.H, P = s.P, hd = D / H;
    const size_t ld = 3 * (size_t)D;
    std::vector<double> ctx(D), sc(N), hid(P);
    for (int b = 0; b < s.B; b++)
        for (int i = 0; i < N; i++) {
            bool any = false;
            std::fill(ctx.begin(), ctx.end(), 0.0);
            for (int h = 0; h < H; h++) {
                double m = -INFINITY;
                for (int j = 0; j < N; j++) {
                    const size_t pr = ((size_t)b * N + i) * N + j;
                    sc[j] = -INFINITY;
                    if (mask[pr] == 0.0f)
                        continue;
                    any = true;
                    double bias = b2[h];
                    for (int p = 0; p < P; p++) {
                        double t = b1[p];
                        for (int r = 0; r < P; r++)
                            t += (double)w1[(size_t)p * P + r] * pair[pr * P + r];
                        bias += (double)w2[(size_t)h * P + p] * silu_d(t);
                    }
                    double dot = 0;
                    for (int d = 0; d < hd; d++)
                        dot += (double)qkv[((size_t)b * N + i) * ld + h * hd + d] *
                               qkv[((size_t)b * N + j) * ld + D + h * hd + d];
                    sc[j] = dot + bias;
                    m = std::max(m, sc[j]);
                }
                if (m == -INFINITY)
                    continue;
                double l = 0;
                for (int j = 0; j < N; j++)
                    if (sc[j] != -INFINITY)
                        l += exp(sc[j] - m);
                for (int j = 0; j < N; j++)
                    if (sc[j] != -INFINITY) {
                        const double pj = exp(sc[j] - m) / l;
                        for (int d = 0; d < hd; d++)
                            ctx[h * hd + d] += pj * qkv[((size_t)b * N + j) * ld + 2 * D + h * hd + d];
                    }
            }
            for (int c = 0; c < D; c++) {
                const size_t o = ((size_t)b * N + i) * D + c;
                double acc = 0;
                if (any)
                    for (int k = 0; k < D; k++)
                        acc += ctx[k] * wo_t[(size_t)k * D + c];
                out[o] = nodes[o] + acc;
            }
        }
}

template <typename T>
static T *upload(const std::vector<T> &h)
{
    T *d = nullptr;
    CK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static int run(const shape &s)
{
    const int N = s.N, D = s.D, H = s.H, P = s.P, hd = D / H;
    const size_t BN = (size_t)s.B * N, ld = 3 * (size_t)D, pairs = BN * N;
    std::vector<float> qkv(BN * ld), pair(pairs * P), mask(pairs), w1((size_t)P * P), b1(P), w2((size_t)H * P),
        b2(H), wo_t((size_t)D * D), nodes(BN * D);
    const float qs = 1.0f / sqrtf((float)hd);
    for (size_t r = 0; r < BN; r++)
        for (size_t c = 0; c < ld; c++)
            qkv[r * ld + c] = nrand() * (c < (size_t)D ? qs : 1.0f);
    for (auto &x : pair)
        x = nrand();
    for (auto &x : mask)
        x = urand() < 0.7 ? 1.0f : 0.0f;
    const float s1 = 1.0f / sqrtf((float)P), so = 1.0f / sqrtf((float)D);
    for (auto &x : w1)
        x = nrand() * s1;
    for (auto &x : b1)
        x = 0.1f * nrand();
    for (auto &x : w2)
        x = nrand() * s1;
    for (auto &x : b2)
        x = 0.1f * nrand();
    for (auto &x : wo_t)
        x = nrand() * so;
    for (auto &x : nodes)
        x = nrand();
    /* a fully masked row, and NaN where only masked pairs and keys see it */
    if (N > 2) {
        for (int j = 0; j < N; j++)
            mask[(size_t)1 * N + j] = 0.0f;           /* row 1 of batch 0 attends nothing */
        for (size_t r = 0; r < (size_t)N; r++)
            mask[r * N + (N - 1)] = 0.0f;                 /* nobody in batch 0 attends key N - 1 */
        qkv[(size_t)(N - 1) * ld + 2 * D] = NAN;          /* its V */
        mask[2] = 0.0f;                                   /* pair (0, 0, 2) masked, */
        pair[(size_t)2 * P] = NAN;                        /* its features NaN */
    }
    std::vector<double> ref(BN * D);
    reference(s, qkv, pair, mask, w1, b1, w2, b2, wo_t, nodes, ref);

    tail_args a;
    a.qkv = upload(qkv);
    a.pair = upload(pair);
    a.mask = upload(mask);
    a.w1 = upload(w1);
    a.b1 = upload(b1);
    a.w2 = upload(w2);
    a.b2 = upload(b2);
    a.wo_t = upload(wo_t);
    a.nodes = upload(nodes);
    CK(cudaMalloc(&a.out, BN * D * sizeof(float)));
    a.B = s.B, a.N = N, a.D = D, a.H = H, a.P = P, a.QT = pick_qt(s);
    const size_t smem = tail_smem_floats(a) * sizeof(float);
    CK(cudaFuncSetAttribute(tail_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((N + a.QT - 1) / a.QT), (unsigned)s.B);
    std::vector<float> poison(BN * D, NAN);
    CK(cudaMemcpy(a.out, poison.data(), BN * D * sizeof(float), cudaMemcpyHostToDevice));
    tail_kernel<<<grid, TAIL_NT, smem>>>(a);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> got(BN * D);
    CK(cudaMemcpy(got.data(), a.out, BN * D * sizeof(float), cudaMemcpyDeviceToHost));
    double scale = 0;
    for (double r : ref)
        scale = std::max(scale, fabs(r));
    const dev_error e = compare(got.data(), ref.data(), got.size());
    bool masked_row_exact = true;
    if (N > 2)
        masked_row_exact = memcmp(&got[(size_t)1 * D], &nodes[(size_t)1 * D], D * sizeof(float)) == 0;
    const bool ok = e.nonfinite == 0 && e.rel_l2 <= 1e-5 && e.max_abs <= 1e-4 * std::max(1.0, scale) && masked_row_exact;
    const float us = median_us([&] { tail_kernel<<<grid, TAIL_NT, smem>>>(a); });
    printf("%-6s B %3d N %4d D %4d H %2d P %3d  QT %2d  %4u blocks  %6.1f KB  rel L2 %.1e  max abs %.1e  "
           "non-finite %zu  masked row %s  %s  %8.2f us\n",
           s.name, s.B, N, D, H, P, a.QT, grid.x * grid.y, smem / 1024.0, e.rel_l2, e.max_abs, e.nonfinite,
           masked_row_exact ? "exact" : "DIFFERS", ok ? "ok" : "FAIL", us);
    for (const void *p : {(const void *)a.qkv, (const void *)a.pair, (const void *)a.mask, (const void *)a.w1,
                          (const void *)a.b1, (const void *)a.w2, (const void *)a.b2, (const void *)a.wo_t,
                          (const void *)a.nodes, (const void *)a.out})
        CK(cudaFree(const_cast<void *>(p)));
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    const uint64_t seed = argc > 1 ? strtoull(argv[1], nullptr, 0) : 7;
    g_rng ^= seed * 0x2545f4914f6cdd1dull;
    printf("tail_check: seed %llu\n", (unsigned long long)seed);
    int fails = 0;
    for (const shape &s : shapes)
        fails += run(s);
    printf("tail_check: %d failures\n", fails);
    return fails ? 1 : 0;
}
