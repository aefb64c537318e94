/* libFuzzer target over sgk's public API on the cpu backend.
 *
 * The input is a little program: each step picks a call (context or layer
 * creation and destruction in any order, forward, forward_device, new
 * weights from host or "device" pointers, variants, queries, the registry)
 * and its arguments; training calls on small shapes; sizes small enough to compute
 * or wild (0, negative, huge, overflowing), NULL and misaligned pointers,
 * aliasing outputs, mask types in and out of the enum, forced variants, and
 * an allocation failure injected into the next call. A model of sgk's rules
 * gives, for each call, the set of statuses it may return; anything else
 * aborts (a finding), as does an output written by a failed call, a result
 * off the double reference, or whatever ASan, UBSan and LeakSanitizer see.
 *
 * Misaligned float buffers: sgk rejects them with SGK_ERR_INVALID_ARGUMENT
 * (reading a float at an odd address is undefined in C); a u8 mask may be
 * anywhere.
 *
 * Sizes that pass every check are computed only when the buffers are small;
 * a call sgk would have to run on huge buffers is skipped, since a caller
 * would have to provide them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "sgk.h"
#include "sgk_testing.h"
#include "util.h"

/* The cpu backend's largest tensor (sgk_backend_ops.max_elements). */
#define CPU_MAX_ELEMENTS (INT64_MAX / 16)
#define MAX_STEPS 48
#define CTX_SLOTS 2
#define LAYER_SLOTS 3
#define PATTERN 0xa7

/* ---- reading the input ------------------------------------------------- */

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t u8(input *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t u64(input *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u8(in);
    return v;
}

static int64_t wild_size(input *in)
{
    static const int64_t table[] = {
        0, -1, -2, INT64_MIN, INT64_MAX, (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 29,
        3037000500LL, 759250124LL, (int64_t)1 << 40, (int64_t)1 << 62, 4096, 65536, 1000003,
    };
    uint8_t s = u8(in);
    if (s < 15)
        return table[s];
    if (s < 40)
        return (int64_t)1 << (s % 63);
    return (int64_t)u64(in);
}

/* Mostly small enough to compute; now and then anything. */
static int64_t size_arg(input *in)
{
    uint8_t s = u8(in);
    return s < 224 ? 1 + s % 4 : wild_size(in);
}

/* ---- the model: which statuses a call may give ------------------------- */

typedef struct allowed {
    unsigned bits; /* 1 << status */
} allowed;

static void allow(allowed *a, sgk_status st) { a->bits |= 1u << st; }
static int allows(const allowed *a, sgk_status st) { return (unsigned)st < 32 && (a->bits >> st & 1); }

static void finding(const char *what, sgk_status st, const allowed *a)
{
    fprintf(stderr, "fuzz_api: %s: got %s (%d), allowed mask 0x%x; message: %s\n", what,
            sgk_status_string(st), (int)st, a ? a->bits : 0,
            st == SGK_OK ? "(none: success)" : sgk_last_error());
    abort();
}

static void check_status(const char *call, sgk_status st, const allowed *a)
{
    if (!allows(a, st))
        finding(call, st, a);
    if (st != SGK_OK && sgk_last_error()[0] == '\0')
        finding("error without a message", st, a);
}

/* Element count of dims within int64, size_t bytes and the backend's limit. */
static int fits(const int64_t *dims, int n, size_t elem, int64_t *count)
{
    int64_t c = 1;
    for (int i = 0; i < n; i++)
        if (__builtin_mul_overflow(c, dims[i], &c))
            return 0;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)c, elem, &bytes) || c > CPU_MAX_ELEMENTS)
        return 0;
    *count = c;
    return 1;
}

/* ---- objects ------------------------------------------------------------ */

typedef struct layer_slot {
    sgk_layer *layer;
    int ctx;
    int64_t D, H, P;
    sgkt_weights w;
    int forced; /* a variant is forced: forward may say UNSUPPORTED */
} layer_slot;

typedef struct state {
    input in;
    sgk_context *ctx[CTX_SLOTS];
    layer_slot layer[LAYER_SLOTS];
    int armed; /* an allocation failure is armed for this step */
} state;

static void destroy_layer(state *s, int i)
{
    sgk_layer_destroy(s->layer[i].layer);
    sgkt_weights_free(&s->layer[i].w);
    memset(&s->layer[i], 0, sizeof s->layer[i]);
}

/* A context outlives its layers. */
static void destroy_ctx(state *s, int c)
{
    for (int i = 0; i < LAYER_SLOTS; i++)
        if (s->layer[i].layer && s->layer[i].ctx == c)
            destroy_layer(s, i);
    sgk_context_destroy(s->ctx[c]);
    s->ctx[c] = NULL;
}

static void step_context_create(state *s)
{
    static const char *const names[] = {"cpu", "cpu", "cpu", "cuda", "opencl", "hip", "CPU", "", NULL};
    uint8_t sel = u8(&s->in);
    const char *name = names[sel % 9];
    int device = (sel & 0x30) == 0x30 ? (int)(int8_t)u8(&s->in) : 0;
    int slot = u8(&s->in) % CTX_SLOTS;
    /* A newer caller's struct: the bytes past sizeof(sgk_context_options)
     * are a field this sgk lacks, set (read when struct_size covers them). */
    struct { sgk_context_options opt; unsigned char newer[8]; } wide;
    memset(wide.newer, 0xa5, sizeof wide.newer);
    sgk_context_options *const opt = &wide.opt;
    sgk_context_options_init(opt);
    uint8_t o = u8(&s->in);
    int with_opt = o % 4 != 0;
    opt->cpu_threads = (o >> 2) % 4;
    if (o >= 0xf0)
        opt->cpu_threads = -1 - (o & 3);
    if ((o & 0xe0) == 0xc0)
        opt->struct_size = (o & 1) ? 0 : sizeof *opt + 8;

    allowed a = {0};
    int bad = 0;
    if (name == NULL) { allow(&a, SGK_ERR_NULL_POINTER); bad = 1; }
    else if (strcmp(name, "cpu") != 0) {
        sgk_backend_info info;
        if (sgk_backend_find(name, &info) != SGK_OK)
            allow(&a, SGK_ERR_UNKNOWN_BACKEND);
        else if (!info.available)
            allow(&a, SGK_ERR_BACKEND_UNAVAILABLE);
        else
            return; /* this target fuzzes the cpu backend only */
        bad = 1;
    }
    if (with_opt && opt->struct_size < sizeof *opt) { allow(&a, SGK_ERR_INVALID_ARGUMENT); bad = 1; }
    if (with_opt && opt->struct_size > sizeof *opt) { allow(&a, SGK_ERR_UNSUPPORTED); bad = 1; }
    if (with_opt && opt->cpu_threads < 0) { allow(&a, SGK_ERR_INVALID_ARGUMENT); bad = 1; }
    if (device != 0) { allow(&a, SGK_ERR_INVALID_DEVICE); bad = 1; }
    if (s->armed) allow(&a, SGK_ERR_OUT_OF_MEMORY);
    if (!bad) allow(&a, SGK_OK);

    if (s->ctx[slot])
        destroy_ctx(s, slot);
    sgk_context *const sentinel = (sgk_context *)(uintptr_t)0x5a5a5a50;
    sgk_context *ctx = sentinel;
    sgk_status st = sgk_context_create(name, device, with_opt ? opt : NULL, &ctx);
    check_status("sgk_context_create", st, &a);
    if (st != SGK_OK) {
        if (ctx != sentinel)
            finding("failed sgk_context_create wrote its out handle", st, &a);
        return;
    }
    s->ctx[slot] = ctx;
    if (strcmp(sgk_context_backend(ctx), "cpu") != 0)
        finding("context of the wrong backend", st, &a);
}

static void step_layer_create(state *s)
{
    uint8_t mode = u8(&s->in);
    int slot = u8(&s->in) % LAYER_SLOTS;
    int c = u8(&s->in) % (CTX_SLOTS + 1); /* CTX_SLOTS: a NULL context */
    sgk_context *ctx = c < CTX_SLOTS ? s->ctx[c] : NULL;
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    int64_t D, H, P;
    static const float epss[] = {1e-5f, 1e-3f, 0.5f, 0.0f, -1.0f, NAN, INFINITY, -0.0f};
    float eps = epss[u8(&s->in) % 4];
    int null_weight = -1;
    if (mode < 200) {
        uint8_t h = u8(&s->in);
        H = h < 224 ? 1 + h % 8 : (h & 1 ? 16 : 32);
        D = H * (1 + u8(&s->in) % 4);
        uint8_t p = u8(&s->in);
        P = p < 224 ? 1 + p % 4 : 1 + p % 16;
    } else {
        /* Everything may be wrong at once. */
        D = u8(&s->in) % 2 ? wild_size(&s->in) : 8;
        H = u8(&s->in) % 2 ? wild_size(&s->in) : 2;
        P = u8(&s->in) % 2 ? wild_size(&s->in) : 3;
        eps = epss[u8(&s->in) % 8];
        uint8_t d = u8(&s->in);
        desc.dtype = d % 4 == 3 ? (sgk_dtype)(d >> 2) : (sgk_dtype)(d % 4 % 3);
        uint8_t z = u8(&s->in);
        desc.struct_size = z % 4 == 0 ? 0 : z % 4 == 1 ? sizeof desc + 8 : sizeof desc;
        null_weight = (int)(u8(&s->in) % 12) - 1; /* -1, 10: none */
    }
    desc.dim = D;
    desc.heads = H;
    desc.pair_dim = P;
    desc.eps = eps;
    uint8_t nulls = u8(&s->in);
    int null_desc = nulls == 0xff, null_out = nulls == 0xfe;

    allowed a = {0};
    int bad = 0;
    if (ctx == NULL || null_desc || null_out) { allow(&a, SGK_ERR_NULL_POINTER); bad = 1; }
    if (desc.struct_size < sizeof desc) { allow(&a, SGK_ERR_INVALID_ARGUMENT); bad = 1; }
    if (desc.struct_size > sizeof desc) { allow(&a, SGK_ERR_UNSUPPORTED); bad = 1; }
    /* the cpu backend runs both 16-bit dtypes; the model follows F32 layers */
    const int half = desc.dtype == SGK_DTYPE_BF16 || desc.dtype == SGK_DTYPE_F16;
    if (desc.dtype != SGK_DTYPE_F32 && !half) { allow(&a, SGK_ERR_UNSUPPORTED); bad = 1; }
    int dims_ok = D >= 1 && H >= 1 && P >= 1;
    if (!dims_ok || (dims_ok && D % H != 0) || !isfinite(eps) || eps < 0) { allow(&a, SGK_ERR_INVALID_ARGUMENT); bad = 1; }
    if (null_weight >= 0 && null_weight < 10) { allow(&a, SGK_ERR_NULL_POINTER); bad = 1; }
    int64_t count;
    if (dims_ok) {
        const int64_t dd[] = {D, D}, pp[] = {P, P}, hp[] = {H, P};
        if (!fits(dd, 2, 4, &count) || !fits(pp, 2, 4, &count) || !fits(hp, 2, 4, &count)) {
            allow(&a, SGK_ERR_SIZE_OVERFLOW);
            bad = 1;
        }
    }
    if (s->armed) allow(&a, SGK_ERR_OUT_OF_MEMORY);
    if (!bad) allow(&a, SGK_OK);

    /* Weights as large as the dims say when the call may read them, else a
     * few floats: a call that must fail may not read them. */
    int real = !bad;
    if (real && (D > 128 || P > 64))
        return; /* valid but larger than this target computes */
    sgkt_weights w;
    if (sgkt_weights_alloc(&w, real ? D : 4, real ? H : 2, real ? P : 2) != 0)
        abort();
    sgkt_rng rng;
    sgkt_rng_seed(&rng, u64(&s->in));
    sgkt_weights_random(&w, &rng);
    w.eps = eps;
    /* A newer caller's struct, as in step_context_create. */
    struct { sgk_layer_desc desc; unsigned char newer[8]; } wide;
    memset(wide.newer, 0xa5, sizeof wide.newer);
    wide.desc = desc;
    sgk_layer_desc *const filled = &wide.desc;
    sgkt_weights_to_desc(&w, filled);
    filled->dim = D;
    filled->heads = H;
    filled->pair_dim = P;
    const void **ptrs[] = {&filled->ln_gamma, &filled->ln_beta, &filled->wq, &filled->wk,
                           &filled->wv, &filled->wo, &filled->w1, &filled->b1, &filled->w2,
                           &filled->b2};
    if (null_weight >= 0 && null_weight < 10)
        *ptrs[null_weight] = NULL;

    if (s->layer[slot].layer)
        destroy_layer(s, slot);
    sgk_layer *const sentinel = (sgk_layer *)(uintptr_t)0x5a5a5a50;
    sgk_layer *layer = sentinel;
    sgk_status st = sgk_layer_create(ctx, null_desc ? NULL : filled, null_out ? NULL : &layer);
    check_status("sgk_layer_create", st, &a);
    if (st != SGK_OK) {
        if (layer != sentinel)
            finding("failed sgk_layer_create wrote its out handle", st, &a);
        sgkt_weights_free(&w);
        return;
    }
    if (half) { /* made and gone: the model's later steps are F32 */
        sgk_layer_destroy(layer);
        sgkt_weights_free(&w);
        return;
    }
    /* The reference keeps the weights the layer was built from; the
     * caller's copy is then scribbled over and freed, which the layer must
     * not notice. */
    layer_slot *l = &s->layer[slot];
    if (sgkt_weights_alloc(&l->w, D, H, P) != 0)
        abort();
    float *const from[] = {w.ln_gamma, w.ln_beta, w.wq, w.wk, w.wv, w.wo, w.w1, w.b1, w.w2, w.b2};
    float *const to[] = {l->w.ln_gamma, l->w.ln_beta, l->w.wq, l->w.wk, l->w.wv, l->w.wo,
                         l->w.w1, l->w.b1, l->w.w2, l->w.b2};
    const size_t n[] = {(size_t)D, (size_t)D, (size_t)(D * D), (size_t)(D * D), (size_t)(D * D),
                        (size_t)(D * D), (size_t)(P * P), (size_t)P, (size_t)(H * P), (size_t)H};
    for (int i = 0; i < 10; i++)
        memcpy(to[i], from[i], n[i] * sizeof(float));
    l->w.eps = eps;
    sgkt_weights_random(&w, &rng);
    sgkt_weights_free(&w);
    l->layer = layer;
    l->ctx = c;
    l->D = D;
    l->H = H;
    l->P = P;
    l->forced = 0;
}

/* ---- forward ------------------------------------------------------------ */

typedef struct buffers {
    unsigned char *raw;   /* one allocation holding all four */
    float *nodes, *pair, *out;
    void *mask;
    size_t nodes_bytes, pair_bytes, mask_bytes;
} buffers;

static void step_forward(state *s, int device_call);

static void step_set_variant(state *s)
{
    int slot = u8(&s->in) % LAYER_SLOTS;
    sgk_layer *layer = s->layer[slot].layer;
    uint8_t sel = u8(&s->in);
    const char *names[8];
    int count = 0;
    allowed a = {0};
    if (layer && sgk_layer_variants(layer, 1, 1, names, NULL, 8, &count) != SGK_OK)
        finding("sgk_layer_variants for set_variant", SGK_ERR_BACKEND, NULL);
    char junk[8];
    const char *name;
    if (sel < 64 && count > 0)
        name = names[sel % count];
    else if (sel < 128)
        name = NULL;
    else {
        for (int i = 0; i < 7; i++)
            junk[i] = (char)(u8(&s->in) | 1);
        junk[sel % 8] = '\0';
        junk[7] = '\0';
        name = junk;
    }
    int known = name == NULL;
    for (int v = 0; v < count && name; v++)
        known |= strcmp(names[v], name) == 0;
    if (!layer) allow(&a, SGK_ERR_NULL_POINTER);
    else allow(&a, known ? SGK_OK : SGK_ERR_UNKNOWN_VARIANT);
    sgk_status st = sgk_layer_set_variant(layer, name);
    check_status("sgk_layer_set_variant", st, &a);
    if (st == SGK_OK)
        s->layer[slot].forced = name != NULL;
}

static void step_queries(state *s)
{
    int slot = u8(&s->in) % (LAYER_SLOTS + 1);
    sgk_layer *layer = slot < LAYER_SLOTS ? s->layer[slot].layer : NULL;
    int64_t B = size_arg(&s->in), N = size_arg(&s->in);
    uint8_t what = u8(&s->in);
    allowed a = {0};
    if (!layer) allow(&a, SGK_ERR_NULL_POINTER);
    int shape_ok = B >= 1 && N >= 1;
    if (!shape_ok) allow(&a, SGK_ERR_INVALID_ARGUMENT);
    if (layer && shape_ok) {
        const layer_slot *l = &s->layer[slot];
        int64_t c;
        const int64_t nd[] = {B, N, l->D}, pr[] = {B, N, N, l->P}, mk[] = {B, N, N};
        if (!fits(nd, 3, 4, &c) || !fits(pr, 4, 4, &c) || !fits(mk, 3, 4, &c))
            allow(&a, SGK_ERR_SIZE_OVERFLOW);
        else {
            allow(&a, SGK_OK);
            allow(&a, SGK_ERR_UNSUPPORTED);
        }
    }
    switch (what % 4) {
    case 0: {
        size_t bytes = 777;
        sgk_status st = sgk_workspace_size(layer, B, N, (what & 4) ? NULL : &bytes);
        if (what & 4) {
            allowed n = {0};
            allow(&n, SGK_ERR_NULL_POINTER);
            check_status("sgk_workspace_size(bytes NULL)", st, &n);
        } else {
            check_status("sgk_workspace_size", st, &a);
            if (st != SGK_OK && bytes != 777)
                finding("failed sgk_workspace_size wrote bytes", st, &a);
        }
        break;
    }
    case 1: {
        const char *name = NULL;
        sgk_status st = sgk_layer_variant_for(layer, B, N, &name);
        check_status("sgk_layer_variant_for", st, &a);
        if ((st == SGK_OK) != (name != NULL))
            finding("sgk_layer_variant_for name and status disagree", st, &a);
        break;
    }
    default: {
        int capacity = (int)(what >> 4) - 4; /* -4 .. 11 */
        int cap = capacity > 0 ? capacity : 0;
        const char **names = cap ? malloc((size_t)cap * sizeof *names) : NULL;
        int *supported = cap ? malloc((size_t)cap * sizeof *supported) : NULL;
        int count = -7;
        int ask_supported = what & 8;
        sgk_status st = sgk_layer_variants(layer, B, N, cap ? names : NULL,
                                           ask_supported ? supported : NULL, capacity, &count);
        allowed v = {0};
        if (!layer) allow(&v, SGK_ERR_NULL_POINTER);
        else if (!cap) allow(&v, SGK_OK);
        else {
            int n = 0;
            sgk_layer_variants(layer, 1, 1, NULL, NULL, 0, &n);
            if (capacity < n) allow(&v, SGK_ERR_INVALID_ARGUMENT);
            else if (ask_supported && !shape_ok) allow(&v, SGK_ERR_INVALID_ARGUMENT);
            else allow(&v, SGK_OK);
        }
        check_status("sgk_layer_variants", st, &v);
        if (st == SGK_OK && ask_supported && cap && allows(&a, SGK_ERR_SIZE_OVERFLOW))
            for (int i = 0; i < count; i++)
                if (supported[i])
                    finding("a variant claims a shape past the size limits", st, &v);
        free(names);
        free(supported);
        break;
    }
    }
}

static void step_registry(state *s)
{
    uint8_t what = u8(&s->in);
    int64_t x = wild_size(&s->in);
    sgk_backend_info info;
    char buf[16];
    switch (what % 6) {
    case 0: {
        int index = (int)x;
        sgk_status st = sgk_backend_get(index, (what & 8) ? NULL : &info);
        int in_range = index >= 0 && index < sgk_backend_count();
        if ((what & 8) ? st != SGK_ERR_NULL_POINTER
                       : st != (in_range ? SGK_OK : SGK_ERR_INVALID_ARGUMENT))
            finding("sgk_backend_get", st, NULL);
        break;
    }
    case 1: {
        char name[8];
        for (int i = 0; i < 7; i++)
            name[i] = (char)u8(&s->in);
        name[7] = '\0';
        sgk_status st = sgk_backend_find(name, &info);
        if (st != SGK_OK && st != SGK_ERR_UNKNOWN_BACKEND)
            finding("sgk_backend_find", st, NULL);
        break;
    }
    case 2: {
        size_t len = (size_t)(what >> 4);
        char *b = len ? malloc(len) : NULL;
        char full[256]; /* a name that does not fit is refused, never cut */
        size_t need = sgk_device_name("cpu", 0, full, sizeof full) == SGK_OK ? strlen(full) + 1 : 0;
        sgk_status st = sgk_device_name("cpu", (int)(x % 3), len ? b : buf, len);
        int ok_dev = x % 3 == 0;
        sgk_status want = len == 0 ? SGK_ERR_INVALID_ARGUMENT
                          : !ok_dev ? SGK_ERR_INVALID_DEVICE
                          : len < need ? SGK_ERR_INVALID_ARGUMENT : SGK_OK;
        if (st != want)
            finding("sgk_device_name", st, NULL);
        if (st == SGK_OK && strlen(b) >= len)
            finding("sgk_device_name overran buf_len", st, NULL);
        free(b);
        break;
    }
    case 3:
        if (!sgk_status_string((sgk_status)x) || !sgk_version() || !sgk_last_error())
            finding("a string call returned NULL", SGK_OK, NULL);
        break;
    case 4: {
        sgk_context *ctx = s->ctx[what >> 7];
        void *h = (void *)(uintptr_t)0x77;
        sgk_status st = sgk_context_native(ctx, (sgk_native_kind)(x % 6), &h);
        if (st == SGK_OK || h != (void *)(uintptr_t)0x77)
            finding("sgk_context_native on cpu", st, NULL);
        break;
    }
    default:
        if (!sgk_context_backend(s->ctx[what >> 7]))
            finding("sgk_context_backend returned NULL", SGK_OK, NULL);
        break;
    }
}

static void free_buffers(buffers *b)
{
    free(b->raw);
    memset(b, 0, sizeof *b);
}

/* Float data from the rng (finite), the mask straight from the input. */
static void fill(state *s, buffers *b, sgkt_rng *rng, sgk_mask_type mt, int64_t mask_elems)
{
    sgkt_fill_normal(rng, b->nodes, b->nodes_bytes / 4, 0.0, 1.0);
    sgkt_fill_normal(rng, b->pair, b->pair_bytes / 4, 0.0, 1.0);
    uint8_t kind = u8(&s->in);
    for (int64_t i = 0; i < mask_elems; i++) {
        if (mt == SGK_MASK_U8) {
            ((uint8_t *)b->mask)[i] = kind < 128 ? (sgkt_rng_u64(rng) & 1) : u8(&s->in);
        } else {
            float f;
            if (kind < 128) {
                f = (float)(sgkt_rng_u64(rng) & 1);
            } else {
                /* Any bits: +-0 is no edge; NaN, denormals and the rest are. */
                uint8_t hi = u8(&s->in), lo = u8(&s->in);
                uint32_t bits = (uint32_t)hi << 24 | (uint32_t)lo << 16;
                memcpy(&f, &bits, sizeof f);
            }
            ((float *)b->mask)[i] = f;
        }
    }
    /* Now and then a NaN or an infinity, which must stay in the rows it touches. */
    uint8_t poison = u8(&s->in);
    if (poison >= 240) {
        static const float bad[] = {NAN, INFINITY, -INFINITY, NAN};
        float *t = poison & 1 ? b->pair : b->nodes;
        size_t n = (poison & 1 ? b->pair_bytes : b->nodes_bytes) / 4;
        t[sgkt_rng_u64(rng) % n] = bad[poison % 4];
    }
}

static void step_forward(state *s, int device_call)
{
    int slot = u8(&s->in) % LAYER_SLOTS;
    layer_slot *l = &s->layer[slot];
    sgk_layer *layer = l->layer;
    if (u8(&s->in) == 0xff)
        layer = NULL;
    int64_t B = size_arg(&s->in), N = size_arg(&s->in);
    uint8_t mts = u8(&s->in);
    sgk_mask_type mt = mts < 120 ? SGK_MASK_F32 : mts < 240 ? SGK_MASK_U8 : (sgk_mask_type)(int8_t)u8(&s->in);
    uint8_t ptr_mode = u8(&s->in); /* which pointer is NULL / misaligned / aliased */
    uint8_t ws_mode = device_call ? u8(&s->in) : 0;

    int64_t D = l->layer ? l->D : 4, P = l->layer ? l->P : 2;
    allowed a = {0};
    int definite = 0; /* a rule is broken: sgk must refuse without reading */
    int shape_ok = B >= 1 && N >= 1, sizes_fit = 0;
    int64_t nodes_n = 0, pair_n = 0, mask_n = 0;
    size_t melem = mt == SGK_MASK_U8 ? 1 : 4;
    int mt_ok = mt == SGK_MASK_F32 || mt == SGK_MASK_U8;
    if (!layer) { allow(&a, SGK_ERR_NULL_POINTER); definite = 1; }
    if (!mt_ok) { allow(&a, SGK_ERR_UNSUPPORTED); definite = 1; }
    if (!shape_ok) { allow(&a, SGK_ERR_INVALID_ARGUMENT); definite = 1; }
    else {
        const int64_t nd[] = {B, N, D}, pr[] = {B, N, N, P}, mk[] = {B, N, N};
        if (!fits(nd, 3, 4, &nodes_n) || !fits(pr, 4, 4, &pair_n) ||
            !fits(mk, 3, mt_ok ? melem : 4, &mask_n)) {
            allow(&a, SGK_ERR_SIZE_OVERFLOW);
            definite = 1;
        } else {
            sizes_fit = 1;
        }
    }
    int which = ptr_mode & 3; /* nodes, pair_feats, edge_mask, out */
    int kind = ptr_mode >> 2;  /* < 4: NULL, < 8: misaligned, < 10: out aliases, else fine */
    if (kind < 4) { allow(&a, SGK_ERR_NULL_POINTER); definite = 1; }
    if (kind >= 4 && kind < 8 && !(which == 2 && mt == SGK_MASK_U8)) {
        allow(&a, SGK_ERR_INVALID_ARGUMENT);
        definite = 1;
    }
    if (kind >= 8 && kind < 10) { allow(&a, SGK_ERR_INVALID_ARGUMENT); definite = 1; }

    int small = shape_ok && B <= 4 && N <= 4 && nodes_n && pair_n && mask_n;
    /* A forced variant may refuse any shape that passes the size checks;
     * the automatic choice may refuse only shapes past every variant. */
    if (layer && sizes_fit && (l->forced || !small))
        allow(&a, SGK_ERR_UNSUPPORTED);
    if (!definite && !small)
        return; /* a valid call on buffers too large for this target */
    if (definite && !small) {
        /* Buffers of a token size: sgk must not read them. */
        nodes_n = pair_n = mask_n = 8;
    }
    if (!definite)
        allow(&a, SGK_OK);
    if (s->armed) allow(&a, SGK_ERR_OUT_OF_MEMORY);

    /* The four buffers in one block, each at 64 bytes and 64 bytes apart
     * so that a misaligned one stays in bounds. */
    buffers b;
    memset(&b, 0, sizeof b);
    b.nodes_bytes = (size_t)nodes_n * 4;
    b.pair_bytes = (size_t)pair_n * 4;
    b.mask_bytes = (size_t)mask_n * melem;
    size_t off_pair = (b.nodes_bytes + 127) & ~(size_t)63;
    size_t off_mask = off_pair + ((b.pair_bytes + 127) & ~(size_t)63);
    size_t off_out = off_mask + ((b.mask_bytes + 127) & ~(size_t)63);
    size_t total = off_out + ((b.nodes_bytes + 127) & ~(size_t)63);
    if (posix_memalign((void **)&b.raw, 64, total) != 0)
        abort();
    b.nodes = (float *)(void *)b.raw;
    b.pair = (float *)(void *)(b.raw + off_pair);
    b.mask = b.raw + off_mask;
    b.out = (float *)(void *)(b.raw + off_out);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, u64(&s->in));
    fill(s, &b, &rng, mt_ok ? mt : SGK_MASK_F32, small ? mask_n : 0);
    memset(b.raw + off_out, PATTERN, total - off_out);

    const void *nodes = b.nodes, *pair = b.pair, *mask = b.mask;
    void *out = b.out;
    if (kind >= 4 && kind < 8) {
        /* The same bytes, moved 1 to 3 bytes up (the harness itself never
         * reads a float there). */
        const size_t off[4] = {0, off_pair, off_mask, off_out};
        const size_t len[4] = {b.nodes_bytes, b.pair_bytes, b.mask_bytes, b.nodes_bytes};
        const size_t shift = 1 + (size_t)(kind & 3) % 3;
        unsigned char *moved = b.raw + off[which] + shift;
        memmove(moved, b.raw + off[which], len[which]);
        if (which == 0) nodes = moved;
        if (which == 1) pair = moved;
        if (which == 2) mask = moved;
        if (which == 3) out = moved;
    } else if (kind < 4) {
        if (which == 0) nodes = NULL;
        if (which == 1) pair = NULL;
        if (which == 2) mask = NULL;
        if (which == 3) out = NULL;
    } else if (kind == 8) {
        out = b.nodes; /* out == nodes */
    } else if (kind == 9) {
        /* The last float of pair_feats is the first of out. */
        pair = (const char *)out - (b.pair_bytes - 4);
    }
    unsigned char *snapshot = malloc(total);
    if (!snapshot)
        abort();
    memcpy(snapshot, b.raw, total);

    sgk_status st;
    if (!device_call) {
        st = sgk_forward(layer, B, N, nodes, pair, mask, mt, out);
    } else {
        /* The workspace the shape needs, when it has a plan at all. */
        size_t need = 0;
        if (!(layer && shape_ok && mt_ok && sgk_workspace_size(layer, B, N, &need) == SGK_OK))
            need = 0;
        void *work = NULL;
        size_t work_bytes = need;
        int short_ws = 0;
        switch (ws_mode % 4) {
        case 1: work_bytes = need ? need - 1 : 0; short_ws = need > 0; break;
        case 2: short_ws = need > 0; break; /* NULL workspace */
        case 3: work_bytes = need + 64; break;
        default: break;
        }
        /* A call that must fail gets a token buffer for a huge workspace:
         * it may not touch it. */
        if (ws_mode % 4 != 2 && work_bytes)
            work = malloc((work_bytes <= (1u << 20) ? work_bytes : 64) + 4);
        /* A workspace at an odd address must be refused. */
        size_t ws_shift = work && (ws_mode & 4) ? 1 + (ws_mode >> 3) % 3 : 0;
        if (ws_shift) {
            allow(&a, SGK_ERR_INVALID_ARGUMENT);
            a.bits &= ~(1u << SGK_OK);
        }
        if (short_ws) {
            allow(&a, SGK_ERR_INSUFFICIENT_WORKSPACE);
            if (!definite)
                a.bits &= ~(1u << SGK_OK);
        }
        st = sgk_forward_device(layer, B, N, nodes, pair, mask, mt, out,
                                work ? (char *)work + ws_shift : NULL, work_bytes, NULL);
        if (st == SGK_OK && s->armed && sgk_testing_alloc_count() != 0)
            finding("sgk_forward_device allocated", st, &a);
        free(work);
    }
    check_status(device_call ? "sgk_forward_device" : "sgk_forward", st, &a);

    if (st != SGK_OK) {
        if (memcmp(snapshot, b.raw, total) != 0)
            finding("a failed forward wrote to a buffer", st, &a);
    } else {
        /* Inputs untouched, output right. */
        if (memcmp(snapshot, b.raw, off_out) != 0)
            finding("forward wrote to an input", st, &a);
        sgk_ref_layer ref;
        sgkt_weights_to_ref(&l->w, &ref);
        size_t n = (size_t)nodes_n;
        double *expect = malloc(n * sizeof(double));
        if (!expect || sgk_ref_forward(&ref, B, N, nodes, pair, mask, mt, expect, NULL) != 0)
            abort();
        sgkt_error e = sgkt_compare(b.out, expect, n);
        if (l->w.eps > 0 && !sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL)) {
            fprintf(stderr, "fuzz_api: B=%lld N=%lld D=%lld H=%lld P=%lld eps=%g mask=%d: "
                    "rel_l2 %g max_abs %g nonfinite mismatches %zu at %zu: got %g want %g\n",
                    (long long)B, (long long)N, (long long)l->D, (long long)l->H,
                    (long long)l->P, (double)l->w.eps, (int)mt, e.rel_l2, e.max_abs,
                    e.mismatched_nonfinite, e.worst, (double)b.out[e.worst], expect[e.worst]);
            finding("forward result off the reference", st, &a);
        }
        free(expect);
    }
    free(snapshot);
    free_buffers(&b);
}

/* ---- training ---------------------------------------------------------- */

/* sgk_forward_train then sgk_backward on a small valid shape, with at most
 * one thing wrong in the backward's arguments (NULL saved, d_out or grads,
 * a misaligned gradient, two gradients on one buffer, a gradient over
 * d_out, B or N below 1, a mask type outside the enum) and some gradients
 * not asked for. A refused or failed call must leave every gradient
 * buffer as it was; one that succeeds must match the double reference. */
static void step_train(state *s)
{
    layer_slot *l = &s->layer[u8(&s->in) % LAYER_SLOTS];
    if (!l->layer)
        return;
    const int64_t B = 1 + u8(&s->in) % 2, N = 1 + u8(&s->in) % 4, D = l->D, H = l->H, P = l->P;
    const sgk_mask_type mt = u8(&s->in) & 1 ? SGK_MASK_U8 : SGK_MASK_F32;
    const uint8_t fault = u8(&s->in), wanted = u8(&s->in);
    buffers b;
    memset(&b, 0, sizeof b);
    b.nodes_bytes = (size_t)(B * N * D) * 4;
    b.pair_bytes = (size_t)(B * N * N * P) * 4;
    b.mask_bytes = (size_t)(B * N * N) * (mt == SGK_MASK_U8 ? 1 : 4);
    size_t counts[SGKT_N_GRADS], sizes[SGKT_N_GRADS], total = 0, at[SGKT_N_GRADS];
    sgkt_grad_counts(B, N, D, H, P, counts);
    for (int i = 0; i < SGKT_N_GRADS; i++) {
        sizes[i] = counts[i] * 4;
        at[i] = total, total += (sizes[i] + 127) & ~(size_t)63;
    }
    const size_t saved_bytes = (size_t)(B * H * N) * 4;
    unsigned char *grads = NULL;
    float *out = malloc(b.nodes_bytes), *saved = malloc(saved_bytes), *d_out = malloc(b.nodes_bytes);
    b.raw = malloc(b.nodes_bytes + b.pair_bytes + b.mask_bytes + 8);
    if (posix_memalign((void **)&grads, 64, total) != 0 || !out || !saved || !d_out || !b.raw)
        abort();
    b.nodes = (float *)(void *)b.raw;
    b.pair = (float *)(void *)(b.raw + b.nodes_bytes);
    b.mask = b.raw + b.nodes_bytes + b.pair_bytes;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, u64(&s->in));
    fill(s, &b, &rng, mt, B * N * N);
    sgkt_fill_normal(&rng, d_out, b.nodes_bytes / 4, 0.0, 1.0);
    memset(grads, PATTERN, total);

    allowed a = {0};
    allow(&a, SGK_OK);
    if (s->armed) allow(&a, SGK_ERR_OUT_OF_MEMORY);
    sgk_status st = sgk_forward_train(l->layer, B, N, b.nodes, b.pair, b.mask, mt, out, saved);
    check_status("sgk_forward_train", st, &a);
    if (st == SGK_OK) {
        sgk_grads g;
        memset(&g, 0, sizeof g);
        for (int i = 0; i < SGKT_N_GRADS; i++)
            if (!(wanted & 1u << (i % 8)) || i < 2)
                *sgkt_grad_slot(&g, i) = grads + at[i];
        const void *sv = saved, *dd = d_out;
        const sgk_grads *gp = &g;
        int64_t Bc = B, Nc = N;
        sgk_mask_type mtc = mt;
        memset(&a, 0, sizeof a);
        switch (fault % 10) {
        case 1: sv = NULL; allow(&a, SGK_ERR_NULL_POINTER); break;
        case 2: dd = NULL; allow(&a, SGK_ERR_NULL_POINTER); break;
        case 3: gp = NULL; allow(&a, SGK_ERR_NULL_POINTER); break;
        case 4: g.nodes = grads + at[0] + 1 + fault / 10 % 3; allow(&a, SGK_ERR_INVALID_ARGUMENT); break;
        case 5: g.wk = g.wq = grads + at[4]; allow(&a, SGK_ERR_INVALID_ARGUMENT); break;
        case 6: g.nodes = d_out; allow(&a, SGK_ERR_INVALID_ARGUMENT); break;
        case 7: Bc = -(int64_t)(fault / 10); allow(&a, SGK_ERR_INVALID_ARGUMENT); break;
        case 8: Nc = 0; allow(&a, SGK_ERR_INVALID_ARGUMENT); break;
        case 9: mtc = (sgk_mask_type)(2 + fault / 10); allow(&a, SGK_ERR_UNSUPPORTED); break;
        default: allow(&a, SGK_OK); break;
        }
        if (s->armed) allow(&a, SGK_ERR_OUT_OF_MEMORY);
        unsigned char *snapshot = malloc(total);
        if (!snapshot)
            abort();
        memcpy(snapshot, grads, total);
        st = sgk_backward(l->layer, Bc, Nc, b.nodes, b.pair, b.mask, mtc, sv, dd, gp);
        check_status("sgk_backward", st, &a);
        if (st != SGK_OK && memcmp(snapshot, grads, total) != 0)
            finding("a failed sgk_backward wrote a gradient", st, &a);
        if (st == SGK_OK) {
            sgk_ref_layer ref;
            sgkt_weights_to_ref(&l->w, &ref);
            sgk_ref_grads rg;
            memset(&rg, 0, sizeof rg);
            for (int i = 0; i < SGKT_N_GRADS; i++)
                if (!(*sgkt_ref_grad_slot(&rg, i) = malloc(counts[i] * sizeof(double) + 8)))
                    abort();
            if (sgk_ref_backward(&ref, B, N, b.nodes, b.pair, b.mask, mt, d_out, &rg) != 0)
                abort();
            for (int i = 0; i < SGKT_N_GRADS; i++) {
                const float *got = *sgkt_grad_slot(&g, i);
                const double *want = *sgkt_ref_grad_slot(&rg, i);
                for (size_t j = 0; got && j < counts[i]; j++)
                    if (isfinite(want[j]) && !isfinite(got[j]))
                        finding("sgk_backward: non-finite where the reference is finite", st, &a);
                if (got && l->w.eps > 0 && sgkt_rel_l2_floored(got, want, counts[i]) > 1e-4)
                    finding("sgk_backward result off the reference", st, &a);
                if (!got && memcmp(snapshot + at[i], grads + at[i], sizes[i]) != 0)
                    finding("sgk_backward wrote a gradient it was not asked for", st, &a);
                free(*sgkt_ref_grad_slot(&rg, i));
            }
        }
        free(snapshot);
    }
    free(out);
    free(saved);
    free(d_out);
    free(grads);
    free_buffers(&b);
}

/* ---- new weights ------------------------------------------------------- */

/* sgk_layer_set_weights (device = 0) or its device form (host pointers on
 * the cpu backend) with at most one thing wrong; on success the slot's
 * reference takes the new weights, which later forward calls are checked
 * against. */
static void step_set_weights(state *s, int device)
{
    int slot = u8(&s->in) % LAYER_SLOTS;
    layer_slot *l = &s->layer[slot];
    sgk_layer *layer = l->layer;
    const uint8_t mode = u8(&s->in);
    static const float epss[] = {1e-5f, 1e-3f, 0.5f, 0.0f, -1.0f, NAN, INFINITY, -0.0f};
    const uint8_t e = u8(&s->in);
    /* mostly the layer's own eps, which the device form requires */
    float eps = layer && e < 160 ? l->w.eps : epss[e % 8];
    const int64_t D = layer ? l->D : 4, H = layer ? l->H : 2, P = layer ? l->P : 2;
    sgkt_weights w;
    if (sgkt_weights_alloc(&w, D, H, P) != 0)
        abort();
    sgkt_rng rng;
    sgkt_rng_seed(&rng, u64(&s->in));
    sgkt_weights_random(&w, &rng);
    w.eps = eps;
    struct { sgk_layer_desc desc; unsigned char newer[8]; } wide;
    memset(wide.newer, 0xa5, sizeof wide.newer);
    sgk_layer_desc *const d = &wide.desc;
    sgk_layer_desc_init(d);
    sgkt_weights_to_desc(&w, d);
    const void **ptrs[] = {&d->ln_gamma, &d->ln_beta, &d->wq, &d->wk, &d->wv,
                           &d->wo, &d->w1, &d->b1, &d->w2, &d->b2};

    allowed a = {0};
    int bad = 0, null_desc = 0;
    const uint8_t x = u8(&s->in);
    switch (mode % 12) {
    case 1: d->dim = D + 1 + x % 3; break;
    case 2: d->heads = x % 2 ? H + 1 : wild_size(&s->in); break;
    case 3: d->pair_dim = x % 2 ? P + 1 : wild_size(&s->in); break;
    case 4: d->dtype = (sgk_dtype)(x % 4); break;
    case 5: d->struct_size = 0; break;
    case 6: d->struct_size = sizeof *d + 8; break;
    case 7: *ptrs[x % 10] = NULL; break;
    case 8:
        if (device) /* the device form wants float-aligned weights */
            *ptrs[x % 10] = (const char *)*ptrs[x % 10] + 1 + x / 10 % 3;
        break;
    case 9: null_desc = 1; break;
    default: break;
    }
    if (!layer || null_desc) { allow(&a, SGK_ERR_NULL_POINTER); bad = 1; }
    if (mode % 12 == 5 || (mode % 12 >= 1 && mode % 12 <= 4 &&
                           (d->dim != D || d->heads != H || d->pair_dim != P || d->dtype != SGK_DTYPE_F32))) {
        allow(&a, SGK_ERR_INVALID_ARGUMENT);
        bad = 1;
    }
    if (mode % 12 == 6) { allow(&a, SGK_ERR_UNSUPPORTED); bad = 1; }
    if (mode % 12 == 7) { allow(&a, SGK_ERR_NULL_POINTER); bad = 1; }
    if (mode % 12 == 8 && device) { allow(&a, SGK_ERR_INVALID_ARGUMENT); bad = 1; }
    if (!isfinite(eps) || eps < 0 || (device && layer && eps != l->w.eps)) {
        allow(&a, SGK_ERR_INVALID_ARGUMENT);
        bad = 1;
    }
    if (!bad) allow(&a, SGK_OK);
    if (s->armed && !device) allow(&a, SGK_ERR_OUT_OF_MEMORY);

    const sgk_layer_desc *arg = null_desc ? NULL : d;
    sgk_status st = device ? sgk_layer_set_weights_device(layer, arg, NULL) : sgk_layer_set_weights(layer, arg);
    check_status(device ? "sgk_layer_set_weights_device" : "sgk_layer_set_weights", st, &a);
    if (device && st == SGK_OK && s->armed && sgk_testing_alloc_count() != 0)
        finding("sgk_layer_set_weights_device allocated", st, &a);
    if (st == SGK_OK) {
        float *const from[] = {w.ln_gamma, w.ln_beta, w.wq, w.wk, w.wv, w.wo, w.w1, w.b1, w.w2, w.b2};
        float *const to[] = {l->w.ln_gamma, l->w.ln_beta, l->w.wq, l->w.wk, l->w.wv, l->w.wo,
                             l->w.w1, l->w.b1, l->w.w2, l->w.b2};
        const size_t n[] = {(size_t)D, (size_t)D, (size_t)(D * D), (size_t)(D * D), (size_t)(D * D),
                            (size_t)(D * D), (size_t)(P * P), (size_t)P, (size_t)(H * P), (size_t)H};
        for (int i = 0; i < 10; i++)
            memcpy(to[i], from[i], n[i] * sizeof(float));
        l->w.eps = eps;
    }
    sgkt_weights_free(&w);
}

/* ---- the driver ---------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    state s;
    memset(&s, 0, sizeof s);
    s.in.p = data;
    s.in.n = size;
    for (int step = 0; step < MAX_STEPS && s.in.n > 0; step++) {
        uint8_t op = u8(&s.in);
        /* High bit: fail the k-th allocation of this step. */
        if (op & 0x80) {
            sgk_testing_fail_alloc_after(1 + u8(&s.in) % 4);
            s.armed = 1;
        }
        switch (op & 0x7f) {
        case 0: case 1: step_context_create(&s); break;
        case 2: case 3: case 4: step_layer_create(&s); break;
        case 5: destroy_ctx(&s, u8(&s.in) % CTX_SLOTS); break;
        case 6: destroy_layer(&s, u8(&s.in) % LAYER_SLOTS); break;
        case 7: step_set_variant(&s); break;
        case 8: case 9: step_queries(&s); break;
        case 10: step_registry(&s); break;
        case 11: case 12: case 13: case 14: step_forward(&s, 1); break;
        case 16: step_set_weights(&s, 0); break;
        case 17: step_set_weights(&s, 1); break;
        case 18: step_train(&s); break;
        default: step_forward(&s, 0); break;
        }
        if (s.armed) {
            sgk_testing_fail_alloc_after(0);
            s.armed = 0;
        }
    }
    /* Tear down in an order the input chose. */
    int first_ctx = u8(&s.in) % CTX_SLOTS;
    for (int i = 0; i < LAYER_SLOTS; i++)
        if (u8(&s.in) & 1)
            destroy_layer(&s, i);
    destroy_ctx(&s, first_ctx);
    destroy_ctx(&s, 1 - first_ctx);
    return 0;
}
