#!/usr/bin/env bash
# What --save-kv costs: one prompt of TOKENS tokens (default 65536) through MODEL (default
# synthetic:tiny) on pp 2, without and with --save-kv, alternating (ROUNDS rounds, default 2), in
# one run; prints each wall time, the bytes exported, and the overhead of the best run with the
# export over the best without. The export goes to the same disk as the output ($TMPDIR).
# usage: scripts/bench_kv_export.sh [TOKENS] [MODEL]   (env CHUNK, default 2048; ROUNDS)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
tokens=${1:-65536} model=${2:-synthetic:tiny} chunk=${CHUNK:-2048} rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/pipefill make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 512 \
  --seed 1 >/dev/null
best_without= best_with=
printf "%-8s %-12s %9s %12s\n" round export wall_s exported
for round in $(seq "$rounds"); do
  for export in no yes; do
    rm -rf "$work/kv" "$work/out.h5"
    flags=()
    [ $export = yes ] && flags=(--save-kv "$work/kv")
    mpirun -n 2 build/pipefill run --model "$model" --input "$work/in.h5" --output "$work/out.h5" --overwrite --pp 2 \
      --chunk-size "$chunk" --allow-long-prompts --progress-interval 0 "${flags[@]}" >"$work/log"
    wall=$(grep -oP 'wall \K[0-9.]+' "$work/log")
    bytes=$([ $export = yes ] && du -sb "$work/kv" | cut -f1 || echo 0)
    printf "%-8s %-12s %9s %10.0f MB\n" "$round" "$export" "$wall" "$(echo "$bytes / 1000000" | bc -l)"
    if [ $export = yes ]; then
      best_with=$(echo "${best_with:-$wall} $wall" | awk '{print ($1 < $2 ? $1 : $2)}')
    else
      best_without=$(echo "${best_without:-$wall} $wall" | awk '{print ($1 < $2 ? $1 : $2)}')
    fi
  done
done
echo "best without $best_without s, with $best_with s: overhead $(echo "($best_with / $best_without - 1) * 100" | bc -l | xargs printf %.1f) %"
