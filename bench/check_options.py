#!/usr/bin/env python3
"""Checks sgk-bench's command line and torch_compare.py's shapes.

usage: check_options.py SGK_BENCH TORCH_COMPARE TORCH_JSON

- --preset=X and --preset X select the same shapes; the sweep (s01 .. s14)
  and the groups presets, sweep and all select what SPEC section 4 lists;
- an unknown option, a flag given a value, a missing value, a stray
  argument, a --device that is neither an index nor all, and --device all
  with --variant or --train each exit with status 2 and name what was wrong;
- --json - writes parseable JSON to standard output and the table to stderr;
- torch_compare.py --dry-run lists the same shapes as sgk-bench for every
  group, and runs its compiled variants at the presets only, unless
  --compile-sweep;
- torch_compare.py --summary TORCH_JSON prints one line per shape.
"""
import json
import re
import subprocess
import sys

SPEC_SWEEP = {"s01": (1, 16, 256, 4, 8), "s02": (1, 100, 512, 8, 24), "s03": (2, 48, 1024, 16, 32),
              "s04": (8, 96, 192, 6, 16), "s05": (16, 80, 320, 5, 48), "s06": (32, 40, 64, 2, 8),
              "s07": (4, 300, 256, 16, 64), "s08": (2, 700, 384, 4, 24), "s09": (1, 1500, 128, 1, 16),
              "s10": (1, 3000, 256, 8, 8), "s11": (64, 24, 96, 4, 16), "s12": (3, 200, 1024, 4, 128),
              "s13": (12, 128, 768, 12, 32), "s14": (6, 512, 128, 8, 4)}
SPEC_PRESETS = {"seed": (4, 24, 96, 4, 16), "mid": (32, 64, 256, 8, 32), "large": (8, 512, 256, 8, 32),
                "xl": (2, 2048, 256, 8, 16)}
SHAPE_LINE = re.compile(r"^\s+(\w+)\s+(\d+),(\d+),(\d+),(\d+),(\d+)[: ]")

problems = []


def run(cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


def bench_shapes(bench, *args):
    """{name: shape} that sgk-bench --list would run, in order."""
    p = run([bench, "--list", "--backend", "cpu", *args])
    if p.returncode != 0:
        problems.append(f"sgk-bench --list {' '.join(args)}: status {p.returncode}: {p.stderr.strip()}")
        return {}
    out = {}
    for line in p.stdout.splitlines():
        m = SHAPE_LINE.match(line)
        if m:
            out[m.group(1)] = tuple(int(g) for g in m.groups()[1:])
    return out


def torch_dry(tc, *args):
    """{name: (shape, torch variants)} from torch_compare.py --dry-run."""
    p = run([sys.executable, tc, "--dry-run", *args])
    if p.returncode != 0:
        problems.append(f"torch_compare.py --dry-run {' '.join(args)}: status {p.returncode}: {p.stderr.strip()}")
        return {}
    out, name = {}, None
    for line in p.stdout.splitlines():
        m = re.match(r"^(\w+)\s+B,N,D,H,P (\d+),(\d+),(\d+),(\d+),(\d+) ", line)
        if m:
            name = m.group(1)
            out[name] = (tuple(int(g) for g in m.groups()[1:]), [])
        elif name and line.strip().startswith("torch:"):
            out[name][1].extend(line.split(":", 1)[1].split())
    return out


def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: got {got}, expected {want}")


def expect_usage_error(bench, args, words):
    p = run([bench, *args])
    if p.returncode != 2:
        problems.append(f"sgk-bench {' '.join(args)}: status {p.returncode}, expected 2")
    elif not all(w in p.stderr for w in words):
        problems.append(f"sgk-bench {' '.join(args)}: message {p.stderr.strip()!r} lacks {words}")


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    bench, tc, torch_json = argv[1], argv[2], argv[3]

    expect("--preset=seed", bench_shapes(bench, "--preset=seed"), {"seed": SPEC_PRESETS["seed"]})
    expect("--preset seed", bench_shapes(bench, "--preset", "seed"), {"seed": SPEC_PRESETS["seed"]})
    expect("--preset=s07,mid", bench_shapes(bench, "--preset=s07,mid"),
           {"s07": SPEC_SWEEP["s07"], "mid": SPEC_PRESETS["mid"]})
    expect("--preset sweep", bench_shapes(bench, "--preset", "sweep"), SPEC_SWEEP)
    expect("no --preset", bench_shapes(bench), SPEC_PRESETS)
    everything = dict(SPEC_PRESETS, **SPEC_SWEEP)
    expect("--preset all", bench_shapes(bench, "--preset", "all"), everything)
    expect("--preset seed,mid,sweep", list(bench_shapes(bench, "--preset", "seed,mid,sweep")),
           ["seed", "mid"] + list(SPEC_SWEEP))

    expect_usage_error(bench, ["--bogus"], ["unknown", "--bogus"])
    expect_usage_error(bench, ["--quick=1"], ["no value", "--quick=1"])
    expect_usage_error(bench, ["--preset"], ["missing value", "--preset"])
    expect_usage_error(bench, ["--preset", "s15"], ["unknown preset", "s15"])
    expect_usage_error(bench, ["stray"], ["unexpected argument", "stray"])
    expect_usage_error(bench, ["--peak-gbps=0"], ["--peak-gbps"])
    expect_usage_error(bench, ["--device", "alll"], ["--device", "index", "all", "alll"])
    expect_usage_error(bench, ["--device=-1"], ["--device", "-1"])
    expect_usage_error(bench, ["--device", "all", "--variant", "small"], ["--device all", "--variant"])
    expect_usage_error(bench, ["--device", "all", "--train"], ["--device all", "--train"])

    p = run([bench, "--shape", "1,4,8,2,2", "--backend", "cpu", "--quick", "--json", "-"])
    if p.returncode != 0:
        problems.append(f"sgk-bench --json -: status {p.returncode}: {p.stderr.strip()[-300:]}")
    else:
        try:
            doc = json.loads(p.stdout)
            expect("--json - format", doc.get("format"), "sgk-bench/2")
            expect("--json - rows", len(doc.get("rows", [])) > 0, True)
        except ValueError as e:
            problems.append(f"sgk-bench --json -: standard output is not JSON ({e}): {p.stdout[:200]!r}")
        if "µs/call" not in p.stderr:
            problems.append("sgk-bench --json -: the table is not on stderr")

    for group in ("presets", "sweep", "all", "seed,s07,mid"):
        dry = torch_dry(tc, "--preset", group)
        expect(f"torch_compare --preset {group} shapes", {n: v[0] for n, v in dry.items()},
               bench_shapes(bench, "--preset", group))
    dry = torch_dry(tc, "--preset", "seed,s01")
    expect("torch_compare at a preset", dry.get("seed", (0, []))[1],
           ["eager", "eager+graph", "sdpa", "sdpa+graph", "compile", "compile+graph",
            "compile-max-autotune", "compile-max-autotune+graph"])
    expect("torch_compare at a sweep shape", dry.get("s01", (0, []))[1], ["eager", "eager+graph", "sdpa", "sdpa+graph"])
    dry = torch_dry(tc, "--preset", "s01", "--compile-sweep", "--device", "cpu")
    expect("torch_compare --compile-sweep on the cpu", dry.get("s01", (0, []))[1],
           ["eager", "sdpa", "compile", "compile-max-autotune"])

    p = run([sys.executable, tc, "--summary", torch_json])
    shapes = list(json.load(open(torch_json))["shapes"])
    lines = [l.split()[0] for l in p.stdout.splitlines()[1:] if l.strip()][:len(shapes)]
    if p.returncode != 0 or lines != shapes:
        problems.append(f"torch_compare.py --summary {torch_json}: status {p.returncode}, first column {lines}, "
                        f"expected {shapes}: {p.stderr.strip()[-300:]}")

    for msg in problems:
        print("check_options.py:", msg, file=sys.stderr)
    if problems:
        print(f"check_options.py: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check_options.py: sgk-bench's options and torch_compare.py's shapes are as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
