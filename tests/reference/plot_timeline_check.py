#!/usr/bin/env python3
"""scripts/plot_timeline.py reads both files a run leaves, and refuses anything else in one line.

`pipefill run --pp 2 --trace T.json --save-kv DIR` on the tiny synthetic model, then:
  - the output's /timeline has an event of every phase that took time on a rank, the KV
    export's copies (kv_export) among them, with the kind names in its kind_names attribute;
  - plot_timeline.py draws a PNG from OUT.h5 and from T.json;
  - given the input prompts (HDF5 without /timeline), a text file, or a missing path, it exits
    with status 2 and one `error:` line, no traceback.

usage: plot_timeline_check.py BUILD_DIR WORK_DIR   (run with scripts/setup_venv.sh's python)
"""
import os
import shutil
import subprocess
import sys

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pipefill_runs import check, exit_if_failed, run_pipefill  # noqa: E402

PLOT = os.path.join(HERE, "..", "..", "scripts", "plot_timeline.py")


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True)


def main():
    build, work = (os.path.abspath(a) for a in sys.argv[1:3])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prompts_h5, out_h5, trace, kv = (os.path.join(work, n) for n in ("prompts.h5", "out.h5", "t.json", "kv"))
    subprocess.run([os.path.join(build, "pipefill"), "make-prompts", "--out", prompts_h5, "--num", "3", "--min-len",
                    "40", "--max-len", "90", "--vocab", "512", "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    run_pipefill(build, "synthetic:tiny", prompts_h5, out_h5, 2, f"--pp 2 --chunk-size 32 --trace {trace} --save-kv {kv}")

    with h5py.File(out_h5, "r") as f:
        names = f["timeline"].attrs["kind_names"]
        names = (names.decode() if isinstance(names, bytes) else str(names)).split(",")
        kinds = {names[k] for k in f["timeline"]["kind"]}
    check({"compute", "recv_wait", "lm_head", "kv_export"} <= kinds, f"the timeline has every phase: {sorted(kinds)}")

    for source in (out_h5, trace):
        png = os.path.join(work, os.path.basename(source) + ".png")
        r = plot(source, "--out", png)
        check(r.returncode == 0 and os.path.getsize(png) > 10000, f"plots {os.path.basename(source)}: {r.stderr[-300:]}")

    text = os.path.join(work, "notes.txt")
    with open(text, "w") as f:
        f.write("not a timeline\n")
    for bad, says in ((prompts_h5, "has no /timeline"), (text, "neither HDF5"), (text + ".missing", "does not exist")):
        r = plot(bad)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0],
              f"refuses {os.path.basename(bad)} in one line: {r.stderr.strip()[-300:]}")
    r = plot("--help")
    check(r.returncode == 0 and "OUT.h5" in r.stdout and "--trace" in r.stdout, "--help says what it reads")
    exit_if_failed()


if __name__ == "__main__":
    main()
