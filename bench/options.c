#include "options.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_version.h"
#include "sweep.h"
#include "util.h"

static const char usage_text[] =
    "usage: sgk-bench [options]\n"
    "\n"
    "Times the sgk relation-update layer on every available backend and every\n"
    "kernel variant, checks each against the double-precision reference, and\n"
    "prints one row per backend, variant, shape and mode.\n"
    "\n"
    "An option's value follows it as the next argument or after '=':\n"
    "--preset seed and --preset=seed are the same.\n"
    "\n"
    "What to run:\n"
    "  --preset LIST      comma-separated shapes of SPEC section 4: the presets\n"
    "                     seed, mid, large, xl; the sweep shapes s01 .. s14; the\n"
    "                     groups presets (the four), sweep (s01 .. s14) and all\n"
    "                     (both) (default: presets)\n"
    "  --shape B,N,D,H,P  a custom shape; may be repeated, and mixed with --preset\n"
    "  --backend LIST     cpu, cuda, hip, opencl (default: every available one);\n"
    "                     naming an unavailable backend is an error\n"
    "  --variant LIST     kernel variants (default: every variant that supports\n"
    "                     the shape); backends without any of them are skipped\n"
    "  --device N|all     device index within each backend (default 0); all: every\n"
    "                     device of the backend at once, one thread each, running\n"
    "                     the variant sgk picks by itself: a row per device (mode\n"
    "                     concurrent) and their sum (mode aggregate); it takes no\n"
    "                     --variant or --train\n"
    "  --threads N        cpu backend threads (default: the OpenMP default)\n"
    "  --dtype f32|bf16|f16  type of the weights, nodes, pair_feats and out (default\n"
    "                     f32); 16-bit rows are checked against the reference on\n"
    "                     the rounded weights and inputs (rel L2 <= 1e-2), and\n"
    "                     their bytes counted at 2 an element\n"
    "  --mask f32|u8      edge-mask element type (default f32, as PyTorch passes it)\n"
    "  --seed S           seed of weights and inputs (default 1)\n"
    "  --density X        share of edges present in the mask (default 0.7)\n"
    "  --list             list backends, devices and variants, then exit\n"
    "\n"
    "How to time:\n"
    "  --repeats N        timed repeats, at least 5 (default 5)\n"
    "  --quick            CI smoke runs: repeats of >= 10 ms and 10 ms of warm-up\n"
    "                     instead of >= 100 ms each; the output says so\n"
    "  --no-rotate        never rotate among input sets\n"
    "  --no-check         skip the reference (rows then say 'unchecked')\n"
    "  --train            also time sgk_backward_device (after one sgk_forward_train_device)\n"
    "                     where the backend has a backward: rows of mode 'backward', variant\n"
    "                     'train', work counted as twice the forward's; the nodes gradient is\n"
    "                     checked against the double reference backward\n"
    "  --peak-gflops X    fp32 FMA peak of the FFMA floor, for every backend, or\n"
    "                     BACKEND=X[,BACKEND=X] for some (default: from device\n"
    "                     properties on cuda, the H200's 67000 on other GPU\n"
    "                     backends, none on the cpu)\n"
    "  --peak-gbps X      copy bandwidth (read + write) of the copy floor, same\n"
    "                     form (default: measured by the bench on the device;\n"
    "                     the H200's 3980 on a GPU where it cannot measure)\n"
    "  --json FILE        also write the rows and the machine as JSON; '-' writes\n"
    "                     the JSON to standard output and the table to stderr\n"
    "  --help, -h, --version\n"
    "\n"
    "Each repeat enqueues calls back to back until it lasts >= 100 ms and\n"
    "reports µs per call; a row gives the median, min and max over the repeats,\n"
    "after a warm-up. Modes:\n"
    "  host       cpu backend: sgk_forward_device on host memory, monotonic clock\n"
    "  stream     GPU: sgk_forward_device back to back on one stream, timed by\n"
    "             device events (OpenCL: profiling events)\n"
    "  graph      cuda: replay of a CUDA graph holding one captured call\n"
    "  host-path  GPU without the bench's timer module: sgk_forward, which\n"
    "             allocates, copies in and out and synchronises, monotonic clock\n"
    "  concurrent --device all: one device's calls while every device of the\n"
    "             backend runs its own, for the same windows of the monotonic\n"
    "             clock (each ends when its device has finished): window / calls\n"
    "  aggregate  --device all: the devices together, 1 / (sum of their calls per\n"
    "             µs) per window; its GFLOP/s is the sum of theirs\n"
    "When one input set (inputs and output) is under twice the GPU's L2 cache,\n"
    "calls rotate among enough copies to cover three times the L2, so that\n"
    "inputs come from memory as in a real model; the 'sets' column says so.\n"
    "\n"
    "Work model (fp32, no elementwise work counted):\n"
    "  FLOP  = 8 B N D^2                (Q, K, V, output projections)\n"
    "        + B N^2 (2 P^2 + 2 P H)    (relation MLP, every ordered pair)\n"
    "        + 4 B N^2 D                (Q K^T and A V)\n"
    "  bytes = 4 (2 B N D + B N^2 P)    (nodes in, out, pair_feats)\n"
    "        + m B N^2                  (edge mask, m = 4 for f32, 1 for u8)\n"
    "        + 4 (4 D^2 + P^2 + P + H P + H + 2 D)   (weights, read once)\n"
    "  GFLOP/s = FLOP / time, GB/s = bytes / time (10^9).\n"
    "Floors, beside each row:\n"
    "  FFMA floor = FLOP / fp32 FMA peak    copy floor = bytes / copy bandwidth\n"
    "  floor = max(FFMA floor, copy floor, launch cost), the launch cost being one\n"
    "  empty kernel back to back (one graph replay in graph mode), measured by the\n"
    "  bench on the device; floor% = floor / median time (100% = at the floor).\n"
    "  On cuda the peak is SMs x clock x FP32 lanes x 2 and the copy bandwidth a\n"
    "  copy kernel's; on the cpu the copy bandwidth is multi-threaded memcpy's and\n"
    "  the FFMA floor needs --peak-gflops. host-path rows have no floor%.\n"
    "\n"
    "Check: each row's output is compared with the double-precision reference;\n"
    "status is FAIL when rel L2 > 1e-5 or max abs > 1e-4 (bf16, f16: rel L2 >\n"
    "1e-2, the reference on the same rounded weights and inputs), ERROR when the call\n"
    "failed. Exit status: 0 all rows ok, 1 a row failed, 2 usage or setup error\n"
    "(an unknown option among them).\n";

static void usage(FILE *f) { fputs(usage_text, f); }

const char *bench_dtype_name(const bench_options *opt)
{
    return opt->dtype == SGK_DTYPE_BF16 ? "bf16" : opt->dtype == SGK_DTYPE_F16 ? "f16" : "f32";
}

int bench_dtype_bytes(const bench_options *opt) { return opt->dtype == SGK_DTYPE_F32 ? 4 : 2; }

/* Splits a comma list into fixed-size slots; returns the count or -1. */
static int split_list(const char *arg, char (*slots)[64], int cap, size_t slot_len)
{
    int n = 0;
    const char *p = arg;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= slot_len || n >= cap) return -1;
        memcpy(slots[n], p, len);
        slots[n][len] = 0;
        n++;
        p += len;
        if (*p == ',') p++;
    }
    return n;
}

static int parse_int64(const char *s, int64_t *v)
{
    char *end = NULL;
    long long x = strtoll(s, &end, 10);
    if (end == s) return -1;
    *v = (int64_t)x;
    return (int)(end - s);
}

static int parse_shape(const char *arg, bench_shape *s)
{
    int64_t v[5];
    const char *p = arg;
    for (int i = 0; i < 5; i++) {
        int used = parse_int64(p, &v[i]);
        if (used < 0 || v[i] < 1) return -1;
        p += used;
        if (i < 4) {
            if (*p != ',') return -1;
            p++;
        }
    }
    if (*p) return -1;
    s->B = v[0], s->N = v[1], s->D = v[2], s->H = v[3], s->P = v[4];
    return 0;
}

static int add_case(bench_options *opt, const char *name, bench_shape s)
{
    if (opt->ncases >= BENCH_MAX_CASES) return -1;
    for (int i = 0; i < opt->ncases; i++)
        if (!strcmp(opt->cases[i].name, name) && !memcmp(&opt->cases[i].shape, &s, sizeof s)) return 0;
    snprintf(opt->cases[opt->ncases].name, sizeof opt->cases[0].name, "%s", name);
    opt->cases[opt->ncases].shape = s;
    opt->ncases++;
    return 0;
}

/* A preset, a sweep shape, or a group of them (SPEC section 4). */
static int add_preset(bench_options *opt, const char *name)
{
    if (!strcmp(name, "all")) return add_preset(opt, "presets") || add_preset(opt, "sweep") ? -1 : 0;
    if (!strcmp(name, "presets")) {
        for (int i = 0; i < sgkt_preset_count; i++)
            if (add_preset(opt, sgkt_presets[i].name) != 0) return -1;
        return 0;
    }
    if (!strcmp(name, "sweep")) {
        for (int i = 0; i < bench_sweep_count; i++)
            if (add_case(opt, bench_sweep[i].name, bench_sweep[i].shape) != 0) return -1;
        return 0;
    }
    const sgkt_preset *p = sgkt_preset_find(name);
    if (p) {
        bench_shape s = {p->B, p->N, p->D, p->H, p->P};
        return add_case(opt, p->name, s);
    }
    const bench_sweep_shape *w = bench_sweep_find(name);
    return w ? add_case(opt, w->name, w->shape) : -1;
}

static int parse_peaks(bench_peak *peaks, int *npeaks, const char *arg)
{
    char items[BENCH_MAX_LIST][64];
    int n = split_list(arg, items, BENCH_MAX_LIST, sizeof items[0]);
    if (n <= 0) return -1;
    if (*npeaks + n > BENCH_MAX_LIST) return -1;
    for (int i = 0; i < n; i++) {
        bench_peak *pk = &peaks[(*npeaks)++];
        char *eq = strchr(items[i], '=');
        const char *num = items[i];
        pk->backend[0] = 0;
        if (eq) {
            *eq = 0;
            if (strlen(items[i]) >= sizeof pk->backend) return -1;
            snprintf(pk->backend, sizeof pk->backend, "%.15s", items[i]);
            num = eq + 1;
        }
        char *end = NULL;
        pk->value = strtod(num, &end);
        if (end == num || *end || !(pk->value > 0)) return -1;
    }
    return 0;
}

static int bad(const char *what, const char *arg)
{
    fprintf(stderr, "sgk-bench: %s: '%s'\n(sgk-bench --help lists the options)\n", what, arg ? arg : "");
    return 2;
}

enum {
    OPT_PRESET = 256, OPT_SHAPE, OPT_BACKEND, OPT_VARIANT, OPT_DEVICE, OPT_THREADS, OPT_DTYPE, OPT_MASK,
    OPT_SEED, OPT_DENSITY, OPT_REPEATS, OPT_PEAK_GFLOPS, OPT_PEAK_GBPS, OPT_JSON, OPT_QUICK, OPT_NO_ROTATE,
    OPT_NO_CHECK, OPT_TRAIN, OPT_LIST, OPT_VERSION
};

static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"preset", required_argument, NULL, OPT_PRESET},
    {"shape", required_argument, NULL, OPT_SHAPE},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"variant", required_argument, NULL, OPT_VARIANT},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"mask", required_argument, NULL, OPT_MASK},
    {"seed", required_argument, NULL, OPT_SEED},
    {"density", required_argument, NULL, OPT_DENSITY},
    {"repeats", required_argument, NULL, OPT_REPEATS},
    {"peak-gflops", required_argument, NULL, OPT_PEAK_GFLOPS},
    {"peak-gbps", required_argument, NULL, OPT_PEAK_GBPS},
    {"json", required_argument, NULL, OPT_JSON},
    {"quick", no_argument, NULL, OPT_QUICK},
    {"no-rotate", no_argument, NULL, OPT_NO_ROTATE},
    {"no-check", no_argument, NULL, OPT_NO_CHECK},
    {"train", no_argument, NULL, OPT_TRAIN},
    {"list", no_argument, NULL, OPT_LIST},
    {NULL, 0, NULL, 0},
};

/* One option with its value (NULL for a flag); 0, or 2 with the message printed. */
static int apply(bench_options *opt, int id, const char *v)
{
    char items[BENCH_MAX_LIST][64];
    int n;
    int64_t x = 0;
    char *end = NULL;
    switch (id) {
    case OPT_PRESET:
        n = split_list(v, items, BENCH_MAX_LIST, sizeof items[0]);
        if (n <= 0) return bad("bad --preset list", v);
        for (int k = 0; k < n; k++)
            if (add_preset(opt, items[k]) != 0)
                return bad(opt->ncases >= BENCH_MAX_CASES ? "too many shapes"
                                                          : "unknown preset (seed, mid, large, xl, s01 .. s14, "
                                                            "presets, sweep, all)",
                           items[k]);
        return 0;
    case OPT_SHAPE: {
        bench_shape s;
        if (parse_shape(v, &s) != 0) return bad("--shape wants B,N,D,H,P, all >= 1", v);
        if (s.D % s.H != 0) return bad("--shape: H must divide D", v);
        if (add_case(opt, "custom", s) != 0) return bad("too many shapes", v);
        return 0;
    }
    case OPT_BACKEND:
        n = split_list(v, items, BENCH_MAX_LIST, sizeof items[0]);
        if (n <= 0 || opt->nbackends + n > BENCH_MAX_LIST) return bad("bad --backend list", v);
        for (int k = 0; k < n; k++) {
            if (strlen(items[k]) >= sizeof opt->backends[0]) return bad("unknown backend", items[k]);
            snprintf(opt->backends[opt->nbackends++], sizeof opt->backends[0], "%.15s", items[k]);
        }
        return 0;
    case OPT_VARIANT:
        n = split_list(v, opt->variants, BENCH_MAX_LIST, sizeof opt->variants[0]);
        if (n <= 0) return bad("bad --variant list", v);
        opt->nvariants = n;
        return 0;
    case OPT_DEVICE:
        if (!strcmp(v, "all")) {
            opt->all_devices = 1;
            opt->device = 0;
            return 0;
        }
        if (parse_int64(v, &x) != (int)strlen(v) || x < 0 || x > 1024)
            return bad("--device is an index (0, 1, ...) or all", v);
        opt->all_devices = 0;
        opt->device = (int)x;
        return 0;
    case OPT_THREADS:
        if (parse_int64(v, &x) != (int)strlen(v) || x < 1 || x > 4096) return bad("bad --threads", v);
        opt->threads = (int)x;
        return 0;
    case OPT_DTYPE:
        if (!strcmp(v, "f32")) opt->dtype = SGK_DTYPE_F32;
        else if (!strcmp(v, "bf16")) opt->dtype = SGK_DTYPE_BF16;
        else if (!strcmp(v, "f16")) opt->dtype = SGK_DTYPE_F16;
        else return bad("--dtype is f32, bf16 or f16", v);
        return 0;
    case OPT_MASK:
        if (!strcmp(v, "f32")) opt->mask_type = SGK_MASK_F32;
        else if (!strcmp(v, "u8")) opt->mask_type = SGK_MASK_U8;
        else return bad("--mask is f32 or u8", v);
        return 0;
    case OPT_SEED: {
        unsigned long long s = strtoull(v, &end, 0);
        if (end == v || *end) return bad("bad --seed", v);
        opt->seed = s;
        return 0;
    }
    case OPT_DENSITY:
        opt->density = strtod(v, &end);
        if (end == v || *end || !(opt->density >= 0 && opt->density <= 1))
            return bad("--density is between 0 and 1", v);
        return 0;
    case OPT_REPEATS:
        if (parse_int64(v, &x) != (int)strlen(v) || x < 5 || x > 1000)
            return bad("--repeats is between 5 and 1000", v);
        opt->repeats = (int)x;
        return 0;
    case OPT_PEAK_GFLOPS:
        if (parse_peaks(opt->peak_gflops, &opt->npeak_gflops, v) != 0)
            return bad("--peak-gflops wants X or BACKEND=X,... (X > 0)", v);
        return 0;
    case OPT_PEAK_GBPS:
        if (parse_peaks(opt->peak_gbps, &opt->npeak_gbps, v) != 0)
            return bad("--peak-gbps wants X or BACKEND=X,... (X > 0)", v);
        return 0;
    case OPT_JSON:
        if (!v[0]) return bad("--json wants a file name, or - for standard output", v);
        opt->json_path = v;
        return 0;
    case OPT_QUICK: opt->quick = 1; return 0;
    case OPT_NO_ROTATE: opt->rotate = 0; return 0;
    case OPT_NO_CHECK: opt->check = 0; return 0;
    case OPT_TRAIN: opt->train = 1; return 0;
    case OPT_LIST: opt->list = 1; return 0;
    default: return bad("unhandled option", "");
    }
}

int bench_parse_options(int argc, char **argv, bench_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->repeats = 5;
    opt->rotate = 1;
    opt->max_sets = 1024;
    opt->mask_type = SGK_MASK_F32;
    opt->dtype = SGK_DTYPE_F32;
    opt->seed = 1;
    opt->density = 0.7;
    opt->check = 1;
    opt->progress = isatty(2);

    /* Our own messages, not getopt's ("':'" first: a missing value returns ':'). */
    opterr = 0;
    optind = 1;
    for (;;) {
        int id = getopt_long(argc, argv, ":h", long_options, NULL);
        if (id == -1) break;
        const char *arg = argv[optind - 1];
        if (id == 'h') {
            usage(stdout);
            return 1;
        } else if (id == OPT_VERSION) {
            printf("sgk-bench %s (sgk %s)\n", SGK_BENCH_GIT, sgk_version());
            return 1;
        } else if (id == ':') {
            return bad("missing value after", arg);
        } else if (id == '?') {
            /* optopt: 0 for an unknown or ambiguous long name, the option's id
             * for a flag given a value, the letter for an unknown -x. */
            if (optopt == 0) return bad("unknown or ambiguous option", arg);
            if (optopt >= OPT_PRESET || optopt == 'h') return bad("this option takes no value", arg);
            char letter[3] = {'-', (char)optopt, 0};
            return bad("unknown option", letter);
        }
        int rc = apply(opt, id, optarg);
        if (rc != 0) return rc;
    }
    if (optind < argc) return bad("unexpected argument (every option starts with --)", argv[optind]);
    /* --device all times sgk's own choice of variant, forward only, on every
     * device: the options that pick other calls do not apply. */
    if (opt->all_devices && opt->nvariants)
        return bad("--device all runs the variant sgk picks; it takes no", "--variant");
    if (opt->all_devices && opt->train) return bad("--device all times the forward only; it takes no", "--train");
    if (opt->ncases == 0) add_preset(opt, "presets");
    opt->warmup_s = opt->quick ? 0.01 : 0.1;
    opt->min_repeat_s = opt->quick ? 0.01 : 0.1;
    return 0;
}

double bench_peak_override(const bench_peak *peaks, int n, const char *backend)
{
    double all = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(peaks[i].backend, backend)) return peaks[i].value;
        if (!peaks[i].backend[0]) all = peaks[i].value;
    }
    return all;
}

int bench_wants_backend(const bench_options *opt, const char *name)
{
    if (opt->nbackends == 0) return 1;
    for (int i = 0; i < opt->nbackends; i++)
        if (!strcmp(opt->backends[i], name)) return 1;
    return 0;
}

int bench_wants_variant(const bench_options *opt, const char *name)
{
    if (opt->nvariants == 0) return 1;
    for (int i = 0; i < opt->nvariants; i++)
        if (!strcmp(opt->variants[i], name)) return 1;
    return 0;
}
