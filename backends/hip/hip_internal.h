/* Internal interfaces of the hip backend plugin, shared by its C files. */
#ifndef SGK_HIP_INTERNAL_H
#define SGK_HIP_INTERNAL_H

#include <hip/hip_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "hip_kernels.h"
#include "plan.h"
#include "sgk_backend.h"

/* Set once by the entry point; every failure goes through host->set_error. */
extern const sgk_host *sgk_hip_host;

/* ---- hip_backend.c ------------------------------------------------------ */

/* Sets status with "hip: <call> failed with <runtime's error text><context>". */
sgk_status sgk_hip_fail(sgk_status status, const char *call, hipError_t err, const char *context);
/* SGK_ERR_OUT_OF_MEMORY for the runtime's allocation failures, else
 * SGK_ERR_BACKEND. */
sgk_status sgk_hip_status_of(hipError_t err);

/* Makes the context's device current for the length of one call and then
 * gives the caller's back, so that calling sgk never moves the device the
 * caller's own HIP code runs on. */
typedef struct sgk_hip_guard {
    int prev;
    int restore;
} sgk_hip_guard;

sgk_status sgk_hip_enter(int device, sgk_hip_guard *g);
void sgk_hip_leave(const sgk_hip_guard *g);

/* Host memory, zeroed; NULL when the host says this allocation must fail. */
void *sgk_hip_host_alloc(size_t bytes);

/* The launch shape of one kernel on the context's device. */
typedef struct sgk_hip_kernel {
    int threads;          /* work-items per group, a multiple of the wavefront */
    size_t local_bytes;   /* dynamic shared memory a group may use */
    int64_t max_groups0;  /* groups along x: the grid limit, and x * threads < 2^32 */
} sgk_hip_kernel;

typedef struct sgk_hip_ctx {
    int device;
    int wavefront;        /* hipDeviceProp_t.warpSize: 64 on CDNA, 32 on RDNA */
    int group_cap;        /* sgk_context_options.gpu_group_size, 0: none */
    int units;            /* hipDeviceProp_t.multiProcessorCount: compute units */
    char label[320];      /* "<name> (<gcnArchName>)" */
    sgk_hip_kernel k[SGK_HIP_K_COUNT];
} sgk_hip_ctx;

/* ---- hip_layer.c: layers, variants, forward ----------------------------- */

/* Device memory of a layer, one allocation: the packed weights (plan.h,
 * sgk_gen_pack; float whatever the dtype), then for new weights from
 * device buffers the repack map's runs as the generated `repack` kernel
 * reads them, and a stage that the ten sources are copied (or widened)
 * into (source s at float stage_at[s]). */
typedef struct hip_layer {
    const sgk_hip_ctx *ctx;
    int64_t D, H, P;
    float eps;
    sgk_dtype dtype; /* of weights, nodes, pair features and out */
    sgk_gen_packed off;
    float *w;
    const int64_t *runs; /* NULL where there is no device repack (map_reason says why) */
    float *stage;
    size_t stage_at[SGK_SRC_COUNT];
    int64_t nruns;
    float scales[SGK_REPACK_SCALES];
    char map_reason[192];
} hip_layer;


sgk_status sgk_hip_layer_create(void *bctx, const sgk_layer_desc *desc, void **blayer);
void sgk_hip_layer_destroy(void *blayer);
int sgk_hip_variant_count(void *blayer);
const char *sgk_hip_variant_name(void *blayer, int variant);
/* The plan handed from variant_supports to workspace_size and forward is
 * an sgk_plan (plan.h). */
int sgk_hip_variant_supports(void *blayer, int variant, int64_t B, int64_t N,
                             sgk_backend_plan *plan);
size_t sgk_hip_workspace_size(void *blayer, int variant, int64_t B, int64_t N,
                              const sgk_backend_plan *plan);
sgk_status sgk_hip_forward(void *blayer, int variant, const sgk_backend_plan *plan,
                           const sgk_fwd *args);
/* New weights: host ones packed and copied (synchronous); device ones
 * copied by the repack map's runs on the stream. */
sgk_status sgk_hip_set_weights(void *blayer, const sgk_layer_desc *desc);
sgk_status sgk_hip_set_weights_device(void *blayer, const sgk_layer_desc *desc, void *stream);
/* The tiled plan p on a's float buffers, on the layer's device: the
 * LayerNorm'd rows into the workspace from float xn0 on, Q/K/V, the
 * context (each (head, row)'s log-sum-exp into lse where it is not NULL),
 * then out where a->out is not NULL. */
sgk_status sgk_hip_tiled(const hip_layer *l, const sgk_plan *p, const sgk_fwd *a, int pair_dt, int64_t xn0,
                         float *lse);
/* n elements between float and the layer's 16-bit dtype (widen 1: 16-bit
 * src to float dst; 0: back), enqueued on s. */
hipError_t sgk_hip_convert(const hip_layer *l, int widen, const void *src, void *dst, size_t n, hipStream_t s);
/* SGK_ERR_BACKEND for a launch that failed, naming the kernel and its shape. */
sgk_status sgk_hip_launch_failed(const hip_layer *l, const char *kernel, hipError_t err, int ng0, int ng1,
                                 const sgk_hip_kernel *k, size_t smem_floats);

/* ---- hip_train.c: the training calls (sgk_backend.h, ABI 4) -------------- */

size_t sgk_hip_saved_size(void *blayer, int64_t B, int64_t N);
size_t sgk_hip_train_workspace_size(void *blayer, int64_t B, int64_t N);
sgk_status sgk_hip_forward_train(void *blayer, const sgk_fwd *args, void *saved);
sgk_status sgk_hip_backward(void *blayer, const sgk_fwd *args, const void *saved, const void *d_out,
                            const sgk_grads *grads);

#endif
