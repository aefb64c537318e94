/* Internal interfaces of the sgk core, shared between its source files.
 * Nothing here is exported from libsgk. */
#ifndef SGK_INTERNAL_H
#define SGK_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "sgk_backend.h"

#if defined(__GNUC__)
#define SGK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SGK_PRINTF(f, a)
#endif

/* The built-in cpu backend (backends/cpu). */
const sgk_backend_ops *sgk_cpu_backend_entry(const sgk_host *host);

/* ---- status.c: the thread-local last-error message ---------------------- */

sgk_status sgk_set_error(sgk_status status, const char *fmt, ...) SGK_PRINTF(2, 3);
sgk_status sgk_set_errorv(sgk_status status, const char *fmt, va_list ap);
/* Counts sgk_set_error calls on this thread, so the core can tell whether a
 * backend that returned an error also explained it. */
uint64_t sgk_error_serial(void);
/* The struct_size rule of the versioned structs (sgk.h): src is the
 * caller's struct, dst one of this sgk's layout already filled by its
 * _init. A struct_size from oldest (the end of the first version's last
 * field) up to size (this sgk's sizeof) is an older caller: its bytes are
 * copied over the defaults. A larger one is a newer caller, accepted when
 * every byte past size is zero (fields it leaves unset). Anything else is
 * refused with a message naming arg ("desc->struct_size"), type and init.
 * On success dst->struct_size is size. */
sgk_status sgk_read_struct(const char *arg, const char *type, const char *init, const void *src,
                           size_t oldest, size_t size, void *dst);
/* No version of a struct is larger: a struct_size past it is garbage, and
 * reading that far to check its tail could fault. */
#define SGK_STRUCT_SIZE_MAX 4096
/* Bytes of type up to the end of field: the oldest size of a struct whose
 * first version ended with that field. */
#define SGK_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* Passes st through; when a backend failed without setting a message, sets a
 * generic one naming the backend and the operation. */
sgk_status sgk_backend_result(sgk_status st, uint64_t serial_before,
                              const sgk_backend_ops *ops, const char *what);

/* ---- testing.c: allocation with fault injection ------------------------- */

/* Nonzero when this allocation must fail (sgk_testing_fail_alloc_after). */
int sgk_fault_should_fail(void);
/* While on, this thread's allocations are neither counted nor failed: the
 * registry is built once, whatever test happens to trigger it. */
void sgk_fault_suspend(int on);
/* malloc through the fault hook; NULL on failure. */
void *sgk_malloc(size_t bytes);

/* ---- registry.c / plugin.c: backends ------------------------------------ */

#define SGK_REASON_MAX 1024

typedef struct sgk_backend_slot {
    const char *name;
    const sgk_backend_ops *ops; /* NULL when the backend could not be loaded */
    int available;
    int device_count;
    char reason[SGK_REASON_MAX]; /* "" when available */
} sgk_backend_slot;

const sgk_host *sgk_host_services(void);
int sgk_registry_count(void);
const sgk_backend_slot *sgk_registry_at(int index);
/* NULL when no backend has that name. */
const sgk_backend_slot *sgk_registry_find(const char *name);
/* The slot of an available backend, or an error naming arg (the caller's
 * parameter name): NULL name, unknown name, unavailable backend. */
sgk_status sgk_registry_require(const char *name, const char *arg,
                                const sgk_backend_slot **slot);
/* SGK_OK when device indexes one of the slot's devices, else sets the error. */
sgk_status sgk_registry_check_device(const sgk_backend_slot *slot, int device);

/* Loads libsgk-<name>.so; NULL with reason filled on any failure. */
const sgk_backend_ops *sgk_plugin_load(const char *name, const sgk_host *host,
                                       char *reason, size_t reason_len);
/* Checks a backend table returned by an entry point: 1 when usable, else 0
 * with reason filled. origin names where it came from, for the reason. */
int sgk_ops_usable(const sgk_backend_ops *ops, const char *name, const char *origin,
                   char *reason, size_t reason_len);

/* ---- objects ------------------------------------------------------------ */

struct sgk_context {
    const sgk_backend_slot *backend;
    const sgk_backend_ops *ops;
    int device;
    void *bctx;
};

/* Bytes of one element of a tensor of dtype (weights, nodes, pair_feats,
 * out); 0 for a value that is not an sgk_dtype. */
size_t sgk_dtype_size(sgk_dtype dtype);
/* 1 when the backend's layers take dtype (sgk_backend_ops.dtypes). */
int sgk_backend_runs_dtype(const sgk_backend_ops *ops, sgk_dtype dtype);
const char *sgk_dtype_name(sgk_dtype dtype);

struct sgk_layer {
    sgk_context *ctx;
    const sgk_backend_ops *ops;
    void *blayer;
    int64_t D, H, P;
    sgk_dtype dtype;
    float eps; /* as last set, by sgk_layer_create or sgk_layer_set_weights */
    int variant_count;
    int forced; /* variant index forced by sgk_layer_set_variant, -1 = automatic */
};

/* ---- validate.c: shapes, sizes and the variant choice ------------------- */

/* One checked forward call: its byte counts, the variant that runs it and
 * that variant's plan (sgk_backend.h), made once and handed to the
 * backend's workspace_size and forward. */
typedef struct sgk_call {
    int variant;
    size_t nodes_bytes; /* also the size of out */
    size_t pair_bytes;
    size_t mask_bytes;
    size_t workspace_bytes;
    sgk_backend_plan plan;
} sgk_call;

/* Checks B and N, the tensors' element and byte counts against overflow and
 * the backend's limit, picks the variant and takes its plan and workspace
 * size. mask_elem is the size of one mask element in bytes. With
 * report == 0 no message is set. */
sgk_status sgk_plan_call(const sgk_layer *layer, int64_t B, int64_t N, size_t mask_elem,
                         int report, sgk_call *call);
/* Element and byte count of a tensor whose shape is dims[0..n), checked
 * against int64, size_t and max_elements; names the tensor and formula. */
sgk_status sgk_tensor_bytes(const char *tensor, const char *formula, const int64_t *dims,
                            int n, size_t elem, const sgk_backend_ops *ops, int report,
                            size_t *bytes);
/* The size checks of sgk_plan_call alone (B, N >= 1, the tensors' byte
 * counts into call), without choosing a variant. */
sgk_status sgk_check_shape(const sgk_layer *layer, int64_t B, int64_t N, size_t mask_elem,
                           int report, sgk_call *call);
/* 1 when (B, N) passes the size checks of sgk_plan_call; sets no message. */
int sgk_shape_fits(const sgk_layer *layer, int64_t B, int64_t N);
const char *sgk_variant_name(const sgk_layer *layer, int variant);

/* ---- forward.c: argument checks the training calls share ---------------- */
/* layer, nodes, pair_feats and edge_mask not NULL, else an error naming it. */
sgk_status sgk_check_inputs(const sgk_layer *layer, const void *nodes, const void *pair_feats,
                            const void *edge_mask);
/* args zeroed, then the call's shape and inputs. */
void sgk_fwd_init(sgk_fwd *args, int64_t B, int64_t N, const void *nodes, const void *pair_feats,
                  const void *edge_mask, sgk_mask_type mask_type);
/* The size of one element of mask_type, or an error naming it. */
sgk_status sgk_mask_elem_size(sgk_mask_type mask_type, size_t *elem);
/* The caller's workspace for a call of (B, N) that needs `need` bytes:
 * not NULL where need > 0, workspace_bytes >= need, aligned to align; else
 * an error naming who needs it, the query that says how much, and why
 * the alignment. */
sgk_status sgk_check_workspace(const char *who, const char *query, size_t need, int64_t B, int64_t N,
                               const void *workspace, size_t workspace_bytes, size_t align,
                               const char *why_aligned);
/* SGK_OK when ptr is a multiple of align, else an error naming the buffer. */
sgk_status sgk_check_aligned(const char *name, const void *ptr, size_t align);
/* 1 when the byte ranges [a, a + a_len) and [b, b + b_len) meet. */
int sgk_ranges_overlap(const void *a, size_t a_len, const void *b, size_t b_len);

#endif
