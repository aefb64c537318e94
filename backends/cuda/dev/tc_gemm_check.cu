/* Validate-then-time harness for tc_gemm.cuh and wg_gemm.cuh (standalone,
 * needs a GPU of compute capability 9.0):
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I backends/cuda \
 *       backends/cuda/dev/tc_gemm_check.cu -o /tmp/tcg
 *   /tmp/tcg [seed [check]]      (check: validate, do not time)
 *
 * Each case (M, Nc, K, LN, RES) runs through tc_gemm.cuh's two tile
 * instances and its dispatcher ("auto"), and wg_gemm.cuh (LayerNorm
 * statistics in a pass of their own, as the layer runs it) at the block
 * width and split over k the layer picks ("wg"), at each of its four
 * widths ("wg64", "wg128", "wg192", "wg256") and split over k in clusters of 2, 4
 * and 8 ("wgk2", "wgk4", "wgk8"; "n/a" where it does not take the case,
 * with its weights prepared once a case), and as 16-bit layers run it: the
 * LayerNorm GEMM in one TF32 pass ("wg1pass"), the residual GEMM on bf16
 * and f16 operands at the layer's choice ("wgbf16", "wgf16") and bf16 at
 * each width and split ("b64" .. "b256", "bk2" .. "bk8"), held to looser
 * tolerances (below): C is poisoned with NaN first,
 * then every element must be written and finite, and the checked rows (all
 * of them, or the first and last tiles' rows plus 64 random ones when M is
 * large) must be within relative L2 1e-5 and max abs 1e-4 of a double
 * reference. Then each is timed with events around 20 launches back to
 * back (3 warm-ups, median of 15). Exit status 1 on any failure. */
#include "tc_gemm.cuh"
#include "wg_gemm.cuh"
#include "dev_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


struct tc_case {
    int M, Nc, K;
    bool ln, res, adv; /* adv: LayerNorm rows with means 1e3..1e4 and spread 1e-2 */
    int offset;        /* floats added to A's and C's base (0: aligned; 1: the 4-byte copy path) */
    const char *name;
};

static const tc_case cases[] = {
    {2048, 768, 256, true, false, false, 0, "mid qkv"},
    {4096, 768, 256, true, false, false, 0, "qkv M=4096"},
    {2048, 256, 256, false, true, false, 0, "mid out"},
    {4096, 256, 256, false, true, false, 0, "large out"},
    {1400, 1152, 384, true, false, false, 0, "s08 qkv"},
    {1400, 384, 384, false, true, false, 0, "s08 out"},
    {1536, 2304, 768, true, false, false, 0, "s13 qkv"},
    {1536, 768, 768, false, true, false, 0, "s13 out"},
    {600, 3072, 1024, true, false, false, 0, "s12 qkv"},
    {600, 1024, 1024, false, true, false, 0, "s12 out"},
    {100, 1536, 512, true, false, false, 0, "s02 qkv"},
    {96, 288, 96, true, false, false, 0, "seed qkv"},
    {96, 96, 96, false, true, false, 0, "seed out"},
    {37, 300, 100, true, false, false, 0, "odd qkv"},
    {37, 100, 100, false, true, false, 0, "odd out"},
    {5, 3, 7, true, false, false, 0, "tiny ln"},
    {5, 3, 7, false, true, false, 0, "tiny res"},
    {1280, 960, 320, true, false, false, 0, "s05 qkv"},
    {1280, 960, 320, false, false, false, 0, "plain"},
    {2048, 768, 256, true, false, true, 0, "adversarial ln"},
    {37, 300, 100, true, false, true, 0, "adversarial odd"},
    {300, 200, 98, true, true, false, 1, "unaligned ln+res"},
    {130, 70, 33, true, false, false, 0, "K=33 ln"},
    {200, 130, 250, false, false, false, 1, "unaligned plain"},
};

static uint64_t rng_state;
static double urand_pm() /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef cudaError_t (*launch_fn)(const sgkc_tc_gemm_args &, cudaStream_t);
static int g_sms, g_cc;
static cudaError_t launch_large(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    sgkc_tc_gemm_args one = g;
    one.ksplit = 1;
    return sgkc_tc_gemm_launch<SGKC_TC_LARGE>(one, false, s);
}
static cudaError_t launch_small(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    sgkc_tc_gemm_args one = g;
    one.ksplit = 1;
    return sgkc_tc_gemm_launch<SGKC_TC_SMALL>(one, false, s);
}
/* the dispatcher: the tile and the split over k that the layer would use */
static cudaError_t launch_auto(const sgkc_tc_gemm_args &g, cudaStream_t s) { return sgkc_tc_gemm(g, g_sms, g_cc, s); }
/* the same in one TF32 pass, as 16-bit layers run it */
static cudaError_t launch_auto1(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    sgkc_tc_gemm_args one = g;
    one.one_pass = 1;
    return sgkc_tc_gemm(one, g_sms, g_cc, s);
}
/* wg_gemm.cuh's weights for the case at hand, one set an arithmetic
 * (SGKC_WG_X3, _BF16, _F16) */
static float *g_wprep[3];
static sgkc_wg_weights g_w[3];
static bool g_wg_takes;
static cudaError_t launch_wg_bn(const sgkc_tc_gemm_args &g, int bn, cudaStream_t s, int ks = 1, int ar = SGKC_WG_X3)
{
    /* 16-bit layers: one TF32 pass with LayerNorm, 16-bit operands with the residual */
    const bool fits = ar == SGKC_WG_X3 || (ar == SGKC_WG_TF32) == (g.gamma != nullptr);
    return g_wg_takes && fits ? sgkc_wg_gemm(g, g_w[ar == SGKC_WG_TF32 ? 0 : ar], bn, ks, ar, false, s)
                              : cudaErrorNotSupported;
}
/* the layer's choice of block width and split over k */
static cudaError_t launch_wg_picked(const sgkc_tc_gemm_args &g, cudaStream_t s, int ar)
{
    const int ks = sgkc_wg_ks(g.M, g.Nc, g.K, g_sms);
    return launch_wg_bn(g, ks > 1 ? 128 : sgkc_wg_bn(g.M, g.Nc, g_sms, g.gamma != nullptr), s, ks, ar);
}
static cudaError_t launch_wg(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_picked(g, s, SGKC_WG_X3); }
static cudaError_t launch_wg1(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return launch_wg_picked(g, s, SGKC_WG_TF32);
}
static cudaError_t launch_wgb(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return launch_wg_picked(g, s, SGKC_WG_BF16);
}
static cudaError_t launch_wgh(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_picked(g, s, SGKC_WG_F16); }
/* 128 x 128 tiles split over k in clusters of 2, 4, 8 where k-tiles allow */
static cudaError_t launch_wg_k2(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 128, s, 2); }
static cudaError_t launch_wg_k4(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return g.K > 3 * SGKC_WG_BK ? launch_wg_bn(g, 128, s, 4) : cudaErrorNotSupported;
}
static cudaError_t launch_wg_k8(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return g.K > 7 * SGKC_WG_BK ? launch_wg_bn(g, 128, s, 8) : cudaErrorNotSupported;
}
/* the same on bf16 operands, whose k-tiles are 64 */
static cudaError_t launch_b_k2(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return g.K > 64 ? launch_wg_bn(g, 128, s, 2, SGKC_WG_BF16) : cudaErrorNotSupported;
}
static cudaError_t launch_b_k4(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return g.K > 3 * 64 ? launch_wg_bn(g, 128, s, 4, SGKC_WG_BF16) : cudaErrorNotSupported;
}
static cudaError_t launch_b_k8(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return g.K > 7 * 64 ? launch_wg_bn(g, 128, s, 8, SGKC_WG_BF16) : cudaErrorNotSupported;
}
static cudaError_t launch_b64(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 64, s, 1, SGKC_WG_BF16); }
static cudaError_t launch_b128(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return launch_wg_bn(g, 128, s, 1, SGKC_WG_BF16);
}
static cudaError_t launch_b192(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return launch_wg_bn(g, 192, s, 1, SGKC_WG_BF16);
}
static cudaError_t launch_b256(const sgkc_tc_gemm_args &g, cudaStream_t s)
{
    return launch_wg_bn(g, 256, s, 1, SGKC_WG_BF16);
}
static cudaError_t launch_wg64(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 64, s); }
static cudaError_t launch_wg128(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 128, s); }
static cudaError_t launch_wg192(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 192, s); }
static cudaError_t launch_wg256(const sgkc_tc_gemm_args &g, cudaStream_t s) { return launch_wg_bn(g, 256, s); }

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0); /* each row kept if a candidate hangs and the run is stopped */
    CK(sgkc_tc_gemm_prepare());
    CK(sgkc_wg_gemm_prepare());
    const unsigned long long seed = argc > 1 ? strtoull(argv[1], nullptr, 0) : 20250601ull;
    const bool timed = !(argc > 2 && !strcmp(argv[2], "check")); /* "check": validate only (compute-sanitizer) */
    printf("seed %llu\n", seed);
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&g_cc, cudaDevAttrComputeCapabilityMajor, 0));
    /* rtol: the fp32 contract's relative L2 (and max abs 1e-4), or
     * relative L2 alone for 16-bit layers' arithmetic against the float
     * problem: one TF32 pass 1e-3 (11 bits), f16 operands 2e-3 (A and W
     * rounded to 11 bits), bf16 1e-2 (8 bits; the 16-bit contract). The
     * one-pass rows take LayerNorm cases, the 16-bit rows residual ones. */
    const struct { launch_fn fn; const char *name; double rtol; } insts[] = {
        {launch_large, "128x128", 1e-5}, {launch_small, "64x64", 1e-5}, {launch_auto, "auto", 1e-5},
        {launch_auto1, "auto1pass", 1e-3},
        {launch_wg, "wg", 1e-5},         {launch_wg64, "wg64", 1e-5},   {launch_wg128, "wg128", 1e-5},
        {launch_wg192, "wg192", 1e-5},   {launch_wg256, "wg256", 1e-5}, {launch_wg_k2, "wgk2", 1e-5},
        {launch_wg_k4, "wgk4", 1e-5},    {launch_wg_k8, "wgk8", 1e-5},  {launch_wg1, "wg1pass", 1e-3},
        {launch_wgb, "wgbf16", 1e-2},
        {launch_wgh, "wgf16", 2e-3},     {launch_b64, "b64", 1e-2},     {launch_b128, "b128", 1e-2},
        {launch_b192, "b192", 1e-2},     {launch_b256, "b256", 1e-2},   {launch_b_k2, "bk2", 1e-2},
        {launch_b_k4, "bk4", 1e-2},      {launch_b_k8, "bk8", 1e-2}};
    int fails = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%-18s %5s %5s %5s %-7s %9s %9s %9s %9s %6s\n", "case", "M", "Nc", "K", "tile", "relL2", "maxabs",
           "us", "TFLOP/s", "%FMA");
    for (const tc_case &c : cases) {
        rng_state = seed ^ ((uint64_t)c.M * 1000003u + (uint64_t)c.Nc * 1009u + (uint64_t)c.K + (c.adv ? 7 : 0));
        const size_t M = c.M, Nc = c.Nc, K = c.K;
        std::vector<float> A(M * K), W(Nc * K), gam(K), bet(K), R(M * Nc), C(M * Nc);
        for (size_t i = 0; i < M; i++) {
            const double mu = c.adv ? 1e3 + 9e3 * (0.5 + 0.5 * urand_pm()) : 0.0, sp = c.adv ? 1e-2 : 1.0;
            for (size_t k = 0; k < K; k++)
                A[i * K + k] = (float)(mu + sp * urand_pm());
        }
        for (auto &w : W)
            w = (float)(urand_pm() / std::sqrt((double)K));
        for (size_t k = 0; k < K; k++) {
            gam[k] = (float)(1.0 + 0.2 * urand_pm());
            bet[k] = (float)(0.2 * urand_pm());
        }
        for (auto &r : R)
            r = (float)urand_pm();
        const int hd = 32;
        const int scale_cols = c.ln ? std::min<int>(c.K, c.Nc) : 0;
        const float scale = (float)(1.0 / std::sqrt((double)hd));

        /* the checked rows: all, or the first and last 128 plus 64 random */
        std::vector<size_t> rows;
        if (M <= 320) {
            for (size_t i = 0; i < M; i++)
                rows.push_back(i);
        } else {
            for (size_t i = 0; i < 128; i++)
                rows.push_back(i), rows.push_back(M - 1 - i);
            for (int i = 0; i < 64; i++)
                rows.push_back(128 + (size_t)((0.5 + 0.5 * urand_pm()) * (double)(M - 256)));
        }
        std::vector<double> ref(rows.size() * Nc), xr(K);
        for (size_t ri = 0; ri < rows.size(); ri++) {
            const size_t i = rows[ri];
            for (size_t k = 0; k < K; k++)
                xr[k] = A[i * K + k];
            if (c.ln) {
                double mu = 0, var = 0;
                for (size_t k = 0; k < K; k++)
                    mu += xr[k];
                mu /= (double)K;
                for (size_t k = 0; k < K; k++)
                    var += (xr[k] - mu) * (xr[k] - mu);
                const double rs = 1.0 / std::sqrt(var / (double)K + 1e-5);
                for (size_t k = 0; k < K; k++)
                    xr[k] = (xr[k] - mu) * rs * gam[k] + bet[k];
            }
            for (size_t n = 0; n < Nc; n++) {
                double s = 0;
                for (size_t k = 0; k < K; k++)
                    s += xr[k] * (double)W[n * K + k];
                if ((int)n < scale_cols)
                    s *= (double)scale;
                if (c.res)
                    s += R[i * Nc + n];
                ref[ri * Nc + n] = s;
            }
        }

        float *dA, *dW, *dg, *db, *dR, *dC;
        const size_t off = c.offset;
        CK(cudaMalloc(&dA, (M * K + off) * 4));
        CK(cudaMalloc(&dW, Nc * K * 4));
        CK(cudaMalloc(&dg, K * 4));
        CK(cudaMalloc(&db, K * 4));
        CK(cudaMalloc(&dR, (M * Nc + off) * 4));
        CK(cudaMalloc(&dC, (M * Nc + off) * 4));
        CK(cudaMemcpy(dA + off, A.data(), M * K * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dW, W.data(), Nc * K * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dg, gam.data(), K * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, bet.data(), K * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dR + off, R.data(), M * Nc * 4, cudaMemcpyHostToDevice));
        sgkc_tc_gemm_args g = {};
        g.A = dA + off;
        g.W = dW;
        g.C = dC + off;
        g.M = c.M;
        g.Nc = c.Nc;
        g.K = c.K;
        g.gamma = c.ln ? dg : nullptr;
        g.beta = c.ln ? db : nullptr;
        g.eps = 1e-5f;
        g.residual = c.res ? dR + off : nullptr;
        g.scale_cols = scale_cols;
        g.scale = scale;
        if (!sgkc_tc_gemm_fits(g)) {
            printf("%-18s does not fit\n", c.name);
            fails++;
            continue;
        }
        g_wprep[0] = g_wprep[1] = g_wprep[2] = nullptr;
        float *stats;
        CK(cudaMalloc(&stats, sgkc_ln_stats_floats(c.M) * 4));
        g.ln_stats = c.ln ? stats : nullptr; /* wg_gemm.cuh's scratch; tc_gemm.cuh ignores it */
        g_wg_takes = sgkc_wg_takes(g) && sgkc_wg_encoder();
        if (g_wg_takes) {
            CK(cudaMalloc(&g_wprep[0], sgkc_wg_floats(c.Nc, c.K) * 4));
            CK(sgkc_wg_prep(g.W, g.gamma, g.beta, c.Nc, c.K, g_wprep[0], 0));
            g_w[0] = sgkc_wg_weights_at(g_wprep[0], c.Nc, c.K);
            for (int ar = 1; ar <= 2; ar++) { /* W rounded to the operand type */
                CK(cudaMalloc(&g_wprep[ar], sgkc_wg_floats(c.Nc, c.K, true) * 4));
                CK(sgkc_wg_prep16(g.W, c.Nc, c.K, ar == SGKC_WG_F16, g_wprep[ar], 0));
                g_w[ar] = sgkc_wg_weights_at(g_wprep[ar], c.Nc, c.K, true);
            }
            CK(cudaDeviceSynchronize());
        }
        for (const auto &in : insts) {
            CK(cudaMemset(dC, 0xff, (M * Nc + off) * 4)); /* NaN */
            const cudaError_t le = in.fn(g, 0);
            if (le == cudaErrorNotSupported) {
                printf("%-18s %5d %5d %5d %-7s n/a\n", c.name, c.M, c.Nc, c.K, in.name);
                continue;
            }
            CK(le);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(C.data(), dC + off, M * Nc * 4, cudaMemcpyDeviceToHost));
            size_t unwritten = 0;
            for (float v : C)
                unwritten += !std::isfinite(v);
            double e2 = 0, r2 = 0, emax = 0;
            for (size_t ri = 0; ri < rows.size(); ri++)
                for (size_t n = 0; n < Nc; n++) {
                    const double d = (double)C[rows[ri] * Nc + n] - ref[ri * Nc + n];
                    e2 += d * d;
                    r2 += ref[ri * Nc + n] * ref[ri * Nc + n];
                    emax = std::max(emax, std::fabs(d));
                }
            const double rel = std::sqrt(e2 / (r2 > 0 ? r2 : 1));
            const bool ok = unwritten == 0 && rel <= in.rtol && (in.rtol > 1e-5 || emax <= 1e-4) && std::isfinite(rel);
            std::vector<float> ts(1, 0.0f);
            for (int it = 0; timed && it < 18; it++) {
                if (it == 0)
                    ts.clear();
                CK(cudaEventRecord(e0));
                for (int rep = 0; rep < 20; rep++)
                    CK(in.fn(g, 0));
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (it >= 3)
                    ts.push_back(ms);
            }
            std::sort(ts.begin(), ts.end());
            const double us = 1e3 * ts[ts.size() / 2] / 20, tf = 2.0 * M * Nc * K / (us * 1e-6) / 1e12;
            printf("%-18s %5d %5d %5d %-7s %9.2e %9.2e %9.2f %9.2f %5.0f%% %s", c.name, c.M, c.Nc, c.K, in.name, rel,
                   emax, us, tf, 100.0 * tf / 67.0, ok ? "ok" : "FAIL");
            if (unwritten)
                printf(" (%zu elements not written or not finite)", unwritten);
            printf("\n");
            fails += !ok;
        }
        CK(cudaFree(dA));
        CK(cudaFree(dW));
        CK(cudaFree(dg));
        CK(cudaFree(db));
        CK(cudaFree(dR));
        CK(cudaFree(dC));
        for (float *w : g_wprep)
            CK(cudaFree(w));
        CK(cudaFree(stats));
    }
    printf("%s: %d failure(s); FP32 FMA peak 67 TFLOP/s\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
