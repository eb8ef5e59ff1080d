#!/usr/bin/env bash
# Start-up time: the wall time of a 1-rank `pipefill run` on one 16-token prompt, which is
# almost all opening the model and loading (and digesting) the weights. Runs the binaries
# given alternately, REPEATS times each, and prints each one's best and median.
# usage: scripts/bench_startup.sh MODEL_DIR [REPEATS [BIN ...]]   (BIN default: build/pipefill)
# e.g.   scripts/bench_startup.sh models/smollm2-135m 5 /tmp/old/build/pipefill build/pipefill
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/mpi/mpi_env.sh"
model=$1 repeats=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$root/build/pipefill")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")
"${bins[0]}" make-prompts --out "$work/in.h5" --num 1 --min-len 16 --max-len 16 --vocab "$vocab" --seed 1 >/dev/null
declare -A times
for ((r = 0; r < repeats; ++r)); do
  for bin in "${bins[@]}"; do
    rm -f "$work/out.h5"  # (not --overwrite: the binaries compared may predate it)
    start=$(date +%s.%N)
    mpirun -n 1 "$bin" run --model "$model" --input "$work/in.h5" --output "$work/out.h5" --quiet --chunk-size 64 >/dev/null
    times[$bin]+="$(echo "$(date +%s.%N) - $start" | bc) "
  done
done
echo "start-up of $model ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $repeats runs each:"
for bin in "${bins[@]}"; do
  "$PYTHON" -c "import sys, statistics as s; t = sorted(map(float, sys.argv[2].split())); print(f'  {sys.argv[1]}: best {t[0]:.2f} s, median {s.median(t):.2f} s')" "$bin" "${times[$bin]}"
done
