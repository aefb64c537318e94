#include "machine.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_version.h"
#include "sgk.h"

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    size_t lead = strspn(s, " \t");
    if (lead) memmove(s, s + lead, n - lead + 1);
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        /* x86: "model name"; some ARM kernels only give "Hardware" or "CPU part". */
        if (!strncmp(line, "model name", 10) || !strncmp(line, "Hardware", 8)) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(buf, len, "%s", colon + 1);
                trim(buf);
                break;
            }
        }
    }
    fclose(f);
}

void bench_machine_read(bench_machine *m)
{
    memset(m, 0, sizeof *m);
    if (gethostname(m->host, sizeof m->host - 1) != 0) snprintf(m->host, sizeof m->host, "unknown");
    struct utsname u;
    if (uname(&u) == 0) snprintf(m->os, sizeof m->os, "%.60s %.60s %.60s", u.sysname, u.release, u.machine);
    cpu_model(m->cpu_model, sizeof m->cpu_model);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    m->cpu_threads = n > 0 ? (int)n : 1;
    snprintf(m->sgk_version, sizeof m->sgk_version, "%s", sgk_version());
    snprintf(m->git_commit, sizeof m->git_commit, "%s", SGK_BENCH_GIT);
    trim(m->git_commit);
    if (!m->git_commit[0]) snprintf(m->git_commit, sizeof m->git_commit, "unknown");
}
