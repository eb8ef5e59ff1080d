#!/usr/bin/env bash
# The main job on the built-in default: installs what is missing, builds, generates prompts,
# and prefills them with mpirun on 4 ranks (pp 2 x tp 2) through the synthetic `tiny` model.
# Writes outputs/demo.h5 and the Chrome trace outputs/demo_trace.json, prints the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
source tests/mpi/mpi_env.sh  # root, oversubscription, shared-memory transport, 1 BLAS thread per rank

mkdir -p outputs
build/pipefill make-prompts --out outputs/demo_prompts.h5 --num 8 --min-len 512 --max-len 2048 --vocab 512 --seed 1
mpirun -n 4 build/pipefill run --model synthetic:tiny --input outputs/demo_prompts.h5 --output outputs/demo.h5 \
  --pp 2 --tp 2 --chunk-size 256 --trace outputs/demo_trace.json
echo "open outputs/demo_trace.json in https://ui.perfetto.dev to see the pipeline"
