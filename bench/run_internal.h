/* Pieces of one sgk-bench run shared by run.c and its helpers. */
#ifndef SGK_BENCH_RUN_INTERNAL_H
#define SGK_BENCH_RUN_INTERNAL_H

#include <stddef.h>

#include "bench.h"
#include "device.h"
#include "measure.h"
#include "util.h"

/* Weights, inputs and the reference of one shape, shared by every backend. */
typedef struct case_data {
    int ready;
    sgkt_weights w;
    sgkt_inputs in;
    /* --dtype bf16 or f16: w and in rounded to it (what the reference
     * sees), and the same values in it */
    sgkt_case16 h;
    double *ref;
    int ref_failed;
} case_data;

void progress(const bench_options *opt, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void progress_clear(const bench_options *opt);
void add_note(bench_results *res, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int case_prepare(const bench_options *opt, const bench_shape *s, case_data *cd);
const double *case_reference(const bench_options *opt, const char *name, const bench_shape *s, case_data *cd);
void case_free(case_data *cd);
/* The layer of a case as --dtype asks for it. */
void case_desc(const bench_options *opt, const case_data *cd, sgk_layer_desc *desc);

/* What a timed call needs; fn(arg = call_ctx *, i) uses input set i % sets. */
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
    /* call_backward_device: set 0's inputs, the forward's saved state */
    const void *saved, *d_out;
    const sgk_grads *grads;
    char err[384];
} call_ctx;

int dev_failed(call_ctx *c);
/* c->err from a failed sgk call; returns -1. */
int sgk_failed(call_ctx *c, const char *call, sgk_status st);
int call_forward_device(void *arg, int i);
int call_forward_host(void *arg, int i);
int call_graph(void *arg, int i);
int call_empty(void *arg, int i);
int call_copy(void *arg, int i);
int call_backward_device(void *arg, int i);
/* The bench's timer module for a backend, NULL when none was built. */
const bench_dev_ops *module_for(const char *backend);

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

void backend_run_init(backend_run *br, const bench_options *opt, bench_results *res, case_data *cases,
                      const char *name);
/* The context of device `device`; -1 with the reason in err (br->ctx NULL). */
int device_open(backend_run *br, int device, char *err, size_t err_len);
/* Adds br's device record: its name, the bench's device module, the peaks
 * and (with a context) the measured floor. -1: out of host memory. */
int device_describe(backend_run *br, int device);
void device_close(backend_run *br);

/* Fills the device record's launch costs and copy bandwidth. */
void measure_floor(backend_run *br, bench_device_rec *d);
/* Times and rates of a row from its timing. */
void timing_rates(bench_row *r, const bench_timing *t);
/* Those and the floor of the row's device. */
void finish_timing(const backend_run *br, bench_row *r, const bench_timing *t, int graph);

/* A blank row appended to res, NULL when out of memory (rows may move). */
bench_row *new_row(bench_results *res);
/* The row of case ci on br's device: shape, work, floors, the mode. */
void row_template(const backend_run *br, int ci, bench_row *tmpl);
/* An ERROR row from tmpl with that variant and reason. */
void case_error(backend_run *br, const bench_row *tmpl, const char *variant, const char *msg);
/* Sizes every backend must run (SPEC section 1); past them "unsupported" is
 * an honest answer rather than a failure. */
int must_work(const bench_shape *s);
/* status, checked and the errors of a row from its checked call. */
void set_status(const bench_options *opt, bench_row *r, int call_ok, const sgkt_error *e, const double *ref);

/* Buffers of one shape: device buffers with every input set uploaded, or
 * host buffers (cpu backend, host path). */
typedef struct case_buffers {
    int sets;
    void **nodes, **pair, **mask, **out;
    void *ws;
    size_t ws_bytes;
    void *host_out; /* --dtype's elements */
    void *nan_out;
    float *wide_out; /* host_out as floats, to compare (16-bit dtypes) */
} case_buffers;

int buffers_alloc(backend_run *br, const bench_shape *s, const case_data *cd, size_t ws_bytes,
                  case_buffers *b, char *err, size_t err_len);
void buffers_free(backend_run *br, case_buffers *b);
void call_ctx_init(const backend_run *br, sgk_layer *layer, const bench_shape *s, const case_buffers *b,
                   call_ctx *c);
/* Poisons out of set 0, runs one call (or graph 0), reads it back and, with
 * ref, compares; 0, or -1 with the reason in c->err. */
int check_once(backend_run *br, call_ctx *c, bench_call_fn fn, const case_buffers *b, const double *ref,
               size_t out_n, sgkt_error *e);

/* --device all on one backend of device_count devices (concurrent.c). */
void run_all_devices(const bench_options *opt, bench_results *res, case_data *cases, const char *name,
                     int device_count);

#endif
