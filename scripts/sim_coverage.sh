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
(cd "$dir" && ctest -j "$(nproc)" -R '^sim\.(e2e|kv|Presets|MoeAndMla|LtGemm|DeviceWeights)' --output-on-failure | tail -3) || true
# gcov on every counter file; one line per source of the backend's orchestration.
cd "$dir"
report=$(for data in $(find . -name '*.gcda'); do
  gcov -n "$data" 2>/dev/null | awk '/^File /{file=$2} /^Lines executed/{print file, $2, $4}'
done | tr -d "'" | sed 's/executed://' | grep -E "src/compute/cuda/[a-z_]+\.cpp |src/dist/(nccl_comms|device_all_reduce|device_transports)\.cpp " | sort -u)
echo "$report" | awk '{printf "%-48s %7s of %4d lines\n", $1, $2, $3}' | sed "s|$root/||"
echo "$report" | awk '{split($2, p, "%"); covered += p[1] * $3 / 100; total += $3} END {printf "all: %.1f%% of %d lines\n", 100 * covered / total, total}'
echo "lines never run: gcov -t DATA.gcda, e.g. $(find . -name 'device_weights.cpp.gcda' | head -1)"
