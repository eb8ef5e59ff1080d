#!/usr/bin/env python3
"""Per-chunk compute times of pipefill runs, and how even they are.

usage: scripts/chunk_times.py OUT.h5 [OUT2.h5 ...] [--stage S]

For each file: the chunk sizes and compute times of stage S (default 0, TP rank 0) for
every prompt, then the coefficient of variation (std / mean) of the chunk times, over all
chunks and without each prompt's last chunk (a remainder, capped at the tokens left).
"""
import sys

import h5py
import numpy as np


def chunk_rows(path, stage):
    with h5py.File(path, "r") as f:
        t = f["timeline"][:]
        policy = f.attrs.get("chunk_policy_used", b"?")
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    rows = t[(t["kind"] == 0) & (t["stage"] == stage) & (t["tp_rank"] == 0)]
    rows = np.sort(rows, order="micro_batch")
    return policy, rows


def cv(values):
    values = np.asarray(values, dtype=float)
    return float(values.std() / values.mean()) if len(values) > 1 else 0.0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    stage = int(sys.argv[sys.argv.index("--stage") + 1]) if "--stage" in sys.argv else 0
    args = [a for a in args if not (sys.argv.index(a) > 0 and sys.argv[sys.argv.index(a) - 1] == "--stage")]
    if not args:
        sys.exit(__doc__)
    summary = []
    for path in args:
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
    main()
