/* Shared pieces of the reliability tests: which backend a test runs on, a
 * small layer with its inputs, bitwise comparison, and counting of live
 * allocations so that leaks show in builds without LeakSanitizer. */
#ifndef SGK_REL_H
#define SGK_REL_H

#include <stddef.h>
#include <stdint.h>

#include "sgk.h"
#include "util.h"

/* Exit status meson reads as "skipped". */
#define REL_SKIP 77

/* Exits with REL_SKIP (printing why) unless the backend can run here. */
void rel_require_backend(const char *backend);

/* A layer on one context with random weights, and one set of inputs. */
typedef struct rel_fixture {
    sgkt_weights w;
    sgkt_inputs in;
    sgk_context *ctx;
    sgk_layer *layer;
    size_t out_floats; /* B*N*D */
} rel_fixture;

/* Aborts the test program (it is a test, not the library) on any failure:
 * the fixture is the precondition of every check that follows. */
void rel_fixture_init(rel_fixture *f, const char *backend, int cpu_threads, int64_t B,
                      int64_t N, int64_t D, int64_t H, int64_t P, sgk_mask_type mask_type,
                      uint64_t seed);
void rel_fixture_free(rel_fixture *f);
/* A second set of inputs of the fixture's shape, for another thread. */
void rel_inputs_like(const rel_fixture *f, sgkt_inputs *in, uint64_t seed);

/* Names of the layer's variants that support (B, N); returns how many. */
int rel_variants(sgk_layer *layer, int64_t B, int64_t N, const char **names, int capacity);

/* sgk_forward on the fixture's layer with in; aborts unless SGK_OK. */
void rel_forward_ok(sgk_layer *layer, const sgkt_inputs *in, float *out);

/* 1 when the two float arrays have the same bytes. */
int rel_bitwise_equal(const float *a, const float *b, size_t n);
/* Largest |a - b| / max(1, |b|) over the arrays (NaN counts as infinite). */
double rel_max_rel_diff(const float *a, const float *b, size_t n);

/* ---- live allocation counting ----------------------------------------- */

/* 1 when malloc is counted by this program (a build without ASan; ASan's
 * allocator then owns malloc and LeakSanitizer checks leaks instead). */
int rel_live_supported(void);
/* Starts recording allocations made from now on (any thread). */
void rel_live_begin(void);
/* Stops recording; returns how many recorded allocations are still live
 * (0 when rel_live_supported() is 0). */
long rel_live_end(void);

/* Prints a line of figures to stdout, prefixed so that CI logs can grep. */
void rel_figure(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#endif
