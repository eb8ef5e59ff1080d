#!/usr/bin/env bash
# What checkpoints inside a prompt cost, and how fast a stop is (docs/checkpoints.md). One
# prompt of TOKENS tokens (default 16384: the licence document through a real model, or random
# ids for a synthetic one) on pp 2, one thread a rank, chunk CHUNK (default 1024):
#   overhead   without and with --checkpoint-every EVERY (default auto), alternating, ROUNDS
#              rounds (default 2): each wall time, the checkpoints written, the overhead of the
#              best run with checkpoints over the best without;
#   stop       SIGUSR1 to mpirun at STOP_AT seconds into the run (default half the first run's
#              wall), without and with --checkpoint-every: the seconds from the signal to the
#              job's exit, against the chunk time and the KV written at the stop.
# usage: scripts/bench_checkpoints.sh [MODEL] [TOKENS]   (env CHUNK, EVERY, ROUNDS, STOP_AT)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
model=${1:-$HOME/.cache/pipefill/models/smollm2-135m} tokens=${2:-16384}
chunk=${CHUNK:-1024} every=${EVERY:-auto} rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $model in
  synthetic:*) build/pipefill make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" \
                 --vocab 512 --seed 1 >/dev/null ;;
  *) scripts/licence_document.sh "$model" "$work/in.h5" "$tokens" >/dev/null ;;
esac
lscpu | sed -n 's/^Model name: *//p' | head -1 | sed 's/^/cpu: /'
args=(run --model "$model" --input "$work/in.h5" --pp 2 --threads 1 --chunk-size "$chunk" --allow-long-prompts
      --progress-interval 0)
run_once() {  # LOG [flags...]: one run to $work/out.h5; prints its wall seconds
  local log=$1
  shift
  rm -rf "$work"/out.h5*
  mpirun -n 2 --bind-to core build/pipefill "${args[@]}" --output "$work/out.h5" "$@" >"$log" 2>&1
  grep -oP 'wall \K[0-9.]+' "$log"
}

echo "== overhead: --checkpoint-every $every against none, $tokens tokens, chunk $chunk"
best_without= best_with=
printf "%-6s %-12s %9s %s\n" round checkpoints wall_s written
for round in $(seq "$rounds"); do
  for with in no yes; do
    flags=()
    [ $with = yes ] && flags=(--checkpoint-every "$every")
    wall=$(run_once "$work/log" "${flags[@]}")
    written=$(grep -c '^checkpoint [0-9]*:' "$work/log" || true)
    printf "%-6s %-12s %9s %s\n" "$round" "$with" "$wall" "$written $(grep -o '^checkpoints: every.*' "$work/log" || true)"
    if [ $with = yes ]; then best_with=$(awk -v a="${best_with:-$wall}" -v b="$wall" 'BEGIN { print (a < b ? a : b) }')
    else best_without=$(awk -v a="${best_without:-$wall}" -v b="$wall" 'BEGIN { print (a < b ? a : b) }'); fi
  done
done
awk -v a="$best_without" -v b="$best_with" 'BEGIN { printf "best without %s s, with %s s: overhead %.1f %%\n", a, b, (b / a - 1) * 100 }'
# A stage's mean time a chunk: the wall over the micro-batches plus the pipeline's fill (pp 2).
micro_batches=$(grep -oP 'micro-batches \K[0-9]+' "$work/log" | head -1)
chunk_s=$(awk -v w="$best_without" -v m="$micro_batches" 'BEGIN { printf "%.2f", w / (m + 1) }')

stop_at=${STOP_AT:-$(awk -v w="$best_without" 'BEGIN { printf "%.1f", w / 2 }')}
echo "== stop: SIGUSR1 to mpirun ${stop_at} s into the run"
printf "%-22s %14s %16s %s\n" run signal_to_exit_s mean_chunk_s "checkpoint"
for with in no yes; do
  flags=()
  [ $with = yes ] && flags=(--checkpoint-every "$every")
  rm -rf "$work"/out.h5*
  mpirun -n 2 --bind-to core build/pipefill "${args[@]}" --output "$work/out.h5" --progress-interval 1 "${flags[@]}" \
    >"$work/stop.log" 2>&1 &
  launcher=$!
  sleep "$stop_at"
  signalled=$(date +%s.%N)
  kill -USR1 "$launcher"
  status=0
  wait "$launcher" || status=$?
  exited=$(date +%s.%N)
  [ "$status" -eq 75 ] || { cat "$work/stop.log"; echo "error: the stopped run exited with $status, not 75" >&2; exit 1; }
  line=$(grep '^checkpoint [0-9]*:' "$work/stop.log" | tail -1)
  printf "%-22s %14.2f %16s %s\n" "checkpoint-every $with" "$(awk -v a="$signalled" -v b="$exited" 'BEGIN { print b - a }')" \
    "$chunk_s" "${line#checkpoint }"
done
