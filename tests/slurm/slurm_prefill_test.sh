#!/usr/bin/env bash
# Submits jobs/slurm/prefill_cpu.sbatch to a real single-node Slurm (started here, stopped
# on exit), waits for it, and requires its logits to equal a direct `mpirun` run's.
# usage: slurm_prefill_test.sh BIN_DIR DATA_DIR
set -euo pipefail
# shellcheck source=slurm_env.sh
source "$(dirname "$0")/slurm_env.sh" "$@"
start=$SECONDS
start_slurm

# Reference: the same run launched directly.
pipefill_mpi 4 run --model "$data/tiny" --input "$data/prompts.h5" --output "$work/direct.h5" \
  --pp 2 --tp 2 --chunk-size 64 --quiet

cd "$work"
job=$(MODEL="$data/tiny" INPUT="$data/prompts.h5" OUTPUT="$work/slurm.h5" PP=2 TP=2 CHUNK_SIZE=64 \
      PIPEFILL_BIN="$bin/pipefill" sbatch --parsable --export=ALL -n 4 "$repo/jobs/slurm/prefill_cpu.sbatch")
echo "submitted job $job"
wait_until 120 "the end of job $job" job_done "$job"
echo "--- job log"; cat "$work"/pipefill-cpu-"$job".out
[ -f "$work/slurm.h5" ] || fail "the job wrote no output"
"$bin/tests/compare_logits" "$work/slurm.h5" "$work/direct.h5" --rtol 1e-6
"$bin/tests/compare_logits" "$work/slurm.h5" "$data/ref_tiny.h5" --rtol 1e-4

# The strong-scaling array (P = 1, 2) and its dependent collect step.
submitted=$(PPS="1 2" TP=1 MODEL="$data/tiny" INPUT="$data/prompts.h5" OUT_DIR="$work/scaling" CHUNK_SIZE=64 \
            PIPEFILL_BIN="$bin/pipefill" "$repo/jobs/slurm/submit_strong_scaling.sh")
echo "$submitted"
read -r _ _ array _ _ collect <<<"$submitted"
wait_until 180 "the end of job $array" job_done "$array"
wait_until 180 "the end of job $collect" job_done "$collect"
cat "$work"/pipefill-scaling-*.out | tail -n 5
rows=$(grep -c '^slurm,' "$work/scaling/scaling.csv" || true)
[ "$rows" -eq 2 ] || fail "scaling.csv has $rows rows, expected 2"
"$bin/tests/compare_logits" "$work/scaling/pp2.h5" "$data/ref_tiny.h5" --rtol 1e-4
echo "Passed: Slurm jobs in $((SECONDS - start)) s (cluster start, prefill job, scaling array + collect)"
