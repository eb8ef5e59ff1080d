#!/usr/bin/env bash
# One bad config.json case: a copy of the tiny model with one field made wrong. pipefill
# must print exactly one `error:` line naming that field, exit with status 2, leave no
# output file, and not hang (timeout = failure). Modelled on bad_input.sh.
# usage: bad_config.sh BIN_DIR CASE DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 case=$2 data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/out.h5
model=$work/model
cp -r "$data/tiny" "$model"

# patch_config PYTHON-CODE: rewrites the copy's config.json; `c` is its dict.
patch_config() {
  "$PYTHON" - "$model/config.json" <<PY
import sys, json
c = json.load(open(sys.argv[1]))
$1
json.dump(c, open(sys.argv[1], "w"))
PY
}

# The tiny model is Llama with llama3 rope_scaling, written in the legacy layout.
case $case in
  rope_theta_zero) patch_config 'c["rope_theta"] = 0'; expect='field "rope_theta" must be a finite number > 0 (got 0)' ;;
  rope_theta_negative) patch_config 'c["rope_theta"] = -10000.0'; expect='field "rope_theta"' ;;
  rms_norm_eps_negative) patch_config 'c["rms_norm_eps"] = -1e-5'; expect='field "rms_norm_eps"' ;;
  llama3_factor_zero) patch_config 'c["rope_scaling"]["factor"] = 0'; expect='field "rope_scaling.factor"' ;;
  hidden_size_2pow32_plus) patch_config 'c["hidden_size"] = 2**32 + 128'; expect='field "hidden_size"' ;;
  layers_2pow32_plus) patch_config 'c["num_hidden_layers"] = 2**32 + 8'; expect='field "num_hidden_layers"' ;;
  hidden_fractional) patch_config 'c["hidden_size"] = 128.5'; expect='field "hidden_size" must be an integer' ;;
  max_position_negative) patch_config 'c["max_position_embeddings"] = -5'; expect='field "max_position_embeddings"' ;;
  rope_scaling_string) patch_config 'c["rope_scaling"] = "llama3"'; expect='field "rope_scaling" must be an object' ;;
  optional_field_wrong_type) patch_config 'c["tie_word_embeddings"] = "yes"'; expect='field "tie_word_embeddings"' ;;
  unknown_rope_type_in_rope_parameters) patch_config '
del c["rope_theta"], c["rope_scaling"]
c["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}'
    expect='field "rope_parameters.rope_type"' ;;
  *) echo "unknown case $case"; exit 1 ;;
esac

set +e
timeout 120 mpirun -n 2 "$bin/pipefill" run --model "$model" --input "$data/prompts.h5" --output "$out" --pp 2 \
  >"$work/stdout" 2>"$work/stderr"
status=$?
set -e
errors=$(grep -c '^error:' "$work/stderr" || true)
echo "status $status, stderr:"; cat "$work/stderr"
[ "$status" -ne 124 ] || { echo "FAILED: hung (killed by timeout)"; exit 1; }
[ "$status" -eq 2 ] || { echo "FAILED: exit status $status, expected 2"; exit 1; }
[ "$errors" -eq 1 ] || { echo "FAILED: $errors error: lines, expected exactly 1"; exit 1; }
grep '^error:' "$work/stderr" | grep -qF -- "$expect" || { echo "FAILED: error line lacks '$expect'"; exit 1; }
[ ! -e "$out" ] && [ ! -e "$out.partial" ] || { echo "FAILED: output file left behind"; exit 1; }
echo "Passed: $case"
