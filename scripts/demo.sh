#!/usr/bin/env bash
# The main job, twice: installs what is missing and builds; then
#  1. the built-in default: random prompts through the synthetic `tiny` model on 4 ranks
#     (pp 2 x tp 2) -> outputs/demo.h5 and the Chrome trace outputs/demo_trace.json;
#  2. real text through a real model: SmolLM2-135M-Instruct (scripts/get_model.sh, ~30 s the
#     first time) reads three licences that ship with Debian, on 2 ranks (pp 2), scoring every
#     token, and prints each document's perplexity and the model's most likely next words after
#     each -> outputs/demo_text.h5.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
source tests/mpi/mpi_env.sh  # root, oversubscription, shared-memory transport, 1 BLAS thread per rank

mkdir -p outputs
build/pipefill make-prompts --out outputs/demo_prompts.h5 --num 8 --min-len 512 --max-len 2048 --vocab 512 --seed 1
mpirun -n 4 build/pipefill run --model synthetic:tiny --input outputs/demo_prompts.h5 --output outputs/demo.h5 --overwrite \
  --pp 2 --tp 2 --chunk-size 256 --trace outputs/demo_trace.json
echo "open outputs/demo_trace.json in https://ui.perfetto.dev to see the pipeline"

echo
scripts/get_model.sh smollm2-135m models/smollm2-135m
texts=outputs/demo_texts
mkdir -p "$texts"
for licence in Apache-2.0 BSD CC0-1.0; do  # tokenize.py reads .txt (one prompt) and .jsonl files
  cp "/usr/share/common-licenses/$licence" "$texts/$licence.txt"
done
scripts/tokenize.py --model models/smollm2-135m --out outputs/demo_text_prompts.h5 "$texts"/*.txt
mpirun -n 2 build/pipefill run --model models/smollm2-135m --input outputs/demo_text_prompts.h5 \
  --output outputs/demo_text.h5 --overwrite --pp 2 --chunk-size 256 --logprobs --top-k 5
echo "how well the model predicts each document, and the tokens it expected least:"
scripts/perplexity.py outputs/demo_text.h5 --input outputs/demo_text_prompts.h5 --model models/smollm2-135m \
  --surprising 3
echo "the model's most likely next words after each document:"
scripts/detokenize.py --model models/smollm2-135m outputs/demo_text.h5 --dataset logits \
  --input outputs/demo_text_prompts.h5 --top 5
