#!/usr/bin/env bash
# --save-kv: the export is complete and right after interruptions, and a failing disk is one
# error that leaves the other outputs whole. Each case compares the export with an
# uninterrupted run's, tensor by tensor (the same plan computes the same bytes):
#   resume        SIGUSR1 mid-batch (pp 2 x tp 2), then --resume: every prompt's files and
#                 the index, none left as .partial
#   missing_file  a partial output whose finished prompt 2 lost one KV file (a crash between
#                 the row and the file, or a first run without --save-kv): --resume names it
#                 and computes it again, with prompt 4 that was not finished
#   disk_full     the export directory is a full file system (a small tmpfs): exit 2 and one
#                 `error: --save-kv: cannot write ...`, no index, the output complete
#   index_unwritable  DIR/index.json cannot be written: one error with the reason and the rank
#   complete      --resume --save-kv on an output that is already complete: a note that
#                 nothing was computed, hence nothing exported
#   damaged_file  the same with a value of a finished prompt's file changed: --resume names the
#                 file and what is wrong with it, and computes the prompt again
#   killed_litter SIGKILL of every rank mid-batch: the next --resume removes the NAME.partial.PID
#                 files the killed run left (a note says how many) and completes the export
#   concurrent    a second run exporting into the directory a running one holds: refused
#                 (exit 2) naming the first, which completes its export
#   shared_prefix prompts that share prefixes (pp 2 x tp 2): a prompt that reused a prefix
#                 exports it too (from the shared pages), equal to a --no-prefix-cache run's
#                 export within float32 rounding
#   context_parallel  the shared_prefix case at pp 2 x cp 2 x tp 2 (8 ranks): each CP rank holds
#                 a shard of a prompt's KV by token, CP rank 0 gathers it and writes the files a
#                 pp 2 x tp 2 run writes, equal to its export within float32 rounding
#   new_layout    SIGUSR1 mid-batch at pp 2 x tp 2, --resume at pp 1 (another allocation): the
#                 prompts exported before the stop are kept as pp 2 x tp 2 wrote them (none
#                 computed again), index.json lists each prompt's own files, and every prompt's
#                 KV, put together from its files, is within float32 rounding of the reference
# usage: kv_export.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
MPI_TIMEOUT=120

# same_export A B: every prompt of A's index is in B with the same tensors, and vice versa.
same_export() {
  "$PYTHON" - "$1" "$2" <<'PY' || fail "the KV export differs from the uninterrupted run's"
import json, os, struct, sys
import numpy as np
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}
a, b = (json.load(open(os.path.join(d, "index.json"))) for d in sys.argv[1:3])
assert a["prompts"] == b["prompts"], (sorted(a["prompts"]), sorted(b["prompts"]))
files = 0
for entry in a["prompts"].values():
    for name in entry["files"]:
        assert tensors(os.path.join(sys.argv[1], name)) == tensors(os.path.join(sys.argv[2], name)), name
        files += 1
partials = [f for d, _, fs in os.walk(sys.argv[2]) for f in fs if ".partial" in f]
assert not partials, partials
print(f"export: {len(a['prompts'])} prompts, {files} files, equal to the uninterrupted run's")
PY
}

case $case in
  resume)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 16 --min-len 800 --max-len 1600 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --tp 2 --chunk-size 16 --page-size 16)
    pipefill_mpi 4 "${args[@]}" --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    start_run "$work/first.log" 4 "${args[@]}" --progress-interval 0.05 --output "$work/out.h5" --save-kv "$work/kv"
    wait_for_prompts 1
    signal_run USR1 mpirun
    finish_run
    expect_status 75 "a stopped run"
    "$PYTHON" -c "import json,sys; n=len(json.load(open(sys.argv[1]))['prompts']); print(f'index after the stop: {n} prompts'); assert 0 < n < 16" "$work/kv/index.json"
    pipefill_mpi 4 "${args[@]}" --quiet --output "$work/out.h5" --save-kv "$work/kv" --resume
    same_export "$work/reference_kv" "$work/kv" ;;
  new_layout)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 16 --min-len 800 --max-len 1600 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --chunk-size 16 --page-size 16)
    pipefill_mpi 4 "${args[@]}" --pp 2 --tp 2 --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    start_run "$work/first.log" 4 "${args[@]}" --pp 2 --tp 2 --progress-interval 0.05 --output "$work/out.h5" \
      --save-kv "$work/kv"
    wait_for_prompts 1
    signal_run USR1 mpirun
    finish_run
    expect_status 75 "a stopped run"
    pipefill_mpi 1 "${args[@]}" --output "$work/out.h5" --save-kv "$work/kv" --resume >"$work/resumed.log" 2>&1 ||
      { cat "$work/resumed.log"; fail "the pp 1 resume failed"; }
    ! grep -q "computing them again" "$work/resumed.log" || { cat "$work/resumed.log"; fail "pp 2 x tp 2 exports were not used"; }
    "$PYTHON" - "$work/reference_kv" "$work/kv" <<'PY'
import json, os, struct, sys
import numpy as np
def prompt_kv(directory, entry):
    # Every listed file's tensors placed by the layers and KV heads its metadata name.
    whole = {}
    for name in entry["files"]:
        with open(os.path.join(directory, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        heads = [int(x) for x in header["__metadata__"]["kv_heads"].split(",")]
        for key, info in header.items():
            if key == "__metadata__":
                continue
            rows = np.frombuffer(data[info["data_offsets"][0]:info["data_offsets"][1]], "<f4").reshape(info["shape"])
            for h in range(rows.shape[0]):
                assert (key, heads[0] + h) not in whole, f"{name}: {key} head {heads[0] + h} held twice"
                whole[(key, heads[0] + h)] = rows[h]
    return whole
a, b = (json.load(open(os.path.join(d, "index.json"))) for d in sys.argv[1:3])
assert sorted(a["prompts"]) == sorted(b["prompts"]), (sorted(a["prompts"]), sorted(b["prompts"]))
layouts = set()
worst = 0.0
for p, entry in b["prompts"].items():
    layouts.add(len(entry["files"]))
    ref, got = prompt_kv(sys.argv[1], a["prompts"][p]), prompt_kv(sys.argv[2], entry)
    assert ref.keys() == got.keys(), p
    worst = max(worst, max(float(np.abs(ref[k] - got[k]).max()) for k in ref))
assert layouts == {1, 4}, f"expected prompts in 4 files (pp 2 x tp 2) and in 1 (pp 1): {layouts}"
assert worst < 1e-4, worst
print(f"export: {len(b['prompts'])} prompts from two layouts, within {worst:.2g} of the reference")
PY
    ;;
  missing_file)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 6 --min-len 100 --max-len 400 --vocab 512 --seed 4 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 64 --page-size 16)
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    cp -r "$work/reference_kv" "$work/kv"
    rm "$work/kv/prompt-000002/stage01_tp00.safetensors" "$work/kv/index.json"
    cp "$work/reference.h5" "$work/out.h5.partial"
    "$PYTHON" -c "import h5py,sys; h5py.File(sys.argv[1], 'r+')['completed'][4] = 0" "$work/out.h5.partial"
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/out.h5" --save-kv "$work/kv" --resume 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^note: 1 finished prompt(s) (first: 2) have no usable KV export in $work/kv (rank 1: no file of $work/kv/prompt-000002 holds layer 4's KV head 0 (stage01_tp00.safetensors is missing))" "$work/stderr" ||
      fail "the prompt whose KV file is missing was not named"
    same_export "$work/reference_kv" "$work/kv" ;;
  damaged_file)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 4 --min-len 100 --max-len 300 --vocab 512 --seed 4 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 64 --page-size 16)
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    cp -r "$work/reference_kv" "$work/kv"
    # One value of prompt 1's stage-0 file changed: the file is there, whole, but wrong.
    "$PYTHON" - "$work/kv/prompt-000001/stage00_tp00.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
raw = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
begin = json.loads(raw[8:8 + n])["layers.0.key"]["data_offsets"][0]
raw[8 + n + begin + 40:8 + n + begin + 44] = struct.pack("<f", 1e30)
open(path, "wb").write(raw)
PY
    mv "$work/reference.h5" "$work/out.h5.partial"
    "$PYTHON" -c "import h5py,sys; h5py.File(sys.argv[1], 'r+')['completed'][3] = 0" "$work/out.h5.partial"
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/out.h5" --save-kv "$work/kv" --resume 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^note: 1 finished prompt(s) (first: 1) have no usable KV export in $work/kv (rank 0: $work/kv/prompt-000001/stage00_tp00.safetensors: its data do not match their checksum" "$work/stderr" ||
      fail "the damaged file was not named with what is wrong with it"
    same_export "$work/reference_kv" "$work/kv" ;;
  killed_litter)
    # SIGKILL of every rank mid-batch leaves files being written as NAME.partial.PID; the
    # --resume that holds the directory next removes them, and the export is whole.
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 12 --min-len 800 --max-len 1600 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 16 --page-size 16)
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 --output "$work/out.h5" --save-kv "$work/kv"
    wait_for_prompts 1
    signal_run KILL ranks
    finish_run
    litter=$(find "$work/kv" -name '*.partial.*' | wc -l)
    echo "left by the killed run: $litter partial file(s)"
    [ "$litter" -gt 0 ] || fail "the kill left no partial file: nothing to test"
    pipefill_mpi 2 "${args[@]}" --output "$work/out.h5" --save-kv "$work/kv" --resume >"$work/stdout" 2>&1
    grep -q "^note: removed $litter unfinished file(s) that killed runs left in $work/kv" "$work/stdout" ||
      { cat "$work/stdout"; fail "no note of the files removed"; }
    same_export "$work/reference_kv" "$work/kv" ;;
  concurrent)
    # Two runs exporting into one directory: the second is refused before any compute, with
    # the first named; the first finishes, and the directory holds its export, whole.
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 8 --min-len 800 --max-len 1600 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 16 --page-size 16)
    pipefill_mpi 2 "${args[@]}" --quiet --output "$work/reference.h5" --save-kv "$work/reference_kv"
    start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 --output "$work/first.h5" --save-kv "$work/kv"
    wait_for_prompts 1
    # Paused (a stopped process keeps its lock) so that it cannot end before the second run asks.
    pids=$(rank_pids)
    kill -STOP $pids
    on_exit "kill -CONT $pids"
    holder=$(cat "$work/kv/.pipefill.lock")
    status_of pipefill_mpi 2 "${args[@]}" --quiet --output "$work/second.h5" --save-kv "$work/kv" 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "the second run"
    grep -qF "error: --save-kv $work/kv is being written by another pipefill run ($holder)" "$work/stderr" ||
      fail "the second run's error does not name the first ($holder)"
    [ ! -e "$work/second.h5" ] && [ ! -e "$work/second.h5.partial" ] || fail "the refused run left an output"
    kill -CONT $pids
    finish_run
    expect_status 0 "the first run"
    [ ! -e "$work/kv/.pipefill.lock" ] || fail "the lock file outlived its run"
    same_export "$work/reference_kv" "$work/kv" ;;
  disk_full)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 4 --min-len 300 --max-len 400 --vocab 512 --seed 4 >/dev/null
    # A real full disk: a 256 KiB tmpfs (root only; skipped elsewhere). Each prompt's KV file
    # (4 layers x 2 x 2 heads x 300+ tokens x 32 x 4 bytes) is over 300 KiB.
    mkdir "$work/small"
    mount -t tmpfs -o size=256k tmpfs "$work/small" 2>/dev/null || { echo "cannot mount a tmpfs: skipped"; exit 77; }
    on_exit "umount '$work/small'"
    status_of pipefill_mpi 2 run --model "$data/tiny" --pp 2 --input "$work/in.h5" --chunk-size 64 --page-size 16 \
      --quiet --output "$work/out.h5" --save-kv "$work/small/kv" 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "a run whose KV export failed"
    grep -q "^error: --save-kv: cannot write $work/small/kv/prompt-0000.*: No space left on device (rank [01])" \
      "$work/stderr" || fail "no error naming the file that could not be written"
    [ "$(grep -c '^error:' "$work/stderr")" -eq 1 ] || fail "more than one error line"
    [ -e "$work/out.h5" ] || fail "the output did not survive the failed export"
    [ ! -e "$work/small/kv/index.json" ] || fail "an index was written for a failed export"
    "$PYTHON" "$here/check_output.py" "$work/out.h5" ;;
  index_unwritable)
    # DIR/index.json is a directory (with a file in it): the index cannot be put in place. One
    # error says why and on which rank; no index.json.partial.PID is left behind.
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 2 --min-len 50 --max-len 80 --vocab 512 --seed 4 >/dev/null
    mkdir -p "$work/kv/index.json" && touch "$work/kv/index.json/in_the_way"
    status_of pipefill_mpi 2 run --model "$data/tiny" --pp 2 --input "$work/in.h5" --chunk-size 64 --page-size 16 \
      --quiet --output "$work/out.h5" --save-kv "$work/kv" 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "a run whose index could not be written"
    grep -q "^error: --save-kv: cannot rename $work/kv/index.json.partial.[0-9]* to index.json: .* (rank 0)$" \
      "$work/stderr" || fail "the error does not say why and on which rank"
    [ -z "$(find "$work/kv" -name 'index.json.partial.*')" ] || fail "a partial index was left behind"
    [ -e "$work/out.h5" ] || fail "the output did not survive the failed index" ;;
  complete)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 2 --min-len 50 --max-len 80 --vocab 512 --seed 4 >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --chunk-size 64 --page-size 16 --quiet)
    pipefill_mpi 2 "${args[@]}" --output "$work/out.h5"
    pipefill_mpi 2 "${args[@]}" --output "$work/out.h5" --resume --save-kv "$work/kv" >"$work/stdout" 2>&1
    cat "$work/stdout"
    grep -q "already complete" "$work/stdout" && grep -q "^note: .*nothing was exported" "$work/stdout" ||
      fail "no note that a complete output exports nothing" ;;
  shared_prefix|context_parallel)
    "$PYTHON" "$here/make_shared_prompts.py" "$work/in.h5" >/dev/null
    args=(run --model "$data/tiny" --input "$work/in.h5" --pp 2 --tp 2 --chunk-size 40 --page-size 16 --quiet)
    pipefill_mpi 4 "${args[@]}" --output "$work/reference.h5" --save-kv "$work/reference_kv" --no-prefix-cache
    if [ "$case" = context_parallel ]; then
      pipefill_mpi 8 "${args[@]}" --cp 2 --output "$work/out.h5" --save-kv "$work/kv"
    else
      pipefill_mpi 4 "${args[@]}" --output "$work/out.h5" --save-kv "$work/kv"
    fi
    "$PYTHON" - "$work/reference_kv" "$work/kv" "$work/out.h5" <<'PY' || fail "the export with prefix reuse differs"
import json, os, struct, sys
import h5py
import numpy as np
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np.float32).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}
a, b = (json.load(open(os.path.join(d, "index.json"))) for d in sys.argv[1:3])
assert a["prompts"].keys() == b["prompts"].keys()
worst = 0.0
for entry in a["prompts"].values():
    for name in entry["files"]:
        x, y = tensors(os.path.join(sys.argv[1], name)), tensors(os.path.join(sys.argv[2], name))
        assert x.keys() == y.keys(), name
        for key in x:
            assert x[key].shape == y[key].shape, (name, key)
            worst = max(worst, float(np.max(np.abs(x[key] - y[key])) / np.max(np.abs(x[key]))))
reused = h5py.File(sys.argv[3])["reused_tokens"][:]
assert reused.sum() > 0, reused
print(f"export with {reused.sum()} tokens reused: {len(a['prompts'])} prompts, worst difference {worst:.2g} of a tensor's largest value")
assert worst < 1e-4, worst
PY
    ;;
  *) fail "unknown case $case" ;;
esac
echo "Passed: $case"
