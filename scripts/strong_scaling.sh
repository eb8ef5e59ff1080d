#!/usr/bin/env bash
# Strong-scaling sweep: P (at a fixed TP), fixed chunk sizes and dynamic chunking, on one
# long prompt and on a batch of 16. Writes a CSV (config, time, tokens/s, speedup,
# efficiency T(1)/(P T(P)), bubble) and, when matplotlib is there, a plot beside it.
#
#   MODE=simulate (default): `pipefill simulate`, seconds for the whole sweep.
#   MODE=emulate:            `mpirun ... pipefill run --backend emulate`, real MPI and message
#                            sizes, compute slept for the cost model's time (wall time = TTFT).
#
# Environment (defaults in brackets): MODEL [configs/qwen3-235b-a22b-fp8.json], HARDWARE [h20],
# TP [4], PPS ["1 2 4 8"], LENGTH [131072], BATCH [16], FIXED ["6144"], DYNAMIC ["18432"],
# SMOOTH [0.75], OUT [outputs/scaling.csv], FP8 [keep: an FP8 checkpoint's matmuls at the fp8 rate]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${MODE:-simulate}
model=${MODEL:-configs/qwen3-235b-a22b-fp8.json} hardware=${HARDWARE:-h20} tp=${TP:-4}
pps=${PPS:-"1 2 4 8"} length=${LENGTH:-131072} batch=${BATCH:-16}
fixed=${FIXED:-6144} dynamic=${DYNAMIC:-18432} smooth=${SMOOTH:-0.75}
out=${OUT:-outputs/scaling.csv}
bin=${PIPEFILL_BIN:-build/pipefill}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ "$mode" = emulate ] && source tests/mpi/mpi_env.sh

# run_case WORKLOAD PP POLICY CHUNK -> "time_s tokens_per_s bubble"
run_case() {
  local workload=$1 pp=$2 policy=$3 chunk=$4 count=1
  [ "$workload" = batch ] && count=$batch
  local flags=(--pp "$pp" --tp "$tp" --chunk-size "$chunk")
  [ "$policy" = fixed ] || flags+=(--chunk-policy "$policy" --smooth-factor "$smooth")
  if [ "$mode" = simulate ]; then
    local lengths=()
    for _ in $(seq "$count"); do lengths+=(--length "$length"); done
    local fp8=()  # an FP8 checkpoint's matmuls at the fp8 rate, as the emulator's analytic costs run them
    grep -q '"quant_method": *"fp8"' "$model" 2>/dev/null && fp8=(--fp8 "${FP8:-keep}")
    "$bin" simulate --model-config "$model" --hardware "$hardware" "${lengths[@]}" "${flags[@]}" \
      --wire-bytes "${WIRE_BYTES:-4}" ${fp8[@]+"${fp8[@]}"} --json |
      /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(d['makespan_s'], d['tokens_per_s'], d['bubble'])"
  else
    "$bin" make-prompts --out "$work/in.h5" --num "$count" --min-len "$length" --max-len "$length" --vocab 1000 >/dev/null
    mpirun -n $((pp * tp)) "$bin" run --backend emulate --cost-model "analytic:$hardware" --model "$model" \
      --input "$work/in.h5" --output "$work/out.h5" --overwrite "${flags[@]}" --quiet --allow-long-prompts
    /usr/bin/python3 - "$work/out.h5" "$length" "$count" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    t, wall = f["timeline"][:], float(f.attrs["wall_s"])
    pp = int(f.attrs["pp"])
busy = [((t["t_end_s"] - t["t_start_s"])[(t["stage"] == s) & np.isin(t["kind"], [0, 4]) & (t["tp_rank"] == 0)]).sum() / wall
        for s in range(pp)]
print(wall, int(sys.argv[2]) * int(sys.argv[3]) / wall, 1 - np.mean(busy))
PY
  fi
}

echo "mode,model,hardware,workload,pp,tp,policy,chunk,smooth,time_s,tokens_per_s,speedup,efficiency,bubble" >"$out"
for workload in long batch; do
  for config in $(for c in $fixed; do echo "fixed:$c"; done; for c in $dynamic; do echo "sglang:$c pipefill:$c"; done); do
    policy=${config%%:*} chunk=${config##*:}
    base=""
    for pp in $pps; do
      read -r time tps bubble < <(run_case "$workload" "$pp" "$policy" "$chunk")
      [ -n "$base" ] || base=$time  # the first P of the sweep is the reference (P = 1 by default)
      first_pp=${pps%% *}
      row=$(/usr/bin/python3 -c "b,t,p,p0=$base,$time,$pp,$first_pp; s=b/t; print(f'{s:.4f},{s*p0/p:.4f}')")
      echo "$mode,$(basename "$model" .json),$hardware,$workload,$pp,$tp,$policy,$chunk,$smooth,$time,$tps,$row,$bubble" >>"$out"
      echo "$workload P=$pp $policy $chunk: $time s, speedup,efficiency = $row, bubble $bubble"
    done
  done
done
echo "wrote $out"
/usr/bin/python3 scripts/plot_scaling.py "$out" || echo "(no plot: matplotlib missing? run scripts/setup.sh)"
