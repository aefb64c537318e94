"""Runs python/tests with pytest for meson test: exit 77 (skip) with the
reason when pytest or numpy is missing, and 1 when pytest collects nothing."""
import subprocess
import sys

for module in ("pytest", "numpy"):
    try:
        __import__(module)
    except ImportError as e:
        print(f"skip: {module} is not importable by {sys.executable} ({e})")
        sys.exit(77)

rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", sys.argv[1]])
if rc == 5:
    print("pytest collected no tests: counted as a failure")
    rc = 1
sys.exit(rc)
