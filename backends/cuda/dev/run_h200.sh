#!/bin/bash
# One device call: build the dev harness on the H200 machine, validate every
# variant on the edge cases, time the presets, run compute-sanitizer.
# Logs go to $OUT (the device tool brings them back). Usage, from the repo root:
#   bash backends/cuda/dev/run_h200.sh [validate] [bench] [ab] [sanitize] [profile] [sassdump] ... (dev/NOTES.md)
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/sgk-out}
mkdir -p "$O"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
STEPS=${*:-validate bench sanitize}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$O/gpu.txt" 2>&1
F="-O3 -std=c++17 -arch=sm_90 -lineinfo -I.."
t0=$(date +%s)
ROOT=$(cd ../../.. && pwd)
if [[ " $STEPS " == *" smoke "* ]]; then
  # the plugin through the core, built by meson, in the background
  ( MESON=$(command -v meson || echo "python3 -m mesonbuild.mesonmain")
    $MESON setup /tmp/sgkb "$ROOT" -Dtests=false -Dsm_archs=90 -Dopencl=disabled -Dhip=disabled &&
    ninja -C /tmp/sgkb api/libsgk.so.0.1.0 backends/cuda/libsgk-cuda.so ) > "$O/meson.txt" 2>&1 &
fi
# The variant table includes the generated kernels' variants.
python3 "$ROOT/kernels/sgkgen.py" --target cuda "$ROOT/kernels/relation.sgk" /tmp/relation_cuda.cu
F="$F -I$ROOT/kernels -I$ROOT/api -I/tmp"
$NVCC $F -Xptxas -v -c ../variants.cu -o /tmp/sgkc_v.o 2> "$O/ptxas.txt" &
$NVCC $F -c ../generic.cu -o /tmp/sgkc_g.o 2> "$O/build_g.txt" &
$NVCC $F -c "$ROOT/kernels/plan.c" -o /tmp/sgkc_p.o 2> "$O/build_p.txt" &
$NVCC $F -Xcompiler -fopenmp -c harness.cu -o /tmp/sgkc_h.o 2> "$O/build_h.txt" &
# ab: the same harness built once per flag set in AB_FLAGS (sets separated
# by '|', none empty: read -a drops a trailing empty one, so give a
# harmless -D instead; default: the tiled variant's previous attention dispatch), each
# from the folder at the same place in AB_SRC (a copy of backends/cuda,
# for example another commit's; default: this one). A folder other than
# this one also gives its own harness and generic.cu, which share its
# sgkc_layer (built from this tree's, a changed struct crashed run 63's
# old build).
IFS='|' read -ra ABS <<< "${AB_FLAGS:--DSGKC_NO_ROWS}"
IFS='|' read -ra ABSRC <<< "${AB_SRC:-}"
absrc() { local s=${ABSRC[$1]:-..}; [[ $s = /* || $s = .. ]] || s=$ROOT/$s; echo "$s"; }
abobj() { [ "$(absrc $1)" = .. ] && echo "/tmp/sgkc_$2.o" || echo "/tmp/sgkc_$2-ab$1.o"; } # ab build, object (h, ht, g)
if [[ " $STEPS " == *" ab "* ]]; then
  for i in "${!ABS[@]}"; do
    src=$(absrc $i)
    $NVCC $F ${ABS[$i]} -Xptxas -v -c "$src/variants.cu" -o /tmp/sgkc_vo$i.o 2> "$O/build_vo$i.txt" &
    if [ "$src" != .. ]; then
      $NVCC $F -I"$src" -c "$src/generic.cu" -o $(abobj $i g) 2>> "$O/build_vo$i.txt" &
      $NVCC $F -I"$src" -Xcompiler -fopenmp -c "$src/dev/harness.cu" -o $(abobj $i h) 2>> "$O/build_vo$i.txt" &
      [[ " $STEPS " == *" timeline "* ]] &&
        $NVCC $F -I"$src" -DSGKC_TIMELINE -Xcompiler -fopenmp -c "$src/dev/harness.cu" -o $(abobj $i ht) 2>> "$O/build_vt$i.txt" &
    fi
  done
fi
if [[ " $STEPS " == *" timeline "* ]]; then
  $NVCC $F -DSGKC_TIMELINE -c ../variants.cu -o /tmp/sgkc_vt.o 2> "$O/build_vt.txt" &
  $NVCC $F -DSGKC_TIMELINE -Xcompiler -fopenmp -c harness.cu -o /tmp/sgkc_ht.o 2> "$O/build_ht.txt" &
  # with ab, a timeline build of each AB_SRC folder too
  [[ " $STEPS " == *" ab "* ]] && for i in "${!ABS[@]}"; do
    $NVCC $F ${ABS[$i]} -DSGKC_TIMELINE -c "$(absrc $i)/variants.cu" -o /tmp/sgkc_vt$i.o 2>> "$O/build_vt$i.txt" &
  done
fi
wait
[[ " $STEPS " == *" ab "* ]] && for i in "${!ABS[@]}"; do
  $NVCC -arch=sm_90 $(abobj $i h) /tmp/sgkc_vo$i.o $(abobj $i g) /tmp/sgkc_p.o -o /tmp/harness_old$i -lgomp 2>> "$O/build_vo$i.txt" || tail -20 "$O/build_vo$i.txt"
done
[[ " $STEPS " == *" timeline "* ]] && {
  $NVCC -arch=sm_90 /tmp/sgkc_ht.o /tmp/sgkc_vt.o /tmp/sgkc_g.o /tmp/sgkc_p.o -o /tmp/harness_vt -lgomp 2>> "$O/build_ht.txt" || cat "$O/build_ht.txt" "$O/build_vt.txt" | tail -20
  [[ " $STEPS " == *" ab "* ]] && for i in "${!ABS[@]}"; do
    $NVCC -arch=sm_90 $(abobj $i ht) /tmp/sgkc_vt$i.o $(abobj $i g) /tmp/sgkc_p.o -o /tmp/harness_vt$i -lgomp 2>> "$O/build_vt$i.txt" || tail -20 "$O/build_vt$i.txt"
  done
}
TLV=vt; [[ " $STEPS " == *" ab "* ]] && for i in "${!ABS[@]}"; do TLV="$TLV vt$i"; done
$NVCC -arch=sm_90 /tmp/sgkc_h.o /tmp/sgkc_v.o /tmp/sgkc_g.o /tmp/sgkc_p.o -o /tmp/harness -lgomp 2>> "$O/build_h.txt" || { cat "$O/build_h.txt" "$O/build_g.txt" "$O/ptxas.txt" | tail -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for s in $STEPS; do
  case $s in
    validate) SGKC_FORCE=1 /tmp/harness validate > "$O/validate.txt" 2>&1; echo "validate rc=$?";;
    timeline)
      for v in $TLV; do /tmp/harness_$v timeline > "$O/timeline-$v.txt" 2>&1; echo "timeline ($v) rc=$?"; cat "$O/timeline-$v.txt"; done;;
    rounds) # ROUNDS (default 3) of this build and each ab build in turn, each preset of BENCH_PRESETS
            # (default seed) with one variant: ROUNDS_VARIANT, default tuned-fused-small at seed and tuned-tiled otherwise
      for r in $(seq ${ROUNDS:-3}); do
        for p in ${BENCH_PRESETS:-seed}; do
          v=${ROUNDS_VARIANT:-$([ "$p" = seed ] && echo tuned-fused-small || echo tuned-tiled)}
          for i in x "${!ABS[@]}"; do
            h=/tmp/harness_old$i; name="ab build $i"; [ "$i" = x ] && { h=/tmp/harness; name="this build"; }
            [ -x $h ] && echo "round $r, $p, $name: $(SGKC_VARIANT=$v $h bench $p 2>&1 | grep -E '^ +v[0-9]' | cut -c1-100)"
          done
        done
      done | tee "$O/rounds.txt";;
    floors) /tmp/harness bench none > "$O/floors.txt" 2>&1; echo "floors rc=$?"; cat "$O/floors.txt";;
    bench) SGKC_FORCE=1 /tmp/harness bench ${BENCH_PRESETS:-} > "$O/bench.txt" 2>&1; echo "bench rc=$?";;
    ab) for i in "${!ABS[@]}"; do
          echo "# ab build $i: ${ABS[$i]} ${ABSRC[$i]:-}" > "$O/bench-ab$i.txt"
          SGKC_FORCE=1 /tmp/harness_old$i validate > "$O/validate-ab$i.txt" 2>&1; echo "validate (ab build $i) rc=$? $(tail -1 "$O/validate-ab$i.txt")"
          [ "${AB_BENCH:-1}" = 1 ] || continue # AB_BENCH=0: validate only (rounds times them)
          SGKC_FORCE=1 /tmp/harness_old$i bench ${BENCH_PRESETS:-} >> "$O/bench-ab$i.txt" 2>&1; echo "bench (ab build $i) rc=$?"
        done;;
    sanitize)
      timeout 200 compute-sanitizer --tool memcheck /tmp/harness sanitize > "$O/memcheck.txt" 2>&1; echo "memcheck rc=$?"
      timeout 200 compute-sanitizer --tool racecheck /tmp/harness sanitize > "$O/racecheck.txt" 2>&1; echo "racecheck rc=$?";;
    profile)
      ncu_profile() { # harness binary, output file
        timeout 240 ncu --clock-control none ${PROFILE_KERNEL:+--kernel-name regex:$PROFILE_KERNEL --launch-count ${PROFILE_COUNT:-1}} \
          --section SpeedOfLight --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis \
          --section LaunchStats --section WarpStateStats --section InstructionStats --print-details all \
          "$1" profile ${PROFILE_PRESETS:-} > "$2" 2>&1
      }
      ncu_profile /tmp/harness "$O/ncu.txt"; echo "ncu rc=$?"
      if [ -x /tmp/harness_old0 ]; then # and the first ab build
        ncu_profile /tmp/harness_old0 "$O/ncu-old.txt"; echo "ncu (ab build 0) rc=$?"
      fi;;
    hot) # stall samples and L1 work per SASS instruction of one kernel launch: each of HOT_SPECS, entries
         # kernel:preset:skip (launches of that kernel skipped; profile runs two calls a variant), by
         # default HOT_KERNEL:HOT_PRESET:1 (fused_small at seed); then the memory tables of the same launch
      for spec in ${HOT_SPECS:-${HOT_KERNEL:-fused_small}:${HOT_PRESET:-seed}:1}; do
        IFS=: read -r hk hp hs <<< "$spec"; tag=$hk-$hp
        timeout 240 ncu --kernel-name regex:$hk --launch-skip ${hs:-1} --launch-count 1 --section SourceCounters \
          --section WarpStateStats --page source --csv --print-source sass /tmp/harness profile $hp > "$O/hot-$tag.csv" 2>&1
        echo "hot $tag rc=$?"; python3 hot_sass.py "$O/hot-$tag.csv" > "$O/hot-$tag.txt" 2>&1
        head -12 "$O/hot-$tag.txt"; sed -n '/^per opcode/,$p' "$O/hot-$tag.txt"
        timeout 240 ncu --kernel-name regex:$hk --launch-skip ${hs:-1} --launch-count 1 --section SpeedOfLight \
          --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --print-details all \
          /tmp/harness profile $hp > "$O/mwa-$tag.txt" 2>&1
        echo "mwa $tag rc=$?"; grep -E "Shared|Wavefront|L1|Pipe|Issue|Duration|Throughput|Requests|Sectors" "$O/mwa-$tag.txt" | head -60
      done;;
    smoke)
      wait; echo "meson build done"
      $NVCC -O2 -I"$ROOT/api" plugin_smoke.cu -L/tmp/sgkb/api -lsgk -o /tmp/sgkc_smoke >> "$O/meson.txt" 2>&1 &&
        LD_LIBRARY_PATH=/tmp/sgkb/api SGK_BACKEND_PATH=/tmp/sgkb/backends/cuda /tmp/sgkc_smoke > "$O/smoke.txt" 2>&1
      echo "smoke rc=$?"; tail -5 "$O/meson.txt"; cat "$O/smoke.txt";;
    sassdump) # the SASS of the kernels matching SASS_FUN
      cuobjdump -sass /tmp/sgkc_v.o | awk -v f="${SASS_FUN:-attn_rows}" '/Function :/{p = index($0, f) > 0} p' > "$O/sass.txt"
      echo "sassdump rc=$? $(wc -l < "$O/sass.txt") lines";;
    sass)
      command -v cuobjdump >/dev/null && cuobjdump -sass /tmp/sgkc_v.o | awk '/Function :/{f=$3} /^ +\/\*[0-9a-f]+\*\//{op=$2; sub(/\..*/,"",op); n[f" "op]++} END{for(k in n) print n[k], k}' | sort -k2,2 -k1,1nr > "$O/sass_hist.txt"; echo "sass rc=$?";;
  esac
done
echo "total: $(( $(date +%s) - t0 )) s"
ptxas_summary() { grep -A2 "Compiling entry" "$1" | grep -E "entry|Used|spill" | sed -E 's/ptxas info +: //; s/Compiling entry function //' | paste - - - | cut -c1-220; }
echo "== ptxas"; ptxas_summary "$O/ptxas.txt"
for f in "$O"/build_vo*.txt; do [ -f "$f" ] && { echo "== ptxas, $(basename "$f") (attention kernels)"; ptxas_summary "$f" | grep attn_rows; }; done
[ -f "$O/ncu.txt" ] && { echo "== ncu"; python3 ncu_summary.py "$O/ncu.txt"; }
[ -f "$O/ncu-old.txt" ] && { echo "== ncu (ab build)"; python3 ncu_summary.py "$O/ncu-old.txt"; }
[ -f "$O/sass_hist.txt" ] && { echo "== sass (top opcodes of the preset kernels)"; grep -E "attn_tiled_kernelILi(32|16)ELi8|fused_small_kernelILi(16|32)ELi8|sgemm" "$O/sass_hist.txt" | awk '{c[$2]++; if (c[$2] <= 6) print}' | cut -c1-110; }
for f in validate bench memcheck racecheck; do [ -f "$O/$f.txt" ] && { echo "== $f"; grep -vE "^  (tuned-general|tuned-tiled|tuned-fused-small) .* ok$" "$O/$f.txt" | tail -60; }; done
for f in "$O"/bench-ab*.txt; do [ -f "$f" ] && { echo "== $(basename "$f" .txt)"; tail -40 "$f"; }; done
# pack: the device tool brings back at most 8 files, so fold the logs into one
if [[ " $STEPS " == *" pack "* ]]; then
  (cd "$O" && tar czf /tmp/sgkc-logs.tgz --exclude=logs.tgz . && find . -maxdepth 1 -type f -delete && mv /tmp/sgkc-logs.tgz logs.tgz)
fi
