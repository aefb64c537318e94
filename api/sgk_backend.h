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
 */
#ifndef SGK_BACKEND_H
#define SGK_BACKEND_H

#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SGK_BACKEND_ABI 1
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
    int (*variant_supports)(void *blayer, int variant, int64_t B, int64_t N);
    size_t (*workspace_size)(void *blayer, int variant, int64_t B, int64_t N);
    sgk_status (*forward)(void *blayer, int variant, const sgk_fwd *args);

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
} sgk_backend_ops;

typedef const sgk_backend_ops *(*sgk_backend_entry_fn)(const sgk_host *host);

#ifdef __cplusplus
}
#endif
#endif
