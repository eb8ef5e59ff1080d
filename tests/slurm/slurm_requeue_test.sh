#!/usr/bin/env bash
# A job stopped by its time-limit warning is requeued and finishes where it stopped, with the
# output of an uninterrupted run. jobs/slurm/prefill_cpu.sbatch runs one long prompt on a real
# single-node Slurm (started here, stopped on exit); once the job has computed a while, the
# batch script gets SIGUSR1 exactly as `--signal=B:USR1@300` delivers it at the time limit
# (`scancel --batch --signal=USR1`: Slurm's own time for that signal is only accurate to a
# minute). The script forwards it, pipefill checkpoints the prompt and exits 75, the script
# requeues the job, and the job's second run resumes the prompt from its checkpoint. Its
# logits, log-probs and NLL must equal a direct run's bit for bit.
# usage: slurm_requeue_test.sh BIN_DIR DATA_DIR
set -euo pipefail
# shellcheck source=slurm_env.sh
source "$(dirname "$0")/slurm_env.sh" "$@"
start=$SECONDS
start_slurm

"$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 24576 --max-len 24576 --vocab 512 --seed 3 >/dev/null
flags="--page-size 16 --logprobs --progress-interval 0.5"
pipefill_mpi 2 run --model "$data/tiny" --input "$work/in.h5" --output "$work/direct.h5" --pp 2 --chunk-size 256 \
  $flags --quiet

cd "$work"
job=$(MODEL="$data/tiny" INPUT="$work/in.h5" OUTPUT="$work/slurm.h5" PP=2 TP=1 CHUNK_SIZE=256 EXTRA_ARGS="$flags" \
      PIPEFILL_BIN="$bin/pipefill" sbatch --parsable --export=ALL -n 2 "$repo/jobs/slurm/prefill_cpu.sbatch")
echo "submitted job $job"
log=$work/pipefill-cpu-$job.out
# Two progress lines: the prompt is well under way.
wait_until 120 "the job's second progress line" bash -c "[ \"\$(grep -c '^progress:' '$log' 2>/dev/null)\" -ge 2 ] 2>/dev/null"
scancel --batch --signal=USR1 "$job"
echo "sent the time-limit warning (SIGUSR1 to the batch script)"
wait_until 120 "the job's requeue" bash -c "grep -q '^requeueing job $job' '$log'"
# Slurm holds a requeued batch job for a while before it may start again; the test does not
# need to wait for that: it makes the job eligible now once it is pending again.
wait_until 60 "job $job pending again" bash -c "[ \"\$(squeue -h -j $job -o %T)\" = PENDING ]"
scontrol update jobid="$job" StartTime=now
wait_until 240 "the end of job $job" job_done "$job"
echo "--- job log"; grep -v '^progress:' "$log"
[ -f "$work/slurm.h5" ] || fail "the requeued job wrote no output"
grep -q '^resuming prompt 0 at token [0-9]* of 24576' "$log" || fail "the requeued job did not resume the prompt"
"$PYTHON" - "$work/slurm.h5" "$work/direct.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2]) as ref:
    restored = int(f["restored_tokens"][0])
    assert restored > 0, "nothing was restored"
    for name in ("logits", "token_logprobs", "nll_sum", "perplexity"):
        assert np.array_equal(f[name][:], ref[name][:], equal_nan=True), f"/{name} differs from the direct run"
    print(f"restored {restored} tokens after the requeue; logits, log-probs and NLL bit-identical")
PY
echo "Passed: stopped, requeued and resumed in $((SECONDS - start)) s"
