#!/usr/bin/env bash
# The summary's TP traffic: each stage's measured all-reduce payload equals its formula, with
# and without per-token scores (without them the last stage's last layer finishes each
# prompt's last row only, and its formula says so), and for MLA. pp 2 x tp 2.
# usage: traffic_formula.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
# (synthetic:tiny-mla: MLA's latent path finishes every row, narrowed or not.)
for case in tiny: tiny:--logprobs mla: ; do
  model=$data/tiny scores=${case#*:}
  [ "${case%%:*}" = mla ] && model=synthetic:tiny-mla
  MPI_TIMEOUT=120 pipefill_mpi 4 run --model "$model" --input "$data/prompts.h5" --output "$work/out.h5" --overwrite \
    --pp 2 --tp 2 --chunk-size 32 --page-size 16 $scores >"$work/summary.txt" 2>&1 || { cat "$work/summary.txt"; fail "run"; }
  grep '^TP group' "$work/summary.txt"
  [ "$(grep -c '^TP group of stage' "$work/summary.txt")" -eq 2 ] || fail "expected a TP line per stage"
  # "X MiB all-reduced per rank; ring traffic per rank 2(N-1)/N x that = Y MiB, formula ... = Z MiB"
  awk '/^TP group of stage/ {
         for (i = 1; i <= NF; ++i) if ($i == "MiB") { v[++n] = $(i - 1) }
         if (v[n - 1] != v[n]) { print "FAIL: ring traffic " v[n - 1] " MiB, formula " v[n] " MiB: " $0; bad = 1 }
         n = 0 }
       END { exit bad }' "$work/summary.txt" || fail "measured all-reduce traffic differs from the formula"
  if [ -z "$scores" ] && [ "$model" != synthetic:tiny-mla ]; then
    grep -q "^TP group of stage 1: .* (its last layer: each prompt's last row)" "$work/summary.txt" ||
      fail "the last stage's narrowed layer is not named"
  elif grep -q "its last layer" "$work/summary.txt"; then
    fail "a run reading every row names a narrowed layer"
  fi
done
echo "ok: every stage's all-reduce traffic equals its formula"
