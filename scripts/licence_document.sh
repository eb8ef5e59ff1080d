#!/usr/bin/env bash
# One real document of exactly TOKENS tokens for the benchmarks: the licences Debian ships in
# /usr/share/common-licenses (plain files, in name order) joined into one text, tokenized with
# MODEL's tokenizer (scripts/tokenize.py), cut to its first TOKENS tokens. Longer than the
# licences (about 52K SmolLM2 tokens): they are read again from the start, said on stderr (the
# cost of a prefill does not depend on what the tokens say).
# usage: scripts/licence_document.sh MODEL_DIR OUT.h5 TOKENS
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 out=$2 tokens=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat >"$work/licences.txt"
scripts/tokenize.py --model "$model" --out "$work/all.h5" "$work/licences.txt" 2>&1 >/dev/null |
  { grep -v "longer than the model" >&2 || true; }
/usr/bin/python3 - "$work/all.h5" "$out" "$tokens" <<'PY'
import sys, h5py, numpy as np
tokens, wanted = h5py.File(sys.argv[1], "r")["tokens"][:], int(sys.argv[3])
if len(tokens) < wanted:
    copies = -(-wanted // len(tokens))
    print(f"note: the licences hold {len(tokens)} tokens; read {copies} times over for {wanted}", file=sys.stderr)
    tokens = np.tile(tokens, copies)
with h5py.File(sys.argv[2], "w") as f:
    f["tokens"] = tokens[:wanted].astype(np.int32)
    f["offsets"] = np.array([0, wanted], np.int64)
PY
