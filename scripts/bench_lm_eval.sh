#!/usr/bin/env bash
# lm-evaluation-harness's own command line on one long document with QUESTIONS four-choice
# questions (the task of tests/reference/lm_eval_check.py with a DOC_CHARS-character licence
# text, ~4 characters a token), SmolLM2-135M: lm-eval's hf model against pipefill through
# scripts/lm_eval_pipefill.py (pp 2 ranks on the same cores: what a user of this machine would
# run). hf costs a forward of the document per choice, so it runs on HF_QUESTIONS and on twice
# that many, and its time for QUESTIONS is extrapolated along that line (its start-up counted
# once); pipefill runs all QUESTIONS. Total wall of each lm-eval command, imports included.
# usage: scripts/bench_lm_eval.sh [QUESTIONS] [DOC_CHARS] [HF_QUESTIONS]   (default 16 16000 4)
set -euo pipefail
cd "$(dirname "$0")/.."
questions=${1:-16} chars=${2:-16000} hf_questions=${3:-4}
model=$PWD/models/smollm2-135m
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
scripts/setup_venv.sh --lm-eval >/dev/null
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
source tests/mpi/mpi_env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tasks=$("$python" -c "
import sys; sys.path.insert(0, 'tests/reference')
import lm_eval_check
print(lm_eval_check.write_tasks('$work', $questions, $chars))")
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# run NAME MODEL ARGS LIMIT: seconds of one lm-eval command
run() {
  local start=$SECONDS
  "$python" scripts/lm_eval_pipefill.py --model "$2" --model_args "$3" --tasks pipefill_doc_mc \
    --include_path "$tasks" --batch_size 1 --limit "$4" --output_path "$work/$1" >"$work/$1.log" 2>&1 ||
    { tail -20 "$work/$1.log"; exit 1; }
  echo $((SECONDS - start))
}
tokens=$("$python" -c "
import json, tokenizers
t = tokenizers.Tokenizer.from_file('$model/tokenizer.json')
print(len(t.encode(json.loads(open('$work/questions.jsonl').readline())['document']).ids))")
pf=$(run pipefill pipefill "model=$model,pp=2,pipefill=$PWD/build/pipefill" "$questions")
hf=$(run hf hf "pretrained=$model,dtype=float32" "$hf_questions")
hf2=$(run hf2 hf "pretrained=$model,dtype=float32" $((2 * hf_questions)))
scaled=$(echo "$hf + ($hf2 - $hf) * ($questions - $hf_questions) / $hf_questions" | bc -l)
echo "lm-eval, one $tokens-token document, $questions four-choice questions ($((questions * 4)) requests), SmolLM2-135M, $(lscpu | grep -oP 'Model name:\s*\K.*'), $(nproc) cores"
printf "%-58s %9s\n" model seconds
printf "%-58s %9.0f\n" "hf ($hf s for $hf_questions questions, $hf2 s for $((2 * hf_questions))), extrapolated" "$scaled"
printf "%-58s %9d\n" "pipefill, pp 2 (scripts/lm_eval_pipefill.py)" "$pf"
printf "speed-up: %.1fx\n" "$(echo "$scaled / $pf" | bc -l)"
