#!/usr/bin/env bash
# The cuda backend's set-up check of the MLA kernels' shared memory against the device's
# opt-in limit, on the simulated device with a smaller limit (PIPEFILL_SIM_SHARED_OPTIN_KB):
# tiny-mla's latent rows (80 wide, 64 value columns) take 14 KiB a block in latent attention
# and 18 KiB in --cp's partial attention. At 8 KiB the run is refused; at 16 KiB it runs
# without --cp and is refused with --cp 2, each an `error:` naming the limit, exit status 2,
# no output written.
# usage: shared_memory_limit.sh BIN_DIR WORK_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/../mpi/mpi_env.sh"
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$bin/pipefill" make-model --preset tiny-mla --dtype bf16 --seed 11 --out "$work/model" >/dev/null
"$bin/pipefill" make-prompts --out "$work/prompts.h5" --num 2 --min-len 20 --max-len 40 --vocab 500 --seed 4 >/dev/null
fail() { echo "FAIL: $*" >&2; exit 1; }
refused() {  # refused OPTIN_KB WHAT RANKS ARGS...
  local kib=$1 what=$2 ranks=$3
  shift 3
  set +e
  PIPEFILL_SIM_SHARED_OPTIN_KB=$kib timeout 300 mpirun -n "$ranks" "$bin/pipefill_sim" run --backend cuda --quiet \
    --model "$work/model" --input "$work/prompts.h5" --output "$work/out.h5" "$@" >"$work/log" 2>&1
  local status=$?
  set -e
  [ $status -eq 2 ] || { cat "$work/log"; fail "$kib KiB, $*: exit $status, not 2"; }
  grep -q "^error: --backend cuda: $what on this model's latent rows (80 wide, 64 value columns) takes [0-9]* KiB of shared memory a block; GPU 0 (.*) allows $kib KiB" "$work/log" ||
    { cat "$work/log"; fail "$kib KiB, $*: no error naming $what and the limit"; }
  [ ! -e "$work/out.h5" ] || fail "an output was written"
}
refused 8 "latent attention" 1
refused 16 "--cp's partial attention" 2 --cp 2
PIPEFILL_SIM_SHARED_OPTIN_KB=16 timeout 300 mpirun -n 1 "$bin/pipefill_sim" run --backend cuda --quiet \
  --model "$work/model" --input "$work/prompts.h5" --output "$work/out.h5" || fail "16 KiB without --cp was refused"
echo "Passed: the MLA kernels' shared memory is checked against the device's limit"
