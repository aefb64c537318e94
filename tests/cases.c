#include "cases.h"

/* Sizes are chosen so that the whole table, in the double reference and on
 * the cpu backend with two cores, runs in well under a minute per variant:
 * big N or D goes with B = 1. */
const sgkt_case sgkt_cases[] = {
    /* the presets of the design card */
    {"preset_seed", 4, 24, 96, 4, 16, SGKT_MASK_RANDOM, 0.7, SGK_MASK_F32, 0},
    {"preset_mid", 32, 64, 256, 8, 32, SGKT_MASK_RANDOM, 0.7, SGK_MASK_U8, 0},
    {"preset_large", 8, 512, 256, 8, 32, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"preset_xl", 2, 2048, 256, 8, 16, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, SGKT_CASE_XL},
    /* the seed shape with another batch, mask kind and empty rows: CUDA
     * compiles that shape into its own kernel instance */
    {"seed_shape_b7", 7, 24, 96, 4, 16, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_U8, 0},
    /* and with more batch entries than the H200 runs clusters of 16 at
     * once (7): clusters of 8, the instance with 12 rows a block */
    {"seed_shape_b12", 12, 24, 96, 4, 16, SGKT_MASK_RANDOM, 0.3, SGK_MASK_F32, 0},
    /* sizes off every power of two and tile edge */
    {"odd_sizes", 3, 13, 30, 5, 7, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_F32, 0},
    {"n1", 2, 1, 16, 2, 4, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    {"n1_masked", 2, 1, 16, 2, 4, SGKT_MASK_ALL_ZERO, 0.0, SGK_MASK_U8, 0},
    {"n2", 3, 2, 8, 2, 3, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, 0},
    {"batch_64", 64, 3, 16, 2, 2, SGKT_MASK_RANDOM, 0.6, SGK_MASK_U8, 0},
    /* 18000 rows: enough for CUDA's wide Q/K/V GEMM tiles (two blocks an
     * SM on up to 140 SMs) in a quick run under compute-sanitizer */
    {"batch_18000_n1", 18000, 1, 16, 2, 2, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    {"n300", 1, 300, 64, 4, 8, SGKT_MASK_RANDOM, 0.3, SGK_MASK_F32, 0},
    {"n1000", 1, 1000, 32, 2, 4, SGKT_MASK_RANDOM, 0.1, SGK_MASK_U8, 0},
    {"n4096", 1, 4096, 8, 2, 2, SGKT_MASK_RANDOM, 0.02, SGK_MASK_U8, 0},
    /* head dims 1 .. 256 and the widest required D */
    {"head_dim_1", 2, 9, 8, 8, 3, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    {"head_dim_3", 2, 11, 12, 4, 3, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"head_dim_64", 2, 20, 128, 2, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"head_dim_128", 2, 20, 256, 2, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    {"head_dim_256", 1, 17, 512, 2, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"dim_1024", 1, 33, 1024, 8, 8, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"dim_1024_head_dim_256", 1, 9, 1024, 4, 4, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
    /* eight heads of 32 (CUDA's attn_rows.cuh): partial query and key
     * tiles, features not a multiple of 4 */
    {"heads_8_dim_256_n21", 2, 21, 256, 8, 5, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_F32, 0},
    {"heads_8_dim_256_n45_pair_20", 1, 45, 256, 8, 20, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    /* attn_rows runs a warp's MLP unless none of its 64 pairs is an edge:
     * every pair an edge, and one pair in ten (tail tiles often hold none) */
    {"heads_8_dim_256_dense_n40", 2, 40, 256, 8, 32, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    {"heads_8_dim_256_sparse_n70", 1, 70, 256, 8, 32, SGKT_MASK_RANDOM, 0.1, SGK_MASK_U8, 0},
    /* pair-feature widths */
    {"pair_dim_1", 2, 15, 32, 4, 1, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"pair_dim_128", 1, 24, 64, 4, 128, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"pair_dim_33", 2, 19, 48, 3, 33, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    /* mask patterns */
    {"mask_dense", 2, 40, 64, 4, 8, SGKT_MASK_DENSE, 1.0, SGK_MASK_F32, 0},
    {"mask_random_30", 2, 40, 64, 4, 8, SGKT_MASK_RANDOM, 0.3, SGK_MASK_F32, 0},
    {"mask_empty_rows", 2, 40, 64, 4, 8, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_F32, 0},
    {"mask_empty_rows_u8", 3, 37, 48, 4, 8, SGKT_MASK_EMPTY_ROWS, 0.3, SGK_MASK_U8, 0},
    {"mask_all_zero", 2, 16, 32, 4, 8, SGKT_MASK_ALL_ZERO, 0.0, SGK_MASK_F32, 0},
    {"mask_all_zero_u8", 2, 70, 96, 4, 8, SGKT_MASK_ALL_ZERO, 0.0, SGK_MASK_U8, 0},
    {"mask_diagonal", 2, 33, 64, 4, 8, SGKT_MASK_DIAGONAL, 1.0, SGK_MASK_F32, 0},
    {"mask_sparse_5", 2, 130, 32, 2, 4, SGKT_MASK_RANDOM, 0.05, SGK_MASK_U8, 0},
    {"mask_odd_values_f32", 2, 24, 48, 6, 8, SGKT_MASK_ODD_VALUES, 0.5, SGK_MASK_F32, 0},
    {"mask_odd_values_u8", 2, 24, 48, 6, 8, SGKT_MASK_ODD_VALUES, 0.5, SGK_MASK_U8, 0},
    /* SPEC section 4's sweep, scaled down in B and N: each of its head dims
     * (16 .. 256) and P classes (<= 16, 32, 64, 128), with H from 1 to 16
     * (odd, and over 8) */
    {"sweep_s02_like", 1, 50, 512, 8, 24, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"sweep_s03_like", 1, 24, 1024, 16, 32, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    {"sweep_s05_like", 2, 40, 320, 5, 48, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_F32, 0},
    {"sweep_s07_like", 1, 60, 256, 16, 64, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    {"sweep_s08_like", 1, 70, 384, 4, 24, SGKT_MASK_RANDOM, 0.3, SGK_MASK_F32, 0},
    {"sweep_s09_like", 1, 150, 128, 1, 16, SGKT_MASK_RANDOM, 0.5, SGK_MASK_U8, 0},
    {"sweep_s12_like", 1, 40, 1024, 4, 128, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"sweep_s13_like", 2, 32, 768, 12, 32, SGKT_MASK_DENSE, 1.0, SGK_MASK_U8, 0},
    {"sweep_s14_like", 1, 100, 128, 8, 4, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    /* wide pair features with head dims off the multiples of 4 and 8, and
     * of 128 (CUDA's relation MLP pass and tensor-core attention) */
    {"pass_head_dim_6", 1, 37, 30, 5, 20, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_U8, 0},
    {"pass_head_dim_24", 2, 33, 96, 4, 24, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    {"pass_head_dim_128", 1, 70, 256, 2, 40, SGKT_MASK_RANDOM, 0.2, SGK_MASK_U8, 0},
    /* the same pass with grids of 64-query blocks of one head that fill a
     * GPU of up to 144 SMs (CUDA's attn_mma.cuh runs them unsplit) */
    {"mma_grid_head_dim_8", 3, 192, 128, 16, 24, SGKT_MASK_EMPTY_ROWS, 0.5, SGK_MASK_U8, 0},
    {"mma_grid_head_dim_64", 17, 100, 256, 4, 20, SGKT_MASK_RANDOM, 0.5, SGK_MASK_F32, 0},
    /* LayerNorm of rows with |mean| >> std (each LayerNorm of every
     * backend: D = 2, the seed shape, D = 256, another D) */
    {"ln_offset_d2", 3, 7, 2, 1, 4, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, SGKT_CASE_LN_OFFSET},
    {"ln_offset_seed", 4, 24, 96, 4, 16, SGKT_MASK_RANDOM, 0.7, SGK_MASK_U8, SGKT_CASE_LN_OFFSET},
    {"ln_offset_d256", 1, 40, 256, 8, 16, SGKT_MASK_RANDOM, 0.6, SGK_MASK_F32, SGKT_CASE_LN_OFFSET},
    {"ln_offset_d40", 2, 19, 40, 4, 6, SGKT_MASK_RANDOM, 0.6, SGK_MASK_U8, SGKT_CASE_LN_OFFSET},
};
const int sgkt_case_count = (int)(sizeof sgkt_cases / sizeof sgkt_cases[0]);

int sgkt_case_enabled(const sgkt_case *c)
{
    if (c->flags & SGKT_CASE_XL)
        return sgkt_env_flag("SGK_TEST_XL");
    /* Quick runs (under compute-sanitizer or ASan) keep every code path but
     * only shapes whose work fits a slowed-down run. */
    if (sgkt_env_flag("SGK_TEST_QUICK"))
        return c->B * c->N * (c->N * (c->P + c->D) + c->D * c->D) <= 5000000;
    return 1;
}
