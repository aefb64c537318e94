/* Dev harness for the sgk CUDA kernels: validates every variant against a
 * small double-precision CPU reference of its own, then times them.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fopenmp -I.. harness.cu ../variants.cu -o harness -lgomp
 *   ./harness validate          all edge cases, every variant that supports each
 *   ./harness bench [preset..]  seed mid large xl: stream and graph timings
 *                               (SGKC_VARIANT=tuned-tiled times that variant alone)
 *   ./harness sanitize          a few small cases, one call each (for compute-sanitizer)
 *
 * Versions: v1 = tuned-general, v2 = tuned-tiled, v3 = tuned-fused-small (the variant table of
 * variants.cu); each is timed with device events, median of 7 runs, rotating
 * through several input sets so that small presets are not timed on one
 * L2-resident buffer. */
#include "../cuda_layer.h"
#include "dev_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>



struct Shape {
    const char *name;
    int B, N, D, H, P;
};

struct Weights {
    int D, H, P;
    std::vector<float> gamma, beta, wq, wk, wv, wo, w1, b1, w2, b2;
};

static Weights make_weights(int D, int H, int P)
{
    Weights w;
    w.D = D; w.H = H; w.P = P;
    auto fill = [](std::vector<float> &v, size_t n, float s, float off) {
        v.resize(n);
        for (auto &x : v) x = off + s * nrand();
    };
    fill(w.gamma, D, 0.2f, 1.0f);
    fill(w.beta, D, 0.2f, 0.0f);
    const float sd = 1.0f / sqrtf((float)D), sp = 1.0f / sqrtf((float)P);
    fill(w.wq, (size_t)D * D, sd, 0); fill(w.wk, (size_t)D * D, sd, 0);
    fill(w.wv, (size_t)D * D, sd, 0); fill(w.wo, (size_t)D * D, sd, 0);
    fill(w.w1, (size_t)P * P, sp, 0); fill(w.b1, P, 0.5f, 0);
    fill(w.w2, (size_t)H * P, sp, 0); fill(w.b2, H, 0.5f, 0);
    return w;
}

struct Inputs {
    int B, N, D, P;
    std::vector<float> nodes, pair, maskf;
    std::vector<unsigned char> masku8;
};

/* mask kinds: 0 = density 0.7 (SGKC_DENSITY sets another) with self edges;
 * 1 = same plus a few fully masked rows; 2 = all edges */
static Inputs make_inputs(int B, int N, int D, int P, int kind)
{
    const double density = getenv("SGKC_DENSITY") ? atof(getenv("SGKC_DENSITY")) : 0.7;
    Inputs in;
    in.B = B; in.N = N; in.D = D; in.P = P;
    in.nodes.resize((size_t)B * N * D);
    for (auto &x : in.nodes) x = 0.5f + nrand();
    in.pair.resize((size_t)B * N * N * P);
    for (auto &x : in.pair) x = nrand();
    in.maskf.resize((size_t)B * N * N);
    in.masku8.resize(in.maskf.size());
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                size_t idx = ((size_t)b * N + i) * N + j;
                bool e = kind == 2 || i == j || urand() < density;
                if (kind == 1 && (i % 7 == 3))
                    e = false;
                /* any nonzero is an edge: use odd values */
                in.maskf[idx] = e ? (j % 3 == 0 ? -0.5f : 1.0f) : 0.0f;
                in.masku8[idx] = e ? (unsigned char)(1 + j % 200) : 0;
            }
    return in;
}

/* ---- the reference, in double, straight from the math ---- */
static void reference(const Weights &w, const Inputs &in, std::vector<double> &out)
{
    const int B = in.B, N = in.N, D = w.D, H = w.H, P = w.P, hd = D / H;
    out.assign((size_t)B * N * D, 0.0);
    std::vector<double> q((size_t)B * N * D), k(q.size()), v(q.size());
#pragma omp parallel for schedule(dynamic)
    for (long r = 0; r < (long)B * N; r++) {
        const float *x = &in.nodes[(size_t)r * D];
        double mean = 0, var = 0;
        for (int d = 0; d < D; d++) mean += x[d];
        mean /= D;
        for (int d = 0; d < D; d++) var += (x[d] - mean) * (x[d] - mean);
        var /= D;
        std::vector<double> xn(D);
        for (int d = 0; d < D; d++)
            xn[d] = (x[d] - mean) / sqrt(var + 1e-5) * w.gamma[d] + w.beta[d];
        for (int n = 0; n < D; n++) {
            double sq = 0, sk = 0, sv = 0;
            for (int d = 0; d < D; d++) {
                sq += xn[d] * w.wq[(size_t)n * D + d];
                sk += xn[d] * w.wk[(size_t)n * D + d];
                sv += xn[d] * w.wv[(size_t)n * D + d];
            }
            q[(size_t)r * D + n] = sq; k[(size_t)r * D + n] = sk; v[(size_t)r * D + n] = sv;
        }
    }
#pragma omp parallel for schedule(dynamic)
    for (long r = 0; r < (long)B * N; r++) {
        const int b = (int)(r / N), i = (int)(r % N);
        std::vector<double> s((size_t)H * N), hid(P), ctx(D, 0.0);
        for (int j = 0; j < N; j++) {
            const size_t pi = ((size_t)b * N + i) * N + j;
            const bool edge = in.maskf[pi] != 0.0f;
            const float *x = &in.pair[pi * P];
            for (int p = 0; p < P; p++) {
                double t = w.b1[p];
                for (int rr = 0; rr < P; rr++) t += (double)w.w1[(size_t)p * P + rr] * x[rr];
                hid[p] = t / (1.0 + exp(-t));
            }
            for (int h = 0; h < H; h++) {
                double bias = w.b2[h];
                for (int p = 0; p < P; p++) bias += (double)w.w2[(size_t)h * P + p] * hid[p];
                double dot = 0;
                for (int d = 0; d < hd; d++)
                    dot += q[(size_t)r * D + h * hd + d] * k[((size_t)b * N + j) * D + h * hd + d];
                s[(size_t)h * N + j] = edge ? dot / sqrt((double)hd) + bias : -INFINITY;
            }
        }
        for (int h = 0; h < H; h++) {
            double m = -INFINITY;
            for (int j = 0; j < N; j++) m = fmax(m, s[(size_t)h * N + j]);
            double l = 0;
            for (int j = 0; j < N; j++) {
                /* a masked key weighs 0; a NaN score (NaN in q or k) stays NaN
                 * even when every other key is masked (m = -inf) */
                const double sj = s[(size_t)h * N + j];
                double e = sj == -INFINITY ? 0.0 : exp(sj - (m == -INFINITY ? 0.0 : m));
                s[(size_t)h * N + j] = e;
                l += e;
            }
            for (int j = 0; j < N; j++) {
                const double a = l == 0 ? 0.0 : s[(size_t)h * N + j] / l;
                if (a == 0.0)
                    continue; /* a masked key adds nothing, not even a NaN of its V */
                for (int d = 0; d < hd; d++)
                    ctx[h * hd + d] += a * v[((size_t)b * N + j) * D + h * hd + d];
            }
        }
        for (int n = 0; n < D; n++) {
            double o = in.nodes[(size_t)r * D + n];
            for (int d = 0; d < D; d++) o += ctx[d] * w.wo[(size_t)n * D + d];
            out[(size_t)r * D + n] = o;
        }
    }
}

/* ---- device side ---- */
struct DevSet {
    float *nodes, *pair, *out;
    void *mask;
};

static sgkc_layer make_layer(const Weights &w)
{
    sgkc_layer L;
    sgk_layer_desc d;
    memset(&d, 0, sizeof d);
    d.dim = w.D;
    d.heads = w.H;
    d.pair_dim = w.P;
    d.eps = 1e-5f;
    d.ln_gamma = w.gamma.data();
    d.ln_beta = w.beta.data();
    d.wq = w.wq.data();
    d.wk = w.wk.data();
    d.wv = w.wv.data();
    d.wo = w.wo.data();
    d.w1 = w.w1.data();
    d.b1 = w.b1.data();
    d.w2 = w.w2.data();
    d.b2 = w.b2.data();
    CK(sgkc_layer_pack(&L, 0, &d, nullptr));
    return L;
}

/* offset (floats) shifts nodes and pair off 16-byte alignment */
static DevSet upload(const Inputs &in, bool u8, int offset)
{
    DevSet s;
    const size_t nn = in.nodes.size(), np = in.pair.size(), nm = in.maskf.size();
    CK(cudaMalloc(&s.nodes, (nn + 4) * sizeof(float)));
    CK(cudaMalloc(&s.pair, (np + 4) * sizeof(float)));
    CK(cudaMalloc(&s.out, nn * sizeof(float)));
    CK(cudaMalloc(&s.mask, nm * sizeof(float)));
    s.nodes += offset;
    s.pair += offset;
    CK(cudaMemcpy(s.nodes, in.nodes.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s.pair, in.pair.data(), np * sizeof(float), cudaMemcpyHostToDevice));
    if (u8)
        CK(cudaMemcpy(s.mask, in.masku8.data(), nm, cudaMemcpyHostToDevice));
    else
        CK(cudaMemcpy(s.mask, in.maskf.data(), nm * sizeof(float), cudaMemcpyHostToDevice));
    return s;
}

static void release(DevSet &s, int offset)
{
    cudaFree(s.nodes - offset);
    cudaFree(s.pair - offset);
    cudaFree(s.out);
    cudaFree(s.mask);
}

static sgkc_fwd fwd_of(const DevSet &s, int B, int N, bool u8, void *ws, size_t wsb, cudaStream_t st)
{
    sgkc_fwd f;
    f.B = B; f.N = N;
    f.nodes = s.nodes; f.pair = s.pair; f.pair16 = nullptr; f.mask = s.mask; f.mask_u8 = u8;
    f.out = s.out; f.out16 = nullptr; f.nodes16 = nullptr; f.ws = ws; f.ws_bytes = wsb; f.stream = st;
    return f;
}

struct Check {
    double rel;
    long nonfinite_mismatch; /* one side NaN or Inf, the other not the same */
    long masked_rows_exact_fail;
    long unwritten;
};

static Check compare(const Inputs &in, const std::vector<double> &ref, const std::vector<float> &got,
                     int mask_kind)
{
    Check c = {0, 0, 0, 0};
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], 4);
        if (bits == 0x7fbadbadu) c.unwritten++;
        if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
            const bool same = (std::isnan(ref[i]) && std::isnan(got[i])) || (double)got[i] == ref[i];
            if (!same) c.nonfinite_mismatch++;
            continue;
        }
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    c.rel = sqrt(num / (den > 0 ? den : 1));
    if (mask_kind == 1) {
        const int N = in.N, D = in.D;
        for (int b = 0; b < in.B; b++)
            for (int i = 3; i < N; i += 7)
                for (int d = 0; d < D; d++) {
                    const size_t o = ((size_t)b * N + i) * D + d;
                    if (got[o] != in.nodes[o]) c.masked_rows_exact_fail++;
                }
    }
    return c;
}

struct Case {
    Shape s;
    int mask_kind;
    bool u8;
    int offset;  /* misalign nodes/pair by this many floats */
    int nan_at;  /* 1: NaN in one unmasked and one masked pair_feats element;
                  * 2: NaN in nodes of node 0 of batch 0; 3: +Inf in nodes of
                  * its last node. Rows that do not attend to that node (mask
                  * kind 1 or 0) must stay finite, the others become NaN. */
};

static int g_fail = 0;

static void run_case(const Case &cs, bool quiet_ok)
{
    const Shape &s = cs.s;
    Weights w = make_weights(s.D, s.H, s.P);
    Inputs in = make_inputs(s.B, s.N, s.D, s.P, cs.mask_kind);
    if (cs.nan_at == 2)
        in.nodes[0] = NAN;
    if (cs.nan_at == 3)
        in.nodes[(size_t)s.N * s.D - 1] = INFINITY;
    if (cs.nan_at == 1 && s.N > 3) {
        /* an unmasked edge (0, 2, 2) (self edge) gets a NaN feature; a masked
         * edge gets one too, which must not leak */
        in.pair[(((size_t)0 * s.N + 2) * s.N + 2) * s.P] = NAN;
        for (int j = 0; j < s.N; j++)
            if (in.maskf[((size_t)0 * s.N + 1) * s.N + j] == 0.0f) {
                in.pair[(((size_t)0 * s.N + 1) * s.N + j) * s.P] = NAN;
                break;
            }
    }
    std::vector<double> ref;
    reference(w, in, ref);
    sgkc_layer L = make_layer(w);
    DevSet ds = upload(in, cs.u8, cs.offset);
    std::vector<float> got(in.nodes.size());
    for (int v = 0; v < sgkc_variant_count; v++) {
        const sgkc_variant &var = sgkc_variants[v];
        const bool force = getenv("SGKC_FORCE") && atoi(getenv("SGKC_FORCE"));
        /* forced: past the variant's prefer, where it can plan the shape */
        sgk_backend_plan plan;
        if (!var.plan(&L, s.B, s.N, &plan) || !(force || sgkc_prefers(var, &L, s.B, s.N, &plan))) {
            if (!quiet_ok)
                printf("  %-12s %-34s unsupported\n", var.name, s.name);
            continue;
        }
        size_t wsb = var.workspace(&L, s.B, s.N, &plan);
        void *ws = nullptr;
        if (wsb) CK(cudaMalloc(&ws, wsb));
        CK(cudaMemset(ds.out, 0, 0));
        {
            std::vector<uint32_t> poison(in.nodes.size(), 0x7fbadbadu);
            CK(cudaMemcpy(ds.out, poison.data(), poison.size() * 4, cudaMemcpyHostToDevice));
        }
        sgkc_fwd f = fwd_of(ds, s.B, s.N, cs.u8, ws, wsb, 0);
        CK(var.launch(&L, &plan, &f));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), ds.out, got.size() * 4, cudaMemcpyDeviceToHost));
        Check c = compare(in, ref, got, cs.mask_kind);
        const bool ok = c.rel <= 1e-5 && c.nonfinite_mismatch == 0 && c.masked_rows_exact_fail == 0 &&
                        c.unwritten == 0;
        if (!ok) g_fail++;
        printf("  %-12s %-34s rel %.2e  nonfinite_mismatch %ld  masked_exact_fail %ld  unwritten %ld  %s\n",
               var.name, s.name, c.rel, c.nonfinite_mismatch, c.masked_rows_exact_fail, c.unwritten,
               ok ? "ok" : "FAIL");
        if (ws) cudaFree(ws);
    }
    release(ds, cs.offset);
    sgkc_layer_release(&L);
}

/* ---- timing ---- */
__global__ void empty_kernel() {}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double flops_of(const Shape &s)
{
    const double BN = (double)s.B * s.N, pairs = BN * s.N;
    return 4 * 2 * BN * s.D * s.D + pairs * (2.0 * s.P * s.P + 2.0 * s.P * s.H) + 4 * pairs * s.D;
}
static double bytes_of(const Shape &s)
{
    const double BN = (double)s.B * s.N, pairs = BN * s.N;
    return 4 * (2 * BN * s.D + pairs * s.P + pairs) + 4.0 * 4 * s.D * s.D;
}

static void bench(const Shape &s)
{
    Weights w = make_weights(s.D, s.H, s.P);
    const double set_bytes = bytes_of(s);
    int nsets = (int)std::min(256.0, std::max(2.0, 400e6 / set_bytes));
    /* one validated input set, the others are copies with fresh values */
    Inputs in = make_inputs(s.B, s.N, s.D, s.P, 0);
    std::vector<double> ref;
    reference(w, in, ref);
    sgkc_layer L = make_layer(w);
    std::vector<DevSet> sets;
    for (int i = 0; i < nsets; i++) {
        sets.push_back(upload(in, false, 0));
        if (i > 0) { /* perturb so sets are distinct memory with distinct data */
            std::vector<float> t(in.nodes);
            for (auto &x : t) x += 0.01f * nrand();
            CK(cudaMemcpy(sets[i].nodes, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
        }
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double fl = flops_of(s), by = bytes_of(s);
    printf("%s: B=%d N=%d D=%d H=%d P=%d  %.3f GFLOP  %.1f MB  floors: FFMA(67T) %.1f us, HBM(4.0TB/s) %.1f us; %d input sets\n",
           s.name, s.B, s.N, s.D, s.H, s.P, fl / 1e9, by / 1e6, fl / 67e12 * 1e6, by / 4.0e12 * 1e6, nsets);
    /* SGKC_FORCE=1 also times variants whose prefer() declines the shape
     * (tuned-fused-small past one wave), where they can plan it. */
    const bool force = getenv("SGKC_FORCE") && atoi(getenv("SGKC_FORCE"));
    /* SGKC_VARIANT=name times that variant alone (A/B calls on a budget). */
    const char *only = getenv("SGKC_VARIANT");
    for (int v = 0; v < sgkc_variant_count; v++) {
        const sgkc_variant &var = sgkc_variants[v];
        const int vnum = v == 0 ? 3 : v == 1 ? 2 : 1;
        if (only && *only && strcmp(only, var.name) != 0)
            continue;
        sgk_backend_plan plan;
        const bool plans = var.plan(&L, s.B, s.N, &plan);
        const bool sup = plans && sgkc_prefers(var, &L, s.B, s.N, &plan);
        if (!sup && !(force && plans)) {
            printf("  v%d %-12s unsupported\n", vnum, var.name);
            continue;
        }
        size_t wsb = var.workspace(&L, s.B, s.N, &plan);
        void *ws = nullptr;
        if (wsb) CK(cudaMalloc(&ws, wsb));
        /* correctness on set 0 */
        sgkc_fwd f0 = fwd_of(sets[0], s.B, s.N, false, ws, wsb, st);
        if (!sup)
            printf("  (v%d %s: forced past its prefer())\n", vnum, var.name);
        CK(var.launch(&L, &plan, &f0));
        CK(cudaStreamSynchronize(st));
        std::vector<float> got(in.nodes.size());
        CK(cudaMemcpy(got.data(), sets[0].out, got.size() * 4, cudaMemcpyDeviceToHost));
        Check c = compare(in, ref, got, 0);
        /* calibrate */
        CK(cudaEventRecord(e0, st));
        CK(var.launch(&L, &plan, &f0));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float one;
        CK(cudaEventElapsedTime(&one, e0, e1));
        int reps = (int)std::max(3.0, std::min(2000.0, 30.0 / std::max(one, 1e-3f)));
        std::vector<float> ts, th; /* th: the host's time a launch, submitting */
        for (int run = 0; run < 7; run++) {
            CK(cudaEventRecord(e0, st));
            const auto h0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; r++) {
                sgkc_fwd f = fwd_of(sets[r % nsets], s.B, s.N, false, ws, wsb, st);
                CK(var.launch(&L, &plan, &f));
            }
            th.push_back(std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - h0).count() / reps);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            ts.push_back(ms * 1000 / reps);
        }
        const float t_stream = median(ts);
        float t_graph = -1;
        if (t_stream < 200) {
            const int greps = std::min(reps, 200);
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int r = 0; r < greps; r++) {
                sgkc_fwd f = fwd_of(sets[r % nsets], s.B, s.N, false, ws, wsb, st);
                CK(var.launch(&L, &plan, &f));
            }
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, st));
            CK(cudaStreamSynchronize(st));
            std::vector<float> tg;
            for (int run = 0; run < 7; run++) {
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                tg.push_back(ms * 1000 / greps);
            }
            t_graph = median(tg);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
        printf("  v%d %-12s stream %9.2f us  graph %9.2f us  host %5.2f us  min/max(stream) %.2f/%.2f  %7.2f TFLOP/s  %7.1f GB/s  rel %.2e %s\n",
               vnum, var.name, t_stream, t_graph, median(th), *std::min_element(ts.begin(), ts.end()),
               *std::max_element(ts.begin(), ts.end()), fl / (t_stream * 1e-6) / 1e12,
               by / (t_stream * 1e-6) / 1e9, c.rel, c.rel <= 1e-5 && c.nonfinite_mismatch == 0 ? "ok" : "FAIL");
        fflush(stdout);
        if (ws) cudaFree(ws);
    }
    CK(cudaGetLastError());
    for (auto &d : sets) release(d, 0);
    sgkc_layer_release(&L);
    cudaStreamDestroy(st);
}

__global__ void empty_cluster_kernel(int sync)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (sync)
        asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#endif
}

/* Launch cost of a kernel that does nothing: back to back on one stream and
 * inside a graph, per launch. The shapes are those of the fused kernel at
 * the seed preset (32 blocks of 512 threads, 48 KB, clusters of 8), so the
 * gap between them and the fused kernel's time is its body. */
template <typename F>
static void time_launches(const char *what, cudaStream_t st, F launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 1000; i++) launch();
    CK(cudaStreamSynchronize(st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < 10000; i++) launch();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("floor: %-40s back to back %.2f us", what, ms * 1000 / 10000);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 200; i++) launch();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf(", in a graph %.2f us\n", ms * 1000 / 4000);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void floor_numbers()
{
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    time_launches("empty 1x32", st, [&] { empty_kernel<<<1, 32, 0, st>>>(); });
    CK(cudaFuncSetAttribute(empty_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
    time_launches("empty 32x512 48KB", st, [&] { empty_cluster_kernel<<<32, 512, 48 * 1024, st>>>(0); });
    for (int sync = 0; sync < 2; sync++) {
        for (unsigned cl : {4u, 8u, 16u}) {
            if (cl == 16)
                CK(cudaFuncSetAttribute(empty_cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
            char what[64];
            snprintf(what, sizeof what, "cluster %u, %u x 512 48KB%s", cl, 4 * cl, sync ? " + barrier" : "");
            time_launches(what, st, [&] {
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute attr[1];
                cfg.gridDim = dim3(4 * cl);
                cfg.blockDim = dim3(512);
                cfg.dynamicSmemBytes = 48 * 1024;
                cfg.stream = st;
                attr[0].id = cudaLaunchAttributeClusterDimension;
                attr[0].val.clusterDim.x = cl;
                attr[0].val.clusterDim.y = 1;
                attr[0].val.clusterDim.z = 1;
                cfg.attrs = attr;
                cfg.numAttrs = 1;
                CK(cudaLaunchKernelEx(&cfg, empty_cluster_kernel, sync));
            });
        }
    }
    time_launches("empty 128x256", st, [&] { empty_cluster_kernel<<<128, 256, 0, st>>>(0); });
    cudaStreamDestroy(st);
}

#ifdef SGKC_TIMELINE
cudaError_t sgkc_timeline_read(unsigned long long *dst, size_t n);
#endif

static const Shape presets[] = {
    {"seed", 4, 24, 96, 4, 16},
    {"mid", 32, 64, 256, 8, 32},
    {"large", 8, 512, 256, 8, 32},
    {"xl", 2, 2048, 256, 8, 16},
};

int main(int argc, char **argv)
{
    const std::string mode = argc > 1 ? argv[1] : "validate";
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, cc %d.%d, smem optin %zu\n", prop.name, prop.multiProcessorCount,
           prop.major, prop.minor, prop.sharedMemPerBlockOptin);
    if (mode == "validate") {
        const Case cases[] = {
            {{"seed f32 masked-rows", 4, 24, 96, 4, 16}, 1, false, 0, 0},
            {{"seed u8 nan", 4, 24, 96, 4, 16}, 0, true, 0, 1},
            {{"seed misaligned", 4, 24, 96, 4, 16}, 1, false, 1, 0},
            {{"seed B=12 (clusters of 8)", 12, 24, 96, 4, 16}, 1, false, 0, 0},
            {{"mid masked-rows", 32, 64, 256, 8, 32}, 1, true, 0, 0},
            {{"large", 8, 512, 256, 8, 32}, 1, false, 0, 0},
            {{"xl", 2, 2048, 256, 8, 16}, 0, false, 0, 0},
            {{"N=1", 3, 1, 64, 4, 8}, 0, false, 0, 0},
            {{"N=2 all masked? kind1", 2, 5, 32, 2, 4}, 1, false, 0, 0},
            {{"hd=1 D=1024 H=1024", 1, 9, 1024, 1024, 8}, 1, false, 0, 0},
            {{"hd=1 D=16 H=16", 2, 40, 16, 16, 8}, 1, false, 0, 0},
            {{"hd=256", 2, 40, 512, 2, 16}, 1, false, 0, 0},
            {{"hd=512", 1, 20, 1024, 2, 8}, 0, false, 0, 0},
            {{"P=128", 2, 33, 64, 4, 128}, 1, false, 0, 0},
            {{"P=64 H=16", 2, 50, 128, 16, 64}, 1, true, 0, 0},
            {{"P=1", 2, 19, 32, 4, 1}, 0, false, 0, 0},
            {{"odd D=6 H=3 P=5", 2, 37, 6, 3, 5}, 1, false, 0, 0},
            {{"odd misaligned P=5", 2, 37, 12, 3, 5}, 1, false, 1, 1},
            {{"D=1024 H=8", 1, 70, 1024, 8, 32}, 1, false, 0, 0},
            {{"N=130 D=128", 2, 130, 128, 8, 16}, 1, false, 0, 0},
            {{"N=4096", 1, 4096, 32, 2, 4}, 1, false, 0, 0},
            /* a NaN/Inf node must reach only the rows that attend to it */
            {{"seed nan node", 4, 24, 96, 4, 16}, 1, false, 0, 2},
            {{"mid inf node", 32, 64, 256, 8, 32}, 1, true, 0, 3},
            {{"large nan node", 8, 512, 256, 8, 32}, 1, false, 0, 2},
            {{"P=128 inf node", 2, 33, 64, 4, 128}, 1, false, 0, 3},
            {{"odd D=6 H=3 nan node", 2, 37, 6, 3, 5}, 1, false, 1, 2},
            {{"N=130 D=128 inf node", 2, 130, 128, 8, 16}, 0, false, 0, 3},
            /* attn_rows.cuh (H = 8, hd = 32, P <= 32): partial tiles, scalar features */
            {{"D=256 H=8 N=37 P=5 misaligned", 3, 37, 256, 8, 5}, 1, true, 1, 0},
            {{"D=256 H=8 N=1 P=20", 2, 1, 256, 8, 20}, 0, false, 0, 0},
            {{"D=256 H=8 N=100 nan pair", 2, 100, 256, 8, 32}, 1, false, 0, 1},
            {{"D=256 H=8 N=77 inf node", 2, 77, 256, 8, 16}, 0, true, 0, 3},
        };
        for (const Case &c : cases) {
            printf("%s\n", c.s.name);
            run_case(c, false);
            fflush(stdout);
        }
        printf("validate: %d failures\n", g_fail);
        return g_fail != 0;
    }
    if (mode == "sanitize") {
        const Case cases[] = {
            {{"seed f32 masked-rows", 4, 24, 96, 4, 16}, 1, false, 0, 0},
            {{"odd misaligned P=5", 2, 37, 12, 3, 5}, 1, false, 1, 1},
            {{"N=40 hd=1 D=16", 2, 40, 16, 16, 8}, 1, true, 0, 0},
            {{"mid-ish", 2, 64, 256, 8, 32}, 1, true, 0, 0},
            {{"D=256 H=8 N=37 P=5 (rows kernel tails)", 2, 37, 256, 8, 5}, 1, false, 1, 0},
            {{"D=256 H=8 N=77 P=16 (rows kernel, two key groups, odd tiles)", 2, 77, 256, 8, 16}, 1, true, 0, 0},
            {{"P=128 (32-query tiled kernel)", 2, 33, 64, 4, 128}, 1, false, 0, 0},
            /* 270 of the 64x128 Q/K/V tiles (two an SM on 132 SMs), the last row partial */
            {{"B=45 N=63 D=256 (wide Q/K/V tiles)", 45, 63, 256, 8, 32}, 1, true, 0, 0},
        };
        for (const Case &c : cases) {
            printf("%s\n", c.s.name);
            run_case(c, true);
        }
        printf("sanitize: %d failures\n", g_fail);
        return g_fail != 0;
    }
    if (mode == "profile") {
        /* two calls of each tuned variant per preset, for ncu */
        for (const Shape &s : presets) {
            bool want = argc <= 2;
            for (int i = 2; i < argc; i++)
                if (s.name == std::string(argv[i])) want = true;
            if (!want) continue;
            Weights w = make_weights(s.D, s.H, s.P);
            Inputs in = make_inputs(s.B, s.N, s.D, s.P, 0);
            sgkc_layer L = make_layer(w);
            DevSet ds = upload(in, false, 0);
            for (int v = 0; v < sgkc_variant_count; v++) {
                const sgkc_variant &var = sgkc_variants[v];
                sgk_backend_plan plan;
                if (std::string(var.name) == "tuned-general" || !var.plan(&L, s.B, s.N, &plan) ||
                    !sgkc_prefers(var, &L, s.B, s.N, &plan))
                    continue;
                size_t wsb = var.workspace(&L, s.B, s.N, &plan);
                void *ws = nullptr;
                if (wsb) CK(cudaMalloc(&ws, wsb));
                sgkc_fwd f = fwd_of(ds, s.B, s.N, false, ws, wsb, 0);
                for (int r = 0; r < 2; r++) CK(var.launch(&L, &plan, &f));
                CK(cudaDeviceSynchronize());
                printf("profiled %s %s\n", s.name, var.name);
                if (ws) cudaFree(ws);
            }
            release(ds, 0);
            sgkc_layer_release(&L);
        }
        return 0;
    }
#ifdef SGKC_TIMELINE
    if (mode == "timeline") {
        /* Phase stamps of the fused kernel at the seed preset (or the shape
         * "B,N,D,H,P" given after the mode), in a steady back-to-back stream
         * (the last of 500 calls over 64 input sets). */
        Shape s = presets[0];
        if (argc > 2 && sscanf(argv[2], "%d,%d,%d,%d,%d", &s.B, &s.N, &s.D, &s.H, &s.P) != 5) {
            fprintf(stderr, "timeline: shape %s is not B,N,D,H,P\n", argv[2]);
            return 2;
        }
        Weights w = make_weights(s.D, s.H, s.P);
        Inputs in = make_inputs(s.B, s.N, s.D, s.P, 0);
        sgkc_layer L = make_layer(w);
        std::vector<DevSet> sets;
        for (int i = 0; i < 64; i++) sets.push_back(upload(in, false, 0));
        const sgkc_variant &var = sgkc_variants[0];
        sgk_backend_plan plan;
        CK(var.plan(&L, s.B, s.N, &plan) ? cudaSuccess : cudaErrorInvalidConfiguration);
        int clk_khz = 0;
        CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
        for (int pass = 0; pass < 2; pass++) {
            const int calls = pass == 0 ? 1 : 500;
            for (int r = 0; r < calls; r++) {
                sgkc_fwd f = fwd_of(sets[r % 64], s.B, s.N, false, nullptr, 0, 0);
                CK(var.launch(&L, &plan, &f));
            }
            CK(cudaDeviceSynchronize());
            constexpr int TLS = 32; /* slots a block (kernel_common.cuh) */
            std::vector<unsigned long long> tl(256 * TLS);
            CK(sgkc_timeline_read(tl.data(), tl.size()));
            unsigned long long g0 = ~0ull, g1 = 0;
            int nb = 0;
            for (int b = 0; b < 256; b++) {
                if (!tl[b * TLS + 15])
                    continue; /* past the grid */
                nb++;
                g0 = std::min(g0, tl[b * TLS + 15]);
                g1 = std::max(g1, tl[b * TLS + 15]);
            }
            printf("timeline %s (%s, %d blocks, clock %d MHz): block start spread %llu ns (globaltimer)\n",
                   pass ? "steady" : "first call", var.name, nb, clk_khz / 1000, g1 - g0);
            printf("  block  start(ns)  phase cycles: 1..10 (0 = entry)\n");
            for (int b : {0, 1, 7, 8, 15, nb - 1}) {
                printf("  %5d %9llu ", b, tl[b * TLS + 15] - g0);
                for (int k = 1; k <= 10; k++)
                    printf(" %6lld", (long long)(tl[b * TLS + k] - tl[b * TLS + k - 1]));
                printf("  total %lld\n", (long long)(tl[b * TLS + 10] - tl[b * TLS]));
            }
            /* phase 3: warp 0's LayerNorm statistics, then its wait for the
             * weight image's bulk copy and the gamma/beta pass */
            printf("  block  phase 3: statistics, then weight wait and gamma/beta\n");
            for (int b : {0, 1, 7, 8, 15, nb - 1}) {
                printf("  %5d          ", b);
                printf(" %6lld %6lld\n", (long long)(tl[b * TLS + 14] - tl[b * TLS + 2]),
                       (long long)(tl[b * TLS + 3] - tl[b * TLS + 14]));
            }
            /* thread 0's last attention task (warp 0's), inside phase 8 */
            printf("  block  phase 8 of its last task: Q.K and max, exp and sum, P.V and ctx push, after\n");
            for (int b : {0, 1, 7, 8, 15, nb - 1}) {
                printf("  %5d          ", b);
                const int ks[5] = {7, 11, 12, 13, 8};
                for (int k = 1; k < 5; k++)
                    printf(" %6lld", tl[b * TLS + ks[k]] ? (long long)(tl[b * TLS + ks[k]] - tl[b * TLS + ks[k - 1]]) : -1ll);
                printf("\n");
            }
            /* stamps inside phases 1, 6 and 10 (slots 16-18 and 20-22) */
            printf("  block  phase 1: weights issued, grid wait, rest | 6: GEMM, stores+bar, pushes, Wo issue | 10: GEMM, stores\n");
            for (int b : {0, 1, 7, 8, 15, nb - 1}) {
                printf("  %5d          ", b);
                const int seq[][2] = {{0, 21}, {21, 22}, {22, 1}, {5, 16}, {16, 17}, {17, 18}, {18, 6}, {9, 20}, {20, 10}};
                for (auto &q : seq)
                    printf(" %6lld", tl[b * TLS + q[0]] && tl[b * TLS + q[1]] ? (long long)(tl[b * TLS + q[1]] - tl[b * TLS + q[0]]) : -1ll);
                printf("\n");
            }
            /* cycles from entry: the MLP's start and its last push (slots
             * 23, 24: the compiled-in shapes run the MLP on their own warps,
             * beside the Q/K/V GEMM), the GEMM's start (5), its wait for the
             * Q/K/V slice passed (19), its sums done (16) and the barrier
             * after its stores and the MLP (17) */
            printf("  block  from entry: MLP start, MLP end | Q/K/V GEMM start, slice landed, sums done, barrier passed\n");
            for (int b : {0, 1, 7, 8, 15, nb - 1}) {
                printf("  %5d          ", b);
                for (int k : {23, 24, 5, 19, 16, 17})
                    printf(" %6lld", tl[b * TLS + k] ? (long long)(tl[b * TLS + k] - tl[b * TLS]) : -1ll);
                printf("\n");
            }
        }
        return 0;
    }
#endif
    if (mode == "bench") {
        floor_numbers();
        for (const Shape &s : presets) {
            bool want = argc <= 2;
            for (int i = 2; i < argc; i++)
                if (s.name == std::string(argv[i])) want = true;
            if (want) bench(s);
        }
        return 0;
    }
    fprintf(stderr, "usage: %s validate|bench [presets]|sanitize\n", argv[0]);
    return 2;
}
