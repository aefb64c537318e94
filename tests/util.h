/* Test and benchmark utilities: a seedable RNG, random weights and inputs,
 * edge-mask patterns, guarded output buffers, NaN poisoning, error measures,
 * and the preset shapes of the design card (shared by tests and bench). */
#ifndef SGK_TESTS_UTIL_H
#define SGK_TESTS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- presets (SPEC section 4) --------------------------------------- */

typedef struct sgkt_preset {
    const char *name;
    int64_t B, N, D, H, P;
} sgkt_preset;

extern const sgkt_preset sgkt_presets[];
extern const int sgkt_preset_count;
/* NULL when no preset has that name. */
const sgkt_preset *sgkt_preset_find(const char *name);

/* ---- random numbers --------------------------------------------------- */

/* splitmix64: tiny, fast, and every seed (0 included) gives a good stream. */
typedef struct sgkt_rng {
    uint64_t state;
} sgkt_rng;

void sgkt_rng_seed(sgkt_rng *rng, uint64_t seed);
uint64_t sgkt_rng_u64(sgkt_rng *rng);
double sgkt_rng_uniform(sgkt_rng *rng);                 /* [0, 1) */
double sgkt_rng_range(sgkt_rng *rng, double lo, double hi); /* [lo, hi) */
double sgkt_rng_normal(sgkt_rng *rng);                  /* N(0, 1) */
/* Mixes a base seed with a tag (e.g. a case index) into an independent seed. */
uint64_t sgkt_seed_mix(uint64_t base, uint64_t tag);
/* SGK_TEST_SEED from the environment (decimal or 0x hex), else fallback. */
uint64_t sgkt_env_seed(uint64_t fallback);

void sgkt_fill_uniform(sgkt_rng *rng, float *x, size_t n, double lo, double hi);
void sgkt_fill_normal(sgkt_rng *rng, float *x, size_t n, double mean, double stddev);

/* ---- weights ---------------------------------------------------------- */

/* Host weights in PyTorch nn.Linear layout (weight[out][in]). */
typedef struct sgkt_weights {
    int64_t D, H, P;
    float eps;
    float *ln_gamma, *ln_beta;  /* (D) */
    float *wq, *wk, *wv, *wo;   /* (D, D) */
    float *w1, *b1;             /* (P, P), (P) */
    float *w2, *b2;             /* (H, P), (H) */
} sgkt_weights;

/* Allocates and fills like PyTorch's init (U(-1/sqrt(in), 1/sqrt(in)) for
 * every Linear), with LayerNorm gamma ~ U(0.5, 1.5), beta ~ U(-0.5, 0.5) and
 * b1, b2 drawn from the same range as their weights (never all zero).
 * Returns 0, or -1 when out of memory (w is then left empty). */
int sgkt_weights_alloc(sgkt_weights *w, int64_t D, int64_t H, int64_t P);
void sgkt_weights_random(sgkt_weights *w, sgkt_rng *rng);
void sgkt_weights_free(sgkt_weights *w);
/* Points desc's dims, eps and weight pointers at w. The caller has run
 * sgk_layer_desc_init (so struct_size and dtype are set). */
void sgkt_weights_to_desc(const sgkt_weights *w, sgk_layer_desc *desc);
/* Points the reference layer at w. */
void sgkt_weights_to_ref(const sgkt_weights *w, sgk_ref_layer *ref);
/* Transposes a (n, n) matrix in place. */
void sgkt_transpose_square(float *m, int64_t n);

/* ---- inputs and masks ------------------------------------------------- */

typedef enum sgkt_mask_pattern {
    SGKT_MASK_DENSE = 0,     /* every edge present */
    SGKT_MASK_RANDOM,        /* each edge present with probability density */
    SGKT_MASK_EMPTY_ROWS,    /* random, plus about a quarter of rows fully masked */
    SGKT_MASK_ALL_ZERO,      /* no edge at all */
    SGKT_MASK_DIAGONAL,      /* only self edges */
    SGKT_MASK_ODD_VALUES     /* random, edges stored as unusual nonzero values
                                (f32: 0.3, -2, 1e-30, 1e-45, inf, NaN; u8: 1, 2, 255, 128) and
                                non-edges as 0 (f32: also -0.0) */
} sgkt_mask_pattern;

const char *sgkt_mask_pattern_name(sgkt_mask_pattern pattern);

typedef struct sgkt_inputs {
    int64_t B, N, D, P;
    float *nodes;      /* (B, N, D) */
    float *pair_feats; /* (B, N, N, P) */
    void *edge_mask;   /* (B, N, N) of float or uint8_t */
    sgk_mask_type mask_type;
} sgkt_inputs;

size_t sgkt_mask_elem_size(sgk_mask_type mask_type);
/* Returns 0, or -1 when out of memory or a byte count overflows. */
int sgkt_inputs_alloc(sgkt_inputs *in, int64_t B, int64_t N, int64_t D, int64_t P,
                      sgk_mask_type mask_type);
void sgkt_inputs_free(sgkt_inputs *in);
/* nodes ~ N(0, 1), pair_feats ~ N(0, 1), mask from the pattern. */
void sgkt_inputs_random(sgkt_inputs *in, sgkt_rng *rng, sgkt_mask_pattern pattern,
                        double density);
/* Each nodes row redrawn as an offset (normal, sd 20) plus a spread of sd
 * 3e-3, about sqrt(eps = 1e-5): SGKT_CASE_LN_OFFSET. */
void sgkt_nodes_offset(sgkt_inputs *in, sgkt_rng *rng);
void sgkt_fill_mask(sgkt_rng *rng, sgkt_mask_pattern pattern, double density,
                    sgk_mask_type mask_type, int64_t B, int64_t N, void *mask);
/* 1 when edge_mask[b, i, j] counts as an edge (nonzero; NaN is nonzero). */
int sgkt_mask_is_edge(const void *mask, sgk_mask_type mask_type, size_t index);
/* Number of fully masked rows (b, i). */
int64_t sgkt_mask_empty_rows(const void *mask, sgk_mask_type mask_type, int64_t B, int64_t N);

/* A case in bf16 or f16: w and in rounded to the dtype in place (what a
 * reference on them sees), and the same values as 16-bit copies, the
 * weights in sgk_layer_desc's order. */
typedef struct sgkt_case16 {
    uint16_t *w[10], *nodes, *pair;
} sgkt_case16;
/* Returns 0, or -1 when out of memory (nothing held then). */
int sgkt_round16(sgk_dtype dtype, sgkt_weights *w, sgkt_inputs *in, sgkt_case16 *c);
/* desc (initialised by sgk_layer_desc_init) as dtype, pointing at c's
 * weights (shapes and eps from w). */
void sgkt_desc16(sgk_dtype dtype, const sgkt_weights *w, const sgkt_case16 *c, sgk_layer_desc *desc);
void sgkt_case16_free(sgkt_case16 *c);

/* ---- guarded buffers -------------------------------------------------- */

/* bytes of caller memory followed by SGKT_GUARD_BYTES of a known pattern;
 * the caller's part is aligned to 64 bytes. Free with sgkt_guarded_free. */
#define SGKT_GUARD_BYTES 256
void *sgkt_guarded_alloc(size_t bytes);
/* 1 when the guard after the first `bytes` bytes is intact. */
int sgkt_guard_ok(const void *buf, size_t bytes);
void sgkt_guarded_free(void *buf);

/* Fills with a quiet NaN so that an unwritten element cannot pass a check. */
void sgkt_poison_nan(float *x, size_t n);

/* ---- non-finite inputs ------------------------------------------------ */

/* One NaN or Inf input of a two-entry graph (the non-finite tests): in
 * nodes[0, node, 0] (in_pair 0) or pair_feats[0, node, col, 0] (1). */
typedef struct sgkt_poison {
    const char *what;
    int in_pair;
    int node, col;
    float value;
} sgkt_poison;

/* The poisons, each a test of its own: node 0's features, a masked pair's,
 * two edges'. */
extern const sgkt_poison sgkt_poisons[];
extern const int sgkt_poison_count;
/* The mask of those tests ((2, N, N) floats, N >= 4): in batch entry 0
 * rows 1 and 2 do not attend to node 0 and row 3 attends to nothing; the
 * rest, and entry 1, dense. */
void sgkt_poison_mask(float *mask, int64_t N);
/* Writes p's value into nodes ((B, N, D)) or pair_feats ((B, N, N, P)). */
void sgkt_poison_apply(const sgkt_poison *p, float *nodes, float *pair_feats, int64_t N, int64_t D, int64_t P);

/* ---- comparison ------------------------------------------------------- */

typedef struct sgkt_error {
    double rel_l2;   /* ||got - ref|| / max(||ref||, tiny); +inf if any element differs in finiteness */
    double max_abs;  /* max |got - ref| over finite pairs; +inf on a finiteness mismatch */
    size_t worst;    /* index of the largest difference (or first mismatch) */
    size_t mismatched_nonfinite; /* elements finite in one and not in the other, or NaN vs Inf */
} sgkt_error;

sgkt_error sgkt_compare(const float *got, const double *ref, size_t n);
/* Same against a float reference (bench and self-checks). */
sgkt_error sgkt_compare_f(const float *got, const float *ref, size_t n);
/* 1 when within both bounds. */
int sgkt_error_ok(const sgkt_error *e, double rel_l2_max, double max_abs_max);

/* Tolerances every backend and variant must meet against the reference. */
#define SGKT_REL_L2_TOL 1e-5
#define SGKT_MAX_ABS_TOL 1e-4

/* Relative L2 of got against ref over ref's finite elements, ref's norm
 * floored at 1e-3 per element's root mean square: a gradient that is zero
 * in exact arithmetic (b2's: a softmax ignores a constant added to a row)
 * holds only rounding, which relative error alone would magnify. */
double sgkt_rel_l2_floored(const float *got, const double *ref, size_t n);

/* ---- gradients -------------------------------------------------------- */

/* The members of sgk_grads (and sgk_ref_grads), in this order: nodes,
 * pair_feats, ln_gamma, ln_beta, wq, wk, wv, wo, w1, b1, w2, b2. */
#define SGKT_N_GRADS 12
extern const char *const sgkt_grad_names[SGKT_N_GRADS];
/* Element counts of the gradients of a (B, N) call of a (D, H, P) layer. */
void sgkt_grad_counts(int64_t B, int64_t N, int64_t D, int64_t H, int64_t P, size_t n[SGKT_N_GRADS]);
/* The address of member i. */
void **sgkt_grad_slot(sgk_grads *g, int i);
double **sgkt_ref_grad_slot(sgk_ref_grads *g, int i);

/* Nonzero when the environment variable is set to something other than "0". */
int sgkt_env_flag(const char *name);

#ifdef __cplusplus
}
#endif
#endif
