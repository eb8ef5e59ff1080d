#!/usr/bin/env bash
# OpenBLAS's GEMM kernels chosen by the CPU's features (compute/cpu/blas_kernels.hpp), on
# whatever CPU runs the test:
#   features        a plain run: on a CPU with AVX2 and FMA, the header names kernels for AVX2
#                   or AVX-512 (never OpenBLAS's generic ones, which it picks for CPUs newer
#                   than itself), and the run is the same as one with those kernels asked for
#   forced_generic  OPENBLAS_CORETYPE=Prescott (the user's choice, kept): where pipefill's own
#                   AVX-512 or AVX2 GEMMs run the projections, no warning (OpenBLAS then runs
#                   only GEMMs of under 4 rows); where OpenBLAS runs them (no AVX2, or
#                   PIPEFILL_F32_GEMM=blas), on a CPU with AVX2 a `warning:` says what it costs
#                   and how to fix it; the runs succeed
#   own_avx2        on a CPU with AVX2 and FMA, PIPEFILL_CPU_ISA=avx2 (what an AVX2-only CPU
#                   runs, on any CPU): the header names our AVX2 GEMMs, and float32 logits
#                   equal the float64 reference's; bf16 ones are within bf16's error of it
#                   and of OpenBLAS's widened GEMMs
# usage: blas_kernels.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
fast=0  # does this CPU run AVX2 with FMA (the least of the kernels pipefill asks for)?
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && fast=1
run() { pipefill_mpi 1 run --model "$data/tiny" --input "$data/prompts.h5" --output "$work/$1.h5" --chunk-size 64 \
  "${@:2}" >"$work/$1.log" 2>&1 || { cat "$work/$1.log"; fail "run $1 failed"; }; }
core_of() { sed -nE 's/^cpu: .*OpenBLAS ([A-Za-z0-9]+) GEMMs.*/\1/p' "$work/$1.log"; }
case $case in
  features)
    run plain
    core=$(core_of plain)
    grep '^cpu:' "$work/plain.log"
    [ -n "$core" ] || fail "the header names no OpenBLAS kernels"
    if [ "$fast" = 1 ]; then
      case $core in
        SkylakeX | Cooperlake | SapphireRapids | Haswell | Zen | Excavator) ;;
        *) fail "OpenBLAS runs $core kernels on a CPU with AVX2 and FMA" ;;
      esac
      ! grep -q '^warning: OpenBLAS' "$work/plain.log" || fail "a warning about the kernels pipefill chose"
    fi
    OPENBLAS_CORETYPE=$core run asked
    [ "$(core_of asked)" = "$core" ] || fail "asking for $core gave $(core_of asked)"
    "$bin/tests/compare_logits" "$work/plain.h5" "$work/asked.h5" --rtol 1e-6 ;;
  forced_generic)
    OPENBLAS_CORETYPE=Prescott run generic
    grep '^cpu:' "$work/generic.log"
    [ "$(core_of generic)" = Prescott ] || fail "OPENBLAS_CORETYPE=Prescott was not kept ($(core_of generic))"
    warned() { grep -q "^warning: OpenBLAS runs its Prescott GEMM kernels (SSE) on this CPU, which has AVX.*unset it, or set it to" \
      "$work/$1.log"; }
    if grep -qE '^cpu: .*own (AVX-512|AVX2) GEMMs' "$work/generic.log"; then
      ! warned generic || fail "a warning about OpenBLAS's kernels where pipefill's own GEMMs run the projections"
      PIPEFILL_F32_GEMM=blas OPENBLAS_CORETYPE=Prescott run blas
      grep '^cpu:' "$work/blas.log"
      warned blas || fail "no warning about the generic kernels with PIPEFILL_F32_GEMM=blas"
    elif [ "$fast" = 1 ]; then
      warned generic || fail "no warning about the generic kernels"
    fi ;;
  own_avx2)
    [ "$fast" = 1 ] || { echo "Passed: $case (skipped: no AVX2 with FMA)"; exit 0; }
    export PIPEFILL_CPU_ISA=avx2
    run avx2
    grep '^cpu:' "$work/avx2.log"
    grep -q '^cpu: avx2 attention, own AVX2 GEMMs' "$work/avx2.log" || fail "our AVX2 GEMMs do not run"
    "$bin/tests/compare_logits" "$work/avx2.h5" "$data/ref_tiny.h5" --rtol 1e-4
    # bf16: weights widened to float32 for our GEMM or OpenBLAS's. Where their float32 sums
    # differ in the last bit, a later bf16 rounding can land the other side of a boundary, so
    # the two differ by bf16's own error (measured 4.4e-3), and each is 2.1-2.2e-2 from float64.
    run avx2_bf16 --dtype bf16
    PIPEFILL_F32_GEMM=blas run blas_bf16 --dtype bf16
    ! grep -q '^cpu: .*own AVX2' "$work/blas_bf16.log" || fail "PIPEFILL_F32_GEMM=blas ran our GEMMs"
    "$bin/tests/compare_logits" "$work/avx2_bf16.h5" "$data/ref_tiny.h5" --rtol 5e-2
    "$bin/tests/compare_logits" "$work/avx2_bf16.h5" "$work/blas_bf16.h5" --rtol 2e-2 ;;
  *) fail "unknown case $case" ;;
esac
echo "Passed: $case"
