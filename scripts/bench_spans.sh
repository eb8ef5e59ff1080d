#!/usr/bin/env bash
# What a scored span saves: one real document of TOKENS tokens (Debian's licences,
# scripts/licence_document.sh) on SmolLM2-135M, pp 1, --logprobs --top-k 1, three ways:
#   logits only          no token scores (the prefill alone)
#   every token scored   /score_start absent: the LM head on all TOKENS rows
#   last SPAN scored     /score_start = TOKENS - SPAN: a context and its continuation, the LM
#                        head on SPAN + 1 rows
#   ... and a token set  every token scored, with --token-ids of four answer letters' ids
#                        (what the set adds to the row summaries)
# Each run REPEAT times, interleaved; the median wall and the peak RSS of the rank.
# usage: scripts/bench_spans.sh [TOKENS] [SPAN] [REPEAT]   (default 4096 20 3)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
tokens=${1:-4096} span=${2:-20} repeat=${3:-3}
model=models/smollm2-135m
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/licence_document.sh "$model" "$work/all.h5" "$tokens"
/usr/bin/python3 - "$work/all.h5" "$work/span.h5" $((tokens - span)) <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    g["tokens"], g["offsets"] = f["tokens"][:], f["offsets"][:]
    g["score_start"] = np.array([int(sys.argv[3])], np.int64)
PY
echo "# four token ids, as scripts/token_ids.py writes them" >"$work/ids.txt"
printf '%s\n' 330 378 340 422 >>"$work/ids.txt"
# one LABEL INPUT [flags...]: wall seconds and peak RSS (MiB), appended to $work/LABEL.
one() {
  local label=$1 input=$2
  shift 2
  mpirun -n 1 /usr/bin/time -f %M -o "$work/rss" build/pipefill run --model "$model" --input "$input" \
    --output "$work/out.h5" --overwrite --progress-interval 0 "$@" >"$work/log"
  echo "$(grep -oP 'wall \K[0-9.]+' "$work/log") $(($(cat "$work/rss") / 1024))" >>"$work/$label"
}
for _ in $(seq "$repeat"); do
  one logits "$work/all.h5"
  one all "$work/all.h5" --logprobs --top-k 1
  one span "$work/span.h5" --logprobs --top-k 1
  one set "$work/all.h5" --logprobs --top-k 1 --token-ids "$work/ids.txt"
done
echo "SmolLM2-135M, one $tokens-token document, pp 1, median of $repeat runs ($(lscpu | grep -oP 'Model name:\s*\K.*'))"
printf "%-38s %9s %9s %12s\n" outputs wall_s "RSS MiB" "vs logits"
base=$(sort -n "$work/logits" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
for label in logits all span set; do
  read -r wall rss < <(sort -n "$work/$label" | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
  case $label in
    logits) what="logits only" ;;
    all) what="every token scored" ;;
    span) what="last $span tokens scored (/score_start)" ;;
    set) what="every token + 4 --token-ids" ;;
  esac
  printf "%-38s %9.2f %9d %+11.1f%%\n" "$what" "$wall" "$rss" "$(echo "($wall / $base - 1) * 100" | bc -l)"
done
