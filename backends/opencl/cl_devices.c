/* Device discovery: every device of every platform, platforms in the order
 * the ICD loader gives them and each platform's devices by index, so that a
 * device number means the same device for the life of the process. The
 * table is fixed-size and filled once: probing allocates nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"

enum { MAX_PLATFORMS = 32, MAX_DEVICES = 256 };

static struct {
    int count;
    sgk_cl_device dev[MAX_DEVICES];
    char reason[512];
} g_table;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Appends to the unavailability reason, keeping what fits. */
static void note(const char *fmt, const char *a, cl_int err)
{
    size_t used = strlen(g_table.reason);
    if (used + 1 < sizeof g_table.reason)
        snprintf(g_table.reason + used, sizeof g_table.reason - used, fmt, a,
                 sgk_cl_error_name(err), (int)err);
}

static void enumerate(void)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &np);
    /* The ICD loader says CL_PLATFORM_NOT_FOUND_KHR when no vendor ICD loads;
     * some loaders return success with zero platforms instead. */
    if (err != CL_SUCCESS || np == 0) {
        if (err == CL_SUCCESS || err == -1001)
            snprintf(g_table.reason, sizeof g_table.reason,
                     "no OpenCL platform: the ICD loader found no vendor driver "
                     "(clGetPlatformIDs: %s)", err ? "CL_PLATFORM_NOT_FOUND_KHR" : "0 platforms");
        else
            note("no OpenCL platform: clGetPlatformIDs%s failed with %s (%d)", "", err);
        return;
    }
    if (np > MAX_PLATFORMS)
        np = MAX_PLATFORMS;
    for (cl_uint p = 0; p < np && g_table.count < MAX_DEVICES; p++) {
        cl_device_id ids[MAX_DEVICES];
        cl_uint nd = 0;
        err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &nd);
        if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && nd == 0))
            continue;
        if (err != CL_SUCCESS) {
            char name[128] = "?";
            clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof name, name, NULL);
            name[sizeof name - 1] = '\0';
            note("platform \"%s\": clGetDeviceIDs failed with %s (%d); ", name, err);
            continue;
        }
        if (nd > MAX_DEVICES)
            nd = MAX_DEVICES;
        for (cl_uint d = 0; d < nd && g_table.count < MAX_DEVICES; d++) {
            g_table.dev[g_table.count].platform = platforms[p];
            g_table.dev[g_table.count].device = ids[d];
            g_table.count++;
        }
    }
    if (g_table.count == 0) {
        size_t used = strlen(g_table.reason);
        snprintf(g_table.reason + used, sizeof g_table.reason - used,
                 "%u OpenCL platform%s but no device", (unsigned)np, np == 1 ? "" : "s");
    }
}

int sgk_cl_devices(char *reason, size_t reason_len)
{
    pthread_once(&g_once, enumerate);
    if (g_table.count == 0 && reason && reason_len)
        snprintf(reason, reason_len, "%s", g_table.reason);
    return g_table.count;
}

const sgk_cl_device *sgk_cl_device_at(int index)
{
    pthread_once(&g_once, enumerate);
    if (index < 0 || index >= g_table.count)
        return NULL;
    return &g_table.dev[index];
}

/* Drivers pad some names with spaces. */
static void trim(char *s)
{
    size_t n = strlen(s), a = 0;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
        s[--n] = '\0';
    while (s[a] == ' ' || s[a] == '\t')
        a++;
    memmove(s, s + a, n - a + 1);
}

sgk_status sgk_cl_device_label(int index, char *buf, size_t len)
{
    const sgk_cl_device *d = sgk_cl_device_at(index);
    if (d == NULL)
        return sgk_cl_host->set_error(SGK_ERR_INVALID_DEVICE, "opencl: no device %d", index);
    char dev[200] = "", plat[200] = "";
    cl_int err = clGetDeviceInfo(d->device, CL_DEVICE_NAME, sizeof dev - 1, dev, NULL);
    if (err != CL_SUCCESS)
        return sgk_cl_fail("clGetDeviceInfo(CL_DEVICE_NAME)", err, "");
    err = clGetPlatformInfo(d->platform, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
    if (err != CL_SUCCESS)
        return sgk_cl_fail("clGetPlatformInfo(CL_PLATFORM_NAME)", err, "");
    trim(dev);
    trim(plat);
    snprintf(buf, len, "%s (%s)", dev, plat);
    return SGK_OK;
}

sgk_status sgk_cl_devinfo_query(int index, sgk_cl_devinfo *info)
{
    const sgk_cl_device *d = sgk_cl_device_at(index);
    if (d == NULL)
        return sgk_cl_host->set_error(SGK_ERR_INVALID_DEVICE, "opencl: no device %d", index);
    memset(info, 0, sizeof *info);
    sgk_status st = sgk_cl_device_label(index, info->label, sizeof info->label);
    if (st != SGK_OK)
        return st;
    size_t items[3] = { 0, 0, 0 };
    char cver[128] = "";
    const struct { cl_device_info what; const char *name; size_t size; void *dst; } q[] = {
        { CL_DEVICE_LOCAL_MEM_SIZE, "CL_DEVICE_LOCAL_MEM_SIZE", sizeof info->local_mem,
          &info->local_mem },
        { CL_DEVICE_MAX_WORK_GROUP_SIZE, "CL_DEVICE_MAX_WORK_GROUP_SIZE", sizeof info->max_group,
          &info->max_group },
        { CL_DEVICE_MAX_WORK_ITEM_SIZES, "CL_DEVICE_MAX_WORK_ITEM_SIZES", sizeof items, items },
        { CL_DEVICE_ADDRESS_BITS, "CL_DEVICE_ADDRESS_BITS", sizeof info->address_bits,
          &info->address_bits },
        { CL_DEVICE_MAX_MEM_ALLOC_SIZE, "CL_DEVICE_MAX_MEM_ALLOC_SIZE", sizeof info->max_alloc,
          &info->max_alloc },
        { CL_DEVICE_COMPILER_AVAILABLE, "CL_DEVICE_COMPILER_AVAILABLE", sizeof info->compiler,
          &info->compiler },
        { CL_DEVICE_OPENCL_C_VERSION, "CL_DEVICE_OPENCL_C_VERSION", sizeof cver - 1, cver },
        { CL_DEVICE_MEM_BASE_ADDR_ALIGN, "CL_DEVICE_MEM_BASE_ADDR_ALIGN", sizeof info->base_align,
          &info->base_align },
        { CL_DEVICE_MAX_COMPUTE_UNITS, "CL_DEVICE_MAX_COMPUTE_UNITS", sizeof info->units, &info->units },
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        cl_int err = clGetDeviceInfo(d->device, q[i].what, q[i].size, q[i].dst, NULL);
        if (err != CL_SUCCESS) {
            char call[96];
            snprintf(call, sizeof call, "clGetDeviceInfo(%s)", q[i].name);
            char where[300];
            snprintf(where, sizeof where, "for device \"%s\"", info->label);
            return sgk_cl_fail(call, err, where);
        }
    }
    info->max_item0 = items[0];
    info->base_align /= 8; /* bits */
    if (info->base_align < 16)
        info->base_align = 16;
    /* "OpenCL C <major>.<minor> <vendor text>" */
    if (sscanf(cver, "OpenCL C %d.%d", &info->c_major, &info->c_minor) != 2) {
        info->c_major = 1;
        info->c_minor = 0;
    }
    return SGK_OK;
}
