/* Variants of the CUDA backend that run the generated kernels (generic.cu). */
#ifndef SGK_CUDA_GENERIC_H
#define SGK_CUDA_GENERIC_H

#include "cuda_layer.h"

/* The generated kernels' packed layout of a (D, H, P) layer. */
sgk_gen_packed sgkc_generic_layout(int D, int H, int P);

/* Lets the generated kernels use up to smem_limit bytes of dynamic shared
 * memory on the current device. */
cudaError_t sgkc_generic_prepare(int smem_limit);
/* The generated kernels' group size for a context asking for at most cap
 * work-items (0: no cap). */
int sgkc_generic_threads(int cap);

/* Variants small and tiled; their plan is the generated kernels' sgk_plan
 * (kernels/plan.h), and one workspace function serves both. */
int sgkc_generic_small_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
int sgkc_generic_tiled_plan(const sgkc_layer *L, int64_t B, int64_t N, sgk_backend_plan *plan);
size_t sgkc_generic_workspace(const sgkc_layer *L, int64_t B, int64_t N,
                              const sgk_backend_plan *plan);
cudaError_t sgkc_generic_launch(const sgkc_layer *L, const sgk_backend_plan *plan,
                                const sgkc_fwd *f);

/* n elements of L's 16-bit dtype converted by the generated kernels
 * (kernels/relation.sgk's widen16 and narrow16, kernels/dtype.h's
 * rounding): widen, 16-bit src to float dst; else float src to 16-bit dst.
 * Enqueued on s. */
cudaError_t sgkc_convert16(const sgkc_layer *L, int widen, const void *src, void *dst, size_t n, cudaStream_t s);

/* The training calls on the generated kernels (kernels/train.sgk), float32
 * layers: the workspace both need (SIZE_MAX where the shape has no plan),
 * the forward that also writes saved, and the backward into g's non-NULL
 * members. Each enqueues on f->stream and returns the first CUDA error. */
size_t sgkc_train_workspace(const sgkc_layer *L, int64_t B, int64_t N);
cudaError_t sgkc_train_forward(const sgkc_layer *L, const sgkc_fwd *f, float *saved);
cudaError_t sgkc_train_backward(const sgkc_layer *L, const sgkc_fwd *f, const float *saved, const float *d_out,
                                const sgk_grads *g);

#endif
