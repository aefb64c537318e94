#include "sweep.h"

#include <string.h>

/* B, N, D, H, P as SPEC section 4 lists them. */
const bench_sweep_shape bench_sweep[] = {
    {"s01", {1, 16, 256, 4, 8}},     {"s02", {1, 100, 512, 8, 24}},  {"s03", {2, 48, 1024, 16, 32}},
    {"s04", {8, 96, 192, 6, 16}},    {"s05", {16, 80, 320, 5, 48}},  {"s06", {32, 40, 64, 2, 8}},
    {"s07", {4, 300, 256, 16, 64}},  {"s08", {2, 700, 384, 4, 24}},  {"s09", {1, 1500, 128, 1, 16}},
    {"s10", {1, 3000, 256, 8, 8}},   {"s11", {64, 24, 96, 4, 16}},   {"s12", {3, 200, 1024, 4, 128}},
    {"s13", {12, 128, 768, 12, 32}}, {"s14", {6, 512, 128, 8, 4}},
};
const int bench_sweep_count = (int)(sizeof bench_sweep / sizeof bench_sweep[0]);

const bench_sweep_shape *bench_sweep_find(const char *name)
{
    for (int i = 0; i < bench_sweep_count; i++)
        if (!strcmp(bench_sweep[i].name, name)) return &bench_sweep[i];
    return NULL;
}
