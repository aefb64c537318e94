#!/usr/bin/env python3
"""Lists the AMD GPU code objects inside the hip plugin and checks that every
target of the build is among them.

    code_objects.py --objcopy OBJCOPY --bundler CLANG_OFFLOAD_BUNDLER PLUGIN TARGET...

hipcc stores a shared library's device code in its .hip_fatbin section as
clang offload bundles, one per compiled HIP source, each holding one code
object per target ("hipv4-amdgcn-amd-amdhsa--gfx90a") beside an empty host
entry. objcopy cuts the section out; clang-offload-bundler lists each bundle.
"""
import argparse
import os
import subprocess
import sys
import tempfile

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def bundles(section):
    """The offload bundles concatenated in the section, each from its magic on."""
    starts = []
    at = section.find(MAGIC)
    while at >= 0:
        starts.append(at)
        at = section.find(MAGIC, at + len(MAGIC))
    return [section[a:b] for a, b in zip(starts, starts[1:] + [len(section)])]


def plugin_bundles(objcopy, plugin, workdir):
    """The offload bundles of the plugin's .hip_fatbin section; RuntimeError
    with the reason where there are none."""
    name = os.path.basename(plugin)
    section_path = os.path.join(workdir, "hip_fatbin.bin")
    cut = subprocess.run([objcopy, "-O", "binary", "--only-section=.hip_fatbin", plugin, section_path],
                         capture_output=True, text=True, check=False)
    if cut.returncode != 0:
        raise RuntimeError("%s: objcopy failed: %s" % (name, cut.stderr.strip()))
    with open(section_path, "rb") as f:
        found = bundles(f.read())
    if not found:
        raise RuntimeError("%s: no offload bundle in its .hip_fatbin section" % name)
    return found


def list_bundle(bundler, data, workdir, index):
    path = os.path.join(workdir, "bundle%d.bin" % index)
    with open(path, "wb") as f:
        f.write(data)
    out = subprocess.run([bundler, "--list", "--type=o", "--input=" + path],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError("%s --list failed: %s" % (bundler, out.stderr.strip()))
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objcopy", required=True)
    ap.add_argument("--bundler", required=True)
    ap.add_argument("plugin")
    ap.add_argument("targets", nargs="+")
    a = ap.parse_args(argv)
    name = os.path.basename(a.plugin)
    with tempfile.TemporaryDirectory() as work:
        try:
            found = plugin_bundles(a.objcopy, a.plugin, work)
        except RuntimeError as e:
            print(e)
            return 1
        missing = []
        for i, data in enumerate(found):
            try:
                entries = list_bundle(a.bundler, data, work, i)
            except RuntimeError as e:
                print("%s: %s" % (name, e))
                return 1
            print("%s: offload bundle %d of %d (%s --list):" % (name, i + 1, len(found), a.bundler))
            for e in entries:
                print("    " + e)
            # The target id follows the triple's empty environment field: "...amdhsa--gfx90a".
            ids = {e.split("--", 1)[1] for e in entries if "amdgcn" in e and "--" in e}
            missing += ["%s (bundle %d)" % (t, i + 1) for t in a.targets if t not in ids]
    if missing:
        print("%s: no code object for %s" % (name, ", ".join(missing)))
        return 1
    print("%s: code objects for every target: %s" % (name, ", ".join(a.targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
