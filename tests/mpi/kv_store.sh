#!/usr/bin/env bash
# --kv-store: a later run loads a prefix an earlier run stored instead of computing it, and
# its results are what computing it gives; entries that do not fit or are damaged are never
# used. Run A stores one 300-token document with two questions and an unrelated prompt;
# run B asks new questions about it (and a prompt sharing only its first 100 tokens).
#   reuse         B (pp 2 x tp 2, --hidden-states last) loads the document from A's entries:
#                 the summary says how much, /reused_tokens per prompt, logits and hidden
#                 states equal a full computation; B's prompts are added; no .incoming left
#   damaged       one byte of an entry's file changed, and the file of the other entry holding
#                 the document truncated: B names both (it falls back from one to the other),
#                 loads neither, and is right; A again replaces both, and B then finds no damage
#   edited_ids    an entry's tokens.i32 edited, two entries' ids and index swapped: B names each
#                 with what is wrong with it (not "cannot be read"), loads none, and is right
#   full          the store on a full file system (a small tmpfs): one `error: --kv-store:
#                 cannot write`, exit 2, the output complete, no .incoming left behind
#   other_layout  B at pp 1, then at pp 4, loads the document from A's pp 2 x tp 2 entries (each
#                 rank reads the layers and heads it needs from whichever files hold them) and is
#                 right; every entry sits under one key, each prompt stored once
#   concurrent    two runs of A publish into one store at once: both succeed, each entry is
#                 there once and whole (B then loads from it)
#   mla_reuse     reuse on a DeepSeek-V3-style model (tiny-mla): the store holds its latent
#                 rows (one per token, the same on both TP ranks) and B loads them
#   scores        A with --logprobs --top-k 5 keeps its prompts' token rows with their KV; B with
#                 --logprobs --top-k 3 loads the document from them and its token rows equal a
#                 full computation's; a second B, asking --top-k 8, more than A stored, is told
#                 the entries hold no scores of its kind and loads nothing
#   shared        A's third prompt takes the document from its first in the batch: its entry holds
#                 only its own rows and names the first's as its parent; a prompt extending the
#                 third loads its prefix through that chain (rows from both entries) and is right
#   hidden_mean   A with --hidden-states mean keeps each prompt's final-norm rows with its KV
#                 (the third prompt's from its first stored position on, its parent holding the
#                 rest); B with --hidden-states mean loads the document (its third prompt reuses
#                 96 tokens of its first, which loaded them: that sum comes from the store too) and
#                 its mean hidden states equal a full computation's
#   rerun         a prompt stored whole run again beside one extending it (the stored prompt loads
#                 its prefix from its own entry, the other takes it from the first in the batch):
#                 no hang naming parents, the results right, the extension names the stored entry
#   context_parallel  entries stored at cp 2 x tp 2 serve pp 2 x tp 2; entries of pp 2 x tp 2
#                 serve cp 2 x tp 2 and pp 2 x cp 2 (each CP rank keeps its share of what it
#                 loads); every result equals a full computation at pp 1
#   mla_context_parallel  the same on tiny-mla: CP ranks shard and load latent rows by token
#   limit         B with --kv-store-limit 1K: every entry it neither loaded nor added is removed
#                 (A's unrelated prompt among them), a note says how many, a warning that its own
#                 keep the store over the limit; B's results are right and the store still serves
#   kept_parents  publishing against a store others wrote: a batch with a duplicate prompt
#                 replaces a damaged entry once (the duplicate, whose prefix is a copy of itself,
#                 adds nothing: no entry names itself as parent); an entry another run stored
#                 holding its own rows only from position 40 is kept, and a child taking 40
#                 tokens from it names the entry up the chain that holds them. Every entry
#                 verifies (scripts/kv_store.py) and a later run uses them without a warning;
#                 entries a killed removal left moved aside are removed by the next run
#   resume_hidden_mean  a run with --hidden-states mean stopped inside its first prompt, which
#                 shares a stored document with the second: resumed, the second still loads the
#                 document from the store (the batch's copy of it was the interrupted run's sum)
#                 and its mean hidden state equals a full computation's
# usage: kv_store.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
MPI_TIMEOUT=120
store=$work/store
mkdir "$store"
"$PYTHON" - "$work" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(5)
doc = list(rng.integers(0, 512, 300))
def write(path, prompts):
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate([np.array(p, np.int32) for p in prompts])
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
write(f"{sys.argv[1]}/a.h5", [doc + list(rng.integers(0, 512, 40)), list(rng.integers(0, 512, 70)),
                              doc + list(rng.integers(0, 512, 25))])
write(f"{sys.argv[1]}/b.h5", [doc + list(rng.integers(0, 512, 30)), list(rng.integers(0, 512, 50)),
                              doc[:100] + list(rng.integers(0, 512, 20))])
PY
model=$data/tiny
if [ "$case" = mla_reuse ] || [ "$case" = mla_context_parallel ]; then
  model=$work/tiny-mla
  "$bin/pipefill" make-model --preset tiny-mla --out "$model" >/dev/null
fi
common=(run --model "$model" --chunk-size 64 --page-size 16)
run_a() { pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/a.h5" --output "$work/out_$1.h5" --kv-store "$store" --quiet; }
# run_b NAME RANKS ARGS...: B into NAME.h5 with the store, its stdout and stderr in NAME.log
run_b() {
  local name=$1 ranks=$2
  shift 2
  pipefill_mpi "$ranks" "${common[@]}" --input "$work/b.h5" --output "$work/out_$name.h5" --kv-store "$store" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "run $name failed"; }
  grep -E "^(warning|note|prefix reuse)" "$work/$name.log" || true
}
# same_results OUT ARGS...: OUT's logits (and hidden states) equal B computed in full.
same_results() {
  local out=$1 ranks=$2
  shift 2
  pipefill_mpi "$ranks" "${common[@]}" --input "$work/b.h5" --output "$work/full.h5" --no-prefix-cache --quiet "$@"
  "$bin/tests/compare_logits" "$work/out_$out.h5" "$work/full.h5" --rtol 1e-4
  "$PYTHON" - "$work/out_$out.h5" "$work/full.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
if "hidden_states" in b:
    d = np.abs(a["hidden_states"][:] - b["hidden_states"][:]).max()
    assert d < 1e-4, f"hidden states differ by {d}"
    print(f"hidden states within {d:.2g} of the full computation")
PY
  rm -f "$work/full.h5"
}
entries() { find "$store" -mindepth 1 -maxdepth 1 -type d ! -name '.incoming-*' | wc -l; }
no_incoming() { [ -z "$(find "$store" -maxdepth 1 -name '.incoming-*')" ] || fail "an .incoming directory was left behind"; }
reused() { "$PYTHON" -c "import h5py,sys; print(' '.join(map(str, h5py.File(sys.argv[1])['reused_tokens'][:])))" "$work/out_$1.h5"; }

case $case in
  reuse | mla_reuse)
    run_a a
    [ "$(entries)" -eq 3 ] || fail "run A stored $(entries) entries, expected 3"
    run_b b 4 --pp 2 --tp 2 --hidden-states last
    grep -q "^prefix reuse: .*(288 loaded from --kv-store)" "$work/b.log" || fail "the document was not loaded from the store"
    [ "$(reused b)" = "288 0 96" ] || fail "reused tokens $(reused b), expected 288 0 96"
    same_results b 4 --pp 2 --tp 2 --hidden-states last
    [ "$(entries)" -eq 6 ] || fail "the store holds $(entries) entries after B, expected 6"
    no_incoming ;;
  damaged)
    run_a a
    # Both entries that hold the document (340 and 325 tokens): B falls back from one to the other.
    first=$(find "$store"/*-340 -name 'stage01_tp01.safetensors')
    second=$(find "$store"/*-325 -name 'stage00_tp00.safetensors')
    "$PYTHON" - "$first" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, 2)
    byte = f.read(1)
    f.seek(-100, 2)
    f.write(bytes([byte[0] ^ 0x40]))
PY
    truncate -s -8 "$second"
    run_b b 4 --pp 2 --tp 2
    grep -q "^warning: --kv-store: not using .*-340 .*stage01_tp01.*checksum" "$work/b.log" ||
      fail "the changed byte was not named"
    grep -q "^warning: --kv-store: not using .*-325 .*stage00_tp00.*outside the data section" "$work/b.log" ||
      fail "the truncated file was not named"
    ! grep -q "loaded from --kv-store" "$work/b.log" || fail "a damaged entry was loaded"
    same_results b 4 --pp 2 --tp 2
    # A computes the same prompts again: its copies replace the damaged entries.
    pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/a.h5" --output "$work/out_a2.h5" --kv-store "$store" \
      --quiet 2>"$work/a2.err" || { cat "$work/a2.err"; fail "run A again failed"; }
    run_b b2 4 --pp 2 --tp 2
    ! grep -q "^warning" "$work/b2.log" || fail "the damaged entries were not replaced"
    grep -q "loaded from --kv-store" "$work/b2.log" || fail "nothing was loaded after the replacement"
    [ -z "$(find "$store" -maxdepth 1 -name '.replaced-*')" ] || fail "a replaced entry was left aside" ;;
  resume_hidden_mean)
    "$PYTHON" - "$work" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(9)
doc = list(rng.integers(0, 512, 600))
for name, prompts in (("d", [doc]), ("r", [doc + list(rng.integers(0, 512, 2400)), doc + list(rng.integers(0, 512, 40))])):
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        f["tokens"] = np.concatenate([np.array(p, np.int32) for p in prompts])
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
PY
    mean=(run --model "$model" --chunk-size 16 --page-size 16 --hidden-states mean)
    pipefill_mpi 1 "${mean[@]}" --input "$work/d.h5" --output "$work/d_out.h5" --kv-store "$store" --quiet
    # (Slowed to 10 ms a micro-batch, so that the stop lands inside the first prompt.)
    PIPEFILL_TEST_MICRO_BATCH_DELAY_MS=10 start_run "$work/first.log" 1 "${mean[@]}" --progress-interval 0.05 \
      --input "$work/r.h5" --output "$work/out_r.h5" --kv-store "$store"
    wait_until 120 "a first progress line" grep -q '^progress:' "$work/first.log"
    signal_run USR1 mpirun
    finish_run
    expect_status 75 "a stop inside the first prompt"
    pipefill_mpi 1 "${mean[@]}" --input "$work/r.h5" --output "$work/out_r.h5" --kv-store "$store" --resume \
      >"$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "the resume failed"; }
    grep -E "^(resuming|prefix reuse)" "$work/resumed.log"
    grep -q "^resuming prompt 0 at token" "$work/resumed.log" || fail "the stop did not land inside the first prompt"
    grep -q "(592 loaded from --kv-store)" "$work/resumed.log" &&
      [ "$("$PYTHON" -c "import h5py,sys; print(h5py.File(sys.argv[1])['reused_tokens'][1])" "$work/out_r.h5")" -eq 592 ] ||
      fail "the second prompt did not load the document from the store after the resume"
    pipefill_mpi 1 "${mean[@]}" --input "$work/r.h5" --output "$work/full.h5" --no-prefix-cache --quiet
    "$PYTHON" - "$work/out_r.h5" "$work/full.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
d = np.abs(a["hidden_states"][:] - b["hidden_states"][:]).max()
assert d < 1e-4, f"mean hidden states differ by {d}"
print(f"mean hidden states within {d:.2g} of the full computation")
PY
    ;;
  kept_parents)
    "$PYTHON" - "$work" <<'PY'
import sys, zlib, h5py, numpy as np
def seq(name, n):  # the same tokens for the same name in every file
    return np.random.default_rng(zlib.crc32(name.encode())).integers(0, 512, n)
def write(name, prompts):
    ps = [np.concatenate([seq(n, k) for n, k in p]) for p in prompts]
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        f["tokens"] = np.concatenate(ps).astype(np.int32)
        f["offsets"] = np.cumsum([0] + [len(p) for p in ps]).astype(np.int64)
ax = [("a", 37), ("x", 5)]
write("one", [ax])
write("two", [ax, ax])
write("q", [ax + [("t", 3)]])
write("y", [ax, ax + [("u", 9)]])
write("z", [ax + [("u", 9), ("r", 3)]])
PY
    small=(run --model "$model" --chunk-size 16 --page-size 8 --quiet --overwrite)
    # Duplicates over a damaged entry.
    pipefill_mpi 1 "${small[@]}" --input "$work/one.h5" --output "$work/o1.h5" --kv-store "$store"
    "$PYTHON" - "$(find "$store" -name 'stage00_tp00.safetensors')" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, 2)
    byte = f.read(1)
    f.seek(-100, 2)
    f.write(bytes([byte[0] ^ 1]))
PY
    pipefill_mpi 1 "${small[@]}" --input "$work/two.h5" --output "$work/o2.h5" --kv-store "$store" 2>"$work/two.err" ||
      { cat "$work/two.err"; fail "the batch with a duplicate failed"; }
    for index in "$store"/*/index.json; do
      ! grep -q "\"parent\": \"$(basename "$(dirname "$index")")\"" "$index" || fail "$index names itself as parent"
    done
    "$PYTHON" "$here/../../scripts/kv_store.py" verify "$store" || fail "an entry fails verify after the duplicate"
    rm -rf "$store" && mkdir "$store"
    # A parent kept from another run, which holds its own rows from position 40 only.
    for input in q one; do pipefill_mpi 1 "${small[@]}" --input "$work/$input.h5" --output "$work/o.h5" --kv-store "$store"; done
    pipefill_mpi 1 "${small[@]}" --input "$work/y.h5" --output "$work/o.h5" --kv-store "$store" --logprobs 2>/dev/null
    child=$(find "$store" -maxdepth 1 -name '*-51')
    grep -q '"parent": ".*-45"' "$child/index.json" || { cat "$child/index.json"; fail "the child does not name the entry holding its rows"; }
    "$PYTHON" "$here/../../scripts/kv_store.py" verify "$store" || fail "an entry fails verify"
    # Leftovers of removals a kill cut short, then a run that uses the chain.
    mkdir -p "$store/.evicting-99999-x/prompt-000000" "$store/.replaced-x-99999" "$store/.deleting-x-99999"
    pipefill_mpi 1 "${small[@]}" --input "$work/z.h5" --output "$work/o4.h5" --kv-store "$store" 2>"$work/z.err"
    ! grep -q "^warning" "$work/z.err" || { cat "$work/z.err"; fail "a warning about the kept chain"; }
    [ "$("$PYTHON" -c "import h5py,sys; print(h5py.File(sys.argv[1])['reused_tokens'][0])" "$work/o4.h5")" -gt 0 ] ||
      fail "the chain lent nothing"
    [ -z "$(find "$store" -maxdepth 1 \( -name '.evicting-*' -o -name '.replaced-*' -o -name '.deleting-*' \))" ] ||
      fail "entries moved aside for removal were left" ;;
  edited_ids)
    run_a a
    # The 70-token entry's ids changed; the two document entries' ids and index swapped (each
    # pair agrees with itself, not with the entry's name). Each warning says what is wrong.
    "$PYTHON" - "$(echo "$store"/*-70)/tokens.i32" <<'PY'
import sys, numpy as np
ids = np.fromfile(sys.argv[1], "<i4")
ids[5] = (ids[5] + 1) % 512
ids.tofile(sys.argv[1])
PY
    a=$(echo "$store"/*-340) b=$(echo "$store"/*-325)
    for f in tokens.i32 index.json; do mv "$a/$f" "$work/swap"; mv "$b/$f" "$a/$f"; mv "$work/swap" "$b/$f"; done
    run_b b 4 --pp 2 --tp 2
    grep -q "^warning: --kv-store: not using .*-70 (its tokens.i32 does not match the tokens_fnv1a of its index.json"       "$work/b.log" || fail "the edited ids were not named as such"
    for entry in 340 325; do
      grep -q "^warning: --kv-store: not using .*-$entry (its name does not match the tokens it holds" "$work/b.log" ||
        fail "the swapped entry -$entry was not named as such"
    done
    ! grep -q "loaded from --kv-store" "$work/b.log" || fail "a damaged entry was loaded"
    same_results b 4 --pp 2 --tp 2 ;;
  full)
    mkdir "$work/small"
    mount -t tmpfs -o size=400k tmpfs "$work/small" 2>/dev/null || { echo "cannot mount a tmpfs: skipped"; exit 77; }
    on_exit "umount '$work/small'"
    status_of pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/b.h5" --output "$work/out_b.h5" \
      --kv-store "$work/small" --quiet 2>"$work/b.err"
    cat "$work/b.err"
    expect_status 2 "a run whose store is full"
    [ "$(grep -c '^error:' "$work/b.err")" -eq 1 ] && grep -q "^error: --kv-store: cannot write" "$work/b.err" ||
      fail "not one error naming the write that failed"
    [ -e "$work/out_b.h5" ] || fail "the output did not survive the full store"
    [ -z "$(find "$work/small" -maxdepth 1 -name '.incoming-*')" ] || fail "a failed run left its .incoming behind" ;;
  other_layout)
    run_a a
    run_b b 1
    grep -q "^prefix reuse: .*(288 loaded from --kv-store)" "$work/b.log" || fail "pp 1 did not load the pp 2 x tp 2 entries"
    [ "$(reused b)" = "288 0 96" ] || fail "reused tokens $(reused b), expected 288 0 96"
    same_results b 1
    run_b b4 4 --pp 4
    grep -q "^prefix reuse: .*loaded from --kv-store" "$work/b4.log" || fail "pp 4 did not load the entries"
    same_results b4 4 --pp 4
    [ "$(entries)" -eq 6 ] || fail "the store holds $(entries) entries, expected 6 (each prompt once, whatever the layout)"
    [ "$(find "$store" -mindepth 1 -maxdepth 1 -type d ! -name '.*' | xargs -n1 basename | cut -d- -f1 | sort -u | wc -l)" -eq 1 ] ||
      fail "entries of one model and precision should sit under one key"
    no_incoming ;;
  shared)
    run_a a
    child=$(echo "$store"/*-325) parent=$(echo "$store"/*-340)
    "$PYTHON" - "$child" "$parent" <<'PY'
import json, os, sys
child, parent = sys.argv[1:3]
index = json.load(open(os.path.join(child, "index.json")))
assert index.get("parent") == os.path.basename(parent) and index.get("parent_tokens") == 288, index.get("parent")
size = lambda d: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs if f.endswith(".safetensors"))
# 37 of its 325 rows are its own: its files hold about a ninth of what the whole prompt takes.
assert size(child) * 6 < size(parent), (size(child), size(parent))
print(f"the shared prompt's entry holds {size(child)} bytes of KV, its parent {size(parent)}")
PY
    "$PYTHON" - "$work" <<'PY'
import sys, h5py, numpy as np
with h5py.File(f"{sys.argv[1]}/a.h5") as f:
    third = f["tokens"][f["offsets"][2]:f["offsets"][3]]
with h5py.File(f"{sys.argv[1]}/b.h5", "w") as f:
    f["tokens"] = np.concatenate([third, np.arange(20, dtype=np.int32)])
    f["offsets"] = np.array([0, len(third) + 20], np.int64)
PY
    run_b b 4 --pp 2 --tp 2
    grep -q "^prefix reuse: .*(320 loaded from --kv-store)" "$work/b.log" || fail "the chained entry was not loaded"
    same_results b 4 --pp 2 --tp 2 ;;
  hidden_mean)
    pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/a.h5" --output "$work/out_a.h5" --kv-store "$store" \
      --hidden-states mean --quiet
    [ "$(ls "$store"/*/prompt-*/hidden_rows.json | wc -l)" -eq 3 ] || fail "A did not keep its prompts' final-norm rows"
    run_b b 4 --pp 2 --tp 2 --hidden-states mean
    grep -q "^prefix reuse: .*(288 loaded from --kv-store)" "$work/b.log" || fail "a mean run loaded no prefix"
    [ "$(reused b)" = "288 0 96" ] || fail "reused tokens $(reused b), expected 288 0 96"
    same_results b 4 --pp 2 --tp 2 --hidden-states mean ;;
  rerun)
    run_a a
    "$PYTHON" - "$work" <<'PY'
import sys, h5py, numpy as np
with h5py.File(f"{sys.argv[1]}/a.h5") as f:
    first = f["tokens"][f["offsets"][0]:f["offsets"][1]]
extension = np.concatenate([first[:300], np.arange(30, dtype=np.int32)])
with h5py.File(f"{sys.argv[1]}/b.h5", "w") as f:
    f["tokens"] = np.concatenate([first, extension]).astype(np.int32)
    f["offsets"] = np.array([0, len(first), len(first) + len(extension)], np.int64)
PY
    run_b b 4 --pp 2 --tp 2
    grep -q "loaded from --kv-store" "$work/b.log" || fail "nothing was loaded"
    same_results b 4 --pp 2 --tp 2
    [ "$(entries)" -eq 4 ] || fail "the store holds $(entries) entries, expected 4 (the rerun prompt once)"
    grep -q '"parent"' "$(echo "$store"/*-330)/index.json" || fail "the extension stored its prefix again" ;;
  concurrent)
    ( run_a first ) & first=$!
    ( run_a second ) & second=$!
    wait $first || fail "the first concurrent run failed"
    wait $second || fail "the second concurrent run failed"
    [ "$(entries)" -eq 3 ] || fail "the store holds $(entries) entries, expected 3 (each once)"
    no_incoming
    run_b b 4 --pp 2 --tp 2
    grep -q "(288 loaded from --kv-store)" "$work/b.log" || fail "B did not load the concurrently published entry" ;;
  scores)
    pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/a.h5" --output "$work/out_a.h5" --kv-store "$store" \
      --logprobs --top-k 5 --quiet
    ls "$store"/*/prompt-*/scores.json >/dev/null || fail "A kept no token scores with its entries"
    run_b b 4 --pp 2 --tp 2 --logprobs --top-k 3
    grep -q "^prefix reuse: .*(288 loaded from --kv-store)" "$work/b.log" || fail "a scoring run loaded no prefix"
    pipefill_mpi 4 "${common[@]}" --pp 2 --tp 2 --input "$work/b.h5" --output "$work/full.h5" --no-prefix-cache \
      --logprobs --top-k 3 --quiet
    "$PYTHON" - "$work/out_b.h5" "$work/full.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
lp, ref = a["token_logprobs"][:], b["token_logprobs"][:]
assert np.array_equal(np.isnan(lp), np.isnan(ref)), "NaN at other positions"
d = np.nanmax(np.abs(lp - ref))
assert d < 1e-4, f"log-probs differ by {d}"
same = np.mean(a["topk_ids"][:] == b["topk_ids"][:])
assert same > 0.99, f"top-k ids agree on {same:.3f} only"
dk = np.abs(a["topk_logprobs"][:] - b["topk_logprobs"][:]).max()
assert dk < 1e-4, f"top-k log-probs differ by {dk}"
assert np.abs(a["nll_sum"][:] - b["nll_sum"][:]).max() < 1e-2
print(f"token rows of a run that loaded its prefix from the store: log-probs within {d:.2g}, top-3 ids {same:.3f} equal")
PY
    rm -f "$work/full.h5"
    run_b b8 4 --pp 2 --tp 2 --logprobs --top-k 8
    grep -q "^note: --kv-store: .* hold not all it scores (--logprobs, --top-k 8 or more)" "$work/b8.log" || fail "no note on the scores missing"
    ! grep -q "loaded from --kv-store" "$work/b8.log" || fail "a run asking for more top-k than stored loaded a prefix" ;;
  limit)
    run_a a
    [ "$(entries)" -eq 3 ] || fail "A stored $(entries) entries, expected 3"
    run_b b 4 --pp 2 --tp 2 --hidden-states last --kv-store-limit 1K
    grep -q "^kv store: removed [12] least recently used entr" "$work/b.log" || fail "no note of what was removed"
    grep -q "^warning: --kv-store .* over --kv-store-limit .* the rest is this run's own entries" "$work/b.log" ||
      fail "no warning that the store stays over its limit"
    [ "$(reused b | cut -d' ' -f1)" -gt 0 ] || fail "B did not load the document"
    same_results b 4 --pp 2 --tp 2 --hidden-states last
    # Left: B's three prompts and the entry it loaded; A's unrelated prompt is gone.
    [ "$(entries)" -eq 4 ] || { ls "$store"; fail "$(entries) entries left, expected 4"; }
    [ -z "$(find "$store" -maxdepth 1 -name '.evicting-*')" ] || fail "an eviction left its directory"
    run_b c 4 --pp 2 --tp 2 --hidden-states last
    [ "$(reused c | cut -d' ' -f1)" -gt 0 ] || fail "the store no longer serves the document" ;;
  context_parallel | mla_context_parallel)
    # Entries stored at cp 2 x tp 2 (each CP rank's rows gathered to CP rank 0, which writes the
    # files as one rank would) serve a pp 2 x tp 2 run; entries of a pp 2 x tp 2 run serve cp 2 x
    # tp 2 and pp 2 x cp 2 runs (each CP rank keeps its share of the loaded rows). There B's third
    # prompt loads its 96 tokens from the store: with CP, reuse in a batch stops at a chunk
    # boundary (64), the store's does not.
    pipefill_mpi 4 "${common[@]}" --cp 2 --tp 2 --input "$work/a.h5" --output "$work/out_a.h5" --kv-store "$store" \
      --quiet
    [ "$(entries)" -eq 3 ] || fail "run A at cp 2 stored $(entries) entries, expected 3"
    run_b b 4 --pp 2 --tp 2 --hidden-states last
    grep -q "^prefix reuse: .*(288 loaded from --kv-store)" "$work/b.log" || fail "pp 2 x tp 2 did not load cp 2 entries"
    [ "$(reused b)" = "288 0 96" ] || fail "reused tokens $(reused b), expected 288 0 96"
    same_results b 1 --hidden-states last
    rm -rf "$store" && mkdir "$store"
    run_a a2
    cp -a "$store" "$work/store_a"
    for layout in "--cp 2 --tp 2" "--pp 2 --cp 2"; do
      name=$(echo "$layout" | tr -d ' -')
      rm -rf "$store" && cp -a "$work/store_a" "$store"
      # shellcheck disable=SC2086  # (the layout's words)
      run_b "$name" 4 $layout --hidden-states last
      grep -q "^prefix reuse: .*(384 loaded from --kv-store)" "$work/$name.log" || fail "$layout did not load the entries"
      [ "$(reused "$name")" = "288 0 96" ] || fail "$layout: reused tokens $(reused "$name"), expected 288 0 96"
      same_results "$name" 1 --hidden-states last
      [ "$(entries)" -eq 6 ] || fail "$layout: the store holds $(entries) entries after B, expected 6"
      no_incoming
    done ;;
  *) fail "unknown case $case" ;;
esac
echo "Passed: $case"
