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

/* Fills the device record's launch costs and copy bandwidth. */
void measure_floor(backend_run *br, bench_device_rec *d);
/* Times, rates and the floor of a row from its timing. */
void finish_timing(const backend_run *br, bench_row *r, const bench_timing *t, int graph);

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

#endif
