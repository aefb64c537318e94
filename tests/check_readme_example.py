#!/usr/bin/env python3
"""The README's examples, as users read them.

  check_readme_example.py README.md tests/example.c
      the C example must be tests/example.c verbatim, so the program the
      suite builds and runs is the one in the README;
  check_readme_example.py --python README.md
      runs the README's Python example (its ```python block) with this
      interpreter and environment: as written (cpu), then on opencl where
      sgk.backends() says it is available. Its last line prints what its
      comment says it prints, and the run must print that line last. Exits 77
      when numpy is missing. Then the PyTorch example (the block that
      imports torch), the same way, where torch is importable.
"""
import os
import re
import subprocess
import sys
import tempfile


def check_c(readme, example):
    if example.strip() not in readme:
        sys.exit("README.md does not hold tests/example.c verbatim: update one from the other")
    print("README.md holds tests/example.c")


def run_example(code, want):
    with tempfile.TemporaryDirectory(prefix="sgk-readme-") as tmp:
        path = os.path.join(tmp, "example.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        # A folder of its own, so that nothing beside the clone is imported.
        p = subprocess.run([sys.executable, path], cwd=tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
    sys.stdout.write(p.stdout)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0:
        sys.exit("the README's Python example exited %d" % p.returncode)
    if not lines or lines[-1].strip() != want:
        sys.exit("the README's Python example printed %r last, its comment says %r"
                 % (lines[-1] if lines else "", want))


def check_python(readme):
    try:
        import numpy  # noqa: F401 (the example needs it)
    except ImportError as e:
        print("skip: numpy is not importable by %s (%s)" % (sys.executable, e))
        sys.exit(77)
    blocks = re.findall(r"^```python\n(.*?)^```$", readme, re.S | re.M)
    torch_blocks = [b for b in blocks if "import torch" in b]
    if len(blocks) != 2 or len(torch_blocks) != 1:
        sys.exit("README.md has %d ```python blocks, %d of them importing torch; expected the "
                 "numpy example and the PyTorch example" % (len(blocks), len(torch_blocks)))
    code = [b for b in blocks if b not in torch_blocks][0]
    want = printed(code)
    cpu_call = 'sgk.Layer("cpu"'
    if code.count(cpu_call) != 1:
        sys.exit("the README's Python example must make one layer with %s" % cpu_call)
    print("== as written (cpu)")
    run_example(code, want)
    import sgk
    opencl = [b for b in sgk.backends() if b.name == "opencl"]
    if opencl and opencl[0].available:
        print("== on opencl")
        run_example(code.replace(cpu_call, 'sgk.Layer("opencl"'), want)
    else:
        print("opencl: not run (%s)" % (opencl[0].reason if opencl else "no such backend"))
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("PyTorch example: not run (torch is not importable: %s)" % e)
        return
    print("== the PyTorch example")
    run_example(torch_blocks[0], printed(torch_blocks[0]))


def printed(code):
    """What the example's last line says, in its comment, that it prints."""
    last = code.rstrip().splitlines()[-1]
    if "#" not in last:
        sys.exit("the last line of a README Python example has no comment saying what it prints")
    return last.split("#", 1)[1].strip()


if __name__ == "__main__":
    if sys.argv[1] == "--python":
        check_python(open(sys.argv[2], encoding="utf-8").read())
    else:
        check_c(*(open(p, encoding="utf-8").read() for p in sys.argv[1:3]))
