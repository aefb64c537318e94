/* Checks the double-precision reference against outputs of the PyTorch
 * module (tests/data, written by make_golden.py). Usage: test_golden DATA_DIR */
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
    struct CMUnitTest tests[MAX_CASES];
    for (int i = 0; i < n_cases; i++) {
        struct CMUnitTest t = {cases[i].name, test_golden_case, NULL, NULL, &cases[i]};
        tests[i] = t;
    }
    return _cmocka_run_group_tests("golden", tests, (size_t)n_cases, NULL, NULL);
}
