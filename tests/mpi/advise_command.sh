#!/usr/bin/env bash
# `pipefill advise` end to end (and `simulate`'s bad values): the table and its job line, --json rows a script can rank,
# a batch from an HDF5 input, the picture, and every bad input ending in one `error:` line
# with exit status 2 and no file left behind.
# usage: advise_command.sh BUILD_DIR REPO_DIR
set -euo pipefail
bin=$1
repo=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
deepseek=(--model-config "$repo/configs/deepseek-v3.1.json" --hardware h20 --fp8 keep --wire-bytes 2)

# The seeds' setup: DeepSeek-V3.1 at 128K on 4 nodes of 8 H20.
"$bin/pipefill" advise "${deepseek[@]}" --nodes 4 --length 131072 >"$work/table.txt"
cat "$work/table.txt"
# The layouts the seeds measured keep their order: PP4 x TP8 (tuned to their DCK 12K) above
# TP32. (Context parallelism, which they did not run, may rank above both.)
rank_of() { awk -v l="$1" '$1 ~ /^[0-9]+$/ && index($0, " " l " ") { print $1; exit }' "$work/table.txt"; }
pp4=$(rank_of "pp 4 x tp 8") tp32=$(rank_of "pp 1 x tp 32")
[ -n "$pp4" ] && [ -n "$tp32" ] && [ "$pp4" -lt "$tp32" ] || fail "PP4 x TP8 (rank $pp4) is not above TP32 (rank $tp32)"
grep -qE '^ +[0-9]+ +32 pp 4 x tp 8 +15x3,16 +dynamic C0 12288 ' "$work/table.txt" || fail "PP4 x TP8 is not tuned to DCK 12K"
# The job lines are the best layout's.
read -r pp cp tp < <(sed -nE 's/^best: pp ([0-9]+)( x cp ([0-9]+))? x tp ([0-9]+) on 4 nodes.*/\1 \3 \4/p' "$work/table.txt")
[ -n "${tp:-}" ] || fail "no best: line"
grep -q "PP=$pp CP=${cp:-1} TP=$tp CHUNK_SIZE=" "$work/table.txt" || fail "no sbatch line for the best layout"
grep -q 'sbatch -N 4 --ntasks-per-node=8 --gpus-per-node=8 jobs/slurm/prefill.sbatch' "$work/table.txt" || fail "sbatch shape"
grep -q "srun -N 4 --ntasks-per-node=8 pipefill run .* --pp $pp --cp ${cp:-1} --tp $tp --chunk-size" "$work/table.txt" ||
  fail "srun line"
grep -q '^note: modelled as an engine that keeps FP8 weights and sends bf16' "$work/table.txt" || fail "no note on the engine"

# On cpu ranks from a profile-free file: the cpu job script, which asks for tasks (-n).
"$bin/pipefill" advise --model-config synthetic:small --hardware cpu --nodes 1 --length 8192 >"$work/cpu.txt"
grep -q '^  MODEL=synthetic:small ' "$work/cpu.txt" && grep -q '^    sbatch -n 2 jobs/slurm/prefill_cpu.sbatch' "$work/cpu.txt" ||
  fail "cpu sbatch line"
grep -q -- '--backend cpu' "$work/cpu.txt" || fail "cpu srun line"
# A cpu rank's KV pool is --kv-memory-mb (8192 by default): a layout that needs more carries the
# budget in its job line, at least what run's own KV rule asks for (run, given too little,
# names it).
"$bin/pipefill" advise --model-config synthetic:small --hardware cpu --nodes 1 --length 400000 >"$work/cpu_long.txt"
budget=$(grep -oE -- '--kv-memory-mb [0-9]+' "$work/cpu_long.txt" | head -1 | cut -d' ' -f2 || true)
[ -n "$budget" ] || fail "a 400K-token cpu layout's job line gives no --kv-memory-mb"
IFS=, read -r pp cp tp < <(sed -nE 's/^best: pp ([0-9]+)( x cp ([0-9]+))? x tp ([0-9]+) on 1 node.*/\1,\3,\4/p' "$work/cpu_long.txt")
"$bin/pipefill" make-prompts --out "$work/long.h5" --num 1 --min-len 400000 --max-len 400000 --vocab 512 >/dev/null
source "$repo/tests/mpi/mpi_env.sh"
chunk=$(sed -nE 's/.*CHUNK_SIZE=([0-9]+).*/\1/p' "$work/cpu_long.txt" | head -1)
set +e
timeout 120 mpirun -n $((pp * ${cp:-1} * tp)) "$bin/pipefill" run --model synthetic:small --input "$work/long.h5" \
  --output "$work/long_out.h5" --pp "$pp" --cp "${cp:-1}" --tp "$tp" --chunk-size "$chunk" --allow-long-prompts \
  --kv-memory-mb 64 2>"$work/kv.err" >/dev/null
set -e
needed=$(grep -oE 'needs [0-9]+ MiB of KV cache' "$work/kv.err" | head -1 | cut -d' ' -f2 || true)
[ -n "$needed" ] && [ "$budget" -ge "$needed" ] || fail "advise's --kv-memory-mb $budget is below run's ${needed:-?} MiB"
echo "ok: the cpu job line's --kv-memory-mb $budget covers run's $needed MiB"

# --json: one layout a line, ranked by time, every one on 1, 2 or 4 nodes of 8.
"$bin/pipefill" advise "${deepseek[@]}" --nodes 4 --length 131072 --json >"$work/rows.jsonl"
/usr/bin/python3 - "$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) > 5, len(rows)
assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
assert all(a["time_s"] <= b["time_s"] for a, b in zip(rows, rows[1:]))
for r in rows:
    assert r["pp"] * r["cp"] * r["tp"] == r["gpus"] == 8 * r["nodes"], r
    assert r["nodes"] in (1, 2, 4), r
    assert r["memory_gib"]["total"] < 96, r
    assert r["chunk_policy"] in ("fixed", "sglang"), r
by_layout = {(r["pp"], r["cp"], r["tp"]): r for r in rows}
assert by_layout[(4, 1, 8)]["rank"] < by_layout[(1, 1, 32)]["rank"], "PP4 x TP8 must rank above TP32"
print(f"{len(rows)} rows, ranked")
PY

# A batch from an HDF5 input: its prompts' lengths.
"$bin/pipefill" make-prompts --out "$work/batch.h5" --num 3 --min-len 5000 --max-len 9000 --vocab 1000 --seed 1 >/dev/null
"$bin/pipefill" advise --model-config synthetic:llama3-8b --hardware h100 --nodes 2 --input "$work/batch.h5" >"$work/batch.txt"
grep -q ', 3 prompts, ' "$work/batch.txt" || fail "the input's 3 prompts"
grep -q 'INPUT=.*batch.h5' "$work/batch.txt" || fail "the job line names the input"

# The picture, where this machine's Python can draw; else advise says what it needs.
if "${PIPEFILL_PYTHON:-python3}" -c 'import matplotlib' 2>/dev/null ||
   [ -x "$HOME/.cache/pipefill/venv/bin/python" ] && "$HOME/.cache/pipefill/venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  "$bin/pipefill" advise "${deepseek[@]}" --nodes 4 --length 131072 --plot "$work/advice.png" --json >"$work/plotted.jsonl"
  /usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/plotted.jsonl" ||
    fail "--json --plot: stdout is not JSON lines"
  [ "$(head -c 4 "$work/advice.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "--plot did not write a PNG"
  [ ! -e "$work/advice.png.partial.png" ] || fail "a partial picture was left"
fi
set +e
PIPEFILL_PYTHON=/bin/false "$bin/pipefill" advise "${deepseek[@]}" --nodes 1 --length 4096 --plot "$work/none.png" >"$work/out" 2>"$work/err"
status=$?
set -e
[ $status -eq 2 ] && grep -q '^error: --plot: .* failed (it needs matplotlib' "$work/err" || fail "--plot without Python: status $status"
grep -q '^best:' "$work/out" || fail "the table comes before a failed plot"

# Bad inputs: exit 2, one error line, nothing written.
expect_error() {  # expect_error WHAT-THE-ERROR-SAYS advise-args...
  expect_error_of advise "$@"
}
expect_error_of() {  # expect_error_of COMMAND WHAT-THE-ERROR-SAYS args...
  local command=$1 says=$2
  shift 2
  set +e
  "$bin/pipefill" "$command" "$@" >"$work/out" 2>"$work/err"
  local status=$?
  set -e
  [ $status -eq 2 ] || fail "$command $* exited $status"
  [ "$(grep -c '^error: ' "$work/err")" = 1 ] || fail "$command $*: not one error line: $(cat "$work/err")"
  grep -q -- "$says" "$work/err" || fail "$command $*: $(cat "$work/err") does not say \"$says\""
}
expect_error "one of the two" "${deepseek[@]}" --nodes 4
expect_error "one of the two" "${deepseek[@]}" --nodes 4 --length 100 --input "$work/batch.h5"
expect_error "not an FP8 checkpoint" --model-config synthetic:small --hardware h100 --fp8 keep --length 100
expect_error "must be at least 1" "${deepseek[@]}" --nodes 0 --length 100
expect_error "must be at least 1" "${deepseek[@]}" --gpus-per-node 0 --length 100
expect_error "no hardware description" --model-config synthetic:small --hardware h900 --length 100
expect_error "fits this model and batch" --model-config "$repo/configs/deepseek-v3.1.json" --hardware h20 --nodes 1 --length 1048576
expect_error "--plot" "${deepseek[@]}" --nodes 1 --length 100 --plot "$work/no/such/dir/a.png"
expect_error "--fp8 must be" --model-config "$repo/configs/deepseek-v3.1.json" --hardware h20 --length 100 --fp8 maybe
expect_error '--fp8 given twice ("keep" and "dequantize")' "${deepseek[@]}" --length 100 --fp8 dequantize
expect_error "--nodes must be 1-4096" "${deepseek[@]}" --nodes 100000 --length 100
expect_error "needs a multiple of 64" "${deepseek[@]}" --length 100 --page-size 100
cat >"$work/head96.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 768, "num_hidden_layers": 4, "num_attention_heads": 8,
 "num_key_value_heads": 8, "head_dim": 96, "intermediate_size": 2048, "vocab_size": 1000}
JSON
expect_error "head_dim 32, 48, 64 or 128" --model-config "$work/head96.json" --hardware h100 --length 100
expect_error "cuts the batch into" "${deepseek[@]}" --length 1000000 --chunk-size 1
# Chunks of one token are a layout without CP (they were "no layout is possible").
"$bin/pipefill" advise --model-config synthetic:small --hardware h100 --length 100 --chunk-size 1 >"$work/one.txt" ||
  fail "advise --chunk-size 1 failed"
grep -q '^best: pp [0-9]* x tp [0-9]*' "$work/one.txt" || fail "no layout for chunks of 1: $(cat "$work/one.txt")"
"$bin/pipefill" advise --model-config synthetic:small --hardware h100 --length 1 --gpus-per-node 1 >/dev/null ||
  fail "advise of a 1-token prompt on one device failed"
expect_error "--chunk-size must be at least 1" "${deepseek[@]}" --length 100 --chunk-size 0
expect_error "--plot /proc/advice.png: cannot create a file in directory /proc" "${deepseek[@]}" --length 100 \
  --plot /proc/advice.png
cat >"$work/no_model.json" <<'JSON'
{"identity": {"backend": "cpu", "pp": 1, "tp": 1}, "initial_chunk": 1024,
 "stages": [{"stage": 0, "sglang": {"form": "sglang", "ok": true, "a": 1e-9, "b": 1e-6, "c": 1e-3, "gamma": 0},
             "prefix": {"form": "prefix", "ok": true, "a": 1e-9, "b": 1e-6, "c": 1e-3, "gamma": 0}}]}
JSON
expect_error "does not say which model it measured" --cost-model "$work/no_model.json" --hardware cpu --length 1000
# simulate: a value given is checked even where the member's untouched value means "not given",
# and it takes the TP sizes run and advise take.
smol=(--model-config "$repo/models/smollm2-135m/config.json" --hardware h100 --length 100)
[ -e "$repo/models/smollm2-135m/config.json" ] || smol=(--model-config synthetic:small --hardware h100 --length 100)
expect_error_of simulate "--matmul-efficiency must lie in .0.001, 1. (got 0)" "${smol[@]}" --matmul-efficiency 0
expect_error_of simulate "--attention-efficiency must lie in .0.001, 1." "${smol[@]}" --attention-efficiency 1e-300
expect_error_of simulate "does not divide by --tp 7" "${smol[@]}" --tp 7
expect_error_of simulate "a plan holds" "${smol[@]}" --length 100000000000 --chunk-size 1
expect_error_of plan "a plan holds" --length 100000000000 --chunk-size 1
expect_error_of simulate "devices: simulate models up to" "${smol[@]}" --pp 2 --cp 536870912
expect_error_of simulate "add --cp 2 or more" "${smol[@]}" --cp-attention pass-q
# A hardware file's numbers are a machine's: beyond, each is named (once inf, NaN or 200-digit times).
for change in 'peak_tflops.bf16=1e300' 'gpus_per_node=100000' 'inter_node.latency_us=1e308'; do
  /usr/bin/python3 - "$repo/hardware/h100.json" "$work/odd_hw.json" "$change" <<'PY'
import json, sys
hw = json.load(open(sys.argv[1]))
key, value = sys.argv[3].split("=")
place = hw
*outer, last = key.split(".")
for k in outer:
    place = place[k]
place[last] = json.loads(value)
json.dump(hw, open(sys.argv[2], "w"))
PY
  expect_error_of simulate "${change%%=*} " --model-config synthetic:small --hardware "$work/odd_hw.json" --length 100
done
expect_error_of simulate "--matmul-half-rows must lie in" "${smol[@]}" --matmul-half-rows -1
# ... counted through the stages, and after a dynamic policy cut finer than its first chunk.
expect_error_of simulate "the most a plan holds" --model-config "$repo/configs/llama3.1-405b.json" --hardware h100 \
  --pp 126 --length 1000000000 --chunk-size 1024
expect_error_of simulate "the most a plan holds" --model-config "$repo/configs/llama3.1-405b.json" --hardware h100 \
  --tp 8 --pp 2 --length 2500000000 --chunk-size 256 --dynamic-chunking --smooth-factor 1
[ ! -e "$work/no" ] || fail "a directory was made for --plot"
# The job line is one `run` takes: none for a model run refuses (the table is still a study of
# it), --allow-long-prompts for prompts beyond the model's context; a model directory names itself.
/usr/bin/python3 - "$repo/configs/llama3.1-405b.json" "$work/gpt2.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["architectures"] = ["GPT2LMHeadModel"]
json.dump(config, open(sys.argv[2], "w"))
PY
"$bin/pipefill" advise --model-config "$work/gpt2.json" --hardware h100 --nodes 2 --length 8192 >"$work/gpt2.txt"
grep -q '^note: no job line: `pipefill run` refuses this model (.*unknown architecture "GPT2LMHeadModel"' "$work/gpt2.txt" &&
  ! grep -q 'srun' "$work/gpt2.txt" || fail "advise printed a job line for a model run refuses: $(tail -3 "$work/gpt2.txt")"
mkdir -p "$work/long_model"
/usr/bin/python3 - "$repo/configs/llama3.1-405b.json" "$work/long_model/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["max_position_embeddings"] = 4096
json.dump(config, open(sys.argv[2], "w"))
PY
"$bin/pipefill" advise --model-config "$work/long_model" --hardware h100 --nodes 2 --length 8192 >"$work/long.txt"
grep -q "srun .*--model $work/long_model .*--allow-long-prompts" "$work/long.txt" ||
  fail "a prompt beyond the context: the job line lacks --allow-long-prompts or the model: $(tail -2 "$work/long.txt")"
# A study's picture or timeline never goes over one of its inputs (it once replaced --input).
cp "$work/batch.h5" "$work/batch_copy.h5"
expect_error "--plot ($work/batch_copy.h5) and --input ($work/batch_copy.h5) are the same file" "${deepseek[@]}" \
  --input "$work/batch_copy.h5" --plot "$work/batch_copy.h5"
cmp -s "$work/batch.h5" "$work/batch_copy.h5" || fail "advise --plot onto --input changed the input"
cp "$repo/configs/deepseek-v3.1.json" "$work/config_copy.json"
expect_error_of simulate "--timeline ($work/config_copy.json) and --model-config" --model-config "$work/config_copy.json" \
  --hardware h100 --length 100 --timeline "$work/config_copy.json"
cmp -s "$repo/configs/deepseek-v3.1.json" "$work/config_copy.json" || fail "simulate --timeline changed its model config"
# A FIFO as the model's config would block forever: refused like every other input path.
mkfifo "$work/fifo.json"
expect_error "is not a regular file" --model-config "$work/fifo.json" --hardware h100 --length 100
expect_error_of simulate "is not a regular file" --model-config "$work/fifo.json" --hardware h100 --length 100
# The job line's chunk is one `run` takes, and 3 C* of a prompt near 2^30 tokens does not wrap
# an int into a negative C0 (it once refused 715M-2G-token prompts for "more than 1250000 chunks").
expect_error "--chunk-size must be at most 1073741824" --model-config synthetic:tiny --hardware h100 --length 4096 \
  --chunk-size 2000000000
/usr/bin/python3 -c 'import json, sys; h = json.load(open(sys.argv[1])); h["memory_GB"] = 1e6; json.dump(h, open(sys.argv[2], "w"))' \
  "$repo/hardware/h100.json" "$work/h100_big_memory.json"
for length in 800000000 1500000000; do
  "$bin/pipefill" advise --model-config synthetic:tiny --hardware "$work/h100_big_memory.json" --length $length \
    --top 3 >"$work/long_prompt.txt" || fail "advise --length $length failed"
  chunk=$(sed -n 's/.*srun .*--chunk-size \([0-9]*\).*/\1/p' "$work/long_prompt.txt")
  [ -n "$chunk" ] && [ "$chunk" -ge 1 ] && [ "$chunk" -le 1073741824 ] ||
    fail "advise --length $length: the job line's --chunk-size '$chunk' is not one run takes"
done
# A batch whose size rules out the chunks that would fit says so, instead of blaming memory.
lengths=()
for i in $(seq 16384); do lengths+=(--length 65536); done
expect_error "at the chunks this batch's size lets the search simulate" \
  --model-config "$repo/configs/llama3.1-405b.json" --hardware h100 --nodes 2 "${lengths[@]}"
# Models no engine can build are not ranked (run refuses them too).
/usr/bin/python3 - "$repo/configs/qwen3-235b-a22b-fp8.json" "$work" <<'PY'
import json, os, sys
base = json.load(open(sys.argv[1]))
for name, edit in (("topk", {"num_experts_per_tok": 200}), ("kv7", {"num_key_value_heads": 7}),
                   ("no_experts", {"num_experts": 0})):
    json.dump({**base, **edit}, open(os.path.join(sys.argv[2], f"qwen_{name}.json"), "w"))
PY
expect_error "must be at most the 128 routed experts" --model-config "$work/qwen_topk.json" --hardware h100 --length 100
expect_error_of simulate "must divide num_attention_heads" --model-config "$work/qwen_kv7.json" --hardware h100 \
  --length 100
expect_error "is a mixture of experts: it needs at least one routed expert" --model-config "$work/qwen_no_experts.json" \
  --hardware h100 --length 100
# simulate with a saved profile times its stages as the profiled layout: another --tp, or GPUs
# for a cpu profile, is refused (the time printed was the profile's whatever they said).
cat >"$work/tiny_model.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}
JSON
cat >"$work/tiny_profile.json" <<JSON
{"identity": {"backend": "cpu", "pp": 1, "tp": 1, "model_config": $(cat "$work/tiny_model.json")},
 "initial_chunk": 1024,
 "stages": [{"stage": 0, "sglang": {"form": "sglang", "ok": true, "a": 1e-9, "b": 1e-6, "c": 1e-3, "gamma": 0},
             "prefix": {"form": "prefix", "ok": true, "a": 1e-9, "b": 1e-6, "c": 1e-3, "gamma": 0}}]}
JSON
expect_error_of simulate "was profiled at tp 1 and times its stages as that, not --tp 2" \
  --model-config "$work/tiny_model.json" --cost-model "$work/tiny_profile.json" --hardware cpu --length 4096 --tp 2
expect_error_of simulate "was profiled on the cpu backend, and .* describes GPUs" \
  --model-config "$work/tiny_model.json" --cost-model "$work/tiny_profile.json" --hardware h100 --length 4096
sed 's/"tp": 1,/"tp": 1, "cp": 2,/' "$work/tiny_profile.json" >"$work/tiny_profile_cp2.json"
expect_error_of simulate "was profiled at cp 2: its stages' times include that ring" \
  --model-config "$work/tiny_model.json" --cost-model "$work/tiny_profile_cp2.json" --hardware cpu --length 4096
"$bin/pipefill" simulate --model-config "$work/tiny_model.json" --cost-model "$work/tiny_profile.json" --hardware cpu \
  --length 4096 >/dev/null || fail "simulate with the profile's own layout failed"

# With per-token scores `run` gives the last stage fewer layers (its LM head on every row):
# simulate and advise model that partition, not the equal one, and the job line pins nothing
# run would not choose itself. synthetic:tiny at pp 3: 3,3,2 (2,3,3 without scores).
source "$(dirname "$0")/mpi_env.sh"
"$bin/pipefill" make-prompts --out "$work/p64.h5" --num 1 --min-len 64 --max-len 64 --vocab 500 --seed 1 >/dev/null
ran=$(MPI_TIMEOUT=120 pipefill_mpi 3 run --model synthetic:tiny --input "$work/p64.h5" --output "$work/p64_out.h5" \
  --pp 3 --logprobs --chunk-size 64 2>&1 | grep -o 'layers [0-9,]*' | head -1)
simulated=$("$bin/pipefill" simulate --model-config synthetic:tiny --hardware cpu --pp 3 --length 64 --chunk-size 64 \
  --logprobs | grep -o 'layers [0-9,]*' | head -1)
[ "$ran" = "layers 3,3,2" ] && [ "$simulated" = "$ran" ] || fail "run's $ran, simulate's $simulated with --logprobs"
# synthetic:small at 4,096 tokens, pp 2: 7,5 with scores (as run's rule gives), 6,6 without.
for scores in "" --logprobs; do
  "$bin/pipefill" advise --model-config synthetic:small --hardware cpu --length 4096 $scores --json >"$work/rows.json"
  python3 - "$work/rows.json" "${scores:-none}" <<'PY' || fail "advise ${scores:-without scores}: not run's partition"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
pp2 = [r["layer_partition"] for r in rows if r["pp"] == 2]
assert pp2 == ["7,5" if sys.argv[2] == "--logprobs" else "6,6"], pp2
PY
done
# An input whose prompt scores only its last 96 tokens (/score_start): run gives the head
# 97 rows' worth and keeps 6,6; advise --input --logprobs must model the same.
"$PYTHON" - "$work/span.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = (np.arange(4096) % 500).astype(np.int32)
    f["offsets"] = np.array([0, 4096], dtype=np.int64)
    f["score_start"] = np.array([4000], dtype=np.int64)
PY
"$bin/pipefill" advise --model-config synthetic:small --hardware cpu --input "$work/span.h5" --logprobs --json \
  >"$work/span_rows.json"
"$PYTHON" - "$work/span_rows.json" <<'PY' || fail "advise --input --logprobs: not run's partition for a scored span"
import json, sys
pp2 = [json.loads(line)["layer_partition"] for line in open(sys.argv[1]) if line.strip() and json.loads(line)["pp"] == 2]
assert pp2 == ["6,6"], pp2
PY
# A batch that shares a prefix: advise models run's reuse (the same tokens reused).
"$PYTHON" - "$work/shared.h5" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(1)
doc = rng.integers(0, 500, 1500)
prompts = [np.concatenate([doc, rng.integers(0, 500, n)]) for n in (200, 300, 700)] + [rng.integers(0, 500, 900)]
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.concatenate(prompts).astype(np.int32)
    f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
PY
"$bin/pipefill" advise --model-config synthetic:tiny --hardware cpu --input "$work/shared.h5" >"$work/shared.txt"
MPI_TIMEOUT=120 pipefill_mpi 1 run --model synthetic:tiny --input "$work/shared.h5" --output "$work/shared_out.h5" \
  --chunk-size 512 --quiet
ran=$("$PYTHON" -c 'import sys, h5py; print(int(h5py.File(sys.argv[1], "r")["reused_tokens"][:].sum()))' "$work/shared_out.h5")
grep -q "6600 tokens (longest 2200, $ran of them reused from shared prefixes" "$work/shared.txt" ||
  fail "advise does not model run's $ran reused tokens: $(head -1 "$work/shared.txt")"
echo "advise: all checks passed"
