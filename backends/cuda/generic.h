/* Variants of the CUDA backend that run the generated kernels (generic.cu). */
#ifndef SGK_CUDA_GENERIC_H
#define SGK_CUDA_GENERIC_H

#include "cuda_layer.h"

/* Lets the generated kernels use up to smem_limit bytes of dynamic shared
 * memory on the current device. */
cudaError_t sgkc_generic_prepare(int smem_limit);

int sgkc_generic_small_supports(const sgkc_layer *L, int64_t B, int64_t N);
size_t sgkc_generic_small_workspace(const sgkc_layer *L, int64_t B, int64_t N);
cudaError_t sgkc_generic_small_launch(const sgkc_layer *L, const sgkc_fwd *f);
int sgkc_generic_tiled_supports(const sgkc_layer *L, int64_t B, int64_t N);
size_t sgkc_generic_tiled_workspace(const sgkc_layer *L, int64_t B, int64_t N);
cudaError_t sgkc_generic_tiled_launch(const sgkc_layer *L, const sgkc_fwd *f);

#endif
