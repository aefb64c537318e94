/* Smoke test of libsgk-cuda.so through the public API, on a machine with a
 * GPU: every cuda variant against the cpu backend (host path), then
 * sgk_forward_device on the caller's stream, captured in a CUDA graph.
 *
 *   nvcc -O2 -I api plugin_smoke.cu -L <build>/api -lsgk -o smoke
 *   SGK_BACKEND_PATH=<build>/backends/cuda ./smoke */
#include "sgk.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static int fails = 0;
#define EXPECT(c, ...)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf(" (%s)\n", sgk_last_error());                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static double rel(const std::vector<float> &a, const std::vector<float> &b)
{
    double n = 0, d = 0;
    for (size_t i = 0; i < a.size(); i++) {
        n += (a[i] - b[i]) * (double)(a[i] - b[i]);
        d += (double)b[i] * b[i];
    }
    return sqrt(n / d);
}

int main()
{
    sgk_backend_info info;
    EXPECT(sgk_backend_find("cuda", &info) == SGK_OK, "find");
    printf("cuda: available %d devices %d reason '%s'\n", info.available, info.device_count, info.reason);
    if (!info.available)
        return 1;
    char name[128];
    EXPECT(sgk_device_name("cuda", 0, name, sizeof name) == SGK_OK, "device name");
    printf("device: %s\n", name);

    const int64_t B = 4, N = 24, D = 96, H = 4, P = 16;
    unsigned seed = 7;
    std::vector<float> g(D), be(D), wq(D * D), wk(D * D), wv(D * D), wo(D * D), w1(P * P), b1(P),
        w2(H * P), b2(H);
    for (auto *v : {&g, &be, &wq, &wk, &wv, &wo, &w1, &b1, &w2, &b2})
        for (auto &x : *v)
            x = frand(&seed) * 0.3f;
    for (auto &x : g)
        x += 1.0f;
    std::vector<float> nodes(B * N * D), pair(B * N * N * P), mask(B * N * N), ref(B * N * D),
        out(B * N * D);
    for (auto &x : nodes) x = frand(&seed);
    for (auto &x : pair) x = frand(&seed);
    for (size_t i = 0; i < mask.size(); i++) mask[i] = (i % 3 != 1) ? 1.0f : 0.0f;

    sgk_layer_desc d;
    sgk_layer_desc_init(&d);
    d.dim = D; d.heads = H; d.pair_dim = P;
    d.ln_gamma = g.data(); d.ln_beta = be.data();
    d.wq = wq.data(); d.wk = wk.data(); d.wv = wv.data(); d.wo = wo.data();
    d.w1 = w1.data(); d.b1 = b1.data(); d.w2 = w2.data(); d.b2 = b2.data();

    sgk_context *cpu = nullptr, *gpu = nullptr;
    sgk_layer *lc = nullptr, *lg = nullptr;
    EXPECT(sgk_context_create("cpu", 0, nullptr, &cpu) == SGK_OK, "cpu context");
    EXPECT(sgk_layer_create(cpu, &d, &lc) == SGK_OK, "cpu layer");
    EXPECT(sgk_forward(lc, B, N, nodes.data(), pair.data(), mask.data(), SGK_MASK_F32, ref.data()) == SGK_OK, "cpu forward");
    EXPECT(sgk_context_create("cuda", 0, nullptr, &gpu) == SGK_OK, "cuda context");
    EXPECT(sgk_layer_create(gpu, &d, &lg) == SGK_OK, "cuda layer");

    const char *names[16];
    int sup[16], count = 0;
    EXPECT(sgk_layer_variants(lg, B, N, names, sup, 16, &count) == SGK_OK, "variants");
    const char *chosen = nullptr;
    sgk_layer_variant_for(lg, B, N, &chosen);
    printf("variants for seed (auto: %s):", chosen ? chosen : "?");
    for (int i = 0; i < count; i++)
        printf(" %s%s", names[i], sup[i] ? "" : "(no)");
    printf("\n");
    for (int i = 0; i < count; i++) {
        if (!sup[i])
            continue;
        EXPECT(sgk_layer_set_variant(lg, names[i]) == SGK_OK, "set %s", names[i]);
        EXPECT(sgk_forward(lg, B, N, nodes.data(), pair.data(), mask.data(), SGK_MASK_F32, out.data()) == SGK_OK,
               "forward %s", names[i]);
        const double r = rel(out, ref);
        printf("  %-12s host path: rel vs cpu %.2e\n", names[i], r);
        EXPECT(r <= 1e-5, "%s rel %.2e", names[i], r);
    }
    sgk_layer_set_variant(lg, nullptr);

    /* device pointers, the caller's stream, captured in a graph */
    void *ord = nullptr;
    EXPECT(sgk_context_native(gpu, SGK_NATIVE_DEVICE_ORDINAL, &ord) == SGK_OK, "native");
    cudaSetDevice((int)(intptr_t)ord);
    float *dn, *dp, *dm, *dout;
    cudaMalloc(&dn, nodes.size() * 4);
    cudaMalloc(&dp, pair.size() * 4);
    cudaMalloc(&dm, mask.size() * 4);
    cudaMalloc(&dout, out.size() * 4);
    cudaMemcpy(dn, nodes.data(), nodes.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dp, pair.data(), pair.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dm, mask.data(), mask.size() * 4, cudaMemcpyHostToDevice);
    for (int i = 0; i < count; i++) {
        if (!sup[i])
            continue;
        sgk_layer_set_variant(lg, names[i]);
        size_t wsb = 0;
        EXPECT(sgk_workspace_size(lg, B, N, &wsb) == SGK_OK, "workspace");
        void *ws = nullptr;
        if (wsb)
            cudaMalloc(&ws, wsb);
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        cudaMemset(dout, 0xff, out.size() * 4);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        const sgk_status s = sgk_forward_device(lg, B, N, dn, dp, dm, SGK_MASK_F32, dout, ws, wsb, st);
        cudaStreamEndCapture(st, &graph);
        EXPECT(s == SGK_OK, "forward_device %s under capture", names[i]);
        EXPECT(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
        for (int r = 0; r < 3; r++)
            cudaGraphLaunch(exec, st);
        EXPECT(cudaStreamSynchronize(st) == cudaSuccess, "graph run %s", names[i]);
        cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
        const double r = rel(out, ref);
        printf("  %-12s graph of sgk_forward_device: rel vs cpu %.2e\n", names[i], r);
        EXPECT(r <= 1e-5, "%s graph rel %.2e", names[i], r);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
        if (ws)
            cudaFree(ws);
    }
    sgk_layer_destroy(lg);
    sgk_layer_destroy(lc);
    sgk_context_destroy(gpu);
    sgk_context_destroy(cpu);
    printf("smoke: %d failures\n", fails);
    return fails != 0;
}
