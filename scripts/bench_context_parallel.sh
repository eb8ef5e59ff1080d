#!/usr/bin/env bash
# Context parallelism against the other cuts on one long prompt, in one run each: one rank,
# pp 2, tp 2 and cp 2 (each of the 2-rank layouts one thread a rank, so every layout has the
# same cores as 2 x the one-rank run's 1). For each: time to finish the prompt (its TTFT),
# speedup over one rank, the KV cache's peak on the rank that held the most, and the bytes
# the run moved (PP boundary, TP all-reduce payload, CP ring), from the run's own summary.
# The ceiling: `pair` runs two one-rank jobs at once, each on its own copy of the prompt; its
# speedup, 2 x one rank's time over theirs, is what two ranks of this machine can give at
# best (two vCPUs that share a core, its caches or memory give less than 2).
#
# MODELS: "smollm2" (models/smollm2-135m, fetched by scripts/get_model.sh; the prompt is real
# text, Debian's licences) and/or "small" (synthetic:small, ~250M parameters, random tokens).
# usage: scripts/bench_context_parallel.sh [LENGTHS]   (default "16384"; env MODELS
#        ["smollm2 small"], CHUNK [4096], CP_ATTENTION [auto], LAYOUTS ["one pair pp2 tp2 cp2"])
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/mpi_env.sh
lengths=${1:-16384}
models=${MODELS:-"smollm2 small"} chunk=${CHUNK:-4096} cp_attention=${CP_ATTENTION:-auto}
layouts=${LAYOUTS:-"one pair pp2 tp2 cp2"}
bin=${PIPEFILL_BIN:-build/pipefill}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "cpu: $cpu, $(nproc) CPUs; chunk $chunk; cp attention $cp_attention"

# run_layout NAME MODEL INPUT DIR -> prints "wall_s kv_peak_mib moved_mib" from the run's
# summary, or nothing when the model cannot run that layout (its error: line in DIR/error.txt)
run_layout() {
  local name=$1 model=$2 input=$3 dir=$4 ranks=2 flags=()
  mkdir -p "$dir"
  case $name in
    one) ranks=1 ;;
    pair)  # two one-rank jobs at once: the slower's time over 2 prompts (kv: one job's)
      run_layout one "$model" "$input" "$dir/a" >"$dir/a.txt" &
      run_layout one "$model" "$input" "$dir/b" >"$dir/b.txt"
      wait
      cat "$dir/a/error.txt" "$dir/b/error.txt" >"$dir/error.txt"
      [ -s "$dir/a.txt" ] && [ -s "$dir/b.txt" ] || return 0
      /usr/bin/python3 -c "import sys; a, b = (open(f).read().split() for f in sys.argv[1:]); print(max(float(a[0]), float(b[0])) / 2, a[1], 0)" \
        "$dir/a.txt" "$dir/b.txt"
      return 0 ;;
    pp2) flags=(--pp 2) ;;
    tp2) flags=(--tp 2) ;;
    cp2) flags=(--cp 2 --cp-attention "$cp_attention") ;;
    cp2_pass_kv) flags=(--cp 2 --cp-attention pass-kv) ;;
    cp2_pass_q) flags=(--cp 2 --cp-attention pass-q) ;;
    *) echo "error: unknown layout $name" >&2; exit 2 ;;
  esac
  mpirun -n "$ranks" --bind-to none "$bin" run --model "$model" --input "$input" --output "$dir/out.h5" --overwrite \
    --threads 1 --chunk-size "$chunk" --progress-interval 0 --allow-long-prompts "${flags[@]}" >"$dir/log.txt" \
    2>"$dir/error.txt" || return 0
  /usr/bin/python3 - "$dir/log.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
wall = float(re.search(r"^wall ([0-9.]+) s", text, re.M).group(1))
kv = float(re.search(r"^kv cache: ([0-9.]+) MiB", text, re.M).group(1))
moved = 0.0
for pattern in (r"^PP boundary \S+: ([0-9.]+) MiB", r"ring traffic per rank 2\(N-1\)/N x that = ([0-9.]+) MiB",
                r"^CP group of stage \d+: ([0-9.]+) MiB sent per rank"):
    moved += sum(float(m) for m in re.findall(pattern, text, re.M))
print(wall, kv, moved)
PY
}

printf "%-8s %7s %-12s %9s %8s %12s %12s %10s\n" model tokens layout "ttft s" speedup "kv peak MiB" "kv / one" "moved MiB"
for model_name in $models; do
  for length in $lengths; do
    case $model_name in
      smollm2)
        model=models/smollm2-135m
        [ -e "$model/config.json" ] || scripts/get_model.sh smollm2-135m "$model" >/dev/null
        scripts/licence_document.sh "$model" "$work/in.h5" "$length" ;;
      small)
        model=synthetic:small
        "$bin" make-prompts --out "$work/in.h5" --num 1 --min-len "$length" --max-len "$length" --vocab 32000 >/dev/null ;;
      *) echo "error: unknown model $model_name (smollm2 or small)" >&2; exit 2 ;;
    esac
    base_wall="" base_kv=""
    for layout in $layouts; do
      read -r wall kv moved < <(run_layout "$layout" "$model" "$work/in.h5" "$work/$layout") || true
      if [ -z "${wall:-}" ]; then
        printf "%-8s %7s %-12s %s\n" "$model_name" "$length" "$layout" "n/a: $(grep -m1 '^error:' "$work/$layout/error.txt")"
        continue
      fi
      [ -n "$base_wall" ] || { base_wall=$wall; base_kv=$kv; }
      /usr/bin/python3 -c "import sys; w,k,m,bw,bk=map(float,sys.argv[4:]); print(f'{sys.argv[1]:<8} {sys.argv[2]:>7} {sys.argv[3]:<12} {w:9.2f} {bw/w:7.2f}x {k:12.1f} {k/bk:11.0%} {m:10.1f}')" \
        "$model_name" "$length" "$layout" "$wall" "$kv" "$moved" "$base_wall" "$base_kv"
    done
  done
done
echo "(speedup and kv / one: against the first layout, one rank on one thread unless LAYOUTS says otherwise;"
echo " pair: two one-rank jobs at once, the ceiling of a 2-rank layout on this machine)"
