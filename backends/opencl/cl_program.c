/* The generated OpenCL C (kernels/relation.sgk through sgkgen.py, embedded
 * at build time) compiled for one device at run time, and the work-group
 * shape each of its kernels is launched with. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"
#include "relation_cl_source.h"

const char *const sgk_cl_kernel_names[SGK_CL_K_COUNT] = { "fused", "norm", "proj", "attn", "widen16",
                                                           "narrow16", "repack", "combine", "bwd_di",
                                                           "attn_bwd", "reduce_qkv", "ln_bwd", "ln_wgrad",
                                                           "wgrad", "reduce_mlp", "reduce_parts" };

/* Work-items per group when the device and kernel allow it: the kernels
 * spread every loop over the group, so any size is correct; 256 keeps
 * enough items per group busy on GPUs without starving small shapes. */
enum { PREFERRED_LOCAL = 256 };

/* What fits in the thread-local message (4 KB) beside the rest of it. */
enum { LOG_KEEP = 3000 };

static sgk_status build_failed(cl_program prog, cl_device_id dev, cl_int err,
                               const sgk_cl_devinfo *info, const char *options)
{
    size_t n = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS && n > 0
        && !sgk_cl_host->alloc_should_fail())
        log = malloc(n + 1);
    if (log && clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) {
        free(log);
        log = NULL;
    }
    size_t len = 0;
    if (log) {
        log[n] = '\0';
        len = strlen(log);
        while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\r'))
            log[--len] = '\0';
    }
    /* The first errors explain the rest, so the log is cut at its end. */
    char cut[64] = "";
    if (len > LOG_KEEP)
        snprintf(cut, sizeof cut, "\n[build log cut: %zu more bytes]", len - LOG_KEEP);
    sgk_status st = sgk_cl_host->set_error(
        SGK_ERR_BACKEND,
        "opencl: clBuildProgram failed with %s (%d) for device \"%s\" (options \"%s\"); "
        "build log:\n%.*s%s",
        sgk_cl_error_name(err), (int)err, info->label, options, (int)(len > LOG_KEEP ? LOG_KEEP : len),
        log ? (len ? log : "(empty)") : "(not available)", cut);
    free(log);
    return st;
}

static sgk_status kernel_shape(sgk_cl_kernel *k, const char *name, cl_device_id dev,
                               const sgk_cl_devinfo *info, size_t group_cap)
{
    size_t kwg = 0, multiple = 0;
    cl_ulong klocal = 0;
    char where[320];
    snprintf(where, sizeof where, "for kernel %s on device \"%s\"", name, info->label);
    cl_int err = clGetKernelWorkGroupInfo(k->kernel, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg,
                                          &kwg, NULL);
    if (err != CL_SUCCESS)
        return sgk_cl_fail("clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)", err, where);
    err = clGetKernelWorkGroupInfo(k->kernel, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof klocal,
                                   &klocal, NULL);
    if (err != CL_SUCCESS)
        return sgk_cl_fail("clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE)", err, where);
    err = clGetKernelWorkGroupInfo(k->kernel, dev, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                   sizeof multiple, &multiple, NULL);
    if (err != CL_SUCCESS)
        multiple = 1;

    size_t local = PREFERRED_LOCAL;
    if (kwg < local)
        local = kwg;
    if (info->max_group < local)
        local = info->max_group;
    if (info->max_item0 < local)
        local = info->max_item0;
    if (multiple > 1 && local >= multiple)
        local -= local % multiple;
    if (group_cap > 0 && group_cap < local)
        local = group_cap;
    if (local == 0)
        return sgk_cl_host->set_error(SGK_ERR_BACKEND,
                                      "opencl: kernel %s allows no work-group size on device \"%s\" "
                                      "(CL_KERNEL_WORK_GROUP_SIZE %zu, CL_DEVICE_MAX_WORK_GROUP_SIZE "
                                      "%zu)",
                                      name, info->label, kwg, info->max_group);
    k->local = local;
    /* Local memory the kernel holds itself is not there for smem. */
    const cl_ulong avail = info->local_mem > klocal ? info->local_mem - klocal : 0;
    k->local_bytes = avail > SIZE_MAX ? SIZE_MAX : (size_t)avail;
    /* Group ids are int inside the kernels; the global size is the device's
     * size_t. The grid is not bounded by CL_DEVICE_MAX_WORK_ITEM_SIZES. */
    const uint64_t dev_size_max =
        info->address_bits >= 64 ? UINT64_MAX : (((uint64_t)1 << info->address_bits) - 1);
    uint64_t groups = dev_size_max / local;
    if (groups > SIZE_MAX / local)
        groups = SIZE_MAX / local;
    if (groups > INT_MAX)
        groups = INT_MAX;
    k->max_groups = (int64_t)groups;
    return SGK_OK;
}

sgk_status sgk_cl_program_build(cl_context ctx, cl_device_id dev, const sgk_cl_devinfo *info, size_t group_cap,
                                sgk_cl_program *out)
{
    memset(out, 0, sizeof *out);
    if (!info->compiler)
        return sgk_cl_host->set_error(SGK_ERR_BACKEND,
                                      "opencl: device \"%s\" has no OpenCL C compiler "
                                      "(CL_DEVICE_COMPILER_AVAILABLE is false); sgk builds its "
                                      "kernels from source",
                                      info->label);
    const char *src = sgk_opencl_source;
    const size_t len = sizeof sgk_opencl_source - 1;
    cl_int err = CL_SUCCESS;
    out->program = clCreateProgramWithSource(ctx, 1, &src, &len, &err);
    if (out->program == NULL || err != CL_SUCCESS) {
        out->program = NULL;
        return sgk_cl_fail("clCreateProgramWithSource", err, "");
    }
    /* No tuning constants: tile sizes and shapes are kernel arguments. No
     * fast or finite math either: the masking relies on -inf and NaN. */
    const char *options =
        (info->c_major > 1 || (info->c_major == 1 && info->c_minor >= 2)) ? "-cl-std=CL1.2" : "";
    err = clBuildProgram(out->program, 1, &dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        sgk_status st = build_failed(out->program, dev, err, info, options);
        sgk_cl_program_release(out);
        return st;
    }
    for (int i = 0; i < SGK_CL_K_COUNT; i++) {
        out->k[i].kernel = clCreateKernel(out->program, sgk_cl_kernel_names[i], &err);
        sgk_status st = SGK_OK;
        if (out->k[i].kernel == NULL || err != CL_SUCCESS) {
            char where[320];
            snprintf(where, sizeof where, "for kernel %s on device \"%s\"", sgk_cl_kernel_names[i],
                     info->label);
            out->k[i].kernel = NULL;
            st = sgk_cl_fail("clCreateKernel", err, where);
        } else {
            st = kernel_shape(&out->k[i], sgk_cl_kernel_names[i], dev, info, group_cap);
        }
        if (st != SGK_OK) {
            sgk_cl_program_release(out);
            return st;
        }
    }
    return SGK_OK;
}

void sgk_cl_program_release(sgk_cl_program *p)
{
    for (int i = 0; i < SGK_CL_K_COUNT; i++)
        if (p->k[i].kernel)
            clReleaseKernel(p->k[i].kernel);
    if (p->program)
        clReleaseProgram(p->program);
    memset(p, 0, sizeof *p);
}
