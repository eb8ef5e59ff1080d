#!/usr/bin/env bash
# Submits the strong-scaling array (one task per P in PPS) and, after it succeeds, the
# collect step that writes OUT_DIR/scaling.csv and the plot. Variables: see strong_scaling.sbatch
# (the PIPEFILL_* site setup included); both jobs get this shell's environment (--export=ALL).
# Runs from any directory: the jobs find the repository from the script path submitted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Checked here too, so that a missing one fails now rather than after the queue wait.
error() { echo "error: $*" >&2; exit 2; }
for name in MODEL INPUT OUT_DIR PPS; do [ -n "${!name:-}" ] || error "set $name (see strong_scaling.sbatch)"; done
read -r -a pps <<<"$PPS"
for pp in "${pps[@]}"; do [[ $pp =~ ^[1-9][0-9]*$ ]] || error "PPS=\"$PPS\": each a positive whole number"; done
[[ ${TP:-1} =~ ^[1-9][0-9]*$ ]] || error "TP=$TP: give a positive whole number"
# Each array task gets the largest P x TP of the sweep (a smaller task would fail, and the
# collect step, waiting on all of them, would then never start).
largest=0
for pp in "${pps[@]}"; do [ $((pp * ${TP:-1})) -le "$largest" ] || largest=$((pp * ${TP:-1})); done
array=$(sbatch --parsable --export=ALL --ntasks="$largest" --array=0-$((${#pps[@]} - 1)) "$here/strong_scaling.sbatch")
collect=$(COLLECT=1 sbatch --parsable --export=ALL --dependency=afterok:"$array" -n 1 \
  --output=pipefill-scaling-collect-%j.out "$here/strong_scaling.sbatch")
echo "array job $array, collect job $collect"
