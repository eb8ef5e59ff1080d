#!/usr/bin/env bash
# The weights' identity covers every value a rank computes with (model/weights_digest.hpp).
# Model A is the tiny preset with a 2 MiB gate_proj per layer (intermediate 4096); model B is
# A with two floats overwritten at byte 70000 of layer 0's gate_proj, in place: the edit a
# targeted fix or a merged low-rank update makes, and that a sampled fingerprint did not see.
#   kv_store   B with A's --kv-store: nothing is lent (B's results equal B computed in full,
#              not A's), and B adds entries of its own
#   resume     --resume of A's partial output with B: refused (exit 2, the partial untouched)
#   layouts    A's identity is the same at pp 1, pp 2 and pp 2 x tp 2, and B's differs
# usage: weights_identity.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
MPI_TIMEOUT=180
# The wide model, from the tiny one's config and seeded random MLP weights.
"$PYTHON" - "$data/tiny" "$work/model" <<'PY'
import sys, json, struct, os, numpy as np
src, a = sys.argv[1:]
config = json.load(open(f"{src}/config.json"))
config["intermediate_size"] = 4096
raw = open(f"{src}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
rng = np.random.default_rng(11)
tensors = {}
for name, info in header.items():
    if name == "__metadata__":
        continue
    begin, end = info["data_offsets"]
    value = np.frombuffer(raw[8 + n + begin:8 + n + end], np.float32).reshape(info["shape"])
    if ".mlp." in name:
        shape = [4096, value.shape[1]] if "down_proj" not in name else [value.shape[0], 4096]
        value = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    tensors[name] = value
def write(directory, tensors):
    os.makedirs(directory)
    json.dump(config, open(f"{directory}/config.json", "w"))
    meta, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, value in tensors.items():
        meta[name] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + value.nbytes]}
        offset += value.nbytes
    text = json.dumps(meta).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{directory}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for value in tensors.values():
            f.write(np.ascontiguousarray(value).tobytes())
write(a, tensors)
PY
# edit_model: model A becomes B in place (the same path, the same size, the same header).
edit_model() {
  "$PYTHON" - "$work/model/model.safetensors" <<'PY'
import sys, json, struct, numpy as np
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
info = json.loads(raw[8:8 + n])["model.layers.0.mlp.gate_proj.weight"]
begin, end = info["data_offsets"]
assert end - begin == 2 << 20
at = 8 + n + begin + 70000  # two floats at byte 70000 of the tensor
old = np.frombuffer(bytes(raw[at:at + 8]), np.float32)
raw[at:at + 8] = (old + 0.5).astype(np.float32).tobytes()
open(path, "wb").write(raw)
PY
}
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 3 --min-len 60 --max-len 200 --vocab 512 --seed 8 >/dev/null
common=(run --input "$work/in.h5" --chunk-size 64 --page-size 16 --quiet)

# weights_of OUT: the weights' identity an output records.
weights_of() {
  "$PYTHON" -c "import sys, h5py, json; print(json.loads(h5py.File(sys.argv[1], 'r').attrs['resume_identity'])['weights_fingerprint'])" "$1"
}

case $case in
  kv_store)
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/a.h5" --kv-store "$work/store"
    edit_model
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/b.h5" --kv-store "$work/store"
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/b_full.h5" --no-prefix-cache
    "$PYTHON" - "$work/a.h5" "$work/b.h5" "$work/b_full.h5" <<'PY'
import sys, h5py, numpy as np
a, b, full = (h5py.File(p, "r") for p in sys.argv[1:])
assert np.array_equal(b["reused_tokens"][:], np.zeros(3)), f"B reused {b['reused_tokens'][:]} tokens of A's store"
assert np.array_equal(b["logits"][:], full["logits"][:]), "B with A's store is not B"
assert np.abs(a["logits"][:] - full["logits"][:]).max() > 1e-4, "the edit does not change the logits: no test"
PY
    [ "$(ls "$work/store" | grep -c -- '-')" -eq 6 ] || fail "B did not add entries of its own: $(ls "$work/store")" ;;
  resume)
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/out.h5"
    mv "$work/out.h5" "$work/out.h5.partial"  # as if stopped before its last prompt
    "$PYTHON" -c "import h5py; f = h5py.File('$work/out.h5.partial', 'r+'); f['completed'][2] = 0"
    edit_model
    before=$(md5sum <"$work/out.h5.partial")
    status_of pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "--resume with the edited model"
    grep -q "^error: .*weights_fingerprint" "$work/stderr" || fail "the error does not name the weights"
    [ "$(md5sum <"$work/out.h5.partial")" = "$before" ] || fail "the refused resume changed the partial"
    [ ! -e "$work/out.h5" ] || fail "the refused resume wrote an output" ;;
  layouts)
    pipefill_mpi 1 "${common[@]}" --model "$work/model" --output "$work/pp1.h5"
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/pp2.h5"
    pipefill_mpi 4 "${common[@]}" --model "$work/model" --pp 2 --tp 2 --output "$work/pp2tp2.h5"
    edit_model
    pipefill_mpi 2 "${common[@]}" --model "$work/model" --pp 2 --output "$work/edited.h5"
    a=$(weights_of "$work/pp1.h5")
    echo "identities: $a $(weights_of "$work/pp2.h5") $(weights_of "$work/pp2tp2.h5"), edited $(weights_of "$work/edited.h5")"
    [ "$(weights_of "$work/pp2.h5")" = "$a" ] && [ "$(weights_of "$work/pp2tp2.h5")" = "$a" ] ||
      fail "the layouts disagree on the weights' identity"
    [ "$(weights_of "$work/edited.h5")" != "$a" ] || fail "the edited model has the same identity" ;;
  *) fail "unknown case $case" ;;
esac
echo "Passed: weights identity, $case"
