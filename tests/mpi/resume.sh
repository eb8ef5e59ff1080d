#!/usr/bin/env bash
# Interrupted runs lose nothing and duplicate nothing. A batch is run uninterrupted for
# reference; then the same batch is interrupted mid-way (CASE signal: SIGUSR1 to mpirun,
# which forwards it, as Slurm's --signal=B:TERM reaches the job script; CASE kill: SIGKILL of
# rank 1; CASE sigterm: SIGTERM to every rank, as srun delivers scancel; CASE signal_tp2:
# SIGUSR1 with pp 2 x tp 2, where stage 0's TP ranks must agree on the cutoff; CASE
# signal_logprobs: SIGUSR1 with --logprobs --top-k 3 at pp 2 x tp 2, whose token rows stream
# to the output chunk by chunk), resumed with --resume, and every prompt's logits (and token
# rows) must equal the reference's. The interruption waits
# for a readiness sign, not a time: a progress line saying a prompt is stored. Then every
# rank is in its loop, and with 24 long prompts in small chunks most of the batch is left.
# usage: resume.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
num=24
"$bin/pipefill" make-prompts --out "$work/in.h5" --num $num --min-len 1500 --max-len 2500 --vocab 512 --seed 8 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 16 --page-size 16)
ranks=2
if [ "$case" = signal_tp2 ]; then ranks=4; args+=(--tp 2); fi
if [ "$case" = signal_logprobs ]; then ranks=4; args+=(--tp 2 --logprobs --top-k 3); fi
pipefill_mpi $ranks "${args[@]}" --quiet --output "$work/reference.h5"

# Progress lines are not part of the run's identity: the resumed runs may be --quiet.
start_run "$work/first.log" $ranks "${args[@]}" --progress-interval 0.05 --output "$work/out.h5"
wait_for_prompts 1
stored=$(prompts_done "$work/first.log")
case $case in
  signal|signal_tp2|signal_logprobs) signal_run USR1 mpirun ;;  # mpirun forwards SIGUSR1 to every rank
  sigterm) signal_run TERM ranks ;;
  kill) signal_run KILL 1 ;;
  *) fail "unknown case $case" ;;
esac
finish_run
echo "interrupted run: status $status"; grep -v -e '^$' -e '^progress:' "$work/first.log" | head -8
expect_failed "the interrupted run"
[ "$case" = kill ] || expect_status 75 "a stopped run"
[ ! -e "$work/out.h5" ] || fail "an interrupted run left a file under the final name"
[ -e "$work/out.h5.partial" ] || fail "no partial file to resume"
expect_interrupted_mid_run "$work/out.h5.partial" "$stored" $num "the interruption"
done_before=$partial_prompts

# Resuming with another configuration is refused, and leaves the partial file as it was.
MPI_TIMEOUT=60 status_of pipefill_mpi $ranks "${args[@]}" --quiet --chunk-size 32 --output "$work/out.h5" --resume \
  2>"$work/mismatch.err"
[ "$status" -eq 2 ] && grep -q "^error: cannot resume.*chunk_size" "$work/mismatch.err" ||
  { cat "$work/mismatch.err"; fail "a resume with another chunk size was not refused (status $status)"; }
[ -e "$work/out.h5.partial" ] || fail "the refused resume removed the partial file"

pipefill_mpi $ranks "${args[@]}" --quiet --output "$work/out.h5" --resume
[ -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || fail "resume did not complete the file"
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 1e-6
"$PYTHON" - "$work/out.h5" $num "$work/reference.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[3]) as ref:
    done, ttft = f["completed"][:], f["ttft_s"][:]
    assert done.all() and len(done) == int(sys.argv[2]), done
    assert np.isfinite(ttft).all() and (ttft > 0).all(), ttft
    # Token rows: the same plan computes the same bytes, whichever run stored them.
    for name in ("token_logprobs", "perplexity", "nll_sum", "topk_ids", "topk_logprobs"):
        assert (name in f) == (name in ref), name
        if name in ref:
            assert np.array_equal(f[name][:], ref[name][:], equal_nan=True), f"/{name} differs from the reference"
            print(f"/{name} {f[name].shape}: equal to the uninterrupted run")
PY
# A second --resume has nothing left to do.
MPI_TIMEOUT=60 pipefill_mpi $ranks "${args[@]}" --quiet --output "$work/out.h5" --resume | grep -q "already complete"
echo "Passed: $case (the first run finished $done_before prompts, --resume the rest)"
