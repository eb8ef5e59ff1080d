#!/usr/bin/env bash
# No hangs. CASE hung_rank: rank 1 stops forever before micro-batch 2 (test hook); with
# --watchdog-timeout 3 the job must end within a minute with an `error: watchdog` line that
# names the stage and the micro-batch. CASE killed_rank: one rank is SIGKILLed mid-run; the
# job must end promptly. Either way no output file may appear under its final name.
# usage: watchdog.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 40 --min-len 2000 --max-len 3000 --vocab 512 --seed 4 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --output "$work/out.h5" --pp 2 --chunk-size 64 --page-size 16)
start=$(date +%s)
set +e
if [ "$case" = hung_rank ]; then
  PIPEFILL_TEST_HANG_RANK=1 PIPEFILL_TEST_HANG_MICRO_BATCH=2 timeout 90 mpirun -n 2 "$bin/pipefill" "${args[@]}" \
    --watchdog-timeout 3 >"$work/stdout" 2>"$work/stderr"
  status=$?
else
  timeout 90 mpirun -n 2 "$bin/pipefill" "${args[@]}" --chunk-size 16 >"$work/stdout" 2>"$work/stderr" &
  launcher=$!
  sleep 1.5
  victim=$(pgrep -f "pipefill run --model $data/tiny --input $work/in.h5" | sort -n | tail -1)
  [ -n "$victim" ] || { echo "FAILED: the run ended before a rank could be killed"; exit 1; }
  kill -9 "$victim"
  wait $launcher
  status=$?
fi
set -e
elapsed=$(( $(date +%s) - start ))
echo "status $status after ${elapsed}s"; cat "$work/stderr" | head -20
[ "$status" -ne 124 ] || { echo "FAILED: the job hung until the test's timeout"; exit 1; }
[ "$status" -ne 0 ] || { echo "FAILED: the job reported success"; exit 1; }
[ ! -e "$work/out.h5" ] || { echo "FAILED: an output file under the final name"; exit 1; }
if [ "$case" = hung_rank ]; then
  grep -q '^error: watchdog: .*stage 0.*micro-batch' "$work/stderr" || { echo "FAILED: no watchdog error naming stage and micro-batch"; exit 1; }
fi
echo "Passed: $case"
