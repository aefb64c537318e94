#include "host_copy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t bytes;
    int reps;
} copy_job;

static void *copy_worker(void *arg)
{
    copy_job *j = arg;
    for (int r = 0; r < j->reps; r++) memcpy(j->dst, j->src, j->bytes);
    return NULL;
}

double bench_host_copy_gbps(int threads, double quick)
{
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    size_t bytes = (size_t)(quick ? 64 : 256) << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    copy_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double best = 0;
    if (!src || !dst || !jobs || !tid) goto done;
    memset(src, 1, bytes);
    memset(dst, 2, bytes); /* touch every page before timing */
    size_t part = bytes / (size_t)threads / 64 * 64;
    for (int rep = 0; rep < 4; rep++) {
        int started = 0;
        double t0 = bench_now();
        for (int t = 0; t < threads; t++) {
            jobs[t].dst = dst + (size_t)t * part;
            jobs[t].src = src + (size_t)t * part;
            jobs[t].bytes = part;
            jobs[t].reps = 2;
            if (pthread_create(&tid[t], NULL, copy_worker, &jobs[t]) != 0) break;
            started++;
        }
        for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
        double s = bench_now() - t0;
        if (started != threads) break;
        double gbps = 2.0 * 2.0 * (double)part * threads / s / 1e9;
        if (gbps > best) best = gbps;
    }
done:
    free(src);
    free(dst);
    free(jobs);
    free(tid);
    return best;
}
