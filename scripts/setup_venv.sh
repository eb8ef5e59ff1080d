#!/usr/bin/env bash
# The Python environment of the transformers reference tests (tests/reference/*_check.py) and of
# scripts/get_model.sh: torch (used on the CPU), transformers 5, safetensors, h5py, numpy, tokenizers,
# gguf (reads llama.cpp checkpoints), at versions known to work together. Lives outside the
# checkout, so that a fresh clone (CI) reuses it:
#   ${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}
# Idempotent: when the venv holds exactly these pins and imports them, it does nothing (< 1 s).
# Cold, it downloads ~3.5 GB (torch from PyPI brings its CUDA libraries, which `import torch` needs).
# usage: scripts/setup_venv.sh        (PIPEFILL_PYTHON picks the interpreter; default python3)
set -euo pipefail
venv=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}
python=${PIPEFILL_PYTHON:-python3}
# Pins: the set tests/reference/*_check.py were written and measured against.
pins=(torch==2.15.0 transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 h5py==3.16.0 numpy==2.4.6
      gguf==0.19.0 jinja2==3.1.6)
stamp=$venv/.pipefill-pins
want="${pins[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   "$venv/bin/python" -c "import torch, transformers, safetensors, h5py, numpy, tokenizers, gguf, jinja2" 2>/dev/null; then
  echo "setup_venv: $venv already has: $want"
  exit 0
fi

start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_venv: creating $venv with $($python --version 2>&1)"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
echo "setup_venv: installing into $venv: $want"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input --no-cache-dir -q "${pins[@]}"
"$venv/bin/python" -c "import torch, transformers; print('setup_venv: torch', torch.__version__, 'transformers', transformers.__version__)"
echo "$want" >"$stamp"  # written last: an interrupted install is retried next time
echo "setup_venv: done in $((SECONDS - start)) s"
