/* SPEC section 4's sweep: the widths users train with (head dims 16 to 256,
 * odd ones included), beside the four presets that tests/util.c holds. */
#ifndef SGK_BENCH_SWEEP_H
#define SGK_BENCH_SWEEP_H

#include "model.h"

typedef struct bench_sweep_shape {
    const char *name; /* s01 .. s14 */
    bench_shape shape;
} bench_sweep_shape;

extern const bench_sweep_shape bench_sweep[];
extern const int bench_sweep_count;

/* NULL when no sweep shape has that name. */
const bench_sweep_shape *bench_sweep_find(const char *name);

#endif
