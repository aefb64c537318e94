/* Command line of sgk-bench. */
#ifndef SGK_BENCH_OPTIONS_H
#define SGK_BENCH_OPTIONS_H

#include <stdint.h>

#include "model.h"
#include "sgk.h"

#define BENCH_MAX_LIST 16
#define BENCH_MAX_CASES 64 /* every preset and sweep shape, and custom ones */

typedef struct bench_case {
    char name[32]; /* preset name, or "custom" */
    bench_shape shape;
} bench_case;

/* One --peak-gflops or --peak-gbps item. */
typedef struct bench_peak {
    char backend[16]; /* "" for every backend */
    double value;
} bench_peak;

typedef struct bench_options {
    char backends[BENCH_MAX_LIST][16];
    int nbackends; /* 0: every available backend */
    char variants[BENCH_MAX_LIST][64];
    int nvariants; /* 0: every variant that supports the shape */
    bench_case cases[BENCH_MAX_CASES];
    int ncases;
    int device;
    int all_devices; /* --device all: every device of each backend at once */
    int threads; /* cpu backend threads, 0 = OpenMP default */
    const char *json_path; /* "-": standard output, and the table goes to stderr */
    int quick;
    int repeats;
    double warmup_s, min_repeat_s;
    int max_sets; /* cap on rotated input sets */
    int rotate;   /* 0: never rotate */
    sgk_mask_type mask_type;
    sgk_dtype dtype; /* of weights, nodes, pair_feats and out */
    uint64_t seed;
    double density;
    int check;
    int train; /* --train: also the backward rows */
    bench_peak peak_gflops[BENCH_MAX_LIST];
    int npeak_gflops;
    bench_peak peak_gbps[BENCH_MAX_LIST];
    int npeak_gbps;
    int list;
    int progress; /* stderr is a terminal */
} bench_options;

/* Returns 0 to run, 1 when --help or --version printed what was asked, 2 on a
 * usage error (message printed). */
int bench_parse_options(int argc, char **argv, bench_options *opt);

/* The --peak-gflops or --peak-gbps value for that backend, 0 when not given. */
double bench_peak_override(const bench_peak *peaks, int n, const char *backend);

/* The --dtype's name (f32, bf16, f16) and bytes an element. */
const char *bench_dtype_name(const bench_options *opt);
int bench_dtype_bytes(const bench_options *opt);

int bench_wants_backend(const bench_options *opt, const char *name);
int bench_wants_variant(const bench_options *opt, const char *name);

#endif
