#!/usr/bin/env bash
# The H200 runs behind bench/results/ and the CUDA/OpenCL test reports.
# Run from the repository root on the GPU machine:
#   bash bench/results/run-h200.sh test              conformance, defects and device offsets on cuda,
#                                                    conformance and defects on NVIDIA's OpenCL
#                                                    (TESTS names other meson tests)
#   bash bench/results/run-h200.sh sanitize [TOOLS]  compute-sanitizer over the quick case table
#                                                    (SAN_TIMEOUT s a tool, default 450: racecheck
#                                                    takes about 350; SGK_TEST_FILTER runs a part;
#                                                    SAN_QUICK=0 runs the whole table but the xl preset;
#                                                    SGK_TEST_VARIANTS=a,b only those variants;
#                                                    SAN_SKIP_THREADS=0 keeps concurrent_forward)
#   bash bench/results/run-h200.sh bench             sgk-bench on every preset, cuda and opencl
#   bash bench/results/run-h200.sh torch             bench/torch_compare.py (TORCH_ARGS passes options)
# Each mode builds first (a no-op when build/ is up to date).
# Needs: nvcc, meson, ninja, python3 with torch; CMocka and the OpenCL ICD
# loader/headers as Debian .debs in .debs/ (apt-get download libcmocka0
# libcmocka-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers), and
# the PyTorch anchors in .dev/anchors (a copy of shared/anchors).
# Logs go to $OUT (default /tmp/sgk-h200).
set -u
mode=${1:-test}
O=${OUT:-/tmp/sgk-h200}
mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# Debian packages unpacked into a prefix; their .pc files point there.
P=/tmp/sgk-debs
mkdir -p "$P"
for f in .debs/*.deb; do dpkg -x "$f" "$P"; done
for pc in $(find "$P" -name '*.pc'); do sed -i "s|/usr|$P/usr|g" "$pc"; done
lib=$P/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$lib/pkgconfig:$P/usr/share/pkgconfig
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CPATH=$P/usr/include LIBRARY_PATH=$lib CMAKE_PREFIX_PATH=$P/usr
# NVIDIA's OpenCL through the ICD loader.
mkdir -p /tmp/sgk-icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/sgk-icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/sgk-icd

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$O/gpu.txt" 2>&1
commit=$(cat .dev/commit 2>/dev/null || echo unknown)
export SGK_GIT_COMMIT=$commit
if [ ! -f build/build.ninja ]; then
  meson setup build -Dsm_archs=90 -Dhip=disabled > "$O/setup.txt" 2>&1 || { tail -40 "$O/setup.txt"; exit 1; }
fi
ninja -C build > "$O/build.txt" 2>&1 || { grep -E "error|FAILED" -A3 "$O/build.txt" | head -60; exit 1; }
stamp "built ($commit)"; grep -A12 "^  backends" "$O/setup.txt" | head -8
build/bench/sgk-bench --list | tee "$O/list.txt"

case $mode in
test)
  SGK_TEST_XL=1 meson test -C build --no-rebuild --print-errorlogs --num-processes 1 \
      ${TESTS:-conformance-cuda defects-cuda device-offsets-cuda conformance-opencl defects-opencl api golden} > "$O/tests.txt" 2>&1
  stamp "tests rc=$?"
  grep -hE "^ *[0-9]+/[0-9]+ |^conformance: backend=.*variant" "$O/tests.txt" build/meson-logs/testlog.txt | sort -u | cut -c1-160
  cp build/meson-logs/testlog.txt "$O/testlog.txt";;
sanitize)
  # Every CUDA variant over the quick case table (or the whole one), under each tool.
  shift
  tools=${*:-memcheck racecheck synccheck initcheck}
  for tool in $tools; do
    SGK_TEST_QUICK=${SAN_QUICK:-1} SGK_TEST_SKIP_THREADS=${SAN_SKIP_THREADS:-1} timeout ${SAN_TIMEOUT:-450} compute-sanitizer --tool $tool --error-exitcode 9 \
        build/tests/test_conformance cuda > "$O/sanitize-$tool.txt" 2>&1
    rc=$?
    stamp "compute-sanitizer $tool rc=$rc: $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$O/sanitize-$tool.txt" | tr '\n' ' ') $(grep -c '^\[       OK' "$O/sanitize-$tool.txt") tests ok; $(grep '^conformance: backend=cuda variant' "$O/sanitize-$tool.txt" | tr '\n' ' ')"
  done;;
bench)
  build/bench/sgk-bench --backend ${BENCH_BACKENDS:-cuda,opencl} --json "$O/h200-sgk.json" > "$O/h200-sgk.txt" 2>&1
  stamp "sgk-bench rc=$?"; cut -c1-200 "$O/h200-sgk.txt";;
torch)
  PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_compare.py --lib build/api/libsgk.so \
      --anchors .dev/anchors ${TORCH_ARGS:-} --json "$O/h200-torch.json" > "$O/h200-torch.txt" 2>&1
  stamp "torch_compare rc=$?"; tail -60 "$O/h200-torch.txt";;
esac
stamp done
