#!/usr/bin/env bash
# Fixture: a real cost profile of the tiny model at pp 2 (`pipefill profile`), then with its
# coefficients replaced by fixed ones, so that the dynamic plans in the tests are
# deterministic (timings on a shared machine are not) and really vary the chunk size.
# usage: make_cost_model.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
pipefill_mpi 2 profile --model "$data/tiny" --pp 2 --chunk-size 128 --page-size 16 \
  --max-prefix 300 --profile-points 12 --out "$data/cost_measured.json"
"$PYTHON" - "$data/cost_measured.json" "$data/cost_tiny_pp2.json" "$data/cost_tiny_pp2_overhead.json" <<'PY'
import copy, json, sys
profile = json.load(open(sys.argv[1]))
assert len(profile["stages"]) == 2, "both stages profiled"
for stage in profile["stages"]:
    stage["sglang"].update(ok=True, a=1e-6, b=1e-5, c=0.0, gamma=0.0)
    # No per-chunk constant: the pipefill policy's smaller chunks then cost nothing extra, so the
    # cost model predicts its plan faster than fixed chunks and the run keeps it (what these
    # tests exercise).
    stage["prefix"].update(ok=True, a=1e-6, b=1e-5, c=0.0, gamma=1e-7)
json.dump(profile, open(sys.argv[2], "w"), indent=2)
# The same with 10 ms a chunk: the pipefill policy's extra chunks now cost more than its
# shorter drain saves, so the run must keep fixed chunks and say so.
for stage in profile["stages"]:
    stage["prefix"].update(c=1e-2)
json.dump(profile, open(sys.argv[3], "w"), indent=2)
PY
