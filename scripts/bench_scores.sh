#!/usr/bin/env bash
# What per-token outputs cost: peak RSS of every rank and time per token, with and without
# --logprobs --top-k 5, on pp 2 (rank 1 is the last stage, which scores; rank 0 writes).
#   1. synthetic `tiny` (vocab 512), one prompt of each length in TOKENS (default 16384 65536):
#      the scores' memory must not grow with the prompt (the KV cache and the token ids do);
#   2. SmolLM2-135M (vocab 49,152; scripts/get_model.sh) on real text: Debian's licences
#      joined into one document cut to DOC_TOKENS (default 8192, scripts/licence_document.sh).
# usage: scripts/bench_scores.sh [TOKENS...]   (env DOC_TOKENS, CHUNK, default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
lengths=("${@:-16384 65536}")
read -ra lengths <<<"${lengths[*]}"
chunk=${CHUNK:-512} doc_tokens=${DOC_TOKENS:-8192}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run LABEL MODEL INPUT TOKENS [flags...]: one pp 2 run, a table row.
run() {
  local label=$1 model=$2 input=$3 tokens=$4
  shift 4
  rm -f "$work"/rss.* "$work/out.h5"
  # Each rank under /usr/bin/time: its peak RSS (KiB) into rss.RANK.
  mpirun -n 2 bash -c 'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$work" \
    build/pipefill run --model "$model" --input "$input" --output "$work/out.h5" --overwrite --pp 2 --chunk-size "$chunk" \
    --progress-interval 0 "$@" >"$work/log"
  local wall
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/log")
  printf "%-22s %8s %-26s %9s %10.1f %12.0f %12.0f\n" "$label" "$tokens" "${*:-(logits only)}" "$wall" \
    "$(echo "$wall * 1000000 / $tokens" | bc -l)" "$(($(cat "$work/rss.0") / 1024))" "$(($(cat "$work/rss.1") / 1024))"
}

printf "%-22s %8s %-26s %9s %10s %12s %12s\n" model tokens outputs wall_s us/token "rank0 MiB" "rank1 MiB"
for tokens in "${lengths[@]}"; do
  build/pipefill make-prompts --out "$work/in_$tokens.h5" --num 1 --min-len "$tokens" --max-len "$tokens" \
    --vocab 512 --seed 1 >/dev/null
  run "synthetic:tiny" synthetic:tiny "$work/in_$tokens.h5" "$tokens"
  run "synthetic:tiny" synthetic:tiny "$work/in_$tokens.h5" "$tokens" --logprobs --top-k 5
done

model=models/smollm2-135m
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
scripts/licence_document.sh "$model" "$work/doc.h5" "$doc_tokens"
run "smollm2-135m (text)" "$model" "$work/doc.h5" "$doc_tokens"
run "smollm2-135m (text)" "$model" "$work/doc.h5" "$doc_tokens" --logprobs --top-k 5
grep -E '^log-probs' "$work/log" || true
