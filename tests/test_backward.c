/* Checks the reference backward (sgk_ref_backward) against central
 * differences of the reference forward, on small shapes, for every input and
 * weight tensor; and the structure the math gives it: zero gradient for the
 * pair features of non-edges, d_nodes == d_out for a node that no row
 * attends to and that attends to nothing, results independent of the thread
 * count. Also the forward's softmax statistics and its double-input form.
 * Runs on the CPU only. Usage: test_backward */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "reference.h"
#include "util.h"

/* The check is on the loss L = sum(d_out * out), whose partial derivative
 * along any one entry is that entry's gradient. The central difference
 * (L(x+h) - L(x-h)) / 2h errs by h^2 L'''/6 (truncation) plus about
 * u |L| / h from rounding L (u = 2^-53, |L| summing a few hundred O(1)
 * terms, so u |L| ~ 1e-14). Inputs and gradients here are O(1), so
 * h = 2^-16 (1.5e-5, scaled by |x| above 1) keeps both near 1e-9, three
 * orders below the tolerance: 1e-6 of the gradient tensor's L2 norm, for the
 * largest error over the entries checked. A wrong term of the chain rule
 * moves entries by a part of the gradient itself, far above that. */
#define FD_STEP 0x1p-16
#define FD_TOL 1e-6
/* A tensor's norm is floored here for the tolerance: b2's gradient is zero
 * in exact arithmetic (softmax ignores a shift common to a row), so its own
 * norm is rounding noise, and without edges (or with one per row) most
 * gradients are exactly zero. The others here have norms above 1e-2. */
#define FD_NORM_FLOOR 1e-3
/* tensors with more entries are checked at this many random entries */
#define FD_MAX_ENTRIES 200

enum { T_NODES, T_PAIR, T_GAMMA, T_BETA, T_WQ, T_WK, T_WV, T_WO, T_W1, T_B1, T_W2, T_B2, T_COUNT };
static const char *const tensor_name[T_COUNT] = {"nodes", "pair_feats", "ln_gamma", "ln_beta",
                                                 "wq",    "wk",         "wv",       "wo",
                                                 "w1",    "b1",         "w2",       "b2"};

enum { MASK_DENSE, MASK_NONE, MASK_MIXED };

typedef struct fd_case {
    const char *name;
    int64_t B, N, D, H, P;
    sgk_mask_type mask_type;
    int mask;
} fd_case;

/* MASK_MIXED: random edges stored as odd values (NaN and Inf included),
 * row 1 fully masked though row 0 attends to node 1, node 2 isolated (its
 * row and column masked). */
static const fd_case fd_cases[] = {
    {"n1_self_edge", 1, 1, 4, 1, 1, SGK_MASK_F32, MASK_DENSE},
    {"n1_masked", 1, 1, 4, 2, 2, SGK_MASK_U8, MASK_NONE},
    {"mixed_f32", 2, 5, 8, 2, 3, SGK_MASK_F32, MASK_MIXED},
    {"mixed_u8", 1, 7, 12, 3, 4, SGK_MASK_U8, MASK_MIXED},
    {"mixed_hd4", 2, 6, 16, 4, 5, SGK_MASK_F32, MASK_MIXED},
    {"head_dim_1", 2, 4, 4, 4, 2, SGK_MASK_U8, MASK_MIXED},
    {"dense_h1", 1, 7, 16, 1, 5, SGK_MASK_F32, MASK_DENSE},
    {"none_b2", 2, 3, 8, 2, 2, SGK_MASK_F32, MASK_NONE},
};

typedef struct problem {
    int64_t B, N, D, H, P;
    sgkt_weights w;
    sgkt_inputs in;
    float *d_out;
    double *t[T_COUNT]; /* every tensor in double, perturbed in place */
    size_t n[T_COUNT];
    sgk_ref_layer L;
    sgk_ref_layer_d Ld;
    double *out; /* (B, N, D) scratch for the loss */
} problem;

static void set_edge(void *mask, sgk_mask_type t, size_t idx, int edge)
{
    if (t == SGK_MASK_U8)
        ((uint8_t *)mask)[idx] = (uint8_t)edge;
    else
        ((float *)mask)[idx] = edge ? 1.0f : 0.0f;
}

static void make_mask(const fd_case *c, sgkt_rng *rng, void *mask)
{
    int64_t B = c->B, N = c->N;
    sgkt_mask_pattern pat = c->mask == MASK_DENSE  ? SGKT_MASK_DENSE
                            : c->mask == MASK_NONE ? SGKT_MASK_ALL_ZERO
                                                   : SGKT_MASK_ODD_VALUES;
    sgkt_fill_mask(rng, pat, 0.6, c->mask_type, B, N, mask);
    if (c->mask != MASK_MIXED)
        return;
    for (int64_t b = 0; b < B; b++) {
        size_t base = (size_t)(b * N * N);
        if (N >= 2) {
            for (int64_t j = 0; j < N; j++)
                set_edge(mask, c->mask_type, base + (size_t)(N + j), 0);
            set_edge(mask, c->mask_type, base + 1, 1);
        }
        if (N >= 3)
            for (int64_t j = 0; j < N; j++) {
                set_edge(mask, c->mask_type, base + (size_t)(2 * N + j), 0);
                set_edge(mask, c->mask_type, base + (size_t)(j * N + 2), 0);
            }
    }
}

static void problem_free(problem *p)
{
    sgkt_weights_free(&p->w);
    sgkt_inputs_free(&p->in);
    free(p->d_out);
    free(p->out);
    for (int t = 0; t < T_COUNT; t++)
        free(p->t[t]);
}

static void problem_init(problem *p, const fd_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->B = c->B;
    p->N = c->N;
    p->D = c->D;
    p->H = c->H;
    p->P = c->P;
    assert_int_equal(sgkt_weights_alloc(&p->w, c->D, c->H, c->P), 0);
    assert_int_equal(sgkt_inputs_alloc(&p->in, c->B, c->N, c->D, c->P, c->mask_type), 0);
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    sgkt_weights_random(&p->w, &rng);
    /* sharper attention than PyTorch's init gives, so that the softmax's
     * curvature is in play */
    for (int64_t e = 0; e < c->D * c->D; e++) {
        p->w.wq[e] *= 2.0f;
        p->w.wk[e] *= 2.0f;
    }
    sgkt_inputs_random(&p->in, &rng, SGKT_MASK_DENSE, 1.0);
    make_mask(c, &rng, p->in.edge_mask);
    size_t bnd = (size_t)(c->B * c->N * c->D);
    p->d_out = malloc(bnd * sizeof(float));
    p->out = malloc(bnd * sizeof(double));
    assert_non_null(p->d_out);
    assert_non_null(p->out);
    sgkt_fill_normal(&rng, p->d_out, bnd, 0.0, 1.0);

    const float *src[T_COUNT] = {p->in.nodes, p->in.pair_feats, p->w.ln_gamma, p->w.ln_beta,
                                 p->w.wq,     p->w.wk,          p->w.wv,       p->w.wo,
                                 p->w.w1,     p->w.b1,          p->w.w2,       p->w.b2};
    size_t D = (size_t)c->D, H = (size_t)c->H, P = (size_t)c->P;
    size_t n[T_COUNT] = {bnd, (size_t)(c->B * c->N * c->N) * P, D, D, D * D, D * D, D * D,
                         D * D, P * P, P, H * P, H};
    for (int t = 0; t < T_COUNT; t++) {
        p->n[t] = n[t];
        p->t[t] = malloc(n[t] * sizeof(double));
        assert_non_null(p->t[t]);
        for (size_t e = 0; e < n[t]; e++)
            p->t[t][e] = (double)src[t][e];
    }
    sgkt_weights_to_ref(&p->w, &p->L);
    sgk_ref_layer_d Ld = {c->D,     c->H,     c->P,     p->L.eps,  p->t[T_GAMMA], p->t[T_BETA],
                          p->t[T_WQ], p->t[T_WK], p->t[T_WV], p->t[T_WO], p->t[T_W1],
                          p->t[T_B1], p->t[T_W2], p->t[T_B2]};
    p->Ld = Ld;
}

static double loss(problem *p)
{
    assert_int_equal(sgk_ref_forward_d(&p->Ld, p->B, p->N, p->t[T_NODES], p->t[T_PAIR],
                                       p->in.edge_mask, p->in.mask_type, p->out),
                     0);
    double L = 0.0;
    for (size_t e = 0; e < p->n[T_NODES]; e++)
        L += (double)p->d_out[e] * p->out[e];
    return L;
}

static void grads_alloc(const problem *p, double *g[T_COUNT], sgk_ref_grads *G)
{
    for (int t = 0; t < T_COUNT; t++) {
        g[t] = malloc(p->n[t] * sizeof(double));
        assert_non_null(g[t]);
    }
    sgk_ref_grads out = {g[T_NODES], g[T_PAIR], g[T_GAMMA], g[T_BETA], g[T_WQ], g[T_WK],
                         g[T_WV],    g[T_WO],   g[T_W1],    g[T_B1],   g[T_W2], g[T_B2]};
    *G = out;
}

static int run_backward(const problem *p, const sgk_ref_grads *G)
{
    return sgk_ref_backward(&p->L, p->B, p->N, p->in.nodes, p->in.pair_feats, p->in.edge_mask,
                            p->in.mask_type, p->d_out, G);
}

static int is_edge(const problem *p, int64_t b, int64_t i, int64_t j)
{
    return sgkt_mask_is_edge(p->in.edge_mask, p->in.mask_type, (size_t)((b * p->N + i) * p->N + j));
}

/* What the math fixes exactly, whatever the rounding. */
static void check_structure(const problem *p, const fd_case *c, double *const g[T_COUNT])
{
    int64_t B = p->B, N = p->N, D = p->D, P = p->P;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++) {
            int row_edge = 0, col_edge = 0;
            for (int64_t j = 0; j < N; j++) {
                row_edge |= is_edge(p, b, i, j);
                col_edge |= is_edge(p, b, j, i);
                if (is_edge(p, b, i, j))
                    continue;
                for (int64_t r = 0; r < P; r++)
                    if (g[T_PAIR][((b * N + i) * N + j) * P + r] != 0.0)
                        fail_msg("%s: d_pair_feats[%lld,%lld,%lld,%lld] = %g for a non-edge",
                                 c->name, (long long)b, (long long)i, (long long)j,
                                 (long long)r, g[T_PAIR][((b * N + i) * N + j) * P + r]);
            }
            if (row_edge || col_edge)
                continue;
            for (int64_t d = 0; d < D; d++)
                if (g[T_NODES][(b * N + i) * D + d] != (double)p->d_out[(b * N + i) * D + d])
                    fail_msg("%s: node (%lld, %lld) has no edge in or out, yet d_nodes != d_out",
                             c->name, (long long)b, (long long)i);
        }
    if (c->mask == MASK_NONE)
        for (int t = T_GAMMA; t < T_COUNT; t++)
            for (size_t e = 0; e < p->n[t]; e++)
                if (g[t][e] != 0.0)
                    fail_msg("%s: no edge at all, yet d_%s[%zu] = %g", c->name, tensor_name[t],
                             e, g[t][e]);
}

static void test_finite_differences(void **state)
{
    const fd_case *c = *state;
    uint64_t seed = sgkt_seed_mix(sgkt_env_seed(0x5eedbac4ull), (uint64_t)(c - fd_cases));
    problem p;
    problem_init(&p, c, seed);
    double *g[T_COUNT];
    sgk_ref_grads G;
    grads_alloc(&p, g, &G);
    assert_int_equal(run_backward(&p, &G), 0);
    check_structure(&p, c, g);
#if defined(_OPENMP)
    /* hundreds of forwards of a few rows each: threads would only wait */
    int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
#endif

    sgkt_rng pick;
    sgkt_rng_seed(&pick, seed ^ 0xfdull);
    int failed = 0;
    for (int t = 0; t < T_COUNT; t++) {
        size_t n = p.n[t], checks = n <= FD_MAX_ENTRIES ? n : FD_MAX_ENTRIES;
        double norm = 0.0, worst = 0.0;
        size_t worst_e = 0;
        for (size_t e = 0; e < n; e++)
            norm += g[t][e] * g[t][e];
        norm = sqrt(norm);
        for (size_t s = 0; s < checks; s++) {
            size_t e = n <= FD_MAX_ENTRIES ? s : (size_t)(sgkt_rng_u64(&pick) % n);
            double x0 = p.t[t][e], h = FD_STEP * fmax(1.0, fabs(x0));
            double xp = x0 + h, xm = x0 - h;
            p.t[t][e] = xp;
            double lp = loss(&p);
            p.t[t][e] = xm;
            double lm = loss(&p);
            p.t[t][e] = x0;
            double err = fabs((lp - lm) / (xp - xm) - g[t][e]);
            if (!(err <= worst)) {
                worst = err;
                worst_e = e;
            }
        }
        double scale = fmax(norm, FD_NORM_FLOOR);
        if (!(worst <= FD_TOL * scale)) {
            printf("FAIL %s d_%s: entry %zu off by %.3e, norm %.3e (seed 0x%llx)\n", c->name,
                   tensor_name[t], worst_e, worst, norm, (unsigned long long)seed);
            failed = 1;
        } else if (sgkt_env_flag("SGK_TEST_VERBOSE")) {
            printf("%-12s d_%-10s %4zu/%-4zu checked, norm %.3e, max err %.3e\n", c->name,
                   tensor_name[t], checks, n, norm, worst);
        }
    }
#if defined(_OPENMP)
    omp_set_num_threads(saved_threads);
#endif
    for (int t = 0; t < T_COUNT; t++)
        free(g[t]);
    problem_free(&p);
    if (failed)
        fail_msg("%s: the backward disagrees with finite differences of the forward", c->name);
}

/* The forward's three entry points agree bit for bit; the statistics are
 * -inf and 0 exactly on rows without edges and describe a softmax elsewhere:
 * the largest term exp(0) = 1 is in the sum, and no term exceeds 1. */
static void test_forward_stats(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof fd_cases / sizeof fd_cases[0]; ci++) {
        const fd_case *c = &fd_cases[ci];
        problem p;
        problem_init(&p, c, sgkt_seed_mix(0x57a7ull, ci));
        size_t n = p.n[T_NODES], ns = (size_t)(c->B * c->H * c->N);
        double *o1 = malloc(n * sizeof(double)), *o2 = malloc(n * sizeof(double));
        double *mx = malloc(ns * sizeof(double)), *sm = malloc(ns * sizeof(double));
        assert_true(o1 && o2 && mx && sm);
        assert_int_equal(sgk_ref_forward(&p.L, c->B, c->N, p.in.nodes, p.in.pair_feats,
                                         p.in.edge_mask, c->mask_type, o1, NULL),
                         0);
        assert_int_equal(sgk_ref_forward_stats(&p.L, c->B, c->N, p.in.nodes, p.in.pair_feats,
                                               p.in.edge_mask, c->mask_type, o2, NULL, mx, sm),
                         0);
        assert_memory_equal(o1, o2, n * sizeof(double));
        (void)loss(&p);
        assert_memory_equal(o1, p.out, n * sizeof(double));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t i = 0; i < c->N; i++) {
                    int64_t edges = 0;
                    for (int64_t j = 0; j < c->N; j++)
                        edges += is_edge(&p, b, i, j);
                    size_t s = (size_t)((b * c->H + h) * c->N + i);
                    if (edges == 0)
                        assert_true(mx[s] == -INFINITY && sm[s] == 0.0);
                    else
                        assert_true(isfinite(mx[s]) && sm[s] >= 1.0 && sm[s] <= (double)edges);
                }
        free(o1);
        free(o2);
        free(mx);
        free(sm);
        problem_free(&p);
    }
}

/* N = 21 spans three row blocks of the MLP's partial sums. */
static void test_thread_count(void **state)
{
    (void)state;
#if !defined(_OPENMP)
    skip();
#else
    fd_case c = {"threads", 2, 21, 8, 2, 3, SGK_MASK_F32, MASK_MIXED};
    problem p;
    problem_init(&p, &c, 0x7472ull);
    double *g1[T_COUNT], *g4[T_COUNT];
    sgk_ref_grads G1, G4;
    grads_alloc(&p, g1, &G1);
    grads_alloc(&p, g4, &G4);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    int rc1 = run_backward(&p, &G1);
    omp_set_num_threads(4);
    int rc4 = run_backward(&p, &G4);
    omp_set_num_threads(saved);
    assert_int_equal(rc1, 0);
    assert_int_equal(rc4, 0);
    for (int t = 0; t < T_COUNT; t++) {
        if (memcmp(g1[t], g4[t], p.n[t] * sizeof(double)) != 0)
            fail_msg("d_%s differs between 1 and 4 threads", tensor_name[t]);
        free(g1[t]);
        free(g4[t]);
    }
    problem_free(&p);
#endif
}

/* Bad arguments return -1 and the backward then writes nothing; its NULL
 * outputs are left out. */
static void test_arguments(void **state)
{
    (void)state;
    fd_case c = {"args", 1, 3, 4, 2, 2, SGK_MASK_F32, MASK_DENSE};
    problem p;
    problem_init(&p, &c, 0xa5ull);
    double *g[T_COUNT];
    sgk_ref_grads G;
    grads_alloc(&p, g, &G);
    for (int t = 0; t < T_COUNT; t++)
        for (size_t e = 0; e < p.n[t]; e++)
            g[t][e] = 42.0;
    sgk_ref_layer bad = p.L;
    bad.H = 3; /* does not divide D */
    assert_int_equal(sgk_ref_backward(&bad, 1, 3, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      SGK_MASK_F32, p.d_out, &G),
                     -1);
    bad = p.L;
    bad.w2 = NULL;
    assert_int_equal(sgk_ref_backward(&bad, 1, 3, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      SGK_MASK_F32, p.d_out, &G),
                     -1);
    assert_int_equal(sgk_ref_backward(&p.L, 1, 0, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      SGK_MASK_F32, p.d_out, &G),
                     -1);
    assert_int_equal(sgk_ref_backward(&p.L, 1, 3, p.in.nodes, p.in.pair_feats, p.in.edge_mask,
                                      SGK_MASK_F32, NULL, &G),
                     -1);
    for (int t = 0; t < T_COUNT; t++)
        for (size_t e = 0; e < p.n[t]; e++)
            assert_true(g[t][e] == 42.0);

    double stat[6];
    assert_int_equal(sgk_ref_forward_stats(&p.L, 1, 3, p.in.nodes, p.in.pair_feats,
                                           p.in.edge_mask, SGK_MASK_F32, NULL, NULL, stat, NULL),
                     -1);

    sgk_ref_grads only = {0};
    only.wq = g[T_WQ];
    assert_int_equal(run_backward(&p, &only), 0);
    assert_true(g[T_WQ][0] != 42.0);
    assert_true(g[T_NODES][0] == 42.0 && g[T_W2][0] == 42.0);
    for (int t = 0; t < T_COUNT; t++)
        free(g[t]);
    problem_free(&p);
}

int main(void)
{
    enum { N_FD = sizeof fd_cases / sizeof fd_cases[0] };
    struct CMUnitTest tests[N_FD + 3];
    for (int i = 0; i < N_FD; i++) {
        struct CMUnitTest t = {fd_cases[i].name, test_finite_differences, NULL, NULL,
                               (void *)&fd_cases[i]};
        tests[i] = t;
    }
    struct CMUnitTest rest[3] = {cmocka_unit_test(test_forward_stats),
                                 cmocka_unit_test(test_thread_count),
                                 cmocka_unit_test(test_arguments)};
    memcpy(tests + N_FD, rest, sizeof rest);
    return _cmocka_run_group_tests("backward", tests, N_FD + 3, NULL, NULL);
}
