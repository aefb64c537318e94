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
    int units;            /* hipDeviceProp_t.multiProcessorCount: compute units */
    char label[320];      /* "<name> (<gcnArchName>)" */
    sgk_hip_kernel k[SGK_HIP_K_COUNT];
} sgk_hip_ctx;

/* ---- hip_layer.c: layers, variants, forward ----------------------------- */

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

#endif
