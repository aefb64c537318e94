#!/usr/bin/env python3
"""Runs bench/compare on sgk-bench JSON files and checks that it writes the
markdown tables (one line per input row) and, when it says it drew one, the
chart.

usage: check_compare.py COMPARE OUTDIR FILE.json...
"""
import json
import os
import subprocess
import sys


def count_rows(doc):
    if doc.get("format", "").startswith("sgk-torch-compare/"):  # one row per timed variant
        shapes = doc.get("shapes") or doc["presets"]
        return sum("us" in t for res in shapes.values() for side in ("torch", "sgk") for t in res[side].values())
    return len(doc["rows"])


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    compare, outdir, files = argv[1], argv[2], argv[3:]
    os.makedirs(outdir, exist_ok=True)
    md, chart = os.path.join(outdir, "compare.md"), os.path.join(outdir, "compare.svg")
    for p in (md, chart):
        if os.path.exists(p):
            os.remove(p)
    proc = subprocess.run([sys.executable, compare, "--md", md, "--chart", chart] + files,
                          capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"check_compare.py: compare exited with status {proc.returncode}", file=sys.stderr)
        return 1
    problems = []
    text = open(md).read() if os.path.exists(md) else ""
    if not text:
        problems.append("no markdown written")
    nrows = sum(count_rows(json.load(open(f))) for f in files)
    lines = text.splitlines()
    try:
        start = lines.index("## All rows")
    except ValueError:
        problems.append("no '## All rows' section")
        start = len(lines)
    table = [l for l in lines[start:] if l.startswith("| ") and not l.startswith("| ---")]
    if table and not table[0].startswith("| preset |"):
        problems.append("the rows table has no header")
    if len(table) != nrows + 1:
        problems.append(f"{len(table) - 1} table rows for {nrows} input rows")
    if "## Fastest passing row per preset" not in text:
        problems.append("no per-preset summary")
    drew = "wrote " + chart in proc.stdout
    if drew and not (os.path.exists(chart) and os.path.getsize(chart) > 0):
        problems.append("compare says it drew the chart but the file is empty or missing")
    if not drew and "no chart" not in proc.stdout:
        problems.append("compare neither drew a chart nor said why not")
    for p in problems:
        print("check_compare.py:", p, file=sys.stderr)
    if not problems:
        print(f"check_compare.py: markdown ok ({nrows} rows); chart {'drawn' if drew else 'skipped (no plotting tool)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
