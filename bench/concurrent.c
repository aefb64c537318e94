/* sgk-bench --device all: every device of a backend at once, to compare the
 * GPUs of one host and see what they do together. Each device has its own
 * context, layer, buffers and (on a GPU) the bench's device module, and is
 * checked once against the reference as a single device's rows are; then
 * one thread per device runs the variant sgk picks back to back on its own
 * stream while the others run theirs, in windows that start together. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"

/* The gate is held by the main thread until every thread exists and the
 * barrier counts them; the barrier starts the warm-up and each repeat's
 * window on every device together. */
typedef struct window {
    pthread_mutex_t gate;
    pthread_barrier_t barrier;
    int abort; /* the barrier could not be made: the threads return at once */
} window;

typedef struct dev_slot {
    backend_run br;
    char err[384]; /* why the device has no context */
    /* one case at a time */
    sgk_layer *layer;
    const char *variant;
    case_buffers b;
    int has_buffers;
    call_ctx c;
    bench_call_fn fn;
    int row;    /* its row in res->rows, -1 when it has none */
    int timed;  /* its checked call ran: it takes part in the windows */
    int failed; /* a call failed during them (c.err says why) */
    double *us; /* each repeat's window / calls, µs */
    long calls; /* over every repeat */
    window *w;
    pthread_t thread;
} dev_slot;

static void slot_error(dev_slot *d, const bench_row *tmpl, const char *msg)
{
    int before = d->br.res->nrows;
    case_error(&d->br, tmpl, tmpl->variant, msg);
    d->row = d->br.res->nrows > before ? before : -1;
}

/* Case ci's layer, buffers and check on one device; its row says how that
 * went, and d->timed whether the device runs in the windows. */
static void slot_prepare(dev_slot *d, int ci)
{
    backend_run *br = &d->br;
    const bench_options *opt = br->opt;
    const bench_shape *s = &opt->cases[ci].shape;
    case_data *cd = &br->cases[ci];
    bench_row tmpl;
    row_template(br, ci, &tmpl);
    snprintf(tmpl.mode, sizeof tmpl.mode, "concurrent");
    char msg[512];
    d->row = -1;
    if (!br->ctx) {
        slot_error(d, &tmpl, d->err);
        return;
    }
    if (case_prepare(opt, s, cd) != 0) {
        slot_error(d, &tmpl, "out of host memory for the weights and inputs");
        return;
    }
    sgk_layer_desc desc;
    case_desc(opt, cd, &desc);
    sgk_status st = sgk_layer_create(br->ctx, &desc, &d->layer);
    if (st != SGK_OK) {
        snprintf(msg, sizeof msg, "sgk_layer_create: %s: %s", sgk_status_string(st), sgk_last_error());
        slot_error(d, &tmpl, msg);
        return;
    }
    size_t ws = 0;
    if (sgk_layer_variant_for(d->layer, s->B, s->N, &d->variant) != SGK_OK) {
        if (must_work(s)) {
            snprintf(msg, sizeof msg, "no variant supports this shape, which every backend must run: %s",
                     sgk_last_error());
            slot_error(d, &tmpl, msg);
        } else {
            add_note(br->res, "%s %d %s: no variant supports this shape (%s)", br->name,
                     br->res->devices[br->rec].device, opt->cases[ci].name, sgk_last_error());
        }
        return;
    }
    snprintf(tmpl.variant, sizeof tmpl.variant, "%s", d->variant);
    tmpl.is_auto = 1;
    if (sgk_workspace_size(d->layer, s->B, s->N, &ws) != SGK_OK) {
        snprintf(msg, sizeof msg, "sgk_workspace_size: %s", sgk_last_error());
        slot_error(d, &tmpl, msg);
        return;
    }
    const double *ref = opt->check ? case_reference(opt, opt->cases[ci].name, s, cd) : NULL;
    if (buffers_alloc(br, s, cd, ws, &d->b, msg, sizeof msg) != 0) {
        slot_error(d, &tmpl, msg);
        return;
    }
    d->has_buffers = 1;
    tmpl.input_sets = d->b.sets;
    call_ctx_init(br, d->layer, s, &d->b, &d->c);
    d->fn = br->ops || br->is_cpu ? call_forward_device : call_forward_host;
    bench_row *r = new_row(br->res);
    if (!r) return;
    *r = tmpl;
    d->row = br->res->nrows - 1;
    sgkt_error e;
    memset(&e, 0, sizeof e);
    d->c.err[0] = 0;
    int ok = check_once(br, &d->c, d->fn, &d->b, ref, (size_t)(s->B * s->N * s->D), &e) == 0;
    if (!ok) snprintf(r->note, sizeof r->note, "%s", d->c.err);
    set_status(opt, r, ok, &e, ref);
    d->timed = ok;
}

static void slot_release(dev_slot *d)
{
    if (d->has_buffers) buffers_free(&d->br, &d->b);
    sgk_layer_destroy(d->layer);
    free(d->us);
    d->layer = NULL;
    d->variant = NULL;
    d->has_buffers = d->timed = d->failed = 0;
    d->us = NULL;
    d->calls = 0;
}

/* Calls first .. first+n-1, then waits for the device, so that a window
 * ends only when its calls have run. */
static int run_chunk(dev_slot *d, int first, int n)
{
    for (int i = 0; i < n; i++)
        if (d->fn(&d->c, first + i) != 0) return -1;
    return d->br.ops && d->br.ops->synchronize(d->br.dev) != 0 ? dev_failed(&d->c) : 0;
}

static void *device_thread(void *arg)
{
    dev_slot *d = arg;
    const bench_protocol *p = &d->br.proto;
    pthread_mutex_lock(&d->w->gate);
    pthread_mutex_unlock(&d->w->gate);
    if (d->w->abort) return NULL;
    pthread_barrier_wait(&d->w->barrier);
    /* Warm-up in doubling chunks while the other devices warm up too; the
     * last chunk, the longest, gives the time of a call under that load. */
    int chunk = 1, next = 0;
    double spent = 0, per_call = 0;
    for (;;) {
        double t0 = bench_now();
        if (run_chunk(d, next, chunk) != 0) {
            d->failed = 1;
            break;
        }
        double s = bench_now() - t0;
        next = (next + chunk) % d->c.sets;
        spent += s;
        per_call = s / chunk;
        if (spent >= p->warmup_s) break;
        if (chunk < (1 << 20)) chunk *= 2;
    }
    /* The window waits for its device every eighth of a repeat: a device
     * with calls queued far ahead would otherwise run on past the others'
     * windows, and the devices would not be measured at once. */
    double want = per_call > 0 ? p->min_repeat_s / 8 / per_call : 1;
    chunk = want > (1 << 20) ? (1 << 20) : (int)want + 1;
    for (int r = 0; r < p->repeats; r++) {
        pthread_barrier_wait(&d->w->barrier);
        if (d->failed) continue;
        long calls = 0;
        double t0 = bench_now(), s = 0;
        do {
            if (run_chunk(d, next, chunk) != 0) {
                d->failed = 1;
                break;
            }
            next = (next + chunk) % d->c.sets;
            calls += chunk;
            s = bench_now() - t0;
        } while (s < p->min_repeat_s);
        if (d->failed) continue;
        d->us[r] = s / (double)calls * 1e6;
        d->calls += calls;
    }
    return NULL;
}

/* The windows, on every device whose check ran; a device that cannot take
 * part is marked failed with the reason. */
static void run_windows(dev_slot *slots, int n)
{
    window w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.gate, NULL);
    pthread_mutex_lock(&w.gate);
    int started = 0;
    for (int k = 0; k < n; k++) {
        dev_slot *d = &slots[k];
        if (!d->timed) continue;
        d->w = &w;
        d->us = calloc((size_t)d->br.proto.repeats, sizeof *d->us);
        if (!d->us || pthread_create(&d->thread, NULL, device_thread, d) != 0) {
            snprintf(d->c.err, sizeof d->c.err, "%s", d->us ? "its thread could not start" : "out of host memory");
            d->failed = 1;
            d->timed = 0;
            continue;
        }
        started++;
    }
    w.abort = started > 0 && pthread_barrier_init(&w.barrier, NULL, (unsigned)started) != 0;
    pthread_mutex_unlock(&w.gate);
    for (int k = 0; k < n; k++)
        if (slots[k].timed) {
            pthread_join(slots[k].thread, NULL);
            if (w.abort) {
                snprintf(slots[k].c.err, sizeof slots[k].c.err, "the threads' barrier could not be made");
                slots[k].failed = 1;
            }
        }
    if (started > 0 && !w.abort) pthread_barrier_destroy(&w.barrier);
    pthread_mutex_destroy(&w.gate);
}

static int status_rank(const char *status)
{
    return !strcmp(status, "ERROR") ? 3 : !strcmp(status, "FAIL") ? 2 : !strcmp(status, "unchecked") ? 1 : 0;
}

/* The devices together: per repeat, 1 / (the sum of their calls per µs),
 * so that its GFLOP/s is the sum of theirs. Its status is the worst of
 * theirs; a device that did not run makes it an ERROR. */
static void add_aggregate(dev_slot *slots, int n)
{
    bench_results *res = slots[0].br.res;
    const int repeats = slots[0].br.proto.repeats;
    int first = -1;
    for (int k = 0; k < n && first < 0; k++)
        if (slots[k].row >= 0) first = k;
    if (first < 0) return;
    double *rate = calloc((size_t)repeats, sizeof *rate);
    bench_row *r = rate ? new_row(res) : NULL;
    if (!r) {
        free(rate);
        return;
    }
    *r = res->rows[slots[first].row];
    r->device_rec = -1;
    snprintf(r->device_name, sizeof r->device_name, "all");
    snprintf(r->mode, sizeof r->mode, "aggregate");
    r->variant[0] = r->note[0] = r->floor_bound[0] = 0;
    r->ffma_floor_us = r->copy_floor_us = r->tc_floor_us = r->floor_us = r->floor_share = NAN;
    r->rel_l2 = r->max_abs = 0;
    r->checked = 1;
    r->input_sets = 0;
    int worst = 0, ran = 0;
    long iters = 0;
    char left_out[128] = "";
    for (int k = 0; k < n; k++) {
        const dev_slot *d = &slots[k];
        if (d->row < 0) continue;
        const bench_row *dr = &res->rows[d->row];
        if (status_rank(dr->status) > worst) worst = status_rank(dr->status);
        if (!d->timed || d->failed) {
            size_t used = strlen(left_out);
            snprintf(left_out + used, sizeof left_out - used, "%s%d", used ? ", " : "",
                     res->devices[dr->device_rec].device);
            continue;
        }
        ran++;
        iters += d->calls / repeats;
        r->input_sets += dr->input_sets;
        for (int i = 0; i < repeats; i++) rate[i] += 1.0 / d->us[i];
        r->checked = r->checked && dr->checked;
        r->rel_l2 = fmax(r->rel_l2, dr->rel_l2);
        r->max_abs = fmax(r->max_abs, dr->max_abs);
        /* the variants, each named once (devices of one kind pick the same) */
        int named = 0;
        for (int j = 0; j < k && !named; j++)
            named = slots[j].timed && !slots[j].failed && !strcmp(slots[j].variant, d->variant);
        if (!named) {
            size_t used = strlen(r->variant);
            snprintf(r->variant + used, sizeof r->variant - used, "%s%s", used ? "," : "", d->variant);
        }
    }
    if (!r->variant[0]) snprintf(r->variant, sizeof r->variant, "-");
    r->is_auto = ran > 0;
    r->checked = r->checked && ran;
    if (!r->checked) r->rel_l2 = r->max_abs = NAN;
    if (ran) {
        for (int i = 0; i < repeats; i++) rate[i] = 1.0 / rate[i];
        bench_timing t;
        bench_timing_of(rate, repeats, iters, &t);
        timing_rates(r, &t);
    }
    free(rate);
    if (!ran) {
        snprintf(r->note, sizeof r->note, "no device ran (see their rows)");
        worst = 3;
    } else if (left_out[0]) {
        snprintf(r->note, sizeof r->note, "device(s) %s did not run (see their rows): the figures are of the others",
                 left_out);
        worst = 3;
    }
    static const char *const names[] = {"ok", "unchecked", "FAIL", "ERROR"};
    snprintf(r->status, sizeof r->status, "%s", names[worst]);
}

/* A device's row from its windows: µs per call of each, the floor of its
 * own device record. */
static void slot_finish(dev_slot *d)
{
    if (d->row < 0) return;
    bench_row *r = &d->br.res->rows[d->row];
    if (d->failed) {
        snprintf(r->note, sizeof r->note, "%s", d->c.err);
        snprintf(r->status, sizeof r->status, "ERROR");
        return;
    }
    if (!d->timed) return;
    bench_timing t;
    bench_timing_of(d->us, d->br.proto.repeats, d->calls / d->br.proto.repeats, &t);
    finish_timing(&d->br, r, &t, 0);
}

static void run_all_case(dev_slot *slots, int n, int ci)
{
    const bench_options *opt = slots[0].br.opt;
    for (int k = 0; k < n; k++) {
        progress(opt, "%s %s: device %d, check ...", slots[0].br.name, opt->cases[ci].name, k);
        slot_prepare(&slots[k], ci);
    }
    progress(opt, "%s %s: %d device(s) at once ...", slots[0].br.name, opt->cases[ci].name, n);
    run_windows(slots, n);
    /* the aggregate first: finishing a device's row sorts its windows */
    add_aggregate(slots, n);
    for (int k = 0; k < n; k++) {
        slot_finish(&slots[k]);
        slot_release(&slots[k]);
    }
}

void run_all_devices(const bench_options *opt, bench_results *res, case_data *cases, const char *name,
                     int device_count)
{
    dev_slot *slots = calloc((size_t)device_count, sizeof *slots);
    if (!slots) {
        add_note(res, "%s: --device all: out of host memory", name);
        res->setup_errors++;
        return;
    }
    int described = 0;
    for (; described < device_count; described++) {
        dev_slot *d = &slots[described];
        backend_run_init(&d->br, opt, res, cases, name);
        /* a device without a context still gets its record and rows,
         * which say why */
        device_open(&d->br, described, d->err, sizeof d->err);
        if (device_describe(&d->br, described) != 0) {
            device_close(&d->br);
            res->setup_errors++;
            break;
        }
    }
    if (described == device_count)
        for (int ci = 0; ci < opt->ncases; ci++) run_all_case(slots, device_count, ci);
    for (int k = 0; k < described; k++) device_close(&slots[k].br);
    free(slots);
}
