#!/usr/bin/env bash
# CPU attention, pipefill's paths (portable sgemm, AVX2, AVX-512) against torch's CPU flash
# attention on the same shapes, one thread, in one run, beside the sgemm ceiling measured in it.
# usage: scripts/bench_attention.sh      (after a build; torch from scripts/setup_venv.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
scripts/setup_venv.sh >/dev/null
OPENBLAS_NUM_THREADS=1 build/bench/bench_kernels --benchmark_filter=ChunkAttention 2>&1 |
  awk '/^ceiling/ { print; next }
       /^BM_ChunkAttention/ { split($1, a, "/"); rate = $0; sub(/.*GFLOP\/s=/, "", rate); sub(/\/s.*/, "", rate)
         of = $0; sub(/.*of_sgemm=/, "", of); sub(/\/s.*/, "", of)
         printf "pipefill %s %s %s %s: %.1f GFLOP/s (%.0f %% of sgemm)\n", a[2], a[3], $(NF-1), $NF, rate, 100 * of }'
"$python" scripts/attention_torch.py 1
