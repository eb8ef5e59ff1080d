#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS on its
# kept corpus (tests/fuzz/corpus/NAME, seeds committed; new inputs go to a scratch copy).
# A crash, a sanitizer report or an exception other than UserError fails the run.
# usage: run_fuzzers.sh SOURCE_DIR SECONDS
set -euo pipefail
src=$(cd "$1" && pwd) seconds=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIPEFILL_FUZZ_SCRATCH=$work  # the prompts target's input file, removed with $work
command -v clang++ >/dev/null || { echo "clang++ missing (scripts/setup.sh installs it)"; exit 1; }
# The MPI wrapper supplies MPI's flags (errors.cpp reports through MPI); HDF5 is the parallel one.
export OMPI_CXX=clang++
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/src" -I/usr/include/hdf5/openmpi -DPIPEFILL_VERSION=\"fuzz\")
hdf5=(-L/usr/lib/x86_64-linux-gnu/hdf5/openmpi -lhdf5 -Wl,-rpath,/usr/lib/x86_64-linux-gnu/hdf5/openmpi)
mpicxx "${flags[@]}" "$src/tests/fuzz/fuzz_safetensors.cpp" "$src/src/io/safetensors.cpp" "$src/src/io/positioned_io.cpp" "$src/src/io/file_checks.cpp" "$src/src/errors.cpp" \
  -o "$work/fuzz_safetensors"
mpicxx "${flags[@]}" "$src/tests/fuzz/fuzz_prompts_h5.cpp" "$src/src/io/prompts_h5.cpp" "$src/src/io/h5_attributes.cpp" "$src/src/io/file_checks.cpp" "$src/src/io/isolated_call.cpp" "$src/src/io/output_lock.cpp" "$src/src/errors.cpp" \
  "${hdf5[@]}" -o "$work/fuzz_prompts_h5"
# The HDF5 target reads in a forked child; when libhdf5 crashes there, the child's libFuzzer
# still writes an artifact. The replay build (no libFuzzer) tells those apart from real
# failures: the parent must survive every artifact.
replay_flags=("${flags[@]/-fsanitize=fuzzer,address,undefined/-fsanitize=address,undefined}")
mpicxx "${replay_flags[@]}" "$src/tests/fuzz/replay_main.cpp" "$src/tests/fuzz/fuzz_prompts_h5.cpp" \
  "$src/src/io/prompts_h5.cpp" "$src/src/io/h5_attributes.cpp" "$src/src/io/file_checks.cpp" "$src/src/io/isolated_call.cpp" "$src/src/io/output_lock.cpp" "$src/src/errors.cpp" "${hdf5[@]}" -o "$work/replay_prompts_h5"
for name in safetensors prompts_h5; do
  cp -r "$src/tests/fuzz/corpus/$name" "$work/corpus_$name"
  echo "== fuzz_$name for ${seconds}s"
  # allocator_may_return_null: a huge allocation fails (NULL) as it does outside ASan, where
  # libhdf5 turns it into an error; without it ASan aborts on a corrupt size field.
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$work/fuzz_$name" "$work/corpus_$name" -max_total_time="$seconds" \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/" 2>&1 | grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|ERROR|SUMMARY|Done" || true
  found=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \))
  if [ -n "$found" ] && [ "$name" = prompts_h5 ]; then
    # shellcheck disable=SC2086
    if ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$work/replay_prompts_h5" $found 2>/dev/null; then
      echo "note: $(echo "$found" | wc -l) input(s) crashed libhdf5 inside the isolated reader; pipefill reported them as errors"
      rm -f $found
      found=""
    fi
  fi
  if [ -n "$found" ]; then
    echo "FAILED: fuzz_$name found an input that breaks it: $found"
    exit 1
  fi
done
echo "Passed: no crash in ${seconds}s per target"
