#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that the build needs beyond CUDA, into
# .gpu_deps/, for a GPU machine that has CUDA, cmake and Python but no MPI, HDF5, BLAS or
# test libraries and no network. scripts/gpu_check.sh unpacks them into a private prefix
# there. Run it here (Debian 12 with the project's packages installed: scripts/setup.sh):
# the runtime libraries are found from what pipefill and Open MPI's plugins actually load.
#   scripts/fetch_gpu_deps.sh [--gpu-only]     (--gpu-only: kernels, tests and benchmark only)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu_deps
mkdir -p "$dest"
arch=x86_64-linux-gnu

# Build-time packages: headers, CMake configs, static test libraries.
packages=(libgtest-dev nlohmann-json3-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas-dev)
libs=(/usr/lib/$arch/openblas-pthread/libopenblas.so.0)
if [ "${1:-}" != "--gpu-only" ]; then
  packages+=(libcxxopts-dev libopenmpi-dev openmpi-bin openmpi-common libopenmpi3 libhdf5-openmpi-dev
             libhdf5-openmpi-103-1 libhdf5-openmpi-dev hdf5-helpers)
  libs+=(/usr/lib/$arch/libmpi.so.40 /usr/lib/$arch/hdf5/openmpi/libhdf5.so /usr/bin/orterun /usr/bin/orted
         /usr/lib/$arch/openmpi/lib/openmpi3/*.so /usr/lib/$arch/pmix2/lib/pmix/*.so)
fi
# Runtime libraries those load, by package; the C/C++ runtime itself is the GPU machine's.
for lib in "${libs[@]}"; do
  [ -e "$lib" ] || continue
  ldd "$lib" 2>/dev/null | awk '$3 ~ /^\// {print $3}'
done | sort -u | xargs -r -n1 readlink -f | (xargs -r dpkg -S 2>/dev/null || true) | cut -d: -f1 | sort -u \
  >"$dest/.runtime"
mapfile -t runtime < <(grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|libcrypt1|zlib1g' "$dest/.runtime")
all=($(printf '%s\n' "${packages[@]}" "${runtime[@]}" | sort -u))
echo "fetching ${#all[@]} packages into $dest/"
(cd "$dest" && apt-get download "${all[@]}" >/dev/null)
du -sh "$dest"
