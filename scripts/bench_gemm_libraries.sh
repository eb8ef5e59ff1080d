#!/usr/bin/env bash
# The GEMM libraries a CPU build could use, measured on pipefill's projection shapes in one
# process: OpenBLAS as Debian ships it (its own run-time dispatch picks the kernels: on AVX-512
# CPUs SkylakeX or Cooperlake), the same forced to its Haswell (AVX2) kernels, BLIS 0.9 and
# oneDNN 2.6 from Debian. The candidates are fetched as .deb files and unpacked into the
# cache, never installed: nothing on the machine changes. docs/choices.md has the verdict.
# usage: scripts/bench_gemm_libraries.sh [THREADS]   (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
libs=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}/gemm-libraries
if [ ! -e "$libs/root/usr/lib/x86_64-linux-gnu/libdnnl.so.2" ]; then
  mkdir -p "$libs"
  (cd "$libs" && apt-get download libblis4-pthread libdnnl2 >/dev/null 2>&1 && for deb in *.deb; do dpkg -x "$deb" root; done)
fi
lib=$libs/root/usr/lib/x86_64-linux-gnu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O2 -o "$work/gemm_libraries" bench/gemm_libraries.cpp -ldl
openblas=/usr/lib/x86_64-linux-gnu/libopenblas.so.0
echo "OpenBLAS picks: $(OPENBLAS_VERBOSE=2 "$work/gemm_libraries" 1 x="$openblas" 2>&1 | grep -oiE 'core: *[a-z0-9]+' | head -1 || true)"
export OMP_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads
"$work/gemm_libraries" "$threads" openblas="$openblas" blis="$lib/blis-pthread/libblis.so.4" onednn="$lib/libdnnl.so.2"
echo "OpenBLAS with OPENBLAS_CORETYPE=Haswell (its AVX2 kernels):"
OPENBLAS_CORETYPE=Haswell "$work/gemm_libraries" "$threads" openblas-haswell="$openblas" | tail -n +2
