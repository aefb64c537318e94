/* Broken plugins: a plugin file that is missing, holds random bytes, is cut
 * short, was built for another backend ABI, has no entry point, returns no
 * table, names another backend, finds no device or lacks an operation. Each
 * must make only that backend unavailable, with a reason saying which of
 * these it is, while the cpu backend keeps working in the same process. The
 * registry is built once per process, so each scenario is one run:
 *
 *   test_plugins SCENARIO BACKEND FAKE_PLUGIN|- BUILD_ROOT
 *
 * The plugin is put in a fresh directory placed first in SGK_BACKEND_PATH.
 * Exits 0 when all is as it should be, 77 when the scenario cannot be set up
 * here, 1 otherwise. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rel.h"

static int failures;

static void check(int ok, const char *fmt, const char *arg)
{
    if (!ok) {
        fprintf(stderr, "plugins: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
        failures++;
    }
}

static int copy_file(const char *from, const char *to, long limit)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    int ok = in && out;
    char buf[4096];
    long total = 0;
    size_t n;
    while (ok && (limit < 0 || total < limit) && (n = fread(buf, 1, sizeof buf, in)) > 0) {
        if (limit >= 0 && total + (long)n > limit)
            n = (size_t)(limit - total);
        ok = fwrite(buf, 1, n, out) == n;
        total += (long)n;
    }
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = 0;
    return ok;
}

static int write_random(const char *to, size_t bytes)
{
    FILE *out = fopen(to, "wb");
    if (!out)
        return 0;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, 0x5eed);
    int ok = 1;
    for (size_t i = 0; i < bytes && ok; i++)
        ok = fputc((int)(sgkt_rng_u64(&rng) & 0xff), out) != EOF;
    return fclose(out) == 0 && ok;
}

/* The scenario's file and the words the reason must contain. */
typedef struct scenario {
    const char *name;
    const char *needle;
    int uses_plugin;
} scenario;

static const scenario k_scenarios[] = {
    {"missing", "not found", 0},
    {"corrupt", "dlopen", 0},
    {"truncated", "dlopen", 1},
    {"abi", "ABI", 1},
    {"noentry", "no entry point sgk_backend_entry", 1},
    {"nullops", "returned NULL", 1},
    {"wrongname", "not-this-backend", 1},
    {"nodevice", "fake plugin: no device present", 1},
    {"noforward", "lacks the forward operation", 1},
};

/* The cpu backend computes the right thing in this process. */
static void cpu_still_works(void)
{
    rel_fixture f;
    rel_fixture_init(&f, "cpu", 2, 2, 7, 16, 4, 4, SGK_MASK_F32, 81);
    sgk_ref_layer ref;
    sgkt_weights_to_ref(&f.w, &ref);
    double *expect = malloc(f.out_floats * sizeof(double));
    float *out = malloc(f.out_floats * sizeof(float));
    if (!expect || !out)
        abort();
    sgk_ref_forward(&ref, f.in.B, f.in.N, f.in.nodes, f.in.pair_feats, f.in.edge_mask,
                    f.in.mask_type, expect, NULL);
    sgkt_poison_nan(out, f.out_floats);
    rel_forward_ok(f.layer, &f.in, out);
    sgkt_error e = sgkt_compare(out, expect, f.out_floats);
    check(sgkt_error_ok(&e, SGKT_REL_L2_TOL, SGKT_MAX_ABS_TOL), "cpu result off the reference%s",
          "");
    printf("plugins: cpu forward in the same process: rel_l2 %.3g\n", e.rel_l2);
    free(expect);
    free(out);
    rel_fixture_free(&f);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: test_plugins SCENARIO BACKEND FAKE_PLUGIN|- BUILD_ROOT\n");
        return 2;
    }
    const char *name = argv[1], *backend = argv[2], *plugin = argv[3], *root = argv[4];
    const scenario *sc = NULL;
    for (size_t i = 0; i < sizeof k_scenarios / sizeof k_scenarios[0]; i++)
        if (strcmp(k_scenarios[i].name, name) == 0)
            sc = &k_scenarios[i];
    if (!sc || strcmp(backend, "cpu") == 0) {
        fprintf(stderr, "plugins: unknown scenario %s or cpu as the plugin backend\n", name);
        return 2;
    }

    char built[4096];
    snprintf(built, sizeof built, "%s/backends/%s/libsgk-%s.so", root, backend, backend);
    struct stat st;
    if (strcmp(name, "missing") == 0 && stat(built, &st) == 0) {
        printf("skip: %s exists, so the %s plugin cannot be missing in this build\n", built,
               backend);
        return REL_SKIP;
    }

    char dir[] = "/tmp/sgk-plugins-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char file[4200];
    snprintf(file, sizeof file, "%s/libsgk-%s.so", dir, backend);
    int made = 1;
    if (strcmp(name, "corrupt") == 0)
        made = write_random(file, 4096);
    else if (strcmp(name, "truncated") == 0)
        made = copy_file(plugin, file, 200);
    else if (sc->uses_plugin)
        made = copy_file(plugin, file, -1);
    if (!made) {
        fprintf(stderr, "plugins: cannot write %s from %s: %s\n", file, plugin, strerror(errno));
        return 1;
    }

    /* Set before the first sgk call: that is when the registry is built. */
    const char *old = getenv("SGK_BACKEND_PATH");
    char path[8400];
    snprintf(path, sizeof path, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
    setenv("SGK_BACKEND_PATH", path, 1);
    setenv("SGK_FAKE_BACKEND", backend, 1);

    sgk_backend_info info;
    for (int i = 0; i < sgk_backend_count(); i++) {
        if (sgk_backend_get(i, &info) != SGK_OK)
            failures++;
        else
            printf("plugins: backend %s available=%d devices=%d reason: %s\n", info.name,
                   info.available, info.device_count, info.reason);
    }
    if (sgk_backend_find(backend, &info) != SGK_OK) {
        fprintf(stderr, "plugins: sgk_backend_find(%s): %s\n", backend, sgk_last_error());
        return 1;
    }
    check(!info.available, "the broken %s plugin was taken as available", backend);
    check(info.device_count == 0, "an unavailable %s backend reports devices", backend);
    check(strstr(info.reason, sc->needle) != NULL, "reason does not say \"%s\"", sc->needle);
    if (strcmp(name, "missing") == 0)
        check(strstr(info.reason, dir) != NULL, "reason does not list the directory searched (%s)",
              dir);
    else
        check(strstr(info.reason, file) != NULL || strcmp(name, "nodevice") == 0,
              "reason does not name the file %s", file);

    sgk_context *ctx = (sgk_context *)(uintptr_t)0x5a5a;
    sgk_status s = sgk_context_create(backend, 0, NULL, &ctx);
    check(s == SGK_ERR_BACKEND_UNAVAILABLE, "sgk_context_create on %s is not BACKEND_UNAVAILABLE",
          backend);
    check(strstr(sgk_last_error(), sc->needle) != NULL, "its message lacks the reason: %s",
          sgk_last_error());
    check(ctx == (sgk_context *)(uintptr_t)0x5a5a, "it wrote its out handle%s", "");
    char buf[64];
    check(sgk_device_name(backend, 0, buf, sizeof buf) == SGK_ERR_BACKEND_UNAVAILABLE,
          "sgk_device_name on %s is not BACKEND_UNAVAILABLE", backend);

    sgk_backend_info cpu;
    check(sgk_backend_find("cpu", &cpu) == SGK_OK && cpu.available, "cpu unavailable%s", "");
    cpu_still_works();

    printf("[figure] plugins scenario=%s backend=%s available=%d result=%s reason=\"%s\"\n", name,
           backend, info.available, failures ? "FAILED" : "ok", info.reason);
    unlink(file);
    rmdir(dir);
    return failures ? 1 : 0;
}
