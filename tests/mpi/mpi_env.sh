# Sourced by the MPI test scripts: how to launch pipefill under Open MPI on a small shared
# machine (as root, oversubscribed, shared-memory transport, one BLAS thread per rank).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
PYTHON=${PYTHON:-/usr/bin/python3}
