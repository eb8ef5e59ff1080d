# Sourced by the tests/slurm tests, with their arguments BIN_DIR DATA_DIR: the MPI tests'
# helpers (tests/mpi/mpi_env.sh), $here, $repo, $bin and $data as absolute paths, a work
# directory $work, and:
#   start_slurm    a real single-node Slurm under $work/slurm, stopped when the test exits
#   job_done JOB   Slurm no longer lists JOB (finished, failed or cancelled)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../mpi/mpi_env.sh
source "$repo/tests/mpi/mpi_env.sh"
bin=$(cd "$1" && pwd) data=$(cd "$2" && pwd)
work=""
temp_dir work
cluster=$work/slurm

start_slurm() {
  # shellcheck disable=SC2016  # evaluated on exit
  on_exit '"$here/slurm_cluster.sh" stop "$cluster"'
  "$here/slurm_cluster.sh" start "$cluster"
  # shellcheck disable=SC1091
  source "$cluster/env.sh"
}
job_done() { [ -z "$(squeue -h -j "$1" -o %T 2>/dev/null || true)" ]; }
