#!/usr/bin/env bash
# Interrupted runs lose nothing and duplicate nothing. A batch is run uninterrupted for
# reference; then the same batch is interrupted mid-way (CASE signal: SIGUSR1 to mpirun,
# which forwards it, as Slurm's --signal=B:TERM reaches the job script; CASE kill: SIGKILL of
# one rank; CASE sigterm: SIGTERM to every rank, as srun delivers scancel), resumed with
# --resume, and every prompt's logits must equal the reference's.
# usage: resume.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 24 --min-len 1500 --max-len 2500 --vocab 512 --seed 8 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 16 --page-size 16 --quiet)
timeout 300 mpirun -n 2 "$bin/pipefill" "${args[@]}" --output "$work/reference.h5"

set +e
timeout 300 mpirun -n 2 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" >"$work/first.log" 2>&1 &
launcher=$!
sleep 1.5
if [ "$case" = signal ]; then
  pkill -USR1 -P "$launcher" -x mpirun  # mpirun (the child of timeout) forwards SIGUSR1 to every rank
elif [ "$case" = sigterm ]; then
  pkill -TERM -f "^$bin/pipefill run --model $data/tiny --input $work/in.h5"  # the ranks, not mpirun
else
  victim=$(pgrep -f "pipefill run --model $data/tiny --input $work/in.h5" | sort -n | tail -1)
  kill -9 "$victim"
fi
wait "$launcher"
status=$?
set -e
echo "interrupted run: status $status"; cat "$work/first.log" | grep -v '^$' | head -8
[ "$status" -ne 0 ] || { echo "FAILED: the interrupted run finished anyway (interrupt came too late?)"; exit 1; }
[ "$case" = kill ] || [ "$status" -eq 75 ] || { echo "FAILED: a stopped run must exit 75"; exit 1; }
[ ! -e "$work/out.h5" ] || { echo "FAILED: an interrupted run left a file under the final name"; exit 1; }
[ -e "$work/out.h5.partial" ] || { echo "FAILED: no partial file to resume"; exit 1; }
done_before=$("$PYTHON" -c "import h5py; print(int(h5py.File('$work/out.h5.partial')['completed'][:].sum()))")
echo "partial file holds $done_before of 24 prompts"
# Resuming with another configuration is refused, and leaves the partial file as it was.
set +e
timeout 60 mpirun -n 2 "$bin/pipefill" "${args[@]}" --chunk-size 32 --output "$work/out.h5" --resume 2>"$work/mismatch.err"
mismatch=$?
set -e
[ "$mismatch" -eq 2 ] && grep -q "^error: cannot resume.*chunk_size" "$work/mismatch.err" ||
  { echo "FAILED: a resume with another chunk size was not refused (status $mismatch)"; cat "$work/mismatch.err"; exit 1; }
[ -e "$work/out.h5.partial" ] || { echo "FAILED: the refused resume removed the partial file"; exit 1; }

timeout 300 mpirun -n 2 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume
[ -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || { echo "FAILED: resume did not complete the file"; exit 1; }
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
"$PYTHON" - "$work/out.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    done, ttft = f["completed"][:], f["ttft_s"][:]
assert done.all() and len(done) == 24, done
assert np.isfinite(ttft).all() and (ttft > 0).all(), ttft
PY
# A second --resume has nothing left to do; a mismatched resume is refused.
timeout 60 mpirun -n 2 "$bin/pipefill" "${args[@]}" --output "$work/out.h5" --resume | grep -q "already complete"
echo "Passed: $case (the first run finished $done_before prompts, --resume the rest)"
