/* What the test programs share on top of util: picking the backend from the
 * command line, skipping when it cannot run, building layers, preparing a
 * case (weights, inputs, reference output) and running forward into a
 * guarded, NaN-poisoned output. */
#ifndef SGK_TESTS_HARNESS_H
#define SGK_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "cases.h"
#include "reference.h"
#include "sgk.h"
#include "util.h"

/* Exit code meson reads as "skipped". */
#define SGKT_EXIT_SKIP 77

/* argv[1], else SGK_TEST_BACKEND, else "cpu". */
const char *sgkt_backend_arg(int argc, char **argv);
/* 0 when the backend can run; otherwise prints "SKIP <backend>: <reason>"
 * and returns SGKT_EXIT_SKIP, or for a name sgk does not know prints an
 * error and returns 1. */
int sgkt_backend_usable(const char *backend, sgk_backend_info *info);
/* Devices to test: 0, plus SGK_TEST_DEVICE when set and different. Returns
 * the count written to devices (capacity 2). */
int sgkt_test_devices(int devices[2]);

/* The case of the table with that name, or NULL. */
const sgkt_case *sgkt_find_case(const char *name);

/* A case made concrete: weights, inputs and the reference output. */
typedef struct sgkt_prepared {
    uint64_t seed;
    sgkt_weights w;
    sgkt_inputs in;
    double *ref;  /* (B, N, D) */
    size_t n_out; /* B * N * D */
} sgkt_prepared;

/* Random weights and inputs for the case from seed, and the reference.
 * Returns 0, or -1 when out of memory. */
int sgkt_prepare(sgkt_prepared *p, const sgkt_case *c, uint64_t seed);
/* Reference output for p's current weights and inputs (after a caller
 * changed them). */
int sgkt_prepare_reference(sgkt_prepared *p);
void sgkt_prepared_free(sgkt_prepared *p);

/* A context on (backend, device) for a test group; prints FAIL with the
 * library's message and returns NULL when it cannot be made. */
sgk_context *sgkt_open_context(const char *backend, int device);

sgk_status sgkt_layer_from_weights(sgk_context *ctx, const sgkt_weights *w, sgk_layer **layer);

typedef struct sgkt_run {
    sgk_status status;
    float *out;      /* guarded buffer of n_out floats; free with sgkt_run_free */
    int guard_ok;    /* output guard (and workspace guard) intact */
    int untouched;   /* on error: output still all NaN poison */
} sgkt_run;

/* forward (device_api = 0) or forward_device on host pointers (1, cpu only)
 * into a NaN-poisoned guarded buffer. */
sgkt_run sgkt_run_forward(sgk_layer *layer, const sgkt_inputs *in, int device_api);
void sgkt_run_free(sgkt_run *r);

/* 1 when every (b, i) row with no edge is bitwise equal to nodes there. */
int sgkt_masked_rows_exact(const sgkt_inputs *in, const float *out);
/* 1 when out is bitwise equal to nodes everywhere. */
int sgkt_equals_nodes(const sgkt_inputs *in, const float *out);

#endif
