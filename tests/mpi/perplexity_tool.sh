#!/usr/bin/env bash
# scripts/perplexity.py on a run's --logprobs output: the per-document figures are
# exp(/nll_sum / (length - 1)) of the file, with or without --input; an input that is not the
# run's (same boundaries, other tokens) or an output without log-probs is one `error:` line and
# exit status 2.
# usage: perplexity_tool.sh BIN_DIR DATA_DIR
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2
temp_dir work
tool=$here/../../scripts/perplexity.py
pipefill_mpi 2 run --model "$data/tiny" --input "$data/prompts.h5" --pp 2 --chunk-size 64 --quiet \
  --output "$work/out.h5" --logprobs
"$tool" "$work/out.h5" --input "$data/prompts.h5" >"$work/with_input"
"$tool" "$work/out.h5" >"$work/without_input"
cat "$work/with_input"
"$PYTHON" - "$work/out.h5" "$work/with_input" "$work/without_input" <<'PY' || fail "perplexity.py's figures are not the output's"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    ppl = f["perplexity"][:]
for path in sys.argv[2:]:
    rows = [line.split() for line in open(path) if line.startswith("prompt ")]
    printed = np.array([float(r[-2]) for r in rows])
    assert len(printed) == len(ppl), (path, rows)
    assert np.allclose(printed, ppl, rtol=1e-3), (path, printed, ppl)
print(f"perplexity.py prints /perplexity of each of the {len(ppl)} prompts")
PY
# Another input with the same boundaries: its tokens differ.
"$PYTHON" - "$data/prompts.h5" "$work/other.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    g["tokens"] = (f["tokens"][:] + 1) % 512
    g["offsets"] = f["offsets"][:]
PY
status_of "$tool" "$work/out.h5" --input "$work/other.h5" 2>"$work/stderr"
expect_status 2 "perplexity.py with another input"
grep -q "^error: .*is not the input .* was computed from" "$work/stderr" || { cat "$work/stderr"; fail "no error naming the input"; }
pipefill_mpi 2 run --model "$data/tiny" --input "$data/prompts.h5" --pp 2 --quiet --output "$work/plain.h5"
status_of "$tool" "$work/plain.h5" 2>"$work/stderr"
expect_status 2 "perplexity.py on an output without log-probs"
grep -q "^error: .*has no /token_logprobs: run pipefill with --logprobs" "$work/stderr" || fail "no error for the missing log-probs"
echo "Passed: perplexity.py"
