/* Runs the benchmark: for each backend, measure its floor, then for each
 * shape and variant check one call against the reference and time every
 * mode the backend has. --device all runs every device at once instead
 * (concurrent.c), through the helpers here. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "run_internal.h"

bench_row *new_row(bench_results *res)
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
    r->gflops = r->gbps = r->ffma_floor_us = r->copy_floor_us = r->tc_floor_us = r->floor_us = r->floor_share = NAN;
    r->rel_l2 = r->max_abs = NAN;
    return r;
}

void set_status(const bench_options *opt, bench_row *r, int call_ok, const sgkt_error *e, const double *ref)
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
    /* SPEC section 6: 16-bit outputs within rel L2 1e-2 of the reference on
     * the same rounded weights and inputs */
    const int f32 = opt->dtype == SGK_DTYPE_F32;
    snprintf(r->status, sizeof r->status, "%s",
             sgkt_error_ok(e, f32 ? SGKT_REL_L2_TOL : 1e-2, f32 ? SGKT_MAX_ABS_TOL : INFINITY) ? "ok" : "FAIL");
}

int check_once(backend_run *br, call_ctx *c, bench_call_fn fn, const case_buffers *b, const double *ref,
               size_t out_n, sgkt_error *e)
{
    size_t bytes = out_n * (size_t)bench_dtype_bytes(br->opt);
    if (br->ops) {
        if (br->ops->upload(br->dev, b->out[0], b->nan_out, bytes) != 0) return dev_failed(c);
        if (fn(c, 0) != 0) return -1;
        if (br->ops->synchronize(br->dev) != 0) return dev_failed(c);
        if (br->ops->download(br->dev, b->host_out, b->out[0], bytes) != 0) return dev_failed(c);
    } else {
        memcpy(b->host_out, b->nan_out, bytes);
        if (fn(c, 0) != 0) return -1;
    }
    const float *got = b->host_out;
    if (b->wide_out) {
        const uint16_t *h = b->host_out;
        for (size_t i = 0; i < out_n; i++)
            b->wide_out[i] = br->opt->dtype == SGK_DTYPE_BF16 ? sgk_f32_from_bf16(h[i]) : sgk_f32_from_f16(h[i]);
        got = b->wide_out;
    }
    if (ref) *e = sgkt_compare(got, ref, out_n);
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
    if (ok) {
        finish_timing(br, r, &t, graph);
    } else {
        if (!c->err[0] && br->ops) dev_failed(c); /* the device's own failure, not sgk's */
        snprintf(r->note, sizeof r->note, "%s", c->err);
    }
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

/* Memory of the training row: the backend's (through the bench's device
 * module) or, on cpu, host memory. */
static void *train_alloc(const backend_run *br, size_t bytes)
{
    void *p = NULL;
    if (br->ops) return br->ops->alloc(br->dev, bytes ? bytes : 1, &p) == 0 ? p : NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

static void train_free(const backend_run *br, void *p)
{
    if (!p) return;
    if (br->ops) br->ops->free(br->dev, p);
    else free(p);
}

static int train_put(const backend_run *br, void *dst, const void *src, size_t bytes)
{
    if (br->ops) return br->ops->upload(br->dev, dst, src, bytes);
    memcpy(dst, src, bytes);
    return 0;
}

static int train_get(const backend_run *br, void *dst, const void *src, size_t bytes)
{
    if (br->ops) return br->ops->synchronize(br->dev) != 0 ? -1 : br->ops->download(br->dev, dst, src, bytes);
    memcpy(dst, src, bytes);
    return 0;
}

/* --train: the backward row of a shape, on cpu or on a GPU the bench has a
 * device module for (its buffers, stream and clock, as the forward's).
 * One sgk_forward_train_device for the saved state, then
 * sgk_backward_device timed as the forward is, into every gradient; its
 * nodes gradient against sgk_ref_backward's (relative L2 <= 1e-4, the
 * reference's norm floored). The work model counts a backward as twice
 * the forward's FLOPs and bytes. */
static void run_train(backend_run *br, const bench_row *tmpl, sgk_layer *layer, const case_data *cd,
                      const call_ctx *fwd)
{
    const bench_shape *s = &tmpl->shape;
    size_t saved_bytes = 0, ws_bytes = 0;
    if (!br->ops && !br->is_cpu) return; /* a GPU without the bench's device module: no device buffers */
    if (sgk_saved_size(layer, s->B, s->N, &saved_bytes) != SGK_OK ||
        sgk_train_workspace_size(layer, s->B, s->N, &ws_bytes) != SGK_OK) {
        add_note(br->res, "%s %s: --train: %s", br->name, tmpl->preset, sgk_last_error());
        return;
    }
    bench_row *r = new_row(br->res);
    if (!r) return;
    *r = *tmpl;
    snprintf(r->mode, sizeof r->mode, "backward");
    snprintf(r->variant, sizeof r->variant, "train");
    r->is_auto = 0;
    r->input_sets = 1;
    r->flops *= 2, r->bytes *= 2, r->ffma_floor_us *= 2, r->copy_floor_us *= 2, r->tc_floor_us *= 2;
    progress(br->opt, "%s %s backward ...", r->backend, r->preset);
    const size_t nd = (size_t)(s->B * s->N * s->D);
    size_t counts[SGKT_N_GRADS];
    sgkt_grad_counts(s->B, s->N, s->D, s->H, s->P, counts);
    /* each gradient a buffer of its own (an OpenCL buffer cannot be offset) */
    void *gbuf[SGKT_N_GRADS] = {0};
    float *d_out = malloc(nd * sizeof(float)), *got = malloc(nd * sizeof(float));
    void *dd_out = train_alloc(br, nd * sizeof(float)), *out = train_alloc(br, nd * sizeof(float));
    void *saved = train_alloc(br, saved_bytes), *ws = train_alloc(br, ws_bytes);
    sgk_grads g;
    int ok = d_out && got && dd_out && out && saved && ws;
    for (int k = 0; k < SGKT_N_GRADS && ok; k++) {
        gbuf[k] = train_alloc(br, counts[k] * sizeof(float));
        *sgkt_grad_slot(&g, k) = gbuf[k];
        ok = gbuf[k] != NULL;
    }
    if (!ok) snprintf(r->note, sizeof r->note, "out of memory for the backward's buffers");
    call_ctx c = *fwd;
    c.err[0] = 0;
    if (ok) {
        sgkt_rng rng;
        sgkt_rng_seed(&rng, br->opt->seed ^ 0xbacull);
        sgkt_fill_normal(&rng, d_out, nd, 0.0, 1.0);
        for (size_t k = 0; k < nd; k++) got[k] = NAN; /* an unwritten gradient cannot pass */
        ok = train_put(br, dd_out, d_out, nd * sizeof(float)) == 0 && train_put(br, gbuf[0], got, nd * sizeof(float)) == 0;
        if (!ok) snprintf(r->note, sizeof r->note, "copying to the device failed");
    }
    if (ok) {
        c.saved = saved, c.d_out = dd_out, c.grads = &g, c.ws = ws, c.ws_bytes = ws_bytes;
        sgk_status st = sgk_forward_train_device(layer, s->B, s->N, c.nodes[0], c.pair[0], c.mask[0], c.mask_type,
                                                 out, saved, ws, ws_bytes, c.stream);
        if (st != SGK_OK) ok = sgk_failed(&c, "sgk_forward_train_device", st) == 0;
        if (ok) ok = call_backward_device(&c, 0) == 0;
        if (ok && train_get(br, got, gbuf[0], nd * sizeof(float)) != 0) {
            ok = 0;
            snprintf(r->note, sizeof r->note, "copying the nodes gradient back failed");
        }
    }
    int checked_ok = 1;
    double rel = NAN, worst = NAN;
    if (ok && br->opt->check) {
        sgk_ref_layer ref;
        sgkt_weights_to_ref(&cd->w, &ref);
        sgk_ref_grads rg;
        memset(&rg, 0, sizeof rg);
        rg.nodes = malloc(nd * sizeof(double));
        if (rg.nodes && sgk_ref_backward(&ref, s->B, s->N, cd->in.nodes, cd->in.pair_feats, cd->in.edge_mask,
                                         c.mask_type, d_out, &rg) == 0) {
            worst = sgkt_compare(got, rg.nodes, nd).max_abs;
            rel = sgkt_rel_l2_floored(got, rg.nodes, nd);
            checked_ok = rel <= 1e-4;
        } else {
            snprintf(r->note, sizeof r->note, "the reference backward could not be computed (out of memory?)");
            checked_ok = -1;
        }
        free(rg.nodes);
    }
    bench_timing t;
    bench_clock hc = bench_host_clock();
    if (ok) ok = bench_measure(br->ops ? &br->dclock : &hc, call_backward_device, &c, &br->proto, &t) == 0;
    if (ok) finish_timing(br, r, &t, 0);
    else if (!r->note[0]) snprintf(r->note, sizeof r->note, "%s", c.err);
    if (!ok) snprintf(r->status, sizeof r->status, "ERROR");
    else if (!br->opt->check) snprintf(r->status, sizeof r->status, "unchecked");
    else if (checked_ok < 0) snprintf(r->status, sizeof r->status, "ERROR");
    else {
        r->checked = 1;
        r->rel_l2 = rel;
        r->max_abs = worst;
        snprintf(r->status, sizeof r->status, "%s", checked_ok ? "ok" : "FAIL");
    }
    for (int k = 0; k < SGKT_N_GRADS; k++) train_free(br, gbuf[k]);
    train_free(br, dd_out);
    train_free(br, out);
    train_free(br, saved);
    train_free(br, ws);
    free(d_out);
    free(got);
}

void case_error(backend_run *br, const bench_row *tmpl, const char *variant, const char *msg)
{
    bench_row *r = new_row(br->res);
    if (!r) return;
    *r = *tmpl;
    snprintf(r->variant, sizeof r->variant, "%s", variant);
    snprintf(r->status, sizeof r->status, "ERROR");
    snprintf(r->note, sizeof r->note, "%s", msg);
}

int must_work(const bench_shape *s)
{
    return s->N <= 4096 && s->D <= 1024 && s->D / s->H <= 256 && s->P <= 128;
}

void row_template(const backend_run *br, int ci, bench_row *tmpl)
{
    const bench_options *opt = br->opt;
    const bench_shape *s = &opt->cases[ci].shape;
    const bench_device_rec *d = &br->res->devices[br->rec];
    memset(tmpl, 0, sizeof *tmpl);
    tmpl->device_rec = br->rec;
    snprintf(tmpl->backend, sizeof tmpl->backend, "%s", br->name);
    snprintf(tmpl->device_name, sizeof tmpl->device_name, "%s", d->name);
    snprintf(tmpl->preset, sizeof tmpl->preset, "%s", opt->cases[ci].name);
    tmpl->shape = *s;
    snprintf(tmpl->mode, sizeof tmpl->mode, "%s", br->ops ? "stream" : br->is_cpu ? "host" : "host-path");
    snprintf(tmpl->variant, sizeof tmpl->variant, "-");
    tmpl->flops = bench_flops(s);
    tmpl->bytes = bench_bytes(s, (int)sgkt_mask_elem_size(opt->mask_type), bench_dtype_bytes(opt));
    tmpl->us_median = tmpl->us_min = tmpl->us_max = NAN;
    tmpl->gflops = tmpl->gbps = tmpl->floor_us = tmpl->floor_share = tmpl->rel_l2 = tmpl->max_abs = NAN;
    tmpl->ffma_floor_us = d->peak_gflops > 0 ? tmpl->flops / (d->peak_gflops * 1e9) * 1e6 : NAN;
    tmpl->copy_floor_us = d->copy_gbps > 0 ? tmpl->bytes / (d->copy_gbps * 1e9) * 1e6 : NAN;
    tmpl->tc_floor_us = opt->dtype != SGK_DTYPE_F32 && d->peak16_gflops > 0
                            ? tmpl->flops / (d->peak16_gflops * 1e9) * 1e6
                            : NAN;
    tmpl->input_sets = 1;
}

void call_ctx_init(const backend_run *br, sgk_layer *layer, const bench_shape *s, const case_buffers *b,
                   call_ctx *c)
{
    memset(c, 0, sizeof *c);
    c->layer = layer;
    c->B = s->B;
    c->N = s->N;
    c->mask_type = br->opt->mask_type;
    c->sets = b->sets;
    c->nodes = b->nodes, c->pair = b->pair, c->mask = b->mask, c->out = b->out;
    c->ws = b->ws;
    c->ws_bytes = b->ws_bytes;
    c->ops = br->ops;
    c->dev = br->dev;
    c->stream = br->ops ? br->ops->stream(br->dev) : NULL;
}

static void run_case(backend_run *br, int ci)
{
    const bench_options *opt = br->opt;
    const bench_case *bc = &opt->cases[ci];
    const bench_shape *s = &bc->shape;
    case_data *cd = &br->cases[ci];

    bench_row tmpl;
    row_template(br, ci, &tmpl);

    char msg[512];
    progress(opt, "%s %s: inputs ...", br->name, bc->name);
    if (case_prepare(opt, s, cd) != 0) {
        case_error(br, &tmpl, "-", "out of host memory for the weights and inputs");
        return;
    }
    sgk_layer_desc desc;
    case_desc(opt, cd, &desc);
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
        if (!auto_name && must_work(s)) {
            snprintf(msg, sizeof msg, "no variant supports this shape, which every backend must run: %s",
                     sgk_last_error());
            case_error(br, &tmpl, "-", msg);
        } else if (!auto_name)
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
    call_ctx_init(br, layer, s, &b, &c);

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
    if (opt->train && opt->dtype != SGK_DTYPE_F32)
        add_note(br->res, "%s %s: --train: the training calls run f32 layers only", br->name, bc->name);
    else if (opt->train)
        run_train(br, &tmpl, layer, cd, &c);
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

/* Threads the cpu backend will use: --threads, else what OpenMP would pick
 * by default (OMP_NUM_THREADS, else every logical CPU). */
static int cpu_backend_threads(const bench_options *opt, const bench_machine *m)
{
    if (opt->threads) return opt->threads;
    const char *env = getenv("OMP_NUM_THREADS");
    int n = env ? atoi(env) : 0;
    return n > 0 ? n : m->cpu_threads;
}

void backend_run_init(backend_run *br, const bench_options *opt, bench_results *res, case_data *cases,
                      const char *name)
{
    memset(br, 0, sizeof *br);
    br->opt = opt;
    br->res = res;
    br->cases = cases;
    br->name = name;
    br->rec = -1;
    br->is_cpu = !strcmp(name, "cpu") && !module_for(name);
    br->proto.warmup_s = opt->warmup_s;
    br->proto.min_repeat_s = opt->min_repeat_s;
    br->proto.repeats = opt->repeats;
}

int device_open(backend_run *br, int device, char *err, size_t err_len)
{
    sgk_context_options co;
    sgk_context_options_init(&co);
    co.cpu_threads = br->opt->threads;
    sgk_status st = sgk_context_create(br->name, device, &co, &br->ctx);
    if (st == SGK_OK) return 0;
    br->ctx = NULL;
    snprintf(err, err_len, "sgk_context_create failed: %s", sgk_last_error());
    return -1;
}

/* The bench's device module on the context's device, or why it runs on the
 * host path. */
static void open_module(backend_run *br, bench_device_rec *d)
{
    const bench_dev_ops *ops = module_for(br->name);
    char err[384] = "";
    if (!ops) {
        snprintf(d->timer_note, sizeof d->timer_note,
                 "sgk-bench was built without a %s timer module: timed through sgk_forward "
                 "(allocation, copies, synchronisation included)", br->name);
    } else if (ops->open(br->ctx, &br->dev, err, sizeof err) != 0) {
        snprintf(d->timer_note, sizeof d->timer_note, "the %s timer module failed (%s): timed through "
                 "sgk_forward", br->name, err);
    } else {
        br->ops = ops;
        br->dclock = bench_device_clock(ops, br->dev);
        bench_dev_info info;
        ops->info(br->dev, &info);
        if (info.name[0]) snprintf(d->name, sizeof d->name, "%s", info.name);
        snprintf(d->driver, sizeof d->driver, "%s", info.driver);
        snprintf(d->clock, sizeof d->clock, "%s", info.clock[0] ? info.clock : ops->clock);
        d->peak_gflops = info.peak_gflops;
        snprintf(d->peak_source, sizeof d->peak_source, "%s", info.peak_source);
        d->peak16_gflops = info.peak16_gflops;
        snprintf(d->peak16_source, sizeof d->peak16_source, "%s", info.peak16_source);
        d->cache_bytes = info.cache_bytes;
    }
    if (!br->ops) snprintf(d->clock, sizeof d->clock, "monotonic clock around sgk_forward");
}

int device_describe(backend_run *br, int device)
{
    const bench_options *opt = br->opt;
    const char *name = br->name;
    br->rec = add_device(br->res, name, device);
    if (br->rec < 0) return -1;
    bench_device_rec *d = &br->res->devices[br->rec];
    if (sgk_device_name(name, device, d->name, sizeof d->name) != SGK_OK)
        snprintf(d->name, sizeof d->name, "%s device %d", name, device);

    if (!br->ctx) {
        snprintf(d->clock, sizeof d->clock, "none: no context");
    } else if (br->is_cpu) {
        d->threads = cpu_backend_threads(opt, &br->res->machine);
        snprintf(d->clock, sizeof d->clock, "monotonic clock");
    } else {
        open_module(br, d);
    }
    double peak = bench_peak_override(opt->peak_gflops, opt->npeak_gflops, name);
    if (peak > 0) {
        d->peak_gflops = peak;
        snprintf(d->peak_source, sizeof d->peak_source, "--peak-gflops");
    } else if (!(d->peak_gflops > 0) && strcmp(name, "cpu") != 0) {
        d->peak_gflops = BENCH_H200_PEAK_GFLOPS;
        snprintf(d->peak_source, sizeof d->peak_source, "H200 default of SPEC section 5; not derived here, "
                 "--peak-gflops sets this device's");
    } else if (!(d->peak_gflops > 0)) {
        snprintf(d->peak_source, sizeof d->peak_source, "unknown (give --peak-gflops)");
    }
    if (br->ctx) measure_floor(br, d);
    double gbps = bench_peak_override(opt->peak_gbps, opt->npeak_gbps, name);
    if (gbps > 0) {
        d->copy_gbps = gbps;
        snprintf(d->copy_source, sizeof d->copy_source, "--peak-gbps");
    } else if (d->copy_gbps > 0) {
        snprintf(d->copy_source, sizeof d->copy_source, "measured: %s", d->copy_how);
    } else if (strcmp(name, "cpu") != 0) {
        d->copy_gbps = BENCH_H200_COPY_GBPS;
        snprintf(d->copy_source, sizeof d->copy_source, "H200 default of SPEC section 5; not measured here, "
                 "--peak-gbps sets this device's");
    } else {
        snprintf(d->copy_source, sizeof d->copy_source, "unknown (give --peak-gbps)");
    }
    return 0;
}

void device_close(backend_run *br)
{
    if (br->ops) br->ops->close(br->dev);
    free(br->dclock.self);
    if (br->ctx) sgk_context_destroy(br->ctx);
    br->ops = NULL;
    br->dev = NULL;
    br->dclock.self = NULL;
    br->ctx = NULL;
}

static void run_backend(const bench_options *opt, bench_results *res, case_data *cases, const char *name)
{
    backend_run br;
    backend_run_init(&br, opt, res, cases, name);
    char err[384];
    if (device_open(&br, opt->device, err, sizeof err) != 0) {
        add_note(res, "%s: %s", name, err);
        res->setup_errors++;
        return;
    }
    if (device_describe(&br, opt->device) == 0)
        for (int ci = 0; ci < opt->ncases; ci++) run_case(&br, ci);
    else
        res->setup_errors++;
    device_close(&br);
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
        if (opt->all_devices) run_all_devices(opt, res, cases, info.name, info.device_count);
        else run_backend(opt, res, cases, info.name);
    }
    progress_clear(opt);
    for (int ci = 0; ci < opt->ncases; ci++) case_free(&cases[ci]);
    free(cases);
    return 0;
}
