/* What one sgk-bench run produces: a record per device (with the floor it
 * measured) and a row per backend, variant, shape and mode. */
#ifndef SGK_BENCH_H
#define SGK_BENCH_H

#include <stdio.h>

#include "machine.h"
#include "model.h"
#include "options.h"

/* The floors' peaks on a GPU where the bench neither derives nor measures
 * them and none is given: the H200's of SPEC section 5, fp32 FMA and copy
 * (read + write). */
#define BENCH_H200_PEAK_GFLOPS 67000.0
#define BENCH_H200_COPY_GBPS 3980.0

typedef struct bench_device_rec {
    char backend[16];
    int device;
    char name[256];
    char driver[128];
    char clock[96];       /* how the stream / host modes are timed */
    char timer_note[640]; /* why a GPU backend runs on the host path, "" otherwise */
    double launch_us;       /* empty kernel, back to back; NaN when not measured */
    double graph_launch_us; /* one replay of a graph of one empty kernel; NaN if none */
    double copy_gbps;       /* read + write bandwidth of the copy floor; NaN if none */
    char copy_how[96];      /* how the bench measured it, "" when it did not */
    char copy_source[128];  /* measured, --peak-gbps, or the H200 default */
    double peak_gflops;     /* fp32 FMA peak of the FFMA floor; 0 when unknown */
    char peak_source[128];
    double peak16_gflops; /* dense 16-bit tensor-core peak of a 16-bit run's TC floor; 0 when unknown */
    char peak16_source[128];
    double cache_bytes; /* 0 when unknown */
    int threads;        /* cpu backend threads, 0 elsewhere */
} bench_device_rec;

typedef struct bench_row {
    int device_rec; /* index into bench_results.devices; -1: --device all's aggregate of every device */
    char backend[16];
    char device_name[256];
    char variant[64];
    int is_auto; /* the variant sgk picks by itself for this shape */
    char preset[32];
    bench_shape shape;
    char mode[16];
    int input_sets;
    long iters;
    int repeats;
    double us_median, us_min, us_max; /* NaN when not timed */
    double flops, bytes, gflops, gbps;
    double ffma_floor_us; /* flops / fp32 FMA peak; NaN when the peak is unknown */
    double copy_floor_us; /* bytes / copy bandwidth; NaN when it is unknown */
    double tc_floor_us;   /* a 16-bit run's flops / the dtype's tensor-core peak; NaN elsewhere or unknown */
    double floor_us;      /* the largest of those and the launch cost; NaN when none is known */
    char floor_bound[16];
    double floor_share;
    int checked;
    double rel_l2, max_abs;
    char status[12]; /* ok, FAIL, ERROR, unchecked */
    char note[384];
} bench_row;

typedef struct bench_results {
    bench_machine machine;
    bench_device_rec *devices;
    int ndevices;
    bench_row *rows;
    int nrows, cap_rows;
    char notes[4096]; /* backends skipped and why */
    int setup_errors;
} bench_results;

int bench_run(const bench_options *opt, bench_results *res);
int bench_list(const bench_options *opt);
/* The table, to out (stdout, or stderr when the JSON goes to stdout). */
void bench_print_table(FILE *out, const bench_options *opt, const bench_results *res);
/* path "-" is standard output. */
int bench_write_json(const bench_options *opt, const bench_results *res, const char *path);

#endif
