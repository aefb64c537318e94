/* What the hip plugin's host side (C) asks about its device code
 * (hip_kernels.hip, compiled by hipcc). Included by both. */
#ifndef SGK_HIP_KERNELS_H
#define SGK_HIP_KERNELS_H

#include <hip/hip_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The kernels of kernels/relation.sgk and train.sgk. */
enum {
    SGK_HIP_K_FUSED, SGK_HIP_K_NORM, SGK_HIP_K_PROJ, SGK_HIP_K_ATTN, SGK_HIP_K_REPACK,
    SGK_HIP_K_WIDEN, SGK_HIP_K_NARROW, SGK_HIP_K_COMBINE, SGK_HIP_K_BWD_DI, SGK_HIP_K_ATTN_BWD,
    SGK_HIP_K_REDUCE_QKV, SGK_HIP_K_LN_BWD, SGK_HIP_K_LN_WGRAD, SGK_HIP_K_WGRAD, SGK_HIP_K_REDUCE_MLP,
    SGK_HIP_K_REDUCE_PARTS, SGK_HIP_K_COUNT
};

/* hipFuncGetAttributes of one kernel on the current device. It fails when
 * the plugin holds no code object for that device's architecture. */
hipError_t sgk_hip_kernel_attributes(int kernel, hipFuncAttributes *attr);

#ifdef __cplusplus
}
#endif
#endif
