#!/usr/bin/env bash
# Context parallelism spreads a prompt's KV cache over the CP ranks: a prompt whose cache
# does not fit one rank's --kv-memory-mb (refused with an error: line on one rank) runs at
# --cp 2 within the same budget, each rank holding its half (the summary's peak), and its
# logits equal a one-rank run's that was given the room; the bytes its ring sent are what the
# chunks' sizes give.
# usage: cp_kv_budget.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
# The tiny model keeps 4 KiB of K and V a token (8 layers x 2 x 2 heads x 32 x 4 bytes): the
# 3000-token prompt needs 12 MiB on one rank, about 6 on each of two.
"$bin/pipefill" make-prompts --out "$work/long.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 5 >/dev/null
args=(run --model "$data/tiny" --input "$work/long.h5" --chunk-size 512 --page-size 64)

status_of pipefill_mpi 1 "${args[@]}" --kv-memory-mb 8 --output "$work/one.h5" >"$work/one.log" 2>&1
expect_status 2 "one rank with 8 MiB of KV"
grep -q "^error: prompt 0 (3000 tokens) needs 12 MiB of KV cache per rank on stage 0 (its 8 layers) but --kv-memory-mb is 8; .*--cp" "$work/one.log" ||
  { cat "$work/one.log"; fail "one rank's refusal does not say what the prompt needs"; }
# At cp 2 a budget below half still refuses, naming the whole prompt and a rank's share of it.
status_of pipefill_mpi 2 "${args[@]}" --kv-memory-mb 4 --cp 2 --output "$work/cp2_small.h5" >"$work/cp2_small.log" 2>&1
expect_status 2 "cp 2 with 4 MiB of KV a rank"
grep -q "^error: prompt 0 (3000 tokens, 1[0-9]* of them in each CP rank's pool) needs 7 MiB" "$work/cp2_small.log" ||
  { cat "$work/cp2_small.log"; fail "cp 2's refusal does not name the prompt and a rank's share"; }

pipefill_mpi 2 "${args[@]}" --kv-memory-mb 8 --cp 2 --output "$work/cp2.h5" >"$work/cp2.log"
peak=$(sed -n 's/^kv cache: \([0-9.]*\) MiB at its peak.*/\1/p' "$work/cp2.log")
echo "cp 2: KV peak $peak MiB on the rank that held the most"
"$PYTHON" -c "import sys; p = float(sys.argv[1]); assert 5.5 <= p <= 6.6, p" "$peak" ||
  fail "cp 2's peak KV a rank is $peak MiB, not about half of 12"

# The ring's bytes: what the ranks sent is what the chunks' sizes give for the variants taken
# (the tiny model's 6 chunks of 512: pass-KV while the prefix is short).
line=$(grep "^CP group of stage 0:" "$work/cp2.log") || fail "no CP traffic line in the summary"
echo "$line"
"$PYTHON" - "$line" <<'PY' || fail "the CP bytes sent are not what the chunks' sizes give"
import re, sys
sent, expected = map(float, re.search(r"([0-9.]+) MiB sent per rank \(the chunks' sizes give ([0-9.]+) MiB\)", sys.argv[1]).groups())
assert expected > 0 and abs(sent - expected) <= 0.05 * expected + 0.1, (sent, expected)
PY

pipefill_mpi 1 "${args[@]}" --kv-memory-mb 64 --quiet --output "$work/reference.h5"
"$bin/tests/compare_logits" "$work/cp2.h5" "$work/reference.h5" --rtol 1e-4
echo "Passed: the prompt one rank cannot hold runs at cp 2 in the same budget"
