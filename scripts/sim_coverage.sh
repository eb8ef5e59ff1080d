#!/usr/bin/env bash
# Line coverage of the cuda backend's orchestration (src/compute/cuda, and the device parts of
# src/dist) under the simulated device: a build with gcov counters in those files only, the
# simulated stage tests and end-to-end runs, then gcov's figure per file and the lines never run.
# usage: scripts/sim_coverage.sh [BUILD_DIR]      (default build-coverage; a few minutes on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build-coverage}
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPIPEFILL_SIM_COVERAGE=ON >/dev/null
cmake --build "$dir" -j "$(nproc)" --target pipefill pipefill_sim sim_stage_tests compare_logits >/dev/null
find "$dir" -name '*.gcda' -delete
(cd "$dir" && ctest -j "$(nproc)" -R '^sim\.(e2e|Presets|MoeAndMla|LtGemm)' --output-on-failure | tail -3)
cd "$dir"
sources=("$root"/src/compute/cuda/*.cpp "$root"/src/dist/{nccl_comms,device_all_reduce,device_transports}.cpp)
total=0 covered=0
for source in "${sources[@]}"; do
  gcda=$(find . -name "$(basename "$source").gcda" | head -1)
  [ -n "$gcda" ] || { echo "$(basename "$source"): never run"; continue; }
  line=$(gcov -n -o "$(dirname "$gcda")" "$source" 2>/dev/null | grep -A1 "File '$source'" | tail -1)
  percent=$(echo "$line" | sed -E 's/Lines executed:([0-9.]+)% of ([0-9]+)/\1/') lines=$(echo "$line" | sed -E 's/.* of ([0-9]+)/\1/')
  printf '%-28s %6s %% of %s lines\n' "$(basename "$source")" "$percent" "$lines"
  total=$((total + lines)) covered=$(echo "$covered + $percent * $lines / 100" | bc)
done
echo "all: $(echo "scale=1; 100 * $covered / $total" | bc) % of $total lines"
