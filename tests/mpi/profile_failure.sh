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

# `profile` says which policies will fall back with the file it writes, by the rule run and
# plan apply: a failed stage 1 sinks the pipefill policy (every stage) but not SGLang's
# (stage 0 only); a failed stage 0 sinks SGLang's too. (Only what the injection decides is
# asserted: the tiny model's other fits may fail on timing noise of a loaded machine.)
PIPEFILL_TEST_FAIL_PROFILE_STAGE=1 pipefill_mpi 2 profile --model "$data/tiny" --out "$work/cost.json" --pp 2 \
  --chunk-size 128 --page-size 16 --profile-points 12 >/dev/null 2>"$work/profile.stderr"
cat "$work/profile.stderr"
grep -q '^warning: with this profile, --chunk-policy pipefill falls back to fixed chunks (.*stage 1: failure injected' \
  "$work/profile.stderr" || fail "profile: the pipefill policy's warning"
if grep '^warning: with this profile, --dynamic-chunking' "$work/profile.stderr" | grep -q 'stage 1'; then
  fail "profile: SGLang's policy blamed on stage 1, which it does not use"
fi
PIPEFILL_TEST_FAIL_PROFILE_STAGE=0 pipefill_mpi 2 profile --model "$data/tiny" --out "$work/cost0.json" --pp 2 \
  --chunk-size 128 --page-size 16 --profile-points 12 >/dev/null 2>"$work/profile0.stderr"
grep -q '^warning: with this profile, --dynamic-chunking falls back to fixed chunks (stage 0: failure injected' \
  "$work/profile0.stderr" || fail "profile: SGLang's policy's warning"
echo "ok: profile warns for the policies whose own stages failed"
