/* tuned-tc's entry points for the variant table (tc.cu). */
#ifndef SGK_CUDA_TC_H
#define SGK_CUDA_TC_H

#include "cuda_layer.h"
#include "sgemm.cuh"

int sgkc_tc_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
size_t sgkc_tc_workspace(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *);
cudaError_t sgkc_tc_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
/* Raises the kernels' shared memory limits on L's device (current). */
cudaError_t sgkc_tc_prepare(const sgkc_layer *L);

/* One of the layer's projections, as the other variants describe it
 * (sgemm.cuh's arguments: A, Wnk as PyTorch's weight[out][in], C, sizes,
 * LayerNorm where gamma is set, residual, column scale), on tuned-tc's
 * 3xTF32 GEMM. Where sgkc_tc_project_fits (compute capability 8.0 and the
 * shared memory for its larger tile). */
cudaError_t sgkc_tc_project(const sgkc_layer *L, const sgkc_gemm_args &g, cudaStream_t s);
bool sgkc_tc_project_fits(const sgkc_layer *L);
/* The blocks of a cluster that sgkc_tc_project splits each output tile's k
 * range over (1: none). */
int sgkc_tc_project_ksplit(const sgkc_layer *L, int64_t M, int Nc, int K);

#endif
