#!/usr/bin/env python3
"""Prints the sgk commit for sgk-bench's output: $SGK_GIT_COMMIT when set (for
builds from a copy without .git), else `git describe`; exits 1 when neither
is available so that meson's vcs_tag falls back to "unknown"."""
import os
import subprocess
import sys

commit = os.environ.get("SGK_GIT_COMMIT", "").strip()
if not commit:
    try:
        commit = subprocess.run(["git", "-C", sys.argv[1], "describe", "--always", "--dirty", "--tags"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        sys.exit(1)
print(commit)
