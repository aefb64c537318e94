/* sgk_forward_device with every buffer at an offset from a 16-byte
 * boundary: 4 and 12 bytes for the float buffers and the workspace (the API
 * asks for float alignment only), 1 and 3 bytes for a u8 mask. GPU kernels
 * take wide loads and stores only where a pointer allows them (CUDA's vec
 * flags); sgk_forward copies into fresh device buffers, which are aligned,
 * so only device pointers the caller offsets reach the narrow paths. This
 * test allocates device memory itself: the cpu backend's is host memory,
 * cuda's comes from the driver API (libcuda.so.1 through dlopen: the tests
 * link no GPU runtime), hip's from libamdhip64 likewise.
 *
 * Each case, variant and offset runs with the output poisoned (NaN) and
 * guard bytes before and after every buffer; the output must match the
 * double reference (and fully masked rows their nodes rows, bit for bit),
 * the inputs and every guard must be unchanged.
 *
 * Usage: test_device_offsets BACKEND (cpu, cuda or hip), device 0. Exits 77 (skip)
 * when the backend cannot run here; SGK_TEST_SEED as in test_conformance;
 * SGK_TEST_QUICK leaves out the big shapes, as there. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devmem.h"
#include "harness.h"

#define DEFAULT_SEED 0x4f464631ull /* "OFF1" */
#define MAX_VARIANTS 32
#define PRE 64   /* guard bytes before a buffer's 16-byte boundary */
#define POST 256 /* guard bytes after a buffer */
#define GUARD_BYTE 0xA5

/* ---- one buffer: guard, offset, data, guard ---------------------------- */

typedef struct dbuf {
    void *base;     /* the device allocation */
    size_t total;   /* its bytes */
    size_t at;      /* the data's byte offset in it: PRE + offset */
    size_t bytes;   /* the data's bytes */
    unsigned char *image; /* what the whole allocation must hold afterwards (inputs, guards) */
} dbuf;

static int dbuf_make(const devmem *m, dbuf *b, const void *data, size_t bytes, size_t offset)
{
    memset(b, 0, sizeof *b);
    b->at = PRE + offset;
    b->bytes = bytes;
    b->total = PRE + 16 + bytes + POST;
    b->image = malloc(b->total);
    if (!b->image || m->alloc(&b->base, b->total) != 0)
        return -1;
    memset(b->image, GUARD_BYTE, b->total);
    if (data)
        memcpy(b->image + b->at, data, bytes);
    return m->h2d(b->base, b->image, b->total);
}

static void *dbuf_ptr(const dbuf *b) { return (unsigned char *)b->base + b->at; }

/* 1 when the allocation holds image everywhere outside [at, at + skip). */
static int dbuf_intact(const devmem *m, const dbuf *b, size_t skip, unsigned char *scratch)
{
    if (m->d2h(scratch, b->base, b->total) != 0)
        return 0;
    return memcmp(scratch, b->image, b->at) == 0 &&
           memcmp(scratch + b->at + skip, b->image + b->at + skip, b->total - b->at - skip) == 0;
}

static void dbuf_free(const devmem *m, dbuf *b)
{
    if (b->base)
        m->release(b->base);
    free(b->image);
    memset(b, 0, sizeof *b);
}

/* ---- the test --------------------------------------------------------- */

static const char *const case_names[] = {
    "preset_seed", "preset_mid", "preset_large", "odd_sizes", "heads_8_dim_256_n21",
    "heads_8_dim_256_n45_pair_20", "mask_odd_values_u8", "pair_dim_33",
};

/* One run at the offsets; returns 1 when it passes (prints FAIL otherwise). */
static int run_offsets(const devmem *m, sgk_layer *layer, const sgkt_case *c, const sgkt_prepared *p,
                       const char *variant, size_t off_f, size_t off_mask, size_t off_ws)
{
    const sgkt_inputs *in = &p->in;
    const size_t n = p->n_out, out_bytes = n * sizeof(float);
    const size_t pair_bytes = (size_t)(in->B * in->N * in->N * in->P) * sizeof(float);
    const size_t mask_bytes = (size_t)(in->B * in->N * in->N) * sgkt_mask_elem_size(in->mask_type);
    size_t ws = 0;
    sgk_status st = sgk_workspace_size(layer, in->B, in->N, &ws);
    dbuf nodes = {0}, pair = {0}, mask = {0}, out = {0}, work = {0};
    float *poison = malloc(out_bytes), *got = malloc(out_bytes);
    size_t scratch_len = PRE + 16 + POST + (out_bytes > pair_bytes ? out_bytes : pair_bytes) + mask_bytes + ws;
    unsigned char *scratch = malloc(scratch_len);
    const char *why = NULL;
    char detail[256] = "";
    if (!poison || !got || !scratch || st != SGK_OK)
        why = st != SGK_OK ? "sgk_workspace_size failed" : "out of host memory";
    if (!why) {
        sgkt_poison_nan(poison, n);
        if (dbuf_make(m, &nodes, in->nodes, (size_t)(in->B * in->N * in->D) * sizeof(float), off_f) ||
            dbuf_make(m, &pair, in->pair_feats, pair_bytes, off_f) ||
            dbuf_make(m, &mask, in->edge_mask, mask_bytes, off_mask) || dbuf_make(m, &out, poison, out_bytes, off_f) ||
            (ws > 0 && dbuf_make(m, &work, NULL, ws, off_ws)))
            why = "device allocation or copy failed";
    }
    if (!why) {
        st = sgk_forward_device(layer, in->B, in->N, dbuf_ptr(&nodes), dbuf_ptr(&pair), dbuf_ptr(&mask),
                                in->mask_type, dbuf_ptr(&out), ws > 0 ? dbuf_ptr(&work) : NULL, ws, NULL);
        if (st != SGK_OK) {
            why = "status";
            snprintf(detail, sizeof detail, "%s: %s", sgk_status_string(st), sgk_last_error());
        } else if (m->sync() != 0 || m->d2h(got, dbuf_ptr(&out), out_bytes) != 0) {
            why = "synchronising or copying the output back failed";
        }
    }
    if (!why) {
        sgkt_error e = sgkt_compare(got, p->ref, n);
        if (!sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL)) {
            why = "differs from the reference";
            snprintf(detail, sizeof detail, "rel_l2=%.3e max_abs=%.3e nonfinite_mismatch=%zu at %zu: got %.9g ref %.9g",
                     e.rel_l2, e.max_abs, e.mismatched_nonfinite, e.worst, (double)got[e.worst], p->ref[e.worst]);
        } else if (!sgkt_masked_rows_exact(in, got)) {
            why = "a fully masked row is not bitwise equal to its nodes row";
        } else if (!dbuf_intact(m, &out, out_bytes, scratch)) {
            why = "bytes around the output were written";
        } else if (!dbuf_intact(m, &nodes, 0, scratch) || !dbuf_intact(m, &pair, 0, scratch) ||
                   !dbuf_intact(m, &mask, 0, scratch)) {
            why = "an input or the bytes around it changed";
        } else if (ws > 0 && !dbuf_intact(m, &work, ws, scratch)) {
            why = "bytes around the workspace were written";
        }
    }
    if (why)
        printf("FAIL variant=%s case=%s (B=%lld N=%lld D=%lld H=%lld P=%lld, %s mask) offsets: floats +%zu "
               "bytes, mask +%zu, workspace +%zu; seed=0x%016llx: %s %s\n",
               variant, c->name, (long long)c->B, (long long)c->N, (long long)c->D, (long long)c->H,
               (long long)c->P, in->mask_type == SGK_MASK_U8 ? "u8" : "f32", off_f, off_mask, off_ws,
               (unsigned long long)p->seed, why, detail);
    dbuf_free(m, &nodes);
    dbuf_free(m, &pair);
    dbuf_free(m, &mask);
    dbuf_free(m, &out);
    dbuf_free(m, &work);
    free(poison);
    free(got);
    free(scratch);
    return why == NULL;
}

int main(int argc, char **argv)
{
    const char *backend = sgkt_backend_arg(argc, argv);
    sgk_backend_info info;
    int usable = sgkt_backend_usable(backend, &info);
    if (usable != 0)
        return usable;
    sgk_context *ctx = sgkt_open_context(backend, 0);
    if (!ctx)
        return 1;
    void *native = NULL;
    int ordinal = 0;
    if (sgk_context_native(ctx, SGK_NATIVE_DEVICE_ORDINAL, &native) == SGK_OK)
        ordinal = (int)(intptr_t)native;
    devmem m;
    char why[256];
    if (devmem_open(backend, ordinal, &m, why, sizeof why) != 0) {
        printf("SKIP %s: %s\n", backend, why);
        sgk_context_destroy(ctx);
        return SGKT_EXIT_SKIP;
    }
    const char *seed_env = getenv("SGK_TEST_SEED");
    const uint64_t base_seed = seed_env ? strtoull(seed_env, NULL, 0) : DEFAULT_SEED;
    printf("device_offsets: backend=%s device memory from %s, base seed 0x%016llx (set SGK_TEST_SEED to change)\n",
           backend, m.what, (unsigned long long)base_seed);

    /* floats at +4 and +12 bytes (the u8 mask at +1 and +3), the workspace at +4 */
    static const size_t off_f[] = {4, 12}, off_u8[] = {1, 3};
    int runs = 0, failed = 0;
    for (size_t k = 0; k < sizeof case_names / sizeof case_names[0]; k++) {
        const sgkt_case *c = sgkt_find_case(case_names[k]);
        if (!c) {
            printf("FAIL case %s is not in the case table\n", case_names[k]);
            failed++;
            continue;
        }
        if (!sgkt_case_enabled(c))
            continue;
        sgkt_prepared p;
        if (sgkt_prepare(&p, c, sgkt_seed_mix(base_seed, (uint64_t)k)) != 0) {
            printf("FAIL case %s: out of memory preparing inputs and reference\n", c->name);
            failed++;
            continue;
        }
        sgk_layer *layer = NULL;
        sgk_status st = sgkt_layer_from_weights(ctx, &p.w, &layer);
        const char *names[MAX_VARIANTS];
        int supported[MAX_VARIANTS], count = 0;
        if (st == SGK_OK)
            st = sgk_layer_variants(layer, c->B, c->N, names, supported, MAX_VARIANTS, &count);
        if (st != SGK_OK || count <= 0) {
            printf("FAIL case %s: layer or variants: %s %s\n", c->name, sgk_status_string(st), sgk_last_error());
            failed++;
        }
        if (count > MAX_VARIANTS)
            count = MAX_VARIANTS;
        int case_runs = 0;
        for (int v = 0; v < count && st == SGK_OK; v++) {
            if (!supported[v] || sgk_layer_set_variant(layer, names[v]) != SGK_OK)
                continue;
            for (size_t o = 0; o < 2; o++) {
                const size_t om = p.in.mask_type == SGK_MASK_U8 ? off_u8[o] : off_f[o];
                runs++;
                case_runs++;
                failed += !run_offsets(&m, layer, c, &p, names[v], off_f[o], om, 4);
            }
        }
        printf("case %s: %d runs\n", c->name, case_runs);
        sgk_layer_destroy(layer);
        sgkt_prepared_free(&p);
    }
    sgk_context_destroy(ctx);
    printf("device_offsets: backend=%s runs=%d failed=%d\n", backend, runs, failed);
    if (runs == 0) {
        printf("FAIL no run: no case or variant ran, so nothing was tested\n");
        return 1;
    }
    return failed != 0;
}
