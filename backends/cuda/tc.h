/* tuned-tc's entry points for the variant table (tc.cu). */
#ifndef SGK_CUDA_TC_H
#define SGK_CUDA_TC_H

#include "cuda_layer.h"

int sgkc_tc_supports(const sgkc_layer *L, int64_t B, int64_t N);
size_t sgkc_tc_workspace(const sgkc_layer *L, int64_t B, int64_t N);
cudaError_t sgkc_tc_launch(const sgkc_layer *L, const sgkc_fwd *f);
/* Raises the kernels' shared memory limits on L's device (current). */
cudaError_t sgkc_tc_prepare(const sgkc_layer *L);

#endif
