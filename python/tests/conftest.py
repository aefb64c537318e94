"""Lets the tests import sgk from this clone without installing it. libsgk
comes from $SGK_LIBRARY (meson test sets it) or the clone's build/ tree."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
