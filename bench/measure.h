/* The timing protocol shared by every backend and mode: warm up, size a
 * repeat so that it lasts long enough to dwarf the clock's resolution and the
 * cost of reading it, then time several repeats. */
#ifndef SGK_BENCH_MEASURE_H
#define SGK_BENCH_MEASURE_H

#include "device.h"

/* Times calls first .. first+iters-1 of fn; returns 0 or -1. */
typedef struct bench_clock {
    int (*time)(void *self, bench_call_fn fn, void *arg, int first, int iters, double *seconds);
    void *self;
} bench_clock;

typedef struct bench_protocol {
    double warmup_s;     /* at least this long, and at least one call */
    double min_repeat_s; /* each repeat at least this long */
    int repeats;
} bench_protocol;

typedef struct bench_timing {
    double us_median, us_min, us_max; /* per call */
    long iters;                       /* calls per repeat */
    int repeats;
} bench_timing;

/* Median, min and max of us[0 .. n-1] (sorted in place), with iters calls a repeat. */
void bench_timing_of(double *us, int n, long iters, bench_timing *t);

int bench_measure(const bench_clock *clock, bench_call_fn fn, void *arg, const bench_protocol *p,
                  bench_timing *t);

/* A clock for calls that finish before they return (cpu, host path). */
bench_clock bench_host_clock(void);
/* A clock on a device's stream. */
bench_clock bench_device_clock(const bench_dev_ops *ops, bench_dev *dev);

double bench_now(void); /* monotonic seconds */

#endif
