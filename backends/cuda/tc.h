/* tuned-tc's entry points for the variant table (tc.cu). */
#ifndef SGK_CUDA_TC_H
#define SGK_CUDA_TC_H

#include "cuda_layer.h"
#include "sgemm.cuh"

int sgkc_tc_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
size_t sgkc_tc_workspace(const sgkc_layer *L, int64_t B, int64_t N, const sgk_backend_plan *);
cudaError_t sgkc_tc_launch(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
int sgkc_tc_out16(const sgkc_layer *L, const sgk_backend_plan *plan, const sgkc_fwd *f);
/* Raises the kernels' shared memory limits on L's device (current). */
cudaError_t sgkc_tc_prepare(const sgkc_layer *L);

/* One of the layer's projections, as the other variants describe it
 * (sgemm.cuh's arguments: A, Wnk as PyTorch's weight[out][in], C, sizes,
 * LayerNorm where gamma is set, residual, column scale), on tuned-tc's
 * 3xTF32 GEMM. Where sgkc_tc_project_fits (compute capability 8.0 and the
 * shared memory for its larger tile). */
cudaError_t sgkc_tc_project(const sgkc_layer *L, const sgkc_gemm_args &g, cudaStream_t s);
bool sgkc_tc_project_fits(const sgkc_layer *L);
/* C = A W^T, plus residual where it is not null, on tc_gemm.cuh in 3xTF32
 * whatever the layer's dtype, with rows of their own lengths: A (M, K)
 * with rows lda floats apart, W (Nc, K) ldw, C and the residual (M, Nc)
 * ldc. The training calls' products on the generated kernels' padded
 * rows. w_late: W is not weights but what a kernel before wrote
 * (sgkc_tc_gemm_args.w_late). Where sgkc_tc_project_fits. */
cudaError_t sgkc_tc_product(const sgkc_layer *L, const float *A, int lda, const float *W, int ldw, float *C, int ldc,
                            const float *residual, int64_t M, int Nc, int K, bool w_late, cudaStream_t s);
/* Whether sgkc_tc_project runs g on wg_gemm.cuh (Hopper's warpgroup MMA,
 * the layer's weights as it takes them), which outruns every other
 * projection kernel where it does. */
bool sgkc_tc_project_wg(const sgkc_layer *L, const sgkc_gemm_args &g);
/* Floats of L->wg where wg_gemm.cuh runs on L's device, else 0; and L->wg
 * remade from the layer's weights on stream s (a no-op where it is NULL). */
size_t sgkc_tc_wg_floats(const sgkc_layer *L);
cudaError_t sgkc_tc_wg_prep(const sgkc_layer *L, cudaStream_t s);
/* The blocks of a cluster that sgkc_tc_project splits each output tile's k
 * range over (1: none). */
int sgkc_tc_project_ksplit(const sgkc_layer *L, int64_t M, int Nc, int K);

#endif
