/* The interface between the sgk core and a backend (built in or a plugin).
 *
 * A backend is a table of function pointers. The core validates every
 * argument before calling in (non-NULL pointers, sizes >= 1, D % H == 0,
 * element counts within max_elements, a variant that supports the shape, a
 * large enough workspace), so backends only compute. A plugin exports
 *
 *     const sgk_backend_ops *sgk_backend_entry(const sgk_host *host);
 *
 * and the core rejects it unless ops->abi_version == SGK_BACKEND_ABI.
 * Backends report failures with host->set_error and return a status; they
 * never print, abort or exit.
 *
 * One plan per call. Deciding whether a variant runs a shape is the same
 * work as deciding how it runs it (tiles, grids, shared memory, workspace
 * layout), so the answer and the plan come together. For every forward
 * call the core, on its own stack:
 *
 *     sgk_backend_plan plan;
 *     for each variant v in order (or only the forced one):
 *         if (ops->variant_supports(blayer, v, B, N, &plan) &&
 *             (forced || !ops->variant_prefers ||
 *              ops->variant_prefers(blayer, v, B, N, &plan))) break;
 *     (none preferred: the first that supports the shape, planned again)
 *     bytes = ops->workspace_size(blayer, v, B, N, &plan);
 *     ... checks the caller's buffers against bytes ...
 *     ops->forward(blayer, v, &plan, &args);
 *
 * The plan that forward receives is the one variant_supports filled for
 * the same variant, layer and (B, N) in the same call, unchanged: forward
 * need not plan again nor check that the variant supports the shape.
 * sgk_workspace_size and sgk_layer_variant_for stop after workspace_size;
 * sgk_layer_variants calls variant_supports for each variant with a plan
 * it throws away. A plan is never kept past its call nor shared between
 * threads; it holds values worked out from the layer and the shape, and
 * may point at the layer's own state, which outlives every call.
 *
 * The core never reads a plan's bytes. A backend keeps its own struct in
 * them, which must fit in SGK_BACKEND_PLAN_BYTES (check it with a static
 * assertion), and copies it in and out with memcpy: the storage is an
 * sgk_backend_plan, so reading it through a pointer to another struct type
 * would break C's aliasing rules.
 *
 * ABI 2 introduced the plan: under ABI 1 variant_supports, workspace_size
 * and forward each planned the call again from (B, N).
 *
 * ABI 3 added layer_set_weights and layer_set_weights_device (new weights
 * for a layer, from host or device pointers), both required. A backend
 * repacks into the buffers it packed at layer_create, so no device address
 * changes. kernels/plan.h builds a repack map of any packer that gathers
 * (sgk_repack_map_build), which backends run for the device form. ABI 3
 * also added variant_prefers (optional), so that a variant can run a shape
 * when forced (and be listed as supporting it) without being the
 * automatic choice there.
 *
 * ABI 4 added saved_size, train_workspace_size, forward_train and
 * backward (optional): the training calls.
 *
 * ABI 5 added dtypes: the sgk_dtype values the backend's layers take
 * (weights, nodes, pair_feats and out of that dtype), as bits
 * SGK_DTYPE_BIT(dtype); 0 means SGK_DTYPE_F32 alone. The core refuses a
 * layer of any other dtype with SGK_ERR_UNSUPPORTED before layer_create.
 */
#ifndef SGK_BACKEND_H
#define SGK_BACKEND_H

#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SGK_BACKEND_ABI 5
#define SGK_DTYPE_BIT(dtype) (1u << (unsigned)(dtype))
#define SGK_BACKEND_ENTRY "sgk_backend_entry"

/* Services the core offers a backend. */
typedef struct sgk_host {
    int abi_version;
    /* Sets this thread's last-error message (printf format); returns status. */
    sgk_status (*set_error)(sgk_status status, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;
    /* Fault injection for tests: nonzero when the next allocation must fail.
     * Backends call it before every host or device allocation they make. */
    int (*alloc_should_fail)(void);
} sgk_host;

/* A validated forward call. Pointers are device pointers of the backend
 * (host pointers for the cpu backend). */
typedef struct sgk_fwd {
    int64_t B, N;
    const void *nodes, *pair_feats, *edge_mask;
    sgk_mask_type mask_type;
    void *out;
    void *workspace;
    size_t workspace_bytes;
    void *stream;
} sgk_fwd;

/* Bytes a backend may keep in one call's plan. */
#define SGK_BACKEND_PLAN_BYTES 256

/* One call's plan, owned by the core, filled and read by the backend. The
 * members besides bytes only align it for any struct a backend keeps. */
typedef union sgk_backend_plan {
    unsigned char bytes[SGK_BACKEND_PLAN_BYTES];
    long double align_ld;
    int64_t align_i64;
    void *align_ptr;
} sgk_backend_plan;

typedef struct sgk_backend_ops {
    int abi_version; /* SGK_BACKEND_ABI */
    const char *name;
    /* Largest element count of any one tensor the kernels can index. */
    int64_t max_elements;
    /* 1 when device pointers are host pointers (cpu): the core then runs
     * sgk_forward without copies. */
    int host_memory;

    /* Number of devices (>= 1), or 0 with reason filled when unavailable. */
    int (*probe)(char *reason, size_t reason_len);
    sgk_status (*device_name)(int device, char *buf, size_t buf_len);

    sgk_status (*context_create)(int device, const sgk_context_options *opt, void **bctx);
    void (*context_destroy)(void *bctx);

    /* Desc has been validated; weights are host pointers in PyTorch layout. */
    sgk_status (*layer_create)(void *bctx, const sgk_layer_desc *desc, void **blayer);
    void (*layer_destroy)(void *blayer);

    /* Variants in order of preference; names live as long as the backend. */
    int (*variant_count)(void *blayer);
    const char *(*variant_name)(void *blayer, int variant);
    /* 1 with plan filled when the variant runs (B, N) on this layer; 0
     * otherwise, with plan's contents unspecified. Sets no error. */
    int (*variant_supports)(void *blayer, int variant, int64_t B, int64_t N,
                            sgk_backend_plan *plan);
    /* Device workspace bytes forward needs with this plan (0 for none). */
    size_t (*workspace_size)(void *blayer, int variant, int64_t B, int64_t N,
                             const sgk_backend_plan *plan);
    /* Runs the plan on args (args->B and args->N are the plan's). */
    sgk_status (*forward)(void *blayer, int variant, const sgk_backend_plan *plan,
                          const sgk_fwd *args);

    /* Device memory for sgk_forward on host pointers (unused when
     * host_memory). copy_* are synchronous with respect to the host. */
    sgk_status (*mem_alloc)(void *bctx, size_t bytes, void **ptr);
    void (*mem_free)(void *bctx, void *ptr);
    sgk_status (*copy_to_device)(void *bctx, void *dst, const void *src, size_t bytes);
    sgk_status (*copy_to_host)(void *bctx, void *dst, const void *src, size_t bytes);
    /* Waits for all work enqueued on the context's default stream. */
    sgk_status (*synchronize)(void *bctx);
    /* sgk_context_native; NULL means SGK_ERR_UNSUPPORTED for every kind. */
    sgk_status (*native)(void *bctx, sgk_native_kind kind, void **out);

    /* ABI 3. desc has been validated against the layer: its dim, heads,
     * pair_dim and dtype are the layer's, its weight pointers are not NULL.
     * layer_set_weights: host pointers, as at layer_create, and an eps
     * that may differ; returns once later forward calls see the weights.
     * layer_set_weights_device: device pointers (aligned to
     * alignof(float)) enqueued on stream, desc->eps equal to the layer's;
     * allocates nothing, copies nothing from the host, does not
     * synchronise. Each leaves the weights as they were on any error it
     * finds before it starts writing them. */
    sgk_status (*layer_set_weights)(void *blayer, const sgk_layer_desc *desc);
    sgk_status (*layer_set_weights_device)(void *blayer, const sgk_layer_desc *desc,
                                           void *stream);
    /* Whether the automatic choice should take a variant that supports
     * (B, N), given the plan variant_supports just filled: 0 where another
     * variant later in the order is known to be faster. NULL: always. */
    int (*variant_prefers)(void *blayer, int variant, int64_t B, int64_t N,
                           const sgk_backend_plan *plan);

    /* ABI 4, optional: the training calls (sgk_saved_size,
     * sgk_forward_train[_device], sgk_backward[_device]). NULL where the
     * backend has none; the core then answers SGK_ERR_UNSUPPORTED. Only
     * host_memory backends are called for now. Pointers are validated;
     * args->workspace holds train_workspace_size bytes, aligned to 16.
     * saved_size: bytes of the state forward_train writes for (B, N).
     * train_workspace_size: the workspace either call needs (SIZE_MAX when
     * it does not fit a size_t). forward_train: forward on args, also
     * writing saved. backward: the gradients of sum(d_out * out) into
     * grads' non-NULL members; args->out is unused (NULL). Neither
     * allocates. */
    size_t (*saved_size)(void *blayer, int64_t B, int64_t N);
    size_t (*train_workspace_size)(void *blayer, int64_t B, int64_t N);
    sgk_status (*forward_train)(void *blayer, const sgk_fwd *args, void *saved);
    sgk_status (*backward)(void *blayer, const sgk_fwd *args, const void *saved,
                           const void *d_out, const sgk_grads *grads);

    /* ABI 5: SGK_DTYPE_BIT of each dtype layer_create takes; 0: F32 only. */
    unsigned dtypes;
} sgk_backend_ops;

typedef const sgk_backend_ops *(*sgk_backend_entry_fn)(const sgk_host *host);

#ifdef __cplusplus
}
#endif
#endif
