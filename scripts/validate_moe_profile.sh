#!/usr/bin/env bash
# A real MoE model's cost, three ways, on one long prompt through pp 2: the cpu run itself
# (TTFT), `run --backend emulate` sleeping the real model's profile (real MPI, schedule and
# message sizes), and `pipefill simulate` with the same profile. The profile is measured first
# by `pipefill profile` on the same model and layout. Prints the three TTFTs and the
# emulator's and simulator's differences from each other and from the real run.
# usage: scripts/validate_moe_profile.sh [MODEL=synthetic:small-moe] [TOKENS=4096]   (env CHUNK, default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
model=${1:-synthetic:small-moe} tokens=${2:-4096} chunk=${CHUNK:-512}
bin=${PIPEFILL_BIN:-build/pipefill}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
"$bin" make-prompts --out "$work/in.h5" --num 1 --min-len "$tokens" --max-len "$tokens" --vocab 500 >/dev/null
mpirun -n 2 "$bin" profile --model "$model" --pp 2 --chunk-size "$chunk" --max-prefix "$tokens" \
  --out "$work/profile.json" | tail -1
flags=(--pp 2 --chunk-size "$chunk" --chunk-policy pipefill --cost-model "$work/profile.json")
ttft() { grep -oP 'ttft_s: \K[0-9.]+' | head -1; }
real=$(mpirun -n 2 "$bin" run --model "$model" --input "$work/in.h5" --output "$work/real.h5" --overwrite "${flags[@]}" | ttft)
emulated=$(mpirun -n 2 "$bin" run --backend emulate --model "$model" --input "$work/in.h5" --output "$work/emu.h5" --overwrite \
           "${flags[@]}" | ttft)
simulated=$("$bin" simulate --model-config "$model" --hardware cpu --length "$tokens" "${flags[@]}" | ttft)
/usr/bin/python3 - "$real" "$emulated" "$simulated" <<'PY'
import sys
real, emulated, simulated = map(float, sys.argv[1:])
print(f"TTFT: real {real:.2f} s, emulated {emulated:.2f} s, simulated {simulated:.2f} s")
print(f"simulated vs emulated {100 * (simulated - emulated) / emulated:+.1f} %, "
      f"emulated vs real {100 * (emulated - real) / real:+.1f} %, simulated vs real {100 * (simulated - real) / real:+.1f} %")
PY
