# Sourced by the MPI test scripts (and scripts/*.sh, and by hand before a manual mpirun): how
# to launch pipefill under Open MPI on a small shared machine (as root, oversubscribed,
# shared-memory transport, one BLAS thread per rank), and the helpers the test scripts share,
# so that each script is its case logic only. Sourcing sets no shell option and no trap, so an
# interactive shell may source it too; the helpers expect a script's `set -euo pipefail`.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
PYTHON=${PYTHON:-/usr/bin/python3}
# Open MPI 4 keeps its session files under one directory per user (ompi.HOST.UID), which an
# mpirun removes at exit when it looks empty: another mpirun creating its own files there at
# that instant fails ("orte_session_dir failed ... File exists"). Tests run side by side, so
# each shell that sources this file gets its own base; those of shells gone are removed here.
if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
  _pf_mpi_base=${TMPDIR:-/tmp}/pipefill-mpi
  mkdir -p "$_pf_mpi_base/$$"
  for _pf_dir in "$_pf_mpi_base"/*; do
    [ -d "$_pf_dir" ] && ! kill -0 "${_pf_dir##*/}" 2>/dev/null && rm -rf "$_pf_dir"
  done
  export OMPI_MCA_orte_tmpdir_base=$_pf_mpi_base/$$
  unset _pf_mpi_base _pf_dir
fi

# fail MESSAGE: the test's verdict, on stdout where ctest shows it, after the log of the
# run of start_run if there was one (its last progress line only).
fail() {
  if [ -n "${run_log:-}" ] && [ -f "$run_log" ]; then
    echo "--- log of the background run:"
    grep -v '^progress:' "$run_log" || true
    grep '^progress:' "$run_log" | tail -1 || true
  fi
  echo "FAILED: $*"
  exit 1
}

# on_exit COMMAND: runs COMMAND (a string, evaluated) when the script exits, however it
# exits. The latest registered runs first, so a run is stopped before its directory goes.
_pf_exit_hooks=()
on_exit() {
  _pf_exit_hooks=("$1" "${_pf_exit_hooks[@]}")
  trap _pf_run_exit_hooks EXIT
}
_pf_run_exit_hooks() {
  local hook
  for hook in "${_pf_exit_hooks[@]}"; do eval "$hook" || true; done
}

# temp_dir VAR: sets VAR to a fresh directory, removed on exit.
temp_dir() {
  local dir
  dir=$(mktemp -d)
  printf -v "$1" '%s' "$dir"
  on_exit "rm -rf '$dir'"
}

# pipefill_mpi RANKS ARGS...: `pipefill ARGS` on RANKS ranks ($bin/pipefill), ended after
# $MPI_TIMEOUT seconds (default 300) with status 124: a hang is a failure, not a stuck suite.
pipefill_mpi() {
  local ranks=$1
  shift
  timeout "${MPI_TIMEOUT:-300}" mpirun -n "$ranks" "$bin/pipefill" "$@"
}

# status_of COMMAND...: runs COMMAND and leaves its exit status in $status (a failure does
# not end the script).
status_of() {
  status=0
  "$@" || status=$?
}

# expect_status WANT WHAT: fails unless $status is WANT; 124 (the timeout's) is called a hang.
expect_status() {
  [ "$status" -ne "$1" ] || return 0
  [ "$status" -ne 124 ] || fail "$2 hung until the test's timeout"
  fail "$2 exited with status $status, expected $1"
}

# expect_failed WHAT: fails unless $status says the run failed by itself (not 0, not 124).
expect_failed() {
  [ "$status" -ne 124 ] || fail "$1 hung until the test's timeout"
  [ "$status" -ne 0 ] || fail "$1 reported success"
}

# wait_until SECONDS WHAT COMMAND...: polls COMMAND until it succeeds; fails naming WHAT if it
# has not within SECONDS. The way to wait for a readiness sign: never a fixed sleep.
wait_until() {
  local seconds=$1 what=$2
  local end=$((SECONDS + seconds))
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || fail "$what: not seen within $seconds s"
    sleep 0.05
  done
}

# ---- a run in the background, interrupted once it is in a known state ------------------
# start_run LOG RANKS ARGS...: pipefill_mpi in the background, stdout and stderr to LOG;
# $launcher is its `timeout` process (mpirun is its child, the ranks mpirun's children: not
# `pipefill_mpi &`, which would put a subshell between). A test that ends early stops the
# run (timeout passes the TERM on to mpirun).
start_run() {
  local log=$1 ranks=$2
  shift 2
  run_log=$log
  timeout "${MPI_TIMEOUT:-300}" mpirun -n "$ranks" "$bin/pipefill" "$@" >"$log" 2>&1 &
  launcher=$!
  on_exit "_pf_stop_run $launcher"
}
_pf_stop_run() {  # only a job this shell still has: a waited-for pid may belong to another process by now
  if jobs -p | grep -qx "$1"; then
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}

# finish_run: waits for the run of start_run; its exit status in $status.
finish_run() { status_of wait "$launcher"; }

# expect_interrupted_mid_run PARTIAL STORED NUM WHAT: the partial output PARTIAL holds every
# one of the STORED prompts a progress line showed before WHAT (the interruption) and fewer
# than all NUM, so --resume has work left. Sets $partial_prompts to its count.
expect_interrupted_mid_run() {
  partial_prompts=$("$PYTHON" -c "import h5py, sys; print(int(h5py.File(sys.argv[1])['completed'][:].sum()))" "$1")
  echo "partial file holds $partial_prompts of $3 prompts ($2 stored when $4 was sent)"
  [ "$partial_prompts" -ge "$2" ] || fail "prompts stored before $4 were lost"
  [ "$partial_prompts" -lt "$3" ] || fail "$4 came too late: nothing was left for --resume"
}

# prompts_done LOG: N of the last "prompts N/M done" progress line in LOG (0 before any).
# Rank 0 prints it after storing the N-th row, so the partial output holds N prompts by then.
prompts_done() {
  local n
  n=$(grep -oE 'prompts [0-9]+/[0-9]+ done' "$1" | tail -1 | sed -E 's/prompts ([0-9]+).*/\1/' || true)
  echo "${n:-0}"
}

# wait_for_prompts N [SECONDS]: the readiness sign for interrupting the run of start_run: its
# progress lines say N prompts are done, so every rank is in its loop and rows are stored.
# Fails if the run ends first or SECONDS (default 120) pass. The run needs a short
# --progress-interval and no --quiet.
wait_for_prompts() {
  wait_until "${2:-120}" "a progress line with $1 prompt(s) done" _pf_prompts_reached "$1"
}
_pf_prompts_reached() {
  [ "$(prompts_done "$run_log")" -lt "$1" ] || return 0
  kill -0 "$launcher" 2>/dev/null && return 1
  fail "the run ended before $1 prompt(s) were done"
}

# signal_run SIGNAL TARGET: sends SIGNAL to the run of start_run: to TARGET `mpirun`, `ranks`
# (every rank) or a rank number. Fails if there is no such process (the run has ended).
signal_run() {
  local pids who=$2
  case $2 in
    mpirun) pids=$(mpirun_pid) ;;
    ranks) pids=$(rank_pids) ;;
    *) pids=$(rank_pid "$2") who="rank $2" ;;
  esac
  [ -n "$pids" ] || fail "no $who to send SIG$1 to: the run has ended"
  echo "sending SIG$1 to $who (pid $(echo $pids))"
  kill -s "$1" $pids
}

# mpirun_pid, rank_pids, rank_pid R: the processes of the run of start_run (empty once gone).
mpirun_pid() { pgrep -P "$launcher" -x mpirun || true; }
rank_pids() {
  local m
  m=$(mpirun_pid)
  [ -z "$m" ] || pgrep -P "$m" || true
}
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
rank_pid() {
  local pid
  for pid in $(rank_pids); do [ "$(rank_of "$pid")" != "$1" ] || echo "$pid"; done
}
