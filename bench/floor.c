/* The floor of a device: launch cost and copy bandwidth, measured here; and
 * what a row's timing makes of them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "host_copy.h"
#include "run_internal.h"

void measure_floor(backend_run *br, bench_device_rec *d)
{
    const bench_options *opt = br->opt;
    if (br->is_cpu) {
        int threads = d->threads > 0 ? d->threads : 1;
        progress(opt, "cpu: host copy bandwidth ...");
        d->copy_gbps = bench_host_copy_gbps(threads, opt->quick);
        if (!(d->copy_gbps > 0)) d->copy_gbps = NAN;
        snprintf(d->copy_how, sizeof d->copy_how, "memcpy on %d threads, best of 4", threads);
        return;
    }
    if (!br->ops) return;
    call_ctx c;
    memset(&c, 0, sizeof c);
    c.ops = br->ops;
    c.dev = br->dev;
    bench_timing t;
    progress(opt, "%s: launch cost ...", br->name);
    if (bench_measure(&br->dclock, call_empty, &c, &br->proto, &t) == 0) d->launch_us = t.us_min;
    if (br->ops->has_graph) {
        void *g = NULL;
        if (br->ops->graph_capture(br->dev, call_empty, &c, 0, &g) == 0) {
            c.graphs = &g;
            c.sets = 1;
            if (bench_measure(&br->dclock, call_graph, &c, &br->proto, &t) == 0) d->graph_launch_us = t.us_min;
            br->ops->graph_destroy(br->dev, g);
        }
    }
    /* Buffers well past the cache; smaller when the device has less memory. */
    progress(opt, "%s: copy bandwidth ...", br->name);
    size_t bytes = (size_t)(opt->quick ? 64 : 256) << 20;
    size_t cap = (size_t)(opt->quick ? 256 : 1024) << 20;
    while (bytes < (size_t)(4 * d->cache_bytes) && bytes < cap) bytes *= 2;
    for (; bytes >= ((size_t)16 << 20); bytes /= 2) {
        c.copy_src = c.copy_dst = NULL;
        if (br->ops->alloc(br->dev, bytes, &c.copy_src) != 0) continue;
        if (br->ops->alloc(br->dev, bytes, &c.copy_dst) != 0) {
            br->ops->free(br->dev, c.copy_src);
            continue;
        }
        c.copy_bytes = bytes;
        if (bench_measure(&br->dclock, call_copy, &c, &br->proto, &t) == 0) {
            d->copy_gbps = 2.0 * (double)bytes / (t.us_min * 1e-6) / 1e9;
            snprintf(d->copy_how, sizeof d->copy_how, "copy kernel, 2 x %zu MiB, best of %d", bytes >> 20,
                     t.repeats);
        }
        br->ops->free(br->dev, c.copy_src);
        br->ops->free(br->dev, c.copy_dst);
        break;
    }
}

void timing_rates(bench_row *r, const bench_timing *t)
{
    r->us_median = t->us_median;
    r->us_min = t->us_min;
    r->us_max = t->us_max;
    r->iters = t->iters;
    r->repeats = t->repeats;
    r->gflops = r->flops / (t->us_median * 1e-6) / 1e9;
    r->gbps = r->bytes / (t->us_median * 1e-6) / 1e9;
}

void finish_timing(const backend_run *br, bench_row *r, const bench_timing *t, int graph)
{
    const bench_device_rec *d = &br->res->devices[br->rec];
    timing_rates(r, t);
    if (!br->ops && !br->is_cpu) return; /* the host path: copies and allocation, no floor */
    double floor = NAN;
    const char *bound = "";
    if (r->copy_floor_us > 0) floor = r->copy_floor_us, bound = "bandwidth";
    /* a 16-bit run is held to its dtype's tensor-core rate where that is
     * known, not to fp32 FMA */
    const double compute = r->tc_floor_us > 0 ? r->tc_floor_us : r->ffma_floor_us;
    if (compute > 0 && !(floor >= compute)) floor = compute, bound = "compute";
    double launch = graph ? d->graph_launch_us : d->launch_us;
    if (launch > 0 && !(floor >= launch)) floor = launch, bound = "launch";
    r->floor_us = floor;
    snprintf(r->floor_bound, sizeof r->floor_bound, "%s", bound);
    r->floor_share = floor / t->us_median;
}
