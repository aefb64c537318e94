/* The CUDA variants of the sgk layer, in order of preference, and the
 * packing of a layer's weights (at creation, and again from new host or
 * device weights). To add a variant: write its plan (and
 * prefer, if any), workspace and launch functions and add a row to
 * sgkc_variants below (cuda_layer.h says what each does). */
#include "cuda_layer.h"
#include "generic.h"
#include "tc.h"

#include "attn_general.cuh"
#include "attn_tiled.cuh"
#include "attn_tiled16.cuh"
#include "attn_mma.cuh"
#include "attn_rows.cuh"
#include "fused_small.cuh"
#include "gemm_dmma.cuh"
#include "gemm_panel.cuh"
#include "mlp_tc.cuh"
#include "mlp_wg.cuh"
#include "mlp_h16.cuh"
#include "sgemm.cuh"

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SGKC_RETURN_IF(err)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (err);                                                                    \
        if (e_ != cudaSuccess)                                                                     \
            return e_;                                                                             \
    } while (0)

static const size_t SGKC_WS_ALIGN = 256;

/* ------------------------------------------------------------------ */
/* Shared pieces of the multi-kernel paths (tiled, general): the       */
/* workspace holds qkv (B*N, 3D) then ctx (B*N, D).                    */
/* ------------------------------------------------------------------ */

static size_t ws_qkv_ctx(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *)
{
    return (size_t)B * (size_t)N * 4u * (size_t)L->D * sizeof(float) + SGKC_WS_ALIGN;
}

static float *ws_base(const sgkc_fwd *f)
{
    uintptr_t p = (uintptr_t)f->ws;
    p = (p + SGKC_WS_ALIGN - 1) & ~(uintptr_t)(SGKC_WS_ALIGN - 1);
    return (float *)p;
}

/* The GEMMs' grids (tiles of 32 rows at least; Q/K/V has Nc = 3D) fit CUDA's limits. */
static bool gemm_fits(const sgkc_layer *L, int64_t M)
{
    return (M + 31) / 32 <= INT_MAX && (3 * (int64_t)L->D + 63) / 64 <= 65535;
}

/* A launch attribute grouping the grid's blocks in clusters of n along x. */
static cudaLaunchAttribute cluster_attr(unsigned n)
{
    cudaLaunchAttribute a;
    memset(&a, 0, sizeof a);
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = n;
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
    return a;
}

/* A launch that may begin while the kernel before it on the stream ends
 * (programmatic dependent launch, Hopper): the kernel's blocks do their
 * independent setup and then wait for that kernel (sgkc_grid_wait), so
 * the launch and the setup hide behind its last blocks. Only kernels that
 * call sgkc_grid_wait before touching memory an earlier kernel may write
 * may be launched so. cluster > 0 launches in clusters of that many. */
template <typename... KArgs, typename... Args>
static cudaError_t launch_after(const sgkc_layer *L, void (*kernel)(KArgs...), dim3 grid, unsigned nt, size_t smem,
                                cudaStream_t s, unsigned cluster, Args... args)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = dim3(nt);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cluster > 0)
        attr[n++] = cluster_attr(cluster);
    if (L->cc_major >= 9) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* The dynamic shared memory (need, at least) with which at most n blocks
 * of a kernel share an SM: over 1 / (n + 1) of the SM's shared memory, with
 * what the device keeps back per block. need where that is past the opt-in
 * limit. */
static size_t smem_for_per_sm(const sgkc_layer *L, size_t need, int64_t n)
{
    if (L->smem_sm == 0)
        return need;
    size_t s = L->smem_sm / (size_t)(n + 1) + 16;
    s = s > L->smem_rsv ? ((s - L->smem_rsv + 15) & ~(size_t)15) : 0;
    return s > need && s <= L->smem_optin ? s : need;
}

/* The dynamic shared memory to launch a kernel of per_max blocks an SM with
 * (need, at least), so that a grid of fewer than per_max blocks an SM
 * spreads over every SM. A kernel launched early (launch_after) has its
 * blocks placed on the SMs that free up first, as many to an SM as fit,
 * while other SMs idle: capping each SM at the grid's per blocks rules
 * that out. */
static size_t spread_smem(const sgkc_layer *L, size_t need, int64_t blocks, int per_max)
{
    const int64_t per = (blocks + L->sm_count - 1) / L->sm_count;
    return per >= per_max ? need : smem_for_per_sm(L, need, per);
}

/* A GEMM's grid and block follow from its tile: BM x BN outputs a block,
 * TM x TN a thread. */
template <bool LN, bool RES, int BM, int BN, int BK, int TM, int TN, int MINB>
static cudaError_t launch_gemm(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g)
{
    const dim3 grid((unsigned)((g.M + BM - 1) / BM), (unsigned)((g.Nc + BN - 1) / BN));
    return launch_after(L, sgkc_sgemm_kernel<BM, BN, BK, TM, TN, LN, RES, MINB>, grid, (BM / TM) * (BN / TN), 0, s,
                        0, g);
}

/* The divisor d of nt, the column tiles of a GEMM, that a block walks
 * over one prologue (its A panel copied and LayerNorm'd once): the one of
 * least cost(blocks, d), blocks = rows * (nt / d) being the grid; one is
 * the default, and a cost below zero refuses d. gemm_panel.cuh and
 * gemm_dmma.cuh each give their own cost, below. */
template <class Cost>
static int walk_ntiles(int nt, int64_t rows, const Cost &cost)
{
    int best = 1;
    double best_cost = 0;
    for (int d = 1; d <= nt; d++) {
        if (nt % d)
            continue;
        const double c = cost(rows * (nt / d), d);
        if (d == 1 || (c >= 0 && c < best_cost))
            best = d, best_cost = c;
    }
    return best;
}

/* How many column blocks a block of gemm_panel.cuh's WALK instance walks
 * over its LayerNorm'd panel: the cost, in the time of one 32-deep slice,
 * counts waves of MINB blocks an SM and the panel's copy and LayerNorm as
 * two slices; a grid of fewer blocks than SMs is not taken. It picks two
 * at large and xl (512 blocks of one column block are two waves, 256 of
 * two are one) and one at mid. Four at large and xl, one block an SM, were
 * slower than one. Other instances take one. */
template <bool LN, bool RES, int BM, int BN, int TM, int TN, int STAGES, int MINB, int KG, bool WALK = false>
static int panel_ntiles(const sgkc_layer *L, const sgkc_gemm_args &g)
{
    if (!WALK)
        return 1;
    const int nt = g.Nc / BN;
    const int64_t rows = (g.M + BM - 1) / BM, slots = (int64_t)MINB * L->sm_count;
    return walk_ntiles(nt, rows, [&](int64_t blocks, int d) {
        const int64_t waves = (blocks + slots - 1) / slots;
        return blocks < L->sm_count ? -1.0 : (double)(waves * (2 + (SGKC_GP_K / SGKC_GP_BKC) * d));
    });
}

/* The same for gemm_panel.cuh's kernel: STAGES ring slots of B, MINB blocks
 * an SM. */
template <bool LN, bool RES, int BM, int BN, int TM, int TN, int STAGES, int MINB, int KG, bool WALK = false>
static dim3 panel_grid(const sgkc_layer *L, const sgkc_gemm_args &g)
{
    return dim3((unsigned)((g.M + BM - 1) / BM),
                (unsigned)(g.Nc / BN / panel_ntiles<LN, RES, BM, BN, TM, TN, STAGES, MINB, KG, WALK>(L, g)));
}

/* grid: panel_grid's, which the caller has computed to choose the instance */
template <bool LN, bool RES, int BM, int BN, int TM, int TN, int STAGES, int MINB, int KG, bool WALK = false>
static cudaError_t launch_panel(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g, dim3 grid)
{
    const size_t smem = spread_smem(L, sgkc_gp_smem_bytes(BM, BN, STAGES, KG), (int64_t)grid.x * grid.y, MINB);
    return launch_after(L, sgkc_gemm_panel_kernel<LN, RES, BM, BN, TM, TN, STAGES, MINB, KG, WALK>, grid,
                        KG * (BM / TM) * (BN / TN), smem, s, 0, g);
}

/* Whether the panel kernel takes g's shape on this device: its shared
 * memory is over the opt-in limit of some GPUs (99 KB on sm_86 and sm_89).
 * one_wave: and its grid is one wave of MINB blocks an SM. */
template <bool LN, bool RES, int BM, int BN, int TM, int TN, int STAGES, int MINB, int KG>
static bool panel_fits(const sgkc_layer *L, const sgkc_gemm_args &g, bool one_wave)
{
    if (!sgkc_gp_fits(g, BN) || sgkc_gp_smem_bytes(BM, BN, STAGES, KG) > L->smem_optin)
        return false;
    const dim3 grid = panel_grid<LN, RES, BM, BN, TM, TN, STAGES, MINB, KG>(L, g);
    return !one_wave || (int64_t)grid.x * grid.y <= (int64_t)MINB * L->sm_count;
}

/* gemm_panel.cuh's instances: Q/K/V in 64x96 tiles of 8x6 a thread
 * (128 threads, 205 registers, two blocks an SM), the same walking
 * several column blocks a block (200 registers), the output projection in
 * 32x64 tiles of 4x4 (128 threads, 106 registers, three an SM), or the
 * same in two K groups (256 threads, two an SM) where the grid is one wave
 * of two an SM. */
#define SGKC_GP_QKV true, false, 64, 96, 8, 6, 3, 2, 1
#define SGKC_GP_QKVW true, false, 64, 96, 8, 6, 3, 2, 1, true
#define SGKC_GP_OUT false, true, 32, 64, 4, 4, 3, 3, 1
#define SGKC_GP_OUT2 false, true, 32, 64, 4, 4, 3, 2, 2

/* LayerNorm + Q/K/V projection into qkv; q columns pre-scaled. ctx (B N x
 * D floats), free until the attention writes it, holds the LayerNorm
 * statistics where wg_gemm.cuh takes the projection. */
static sgkc_gemm_args qkv_args(const sgkc_layer *L, const sgkc_fwd *f, float *qkv, float *ctx)
{
    sgkc_gemm_args g;
    memset(&g, 0, sizeof g);
    const int D = L->D;
    g.A = f->nodes;
    g.Bt = L->wqkv_t;
    g.Wnk = L->gen + L->gen_off.wqkv; /* Wq | Wk | Wv as given: [n][k] */
    g.C = qkv;
    g.M = f->B * f->N;
    g.Nc = 3 * D;
    g.K = D;
    g.gamma = L->gamma;
    g.beta = L->beta;
    g.eps = L->eps;
    g.scale_cols = D;
    g.scale = 1.0f / sqrtf((float)L->hd);
    g.vec = D % 4 == 0 && sgkc_aligned16(f->nodes);
    g.vec_out = g.vec; /* qkv is workspace */
    g.ln_stats = sgkc_ln_stats_in(ctx, (size_t)g.M * (size_t)D, g.M);
    return g;
}

/* Whether tuned-tc's 3xTF32 GEMM (tc_gemm.cuh) takes g where gemm_panel.cuh
 * does not: where its split over k spreads a small grid (one robot's
 * graph) over every SM, which sgemm.cuh's grid of output tiles leaves
 * mostly idle, or at K >= 384, where its tensor cores outrun sgemm.cuh's
 * FFMA even on a full grid. Below that, on a full grid, sgemm.cuh's
 * register tiles keep up without the split's ALU work (DESIGN.md). */
static bool tc_wins(const sgkc_layer *L, const sgkc_gemm_args &g)
{
    return sgkc_tc_project_fits(L) && (g.K >= 384 || sgkc_tc_project_ksplit(L, g.M, g.Nc, g.K) > 1);
}

static cudaError_t launch_qkv(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g)
{
    /* wg_gemm.cuh where it takes g (compute capability 9.0, a grid of 128
     * x 128 tiles for a quarter of the SMs). Else: D = 256 where its grid
     * has a block for every SM: gemm_panel.cuh,
     * whose panels outrun sgemm.cuh's tiles there (DESIGN.md). Otherwise
     * tc_gemm.cuh where tc_wins, else sgemm.cuh, in 64x128 tiles of 8x8 a thread
     * (128 threads, 168 registers, three blocks an SM) wherever they give
     * every SM two blocks or more: each 16-byte shared-memory load then
     * feeds 16 FMAs, not 8. Otherwise 64x64 tiles of 4x4 (256 threads, 80
     * registers, three blocks an SM): mid's 2048 rows make only 192 of the
     * larger tiles for 396 block slots, which left SMs idle (4x8 and 8x4 a
     * thread were slower too). */
    /* Where one column block a block takes more than one wave, a block
     * walks several (panel_ntiles), paying the panel's copy and LayerNorm
     * once for them. */
    if (sgkc_tc_project_wg(L, g))
        return sgkc_tc_project(L, g, s);
    const dim3 pg = panel_grid<SGKC_GP_QKV>(L, g);
    if (panel_fits<SGKC_GP_QKV>(L, g, false) && ((int64_t)pg.x * pg.y >= L->sm_count || !sgkc_tc_project_fits(L))) {
        const dim3 one = panel_grid<SGKC_GP_QKV>(L, g), walk = panel_grid<SGKC_GP_QKVW>(L, g);
        return walk.y < one.y ? launch_panel<SGKC_GP_QKVW>(L, s, g, walk) : launch_panel<SGKC_GP_QKV>(L, s, g, one);
    }
    if (tc_wins(L, g))
        return sgkc_tc_project(L, g, s);
    const int64_t wide = ((g.M + 63) / 64) * ((g.Nc + 127) / 128);
    if (wide >= 2 * (int64_t)L->sm_count)
        return launch_gemm<true, false, 64, 128, 16, 8, 8, 3>(L, s, g);
    return launch_gemm<true, false, 64, 64, 16, 4, 4, 3>(L, s, g);
}

/* out = nodes + ctx Wo^T */
static sgkc_gemm_args out_args(const sgkc_layer *L, const sgkc_fwd *f, const float *ctx)
{
    sgkc_gemm_args g;
    memset(&g, 0, sizeof g);
    const int D = L->D;
    g.A = ctx;
    g.Bt = L->wo_t;
    g.Wnk = L->gen + L->gen_off.wo;
    g.C = f->out;
    g.M = f->B * f->N;
    g.Nc = D;
    g.K = D;
    g.residual = f->nodes;
    g.vec = D % 4 == 0;
    g.vec_out = g.vec && sgkc_aligned16(f->out) && sgkc_aligned16(f->nodes);
    return g;
}

/* out_args, writing a 16-bit layer's out as its dtype where f asks so
 * (f->out16; the launch then takes the tensor-core GEMMs: out_choice) */
static sgkc_gemm_args out_args16(const sgkc_layer *L, const sgkc_fwd *f, const float *ctx)
{
    sgkc_gemm_args g = out_args(L, f, ctx);
    if (f->out16) {
        g.C16 = (uint16_t *)f->out16;
        g.k16 = L->dtype == SGK_DTYPE_F16 ? 2 : 1;
    }
    return g;
}

/* Where launch_out runs the output projection g (only OUT_TC, the
 * tensor-core GEMMs of tc.cu, can also write a 16-bit out: C16) */
enum out_path { OUT_TC, OUT_PANEL2, OUT_PANEL, OUT_SGEMM };
static out_path out_choice(const sgkc_layer *L, const sgkc_gemm_args &g)
{
    /* wg_gemm.cuh where it takes g, as for Q/K/V. Else: D = 256 and the
     * grid in one wave of three blocks an SM, with a block for every SM:
     * gemm_panel.cuh. Past one wave its three blocks an SM
     * take more waves than sgemm.cuh's four (DESIGN.md). Otherwise
     * tc_gemm.cuh where tc_wins, else sgemm.cuh's 32x64
     * tiles (4x4 a thread): Nc = D gives few column blocks, so shorter row
     * blocks put two or more blocks on each SM at mid and large (32x32 and
     * 8x4 a thread were slower at every preset). */
    /* Two K groups where one wave has two blocks an SM: twice the warps to
     * hide latency (a small gain at mid). */
    if (sgkc_tc_project_wg(L, g))
        return OUT_TC;
    const dim3 pg = panel_grid<SGKC_GP_OUT>(L, g);
    const bool few = (int64_t)pg.x * pg.y < L->sm_count && sgkc_tc_project_fits(L);
    if (!few && panel_fits<SGKC_GP_OUT2>(L, g, true))
        return OUT_PANEL2;
    if (!few && panel_fits<SGKC_GP_OUT>(L, g, true))
        return OUT_PANEL;
    return tc_wins(L, g) ? OUT_TC : OUT_SGEMM;
}

static cudaError_t launch_out(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g)
{
    const out_path p = out_choice(L, g);
    if (p == OUT_TC)
        return sgkc_tc_project(L, g, s);
    if (g.C16) /* only the tensor-core GEMMs write a 16-bit output */
        return cudaErrorInvalidValue;
    if (p == OUT_PANEL2)
        return launch_panel<SGKC_GP_OUT2>(L, s, g, panel_grid<SGKC_GP_OUT2>(L, g));
    if (p == OUT_PANEL)
        return launch_panel<SGKC_GP_OUT>(L, s, g, panel_grid<SGKC_GP_OUT>(L, g));
    return launch_gemm<false, true, 32, 64, 16, 4, 4, 4>(L, s, g);
}

/* tuned-tiled-dmma's projections (gemm_dmma.cuh): 64 x 64 tiles, two blocks an
 * SM, spread over every SM where the grid is smaller. A block LayerNorms
 * its A panel once and walks a group of the n-tiles over it, so more
 * n-tiles a block pay that prologue less often, while fewer blocks may
 * leave SMs with one block (one warp a scheduler, whose loop keeps the
 * DMMA pipe clearly less busy than two do: dev/mma_probe.cu).
 * The cost below, in the time of 32 k of one n-tile, counts the prologue as
 * four of those and waves of two blocks an SM; it picks what was fastest
 * on the H200 (three n-tiles a block at large and xl, two at mid). Without
 * LayerNorm the prologue is one slice's copy, and a block takes one
 * n-tile. */
static int dgemm_ntiles(const sgkc_layer *L, const sgkc_gemm_args &g, bool ln)
{
    const int nt = g.Nc / SGKC_GD_BN;
    const int64_t rows = (g.M + SGKC_GD_BM - 1) / SGKC_GD_BM, sms = L->sm_count;
    if (!ln)
        return 1;
    return walk_ntiles(nt, rows, [&](int64_t blocks, int d) {
        const double waves = blocks <= sms ? 0.72 : (double)((blocks + 2 * sms - 1) / (2 * sms));
        return waves * (4 + 8 * d);
    });
}

static dim3 dgemm_grid(const sgkc_layer *L, const sgkc_gemm_args &g, bool ln)
{
    return dim3((unsigned)((g.M + SGKC_GD_BM - 1) / SGKC_GD_BM),
                (unsigned)(g.Nc / SGKC_GD_BN / dgemm_ntiles(L, g, ln)));
}

template <bool LN, bool RES>
static cudaError_t launch_dgemm(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g, dim3 grid)
{
    const size_t smem = spread_smem(L, sgkc_gd_smem_bytes(LN), (int64_t)grid.x * grid.y, 2);
    return launch_after(L, sgkc_gemm_dmma_kernel<LN, RES>, grid, SGKC_GD_NT, smem, s, 0, g);
}

/* The output projection on DMMA where its grid has a block for every SM.
 * Mid's 128 blocks of four warps, one warp a scheduler, were slower than
 * tiled's FFMA panel in two K groups, so smaller grids take that. */
static cudaError_t launch_out_dmma(const sgkc_layer *L, cudaStream_t s, const sgkc_gemm_args &g)
{
    const dim3 grid = dgemm_grid(L, g, false);
    if ((int64_t)grid.x * grid.y < L->sm_count || sgkc_tc_project_wg(L, g))
        return launch_out(L, s, g);
    return launch_dgemm<false, true>(L, s, g, grid);
}

/* ------------------------------------------------------------------ */
/* general: any shape whose per-row block fits in shared memory.       */
/* ------------------------------------------------------------------ */

/* The fields every attention kernel's arguments share (general, tiled and
 * tuned-fused-small): the pair inputs and the sizes. */
template <typename Args>
static void fill_input_args(Args &a, const sgkc_layer *L, const sgkc_fwd *f)
{
    a.pair = f->pair;
    a.mask = f->mask;
    a.mask_u8 = f->mask_u8;
    a.N = (int)f->N;
    a.D = L->D;
    a.H = L->H;
    a.P = L->P;
    a.hd = L->hd;
}

/* The general and tiled kernels' arguments: those inputs, the Q/K/V and
 * ctx workspace and the MLP weights. */
template <typename Args>
static void fill_attn_args(Args &a, const sgkc_layer *L, const sgkc_fwd *f, const float *qkv, float *ctx)
{
    fill_input_args(a, L, f);
    a.qkv = qkv;
    a.w1 = L->w1;
    a.b1 = L->b1;
    a.w2t = L->w2t;
    a.b2 = L->b2;
    a.ctx = ctx;
}

static int general_kc(const sgkc_layer *L, int64_t N)
{
    const size_t budget = L->smem_optin / sizeof(float);
    const size_t fixed = 2u * (size_t)L->D + 3u * (size_t)L->H;
    if (fixed >= budget)
        return 0;
    size_t kc = (budget - fixed) / ((size_t)L->H + (size_t)L->P);
    if (kc > 64)
        kc = 64;
    if ((int64_t)kc > N)
        kc = (size_t)N;
    return (int)kc;
}

static int general_supports(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    const int kc = general_kc(L, N);
    if (!(kc >= 1 && B * N <= INT_MAX && N <= INT_MAX / 4 && gemm_fits(L, B * N)))
        return 0;
    sgkc_plan_put(kc, plan);
    return 1;
}

static cudaError_t general_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    float *qkv = ws_base(f);
    float *ctx = qkv + (size_t)f->B * f->N * 3 * L->D;
    SGKC_RETURN_IF(launch_qkv(L, f->stream, qkv_args(L, f, qkv, ctx)));
    sgkc_gen_args a;
    fill_attn_args(a, L, f, qkv, ctx);
    a.KC = sgkc_plan_get<int>(plan);
    const size_t smem = sgkc_ag_smem_floats(a.D, a.H, a.P, a.KC) * sizeof(float);
    sgkc_attn_general_kernel<<<(unsigned)(f->B * f->N), SGKC_AG_NT, smem, f->stream>>>(a);
    SGKC_RETURN_IF(cudaGetLastError());
    return launch_out(L, f->stream, out_args(L, f, ctx));
}

/* ------------------------------------------------------------------ */
/* tiled: LN+QKV GEMM, fused MLP/attention per query tile, out GEMM.   */
/* ------------------------------------------------------------------ */

struct tiled_cfg {
    int pcap, hmax, HG, G, ld;
    int mpcap;    /* the MLP pass's padded P (mlp_wg.cuh or mlp_tc.cuh), then pcap = 0; 0: the MLP runs in the attention */
    int am;       /* where the pass runs, attn_mma.cuh's instance (am_insts); -1: attn_tiled(16).cuh */
    size_t smem;
    bool q16;     /* 16-query blocks (attn_tiled16.cuh) */
    size_t smem16;
    bool rows;    /* warps own query rows (attn_rows.cuh) */
    int ks;       /* its key groups */
    size_t smem_rows;
};

/* Whether tuned-tiled runs the relation MLP as a pass of its own on the
 * tensor cores (mlp_wg.cuh or mlp_tc.cuh: mlp_pass), writing the bias for
 * attn_mma.cuh to read, instead of on FFMA inside the attention
 * (attn_rows' shapes keep theirs): wherever its second layer takes the
 * heads (up to 16). With the attention on the tensor cores this is the
 * faster at every P, also where the bias's round trip through memory
 * (8H bytes a pair) outweighs the features' 4P (DESIGN.md has the
 * measurements). */
static bool mlp_pass_pays(const sgkc_layer *L)
{
    return L->cc_major >= 8 && L->H <= 16;
}

/* Whether a 16-bit layer's tuned-tiled runs the pass at attn_rows' shapes
 * too: its pass reads the 16-bit features and its attention is one TF32
 * pass (am_insts16), which beats attn_rows' FFMA MLP on float copies of
 * them at mid and large alike (DESIGN.md). */
static bool h16_pass_everywhere(const sgkc_layer *L)
{
    return L->dtype != SGK_DTYPE_F32 && mlp_pass_pays(L);
}

/* attn_mma.cuh's instances: the padded head dim, the warps of a block as
 * row groups of 16 queries x parts of the head dim, the key tile. One per
 * padded head dim, and at 64 a second of twice the blocks for grids that
 * leave SMs idle (DESIGN.md has the measurements). */
typedef void (*attn_fn)(sgkc_attn_args);
struct am_inst {
    int hdp, wq, wd, bk;
    attn_fn fn;
};
template <bool X3>
struct am_table {
    static constexpr am_inst insts[SGKC_AM_INSTS] = {
        {16, 4, 1, 32, sgkc_attn_mma_kernel<16, 4, 1, 32, 4, X3>},
        {32, 4, 1, 32, sgkc_attn_mma_kernel<32, 4, 1, 32, 4, X3>},
        {64, 4, 1, 32, sgkc_attn_mma_kernel<64, 4, 1, 32, 3, X3>},
        {64, 2, 2, 32, sgkc_attn_mma_kernel<64, 2, 2, 32, 0, X3>},
        {128, 2, 4, 16, sgkc_attn_mma_kernel<128, 2, 4, 16, 0, X3>},
        {256, 2, 4, 16, sgkc_attn_mma_kernel<256, 2, 4, 16, 0, X3>},
        {96, 2, 2, 32, sgkc_attn_mma_kernel<96, 2, 2, 32, 2, X3>},
    };
};
/* The fp32 contract's instances (3xTF32), and a 16-bit layer's, one TF32
 * pass: TF32 keeps more bits than the bf16 or f16 data it computes on, and
 * the 16-bit contract is rel L2 1e-2 (SPEC section 6). */
static const am_inst *const am_insts = am_table<true>::insts;
static const am_inst *const am_insts16 = am_table<false>::insts;
static const am_inst *am_of(const sgkc_layer *L)
{
    return L->dtype == SGK_DTYPE_F32 ? am_insts : am_insts16;
}
static size_t am_smem(int am)
{
    const am_inst &i = am_insts[am];
    return sgkc_am_smem_floats(i.hdp, i.wq, i.wd, i.bk) * sizeof(float);
}
/* The instance for head dim hd: at 64, the one of 32-query blocks where
 * 64-query ones would give fewer than two blocks an SM. */
static int am_pick(const sgkc_layer *L, int64_t B, int64_t N)
{
    const int hd = L->hd;
    if (hd <= 16) return 0;
    if (hd <= 32) return 1;
    if (hd <= 64) return B * ((N + 63) / 64) * L->H < 2 * (int64_t)L->sm_count ? 3 : 2;
    if (hd <= 96) return 6;
    return hd <= 128 ? 4 : 5;
}

/* dm: tuned-tiled-dmma, which is attn_rows with its MLP on DMMA and the
 * projections of gemm_dmma.cuh, nothing else: a shape attn_rows does not
 * take, or a device other than compute capability 9.x, has no plan. */
static bool tiled_plan(const sgkc_layer *L, int64_t B, int64_t N, bool dm, tiled_cfg *c)
{
    if (L->hd > SGKC_AT_DGMAX || L->P > 128 || (dm && L->cc_major != 9))
        return false;
    c->pcap = L->P <= 16 ? 16 : L->P <= 32 ? 32 : L->P <= 64 ? 64 : 128;
    const int fit = SGKC_AT_DGMAX / L->hd;
    const int want = L->H < fit ? L->H : fit;
    c->hmax = want <= 8 ? 8 : 16;
    c->HG = want < c->hmax ? want : c->hmax;
    c->G = (L->H + c->HG - 1) / c->HG;
    const int DG = c->HG * L->hd;
    c->ld = ((DG + 3) & ~3) + 4;
    c->smem = sgkc_at_smem_floats(c->pcap, c->hmax, c->ld) * sizeof(float);
    c->smem16 = sgkc_at16_smem_floats(c->pcap, c->hmax, c->ld) * sizeof(float);
    const int64_t blocks32 = B * ((N + SGKC_AT_BQ - 1) / SGKC_AT_BQ) * c->G;
    /* 16-query blocks only where 32-query ones would leave over half the SMs
     * idle (mid, 64 blocks); large and xl (128 blocks each) are faster with
     * 32-query blocks. */
    c->q16 = 2 * blocks32 <= L->sm_count && c->pcap <= 64 && c->smem16 <= L->smem_optin;
    /* Eight heads of 32 with P <= 32 (mid, large, xl) go to attn_rows.cuh
     * whatever the grid: it is faster than attn_tiled.cuh and
     * attn_tiled16.cuh at each of them, most at xl. */
    c->smem_rows = sgkc_ar_smem_floats(c->pcap, 1, dm) * sizeof(float);
    c->rows = L->H == 8 && L->D == 256 && c->pcap <= 32 && c->smem_rows <= L->smem_optin;
    if (!dm && h16_pass_everywhere(L))
        c->rows = false;
    /* Two key groups a block where the grid gives each block an SM of its
     * own and there are two key tiles to share (mid): twice the warps an
     * SM. Larger grids already hold 16 warps an SM. */
    const int64_t blocks_rows = B * ((N + SGKC_AR_BQ - 1) / SGKC_AR_BQ);
    const size_t smem_ks2 = sgkc_ar_smem_floats(c->pcap, 2, dm) * sizeof(float);
    c->ks = blocks_rows <= L->sm_count && N > SGKC_AR_BK && smem_ks2 <= L->smem_optin ? 2 : 1;
    if (c->ks == 2)
        c->smem_rows = smem_ks2;
    c->mpcap = 0;
    c->am = -1;
    if (dm) /* rows' D = 256 is gemm_dmma.cuh's K, and 3D and D are whole column tiles */
        return c->rows;
    if (!c->rows && mlp_pass_pays(L)) {
        c->mpcap = c->pcap;
        c->pcap = 0;
        c->smem = sgkc_at_smem_floats(0, c->hmax, c->ld) * sizeof(float);
        c->smem16 = sgkc_at16_smem_floats(0, c->hmax, c->ld) * sizeof(float);
        c->q16 = 2 * blocks32 <= L->sm_count && c->smem16 <= L->smem_optin;
    }
    /* Where the MLP runs as a pass, the attention that is left takes the
     * tensor cores too (attn_mma.cuh) wherever its tiles fit: split over
     * keys in clusters as attn_ksplit prices it, it is at least as fast as
     * attn_tiled(16).cuh on small grids as well as full ones (DESIGN.md). */
    if (c->mpcap) {
        const int am = am_pick(L, B, N);
        if (am_smem(am) <= L->smem_optin)
            c->am = am;
    }
    return c->smem <= L->smem_optin || c->rows || c->am >= 0;
}

static int tiled_supports_dm(const sgkc_layer *L, int64_t B, int64_t N, bool dm, sgk_backend_plan *plan)
{
    tiled_cfg c;
    if (!tiled_plan(L, B, N, dm, &c) || N > INT_MAX / 4 || !gemm_fits(L, B * N))
        return 0;
    const int64_t blocks = B * ((N + SGKC_AT16_BQ - 1) / SGKC_AT16_BQ) * c.G;
    if (blocks > INT_MAX)
        return 0;
    sgkc_plan_put(c, plan);
    return 1;
}

static int tiled_supports(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    return tiled_supports_dm(L, B, N, false, plan);
}

/* tuned-tiled-dmma: tiled with attn_rows' relation MLP (mlp_dmma.cuh) and the
 * projections (gemm_dmma.cuh) on DMMA, fp64 products and sums.
 * DMMA m16n8k16 .f64 exists from compute capability 9.0 and has been
 * run on 9.0 only, so other majors do not offer it (tiled_plan). */
static int tiled_dmma_supports(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    return tiled_supports_dm(L, B, N, true, plan);
}

/* The MLP's 2P^2 FLOPs a pair are what DMMA takes off the FFMA pipe; at
 * P <= 16 tiled's MLP, whose weights are staged once per block as
 * constants, is the faster (DESIGN.md). */
static int tiled_dmma_prefer(const sgkc_layer *L, int64_t, int64_t, const sgk_backend_plan *)
{
    return L->P > 16 && !h16_pass_everywhere(L);
}

/* How many blocks of a cluster split the keys of one of `blocks` tiles
 * (attn_tiled.cuh, attn_tiled16.cuh): the count, up to 8 and at most the
 * key tiles, of least cost in waves of per_sm blocks an SM times a
 * block's key tiles plus two for its prologue; then as few as give each
 * block the same number of key tiles. A split is taken only where that
 * cost is at most two thirds of the unsplit one: what the model leaves
 * out (cluster placement, the merge, each block's own MLP weights and Q
 * tile) can outweigh a smaller gain (DESIGN.md). One below
 * compute capability 9.0 (no clusters). */
static int attn_ksplit(const sgkc_layer *L, int64_t blocks, int ktiles, int per_sm)
{
    if (L->cc_major < 9)
        return 1;
    const int64_t slots = (int64_t)L->sm_count * (per_sm > 0 ? per_sm : 1);
    auto cost = [&](int s) { return (blocks * s + slots - 1) / slots * ((ktiles + s - 1) / s + 2); };
    int best = 1;
    for (int s = 2; s <= 8 && s <= ktiles; s++)
        if (cost(s) < cost(best))
            best = s;
    if (3 * cost(best) > 2 * cost(1))
        return 1;
    const int per = (ktiles + best - 1) / best;
    return (ktiles + per - 1) / per;
}

/* kernel over one block for each (batch, query tile, head group), or
 * clusters of a.ks splitting their keys as attn_ksplit picks from the
 * kernel's occupancy (per_sm, at layer creation); spread over the SMs as
 * spread_smem says, since the launch may begin early */
template <typename Kernel>
static cudaError_t split_attn(const sgkc_layer *L, Kernel kernel, sgkc_attn_args a, unsigned blocks, int bk,
                              int per_sm, unsigned nt, size_t smem, cudaStream_t s)
{
    a.ks = attn_ksplit(L, blocks, (a.N + bk - 1) / bk, per_sm);
    const int64_t grid = (int64_t)blocks * a.ks;
    return launch_after(L, kernel, dim3((unsigned)grid), nt, spread_smem(L, smem, grid, per_sm), s,
                        a.ks > 1 ? (unsigned)a.ks : 0u, a);
}

template <int PCAP, int HMAX>
static cudaError_t tiled_attn(const sgkc_layer *L, const sgkc_attn_args &a, unsigned blocks, size_t smem,
                              cudaStream_t s)
{
    return split_attn(L, sgkc_attn_tiled_kernel<PCAP, HMAX>, a, blocks, sgkc_at_bk(PCAP), L->at_per_sm, SGKC_AT_NT,
                      smem, s);
}

template <int PCAP, int KS, bool DM>
static cudaError_t rows_attn(const sgkc_layer *L, const sgkc_attn_args &a, unsigned blocks, size_t smem,
                             cudaStream_t s)
{
    return launch_after(L, sgkc_attn_rows_kernel<PCAP, KS, DM>, dim3(blocks), SGKC_AR_NT * KS, smem, s, 0, a);
}

/* the attn_rows instance for the plan's PCAP and key groups */
template <bool DM>
static cudaError_t rows_dispatch(const sgkc_layer *L, const tiled_cfg &c, const sgkc_attn_args &a, unsigned blocks,
                                 size_t smem, cudaStream_t s)
{
    switch (c.pcap * 10 + c.ks) {
    case 161: return rows_attn<16, 1, DM>(L, a, blocks, smem, s);
    case 162: return rows_attn<16, 2, DM>(L, a, blocks, smem, s);
    case 321: return rows_attn<32, 1, DM>(L, a, blocks, smem, s);
    default: return rows_attn<32, 2, DM>(L, a, blocks, smem, s);
    }
}

template <int PCAP, int HMAX>
static cudaError_t tiled16_attn(const sgkc_layer *L, const sgkc_attn_args &a, unsigned blocks, size_t smem,
                                cudaStream_t s)
{
    return split_attn(L, sgkc_attn_tiled16_kernel<PCAP, HMAX>, a, blocks, SGKC_AT16_BK, L->at16_per_sm,
                      SGKC_AT16_NT, smem, s);
}

/* L's at_per_sm and at16_per_sm, for the instances of c */
template <int PCAP, int HMAX>
static void tiled_occupancy(sgkc_layer *L, const tiled_cfg &c)
{
    int n = 0;
    if (c.smem <= L->smem_optin &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, sgkc_attn_tiled_kernel<PCAP, HMAX>, SGKC_AT_NT, c.smem) ==
            cudaSuccess &&
        n > 0)
        L->at_per_sm = n;
    if constexpr (PCAP <= 64)
        if (c.smem16 <= L->smem_optin &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, sgkc_attn_tiled16_kernel<PCAP, HMAX>, SGKC_AT16_NT,
                                                          c.smem16) == cudaSuccess &&
            n > 0)
            L->at16_per_sm = n;
}

/* mlp_tc.cuh's instances: W1 and W2 split into their TF32 halves once a
 * block (each warp re-splitting its B fragments cost more than the shared
 * memory the halves take), and eight warps a block at P > 64, where a
 * block's weights allow one an SM. */
static constexpr int mlp_warps_of(int pcap)
{
    return pcap > 64 ? 8 : 4;
}
typedef void (*mlp_fn)(sgkc_mlp_args);
template <int PCAP, int HT>
static mlp_fn mlp_inst()
{
    return sgkc_mlp_tc_kernel<PCAP, HT, mlp_warps_of(PCAP), true>;
}
/* the instance for the plan's P and heads */
static mlp_fn mlp_tc_kernel(int mpcap, int H)
{
    switch (mpcap * 10 + (H <= 8 ? 1 : 2)) {
    case 161: return mlp_inst<16, 1>();
    case 162: return mlp_inst<16, 2>();
    case 321: return mlp_inst<32, 1>();
    case 322: return mlp_inst<32, 2>();
    case 641: return mlp_inst<64, 1>();
    case 642: return mlp_inst<64, 2>();
    case 1281: return mlp_inst<128, 1>();
    default: return mlp_inst<128, 2>();
    }
}

/* mlp_wg.cuh's instances (PCAP 32, 64, 128; HT 1, 2), which run only where
 * mlp_wg_device: its kernel exists in the build's sm_90a code alone (it
 * traps elsewhere), which runs on compute capability 9.0 only. */
static const mlp_fn mlp_wg_fns[] = {
    sgkc_mlp_wg_kernel<32, 1>,  sgkc_mlp_wg_kernel<32, 2>,  sgkc_mlp_wg_kernel<64, 1>,
    sgkc_mlp_wg_kernel<64, 2>,  sgkc_mlp_wg_kernel<128, 1>, sgkc_mlp_wg_kernel<128, 2>,
};
static bool mlp_wg_device(const sgkc_layer *L)
{
#if defined(SGKC_HAVE_SM90A)
    return L->cc_major == 9 && L->cc_minor == 0;
#else
    (void)L;
    return false;
#endif
}

/* mlp_h16.cuh's instances for 16-bit layers: PCAP 16, 32, 64, 128 x HT 1, 2,
 * bf16 then f16. */
static const mlp_fn mlp_h16_fns[] = {
    sgkc_mlp_h16_kernel<16, 1, true>,   sgkc_mlp_h16_kernel<16, 2, true>,   sgkc_mlp_h16_kernel<32, 1, true>,
    sgkc_mlp_h16_kernel<32, 2, true>,   sgkc_mlp_h16_kernel<64, 1, true>,   sgkc_mlp_h16_kernel<64, 2, true>,
    sgkc_mlp_h16_kernel<128, 1, true>,  sgkc_mlp_h16_kernel<128, 2, true>,  sgkc_mlp_h16_kernel<16, 1, false>,
    sgkc_mlp_h16_kernel<16, 2, false>,  sgkc_mlp_h16_kernel<32, 1, false>,  sgkc_mlp_h16_kernel<32, 2, false>,
    sgkc_mlp_h16_kernel<64, 1, false>,  sgkc_mlp_h16_kernel<64, 2, false>,  sgkc_mlp_h16_kernel<128, 1, false>,
    sgkc_mlp_h16_kernel<128, 2, false>,
};

/* The MLP pass of a plan: its kernel, threads and shared memory a block,
 * and the pairs a block takes a step (its warps' tiles). mlp_wg.cuh on
 * mlp_wg_device for every PCAP the pass runs at (P > 16: 32, 64, 128) and
 * H <= 16, where its shared memory fits the opt-in limit; its features load
 * as mlp_tc.cuh's do (float4 only where pvec), so alignment and P % 4 do
 * not matter. mlp_tc.cuh otherwise: at compute capability 8.x and 9.x
 * other than 9.0, in builds without sm_90a, and at PCAP 16. 16-bit layers
 * read their features as they are, on mlp_h16.cuh (DESIGN.md says why
 * it has no warpgroup form). */
struct mlp_pass {
    mlp_fn fn;
    unsigned nt;
    size_t smem;
    int64_t pairs;
};
static mlp_pass mlp_pass_of(const sgkc_layer *L, const tiled_cfg &c)
{
    const int ht = L->H <= 8 ? 1 : 2;
    if (L->dtype != SGK_DTYPE_F32) { /* the features as they are, 2 bytes each */
        const int pi = c.mpcap == 16 ? 0 : c.mpcap == 32 ? 1 : c.mpcap == 64 ? 2 : 3;
        const int i = (L->dtype == SGK_DTYPE_BF16 ? 0 : 8) + 2 * pi + (ht - 1);
        const int nw = sgkc_mh_nw(c.mpcap);
        return {mlp_h16_fns[i], 32u * nw, sgkc_mh_smem_floats(c.mpcap, ht) * sizeof(float), 16 * nw};
    }
    const size_t wg_smem = sgkc_mw_smem_floats(c.mpcap, ht) * sizeof(float);
    if (mlp_wg_device(L) && (c.mpcap == 32 || c.mpcap == 64 || c.mpcap == 128) && L->H <= 16 &&
        wg_smem <= L->smem_optin) {
        const mlp_fn fn = mlp_wg_fns[(c.mpcap == 32 ? 0 : c.mpcap == 64 ? 2 : 4) + (ht - 1)];
        return {fn, SGKC_MW_NT, wg_smem, 2 * 64}; /* two warpgroups of 64 pairs */
    }
    const int nw = mlp_warps_of(c.mpcap);
    return {mlp_tc_kernel(c.mpcap, L->H), (unsigned)(32 * nw),
            sgkc_mt_smem_floats(c.mpcap, ht, true) * sizeof(float), 16 * (int64_t)nw};
}


static void tiled_occupancy_of(sgkc_layer *L)
{
    tiled_cfg c;
    L->at_per_sm = L->at16_per_sm = L->mt_per_sm = 1;
    for (int i = 0; i < SGKC_AM_INSTS; i++)
        L->am_per_sm[i] = 1;
    if (!tiled_plan(L, 1, 1, false, &c))
        return;
    /* The pass and attn_mma.cuh's instances wherever a shape of this layer
     * may run them, whatever the plan at (1, 1) took: their occupancy
     * depends on the layer alone, and a rule that sends some shapes to the
     * pass and others not must still find it. */
    tiled_cfg pc = c;
    pc.mpcap = c.mpcap ? c.mpcap : c.pcap; /* tiled_plan's padded P either way */
    const bool pass = mlp_pass_pays(L);
    int n = 0;
    const mlp_pass mp = pass ? mlp_pass_of(L, pc) : mlp_pass{};
    if (pass &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)mp.fn, (int)mp.nt, mp.smem) == cudaSuccess &&
        n > 0)
        L->mt_per_sm = n;
    /* attn_mma.cuh's instances */
    for (int i = 0; pass && i < SGKC_AM_INSTS; i++)
        if (am_smem(i) <= L->smem_optin &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)am_of(L)[i].fn,
                                                          32 * am_of(L)[i].wq * am_of(L)[i].wd,
                                                          am_smem(i)) == cudaSuccess &&
            n > 0)
            L->am_per_sm[i] = n;
    switch (c.pcap * 100 + c.hmax) {
    case 8: tiled_occupancy<0, 8>(L, c); break;
    case 16: tiled_occupancy<0, 16>(L, c); break;
    case 1608: tiled_occupancy<16, 8>(L, c); break;
    case 1616: tiled_occupancy<16, 16>(L, c); break;
    case 3208: tiled_occupancy<32, 8>(L, c); break;
    case 3216: tiled_occupancy<32, 16>(L, c); break;
    case 6408: tiled_occupancy<64, 8>(L, c); break;
    case 6416: tiled_occupancy<64, 16>(L, c); break;
    case 12808: tiled_occupancy<128, 8>(L, c); break;
    default: tiled_occupancy<128, 16>(L, c); break;
    }
    (void)cudaGetLastError(); /* a query that failed leaves 1 */
}

/* The workspace: qkv and ctx, then the MLP pass's bias (B, H, N*N) where
 * the plan runs one. */
static size_t tiled_workspace(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *plan)
{
    const tiled_cfg c = sgkc_plan_get<tiled_cfg>(plan);
    const size_t bias = c.mpcap ? (size_t)B * (size_t)N * (size_t)N * (size_t)L->H * sizeof(float) : 0;
    return ws_qkv_ctx(L, B, N, plan) + bias;
}

/* The MLP pass into bias (mlp_pass_of's kernel): a grid of what fits on
 * the SMs at once (its warps or warpgroups stride over the pairs), launched
 * early behind the Q/K/V GEMM. */
static cudaError_t launch_mlp(const sgkc_layer *L, const tiled_cfg &c, const sgkc_fwd *f, float *bias)
{
    sgkc_mlp_args m;
    m.pair = f->pair;
    m.pair16 = nullptr;
    m.w1 = L->w1;
    m.b1 = L->b1;
    m.w2t = L->w2t;
    m.b2 = L->b2;
    m.bias = bias;
    m.mask = f->mask;
    m.mask_u8 = f->mask_u8;
    m.M = f->B * f->N * f->N;
    m.NN = f->N * f->N;
    m.P = L->P;
    m.H = L->H;
    m.pair16 = (const uint16_t *)f->pair16;
    m.pvec = f->pair16 ? L->P % 4 == 0 && ((uintptr_t)f->pair16 & 7u) == 0 : L->P % 4 == 0 && sgkc_aligned16(f->pair);
    const mlp_pass mp = mlp_pass_of(L, c);
    int64_t grid = (int64_t)L->sm_count * L->mt_per_sm;
    if (grid > (m.M + mp.pairs - 1) / mp.pairs)
        grid = (m.M + mp.pairs - 1) / mp.pairs;
    const size_t smem = spread_smem(L, mp.smem, grid, L->mt_per_sm);
    return launch_after(L, mp.fn, dim3((unsigned)grid), mp.nt, smem, f->stream, 0, m);
}

static cudaError_t tiled_launch_dm(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f, bool dm)
{
    const tiled_cfg c = sgkc_plan_get<tiled_cfg>(plan);
    float *qkv = ws_base(f);
    float *ctx = qkv + (size_t)f->B * f->N * 3 * L->D;
    const sgkc_gemm_args gq = qkv_args(L, f, qkv, ctx), go = out_args16(L, f, ctx);
    SGKC_RETURN_IF(dm && !sgkc_tc_project_wg(L, gq) ? (launch_dgemm<true, false>)(L, f->stream, gq, dgemm_grid(L, gq, true))
                                                  : launch_qkv(L, f->stream, gq));
    sgkc_attn_args a;
    fill_attn_args(a, L, f, qkv, ctx);
    a.HG = c.HG;
    a.G = c.G;
    a.pvec = L->P % 4 == 0 && sgkc_aligned16(f->pair);
    a.bias = nullptr;
    if (c.mpcap) {
        float *bias = ctx + (size_t)f->B * f->N * L->D;
        SGKC_RETURN_IF(launch_mlp(L, c, f, bias));
        a.bias = bias;
    }
    a.qvec = L->D % 4 == 0;
    a.ks = 1;
    cudaError_t e;
    if (c.rows) {
        a.qtiles = (a.N + SGKC_AR_BQ - 1) / SGKC_AR_BQ;
        const unsigned blocks = (unsigned)(f->B * a.qtiles);
        const size_t smem = spread_smem(L, c.smem_rows, blocks, 2 / c.ks);
        e = dm ? rows_dispatch<true>(L, c, a, blocks, smem, f->stream)
               : rows_dispatch<false>(L, c, a, blocks, smem, f->stream);
    } else if (c.am >= 0) {
        const am_inst &i = am_of(L)[c.am];
        a.qtiles = (a.N + 16 * i.wq - 1) / (16 * i.wq);
        const unsigned blocks = (unsigned)(f->B * a.qtiles * L->H);
        e = split_attn(L, i.fn, a, blocks, i.bk, L->am_per_sm[c.am], 32u * i.wq * i.wd, am_smem(c.am), f->stream);
    } else if (c.q16) {
        a.qtiles = (a.N + SGKC_AT16_BQ - 1) / SGKC_AT16_BQ;
        const unsigned blocks = (unsigned)(f->B * a.qtiles * a.G);
        switch (c.pcap * 100 + c.hmax) {
        case 8: e = tiled16_attn<0, 8>(L, a, blocks, c.smem16, f->stream); break;
        case 16: e = tiled16_attn<0, 16>(L, a, blocks, c.smem16, f->stream); break;
        case 1608: e = tiled16_attn<16, 8>(L, a, blocks, c.smem16, f->stream); break;
        case 1616: e = tiled16_attn<16, 16>(L, a, blocks, c.smem16, f->stream); break;
        case 3208: e = tiled16_attn<32, 8>(L, a, blocks, c.smem16, f->stream); break;
        case 3216: e = tiled16_attn<32, 16>(L, a, blocks, c.smem16, f->stream); break;
        case 6408: e = tiled16_attn<64, 8>(L, a, blocks, c.smem16, f->stream); break;
        default: e = tiled16_attn<64, 16>(L, a, blocks, c.smem16, f->stream); break;
        }
    } else {
        a.qtiles = (a.N + SGKC_AT_BQ - 1) / SGKC_AT_BQ;
        const unsigned blocks = (unsigned)(f->B * a.qtiles * a.G);
        switch (c.pcap * 100 + c.hmax) {
        case 8: e = tiled_attn<0, 8>(L, a, blocks, c.smem, f->stream); break;
        case 16: e = tiled_attn<0, 16>(L, a, blocks, c.smem, f->stream); break;
        case 1608: e = tiled_attn<16, 8>(L, a, blocks, c.smem, f->stream); break;
        case 1616: e = tiled_attn<16, 16>(L, a, blocks, c.smem, f->stream); break;
        case 3208: e = tiled_attn<32, 8>(L, a, blocks, c.smem, f->stream); break;
        case 3216: e = tiled_attn<32, 16>(L, a, blocks, c.smem, f->stream); break;
        case 6408: e = tiled_attn<64, 8>(L, a, blocks, c.smem, f->stream); break;
        case 6416: e = tiled_attn<64, 16>(L, a, blocks, c.smem, f->stream); break;
        case 12808: e = tiled_attn<128, 8>(L, a, blocks, c.smem, f->stream); break;
        default: e = tiled_attn<128, 16>(L, a, blocks, c.smem, f->stream); break;
        }
    }
    SGKC_RETURN_IF(e);
    return dm ? launch_out_dmma(L, f->stream, go) : launch_out(L, f->stream, go);
}

/* A 16-bit layer's output projection on the tensor-core GEMMs rounds out
 * itself (tuned-tiled-dmma's own GEMM does not). */
static int tiled_out16(const sgkc_layer *L, const sgk_backend_plan *, const sgkc_fwd *f)
{
    float *ctx = ws_base(f) + (size_t)f->B * f->N * 3 * L->D;
    return L->dtype != SGK_DTYPE_F32 && out_choice(L, out_args(L, f, ctx)) == OUT_TC;
}

/* A 16-bit layer's pass reads its pair features as they are; nothing else
 * of such a plan reads them. */
static int tiled_pair16(const sgkc_layer *L, const sgk_backend_plan *plan)
{
    return L->dtype != SGK_DTYPE_F32 && sgkc_plan_get<tiled_cfg>(plan).mpcap != 0;
}

static cudaError_t tiled_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    return tiled_launch_dm(L, plan, f, false);
}

static cudaError_t tiled_dmma_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    return tiled_launch_dm(L, plan, f, true);
}

/* ------------------------------------------------------------------ */
/* tuned-fused-small: one cluster launch per call (Hopper).                  */
/* ------------------------------------------------------------------ */

struct fused_cfg {
    int Ch, Cr, rows_r, prow, lmsplit, pcap, hmax;
    size_t smem; /* what a launch asks for: over half the SM, one block an SM */
};

/* Head groups of a cluster (the most, up to 8, that divide H with whole
 * 4-vectors of columns), 0 if none; and the MLP's padded widths. These
 * depend on the layer only, so its weight images are packed once. */
static int fused_heads(int D, int H)
{
    for (int ch = 8; ch >= 1; ch--)
        if (H % ch == 0 && (D / ch) % 4 == 0)
            return ch;
    return 0;
}
static int fused_pcap(int P)
{
    return P <= 16 ? 16 : P <= 32 ? 32 : 64;
}
static int fused_hmax(int H)
{
    return H <= 8 ? 8 : 16;
}

static bool fused_plan(const sgkc_layer *L, int64_t B, int64_t N, fused_cfg *c)
{
    /* fs_img exists for exactly the layers tuned-fused-small can take at some N
     * (sgkc_layer_pack: Hopper, P <= 64, H <= 16, a head split) */
    if (N > 128 || !L->fs_img)
        return false;
    c->Ch = fused_heads(L->D, L->H);
    /* More row slices while the grid stays within one block an SM (the
     * shared-memory request below makes it so), in clusters of up to 8
     * blocks, or 16 where every batch entry's cluster of 16 runs at once:
     * the chain of phases is the time, and each block then holds fewer
     * rows; a second wave would run the whole chain again. */
    const int cmax = B <= L->clusters16 ? 16 : 8;
    c->Cr = 1;
    while (c->Ch * c->Cr * 2 <= cmax && B * c->Ch * c->Cr * 2 <= (int64_t)L->sm_count && N >= 8 * c->Cr)
        c->Cr *= 2;
    const int C = c->Ch * c->Cr;
    c->rows_r = (int)((N + c->Cr - 1) / c->Cr);
    c->prow = (int)((N + C - 1) / C);
    c->lmsplit = sgkc_fs_lmsplit(c->prow, (int)N, L->P);
    c->pcap = fused_pcap(L->P);
    c->hmax = fused_hmax(L->H);
    const sgkc_fs_layout lay = sgkc_fs_plan((int)N, L->D, L->H, L->P, c->Ch, c->rows_r, c->pcap, c->hmax);
    const size_t need = lay.total * sizeof(float);
    /* One block an SM, as the cluster plan assumes (fused_clusters16): a
     * block small enough to pair up (64 registers, 46 KB at seed) lets the
     * scheduler put two blocks of a cluster, or this call's blocks and the
     * next call's waiting ones, on one SM. */
    c->smem = smem_for_per_sm(L, need, 1);
    return need <= L->smem_optin;
}

static int fused_supports(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan)
{
    fused_cfg c;
    if (!fused_plan(L, B, N, &c))
        return 0;
    sgkc_plan_put(c, plan);
    return 1;
}

/* Short graphs with little enough work that each block's chain of
 * dependent phases (FFMA at runtime sizes, its attention a chain over the
 * keys) is shorter than tuned-tiled's five launches; at more keys or more
 * work the tiled path is the faster (DESIGN.md, tuned-fused-small, where
 * the line was measured). */
static int fused_prefer(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *)
{
    const double rows = (double)B * (double)N, pairs = rows * (double)N;
    const double flop = 8.0 * rows * L->D * L->D +
                        pairs * (4.0 * L->D + 2.0 * L->P * L->P + 2.0 * L->P * L->H);
    return N <= 32 && flop <= 1.4e8;
}

static size_t fused_workspace(const sgkc_layer *, int64_t, int64_t, const sgk_backend_plan *)
{
    return 0;
}

/* A 16-bit layer's buffers are read and written as they are: the widened
 * copies and the two conversion launches would be most of such a call */
static int fused_io16(const sgkc_layer *, const sgk_backend_plan *)
{
    return 1;
}

template <int PCAP, int HMAX, int... SHAPE>
static cudaError_t fused_go(const sgkc_layer *L, const sgkc_fused_args &a, unsigned blocks, unsigned cluster,
                            size_t smem, cudaStream_t s)
{
    return launch_after(L, sgkc_fused_small_kernel<PCAP, HMAX, SHAPE...>, dim3(blocks), SGKC_FS_NT, smem, s, cluster,
                        a);
}

static cudaError_t fused_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f)
{
    const fused_cfg c = sgkc_plan_get<fused_cfg>(plan);
    sgkc_fused_args a;
    fill_input_args(a, L, f);
    a.nodes = f->nodes;
    a.img = L->fs_img;
    a.wo = L->fs_wo;
    a.img_floats = L->fs_img_floats;
    a.rw = L->fs_rw;
    a.rwo = L->fs_rwo;
    a.out = f->out;
    a.eps = L->eps;
    a.scale = 1.0f / sqrtf((float)L->hd);
    a.Ch = c.Ch;
    a.Cr = c.Cr;
    a.rows_r = c.rows_r;
    a.prow = c.prow;
    a.lmsplit = c.lmsplit;
    a.nodes16 = (const uint16_t *)f->nodes16;
    a.pair16 = (const uint16_t *)f->pair16;
    a.out16 = (uint16_t *)f->out16;
    a.t16 = f->nodes16 ? (L->dtype == SGK_DTYPE_F16 ? 2 : 1) : 0;
    if (a.t16) {
        a.pvec = L->P % 4 == 0 && ((uintptr_t)f->pair16 & 7u) == 0;
        a.nvec = L->D % 8 == 0 && ((uintptr_t)f->nodes16 & 15u) == 0;
    } else {
        a.pvec = L->P % 4 == 0 && sgkc_aligned16(f->pair);
        a.nvec = sgkc_aligned16(f->nodes);
    }
    const unsigned C = (unsigned)(c.Ch * c.Cr);
    const unsigned blocks = (unsigned)(f->B * C);
    /* the seed preset's shape, compiled in (fused_small.cuh) */
    if (L->fs_rw && a.N == 24 && c.Ch == 4 && (c.Cr == 4 || c.Cr == 2))
        return c.Cr == 4 ? fused_go<16, 8, 24, 96, 4, 16, 4, 4>(L, a, blocks, C, c.smem, f->stream)
                         : fused_go<16, 8, 24, 96, 4, 16, 4, 2>(L, a, blocks, C, c.smem, f->stream);
    switch (c.pcap * 100 + c.hmax) {
    case 1608: return fused_go<16, 8>(L, a, blocks, C, c.smem, f->stream);
    case 1616: return fused_go<16, 16>(L, a, blocks, C, c.smem, f->stream);
    case 3208: return fused_go<32, 8>(L, a, blocks, C, c.smem, f->stream);
    case 3216: return fused_go<32, 16>(L, a, blocks, C, c.smem, f->stream);
    case 6408: return fused_go<64, 8>(L, a, blocks, C, c.smem, f->stream);
    default: return fused_go<64, 16>(L, a, blocks, C, c.smem, f->stream);
    }
}

/* ------------------------------------------------------------------ */

const sgkc_variant sgkc_variants[] = {
    {"tuned-fused-small", fused_supports, fused_prefer, fused_workspace, fused_launch, nullptr, nullptr, fused_io16},
    {"tuned-tiled-dmma", tiled_dmma_supports, tiled_dmma_prefer, ws_qkv_ctx, tiled_dmma_launch},
    {"tuned-tiled", tiled_supports, nullptr, tiled_workspace, tiled_launch, tiled_pair16, tiled_out16},
    {"tuned-tc", sgkc_tc_plan, nullptr, sgkc_tc_workspace, sgkc_tc_launch, nullptr, sgkc_tc_out16},
    {"tuned-general", general_supports, nullptr, ws_qkv_ctx, general_launch},
    {"small", sgkc_generic_small_plan, nullptr, sgkc_generic_workspace, sgkc_generic_launch},
    {"tiled", sgkc_generic_tiled_plan, nullptr, sgkc_generic_workspace, sgkc_generic_launch},
};
const int sgkc_variant_count = (int)(sizeof sgkc_variants / sizeof sgkc_variants[0]);

/* Every tuned-fused-small instance: their shared memory limit and their
 * cluster size are raised together. */
static const void *const fused_fns[] = {
    (const void *)sgkc_fused_small_kernel<16, 8>, (const void *)sgkc_fused_small_kernel<16, 16>,
    (const void *)sgkc_fused_small_kernel<32, 8>, (const void *)sgkc_fused_small_kernel<32, 16>,
    (const void *)sgkc_fused_small_kernel<64, 8>, (const void *)sgkc_fused_small_kernel<64, 16>,
    (const void *)sgkc_fused_small_kernel<16, 8, 24, 96, 4, 16, 4, 2>,
    (const void *)sgkc_fused_small_kernel<16, 8, 24, 96, 4, 16, 4, 4>,
};

/* One attribute, one value, on each of n kernels; the first failure. */
static cudaError_t set_func_attr(const void *const *fns, size_t n, cudaFuncAttribute attr, int value)
{
    for (size_t i = 0; i < n; i++)
        SGKC_RETURN_IF(cudaFuncSetAttribute(fns[i], attr, value));
    return cudaSuccess;
}
#define SGKC_NFNS(fns) (sizeof fns / sizeof fns[0])

/* Lets every kernel that may take more than 48 KB of dynamic shared memory
 * use up to the device's opt-in limit. */
static cudaError_t raise_smem_limits(int limit)
{
    const void *fns[] = {
        (const void *)sgkc_attn_general_kernel,
        (const void *)sgkc_attn_tiled_kernel<0, 8>,   (const void *)sgkc_attn_tiled_kernel<0, 16>,
        (const void *)sgkc_attn_tiled16_kernel<0, 8>, (const void *)sgkc_attn_tiled16_kernel<0, 16>,
        (const void *)mlp_inst<16, 1>(),  (const void *)mlp_inst<16, 2>(),
        (const void *)mlp_inst<32, 1>(),  (const void *)mlp_inst<32, 2>(),
        (const void *)mlp_inst<64, 1>(),  (const void *)mlp_inst<64, 2>(),
        (const void *)mlp_inst<128, 1>(), (const void *)mlp_inst<128, 2>(),
        (const void *)sgkc_attn_tiled_kernel<16, 8>,  (const void *)sgkc_attn_tiled_kernel<16, 16>,
        (const void *)sgkc_attn_tiled_kernel<32, 8>,  (const void *)sgkc_attn_tiled_kernel<32, 16>,
        (const void *)sgkc_attn_tiled_kernel<64, 8>,  (const void *)sgkc_attn_tiled_kernel<64, 16>,
        (const void *)sgkc_attn_tiled_kernel<128, 8>, (const void *)sgkc_attn_tiled_kernel<128, 16>,
        (const void *)sgkc_attn_tiled16_kernel<16, 8>, (const void *)sgkc_attn_tiled16_kernel<16, 16>,
        (const void *)sgkc_attn_tiled16_kernel<32, 8>, (const void *)sgkc_attn_tiled16_kernel<32, 16>,
        (const void *)sgkc_attn_tiled16_kernel<64, 8>, (const void *)sgkc_attn_tiled16_kernel<64, 16>,
        (const void *)sgkc_attn_rows_kernel<16, 1, false>, (const void *)sgkc_attn_rows_kernel<32, 1, false>,
        (const void *)sgkc_attn_rows_kernel<16, 2, false>, (const void *)sgkc_attn_rows_kernel<32, 2, false>,
        (const void *)sgkc_attn_rows_kernel<16, 1, true>,  (const void *)sgkc_attn_rows_kernel<32, 1, true>,
        (const void *)sgkc_attn_rows_kernel<16, 2, true>,  (const void *)sgkc_attn_rows_kernel<32, 2, true>,
        (const void *)sgkc_gemm_panel_kernel<SGKC_GP_QKV>, (const void *)sgkc_gemm_panel_kernel<SGKC_GP_QKVW>,
        (const void *)sgkc_gemm_panel_kernel<SGKC_GP_OUT>, (const void *)sgkc_gemm_panel_kernel<SGKC_GP_OUT2>,
        (const void *)sgkc_gemm_dmma_kernel<true, false>, (const void *)sgkc_gemm_dmma_kernel<false, true>,
    };
    SGKC_RETURN_IF(set_func_attr(fns, SGKC_NFNS(fns), cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    SGKC_RETURN_IF(set_func_attr(fused_fns, SGKC_NFNS(fused_fns), cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    for (int k = 0; k < SGKC_AM_INSTS; k++) {
        SGKC_RETURN_IF(cudaFuncSetAttribute((const void *)am_insts[k].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
        SGKC_RETURN_IF(cudaFuncSetAttribute((const void *)am_insts16[k].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    }
    return sgkc_generic_prepare(limit);
}

/* The same for mlp_wg.cuh's instances, where the device runs them
 * (mlp_wg_device). */
static cudaError_t mlp_wg_prepare(const sgkc_layer *L)
{
    if (!mlp_wg_device(L))
        return cudaSuccess;
    for (mlp_fn fn : mlp_wg_fns)
        SGKC_RETURN_IF(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)L->smem_optin));
    return cudaSuccess;
}

/* mlp_h16.cuh's instances take over 48 KB at PCAP 128. */
static cudaError_t mlp_h16_prepare(const sgkc_layer *L)
{
    if (L->dtype == SGK_DTYPE_F32)
        return cudaSuccess;
    for (mlp_fn fn : mlp_h16_fns)
        SGKC_RETURN_IF(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)L->smem_optin));
    return cudaSuccess;
}

/* How many clusters of 16 tuned-fused-small blocks the device runs at once (one
 * block an SM: the H200's GPCs hold 7), after allowing every tuned-fused-small
 * instance clusters past the portable 8. 0 before Hopper, or where the
 * device refuses: the plan then keeps to clusters of 8. */
static int fused_clusters16(const sgkc_layer *L)
{
    if (L->cc_major < 9)
        return 0;
    if (set_func_attr(fused_fns, SGKC_NFNS(fused_fns), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(16);
    cfg.blockDim = dim3(SGKC_FS_NT);
    cfg.dynamicSmemBytes = L->smem_optin; /* one block an SM, whatever N */
    cudaLaunchAttribute attr = cluster_attr(16);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, (const void *)sgkc_fused_small_kernel<16, 8>, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Head group hg's images for tuned-fused-small: img is the kernel's shared
 * memory from lay.gb to lay.mb (gamma, beta, W1 at row stride pcap + 4,
 * b1, W2 for every head, b2, the Q/K/V columns of the group's heads at
 * row stride ldw; zero padded), wo the group's columns of Wo^T at row
 * stride ldw. One bulk copy each brings them in; the compiled-in shapes
 * copy the image up to the Q/K/V columns and take those and wo from
 * their thread-order copies instead (sgkc_fs_rw_pack). */
static void fused_pack_images(float *img, float *wo_img, const sgk_layer_desc *desc, const sgkc_fs_layout &lay,
                              int Ch, int hg)
{
    const int D = (int)desc->dim, H = (int)desc->heads, P = (int)desc->pair_dim;
    const int hs = D / Ch, pcap = fused_pcap(P), hmax = fused_hmax(H);
    const float *w[3] = {(const float *)desc->wq, (const float *)desc->wk, (const float *)desc->wv};
    const float *wo = (const float *)desc->wo, *w1 = (const float *)desc->w1;
    const float *b1 = (const float *)desc->b1, *w2 = (const float *)desc->w2, *b2 = (const float *)desc->b2;
    memcpy(img, desc->ln_gamma, (size_t)D * sizeof(float));
    memcpy(img + D, desc->ln_beta, (size_t)D * sizeof(float));
    float *wc = img + (lay.wc - lay.gb), *W1 = img + (lay.w1 - lay.gb), *B1 = img + (lay.b1 - lay.gb);
    float *W2 = img + (lay.w2 - lay.gb), *B2 = img + (lay.b2 - lay.gb);
    for (int k = 0; k < D; k++)
        for (int c = 0; c < 3 * hs; c++)
            wc[(size_t)k * lay.ldw + c] = w[c / hs][(size_t)(hg * hs + c % hs) * D + k];
    for (int p = 0; p < P; p++)
        for (int r = 0; r < P; r++)
            W1[(size_t)p * (pcap + 4) + r] = w1[(size_t)p * P + r];
    memcpy(B1, b1, (size_t)P * sizeof(float));
    for (int p = 0; p < P; p++)
        for (int hh = 0; hh < H; hh++)
            W2[(size_t)p * hmax + hh] = w2[(size_t)hh * P + p];
    memcpy(B2, b2, (size_t)H * sizeof(float));
    for (int k = 0; k < D; k++)
        for (int c = 0; c < hs; c++)
            wo_img[(size_t)k * lay.ldw + c] = wo[(size_t)(hg * hs + c) * D + k];
}

/* The layer shape (D, H, P, head groups) compiled into tuned-fused-small's seed
 * instances, which take their Q/K/V and Wo slices in thread order. */
static bool fused_seed_layer(int D, int H, int P, int Ch)
{
    return D == 96 && H == 4 && P == 16 && Ch == 4;
}

static size_t up64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Where each packed array sits in a layer's device block, in floats, from
 * the layer's shape and device alone: packing at creation and packing new
 * weights follow the same layout, so no device address moves. */
struct pack_layout {
    int Ch;    /* tuned-fused-small's head groups, 0 where it has no images */
    bool seed; /* and its compiled-in shape's thread-order copies */
    sgkc_fs_layout lay;
    sgk_packed gen;
    sgk_gen_packed kern;
    size_t img, wo_img, rw, rwo; /* floats of a head group's images */
    size_t o_gamma, o_beta, o_qkv, o_wo, o_w1, o_b1, o_w2, o_b2, o_gen, o_kern, o_img, o_woimg, o_rw, o_rwo;
    size_t total;
};

static pack_layout layout_of(const sgkc_layer *L)
{
    pack_layout p;
    memset(&p, 0, sizeof p);
    const int D = L->D, H = L->H, P = L->P;
    const size_t d = (size_t)D;
    p.o_gamma = 0;
    p.o_beta = p.o_gamma + up64(d);
    p.o_qkv = p.o_beta + up64(d);
    p.o_wo = p.o_qkv + up64(3 * d * d);
    p.o_w1 = p.o_wo + up64(d * d);
    p.o_b1 = p.o_w1 + up64((size_t)P * P);
    p.o_w2 = p.o_b1 + up64(P);
    p.o_b2 = p.o_w2 + up64((size_t)P * H);
    p.o_gen = p.o_b2 + up64(H);
    p.gen = sgk_packed_layout(D, H, P);
    /* tuned-fused-small's images: only on Hopper and for layers it can take at
     * some N (its shared memory at N = 1 is the least it needs) */
    int Ch = L->cc_major >= 9 && P <= 64 && H <= 16 && D % 4 == 0 ? fused_heads(D, H) : 0;
    p.lay = sgkc_fs_plan(1, D, H, P, Ch ? Ch : 1, 1, fused_pcap(P), fused_hmax(H));
    if (p.lay.total * sizeof(float) > L->smem_optin)
        Ch = 0;
    p.Ch = Ch;
    p.img = Ch ? p.lay.mb - p.lay.gb : 0;
    p.wo_img = Ch ? d * p.lay.ldw : 0;
    p.kern = sgkc_generic_layout(D, H, P);
    p.o_kern = p.o_gen + up64(p.gen.total);
    p.o_img = p.o_kern + up64(p.kern.total);
    p.o_woimg = p.o_img + up64(Ch * p.img);
    p.seed = Ch && fused_seed_layer(D, H, P, Ch);
    p.rw = p.seed ? d * 3 * (D / Ch) : 0; /* a head group's */
    p.rwo = p.seed ? d * (D / Ch) : 0;
    p.o_rw = p.o_woimg + up64(Ch * p.wo_img);
    p.o_rwo = p.o_rw + up64(Ch * p.rw);
    p.total = p.o_rwo + up64(Ch * p.rwo);
    return p;
}

/* desc's host weights (PyTorch layout, F32) into h, p.total floats. */
static void pack_host(const pack_layout &p, const sgk_layer_desc *desc, float *h)
{
    const int D = (int)desc->dim, H = (int)desc->heads, P = (int)desc->pair_dim;
    const float *wq = (const float *)desc->wq, *wk = (const float *)desc->wk;
    const float *wv = (const float *)desc->wv, *wo = (const float *)desc->wo;
    const float *w2 = (const float *)desc->w2;
    const size_t d = (size_t)D;
    memset(h, 0, p.total * sizeof(float));
    memcpy(h + p.o_gamma, desc->ln_gamma, d * sizeof(float));
    memcpy(h + p.o_beta, desc->ln_beta, d * sizeof(float));
    for (size_t n = 0; n < d; n++)
        for (size_t k = 0; k < d; k++) {
            h[p.o_qkv + k * 3 * d + n] = wq[n * d + k];
            h[p.o_qkv + k * 3 * d + d + n] = wk[n * d + k];
            h[p.o_qkv + k * 3 * d + 2 * d + n] = wv[n * d + k];
            h[p.o_wo + k * d + n] = wo[n * d + k];
        }
    memcpy(h + p.o_w1, desc->w1, (size_t)P * P * sizeof(float));
    memcpy(h + p.o_b1, desc->b1, (size_t)P * sizeof(float));
    for (int j = 0; j < P; j++)
        for (int hh = 0; hh < H; hh++)
            h[p.o_w2 + (size_t)j * H + hh] = w2[(size_t)hh * P + j];
    memcpy(h + p.o_b2, desc->b2, (size_t)H * sizeof(float));
    sgk_pack_weights(desc, h + p.o_gen);
    sgk_gen_pack(desc, &p.kern, h + p.o_kern);
    for (int hg = 0; hg < p.Ch; hg++) {
        float *gi = h + p.o_img + hg * p.img, *go = h + p.o_woimg + hg * p.wo_img;
        fused_pack_images(gi, go, desc, p.lay, p.Ch, hg);
        if (p.seed) {
            sgkc_fs_rw_pack(h + p.o_rw + hg * p.rw, gi + (p.lay.wc - p.lay.gb), p.lay.ldw, D, 3 * (D / p.Ch));
            sgkc_fs_rw_pack(h + p.o_rwo + hg * p.rwo, go, p.lay.ldw, D, D / p.Ch);
        }
    }
}

static void pack_fn(const sgk_layer_desc *desc, float *dst, void *user)
{
    pack_host(*(const pack_layout *)user, desc, dst);
}

/* The repack map on the device after the weights: the runs, then first[r],
 * the floats the runs before r write (first[count]: all of them), which
 * the gather's threads search for their run. */
static size_t map_table_bytes(const sgk_repack_map &m)
{
    return m.count * sizeof(sgk_repack_run) + (m.count + 1) * sizeof(int64_t);
}

static void map_table_fill(const sgk_repack_map &m, unsigned char *t)
{
    memcpy(t, m.runs, m.count * sizeof(sgk_repack_run));
    int64_t *first = (int64_t *)(t + m.count * sizeof(sgk_repack_run));
    first[0] = 0;
    for (size_t r = 0; r < m.count; r++)
        first[r + 1] = first[r] + m.runs[r].len;
}

/* desc's weights packed as p lays them out, in host memory the caller
 * frees; NULL when the allocation fails (or is made to fail). */
static float *packed_on_host(const pack_layout &p, const sgk_layer_desc *desc, int (*alloc_fail)(void))
{
    if (alloc_fail && alloc_fail())
        return NULL;
    float *h = (float *)malloc(p.total * sizeof(float));
    if (h)
        pack_host(p, desc, h);
    return h;
}

/* sgkc_layer_pack on float weights (a 16-bit layer's widened), for a
 * layer of that dtype. */
static cudaError_t pack_float(sgkc_layer *L, int device, const sgk_layer_desc *desc, sgk_dtype dtype,
                              int (*alloc_fail)(void))
{
    memset(L, 0, sizeof *L);
    L->device = device;
    L->dtype = dtype; /* before the occupancy queries: a 16-bit layer's MLP pass is mlp_h16.cuh's */
    L->D = (int)desc->dim;
    L->H = (int)desc->heads;
    L->P = (int)desc->pair_dim;
    L->hd = L->D / L->H;
    L->eps = desc->eps;

    cudaDeviceProp prop;
    SGKC_RETURN_IF(cudaGetDeviceProperties(&prop, device));
    L->sm_count = prop.multiProcessorCount;
    L->cc_major = prop.major;
    L->cc_minor = prop.minor;
    L->smem_optin = prop.sharedMemPerBlockOptin;
    L->smem_sm = prop.sharedMemPerMultiprocessor;
    L->smem_rsv = prop.reservedSharedMemPerBlock;
    SGKC_RETURN_IF(raise_smem_limits((int)L->smem_optin));
    SGKC_RETURN_IF(mlp_wg_prepare(L));
    SGKC_RETURN_IF(mlp_h16_prepare(L));
    SGKC_RETURN_IF(sgkc_tc_prepare(L));
    L->clusters16 = fused_clusters16(L);
    tiled_occupancy_of(L);

    const pack_layout p = layout_of(L);
    float *h = packed_on_host(p, desc, alloc_fail);
    if (!h)
        return cudaErrorMemoryAllocation;
    sgk_repack_map map;
    if (sgk_repack_map_build(desc, pack_fn, (void *)&p, p.total, h, alloc_fail, &map) != 0) {
        free(h);
        return cudaErrorMemoryAllocation;
    }
    snprintf(L->map_reason, sizeof L->map_reason, "%s", map.reason);
    const size_t weights = up64(p.total) * sizeof(float), table = map.runs ? map_table_bytes(map) : 0;
    unsigned char *t = NULL;
    cudaError_t err = cudaSuccess;
    if (table && ((alloc_fail && alloc_fail()) || !(t = (unsigned char *)malloc(table))))
        err = cudaErrorMemoryAllocation;
    if (err == cudaSuccess) {
        if (t)
            map_table_fill(map, t);
        if (alloc_fail && alloc_fail())
            err = cudaErrorMemoryAllocation;
        else
            err = cudaMalloc(&L->block, weights + table);
        if (err != cudaSuccess)
            L->block = NULL;
    }
    if (err == cudaSuccess)
        err = cudaMemcpy(L->block, h, p.total * sizeof(float), cudaMemcpyHostToDevice);
    if (err == cudaSuccess && t)
        err = cudaMemcpy((unsigned char *)L->block + weights, t, table, cudaMemcpyHostToDevice);
    if (err != cudaSuccess && L->block) {
        cudaFree(L->block);
        L->block = NULL;
    }
    free(t);
    free(h);
    if (err != cudaSuccess) {
        sgk_repack_map_free(&map);
        return err;
    }
    const float *base = (const float *)L->block;
    L->gamma = base + p.o_gamma;
    L->beta = base + p.o_beta;
    L->wqkv_t = base + p.o_qkv;
    L->wo_t = base + p.o_wo;
    L->w1 = base + p.o_w1;
    L->b1 = base + p.o_b1;
    L->w2t = base + p.o_w2;
    L->b2 = base + p.o_b2;
    L->gen = base + p.o_gen;
    L->kern = base + p.o_kern;
    L->kern_off = p.kern;
    L->fs_img = p.Ch ? base + p.o_img : NULL;
    L->fs_wo = p.Ch ? base + p.o_woimg : NULL;
    L->fs_img_floats = (int)p.img;
    L->fs_rw = p.seed ? base + p.o_rw : NULL;
    L->fs_rwo = p.seed ? base + p.o_rwo : NULL;
    L->gen_off = p.gen;
    L->block_floats = p.total;
    L->wg = NULL;
    if (const size_t n = sgkc_tc_wg_floats(L)) {
        if (alloc_fail && alloc_fail())
            err = cudaErrorMemoryAllocation;
        else if ((err = cudaMalloc(&L->wg, n * sizeof(float))) != cudaSuccess)
            L->wg = NULL;
        if (err == cudaSuccess && (err = sgkc_tc_wg_prep(L, 0)) == cudaSuccess)
            err = cudaStreamSynchronize(0);
        if (err != cudaSuccess) {
            sgk_repack_map_free(&map);
            sgkc_layer_release(L);
            return err;
        }
    }
    if (map.runs) {
        L->map_runs = (const sgk_repack_run *)((const unsigned char *)L->block + weights);
        L->map_first = (const int64_t *)(L->map_runs + map.count);
        L->map_count = (int64_t)map.count;
        L->map_covered = (int64_t)map.covered;
        memcpy(L->map_scales, map.scales, sizeof L->map_scales);
    }
    sgk_repack_map_free(&map);
    return cudaSuccess;
}

cudaError_t sgkc_layer_pack(sgkc_layer *L, int device, const sgk_layer_desc *desc,
                            int (*alloc_fail)(void))
{
    sgk_layer_desc f;
    float *wide;
    if (sgk_widen_desc(desc, &f, &wide, alloc_fail) != 0)
        return cudaErrorMemoryAllocation;
    const cudaError_t e = pack_float(L, device, &f, desc->dtype, alloc_fail);
    free(wide);
    return e;
}

cudaError_t sgkc_layer_repack_host(sgkc_layer *L, const sgk_layer_desc *desc16, int (*alloc_fail)(void))
{
    const pack_layout p = layout_of(L);
    sgk_layer_desc fdesc;
    float *wide;
    if (sgk_widen_desc(desc16, &fdesc, &wide, alloc_fail) != 0)
        return cudaErrorMemoryAllocation;
    const sgk_layer_desc *desc = &fdesc;
    float *h = packed_on_host(p, desc, alloc_fail);
    free(wide);
    if (!h)
        return cudaErrorMemoryAllocation;
    /* From pageable memory cudaMemcpy may return before the copy has
     * landed; the legacy stream's synchronisation waits for it, so that a
     * forward on any stream after this call reads the new weights. */
    cudaError_t e = cudaMemcpy(L->block, h, p.total * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = sgkc_tc_wg_prep(L, 0);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    free(h);
    if (e == cudaSuccess)
        L->eps = desc->eps;
    return e;
}

/* The device repack: packed float first[r] + i of run r is source
 * runs[r].seg's element src + i * stride (times a scale), read as dtype's
 * element and widened. A thread a packed float, found by a binary search
 * over first. */
struct sgkc_repack_args {
    const void *src[SGK_SRC_COUNT];
    int dtype; /* sgk_dtype */
    float *dst;
    const sgk_repack_run *runs;
    const int64_t *first;
    int64_t count;
    float scales[SGK_REPACK_SCALES];
};

__global__ void __launch_bounds__(256) sgkc_repack_kernel(const __grid_constant__ sgkc_repack_args a)
{
    const int64_t n = a.first[a.count];
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = a.count - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) >> 1;
            if (__ldg(a.first + mid) <= t)
                lo = mid;
            else
                hi = mid - 1;
        }
        const sgk_repack_run u = a.runs[lo];
        const int64_t i = t - __ldg(a.first + lo);
        const int64_t at = u.src + i * u.stride;
        const float x = a.dtype == SGK_DTYPE_F32 ? __ldg((const float *)a.src[u.seg] + at)
                                                 : sgkc_widen16(__ldg((const unsigned short *)a.src[u.seg] + at), a.dtype == SGK_DTYPE_F16);
        a.dst[u.dst + i] = u.scale ? __fmul_rn(x, a.scales[u.scale]) : x;
    }
}

/* Launched (without programmatic serialisation) after the repack: the next
 * call's first kernel may start early after the kernel before it on the
 * stream (launch_after) and reads weights before its grid wait, which
 * only sees that kernel's writes once it has finished. Behind this empty
 * kernel, which starts only once the repack has finished, it reads the
 * new weights. */
__global__ void sgkc_repack_fence_kernel() {}

cudaError_t sgkc_layer_repack_device(const sgkc_layer *L, const sgk_layer_desc *desc, cudaStream_t s)
{
    sgkc_repack_args a;
    memset(&a, 0, sizeof a);
    const void *src[SGK_SRC_COUNT];
    sgk_repack_pointers(desc, src);
    for (int i = 0; i < SGK_SRC_COUNT; i++)
        a.src[i] = src[i];
    a.dtype = (int)L->dtype;
    a.dst = (float *)L->block;
    a.runs = L->map_runs;
    a.first = L->map_first;
    a.count = L->map_count;
    memcpy(a.scales, L->map_scales, sizeof a.scales);
    const int64_t blocks = (L->map_covered + 255) / 256, cap = (int64_t)L->sm_count * 16;
    if (blocks > 0) {
        sgkc_repack_kernel<<<(unsigned)(blocks < cap ? blocks : cap), 256, 0, s>>>(a);
        SGKC_RETURN_IF(cudaGetLastError());
    }
    SGKC_RETURN_IF(sgkc_tc_wg_prep(L, s));
    sgkc_repack_fence_kernel<<<1, 32, 0, s>>>();
    return cudaGetLastError();
}

void sgkc_layer_release(sgkc_layer *L)
{
    if (L && L->block) {
        cudaFree(L->block);
        L->block = NULL;
    }
    if (L && L->wg) {
        cudaFree(L->wg);
        L->wg = NULL;
    }
}

#ifdef SGKC_TIMELINE
/* dev/harness.cu "timeline": the stamps of the last launch. */
cudaError_t sgkc_timeline_read(unsigned long long *dst, size_t n)
{
    return cudaMemcpyFromSymbol(dst, sgkc_tl, n * sizeof(unsigned long long));
}
#endif
