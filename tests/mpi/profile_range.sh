#!/usr/bin/env bash
# `profile --max-prefix` beyond what the KV pool holds: the prefixes profiled stop at the pool,
# and rank 0 says so once (with what to raise); within the pool, no warning. (pp 2: the
# smallest of the stages' pools is named.)
# usage: profile_range.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
profile() {  # OUT [OPTIONS...]
  local out=$1
  shift
  MPI_TIMEOUT=120 pipefill_mpi 2 profile --model "$data/tiny" --out "$work/$out" --pp 2 --chunk-size 64 \
    --page-size 16 --profile-points 9 "$@" 2>"$work/$out.stderr" >/dev/null || { cat "$work/$out.stderr"; fail "profile $out"; }
}
profile short.json --max-prefix 256
if grep -q "KV pool holds" "$work/short.json.stderr"; then cat "$work/short.json.stderr"; fail "warned within the pool"; fi
profile long.json --max-prefix 1000000 --kv-memory-mb 1
cat "$work/long.json.stderr"
[ "$(grep -c '^warning: --max-prefix 1000000: the smallest stage.s KV pool holds [0-9]* tokens, so its prefixes are profiled up to [0-9]* (raise --kv-memory-mb' "$work/long.json.stderr")" -eq 1 ] ||
  fail "expected one warning naming the range profiled"
echo "ok: a --max-prefix past the pool is capped with one warning, none within it"
