#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, references, MPI, bad inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
