#!/usr/bin/env bash
# One bad-input case: pipefill must print exactly one `error:` line (from rank 0), exit
# with status 2, not hang (timeout = failure), and leave every file as it was: no output
# file (nor its .partial) appears, and every file that existed before (the case's own, the
# input) is byte-identical afterwards.
# usage: bad_input.sh BIN_DIR CASE DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 case=$2 data=$3
temp_dir work
temp_dir logs
out=$work/out.h5
model=$data/tiny
input=$data/prompts.h5
ranks=2
extra=(--pp 2)
launch=()  # a whole mpirun command line instead of the usual one (heterogeneous launches)

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

# wide_latent_model RANK: tiny-mla with kv_lora_rank RANK (its kv tensors reshaped to match,
# zeros: nothing runs far enough to read them).
wide_latent_model() {
  model=$work/model
  "$bin/pipefill" make-model --preset tiny-mla --out "$model" >/dev/null
  "$PYTHON" - "$model" "$1" <<'PY'
import sys, json, struct
import numpy as np
model, rank = sys.argv[1], int(sys.argv[2])
c = json.load(open(f"{model}/config.json"))
heads, nope, v, rope = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"], c["qk_rope_head_dim"]
c["kv_lora_rank"] = rank
json.dump(c, open(f"{model}/config.json", "w"))
path = f"{model}/model.safetensors"
raw = open(path, "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + hl])
tensors = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    b, e = t["data_offsets"]
    a = np.frombuffer(raw[8 + hl + b:8 + hl + e], dtype=np.float32).reshape(t["shape"])
    if name.endswith("kv_a_layernorm.weight"):
        a = np.ones(rank, np.float32)
    elif name.endswith("kv_a_proj_with_mqa.weight"):
        a = np.zeros((rank + rope, a.shape[1]), np.float32)
    elif name.endswith("kv_b_proj.weight"):
        a = np.zeros((heads * (nope + v), rank), np.float32)
    tensors[name] = a
offset, entries, blobs = 0, {}, []
for name, a in tensors.items():
    blob = a.astype(np.float32).tobytes()
    entries[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
    offset += len(blob)
    blobs.append(blob)
text = json.dumps(entries).encode()
open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
}

# patch_cost PYTHON-CODE: a copy of the saved cost profile, edited (`c` is its JSON).
patch_cost() {
  cost=$work/cost.json
  "$PYTHON" - "$data/cost_tiny_pp2.json" "$cost" <<PY
import sys, json
c = json.load(open(sys.argv[1]))
$1
json.dump(c, open(sys.argv[2], "w"))
PY
}
# finished_output PATH [ARGS...]: a complete output of the tiny model written to PATH.
finished_output() {
  local path=$1; shift
  pipefill_mpi 2 run --model "$model" --input "$input" --output "$path" --pp 2 --quiet "$@" >/dev/null
}
# private_input: a copy of the prompts to aim outputs at.
private_input() { cp "$data/prompts.h5" "$work/in.h5"; input=$work/in.h5; }

case $case in
  # Paths: nothing the run writes may be something it reads, and every path is checked
  # before any compute.
  output_is_input) private_input; out=$input; expect="--input ($input) and --output ($input) are the same file" ;;
  output_links_to_input) private_input; ln -s "$input" "$work/link.h5"; out=$work/link.h5; expect="are the same file" ;;
  trace_is_input) private_input; extra=(--pp 2 --trace "$input"); expect="--input ($input) and --trace ($input) are the same file" ;;
  trace_is_output) finished_output "$out"; extra=(--pp 2 --trace "$out"); expect="are the same file" ;;
  trace_is_partial) extra=(--pp 2 --trace "$out.partial"); expect="the output's partial file ($out.partial) and --trace" ;;
  trace_is_token_ids) echo "3 5" >"$work/ids.txt"; extra=(--pp 2 --token-ids "$work/ids.txt" --trace "$work/ids.txt")
    expect="--token-ids ($work/ids.txt) and --trace ($work/ids.txt) are the same file" ;;
  trace_exists) echo "a file of the user's" >"$work/t.json"; extra=(--pp 2 --trace "$work/t.json")
    expect="--trace $work/t.json already exists; add --overwrite" ;;
  trace_is_model_file) copy_model; extra=(--pp 2 --overwrite --trace "$model/config.json")
    expect="--trace $model/config.json is a file of --model $model, which the run reads" ;;
  output_is_model_file) copy_model; out=$model/model.safetensors; extra=(--pp 2 --overwrite)
    expect="--output $model/model.safetensors is a file of --model $model" ;;
  output_is_directory) mkdir "$work/dir"; out=$work/dir; expect="is a directory: give a file name" ;;
  output_ends_in_slash) out=$work/new/; expect="ends in '/'" ;;
  save_kv_is_file) touch "$work/kv"; extra=(--pp 2 --save-kv "$work/kv/sub")
    expect="--save-kv $work/kv/sub: $work/kv exists and is not a directory" ;;
  save_kv_is_output) extra=(--pp 2 --save-kv "$work/out.h5"); expect="and --save-kv ($work/out.h5) are the same file" ;;
  save_kv_holds_input) mkdir "$work/kv"; cp "$data/prompts.h5" "$work/kv/index.json"; input=$work/kv/index.json
    extra=(--pp 2 --save-kv "$work/kv/"); expect="--input $work/kv/index.json lies inside --save-kv $work/kv/" ;;
  save_kv_dangling_link) ln -s "$work/nowhere" "$work/link"; extra=(--pp 2 --save-kv "$work/link/kv")
    expect="is a symbolic link to nothing" ;;
  save_kv_emulate) extra=(--pp 2 --backend emulate --cost-model analytic:h20 --save-kv "$work/kv")
    expect="--save-kv needs real compute: --backend emulate computes no KV cache" ;;
  kv_store_emulate) extra=(--pp 2 --backend emulate --cost-model analytic:h20 --kv-store "$work/store")
    expect="--kv-store needs real compute" ;;
  kv_store_inside_save_kv) mkdir -p "$work/kv/store"; extra=(--pp 2 --save-kv "$work/kv" --kv-store "$work/kv/store")
    expect="--kv-store $work/kv/store lies inside --save-kv $work/kv" ;;
  save_kv_is_checkpoint_dir) mkdir -p "$out.checkpoint"; extra=(--pp 2 --save-kv "$out.checkpoint")
    expect="the output's checkpoint directory" ;;
  kv_store_inside_checkpoint_dir) mkdir -p "$out.checkpoint/store"; extra=(--pp 2 --kv-store "$out.checkpoint/store")
    expect="--kv-store $out.checkpoint/store lies inside the output's checkpoint directory" ;;
  # Each KV directory holds its own writer's files: no export over an earlier one unasked, none
  # among a store's entries or a model's files, no store in an export or inside one entry.
  save_kv_over_export) mkdir -p "$work/kv/prompt-000000"; echo '{}' >"$work/kv/index.json"
    extra=(--pp 2 --save-kv "$work/kv"); expect="--save-kv $work/kv already holds an export (index.json): add --overwrite" ;;
  save_kv_into_store) mkdir -p "$work/store/0123456789abcdef-0123456789abcdef-42"; extra=(--pp 2 --save-kv "$work/store")
    expect="--save-kv $work/store is a KV store (--kv-store)" ;;
  save_kv_into_model) copy_model; extra=(--pp 2 --save-kv "$model"); expect="--save-kv $model holds config.json" ;;
  kv_store_in_export) mkdir -p "$work/kv/prompt-000000"; echo '{}' >"$work/kv/index.json"
    extra=(--pp 2 --kv-store "$work/kv"); expect="--kv-store $work/kv holds a --save-kv export" ;;
  kv_store_is_entry) mkdir -p "$work/entry"; : >"$work/entry/tokens.i32"; extra=(--pp 2 --kv-store "$work/entry")
    expect="--kv-store $work/entry is one entry of a KV store: give the store's directory" ;;
  output_empty) out=""; expect="--output is empty" ;;
  trace_directory_missing) extra=(--pp 2 --trace "$work/missing/t.json"); expect="does not exist" ;;
  trace_is_directory) extra=(--pp 2 --trace "$work"); expect="--trace $work is a directory" ;;
  # /proc takes no new file, whatever access() tells root: found before the run, not after
  # the output has replaced the one there.
  trace_takes_no_files) finished_output "$out"; extra=(--pp 2 --overwrite --trace /proc/pipefill_trace.json)
    expect="--trace /proc/pipefill_trace.json: cannot create a file in directory /proc" ;;
  output_held_by_another_run)  # another run holds the partial: it must not be touched
    ( exec 9>"$out.partial"; flock -n 9 && echo "held" >&9; exec sleep 100 ) &
    on_exit "kill $!"
    wait_until 10 "the holder's lock on $out.partial" grep -qs held "$out.partial"
    expect="another pipefill run is writing $out" ;;
  output_exists) finished_output "$out"; expect="--output $out already exists (an earlier run's output?); add --overwrite" ;;
  resume_and_overwrite) finished_output "$out"; extra=(--pp 2 --resume --overwrite); expect="give one of them" ;;
  save_kv_held_by_another_run)  # another run holds the export directory: it names that run
    mkdir "$work/kv"
    ( exec 9>"$work/kv/.pipefill.lock"; flock -n 9 && echo "pid 4242 on node9, --output other.h5" >&9; exec sleep 100 ) &
    on_exit "kill $!"
    wait_until 10 "the holder's lock on $work/kv" grep -qs node9 "$work/kv/.pipefill.lock"
    extra=(--pp 2 --save-kv "$work/kv")
    expect="--save-kv $work/kv is being written by another pipefill run (pid 4242 on node9, --output other.h5)" ;;
  input_is_fifo) mkfifo "$work/in.fifo"; input=$work/in.fifo; expect="is not a regular file" ;;
  config_is_fifo) copy_model; rm "$model/config.json"; mkfifo "$model/config.json"; expect="is not a regular file" ;;
  weights_are_fifo) copy_model; rm "$model/model.safetensors"; mkfifo "$model/model.safetensors"; expect="is not a regular file" ;;
  # --resume trusts nothing it has not verified.
  resume_complete_other_input) finished_output "$out"
    make_input other 'f["tokens"] = np.arange(40, dtype=np.int32); f["offsets"] = np.array([0, 15, 40])'
    extra=(--pp 2 --resume); expect="was written with another input" ;;
  # A router's weights choose the experts: no NaN or Inf may reach its top-k.
  router_bias_nan|router_bias_all_inf) "$bin/pipefill" make-model --preset tiny-mla --out "$work/model" >/dev/null
    model=$work/model
    value=$([ "$case" = router_bias_nan ] && echo "[3] = float('nan')" || echo "[:] = -float('inf')")
    "$PYTHON" - "$model/model.safetensors" <<PY
import sys, struct, json, numpy as np
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
hl = struct.unpack("<Q", raw[:8])[0]
begin, end = json.loads(raw[8:8 + hl])["model.layers.2.mlp.gate.e_score_correction_bias"]["data_offsets"]
bias = np.frombuffer(bytes(raw[8 + hl + begin:8 + hl + end]), np.float32).copy()
bias$value
raw[8 + hl + begin:8 + hl + end] = bias.tobytes()
open(path, "wb").write(raw)
PY
    expect="model.layers.2.mlp.gate.e_score_correction_bias holds $([ "$case" = router_bias_nan ] && echo 1 || echo 8) NaN/Inf value(s): the router" ;;
  resume_complete_rebuilt_weights) copy_model; finished_output "$out"
    "$bin/pipefill" make-model --preset tiny --seed 5 --out "$model" --overwrite >/dev/null  # rebuilt in place
    extra=(--pp 2 --resume); expect="was written with another weights_fingerprint" ;;
  resume_complete_other_chunking) finished_output "$out"; extra=(--pp 2 --resume --chunk-size 32); expect="another chunk_size" ;;
  resume_over_garbage) echo "not an output" >"$out"; extra=(--pp 2 --resume); expect="is not an HDF5 file" ;;
  resume_over_foreign_hdf5) cp "$data/prompts.h5" "$out"; extra=(--pp 2 --resume); expect="has no resume_identity" ;;
  resume_partial_wrong_shape) finished_output "$work/done.h5"; mv "$work/done.h5" "$out.partial"
    "$PYTHON" -c "import h5py; f=h5py.File('$out.partial','r+'); del f['logits']; f['logits']=[[1.0]]"
    extra=(--pp 2 --resume); expect="/logits does not have this run's type and shape" ;;
  resume_partial_truncated) finished_output "$work/done.h5"; head -c 3000 "$work/done.h5" >"$out.partial"; rm "$work/done.h5"
    extra=(--pp 2 --resume); expect="cannot resume" ;;
  resume_partial_garbage) head -c 5000 /dev/urandom >"$out.partial"; extra=(--pp 2 --resume); expect="is not an HDF5 file" ;;
  # Ranks must see one model and one command line.
  heterogeneous_arguments) launch=(-n 1 "$bin/pipefill" run --model "$model" --input "$input" --output "$out" --pp 2 :
                                   -n 1 "$bin/pipefill" run --model "$model" --input "$input" --output "$out" --pp 2 --chunk-size 7)
    expect="rank 1 (host $(hostname)) does not see the same command line as rank 0" ;;
  stale_weights_on_a_node) mkdir "$work/a" "$work/b"; cp -r "$data/tiny" "$work/a/m"
    "$bin/pipefill" make-model --preset tiny --seed 6 --out "$work/b/m" >/dev/null  # same path, other bytes
    launch=(-n 1 --wdir "$work/a" "$bin/pipefill" run --model m --input "$input" --output "$out" --pp 2 :
            -n 1 --wdir "$work/b" "$bin/pipefill" run --model m --input "$input" --output "$out" --pp 2)
    expect="does not see the same weights as rank 0 for model.embed_tokens.weight" ;;
  stale_layer_gained_from_a_profile)  # the layers a profile's partition gives a rank are checked too
    mkdir "$work/a" "$work/b"; cp -r "$data/tiny" "$work/a/m"; cp -r "$data/tiny" "$work/b/m"
    "$PYTHON" - "$work/b/m/model.safetensors" "$data/cost_tiny_pp2.json" "$work/cost.json" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
hl = struct.unpack("<Q", raw[:8])[0]
begin, end = json.loads(raw[8:8 + hl])["model.layers.2.input_layernorm.weight"]["data_offsets"]
for at in range(8 + hl + begin, 8 + hl + end):  # a stale layer 2 on rank 1's node
    raw[at] ^= 0x5A
open(sys.argv[1], "wb").write(raw)
profile = json.load(open(sys.argv[2]))
profile["identity"]["layer_partition"] = "1,7"  # rank 1 gains layers 1..3 over the default 4,4
json.dump(profile, open(sys.argv[3], "w"))
PY
    common=(--input "$input" --output "$out" --pp 2 --dynamic-chunking --cost-model "$work/cost.json")
    launch=(-n 1 --wdir "$work/a" "$bin/pipefill" run --model m "${common[@]}" :
            -n 1 --wdir "$work/b" "$bin/pipefill" run --model m "${common[@]}")
    expect="does not see the same weights as rank 0 for model.layers.2.input_layernorm.weight" ;;
  stale_config_on_a_node) mkdir "$work/a" "$work/b"; cp -r "$data/tiny" "$work/a/m"
    "$bin/pipefill" make-model --preset tiny-qwen2 --out "$work/b/m" >/dev/null
    launch=(-n 1 --wdir "$work/a" "$bin/pipefill" run --model m --input "$input" --output "$out" --pp 2 :
            -n 1 --wdir "$work/b" "$bin/pipefill" run --model m --input "$input" --output "$out" --pp 2)
    expect="does not see the same model config (m) as rank 0" ;;
  # config.json values the program cannot honour (tests/mpi/bad_config.cmake): the error
  # names the field. The tiny model is Llama with llama3 rope_scaling, in the legacy layout.
  rope_layouts_disagree) patch_config 'c["rope_theta"] = 10000.0; c["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}'
    expect='field "rope_theta" (10000.0) and field "rope_parameters.rope_theta" (500000.0) disagree' ;;
  rope_scalings_disagree) patch_config '
c["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64}'
    expect='field "rope_scaling" ({"factor":8.0' ;;
  rope_theta_zero) patch_config 'c["rope_theta"] = 0'; expect='field "rope_theta" must be a finite number > 0 (got 0)' ;;
  rope_theta_negative) patch_config 'c["rope_theta"] = -10000.0'; expect='field "rope_theta"' ;;
  rms_norm_eps_negative) patch_config 'c["rms_norm_eps"] = -1e-5'; expect='field "rms_norm_eps"' ;;
  llama3_factor_zero) patch_config 'c["rope_scaling"]["factor"] = 0'; expect='field "rope_scaling.factor"' ;;
  hidden_size_2pow32_plus) patch_config 'c["hidden_size"] = 2**32 + 128'; expect='field "hidden_size"' ;;
  layers_2pow32_plus) patch_config 'c["num_hidden_layers"] = 2**32 + 8'; expect='field "num_hidden_layers"' ;;
  hidden_fractional) patch_config 'c["hidden_size"] = 128.5'; expect='field "hidden_size" must be an integer' ;;
  max_position_negative) patch_config 'c["max_position_embeddings"] = -5'; expect='field "max_position_embeddings"' ;;
  rope_scaling_string) patch_config 'c["rope_scaling"] = "llama3"'; expect='field "rope_scaling" must be an object' ;;
  optional_field_wrong_type) patch_config 'c["tie_word_embeddings"] = "yes"'; expect='field "tie_word_embeddings"' ;;
  unknown_rope_type_in_rope_parameters) patch_config '
del c["rope_theta"], c["rope_scaling"]
c["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0}'
    expect='field "rope_parameters.rope_type"' ;;
  missing_model) model=$work/nope; expect="model directory" ;;
  # OUTPUT.checkpoint is removed whole once the output completes: only a run's checkpoints there.
  checkpoint_dir_is_file) echo notes >"$out.checkpoint"; expect="exists and is not a checkpoint directory" ;;
  checkpoint_dir_foreign) mkdir "$out.checkpoint"; echo notes >"$out.checkpoint/notes.txt"
    expect="holds notes.txt, which no run's checkpoint does" ;;
  input_inside_checkpoint_dir) mkdir "$out.checkpoint"; cp "$input" "$out.checkpoint/in.h5"; input=$out.checkpoint/in.h5
    expect="lies inside the output's checkpoint directory" ;;
  model_is_file) copy_model; model=$work/model/config.json; expect="is a file, not a model directory" ;;
  # profile writes its --out before minutes of profiling: never onto the model's own files.
  profile_out_is_model_file) copy_model
    launch=(-n 1 "$bin/pipefill" profile --model "$model" --chunk-size 64 --max-prefix 128 --out "$model/config.json")
    expect="--out $model/config.json is a file of --model" ;;
  missing_weights_file) copy_model; rm "$model/model.safetensors"; expect="no weights in" ;;
  bad_config_json) copy_model; echo '{"hidden_size": ' >"$model/config.json"; expect="malformed JSON" ;;
  missing_input) input=$work/nope.h5; expect="cannot read input file" ;;
  input_is_directory) input=$work; expect="is a directory" ;;
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
  tp_not_dividing_heads_emulate) ranks=3; extra=(--pp 1 --tp 3 --backend emulate --cost-model analytic:h20)
    expect="does not divide by --tp 3" ;;  # the emulator models only layouts that run
  prompt_exceeds_kv_budget) make_input x 'f["tokens"] = np.ones(300000, dtype=np.int32); f["offsets"] = np.array([0, 300000])'
    extra=(--pp 2 --kv-memory-mb 16 --allow-long-prompts); expect="needs" ;;
  prompt_exceeds_context) make_input x 'f["tokens"] = np.ones(131073, dtype=np.int32); f["offsets"] = np.array([0, 131073])'
    expect="more than the model's max_position_embeddings (131072)" ;;
  output_directory_missing) out=$work/missing/out.h5; expect="does not exist" ;;
  unknown_flag) extra=(--pp 2 --chunksize 5); expect="chunksize" ;;
  unknown_preset) model=synthetic:enormous; expect="unknown model preset" ;;
  zero_chunk_size) extra=(--pp 2 --chunk-size 0); expect="--chunk-size must be at least 1" ;;
  cp_world_size) extra=(--pp 1 --cp 3); expect="world size is 2 ranks but --pp 1 x --cp 3 x --tp 1 needs 3" ;;
  cp_world_size_wraps) extra=(--pp 3 --cp 1431655766); expect="needs 4294967298" ;;  # 3 x cp = 2^32 + 2: once "2"
  kv_memory_mb_huge) extra=(--pp 2 --kv-memory-mb 8796093022208); expect="--kv-memory-mb 8796093022208: at most 2^30 MiB" ;;
  cp_cuda_mla_wide) wide_latent_model 640; extra=(--cp 2 --backend cuda)
    expect="--cp on --backend cuda attends latent rows 656 wide with 640 value columns" ;;
  cp_emulate_profile) extra=(--cp 2 --backend emulate --cost-model "$data/cost_tiny_pp2.json" --pp 1 --dynamic-chunking)
    expect="was measured without context parallelism" ;;
  cp_profile_without_cp) ranks=4; extra=(--pp 2 --cp 2 --dynamic-chunking --cost-model "$data/cost_tiny_pp2.json")
    expect="was profiled for another cp (none, this run: 2); with --cp, leave out --cost-model" ;;
  cp_attention_without_cp) extra=(--pp 2 --cp-attention pass-q); expect="--cp-attention chooses how CP ranks attend" ;;
  cp_attention_unknown) extra=(--cp 2 --cp-attention ring); expect="--cp-attention ring is unknown" ;;
  smooth_factor_out_of_range) extra=(--pp 2 --dynamic-chunking --smooth-factor 1.5); expect="smooth factor must lie in [0, 1]" ;;
  smooth_factor_env_not_a_number) export SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR=fast; extra=(--pp 2 --dynamic-chunking)
    expect="SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR" ;;
  bf16_gemm_env_unknown) export PIPEFILL_BF16_GEMM=fast; extra=(--pp 2 --dtype bf16)
    expect="PIPEFILL_BF16_GEMM=fast: expected dot or widen" ;;
  f32_gemm_env_unknown) export PIPEFILL_F32_GEMM=fast; expect="PIPEFILL_F32_GEMM=fast: expected own or blas" ;;
  cost_model_without_dynamic) extra=(--pp 2 --cost-model "$data/cost_tiny_pp2.json"); expect="--cost-model is used by dynamic chunking" ;;
  cost_model_other_partition) extra=(--pp 2 --layer-partition 3,5 --dynamic-chunking --cost-model "$data/cost_tiny_pp2.json")
    expect="profiled for another layer_partition" ;;
  cost_model_negative_coefficient) patch_cost 'c["stages"][1]["prefix"]["a"] = -3e-9'
    extra=(--pp 2 --chunk-policy pipefill --cost-model "$cost"); expect="a cost model needs a > 0" ;;
  cost_model_stage_count) patch_cost 'c["stages"] = c["stages"][:1]'
    extra=(--pp 2 --dynamic-chunking --cost-model "$cost"); expect="stage" ;;
  flag_value_not_a_number) extra=(--pp 2 --chunk-size abc); expect='--chunk-size: "abc" is not a valid integer' ;;
  cost_model_missing) extra=(--pp 2 --dynamic-chunking --cost-model "$work/none.json"); expect="cannot read --cost-model" ;;
  # A forward that cannot fit the node's memory (dynamic chunking profiles 1.25 C0 whatever the
  # prompts): refused before any weights, not grown until the OOM killer ends it.
  forward_exceeds_memory) extra=(--pp 2 --chunk-size 30000000 --dynamic-chunking)
    expect="for their largest forwards (37500000 tokens a rank" ;;
  profile_forward_exceeds_memory) launch=(-n 1 "$bin/pipefill" profile --model "$model" --out "$work/p.json" --chunk-size 30000000)
    expect="for their largest forwards (37500000 tokens a rank" ;;
  make_prompts_too_many) launch=(-n 1 "$bin/pipefill" make-prompts --out "$work/p.h5" --num 2147483647 --min-len 1 --max-len 1 --vocab 9)
    expect="--num x (--max-len + 2) may be at most 4294967296" ;;
  # A study's output replaces only its own kind of file (io/replaceable_file.hpp), and never
  # a file a run is writing (its .partial's lock, io/output_lock.hpp).
  make_prompts_over_run_output) finished_output "$work/r.h5"
    launch=(-n 1 "$bin/pipefill" make-prompts --out "$work/r.h5" --num 2 --min-len 3 --max-len 4 --vocab 9)
    expect="$work/r.h5 is a pipefill run's output: make-prompts does not replace it" ;;
  make_prompts_over_model_file) copy_model
    launch=(-n 1 "$bin/pipefill" make-prompts --out "$model/config.json" --num 2 --min-len 3 --max-len 4 --vocab 9)
    expect="$model/config.json exists and is not an HDF5 file" ;;
  make_prompts_over_stopped_run) finished_output "$work/r.h5"; mv "$work/r.h5" "$work/s.h5.partial"
    launch=(-n 1 "$bin/pipefill" make-prompts --out "$work/s.h5" --num 2 --min-len 3 --max-len 4 --vocab 9)
    expect="$work/s.h5.partial is a pipefill run's partial output (a running run's, or a stopped one's that --resume continues)" ;;
  make_prompts_over_corpus) make_input corpus 'f["tokens"] = np.arange(6, dtype="<i4"); f["offsets"] = np.array([0, 6], dtype="<i8"); f.attrs["created_by"] = "scripts/tokenize.py (pipefill)"'
    launch=(-n 1 "$bin/pipefill" make-prompts --out "$input" --num 2 --min-len 3 --max-len 4 --vocab 9)
    expect="a prompt file another program wrote (a tokenized corpus)" ;;
  make_prompts_while_a_run_writes) touch "$work/w.h5.partial"
    setsid flock "$work/w.h5.partial" sleep 60 >/dev/null 2>&1 &  # (its own group: both ended below)
    on_exit "kill -- -$! 2>/dev/null"
    for _ in $(seq 50); do flock -n "$work/w.h5.partial" true || break; sleep 0.1; done
    launch=(-n 1 "$bin/pipefill" make-prompts --out "$work/w.h5" --num 2 --min-len 3 --max-len 4 --vocab 9)
    expect="another pipefill run is writing $work/w.h5" ;;
  simulate_timeline_over_run_output) finished_output "$work/r.h5"
    launch=(-n 1 "$bin/pipefill" simulate --model-config "$model/config.json" --hardware h100 --length 500 --timeline "$work/r.h5")
    expect="$work/r.h5 is a pipefill run's output: simulate --timeline does not replace it" ;;
  advise_plot_over_model_file) copy_model
    launch=(-n 1 "$bin/pipefill" advise --model-config "$model/config.json" --hardware h100 --length 500 --plot "$model/model.safetensors")
    expect="$model/model.safetensors exists and is not a PNG image" ;;
  # make-model never replaces a model without --overwrite, nor ever a directory of files it
  # does not write (a real checkpoint's tokenizer).
  make_model_over_model) copy_model
    launch=(-n 1 "$bin/pipefill" make-model --preset tiny-qwen2 --out "$model")
    expect="--out $model already holds a model" ;;
  make_model_over_checkpoint) copy_model; echo '{}' >"$model/tokenizer.json"
    launch=(-n 1 "$bin/pipefill" make-model --preset tiny --out "$model" --overwrite)
    expect="holds tokenizer.json, which make-model does not write" ;;
  # A directory where a cost model or hardware file is read: a user's error, not an I/O fault.
  cost_model_directory) mkdir "$work/d"
    launch=(-n 1 "$bin/pipefill" plan --length 1000 --dynamic-chunking --cost-model "$work/d")
    expect="--cost-model $work/d is a directory, not a file" ;;
  # plan reads a profile at its own pp, as simulate and run do.
  plan_profile_of_other_pp) pipefill_mpi 2 profile --model "$model" --pp 2 --out "$work/p2.json" --chunk-size 64 >/dev/null
    launch=(-n 1 "$bin/pipefill" plan --length 1000 --dynamic-chunking --cost-model "$work/p2.json" --pp 3)
    expect="$work/p2.json was profiled with --pp 2: plan its chunks with --pp 2 (given 3)" ;;
  hardware_directory) mkdir "$work/d"; extra=(--pp 2 --backend emulate --cost-model "analytic:$work/d")
    expect="hardware description $work/d is a directory, not a file" ;;
  emulate_without_cost_model) extra=(--pp 2 --backend emulate); expect="--backend emulate needs --cost-model" ;;
  hidden_states_unknown) extra=(--pp 2 --hidden-states foo); expect='--hidden-states must be none, last or mean (got "foo")' ;;
  hidden_states_emulate) extra=(--pp 2 --backend emulate --cost-model analytic:h20 --hidden-states last)
    expect="--hidden-states needs real compute: --backend emulate computes no hidden states" ;;
  logprobs_emulate) extra=(--pp 2 --backend emulate --cost-model analytic:h20 --logprobs)
    expect="--logprobs needs real compute: --backend emulate computes no log-probs" ;;
  threads_too_many) extra=(--pp 2 --threads 100000); expect="--threads 100000 is more than 1024 a rank" ;;
  threads_negative) extra=(--pp 2 --threads -1); expect="--threads must be 0 (automatic) or more" ;;
  kv_dtype_without_save_kv) extra=(--pp 2 --kv-dtype bf16); expect="--kv-dtype sets the dtype of --save-kv's files" ;;
  kv_dtype_unknown) extra=(--pp 2 --save-kv "$work/kv" --kv-dtype f16); expect='--kv-dtype must be f32 or bf16 (got "f16")' ;;
  dtype_unknown) extra=(--pp 2 --dtype fp16); expect='--dtype must be f32 or bf16 (got "fp16")' ;;
  dtype_bf16_emulate) extra=(--pp 2 --backend emulate --cost-model analytic:h20 --dtype bf16)
    expect="--dtype bf16 sets the cpu backend's precision: --backend emulate computes nothing" ;;
  dtype_bf16_moe) model=synthetic:tiny-moe; extra=(--pp 2 --dtype bf16)
    expect="--dtype bf16 on the cpu backend covers dense models for now; this one has experts" ;;
  top_k_negative) extra=(--pp 2 --top-k -3); expect="--top-k must not be negative (got -3; 0: none)" ;;
  top_k_over_vocab) extra=(--pp 2 --top-k 513); expect="--top-k 513 is more than the model's vocabulary (512 tokens)" ;;
  # --token-ids FILE: each entry a token of the model, once; a file that says nothing is refused.
  token_ids_missing) extra=(--pp 2 --token-ids "$work/none.txt"); expect="error: cannot read --token-ids $work/none.txt (no such file)" ;;
  token_ids_not_a_number) printf '3 5\n7 A\n' >"$work/ids.txt"; extra=(--pp 2 --token-ids "$work/ids.txt")
    expect="--token-ids $work/ids.txt line 2: 'A' is not a token id" ;;
  token_ids_repeated) printf '3, 5,\n9, 5\n' >"$work/ids.txt"; extra=(--pp 2 --token-ids "$work/ids.txt")
    expect="line 2: token 5 appears twice (first on line 1)" ;;
  token_ids_empty) printf '# nothing\n[]\n' >"$work/ids.txt"; extra=(--pp 2 --token-ids "$work/ids.txt")
    expect="--token-ids $work/ids.txt: holds no token ids" ;;
  token_ids_over_vocab) echo "3 512" >"$work/ids.txt"; extra=(--pp 2 --token-ids "$work/ids.txt")
    expect="token 512 (entry 1) is not in the model's vocabulary of 512 tokens" ;;
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
  *) fail "unknown case $case" ;;
esac

# Every file there is before the run (the case's own files, the input), with its checksum.
snapshot() { { find "$work" -type f -print0 | sort -z | xargs -0 -r md5sum; [ ! -f "$input" ] || md5sum "$input"; } 2>/dev/null; }
before=$(snapshot)
[ ${#launch[@]} -gt 0 ] || launch=(-n "$ranks" "$bin/pipefill" run --model "$model" --input "$input" --output "$out" "${extra[@]}")
status_of timeout 120 mpirun "${launch[@]}" >"$logs/stdout" 2>"$logs/stderr"
errors=$(grep -c '^error:' "$logs/stderr" || true)
echo "status $status, stderr:"; cat "$logs/stderr"
expect_status 2 "pipefill"
[ "$errors" -eq 1 ] || fail "$errors error: lines, expected exactly 1"
grep '^error:' "$logs/stderr" | grep -qF -- "$expect" || fail "error line lacks \"$expect\""
after=$(snapshot)
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after"); fail "files changed (above)"; }
echo "Passed: $case"
