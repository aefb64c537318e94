#!/usr/bin/env python3
"""Runs nvcc, keeping its ptxas resource report (stderr) in a file.

usage: nvcc_build.py REPORT NVCC ARGS...
"""
import subprocess
import sys


def main() -> int:
    report, cmd = sys.argv[1], sys.argv[2:]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(report, "w", encoding="utf-8") as f:
        f.write(" ".join(cmd) + "\n")
        f.write(proc.stdout)
        f.write(proc.stderr)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
