/* Loads the cuda plugin (argv[1]), runs its probe and checks that the
 * backend is unavailable with a reason that contains each further argument.
 * Run against the stand-in libcuda.so.1 beside this file. */
#include "sgk_backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static sgk_status set_error(sgk_status status, const char *fmt, ...)
{
    (void)fmt;
    return status;
}

static int no_alloc_failure(void)
{
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN [TEXT...]\n", argv[0]);
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    sgk_backend_entry_fn entry = (sgk_backend_entry_fn)dlsym(h, SGK_BACKEND_ENTRY);
    static const sgk_host host = {SGK_BACKEND_ABI, set_error, no_alloc_failure};
    const sgk_backend_ops *ops = entry ? entry(&host) : NULL;
    if (!ops) {
        fprintf(stderr, "%s: no backend entry\n", argv[1]);
        return 1;
    }
    char reason[512] = "";
    const int n = ops->probe(reason, sizeof reason);
    printf("probe: %d device(s), reason: %s\n", n, reason);
    int ok = n == 0;
    for (int i = 2; i < argc; i++) {
        if (!strstr(reason, argv[i])) {
            printf("missing from the reason: %s\n", argv[i]);
            ok = 0;
        }
    }
    return ok ? 0 : 1;
}
