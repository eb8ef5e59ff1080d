"""Running pipefill from the Python reference checks: one mpirun of `pipefill run` with the MPI
test environment (tests/mpi/mpi_env.sh), and what its output holds."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# The checks of a reference script: each prints "ok:" or "FAIL:", and exit_if_failed ends the
# script with status 1 when any failed.
failures = []


def check(condition, what):
    print(("ok: " if condition else "FAIL: ") + what)
    if not condition:
        failures.append(what)


def exit_if_failed():
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


def run_pipefill(build, model_dir, prompts_h5, out_h5, ranks, options, program="pipefill", timeout=300):
    """`pipefill run` on `ranks` ranks with `options` (a string of flags); returns the
    last-position logits (float64), the root attributes and the timeline. `program`:
    pipefill_sim runs the cuda backend on the simulated device."""
    mpi_env = os.path.join(HERE, "..", "mpi", "mpi_env.sh")
    if os.path.exists(out_h5):
        os.remove(out_h5)
    command = (f'source "{mpi_env}" && exec timeout {timeout} mpirun -n {ranks} "{build}/{program}" run '
               f'--model "{model_dir}" --input "{prompts_h5}" --output "{out_h5}" {options} --quiet >/dev/null')
    subprocess.run(["bash", "-c", command], check=True)
    with h5py.File(out_h5, "r") as f:
        attributes = {k: v.decode() if isinstance(v, bytes) else v for k, v in f.attrs.items()}
        return f["logits"][:].astype(np.float64), attributes, f["timeline"][:]


# A cost model with fixed coefficients, for plans that really vary the chunk size: measured
# timings on a shared machine are too noisy to plan with, and pipefill would fall back to
# fixed chunks.
FIXED_COSTS = {"sglang": {"form": "sglang", "ok": True, "problem": "", "a": 1e-6, "b": 1e-5, "c": 0.0, "gamma": 0.0},
               "prefix": {"form": "prefix", "ok": True, "problem": "", "a": 1e-6, "b": 1e-5, "c": 1e-4, "gamma": 1e-7}}


def write_cost_model(path, attributes, pp, tp):
    """A cost profile whose identity is the run's (the model as pipefill parsed it, its layers)."""
    config = json.loads(attributes["model_config"])
    identity = {"model_config": config, "pp": pp, "tp": tp,
                "layer_partition": attributes["layer_partition_used"], "backend": attributes["backend_used"]}
    if any(config.get(key) for key in ("num_experts", "num_local_experts", "n_routed_experts")):
        identity["expert_split"] = attributes["expert_split"]  # MoE models only
    stages = [dict(stage=s, fresh_points=9, prefixed_points=9, heldout_points=3, sglang_heldout_error=0.0,
                   prefix_heldout_error=0.0, **FIXED_COSTS) for s in range(pp)]
    with open(path, "w") as f:
        json.dump({"pipefill_version": attributes["version"], "identity": identity,
                   "hardware": {"host": "test", "cpu": "fixed coefficients", "cores": 2},
                   "initial_chunk": 128, "stages": stages}, f, indent=1)
