#!/usr/bin/env python3
"""Checks that sgkgen.py is deterministic: for every target, two fresh runs
give the same bytes, and those bytes are what the build compiled.

    check_generated.py SGKGEN SOURCE.sgk... BUILD_KERNELS_DIR
"""
import hashlib
import os
import subprocess
import sys
import tempfile

BUILT = {"c": "relation_c.c", "cuda": "relation_cuda.cu", "hip": "relation_hip.hip", "opencl": "relation.cl"}


def main(gen, srcs, built_dir):
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for target, name in BUILT.items():
            outs = []
            for run in (1, 2):
                path = os.path.join(tmp, "%s.%d" % (target, run))
                subprocess.run([sys.executable, gen, "--target", target] + srcs + [path], check=True)
                outs.append(open(path, "rb").read())
            digest = hashlib.sha256(outs[0]).hexdigest()[:16]
            same = outs[0] == outs[1]
            built = os.path.join(built_dir, name)
            matches = os.path.exists(built) and open(built, "rb").read() == outs[0]
            print("%-7s %-17s sha256 %s  runs identical: %s  matches build: %s"
                  % (target, name, digest, same, matches))
            bad += (not same) + (not matches)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:-1], sys.argv[-1]))
