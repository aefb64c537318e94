/* sgk-bench: times the sgk layer on every backend and variant and checks
 * every timed configuration against the double-precision reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int main(int argc, char **argv)
{
    bench_options opt;
    int rc = bench_parse_options(argc, argv, &opt);
    if (rc == 1) return 0;
    if (rc != 0) return 2;
    if (opt.list) return bench_list(&opt);

    bench_results res;
    memset(&res, 0, sizeof res);
    rc = bench_run(&opt, &res);
    if (rc == 0) {
        /* With the JSON on stdout the table still reaches a person, on stderr. */
        int json_stdout = opt.json_path && !strcmp(opt.json_path, "-");
        bench_print_table(json_stdout ? stderr : stdout, &opt, &res);
        if (opt.json_path && bench_write_json(&opt, &res, opt.json_path) != 0) {
            fprintf(stderr, "sgk-bench: cannot write %s\n", opt.json_path);
            rc = 2;
        }
    }
    int failed = 0;
    for (int i = 0; i < res.nrows; i++)
        if (strcmp(res.rows[i].status, "ok") != 0 && strcmp(res.rows[i].status, "unchecked") != 0) failed++;
    if (rc == 0 && res.nrows == 0) {
        fprintf(stderr, "sgk-bench: nothing was run (see the notes above)\n");
        rc = 2;
    } else if (rc == 0 && failed) {
        fprintf(stderr, "sgk-bench: %d of %d rows failed\n", failed, res.nrows);
        rc = 1;
    } else if (rc == 0 && res.setup_errors) {
        rc = 2;
    }
    free(res.rows);
    free(res.devices);
    return rc;
}
