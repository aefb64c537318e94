/* The generated C kernels of the tiled path, one at a time: validates the
 * composed forward against the double reference, then times each kernel
 * (norm + the Q/K/V projection, attn, the output projection) with the
 * layer's own plan, best of seven. Not a test and not a benchmark of
 * record (sgk-bench is): a probe for tuning relation.sgk on a CPU.
 *
 *   build/tests/cpu_kernels B N D H P [threads]
 *
 * SGK_CPU_ISA picks the instance, as in the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "plan.h"
#include "reference.h"
#include "relation_c.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float *rnd(size_t n, float scale)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; p && i < n; i++) {
        g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
        p[i] = scale * ((float)(g_rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s B N D H P [threads [reps]]\n", argv[0]);
        return 2;
    }
    const int64_t B = atoll(argv[1]), N = atoll(argv[2]), D = atoll(argv[3]), H = atoll(argv[4]),
                  P = atoll(argv[5]);
    const int threads = argc > 6 ? atoi(argv[6]) : 1;
    /* more repetitions where a profiler samples the kernels */
    const int reps = argc > 7 && atoi(argv[7]) > 1 ? atoi(argv[7]) : 8;
    const sgk_limits lim = {512u << 10, 1 << 30, SGK_GEN_PAD, 64, 64, 128, 32, 64, 0, 0};
    sgk_plan p;
    if (!sgk_plan_make(SGK_PLAN_TILED, B, N, D, H, P, &lim, &p)) {
        fprintf(stderr, "no tiled plan for this shape\n");
        return 1;
    }
    const size_t rows = (size_t)(B * N), pairs = rows * (size_t)N;
    float *w[10];
    const size_t count[10] = {(size_t)D, (size_t)D, (size_t)(D * D), (size_t)(D * D), (size_t)(D * D),
                              (size_t)(D * D), (size_t)(P * P), (size_t)P, (size_t)(H * P), (size_t)H};
    for (int i = 0; i < 10; i++)
        w[i] = rnd(count[i], i < 2 ? 1.0f : 1.0f / sqrtf((float)(i < 6 ? D : P)));
    sgk_layer_desc desc = {0};
    desc.dim = D, desc.heads = H, desc.pair_dim = P, desc.eps = 1e-5f, desc.dtype = SGK_DTYPE_F32;
    desc.ln_gamma = w[0], desc.ln_beta = w[1], desc.wq = w[2], desc.wk = w[3], desc.wv = w[4];
    desc.wo = w[5], desc.w1 = w[6], desc.b1 = w[7], desc.w2 = w[8], desc.b2 = w[9];
    sgk_gen_packed o = sgk_gen_layout(D, H, P, SGK_GEN_PAD, 16);
    o.sw = SGK_GEN_PAD; /* as the cpu backend packs them */
    /* aligned to a cache line, as the cpu backend keeps them */
    float *pk = aligned_alloc(64, (o.total * sizeof(float) + 64) / 64 * 64);
    sgk_gen_pack(&desc, &o, pk);

    float *nodes = rnd(rows * (size_t)D, 1.0f), *pair = rnd(pairs * (size_t)P, 1.0f);
    unsigned char *mask = malloc(pairs);
    for (size_t i = 0; i < pairs; i++) {
        g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
        mask[i] = (g_rng >> 40) % 10 < 7;
    }
    const size_t pool = ((p.smem_norm > p.smem_attn ? p.smem_norm : p.smem_attn) + 15) / 16 * 16;
    const size_t head = (p.workspace_bytes + 63) / 64 * 64;
    float *ws = aligned_alloc(64, head + (size_t)threads * pool * sizeof(float));
    float *out = malloc(rows * (size_t)D * sizeof(float));
    float *pm = (float *)((char *)ws + head);
    const int nrows = (int)rows;

    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep < reps; rep++) {
        double t[5];
        t[0] = now();
        const sgk_off ctx0 = (sgk_off)(p.ctx_offset / sizeof(float));
        sgk_cpu_norm(threads, (int)p.groups_norm, 1, pm, pool, nodes, pk + o.gamma, pk + o.beta, 1e-5f, ws, ctx0,
                     p.ldc, nrows, p.D, p.rt);
        t[1] = now();
        sgk_cpu_proj(threads, (int)p.groups_rows, (int)p.groups_qkv, pm, pool, ws, ctx0, p.ldc, pk + o.wqkv,
                     sgk_gen_ldw(&o, p.ldk), 0, ws, ws, 0, p.ldk, nrows, p.D, p.ldk, p.mt, p.nt);
        t[2] = now();
        sgk_cpu_attn(threads, (int)p.groups_attn, 1, pm, pool, ws, p.ldk, pair, 0, mask, 1, pk + o.w1, p.ldp,
                     pk + o.b1, pk + o.w2, p.ldh, pk + o.b2, ws, ctx0, p.ldc, p.N, p.D, p.H, p.P, p.tq, p.tqp, p.tk,
                     p.qc, (int)p.groups_q, p.scale, 1, 0, nrows, ws, 0);
        t[3] = now();
        sgk_cpu_proj(threads, (int)p.groups_rows, (int)p.groups_out, pm, pool, ws, ctx0, p.ldc, pk + o.wo,
                     sgk_gen_ldw(&o, p.ldo), 1, nodes, out, 0, p.D, nrows, p.D, p.D, p.mt, p.nt);
        t[4] = now();
        if (rep == 0) { /* validate before timing anything */
            const sgk_ref_layer rl = {D, H, P, 1e-5, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9]};
            double *ref = malloc(rows * (size_t)D * sizeof(double)), num = 0, den = 0;
            sgk_ref_forward(&rl, B, N, nodes, pair, mask, SGK_MASK_U8, ref, NULL);
            for (size_t i = 0; i < rows * (size_t)D; i++) {
                num += (out[i] - ref[i]) * (out[i] - ref[i]);
                den += ref[i] * ref[i];
            }
            free(ref);
            const double rel = sqrt(num / (den > 0 ? den : 1));
            printf("%s B=%lld N=%lld D=%lld H=%lld P=%lld threads=%d: rel L2 %.2e %s\n", sgk_cpu_isa_name(),
                   (long long)B, (long long)N, (long long)D, (long long)H, (long long)P, threads, rel,
                   rel <= 1e-5 ? "ok" : "FAILED");
            if (!(rel <= 1e-5))
                return 1;
            continue;
        }
        const double k[4] = {t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3]};
        for (int i = 0; i < 4; i++)
            best[i] = k[i] < best[i] ? k[i] : best[i];
    }
    const double fq = 6.0 * (double)rows * (double)(D * D), fo = 2.0 * (double)rows * (double)(D * D);
    const double fm = (double)pairs * (2.0 * (double)(P * P) + 2.0 * (double)(P * H)), fa = 4.0 * (double)pairs * D;
    printf("norm %8.0f us | qkv %8.0f us %6.1f GFLOP/s | attn %8.0f us %6.1f GFLOP/s (MLP %2.0f%% of it) | "
           "out %8.0f us %6.1f GFLOP/s\n",
           best[0] * 1e6, best[1] * 1e6, fq / best[1] / 1e9, best[2] * 1e6, (fm + fa) / best[2] / 1e9,
           100 * fm / (fm + fa), best[3] * 1e6, fo / best[3] / 1e9);
    for (int i = 0; i < 10; i++)
        free(w[i]);
    free(pk), free(nodes), free(pair), free(mask), free(ws), free(out);
    return 0;
}
