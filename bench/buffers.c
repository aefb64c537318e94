/* Input sets in host or device memory, rotated so that they outgrow the cache. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"

/* Input sets to rotate among so that they do not all sit in the cache. */
static int choose_sets(const bench_options *opt, double cache_bytes, double set_bytes)
{
    if (!opt->rotate || !(cache_bytes > 0) || set_bytes >= 2 * cache_bytes) return 1;
    double want = ceil(3 * cache_bytes / set_bytes);
    double cap_by_memory = floor(2.0 * (1 << 30) / set_bytes);
    if (want > cap_by_memory) want = cap_by_memory;
    if (want > opt->max_sets) want = opt->max_sets;
    return want < 2 ? 1 : (int)want;
}

void buffers_free(backend_run *br, case_buffers *b)
{
    for (int s = 0; s < b->sets; s++) {
        if (br->ops) {
            br->ops->free(br->dev, b->nodes[s]);
            br->ops->free(br->dev, b->pair[s]);
            br->ops->free(br->dev, b->mask[s]);
            br->ops->free(br->dev, b->out[s]);
        } else if (b->out && b->out[s] != b->host_out) {
            free(b->out[s]);
        }
    }
    if (br->ops && b->ws) br->ops->free(br->dev, b->ws);
    else free(b->ws);
    free(b->nodes);
    free(b->pair);
    free(b->mask);
    free(b->out);
    free(b->host_out);
    free(b->nan_out);
    free(b->wide_out);
    memset(b, 0, sizeof *b);
}

/* Host buffers (cpu, host path) or device buffers with every set uploaded. */
int buffers_alloc(backend_run *br, const bench_shape *s, const case_data *cd, size_t ws_bytes,
                         case_buffers *b, char *err, size_t err_len)
{
    const bench_device_rec *d = &br->res->devices[br->rec];
    const size_t es = (size_t)bench_dtype_bytes(br->opt), wide = br->opt->dtype != SGK_DTYPE_F32;
    size_t out_n = (size_t)(s->B * s->N * s->D);
    size_t nodes_b = out_n * es;
    size_t pair_b = (size_t)(s->B * s->N * s->N * s->P) * es;
    size_t mask_b = (size_t)(s->B * s->N * s->N) * sgkt_mask_elem_size(br->opt->mask_type);
    memset(b, 0, sizeof *b);
    b->sets = br->ops ? choose_sets(br->opt, d->cache_bytes, (double)(2 * nodes_b + pair_b + mask_b)) : 1;
    b->nodes = calloc((size_t)b->sets, sizeof(void *));
    b->pair = calloc((size_t)b->sets, sizeof(void *));
    b->mask = calloc((size_t)b->sets, sizeof(void *));
    b->out = calloc((size_t)b->sets, sizeof(void *));
    b->host_out = malloc(nodes_b);
    b->nan_out = malloc(nodes_b);
    b->wide_out = wide ? malloc(out_n * sizeof(float)) : NULL;
    b->ws_bytes = ws_bytes;
    if (!b->nodes || !b->pair || !b->mask || !b->out || !b->host_out || !b->nan_out || (wide && !b->wide_out)) {
        int sets = b->sets;
        b->sets = 0;
        buffers_free(br, b);
        snprintf(err, err_len, "out of host memory for %d input sets", sets);
        return -1;
    }
    if (wide)
        for (size_t i = 0; i < out_n; i++) /* a quiet NaN of either 16-bit type */
            ((uint16_t *)b->nan_out)[i] = br->opt->dtype == SGK_DTYPE_BF16 ? 0x7fc1 : 0x7e01;
    else
        sgkt_poison_nan(b->nan_out, out_n);
    const void *nodes = wide ? (const void *)cd->h.nodes : cd->in.nodes;
    const void *pair = wide ? (const void *)cd->h.pair : cd->in.pair_feats;
    if (!br->ops) {
        b->nodes[0] = (void *)nodes;
        b->pair[0] = (void *)pair;
        b->mask[0] = cd->in.edge_mask;
        b->out[0] = b->host_out;
        if (ws_bytes && !(b->ws = malloc(ws_bytes))) {
            buffers_free(br, b);
            snprintf(err, err_len, "out of host memory for a %zu-byte workspace", ws_bytes);
            return -1;
        }
        return 0;
    }
    const bench_dev_ops *o = br->ops;
    int rc = 0;
    for (int k = 0; k < b->sets && rc == 0; k++) {
        rc = o->alloc(br->dev, nodes_b, &b->nodes[k]);
        if (rc == 0) rc = o->alloc(br->dev, pair_b, &b->pair[k]);
        if (rc == 0) rc = o->alloc(br->dev, mask_b, &b->mask[k]);
        if (rc == 0) rc = o->alloc(br->dev, nodes_b, &b->out[k]);
        if (rc == 0) rc = o->upload(br->dev, b->nodes[k], nodes, nodes_b);
        if (rc == 0) rc = o->upload(br->dev, b->pair[k], pair, pair_b);
        if (rc == 0) rc = o->upload(br->dev, b->mask[k], cd->in.edge_mask, mask_b);
    }
    if (rc == 0 && ws_bytes) rc = o->alloc(br->dev, ws_bytes, &b->ws);
    if (rc != 0) {
        snprintf(err, err_len, "device buffers for %d input sets: %s", b->sets, o->error(br->dev));
        buffers_free(br, b);
        return -1;
    }
    return 0;
}
