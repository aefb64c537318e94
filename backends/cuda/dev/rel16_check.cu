/* Validate-then-time harness for attn_rel16.cuh, the relation MLP and the
 * attention of a bf16 or f16 layer in one kernel (standalone, needs a GPU
 * of compute capability 9.0 for the baseline's instances):
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fopenmp \
 *        -I backends/cuda backends/cuda/dev/rel16_check.cu -o /tmp/rel16_check
 *   /tmp/rel16_check [seed] [shape|all] [check]
 * ("check": validate only, no baseline and no timing, for compute-sanitizer)
 *
 * Inputs of each shape: Q (pre-scaled by 1/sqrt(hd)), K and V rows (float
 * rows put into the kernel's 16-bit layout by its pack kernel, whose output
 * and V flags must equal the host's), pair
 * features and the MLP's weights, all rounded to the layer's type; a uint8
 * mask (float at one shape) of density 0.5 with every seventh query row
 * fully masked. ctx is poisoned with NaN before the run and must come out
 * within relative L2 1e-2 of a double reference computed on the rounded
 * values (the 16-bit contract); its error is printed. At the "nonfinite"
 * shapes a V element is +inf and a pair feature NaN (one pair with an edge,
 * one without): every output the reference has non-finite must be
 * non-finite, every other one finite and within the same bound.
 * Then it is timed (events, median of 15) beside what tuned-tiled runs for
 * a 16-bit layer today: mlp_h16.cuh's pass into a float bias and
 * attn_mma.cuh's one-pass instance on float Q/K/V. Exit status 1 on any
 * failure. */
#include "attn_mma.cuh"
#include "attn_rel16.cuh"
#include "dev_common.h"

#include <cstring>
#include <string>

static bool g_check_only = false;
static int g_ks = 0; /* SGK_KS: a fixed key split */

struct shape {
    const char *name;
    int B, N, D, H, P;
    bool bf;
    int nonfinite; /* inject an Inf in V and NaN features */
    int maskf;     /* float mask */
};

static const shape shapes[] = {
    {"mid", 32, 64, 256, 8, 32, true, 0, 0},     {"large", 8, 512, 256, 8, 32, true, 0, 0},
    {"large-f16", 8, 512, 256, 8, 32, false, 0, 0}, {"xl", 2, 2048, 256, 8, 16, true, 0, 0},
    {"s10", 1, 3000, 256, 8, 8, true, 0, 0},     {"s04", 8, 96, 192, 6, 16, true, 0, 1},
    {"s07", 4, 300, 256, 16, 64, true, 0, 0},    {"s14", 6, 512, 128, 8, 4, true, 0, 0},
    {"s05", 16, 80, 320, 5, 48, true, 0, 0},     {"s02", 1, 100, 512, 8, 24, true, 0, 0},
    {"s13", 12, 128, 768, 12, 32, true, 0, 0},   {"s08", 2, 700, 384, 4, 24, true, 0, 0},
    {"s09", 1, 1500, 128, 1, 16, true, 0, 0},    {"s06", 32, 40, 64, 2, 8, true, 0, 0},
    {"s11", 64, 24, 96, 4, 16, true, 0, 0},      {"odd", 3, 37, 30, 5, 33, true, 0, 0},
    {"odd-nonfinite", 3, 37, 30, 5, 33, true, 1, 0}, {"s04-nonfinite-f16", 8, 96, 192, 6, 16, false, 1, 1},
};

static int cap(int x, const int (&c)[4])
{
    for (int v : c)
        if (x <= v)
            return v;
    return -1;
}

struct problem {
    shape s;
    int hd, HDP, PCAP;
    std::vector<uint16_t> qkv16, pair16;
    std::vector<float> qkvf, w1, b1, w2t, b2; /* floats holding 16-bit values */
    std::vector<unsigned char> mask, vrow; /* vrow: a V row holds a NaN or Inf (what the pack kernel flags) */
    std::vector<double> ref;
};

static problem make(const shape &s)
{
    problem p;
    p.s = s;
    p.hd = s.D / s.H;
    p.HDP = cap(p.hd, {16, 32, 64, 128});
    p.PCAP = cap(s.P, {16, 32, 64, 128});
    const bool bf = s.bf;
    const int B = s.B, N = s.N, D = s.D, H = s.H, P = s.P, hd = p.hd, HDP = p.HDP;
    const size_t rows = (size_t)B * N, pairs = rows * N;
    auto r16 = [&](float x) { return dev_widen16(dev_bits16(x, bf), bf); };
    p.qkv16.assign(rows * 3 * H * HDP, 0);
    p.qkvf.assign(rows * 3 * D, 0.0f);
    const float qs = 1.0f / sqrtf((float)hd);
    for (size_t r = 0; r < rows; r++)
        for (int w = 0; w < 3; w++)
            for (int h = 0; h < H; h++)
                for (int c = 0; c < hd; c++) {
                    const float v = r16(nrand() * (w == 0 ? 2.0f * qs : 1.0f));
                    p.qkv16[((r * 3 + w) * H + h) * HDP + c] = dev_bits16(v, bf);
                    p.qkvf[r * 3 * D + w * D + h * hd + c] = v;
                }
    p.pair16.resize(pairs * P);
    for (auto &x : p.pair16)
        x = dev_bits16(nrand(), bf);
    p.w1.resize((size_t)P * P);
    p.b1.resize(P);
    p.w2t.resize((size_t)P * H);
    p.b2.resize(H);
    for (auto &x : p.w1) x = r16(nrand() / sqrtf((float)P));
    for (auto &x : p.b1) x = r16(0.1f * nrand());
    for (auto &x : p.w2t) x = r16(nrand() / sqrtf((float)P));
    for (auto &x : p.b2) x = r16(0.1f * nrand());
    p.mask.resize(pairs);
    for (size_t m = 0; m < pairs; m++) {
        const size_t i = (m / N) % N;
        p.mask[m] = (i % 7 == 3) ? 0 : (urand() < 0.5 ? 1 : 0);
    }
    if (s.nonfinite) {
        /* V of batch 0, key 5, head 0, column 0: +inf; features of an edge (0, 1, 2)
         * and of a non-edge (0, 2, 4): NaN */
        const size_t r = 5;
        p.qkv16[((r * 3 + 2) * H + 0) * HDP + 0] = dev_bits16(INFINITY, bf);
        p.qkvf[r * 3 * D + 2 * D + 0] = INFINITY;
        p.mask[(size_t)1 * N + 2] = 1;
        p.pair16[((size_t)1 * N + 2) * P + 0] = dev_bits16(NAN, bf);
        p.mask[(size_t)2 * N + 4] = 0;
        p.pair16[((size_t)2 * N + 4) * P + 0] = dev_bits16(NAN, bf);
    }
    p.vrow.assign(rows, 0);
    for (size_t r = 0; r < rows; r++)
        for (int e = 0; e < H * HDP; e++)
            if (!std::isfinite(dev_widen16(p.qkv16[(r * 3 + 2) * H * HDP + e], bf)))
                p.vrow[r] = 1;
    /* the double reference on the rounded values */
    p.ref.assign(rows * D, 0.0);
#pragma omp parallel for schedule(dynamic)
    for (long long bi = 0; bi < (long long)rows; bi++) {
        const size_t b = (size_t)bi / N, i = (size_t)bi % N;
        std::vector<double> bias((size_t)N * H), hid(P), sc(N);
        for (int j = 0; j < N; j++) {
            const size_t m = (b * N + i) * N + j;
            if (!p.mask[m])
                continue;
            const uint16_t *f = &p.pair16[m * P];
            for (int u = 0; u < P; u++) {
                double acc = p.b1[u];
                for (int r = 0; r < P; r++)
                    acc += (double)p.w1[(size_t)u * P + r] * dev_widen16(f[r], bf);
                hid[u] = acc / (1.0 + exp(-acc));
            }
            for (int h = 0; h < H; h++) {
                double acc = p.b2[h];
                for (int u = 0; u < P; u++)
                    acc += (double)p.w2t[(size_t)u * H + h] * hid[u];
                bias[(size_t)j * H + h] = acc;
            }
        }
        for (int h = 0; h < H; h++) {
            const float *q = &p.qkvf[(b * N + i) * 3 * D + h * hd];
            double mx = -INFINITY;
            bool any = false;
            for (int j = 0; j < N; j++) {
                if (!p.mask[(b * N + i) * N + j])
                    continue;
                const float *k = &p.qkvf[(b * N + j) * 3 * D + D + h * hd];
                double d = 0;
                for (int c = 0; c < hd; c++)
                    d += (double)q[c] * k[c];
                sc[j] = d + bias[(size_t)j * H + h];
                mx = any ? std::max(mx, sc[j]) : sc[j];
                any = true;
                if (std::isnan(sc[j]))
                    mx = NAN;
            }
            if (!any)
                continue;
            double l = 0;
            for (int j = 0; j < N; j++)
                if (p.mask[(b * N + i) * N + j])
                    l += (sc[j] = exp(sc[j] - mx));
            for (int c = 0; c < hd; c++) {
                double acc = 0;
                for (int j = 0; j < N; j++) {
                    if (!p.mask[(b * N + i) * N + j] || sc[j] == 0.0)
                        continue;
                    acc += sc[j] * p.qkvf[(b * N + j) * 3 * D + 2 * D + h * hd + c];
                }
                p.ref[(b * N + i) * D + h * hd + c] = acc / l;
            }
        }
    }
    return p;
}

struct dev_problem {
    uint16_t *qkv16, *pair16;
    float *qkvf, *w1, *b1, *w2t, *b2, *ctx, *bias, *maskf;
    unsigned char *mask, *vrow;
};

template <typename T>
static T *up(const std::vector<T> &v)
{
    T *d;
    CK(cudaMalloc(&d, v.size() * sizeof(T) + 16));
    CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static bool check(const problem &p, const float *got, const char *what)
{
    const size_t n = p.ref.size();
    double e2 = 0, r2 = 0, mx = 0;
    size_t wrong_class = 0;
    for (size_t i = 0; i < n; i++) {
        const bool rf = std::isfinite(p.ref[i]), gf = std::isfinite(got[i]);
        if (rf != gf) {
            wrong_class++;
            continue;
        }
        if (!rf)
            continue;
        const double d = got[i] - p.ref[i];
        e2 += d * d;
        r2 += p.ref[i] * p.ref[i];
        mx = std::max(mx, fabs(d));
    }
    const double rel = sqrt(e2 / std::max(r2, 1e-300));
    const bool ok = wrong_class == 0 && rel <= 1e-2;
    printf("  %-9s rel L2 %.2e  max abs %.2e  finite/non-finite mismatches %zu  %s\n", what, rel, mx, wrong_class,
           ok ? "ok" : "FAIL");
    return ok;
}

/* one run of go() into ctx poisoned with NaN, checked against the reference */
template <typename F>
static bool validate(const problem &p, const dev_problem &d, F go, const char *what)
{
    const size_t n = (size_t)p.s.B * p.s.N * p.s.D;
    CK(cudaMemset(d.ctx, 0xff, n * 4));
    go();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> got(n);
    CK(cudaMemcpy(got.data(), d.ctx, n * 4, cudaMemcpyDeviceToHost));
    return check(p, got.data(), what);
}

template <int HDP, int WH, int HPW, int PCAP, int HT, bool BF>
static bool run_rel16(const problem &p, const dev_problem &d, float *t_us)
{
    const shape &s = p.s;
    sgkc_ar16_args a{};
    a.qkv16 = d.qkv16;
    a.pair16 = d.pair16;
    a.w1 = d.w1; a.b1 = d.b1; a.w2t = d.w2t; a.b2 = d.b2;
    a.mask = s.maskf ? (const void *)d.maskf : (const void *)d.mask;
    a.mask_u8 = !s.maskf;
    a.ctx = d.ctx;
    a.vrow = d.vrow;
    a.N = s.N; a.D = s.D; a.H = s.H; a.P = s.P; a.hd = p.hd;
    a.qtiles = (s.N + 15) / 16;
    a.pvec = s.P % 4 == 0;
    auto fn = sgkc_attn_rel16_kernel<HDP, WH, HPW, PCAP, HT, BF>;
    const size_t smem = sgkc_ar16_smem(PCAP, HT, s.H, HDP);
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, 32 * WH, smem));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    /* the key split the library's plan would take: enough cluster blocks to
     * fill the slots, up to 8, each the same number of key tiles */
    const int64_t blocks0 = (int64_t)s.B * a.qtiles, slots = (int64_t)sms * per_sm;
    const int ktiles = (s.N + 15) / 16;
    a.ks = 1;
    if (blocks0 < slots) {
        int ks = (int)std::min<int64_t>(std::min<int64_t>((slots + blocks0 - 1) / blocks0, 8), ktiles);
        const int per = (ktiles + ks - 1) / ks;
        a.ks = (ktiles + per - 1) / per;
    }
    if (g_ks > 0)
        a.ks = std::min(g_ks, ktiles);
    const unsigned blocks = (unsigned)(blocks0 * a.ks);
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, fn));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(32 * WH);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = a.ks;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = a.ks > 1 ? 1 : 0;
    auto go = [&] { CK(cudaLaunchKernelEx(&cfg, fn, a)); };
    printf("  rel16 <HDP %d, WH %d, HPW %d, PCAP %d, HT %d>: %u blocks (ks %d), %d an SM, %d registers, "
           "%zu B shared, %d B local\n",
           HDP, WH, HPW, PCAP, HT, blocks, a.ks, per_sm, fa.numRegs, smem, (int)fa.localSizeBytes);
    const bool ok = validate(p, d, go, "rel16");
    if (!g_check_only)
        *t_us = median_us(go);
    return ok;
}

/* what tuned-tiled runs today: mlp_h16's pass, then attn_mma's one-pass instance */
template <int PCAP, int HT, bool BF>
static bool run_base(const problem &p, const dev_problem &d, float *t_us)
{
    const shape &s = p.s;
    sgkc_mlp_args m{};
    m.pair16 = d.pair16;
    m.w1 = d.w1; m.b1 = d.b1; m.w2t = d.w2t; m.b2 = d.b2;
    m.bias = d.bias;
    m.mask = s.maskf ? (const void *)d.maskf : (const void *)d.mask;
    m.mask_u8 = !s.maskf;
    m.M = (int64_t)s.B * s.N * s.N;
    m.NN = (int64_t)s.N * s.N;
    m.P = s.P; m.H = s.H;
    m.pvec = s.P % 4 == 0;
    constexpr int NW = sgkc_mh_nw(PCAP);
    auto mfn = sgkc_mlp_h16_kernel<PCAP, HT, BF>;
    const size_t msmem = sgkc_mh_smem_floats(PCAP, HT) * 4;
    CK(cudaFuncSetAttribute(mfn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)msmem));
    int mper = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&mper, mfn, 32 * NW, msmem));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int64_t tiles = (m.M + 15) / 16;
    const unsigned mblocks = (unsigned)std::min<int64_t>((tiles + NW - 1) / NW, (int64_t)mper * sms);

    sgkc_attn_args a{};
    a.qkv = d.qkvf;
    a.bias = d.bias;
    a.ctx = d.ctx;
    a.N = s.N; a.D = s.D; a.H = s.H; a.P = s.P; a.hd = p.hd;
    a.qvec = s.D % 4 == 0;
    a.ks = 1;
    void (*afn)(sgkc_attn_args);
    int wq, wd, bk;
    if (p.hd <= 16) { afn = sgkc_attn_mma_kernel<16, 4, 1, 32, 4, false>; wq = 4; wd = 1; bk = 32; }
    else if (p.hd <= 32) { afn = sgkc_attn_mma_kernel<32, 4, 1, 32, 4, false>; wq = 4; wd = 1; bk = 32; }
    else if (p.hd <= 64) { afn = sgkc_attn_mma_kernel<64, 4, 1, 32, 3, false>; wq = 4; wd = 1; bk = 32; }
    else if (p.hd == 96) { afn = sgkc_attn_mma_kernel<96, 2, 2, 32, 2, false>; wq = 2; wd = 2; bk = 32; }
    else { afn = sgkc_attn_mma_kernel<128, 2, 4, 16, 0, false>; wq = 2; wd = 4; bk = 16; }
    const int hdp = p.hd <= 16 ? 16 : p.hd <= 32 ? 32 : p.hd <= 64 ? 64 : p.hd == 96 ? 96 : 128;
    const size_t asmem = sgkc_am_smem_floats(hdp, wq, wd, bk) * 4;
    CK(cudaFuncSetAttribute(afn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)asmem));
    a.qtiles = (s.N + 16 * wq - 1) / (16 * wq);
    const unsigned ablocks = (unsigned)(s.B * a.qtiles * s.H);
    auto go = [&] {
        mfn<<<mblocks, 32 * NW, msmem>>>(m);
        afn<<<ablocks, 32 * wq * wd, asmem>>>(a);
    };
    const bool ok = validate(p, d, go, "baseline");
    *t_us = median_us(go);
    return ok;
}

#define REL(HDP, WH, HPW, PCAP, HT)                                                                       \
    if (hdp == HDP && wh == WH && hpw == HPW && pcap == PCAP && ht == HT)                                 \
        return s.bf ? run_rel16<HDP, WH, HPW, PCAP, HT, true>(p, d, t) : run_rel16<HDP, WH, HPW, PCAP, HT, false>(p, d, t);

/* the instance a shape takes: eight warps, one or two heads a warp */
static bool dispatch(const problem &p, const dev_problem &d, float *t)
{
    const shape &s = p.s;
    const int hdp = p.HDP, pcap = p.PCAP, ht = s.H <= 8 ? 1 : 2, wh = 8, hpw = ht;
    REL(32, 8, 1, 32, 1) REL(32, 8, 1, 16, 1) REL(16, 8, 2, 64, 2) REL(16, 8, 1, 16, 1) REL(16, 8, 1, 64, 1)
    REL(64, 8, 1, 64, 1) REL(64, 8, 1, 32, 1) REL(64, 8, 2, 32, 2) REL(128, 8, 1, 32, 1) REL(128, 8, 1, 16, 1)
    printf("  no instance for HDP %d WH %d HPW %d PCAP %d HT %d\n", hdp, wh, hpw, pcap, ht);
    return false;
}
static bool dispatch_base(const problem &p, const dev_problem &d, float *t)
{
    const int ht = p.s.H <= 8 ? 1 : 2;
    switch (p.PCAP * 10 + ht) {
    case 161: return p.s.bf ? run_base<16, 1, true>(p, d, t) : run_base<16, 1, false>(p, d, t);
    case 321: return p.s.bf ? run_base<32, 1, true>(p, d, t) : run_base<32, 1, false>(p, d, t);
    case 322: return p.s.bf ? run_base<32, 2, true>(p, d, t) : run_base<32, 2, false>(p, d, t);
    case 641: return p.s.bf ? run_base<64, 1, true>(p, d, t) : run_base<64, 1, false>(p, d, t);
    case 642: return p.s.bf ? run_base<64, 2, true>(p, d, t) : run_base<64, 2, false>(p, d, t);
    default: printf("  no baseline\n"); return true;
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0); /* each row as it is measured, should a case hang */
    const unsigned long long seed = argc > 1 ? strtoull(argv[1], nullptr, 0) : 1;
    const char *only = argc > 2 && strcmp(argv[2], "all") != 0 ? argv[2] : nullptr;
    g_check_only = argc > 3 && strcmp(argv[3], "check") == 0;
    if (getenv("SGK_KS"))
        g_ks = atoi(getenv("SGK_KS"));
    g_rng ^= seed * 0x2545f4914f6cdd1dull;
    printf("rel16_check seed %llu\n", seed);
    int fails = 0;
    for (const shape &s : shapes) {
        if (only && strcmp(only, s.name) != 0)
            continue;
        printf("%s (%d, %d, %d, %d, %d) %s%s\n", s.name, s.B, s.N, s.D, s.H, s.P, s.bf ? "bf16" : "f16",
               s.maskf ? ", float mask" : "");
        problem p = make(s);
        dev_problem d{};
        /* Q/K/V through the pack kernel, held to the host's rounding and V flags */
        d.qkvf = up(p.qkvf);
        CK(cudaMalloc(&d.qkv16, p.qkv16.size() * 2));
        CK(cudaMalloc(&d.vrow, p.vrow.size()));
        {
            const size_t r3 = (size_t)s.B * s.N * 3;
            if (s.bf)
                sgkc_ar16_pack_kernel<true><<<(unsigned)r3, 128>>>(d.qkvf, d.qkv16, d.vrow, s.D, s.H, p.hd, p.HDP);
            else
                sgkc_ar16_pack_kernel<false><<<(unsigned)r3, 128>>>(d.qkvf, d.qkv16, d.vrow, s.D, s.H, p.hd, p.HDP);
            CK(cudaGetLastError());
            std::vector<uint16_t> q16(p.qkv16.size());
            std::vector<unsigned char> vr(p.vrow.size());
            CK(cudaMemcpy(q16.data(), d.qkv16, q16.size() * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(vr.data(), d.vrow, vr.size(), cudaMemcpyDeviceToHost));
            const bool same = q16 == p.qkv16 && vr == p.vrow;
            printf("  pack: Q/K/V and V flags %s the host's\n", same ? "equal" : "DIFFER FROM");
            if (!same)
                fails++;
        }
        d.pair16 = up(p.pair16);
        d.w1 = up(p.w1); d.b1 = up(p.b1); d.w2t = up(p.w2t); d.b2 = up(p.b2);
        d.mask = up(p.mask);
        std::vector<float> mf(p.mask.begin(), p.mask.end());
        d.maskf = up(mf);
        const size_t pairs = (size_t)s.B * s.N * s.N;
        CK(cudaMalloc(&d.ctx, (size_t)s.B * s.N * s.D * 4));
        CK(cudaMalloc(&d.bias, pairs * s.H * 4));
        float t1 = 0, t0 = 0;
        const bool ok1 = dispatch(p, d, &t1);
        if (!ok1)
            fails++;
        if (!g_check_only) {
            dispatch_base(p, d, &t0);
            const double fbytes = 2.0 * pairs * s.P;
            printf("  time: rel16 %.1f us (features at %.0f GB/s), baseline %.1f us: %.2fx\n", t1, fbytes / t1 * 1e-3,
                   t0, t0 / t1);
        }
        cudaFree(d.qkv16); cudaFree(d.pair16); cudaFree(d.qkvf); cudaFree(d.w1); cudaFree(d.b1);
        cudaFree(d.w2t); cudaFree(d.b2); cudaFree(d.mask); cudaFree(d.vrow); cudaFree(d.maskf); cudaFree(d.ctx); cudaFree(d.bias);
        CK(cudaGetLastError());
    }
    printf("%d failure(s)\n", fails);
    return fails ? 1 : 0;
}
