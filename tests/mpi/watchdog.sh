#!/usr/bin/env bash
# No hangs. CASE hung_rank: rank 1 stops forever before micro-batch 2 (test hook); with
# --watchdog-timeout 3 the job must end within a minute with an `error: watchdog` line that
# names the stage and the micro-batch. CASE killed_rank: rank 1 is SIGKILLed mid-run, once a
# progress line says a prompt is done (every rank is then in its loop, and most of the 40
# long prompts are left); the job must end promptly. Either way no output file may appear
# under its final name.
# usage: watchdog.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 40 --min-len 2000 --max-len 3000 --vocab 512 --seed 4 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --output "$work/out.h5" --pp 2 --page-size 16)
MPI_TIMEOUT=90
start=$SECONDS
case $case in
  hung_rank)
    PIPEFILL_TEST_HANG_RANK=1 PIPEFILL_TEST_HANG_MICRO_BATCH=2 status_of pipefill_mpi 2 "${args[@]}" \
      --chunk-size 64 --watchdog-timeout 3 >"$work/stdout" 2>"$work/stderr" ;;
  killed_rank)
    start_run "$work/stderr" 2 "${args[@]}" --chunk-size 16 --progress-interval 0.05
    wait_for_prompts 1
    signal_run KILL 1
    finish_run ;;
  *) fail "unknown case $case" ;;
esac
echo "status $status after $((SECONDS - start)) s"; grep -v '^progress:' "$work/stderr" | head -20
expect_failed "the job"
[ ! -e "$work/out.h5" ] || fail "an output file under the final name"
if [ "$case" = hung_rank ]; then
  grep -q '^error: watchdog: .*stage 0.*micro-batch' "$work/stderr" || fail "no watchdog error naming stage and micro-batch"
fi
echo "Passed: $case"
