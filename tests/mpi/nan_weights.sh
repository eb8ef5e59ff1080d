#!/usr/bin/env bash
# A checkpoint with a NaN in model.norm.weight: pipefill loads it, warns naming the tensor
# and the rank, and still completes (the logits will be NaN: that is the user's to judge).
# usage: nan_weights.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$data/tiny" "$work/model"
"$PYTHON" - "$work/model/model.safetensors" <<'PY'
import sys, struct, json
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
hl = struct.unpack("<Q", raw[:8])[0]
begin = json.loads(raw[8:8 + hl])["model.norm.weight"]["data_offsets"][0]
raw[8 + hl + begin:8 + hl + begin + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(raw)
PY
timeout 120 mpirun -n 2 "$bin/pipefill" run --model "$work/model" --input "$data/prompts.h5" --output "$work/out.h5" \
  --pp 2 --quiet 2>"$work/stderr"
cat "$work/stderr"
grep -q '^warning: rank 1: model.norm.weight holds 1 NaN/Inf' "$work/stderr" || { echo "FAILED: no warning"; exit 1; }
[ -e "$work/out.h5" ] || { echo "FAILED: the run did not complete"; exit 1; }
echo "Passed: NaN weights warned about"
