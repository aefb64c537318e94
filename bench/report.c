/* The two outputs: a table for people and JSON for bench/compare. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ---- table ------------------------------------------------------------ */

#define NCOLS 15
#define CELL 64

static const char *const headers[NCOLS] = {"backend", "device", "variant", "shape", "mode", "sets",
                                           "µs/call", "[min, max]", "GFLOP/s", "GB/s", "FFMA floor µs",
                                           "copy floor µs", "floor%", "rel L2 / max abs", "status"};
static const int right_aligned[NCOLS] = {0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0};

/* Display width of UTF-8 text: one column per code point. */
static int text_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

static void fmt_us(char *buf, size_t len, double us)
{
    if (isnan(us)) snprintf(buf, len, "-");
    else if (us < 1) snprintf(buf, len, "%.3f", us);
    else if (us < 100) snprintf(buf, len, "%.2f", us);
    else if (us < 10000) snprintf(buf, len, "%.1f", us);
    else snprintf(buf, len, "%.0f", us);
}

static void fmt_rate(char *buf, size_t len, double x)
{
    if (isnan(x) || isinf(x)) snprintf(buf, len, "-");
    else if (x < 10) snprintf(buf, len, "%.2f", x);
    else snprintf(buf, len, "%.1f", x);
}

static void row_cells(const bench_results *res, const bench_row *r, char cells[NCOLS][CELL])
{
    snprintf(cells[0], CELL, "%s", r->backend);
    /* --device all: the index tells devices of one kind apart */
    char name[sizeof r->device_name + 16];
    if (!strcmp(r->mode, "concurrent"))
        snprintf(name, sizeof name, "%d: %s", res->devices[r->device_rec].device, r->device_name);
    else
        snprintf(name, sizeof name, "%s", r->device_name);
    /* 28 characters, keeping a trailing "[...]" (the cpu backend's
     * instruction set) when the name is cut */
    const char *tag = strrchr(name, '[');
    const int n = (int)strlen(name), t = tag ? (int)strlen(tag) : 0;
    if (n > 28 && tag && tag[t - 1] == ']' && t < 20)
        snprintf(cells[1], CELL, "%.*s %.19s", 27 - t, name, tag);
    else
        snprintf(cells[1], CELL, "%.28s", name);
    snprintf(cells[2], CELL, "%.60s%s", r->variant, r->is_auto ? "*" : "");
    if (strcmp(r->preset, "custom") != 0) snprintf(cells[3], CELL, "%s", r->preset);
    else
        snprintf(cells[3], CELL, "%lld,%lld,%lld,%lld,%lld", (long long)r->shape.B, (long long)r->shape.N,
                 (long long)r->shape.D, (long long)r->shape.H, (long long)r->shape.P);
    snprintf(cells[4], CELL, "%s", r->mode);
    snprintf(cells[5], CELL, "%d", r->input_sets);
    fmt_us(cells[6], CELL, r->us_median);
    if (isnan(r->us_min)) snprintf(cells[7], CELL, "-");
    else {
        char lo[24], hi[24];
        fmt_us(lo, sizeof lo, r->us_min);
        fmt_us(hi, sizeof hi, r->us_max);
        snprintf(cells[7], CELL, "[%s, %s]", lo, hi);
    }
    fmt_rate(cells[8], CELL, r->gflops);
    fmt_rate(cells[9], CELL, r->gbps);
    fmt_us(cells[10], CELL, r->tc_floor_us > 0 ? r->tc_floor_us : r->ffma_floor_us);
    fmt_us(cells[11], CELL, r->copy_floor_us);
    if (isnan(r->floor_share)) snprintf(cells[12], CELL, "-");
    else snprintf(cells[12], CELL, "%.1f%% %s", 100 * r->floor_share, r->floor_bound);
    if (r->checked) snprintf(cells[13], CELL, "%.1e / %.1e", r->rel_l2, r->max_abs);
    else snprintf(cells[13], CELL, "-");
    snprintf(cells[14], CELL, "%s", r->status);
}

static void print_cell(FILE *out, const char *text, int width, int right, int last)
{
    int pad = width - text_width(text);
    if (right) fprintf(out, "%*s%s", pad, "", text);
    else fprintf(out, "%s%*s", text, last ? 0 : pad, "");
    fputs(last ? "\n" : "  ", out);
}

static void print_device(FILE *out, const bench_options *opt, const bench_device_rec *d)
{
    fprintf(out, "%s %d: %s", d->backend, d->device, d->name);
    if (d->driver[0]) fprintf(out, ", driver %s", d->driver);
    if (d->threads) fprintf(out, ", %d threads", d->threads);
    fprintf(out, "\n    timing: %s\n", d->clock);
    if (d->timer_note[0]) fprintf(out, "    note: %s\n", d->timer_note);
    if (!isnan(d->launch_us)) {
        fprintf(out, "    empty kernel: %.2f µs back to back", d->launch_us);
        if (!isnan(d->graph_launch_us)) fprintf(out, ", %.2f µs per graph replay", d->graph_launch_us);
        fprintf(out, "\n");
    }
    if (!isnan(d->copy_gbps))
        fprintf(out, "    copy bandwidth (copy floor): %.1f GB/s read + write (%s)\n", d->copy_gbps, d->copy_source);
    else fprintf(out, "    copy bandwidth (copy floor): %s\n", d->copy_source);
    if (d->peak_gflops > 0)
        fprintf(out, "    fp32 FMA peak (FFMA floor): %.0f GFLOP/s (%s)\n", d->peak_gflops, d->peak_source);
    else fprintf(out, "    fp32 FMA peak (FFMA floor): %s\n", d->peak_source);
    if (opt->dtype != SGK_DTYPE_F32 && d->peak16_gflops > 0)
        fprintf(out, "    %s tensor-core peak (TC floor): %.0f GFLOP/s (%s)\n", bench_dtype_name(opt),
                d->peak16_gflops, d->peak16_source);
    else if (opt->dtype != SGK_DTYPE_F32)
        fprintf(out, "    %s tensor-core peak (TC floor): %s; rows take the FFMA floor\n", bench_dtype_name(opt),
                d->peak16_source[0] ? d->peak16_source : "unknown");
    if (d->cache_bytes > 0 && opt->rotate)
        fprintf(out, "    L2 %.1f MB: shapes whose inputs and output take less than %.1f MB rotate among input "
               "sets (column 'sets')\n", d->cache_bytes / 1e6, 2 * d->cache_bytes / 1e6);
}

void bench_print_table(FILE *out, const bench_options *opt, const bench_results *res)
{
    const bench_machine *m = &res->machine;
    fprintf(out, "sgk-bench: sgk %s (git %s) on %s, %s, %d CPU threads\n", m->sgk_version, m->git_commit, m->host,
           m->cpu_model, m->cpu_threads);
    fprintf(out, "timing: warm-up >= %.0f ms, %d repeats of >= %.0f ms each; %s; mask %s\n", opt->warmup_s * 1e3,
           opt->repeats, opt->min_repeat_s * 1e3, opt->dtype == SGK_DTYPE_F32 ? "fp32" : bench_dtype_name(opt),
           opt->mask_type == SGK_MASK_U8 ? "u8" : "f32");
    if (opt->quick)
        fprintf(out, "QUICK RUN (--quick): repeats of >= 10 ms instead of 100 ms; the figures are rough\n");
    /* Four to a line: the sweep makes a single line too long to read. */
    for (int c = 0; c < opt->ncases; c++) {
        const bench_shape *s = &opt->cases[c].shape;
        fprintf(out, "%s%s B=%lld N=%lld D=%lld H=%lld P=%lld (%.3g GFLOP, %.3g MB)",
                c == 0 ? "shapes: " : c % 4 ? "; " : ";\n        ", opt->cases[c].name, (long long)s->B,
                (long long)s->N, (long long)s->D, (long long)s->H, (long long)s->P, bench_flops(s) / 1e9,
                bench_bytes(s, opt->mask_type == SGK_MASK_U8 ? 1 : 4, bench_dtype_bytes(opt)) / 1e6);
    }
    fprintf(out, "\n\n");
    for (int i = 0; i < res->ndevices; i++) print_device(out, opt, &res->devices[i]);
    if (res->ndevices) fputs("\n", out);

    int width[NCOLS];
    /* a 16-bit run's compute floor is its TC floor (bench_row.tc_floor_us) */
    const char *head[NCOLS];
    for (int c = 0; c < NCOLS; c++) head[c] = headers[c];
    if (opt->dtype != SGK_DTYPE_F32) head[10] = "TC floor µs";
    for (int c = 0; c < NCOLS; c++) width[c] = text_width(head[c]);
    char cells[NCOLS][CELL];
    for (int i = 0; i < res->nrows; i++) {
        row_cells(res, &res->rows[i], cells);
        for (int c = 0; c < NCOLS; c++)
            if (text_width(cells[c]) > width[c]) width[c] = text_width(cells[c]);
    }
    for (int c = 0; c < NCOLS; c++) print_cell(out, head[c], width[c], right_aligned[c], c == NCOLS - 1);
    for (int i = 0; i < res->nrows; i++) {
        row_cells(res, &res->rows[i], cells);
        for (int c = 0; c < NCOLS; c++) print_cell(out, cells[c], width[c], right_aligned[c], c == NCOLS - 1);
    }
    int notes = 0;
    for (int i = 0; i < res->nrows; i++)
        if (res->rows[i].note[0]) {
            if (!notes++) fputs("\n", out);
            const bench_row *r = &res->rows[i];
            fprintf(out, "%s %s %s %s: %s\n", r->backend, r->preset, r->variant, r->mode, r->note);
        }
    fprintf(out, "\n* the variant sgk picks by itself for that shape. FFMA floor = FLOP / fp32 FMA peak, copy floor = "
           "bytes / copy bandwidth, in µs; floor = max(FFMA floor, copy floor, launch cost); floor%% = floor / "
           "median (100%% = at the floor), with its bound.%s Check: %s against the double reference%s.\n",
           opt->dtype == SGK_DTYPE_F32 ? ""
                                       : " TC floor = FLOP / the dtype's dense tensor-core peak "
                                         "(the FFMA floor where the device's is unknown), in the FFMA floor's "
                                         "place.",
           opt->dtype == SGK_DTYPE_F32 ? "rel L2 <= 1e-05 and max abs <= 1e-04" : "rel L2 <= 1e-02",
           opt->dtype == SGK_DTYPE_F32 ? "" : " on the same rounded weights and inputs; bytes at 2 an element");
    for (int i = 0; i < res->nrows; i++)
        if (!strcmp(res->rows[i].mode, "aggregate")) {
            fputs("Modes concurrent and aggregate (--device all): every device at once, one thread each, running "
                  "the variant sgk picks for the same windows (monotonic clock, each ending when its device has "
                  "finished); a device's µs/call = its window / its calls; aggregate µs/call = 1 / the sum of "
                  "the devices' calls per µs, its GFLOP/s the sum of theirs, and no floor.\n",
                  out);
            break;
        }
    for (int i = 0; i < res->nrows; i++)
        if (!strcmp(res->rows[i].mode, "backward")) {
            fputs("Mode backward (--train): sgk_backward_device, its work counted as twice the forward's; check: "
                  "the nodes gradient within rel L2 1e-4 of the double reference backward (max abs shown).\n",
                  out);
            break;
        }
    if (res->notes[0]) fputs(res->notes, out);
}

/* ---- JSON ------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double x)
{
    if (isnan(x) || isinf(x)) fputs("null", f);
    else fprintf(f, "%.9g", x);
}

/* sep, then "key": and the value */
static void json_key(FILE *f, const char *sep, const char *key)
{
    fprintf(f, "%s\"%s\": ", sep, key);
}

static void json_kstr(FILE *f, const char *sep, const char *key, const char *v)
{
    json_key(f, sep, key);
    json_str(f, v);
}

static void json_knum(FILE *f, const char *sep, const char *key, double x)
{
    json_key(f, sep, key);
    json_num(f, x);
}

static void json_kbool(FILE *f, const char *sep, const char *key, int v)
{
    json_key(f, sep, key);
    fputs(v ? "true" : "false", f);
}

static void json_device(FILE *f, const bench_device_rec *d)
{
    json_kstr(f, "    {", "backend", d->backend);
    fprintf(f, ", \"device\": %d", d->device);
    json_kstr(f, ", ", "name", d->name);
    json_kstr(f, ", ", "driver", d->driver);
    json_kstr(f, ",\n     ", "clock", d->clock);
    json_kstr(f, ", ", "timer_note", d->timer_note);
    json_knum(f, ",\n     ", "launch_us", d->launch_us);
    json_knum(f, ", ", "graph_launch_us", d->graph_launch_us);
    json_knum(f, ", ", "copy_gbps", d->copy_gbps);
    json_kstr(f, ", ", "copy_how", d->copy_how);
    json_kstr(f, ",\n     ", "copy_source", d->copy_source);
    json_knum(f, ",\n     ", "peak_gflops", d->peak_gflops > 0 ? d->peak_gflops : NAN);
    json_kstr(f, ", ", "peak_source", d->peak_source);
    json_knum(f, ",\n     ", "peak16_gflops", d->peak16_gflops > 0 ? d->peak16_gflops : NAN);
    json_kstr(f, ", ", "peak16_source", d->peak16_source);
    json_knum(f, ", ", "cache_bytes", d->cache_bytes > 0 ? d->cache_bytes : NAN);
    fprintf(f, ", \"threads\": %d}", d->threads);
}

static void json_row(FILE *f, const bench_results *res, const bench_row *r)
{
    json_kstr(f, "    {", "backend", r->backend);
    if (r->device_rec < 0) /* --device all's aggregate row: every device of the backend */
        fputs(", \"device\": \"all\"", f);
    else
        fprintf(f, ", \"device\": %d", res->devices[r->device_rec].device);
    json_kstr(f, ", ", "device_name", r->device_name);
    json_kstr(f, ", ", "variant", r->variant);
    json_kbool(f, ", ", "auto", r->is_auto);
    json_kstr(f, ",\n     ", "preset", r->preset);
    fprintf(f, ", \"B\": %lld, \"N\": %lld, \"D\": %lld, \"H\": %lld, \"P\": %lld",
            (long long)r->shape.B, (long long)r->shape.N, (long long)r->shape.D, (long long)r->shape.H,
            (long long)r->shape.P);
    json_kstr(f, ", ", "mode", r->mode);
    fprintf(f, ",\n     \"input_sets\": %d, \"iters_per_repeat\": %ld, \"repeats\": %d", r->input_sets, r->iters,
            r->repeats);
    json_knum(f, ",\n     ", "us_median", r->us_median);
    json_knum(f, ", ", "us_min", r->us_min);
    json_knum(f, ", ", "us_max", r->us_max);
    fprintf(f, ",\n     \"flop\": %.0f, \"bytes\": %.0f", r->flops, r->bytes);
    json_knum(f, ", ", "gflops", r->gflops);
    json_knum(f, ", ", "gbps", r->gbps);
    json_knum(f, ",\n     ", "ffma_floor_us", r->ffma_floor_us);
    json_knum(f, ", ", "copy_floor_us", r->copy_floor_us);
    json_knum(f, ", ", "tc_floor_us", r->tc_floor_us);
    json_knum(f, ", ", "floor_us", r->floor_us);
    if (r->floor_bound[0])
        json_kstr(f, ", ", "floor_bound", r->floor_bound);
    else
        fputs(", \"floor_bound\": null", f);
    json_knum(f, ", ", "floor_share", r->floor_share);
    json_kbool(f, ",\n     ", "checked", r->checked);
    json_knum(f, ", ", "rel_l2", r->rel_l2);
    json_knum(f, ", ", "max_abs", r->max_abs);
    json_kstr(f, ", ", "status", r->status);
    json_kstr(f, ", ", "note", r->note);
    fputc('}', f);
}

int bench_write_json(const bench_options *opt, const bench_results *res, const char *path)
{
    int to_stdout = !strcmp(path, "-");
    FILE *f = to_stdout ? stdout : fopen(path, "w");
    if (!f) return -1;
    const bench_machine *m = &res->machine;
    const char *k1 = "\n    ", *k = ",\n    "; /* first key of an object, the others */
    fprintf(f, "{\n  \"format\": \"sgk-bench/2\",\n  \"machine\": {");
    json_kstr(f, k1, "host", m->host);
    json_kstr(f, k, "os", m->os);
    json_kstr(f, k, "cpu_model", m->cpu_model);
    json_key(f, k, "cpu_threads");
    fprintf(f, "%d", m->cpu_threads);
    json_kstr(f, k, "sgk_version", m->sgk_version);
    json_kstr(f, k, "git_commit", m->git_commit);
    json_key(f, k, "gpus");
    fputc('[', f);
    int first = 1;
    for (int i = 0; i < res->ndevices; i++) {
        const bench_device_rec *d = &res->devices[i];
        if (!strcmp(d->backend, "cpu")) continue;
        json_kstr(f, first ? "{" : ", {", "backend", d->backend);
        json_kstr(f, ", ", "name", d->name);
        json_kstr(f, ", ", "driver", d->driver);
        fputc('}', f);
        first = 0;
    }
    fprintf(f, "]\n  },\n  \"settings\": {");
    json_kbool(f, k1, "quick", opt->quick);
    json_key(f, k, "repeats");
    fprintf(f, "%d", opt->repeats);
    json_knum(f, k, "warmup_ms", opt->warmup_s * 1e3);
    json_knum(f, k, "min_repeat_ms", opt->min_repeat_s * 1e3);
    json_kstr(f, k, "dtype", bench_dtype_name(opt));
    json_kstr(f, k, "mask", opt->mask_type == SGK_MASK_U8 ? "u8" : "f32");
    json_key(f, k, "seed");
    fprintf(f, "%llu", (unsigned long long)opt->seed);
    json_knum(f, k, "density", opt->density);
    json_kbool(f, k, "rotate", opt->rotate);
    json_kbool(f, k, "check", opt->check);
    /* 16-bit layers: rel L2 only (SPEC section 6); no max abs bound, null */
    json_knum(f, k, "rel_l2_tol", opt->dtype == SGK_DTYPE_F32 ? 1e-5 : 1e-2);
    json_knum(f, k, "max_abs_tol", opt->dtype == SGK_DTYPE_F32 ? 1e-4 : NAN);
    fprintf(f, "\n  },\n  \"devices\": [\n");
    for (int i = 0; i < res->ndevices; i++) {
        json_device(f, &res->devices[i]);
        fputs(i + 1 < res->ndevices ? ",\n" : "\n", f);
    }
    fprintf(f, "  ],\n  \"notes\": [");
    const char *p = res->notes;
    first = 1;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        fputs(first ? "\n    " : ",\n    ", f);
        json_str(f, line);
        first = 0;
        p += len;
        if (*p) p++;
    }
    fprintf(f, "%s],\n  \"rows\": [\n", first ? "" : "\n  ");
    for (int i = 0; i < res->nrows; i++) {
        json_row(f, res, &res->rows[i]);
        fputs(i + 1 < res->nrows ? ",\n" : "\n", f);
    }
    fprintf(f, "  ]\n}\n");
    if (to_stdout) return fflush(f) == 0 && !ferror(f) ? 0 : -1;
    return fclose(f) == 0 ? 0 : -1;
}
