#!/usr/bin/env python3
"""Checks the automatic variant choice against committed benchmark figures.

figures: for every sgk-bench JSON given, every backend and preset in it, the
variant sgk picked by itself (the row marked auto) must be the fastest
variant timed there, its best of stream and graph within TOLERANCE of the
fastest row's. The figures are what the bench measured on that machine
(bench/results/), so this asserts the choice from measurements without
timing anything.

--live LIB: on a machine where the file's backend runs (the H200 for cuda),
asks instead the current libsgk which variant it picks at each preset and shape
(sgk_layer_variant_for, through the Python package) and checks it is the one
the figures mark: the figures then describe the code as it is. Exit 77 (skip)
when that backend is not available here.

usage: check_autopick.py [--live LIB] FILE.json|DIR...   (DIR: its sgk-bench JSON files)
"""
import json
import os
import sys

TOLERANCE = 1.03  # above the bench's run-to-run spread (bench/results/README.md)


def best_by_variant(rows):
    """{(backend, preset): {variant: (us, auto, shape)}} from ok rows, best of the modes."""
    out = {}
    for r in rows:
        # --device all's rows time one variant while other devices run, or
        # several devices together: not a variant's own time
        if r.get("status") != "ok" or r.get("mode") in ("concurrent", "aggregate"):
            continue
        key = (r["backend"], r["preset"])
        us, shape = r["us_median"], (r["B"], r["N"], r["D"], r["H"], r["P"])
        cur = out.setdefault(key, {}).get(r["variant"])
        if cur is None or us < cur[0]:
            out[key][r["variant"]] = (us, bool(r.get("auto")) or (cur is not None and cur[1]), shape)
        elif r.get("auto"):
            out[key][r["variant"]] = (cur[0], True, shape)
    return out


def check_figures(path, doc):
    problems, picks = [], {}
    commit = doc.get("machine", {}).get("git_commit", "?")
    for (backend, preset), variants in sorted(best_by_variant(doc["rows"]).items()):
        auto = [v for v, (_, a, _) in variants.items() if a]
        fastest = min(variants, key=lambda v: variants[v][0])
        shape = variants[fastest][2]
        if not auto:
            problems.append(f"{path}: {backend} {preset}: no row is marked as the automatic choice")
            continue
        picks[(backend, preset)] = (auto[0], shape)
        a_us, f_us = variants[auto[0]][0], variants[fastest][0]
        verdict = "ok" if a_us <= f_us * TOLERANCE else "SLOWER"
        print(f"{backend:7s} {preset:6s} picked {auto[0]:18s} {a_us:10.2f} us   fastest {fastest:18s} "
              f"{f_us:10.2f} us   {verdict}")
        if verdict != "ok":
            problems.append(f"{path} (commit {commit}): {backend} {preset}: the automatic choice "
                            f"{auto[0]} takes {a_us:.2f} us, {fastest} {f_us:.2f} us")
    return problems, picks


def check_live(lib, picks):
    os.environ["SGK_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    try:
        import numpy as np
        import sgk
    except ImportError as e:
        print(f"skip: the live check needs numpy and the sgk package ({e})")
        sys.exit(77)
    have = {b.name for b in sgk.backends() if b.available}
    backends = {b for b, _ in picks}
    if not backends & have:
        print(f"skip: none of the figures' backends ({', '.join(sorted(backends))}) is available here")
        sys.exit(77)
    problems, rng = [], np.random.default_rng(1)
    for (backend, preset), (want, (B, N, D, H, P)) in sorted(picks.items()):
        if backend not in have:
            continue
        shapes = {"D": D, "P": P, "H": H}
        weights = {k: rng.standard_normal([shapes[d] for d in dims]).astype(np.float32) * 0.1
                   for k, (_, dims) in sgk.layer.WEIGHTS.items()}
        with sgk.Layer(backend, weights) as layer:
            got = layer.variant_for(B, N)
        print(f"{backend:7s} {preset:6s} now picks {got:18s} figures picked {want}")
        if got != want:
            problems.append(f"{backend} {preset}: libsgk picks {got}, the committed figures were "
                            f"taken when it picked {want}: rerun the bench and commit its figures")
    return problems


def main(argv):
    args, live = argv[1:], None
    if args[:1] == ["--live"]:
        if len(args) < 2:
            print(__doc__, file=sys.stderr)
            return 2
        live, args = args[1], args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    paths = []
    for a in args:
        paths += [os.path.join(a, n) for n in sorted(os.listdir(a)) if n.endswith(".json")] \
            if os.path.isdir(a) else [a]
    problems, picks = [], {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if not doc.get("format", "").startswith("sgk-bench/"):
            continue  # torch_compare's files time no automatic choice of their own
        p, k = check_figures(os.path.basename(path), doc)
        problems += p
        picks.update(k)
    if not picks:
        problems.append("no automatic choice found in the figures given")
    elif live:  # only the live question: the figures' own verdict is the other test's
        problems = check_live(live, picks)
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
