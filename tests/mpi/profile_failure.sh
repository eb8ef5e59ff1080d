#!/usr/bin/env bash
# A profile that fails on one stage (stage 1, injected) must turn dynamic chunking off on
# every rank with exactly one warning, and the run must complete with correct logits.
# usage: profile_failure.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
PIPEFILL_TEST_FAIL_PROFILE_STAGE=1 pipefill_mpi 2 run --model "$data/tiny" \
  --input "$data/prompts.h5" --output "$work/out.h5" --pp 2 --chunk-size 128 --page-size 16 \
  --chunk-policy pipefill --profile-points 12 2>"$work/stderr"
cat "$work/stderr"
warnings=$(grep -c '^warning:' "$work/stderr" || true)
[ "$warnings" -eq 1 ] || fail "$warnings warning lines, expected 1"
grep '^warning:' "$work/stderr" | grep -q 'dynamic chunking disabled.*stage 1' || fail "warning text"
"$bin/tests/compare_logits" "$work/out.h5" "$data/ref_tiny.h5" --rtol 1e-4
EXPECT_POLICY=fixed "$PYTHON" "$here/check_output.py" "$work/out.h5"
