/* tuned-tc's entry points for the variant table (tc.cu). */
#ifndef SGK_CUDA_TC_H
#define SGK_CUDA_TC_H

#include "cuda_layer.h"

int sgkc_tc_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
size_t sgkc_tc_workspace(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *);
cudaError_t sgkc_tc_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
/* Raises the kernels' shared memory limits on L's device (current). */
cudaError_t sgkc_tc_prepare(const sgkc_layer *L);

#endif
