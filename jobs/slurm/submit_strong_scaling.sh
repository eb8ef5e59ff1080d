#!/usr/bin/env bash
# Submits the strong-scaling array (one task per P in PPS) and, after it succeeds, the
# collect step that writes OUT_DIR/scaling.csv and the plot. Variables: see strong_scaling.sbatch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${PPS:?set PPS, e.g. \"1 2 4 8\"}"
read -r -a pps <<<"$PPS"
array=$(sbatch --parsable --export=ALL --array=0-$((${#pps[@]} - 1)) "$here/strong_scaling.sbatch")
collect=$(COLLECT=1 sbatch --parsable --export=ALL --dependency=afterok:"$array" -n 1 "$here/strong_scaling.sbatch")
echo "array job $array, collect job $collect"
