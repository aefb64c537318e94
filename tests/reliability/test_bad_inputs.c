/* Bad inputs to every public call, one table: each row is a call with one
 * thing wrong, the status it must return and a word its message must
 * contain. On any error the outputs must be untouched (out buffer, the
 * guard after it, and returned handles). The table is printed as it runs,
 * so that the statuses sgk gives are on record. Usage: test_bad_inputs BACKEND */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rel.h"

#define B_ 2
#define N_ 5
#define D_ 8
#define H_ 2
#define P_ 3
#define PATTERN 0x5a

static const char *g_backend;
static int g_rows, g_bad_rows;

typedef struct env {
    rel_fixture f;
    float *out;         /* guarded, B*N*D floats */
    size_t out_bytes;
    float *expect;      /* the good result */
    int host;           /* device pointers are host pointers (cpu) */
} env;

static const char *status_name(sgk_status st)
{
    static const char *const names[] = {
        "SGK_OK", "NULL_POINTER", "INVALID_ARGUMENT", "SIZE_OVERFLOW", "UNSUPPORTED",
        "UNKNOWN_BACKEND", "BACKEND_UNAVAILABLE", "INVALID_DEVICE", "UNKNOWN_VARIANT",
        "OUT_OF_MEMORY", "BACKEND", "INSUFFICIENT_WORKSPACE",
    };
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "(not a status)";
}

static void reset_out(env *e)
{
    memset(e->out, PATTERN, e->out_bytes);
}

static int out_untouched(const env *e)
{
    const unsigned char *p = (const unsigned char *)e->out;
    for (size_t i = 0; i < e->out_bytes; i++)
        if (p[i] != PATTERN)
            return 0;
    return sgkt_guard_ok(e->out, e->out_bytes);
}

/* Checks one row and prints it. untouched: whether the outputs the call
 * could write are as they were (ignored on success). */
static void row(const char *call, const char *what, sgk_status want, const char *needle,
                sgk_status got, int untouched)
{
    const char *msg = got == SGK_OK ? "" : sgk_last_error();
    int ok = got == want;
    if (ok && got != SGK_OK) {
        ok = msg[0] != '\0' && (needle == NULL || strstr(msg, needle) != NULL) && untouched;
    }
    g_rows++;
    if (!ok)
        g_bad_rows++;
    printf("[row] | %s | %s | %s | %s | %s | %.160s\n", call, what, status_name(want),
           status_name(got), ok ? "ok" : "WRONG", msg);
    if (!ok)
        fprintf(stderr, "bad-inputs: %s with %s: want %s (message containing \"%s\"), got %s%s: %s\n",
                call, what, status_name(want), needle ? needle : "", status_name(got),
                got != SGK_OK && !untouched ? " and outputs were written" : "", msg);
}

#define FWD(e, what, want, needle, layer, B, N, nodes, pair, mask, mt, out)                    \
    do {                                                                                       \
        reset_out(e);                                                                          \
        sgk_status st_ = sgk_forward(layer, B, N, nodes, pair, mask, mt, out);                 \
        row("sgk_forward", what, want, needle, st_, out_untouched(e));                        \
    } while (0)

static void test_forward(void **state)
{
    env *e = *state;
    sgk_layer *L = e->f.layer;
    const sgkt_inputs *in = &e->f.in;
    const float *nd = in->nodes, *pf = in->pair_feats;
    const void *m = in->edge_mask;
    sgk_mask_type mt = in->mask_type;
    float *o = e->out;

    FWD(e, "layer NULL", SGK_ERR_NULL_POINTER, "layer", NULL, B_, N_, nd, pf, m, mt, o);
    FWD(e, "nodes NULL", SGK_ERR_NULL_POINTER, "nodes", L, B_, N_, NULL, pf, m, mt, o);
    FWD(e, "pair_feats NULL", SGK_ERR_NULL_POINTER, "pair_feats", L, B_, N_, nd, NULL, m, mt, o);
    FWD(e, "edge_mask NULL", SGK_ERR_NULL_POINTER, "edge_mask", L, B_, N_, nd, pf, NULL, mt, o);
    FWD(e, "out NULL", SGK_ERR_NULL_POINTER, "out", L, B_, N_, nd, pf, m, mt, NULL);
    FWD(e, "nodes NULL and B=-1", SGK_ERR_NULL_POINTER, "nodes", L, -1, N_, NULL, pf, m, mt, o);
    FWD(e, "B=0", SGK_ERR_INVALID_ARGUMENT, "B", L, 0, N_, nd, pf, m, mt, o);
    FWD(e, "B=-1", SGK_ERR_INVALID_ARGUMENT, "B", L, -1, N_, nd, pf, m, mt, o);
    FWD(e, "B=INT64_MIN", SGK_ERR_INVALID_ARGUMENT, "B", L, INT64_MIN, N_, nd, pf, m, mt, o);
    FWD(e, "N=0", SGK_ERR_INVALID_ARGUMENT, "N", L, B_, 0, nd, pf, m, mt, o);
    FWD(e, "N=-7", SGK_ERR_INVALID_ARGUMENT, "N", L, B_, -7, nd, pf, m, mt, o);
    FWD(e, "N=INT64_MIN", SGK_ERR_INVALID_ARGUMENT, "N", L, B_, INT64_MIN, nd, pf, m, mt, o);
    FWD(e, "B=INT64_MAX", SGK_ERR_SIZE_OVERFLOW, "nodes", L, INT64_MAX, N_, nd, pf, m, mt, o);
    FWD(e, "N=INT64_MAX", SGK_ERR_SIZE_OVERFLOW, NULL, L, B_, INT64_MAX, nd, pf, m, mt, o);
    FWD(e, "N=2^32 (N*N*P overflows int64)", SGK_ERR_SIZE_OVERFLOW, "pair_feats", L, 1,
        (int64_t)1 << 32, nd, pf, m, mt, o);
    FWD(e, "N=3037000500 (N*N overflows int64)", SGK_ERR_SIZE_OVERFLOW, "pair_feats", L, 1,
        3037000500LL, nd, pf, m, mt, o);
    /* Which tensor passes the limit first depends on the backend's limit. */
    FWD(e, "B=2^40 N=2^10 (past max_elements)", SGK_ERR_SIZE_OVERFLOW, "can index in one tensor", L,
        (int64_t)1 << 40, 1024, nd, pf, m, mt, o);
    FWD(e, "B=2^62 N=1", SGK_ERR_SIZE_OVERFLOW, "nodes", L, (int64_t)1 << 62, 1, nd, pf, m, mt,
        o);
    FWD(e, "mask_type=2", SGK_ERR_UNSUPPORTED, "mask_type", L, B_, N_, nd, pf, m,
        (sgk_mask_type)2, o);
    FWD(e, "mask_type=-1", SGK_ERR_UNSUPPORTED, "mask_type", L, B_, N_, nd, pf, m,
        (sgk_mask_type)-1, o);
    FWD(e, "mask_type=INT_MAX", SGK_ERR_UNSUPPORTED, "mask_type", L, B_, N_, nd, pf, m,
        (sgk_mask_type)INT_MAX, o);

    /* Aliasing, inside one arena so that a wrongly accepted call stays in
     * bounds. */
    size_t nodes_f = e->f.out_floats, pair_f = (size_t)(B_ * N_ * N_ * P_);
    float *arena = calloc(nodes_f + pair_f + nodes_f, sizeof(float));
    assert_non_null(arena);
    memcpy(arena, nd, nodes_f * sizeof(float));
    memcpy(arena + nodes_f, pf, pair_f * sizeof(float));
    sgk_status st = sgk_forward(L, B_, N_, arena, arena + nodes_f, m, mt, arena);
    row("sgk_forward", "out == nodes", SGK_ERR_INVALID_ARGUMENT, "out", st,
        memcmp(arena, nd, nodes_f * sizeof(float)) == 0);
    memcpy(arena, nd, nodes_f * sizeof(float));
    st = sgk_forward(L, B_, N_, arena, arena + nodes_f, m, mt, arena + nodes_f + pair_f - 1);
    row("sgk_forward", "out overlaps the last float of pair_feats", SGK_ERR_INVALID_ARGUMENT,
        "pair_feats", st, memcmp(arena + nodes_f, pf, pair_f * sizeof(float)) == 0);
    memcpy(arena + nodes_f, pf, pair_f * sizeof(float));
    memmove(arena + 3, nd, nodes_f * sizeof(float));
    st = sgk_forward(L, B_, N_, arena + 3, arena + nodes_f + 3, m, mt, arena);
    row("sgk_forward", "out overlaps nodes (3 floats apart)", SGK_ERR_INVALID_ARGUMENT, "nodes",
        st, memcmp(arena + 3, nd, nodes_f * sizeof(float)) == 0);
    free(arena);
}

/* A float buffer at an odd address: reading a float there is undefined in C
 * (and faults on GPUs), so sgk refuses it with SGK_ERR_INVALID_ARGUMENT,
 * out untouched. A u8 mask needs no alignment: it is accepted and gives the
 * aligned result bit for bit. */
static void misaligned(env *e, const char *which, size_t offset)
{
    const sgkt_inputs *in = &e->f.in;
    size_t nb = e->f.out_floats * sizeof(float);
    size_t pb = (size_t)(B_ * N_ * N_ * P_) * sizeof(float);
    size_t mb = (size_t)(B_ * N_ * N_) * sgkt_mask_elem_size(in->mask_type);
    /* Each buffer on a 16-byte boundary of its own, 16 bytes of room after
     * it, unless it is the one moved. */
#define ROOM(x) (((x) + 31) & ~(size_t)15)
    size_t pair_off = ROOM(nb), mask_off = pair_off + ROOM(pb), out_off = mask_off + ROOM(mb);
    unsigned char *raw = malloc(out_off + ROOM(nb) + 16);
#undef ROOM
    assert_non_null(raw);
    unsigned char *base = (unsigned char *)(((uintptr_t)raw + 15) & ~(uintptr_t)15);
    unsigned char *nodes = base, *pair = base + pair_off, *mask = base + mask_off;
    unsigned char *out = base + out_off;
    if (strcmp(which, "nodes") == 0) nodes += offset;
    if (strcmp(which, "pair_feats") == 0) pair += offset;
    if (strcmp(which, "edge_mask") == 0) mask += offset;
    if (strcmp(which, "out") == 0) out += offset;
    memcpy(nodes, in->nodes, nb);
    memcpy(pair, in->pair_feats, pb);
    memcpy(mask, in->edge_mask, mb);
    memset(out, PATTERN, nb);
    sgk_status st = sgk_forward(e->f.layer, B_, N_, nodes, pair, mask, in->mask_type, out);
    char what[96];
    snprintf(what, sizeof what, "%s at +%zu bytes (%s mask)", which, offset,
             in->mask_type == SGK_MASK_U8 ? "u8" : "f32");
    int must_accept = strcmp(which, "edge_mask") == 0 && in->mask_type == SGK_MASK_U8;
    int same = st == SGK_OK && memcmp(out, e->expect, nb) == 0;
    int untouched = 1;
    for (size_t i = 0; i < nb; i++)
        untouched = untouched && out[i] == PATTERN;
    const char *verdict;
    int ok;
    if (st == SGK_OK) {
        verdict = same ? "accepted, same bits" : "accepted, DIFFERENT bits";
        ok = same && must_accept;
    } else {
        verdict = "rejected";
        ok = !must_accept && st == SGK_ERR_INVALID_ARGUMENT && untouched &&
             strstr(sgk_last_error(), which) != NULL;
    }
    g_rows++;
    if (!ok)
        g_bad_rows++;
    printf("[row] | sgk_forward | %s | %s | %s | %s | %s: %.120s\n", what,
           must_accept ? "SGK_OK" : "INVALID_ARGUMENT",
           status_name(st), ok ? "ok" : "WRONG", verdict, st == SGK_OK ? "" : sgk_last_error());
    free(raw);
}

static void test_misaligned(void **state)
{
    env *e = *state;
    static const char *const which[] = {"nodes", "pair_feats", "edge_mask", "out"};
    for (int w = 0; w < 4; w++)
        for (size_t off = 1; off <= 2; off++)
            misaligned(e, which[w], off);
}

/* A variant forced on a shape it does not run must fail, never fall back. */
static void test_forced_variant(void **state)
{
    env *e = *state;
    sgk_layer *L = e->f.layer;
    row("sgk_layer_set_variant", "name \"no-such-variant\"", SGK_ERR_UNKNOWN_VARIANT,
        "no-such-variant", sgk_layer_set_variant(L, "no-such-variant"), 1);
    row("sgk_layer_set_variant", "name \"\"", SGK_ERR_UNKNOWN_VARIANT, "valid",
        sgk_layer_set_variant(L, ""), 1);
    row("sgk_layer_set_variant", "layer NULL", SGK_ERR_NULL_POINTER, "layer",
        sgk_layer_set_variant(NULL, "x"), 1);
    row("sgk_layer_set_variant", "name NULL (automatic again)", SGK_OK, NULL,
        sgk_layer_set_variant(L, NULL), 1);

    /* Find a (variant, N) that one variant runs and another does not, on a
     * layer wide enough to run out of local memory: D = 512, P = 1. */
    sgkt_weights w;
    assert_int_equal(sgkt_weights_alloc(&w, 512, 8, 1), 0);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, 5);
    sgkt_weights_random(&w, &rng);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&w, &desc);
    sgk_layer *wide = NULL;
    assert_int_equal(sgk_layer_create(e->f.ctx, &desc, &wide), SGK_OK);
    const char *names[16];
    int supported[16], count = 0, found = 0;
    for (int64_t n = 8; n <= 512 && !found; n *= 2) {
        assert_int_equal(sgk_layer_variants(wide, 1, n, names, supported, 16, &count), SGK_OK);
        int any = 0;
        for (int v = 0; v < count; v++)
            any |= supported[v];
        for (int v = 0; v < count && any && !found; v++) {
            if (supported[v])
                continue;
            found = 1;
            sgkt_inputs in;
            assert_int_equal(sgkt_inputs_alloc(&in, 1, n, 512, 1, SGK_MASK_U8), 0);
            sgkt_inputs_random(&in, &rng, SGKT_MASK_DENSE, 1.0);
            size_t ob = (size_t)n * 512 * sizeof(float);
            unsigned char *out = malloc(ob);
            assert_non_null(out);
            memset(out, PATTERN, ob);
            assert_int_equal(sgk_layer_set_variant(wide, names[v]), SGK_OK);
            sgk_status st = sgk_forward(wide, 1, n, in.nodes, in.pair_feats, in.edge_mask,
                                        SGK_MASK_U8, out);
            int untouched = 1;
            for (size_t i = 0; i < ob; i++)
                untouched = untouched && out[i] == PATTERN;
            char what[96];
            snprintf(what, sizeof what, "variant \"%s\" forced, N=%lld D=512", names[v],
                     (long long)n);
            row("sgk_forward", what, SGK_ERR_UNSUPPORTED, names[v], st, untouched);
            const char *chosen = NULL;
            row("sgk_layer_variant_for", what, SGK_ERR_UNSUPPORTED, names[v],
                sgk_layer_variant_for(wide, 1, n, &chosen), chosen == NULL);
            free(out);
            sgkt_inputs_free(&in);
        }
    }
    if (!found)
        printf("[row] | sgk_forward | forced unsupported variant | - | - | skipped | every "
               "variant of %s runs every shape tried\n", g_backend);
    sgk_layer_destroy(wide);
    sgkt_weights_free(&w);
}

static void test_forward_device(void **state)
{
    env *e = *state;
    if (!e->host)
        skip(); /* needs device buffers of the backend */
    sgk_layer *L = e->f.layer;
    const sgkt_inputs *in = &e->f.in;
    size_t need = 0;
    assert_int_equal(sgk_workspace_size(L, B_, N_, &need), SGK_OK);
    if (need == 0)
        skip();
    unsigned char *work = malloc(need);
    assert_non_null(work);
    reset_out(e);
    row("sgk_forward_device", "workspace NULL", SGK_ERR_INSUFFICIENT_WORKSPACE, "workspace",
        sgk_forward_device(L, B_, N_, in->nodes, in->pair_feats, in->edge_mask, in->mask_type,
                           e->out, NULL, 0, NULL), out_untouched(e));
    reset_out(e);
    row("sgk_forward_device", "workspace_bytes one short", SGK_ERR_INSUFFICIENT_WORKSPACE,
        "workspace_bytes",
        sgk_forward_device(L, B_, N_, in->nodes, in->pair_feats, in->edge_mask, in->mask_type,
                           e->out, work, need - 1, NULL), out_untouched(e));
    reset_out(e);
    row("sgk_forward_device", "layer NULL", SGK_ERR_NULL_POINTER, "layer",
        sgk_forward_device(NULL, B_, N_, in->nodes, in->pair_feats, in->edge_mask,
                           in->mask_type, e->out, work, need, NULL), out_untouched(e));
    reset_out(e);
    row("sgk_forward_device", "N=-1", SGK_ERR_INVALID_ARGUMENT, "N",
        sgk_forward_device(L, B_, -1, in->nodes, in->pair_feats, in->edge_mask, in->mask_type,
                           e->out, work, need, NULL), out_untouched(e));
    /* A workspace at an odd address: the backend keeps floats in it. */
    unsigned char *odd = malloc(need + 1);
    assert_non_null(odd);
    reset_out(e);
    sgk_status odd_st = sgk_forward_device(L, B_, N_, in->nodes, in->pair_feats, in->edge_mask,
                                           in->mask_type, e->out, odd + 1, need, NULL);
    row("sgk_forward_device", "workspace at +1 byte", SGK_ERR_INVALID_ARGUMENT, "workspace",
        odd_st, out_untouched(e));
    free(odd);
    /* Workspace over the output or an input, inside one arena. */
    size_t ob = e->out_bytes;
    unsigned char *arena = malloc(ob + need);
    assert_non_null(arena);
    memset(arena, PATTERN, ob + need);
    sgk_status st = sgk_forward_device(L, B_, N_, in->nodes, in->pair_feats, in->edge_mask,
                                       in->mask_type, arena, arena + ob / 2, need, NULL);
    int untouched = 1;
    for (size_t i = 0; i < ob + need; i++)
        untouched = untouched && arena[i] == PATTERN;
    row("sgk_forward_device", "workspace overlaps out", SGK_ERR_INVALID_ARGUMENT, "workspace",
        st, untouched);
    free(arena);
    size_t nb = e->f.out_floats * sizeof(float);
    unsigned char *big = malloc(nb > need ? nb : need);
    assert_non_null(big);
    memcpy(big, in->nodes, nb);
    reset_out(e);
    st = sgk_forward_device(L, B_, N_, big, in->pair_feats, in->edge_mask, in->mask_type, e->out,
                            big, need, NULL);
    row("sgk_forward_device", "workspace == nodes", SGK_ERR_INVALID_ARGUMENT, "workspace", st,
        out_untouched(e) && memcmp(big, in->nodes, nb) == 0);
    free(big);
    free(work);
}

static void test_queries(void **state)
{
    env *e = *state;
    sgk_layer *L = e->f.layer;
    size_t bytes = 12345;
    row("sgk_workspace_size", "layer NULL", SGK_ERR_NULL_POINTER, "layer",
        sgk_workspace_size(NULL, B_, N_, &bytes), bytes == 12345);
    row("sgk_workspace_size", "bytes NULL", SGK_ERR_NULL_POINTER, "bytes",
        sgk_workspace_size(L, B_, N_, NULL), 1);
    row("sgk_workspace_size", "B=0", SGK_ERR_INVALID_ARGUMENT, "B",
        sgk_workspace_size(L, 0, N_, &bytes), bytes == 12345);
    row("sgk_workspace_size", "N=INT64_MAX", SGK_ERR_SIZE_OVERFLOW, NULL,
        sgk_workspace_size(L, 1, INT64_MAX, &bytes), bytes == 12345);
    const char *name = "untouched";
    row("sgk_layer_variant_for", "name NULL", SGK_ERR_NULL_POINTER, "name",
        sgk_layer_variant_for(L, B_, N_, NULL), 1);
    row("sgk_layer_variant_for", "N=-3", SGK_ERR_INVALID_ARGUMENT, "N",
        sgk_layer_variant_for(L, B_, -3, &name), strcmp(name, "untouched") == 0);
    row("sgk_layer_variant_for", "B=2^62 N=2^2", SGK_ERR_SIZE_OVERFLOW, NULL,
        sgk_layer_variant_for(L, (int64_t)1 << 62, 4, &name), strcmp(name, "untouched") == 0);
    int count = -1;
    const char *names[16];
    int supported[16];
    row("sgk_layer_variants", "count NULL", SGK_ERR_NULL_POINTER, "count",
        sgk_layer_variants(L, B_, N_, names, supported, 16, NULL), 1);
    row("sgk_layer_variants", "layer NULL", SGK_ERR_NULL_POINTER, "layer",
        sgk_layer_variants(NULL, B_, N_, names, supported, 16, &count), count == -1);
    row("sgk_layer_variants", "capacity 0", SGK_ERR_INVALID_ARGUMENT, "capacity",
        sgk_layer_variants(L, B_, N_, names, supported, 0, &count), count == -1);
    row("sgk_layer_variants", "capacity -1", SGK_ERR_INVALID_ARGUMENT, "capacity",
        sgk_layer_variants(L, B_, N_, names, supported, -1, &count), count == -1);
    row("sgk_layer_variants", "B=0 with supported", SGK_ERR_INVALID_ARGUMENT, "B",
        sgk_layer_variants(L, 0, N_, names, supported, 16, &count), count == -1);
    sgk_status st = sgk_layer_variants(L, 1, INT64_MAX, names, supported, 16, &count);
    int none = st == SGK_OK;
    for (int v = 0; none && v < count; v++)
        none = supported[v] == 0;
    row("sgk_layer_variants", "N=INT64_MAX: every variant unsupported", SGK_OK, NULL,
        none ? SGK_OK : SGK_ERR_BACKEND, 1);
}

static sgk_status answer(sgk_status st)
{
    return st == SGK_OK || st == SGK_ERR_UNSUPPORTED || st == SGK_ERR_SIZE_OVERFLOW
               ? st
               : SGK_ERR_UNSUPPORTED;
}

/* Sizes past what int64 element counts of the plan can hold, asked of the
 * query calls (no buffers needed): must answer, never overflow. */
static void test_huge_shape_queries(void **state)
{
    env *e = *state;
    sgkt_weights w;
    assert_int_equal(sgkt_weights_alloc(&w, 32, 32, 1), 0);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, 6);
    sgkt_weights_random(&w, &rng);
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&w, &desc);
    sgk_layer *L = NULL;
    assert_int_equal(sgk_layer_create(e->f.ctx, &desc, &L), SGK_OK);
    static const int64_t ns[] = {(int64_t)1 << 29, 759250124, (int64_t)1 << 31, 1518500249};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        const char *name = NULL;
        size_t bytes = 0;
        char what[96];
        snprintf(what, sizeof what, "D=H=32 P=1 B=1 N=%lld", (long long)ns[i]);
        /* A variant runs it, none does, or it is past the size limits: all
         * three are answers; what matters is that nothing overflows. */
        sgk_status st = sgk_layer_variant_for(L, 1, ns[i], &name);
        row("sgk_layer_variant_for", what, answer(st), NULL, st, 1);
        st = sgk_workspace_size(L, 1, ns[i], &bytes);
        row("sgk_workspace_size", what, answer(st), NULL, st, 1);
    }
    sgk_layer_destroy(L);
    sgkt_weights_free(&w);
}

static void ctx_row(const char *what, sgk_status want, const char *needle, const char *backend,
                    int device, const sgk_context_options *opt, int null_out)
{
    sgk_context *const sentinel = (sgk_context *)(uintptr_t)0x5a5a5a5a;
    sgk_context *ctx = sentinel;
    sgk_status st = sgk_context_create(backend, device, opt, null_out ? NULL : &ctx);
    row("sgk_context_create", what, want, needle, st, ctx == sentinel);
    if (st == SGK_OK && ctx != sentinel)
        sgk_context_destroy(ctx);
}

static void test_context(void **state)
{
    env *e = *state;
    sgk_context_options opt;
    sgk_context_options_init(&opt);
    ctx_row("backend NULL", SGK_ERR_NULL_POINTER, "backend", NULL, 0, NULL, 0);
    ctx_row("backend \"no-such\"", SGK_ERR_UNKNOWN_BACKEND, "no-such", "no-such", 0, NULL, 0);
    ctx_row("backend \"CPU\" (names are case-sensitive)", SGK_ERR_UNKNOWN_BACKEND, "CPU", "CPU",
            0, NULL, 0);
    ctx_row("backend \"\"", SGK_ERR_UNKNOWN_BACKEND, "backend", "", 0, NULL, 0);
    char long_name[5000];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ctx_row("backend name of 4999 bytes", SGK_ERR_UNKNOWN_BACKEND, "xxxx", long_name, 0, NULL,
            0);
    ctx_row("device -1", SGK_ERR_INVALID_DEVICE, "device", g_backend, -1, NULL, 0);
    sgk_backend_info info;
    assert_int_equal(sgk_backend_find(g_backend, &info), SGK_OK);
    ctx_row("device = device_count", SGK_ERR_INVALID_DEVICE, "device", g_backend,
            info.device_count, NULL, 0);
    ctx_row("device INT_MIN", SGK_ERR_INVALID_DEVICE, "device", g_backend, INT_MIN, NULL, 0);
    ctx_row("out NULL", SGK_ERR_NULL_POINTER, "out", g_backend, 0, NULL, 1);
    sgk_context_options bad = opt;
    bad.struct_size = 0;
    ctx_row("options->struct_size 0", SGK_ERR_INVALID_ARGUMENT, "struct_size", g_backend, 0, &bad,
            0);
    /* a newer caller's struct that sets a field this sgk lacks */
    struct { sgk_context_options o; unsigned char newer[8]; } wide_opt = { .o = opt };
    memset(wide_opt.newer, 0xa5, sizeof wide_opt.newer);
    wide_opt.o.struct_size = sizeof wide_opt;
    ctx_row("options->struct_size larger, newer field set", SGK_ERR_UNSUPPORTED, "struct_size",
            g_backend, 0, &wide_opt.o, 0);
    bad = opt;
    bad.cpu_threads = -1;
    ctx_row("options->cpu_threads -1", SGK_ERR_INVALID_ARGUMENT, "cpu_threads", g_backend, 0,
            &bad, 0);
    bad.cpu_threads = INT_MIN;
    ctx_row("options->cpu_threads INT_MIN", SGK_ERR_INVALID_ARGUMENT, "cpu_threads", g_backend,
            0, &bad, 0);
    /* Accepted, this would have forward start a million OpenMP threads
     * (libgomp crashes or exits when it cannot); never run forward on it. */
    if (strcmp(g_backend, "cpu") == 0) {
        bad.cpu_threads = 1 << 20;
        ctx_row("options->cpu_threads 2^20", SGK_ERR_INVALID_ARGUMENT, "cpu_threads", g_backend,
                0, &bad, 0);
    }
    for (int i = 0; i < sgk_backend_count(); i++) {
        assert_int_equal(sgk_backend_get(i, &info), SGK_OK);
        if (!info.available) {
            char what[64];
            snprintf(what, sizeof what, "unavailable backend %s", info.name);
            ctx_row(what, SGK_ERR_BACKEND_UNAVAILABLE, info.name, info.name, 0, NULL, 0);
        }
    }
    void *handle = (void *)(uintptr_t)0x5a5a;
    row("sgk_context_native", "ctx NULL", SGK_ERR_NULL_POINTER, "ctx",
        sgk_context_native(NULL, SGK_NATIVE_CL_CONTEXT, &handle), handle == (void *)0x5a5a);
    row("sgk_context_native", "out NULL", SGK_ERR_NULL_POINTER, "out",
        sgk_context_native(e->f.ctx, SGK_NATIVE_CL_CONTEXT, NULL), 1);
    row("sgk_context_native", "kind 99", SGK_ERR_INVALID_ARGUMENT, "kind",
        sgk_context_native(e->f.ctx, (sgk_native_kind)99, &handle), handle == (void *)0x5a5a);
    const char *b = sgk_context_backend(NULL);
    row("sgk_context_backend", "ctx NULL (returns \"\")", SGK_ERR_NULL_POINTER, "ctx",
        b != NULL && b[0] == '\0' ? SGK_ERR_NULL_POINTER : SGK_OK, 1);
    sgk_context_destroy(NULL);
    sgk_layer_destroy(NULL);
}

static void layer_row(env *e, const char *what, sgk_status want, const char *needle,
                      const sgk_layer_desc *desc)
{
    sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5a5a5a5a;
    sgk_layer *layer = sentinel;
    sgk_status st = sgk_layer_create(e->f.ctx, desc, &layer);
    row("sgk_layer_create", what, want, needle, st, layer == sentinel);
    if (st == SGK_OK && layer != sentinel)
        sgk_layer_destroy(layer);
}

static void test_layer(void **state)
{
    env *e = *state;
    sgk_layer_desc good;
    sgk_layer_desc_init(&good);
    sgkt_weights_to_desc(&e->f.w, &good);
    sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5a5a5a5a;
    sgk_layer *layer = sentinel;
    row("sgk_layer_create", "ctx NULL", SGK_ERR_NULL_POINTER, "ctx",
        sgk_layer_create(NULL, &good, &layer), layer == sentinel);
    row("sgk_layer_create", "desc NULL", SGK_ERR_NULL_POINTER, "desc",
        sgk_layer_create(e->f.ctx, NULL, &layer), layer == sentinel);
    row("sgk_layer_create", "out NULL", SGK_ERR_NULL_POINTER, "out",
        sgk_layer_create(e->f.ctx, &good, NULL), 1);

    sgk_layer_desc d;
#define LAYER_CASE(what, want, needle, change)                                                 \
    do {                                                                                       \
        d = good;                                                                              \
        change;                                                                                \
        layer_row(e, what, want, needle, &d);                                                  \
    } while (0)
    LAYER_CASE("struct_size 0", SGK_ERR_INVALID_ARGUMENT, "struct_size", d.struct_size = 0);
    struct { sgk_layer_desc desc; unsigned char newer[16]; } wide = { .desc = good };
    memset(wide.newer, 0xa5, sizeof wide.newer);
    wide.desc.struct_size = sizeof wide;
    layer_row(e, "struct_size larger, newer field set", SGK_ERR_UNSUPPORTED, "struct_size",
              &wide.desc);
    /* a 16-bit dtype is bad input only where the backend does not run it
     * (the cpu backend runs both: tests/test_dtypes.c) */
    const sgk_dtype half[] = {SGK_DTYPE_BF16, SGK_DTYPE_F16};
    const char *half_rows[] = {"dtype BF16 (not run by the backend)", "dtype F16 (not run by the backend)"};
    for (int i = 0; i < 2; i++) {
        sgk_layer *probe = NULL;
        d = good;
        d.dtype = half[i];
        if (sgk_layer_create(e->f.ctx, &d, &probe) == SGK_OK) {
            sgk_layer_destroy(probe);
            continue;
        }
        LAYER_CASE(half_rows[i], SGK_ERR_UNSUPPORTED, "dtype", d.dtype = half[i]);
    }
    LAYER_CASE("dtype 99", SGK_ERR_UNSUPPORTED, "dtype", d.dtype = (sgk_dtype)99);
    LAYER_CASE("dim 0", SGK_ERR_INVALID_ARGUMENT, "dim", d.dim = 0);
    LAYER_CASE("dim -8", SGK_ERR_INVALID_ARGUMENT, "dim", d.dim = -8);
    LAYER_CASE("heads 0", SGK_ERR_INVALID_ARGUMENT, "heads", d.heads = 0);
    LAYER_CASE("heads -2", SGK_ERR_INVALID_ARGUMENT, "heads", d.heads = -2);
    LAYER_CASE("pair_dim 0", SGK_ERR_INVALID_ARGUMENT, "pair_dim", d.pair_dim = 0);
    LAYER_CASE("pair_dim INT64_MIN", SGK_ERR_INVALID_ARGUMENT, "pair_dim",
               d.pair_dim = INT64_MIN);
    LAYER_CASE("dim 8, heads 3 (not a divisor)", SGK_ERR_INVALID_ARGUMENT, "divisible",
               d.heads = 3);
    LAYER_CASE("heads > dim", SGK_ERR_INVALID_ARGUMENT, "heads", d.heads = 16);
    LAYER_CASE("eps -1", SGK_ERR_INVALID_ARGUMENT, "eps", d.eps = -1.0f);
    LAYER_CASE("eps NaN", SGK_ERR_INVALID_ARGUMENT, "eps", d.eps = NAN);
    LAYER_CASE("eps +inf", SGK_ERR_INVALID_ARGUMENT, "eps", d.eps = INFINITY);
    LAYER_CASE("eps 0 (allowed)", SGK_OK, NULL, d.eps = 0.0f);
    LAYER_CASE("ln_gamma NULL", SGK_ERR_NULL_POINTER, "ln_gamma", d.ln_gamma = NULL);
    LAYER_CASE("ln_beta NULL", SGK_ERR_NULL_POINTER, "ln_beta", d.ln_beta = NULL);
    LAYER_CASE("wq NULL", SGK_ERR_NULL_POINTER, "wq", d.wq = NULL);
    LAYER_CASE("wk NULL", SGK_ERR_NULL_POINTER, "wk", d.wk = NULL);
    LAYER_CASE("wv NULL", SGK_ERR_NULL_POINTER, "wv", d.wv = NULL);
    LAYER_CASE("wo NULL", SGK_ERR_NULL_POINTER, "wo", d.wo = NULL);
    LAYER_CASE("w1 NULL", SGK_ERR_NULL_POINTER, "w1", d.w1 = NULL);
    LAYER_CASE("b1 NULL", SGK_ERR_NULL_POINTER, "b1", d.b1 = NULL);
    LAYER_CASE("w2 NULL", SGK_ERR_NULL_POINTER, "w2", d.w2 = NULL);
    LAYER_CASE("b2 NULL", SGK_ERR_NULL_POINTER, "b2", d.b2 = NULL);
    LAYER_CASE("dim 2^31 (D*D past max_elements)", SGK_ERR_SIZE_OVERFLOW, "wq",
               (d.dim = (int64_t)1 << 31, d.heads = 1));
    LAYER_CASE("dim INT64_MAX (D*D overflows)", SGK_ERR_SIZE_OVERFLOW, "wq",
               (d.dim = INT64_MAX, d.heads = 1));
    LAYER_CASE("pair_dim 2^32 (P*P overflows)", SGK_ERR_SIZE_OVERFLOW, "w1",
               d.pair_dim = (int64_t)1 << 32);
#undef LAYER_CASE
}

/* forward gives the bits of before: a refused sgk_layer_set_weights(_device)
 * changed nothing. */
static int weights_kept(const env *e, const float *before)
{
    float *now = malloc(e->out_bytes);
    assert_non_null(now);
    rel_forward_ok(e->f.layer, &e->f.in, now);
    int same = memcmp(now, before, e->out_bytes) == 0;
    free(now);
    return same;
}

static void weights_row(env *e, int device, const char *what, sgk_status want, const char *needle,
                        sgk_layer *layer, const sgk_layer_desc *desc)
{
    float *before = malloc(e->out_bytes);
    assert_non_null(before);
    rel_forward_ok(e->f.layer, &e->f.in, before);
    sgk_status st = device ? sgk_layer_set_weights_device(layer, desc, NULL)
                           : sgk_layer_set_weights(layer, desc);
    row(device ? "sgk_layer_set_weights_device" : "sgk_layer_set_weights", what, want, needle, st,
        weights_kept(e, before));
    free(before);
}

/* Every rule of sgk_layer_set_weights and its device form. The weights
 * given are host pointers, which the device form reads only on the cpu
 * backend: elsewhere it runs only the rows refused before any is read. */
static void test_set_weights(void **state)
{
    env *e = *state;
    sgk_layer *L = e->f.layer;
    sgk_layer_desc good;
    sgk_layer_desc_init(&good);
    sgkt_weights_to_desc(&e->f.w, &good);
    sgk_layer_desc d;
    for (int device = 0; device < 2; device++) {
#define WEIGHTS_CASE(what, want, needle, change)                                               \
    do {                                                                                       \
        d = good;                                                                              \
        change;                                                                                \
        weights_row(e, device, what, want, needle, L, &d);                                     \
    } while (0)
        weights_row(e, device, "layer NULL", SGK_ERR_NULL_POINTER, "layer", NULL, &good);
        weights_row(e, device, "desc NULL", SGK_ERR_NULL_POINTER, "desc", L, NULL);
        WEIGHTS_CASE("struct_size 0", SGK_ERR_INVALID_ARGUMENT, "struct_size", d.struct_size = 0);
        struct { sgk_layer_desc desc; unsigned char newer[16]; } wide = { .desc = good };
        memset(wide.newer, 0xa5, sizeof wide.newer);
        wide.desc.struct_size = sizeof wide;
        weights_row(e, device, "struct_size larger, newer field set", SGK_ERR_UNSUPPORTED,
                    "struct_size", L, &wide.desc);
        WEIGHTS_CASE("dim 16, the layer's 8", SGK_ERR_INVALID_ARGUMENT,
                     "desc->dim (16) differs from the layer's dim (8)", d.dim = 16);
        WEIGHTS_CASE("heads 4, the layer's 2", SGK_ERR_INVALID_ARGUMENT,
                     "desc->heads (4) differs from the layer's heads (2)", d.heads = 4);
        WEIGHTS_CASE("heads 3 (not a divisor), the layer's 2", SGK_ERR_INVALID_ARGUMENT,
                     "desc->heads (3) differs", d.heads = 3);
        WEIGHTS_CASE("pair_dim 5, the layer's 3", SGK_ERR_INVALID_ARGUMENT,
                     "desc->pair_dim (5) differs from the layer's pair_dim (3)", d.pair_dim = 5);
        WEIGHTS_CASE("pair_dim INT64_MIN", SGK_ERR_INVALID_ARGUMENT, "desc->pair_dim",
                     d.pair_dim = INT64_MIN);
        WEIGHTS_CASE("dtype BF16, the layer's F32", SGK_ERR_INVALID_ARGUMENT,
                     "desc->dtype (1, SGK_DTYPE_BF16) differs from the layer's dtype (0, "
                     "SGK_DTYPE_F32)",
                     d.dtype = SGK_DTYPE_BF16);
        WEIGHTS_CASE("dtype 99", SGK_ERR_INVALID_ARGUMENT, "desc->dtype (99",
                     d.dtype = (sgk_dtype)99);
        WEIGHTS_CASE("eps -1", SGK_ERR_INVALID_ARGUMENT, "desc->eps", d.eps = -1.0f);
        WEIGHTS_CASE("eps NaN", SGK_ERR_INVALID_ARGUMENT, "desc->eps", d.eps = NAN);
        WEIGHTS_CASE("eps +inf", SGK_ERR_INVALID_ARGUMENT, "desc->eps", d.eps = INFINITY);
        WEIGHTS_CASE("ln_gamma NULL", SGK_ERR_NULL_POINTER, "desc->ln_gamma", d.ln_gamma = NULL);
        WEIGHTS_CASE("ln_beta NULL", SGK_ERR_NULL_POINTER, "desc->ln_beta", d.ln_beta = NULL);
        WEIGHTS_CASE("wq NULL", SGK_ERR_NULL_POINTER, "desc->wq", d.wq = NULL);
        WEIGHTS_CASE("wk NULL", SGK_ERR_NULL_POINTER, "desc->wk", d.wk = NULL);
        WEIGHTS_CASE("wv NULL", SGK_ERR_NULL_POINTER, "desc->wv", d.wv = NULL);
        WEIGHTS_CASE("wo NULL", SGK_ERR_NULL_POINTER, "desc->wo", d.wo = NULL);
        WEIGHTS_CASE("w1 NULL", SGK_ERR_NULL_POINTER, "desc->w1", d.w1 = NULL);
        WEIGHTS_CASE("b1 NULL", SGK_ERR_NULL_POINTER, "desc->b1", d.b1 = NULL);
        WEIGHTS_CASE("w2 NULL", SGK_ERR_NULL_POINTER, "desc->w2", d.w2 = NULL);
        WEIGHTS_CASE("b2 NULL", SGK_ERR_NULL_POINTER, "desc->b2", d.b2 = NULL);
        if (device) {
            WEIGHTS_CASE("eps 1e-3, the layer's 1e-5", SGK_ERR_INVALID_ARGUMENT,
                         "desc->eps (0.00100000005) differs from the layer's eps", d.eps = 1e-3f);
            WEIGHTS_CASE("wq at +1 byte", SGK_ERR_INVALID_ARGUMENT, "desc->wq",
                         d.wq = (const char *)d.wq + 1);
            WEIGHTS_CASE("b2 at +2 bytes", SGK_ERR_INVALID_ARGUMENT, "desc->b2",
                         d.b2 = (const char *)d.b2 + 2);
        }
        if (!device || e->host)
            WEIGHTS_CASE("the layer's own weights again (accepted)", SGK_OK, NULL, (void)0);
#undef WEIGHTS_CASE
    }
    /* Accepted, the host form changes eps: the device form then wants the
     * new one, and refuses the layer's first. */
    d = good;
    d.eps = 0.5f;
    weights_row(e, 0, "eps 0.5 (accepted: eps may change)", SGK_OK, NULL, L, &d);
    d.eps = good.eps;
    weights_row(e, 1, "eps 1e-5 after the host form set 0.5", SGK_ERR_INVALID_ARGUMENT,
                "the layer's eps (0.5)", L, &d);
    d.eps = good.eps;
    weights_row(e, 0, "eps 1e-5 again (accepted)", SGK_OK, NULL, L, &d);
    row("sgk_layer_set_weights", "weights back as at creation", SGK_OK, NULL,
        weights_kept(e, e->expect) ? SGK_OK : SGK_ERR_BACKEND, 1);
}

static void test_registry(void **state)
{
    (void)state;
    sgk_backend_info info;
    memset(&info, PATTERN, sizeof info);
    sgk_backend_info before = info;
    row("sgk_backend_get", "index -1", SGK_ERR_INVALID_ARGUMENT, "index",
        sgk_backend_get(-1, &info), memcmp(&info, &before, sizeof info) == 0);
    row("sgk_backend_get", "index = count", SGK_ERR_INVALID_ARGUMENT, "index",
        sgk_backend_get(sgk_backend_count(), &info), memcmp(&info, &before, sizeof info) == 0);
    row("sgk_backend_get", "index INT_MIN", SGK_ERR_INVALID_ARGUMENT, "index",
        sgk_backend_get(INT_MIN, &info), memcmp(&info, &before, sizeof info) == 0);
    row("sgk_backend_get", "info NULL", SGK_ERR_NULL_POINTER, "info", sgk_backend_get(0, NULL),
        1);
    row("sgk_backend_find", "name NULL", SGK_ERR_NULL_POINTER, "name",
        sgk_backend_find(NULL, &info), memcmp(&info, &before, sizeof info) == 0);
    row("sgk_backend_find", "name \"vulkan\"", SGK_ERR_UNKNOWN_BACKEND, "vulkan",
        sgk_backend_find("vulkan", &info), memcmp(&info, &before, sizeof info) == 0);
    row("sgk_backend_find", "info NULL", SGK_ERR_NULL_POINTER, "info",
        sgk_backend_find("cpu", NULL), 1);
    char buf[8];
    memset(buf, PATTERN, sizeof buf);
    row("sgk_device_name", "buf NULL", SGK_ERR_NULL_POINTER, "buf",
        sgk_device_name(g_backend, 0, NULL, 8), 1);
    row("sgk_device_name", "buf_len 0", SGK_ERR_INVALID_ARGUMENT, "buf_len",
        sgk_device_name(g_backend, 0, buf, 0), (unsigned char)buf[0] == PATTERN);
    row("sgk_device_name", "device 99", SGK_ERR_INVALID_DEVICE, "device",
        sgk_device_name(g_backend, 99, buf, sizeof buf), (unsigned char)buf[0] == PATTERN);
    row("sgk_device_name", "backend NULL", SGK_ERR_NULL_POINTER, "backend",
        sgk_device_name(NULL, 0, buf, sizeof buf), (unsigned char)buf[0] == PATTERN);
    row("sgk_device_name", "backend \"gpu\"", SGK_ERR_UNKNOWN_BACKEND, "gpu",
        sgk_device_name("gpu", 0, buf, sizeof buf), (unsigned char)buf[0] == PATTERN);
    row("sgk_device_name", "buf_len 1 (no name fits)", SGK_ERR_INVALID_ARGUMENT, "buf_len",
        sgk_device_name(g_backend, 0, buf, 1), (unsigned char)buf[0] == PATTERN);
    static const int not_statuses[] = {-1, 12, 1000, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof not_statuses / sizeof not_statuses[0]; i++) {
        const char *s = sgk_status_string((sgk_status)not_statuses[i]);
        char what[48];
        snprintf(what, sizeof what, "status %d", not_statuses[i]);
        row("sgk_status_string", what, SGK_OK, NULL,
            s && strcmp(s, "unknown status") == 0 ? SGK_OK : SGK_ERR_BACKEND, 1);
    }
}

static int setup(void **state)
{
    env *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    rel_fixture_init(&e->f, g_backend, 0, B_, N_, D_, H_, P_, SGK_MASK_F32, 71);
    e->out_bytes = e->f.out_floats * sizeof(float);
    e->out = sgkt_guarded_alloc(e->out_bytes);
    e->expect = malloc(e->out_bytes);
    if (!e->out || !e->expect)
        return -1;
    rel_forward_ok(e->f.layer, &e->f.in, e->expect);
    e->host = strcmp(g_backend, "cpu") == 0;
    *state = e;
    return 0;
}

static int setup_u8(void **state)
{
    if (setup(state) != 0)
        return -1;
    env *e = *state;
    /* Same edges as a u8 mask, and the result for it. */
    sgkt_inputs *in = &e->f.in;
    size_t edges = (size_t)(B_ * N_ * N_);
    uint8_t *m = malloc(edges);
    if (!m)
        return -1;
    for (size_t i = 0; i < edges; i++)
        m[i] = sgkt_mask_is_edge(in->edge_mask, SGK_MASK_F32, i) ? 1 : 0;
    free(in->edge_mask);
    in->edge_mask = m;
    in->mask_type = SGK_MASK_U8;
    rel_forward_ok(e->f.layer, in, e->expect);
    return 0;
}

static int teardown(void **state)
{
    env *e = *state;
    sgkt_guarded_free(e->out);
    free(e->expect);
    rel_fixture_free(&e->f);
    free(e);
    return 0;
}

static void test_table_clean(void **state)
{
    (void)state;
    rel_figure("bad-inputs backend=%s rows=%d wrong=%d", g_backend, g_rows, g_bad_rows);
    assert_int_equal(g_bad_rows, 0);
}

int main(int argc, char **argv)
{
    g_backend = argc > 1 ? argv[1] : "cpu";
    rel_require_backend(g_backend);
    printf("[row] | call | bad input | expected | got | verdict | message\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misaligned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misaligned, setup_u8, teardown),
        cmocka_unit_test_setup_teardown(test_forced_variant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forward_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_shape_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry, setup, teardown),
        cmocka_unit_test(test_table_clean),
    };
    return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
