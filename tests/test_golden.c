/* Checks the double-precision reference against outputs of the PyTorch
 * module (tests/data, written by make_golden.py): the forward's output per
 * case of golden.txt; and per case of backward.bin the output, the softmax
 * statistics and every gradient autograd gives. Usage: test_golden DATA_DIR */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reference.h"
#include "util.h"

#define GOLDEN_REL_L2 1e-6
#define MAX_CASES 32
/* Both sides compute in double from the same float values and differ only
 * in rounding (order of sums, exp), around 1e-15 relative; 1e-12 leaves
 * room for the conditioning of the softmax and still catches any wrong
 * term. */
#define BACKWARD_REL_L2 1e-12
/* The norm below which a gradient counts as zero for the bound: b2's is
 * zero in exact arithmetic (softmax ignores a shift common to a row), so
 * both sides hold rounding noise there (~1e-16). The other gradients of
 * these cases have norms above 2e-2. */
#define BACKWARD_NORM_FLOOR 1e-2

typedef struct golden_case {
    char name[64];
    int64_t B, N, D, H, P;
    sgk_mask_type mask_type;
    double eps;
    char path[1024];
} golden_case;

static golden_case cases[MAX_CASES];
static int n_cases;

typedef struct golden_data {
    float *nodes, *pair;
    void *mask;
    float *w[10]; /* ln_gamma, ln_beta, wq, wk, wv, wo, w1, b1, w2, b2 */
    double *out;
} golden_data;

static int read_exact(FILE *f, void *dst, size_t bytes)
{
    return fread(dst, 1, bytes, f) == bytes;
}

static int load_case(const golden_case *c, golden_data *g)
{
    memset(g, 0, sizeof *g);
    size_t bnd = (size_t)(c->B * c->N * c->D), bnn = (size_t)(c->B * c->N * c->N);
    size_t D = (size_t)c->D, H = (size_t)c->H, P = (size_t)c->P;
    size_t wn[10] = {D, D, D * D, D * D, D * D, D * D, P * P, P, H * P, H};
    size_t msz = sgkt_mask_elem_size(c->mask_type);
    FILE *f = fopen(c->path, "rb");
    if (!f)
        return 0;
    int ok = 1;
    g->nodes = malloc(bnd * sizeof(float));
    g->pair = malloc(bnn * P * sizeof(float));
    g->mask = malloc(bnn * msz);
    g->out = malloc(bnd * sizeof(double));
    ok = g->nodes && g->pair && g->mask && g->out;
    ok = ok && read_exact(f, g->nodes, bnd * sizeof(float)) &&
         read_exact(f, g->pair, bnn * P * sizeof(float)) && read_exact(f, g->mask, bnn * msz);
    for (int i = 0; i < 10 && ok; i++) {
        g->w[i] = malloc(wn[i] * sizeof(float));
        ok = g->w[i] && read_exact(f, g->w[i], wn[i] * sizeof(float));
    }
    ok = ok && read_exact(f, g->out, bnd * sizeof(double));
    ok = ok && fgetc(f) == EOF; /* the file holds exactly what the manifest says */
    fclose(f);
    return ok;
}

static void free_case(golden_data *g)
{
    free(g->nodes);
    free(g->pair);
    free(g->mask);
    free(g->out);
    for (int i = 0; i < 10; i++)
        free(g->w[i]);
}

/* The same mask as the other storage type (edges stay edges). */
static void *convert_mask(const golden_case *c, const void *mask, sgk_mask_type *type)
{
    size_t n = (size_t)(c->B * c->N * c->N);
    if (c->mask_type == SGK_MASK_F32) {
        uint8_t *m = malloc(n);
        for (size_t i = 0; m && i < n; i++)
            m[i] = (uint8_t)sgkt_mask_is_edge(mask, SGK_MASK_F32, i);
        *type = SGK_MASK_U8;
        return m;
    }
    float *m = malloc(n * sizeof(float));
    for (size_t i = 0; m && i < n; i++)
        m[i] = sgkt_mask_is_edge(mask, SGK_MASK_U8, i) ? 1.0f : 0.0f;
    *type = SGK_MASK_F32;
    return m;
}

static void test_golden_case(void **state)
{
    const golden_case *c = *state;
    golden_data g;
    if (!load_case(c, &g)) {
        free_case(&g);
        fail_msg("cannot read %s (truncated or missing)", c->path);
    }
    sgk_ref_layer L = {c->D, c->H, c->P, c->eps, g.w[0], g.w[1], g.w[2], g.w[3], g.w[4],
                       g.w[5], g.w[6], g.w[7], g.w[8], g.w[9]};
    size_t n = (size_t)(c->B * c->N * c->D);
    double *out = malloc(n * sizeof(double));
    float *out_f = malloc(n * sizeof(float));
    assert_non_null(out);
    assert_non_null(out_f);

    assert_int_equal(sgk_ref_forward(&L, c->B, c->N, g.nodes, g.pair, g.mask, c->mask_type, out,
                                     out_f), 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (out[i] - g.out[i]) * (out[i] - g.out[i]);
        den += g.out[i] * g.out[i];
        assert_true((double)out_f[i] == (double)(float)out[i]);
    }
    double rel = sqrt(num / den);
    printf("golden %-12s B=%lld N=%lld D=%lld H=%lld P=%lld mask=%s rel_l2=%.3e\n", c->name,
           (long long)c->B, (long long)c->N, (long long)c->D, (long long)c->H, (long long)c->P,
           c->mask_type == SGK_MASK_U8 ? "u8" : "f32", rel);
    if (!(rel <= GOLDEN_REL_L2))
        fail_msg("%s: reference differs from the PyTorch module: rel L2 %.3e > %.0e", c->name,
                 rel, GOLDEN_REL_L2);

    /* fully masked rows give the input row back exactly */
    for (int64_t r = 0; r < c->B * c->N; r++) {
        int any = 0;
        for (int64_t j = 0; j < c->N; j++)
            any |= sgkt_mask_is_edge(g.mask, c->mask_type, (size_t)(r * c->N + j));
        if (!any)
            for (int64_t d = 0; d < c->D; d++)
                assert_true(out[r * c->D + d] == (double)g.nodes[r * c->D + d]);
    }

    /* the other mask storage type gives the same result bit for bit */
    sgk_mask_type other;
    void *m2 = convert_mask(c, g.mask, &other);
    double *out2 = malloc(n * sizeof(double));
    assert_non_null(m2);
    assert_non_null(out2);
    assert_int_equal(sgk_ref_forward(&L, c->B, c->N, g.nodes, g.pair, m2, other, out2, NULL), 0);
    assert_memory_equal(out, out2, n * sizeof(double));

    free(m2);
    free(out2);
    free(out);
    free(out_f);
    free_case(&g);
}

/* ---- backward.bin --------------------------------------------------- */

enum { BW_NODES, BW_PAIR, BW_W0, BW_TENSORS = BW_W0 + 10 };
static const char *const bw_name[BW_TENSORS] = {"nodes", "pair_feats", "ln_gamma", "ln_beta",
                                                "wq",    "wk",         "wv",       "wo",
                                                "w1",    "b1",         "w2",       "b2"};

typedef struct backward_case {
    char name[33];
    int64_t B, N, D, H, P;
    sgk_mask_type mask_type;
    double eps;
    long offset; /* of the payload in the file */
    char path[1024];
} backward_case;

static backward_case bcases[MAX_CASES];
static int n_bcases;

/* element counts of the inputs (float) and of the gradients (double) */
static void backward_counts(const backward_case *c, size_t n[BW_TENSORS])
{
    size_t D = (size_t)c->D, H = (size_t)c->H, P = (size_t)c->P;
    size_t bn = (size_t)(c->B * c->N);
    size_t counts[BW_TENSORS] = {bn * D, bn * (size_t)c->N * P, D, D, D * D, D * D,
                                 D * D, D * D, P * P, P, H * P, H};
    memcpy(n, counts, sizeof counts);
}

static size_t backward_payload(const backward_case *c)
{
    size_t n[BW_TENSORS], in = 0, bnd = (size_t)(c->B * c->N * c->D);
    size_t stats = (size_t)(c->B * c->H * c->N), bnn = (size_t)(c->B * c->N * c->N);
    backward_counts(c, n);
    for (int t = 0; t < BW_TENSORS; t++)
        in += n[t];
    return in * sizeof(float) + bnn * sgkt_mask_elem_size(c->mask_type) + bnd * sizeof(float) +
           (bnd + 2 * stats) * sizeof(double) + in * sizeof(double);
}

static int read_backward_index(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/backward.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char magic[8];
    int64_t count = 0;
    int ok = read_exact(f, magic, 8) && memcmp(magic, "SGKBWD01", 8) == 0 &&
             read_exact(f, &count, 8) && count >= 1 && count <= MAX_CASES;
    for (int64_t k = 0; ok && k < count; k++) {
        backward_case *c = &bcases[n_bcases];
        int64_t dims[6];
        memset(c, 0, sizeof *c);
        ok = read_exact(f, c->name, 32) && read_exact(f, dims, sizeof dims) &&
             read_exact(f, &c->eps, sizeof c->eps) && dims[0] >= 1 && dims[1] >= 1 &&
             dims[2] >= 1 && dims[3] >= 1 && dims[4] >= 1 && dims[2] % dims[3] == 0 &&
             dims[1] <= 64 && dims[2] <= 256 && dims[4] <= 64 && (dims[5] == 0 || dims[5] == 1);
        if (!ok)
            break;
        c->B = dims[0];
        c->N = dims[1];
        c->D = dims[2];
        c->H = dims[3];
        c->P = dims[4];
        c->mask_type = dims[5] ? SGK_MASK_U8 : SGK_MASK_F32;
        c->offset = ftell(f);
        snprintf(c->path, sizeof c->path, "%s", path);
        ok = fseek(f, (long)backward_payload(c), SEEK_CUR) == 0;
        n_bcases++;
    }
    ok = ok && fgetc(f) == EOF; /* nothing after the last case */
    fclose(f);
    return ok ? n_bcases : -1;
}

typedef struct backward_data {
    float *in[BW_TENSORS]; /* nodes, pair_feats, the ten weights */
    void *mask;
    float *d_out;
    double *out, *row_max, *row_sum;
    double *grad[BW_TENSORS];
} backward_data;

static void *read_block(FILE *f, size_t bytes, int *ok)
{
    void *p = *ok ? malloc(bytes) : NULL;
    *ok = p && read_exact(f, p, bytes);
    return p;
}

static int load_backward(const backward_case *c, backward_data *g)
{
    memset(g, 0, sizeof *g);
    size_t n[BW_TENSORS], bnd = (size_t)(c->B * c->N * c->D);
    size_t stats = (size_t)(c->B * c->H * c->N), bnn = (size_t)(c->B * c->N * c->N);
    backward_counts(c, n);
    FILE *f = fopen(c->path, "rb");
    int ok = f && fseek(f, c->offset, SEEK_SET) == 0;
    g->in[BW_NODES] = read_block(f, n[BW_NODES] * sizeof(float), &ok);
    g->in[BW_PAIR] = read_block(f, n[BW_PAIR] * sizeof(float), &ok);
    g->mask = read_block(f, bnn * sgkt_mask_elem_size(c->mask_type), &ok);
    for (int t = BW_W0; t < BW_TENSORS; t++)
        g->in[t] = read_block(f, n[t] * sizeof(float), &ok);
    g->d_out = read_block(f, bnd * sizeof(float), &ok);
    g->out = read_block(f, bnd * sizeof(double), &ok);
    g->row_max = read_block(f, stats * sizeof(double), &ok);
    g->row_sum = read_block(f, stats * sizeof(double), &ok);
    for (int t = 0; t < BW_TENSORS; t++)
        g->grad[t] = read_block(f, n[t] * sizeof(double), &ok);
    if (f)
        fclose(f);
    return ok;
}

static void free_backward(backward_data *g)
{
    for (int t = 0; t < BW_TENSORS; t++) {
        free(g->in[t]);
        free(g->grad[t]);
    }
    free(g->mask);
    free(g->d_out);
    free(g->out);
    free(g->row_max);
    free(g->row_sum);
}

/* ||got - ref|| / max(||ref||, floor); +inf when a value differs in
 * finiteness (the statistics' -inf must match exactly). */
static double rel_err(const double *got, const double *ref, size_t n, double floor)
{
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < n; e++) {
        if (!isfinite(ref[e]) || !isfinite(got[e])) {
            if (!(got[e] == ref[e]))
                return INFINITY;
            continue;
        }
        num += (got[e] - ref[e]) * (got[e] - ref[e]);
        den += ref[e] * ref[e];
    }
    return sqrt(num) / fmax(sqrt(den), floor);
}

static void test_backward_case(void **state)
{
    const backward_case *c = *state;
    backward_data g;
    if (!load_backward(c, &g)) {
        free_backward(&g);
        fail_msg("cannot read case %s of %s (truncated or missing)", c->name, c->path);
    }
    sgk_ref_layer L = {c->D,          c->H,          c->P,          c->eps,
                       g.in[BW_W0],   g.in[BW_W0 + 1], g.in[BW_W0 + 2], g.in[BW_W0 + 3],
                       g.in[BW_W0 + 4], g.in[BW_W0 + 5], g.in[BW_W0 + 6], g.in[BW_W0 + 7],
                       g.in[BW_W0 + 8], g.in[BW_W0 + 9]};
    size_t n[BW_TENSORS], bnd = (size_t)(c->B * c->N * c->D), stats = (size_t)(c->B * c->H * c->N);
    backward_counts(c, n);
    double *out = malloc(bnd * sizeof(double));
    double *mx = malloc(stats * sizeof(double)), *sm = malloc(stats * sizeof(double));
    double *grad[BW_TENSORS];
    assert_true(out && mx && sm);
    for (int t = 0; t < BW_TENSORS; t++) {
        grad[t] = malloc(n[t] * sizeof(double));
        assert_non_null(grad[t]);
    }
    assert_int_equal(sgk_ref_forward_stats(&L, c->B, c->N, g.in[BW_NODES], g.in[BW_PAIR], g.mask,
                                           c->mask_type, out, NULL, mx, sm),
                     0);
    sgk_ref_grads G = {grad[0], grad[1], grad[2], grad[3], grad[4],  grad[5],
                       grad[6], grad[7], grad[8], grad[9], grad[10], grad[11]};
    assert_int_equal(sgk_ref_backward(&L, c->B, c->N, g.in[BW_NODES], g.in[BW_PAIR], g.mask,
                                      c->mask_type, g.d_out, &G),
                     0);

    int failed = 0;
    double e_out = rel_err(out, g.out, bnd, 0.0), e_max = rel_err(mx, g.row_max, stats, 0.0);
    double e_sum = rel_err(sm, g.row_sum, stats, 0.0), worst = fmax(e_out, fmax(e_max, e_sum));
    if (!(worst <= BACKWARD_REL_L2)) {
        printf("%s: out %.3e, row_max %.3e, row_sum %.3e against the module\n", c->name, e_out,
               e_max, e_sum);
        failed = 1;
    }
    for (int t = 0; t < BW_TENSORS; t++) {
        double e = rel_err(grad[t], g.grad[t], n[t], BACKWARD_NORM_FLOOR);
        worst = fmax(worst, e);
        if (!(e <= BACKWARD_REL_L2)) {
            printf("%s: d_%s differs from autograd's: rel L2 %.3e\n", c->name, bw_name[t], e);
            failed = 1;
        }
    }
    printf("golden %-14s B=%lld N=%lld D=%lld H=%lld P=%lld mask=%s backward, worst rel_l2=%.3e\n",
           c->name, (long long)c->B, (long long)c->N, (long long)c->D, (long long)c->H,
           (long long)c->P, c->mask_type == SGK_MASK_U8 ? "u8" : "f32", worst);
    /* a pair without an edge gets exactly zero, on both sides */
    for (size_t e = 0; e < n[BW_PAIR]; e++)
        if (!sgkt_mask_is_edge(g.mask, c->mask_type, e / (size_t)c->P) &&
            (grad[BW_PAIR][e] != 0.0 || g.grad[BW_PAIR][e] != 0.0))
            fail_msg("%s: d_pair_feats[%zu] is not zero for a non-edge", c->name, e);

    for (int t = 0; t < BW_TENSORS; t++)
        free(grad[t]);
    free(out);
    free(mx);
    free(sm);
    free_backward(&g);
    if (failed)
        fail_msg("%s: the reference's output, statistics or gradients differ from the "
                 "PyTorch module's (bound %.0e)",
                 c->name, BACKWARD_REL_L2);
}

static int read_manifest(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    while (fgets(line, sizeof line, f) && n_cases < MAX_CASES) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        golden_case *c = &cases[n_cases];
        long long B, N, D, H, P;
        char mask[8], file[256];
        if (sscanf(line, "%63s %lld %lld %lld %lld %lld %7s %lf %255s", c->name, &B, &N, &D, &H,
                   &P, mask, &c->eps, file) != 9) {
            fclose(f);
            return -1;
        }
        c->B = B;
        c->N = N;
        c->D = D;
        c->H = H;
        c->P = P;
        c->mask_type = strcmp(mask, "u8") == 0 ? SGK_MASK_U8 : SGK_MASK_F32;
        snprintf(c->path, sizeof c->path, "%s/%s", dir, file);
        n_cases++;
    }
    fclose(f);
    return n_cases;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/data";
    if (read_manifest(dir) < 3) {
        fprintf(stderr, "test_golden: fewer than 3 cases readable in %s/golden.txt\n", dir);
        return 1;
    }
    if (read_backward_index(dir) < 3) {
        fprintf(stderr, "test_golden: %s/backward.bin unreadable or with fewer than 3 cases\n",
                dir);
        return 1;
    }
    struct CMUnitTest tests[2 * MAX_CASES];
    for (int i = 0; i < n_cases; i++) {
        struct CMUnitTest t = {cases[i].name, test_golden_case, NULL, NULL, &cases[i]};
        tests[i] = t;
    }
    for (int i = 0; i < n_bcases; i++) {
        struct CMUnitTest t = {bcases[i].name, test_backward_case, NULL, NULL, &bcases[i]};
        tests[n_cases + i] = t;
    }
    return _cmocka_run_group_tests("golden", tests, (size_t)(n_cases + n_bcases), NULL, NULL);
}
