#!/usr/bin/env bash
# The peers of the CPU benchmark (scripts/bench_peers.sh): llama.cpp through llama-cpp-python,
# which PyPI ships only as source. It is built once (about 20 min on 2 cores, llama.cpp's own
# CPU kernels for this machine: GGML_NATIVE) into a wheel cached in ~/.cache/pipefill/wheels,
# then installed into the venv of scripts/setup_venv.sh (transformers and torch are there).
# Not part of scripts/setup.sh nor of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_venv.sh >/dev/null
venv=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}
wheels=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}/wheels
version=0.3.36
if "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
  exit 0
fi
mkdir -p "$wheels"
if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version from source (about 20 min on 2 cores; once)"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$venv/bin/pip" wheel --no-deps --wheel-dir "$wheels" "llama-cpp-python==$version"
fi
# Its run-time dependencies from PyPI first (the venv has all but diskcache), then the wheel.
"$venv/bin/pip" install --quiet "diskcache>=5.6.1"
"$venv/bin/pip" install --quiet --no-index --find-links "$wheels" "llama-cpp-python==$version"
