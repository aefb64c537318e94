/* A stand-in libcuda.so.1 for the probe tests: no GPU, no NVIDIA driver.
 * It reports SGK_FAKE_CUDA_VERSION (the driver's CUDA version, 1000*major +
 * 10*minor) and fails cuInit with SGK_FAKE_CUINIT (a CUresult), which is all
 * the CUDA runtime asks of a driver before it counts devices. Every other
 * entry point is reported missing. */
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int env_int(const char *name, int fallback)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : fallback;
}

EXPORT int cuDriverGetVersion(int *version)
{
    if (!version)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = env_int("SGK_FAKE_CUDA_VERSION", 13000);
    return 0;
}

EXPORT int cuInit(unsigned flags)
{
    (void)flags;
    return env_int("SGK_FAKE_CUINIT", 100); /* CUDA_ERROR_NO_DEVICE */
}

EXPORT int cuGetProcAddress_v2(const char *symbol, void **fn, int cuda_version,
                               unsigned long long flags, int *symbol_status);

EXPORT int cuGetProcAddress(const char *symbol, void **fn, int cuda_version, unsigned long long flags)
{
    return cuGetProcAddress_v2(symbol, fn, cuda_version, flags, NULL);
}

EXPORT int cuGetProcAddress_v2(const char *symbol, void **fn, int cuda_version,
                               unsigned long long flags, int *symbol_status)
{
    (void)cuda_version;
    (void)flags;
    if (!symbol || !fn)
        return 1;
    *fn = NULL;
    if (!strcmp(symbol, "cuInit"))
        *fn = (void *)cuInit;
    else if (!strcmp(symbol, "cuDriverGetVersion"))
        *fn = (void *)cuDriverGetVersion;
    else if (!strcmp(symbol, "cuGetProcAddress"))
        *fn = (void *)cuGetProcAddress_v2;
    if (symbol_status)
        *symbol_status = *fn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
    return *fn ? 0 : 500;             /* CUDA_ERROR_NOT_FOUND */
}
