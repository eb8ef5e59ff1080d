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
temp_dir work
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
MPI_TIMEOUT=120 status_of pipefill_mpi 2 run --model "$work/model" --input "$data/prompts.h5" --output "$work/out.h5" \
  --pp 2 --quiet 2>"$work/stderr"
cat "$work/stderr"
grep -q '^warning: rank 1: model.norm.weight holds 1 NaN/Inf' "$work/stderr" || fail "no warning"
expect_status 2 "the run"
[ "$(grep -c '^error:' "$work/stderr")" -eq 1 ] || fail "expected one error: line"
grep -q '^error: the results of 4 prompt(s) are not finite (NaN or Inf): prompt 0, 1, 2, 3' "$work/stderr" ||
  fail "the error line does not name the prompts"
[ ! -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || fail "NaN rows were stored"
echo "Passed: NaN weights warned about, NaN logits refused"
