/* Internal interfaces of the OpenCL backend plugin, shared by its files. */
#ifndef SGK_CL_INTERNAL_H
#define SGK_CL_INTERNAL_H

#include <CL/cl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "sgk_backend.h"

/* Set once by the entry point; every failure goes through host->set_error. */
extern const sgk_host *sgk_cl_host;

/* ---- cl_errors.c -------------------------------------------------------- */

/* "CL_OUT_OF_RESOURCES" etc.; "an unrecognised OpenCL error" otherwise. */
const char *sgk_cl_error_name(cl_int err);
/* Sets SGK_ERR_BACKEND: "opencl: <call> failed with <NAME> (<code>) <context>". */
sgk_status sgk_cl_fail(const char *call, cl_int err, const char *context);

/* ---- cl_devices.c: every device of every platform, in a stable order ----- */

typedef struct sgk_cl_device {
    cl_platform_id platform;
    cl_device_id device;
} sgk_cl_device;

/* Number of devices (0 with reason filled when there is none). */
int sgk_cl_devices(char *reason, size_t reason_len);
/* The index-th device (index validated by the core). */
const sgk_cl_device *sgk_cl_device_at(int index);
/* "<device name> (<platform name>)". */
sgk_status sgk_cl_device_label(int index, char *buf, size_t len);

/* What the plan and the launches need to know about a device. */
typedef struct sgk_cl_devinfo {
    cl_ulong local_mem;     /* CL_DEVICE_LOCAL_MEM_SIZE */
    size_t max_group;       /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    size_t max_item0;       /* CL_DEVICE_MAX_WORK_ITEM_SIZES[0] */
    cl_uint address_bits;   /* bounds the global size (size_t on the device) */
    cl_ulong max_alloc;     /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    cl_bool compiler;       /* CL_DEVICE_COMPILER_AVAILABLE */
    cl_uint base_align;     /* CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes: sub-buffer origins */
    cl_uint units;          /* CL_DEVICE_MAX_COMPUTE_UNITS */
    int c_major, c_minor;   /* from CL_DEVICE_OPENCL_C_VERSION */
    char label[256];
} sgk_cl_devinfo;

sgk_status sgk_cl_devinfo_query(int index, sgk_cl_devinfo *info);

/* ---- cl_program.c: the generated kernels, built per context ------------- */

enum { SGK_CL_K_FUSED, SGK_CL_K_NORM, SGK_CL_K_PROJ, SGK_CL_K_ATTN, SGK_CL_K_WIDEN, SGK_CL_K_NARROW, SGK_CL_K_REPACK,
       SGK_CL_K_COMBINE, SGK_CL_K_BWD_DI, SGK_CL_K_ATTN_BWD, SGK_CL_K_REDUCE_QKV, SGK_CL_K_LN_BWD, SGK_CL_K_LN_WGRAD,
       SGK_CL_K_WGRAD, SGK_CL_K_REDUCE_MLP, SGK_CL_K_REDUCE_PARTS, SGK_CL_K_COUNT };
/* Their names in the program (cl_program.c). */
extern const char *const sgk_cl_kernel_names[SGK_CL_K_COUNT];

typedef struct sgk_cl_kernel {
    cl_kernel kernel;
    size_t local;       /* work-items per group we launch with */
    size_t local_bytes; /* local memory left for the smem argument */
    int64_t max_groups; /* groups per dimension that the global size can hold */
} sgk_cl_kernel;

typedef struct sgk_cl_program {
    cl_program program;
    sgk_cl_kernel k[SGK_CL_K_COUNT];
} sgk_cl_program;

/* Builds the embedded source for the context's device, each kernel's
 * work-group size at most group_cap (0: no cap); on failure the message
 * carries the compiler's build log. */
sgk_status sgk_cl_program_build(cl_context ctx, cl_device_id dev, const sgk_cl_devinfo *info, size_t group_cap,
                                sgk_cl_program *out);
void sgk_cl_program_release(sgk_cl_program *p);

/* ---- opencl_backend.c ----------------------------------------------------- */

typedef struct sgk_cl_ctx {
    int index;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue; /* in order, profiling enabled */
    sgk_cl_devinfo info;
    /* Guards the program's one-time build and the kernels' arguments, which
     * OpenCL keeps in the cl_kernel between clSetKernelArg and the enqueue. */
    pthread_mutex_t lock;
    int built;
    sgk_cl_program prog;
    size_t group_cap; /* sgk_context_options.gpu_group_size, 0: none */
} sgk_cl_ctx;

/* in the order of sgk_gen_packed's offsets */
enum { SGK_CL_W_GAMMA, SGK_CL_W_BETA, SGK_CL_W_WQKV, SGK_CL_W_WO, SGK_CL_W_W1, SGK_CL_W_B1,
       SGK_CL_W_W2, SGK_CL_W_B2, SGK_CL_W_WQKV_B, SGK_CL_W_WO_B, SGK_CL_W_W1_B, SGK_CL_W_W2_B, SGK_CL_W_COUNT };

/* A layer's weights, packed once (plan.h, sgk_gen_pack) into one buffer,
 * each weight's part a sub-buffer of it (the kernels take each as its own
 * argument), at offsets that are multiples of the device's sub-buffer
 * alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN). New weights from device
 * buffers: the ten sources copied (or widened) into stage, source s at
 * float stage_at[s], then the generated `repack` kernel over the runs of
 * the packer's repack map (runs: five int64 a run). */
typedef struct sgk_cl_layer {
    sgk_cl_ctx *ctx;
    int64_t D, H, P;
    float eps;
    sgk_dtype dtype; /* bf16 and f16 run the float kernels between widen16 and narrow16 */
    sgk_gen_packed off;
    cl_mem block;
    cl_mem w[SGK_CL_W_COUNT];
    cl_mem stage, runs; /* NULL where there is no device repack (map_reason says why) */
    size_t stage_at[SGK_SRC_COUNT];
    int64_t nruns;
    float scales[SGK_REPACK_SCALES];
    char map_reason[192];
} sgk_cl_layer;

/* The plan's limits for the layer's device, its local memory and groups
 * those of the n kernels given (the least of each). */
sgk_limits sgk_cl_limits(const sgk_cl_layer *l, const int *kernels, int n);

/* Where weight buffer i begins and ends in the packed layout (floats). */
void sgk_cl_weight_range(const sgk_gen_packed *o, int i, size_t *at, size_t *end);

/* In order of preference: small's one group per batch entry leaves most of
 * a device idle at the batch sizes robots use (README.md). */
enum { SGK_CL_V_TILED, SGK_CL_V_SMALL, SGK_CL_V_COUNT };

/* ---- cl_forward.c ---------------------------------------------------------- */

static inline cl_mem sgk_cl_mem(const void *p) { return (cl_mem)(uintptr_t)p; }
/* The queue feeds the context's device in its context; *in_order says
 * whether it is in order. */
sgk_status sgk_cl_check_queue(const sgk_cl_ctx *c, cl_command_queue q, int *in_order);
/* ptr is a cl_mem of the context of at least need bytes (formula names
 * them); short_status where it is smaller. */
sgk_status sgk_cl_check_buffer(const sgk_cl_ctx *c, const void *ptr, const char *name, const char *formula,
                               size_t need, sgk_status short_status);
/* On an out-of-order queue, what comes after waits for what came before. */
sgk_status sgk_cl_order(cl_command_queue q, int in_order, const sgk_cl_ctx *c);
/* groups0 x groups1 groups of kernel which, whose arguments err says were set. */
sgk_status sgk_cl_launch(const sgk_cl_ctx *c, cl_command_queue q, int which, cl_int err, int64_t groups0,
                         int64_t groups1);
/* n elements of src into dst by widen16 (which SGK_CL_K_WIDEN) or
 * narrow16: float <-> the 16-bit dtype. Called with the context's lock held. */
sgk_status sgk_cl_convert(const sgk_cl_ctx *c, int which, sgk_dtype dtype, cl_mem src, cl_mem dst, size_t n,
                          cl_command_queue q);
/* Bytes [at, at + bytes) of the workspace as a buffer of its own (at a
 * multiple of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN); release it once
 * the work using it is enqueued. */
sgk_status sgk_cl_sub_buffer(const sgk_cl_ctx *c, const void *ws, size_t at, size_t bytes, cl_mem *out);
/* A 16-bit layer's call of plan p: nodes widened into the workspace, the
 * float kernels (lse as sgk_cl_tiled's), out narrowed from it. Called
 * with the context's lock held. */
sgk_status sgk_cl_enqueue16(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a, cl_command_queue q,
                            int in_order, cl_mem lse);
/* The tiled plan p on a's float buffers, with the context's lock held:
 * the LayerNorm'd rows into the workspace from float xn0 on, Q/K/V, the
 * context (each (head, row)'s log-sum-exp into lse where it is not NULL),
 * then out where a->out is not NULL. */
sgk_status sgk_cl_tiled(const sgk_cl_layer *l, const sgk_plan *p, const sgk_fwd *a, cl_command_queue q,
                        int in_order, cl_long xn0, cl_mem lse);

/* Enqueues the plan that variant_supports made (an sgk_plan, plan.h). */
sgk_status sgk_cl_forward(void *blayer, int variant, const sgk_backend_plan *plan,
                          const sgk_fwd *args);
/* New weights: host ones written with blocking writes on the context's
 * queue; device ones (cl_mem) copied by the map's runs on stream. */
sgk_status sgk_cl_set_weights(void *blayer, const sgk_layer_desc *desc);
sgk_status sgk_cl_set_weights_device(void *blayer, const sgk_layer_desc *desc, void *stream);

/* ---- cl_train.c: the training calls (sgk_backend.h, ABI 4) ---------------- */

size_t sgk_cl_saved_size(void *blayer, int64_t B, int64_t N);
size_t sgk_cl_train_workspace_size(void *blayer, int64_t B, int64_t N);
sgk_status sgk_cl_forward_train(void *blayer, const sgk_fwd *args, void *saved);
sgk_status sgk_cl_backward(void *blayer, const sgk_fwd *args, const void *saved, const void *d_out,
                           const sgk_grads *grads);

#endif
