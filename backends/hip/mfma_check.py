#!/usr/bin/env python3
"""Checks that the hip plugin's kernels run their tile products on matrix
cores where the target has them: the disassembly of every CDNA code object
holds v_mfma instructions in each kernel whose generated source calls
sgk_tc_mm, and that of every other target holds none.

    mfma_check.py --objcopy OBJCOPY --bundler CLANG_OFFLOAD_BUNDLER --objdump LLVM_OBJDUMP
                  --source relation_hip.hip PLUGIN TARGET...

The code objects come out of the plugin as code_objects.py finds them
(objcopy cuts the .hip_fatbin section, clang-offload-bundler unbundles one
target's code object); llvm-objdump disassembles them. A target the
objdump cannot disassemble (an LLVM older than the target) is reported and
skipped; when none can be, the test skips (exit 77).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from code_objects import plugin_bundles  # noqa: E402

# Targets on which the HIP prelude sets SGK_TC_MMA (kernels/sgkgen.py).
MFMA_ARCHS = {"gfx908", "gfx90a", "gfx940", "gfx941", "gfx942"}
SKIP = 77


def mm_kernels(source):
    """The kernels of the generated source whose bodies call sgk_tc_mm."""
    with open(source) as f:
        text = f.read()
    found = set()
    for part in re.split(r"(?=__global__ void )", text)[1:]:
        m = re.match(r"__global__ void (\w+)\(", part)
        if m and "sgk_tc_mm(" in part:
            found.add(m.group(1))
    return found


def mfma_counts(objdump, code_object):
    """v_mfma instructions per function, and whether anything disassembled."""
    out = subprocess.run([objdump, "-d", code_object], capture_output=True, text=True, check=False)
    counts = collections.Counter()
    fn = None
    ends = 0
    for line in out.stdout.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            fn = m.group(1)
            counts.setdefault(fn, 0)
        elif "s_endpgm" in line:
            ends += 1
        elif "v_mfma" in line and fn:
            counts[fn] += 1
    return counts, out.returncode == 0 and ends > 0, out.stderr.strip()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objcopy", required=True)
    ap.add_argument("--bundler", required=True)
    ap.add_argument("--objdump", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("plugin")
    ap.add_argument("targets", nargs="+")
    a = ap.parse_args(argv)
    want = mm_kernels(a.source)
    if not want:
        print("%s: no kernel calls sgk_tc_mm" % a.source)
        return 1
    name = os.path.basename(a.plugin)
    bad, checked, unread = 0, [], []
    with tempfile.TemporaryDirectory() as work:
        try:
            found = plugin_bundles(a.objcopy, a.plugin, work)
        except RuntimeError as e:
            print(e)
            return 1
        for i, data in enumerate(found):
            bundle = os.path.join(work, "bundle%d.bin" % i)
            with open(bundle, "wb") as f:
                f.write(data)
            for t in a.targets:
                co = os.path.join(work, "b%d-%s.co" % (i, t.replace(":", "_")))
                un = subprocess.run([a.bundler, "--unbundle", "--type=o", "--input=" + bundle, "--output=" + co,
                                     "--targets=hipv4-amdgcn-amd-amdhsa--" + t],
                                    capture_output=True, text=True, check=False)
                if un.returncode != 0 or not os.path.getsize(co):
                    print("%s: bundle %d: no code object for %s: %s" % (name, i + 1, t, un.stderr.strip()))
                    bad += 1
                    continue
                counts, ok, err = mfma_counts(a.objdump, co)
                if not ok:
                    print("%s: bundle %d, %s: %s cannot disassemble it (%s); not checked"
                          % (name, i + 1, t, a.objdump, (err.splitlines() or ["no instructions"])[0]))
                    unread.append(t)
                    continue
                checked.append(t)
                arch = t.split(":")[0]
                kernels = sorted(k for k in counts if k.startswith("sgk_k_"))
                listing = ", ".join("%s %d" % (k, counts[k]) for k in kernels if counts[k])
                total = sum(counts.values())
                print("%s: bundle %d, %s: %d v_mfma (%s)" % (name, i + 1, t, total, listing or "none"))
                if arch in MFMA_ARCHS:
                    missing = sorted(k for k in want if counts.get(k, 0) == 0)
                    if missing:
                        print("    no v_mfma in %s, which call sgk_tc_mm" % ", ".join(missing))
                        bad += 1
                elif total:
                    print("    %s has no matrix cores in sgk's build, yet its code holds v_mfma" % t)
                    bad += 1
    if bad:
        return 1
    if not checked:
        print("%s: %s disassembled none of the code objects" % (name, a.objdump))
        return SKIP
    print("%s: every kernel that calls sgk_tc_mm (%s) runs v_mfma on the matrix-core targets among %s%s"
          % (name, ", ".join(sorted(want)), ", ".join(checked),
             "; not disassembled: " + ", ".join(unread) if unread else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
