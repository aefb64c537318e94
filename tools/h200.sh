#!/usr/bin/env bash
# The one script for the H200 machine: builds sgk for sm_90 and runs one job.
# From the repository root on that machine:
#   bash tools/h200.sh test              conformance, defects and device offsets on cuda,
#                                        conformance and defects on NVIDIA's OpenCL, api, golden
#                                        (TESTS names other meson tests)
#   bash tools/h200.sh check             after a change to a cuda kernel, in one short call: builds
#                                        only the cuda plugin, sgk-bench and the test programs, runs
#                                        conformance, nonfinite and dtypes on cuda, then
#                                        compute-sanitizer (CHECK_TOOLS, default memcheck racecheck)
#                                        over CHECK_VARIANTS (default tuned-tiled) at CHECK_CASES (a
#                                        default list of the pass and attention paths), into
#                                        check-*.txt; each sanitizer run is skipped once fewer than
#                                        60 s of CHECK_LIMIT (default 540 s from the start) are left
#   bash tools/h200.sh sanitize [TOOLS]  compute-sanitizer over every cuda variant's quick case
#                                        table, once per tool (default: memcheck racecheck synccheck
#                                        initcheck; SAN_TIMEOUT s a tool, default 450; SAN_QUICK=0 the
#                                        whole table but xl; SGK_TEST_FILTER, SGK_TEST_VARIANTS=a,b
#                                        narrow it; SAN_SKIP_THREADS=0 keeps concurrent_forward)
#   bash tools/h200.sh bench [PRESETS]   sgk-bench (default every preset) on BENCH_BACKENDS
#                                        (default cuda,opencl; BENCH_VARIANTS=a,b only those),
#                                        into h200-sgk.json/.txt
#   bash tools/h200.sh generated [PRESETS]  sgk-bench of the generated kernels (small, tiled) on cuda
#                                        and NVIDIA's OpenCL in fp32 and bf16 (default seed, mid,
#                                        large, s02, s12, s13), into gen-f32/gen-bf16.json/.txt
#   bash tools/h200.sh train [PRESETS]   the training calls on cuda and NVIDIA's OpenCL: the gradient
#                                        table (train-*, and dtypes-cuda's 16-bit one), compute-sanitizer
#                                        memcheck and racecheck over test_train cuda (TRAIN_FILTER, a
#                                        cmocka glob, default mask_*), sgk-bench --train (default seed,
#                                        mid, large, s02, s13), each kernel's time at mid by ncu and
#                                        attn_bwd's full ncu report, sgk.torch's autograd tests and torch_compare --train at
#                                        those shapes, into train-*.txt, train-bench.json and
#                                        train-compare.json (with BUNDLE: cuda's test_train, the
#                                        sanitizers, the bench and ncu, from the bundle)
#   bash tools/h200.sh devices [PRESETS] every GPU of the host at once: devices-cuda and threads-cuda,
#                                        sgk-bench --device all (default every preset), the two-GPU
#                                        torch tests and the DDP test (NCCL_NVLS_ENABLE=0), into
#                                        devices-*.txt and devices-sgk.json
#   bash tools/h200.sh torch             bench/torch_compare.py (TORCH_ARGS passes options),
#                                        into h200-torch.json/.txt
#   bash tools/h200.sh results           what bench/results/ files for the H200, in one call:
#                                        sgk-bench on every preset and sweep shape and
#                                        torch_compare at the same shapes, both on the cuda
#                                        variants RESULT_VARIANTS names, then
#                                        bench/check_autopick.py on the sgk-bench JSON
#                                        (RESULT_DTYPE=bf16 or f16: that dtype, into
#                                        h200-sgk-DTYPE.json and h200-torch-DTYPE.json)
#   bash tools/h200.sh cpu               the host's CPU: sgk-bench on the cpu backend and
#                                        torch_compare --device cpu at the same shapes (CPU_PRESETS,
#                                        default the presets but xl and the sweep shapes under
#                                        2 GFLOP), at 2 and 16 threads (CPU_THREADS) bound one a
#                                        core (OMP_PLACES=cores, OMP_PROC_BIND=close unless set),
#                                        into cpuT-sgk.json/.txt and cpuT-torch.json/.txt
#   bash tools/h200.sh kernels [PRESETS] each kernel's time in one call of tuned-tiled (or
#                                        KERNEL_VARIANT; KERNEL_DTYPE bf16 or f16 for a 16-bit
#                                        layer) at each preset (default s12 s13 s08), by ncu at
#                                        the run's clocks, into kernels.txt
#   bash tools/h200.sh profile REGEX PRESET  ncu's full report (speed of light, pipes, warp
#                                        stalls, memory) of the first kernel of tuned-tiled (or
#                                        KERNEL_VARIANT) matching REGEX at PRESET, into profile.txt
#   bash tools/h200.sh tcgemm [SEED]     backends/cuda/dev/tc_gemm_check.cu: the projection GEMMs
#                                        (tc_gemm.cuh, wg_gemm.cuh at each block width)
#                                        validated against fp64, then timed (the dev programs stop
#                                        after DEV_TIMEOUT s, default 180)
#   bash tools/h200.sh attncheck [SEED]  backends/cuda/dev/attn_check.cu: the attention kernels
#                                        on the MLP pass's bias and candidates, validated, timed
#   bash tools/h200.sh mlpcheck [SEED]   backends/cuda/dev/mlp_check.cu: the relation MLP pass
#                                        and candidates, validated, timed
#   bash tools/h200.sh rel16check [SEED] backends/cuda/dev/rel16_check.cu: attn_rel16.cuh, the MLP and
#                                        the attention of a 16-bit layer in one kernel (not yet in the
#                                        library), validated, timed beside the pass and attn_mma.cuh
#   bash tools/h200.sh harness [ARGS]    backends/cuda/dev/harness.cu: validate every cuda kernel
#                                        against its own fp64 reference, then ARGS (default
#                                        "bench"; "bench mid large", "sanitize"; with
#                                        HARNESS_FLAGS=-DSGKC_TIMELINE, "timeline [B,N,D,H,P]")
# BUNDLE=DIR (bench, torch, results, kernels, profile, cpu, train): run the binaries
# tools/bundle.sh left in DIR instead of building, so that a lease's time goes to
# running; the jobs that run meson's tests need the build and refuse it.
# Each job builds first (a no-op while build/ is up to date on a warm machine),
# but tcgemm, attncheck, mlpcheck and rel16check, which build their own program alone.
# Needs nvcc, meson, ninja, python3 (with torch for `torch`); CMocka and the OpenCL
# ICD loader and headers as Debian packages in .debs/ (see DEVELOPERS.md); the commit
# to record in .dev/commit when the tree carries no .git.
# Logs go to $OUT (default /tmp/sgk-h200).
set -u
mode=${1:-test}
[ $# -gt 0 ] && shift
O=${OUT:-/tmp/sgk-h200}
mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# The Debian packages unpacked into a prefix; their .pc files point there.
P=/tmp/sgk-debs
mkdir -p "$P"
for f in .debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$P"; done
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
commit=$(cat .dev/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
export SGK_GIT_COMMIT=$commit
# The dev programs build with nvcc alone (dev_check), in under a minute:
# a short lease runs them without the library's build.
# Where sgk-bench and libsgk are: the build, or a bundle of them.
BD=${BUNDLE:-build}
case $mode in
tcgemm|attncheck|mlpcheck|rel16check) ;;
*)
  if [ -n "${BUNDLE:-}" ]; then
    case $mode in
    bench|torch|results|kernels|profile|cpu|train) ;;
    *) echo "BUNDLE runs bench, torch, results, kernels, profile, cpu and train only (mode $mode needs the build)"; exit 1;;
    esac
    [ -x "$BD/bench/sgk-bench" ] || { echo "BUNDLE=$BD has no bench/sgk-bench (tools/bundle.sh makes one)"; exit 1; }
    stamp "prebuilt ($commit) in $BD"
    "$BD/bench/sgk-bench" --list | tee "$O/list.txt"
  else
    if [ ! -f build/build.ninja ]; then
      meson setup build -Dsm_archs=90 -Dhip=disabled > "$O/setup.txt" 2>&1 || { tail -40 "$O/setup.txt"; exit 1; }
    fi
    # check builds what its tests run, not the opencl plugin and the rest
    targets=()
    [ "$mode" = check ] && targets=(backends/cuda/libsgk-cuda.so bench/sgk-bench tests/test_conformance tests/test_dtypes
                                    tests/reliability/test_nonfinite)
    ninja -C build "${targets[@]}" > "$O/build.txt" 2>&1 || { grep -E "error|FAILED" -A3 "$O/build.txt" | head -60; exit 1; }
    stamp "built ($commit)"
    [ "$mode" = check ] || build/bench/sgk-bench --list | tee "$O/list.txt"
  fi;;
esac

# A standalone program of backends/cuda/dev/ (NAME.cu): built, run with SEED, its log's tail.
dev_check() {
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fopenmp -Ibackends/cuda \
      "backends/cuda/dev/$1.cu" -o "/tmp/sgk-$1" \
      > "$O/$1-build.txt" 2>&1 || { tail -40 "$O/$1-build.txt"; exit 1; }
  timeout "${DEV_TIMEOUT:-180}" "/tmp/sgk-$1" "$2" > "$O/$1.txt" 2>&1
  stamp "$1 rc=$?"; tail -80 "$O/$1.txt"
}

case $mode in
test)
  SGK_TEST_XL=1 meson test -C build --no-rebuild --print-errorlogs --num-processes 1 \
      ${TESTS:-conformance-cuda defects-cuda device-offsets-cuda conformance-opencl defects-opencl api golden} > "$O/tests.txt" 2>&1
  stamp "tests rc=$?"
  grep -hE "^ *[0-9]+/[0-9]+ |^conformance: backend=.*variant" "$O/tests.txt" build/meson-logs/testlog.txt | sort -u | cut -c1-160
  cp build/meson-logs/testlog.txt "$O/testlog.txt";;
check)
  meson test -C build --no-rebuild --print-errorlogs --num-processes 1 conformance-cuda nonfinite-cuda dtypes-cuda \
      > "$O/check-tests.txt" 2>&1
  stamp "tests rc=$?"
  grep -hE "^ *[0-9]+/[0-9]+ |^conformance: backend=.*variant" "$O/check-tests.txt" | sort -u | cut -c1-160
  for c in ${CHECK_CASES:-sweep_s08_like sweep_s13_like sweep_s07_like pair_dim_33 head_dim_3 mask_empty_rows_u8}; do
    for tool in ${CHECK_TOOLS:-memcheck racecheck}; do
      [ $(( $(date +%s) - t0 )) -lt $(( ${CHECK_LIMIT:-540} - 60 )) ] || break 2
      # not SGK_TEST_QUICK: it skips the sweep-like cases, and the filter keeps the run to one case
      SGK_TEST_VARIANTS=${CHECK_VARIANTS:-tuned-tiled} SGK_TEST_FILTER=$c timeout 60 \
          compute-sanitizer --tool "$tool" --error-exitcode 9 build/tests/test_conformance cuda > "$O/check-san.txt" 2>&1
      rc=$?
      stamp "compute-sanitizer $tool $c rc=$rc: $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$O/check-san.txt" | tr '\n' ' ') $(grep -c '^\[       OK' "$O/check-san.txt") tests ok" |
          tee -a "$O/check-sanitize.txt"
      [ $rc -eq 0 ] || tail -60 "$O/check-san.txt" >> "$O/check-sanitize.txt"
    done
  done
  rm -f "$O/check-san.txt";;
sanitize)
  for tool in ${*:-memcheck racecheck synccheck initcheck}; do
    SGK_TEST_QUICK=${SAN_QUICK:-1} SGK_TEST_SKIP_THREADS=${SAN_SKIP_THREADS:-1} timeout ${SAN_TIMEOUT:-450} \
        compute-sanitizer --tool "$tool" --error-exitcode 9 build/tests/test_conformance cuda > "$O/sanitize-$tool.txt" 2>&1
    rc=$?
    stamp "compute-sanitizer $tool rc=$rc: $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$O/sanitize-$tool.txt" | tr '\n' ' ') $(grep -c '^\[       OK' "$O/sanitize-$tool.txt") tests ok; $(grep '^conformance: backend=cuda variant' "$O/sanitize-$tool.txt" | tr '\n' ' ')"
  done;;
bench)
  presets=$(echo "${*:-all}" | tr ' ' ',')
  variants=()
  [ -n "${BENCH_VARIANTS:-}" ] && variants=(--variant "$BENCH_VARIANTS")
  "$BD/bench/sgk-bench" --backend "${BENCH_BACKENDS:-cuda,opencl}" --preset "$presets" "${variants[@]}" --json "$O/h200-sgk.json" > "$O/h200-sgk.txt" 2>&1
  stamp "sgk-bench rc=$?"; cut -c1-200 "$O/h200-sgk.txt";;
generated)
  presets=$(echo "${*:-seed mid large s02 s12 s13}" | tr ' ' ',')
  for dt in f32 bf16; do
    build/bench/sgk-bench --backend cuda,opencl --variant small,tiled --dtype $dt --preset "$presets" \
        --json "$O/gen-$dt.json" > "$O/gen-$dt.txt" 2>&1
    stamp "sgk-bench generated $dt rc=$?"; grep -E "^(cuda|opencl) " "$O/gen-$dt.txt" | cut -c1-200
  done;;
train)
  # With BUNDLE: test_train on cuda alone (the bundle has no opencl plugin,
  # meson or Python extension); else meson's training tests.
  if [ -n "${BUNDLE:-}" ]; then
    timeout 300 "$BD/tests/test_train" cuda > "$O/train-tests.txt" 2>&1
    stamp "test_train cuda rc=$?"; grep -E "^FAIL|PASSED|FAILED" "$O/train-tests.txt" | head -20
  else
    meson test -C build --no-rebuild --print-errorlogs --num-processes 1 ${TESTS:-train-cuda train-opencl dtypes-cuda} \
        > "$O/train-tests.txt" 2>&1
    stamp "tests rc=$?"
    grep -hE "^ *[0-9]+/[0-9]+ |training runs" "$O/train-tests.txt" build/meson-logs/testlog.txt | sort -u | cut -c1-160
  fi
  for tool in memcheck racecheck; do
    SGK_TEST_FILTER="${TRAIN_FILTER:-mask_*}" timeout ${SAN_TIMEOUT:-240} compute-sanitizer --tool $tool \
        --error-exitcode 9 "$BD/tests/test_train" cuda > "$O/train-sanitize-$tool.txt" 2>&1
    stamp "compute-sanitizer $tool rc=$?: $(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$O/train-sanitize-$tool.txt" | tr '\n' ' ') $(grep -c '^\[       OK' "$O/train-sanitize-$tool.txt") tests ok"
  done
  presets=$(echo "${*:-seed mid large s02 s13}" | tr ' ' ',')
  backends=cuda,opencl
  [ -n "${BUNDLE:-}" ] && backends=cuda
  "$BD/bench/sgk-bench" --backend $backends --variant tiled --train --preset "$presets" \
      --json "$O/train-bench.json" > "$O/train-bench.txt" 2>&1
  stamp "sgk-bench --train rc=$?"; grep -E "^(cuda|opencl) " "$O/train-bench.txt" | cut -c1-200
  # each kernel of one forward_train and backward at mid, in launch order:
  # the generated kernels (sgk_k_*), behind a tuned-tiled forward (sgkc_*,
  # which the filter leaves out)
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:'^sgk_' -c 30 \
      "$BD/bench/sgk-bench" --backend cuda --variant tuned-tiled --train --preset mid --quick --no-check \
      > "$O/train-kernels.txt" 2>&1
  stamp "ncu rc=$?"
  awk '/^  [a-zA-Z_]/ {name = $1 == "void" ? $2 : $1} /gpu__time_duration.sum/ {printf "%s %s %s\n", name, $NF, $(NF-1)}' \
      "$O/train-kernels.txt"
  # what limits attn_bwd, the attention's backward on the generated design: ncu's full report at mid
  timeout 120 ncu --clock-control none --set full -k regex:'^sgk_k_attn_bwd' -c 1 \
      "$BD/bench/sgk-bench" --backend cuda --variant tuned-tiled --train --preset mid --quick --no-check \
      > "$O/train-attn-bwd.txt" 2>&1
  stamp "ncu attn_bwd rc=$?"
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Executed Ipc A|Compute \(SM\) Th|Memory Throughput|Stall" \
      "$O/train-attn-bwd.txt" | head -30
  [ -n "${BUNDLE:-}" ] && exit 0
  SGK_LIBRARY=build/api/libsgk.so SGK_EXTENSION=$(ls build/python/_fast*.so 2>/dev/null) timeout 420 python3 -m pytest -q python/tests/test_torch.py -k "autograd or backward" \
      > "$O/train-torch.txt" 2>&1
  stamp "torch autograd tests rc=$?"; tail -5 "$O/train-torch.txt"
  PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_compare.py --lib build/api/libsgk.so --train \
      --preset "$presets" --torch-variants eager,sdpa,compile --json "$O/train-compare.json" > "$O/train-compare.txt" 2>&1
  stamp "torch_compare --train rc=$?"; sed -n '/^shape  B,N,D,H,P/,/^$/p' "$O/train-compare.txt";;
devices)
  # Every GPU of the host at once (issue 43's run; NVLink multicast off, as
  # the machine's notes ask): the device test, sgk-bench --device all, and
  # the PyTorch two-GPU and DDP tests.
  export NCCL_NVLS_ENABLE=0
  meson test -C build --no-rebuild --print-errorlogs --num-processes 1 devices-cuda threads-cuda > "$O/devices-tests.txt" 2>&1
  stamp "tests rc=$?"; grep -hE "^ *[0-9]+/[0-9]+ |devices backend|skipped:" "$O/devices-tests.txt" build/meson-logs/testlog.txt | sort -u
  build/bench/sgk-bench --backend cuda --device all --preset "$(echo "${*:-all}" | tr ' ' ',')" \
      --json "$O/devices-sgk.json" > "$O/devices-sgk.txt" 2>&1
  stamp "sgk-bench --device all rc=$?"; grep -E "^cuda " "$O/devices-sgk.txt" | cut -c1-200
  SGK_LIBRARY=build/api/libsgk.so SGK_EXTENSION=$(ls build/python/_fast*.so 2>/dev/null) timeout 500 python3 -m pytest -q python/tests/test_torch.py -k "device" \
      python/tests/test_ddp.py > "$O/devices-torch.txt" 2>&1
  stamp "torch two-GPU and DDP tests rc=$?"; tail -5 "$O/devices-torch.txt";;
torch)
  PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_compare.py --lib "$BD/api/libsgk.so.0" \
      ${TORCH_ARGS:-} --json "$O/h200-torch.json" > "$O/h200-torch.txt" 2>&1
  stamp "torch_compare rc=$?"; tail -60 "$O/h200-torch.txt";;
results)
  v=${RESULT_VARIANTS:-tuned-tc,tuned-fused-small,tuned-tiled,tuned-tiled-dmma}
  dt=${RESULT_DTYPE:-f32} sfx=
  case $dt in
  f32) tdt=float32;;
  bf16) tdt=bfloat16 sfx=-bf16;;
  f16) tdt=float16 sfx=-f16;;
  *) echo "RESULT_DTYPE is f32, bf16 or f16, not $dt"; exit 1;;
  esac
  "$BD/bench/sgk-bench" --backend cuda --preset all --variant "$v" --dtype "$dt" --json "$O/h200-sgk$sfx.json" \
      > "$O/h200-sgk$sfx.txt" 2>&1
  stamp "sgk-bench rc=$?"
  PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_compare.py --lib "$BD/api/libsgk.so.0" \
      --dtype "$tdt" --preset all --torch-variants eager,sdpa,compile --sgk-variants "$v" \
      --json "$O/h200-torch$sfx.json" > "$O/h200-torch$sfx.txt" 2>&1
  stamp "torch_compare rc=$?"
  python3 bench/check_autopick.py "$O/h200-sgk$sfx.json" > "$O/autopick$sfx.txt" 2>&1
  stamp "check_autopick rc=$?"; grep -v " ok$" "$O/autopick$sfx.txt"
  sed -n '/^shape  B,N,D,H,P/,$p' "$O/h200-torch$sfx.txt";;
cpu)
  lscpu > "$O/lscpu.txt" 2>&1
  # one thread a physical core for both sides (sgk's libgomp and PyTorch's
  # OpenMP both read these): a 2-thread run whose threads land on one core's
  # two hardware threads measures neither
  export OMP_PLACES=${OMP_PLACES:-cores} OMP_PROC_BIND=${OMP_PROC_BIND:-close}
  shapes=${CPU_PRESETS:-seed,mid,large,s01,s02,s03,s04,s05,s06,s11,s14}
  for t in ${CPU_THREADS:-2 16}; do
    "$BD/bench/sgk-bench" --backend cpu --threads "$t" --preset "$shapes" --json "$O/cpu$t-sgk.json" \
        > "$O/cpu$t-sgk.txt" 2>&1
    stamp "sgk-bench cpu threads=$t rc=$?"
    PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-420} python3 bench/torch_compare.py --lib "$BD/api/libsgk.so.0" \
        --device cpu --threads "$t" --preset "$shapes" --torch-variants eager,sdpa --json "$O/cpu$t-torch.json" \
        > "$O/cpu$t-torch.txt" 2>&1
    stamp "torch_compare cpu threads=$t rc=$?"
    sed -n '/^shape  B,N,D,H,P/,/^$/p' "$O/cpu$t-torch.txt"
  done;;
kernels)
  for p in ${*:-s12 s13 s08}; do
    ncu --clock-control none --metrics gpu__time_duration.sum -k regex:sgk -c 8 "$BD/bench/sgk-bench" \
        --backend cuda --variant "${KERNEL_VARIANT:-tuned-tiled}" --dtype "${KERNEL_DTYPE:-f32}" --preset "$p" --quick \
        --no-check > "$O/ncu-$p.txt" 2>&1
    echo "$p: $(awk '/^  [a-zA-Z_]/ {name = $1 == "void" ? $2 : $1} /gpu__time_duration.sum/ {printf "%s %s %s; ", name, $NF, $(NF-1)}' "$O/ncu-$p.txt")"
  done | tee "$O/kernels.txt";;
harness)
  # The kernels without the core (backends/cuda/dev/harness.cu), built from this tree.
  H=/tmp/sgk-harness
  mkdir -p "$H"
  python3 kernels/sgkgen.py --target cuda kernels/relation.sgk kernels/train.sgk "$H/relation_cuda.cu"
  F="-O3 -std=c++17 -arch=sm_90 -lineinfo -Ibackends/cuda -Ikernels -Iapi -I$H ${HARNESS_FLAGS:-}"
  # plan.c and repack.c are C (C11's _Static_assert, void * conversions)
  for c in plan repack; do gcc -O2 -std=c11 -c -Ikernels -Iapi "kernels/$c.c" -o "$H/$c.o" || exit 1; done
  nvcc $F -Xcompiler -fopenmp backends/cuda/dev/harness.cu backends/cuda/variants.cu backends/cuda/generic.cu backends/cuda/tc.cu \
      "$H/plan.o" "$H/repack.o" -o "$H/harness" -lgomp > "$O/harness-build.txt" 2>&1 ||
      { tail -40 "$O/harness-build.txt"; exit 1; }
  stamp "harness built"
  "$H/harness" validate > "$O/harness-validate.txt" 2>&1
  stamp "validate rc=$?"; tail -5 "$O/harness-validate.txt"
  set -- ${*:-bench}
  "$H/harness" "$@" > "$O/harness-$1.txt" 2>&1
  stamp "harness $* rc=$?"; tail -40 "$O/harness-$1.txt";;
tcgemm)
  # tuned-tc's 3xTF32 GEMM alone: validated against a double reference, then timed.
  dev_check tc_gemm_check "${1:-7}";;
profile)
  ncu --clock-control none --set full -k "regex:${1:?a kernel name regex}" -c 1 "$BD/bench/sgk-bench" \
      --backend cuda --variant "${KERNEL_VARIANT:-tuned-tiled}" --preset "${2:?a preset}" --quick --no-check \
      > "$O/profile.txt" 2>&1
  stamp "ncu rc=$?"
  grep -E "^  [a-zA-Z_]|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Issue Slots|Executed Ipc|Stall|Pipe|Bank|Warp Cycles|Eligible|L1/TEX Hit|L2 Hit|DRAM" \
      "$O/profile.txt" | head -80;;
mlpcheck)
  # the relation MLP pass and its other instances: validated, then timed
  dev_check mlp_check "${1:-7}";;
attncheck)
  # the attention kernels on the MLP pass's bias, and attn_mma's other instances: validated, then timed
  dev_check attn_check "${1:-7}";;
rel16check)
  # attn_rel16.cuh (the 16-bit MLP and attention in one kernel) and its pack kernel: validated, then
  # timed beside the pass and attn_mma.cuh
  dev_check rel16_check "${1:-7}";;
*)
  echo "usage: tools/h200.sh test|check|sanitize [TOOLS]|bench [PRESETS]|generated [PRESETS]|train [PRESETS]|devices [PRESETS]|torch|results|cpu|kernels [PRESETS]|profile REGEX PRESET|harness [ARGS]|tcgemm [SEED]|attncheck [SEED]|mlpcheck [SEED]|rel16check [SEED]" >&2
  exit 2;;
esac
stamp done
