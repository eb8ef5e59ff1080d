#!/usr/bin/env bash
# What --resume does with a partial output that a crash could leave, each compared with an
# uninterrupted run (the logits must be equal):
#   torn_row        rows marked complete whose bytes fail their checksum (a write the OS did
#                   not order before its flag), and a TTFT torn the same way: recomputed,
#                   with a warning naming each prompt
#   empty_partial   a 0-byte partial (a kill before the first write): a note, a fresh start
#   stale_partial   a partial left by an earlier run, run again *without* --resume: a
#                   warning says it is replaced
#   mpirun_sigterm  SIGTERM to mpirun itself (plain `kill`, `timeout`): Open MPI forwards it
#                   to the ranks, SIGKILLs them 1 s later (odls_base_sigkill_timeout) and
#                   exits 1. Prompts finished before are safe; those in flight are lost and
#                   computed again by --resume. (SIGUSR1 is the clean stop: see resume.sh.)
# usage: resume_integrity.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(run --model "$data/tiny" --pp 2 --chunk-size 64 --page-size 16 --quiet)
run() { timeout 120 mpirun -n 2 "$bin/pipefill" "${args[@]}" "$@"; }
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 6 --min-len 100 --max-len 400 --vocab 512 --seed 4 >/dev/null
run --input "$work/in.h5" --output "$work/reference.h5"

# forge PYTHON: edits $work/out.h5.partial with h5py (`f` is the open file).
forge() {
  cp "$work/reference.h5" "$work/out.h5.partial"
  "$PYTHON" - "$work/out.h5.partial" <<PY
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    $1
PY
}

case $case in
  torn_row)
    forge 'f["logits"][1] = np.zeros(f["logits"].shape[1], np.float32); f["ttft_s"][3] = 0.5; f["completed"][4] = 0'
    run --input "$work/in.h5" --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr"
    for p in 1 3; do
      grep -q "^warning: prompt $p in .*failed its checksum" "$work/stderr" || { echo "FAILED: torn prompt $p not named"; exit 1; }
    done
    [ "$(grep -c 'failed its checksum' "$work/stderr")" -eq 2 ] || { echo "FAILED: intact rows were called torn"; exit 1; } ;;
  empty_partial)
    : >"$work/out.h5.partial"
    run --input "$work/in.h5" --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^note: .*out.h5.partial is empty" "$work/stderr" || { echo "FAILED: no note about the empty partial"; exit 1; } ;;
  stale_partial)
    forge 'f["completed"][0:3] = 0'
    run --input "$work/in.h5" --output "$work/out.h5" 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^warning: replacing .*out.h5.partial" "$work/stderr" || { echo "FAILED: the stale partial was replaced silently"; exit 1; } ;;
  mpirun_sigterm)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 12 --min-len 800 --max-len 1200 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16 --quiet)
    run --input "$work/in.h5" --output "$work/reference.h5"
    set +e
    timeout 120 mpirun -n 2 "$bin/pipefill" "${args[@]}" --input "$work/in.h5" \
      --output "$work/out.h5" >"$work/first.log" 2>&1 &
    launcher=$!
    sleep 1.0
    pkill -TERM -P "$launcher" -x mpirun
    wait "$launcher"
    status=$?
    set -e
    cat "$work/first.log"
    echo "mpirun exit status after SIGTERM: $status"
    # Open MPI decides what its ranks see (at times the whole run finishes and mpirun still
    # exits 1); whatever it did, what is on disk must be right, and --resume must finish it.
    if [ -e "$work/out.h5.partial" ]; then
      "$PYTHON" -c "import h5py; print('saved before the kill:', int(h5py.File('$work/out.h5.partial')['completed'][:].sum()), 'prompts')"
    fi
    run --input "$work/in.h5" --output "$work/out.h5" --resume | grep -v "^$" || true ;;
  *) echo "unknown case $case"; exit 1 ;;
esac
[ -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || { echo "FAILED: the run did not complete the output"; exit 1; }
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
echo "Passed: $case"
