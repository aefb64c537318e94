/* sgk: scene-graph kernels.
 *
 * One relation-update layer over a scene graph (LayerNorm, Q/K/V, a pairwise
 * relation MLP giving a per-head attention bias, masked softmax attention over
 * graph edges, output projection, residual), computed on CPU (OpenMP), CUDA,
 * HIP or OpenCL through one C API.
 *
 * Manners: every call returns an sgk_status; nothing prints, aborts or exits;
 * sgk_last_error() holds a message naming the argument and the rule for the
 * last failure on the calling thread; on any error the output buffer is left
 * byte-identical. All memory passed in is owned by the caller.
 *
 * Threading: the registry is built once, safely, on first use. Contexts and
 * layers may be shared between threads: sgk_forward and sgk_forward_device
 * may run concurrently on one layer as long as each call has its own output
 * and workspace buffers. sgk_layer_set_variant, sgk_layer_set_weights,
 * sgk_layer_set_weights_device and the _destroy calls must not run
 * concurrently with any other call on the same object.
 *
 * Lifetimes: a layer belongs to its context; destroy every layer of a
 * context before the context itself.
 *
 * Buffers: float tensors (and the workspace) must be aligned to
 * alignof(float); a misaligned one is SGK_ERR_INVALID_ARGUMENT. A uint8
 * mask may sit at any address.
 */
#ifndef SGK_H
#define SGK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SGK_EXPORT
#else
#define SGK_EXPORT __attribute__((visibility("default")))
#endif

#define SGK_VERSION_MAJOR 0
#define SGK_VERSION_MINOR 2
#define SGK_VERSION_PATCH 0

SGK_EXPORT const char *sgk_version(void);

typedef enum sgk_status {
    SGK_OK = 0,
    SGK_ERR_NULL_POINTER = 1,      /* a required pointer or handle is NULL */
    SGK_ERR_INVALID_ARGUMENT = 2,  /* a size is zero or negative, D % H != 0, eps < 0, ... */
    SGK_ERR_SIZE_OVERFLOW = 3,     /* a byte count overflows size_t or a backend's index type */
    SGK_ERR_UNSUPPORTED = 4,       /* dtype, mask type or shape no path of the backend supports */
    SGK_ERR_UNKNOWN_BACKEND = 5,   /* no backend of that name */
    SGK_ERR_BACKEND_UNAVAILABLE = 6, /* the backend exists but cannot run here (reason in the message) */
    SGK_ERR_INVALID_DEVICE = 7,    /* device index out of range */
    SGK_ERR_UNKNOWN_VARIANT = 8,   /* no variant of that name in this backend */
    SGK_ERR_OUT_OF_MEMORY = 9,     /* a host or device allocation failed */
    SGK_ERR_BACKEND = 10,          /* the vendor runtime failed (its error text in the message) */
    SGK_ERR_INSUFFICIENT_WORKSPACE = 11 /* workspace smaller than sgk_workspace_size says */
} sgk_status;

/* A fixed string for each status; "unknown status" for values outside the enum. */
SGK_EXPORT const char *sgk_status_string(sgk_status status);

/* Message of the last failed call on this thread ("" if none). Valid until the
 * next sgk call on this thread. */
SGK_EXPORT const char *sgk_last_error(void);

typedef enum sgk_dtype {
    SGK_DTYPE_F32 = 0,
    SGK_DTYPE_BF16 = 1, /* every backend, every variant */
    SGK_DTYPE_F16 = 2   /* every backend, every variant */
} sgk_dtype;
/* A layer's dtype is that of its weights and of nodes, pair_feats and out
 * (the mask stays float32 or uint8); buffers of it are aligned to its size.
 * bf16 and f16 layers compute in fp32 on the widened values and round out
 * (and, in training, the gradients) to nearest, ties to even. */

typedef enum sgk_mask_type {
    SGK_MASK_F32 = 0, /* float32, any nonzero value (0.3, -1, NaN) is an edge */
    SGK_MASK_U8 = 1   /* uint8, nonzero is an edge */
} sgk_mask_type;

/* ---- backend registry ------------------------------------------------- */

typedef struct sgk_backend_info {
    const char *name;   /* "cpu", "cuda", "hip", "opencl" */
    int available;      /* 1 if a context can be created on it */
    int device_count;   /* 0 when unavailable */
    const char *reason; /* why it is unavailable ("" when available) */
} sgk_backend_info;

/* Backends compiled in or looked for as plugins, in a fixed order. */
SGK_EXPORT int sgk_backend_count(void);
SGK_EXPORT sgk_status sgk_backend_get(int index, sgk_backend_info *info);
/* Same, by name; SGK_ERR_UNKNOWN_BACKEND for a name sgk does not know. */
SGK_EXPORT sgk_status sgk_backend_find(const char *name, sgk_backend_info *info);
/* Human-readable device name, e.g. "NVIDIA H200", NUL-terminated in buf.
 * Names are at most 255 bytes, so a buf of 256 always suffices. A name that
 * does not fit in buf_len bytes is not cut: SGK_ERR_INVALID_ARGUMENT, buf
 * untouched, and the message gives the bytes it needs (terminator
 * included). */
SGK_EXPORT sgk_status sgk_device_name(const char *backend, int device, char *buf, size_t buf_len);

/* ---- context ---------------------------------------------------------- */

typedef struct sgk_context sgk_context;

/* Versioned structs (sgk_context_options, sgk_layer_desc): struct_size, the
 * first field, is the sizeof of the struct the caller was built with, set
 * by the struct's _init. Later versions only add fields at the end, so sgk
 * reads any version:
 *   - older (from the first version's size up to this sgk's sizeof): the
 *     fields the caller's struct lacks take the defaults of _init;
 *   - newer (past this sgk's sizeof): accepted when every byte past this
 *     sgk's sizeof is zero, since a field added later means "as before"
 *     when zero; SGK_ERR_UNSUPPORTED when one is set, naming the byte;
 *   - smaller than the first version, or larger than 4096 bytes (no
 *     version is): SGK_ERR_INVALID_ARGUMENT, an uninitialised struct.
 * The message names struct_size and the sizes it was measured against. */

typedef struct sgk_context_options {
    size_t struct_size; /* sizeof(sgk_context_options), set by _init */
    int cpu_threads;    /* cpu backend: OpenMP threads, 0 = the OpenMP default,
                           at most SGK_MAX_CPU_THREADS */
    int gpu_group_size; /* GPU backends' generated kernels (opencl, hip, cuda's
                           small and tiled): work-items a group at most, 0 =
                           the backend's choice; at most SGK_MAX_GPU_GROUP.
                           The kernels hold no warp or wavefront size, so
                           results stay within the contract at any size */
} sgk_context_options;

#define SGK_MAX_GPU_GROUP 1024

#define SGK_MAX_CPU_THREADS 4096

/* Fills defaults. options may be NULL in sgk_context_create for all defaults. */
SGK_EXPORT void sgk_context_options_init(sgk_context_options *options);

SGK_EXPORT sgk_status sgk_context_create(const char *backend, int device,
                                         const sgk_context_options *options,
                                         sgk_context **out);
SGK_EXPORT void sgk_context_destroy(sgk_context *ctx); /* NULL is a no-op */
SGK_EXPORT const char *sgk_context_backend(const sgk_context *ctx);

/* Native handles, so that a caller can allocate device memory and streams
 * that sgk_forward_device accepts. A backend returns SGK_ERR_UNSUPPORTED for
 * kinds it has no such handle for. */
typedef enum sgk_native_kind {
    SGK_NATIVE_DEVICE_ORDINAL = 0, /* cuda, hip: the runtime's device index, as (void*)(intptr_t) */
    SGK_NATIVE_CL_CONTEXT = 1,     /* opencl: cl_context */
    SGK_NATIVE_CL_DEVICE = 2,      /* opencl: cl_device_id */
    SGK_NATIVE_CL_QUEUE = 3        /* opencl: the default cl_command_queue (profiling enabled) */
} sgk_native_kind;
SGK_EXPORT sgk_status sgk_context_native(sgk_context *ctx, sgk_native_kind kind, void **out);

/* ---- layer ------------------------------------------------------------ */

/* Weights are host pointers in PyTorch nn.Linear layout (weight[out][in]),
 * so a state dict loads without transposes. They are copied and packed at
 * sgk_layer_create (and sgk_layer_set_weights); the caller may free them
 * afterwards. */
typedef struct sgk_layer_desc {
    size_t struct_size; /* sizeof(sgk_layer_desc), set by _init (versioning: see above) */
    int64_t dim;        /* D */
    int64_t heads;      /* H, divides D */
    int64_t pair_dim;   /* P */
    float eps;          /* LayerNorm eps (PyTorch default 1e-5), finite and >= 0 */
    sgk_dtype dtype;    /* dtype of weights and of forward's data */
    const void *ln_gamma, *ln_beta; /* (D) */
    const void *wq, *wk, *wv, *wo;  /* (D, D) */
    const void *w1, *b1;            /* (P, P), (P) */
    const void *w2, *b2;            /* (H, P), (H) */
} sgk_layer_desc;

/* Zeroes the descriptor, sets struct_size, eps = 1e-5 and dtype = F32. */
SGK_EXPORT void sgk_layer_desc_init(sgk_layer_desc *desc);

typedef struct sgk_layer sgk_layer;

SGK_EXPORT sgk_status sgk_layer_create(sgk_context *ctx, const sgk_layer_desc *desc,
                                       sgk_layer **out);
SGK_EXPORT void sgk_layer_destroy(sgk_layer *layer); /* NULL is a no-op */

/* New weights for a layer, so that a training step or a loaded state dict
 * reaches it without building it again. desc is read as at
 * sgk_layer_create; its dim, heads, pair_dim and dtype must be the layer's
 * (SGK_ERR_INVALID_ARGUMENT naming the field and both values otherwise).
 * No device address of the layer changes, so forward calls captured in a
 * CUDA graph before stay valid. On an argument error the layer keeps its
 * weights; a failure of the device itself may leave them partly replaced.
 *
 * Host pointers, as at sgk_layer_create; eps may change. Synchronous: when
 * it returns, every later forward call sees the new weights. Forward calls
 * the caller enqueued with sgk_forward_device on streams of its own must be
 * complete first, as before changing any buffer they read. eps is a kernel
 * argument that a CUDA graph keeps as captured: a graph captured before a
 * call that changes eps goes on with the old eps (its weights are the new
 * ones); capture it again. */
SGK_EXPORT sgk_status sgk_layer_set_weights(sgk_layer *layer, const sgk_layer_desc *desc);

/* The same from device pointers of the layer's device (host pointers on the
 * cpu backend; cl_mem handles cast to void* on opencl, in the context's
 * cl_context), each holding its weight's elements and aligned to
 * alignof(float), enqueued on stream (as for sgk_forward_device; NULL for
 * the backend's default). Allocates nothing, copies nothing from the host
 * and does not synchronise; it can be captured into a CUDA graph. Forward
 * calls enqueued after it on the same stream see the new weights; the
 * caller orders other streams with events, and must not change the
 * sources until the copy has run. desc->eps must equal the layer's eps
 * (SGK_ERR_INVALID_ARGUMENT otherwise): forward calls captured in a graph
 * hold eps as captured, and this call cannot reach them; change eps with
 * sgk_layer_set_weights. SGK_ERR_UNSUPPORTED (reason in the message) where
 * the backend cannot repack this layer on the device; every layer of sgk's
 * test table can. */
SGK_EXPORT sgk_status sgk_layer_set_weights_device(sgk_layer *layer, const sgk_layer_desc *desc,
                                                   void *stream);

/* ---- forward ---------------------------------------------------------- */

/* Host pointers: nodes (B,N,D), pair_feats (B,N,N,P), edge_mask (B,N,N),
 * out (B,N,D), all contiguous row-major. Blocks until out is written. On a GPU
 * backend this allocates, copies and synchronises: for speed use
 * sgk_forward_device. out must not alias an input. */
SGK_EXPORT sgk_status sgk_forward(sgk_layer *layer, int64_t B, int64_t N,
                                  const void *nodes, const void *pair_feats,
                                  const void *edge_mask, sgk_mask_type mask_type,
                                  void *out);

/* Bytes of device workspace sgk_forward_device needs for this shape with the
 * variant that would run (0 for some variants). It can grow with N^2: a
 * variant that keeps the relation MLP's per-pair bias asks for B*N*N*H
 * floats of it besides its per-row buffers. */
SGK_EXPORT sgk_status sgk_workspace_size(sgk_layer *layer, int64_t B, int64_t N, size_t *bytes);

/* Device pointers of the layer's device (host pointers on the cpu backend;
 * cl_mem handles cast to void* on opencl, in the context's cl_context),
 * enqueued on stream (cudaStream_t, hipStream_t, cl_command_queue; NULL for
 * the backend's default). Does not allocate, copy from the host or
 * synchronise; can be captured into a CUDA graph. workspace may be NULL when
 * sgk_workspace_size gives 0. Argument errors are reported before anything
 * is enqueued; errors of the device itself may surface here or on a later
 * call, as with any asynchronous API. */
SGK_EXPORT sgk_status sgk_forward_device(sgk_layer *layer, int64_t B, int64_t N,
                                         const void *nodes, const void *pair_feats,
                                         const void *edge_mask, sgk_mask_type mask_type,
                                         void *out, void *workspace, size_t workspace_bytes,
                                         void *stream);

/* ---- training: the backward ------------------------------------------ */

/* Where sgk_backward writes the gradient of each input and weight, in the
 * shape, layout and dtype of that tensor (the weights' as in
 * sgk_layer_desc, PyTorch's; a 16-bit layer's gradients are computed in
 * float32 and rounded once). A NULL member is not computed (a frozen
 * weight, say); the others are overwritten, not accumulated into. */
typedef struct sgk_grads {
    void *nodes;              /* (B, N, D) */
    void *pair_feats;         /* (B, N, N, P) */
    void *ln_gamma, *ln_beta; /* (D) */
    void *wq, *wk, *wv, *wo;  /* (D, D) */
    void *w1, *b1;            /* (P, P), (P) */
    void *w2, *b2;            /* (H, P), (H) */
} sgk_grads;

/* Bytes of the state sgk_forward_train keeps for sgk_backward at (B, N):
 * each (batch, head, row)'s softmax log-sum-exp, B*H*N floats, never the
 * (B, H, N, N) scores or bias, which the backward recomputes from the
 * inputs. SGK_ERR_UNSUPPORTED where the layer's backend has no backward. */
SGK_EXPORT sgk_status sgk_saved_size(sgk_layer *layer, int64_t B, int64_t N, size_t *bytes);

/* sgk_forward that also writes saved (sgk_saved_size bytes, host memory,
 * aligned to alignof(float), not overlapping any other argument). out is
 * the forward's, within its contract. */
SGK_EXPORT sgk_status sgk_forward_train(sgk_layer *layer, int64_t B, int64_t N,
                                        const void *nodes, const void *pair_feats,
                                        const void *edge_mask, sgk_mask_type mask_type,
                                        void *out, void *saved);

/* The gradients of sum(d_out * out), out the forward of these inputs, with
 * respect to every input and weight, into grads' non-NULL members (host
 * memory, each aligned to its elements' size and overlapping no other
 * argument); d_out in the layer's dtype. nodes, pair_feats and edge_mask must be those the forward
 * saw, and saved what sgk_forward_train wrote for them with the layer's
 * current weights. Masked pairs and rows with no edge get zero gradient;
 * b2's is zero exactly (the softmax ignores a shift common to a row), or
 * NaN where a row's is not finite; a non-finite input spreads only where
 * it does in the forward. Every sum has a fixed order, so the result is
 * the same bit for bit run after run on one context (the order follows
 * its thread count or device, as the forward's does). */
SGK_EXPORT sgk_status sgk_backward(sgk_layer *layer, int64_t B, int64_t N, const void *nodes,
                                   const void *pair_feats, const void *edge_mask,
                                   sgk_mask_type mask_type, const void *saved,
                                   const void *d_out, const sgk_grads *grads);

/* The device forms, on pointers as sgk_forward_device takes them and
 * enqueued on stream, with the caller's workspace of
 * sgk_train_workspace_size bytes (one size for both calls), aligned to 16
 * bytes and overlapping no other argument: they allocate nothing. The
 * host forms above allocate that workspace themselves. */
SGK_EXPORT sgk_status sgk_train_workspace_size(sgk_layer *layer, int64_t B, int64_t N,
                                               size_t *bytes);
SGK_EXPORT sgk_status sgk_forward_train_device(sgk_layer *layer, int64_t B, int64_t N,
                                               const void *nodes, const void *pair_feats,
                                               const void *edge_mask, sgk_mask_type mask_type,
                                               void *out, void *saved, void *workspace,
                                               size_t workspace_bytes, void *stream);
SGK_EXPORT sgk_status sgk_backward_device(sgk_layer *layer, int64_t B, int64_t N,
                                          const void *nodes, const void *pair_feats,
                                          const void *edge_mask, sgk_mask_type mask_type,
                                          const void *saved, const void *d_out,
                                          const sgk_grads *grads, void *workspace,
                                          size_t workspace_bytes, void *stream);

/* ---- kernel variants -------------------------------------------------- */

/* Names of the variants of the layer's backend, in the order the automatic
 * choice prefers them, and whether each supports (B, N). names[i] stays valid
 * for the layer's life. Pass names = NULL to ask only for the count. */
SGK_EXPORT sgk_status sgk_layer_variants(sgk_layer *layer, int64_t B, int64_t N,
                                         const char **names, int *supported,
                                         int capacity, int *count);
/* Force a variant by name for later forward calls; NULL restores the automatic
 * choice. A forced variant that does not support a shape makes forward return
 * SGK_ERR_UNSUPPORTED (never a silent fallback). */
SGK_EXPORT sgk_status sgk_layer_set_variant(sgk_layer *layer, const char *name);
/* The variant forward would run for (B, N). */
SGK_EXPORT sgk_status sgk_layer_variant_for(sgk_layer *layer, int64_t B, int64_t N,
                                            const char **name);

#ifdef __cplusplus
}
#endif
#endif
