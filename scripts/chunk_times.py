#!/usr/bin/env python3
"""Per-chunk compute times of pipefill runs, and how even they are.

usage: scripts/chunk_times.py OUT.h5 [OUT2.h5 ...] [--stage S]

For each file: the chunk sizes and compute times of stage S (default 0, TP rank 0) for
every prompt, then the coefficient of variation (std / mean) of the chunk times, over all
chunks and without each prompt's last chunk (a remainder, capped at the tokens left).
"""
import argparse
import os
import sys

import python_tool  # beside this file: the `error:` line and exit status 2 of every tool
from python_tool import ArgumentParser, UserError

python_tool.run_in_venv_unless_importable(__file__, "h5py", "numpy")

import h5py  # noqa: E402
import numpy as np  # noqa: E402


def chunk_rows(path, stage):
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise UserError(f"{path} is not an HDF5 file")
    with f:
        if not isinstance(f.get("timeline"), h5py.Dataset) or f["timeline"].dtype.names is None or not {
                "kind", "stage", "tp_rank", "micro_batch", "t_start_s", "t_end_s", "chunk_start", "chunk_length",
                "prompt"} <= set(f["timeline"].dtype.names):
            raise UserError(f"{path} has no pipefill /timeline (a finished `pipefill run` output holds one)")
        t = f["timeline"][:]
        policy = f.attrs.get("chunk_policy_used", b"?")
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    rows = t[(t["kind"] == 0) & (t["stage"] == stage) & (t["tp_rank"] == 0)]
    if len(rows) == 0:
        stages = sorted({int(s) for s in t["stage"][t["kind"] == 0]})
        raise UserError(f"{path} has no chunks of stage {stage} (its stages: {', '.join(map(str, stages)) or 'none'})")
    rows = np.sort(rows, order="micro_batch")
    return policy, rows


def cv(values):
    values = np.asarray(values, dtype=float)
    return float(values.std() / values.mean()) if len(values) > 1 else 0.0


def main():
    parser = ArgumentParser(description=__doc__.split("\n\n", 2)[1])
    parser.add_argument("files", metavar="OUT.h5", nargs="+", help="outputs of `pipefill run`")
    parser.add_argument("--stage", type=int, default=0, help="the pipeline stage (default 0)")
    args = parser.parse_args()
    stage = args.stage
    summary = []
    for path in args.files:
        policy, rows = chunk_rows(path, stage)
        times = rows["t_end_s"] - rows["t_start_s"]
        ends = rows["chunk_start"] + rows["chunk_length"]
        last = np.zeros(len(rows), dtype=bool)
        for p in np.unique(rows["prompt"]):
            idx = np.where(rows["prompt"] == p)[0]
            last[idx[np.argmax(ends[idx])]] = True
        print(f"{path} ({policy}), stage {stage}: {len(rows)} chunks")
        print("  chunk  start  tokens  seconds")
        for i, r in enumerate(rows):
            print(f"  {i:5d} {int(r['chunk_start']):6d} {int(r['chunk_length']):7d} {times[i]:8.3f}")
        summary.append((path, policy, len(rows), float(times.sum()), cv(times), cv(times[~last])))
    print(f"\n{'file':40s} {'policy':9s} {'chunks':>6s} {'compute s':>10s} {'CV all':>8s} {'CV w/o tail':>11s}")
    for path, policy, n, total, cv_all, cv_body in summary:
        print(f"{path[-40:]:40s} {policy:9s} {n:6d} {total:10.2f} {cv_all:8.3f} {cv_body:11.3f}")


if __name__ == "__main__":
    python_tool.main_with_user_errors(main)
