#!/usr/bin/env python3
"""Reads meson's testlog.json and the conformance lines the suite prints;
prints 'N passed, N failed' last and exits 1 on any failure, when the cpu
backend ran no conformance case, or when PoCL is installed and the opencl
backend ran none. Extra arguments name CI steps that failed before testing."""
import json
import re
import subprocess
import sys

def main(path, failed_steps):
    passed = failed = skipped = 0
    cases = {}
    problems = ["step failed: " + s for s in failed_steps]
    try:
        records = [json.loads(line) for line in open(path) if line.strip()]
    except OSError as e:
        records = []
        problems.append("no test log: %s" % e)
    for r in records:
        res = r.get("result")
        if res == "OK":
            passed += 1
        elif res in ("SKIP",):
            skipped += 1
            print("skipped: %s: %s" % (r.get("name"), (r.get("stdout") or "").strip().splitlines()[-1:] or ""))
        else:
            failed += 1
            print("failed: %s (%s)" % (r.get("name"), res))
        for m in re.finditer(r"conformance: backend=(\w+) variant=(\S+) cases=(\d+) passed=(\d+) failed=(\d+)",
                             r.get("stdout") or ""):
            be, var, n = m.group(1), m.group(2), int(m.group(3))
            cases[be] = cases.get(be, 0) + n
            print("conformance %-7s %-16s %4d cases, %d passed, %d failed" % (be, var, n, int(m.group(4)), int(m.group(5))))
    if cases.get("cpu", 0) == 0:
        problems.append("the cpu backend ran zero conformance cases")
    pocl = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "pocl-opencl-icd"],
                          capture_output=True, text=True).stdout
    if "install ok installed" in pocl and cases.get("opencl", 0) == 0:
        problems.append("PoCL is installed but the opencl backend ran zero conformance cases")
    for p in problems:
        print("CI: " + p)
    failed += len(problems)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
