#!/usr/bin/env bash
# The memory of scoring every token of one long document (issue 31): peak RSS of
#   - pipefill run --logprobs on one rank (the final norm and LM head in blocks of 64 MiB of
#     logits: memory O(block x vocab), the KV cache O(tokens));
#   - transformers as lm-evaluation-harness's `hf` model scores a request: one forward with
#     the logits of every position (logits_to_keep off), then log_softmax over all of them in
#     float32: two [tokens, vocab] float32 arrays.
# On SmolLM2-135M (vocab 49,152; scripts/get_model.sh) and Debian's licences as the document
# (scripts/licence_document.sh), TOKENS long (default 32768: beyond SmolLM2's 8,192-token
# context, so pipefill runs with --allow-long-prompts; memory does not depend on the values).
# llama.cpp's perplexity tool is not run: it is not on PyPI (llama-cpp-python is its library,
# built from source by scripts/setup_peers.sh); the arithmetic of its logits buffer is printed.
# usage: scripts/bench_score_memory.sh [TOKENS]   (env THREADS, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=${1:-32768} threads=${THREADS:-2}
model=models/smollm2-135m
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
scripts/setup_venv.sh >/dev/null
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
scripts/licence_document.sh "$model" "$work/doc.h5" "$tokens"

# peak MODE COMMAND...: runs it under /usr/bin/time; prints "MODE peak_MiB wall_s".
peak() {
  local mode=$1
  shift
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -f %M -o "$work/rss" "$@" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  end=$(date +%s.%N)
  printf "%-44s %10.0f %9.1f\n" "$mode" "$(echo "$(cat "$work/rss") / 1024" | bc -l)" "$(echo "$end - $start" | bc -l)"
}

printf "%s, %d tokens, %d threads, %s\n" "$model" "$tokens" "$threads" "$(lscpu | sed -n 's/^Model name: *//p')"
printf "%-44s %10s %9s\n" "scorer" "peak MiB" "wall s"
peak "pipefill run --logprobs (1 rank)" env OMP_NUM_THREADS=1 build/pipefill run --model "$model" \
  --input "$work/doc.h5" --output "$work/out.h5" --logprobs --allow-long-prompts --threads "$threads" \
  --progress-interval 0
peak "transformers, all logits + log_softmax (hf)" "$python" - "$model" "$work/doc.h5" "$threads" <<'PY'
import sys, h5py, torch
from transformers import AutoModelForCausalLM
model_dir, doc, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
ids = torch.from_numpy(h5py.File(doc, "r")["tokens"][:].astype("int64"))[None, :]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
with torch.no_grad():
    # lm-eval 0.4's HFLM._loglikelihood_tokens: log_softmax over the logits of every position.
    logprobs = torch.log_softmax(model(input_ids=ids).logits, dim=-1)
    nll = -logprobs[0, :-1].gather(-1, ids[0, 1:, None]).sum()
print(f"nll {float(nll):.3f}")
PY
vocab=$("$python" -c "import json; print(json.load(open('$model/config.json'))['vocab_size'])")
printf "llama.cpp perplexity -c %d (not run): its logits buffer alone, %d x %d float32 = %.1f GiB\n" \
  "$tokens" "$tokens" "$vocab" "$(echo "$tokens * $vocab * 4 / 1024^3" | bc -l)"
