#!/usr/bin/env bash
# Dynamic chunking on this machine: profile `small` once, then prefill one long prompt on one
# rank with fixed chunks, SGLang's dynamic chunks and pipefill's, and compare how even the
# chunk times are (coefficient of variation) and the cost models' held-out errors.
# Optionally (PP2=1) the same three at pp 2 for the bubble.
# usage: scripts/bench_chunking.sh [TOKENS=16384] [C0=2048] [SMOOTHS="0.75 1.0"]
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
tokens=${1:-16384} c0=${2:-2048} smooths=${3:-"0.75 1.0"}
out=${OUT:-outputs/chunking}
mkdir -p "$out"
build/pipefill make-prompts --out "$out/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 32000 >/dev/null
echo "== profile (pp 1): both cost models, held-out error on prefixed chunks"
mpirun -n 1 build/pipefill profile --model synthetic:small --chunk-size "$c0" --max-prefix "$tokens" \
  --profile-points 16 --out "$out/cost_pp1.json"
runs=("fixed")
for smooth in $smooths; do runs+=("sglang:$smooth" "pipefill:$smooth"); done
files=()
for run in "${runs[@]}"; do
  policy=${run%%:*} smooth=${run#*:} extra=() name=pp1_fixed
  if [ "$policy" != fixed ]; then
    extra=(--chunk-policy "$policy" --cost-model "$out/cost_pp1.json" --smooth-factor "$smooth")
    name=pp1_${policy}_s$smooth
  fi
  mpirun -n 1 build/pipefill run --model synthetic:small --input "$out/in.h5" --output "$out/$name.h5" --overwrite \
    --chunk-size "$c0" "${extra[@]}" | grep -E "wall"
  files+=("$out/$name.h5")
done
/usr/bin/python3 scripts/chunk_times.py "${files[@]}"
if [ "${PP2:-0}" = 1 ]; then
  echo "== pp 2"
  mpirun -n 2 build/pipefill profile --model synthetic:small --pp 2 --chunk-size "$c0" --max-prefix "$tokens" \
    --profile-points 16 --out "$out/cost_pp2.json"
  smooth=${smooths%% *}
  for policy in fixed sglang pipefill; do
    extra=()
    [ "$policy" = fixed ] || extra=(--chunk-policy "$policy" --cost-model "$out/cost_pp2.json" --smooth-factor "$smooth")
    echo "-- $policy"
    mpirun -n 2 build/pipefill run --model synthetic:small --pp 2 --input "$out/in.h5" --output "$out/pp2_$policy.h5" --overwrite \
      --chunk-size "$c0" "${extra[@]}" | grep -E "wall|bubble|busy"
  done
fi
