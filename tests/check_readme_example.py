#!/usr/bin/env python3
"""The README's C example must be tests/example.c, verbatim, so the program
the suite builds and runs is the one users read."""
import sys

readme, example = (open(p, encoding="utf-8").read() for p in sys.argv[1:3])
if example.strip() not in readme:
    sys.exit("README.md does not hold tests/example.c verbatim: update one from the other")
print("README.md holds tests/example.c")
