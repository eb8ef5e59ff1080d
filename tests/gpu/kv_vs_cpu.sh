#!/usr/bin/env bash
# --save-kv and --kv-store on the cuda backend, against the cpu backend, on the simulated
# device (PF_SIM=1: pipefill_sim) or a GPU. A bf16 model, so both backends hold the same
# weights; the cuda cache is bf16 and computed from bf16 activations, so its export (float32
# files, the bf16 values widened exactly) equals the cpu's within what bf16 moves them: every
# (prompt, tensor, head) within 2.5e-2 of its largest value (measured: 1.1e-2 at the last of
# tiny's 4 layers). A row or head out of place would be off by its whole size.
#   export  the cuda run's export, file by file and tensor by tensor, against the cpu run's
#   store   a cuda run stores a document and a question; a second asks another question: it
#           loads the document's prefix from the store (/reused_tokens), and its logits equal
#           the same run computed in full within bf16's 1e-2; then the same with --logprobs
#           --top-k 3 --hidden-states mean: the scores and means borrowed from the store equal
#           the full computation's within bf16 rounding
#   checkpoint  a cuda run of one 1500-token prompt stopped inside it (SIGUSR1): it checkpoints
#           the prompt through the cuda backend's read_kv and exits 75; --resume restores it
#           (/restored_tokens) and its logits equal the uninterrupted cuda run's; stopped again
#           and resumed at tp 2 x pp 1 (another layout), within bf16's 1e-2. With --cp 2 first
#           among the arguments (and 4 ranks), the checkpoint is CP rank 0's gathered rows, and the
#           resume spreads them evenly over the CP ranks: within PF_RESUME_RTOL, not bit-identical.
#           PF_LONG_TOKENS: the prompt's length (1500)
# PF_PRESET: the model (default tiny; tiny-mla exports and stores MLA's latent rows). tiny-mla
# routes tokens to experts, and bf16 flips near-tied choices (as in test_cuda_stage.cpp): a
# flip changes the rows of that position in later layers (measured: 12 of 170 positions of
# one prompt at the last layer), so there every tensor needs 90 % of its positions within
# 2.5e-2, which a misplaced row or head still fails.
# usage: [PF_SIM=1] [PF_PRESET=name] kv_vs_cpu.sh BIN_DIR WORK_DIR CASE RANKS -- <pipefill run arguments for the cuda runs>
set -euo pipefail
here=$(dirname "$0")
source "$here/../mpi/mpi_env.sh"
bin=$1 work=$2 case=$3 ranks=$4
shift 4
[ "$1" = "--" ] && shift
if [ "${PF_SIM:-0}" = 1 ]; then cuda_bin=$bin/pipefill_sim; else "$bin/tests/gpu/cuda_probe" 1 || exit $?; cuda_bin=$bin/pipefill; fi
rm -rf "$work" && mkdir -p "$work"
model=$work/model
"$bin/pipefill" make-model --preset "${PF_PRESET:-tiny}" --dtype bf16 --seed 11 --out "$model" >/dev/null
"$PYTHON" - "$work" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(5)
doc = list(rng.integers(0, 500, 150))
def write(path, prompts):
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate([np.array(p, np.int32) for p in prompts])
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
write(f"{sys.argv[1]}/a.h5", [doc + list(rng.integers(0, 500, 20)), list(rng.integers(0, 500, 40))])
write(f"{sys.argv[1]}/b.h5", [doc + list(rng.integers(0, 500, 30))])
PY
cuda() { timeout 600 mpirun -n "$ranks" "$cuda_bin" run --quiet --model "$model" --backend cuda "$@"; }
case $case in
  export)
    timeout 300 mpirun -n 1 "$bin/pipefill" run --quiet --model "$model" --input "$work/a.h5" --output "$work/cpu.h5" \
      --save-kv "$work/cpu_kv"
    cuda --input "$work/a.h5" --output "$work/cuda.h5" --save-kv "$work/cuda_kv" "$@"
    # --kv-dtype bf16 halves the files and, the cuda cache being bf16, loses nothing.
    cuda --input "$work/a.h5" --output "$work/cuda_bf16.h5" --save-kv "$work/cuda_kv_bf16" --kv-dtype bf16 "$@"
    "$PYTHON" - "$work/cpu_kv" "$work/cuda_kv" "$work/cuda_kv_bf16" <<'PY'
import json, os, struct, sys
import numpy as np
def tensors(directory):
    index = json.load(open(os.path.join(directory, "index.json")))
    out = {}
    for prompt, entry in index["prompts"].items():
        for name in entry["files"]:
            with open(os.path.join(directory, name), "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
                data = f.read()
            meta = header.pop("__metadata__")
            heads = [int(x) for x in meta["kv_heads"].split(",")]
            for key, info in header.items():
                raw = data[info["data_offsets"][0]:info["data_offsets"][1]]
                if info["dtype"] == "BF16":  # widened exactly: the bits are a float32's top half
                    value = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
                else:
                    value = np.frombuffer(raw, np.float32)
                value = value.reshape(info["shape"])
                for h in range(value.shape[0]):  # by global head: the layouts differ in how heads are split
                    out[(prompt, key, heads[0] + h)] = value[h]
    return out
cpu, cuda = tensors(sys.argv[1]), tensors(sys.argv[2])
assert cpu.keys() == cuda.keys(), (len(cpu), len(cuda))
# Per position: its row's largest difference relative to the tensor's largest value.
errors = {k: np.abs(cpu[k] - cuda[k]).max(axis=1) / np.abs(cpu[k]).max() for k in cpu}
worst = max(float(e.max()) for e in errors.values())
within = min(float((e < 2.5e-2).mean()) for e in errors.values())
print(f"cuda export: {len(cuda)} (prompt, tensor, head) rows sets, worst difference {worst:.3g} of the largest value; "
      f"at least {100 * within:.1f}% of each one's positions within 2.5e-2")
assert (within >= 0.9) if os.environ.get("PF_PRESET") == "tiny-mla" else (worst < 2.5e-2), worst
bf16 = tensors(sys.argv[3])
assert bf16.keys() == cuda.keys() and all(np.array_equal(bf16[k], cuda[k]) for k in cuda), "bf16 export differs"
size = lambda d: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs if f.endswith(".safetensors"))
print(f"--kv-dtype bf16: the same values, files {size(sys.argv[3]) / size(sys.argv[2]):.2f} of float32's")
PY
    ;;
  store)
    cuda --input "$work/a.h5" --output "$work/a_cuda.h5" --kv-store "$work/store" "$@"
    cuda --input "$work/b.h5" --output "$work/b_cuda.h5" --kv-store "$work/store" "$@"
    cuda --input "$work/b.h5" --output "$work/b_full.h5" --no-prefix-cache "$@"
    "$PYTHON" -c "import h5py, sys; r = h5py.File(sys.argv[1])['reused_tokens'][:]; print('reused', r); assert r[0] >= 128, r" \
      "$work/b_cuda.h5"
    "$bin/tests/compare_logits" "$work/b_cuda.h5" "$work/b_full.h5" --rtol 1e-2
    # Scoring runs borrow too: entries stored with their token rows and final-norm rows lend
    # them to a later --logprobs --top-k --hidden-states mean run, equal to computing them.
    scores=(--logprobs --top-k 3 --hidden-states mean)
    cuda --input "$work/a.h5" --output "$work/as_cuda.h5" --kv-store "$work/scored" "${scores[@]}" "$@"
    cuda --input "$work/b.h5" --output "$work/bs_cuda.h5" --kv-store "$work/scored" "${scores[@]}" "$@"
    cuda --input "$work/b.h5" --output "$work/bs_full.h5" --no-prefix-cache "${scores[@]}" "$@"
    "$PYTHON" - "$work/bs_cuda.h5" "$work/bs_full.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert a["reused_tokens"][0] >= 128, a["reused_tokens"][:]
lp, ref = a["token_logprobs"][:], b["token_logprobs"][:]
assert np.array_equal(np.isnan(lp), np.isnan(ref))
d = np.nanmax(np.abs(lp - ref))
h = np.abs(a["hidden_states"][:] - b["hidden_states"][:]).max() / np.abs(b["hidden_states"][:]).max()
print(f"scored from the store: log-probs within {d:.2g}, mean hidden states within {h:.2g} of the largest")
assert d < 5e-2 and h < 1e-2, (d, h)
PY
    ;;
  checkpoint)
    "$PYTHON" -c "
import h5py, numpy as np
with h5py.File('$work/long.h5', 'w') as f:
    f['tokens'] = np.random.default_rng(3).integers(0, 500, ${PF_LONG_TOKENS:-1500}).astype(np.int32)
    f['offsets'] = np.array([0, ${PF_LONG_TOKENS:-1500}], np.int64)"
    args=(--input "$work/long.h5" --chunk-size 64 --page-size 64 --pp 2 "$@")
    cuda "${args[@]}" --output "$work/reference.h5"
    # stop_after LOG OUT ARGS...: a cuda run stopped once its first progress line is out. A
    # GPU computes this prompt in 0.1 s, before the signal comes (measured on an H200): each
    # micro-batch waits 50 ms first (a test hook), so the stop lands inside the prompt.
    stop_after() {
      local log=$1 out=$2
      shift 2
      PIPEFILL_TEST_MICRO_BATCH_DELAY_MS=50 timeout 600 mpirun -n "$ranks" -x PIPEFILL_TEST_MICRO_BATCH_DELAY_MS "$cuda_bin" run --model "$model" --backend cuda --progress-interval 0.05 \
        --output "$out" "$@" >"$log" 2>&1 &
      launcher=$!
      on_exit "_pf_stop_run $launcher"
      run_log=$log
      wait_until 300 "a first progress line" grep -q '^progress:' "$log"
      signal_run USR1 mpirun
      finish_run
    }
    stop_after "$work/first.log" "$work/out.h5" "${args[@]}"
    expect_status 75 "a cuda run stopped inside its prompt"
    grep -q "^checkpoint [0-9]*: prompt 0 at token" "$work/first.log" || { cat "$work/first.log"; fail "no checkpoint"; }
    cp -r "$work/out.h5.partial" "$work/again.h5.partial"
    cp -r "$work/out.h5.checkpoint" "$work/again.h5.checkpoint"
    cuda "${args[@]}" --output "$work/out.h5" --resume
    "$PYTHON" -c "import h5py, sys; r = h5py.File(sys.argv[1])['restored_tokens'][:]; print('restored', r); assert r[0] > 0, r" \
      "$work/out.h5"
    "$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol "${PF_RESUME_RTOL:-1e-6}"
    # The same checkpoint, resumed on another layout (tp 2 instead of pp 2, and no CP).
    layout=("$@")
    [ "${layout[0]:-}" != --cp ] || layout=("${layout[@]:2}")
    timeout 600 mpirun -n 2 "$cuda_bin" run --quiet --model "$model" --backend cuda --input "$work/long.h5" \
      --chunk-size 64 --page-size 64 --tp 2 --output "$work/again.h5" --resume "${layout[@]}"
    "$bin/tests/compare_logits" "$work/again.h5" "$work/reference.h5" --rtol 1e-2 ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "Passed: $case"
