/* Broken backend plugins for test_plugins, one flaw each, chosen by
 * FAKE_MODE at build time. Each claims the backend named by
 * SGK_FAKE_BACKEND (set by the test before sgk looks for plugins). None of
 * its operations may ever be called: the core must refuse it first. */
#include <stdlib.h>

#include "sgk_backend.h"

#define FAKE_ABI 1       /* built for the next backend ABI */
#define FAKE_NO_ENTRY 2  /* exports no sgk_backend_entry */
#define FAKE_NULL_OPS 3  /* entry returns NULL */
#define FAKE_WRONG_NAME 4 /* table names another backend */
#define FAKE_NO_DEVICE 5 /* loads fine, probe finds no device */
#define FAKE_NO_FORWARD 6 /* table lacks forward */

#ifndef FAKE_MODE
#error "FAKE_MODE must be defined"
#endif

static const sgk_host *g_host;

static sgk_status refuse(void)
{
    return g_host->set_error(SGK_ERR_BACKEND, "fake plugin: an operation was called");
}

static int fake_probe(char *reason, size_t len)
{
#if FAKE_MODE == FAKE_NO_DEVICE
    if (len > 0) {
        const char msg[] = "fake plugin: no device present";
        size_t n = sizeof msg < len ? sizeof msg : len;
        for (size_t i = 0; i + 1 < n; i++)
            reason[i] = msg[i];
        reason[n - 1] = '\0';
    }
    return 0;
#else
    (void)reason;
    (void)len;
    abort(); /* never reached: the core refuses the table before probing */
#endif
}

static sgk_status fake_device_name(int d, char *b, size_t l) { (void)d; (void)b; (void)l; return refuse(); }
static sgk_status fake_ctx_create(int d, const sgk_context_options *o, void **c) { (void)d; (void)o; (void)c; return refuse(); }
static void fake_ctx_destroy(void *c) { (void)c; }
static sgk_status fake_layer_create(void *c, const sgk_layer_desc *d, void **l) { (void)c; (void)d; (void)l; return refuse(); }
static void fake_layer_destroy(void *l) { (void)l; }
static int fake_variant_count(void *l) { (void)l; return 1; }
static const char *fake_variant_name(void *l, int v) { (void)l; (void)v; return "fake"; }
static int fake_variant_supports(void *l, int v, int64_t B, int64_t N, sgk_backend_plan *p) { (void)l; (void)v; (void)B; (void)N; (void)p; return 0; }
static size_t fake_workspace_size(void *l, int v, int64_t B, int64_t N, const sgk_backend_plan *p) { (void)l; (void)v; (void)B; (void)N; (void)p; return 0; }
#if FAKE_MODE != FAKE_NO_FORWARD
static sgk_status fake_forward(void *l, int v, const sgk_backend_plan *p, const sgk_fwd *a) { (void)l; (void)v; (void)p; (void)a; return refuse(); }
#endif
static sgk_status fake_mem_alloc(void *c, size_t n, void **p) { (void)c; (void)n; (void)p; return refuse(); }
static void fake_mem_free(void *c, void *p) { (void)c; (void)p; }
static sgk_status fake_copy(void *c, void *d, const void *s, size_t n) { (void)c; (void)d; (void)s; (void)n; return refuse(); }
static sgk_status fake_sync(void *c) { (void)c; return refuse(); }
static sgk_status fake_set_weights(void *l, const sgk_layer_desc *d) { (void)l; (void)d; return refuse(); }
static sgk_status fake_set_weights_device(void *l, const sgk_layer_desc *d, void *s) { (void)l; (void)d; (void)s; return refuse(); }

static sgk_backend_ops g_ops = {
    .abi_version = FAKE_MODE == FAKE_ABI ? SGK_BACKEND_ABI + 1 : SGK_BACKEND_ABI,
    .max_elements = 1 << 20,
    .host_memory = 0,
    .probe = fake_probe,
    .device_name = fake_device_name,
    .context_create = fake_ctx_create,
    .context_destroy = fake_ctx_destroy,
    .layer_create = fake_layer_create,
    .layer_destroy = fake_layer_destroy,
    .variant_count = fake_variant_count,
    .variant_name = fake_variant_name,
    .variant_supports = fake_variant_supports,
    .workspace_size = fake_workspace_size,
#if FAKE_MODE != FAKE_NO_FORWARD
    .forward = fake_forward,
#endif
    .mem_alloc = fake_mem_alloc,
    .mem_free = fake_mem_free,
    .copy_to_device = fake_copy,
    .copy_to_host = fake_copy,
    .synchronize = fake_sync,
    .layer_set_weights = fake_set_weights,
    .layer_set_weights_device = fake_set_weights_device,
};

#if FAKE_MODE == FAKE_NO_ENTRY
SGK_EXPORT const sgk_backend_ops *sgk_backend_entry_v0(const sgk_host *host);
SGK_EXPORT const sgk_backend_ops *sgk_backend_entry_v0(const sgk_host *host)
#else
SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host);
SGK_EXPORT const sgk_backend_ops *sgk_backend_entry(const sgk_host *host)
#endif
{
    g_host = host;
    const char *name = getenv("SGK_FAKE_BACKEND");
    g_ops.name = FAKE_MODE == FAKE_WRONG_NAME ? "not-this-backend" : (name ? name : "cuda");
#if FAKE_MODE == FAKE_NULL_OPS
    return NULL;
#else
    return &g_ops;
#endif
}
