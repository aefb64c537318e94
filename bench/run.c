/* Runs the benchmark: for each backend, measure its floor, then for each
 * shape and variant check one call against the reference and time every
 * mode the backend has. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "util.h"
#include "bench.h"
#include "device.h"
#include "host_copy.h"
#include "measure.h"

/* ---- data shared by every backend: weights, inputs, reference --------- */

typedef struct case_data {
    int ready;
    sgkt_weights w;
    sgkt_inputs in;
    double *ref;
    int ref_failed;
} case_data;

static void progress(const bench_options *opt, const char *fmt, ...)
{
    if (!opt->progress) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

static void progress_clear(const bench_options *opt)
{
    if (opt->progress) fputs("\r\033[K", stderr), fflush(stderr);
}

static void add_note(bench_results *res, const char *fmt, ...)
{
    size_t used = strlen(res->notes);
    if (used + 2 >= sizeof res->notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->notes + used, sizeof res->notes - used - 1, fmt, ap);
    va_end(ap);
    strcat(res->notes, "\n");
}

static int case_prepare(const bench_options *opt, const bench_shape *s, case_data *cd)
{
    if (cd->ready) return 0;
    if (sgkt_weights_alloc(&cd->w, s->D, s->H, s->P) != 0) return -1;
    if (sgkt_inputs_alloc(&cd->in, s->B, s->N, s->D, s->P, opt->mask_type) != 0) {
        sgkt_weights_free(&cd->w);
        return -1;
    }
    /* Weights and inputs depend only on the seed and the shape, so rows of
     * one shape from different runs and machines see the same numbers. */
    sgkt_rng rng;
    sgkt_rng_seed(&rng, sgkt_seed_mix(opt->seed, 1));
    sgkt_weights_random(&cd->w, &rng);
    sgkt_rng_seed(&rng, sgkt_seed_mix(opt->seed, 2));
    sgkt_inputs_random(&cd->in, &rng, SGKT_MASK_RANDOM, opt->density);
    cd->ready = 1;
    return 0;
}

static const double *case_reference(const bench_options *opt, const char *name, const bench_shape *s,
                                    case_data *cd)
{
    if (cd->ref || cd->ref_failed) return cd->ref;
    progress(opt, "reference for %s ...", name);
    size_t n = (size_t)(s->B * s->N * s->D);
    cd->ref = malloc(n * sizeof(double));
    sgk_ref_layer L = {s->D, s->H, s->P, cd->w.eps, cd->w.ln_gamma, cd->w.ln_beta, cd->w.wq, cd->w.wk,
                       cd->w.wv, cd->w.wo, cd->w.w1, cd->w.b1, cd->w.w2, cd->w.b2};
    if (!cd->ref || sgk_ref_forward(&L, s->B, s->N, cd->in.nodes, cd->in.pair_feats, cd->in.edge_mask,
                                    cd->in.mask_type, cd->ref, NULL) != 0) {
        free(cd->ref);
        cd->ref = NULL;
        cd->ref_failed = 1;
    }
    return cd->ref;
}

static void case_free(case_data *cd)
{
    if (!cd->ready) return;
    sgkt_weights_free(&cd->w);
    sgkt_inputs_free(&cd->in);
    free(cd->ref);
    memset(cd, 0, sizeof *cd);
}

/* ---- the calls that get timed ----------------------------------------- */

typedef struct call_ctx {
    sgk_layer *layer;
    int64_t B, N;
    sgk_mask_type mask_type;
    int sets;
    void **nodes, **pair, **mask, **out; /* one per input set */
    void *ws;
    size_t ws_bytes;
    void *stream;
    const bench_dev_ops *ops;
    bench_dev *dev;
    void **graphs;
    void *copy_src, *copy_dst;
    size_t copy_bytes;
    char err[384];
} call_ctx;

static int sgk_failed(call_ctx *c, const char *call, sgk_status st)
{
    snprintf(c->err, sizeof c->err, "%s: %s: %s", call, sgk_status_string(st), sgk_last_error());
    return -1;
}

static int dev_failed(call_ctx *c)
{
    snprintf(c->err, sizeof c->err, "%s", c->ops->error(c->dev));
    return -1;
}

static int call_forward_device(void *arg, int i)
{
    call_ctx *c = arg;
    int s = i % c->sets;
    sgk_status st = sgk_forward_device(c->layer, c->B, c->N, c->nodes[s], c->pair[s], c->mask[s],
                                       c->mask_type, c->out[s], c->ws, c->ws_bytes, c->stream);
    return st == SGK_OK ? 0 : sgk_failed(c, "sgk_forward_device", st);
}

static int call_forward_host(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    sgk_status st = sgk_forward(c->layer, c->B, c->N, c->nodes[0], c->pair[0], c->mask[0], c->mask_type,
                                c->out[0]);
    return st == SGK_OK ? 0 : sgk_failed(c, "sgk_forward", st);
}

static int call_graph(void *arg, int i)
{
    call_ctx *c = arg;
    return c->ops->graph_launch(c->dev, c->graphs[i % c->sets]) == 0 ? 0 : dev_failed(c);
}

static int call_empty(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    return c->ops->empty_launch(c->dev) == 0 ? 0 : dev_failed(c);
}

static int call_copy(void *arg, int i)
{
    call_ctx *c = arg;
    (void)i;
    return c->ops->copy_launch(c->dev, c->copy_dst, c->copy_src, c->copy_bytes) == 0 ? 0 : dev_failed(c);
}

/* ---- one backend ------------------------------------------------------ */

typedef struct backend_run {
    const bench_options *opt;
    bench_results *res;
    case_data *cases;
    int rec;
    const char *name;
    sgk_context *ctx;
    int is_cpu;
    const bench_dev_ops *ops; /* NULL: cpu, or a GPU on the host path */
    bench_dev *dev;
    bench_clock dclock;
    bench_protocol proto;
} backend_run;

static const bench_dev_ops *module_for(const char *backend)
{
#ifdef SGK_BENCH_HAVE_CUDA
    if (!strcmp(backend, "cuda")) return bench_cuda_ops();
#endif
#ifdef SGK_BENCH_HAVE_OPENCL
    if (!strcmp(backend, "opencl")) return bench_opencl_ops();
#endif
    (void)backend;
    return NULL;
}

static bench_row *new_row(bench_results *res)
{
    if (res->nrows == res->cap_rows) {
        int cap = res->cap_rows ? 2 * res->cap_rows : 64;
        bench_row *r = realloc(res->rows, sizeof *r * (size_t)cap);
        if (!r) return NULL;
        res->rows = r;
        res->cap_rows = cap;
    }
    bench_row *r = &res->rows[res->nrows++];
    memset(r, 0, sizeof *r);
    r->us_median = r->us_min = r->us_max = NAN;
    r->gflops = r->gbps = r->floor_us = r->floor_share = NAN;
    r->rel_l2 = r->max_abs = NAN;
    return r;
}

static void measure_floor(backend_run *br, bench_device_rec *d)
{
    const bench_options *opt = br->opt;
    if (br->is_cpu) {
        int threads = opt->threads ? opt->threads : br->res->machine.cpu_threads;
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

static void finish_timing(const backend_run *br, bench_row *r, const bench_timing *t, int graph)
{
    const bench_device_rec *d = &br->res->devices[br->rec];
    r->us_median = t->us_median;
    r->us_min = t->us_min;
    r->us_max = t->us_max;
    r->iters = t->iters;
    r->repeats = t->repeats;
    r->gflops = r->flops / (t->us_median * 1e-6) / 1e9;
    r->gbps = r->bytes / (t->us_median * 1e-6) / 1e9;
    if (!strcmp(r->mode, "host-path")) return; /* copies and allocation: no floor */
    double floor = NAN;
    const char *bound = "";
    if (d->copy_gbps > 0) floor = r->bytes / (d->copy_gbps * 1e9) * 1e6, bound = "bandwidth";
    if (d->peak_gflops > 0) {
        double f = r->flops / (d->peak_gflops * 1e9) * 1e6;
        if (!(floor >= f)) floor = f, bound = "compute";
    }
    double launch = graph ? d->graph_launch_us : d->launch_us;
    if (launch > 0 && !(floor >= launch)) floor = launch, bound = "launch";
    r->floor_us = floor;
    snprintf(r->floor_bound, sizeof r->floor_bound, "%s", bound);
    r->floor_share = floor / t->us_median;
}

static void set_status(const bench_options *opt, bench_row *r, int call_ok, const sgkt_error *e,
                       const double *ref)
{
    if (!call_ok) {
        snprintf(r->status, sizeof r->status, "ERROR");
        return;
    }
    if (!opt->check) {
        snprintf(r->status, sizeof r->status, "unchecked");
        return;
    }
    if (!ref) {
        snprintf(r->status, sizeof r->status, "ERROR");
        snprintf(r->note, sizeof r->note, "the reference could not be computed (out of memory?)");
        return;
    }
    r->checked = 1;
    r->rel_l2 = e->rel_l2;
    r->max_abs = e->max_abs;
    snprintf(r->status, sizeof r->status, "%s",
             sgkt_error_ok(e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL) ? "ok" : "FAIL");
}

/* Input sets to rotate among so that they do not all sit in the cache. */
static int choose_sets(const bench_options *opt, double cache_bytes, double set_bytes)
{
    if (!opt->rotate || !(cache_bytes > 0) || set_bytes >= 2 * cache_bytes) return 1;
    double want = ceil(3 * cache_bytes / set_bytes);
    double cap_by_memory = floor(2.0 * (1 << 30) / set_bytes);
    if (want > cap_by_memory) want = cap_by_memory;
    if (want > opt->max_sets) want = opt->max_sets;
    return want < 2 ? 1 : (int)want;
}

typedef struct case_buffers {
    int sets;
    void **nodes, **pair, **mask, **out;
    void *ws;
    size_t ws_bytes;
    float *host_out;
    float *nan_out;
} case_buffers;

static void buffers_free(backend_run *br, case_buffers *b)
{
    for (int s = 0; s < b->sets; s++) {
        if (br->ops) {
            br->ops->free(br->dev, b->nodes[s]);
            br->ops->free(br->dev, b->pair[s]);
            br->ops->free(br->dev, b->mask[s]);
            br->ops->free(br->dev, b->out[s]);
        } else if (b->out && b->out[s] != b->host_out) {
            free(b->out[s]);
        }
    }
    if (br->ops && b->ws) br->ops->free(br->dev, b->ws);
    else free(b->ws);
    free(b->nodes);
    free(b->pair);
    free(b->mask);
    free(b->out);
    free(b->host_out);
    free(b->nan_out);
    memset(b, 0, sizeof *b);
}

/* Host buffers (cpu, host path) or device buffers with every set uploaded. */
static int buffers_alloc(backend_run *br, const bench_shape *s, const case_data *cd, size_t ws_bytes,
                         case_buffers *b, char *err, size_t err_len)
{
    const bench_device_rec *d = &br->res->devices[br->rec];
    size_t out_n = (size_t)(s->B * s->N * s->D);
    size_t nodes_b = out_n * sizeof(float);
    size_t pair_b = (size_t)(s->B * s->N * s->N * s->P) * sizeof(float);
    size_t mask_b = (size_t)(s->B * s->N * s->N) * sgkt_mask_elem_size(br->opt->mask_type);
    memset(b, 0, sizeof *b);
    b->sets = br->ops ? choose_sets(br->opt, d->cache_bytes, (double)(2 * nodes_b + pair_b + mask_b)) : 1;
    b->nodes = calloc((size_t)b->sets, sizeof(void *));
    b->pair = calloc((size_t)b->sets, sizeof(void *));
    b->mask = calloc((size_t)b->sets, sizeof(void *));
    b->out = calloc((size_t)b->sets, sizeof(void *));
    b->host_out = malloc(nodes_b);
    b->nan_out = malloc(nodes_b);
    b->ws_bytes = ws_bytes;
    if (!b->nodes || !b->pair || !b->mask || !b->out || !b->host_out || !b->nan_out) {
        int sets = b->sets;
        b->sets = 0;
        buffers_free(br, b);
        snprintf(err, err_len, "out of host memory for %d input sets", sets);
        return -1;
    }
    sgkt_poison_nan(b->nan_out, out_n);
    if (!br->ops) {
        b->nodes[0] = cd->in.nodes;
        b->pair[0] = cd->in.pair_feats;
        b->mask[0] = cd->in.edge_mask;
        b->out[0] = b->host_out;
        if (ws_bytes && !(b->ws = malloc(ws_bytes))) {
            buffers_free(br, b);
            snprintf(err, err_len, "out of host memory for a %zu-byte workspace", ws_bytes);
            return -1;
        }
        return 0;
    }
    const bench_dev_ops *o = br->ops;
    int rc = 0;
    for (int k = 0; k < b->sets && rc == 0; k++) {
        rc = o->alloc(br->dev, nodes_b, &b->nodes[k]);
        if (rc == 0) rc = o->alloc(br->dev, pair_b, &b->pair[k]);
        if (rc == 0) rc = o->alloc(br->dev, mask_b, &b->mask[k]);
        if (rc == 0) rc = o->alloc(br->dev, nodes_b, &b->out[k]);
        if (rc == 0) rc = o->upload(br->dev, b->nodes[k], cd->in.nodes, nodes_b);
        if (rc == 0) rc = o->upload(br->dev, b->pair[k], cd->in.pair_feats, pair_b);
        if (rc == 0) rc = o->upload(br->dev, b->mask[k], cd->in.edge_mask, mask_b);
    }
    if (rc == 0 && ws_bytes) rc = o->alloc(br->dev, ws_bytes, &b->ws);
    if (rc != 0) {
        snprintf(err, err_len, "device buffers for %d input sets: %s", b->sets, o->error(br->dev));
        buffers_free(br, b);
        return -1;
    }
    return 0;
}

/* Poisons out of set 0, runs one call (or graph 0), reads it back, compares. */
static int check_once(backend_run *br, call_ctx *c, bench_call_fn fn, const case_buffers *b,
                      const double *ref, size_t out_n, sgkt_error *e)
{
    size_t bytes = out_n * sizeof(float);
    if (br->ops) {
        if (br->ops->upload(br->dev, b->out[0], b->nan_out, bytes) != 0) return dev_failed(c);
        if (fn(c, 0) != 0) return -1;
        if (br->ops->synchronize(br->dev) != 0) return dev_failed(c);
        if (br->ops->download(br->dev, b->host_out, b->out[0], bytes) != 0) return dev_failed(c);
    } else {
        memcpy(b->host_out, b->nan_out, bytes);
        if (fn(c, 0) != 0) return -1;
    }
    if (ref) *e = sgkt_compare(b->host_out, ref, out_n);
    return 0;
}

static void run_mode(backend_run *br, const bench_row *tmpl, call_ctx *c, bench_call_fn fn,
                     const bench_clock *clock, const case_buffers *b, const double *ref, int graph)
{
    bench_row *r = new_row(br->res);
    if (!r) return;
    *r = *tmpl;
    if (graph) snprintf(r->mode, sizeof r->mode, "graph");
    progress(br->opt, "%s %s %s %s ...", r->backend, r->preset, r->variant, r->mode);
    size_t out_n = (size_t)(r->shape.B * r->shape.N * r->shape.D);
    sgkt_error e;
    memset(&e, 0, sizeof e);
    c->err[0] = 0;
    int ok = check_once(br, c, fn, b, ref, out_n, &e) == 0;
    bench_timing t;
    if (ok) ok = bench_measure(clock, fn, c, &br->proto, &t) == 0;
    if (ok) finish_timing(br, r, &t, graph);
    else snprintf(r->note, sizeof r->note, "%s", c->err);
    set_status(br->opt, r, ok, &e, ref);
}

static void run_variant(backend_run *br, const bench_row *tmpl, call_ctx *c, const case_buffers *b,
                        const double *ref)
{
    bench_clock hc = bench_host_clock();
    if (br->ops) run_mode(br, tmpl, c, call_forward_device, &br->dclock, b, ref, 0);
    else if (br->is_cpu) run_mode(br, tmpl, c, call_forward_device, &hc, b, ref, 0);
    else run_mode(br, tmpl, c, call_forward_host, &hc, b, ref, 0);
    if (!br->ops || !br->ops->has_graph) return;

    /* One graph per input set, each holding one call, as a framework would
     * capture one forward. */
    void **graphs = calloc((size_t)b->sets, sizeof(void *));
    int captured = 0;
    c->err[0] = 0;
    if (graphs) {
        for (; captured < b->sets; captured++)
            if (br->ops->graph_capture(br->dev, call_forward_device, c, captured, &graphs[captured]) != 0) {
                if (!c->err[0]) dev_failed(c);
                break;
            }
    }
    if (graphs && captured == b->sets) {
        c->graphs = graphs;
        run_mode(br, tmpl, c, call_graph, &br->dclock, b, ref, 1);
        c->graphs = NULL;
    } else {
        bench_row *r = new_row(br->res);
        if (r) {
            *r = *tmpl;
            snprintf(r->mode, sizeof r->mode, "graph");
            snprintf(r->note, sizeof r->note, "capture failed: %.360s", graphs ? c->err : "out of host memory");
            snprintf(r->status, sizeof r->status, "ERROR");
        }
    }
    for (int k = 0; k < captured; k++) br->ops->graph_destroy(br->dev, graphs[k]);
    free(graphs);
}

static void case_error(backend_run *br, const bench_row *tmpl, const char *variant, const char *msg)
{
    bench_row *r = new_row(br->res);
    if (!r) return;
    *r = *tmpl;
    snprintf(r->variant, sizeof r->variant, "%s", variant);
    snprintf(r->status, sizeof r->status, "ERROR");
    snprintf(r->note, sizeof r->note, "%s", msg);
}

static void run_case(backend_run *br, int ci)
{
    const bench_options *opt = br->opt;
    const bench_case *bc = &opt->cases[ci];
    const bench_shape *s = &bc->shape;
    const bench_device_rec *d = &br->res->devices[br->rec];
    case_data *cd = &br->cases[ci];

    bench_row tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.device_rec = br->rec;
    snprintf(tmpl.backend, sizeof tmpl.backend, "%s", br->name);
    snprintf(tmpl.device_name, sizeof tmpl.device_name, "%s", d->name);
    snprintf(tmpl.preset, sizeof tmpl.preset, "%s", bc->name);
    tmpl.shape = *s;
    snprintf(tmpl.mode, sizeof tmpl.mode, "%s", br->ops ? "stream" : br->is_cpu ? "host" : "host-path");
    snprintf(tmpl.variant, sizeof tmpl.variant, "-");
    tmpl.flops = bench_flops(s);
    tmpl.bytes = bench_bytes(s, (int)sgkt_mask_elem_size(opt->mask_type));
    tmpl.us_median = tmpl.us_min = tmpl.us_max = NAN;
    tmpl.gflops = tmpl.gbps = tmpl.floor_us = tmpl.floor_share = tmpl.rel_l2 = tmpl.max_abs = NAN;
    tmpl.input_sets = 1;

    char msg[512];
    progress(opt, "%s %s: inputs ...", br->name, bc->name);
    if (case_prepare(opt, s, cd) != 0) {
        case_error(br, &tmpl, "-", "out of host memory for the weights and inputs");
        return;
    }
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&cd->w, &desc);
    sgk_layer *layer = NULL;
    sgk_status st = sgk_layer_create(br->ctx, &desc, &layer);
    if (st != SGK_OK) {
        snprintf(msg, sizeof msg, "sgk_layer_create: %s: %s", sgk_status_string(st), sgk_last_error());
        case_error(br, &tmpl, "-", msg);
        return;
    }

    int count = 0;
    st = sgk_layer_variants(layer, s->B, s->N, NULL, NULL, 0, &count);
    const char **names = count > 0 ? calloc((size_t)count, sizeof *names) : NULL;
    int *supported = count > 0 ? calloc((size_t)count, sizeof *supported) : NULL;
    if (st == SGK_OK && names && supported)
        st = sgk_layer_variants(layer, s->B, s->N, names, supported, count, &count);
    if (st != SGK_OK || !names || !supported) {
        snprintf(msg, sizeof msg, "sgk_layer_variants: %s", st != SGK_OK ? sgk_last_error() : "none");
        case_error(br, &tmpl, "-", msg);
        goto out;
    }
    const char *auto_name = NULL;
    if (sgk_layer_variant_for(layer, s->B, s->N, &auto_name) != SGK_OK) auto_name = NULL;

    /* Which variants run, and the largest workspace any of them needs. */
    size_t ws_bytes = 0;
    int runs = 0;
    for (int v = 0; v < count; v++) {
        if (!bench_wants_variant(opt, names[v])) continue;
        if (!supported[v]) {
            if (opt->nvariants)
                add_note(br->res, "%s %s: variant %s does not support this shape; skipped", br->name, bc->name,
                         names[v]);
            continue;
        }
        size_t ws = 0;
        if (sgk_layer_set_variant(layer, names[v]) == SGK_OK &&
            sgk_workspace_size(layer, s->B, s->N, &ws) == SGK_OK && ws > ws_bytes)
            ws_bytes = ws;
        runs++;
    }
    if (runs == 0) {
        if (!auto_name)
            add_note(br->res, "%s %s: no variant supports this shape (%s)", br->name, bc->name, sgk_last_error());
        else if (opt->nvariants)
            add_note(br->res, "%s %s: none of the --variant names exist here", br->name, bc->name);
        goto out;
    }
    if (opt->check) case_reference(opt, bc->name, s, cd);

    case_buffers b;
    if (buffers_alloc(br, s, cd, ws_bytes, &b, msg, sizeof msg) != 0) {
        case_error(br, &tmpl, "-", msg);
        goto out;
    }
    tmpl.input_sets = b.sets;
    call_ctx c;
    memset(&c, 0, sizeof c);
    c.layer = layer;
    c.B = s->B;
    c.N = s->N;
    c.mask_type = opt->mask_type;
    c.sets = b.sets;
    c.nodes = b.nodes, c.pair = b.pair, c.mask = b.mask, c.out = b.out;
    c.ws = b.ws;
    c.ws_bytes = b.ws_bytes;
    c.ops = br->ops;
    c.dev = br->dev;
    c.stream = br->ops ? br->ops->stream(br->dev) : NULL;

    for (int v = 0; v < count; v++) {
        if (!supported[v] || !bench_wants_variant(opt, names[v])) continue;
        bench_row t = tmpl;
        snprintf(t.variant, sizeof t.variant, "%s", names[v]);
        t.is_auto = auto_name && !strcmp(auto_name, names[v]);
        st = sgk_layer_set_variant(layer, names[v]);
        if (st != SGK_OK) {
            snprintf(msg, sizeof msg, "sgk_layer_set_variant: %s", sgk_last_error());
            case_error(br, &t, names[v], msg);
            continue;
        }
        run_variant(br, &t, &c, &b, cd->ref);
    }
    buffers_free(br, &b);
out:
    free(names);
    free(supported);
    sgk_layer_destroy(layer);
}

static int add_device(bench_results *res, const char *backend, int device)
{
    bench_device_rec *d = realloc(res->devices, sizeof *d * (size_t)(res->ndevices + 1));
    if (!d) return -1;
    res->devices = d;
    d = &res->devices[res->ndevices];
    memset(d, 0, sizeof *d);
    snprintf(d->backend, sizeof d->backend, "%s", backend);
    d->device = device;
    d->launch_us = d->graph_launch_us = d->copy_gbps = NAN;
    return res->ndevices++;
}

static void run_backend(const bench_options *opt, bench_results *res, case_data *cases, const char *name)
{
    backend_run br;
    memset(&br, 0, sizeof br);
    br.opt = opt;
    br.res = res;
    br.cases = cases;
    br.name = name;
    br.is_cpu = !strcmp(name, "cpu");
    br.proto.warmup_s = opt->warmup_s;
    br.proto.min_repeat_s = opt->min_repeat_s;
    br.proto.repeats = opt->repeats;

    sgk_context_options co;
    sgk_context_options_init(&co);
    co.cpu_threads = opt->threads;
    sgk_status st = sgk_context_create(name, opt->device, &co, &br.ctx);
    if (st != SGK_OK) {
        add_note(res, "%s: sgk_context_create failed: %s", name, sgk_last_error());
        res->setup_errors++;
        return;
    }
    br.rec = add_device(res, name, opt->device);
    if (br.rec < 0) {
        sgk_context_destroy(br.ctx);
        res->setup_errors++;
        return;
    }
    bench_device_rec *d = &res->devices[br.rec];
    if (sgk_device_name(name, opt->device, d->name, sizeof d->name) != SGK_OK)
        snprintf(d->name, sizeof d->name, "%s device %d", name, opt->device);

    if (br.is_cpu) {
        d->threads = opt->threads ? opt->threads : res->machine.cpu_threads;
        snprintf(d->clock, sizeof d->clock, "monotonic clock");
    } else {
        const bench_dev_ops *ops = module_for(name);
        char err[384] = "";
        if (!ops) {
            snprintf(d->timer_note, sizeof d->timer_note,
                     "sgk-bench was built without a %s timer module: timed through sgk_forward "
                     "(allocation, copies, synchronisation included)", name);
        } else if (ops->open(br.ctx, &br.dev, err, sizeof err) != 0) {
            snprintf(d->timer_note, sizeof d->timer_note, "the %s timer module failed (%s): timed through "
                     "sgk_forward", name, err);
        } else {
            br.ops = ops;
            br.dclock = bench_device_clock(ops, br.dev);
            bench_dev_info info;
            ops->info(br.dev, &info);
            if (info.name[0]) snprintf(d->name, sizeof d->name, "%s", info.name);
            snprintf(d->driver, sizeof d->driver, "%s", info.driver);
            snprintf(d->clock, sizeof d->clock, "%s", ops->clock);
            d->peak_gflops = info.peak_gflops;
            snprintf(d->peak_source, sizeof d->peak_source, "%s", info.peak_source);
            d->cache_bytes = info.cache_bytes;
        }
        if (!br.ops) snprintf(d->clock, sizeof d->clock, "monotonic clock around sgk_forward");
    }
    double peak = bench_peak_override(opt, name);
    if (peak > 0) {
        d->peak_gflops = peak;
        snprintf(d->peak_source, sizeof d->peak_source, "--peak-gflops");
    } else if (br.is_cpu) {
        snprintf(d->peak_source, sizeof d->peak_source, "unknown (give --peak-gflops)");
    }
    measure_floor(&br, d);

    for (int ci = 0; ci < opt->ncases; ci++) run_case(&br, ci);

    if (br.ops) br.ops->close(br.dev);
    free(br.dclock.self);
    sgk_context_destroy(br.ctx);
}

int bench_run(const bench_options *opt, bench_results *res)
{
    bench_machine_read(&res->machine);
    for (int i = 0; i < opt->nbackends; i++) {
        sgk_backend_info info;
        if (sgk_backend_find(opt->backends[i], &info) != SGK_OK) {
            fprintf(stderr, "sgk-bench: %s\n", sgk_last_error());
            return 2;
        }
        if (!info.available) {
            fprintf(stderr, "sgk-bench: backend %s is unavailable here: %s\n", info.name, info.reason);
            return 2;
        }
        if (opt->device >= info.device_count) {
            fprintf(stderr, "sgk-bench: backend %s has %d device(s); --device %d is out of range\n", info.name,
                    info.device_count, opt->device);
            return 2;
        }
    }
    case_data *cases = calloc((size_t)opt->ncases, sizeof *cases);
    if (!cases) return 2;
    int n = sgk_backend_count();
    for (int i = 0; i < n; i++) {
        sgk_backend_info info;
        if (sgk_backend_get(i, &info) != SGK_OK || !bench_wants_backend(opt, info.name)) continue;
        if (!info.available) {
            add_note(res, "%s: unavailable: %s", info.name, info.reason);
            continue;
        }
        if (opt->device >= info.device_count) {
            add_note(res, "%s: no device %d (it has %d)", info.name, opt->device, info.device_count);
            continue;
        }
        run_backend(opt, res, cases, info.name);
    }
    progress_clear(opt);
    for (int ci = 0; ci < opt->ncases; ci++) case_free(&cases[ci]);
    free(cases);
    return 0;
}

int bench_list(const bench_options *opt)
{
    int n = sgk_backend_count();
    for (int i = 0; i < n; i++) {
        sgk_backend_info info;
        if (sgk_backend_get(i, &info) != SGK_OK || !bench_wants_backend(opt, info.name)) continue;
        if (!info.available) {
            printf("%-7s unavailable: %s\n", info.name, info.reason);
            continue;
        }
        printf("%-7s %d device(s)%s\n", info.name, info.device_count,
               module_for(info.name) || !strcmp(info.name, "cpu") ? "" : "  [no timer module: host path]");
        for (int dv = 0; dv < info.device_count; dv++) {
            char dn[256] = "";
            sgk_device_name(info.name, dv, dn, sizeof dn);
            printf("        device %d: %s\n", dv, dn);
        }
        sgk_context *ctx = NULL;
        if (sgk_context_create(info.name, opt->device, NULL, &ctx) != SGK_OK) {
            printf("        context: %s\n", sgk_last_error());
            continue;
        }
        for (int ci = 0; ci < opt->ncases; ci++) {
            const bench_shape *s = &opt->cases[ci].shape;
            sgkt_weights w;
            if (sgkt_weights_alloc(&w, s->D, s->H, s->P) != 0) continue;
            sgk_layer_desc desc;
            sgk_layer_desc_init(&desc);
            sgkt_weights_to_desc(&w, &desc);
            sgk_layer *layer = NULL;
            if (sgk_layer_create(ctx, &desc, &layer) == SGK_OK) {
                const char *names[64];
                int sup[64], count = 0;
                const char *auto_name = NULL;
                sgk_layer_variants(layer, s->B, s->N, names, sup, 64, &count);
                sgk_layer_variant_for(layer, s->B, s->N, &auto_name);
                printf("        %-6s %lld,%lld,%lld,%lld,%lld:", opt->cases[ci].name, (long long)s->B,
                       (long long)s->N, (long long)s->D, (long long)s->H, (long long)s->P);
                for (int v = 0; v < count && v < 64; v++)
                    printf(" %s%s%s", names[v], sup[v] ? "" : "(no)",
                           auto_name && !strcmp(auto_name, names[v]) ? "*" : "");
                printf("\n");
                sgk_layer_destroy(layer);
            } else {
                printf("        %-6s layer: %s\n", opt->cases[ci].name, sgk_last_error());
            }
            sgkt_weights_free(&w);
        }
        sgk_context_destroy(ctx);
    }
    printf("(* the variant sgk picks for that shape; (no) does not support it)\n");
    return 0;
}
