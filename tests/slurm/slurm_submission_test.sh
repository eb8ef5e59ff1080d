#!/usr/bin/env bash
# The jobs/slurm scripts submitted the ways a new user submits them, to a real single-node
# Slurm (started here, stopped on exit): sbatch -n only and -N with --ntasks-per-node, from a
# directory that is not the repository and without PIPEFILL_BIN, through a site's module hook
# (PIPEFILL_ENV_SCRIPT, PIPEFILL_MODULES, $MODULESHOME/init/bash), each srun --mpi source, and
# the strong-scaling collect step with no Python on the "compute node". Every run's logits
# must equal a direct mpirun run's; the two misconfigurations must end in one `error:` line.
# One node only: -N 2 (and a TP group's placement across nodes) cannot be tried here.
# usage: slurm_submission_test.sh BIN_DIR DATA_DIR
set -euo pipefail
# shellcheck source=slurm_env.sh
source "$(dirname "$0")/slurm_env.sh" "$@"
start=$SECONDS

# The scripts keep their site-setup block identical (each is self-contained: sbatch runs a copy).
block() { sed -n '/^# >>> site setup/,/^# <<< site setup/p' "$1"; }
for script in "$repo"/jobs/slurm/*.sbatch; do
  [ -n "$(block "$script")" ] || fail "$script has no site-setup block"
  cmp -s <(block "$script") <(block "$repo/jobs/slurm/prefill_cpu.sbatch") ||
    fail "the site-setup block of $script differs from prefill_cpu.sbatch's"
done
! grep -nE -- '--mpi=pmix|/usr/bin/python' "$repo"/jobs/slurm/* || fail "a job script hard-codes srun's plugin or Python"
# A count that is not a positive whole number (or a setting left out): one `error:` line and
# exit status 2 before anything runs, not bash's arithmetic error or an unbound variable.
bad_setting() {  # bad_setting SCRIPT EXPECTED VAR=VALUE...
  local script=$1 expected=$2 text status
  shift 2
  set +e
  text=$(env -u CP -u CHUNK_SIZE MODEL=m INPUT=i OUTPUT=o OUT_DIR="$work/unused" PPS="1 2" PP=2 TP=2 \
    LAUNCHER=mpirun "$@" bash "$repo/jobs/slurm/$script" 2>&1)
  status=$?
  set -e
  [ $status -eq 2 ] && grep -q "^error: $expected" <<<"$text" || fail "$script $*: status $status, $text"
}
for bad in PP=abc PP=2x "PP=2 3" TP=0 CP=-1 CHUNK_SIZE=1k; do
  bad_setting prefill_cpu.sbatch "${bad%%=*}=" "$bad"
  bad_setting prefill.sbatch "${bad%%=*}=" "$bad"
done
bad_setting prefill_cpu.sbatch "set PP" PP=
for bad in RESUME=yes RESUME=true RESUME=2; do  # not 1 must not mean --overwrite
  bad_setting prefill_cpu.sbatch "RESUME=" "$bad"
  bad_setting prefill.sbatch "RESUME=" "$bad"
done
bad_setting strong_scaling.sbatch "PPS=" PPS="1 x"
bad_setting strong_scaling.sbatch "TP=" TP=two
# EXTRA_ARGS repeating a flag the script sets (pipefill refuses a flag given twice): the variable to set.
bad_setting prefill_cpu.sbatch "EXTRA_ARGS gives --chunk-size, which this script sets from CHUNK_SIZE" \
  EXTRA_ARGS="--logprobs --chunk-size=512"
bad_setting prefill.sbatch "EXTRA_ARGS gives --pp, which this script sets from PP" EXTRA_ARGS="--pp 4"
bad_setting strong_scaling.sbatch "EXTRA_ARGS gives --overwrite, which this script sets from OUT_DIR" \
  EXTRA_ARGS="--overwrite"

# A checkout as a user has it, away from this one: the job scripts and build/pipefill (a link
# to the binary under test). Jobs are submitted from $work/elsewhere, which has no build/.
fake=$work/checkout
mkdir -p "$fake/jobs/slurm" "$fake/build" "$fake/scripts" "$work/elsewhere" "$work/loose"
cp "$repo"/jobs/slurm/* "$fake/jobs/slurm/"
cp "$repo/scripts/plot_scaling.py" "$fake/scripts/"
ln -s "$bin/pipefill" "$fake/build/pipefill"
# A site's copy of the GPU script that asks for tasks, not nodes: submitted with -n only, its
# job has no SLURM_NTASKS_PER_NODE (the script's own directives would always set it).
grep -vE '^#SBATCH --(nodes|ntasks-per-node)=' "$repo/jobs/slurm/prefill.sbatch" >"$fake/jobs/slurm/prefill_tasks.sbatch"
cp "$repo/jobs/slurm/prefill_cpu.sbatch" "$work/loose/"  # a script with no checkout around it

# The site: an environment script that defines `module` as a shell function (as Lmod's setup
# does) and reads a variable it never sets (so it must be sourced without set -u); the module
# pipefill/test puts a pipefill on PATH. The same file serves as $MODULESHOME/init/bash.
site=$work/site
mkdir -p "$site/bin" "$site/init"
ln -s "$bin/pipefill" "$site/bin/pipefill"
cat >"$site/site_env.sh" <<EOF
echo "site_env.sh sourced" >>"$site/calls.log"
[ -z "\$SITE_VARIABLE_NEVER_SET" ]
module() {
  echo "module \$*" >>"$site/calls.log"
  [ "\$1" = load ] || return 0
  shift
  local name
  for name in "\$@"; do
    case \$name in
      pipefill/test) PATH=$site/bin:\$PATH ;;
    esac
  done
}
EOF
cp "$site/site_env.sh" "$site/init/bash"

# The jobs' environment: this one without the variables under test, and without any
# directory that holds a pipefill (so that one found on PATH came from the module).
clean_path=""
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do [ -x "$dir/pipefill" ] || clean_path+=${clean_path:+:}$dir; done
unset PIPEFILL_BIN PIPEFILL_MODULES PIPEFILL_ENV_SCRIPT PIPEFILL_SRUN_MPI PIPEFILL_PYTHON SLURM_MPI_TYPE MODULESHOME
unset -f module 2>/dev/null || true
export PATH=$clean_path MODEL=$data/tiny INPUT=$data/prompts.h5 CHUNK_SIZE=64

start_slurm
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# References: the same runs launched directly.
pipefill_mpi 4 run --model "$MODEL" --input "$INPUT" --output "$work/direct_tp2.h5" --pp 2 --tp 2 --chunk-size 64 --quiet
pipefill_mpi 2 run --model "$MODEL" --input "$INPUT" --output "$work/direct_tp1.h5" --pp 2 --tp 1 --chunk-size 64 --quiet

# submit NAME [VAR=VALUE...] -- SBATCH_ARGS...: sbatch from $work/elsewhere with the
# variables added to the environment; the job id in jobs[NAME].
declare -A jobs
submit() {
  local name=$1 vars=()
  shift
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  jobs[$name]=$(cd "$work/elsewhere" && env ${vars[@]+"${vars[@]}"} sbatch --parsable --export=ALL "$@")
  echo "submitted $name: job ${jobs[$name]}: ${vars[*]} sbatch $*"
}
out=$work/elsewhere
# -n only, the script's repository found from the submitted path, srun's plugin from --mpi=list.
submit cpu_n OUTPUT="$out/cpu_n.h5" PP=2 TP=2 -- -n 4 "$fake/jobs/slurm/prefill_cpu.sbatch"
# -N with --ntasks-per-node, mpirun, the module hook through PIPEFILL_ENV_SCRIPT: pipefill on PATH.
submit cpu_N OUTPUT="$out/cpu_N.h5" PP=2 TP=2 LAUNCHER=mpirun PIPEFILL_ENV_SCRIPT="$site/site_env.sh" \
  PIPEFILL_MODULES="gcc/12 pipefill/test" -- -N 1 --ntasks-per-node=4 "$fake/jobs/slurm/prefill_cpu.sbatch"
# The GPU script on the CPU backend (no GPUs here: --gpus-per-node=0, one core a rank; mpirun
# binds ranks to cores, so 2 ranks on a small machine): -N with --ntasks-per-node, mpirun.
submit gpu_N OUTPUT="$out/gpu_N.h5" PP=2 TP=1 BACKEND=cpu LAUNCHER=mpirun -- \
  -N 1 --ntasks-per-node=2 -c 1 --gpus-per-node=0 "$fake/jobs/slurm/prefill.sbatch"
# -n only, so no SLURM_NTASKS_PER_NODE under set -u; an explicit PIPEFILL_BIN.
submit gpu_n OUTPUT="$out/gpu_n.h5" PP=2 TP=1 BACKEND=cpu LAUNCHER=mpirun PIPEFILL_BIN="$bin/pipefill" -- \
  -n 2 -c 1 --gpus-per-node=0 "$fake/jobs/slurm/prefill_tasks.sbatch"
# srun with PIPEFILL_SRUN_MPI; `module` defined by $MODULESHOME/init/bash.
submit gpu_srun OUTPUT="$out/gpu_srun.h5" PP=2 TP=2 BACKEND=cpu PIPEFILL_SRUN_MPI=pmix MODULESHOME="$site" \
  PIPEFILL_MODULES=pipefill/test -- -N 1 --ntasks-per-node=4 -c 1 --gpus-per-node=0 "$fake/jobs/slurm/prefill.sbatch"
# -N with --ntasks-per-node for 2 ranks: the CPU script sets no task count of its own to override it.
submit cpu_N2 OUTPUT="$out/cpu_N2.h5" PP=2 TP=1 -- -N 1 --ntasks-per-node=2 "$fake/jobs/slurm/prefill_cpu.sbatch"
# Misconfigurations: no binary anywhere; modules asked for but no `module`; a plugin srun lacks.
submit bad_mpi OUTPUT="$out/bad_mpi.h5" PP=2 TP=2 PIPEFILL_SRUN_MPI=pmi3 -- -n 4 "$fake/jobs/slurm/prefill_cpu.sbatch"
submit no_bin OUTPUT="$out/no_bin.h5" PP=2 TP=2 -- -n 4 "$work/loose/prefill_cpu.sbatch"
submit no_module OUTPUT="$out/no_module.h5" PP=2 TP=2 PIPEFILL_MODULES=gcc/12 -- -n 4 "$fake/jobs/slurm/prefill_cpu.sbatch"
# The strong-scaling sweep with SLURM_MPI_TYPE, and no Python on its nodes: python3 on PATH
# fails, and there is no project venv.
mkdir -p "$work/nopython"
printf '#!/bin/sh\necho "python3: not on this node" >&2\nexit 127\n' >"$work/nopython/python3"
chmod +x "$work/nopython/python3"
submitted=$(cd "$work/elsewhere" && PATH=$work/nopython:$PATH PIPEFILL_VENV=$work/novenv SLURM_MPI_TYPE=pmix \
            PPS="1 2" TP=1 OUT_DIR=scaling "$fake/jobs/slurm/submit_strong_scaling.sh")
echo "$submitted"
read -r _ _ array _ _ collect <<<"$submitted"
array=${array%,}  # "array job A, collect job C"

for name in "${!jobs[@]}"; do wait_until 180 "the end of job $name (${jobs[$name]})" job_done "${jobs[$name]}"; done
wait_until 180 "the end of job $array" job_done "$array"
wait_until 180 "the end of job $collect" job_done "$collect"

# expect_job NAME EXIT_CODE LINE...: the job ended with EXIT_CODE and its log has each LINE.
expect_job() {
  local name=$1 code=$2 job=${jobs[$1]} log line
  shift 2
  log=$(job_field "$job" StdOut)
  echo "--- $name (job $job, $(job_field "$job" JobState)): $log"
  grep -vE '^  prompt|^(cpu|work|PP boundary|TP group|input) ' "$log" || true
  [ "$(job_field "$job" ExitCode)" = "$code:0" ] || fail "$name: exit code $(job_field "$job" ExitCode), expected $code"
  for line in "$@"; do grep -qF -- "$line" "$log" || fail "$name: its log lacks: $line"; done
  ! grep -q 'unbound variable' "$log" || fail "$name: an unbound variable"
}
expect_job cpu_n 0 "pipefill: $fake/build/pipefill (from the job script's repository)" "(from srun --mpi=list)"
expect_job cpu_N 0 "pipefill: $site/bin/pipefill (from PATH)" "modules: loaded gcc/12 pipefill/test"
grep -qx "site_env.sh sourced" "$site/calls.log" || fail "PIPEFILL_ENV_SCRIPT was not sourced"
grep -qx "module load gcc/12 pipefill/test" "$site/calls.log" || fail "PIPEFILL_MODULES were not loaded"
expect_job gpu_N 0 "pipefill: $fake/build/pipefill (from the job script's repository)" "mpirun -n 2 --map-by ppr:2:node"
expect_job gpu_n 0 "pipefill: $bin/pipefill (from PIPEFILL_BIN)" "mpirun -n 2 --map-by slot"
expect_job gpu_srun 0 "pipefill: $site/bin/pipefill (from PATH)" "srun --mpi=pmix (from PIPEFILL_SRUN_MPI)"
expect_job no_bin 2 "error: no pipefill binary" "set PIPEFILL_BIN="
expect_job no_module 2 "error: PIPEFILL_MODULES is set but there is no module command"
expect_job bad_mpi 2 "error: PIPEFILL_SRUN_MPI=pmi3: srun --mpi=list offers"
[ ! -e "$out/bad_mpi.h5" ] || fail "bad_mpi: an output from a job that refused to start"
expect_job cpu_N2 0 "pipefill job"
for name in cpu_n cpu_N gpu_srun; do "$bin/tests/compare_logits" "$out/$name.h5" "$work/direct_tp2.h5" --rtol 1e-6; done
for name in gpu_N gpu_n cpu_N2; do "$bin/tests/compare_logits" "$out/$name.h5" "$work/direct_tp1.h5" --rtol 1e-6; done

echo "--- strong scaling: $(job_field "$array" JobState), collect $(job_field "$collect" JobState)"
cat "$work"/elsewhere/pipefill-scaling-*.out
[ "$(job_field "$collect" ExitCode)" = 0:0 ] || fail "the collect step failed"
grep -qF "srun --mpi=pmix (from SLURM_MPI_TYPE)" "$work"/elsewhere/pipefill-scaling-"$array"_1.out ||
  fail "the array task did not take srun's plugin from SLURM_MPI_TYPE"
csv=$work/elsewhere/scaling/scaling.csv
rows=$(grep -c '^slurm,' "$csv" || true)
[ "$rows" -eq 2 ] || fail "scaling.csv has $rows rows, expected 2"
grep -q "^no plot: " "$work/elsewhere/pipefill-scaling-collect-$collect.out" ||
  fail "the collect step did not say why there is no plot (in its own log)"
grep -q '^slurm,tiny,,input,2,1,[a-z]*,64,' "$csv" || fail "scaling.csv lacks the model's name or the chunk size"
[ ! -e "$work/elsewhere/scaling/scaling.png" ] || fail "a plot without Python?"
"$bin/tests/compare_logits" "$work/elsewhere/scaling/pp2.h5" "$work/direct_tp1.h5" --rtol 1e-6
# The CSV's times (from the logs) against the outputs' own wall_s, where this side has h5py.
if "$PYTHON" -c "import h5py" 2>/dev/null; then
  "$PYTHON" - "$csv" <<'PY' || fail "scaling.csv disagrees with the outputs' wall_s"
import csv, os, sys, h5py
for row in csv.DictReader(open(sys.argv[1])):
    with h5py.File(os.path.join(os.path.dirname(sys.argv[1]), f"pp{row['pp']}.h5")) as f:
        wall, policy = float(f.attrs["wall_s"]), f.attrs["chunk_policy_used"]
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    print(f"P = {row['pp']}: time_s {row['time_s']} (wall_s {wall:.6f}), policy {row['policy']} ({policy})")
    assert abs(float(row["time_s"]) - wall) <= max(5e-4, 1e-3 * wall) and row["policy"] == policy
PY
fi
echo "Passed: Slurm submission forms in $((SECONDS - start)) s"
