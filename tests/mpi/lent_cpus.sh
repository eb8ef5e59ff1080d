#!/usr/bin/env bash
# Ranks sharing CPUs lend them while they wait (compute/cpu/rank_threads.hpp,
# dist/node_waiting.hpp):
#   shared  2 ranks pp 2 left unbound on the same 2 CPUs: the header says each may use both,
#           the summary that some of the kernels' time ran on lent CPUs; a second such run
#           gives the same bits (what was lent when never changes a result), and a run that
#           lends nothing (--threads 1) the same within float32 rounding
#   bound   the same ranks bound to a CPU each (hwthread): nothing to lend, nothing said
# usage: lent_cpus.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
# Two CPUs of this process's (whatever the host has: each rank's share is then one of them).
read -r two cpus < <("$PYTHON" -c 'import os; c = sorted(os.sched_getaffinity(0))[:2]; print(",".join(map(str, c)), len(c))')
run() {  # NAME BIND ARGS...
  local name=$1 bind=$2
  shift 2
  timeout 100 taskset -c "$two" mpirun -n 2 --bind-to "$bind" "$bin/pipefill" run --model "$data/tiny" --input "$data/prompts.h5" \
    --output "$work/$name.h5" --pp 2 --chunk-size 32 "$@" >"$work/$name.log" 2>&1 || {
    cat "$work/$name.log"
    fail "run $name failed"
  }
  grep -E '^cpu' "$work/$name.log"
}
case $case in
  shared)
    [ "$cpus" -ge 2 ] || { echo "Skipped: one CPU, nothing to lend"; exit 0; }
    run lending none
    grep -q "^cpu: .*, 1 thread a rank, up to 2 while the ranks sharing its CPUs wait (" "$work/lending.log" ||
      fail "the header does not say the ranks may use each other's CPUs"
    grep -q "^cpu time: [0-9]* % of it on CPUs lent by ranks waiting on the same node$" "$work/lending.log" ||
      fail "no kernel time on lent CPUs: the bubble's CPUs went unused"
    run again none
    "$bin/tests/compare_logits" "$work/lending.h5" "$work/again.h5" --rtol 0
    run alone none --threads 1
    ! grep -q "up to [0-9]\|on CPUs lent" "$work/alone.log" || fail "--threads 1 lent CPUs"
    "$bin/tests/compare_logits" "$work/alone.h5" "$work/lending.h5" --rtol 1e-5 ;;
  bound)
    [ "$cpus" -ge 2 ] || { echo "Skipped: one CPU, the ranks cannot be bound apart"; exit 0; }
    run bound hwthread
    ! grep -q "up to [0-9]\|on CPUs lent" "$work/bound.log" || fail "ranks bound to cores of their own lent CPUs" ;;
  *) fail "unknown case $case" ;;
esac
echo "Passed: $case"
