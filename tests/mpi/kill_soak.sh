#!/usr/bin/env bash
# Kill-and-resume soak: a many-prompt batch is run with --resume over and over, each run
# SIGKILLed at a random instant (rank 0, the writer, or another rank, at random). The instant
# is random on purpose, not a readiness sign: start-up, the first write and the last are as
# much the point as mid-run. A run that finishes before its kill is checked and the batch
# starts over, so KILLS kills really land. Whatever instant they hit, every output must equal
# an uninterrupted run's, every prompt complete. Label `slow`.
# usage: kill_soak.sh BIN_DIR DATA_DIR [KILLS]
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 kills=${3:-30}
temp_dir work
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 80 --min-len 300 --max-len 1200 --vocab 512 --seed 11 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 3 --layer-partition 3,3,2 --chunk-size 16 --page-size 16 --quiet
      --progress-interval 0)
pipefill_mpi 3 "${args[@]}" --output "$work/reference.h5"

RANDOM=7  # a repeatable sequence of kill times and victims
check() {
  "$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
  "$PYTHON" -c "import h5py; f = h5py.File('$work/out.h5'); assert f['completed'][:].all()"
}
killed_rank0=0 killed_other=0 finished_runs=0
while [ $((killed_rank0 + killed_other)) -lt "$kills" ]; do
  start_run "$work/run.log" 3 "${args[@]}" --output "$work/out.h5" --resume
  sleep "$(printf '0.%03d' $((RANDOM % 1000)))"; sleep 0.$((3 + RANDOM % 7))  # the random instant
  want=$((RANDOM % 2 == 0 ? 0 : 1 + RANDOM % 2))  # rank 0 half of the time
  victim=$(rank_pid "$want")
  if [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; then
    [ "$want" -eq 0 ] && killed_rank0=$((killed_rank0 + 1)) || killed_other=$((killed_other + 1))
  fi
  finish_run
  if [ "$status" -eq 0 ]; then  # finished before the kill: check it, start the batch over
    check; rm "$work/out.h5"; finished_runs=$((finished_runs + 1)); continue
  fi
  if grep -q '^error:' "$work/run.log"; then cat "$work/run.log"; fail "a resumed run refused its partial"; fi
done
echo "SIGKILLs: $killed_rank0 of rank 0, $killed_other of other ranks; $finished_runs batches finished between kills"
pipefill_mpi 3 "${args[@]}" --output "$work/out.h5" --resume
check
echo "Passed: kill-and-resume soak"
