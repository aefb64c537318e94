/* A program that uses an installed sgk the way a user's would: through
 * <sgk.h> and libsgk alone, built by pkg-config, CMake or meson.
 *
 *   consumer            prints the version and runs one small forward on cpu
 *   consumer backends   prints one line a backend: its name, then
 *                       "available N" or "unavailable: <reason>"
 *
 * Exits 0 when every sgk call succeeds, 1 otherwise. */
#include <sgk.h>
#include <stdio.h>
#include <string.h>

enum { B = 1, N = 3, D = 4, H = 2, P = 2 };

static int list_backends(void)
{
    for (int i = 0; i < sgk_backend_count(); i++) {
        sgk_backend_info info;
        if (sgk_backend_get(i, &info) != SGK_OK)
            return 1;
        if (info.available)
            printf("%s available %d\n", info.name, info.device_count);
        else
            printf("%s unavailable: %s\n", info.name, info.reason);
    }
    return 0;
}

static int forward_on_cpu(void)
{
    static float gamma[D], beta[D], wq[D * D], wk[D * D], wv[D * D], wo[D * D], w1[P * P],
        b1[P], w2[H * P], b2[H], nodes[B * N * D], pair[B * N * N * P], mask[B * N * N],
        out[B * N * D];
    for (int i = 0; i < D; i++)
        gamma[i] = 1;
    for (int i = 0; i < D * D; i++)
        wq[i] = wk[i] = wv[i] = wo[i] = (float)((i * 5 % 7) - 3) / 8;
    for (int i = 0; i < B * N * D; i++)
        nodes[i] = (float)((i * 3 % 5) - 2);
    for (int i = 0; i < B * N * N; i++)
        mask[i] = 1;

    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    desc.dim = D;
    desc.heads = H;
    desc.pair_dim = P;
    desc.ln_gamma = gamma;
    desc.ln_beta = beta;
    desc.wq = wq;
    desc.wk = wk;
    desc.wv = wv;
    desc.wo = wo;
    desc.w1 = w1;
    desc.b1 = b1;
    desc.w2 = w2;
    desc.b2 = b2;
    sgk_context *ctx = NULL;
    sgk_layer *layer = NULL;
    sgk_status s = sgk_context_create("cpu", 0, NULL, &ctx);
    if (s == SGK_OK)
        s = sgk_layer_create(ctx, &desc, &layer);
    if (s == SGK_OK)
        s = sgk_forward(layer, B, N, nodes, pair, mask, SGK_MASK_F32, out);
    if (s == SGK_OK)
        printf("sgk %s: cpu forward out[0] = %g\n", sgk_version(), out[0]);
    else
        fprintf(stderr, "consumer: %s: %s\n", sgk_status_string(s), sgk_last_error());
    sgk_layer_destroy(layer);
    sgk_context_destroy(ctx);
    return s == SGK_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "backends") == 0)
        return list_backends();
    return forward_on_cpu();
}
