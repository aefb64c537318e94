// The hip plugin's device code: the kernels sgkgen.py emits from
// kernels/relation.sgk and train.sgk (relation_hip.hip, in the build directory), compiled
// by hipcc for every target of the meson option amdgpu_targets, and the one
// query the host side needs about them.
#include "relation_hip.hip"

#include "hip_kernels.h"

extern "C" hipError_t sgk_hip_kernel_attributes(int kernel, hipFuncAttributes *attr)
{
    switch (kernel) {
    case SGK_HIP_K_FUSED:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_fused));
    case SGK_HIP_K_NORM:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_norm));
    case SGK_HIP_K_PROJ:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_proj));
    case SGK_HIP_K_ATTN:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_attn));
    case SGK_HIP_K_REPACK:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_repack));
    case SGK_HIP_K_WIDEN:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_widen16));
    case SGK_HIP_K_NARROW:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_narrow16));
    case SGK_HIP_K_COMBINE:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_combine));
    case SGK_HIP_K_BWD_DI:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_bwd_di));
    case SGK_HIP_K_ATTN_BWD:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_attn_bwd));
    case SGK_HIP_K_REDUCE_QKV:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_reduce_qkv));
    case SGK_HIP_K_LN_BWD:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_ln_bwd));
    case SGK_HIP_K_LN_WGRAD:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_ln_wgrad));
    case SGK_HIP_K_WGRAD:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_wgrad));
    case SGK_HIP_K_REDUCE_MLP:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_reduce_mlp));
    case SGK_HIP_K_REDUCE_PARTS:
        return hipFuncGetAttributes(attr, reinterpret_cast<const void *>(sgk_k_reduce_parts));
    }
    return hipErrorInvalidValue;
}
