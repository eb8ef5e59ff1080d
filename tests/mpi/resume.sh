#!/usr/bin/env bash
# Interrupted runs lose nothing and duplicate nothing. A batch is run uninterrupted for
# reference; then the same batch is interrupted mid-way (CASE signal: SIGUSR1 to mpirun,
# which forwards it, as Slurm's --signal=B:TERM reaches the job script; CASE kill: SIGKILL of
# rank 1; CASE sigterm: SIGTERM to every rank, as srun delivers scancel; CASE sigterm_rank1:
# SIGTERM to rank 1 alone (a node's own agent), which asks rank 0 to stop; CASE signal_tp2:
# SIGUSR1 with pp 2 x tp 2, where stage 0's TP ranks must agree on the cutoff; CASE
# signal_logprobs: SIGUSR1 with --logprobs --top-k 3 at pp 2 x tp 2, whose token rows stream
# to the output chunk by chunk; CASE signal_shared_prefix: the same, with --hidden-states mean,
# on prompts that share prefixes, where the resumed run's plan differs: prompts whose source
# finished before the stop compute their prefix again; CASE signal_cp2: SIGUSR1 with pp 2 x
# cp 2, whose stage 0 CP ranks must agree on the cutoff, and whose checkpoint of the prompt in
# flight is CP rank 0's files of the rows its group gathers; restored, each CP rank keeps an
# even share of them, not the share it computed, so its logits move by float32 rounding),
# resumed with --resume, and every
# prompt's logits (and token rows) must equal the reference's (within float32 rounding where
# the plans differ). The interruption waits
# for a readiness sign, not a time: a progress line saying a prompt is stored. Then every
# rank is in its loop, and with 24 long prompts in small chunks most of the batch is left.
# usage: resume.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
num=24
if [ "$case" = signal_shared_prefix ]; then
  num=30  # 3 documents of 1500 tokens, 10 prompts each (tests/mpi/make_shared_prompts.py)
  "$PYTHON" "$here/make_shared_prompts.py" "$work/in.h5" --doc 1500 --copies 3 >/dev/null
else
  "$bin/pipefill" make-prompts --out "$work/in.h5" --num $num --min-len 1500 --max-len 2500 --vocab 512 --seed 8 >/dev/null
fi
chunk=16
[ "$case" = signal_cp2 ] && chunk=48  # (fewer ring exchanges, still many micro-batches a prompt)
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --page-size 16)
chunking=(--chunk-size $chunk)  # apart: one resume below gives another (a flag given twice is refused)
ranks=2
if [ "$case" = signal_cp2 ]; then ranks=4; args+=(--cp 2); fi
if [ "$case" = signal_tp2 ]; then ranks=4; args+=(--tp 2); fi
if [ "$case" = signal_logprobs ]; then ranks=4; args+=(--tp 2 --logprobs --top-k 3); fi
if [ "$case" = signal_shared_prefix ]; then ranks=4; args+=(--tp 2 --logprobs --top-k 3 --hidden-states mean); fi
pipefill_mpi $ranks "${args[@]}" "${chunking[@]}" --quiet --output "$work/reference.h5"

# Progress lines are not part of the run's identity: the resumed runs may be --quiet.
start_run "$work/first.log" $ranks "${args[@]}" "${chunking[@]}" --progress-interval 0.05 --output "$work/out.h5"
wait_for_prompts 1
stored=$(prompts_done "$work/first.log")
case $case in
  signal|signal_tp2|signal_logprobs|signal_shared_prefix|signal_cp2) signal_run USR1 mpirun ;;  # mpirun forwards it to every rank
  sigterm) signal_run TERM ranks ;;
  sigterm_rank1) signal_run TERM 1 ;;  # one rank's own signal: forwarded to rank 0, which stops the run
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
# The stopped run's summary tells what it computed: the prompts it finished, a TTFT only for
# them (not for the prompt the stop cut, whose LM head ran with --logprobs), not the whole plan.
if [ "$case" != kill ]; then
  summary=$(grep -E '^prompts [0-9]+ \(' "$work/first.log" || true)
  [[ $summary =~ \(([0-9]+)\ run\ now ]] && [ "${BASH_REMATCH[1]}" -eq "$done_before" ] ||
    fail "the stopped run's summary says \"$summary\", but $done_before prompts are in the partial file"
  ttfts=$(sed -nE 's/^ttft mean .* over ([0-9]+) prompts?$/\1/p' "$work/first.log")
  [ "${ttfts:-0}" -eq "$done_before" ] || fail "the stopped run's summary gives ${ttfts:-no} TTFTs for $done_before prompts done"
fi

# Resuming with another configuration is refused, and leaves the partial file as it was.
MPI_TIMEOUT=60 status_of pipefill_mpi $ranks "${args[@]}" --quiet --chunk-size 32 --output "$work/out.h5" --resume \
  2>"$work/mismatch.err"
[ "$status" -eq 2 ] && grep -q "^error: cannot resume.*chunk_size" "$work/mismatch.err" ||
  { cat "$work/mismatch.err"; fail "a resume with another chunk size was not refused (status $status)"; }
[ -e "$work/out.h5.partial" ] || fail "the refused resume removed the partial file"

pipefill_mpi $ranks "${args[@]}" "${chunking[@]}" --quiet --output "$work/out.h5" --resume
[ -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || fail "resume did not complete the file"
rtol=1e-6
[ "$case" = signal_cp2 ] && rtol=1e-5
[ "$case" = signal_shared_prefix ] && rtol=1e-4
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol $rtol
"$PYTHON" - "$work/out.h5" $num "$work/reference.h5" "$case" <<'PY'
import sys, h5py, numpy as np
same_plan = sys.argv[4] != "signal_shared_prefix"
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[3]) as ref:
    done, ttft = f["completed"][:], f["ttft_s"][:]
    assert done.all() and len(done) == int(sys.argv[2]), done
    assert np.isfinite(ttft).all() and (ttft > 0).all(), ttft
    # Token rows: the same plan computes the same bytes, whichever run stored them.
    for name in ("token_logprobs", "perplexity", "nll_sum", "topk_ids", "topk_logprobs", "hidden_states"):
        assert (name in f) == (name in ref), name
        if name not in ref:
            continue
        if same_plan:
            assert np.array_equal(f[name][:], ref[name][:], equal_nan=True), f"/{name} differs from the reference"
            print(f"/{name} {f[name].shape}: equal to the uninterrupted run")
        elif name != "topk_ids":  # ids may swap between near-ties; their log-probs may not move
            a, b = f[name][:], ref[name][:]
            assert np.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True), f"/{name} differs: {np.nanmax(abs(a - b))}"
            print(f"/{name} {a.shape}: within {np.nanmax(abs(a - b)):.2g} of the uninterrupted run")
    if not same_plan:
        reused, ref_reused = f["reused_tokens"][:], ref["reused_tokens"][:]
        print(f"reused tokens: {reused.sum()} over the two runs, {ref_reused.sum()} uninterrupted")
        assert reused.sum() > 0 and ref_reused.sum() > 0
PY
# A second --resume has nothing left to do.
MPI_TIMEOUT=60 pipefill_mpi $ranks "${args[@]}" "${chunking[@]}" --quiet --output "$work/out.h5" --resume | grep -q "already complete"
echo "Passed: $case (the first run finished $done_before prompts, --resume the rest)"
