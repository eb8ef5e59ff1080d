#!/usr/bin/env bash
# Kill-and-resume soak: a many-prompt batch is run with --resume over and over, each run
# SIGKILLed at a random instant (rank 0, the writer, or another rank, at random). A run that
# finishes before its kill is checked and the batch starts over, so KILLS kills really land.
# Whatever instant they hit, every output must equal an uninterrupted run's, every prompt
# complete. Label `slow`.
# usage: kill_soak.sh BIN_DIR DATA_DIR [KILLS]
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 kills=${3:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 80 --min-len 300 --max-len 1200 --vocab 512 --seed 11 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 3 --layer-partition 3,3,2 --chunk-size 16 --page-size 16 --quiet
      --progress-interval 0)
timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/reference.h5"

rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
RANDOM=7  # a repeatable sequence of kill times and victims
check() {
  "$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
  "$PYTHON" -c "import h5py; f = h5py.File('$work/out.h5'); assert f['completed'][:].all()"
}
killed_rank0=0 killed_other=0 finished_runs=0
while [ $((killed_rank0 + killed_other)) -lt "$kills" ]; do
  timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume >"$work/run.log" 2>&1 &
  launcher=$!
  sleep "$(printf '0.%03d' $((RANDOM % 1000)))"; sleep 0.$((3 + RANDOM % 7))
  pids=($(pgrep -f "pipefill run --model $data/tiny --input $work/in.h5" || true))
  victim=
  if [ ${#pids[@]} -gt 0 ]; then
    want=$((RANDOM % 2 == 0 ? 0 : 1 + RANDOM % 2))  # rank 0 half of the time
    for pid in "${pids[@]}"; do [ "$(rank_of "$pid")" = "$want" ] && victim=$pid; done
  fi
  if [ -n "$victim" ]; then
    kill -9 "$victim" 2>/dev/null && { [ "$want" -eq 0 ] && killed_rank0=$((killed_rank0 + 1)) || killed_other=$((killed_other + 1)); }
  fi
  set +e; wait "$launcher"; status=$?; set -e
  if [ "$status" -eq 0 ]; then  # finished before the kill: check it, start the batch over
    check; rm "$work/out.h5"; finished_runs=$((finished_runs + 1)); continue
  fi
  if grep -q '^error:' "$work/run.log"; then echo "FAILED: a resumed run refused its partial:"; cat "$work/run.log"; exit 1; fi
done
echo "SIGKILLs: $killed_rank0 of rank 0, $killed_other of other ranks; $finished_runs batches finished between kills"
timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume
check
echo "Passed: kill-and-resume soak"
