#include "model.h"

double bench_flops(const bench_shape *s)
{
    double B = (double)s->B, N = (double)s->N, D = (double)s->D;
    double H = (double)s->H, P = (double)s->P;
    double proj = 8.0 * B * N * D * D;
    double mlp = B * N * N * (2.0 * P * P + 2.0 * P * H);
    double attn = 4.0 * B * N * N * D;
    return proj + mlp + attn;
}

double bench_set_bytes(const bench_shape *s, int mask_bytes, int elem_bytes)
{
    double B = (double)s->B, N = (double)s->N, D = (double)s->D, P = (double)s->P;
    return elem_bytes * (2.0 * B * N * D + B * N * N * P) + (double)mask_bytes * B * N * N;
}

double bench_bytes(const bench_shape *s, int mask_bytes, int elem_bytes)
{
    double D = (double)s->D, H = (double)s->H, P = (double)s->P;
    double weights = elem_bytes * (4.0 * D * D + P * P + P + H * P + H + 2.0 * D);
    return bench_set_bytes(s, mask_bytes, elem_bytes) + weights;
}
