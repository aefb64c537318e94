#!/usr/bin/env bash
# Builds sgk for sm_90 on this machine and copies what a GPU call runs into
# DIR (default .dev/b) in the build's own layout, so that a lease spends its
# time running instead of building (the cuda plugin takes minutes to build):
#   api/libsgk.so.0, api/sgk/libsgk-cuda.so (the plugin folder libsgk
#   searches beside itself), bench/sgk-bench, tests/test_{conformance,dtypes,train,
#   graph,defects}, tests/reliability/test_nonfinite
# The binaries find libsgk through their $ORIGIN run paths. On the machine,
# with CMocka unpacked as tools/h200.sh does it:
#   LD_LIBRARY_PATH=/tmp/sgk-debs/usr/lib/x86_64-linux-gnu .dev/b/tests/test_conformance cuda
#   .dev/b/bench/sgk-bench --backend cuda --preset all
# BUILD names the build folder (default build-sm90; configured here if new).
set -eu
dir=${1:-.dev/b}
build=${BUILD:-build-sm90}
export PATH=$PATH:/usr/local/cuda/bin
[ -f "$build/build.ninja" ] || meson setup "$build" -Dsm_archs=90 -Dhip=disabled > /dev/null
ninja -C "$build" > /dev/null
rm -rf "$dir"
mkdir -p "$dir/api/sgk" "$dir/bench" "$dir/tests/reliability"
cp -L "$build/api/libsgk.so.0" "$dir/api/"
cp -L "$build/backends/cuda/libsgk-cuda.so" "$dir/api/sgk/"
cp -L "$build/bench/sgk-bench" "$dir/bench/"
cp -L "$build"/tests/test_{conformance,dtypes,graph,defects,train} "$dir/tests/"
cp -L "$build/tests/reliability/test_nonfinite" "$dir/tests/reliability/"
du -sh "$dir"
