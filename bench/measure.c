#include "measure.h"

#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int host_time(void *self, bench_call_fn fn, void *arg, int first, int iters, double *seconds)
{
    (void)self;
    double t0 = bench_now();
    for (int i = 0; i < iters; i++)
        if (fn(arg, first + i) != 0) return -1;
    *seconds = bench_now() - t0;
    return 0;
}

bench_clock bench_host_clock(void)
{
    bench_clock c = {host_time, NULL};
    return c;
}

typedef struct dev_clock {
    const bench_dev_ops *ops;
    bench_dev *dev;
} dev_clock;

static int device_time(void *self, bench_call_fn fn, void *arg, int first, int iters, double *seconds)
{
    dev_clock *c = self;
    return c->ops->time_calls(c->dev, fn, arg, first, iters, seconds);
}

bench_clock bench_device_clock(const bench_dev_ops *ops, bench_dev *dev)
{
    /* The pair lives as long as the device; one per (ops, dev) is enough. */
    dev_clock *c = malloc(sizeof *c);
    bench_clock out = {device_time, c};
    if (c) c->ops = ops, c->dev = dev;
    else out.time = NULL;
    return out;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_timing_of(double *us, int n, long iters, bench_timing *t)
{
    qsort(us, (size_t)n, sizeof us[0], cmp_double);
    t->us_min = us[0];
    t->us_max = us[n - 1];
    t->us_median = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
    t->iters = iters;
    t->repeats = n;
}

int bench_measure(const bench_clock *clock, bench_call_fn fn, void *arg, const bench_protocol *p,
                  bench_timing *t)
{
    if (!clock->time) return -1;
    /* Warm-up in doubling chunks; the last chunk, the longest, sizes a repeat. */
    int chunk = 1, next = 0;
    double spent = 0, per_call = 0;
    for (;;) {
        double s = 0;
        if (clock->time(clock->self, fn, arg, next, chunk, &s) != 0) return -1;
        next += chunk;
        spent += s;
        per_call = s / chunk;
        if (spent >= p->warmup_s) break;
        if (chunk < (1 << 20)) chunk *= 2;
    }
    long iters = 1;
    if (per_call > 0) {
        double want = p->min_repeat_s / per_call;
        iters = want > 1e7 ? 10000000L : (long)want + 1;
    } else {
        iters = 1000;
    }

    double *us = malloc(sizeof(double) * (size_t)p->repeats);
    if (!us) return -1;
    for (int r = 0; r < p->repeats; r++) {
        double s = 0;
        /* A repeat that ends up shorter than asked (the warm-up estimate was
         * high) is run again longer, so that none falls under the minimum. */
        for (int tries = 0;; tries++) {
            if (clock->time(clock->self, fn, arg, next, (int)iters, &s) != 0) {
                free(us);
                return -1;
            }
            next += (int)iters;
            if (s >= p->min_repeat_s || tries == 3) break;
            double grow = s > 0 ? p->min_repeat_s / s * 1.2 : 2.0;
            iters = (long)(iters * (grow < 2.0 ? 2.0 : grow)) + 1;
            if (iters > 10000000L) iters = 10000000L;
        }
        us[r] = s / (double)iters * 1e6;
    }
    bench_timing_of(us, p->repeats, iters, t);
    free(us);
    return 0;
}
