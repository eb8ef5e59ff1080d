#!/usr/bin/env bash
# Mixture of experts on the cpu backend, in one run of the same prompt: `small-moe` (16 experts,
# top 4, as many active parameters as `small`) against the dense `small`, one rank each
# (OPENBLAS_NUM_THREADS=1), then small-moe on a TP group of 2 with each way of splitting the
# experts (--expert-split width | experts), twice each, alternating. Prints tokens/s and GFLOP/s
# counted on active parameters (what the run's summary reports), the sgemm ceiling of one core
# measured in the same run, and the routing's imbalance (the summary's `experts:` line).
# usage: scripts/bench_moe.sh [TOKENS] [ROUNDS]   (env CHUNK, default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
tokens=${1:-2048} rounds=${2:-2} chunk=${CHUNK:-512}
bin=${PIPEFILL_BIN:-build/pipefill}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 32000 >/dev/null

# run NAME RANKS FLAGS... -> "NAME tokens/s GFLOP/s"
run() {
  local name=$1 ranks=$2
  shift 2
  OPENBLAS_NUM_THREADS=1 mpirun -n "$ranks" "$bin" run --input "$work/in.h5" --output "$work/$name.h5" --overwrite \
    --chunk-size "$chunk" "$@" >"$work/$name.log" 2>&1
  awk -v name="$name" '/^wall .* tokens\/s,/ {printf "%-24s %8.1f tokens/s %8.2f GFLOP/s\n", name, $4, $6}' \
    "$work/$name.log"
  grep -h '^experts:' "$work/$name.log" | sed 's/^/    /' || true
}

echo "one prompt of $tokens tokens, chunk $chunk, 1 BLAS thread per rank"
[ -x build/bench/bench_kernels ] &&
  OPENBLAS_NUM_THREADS=1 build/bench/bench_kernels --benchmark_filter=none 2>&1 | grep -m1 ceiling
for round in $(seq "$rounds"); do
  run "dense_small_r$round" 1 --model synthetic:small
  run "moe_small_r$round" 1 --model synthetic:small-moe
  run "moe_tp2_width_r$round" 2 --model synthetic:small-moe --tp 2 --expert-split width
  run "moe_tp2_experts_r$round" 2 --model synthetic:small-moe --tp 2 --expert-split experts
done
