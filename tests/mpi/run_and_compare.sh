#!/usr/bin/env bash
# One MPI integration case: run pipefill on RANKS ranks, then require its logits to match
# each reference file within the tolerance, and the output file to be complete. A run that
# stores more (--logprobs, --top-k, --hidden-states) is also checked against the last
# reference, the numpy one, which holds every position's scores.
# usage: run_and_compare.sh BIN_DIR RANKS OUT.h5 "REF1.h5 REF2.h5" -- <pipefill run arguments>
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 ranks=$2 out=$3 refs=$4
shift 4
[ "$1" = "--" ] && shift
rm -f "$out" "$out.partial"
pipefill_mpi "$ranks" run --quiet --output "$out" "$@"
[ ! -e "$out.partial" ] || fail "$out.partial left behind"
for ref in $refs; do
  "$bin/tests/compare_logits" "$out" "$ref" --rtol 1e-4
done
case " $* " in
  *" --logprobs "*|*" --top-k "*|*" --hidden-states "*) "$PYTHON" "$here/check_token_outputs.py" "$out" "$ref" ;;
esac
"$PYTHON" "$here/check_output.py" "$out"
