#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sgkt_backend_arg(int argc, char **argv)
{
    if (argc > 1 && argv[1] && argv[1][0])
        return argv[1];
    const char *env = getenv("SGK_TEST_BACKEND");
    return env && *env ? env : "cpu";
}

int sgkt_backend_usable(const char *backend, sgk_backend_info *info)
{
    sgk_backend_info local;
    if (!info)
        info = &local;
    sgk_status st = sgk_backend_find(backend, info);
    if (st != SGK_OK) {
        /* a name sgk does not know is a mistake in the test setup, not a skip */
        printf("ERROR %s: %s (%s)\n", backend, sgk_status_string(st), sgk_last_error());
        return 1;
    }
    if (!info->available) {
        printf("SKIP %s: %s\n", backend, info->reason && *info->reason ? info->reason : "unavailable");
        return SGKT_EXIT_SKIP;
    }
    /* SGK_CPU_ISA asks the cpu backend for one instance of its kernels; a
     * processor without that instruction set would run another, which is
     * not what was asked to be tested */
    const char *isa = getenv("SGK_CPU_ISA");
    if (strcmp(backend, "cpu") == 0 && isa && *isa) {
        char name[320], want[64];
        snprintf(want, sizeof want, "[%s]", isa);
        if (sgk_device_name("cpu", 0, name, sizeof name) != SGK_OK || !strstr(name, want)) {
            printf("SKIP %s: SGK_CPU_ISA=%s, but its kernels run as \"%s\"\n", backend, isa, name);
            return SGKT_EXIT_SKIP;
        }
    }
    return 0;
}

int sgkt_test_devices(int devices[2])
{
    devices[0] = 0;
    const char *env = getenv("SGK_TEST_DEVICE");
    if (env && *env) {
        int d = atoi(env);
        if (d != 0) {
            devices[1] = d;
            return 2;
        }
    }
    return 1;
}

int sgkt_prepare_reference(sgkt_prepared *p)
{
    sgk_ref_layer L;
    sgkt_weights_to_ref(&p->w, &L);
    return sgk_ref_forward(&L, p->in.B, p->in.N, p->in.nodes, p->in.pair_feats, p->in.edge_mask,
                           p->in.mask_type, p->ref, NULL);
}

int sgkt_prepare(sgkt_prepared *p, const sgkt_case *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->seed = seed;
    sgkt_rng rng;
    sgkt_rng_seed(&rng, seed);
    if (sgkt_weights_alloc(&p->w, c->D, c->H, c->P) ||
        sgkt_inputs_alloc(&p->in, c->B, c->N, c->D, c->P, c->mask_type))
        goto fail;
    sgkt_weights_random(&p->w, &rng);
    sgkt_inputs_random(&p->in, &rng, c->mask, c->density);
    if (c->flags & SGKT_CASE_LN_OFFSET)
        sgkt_nodes_offset(&p->in, &rng);
    p->n_out = (size_t)(c->B * c->N * c->D);
    p->ref = malloc(p->n_out * sizeof(double));
    if (!p->ref || sgkt_prepare_reference(p))
        goto fail;
    return 0;
fail:
    sgkt_prepared_free(p);
    return -1;
}

void sgkt_prepared_free(sgkt_prepared *p)
{
    sgkt_weights_free(&p->w);
    sgkt_inputs_free(&p->in);
    free(p->ref);
    p->ref = NULL;
}

sgk_status sgkt_layer_from_weights(sgk_context *ctx, const sgkt_weights *w, sgk_layer **layer)
{
    sgk_layer_desc desc;
    sgk_layer_desc_init(&desc);
    sgkt_weights_to_desc(w, &desc);
    return sgk_layer_create(ctx, &desc, layer);
}

static int all_nan(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] == x[i])
            return 0;
    return 1;
}

sgkt_run sgkt_run_forward(sgk_layer *layer, const sgkt_inputs *in, int device_api)
{
    sgkt_run r = {SGK_ERR_OUT_OF_MEMORY, NULL, 0, 0};
    size_t n = (size_t)(in->B * in->N * in->D), bytes = n * sizeof(float);
    r.out = sgkt_guarded_alloc(bytes);
    if (!r.out)
        return r;
    sgkt_poison_nan(r.out, n);
    int ws_guard = 1;
    if (!device_api) {
        r.status = sgk_forward(layer, in->B, in->N, in->nodes, in->pair_feats, in->edge_mask,
                               in->mask_type, r.out);
    } else {
        size_t ws = 0;
        r.status = sgk_workspace_size(layer, in->B, in->N, &ws);
        void *work = NULL;
        if (r.status == SGK_OK && ws > 0) {
            work = sgkt_guarded_alloc(ws);
            if (!work)
                r.status = SGK_ERR_OUT_OF_MEMORY;
            else
                memset(work, 0xCD, ws);
        }
        if (r.status == SGK_OK)
            r.status = sgk_forward_device(layer, in->B, in->N, in->nodes, in->pair_feats,
                                          in->edge_mask, in->mask_type, r.out, work, ws, NULL);
        if (work) {
            ws_guard = sgkt_guard_ok(work, ws);
            sgkt_guarded_free(work);
        }
    }
    r.guard_ok = ws_guard && sgkt_guard_ok(r.out, bytes);
    r.untouched = all_nan(r.out, n);
    return r;
}

void sgkt_run_free(sgkt_run *r)
{
    sgkt_guarded_free(r->out);
    r->out = NULL;
}

int sgkt_masked_rows_exact(const sgkt_inputs *in, const float *out)
{
    int64_t N = in->N, D = in->D;
    for (int64_t r = 0; r < in->B * N; r++) {
        int any = 0;
        for (int64_t j = 0; j < N && !any; j++)
            any = sgkt_mask_is_edge(in->edge_mask, in->mask_type, (size_t)(r * N + j));
        if (!any && memcmp(out + r * D, in->nodes + r * D, (size_t)D * sizeof(float)) != 0)
            return 0;
    }
    return 1;
}

int sgkt_equals_nodes(const sgkt_inputs *in, const float *out)
{
    return memcmp(out, in->nodes, (size_t)(in->B * in->N * in->D) * sizeof(float)) == 0;
}

sgk_context *sgkt_open_context(const char *backend, int device)
{
    sgk_context *ctx = NULL;
    /* SGK_TEST_GROUP_SIZE: the GPU backends' group size cap, so that the
     * table runs at wave-sized groups (32, 64) as on other hardware */
    sgk_context_options opt;
    sgk_context_options_init(&opt);
    const char *group = getenv("SGK_TEST_GROUP_SIZE");
    if (group)
        opt.gpu_group_size = atoi(group);
    sgk_status st = sgk_context_create(backend, device, &opt, &ctx);
    if (st != SGK_OK)
        printf("FAIL sgk_context_create(%s, %d): %s: %s\n", backend, device, sgk_status_string(st),
               sgk_last_error());
    return ctx;
}

const sgkt_case *sgkt_find_case(const char *name)
{
    for (int i = 0; i < sgkt_case_count; i++)
        if (strcmp(sgkt_cases[i].name, name) == 0)
            return &sgkt_cases[i];
    return NULL;
}
