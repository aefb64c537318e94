/* The documented errors of sgk.h, on the cpu backend (always built in),
 * and the repack maps of kernels/repack.c, which the tests build into this
 * program from source.
 *
 * Every failing call must return the specific status, leave a message in
 * sgk_last_error() that names the offending argument, and leave the output
 * buffer (or out-pointer) byte-identical. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "plan.h"
#include "sgk_testing.h"

#define SEED 0x415049ull /* "API" */

/* Asserts status and that the message names `word`. */
#define EXPECT_ERR(call, status, word)                                                         \
    do {                                                                                       \
        sgk_status st_ = (call);                                                               \
        const char *msg_ = sgk_last_error();                                                   \
        if (st_ != (status) || !msg_ || !*msg_ || !strstr(msg_, (word)))                       \
            fail_msg("%s:%d: %s\n  gave %s (%d), want %s (%d); message \"%s\" should name "  \
                     "\"%s\"",                                                                 \
                     __FILE__, __LINE__, #call, sgk_status_string(st_), (int)st_,              \
                     sgk_status_string(status), (int)(status), msg_ ? msg_ : "(null)", (word)); \
    } while (0)

/* Asserts status and that the message names every word of a NULL-ended list. */
static void expect_err_words(int line, sgk_status st, sgk_status status, ...)
{
    const char *msg = sgk_last_error();
    if (st != status)
        fail_msg("line %d: gave %s (%d), want %s (%d); message \"%s\"", line,
                 sgk_status_string(st), (int)st, sgk_status_string(status), (int)status, msg);
    va_list ap;
    va_start(ap, status);
    for (const char *w = va_arg(ap, const char *); w != NULL; w = va_arg(ap, const char *))
        if (!strstr(msg, w))
            fail_msg("line %d: message \"%s\" should name \"%s\"", line, msg, w);
    va_end(ap);
}

/* "(n)" and "n" as the messages print sizes. */
static const char *paren(char *buf, size_t len, size_t n)
{
    snprintf(buf, len, "(%zu)", n);
    return buf;
}

/* ---- fixture: a small cpu layer with inputs --------------------------- */

typedef struct fixture {
    sgk_context *ctx;
    sgk_layer *layer;
    sgkt_prepared p;
    float *out, *out_copy; /* out filled with a pattern, out_copy its snapshot */
    size_t out_bytes;
} fixture;

static const sgkt_case small_case = {"api", 2, 5, 16, 2, 4, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0};

static int fixture_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || sgkt_prepare(&f->p, &small_case, SEED))
        return -1;
    if (sgk_context_create("cpu", 0, NULL, &f->ctx) != SGK_OK)
        return -1;
    if (sgkt_layer_from_weights(f->ctx, &f->p.w, &f->layer) != SGK_OK)
        return -1;
    f->out_bytes = f->p.n_out * sizeof(float);
    f->out = malloc(f->out_bytes);
    f->out_copy = malloc(f->out_bytes);
    if (!f->out || !f->out_copy)
        return -1;
    memset(f->out, 0x5A, f->out_bytes);
    memcpy(f->out_copy, f->out, f->out_bytes);
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    fixture *f = *state;
    if (!f)
        return 0;
    sgk_layer_destroy(f->layer);
    sgk_context_destroy(f->ctx);
    sgkt_prepared_free(&f->p);
    free(f->out);
    free(f->out_copy);
    free(f);
    return 0;
}

static void assert_out_untouched(const fixture *f)
{
    assert_memory_equal(f->out, f->out_copy, f->out_bytes);
}

/* ---- status strings, version ------------------------------------------ */

static void test_status_strings(void **state)
{
    (void)state;
    const char *unknown = sgk_status_string((sgk_status)9999);
    assert_non_null(unknown);
    assert_string_equal(unknown, "unknown status");
    assert_string_equal(sgk_status_string((sgk_status)-1), "unknown status");
    assert_string_equal(sgk_status_string((sgk_status)(SGK_ERR_INSUFFICIENT_WORKSPACE + 1)),
                        "unknown status");
    for (int s = SGK_OK; s <= SGK_ERR_INSUFFICIENT_WORKSPACE; s++) {
        const char *str = sgk_status_string((sgk_status)s);
        assert_non_null(str);
        assert_true(strlen(str) > 0);
        assert_string_not_equal(str, "unknown status");
        for (int t = SGK_OK; t < s; t++)
            assert_string_not_equal(str, sgk_status_string((sgk_status)t));
    }
}

static void test_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SGK_VERSION_MAJOR, SGK_VERSION_MINOR,
             SGK_VERSION_PATCH);
    assert_non_null(sgk_version());
    assert_string_equal(sgk_version(), want);
}

/* ---- registry ----------------------------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    int count = sgk_backend_count();
    assert_true(count >= 4);
    const char *want[] = {"cpu", "cuda", "hip", "opencl"};
    int seen[4] = {0, 0, 0, 0};
    for (int i = 0; i < count; i++) {
        sgk_backend_info info;
        assert_int_equal(sgk_backend_get(i, &info), SGK_OK);
        assert_non_null(info.name);
        assert_non_null(info.reason);
        for (int k = 0; k < 4; k++)
            if (strcmp(info.name, want[k]) == 0)
                seen[k]++;
        if (info.available) {
            assert_true(info.device_count >= 1);
        } else {
            assert_int_equal(info.device_count, 0);
            assert_true(strlen(info.reason) > 0);
        }
        printf("registry: %-7s available=%d devices=%d%s%s\n", info.name, info.available,
               info.device_count, info.available ? "" : " reason: ", info.reason);
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(seen[k], 1);

    sgk_backend_info cpu;
    assert_int_equal(sgk_backend_find("cpu", &cpu), SGK_OK);
    assert_string_equal(cpu.name, "cpu");
    assert_int_equal(cpu.available, 1);
    assert_true(cpu.device_count >= 1);
    assert_string_equal(cpu.reason, "");
    for (int k = 1; k < 4; k++) {
        sgk_backend_info info;
        assert_int_equal(sgk_backend_find(want[k], &info), SGK_OK);
        assert_string_equal(info.name, want[k]);
        assert_true(info.available || strlen(info.reason) > 0);
    }

    sgk_backend_info info, copy;
    memset(&info, 0x33, sizeof info);
    memcpy(&copy, &info, sizeof info);
    EXPECT_ERR(sgk_backend_get(-1, &info), SGK_ERR_INVALID_ARGUMENT, "index");
    EXPECT_ERR(sgk_backend_get(count, &info), SGK_ERR_INVALID_ARGUMENT, "index");
    EXPECT_ERR(sgk_backend_get(INT_MAX, &info), SGK_ERR_INVALID_ARGUMENT, "index");
    EXPECT_ERR(sgk_backend_get(0, NULL), SGK_ERR_NULL_POINTER, "info");
    EXPECT_ERR(sgk_backend_find(NULL, &info), SGK_ERR_NULL_POINTER, "name");
    EXPECT_ERR(sgk_backend_find("cpu", NULL), SGK_ERR_NULL_POINTER, "info");
    EXPECT_ERR(sgk_backend_find("no-such-backend", &info), SGK_ERR_UNKNOWN_BACKEND,
               "no-such-backend");
    EXPECT_ERR(sgk_backend_find("", &info), SGK_ERR_UNKNOWN_BACKEND, "name");
    EXPECT_ERR(sgk_backend_find("CPU", &info), SGK_ERR_UNKNOWN_BACKEND, "CPU");
    assert_memory_equal(&info, &copy, sizeof info);
}

static void test_device_name(void **state)
{
    (void)state;
    char buf[256];
    assert_int_equal(sgk_device_name("cpu", 0, buf, sizeof buf), SGK_OK);
    assert_true(strlen(buf) > 0);
    const size_t need = strlen(buf) + 1; /* "cpu" at least: the fallback name */
    assert_true(need >= 4);

    /* exactly large enough, then one byte short: never cut */
    char *exact = malloc(need);
    assert_non_null(exact);
    assert_int_equal(sgk_device_name("cpu", 0, exact, need), SGK_OK);
    assert_string_equal(exact, buf);
    free(exact);
    char copy[256];
    char want_len[32], want_need[32];
    snprintf(want_need, sizeof want_need, "needs %zu bytes", need);
    memset(buf, 0x44, sizeof buf);
    memcpy(copy, buf, sizeof buf);
    expect_err_words(__LINE__, sgk_device_name("cpu", 0, buf, need - 1), SGK_ERR_INVALID_ARGUMENT,
                     "buf_len", paren(want_len, sizeof want_len, need - 1), want_need, NULL);
    expect_err_words(__LINE__, sgk_device_name("cpu", 0, buf, 1), SGK_ERR_INVALID_ARGUMENT,
                     "buf_len", "(1)", want_need, NULL);
    assert_memory_equal(buf, copy, sizeof buf);

    EXPECT_ERR(sgk_device_name(NULL, 0, buf, sizeof buf), SGK_ERR_NULL_POINTER, "backend");
    EXPECT_ERR(sgk_device_name("cpu", 0, NULL, sizeof buf), SGK_ERR_NULL_POINTER, "buf");
    EXPECT_ERR(sgk_device_name("cpu", 0, buf, 0), SGK_ERR_INVALID_ARGUMENT, "buf_len");
    EXPECT_ERR(sgk_device_name("cpu", -1, buf, sizeof buf), SGK_ERR_INVALID_DEVICE, "device");
    EXPECT_ERR(sgk_device_name("cpu", INT_MAX, buf, sizeof buf), SGK_ERR_INVALID_DEVICE, "device");
    EXPECT_ERR(sgk_device_name("nope", 0, buf, sizeof buf), SGK_ERR_UNKNOWN_BACKEND, "nope");
    assert_memory_equal(buf, copy, sizeof buf);
}

/* ---- contexts ------------------------------------------------------------ */

static void test_context_errors(void **state)
{
    (void)state;
    sgk_context *const sentinel = (sgk_context *)(uintptr_t)0x1234;
    sgk_context *ctx = sentinel;
    EXPECT_ERR(sgk_context_create("cpu", 0, NULL, NULL), SGK_ERR_NULL_POINTER, "out");
    EXPECT_ERR(sgk_context_create(NULL, 0, NULL, &ctx), SGK_ERR_NULL_POINTER, "backend");
    EXPECT_ERR(sgk_context_create("no-such-backend", 0, NULL, &ctx), SGK_ERR_UNKNOWN_BACKEND,
               "no-such-backend");
    EXPECT_ERR(sgk_context_create("cpu", -1, NULL, &ctx), SGK_ERR_INVALID_DEVICE, "device");
    EXPECT_ERR(sgk_context_create("cpu", INT_MAX, NULL, &ctx), SGK_ERR_INVALID_DEVICE, "device");
    EXPECT_ERR(sgk_context_create("cpu", INT_MIN, NULL, &ctx), SGK_ERR_INVALID_DEVICE, "device");

    sgk_context_options opt;
    sgk_context_options_init(&opt);
    assert_int_equal(opt.struct_size, sizeof opt);
    opt.struct_size = 0;
    EXPECT_ERR(sgk_context_create("cpu", 0, &opt, &ctx), SGK_ERR_INVALID_ARGUMENT, "struct_size");
    sgk_context_options_init(&opt);
    opt.cpu_threads = -1;
    EXPECT_ERR(sgk_context_create("cpu", 0, &opt, &ctx), SGK_ERR_INVALID_ARGUMENT, "cpu_threads");
    sgk_context_options_init(&opt);
    opt.gpu_group_size = -1;
    EXPECT_ERR(sgk_context_create("cpu", 0, &opt, &ctx), SGK_ERR_INVALID_ARGUMENT, "gpu_group_size");
    opt.gpu_group_size = SGK_MAX_GPU_GROUP + 1;
    EXPECT_ERR(sgk_context_create("cpu", 0, &opt, &ctx), SGK_ERR_INVALID_ARGUMENT, "gpu_group_size");

    /* a backend that cannot run here says why */
    const char *gpus[] = {"cuda", "hip", "opencl"};
    for (int i = 0; i < 3; i++) {
        sgk_backend_info info;
        assert_int_equal(sgk_backend_find(gpus[i], &info), SGK_OK);
        if (!info.available)
            EXPECT_ERR(sgk_context_create(gpus[i], 0, NULL, &ctx), SGK_ERR_BACKEND_UNAVAILABLE,
                       gpus[i]);
    }
    assert_ptr_equal(ctx, sentinel);

    sgk_context_destroy(NULL);
    sgk_context_options_init(NULL);

    sgk_context_options_init(&opt);
    opt.cpu_threads = 1;
    opt.gpu_group_size = 64; /* GPU backends' alone: the cpu backend takes and ignores it */
    assert_int_equal(sgk_context_create("cpu", 0, &opt, &ctx), SGK_OK);
    assert_string_equal(sgk_context_backend(ctx), "cpu");
    sgk_context_destroy(ctx);
}

/* ---- versioned structs --------------------------------------------------- */

/* The first sgk_context_options ended with cpu_threads: a caller built
 * against it passes that much, and sgk must neither refuse it nor read
 * past it. */
static const size_t options_v1 =
    offsetof(sgk_context_options, cpu_threads) + sizeof(int);

/* An older caller's options: its struct_size and cpu_threads in a heap
 * block of exactly options_v1 bytes (an over-read is a sanitizer or
 * valgrind error). */
static const sgk_context_options *older_options(size_t struct_size, int cpu_threads)
{
    sgk_context_options full;
    sgk_context_options_init(&full);
    full.struct_size = struct_size;
    full.cpu_threads = cpu_threads;
    unsigned char *block = malloc(options_v1);
    assert_non_null(block);
    memcpy(block, &full, options_v1);
    return (const sgk_context_options *)(void *)block;
}

static void test_struct_size_options(void **state)
{
    (void)state;
    char n1[64], n2[64], n3[64];
    sgk_context *ctx = NULL;
    assert_true(options_v1 <= sizeof(sgk_context_options));

    /* an older caller works, and its field is read */
    const sgk_context_options *older = older_options(options_v1, 2);
    assert_int_equal(sgk_context_create("cpu", 0, older, &ctx), SGK_OK);
    sgk_context_destroy(ctx);
    free((void *)older);
    older = older_options(options_v1, -1);
    EXPECT_ERR(sgk_context_create("cpu", 0, older, &ctx), SGK_ERR_INVALID_ARGUMENT,
               "cpu_threads");
    free((void *)older);
    /* too small for any version */
    older = older_options(options_v1 - 1, 2);
    expect_err_words(__LINE__, sgk_context_create("cpu", 0, older, &ctx),
                     SGK_ERR_INVALID_ARGUMENT, "options->struct_size",
                     paren(n1, sizeof n1, options_v1 - 1), "oldest", NULL);
    snprintf(n2, sizeof n2, "less than %zu", options_v1);
    snprintf(n3, sizeof n3, "is %zu", sizeof(sgk_context_options));
    expect_err_words(__LINE__, sgk_context_create("cpu", 0, older, &ctx),
                     SGK_ERR_INVALID_ARGUMENT, n2, n3, NULL);
    free((void *)older);

    /* a newer caller: its unknown field left zero is accepted, set is refused */
    struct { sgk_context_options o; uint32_t newer; } wide;
    memset(&wide, 0, sizeof wide);
    sgk_context_options_init(&wide.o);
    wide.o.struct_size = sizeof wide;
    wide.o.cpu_threads = 1;
    assert_int_equal(sgk_context_create("cpu", 0, &wide.o, &ctx), SGK_OK);
    sgk_context_destroy(ctx);
    wide.newer = 1;
    sgk_context *const sentinel = (sgk_context *)(uintptr_t)0x1234;
    ctx = sentinel;
    snprintf(n2, sizeof n2, "sizeof(sgk_context_options) (%zu)", sizeof wide.o);
    expect_err_words(__LINE__, sgk_context_create("cpu", 0, &wide.o, &ctx), SGK_ERR_UNSUPPORTED,
                     "options->struct_size", paren(n1, sizeof n1, sizeof wide), n2, "newer",
                     NULL);
    assert_ptr_equal(ctx, sentinel);
    /* no version is that large: refused without reading that far */
    wide.o.struct_size = SIZE_MAX;
    EXPECT_ERR(sgk_context_create("cpu", 0, &wide.o, &ctx), SGK_ERR_INVALID_ARGUMENT,
               "struct_size");
    assert_ptr_equal(ctx, sentinel);
}

static void test_struct_size_desc(void **state)
{
    fixture *f = *state;
    char n1[64], n2[64];
    sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5678;
    sgk_layer *layer = sentinel;
    struct { sgk_layer_desc d; uint64_t newer[2]; } wide;
    memset(&wide, 0, sizeof wide);
    sgk_layer_desc_init(&wide.d);
    sgkt_weights_to_desc(&f->p.w, &wide.d);

    /* the first version is this one: one byte less is no version */
    wide.d.struct_size = sizeof wide.d - 1;
    expect_err_words(__LINE__, sgk_layer_create(f->ctx, &wide.d, &layer),
                     SGK_ERR_INVALID_ARGUMENT, "desc->struct_size",
                     paren(n1, sizeof n1, sizeof wide.d - 1), "sgk_layer_desc_init", NULL);
    /* a newer caller that leaves its fields zero gets a working layer */
    wide.d.struct_size = sizeof wide;
    assert_int_equal(sgk_layer_create(f->ctx, &wide.d, &layer), SGK_OK);
    const sgkt_inputs *in = &f->p.in;
    assert_int_equal(sgk_forward(layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                                 in->mask_type, f->out),
                     SGK_OK);
    sgk_layer_destroy(layer);
    layer = sentinel;
    /* one that sets one refuses, naming the byte */
    wide.newer[1] = (uint64_t)1 << 56;
    snprintf(n2, sizeof n2, "byte %zu", sizeof wide - 1);
    expect_err_words(__LINE__, sgk_layer_create(f->ctx, &wide.d, &layer), SGK_ERR_UNSUPPORTED,
                     "desc->struct_size", paren(n1, sizeof n1, sizeof wide), n2, NULL);
    assert_ptr_equal(layer, sentinel);
}

/* ---- layers -------------------------------------------------------------- */

static void layer_expect(fixture *f, const sgk_layer_desc *desc, sgk_status status,
                         const char *word, int line)
{
    sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5678;
    sgk_layer *layer = sentinel;
    sgk_status st = sgk_layer_create(f->ctx, desc, &layer);
    const char *msg = sgk_last_error();
    if (st != status || !strstr(msg, word) || layer != sentinel)
        fail_msg("line %d: sgk_layer_create gave %s, want %s; message \"%s\" should name \"%s\"%s",
                 line, sgk_status_string(st), sgk_status_string(status), msg, word,
                 layer != sentinel ? "; and *out was written" : "");
}

static void test_layer_errors(void **state)
{
    fixture *f = *state;
    sgk_layer_desc good;
    sgk_layer_desc_init(&good);
    assert_int_equal(good.struct_size, sizeof good);
    assert_true(good.eps == 1e-5f);
    assert_int_equal(good.dtype, SGK_DTYPE_F32);
    sgkt_weights_to_desc(&f->p.w, &good);

    sgk_layer *layer = (sgk_layer *)(uintptr_t)0x5678;
    EXPECT_ERR(sgk_layer_create(NULL, &good, &layer), SGK_ERR_NULL_POINTER, "ctx");
    EXPECT_ERR(sgk_layer_create(f->ctx, NULL, &layer), SGK_ERR_NULL_POINTER, "desc");
    EXPECT_ERR(sgk_layer_create(f->ctx, &good, NULL), SGK_ERR_NULL_POINTER, "out");
    assert_ptr_equal(layer, (sgk_layer *)(uintptr_t)0x5678);

    /* each weight pointer */
    static const char *wname[] = {"ln_gamma", "ln_beta", "wq", "wk", "wv", "wo",
                                  "w1", "b1", "w2", "b2"};
    for (int i = 0; i < 10; i++) {
        sgk_layer_desc d = good;
        const void **slots[] = {&d.ln_gamma, &d.ln_beta, &d.wq, &d.wk, &d.wv,
                                &d.wo, &d.w1, &d.b1, &d.w2, &d.b2};
        *slots[i] = NULL;
        layer_expect(f, &d, SGK_ERR_NULL_POINTER, wname[i], __LINE__);
    }

    sgk_layer_desc d;
    int64_t bad_sizes[] = {0, -1, INT64_MIN};
    for (int i = 0; i < 3; i++) {
        d = good;
        d.dim = bad_sizes[i];
        layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "dim", __LINE__);
        d = good;
        d.heads = bad_sizes[i];
        layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "heads", __LINE__);
        d = good;
        d.pair_dim = bad_sizes[i];
        layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "pair_dim", __LINE__);
    }
    d = good;
    d.heads = 3; /* 16 % 3 != 0 */
    layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "heads", __LINE__);
    d = good;
    d.heads = 32; /* more heads than features */
    layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "heads", __LINE__);

    float bad_eps[] = {-1e-5f, -0.5f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++) {
        d = good;
        d.eps = bad_eps[i];
        layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "eps", __LINE__);
    }
    d = good;
    d.eps = 0.0f; /* allowed */
    assert_int_equal(sgk_layer_create(f->ctx, &d, &layer), SGK_OK);
    sgk_layer_destroy(layer);

    d = good; /* the cpu backend runs both 16-bit dtypes (tests/test_dtypes.c) */
    d.dtype = SGK_DTYPE_BF16;
    assert_int_equal(sgk_layer_create(f->ctx, &d, &layer), SGK_OK);
    sgk_layer_destroy(layer);
    d.dtype = SGK_DTYPE_F16;
    assert_int_equal(sgk_layer_create(f->ctx, &d, &layer), SGK_OK);
    sgk_layer_destroy(layer);
    d.dtype = (sgk_dtype)77;
    layer_expect(f, &d, SGK_ERR_UNSUPPORTED, "dtype", __LINE__);

    d = good;
    d.struct_size = 0;
    layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "struct_size", __LINE__);
    d.struct_size = sizeof d - 1;
    layer_expect(f, &d, SGK_ERR_INVALID_ARGUMENT, "struct_size", __LINE__);

    /* D*D overflows int64 (and so size_t): refused before any weight is read */
    d = good;
    d.dim = (int64_t)1 << 33;
    d.heads = 1;
    layer_expect(f, &d, SGK_ERR_SIZE_OVERFLOW, "wq", __LINE__);
    d = good;
    d.pair_dim = (int64_t)1 << 40;
    layer_expect(f, &d, SGK_ERR_SIZE_OVERFLOW, "w1", __LINE__);

    sgk_layer_destroy(NULL);
    sgk_layer_desc_init(NULL);
}

/* ---- forward --------------------------------------------------------------- */

/* Calls forward (device = 0) or forward_device with a big enough workspace. */
static sgk_status call_fwd(fixture *f, int device, sgk_layer *layer, int64_t B, int64_t N,
                           const void *nodes, const void *pair, const void *mask,
                           sgk_mask_type mt, void *out)
{
    if (!device)
        return sgk_forward(layer, B, N, nodes, pair, mask, mt, out);
    size_t ws = 0;
    (void)sgk_workspace_size(f->layer, f->p.in.B, f->p.in.N, &ws);
    void *work = ws ? malloc(ws) : NULL;
    sgk_status st = sgk_forward_device(layer, B, N, nodes, pair, mask, mt, out, work, ws, NULL);
    free(work);
    return st;
}

#define FWD_ERR(args, status, word)                                                             \
    do {                                                                                        \
        EXPECT_ERR(call_fwd args, status, word);                                                \
        assert_out_untouched(f);                                                                \
    } while (0)

static void forward_errors(fixture *f, int dev)
{
    const sgkt_inputs *in = &f->p.in;
    sgk_layer *L = f->layer;
    int64_t B = in->B, N = in->N;
    const void *nd = in->nodes, *pf = in->pair_feats, *mk = in->edge_mask;
    sgk_mask_type mt = in->mask_type;
    float *out = f->out;

    FWD_ERR((f, dev, NULL, B, N, nd, pf, mk, mt, out), SGK_ERR_NULL_POINTER, "layer");
    FWD_ERR((f, dev, L, B, N, NULL, pf, mk, mt, out), SGK_ERR_NULL_POINTER, "nodes");
    FWD_ERR((f, dev, L, B, N, nd, NULL, mk, mt, out), SGK_ERR_NULL_POINTER, "pair_feats");
    FWD_ERR((f, dev, L, B, N, nd, pf, NULL, mt, out), SGK_ERR_NULL_POINTER, "edge_mask");
    EXPECT_ERR(call_fwd(f, dev, L, B, N, nd, pf, mk, mt, NULL), SGK_ERR_NULL_POINTER, "out");

    int64_t bad[] = {0, -1, INT64_MIN};
    for (int i = 0; i < 3; i++) {
        FWD_ERR((f, dev, L, bad[i], N, nd, pf, mk, mt, out), SGK_ERR_INVALID_ARGUMENT, "B");
        FWD_ERR((f, dev, L, B, bad[i], nd, pf, mk, mt, out), SGK_ERR_INVALID_ARGUMENT, "N");
    }
    FWD_ERR((f, dev, L, B, N, nd, pf, mk, (sgk_mask_type)7, out), SGK_ERR_UNSUPPORTED,
            "mask_type");
    FWD_ERR((f, dev, L, B, N, nd, pf, mk, (sgk_mask_type)-1, out), SGK_ERR_UNSUPPORTED,
            "mask_type");

    /* byte counts past size_t: B = N = 2^31 gives B*N*N*P = 2^93 * P */
    int64_t big = (int64_t)1 << 31;
    FWD_ERR((f, dev, L, big, big, nd, pf, mk, mt, out), SGK_ERR_SIZE_OVERFLOW, "B*N");
    FWD_ERR((f, dev, L, 1, (int64_t)1 << 32, nd, pf, mk, mt, out), SGK_ERR_SIZE_OVERFLOW,
            "pair_feats");
    FWD_ERR((f, dev, L, INT64_MAX, 1, nd, pf, mk, mt, out), SGK_ERR_SIZE_OVERFLOW, "nodes");
    /* 2^60 pair elements fit a size_t in bytes (2^62) but no backend's index */
    FWD_ERR((f, dev, L, (int64_t)1 << 40, (int64_t)1 << 10, nd, pf, mk, mt, out),
            SGK_ERR_SIZE_OVERFLOW, "pair_feats");

    /* out must not alias an input */
    memcpy(f->out, in->nodes, f->out_bytes);
    memcpy(f->out_copy, f->out, f->out_bytes);
    EXPECT_ERR(call_fwd(f, dev, L, B, N, f->out, pf, mk, mt, f->out), SGK_ERR_INVALID_ARGUMENT,
               "out");
    assert_out_untouched(f);
    memset(f->out, 0x5A, f->out_bytes);
    memcpy(f->out_copy, f->out, f->out_bytes);
}

static void test_forward_errors(void **state)
{
    fixture *f = *state;
    forward_errors(f, 0);
}

static void test_forward_device_errors(void **state)
{
    fixture *f = *state;
    forward_errors(f, 1);

    const sgkt_inputs *in = &f->p.in;
    size_t ws = 12345;
    EXPECT_ERR(sgk_workspace_size(NULL, in->B, in->N, &ws), SGK_ERR_NULL_POINTER, "layer");
    EXPECT_ERR(sgk_workspace_size(f->layer, in->B, in->N, NULL), SGK_ERR_NULL_POINTER, "bytes");
    EXPECT_ERR(sgk_workspace_size(f->layer, 0, in->N, &ws), SGK_ERR_INVALID_ARGUMENT, "B");
    EXPECT_ERR(sgk_workspace_size(f->layer, in->B, -3, &ws), SGK_ERR_INVALID_ARGUMENT, "N");
    assert_int_equal(ws, 12345);

    /* every variant: too little workspace is refused before anything runs */
    const char *names[32];
    int supported[32], count = 0, checked = 0;
    assert_int_equal(sgk_layer_variants(f->layer, in->B, in->N, names, supported, 32, &count),
                     SGK_OK);
    for (int v = 0; v < count; v++) {
        if (!supported[v])
            continue;
        assert_int_equal(sgk_layer_set_variant(f->layer, names[v]), SGK_OK);
        assert_int_equal(sgk_workspace_size(f->layer, in->B, in->N, &ws), SGK_OK);
        if (ws == 0)
            continue;
        void *work = malloc(ws);
        assert_non_null(work);
        EXPECT_ERR(sgk_forward_device(f->layer, in->B, in->N, in->nodes, in->pair_feats,
                                      in->edge_mask, in->mask_type, f->out, NULL, ws, NULL),
                   SGK_ERR_INSUFFICIENT_WORKSPACE, "workspace");
        assert_out_untouched(f);
        EXPECT_ERR(sgk_forward_device(f->layer, in->B, in->N, in->nodes, in->pair_feats,
                                      in->edge_mask, in->mask_type, f->out, work, ws - 1, NULL),
                   SGK_ERR_INSUFFICIENT_WORKSPACE, "workspace_bytes");
        assert_out_untouched(f);
        EXPECT_ERR(sgk_forward_device(f->layer, in->B, in->N, in->nodes, in->pair_feats,
                                      in->edge_mask, in->mask_type, f->out, work, 0, NULL),
                   SGK_ERR_INSUFFICIENT_WORKSPACE, "workspace_bytes");
        assert_out_untouched(f);
        /* exactly enough works */
        assert_int_equal(sgk_forward_device(f->layer, in->B, in->N, in->nodes, in->pair_feats,
                                            in->edge_mask, in->mask_type, f->out, work, ws, NULL),
                         SGK_OK);
        memset(f->out, 0x5A, f->out_bytes);
        free(work);
        checked++;
    }
    assert_int_equal(sgk_layer_set_variant(f->layer, NULL), SGK_OK);
    printf("workspace: %d of %d cpu variants need a workspace and refuse a short one\n", checked,
           count);
}

/* ---- variants ---------------------------------------------------------- */

static void test_variant_errors(void **state)
{
    fixture *f = *state;
    const sgkt_inputs *in = &f->p.in;
    int count = -5;
    EXPECT_ERR(sgk_layer_variants(NULL, 1, 1, NULL, NULL, 0, &count), SGK_ERR_NULL_POINTER, "layer");
    EXPECT_ERR(sgk_layer_variants(f->layer, 1, 1, NULL, NULL, 0, NULL), SGK_ERR_NULL_POINTER,
               "count");
    assert_int_equal(count, -5);
    assert_int_equal(sgk_layer_variants(f->layer, 1, 1, NULL, NULL, 0, &count), SGK_OK);
    assert_true(count >= 1);
    if (count > 1) {
        const char *names[1] = {NULL};
        EXPECT_ERR(sgk_layer_variants(f->layer, 1, 1, names, NULL, 1, &count),
                   SGK_ERR_INVALID_ARGUMENT, "capacity");
        assert_null(names[0]);
    }

    EXPECT_ERR(sgk_layer_set_variant(NULL, "x"), SGK_ERR_NULL_POINTER, "layer");
    EXPECT_ERR(sgk_layer_set_variant(f->layer, "no-such-variant"), SGK_ERR_UNKNOWN_VARIANT,
               "no-such-variant");
    EXPECT_ERR(sgk_layer_set_variant(f->layer, ""), SGK_ERR_UNKNOWN_VARIANT, "name");
    /* an unknown name leaves the automatic choice in place */
    const char *chosen = NULL;
    assert_int_equal(sgk_layer_variant_for(f->layer, in->B, in->N, &chosen), SGK_OK);
    assert_non_null(chosen);

    const char *name = (const char *)(uintptr_t)0x99;
    EXPECT_ERR(sgk_layer_variant_for(NULL, 1, 1, &name), SGK_ERR_NULL_POINTER, "layer");
    EXPECT_ERR(sgk_layer_variant_for(f->layer, 1, 1, NULL), SGK_ERR_NULL_POINTER, "name");
    EXPECT_ERR(sgk_layer_variant_for(f->layer, 0, 1, &name), SGK_ERR_INVALID_ARGUMENT, "B");
    EXPECT_ERR(sgk_layer_variant_for(f->layer, 1, 0, &name), SGK_ERR_INVALID_ARGUMENT, "N");
    assert_ptr_equal(name, (const char *)(uintptr_t)0x99);

    /* a forced variant that does not support a shape refuses it, never falls back */
    const int64_t shapes[][2] = {{1, 1}, {1, 64}, {1, 1024}, {1, 4096}};
    int refused = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t B = shapes[s][0], N = shapes[s][1];
        const char *names[32];
        int supported[32], n = 0;
        assert_int_equal(sgk_layer_variants(f->layer, B, N, names, supported, 32, &n), SGK_OK);
        for (int v = 0; v < n; v++) {
            if (supported[v])
                continue;
            /* inputs are never read on this path; reserve them anyway */
            size_t nodes_n = (size_t)(B * N * in->D), pair_n = (size_t)(B * N * N * in->P);
            float *nodes = calloc(nodes_n, sizeof(float));
            float *pair = malloc(pair_n * sizeof(float));
            uint8_t *mask = calloc((size_t)(B * N * N), 1);
            float *out = malloc(nodes_n * sizeof(float));
            float *copy = malloc(nodes_n * sizeof(float));
            assert_true(nodes && pair && mask && out && copy);
            memset(out, 0x77, nodes_n * sizeof(float));
            memcpy(copy, out, nodes_n * sizeof(float));
            assert_int_equal(sgk_layer_set_variant(f->layer, names[v]), SGK_OK);
            EXPECT_ERR(sgk_forward(f->layer, B, N, nodes, pair, mask, SGK_MASK_U8, out),
                       SGK_ERR_UNSUPPORTED, names[v]);
            assert_memory_equal(out, copy, nodes_n * sizeof(float));
            EXPECT_ERR(sgk_layer_variant_for(f->layer, B, N, &name), SGK_ERR_UNSUPPORTED,
                       names[v]);
            assert_int_equal(sgk_layer_set_variant(f->layer, NULL), SGK_OK);
            free(nodes);
            free(pair);
            free(mask);
            free(out);
            free(copy);
            refused++;
        }
    }
    printf("variants: %d forced (variant, shape) pairs refused as unsupported\n", refused);
}

/* ---- allocation failures ------------------------------------------------- */

static void test_out_of_memory(void **state)
{
    fixture *f = *state;
    const sgkt_inputs *in = &f->p.in;
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(&f->p.w, &desc);

    /* count what each call allocates, then fail each allocation in turn */
    sgk_testing_fail_alloc_after(0);
    sgk_context *ctx = NULL;
    assert_int_equal(sgk_context_create("cpu", 0, NULL, &ctx), SGK_OK);
    int64_t n_ctx = sgk_testing_alloc_count();
    sgk_context_destroy(ctx);
    for (int64_t k = 1; k <= n_ctx; k++) {
        sgk_context *c = (sgk_context *)(uintptr_t)0x42;
        sgk_testing_fail_alloc_after(k);
        EXPECT_ERR(sgk_context_create("cpu", 0, NULL, &c), SGK_ERR_OUT_OF_MEMORY, "");
        assert_ptr_equal(c, (sgk_context *)(uintptr_t)0x42);
    }

    sgk_testing_fail_alloc_after(0);
    sgk_layer *layer = NULL;
    assert_int_equal(sgk_layer_create(f->ctx, &desc, &layer), SGK_OK);
    int64_t n_layer = sgk_testing_alloc_count();
    sgk_layer_destroy(layer);
    for (int64_t k = 1; k <= n_layer; k++) {
        sgk_layer *l = (sgk_layer *)(uintptr_t)0x43;
        sgk_testing_fail_alloc_after(k);
        EXPECT_ERR(sgk_layer_create(f->ctx, &desc, &l), SGK_ERR_OUT_OF_MEMORY, "");
        assert_ptr_equal(l, (sgk_layer *)(uintptr_t)0x43);
    }

    sgk_testing_fail_alloc_after(0);
    assert_int_equal(sgk_forward(f->layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                                 in->mask_type, f->out),
                     SGK_OK);
    int64_t n_fwd = sgk_testing_alloc_count();
    memset(f->out, 0x5A, f->out_bytes);
    for (int64_t k = 1; k <= n_fwd; k++) {
        sgk_testing_fail_alloc_after(k);
        EXPECT_ERR(sgk_forward(f->layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                               in->mask_type, f->out),
                   SGK_ERR_OUT_OF_MEMORY, "");
        assert_out_untouched(f);
    }
    sgk_testing_fail_alloc_after(0);
    printf("out of memory: context %lld, layer %lld, forward %lld allocations each failed in turn\n",
           (long long)n_ctx, (long long)n_layer, (long long)n_fwd);
    assert_true(n_ctx + n_layer >= 1);
}

/* ---- a good call works and clears nothing it should not ------------------ */

static void test_forward_ok(void **state)
{
    fixture *f = *state;
    const sgkt_inputs *in = &f->p.in;
    for (int mt = 0; mt < 2; mt++) {
        sgkt_run r = sgkt_run_forward(f->layer, in, mt);
        assert_int_equal(r.status, SGK_OK);
        assert_true(r.guard_ok);
        sgkt_error e = sgkt_compare(r.out, f->p.ref, f->p.n_out);
        assert_true(sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL));
        sgkt_run_free(&r);
    }
    /* weights are copied at create: the caller may change them afterwards */
    f->p.w.wq[0] += 1.0f;
    sgkt_run r = sgkt_run_forward(f->layer, in, 0);
    sgkt_error e = sgkt_compare(r.out, f->p.ref, f->p.n_out);
    assert_true(sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL));
    f->p.w.wq[0] -= 1.0f;
    sgkt_run_free(&r);
}

/* ---- the last-error message is per thread ------------------------------- */

static void *fail_in_thread(void *arg)
{
    sgk_backend_info info;
    int *ok = arg;
    *ok = sgk_backend_find("other-thread-backend", &info) == SGK_ERR_UNKNOWN_BACKEND &&
          strstr(sgk_last_error(), "other-thread-backend") != NULL;
    return NULL;
}

static void test_last_error_thread_local(void **state)
{
    (void)state;
    sgk_backend_info info;
    EXPECT_ERR(sgk_backend_find("main-thread-backend", &info), SGK_ERR_UNKNOWN_BACKEND,
               "main-thread-backend");
    pthread_t th;
    int ok = 0;
    assert_int_equal(pthread_create(&th, NULL, fail_in_thread, &ok), 0);
    pthread_join(th, NULL);
    assert_true(ok);
    assert_non_null(strstr(sgk_last_error(), "main-thread-backend"));
    assert_null(strstr(sgk_last_error(), "other-thread-backend"));
}

/* ---- new weights ------------------------------------------------------- */

/* A refused call names the field and both values, and keeps the weights;
 * an accepted one takes them, eps included. */
static void test_set_weights_errors(void **state)
{
    fixture *f = *state;
    sgk_layer_desc d;
    sgk_layer_desc_init(&d);
    sgkt_weights_to_desc(&f->p.w, &d);
    float *before = malloc(f->out_bytes), *after = malloc(f->out_bytes);
    assert_non_null(before);
    assert_non_null(after);
    const sgkt_inputs *in = &f->p.in;
    assert_int_equal(sgk_forward(f->layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                                 in->mask_type, before), SGK_OK);
    d.dim = 32;
    expect_err_words(__LINE__, sgk_layer_set_weights(f->layer, &d), SGK_ERR_INVALID_ARGUMENT,
                     "desc->dim (32)", "layer's dim (16)", NULL);
    d.dim = 16;
    d.pair_dim = 5;
    expect_err_words(__LINE__, sgk_layer_set_weights_device(f->layer, &d, NULL),
                     SGK_ERR_INVALID_ARGUMENT, "desc->pair_dim (5)", "layer's pair_dim (4)", NULL);
    d.pair_dim = 4;
    d.eps = 0.125f;
    expect_err_words(__LINE__, sgk_layer_set_weights_device(f->layer, &d, NULL),
                     SGK_ERR_INVALID_ARGUMENT, "desc->eps (0.125)", "layer's eps (9.99999975e-06)",
                     "sgk_layer_set_weights", NULL);
    assert_int_equal(sgk_forward(f->layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                                 in->mask_type, after), SGK_OK);
    assert_memory_equal(before, after, f->out_bytes);
    /* eps 0.125 through the host form, then the device form with it */
    assert_int_equal(sgk_layer_set_weights(f->layer, &d), SGK_OK);
    assert_int_equal(sgk_layer_set_weights_device(f->layer, &d, NULL), SGK_OK);
    assert_int_equal(sgk_forward(f->layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                                 in->mask_type, after), SGK_OK);
    assert_memory_not_equal(before, after, f->out_bytes);
    free(before);
    free(after);
}

/* The repack map builder (kernels/repack.c) on packers of its own: gathers
 * with scales and zero padding get a map that gives their bits; anything
 * else gets none, with the reason. */
typedef struct toy {
    int kind;
    size_t total;
} toy;

enum { TOY_GATHER, TOY_SUM, TOY_ONE_PAD, TOY_SQUARE, TOY_SCALES };

static void toy_pack(const sgk_layer_desc *d, float *dst, void *user)
{
    const toy *t = user;
    const float *wq = d->wq, *w1 = d->w1, *b2 = d->b2, *gamma = d->ln_gamma;
    const size_t D = (size_t)d->dim;
    memset(dst, 0, t->total * sizeof(float));
    for (size_t i = 0; i < D * D; i++) /* wq transposed, a gap of zeros after each row */
        dst[(i % D) * (D + 3) + i / D] = wq[i];
    float *tail = dst + D * (D + 3);
    for (int i = 0; i < (int)(d->pair_dim * d->pair_dim); i++)
        tail[i] = w1[i] * -1.4426950408889634f;
    tail[16] = b2[1] * 0.75f;
    tail[17] = gamma[D - 1];
    switch (t->kind) {
    case TOY_SUM: tail[18] = gamma[0] + gamma[1]; break;
    case TOY_ONE_PAD: tail[18] = 1.0f; break;
    case TOY_SQUARE: tail[18] = gamma[2] * gamma[2]; break;
    case TOY_SCALES: tail[18] = gamma[0] * 3.0f, tail[19] = gamma[1] * 5.0f; break;
    default: break;
    }
}

static void test_repack_map(void **state)
{
    (void)state;
    sgkt_weights w;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, SEED);
    assert_int_equal(sgkt_weights_alloc(&w, 8, 2, 2), 0);
    sgkt_weights_random(&w, &rng);
    sgk_layer_desc d;
    sgk_layer_desc_init(&d);
    sgkt_weights_to_desc(&w, &d);
    static const char *const reasons[] = {
        [TOY_SUM] = "not one weight element", [TOY_ONE_PAD] = "the probed map gives",
        [TOY_SQUARE] = "", [TOY_SCALES] = "distinct constants",
    };
    toy t = {TOY_GATHER, 8 * 11 + 24};
    float *packed = malloc(t.total * sizeof(float)), *got = malloc(t.total * sizeof(float));
    assert_non_null(packed);
    assert_non_null(got);
    for (t.kind = TOY_GATHER; t.kind <= TOY_SCALES; t.kind++) {
        toy_pack(&d, packed, &t);
        sgk_repack_map m;
        assert_int_equal(sgk_repack_map_build(&d, toy_pack, &t, t.total, packed, NULL, &m), 0);
        if (t.kind != TOY_GATHER) {
            if (m.runs != NULL || !strstr(m.reason, reasons[t.kind]))
                fail_msg("toy packer %d: a map (%zu runs) or the wrong reason: \"%s\"", t.kind,
                         m.count, m.reason);
            continue;
        }
        if (m.runs == NULL)
            fail_msg("the gathering toy packer got no map: %s", m.reason);
        /* two constants besides 1; 8 rows of wq, 4 of w1, b2, gamma */
        assert_int_equal(m.nscales, 3);
        assert_int_equal(m.count, 8 + 1 + 2);
        assert_int_equal(m.covered, 64 + 4 + 2);
        assert_false(sgk_repack_copies_only(&m));
        sgkt_weights_random(&w, &rng); /* other weights, same pointers */
        toy_pack(&d, packed, &t);
        memset(got, 0, t.total * sizeof(float));
        sgk_repack_apply(&m, &d, got);
        assert_memory_equal(got, packed, t.total * sizeof(float));
        sgk_repack_map_free(&m);
    }
    /* sgk_pack_weights: ten plain copies */
    const sgk_packed o = sgk_packed_layout(8, 2, 2);
    float *gen = realloc(packed, o.total * sizeof(float));
    assert_non_null(gen);
    sgk_pack_weights(&d, gen);
    sgk_repack_map m;
    assert_int_equal(sgk_repack_map_build(&d, sgk_pack_weights_fn, NULL, o.total, gen, NULL, &m), 0);
    assert_non_null(m.runs);
    assert_int_equal(m.count, 10);
    assert_int_equal(m.covered, o.total);
    assert_true(sgk_repack_copies_only(&m));
    sgk_repack_map_free(&m);
    free(gen);
    free(got);
    sgkt_weights_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_device_name),
        cmocka_unit_test(test_context_errors),
        cmocka_unit_test(test_struct_size_options),
        cmocka_unit_test_setup_teardown(test_struct_size_desc, fixture_setup, fixture_teardown),
        cmocka_unit_test(test_last_error_thread_local),
        cmocka_unit_test_setup_teardown(test_layer_errors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_forward_errors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_forward_device_errors, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_variant_errors, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_memory, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_forward_ok, fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_set_weights_errors, fixture_setup, fixture_teardown),
        cmocka_unit_test(test_repack_map),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
