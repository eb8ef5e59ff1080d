#!/usr/bin/env bash
# A profile of a Hugging Face model directory serves `run --backend emulate` and `simulate` of
# that same directory: the profile records config.json normalised, the emulator reads it as
# written (here with keys pipefill does not use), and the two are the same model by their
# costs. The profile's layer partition is the one emulated and simulated.
# usage: emulate_profile.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
cp -r "$data/tiny" "$work/m"
"$PYTHON" - "$work/m/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(torch_dtype="float32", transformers_version="4.99.0", use_cache=True)  # as save_pretrained writes
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
pipefill_mpi 2 profile --model "$work/m" --pp 2 --layer-partition 5,3 --chunk-size 64 --page-size 16 \
  --max-prefix 256 --profile-points 12 --out "$work/cost.json" >/dev/null
# What is checked is the profile's identity, not its fit: on a busy machine the tiny model's
# attention can time below the noise and fit a quadratic term <= 0, which the emulator refuses.
# Such a fit is made usable (its identity untouched).
"$PYTHON" - "$work/cost.json" <<'PY'
import json, sys
profile = json.load(open(sys.argv[1]))
for stage in profile["stages"]:
    for fit in (stage.get("prefix"), stage.get("sglang")):
        if fit and not fit.get("ok") and fit.get("problem") != "not profiled":
            fit.update(ok=True, a=max(abs(fit.get("a", 0.0)), 1e-12), b=abs(fit.get("b", 0.0)) or 1e-6,
                       c=abs(fit.get("c", 0.0)), gamma=abs(fit.get("gamma", 0.0)), problem="")
json.dump(profile, open(sys.argv[1], "w"))
PY
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 2 --min-len 100 --max-len 300 --vocab 512 --seed 3 >/dev/null
timeout 120 mpirun -n 2 "$bin/pipefill" run --backend emulate --model "$work/m" --input "$work/in.h5" \
  --output "$work/out.h5" --pp 2 --chunk-size 64 --page-size 16 --cost-model "$work/cost.json" | tee "$work/log"
grep -q "layers 5,3" "$work/log" || { echo "FAIL: the emulated run did not take the profile's partition"; exit 1; }
"$bin/pipefill" simulate --model-config "$work/m/config.json" --hardware cpu --pp 2 --length 300 --chunk-size 64 \
  --dynamic-chunking --cost-model "$work/cost.json" | tee "$work/sim"
grep -q "layers 5,3" "$work/sim" || { echo "FAIL: simulate did not take the profile's partition"; exit 1; }
echo "emulate and simulate take a profile of the same model directory, with its partition"
