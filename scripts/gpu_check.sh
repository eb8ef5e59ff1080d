#!/usr/bin/env bash
# The GPU check, one call on a GPU machine: build, the GPU test matrix against the cpu
# backend, the benchmark, then ONE Markdown table, `| row | result | figure |`, PASS, FAIL
# or SKIP on every row (for docs/performance.md; also $OUT/table.md). Sized for one H200 in
# under 8 minutes: every phase runs under `timeout`, its limit cut to what is left of one
# budget (--budget, default 460 s), so a hang costs that phase its rows, never the table.
# The machine needs CUDA (nvcc, cuBLASLt), cmake and Python (h5py and numpy: the e2e checks
# read outputs with them); what else the build needs travels as Debian packages in
# .gpu_deps/ (scripts/fetch_gpu_deps.sh, run where the package registry is reachable),
# unpacked here into a private prefix that only pipefill's own programs see (LD_LIBRARY_PATH
# is set for them alone).
#
#   phase (limit; expected on an H200)
#   1. device, carried packages (-; ~10 s)
#   2. full build (MPI, HDF5, NCCL) of the programs the rows run (300 s, leaving 150; 60-120 s).
#      If it cannot be configured (or with --skip-full): the GPU-only build, no pipefill rows.
#   3. ctest -L gpu (240 s, leaving 145; 100-160 s): a row for each gpu.e2e.<family>.<layout>
#      [_product] and gpu.kv.* case (pipefill run --backend cuda against the cpu backend;
#      RUN_SERIAL, so one at a time), one for the kernel and stage checks (gtest, -j 8).
#      Meanwhile, on half the CPUs and the disk: a llama3-8b bf16 checkpoint (16 GB, 10-20 s).
#   4. pipefill_cuda_bench (90 s, leaving 90; ~10 s): copy bandwidth, GEMM 8192^3 (the
#      ceiling), llama3-8b's GEMMs at 8192 tokens, attention at prefix 0 / 16K / 64K.
#   5. pipefill run --backend cuda, llama3-8b, pp1, chunk 8192, two runs (the rest; ~100 s):
#      `kv`: one 32K prompt with --save-kv; `e2e`: the same 32K prompt, then a 128K one.
#      Each first loads 8B weights on one core (pipefill's loader: 114 s on the first H200 run,
#      2026-12-04, before the layers streamed to the device; less since), so each load runs
#      beside the GPU step before it (kv's beside the benchmark, e2e's beside kv's prefill);
#      a prefill found to have shared the GPU anyway is a FAIL row, not a figure.
#      Rows: tokens/s and MFU at 32K and 128K (prompt times from the summary's per-prompt
#      TTFT; model FLOPs from `pipefill simulate`, the count the run's summary uses), and the
#      KV export overhead: kv's loop time over e2e's 32K prompt time (the same prompt, first
#      in both runs, so both include the first chunk's warm-up). MFU's peak: the datasheet's
#      dense bf16 rate by device name (989.4 TFLOP/s for H100 / H200 SXM), else the GEMM
#      ceiling measured in phase 4; the row says which.
#
# usage: scripts/gpu_check.sh [--quick] [--skip-full] [--budget SECONDS] [--tests REGEX] [--skip-bench]
#        --tests and --skip-bench rerun part of the check (the GPU tests matching REGEX; no
#        benchmark): for a second call after a first one's failures, when device time is short.
#        writes $OUT (or outputs/gpu_check): the log, table.md, each phase's output; large
#        files (checkpoint, KV export) go to $PF_GPU_CHECK_WORK (/tmp/pipefill-gpu-check)
set -uo pipefail
export LC_ALL=C  # numbers with decimal points (EPOCHREALTIME, awk), English tool messages
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
quick="" skip_full=0 budget=460 tests="" skip_bench=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=--quick ;;
    --skip-full) skip_full=1 ;;
    --budget) budget=${2:?}; shift ;;
    --tests) tests=${2:?}; shift ;;
    --skip-bench) skip_bench=1 ;;
    *) echo "usage: $0 [--quick] [--skip-full] [--budget SECONDS] [--tests REGEX] [--skip-bench]" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$root/outputs/gpu_check}
work=${PF_GPU_CHECK_WORK:-/tmp/pipefill-gpu-check}  # never under $OUT: what is there comes back
mkdir -p "$out" "$work"
out=$(cd "$out" && pwd) work=$(cd "$work" && pwd)  # absolute: some steps run in the build directory
jobs=$(nproc)
arch=x86_64-linux-gnu
started=$(date +%s)
deadline=$((started + budget))

# ---- time, rows, the table ---------------------------------------------------------------
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
step() { echo; echo "== $(($(date +%s) - started)) s: $*"; }
# limit CAP KEEP: a phase's seconds: at most CAP, and KEEP left for the phases after it; at
# least 1 (`timeout 0` would mean no limit at all).
limit() {
  local l=$((deadline - $(date +%s) - $2))
  [ "$l" -gt "$1" ] && l=$1
  echo $((l > 1 ? l : 1))
}
declare -a rows
all_rows() { [ "${#rows[@]}" -eq 0 ] || printf '%s\n' "${rows[@]}"; }  # (bash < 4.4: "${a[@]}" of none is unbound)
row() {  # row NAME PASS|FAIL|SKIP FIGURE
  local figure=${3//|//}
  rows+=("| $1 | $2 | $figure |")
  echo "== row: $2 $1${figure:+: $figure}"
}
# shellcheck disable=SC2317  # reached from finish, the EXIT trap
print_table() {
  local pass fail skip commit
  pass=$(all_rows | grep -c '^| .* | PASS | ')
  fail=$(all_rows | grep -c '^| .* | FAIL | ')
  skip=$(all_rows | grep -c '^| .* | SKIP | ')
  commit=$(git rev-parse --short HEAD 2>/dev/null) &&
    { git diff --quiet HEAD 2>/dev/null || commit+=" with uncommitted changes"; }
  {
    echo
    echo "pipefill GPU check, $(date -u +%Y-%m-%d), ${device_name:-unknown device}, ${commit:-no git}: $(($(date +%s) - started)) s of a $budget s budget"
    echo
    echo "| row | result | figure |"
    echo "|---|---|---|"
    all_rows
    echo
    echo "$pass PASS, $fail FAIL, $skip SKIP"
  } | tee "$out/table.md"
  [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
}

# ---- ctest's output, one row per case ---------------------------------------------------
# parse_ctest LOG: "NAME<TAB>STATUS<TAB>SECONDS" for each line like
# ` 3/12 Test  #3: gpu.e2e.tiny.pp1 ......   Passed    4.21 sec` (STATUS: Passed, Skipped,
# Failed, Timeout, Not Run, Exception: ...).
parse_ctest() {
  sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) +\.* *(\*\*\*)?(.*[^ ]) +([0-9.]+) sec.*$/\1\t\3\t\4/p' "$1"
}
# ctest_details LASTTEST_LOG: "NAME<TAB>DETAIL": the figures a case printed (compare_logits'
# worst relative error, the other checks' worst differences) or why it skipped.
ctest_details() {
  awk '
    /^[0-9]+\/[0-9]+ Test: / { name = $3; detail = ""; inside = 0; next }
    /^Output:/ { inside = 1; next }
    /^<end of output>/ { if (name != "" && detail != "") printf "%s\t%s\n", name, detail; inside = 0; name = ""; next }
    inside && /worst relative error/ {
      line = $0; sub(/.*worst relative error /, "", line); sub(/ \(tolerance /, " (tol ", line)
      detail = detail (detail == "" ? "" : "; ") "logits " line; next }
    inside && /positions within/ {  # a routed model: the share of positions that agree, and the median
      line = $0; sub(/^[^:]*: /, "", line); sub(/; worst difference.*/, "", line)
      detail = detail (detail == "" ? "" : "; ") "logprobs " line; next }
    inside && /worst difference/ {
      line = $0; sub(/:.*/, "", line); what = line; line = $0; sub(/.*worst difference /, "", line)
      sub(/ of the largest value.*/, " of max", line); sub(/ nats.*/, " nats", line)
      detail = detail (detail == "" ? "" : "; ") what " " line; next }
    inside && /^skipped: / { detail = $0; next }
  ' "$1"
}
# ctest_rows LIST_LOG RESULT_LOG LASTTEST_LOG: a row per gpu.e2e.* / gpu.kv.* (and fixture)
# case, one for the other gpu.* cases (kernels, stage), "not run" for listed cases without
# a result (the phase's time ran out).
ctest_rows() {
  local list=$1 log=$2 last=$3 name status seconds detail result
  local -A details=() seen=()
  local kernel_pass=0 kernel_skip=0 kernel_fail=0 kernel_total=0 kernel_failed=""
  while IFS=$'\t' read -r name detail; do details[$name]=$detail; done < <(ctest_details "$last" 2>/dev/null)
  while IFS=$'\t' read -r name status seconds; do
    seen[$name]=1
    case $status in
      Passed) result=PASS ;;
      Skipped) result=SKIP ;;
      *) result=FAIL ;;
    esac
    if [[ $name == gpu.* && $name != gpu.e2e.* && $name != gpu.kv.* ]]; then
      kernel_total=$((kernel_total + 1))
      case $result in
        PASS) kernel_pass=$((kernel_pass + 1)) ;;
        SKIP) kernel_skip=$((kernel_skip + 1)) ;;
        *) kernel_failed+="${kernel_failed:+, }$name ($status)"; kernel_fail=$((kernel_fail + 1)) ;;
      esac
      continue
    fi
    detail=${details[$name]:-}
    if [ "$result" = PASS ]; then
      row "$name" PASS "$seconds s${detail:+; $detail}"
    elif [ "$result" = SKIP ]; then
      row "$name" SKIP "${detail:-skipped}"
    else
      row "$name" FAIL "$status after $seconds s${detail:+; $detail}"
    fi
  done < <(parse_ctest "$log" | sort -t$'\t' -k1,1)  # by name: a stable table
  while read -r name; do
    [ -n "${seen[$name]:-}" ] && continue
    if [[ $name == gpu.* && $name != gpu.e2e.* && $name != gpu.kv.* ]]; then
      kernel_total=$((kernel_total + 1))
      kernel_failed+="${kernel_failed:+, }$name (not run)"
      kernel_fail=$((kernel_fail + 1))
    else
      row "$name" FAIL "no result: not run before the test phase's time ran out, or ctest stopped"
    fi
  done < <(sed -nE 's/^ *Test +#[0-9]+: +([^ ]+)$/\1/p' "$list")
  if [ "$kernel_total" -gt 0 ]; then
    if [ -z "$kernel_failed" ] && [ "$kernel_pass" -gt 0 ]; then
      row "gpu kernel and stage checks vs cpu (gtest, $kernel_total cases)" PASS "$kernel_pass passed, $kernel_skip skipped"
    elif [ -z "$kernel_failed" ]; then
      row "gpu kernel and stage checks vs cpu (gtest, $kernel_total cases)" SKIP "all skipped (no device?)"
    else
      # The first few by name (all in ctest-gpu.log).
      [ "${#kernel_failed}" -gt 400 ] && kernel_failed="${kernel_failed:0:400}..."
      row "gpu kernel and stage checks vs cpu (gtest, $kernel_total cases)" FAIL \
        "$kernel_pass passed, $kernel_skip skipped, $kernel_fail failed: $kernel_failed"
    fi
  fi
}

# ---- the device's peak, for MFU ---------------------------------------------------------
# peak_of NAME: dense bf16 TFLOP/s from the datasheet, by nvidia-smi's device name; empty
# when unknown (MFU then uses the GEMM ceiling measured here). H200 before H20.
peak_of() {
  case $1 in
    *H100*PCIe*) echo 756 ;;
    *H100*NVL* | *H200*NVL*) echo 835 ;;
    *H100* | *H200* | *H800*) echo 989.4 ;;
    *H20*) echo 148 ;;
    *A100* | *A800*) echo 312 ;;
    *L40S*) echo 362 ;;
    *B200*) echo 2250 ;;
  esac
}
# fmt PRINTF_FORMAT NUMBER...: printf through awk (bash's printf has no floats in some locales).
fmt() { awk -v f="$1" 'BEGIN { for (i = 1; i < ARGC; i++) a[i] = ARGV[i]; printf f, a[1], a[2], a[3], a[4] }' "${@:2}"; }
# calc EXPRESSION NAME=VALUE...: awk arithmetic on the named values (calc 'a / b' a=1 b=2);
# holds CONDITION NAME=VALUE...: its truth as a status (holds 'a < b' a=1 b=2).
calc() {
  local expression=$1 assignment assignments=()
  shift
  for assignment in "$@"; do assignments+=(-v "$assignment"); done
  awk "${assignments[@]}" "BEGIN { printf \"%.6f\\n\", $expression }"  # %.6f: epoch seconds keep their digits
}
holds() {
  local condition=$1 assignment assignments=()
  shift
  for assignment in "$@"; do assignments+=(-v "$assignment"); done
  awk "${assignments[@]}" "BEGIN { exit !($condition) }"
}

main() {
  step "device"
  device_name=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  compute_mode=$(timeout 30 nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode --format=csv 2>&1 | head -3
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -2
  echo "budget $budget s (until $(date -d "@$deadline" +%H:%M:%S)); $jobs CPUs; work directory $work: $(df -h --output=avail,fstype "$work" | tail -1)"
  if python3 -c 'import h5py, numpy' 2>/dev/null; then
    echo "python3 $(python3 -c 'import h5py, numpy; print("h5py", h5py.__version__, "numpy", numpy.__version__)')"
  else
    row "python3 with h5py and numpy (the e2e checks read the outputs with them)" FAIL "missing: expect every gpu.e2e/gpu.kv row to fail"
  fi

  # ---- the carried packages, unpacked into a private prefix ------------------------------
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
  # The linker must find what the carried libraries need (libgfortran for OpenBLAS, ...) in
  # the prefix too, also in CMake's link checks.
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_PATH="$deps/usr/lib/$arch/openblas-pthread"
               -DCMAKE_INCLUDE_PATH="$deps/usr/include/$arch/openblas-pthread"
               -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$deplib")
  export OPAL_PREFIX="$deps/usr"  # the carried Open MPI, relocated
  # NCCL: beside the toolkit, or else the nvidia-nccl wheel of the machine's Python.
  nccl_root=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  [ -n "$nccl_root" ] && deplib="$deplib:$nccl_root/lib"
  # How the tests launch ranks (as tests/mpi/mpi_env.sh: as root, shared memory), the carried
  # mpirun first, the Python the checks use.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_MCA_rmaps_base_oversubscribe=1 PATH="$deps/usr/bin:$PATH"
  # The carried PMIx looks for its plugins where Debian puts them, where the machine may hold
  # another version's (seen on the H200 image: "undefined symbol: pmix_output_info").
  export PMIX_MCA_mca_base_component_path="$deps/usr/lib/$arch/pmix2/lib/pmix" PMIX_MCA_pcompress_base_silence_warning=1
  PYTHON=$(command -v python3)
  export PYTHON

  # ---- 2. the build ------------------------------------------------------------------------
  # What the rows run; a GPU test script that starts to use another program needs it here.
  local targets=(pipefill compare_logits cuda_probe gpu_kernel_tests gpu_stage_tests pipefill_cuda_bench
                 pipefill_bench_inputs)
  local bdir="" full=0 gpu_only=1 lim t
  if [ "$skip_full" = 0 ]; then
    step "full build (MPI, HDF5, NCCL): ${targets[*]}"
    t=$(date +%s)
    # Configure under the carried library path: FindMPI runs the carried mpicc wrapper.
    if ours timeout -k 10 120 cmake -S . -B build-full -DCMAKE_BUILD_TYPE=Release "${prefix_args[@]}" \
          -DMPI_C_COMPILER="$deps/usr/bin/mpicc" -DMPI_CXX_COMPILER="$deps/usr/bin/mpicxx" \
          -DHDF5_ROOT="$deps/usr/lib/$arch/hdf5/openmpi" -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON \
          -DNCCL_ROOT="$nccl_root" >"$out/cmake-full.log" 2>&1; then
      gpu_only=0  # a compile error would fail the GPU-only build too: no time spent on it
      lim=$(limit 300 150)
      if timeout -k 10 "$lim" cmake --build build-full -j "$jobs" --target "${targets[@]}" >"$out/build-full.log" 2>&1; then
        row "build: full (MPI, HDF5, NCCL), ${#targets[@]} targets" PASS "$(($(date +%s) - t)) s"
        bdir=build-full full=1
      else
        row "build: full (MPI, HDF5, NCCL), ${#targets[@]} targets" FAIL \
          "$(($(date +%s) - t)) s (limit $lim s): $(grep -m1 -E 'error|Error' "$out/build-full.log" | cut -c1-160)"
        tail -30 "$out/build-full.log"
      fi
    else
      row "build: full (MPI, HDF5, NCCL)" FAIL \
        "cannot be configured: $(grep -m1 -E 'Error|error|Could NOT' "$out/cmake-full.log" | cut -c1-160); the GPU-only build instead"
      tail -20 "$out/cmake-full.log"
    fi
  fi
  if [ "$gpu_only" = 1 ]; then
    step "GPU-only build (no MPI, no HDF5: kernels, GPU tests, benchmark)"
    t=$(date +%s)
    lim=$(limit 300 120)
    if timeout -k 10 120 cmake -S . -B build-gpu -DPIPEFILL_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release "${prefix_args[@]}" \
          >"$out/cmake-gpu.log" 2>&1 &&
       timeout -k 10 "$lim" cmake --build build-gpu -j "$jobs" --target gpu_kernel_tests gpu_stage_tests cuda_probe \
          pipefill_cuda_bench >"$out/build-gpu.log" 2>&1; then
      row "build: GPU-only (kernels, GPU tests, benchmark; no pipefill)" PASS "$(($(date +%s) - t)) s"
      bdir=build-gpu
    else
      row "build: GPU-only (kernels, GPU tests, benchmark)" FAIL "see cmake-gpu.log, build-gpu.log"
      tail -30 "$out/build-gpu.log" "$out/cmake-gpu.log" 2>/dev/null
    fi
  fi
  [ -n "$bdir" ] || return 0

  # ---- 3. the GPU tests; meanwhile the llama3-8b checkpoint ------------------------------
  local ckpt=$work/llama3-8b ckpt_pid="" ckpt_why="" avail
  if [ "$full" = 1 ]; then
    avail=$(df -B1G --output=avail "$work" 2>/dev/null | tail -1)
    if [ -f "$ckpt/.complete" ]; then
      echo "llama3-8b checkpoint: $ckpt, made by an earlier check"
    elif [ "${avail:-0}" -lt 30 ]; then
      ckpt_why="${avail:-?} GB free in $work, under the 30 GB of the checkpoint (16 GB) and the KV export (8.6 GB)"
    else
      rm -rf "$ckpt"
      # Half the CPUs: the tests run beside it. Expected: 10-20 s.
      (ours timeout -k 10 "$(limit 150 130)" "$bdir/bench/pipefill_bench_inputs" checkpoint llama3-8b "$ckpt" \
         $((jobs / 2 > 0 ? jobs / 2 : 1)) && touch "$ckpt/.complete") >"$out/checkpoint.log" 2>&1 &
      ckpt_pid=$!
    fi
    ours "$bdir/bench/pipefill_bench_inputs" prompts "$work/e2e.h5" 128256 32768 131072 >/dev/null &&
      ours "$bdir/bench/pipefill_bench_inputs" prompts "$work/kv.h5" 128256 32768 >/dev/null ||
      ckpt_why="pipefill_bench_inputs could not write the prompts"
  fi

  # The families without a preset (Mixtral, Qwen2-MoE, FP8 DeepSeek-V3) are written by
  # transformers: made here if this machine's Python has it; their rows SKIP otherwise.
  if python3 -c "import transformers, torch" 2>/dev/null; then
    timeout -k 5 60 python3 tests/gpu/make_family_models.py "$bdir/tests/gpu/sim_families" >"$out/families.log" 2>&1 ||
      echo "make_family_models.py failed (see $out/families.log)"
  else
    echo "no transformers in python3: the Mixtral, Qwen2-MoE and FP8 rows skip"
  fi

  step "GPU tests: ctest -L gpu (e2e and kv cases against the cpu backend, kernel and stage checks)"
  lim=$(limit 240 145)
  local stop_args=()
  # ctest's --stop-time (a time of day) ends the phase cleanly: running cases time out, the
  # rest are not started, and the log says which. The outer timeout only guards a stuck ctest.
  [ "$(date -d "@$(($(date +%s) + lim))" +%j)" = "$(date +%j)" ] &&
    stop_args=(--stop-time "$(date -d "@$(($(date +%s) + lim))" +%H:%M:%S)")
  rm -f "$bdir/Testing/Temporary/LastTest.log"
  local select=()
  [ -z "$tests" ] || select=(-R "$tests")
  (cd "$bdir" && OPENBLAS_NUM_THREADS=2 ours timeout -k 10 60 ctest -N -L gpu ${select[@]+"${select[@]}"}) \
    >"$out/ctest-list.log" 2>&1
  t=$(date +%s)
  (cd "$bdir" && OPENBLAS_NUM_THREADS=2 ours timeout -k 10 $((lim + 15)) ctest -L gpu ${select[@]+"${select[@]}"} -j 8 --output-on-failure \
      --timeout 300 ${stop_args[@]+"${stop_args[@]}"} >"$out/ctest-gpu.log" 2>&1)
  echo "ctest: $(($(date +%s) - t)) s (limit $lim s): $(grep -E 'tests passed' "$out/ctest-gpu.log")"
  cp "$bdir/Testing/Temporary/LastTest.log" "$out/ctest-gpu-LastTest.log" 2>/dev/null
  ctest_rows "$out/ctest-list.log" "$out/ctest-gpu.log" "$out/ctest-gpu-LastTest.log"
  if [ "$full" = 1 ] && ! grep -qE '^\| gpu\.e2e\.' <(all_rows); then
    row "gpu.e2e.* (pipefill run --backend cuda against the cpu backend)" FAIL "no such case ran (see ctest-gpu.log)"
  elif [ "$full" = 0 ]; then
    row "gpu.e2e.* and gpu.kv.* (pipefill run --backend cuda against the cpu backend)" FAIL "not run: needs the full build"
  fi

  # ---- 4. the benchmark ------------------------------------------------------------------
  # With the full build the llama3-8b prefill is timed through `pipefill run` (phase 5);
  # without it, by the benchmark's own in-process loop, so the table still has the figures.
  local bench_args=(--prefixes "0,16384,65536") bench_pid kv_pid="" e2e_pid=""
  [ -n "$quick" ] && bench_args+=("$quick")
  if [ "$full" = 1 ]; then bench_args+=(--no-prefill); else bench_args+=(--lengths "32768,131072"); fi
  if [ -n "$ckpt_pid" ]; then
    step "waiting for the llama3-8b checkpoint"
    wait "$ckpt_pid"
  fi
  cat "$out/checkpoint.log" 2>/dev/null
  local can_run=0
  [ "$full" = 1 ] && [ -z "$ckpt_why" ] && [ ! -f "$ckpt/.complete" ] &&
    ckpt_why="the llama3-8b checkpoint was not made: $(tail -1 "$out/checkpoint.log" 2>/dev/null)"
  [ "$full" = 1 ] && [ -z "$ckpt_why" ] && can_run=1

  local bench_t1 overlap=0  # overlap: a run may load beside another's GPU work
  [ "$compute_mode" = Default ] && overlap=1
  if [ "$skip_bench" = 1 ]; then
    step "benchmark: skipped (--skip-bench)"
    bench_t1=$(now)
    mfu_peak=$(peak_of "${device_name:-}")
    [ -n "$mfu_peak" ] && mfu_note="of $mfu_peak TFLOP/s: ${device_name}'s dense bf16, datasheet"
  else
    step "benchmark: pipefill_cuda_bench ${bench_args[*]}"
    lim=$(limit "$([ "$full" = 1 ] && echo 90 || echo 200)" 90)
    ours timeout -k 10 "$lim" "$bdir/bench/pipefill_cuda_bench" "${bench_args[@]}" >"$out/bench.txt" 2>&1 &
    bench_pid=$!
    # The kv run loads its weights (CPU only) while the benchmark uses the GPU (~10 s).
    if [ "$can_run" = 1 ] && [ "$overlap" = 1 ] && [ "$(limit 240 5)" -ge 90 ]; then
      llama_run kv --input "$work/kv.h5" --save-kv "$work/kv"
      kv_pid=$!
    fi
    wait "$bench_pid"
    local bench_rc=$?
    bench_t1=$(now)
    cat "$out/bench.txt"
    bench_rows "$bench_rc" "$lim"
  fi

  # ---- 5. llama3-8b through pipefill run ---------------------------------------------------
  # Each run needs its load (tens of seconds) and up to ~25 s to compute: not worth starting in less.
  if [ "$can_run" = 1 ] && [ -z "$kv_pid" ] && [ "$(limit 240 5)" -lt 90 ]; then
    can_run=0 ckpt_why="only $(limit 240 5) s were left of the budget"
  fi
  if [ "$can_run" = 1 ]; then
    step "pipefill run --backend cuda, llama3-8b (kv: 32K with --save-kv; e2e: 32K then 128K)"
    [ -n "$kv_pid" ] || { llama_run kv --input "$work/kv.h5" --save-kv "$work/kv"; kv_pid=$!; }
    # e2e loads while kv computes (kv's prefill: seconds; a load: tens of seconds); sequential where
    # the device cannot be shared.
    if [ "$overlap" = 1 ]; then
      wait_for_loop "$out/run-kv.log" "$kv_pid"
    else
      wait "$kv_pid"
    fi
    llama_run e2e --input "$work/e2e.h5" --no-prefix-cache
    e2e_pid=$!
    wait "$kv_pid"
    wait "$e2e_pid"
    run_rows "$bench_t1"
    rm -rf "$work/kv" "$work/kv.out.h5" "$work/e2e.out.h5"
  elif [ "$full" = 1 ]; then
    row "llama3-8b 32K prefill, pipefill run --backend cuda, pp1" FAIL "not run: $ckpt_why"
    row "llama3-8b 128K prefill, pipefill run --backend cuda, pp1" FAIL "not run: $ckpt_why"
    row "KV export overhead, llama3-8b 32K (--save-kv)" FAIL "not run: $ckpt_why"
  else
    row "KV export overhead, llama3-8b 32K (--save-kv)" FAIL "not run: needs the full build (pipefill run)"
  fi
}

ours() { LD_LIBRARY_PATH="$deplib:${LD_LIBRARY_PATH:-}" "$@"; }

# llama_run NAME ARGS...: `pipefill run --backend cuda` of the llama3-8b checkpoint, pp1,
# chunk 8192, in the background ($! is its pid), until the deadline (at most 240 s); each
# output line prefixed with the epoch time it came, in $out/run-NAME.log, then "exit STATUS".
llama_run() {
  local name=$1 lim
  shift
  lim=$(limit 240 5)
  rm -rf "$work/${name:?}.out.h5" "$work/$name.out.h5.partial" "${work:?}/$name"
  {
    ours timeout -k 10 "$lim" mpirun -n 1 "$bdir/pipefill" run --model "$work/llama3-8b" --backend cuda \
      --chunk-size 8192 --progress-interval 0 --output "$work/$name.out.h5" "$@" 2>&1
    echo "exit $? (limit $lim s)"
  } | while IFS= read -r line; do echo "$(now) $line"; done >"$out/run-$name.log" &
}
# wait_for_loop LOG PID: until the run's "work:" line (printed as its prefill loop starts:
# weights loaded, KV allocated) or its end.
wait_for_loop() {
  while kill -0 "$2" 2>/dev/null; do
    grep -qE '^[0-9.]+ work: ' "$1" && return 0
    sleep 0.5
  done
}
# loop_start LOG: the time of the run's "work:" line; run_end LOG: of its "exit" line.
loop_start() { awk '$2 == "work:" { print $1; exit }' "$1"; }
run_end() { awk '$2 == "exit" { print $1 }' "$1"; }
run_status() { awk '$2 == "exit" { print $3 }' "$1"; }
summary_value() {  # summary_value LOG KEY: "wall" -> seconds; "prompt N" -> its TTFT
  case $2 in
    wall) awk '$2 == "wall" { print $3; exit }' "$1" ;;
    prompt*) awk -v p="${2#prompt }" '$2 == "prompt" && $3 == p && $4 == "ttft_s:" { print $5; exit }' "$1" ;;
  esac
}
# model_flops LENGTH: the model FLOPs of one LENGTH-token prompt at chunk 8192, as pipefill's
# summary counts them (sched::plan_flops, through `pipefill simulate`).
model_flops() {
  ours timeout 60 mpirun -n 1 "$bdir/pipefill" simulate --model-config synthetic:llama3-8b --hardware h200 \
    --chunk-size 8192 --length "$1" 2>/dev/null | sed -nE 's/.*\(([0-9.e+]+) model FLOPs\).*/\1/p' | head -1
}

# bench_rows STATUS LIMIT: the benchmark's rows from its `metric KEY VALUE` lines.
bench_rows() {
  local -A m=()
  local key value status=$1 peak peak_note why
  while read -r _ key value; do m[$key]=$value; done < <(grep '^metric ' "$out/bench.txt")
  why="benchmark exit $status$([ "$status" = 124 ] && echo " (its $2 s ran out)")"
  [ -n "${device_name:-}" ] || device_name=$(sed -nE 's/^pipefill GPU benchmark on (.*) \([0-9]+ SMs.*/\1/p' "$out/bench.txt")
  local datasheet
  peak=$(peak_of "${device_name:-}") datasheet=$peak
  if [ -n "$peak" ]; then
    peak_note="of $peak TFLOP/s: ${device_name}'s dense bf16, datasheet"
  elif [ -n "${m[gemm_ceiling_tflops]:-}" ]; then
    peak=${m[gemm_ceiling_tflops]}
    peak_note="of $(fmt '%.0f' "$peak") TFLOP/s: the GEMM ceiling measured here, no datasheet figure for ${device_name:-this device}"
  fi
  mfu_peak=$peak mfu_note=$peak_note  # for run_rows
  one() {  # one NAME KEY FORMAT [PEAK NOTE]: with a peak, the figure's share of it
    if [ -n "${m[$2]:-}" ]; then
      local share=""
      [ -n "${4:-}" ] && share=" ($(fmt '%.0f' "$(calc '100 * v / p' v="${m[$2]}" p="$4")")% $5)"
      row "$1" PASS "$(fmt "$3" "${m[$2]}")$share"
    else
      row "$1" FAIL "no figure: $why (see bench.txt)"
    fi
  }
  one "device copy bandwidth, 4 GiB (read + write)" copy_tb_s '%.2f TB/s'
  # The benchmark checks what it timed (sampled GEMM entries, attention rows against double
  # formulas on the host, finite prefill logits): a wrong kernel is a FAIL, whatever its speed.
  if grep -q ' WRONG ' "$out/bench.txt"; then
    row "benchmark: outputs of the timed kernels" FAIL "$(grep ' WRONG ' "$out/bench.txt" | sed -E 's/^ *check //' | head -3 | paste -sd';')"
  elif grep -q ' check .* ok ' "$out/bench.txt"; then
    row "benchmark: outputs of the timed kernels" PASS "$(grep -c ' check .* ok ' "$out/bench.txt") checks against host double-precision formulas"
  fi
  one "GEMM 8192^3 bf16 (cuBLASLt): the ceiling" gemm_ceiling_tflops '%.0f TFLOP/s' "$datasheet" "$peak_note"
  if [ -n "${m[gemm_qkv_tflops]:-}" ] && [ -n "${m[gemm_o_tflops]:-}" ] && [ -n "${m[gemm_gate_up_tflops]:-}" ] &&
     [ -n "${m[gemm_down_tflops]:-}" ]; then
    row "GEMM llama3-8b projections, 8192 tokens (cuBLASLt)" PASS \
      "$(fmt 'qkv %.0f, o %.0f, gate_up %.0f, down %.0f TFLOP/s' "${m[gemm_qkv_tflops]}" "${m[gemm_o_tflops]}" \
           "${m[gemm_gate_up_tflops]}" "${m[gemm_down_tflops]}")"
  else
    row "GEMM llama3-8b projections, 8192 tokens (cuBLASLt)" FAIL "no figure: $why (see bench.txt)"
  fi
  local prefix
  for prefix in 0 16384 65536; do
    one "attention, 4096 queries at prefix $([ "$prefix" = 0 ] && echo 0 || echo "$((prefix / 1024))K") (d128, GQA 32/8, bf16)" \
      "attention_prefix_${prefix}_tflops" '%.0f TFLOP/s' "$peak" "$peak_note"
  done
  if [ "$full" = 0 ]; then  # the benchmark's in-process prefill stands in for pipefill run
    local length
    for length in 32768 131072; do
      key=prefill_${length}
      if [ -n "${m[${key}_tok_s]:-}" ] && [ -n "$peak" ]; then
        row "llama3-8b $((length / 1024))K prefill, in-process (pipefill_cuda_bench; no pipefill run without the full build)" PASS \
          "$(fmt '%.0f tokens/s, MFU %.1f%%, %.2f s' "${m[${key}_tok_s]}" \
               "$(calc '100 * t / p' t="${m[${key}_tflops]}" p="$peak")" "${m[${key}_seconds]}") ($peak_note)"
      else
        row "llama3-8b $((length / 1024))K prefill, in-process (pipefill_cuda_bench)" FAIL "no figure: $why"
      fi
    done
  fi
}

# run_rows BENCH_END: the rows of the two llama3-8b runs.
run_rows() {
  local kv_log=$out/run-kv.log e2e_log=$out/run-e2e.log bench_end=$1
  local kv_status e2e_status t0 t1 t128="" wall_kv flops32 flops128
  kv_status=$(run_status "$kv_log") e2e_status=$(run_status "$e2e_log")
  t0=$(summary_value "$e2e_log" "prompt 0") t1=$(summary_value "$e2e_log" "prompt 1")
  [ -n "$t0" ] && [ -n "$t1" ] && t128=$(calc 'b - a' a="$t0" b="$t1")
  wall_kv=$(summary_value "$kv_log" wall)
  flops32=$(model_flops 32768) flops128=$(model_flops 131072)
  grep -hE '^[0-9.]+ (pipefill [0-9]|wall|  prompt|error|warning)' "$kv_log" "$e2e_log" | cut -c1-300
  echo "model FLOPs (pipefill simulate): 32K $flops32, 128K $flops128"
  # A prefill that shared the GPU with another step is not this GPU's figure: the table says
  # so (FAIL) rather than print it. kv's GPU work ends with its loop (then only its export's
  # last writes: disk and CPU).
  local kv_start kv_end kv_gpu_end="" e2e_start gpu_kv="" gpu_e2e="" beside=""
  kv_start=$(loop_start "$kv_log") kv_end=$(run_end "$kv_log") e2e_start=$(loop_start "$e2e_log")
  if [ -n "$kv_start" ]; then
    kv_gpu_end=$kv_end
    [ -n "$wall_kv" ] && kv_gpu_end=$(calc 's + w' s="$kv_start" w="$wall_kv")
    holds 'a < b' a="$kv_start" b="$bench_end" &&
      gpu_kv="its loop began $(fmt '%.1f' "$(calc 'b - a' a="$kv_start" b="$bench_end")") s before the benchmark ended"
  fi
  if [ -n "$e2e_start" ] && [ -n "$kv_gpu_end" ]; then
    if holds 'a < b' a="$e2e_start" b="$kv_gpu_end"; then
      gpu_e2e="its loop began $(fmt '%.1f' "$(calc 'b - a' a="$e2e_start" b="$kv_gpu_end")") s before the kv run's ended"
    elif [ -n "$kv_end" ] && holds 'a < b' a="$e2e_start" b="$kv_end"; then
      beside="; began beside the kv run's last export writes"
    fi
  fi
  # run_row NAME TOKENS SECONDS FLOPS OVERLAP STATUS LOG
  run_row() {
    if [ "$6" != 0 ] || [ -z "$3" ]; then
      row "$1" FAIL "pipefill run exit ${6:-none}$(grep -m1 -E '^[0-9.]+ error' "$7" | cut -d' ' -f2- | cut -c1-160 | sed 's/^/: /')"
    elif [ -n "$5" ]; then
      row "$1" FAIL "shared the GPU ($5): $(fmt '%.2f s' "$3"), not trusted"
    elif [ -z "$4" ] || [ -z "${mfu_peak:-}" ]; then
      row "$1" PASS "$(fmt '%.0f tokens/s, %.2f s' "$(calc 'n / s' n="$2" s="$3")" "$3"); no MFU (model FLOPs or peak unknown)$beside"
    else
      row "$1" PASS "$(fmt '%.0f tokens/s, MFU %.1f%%, %.2f s' "$(calc 'n / s' n="$2" s="$3")" \
        "$(calc '100 * f / s / (p * 1e12)' f="$4" s="$3" p="$mfu_peak")" "$3") ($mfu_note)$beside"
    fi
  }
  run_row "llama3-8b 32K prefill, pipefill run --backend cuda, pp1, chunk 8192 (first prompt)" 32768 "$t0" "$flops32" \
    "$gpu_e2e" "$e2e_status" "$e2e_log"
  run_row "llama3-8b 128K prefill, the same run's second prompt" 131072 "$t128" "$flops128" "$gpu_e2e" \
    "$e2e_status" "$e2e_log"
  # The export's overhead: kv's loop (its one prompt: 32K, --save-kv) over e2e's first prompt
  # (the same tokens, no export). What kv spends after its loop is the export's rest (queued
  # chunks, fdatasync, index.json) and the process's exit.
  local name="KV export overhead, llama3-8b 32K (--save-kv, float32 files)"
  if [ "$kv_status" != 0 ] || [ -z "$wall_kv" ]; then
    row "$name" FAIL "pipefill run --save-kv exit ${kv_status:-none}$(grep -m1 -E '^[0-9.]+ error' "$kv_log" | cut -d' ' -f2- | cut -c1-160 | sed 's/^/: /')"
  elif [ -z "$t0" ] || [ -n "$gpu_e2e" ]; then
    row "$name" FAIL "$(fmt '%.2f s' "$wall_kv") with the export, but no trusted time without it (the 32K row)"
  elif [ -n "$gpu_kv" ]; then
    row "$name" FAIL "shared the GPU ($gpu_kv): not trusted"
  else
    local size
    size=$(du -sb "$work/kv" 2>/dev/null | awk '{ printf "%.1f", $1 / 1e9 }')
    row "$name" PASS "$(fmt 'x%.2f: %.2f s with, %.2f s without; the process ended %.1f s after its loop' \
      "$(calc 'a / b' a="$wall_kv" b="$t0")" "$wall_kv" "$t0" "$(calc 'e - s - w' e="$kv_end" s="$kv_start" w="$wall_kv")"); ${size:-?} GB written to $(df --output=fstype "$work" | tail -1)"
  fi
}

# The table comes last whatever happens before it (an error in this script included).
# shellcheck disable=SC2317  # the EXIT trap
finish() {
  local status=$?
  [ "$status" = 0 ] ||
    row "scripts/gpu_check.sh" FAIL "stopped by an error (status $status) at $(($(date +%s) - started)) s: see gpu_check.log"
  print_table
  exit $?
}
(
  trap finish EXIT
  trap 'exit 143' TERM INT
  main
) 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
