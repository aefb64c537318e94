"""Lets the tests import sgk from this clone without installing it. libsgk
comes from $SGK_LIBRARY (meson test sets it to the build tree's)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
