/* sgk-bench --list */
#include <stdio.h>
#include <string.h>

#include "run_internal.h"

int bench_list(const bench_options *opt)
{
    int n = sgk_backend_count();
    for (int i = 0; i < n; i++) {
        sgk_backend_info info;
        if (sgk_backend_get(i, &info) != SGK_OK || !bench_wants_backend(opt, info.name)) continue;
        if (!info.available) {
            printf("%-7s unavailable: %s\n", info.name, info.reason);
            continue;
        }
        printf("%-7s %d device(s)%s\n", info.name, info.device_count,
               module_for(info.name) || !strcmp(info.name, "cpu") ? "" : "  [no timer module: host path]");
        for (int dv = 0; dv < info.device_count; dv++) {
            char dn[256] = "";
            sgk_device_name(info.name, dv, dn, sizeof dn);
            printf("        device %d: %s\n", dv, dn);
        }
        sgk_context *ctx = NULL;
        if (sgk_context_create(info.name, opt->device, NULL, &ctx) != SGK_OK) {
            printf("        context: %s\n", sgk_last_error());
            continue;
        }
        for (int ci = 0; ci < opt->ncases; ci++) {
            const bench_shape *s = &opt->cases[ci].shape;
            sgkt_weights w;
            if (sgkt_weights_alloc(&w, s->D, s->H, s->P) != 0) continue;
            sgkt_rng rng;
            sgkt_rng_seed(&rng, opt->seed);
            sgkt_weights_random(&w, &rng);
            sgk_layer_desc desc;
            sgk_layer_desc_init(&desc);
            sgkt_weights_to_desc(&w, &desc);
            sgk_layer *layer = NULL;
            if (sgk_layer_create(ctx, &desc, &layer) == SGK_OK) {
                const char *names[64];
                int sup[64], count = 0;
                const char *auto_name = NULL;
                sgk_layer_variants(layer, s->B, s->N, names, sup, 64, &count);
                sgk_layer_variant_for(layer, s->B, s->N, &auto_name);
                printf("        %-6s %lld,%lld,%lld,%lld,%lld:", opt->cases[ci].name, (long long)s->B,
                       (long long)s->N, (long long)s->D, (long long)s->H, (long long)s->P);
                for (int v = 0; v < count && v < 64; v++)
                    printf(" %s%s%s", names[v], sup[v] ? "" : "(no)",
                           auto_name && !strcmp(auto_name, names[v]) ? "*" : "");
                printf("\n");
                sgk_layer_destroy(layer);
            } else {
                printf("        %-6s layer: %s\n", opt->cases[ci].name, sgk_last_error());
            }
            sgkt_weights_free(&w);
        }
        sgk_context_destroy(ctx);
    }
    printf("(* the variant sgk picks for that shape; (no) does not support it)\n");
    return 0;
}
