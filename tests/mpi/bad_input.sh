#!/usr/bin/env bash
# One bad-input case: pipefill must print exactly one `error:` line (from rank 0), exit
# with status 2, leave no output file (nor its .partial), and not hang (timeout = failure).
# usage: bad_input.sh BIN_DIR CASE DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 case=$2 data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out.h5
model=$data/tiny
input=$data/prompts.h5
ranks=2
extra=(--pp 2)

# make_input NAME PYTHON-CODE: writes $work/NAME.h5 with h5py (f is the open file).
make_input() {
  "$PYTHON" - "$work/$1.h5" <<PY
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    $2
PY
  input=$work/$1.h5
}
# copy_model: a private copy of the tiny model to corrupt.
copy_model() { cp -r "$data/tiny" "$work/model"; model=$work/model; }
# patch_st PYTHON-CODE: rewrites model.safetensors; `raw` is its bytes, `hl` the header length.
patch_st() {
  copy_model
  "$PYTHON" - "$model/model.safetensors" <<PY
import sys, struct, json
path = sys.argv[1]
raw = open(path, "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + hl])
$1
open(path, "wb").write(raw)
PY
}
patch_config() {
  copy_model
  "$PYTHON" - "$model/config.json" <<PY
import sys, json
c = json.load(open(sys.argv[1]))
$1
json.dump(c, open(sys.argv[1], "w"))
PY
}

case $case in
  missing_model) model=$work/nope; expect="model directory" ;;
  missing_weights_file) copy_model; rm "$model/model.safetensors"; expect="no weights in" ;;
  bad_config_json) copy_model; echo '{"hidden_size": ' >"$model/config.json"; expect="malformed JSON" ;;
  missing_input) input=$work/nope.h5; expect="cannot read input file" ;;
  input_is_directory) input=$work; expect="is not an HDF5 file" ;;
  missing_tokens) make_input x 'f["offsets"] = np.array([0, 3], dtype=np.int64)'; expect="/tokens is missing" ;;
  float_tokens) make_input x 'f["tokens"] = np.ones(3, dtype=np.float32); f["offsets"] = np.array([0, 3])'; expect="must hold integers" ;;
  offsets_not_zero) make_input x 'f["tokens"] = np.ones(3, dtype=np.int32); f["offsets"] = np.array([1, 3])'; expect="must start at 0" ;;
  offsets_decreasing) make_input x 'f["tokens"] = np.ones(4, dtype=np.int32); f["offsets"] = np.array([0, 3, 2, 4])'; expect="must increase" ;;
  offsets_past_end) make_input x 'f["tokens"] = np.ones(3, dtype=np.int32); f["offsets"] = np.array([0, 2, 9])'; expect="past the end" ;;
  token_outside_vocab) make_input x 'f["tokens"] = np.array([1, 512, 3], dtype=np.int32); f["offsets"] = np.array([0, 3])'; expect="outside the vocabulary" ;;
  empty_prompt) make_input x 'f["tokens"] = np.ones(3, dtype=np.int32); f["offsets"] = np.array([0, 3, 3])'; expect="prompt 1 is empty" ;;
  truncated_safetensors) patch_st 'raw = raw[:len(raw) // 2]'; expect="outside the data section" ;;
  header_length_past_end) patch_st 'raw = struct.pack("<Q", 1 << 31) + raw[8:]'; expect="runs past the end of the file" ;;
  bad_header_json) patch_st 'raw = raw[:8] + b"{" * hl + raw[8 + hl:]'; expect="not a valid JSON object" ;;
  tensor_range_outside_file) patch_st '
k = "model.norm.weight"; b, e = header[k]["data_offsets"]; header[k]["data_offsets"] = [b + 10**9, e + 10**9]
text = json.dumps(header).encode(); raw = struct.pack("<Q", len(text)) + text + raw[8 + hl:]'
    expect="outside the data section" ;;
  shape_mismatch) patch_config 'c["intermediate_size"] = 512'; expect="but config.json implies" ;;
  unknown_architecture) patch_config 'c["architectures"] = ["MambaForCausalLM"]'; expect="unknown architecture" ;;
  missing_tensor) patch_config 'c["num_hidden_layers"] = 9'; extra=(--pp 2 --layer-partition 4,5); expect="model.layers.8.input_layernorm.weight is missing" ;;
  world_size_mismatch) ranks=3; expect="world size is 3 ranks" ;;
  more_stages_than_layers) ranks=9; extra=(--pp 9); expect="more stages than" ;;
  bad_partition_sum) extra=(--pp 2 --layer-partition 3,4); expect="sums to 7 layers" ;;
  bad_partition_count) extra=(--pp 2 --layer-partition 2,2,4); expect="has 3 entries" ;;
  tp_not_dividing_heads) ranks=3; extra=(--pp 1 --tp 3); expect="does not divide by --tp 3" ;;
  prompt_exceeds_kv_budget) make_input x 'f["tokens"] = np.ones(300000, dtype=np.int32); f["offsets"] = np.array([0, 300000])'
    extra=(--pp 2 --kv-memory-mb 16 --allow-long-prompts); expect="needs" ;;
  prompt_exceeds_context) make_input x 'f["tokens"] = np.ones(131073, dtype=np.int32); f["offsets"] = np.array([0, 131073])'
    expect="more than the model's max_position_embeddings (131072)" ;;
  output_directory_missing) out=$work/missing/out.h5; expect="does not exist" ;;
  unknown_flag) extra=(--pp 2 --chunksize 5); expect="chunksize" ;;
  unknown_preset) model=synthetic:enormous; expect="unknown model preset" ;;
  zero_chunk_size) extra=(--pp 2 --chunk-size 0); expect="--chunk-size must be at least 1" ;;
  smooth_factor_out_of_range) extra=(--pp 2 --dynamic-chunking --smooth-factor 1.5); expect="smooth factor must lie in [0, 1]" ;;
  smooth_factor_env_not_a_number) export SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=fast; extra=(--pp 2 --dynamic-chunking)
    expect="SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR" ;;
  cost_model_without_dynamic) extra=(--pp 2 --cost-model "$data/cost_tiny_pp2.json"); expect="--cost-model is used by dynamic chunking" ;;
  cost_model_other_partition) extra=(--pp 2 --layer-partition 3,5 --dynamic-chunking --cost-model "$data/cost_tiny_pp2.json")
    expect="profiled for another layer_partition" ;;
  cost_model_missing) extra=(--pp 2 --dynamic-chunking --cost-model "$work/none.json"); expect="cannot read cost model" ;;
  emulate_without_cost_model) extra=(--pp 2 --backend emulate); expect="--backend emulate needs --cost-model" ;;
  analytic_without_emulate) extra=(--pp 2 --cost-model analytic:h20); expect="add --backend emulate" ;;
  unknown_hardware) extra=(--pp 2 --backend emulate --cost-model analytic:tpu9000); expect="no hardware description" ;;
  cuda_without_device) extra=(--pp 2 --backend cuda)
    if [ -x "$bin/tests/gpu/cuda_probe" ] && "$bin/tests/gpu/cuda_probe" >/dev/null; then
      echo "skipped: this machine has a GPU, so --backend cuda is not a bad input here"; exit 77
    fi
    expect="--backend cuda: no usable CUDA device" ;;
  cuda_page_size) extra=(--pp 2 --backend cuda --page-size 16); expect="--page-size a multiple of 64 (given: 16)" ;;
  unknown_transport) extra=(--pp 2 --backend cuda --transport pigeon); expect="--transport pigeon is unknown" ;;
  kv_memory_fraction_out_of_range) extra=(--pp 2 --backend cuda --kv-memory-fraction 1.5)
    expect="--kv-memory-fraction must be in (0, 1]" ;;
  hdf5_library_crash) input=$here/libhdf5_crash_input.h5  # found by tests/fuzz: crashes libhdf5 1.10 in H5Lexists
    expect="the HDF5 library crashed reading this file" ;;
  *) echo "unknown case $case"; exit 1 ;;
esac

set +e
timeout 120 mpirun -n "$ranks" "$bin/pipefill" run --model "$model" --input "$input" --output "$out" "${extra[@]}" \
  >"$work/stdout" 2>"$work/stderr"
status=$?
set -e
errors=$(grep -c '^error:' "$work/stderr" || true)
echo "status $status, stderr:"; cat "$work/stderr"
[ "$status" -ne 124 ] || { echo "FAILED: hung (killed by timeout)"; exit 1; }
[ "$status" -eq 2 ] || { echo "FAILED: exit status $status, expected 2"; exit 1; }
[ "$errors" -eq 1 ] || { echo "FAILED: $errors error: lines, expected exactly 1"; exit 1; }
grep '^error:' "$work/stderr" | grep -qF -- "$expect" || { echo "FAILED: error line lacks \"$expect\""; exit 1; }
[ ! -e "$out" ] && [ ! -e "$out.partial" ] || { echo "FAILED: output file left behind"; exit 1; }
echo "Passed: $case"
