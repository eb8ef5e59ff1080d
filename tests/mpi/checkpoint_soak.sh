#!/usr/bin/env bash
# Checkpoints inside one long prompt survive SIGKILL at any instant. One prompt of TOKENS
# tokens (tiny model, pp 2, chunk 256, --logprobs --top-k 3 --hidden-states mean) is run with
# --resume --checkpoint-every INTERVAL over and over, each run SIGKILLed at a random instant
# on a random rank; then it is run to the end. Every resumed run must restart from the newest
# checkpoint its predecessor announced (or a newer one it wrote before dying), so what a kill
# loses is at most one interval's tokens plus the chunks in flight; and the final output must
# equal an uninterrupted run's bit for bit (logits, every token row, the mean hidden state,
# NLL and perplexity). KILLS=0 runs one interrupted-by-signal case only (quick).
# A run that finishes before its kill is checked like the last one and the prompt starts over.
# usage: checkpoint_soak.sh BIN_DIR DATA_DIR [KILLS] [TOKENS] [INTERVAL]
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 kills=${3:-12} tokens=${4:-24576} interval=${5:-1s}
temp_dir work
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 512 \
  --seed 21 >/dev/null
args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 256 --page-size 16 --logprobs --top-k 3
      --hidden-states mean --progress-interval 0.1)
start=$(date +%s.%N)
pipefill_mpi 2 "${args[@]}" --quiet --output "$work/reference.h5"
reference_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
echo "uninterrupted: ${reference_s}s"

RANDOM=5  # a repeatable sequence of instants and victims
interval_s=$(echo "$interval" | sed 's/s$//')
bound=0  # what the last kill may lose: set from the killed run's own rate
killed=0 announced=0 lost_max=0 newest=0 reached="" finished=0
check_output() {  # out.h5 equals the uninterrupted run bit for bit
  "$PYTHON" - "$work/out.h5" "$work/reference.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2]) as ref:
    for name in ("logits", "token_logprobs", "topk_ids", "topk_logprobs", "hidden_states", "nll_sum", "perplexity"):
        assert np.array_equal(f[name][:], ref[name][:], equal_nan=True), f"/{name} differs from the uninterrupted run"
    print("restored tokens at the last resume:", f["restored_tokens"][0], "; every dataset bit-identical")
PY
}
resumed_at() { sed -n 's/^resuming prompt 0 at token \([0-9]*\) .*/\1/p' "$1" | head -1; }
check_resumed() {  # LOG: the run resumed from the newest checkpoint announced so far
  local resumed
  grep -q '^pipefill \|^resuming' "$1" || return 0  # killed during its start-up: nothing to see
  resumed=$(resumed_at "$1")
  [ "$newest" -eq 0 ] || [ -n "$resumed" ] || { cat "$1"; fail "no resume after a checkpoint at token $newest"; }
  [ "${resumed:-0}" -ge "$newest" ] || { cat "$1"; fail "checkpoint at token $newest was announced, the next run resumed at ${resumed:-0}"; }
  if [ -n "$reached" ]; then
    lost=$((reached - ${resumed:-0})); [ "$lost" -le "$lost_max" ] || lost_max=$lost
    [ "$lost" -le "$bound" ] || fail "a kill lost $lost tokens, more than one interval's worth ($bound)"
  fi
}
while [ "$killed" -lt "$kills" ]; do
  start_run "$work/run.log" 2 "${args[@]}" --output "$work/out.h5" --resume --checkpoint-every "$interval"
  # The random instant: 10 % to 80 % of an uninterrupted run's time.
  sleep "$(awk -v s="$reference_s" -v r=$((RANDOM % 1000)) 'BEGIN { printf "%.3f", s * (0.1 + 0.7 * r / 1000) }')"
  victim=$(rank_pid $((RANDOM % 2)))
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null && killed=$((killed + 1))
  finish_run
  if [ "$status" -eq 0 ]; then  # finished before its kill: check it, start the prompt over
    check_output; rm "$work/out.h5"; newest=0 reached=""; finished=$((finished + 1)); continue
  fi
  if grep -q '^error:' "$work/run.log"; then cat "$work/run.log"; fail "a resumed run refused its checkpoint"; fi
  check_resumed "$work/run.log"
  start_token=$(resumed_at "$work/run.log"); start_token=${start_token:-0}
  last=$(sed -n 's/^checkpoint [0-9]*: prompt 0 at token \([0-9]*\) .*/\1/p' "$work/run.log" | tail -1)
  percent=$(sed -n 's/^progress: *\([0-9.]*\)% of tokens through stage 0.*/\1/p' "$work/run.log" | tail -1)
  # What one interval may lose: its tokens at this run's highest rate (its first progress
  # lines: attention grows with the position, so early chunks are the fastest), plus the
  # chunks in flight between stage 0 (whose progress rank 0 reports) and the last stage.
  rate=$(sed -n 's/^progress: .*, \([0-9]*\) tokens\/s,.*/\1/p' "$work/run.log" | sort -n | tail -1)
  bound=$(awk -v r="${rate:-0}" -v i="$interval_s" 'BEGIN { printf "%d", r * i + 8 * 256 }')
  if [ -n "$percent" ]; then reached=$(awk -v a="$start_token" -v p="$percent" -v t="$tokens" 'BEGIN { printf "%d", a + p * (t - a) / 100 }'); fi
  if [ -n "$last" ]; then announced=$((announced + 1)); [ "$last" -le "$newest" ] || newest=$last; fi
  echo "kill $killed: resumed at $start_token, rank 0 reached ${reached:-?}, last checkpoint ${last:-none}"
done
pipefill_mpi 2 "${args[@]}" --output "$work/out.h5" --resume --checkpoint-every "$interval" >"$work/final.log"
check_resumed "$work/final.log"
[ ! -e "$work/out.h5.checkpoint" ] || fail "the complete run left its checkpoint directory"
check_output
echo "Passed: $killed SIGKILLs ($announced runs announced a checkpoint, $finished finished before their kill);" \
  "a kill lost at most $lost_max tokens (bound $bound)"
