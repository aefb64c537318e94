/* Loading GPU backends as plugins (libsgk-<name>.so), so that one build of
 * libsgk runs on machines with or without each vendor runtime and can say
 * why a backend is missing.
 *
 * The search order: the folder sgk/ beside the file libsgk was loaded from
 * (<libdir>/sgk once installed, build/api/sgk in the build tree), then each
 * folder of SGK_BACKEND_PATH. No path is compiled in, so a moved prefix keeps
 * its plugins and a build folder left behind (in /tmp, say) is never looked
 * at; the variable adds backends but cannot replace the library's own. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sgk_internal.h"

#define SGK_PATH_MAX 4096

typedef struct search {
    const char *name;
    const sgk_host *host;
    char file[64];            /* libsgk-<name>.so */
    char searched[SGK_REASON_MAX];
    const sgk_backend_ops *ops;
    int found;                /* a file was found (and tried) */
    char *reason;
    size_t reason_len;
} search;

int sgk_ops_usable(const sgk_backend_ops *ops, const char *name, const char *origin,
                   char *reason, size_t reason_len)
{
    if (ops == NULL) {
        snprintf(reason, reason_len, "%s: entry point returned NULL", origin);
        return 0;
    }
    /* abi_version is the first member in every ABI, so it is safe to read
     * before trusting the rest of the table. */
    if (ops->abi_version != SGK_BACKEND_ABI) {
        snprintf(reason, reason_len, "plugin built for backend ABI %d, core expects %d (%s)",
                 ops->abi_version, SGK_BACKEND_ABI, origin);
        return 0;
    }
    if (ops->name == NULL || strcmp(ops->name, name) != 0) {
        snprintf(reason, reason_len, "%s reports backend name \"%s\", expected \"%s\"", origin,
                 ops->name ? ops->name : "(null)", name);
        return 0;
    }
    if (ops->max_elements < 1) {
        snprintf(reason, reason_len, "%s reports max_elements %lld, must be >= 1", origin,
                 (long long)ops->max_elements);
        return 0;
    }
    const char *missing = NULL;
    if (!ops->probe) missing = "probe";
    else if (!ops->device_name) missing = "device_name";
    else if (!ops->context_create) missing = "context_create";
    else if (!ops->context_destroy) missing = "context_destroy";
    else if (!ops->layer_create) missing = "layer_create";
    else if (!ops->layer_destroy) missing = "layer_destroy";
    else if (!ops->variant_count) missing = "variant_count";
    else if (!ops->variant_name) missing = "variant_name";
    else if (!ops->variant_supports) missing = "variant_supports";
    else if (!ops->workspace_size) missing = "workspace_size";
    else if (!ops->forward) missing = "forward";
    else if (!ops->layer_set_weights) missing = "layer_set_weights";
    else if (!ops->layer_set_weights_device) missing = "layer_set_weights_device";
    else if (!ops->host_memory) {
        if (!ops->mem_alloc) missing = "mem_alloc";
        else if (!ops->mem_free) missing = "mem_free";
        else if (!ops->copy_to_device) missing = "copy_to_device";
        else if (!ops->copy_to_host) missing = "copy_to_host";
        else if (!ops->synchronize) missing = "synchronize";
    }
    if (missing) {
        snprintf(reason, reason_len, "%s lacks the %s operation", origin, missing);
        return 0;
    }
    return 1;
}

static void note_searched(search *s, const char *dir, size_t dir_len)
{
    size_t used = strlen(s->searched);
    snprintf(s->searched + used, sizeof s->searched - used, "%s%.*s", used ? ", " : "",
             (int)dir_len, dir);
}

/* Opens the plugin at path. The first file found decides: a broken plugin
 * earlier in the search order is reported rather than silently skipped. */
static void try_file(search *s, const char *path)
{
    s->found = 1;
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *err = dlerror();
        snprintf(s->reason, s->reason_len, "dlopen: %s", err ? err : path);
        return;
    }
    dlerror();
    void *sym = dlsym(handle, SGK_BACKEND_ENTRY);
    if (sym == NULL) {
        snprintf(s->reason, s->reason_len, "no entry point %s in %s", SGK_BACKEND_ENTRY, path);
        dlclose(handle);
        return;
    }
    sgk_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer, POSIX-style */
    const sgk_backend_ops *ops = entry(s->host);
    /* The handle stays open for the life of the process once the entry point
     * has run: the backend may hold state or threads. */
    char origin[SGK_PATH_MAX + 16];
    snprintf(origin, sizeof origin, "plugin %s", path);
    if (sgk_ops_usable(ops, s->name, origin, s->reason, s->reason_len))
        s->ops = ops;
}

static void try_dir(search *s, const char *dir, size_t dir_len)
{
    if (s->found || dir_len == 0)
        return;
    note_searched(s, dir, dir_len);
    char path[SGK_PATH_MAX];
    int n = snprintf(path, sizeof path, "%.*s/%s", (int)dir_len, dir, s->file);
    if (n < 0 || (size_t)n >= sizeof path)
        return;
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    try_file(s, path);
}

/* Any object of libsgk serves: dladdr names the file that holds it. */
static const char k_self_anchor = 0;

/* The folder sgk/ beside libsgk's own file, with symbolic links resolved so
 * that a link to libsgk elsewhere leads back to the plugins installed with
 * it. Returns the length written to dir, 0 when it cannot be known. */
static size_t own_plugin_dir(char *dir, size_t dir_len)
{
    Dl_info info;
    if (dladdr(&k_self_anchor, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == 0)
        return 0;
    char resolved[PATH_MAX];
    const char *file = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    const char *slash = strrchr(file, '/');
    if (slash == NULL)
        return 0;
    int n = snprintf(dir, dir_len, "%.*s/sgk", (int)(slash - file), file);
    return n > 0 && (size_t)n < dir_len ? (size_t)n : 0;
}

static const char *backend_path_env(void)
{
    /* A setuid program must not load code named by its caller's environment. */
#if defined(__GLIBC__)
    return secure_getenv("SGK_BACKEND_PATH");
#else
    return getenv("SGK_BACKEND_PATH");
#endif
}

const sgk_backend_ops *sgk_plugin_load(const char *name, const sgk_host *host,
                                       char *reason, size_t reason_len)
{
    search s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.host = host;
    s.reason = reason;
    s.reason_len = reason_len;
    snprintf(s.file, sizeof s.file, "libsgk-%s.so", name);

    char own[SGK_PATH_MAX];
    try_dir(&s, own, own_plugin_dir(own, sizeof own));
    const char *env = backend_path_env();
    while (env && *env) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        try_dir(&s, env, len);
        env = colon ? colon + 1 : NULL;
    }

    if (!s.found)
        snprintf(reason, reason_len, "plugin %s not found (searched: %s)", s.file,
                 s.searched[0] ? s.searched : "nothing");
    return s.ops;
}
