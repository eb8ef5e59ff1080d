"""Running pipefill from the Python reference checks: one mpirun of `pipefill run` with the MPI
test environment (tests/mpi/mpi_env.sh), and what its output holds."""
import os
import subprocess

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def run_pipefill(build, model_dir, prompts_h5, out_h5, ranks, options):
    """`pipefill run` on `ranks` ranks with `options` (a string of flags); returns the
    last-position logits (float64), the root attributes and the timeline."""
    mpi_env = os.path.join(HERE, "..", "mpi", "mpi_env.sh")
    if os.path.exists(out_h5):
        os.remove(out_h5)
    command = (f'source "{mpi_env}" && exec timeout 300 mpirun -n {ranks} "{build}/pipefill" run '
               f'--model "{model_dir}" --input "{prompts_h5}" --output "{out_h5}" {options} --quiet >/dev/null')
    subprocess.run(["bash", "-c", command], check=True)
    with h5py.File(out_h5, "r") as f:
        attributes = {k: v.decode() if isinstance(v, bytes) else v for k, v in f.attrs.items()}
        return f["logits"][:].astype(np.float64), attributes, f["timeline"][:]


def read_hidden_states(out_h5):
    """The output's /hidden_states (--hidden-states), as float64."""
    with h5py.File(out_h5, "r") as f:
        return f["hidden_states"][:].astype(np.float64)
