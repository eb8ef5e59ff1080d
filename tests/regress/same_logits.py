#!/usr/bin/env python3
"""Bit-for-bit comparison of two sets of pipefill outputs (a refactoring must not move a bit).

usage: same_logits.py BEFORE_DIR AFTER_DIR [GLOB]

Compares /logits (bytes, not values) of every file matching GLOB (default out_*.h5) that
exists in both directories. A run whose chunk plan was profiled during the run (a dynamic
policy without --cost-model: timings decide the plan, so two runs of the same code may cut
different chunks) is skipped, reported as such, when the two runs' plans differ (/timeline
micro-batch boundaries); every other difference is a failure, a different plan included.
Exit status 1 if any pair differs, 2 if nothing was compared.
"""
import glob
import os
import sys

import h5py
import numpy as np


def plan_of(f):
    if "timeline" not in f:
        return None
    t = f["timeline"][...]
    return sorted(set(zip(t["micro_batch"].tolist(), t["prompt"].tolist(), t["chunk_start"].tolist(),
                          t["chunk_length"].tolist())))


def profiled(f):
    """A dynamic chunk policy with no saved cost model: the plan came from timings."""
    policy = f.attrs.get("chunk_policy", b"fixed")
    cost_model = f.attrs.get("cost_model", b"")
    as_text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    return as_text(policy) != "fixed" and as_text(cost_model) == ""


def main():
    before_dir, after_dir = sys.argv[1], sys.argv[2]
    pattern = sys.argv[3] if len(sys.argv) > 3 else "out_*.h5"
    compared = differ = skipped = 0
    for before_path in sorted(glob.glob(os.path.join(before_dir, pattern))):
        name = os.path.basename(before_path)
        after_path = os.path.join(after_dir, name)
        if not os.path.exists(after_path):
            print(f"missing  {name} (not in {after_dir})")
            continue
        with h5py.File(before_path, "r") as b, h5py.File(after_path, "r") as a:
            if "logits" not in b or "logits" not in a:
                print(f"no logits {name}")
                continue
            lb, la = b["logits"][...], a["logits"][...]
            same_plan = plan_of(b) == plan_of(a)
            identical = lb.shape == la.shape and lb.tobytes() == la.tobytes()
            if not identical and not same_plan and profiled(b) and profiled(a):
                print(f"skipped  {name}: the plans differ (profiled during the run)")
                skipped += 1
                continue
            compared += 1
            if identical:
                print(f"same     {name} {lb.shape}")
            else:
                differ += 1
                diff = np.max(np.abs(lb.astype(np.float64) - la.astype(np.float64))) if lb.shape == la.shape else "shape"
                print(f"DIFFERS  {name}: max |diff| {diff}")
    print(f"{compared} compared, {differ} differ, {skipped} skipped (plans differ)")
    if compared == 0:
        return 2
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
