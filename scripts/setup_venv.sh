#!/usr/bin/env bash
# The Python environment of the transformers reference tests (tests/reference/*_check.py), of
# scripts/get_model.sh and of the plotting tools: the pins of requirements.txt (torch, used on the
# CPU, transformers 5, safetensors, h5py, numpy, tokenizers, gguf, matplotlib), versions known to
# work together. No root needed. Lives outside the
# checkout, so that a fresh clone (CI) reuses it:
#   ${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}
# Idempotent: when the venv holds exactly these pins and imports them, it does nothing (< 1 s).
# Cold, it downloads ~3.5 GB (torch from PyPI brings its CUDA libraries, which `import torch` needs).
# usage: scripts/setup_venv.sh [--lm-eval]   (PIPEFILL_PYTHON picks the interpreter; default python3)
#   --lm-eval   also lm-evaluation-harness (requirements-lm-eval.txt, ~400 MB more), for
#               scripts/lm_eval_pipefill.py; idempotent the same way (its own stamp)
set -euo pipefail
with_lm_eval=0
case "${1:-}" in
  --lm-eval) with_lm_eval=1 ;;
  "") ;;
  *) echo "error: unknown option $1 (usage: scripts/setup_venv.sh [--lm-eval])" >&2; exit 2 ;;
esac
venv=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}
python=${PIPEFILL_PYTHON:-python3}
# Pins: requirements.txt, the set tests/reference/*_check.py were written and measured against.
requirements=$(cd "$(dirname "$0")/.." && pwd)/requirements.txt
mapfile -t pins < <(grep -vE '^\s*(#|$)' "$requirements")
stamp=$venv/.pipefill-pins
want="${pins[*]}"

# lm-eval on top, constrained by the main pins (its own stamp: the main set stays as it is).
install_lm_eval() {
  local extra=$(dirname "$requirements")/requirements-lm-eval.txt lm_stamp=$venv/.pipefill-lm-eval-pins lm_want
  lm_want=$(grep -vE '^\s*(#|$)' "$extra" | tr '\n' ' ')
  if [ -f "$lm_stamp" ] && [ "$(cat "$lm_stamp")" = "$lm_want" ] && "$venv/bin/python" -c "import lm_eval" 2>/dev/null; then
    echo "setup_venv: $venv already has lm-eval ($(grep -o 'lm-eval[^ ]*' <<<"$lm_want"))"
    return
  fi
  local lm_start=$SECONDS
  echo "setup_venv: installing lm-evaluation-harness into $venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --no-cache-dir -q -r "$extra" -c "$requirements"
  echo "$lm_want" >"$lm_stamp"
  echo "setup_venv: lm-eval done in $((SECONDS - lm_start)) s"
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   "$venv/bin/python" -c "import torch, transformers, safetensors, h5py, numpy, tokenizers, gguf, jinja2, matplotlib" 2>/dev/null; then
  echo "setup_venv: $venv already has: $want"
  [ "$with_lm_eval" = 1 ] && install_lm_eval
  exit 0
fi

start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_venv: creating $venv with $($python --version 2>&1)"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
echo "setup_venv: installing into $venv: $want"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input --no-cache-dir -q -r "$requirements"
"$venv/bin/python" -c "import torch, transformers; print('setup_venv: torch', torch.__version__, 'transformers', transformers.__version__)"
echo "$want" >"$stamp"  # written last: an interrupted install is retried next time
echo "setup_venv: done in $((SECONDS - start)) s"
[ "$with_lm_eval" = 1 ] && install_lm_eval
exit 0
