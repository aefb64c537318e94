/* What the dev programs share: a CUDA error check that exits, one random
 * stream (xorshift64: uniform in (0, 1), normal by Box-Muller), and the
 * median time of a launch in microseconds by events. Each dev program is
 * its own executable, so the state below is its own. */
#ifndef SGK_CUDA_DEV_COMMON_H
#define SGK_CUDA_DEV_COMMON_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand()
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((g_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float nrand()
{
    return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()));
}

/* a float rounded to bf16 (bf) or f16, as its 16 bits; and 16 bits widened
 * back (NaN and Inf kept) */
static uint16_t dev_bits16(float x, bool bf)
{
    return bf ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
}
static float dev_widen16(uint16_t h, bool bf)
{
    return bf ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
}

/* got (floats, all expected finite) against a double reference: relative
 * L2, max abs and the count of non-finite elements. */
struct dev_error {
    double rel_l2, max_abs;
    size_t nonfinite;
};
static dev_error compare(const float *got, const double *ref, size_t n)
{
    double e2 = 0, r2 = 0, mx = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(got[i])) {
            bad++;
            continue;
        }
        const double d = got[i] - ref[i];
        e2 += d * d;
        r2 += ref[i] * ref[i];
        mx = std::max(mx, fabs(d));
    }
    return {sqrt(e2 / std::max(r2, 1e-300)), mx, bad};
}

/* Median over 15 timed runs (after 3 warm-ups) of launch() on the default stream, in µs. */
template <typename F>
static float median_us(F launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r < 18; r++) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3)
            ts.push_back(ms * 1000.0f);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

#endif
