#!/usr/bin/env bash
# A build without root and without the system's libraries, as on a cluster: Debian's own
# packages of every dependency are downloaded and unpacked into a prefix (no apt install, no
# root needed for `apt-get download` and `dpkg -x`), CMake is told to ignore /usr and / as
# search prefixes and finds MPI, parallel HDF5, OpenBLAS, cxxopts and nlohmann-json only from
# the prefix (CMAKE_PREFIX_PATH, MPI_CXX_COMPILER, HDF5_C_COMPILER_EXECUTABLE); the cpu-only
# binary is built and run on the prefix's MPI, and its logits must match the main build's.
# Also: a dependency left out is a configure error that says what to set.
# usage: no_root_build.sh SOURCE_DIR MAIN_BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 main_build=$2 work=$3
mkdir -p "$work"
cache=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}/debs
mkdir -p "$cache"
packages=(libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libhdf5-openmpi-dev libhdf5-openmpi-103-1
          libhdf5-openmpi-hl-100 libhdf5-openmpi-cpp-103-1 libhdf5-openmpi-fortran-102
          libhdf5-openmpi-hl-fortran-100 libhdf5-openmpi-hl-cpp-100 libopenblas-dev libopenblas0-pthread
          libopenblas-pthread-dev libopenblas0 libcxxopts-dev nlohmann-json3-dev)
for p in "${packages[@]}"; do
  compgen -G "$cache/${p}_*.deb" >/dev/null && continue
  (cd "$cache" && apt-get download "$p" >"$work/apt.log" 2>&1) ||
    { echo "FAIL: apt-get download $p (Debian 12's registry; see $work/apt.log):"; tail -3 "$work/apt.log"; exit 1; }
done
newest() { find "$cache" -name "${1}_*.deb" | sort -V | tail -1; }  # a cache kept across Debian updates
prefix=$work/prefix
rm -rf "$prefix" && mkdir -p "$prefix"
for p in "${packages[@]}"; do dpkg -x "$(newest "$p")" "$prefix"; done
P=$prefix/usr
# Debian's h5pcc names its install prefix; a relocated copy (what a module provides) names its own.
sed -i "s|^prefix=\"/usr\"|prefix=\"$P\"|" "$P/bin/h5pcc.openmpi"
export OPAL_PREFIX=$P  # Open MPI's wrappers and mpirun find their files under it
export LD_LIBRARY_PATH=$P/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu/openblas-pthread:$P/lib/x86_64-linux-gnu/openmpi/lib
export PATH=$P/bin:$PATH
hide=(-DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local;/")
deps=(-DCMAKE_PREFIX_PATH="$P;$P/lib/x86_64-linux-gnu/openblas-pthread" -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi"
      -DMPI_C_COMPILER="$P/bin/mpicc.openmpi" -DHDF5_C_COMPILER_EXECUTABLE="$P/bin/h5pcc.openmpi")
# -O0 without debug information: what is tested is where the dependencies come from; an
# optimised build takes twice as long, -g 15 % more (152 s of a CI run on Zen 3 with -g). Its
# logits match the main (Release) build's to float32 rounding.
options=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0 -DPIPEFILL_WITH_CUDA=OFF -DPIPEFILL_BUILD_TESTS=OFF -DPIPEFILL_BUILD_BENCH=OFF)

# A dependency CMake cannot see: one message that says what to set.
rm -rf "$work/missing"
if cmake -S "$src" -B "$work/missing" "${options[@]}" "${hide[@]}" -DCMAKE_PREFIX_PATH="$P" \
     -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" -DMPI_C_COMPILER="$P/bin/mpicc.openmpi" \
     -DHDF5_C_COMPILER_EXECUTABLE="$P/bin/h5pcc.openmpi" -DCMAKE_IGNORE_PATH="$P/share/cmake/nlohmann_json" \
     >"$work/missing.log" 2>&1; then
  echo "FAIL: configure succeeded without nlohmann-json"; exit 1
fi
grep -q "pipefill needs nlohmann-json" "$work/missing.log" && grep -q "CMAKE_PREFIX_PATH" "$work/missing.log" ||
  { echo "FAIL: the missing dependency is not named with what to set:"; tail -20 "$work/missing.log"; exit 1; }
echo "ok: a missing nlohmann-json is named, with what to set"

rm -rf "$work/build"
cmake -S "$src" -B "$work/build" "${options[@]}" "${hide[@]}" "${deps[@]}" >"$work/configure.log"
# Every dependency from the prefix, none from the system.
for key in MPI_C_LIB_NAMES MPI_mpi_LIBRARY HDF5_C_LIBRARY_hdf5 BLAS_openblas_LIBRARY cxxopts_DIR nlohmann_json_DIR CBLAS_INCLUDE_DIR; do
  value=$(grep -E "^$key(:[A-Z]+)?=" "$work/build/CMakeCache.txt" | cut -d= -f2- || true)
  [ -z "$value" ] && continue
  case $value in "$prefix"*|mpi) echo "ok: $key = $value" ;; *) echo "FAIL: $key = $value is not in the prefix"; exit 1 ;; esac
done
cmake --build "$work/build" -j "$(nproc)" --target pipefill >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; exit 1; }
ldd "$work/build/pipefill" | grep -E "libmpi|libhdf5|libopenblas" | tee "$work/ldd.txt"
if grep -E "libmpi|libhdf5|libopenblas" "$work/ldd.txt" | grep -vq "$prefix"; then
  echo "FAIL: the binary loads a system library"; exit 1
fi

# The same run on the prefix's MPI and on the main build: the same logits.
"$work/build/pipefill" make-prompts --out "$work/prompts.h5" --num 3 --min-len 20 --max-len 80 --vocab 512 --seed 3 >/dev/null
run() {  # BINARY MPIRUN OUT
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    "$2" -n 2 "$1" run --model synthetic:tiny --input "$work/prompts.h5" --output "$3" --overwrite --pp 2 \
    --chunk-size 32 --page-size 16 --quiet
}
run "$work/build/pipefill" "$P/bin/mpiexec.openmpi" "$work/prefix_build.h5"
env -u OPAL_PREFIX -u LD_LIBRARY_PATH PATH=/usr/bin:/bin bash -c "$(declare -f run); work=$work; run '$main_build/pipefill' /usr/bin/mpirun '$work/main_build.h5'"
"$main_build/tests/compare_logits" "$work/prefix_build.h5" "$work/main_build.h5" --rtol 1e-5
echo "ok: built from the prefix alone, its logits within 1e-5 of the main (Release) build's"
