/* Host side of the generated kernels, shared by every backend that runs them:
 * how weights are packed (and repacked: the repack maps below serve every
 * backend's packer), and how a shape maps onto groups, tiles and local
 * memory for the two variants of kernels/relation.sgk (kernels/DESIGN.md).
 *
 *   "small": one `fused` group per batch entry; the entry's Q/K/V and
 *            context stay in local memory. No workspace.
 *   "tiled": `norm` (LayerNorm rows into the workspace), `proj` (Q/K/V)
 *            over row x column tiles into it, `attn` over query tiles x B
 *            into a context there, then `proj` again (output projection
 *            and residual). Any N.
 */
#ifndef SGK_PLAN_H
#define SGK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sgk_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Offsets (in floats) of each weight inside one buffer, in PyTorch's
 * layout: what the cuda backend's tuned kernels read. */
typedef struct sgk_packed {
    size_t gamma, beta, wqkv, wo, w1, b1, w2, b2, total;
} sgk_packed;

sgk_packed sgk_packed_layout(int64_t D, int64_t H, int64_t P);
/* Copies desc's weights (validated, F32) into dst laid out as sgk_packed. */
void sgk_pack_weights(const sgk_layer_desc *desc, float *dst);

/* The generated kernels' packed weights: offsets in floats (multiples of
 * align), the matrices transposed to (in, out) with rows of ld floats, a
 * multiple of the target's pad (SGK_GEN_PAD), zero past the outputs: the
 * kernels' register tiles read a row of consecutive outputs' weights. The
 * backward (kernels/train.sgk) multiplies by the matrices themselves, so
 * they follow in PyTorch's (out, in) orientation, rows padded the same
 * way: [Wq; Wk; Wv] (3D rows of ldo), Wo (D rows of ldd), W1 (P rows of
 * ldp), W2 (H rows of ldp). */
typedef struct sgk_gen_packed {
    size_t gamma, beta, wqkv, wo, w1, b1, w2, b2;
    size_t wqkv_b, wo_b, w1_b, w2_b, total;
    /* row lengths, sgk_row_length's */
    int ldk; /* [Wq; Wk; Wv]^T's rows, of 3D + pad; Q/K/V rows in a workspace too */
    int ldo; /* Wo^T's rows, of D */
    int ldp; /* W1^T's rows and b1, of P */
    int ldh; /* W2^T's rows and b2, of H */
    int ldd; /* Wo's rows, of D + pad (zero past D); dctx rows in a workspace too */
    /* 0: [Wq; Wk; Wv]^T and Wo^T as rows of ldk and ldo floats. Else (the
     * C target, sw = SGK_GEN_PAD) each as strips of sw columns: column c of
     * row k at (c / sw) D sw + k sw + c % sw, so that the weights a register
     * tile reads for consecutive k are contiguous (rows ldk apart start a
     * new cache line every k, which a long k loop waits for; kernels/DESIGN.md).
     * sgk_gen_layout leaves it 0; a backend sets it before packing, and
     * passes sgk_gen_ldw's row lengths to the kernels. */
    int sw;
} sgk_gen_packed;

sgk_gen_packed sgk_gen_layout(int64_t D, int64_t H, int64_t P, int pad, size_t align);
/* Wqkv^T's or Wo^T's row length ld (o->ldk, o->ldo) as `proj` and `fused`
 * take it: 0 where o lays them out in strips (relation.sgk's mm). */
static inline int sgk_gen_ldw(const sgk_gen_packed *o, int ld) { return o->sw ? 0 : ld; }
/* The length of a padded row of n floats: a multiple of pad, and no
 * multiple of 1024 floats (4 KB). */
int sgk_row_length(int64_t n, int pad);
/* desc's weights (validated, F32) into dst of o->total floats, laid out as o. */
void sgk_gen_pack(const sgk_layer_desc *desc, const sgk_gen_packed *o, float *dst);
/* desc as an F32 descriptor for backends whose kernels compute in float:
 * itself, or (bf16, f16) its weights widened (kernels/dtype.h) into one
 * malloc'd block, *store, which the caller frees once it has packed them.
 * -1 (nothing allocated) when should_fail (fault injection; may be NULL)
 * says so or malloc fails. */
int sgk_widen_desc(const sgk_layer_desc *desc, sgk_layer_desc *f, float **store, int (*should_fail)(void));

/* What a target allows a group and how it likes its tiles. */
typedef struct sgk_limits {
    size_t local_bytes;   /* local (shared) memory per group */
    int64_t max_groups;   /* groups in one launch dimension */
    int pad;              /* the target's SGK_GEN_PAD */
    size_t align;         /* bytes: where the workspace's parts may begin */
    int mt, nt;           /* projection tile (rows, columns) */
    int tq, tk;           /* attention tile (queries, keys) to start from */
    int wide16;           /* 1: a bf16 or f16 layer: the pair features widened into local
                           * memory, nodes and out into the workspace */
    int64_t min_groups;   /* tiled: attn groups that keep the device busy; fewer query
                           * tiles split the keys (0: never) */
} sgk_limits;

typedef enum { SGK_PLAN_SMALL = 0, SGK_PLAN_TILED = 1 } sgk_plan_kind;

typedef struct sgk_plan {
    sgk_plan_kind kind;
    int D, H, P, N;
    int64_t B;
    float scale;             /* 1 / sqrt(D / H) */
    int ldk, ldo, ldp, ldh;  /* as the layer's sgk_gen_packed */
    int ldc;                 /* a context row, and a LayerNorm'd row */
    int tq, tqp, tk, qc;     /* attention: queries a tile (tqp: padded), keys a tile, MLP rows a chunk */
    int rt;                  /* tiled: rows a `norm` group */
    int mt, nt;              /* tiled: projection tiles */
    size_t smem_fused;       /* floats of local memory per group, per kernel */
    size_t smem_norm, smem_attn;
    int64_t groups_norm;     /* tiled: norm groups */
    int64_t groups_rows;     /* tiled: row tiles of both projections */
    int64_t groups_qkv;      /* tiled: column tiles of the Q/K/V projection */
    int64_t groups_out;      /* tiled: column tiles of the output projection */
    int64_t groups_q;        /* tiled: query tiles per batch entry */
    int64_t groups_attn;     /* tiled: attn groups, ks * groups_q * B */
    int ks;                  /* tiled: key ranges a query tile's keys split into (1: none) */
    /* tiled: bytes into the workspace where the context begins (before it,
     * Q/K/V rows of ldk); the LayerNorm'd rows take the context's place
     * until the attention writes it */
    size_t ctx_offset;
    /* tiled, ks > 1: bytes into the workspace where attn's partial states
     * begin (ks x rows contexts of ldc, then ks x rows x H maxima and as
     * many sums), which `combine` reduces into the context */
    size_t part_offset;
    /* 16-bit layers (limits.wide16): bytes into the workspace of nodes and
     * out as floats, which the conversion kernels fill and read; 0 else */
    size_t wide_nodes, wide_out;
    size_t workspace_bytes;
} sgk_plan;

/* Fills plan and returns 1 when the variant runs this shape within limits;
 * returns 0 (plan unspecified) otherwise. */
int sgk_plan_make(sgk_plan_kind kind, int64_t B, int64_t N, int64_t D, int64_t H, int64_t P,
                  const sgk_limits *limits, sgk_plan *plan);

/* The training calls (kernels/train.sgk): the tiled forward's plan (which
 * sgk_forward_train runs, and the backward runs again up to the context),
 * then the backward's tiles and its parts of the workspace after the
 * forward's. Offsets in floats; groups per kernel. */
typedef struct sgk_train_plan {
    sgk_plan fwd;
    int ldd;                 /* dctx, dxn and partial dq rows (D + pad) */
    int ldv;                 /* partial dk | dv rows (2 D) */
    int tq, tqp, tk, qc;     /* attn_bwd's tile */
    int rq, rk;              /* attn_bwd: query ranges, key ranges of a batch entry */
    int mlpw;                /* floats of one attn_bwd group's MLP weight sums */
    int cb;                  /* ln_wgrad: columns a group */
    int lk, lch;             /* ln_wgrad: rows a chunk, chunks */
    int per;                 /* reduce_mlp, reduce_parts: elements a group */
    int wmt, wnt;            /* wgrad: a (D x D) gradient's tiles */
    int wkc, wch;            /* wgrad: rows a chunk, chunks */
    int64_t groups_wr, groups_wc; /* wgrad: row tiles of D rows, column tiles */
    int64_t groups_bwd;      /* attn_bwd: B rq rk */
    int64_t groups_cols;     /* ln_wgrad: column blocks (times lch chunks) */
    int64_t groups_mlp;      /* reduce_mlp */
    int64_t groups_dctx;     /* proj to dctx: column tiles of ldd */
    size_t smem_bwd, smem_cols; /* floats of local memory: attn_bwd, ln_wgrad */
    size_t xn, dctx, di, st, dq, dkv, mlp; /* offsets, in floats */
    /* the chunks' parts, in floats: wpart wch blocks of 4 D x D (the
     * gradients of Wq, Wk, Wv, Wo in turn; none where wch is 1, whose one
     * chunk goes straight into the gradients' buffers), lpart lch blocks of
     * 2 D (dgamma's, dbeta's) */
    size_t wpart, lpart;
    /* 16-bit layers (limits.wide16): d_out widened (B N D floats), and each
     * gradient but the pair features' computed in float before it is
     * rounded into the caller's buffer (sgk_grads' order; 0 else) */
    size_t wide_dout, grad16[12];
    /* elements of each gradient staged there (the pair features' 0: never
     * staged), what the rounding into the caller's buffers converts */
    size_t grad_n[12];
    size_t workspace_bytes;
} sgk_train_plan;

/* Fills tp and returns 1 when the training calls run (B, N) within limits
 * (min_groups: the attn_bwd groups that keep the device busy); 0 else. */
int sgk_train_plan_make(int64_t B, int64_t N, int64_t D, int64_t H, int64_t P, const sgk_limits *limits,
                        sgk_train_plan *tp);

/* An sgk_plan is what the backends running these kernels hand from
 * variant_supports to workspace_size and forward (sgk_backend.h); these
 * copy it into and out of the call's sgk_backend_plan. */
void sgk_plan_store(const sgk_plan *plan, sgk_backend_plan *out);
void sgk_plan_load(const sgk_backend_plan *in, sgk_plan *plan);

/* ---- repack maps (repack.c) ---------------------------------------------
 *
 * The device form of sgk_layer_set_weights rebuilds a layer's packed
 * weights from weights already on the device, where no host packer can
 * run. Every packer sgk has is a gather: each packed float is one weight
 * element times a constant, or zero whatever the weights. A repack map says
 * which, found by running the packer on probe weights at layer creation and
 * checked by running it again: applying the map must give the packer's
 * bits, on the layer's own weights and on random ones. */

/* The weights of an sgk_layer_desc, in its order: the sources of a map. */
enum { SGK_SRC_GAMMA, SGK_SRC_BETA, SGK_SRC_WQ, SGK_SRC_WK, SGK_SRC_WV, SGK_SRC_WO,
       SGK_SRC_W1, SGK_SRC_B1, SGK_SRC_W2, SGK_SRC_B2, SGK_SRC_COUNT };

/* Packed floats dst .. dst + len - 1 are elements src, src + stride, ... of
 * source seg, copied bit for bit (scale 0) or times the map's scales[scale]
 * (one fp32 multiply). Runs are in order of dst; packed floats no run
 * covers are +0 for any weights and are never written by a repack. */
typedef struct sgk_repack_run {
    int64_t dst, src;
    int32_t len, stride;
    int32_t seg, scale;
} sgk_repack_run;

#define SGK_REPACK_SCALES 4

typedef struct sgk_repack_map {
    sgk_repack_run *runs; /* NULL when the packer is not a gather (reason says why) */
    size_t count;         /* runs */
    size_t covered;       /* packed floats the runs write */
    float scales[SGK_REPACK_SCALES]; /* scales[0] = 1, a copy */
    int nscales;
    char reason[192];
} sgk_repack_map;

/* Packs desc's weights (host pointers) into dst of the packer's size. */
typedef void (*sgk_packer_fn)(const sgk_layer_desc *desc, float *dst, void *user);

/* Element count of each source of a (D, H, P) layer. */
void sgk_repack_sources(int64_t D, int64_t H, int64_t P, size_t count[SGK_SRC_COUNT]);
/* desc's weight pointers, in source order. */
void sgk_repack_pointers(const sgk_layer_desc *desc, const void *src[SGK_SRC_COUNT]);

/* The map of pack (total floats) for layers shaped as desc, whose weights
 * pack gave packed. should_fail (may be NULL) is asked before every host
 * allocation. Returns 0 with map filled, its runs NULL and reason set when
 * the packer is not a gather; -1 when an allocation failed (nothing held).
 * Free with sgk_repack_map_free. */
int sgk_repack_map_build(const sgk_layer_desc *desc, sgk_packer_fn pack, void *user,
                         size_t total, const float *packed, int (*should_fail)(void),
                         sgk_repack_map *map);
void sgk_repack_map_free(sgk_repack_map *map);
/* Runs map on host sources (desc's pointers) into dst. */
void sgk_repack_apply(const sgk_repack_map *map, const sgk_layer_desc *desc, float *dst);
/* 1 when every run is a plain copy of consecutive elements (scale 0,
 * stride 1): what a backend that repacks by buffer copies can run. */
int sgk_repack_copies_only(const sgk_repack_map *map);

/* sgk_pack_weights as an sgk_packer_fn (user unused). */
void sgk_pack_weights_fn(const sgk_layer_desc *desc, float *dst, void *user);
/* sgk_gen_pack as an sgk_packer_fn (user: the const sgk_gen_packed *). */
void sgk_gen_pack_fn(const sgk_layer_desc *desc, float *dst, void *user);

/* Where each source of a (D, H, P) layer goes in one buffer that holds them
 * all for the generated `repack` kernel: source s from float at[s] on, each
 * a multiple of align floats. Returns the buffer's floats. */
size_t sgk_repack_stage(int64_t D, int64_t H, int64_t P, size_t align, size_t at[SGK_SRC_COUNT]);
/* The runs of a map as the `repack` kernel reads them, into out (5 * count
 * int64): five a run (dst, src, len, stride, scale), src counted from the
 * start of the buffer sgk_repack_stage lays out with at, scale the index
 * into the map's scales (0: a copy). */
void sgk_repack_kernel_runs(const sgk_repack_map *map, const size_t at[SGK_SRC_COUNT], int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
