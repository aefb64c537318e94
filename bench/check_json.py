#!/usr/bin/env python3
"""Checks that sgk-bench JSON files have the documented fields (bench/README.md):
format sgk-bench/2, or the older sgk-bench/1 (no floors of their own per row).

    check_json.py FILE...                 check existing files
    check_json.py --run SGK_BENCH ARGS    run sgk-bench (ARGS must hold --json FILE),
                                          require exit status 0, then check FILE

Before --run: --modes M1,M2 requires rows in each of those modes, and
--rotated requires a row that rotated among several input sets.

Rows of --device all: a row per device in mode concurrent, and one in mode
aggregate whose device is "all" (no device record, no floors), which follows
a concurrent row of the same backend and shape; with a single device it
equals that device's row.
"""
import json
import math
import subprocess
import sys

NUM = (int, float)
OPT_NUM = (int, float, type(None))

MACHINE = {"host": str, "os": str, "cpu_model": str, "cpu_threads": int,
           "sgk_version": str, "git_commit": str, "gpus": list}
GPU = {"backend": str, "name": str, "driver": str}
SETTINGS = {"quick": bool, "repeats": int, "warmup_ms": NUM, "min_repeat_ms": NUM, "dtype": str,
            "mask": str, "seed": int, "density": NUM, "rotate": bool, "check": bool,
            "rel_l2_tol": NUM, "max_abs_tol": OPT_NUM}
DEVICE = {"backend": str, "device": int, "name": str, "driver": str, "clock": str,
          "timer_note": str, "launch_us": OPT_NUM, "graph_launch_us": OPT_NUM,
          "copy_gbps": OPT_NUM, "copy_how": str, "peak_gflops": OPT_NUM, "peak_source": str,
          "cache_bytes": OPT_NUM, "threads": int}
ROW = {"backend": str, "device": (int, str), "device_name": str, "variant": str, "auto": bool, "preset": str,
       "B": int, "N": int, "D": int, "H": int, "P": int, "mode": str,
       "input_sets": int, "iters_per_repeat": int, "repeats": int,
       "us_median": OPT_NUM, "us_min": OPT_NUM, "us_max": OPT_NUM,
       "flop": NUM, "bytes": NUM, "gflops": OPT_NUM, "gbps": OPT_NUM,
       "floor_us": OPT_NUM, "floor_bound": (str, type(None)), "floor_share": OPT_NUM,
       "checked": bool, "rel_l2": OPT_NUM, "max_abs": OPT_NUM, "status": str, "note": str}
# What sgk-bench/2 added: the FFMA and copy floors of each row, and where the
# device's copy bandwidth came from.
DEVICE_2 = {"copy_source": str}
ROW_2 = {"ffma_floor_us": OPT_NUM, "copy_floor_us": OPT_NUM}
FORMATS = ("sgk-bench/1", "sgk-bench/2")
MODES = {"host", "stream", "graph", "host-path", "backward", "concurrent", "aggregate"}
STATUSES = {"ok", "FAIL", "ERROR", "unchecked"}


def check_fields(obj, spec, where, problems):
    if not isinstance(obj, dict):
        problems.append(f"{where}: not an object")
        return
    for key, typ in spec.items():
        if key not in obj:
            problems.append(f"{where}: missing '{key}'")
        elif isinstance(obj[key], bool) and bool not in (typ if isinstance(typ, tuple) else (typ,)):
            problems.append(f"{where}.{key}: a boolean where {typ} is expected")
        elif not isinstance(obj[key], typ):
            problems.append(f"{where}.{key}: {type(obj[key]).__name__}, expected {typ}")


def flop_model(r):
    """The forward's FLOPs (bench/README.md); a backward row counts twice them."""
    B, N, D, H, P = (r[k] for k in "BNDHP")
    f = 8 * B * N * D * D + B * N * N * (2 * P * P + 2 * P * H) + 4 * B * N * N * D
    return 2 * f if r["mode"] == "backward" else f


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6)


def check_floors(r, d, where, problems):
    """The row's floors follow from its work and its device's peaks."""
    for key, work, peak in (("ffma_floor_us", "flop", "peak_gflops"), ("copy_floor_us", "bytes", "copy_gbps")):
        if d[peak] is None:
            if r[key] is not None:
                problems.append(f"{where}.{key}: {r[key]} without a device {peak}")
        elif r[key] is None or not close(r[key], r[work] / d[peak] / 1e3):
            problems.append(f"{where}.{key}: {r[key]} is not {work} / {peak}")
    # A 16-bit row's compute floor is its TC floor (the dtype's tensor-core
    # peak) where its device has one; files before it have neither key.
    tc = r.get("tc_floor_us")
    if tc is not None:
        peak16 = d.get("peak16_gflops")
        if peak16 is None or not close(tc, r["flop"] / peak16 / 1e3):
            problems.append(f"{where}.tc_floor_us: {tc} is not flop / peak16_gflops")
    compute = tc if tc is not None else r["ffma_floor_us"]
    known = [x for x in (compute, r["copy_floor_us"]) if x is not None]
    if r["floor_us"] is not None and known and r["floor_us"] < max(known) * (1 - 1e-6):
        problems.append(f"{where}.floor_us: {r['floor_us']} below its compute or copy floor")


def check_aggregate(r, before, where, problems):
    """--device all's aggregate row: device "all", no floors, after its
    devices' concurrent rows; with one device, that device's figures."""
    if r["mode"] != "aggregate" or r["device"] != "all":
        problems.append(f"{where}: mode {r['mode']!r} with device {r['device']!r}: an aggregate row has device 'all'")
        return
    for key in ("ffma_floor_us", "copy_floor_us", "floor_us", "floor_share"):
        if r.get(key) is not None:
            problems.append(f"{where}.{key}: {r[key]}, but an aggregate row has no floor")
    shape = [r[k] for k in ("backend", "preset", "B", "N", "D", "H", "P")]
    devices = [x for x in before if isinstance(x, dict) and x.get("mode") == "concurrent"
               and [x.get(k) for k in ("backend", "preset", "B", "N", "D", "H", "P")] == shape]
    if not devices:
        problems.append(f"{where}: an aggregate row without the concurrent rows of its devices before it")
    elif len(devices) == 1 and r["status"] == devices[0]["status"] == "ok" and not all(
            close(r[k], devices[0][k]) for k in ("us_median", "us_min", "us_max", "gflops")):
        problems.append(f"{where}: the aggregate of one device differs from that device's row")


def check_file(path, require_ok=False, modes=(), rotated=False):
    problems = []
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{path}: cannot read JSON: {e}"]
    fmt = doc.get("format")
    if fmt not in FORMATS:
        problems.append(f"format is {fmt!r}, expected one of {FORMATS}")
    v2 = fmt == "sgk-bench/2"
    device_spec, row_spec = (dict(DEVICE, **DEVICE_2), dict(ROW, **ROW_2)) if v2 else (DEVICE, ROW)
    check_fields(doc.get("machine"), MACHINE, "machine", problems)
    for i, g in enumerate((doc.get("machine") or {}).get("gpus") or []):
        check_fields(g, GPU, f"machine.gpus[{i}]", problems)
    check_fields(doc.get("settings"), SETTINGS, "settings", problems)
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("devices: missing or empty")
        devices = []
    by_index = {}
    for i, d in enumerate(devices):
        before = len(problems)
        check_fields(d, device_spec, f"devices[{i}]", problems)
        if len(problems) > before:
            continue
        by_index[(d["backend"], d["device"])] = d
        # A GPU's floors fall back on the H200's peaks, so they are never unknown.
        if v2 and d["backend"] != "cpu" and None in (d["peak_gflops"], d["copy_gbps"]):
            problems.append(f"devices[{i}]: a GPU backend without peak_gflops or copy_gbps")
    if not isinstance(doc.get("notes"), list):
        problems.append("notes: missing or not a list")
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        problems.append("rows: missing or empty")
        rows = []
    for i, r in enumerate(rows):
        where = f"rows[{i}]"
        before = len(problems)
        check_fields(r, row_spec, where, problems)
        if len(problems) > before:
            continue
        if r["mode"] == "aggregate" or r["device"] == "all":
            check_aggregate(r, rows[:i], where, problems)
        else:
            d = by_index.get((r["backend"], r["device"]))
            if d is None:
                problems.append(f"{where}: no device record for {r['backend']} {r['device']}")
            elif v2:
                check_floors(r, d, where, problems)
        if r["mode"] not in MODES:
            problems.append(f"{where}.mode: {r['mode']!r} not one of {sorted(MODES)}")
        if r["status"] not in STATUSES:
            problems.append(f"{where}.status: {r['status']!r} not one of {sorted(STATUSES)}")
        if require_ok and r["status"] != "ok":
            problems.append(f"{where}: status {r['status']} ({r['note']})")
        if r["flop"] != flop_model(r):
            problems.append(f"{where}.flop: {r['flop']} does not follow the FLOP model")
        if r["status"] in ("ok", "FAIL"):
            lo, med, hi = r["us_min"], r["us_median"], r["us_max"]
            if None in (lo, med, hi) or not (0 < lo <= med <= hi):
                problems.append(f"{where}: times not 0 < min <= median <= max: {lo}, {med}, {hi}")
            elif r["repeats"] < 5:
                problems.append(f"{where}.repeats: {r['repeats']} < 5")
            elif not math.isclose(r["gflops"], r["flop"] / med / 1e3, rel_tol=1e-6):
                problems.append(f"{where}.gflops does not equal flop / us_median")
        if r["status"] == "ok" and r["checked"]:
            max_abs_tol = doc["settings"]["max_abs_tol"]
            if not (r["rel_l2"] <= doc["settings"]["rel_l2_tol"] and (max_abs_tol is None or r["max_abs"] <= max_abs_tol)):
                problems.append(f"{where}: status ok but error over the tolerance")
    for mode in modes:
        if not any(isinstance(r, dict) and r.get("mode") == mode for r in rows):
            problems.append(f"no row in mode {mode}")
    if rotated and not any(isinstance(r, dict) and (r.get("input_sets") or 0) > 1 for r in rows):
        problems.append("no row rotated among input sets")
    return [f"{path}: {p}" for p in problems]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    modes, rotated = (), False
    while len(argv) > 1 and argv[1] in ("--modes", "--rotated"):
        if argv[1] == "--modes":
            modes = argv[2].split(",")
            argv = argv[:1] + argv[3:]
        else:
            rotated = True
            argv = argv[:1] + argv[2:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "--run":
        cmd = [str(a) for a in argv[2:]]
        if "--json" not in cmd:
            print("check_json.py: the command has no --json FILE", file=sys.stderr)
            return 2
        path = cmd[cmd.index("--json") + 1]
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            print(f"check_json.py: {' '.join(cmd)} exited with status {proc.returncode}", file=sys.stderr)
            return 1
        paths, require_ok = [path], True
    else:
        paths, require_ok = argv[1:], False
    problems = []
    for p in paths:
        problems += check_file(p, require_ok, modes, rotated)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_json.py: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_json.py: {len(paths)} file(s) have the documented fields")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
