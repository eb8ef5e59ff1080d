#!/usr/bin/env bash
# `pipefill advise` against this machine: a profile of one rank (one thread) calibrates the
# model (advise --cost-model), advise predicts one rank and every 2-rank layout (pp 2, tp 2,
# cp 2) for one long prompt, and scripts/bench_context_parallel.sh measures the same runs.
# Prints predicted against measured time and the two rankings.
#
# usage: scripts/validate_advise_cpu.sh [LENGTH]   (default 8192; env MODELS ["smollm2 small"],
#        CHUNK [2048]; PROFILE_DIR keeps the profiles between calls)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
length=${1:-8192}
models=${MODELS:-"smollm2 small"} chunk=${CHUNK:-2048}
bin=${PIPEFILL_BIN:-build/pipefill}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
profiles=${PROFILE_DIR:-$work}
mkdir -p "$profiles"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; one prompt of $length tokens, chunk $chunk"

for model_name in $models; do
  case $model_name in
    smollm2) model=models/smollm2-135m ;;
    small) model=synthetic:small ;;
    *) echo "error: unknown model $model_name (smollm2 or small)" >&2; exit 2 ;;
  esac
  profile=$profiles/$model_name-$chunk-$length.json
  if [ ! -s "$profile" ]; then
    mpirun -n 1 --bind-to none "$bin" profile --model "$model" --threads 1 --chunk-size "$chunk" \
      --max-prefix "$length" --out "$profile" >"$work/profile.log" 2>&1 || { cat "$work/profile.log"; exit 1; }
  fi
  # Predicted: 1 device, then the 2-device layouts of one node.
  for devices in 1 2; do
    "$bin" advise --cost-model "$profile" --hardware cpu --nodes 1 --gpus-per-node "$devices" \
      --length "$length" --chunk-size "$chunk" --json
  done >"$work/predicted.jsonl"
  # Measured, in one run each (the bench's own table).
  MODELS=$model_name CHUNK=$chunk LAYOUTS="one pp2 tp2 cp2" scripts/bench_context_parallel.sh "$length" |
    tee "$work/measured.txt"
  /usr/bin/python3 - "$work/predicted.jsonl" "$work/measured.txt" "$model_name" <<'PY'
import json, re, sys
predicted = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = "one" if r["gpus"] == 1 else next(f"{cut}2" for cut in ("pp", "cp", "tp") if r[cut] == 2)
    predicted[name] = r["time_s"]
measured = {}
for line in open(sys.argv[2]):
    m = re.match(r"\S+\s+\d+\s+(one|pp2|tp2|cp2)\s+([0-9.]+)\s", line)
    if m:
        measured[m.group(1)] = float(m.group(2))
print(f"\n{sys.argv[3]}: advise's prediction against the measured run")
print(f"{'layout':<8} {'predicted s':>12} {'measured s':>11} {'error':>7}")
for name in ("one", "pp2", "tp2", "cp2"):
    if name in predicted and name in measured:
        p, m = predicted[name], measured[name]
        print(f"{name:<8} {p:12.2f} {m:11.2f} {100 * (p - m) / m:+6.1f}%")
    elif name in predicted or name in measured:
        print(f"{name:<8} {predicted.get(name, float('nan')):12.2f} {measured.get(name, float('nan')):11.2f}   (one side only)")
both = [n for n in ("pp2", "tp2", "cp2") if n in predicted and n in measured]
order = lambda table: " < ".join(sorted(both, key=lambda n: table[n]))  # noqa: E731
print(f"ranking, predicted: {order(predicted)}; measured: {order(measured)}")
PY
done
