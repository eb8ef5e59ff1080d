#!/usr/bin/env bash
# The GPU check, one call on a GPU machine: build, run the GPU tests, benchmark, print one
# table. The machine needs CUDA (nvcc, cuBLASLt), cmake and Python; what else the build
# needs travels as Debian packages in .gpu_deps/ (scripts/fetch_gpu_deps.sh, run where
# the package registry is reachable), unpacked here into a private prefix that only
# pipefill's own programs see (LD_LIBRARY_PATH is set for them alone).
#
#   1. GPU-only build (no MPI, no HDF5): kernel tests on the device and under the host
#      simulator, cuBLASLt and whole-stage tests against the CPU backend, the benchmark.
#   2. Full build with the carried Open MPI and HDF5: `pipefill run --backend cuda` end to
#      end against the CPU backend (pp1; pp2 and tp2 sharing the GPU over --transport mpi).
#
# usage: scripts/gpu_check.sh [--quick] [--skip-full]     writes $OUT (or outputs/gpu_check)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
quick="" skip_full=0
for arg in "$@"; do
  case $arg in
    --quick) quick=--quick ;;
    --skip-full) skip_full=1 ;;
    *) echo "usage: $0 [--quick] [--skip-full]" >&2; exit 2 ;;
  esac
done
out=${OUT:-$root/outputs/gpu_check}
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
jobs=$(nproc)
arch=x86_64-linux-gnu
started=$(date +%s)
declare -a summary
note() { summary+=("$1"); echo "== $1"; }
step() { echo; echo "== $(($(date +%s) - started)) s: $*"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -2

# ---- the carried packages, unpacked into a private prefix --------------------------
deps=/tmp/pipefill-deps
if ls .gpu_deps/*.deb >/dev/null 2>&1; then
  step "unpacking $(ls .gpu_deps/*.deb | wc -l) carried packages into $deps"
  mkdir -p "$deps"
  for deb in .gpu_deps/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$deps"
    else  # not a Debian-family image: a .deb is an ar archive holding data.tar.*
      member=$(ar t "$deb" | grep '^data.tar')
      case $member in
        *.xz) ar p "$deb" "$member" | tar -xJ -C "$deps" ;;
        *.zst) ar p "$deb" "$member" | tar --zstd -x -C "$deps" ;;
        *) ar p "$deb" "$member" | tar -xz -C "$deps" ;;
      esac
    fi || echo "could not unpack $deb"
  done
  # Absolute links point into /usr of the machine they were made for: re-point them here.
  find "$deps" -type l | while read -r link; do
    target=$(readlink "$link")
    case $target in /*) ln -sfn "$deps$target" "$link" ;; esac
  done
  # Debian's maintainer scripts (not run by dpkg-deb) would make these alternatives.
  ln -sfn openblas-pthread/libopenblas.so.0 "$deps/usr/lib/$arch/libopenblas.so.0"
  ln -sfn openblas-pthread/libopenblas.so "$deps/usr/lib/$arch/libopenblas.so"
  for tool in mpicc mpicxx mpirun mpiexec; do
    [ -e "$deps/usr/bin/$tool" ] || ln -sfn "$deps/usr/bin/$tool.openmpi" "$deps/usr/bin/$tool"
  done
else
  echo "no .gpu_deps/*.deb: using the machine's own packages (run scripts/fetch_gpu_deps.sh and carry .gpu_deps)"
fi
deplib="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-pthread:$deps/usr/lib/$arch/openmpi/lib:$deps/usr/lib/$arch/hdf5/openmpi"
ours() { LD_LIBRARY_PATH="$deplib:${LD_LIBRARY_PATH:-}" "$@"; }
# The linker must find what the carried libraries need (libgfortran for OpenBLAS, ...) in
# the prefix too, also in CMake's link checks.
prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_PATH="$deps/usr/lib/$arch/openblas-pthread"
             -DCMAKE_INCLUDE_PATH="$deps/usr/include/$arch/openblas-pthread"
             -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$deplib")

# ---- 1. GPU-only build: kernels, tests, benchmark ----------------------------------
step "GPU-only build"
if cmake -S . -B build-gpu -DPIPEFILL_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release "${prefix_args[@]}" >"$out/cmake-gpu.log" 2>&1 &&
   cmake --build build-gpu -j "$jobs" >"$out/build-gpu.log" 2>&1; then
  note "GPU-only build: ok"
  step "GPU tests (kernels on the device and in the simulator, cuBLASLt, whole stage)"
  if (cd build-gpu && ours ctest -j 4 --output-on-failure --timeout 600 >"$out/ctest-gpu.log" 2>&1); then
    note "GPU tests: $(grep -E 'tests passed' "$out/ctest-gpu.log") ($(grep -c '(Skipped)' "$out/ctest-gpu.log") skipped)"
  else
    note "GPU tests FAILED: $(grep -E 'tests passed|tests failed' "$out/ctest-gpu.log")"
    grep -E '(Failed|\*\*\*)' "$out/ctest-gpu.log" | head -20
  fi
  grep -hE "relative_error" build-gpu/Testing/Temporary/LastTest.log 2>/dev/null | head -8
  step "benchmark"
  ours build-gpu/bench/pipefill_cuda_bench $quick | tee "$out/bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] && note "benchmark: ok (table below)" || note "benchmark FAILED"
else
  note "GPU-only build FAILED (see $out/cmake-gpu.log, $out/build-gpu.log)"
  tail -30 "$out/build-gpu.log" "$out/cmake-gpu.log" 2>/dev/null
fi

# ---- 2. Full build and end-to-end runs through mpirun ------------------------------
if [ "$skip_full" = 0 ]; then
  step "full build (MPI, HDF5, NCCL)"
  export OPAL_PREFIX="$deps/usr"  # the carried Open MPI, relocated
  # NCCL: beside the toolkit, or else the nvidia-nccl wheel of the machine's Python.
  nccl_root=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  [ -n "$nccl_root" ] && deplib="$deplib:$nccl_root/lib"
  # Configure under the carried library path: FindMPI runs the carried mpicc wrapper.
  if ours cmake -S . -B build-full -DCMAKE_BUILD_TYPE=Release "${prefix_args[@]}" \
        -DMPI_C_COMPILER="$deps/usr/bin/mpicc" -DMPI_CXX_COMPILER="$deps/usr/bin/mpicxx" \
        -DHDF5_ROOT="$deps/usr/lib/$arch/hdf5/openmpi" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON \
        -DNCCL_ROOT="$nccl_root" >"$out/cmake-full.log" 2>&1 &&
     cmake --build build-full -j "$jobs" --target pipefill compare_logits cuda_probe >"$out/build-full.log" 2>&1; then
    note "full build: ok"
    step "end to end: pipefill run --backend cuda against the CPU backend"
    if (cd build-full && PATH="$deps/usr/bin:$PATH" PYTHON=$(command -v python3) ours ctest -L gpu -R e2e \
          --output-on-failure --timeout 900 >"$out/ctest-e2e.log" 2>&1); then
      note "end-to-end GPU runs: $(grep -E 'tests passed' "$out/ctest-e2e.log") ($(grep -c '(Skipped)' "$out/ctest-e2e.log") skipped)"
    else
      note "end-to-end GPU runs FAILED: $(grep -E 'tests passed|tests failed' "$out/ctest-e2e.log")"
      grep -E 'error|FAILED|mismatch' "$out/ctest-e2e.log" | head -20
    fi
  else
    note "full build FAILED (see $out/cmake-full.log, $out/build-full.log)"
    tail -20 "$out/cmake-full.log" "$out/build-full.log" 2>/dev/null
  fi
fi

echo
echo "== pipefill GPU check, $(($(date +%s) - started)) s"
for line in "${summary[@]}"; do echo "  - $line"; done
[ -f "$out/bench.txt" ] && sed -n '/^| figure/,$p' "$out/bench.txt"
