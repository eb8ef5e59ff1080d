#!/usr/bin/env bash
# Prefix reuse on one document with many questions: a real document of DOC tokens (Debian's
# licences, scripts/licence_document.sh) followed by each of QUESTIONS different questions of
# about 100 tokens, through MODEL on pp 2, with prefix reuse (the default) and with
# --no-prefix-cache, in one run; prints each run's wall time, mean TTFT, tokens computed and
# reused, the ratios, and how far apart the two runs' logits and log-probs are. Then the KV
# store: the document alone is stored by one run (--kv-store), and the questions are run again
# served from the store against from scratch (no store), and the store's bytes: each question's
# entry holds only its own rows and names the document's (kvcache/kv_store.hpp), against what
# storing every prompt whole would take.
# usage: scripts/bench_prefix_reuse.sh [MODEL] [DOC] [QUESTIONS]   (env CHUNK, default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
model=${1:-models/smollm2-135m} doc=${2:-4096} questions=${3:-16} chunk=${CHUNK:-512}
[ -e "$model/config.json" ] || [ "$model" != models/smollm2-135m ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
venv_python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/licence_document.sh "$model" "$work/doc.h5" "$doc"
"$venv_python" - "$model" "$work/doc.h5" "$work/in.h5" "$questions" <<'PY'
import sys
import h5py
import numpy as np
from tokenizers import Tokenizer

model, doc_path, out, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tokenizer = Tokenizer.from_file(f"{model}/tokenizer.json")
doc = h5py.File(doc_path, "r")["tokens"][:]
topics = ["redistribution in binary form", "patents", "warranty", "liability", "modified versions",
          "attribution", "sublicensing", "trademarks", "source code", "termination", "compatibility",
          "linking", "notices", "fees", "jurisdiction", "later versions", "documentation", "network use"]
prompts = []
for i in range(count):
    topic = topics[i % len(topics)]
    text = (f"\n\nQuestion {i + 1}. Considering every licence above, what do they say about {topic}? "
            f"Compare how each licence treats {topic}, quote the sentence that matters most for a small "
            f"company that ships software to customers, and say which licence is the most permissive "
            f"about {topic} and which is the strictest, in three short paragraphs.\nAnswer:")
    prompts.append(np.concatenate([doc, np.array(tokenizer.encode(text).ids, np.int32)]))
with h5py.File(out, "w") as f:
    f["tokens"] = np.concatenate(prompts).astype(np.int32)
    f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
lengths = [len(p) - len(doc) for p in prompts]
print(f"input: a {len(doc)}-token document and {count} questions of {min(lengths)}..{max(lengths)} tokens")
PY
printf "%-18s %9s %12s %10s %10s\n" run wall_s "mean ttft_s" computed reused
for mode in reuse full; do
  flags=()
  [ $mode = full ] && flags=(--no-prefix-cache)
  mpirun -n 2 build/pipefill run --model "$model" --input "$work/in.h5" --output "$work/$mode.h5" --overwrite --pp 2 \
    --chunk-size "$chunk" --logprobs --progress-interval 0 "${flags[@]}" >"$work/$mode.log"
  wall=$(grep -oP 'wall \K[0-9.]+' "$work/$mode.log")
  /usr/bin/python3 - "$work/$mode.h5" "$mode" "$wall" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
ttft, reused, offsets = f["ttft_s"][:], f["reused_tokens"][:], None
total = int(f["token_logprobs"].shape[0])
print(f"{sys.argv[2]:<18} {float(sys.argv[3]):9.2f} {ttft.mean():12.3f} {total - reused.sum():10d} {reused.sum():10d}")
PY
done
/usr/bin/python3 - "$work/reuse.h5" "$work/full.h5" "$work/reuse.log" "$work/full.log" <<'PY'
import re, sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
wall = [float(re.search(r"wall ([0-9.]+)", open(p).read()).group(1)) for p in sys.argv[3:5]]
print(f"reuse is {wall[1] / wall[0]:.1f}x faster in total, {b['ttft_s'][:].mean() / a['ttft_s'][:].mean():.1f}x in mean TTFT")
logits = np.abs(a["logits"][:] - b["logits"][:]).max() / np.abs(b["logits"][:]).max()
lp = np.nanmax(np.abs(a["token_logprobs"][:] - b["token_logprobs"][:]))
print(f"results: logits within {logits:.2g} (relative to the largest), log-probs within {lp:.2g}, "
      f"perplexity {a['perplexity'][:].mean():.4f} vs {b['perplexity'][:].mean():.4f}")
PY
grep "^prefix reuse" "$work/reuse.log"

# The store: the document once, then the questions from the store or from scratch.
mkdir "$work/store"
run() {  # NAME INPUT ARGS...: one run, its wall time and mean TTFT
  local name=$1 input=$2
  shift 2
  mpirun -n 2 build/pipefill run --model "$model" --input "$input" --output "$work/$name.h5" --overwrite --pp 2 \
    --chunk-size "$chunk" --progress-interval 0 "$@" >"$work/$name.log"
  printf "%-30s %9s %12s   %s\n" "$name" "$(grep -oP 'wall \K[0-9.]+' "$work/$name.log")" \
    "$(/usr/bin/python3 -c "import h5py,sys; print('%.3f' % h5py.File(sys.argv[1])['ttft_s'][:].mean())" "$work/$name.h5")" \
    "$(grep -o '^prefix reuse: .*reused[^,]*' "$work/$name.log" || true)"
}
printf "%-30s %9s %12s\n" run wall_s "mean ttft_s"
run store_the_document "$work/doc.h5" --kv-store "$work/store"
run questions_from_scratch "$work/in.h5"
run questions_from_the_store "$work/in.h5" --kv-store "$work/store"
/usr/bin/python3 - "$work" <<'PY'
import re, sys
wall = {n: float(re.search(r"wall ([0-9.]+)", open(f"{sys.argv[1]}/{n}.log").read()).group(1))
        for n in ("questions_from_scratch", "questions_from_the_store")}
print(f"served from the store: {wall['questions_from_scratch'] / wall['questions_from_the_store']:.2f}x faster "
      f"than from scratch (and it also writes its own prompts into the store)")
PY
du -sh "$work/store" | sed 's/^/store size: /'
"$venv_python" scripts/kv_store.py ls "$work/store" --json | "$venv_python" -c '
import json, sys
entries = json.load(sys.stdin)
root = max(entries, key=lambda e: e["bytes"] if not e.get("parent") else 0)
per_token = root["bytes"] / root["tokens"]  # a whole entry: its bytes a token
whole = sum(e["tokens"] * per_token for e in entries)
stored = sum(e["bytes"] for e in entries)
print(f"store: {len(entries)} entries ({len(entries) - 1} questions naming the document), {stored / 1e6:.1f} MB; "
      f"each stored whole: {whole / 1e6:.1f} MB ({whole / stored:.1f}x)")'
