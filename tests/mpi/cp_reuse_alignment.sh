#!/usr/bin/env bash
# Prefix reuse with --cp is rounded down to the source's chunk boundaries: a prompt that takes
# over another's prefix cut inside a chunk could hold both of a rank's pieces of that chunk,
# more than its share, beyond what each rank's KV pool is sized for. Prompt B shares 3600
# tokens with A (4096 tokens) and has 5632; with chunks of 2048 the reuse is 2048 tokens, B's
# logits equal a run without CP, and no rank's pool runs out.
# usage: cp_reuse_alignment.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
"$PYTHON" - "$work/in.h5" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(11)
a = rng.integers(0, 512, 4096, dtype=np.int32)
b = np.concatenate([a[:3600], rng.integers(0, 512, 2032, dtype=np.int32)])
with h5py.File(sys.argv[1], "w") as f:
    f["tokens"] = np.concatenate([a, b])
    f["offsets"] = np.array([0, 4096, 4096 + 5632], dtype=np.int64)
PY
args=(run --model "$data/tiny" --input "$work/in.h5" --chunk-size 2048 --page-size 64 --quiet)
pipefill_mpi 2 "${args[@]}" --cp 2 --output "$work/cp2.h5"
pipefill_mpi 1 "${args[@]}" --no-prefix-cache --output "$work/reference.h5"
"$bin/tests/compare_logits" "$work/cp2.h5" "$work/reference.h5" --rtol 1e-4
"$PYTHON" -c "import sys, h5py; r = h5py.File(sys.argv[1])['reused_tokens'][:]; assert list(r) == [0, 2048], r; print('reused', list(r))" \
  "$work/cp2.h5"
echo "Passed: the reuse rounded to a chunk boundary"

# With --kv-store: A loads its first 2048 tokens from the store (stored by a run of C, which
# shares 2100 with it), so B may not take its prefix from A (A's rows were split in load
# pieces); it loads the store's own offer for it instead (2048 tokens) rather than computing
# everything (before: 0 reused).
"$PYTHON" - "$work/store_in.h5" "$work/in2.h5" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(12)
a = rng.integers(0, 512, 4096, dtype=np.int32)
c = np.concatenate([a[:2100], rng.integers(0, 512, 100, dtype=np.int32)])
b = np.concatenate([a[:3600], rng.integers(0, 512, 400, dtype=np.int32)])
for path, prompts in ((sys.argv[1], [c]), (sys.argv[2], [a, b])):
    with h5py.File(path, "w") as f:
        f["tokens"] = np.concatenate(prompts)
        f["offsets"] = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
PY
store=(--kv-store "$work/store" --chunk-size 1024 --page-size 64 --quiet)
pipefill_mpi 1 run --model "$data/tiny" --input "$work/store_in.h5" --output "$work/stored.h5" "${store[@]}"
pipefill_mpi 2 run --model "$data/tiny" --input "$work/in2.h5" --output "$work/cp2_store.h5" "${store[@]}" --cp 2
pipefill_mpi 1 run --model "$data/tiny" --input "$work/in2.h5" --output "$work/reference2.h5" --chunk-size 1024 \
  --no-prefix-cache --quiet
"$bin/tests/compare_logits" "$work/cp2_store.h5" "$work/reference2.h5" --rtol 1e-4
"$PYTHON" -c "import sys, h5py; r = h5py.File(sys.argv[1])['reused_tokens'][:]; assert list(r) == [2048, 2048], r; print('reused', list(r))" \
  "$work/cp2_store.h5"
echo "Passed: a reuse from a loaded prompt falls back to the store's offer"

# A dynamic policy reuses nothing in the batch with CP (its chunk boundaries are not known when
# the pools are sized), but the reuse follows the plan's policy: with `--chunk-policy pipefill`
# the fixed plan, which does reuse, wins here (B's 3072 reused tokens are a third of the work),
# and keeps the reuse (it once lost it, aligned for the policy asked for).
args=(run --model "$data/tiny" --input "$work/in.h5" --chunk-size 1024 --page-size 64 --quiet)
pipefill_mpi 2 "${args[@]}" --cp 2 --chunk-policy pipefill --profile-points 9 --output "$work/cp2_pipefill.h5"
"$PYTHON" - "$work/cp2_pipefill.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1]) as f:
    reused, policy = list(f["reused_tokens"][:]), f.attrs["chunk_policy_used"]
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
print("policy", policy, "reused", reused)
assert policy == "fixed" and reused == [0, 3072], (policy, reused)
PY
pipefill_mpi 1 "${args[@]}" --no-prefix-cache --output "$work/reference3.h5"
"$bin/tests/compare_logits" "$work/cp2_pipefill.h5" "$work/reference3.h5" --rtol 1e-4
echo "Passed: the reuse follows the policy the plan settled on"
