/* The README's example: one layer on the cpu backend, from a state dict
 * held in plain arrays (PyTorch nn.Linear layout). */
#include <sgk.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, N = 5, D = 8, H = 2, P = 3 };

static float *filled(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = scale * (float)((int)(i * 7919 % 23) - 11) / 11.0f;
    return x;
}

int main(void)
{
    float *gamma = filled(D, 1), *beta = filled(D, 0.1f), *wq = filled(D * D, 0.3f),
          *wk = filled(D * D, 0.3f), *wv = filled(D * D, 0.3f), *wo = filled(D * D, 0.3f),
          *w1 = filled(P * P, 0.5f), *b1 = filled(P, 0.1f), *w2 = filled(H * P, 0.5f),
          *b2 = filled(H, 0.1f), *nodes = filled(B * N * D, 1), *pair = filled(B * N * N * P, 1),
          *mask = filled(B * N * N, 1), *out = malloc(B * N * D * sizeof(float));

    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc); /* eps = 1e-5, dtype = SGK_DTYPE_F32 */
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
    /* nodes (B,N,D), pair (B,N,N,P), mask (B,N,N): nonzero = edge; out (B,N,D) */
    if (s == SGK_OK)
        s = sgk_forward(layer, B, N, nodes, pair, mask, SGK_MASK_F32, out);
    if (s != SGK_OK)
        fprintf(stderr, "sgk: %s: %s\n", sgk_status_string(s), sgk_last_error());
    else
        printf("out[0][0][0] = %f\n", out[0]);

    sgk_layer_destroy(layer);
    sgk_context_destroy(ctx);
    free(gamma), free(beta), free(wq), free(wk), free(wv), free(wo), free(w1), free(b1);
    free(w2), free(b2), free(nodes), free(pair), free(mask), free(out);
    return s == SGK_OK ? 0 : 1;
}
