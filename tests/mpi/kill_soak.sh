#!/usr/bin/env bash
# Kill-and-resume soak: a many-prompt batch is run with --resume over and over, each run
# SIGKILLed at a random instant (rank 0, the writer, or another rank, at random), until one
# run finishes. Whatever instant the kills hit, the final output must equal an
# uninterrupted run's, every prompt complete. Label `slow`.
# usage: kill_soak.sh BIN_DIR DATA_DIR [KILLS]
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 kills=${3:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 40 --min-len 200 --max-len 900 --vocab 512 --seed 11 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 3 --layer-partition 3,3,2 --chunk-size 32 --page-size 16 --quiet
      --progress-interval 0)
timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/reference.h5"

rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
RANDOM=7  # a repeatable sequence of kill times and victims
killed_rank0=0 killed_other=0 finished=0
for ((i = 0; i < kills; i++)); do
  timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume >"$work/run.log" 2>&1 &
  launcher=$!
  sleep "$(printf '0.%03d' $((RANDOM % 1000)))"; sleep $((RANDOM % 2))
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
  if [ "$status" -eq 0 ]; then finished=1; break; fi
  if grep -q '^error:' "$work/run.log"; then echo "FAILED: a resumed run refused its partial:"; cat "$work/run.log"; exit 1; fi
done
echo "SIGKILLs: $killed_rank0 of rank 0, $killed_other of other ranks"
[ "$finished" -eq 1 ] || timeout 300 mpirun -n 3 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
"$PYTHON" -c "import h5py; f = h5py.File('$work/out.h5'); assert f['completed'][:].all()"
echo "Passed: kill-and-resume soak"
