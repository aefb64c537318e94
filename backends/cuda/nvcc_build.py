#!/usr/bin/env python3
"""Builds the cuda plugin with nvcc: each source compiled on its own, in
parallel (nvcc compiles the sources of one command one after another, and
the plugin's translation units are large), then one link. Keeps ptxas's
resource report (the compilers' stderr) in a file.

usage: nvcc_build.py REPORT NVCC ARGS...

ARGS are one nvcc command line for the whole plugin: the sources among
them (existing files ending in .cu or .c) are compiled with every other
argument but the output and the libraries, and linked with all of them.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile

SOURCE_SUFFIXES = (".cu", ".c")


def split(args):
    """(sources, compile options, link-only arguments, output)"""
    sources, options, link_only, out = [], [], [], None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-o":
            out = args[i + 1]
            i += 2
            continue
        if a.endswith(SOURCE_SUFFIXES) and os.path.isfile(a):
            sources.append(a)
        elif a.startswith("-l") or a == "-shared":
            link_only.append(a)
        else:
            options.append(a)
        i += 1
    return sources, options, link_only, out


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc.returncode, " ".join(cmd) + "\n" + proc.stdout + proc.stderr


def main() -> int:
    report, nvcc, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sources, options, link_only, out = split(args)
    if out is None or not sources:
        sys.stderr.write("nvcc_build.py: no -o OUTPUT or no source among the arguments\n")
        return 2
    logs, failed = [], False
    with tempfile.TemporaryDirectory(prefix="sgk-nvcc-", dir=os.path.dirname(os.path.abspath(out))) as tmp:
        objs = [os.path.join(tmp, "%d-%s.o" % (k, os.path.basename(s))) for k, s in enumerate(sources)]
        jobs = max(1, min(len(sources), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(lambda so: run([nvcc] + options + ["-c", so[0], "-o", so[1]]),
                                    zip(sources, objs)))
        for rc, log in results:
            logs.append(log)
            failed |= rc != 0
        if not failed:
            rc, log = run([nvcc] + options + link_only + objs + ["-o", out])
            logs.append(log)
            failed = rc != 0
    with open(report, "w", encoding="utf-8") as f:
        f.write("".join(logs))
    if failed:
        sys.stderr.write("".join(logs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
