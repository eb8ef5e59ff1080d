#!/usr/bin/env bash
# Installs the Debian packages pipefill needs to build, test and plot, then the Python
# environment of its text tools and reference tests (scripts/setup_venv.sh: tokenizers,
# transformers and a CPU torch, outside the checkout). Idempotent: what is present is skipped,
# so a second run costs a dpkg query and an import check.
set -euo pipefail

packages=(
  cmake g++ make pkg-config time
  openmpi-bin libopenmpi-dev            # MPI runtime + headers (the SPMD launcher)
  libhdf5-openmpi-dev hdf5-tools        # parallel HDF5 (inputs and outputs), h5dump for debugging
  libcxxopts-dev nlohmann-json3-dev     # option table, config.json / safetensors headers
  libopenblas-dev                       # sgemm for every projection on the CPU backend
  libgtest-dev libgmock-dev libbenchmark-dev  # unit tests and micro-benchmarks
  python3-numpy python3-h5py            # independent numpy reference (tests only)
  python3-venv                          # the venv of scripts/setup_venv.sh
  python3-matplotlib                    # timeline and scaling plots (scripts/plot_*.py)
  slurm-wlm munge                       # a real single-node Slurm for tests/slurm
  clang libclang-rt-14-dev              # libFuzzer + sanitizers for tests/fuzz
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: packages done"
fi
# The Debian interpreter, which python3-venv serves (not whatever python3 comes first on PATH).
PIPEFILL_PYTHON=${PIPEFILL_PYTHON:-/usr/bin/python3} "$(dirname "$0")/setup_venv.sh"
