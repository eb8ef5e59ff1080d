#!/usr/bin/env bash
# Pipeline figures on this machine: one long prompt through `small`, pp 1 vs pp 2 (one rank
# per core), fixed chunks. Prints wall time, tokens/s, achieved GFLOP/s, the measured bubble
# and the ideal (P-1)/(P-1+M). Usage: scripts/bench_pipeline.sh [TOKENS] [CHUNK]
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
tokens=${1:-16384} chunk=${2:-2048}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/pipefill make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 32000 >/dev/null
printf "%-4s %8s %6s %9s %9s %9s %9s %9s\n" pp tokens chunk wall_s tokens/s GFLOP/s bubble ideal
for pp in 1 2; do
  mpirun -n $pp build/pipefill run --model synthetic:small --input "$work/in.h5" --output "$work/out$pp.h5" --overwrite \
    --pp $pp --chunk-size "$chunk" >"$work/log$pp"
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/log$pp")
  tps=$(grep -oP '[0-9.]+(?= tokens/s)' "$work/log$pp")
  gf=$(grep -oP '[0-9.]+ [GTPE](?=FLOP/s achieved)' "$work/log$pp" | awk '{ print $1 * ($2 == "T" ? 1e3 : $2 == "P" ? 1e6 : $2 == "E" ? 1e9 : 1) }')
  bubble=$(grep -oP 'measured \K[0-9.]+' "$work/log$pp")
  ideal=$(grep -oP '= \K[0-9.]+(?= \(P=)' "$work/log$pp")
  printf "%-4s %8s %6s %9s %9s %9s %9s %9s\n" $pp "$tokens" "$chunk" "$wall" "$tps" "$gf" "$bubble" "$ideal"
done
build/tests/compare_logits "$work/out2.h5" "$work/out1.h5" --rtol 1e-4
