#ifndef SGK_BENCH_MACHINE_H
#define SGK_BENCH_MACHINE_H

typedef struct bench_machine {
    char host[128];
    char os[192];
    char cpu_model[192];
    int cpu_threads;     /* logical CPUs online */
    char sgk_version[32];
    char git_commit[64]; /* "unknown" when the build had no git */
} bench_machine;

void bench_machine_read(bench_machine *m);

#endif
