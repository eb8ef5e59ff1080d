#!/usr/bin/env bash
# `plan` shows the chunks `run` computes, for the pipefill policy too: with a profile under
# which its plan is predicted faster (kept) and one under which fixed chunks are (run keeps
# those, and plan and simulate must say and show the same). Compared: plan --json against
# run's /timeline (stage 0's chunks of each prompt), and simulate's header.
# usage: plan_matches_run.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
lengths=$("$PYTHON" -c 'import sys, h5py, numpy as np; o = h5py.File(sys.argv[1], "r")["offsets"][:]
print(" ".join("--length %d" % n for n in np.diff(o)))' "$data/prompts.h5")
chunking=(--pp 2 --chunk-policy pipefill --chunk-size 128 --page-size 16 --smooth-factor 0.6)
for profile in cost_tiny_pp2 cost_tiny_pp2_overhead; do
  # shellcheck disable=SC2086
  "$bin/pipefill" plan $lengths "${chunking[@]}" --cost-model "$data/$profile.json" --json >"$work/plan.json" \
    2>"$work/plan.stderr"
  MPI_TIMEOUT=120 pipefill_mpi 2 run --model "$data/tiny" --input "$data/prompts.h5" --output "$work/out.h5" \
    --overwrite --no-prefix-cache "${chunking[@]}" --cost-model "$data/$profile.json" --quiet 2>"$work/run.stderr"
  # shellcheck disable=SC2086
  "$bin/pipefill" simulate --model-config "$data/tiny" $lengths "${chunking[@]}" --cost-model "$data/$profile.json" \
    --hardware cpu >"$work/sim.txt" 2>&1
  "$PYTHON" - "$work/plan.json" "$work/out.h5" "$work/sim.txt" "$profile" <<'PY' || fail "$profile: plan, run and simulate disagree"
import json, sys, h5py, numpy as np
planned = [p["chunks"] for p in json.load(open(sys.argv[1]))]
with h5py.File(sys.argv[2], "r") as f:
    used = f.attrs["chunk_policy_used"]
    used = used.decode() if isinstance(used, bytes) else str(used)
    t = f["timeline"][:]
    names = f["timeline"].attrs["kind_names"]
    kinds = (names.decode() if isinstance(names, bytes) else str(names)).split(",")
rows = t[(t["stage"] == 0) & (t["tp_rank"] == 0) & (t["kind"] == kinds.index("compute"))]
ran = [[int(n) for n in rows[rows["prompt"] == p]["chunk_length"]] for p in range(len(planned))]
assert ran == planned, (sys.argv[4], "run", ran, "plan", planned)
header = open(sys.argv[3]).readline()
want = "fixed" if sys.argv[4].endswith("overhead") else "pipefill"
assert used == want, (sys.argv[4], used)
assert f"chunk 128 ({want})" in header, header
print(f"{sys.argv[4]}: run, plan and simulate agree: {want}, {sum(len(c) for c in ran)} chunks")
PY
done
grep -q "^note: fixed chunks kept: predicted" "$work/plan.stderr" || fail "plan does not say it kept fixed chunks"
