#!/usr/bin/env bash
# Submits the strong-scaling array (one task per P in PPS) and, after it succeeds, the
# collect step that writes OUT_DIR/scaling.csv and the plot. Variables: see strong_scaling.sbatch
# (the PIPEFILL_* site setup included); both jobs get this shell's environment (--export=ALL).
# Runs from any directory: the jobs find the repository from the script path submitted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Checked here too, so that a missing one fails now rather than after the queue wait.
: "${MODEL:?set MODEL}" "${INPUT:?set INPUT}" "${OUT_DIR:?set OUT_DIR}" "${PPS:?set PPS, e.g. \"1 2 4 8\"}"
read -r -a pps <<<"$PPS"
array=$(sbatch --parsable --export=ALL --array=0-$((${#pps[@]} - 1)) "$here/strong_scaling.sbatch")
collect=$(COLLECT=1 sbatch --parsable --export=ALL --dependency=afterok:"$array" -n 1 "$here/strong_scaling.sbatch")
echo "array job $array, collect job $collect"
