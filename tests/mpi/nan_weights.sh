#!/usr/bin/env bash
# A checkpoint with a NaN in model.norm.weight: pipefill loads it and warns naming the tensor
# and the rank; every prompt's logits then come out NaN, and a non-finite row is never
# stored: the run ends with exit status 2 and one `error:` line naming the prompts, and
# leaves no output file (no prompt finished).
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
set +e
timeout 120 mpirun -n 2 "$bin/pipefill" run --model "$work/model" --input "$data/prompts.h5" --output "$work/out.h5" \
  --pp 2 --quiet 2>"$work/stderr"
status=$?
set -e
cat "$work/stderr"
grep -q '^warning: rank 1: model.norm.weight holds 1 NaN/Inf' "$work/stderr" || { echo "FAILED: no warning"; exit 1; }
[ "$status" -eq 2 ] || { echo "FAILED: exit status $status, expected 2"; exit 1; }
[ "$(grep -c '^error:' "$work/stderr")" -eq 1 ] || { echo "FAILED: expected one error: line"; exit 1; }
grep -q '^error: the logits of 4 prompt(s) are not finite (NaN or Inf): prompt 0, 1, 2, 3' "$work/stderr" ||
  { echo "FAILED: the error line does not name the prompts"; exit 1; }
[ ! -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || { echo "FAILED: NaN rows were stored"; exit 1; }
echo "Passed: NaN weights warned about, NaN logits refused"
